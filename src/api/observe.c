/*
 * observe.c - snapshots of a running pipeline and their JSON renderings
 * (the recording side is obs_counters.c).
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "base/obs_counters.h"
#include "zephon/observe.h"
#include "io/fetcher.h"
#include "api/pipeline_internal.h"
#include "base/util.h"
#include "zephon/state.h"

/* ------------------------------------------------------------ snapshots */

static zp_status observability_off(zp_pipeline *p, const char *call)
{
    return zpi_err_set(zpi_pipeline_err(p), ZP_ERR_STATE,
                       "%s: observability is off: call zp_pipeline_enable_observability() before "
                       "the first zp_pipeline_next()",
                       call);
}

/* What every snapshot checks first: a pipeline, somewhere to write, and
 * observability on; `call` names the public function in the message. */
static zp_status snapshot_check(zp_pipeline *p, const void *out, const char *call)
{
    if (!p)
        return ZP_ERR_INVALID;
    if (!out)
        return zpi_err_set(zpi_pipeline_err(p), ZP_ERR_INVALID, "%s: out = NULL", call);
    if (!zpi_pipeline_observing(p))
        return observability_off(p, call);
    return ZP_OK;
}

/* The running engine's counters, or NULL before the first next(). */
static zpi_obs *obs_of(const zp_pipeline *p)
{
    return zpi_engine_obs(zpi_pipeline_engine(p));
}

/* The realized mixture proportions (zp_pipeline_part_counts). */
static void fill_parts(const zp_pipeline *p, zp_metrics_snapshot *m)
{
    const zp_worksource *ws = zpi_pipeline_ws(p);
    size_t np = ws ? zp_worksource_num_parts(ws) : 0;
    uint64_t all_s = 0, all_t = 0;
    for (size_t i = 0; i < np; i++) {
        uint64_t s = 0, t = 0;
        if (zp_pipeline_part_counts(p, i, &s, &t) != ZP_OK)
            s = t = 0;
        all_s += s;
        all_t += t;
        if (i < ZP_OBS_MAX_PARTS) {
            zp_part_metrics *pm = &m->parts[i];
            const char *name = zp_worksource_part_name(ws, i);
            zpi_fmt(pm->name, sizeof pm->name, "%s", name ? name : "");
            pm->weight = zp_worksource_part_weight(ws, i);
            pm->samples = s;
            pm->tokens = t;
        }
    }
    size_t nph = ws ? zp_worksource_num_phases(ws) : 0;
    m->phases_total = (uint32_t)nph;
    m->n_phases = (uint32_t)(nph < ZP_OBS_MAX_PHASES ? nph : ZP_OBS_MAX_PHASES);
    for (uint32_t k = 0; k < m->n_phases; k++) {
        zp_phase_metrics *ph = &m->phases[k];
        ph->start = zp_worksource_phase_start(ws, k);
        ph->samples = 0;
        for (size_t i = 0; i < np; i++) {
            uint64_t s = 0;
            if (zp_pipeline_phase_counts(p, k, i, &s) != ZP_OK)
                s = 0;
            ph->samples += s;
            if (i < ZP_OBS_MAX_PARTS) {
                ph->part_samples[i] = s;
                ph->weight[i] = zp_worksource_phase_weight(ws, k, i);
            }
        }
    }
    m->parts_total = (uint32_t)np;
    m->n_parts = (uint32_t)(np < ZP_OBS_MAX_PARTS ? np : ZP_OBS_MAX_PARTS);
    for (uint32_t i = 0; i < m->n_parts; i++) {
        zp_part_metrics *pm = &m->parts[i];
        pm->sample_fraction = all_s ? (double)pm->samples / (double)all_s : 0;
        pm->token_fraction = all_t ? (double)pm->tokens / (double)all_t : 0;
    }
}

static void require_started(const zpi_obs *o, uint64_t *now, double *wall)
{
    *now = zpi_now_ns();
    *wall = (double)(*now - o->t_start) * 1e-9;
    if (*wall <= 0)
        *wall = 1e-9;
}

zp_status zp_pipeline_metrics_snapshot(zp_pipeline *p, zp_metrics_snapshot *m)
{
    zp_status st = snapshot_check(p, m, __func__);
    if (st != ZP_OK)
        return st;
    memset(m, 0, sizeof *m);
    fill_parts(p, m);
    m->n_tuned = (uint32_t)zpi_pipeline_tuning(p, m->tuned, ZP_OBS_MAX_OPS + 1);
    m->memory = *zpi_pipeline_mem(p);
    zpi_engine *e = zpi_pipeline_engine(p);
    zpi_obs *o = zpi_engine_obs(e);
    if (!o) { /* not started yet */
        m->n_ops = 0;
        return ZP_OK;
    }
    uint64_t now;
    double wall;
    require_started(o, &now, &wall);
    m->wall_seconds = wall;
    m->threads = (uint32_t)zpi_engine_threads(e);
    zp_pipeline_counts c;
    zp_pipeline_get_counts(p, &c);
    m->batches = c.batches;
    m->samples = c.samples;
    m->tokens = c.tokens;
    m->pad_tokens = c.pad_tokens;
    m->cut_documents = c.cut_documents;
    m->padding_fraction =
        c.tokens + c.pad_tokens ? (double)c.pad_tokens / (double)(c.tokens + c.pad_tokens) : 0;
    m->cut_fraction = c.samples ? (double)c.cut_documents / (double)c.samples : 0;
    m->balance_windows = c.balance_windows;
    m->attn_imbalance_before = c.attn_cost ? (double)c.attn_peak_before / (double)c.attn_cost : 0;
    m->attn_imbalance_after = c.attn_cost ? (double)c.attn_peak_after / (double)c.attn_cost : 0;
    uint64_t first = zpi_ctr_get(&o->first_batch_ns);
    m->time_to_first_batch = (double)first * 1e-9;
    m->stall_seconds = (double)zpi_ctr_get(&o->stall_ns) * 1e-9;
    double since_first = first ? wall - m->time_to_first_batch : 0;
    m->stall_fraction = since_first > 0 ? m->stall_seconds / since_first : 0;
    m->batches_per_second = (double)m->batches / wall;
    m->samples_per_second = (double)m->samples / wall;

    zpi_stage_view views[ZP_OBS_MAX_OPS - 1];
    int n = zpi_engine_stages(e, now, views, ZP_OBS_MAX_OPS - 1);
    for (int s = 0; s < n && s < ZP_OBS_MAX_OPS - 1; s++) {
        zp_op_metrics *op = &m->ops[s];
        const zpi_stage_view *v = &views[s];
        zpi_fmt(op->name, sizeof op->name, "%s", v->name);
        op->parallelism = (uint32_t)v->parallelism;
        op->starved_seconds = v->obs.starved_ns * 1e-9;
        op->blocked_seconds = v->obs.blocked_ns * 1e-9;
        op->queue_now = (uint32_t)v->queued;
        op->queue_max = v->obs.queue_max;
        op->queue_mean = v->obs.queue_area / (double)(now - o->t_start);
    }
    for (int s = 0; s < n && s < ZP_OBS_MAX_OPS - 1; s++) {
        zp_op_metrics *op = &m->ops[s];
        uint64_t busy = 0, in = 0, out = 0;
        for (int t = 0; t < o->threads; t++) {
            busy += zpi_ctr_get(&o->th[t].busy_ns[s]);
            in += zpi_ctr_get(&o->th[t].items_in[s]);
            out += zpi_ctr_get(&o->th[t].items_out[s]);
        }
        op->busy_seconds = (double)busy * 1e-9;
        op->items_in = in;
        op->items_out = out;
        op->items_per_second = (double)out / wall;
        op->utilization = op->busy_seconds / ((double)op->parallelism * wall);
    }
    /* the ordered batch stage */
    zp_op_metrics *b = &m->ops[n < ZP_OBS_MAX_OPS - 1 ? n : ZP_OBS_MAX_OPS - 1];
    zpi_fmt(b->name, sizeof b->name, "batch");
    b->parallelism = 1;
    b->busy_seconds = (double)zpi_ctr_get(&o->batch_busy_ns) * 1e-9;
    b->blocked_seconds = (double)zpi_ctr_get(&o->batch_blocked_ns) * 1e-9;
    b->starved_seconds = wall - b->busy_seconds - b->blocked_seconds;
    if (b->starved_seconds < 0)
        b->starved_seconds = 0;
    b->items_in = zpi_ctr_get(&o->batch_items);
    b->items_out = b->items_in;
    b->items_per_second = (double)b->items_out / wall;
    b->utilization = b->busy_seconds / wall;
    b->queue_now = (uint32_t)zpi_pipeline_ready_batches(p);
    b->queue_max = (uint32_t)zpi_pipeline_prefetch_batches(p);
    m->n_ops = (uint32_t)(n < ZP_OBS_MAX_OPS - 1 ? n + 1 : ZP_OBS_MAX_OPS);
    return ZP_OK;
}

zp_status zp_pipeline_fetch_timing_snapshot(zp_pipeline *p, zp_fetch_timing *f)
{
    zp_status st = snapshot_check(p, f, __func__);
    if (st != ZP_OK)
        return st;
    memset(f, 0, sizeof *f);
    zp_hist_init(&f->open_ns);
    zp_hist_init(&f->record_ns);
    zp_hist_init(&f->ondemand_ns);
    f->slowest_shard = -1;
    zpi_obs *o = obs_of(p);
    if (!o)
        return ZP_OK;
    uint64_t slow = 0;
    for (int t = 0; t < o->threads; t++) {
        const zpi_obs_thread *th = &o->th[t];
        f->shards_opened += zpi_ctr_get(&th->shards_opened);
        f->open_seconds += (double)zpi_ctr_get(&th->open_ns) * 1e-9;
        f->read_seconds += (double)zpi_ctr_get(&th->read_ns) * 1e-9;
        f->decompress_seconds += (double)zpi_ctr_get(&th->decompress_ns) * 1e-9;
        f->wait_seconds += (double)zpi_ctr_get(&th->wait_ns) * 1e-9;
        f->bytes_compressed += zpi_ctr_get(&th->bytes_compressed);
        f->bytes_uncompressed += zpi_ctr_get(&th->bytes_uncompressed);
        f->records += zpi_ctr_get(&th->records);
        f->fetch_seconds += (double)zpi_ctr_get(&th->busy_ns[0]) * 1e-9;
        uint64_t sl = zpi_ctr_get(&th->slowest_ns);
        if (sl > slow) {
            slow = sl;
            f->slowest_shard = (int64_t)zpi_ctr_get(&th->slowest_shard_plus1) - 1;
        }
        zpi_ahist_read(&th->open_hist, &f->open_ns);
        zpi_ahist_read(&th->record_hist, &f->record_ns);
        f->ondemand_reads += zpi_ctr_get(&th->od_reads);
        f->ondemand_bytes += zpi_ctr_get(&th->od_bytes);
        f->ondemand_seconds += (double)zpi_ctr_get(&th->od_read_ns) * 1e-9;
        f->ondemand_io_seconds += (double)zpi_ctr_get(&th->od_io_ns) * 1e-9;
        f->hdf5_lock_wait_seconds += (double)zpi_ctr_get(&th->od_lock_wait_ns) * 1e-9;
        zpi_ahist_read(&th->od_hist, &f->ondemand_ns);
    }
    f->slowest_shard_seconds = (double)slow * 1e-9;
    return ZP_OK;
}

zp_status zp_pipeline_prefetch_timing_snapshot(zp_pipeline *p, zp_prefetch_timing *f)
{
    zp_status st = snapshot_check(p, f, __func__);
    if (st != ZP_OK)
        return st;
    memset(f, 0, sizeof *f);
    zp_hist_init(&f->latency_ns);
    zpi_obs *o = obs_of(p);
    if (!o)
        return ZP_OK;
    for (int t = 0; t < o->threads; t++) {
        const zpi_obs_thread *th = &o->th[t];
        f->downloads += zpi_ctr_get(&th->pf_downloads);
        f->bytes += zpi_ctr_get(&th->pf_bytes);
        f->wait_seconds += (double)zpi_ctr_get(&th->wait_ns) * 1e-9;
        zpi_ahist_read(&th->pf_hist, &f->latency_ns);
    }
    zpi_fetcher_stats fs;
    if (zpi_engine_fetcher_stats(zpi_pipeline_engine(p), &fs)) {
        /* remote shards: prefetch downloads them into the shard cache on disk */
        f->downloads = fs.xfer.downloads;
        f->bytes = fs.xfer.bytes;
        f->latency_ns = fs.xfer.latency_ns;
        f->retries = fs.xfer.retries;
        f->cache_hits = fs.hits;
        f->cache_misses = fs.misses;
        f->cache_evictions = fs.cache.evictions;
        f->cache_bytes = fs.cache.bytes_in_cache;
        f->wait_seconds = (double)fs.wait_ns * 1e-9;
        f->peer_shards = fs.peer_shards;
        f->peer_bytes = fs.peer_bytes;
        f->peer_seconds = (double)fs.peer_ns * 1e-9;
        f->peer_fallbacks = fs.peer_fallbacks;
        f->peer_served = fs.peer_served;
        f->peer_served_bytes = fs.peer_served_bytes;
        return ZP_OK;
    }
    zpi_shard_cache_stats cs;
    zpi_engine_cache_stats(zpi_pipeline_engine(p), &cs);
    f->cache_hits = cs.hits;
    f->cache_misses = cs.misses;
    f->cache_evictions = cs.evictions;
    f->cache_bytes = cs.bytes_resident;
    f->retries = 0; /* local storage has no transfers to retry */
    return ZP_OK;
}

/* ------------------------------------------------------------ JSON */

static json_t *hist_json(const zp_hist *h)
{
    return json_pack("{s:I,s:f,s:f,s:f,s:f,s:f,s:f}", "count", (json_int_t)h->count,
                     "mean_s", h->count ? (double)h->sum_ns / (double)h->count * 1e-9 : 0.0,
                     "p50_s", (double)zp_hist_quantile(h, 0.50) * 1e-9,
                     "p90_s", (double)zp_hist_quantile(h, 0.90) * 1e-9,
                     "p99_s", (double)zp_hist_quantile(h, 0.99) * 1e-9,
                     "max_s", (double)h->max_ns * 1e-9,
                     "min_s", h->count ? (double)h->min_ns * 1e-9 : 0.0);
}

static zp_status dump(json_t *j, char **out)
{
    if (!j)
        return ZP_ERR_NOMEM;
    *out = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(j);
    return *out ? ZP_OK : ZP_ERR_NOMEM;
}

zp_status zp_metrics_json(const zp_metrics_snapshot *m, char **out)
{
    json_t *ops = json_array();
    for (uint32_t i = 0; i < m->n_ops && i < ZP_OBS_MAX_OPS; i++) {
        const zp_op_metrics *op = &m->ops[i];
        json_array_append_new(
            ops, json_pack("{s:s,s:i,s:I,s:I,s:f,s:f,s:f,s:i,s:f,s:i,s:f,s:f}", "name", op->name,
                           "parallelism", (int)op->parallelism, "items_in", (json_int_t)op->items_in,
                           "items_out", (json_int_t)op->items_out, "busy_seconds", op->busy_seconds,
                           "starved_seconds", op->starved_seconds, "blocked_seconds",
                           op->blocked_seconds, "queue_now", (int)op->queue_now, "queue_mean",
                           op->queue_mean, "queue_max", (int)op->queue_max, "items_per_second",
                           op->items_per_second, "utilization", op->utilization));
    }
    json_t *j = json_pack(
        "{s:s,s:f,s:f,s:I,s:I,s:I,s:f,s:f,s:f,s:f,s:i,s:o}", "snapshot", "metrics", "wall_seconds",
        m->wall_seconds, "time_to_first_batch", m->time_to_first_batch, "batches",
        (json_int_t)m->batches, "samples", (json_int_t)m->samples, "tokens", (json_int_t)m->tokens,
        "stall_seconds", m->stall_seconds, "stall_fraction", m->stall_fraction, "batches_per_second",
        m->batches_per_second, "samples_per_second", m->samples_per_second, "threads",
        (int)m->threads, "operators", ops);
    json_t *parts = json_array();
    for (uint32_t i = 0; i < m->n_parts && i < ZP_OBS_MAX_PARTS; i++) {
        const zp_part_metrics *pm = &m->parts[i];
        json_array_append_new(
            parts, json_pack("{s:s,s:f,s:I,s:I,s:f,s:f}", "name", pm->name, "weight", pm->weight,
                             "samples", (json_int_t)pm->samples, "tokens", (json_int_t)pm->tokens,
                             "sample_fraction", pm->sample_fraction, "token_fraction",
                             pm->token_fraction));
    }
    if (j) {
        json_object_set_new(j, "pad_tokens", json_integer((json_int_t)m->pad_tokens));
        json_object_set_new(j, "cut_documents", json_integer((json_int_t)m->cut_documents));
        json_object_set_new(j, "padding_fraction", json_real(m->padding_fraction));
        json_object_set_new(j, "cut_fraction", json_real(m->cut_fraction));
        json_t *tl = json_array();
        for (uint32_t i = 0; i < m->n_tuned && i < ZP_OBS_MAX_OPS + 1; i++) {
            const zp_tuned_setting *t = &m->tuned[i];
            json_t *o = json_object();
            json_object_set_new(o, "op", json_string(t->op));
            json_object_set_new(o, "setting", json_string(t->setting));
            json_object_set_new(o, "value", json_integer(t->value));
            json_object_set_new(o, "auto", json_boolean(t->is_auto));
            json_object_set_new(o, "cap", json_integer(t->cap));
            json_object_set_new(o, "why", json_string(t->why));
            json_array_append_new(tl, o);
        }
        json_object_set_new(j, "tuning", tl);
        if (m->balance_windows) {
            json_object_set_new(j, "balance_windows",
                                json_integer((json_int_t)m->balance_windows));
            json_object_set_new(j, "attn_imbalance_before", json_real(m->attn_imbalance_before));
            json_object_set_new(j, "attn_imbalance_after", json_real(m->attn_imbalance_after));
        }
        json_object_set_new(j, "parts", parts);
        json_object_set_new(j, "parts_total", json_integer((json_int_t)m->parts_total));
        json_t *phases = json_array();
        for (uint32_t k = 0; phases && k < m->n_phases && k < ZP_OBS_MAX_PHASES; k++) {
            const zp_phase_metrics *ph = &m->phases[k];
            json_t *pp = json_array();
            for (uint32_t i = 0; pp && i < m->n_parts && i < ZP_OBS_MAX_PARTS; i++)
                json_array_append_new(
                    pp, json_pack("{s:f,s:I,s:f}", "weight", ph->weight[i], "samples",
                                  (json_int_t)ph->part_samples[i], "fraction",
                                  ph->samples ? (double)ph->part_samples[i] / (double)ph->samples
                                              : 0.0));
            json_array_append_new(phases, json_pack("{s:I,s:I,s:o}", "start", (json_int_t)ph->start,
                                                    "samples", (json_int_t)ph->samples, "parts",
                                                    pp ? pp : json_array()));
        }
        json_object_set_new(j, "phases", phases ? phases : json_array());
        json_object_set_new(j, "phases_total", json_integer((json_int_t)m->phases_total));
        if (m->memory.budget) {
            const zp_memory_plan *mp = &m->memory;
            json_object_set_new(
                j, "memory",
                json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}",
                          "budget", (json_int_t)mp->budget, "total", (json_int_t)mp->total,
                          "batch_bytes", (json_int_t)mp->batch_bytes, "queue_batches",
                          (json_int_t)mp->queue_batches, "queue_bytes",
                          (json_int_t)mp->queue_bytes, "in_flight_chunks",
                          (json_int_t)mp->in_flight_chunks, "chunk_bytes",
                          (json_int_t)mp->chunk_bytes, "chunks_bytes", (json_int_t)mp->chunks_bytes,
                          "pack_bytes", (json_int_t)mp->pack_bytes, "cache_shards",
                          (json_int_t)mp->cache_shards, "shard_bytes", (json_int_t)mp->shard_bytes,
                          "cache_bytes", (json_int_t)mp->cache_bytes, "cache_budget",
                          (json_int_t)mp->cache_budget, "kept_batches",
                          (json_int_t)mp->kept_batches, "kept_bytes", (json_int_t)mp->kept_bytes,
                          "cache_loads", (json_int_t)mp->cache_loads));
        }
    } else {
        json_decref(parts);
    }
    return dump(j, out);
}

zp_status zp_fetch_timing_json(const zp_fetch_timing *f, char **out)
{
    json_t *j = json_pack(
        "{s:s,s:I,s:f,s:f,s:f,s:f,s:f,s:I,s:I,s:I,s:o,s:o,s:I,s:f}", "snapshot", "fetch_timing",
        "shards_opened", (json_int_t)f->shards_opened, "open_seconds", f->open_seconds,
        "read_seconds", f->read_seconds, "decompress_seconds", f->decompress_seconds,
        "wait_seconds", f->wait_seconds, "fetch_seconds", f->fetch_seconds, "bytes_compressed",
        (json_int_t)f->bytes_compressed, "bytes_uncompressed", (json_int_t)f->bytes_uncompressed,
        "records", (json_int_t)f->records, "shard_open", hist_json(&f->open_ns), "record_read",
        hist_json(&f->record_ns), "slowest_shard", (json_int_t)f->slowest_shard,
        "slowest_shard_seconds", f->slowest_shard_seconds);
    if (j) {
        json_t *od = json_pack("{s:I,s:I,s:f,s:f,s:f,s:o}", "reads", (json_int_t)f->ondemand_reads,
                               "bytes", (json_int_t)f->ondemand_bytes, "seconds",
                               f->ondemand_seconds, "io_seconds", f->ondemand_io_seconds,
                               "hdf5_lock_wait_seconds", f->hdf5_lock_wait_seconds, "read",
                               hist_json(&f->ondemand_ns));
        if (!od || json_object_set_new(j, "ondemand", od) != 0) {
            json_decref(j);
            j = NULL;
        }
    }
    return dump(j, out);
}

zp_status zp_prefetch_timing_json(const zp_prefetch_timing *f, char **out)
{
    json_t *j = json_pack("{s:s,s:I,s:I,s:o,s:I,s:I,s:I,s:I,s:I,s:f,s:I,s:I,s:f,s:I,s:I,s:I}",
                          "snapshot",
                          "prefetch_timing", "downloads", (json_int_t)f->downloads, "bytes",
                          (json_int_t)f->bytes, "latency", hist_json(&f->latency_ns), "retries",
                          (json_int_t)f->retries, "cache_hits", (json_int_t)f->cache_hits,
                          "cache_misses", (json_int_t)f->cache_misses, "cache_evictions",
                          (json_int_t)f->cache_evictions, "cache_bytes",
                          (json_int_t)f->cache_bytes, "wait_seconds", f->wait_seconds,
                          "peer_shards", (json_int_t)f->peer_shards, "peer_bytes",
                          (json_int_t)f->peer_bytes, "peer_seconds", f->peer_seconds,
                          "peer_fallbacks", (json_int_t)f->peer_fallbacks, "peer_served",
                          (json_int_t)f->peer_served, "peer_served_bytes",
                          (json_int_t)f->peer_served_bytes);
    return dump(j, out);
}
