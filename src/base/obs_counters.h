/*
 * obs_counters.h - recording side of observability (private).
 *
 * Every counter has one writer (the thread that owns a zpi_obs_thread slot,
 * or the drainer, or code holding the engine lock) and is read by snapshots
 * from the consumer's thread: relaxed atomics, no lock on the hot path, no
 * allocation per event. Snapshots sum the per-thread slots.
 */
#ifndef ZP_OBS_COUNTERS_H
#define ZP_OBS_COUNTERS_H

#include <stdatomic.h>

#include "zephon/common.h"
#include "zephon/histogram.h"

typedef _Atomic uint64_t zpi_ctr;

static inline void zpi_ctr_add(zpi_ctr *c, uint64_t v)
{
    /* single writer: a relaxed load and store, no read-modify-write */
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v,
                          memory_order_relaxed);
}
static inline uint64_t zpi_ctr_get(const zpi_ctr *c)
{
    return atomic_load_explicit((zpi_ctr *)c, memory_order_relaxed);
}

/* A histogram with one writer. */
typedef struct zpi_ahist {
    zpi_ctr count, sum, min, max;
    zpi_ctr buckets[ZP_HIST_BUCKETS];
} zpi_ahist;

void zpi_ahist_init(zpi_ahist *h);
void zpi_ahist_record(zpi_ahist *h, uint64_t ns);
/* dst (a plain histogram) += h */
void zpi_ahist_read(const zpi_ahist *h, zp_hist *dst);

#define ZPI_OBS_STAGES 12

/* Per team thread. */
typedef struct zpi_obs_thread {
    zpi_ctr busy_ns[ZPI_OBS_STAGES];
    zpi_ctr items_in[ZPI_OBS_STAGES];
    zpi_ctr items_out[ZPI_OBS_STAGES];
    /* fetch */
    zpi_ctr shards_opened, open_ns, read_ns, decompress_ns, wait_ns;
    zpi_ctr bytes_compressed, bytes_uncompressed, records;
    zpi_ctr slowest_ns, slowest_shard_plus1;
    zpi_ahist open_hist, record_hist;
    /* fetch: shards read on demand (HDF5, Megatron; reader.h) */
    zpi_ctr od_reads, od_read_ns, od_io_ns, od_lock_wait_ns, od_bytes;
    zpi_ahist od_hist;
    /* prefetch */
    zpi_ctr pf_downloads, pf_bytes;
    zpi_ahist pf_hist;
    char pad[64];
} zpi_obs_thread;

/* Scheduling state of one stage, updated under the engine lock. */
typedef struct zpi_obs_stage {
    uint64_t t_last;       /* ns of the last change */
    double starved_ns;     /* free slots x time, with nothing queued */
    double queue_area;     /* integral of queue length over time */
    double blocked_ns;     /* time its output chunks waited in the next stage's queue */
    uint32_t queue_max;
} zpi_obs_stage;

/* The recording side lives in obs_counters.c (below the engine); snapshots
 * and their JSON in observe.c (above it). */
typedef struct zpi_obs {
    uint64_t t_start;      /* first next() */
    int threads;
    zpi_obs_thread *th;    /* threads slots */
    zpi_obs_stage stage[ZPI_OBS_STAGES]; /* under the engine lock */
    /* batch stage (drainer) */
    zpi_ctr batch_busy_ns, batch_blocked_ns, batch_items;
    /* consumer (only the consumer thread writes) */
    zpi_ctr first_batch_ns; /* 0 until the first batch, else time since start */
    zpi_ctr stall_ns;
} zpi_obs;

/* obs_counters.c */
zp_status zpi_obs_create(int threads, zpi_obs **out);
void zpi_obs_destroy(zpi_obs *o); /* NULL accepted */
/* Under the engine lock: account the time since the stage's last change,
 * given its state until now (queued chunks, running tasks, slots). */
void zpi_obs_stage_tick(zpi_obs_stage *os, uint64_t now, size_t queued, size_t running,
                        size_t parallelism);

#endif
