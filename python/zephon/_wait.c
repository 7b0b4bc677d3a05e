/*
 * _wait.c - waiting for the library with the GIL released, yet
 * interruptible.
 *
 * A call into libzephon that may block (zp_pipeline_next() while a
 * transform is slow or a server stalls, zp_dataset_add() of a remote
 * manifest) cannot be interrupted from outside: a signal handler only sets
 * a flag, and the library's condition variables and transfers wait on. So
 * such a call runs in another thread, and the Python thread that asked
 * waits for it in slices of ZPY_WAIT_SLICE_MS, taking the GIL between two
 * slices to run PyErr_CheckSignals(): Ctrl-C raises KeyboardInterrupt
 * within about a slice, wherever the loop waits.
 *
 * The pipeline's next-thread (zpy_nexter) lives as long as the pipeline's
 * iteration and is the only thread that calls zp_pipeline_next() and
 * zp_pipeline_keep_batch() (the library's consumer thread). A next() that
 * is interrupted leaves its call running; the following next() waits for
 * that same call, so no batch is lost and the stream stays the one the
 * settings define.
 */
#include "_zephon.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

/* Absolute CLOCK_MONOTONIC time ms from now. */
static struct timespec deadline_in(int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    return ts;
}

static int cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc;
}

/* The library's log messages queued so far, handed to the package's
 * logger (zephon._emit): the stall watchdog's lines come while a next()
 * still waits. 0, or -1 with the exception set. Caller holds the GIL. */
static int emit_logs(zpy_logq *log)
{
    PyObject *l = zpy_logq_drain(log);
    if (!l)
        return -1;
    int rc = 0;
    if (PyList_GET_SIZE(l) > 0) {
        PyObject *mod = PyImport_ImportModule("zephon");
        PyObject *r = mod ? PyObject_CallMethod(mod, "_emit", "O", l) : NULL;
        rc = r ? 0 : -1;
        Py_XDECREF(r);
        Py_XDECREF(mod);
    }
    Py_DECREF(l);
    return rc;
}

/* Waits (GIL released) until *flag is nonzero, looking at signals every
 * slice (and, with log, emitting the log messages queued): 0 when it is,
 * -1 with the exception set when a handler raised.
 * Caller holds the GIL, not mu. */
static int wait_flag_log(pthread_mutex_t *mu, pthread_cond_t *cv, const int *flag, zpy_logq *log)
{
    for (;;) {
        int done;
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(mu);
        struct timespec dl = deadline_in(ZPY_WAIT_SLICE_MS);
        while (!*flag)
            if (pthread_cond_timedwait(cv, mu, &dl) == ETIMEDOUT)
                break;
        done = *flag;
        pthread_mutex_unlock(mu);
        Py_END_ALLOW_THREADS
        if (done)
            return 0;
        if (PyErr_CheckSignals() < 0)
            return -1;
        if (log && emit_logs(log) != 0)
            return -1;
    }
}

static int wait_flag(pthread_mutex_t *mu, pthread_cond_t *cv, const int *flag)
{
    return wait_flag_log(mu, cv, flag, NULL);
}

/* ------------------------------------------------------------ one call */

typedef struct {
    void (*fn)(void *);
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} aside;

static void *aside_main(void *v)
{
    aside *a = v;
    a->fn(a->arg);
    pthread_mutex_lock(&a->mu);
    a->done = 1;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

int zpy_call_interruptible(void (*fn)(void *), void (*interrupt)(void *), void *arg)
{
    aside a = {fn, arg, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    if (cond_init_monotonic(&a.cv) != 0) {
        PyErr_NoMemory();
        return -1;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, aside_main, &a) != 0) {
        /* no thread to spare: wait here, uninterruptible as before */
        Py_BEGIN_ALLOW_THREADS fn(arg);
        Py_END_ALLOW_THREADS
        pthread_cond_destroy(&a.cv);
        return 0;
    }
    int rc = wait_flag(&a.mu, &a.cv, &a.done);
    if (rc != 0) {
        /* interrupted: make fn end, and wait for it (the exception stays) */
        interrupt(arg);
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        while (wait_flag(&a.mu, &a.cv, &a.done) != 0)
            PyErr_Clear(); /* a second Ctrl-C: the first one is reported */
        PyErr_Restore(type, value, tb);
    }
    Py_BEGIN_ALLOW_THREADS pthread_join(t, NULL);
    Py_END_ALLOW_THREADS
    pthread_cond_destroy(&a.cv);
    return rc;
}

/* ------------------------------------------------------------ next-thread */

struct zpy_nexter {
    zp_pipeline *p;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t ask_cv;  /* the next-thread waits for asked or quit */
    pthread_cond_t done_cv; /* the Python thread waits for done */
    int asked;              /* a call is asked (until its result is taken) */
    int done;               /* its result is in st, b */
    int quit;
    zp_status st;
    const zp_batch *b;
    zpy_logq *log;          /* emitted while waiting (may be NULL) */
};

static void *nexter_main(void *v)
{
    zpy_nexter *n = v;
    pthread_mutex_lock(&n->mu);
    for (;;) {
        while (!n->quit && !(n->asked && !n->done))
            pthread_cond_wait(&n->ask_cv, &n->mu);
        if (n->quit)
            break;
        pthread_mutex_unlock(&n->mu);
        const zp_batch *b = NULL;
        zp_status st = zp_pipeline_next(n->p, &b);
        if (st == ZP_OK)
            st = zp_pipeline_keep_batch(n->p, b);
        pthread_mutex_lock(&n->mu);
        n->st = st;
        n->b = st == ZP_OK ? b : NULL;
        n->done = 1;
        pthread_cond_signal(&n->done_cv);
    }
    pthread_mutex_unlock(&n->mu);
    return NULL;
}

zpy_nexter *zpy_nexter_new(zp_pipeline *p, zpy_logq *log)
{
    zpy_nexter *n = calloc(1, sizeof *n);
    if (!n) {
        PyErr_NoMemory();
        return NULL;
    }
    n->p = p;
    n->log = log;
    pthread_mutex_init(&n->mu, NULL);
    pthread_cond_init(&n->ask_cv, NULL);
    cond_init_monotonic(&n->done_cv);
    if (pthread_create(&n->thread, NULL, nexter_main, n) != 0) {
        pthread_cond_destroy(&n->ask_cv);
        pthread_cond_destroy(&n->done_cv);
        pthread_mutex_destroy(&n->mu);
        free(n);
        PyErr_SetString(PyExc_OSError, "cannot start the pipeline's next-thread");
        return NULL;
    }
    return n;
}

int zpy_nexter_next(zpy_nexter *n, zp_status *st, const zp_batch **b)
{
    pthread_mutex_lock(&n->mu);
    if (!n->asked) {
        n->asked = 1;
        pthread_cond_signal(&n->ask_cv);
    }
    pthread_mutex_unlock(&n->mu);
    if (wait_flag_log(&n->mu, &n->done_cv, &n->done, n->log) != 0)
        return -1; /* the call keeps running: the next next() takes it */
    /* A signal that came while the call ended is raised here, before the
     * result is taken: the batch stays for the next next(). Raised later,
     * in the caller's Python code, it would lose the batch. */
    if (PyErr_CheckSignals() < 0)
        return -1;
    pthread_mutex_lock(&n->mu);
    *st = n->st;
    *b = n->b;
    n->asked = n->done = 0;
    n->b = NULL;
    pthread_mutex_unlock(&n->mu);
    return 0;
}

int zpy_nexter_busy(zpy_nexter *n)
{
    if (!n)
        return 0;
    pthread_mutex_lock(&n->mu);
    int busy = n->asked && !n->done;
    pthread_mutex_unlock(&n->mu);
    return busy;
}

void zpy_nexter_free(zpy_nexter *n)
{
    if (!n)
        return;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&n->mu);
    while (n->asked && !n->done)
        pthread_cond_wait(&n->done_cv, &n->mu);
    if (n->b) /* a batch nobody took: hand it back */
        zp_pipeline_release_batch(n->p, n->b);
    n->quit = 1;
    pthread_cond_signal(&n->ask_cv);
    pthread_mutex_unlock(&n->mu);
    pthread_join(n->thread, NULL);
    Py_END_ALLOW_THREADS
    pthread_cond_destroy(&n->ask_cv);
    pthread_cond_destroy(&n->done_cv);
    pthread_mutex_destroy(&n->mu);
    free(n);
}
