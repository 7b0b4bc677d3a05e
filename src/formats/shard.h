/*
 * shard.h - a loaded shard, what a load accepts, and the ops table of a
 * shard format (private). The formats (format_*.c) implement zpi_format;
 * the table of formats (format.h) lists them.
 */
#ifndef ZP_SHARD_H
#define ZP_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "zephon/common.h"
#include "base/filehash.h"
#include "base/json.h"

typedef struct zpi_shard {
    char *data;           /* records' bytes; ZPI_JSON_PADDING readable bytes after data_len */
    size_t data_len;
    size_t data_cap;      /* bytes allocated at data, padding excluded (>= data_len) */
    uint64_t n_records;
    uint64_t *offsets;    /* n_records + 1 entries: record i is data[offsets[i] .. offsets[i+1]-1)
                             (the byte at offsets[i+1]-1 is its newline or padding) */
    uint64_t first_record; /* the shard's record held as record 0 here: 0 for a whole
                              shard, the segment's first record for a segment (segment.h) */
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
    /* has_bytes: the shard's size as its manifest says, for a shard added
     * without a stat() (zp_dataset_trust_manifest): zpi_load_check_size()
     * stats it before the load. */
    int has_bytes;
    uint64_t expect_bytes;
} zpi_load_limits;

/* A local shard added without a stat() (lim->has_bytes): its file must be
 * a regular file of lim->expect_bytes bytes (one stat()). ZP_OK (also
 * when lim->has_bytes is 0); ZP_ERR_IO when it cannot be opened or is not
 * a regular file, ZP_ERR_FORMAT for another size, naming the shard, its
 * path and both sizes. */
zp_status zpi_load_check_size(const zpi_load_limits *lim, const char *name, const char *path,
                              zpi_err *err);

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

/* How a format's shards are read by segments (zpi_format.seg; docs/datasets.md
 * "Segments"). The segmented formats are the text ones, whose records are
 * JSON lines (Parquet's rows are delivered as such): what `zephon
 * preprocess` reads. The others are read whole or by their own on-demand
 * reader. */
enum {
    ZPI_FMT_NO_SEGMENTS = 0,
    ZPI_FMT_SEG_PLAIN,   /* .jsonl: pread */
    ZPI_FMT_SEG_ZSTD,    /* .jsonl.zst: seek table or a streaming decoder */
    ZPI_FMT_SEG_GZIP,    /* .jsonl.gz: a streaming decoder */
    ZPI_FMT_SEG_PARQUET  /* .parquet: its row groups (parquet.h) */
};

typedef struct zpi_format {
    const char *name;   /* "jsonl", "jsonl.zst" */
    const char *suffix; /* file name suffix that selects it */
    int seg;            /* ZPI_FMT_NO_SEGMENTS or how segments are read (above) */
    /* Load the whole shard at path. name is the shard's name for messages.
     * Errors name the shard and, where it applies, the line and byte offset:
     * "shard 'a.jsonl.zst': truncated zstd frame after line 120 (byte 53311)".
     * The load checks the expectations in lim (record count, content hash)
     * with zpi_load_check(). */
    zp_status (*load)(const char *path, const char *name, const zpi_load_limits *lim,
                      zpi_shard *out, zpi_err *err);
    /* The same, reusing the buffers in *bufs (NULL: none). Optional: NULL when
     * the format cannot reuse buffers. */
    zp_status (*load_bufs)(const char *path, const char *name, const zpi_load_limits *lim,
                           zpi_load_bufs *bufs, zpi_shard *out, zpi_err *err);
    /* The shard's record count and stored size without decoding it, from
     * its metadata (Parquet: the footer). Optional: NULL when a count needs
     * a load. Checks lim's size expectation (zpi_load_check_size), not its
     * content hash (that needs every byte: the first load checks it). */
    zp_status (*count)(const char *path, const char *name, const zpi_load_limits *lim,
                       uint64_t *records, uint64_t *file_bytes, zpi_err *err);
    /* The same from the last tail_len bytes of a file of file_size bytes (a
     * range read of a remote object): ZP_OK with *records, or ZP_END with
     * *need set to the bytes of tail it needs (read them and call again).
     * Optional. */
    zp_status (*count_tail)(const void *tail, size_t tail_len, uint64_t file_size,
                            const char *name, uint64_t *records, size_t *need, zpi_err *err);
} zpi_format;

/* Free a loaded shard's buffers (not the struct). */
void zpi_shard_free(zpi_shard *s);

/* A load's decoded records into out: data[0..len) of a buffer of cap bytes
 * (and its padding). A large unused tail (more than 1 MiB and a quarter of
 * the data) is given back; a buffer a little larger is kept whole, so that
 * the next load of about the same size fits it again (a recycled buffer).
 * Zeroes the padding; sets data, data_len, data_cap. */
void zpi_shard_set_data(zpi_shard *out, char *data, size_t len, size_t cap);
/* The same, keeping the whole buffer (the caller bounds its spare room). */
void zpi_shard_set_data_keep(zpi_shard *out, char *data, size_t len, size_t cap);

/* hash (XXH64 of a shard's stored bytes) against the manifest's, when lim
 * has one: ZP_OK, or ZP_ERR_FORMAT naming the shard, path and both hashes. */
zp_status zpi_load_check_hash(const zpi_load_limits *lim, const char *name, const char *path,
                              uint64_t hash, zpi_err *err);

/* The same for the file at path, hashed whole (streamed with pread), when
 * lim has a hash: for readers that read only part of a file (Parquet, the
 * segments of a shard). ZP_ERR_IO naming the shard, the path and where a
 * read failed; ZP_ERR_NOMEM. */
zp_status zpi_load_check_file_hash(const zpi_load_limits *lim, const char *name, const char *path,
                                   zpi_err *err);

/* The end of every load: checks a loaded shard against lim's expectations.
 * hash: XXH64 of the bytes read, or NULL when lim->has_xxh64 is 0. A
 * mismatch of the hash is reported before one of the count (it explains
 * it). ZP_OK, or ZP_ERR_FORMAT with the message in err. */
zp_status zpi_load_check(const zpi_load_limits *lim, const char *name, const char *path,
                         const uint64_t *hash, const zpi_shard *sh, zpi_err *err);

#endif
