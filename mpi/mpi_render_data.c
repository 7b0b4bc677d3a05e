/* mpi_render_data.c - the cluster report as data: JSON (report.json)
 * and CSV (report.csv, one row per rank; windows.csv, one row per window
 * and rank). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mpi_internal.h"

static json_t *jreal(double v) { return isfinite(v) ? json_real(v) : json_null(); }
static json_t *jint(uint64_t v) { return json_integer((json_int_t)v); }

/* A rank's record, a node's or the cluster's totals (rank -1); host NULL
 * for the totals. */
static json_t *stats_json(const zp_mpi_rank_stats *s, const char *host)
{
    json_t *o = json_object();
    if (s->rank >= 0)
        json_object_set_new(o, "rank", json_integer(s->rank));
    if (s->node >= 0)
        json_object_set_new(o, "node", json_integer(s->node));
    if (s->rank >= 0) {
        json_object_set_new(o, "local_rank", json_integer(s->local_rank));
        json_object_set_new(o, "valid", json_boolean(s->valid));
        /* the binding (zp_mpi_suggested_threads) and stall notices sent */
        json_object_set_new(o, "cores", jint(s->cores));
        json_object_set_new(o, "sharing", jint(s->sharing));
        json_object_set_new(o, "node_cores", jint(s->node_cores));
        json_object_set_new(o, "stall_notices", jint(s->stall_notices));
        /* autotune: the values in use, and which are automatic */
        json_t *tu = json_object(), *au = json_array();
        json_object_set_new(tu, "prefetch_batches", jint(s->tuned_prefetch_batches));
        json_object_set_new(tu, "fetch_parallelism", jint(s->tuned_fetch));
        if (s->tuned_tokenize)
            json_object_set_new(tu, "tokenize_parallelism", jint(s->tuned_tokenize));
        static const char *names[3] = {"prefetch_batches", "fetch_parallelism",
                                       "tokenize_parallelism"};
        for (int k = 0; k < 3; k++)
            if (s->tuned_auto & (1u << k))
                json_array_append_new(au, json_string(names[k]));
        json_object_set_new(tu, "auto", au);
        json_object_set_new(o, "tuning", tu);
    } else {
        json_object_set_new(o, "ranks", json_integer(s->local_rank));
    }
    json_object_set_new(o, "threads", jint(s->threads));
#define JU(f) json_object_set_new(o, #f, jint(s->f))
#define JD(f, name) json_object_set_new(o, name, jreal(s->f))
    JU(batches);
    JU(samples);
    JU(tokens);
    JU(records);
    JU(bytes_read);
    JU(bytes_fetched);
    JU(shards_opened);
    JU(downloads);
    JU(retries);
    JU(cache_hits);
    JU(cache_misses);
    JU(peer_shards);
    JU(peer_bytes);
    JU(peer_fallbacks);
    JU(peer_served);
    JU(peer_served_bytes);
    JD(peer_seconds, "peer_s");
    JU(padded);
    JU(skipped);
    JU(batches_dropped);
    JD(wall, "wall_s");
    JD(first_batch, "first_batch_s");
    JD(stall, "stall_s");
    JD(stall_fraction, "stall_fraction");
    JD(fetch, "fetch_s");
    JD(open, "open_s");
    JD(read, "read_s");
    JD(decompress, "decompress_s");
    JD(fetch_wait, "fetch_wait_s");
    JD(transfer, "transfer_s");
    JD(sync, "sync_s");
    JD(slowest_shard, "slowest_shard_s");
    json_object_set_new(o, "slowest_shard_index", json_integer(s->slowest_shard_index));
    JD(slowest_record, "slowest_record_s");
    JD(step, "step_s");
    JD(fetch_per_batch, "fetch_per_batch_s");
    JD(samples_per_second, "samples_per_s");
    JD(bytes_per_second, "bytes_per_s");
    JD(cache_hit_rate, "cache_hit_rate");
    JU(pad_tokens);
    JU(cut_documents);
    JD(padding_fraction, "padding_fraction");
    JD(cut_fraction, "cut_fraction");
    JU(win_batches);
    JD(win_seconds, "win_s");
    JD(win_fetch_per_batch, "win_fetch_per_batch_s");
    JD(win_stall_fraction, "win_stall_fraction");
    JU(ondemand_reads);
    JU(ondemand_bytes);
    JD(ondemand, "ondemand_s");
    JD(ondemand_io, "ondemand_io_s");
    JD(hdf5_lock_wait, "hdf5_lock_wait_s");
#undef JU
#undef JD
    if (host)
        json_object_set_new(o, "host", json_string(host));
    return o;
}

/* The job's accelerator utilisation (mpi_au.c). */
static json_t *au_json(const zp_cluster_report *r)
{
    zpi_mpi_au a;
    zpi_mpi_au_of(r, &a);
    json_t *o = json_object();
    json_object_set_new(o, "job", jreal(a.job));
    json_object_set_new(o, "threshold", json_real(ZPI_MPI_AU_THRESHOLD));
    json_object_set_new(o, "passes", json_boolean(a.passes));
    json_object_set_new(o, "ranks", json_integer(a.ranks));
    json_object_set_new(o, "min", jreal(a.min));
    json_object_set_new(o, "min_rank", a.min_rank >= 0 ? json_integer(a.min_rank) : json_null());
    json_object_set_new(o, "ranks_below", json_integer(a.below));
    return o;
}

/* The nodes and the ranks each holds. */
static json_t *nodes_table_json(const zp_cluster_report *r)
{
    json_t *hosts = json_array();
    for (int j = 0; j < r->nodes; j++) {
        char list[256];
        zpi_mpi_node_ranks(r, j, list, sizeof list);
        json_t *h = json_object();
        json_object_set_new(h, "node", json_integer(j));
        json_object_set_new(h, "host", json_string(zp_cluster_report_node_host(r, j)));
        json_object_set_new(h, "ranks", json_string(list));
        json_array_append_new(hosts, h);
    }
    return hosts;
}

/* The dataset the ranks agreed on, or null. */
static json_t *dataset_json(const zp_cluster_report *r)
{
    if (r->info.have_dataset) {
        json_t *d = json_object();
        char fp[24];
        zpi_fmt(fp, sizeof fp, "%016llx", (unsigned long long)r->info.ds_fingerprint);
        json_object_set_new(d, "shards", jint(r->info.ds_shards));
        json_object_set_new(d, "samples", jint(r->info.ds_samples));
        json_object_set_new(d, "bytes", jint(r->info.ds_bytes));
        json_object_set_new(d, "fingerprint", json_string(fp));
        return d;
    }
    return json_null();
}

/* The straggler criterion. */
static json_t *criterion_json(const zp_cluster_report *r)
{
    json_t *cr = json_object();
    json_object_set_new(cr, "ratio", json_real(r->cfg.straggler_ratio));
    json_object_set_new(cr, "z", json_real(r->cfg.straggler_z));
    json_object_set_new(cr, "min_stall", json_real(r->cfg.straggler_min_stall));
    json_object_set_new(cr, "windows", json_integer(r->cfg.straggler_windows));
    return cr;
}

/* The job, its ranks and nodes, the settings, the dataset, the criterion
 * and the cost of the report. */
static json_t *header_json(const zp_cluster_report *r)
{
    json_t *hd = json_object();
    json_object_set_new(hd, "job_id", json_string(r->job_id));
    json_object_set_new(hd, "ranks", json_integer(r->size));
    json_object_set_new(hd, "nodes", json_integer(r->nodes));
    json_object_set_new(hd, "ranks_per_node_min", json_integer(r->ranks_per_node_min));
    json_object_set_new(hd, "ranks_per_node_max", json_integer(r->ranks_per_node_max));
    json_object_set_new(hd, "threads_per_rank_min", json_integer(r->threads_min));
    json_object_set_new(hd, "threads_per_rank_max", json_integer(r->threads_max));
    json_object_set_new(hd, "nodes_table", nodes_table_json(r));
    json_t *rh = json_array();
    for (int i = 0; i < r->size; i++)
        json_array_append_new(rh, json_string(zp_cluster_report_rank_host(r, i)));
    json_object_set_new(hd, "rank_host", rh);
    zpi_sbuf sb = {0};
    zpi_mpi_settings_text(&r->info, &sb);
    json_object_set_new(hd, "settings", json_string(sb.p ? sb.p : ""));
    free(sb.p);
    json_object_set_new(hd, "dataset", dataset_json(r));
    json_object_set_new(hd, "criterion", criterion_json(r));
    json_object_set_new(hd, "report_seconds", json_real(r->seconds));
    json_object_set_new(hd, "analysis_seconds", json_real(r->analysis_seconds));
    json_object_set_new(hd, "gather_bytes_per_rank", jint(r->gather_bytes));
    return hd;
}

/* The statistics of each metric over the ranks, and the throughput. */
static json_t *summary_json(const zp_cluster_report *r)
{
    json_t *sum = json_object();
    for (int k = 0; k < ZP_MPI_M_COUNT; k++) {
        const zp_mpi_stat *st = &r->stat[k];
        json_t *o = json_object();
        json_object_set_new(o, "min", jreal(st->min));
        json_object_set_new(o, "min_rank", json_integer(st->min_rank));
        json_object_set_new(o, "max", jreal(st->max));
        json_object_set_new(o, "max_rank", json_integer(st->max_rank));
        json_object_set_new(o, "mean", jreal(st->mean));
        json_object_set_new(o, "stddev", jreal(st->stddev));
        json_object_set_new(o, "sum", jreal(st->sum));
        json_object_set_new(o, "imbalance", jreal(st->imbalance));
        json_object_set_new(o, "ranks", json_integer(st->ranks));
        json_object_set_new(sum, zp_mpi_metric_name(k), o);
    }
    json_t *tp = json_object();
    json_object_set_new(tp, "achieved_samples_per_s", jreal(r->throughput));
    json_object_set_new(tp, "bounded_by_slowest_samples_per_s", jreal(r->bounded));
    json_object_set_new(sum, "throughput", tp);
    return sum;
}

/* Attention-cost balance, or null when none ran: across the ranks
 * (zp_mpi_balance; null without) and within the ranks (per rank). */
static json_t *balance_json(const zp_cluster_report *r)
{
    if (!zp_cluster_report_has_balance(r))
        return json_null();
    json_t *o = json_object();
    zp_mpi_balance_stats bs;
    if (zp_cluster_report_balance(r, &bs)) {
        json_t *x = json_object();
        json_object_set_new(x, "window", jint(bs.window));
        json_object_set_new(x, "steps", jint(bs.steps));
        json_object_set_new(x, "rows_moved", jint(bs.rows_moved));
        json_object_set_new(x, "attn_cost", jint(bs.attn_cost));
        json_object_set_new(x, "rank_imbalance_before", jreal(bs.rank_imbalance_before));
        json_object_set_new(x, "rank_imbalance_after", jreal(bs.rank_imbalance_after));
        json_object_set_new(x, "microbatch_imbalance_before", jreal(bs.mb_imbalance_before));
        json_object_set_new(x, "microbatch_imbalance_after", jreal(bs.mb_imbalance_after));
        json_object_set_new(o, "across_ranks", x);
    } else {
        json_object_set_new(o, "across_ranks", json_null());
    }
    json_t *w = json_object();
    json_object_set_new(w, "balance_windows", jint(r->totals.balance_windows));
    json_object_set_new(w, "attn_imbalance_before", jreal(r->totals.attn_imbalance_before));
    json_object_set_new(w, "attn_imbalance_after", jreal(r->totals.attn_imbalance_after));
    json_t *ranks = json_array();
    for (int i = 0; i < r->size; i++) {
        const zp_mpi_rank_stats *s = &r->ranks[i];
        json_t *e = json_object();
        json_object_set_new(e, "rank", json_integer(s->rank));
        json_object_set_new(e, "balance_windows", jint(s->balance_windows));
        json_object_set_new(e, "attn_imbalance_before", jreal(s->attn_imbalance_before));
        json_object_set_new(e, "attn_imbalance_after", jreal(s->attn_imbalance_after));
        json_array_append_new(ranks, e);
    }
    json_object_set_new(w, "ranks", ranks);
    json_object_set_new(o, "within_ranks", w);
    return o;
}

/* The realized mixture proportions, or null. */
static json_t *mixture_json(const zp_cluster_report *r)
{
    if (zpi_mpi_has_mixture(r)) {
        json_t *mx = json_object();
        json_object_set_new(mx, "parts_total", jint(r->parts_total));
        json_t *pa = json_array();
        for (uint32_t i = 0; i < r->n_parts; i++) {
            const zp_part_metrics *p = &r->parts[i];
            json_t *o = json_object();
            json_object_set_new(o, "name", json_string(p->name));
            json_object_set_new(o, "weight", jreal(p->weight));
            json_object_set_new(o, "samples", jint(p->samples));
            json_object_set_new(o, "sample_fraction", jreal(p->sample_fraction));
            json_object_set_new(o, "tokens", jint(p->tokens));
            json_object_set_new(o, "token_fraction", jreal(p->token_fraction));
            json_array_append_new(pa, o);
        }
        json_object_set_new(mx, "parts", pa);
        return mx;
    }
    return json_null();
}

/* The merged latency histograms. */
static json_t *histograms_json(const zp_cluster_report *r)
{
    json_t *hs = json_object();
    for (int k = 0; k < ZPI_MPI_NHIST; k++) {
        const zp_hist *h = &r->hist[k];
        json_t *o = json_object();
        json_object_set_new(o, "count", jint(h->count));
        json_object_set_new(o, "sum_s", json_real((double)h->sum_ns * 1e-9));
        json_object_set_new(o, "min_s", json_real(h->count ? (double)h->min_ns * 1e-9 : 0));
        json_object_set_new(o, "p50_s", json_real((double)zp_hist_quantile(h, 0.5) * 1e-9));
        json_object_set_new(o, "p90_s", json_real((double)zp_hist_quantile(h, 0.9) * 1e-9));
        json_object_set_new(o, "p99_s", json_real((double)zp_hist_quantile(h, 0.99) * 1e-9));
        json_object_set_new(o, "max_s", json_real((double)h->max_ns * 1e-9));
        json_object_set_new(hs, zpi_mpi_hist_name(k), o);
    }
    return hs;
}

/* The stragglers named, slowest first. */
static json_t *stragglers_json(const zp_cluster_report *r)
{
    json_t *sg = json_array();
    for (size_t i = 0; i < r->n_strag; i++) {
        const zp_mpi_straggler *g = &r->strag[i];
        json_t *o = json_object();
        json_object_set_new(o, "rank", json_integer(g->rank));
        json_object_set_new(o, "host", json_string(zp_cluster_report_rank_host(r, g->rank)));
        json_t *rs = json_array();
        if (g->reasons & ZP_MPI_SLOW_RATIO)
            json_array_append_new(rs, json_string("ratio"));
        if (g->reasons & ZP_MPI_SLOW_Z)
            json_array_append_new(rs, json_string("robust_z"));
        if (g->reasons & ZP_MPI_SLOW_STALL)
            json_array_append_new(rs, json_string("stall"));
        json_object_set_new(o, "reasons", rs);
        json_object_set_new(o, "fetch_per_batch_s", jreal(g->fetch_per_batch));
        json_object_set_new(o, "median_s", jreal(g->median));
        json_object_set_new(o, "ratio", jreal(g->ratio));
        json_object_set_new(o, "z", jreal(g->z));
        json_object_set_new(o, "stall_fraction", jreal(g->stall_fraction));
        json_object_set_new(o, "windows", json_integer(g->windows));
        json_object_set_new(o, "reason", json_string(g->reason));
        json_array_append_new(sg, o);
    }
    return sg;
}

/* The window history's header (its values are written by json_layout). */
static json_t *windows_json(const zp_cluster_report *r)
{
    json_t *win = json_object();
    json_object_set_new(win, "first", jint(r->first_window));
    json_t *te = json_array();
    for (int w = 0; w < r->n_windows; w++)
        json_array_append_new(te, jreal(r->win_t[w]));
    json_object_set_new(win, "t_end_s", te);
    json_object_set_new(win, "warmup", json_integer(zpi_mpi_warmup_windows(r)));
    /* the ranks x windows values are written by json_layout (window_rows) */
    json_object_set_new(win, "fetch_per_batch_ms", json_null());
    return win;
}

static json_t *render_json_obj(const zp_cluster_report *r)
{
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string("zephon-report"));
    json_object_set_new(root, "format_version", json_integer(1));
    json_object_set_new(root, "kind", json_string(zpi_mpi_kind_name(r->kind)));
    json_object_set_new(root, "index", json_integer(r->index));
    json_object_set_new(root, "partial", json_boolean(r->partial));
    if (r->partial) {
        if (r->partial_signal[0])
            json_object_set_new(root, "signal", json_string(r->partial_signal));
        json_object_set_new(root, "partial_reason", json_string(r->partial_reason));
        json_object_set_new(root, "partial_steps", jint(r->partial_steps));
    }

    json_object_set_new(root, "header", header_json(r));

    json_t *ranks = json_array();
    for (int i = 0; i < r->size; i++) {
        json_t *o = stats_json(&r->ranks[i], zp_cluster_report_rank_host(r, i));
        json_object_set_new(o, "au", jreal(zpi_mpi_rank_au(&r->ranks[i])));
        json_array_append_new(ranks, o);
    }
    json_object_set_new(root, "ranks", ranks);

    json_object_set_new(root, "summary", summary_json(r));
    json_object_set_new(root, "accelerator_utilisation", au_json(r));
    json_object_set_new(root, "totals", stats_json(&r->totals, NULL));
    json_object_set_new(root, "mixture", mixture_json(r));
    json_object_set_new(root, "attn_balance", balance_json(r));
    json_t *nodes = json_array();
    for (int j = 0; j < r->nodes; j++)
        json_array_append_new(nodes, stats_json(&r->node_tot[j], zp_cluster_report_node_host(r, j)));
    json_object_set_new(root, "nodes", nodes);

    json_object_set_new(root, "histograms", histograms_json(r));
    json_object_set_new(root, "stragglers", stragglers_json(r));
    json_object_set_new(root, "windows", windows_json(r));
    json_t *cov = zpi_mpi_coverage_json(r);
    if (cov)
        json_object_set_new(root, "coverage", cov);
    json_object_set_new(root, "verdict", json_string(r->verdict));
    zpi_mpi_watch_json(r, root);
    return root;
}

/* Append v compact (jansson's buffer may come from its own allocator:
 * copied to ours). */
static void json_compact(zpi_sbuf *b, const json_t *v, size_t flags)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY | flags);
    if (!s) {
        b->oom = 1;
        return;
    }
    zpi_sb_puts(b, s);
    free(s);
}

/* windows.fetch_per_batch_ms: one array per rank, in milliseconds with 4
 * significant digits (the heat map has 16 colours: enough, and it keeps the
 * file's size in bounds), null where the rank delivered no batch. Written
 * directly: N x W values through jansson objects cost ~10x more. */
static void window_rows(zpi_sbuf *b, const zp_cluster_report *r)
{
    zpi_sb_puts(b, "[\n");
    for (int i = 0; i < r->size; i++) {
        zpi_sb_puts(b, "[");
        for (int w = 0; w < r->n_windows; w++) {
            double v = zp_cluster_report_window_fetch(r, w, i);
            if (w)
                zpi_sb_puts(b, ",");
            if (isfinite(v))
                zpi_sb_printf(b, "%.4g", v * 1e3);
            else
                zpi_sb_puts(b, "null");
        }
        zpi_sb_puts(b, i + 1 < r->size ? "],\n" : "]\n");
    }
    zpi_sb_puts(b, "]");
}

/* The layout of report.json: compact, one line per thing a reader looks
 * for: an object of more than a line's worth gets one member per line; an
 * array of objects or arrays one element per line (a rank, a node, a
 * rank's windows); an array of numbers stays on one line. Reals have 9
 * significant digits. */
static void json_layout(zpi_sbuf *b, const json_t *v, size_t flags, const zp_cluster_report *r)
{
    if (json_is_array(v)) {
        size_t n = json_array_size(v);
        int nested = n && (json_is_object(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0)));
        if (!nested) {
            json_compact(b, v, flags);
            return;
        }
        zpi_sb_puts(b, "[\n");
        for (size_t i = 0; i < n; i++) {
            json_compact(b, json_array_get(v, i), flags);
            zpi_sb_puts(b, i + 1 < n ? ",\n" : "\n");
        }
        zpi_sb_puts(b, "]");
        return;
    }
    if (json_is_object(v)) {
        char *s = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | flags);
        if (!s) {
            b->oom = 1;
            return;
        }
        size_t len = strlen(s);
        free(s);
        if (len <= 160) {
            json_compact(b, v, flags);
            return;
        }
        zpi_sb_puts(b, "{\n");
        const char *key;
        json_t *val;
        size_t i = 0, n = json_object_size(v);
        json_object_foreach((json_t *)v, key, val)
        {
            json_t *k = json_string(key);
            json_compact(b, k, 0);
            json_decref(k);
            zpi_sb_puts(b, ":");
            if (strcmp(key, "fetch_per_batch_ms") == 0 && json_is_null(val))
                window_rows(b, r);
            else
                json_layout(b, val, flags, r);
            zpi_sb_puts(b, ++i < n ? ",\n" : "\n");
        }
        zpi_sb_puts(b, "}");
        return;
    }
    json_compact(b, v, flags);
}

void zpi_mpi_render_json(const zp_cluster_report *r, zpi_sbuf *b)
{
    json_t *root = render_json_obj(r);
    if (!root) {
        b->oom = 1;
        return;
    }
    json_layout(b, root, JSON_REAL_PRECISION(9), r);
    zpi_sb_puts(b, "\n");
    json_decref(root);
}

/* ------------------------------------------------------------ CSV */

/* Numbers in CSV: plain decimals (never an exponent), the unit in the
 * column's name: _B bytes, _s seconds, _per_s per second, _frac a fraction
 * in [0, 1]; no suffix: a count. An empty field: not computable. */
static void csv_num(zpi_sbuf *b, double v, const char *fmt)
{
    zpi_sb_puts(b, ",");
    if (isfinite(v))
        zpi_sb_printf(b, fmt, v);
}

/* A partial report's CSV files start with a comment line. */
static void csv_partial(const zp_cluster_report *r, zpi_sbuf *b)
{
    if (!r->partial)
        return;
    zpi_sb_puts(b, "# ");
    zpi_mpi_partial_line(r, b);
    zpi_sb_puts(b, "\n");
}

void zpi_mpi_render_csv(const zp_cluster_report *r, zpi_sbuf *b)
{
    csv_partial(r, b);
    zpi_sb_puts(b, "rank,node,host,valid,threads,batches,samples,tokens,records,bytes_read_B,"
                   "bytes_fetched_B,shards_opened,downloads,retries,cache_hits,cache_misses,padded,"
                   "skipped,batches_dropped,wall_s,first_batch_s,stall_s,stall_frac,fetch_s,"
                   "open_s,read_s,decompress_s,fetch_wait_s,transfer_s,sync_s,slowest_shard_s,"
                   "slowest_record_s,step_s,fetch_per_batch_s,samples_per_s,bytes_per_s,"
                   "cache_hit_frac,straggler,ondemand_reads,ondemand_bytes_B,ondemand_s,"
                   "ondemand_io_s,hdf5_lock_wait_s,pad_tokens,cut_documents,padding_frac,"
                   "cut_frac,au_frac,job_au_frac,job_au_passes");
    /* attention-cost balance: only when it ran (the columns of a run
     * without stay as they were); the step figures are the job's, the
     * same on every row */
    int bal = zp_cluster_report_has_balance(r);
    zpi_mpi_au au;
    zpi_mpi_au_of(r, &au);
    zp_mpi_balance_stats bs;
    zp_cluster_report_balance(r, &bs);
    if (bal)
        zpi_sb_puts(b, ",balance_windows,attn_imbalance_before,attn_imbalance_after,"
                       "step_rank_imbalance_before,step_rank_imbalance_after,"
                       "step_microbatch_imbalance_before,step_microbatch_imbalance_after");
    zpi_sb_puts(b, "\n");
    for (int i = 0; i < r->size; i++) {
        const zp_mpi_rank_stats *s = &r->ranks[i];
        zpi_sb_printf(b, "%d,%d,", s->rank, s->node);
        zpi_sb_csv(b, zp_cluster_report_rank_host(r, i));
        zpi_sb_printf(b, ",%u,%u,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu",
                      s->valid, s->threads, (unsigned long long)s->batches,
                      (unsigned long long)s->samples, (unsigned long long)s->tokens,
                      (unsigned long long)s->records, (unsigned long long)s->bytes_read,
                      (unsigned long long)s->bytes_fetched, (unsigned long long)s->shards_opened,
                      (unsigned long long)s->downloads, (unsigned long long)s->retries,
                      (unsigned long long)s->cache_hits, (unsigned long long)s->cache_misses,
                      (unsigned long long)s->padded, (unsigned long long)s->skipped,
                      (unsigned long long)s->batches_dropped);
        const double secs[] = {s->wall, s->first_batch, s->stall};
        for (size_t k = 0; k < 3; k++)
            csv_num(b, secs[k], "%.6f");
        csv_num(b, s->stall_fraction, "%.4f");
        const double secs2[] = {s->fetch,    s->open, s->read,          s->decompress,
                                s->fetch_wait, s->transfer, s->sync, s->slowest_shard,
                                s->slowest_record, s->step, s->fetch_per_batch};
        for (size_t k = 0; k < sizeof secs2 / sizeof secs2[0]; k++)
            csv_num(b, secs2[k], "%.6f");
        csv_num(b, s->samples_per_second, "%.1f");
        csv_num(b, s->bytes_per_second, "%.0f");
        csv_num(b, s->cache_hit_rate, "%.4f");
        zpi_sb_printf(b, ",%d,%llu,%llu", r->named[i], (unsigned long long)s->ondemand_reads,
                      (unsigned long long)s->ondemand_bytes);
        csv_num(b, s->ondemand, "%.6f");
        csv_num(b, s->ondemand_io, "%.6f");
        csv_num(b, s->hdf5_lock_wait, "%.6f");
        zpi_sb_printf(b, ",%llu,%llu", (unsigned long long)s->pad_tokens,
                      (unsigned long long)s->cut_documents);
        csv_num(b, s->padding_fraction, "%.6f");
        csv_num(b, s->cut_fraction, "%.6f");
        /* accelerator utilisation: the rank's, the job's (the same on every row) */
        csv_num(b, zpi_mpi_rank_au(s), "%.4f");
        csv_num(b, au.job, "%.4f");
        zpi_sb_printf(b, ",%d", au.passes);
        if (bal) {
            zpi_sb_printf(b, ",%llu", (unsigned long long)s->balance_windows);
            csv_num(b, s->attn_imbalance_before, "%.6f");
            csv_num(b, s->attn_imbalance_after, "%.6f");
            csv_num(b, bs.rank_imbalance_before, "%.6f");
            csv_num(b, bs.rank_imbalance_after, "%.6f");
            csv_num(b, bs.mb_imbalance_before, "%.6f");
            csv_num(b, bs.mb_imbalance_after, "%.6f");
        }
        zpi_sb_puts(b, "\n");
    }
}

/* windows.csv: one row per rank, one column per kept window (the heat map's
 * data); the column w<N>_ms is report window N, its values the rank's
 * fetch time per batch in that window in milliseconds (empty: no batch);
 * each window's end time is in report.json (windows.t_end_s). */
void zpi_mpi_render_windows_csv(const zp_cluster_report *r, zpi_sbuf *b)
{
    csv_partial(r, b);
    zpi_sb_puts(b, "rank");
    for (int w = 0; w < r->n_windows; w++)
        zpi_sb_printf(b, ",w%llu_ms", (unsigned long long)(r->first_window + (uint64_t)w));
    zpi_sb_puts(b, "\n");
    for (int i = 0; i < r->size; i++) {
        zpi_sb_printf(b, "%d", i);
        for (int w = 0; w < r->n_windows; w++) {
            double v = zp_cluster_report_window_fetch(r, w, i);
            zpi_sb_puts(b, ",");
            if (isfinite(v))
                zpi_sb_printf(b, "%.3f", v * 1e3);
        }
        zpi_sb_puts(b, "\n");
    }
}
