/* mpi_render_text.c - the cluster report as text (report.txt, and what
 * rank 0 prints). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mpi_internal.h"

/* The realized mixture proportions, summed over ranks. */
static void mixture_text(const zp_cluster_report *r, zpi_sbuf *b)
{
    if (!zpi_mpi_has_mixture(r))
        return;
    char t1[48], t2[48], t3[48], t4[48], t5[48];
    zpi_sb_printf(b, "\nmixture (%u parts, summed over ranks", r->parts_total);
    zpi_mpi_parts_cut_note(r, b, "; ", "");
    zpi_sb_puts(b, "):\n");
    zpi_sb_printf(b, "  %-24s %8s %10s %8s %10s %8s\n", "part", "weight", "samples", "share",
                  "tokens", "share");
    for (uint32_t i = 0; i < r->n_parts; i++) {
        const zp_part_metrics *p = &r->parts[i];
        zpi_sb_printf(b, "  %-24.24s %8s %10s %8s %10s %8s\n", p->name,
                      ZPI_MPI_HUMAN(t1, ZPI_U_FRACTION, p->weight), ZPI_MPI_HUMAN(t2, ZPI_U_COUNT, (double)p->samples),
                      ZPI_MPI_HUMAN(t3, ZPI_U_FRACTION, p->sample_fraction),
                      ZPI_MPI_HUMAN(t4, ZPI_U_COUNT, (double)p->tokens),
                      ZPI_MPI_HUMAN(t5, ZPI_U_FRACTION, p->token_fraction));
    }
}

/* Attention-cost balance: across the ranks of each global step
 * (zp_mpi_balance, the root's figures) and within each rank's windows
 * (zp_pipeline_balance); only when one of them ran. */
static void balance_text(const zp_cluster_report *r, zpi_sbuf *b)
{
    if (!zp_cluster_report_has_balance(r))
        return;
    zpi_sb_puts(b, "\nattention-cost balance (max/mean of the attention cost, 1 = even):\n");
    zp_mpi_balance_stats bs;
    if (zp_cluster_report_balance(r, &bs))
        zpi_sb_printf(b,
                      "  across ranks (K=%llu microbatches per rank, %llu steps, %llu rows "
                      "moved):\n    ranks per step        %.3f -> %.3f\n"
                      "    microbatches per step %.3f -> %.3f\n",
                      (unsigned long long)bs.window, (unsigned long long)bs.steps,
                      (unsigned long long)bs.rows_moved, bs.rank_imbalance_before,
                      bs.rank_imbalance_after, bs.mb_imbalance_before, bs.mb_imbalance_after);
    if (r->totals.balance_windows) {
        zpi_sb_printf(b, "  within ranks (%llu windows): %.3f -> %.3f\n",
                      (unsigned long long)r->totals.balance_windows,
                      r->totals.attn_imbalance_before, r->totals.attn_imbalance_after);
        zpi_sb_printf(b, "    %6s %10s %8s %8s\n", "rank", "windows", "before", "after");
        for (int i = 0; i < r->size; i++) {
            const zp_mpi_rank_stats *s = &r->ranks[i];
            if (s->valid)
                zpi_sb_printf(b, "    %6d %10llu %8.3f %8.3f\n", s->rank,
                              (unsigned long long)s->balance_windows, s->attn_imbalance_before,
                              s->attn_imbalance_after);
        }
    }
}

/* autotune: the values the ranks use (min-max over the ranks with a
 * snapshot), "(auto)" where a rank tuned it (docs/pipeline.md, "Autotune"). */
static void tuning_text(const zp_cluster_report *r, zpi_sbuf *b)
{
    static const char *names[3] = {"prefetch_batches", "fetch parallelism",
                                   "tokenize parallelism"};
    uint32_t lo[3] = {UINT32_MAX, UINT32_MAX, UINT32_MAX}, hi[3] = {0, 0, 0};
    unsigned autob = 0;
    int any = 0;
    for (int i = 0; i < r->size; i++) {
        const zp_mpi_rank_stats *s = &r->ranks[i];
        if (!s->valid)
            continue;
        any = 1;
        const uint32_t v[3] = {s->tuned_prefetch_batches, s->tuned_fetch, s->tuned_tokenize};
        for (int k = 0; k < 3; k++) {
            lo[k] = v[k] < lo[k] ? v[k] : lo[k];
            hi[k] = v[k] > hi[k] ? v[k] : hi[k];
        }
        autob |= s->tuned_auto;
    }
    if (!any)
        return;
    zpi_sb_puts(b, "tuning:");
    const char *sep = " ";
    for (int k = 0; k < 3; k++) {
        if (k == 2 && hi[2] == 0)
            continue; /* no tokenize operator */
        if (lo[k] == hi[k])
            zpi_sb_printf(b, "%s%s %u", sep, names[k], hi[k]);
        else
            zpi_sb_printf(b, "%s%s %u-%u", sep, names[k], lo[k], hi[k]);
        if (autob & (1u << k))
            zpi_sb_puts(b, " (auto)");
        sep = ", ";
    }
    zpi_sb_puts(b, "\n");
}

/* The title, the job, the dataset, the settings, the criterion and the
 * cost of the report. */
static void header_text(const zp_cluster_report *r, zpi_sbuf *b)
{
    char t1[48], t2[48], t3[48];
    if (r->partial) {
        zpi_mpi_partial_line(r, b);
        zpi_sb_puts(b, "\n\n");
    }
    zpi_sb_printf(b, "Zephon cluster fetch-timing report (%s, report %u)\n", zpi_mpi_kind_name(r->kind),
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
    tuning_text(r, b);
    if (r->info.have_dataset)
        zpi_sb_printf(b, "dataset: %llu shards, %s samples, %s (fingerprint %016llx)\n",
                      (unsigned long long)r->info.ds_shards,
                      ZPI_MPI_HUMAN(t1, ZPI_U_COUNT, (double)r->info.ds_samples),
                      ZPI_MPI_HUMAN(t2, ZPI_U_BYTES, (double)r->info.ds_bytes),
                      (unsigned long long)r->info.ds_fingerprint);
    else
        zpi_sb_puts(b, "dataset: (not agreed)\n");
    zpi_sb_puts(b, "settings: ");
    zpi_mpi_settings_text(&r->info, b);
    zpi_sb_puts(b, "\nstraggler criterion: ");
    zpi_mpi_criterion_text(r, b);
    zpi_sb_printf(b, "\nreport: gathered and analysed in %s (analysis %s), %s gathered per rank\n",
                  ZPI_MPI_HUMAN(t1, ZPI_U_SECONDS, r->seconds), ZPI_MPI_HUMAN(t2, ZPI_U_SECONDS, r->analysis_seconds),
                  ZPI_MPI_HUMAN(t3, ZPI_U_BYTES, (double)r->gather_bytes));
}

/* The ranks of each node. */
static void hosts_text(const zp_cluster_report *r, zpi_sbuf *b)
{
    char list[128];
    zpi_sb_puts(b, "\nhosts:\n");
    for (int j = 0; j < r->nodes; j++) {
        zpi_mpi_node_ranks(r, j, list, sizeof list);
        zpi_sb_printf(b, "  node %-4d %-24s ranks %s\n", j, zp_cluster_report_node_host(r, j), list);
    }
}

/* One line per rank. */
static void ranks_text(const zp_cluster_report *r, zpi_sbuf *b)
{
    char t1[48], t2[48], t3[48], t4[48], t5[48], t6[48], t7[48], t8[48], t9[48], t10[48], t11[48],
        t12[48], list[128], au[48];
    zpi_sb_puts(b, "\nper rank:\n");
    zpi_sb_printf(b, "  %5s %4s %-16s %8s %9s %8s %8s %8s %8s %8s %6s %10s %11s %8s %6s %7s %6s\n", "rank",
                  "node", "host", "samples", "bytes", "open", "read", "decomp", "xfer", "stall",
                  "stall%", "samples/s", "fetch/batch", "slowest", "hit%", "retries", "AU");
    for (int i = 0; i < r->size; i++) {
        const zp_mpi_rank_stats *s = &r->ranks[i];
        if (!s->valid) {
            zpi_sb_printf(b, "  %5d %4d %-16.16s (no snapshot)\n", s->rank, s->node,
                          zp_cluster_report_rank_host(r, i));
            continue;
        }
        zpi_mpi_human_percent(au, sizeof au, zpi_mpi_rank_au(s));
        zpi_sb_printf(b, "  %5d %4d %-16.16s %8s %9s %8s %8s %8s %8s %8s %6s %10s %11s %8s %6s %7s %6s\n",
                      s->rank, s->node, zp_cluster_report_rank_host(r, i),
                      ZPI_MPI_HUMAN(t1, ZPI_U_COUNT, (double)s->samples),
                      ZPI_MPI_HUMAN(t2, ZPI_U_BYTES, (double)s->bytes_read),
                      ZPI_MPI_HUMAN(t3, ZPI_U_SECONDS, s->open), ZPI_MPI_HUMAN(t4, ZPI_U_SECONDS, s->read),
                      ZPI_MPI_HUMAN(t5, ZPI_U_SECONDS, s->decompress), ZPI_MPI_HUMAN(t6, ZPI_U_SECONDS, s->transfer),
                      ZPI_MPI_HUMAN(t7, ZPI_U_SECONDS, s->stall), ZPI_MPI_HUMAN(t8, ZPI_U_FRACTION, s->stall_fraction),
                      ZPI_MPI_HUMAN(t9, ZPI_U_COUNT, s->samples_per_second),
                      ZPI_MPI_HUMAN(t10, ZPI_U_SECONDS, s->fetch_per_batch),
                      ZPI_MPI_HUMAN(t11, ZPI_U_SECONDS, s->slowest_shard),
                      ZPI_MPI_HUMAN(t12, ZPI_U_FRACTION, s->cache_hit_rate),
                      ZPI_MPI_HUMAN(list, ZPI_U_COUNT, (double)s->retries), au);
    }
}

/* Shards read on demand (HDF5, Megatron .bin/.idx): their reads per rank. */
static void ondemand_text(const zp_cluster_report *r, zpi_sbuf *b)
{
    char t1[48], t2[48], t3[48], t4[48], t5[48];
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
                          ZPI_MPI_HUMAN(t1, ZPI_U_COUNT, (double)s->ondemand_reads),
                          ZPI_MPI_HUMAN(t2, ZPI_U_BYTES, (double)s->ondemand_bytes),
                          ZPI_MPI_HUMAN(t3, ZPI_U_SECONDS, s->ondemand),
                          ZPI_MPI_HUMAN(t4, ZPI_U_SECONDS, s->ondemand_io),
                          ZPI_MPI_HUMAN(t5, ZPI_U_SECONDS, s->hdf5_lock_wait));
        }
    }
}

/* The statistics of each metric over the ranks, the throughput and the
 * cluster totals. */
static void summary_text(const zp_cluster_report *r, zpi_sbuf *b)
{
    char t1[48], t2[48], t3[48], t4[48], t5[48], t6[48], t7[48], t8[48], t9[48], t10[48];
    zpi_sb_printf(b, "\ncluster summary (over %u ranks):\n", r->stat[0].ranks);
    zpi_sb_printf(b, "  %-18s %18s %6s %18s %6s %18s %18s %9s\n", "metric", "min", "rank", "max",
                  "rank", "mean", "stddev", "max/mean");
    for (int k = 0; k < ZP_MPI_M_COUNT; k++) {
        const zp_mpi_stat *st = &r->stat[k];
        zpi_mpi_unit u = zpi_mpi_metric_unit(k);
        zpi_sb_printf(b, "  %-18s %18s %6d %18s %6d %18s %18s %8.2fx\n", zp_mpi_metric_name(k),
                      ZPI_MPI_HUMAN(t1, u, st->min), st->min_rank, ZPI_MPI_HUMAN(t2, u, st->max), st->max_rank,
                      ZPI_MPI_HUMAN(t3, u, st->mean), ZPI_MPI_HUMAN(t4, u, st->stddev), st->imbalance);
    }
    const zp_mpi_stat *sps = &r->stat[ZP_MPI_M_SAMPLES_PER_SECOND];
    zpi_sb_printf(b,
                  "aggregate throughput: %s achieved; %s bounded by the slowest rank (rank %d: %s "
                  "x %u ranks)\n",
                  ZPI_MPI_HUMAN(t1, ZPI_U_SAMPLE_RATE, r->throughput), ZPI_MPI_HUMAN(t2, ZPI_U_SAMPLE_RATE, r->bounded),
                  sps->min_rank, ZPI_MPI_HUMAN(t3, ZPI_U_SAMPLE_RATE, sps->min), sps->ranks);
    const zp_mpi_rank_stats *t = &r->totals;
    zpi_sb_printf(b,
                  "cluster totals: %s batches, %s samples, %s tokens, %s read, %s of records, "
                  "%s shard loads, %s retries, %s padded, %s skipped, %s batches dropped at the "
                  "common stop\n",
                  ZPI_MPI_HUMAN(t1, ZPI_U_COUNT, (double)t->batches), ZPI_MPI_HUMAN(t2, ZPI_U_COUNT, (double)t->samples),
                  ZPI_MPI_HUMAN(t3, ZPI_U_COUNT, (double)t->tokens), ZPI_MPI_HUMAN(t4, ZPI_U_BYTES, (double)t->bytes_read),
                  ZPI_MPI_HUMAN(t5, ZPI_U_BYTES, (double)t->bytes_fetched),
                  ZPI_MPI_HUMAN(t6, ZPI_U_COUNT, (double)t->shards_opened),
                  ZPI_MPI_HUMAN(t7, ZPI_U_COUNT, (double)t->retries), ZPI_MPI_HUMAN(t8, ZPI_U_COUNT, (double)t->padded),
                  ZPI_MPI_HUMAN(t9, ZPI_U_COUNT, (double)t->skipped),
                  ZPI_MPI_HUMAN(t10, ZPI_U_COUNT, (double)t->batches_dropped));
    if (t->peer_shards || t->peer_fallbacks || t->peer_served)
        zpi_sb_printf(b,
                      "between nodes: %s shards (%s) received from other nodes in %s, %s requests "
                      "failed or timed out (downloaded from storage); %s downloads from storage\n",
                      ZPI_MPI_HUMAN(t1, ZPI_U_COUNT, (double)t->peer_shards),
                      ZPI_MPI_HUMAN(t2, ZPI_U_BYTES, (double)t->peer_bytes),
                      ZPI_MPI_HUMAN(t3, ZPI_U_SECONDS, t->peer_seconds),
                      ZPI_MPI_HUMAN(t4, ZPI_U_COUNT, (double)t->peer_fallbacks),
                      ZPI_MPI_HUMAN(t5, ZPI_U_COUNT, (double)t->downloads));
}

/* One line per node. */
static void nodes_text(const zp_cluster_report *r, zpi_sbuf *b)
{
    char t1[48], t2[48], t3[48], t4[48], t5[48];
    zpi_sb_puts(b, "\nper node:\n");
    zpi_sb_printf(b, "  %4s %-24s %5s %9s %9s %9s %7s %10s\n", "node", "host", "ranks", "samples",
                  "bytes", "stall", "stall%", "samples/s");
    for (int j = 0; j < r->nodes; j++) {
        const zp_mpi_rank_stats *s = &r->node_tot[j];
        zpi_sb_printf(b, "  %4d %-24.24s %5d %9s %9s %9s %7s %10s\n", j,
                      zp_cluster_report_node_host(r, j), s->local_rank,
                      ZPI_MPI_HUMAN(t1, ZPI_U_COUNT, (double)s->samples),
                      ZPI_MPI_HUMAN(t2, ZPI_U_BYTES, (double)s->bytes_read), ZPI_MPI_HUMAN(t3, ZPI_U_SECONDS, s->stall),
                      ZPI_MPI_HUMAN(t4, ZPI_U_FRACTION, s->stall_fraction),
                      ZPI_MPI_HUMAN(t5, ZPI_U_COUNT, s->samples_per_second));
    }
}

/* The merged latency histograms. */
static void latency_text(const zp_cluster_report *r, zpi_sbuf *b)
{
    char t1[48], t2[48], t3[48], t4[48], t5[48];
    zpi_sb_puts(b, "\nlatency over all ranks:\n");
    for (int k = 0; k < ZPI_MPI_NHIST; k++) {
        const zp_hist *h = &r->hist[k];
        if (!h->count) {
            zpi_sb_printf(b, "  %-12s no events\n", zpi_mpi_hist_name(k));
            continue;
        }
        zpi_sb_printf(b, "  %-12s %s events, p50 %s, p90 %s, p99 %s, max %s\n", zpi_mpi_hist_name(k),
                      ZPI_MPI_HUMAN(t1, ZPI_U_COUNT, (double)h->count),
                      ZPI_MPI_HUMAN(t2, ZPI_U_SECONDS, (double)zp_hist_quantile(h, 0.5) * 1e-9),
                      ZPI_MPI_HUMAN(t3, ZPI_U_SECONDS, (double)zp_hist_quantile(h, 0.9) * 1e-9),
                      ZPI_MPI_HUMAN(t4, ZPI_U_SECONDS, (double)zp_hist_quantile(h, 0.99) * 1e-9),
                      ZPI_MPI_HUMAN(t5, ZPI_U_SECONDS, (double)h->max_ns * 1e-9));
    }
}

/* The stragglers named and the verdict. */
static void stragglers_text(const zp_cluster_report *r, zpi_sbuf *b)
{
    zpi_sb_puts(b, "\nstragglers:\n");
    if (!r->n_strag)
        zpi_sb_puts(b, "  none\n");
    for (size_t i = 0; i < r->n_strag; i++)
        zpi_sb_printf(b, "  rank %d (%s): %s\n", r->strag[i].rank,
                      zp_cluster_report_rank_host(r, r->strag[i].rank), r->strag[i].reason);
    zpi_sb_printf(b, "\n%s\n", r->verdict);
    zpi_mpi_au_sentence(r, b);
    zpi_sb_puts(b, "\n");
}

void zpi_mpi_render_text(const zp_cluster_report *r, zpi_sbuf *b)
{
    header_text(r, b);
    zpi_mpi_watch_text(r, b);
    hosts_text(r, b);
    ranks_text(r, b);
    ondemand_text(r, b);
    summary_text(r, b);
    mixture_text(r, b);
    balance_text(r, b);
    nodes_text(r, b);
    latency_text(r, b);
    stragglers_text(r, b);
    zpi_mpi_coverage_text(r, b);
}
