/*
 * _core.c - the CPython extension over libzephon (the zephon package's
 * engine; zephon/__init__.py is the public face): the module, its
 * functions, zephon.Error and the library's log queue. The types live in
 * their own files (_zephon.h lists them), the helpers they share in
 * _util.c:
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
 *
 * The GIL is released around every call that may wait for the pipeline's
 * threads (next, destroy), since the thread runner needs it; every such
 * wait looks at signals every ZPY_WAIT_SLICE_MS, so that Ctrl-C reaches
 * the training loop (_wait.c).
 */
#include "_zephon.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------ module */

static PyObject *mod_set_batch_class(PyObject *m, PyObject *cls)
{
    (void)m;
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &zpy_BatchType)) {
        PyErr_SetString(PyExc_TypeError, "a subclass of _core.Batch is required");
        return NULL;
    }
    Py_INCREF(cls);
    Py_XSETREF(zpy_BatchClass, cls);
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
    {"version", mod_version, METH_NOARGS, "version() -> str: the linked libzephon's version."},
    {"status_str", mod_status_str, METH_VARARGS,
     "status_str(status: int) -> str: the name of a zp_status code."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_core",
                                       "libzephon for Python (see the zephon package)", -1,
                                       module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__core(void)
{
    PyTypeObject *types[] = {&zpy_DatasetType, &zpy_WorkSourceType, &zpy_PipelineType,
                             &zpy_BatchType, &zpy_ViewType};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (PyType_Ready(types[i]) < 0)
            return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    zpy_Error = PyErr_NewExceptionWithDoc("zephon._core.Error",
                                          "An error of libzephon: args = (message, status)",
                                          PyExc_RuntimeError, NULL);
    zpy_Closing = PyErr_NewExceptionWithDoc(
        "zephon._core.Closing",
        "Raised inside a thread-runner map_transform when its pipeline closes (a "
        "BaseException, like KeyboardInterrupt, so that `except Exception` lets it through)",
        PyExc_BaseException, NULL);
    if (!zpy_Error || !zpy_Closing)
        return NULL;
    Py_INCREF(zpy_Error);
    PyModule_AddObject(m, "Error", zpy_Error);
    Py_INCREF(zpy_Closing);
    PyModule_AddObject(m, "Closing", zpy_Closing);
    /* the version this extension was built from (include/zephon/common.h) */
    PyModule_AddStringConstant(m, "__version__", ZP_VERSION_STRING);
    const char *names[] = {"Dataset", "WorkSource", "Pipeline", "Batch", "View"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        Py_INCREF(types[i]);
        PyModule_AddObject(m, names[i], (PyObject *)types[i]);
    }
    Py_INCREF(&zpy_BatchType);
    zpy_BatchClass = (PyObject *)&zpy_BatchType;
    return m;
}