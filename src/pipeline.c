/*
 * pipeline.c - the pipeline's API: settings, builder calls, the consumer's
 * side of the output queue, shutdown.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline_internal.h"
#include "util.h"

void zp_pipeline_config_init(zp_pipeline_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->threads = 0;
    cfg->epochs = 1;
    cfg->chunk_samples = 64;
    cfg->in_flight_chunks = 0;
    cfg->fetch_parallelism = 1;
    cfg->prefetch_batches = 2;
    cfg->microbatch_size = 32;
    cfg->seq_len = 2048;
    cfg->pack = ZP_PACK_RECORDS;
    cfg->on_bad_record = ZP_BAD_RECORD_FAIL;
    cfg->shard_cache_bytes = (size_t)1 << 30;
    cfg->fetch_delay_us = 0;
}

void zpi_pipeline_log(const zp_pipeline *p, zp_log_level lvl, const char *fmt, ...)
{
    if (!p->cfg.log)
        return;
    char buf[ZPI_ERRMAX + 64];
    va_list ap;
    va_start(ap, fmt);
    zpi_vfmt(buf, sizeof buf, fmt, ap);
    va_end(ap);
    p->cfg.log(p->cfg.log_user, lvl, buf);
}

static zp_status fail(zp_pipeline *p, zp_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static zp_status fail(zp_pipeline *p, zp_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zpi_vfmt(p->errmsg, sizeof p->errmsg, fmt, ap);
    va_end(ap);
    return st;
}

static zp_status check_config(zp_pipeline *p, const zp_pipeline_config *c)
{
    if (c->threads < 0 || c->threads > 1024)
        return fail(p, ZP_ERR_INVALID, "threads must be 0..1024 (got %d)", c->threads);
    if (c->chunk_samples == 0 || c->chunk_samples > (1u << 20))
        return fail(p, ZP_ERR_INVALID, "chunk_samples must be 1..1048576 (got %zu)", c->chunk_samples);
    if (c->fetch_parallelism == 0 || c->fetch_parallelism > 1024)
        return fail(p, ZP_ERR_INVALID, "fetch parallelism must be 1..1024 (got %zu)", c->fetch_parallelism);
    if (c->prefetch_batches > 4096)
        return fail(p, ZP_ERR_INVALID, "prefetch_batches must be 0..4096 (got %zu)", c->prefetch_batches);
    if (c->microbatch_size == 0 || c->microbatch_size > (1u << 20))
        return fail(p, ZP_ERR_INVALID, "microbatch_size must be 1..1048576 (got %zu)", c->microbatch_size);
    if (c->seq_len == 0 || c->seq_len > (1u << 24))
        return fail(p, ZP_ERR_INVALID, "seq_len must be 1..16777216 (got %zu)", c->seq_len);
    if (c->in_flight_chunks > 65536)
        return fail(p, ZP_ERR_INVALID, "in_flight_chunks must be 0..65536 (got %zu)", c->in_flight_chunks);
    if ((int)c->pack < ZP_PACK_RECORDS || (int)c->pack > ZP_PACK_PAD)
        return fail(p, ZP_ERR_INVALID, "unknown pack mode %d", (int)c->pack);
    if ((int)c->on_bad_record < 0 || (int)c->on_bad_record > ZP_BAD_RECORD_SKIP)
        return fail(p, ZP_ERR_INVALID, "unknown bad-record policy %d", (int)c->on_bad_record);
    return ZP_OK;
}

zp_status zp_pipeline_create(zp_worksource *ws, const zp_pipeline_config *cfg, zp_pipeline **out)
{
    if (!out)
        return ZP_ERR_INVALID;
    *out = NULL;
    if (!ws)
        return ZP_ERR_INVALID;
    zp_pipeline *p = calloc(1, sizeof *p);
    if (!p)
        return ZP_ERR_NOMEM;
    if (cfg)
        p->cfg = *cfg;
    else
        zp_pipeline_config_init(&p->cfg);
    zp_status st = check_config(p, &p->cfg);
    if (st != ZP_OK) {
        free(p);
        return st;
    }
    p->ws = ws;
    p->ds = zp_worksource_dataset(ws);
    p->eot = -1;
    atomic_init(&p->stop, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->qmu, NULL);
    pthread_cond_init(&p->q_ready, NULL);
    pthread_cond_init(&p->q_free, NULL);
    p->stages[0].kind = ZPI_STAGE_FETCH;
    zpi_fmt(p->stages[0].name, sizeof p->stages[0].name, "fetch");
    p->stages[0].parallelism = p->cfg.fetch_parallelism;
    p->n_stages = 1;
    *out = p;
    return ZP_OK;
}

void zp_pipeline_destroy(zp_pipeline *p)
{
    if (!p)
        return;
    zpi_engine_stop(p);
    zp_tokenizer_destroy(p->tok);
    free(p->tok_id);
    free(p->tok_field);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->qmu);
    pthread_cond_destroy(&p->q_ready);
    pthread_cond_destroy(&p->q_free);
    free(p);
}

static zp_status builder_check(zp_pipeline *p, size_t parallelism)
{
    if (!p)
        return ZP_ERR_INVALID;
    if (p->started || p->final_set)
        return fail(p, ZP_ERR_STATE, "pipeline already iterating: configure it before the first next()");
    if (parallelism == 0 || parallelism > 1024)
        return fail(p, ZP_ERR_INVALID, "parallelism must be 1..1024 (got %zu)", parallelism);
    return ZP_OK;
}

zp_status zp_pipeline_prefetch(zp_pipeline *p, size_t buffer_size, size_t parallelism)
{
    zp_status st = builder_check(p, parallelism);
    if (st != ZP_OK)
        return st;
    p->prefetch_buffer = buffer_size;
    p->prefetch_parallelism = parallelism;
    return ZP_OK;
}

zp_status zp_pipeline_fetch(zp_pipeline *p, size_t parallelism)
{
    zp_status st = builder_check(p, parallelism);
    if (st != ZP_OK)
        return st;
    p->cfg.fetch_parallelism = parallelism;
    p->stages[0].parallelism = parallelism;
    return ZP_OK;
}

zp_status zp_pipeline_map_transform(zp_pipeline *p, zp_map_fn fn, void *user, size_t parallelism,
                                    const char *name)
{
    zp_status st = builder_check(p, parallelism);
    if (st != ZP_OK)
        return st;
    if (!fn)
        return fail(p, ZP_ERR_INVALID, "map_transform needs a function");
    if (p->n_maps == ZPI_MAX_MAPS)
        return fail(p, ZP_ERR_LIMIT, "at most %d map_transform operators", ZPI_MAX_MAPS);
    if (p->tok)
        return fail(p, ZP_ERR_STATE, "map_transform must come before tokenize");
    zpi_stage *s = &p->stages[p->n_stages++];
    s->kind = ZPI_STAGE_MAP;
    s->fn = fn;
    s->user = user;
    s->parallelism = parallelism;
    zpi_fmt(s->name, sizeof s->name, "%s", name ? name : "map_transform");
    p->n_maps++;
    return ZP_OK;
}

zp_status zp_pipeline_tokenize(zp_pipeline *p, const char *tokenizer_id, const char *field,
                               size_t parallelism)
{
    zp_status st = builder_check(p, parallelism);
    if (st != ZP_OK)
        return st;
    if (p->tok)
        return fail(p, ZP_ERR_STATE, "tokenize is already set");
    if (!tokenizer_id || !*tokenizer_id)
        return fail(p, ZP_ERR_INVALID, "tokenize needs a tokenizer id (e.g. \"gpt2\")");
    char err[512];
    err[0] = '\0';
    st = zp_tokenizer_create(tokenizer_id, NULL, &p->tok, err, sizeof err);
    if (st != ZP_OK)
        return fail(p, st, "tokenizer '%s': %s", tokenizer_id, err);
    p->tok_id = zpi_strdup(tokenizer_id);
    p->tok_field = zpi_strdup(field && *field ? field : "text");
    if (!p->tok_id || !p->tok_field)
        return fail(p, ZP_ERR_NOMEM, "out of memory");
    p->eot = zp_tokenizer_eot(p->tok);
    zpi_stage *s = &p->stages[p->n_stages++];
    s->kind = ZPI_STAGE_TOKENIZE;
    s->parallelism = parallelism;
    zpi_fmt(s->name, sizeof s->name, "tokenize");
    if (p->cfg.pack == ZP_PACK_RECORDS)
        p->cfg.pack = ZP_PACK_CONCAT;
    return ZP_OK;
}

zp_status zp_pipeline_batch(zp_pipeline *p, size_t microbatch_size)
{
    zp_status st = builder_check(p, 1);
    if (st != ZP_OK)
        return st;
    if (microbatch_size == 0 || microbatch_size > (1u << 20))
        return fail(p, ZP_ERR_INVALID, "microbatch_size must be 1..1048576 (got %zu)", microbatch_size);
    p->cfg.microbatch_size = microbatch_size;
    return ZP_OK;
}

zp_status zp_pipeline_pack(zp_pipeline *p, zp_pack_mode mode, size_t seq_len)
{
    zp_status st = builder_check(p, 1);
    if (st != ZP_OK)
        return st;
    if (mode != ZP_PACK_CONCAT && mode != ZP_PACK_PAD)
        return fail(p, ZP_ERR_INVALID, "pack mode must be concat or pad");
    if (seq_len == 0 || seq_len > (1u << 24))
        return fail(p, ZP_ERR_INVALID, "seq_len must be 1..16777216 (got %zu)", seq_len);
    p->cfg.pack = mode;
    p->cfg.seq_len = seq_len;
    return ZP_OK;
}

zp_status zp_pipeline_options(zp_pipeline *p, size_t prefetch_batches)
{
    zp_status st = builder_check(p, 1);
    if (st != ZP_OK)
        return st;
    if (prefetch_batches > 4096)
        return fail(p, ZP_ERR_INVALID, "prefetch_batches must be 0..4096 (got %zu)", prefetch_batches);
    p->cfg.prefetch_batches = prefetch_batches;
    return ZP_OK;
}

/* Resume point after a delivered batch. */
static void note_resume(zp_pipeline *p, const zp_batch *b)
{
    if (b->n_samples == 0)
        return;
    const zp_sample *s = &b->samples[b->n_samples - 1];
    p->resume.epoch = s->epoch;
    p->resume.position = s->position + 1;
    if (p->resume.position >= p->per_rank) {
        p->resume.epoch++;
        p->resume.position = 0;
    }
}

static void add_counts(zp_pipeline_counts *a, const zp_pipeline_counts *d)
{
    a->samples += d->samples;
    a->padded += d->padded;
    a->skipped += d->skipped;
    a->filtered += d->filtered;
    a->tokens += d->tokens;
    a->truncated_tokens += d->truncated_tokens;
    a->pad_tokens += d->pad_tokens;
}

zp_status zp_pipeline_next(zp_pipeline *p, const zp_batch **out)
{
    if (!p || !out)
        return ZP_ERR_INVALID;
    *out = NULL;
    if (!p->started && !p->final_set) {
        if (p->tok && p->cfg.pack == ZP_PACK_RECORDS)
            p->cfg.pack = ZP_PACK_CONCAT;
        if (!p->tok && p->cfg.pack != ZP_PACK_RECORDS)
            return fail(p, ZP_ERR_INVALID, "token packing needs a tokenize operator");
        zp_status st = zpi_engine_start(p);
        if (st != ZP_OK) {
            zpi_engine_stop(p);
            p->final_set = 1;
            p->final_status = st;
            zpi_fmt(p->final_msg, sizeof p->final_msg, "cannot start the pipeline: %s",
                    zp_status_str(st));
            return fail(p, st, "%s", p->final_msg);
        }
    }
    uint64_t t_wait = p->obs ? zpi_now_ns() : 0;
    pthread_mutex_lock(&p->qmu);
    if (p->held) {
        p->held->next = p->free_list;
        p->free_list = p->held;
        p->held = NULL;
        pthread_cond_signal(&p->q_free);
    }
    while (!p->ready_head && !p->final_set)
        pthread_cond_wait(&p->q_ready, &p->qmu);
    zpi_batchbuf *bb = p->ready_head;
    zp_status st;
    if (bb) {
        p->ready_head = bb->next;
        if (!p->ready_head)
            p->ready_tail = NULL;
        p->held = bb;
        p->counts.batches++;
        add_counts(&p->counts, &bb->delta);
        note_resume(p, &bb->b);
        *out = &bb->b;
        st = ZP_OK;
        if (p->obs) {
            uint64_t now = zpi_now_ns();
            if (zpi_ctr_get(&p->obs->first_batch_ns) == 0)
                atomic_store_explicit(&p->obs->first_batch_ns, now - p->obs->t_start + 1,
                                      memory_order_relaxed);
            else
                zpi_ctr_add(&p->obs->stall_ns, now - t_wait);
        }
    } else {
        st = p->final_status;
        if (st != ZP_END)
            zpi_fmt(p->errmsg, sizeof p->errmsg, "%s", p->final_msg);
    }
    pthread_mutex_unlock(&p->qmu);
    return st;
}

const char *zp_pipeline_errmsg(const zp_pipeline *p) { return p ? p->errmsg : ""; }

void zp_pipeline_get_counts(const zp_pipeline *p, zp_pipeline_counts *out)
{
    pthread_mutex_lock((pthread_mutex_t *)&p->qmu);
    *out = p->counts;
    pthread_mutex_unlock((pthread_mutex_t *)&p->qmu);
}

void zp_pipeline_resume_state(const zp_pipeline *p, zp_worksource_state *st)
{
    if (!p->started && !p->final_set)
        zp_worksource_get_state(p->ws, st);
    else
        *st = p->resume;
}

int32_t zp_pipeline_eot(const zp_pipeline *p) { return p->tok ? p->eot : -1; }
