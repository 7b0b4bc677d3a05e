/*
 * index_store.h - the index store: record counts of shard files kept on
 * disk between runs, so that a dataset without a manifest is not read
 * whole at every start (private; docs/datasets.md "Index store").
 *
 * Not to be confused with the shard cache (shard_cache.h), which holds
 * decoded shards in memory during a run. The index store holds one small
 * JSON file per shard, named by the XXH64 of the shard's canonical path and
 * format:
 *
 *   {"zephon_index_cache": 1, "path": "/abs/a.jsonl.zst", "format": "jsonl.zst",
 *    "bytes": 123, "mtime_ns": 1700000000123456789, "samples": 7,
 *    "longest_record": 80, "decoded_bytes": 560}
 *
 * (the tag keeps the name of the first version of the format). An entry is
 * used only when path, format, bytes and mtime_ns all match the shard as it
 * is now, and its longest record and decoded size are within the loading
 * limits (so a hit accepts exactly what a load would).
 *
 * Failures of the store never fail the caller: a folder that cannot be read
 * or written is logged (the first time of an index pass at ZP_LOG_WARN, then
 * at ZP_LOG_DEBUG) and the shard is counted by loading it.
 *
 * Thread safety: a store is used by one thread at a time; several
 * processes (and hosts) may share a folder (entries are replaced by rename).
 */
#ifndef ZP_INDEX_STORE_H
#define ZP_INDEX_STORE_H

#include <stdint.h>

#include "formats/format.h"
#include "zephon/common.h"

typedef struct zpi_index_store zpi_index_store;

/* The key of one shard as it is now (see zpi_index_key_init). */
typedef struct zpi_index_key {
    char *abs;          /* canonical absolute path of the shard; owned */
    const char *format; /* static */
    uint64_t bytes;
    int64_t mtime_ns;
    char *file;         /* the entry's path; owned */
} zpi_index_key;

/* One index pass: counts and whether a failure was logged at WARN already. */
typedef struct zpi_index_pass {
    size_t hits, misses;
    int warned;
} zpi_index_pass;

/* A store over folder dir (copied). log/log_user: the owner's log sink
 * (borrowed; may be NULL). ZP_ERR_NOMEM is the only failure. */
zp_status zpi_index_store_create(const char *dir, zp_log_fn log, void *log_user,
                                 zpi_index_store **out);
void zpi_index_store_destroy(zpi_index_store *st);
const char *zpi_index_store_dir(const zpi_index_store *st);

/* The key of the shard file at path in format fmt, as it is now. -1 when
 * the file cannot be stat'ed or resolved (then it is counted without the
 * store, and the load says why it cannot be read). Release with
 * zpi_index_key_free(). */
int zpi_index_key_init(const zpi_index_store *st, const char *path, const zpi_format *fmt,
                       zpi_index_key *k);
void zpi_index_key_free(zpi_index_key *k);

/* 1 and *samples on a hit; 0 on a miss (logged: DEBUG for an absent,
 * stale or foreign entry, WARN for one that cannot be read or is corrupt).
 * name: the shard's name for messages; lim: the limits a load would apply. */
int zpi_index_store_lookup(zpi_index_store *st, const zpi_index_key *k, const char *name,
                           const zpi_load_limits *lim, uint64_t *samples, zpi_index_pass *pass);

/* Keep the count of the shard at path (key k taken before it was loaded
 * into sh), unless the file changed meanwhile or was modified less than
 * 2 s ago (a same-size rewrite within the timestamp granularity of some
 * file systems would not be seen). Failures are logged, never returned. */
void zpi_index_store_save(zpi_index_store *st, const zpi_index_key *k, const char *path,
                          const char *name, const zpi_shard *sh, zpi_index_pass *pass);

#endif
