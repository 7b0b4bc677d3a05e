/*
 * op_fetch.c - the fetch operator (sample ids -> record bytes through the
 * shard cache) and the prefetch body (load a shard ahead of fetch).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/operators.h"
#include "formats/reader.h"

/* A small set of pinned shard units (segments, shard_cache.h) held by one
 * fetch task. */
typedef struct pinset {
    uint32_t idx[16];
    const zpi_shard *sh[16];
    int n;
    uint64_t cache_end_ns; /* observability: when the last cache call ended */
} pinset;

static void pins_release(zpi_shard_cache *cache, pinset *ps)
{
    for (int i = 0; i < ps->n; i++)
        zpi_shard_cache_put(cache, ps->idx[i]);
    ps->n = 0;
}

/* Pins the unit of `shard` that holds `record` into ps (a no-op when it is
 * there). wait 0: when another task is loading it, *out is NULL and
 * nothing is pinned. */
static zp_status pins_get(zpi_shard_cache *cache, _Atomic uint64_t *sync_load_ns,
                          zpi_obs_thread *ot, zpi_activity *a, pinset *ps, uint32_t shard,
                          uint64_t record, int wait, const zpi_shard **out, zpi_err *err)
{
    const uint32_t unit = zpi_shard_cache_unit(cache, shard, record);
    for (int i = 0; i < ps->n; i++)
        if (ps->idx[i] == unit) {
            *out = ps->sh[i];
            return ZP_OK;
        }
    if (ps->n == 16)
        pins_release(cache, ps);
    int loaded = 0;
    uint64_t t0 = ot || sync_load_ns ? zpi_now_ns() : 0;
    zpi_act_item(a, ZP_TASK_LOADING, shard, UINT64_MAX);
    zp_status st = wait ? zpi_shard_cache_get(cache, unit, out, &loaded, err)
                        : zpi_shard_cache_get_unless_loading(cache, unit, out, &loaded, err);
    if (st == ZP_OK && !*out)
        return ZP_OK;
    if (sync_load_ns && st == ZP_OK) /* loaded, or waited for a load */
        atomic_fetch_add_explicit(sync_load_ns, zpi_now_ns() - t0, memory_order_relaxed);
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
    ps->idx[ps->n] = unit;
    ps->sh[ps->n] = *out;
    ps->n++;
    return ZP_OK;
}

/* Starts reading record k of chunk c into the cache when its unit is
 * pinned already: the records of a shuffled chunk lie far apart in the
 * decoded segments (a memory walk the hardware cannot predict), so later
 * ones are asked for while this one is parsed, in two steps: the entry of
 * the offsets table first (data 0), then, two records later, the record's
 * first 1 KiB (the hardware's stream prefetcher carries on from there). */
#define PREFETCH_AHEAD 2
#define PREFETCH_BYTES 1024
static void prefetch_record(const zpi_shard_cache *cache, const pinset *ps, const zpi_chunk *c,
                            size_t k, int data)
{
    if (k >= c->n)
        return;
    const zp_sample *s = &c->samples[k];
    const uint32_t unit = zpi_shard_cache_unit(cache, s->shard, s->record);
    for (int i = 0; i < ps->n; i++) {
        const zpi_shard *sh = ps->sh[i];
        if (ps->idx[i] != unit || !sh->data || s->record < sh->first_record ||
            s->record - sh->first_record >= sh->n_records)
            continue;
        const uint64_t rec = s->record - sh->first_record;
        if (!data) {
            __builtin_prefetch(&sh->offsets[rec], 0, 3);
            return;
        }
        const uint64_t a = sh->offsets[rec], b = sh->offsets[rec + 1];
        const char *p = sh->data + a;
        const uint64_t n = b - a < PREFETCH_BYTES ? b - a : PREFETCH_BYTES;
        for (uint64_t o = 0; o < n; o += 64)
            __builtin_prefetch(p + o, 0, 3);
        return;
    }
}

/* Copies record bytes into the chunk's JSON arena for record r; on failure
 * the chunk fails and the status is returned. */
static zp_status keep_json(zpi_chunk *c, zpi_rec *r, const char *rec, size_t len)
{
    zp_status st = zpi_arena_append(&c->json, &c->json_len, &c->json_cap, rec, len, &r->json_off);
    if (st != ZP_OK) {
        zpi_chunk_fail(c, st, "out of memory copying a record");
        return st;
    }
    r->json_len = len;
    return ZP_OK;
}

/* ------------------------------------------------------------ on demand */

typedef struct bad_ctx {
    const zpi_op_env *env;
    zpi_chunk *c;
} bad_ctx;

static void read_bad(void *ctx, size_t row, zp_status st, const char *msg)
{
    bad_ctx *b = ctx;
    zpi_op_bad_record(b->env, b->c, row, st, msg);
}

typedef struct rec_row {
    uint64_t record;
    size_t row;
} rec_row;

static int rec_row_cmp(const void *a, const void *b)
{
    const rec_row *x = a, *y = b;
    if (x->record != y->record)
        return x->record < y->record ? -1 : 1;
    return x->row < y->row ? -1 : x->row > y->row;
}

/* A tokenize field stored as numbers (an HDF5 integer or float dataset
 * named like the tokenize field): the field, else NULL. */
static const zpi_field *numeric_text_field(const zpi_op_env *env, const zpi_schema *s)
{
    if (!env->tok || !env->tok_field)
        return NULL;
    for (int k = 0; k < s->n; k++)
        if (s->f[k].kind == ZPI_FIELD_FIXED && strcmp(s->f[k].name, env->tok_field) == 0)
            return &s->f[k];
    return NULL;
}

/* The shard's fields against the chunk's and the pipeline's: 0, or -1 with
 * the chunk failed. */
/* A pre-tokenized shard that records the tokenizer that made it (HDF5: its
 * attribute zephon_tokenizer) and names another identity than the
 * pipeline's is refused naming both: its ids would be read as other tokens.
 * A record that is not an identity (older zephon wrote the id as given, a
 * path) is accepted, as zp_pipeline_tokenize accepts it (api/pipeline.c
 * is_identity: BUILTIN or KIND:xxh64:HASH). zp_pipeline_tokenize already
 * checked the shards whose record the dataset learnt when it indexed them;
 * this covers the others (counts from the index store, the manifest). */
static int check_shard_tokenizer(const zpi_op_env *env, zpi_chunk *c, const zpi_shard *sh,
                                 const char *name)
{
    const char *rec = sh->rd->tokenizer;
    const char *mine = zp_tokenizer_ident(env->tok);
    if (!rec || !mine || strcmp(rec, mine) == 0 || (!strstr(rec, ":xxh64:") && strpbrk(rec, "/.")))
        return 0;
    zpi_chunk_fail(c, ZP_ERR_MISMATCH,
                   "shard '%s' was pre-tokenized with the tokenizer '%s' (its attribute "
                   "zephon_tokenizer), this pipeline's is '%s': its ids would be read as other "
                   "tokens (tokenize with the tokenizer that made it)",
                   name, rec, mine);
    return -1;
}

static int check_fields(const zpi_op_env *env, zpi_chunk *c, const zpi_shard *sh, const char *name)
{
    zp_status st = zpi_chunk_set_schema(c, sh->rd->schema);
    if (st != ZP_OK) {
        char a[512], b[512];
        zpi_schema_describe(c->schema, a, sizeof a);
        zpi_schema_describe(sh->rd->schema, b, sizeof b);
        if (st == ZP_ERR_NOMEM)
            zpi_chunk_fail(c, st, "out of memory for the fields of shard '%s'", name);
        else
            zpi_chunk_fail(c, st, "shard '%s': its fields (%s) differ from those of the shards before it (%s): a dataset's shards must have the same fields",
                           name, b, a);
        return -1;
    }
    const zpi_field *nf = numeric_text_field(env, sh->rd->schema);
    if (nf) {
        zpi_chunk_fail(c, ZP_ERR_FORMAT,
                       "shard '%s': field '%s' holds %s numbers (one %s per record), where "
                       "tokenize expects text (a string dataset). If these are token ids, store "
                       "them as a token field: a variable-length integer dataset, or a group "
                       "such as '/tokens' with datasets 'values' and 'offsets' (docs/hdf5.md); if "
                       "the text is in another field, name that field to tokenize",
                       name, nf->name, zp_dtype_name(nf->dtype), nf->ndim ? "array" : "number");
        return -1;
    }
    int has_fixed = 0, has_tokens = 0;
    for (int k = 0; k < sh->rd->schema->n; k++) {
        has_fixed |= sh->rd->schema->f[k].kind == ZPI_FIELD_FIXED;
        has_tokens |= sh->rd->schema->f[k].kind == ZPI_FIELD_TOKENS;
    }
    if (has_fixed && !env->fixed_ok) {
        zpi_chunk_fail(c, ZP_ERR_UNSUPPORTED,
                       "shard '%s': fixed-shape fields need one sample per row: use record mode (no "
                       "tokenize) or pad packing, not concat",
                       name);
        return -1;
    }
    if (has_tokens && !env->tok) {
        zpi_chunk_fail(c, ZP_ERR_UNSUPPORTED,
                       "shard '%s' holds pre-tokenized documents: add tokenize with the tokenizer "
                       "that made them (it gives the EOT that packing needs)",
                       name);
        return -1;
    }
    return has_tokens ? check_shard_tokenizer(env, c, sh, name) : 0;
}

/* Reads every sample of chunk c from row i on that lies in shard sh (read
 * on demand, reader.h) with one read call, and marks their rows done. */
static void read_on_demand(const zpi_op_env *env, zpi_obs_thread *ot, zpi_chunk *c, size_t i,
                           const zpi_shard *sh, unsigned char *done)
{
    const uint32_t shard = c->samples[i].shard;
    const char *name = zp_dataset_shard_name(env->ds, shard);
    if (check_fields(env, c, sh, name) != 0)
        return;
    size_t m = 0;
    for (size_t j = i; j < c->n; j++)
        m += c->samples[j].shard == shard;
    rec_row *rr = malloc(m * sizeof *rr);
    uint64_t *records = malloc(m * sizeof *records);
    size_t *rows = malloc(m * sizeof *rows);
    if (!rr || !records || !rows) {
        zpi_chunk_fail(c, ZP_ERR_NOMEM, "out of memory reading shard '%s'", name);
        goto out;
    }
    m = 0;
    for (size_t j = i; j < c->n; j++) {
        if (c->samples[j].shard != shard)
            continue;
        if (c->samples[j].record >= sh->n_records) {
            zpi_chunk_fail(c, ZP_ERR_FORMAT,
                           "shard '%s': record %llu out of range (%llu records; stale manifest?)",
                           name, (unsigned long long)c->samples[j].record,
                           (unsigned long long)sh->n_records);
            goto out;
        }
        memset(&c->recs[j], 0, sizeof c->recs[j]);
        rr[m].record = c->samples[j].record;
        rr[m].row = j;
        done[j] = 1;
        m++;
    }
    qsort(rr, m, sizeof *rr, rec_row_cmp);
    for (size_t k = 0; k < m; k++) {
        records[k] = rr[k].record;
        rows[k] = rr[k].row;
    }
    bad_ctx bc = {env, c};
    zpi_read_req req = {.out = zpi_chunk_sink(c),
                        .records = records,
                        .rows = rows,
                        .n = m,
                        .text_field = env->tok_field,
                        .bad = read_bad,
                        .bad_ctx = &bc};
    zpi_err err;
    zpi_err_clear(&err);
    uint64_t t0 = ot ? zpi_now_ns() : 0;
    zp_status st = sh->rd->read(sh->rd, &req, &err);
    if (st != ZP_OK)
        zpi_chunk_fail(c, st, "%s", err.msg[0] ? err.msg : "read failed");
    if (ot) {
        uint64_t dt = zpi_now_ns() - t0;
        zpi_ctr_add(&ot->od_reads, 1);
        zpi_ctr_add(&ot->od_read_ns, dt);
        zpi_ctr_add(&ot->od_io_ns, req.io_ns);
        zpi_ctr_add(&ot->od_lock_wait_ns, req.lock_wait_ns);
        zpi_ctr_add(&ot->od_bytes, req.bytes);
        zpi_ctr_add(&ot->bytes_uncompressed, req.bytes);
        zpi_ahist_record(&ot->od_hist, dt);
        /* per record: the read's time shared among its records */
        for (size_t k = 0; k < m; k++)
            zpi_ahist_record(&ot->record_hist, dt / (m ? m : 1));
    }
out:
    free(rr);
    free(records);
    free(rows);
}

/* fetch_delay_us (fault injection): a pause before each chunk. */
static void fetch_delay(const zpi_op_env *env)
{
    if (env->fetch_delay_us) {
        struct timespec ts = {(time_t)(env->fetch_delay_us / 1000000u),
                              (long)(env->fetch_delay_us % 1000000u) * 1000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
}

/* Record i of chunk c from its pinned shard of JSONL lines: its JSON
 * kept, parsed, the tokenize field copied; a bad record reported. 0 with
 * *LEN_OUT its length, or -1 when the chunk failed. */
static int fetch_record(const zpi_op_env *env, zpi_json *json, zpi_chunk *c, size_t i,
                        const zpi_shard *sh, size_t *len_out)
{
    const zp_sample *s = &c->samples[i];
    zpi_rec *r = &c->recs[i];
    memset(r, 0, sizeof *r);
    /* sh holds the shard's records from first_record on (a segment) */
    const uint64_t rec = s->record - sh->first_record;
    if (s->record < sh->first_record || rec >= sh->n_records) {
        zpi_chunk_fail(c, ZP_ERR_FORMAT,
                       "shard '%s': record %llu out of range (%llu records; stale manifest?)",
                       zp_dataset_shard_name(env->ds, s->shard), (unsigned long long)s->record,
                       (unsigned long long)(sh->first_record + sh->n_records));
        return -1;
    }
    uint64_t a = sh->offsets[rec], b = sh->offsets[rec + 1];
    size_t len = (size_t)(b - a - 1);
    /* With tokenize and no map, later operators read only the text:
     * parse the record where it lies in the pinned shard (its buffer has
     * ZPI_JSON_PADDING readable bytes past the end) and copy the text
     * alone; the JSON is copied only when the text is missing, for
     * tokenize's message. Otherwise the chunk keeps a copy of the JSON. */
    if (!env->text_only && keep_json(c, r, sh->data + a, len) != ZP_OK)
        return -1;
    zpi_err jerr;
    zp_status st = zpi_json_parse(json, env->text_only ? sh->data + a : c->json + r->json_off,
                                  len, &jerr);
    if (st != ZP_OK) {
        char m[ZPI_ERRMAX];
        zpi_fmt(m, sizeof m, "shard '%s' line %llu (record %llu): %s",
                zp_dataset_shard_name(env->ds, s->shard), (unsigned long long)s->record + 1,
                (unsigned long long)s->record, jerr.msg);
        zpi_op_bad_record(env, c, i, st, m);
    } else if (env->tok) {
        /* keep the tokenize field now, so tokenize needs no second parse */
        const char *txt;
        size_t tn;
        if (zpi_json_get_string(json, env->tok_field, &txt, &tn) == ZP_OK) {
            if (zpi_arena_append(&c->text, &c->text_len, &c->text_cap, txt, tn, &r->text_off) !=
                ZP_OK) {
                zpi_chunk_fail(c, ZP_ERR_NOMEM, "out of memory copying a text field");
                return -1;
            }
            r->text_len = tn;
            r->flags |= ZPI_REC_TEXT;
        } else if (env->text_only && keep_json(c, r, sh->data + a, len) != ZP_OK) {
            return -1;
        }
    }
    *len_out = len;
    return 0;
}

void zpi_op_fetch(const zpi_op_env *env, zpi_worker *w, zpi_obs_thread *ot, zpi_chunk *c)
{
    zpi_err err;
    zpi_json *json = zpi_worker_json(w, c);
    if (!json)
        return;
    zpi_activity *a = &w->act;
    uint32_t cur = UINT32_MAX; /* the shard being read */
    fetch_delay(env);
    pinset ps = {.n = 0, .cache_end_ns = 0};
    /* First pin the chunk's shards (up to the pin set's size) that no other
     * task is loading, loading those not cached: tasks that start together
     * (the first chunks of a shuffle block need all its shards) then decode
     * different shards in parallel instead of one loading while the others
     * wait for it. An error is left for the loop below, which meets it in
     * stream order. */
    for (size_t i = 0; i < c->n && ps.n < 16; i++) {
        const zpi_shard *sh;
        if (pins_get(env->cache, env->sync_load_ns, ot, a, &ps, c->samples[i].shard,
                     c->samples[i].record, 0, &sh, &err) != ZP_OK)
            break;
    }
    ps.cache_end_ns = 0;
    uint64_t t_rec = ot ? zpi_now_ns() : 0, bytes = 0;
    unsigned char *done = NULL; /* rows already read on demand */
    for (size_t i = 0; i < c->n && c->err.code == ZP_OK; i++) {
        const zp_sample *s = &c->samples[i];
        if (done && done[i])
            continue;
        const zpi_shard *sh;
        zp_status st =
            pins_get(env->cache, env->sync_load_ns, ot, a, &ps, s->shard, s->record, 1, &sh, &err);
        if (st != ZP_OK) {
            zpi_chunk_fail(c, st, "%s", err.msg);
            break;
        }
        if (s->shard != cur ||
            atomic_load_explicit(&a->state, memory_order_relaxed) != ZP_TASK_READING) {
            zpi_act_item(a, ZP_TASK_READING, s->shard, s->record);
            cur = s->shard;
        } else {
            atomic_store_explicit(&a->record1, s->record + 1, memory_order_relaxed);
        }
        if (ps.cache_end_ns) { /* a record's time excludes opening its shard */
            t_rec = ps.cache_end_ns;
            ps.cache_end_ns = 0;
        }
        if (sh->rd) {
            if (!done && !(done = calloc(c->n, 1))) {
                zpi_chunk_fail(c, ZP_ERR_NOMEM, "out of memory fetching a chunk");
                break;
            }
            read_on_demand(env, ot, c, i, sh, done);
            if (ot)
                t_rec = zpi_now_ns();
            continue;
        }
        if (i == 0) /* the records the steps below would have asked for before 0 */
            for (size_t k = 1; k < PREFETCH_AHEAD; k++) {
                prefetch_record(env->cache, &ps, c, k, 1);
                prefetch_record(env->cache, &ps, c, k + PREFETCH_AHEAD, 0);
            }
        prefetch_record(env->cache, &ps, c, i + PREFETCH_AHEAD, 1);
        prefetch_record(env->cache, &ps, c, i + 2 * PREFETCH_AHEAD, 0);
        size_t len;
        if (fetch_record(env, json, c, i, sh, &len) != 0)
            break;
        bytes += len;
        if (ot) {
            uint64_t t = zpi_now_ns();
            zpi_ahist_record(&ot->record_hist, t - t_rec);
            t_rec = t;
        }
    }
    pins_release(env->cache, &ps);
    free(done);
    if (ot) {
        zpi_ctr_add(&ot->records, c->n);
        zpi_ctr_add(&ot->bytes_uncompressed, bytes);
    }
}

void zpi_op_prefetch(const zpi_op_env *env, zpi_obs_thread *ot, uint32_t unit)
{
    zpi_err err;
    const zpi_shard *sh;
    int loaded = 0;
    uint64_t t0 = ot ? zpi_now_ns() : 0;
    if (zpi_shard_cache_get(env->cache, unit, &sh, &loaded, &err) == ZP_OK) {
        if (ot && loaded) {
            zpi_ctr_add(&ot->pf_downloads, 1);
            zpi_ctr_add(&ot->pf_bytes, sh->file_bytes);
            zpi_ahist_record(&ot->pf_hist, zpi_now_ns() - t0);
        }
        zpi_shard_cache_put(env->cache, unit);
    }
}
