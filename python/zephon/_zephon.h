/*
 * _zephon.h - what the files of the zephon._core extension share (private:
 * not installed, not part of any API). One concern per file:
 *
 *   _core.c      the module: its functions, zephon.Error, the log queue
 *   _dataset.c   Dataset and WorkSource (handles over zp_dataset and
 *                zp_worksource)
 *   _pipeline.c  Pipeline: builder calls, next(), snapshots, state, close()
 *   _wait.c      waiting for the library with the GIL released, yet
 *                interruptible: the pipeline's next-thread, blocking calls
 *                run aside, Ctrl-C seen within ZPY_WAIT_SLICE_MS
 *   _runner.c    Python map transforms: the thread runner (under the GIL)
 *                and the process runner (forked workers, memfd, pipes)
 *   _batch.c     Batch and View: delivered batches and zero-copy buffers
 *
 * Shared symbols are prefixed zpy_ and hidden (the extension exports only
 * PyInit__core).
 */
#ifndef ZEPHON_PY_ZEPHON_H
#define ZEPHON_PY_ZEPHON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "zephon.h"

#if defined(__GNUC__)
#define ZPY_HIDDEN __attribute__((visibility("hidden")))
#else
#define ZPY_HIDDEN
#endif

/* ------------------------------------------------------------ _core.c */

extern ZPY_HIDDEN PyObject *zpy_Error;      /* zephon.Error */
extern ZPY_HIDDEN PyObject *zpy_Closing;    /* raised inside a thread-runner
                                               transform when its pipeline closes */
extern ZPY_HIDDEN PyObject *zpy_BatchClass; /* the Python subclass of Batch to create */

/* Sets zephon.Error((msg or the status's name), st); returns NULL. */
ZPY_HIDDEN PyObject *zpy_raise_status(zp_status st, const char *msg);
/* A negative count is a usage error naming the setting (the library
 * takes size_t: -1 would read as 2^64 - 1): -1 with the error set. */
ZPY_HIDDEN int zpy_nonneg(const char *call, const char *name, Py_ssize_t v);
ZPY_HIDDEN uint64_t zpy_now_ns(void);

/* The library's log messages, kept until the Python side drains them into
 * the logging module (the library's threads never take the GIL for it). */
typedef struct zpy_logq zpy_logq;
ZPY_HIDDEN zpy_logq *zpy_logq_new(void);
ZPY_HIDDEN void zpy_logq_push(void *user, zp_log_level lvl, const char *msg); /* a zp_log_fn */
/* [(level, msg), ...] and a line for the count dropped since. */
ZPY_HIDDEN PyObject *zpy_logq_drain(zpy_logq *q);
ZPY_HIDDEN void zpy_logq_free(zpy_logq *q);

/* ------------------------------------------------------------ _dataset.c */

typedef struct {
    PyObject_HEAD
    zp_dataset *ds;
    zpy_logq *log;
    /* > 0: the storage's stop_requested hook says stop (running and queued
     * transfers end at once): while a Dataset being created is
     * interrupted, and while a pipeline reading it closes */
    atomic_int stop;
} zpy_DatasetObject;

typedef struct {
    PyObject_HEAD
    zp_worksource *ws;
    PyObject *dataset; /* keeps the dataset alive (a zpy_DatasetObject) */
} zpy_WorkSourceObject;

extern ZPY_HIDDEN PyTypeObject zpy_DatasetType;
extern ZPY_HIDDEN PyTypeObject zpy_WorkSourceType;

/* ------------------------------------------------------------ _wait.c */

/* How often a thread waiting for the library looks at signals. */
#define ZPY_WAIT_SLICE_MS 50

/* Runs fn(arg) in a thread of its own while the caller waits with the GIL
 * released, calling PyErr_CheckSignals() every slice. When a signal
 * handler raises (Ctrl-C), interrupt(arg) is called once (it must make fn
 * return soon) and fn's end is still waited for: -1 with the exception
 * set. 0 when fn returned normally. Caller holds the GIL. */
ZPY_HIDDEN int zpy_call_interruptible(void (*fn)(void *), void (*interrupt)(void *), void *arg);

/* The pipeline's next-thread: the one thread that calls zp_pipeline_next()
 * (and keeps the batch), so that the Python thread that asked waits in
 * slices and sees Ctrl-C. An interrupted next() leaves its call running:
 * the next next() takes its result, so that no batch is lost and the
 * stream stays the same. */
typedef struct zpy_nexter zpy_nexter;
/* log (may be NULL): the pipeline's log queue, emitted while a next()
 * waits (the stall watchdog's lines). */
ZPY_HIDDEN zpy_nexter *zpy_nexter_new(zp_pipeline *p, zpy_logq *log);
/* Asks for the next batch (unless a call is already running) and waits for
 * it: 0 with *st, *b set (ZP_OK: the batch is kept); -1 with the exception
 * set when a signal handler raised meanwhile (the call keeps running).
 * Caller holds the GIL. */
ZPY_HIDDEN int zpy_nexter_next(zpy_nexter *n, zp_status *st, const zp_batch **b);
/* Nonzero while a call runs (asked, its result not taken yet). */
ZPY_HIDDEN int zpy_nexter_busy(zpy_nexter *n);
/* Waits (GIL released, not interruptible) for a running call to end,
 * hands back its batch if it has one, stops the thread and frees n. NULL
 * is accepted. The caller must first make the call end (closing). */
ZPY_HIDDEN void zpy_nexter_free(zpy_nexter *n);

/* ------------------------------------------------------------ _runner.c */

/* One Python map_transform: its runner and, under the process runner, its
 * worker processes. */
typedef struct zpy_mapop zpy_mapop;

/* apply(kind, bytes) -> bytes | str | None is the Python function of the
 * operator (__init__.py's _make_apply). NULL with the error set. */
ZPY_HIDDEN zpy_mapop *zpy_mapop_new(PyObject *apply, size_t parallelism, const char *name);
ZPY_HIDDEN const char *zpy_mapop_name(const zpy_mapop *op);
/* The zp_map_batch_fn to register with user = op: the thread runner,
 * or the process runner once zpy_runners_fork() chose it. */
ZPY_HIDDEN zp_status zpy_mapop_run(void *user, zp_record *const *recs, size_t n, zp_status *status);
/* Forks the process runner's workers of every operator (before the
 * pipeline's threads exist). -1 with the error set; then every later call
 * of the operators fails (never half-run). */
ZPY_HIDDEN int zpy_runners_fork(zpy_mapop **ops, size_t n_ops);
/* Closing: no transform starts any more; running ones are stopped (the
 * process runner's busy workers are killed; the thread runner's
 * transforms get zephon Closing raised inside them, between two Python
 * bytecodes). Caller holds the GIL. */
ZPY_HIDDEN void zpy_mapop_cancel(zpy_mapop *op);
/* After zpy_mapop_cancel(): waits (GIL released) until no map task uses a
 * worker, then stops and reaps the process runner's workers. */
ZPY_HIDDEN void zpy_mapop_reap(zpy_mapop *op);
/* The runner's figures: a dict (name, runner, calls, records, times). */
ZPY_HIDDEN PyObject *zpy_mapop_stats(zpy_mapop *op);
/* Stops and reaps the workers, frees op. NULL is accepted. After the
 * pipeline that calls op is destroyed. */
ZPY_HIDDEN void zpy_mapop_free(zpy_mapop *op);

/* ------------------------------------------------------------ _pipeline.c */

#define ZPY_MAX_MAPS 8

typedef struct zpy_PipelineObject {
    PyObject_HEAD
    zp_pipeline *p;
    PyObject *ws;       /* keeps the worksource alive (a zpy_WorkSourceObject) */
    zpy_logq *log;
    zpy_mapop *maps[ZPY_MAX_MAPS];
    size_t n_maps;
    zpy_nexter *nexter; /* the next-thread, from the first next() */
    int process;        /* runner = process */
    int started;
    int ended;          /* ZP_END seen */
    int closed;
    int in_next;        /* a thread waits in next() (the GIL released) */
    int stopping;       /* closing with a next() call in flight: the dataset's
                           stop count was raised (transfers end) */
    Py_ssize_t live_batches;
    /* called by the last batch to go after close(): zpy_pipeline_shutdown
     * (a callback, so that _batch.c does not call up into _pipeline.c) */
    void (*on_last_batch)(struct zpy_PipelineObject *self);
} zpy_PipelineObject;

extern ZPY_HIDDEN PyTypeObject zpy_PipelineType;

/* Stops and frees what the pipeline runs (threads, workers), unless a
 * thread waits in next() (that next() does it when it returns). */
ZPY_HIDDEN void zpy_pipeline_shutdown(zpy_PipelineObject *self);

/* ------------------------------------------------------------ _batch.c */

extern ZPY_HIDDEN PyTypeObject zpy_BatchType;
extern ZPY_HIDDEN PyTypeObject zpy_ViewType;

/* A Batch over b (kept by the caller): owns the keep from now on, also on
 * failure (then the batch is released). */
ZPY_HIDDEN PyObject *zpy_make_batch(zpy_PipelineObject *self, const zp_batch *b);

#endif
