/*
 * _dataset.c - Dataset and WorkSource: handles over zp_dataset (the shard
 * table, indexed on creation) and zp_worksource (the sample plan).
 *
 * Creating a Dataset may wait for servers (a remote manifest, the index of
 * remote shards): that wait runs aside (zpy_call_interruptible) and Ctrl-C
 * ends it, through the storage's stop_requested hook, within a slice.
 */
#include "_zephon.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ Dataset */

/* zp_storage_config.stop_requested: the dataset's stop count (thread-safe,
 * never blocks). */
static int dataset_stop_requested(void *user)
{
    zpy_DatasetObject *d = user;
    return atomic_load(&d->stop) > 0;
}

/* What Dataset() waits for: adding one spec (the spec set) or, without
 * one, indexing; run aside by zpy_call_interruptible. */
typedef struct {
    zpy_DatasetObject *d;
    const char *spec;
    zp_status st;
} dataset_call;

static void dataset_call_run(void *arg)
{
    dataset_call *c = arg;
    c->st = c->spec ? zp_dataset_add(c->d->ds, c->spec) : zp_dataset_index(c->d->ds);
}

/* Ctrl-C meanwhile: transfers end now (the dataset is not used after). */
static void dataset_call_stop(void *arg)
{
    dataset_call *c = arg;
    atomic_fetch_add(&c->d->stop, 1);
}

static void Dataset_dealloc(zpy_DatasetObject *self)
{
    zp_dataset_destroy(self->ds);
    zpy_logq_free(self->log);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Dataset(specs: list[str], max_record_bytes=0, max_shard_bytes=0,
 *         allow_empty_shards=False, index_store_dir=None, cache_dir=None,
 *         segment_bytes=0) */
static int Dataset_init(zpy_DatasetObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"specs", "max_record_bytes", "max_shard_bytes", "allow_empty_shards",
                             "index_store_dir", "cache_dir", "segment_bytes", NULL};
    PyObject *specs;
    unsigned long long max_rec = 0, max_shard = 0, segment = 0;
    int allow_empty = 0;
    const char *store = NULL, *cache = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|KKpzzK", kwlist, &specs, &max_rec, &max_shard,
                                     &allow_empty, &store, &cache, &segment))
        return -1;
    if (self->ds) {
        PyErr_SetString(PyExc_RuntimeError, "Dataset already initialised");
        return -1;
    }
    PyObject *seq = PySequence_Fast(specs, "specs must be a list of paths, globs, folders or URLs");
    if (!seq)
        return -1;
    self->log = zpy_logq_new();
    zp_dataset_config cfg;
    zp_dataset_config_init(&cfg);
    if (max_rec)
        cfg.max_record_bytes = (size_t)max_rec;
    if (max_shard)
        cfg.max_shard_bytes = (size_t)max_shard;
    cfg.allow_empty_shards = allow_empty;
    /* 0: the default segments; above SIZE_MAX (a 32-bit host): whole shards */
    cfg.segment_bytes = segment > SIZE_MAX ? SIZE_MAX : (size_t)segment;
    cfg.index_store_dir = store;
    if (cache)
        cfg.storage.cache_dir = cache;
    cfg.log = zpy_logq_push;
    cfg.log_user = self->log;
    cfg.storage.stop_requested = dataset_stop_requested;
    cfg.storage.stop_user = self;
    zp_status st = zp_dataset_create(&cfg, &self->ds);
    if (st != ZP_OK) {
        zpy_raise_status(st, zp_dataset_errmsg(self->ds));
        Py_DECREF(seq);
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n == 0) {
        Py_DECREF(seq);
        zpy_raise_status(ZP_ERR_INVALID, "Dataset: no shards given");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *b = PyUnicode_FSConverter(o, &b) ? b : NULL;
        if (!b) {
            Py_DECREF(seq);
            return -1;
        }
        dataset_call c = {self, PyBytes_AS_STRING(b), ZP_OK};
        int rc = zpy_call_interruptible(dataset_call_run, dataset_call_stop, &c);
        Py_DECREF(b);
        if (rc != 0) {
            Py_DECREF(seq);
            return -1;
        }
        if ((st = c.st) != ZP_OK) {
            Py_DECREF(seq);
            zpy_raise_status(st, zp_dataset_errmsg(self->ds));
            return -1;
        }
    }
    Py_DECREF(seq);
    dataset_call c = {self, NULL, ZP_OK};
    if (zpy_call_interruptible(dataset_call_run, dataset_call_stop, &c) != 0)
        return -1;
    if ((st = c.st) != ZP_OK) {
        zpy_raise_status(st, zp_dataset_errmsg(self->ds));
        return -1;
    }
    return 0;
}

static PyObject *Dataset_num_samples(zpy_DatasetObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong(zp_dataset_num_samples(self->ds));
}

static PyObject *Dataset_shards(zpy_DatasetObject *self, PyObject *unused)
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

static PyObject *Dataset_logs(zpy_DatasetObject *self, PyObject *unused)
{
    (void)unused;
    return zpy_logq_drain(self->log);
}

static PyMethodDef Dataset_methods[] = {
    {"num_samples", (PyCFunction)Dataset_num_samples, METH_NOARGS,
     "num_samples() -> int: the samples (records) of the dataset."},
    {"shards", (PyCFunction)Dataset_shards, METH_NOARGS,
     "shards() -> list[tuple[str, int, int]]: each shard's (name, samples, bytes)."},
    {"_logs", (PyCFunction)Dataset_logs, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

PyTypeObject zpy_DatasetType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "zephon._core.Dataset",
    .tp_doc = "Dataset(specs, max_record_bytes=0, max_shard_bytes=0, allow_empty_shards=False, "
              "index_store_dir=None, cache_dir=None): shards, indexed on creation.",
    .tp_basicsize = sizeof(zpy_DatasetObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Dataset_init,
    .tp_dealloc = (destructor)Dataset_dealloc,
    .tp_methods = Dataset_methods,
};

/* ------------------------------------------------------------ WorkSource */

static void WorkSource_dealloc(zpy_WorkSourceObject *self)
{
    zp_worksource_destroy(self->ws);
    Py_XDECREF(self->dataset);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The phases of a weight schedule: [(start, [weights], linear_every)]
 * into ph (n entries) and w (n * np weights). -1 with the exception set. */
static int parse_phases(PyObject *phases, size_t np, zp_mix_phase **ph, double **w, size_t *n)
{
    PyObject *seq = PySequence_Fast(phases, "phases must be a list of (start, weights, linear)");
    if (!seq)
        return -1;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
    *ph = calloc((size_t)m + 1, sizeof **ph);
    *w = calloc(((size_t)m + 1) * (np ? np : 1), sizeof **w);
    if (!*ph || !*w) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < m; k++) {
        PyObject *it = PySequence_Fast_GET_ITEM(seq, k), *ws;
        unsigned long long start, every;
        if (!PyArg_ParseTuple(it, "KOK;phases[k] must be (start, weights, linear)", &start, &ws,
                              &every)) {
            Py_DECREF(seq);
            return -1;
        }
        PyObject *wl = PySequence_Fast(ws, "a phase's weights must be a list of numbers");
        if (!wl) {
            Py_DECREF(seq);
            return -1;
        }
        if ((size_t)PySequence_Fast_GET_SIZE(wl) != np) {
            PyErr_Format(PyExc_ValueError, "phases[%zd]: %zd weights for %zu parts", k,
                         PySequence_Fast_GET_SIZE(wl), np);
            Py_DECREF(wl);
            Py_DECREF(seq);
            return -1;
        }
        for (size_t i = 0; i < np; i++) {
            double x = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(wl, (Py_ssize_t)i));
            if (x == -1.0 && PyErr_Occurred()) {
                Py_DECREF(wl);
                Py_DECREF(seq);
                return -1;
            }
            (*w)[(size_t)k * np + i] = x;
        }
        Py_DECREF(wl);
        (*ph)[k].start = start;
        (*ph)[k].weights = *w + (size_t)k * np;
        (*ph)[k].linear_every = every;
    }
    *n = (size_t)m;
    Py_DECREF(seq);
    return 0;
}

/* WorkSource(dataset, seed, rank, world_size, shuffle, shuffle_block_shards,
 *            remainder ("pad"|"drop"), parts [(name, shards, weight)],
 *            epoch_samples, phases [(start, [weights], linear_every)]) */
static int WorkSource_init(zpy_WorkSourceObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"dataset", "seed", "rank", "world_size", "shuffle",
                             "shuffle_block_shards", "remainder", "parts", "epoch_samples",
                             "phases", NULL};
    PyObject *dso, *parts = Py_None, *phases = Py_None;
    unsigned long long seed = 0, epoch_samples = 0;
    unsigned int rank = 0, world = 1, block = 8;
    int shuffle = 1;
    const char *rem = "pad";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|KIIpIsOKO", kwlist, &zpy_DatasetType, &dso,
                                     &seed, &rank, &world, &shuffle, &block, &rem, &parts,
                                     &epoch_samples, &phases))
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
    zp_mix_phase *ph = NULL;
    double *phw = NULL;
    if (phases != Py_None && parse_phases(phases, cfg.n_parts, &ph, &phw, &cfg.n_phases) != 0) {
        free(ph);
        free(phw);
        free(mp);
        Py_XDECREF(names);
        return -1;
    }
    cfg.phases = ph;
    zpy_DatasetObject *d = (zpy_DatasetObject *)dso;
    zp_status st;
    Py_BEGIN_ALLOW_THREADS st = zp_worksource_create(d->ds, &cfg, &self->ws);
    Py_END_ALLOW_THREADS free(mp);
    free(ph);
    free(phw);
    Py_XDECREF(names);
    if (st != ZP_OK) {
        zpy_raise_status(st, zp_worksource_errmsg(self->ws));
        return -1;
    }
    Py_INCREF(dso);
    self->dataset = dso;
    return 0;
}

static PyObject *WorkSource_info(zpy_WorkSourceObject *self, PyObject *unused)
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
    PyObject *phases = PyList_New(0);
    const size_t np = zp_worksource_num_parts(self->ws);
    for (size_t k = 0; phases && parts && k < zp_worksource_num_phases(self->ws); k++) {
        PyObject *w = PyList_New(0);
        for (size_t i = 0; w && i < np; i++) {
            PyObject *x = PyFloat_FromDouble(zp_worksource_phase_weight(self->ws, k, i));
            if (x) {
                PyList_Append(w, x);
                Py_DECREF(x);
            }
        }
        PyObject *t = w ? Py_BuildValue("(KN)",
                                        (unsigned long long)zp_worksource_phase_start(self->ws, k),
                                        w)
                        : NULL;
        if (t) {
            PyList_Append(phases, t);
            Py_DECREF(t);
        }
    }
    return Py_BuildValue("{sKsIsIsisKsKsKsKsNsN}", "seed", (unsigned long long)c->seed, "rank",
                         c->rank, "world_size", c->world_size, "shuffle", c->shuffle,
                         "samples_per_rank",
                         (unsigned long long)zp_worksource_samples_per_rank(self->ws),
                         "draws_per_epoch",
                         (unsigned long long)zp_worksource_draws_per_epoch(self->ws), "padded",
                         (unsigned long long)zp_worksource_padded(self->ws), "dropped",
                         (unsigned long long)zp_worksource_dropped(self->ws), "parts", parts,
                         "phases", phases);
}

static PyObject *WorkSource_samples(zpy_WorkSourceObject *self, PyObject *args)
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
            return zpy_raise_status(st, zp_worksource_errmsg(self->ws));
        }
        PyObject *t = Py_BuildValue("(IKKi)", s.shard, (unsigned long long)s.record,
                                    (unsigned long long)s.global_id, s.padded);
        PyList_Append(l, t);
        Py_XDECREF(t);
    }
    return l;
}

static PyMethodDef WorkSource_methods[] = {
    {"info", (PyCFunction)WorkSource_info, METH_NOARGS,
     "info() -> dict: the plan's settings and counts (seed, rank, world_size, shuffle, "
     "samples_per_rank, draws_per_epoch, padded, dropped, parts)."},
    {"samples", (PyCFunction)WorkSource_samples, METH_VARARGS,
     "samples(epoch, start, count) -> list[tuple[int, int, int, int]]: this rank's planned "
     "samples from position start, as (shard, record, global_id, padded)."},
    {NULL, NULL, 0, NULL}};

PyTypeObject zpy_WorkSourceType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "zephon._core.WorkSource",
    .tp_doc = "WorkSource(dataset, seed=0, rank=0, world_size=1, shuffle=True, "
              "shuffle_block_shards=8, remainder='pad', parts=None, epoch_samples=0): the "
              "sample plan.",
    .tp_basicsize = sizeof(zpy_WorkSourceObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)WorkSource_init,
    .tp_dealloc = (destructor)WorkSource_dealloc,
    .tp_methods = WorkSource_methods,
};
