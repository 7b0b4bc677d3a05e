/*
 * engine.c - runs a pipeline's operators as OpenMP tasks.
 *
 * See pipeline_internal.h for the model. In short: chunks of consecutive
 * samples flow fetch -> map* -> tokenize; each stage runs at most
 * `parallelism` tasks at once; the chunk next in order is drained by the
 * thread that completes it into the ordered batch stage (packer.c).
 */
#include <errno.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dataset_internal.h"
#include "pipeline_internal.h"
#include "util.h"

/* ------------------------------------------------------------ chunk memory */

zp_status zpi_arena_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n,
                           uint64_t *off)
{
    size_t need = *len + n + ZPI_JSON_PADDING;
    if (need > *cap) {
        size_t nc = *cap ? *cap : 4096;
        while (nc < need)
            nc *= 2;
        char *nb = realloc(*buf, nc);
        if (!nb)
            return ZP_ERR_NOMEM;
        *buf = nb;
        *cap = nc;
    }
    if (off)
        *off = *len;
    if (n)
        memcpy(*buf + *len, s, n);
    *len += n;
    memset(*buf + *len, 0, ZPI_JSON_PADDING);
    return ZP_OK;
}

static void chunk_reset(zpi_chunk *c)
{
    c->n = 0;
    c->json_len = c->text_len = c->tok_len = 0;
    c->stage = 0;
    c->complete = 0;
    c->err = ZP_OK;
    c->errmsg[0] = '\0';
    c->skipped = c->filtered = 0;
    c->next = NULL;
    c->last_in_epoch = 0;
}

static void chunk_fail(zpi_chunk *c, zp_status st, const char *msg)
{
    if (c->err == ZP_OK) {
        c->err = st;
        zpi_fmt(c->errmsg, sizeof c->errmsg, "%s", msg);
    }
}

static int thread_index(const zp_pipeline *p)
{
    int t = omp_get_thread_num();
    return (t < 0 || t >= p->threads) ? 0 : t;
}

static zpi_worker *worker_self(zp_pipeline *p) { return &p->workers[thread_index(p)]; }

/* The calling thread's observability slot, or NULL when off. */
static zpi_obs_thread *obs_self(zp_pipeline *p)
{
    return p->obs ? &p->obs->th[thread_index(p)] : NULL;
}

/* Under mu: account stage s's state up to now before it changes. */
static void obs_tick(zp_pipeline *p, int s)
{
    if (p->obs && s < ZPI_OBS_STAGES)
        zpi_obs_stage_tick(p, s, zpi_now_ns());
}

/* ------------------------------------------------------------ stage bodies */

/* A small set of pinned shards held by one fetch task. */
typedef struct pinset {
    uint32_t idx[16];
    const zpi_shard *sh[16];
    int n;
    uint64_t cache_end_ns; /* observability: when the last cache call ended */
} pinset;

static void pins_release(zp_pipeline *p, pinset *ps)
{
    for (int i = 0; i < ps->n; i++)
        zpi_shard_cache_put(p->cache, ps->idx[i]);
    ps->n = 0;
}

static zp_status pins_get(zp_pipeline *p, pinset *ps, uint32_t shard, const zpi_shard **out,
                          char *err, size_t errcap)
{
    for (int i = 0; i < ps->n; i++)
        if (ps->idx[i] == shard) {
            *out = ps->sh[i];
            return ZP_OK;
        }
    if (ps->n == 16)
        pins_release(p, ps);
    int loaded = 0;
    zpi_obs_thread *ot = obs_self(p);
    uint64_t t0 = ot ? zpi_now_ns() : 0;
    zp_status st = zpi_shard_cache_get(p->cache, shard, out, &loaded, err, errcap);
    if (ot) {
        ps->cache_end_ns = zpi_now_ns();
        uint64_t dt = ps->cache_end_ns - t0;
        if (st == ZP_OK && loaded) {
            zpi_ctr_add(&ot->shards_opened, 1);
            zpi_ctr_add(&ot->open_ns, dt);
            zpi_ctr_add(&ot->read_ns, (uint64_t)((*out)->read_seconds * 1e9));
            zpi_ctr_add(&ot->decompress_ns, (uint64_t)((*out)->decompress_seconds * 1e9));
            zpi_ctr_add(&ot->bytes_compressed, (*out)->file_bytes);
            zpi_ahist_record(&ot->open_hist, dt);
            if (dt > zpi_ctr_get(&ot->slowest_ns)) {
                atomic_store_explicit(&ot->slowest_ns, dt, memory_order_relaxed);
                atomic_store_explicit(&ot->slowest_shard_plus1, (uint64_t)shard + 1,
                                      memory_order_relaxed);
            }
        } else if (st == ZP_OK) {
            zpi_ctr_add(&ot->wait_ns, dt);
        }
    }
    if (st != ZP_OK)
        return st;
    ps->idx[ps->n] = shard;
    ps->sh[ps->n] = *out;
    ps->n++;
    return ZP_OK;
}

static void record_bad(zp_pipeline *p, zpi_chunk *c, size_t i, zp_status st, const char *msg)
{
    if (p->cfg.on_bad_record == ZP_BAD_RECORD_SKIP && st != ZP_ERR_NOMEM) {
        c->recs[i].flags |= ZPI_REC_SKIP;
        c->skipped++;
        zpi_pipeline_log(p, ZP_LOG_WARN, "skipped bad record: %s", msg);
    } else {
        chunk_fail(c, st, msg);
    }
}

static void stage_fetch(zp_pipeline *p, zpi_worker *w, zpi_chunk *c)
{
    char err[ZPI_ERRMAX];
    if (!w->json && zpi_json_create(&w->json) != ZP_OK) {
        chunk_fail(c, ZP_ERR_NOMEM, "cannot create a JSON parser");
        return;
    }
    if (p->cfg.fetch_delay_us) {
        struct timespec ts = {(time_t)(p->cfg.fetch_delay_us / 1000000u),
                              (long)(p->cfg.fetch_delay_us % 1000000u) * 1000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    pinset ps = {.n = 0, .cache_end_ns = 0};
    zpi_obs_thread *ot = obs_self(p);
    uint64_t t_rec = ot ? zpi_now_ns() : 0, bytes = 0;
    for (size_t i = 0; i < c->n && c->err == ZP_OK; i++) {
        const zp_sample *s = &c->samples[i];
        const zpi_shard *sh;
        zp_status st = pins_get(p, &ps, s->shard, &sh, err, sizeof err);
        if (st != ZP_OK) {
            chunk_fail(c, st, err);
            break;
        }
        if (ps.cache_end_ns) { /* a record's time excludes opening its shard */
            t_rec = ps.cache_end_ns;
            ps.cache_end_ns = 0;
        }
        zpi_rec *r = &c->recs[i];
        memset(r, 0, sizeof *r);
        if (s->record >= sh->n_records) {
            char m[ZPI_ERRMAX];
            zpi_fmt(m, sizeof m, "shard '%s': record %llu out of range (%llu records; stale manifest?)",
                    zp_dataset_shard_name(p->ds, s->shard), (unsigned long long)s->record,
                    (unsigned long long)sh->n_records);
            chunk_fail(c, ZP_ERR_FORMAT, m);
            break;
        }
        uint64_t a = sh->offsets[s->record], b = sh->offsets[s->record + 1];
        size_t len = (size_t)(b - a - 1);
        /* With tokenize and no map, later stages read only the text: parse
         * the record where it lies in the pinned shard (its buffer has
         * ZPI_JSON_PADDING bytes past the end) and copy the text alone; the
         * JSON is copied only when the text is missing, for tokenize's
         * message. Otherwise the chunk keeps a copy of the JSON. */
        const int text_only = p->tok && p->n_maps == 0;
        if (!text_only) {
            st = zpi_arena_append(&c->json, &c->json_len, &c->json_cap, sh->data + a, len,
                                  &r->json_off);
            if (st != ZP_OK) {
                chunk_fail(c, st, "out of memory copying a record");
                break;
            }
            r->json_len = len;
        }
        char jerr[256];
        st = zpi_json_parse(w->json, text_only ? sh->data + a : c->json + r->json_off, len, jerr,
                            sizeof jerr);
        if (st != ZP_OK) {
            char m[ZPI_ERRMAX];
            zpi_fmt(m, sizeof m, "shard '%s' line %llu (record %llu): %s",
                    zp_dataset_shard_name(p->ds, s->shard), (unsigned long long)s->record + 1,
                    (unsigned long long)s->record, jerr);
            record_bad(p, c, i, st, m);
        } else if (p->tok) {
            /* keep the tokenize field now, so tokenize needs no second parse */
            const char *txt;
            size_t tn;
            if (zpi_json_get_string(w->json, p->tok_field, &txt, &tn) == ZP_OK) {
                if (zpi_arena_append(&c->text, &c->text_len, &c->text_cap, txt, tn, &r->text_off) !=
                    ZP_OK) {
                    chunk_fail(c, ZP_ERR_NOMEM, "out of memory copying a text field");
                    break;
                }
                r->text_len = tn;
                r->flags |= ZPI_REC_TEXT;
            } else if (text_only) {
                if (zpi_arena_append(&c->json, &c->json_len, &c->json_cap, sh->data + a, len,
                                     &r->json_off) != ZP_OK) {
                    chunk_fail(c, ZP_ERR_NOMEM, "out of memory copying a record");
                    break;
                }
                r->json_len = len;
            }
        }
        bytes += len;
        if (ot) {
            uint64_t t = zpi_now_ns();
            zpi_ahist_record(&ot->record_hist, t - t_rec);
            t_rec = t;
        }
    }
    pins_release(p, &ps);
    if (ot) {
        zpi_ctr_add(&ot->records, c->n);
        zpi_ctr_add(&ot->bytes_uncompressed, bytes);
    }
}

static void stage_map(zp_pipeline *p, zpi_stage *st, zpi_worker *w, zpi_chunk *c)
{
    char err[ZPI_ERRMAX];
    if (!w->json && zpi_json_create(&w->json) != ZP_OK) {
        chunk_fail(c, ZP_ERR_NOMEM, "cannot create a JSON parser");
        return;
    }
    for (size_t i = 0; i < c->n && c->err == ZP_OK; i++) {
        if (c->recs[i].flags & (ZPI_REC_SKIP | ZPI_REC_DROP))
            continue;
        zp_status s = zpi_record_map(p, st, w, c, i, err, sizeof err);
        if (s != ZP_OK)
            record_bad(p, c, i, s, err);
    }
}

static void stage_tokenize(zp_pipeline *p, zpi_worker *w, zpi_chunk *c)
{
    char err[ZPI_ERRMAX];
    if (!w->json && zpi_json_create(&w->json) != ZP_OK) {
        chunk_fail(c, ZP_ERR_NOMEM, "cannot create a JSON parser");
        return;
    }
    if (!w->enc && zp_encoder_create(p->tok, &w->enc) != ZP_OK) {
        chunk_fail(c, ZP_ERR_NOMEM, "cannot create a tokenizer encoder");
        return;
    }
    for (size_t i = 0; i < c->n && c->err == ZP_OK; i++) {
        zpi_rec *r = &c->recs[i];
        if (r->flags & (ZPI_REC_SKIP | ZPI_REC_DROP))
            continue;
        const char *s;
        size_t n;
        zp_status st = zpi_record_tokenize_text(p, w, c, i, &s, &n, err, sizeof err);
        if (st != ZP_OK) {
            record_bad(p, c, i, st, err);
            continue;
        }
        if (c->tok_len + n > c->tok_cap) {
            size_t nc = c->tok_cap ? c->tok_cap : 4096;
            while (nc < c->tok_len + n)
                nc *= 2;
            int32_t *nt = realloc(c->tok, nc * sizeof *nt);
            if (!nt) {
                chunk_fail(c, ZP_ERR_NOMEM, "out of memory for tokens");
                break;
            }
            c->tok = nt;
            c->tok_cap = nc;
        }
        size_t got = 0;
        st = zp_encode(w->enc, s, n, c->tok + c->tok_len, &got);
        if (st != ZP_OK) {
            chunk_fail(c, st, "tokenizer out of memory");
            break;
        }
        r->tok_off = c->tok_len;
        r->tok_len = got;
        c->tok_len += got;
    }
}

static size_t live_records(const zpi_chunk *c)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n; i++)
        n += !(c->recs[i].flags & (ZPI_REC_SKIP | ZPI_REC_DROP));
    return n;
}

static void run_stage(zp_pipeline *p, int s, zpi_chunk *c)
{
    zpi_stage *st = &p->stages[s];
    zpi_worker *w = worker_self(p);
    zpi_obs_thread *ot = obs_self(p);
    uint64_t t0 = 0;
    if (ot) {
        zpi_ctr_add(&ot->items_in[s], st->kind == ZPI_STAGE_FETCH ? c->n : live_records(c));
        t0 = zpi_now_ns();
    }
    switch (st->kind) {
    case ZPI_STAGE_FETCH: stage_fetch(p, w, c); break;
    case ZPI_STAGE_MAP: stage_map(p, st, w, c); break;
    case ZPI_STAGE_TOKENIZE: stage_tokenize(p, w, c); break;
    }
    if (ot) {
        zpi_ctr_add(&ot->busy_ns[s], zpi_now_ns() - t0);
        zpi_ctr_add(&ot->items_out[s], c->err == ZP_OK ? live_records(c) : 0);
    }
}

/* ------------------------------------------------------------ scheduling */

static void stage_task(zp_pipeline *p, int s, zpi_chunk *c);
static void drain(zp_pipeline *p);

static void spawn(zp_pipeline *p, int s, zpi_chunk *c)
{
#pragma omp task firstprivate(p, s, c) default(none)
    stage_task(p, s, c);
}

static void fifo_push(zp_pipeline *p, zpi_stage *st, zpi_chunk *c)
{
    c->next = NULL;
    if (p->obs)
        c->enq_ns = zpi_now_ns();
    if (st->tail)
        st->tail->next = c;
    else
        st->head = c;
    st->tail = c;
    st->queued++;
}

static zpi_chunk *fifo_pop(zpi_stage *st)
{
    zpi_chunk *c = st->head;
    if (c) {
        st->head = c->next;
        if (!st->head)
            st->tail = NULL;
        c->next = NULL;
        st->queued--;
    }
    return c;
}

/* Under mu: move c to stage s (or to the reorder window past the last
 * stage). Returns 1 when the caller must spawn a task for (s, c) after
 * unlocking, 2 when the caller should try to drain, 0 otherwise. */
static int handoff_locked(zp_pipeline *p, int s, zpi_chunk *c)
{
    if (c->err != ZP_OK || s >= p->n_stages) {
        c->complete = 1;
        return (c->seq == p->next_seq && !p->draining) ? 2 : 0;
    }
    c->stage = s;
    zpi_stage *st = &p->stages[s];
    obs_tick(p, s);
    if (st->running < st->parallelism) {
        st->running++;
        return 1;
    }
    fifo_push(p, st, c);
    if (p->obs && st->queued > p->obs->stage[s].queue_max)
        p->obs->stage[s].queue_max = (uint32_t)st->queued;
    return 0;
}

static void stage_task(zp_pipeline *p, int s, zpi_chunk *c)
{
    zpi_stage *st = &p->stages[s];
    /* The chunk was handed over under mu: acquire it here, so that the
     * hand-over is ordered by our own lock and not only by the OpenMP
     * runtime's task queue (which sanitizers cannot see into). */
    pthread_mutex_lock(&p->mu);
    pthread_mutex_unlock(&p->mu);
    while (c) {
        if (!atomic_load(&p->stop))
            run_stage(p, s, c);
        pthread_mutex_lock(&p->mu);
        int act = handoff_locked(p, s + 1, c);
        obs_tick(p, s);
        zpi_chunk *nextc = atomic_load(&p->stop) ? NULL : fifo_pop(st);
        if (!nextc)
            st->running--;
        else if (p->obs && s > 0)
            p->obs->stage[s - 1].blocked_ns += (double)(zpi_now_ns() - nextc->enq_ns);
        pthread_mutex_unlock(&p->mu);
        if (act == 1)
            spawn(p, s + 1, c);
        else if (act == 2)
            drain(p);
        c = nextc;
    }
}

/* Under mu: fill a free chunk with the next samples of the stream, or
 * return NULL when the stream is done. */
static zpi_chunk *admit_locked(zp_pipeline *p)
{
    if (p->admit_done || atomic_load(&p->stop) || !p->chunk_free)
        return NULL;
    if (p->adm_pos >= p->per_rank) {
        p->adm_epoch++;
        p->adm_pos = 0;
    }
    if (p->per_rank == 0 || p->adm_epoch >= p->end_epoch) {
        p->admit_done = 1;
        return NULL;
    }
    zpi_chunk *c = p->chunk_free;
    p->chunk_free = c->next;
    chunk_reset(c);
    c->seq = p->admit_seq++;
    c->epoch = p->adm_epoch;
    c->pos0 = p->adm_pos;
    size_t n = p->cfg.chunk_samples;
    if (p->per_rank - p->adm_pos < n)
        n = (size_t)(p->per_rank - p->adm_pos);
    for (size_t i = 0; i < n; i++) {
        zp_status st = zp_worksource_sample(p->ws, c->epoch, c->pos0 + i, &c->samples[i]);
        if (st != ZP_OK) {
            chunk_fail(c, st, "worksource failed to plan a sample");
            break;
        }
    }
    c->n = n;
    p->adm_pos += n;
    c->last_in_epoch = p->adm_pos >= p->per_rank;
    p->window[c->seq % p->W] = c;
    p->in_flight++;
    return c;
}

/* ------------------------------------------------------------ prefetch */

static void prefetch_task(zp_pipeline *p, uint32_t shard);

static void spawn_prefetch(zp_pipeline *p, uint32_t shard)
{
#pragma omp task firstprivate(p, shard) default(none)
    prefetch_task(p, shard);
}

/* Under mu: pop a queued shard to prefetch, or return 0. */
static int pf_pop_locked(zp_pipeline *p, uint32_t *shard)
{
    if (!p->pf_count || atomic_load(&p->stop))
        return 0;
    *shard = p->pf_queue[p->pf_head];
    p->pf_head = (p->pf_head + 1) % 64;
    p->pf_count--;
    return 1;
}

static void prefetch_task(zp_pipeline *p, uint32_t shard)
{
    char err[ZPI_ERRMAX];
    for (;;) {
        const zpi_shard *sh;
        int loaded = 0;
        /* A failed load is not cached: fetch meets the same error and
         * reports it in stream order. */
        zpi_obs_thread *ot = obs_self(p);
        uint64_t t0 = ot ? zpi_now_ns() : 0;
        if (zpi_shard_cache_get(p->cache, shard, &sh, &loaded, err, sizeof err) == ZP_OK) {
            if (ot && loaded) {
                zpi_ctr_add(&ot->pf_downloads, 1);
                zpi_ctr_add(&ot->pf_bytes, sh->file_bytes);
                zpi_ahist_record(&ot->pf_hist, zpi_now_ns() - t0);
            }
            zpi_shard_cache_put(p->cache, shard);
        }
        pthread_mutex_lock(&p->mu);
        int more = pf_pop_locked(p, &shard);
        if (!more)
            p->pf_running--;
        pthread_mutex_unlock(&p->mu);
        if (!more)
            return;
    }
}

/* Under mu: queue the shards of the positions up to `prefetch_buffer` ahead
 * of admission. Returns how many prefetch tasks to start (their shards are
 * put into out[]). */
static size_t pf_plan_locked(zp_pipeline *p, uint32_t *out, size_t max_out)
{
    if (!p->prefetch_buffer || atomic_load(&p->stop) || p->per_rank == 0)
        return 0;
    /* never behind admission: those samples are fetched already */
    if (p->pf_epoch < p->adm_epoch || (p->pf_epoch == p->adm_epoch && p->pf_pos < p->adm_pos)) {
        p->pf_epoch = p->adm_epoch;
        p->pf_pos = p->adm_pos;
    }
    uint64_t ahead = 0;
    if (p->pf_epoch == p->adm_epoch)
        ahead = p->pf_pos - p->adm_pos;
    else
        ahead = (p->per_rank - p->adm_pos) + p->pf_pos; /* next epoch */
    while (ahead < p->prefetch_buffer && p->pf_count < 64) {
        if (p->pf_pos >= p->per_rank) {
            p->pf_epoch++;
            p->pf_pos = 0;
        }
        if (p->pf_epoch >= p->end_epoch)
            break;
        zp_sample s;
        if (zp_worksource_sample(p->ws, p->pf_epoch, p->pf_pos, &s) != ZP_OK)
            break;
        p->pf_pos++;
        ahead++;
        int seen = 0;
        for (unsigned i = 0; i < p->pf_recent_n && i < 16; i++)
            if (p->pf_recent[i] == s.shard)
                seen = 1;
        if (seen)
            continue;
        p->pf_recent[p->pf_recent_n++ % 16] = s.shard;
        p->pf_queue[(p->pf_head + p->pf_count) % 64] = s.shard;
        p->pf_count++;
    }
    size_t n = 0;
    while (n < max_out && p->pf_running < p->prefetch_parallelism && pf_pop_locked(p, &out[n])) {
        p->pf_running++;
        n++;
    }
    return n;
}

static void prefetch_more(zp_pipeline *p)
{
    uint32_t shards[64];
    pthread_mutex_lock(&p->mu);
    size_t n = pf_plan_locked(p, shards, 64);
    pthread_mutex_unlock(&p->mu);
    for (size_t i = 0; i < n; i++)
        spawn_prefetch(p, shards[i]);
}

/* Admit as many chunks as the window allows and start their fetch. */
static void admit_more(zp_pipeline *p)
{
    prefetch_more(p);
    for (;;) {
        pthread_mutex_lock(&p->mu);
        zpi_chunk *c = admit_locked(p);
        int act = c ? handoff_locked(p, 0, c) : 0;
        pthread_mutex_unlock(&p->mu);
        if (!c)
            return;
        if (act == 1)
            spawn(p, 0, c);
        else if (act == 2)
            drain(p);
    }
}

/* The ordered batch stage: drain completed chunks in sequence. */
static void drain(zp_pipeline *p)
{
    pthread_mutex_lock(&p->mu);
    if (p->draining) {
        pthread_mutex_unlock(&p->mu);
        return;
    }
    p->draining = 1;
    for (;;) {
        zpi_chunk *c = p->in_flight ? p->window[p->next_seq % p->W] : NULL;
        if (!c || c->seq != p->next_seq || !c->complete) {
            int finished = p->in_flight == 0 && p->admit_done;
            p->draining = 0;
            pthread_mutex_unlock(&p->mu);
            if (finished && !atomic_load(&p->stop)) {
                zpi_out_finish(p, ZP_END, NULL);
            }
            return;
        }
        pthread_mutex_unlock(&p->mu);

        zp_status st = ZP_OK;
        if (atomic_load(&p->stop)) {
            st = ZP_ERR_STATE;
        } else if (c->err != ZP_OK) {
            /* deliver the full batch made of earlier chunks' records */
            zpi_pack_flush_full(p);
            zpi_out_finish(p, c->err, c->errmsg);
            atomic_store(&p->stop, 1);
            st = c->err;
        } else {
            uint64_t t0 = p->obs ? zpi_now_ns() : 0;
            uint64_t blocked0 = p->obs ? zpi_ctr_get(&p->obs->batch_blocked_ns) : 0;
            st = zpi_pack_chunk(p, c);
            if (st == ZP_OK && c->last_in_epoch)
                st = zpi_pack_flush(p, 1);
            if (p->obs) {
                uint64_t blocked = zpi_ctr_get(&p->obs->batch_blocked_ns) - blocked0;
                zpi_ctr_add(&p->obs->batch_busy_ns, zpi_now_ns() - t0 - blocked);
                zpi_ctr_add(&p->obs->batch_items, live_records(c));
            }
            if (st != ZP_OK && st != ZP_ERR_STATE) {
                zpi_out_finish(p, st, "cannot allocate a batch");
                atomic_store(&p->stop, 1);
            }
        }

        pthread_mutex_lock(&p->mu);
        p->window[c->seq % p->W] = NULL;
        p->next_seq++;
        p->in_flight--;
        c->next = p->chunk_free;
        p->chunk_free = c;
        pthread_mutex_unlock(&p->mu);
        admit_more(p);
        pthread_mutex_lock(&p->mu);
    }
}

/* ------------------------------------------------------------ engine thread */

static void *engine_main(void *arg)
{
    zp_pipeline *p = arg;
#pragma omp parallel num_threads(p->threads) default(none) shared(p)
    {
#pragma omp single
        {
            admit_more(p);
            drain(p); /* ends at once when there is nothing to deliver */
        }
        /* The implicit barrier runs every remaining task to completion. */
    }
    /* A stop requested by destroy() ends without a final status; otherwise
     * the drainer has already delivered END or the error. Make sure a
     * consumer never waits forever. */
    if (!atomic_load(&p->stop))
        zpi_out_finish(p, ZP_ERR_INTERNAL, "pipeline engine ended without a final status");
    return NULL;
}

zp_status zpi_engine_start(zp_pipeline *p)
{
    zp_status st;
    p->threads = p->cfg.threads > 0 ? p->cfg.threads : omp_get_max_threads();
    if (p->threads < 1)
        p->threads = 1;
    size_t par = 0;
    for (int i = 0; i < p->n_stages; i++)
        par += p->stages[i].parallelism;
    p->W = p->cfg.in_flight_chunks ? p->cfg.in_flight_chunks : 2 * par + 2;

    zp_worksource_get_state(p->ws, &p->start_state);
    p->resume = p->start_state;
    p->per_rank = zp_worksource_samples_per_rank(p->ws);
    p->adm_epoch = p->start_state.epoch;
    p->adm_pos = p->start_state.position;
    p->pf_epoch = p->adm_epoch;
    p->pf_pos = p->adm_pos;
    p->end_epoch = p->cfg.epochs ? p->start_state.epoch + p->cfg.epochs : UINT32_MAX;

    const zp_worksource_config *wc = zp_worksource_get_config(p->ws);
    zpi_shard_cache_config cc = {
        .budget_bytes = p->cfg.shard_cache_bytes,
        .keep_shards = zpi_shard_cache_keep_shards(wc->shuffle ? wc->shuffle_block_shards : 1,
                                                   p->stages[0].parallelism,
                                                   p->prefetch_buffer > 0),
        .log = p->cfg.log,
        .log_user = p->cfg.log_user,
    };
    st = zpi_shard_cache_create(p->ds, &cc, &p->cache);
    if (st != ZP_OK)
        return st;
    if (p->observe && (st = zpi_obs_create(p)) != ZP_OK)
        return st;
    p->workers = calloc((size_t)p->threads, sizeof *p->workers);
    p->chunk_pool = calloc(p->W, sizeof *p->chunk_pool);
    p->window = calloc(p->W, sizeof *p->window);
    if (!p->workers || !p->chunk_pool || !p->window)
        return ZP_ERR_NOMEM;
    for (size_t i = 0; i < p->W; i++) {
        zpi_chunk *c = &p->chunk_pool[i];
        c->samples = malloc(p->cfg.chunk_samples * sizeof *c->samples);
        c->recs = malloc(p->cfg.chunk_samples * sizeof *c->recs);
        if (!c->samples || !c->recs)
            return ZP_ERR_NOMEM;
        c->next = p->chunk_free;
        p->chunk_free = c;
    }
    st = zpi_batchbufs_alloc(p);
    if (st != ZP_OK)
        return st;
    if (pthread_create(&p->engine, NULL, engine_main, p) != 0)
        return ZP_ERR_NOMEM;
    p->started = 1;
    return ZP_OK;
}

void zpi_engine_stop(zp_pipeline *p)
{
    if (p->started) {
        atomic_store(&p->stop, 1);
        pthread_mutex_lock(&p->qmu);
        pthread_cond_broadcast(&p->q_free);
        pthread_mutex_unlock(&p->qmu);
        pthread_join(p->engine, NULL);
        p->started = 0;
        /* The team's threads last touched the shared state under these
         * locks; take them once so that freeing it is ordered after. */
        pthread_mutex_lock(&p->mu);
        pthread_mutex_unlock(&p->mu);
        pthread_mutex_lock(&p->qmu);
        pthread_mutex_unlock(&p->qmu);
    }
    if (p->workers) {
        for (int i = 0; i < p->threads; i++) {
            zpi_json_destroy(p->workers[i].json);
            zp_encoder_destroy(p->workers[i].enc);
        }
        free(p->workers);
        p->workers = NULL;
    }
    if (p->chunk_pool) {
        for (size_t i = 0; i < p->W; i++) {
            zpi_chunk *c = &p->chunk_pool[i];
            free(c->samples);
            free(c->recs);
            free(c->json);
            free(c->text);
            free(c->tok);
        }
        free(p->chunk_pool);
        p->chunk_pool = NULL;
    }
    free(p->window);
    p->window = NULL;
    zpi_shard_cache_destroy(p->cache);
    p->cache = NULL;
    zpi_batchbufs_free(p);
    zpi_obs_destroy(p);
}
