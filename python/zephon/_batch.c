/*
 * _batch.c - Batch and View: a delivered batch, kept out of the pipeline's
 * buffer rotation (zp_pipeline_keep_batch) for as long as the Batch or a
 * View of it (an array's buffer, without a copy) lives; handed back on the
 * last one. The pipeline is destroyed after its last batch goes.
 */
#include "_zephon.h"

#include <string.h>

typedef struct {
    PyObject_HEAD
    zpy_PipelineObject *pipe; /* strong reference */
    const zp_batch *b;
} BatchObject;

static void Batch_dealloc(BatchObject *self)
{
    zpy_PipelineObject *pipe = self->pipe;
    if (pipe) {
        if (pipe->p)
            zp_pipeline_release_batch(pipe->p, self->b);
        pipe->live_batches--;
        if (pipe->closed && pipe->live_batches == 0)
            pipe->on_last_batch(pipe);
        Py_DECREF(pipe);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyObject *zpy_make_batch(zpy_PipelineObject *self, const zp_batch *b)
{
    PyTypeObject *t = (PyTypeObject *)zpy_BatchClass;
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

PyTypeObject zpy_ViewType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "zephon._core.View",
    .tp_doc = "A buffer over a batch's memory (no copy); keeps the batch valid.",
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
    ViewObject *v = PyObject_New(ViewObject, &zpy_ViewType);
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
 * "segment_ids", and when asked for "position_ids", "cu_seqlens",
 * "doc_counts" (token modes), "data", "offsets" (record mode), or a
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
        if (strcmp(name, "position_ids") == 0 && b->position_ids)
            return new_view(self, b->position_ids, ZP_DTYPE_I32, 2, shape);
        if (strcmp(name, "cu_seqlens") == 0 && b->cu_seqlens) {
            shape[0] = b->n_cu_seqlens;
            return new_view(self, b->cu_seqlens, ZP_DTYPE_I32, 1, shape);
        }
        if (strcmp(name, "doc_counts") == 0 && b->doc_counts)
            return new_view(self, b->doc_counts, ZP_DTYPE_I32, 1, shape);
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
    static const char *modes[] = {"records", "concat", "pad", "bestfit"};
    PyObject *arrays = PyList_New(0);
    for (size_t k = 0; arrays && k < b->n_arrays; k++) {
        PyObject *s = PyUnicode_FromString(b->arrays[k].name);
        PyList_Append(arrays, s);
        Py_XDECREF(s);
    }
    PyObject *masking = PyList_New(0);
    const char *mnames[3] = {"position_ids", "cu_seqlens", "doc_counts"};
    const void *mdata[3] = {b->position_ids, b->cu_seqlens, b->doc_counts};
    for (int k = 0; masking && k < 3; k++) {
        if (!mdata[k])
            continue;
        PyObject *s = PyUnicode_FromString(mnames[k]);
        PyList_Append(masking, s);
        Py_XDECREF(s);
    }
    return Py_BuildValue("{sKsIsisssnsnsnsNsNsi}", "index", (unsigned long long)b->index,
                         "epoch", b->epoch, "last_in_epoch", b->last_in_epoch, "mode",
                         modes[b->mode <= 3 ? b->mode : 0], "rows", (Py_ssize_t)b->rows, "cols",
                         (Py_ssize_t)b->cols, "rows_filled", (Py_ssize_t)b->rows_filled, "arrays",
                         arrays, "masking", masking, "max_seqlen", (int)b->max_seqlen);
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
     "digest() -> int: XXH64 of the batch's contents, as zephon run --emit-digest prints it."},
    {"_view", (PyCFunction)Batch_view, METH_VARARGS, NULL},
    {"_info", (PyCFunction)Batch_info, METH_NOARGS, NULL},
    {"_samples", (PyCFunction)Batch_samples, METH_NOARGS, NULL},
    {"_global_ids", (PyCFunction)Batch_global_ids, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

PyTypeObject zpy_BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "zephon._core.Batch",
    .tp_doc = "A delivered batch (the zephon.Batch subclass is the API).",
    .tp_basicsize = sizeof(BatchObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = NULL,
    .tp_dealloc = (destructor)Batch_dealloc,
    .tp_methods = Batch_methods,
};

/* ------------------------------------------------------------ module */