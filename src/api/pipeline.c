/*
 * pipeline.c - the pipeline's public API: settings, builder calls, start,
 * the consumer's side (zp_pipeline_next), shutdown. It owns the handle:
 * the operator list, the tokenizer, the output queue and the engine.
 */
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include <omp.h>

#include "api/autotune.h"
#include "engine/engine.h"
#include "api/pipeline_internal.h"
#include "base/util.h"
#include "plan/worksource_internal.h"
#include "data/dataset_internal.h"
#include "output/budget.h"
/* the public declaration (ZP_API: exported) of zp_pipeline_enable_observability */
#include "zephon/observe.h"

struct zp_pipeline {
    zp_pipeline_config cfg;
    zp_worksource *ws;
    zpi_err err;   /* the last error, for zp_pipeline_errmsg() */
    zpi_err fatal; /* a failed create or start: every later call returns it */

    /* operators, fixed before the first next() */
    zpi_op ops[ZPI_MAX_OPS];
    int n_ops, n_maps;
    char *tok_id, *tok_field;
    zp_tokenizer *tok;
    zp_tokenizer_config tok_cfg; /* as given (eot/bos/match_special recorded in states) */
    size_t prefetch_buffer, prefetch_parallelism;
    int observe;
    unsigned masking;           /* ZP_OUT_* asked for (zp_pipeline_doc_masking) */
    size_t pack_window;         /* ZP_PACK_BESTFIT: positions per window (0: default) */
    size_t balance;             /* attention-cost balance window in batches (0/1: off) */
    zp_position_mode positions;

    /* the run */
    int started; /* the first next() was called */
    int q_ready; /* q was initialised */
    zpi_outq q;
    zpi_engine *engine;

    /* consumer side */
    zpi_ckpt ck; /* checkpoint bookkeeping (pipeline_state.c) */
    zpi_watchdog wd; /* the stall watchdog (watchdog.c) */

    /* the memory budget (output/budget.c) */
    int scanned;            /* shards read once (zpi_budget_scan) */
    size_t budget_fetch;    /* automatic fetch parallelism counted in the plan (0: its cap) */
    zpi_budget_shards shards;
    zp_memory_plan mem;     /* as used, set at start when a budget is set */
};

void zp_pipeline_config_init(zp_pipeline_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->threads = 0;
    cfg->epochs = 1;
    cfg->chunk_samples = 64;
    cfg->in_flight_chunks = 0;
    cfg->fetch_parallelism = ZP_AUTO;
    cfg->prefetch_batches = ZP_PREFETCH_AUTO;
    cfg->microbatch_size = 32;
    cfg->seq_len = 2048;
    cfg->pack = ZP_PACK_RECORDS;
    cfg->on_bad_record = ZP_BAD_RECORD_FAIL;
    cfg->shard_cache_bytes = (size_t)1 << 30;
    cfg->fetch_delay_us = 0;
    cfg->watchdog_seconds = ZP_WATCHDOG_DEFAULT_SECONDS;
    cfg->memory_budget = 0;
}

static const char *pack_name(int mode)
{
    switch (mode) {
    case ZP_PACK_RECORDS: return "records";
    case ZP_PACK_CONCAT: return "concat";
    case ZP_PACK_PAD: return "pad";
    case ZP_PACK_BESTFIT: return "bestfit";
    default: return "unknown";
    }
}

static zp_status check_config(zpi_err *e, const zp_pipeline_config *c)
{
    ZPI_RETURN_ERR_IF(c->threads < 0 || c->threads > 1024, e, ZP_ERR_INVALID,
                      "threads = %d: must be 0..1024 (0: omp_get_max_threads())", c->threads);
    ZPI_RETURN_ERR_IF(c->chunk_samples == 0 || c->chunk_samples > (1u << 20), e, ZP_ERR_INVALID,
                      "chunk_samples = %zu: must be 1..1048576", c->chunk_samples);
    ZPI_RETURN_ERR_IF((c->fetch_parallelism == 0 || c->fetch_parallelism > 1024) &&
                          c->fetch_parallelism != ZP_AUTO,
                      e, ZP_ERR_INVALID, "fetch_parallelism = %zu: must be 1..1024 or ZP_AUTO",
                      c->fetch_parallelism);
    ZPI_RETURN_ERR_IF(c->prefetch_batches > 4096 && c->prefetch_batches != ZP_PREFETCH_AUTO, e,
                      ZP_ERR_INVALID, "prefetch_batches = %zu: must be 0..4096 or ZP_AUTO",
                      c->prefetch_batches);
    ZPI_RETURN_ERR_IF(c->microbatch_size == 0 || c->microbatch_size > (1u << 20), e, ZP_ERR_INVALID,
                      "microbatch_size = %zu: must be 1..1048576", c->microbatch_size);
    ZPI_RETURN_ERR_IF(c->seq_len == 0 || c->seq_len > (1u << 24), e, ZP_ERR_INVALID,
                      "seq_len = %zu: must be 1..16777216", c->seq_len);
    ZPI_RETURN_ERR_IF(!(c->watchdog_seconds >= 0 && c->watchdog_seconds <= 1e6), e, ZP_ERR_INVALID,
                      "watchdog_seconds = %g: must be 0..1000000 (0: off)", c->watchdog_seconds);
    ZPI_RETURN_ERR_IF(c->in_flight_chunks > 65536, e, ZP_ERR_INVALID,
                      "in_flight_chunks = %zu: must be 0..65536 (0: automatic)", c->in_flight_chunks);
    ZPI_RETURN_ERR_IF((int)c->pack < ZP_PACK_RECORDS || (int)c->pack > ZP_PACK_BESTFIT, e,
                      ZP_ERR_INVALID,
                      "pack = %d: unknown pack mode (ZP_PACK_RECORDS, ZP_PACK_CONCAT, ZP_PACK_PAD "
                      "or ZP_PACK_BESTFIT)",
                      (int)c->pack);
    ZPI_RETURN_ERR_IF((int)c->on_bad_record < ZP_BAD_RECORD_FAIL ||
                          (int)c->on_bad_record > ZP_BAD_RECORD_SKIP,
                      e, ZP_ERR_INVALID,
                      "on_bad_record = %d: unknown bad-record policy (ZP_BAD_RECORD_FAIL or "
                      "ZP_BAD_RECORD_SKIP)",
                      (int)c->on_bad_record);
    return ZP_OK;
}

zp_status zp_pipeline_create(zp_worksource *ws, const zp_pipeline_config *cfg, zp_pipeline **out)
{
    if (!out)
        return ZP_ERR_INVALID;
    zp_pipeline *p = calloc(1, sizeof *p);
    *out = p;
    if (!p)
        return ZP_ERR_NOMEM;
    if (cfg)
        p->cfg = *cfg;
    else
        zp_pipeline_config_init(&p->cfg);
    zp_status st = ws ? check_config(&p->err, &p->cfg)
                      : zpi_err_set(&p->err, ZP_ERR_INVALID,
                                    "zp_pipeline_create: ws = NULL: a worksource is required");
    if (st != ZP_OK) {
        zpi_err_copy(&p->fatal, &p->err); /* an error-only handle */
        return st;
    }
    p->ws = ws;
    zpi_op *f = &p->ops[0];
    f->kind = ZPI_OP_FETCH;
    zpi_fmt(f->name, sizeof f->name, "fetch");
    f->parallelism = p->cfg.fetch_parallelism;
    p->n_ops = 1;
    return ZP_OK;
}

void zp_pipeline_destroy(zp_pipeline *p)
{
    if (!p)
        return;
    zpi_engine_destroy(p->engine);
    if (p->q_ready)
        zpi_outq_fini(&p->q);
    zp_tokenizer_destroy(p->tok);
    free(p->tok_id);
    free(p->tok_field);
    free(p->ck.part_samples);
    free(p->ck.phase_samples);
    free(p->ck.part_tokens);
    free(p->ck.skips);
    free(p->ck.done);
    zpi_covtab_clear(&p->ck.cov);
    free(p);
}

/* A builder call may change the pipeline: before the first next(), on a
 * handle whose creation succeeded. */
static zp_status builder_check(zp_pipeline *p, const char *call)
{
    if (!p)
        return ZP_ERR_INVALID;
    if (p->fatal.code != ZP_OK)
        return zpi_err_copy(&p->err, &p->fatal);
    ZPI_RETURN_ERR_IF(p->started, &p->err, ZP_ERR_STATE,
                      "%s: pipeline already iterating: configure it before the first next()", call);
    return ZP_OK;
}

static zp_status check_parallelism(zp_pipeline *p, const char *call, size_t parallelism)
{
    ZPI_RETURN_ERR_IF((parallelism == 0 || parallelism > 1024) && parallelism != ZP_AUTO, &p->err,
                      ZP_ERR_INVALID, "%s: parallelism = %zu: must be 1..1024 or ZP_AUTO", call,
                      parallelism);
    return ZP_OK;
}

zp_status zp_pipeline_prefetch(zp_pipeline *p, size_t buffer_size, size_t parallelism)
{
    ZPI_FORWARD_IF_ERR(builder_check(p, "zp_pipeline_prefetch"));
    ZPI_FORWARD_IF_ERR(check_parallelism(p, "zp_pipeline_prefetch", parallelism));
    p->prefetch_buffer = buffer_size;
    p->prefetch_parallelism = parallelism;
    return ZP_OK;
}

zp_status zp_pipeline_fetch(zp_pipeline *p, size_t parallelism)
{
    ZPI_FORWARD_IF_ERR(builder_check(p, "zp_pipeline_fetch"));
    ZPI_FORWARD_IF_ERR(check_parallelism(p, "zp_pipeline_fetch", parallelism));
    p->cfg.fetch_parallelism = parallelism;
    p->ops[0].parallelism = parallelism;
    return ZP_OK;
}

static zp_status add_map(zp_pipeline *p, const char *call, zp_map_fn fn, zp_map_batch_fn bfn,
                         void *user, size_t parallelism, const char *name)
{
    ZPI_FORWARD_IF_ERR(builder_check(p, call));
    ZPI_FORWARD_IF_ERR(check_parallelism(p, call, parallelism));
    ZPI_RETURN_ERR_IF(!fn && !bfn, &p->err, ZP_ERR_INVALID,
                      "%s: fn = NULL: a map function is required", call);
    ZPI_RETURN_ERR_IF(p->n_maps == ZPI_MAX_MAPS, &p->err, ZP_ERR_LIMIT,
                      "%s('%s'): at most %d map_transform operators", call,
                      name ? name : "map_transform", ZPI_MAX_MAPS);
    ZPI_RETURN_ERR_IF(p->tok, &p->err, ZP_ERR_STATE,
                      "%s('%s'): map_transform must come before tokenize", call,
                      name ? name : "map_transform");
    zpi_op *s = &p->ops[p->n_ops++];
    s->kind = ZPI_OP_MAP;
    s->fn = fn;
    s->batch_fn = bfn;
    s->user = user;
    s->parallelism = parallelism;
    zpi_fmt(s->name, sizeof s->name, "%s", name ? name : "map_transform");
    p->n_maps++;
    return ZP_OK;
}

zp_status zp_pipeline_map_transform(zp_pipeline *p, zp_map_fn fn, void *user, size_t parallelism,
                                    const char *name)
{
    return add_map(p, "zp_pipeline_map_transform", fn, NULL, user, parallelism, name);
}

zp_status zp_pipeline_map_transform_batch(zp_pipeline *p, zp_map_batch_fn fn, void *user,
                                          size_t parallelism, const char *name)
{
    return add_map(p, "zp_pipeline_map_transform_batch", NULL, fn, user, parallelism, name);
}

zp_status zp_pipeline_tokenize(zp_pipeline *p, const char *tokenizer_id, const char *field,
                               size_t parallelism)
{
    return zp_pipeline_tokenize_config(p, tokenizer_id, NULL, field, parallelism);
}

/* 1 when a recorded tokenizer is an identity (zp_tokenizer_ident(): a name,
 * or KIND:xxh64:HASH); 0 for what older versions recorded in HDF5 files (the
 * id as given, a path). */
static int is_identity(const char *rec)
{
    return strstr(rec, ":xxh64:") || !strpbrk(rec, "/.");
}

/* Pre-tokenized shards that record the tokenizer that made them (a
 * manifest's "tokenizer", a Megatron pair's PREFIX.tokenizer): another
 * identity is refused, naming both; a Megatron pair that records none, or
 * an older record that is not an identity, is accepted with one warning. */
static zp_status check_shard_tokenizers(zp_pipeline *p, const char *call, const char *id)
{
    const zp_dataset *ds = zp_worksource_dataset(p->ws);
    const char *mine = zp_tokenizer_ident(p->tok);
    size_t n = zp_dataset_num_shards(ds), unrecorded = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        const char *rec = zpi_dataset_shard_tokenizer(ds, i);
        if (rec && strcmp(rec, mine) == 0)
            continue;
        if (rec && is_identity(rec))
            return zpi_err_set(&p->err, ZP_ERR_MISMATCH,
                               "%s: tokenizer_id = '%s': shard '%s' was pre-tokenized with the "
                               "tokenizer '%s', this pipeline's is '%s': its ids would be read as "
                               "other tokens (tokenize with the tokenizer that made it)",
                               call, id, zp_dataset_shard_name(ds, i), rec, mine);
        const zpi_format *f = zpi_dataset_shard_format(ds, i);
        if (rec || (f && strcmp(f->name, "megatron") == 0)) {
            if (unrecorded++ == 0)
                first = i;
        }
    }
    if (unrecorded && p->cfg.log) {
        char m[ZPI_ERRMAX];
        zpi_fmt(m, sizeof m,
                "%zu pre-tokenized shard%s (e.g. '%s') record%s no tokenizer identity (written "
                "by another tool or an older zephon): accepted, assuming '%s' made %s",
                unrecorded, unrecorded == 1 ? "" : "s", zp_dataset_shard_name(ds, first),
                unrecorded == 1 ? "s" : "", mine, unrecorded == 1 ? "it" : "them");
        p->cfg.log(p->cfg.log_user, ZP_LOG_WARN, m);
    }
    return ZP_OK;
}

zp_status zp_pipeline_tokenize_config(zp_pipeline *p, const char *tokenizer_id,
                                      const zp_tokenizer_config *cfg, const char *field,
                                      size_t parallelism)
{
    const char *call = "zp_pipeline_tokenize";
    ZPI_FORWARD_IF_ERR(builder_check(p, call));
    ZPI_FORWARD_IF_ERR(check_parallelism(p, call, parallelism));
    ZPI_RETURN_ERR_IF(p->tok, &p->err, ZP_ERR_STATE, "%s: tokenize is already set (tokenizer '%s')",
                      call, p->tok_id);
    ZPI_RETURN_ERR_IF(!tokenizer_id || !*tokenizer_id, &p->err, ZP_ERR_INVALID,
                      "%s: tokenizer_id = %s: a tokenizer id is required (e.g. \"gpt2\")", call,
                      tokenizer_id ? "\"\"" : "NULL");
    char err[512];
    err[0] = '\0';
    zp_tokenizer_config_init(&p->tok_cfg);
    if (cfg)
        p->tok_cfg = *cfg;
    zp_status st = zp_tokenizer_create(tokenizer_id, &p->tok_cfg, &p->tok, err, sizeof err);
    if (st != ZP_OK)
        return zpi_err_set(&p->err, st, "%s: tokenizer_id = '%s': %s", call, tokenizer_id,
                           err[0] ? err : zp_status_str(st));
    if ((st = check_shard_tokenizers(p, call, tokenizer_id)) != ZP_OK) {
        zp_tokenizer_destroy(p->tok);
        p->tok = NULL;
        return st;
    }
    p->tok_id = zpi_strdup(tokenizer_id);
    p->tok_field = zpi_strdup(field && *field ? field : "text");
    if (!p->tok_id || !p->tok_field) {
        zp_tokenizer_destroy(p->tok);
        p->tok = NULL;
        return zpi_err_set(&p->err, ZP_ERR_NOMEM, "%s: out of memory", call);
    }
    zpi_op *s = &p->ops[p->n_ops++];
    s->kind = ZPI_OP_TOKENIZE;
    s->parallelism = parallelism;
    zpi_fmt(s->name, sizeof s->name, "tokenize");
    if (p->cfg.pack == ZP_PACK_RECORDS)
        p->cfg.pack = ZP_PACK_CONCAT;
    return ZP_OK;
}

zp_status zp_pipeline_batch(zp_pipeline *p, size_t microbatch_size)
{
    ZPI_FORWARD_IF_ERR(builder_check(p, "zp_pipeline_batch"));
    ZPI_RETURN_ERR_IF(microbatch_size == 0 || microbatch_size > (1u << 20), &p->err, ZP_ERR_INVALID,
                      "zp_pipeline_batch: microbatch_size = %zu: must be 1..1048576",
                      microbatch_size);
    p->cfg.microbatch_size = microbatch_size;
    return ZP_OK;
}

zp_status zp_pipeline_pack(zp_pipeline *p, zp_pack_mode mode, size_t seq_len)
{
    ZPI_FORWARD_IF_ERR(builder_check(p, "zp_pipeline_pack"));
    ZPI_RETURN_ERR_IF(mode != ZP_PACK_CONCAT && mode != ZP_PACK_PAD && mode != ZP_PACK_BESTFIT,
                      &p->err, ZP_ERR_INVALID,
                      "zp_pipeline_pack: mode = %d (%s): must be ZP_PACK_CONCAT, ZP_PACK_PAD or "
                      "ZP_PACK_BESTFIT",
                      (int)mode, pack_name((int)mode));
    ZPI_RETURN_ERR_IF(seq_len == 0 || seq_len > (1u << 24), &p->err, ZP_ERR_INVALID,
                      "zp_pipeline_pack: seq_len = %zu: must be 1..16777216", seq_len);
    p->cfg.pack = mode;
    p->cfg.seq_len = seq_len;
    return ZP_OK;
}

zp_status zp_pipeline_pack_bestfit(zp_pipeline *p, size_t seq_len, size_t window)
{
    ZPI_FORWARD_IF_ERR(builder_check(p, "zp_pipeline_pack_bestfit"));
    ZPI_RETURN_ERR_IF(window == 0 || window > ZP_PACK_WINDOW_MAX, &p->err, ZP_ERR_INVALID,
                      "zp_pipeline_pack_bestfit: window = %zu: must be 1..%u documents", window,
                      (unsigned)ZP_PACK_WINDOW_MAX);
    ZPI_FORWARD_IF_ERR(zp_pipeline_pack(p, ZP_PACK_BESTFIT, seq_len));
    p->pack_window = window;
    return ZP_OK;
}

size_t zp_pipeline_pack_window(const zp_pipeline *p)
{
    if (!p || p->cfg.pack != ZP_PACK_BESTFIT)
        return 0;
    return p->pack_window ? p->pack_window : ZP_PACK_WINDOW_DEFAULT;
}

zp_status zp_pipeline_balance(zp_pipeline *p, size_t window)
{
    ZPI_FORWARD_IF_ERR(builder_check(p, "zp_pipeline_balance"));
    ZPI_RETURN_ERR_IF(window > ZP_BALANCE_WINDOW_MAX, &p->err, ZP_ERR_INVALID,
                      "zp_pipeline_balance: window = %zu: must be 0..%u batches (0 or 1: off)",
                      window, (unsigned)ZP_BALANCE_WINDOW_MAX);
    p->balance = window > 1 ? window : 0;
    return ZP_OK;
}

size_t zp_pipeline_balance_window(const zp_pipeline *p)
{
    return p ? p->balance : 0;
}

zp_status zp_pipeline_options(zp_pipeline *p, size_t prefetch_batches)
{
    ZPI_FORWARD_IF_ERR(builder_check(p, "zp_pipeline_options"));
    ZPI_RETURN_ERR_IF(prefetch_batches > 4096 && prefetch_batches != ZP_PREFETCH_AUTO, &p->err,
                      ZP_ERR_INVALID,
                      "zp_pipeline_options: prefetch_batches = %zu: must be 0..4096 or "
                      "ZP_AUTO",
                      prefetch_batches);
    p->cfg.prefetch_batches = prefetch_batches;
    return ZP_OK;
}

zp_status zp_pipeline_memory_budget(zp_pipeline *p, size_t bytes)
{
    ZPI_FORWARD_IF_ERR(builder_check(p, "zp_pipeline_memory_budget"));
    p->cfg.memory_budget = bytes;
    return ZP_OK;
}

/* The team's threads: the setting, or omp_get_max_threads(). */
static int team_threads(const zp_pipeline *p)
{
    return p->cfg.threads > 0 ? p->cfg.threads : omp_get_max_threads();
}

/* An operator's parallelism for the budget: an automatic one at its cap
 * (what it may grow to; autotune.c), so that the plan holds whatever the
 * tuner does. */
static size_t budget_par(const zp_pipeline *p, size_t par, int fetch)
{
    if (par != ZP_AUTO)
        return par;
    if (fetch && p->budget_fetch)
        return p->budget_fetch;
    zpi_tune_caps caps;
    zpi_tune_caps_get(&p->cfg, NULL, 0, team_threads(p), 1, &caps);
    return caps.op_parallelism;
}

/* The budget's input for the pipeline's settings as they are now
 * (budget.h); reads the shards' sizes the first time. Automatic
 * parallelism counts at its cap, an automatic prefetch_batches at its
 * start (2): its cap is the budget's most (zpi_tune_caps_clamp). */
static zp_status budget_input(zp_pipeline *p, zpi_budget_in *in, zpi_err *e)
{
    const zp_dataset *ds = zp_worksource_dataset(p->ws);
    if (!p->scanned) {
        ZPI_FORWARD_IF_ERR(zpi_budget_scan(ds, &p->shards, e));
        p->scanned = 1;
    }
    const zp_worksource_config *wc = zp_worksource_get_config(p->ws);
    *in = (zpi_budget_in){
        .budget = p->cfg.memory_budget,
        .rows = p->cfg.microbatch_size,
        .cols = p->tok ? p->cfg.seq_len + 1 : 0,
        .masking = p->tok ? p->masking : 0,
        .chunk_samples = p->cfg.chunk_samples,
        .in_flight_chunks = p->cfg.in_flight_chunks,
        .n_ops = (size_t)p->n_ops,
        .fetch_parallelism = budget_par(p, p->ops[0].parallelism, 1),
        .prefetch_batches =
            p->cfg.prefetch_batches == ZP_PREFETCH_AUTO ? 2 : p->cfg.prefetch_batches,
        .balance = p->tok ? p->balance : 0,
        .pack_window = p->tok ? zp_pipeline_pack_window(p) : 0,
        /* an automatic look-ahead counts as on, its tasks at their cap */
        .prefetch_buffer = p->prefetch_buffer == ZP_AUTO ? 1 : p->prefetch_buffer,
        .prefetch_parallelism = budget_par(p, p->prefetch_parallelism, 0),
        .block_shards = wc->shuffle ? wc->shuffle_block_shards : 1,
        .shard_cache_bytes = p->cfg.shard_cache_bytes,
        .sh = p->shards,
        .largest_name = p->shards.largest_index >= 0
                            ? zp_dataset_shard_name(ds, (size_t)p->shards.largest_index)
                            : NULL,
    };
    for (int i = 0; i < p->n_ops; i++)
        in->op_parallelism += budget_par(p, p->ops[i].parallelism, i == 0);
    return ZP_OK;
}

/* The memory plan for the pipeline's settings as they are now; the
 * message, when the budget is too small, goes into e. */
static zp_status memory_plan(zp_pipeline *p, zp_memory_plan *out, zpi_err *e)
{
    zpi_budget_in in;
    ZPI_FORWARD_IF_ERR(budget_input(p, &in, e));
    return zpi_budget_plan(&in, out, e);
}

zp_status zpi_pipeline_budget_caps(zp_pipeline *p, size_t *max_prefetch_batches,
                                   size_t *max_in_flight)
{
    zpi_budget_in in;
    ZPI_FORWARD_IF_ERR(budget_input(p, &in, &p->err));
    if (max_prefetch_batches)
        *max_prefetch_batches = zpi_budget_max_prefetch_batches(&in);
    if (max_in_flight)
        *max_in_flight = zpi_budget_max_in_flight(&in);
    return ZP_OK;
}

zp_status zp_pipeline_memory_plan(zp_pipeline *p, zp_memory_plan *out)
{
    if (!p || !out)
        return ZP_ERR_INVALID;
    memset(out, 0, sizeof *out);
    if (p->fatal.code != ZP_OK)
        return zpi_err_copy(&p->err, &p->fatal);
    if (p->started && p->cfg.memory_budget) {
        *out = p->mem;
        return ZP_OK;
    }
    return memory_plan(p, out, &p->err);
}

zp_status zp_pipeline_watchdog(zp_pipeline *p, double seconds)
{
    ZPI_FORWARD_IF_ERR(builder_check(p, "zp_pipeline_watchdog"));
    ZPI_RETURN_ERR_IF(!(seconds >= 0 && seconds <= 1e6), &p->err, ZP_ERR_INVALID,
                      "zp_pipeline_watchdog: seconds = %g: must be 0..1000000 (0: off)", seconds);
    p->cfg.watchdog_seconds = seconds;
    return ZP_OK;
}

zp_status zp_pipeline_doc_masking(zp_pipeline *p, unsigned outputs, zp_position_mode positions)
{
    const unsigned all = ZP_OUT_POSITION_IDS | ZP_OUT_CU_SEQLENS | ZP_OUT_DOC_COUNTS;
    ZPI_FORWARD_IF_ERR(builder_check(p, "zp_pipeline_doc_masking"));
    ZPI_RETURN_ERR_IF(outputs & ~all, &p->err, ZP_ERR_INVALID,
                      "zp_pipeline_doc_masking: outputs = 0x%x: unknown flags 0x%x (ZP_OUT_*)",
                      outputs, outputs & ~all);
    ZPI_RETURN_ERR_IF(positions != ZP_POSITIONS_RESTART && positions != ZP_POSITIONS_CONTINUE,
                      &p->err, ZP_ERR_INVALID,
                      "zp_pipeline_doc_masking: positions = %d: must be ZP_POSITIONS_RESTART "
                      "or ZP_POSITIONS_CONTINUE", (int)positions);
    p->masking = outputs;
    p->positions = positions;
    return ZP_OK;
}

zp_status zp_pipeline_enable_observability(zp_pipeline *p)
{
    ZPI_FORWARD_IF_ERR(builder_check(p, "zp_pipeline_enable_observability"));
    p->observe = 1;
    return ZP_OK;
}

/* The first next(): set up the output queue and start the engine. A
 * failure is kept in p->fatal. */
static zp_status start(zp_pipeline *p)
{
    if (p->tok && p->cfg.pack == ZP_PACK_RECORDS)
        p->cfg.pack = ZP_PACK_CONCAT;
    ZPI_RETURN_ERR_IF(!p->tok && p->cfg.pack != ZP_PACK_RECORDS, &p->err, ZP_ERR_INVALID,
                      "pack = %d (%s): token packing needs a tokenize operator "
                      "(zp_pipeline_tokenize)",
                      (int)p->cfg.pack, pack_name((int)p->cfg.pack));
    ZPI_RETURN_ERR_IF(!p->tok && p->balance, &p->err, ZP_ERR_INVALID,
                      "zp_pipeline_balance: window = %zu: attention-cost balance needs a "
                      "tokenize operator (zp_pipeline_tokenize)",
                      p->balance);
    ZPI_RETURN_ERR_IF(!p->tok && p->masking, &p->err, ZP_ERR_INVALID,
                      "zp_pipeline_doc_masking: the document-masking outputs need a "
                      "tokenize operator (zp_pipeline_tokenize)");
    p->started = 1;
    zp_worksource_state at;
    zp_worksource_get_state(p->ws, &at);
    zpi_ckpt *ck = &p->ck;
    if (!ck->part_samples) {
        ck->nparts = zp_worksource_num_parts(p->ws);
        ck->part_samples = calloc(ck->nparts ? ck->nparts : 1, sizeof *ck->part_samples);
        ck->part_tokens = calloc(ck->nparts ? ck->nparts : 1, sizeof *ck->part_tokens);
        if (!ck->part_samples || !ck->part_tokens) {
            zpi_err_set(&p->fatal, ZP_ERR_NOMEM, "cannot start the pipeline: out of memory");
            return zpi_err_copy(&p->err, &p->fatal);
        }
    }
    if (!ck->phase_samples || ck->nphases != zp_worksource_num_phases(p->ws)) {
        /* per phase (a restored state's counts kept for the phases it has) */
        size_t nph = zp_worksource_num_phases(p->ws), np = ck->nparts;
        const size_t cells = nph * np;
        uint64_t *a = calloc(cells ? cells : 1, sizeof *a);
        if (!a) {
            zpi_err_set(&p->fatal, ZP_ERR_NOMEM, "cannot start the pipeline: out of memory");
            return zpi_err_copy(&p->err, &p->fatal);
        }
        for (size_t k = 0; ck->phase_samples && k < nph && k < ck->nphases; k++)
            memcpy(a + k * np, ck->phase_samples + k * np, np * sizeof *a);
        free(ck->phase_samples);
        ck->phase_samples = a;
        ck->nphases = nph;
    }
    if (!ck->restored) {
        ck->at.valid = 1;
        ck->at.epoch = at.epoch;
        ck->at.position = at.position;
        ck->at.token_offset = 0;
        ck->at.carry = 0;
        ck->at.rows = 0;
        ck->at.n_done = 0;
        ck->bal_done = 0;
    }

    /* The engine ends at epoch start + epochs (exclusive, 32-bit): refuse
     * a count that would wrap it, instead of delivering nothing. */
    if (p->cfg.epochs && (uint64_t)at.epoch + p->cfg.epochs > UINT32_MAX) {
        zpi_err_set(&p->fatal, ZP_ERR_INVALID,
                    "epochs = %u from start epoch %u: runs past the last epoch %u",
                    (unsigned)p->cfg.epochs, (unsigned)at.epoch, (unsigned)UINT32_MAX - 1);
        return zpi_err_copy(&p->err, &p->fatal);
    }
    size_t rows = p->cfg.microbatch_size, cols = p->tok ? p->cfg.seq_len + 1 : 0;
    if (p->masking && (uint64_t)rows * p->cfg.seq_len > INT32_MAX) {
        zpi_err_set(&p->fatal, ZP_ERR_INVALID,
                    "zp_pipeline_doc_masking: microbatch_size x seq_len = %zu x %zu is over "
                    "2^31 - 1 positions, which int32 cu_seqlens and position_ids cannot hold",
                    rows, p->cfg.seq_len);
        return zpi_err_copy(&p->err, &p->fatal);
    }
    ZPI_RETURN_ERR_IF(ck->bal_done && ck->bal_done >= p->balance, &p->err, ZP_ERR_INVALID,
                      "state: balance_done = %llu batches of an attention-balance window of "
                      "%zu (a state edited by hand?)",
                      (unsigned long long)ck->bal_done, p->balance);
    /* the memory budget sizes the in-flight chunks and the shard cache,
     * and checks the rest of the settings against it */
    if (p->cfg.memory_budget) {
        /* automatic fetch parallelism: the most tasks (up to its cap) whose
         * shards the budget holds; 1 when none does (the plan says why) */
        if (p->ops[0].parallelism == ZP_AUTO) {
            zpi_err scratch;
            zp_memory_plan mp;
            for (p->budget_fetch = budget_par(p, ZP_AUTO, 0); p->budget_fetch > 1;
                 p->budget_fetch--)
                if (memory_plan(p, &mp, &scratch) == ZP_OK)
                    break;
        }
        if (memory_plan(p, &p->mem, &p->fatal) != ZP_OK)
            return zpi_err_copy(&p->err, &p->fatal);
        p->cfg.in_flight_chunks = (size_t)p->mem.in_flight_chunks;
        p->cfg.shard_cache_bytes = (size_t)p->mem.cache_budget;
    }
    p->q_ready = 1;
    /* the balance window's batches are held until it is complete */
    /* automatic settings: where they start, and their caps (autotune.c) */
    const int threads = team_threads(p);
    /* a batch buffer's size: token rows (with the masking outputs), or
     * records of 4 KiB taken as typical */
    const size_t per = cols ? rows * cols * (sizeof(int32_t) * (2 + (p->masking ? 1 : 0)) + 1)
                            : rows * 4096;
    zpi_tune_caps caps;
    zpi_tune_caps_get(&p->cfg, p->ops, p->n_ops, threads, per, &caps);
    if (p->cfg.memory_budget) {
        /* the in-flight chunks are the plan's already; the queue grows only
         * into what the plan left unassigned (the kept batches and the
         * shard cache keep their planned room), and never past what the
         * budget allows with the rest as it is */
        size_t max_prefetch = SIZE_MAX;
        if (zpi_pipeline_budget_caps(p, &max_prefetch, NULL) != ZP_OK)
            max_prefetch = 2;
        const uint64_t spare = p->mem.budget > p->mem.total ? p->mem.budget - p->mem.total : 0;
        const uint64_t room = 2 + spare / (p->mem.batch_bytes ? p->mem.batch_bytes : 1);
        if (room < max_prefetch)
            max_prefetch = (size_t)room;
        zpi_tune_caps_clamp(&caps, max_prefetch, SIZE_MAX,
                            p->budget_fetch ? p->budget_fetch : SIZE_MAX);
    }
    zpi_op ops[ZPI_MAX_OPS];
    for (int i = 0; i < p->n_ops; i++) {
        ops[i] = p->ops[i];
        ops[i].auto_max = 0;
        if (ops[i].parallelism == ZP_AUTO) {
            ops[i].parallelism = 1;
            ops[i].auto_max = i == 0 ? caps.fetch_parallelism : caps.op_parallelism;
        }
    }
    const int autop = p->cfg.prefetch_batches == ZP_PREFETCH_AUTO;
    const size_t prefetch = !autop ? p->cfg.prefetch_batches
                            : caps.prefetch_batches < ZPI_PREFETCH_AUTO_START ? caps.prefetch_batches
                                                                              : ZPI_PREFETCH_AUTO_START;
    const size_t nbufs = prefetch + 2 + p->balance;
    zp_status st = zpi_outq_init(&p->q, nbufs, rows, cols, p->masking);
    if (st == ZP_OK && autop) {
        zpi_outq_autotune(&p->q, prefetch, caps.prefetch_batches);
    } else if (st == ZP_OK) {
        p->q.tune.prefetch = prefetch; /* (fixed: reported as it is) */
    }
    if (st != ZP_OK) {
        zpi_err_set(&p->fatal, st,
                    "cannot start the pipeline: out of memory for %zu batch buffers of %zu x %zu",
                    nbufs, rows, cols ? cols : (size_t)1);
        return zpi_err_copy(&p->err, &p->fatal);
    }
    zpi_engine_plan plan = {
        .ws = p->ws,
        .threads = p->cfg.threads,
        .epochs = p->cfg.epochs,
        .chunk_samples = p->cfg.chunk_samples,
        .in_flight_chunks = caps.in_flight_chunks,
        .in_flight_follows = p->cfg.in_flight_chunks == 0,
        .shard_cache_bytes = p->cfg.shard_cache_bytes,
        .ops = ops,
        .n_ops = p->n_ops,
        .env = {.ds = zp_worksource_dataset(p->ws),
                .on_bad_record = p->cfg.on_bad_record,
                .log = p->cfg.log,
                .log_user = p->cfg.log_user,
                .tok = p->tok,
                .tok_field = p->tok_field,
                .fetch_delay_us = p->cfg.fetch_delay_us,
                .fixed_ok = p->tok == NULL || p->cfg.pack == ZP_PACK_PAD},
        .pack = {.microbatch = rows,
                 .tokens = p->tok != NULL,
                 .mode = p->cfg.pack,
                 .window = zp_pipeline_pack_window(p),
                 .seq_len = p->cfg.seq_len,
                 .eot = p->tok ? zp_tokenizer_eot(p->tok) : -1,
                 .bos = p->tok ? zp_tokenizer_bos(p->tok) : -1,
                 .nparts = ck->nparts,
                 .first_index = ck->next_batch,
                 .first_offset = ck->restored ? ck->at.token_offset : 0,
                 .first_carry = ck->restored && ck->at.carry,
                 .first_rows = ck->restored ? ck->at.rows : 0,
                 .balance = p->tok ? p->balance : 0,
                 .first_bal_done = ck->restored ? ck->bal_done : 0,
                 .masking = p->tok ? p->masking : 0,
                 .positions = p->positions,
                 .ds = zp_worksource_dataset(p->ws)},
        /* the look-ahead: an automatic one starts off (0 positions, 1
         * task) and rises to its caps (the engine lowers the positions' cap
         * to one block of units ahead) */
        .prefetch_buffer = p->prefetch_buffer == ZP_AUTO ? 0 : p->prefetch_buffer,
        .prefetch_parallelism = p->prefetch_parallelism == ZP_AUTO ? 1 : p->prefetch_parallelism,
        .prefetch_buffer_max = p->prefetch_buffer == ZP_AUTO ? SIZE_MAX : 0,
        .prefetch_parallelism_max = p->prefetch_buffer != 0 && p->prefetch_parallelism == ZP_AUTO
                                        ? caps.op_parallelism
                                        : 0,
        .observe = p->observe,
    };
    st = zpi_engine_start(&plan, &p->q, &p->engine, &p->fatal);
    if (st != ZP_OK)
        return zpi_err_copy(&p->err, &p->fatal);
    zpi_watchdog_arm(&p->wd, &p->q, p->engine, p->cfg.watchdog_seconds, p->cfg.log, p->cfg.log_user);
    return ZP_OK;
}

/* ck->at = *at, with a copy of its list of delivered documents (the batch
 * buffer's goes back to the queue). Out of memory: the list is left out,
 * and a state saved then cannot be re-split (zpi_ckpt.done_lost). */
static void take_at(zpi_ckpt *ck, const zpi_resume_pt *at)
{
    ck->at = *at;
    ck->at.done = ck->done;
    ck->done_lost = 0;
    if (!at->n_done)
        return;
    void *a = ck->done;
    if (zpi_grow(&a, &ck->done_cap, 2 * at->n_done, sizeof *ck->done) != 0) {
        ck->at.n_done = 0;
        ck->done_lost = 1;
        return;
    }
    ck->done = ck->at.done = a;
    memcpy(ck->done, at->done, 2 * at->n_done * sizeof *ck->done);
}

/* Resume point after a delivered batch. */
static void note_resume(zp_pipeline *p, const zpi_batchbuf *bb)
{
    zpi_ckpt *ck = &p->ck;
    ck->next_batch = bb->b.index + 1;
    if (bb->resume.valid)
        take_at(ck, &bb->resume);
    ck->bal_done = bb->bal_done;
    zpi_covtab_fold_batch(&ck->cov, &bb->b);
    if (bb->part_samples)
        for (size_t i = 0; i < ck->nparts; i++) {
            ck->part_samples[i] += bb->part_samples[i];
            ck->part_tokens[i] += bb->part_tokens[i];
        }
    if (ck->phase_samples)
        for (size_t i = 0; i < bb->b.n_samples; i++) {
            const zp_sample *s = &bb->b.samples[i];
            if (s->phase < ck->nphases && s->part < ck->nparts)
                ck->phase_samples[(size_t)s->phase * ck->nparts + s->part]++;
        }
}

/* The skip range holding batch index i, or NULL. */
static zpi_skip *skip_of(zpi_ckpt *ck, uint64_t i)
{
    for (size_t k = ck->n_prior_skips; k < ck->n_skips; k++)
        if (i >= ck->skips[k].first && i <= ck->skips[k].last)
            return &ck->skips[k];
    return NULL;
}

/* A batch of a skipped range: counted in the range, not delivered. */
static void note_skip(zp_pipeline *p, zpi_skip *sk, const zpi_batchbuf *bb)
{
    zpi_ckpt *ck = &p->ck;
    if (bb->b.index == sk->first) { /* the range's first batch */
        sk->from_epoch = ck->at.epoch;
        sk->from_position = ck->at.position;
    }
    sk->samples += bb->b.n_samples;
    sk->tokens += bb->delta.tokens;
    zp_pipeline_counts d = bb->delta;
    d.batches = 1;
    zpi_counts_add(&ck->skipped, &d);
    ck->next_batch = bb->b.index + 1;
    ck->bal_done = bb->bal_done;
    if (bb->resume.valid) {
        take_at(ck, &bb->resume);
        sk->to_epoch = bb->resume.epoch;
        sk->to_position = bb->resume.position;
    }
}

zp_status zp_pipeline_next(zp_pipeline *p, const zp_batch **out)
{
    if (!p)
        return ZP_ERR_INVALID;
    ZPI_RETURN_ERR_IF(!out, &p->err, ZP_ERR_INVALID, "zp_pipeline_next: out = NULL");
    *out = NULL;
    if (p->fatal.code != ZP_OK)
        return zpi_err_copy(&p->err, &p->fatal);
    if (!p->started) {
        zpi_covtab_mark_start(&p->ck.cov, p->ck.restored, &p->ck.at, p->ck.bal_done, p->ws);
        ZPI_FORWARD_IF_ERR(start(p));
    }
    zpi_obs *obs = zpi_engine_obs(p->engine);
    uint64_t t_wait = obs ? zpi_now_ns() : 0;
    zpi_batchbuf *bb;
    uint64_t now = 0;
    zp_status st = zpi_outq_next(&p->q, &bb, &p->err, obs ? &now : NULL);
    zpi_skip *sk;
    while (bb && p->ck.n_skips > p->ck.n_prior_skips && (sk = skip_of(&p->ck, bb->b.index))) {
        note_skip(p, sk, bb);
        st = zpi_outq_next(&p->q, &bb, &p->err, obs ? &now : NULL);
    }
    if (bb) {
        note_resume(p, bb);
        *out = &bb->b;
        if (obs) {
            if (zpi_ctr_get(&obs->first_batch_ns) == 0)
                atomic_store_explicit(&obs->first_batch_ns, now - obs->t_start + 1,
                                      memory_order_relaxed);
            else
                zpi_ctr_add(&obs->stall_ns, now - t_wait);
        }
    }
    return st;
}

/* (pipeline.h) */
uint64_t zp_batch_digest(const zp_batch *b)
{
    XXH64_state_t *h = XXH64_createState();
    XXH64_reset(h, 0);
    if (b->mode == ZP_PACK_RECORDS) {
        for (size_t i = 0; i < b->rows; i++) {
            uint64_t len = b->offsets[i + 1] - b->offsets[i];
            XXH64_update(h, &len, sizeof len);
        }
        XXH64_update(h, b->data, b->offsets[b->rows]);
    } else {
        size_t n = b->rows * b->cols;
        XXH64_update(h, b->tokens, n * sizeof *b->tokens);
        XXH64_update(h, b->loss_mask, n);
        XXH64_update(h, b->segment_ids, n * sizeof *b->segment_ids);
        if (b->position_ids)
            XXH64_update(h, b->position_ids, n * sizeof *b->position_ids);
        if (b->cu_seqlens) {
            XXH64_update(h, b->cu_seqlens, b->n_cu_seqlens * sizeof *b->cu_seqlens);
            XXH64_update(h, &b->max_seqlen, sizeof b->max_seqlen);
        }
        if (b->doc_counts)
            XXH64_update(h, b->doc_counts, b->rows * sizeof *b->doc_counts);
    }
    /* fixed-shape fields (HDF5): every array's bytes, with its name */
    for (size_t k = 0; k < b->n_arrays; k++) {
        const zp_array *a = &b->arrays[k];
        size_t bytes = zp_dtype_size(a->dtype);
        for (int d = 0; d < a->ndim; d++)
            bytes *= (size_t)a->shape[d];
        XXH64_update(h, a->name, strlen(a->name));
        XXH64_update(h, a->data, bytes);
    }
    uint64_t d = XXH64_digest(h);
    XXH64_freeState(h);
    return d;
}

zp_status zp_pipeline_keep_batch(zp_pipeline *p, const zp_batch *b)
{
    if (!p)
        return ZP_ERR_INVALID;
    ZPI_RETURN_ERR_IF(!p->q_ready || !p->started, &p->err, ZP_ERR_STATE,
                      "zp_pipeline_keep_batch: no batch was delivered yet");
    zpi_batchbuf *bb = b ? ZPI_CONTAINER_OF(b, zpi_batchbuf, b) : NULL;
    size_t before = zpi_outq_kept(&p->q);
    ZPI_RETURN_ERR_IF(!bb || zpi_outq_keep(&p->q, bb) != ZP_OK, &p->err, ZP_ERR_INVALID,
                      "zp_pipeline_keep_batch: not the batch the last zp_pipeline_next() returned");
    /* under a budget: at most the plan's kept batches (this one, when newly
     * kept, goes back to being the held batch) */
    size_t cap = (size_t)p->mem.kept_batches;
    if (cap && zpi_outq_kept(&p->q) > before && zpi_outq_kept(&p->q) > cap) {
        zpi_outq_release(&p->q, bb);
        char bb_s[32], one[32];
        zpi_budget_fmt(bb_s, sizeof bb_s, p->mem.budget);
        zpi_budget_fmt(one, sizeof one, p->mem.batch_bytes);
        return zpi_err_set(&p->err, ZP_ERR_LIMIT,
                           "zp_pipeline_keep_batch: %zu batches kept already: memory_budget = "
                           "%s allows %zu kept batches of %s; release one "
                           "(zp_pipeline_release_batch) or raise the budget",
                           cap, bb_s, cap, one);
    }
    return ZP_OK;
}

zp_status zp_pipeline_release_batch(zp_pipeline *p, const zp_batch *b)
{
    /* No message on p: another thread may be inside next(), writing it. */
    if (!p || !b || !p->q_ready)
        return ZP_ERR_INVALID;
    return zpi_outq_release(&p->q, ZPI_CONTAINER_OF(b, zpi_batchbuf, b));
}

size_t zp_pipeline_kept_batches(const zp_pipeline *p)
{
    return p && p->q_ready ? zpi_outq_kept((zpi_outq *)&p->q) : 0;
}

const char *zp_pipeline_errmsg(const zp_pipeline *p) { return p ? zpi_err_msg(&p->err) : ""; }

static void sub_counts(zp_pipeline_counts *a, const zp_pipeline_counts *d)
{
    a->batches -= d->batches;
    a->samples -= d->samples;
    a->padded -= d->padded;
    a->skipped -= d->skipped;
    a->filtered -= d->filtered;
    a->tokens -= d->tokens;
    a->truncated_tokens -= d->truncated_tokens;
    a->pad_tokens -= d->pad_tokens;
    a->cut_documents -= d->cut_documents;
    a->balance_windows -= d->balance_windows;
    a->attn_cost -= d->attn_cost;
    a->attn_peak_before -= d->attn_peak_before;
    a->attn_peak_after -= d->attn_peak_after;
}

void zpi_pipeline_total_counts(const zp_pipeline *p, zp_pipeline_counts *out)
{
    memset(out, 0, sizeof *out);
    if (!p)
        return;
    if (p->q_ready) {
        zpi_outq_counts((zpi_outq *)&p->q, out);
        sub_counts(out, &p->ck.skipped);
    }
    zpi_counts_add(out, &p->ck.base);
}

void zp_pipeline_get_counts(const zp_pipeline *p, zp_pipeline_counts *out)
{
    if (!out)
        return;
    zpi_pipeline_total_counts(p, out);
}

void zp_pipeline_resume_state(const zp_pipeline *p, zp_worksource_state *st)
{
    if (!p->started && p->ws)
        zp_worksource_get_state(p->ws, st);
    else if (!p->started)
        memset(st, 0, sizeof *st);
    else {
        /* the first document not yet started: past a carried one */
        const zpi_resume_pt *at = &p->ck.at;
        st->seed = zp_worksource_get_config(p->ws)->seed;
        st->epoch = at->epoch;
        st->position = at->position + (at->token_offset > 0);
        zpi_worksource_settle(p->ws, &st->epoch, &st->position);
    }
}

int32_t zp_pipeline_eot(const zp_pipeline *p) { return p && p->tok ? zp_tokenizer_eot(p->tok) : -1; }

int32_t zp_pipeline_bos(const zp_pipeline *p) { return p && p->tok ? zp_tokenizer_bos(p->tok) : -1; }

const zp_tokenizer *zp_pipeline_tokenizer(const zp_pipeline *p) { return p ? p->tok : NULL; }

/* ------------------------------------------------------------ for pipeline_state.c */

zpi_ckpt *zpi_pipeline_ckpt(zp_pipeline *p) { return &p->ck; }

zp_worksource *zpi_pipeline_ws(const zp_pipeline *p) { return p->ws; }

int zpi_pipeline_started(const zp_pipeline *p) { return p->started; }

zp_status zpi_pipeline_failed(const zp_pipeline *p)
{
    if (p->fatal.code != ZP_OK)
        return p->fatal.code;
    return p->q_ready ? zpi_outq_failed((zpi_outq *)&p->q) : ZP_OK;
}

zp_status zpi_pipeline_settings_json(const zp_pipeline *p, char **out)
{
    return zpi_pipeline_settings_json_fp(
        p, zp_dataset_fingerprint(zp_worksource_dataset(p->ws)), out);
}

zp_status zpi_pipeline_settings_json_fp(const zp_pipeline *p, uint64_t dataset_fp, char **out)
{
    const zp_worksource_config *wc = zp_worksource_get_config(p->ws);
    const zp_dataset *ds = zp_worksource_dataset(p->ws);
    zpi_buf b = {0};
    int rc = 0;
    rc |= zpi_buf_printf(&b, "{\"dataset\":\"%016llx\",\"parts\":[",
                   (unsigned long long)dataset_fp);
    size_t np = zp_worksource_num_parts(p->ws);
    for (size_t i = 0; i < np; i++) {
        rc |= zpi_buf_puts(&b, i ? ",{\"name\":" : "{\"name\":");
        rc |= zpi_buf_put_json_str(&b, zp_worksource_part_name(p->ws, i));
        rc |= zpi_buf_printf(&b, ",\"shards\":%zu,\"samples\":%llu,\"weight\":%.17g}",
                       wc->n_parts ? wc->parts[i].shards : zp_dataset_num_shards(ds),
                       (unsigned long long)zp_worksource_part_samples(p->ws, i),
                       zp_worksource_part_weight(p->ws, i));
    }
    /* the seed as the state's top level writes it: a JSON integer below
     * 2^63, a decimal string from 2^63 on (beyond what JSON readers take) */
    rc |= zpi_buf_printf(&b,
                         wc->seed > (uint64_t)INT64_MAX ? "],\"seed\":\"%llu\""
                                                        : "],\"seed\":%llu",
                         (unsigned long long)wc->seed);
    rc |= zpi_buf_printf(&b,
                   ",\"epoch_samples\":%llu,\"shuffle\":%d,"
                   "\"shuffle_block_shards\":%u,\"remainder\":\"%s\",\"pack\":\"%s\","
                   "\"microbatch\":%zu",
                   (unsigned long long)zp_worksource_draws_per_epoch(p->ws), wc->shuffle ? 1 : 0,
                   wc->shuffle_block_shards,
                   wc->remainder == ZP_REMAINDER_DROP ? "drop" : "pad",
                   pack_name((int)(p->tok && p->cfg.pack == ZP_PACK_RECORDS ? ZP_PACK_CONCAT
                                                                            : p->cfg.pack)),
                   p->cfg.microbatch_size);
    if (p->tok && p->cfg.pack == ZP_PACK_BESTFIT)
        rc |= zpi_buf_printf(&b, ",\"pack_window\":%zu", zp_pipeline_pack_window(p));
    if (p->tok && p->balance) /* only when on: states saved before stay valid */
        rc |= zpi_buf_printf(&b, ",\"balance\":%zu", p->balance);
    if (p->tok) {
        /* the tokenizer's identity (a built-in name, or a file's kind and
         * content hash: the same file moved is the same tokenizer), and the
         * boundary settings only when given (states saved before them stay
         * valid) */
        rc |= zpi_buf_printf(&b, ",\"seq_len\":%zu,\"tokenizer\":", p->cfg.seq_len);
        rc |= zpi_buf_put_json_str(&b, zp_tokenizer_ident(p->tok));
        if (p->tok_cfg.eot != ZP_TOKEN_DEFAULT)
            rc |= zpi_buf_printf(&b, ",\"eot\":%ld", (long)zp_tokenizer_eot(p->tok));
        if (p->tok_cfg.bos != ZP_TOKEN_DEFAULT)
            rc |= zpi_buf_printf(&b, ",\"bos\":%ld", (long)zp_tokenizer_bos(p->tok));
        if (p->tok_cfg.match_special)
            rc |= zpi_buf_puts(&b, ",\"match_special\":1");
        rc |= zpi_buf_puts(&b, ",\"field\":");
        rc |= zpi_buf_put_json_str(&b, p->tok_field);
    }
    rc |= zpi_buf_puts(&b, ",\"map\":[");
    int first = 1;
    for (int i = 0; i < p->n_ops; i++) {
        if (p->ops[i].kind != ZPI_OP_MAP)
            continue;
        if (!first)
            rc |= zpi_buf_puts(&b, ",");
        first = 0;
        rc |= zpi_buf_put_json_str(&b, p->ops[i].name);
    }
    rc |= zpi_buf_printf(&b, "],\"on_bad_record\":\"%s\"}",
                   p->cfg.on_bad_record == ZP_BAD_RECORD_SKIP ? "skip" : "fail");
    if (rc) {
        zpi_buf_free(&b);
        return ZP_ERR_NOMEM;
    }
    *out = b.p;
    return ZP_OK;
}

/* ------------------------------------------------------------ for observe.c */

int zpi_pipeline_observing(const zp_pipeline *p) { return p->observe; }

zpi_engine *zpi_pipeline_engine(const zp_pipeline *p) { return p->engine; }

size_t zpi_pipeline_ready_batches(zp_pipeline *p) { return p->q_ready ? zpi_outq_ready(&p->q) : 0; }

zpi_err *zpi_pipeline_err(zp_pipeline *p) { return &p->err; }

zpi_watchdog *zpi_pipeline_wd(zp_pipeline *p) { return &p->wd; }

int zpi_pipeline_tuning(zp_pipeline *p, zp_tuned_setting *out, int max)
{
    if (max < 1)
        return 0;
    memset(out, 0, (size_t)max * sizeof *out);
    zp_tuned_setting *t = &out[0];
    zpi_fmt(t->op, sizeof t->op, "output");
    zpi_fmt(t->setting, sizeof t->setting, "prefetch_batches");
    if (p->q_ready) {
        int a = 0;
        size_t cap = 0;
        t->value = (uint32_t)zpi_outq_prefetch(&p->q, &a, &cap, t->why, sizeof t->why);
        t->is_auto = (uint32_t)a;
        t->cap = (uint32_t)cap;
    } else {
        t->is_auto = p->cfg.prefetch_batches == ZP_PREFETCH_AUTO;
        t->value = t->cap =
            (uint32_t)(t->is_auto ? ZPI_PREFETCH_AUTO_START : p->cfg.prefetch_batches);
    }
    int n = 1;
    zpi_op_tuning ot[ZPI_MAX_OPS];
    int k = p->engine ? zpi_engine_tuning(p->engine, ot, ZPI_MAX_OPS) : 0;
    for (int i = 0; i < p->n_ops && n < max; i++, n++) {
        t = &out[n];
        zpi_fmt(t->op, sizeof t->op, "%s", p->ops[i].name);
        zpi_fmt(t->setting, sizeof t->setting, "parallelism");
        if (i < k) {
            t->value = (uint32_t)ot[i].parallelism;
            t->is_auto = ot[i].auto_max > 0;
            t->cap = (uint32_t)(t->is_auto ? ot[i].auto_max : ot[i].parallelism);
            zpi_fmt(t->why, sizeof t->why, "%s", ot[i].why);
        } else {
            t->is_auto = p->ops[i].parallelism == ZP_AUTO;
            t->value = t->cap = t->is_auto ? 1 : (uint32_t)p->ops[i].parallelism;
        }
    }
    /* the prefetch look-ahead, when set: positions ahead, then tasks */
    if (p->prefetch_buffer && n + 2 <= max) {
        zpi_prefetch_tuning pt = {0};
        if (p->engine)
            zpi_engine_prefetch_tuning(p->engine, &pt);
        const int ab = p->prefetch_buffer == ZP_AUTO, ap = p->prefetch_parallelism == ZP_AUTO;
        for (int j = 0; j < 2; j++, n++) {
            t = &out[n];
            zpi_fmt(t->op, sizeof t->op, "prefetch");
            zpi_fmt(t->setting, sizeof t->setting, j == 0 ? "look_ahead" : "parallelism");
            t->is_auto = (uint32_t)(j == 0 ? ab : ap);
            size_t v = j == 0 ? (p->engine ? pt.buffer : ab ? 0 : p->prefetch_buffer)
                              : (p->engine ? pt.parallelism : ap ? 1 : p->prefetch_parallelism);
            size_t cap = j == 0 ? (pt.buffer_max ? pt.buffer_max : v)
                                : (pt.parallelism_max ? pt.parallelism_max : v);
            t->value = (uint32_t)(v > UINT32_MAX ? UINT32_MAX : v);
            t->cap = (uint32_t)(cap > UINT32_MAX ? UINT32_MAX : cap);
            if (t->is_auto && p->engine)
                zpi_fmt(t->why, sizeof t->why, "%s", pt.why);
        }
    }
    return n;
}

size_t zpi_pipeline_prefetch_batches(const zp_pipeline *p)
{
    if (p->q_ready)
        return zpi_outq_prefetch((zpi_outq *)&p->q, NULL, NULL, NULL, 0);
    return p->cfg.prefetch_batches == ZP_PREFETCH_AUTO ? ZPI_PREFETCH_AUTO_START
                                                       : p->cfg.prefetch_batches;
}

const zp_memory_plan *zpi_pipeline_mem(const zp_pipeline *p) { return &p->mem; }
