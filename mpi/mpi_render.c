/* mpi_render.c - the cluster-wide fetch-timing report as text, JSON, CSV
 * and one self-contained HTML page with inline SVG charts. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mpi_internal.h"

/* ------------------------------------------------------------ shared pieces */

static const char *HIST_NAME[ZPI_MPI_NHIST] = {"shard_load", "record_read", "transfer"};

/* "host: ranks 0-3" groups, one per node, in node order. */
static void node_ranks(const zp_cluster_report *r, int node, char *buf, size_t cap)
{
    zpi_mpi_ranklist(buf, cap, r->node_list + r->node_off[node],
                     (size_t)(r->node_off[node + 1] - r->node_off[node]));
}

static const char *kind_name(zp_mpi_report_kind k)
{
    return k == ZP_MPI_REPORT_WINDOW ? "window" : "final";
}

static void criterion_text(const zp_cluster_report *r, zpi_sbuf *b)
{
    zpi_sb_printf(b,
                  "fetch time per batch >= %.2fx the median or robust z-score > %.1f, and consumer "
                  "wait >= %.1f%% of the step; ",
                  1.0 + r->cfg.straggler_ratio, r->cfg.straggler_z,
                  r->cfg.straggler_min_stall * 100);
    if (r->kind == ZP_MPI_REPORT_WINDOW)
        zpi_sb_printf(b, "judged per window, named after %u consecutive windows",
                      r->cfg.straggler_windows);
    else
        zpi_sb_puts(b, "judged on the whole run");
}


/* ------------------------------------------------------------ text */

/* A value in the unit u for people, into a local buffer (for printf). */
#define HUMAN(buf, u, v) (zpi_mpi_human((buf), sizeof(buf), (u), (v)), (buf))

/* "PARTIAL REPORT: the run was stopped (SIGINT) after 120 steps" (no
 * newline): the first line of every format of a partial report. */
static void partial_line(const zp_cluster_report *r, zpi_sbuf *b)
{
    zpi_sb_puts(b, "PARTIAL REPORT: the run was stopped (");
    if (r->partial_signal[0] && r->partial_own_reason)
        zpi_sb_printf(b, "%s: %s", r->partial_signal, r->partial_reason);
    else
        zpi_sb_puts(b, r->partial_signal[0] ? r->partial_signal : r->partial_reason);
    zpi_sb_printf(b, ") after %llu step%s", (unsigned long long)r->partial_steps,
                  r->partial_steps == 1 ? "" : "s");
}

/* 1 when the report has a mixture to show (more than one part). */
static int has_mixture(const zp_cluster_report *r) { return r->parts_total > 1 && r->n_parts > 0; }

/* "(first 64 of N parts listed)" when not every part is. */
static void parts_cut_note(const zp_cluster_report *r, zpi_sbuf *b, const char *pre, const char *post)
{
    if (r->parts_total > r->n_parts)
        zpi_sb_printf(b, "%sfirst %u of %u parts listed%s", pre, r->n_parts, r->parts_total, post);
}

/* The realized mixture proportions, summed over ranks. */
static void mixture_text(const zp_cluster_report *r, zpi_sbuf *b)
{
    if (!has_mixture(r))
        return;
    char t1[48], t2[48], t3[48], t4[48], t5[48];
    zpi_sb_printf(b, "\nmixture (%u parts, summed over ranks", r->parts_total);
    parts_cut_note(r, b, "; ", "");
    zpi_sb_puts(b, "):\n");
    zpi_sb_printf(b, "  %-24s %8s %10s %8s %10s %8s\n", "part", "weight", "samples", "share",
                  "tokens", "share");
    for (uint32_t i = 0; i < r->n_parts; i++) {
        const zp_part_metrics *p = &r->parts[i];
        zpi_sb_printf(b, "  %-24.24s %8s %10s %8s %10s %8s\n", p->name,
                      HUMAN(t1, ZPI_U_FRACTION, p->weight), HUMAN(t2, ZPI_U_COUNT, (double)p->samples),
                      HUMAN(t3, ZPI_U_FRACTION, p->sample_fraction),
                      HUMAN(t4, ZPI_U_COUNT, (double)p->tokens),
                      HUMAN(t5, ZPI_U_FRACTION, p->token_fraction));
    }
}

static void render_text(const zp_cluster_report *r, zpi_sbuf *b)
{
    char t1[48], t2[48], t3[48], t4[48], t5[48], t6[48], t7[48], t8[48], t9[48], t10[48], t11[48],
        t12[48], list[128];
    if (r->partial) {
        partial_line(r, b);
        zpi_sb_puts(b, "\n\n");
    }
    zpi_sb_printf(b, "Zephon cluster fetch-timing report (%s, report %u)\n", kind_name(r->kind),
                  r->index);
    zpi_sb_printf(b, "job %s: %d rank%s on %d node%s (", r->job_id, r->size, r->size == 1 ? "" : "s",
                  r->nodes, r->nodes == 1 ? "" : "s");
    if (r->ranks_per_node_min == r->ranks_per_node_max)
        zpi_sb_printf(b, "%d ranks per node", r->ranks_per_node_max);
    else
        zpi_sb_printf(b, "%d-%d ranks per node", r->ranks_per_node_min, r->ranks_per_node_max);
    if (r->threads_min == r->threads_max)
        zpi_sb_printf(b, "), %u threads per rank\n", r->threads_max);
    else
        zpi_sb_printf(b, "), %u-%u threads per rank\n", r->threads_min, r->threads_max);
    if (r->info.have_dataset)
        zpi_sb_printf(b, "dataset: %llu shards, %s samples, %s (fingerprint %016llx)\n",
                      (unsigned long long)r->info.ds_shards,
                      HUMAN(t1, ZPI_U_COUNT, (double)r->info.ds_samples),
                      HUMAN(t2, ZPI_U_BYTES, (double)r->info.ds_bytes),
                      (unsigned long long)r->info.ds_fingerprint);
    else
        zpi_sb_puts(b, "dataset: (not agreed)\n");
    zpi_sb_puts(b, "settings: ");
    zpi_mpi_settings_text(&r->info, b);
    zpi_sb_puts(b, "\nstraggler criterion: ");
    criterion_text(r, b);
    zpi_sb_printf(b, "\nreport: gathered and analysed in %s (analysis %s), %s gathered per rank\n",
                  HUMAN(t1, ZPI_U_SECONDS, r->seconds), HUMAN(t2, ZPI_U_SECONDS, r->analysis_seconds),
                  HUMAN(t3, ZPI_U_BYTES, (double)r->gather_bytes));

    zpi_sb_puts(b, "\nhosts:\n");
    for (int j = 0; j < r->nodes; j++) {
        node_ranks(r, j, list, sizeof list);
        zpi_sb_printf(b, "  node %-4d %-24s ranks %s\n", j, zp_cluster_report_node_host(r, j), list);
    }

    zpi_sb_puts(b, "\nper rank:\n");
    zpi_sb_printf(b, "  %5s %4s %-16s %8s %9s %8s %8s %8s %8s %8s %6s %10s %11s %8s %6s %7s\n", "rank",
                  "node", "host", "samples", "bytes", "open", "read", "decomp", "xfer", "stall",
                  "stall%", "samples/s", "fetch/batch", "slowest", "hit%", "retries");
    for (int i = 0; i < r->size; i++) {
        const zp_mpi_rank_stats *s = &r->ranks[i];
        if (!s->valid) {
            zpi_sb_printf(b, "  %5d %4d %-16.16s (no snapshot)\n", s->rank, s->node,
                          zp_cluster_report_rank_host(r, i));
            continue;
        }
        zpi_sb_printf(b, "  %5d %4d %-16.16s %8s %9s %8s %8s %8s %8s %8s %6s %10s %11s %8s %6s %7s\n",
                      s->rank, s->node, zp_cluster_report_rank_host(r, i),
                      HUMAN(t1, ZPI_U_COUNT, (double)s->samples),
                      HUMAN(t2, ZPI_U_BYTES, (double)s->bytes_read),
                      HUMAN(t3, ZPI_U_SECONDS, s->open), HUMAN(t4, ZPI_U_SECONDS, s->read),
                      HUMAN(t5, ZPI_U_SECONDS, s->decompress), HUMAN(t6, ZPI_U_SECONDS, s->transfer),
                      HUMAN(t7, ZPI_U_SECONDS, s->stall), HUMAN(t8, ZPI_U_FRACTION, s->stall_fraction),
                      HUMAN(t9, ZPI_U_COUNT, s->samples_per_second),
                      HUMAN(t10, ZPI_U_SECONDS, s->fetch_per_batch),
                      HUMAN(t11, ZPI_U_SECONDS, s->slowest_shard),
                      HUMAN(t12, ZPI_U_FRACTION, s->cache_hit_rate),
                      HUMAN(list, ZPI_U_COUNT, (double)s->retries));
    }

    /* shards read on demand (HDF5, Megatron .bin/.idx): their reads per rank */
    int any_od = 0;
    for (int i = 0; i < r->size; i++)
        any_od |= r->ranks[i].valid && r->ranks[i].ondemand_reads > 0;
    if (any_od) {
        zpi_sb_puts(b, "\non-demand reads (HDF5, .bin/.idx: one read per chunk and shard):\n");
        zpi_sb_printf(b, "  %5s %8s %9s %9s %9s %12s\n", "rank", "reads", "bytes", "time", "io",
                      "hdf5 lock");
        for (int i = 0; i < r->size; i++) {
            const zp_mpi_rank_stats *s = &r->ranks[i];
            if (!s->valid)
                continue;
            zpi_sb_printf(b, "  %5d %8s %9s %9s %9s %12s\n", s->rank,
                          HUMAN(t1, ZPI_U_COUNT, (double)s->ondemand_reads),
                          HUMAN(t2, ZPI_U_BYTES, (double)s->ondemand_bytes),
                          HUMAN(t3, ZPI_U_SECONDS, s->ondemand),
                          HUMAN(t4, ZPI_U_SECONDS, s->ondemand_io),
                          HUMAN(t5, ZPI_U_SECONDS, s->hdf5_lock_wait));
        }
    }

    zpi_sb_printf(b, "\ncluster summary (over %u ranks):\n", r->stat[0].ranks);
    zpi_sb_printf(b, "  %-18s %18s %6s %18s %6s %18s %18s %9s\n", "metric", "min", "rank", "max",
                  "rank", "mean", "stddev", "max/mean");
    for (int k = 0; k < ZP_MPI_M_COUNT; k++) {
        const zp_mpi_stat *st = &r->stat[k];
        zpi_mpi_unit u = zpi_mpi_metric_unit(k);
        zpi_sb_printf(b, "  %-18s %18s %6d %18s %6d %18s %18s %8.2fx\n", zp_mpi_metric_name(k),
                      HUMAN(t1, u, st->min), st->min_rank, HUMAN(t2, u, st->max), st->max_rank,
                      HUMAN(t3, u, st->mean), HUMAN(t4, u, st->stddev), st->imbalance);
    }
    const zp_mpi_stat *sps = &r->stat[ZP_MPI_M_SAMPLES_PER_SECOND];
    zpi_sb_printf(b,
                  "aggregate throughput: %s achieved; %s bounded by the slowest rank (rank %d: %s "
                  "x %u ranks)\n",
                  HUMAN(t1, ZPI_U_SAMPLE_RATE, r->throughput), HUMAN(t2, ZPI_U_SAMPLE_RATE, r->bounded),
                  sps->min_rank, HUMAN(t3, ZPI_U_SAMPLE_RATE, sps->min), sps->ranks);
    const zp_mpi_rank_stats *t = &r->totals;
    zpi_sb_printf(b,
                  "cluster totals: %s batches, %s samples, %s tokens, %s read, %s of records, "
                  "%s shard loads, %s retries, %s padded, %s skipped, %s batches dropped at the "
                  "common stop\n",
                  HUMAN(t1, ZPI_U_COUNT, (double)t->batches), HUMAN(t2, ZPI_U_COUNT, (double)t->samples),
                  HUMAN(t3, ZPI_U_COUNT, (double)t->tokens), HUMAN(t4, ZPI_U_BYTES, (double)t->bytes_read),
                  HUMAN(t5, ZPI_U_BYTES, (double)t->bytes_fetched),
                  HUMAN(t6, ZPI_U_COUNT, (double)t->shards_opened),
                  HUMAN(t7, ZPI_U_COUNT, (double)t->retries), HUMAN(t8, ZPI_U_COUNT, (double)t->padded),
                  HUMAN(t9, ZPI_U_COUNT, (double)t->skipped),
                  HUMAN(t10, ZPI_U_COUNT, (double)t->batches_dropped));

    mixture_text(r, b);

    zpi_sb_puts(b, "\nper node:\n");
    zpi_sb_printf(b, "  %4s %-24s %5s %9s %9s %9s %7s %10s\n", "node", "host", "ranks", "samples",
                  "bytes", "stall", "stall%", "samples/s");
    for (int j = 0; j < r->nodes; j++) {
        const zp_mpi_rank_stats *s = &r->node_tot[j];
        zpi_sb_printf(b, "  %4d %-24.24s %5d %9s %9s %9s %7s %10s\n", j,
                      zp_cluster_report_node_host(r, j), s->local_rank,
                      HUMAN(t1, ZPI_U_COUNT, (double)s->samples),
                      HUMAN(t2, ZPI_U_BYTES, (double)s->bytes_read), HUMAN(t3, ZPI_U_SECONDS, s->stall),
                      HUMAN(t4, ZPI_U_FRACTION, s->stall_fraction),
                      HUMAN(t5, ZPI_U_COUNT, s->samples_per_second));
    }

    zpi_sb_puts(b, "\nlatency over all ranks:\n");
    for (int k = 0; k < ZPI_MPI_NHIST; k++) {
        const zp_hist *h = &r->hist[k];
        if (!h->count) {
            zpi_sb_printf(b, "  %-12s no events\n", HIST_NAME[k]);
            continue;
        }
        zpi_sb_printf(b, "  %-12s %s events, p50 %s, p90 %s, p99 %s, max %s\n", HIST_NAME[k],
                      HUMAN(t1, ZPI_U_COUNT, (double)h->count),
                      HUMAN(t2, ZPI_U_SECONDS, (double)zp_hist_quantile(h, 0.5) * 1e-9),
                      HUMAN(t3, ZPI_U_SECONDS, (double)zp_hist_quantile(h, 0.9) * 1e-9),
                      HUMAN(t4, ZPI_U_SECONDS, (double)zp_hist_quantile(h, 0.99) * 1e-9),
                      HUMAN(t5, ZPI_U_SECONDS, (double)h->max_ns * 1e-9));
    }

    zpi_sb_puts(b, "\nstragglers:\n");
    if (!r->n_strag)
        zpi_sb_puts(b, "  none\n");
    for (size_t i = 0; i < r->n_strag; i++)
        zpi_sb_printf(b, "  rank %d (%s): %s\n", r->strag[i].rank,
                      zp_cluster_report_rank_host(r, r->strag[i].rank), r->strag[i].reason);
    zpi_sb_printf(b, "\n%s\n", r->verdict);
}

/* ------------------------------------------------------------ JSON */

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

static json_t *render_json_obj(const zp_cluster_report *r)
{
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string("zephon-report"));
    json_object_set_new(root, "format_version", json_integer(1));
    json_object_set_new(root, "kind", json_string(kind_name(r->kind)));
    json_object_set_new(root, "index", json_integer(r->index));
    json_object_set_new(root, "partial", json_boolean(r->partial));
    if (r->partial) {
        if (r->partial_signal[0])
            json_object_set_new(root, "signal", json_string(r->partial_signal));
        json_object_set_new(root, "partial_reason", json_string(r->partial_reason));
        json_object_set_new(root, "partial_steps", jint(r->partial_steps));
    }

    json_t *hd = json_object();
    json_object_set_new(hd, "job_id", json_string(r->job_id));
    json_object_set_new(hd, "ranks", json_integer(r->size));
    json_object_set_new(hd, "nodes", json_integer(r->nodes));
    json_object_set_new(hd, "ranks_per_node_min", json_integer(r->ranks_per_node_min));
    json_object_set_new(hd, "ranks_per_node_max", json_integer(r->ranks_per_node_max));
    json_object_set_new(hd, "threads_per_rank_min", json_integer(r->threads_min));
    json_object_set_new(hd, "threads_per_rank_max", json_integer(r->threads_max));
    json_t *hosts = json_array();
    for (int j = 0; j < r->nodes; j++) {
        char list[256];
        node_ranks(r, j, list, sizeof list);
        json_t *h = json_object();
        json_object_set_new(h, "node", json_integer(j));
        json_object_set_new(h, "host", json_string(zp_cluster_report_node_host(r, j)));
        json_object_set_new(h, "ranks", json_string(list));
        json_array_append_new(hosts, h);
    }
    json_object_set_new(hd, "nodes_table", hosts);
    json_t *rh = json_array();
    for (int i = 0; i < r->size; i++)
        json_array_append_new(rh, json_string(zp_cluster_report_rank_host(r, i)));
    json_object_set_new(hd, "rank_host", rh);
    zpi_sbuf sb = {0};
    zpi_mpi_settings_text(&r->info, &sb);
    json_object_set_new(hd, "settings", json_string(sb.p ? sb.p : ""));
    free(sb.p);
    if (r->info.have_dataset) {
        json_t *d = json_object();
        char fp[24];
        zpi_fmt(fp, sizeof fp, "%016llx", (unsigned long long)r->info.ds_fingerprint);
        json_object_set_new(d, "shards", jint(r->info.ds_shards));
        json_object_set_new(d, "samples", jint(r->info.ds_samples));
        json_object_set_new(d, "bytes", jint(r->info.ds_bytes));
        json_object_set_new(d, "fingerprint", json_string(fp));
        json_object_set_new(hd, "dataset", d);
    } else {
        json_object_set_new(hd, "dataset", json_null());
    }
    json_t *cr = json_object();
    json_object_set_new(cr, "ratio", json_real(r->cfg.straggler_ratio));
    json_object_set_new(cr, "z", json_real(r->cfg.straggler_z));
    json_object_set_new(cr, "min_stall", json_real(r->cfg.straggler_min_stall));
    json_object_set_new(cr, "windows", json_integer(r->cfg.straggler_windows));
    json_object_set_new(hd, "criterion", cr);
    json_object_set_new(hd, "report_seconds", json_real(r->seconds));
    json_object_set_new(hd, "analysis_seconds", json_real(r->analysis_seconds));
    json_object_set_new(hd, "gather_bytes_per_rank", jint(r->gather_bytes));
    json_object_set_new(root, "header", hd);

    json_t *ranks = json_array();
    for (int i = 0; i < r->size; i++)
        json_array_append_new(ranks, stats_json(&r->ranks[i], zp_cluster_report_rank_host(r, i)));
    json_object_set_new(root, "ranks", ranks);

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
    json_object_set_new(root, "summary", sum);
    json_object_set_new(root, "totals", stats_json(&r->totals, NULL));
    if (has_mixture(r)) {
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
        json_object_set_new(root, "mixture", mx);
    } else {
        json_object_set_new(root, "mixture", json_null());
    }
    json_t *nodes = json_array();
    for (int j = 0; j < r->nodes; j++)
        json_array_append_new(nodes, stats_json(&r->node_tot[j], zp_cluster_report_node_host(r, j)));
    json_object_set_new(root, "nodes", nodes);

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
        json_object_set_new(hs, HIST_NAME[k], o);
    }
    json_object_set_new(root, "histograms", hs);

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
    json_object_set_new(root, "stragglers", sg);

    json_t *win = json_object();
    json_object_set_new(win, "first", jint(r->first_window));
    json_t *te = json_array();
    for (int w = 0; w < r->n_windows; w++)
        json_array_append_new(te, jreal(r->win_t[w]));
    json_object_set_new(win, "t_end_s", te);
    json_object_set_new(win, "warmup", json_integer(zpi_mpi_warmup_windows(r)));
    /* the ranks x windows values are written by json_layout (window_rows) */
    json_object_set_new(win, "fetch_per_batch_ms", json_null());
    json_object_set_new(root, "windows", win);
    json_object_set_new(root, "verdict", json_string(r->verdict));
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

static void render_json(const zp_cluster_report *r, zpi_sbuf *b)
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
    partial_line(r, b);
    zpi_sb_puts(b, "\n");
}

static void render_csv(const zp_cluster_report *r, zpi_sbuf *b)
{
    csv_partial(r, b);
    zpi_sb_puts(b, "rank,node,host,valid,threads,batches,samples,tokens,records,bytes_read_B,"
                   "bytes_fetched_B,shards_opened,downloads,retries,cache_hits,cache_misses,padded,"
                   "skipped,batches_dropped,wall_s,first_batch_s,stall_s,stall_frac,fetch_s,"
                   "open_s,read_s,decompress_s,fetch_wait_s,transfer_s,sync_s,slowest_shard_s,"
                   "slowest_record_s,step_s,fetch_per_batch_s,samples_per_s,bytes_per_s,"
                   "cache_hit_frac,straggler,ondemand_reads,ondemand_bytes_B,ondemand_s,"
                   "ondemand_io_s,hdf5_lock_wait_s\n");
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
        zpi_sb_puts(b, "\n");
    }
}

/* windows.csv: one row per rank, one column per kept window (the heat map's
 * data); the column w<N>_ms is report window N, its values the rank's
 * fetch time per batch in that window in milliseconds (empty: no batch);
 * each window's end time is in report.json (windows.t_end_s). */
static void render_windows_csv(const zp_cluster_report *r, zpi_sbuf *b)
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

/* ------------------------------------------------------------ HTML */

/* The bar chart draws at most this many ranks; the heat map at most this
 * many rows (beyond, a row is a group of consecutive ranks). They bound
 * the page's size (docs/report.md). */
#define HTML_MAX_CHART_RANKS 512
#define HEAT_MAX_ROWS 128

/* The parts of a rank's time drawn in the stacked bars. */
enum { P_READ, P_DECOMP, P_OPEN_OTHER, P_FETCH_OTHER, P_TRANSFER, P_STALL, P_SYNC, P_N };
static const char *const PART_NAME[P_N] = {"read",      "decompress", "open (other)",
                                           "fetch (other)", "transfer", "stall (consumer wait)",
                                           "sync (waiting for other ranks)"};
static const char *const PART_COLOR[P_N] = {"#4e79a7", "#59a14f", "#8cd17d", "#a0cbe8",
                                            "#f28e2b", "#e15759", "#bab0ac"};

static void parts_of(const zp_mpi_rank_stats *s, double *p)
{
    p[P_READ] = s->read;
    p[P_DECOMP] = s->decompress;
    p[P_OPEN_OTHER] = fmax(0, s->open - s->read - s->decompress);
    p[P_FETCH_OTHER] = fmax(0, s->fetch - s->open);
    p[P_TRANSFER] = s->transfer;
    p[P_STALL] = s->stall;
    p[P_SYNC] = s->sync;
}

static double bar_total(const zp_mpi_rank_stats *s)
{
    double p[P_N], t = 0;
    parts_of(s, p);
    for (int k = 0; k < P_N; k++)
        t += p[k];
    return t;
}

typedef struct bar_key {
    int named;
    double total;
    int rank;
} bar_key;

static int cmp_bar(const void *a, const void *b)
{
    const bar_key *x = a, *y = b;
    if (x->named != y->named)
        return y->named - x->named; /* named stragglers first */
    if (x->total != y->total)
        return x->total < y->total ? 1 : -1; /* then the longest bars */
    return x->rank - y->rank;
}
static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The ranks drawn as bars: all, or beyond HTML_MAX_CHART_RANKS the named
 * stragglers and the ranks with the longest bars, in rank order. *n out. */
static int *bar_ranks(const zp_cluster_report *r, int *n)
{
    int *idx = malloc((size_t)(r->size > 0 ? r->size : 1) * sizeof *idx);
    if (!idx)
        return NULL;
    *n = r->size;
    for (int i = 0; i < r->size; i++)
        idx[i] = i;
    if (r->size <= HTML_MAX_CHART_RANKS)
        return idx;
    bar_key *k = malloc((size_t)r->size * sizeof *k);
    if (!k) {
        free(idx);
        return NULL;
    }
    for (int i = 0; i < r->size; i++)
        k[i] = (bar_key){r->named[i], bar_total(&r->ranks[i]), i};
    qsort(k, (size_t)r->size, sizeof *k, cmp_bar);
    *n = HTML_MAX_CHART_RANKS;
    for (int i = 0; i < *n; i++)
        idx[i] = k[i].rank;
    free(k);
    qsort(idx, (size_t)*n, sizeof *idx, cmp_int);
    return idx;
}

static void svg_bars(const zp_cluster_report *r, zpi_sbuf *b)
{
    int n = 0;
    int *idx = bar_ranks(r, &n);
    if (!idx) {
        b->oom = 1;
        return;
    }
    double maxt = 0;
    for (int k = 0; k < n; k++)
        maxt = fmax(maxt, bar_total(&r->ranks[idx[k]]));
    if (maxt <= 0)
        maxt = 1;
    const int row = 16, left = 70, width = 640;
    int height = n * row + 40;
    zpi_sb_printf(b,
                  "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                  "role=\"img\" aria-label=\"where each rank's time goes\">\n",
                  left + width + 20, height);
    char t[32];
    for (int k = 0; k < n; k++) {
        const zp_mpi_rank_stats *s = &r->ranks[idx[k]];
        double p[P_N];
        parts_of(s, p);
        int y = 4 + k * row;
        zpi_sb_printf(b, "<text x=\"%d\" y=\"%d\" class=\"lbl\" text-anchor=\"end\">rank %d</text>\n",
                      left - 6, y + 11, s->rank);
        double x = left;
        for (int q = 0; q < P_N; q++) {
            double w = p[q] / maxt * width;
            if (w <= 0)
                continue;
            zpi_sb_printf(b,
                          "<rect x=\"%.1f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\">"
                          "<title>rank %d %s: %s</title></rect>\n",
                          x, y, w, row - 3, PART_COLOR[q], s->rank, PART_NAME[q],
                          HUMAN(t, ZPI_U_SECONDS, p[q]));
            x += w;
        }
    }
    int ay = 4 + n * row + 14;
    zpi_sb_printf(b, "<text x=\"%d\" y=\"%d\" class=\"lbl\">0 s</text>", left, ay);
    zpi_sb_printf(b, "<text x=\"%d\" y=\"%d\" class=\"lbl\" text-anchor=\"end\">%s</text>\n",
                  left + width, ay, HUMAN(t, ZPI_U_SECONDS, maxt));
    zpi_sb_puts(b, "</svg>\n<div class=\"legend\">");
    for (int k = 0; k < P_N; k++)
        zpi_sb_printf(b, "<span><i style=\"background:%s\"></i>%s</span> ", PART_COLOR[k],
                      PART_NAME[k]);
    zpi_sb_puts(b, "</div>\n");
    if (n < r->size)
        zpi_sb_printf(b,
                      "<p class=\"note\">%d of %d ranks are drawn: the named stragglers and the "
                      "ranks with the longest bars, in rank order; the tables list all.</p>\n",
                      n, r->size);
    free(idx);
}

/* The heat map's colours: HEAT_LEVELS steps from white (fast) to dark red
 * (the slowest steady-state value); grey: no batch. */
#define HEAT_LEVELS 16
static void heat_color(char *buf, size_t cap, int level)
{
    if (level < 0) {
        zpi_fmt(buf, cap, "#dddddd");
        return;
    }
    double v = (double)level / (HEAT_LEVELS - 1);
    int rr = (int)(255 - 90 * v), gg = (int)(255 - 230 * v), bb = (int)(255 - 230 * v);
    zpi_fmt(buf, cap, "#%02x%02x%02x", rr, gg, bb);
}

int zpi_mpi_warmup_windows(const zp_cluster_report *r)
{
    /* warm-up: the run's first window, and every window that ended before
     * 1.5 x the slowest rank's time to its first batch (shards opened, the
     * page cache and the prefetch buffers filled) */
    double until = 1.5 * r->totals.first_batch;
    int w = 0;
    while (w < r->n_windows &&
           (r->first_window + (uint64_t)w == 0 || (r->win_t && r->win_t[w] <= until)))
        w++;
    return w < r->n_windows ? w : 0; /* all warm-up: scale on all of them */
}

/* Row g of the heat map: the ranks [g*per, min((g+1)*per, n)); value of
 * window w = their largest fetch per batch (NaN when none delivered), and
 * the rank that has it. */
static double heat_cell(const zp_cluster_report *r, int g, int per, int w, int *who)
{
    double best = NAN;
    *who = g * per;
    int end = (g + 1) * per < r->size ? (g + 1) * per : r->size;
    for (int i = g * per; i < end; i++) {
        double v = zp_cluster_report_window_fetch(r, w, i);
        if (isfinite(v) && !(v <= best)) {
            best = v;
            *who = i;
        }
    }
    return best;
}

static void svg_heatmap(const zp_cluster_report *r, zpi_sbuf *b)
{
    int nw = r->n_windows;
    int per = (r->size + HEAT_MAX_ROWS - 1) / HEAT_MAX_ROWS;
    if (per < 1)
        per = 1;
    int rows = (r->size + per - 1) / per;
    int warm = zpi_mpi_warmup_windows(r);
    double maxv = 0;
    int who;
    for (int g = 0; g < rows; g++)
        for (int w = warm; w < nw; w++) {
            double v = heat_cell(r, g, per, w, &who);
            if (isfinite(v))
                maxv = fmax(maxv, v);
        }
    if (maxv <= 0)
        maxv = 1;
    const int left = 90, top = 4;
    int cw = nw > 0 ? 640 / nw : 8, ch = rows <= 64 ? 14 : 8;
    if (cw > 40)
        cw = 40;
    if (cw < 2)
        cw = 2;
    int height = top + ch * rows + 4;
    zpi_sb_printf(b,
                  "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                  "role=\"img\" aria-label=\"fetch time per batch, rank by window\">\n",
                  left + cw * (nw > 0 ? nw : 1) + 20, height);
    char col[16], lo_s[32], hi_s[32], who_s[48];
    for (int g = 0; g < rows; g++) {
        int r0 = g * per, r1 = (g + 1) * per < r->size ? (g + 1) * per - 1 : r->size - 1;
        if (ch >= 14 || g % 8 == 0) {
            if (r0 == r1)
                zpi_fmt(who_s, sizeof who_s, "rank %d", r0);
            else
                zpi_fmt(who_s, sizeof who_s, "ranks %d-%d", r0, r1);
            zpi_sb_printf(b, "<text x=\"%d\" y=\"%d\" class=\"lbl\" text-anchor=\"end\">%s</text>\n",
                          left - 6, top + g * ch + (ch >= 14 ? 11 : 7), who_s);
        }
        /* runs of equal colour in a row are one rectangle */
        for (int w = 0; w < nw;) {
            double v = heat_cell(r, g, per, w, &who);
            int lev = isfinite(v) ? (int)lround(fmin(v / maxv, 1.0) * (HEAT_LEVELS - 1)) : -1;
            double lo = v, hi = v;
            int hi_who = who, e = w + 1;
            for (; e < nw; e++) {
                int who2;
                double v2 = heat_cell(r, g, per, e, &who2);
                int lev2 = isfinite(v2) ? (int)lround(fmin(v2 / maxv, 1.0) * (HEAT_LEVELS - 1)) : -1;
                if (lev2 != lev)
                    break;
                if (isfinite(v2)) {
                    lo = fmin(lo, v2);
                    if (v2 > hi) {
                        hi = v2;
                        hi_who = who2;
                    }
                }
            }
            heat_color(col, sizeof col, lev);
            zpi_sb_printf(b,
                          "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"><title>",
                          left + w * cw, top + g * ch, (e - w) * cw - 1, ch - 1, col);
            if (per > 1)
                zpi_sb_printf(b, "ranks %d-%d, ", r0, r1);
            else
                zpi_sb_printf(b, "rank %d, ", r0);
            uint64_t w0 = r->first_window + (uint64_t)w, w1 = r->first_window + (uint64_t)(e - 1);
            if (w0 == w1)
                zpi_sb_printf(b, "window %llu: ", (unsigned long long)w0);
            else
                zpi_sb_printf(b, "windows %llu-%llu: ", (unsigned long long)w0, (unsigned long long)w1);
            if (lev < 0) {
                zpi_sb_puts(b, "no batch");
            } else {
                zpi_mpi_human_seconds(lo_s, sizeof lo_s, lo);
                zpi_mpi_human_seconds(hi_s, sizeof hi_s, hi);
                if (lo == hi)
                    zpi_sb_printf(b, "%s/batch", hi_s);
                else
                    zpi_sb_printf(b, "%s-%s/batch", lo_s, hi_s);
                if (per > 1)
                    zpi_sb_printf(b, " (slowest: rank %d)", hi_who);
            }
            zpi_sb_puts(b, "</title></rect>\n");
            w = e;
        }
    }
    if (warm > 0)
        zpi_sb_printf(b,
                      "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\" "
                      "stroke-dasharray=\"3,2\"/>\n",
                      left + warm * cw - 1, top, left + warm * cw - 1, top + ch * rows);
    zpi_sb_puts(b, "</svg>\n");
    zpi_mpi_human_seconds(hi_s, sizeof hi_s, maxv);
    zpi_sb_printf(b,
                  "<p class=\"note\">Windows %llu-%llu, oldest left; white 0, dark red %s/batch (the "
                  "slowest after warm-up)%s; grey: no batch.",
                  (unsigned long long)r->first_window,
                  (unsigned long long)(r->first_window + (uint64_t)(nw > 0 ? nw - 1 : 0)), hi_s,
                  per > 1 ? "; a row is its ranks' slowest" : "");
    if (warm > 0)
        zpi_sb_printf(b,
                      " Left of the dashed line: %d warm-up window%s, left out of the colour scale "
                      "(values above it drawn dark red).",
                      warm, warm == 1 ? "" : "s");
    zpi_sb_puts(b, "</p>\n");
}

static void html_cell(zpi_sbuf *b, zpi_mpi_unit u, double v)
{
    char t[48];
    zpi_sb_printf(b, "<td>%s</td>", HUMAN(t, u, v));
}

static void render_html(const zp_cluster_report *r, zpi_sbuf *b)
{
    char t1[48], t2[48];
    zpi_sb_puts(b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                   "<title>Zephon fetch-timing report</title>\n<style>\n"
                   "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}\n"
                   "table{border-collapse:collapse;margin:8px 0 20px}\n"
                   "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td{white-space:nowrap}\n"
                   "th{background:#f0f0f0}td.l,th.l{text-align:left}\n"
                   "tr.strag td{background:#fde0dc}\n"
                   ".verdict{font-weight:bold;padding:8px;border-left:6px solid #e15759;"
                   "background:#fbeeee}\n.verdict.ok{border-color:#59a14f;background:#eef7ec}\n"
                   ".lbl{font:11px sans-serif;fill:#333}.note{color:#666}\n"
                   ".legend span{margin-right:12px;font-size:12px}"
                   ".legend i{display:inline-block;width:10px;height:10px;margin-right:4px}\n"
                   ".partial{font-weight:bold;padding:8px;margin-bottom:12px;color:#7a4b00;"
                   "border:2px solid #f28e2b;background:#fff3e0}\n"
                   "</style></head><body>\n");
    if (r->partial) {
        zpi_sbuf pl = {0};
        partial_line(r, &pl);
        zpi_sb_puts(b, "<div class=\"partial\" id=\"partial\">");
        zpi_sb_html(b, pl.p ? pl.p : "PARTIAL REPORT");
        zpi_sb_puts(b, "</div>\n");
        if (pl.oom)
            b->oom = 1;
        free(pl.p);
    }
    zpi_sb_printf(b, "<h1>Zephon cluster fetch-timing report</h1>\n<p>%s report %u &middot; job ",
                  kind_name(r->kind), r->index);
    zpi_sb_html(b, r->job_id);
    zpi_sb_printf(b, " &middot; %d rank%s on %d node%s (", r->size, r->size == 1 ? "" : "s", r->nodes,
                  r->nodes == 1 ? "" : "s");
    if (r->ranks_per_node_min == r->ranks_per_node_max)
        zpi_sb_printf(b, "%d per node)", r->ranks_per_node_max);
    else
        zpi_sb_printf(b, "%d-%d per node)", r->ranks_per_node_min, r->ranks_per_node_max);
    if (r->threads_min == r->threads_max)
        zpi_sb_printf(b, " &middot; %u thread%s per rank", r->threads_max, r->threads_max == 1 ? "" : "s");
    else
        zpi_sb_printf(b, " &middot; %u-%u threads per rank", r->threads_min, r->threads_max);
    zpi_sb_printf(b, " &middot; analysed in %s, %s gathered per rank</p>\n",
                  HUMAN(t1, ZPI_U_SECONDS, r->seconds), HUMAN(t2, ZPI_U_BYTES, (double)r->gather_bytes));
    int holds = r->stat[ZP_MPI_M_STALL_FRACTION].ranks &&
                r->stat[ZP_MPI_M_STALL_FRACTION].max >= r->cfg.straggler_min_stall;
    zpi_sb_printf(b, "<p class=\"verdict%s\">", holds ? "" : " ok");
    zpi_sb_html(b, r->verdict);
    zpi_sb_puts(b, "</p>\n<p>");
    if (r->info.have_dataset)
        zpi_sb_printf(b, "Dataset: %llu shards, %s samples, %s. ",
                      (unsigned long long)r->info.ds_shards,
                      HUMAN(t1, ZPI_U_COUNT, (double)r->info.ds_samples),
                      HUMAN(t2, ZPI_U_BYTES, (double)r->info.ds_bytes));
    zpi_sbuf st = {0};
    zpi_mpi_settings_text(&r->info, &st);
    zpi_sb_puts(b, "Settings: <code>");
    zpi_sb_html(b, st.p ? st.p : "");
    free(st.p);
    zpi_sb_puts(b, "</code>.<br>Straggler criterion: ");
    zpi_sbuf cr = {0};
    criterion_text(r, &cr);
    zpi_sb_html(b, cr.p ? cr.p : "");
    free(cr.p);
    zpi_sb_puts(b, ".</p>\n");

    zpi_sb_puts(b, "<h2>Stragglers</h2>\n");
    if (!r->n_strag)
        zpi_sb_puts(b, "<p>None.</p>\n");
    else {
        zpi_sb_puts(b, "<ul>\n");
        for (size_t i = 0; i < r->n_strag; i++) {
            zpi_sb_printf(b, "<li><b>rank %d</b> (", r->strag[i].rank);
            zpi_sb_html(b, zp_cluster_report_rank_host(r, r->strag[i].rank));
            zpi_sb_puts(b, "): ");
            zpi_sb_html(b, r->strag[i].reason);
            zpi_sb_puts(b, "</li>\n");
        }
        zpi_sb_puts(b, "</ul>\n");
    }

    zpi_sb_puts(b, "<h2>Where each rank's time goes</h2>\n");
    svg_bars(r, b);
    zpi_sb_puts(b, "<h2>Fetch time per batch, rank &times; window</h2>\n");
    svg_heatmap(r, b);

    zpi_sb_puts(b, "<h2>Per rank</h2>\n<table><tr><th>rank</th><th>node</th><th class=\"l\">host</th>"
                   "<th>samples</th><th>bytes read</th><th>open</th><th>read</th>"
                   "<th>decompress</th><th>transfer</th><th>stall</th><th>stall %</th>"
                   "<th>samples/s</th><th>fetch per batch</th><th>slowest shard</th>"
                   "<th>cache hit %</th><th>retries</th></tr>\n");
    for (int i = 0; i < r->size; i++) {
        const zp_mpi_rank_stats *s = &r->ranks[i];
        zpi_sb_printf(b, "<tr%s><td>%d</td><td>%d</td><td class=\"l\">",
                      r->named[i] ? " class=\"strag\"" : "", s->rank, s->node);
        zpi_sb_html(b, zp_cluster_report_rank_host(r, i));
        zpi_sb_puts(b, "</td>");
        if (!s->valid) {
            zpi_sb_puts(b, "<td colspan=\"13\" class=\"l\">no snapshot</td></tr>\n");
            continue;
        }
        html_cell(b, ZPI_U_COUNT, (double)s->samples);
        html_cell(b, ZPI_U_BYTES, (double)s->bytes_read);
        html_cell(b, ZPI_U_SECONDS, s->open);
        html_cell(b, ZPI_U_SECONDS, s->read);
        html_cell(b, ZPI_U_SECONDS, s->decompress);
        html_cell(b, ZPI_U_SECONDS, s->transfer);
        html_cell(b, ZPI_U_SECONDS, s->stall);
        html_cell(b, ZPI_U_FRACTION, s->stall_fraction);
        html_cell(b, ZPI_U_COUNT, s->samples_per_second);
        html_cell(b, ZPI_U_SECONDS, s->fetch_per_batch);
        html_cell(b, ZPI_U_SECONDS, s->slowest_shard);
        html_cell(b, ZPI_U_FRACTION, s->cache_hit_rate);
        html_cell(b, ZPI_U_COUNT, (double)s->retries);
        zpi_sb_puts(b, "</tr>\n");
    }
    zpi_sb_puts(b, "</table>\n");

    zpi_sb_puts(b, "<h2>Cluster summary</h2>\n<table><tr><th class=\"l\">metric</th><th>min</th>"
                   "<th>rank</th><th>max</th><th>rank</th><th>mean</th><th>stddev</th>"
                   "<th>max/mean</th></tr>\n");
    for (int k = 0; k < ZP_MPI_M_COUNT; k++) {
        const zp_mpi_stat *s = &r->stat[k];
        zpi_mpi_unit u = zpi_mpi_metric_unit(k);
        zpi_sb_printf(b, "<tr><td class=\"l\">%s</td>", zp_mpi_metric_name(k));
        html_cell(b, u, s->min);
        zpi_sb_printf(b, "<td>%d</td>", s->min_rank);
        html_cell(b, u, s->max);
        zpi_sb_printf(b, "<td>%d</td>", s->max_rank);
        html_cell(b, u, s->mean);
        html_cell(b, u, s->stddev);
        zpi_sb_printf(b, "<td>%.2fx</td></tr>\n", s->imbalance);
    }
    zpi_sb_puts(b, "</table>\n");
    zpi_sb_printf(b, "<p>Aggregate throughput: %s achieved; %s as bounded by the slowest rank "
                     "(rank %d).</p>\n",
                  HUMAN(t1, ZPI_U_SAMPLE_RATE, r->throughput),
                  HUMAN(t2, ZPI_U_SAMPLE_RATE, r->bounded),
                  r->stat[ZP_MPI_M_SAMPLES_PER_SECOND].min_rank);

    if (has_mixture(r)) {
        zpi_sb_printf(b, "<h2>Mixture</h2>\n<p>Realized proportions of the %u parts, summed over "
                         "ranks",
                      r->parts_total);
        parts_cut_note(r, b, " (", ")");
        zpi_sb_puts(b, ".</p>\n<table><tr><th class=\"l\">part</th><th>weight</th><th>samples</th>"
                       "<th>share</th><th>tokens</th><th>share</th></tr>\n");
        for (uint32_t i = 0; i < r->n_parts; i++) {
            const zp_part_metrics *p = &r->parts[i];
            zpi_sb_puts(b, "<tr><td class=\"l\">");
            zpi_sb_html(b, p->name);
            zpi_sb_puts(b, "</td>");
            html_cell(b, ZPI_U_FRACTION, p->weight);
            html_cell(b, ZPI_U_COUNT, (double)p->samples);
            html_cell(b, ZPI_U_FRACTION, p->sample_fraction);
            html_cell(b, ZPI_U_COUNT, (double)p->tokens);
            html_cell(b, ZPI_U_FRACTION, p->token_fraction);
            zpi_sb_puts(b, "</tr>\n");
        }
        zpi_sb_puts(b, "</table>\n");
    }

    zpi_sb_puts(b, "<h2>Nodes</h2>\n<table><tr><th>node</th><th class=\"l\">host</th>"
                   "<th class=\"l\">ranks</th><th>samples</th><th>bytes read</th><th>stall %</th>"
                   "<th>samples/s</th></tr>\n");
    for (int j = 0; j < r->nodes; j++) {
        const zp_mpi_rank_stats *s = &r->node_tot[j];
        char list[256];
        node_ranks(r, j, list, sizeof list);
        zpi_sb_printf(b, "<tr><td>%d</td><td class=\"l\">", j);
        zpi_sb_html(b, zp_cluster_report_node_host(r, j));
        zpi_sb_printf(b, "</td><td class=\"l\">%s</td>", list);
        html_cell(b, ZPI_U_COUNT, (double)s->samples);
        html_cell(b, ZPI_U_BYTES, (double)s->bytes_read);
        html_cell(b, ZPI_U_FRACTION, s->stall_fraction);
        html_cell(b, ZPI_U_COUNT, s->samples_per_second);
        zpi_sb_puts(b, "</tr>\n");
    }
    zpi_sb_puts(b, "</table>\n</body></html>\n");
}

/* ------------------------------------------------------------ entry points */

typedef void (*render_fn)(const zp_cluster_report *r, zpi_sbuf *b);

/* Render into a new string: *out malloc'd (len bytes, NUL-terminated). */
static zp_status render_with(render_fn fn, const zp_cluster_report *r, char **out, size_t *len)
{
    zpi_sbuf b = {0};
    fn(r, &b);
    if (b.oom || !b.p) {
        free(b.p);
        return ZP_ERR_NOMEM;
    }
    *out = b.p;
    if (len)
        *len = b.len;
    return ZP_OK;
}

zp_status zp_cluster_report_render(const zp_cluster_report *r, zp_mpi_format fmt, char **out, size_t *len)
{
    static const render_fn by_format[] = {
        [ZP_MPI_TEXT] = render_text,
        [ZP_MPI_JSON] = render_json,
        [ZP_MPI_CSV] = render_csv,
        [ZP_MPI_HTML] = render_html,
    };
    if (!r || !out)
        return ZP_ERR_INVALID;
    *out = NULL;
    if ((unsigned)fmt >= sizeof by_format / sizeof by_format[0])
        return ZP_ERR_INVALID;
    return render_with(by_format[fmt], r, out, len);
}

static zp_status write_file(const char *dir, const char *name, const char *data, size_t len,
                            char *errbuf, size_t errlen)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *path = malloc(n);
    if (!path)
        return ZP_ERR_NOMEM;
    zpi_fmt(path, n, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(data, 1, len, f) == len;
    int e = errno;
    if (f && fclose(f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (!ok && errbuf)
        zpi_fmt(errbuf, errlen, "cannot write '%s': %s", path, strerror(e));
    free(path);
    return ok ? ZP_OK : ZP_ERR_IO;
}

zp_status zp_cluster_report_write(const zp_cluster_report *r, const char *dir, char *errbuf, size_t errlen)
{
    if (errbuf && errlen)
        errbuf[0] = '\0';
    if (!r || !dir || !*dir) {
        if (errbuf)
            zpi_fmt(errbuf, errlen, "zp_cluster_report_write: %s",
                        !r ? "no report (NULL)" : "no folder given");
        return ZP_ERR_INVALID;
    }
    if (zpi_mkdir_p(dir, 0777) != 0) {
        if (errbuf)
            zpi_fmt(errbuf, errlen, "cannot create '%s': %s", dir, strerror(errno));
        return ZP_ERR_IO;
    }
    static const struct {
        const char *name;
        render_fn fn;
    } files[] = {{"report.txt", render_text},
                 {"report.json", render_json},
                 {"report.csv", render_csv},
                 {"report.html", render_html},
                 {"windows.csv", render_windows_csv}};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *s = NULL;
        size_t len = 0;
        zp_status st = render_with(files[i].fn, r, &s, &len);
        if (st != ZP_OK) {
            if (errbuf)
                zpi_fmt(errbuf, errlen, "cannot render %s: %s", files[i].name, zp_status_str(st));
            return st;
        }
        st = write_file(dir, files[i].name, s, len, errbuf, errlen);
        free(s);
        if (st != ZP_OK)
            return st;
    }
    return ZP_OK;
}
