/*
 * xfer.c - the multi-handle engine (xfer.h has the model): one libcurl
 * multi handle and one I/O thread run many jobs, each one request's tries
 * (request.c: attempts, retries, backoff, Range resume), at most
 * max_parallel at once, demanded jobs first. A job waiting for its retry
 * does not hold up the others: the I/O thread keeps a timer per job.
 *
 * Ownership: a zpi_xfer owns its jobs (copies of the specs), its multi
 * handle and its thread; the files are the caller's. Thread safety: the
 * queue, the job lists and the stats are under x->mu; a job's tx and every
 * libcurl call are on the I/O thread only; done callbacks run on the I/O
 * thread without the lock (they may submit).
 */
#include "io/xfer.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "io/request.h"
#include "io/storage.h"
#include "io/throttle.h"

/* How often jobs held back by a host's window look again (another
 * process of the node may have ended a request). */
#define THROTTLE_POLL_NS 2000000ULL

typedef enum { J_QUEUED, J_RUNNING, J_WAITING } job_state;

typedef struct job {
    zpi_tx t;
    uint64_t id;
    int demand;
    job_state state;
    zpi_xfer_done_fn done;
    void *user;
    uint64_t start_ns;     /* first attempt */
    uint64_t wake_ns;      /* J_WAITING: when to retry */
    char host[256];        /* the throttle's key of the request's host */
    int holds;             /* the running attempt counts in the host's window */
    uint64_t thr_start;    /* its start (zpi_throttle_begin) */
    struct job *prev, *next;
} job;

typedef struct job_list {
    job *head, *tail;
    size_t n;
} job_list;

static void list_push(job_list *l, job *j)
{
    j->next = NULL;
    j->prev = l->tail;
    if (l->tail)
        l->tail->next = j;
    else
        l->head = j;
    l->tail = j;
    l->n++;
}

static void list_remove(job_list *l, job *j)
{
    if (j->prev)
        j->prev->next = j->next;
    else
        l->head = j->next;
    if (j->next)
        j->next->prev = j->prev;
    else
        l->tail = j->prev;
    j->prev = j->next = NULL;
    l->n--;
}

struct zpi_xfer {
    zpi_storage *s;
    unsigned max_parallel, max_demand;
    CURLM *multi;
    pthread_t thread;
    pthread_mutex_t mu;
    int stopping;
    uint64_t next_id;
    job_list qd, qp;       /* queued: demanded, prefetches */
    job_list active;       /* running or waiting for a retry */
    zpi_throttle *th;      /* the hosts' windows (used on the I/O thread only) */
    /* Stats (under mu). */
    zpi_xfer_stats st;
    unsigned in_multi;     /* easy handles in the multi handle (I/O thread) */
    uint64_t busy_since;   /* when in_multi became non-zero (under mu) */
};

/* The attempt that held a place in its host's window ended (I/O thread). */
static void thr_release(zpi_xfer *x, job *j, zpi_thr_outcome outcome)
{
    if (!j->holds)
        return;
    j->holds = 0;
    zpi_throttle_end(x->th, j->host, j->thr_start, outcome);
}

static void job_free(job *j)
{
    zpi_tx_free(&j->t);
    free(j);
}

/* Hand a finished job to its owner: outside the lock, then free it. */
static void job_complete(zpi_xfer *x, job *j, zp_status status)
{
    zpi_xfer_result r;
    memset(&r, 0, sizeof r);
    r.status = status;
    if (status != ZP_OK)
        zpi_err_copy(&r.err, &j->t.err);
    r.bytes = j->t.bytes;
    r.size = status == ZP_OK ? j->t.written : 0;
    r.retries = j->t.retries;
    r.os_errno = status == ZP_ERR_IO ? j->t.os_errno : 0;
    uint64_t now = zpi_now_ns();
    r.ns = j->start_ns ? now - j->start_ns : 0;
    thr_release(x, j, ZPI_THR_OTHER);
    pthread_mutex_lock(&x->mu);
    if (j->state != J_QUEUED)
        list_remove(&x->active, j);
    if (status == ZP_OK) {
        x->st.downloads++;
        zp_hist_record(&x->st.latency_ns, r.ns);
    } else if (status != ZP_ERR_STATE) {
        x->st.failures++;
    }
    x->st.bytes += j->t.bytes;
    pthread_mutex_unlock(&x->mu);
    j->done(j->user, &r);
    job_free(j);
}

static void busy_update(zpi_xfer *x, int delta)
{
    pthread_mutex_lock(&x->mu);
    uint64_t now = zpi_now_ns();
    if (x->in_multi == 0 && delta > 0)
        x->busy_since = now;
    x->in_multi = (unsigned)((int)x->in_multi + delta);
    if (x->in_multi == 0 && delta < 0)
        x->st.busy_ns += now - x->busy_since;
    pthread_mutex_unlock(&x->mu);
}

/* Add the job's next attempt to the multi handle (I/O thread, no lock). */
static void job_launch(zpi_xfer *x, job *j)
{
    if (zpi_tx_prepare(&j->t) != ZP_OK) {
        job_complete(x, j, j->t.err.code);
        return;
    }
    CURLMcode mc = curl_multi_add_handle(x->multi, j->t.easy);
    if (mc != CURLM_OK) {
        zpi_err_set(&j->t.err, ZP_ERR_INTERNAL, "%s: libcurl: %s", j->t.label,
                    curl_multi_strerror(mc));
        job_complete(x, j, ZP_ERR_INTERNAL);
        return;
    }
    busy_update(x, 1);
}

/* Under the lock: the jobs to launch now (queued ones that fit in a slot,
 * waiting ones whose backoff is over), moved to active/J_RUNNING; and the
 * time of the earliest pending retry. */
/* May j's next attempt start now, within its host's window? A host that
 * said no in this round (denied) is not asked again for the next jobs. */
static int may_start(zpi_xfer *x, job *j, char *denied, size_t cap)
{
    if (denied[0] && !strcmp(denied, j->host))
        return 0;
    if (zpi_throttle_begin(x->th, j->host, &j->thr_start)) {
        j->holds = 1;
        return 1;
    }
    zpi_fmt(denied, cap, "%s", j->host);
    return 0;
}

/* Under the lock: the jobs to launch now (queued ones that fit in a slot
 * and in their host's window, waiting ones whose backoff is over), moved
 * to active/J_RUNNING; and the time of the earliest pending retry (or of
 * the next look at a window that held a job back). */
static size_t pick_jobs(zpi_xfer *x, job **out, size_t cap, uint64_t now, uint64_t *next_wake)
{
    size_t k = 0;
    char denied[256] = "";
    *next_wake = UINT64_MAX;
    for (job *j = x->active.head; j; j = j->next) {
        if (j->state != J_WAITING)
            continue;
        if (j->wake_ns <= now && k < cap && may_start(x, j, denied, sizeof denied)) {
            j->state = J_RUNNING;
            out[k++] = j;
        } else if (j->wake_ns < *next_wake) {
            *next_wake = j->wake_ns > now ? j->wake_ns : now + THROTTLE_POLL_NS;
        }
    }
    job_list *queues[2] = {&x->qd, &x->qp};
    size_t limits[2] = {x->max_parallel + x->max_demand, x->max_parallel};
    for (int q = 0; q < 2; q++) {
        job *j = queues[q]->head;
        while (j && k < cap && x->active.n < limits[q]) {
            job *next = j->next;
            if (may_start(x, j, denied, sizeof denied)) {
                list_remove(queues[q], j);
                j->state = J_RUNNING;
                j->start_ns = now;
                list_push(&x->active, j);
                out[k++] = j;
            } else if (now + THROTTLE_POLL_NS < *next_wake) {
                *next_wake = now + THROTTLE_POLL_NS;
            }
            j = next;
        }
    }
    return k;
}

/* End every queued, running and waiting job with ZP_ERR_STATE: why says
 * "cancelled (the transfers are shutting down)" or "stopped (...)". */
static void cancel_all(zpi_xfer *x, const char *why)
{
    for (;;) {
        pthread_mutex_lock(&x->mu);
        job *j = x->active.head;
        job_list *from = &x->active;
        if (!j) {
            j = x->qd.head ? x->qd.head : x->qp.head;
            from = x->qd.head ? &x->qd : &x->qp;
        }
        if (j && j->state == J_QUEUED) {
            list_remove(from, j);
        }
        pthread_mutex_unlock(&x->mu);
        if (!j)
            return;
        if (j->state == J_RUNNING && j->t.easy) {
            curl_multi_remove_handle(x->multi, j->t.easy);
            busy_update(x, -1);
        }
        zpi_err_set(&j->t.err, ZP_ERR_STATE, "%s: %s", j->t.label, why);
        job_complete(x, j, ZP_ERR_STATE);
    }
}

static void *io_thread(void *arg)
{
    zpi_xfer *x = arg;
    enum { BATCH = 64 };
    job *launch[BATCH];
    for (;;) {
        uint64_t now = zpi_now_ns(), next_wake;
        pthread_mutex_lock(&x->mu);
        if (x->stopping) {
            pthread_mutex_unlock(&x->mu);
            break;
        }
        pthread_mutex_unlock(&x->mu);
        if (zpi_tx_stop_requested(x->s)) {
            /* the caller stops: end every job now (new ones as they come) */
            cancel_all(x, "stopped (asked to stop)");
            curl_multi_poll(x->multi, NULL, 0, 100, NULL); /* a submit or destroy wakes it */
            continue;
        }
        pthread_mutex_lock(&x->mu);
        size_t k = pick_jobs(x, launch, BATCH, now, &next_wake);
        pthread_mutex_unlock(&x->mu);
        for (size_t i = 0; i < k; i++)
            job_launch(x, launch[i]);
        int running = 0;
        curl_multi_perform(x->multi, &running);
        CURLMsg *m;
        int left, finished = 0;
        while ((m = curl_multi_info_read(x->multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            CURL *e = m->easy_handle;
            CURLcode cc = m->data.result;
            zpi_tx *t = NULL;
            curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&t);
            curl_multi_remove_handle(x->multi, e);
            busy_update(x, -1);
            job *j = (job *)(void *)t; /* t is the job's first member */
            double delay;
            finished = 1;
            /* the host's answer moves its window: a 503 (SlowDown) or 429
             * lowers it, any other answer lets it grow */
            long code = 0;
            curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
            thr_release(x, j, code == 503 || code == 429 ? ZPI_THR_SLOWDOWN
                              : code > 0                 ? ZPI_THR_OK
                                                         : ZPI_THR_OTHER);
            zpi_tx_decision d = zpi_tx_finish(t, cc, &delay);
            if (d == ZPI_TX_RETRY) {
                pthread_mutex_lock(&x->mu);
                j->state = J_WAITING;
                j->wake_ns = zpi_now_ns() + (uint64_t)(delay * 1e9);
                if (j->wake_ns < next_wake)
                    next_wake = j->wake_ns;
                x->st.retries++;
                pthread_mutex_unlock(&x->mu);
            } else {
                job_complete(x, j, t->status);
            }
        }
        if (finished)
            continue; /* a slot is free: launch the next job before sleeping */
        /* Sleep until a socket is ready, a retry is due, or a wakeup. */
        int timeout_ms = x->s->cfg.stop_requested ? 100 : 1000; /* stop asked: seen within 0.1 s */
        now = zpi_now_ns();
        if (next_wake != UINT64_MAX) {
            uint64_t dt = next_wake > now ? (next_wake - now + 999999) / 1000000 : 0;
            if (dt < (uint64_t)timeout_ms)
                timeout_ms = (int)dt;
        }
        long ct = -1;
        if (curl_multi_timeout(x->multi, &ct) == CURLM_OK && ct >= 0 && ct < timeout_ms)
            timeout_ms = (int)ct;
        if (timeout_ms > 0)
            curl_multi_poll(x->multi, NULL, 0, timeout_ms, NULL);
    }
    cancel_all(x, "cancelled (the transfers are shutting down)");
    return NULL;
}

zp_status zpi_xfer_create(zpi_storage *s, unsigned max_parallel, unsigned max_demand,
                          zpi_xfer **out, zpi_err *err)
{
    return zpi_xfer_create_shared(s, max_parallel, max_demand, NULL, out, err);
}

zp_status zpi_xfer_create_shared(zpi_storage *s, unsigned max_parallel, unsigned max_demand,
                                 const char *throttle_dir, zpi_xfer **out, zpi_err *err)
{
    *out = NULL;
    if (max_parallel == 0)
        return zpi_err_set(err, ZP_ERR_INVALID, "transfers: max_parallel = 0: must be at least 1");
    zpi_xfer *x = calloc(1, sizeof *x);
    if (!x)
        return zpi_err_set(err, ZP_ERR_NOMEM, "transfers: out of memory");
    x->s = s;
    x->th = zpi_throttle_create(throttle_dir);
    if (!x->th) {
        free(x);
        return zpi_err_set(err, ZP_ERR_NOMEM, "transfers: out of memory");
    }
    x->max_parallel = max_parallel;
    x->max_demand = max_demand;
    zp_hist_init(&x->st.latency_ns);
    x->multi = curl_multi_init();
    if (!x->multi) {
        zpi_throttle_destroy(x->th);
        free(x);
        return zpi_err_set(err, ZP_ERR_NOMEM, "transfers: cannot create a libcurl multi handle");
    }
    curl_multi_setopt(x->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS,
                      (long)(max_parallel + max_demand));
    pthread_mutex_init(&x->mu, NULL);
    int rc = pthread_create(&x->thread, NULL, io_thread, x);
    if (rc != 0) {
        pthread_mutex_destroy(&x->mu);
        curl_multi_cleanup(x->multi);
        zpi_throttle_destroy(x->th);
        free(x);
        return zpi_err_set(err, ZP_ERR_NOMEM, "transfers: cannot start the I/O thread: %s",
                           strerror(rc));
    }
    *out = x;
    return ZP_OK;
}

void zpi_xfer_destroy(zpi_xfer *x)
{
    if (!x)
        return;
    pthread_mutex_lock(&x->mu);
    x->stopping = 1;
    pthread_mutex_unlock(&x->mu);
    curl_multi_wakeup(x->multi);
    pthread_join(x->thread, NULL);
    curl_multi_cleanup(x->multi);
    pthread_mutex_destroy(&x->mu);
    zpi_throttle_destroy(x->th);
    free(x);
}

zp_status zpi_xfer_submit(zpi_xfer *x, const zpi_xfer_job *jb, uint64_t *id, zpi_err *err)
{
    if (!jb->done || jb->fd < 0)
        return zpi_err_set(err, ZP_ERR_INVALID,
                           "transfers: a job needs a file and a done callback");
    job *j = calloc(1, sizeof *j);
    if (!j)
        return zpi_err_set(err, ZP_ERR_NOMEM, "transfers: out of memory");
    if (zpi_tx_init(&j->t, x->s, zpi_backend_for(jb->spec), jb->spec, jb->name) != ZP_OK ||
        zpi_tx_set_file(&j->t, jb->fd, jb->expect_size, jb->has_xxh64, jb->xxh64) != ZP_OK) {
        zp_status st = zpi_err_copy(err, &j->t.err);
        job_free(j);
        return st;
    }
    zpi_throttle_host(jb->spec, x->s->s3_endpoint, j->host, sizeof j->host);
    j->demand = jb->demand;
    j->done = jb->done;
    j->user = jb->user;
    j->state = J_QUEUED;
    pthread_mutex_lock(&x->mu);
    if (x->stopping) {
        pthread_mutex_unlock(&x->mu);
        job_free(j);
        return zpi_err_set(err, ZP_ERR_STATE, "transfers: shutting down");
    }
    j->id = ++x->next_id;
    list_push(j->demand ? &x->qd : &x->qp, j);
    if (id)
        *id = j->id;
    pthread_mutex_unlock(&x->mu);
    curl_multi_wakeup(x->multi);
    return ZP_OK;
}

void zpi_xfer_promote(zpi_xfer *x, uint64_t id)
{
    int moved = 0;
    pthread_mutex_lock(&x->mu);
    for (job *j = x->qp.head; j; j = j->next)
        if (j->id == id) {
            list_remove(&x->qp, j);
            j->demand = 1;
            list_push(&x->qd, j);
            moved = 1;
            break;
        }
    if (!moved)
        for (job *j = x->active.head; j; j = j->next)
            if (j->id == id) {
                j->demand = 1;
                break;
            }
    pthread_mutex_unlock(&x->mu);
    if (moved)
        curl_multi_wakeup(x->multi);
}

void zpi_xfer_stats_get(zpi_xfer *x, zpi_xfer_stats *out)
{
    pthread_mutex_lock(&x->mu);
    *out = x->st;
    if (x->in_multi > 0)
        out->busy_ns += zpi_now_ns() - x->busy_since;
    pthread_mutex_unlock(&x->mu);
}
