/*
 * shard_cache.h - decoded shards held in memory, shared by the fetch
 * workers of one pipeline (private).
 *
 * The cache holds at most `budget_bytes` of decoded shard data that nobody
 * uses; shards in use (pinned) are never evicted, so the resident size is
 * budget_bytes + the pinned shards. Two workers asking for the same shard
 * load it once (the second waits). Thread-safe.
 */
#ifndef ZP_SHARD_CACHE_H
#define ZP_SHARD_CACHE_H

#include "format.h"
#include "zephon/dataset.h"

typedef struct zpi_shard_cache zpi_shard_cache;

typedef struct zpi_shard_cache_stats {
    uint64_t hits, misses, evictions, loads_failed;
    uint64_t bytes_resident;
} zpi_shard_cache_stats;

zp_status zpi_shard_cache_create(const zp_dataset *ds, size_t budget_bytes, zpi_shard_cache **out);
void zpi_shard_cache_destroy(zpi_shard_cache *c);

/* Pin shard `index` (loading it if needed). On error the message (naming the
 * shard, line and cause) is written into err. *loaded is set to 1 when this
 * call did the load (for timing metrics). */
zp_status zpi_shard_cache_get(zpi_shard_cache *c, uint32_t index, const zpi_shard **out,
                              int *loaded, char *err, size_t errcap);
/* Unpin a shard got with zpi_shard_cache_get(). */
void zpi_shard_cache_put(zpi_shard_cache *c, uint32_t index);
void zpi_shard_cache_stats_get(zpi_shard_cache *c, zpi_shard_cache_stats *st);

#endif
