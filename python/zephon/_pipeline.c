/*
 * _pipeline.c - Pipeline: a handle over zp_pipeline. Builder calls before
 * iteration, next() (through the next-thread of _wait.c, so that Ctrl-C
 * reaches the loop), snapshots, checkpoint state, close().
 *
 * Closing stops what runs at once (pipeline_cancel: no transform starts,
 * running ones end, a next() in flight ends, the process runner's workers
 * go) and destroys the pipeline when no batch of it lives any more: a
 * delivered batch's memory belongs to the pipeline.
 */
#include "_zephon.h"

#include <stdlib.h>
#include <string.h>

/* Stops what runs now, so that nothing waits for long after: no transform
 * starts any more, running ones end (the process runner's busy workers are
 * killed), a next() call in flight ends soon (transfers stop through the
 * dataset's stop hook), the process runner's workers are reaped once no
 * map task uses them. Idempotent; the pipeline itself is destroyed later
 * (zpy_pipeline_shutdown), when no batch of it lives any more. */
static void pipeline_cancel(zpy_PipelineObject *self)
{
    for (size_t i = 0; i < self->n_maps; i++)
        zpy_mapop_cancel(self->maps[i]);
    if (!self->stopping && zpy_nexter_busy(self->nexter)) {
        zpy_WorkSourceObject *ws = (zpy_WorkSourceObject *)self->ws;
        atomic_fetch_add(&((zpy_DatasetObject *)ws->dataset)->stop, 1);
        self->stopping = 1;
    }
    for (size_t i = 0; i < self->n_maps; i++)
        zpy_mapop_reap(self->maps[i]);
}

void zpy_pipeline_shutdown(zpy_PipelineObject *self)
{
    pipeline_cancel(self);
    if (self->in_next)
        return; /* next() shuts it down when it returns (closed is set) */
    zpy_nexter_free(self->nexter); /* waits for a call in flight: it ends now */
    self->nexter = NULL;
    if (self->p) {
        zp_pipeline *p = self->p;
        self->p = NULL;
        Py_BEGIN_ALLOW_THREADS zp_pipeline_destroy(p);
        Py_END_ALLOW_THREADS
    }
    if (self->stopping) {
        zpy_WorkSourceObject *ws = (zpy_WorkSourceObject *)self->ws;
        atomic_fetch_sub(&((zpy_DatasetObject *)ws->dataset)->stop, 1);
        self->stopping = 0;
    }
    for (size_t i = 0; i < self->n_maps; i++) {
        zpy_mapop_free(self->maps[i]);
        self->maps[i] = NULL;
    }
    self->n_maps = 0;
}

static void Pipeline_dealloc(zpy_PipelineObject *self)
{
    zpy_pipeline_shutdown(self);
    zpy_logq_free(self->log);
    Py_XDECREF(self->ws);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Pipeline_init(zpy_PipelineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"work_source", "threads", "epochs", "chunk_samples",
                             "in_flight_chunks", "on_bad_record", "shard_cache_bytes", NULL};
    PyObject *wso;
    int threads = 0;
    unsigned int epochs = 1;
    Py_ssize_t chunk = 64, in_flight = 0;
    const char *bad = "fail";
    unsigned long long cache = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|iInnsK", kwlist, &zpy_WorkSourceType, &wso,
                                     &threads, &epochs, &chunk, &in_flight, &bad, &cache))
        return -1;
    self->on_last_batch = zpy_pipeline_shutdown;
    if (self->p || self->ws) {
        PyErr_SetString(PyExc_RuntimeError, "Pipeline already initialised");
        return -1;
    }
    if (zpy_nonneg("Pipeline", "chunk_samples", chunk) || zpy_nonneg("Pipeline", "in_flight_chunks", in_flight))
        return -1;
    zp_pipeline_config cfg;
    zp_pipeline_config_init(&cfg);
    cfg.threads = threads;
    cfg.epochs = epochs;
    cfg.chunk_samples = (size_t)chunk;
    cfg.in_flight_chunks = (size_t)in_flight;
    if (cache)
        cfg.shard_cache_bytes = (size_t)cache;
    if (strcmp(bad, "fail") == 0)
        cfg.on_bad_record = ZP_BAD_RECORD_FAIL;
    else if (strcmp(bad, "skip") == 0)
        cfg.on_bad_record = ZP_BAD_RECORD_SKIP;
    else {
        PyErr_Format(PyExc_ValueError, "on_bad_record = '%s': must be 'fail' or 'skip'", bad);
        return -1;
    }
    self->log = zpy_logq_new();
    cfg.log = zpy_logq_push;
    cfg.log_user = self->log;
    zp_status st = zp_pipeline_create(((zpy_WorkSourceObject *)wso)->ws, &cfg, &self->p);
    if (st != ZP_OK) {
        zpy_raise_status(st, zp_pipeline_errmsg(self->p));
        zp_pipeline_destroy(self->p);
        self->p = NULL;
        return -1;
    }
    Py_INCREF(wso);
    self->ws = wso;
    return 0;
}

static int check_open(zpy_PipelineObject *self)
{
    if (!self->p) {
        zpy_raise_status(ZP_ERR_STATE, "the pipeline is closed");
        return -1;
    }
    return 0;
}

#define CALL_OR_RAISE(self, expr)                                                                  \
    do {                                                                                           \
        if (check_open(self))                                                                      \
            return NULL;                                                                           \
        zp_status st_ = (expr);                                                                    \
        if (st_ != ZP_OK)                                                                          \
            return zpy_raise_status(st_, zp_pipeline_errmsg(self->p));                                 \
        Py_RETURN_NONE;                                                                            \
    } while (0)

static PyObject *Pipeline_prefetch(zpy_PipelineObject *self, PyObject *args)
{
    Py_ssize_t buf, par;
    /* -2: "auto" (ZP_AUTO) */
    if (!PyArg_ParseTuple(args, "nn", &buf, &par) ||
        (buf != -2 && zpy_nonneg("prefetch", "buffer_size", buf)) ||
        (par != -2 && zpy_nonneg("prefetch", "parallelism", par)))
        return NULL;
    CALL_OR_RAISE(self, zp_pipeline_prefetch(self->p, buf == -2 ? ZP_AUTO : (size_t)buf,
                                             par == -2 ? ZP_AUTO : (size_t)par));
}

static PyObject *Pipeline_fetch(zpy_PipelineObject *self, PyObject *args)
{
    Py_ssize_t par;
    /* -2: "auto" (ZP_AUTO) */
    if (!PyArg_ParseTuple(args, "n", &par) || (par != -2 && zpy_nonneg("fetch", "parallelism", par)))
        return NULL;
    CALL_OR_RAISE(self, zp_pipeline_fetch(self->p, par == -2 ? ZP_AUTO : (size_t)par));
}

static PyObject *Pipeline_map(zpy_PipelineObject *self, PyObject *args)
{
    PyObject *apply;
    Py_ssize_t par;
    const char *name;
    if (!PyArg_ParseTuple(args, "Ons", &apply, &par, &name))
        return NULL;
    if (check_open(self))
        return NULL;
    if (self->n_maps == ZPY_MAX_MAPS)
        return zpy_raise_status(ZP_ERR_LIMIT, "at most 8 map_transform operators");
    if (par <= 0 || par > 1024) {
        char m[128];
        snprintf(m, sizeof m, "map_transform('%s'): parallelism = %zd: must be 1..1024", name, par);
        return zpy_raise_status(ZP_ERR_INVALID, m);
    }
    zpy_mapop *op = zpy_mapop_new(apply, (size_t)par, name);
    if (!op)
        return NULL;
    /* the runner is chosen at start (options may come later) */
    zp_status st = zp_pipeline_map_transform_batch(self->p, zpy_mapop_run, op, (size_t)par,
                                                   zpy_mapop_name(op));
    if (st != ZP_OK) {
        zpy_mapop_free(op);
        return zpy_raise_status(st, zp_pipeline_errmsg(self->p));
    }
    self->maps[self->n_maps++] = op;
    Py_RETURN_NONE;
}

static PyObject *Pipeline_tokenize(zpy_PipelineObject *self, PyObject *args)
{
    const char *id, *field;
    Py_ssize_t par;
    long eot = ZP_TOKEN_DEFAULT, bos = ZP_TOKEN_DEFAULT;
    int match_special = 0;
    if (!PyArg_ParseTuple(args, "ssn|llp", &id, &field, &par, &eot, &bos, &match_special) ||
        (par != -2 && zpy_nonneg("tokenize", "parallelism", par))) /* -2: "auto" */
        return NULL;
    zp_tokenizer_config tc;
    zp_tokenizer_config_init(&tc);
    /* out of int32_t's range: the library's message names the value */
    tc.eot = eot < INT32_MIN || eot > INT32_MAX ? INT32_MAX : (int32_t)eot;
    tc.bos = bos < INT32_MIN || bos > INT32_MAX ? INT32_MAX : (int32_t)bos;
    tc.match_special = match_special;
    CALL_OR_RAISE(self, zp_pipeline_tokenize_config(self->p, id, &tc, field,
                                                    par == -2 ? ZP_AUTO : (size_t)par));
}

static PyObject *Pipeline_batch(zpy_PipelineObject *self, PyObject *args)
{
    Py_ssize_t mb;
    if (!PyArg_ParseTuple(args, "n", &mb) || zpy_nonneg("batch", "microbatch_size", mb))
        return NULL;
    CALL_OR_RAISE(self, zp_pipeline_batch(self->p, (size_t)mb));
}

static PyObject *Pipeline_pack(zpy_PipelineObject *self, PyObject *args)
{
    const char *mode;
    Py_ssize_t seq, window = -1; /* -1: not given */
    if (!PyArg_ParseTuple(args, "sn|n", &mode, &seq, &window) ||
        zpy_nonneg("pack", "seq_len", seq) ||
        (window != -1 && zpy_nonneg("pack", "window", window)))
        return NULL;
    if (strcmp(mode, "bestfit") == 0)
        CALL_OR_RAISE(self, zp_pipeline_pack_bestfit(self->p, (size_t)seq,
                                                     window >= 0 ? (size_t)window
                                                                 : ZP_PACK_WINDOW_DEFAULT));
    if (window != -1)
        return zpy_raise_status(ZP_ERR_INVALID, "pack: window is for mode 'bestfit' only");
    zp_pack_mode m;
    if (strcmp(mode, "concat") == 0)
        m = ZP_PACK_CONCAT;
    else if (strcmp(mode, "pad") == 0)
        m = ZP_PACK_PAD;
    else if (strcmp(mode, "records") == 0)
        m = ZP_PACK_RECORDS;
    else
        return zpy_raise_status(ZP_ERR_INVALID,
                                "pack: mode must be 'concat', 'pad', 'bestfit' or 'records'");
    CALL_OR_RAISE(self, zp_pipeline_pack(self->p, m, (size_t)seq));
}

static PyObject *Pipeline_doc_masking(zpy_PipelineObject *self, PyObject *args)
{
    unsigned int outputs;
    int cont;
    if (!PyArg_ParseTuple(args, "Ip", &outputs, &cont))
        return NULL;
    CALL_OR_RAISE(self, zp_pipeline_doc_masking(self->p, outputs,
                                                cont ? ZP_POSITIONS_CONTINUE
                                                     : ZP_POSITIONS_RESTART));
}

static PyObject *Pipeline_balance(zpy_PipelineObject *self, PyObject *args)
{
    Py_ssize_t window;
    if (!PyArg_ParseTuple(args, "n", &window))
        return NULL;
    if (window < 0)
        return zpy_raise_status(ZP_ERR_INVALID, "balance: window must be >= 0");
    CALL_OR_RAISE(self, zp_pipeline_balance(self->p, (size_t)window));
}

static PyObject *Pipeline_options(zpy_PipelineObject *self, PyObject *args)
{
    Py_ssize_t pb;
    int process;
    double watchdog = -1;
    long long budget = -1;
    if (!PyArg_ParseTuple(args, "np|dL", &pb, &process, &watchdog, &budget))
        return NULL;
    if (check_open(self))
        return NULL;
    if (self->started)
        return zpy_raise_status(ZP_ERR_STATE, "options: iteration already started");
    if (pb >= 0 || pb == -2) { /* -2: auto */
        zp_status st = zp_pipeline_options(self->p, pb == -2 ? ZP_PREFETCH_AUTO : (size_t)pb);
        if (st != ZP_OK)
            return zpy_raise_status(st, zp_pipeline_errmsg(self->p));
    }
    if (watchdog != -1) {
        zp_status st = zp_pipeline_watchdog(self->p, watchdog);
        if (st != ZP_OK)
            return zpy_raise_status(st, zp_pipeline_errmsg(self->p));
    }
    if (budget >= 0) {
        zp_status st = zp_pipeline_memory_budget(self->p, (size_t)budget);
        if (st != ZP_OK)
            return zpy_raise_status(st, zp_pipeline_errmsg(self->p));
    }
    self->process = process;
    Py_RETURN_NONE;
}

static PyObject *Pipeline_enable_obs(zpy_PipelineObject *self, PyObject *unused)
{
    (void)unused;
    CALL_OR_RAISE(self, zp_pipeline_enable_observability(self->p));
}

/* Once, before the first next(): the process runner's workers (forked
 * before the pipeline's threads exist), then the next-thread. */
static int start_iteration(zpy_PipelineObject *self)
{
    self->started = 1;
    if (self->process && zpy_runners_fork(self->maps, self->n_maps) != 0)
        return -1;
    self->nexter = zpy_nexter_new(self->p, self->log);
    return self->nexter ? 0 : -1;
}

/* _next(): the next batch, or None at the end. Waits in slices, seeing
 * Ctrl-C (_wait.c); an interrupted call is taken by the next _next(). */
static PyObject *Pipeline_next(zpy_PipelineObject *self, PyObject *unused)
{
    (void)unused;
    if (check_open(self))
        return NULL;
    if (self->in_next)
        return zpy_raise_status(ZP_ERR_STATE, "next(): another thread is iterating this pipeline");
    if (!self->started && start_iteration(self) != 0)
        return NULL;
    if (!self->nexter)
        return zpy_raise_status(ZP_ERR_STATE, "next(): the pipeline could not start earlier");
    if (self->ended)
        Py_RETURN_NONE;
    const zp_batch *b = NULL;
    zp_status st;
    zp_pipeline *p = self->p;
    self->in_next = 1;
    int rc = zpy_nexter_next(self->nexter, &st, &b);
    self->in_next = 0;
    if (self->closed) {
        /* closed by another thread meanwhile: this batch is not handed out */
        if (rc == 0 && st == ZP_OK)
            zp_pipeline_release_batch(p, b);
        if (self->live_batches == 0)
            zpy_pipeline_shutdown(self);
        if (rc != 0)
            return NULL; /* the KeyboardInterrupt */
        return zpy_raise_status(ZP_ERR_STATE, "the pipeline was closed");
    }
    if (rc != 0)
        return NULL; /* KeyboardInterrupt (or another handler's exception) */
    if (st == ZP_END) {
        self->ended = 1;
        Py_RETURN_NONE;
    }
    if (st != ZP_OK)
        return zpy_raise_status(st, zp_pipeline_errmsg(p));
    return zpy_make_batch(self, b);
}

/* _snapshot(which): 0 metrics, 1 fetch timing, 2 prefetch timing, as the
 * library's JSON (the Python side parses it into a dict). */
static PyObject *Pipeline_snapshot(zpy_PipelineObject *self, PyObject *args)
{
    int which;
    if (!PyArg_ParseTuple(args, "i", &which) || check_open(self))
        return NULL;
    union {
        zp_metrics_snapshot m;
        zp_fetch_timing f;
        zp_prefetch_timing pf;
    } u;
    char *js = NULL;
    zp_status st = ZP_ERR_INVALID;
    if (which == 0 && (st = zp_pipeline_metrics_snapshot(self->p, &u.m)) == ZP_OK)
        st = zp_metrics_json(&u.m, &js);
    else if (which == 1 && (st = zp_pipeline_fetch_timing_snapshot(self->p, &u.f)) == ZP_OK)
        st = zp_fetch_timing_json(&u.f, &js);
    else if (which == 2 && (st = zp_pipeline_prefetch_timing_snapshot(self->p, &u.pf)) == ZP_OK)
        st = zp_prefetch_timing_json(&u.pf, &js);
    if (st != ZP_OK)
        return zpy_raise_status(st, zp_pipeline_errmsg(self->p));
    PyObject *s = PyUnicode_FromString(js);
    free(js);
    return s;
}

/* The runners' own figures: [{name, runner, calls, records, ...}]. */
static PyObject *Pipeline_runner_stats(zpy_PipelineObject *self, PyObject *unused)
{
    (void)unused;
    PyObject *l = PyList_New(0);
    for (size_t i = 0; l && i < self->n_maps; i++) {
        PyObject *d = zpy_mapop_stats(self->maps[i]);
        if (!d || PyList_Append(l, d) != 0) {
            Py_XDECREF(d);
            Py_DECREF(l);
            return NULL;
        }
        Py_DECREF(d);
    }
    return l;
}

static PyObject *Pipeline_state_save(zpy_PipelineObject *self, PyObject *unused)
{
    (void)unused;
    if (check_open(self))
        return NULL;
    char *js = NULL;
    size_t len = 0;
    zp_status st = zp_pipeline_state_save(self->p, &js, &len);
    if (st != ZP_OK)
        return zpy_raise_status(st, zp_pipeline_errmsg(self->p));
    PyObject *s = PyUnicode_FromStringAndSize(js, (Py_ssize_t)len);
    free(js);
    return s;
}

static PyObject *Pipeline_state_restore(zpy_PipelineObject *self, PyObject *args)
{
    const char *js;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "s#", &js, &len))
        return NULL;
    CALL_OR_RAISE(self, zp_pipeline_state_restore(self->p, js, (size_t)len));
}

static PyObject *Pipeline_counts(zpy_PipelineObject *self, PyObject *unused)
{
    (void)unused;
    if (check_open(self))
        return NULL;
    zp_pipeline_counts c;
    zp_pipeline_get_counts(self->p, &c);
    return Py_BuildValue("{sKsKsKsKsKsKsKsKsKsKsKsKsKsn}", "batches", (unsigned long long)c.batches,
                         "samples", (unsigned long long)c.samples, "padded",
                         (unsigned long long)c.padded, "skipped", (unsigned long long)c.skipped,
                         "filtered", (unsigned long long)c.filtered, "tokens",
                         (unsigned long long)c.tokens, "truncated_tokens",
                         (unsigned long long)c.truncated_tokens, "pad_tokens",
                         (unsigned long long)c.pad_tokens, "cut_documents",
                         (unsigned long long)c.cut_documents, "balance_windows",
                         (unsigned long long)c.balance_windows, "attn_cost",
                         (unsigned long long)c.attn_cost, "attn_peak_before",
                         (unsigned long long)c.attn_peak_before, "attn_peak_after",
                         (unsigned long long)c.attn_peak_after, "kept_batches",
                         (Py_ssize_t)zp_pipeline_kept_batches(self->p));
}

static PyObject *Pipeline_close(zpy_PipelineObject *self, PyObject *unused)
{
    (void)unused;
    self->closed = 1;
    if (self->live_batches == 0)
        zpy_pipeline_shutdown(self);
    else
        pipeline_cancel(self); /* the rest when the last batch goes */
    Py_RETURN_NONE;
}

static PyObject *Pipeline_logs(zpy_PipelineObject *self, PyObject *unused)
{
    (void)unused;
    return zpy_logq_drain(self->log);
}

static PyObject *Pipeline_address(zpy_PipelineObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromVoidPtr(self->p);
}

static PyObject *Pipeline_eot(zpy_PipelineObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromLong(self->p ? zp_pipeline_eot(self->p) : -1);
}

static PyObject *Pipeline_bos(zpy_PipelineObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromLong(self->p ? zp_pipeline_bos(self->p) : -1);
}

static PyObject *Pipeline_tokenizer_ident(zpy_PipelineObject *self, PyObject *unused)
{
    (void)unused;
    const zp_tokenizer *t = self->p ? zp_pipeline_tokenizer(self->p) : NULL;
    if (!t)
        Py_RETURN_NONE;
    return PyUnicode_FromString(zp_tokenizer_ident(t));
}

static PyMethodDef Pipeline_methods[] = {
    {"_prefetch", (PyCFunction)Pipeline_prefetch, METH_VARARGS, NULL},
    {"_fetch", (PyCFunction)Pipeline_fetch, METH_VARARGS, NULL},
    {"_map", (PyCFunction)Pipeline_map, METH_VARARGS, NULL},
    {"_tokenize", (PyCFunction)Pipeline_tokenize, METH_VARARGS, NULL},
    {"_batch", (PyCFunction)Pipeline_batch, METH_VARARGS, NULL},
    {"_pack", (PyCFunction)Pipeline_pack, METH_VARARGS, NULL},
    {"_doc_masking", (PyCFunction)Pipeline_doc_masking, METH_VARARGS, NULL},
    {"_balance", (PyCFunction)Pipeline_balance, METH_VARARGS, NULL},
    {"_options", (PyCFunction)Pipeline_options, METH_VARARGS, NULL},
    {"_enable_observability", (PyCFunction)Pipeline_enable_obs, METH_NOARGS, NULL},
    {"_next", (PyCFunction)Pipeline_next, METH_NOARGS, NULL},
    {"_snapshot", (PyCFunction)Pipeline_snapshot, METH_VARARGS, NULL},
    {"_runner_stats", (PyCFunction)Pipeline_runner_stats, METH_NOARGS, NULL},
    {"_state_save", (PyCFunction)Pipeline_state_save, METH_NOARGS, NULL},
    {"_state_restore", (PyCFunction)Pipeline_state_restore, METH_VARARGS, NULL},
    {"_counts", (PyCFunction)Pipeline_counts, METH_NOARGS, NULL},
    {"_close", (PyCFunction)Pipeline_close, METH_NOARGS, NULL},
    {"_logs", (PyCFunction)Pipeline_logs, METH_NOARGS, NULL},
    {"_address", (PyCFunction)Pipeline_address, METH_NOARGS, NULL},
    {"_eot", (PyCFunction)Pipeline_eot, METH_NOARGS, NULL},
    {"_bos", (PyCFunction)Pipeline_bos, METH_NOARGS, NULL},
    {"_tokenizer_ident", (PyCFunction)Pipeline_tokenizer_ident, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

PyTypeObject zpy_PipelineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "zephon._core.Pipeline",
    .tp_doc = "Pipeline(work_source, threads=0, epochs=1, chunk_samples=64, in_flight_chunks=0, "
              "on_bad_record='fail', shard_cache_bytes=0): the extension's pipeline (the "
              "zephon.Pipeline subclass is the API).",
    .tp_basicsize = sizeof(zpy_PipelineObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Pipeline_init,
    .tp_dealloc = (destructor)Pipeline_dealloc,
    .tp_methods = Pipeline_methods,
};
