/* mpi_render_html_dist.c - the HTML page's distributions over ranks: one
 * small histogram per per-rank figure, so that the page has a fixed size
 * whatever the rank count (docs/report.md, "The HTML page"). */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_internal.h"

/* Bins of a histogram, and its plot area in pixels. */
#define DIST_BINS 40
#define DIST_BW 7   /* bin width */
#define DIST_H 90   /* the tallest bar */
#define DIST_LEFT 8
#define DIST_TOP 6

/* The figures drawn: a field of zp_mpi_rank_stats (or, with get, a value
 * derived from the record) and its unit. */
typedef struct dist_fig {
    const char *name;
    zpi_mpi_unit unit;
    size_t off;
    double (*get)(const zp_mpi_rank_stats *s);
} dist_fig;

static const dist_fig FIGS[] = {
    {"fetch time per batch", ZPI_U_SECONDS, offsetof(zp_mpi_rank_stats, fetch_per_batch), NULL},
    {"stall (consumer wait, share of the step)", ZPI_U_FRACTION,
     offsetof(zp_mpi_rank_stats, stall_fraction), NULL},
    {"accelerator utilisation (AU)", ZPI_U_FRACTION, 0, zpi_mpi_rank_au},
    {"samples/s", ZPI_U_SAMPLE_RATE, offsetof(zp_mpi_rank_stats, samples_per_second), NULL},
    {"slowest shard load", ZPI_U_SECONDS, offsetof(zp_mpi_rank_stats, slowest_shard), NULL},
};

static double fig_value(const zp_mpi_rank_stats *s, const dist_fig *f)
{
    if (f->get)
        return f->get(s);
    double v;
    memcpy(&v, (const char *)s + f->off, sizeof v);
    return v;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The value at quantile q of the n sorted values (nearest rank). */
static double quantile(const double *v, size_t n, double q)
{
    size_t i = (size_t)ceil(q * (double)n);
    return v[i > 0 ? i - 1 : 0];
}

/* One figure's histogram over the valid ranks: bars on a logarithmic count
 * scale (one rank still shows), the bins holding a named straggler in red,
 * dashed lines at p50, p90 and p99, and a caption with them. */
static void dist_one(const zp_cluster_report *r, zpi_sbuf *b, const dist_fig *f, double *v)
{
    size_t n = 0;
    double lo = INFINITY, hi = -INFINITY;
    int hi_rank = -1;
    for (int i = 0; i < r->size; i++) {
        const zp_mpi_rank_stats *s = &r->ranks[i];
        double x = fig_value(s, f);
        if (!s->valid || !isfinite(x))
            continue;
        v[n++] = x;
        lo = fmin(lo, x);
        if (x > hi) {
            hi = x;
            hi_rank = i;
        }
    }
    unsigned cnt[DIST_BINS] = {0};
    unsigned char strag[DIST_BINS] = {0};
    int first[DIST_BINS];
    for (int k = 0; k < DIST_BINS; k++)
        first[k] = -1;
    double span = hi > lo ? hi - lo : 1;
    for (int i = 0; n && i < r->size; i++) {
        const zp_mpi_rank_stats *s = &r->ranks[i];
        double x = fig_value(s, f);
        if (!s->valid || !isfinite(x))
            continue;
        int k = hi > lo ? (int)((x - lo) / span * DIST_BINS) : 0;
        if (k >= DIST_BINS)
            k = DIST_BINS - 1;
        cnt[k]++;
        if (first[k] < 0)
            first[k] = i;
        if (r->named[i])
            strag[k] = 1;
    }
    unsigned maxc = 1;
    for (int k = 0; k < DIST_BINS; k++)
        if (cnt[k] > maxc)
            maxc = cnt[k];
    int w = DIST_LEFT + DIST_BINS * DIST_BW + 8, h = DIST_TOP + DIST_H + 22;
    char t1[48], t2[48], t3[48];
    zpi_sb_puts(b, "<figure class=\"dist\"><figcaption>");
    zpi_sb_html(b, f->name);
    zpi_sb_printf(b, "</figcaption>\n<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" "
                     "width=\"%d\" height=\"%d\" role=\"img\" aria-label=\"distribution over ranks: ",
                  w, h);
    zpi_sb_html(b, f->name);
    zpi_sb_puts(b, "\">\n");
    int base = DIST_TOP + DIST_H;
    zpi_sb_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#999\"/>\n", DIST_LEFT,
                  base, DIST_LEFT + DIST_BINS * DIST_BW, base);
    for (int k = 0; k < DIST_BINS; k++) {
        if (!cnt[k])
            continue;
        /* log scale: 1 rank is a quarter of the tallest bar's first step */
        double hh = 4 + (DIST_H - 4) * log1p((double)cnt[k]) / log1p((double)maxc);
        double b0 = lo + span * k / DIST_BINS, b1 = lo + span * (k + 1) / DIST_BINS;
        zpi_sb_printf(b,
                      "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"%s\">"
                      "<title>%s to %s: %u rank%s (e.g. rank %d)%s</title></rect>\n",
                      DIST_LEFT + k * DIST_BW, base - hh, DIST_BW - 1, hh,
                      strag[k] ? "#e15759" : "#4e79a7", ZPI_MPI_HUMAN(t1, f->unit, b0),
                      ZPI_MPI_HUMAN(t2, f->unit, hi > lo ? b1 : b0), cnt[k], cnt[k] == 1 ? "" : "s",
                      first[k], strag[k] ? ", with a named straggler" : "");
    }
    double p[3] = {0, 0, 0};
    if (n) {
        qsort(v, n, sizeof *v, cmp_d);
        p[0] = quantile(v, n, 0.5), p[1] = quantile(v, n, 0.9), p[2] = quantile(v, n, 0.99);
        for (int q = 0; q < 3; q++) {
            double x = DIST_LEFT + (hi > lo ? (p[q] - lo) / span : 0) * DIST_BINS * DIST_BW;
            zpi_sb_printf(b,
                          "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333\" "
                          "stroke-dasharray=\"2,2\"/>\n",
                          x, DIST_TOP, x, base);
        }
        zpi_sb_printf(b, "<text x=\"%d\" y=\"%d\" class=\"lbl\">%s</text>", DIST_LEFT, base + 14,
                      ZPI_MPI_HUMAN(t1, f->unit, lo));
        zpi_sb_printf(b, "<text x=\"%d\" y=\"%d\" class=\"lbl\" text-anchor=\"end\">%s</text>\n",
                      DIST_LEFT + DIST_BINS * DIST_BW, base + 14, ZPI_MPI_HUMAN(t2, f->unit, hi));
    }
    zpi_sb_puts(b, "</svg>\n<div class=\"note\">");
    if (n)
        zpi_sb_printf(b, "%zu ranks; p50 %s &middot; p90 %s &middot; p99 %s", n,
                      ZPI_MPI_HUMAN(t1, f->unit, p[0]), ZPI_MPI_HUMAN(t2, f->unit, p[1]),
                      ZPI_MPI_HUMAN(t3, f->unit, p[2]));
    else
        zpi_sb_puts(b, "no rank gave a snapshot");
    if (n)
        zpi_sb_printf(b, " &middot; max %s (rank %d)", ZPI_MPI_HUMAN(t1, f->unit, hi), hi_rank);
    zpi_sb_puts(b, "</div></figure>\n");
}

void zpi_mpi_html_distributions(const zp_cluster_report *r, zpi_sbuf *b)
{
    double *v = malloc((size_t)(r->size > 0 ? r->size : 1) * sizeof *v);
    if (!v) {
        b->oom = 1;
        return;
    }
    zpi_sb_puts(b, "<h2>Distributions over ranks</h2>\n<div class=\"dists\">\n");
    for (size_t k = 0; k < sizeof FIGS / sizeof FIGS[0]; k++)
        dist_one(r, b, &FIGS[k], v);
    zpi_sb_puts(b, "</div>\n<p class=\"note\">Ranks per bin on a logarithmic scale (a single rank "
                   "still shows); red: a bin holding a named straggler; dashed lines: p50, p90, "
                   "p99.</p>\n");
    free(v);
}
