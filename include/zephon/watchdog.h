/*
 * zephon/watchdog.h - the stall watchdog: what every operator of a pipeline
 * is doing when no batch comes.
 *
 * When the consumer has waited `watchdog_seconds` (zp_pipeline_config,
 * default 30 s, 0 = off) inside one zp_pipeline_next() call, the pipeline
 * logs (ZP_LOG_WARN, through the config's log callback) what each busy
 * task is doing - which shard a fetch task is loading (downloading) or
 * reading and for how long, which record a map transform has been running
 * on - and the queue depths; then again after each further period while
 * the wait lasts. The same picture is available at any time with
 * zp_pipeline_activity(), and a hook (zp_pipeline_on_watchdog) receives it
 * on the consumer's thread each time the watchdog fires (the MPI layer
 * uses it to tell rank 0). docs/pipeline.md, "Stall watchdog".
 *
 * Cost: one clock read per chunk and operator, one per record in map
 * operators, a few relaxed stores per record in fetch; no lock and no
 * extra thread (the check runs in the consumer's own wait).
 */
#ifndef ZEPHON_WATCHDOG_H
#define ZEPHON_WATCHDOG_H

#include "common.h"
#include "observe.h"

#ifdef __cplusplus
extern "C" {
#endif

struct zp_pipeline;

/* Default of zp_pipeline_config.watchdog_seconds. */
#define ZP_WATCHDOG_DEFAULT_SECONDS 30.0
/* Busy tasks listed in a report at most (the longest-running first). */
#define ZP_WATCHDOG_MAX_TASKS 64

typedef enum zp_task_state {
    ZP_TASK_IDLE = 0,    /* not listed */
    ZP_TASK_LOADING = 1, /* opening a shard: downloading (remote) or reading
                            the file, decompressing, indexing */
    ZP_TASK_READING = 2, /* reading records of a loaded shard */
    ZP_TASK_RUNNING = 3, /* a map callback on one record; tokenize on a chunk */
    ZP_TASK_PACKING = 4  /* the batch stage on a chunk */
} zp_task_state;

/* "idle", "loading", "reading", "running", "packing". */
ZP_API const char *zp_task_state_name(zp_task_state s);

/* What one task is doing. */
typedef struct zp_task_activity {
    uint32_t thread;          /* the team thread running it */
    char op[ZP_OBS_NAME];     /* "fetch", a map's name, "tokenize", "prefetch", "batch" */
    zp_task_state state;
    int64_t shard;            /* shard index; -1 when none */
    const char *shard_name;   /* borrowed from the dataset (valid while the
                                 pipeline lives); NULL when none */
    int remote;               /* 1: a remote shard (loading includes its download) */
    int64_t record;           /* record within the shard (map, reading); -1 */
    uint32_t epoch;           /* the chunk's epoch and first stream position */
    uint64_t position;
    double seconds;           /* on this item: the shard (loading, reading),
                                 the record (map) or the chunk */
    double chunk_seconds;     /* since the task took its chunk */
} zp_task_activity;

/* One operator's queue. */
typedef struct zp_op_queue {
    char name[ZP_OBS_NAME];
    uint32_t queued;          /* chunks waiting for a task */
    uint32_t running;         /* tasks running it */
    uint32_t parallelism;
} zp_op_queue;

typedef struct zp_watchdog_report {
    double waited;            /* seconds the consumer has waited in the current
                                 zp_pipeline_next() (0 when it is not waiting) */
    double seconds;           /* the watchdog period (watchdog_seconds; 0 before
                                 the first zp_pipeline_next()) */
    uint64_t batches;         /* delivered so far */
    uint32_t threads;         /* the pipeline's team */
    uint32_t n_tasks;         /* busy tasks listed, the longest first */
    uint32_t tasks_busy;      /* busy tasks (may exceed n_tasks) */
    zp_task_activity tasks[ZP_WATCHDOG_MAX_TASKS];
    uint32_t n_ops;
    zp_op_queue ops[ZP_OBS_MAX_OPS];
    uint32_t prefetch_running; /* prefetch tasks loading shards ahead */
    uint32_t prefetch_queued;  /* shards queued for them */
    uint32_t chunks_in_flight;
    uint32_t batches_ready;    /* finished batches waiting for the consumer */
} zp_watchdog_report;

/* What the pipeline is doing now. Any time on the consumer's thread
 * (before the first zp_pipeline_next() everything is 0/idle). ZP_OK;
 * ZP_ERR_INVALID for NULL arguments. */
ZP_API zp_status zp_pipeline_activity(struct zp_pipeline *p, zp_watchdog_report *out);

/* The lines the watchdog logs for r, each ending in '\n', into buf (cap
 * bytes, NUL-terminated, cut when too small). @return the length the whole
 * text needs (as snprintf). */
ZP_API size_t zp_watchdog_report_text(const zp_watchdog_report *r, char *buf, size_t cap);

/* Called on the consumer's thread, inside zp_pipeline_next(), each time the
 * watchdog fires (after it logged); r is borrowed for the call. It must not
 * call the pipeline. */
typedef void (*zp_watchdog_fn)(void *user, const zp_watchdog_report *r);

/* Set the hook (NULL removes it), on the consumer's thread (also while
 * iterating: the hook is read there, inside zp_pipeline_next()). ZP_OK;
 * ZP_ERR_INVALID for p NULL. The MPI layer's zp_mpi_next() sets its own
 * when none is set (docs/mpi.md). */
ZP_API zp_status zp_pipeline_on_watchdog(struct zp_pipeline *p, zp_watchdog_fn fn, void *user);
/* The hook set (NULL when none). */
ZP_API zp_watchdog_fn zp_pipeline_watchdog_hook(const struct zp_pipeline *p);
/* Times the watchdog fired in this pipeline. */
ZP_API uint64_t zp_pipeline_watchdog_fired(const struct zp_pipeline *p);

#ifdef __cplusplus
}
#endif
#endif
