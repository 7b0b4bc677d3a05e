/*
 * hdf5_internal.h - what the HDF5 files share (private to src/formats/):
 *
 *   hdf5_lock.c           the HDF5 lock and HDF5's error message (hdf5_util.h)
 *   hdf5_common.c         type helpers, the variable-length allocator, reporting a
 *                         bad record, pread
 *   format_hdf5.c         opening a shard: its checks and its fields (the reader's load)
 *   hdf5_check.c          the checks of variable-length data before HDF5 follows it
 *   hdf5_read.c           reading records into the caller's rows (the reader's read)
 *   hdf5_write.c          what the writers share: temporary file, appending
 *   hdf5_write_tokens.c   the token writer (tokw.h)
 *   hdf5_write_samples.c  the sample file (hdf5_util.h)
 *
 * Calls run one way, down this list's dependencies: format_hdf5.c sets
 * zpi_h5_read as the reader's read; hdf5_read.c calls hdf5_check.c; every
 * file may call hdf5_common.c and hdf5_lock.c; the writers call hdf5_write.c.
 */
#ifndef ZP_HDF5_INTERNAL_H
#define ZP_HDF5_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <hdf5.h>

#include "formats/hdf5_util.h"
#include "formats/reader.h"

/* ================================================================ the reader */

enum { K_TEXT_VLEN = 1, K_TEXT_FIXED, K_TOK_VLEN, K_TOK_RAGGED, K_FIXED };

typedef struct h5_field {
    int kind;
    hid_t dset;     /* the dataset (ragged: values) */
    hid_t offs;     /* ragged: offsets */
    hid_t memtype;  /* memory type of one element as read */
    size_t str_size;         /* K_TEXT_FIXED: bytes per string */
    int spacepad;            /* K_TEXT_FIXED: padded with spaces */
    size_t elem_size;        /* fixed/tokens: bytes per stored element (native) */
    uint64_t n_elems;        /* fixed: elements per record */
    uint64_t n_values;       /* ragged: len(values) */
    int offs_signed;         /* ragged: offsets are int64 */
    char path[80];           /* "/text", "/tokens" (group) */
    /* variable-length fields: where the raw descriptors are, to check the
     * heap references before HDF5 follows them (zpi_h5_vlen_check) */
    int chunked;             /* 0: contiguous at raw_addr; 1: chunks of chunk_dim */
    uint64_t raw_addr;       /* contiguous: absolute file offset, UINT64_MAX: not allocated */
    uint64_t chunk_dim;
    size_t disk_base;        /* bytes per sequence element on disk (strings: 1) */
    /* fixed fields and the ragged layout's datasets stored contiguous,
     * unfiltered and little-endian in a file opened with the serial
     * driver: their absolute file offsets (UINT64_MAX: read through HDF5).
     * Reads of these are pread()s of the runs, without the HDF5 lock
     * (direct_runs). */
    uint64_t direct_addr;      /* dset (fixed, ragged values) */
    uint64_t direct_offs_addr; /* ragged offsets */
} h5_field;

typedef struct h5_reader {
    zpi_reader base;
    zpi_schema schema;
    h5_field hf[ZPI_MAX_FIELDS];
    hid_t file;
    uint64_t n;
    size_t max_record_bytes;
    char *name; /* shard name, for messages */
    char *tokenizer; /* the attribute zephon_tokenizer, or NULL (base.tokenizer) */
    int fd;     /* the file, for the checks of variable-length data (pread) */
    uint64_t file_size;
    size_t sizeof_addr, sizeof_size; /* of the file's addresses and lengths */
    uint64_t base_addr;              /* the user block's size: addresses are relative to it */
    int sec2;                        /* opened with the serial driver (direct reads allowed) */
    /* heap collections already parsed by zpi_h5_vlen_check (their object tables),
     * shared by the reads of this shard: a shuffled read meets a
     * collection (often MBs) many times */
    pthread_mutex_t gc_mu;
    int gc_init;
    struct gc_entry {
        uint64_t addr;
        uint32_t nidx;
        uint64_t *off, *len; /* NULL: a free slot */
    } *gc;                   /* GC_SLOTS, open addressing by address */
    size_t gc_used;
} h5_reader;

/* Heap collection tables kept per shard: a 64 KiB collection holds ~50
 * strings of 1 KiB, so 3072 tables cover ~150k records (their tables take
 * ~16 B per object); when full, the table is emptied and filled again. */
#define GC_SLOTS 4096
#define GC_MAX_USED 3072

/* Variable-length memory for H5Dread: our malloc, refusing an element
 * above cap bytes (a corrupt or hostile length) before HDF5 fills it. */
typedef struct vlen_alloc {
    size_t cap;
    size_t refused; /* the size of the first refused element, 0: none */
} vlen_alloc;

void *zpi_h5_vlen_malloc(size_t size, void *info);
void zpi_h5_vlen_free(void *p, void *info);

/* ---- type helpers (hdf5_common.c) ---- */

/* 1 when s[0..n) is valid UTF-8. */
int zpi_h5_utf8_valid(const unsigned char *s, size_t n);
/* The native HDF5 type of t (not to be closed); -1 for none. */
hid_t zpi_h5_native_of(zp_dtype t);
/* "integer", "float", ... for messages. */
const char *zpi_h5_class_name(H5T_class_t c);
/* The zp_dtype of an HDF5 integer or float type (ZP_DTYPE_NONE for others). */
zp_dtype zpi_h5_dtype_of(hid_t t);
/* Element i of p (stored as t), as a signed 64-bit value. */
int64_t zpi_h5_tok_at(const void *p, zp_dtype t, size_t i);
/* n elements of src (stored as t) from off into dst as int32 token ids; 0,
 * or -1 with the first element outside 0 .. 2^31-1 at *bad_at. */
int zpi_h5_tok_convert(const void *src, zp_dtype t, size_t off, size_t n, int32_t *dst,
                       size_t *bad_at);
/* n bytes at off: 0, or -1 with errno (0 at the end of the file). */
int zpi_h5_pread_all(int fd, void *buf, size_t n, uint64_t off);

/* ---- one read (hdf5_read.c, hdf5_check.c) ---- */

typedef struct run {
    uint64_t start, len;
} run;

typedef struct rctx {
    h5_reader *r;
    zpi_read_req *req;
    zpi_err *err;
    /* unique records, runs of consecutive ones, and per request the unique index */
    uint64_t *u;
    size_t nu;
    run *runs;
    size_t nr;
    size_t *map;
} rctx;

#define RFAIL(R, st, ...)                                                                          \
    do {                                                                                           \
        char m_[512];                                                                              \
        zpi_fmt(m_, sizeof m_, __VA_ARGS__);                                                       \
        return zpi_err_set((R)->err, (st), "shard '%s': %s", (R)->r->name, m_);                   \
    } while (0)


/* A problem with one record: the read's bad callback, the message prefixed
 * with the shard's name. */
void zpi_h5_bad(rctx *R, size_t row, zp_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Where a checked element's bytes are (zpi_h5_vlen_check's loc). */
typedef struct vloc {
    uint64_t off;    /* absolute file offset */
    uint64_t nbytes; /* 0: empty or nil */
} vloc;


/* hdf5_check.c: checks every descriptor of the records about to be read
 * (their heap objects exist, lie inside their collections, have the
 * lengths the descriptors say); loc[ui] gets where record ui's bytes are. */
zp_status zpi_h5_vlen_check(rctx *R, const h5_field *hf, vloc *loc);
/* hdf5_check.c: the strings located by zpi_h5_vlen_check, read with pread
 * into malloc'd, NUL-terminated buffers (out[ui]; NULL for nil elements). */
zp_status zpi_h5_direct_vlen(rctx *R, const h5_field *hf, const vloc *loc, size_t cap,
                             char **out);

/* hdf5_read.c: the reader's read (reader.h). */
zp_status zpi_h5_read(zpi_reader *rd, zpi_read_req *req, zpi_err *err);

/* ================================================================ the writers (hdf5_write.c) */

/* A temporary beside path (base/fsio.h), created empty; malloc'd. */
char *zpi_h5_part_name(const char *path);
/* Makes part final as path (synced, renamed, the folder synced). 0, or -1
 * with the reason in why. */
int zpi_h5_fsync_rename(const char *part, const char *path, char *why, size_t cap);
/* A new file at part (truncated), strong close degree. Under the lock. */
hid_t zpi_h5_create_file(const char *part);
/* Appends n elements of buf to the 1-D extendible dataset d (now `have`
 * long). Under the lock. 0, or -1 with HDF5's message in zpi_h5_w_last. */
int zpi_h5_append_1d(hid_t d, hid_t mt, uint64_t have, const void *buf, size_t n);
/* The writer's last HDF5 failure, captured where it happened; per thread. */
extern _Thread_local char zpi_h5_w_last[256];

#endif
