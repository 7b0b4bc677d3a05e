/*
 * _mpi.c - the zephon package's MPI extension over libzephon_mpi: an
 * mpi4py communicator (its MPI_Comm, by address: mpi4py's MPI._addressof)
 * becomes a zp_mpi handle; the cluster-wide report is reduced to the root
 * and written there. MPI is initialised by mpi4py, never here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <mpi.h>

#include "zephon.h"
#include "zephon/mpi.h"

static PyObject *ZpError; /* zephon._core.Error */

static PyObject *raise_status(zp_status st, const char *msg)
{
    PyObject *args = Py_BuildValue("(si)", msg && *msg ? msg : zp_status_str(st), (int)st);
    if (args) {
        PyErr_SetObject(ZpError ? ZpError : PyExc_RuntimeError, args);
        Py_DECREF(args);
    }
    return NULL;
}

typedef struct {
    PyObject_HEAD
    zp_mpi *m;
} CommObject;

static void Comm_dealloc(CommObject *self)
{
    /* collective: the Python side calls close() on every rank; a handle
     * dropped without it (an exception on one rank) is leaked on purpose
     * rather than hanging in a collective free */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Comm(comm_address, node_group_size=0): collective over the communicator. */
static int Comm_init(CommObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"comm_address", "node_group_size", NULL};
    PyObject *addr;
    unsigned int group = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|I", kwlist, &addr, &group))
        return -1;
    void *p = PyLong_AsVoidPtr(addr);
    if (!p && PyErr_Occurred())
        return -1;
    if (!p) {
        PyErr_SetString(PyExc_ValueError, "comm_address = 0");
        return -1;
    }
    MPI_Comm comm = *(MPI_Comm *)p;
    zp_mpi_config cfg;
    zp_mpi_config_init(&cfg);
    cfg.node_group_size = group;
    zp_status st;
    Py_BEGIN_ALLOW_THREADS st = zp_mpi_create(comm, &cfg, &self->m);
    Py_END_ALLOW_THREADS if (st != ZP_OK)
    {
        raise_status(st, zp_mpi_errmsg(self->m));
        zp_mpi_destroy(self->m);
        self->m = NULL;
        return -1;
    }
    return 0;
}

static PyObject *Comm_close(CommObject *self, PyObject *unused)
{
    (void)unused;
    zp_mpi *m = self->m;
    self->m = NULL;
    Py_BEGIN_ALLOW_THREADS zp_mpi_destroy(m);
    Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

/* report(pipeline_address, out_dir or None): collective. On the root:
 * (text, json) of the final report, and its files written into out_dir;
 * None on the other ranks. */
static PyObject *Comm_report(CommObject *self, PyObject *args)
{
    PyObject *paddr;
    const char *dir = NULL;
    if (!PyArg_ParseTuple(args, "Oz", &paddr, &dir))
        return NULL;
    if (!self->m)
        return raise_status(ZP_ERR_STATE, "the communicator handle is closed");
    zp_pipeline *p = PyLong_AsVoidPtr(paddr);
    if (PyErr_Occurred())
        return NULL;
    zp_mpi_input in;
    int have = p && zp_mpi_input_from_pipeline(p, &in) == ZP_OK;
    zp_cluster_report *r = NULL;
    zp_status st;
    Py_BEGIN_ALLOW_THREADS st = zp_mpi_report(self->m, have ? &in : NULL, ZP_MPI_REPORT_FINAL, &r);
    Py_END_ALLOW_THREADS if (st != ZP_OK) return raise_status(st, zp_mpi_errmsg(self->m));
    if (!r)
        Py_RETURN_NONE;
    char *text = NULL, *json = NULL;
    char err[512] = "";
    st = zp_cluster_report_render(r, ZP_MPI_TEXT, &text, NULL);
    if (st == ZP_OK)
        st = zp_cluster_report_render(r, ZP_MPI_JSON, &json, NULL);
    if (st == ZP_OK && dir)
        st = zp_cluster_report_write(r, dir, err, sizeof err);
    zp_cluster_report_destroy(r);
    PyObject *out = NULL;
    if (st == ZP_OK)
        out = Py_BuildValue("(ss)", text, json);
    else
        raise_status(st, err[0] ? err : "cannot render the report");
    free(text);
    free(json);
    return out;
}

static PyObject *Comm_info(CommObject *self, PyObject *unused)
{
    (void)unused;
    if (!self->m)
        return raise_status(ZP_ERR_STATE, "the communicator handle is closed");
    int cores = 0, sharing = 0, node_cores = 0;
    int threads = zp_mpi_suggested_threads(self->m, &cores, &sharing, &node_cores);
    return Py_BuildValue("{sisisisisisisssisisisi}", "rank", zp_mpi_rank(self->m), "size",
                         zp_mpi_size(self->m), "node", zp_mpi_node(self->m), "num_nodes",
                         zp_mpi_num_nodes(self->m), "local_rank", zp_mpi_local_rank(self->m),
                         "local_size", zp_mpi_local_size(self->m), "hostname",
                         zp_mpi_hostname(self->m), "suggested_threads", threads, "cores", cores,
                         "sharing", sharing, "node_cores", node_cores);
}

/* balance(window): cross-rank attention-cost balance for next() (local;
 * equal on every rank). */
static PyObject *Comm_balance(CommObject *self, PyObject *args)
{
    Py_ssize_t window;
    if (!PyArg_ParseTuple(args, "n", &window))
        return NULL;
    if (!self->m)
        return raise_status(ZP_ERR_STATE, "the communicator handle is closed");
    if (window < 0)
        return raise_status(ZP_ERR_INVALID, "balance: window must be >= 0");
    zp_status st = zp_mpi_balance(self->m, (size_t)window);
    if (st != ZP_OK)
        return raise_status(st, zp_mpi_errmsg(self->m));
    Py_RETURN_NONE;
}

static PyObject *bytes_or_none(const void *p, size_t n)
{
    if (!p)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize(p, (Py_ssize_t)n);
}

/* next(pipeline_address): zp_mpi_next, collective. None at the end; else a
 * dict of the batch: index, epoch, rows, cols, rows_filled, max_seqlen, the
 * arrays as bytes (tokens, loss_mask, segment_ids; position_ids,
 * cu_seqlens, doc_counts or None) and samples [(global_id, epoch,
 * position, padded, part)]. Copies: the handle's buffers are reused at the
 * next call. */
static PyObject *Comm_next(CommObject *self, PyObject *args)
{
    PyObject *paddr;
    if (!PyArg_ParseTuple(args, "O", &paddr))
        return NULL;
    if (!self->m)
        return raise_status(ZP_ERR_STATE, "the communicator handle is closed");
    zp_pipeline *p = PyLong_AsVoidPtr(paddr);
    if (PyErr_Occurred())
        return NULL;
    const zp_batch *b = NULL;
    zp_status st;
    Py_BEGIN_ALLOW_THREADS st = zp_mpi_next(self->m, p, &b);
    Py_END_ALLOW_THREADS if (st == ZP_END) Py_RETURN_NONE;
    if (st != ZP_OK)
        return raise_status(st, zp_mpi_errmsg(self->m));
    const size_t n = b->rows * b->cols;
    PyObject *samples = PyList_New((Py_ssize_t)b->n_samples);
    for (size_t i = 0; samples && i < b->n_samples; i++) {
        const zp_sample *x = &b->samples[i];
        PyObject *t = Py_BuildValue("(KIKiI)", (unsigned long long)x->global_id,
                                    (unsigned)x->epoch, (unsigned long long)x->position,
                                    (int)x->padded, (unsigned)x->part);
        if (!t) {
            Py_CLEAR(samples);
            break;
        }
        PyList_SET_ITEM(samples, (Py_ssize_t)i, t);
    }
    if (!samples)
        return NULL;
    return Py_BuildValue(
        "{sKsIsnsnsnsisNsNsNsNsNsNsN}", "index", (unsigned long long)b->index, "epoch",
        (unsigned)b->epoch, "rows", (Py_ssize_t)b->rows, "cols", (Py_ssize_t)b->cols,
        "rows_filled", (Py_ssize_t)b->rows_filled, "max_seqlen", (int)b->max_seqlen, "tokens",
        bytes_or_none(b->tokens, n * sizeof *b->tokens), "loss_mask",
        bytes_or_none(b->loss_mask, n), "segment_ids",
        bytes_or_none(b->segment_ids, n * sizeof *b->segment_ids), "position_ids",
        bytes_or_none(b->position_ids, n * sizeof *b->position_ids), "cu_seqlens",
        bytes_or_none(b->cu_seqlens, b->n_cu_seqlens * sizeof *b->cu_seqlens), "doc_counts",
        bytes_or_none(b->doc_counts, b->rows * sizeof *b->doc_counts), "samples", samples);
}

/* balance_stats(): zp_mpi_balance_stats as a dict (local). */
static PyObject *Comm_balance_stats(CommObject *self, PyObject *unused)
{
    (void)unused;
    if (!self->m)
        return raise_status(ZP_ERR_STATE, "the communicator handle is closed");
    zp_mpi_balance_stats s;
    zp_mpi_balance_stats_get(self->m, &s);
    return Py_BuildValue("{sKsKsKsdsdsdsd}", "window", (unsigned long long)s.window, "steps",
                         (unsigned long long)s.steps, "rows_moved",
                         (unsigned long long)s.rows_moved, "rank_imbalance_before",
                         s.rank_imbalance_before, "rank_imbalance_after", s.rank_imbalance_after,
                         "mb_imbalance_before", s.mb_imbalance_before, "mb_imbalance_after",
                         s.mb_imbalance_after);
}

static PyMethodDef Comm_methods[] = {
    {"balance", (PyCFunction)Comm_balance, METH_VARARGS,
     "balance(window) -> None: cross-rank attention-cost balance for next()."},
    {"next", (PyCFunction)Comm_next, METH_VARARGS,
     "next(pipeline_address) -> dict or None: the next batch in lock step (collective)."},
    {"balance_stats", (PyCFunction)Comm_balance_stats, METH_NOARGS,
     "balance_stats() -> dict: what cross-rank balance did."},
    {"close", (PyCFunction)Comm_close, METH_NOARGS,
     "close() -> None: free the handle (collective over the communicator)."},
    {"report", (PyCFunction)Comm_report, METH_VARARGS,
     "report(pipeline_address, out_dir) -> tuple[str, str] | None: the cluster report "
     "(text, JSON) on the root, None elsewhere (collective)."},
    {"info", (PyCFunction)Comm_info, METH_NOARGS,
     "info() -> dict: this rank's place (rank, size, node, num_nodes, local_rank, "
     "local_size, hostname) and its binding (suggested_threads, cores, sharing, node_cores)."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject CommType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "zephon._mpi.Comm",
    .tp_doc = "Comm(comm_address, node_group_size=0): libzephon_mpi's handle over an mpi4py "
              "communicator (collective).",
    .tp_basicsize = sizeof(CommObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Comm_init,
    .tp_dealloc = (destructor)Comm_dealloc,
    .tp_methods = Comm_methods,
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_mpi",
                                       "libzephon_mpi for Python (see zephon.mpi)", -1, NULL,
                                       NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__mpi(void)
{
    if (PyType_Ready(&CommType) < 0)
        return NULL;
    PyObject *core = PyImport_ImportModule("zephon._core");
    if (!core)
        return NULL;
    ZpError = PyObject_GetAttrString(core, "Error");
    Py_DECREF(core);
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    Py_INCREF(&CommType);
    PyModule_AddObject(m, "Comm", (PyObject *)&CommType);
    return m;
}
