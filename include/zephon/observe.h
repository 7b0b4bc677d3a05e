/*
 * zephon/observe.h - observability: where a pipeline spends its time.
 *
 * Turn it on with zp_pipeline_enable_observability() before the first
 * zp_pipeline_next(); then take snapshots at any time from the consumer's
 * thread. Snapshots are plain fixed-size structs (so the MPI layer can
 * gather them from every rank) plus a JSON rendering with stable field names
 * (docs/observability.md lists every field, its unit and meaning).
 *
 * Recording costs a few clock reads per chunk and one per record, into
 * per-thread counters and histograms: no lock and no allocation per event.
 */
#ifndef ZEPHON_OBSERVE_H
#define ZEPHON_OBSERVE_H

#include "common.h"
#include "histogram.h"
#include "memory.h"

#ifdef __cplusplus
extern "C" {
#endif

struct zp_pipeline;

/* ------------------------------------------------------------ snapshots */

#define ZP_OBS_MAX_OPS 12
#define ZP_OBS_NAME 32

/* One operator: fetch, each map_transform, tokenize, batch. */
typedef struct zp_op_metrics {
    char name[ZP_OBS_NAME];
    uint32_t parallelism;
    uint64_t items_in;        /* records that entered */
    uint64_t items_out;       /* records handed on (in - skipped - dropped) */
    double busy_seconds;      /* summed over its tasks */
    double starved_seconds;   /* free task slots x time with nothing queued */
    double blocked_seconds;   /* its finished chunks waiting on the next operator
                                 (batch: waiting for a free batch buffer) */
    uint32_t queue_now;       /* chunks queued for it now */
    uint32_t queue_max;
    double queue_mean;        /* time-weighted mean */
    double items_per_second;  /* items_out / wall time since start */
    double utilization;       /* busy / (parallelism x wall) */
} zp_op_metrics;

/* Mixture parts (issue 10): at most this many are listed in a snapshot. */
#define ZP_OBS_MAX_PARTS 64

/* One mixture part's realized proportion (zp_pipeline_part_counts): the
 * samples and tokens of that part delivered so far. A pipeline without a
 * mixture has one part of weight 1 holding everything delivered. */
typedef struct zp_part_metrics {
    char name[ZP_OBS_NAME];   /* zp_worksource_part_name(), cut to 31 bytes */
    double weight;            /* the weight as used: a fraction of 1
                                 (zp_worksource_part_weight) */
    uint64_t samples;         /* samples of this part delivered (padded repeats
                                 included, skipped batches not) */
    uint64_t tokens;          /* tokens of this part delivered (EOT separators
                                 included; 0 without a tokenize operator) */
    double sample_fraction;   /* samples / the samples of all parts (0 when none) */
    double token_fraction;    /* tokens / the tokens of all parts (0 when none) */
} zp_part_metrics;

/* Phases of a mixture weight schedule listed in a snapshot (the first
 * ones; docs/mixtures.md, "Weight schedules"). */
#define ZP_OBS_MAX_PHASES 16

/* One phase's realized proportions (zp_pipeline_phase_counts). */
typedef struct zp_phase_metrics {
    uint64_t start;   /* its first draw (zp_worksource_phase_start) */
    uint64_t samples; /* samples delivered from its draws, all parts */
    uint64_t part_samples[ZP_OBS_MAX_PARTS]; /* per part (the first n_parts) */
    double weight[ZP_OBS_MAX_PARTS];         /* per part: its weight as used in
                                                the phase (a fraction of 1) */
} zp_phase_metrics;

/* One tunable setting (zp_metrics_snapshot.tuned). */
typedef struct zp_tuned_setting {
    char op[ZP_OBS_NAME];      /* "output" for prefetch_batches, else the operator
                                  ("fetch", "tokenize", a map's name) */
    char setting[ZP_OBS_NAME]; /* "prefetch_batches" or "parallelism" */
    uint32_t value;            /* the value in use now */
    uint32_t is_auto;          /* 1: set to ZP_AUTO, chosen while running */
    uint32_t cap;              /* the most auto may reach (docs/pipeline.md);
                                  the value itself when fixed */
    char why[200];             /* auto's last decision and what it measured
                                  ("" when fixed or before one) */
} zp_tuned_setting;

typedef struct zp_metrics_snapshot {
    double wall_seconds;          /* since the first next() */
    double time_to_first_batch;   /* seconds */
    uint64_t batches;             /* delivered */
    uint64_t samples;
    uint64_t tokens;
    double stall_seconds;         /* consumer time inside next() after the first
                                     batch: the data stall */
    double stall_fraction;        /* stall_seconds / wall time since the first batch */
    double batches_per_second;
    double samples_per_second;
    uint32_t threads;
    uint32_t n_ops;
    zp_op_metrics ops[ZP_OBS_MAX_OPS];
    /* Realized mixture proportions. parts_total: the mixture's part count
     * (zp_worksource_num_parts: 1 without a mixture); n_parts: the entries
     * filled, min(parts_total, ZP_OBS_MAX_PARTS): with more than 64 parts
     * only the first 64 are listed (the fractions still divide by the sums
     * over every part). Filled before the first next() too (zero counts). */
    uint32_t n_parts;
    uint32_t parts_total;
    zp_part_metrics parts[ZP_OBS_MAX_PARTS];
    /* Realized proportions per phase of the weight schedule
     * (zp_worksource_num_phases: 1 without a schedule): phases_total the
     * schedule's phases, n_phases the entries filled (at most
     * ZP_OBS_MAX_PHASES, the first ones). */
    uint32_t n_phases;
    uint32_t phases_total;
    zp_phase_metrics phases[ZP_OBS_MAX_PHASES];
    /* Token modes: how well the rows are used (zp_pipeline_counts):
     * padding_fraction = pad_tokens / (tokens + pad_tokens) delivered;
     * cut_fraction = cut_documents / samples (documents split over rows or
     * truncated, docs/packing.md). 0 before any batch. */
    uint64_t pad_tokens;
    uint64_t cut_documents;
    double padding_fraction;
    double cut_fraction;
    /* Autotune (docs/pipeline.md, "Autotune"): the settings the pipeline
     * may tune, as they are now: tuned[0] is prefetch_batches, then each
     * operator's parallelism in pipeline order. Before the first next():
     * the starting values. */
    uint32_t n_tuned;
    zp_tuned_setting tuned[ZP_OBS_MAX_OPS + 1];
    /* Attention-cost balance (zp_pipeline_balance; zp_pipeline_counts):
     * windows balanced and the max/mean ratio of the microbatches' costs
     * in them before and after (cost-weighted mean over windows; 0 when no
     * window was balanced). */
    uint64_t balance_windows;
    double attn_imbalance_before;
    double attn_imbalance_after;
    /* The memory budget's plan in use (zephon/memory.h): the budget and
     * each part's share; all zero without a budget. */
    zp_memory_plan memory;
} zp_metrics_snapshot;

typedef struct zp_fetch_timing {
    uint64_t shards_opened;       /* shard loads done by fetch */
    double open_seconds;          /* total time of those loads */
    double read_seconds;          /* of which reading files */
    double decompress_seconds;    /* of which decompressing */
    double wait_seconds;          /* fetch waiting on a load in flight elsewhere */
    uint64_t bytes_compressed;    /* bytes read from storage by fetch's loads */
    uint64_t bytes_uncompressed;  /* record bytes fetched */
    uint64_t records;             /* records fetched */
    double fetch_seconds;         /* total time in fetch tasks */
    zp_hist open_ns;              /* per shard load */
    zp_hist record_ns;            /* per record read (copy + parse) */
    int64_t slowest_shard;        /* index, -1 if none */
    double slowest_shard_seconds;
    /* Shards read on demand (HDF5, Megatron .bin/.idx): fetch reads each
     * chunk's records of a shard with one call (HDF5: one hyperslab
     * selection per field). Their loads (open + checks) count above. */
    uint64_t ondemand_reads;       /* read calls */
    uint64_t ondemand_bytes;       /* bytes they read (also in bytes_uncompressed) */
    double ondemand_seconds;       /* their total time */
    double ondemand_io_seconds;    /* of which in the format's read calls (HDF5 / mmap copy) */
    double hdf5_lock_wait_seconds; /* of which waiting for the process's HDF5 lock */
    zp_hist ondemand_ns;           /* per read call */
} zp_fetch_timing;

typedef struct zp_prefetch_timing {
    uint64_t downloads;           /* shard loads done by prefetch */
    uint64_t bytes;               /* bytes read by them */
    zp_hist latency_ns;           /* per load */
    uint64_t retries;             /* transfer retries (remote storage) */
    uint64_t cache_hits, cache_misses, cache_evictions;
    uint64_t cache_bytes;         /* decoded bytes resident in the shard cache */
    double wait_seconds;          /* fetch waiting on in-flight prefetch loads */
    /* Shards from other nodes of an MPI job (docs/storage.md, "Shards from
     * other nodes"; 0 without): received (not counted in downloads/bytes,
     * which come from storage), their bytes and seconds (request to the
     * file checked, summed); requests that failed or timed out (the shard
     * was then downloaded from storage); shards served to other nodes and
     * their bytes. */
    uint64_t peer_shards, peer_bytes;
    double peer_seconds;
    uint64_t peer_fallbacks;
    uint64_t peer_served, peer_served_bytes;
} zp_prefetch_timing;

/* Turn observability on; only before the first zp_pipeline_next()
 * (ZP_ERR_STATE after, with the reason in zp_pipeline_errmsg()). */
ZP_API zp_status zp_pipeline_enable_observability(struct zp_pipeline *p);

/* Snapshots: ZP_ERR_STATE when observability is off (zp_pipeline_errmsg()
 * says so). Consumer's thread. */
ZP_API zp_status zp_pipeline_metrics_snapshot(struct zp_pipeline *p, zp_metrics_snapshot *out);
ZP_API zp_status zp_pipeline_fetch_timing_snapshot(struct zp_pipeline *p, zp_fetch_timing *out);
ZP_API zp_status zp_pipeline_prefetch_timing_snapshot(struct zp_pipeline *p, zp_prefetch_timing *out);

/* JSON renderings (one object each; stable field names, see
 * docs/observability.md). *out is malloc'd: caller frees with free(). */
ZP_API zp_status zp_metrics_json(const zp_metrics_snapshot *m, char **out);
ZP_API zp_status zp_fetch_timing_json(const zp_fetch_timing *f, char **out);
ZP_API zp_status zp_prefetch_timing_json(const zp_prefetch_timing *f, char **out);

#ifdef __cplusplus
}
#endif
#endif
