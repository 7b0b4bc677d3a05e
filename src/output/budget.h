/*
 * budget.h - the memory budget's arithmetic (private; zephon/memory.h,
 * docs/pipeline.md "Memory budget"): from the budget, the settings and what
 * the dataset's shards need, the size of every buffer a pipeline owns, or
 * the error that names the settings that do not fit and what they need.
 *
 * One place for the sums, so that whoever sizes a buffer automatically
 * (an autotuner of prefetch_batches or in_flight_chunks) asks here for the
 * most the budget allows (zpi_budget_max_*). Pure functions of their input,
 * except zpi_budget_scan, which reads the shards' sizes.
 */
#ifndef ZP_BUDGET_H
#define ZP_BUDGET_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "zephon/dataset.h"
#include "zephon/memory.h"

/* What the dataset's shards need in memory. */
typedef struct zpi_budget_shards {
    uint64_t largest;            /* the largest unit's share, bytes (decoded:
                                    a segment of a jsonl or jsonl.zst shard, the
                                    whole shard when one segment; mapped:
                                    Megatron's .bin + .idx; HDF5: a reader) */
    int64_t largest_index;       /* -1: no shard */
    uint64_t largest_compressed; /* the largest compressed file read into a
                                    scratch buffer by a load (jsonl.zst) */
    double record_bytes;         /* the largest average record of a shard, bytes */
    int decoded;                 /* some shards are decoded whole (JSON) */
    int on_demand;               /* some shards are read on demand (HDF5, Megatron) */
    uint64_t n_shards;
    uint64_t n_units;            /* the shard cache's units: segments (a shard of
                                    one segment is one) */
    int segmented;               /* some shard has several segments: the cache
                                    keeps one block of units more */
    uint64_t reader_index;       /* the shard cache's count for the largest open
                                    reader (its record index), bytes */
} zpi_budget_shards;

/* Reads what ds's shards need (their sizes, a jsonl.zst file's frame
 * headers; nothing is decoded). A shard whose decoded size cannot be known
 * before it is read (a remote jsonl.zst, a frame that does not record its
 * size, every jsonl.gz) is taken as ZPI_BUDGET_ZSTD_RATIO times its
 * compressed size. */
#define ZPI_BUDGET_ZSTD_RATIO 8
zp_status zpi_budget_scan(const zp_dataset *ds, zpi_budget_shards *out, zpi_err *err);

/* The settings the plan is made for. */
typedef struct zpi_budget_in {
    uint64_t budget;           /* bytes; 0: no budget (the plan describes the settings) */
    size_t rows, cols;         /* batch shape: cols 0 in record mode, seq_len + 1 with tokens */
    unsigned masking;          /* ZP_OUT_* arrays of a batch */
    size_t chunk_samples;
    size_t in_flight_chunks;   /* 0: automatic (2 x op_parallelism + 2, capped by the budget) */
    size_t op_parallelism;     /* sum over the operators */
    size_t n_ops;
    size_t fetch_parallelism;
    size_t prefetch_batches;
    size_t balance;            /* attention-balance window, batches held (0: off) */
    size_t pack_window;        /* best-fit packing: documents held (0: not best-fit) */
    size_t prefetch_buffer;    /* samples looked ahead (0: off) */
    size_t prefetch_parallelism;
    size_t block_shards;       /* shards per shuffle block (1 when not shuffled) */
    size_t shard_cache_bytes;  /* the user's cap on what the cache keeps beyond its working set */
    zpi_budget_shards sh;
    const char *largest_name;  /* the largest shard's name, for messages (may be NULL) */
} zpi_budget_in;

/* The plan: every part's size; ZP_ERR_LIMIT with a message that names the
 * budget, what it needs and each part, when the budget (non-zero) is too
 * small for the settings. */
zp_status zpi_budget_plan(const zpi_budget_in *in, zp_memory_plan *out, zpi_err *err);

/* Caps for automatic sizing: the most prefetch_batches (in_flight_chunks)
 * the budget allows with the other settings of in as they are (an automatic
 * in_flight_chunks at its least: one per operator + 1); SIZE_MAX without a
 * budget, 0 when even the least does not fit. A pipeline's caps:
 * zpi_pipeline_budget_caps (api/pipeline_internal.h). */
size_t zpi_budget_max_prefetch_batches(const zpi_budget_in *in);
size_t zpi_budget_max_in_flight(const zpi_budget_in *in);

/* "1.5 MiB": bytes for messages. */
void zpi_budget_fmt(char *buf, size_t cap, uint64_t bytes);

#endif
