/*
 * op_fetch.c - the fetch operator (sample ids -> record bytes through the
 * shard cache) and the prefetch body (load a shard ahead of fetch).
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "operators.h"

/* A small set of pinned shards held by one fetch task. */
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

/* Pins `shard` into ps (a no-op when it is there). wait 0: when another
 * task is loading it, *out is NULL and nothing is pinned. */
static zp_status pins_get(zpi_shard_cache *cache, zpi_obs_thread *ot, pinset *ps, uint32_t shard,
                          int wait, const zpi_shard **out, char *err, size_t errcap)
{
    for (int i = 0; i < ps->n; i++)
        if (ps->idx[i] == shard) {
            *out = ps->sh[i];
            return ZP_OK;
        }
    if (ps->n == 16)
        pins_release(cache, ps);
    int loaded = 0;
    uint64_t t0 = ot ? zpi_now_ns() : 0;
    zp_status st = wait ? zpi_shard_cache_get(cache, shard, out, &loaded, err, errcap)
                        : zpi_shard_cache_get_unless_loading(cache, shard, out, &loaded, err,
                                                             errcap);
    if (st == ZP_OK && !*out)
        return ZP_OK;
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

void zpi_op_fetch(const zpi_op_env *env, zpi_worker *w, zpi_obs_thread *ot, zpi_chunk *c)
{
    char err[ZPI_ERRMAX];
    zpi_json *json = zpi_worker_json(w, c);
    if (!json)
        return;
    if (env->fetch_delay_us) {
        struct timespec ts = {(time_t)(env->fetch_delay_us / 1000000u),
                              (long)(env->fetch_delay_us % 1000000u) * 1000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    pinset ps = {.n = 0, .cache_end_ns = 0};
    /* First pin the chunk's shards (up to the pin set's size) that no other
     * task is loading, loading those not cached: tasks that start together
     * (the first chunks of a shuffle block need all its shards) then decode
     * different shards in parallel instead of one loading while the others
     * wait for it. An error is left for the loop below, which meets it in
     * stream order. */
    for (size_t i = 0; i < c->n && ps.n < 16; i++) {
        const zpi_shard *sh;
        if (pins_get(env->cache, ot, &ps, c->samples[i].shard, 0, &sh, err, sizeof err) != ZP_OK)
            break;
    }
    ps.cache_end_ns = 0;
    uint64_t t_rec = ot ? zpi_now_ns() : 0, bytes = 0;
    for (size_t i = 0; i < c->n && c->err.code == ZP_OK; i++) {
        const zp_sample *s = &c->samples[i];
        const zpi_shard *sh;
        zp_status st = pins_get(env->cache, ot, &ps, s->shard, 1, &sh, err, sizeof err);
        if (st != ZP_OK) {
            zpi_chunk_fail(c, st, "%s", err);
            break;
        }
        if (ps.cache_end_ns) { /* a record's time excludes opening its shard */
            t_rec = ps.cache_end_ns;
            ps.cache_end_ns = 0;
        }
        zpi_rec *r = &c->recs[i];
        memset(r, 0, sizeof *r);
        if (s->record >= sh->n_records) {
            zpi_chunk_fail(c, ZP_ERR_FORMAT,
                           "shard '%s': record %llu out of range (%llu records; stale manifest?)",
                           zp_dataset_shard_name(env->ds, s->shard), (unsigned long long)s->record,
                           (unsigned long long)sh->n_records);
            break;
        }
        uint64_t a = sh->offsets[s->record], b = sh->offsets[s->record + 1];
        size_t len = (size_t)(b - a - 1);
        /* With tokenize and no map, later operators read only the text:
         * parse the record where it lies in the pinned shard (its buffer has
         * ZPI_JSON_PADDING readable bytes past the end) and copy the text
         * alone; the JSON is copied only when the text is missing, for
         * tokenize's message. Otherwise the chunk keeps a copy of the JSON. */
        if (!env->text_only && keep_json(c, r, sh->data + a, len) != ZP_OK)
            break;
        char jerr[256];
        st = zpi_json_parse(json, env->text_only ? sh->data + a : c->json + r->json_off, len, jerr,
                            sizeof jerr);
        if (st != ZP_OK) {
            char m[ZPI_ERRMAX];
            zpi_fmt(m, sizeof m, "shard '%s' line %llu (record %llu): %s",
                    zp_dataset_shard_name(env->ds, s->shard), (unsigned long long)s->record + 1,
                    (unsigned long long)s->record, jerr);
            zpi_op_bad_record(env, c, i, st, m);
        } else if (env->tok) {
            /* keep the tokenize field now, so tokenize needs no second parse */
            const char *txt;
            size_t tn;
            if (zpi_json_get_string(json, env->tok_field, &txt, &tn) == ZP_OK) {
                if (zpi_arena_append(&c->text, &c->text_len, &c->text_cap, txt, tn, &r->text_off) !=
                    ZP_OK) {
                    zpi_chunk_fail(c, ZP_ERR_NOMEM, "out of memory copying a text field");
                    break;
                }
                r->text_len = tn;
                r->flags |= ZPI_REC_TEXT;
            } else if (env->text_only && keep_json(c, r, sh->data + a, len) != ZP_OK) {
                break;
            }
        }
        bytes += len;
        if (ot) {
            uint64_t t = zpi_now_ns();
            zpi_ahist_record(&ot->record_hist, t - t_rec);
            t_rec = t;
        }
    }
    pins_release(env->cache, &ps);
    if (ot) {
        zpi_ctr_add(&ot->records, c->n);
        zpi_ctr_add(&ot->bytes_uncompressed, bytes);
    }
}

void zpi_op_prefetch(const zpi_op_env *env, zpi_obs_thread *ot, uint32_t shard)
{
    char err[ZPI_ERRMAX];
    const zpi_shard *sh;
    int loaded = 0;
    uint64_t t0 = ot ? zpi_now_ns() : 0;
    if (zpi_shard_cache_get(env->cache, shard, &sh, &loaded, err, sizeof err) == ZP_OK) {
        if (ot && loaded) {
            zpi_ctr_add(&ot->pf_downloads, 1);
            zpi_ctr_add(&ot->pf_bytes, sh->file_bytes);
            zpi_ahist_record(&ot->pf_hist, zpi_now_ns() - t0);
        }
        zpi_shard_cache_put(env->cache, shard);
    }
}
