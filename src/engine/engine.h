/*
 * engine.h - the scheduler (private): runs a pipeline's operators as OpenMP
 * tasks and feeds the ordered batch stage, which fills the output queue.
 *
 * Threading model (docs/pipeline.md has the prose version):
 *  - The engine owns one thread, which opens an OpenMP parallel region of
 *    `threads` threads; one of them admits the first chunks, and from then
 *    on work spreads as tasks: each operator has a FIFO of ready chunks and
 *    runs at most `parallelism` tasks; a task that finishes a chunk hands it
 *    to the next operator (spawning a task when that operator has a free
 *    slot) and takes the next ready chunk of its own. Completed chunks go to
 *    a reorder window; whoever completes the chunk next in order becomes the
 *    drainer and runs the packer on all consecutive completed chunks, in
 *    order (so batches are deterministic), then retires them and admits new
 *    chunks.
 *  - The engine's lock guards the operator FIFOs and running counts, the
 *    reorder window, admission and prefetch planning. It is never held while
 *    an operator runs or while a task is spawned (a task may run undeferred,
 *    inside the spawning call).
 *  - The consumer never touches the engine while it runs: it reads the
 *    output queue (outq.h), and observability reads counters with one
 *    writer each (obs_counters.h).
 */
#ifndef ZP_ENGINE_H
#define ZP_ENGINE_H

#include "ops/operators.h"
#include "output/outq.h"
#include "output/packer.h"

typedef struct zpi_engine zpi_engine;

/* What the engine runs: everything is copied at start, except the borrowed
 * pointers (ws, tok, tok_field, log_user), which must outlive the engine. */
typedef struct zpi_engine_plan {
    zp_worksource *ws;
    int threads;                /* > 0 */
    uint32_t epochs;            /* 0: without end */
    size_t chunk_samples;
    size_t in_flight_chunks;    /* 0: 2 x (sum of operator parallelism) + 2 */
    int in_flight_follows;      /* 1: in_flight_chunks is a cap; the chunks in
                                   flight follow the operators' parallelism as
                                   it is tuned (2 x sum + 2) */
    size_t shard_cache_bytes;
    const zpi_op *ops;          /* ops[0] is fetch */
    int n_ops;
    zpi_op_env env;             /* cache is set by the engine */
    zpi_pack_settings pack;
    size_t prefetch_buffer, prefetch_parallelism;
    /* the prefetch look-ahead's automatic settings (docs/pipeline.md,
     * "Autotune"): the most each may be raised to while running, from the
     * starting values above; 0: fixed */
    size_t prefetch_buffer_max, prefetch_parallelism_max;
    int observe;
} zpi_engine_plan;

/* Starts the engine thread, producing into q (borrowed; initialised, and
 * released only after zpi_engine_destroy). On failure *out is NULL and err
 * holds the reason. */
zp_status zpi_engine_start(const zpi_engine_plan *plan, zpi_outq *q, zpi_engine **out,
                           zpi_err *err);
/* Stops the engine (mid-stream is fine: queued tasks end without doing
 * their work), joins its thread and frees it. NULL is accepted. */
void zpi_engine_destroy(zpi_engine *e);

/* The worksource is the engine's while it runs (its mixture cursors move
 * under the engine lock): another thread that reads it takes the lock
 * around those reads (1: take, 0: give back). NULL is accepted. */
void zpi_engine_lock_ws(zpi_engine *e, int take);

/* Observability (NULL when off). The counters have one writer each. */
zpi_obs *zpi_engine_obs(zpi_engine *e);
int zpi_engine_threads(const zpi_engine *e);

/* An operator's scheduling state, for snapshots. */
typedef struct zpi_stage_view {
    char name[32];
    size_t parallelism;
    size_t queued;
    zpi_obs_stage obs;
} zpi_stage_view;
/* Under the engine lock: accounts every operator up to `now` and copies its
 * state into out[0 .. min(n_ops, max)). Returns the number of operators.
 * Only with observability on. */
int zpi_engine_stages(zpi_engine *e, uint64_t now, zpi_stage_view *out, int max);
/* An operator's parallelism and its tuning (op.auto_max > 0: automatic). */
typedef struct zpi_op_tuning {
    char name[32];
    size_t parallelism, auto_max;
    char why[200]; /* the tuner's last decision ("" before one) */
} zpi_op_tuning;
/* Any thread: the operators' parallelism now into out[0 .. min(n_ops,
 * max)). Returns the number of operators. */
int zpi_engine_tuning(zpi_engine *e, zpi_op_tuning *out, int max);
/* The prefetch look-ahead now: positions ahead and tasks, their caps (0:
 * fixed) and the tuner's last decision on them ("" before one). */
typedef struct zpi_prefetch_tuning {
    size_t buffer, parallelism, buffer_max, parallelism_max;
    char why[200];
} zpi_prefetch_tuning;
void zpi_engine_prefetch_tuning(zpi_engine *e, zpi_prefetch_tuning *out);
void zpi_engine_cache_stats(zpi_engine *e, zpi_shard_cache_stats *out);
/* The stall watchdog: fills r's tasks (what each busy team thread does, as
 * of `now`), operator queues, prefetch and in-flight counts and the batches
 * ready; the other fields are the caller's. Any thread. */
void zpi_engine_activity(zpi_engine *e, uint64_t now, zp_watchdog_report *r);
/* The remote shards' downloads and disk cache: 1 and *out, or 0 when the
 * dataset has no remote shard. */
struct zpi_fetcher_stats;
int zpi_engine_fetcher_stats(zpi_engine *e, struct zpi_fetcher_stats *out);

#endif
