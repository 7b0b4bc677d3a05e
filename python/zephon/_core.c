/*
 * _core.c - the CPython extension over libzephon (the zephon package's
 * engine; zephon/__init__.py is the public face).
 *
 *   Dataset, WorkSource, Pipeline  handles over zp_dataset, zp_worksource,
 *                                  zp_pipeline; errors become zephon.Error
 *                                  carrying the library's message
 *   Batch, View                    a delivered batch kept out of the
 *                                  pipeline's rotation (zp_pipeline_keep_batch)
 *                                  for as long as a View of it (an array's
 *                                  buffer) lives; released on the last one
 *   map transforms                 one batch callback per chunk; the thread
 *                                  runner calls the Python function under the
 *                                  GIL, the process runner hands the chunk to
 *                                  a forked worker through shared memory
 *                                  (runner.c-like code at the end of this file)
 *
 * The GIL is released around every call that may wait for the pipeline's
 * threads (next, destroy), since the thread runner needs it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "zephon.h"

static PyObject *ZpError;      /* zephon.Error */
static PyObject *BatchClass;   /* the Python subclass of Batch to create */

/* ------------------------------------------------------------ errors */

static PyObject *raise_status(zp_status st, const char *msg)
{
    PyObject *args = Py_BuildValue("(si)", msg && *msg ? msg : zp_status_str(st), (int)st);
    if (args) {
        PyErr_SetObject(ZpError, args);
        Py_DECREF(args);
    }
    return NULL;
}

/* ------------------------------------------------------------ logs */

/* The library's log messages, kept until the Python side drains them into
 * the logging module (the library's threads never take the GIL for it). */
typedef struct logq {
    pthread_mutex_t mu;
    PyObject *unused;
    struct logmsg {
        int level;
        char *msg;
    } items[256];
    size_t n;
    uint64_t dropped;
} logq;

static void logq_push(void *user, zp_log_level lvl, const char *msg)
{
    logq *q = user;
    pthread_mutex_lock(&q->mu);
    if (q->n < sizeof q->items / sizeof q->items[0]) {
        q->items[q->n].level = (int)lvl;
        q->items[q->n].msg = strdup(msg);
        if (q->items[q->n].msg)
            q->n++;
    } else {
        q->dropped++;
    }
    pthread_mutex_unlock(&q->mu);
}

static logq *logq_new(void)
{
    logq *q = calloc(1, sizeof *q);
    if (q)
        pthread_mutex_init(&q->mu, NULL);
    return q;
}

/* [(level, msg), ...] and the count dropped since. */
static PyObject *logq_drain(logq *q)
{
    PyObject *out = PyList_New(0);
    if (!out || !q)
        return out;
    pthread_mutex_lock(&q->mu);
    for (size_t i = 0; i < q->n; i++) {
        PyObject *t = Py_BuildValue("(is)", q->items[i].level, q->items[i].msg);
        free(q->items[i].msg);
        if (t) {
            PyList_Append(out, t);
            Py_DECREF(t);
        }
    }
    q->n = 0;
    if (q->dropped) {
        char m[96];
        snprintf(m, sizeof m, "%llu more log messages were dropped", (unsigned long long)q->dropped);
        PyObject *t = Py_BuildValue("(is)", (int)ZP_LOG_WARN, m);
        if (t) {
            PyList_Append(out, t);
            Py_DECREF(t);
        }
        q->dropped = 0;
    }
    pthread_mutex_unlock(&q->mu);
    return out;
}

static void logq_free(logq *q)
{
    if (!q)
        return;
    for (size_t i = 0; i < q->n; i++)
        free(q->items[i].msg);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

/* A negative count is a usage error naming the setting (the library
 * takes size_t: -1 would read as 2^64 - 1). */
static int nonneg(const char *call, const char *name, Py_ssize_t v)
{
    if (v >= 0)
        return 0;
    char m[160];
    snprintf(m, sizeof m, "%s: %s = %zd: must not be negative", call, name, v);
    raise_status(ZP_ERR_INVALID, m);
    return -1;
}

/* ------------------------------------------------------------ Dataset */

typedef struct {
    PyObject_HEAD
    zp_dataset *ds;
    logq *log;
} DatasetObject;

static void Dataset_dealloc(DatasetObject *self)
{
    zp_dataset_destroy(self->ds);
    logq_free(self->log);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Dataset(specs: list[str], max_record_bytes=0, max_shard_bytes=0,
 *         allow_empty_shards=False, index_store_dir=None) */
static int Dataset_init(DatasetObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"specs", "max_record_bytes", "max_shard_bytes", "allow_empty_shards",
                             "index_store_dir", "cache_dir", NULL};
    PyObject *specs;
    unsigned long long max_rec = 0, max_shard = 0;
    int allow_empty = 0;
    const char *store = NULL, *cache = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|KKpzz", kwlist, &specs, &max_rec, &max_shard,
                                     &allow_empty, &store, &cache))
        return -1;
    if (self->ds) {
        PyErr_SetString(PyExc_RuntimeError, "Dataset already initialised");
        return -1;
    }
    PyObject *seq = PySequence_Fast(specs, "specs must be a list of paths, globs, folders or URLs");
    if (!seq)
        return -1;
    self->log = logq_new();
    zp_dataset_config cfg;
    zp_dataset_config_init(&cfg);
    if (max_rec)
        cfg.max_record_bytes = (size_t)max_rec;
    if (max_shard)
        cfg.max_shard_bytes = (size_t)max_shard;
    cfg.allow_empty_shards = allow_empty;
    cfg.index_store_dir = store;
    if (cache)
        cfg.storage.cache_dir = cache;
    cfg.log = logq_push;
    cfg.log_user = self->log;
    zp_status st = zp_dataset_create(&cfg, &self->ds);
    if (st != ZP_OK) {
        raise_status(st, zp_dataset_errmsg(self->ds));
        Py_DECREF(seq);
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n == 0) {
        Py_DECREF(seq);
        raise_status(ZP_ERR_INVALID, "Dataset: no shards given");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *b = PyUnicode_FSConverter(o, &b) ? b : NULL;
        if (!b) {
            Py_DECREF(seq);
            return -1;
        }
        const char *spec = PyBytes_AS_STRING(b);
        Py_BEGIN_ALLOW_THREADS st = zp_dataset_add(self->ds, spec);
        Py_END_ALLOW_THREADS Py_DECREF(b);
        if (st != ZP_OK) {
            Py_DECREF(seq);
            raise_status(st, zp_dataset_errmsg(self->ds));
            return -1;
        }
    }
    Py_DECREF(seq);
    Py_BEGIN_ALLOW_THREADS st = zp_dataset_index(self->ds);
    Py_END_ALLOW_THREADS if (st != ZP_OK)
    {
        raise_status(st, zp_dataset_errmsg(self->ds));
        return -1;
    }
    return 0;
}

static PyObject *Dataset_num_samples(DatasetObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong(zp_dataset_num_samples(self->ds));
}

static PyObject *Dataset_shards(DatasetObject *self, PyObject *unused)
{
    (void)unused;
    size_t n = zp_dataset_num_shards(self->ds);
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *t = Py_BuildValue("(sKK)", zp_dataset_shard_name(self->ds, i),
                                    (unsigned long long)zp_dataset_shard_samples(self->ds, i),
                                    (unsigned long long)zp_dataset_shard_bytes(self->ds, i));
        if (!t) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, t);
    }
    return l;
}

static PyObject *Dataset_logs(DatasetObject *self, PyObject *unused)
{
    (void)unused;
    return logq_drain(self->log);
}

static PyMethodDef Dataset_methods[] = {
    {"num_samples", (PyCFunction)Dataset_num_samples, METH_NOARGS, "samples in the dataset"},
    {"shards", (PyCFunction)Dataset_shards, METH_NOARGS, "[(name, samples, bytes)]"},
    {"_logs", (PyCFunction)Dataset_logs, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyTypeObject DatasetType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "zephon._core.Dataset",
    .tp_basicsize = sizeof(DatasetObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Dataset_init,
    .tp_dealloc = (destructor)Dataset_dealloc,
    .tp_methods = Dataset_methods,
};

/* ------------------------------------------------------------ WorkSource */

typedef struct {
    PyObject_HEAD
    zp_worksource *ws;
    PyObject *dataset; /* keeps the dataset alive */
} WorkSourceObject;

static void WorkSource_dealloc(WorkSourceObject *self)
{
    zp_worksource_destroy(self->ws);
    Py_XDECREF(self->dataset);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* WorkSource(dataset, seed, rank, world_size, shuffle, shuffle_block_shards,
 *            remainder ("pad"|"drop"), parts [(name, shards, weight)],
 *            epoch_samples) */
static int WorkSource_init(WorkSourceObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"dataset", "seed", "rank", "world_size", "shuffle",
                             "shuffle_block_shards", "remainder", "parts", "epoch_samples", NULL};
    PyObject *dso, *parts = Py_None;
    unsigned long long seed = 0, epoch_samples = 0;
    unsigned int rank = 0, world = 1, block = 8;
    int shuffle = 1;
    const char *rem = "pad";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|KIIpIsOK", kwlist, &DatasetType, &dso, &seed,
                                     &rank, &world, &shuffle, &block, &rem, &parts,
                                     &epoch_samples))
        return -1;
    zp_worksource_config cfg;
    zp_worksource_config_init(&cfg);
    cfg.seed = seed;
    cfg.rank = rank;
    cfg.world_size = world;
    cfg.shuffle = shuffle;
    cfg.shuffle_block_shards = block;
    cfg.epoch_samples = epoch_samples;
    if (strcmp(rem, "pad") == 0)
        cfg.remainder = ZP_REMAINDER_PAD;
    else if (strcmp(rem, "drop") == 0)
        cfg.remainder = ZP_REMAINDER_DROP;
    else {
        PyErr_Format(PyExc_ValueError, "remainder = '%s': must be 'pad' or 'drop'", rem);
        return -1;
    }
    zp_mix_part *mp = NULL;
    PyObject *names = NULL;
    if (parts != Py_None) {
        PyObject *seq = PySequence_Fast(parts, "parts must be a list of (name, shards, weight)");
        if (!seq)
            return -1;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        mp = calloc((size_t)n + 1, sizeof *mp);
        names = PyList_New(0);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
            PyObject *name;
            unsigned long long shards;
            double w;
            if (!PyArg_ParseTuple(it, "OKd;parts[i] must be (name, shards, weight)", &name,
                                  &shards, &w)) {
                free(mp);
                Py_DECREF(seq);
                Py_DECREF(names);
                return -1;
            }
            if (name != Py_None) {
                PyObject *b = PyUnicode_AsUTF8String(name);
                if (!b) {
                    free(mp);
                    Py_DECREF(seq);
                    Py_DECREF(names);
                    return -1;
                }
                PyList_Append(names, b);
                Py_DECREF(b);
                mp[i].name = PyBytes_AS_STRING(b);
            }
            mp[i].shards = (size_t)shards;
            mp[i].weight = w;
        }
        cfg.parts = mp;
        cfg.n_parts = (size_t)n;
        Py_DECREF(seq);
    }
    DatasetObject *d = (DatasetObject *)dso;
    zp_status st;
    Py_BEGIN_ALLOW_THREADS st = zp_worksource_create(d->ds, &cfg, &self->ws);
    Py_END_ALLOW_THREADS free(mp);
    Py_XDECREF(names);
    if (st != ZP_OK) {
        raise_status(st, zp_worksource_errmsg(self->ws));
        return -1;
    }
    Py_INCREF(dso);
    self->dataset = dso;
    return 0;
}

static PyObject *WorkSource_info(WorkSourceObject *self, PyObject *unused)
{
    (void)unused;
    const zp_worksource_config *c = zp_worksource_get_config(self->ws);
    PyObject *parts = PyList_New(0);
    for (size_t i = 0; parts && i < zp_worksource_num_parts(self->ws); i++) {
        PyObject *t = Py_BuildValue("(sKd)", zp_worksource_part_name(self->ws, i),
                                    (unsigned long long)zp_worksource_part_samples(self->ws, i),
                                    zp_worksource_part_weight(self->ws, i));
        if (t) {
            PyList_Append(parts, t);
            Py_DECREF(t);
        }
    }
    return Py_BuildValue("{sKsIsIsisKsKsKsKsN}", "seed", (unsigned long long)c->seed, "rank",
                         c->rank, "world_size", c->world_size, "shuffle", c->shuffle,
                         "samples_per_rank",
                         (unsigned long long)zp_worksource_samples_per_rank(self->ws),
                         "draws_per_epoch",
                         (unsigned long long)zp_worksource_draws_per_epoch(self->ws), "padded",
                         (unsigned long long)zp_worksource_padded(self->ws), "dropped",
                         (unsigned long long)zp_worksource_dropped(self->ws), "parts", parts);
}

static PyObject *WorkSource_samples(WorkSourceObject *self, PyObject *args)
{
    unsigned int epoch = 0;
    unsigned long long start = 0, count = 0;
    if (!PyArg_ParseTuple(args, "IKK", &epoch, &start, &count))
        return NULL;
    PyObject *l = PyList_New(0);
    for (unsigned long long i = 0; l && i < count; i++) {
        zp_sample s;
        zp_status st = zp_worksource_sample(self->ws, epoch, start + i, &s);
        if (st != ZP_OK) {
            Py_DECREF(l);
            return raise_status(st, zp_worksource_errmsg(self->ws));
        }
        PyObject *t = Py_BuildValue("(IKKi)", s.shard, (unsigned long long)s.record,
                                    (unsigned long long)s.global_id, s.padded);
        PyList_Append(l, t);
        Py_XDECREF(t);
    }
    return l;
}

static PyMethodDef WorkSource_methods[] = {
    {"info", (PyCFunction)WorkSource_info, METH_NOARGS, "settings and counts as a dict"},
    {"samples", (PyCFunction)WorkSource_samples, METH_VARARGS,
     "samples(epoch, start, count): [(shard, record, global_id, padded)]"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject WorkSourceType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "zephon._core.WorkSource",
    .tp_basicsize = sizeof(WorkSourceObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)WorkSource_init,
    .tp_dealloc = (destructor)WorkSource_dealloc,
    .tp_methods = WorkSource_methods,
};

/* ------------------------------------------------------------ map runners */

/* Request and response layout in a worker's shared memory (all little
 * endian, 8-byte aligned):
 *   request  at 0:        u64 end, u64 n, then n x (u64 kind, u64 len), then
 *                         the payloads back to back (kind 0: record JSON,
 *                         1: the record's text only)
 *   response at in_end:   u64 end, u64 n, u64 busy_ns, then n x (u64 kind,
 *                         u64 len) (RES_JSON, RES_DROP, RES_ERROR,
 *                         RES_TEXT), then the payloads */
#define RQ_HDR 16
#define RS_HDR 24

typedef struct prworker {
    pid_t pid;
    int req_w, resp_r; /* parent's ends */
    int memfd;
    unsigned char *map;
    size_t map_len;
    int busy;
    int dead;
    uint64_t calls, records, busy_ns, wait_ns;
} prworker;

typedef struct mapop {
    PyObject *apply; /* apply(kind, bytes) -> bytes | None, raises */
    char name[64];
    int process;     /* the process runner */
    size_t n_workers;
    prworker *w;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int failed;      /* a worker died: every later call fails */
    /* thread runner figures */
    uint64_t calls, records, gil_wait_ns, busy_ns;
} mapop;

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static size_t align8(size_t n) { return (n + 7) & ~(size_t)7; }

/* The payload of a record for the transform: its JSON, or (formats without
 * JSON) its text. */
static const char *record_payload(zp_record *r, size_t *len, uint64_t *kind)
{
    const char *s = zp_record_json(r, len);
    *kind = 0;
    if (*len == 0) {
        *kind = 1;
        if (zp_record_text(r, &s, len) != ZP_OK) {
            s = "";
            *len = 0;
        }
    }
    return s;
}

/* "Type: message (file:line in fn)" of the current exception; clears it. */
static void describe_exception(char *out, size_t cap)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    const char *tname = type ? ((PyTypeObject *)type)->tp_name : "Exception";
    PyObject *s = value ? PyObject_Str(value) : NULL;
    const char *msg = s ? PyUnicode_AsUTF8(s) : NULL;
    if (!msg) {
        PyErr_Clear();
        msg = "";
    }
    char where[256] = "";
    if (tb) {
        PyTracebackObject *t = (PyTracebackObject *)tb;
        while (t->tb_next)
            t = t->tb_next;
        PyCodeObject *co = PyFrame_GetCode(t->tb_frame);
        if (co) {
            const char *fn = PyUnicode_AsUTF8(co->co_filename);
            const char *nm = PyUnicode_AsUTF8(co->co_name);
            snprintf(where, sizeof where, " (%s:%d in %s)", fn ? fn : "?", t->tb_lineno,
                     nm ? nm : "?");
            Py_DECREF(co);
        }
        PyErr_Clear();
    }
    snprintf(out, cap, "%s: %s%s", tname, msg, where);
    Py_XDECREF(s);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

/* What apply gave for a record: the kinds of the process runner's
 * response too. */
enum { RES_JSON = 0, RES_DROP = 1, RES_ERROR = 2, RES_TEXT = 3 };

/* Calls apply on one record's payload (with the GIL): its kind. *out
 * (*olen bytes) is the new JSON, the new text (UTF-8) or the error
 * message, held by *keep (a new reference, or NULL) until the caller
 * releases it. */
static uint64_t call_apply(PyObject *apply, uint64_t kind, const char *s, size_t len,
                           PyObject **keep, const char **out, size_t *olen)
{
    PyObject *res = PyObject_CallFunction(apply, "Ks#", (unsigned long long)kind, s,
                                          (Py_ssize_t)len);
    char msg[600], why[512];
    *keep = NULL;
    *out = NULL;
    *olen = 0;
    if (!res) {
        describe_exception(msg, sizeof msg);
    } else if (res == Py_None) {
        Py_DECREF(res);
        return RES_DROP;
    } else if (PyBytes_Check(res)) {
        *keep = res;
        *out = PyBytes_AS_STRING(res);
        *olen = (size_t)PyBytes_GET_SIZE(res);
        return RES_JSON;
    } else {
        Py_ssize_t n;
        const char *t = PyUnicode_Check(res) ? PyUnicode_AsUTF8AndSize(res, &n) : NULL;
        if (t) {
            *keep = res;
            *out = t;
            *olen = (size_t)n;
            return RES_TEXT;
        }
        if (PyUnicode_Check(res)) {
            describe_exception(why, sizeof why);
            snprintf(msg, sizeof msg, "the transformed text: %s", why);
        } else {
            snprintf(msg, sizeof msg, "internal: apply returned %s", Py_TYPE(res)->tp_name);
        }
        Py_DECREF(res);
    }
    *keep = PyBytes_FromString(msg);
    if (*keep) {
        *out = PyBytes_AS_STRING(*keep);
        *olen = (size_t)PyBytes_GET_SIZE(*keep);
    } else {
        PyErr_Clear();
        *out = "out of memory for the error message";
        *olen = strlen(*out);
    }
    return RES_ERROR;
}

/* Stores what apply gave into the record: its status, as a zp_map_fn
 * would return it. */
static zp_status apply_result(zp_record *rec, uint64_t kind, const char *p, size_t len)
{
    zp_status st = ZP_OK;
    if (kind == RES_JSON) {
        if ((st = zp_record_set_json(rec, p, len)) != ZP_OK)
            zp_record_error(rec, "cannot store the transformed record");
    } else if (kind == RES_TEXT) {
        if ((st = zp_record_set_text(rec, p, len)) != ZP_OK)
            zp_record_error(rec, "cannot store the transformed text");
    } else if (kind == RES_DROP) {
        zp_record_drop(rec);
    } else {
        zp_record_error(rec, "%.*s", (int)(len > 900 ? 900 : len), p);
        st = ZP_ERR_CALLBACK;
    }
    return st;
}

/* Thread runner: the Python function on each record, under the GIL (taken
 * once per chunk). */
static zp_status thread_map(void *user, zp_record *const *recs, size_t n, zp_status *status)
{
    mapop *op = user;
    uint64_t t0 = now_ns();
    PyGILState_STATE g = PyGILState_Ensure();
    uint64_t t1 = now_ns();
    for (size_t i = 0; i < n; i++) {
        size_t len, olen;
        uint64_t kind;
        const char *s = record_payload(recs[i], &len, &kind), *out;
        PyObject *keep;
        uint64_t rk = call_apply(op->apply, kind, s, len, &keep, &out, &olen);
        status[i] = apply_result(recs[i], rk, out, olen);
        Py_XDECREF(keep);
    }
    uint64_t t2 = now_ns();
    op->calls++;
    op->records += n;
    op->gil_wait_ns += t1 - t0;
    op->busy_ns += t2 - t1;
    PyGILState_Release(g);
    return ZP_OK;
}

/* Resize the worker's shared memory to at least want bytes (both sides may
 * grow it: the file grows, each side maps what it needs). */
static int shm_reserve(int fd, unsigned char **map, size_t *map_len, size_t want)
{
    if (want <= *map_len)
        return 0;
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return -1;
    size_t len = (size_t)sb.st_size;
    if (len < want) {
        len = *map_len ? *map_len : (size_t)1 << 20;
        while (len < want)
            len *= 2;
        if (ftruncate(fd, (off_t)len) != 0)
            return -1;
    }
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return -1;
    if (*map)
        munmap(*map, *map_len);
    *map = m;
    *map_len = len;
    return 0;
}

static int read_full(int fd, void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    while (n) {
        ssize_t r = write(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static void describe_death(prworker *w, char *out, size_t cap)
{
    int ws = 0;
    pid_t r = waitpid(w->pid, &ws, 0);
    if (r == w->pid) {
        w->pid = 0;
        if (WIFSIGNALED(ws))
            snprintf(out, cap, "killed by signal %d (%s)", WTERMSIG(ws), strsignal(WTERMSIG(ws)));
        else if (WIFEXITED(ws))
            snprintf(out, cap, "exited with status %d", WEXITSTATUS(ws));
        else
            snprintf(out, cap, "ended");
    } else {
        snprintf(out, cap, "stopped answering");
    }
}

/* Process runner: the chunk goes to a free worker through its shared
 * memory; one round trip (a byte each way over pipes) per chunk. */
static zp_status process_map(void *user, zp_record *const *recs, size_t n, zp_status *status)
{
    mapop *op = user;
    pthread_mutex_lock(&op->mu);
    prworker *w = NULL;
    while (!op->failed) {
        for (size_t k = 0; k < op->n_workers && !w; k++)
            if (!op->w[k].busy && !op->w[k].dead)
                w = &op->w[k];
        if (w)
            break;
        pthread_cond_wait(&op->cv, &op->mu);
    }
    if (!w) {
        pthread_mutex_unlock(&op->mu);
        zp_record_error(recs[0], "process runner: a worker process died or could not be "
                                 "started earlier");
        return ZP_ERR_CALLBACK;
    }
    w->busy = 1;
    pthread_mutex_unlock(&op->mu);

    zp_status ret = ZP_OK;
    char why[160];
    /* request */
    size_t need = RQ_HDR + 16 * n;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        uint64_t kind;
        record_payload(recs[i], &len, &kind);
        need += len;
    }
    if (shm_reserve(w->memfd, &w->map, &w->map_len, need + RS_HDR + 16 * n) != 0) {
        zp_record_error(recs[0], "process runner: cannot grow shared memory to %zu bytes: %s",
                        need, strerror(errno));
        ret = ZP_ERR_NOMEM;
        goto done;
    }
    uint64_t *hdr = (uint64_t *)w->map;
    hdr[0] = need;
    hdr[1] = n;
    size_t off = RQ_HDR + 16 * n;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        uint64_t kind;
        const char *s = record_payload(recs[i], &len, &kind);
        hdr[2 + 2 * i] = kind;
        hdr[3 + 2 * i] = len;
        memcpy(w->map + off, s, len);
        off += len;
    }
    uint64_t t0 = now_ns();
    char c = 'r';
    if (write_full(w->req_w, &c, 1) != 0 || read_full(w->resp_r, &c, 1) != 0) {
        describe_death(w, why, sizeof why);
        zp_record_error(recs[0], "process runner: worker process %d %s while transforming %zu records",
                        (int)w->pid, why, n);
        pthread_mutex_lock(&op->mu);
        w->dead = 1;
        op->failed = 1;
        pthread_cond_broadcast(&op->cv);
        pthread_mutex_unlock(&op->mu);
        return ZP_ERR_CALLBACK;
    }
    uint64_t t1 = now_ns();
    /* response: the worker may have grown the memory */
    size_t rbase = align8(need);
    struct stat sb;
    if (fstat(w->memfd, &sb) == 0 && (size_t)sb.st_size > w->map_len &&
        shm_reserve(w->memfd, &w->map, &w->map_len, (size_t)sb.st_size) != 0) {
        zp_record_error(recs[0], "process runner: cannot map the response: %s", strerror(errno));
        ret = ZP_ERR_NOMEM;
        goto done;
    }
    uint64_t *rh = (uint64_t *)(w->map + rbase);
    if (rh[1] != n || rh[0] > w->map_len) {
        zp_record_error(recs[0], "process runner: malformed response from worker %d", (int)w->pid);
        ret = ZP_ERR_INTERNAL;
        goto done;
    }
    w->calls++;
    w->records += n;
    w->busy_ns += rh[2];
    w->wait_ns += t1 - t0;
    off = rbase + RS_HDR + 16 * n;
    for (size_t i = 0; i < n; i++) {
        uint64_t kind = rh[3 + 2 * i], len = rh[4 + 2 * i];
        const char *p = (const char *)w->map + off;
        off += len;
        status[i] = apply_result(recs[i], kind, p, len);
    }
done:
    pthread_mutex_lock(&op->mu);
    w->busy = 0;
    pthread_cond_signal(&op->cv);
    pthread_mutex_unlock(&op->mu);
    return ret;
}

/* The worker's loop (in the forked child, with the GIL): serve requests
 * until the parent closes its end (or dies). */
static int worker_serve(PyObject *apply, int req_r, int resp_w, int memfd)
{
    unsigned char *map = NULL;
    size_t map_len = 0;
    char c;
    for (;;) {
        int r;
        Py_BEGIN_ALLOW_THREADS r = read_full(req_r, &c, 1);
        Py_END_ALLOW_THREADS if (r != 0) return 0; /* the parent is gone or done */
        struct stat sb;
        if (fstat(memfd, &sb) != 0 || shm_reserve(memfd, &map, &map_len, (size_t)sb.st_size) != 0)
            return 1;
        uint64_t t0 = now_ns();
        uint64_t *hdr = (uint64_t *)map;
        size_t need = hdr[0], n = hdr[1];
        if (need > map_len || RQ_HDR + 16 * n > need)
            return 1;
        size_t rbase = align8(need);
        /* outputs collected first (the map may move when it grows) */
        PyObject **keeps = calloc(n ? n : 1, sizeof *keeps);
        const char **outs = calloc(n ? n : 1, sizeof *outs);
        size_t *lens = calloc(n ? n : 1, sizeof *lens);
        uint64_t *kinds = calloc(n ? n : 1, sizeof *kinds);
        if (!keeps || !outs || !lens || !kinds)
            return 1;
        size_t total = 0, off = RQ_HDR + 16 * n;
        for (size_t i = 0; i < n; i++) {
            uint64_t kind = hdr[2 + 2 * i], len = hdr[3 + 2 * i];
            kinds[i] = call_apply(apply, kind, (const char *)map + off, len, &keeps[i], &outs[i],
                                  &lens[i]);
            off += len;
            total += lens[i];
        }
        size_t end = rbase + RS_HDR + 16 * n + total;
        if (shm_reserve(memfd, &map, &map_len, end) != 0)
            return 1;
        uint64_t *rh = (uint64_t *)(map + rbase);
        rh[0] = end;
        rh[1] = n;
        off = rbase + RS_HDR + 16 * n;
        for (size_t i = 0; i < n; i++) {
            rh[3 + 2 * i] = kinds[i];
            rh[4 + 2 * i] = lens[i];
            if (lens[i])
                memcpy(map + off, outs[i], lens[i]);
            off += lens[i];
            Py_XDECREF(keeps[i]);
        }
        free(keeps);
        free(outs);
        free(lens);
        free(kinds);
        rh[2] = now_ns() - t0;
        c = 'd';
        if (write_full(resp_w, &c, 1) != 0)
            return 0;
    }
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Stop the workers: close their request pipes (they exit on end of file),
 * wait up to two seconds, then SIGKILL what is left; reap every one. */
static void mapop_stop(mapop *op)
{
    if (!op->w)
        return;
    for (size_t k = 0; k < op->n_workers; k++)
        close_fd(&op->w[k].req_w);
    uint64_t deadline = now_ns() + 2000000000ull;
    for (size_t k = 0; k < op->n_workers; k++) {
        prworker *w = &op->w[k];
        while (w->pid > 0) {
            int st;
            pid_t r = waitpid(w->pid, &st, WNOHANG);
            if (r == w->pid || (r < 0 && errno == ECHILD)) {
                w->pid = 0;
                break;
            }
            if (now_ns() > deadline) {
                kill(w->pid, SIGKILL);
                waitpid(w->pid, &st, 0);
                w->pid = 0;
                break;
            }
            usleep(1000);
        }
        close_fd(&w->resp_r);
        close_fd(&w->memfd);
        if (w->map)
            munmap(w->map, w->map_len);
        w->map = NULL;
    }
}

static void mapop_free(mapop *op)
{
    if (!op)
        return;
    mapop_stop(op);
    free(op->w);
    pthread_mutex_destroy(&op->mu);
    pthread_cond_destroy(&op->cv);
    Py_XDECREF(op->apply);
    free(op);
}

/* Fork the workers (before the pipeline's threads exist). In each child:
 * die with the parent (PR_SET_PDEATHSIG and end of file on the request
 * pipe), ignore SIGINT (the parent decides), serve, _exit. */
static int mapop_fork(mapop *op, int *all_fds, size_t n_all_fds)
{
    op->w = calloc(op->n_workers, sizeof *op->w);
    if (!op->w) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t k = 0; k < op->n_workers; k++)
        op->w[k].req_w = op->w[k].resp_r = op->w[k].memfd = -1;
    for (size_t k = 0; k < op->n_workers; k++) {
        prworker *w = &op->w[k];
        int req[2], resp[2];
        char nm[32];
        snprintf(nm, sizeof nm, "zephon-map-%zu", k);
        w->memfd = memfd_create(nm, MFD_CLOEXEC);
        if (w->memfd < 0 || pipe2(req, O_CLOEXEC) != 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        if (pipe2(resp, O_CLOEXEC) != 0) {
            close(req[0]);
            close(req[1]);
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        if (shm_reserve(w->memfd, &w->map, &w->map_len, (size_t)1 << 20) != 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        pid_t parent = getpid();
        PyOS_BeforeFork();
        pid_t pid = fork();
        if (pid == 0) {
            PyOS_AfterFork_Child();
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(0);
            signal(SIGINT, SIG_IGN);
            close(req[1]);
            close(resp[0]);
            for (size_t j = 0; j < k; j++) {
                close(op->w[j].req_w);
                close(op->w[j].resp_r);
                close(op->w[j].memfd);
            }
            for (size_t j = 0; j < n_all_fds; j++)
                if (all_fds[j] >= 0)
                    close(all_fds[j]);
            int rc = worker_serve(op->apply, req[0], resp[1], w->memfd);
            _exit(rc);
        }
        PyOS_AfterFork_Parent();
        close(req[0]);
        close(resp[1]);
        if (pid < 0) {
            close(req[1]);
            close(resp[0]);
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        w->pid = pid;
        w->req_w = req[1];
        w->resp_r = resp[0];
    }
    return 0;
}

/* ------------------------------------------------------------ Pipeline */

#define MAX_MAPS 8

typedef struct {
    PyObject_HEAD
    zp_pipeline *p;
    PyObject *ws;       /* keeps the worksource alive */
    logq *log;
    mapop *maps[MAX_MAPS];
    size_t n_maps;
    int process;        /* runner = process */
    int started;
    int ended;          /* ZP_END seen */
    int closed;
    int in_next;        /* a thread waits in next() (the GIL released) */
    Py_ssize_t live_batches;
} PipelineObject;

static void pipeline_shutdown(PipelineObject *self)
{
    if (self->in_next)
        return; /* next() shuts it down when it returns (closed is set) */
    if (self->p) {
        zp_pipeline *p = self->p;
        self->p = NULL;
        Py_BEGIN_ALLOW_THREADS zp_pipeline_destroy(p);
        Py_END_ALLOW_THREADS
    }
    for (size_t i = 0; i < self->n_maps; i++) {
        mapop_free(self->maps[i]);
        self->maps[i] = NULL;
    }
    self->n_maps = 0;
}

static void Pipeline_dealloc(PipelineObject *self)
{
    pipeline_shutdown(self);
    logq_free(self->log);
    Py_XDECREF(self->ws);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Pipeline_init(PipelineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"work_source", "threads", "epochs", "chunk_samples",
                             "in_flight_chunks", "on_bad_record", "shard_cache_bytes", NULL};
    PyObject *wso;
    int threads = 0;
    unsigned int epochs = 1;
    Py_ssize_t chunk = 64, in_flight = 0;
    const char *bad = "fail";
    unsigned long long cache = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|iInnsK", kwlist, &WorkSourceType, &wso,
                                     &threads, &epochs, &chunk, &in_flight, &bad, &cache))
        return -1;
    if (self->p || self->ws) {
        PyErr_SetString(PyExc_RuntimeError, "Pipeline already initialised");
        return -1;
    }
    if (nonneg("Pipeline", "chunk_samples", chunk) || nonneg("Pipeline", "in_flight_chunks", in_flight))
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
    self->log = logq_new();
    cfg.log = logq_push;
    cfg.log_user = self->log;
    zp_status st = zp_pipeline_create(((WorkSourceObject *)wso)->ws, &cfg, &self->p);
    if (st != ZP_OK) {
        raise_status(st, zp_pipeline_errmsg(self->p));
        zp_pipeline_destroy(self->p);
        self->p = NULL;
        return -1;
    }
    Py_INCREF(wso);
    self->ws = wso;
    return 0;
}

static int check_open(PipelineObject *self)
{
    if (!self->p) {
        raise_status(ZP_ERR_STATE, "the pipeline is closed");
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
            return raise_status(st_, zp_pipeline_errmsg(self->p));                                 \
        Py_RETURN_NONE;                                                                            \
    } while (0)

static PyObject *Pipeline_prefetch(PipelineObject *self, PyObject *args)
{
    Py_ssize_t buf, par;
    if (!PyArg_ParseTuple(args, "nn", &buf, &par) || nonneg("prefetch", "buffer_size", buf) ||
        nonneg("prefetch", "parallelism", par))
        return NULL;
    CALL_OR_RAISE(self, zp_pipeline_prefetch(self->p, (size_t)buf, (size_t)par));
}

static PyObject *Pipeline_fetch(PipelineObject *self, PyObject *args)
{
    Py_ssize_t par;
    if (!PyArg_ParseTuple(args, "n", &par) || nonneg("fetch", "parallelism", par))
        return NULL;
    CALL_OR_RAISE(self, zp_pipeline_fetch(self->p, (size_t)par));
}

static zp_status runner_map(void *user, zp_record *const *recs, size_t n, zp_status *status);

static PyObject *Pipeline_map(PipelineObject *self, PyObject *args)
{
    PyObject *apply;
    Py_ssize_t par;
    const char *name;
    if (!PyArg_ParseTuple(args, "Ons", &apply, &par, &name))
        return NULL;
    if (check_open(self))
        return NULL;
    if (self->n_maps == MAX_MAPS)
        return raise_status(ZP_ERR_LIMIT, "at most 8 map_transform operators");
    if (par <= 0 || par > 1024) {
        char m[128];
        snprintf(m, sizeof m, "map_transform('%s'): parallelism = %zd: must be 1..1024", name, par);
        return raise_status(ZP_ERR_INVALID, m);
    }
    mapop *op = calloc(1, sizeof *op);
    if (!op)
        return PyErr_NoMemory();
    pthread_mutex_init(&op->mu, NULL);
    pthread_cond_init(&op->cv, NULL);
    Py_INCREF(apply);
    op->apply = apply;
    op->n_workers = (size_t)par;
    snprintf(op->name, sizeof op->name, "%s", name);
    /* the runner is chosen at start (options may come later): register a
     * trampoline that looks at op->process */
    zp_status st = zp_pipeline_map_transform_batch(self->p, runner_map, op, (size_t)par, op->name);
    if (st != ZP_OK) {
        mapop_free(op);
        return raise_status(st, zp_pipeline_errmsg(self->p));
    }
    self->maps[self->n_maps++] = op;
    Py_RETURN_NONE;
}

static PyObject *Pipeline_tokenize(PipelineObject *self, PyObject *args)
{
    const char *id, *field;
    Py_ssize_t par;
    if (!PyArg_ParseTuple(args, "ssn", &id, &field, &par) ||
        nonneg("tokenize", "parallelism", par))
        return NULL;
    CALL_OR_RAISE(self, zp_pipeline_tokenize(self->p, id, field, (size_t)par));
}

static PyObject *Pipeline_batch(PipelineObject *self, PyObject *args)
{
    Py_ssize_t mb;
    if (!PyArg_ParseTuple(args, "n", &mb) || nonneg("batch", "microbatch_size", mb))
        return NULL;
    CALL_OR_RAISE(self, zp_pipeline_batch(self->p, (size_t)mb));
}

static PyObject *Pipeline_pack(PipelineObject *self, PyObject *args)
{
    const char *mode;
    Py_ssize_t seq;
    if (!PyArg_ParseTuple(args, "sn", &mode, &seq) || nonneg("pack", "seq_len", seq))
        return NULL;
    zp_pack_mode m;
    if (strcmp(mode, "concat") == 0)
        m = ZP_PACK_CONCAT;
    else if (strcmp(mode, "pad") == 0)
        m = ZP_PACK_PAD;
    else if (strcmp(mode, "records") == 0)
        m = ZP_PACK_RECORDS;
    else
        return raise_status(ZP_ERR_INVALID, "pack: mode must be 'concat', 'pad' or 'records'");
    CALL_OR_RAISE(self, zp_pipeline_pack(self->p, m, (size_t)seq));
}

static PyObject *Pipeline_options(PipelineObject *self, PyObject *args)
{
    Py_ssize_t pb;
    int process;
    if (!PyArg_ParseTuple(args, "np", &pb, &process))
        return NULL;
    if (check_open(self))
        return NULL;
    if (self->started)
        return raise_status(ZP_ERR_STATE, "options: iteration already started");
    if (pb >= 0) {
        zp_status st = zp_pipeline_options(self->p, (size_t)pb);
        if (st != ZP_OK)
            return raise_status(st, zp_pipeline_errmsg(self->p));
    }
    self->process = process;
    Py_RETURN_NONE;
}

static PyObject *Pipeline_enable_obs(PipelineObject *self, PyObject *unused)
{
    (void)unused;
    CALL_OR_RAISE(self, zp_pipeline_enable_observability(self->p));
}

/* Fork the process runner's workers (once, before the first next()). */
static int start_runner(PipelineObject *self)
{
    if (self->started)
        return 0;
    self->started = 1;
    if (!self->process)
        return 0;
    size_t total = 0;
    for (size_t i = 0; i < self->n_maps; i++)
        total += self->maps[i]->n_workers;
    /* every earlier worker's parent ends, closed in each later child (a
     * child holding another worker's request pipe would keep that worker
     * from seeing end of file) */
    int *fds = malloc(3 * (total ? total : 1) * sizeof *fds);
    if (!fds) {
        PyErr_NoMemory();
        return -1;
    }
    size_t nf = 0;
    int rc = 0;
    for (size_t i = 0; i < self->n_maps && rc == 0; i++) {
        mapop *op = self->maps[i];
        op->process = 1;
        rc = mapop_fork(op, fds, nf);
        for (size_t k = 0; rc == 0 && k < op->n_workers; k++) {
            fds[nf++] = op->w[k].req_w;
            fds[nf++] = op->w[k].resp_r;
            fds[nf++] = op->w[k].memfd;
        }
    }
    free(fds);
    if (rc != 0)
        for (size_t i = 0; i < self->n_maps; i++)
            self->maps[i]->failed = 1; /* later next() calls fail, never half-run */
    return rc;
}

static PyObject *make_batch(PipelineObject *self, const zp_batch *b);

static PyObject *Pipeline_next(PipelineObject *self, PyObject *unused)
{
    (void)unused;
    if (check_open(self))
        return NULL;
    if (!self->started && start_runner(self) != 0)
        return NULL;
    if (self->ended)
        Py_RETURN_NONE;
    const zp_batch *b = NULL;
    zp_status st;
    zp_pipeline *p = self->p;
    if (self->in_next)
        return raise_status(ZP_ERR_STATE, "next(): another thread is iterating this pipeline");
    self->in_next = 1;
    Py_BEGIN_ALLOW_THREADS st = zp_pipeline_next(p, &b);
    Py_END_ALLOW_THREADS self->in_next = 0;
    if (self->closed) {
        /* closed by another thread meanwhile: this batch is not handed out */
        if (self->live_batches == 0)
            pipeline_shutdown(self);
        return raise_status(ZP_ERR_STATE, "the pipeline was closed");
    }
    if (st == ZP_END)
    {
        self->ended = 1;
        Py_RETURN_NONE;
    }
    if (st != ZP_OK)
        return raise_status(st, zp_pipeline_errmsg(p));
    st = zp_pipeline_keep_batch(p, b);
    if (st != ZP_OK)
        return raise_status(st, zp_pipeline_errmsg(p));
    return make_batch(self, b);
}

/* _snapshot(which): 0 metrics, 1 fetch timing, 2 prefetch timing, as the
 * library's JSON (the Python side parses it into a dict). */
static PyObject *Pipeline_snapshot(PipelineObject *self, PyObject *args)
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
        return raise_status(st, zp_pipeline_errmsg(self->p));
    PyObject *s = PyUnicode_FromString(js);
    free(js);
    return s;
}

/* The runners' own figures: [{name, runner, calls, records, ...}]. */
static PyObject *Pipeline_runner_stats(PipelineObject *self, PyObject *unused)
{
    (void)unused;
    PyObject *l = PyList_New(0);
    for (size_t i = 0; l && i < self->n_maps; i++) {
        mapop *op = self->maps[i];
        PyObject *d;
        if (op->process) {
            pthread_mutex_lock(&op->mu);
            uint64_t calls = 0, recs = 0, busy = 0, wait = 0;
            PyObject *pids = PyList_New(0);
            for (size_t k = 0; k < op->n_workers; k++) {
                calls += op->w[k].calls;
                recs += op->w[k].records;
                busy += op->w[k].busy_ns;
                wait += op->w[k].wait_ns;
                PyObject *pid = PyLong_FromLong(op->w[k].pid);
                PyList_Append(pids, pid);
                Py_DECREF(pid);
            }
            pthread_mutex_unlock(&op->mu);
            d = Py_BuildValue("{sss:ssKsKsdsdsdsN}", "name", op->name, "runner", "process",
                              "calls", (unsigned long long)calls, "records",
                              (unsigned long long)recs, "worker_busy_seconds", busy / 1e9,
                              "round_trip_seconds", wait / 1e9, "ipc_overhead_seconds",
                              wait > busy ? (wait - busy) / 1e9 : 0.0, "worker_pids", pids);
        } else {
            d = Py_BuildValue("{sss:ssKsKsdsd}", "name", op->name, "runner", "thread", "calls",
                              (unsigned long long)op->calls, "records",
                              (unsigned long long)op->records, "busy_seconds", op->busy_ns / 1e9,
                              "gil_wait_seconds", op->gil_wait_ns / 1e9);
        }
        if (d) {
            PyList_Append(l, d);
            Py_DECREF(d);
        }
    }
    return l;
}

static PyObject *Pipeline_state_save(PipelineObject *self, PyObject *unused)
{
    (void)unused;
    if (check_open(self))
        return NULL;
    char *js = NULL;
    size_t len = 0;
    zp_status st = zp_pipeline_state_save(self->p, &js, &len);
    if (st != ZP_OK)
        return raise_status(st, zp_pipeline_errmsg(self->p));
    PyObject *s = PyUnicode_FromStringAndSize(js, (Py_ssize_t)len);
    free(js);
    return s;
}

static PyObject *Pipeline_state_restore(PipelineObject *self, PyObject *args)
{
    const char *js;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "s#", &js, &len))
        return NULL;
    CALL_OR_RAISE(self, zp_pipeline_state_restore(self->p, js, (size_t)len));
}

static PyObject *Pipeline_counts(PipelineObject *self, PyObject *unused)
{
    (void)unused;
    if (check_open(self))
        return NULL;
    zp_pipeline_counts c;
    zp_pipeline_get_counts(self->p, &c);
    return Py_BuildValue("{sKsKsKsKsKsKsKsKsn}", "batches", (unsigned long long)c.batches,
                         "samples", (unsigned long long)c.samples, "padded",
                         (unsigned long long)c.padded, "skipped", (unsigned long long)c.skipped,
                         "filtered", (unsigned long long)c.filtered, "tokens",
                         (unsigned long long)c.tokens, "truncated_tokens",
                         (unsigned long long)c.truncated_tokens, "pad_tokens",
                         (unsigned long long)c.pad_tokens, "kept_batches",
                         (Py_ssize_t)zp_pipeline_kept_batches(self->p));
}

static PyObject *Pipeline_close(PipelineObject *self, PyObject *unused)
{
    (void)unused;
    self->closed = 1;
    if (self->live_batches == 0)
        pipeline_shutdown(self);
    Py_RETURN_NONE;
}

static PyObject *Pipeline_logs(PipelineObject *self, PyObject *unused)
{
    (void)unused;
    return logq_drain(self->log);
}

static PyObject *Pipeline_address(PipelineObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromVoidPtr(self->p);
}

static PyObject *Pipeline_eot(PipelineObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromLong(self->p ? zp_pipeline_eot(self->p) : -1);
}

static PyMethodDef Pipeline_methods[] = {
    {"_prefetch", (PyCFunction)Pipeline_prefetch, METH_VARARGS, NULL},
    {"_fetch", (PyCFunction)Pipeline_fetch, METH_VARARGS, NULL},
    {"_map", (PyCFunction)Pipeline_map, METH_VARARGS, NULL},
    {"_tokenize", (PyCFunction)Pipeline_tokenize, METH_VARARGS, NULL},
    {"_batch", (PyCFunction)Pipeline_batch, METH_VARARGS, NULL},
    {"_pack", (PyCFunction)Pipeline_pack, METH_VARARGS, NULL},
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
    {NULL, NULL, 0, NULL}};

static PyTypeObject PipelineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "zephon._core.Pipeline",
    .tp_basicsize = sizeof(PipelineObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Pipeline_init,
    .tp_dealloc = (destructor)Pipeline_dealloc,
    .tp_methods = Pipeline_methods,
};

/* The thread runner's callback chooses the process path when the runner
 * was set to process at start (the builder registered thread_map). */
static zp_status runner_map(void *user, zp_record *const *recs, size_t n, zp_status *status)
{
    mapop *op = user;
    return op->process ? process_map(user, recs, n, status) : thread_map(user, recs, n, status);
}

/* ------------------------------------------------------------ Batch, View */

typedef struct {
    PyObject_HEAD
    PipelineObject *pipe; /* strong reference */
    const zp_batch *b;
} BatchObject;

static void Batch_dealloc(BatchObject *self)
{
    PipelineObject *pipe = self->pipe;
    if (pipe) {
        if (pipe->p)
            zp_pipeline_release_batch(pipe->p, self->b);
        pipe->live_batches--;
        if (pipe->closed && pipe->live_batches == 0)
            pipeline_shutdown(pipe);
        Py_DECREF(pipe);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *make_batch(PipelineObject *self, const zp_batch *b)
{
    PyTypeObject *t = (PyTypeObject *)BatchClass;
    BatchObject *o = (BatchObject *)t->tp_alloc(t, 0);
    if (!o) {
        zp_pipeline_release_batch(self->p, b);
        return NULL;
    }
    Py_INCREF(self);
    o->pipe = self;
    o->b = b;
    self->live_batches++;
    return (PyObject *)o;
}

typedef struct {
    PyObject_HEAD
    PyObject *batch; /* keeps the batch kept */
    void *data;
    Py_ssize_t itemsize;
    const char *format;
    int ndim;
    Py_ssize_t shape[ZP_ARRAY_MAX_DIMS];
    Py_ssize_t strides[ZP_ARRAY_MAX_DIMS];
} ViewObject;

static void View_dealloc(ViewObject *self)
{
    Py_XDECREF(self->batch);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int View_getbuffer(ViewObject *self, Py_buffer *view, int flags)
{
    (void)flags;
    view->obj = (PyObject *)self;
    Py_INCREF(self);
    view->buf = self->data;
    Py_ssize_t n = self->itemsize;
    for (int i = 0; i < self->ndim; i++)
        n *= self->shape[i];
    view->len = n;
    view->readonly = 0;
    view->itemsize = self->itemsize;
    view->format = (char *)self->format;
    view->ndim = self->ndim;
    view->shape = self->shape;
    view->strides = self->strides;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}

static PyBufferProcs View_as_buffer = {(getbufferproc)View_getbuffer, NULL};

static PyTypeObject ViewType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "zephon._core.View",
    .tp_basicsize = sizeof(ViewObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = NULL,
    .tp_dealloc = (destructor)View_dealloc,
    .tp_as_buffer = &View_as_buffer,
};

static const char *dtype_format(zp_dtype t)
{
    switch (t) {
    case ZP_DTYPE_U8: return "B";
    case ZP_DTYPE_I8: return "b";
    case ZP_DTYPE_U16: return "H";
    case ZP_DTYPE_I16: return "h";
    case ZP_DTYPE_U32: return "I";
    case ZP_DTYPE_I32: return "i";
    case ZP_DTYPE_U64: return "Q";
    case ZP_DTYPE_I64: return "q";
    case ZP_DTYPE_F32: return "f";
    case ZP_DTYPE_F64: return "d";
    default: return NULL;
    }
}

static PyObject *new_view(BatchObject *self, const void *data, zp_dtype t, int ndim,
                          const uint64_t *shape)
{
    ViewObject *v = PyObject_New(ViewObject, &ViewType);
    if (!v)
        return NULL;
    Py_INCREF(self);
    v->batch = (PyObject *)self;
    v->data = (void *)data;
    v->itemsize = (Py_ssize_t)zp_dtype_size(t);
    v->format = dtype_format(t);
    v->ndim = ndim;
    Py_ssize_t stride = v->itemsize;
    for (int i = ndim - 1; i >= 0; i--) {
        v->shape[i] = (Py_ssize_t)shape[i];
        v->strides[i] = stride;
        stride *= v->shape[i];
    }
    return (PyObject *)v;
}

/* view(name): a buffer over the batch's memory: "tokens", "loss_mask",
 * "segment_ids" (token modes), "data", "offsets" (record mode), or a
 * fixed-shape field by its name. */
static PyObject *Batch_view(BatchObject *self, PyObject *args)
{
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name))
        return NULL;
    const zp_batch *b = self->b;
    uint64_t shape[ZP_ARRAY_MAX_DIMS] = {b->rows, b->cols};
    if (b->mode != ZP_PACK_RECORDS) {
        if (strcmp(name, "tokens") == 0)
            return new_view(self, b->tokens, ZP_DTYPE_I32, 2, shape);
        if (strcmp(name, "loss_mask") == 0)
            return new_view(self, b->loss_mask, ZP_DTYPE_U8, 2, shape);
        if (strcmp(name, "segment_ids") == 0)
            return new_view(self, b->segment_ids, ZP_DTYPE_I32, 2, shape);
    } else {
        if (strcmp(name, "data") == 0) {
            shape[0] = b->rows ? b->offsets[b->rows] : 0;
            return new_view(self, b->data ? b->data : "", ZP_DTYPE_U8, 1, shape);
        }
        if (strcmp(name, "offsets") == 0) {
            shape[0] = b->rows + 1;
            return new_view(self, b->offsets, ZP_DTYPE_U64, 1, shape);
        }
    }
    for (size_t k = 0; k < b->n_arrays; k++) {
        const zp_array *a = &b->arrays[k];
        if (strcmp(a->name, name) == 0 && dtype_format(a->dtype))
            return new_view(self, a->data, a->dtype, a->ndim, a->shape);
    }
    PyErr_Format(PyExc_KeyError, "%s", name);
    return NULL;
}

static PyObject *Batch_info(BatchObject *self, PyObject *unused)
{
    (void)unused;
    const zp_batch *b = self->b;
    static const char *modes[] = {"records", "concat", "pad"};
    PyObject *arrays = PyList_New(0);
    for (size_t k = 0; arrays && k < b->n_arrays; k++) {
        PyObject *s = PyUnicode_FromString(b->arrays[k].name);
        PyList_Append(arrays, s);
        Py_XDECREF(s);
    }
    return Py_BuildValue("{sKsIsisssnsnsnsN}", "index", (unsigned long long)b->index, "epoch",
                         b->epoch, "last_in_epoch", b->last_in_epoch, "mode",
                         modes[b->mode <= 2 ? b->mode : 0], "rows", (Py_ssize_t)b->rows, "cols",
                         (Py_ssize_t)b->cols, "rows_filled", (Py_ssize_t)b->rows_filled, "arrays",
                         arrays);
}

/* samples(): [(shard, record, global_id, epoch, position, padded, part)] */
static PyObject *Batch_samples(BatchObject *self, PyObject *unused)
{
    (void)unused;
    const zp_batch *b = self->b;
    PyObject *l = PyList_New((Py_ssize_t)b->n_samples);
    for (size_t i = 0; l && i < b->n_samples; i++) {
        const zp_sample *s = &b->samples[i];
        PyObject *t = Py_BuildValue("(IKKIKiI)", s->shard, (unsigned long long)s->record,
                                    (unsigned long long)s->global_id, s->epoch,
                                    (unsigned long long)s->position, s->padded, s->part);
        if (!t) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, t);
    }
    return l;
}

/* global_ids(): bytes of the samples' global ids (uint64), a copy. */
static PyObject *Batch_global_ids(BatchObject *self, PyObject *unused)
{
    (void)unused;
    const zp_batch *b = self->b;
    PyObject *o = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(b->n_samples * 8));
    if (!o)
        return NULL;
    uint64_t *d = (uint64_t *)PyBytes_AS_STRING(o);
    for (size_t i = 0; i < b->n_samples; i++)
        d[i] = b->samples[i].global_id;
    return o;
}

static PyObject *Batch_digest(BatchObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong(zp_batch_digest(self->b));
}

static PyMethodDef Batch_methods[] = {
    {"digest", (PyCFunction)Batch_digest, METH_NOARGS,
     "XXH64 of the batch's contents, as zephon run --emit-digest prints it"},
    {"_view", (PyCFunction)Batch_view, METH_VARARGS, NULL},
    {"_info", (PyCFunction)Batch_info, METH_NOARGS, NULL},
    {"_samples", (PyCFunction)Batch_samples, METH_NOARGS, NULL},
    {"_global_ids", (PyCFunction)Batch_global_ids, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyTypeObject BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "zephon._core.Batch",
    .tp_basicsize = sizeof(BatchObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = NULL,
    .tp_dealloc = (destructor)Batch_dealloc,
    .tp_methods = Batch_methods,
};

/* ------------------------------------------------------------ module */

static PyObject *mod_set_batch_class(PyObject *m, PyObject *cls)
{
    (void)m;
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &BatchType)) {
        PyErr_SetString(PyExc_TypeError, "a subclass of _core.Batch is required");
        return NULL;
    }
    Py_INCREF(cls);
    Py_XSETREF(BatchClass, cls);
    Py_RETURN_NONE;
}

static PyObject *mod_version(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyUnicode_FromString(zp_version());
}

static PyObject *mod_status_str(PyObject *m, PyObject *args)
{
    (void)m;
    int s;
    if (!PyArg_ParseTuple(args, "i", &s))
        return NULL;
    return PyUnicode_FromString(zp_status_str((zp_status)s));
}

static PyMethodDef module_methods[] = {
    {"_set_batch_class", mod_set_batch_class, METH_O, NULL},
    {"version", mod_version, METH_NOARGS, "the linked libzephon's version"},
    {"status_str", mod_status_str, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_core",
                                       "libzephon for Python (see the zephon package)", -1,
                                       module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__core(void)
{
    PyTypeObject *types[] = {&DatasetType, &WorkSourceType, &PipelineType, &BatchType, &ViewType};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (PyType_Ready(types[i]) < 0)
            return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    ZpError = PyErr_NewExceptionWithDoc("zephon._core.Error",
                                        "An error of libzephon: args = (message, status)",
                                        PyExc_RuntimeError, NULL);
    PyModule_AddObject(m, "Error", ZpError);
    Py_INCREF(ZpError);
    const char *names[] = {"Dataset", "WorkSource", "Pipeline", "Batch", "View"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        Py_INCREF(types[i]);
        PyModule_AddObject(m, names[i], (PyObject *)types[i]);
    }
    Py_INCREF(&BatchType);
    BatchClass = (PyObject *)&BatchType;
    return m;
}
