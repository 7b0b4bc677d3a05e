/* mpi_render_common.c - what the report's formats share: the header's
 * pieces (kind, criterion, a partial report's first line, a node's ranks,
 * histogram names), whether a mixture is shown, and the warm-up windows
 * left out of the heat map's scale. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mpi_internal.h"

const char *zpi_mpi_hist_name(int h)
{
    static const char *const names[ZPI_MPI_NHIST] = {"shard_load", "record_read", "transfer"};
    return h >= 0 && h < ZPI_MPI_NHIST ? names[h] : "?";
}

/* "host: ranks 0-3" groups, one per node, in node order. */
void zpi_mpi_node_ranks(const zp_cluster_report *r, int node, char *buf, size_t cap)
{
    zpi_mpi_ranklist(buf, cap, r->node_list + r->node_off[node],
                     (size_t)(r->node_off[node + 1] - r->node_off[node]));
}

const char *zpi_mpi_kind_name(zp_mpi_report_kind k)
{
    return k == ZP_MPI_REPORT_WINDOW ? "window" : "final";
}

void zpi_mpi_criterion_text(const zp_cluster_report *r, zpi_sbuf *b)
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


/* "PARTIAL REPORT: the run was stopped (SIGINT) after 120 steps" (no
 * newline): the first line of every format of a partial report. */
void zpi_mpi_partial_line(const zp_cluster_report *r, zpi_sbuf *b)
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
int zpi_mpi_has_mixture(const zp_cluster_report *r) { return r->parts_total > 1 && r->n_parts > 0; }

/* "(first 64 of N parts listed)" when not every part is. */
void zpi_mpi_parts_cut_note(const zp_cluster_report *r, zpi_sbuf *b, const char *pre, const char *post)
{
    if (r->parts_total > r->n_parts)
        zpi_sb_printf(b, "%sfirst %u of %u parts listed%s", pre, r->n_parts, r->parts_total, post);
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
