/*
 * reader.h - shards read on demand (private): HDF5 files and Megatron
 * indexed datasets (.bin/.idx).
 *
 * JSON shards are decoded whole into the shard cache (format.h). Shards of
 * these formats are not: their load opens the file (and checks it), and a
 * zpi_reader reads the records a fetch task needs, straight into the
 * caller's rows (a zpi_read_sink).
 * A reader is shared by every fetch task that pins the shard, so its read
 * must be thread-safe.
 *
 * A record of such a shard has fields (its schema, the same for every
 * shard of a dataset):
 *   text    a UTF-8 string, delivered as the record's text (what tokenize
 *           encodes; in record mode, the row's bytes);
 *   tokens  a document of token ids, delivered as the record's tokens
 *           (tokenize passes them on: they are not encoded again). A
 *           trailing EOT of a stored document is not part of it (the packer
 *           adds the separator, as for text);
 *   fixed   an array of one fixed shape and dtype per record, batched into
 *           contiguous [rows, ...] arrays (zp_batch.arrays).
 */
#ifndef ZP_READER_H
#define ZP_READER_H

#include <stddef.h>
#include <stdint.h>

#include "zephon/common.h"
#include "base/error.h"
#include "zephon/array.h"

#define ZPI_MAX_FIELDS 16
#define ZPI_MAX_DIMS 8 /* dims of a fixed field after dimension 0 */
/* A fixed field's bytes per record at most (shapes are checked before any
 * allocation). */
#define ZPI_MAX_FIXED_BYTES ((size_t)64 << 20)

typedef enum zpi_field_kind {
    ZPI_FIELD_TEXT = 1,
    ZPI_FIELD_TOKENS = 2,
    ZPI_FIELD_FIXED = 3
} zpi_field_kind;

typedef struct zpi_field {
    char name[64];          /* dataset name (HDF5: its path without the leading '/') */
    zpi_field_kind kind;
    zp_dtype dtype;         /* tokens: as stored; fixed: as stored and delivered */
    int ndim;               /* fixed: dims after dimension 0 (0: a scalar per record) */
    uint64_t dims[ZPI_MAX_DIMS];
    size_t item_bytes;      /* fixed: bytes of one record's array */
} zpi_field;

typedef struct zpi_schema {
    int n;
    zpi_field f[ZPI_MAX_FIELDS];
} zpi_schema;

/* 1 when a and b have the same fields (names, kinds, dtypes, shapes), in the
 * same order. */
int zpi_schema_equal(const zpi_schema *a, const zpi_schema *b);
/* "text:str, tokens:uint16[], x:float32[4,8]" into buf (for messages). */
void zpi_schema_describe(const zpi_schema *s, char *buf, size_t cap);

/* Where a read delivers its records: rows of the caller's batch of work
 * (the fetch operator's chunk: zpi_chunk_sink() in ops/chunk.h). */
typedef struct zpi_read_sink {
    void *ctx;
    /* Row `row`'s text, copied. ZP_OK or ZP_ERR_NOMEM. */
    zp_status (*put_text)(void *ctx, size_t row, const char *s, size_t n);
    /* Room for n ids of row `row` at *dst, which the reader fills; valid
     * until the next put. ZP_OK or ZP_ERR_NOMEM. */
    zp_status (*put_tokens)(void *ctx, size_t row, size_t n, int32_t **dst);
    /* Takes back the last put_tokens (row, n): its ids were not token ids,
     * the row has no tokens. */
    void (*unput_tokens)(void *ctx, size_t row, size_t n);
    /* Row `row` of fixed field k (the schema's field k, item_bytes long). */
    void *(*fixed_row)(void *ctx, int k, size_t row);
} zpi_read_sink;

/* One read: records[k] of the shard goes to row rows[k] of the sink. */
typedef struct zpi_read_req {
    zpi_read_sink out;
    const uint64_t *records; /* n record indices, ascending; a record may repeat
                                (remainder padding): each of its rows gets it */
    const size_t *rows;
    size_t n;
    /* The string field delivered as text: the tokenize field; NULL: the
     * schema's only string field (none delivered when there are several). */
    const char *text_field;
    /* A problem with one record (not with the file): the fetch operator
     * applies the bad-record policy. msg names file, dataset and record. */
    void (*bad)(void *ctx, size_t row, zp_status st, const char *msg);
    void *bad_ctx;
    /* out, added to (observability) */
    uint64_t bytes;        /* bytes read from the file */
    uint64_t io_ns;        /* time in the format library's read calls */
    uint64_t lock_wait_ns; /* time waiting for the HDF5 lock (0 for others) */
} zpi_read_req;

typedef struct zpi_reader zpi_reader;
struct zpi_reader {
    const zpi_schema *schema; /* owned by the reader */
    /* The shard's record of the tokenizer that made its token field (HDF5:
     * the root attribute zephon_tokenizer that zephon preprocess writes,
     * zp_tokenizer_ident()); NULL: none. Owned by the reader. */
    const char *tokenizer;
    /* Deliver the records of req into req->out (put_text, put_tokens,
     * fixed_row). Reads consecutive records
     * with one selection (HDF5: one H5Dread per field for all of req's
     * records), never one call per record. A problem with the file fails
     * the read (ZP_ERR_FORMAT / ZP_ERR_IO, message naming file and dataset
     * into err); one with a record goes to req->bad. Thread-safe. */
    zp_status (*read)(zpi_reader *rd, zpi_read_req *req, zpi_err *err);
    void (*close)(zpi_reader *rd);
};

#endif
