/*
 * engine.c - the scheduler: runs a pipeline's operators as OpenMP tasks
 * (engine.h has the model). Chunks of consecutive samples flow
 * fetch -> map* -> tokenize; each operator runs at most `parallelism` tasks
 * at once; the chunk next in order is drained, by the thread that completes
 * it, into the packer. The operator bodies are operators.h's, the batch
 * stage packer.h's, the hand-over to the consumer outq.h's.
 */
#include "engine/engine.h"
#include "plan/worksource_internal.h"

#include <omp.h>

#include "data/dataset_internal.h"
#include "engine/next_use.h"
#include "io/fetcher.h"
#include <stdlib.h>
#include <string.h>

typedef struct stage {
    zpi_op op; /* op.parallelism may change while running (op.auto_max > 0) */
    /* under mu */
    size_t running;
    zpi_fifo ready; /* chunks waiting for a task */
    /* autotune (op.auto_max > 0): time chunks waited for a task in the
     * tuner's current stretch, raises so far, the last decision */
    uint64_t tune_wait_ns;
    size_t raises;
    char why[200];
} stage;

struct zpi_engine {
    /* settings, fixed at start */
    zp_worksource *ws;
    int threads;
    size_t chunk_samples;
    zpi_op_env env;
    stage stages[ZPI_MAX_OPS];
    int n_stages;
    size_t prefetch_buffer, prefetch_parallelism;

    /* resources */
    zpi_outq *q;             /* borrowed */
    zpi_obs *obs;            /* NULL when off */
    zpi_shard_cache *cache;
    zpi_fetcher *fetcher;    /* remote shards; NULL when the dataset has none */
    zpi_next_use *order;     /* the fetcher's next-use order; NULL without one */
    zpi_worker *workers;     /* one per team thread */
    zpi_chunk *chunks;       /* W chunks */
    size_t W;
    pthread_t thread;
    int thread_started;
    atomic_int stop;

    /* under mu */
    pthread_mutex_t mu;
    zpi_fifo chunk_free;
    zpi_chunk **window;      /* reorder window: seq % W */
    uint64_t next_seq;       /* next chunk to drain */
    uint64_t admit_seq;      /* next chunk to admit */
    size_t in_flight;
    int draining;
    int admit_done;
    uint32_t adm_epoch, end_epoch; /* end_epoch = UINT32_MAX without end */
    int last_pass;                 /* 1: admission entered the last epoch, 2: the cache knows */
    uint64_t adm_pos, per_rank;
    /* prefetch: shards of the next `prefetch_buffer` positions are loaded
     * into the shard cache ahead of fetch, by at most prefetch_parallelism
     * tasks */
    uint32_t pf_epoch;
    uint64_t pf_pos;
    uint32_t pf_recent[16];
    unsigned pf_recent_n;
    uint32_t pf_queue[64];
    size_t pf_head, pf_count, pf_running;
    /* the look-ahead's tuning (tune_locked), under mu: caps (0: fixed),
     * raises so far, the last decision; fetch tasks' time in the shard
     * cache (env.sync_load_ns) and its value at the stretch's start */
    size_t pf_buf_max, pf_par_max;
    unsigned pf_raises;
    char pf_why[200];
    int pf_started_at_cap; /* remote shards: the look-ahead started at its cap */
    _Atomic uint64_t sync_load_ns;
    uint64_t tune_load0;

    /* the drainer's (one thread at a time, handed over under mu) */
    zpi_packer pk;
    uint64_t seen, skipped, filtered; /* records drained in this run */
    int full_epoch;                   /* an epoch started at its position 0 */
    zpi_err first_skip;               /* the first record skipped, in stream order */

    /* autotune of operator parallelism (tune_locked), under mu: on when an
     * operator's parallelism is automatic; the stretch measured since
     * tune_t0 (ns), the consumer's wait at its start, chunks drained in it */
    int tuning;
    uint64_t tune_t0, tune_waited0, tune_chunks;
    /* the chunks given to the free list so far (chunks[0 .. w_given)): all
     * W, or, when the window follows the tuned parallelism, 2 x its sum + 2 */
    size_t w_given;
    int w_follows;
};

static zpi_chunk *chunk_of(zpi_fifo_node *n) { return n ? ZPI_CONTAINER_OF(n, zpi_chunk, node) : NULL; }

static int thread_index(const zpi_engine *e)
{
    int t = omp_get_thread_num();
    return (t < 0 || t >= e->threads) ? 0 : t;
}

/* The calling thread's observability slot, or NULL when off. */
static zpi_obs_thread *obs_self(zpi_engine *e)
{
    return e->obs ? &e->obs->th[thread_index(e)] : NULL;
}

/* Under mu: account stage s's state up to now before it changes. */
static void obs_tick_at(zpi_engine *e, int s, uint64_t now)
{
    if (e->obs && s < ZPI_OBS_STAGES) {
        const stage *st = &e->stages[s];
        zpi_obs_stage_tick(&e->obs->stage[s], now, st->ready.n, st->running, st->op.parallelism);
    }
}

static void obs_tick(zpi_engine *e, int s)
{
    if (e->obs)
        obs_tick_at(e, s, zpi_now_ns());
}

/* ------------------------------------------------------------ running an operator */

/* Runs op on chunk c: the one dispatch to the operator bodies (ops/). */
static void op_run(const zpi_op_env *env, const zpi_op *op, zpi_worker *w, zpi_obs_thread *ot,
                   zpi_chunk *c)
{
    switch (op->kind) {
    case ZPI_OP_FETCH: zpi_op_fetch(env, w, ot, c); break;
    case ZPI_OP_MAP: zpi_op_map(env, op, w, c); break;
    case ZPI_OP_TOKENIZE: zpi_op_tokenize(env, w, c); break;
    }
}

static void worker_fini(zpi_worker *w)
{
    zpi_json_destroy(w->json);
    zp_encoder_destroy(w->enc);
    zpi_record_scratch_free(w);
    w->json = NULL;
    w->enc = NULL;
}

/* The calling thread's activity slot: from now on it runs `op` on chunk c
 * (NULL: a shard of its own), its item the chunk's first sample. */
static zpi_activity *act_begin(zpi_engine *e, int op, const zpi_chunk *c, uint32_t shard)
{
    zpi_activity *a = &e->workers[thread_index(e)].act;
    uint64_t now = zpi_now_ns();
    atomic_store_explicit(&a->chunk_ns, now, memory_order_relaxed);
    atomic_store_explicit(&a->epoch, c ? c->epoch : 0, memory_order_relaxed);
    atomic_store_explicit(&a->position, c ? c->pos0 : 0, memory_order_relaxed);
    if (c && c->n)
        zpi_act_item(a, op == ZPI_ACT_BATCH ? ZP_TASK_PACKING : ZP_TASK_RUNNING,
                     c->samples[0].shard, UINT64_MAX);
    else
        zpi_act_item(a, ZP_TASK_LOADING, shard, UINT64_MAX);
    atomic_store_explicit(&a->op, op, memory_order_relaxed);
    return a;
}

static void act_end(zpi_activity *a)
{
    atomic_store_explicit(&a->op, ZPI_ACT_IDLE, memory_order_relaxed);
    atomic_store_explicit(&a->state, ZP_TASK_IDLE, memory_order_relaxed);
}

static void run_stage(zpi_engine *e, int s, zpi_chunk *c)
{
    const stage *st = &e->stages[s];
    zpi_worker *w = &e->workers[thread_index(e)];
    zpi_obs_thread *ot = obs_self(e);
    uint64_t t0 = 0;
    if (ot) {
        zpi_ctr_add(&ot->items_in[s], st->op.kind == ZPI_OP_FETCH ? c->n : zpi_chunk_live(c));
        t0 = zpi_now_ns();
    }
    zpi_activity *a = act_begin(e, s, c, 0);
    op_run(&e->env, &st->op, w, ot, c);
    act_end(a);
    if (ot) {
        zpi_ctr_add(&ot->busy_ns[s], zpi_now_ns() - t0);
        zpi_ctr_add(&ot->items_out[s], c->err.code == ZP_OK ? zpi_chunk_live(c) : 0);
    }
}

/* ------------------------------------------------------------ scheduling */

static void stage_task(zpi_engine *e, int s, zpi_chunk *c);
static void drain(zpi_engine *e);

static void spawn(zpi_engine *e, int s, zpi_chunk *c)
{
#pragma omp task firstprivate(e, s, c) default(none)
    stage_task(e, s, c);
}

/* Under mu: move c to stage s (or to the reorder window past the last
 * stage). Returns 1 when the caller must spawn a task for (s, c) after
 * unlocking, 2 when the caller should try to drain, 0 otherwise. */
static int handoff_locked(zpi_engine *e, int s, zpi_chunk *c)
{
    if (c->err.code != ZP_OK || s >= e->n_stages) {
        c->complete = 1;
        return (c->seq == e->next_seq && !e->draining) ? 2 : 0;
    }
    c->stage = s;
    stage *st = &e->stages[s];
    obs_tick(e, s);
    if (st->running < st->op.parallelism) {
        st->running++;
        return 1;
    }
    if (e->obs || st->op.auto_max)
        c->enq_ns = zpi_now_ns();
    zpi_fifo_push(&st->ready, &c->node);
    if (e->obs && st->ready.n > e->obs->stage[s].queue_max)
        e->obs->stage[s].queue_max = (uint32_t)st->ready.n;
    return 0;
}

static void stage_task(zpi_engine *e, int s, zpi_chunk *c)
{
    stage *st = &e->stages[s];
    /* The chunk was handed over under mu: acquire it here, so that the
     * hand-over is ordered by our own lock and not only by the OpenMP
     * runtime's task queue (which sanitizers cannot see into). */
    pthread_mutex_lock(&e->mu);
    pthread_mutex_unlock(&e->mu);
    while (c) {
        if (!atomic_load(&e->stop))
            run_stage(e, s, c);
        pthread_mutex_lock(&e->mu);
        int act = handoff_locked(e, s + 1, c);
        obs_tick(e, s);
        zpi_chunk *nextc = atomic_load(&e->stop) ? NULL : chunk_of(zpi_fifo_pop(&st->ready));
        if (!nextc)
            st->running--;
        else if (e->obs && s > 0)
            e->obs->stage[s - 1].blocked_ns += (double)(zpi_now_ns() - nextc->enq_ns);
        if (nextc && st->op.auto_max)
            st->tune_wait_ns += zpi_now_ns() - nextc->enq_ns;
        pthread_mutex_unlock(&e->mu);
        if (act == 1)
            spawn(e, s + 1, c);
        else if (act == 2)
            drain(e);
        c = nextc;
    }
}

/* Under mu: fill a free chunk with the next samples of the stream, or
 * return NULL when the stream is done. */
static zpi_chunk *admit_locked(zpi_engine *e)
{
    if (e->admit_done || atomic_load(&e->stop) || !e->chunk_free.head)
        return NULL;
    zpi_worksource_settle(e->ws, &e->adm_epoch, &e->adm_pos);
    const uint64_t len = zp_worksource_epoch_samples(e->ws, e->adm_epoch);
    if (e->per_rank == 0 || e->adm_epoch >= e->end_epoch) {
        e->admit_done = 1;
        return NULL;
    }
    if (e->last_pass == 0 && e->end_epoch != UINT32_MAX && e->adm_epoch + 1 == e->end_epoch)
        e->last_pass = 1;
    zpi_chunk *c = chunk_of(zpi_fifo_pop(&e->chunk_free));
    zpi_chunk_reset(c);
    c->seq = e->admit_seq++;
    c->epoch = e->adm_epoch;
    c->pos0 = e->adm_pos;
    size_t n = e->chunk_samples;
    if (len - e->adm_pos < n)
        n = (size_t)(len - e->adm_pos);
    for (size_t i = 0; i < n; i++) {
        zp_status st = zp_worksource_sample(e->ws, c->epoch, c->pos0 + i, &c->samples[i]);
        if (st != ZP_OK) {
            zpi_chunk_fail(c, st, "worksource failed to plan a sample");
            break;
        }
    }
    c->n = n;
    e->adm_pos += n;
    c->last_in_epoch = e->adm_pos >= len;
    e->window[c->seq % e->W] = c;
    e->in_flight++;
    return c;
}

/* ------------------------------------------------------------ prefetch */

static void prefetch_task(zpi_engine *e, uint32_t shard);

static void spawn_prefetch(zpi_engine *e, uint32_t shard)
{
#pragma omp task firstprivate(e, shard) default(none)
    prefetch_task(e, shard);
}

/* Under mu: pop a queued shard to prefetch, or return 0. */
static int pf_pop_locked(zpi_engine *e, uint32_t *shard)
{
    if (!e->pf_count || atomic_load(&e->stop))
        return 0;
    *shard = e->pf_queue[e->pf_head];
    e->pf_head = (e->pf_head + 1) % 64;
    e->pf_count--;
    return 1;
}

static void prefetch_task(zpi_engine *e, uint32_t shard)
{
    for (;;) {
        /* `shard` is a shard unit (a segment: shard_cache.h) */
        zpi_activity *a =
            act_begin(e, ZPI_ACT_PREFETCH, NULL, zpi_shard_cache_unit_shard(e->cache, shard));
        zpi_op_prefetch(&e->env, obs_self(e), shard);
        act_end(a);
        pthread_mutex_lock(&e->mu);
        int more = pf_pop_locked(e, &shard);
        if (!more)
            e->pf_running--;
        pthread_mutex_unlock(&e->mu);
        if (!more)
            return;
    }
}

/* Under mu: queue the shards of the positions up to `prefetch_buffer` ahead
 * of admission. Returns how many prefetch tasks to start (their shards are
 * put into out[]). Remote shards are not decoded ahead: their downloads are
 * started instead (dl[], *n_dl of at most 64), which waits for nothing. */
static size_t pf_plan_locked(zpi_engine *e, uint32_t *out, size_t max_out, uint32_t *dl,
                             size_t *n_dl)
{
    *n_dl = 0;
    if (!e->prefetch_buffer || atomic_load(&e->stop) || e->per_rank == 0)
        return 0;
    /* never behind admission: those samples are fetched already */
    if (e->pf_epoch < e->adm_epoch || (e->pf_epoch == e->adm_epoch && e->pf_pos < e->adm_pos)) {
        e->pf_epoch = e->adm_epoch;
        e->pf_pos = e->adm_pos;
    }
    uint64_t ahead = 0;
    if (e->pf_epoch == e->adm_epoch)
        ahead = e->pf_pos - e->adm_pos;
    else /* a later epoch: what is left of admission's, and pf_pos */
        ahead = (zp_worksource_epoch_samples(e->ws, e->adm_epoch) - e->adm_pos) + e->pf_pos;
    while (ahead < e->prefetch_buffer && e->pf_count < 64) {
        zpi_worksource_settle(e->ws, &e->pf_epoch, &e->pf_pos);
        if (e->pf_epoch >= e->end_epoch)
            break;
        zp_sample s;
        if (zp_worksource_sample(e->ws, e->pf_epoch, e->pf_pos, &s) != ZP_OK)
            break;
        e->pf_pos++;
        ahead++;
        /* units (segments) are prefetched; remote shards downloaded whole */
        const uint32_t unit = zpi_shard_cache_unit(e->cache, s.shard, s.record);
        int seen = 0;
        for (unsigned i = 0; i < e->pf_recent_n && i < 16; i++)
            if (e->pf_recent[i] == unit)
                seen = 1;
        if (seen)
            continue;
        e->pf_recent[e->pf_recent_n++ % 16] = unit;
        if (zpi_fetcher_is_remote(e->fetcher, s.shard)) {
            dl[(*n_dl)++] = s.shard;
            if (*n_dl == 64)
                break;
            continue;
        }
        e->pf_queue[(e->pf_head + e->pf_count) % 64] = unit;
        e->pf_count++;
    }
    size_t n = 0;
    while (n < max_out && e->pf_running < e->prefetch_parallelism && pf_pop_locked(e, &out[n])) {
        e->pf_running++;
        n++;
    }
    return n;
}

/* The look-ahead filled up to prefetch_buffer samples: local units to
 * prefetch tasks, remote shards' downloads started (the fetcher queues
 * those beyond its parallelism). The plan gives at most 64 downloads at a
 * time: planned again until it gives fewer, so that the look-ahead covers
 * its whole length (and the samples admitted next) however many shards it
 * spans, not 64 shards per admission. */
static void prefetch_more(zpi_engine *e)
{
    uint32_t shards[64], dl[64];
    for (int first = 1;; first = 0) {
        size_t n_dl = 0;
        pthread_mutex_lock(&e->mu);
        size_t n = pf_plan_locked(e, shards, 64, dl, &n_dl);
        uint32_t epoch = e->adm_epoch;
        uint64_t pos = e->adm_pos; /* at an epoch's end its length: the next one's start */
        /* next uses count from the oldest chunk not yet past its fetch, not
         * from admission: the shards of admitted chunks not yet read are still
         * needed (else the cache may evict them before their fetch) */
        for (uint64_t sq = e->next_seq; first && sq < e->admit_seq; sq++) {
            zpi_chunk *c = e->window[sq % e->W];
            if (c && c->seq == sq && c->stage == 0 && !c->complete) {
                epoch = c->epoch;
                pos = c->pos0;
                break;
            }
        }
        pthread_mutex_unlock(&e->mu);
        if (e->fetcher) {
            if (first) {
                zpi_next_use_set_position(e->order, epoch, pos);
                zpi_fetcher_set_position(e->fetcher, epoch, pos,
                                         zpi_worksource_linear(e->ws, epoch, pos));
            }
            for (size_t i = 0; i < n_dl; i++)
                zpi_fetcher_prefetch(e->fetcher, dl[i]);
        }
        for (size_t i = 0; i < n; i++)
            spawn_prefetch(e, shards[i]);
        if (n_dl < 64)
            return;
    }
}

/* Admit as many chunks as the window allows and start their fetch. */
static void admit_more(zpi_engine *e)
{
    prefetch_more(e);
    for (;;) {
        pthread_mutex_lock(&e->mu);
        zpi_chunk *c = admit_locked(e);
        int act = c ? handoff_locked(e, 0, c) : 0;
        const int last_pass = e->last_pass == 1;
        if (last_pass)
            e->last_pass = 2;
        pthread_mutex_unlock(&e->mu);
        if (last_pass) /* what the last epoch has read is not read again */
            zpi_shard_cache_last_pass(e->cache);
        if (!c)
            return;
        if (act == 1)
            spawn(e, 0, c);
        else if (act == 2)
            drain(e);
    }
}

/* ------------------------------------------------------------ the ordered batch stage */

/* Drainer: sets the stream's final status (with the counts the packer has
 * not attached to a batch yet). */
static void finish(zpi_engine *e, zp_status st, const char *msg)
{
    zp_pipeline_counts pending;
    zpi_packer_take_pending(&e->pk, &pending);
    zpi_outq_finish(e->q, st, msg, &pending);
}

/* Drainer: 1 when records were read, none reached the batch stage, and bad
 * ones were skipped: a run that delivers nothing because its data is bad
 * must not look like an empty success. */
static int all_skipped(const zpi_engine *e)
{
    return e->skipped > 0 && e->seen == e->skipped + e->filtered;
}

static void finish_all_skipped(zpi_engine *e)
{
    char msg[ZPI_ERRMAX];
    char dropped[64] = "";
    if (e->filtered)
        zpi_fmt(dropped, sizeof dropped, ", %llu dropped by map callbacks",
                (unsigned long long)e->filtered);
    zpi_fmt(msg, sizeof msg,
            "every record was skipped as bad: %llu of %llu records skipped (on_bad_record = skip)%s, "
            "none delivered; the first: %s",
            (unsigned long long)e->skipped, (unsigned long long)e->seen, dropped,
            zpi_err_msg(&e->first_skip));
    finish(e, e->first_skip.code != ZP_OK ? e->first_skip.code : ZP_ERR_FORMAT, msg);
}

/* Drainer: account chunk c for the all-skipped check. */
static void note_drained(zpi_engine *e, const zpi_chunk *c)
{
    if (c->pos0 == 0)
        e->full_epoch = 1;
    e->seen += c->n;
    e->filtered += c->filtered;
    if (c->skipped && e->skipped == 0)
        zpi_err_copy(&e->first_skip, &c->first_skip);
    e->skipped += c->skipped;
}

/* Drainer: the batch stage on one completed chunk. Returns ZP_OK to go on;
 * otherwise the stream has its final status (or is stopping). */
static zp_status drain_one(zpi_engine *e, zpi_chunk *c)
{
    if (atomic_load(&e->stop))
        return ZP_ERR_STATE;
    if (c->err.code != ZP_OK) {
        /* deliver the full batch made of earlier chunks' records */
        zpi_pack_flush_full(&e->pk);
        finish(e, c->err.code, c->err.msg);
        atomic_store(&e->stop, 1);
        return c->err.code;
    }
    uint64_t t0 = e->obs ? zpi_now_ns() : 0;
    uint64_t blocked0 = e->obs ? zpi_ctr_get(&e->obs->batch_blocked_ns) : 0;
    note_drained(e, c);
    zpi_activity *a = act_begin(e, ZPI_ACT_BATCH, c, 0);
    zp_status st = zpi_pack_chunk(&e->pk, c);
    if (st == ZP_OK && c->last_in_epoch) {
        st = zpi_pack_flush(&e->pk, 1);
        /* An epoch that began at position 0 covered every record of this
         * rank's share: if all of them were bad, so are the next epochs
         * (an endless run would otherwise spin without delivering). */
        if (st == ZP_OK && e->full_epoch && all_skipped(e)) {
            finish_all_skipped(e);
            atomic_store(&e->stop, 1);
            st = ZP_ERR_FORMAT;
        }
    }
    act_end(a);
    if (e->obs) {
        uint64_t blocked = zpi_ctr_get(&e->obs->batch_blocked_ns) - blocked0;
        zpi_ctr_add(&e->obs->batch_busy_ns, zpi_now_ns() - t0 - blocked);
        zpi_ctr_add(&e->obs->batch_items, zpi_chunk_live(c));
    }
    if (st != ZP_OK && st != ZP_ERR_STATE && !atomic_load(&e->stop)) {
        /* the packer's error (an allocation, a state that does not fit the
         * data), after the full batches before it */
        if (st != ZP_ERR_NOMEM)
            zpi_pack_flush_full(&e->pk);
        finish(e, st,
               e->pk.err.code != ZP_OK ? zpi_err_msg(&e->pk.err) : "cannot allocate a batch");
        atomic_store(&e->stop, 1);
    }
    return st;
}

/* ------------------------------------------------------------ autotune */

/* The tuner's stretch: at least this long and this many chunks drained. */
#define TUNE_SPAN_NS (50 * 1000000ull)
/* Downloads at once under an automatic look-ahead, at least: enough to
 * keep an object store of ~50 ms a request busy (bench/prefetch/run.sh);
 * a store that throttles lowers it (docs/storage.md, "Throttling"). */
#define AUTO_DOWNLOADS 16u
#define TUNE_CHUNKS 4

/* Under mu, at the end of a tuning stretch: the automatic prefetch
 * look-ahead. `stall`: the consumer's wait over the stretch; `load`: the
 * fetch tasks' time in the shard cache (loading a unit, or waiting for a
 * load) over the stretch, summed over tasks. When the consumer waited more
 * than 1% while fetch spent more than a tenth of the stretch getting units,
 * the look-ahead starts (one window of chunks ahead of admission) or
 * doubles, up to its cap; at its cap, its tasks rise by one. Which units are
 * loaded early changes, never which records are delivered. */
static void tune_prefetch_locked(zpi_engine *e, double stall, double load, double span)
{
    if (!e->pf_buf_max && !e->pf_par_max)
        return;
    const int want = stall > 0.01 && load > 0.10;
    const size_t b0 = e->prefetch_buffer, p0 = e->prefetch_parallelism;
    if (want && e->pf_buf_max && e->prefetch_buffer < e->pf_buf_max) {
        size_t b = e->prefetch_buffer ? 2 * e->prefetch_buffer : e->chunk_samples * e->W;
        e->prefetch_buffer = b < e->pf_buf_max ? b : e->pf_buf_max;
    } else if (want && e->pf_par_max && e->prefetch_parallelism < e->pf_par_max) {
        e->prefetch_parallelism++;
    }
    if (e->prefetch_buffer != b0 || e->prefetch_parallelism != p0) {
        e->pf_raises++;
        zpi_fmt(e->pf_why, sizeof e->pf_why,
                "raised look-ahead %zu -> %zu positions, %zu -> %zu tasks after chunk %llu: the "
                "consumer waited %.1f%% of %.0f ms while fetch spent %.0f%% of it getting shard "
                "units",
                b0, e->prefetch_buffer, p0, e->prefetch_parallelism,
                (unsigned long long)e->next_seq, 100.0 * stall, span * 1e-6, 100.0 * load);
    } else if (e->pf_raises == 0 && !e->pf_started_at_cap) {
        zpi_fmt(e->pf_why, sizeof e->pf_why,
                "kept look-ahead %zu positions, %zu tasks: the consumer waited %.1f%% of the last "
                "%.0f ms, fetch spent %.0f%% of it getting shard units%s",
                e->prefetch_buffer, e->prefetch_parallelism, 100.0 * stall, span * 1e-6,
                100.0 * load,
                stall <= 0.01  ? " (the pipeline keeps up)"
                : load <= 0.10 ? " (loads are not what fetch waits for)"
                               : " (at its caps)");
    }
}

/* Under mu, by the drainer after each chunk, when an operator's
 * parallelism is automatic. `waited`: the consumer's wait so far
 * (zpi_outq_waited_ns, read before taking mu). At the end of a stretch: when
 * the consumer waited more than 1% of it, the automatic operator whose
 * chunks waited longest for a task (at least a quarter of a chunk queued
 * on average) gets one task more, up to its cap. Only how many tasks run
 * changes: chunks are still drained in order (the reorder window), so the
 * data never depends on it. Returns the stage for which the caller spawns
 * a task on *spawn_c (a chunk that was queued) after unlocking, or -1. */
static int tune_locked(zpi_engine *e, uint64_t waited, uint64_t now, zpi_chunk **spawn_c)
{
    *spawn_c = NULL;
    if (!e->tuning)
        return -1;
    const uint64_t loads = atomic_load_explicit(&e->sync_load_ns, memory_order_relaxed);
    if (e->tune_t0 == 0 || waited < e->tune_waited0) {
        e->tune_t0 = now;
        e->tune_waited0 = waited;
        e->tune_load0 = loads;
        e->tune_chunks = 0;
        for (int s = 0; s < e->n_stages; s++)
            e->stages[s].tune_wait_ns = 0;
        return -1;
    }
    if (++e->tune_chunks < TUNE_CHUNKS || now - e->tune_t0 < TUNE_SPAN_NS)
        return -1;
    const double span = (double)(now - e->tune_t0);
    const double stall = (double)(waited - e->tune_waited0) / span;
    int best = -1;
    double best_q = 0;
    for (int s = 0; s < e->n_stages; s++) {
        const stage *st = &e->stages[s];
        double q = (double)st->tune_wait_ns / span;
        if (st->op.auto_max && st->op.parallelism < st->op.auto_max && q > best_q) {
            best = s;
            best_q = q;
        }
    }
    int ret = -1;
    if (stall > 0.01 && best >= 0 && best_q >= 0.25) {
        stage *st = &e->stages[best];
        size_t from = st->op.parallelism;
        st->op.parallelism = from + 1;
        st->raises++;
        zpi_fmt(st->why, sizeof st->why,
                "raised %zu -> %zu after chunk %llu: the consumer waited %.1f%% of %.0f ms while "
                "%.2f chunks on average queued for %s (the most of the automatic operators)",
                from, from + 1, (unsigned long long)e->next_seq, 100.0 * stall, span * 1e-6, best_q,
                st->op.name);
        /* the window follows: two chunks more in flight for the new task
         * (chunks not used before stay untouched: their buffers grow on use) */
        for (int k = 0; k < 2 && e->w_follows && e->w_given < e->W; k++)
            zpi_fifo_push(&e->chunk_free, &e->chunks[e->w_given++].node);
        zpi_chunk *c = chunk_of(zpi_fifo_pop(&st->ready));
        if (c) {
            if (e->obs && best > 0)
                e->obs->stage[best - 1].blocked_ns += (double)(now - c->enq_ns);
            st->running++;
            *spawn_c = c;
            ret = best;
        }
    }
    for (int s = 0; s < e->n_stages; s++) {
        stage *st = &e->stages[s];
        if (st->op.auto_max && st->raises == 0)
            zpi_fmt(st->why, sizeof st->why,
                    "kept %zu (cap %zu): the consumer waited %.1f%% of the last %.0f ms, %.2f "
                    "chunks on average queued for %s%s",
                    st->op.parallelism, st->op.auto_max, 100.0 * stall, span * 1e-6,
                    (double)st->tune_wait_ns / span, st->op.name,
                    stall <= 0.01 ? " (the pipeline keeps up: no task added)"
                    : st->op.parallelism >= st->op.auto_max
                        ? " (at its cap)"
                        : " (another operator queued more, or under a quarter of a chunk "
                          "queued: its tasks are not what the consumer waits for)");
        st->tune_wait_ns = 0;
    }
    tune_prefetch_locked(e, stall, (double)(loads - e->tune_load0) / span, span);
    e->tune_t0 = now;
    e->tune_waited0 = waited;
    e->tune_load0 = loads;
    e->tune_chunks = 0;
    return ret;
}

/* Drain completed chunks in sequence. */
static void drain(zpi_engine *e)
{
    pthread_mutex_lock(&e->mu);
    if (e->draining) {
        pthread_mutex_unlock(&e->mu);
        return;
    }
    e->draining = 1;
    for (;;) {
        zpi_chunk *c = e->in_flight ? e->window[e->next_seq % e->W] : NULL;
        if (!c || c->seq != e->next_seq || !c->complete) {
            int finished = e->in_flight == 0 && e->admit_done;
            e->draining = 0;
            pthread_mutex_unlock(&e->mu);
            if (finished && !atomic_load(&e->stop)) {
                if (all_skipped(e))
                    finish_all_skipped(e);
                else
                    finish(e, ZP_END, NULL);
            }
            return;
        }
        pthread_mutex_unlock(&e->mu);

        drain_one(e, c);

        const uint64_t waited = e->tuning ? zpi_outq_waited_ns(e->q) : 0;
        pthread_mutex_lock(&e->mu);
        e->window[c->seq % e->W] = NULL;
        e->next_seq++;
        e->in_flight--;
        zpi_fifo_push(&e->chunk_free, &c->node);
        zpi_chunk *tc = NULL;
        int ts = e->tuning ? tune_locked(e, waited, zpi_now_ns(), &tc) : -1;
        pthread_mutex_unlock(&e->mu);
        if (tc)
            spawn(e, ts, tc);
        admit_more(e);
        pthread_mutex_lock(&e->mu);
    }
}

/* ------------------------------------------------------------ engine thread */

static void *engine_main(void *arg)
{
    zpi_engine *e = arg;
#pragma omp parallel num_threads(e->threads) default(none) shared(e)
    {
#pragma omp single
        {
            admit_more(e);
            drain(e); /* ends at once when there is nothing to deliver */
        }
        /* The implicit barrier runs every remaining task to completion. */
    }
    /* A stop requested by destroy() ends without a final status; otherwise
     * the drainer has already delivered END or the error. Make sure a
     * consumer never waits forever. */
    if (!atomic_load(&e->stop))
        zpi_outq_finish(e->q, ZP_ERR_INTERNAL, "pipeline engine ended without a final status",
                        NULL);
    return NULL;
}

/* The fetcher of a dataset with remote shards: its shard table and this
 * rank's order of shards (Belady eviction) from the worksource. */
static zp_status start_fetcher(zpi_engine *e, const zpi_engine_plan *plan, const zp_dataset *ds,
                               zpi_err *err)
{
    zpi_fetch_shard *tab = NULL;
    size_t n = 0, remote = 0;
    zp_status st = zpi_dataset_fetch_table(ds, &tab, &n, &remote, err);
    if (st != ZP_OK || remote == 0) {
        free(tab);
        return st;
    }
    const zpi_op *f = plan->n_ops > 0 ? &plan->ops[0] : NULL;
    size_t fpar = !f ? 1 : f->auto_max ? f->auto_max : f->parallelism;
    zpi_fetcher_config fc = {
        .storage = zpi_dataset_storage(ds),
        .shards = tab,
        .n_shards = n,
        /* downloads at once: the look-ahead's tasks; when automatic, at
         * least AUTO_DOWNLOADS (a download waits on the network, not on a
         * core: the tasks' cap, the thread count, would leave a store's
         * latency uncovered) */
        .parallelism = (unsigned)(plan->prefetch_parallelism_max
                                      ? (plan->prefetch_parallelism_max > AUTO_DOWNLOADS
                                             ? plan->prefetch_parallelism_max
                                             : AUTO_DOWNLOADS)
                                  : plan->prefetch_parallelism ? plan->prefetch_parallelism
                                                               : 1),
        .demand_slots = (unsigned)(fpar ? fpar : 1),
        .use_peer = 1,
    };
    fc.log = zpi_dataset_log_fn(ds, &fc.log_user);
    if (!zpi_storage_config(fc.storage)->cache_lru &&
        (st = zpi_next_use_create(e->ws, e->end_epoch, &e->order, err)) != ZP_OK) {
        free(tab);
        return zpi_err_prefix(err, "cannot start the pipeline");
    }
    if (e->order) {
        fc.next_use = zpi_next_use_of;
        fc.next_use_user = e->order;
        fc.locate = zpi_next_use_locate;
    }
    st = zpi_fetcher_create(&fc, &e->fetcher, err);
    free(tab);
    if (st != ZP_OK)
        return zpi_err_prefix(err, "cannot start the pipeline");
    /* automatic fetch parallelism: its cap lowered to what the download
     * cache's limit holds (one shard a fetch task) */
    while (f && f->auto_max && fpar > f->parallelism &&
           zpi_fetcher_check_limit(e->fetcher, fpar, err) != ZP_OK)
        fpar--;
    if (f && f->auto_max) {
        zpi_err_clear(err);
        e->stages[0].op.auto_max = fpar;
    }
    if ((st = zpi_fetcher_check_limit(e->fetcher, fpar, err)) != ZP_OK)
        return st;
    zpi_next_use_set_position(e->order, e->adm_epoch, e->adm_pos);
    zpi_fetcher_set_position(e->fetcher, e->adm_epoch, e->adm_pos,
                             zpi_worksource_linear(e->ws, e->adm_epoch, e->adm_pos));
    return ZP_OK;
}

zp_status zpi_engine_start(const zpi_engine_plan *plan, zpi_outq *q, zpi_engine **out,
                           zpi_err *err)
{
    *out = NULL;
    zpi_engine *e = calloc(1, sizeof *e);
    if (!e)
        return zpi_err_set(err, ZP_ERR_NOMEM, "cannot start the pipeline: out of memory");
    e->ws = plan->ws;
    e->threads = plan->threads > 0 ? plan->threads : omp_get_max_threads();
    if (e->threads < 1)
        e->threads = 1;
    e->chunk_samples = plan->chunk_samples;
    e->env = plan->env;
    e->env.text_only = plan->env.tok != NULL;
    for (int i = 0; i < plan->n_ops; i++)
        if (plan->ops[i].kind == ZPI_OP_MAP)
            e->env.text_only = 0;
    e->n_stages = plan->n_ops;
    size_t par = 0;
    for (int i = 0; i < plan->n_ops; i++) {
        e->stages[i].op = plan->ops[i];
        par += plan->ops[i].auto_max ? plan->ops[i].auto_max : plan->ops[i].parallelism;
        if (plan->ops[i].auto_max)
            e->tuning = 1;
    }
    e->prefetch_buffer = plan->prefetch_buffer;
    e->prefetch_parallelism = plan->prefetch_parallelism ? plan->prefetch_parallelism : 1;
    e->pf_buf_max = plan->prefetch_buffer_max;
    e->pf_par_max = plan->prefetch_parallelism_max;
    atomic_init(&e->sync_load_ns, 0);
    if (e->pf_buf_max || e->pf_par_max) {
        e->tuning = 1;
        e->env.sync_load_ns = &e->sync_load_ns;
    }
    e->q = q;
    e->W = plan->in_flight_chunks ? plan->in_flight_chunks : 2 * par + 2;
    atomic_init(&e->stop, 0);
    pthread_mutex_init(&e->mu, NULL);

    zp_worksource_state start;
    zp_worksource_get_state(e->ws, &start);
    e->per_rank = zp_worksource_samples_per_rank(e->ws);
    e->adm_epoch = start.epoch;
    e->adm_pos = start.position;
    e->pf_epoch = e->adm_epoch;
    e->pf_pos = e->adm_pos;
    e->end_epoch = plan->epochs ? start.epoch + plan->epochs : UINT32_MAX;

    const zp_worksource_config *wc = zp_worksource_get_config(e->ws);
    zp_status st = ZP_OK;
    const zp_dataset *ds = zp_worksource_dataset(e->ws);
    if ((st = start_fetcher(e, plan, ds, err)) != ZP_OK)
        goto fail;
    const zpi_shard_cache_config cc = {
        .budget_bytes = plan->shard_cache_bytes,
        .keep_shards = zpi_shard_cache_keep_units(
            zp_worksource_dataset(e->ws), wc->shuffle ? wc->shuffle_block_shards : 1,
            plan->n_ops > 0 ? (plan->ops[0].auto_max ? plan->ops[0].auto_max : plan->ops[0].parallelism)
                            : 1,
            plan->prefetch_buffer > 0 || plan->prefetch_buffer_max > 0),
        .log = plan->env.log,
        .log_user = plan->env.log_user,
        .fetcher = e->fetcher,
    };
    st = zpi_shard_cache_create(zp_worksource_dataset(e->ws), &cc, &e->cache);
    if (st != ZP_OK) {
        zpi_err_set(err, st, "cannot start the pipeline: shard cache of %zu bytes: %s",
                    plan->shard_cache_bytes, zp_status_str(st));
        goto fail;
    }
    e->env.cache = e->cache;
    if (e->pf_buf_max) {
        /* the automatic look-ahead's cap: the positions of one shuffle
         * block of units more than the window in flight covers (the cache
         * keeps the next block when prefetch looks ahead:
         * zpi_shard_cache_keep_units) */
        const size_t units = zpi_shard_cache_num_units(e->cache);
        const uint64_t samples = zp_dataset_num_samples(ds);
        const uint64_t per_unit = units ? samples / units : samples;
        const uint64_t block = wc->shuffle ? wc->shuffle_block_shards : 1;
        const uint64_t cap = per_unit * (block + 1) + (uint64_t)e->chunk_samples * e->W;
        if (cap < e->pf_buf_max)
            e->pf_buf_max = (size_t)cap;
        /* remote shards: the look-ahead's downloads wait in the disk cache,
         * which the node's ranks share: when its limit does not hold the
         * dataset, the cap covers at most the shards a quarter of it holds
         * (at least a chunk), so that they are not evicted before their use */
        int all = 1;
        const uint64_t fit = e->fetcher ? zpi_fetcher_limit_shards(e->fetcher, &all) : 0;
        if (!all) {
            const uint64_t room = fit / 4 * per_unit, lo = e->chunk_samples;
            if (e->pf_buf_max > (room > lo ? room : lo))
                e->pf_buf_max = (size_t)(room > lo ? room : lo);
        }
        /* remote shards: the look-ahead starts at its cap. What it
         * prefetches is downloads into the disk cache (bounded by its
         * limit), not decoded memory, and rising from 0 one tuning period
         * at a time would leave the first seconds to one demand download
         * at a time (bench/prefetch/run.sh) */
        if (e->fetcher) {
            e->prefetch_buffer = e->pf_buf_max;
            e->pf_started_at_cap = 1;
            zpi_fmt(e->pf_why, sizeof e->pf_why,
                    "started at its cap of %zu positions: the dataset has remote shards, whose "
                    "look-ahead downloads into the disk cache, not memory",
                    e->pf_buf_max);
        }
    }
    if (plan->observe && (st = zpi_obs_create(e->threads, &e->obs)) != ZP_OK) {
        zpi_err_set(err, st, "cannot start the pipeline: observability: %s", zp_status_str(st));
        goto fail;
    }
    e->workers = calloc((size_t)e->threads, sizeof *e->workers);
    for (int i = 0; e->workers && i < e->threads; i++)
        act_end(&e->workers[i].act);
    e->chunks = calloc(e->W, sizeof *e->chunks);
    e->window = calloc(e->W, sizeof *e->window);
    st = e->workers && e->chunks && e->window ? ZP_OK : ZP_ERR_NOMEM;
    /* the window: every chunk, or (following the tuned parallelism) as
     * many as the operators' parallelism now takes */
    size_t par_now = 0;
    for (int i = 0; i < e->n_stages; i++)
        par_now += e->stages[i].op.parallelism;
    e->w_follows = plan->in_flight_follows && e->tuning;
    e->w_given = e->w_follows && 2 * par_now + 2 < e->W ? 2 * par_now + 2 : e->W;
    for (size_t i = 0; st == ZP_OK && i < e->W; i++) {
        st = zpi_chunk_init(&e->chunks[i], e->chunk_samples);
        if (i < e->w_given)
            zpi_fifo_push(&e->chunk_free, &e->chunks[i].node);
    }
    if (st != ZP_OK) {
        zpi_err_set(err, st, "cannot start the pipeline: out of memory for %zu chunks of %zu samples",
                    e->W, e->chunk_samples);
        goto fail;
    }
    zpi_packer_init(&e->pk, &plan->pack, q, e->obs ? &e->obs->batch_blocked_ns : NULL);
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        st = zpi_err_set(err, ZP_ERR_NOMEM, "cannot start the pipeline: cannot create its thread");
        goto fail;
    }
    e->thread_started = 1;
    *out = e;
    return ZP_OK;
fail:
    zpi_engine_destroy(e);
    return st;
}

void zpi_engine_destroy(zpi_engine *e)
{
    if (!e)
        return;
    if (e->thread_started) {
        atomic_store(&e->stop, 1);
        zpi_outq_close(e->q);
        zpi_fetcher_cancel(e->fetcher); /* tasks waiting on downloads end */
        pthread_join(e->thread, NULL);
        /* The team's threads last touched the shared state under these
         * locks; take them once so that freeing it is ordered after. */
        pthread_mutex_lock(&e->mu);
        pthread_mutex_unlock(&e->mu);
        (void)zpi_outq_finished(e->q);
    }
    if (e->workers) {
        for (int i = 0; i < e->threads; i++)
            worker_fini(&e->workers[i]);
        free(e->workers);
    }
    if (e->chunks) {
        for (size_t i = 0; i < e->W; i++)
            zpi_chunk_fini(&e->chunks[i]);
        free(e->chunks);
    }
    free(e->window);
    zpi_packer_fini(&e->pk);
    zpi_shard_cache_destroy(e->cache);
    zpi_fetcher_destroy(e->fetcher);
    zpi_next_use_destroy(e->order);
    zpi_obs_destroy(e->obs);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

void zpi_engine_lock_ws(zpi_engine *e, int take)
{
    if (!e)
        return;
    if (take)
        pthread_mutex_lock(&e->mu);
    else
        pthread_mutex_unlock(&e->mu);
}

zpi_obs *zpi_engine_obs(zpi_engine *e) { return e ? e->obs : NULL; }

int zpi_engine_threads(const zpi_engine *e) { return e ? e->threads : 0; }

int zpi_engine_stages(zpi_engine *e, uint64_t now, zpi_stage_view *out, int max)
{
    pthread_mutex_lock(&e->mu);
    for (int s = 0; s < e->n_stages && s < max; s++) {
        obs_tick_at(e, s, now);
        const stage *st = &e->stages[s];
        zpi_fmt(out[s].name, sizeof out[s].name, "%s", st->op.name);
        out[s].parallelism = st->op.parallelism;
        out[s].queued = st->ready.n;
        if (e->obs && s < ZPI_OBS_STAGES)
            out[s].obs = e->obs->stage[s];
        else
            memset(&out[s].obs, 0, sizeof out[s].obs);
    }
    int n = e->n_stages;
    pthread_mutex_unlock(&e->mu);
    return n;
}

void zpi_engine_prefetch_tuning(zpi_engine *e, zpi_prefetch_tuning *out)
{
    pthread_mutex_lock(&e->mu);
    out->buffer = e->prefetch_buffer;
    out->parallelism = e->prefetch_buffer ? e->prefetch_parallelism : 0;
    out->buffer_max = e->pf_buf_max;
    out->parallelism_max = e->pf_par_max;
    zpi_fmt(out->why, sizeof out->why, "%s", e->pf_why);
    pthread_mutex_unlock(&e->mu);
}

int zpi_engine_tuning(zpi_engine *e, zpi_op_tuning *out, int max)
{
    pthread_mutex_lock(&e->mu);
    for (int s = 0; s < e->n_stages && s < max; s++) {
        const stage *st = &e->stages[s];
        zpi_fmt(out[s].name, sizeof out[s].name, "%s", st->op.name);
        out[s].parallelism = st->op.parallelism;
        out[s].auto_max = st->op.auto_max;
        zpi_fmt(out[s].why, sizeof out[s].why, "%s", st->why);
    }
    int n = e->n_stages;
    pthread_mutex_unlock(&e->mu);
    return n;
}

void zpi_engine_cache_stats(zpi_engine *e, zpi_shard_cache_stats *out)
{
    zpi_shard_cache_stats_get(e->cache, out);
}

int zpi_engine_fetcher_stats(zpi_engine *e, zpi_fetcher_stats *out)
{
    if (!e || !e->fetcher)
        return 0;
    zpi_fetcher_stats_get(e->fetcher, out);
    return 1;
}

/* ------------------------------------------------------------ the stall watchdog */

static int task_cmp(const void *x, const void *y)
{
    const zp_task_activity *a = x, *b = y;
    return a->seconds < b->seconds ? 1 : a->seconds > b->seconds ? -1 : (a->thread > b->thread) - (a->thread < b->thread);
}

void zpi_engine_activity(zpi_engine *e, uint64_t now, zp_watchdog_report *r)
{
    r->threads = (uint32_t)e->threads;
    const zp_dataset *ds = zp_worksource_dataset(e->ws);
    /* every busy thread, the longest-running first; at most
     * ZP_WATCHDOG_MAX_TASKS kept */
    zp_task_activity *all = calloc((size_t)e->threads, sizeof *all);
    uint32_t n = 0;
    for (int t = 0; all && t < e->threads; t++) {
        zpi_activity *a = &e->workers[t].act;
        int op = atomic_load_explicit(&a->op, memory_order_relaxed);
        int state = atomic_load_explicit(&a->state, memory_order_relaxed);
        if (op == ZPI_ACT_IDLE || state == ZP_TASK_IDLE)
            continue;
        zp_task_activity *x = &all[n++];
        x->thread = (uint32_t)t;
        const char *name = op == ZPI_ACT_PREFETCH ? "prefetch"
                           : op == ZPI_ACT_BATCH  ? "batch"
                           : (op >= 0 && op < e->n_stages) ? e->stages[op].op.name
                                                            : "?";
        zpi_fmt(x->op, sizeof x->op, "%s", name);
        x->state = (zp_task_state)state;
        uint64_t s1 = atomic_load_explicit(&a->shard1, memory_order_relaxed);
        uint64_t r1 = atomic_load_explicit(&a->record1, memory_order_relaxed);
        x->shard = s1 ? (int64_t)(s1 - 1) : -1;
        x->shard_name = s1 ? zp_dataset_shard_name(ds, (size_t)(s1 - 1)) : NULL;
        x->remote = s1 ? zpi_fetcher_is_remote(e->fetcher, (size_t)(s1 - 1)) : 0;
        x->record = r1 ? (int64_t)(r1 - 1) : -1;
        x->epoch = (uint32_t)atomic_load_explicit(&a->epoch, memory_order_relaxed);
        x->position = atomic_load_explicit(&a->position, memory_order_relaxed);
        uint64_t since = atomic_load_explicit(&a->since_ns, memory_order_relaxed);
        uint64_t chunk = atomic_load_explicit(&a->chunk_ns, memory_order_relaxed);
        x->seconds = now > since ? (double)(now - since) / 1e9 : 0.0;
        x->chunk_seconds = now > chunk ? (double)(now - chunk) / 1e9 : 0.0;
    }
    if (n)
        qsort(all, n, sizeof *all, task_cmp);
    r->tasks_busy = n;
    r->n_tasks = n < ZP_WATCHDOG_MAX_TASKS ? n : ZP_WATCHDOG_MAX_TASKS;
    if (r->n_tasks)
        memcpy(r->tasks, all, r->n_tasks * sizeof *all);
    free(all);

    pthread_mutex_lock(&e->mu);
    r->n_ops = 0;
    for (int s = 0; s < e->n_stages && s < ZP_OBS_MAX_OPS; s++) {
        zp_op_queue *q = &r->ops[r->n_ops++];
        zpi_fmt(q->name, sizeof q->name, "%s", e->stages[s].op.name);
        q->queued = (uint32_t)e->stages[s].ready.n;
        q->running = (uint32_t)e->stages[s].running;
        q->parallelism = (uint32_t)e->stages[s].op.parallelism;
    }
    r->prefetch_running = (uint32_t)e->pf_running;
    r->prefetch_queued = (uint32_t)e->pf_count;
    r->chunks_in_flight = (uint32_t)e->in_flight;
    pthread_mutex_unlock(&e->mu);
    r->batches_ready = (uint32_t)zpi_outq_ready(e->q);
}
