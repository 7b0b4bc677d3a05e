/* outq.c - the pipeline's output queue (outq.h). */
#include "output/outq.h"

#include <stdlib.h>
#include <time.h>
#include <string.h>

static zpi_batchbuf *buf_of(zpi_fifo_node *n) { return n ? ZPI_CONTAINER_OF(n, zpi_batchbuf, node) : NULL; }

static void buf_free(zpi_batchbuf *bb)
{
    if (!bb)
        return;
    free(bb->samples);
    free(bb->srow);
    free(bb->racct);
    free(bb->rpart);
    free(bb->data);
    free(bb->offsets);
    free(bb->tokens);
    free(bb->mask);
    free(bb->seg);
    free(bb->pos);
    free(bb->cu);
    free(bb->ndocs);
    free(bb->rowpos);
    free(bb->done);
    for (int k = 0; k < 16; k++)
        free(bb->fixed[k]);
    free(bb->part_samples);
    free(bb->part_tokens);
    free(bb);
}

/* A new buffer, listed in q->all (not in the free list). NULL when memory
 * ran out. Under the lock (or before the queue is shared). */
static zpi_batchbuf *buf_new(zpi_outq *q)
{
    if (q->n_all == q->cap_all) {
        size_t cap = q->cap_all ? 2 * q->cap_all : 8;
        zpi_batchbuf **a = realloc(q->all, cap * sizeof *a);
        if (!a)
            return NULL;
        q->all = a;
        q->cap_all = cap;
    }
    zpi_batchbuf *bb = calloc(1, sizeof *bb);
    if (!bb)
        return NULL;
    size_t rows = q->rows, cols = q->cols;
    bb->samples_cap = rows;
    bb->samples = malloc(rows * sizeof *bb->samples);
    int ok = bb->samples != NULL;
    if (cols) {
        bb->tokens = malloc(rows * cols * sizeof *bb->tokens);
        bb->mask = malloc(rows * cols);
        bb->seg = malloc(rows * cols * sizeof *bb->seg);
        ok = ok && bb->tokens && bb->mask && bb->seg;
        if (q->masking & ZP_OUT_POSITION_IDS) {
            bb->pos = malloc(rows * cols * sizeof *bb->pos);
            bb->rowpos = malloc(rows * sizeof *bb->rowpos);
            ok = ok && bb->pos && bb->rowpos;
        }
        if (q->masking & ZP_OUT_CU_SEQLENS) {
            bb->cu = malloc((rows * (cols - 1) + 1) * sizeof *bb->cu);
            ok = ok && bb->cu;
        }
        if (q->masking & ZP_OUT_DOC_COUNTS) {
            bb->ndocs = malloc(rows * sizeof *bb->ndocs);
            ok = ok && bb->ndocs;
        }
    } else {
        bb->offsets = malloc((rows + 1) * sizeof *bb->offsets);
        ok = ok && bb->offsets;
    }
    if (!ok) {
        buf_free(bb);
        return NULL;
    }
    q->all[q->n_all++] = bb;
    return bb;
}

zp_status zpi_outq_init(zpi_outq *q, size_t n_bufs, size_t rows, size_t cols, unsigned masking)
{
    memset(q, 0, sizeof *q);
    q->masking = cols ? masking : 0;
    pthread_mutex_init(&q->mu, NULL);
    pthread_condattr_t ca; /* the consumer's timed wait (the watchdog) is on the monotonic clock */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->ready_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&q->free_cv, NULL);
    q->n_bufs = n_bufs;
    q->rows = rows;
    q->cols = cols;
    for (size_t i = 0; i < n_bufs; i++) {
        zpi_batchbuf *bb = buf_new(q);
        if (!bb)
            return ZP_ERR_NOMEM;
        zpi_fifo_push(&q->free, &bb->node);
    }
    return ZP_OK;
}

void zpi_outq_fini(zpi_outq *q)
{
    for (size_t i = 0; i < q->n_all; i++)
        buf_free(q->all[i]);
    free(q->all);
    q->all = NULL;
    q->n_all = q->cap_all = q->n_kept = 0;
    q->held = NULL;
    memset(&q->free, 0, sizeof q->free);
    memset(&q->ready, 0, sizeof q->ready);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->ready_cv);
    pthread_cond_destroy(&q->free_cv);
}

/* Under the lock: a free buffer, allocating a replacement for kept ones;
 * NULL when none may be had now (or memory ran out: then the producer
 * waits for a buffer to come back, as without kept ones). */
static zpi_batchbuf *take_free(zpi_outq *q)
{
    zpi_batchbuf *bb = buf_of(zpi_fifo_pop(&q->free));
    if (!bb && q->n_all - q->n_kept < q->n_bufs)
        bb = buf_new(q);
    return bb;
}

void zpi_outq_autotune(zpi_outq *q, size_t prefetch, size_t max)
{
    q->tune.on = 1;
    q->tune.prefetch = prefetch;
    q->tune.max = max > prefetch ? max : prefetch;
}

uint64_t zpi_outq_waited_ns(zpi_outq *q)
{
    pthread_mutex_lock(&q->mu);
    uint64_t w = q->tune.waited_ns;
    pthread_mutex_unlock(&q->mu);
    return w;
}

size_t zpi_outq_prefetch(zpi_outq *q, int *is_auto, size_t *cap, char *why, size_t len)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->tune.prefetch;
    if (is_auto)
        *is_auto = q->tune.on;
    if (cap)
        *cap = q->tune.on ? q->tune.max : n;
    if (why && len)
        zpi_fmt(why, len, "%s", q->tune.why);
    pthread_mutex_unlock(&q->mu);
    return n;
}

/* Under the lock, after a batch was taken: at the end of a stretch of at
 * least 16 batches and 50 ms, deepen the queue when the consumer waited
 * more than 0.5% of it while the producer also waited for room. */
static void tune_step(zpi_outq *q, uint64_t now)
{
    zpi_outq_tune *t = &q->tune;
    if (!t->on)
        return;
    if (++t->win_batches < 16 || now - t->win_t0 < 50 * 1000000ull)
        return;
    double span = (double)(now - t->win_t0), stall = (double)t->stall_ns / span;
    if (stall > 0.005 && (double)t->blocked_ns > 0.01 * span && t->prefetch < t->max) {
        size_t from = t->prefetch, to = 2 * from < t->max ? 2 * from : t->max;
        if (to < from + 1)
            to = from + 1;
        q->n_bufs += to - from;
        t->prefetch = to;
        t->raises++;
        zpi_fmt(t->why, sizeof t->why,
                "raised %zu -> %zu after batch %llu: the consumer waited %.1f%% of the last "
                "%llu batches while the packer waited %.0f ms for room (bursts a deeper queue "
                "absorbs)",
                from, to, (unsigned long long)q->counts.batches, 100.0 * stall,
                (unsigned long long)t->win_batches, (double)t->blocked_ns * 1e-6);
        pthread_cond_signal(&q->free_cv); /* the producer may allocate one now */
    } else if (t->raises == 0) {
        zpi_fmt(t->why, sizeof t->why,
                "kept %zu: the consumer waited %.1f%% of the last %llu batches, the packer "
                "%.0f ms for room%s",
                t->prefetch, 100.0 * stall, (unsigned long long)t->win_batches,
                (double)t->blocked_ns * 1e-6,
                (double)t->blocked_ns <= 0.01 * span && stall > 0.005
                    ? " (the pipeline is slower than the loop: a deeper queue would not help)"
                : t->prefetch >= t->max ? " (at its cap)"
                                        : "");
    }
    t->win_t0 = now;
    t->win_batches = 0;
    t->stall_ns = t->blocked_ns = 0;
}

zp_status zpi_outq_get_free(zpi_outq *q, zpi_ctr *blocked_ns, zpi_batchbuf **out)
{
    pthread_mutex_lock(&q->mu);
    zpi_batchbuf *bb = q->closed ? NULL : take_free(q);
    if (!bb && !q->closed) {
        if (q->ready.head) /* the consumer waits for more than there will be */
            pthread_cond_signal(&q->ready_cv);
        /* blocked on a full output: time it */
        uint64_t t0 = blocked_ns || q->tune.on ? zpi_now_ns() : 0;
        while (!q->closed && !(bb = take_free(q)))
            pthread_cond_wait(&q->free_cv, &q->mu);
        uint64_t dt = t0 ? zpi_now_ns() - t0 : 0;
        if (blocked_ns)
            zpi_ctr_add(blocked_ns, dt);
        q->tune.blocked_ns += dt;
    }
    pthread_mutex_unlock(&q->mu);
    *out = bb;
    return bb ? ZP_OK : ZP_ERR_STATE;
}

zp_status zpi_outq_keep(zpi_outq *q, zpi_batchbuf *bb)
{
    pthread_mutex_lock(&q->mu);
    zp_status st = ZP_OK;
    if (!bb || bb != q->held)
        st = ZP_ERR_INVALID;
    else if (!bb->kept) {
        bb->kept = 1;
        q->n_kept++;
        pthread_cond_signal(&q->free_cv); /* the producer may allocate now */
    }
    pthread_mutex_unlock(&q->mu);
    return st;
}

zp_status zpi_outq_release(zpi_outq *q, zpi_batchbuf *bb)
{
    pthread_mutex_lock(&q->mu);
    size_t i = 0;
    while (i < q->n_all && q->all[i] != bb)
        i++;
    if (i == q->n_all || !bb->kept) {
        pthread_mutex_unlock(&q->mu);
        return ZP_ERR_INVALID;
    }
    bb->kept = 0;
    q->n_kept--;
    if (bb != q->held) {
        /* back into the rotation, or freed when many more than needed */
        if (q->n_all > 2 * q->n_bufs + q->n_kept) {
            q->all[i] = q->all[--q->n_all];
            buf_free(bb);
        } else {
            zpi_fifo_push(&q->free, &bb->node);
        }
        pthread_cond_signal(&q->free_cv);
    }
    pthread_mutex_unlock(&q->mu);
    return ZP_OK;
}

size_t zpi_outq_kept(zpi_outq *q)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->n_kept;
    pthread_mutex_unlock(&q->mu);
    return n;
}

void zpi_outq_put_back(zpi_outq *q, zpi_batchbuf *bb)
{
    pthread_mutex_lock(&q->mu);
    zpi_fifo_push(&q->free, &bb->node);
    pthread_cond_signal(&q->free_cv);
    pthread_mutex_unlock(&q->mu);
}

void zpi_outq_push(zpi_outq *q, zpi_batchbuf *bb)
{
    pthread_mutex_lock(&q->mu);
    zpi_fifo_push(&q->ready, &bb->node);
    if (q->ready.n >= q->wake_at)
        pthread_cond_signal(&q->ready_cv);
    pthread_mutex_unlock(&q->mu);
}

/* Under the lock: the ready batches a consumer about to wait is woken for:
 * 1 for its first batch, when the queue is shallow and when the consumer
 * spends time with a batch (step_ns: a training step, which a wait for
 * several batches would delay after every stall of the pipeline), else up to
 * ZPI_OUTQ_WAKE_BATCHES but no more than half the queue (the producer
 * also wakes it before it blocks for a free buffer). */
static size_t wake_count(const zpi_outq *q, uint64_t step_ns)
{
    if (q->counts.batches == 0 || q->n_bufs < 4 || step_ns > ZPI_OUTQ_WAKE_STEP_NS)
        return 1;
    return q->n_bufs / 2 < ZPI_OUTQ_WAKE_BATCHES ? q->n_bufs / 2 : ZPI_OUTQ_WAKE_BATCHES;
}

void zpi_counts_add(zp_pipeline_counts *a, const zp_pipeline_counts *d)
{
    a->batches += d->batches;
    a->samples += d->samples;
    a->padded += d->padded;
    a->skipped += d->skipped;
    a->filtered += d->filtered;
    a->tokens += d->tokens;
    a->truncated_tokens += d->truncated_tokens;
    a->pad_tokens += d->pad_tokens;
    a->cut_documents += d->cut_documents;
    a->balance_windows += d->balance_windows;
    a->attn_cost += d->attn_cost;
    a->attn_peak_before += d->attn_peak_before;
    a->attn_peak_after += d->attn_peak_after;
}

void zpi_outq_finish(zpi_outq *q, zp_status st, const char *msg, const zp_pipeline_counts *extra)
{
    pthread_mutex_lock(&q->mu);
    if (!q->final_set) {
        q->final_set = 1;
        zpi_err_set(&q->final, st, "%s", msg ? msg : "");
        if (extra)
            zpi_counts_add(&q->counts, extra);
    }
    pthread_cond_broadcast(&q->ready_cv);
    pthread_mutex_unlock(&q->mu);
}

void zpi_outq_close(zpi_outq *q)
{
    pthread_mutex_lock(&q->mu);
    q->closed = 1;
    pthread_cond_broadcast(&q->free_cv);
    pthread_mutex_unlock(&q->mu);
}

zp_status zpi_outq_next(zpi_outq *q, zpi_batchbuf **out, zpi_err *err, uint64_t *taken_ns)
{
    /* the consumer's time with its last batch (its step) */
    const uint64_t entered = zpi_now_ns();
    pthread_mutex_lock(&q->mu);
    const uint64_t step = q->last_taken_ns ? entered - q->last_taken_ns : UINT64_MAX;
    if (q->held) {
        if (!q->held->kept)
            zpi_fifo_push(&q->free, &q->held->node);
        /* a free buffer, or (kept) room for the producer to allocate one */
        pthread_cond_signal(&q->free_cv);
        q->held = NULL;
    }
    uint64_t t0 = 0;
    if (!q->ready.head && !q->final_set && q->tune.win_t0)
        t0 = zpi_now_ns();
    uint64_t w0 = 0, fire = 0;
    while (!q->ready.head && !q->final_set) {
        q->wake_at = wake_count(q, step);
        if (!q->watch_ns && q->wake_at == 1) {
            pthread_cond_wait(&q->ready_cv, &q->mu);
            continue;
        }
        uint64_t now = zpi_now_ns(), until = 0;
        if (q->watch_ns) {
            /* the watchdog: call watch_fn after each watch_ns of this wait */
            if (!w0) {
                w0 = now;
                fire = now + q->watch_ns;
            }
            if (now >= fire) {
                pthread_mutex_unlock(&q->mu);
                q->watch_fn(q->watch_user, now - w0);
                pthread_mutex_lock(&q->mu);
                fire += q->watch_ns;
                if (fire <= now)
                    fire = now + q->watch_ns;
                continue;
            }
            until = fire;
        }
        if (q->wake_at > 1 && (!until || until > now + ZPI_OUTQ_WAKE_NS))
            until = now + ZPI_OUTQ_WAKE_NS; /* fewer than wake_at may be all there is */
        struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
        pthread_cond_timedwait(&q->ready_cv, &q->mu, &ts);
    }
    q->wake_at = 0;
    zpi_batchbuf *bb = buf_of(zpi_fifo_pop(&q->ready));
    zp_status st;
    if (bb) {
        q->held = bb;
        uint64_t now = zpi_now_ns();
        q->last_taken_ns = now;
        if (taken_ns)
            *taken_ns = now;
        if (t0) {
            q->tune.stall_ns += now - t0;
            q->tune.waited_ns += now - t0;
        }
        if (q->tune.win_t0 == 0)
            q->tune.win_t0 = now; /* from the first batch on: the start is not a stall */
        else
            tune_step(q, now);
        q->counts.batches++;
        zpi_counts_add(&q->counts, &bb->delta);
        st = ZP_OK;
    } else {
        st = q->final.code;
        if (st != ZP_END)
            zpi_err_copy(err, &q->final);
    }
    pthread_mutex_unlock(&q->mu);
    *out = bb;
    return st;
}

zp_status zpi_outq_failed(zpi_outq *q)
{
    pthread_mutex_lock(&q->mu);
    zp_status st = q->final_set && !q->ready.head && q->final.code != ZP_END ? q->final.code
                                                                            : ZP_OK;
    pthread_mutex_unlock(&q->mu);
    return st;
}

int zpi_outq_finished(zpi_outq *q)
{
    pthread_mutex_lock(&q->mu);
    int f = q->final_set;
    pthread_mutex_unlock(&q->mu);
    return f;
}

void zpi_outq_counts(zpi_outq *q, zp_pipeline_counts *out)
{
    pthread_mutex_lock(&q->mu);
    *out = q->counts;
    pthread_mutex_unlock(&q->mu);
}

size_t zpi_outq_ready(zpi_outq *q)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->ready.n;
    pthread_mutex_unlock(&q->mu);
    return n;
}

void zpi_outq_watch(zpi_outq *q, uint64_t period_ns, void (*fn)(void *user, uint64_t waited_ns),
                    void *user)
{
    pthread_mutex_lock(&q->mu);
    q->watch_ns = fn ? period_ns : 0;
    q->watch_fn = fn;
    q->watch_user = user;
    pthread_mutex_unlock(&q->mu);
}
