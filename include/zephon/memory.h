/*
 * zephon/memory.h - the memory budget's plan: how many bytes each buffer a
 * pipeline owns gets (docs/pipeline.md, "Memory budget").
 *
 * With zp_pipeline_config.memory_budget set (zp_pipeline_memory_budget),
 * every buffer the pipeline owns is sized from it at start: the output
 * queue, the in-flight chunks, the shard cache (its working set of shards,
 * the loads in progress and what it keeps beyond) and the batches the
 * consumer may keep. A budget too small for the settings is an error at
 * start that names the settings and the budget they need. Without a budget
 * the same plan describes what the settings cost (budget 0, kept_batches 0:
 * no limit).
 *
 * The sizes are estimates made before any shard is read: a batch and a chunk
 * from the settings and the dataset's average record size (the largest
 * average of any shard), a shard's share from its decoded size (jsonl: its
 * bytes, jsonl.zst: its frames' recorded content sizes, Megatron: its .bin
 * and .idx, which are mapped and count in the resident set as they are
 * read; HDF5: ZP_MEMORY_HDF5_READER_BYTES per open file).
 */
#ifndef ZEPHON_MEMORY_H
#define ZEPHON_MEMORY_H

#include <stdint.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the budget counts for one open HDF5 file (its reader and HDF5's own
 * caches), bytes. */
#define ZP_MEMORY_HDF5_READER_BYTES ((uint64_t)4 << 20)
/* The resident memory of a process running a pipeline beyond its budget:
 * code, libraries, the tokenizer's tables, thread stacks, the allocator's
 * slack. Measured across formats and thread counts (tests/memory/,
 * bench/memory/run.sh; docs/pipeline.md). Bytes. */
#define ZP_MEMORY_OVERHEAD_BYTES ((uint64_t)48 << 20)
/* Batches the consumer may always keep under a budget (more when the budget
 * leaves room: zp_memory_plan.kept_batches). */
#define ZP_MEMORY_KEPT_MIN 2

typedef struct zp_memory_plan {
    uint64_t budget;           /* memory_budget, bytes; 0: no budget */
    uint64_t total;            /* the sum of the parts below, bytes (<= budget) */
    uint64_t batch_bytes;      /* one batch buffer (estimate) */
    uint64_t queue_batches;    /* output queue: prefetch_batches + 2 (+ balance window) */
    uint64_t queue_bytes;
    uint64_t in_flight_chunks; /* chunks in the pipeline at once (as used) */
    uint64_t chunk_bytes;      /* one chunk's arrays (estimate) */
    uint64_t chunks_bytes;
    uint64_t pack_bytes;       /* best-fit packing: the window's documents (estimate) */
    uint64_t cache_shards;     /* the shard cache's working set, shards */
    uint64_t cache_loads;      /* shards loaded at once (fetch + prefetch tasks) */
    uint64_t shard_bytes;      /* the largest shard's share (decoded or mapped) */
    int64_t largest_shard;     /* its index in the dataset; -1: no shard */
    uint64_t cache_bytes;      /* the shard cache's part: working set, loads,
                                  spare buffers, and what it keeps beyond */
    uint64_t cache_budget;     /* the shard_cache_bytes the cache is given:
                                  unused shards it keeps (its working set
                                  is kept whatever this is) */
    uint64_t kept_batches;     /* batches the consumer may keep at once (0: no limit) */
    uint64_t kept_bytes;
} zp_memory_plan;

#ifdef __cplusplus
}
#endif
#endif
