/*
 * zephon/dataset.h - a dataset is an ordered list of shards.
 *
 * A shard is a file of records (JSON objects, one per line) in one of the
 * supported formats: "jsonl" and "jsonl.zst" (zstd-compressed JSONL, one or
 * many frames). Shards are added as paths, glob patterns, folders or a
 * manifest (docs/datasets.md describes the manifest). The order in which
 * shards are added is the dataset's order; sample ids are (shard index,
 * record index). A file is in a dataset once: reaching it a second time
 * (by another name, through a link, by two globs) is an error naming both.
 *
 * Errors: every call that fails keeps its message on the handle
 * (zp_dataset_errmsg) until the next failing call; it is returned, not
 * logged (the log callback carries warnings that do not fail a call).
 *
 * Thread safety: building a dataset (add/index) is not thread-safe. Once
 * built, the const accessors may be called from any thread.
 */
#ifndef ZEPHON_DATASET_H
#define ZEPHON_DATASET_H

#include "common.h"
#include "storage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zp_dataset zp_dataset;

typedef struct zp_dataset_config {
    /* Longest record (one line, without its newline) in bytes; a longer line
     * is a ZP_ERR_LIMIT naming shard and line. Default 16 MiB. */
    size_t max_record_bytes;
    /* Largest uncompressed shard held in memory, in bytes. A shard of one
     * segment (segment_bytes) is decoded whole into memory when first
     * opened, a larger one a segment at a time; a shard (or segment) larger
     * than this is a ZP_ERR_LIMIT. Default 2 GiB. */
    size_t max_shard_bytes;
    /* 1: a shard with no records is accepted. 0 (default): it is a
     * ZP_ERR_FORMAT naming the shard. */
    int allow_empty_shards;
    /* Optional log sink (borrowed; must outlive the dataset). Default NULL. */
    zp_log_fn log;
    void *log_user;
    /* Folder of the index store: record counts kept on disk between runs
     * (a path; the string is copied at create). Default NULL (or ""): off.
     * When set, zp_dataset_index() takes the record count of a shard from
     * the store when an entry matches the shard's absolute path, size,
     * mtime (ns) and format, and writes an entry after counting one. The
     * folder must exist at create (else ZP_ERR_INVALID naming it); a store
     * that cannot be read or written later is logged (ZP_LOG_WARN) and
     * otherwise ignored: it never makes indexing fail. Not the shard cache
     * (decoded shards in memory during a run). See docs/datasets.md "Index
     * store". index_cache_dir is the former name of the same field, kept as
     * an alias. */
    union {
        const char *index_store_dir;
        const char *index_cache_dir; /* alias (former name) */
    };
    /* Remote shards and manifests (http://, https://, s3://): the shard
     * cache on disk, timeouts, retries, TLS, S3 (zephon/storage.h, filled
     * by zp_dataset_config_init; a field left 0 takes its default). */
    zp_storage_config storage;
    /* HDF5 shards: called with the file access property list (an hid_t)
     * before each HDF5 file is opened, under the library's HDF5 lock, to
     * choose its driver. The MPI layer sets it to open shared files through
     * MPI-IO (zephon/mpi.h); NULL (default): the serial (sec2) driver.
     * Returns 0, or nonzero to refuse the open (the shard's load fails). */
    int (*h5_fapl)(void *user, int64_t fapl, const char *path);
    void *h5_fapl_user;
    /* Segments of line-based shards (.jsonl, .jsonl.zst, .jsonl.gz), in bytes as
     * stored: a shard of B stored bytes is read in ceil(B / segment_bytes)
     * segments of equal record counts (docs/datasets.md "Segments"), so
     * that memory follows the segment, not the shard. Part of the dataset's
     * definition: it changes the shuffled order of shards larger than one
     * segment (never the memory budget or thread count does). 0 (default):
     * 8 MiB for .jsonl, 2 MiB for .jsonl.zst and .jsonl.gz (about 8 MiB
     * decoded at a ratio of 4); SIZE_MAX: every shard is one segment (whole shards). */
    size_t segment_bytes;
} zp_dataset_config;

/* Fill cfg with the defaults above. */
ZP_API void zp_dataset_config_init(zp_dataset_config *cfg);

/* Create an empty dataset. cfg may be NULL for defaults (it is copied).
 * OUT: *out, caller owns; release with zp_dataset_destroy().
 * @return ZP_OK; ZP_ERR_INVALID for a setting out of range (the message
 * names the setting and its value: "index_store_dir = '/x': cannot use the
 * folder: No such file or directory"); ZP_ERR_NOMEM.
 * On failure *out still holds a handle that holds only the error (NULL
 * only when even that could not be allocated): read zp_dataset_errmsg(),
 * then release it with zp_dataset_destroy(); every other call on it returns
 * the create's status. */
ZP_API zp_status zp_dataset_create(const zp_dataset_config *cfg, zp_dataset **out);

/* Destroy; NULL is accepted. */
ZP_API void zp_dataset_destroy(zp_dataset *ds);

/* Add shards. spec is one of:
 *  - a path ending in .jsonl or .jsonl.zst;
 *  - a folder: its manifest.json when it has one, else its shard files
 *    (.jsonl, .jsonl.zst; not in subfolders) in bytewise order of their
 *    names; other entries are skipped and counted in one ZP_LOG_WARN
 *    message; a folder without shard files is an error;
 *  - a glob pattern (matches are added in bytewise order; no match is an
 *    error; a match that is neither a shard nor a .json manifest too);
 *  - a manifest: a path ending in .json (see docs/datasets.md).
 * Paths inside a manifest are relative to the manifest's folder.
 * The shard's name (as used in sample ids and messages) is spec as given
 * (each match as matched for a glob; "folder/file" for a folder), or for a
 * manifest entry its "name", by default its "path" as written.
 * A file already in the dataset (same device and inode, whatever the
 * spelling or link) is ZP_ERR_INVALID naming both shards.
 *  - a URL (http://, https://, s3://) of a shard or of a manifest (.json);
 *    its size comes from a HEAD request (or the manifest's "bytes"), its
 *    bytes are downloaded into the shard cache on disk when first read
 *    (docs/storage.md). Relative paths in a remote manifest are relative
 *    to its URL's folder. A URL shard is named by the URL without its
 *    secrets (user:password@, query string); it is in the dataset once
 *    (scheme, host and path compared).
 * All or nothing: on error the dataset is as before the call. */
ZP_API zp_status zp_dataset_add(zp_dataset *ds, const char *spec);

/* spec as it may be shown or kept where others can read it (messages, a
 * mixture part's name, a report, a metric, a state): a URL without its
 * user:password@ and with its query string (X-Amz-Signature, tokens)
 * replaced by "?<redacted>", as the dataset names a URL shard; anything
 * else as given. Deterministic: the same spec gives the same text. Writes
 * at most cap bytes, always NUL-terminated (cap > 0; cut at cap - 1). Any
 * thread. docs/storage.md, "Secrets". */
ZP_API void zp_dataset_spec_redact(const char *spec, char *out, size_t cap);

/* Never read the file at path (the manifest a program is about to write
 * from this dataset, as `zephon index -o` does): a glob skips it, a folder
 * whose manifest.json it is is read as its shard files, and naming it
 * directly is ZP_ERR_INVALID. Compared by device and inode, so a file that
 * does not exist yet excludes nothing (no glob can match it). Call before
 * zp_dataset_add(); a second call replaces the first. */
ZP_API zp_status zp_dataset_exclude(zp_dataset *ds, const char *path);

/* The dataset as compact bytes for zp_dataset_add_packed() in another
 * process running the same build (what zp_mpi_dataset_create broadcasts):
 * each shard's name, canonical absolute path (a URL as given), format,
 * size, record count and known hash, as zp_dataset_manifest_json(ds, 0,
 * NULL, ...) describes them, without JSON: decoding 100,000 shards takes
 * milliseconds where parsing their manifest takes most of a second. Not a
 * file format: the layout may change between versions. Indexes shards
 * without counts first. OUT: *out malloc'd (caller frees), *len bytes
 * (len may be NULL). */
ZP_API zp_status zp_dataset_pack(zp_dataset *ds, char **out, size_t *len);

/* Add the shards of zp_dataset_pack()'s bytes (borrowed for the call),
 * trusted as the packing process checked them: a local shard is not
 * stat()ed when added (its size is the packed one, checked when the shard
 * is first loaded: a missing file ZP_ERR_IO, another size ZP_ERR_FORMAT
 * naming the shard, its path and both sizes), and neither "one file under
 * two names" (a hard link, a symlink; the same path twice still is) nor
 * the unfinished-preprocess marker is looked for. Otherwise as a manifest
 * entry (formats, remote shards, names). All or nothing, like
 * zp_dataset_add(). ZP_ERR_FORMAT for bytes that are not packed by this
 * version (named "packed dataset"). */
ZP_API zp_status zp_dataset_add_packed(zp_dataset *ds, const char *buf, size_t len);

/* Add the shards of a manifest given as bytes (JSON, len bytes; no NUL
 * needed at the end), exactly as zp_dataset_add() adds a manifest file:
 * the same fields, validation and messages (the manifest is named
 * "manifest (in memory)" in them). Relative paths resolve against base_dir
 * (a folder, with or without its final '/'), NULL for the current folder.
 * json is borrowed for the call. All or nothing, like zp_dataset_add().
 * @return ZP_OK; ZP_ERR_FORMAT for bytes that are not a valid manifest (the
 * message names the line and column of a JSON syntax error, or the
 * field); ZP_ERR_IO for a shard that cannot be opened;
 * ZP_ERR_INVALID for NULL arguments. */
ZP_API zp_status zp_dataset_add_manifest_json(zp_dataset *ds, const char *json, size_t len,
                                       const char *base_dir);

/* Count the records of every shard whose count is not known yet (shards not
 * from a manifest). Reads each such shard once, unless its count is in the
 * index store (index_store_dir); the counts are kept, so a second call does
 * nothing. A shard with a content hash in its manifest is checked while it
 * is read. Called implicitly by zp_worksource_create(). */
ZP_API zp_status zp_dataset_index(zp_dataset *ds);

/* Write a manifest describing every shard (indexes first if needed). With
 * with_hash != 0 each shard's XXH64 content hash (of its bytes on disk) is
 * written too. Shard paths are written so that they resolve from the
 * manifest's folder: names that already resolve from there as given, files
 * under that folder relative to it, others as absolute paths; a shard named
 * by a manifest's "name" keeps it (docs/datasets.md). The same dataset
 * gives the same bytes. The file is replaced atomically (written beside it,
 * then renamed). */
ZP_API zp_status zp_dataset_write_manifest(zp_dataset *ds, const char *path, int with_hash);

/* The manifest zp_dataset_write_manifest() would write (indexes first if
 * needed), as bytes instead of a file: *out is NUL-terminated JSON of *len
 * bytes (the NUL not counted; len may be NULL).
 * base_dir: the folder the manifest is for; paths are written as
 * zp_dataset_write_manifest() writes them for the manifest's folder (""
 * is the current folder), and a shard's name is written as "name" only
 * when it came from a manifest's "name" and differs from the path written.
 * base_dir NULL: a manifest that does not depend on any folder: paths are
 * canonical absolute paths, and every shard
 * name that differs from the path written is kept as "name" -- read back
 * (zp_dataset_add_manifest_json) it gives the same names, counts and
 * fingerprint wherever it is read, and a content hash known from a
 * manifest is kept (even with with_hash 0), so every reader checks it.
 * The MPI layer broadcasts this form.
 * OUT: *out, caller owns; release with free(). On error *out is NULL. */
ZP_API zp_status zp_dataset_manifest_json(zp_dataset *ds, int with_hash, const char *base_dir, char **out,
                                   size_t *len);

/* Verify the content hash of every shard that has one (from a manifest).
 * A mismatch is ZP_ERR_FORMAT naming the shard. (Every load of such a
 * shard checks it too, as it reads the bytes: this call checks them all
 * up front.) */
ZP_API zp_status zp_dataset_verify(zp_dataset *ds);

ZP_API size_t zp_dataset_num_shards(const zp_dataset *ds);
/* Total records. Valid after zp_dataset_index(). */
ZP_API uint64_t zp_dataset_num_samples(const zp_dataset *ds);
/* Shard name (borrowed, valid until the dataset is destroyed). NULL when i
 * is out of range. */
ZP_API const char *zp_dataset_shard_name(const zp_dataset *ds, size_t i);
/* Record count of shard i (UINT64_MAX when not indexed yet). */
ZP_API uint64_t zp_dataset_shard_samples(const zp_dataset *ds, size_t i);
/* Size on disk of shard i in bytes. */
ZP_API uint64_t zp_dataset_shard_bytes(const zp_dataset *ds, size_t i);
/* Segments of shard i and the records of each but the last (its records
 * when one segment); 0 when i is out of range or its count unknown. */
ZP_API uint64_t zp_dataset_shard_segments(const zp_dataset *ds, size_t i,
                                          uint64_t *records_per_segment);
/* A 64-bit hash of the dataset's description (per shard in order: its
 * name without its folders -- a URL's whole --, format, size and count):
 * equal on every rank that sees the same dataset, and for every spelling
 * of the same files' paths (relative, absolute, "a/../a") and every folder
 * they are copied to. */
ZP_API uint64_t zp_dataset_fingerprint(const zp_dataset *ds);

/* The last error's detail (borrowed, valid until the next call on ds).
 * Never NULL ("" when there was none). */
ZP_API const char *zp_dataset_errmsg(const zp_dataset *ds);

#ifdef __cplusplus
}
#endif
#endif
