/*
 * format.h - shard formats behind a small ops table (private).
 *
 * A format turns the bytes of a shard file into a zpi_shard: the shard's
 * records decoded into one buffer with a record offset index. Adding a
 * format is adding a file with one zpi_format and one line in format.c.
 */
#ifndef ZP_FORMAT_H
#define ZP_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "zephon/common.h"
#include "base/json.h"

typedef struct zpi_shard {
    char *data;           /* records' bytes; ZPI_JSON_PADDING readable bytes after data_len */
    size_t data_len;
    size_t data_cap;      /* bytes allocated at data, padding excluded (>= data_len) */
    uint64_t n_records;
    uint64_t *offsets;    /* n_records + 1 entries: record i is data[offsets[i] .. offsets[i+1]-1)
                             (the byte at offsets[i+1]-1 is its newline or padding) */
    uint64_t file_bytes;  /* bytes read from storage (compressed size) */
    double read_seconds;       /* time spent reading the file */
    double decompress_seconds; /* time spent decompressing (0 for plain formats) */
    /* Formats read on demand (reader.h): the open reader, which the fetch
     * operator reads records through; data and offsets are then NULL.
     * zpi_shard_free closes it. NULL for JSON shards. */
    struct zpi_reader *rd;
} zpi_shard;

/* What a load accepts: the dataset's limits, and what the dataset knows of
 * the one shard being loaded (zpi_dataset_shard_limits), checked by every
 * load so that a shard changed since it was indexed is never served. */
typedef struct zpi_load_limits {
    /* HDF5 shards: the dataset's driver hook (zp_dataset_config.h5_fapl). */
    int (*h5_fapl)(void *user, int64_t fapl, const char *path);
    void *h5_fapl_user;
    size_t max_record_bytes;
    size_t max_shard_bytes;
    int allow_empty;
    /* has_records: the record count the dataset has for the shard
     * (records_from_manifest: it came from a manifest, for the message). A
     * load that finds another count is a ZP_ERR_FORMAT naming the shard and
     * both counts. All zero (as in a zero-initialised struct): nothing is
     * expected. */
    int has_records;
    int records_from_manifest;
    uint64_t expect_records;
    /* has_xxh64: the manifest's XXH64 (seed 0) of the shard's bytes as
     * stored. The load hashes the bytes as it reads them (XXH64 runs at
     * several GB/s, far faster than decoding) and a different hash is a
     * ZP_ERR_FORMAT naming the shard, its path and both hashes. */
    int has_xxh64;
    uint64_t expect_xxh64;
} zpi_load_limits;

/* Buffers a load may reuse instead of allocating fresh memory: fresh pages
 * cost a page fault each (far more on some VMs) and must be zeroed by the
 * kernel, which for a shard decoded at 1 GB/s costs about as much again.
 * Both are malloc'd blocks; the caller owns them before and after the load. */
typedef struct zpi_load_bufs {
    char *data;     /* a spare decode buffer (data_cap + ZPI_JSON_PADDING bytes) or NULL;
                       a load that uses it moves it into the shard and sets data to NULL */
    size_t data_cap;
    char *scratch;  /* scratch for compressed bytes (or NULL); the load may grow it */
    size_t scratch_cap;
} zpi_load_bufs;

typedef struct zpi_format {
    const char *name;   /* "jsonl", "jsonl.zst" */
    const char *suffix; /* file name suffix that selects it */
    /* Load the whole shard at path. name is the shard's name for messages.
     * Errors name the shard and, where it applies, the line and byte offset:
     * "shard 'a.jsonl.zst': truncated zstd frame after line 120 (byte 53311)".
     * The load checks the expectations in lim (record count, content hash)
     * with zpi_load_check(). */
    zp_status (*load)(const char *path, const char *name, const zpi_load_limits *lim,
                      zpi_shard *out, char *err, size_t errcap);
    /* The same, reusing the buffers in *bufs (NULL: none). Optional: NULL when
     * the format cannot reuse buffers. */
    zp_status (*load_bufs)(const char *path, const char *name, const zpi_load_limits *lim,
                           zpi_load_bufs *bufs, zpi_shard *out, char *err, size_t errcap);
} zpi_format;

/* The format for a file name (by suffix) or a format name; NULL if none. */
const zpi_format *zpi_format_for_path(const char *path);
const zpi_format *zpi_format_by_name(const char *name);
/* Free a loaded shard's buffers (not the struct). */
void zpi_shard_free(zpi_shard *s);

/* ---- shared by the line-based formats (format.c) ----
 * Builds a shard's record index incrementally while its bytes arrive, so the
 * scan runs on data still in cache. Not thread-safe; one per load. */
typedef struct zpi_line_index {
    const char *name;              /* shard name for messages (borrowed) */
    const zpi_load_limits *lim;    /* borrowed */
    uint64_t *offsets;             /* start of each complete record; owned */
    size_t n, cap;                 /* records indexed so far, capacity of offsets */
    size_t line_start;             /* start of the line not yet terminated */
    size_t scanned;                /* bytes already scanned */
} zpi_line_index;

void zpi_line_index_init(zpi_line_index *ix, const char *name, const zpi_load_limits *lim);
/* Index the lines completed in data[0..len) since the last call (data may
 * have moved; only offsets are kept). Checks empty lines and line length. */
zp_status zpi_line_index_feed(zpi_line_index *ix, const char *data, size_t len, char *err,
                              size_t errcap);
/* End of data: index a final line without newline, check for an empty
 * shard, and move the offsets into out (out->n_records, out->offsets). */
zp_status zpi_line_index_finish(zpi_line_index *ix, const char *data, size_t len, zpi_shard *out,
                                char *err, size_t errcap);
void zpi_line_index_free(zpi_line_index *ix);

/* The end of every load: checks a loaded shard against lim's expectations.
 * hash: XXH64 of the bytes read, or NULL when lim->has_xxh64 is 0. A
 * mismatch of the hash is reported before one of the count (it explains
 * it). ZP_OK, or ZP_ERR_FORMAT with the message in err. */
/* The XXH64 (seed 0) of the whole file open at fd, read with pread from
 * byte 0 (fd's offset is not used). 0, or an errno: ENOMEM, or a read
 * error with *err_off (may be NULL) the offset it happened at. */
int zpi_xxh64_fd(int fd, uint64_t *out, uint64_t *err_off);

zp_status zpi_load_check(const zpi_load_limits *lim, const char *name, const char *path,
                         const uint64_t *hash, const zpi_shard *sh, char *err, size_t errcap);

#endif
