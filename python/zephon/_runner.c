/*
 * _runner.c - the runners of Python map transforms (docs/python.md).
 *
 *   thread   the pipeline's map tasks call the Python function in the
 *            pipeline's own threads, taking the GIL once per chunk
 *   process  parallelism worker processes, forked when iteration starts;
 *            a map task writes a chunk of records into its worker's shared
 *            memory (a memfd), sends a byte over a pipe and reads the
 *            results from the same memory: one round trip per chunk
 *
 * Both call the same apply() (zephon/__init__.py's _make_apply) on the
 * same bytes, so their output is byte-identical. Closing a pipeline stops
 * a transform that is running (zpy_mapop_cancel): the process runner kills
 * its busy workers, the thread runner raises zephon._core.Closing inside
 * the transform; no transform starts after.
 */
#include "_zephon.h"

#include <stdarg.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>


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
    int busy;          /* under the op's mu */
    int reaping;       /* a map task reaps it (its pid may be gone): under mu */
    int dead;
    uint64_t calls, records, busy_ns, wait_ns;
} prworker;

/* A thread inside the thread runner's loop over a chunk (under the GIL). */
typedef struct inside {
    unsigned long ident;
    struct inside *next;
} inside;

typedef struct zpy_mapop {
    PyObject *apply; /* apply(kind, bytes) -> bytes | str | None, raises */
    char name[64];
    int process;     /* the process runner */
    size_t n_workers;
    prworker *w;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int failed;      /* a worker died: every later call fails */
    atomic_int closing; /* the pipeline closes: no transform starts */
    /* thread runner */
    inside *inside;  /* the threads calling apply (under the GIL) */
    uint64_t calls, records, gil_wait_ns, busy_ns;
} zpy_mapop;

#define now_ns zpy_now_ns

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

/* Longest message a dying worker sends its parent (worker_fail). */
#define WORKER_NOTE_MAX 900

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
    zpy_mapop *op = user;
    uint64_t t0 = now_ns();
    PyGILState_STATE g = PyGILState_Ensure();
    uint64_t t1 = now_ns();
    inside me = {PyThread_get_thread_ident(), op->inside};
    op->inside = &me;
    for (size_t i = 0; i < n; i++) {
        if (atomic_load(&op->closing)) {
            zp_record_error(recs[i], "the pipeline is closing");
            status[i] = ZP_ERR_STATE;
            continue;
        }
        size_t len, olen;
        uint64_t kind;
        zp_record_begin(recs[i]); /* the stall watchdog names this record */
        const char *s = record_payload(recs[i], &len, &kind), *out;
        PyObject *keep;
        uint64_t rk = call_apply(op->apply, kind, s, len, &keep, &out, &olen);
        status[i] = apply_result(recs[i], rk, out, olen);
        Py_XDECREF(keep);
    }
    for (inside **pp = &op->inside; *pp; pp = &(*pp)->next)
        if (*pp == &me) {
            *pp = me.next;
            break;
        }
    if (PyErr_Occurred()) /* a Closing raised after the last call */
        PyErr_Clear();
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

/* All n bytes through fd (writing when `out`, else reading), across EINTR
 * and short transfers; -1 on an error or an early end. */
static int transfer_full(int fd, void *buf, size_t n, int out)
{
    unsigned char *p = buf;
    while (n) {
        ssize_t r = out ? write(fd, p, n) : read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int read_full(int fd, void *buf, size_t n)
{
    return transfer_full(fd, buf, n, 0);
}

static int write_full(int fd, const void *buf, size_t n)
{
    return transfer_full(fd, (void *)buf, n, 1);
}

static void describe_death(zpy_mapop *op, prworker *w, char *out, size_t cap)
{
    int ws = 0;
    pthread_mutex_lock(&op->mu);
    w->reaping = 1; /* zpy_mapop_cancel no longer signals this pid */
    pid_t pid = w->pid;
    pthread_mutex_unlock(&op->mu);
    pid_t r = pid > 0 ? waitpid(pid, &ws, 0) : -1;
    if (r == pid && pid > 0) {
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

/* Waits for a free worker and marks it busy; NULL (recs[0]'s error set,
 * *ret its status) when the pipeline closes or no worker is left. */
static prworker *take_worker(zpy_mapop *op, zp_record *const *recs, zp_status *ret)
{
    pthread_mutex_lock(&op->mu);
    prworker *w = NULL;
    while (!op->failed && !atomic_load(&op->closing)) {
        for (size_t k = 0; k < op->n_workers && !w; k++)
            if (!op->w[k].busy && !op->w[k].dead)
                w = &op->w[k];
        if (w)
            break;
        pthread_cond_wait(&op->cv, &op->mu);
    }
    if (!w) {
        pthread_mutex_unlock(&op->mu);
        if (atomic_load(&op->closing)) {
            zp_record_error(recs[0], "the pipeline is closing");
            *ret = ZP_ERR_STATE;
            return NULL;
        }
        zp_record_error(recs[0], "process runner: a worker process died or could not be "
                                 "started earlier");
        *ret = ZP_ERR_CALLBACK;
        return NULL;
    }
    w->busy = 1;
    pthread_mutex_unlock(&op->mu);
    return w;
}

/* Writes the request (the records' payloads) into w's shared memory;
 * *needp: its size. */
static zp_status put_request(prworker *w, zp_record *const *recs, size_t n, size_t *needp)
{
    size_t need = RQ_HDR + 16 * n;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        uint64_t kind;
        record_payload(recs[i], &len, &kind);
        need += len;
    }
    *needp = need;
    if (shm_reserve(w->memfd, &w->map, &w->map_len, need + RS_HDR + 16 * n) != 0) {
        zp_record_error(recs[0], "process runner: cannot grow shared memory to %zu bytes: %s",
                        need, strerror(errno));
        return ZP_ERR_NOMEM;
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
    return ZP_OK;
}

/* One round trip: 'r' to w and its answer back; 0, or 1 when w died
 * (note, WORKER_NOTE_MAX + 1 bytes: its last words, if it said any). */
static int round_trip(prworker *w, char *note)
{
    char c = 'r';
    int died = write_full(w->req_w, &c, 1) != 0 || read_full(w->resp_r, &c, 1) != 0;
    if (!died && c == 'e') { /* the worker's last words, then it exits */
        uint16_t nlen = 0;
        if (read_full(w->resp_r, &nlen, sizeof nlen) == 0 && nlen <= WORKER_NOTE_MAX &&
            read_full(w->resp_r, note, nlen) == 0)
            note[nlen] = 0;
        died = 1;
    }
    return died;
}

/* w died while transforming the n records: the error names it and why,
 * and the runner fails (w stays busy: no chunk goes to it again). */
static zp_status worker_died(zpy_mapop *op, prworker *w, zp_record *const *recs, size_t n,
                             const char *note)
{
    char why[160];
    int pid = (int)w->pid;
    describe_death(op, w, why, sizeof why);
    if (note[0])
        zp_record_error(recs[0],
                        "process runner: worker process %d failed while transforming %zu "
                        "records: %s (it %s)", pid, n, note, why);
    else
        zp_record_error(recs[0],
                        "process runner: worker process %d %s while transforming %zu records",
                        pid, why, n);
    pthread_mutex_lock(&op->mu);
    w->dead = 1;
    op->failed = 1;
    pthread_cond_broadcast(&op->cv);
    pthread_mutex_unlock(&op->mu);
    return ZP_ERR_CALLBACK;
}

/* Reads w's response (after the request of need bytes) into the records,
 * each one's status into status; wait_ns: the round trip's time. */
static zp_status get_response(prworker *w, zp_record *const *recs, size_t n, size_t need,
                              uint64_t wait_ns, zp_status *status)
{
    /* response: the worker may have grown the memory */
    size_t rbase = align8(need);
    struct stat sb;
    if (fstat(w->memfd, &sb) == 0 && (size_t)sb.st_size > w->map_len &&
        shm_reserve(w->memfd, &w->map, &w->map_len, (size_t)sb.st_size) != 0) {
        zp_record_error(recs[0], "process runner: cannot map the response: %s", strerror(errno));
        return ZP_ERR_NOMEM;
    }
    uint64_t *rh = (uint64_t *)(w->map + rbase);
    if (rh[1] != n || rh[0] > w->map_len) {
        zp_record_error(recs[0], "process runner: malformed response from worker %d", (int)w->pid);
        return ZP_ERR_INTERNAL;
    }
    w->calls++;
    w->records += n;
    w->busy_ns += rh[2];
    w->wait_ns += wait_ns;
    size_t off = rbase + RS_HDR + 16 * n;
    for (size_t i = 0; i < n; i++) {
        uint64_t kind = rh[3 + 2 * i], len = rh[4 + 2 * i];
        const char *p = (const char *)w->map + off;
        off += len;
        status[i] = apply_result(recs[i], kind, p, len);
    }
    return ZP_OK;
}

/* Process runner: the chunk goes to a free worker through its shared
 * memory; one round trip (a byte each way over pipes) per chunk. */
static zp_status process_map(void *user, zp_record *const *recs, size_t n, zp_status *status)
{
    zpy_mapop *op = user;
    zp_status ret;
    prworker *w = take_worker(op, recs, &ret);
    if (!w)
        return ret;
    size_t need;
    ret = put_request(w, recs, n, &need);
    if (ret == ZP_OK) {
        uint64_t t0 = now_ns();
        char note[WORKER_NOTE_MAX + 1] = "";
        if (round_trip(w, note) != 0)
            return worker_died(op, w, recs, n, note);
        uint64_t t1 = now_ns();
        ret = get_response(w, recs, n, need, t1 - t0, status);
    }
    pthread_mutex_lock(&op->mu);
    w->busy = 0;
    pthread_cond_broadcast(&op->cv); /* a task waiting for a worker, or zpy_mapop_reap */
    pthread_mutex_unlock(&op->mu);
    return ret;
}

/* A worker that cannot go on tells the parent why before it exits: 'e', the
 * message's length (uint16) and the message, on the response pipe, with
 * the Python exception pending, if any (a MemoryError, say). Returns 1, the
 * worker's exit status. */
static int worker_fail(int resp_w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int worker_fail(int resp_w, const char *fmt, ...)
{
    char msg[WORKER_NOTE_MAX + 1], exc[512] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (PyErr_Occurred()) {
        describe_exception(exc, sizeof exc);
        size_t k = strlen(msg);
        snprintf(msg + k, sizeof msg - k, " (%s)", exc);
    }
    uint16_t n = (uint16_t)strlen(msg);
    char c = 'e';
    if (write_full(resp_w, &c, 1) == 0 && write_full(resp_w, &n, sizeof n) == 0)
        (void)write_full(resp_w, msg, n);
    return 1;
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
            return worker_fail(resp_w, "cannot map the request's shared memory: %s", strerror(errno));
        uint64_t t0 = now_ns();
        uint64_t *hdr = (uint64_t *)map;
        size_t need = hdr[0], n = hdr[1];
        if (need > map_len || RQ_HDR + 16 * n > need)
            return worker_fail(resp_w, "malformed request (%zu bytes for %zu records)", need, n);
        size_t rbase = align8(need);
        /* outputs collected first (the map may move when it grows) */
        PyObject **keeps = calloc(n ? n : 1, sizeof *keeps);
        const char **outs = calloc(n ? n : 1, sizeof *outs);
        size_t *lens = calloc(n ? n : 1, sizeof *lens);
        uint64_t *kinds = calloc(n ? n : 1, sizeof *kinds);
        if (!keeps || !outs || !lens || !kinds)
            return worker_fail(resp_w, "out of memory for the results of %zu records", n);
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
            return worker_fail(resp_w, "cannot grow the shared memory to %zu bytes for the results: %s",
                               end, strerror(errno));
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
static void mapop_stop(zpy_mapop *op)
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

void zpy_mapop_free(zpy_mapop *op)
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
static int mapop_fork(zpy_mapop *op, int *all_fds, size_t n_all_fds)
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

/* ------------------------------------------------------------ the operator */

zpy_mapop *zpy_mapop_new(PyObject *apply, size_t parallelism, const char *name)
{
    zpy_mapop *op = calloc(1, sizeof *op);
    if (!op) {
        PyErr_NoMemory();
        return NULL;
    }
    pthread_mutex_init(&op->mu, NULL);
    pthread_cond_init(&op->cv, NULL);
    Py_INCREF(apply);
    op->apply = apply;
    op->n_workers = parallelism;
    snprintf(op->name, sizeof op->name, "%s", name);
    return op;
}

const char *zpy_mapop_name(const zpy_mapop *op) { return op->name; }

zp_status zpy_mapop_run(void *user, zp_record *const *recs, size_t n, zp_status *status)
{
    zpy_mapop *op = user;
    return op->process ? process_map(user, recs, n, status) : thread_map(user, recs, n, status);
}

int zpy_runners_fork(zpy_mapop **ops, size_t n_ops)
{
    size_t total = 0;
    for (size_t i = 0; i < n_ops; i++)
        total += ops[i]->n_workers;
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
    for (size_t i = 0; i < n_ops && rc == 0; i++) {
        zpy_mapop *op = ops[i];
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
        for (size_t i = 0; i < n_ops; i++)
            ops[i]->failed = 1; /* later next() calls fail, never half-run */
    return rc;
}

void zpy_mapop_cancel(zpy_mapop *op)
{
    atomic_store(&op->closing, 1);
    if (op->process) {
        pthread_mutex_lock(&op->mu);
        for (size_t k = 0; op->w && k < op->n_workers; k++) {
            prworker *w = &op->w[k];
            /* mid-transform: its result is not wanted any more. The map
             * task waiting for it sees end of file and reaps it. */
            if (w->busy && !w->reaping && w->pid > 0)
                kill(w->pid, SIGKILL);
        }
        pthread_cond_broadcast(&op->cv); /* tasks waiting for a worker */
        pthread_mutex_unlock(&op->mu);
    }
    /* thread runner: the transform stops at its next bytecode (one blocked
     * in a single C call is waited for) */
    for (inside *t = op->inside; t; t = t->next)
        PyThreadState_SetAsyncExc(t->ident, zpy_Closing);
}

void zpy_mapop_reap(zpy_mapop *op)
{
    if (!op->process || !op->w)
        return;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&op->mu);
    for (;;) { /* no map task uses a worker any more (closing: none will) */
        int busy = 0;
        for (size_t k = 0; k < op->n_workers; k++)
            busy |= op->w[k].busy && !op->w[k].dead;
        if (!busy)
            break;
        pthread_cond_wait(&op->cv, &op->mu);
    }
    pthread_mutex_unlock(&op->mu);
    mapop_stop(op);
    Py_END_ALLOW_THREADS
}

PyObject *zpy_mapop_stats(zpy_mapop *op)
{
    if (op->process) {
        pthread_mutex_lock(&op->mu);
        uint64_t calls = 0, recs = 0, busy = 0, wait = 0;
        PyObject *pids = PyList_New(0);
        for (size_t k = 0; pids && op->w && k < op->n_workers; k++) {
            calls += op->w[k].calls;
            recs += op->w[k].records;
            busy += op->w[k].busy_ns;
            wait += op->w[k].wait_ns;
            PyObject *pid = PyLong_FromLong(op->w[k].pid);
            if (pid) {
                PyList_Append(pids, pid);
                Py_DECREF(pid);
            }
        }
        pthread_mutex_unlock(&op->mu);
        if (!pids)
            return NULL;
        return Py_BuildValue("{sss:ssKsKsdsdsdsN}", "name", op->name, "runner", "process",
                             "calls", (unsigned long long)calls, "records",
                             (unsigned long long)recs, "worker_busy_seconds", busy / 1e9,
                             "round_trip_seconds", wait / 1e9, "ipc_overhead_seconds",
                             wait > busy ? (wait - busy) / 1e9 : 0.0, "worker_pids", pids);
    }
    return Py_BuildValue("{sss:ssKsKsdsd}", "name", op->name, "runner", "thread", "calls",
                         (unsigned long long)op->calls, "records",
                         (unsigned long long)op->records, "busy_seconds", op->busy_ns / 1e9,
                         "gil_wait_seconds", op->gil_wait_ns / 1e9);
}
