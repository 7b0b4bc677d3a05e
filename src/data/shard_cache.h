/*
 * shard_cache.h - the shard cache: decoded shards held in memory, shared by
 * the fetch and prefetch tasks of one pipeline (private).
 *
 * Not to be confused with the index cache (record counts of shards kept on
 * disk between runs, see dataset.c): the shard cache lives in memory, for
 * one pipeline.
 *
 * Its unit is a segment of a shard (docs/datasets.md "Segments"): what
 * is said of shards below holds for segments, keep_shards counting
 * segments. A shard of one segment is one unit, unit id = shard id.
 *
 * Memory bound (docs/datasets.md, "Loading and the memory bound"): the
 * cache keeps at most `budget_bytes` of decoded shards that no task uses,
 * except that the `keep_shards` shards used most recently (the working set
 * of the current shuffle block) are never evicted, so that a shard larger
 * than the budget is decoded once per pass and not once per chunk. Resident:
 *   max(budget, working set) + pinned shards + spare buffers,
 * where the spare buffers are at most ZPI_SHARD_CACHE_SPARES decode buffers
 * of evicted shards kept for the next loads (no fresh pages to fault in) and
 * one compressed-file buffer per concurrent load. When the working set
 * pushes the cache past its budget, it warns once through the log callback,
 * naming the size it needs. Two tasks asking for the same shard load it
 * once (the second waits). Thread-safe.
 */
#ifndef ZP_SHARD_CACHE_H
#define ZP_SHARD_CACHE_H

#include "formats/format.h"
#include "zephon/dataset.h"

typedef struct zpi_shard_cache zpi_shard_cache;

/* Decode buffers of evicted shards kept for reuse (with segments: as many
 * as half the working set, at most 64). */
#define ZPI_SHARD_CACHE_SPARES 2

typedef struct zpi_shard_cache_config {
    size_t budget_bytes; /* decoded bytes of unused shards kept (beyond the working set) */
    size_t keep_shards;  /* working set: the shards used most recently that are kept
                            whatever the budget (0: none, the budget alone decides) */
    zp_log_fn log;       /* optional; borrowed; called at most once, from any thread */
    void *log_user;
    /* Remote shards are read through it (borrowed; NULL: local shards only). */
    struct zpi_fetcher *fetcher;
} zpi_shard_cache_config;

typedef struct zpi_shard_cache_stats {
    uint64_t hits, misses, evictions, loads_failed;
    uint64_t bytes_resident; /* decoded shards (capacity of their buffers) and spares */
    uint64_t spare_reuses;   /* loads given a recycled decode buffer (replaced if too small) */
    uint64_t bytes_peak;     /* the most bytes_resident reached */
    uint64_t segment_loads;  /* loads of a segment of a shard of several segments */
    uint64_t stream_restarts; /* of those, loads behind a streaming decoder (decoded again
                                 from the shard's start) */
} zpi_shard_cache_stats;

/* The working set a pipeline needs to decode each shard once per pass: the
 * shards of one shuffle block (block_shards; 1 when not shuffled), those of
 * the next one when prefetch looks ahead, and one more per fetch task (tasks
 * at a block boundary read from two blocks). */
size_t zpi_shard_cache_keep_shards(size_t block_shards, size_t fetch_parallelism, int prefetch);
/* The same for the cache's units of dataset ds: when a shard of ds has
 * several segments, a block goes in rounds (docs/worksource.md) and the
 * tasks at a round's end read from two rounds: one block of units more. */
size_t zpi_shard_cache_keep_units(const zp_dataset *ds, size_t block_shards,
                                  size_t fetch_parallelism, int prefetch);

/* cfg is copied. The dataset must outlive the cache and stay unchanged. */
zp_status zpi_shard_cache_create(const zp_dataset *ds, const zpi_shard_cache_config *cfg,
                                 zpi_shard_cache **out);
void zpi_shard_cache_destroy(zpi_shard_cache *c);

/* Units: the cache holds segments of shards (zp_dataset_shard_segments);
 * a shard of one segment is one unit. Unit ids are dense, in shard order;
 * when every shard is one segment, unit i is shard i. The unit holding
 * record `record` of `shard` (UINT32_MAX for a shard out of range), the
 * shard of a unit, and the number of units. A loaded unit's records are
 * numbered from its zpi_shard.first_record. */
uint32_t zpi_shard_cache_unit(const zpi_shard_cache *c, uint32_t shard, uint64_t record);
uint32_t zpi_shard_cache_unit_shard(const zpi_shard_cache *c, uint32_t unit);
size_t zpi_shard_cache_num_units(const zpi_shard_cache *c);

/* Pin unit `index` (loading it if needed). On error the message (naming the
 * shard, line and cause) is written into err. *loaded is set to 1 when this
 * call did the load (for timing metrics). */
zp_status zpi_shard_cache_get(zpi_shard_cache *c, uint32_t index, const zpi_shard **out,
                              int *loaded, zpi_err *err);
/* The same, except that when another thread is loading the shard it
 * returns ZP_OK at once with *out NULL (nothing pinned), instead of waiting:
 * a task that needs several shards loads those no one else is loading
 * first, so that tasks starting together decode them in parallel. */
zp_status zpi_shard_cache_get_unless_loading(zpi_shard_cache *c, uint32_t index,
                                             const zpi_shard **out, int *loaded, zpi_err *err);
/* Unpin a shard got with zpi_shard_cache_get(). */
void zpi_shard_cache_put(zpi_shard_cache *c, uint32_t index);
/* The run's last pass has begun: a unit it has read is not read again, so
 * from now on the cache keeps no unit beyond the working set, whatever its
 * budget (their buffers go to the next loads, which then touch no fresh
 * pages). A run of one epoch is all last pass. The budget's warning is
 * unchanged. */
void zpi_shard_cache_last_pass(zpi_shard_cache *c);
void zpi_shard_cache_stats_get(zpi_shard_cache *c, zpi_shard_cache_stats *st);

#endif
