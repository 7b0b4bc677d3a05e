/* ordered_team.c - a team of threads that works on a stream of items in
 * parallel and consumes the results in input order (ordered_team.h). */
#include "base/ordered_team.h"

#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { SLOT_FREE = 0, SLOT_BUSY = 1, SLOT_DONE = 2 };

typedef struct team {
    const zpi_oteam_ops *ops;
    void *ctx;
    size_t window;
    unsigned char *state; /* per slot */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t n_taken, next_put;
    int taking, putting, ended, stop;
    zp_status st; /* the first failure */
    zpi_err err;
} team;

/* Under the lock: keep the first failure, stop the team. */
static void fail(team *t, zp_status st, const zpi_err *e)
{
    if (t->st == ZP_OK) {
        t->st = st;
        zpi_err_copy(&t->err, e);
        t->err.code = st;
    }
    t->stop = 1;
}

/* Under the lock, returning with it held: put item next_put. */
static void do_put(team *t)
{
    uint64_t i = t->next_put;
    size_t slot = (size_t)(i % t->window);
    zpi_err e;
    zpi_err_clear(&e);
    t->putting = 1;
    pthread_mutex_unlock(&t->mu);
    zp_status st = t->ops->put(t->ctx, i, slot, &e);
    pthread_mutex_lock(&t->mu);
    t->putting = 0;
    t->state[slot] = SLOT_FREE;
    t->next_put++;
    if (st != ZP_OK)
        fail(t, st, &e);
}

/* Under the lock, returning with it held: take item n_taken and work on it. */
static void do_take(team *t, int thread)
{
    uint64_t i = t->n_taken;
    size_t slot = (size_t)(i % t->window);
    zpi_err e;
    zpi_err_clear(&e);
    t->taking = 1;
    pthread_mutex_unlock(&t->mu);
    zp_status st = t->ops->take(t->ctx, i, slot, &e);
    pthread_mutex_lock(&t->mu);
    t->taking = 0;
    if (st == ZP_END) {
        t->ended = 1;
        return;
    }
    if (st != ZP_OK) {
        fail(t, st, &e);
        return;
    }
    t->n_taken++;
    t->state[slot] = SLOT_BUSY;
    pthread_cond_broadcast(&t->cv); /* the next take may start */
    pthread_mutex_unlock(&t->mu);
    st = t->ops->work(t->ctx, i, slot, thread, &e);
    pthread_mutex_lock(&t->mu);
    t->state[slot] = SLOT_DONE;
    if (st != ZP_OK)
        fail(t, st, &e);
}

/* One thread's loop (all of them run it). Putting the next item comes
 * first (it frees a slot and is the only work in order), then taking. */
static void run_thread(team *t, int thread)
{
    pthread_mutex_lock(&t->mu);
    while (!t->stop) {
        if (!t->putting && t->next_put < t->n_taken &&
            t->state[t->next_put % t->window] == SLOT_DONE) {
            do_put(t);
        } else if (!t->taking && !t->ended && t->n_taken < t->next_put + t->window) {
            do_take(t, thread);
        } else if (t->ended && !t->taking && t->next_put == t->n_taken) {
            t->stop = 1; /* every item put */
        } else {
            pthread_cond_wait(&t->cv, &t->mu);
            continue;
        }
        pthread_cond_broadcast(&t->cv);
    }
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

typedef struct leader {
    team *t;
    int threads;
} leader;

/* The team's first thread: a thread of its own for each run, so that
 * every run gets a fresh OpenMP pool. libgomp keeps a pool per thread that
 * opens parallel regions and hands a new region's data to the pool's
 * threads through its own barriers, which ThreadSanitizer does not see: a
 * second run from the same thread read as a race with the first
 * (pthread_create and pthread_join order everything here). */
static void *lead(void *arg)
{
    leader *l = arg;
    team *t = l->t;
#pragma omp parallel num_threads(l->threads)
    run_thread(t, omp_get_thread_num());
    /* Each thread's last act was to unlock mu: taking it once more orders
     * all of their accesses before what follows (the parallel region's end
     * is a barrier inside libgomp, which TSan does not see). */
    pthread_mutex_lock(&t->mu);
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

zp_status zpi_oteam_run(const zpi_oteam_ops *ops, void *ctx, size_t window, int threads,
                        zpi_err *err)
{
    team t = {.ops = ops, .ctx = ctx, .window = window ? window : 1, .st = ZP_OK};
    zpi_err_clear(&t.err);
    if (threads < 1)
        threads = 1;
    t.state = calloc(t.window, 1);
    if (!t.state)
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&t.mu, NULL);
    pthread_cond_init(&t.cv, NULL);
    leader l = {&t, threads};
    pthread_t tid;
    int rc = pthread_create(&tid, NULL, lead, &l);
    if (rc == 0)
        pthread_join(tid, NULL);
    pthread_cond_destroy(&t.cv);
    pthread_mutex_destroy(&t.mu);
    free(t.state);
    if (rc != 0)
        return zpi_err_set(err, ZP_ERR_NOMEM, "cannot start a thread: %s", strerror(rc));
    if (t.st != ZP_OK)
        zpi_err_copy(err, &t.err);
    return t.st;
}
