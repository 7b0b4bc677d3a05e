/*
 * _util.c - what every file of the extension shares: the module's exception
 * classes and Batch class (set by PyInit__core), the status-to-exception
 * conversion, argument checks, the clock and the library's log queue.
 * Calls nothing of the other files (_core.c, the module, calls them).
 */
#include "_zephon.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

PyObject *zpy_Error;
PyObject *zpy_Closing;
PyObject *zpy_BatchClass;

/* ------------------------------------------------------------ errors */

PyObject *zpy_raise_status(zp_status st, const char *msg)
{
    PyObject *args = Py_BuildValue("(si)", msg && *msg ? msg : zp_status_str(st), (int)st);
    if (args) {
        PyErr_SetObject(zpy_Error, args);
        Py_DECREF(args);
    }
    return NULL;
}

int zpy_nonneg(const char *call, const char *name, Py_ssize_t v)
{
    if (v >= 0)
        return 0;
    char m[160];
    snprintf(m, sizeof m, "%s: %s = %zd: must not be negative", call, name, v);
    zpy_raise_status(ZP_ERR_INVALID, m);
    return -1;
}

uint64_t zpy_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}


/* The library's log messages (_zephon.h). */
struct zpy_logq {
    pthread_mutex_t mu;
    struct logmsg {
        int level;
        char *msg;
    } items[256];
    size_t n;
    uint64_t dropped;
};

void zpy_logq_push(void *user, zp_log_level lvl, const char *msg)
{
    zpy_logq *q = user;
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

zpy_logq *zpy_logq_new(void)
{
    zpy_logq *q = calloc(1, sizeof *q);
    if (q)
        pthread_mutex_init(&q->mu, NULL);
    return q;
}

/* [(level, msg), ...] and the count dropped since. */
PyObject *zpy_logq_drain(zpy_logq *q)
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

void zpy_logq_free(zpy_logq *q)
{
    if (!q)
        return;
    for (size_t i = 0; i < q->n; i++)
        free(q->items[i].msg);
    pthread_mutex_destroy(&q->mu);
    free(q);
}
