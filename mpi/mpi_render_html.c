/* mpi_render_html.c - the cluster report as one self-contained HTML page
 * with inline SVG charts (a bar per rank, a heat map of the windows). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mpi_internal.h"

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
                          ZPI_MPI_HUMAN(t, ZPI_U_SECONDS, p[q]));
            x += w;
        }
    }
    int ay = 4 + n * row + 14;
    zpi_sb_printf(b, "<text x=\"%d\" y=\"%d\" class=\"lbl\">0 s</text>", left, ay);
    zpi_sb_printf(b, "<text x=\"%d\" y=\"%d\" class=\"lbl\" text-anchor=\"end\">%s</text>\n",
                  left + width, ay, ZPI_MPI_HUMAN(t, ZPI_U_SECONDS, maxt));
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

/* The heat map's layout: PER ranks a row, ROWS rows, cells CW x CH pixels
 * from (LEFT, TOP); MAXV the top of the colour scale. */
typedef struct {
    int per, rows, warm;
    int left, top, cw, ch;
    double maxv;
} heat_layout;

/* A value's colour step, -1 when no batch. */
static int heat_level(double v, double maxv)
{
    return isfinite(v) ? (int)lround(fmin(v / maxv, 1.0) * (HEAT_LEVELS - 1)) : -1;
}

static void heat_layout_of(const zp_cluster_report *r, heat_layout *L)
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
    *L = (heat_layout){per, rows, warm, left, top, cw, ch, maxv};
}

/* The run of windows from w on whose cells in row g have one colour: one
 * rectangle, its title the range of values; returns the window after it. */
static int heat_run(const zp_cluster_report *r, zpi_sbuf *b, const heat_layout *L, int g, int w)
{
    int nw = r->n_windows, per = L->per;
    int left = L->left, top = L->top, cw = L->cw, ch = L->ch;
    double maxv = L->maxv;
    int r0 = g * per, r1 = (g + 1) * per < r->size ? (g + 1) * per - 1 : r->size - 1;
    char col[16], lo_s[32], hi_s[32];
    int who;
    double v = heat_cell(r, g, per, w, &who);
    int lev = heat_level(v, maxv);
    double lo = v, hi = v;
    int hi_who = who, e = w + 1;
    for (; e < nw; e++) {
        int who2;
        double v2 = heat_cell(r, g, per, e, &who2);
        int lev2 = heat_level(v2, maxv);
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
    return e;
}

/* Row g of the heat map: its label (every row when they are tall, every
 * eighth otherwise), then its runs of equal colour. */
static void heat_row(const zp_cluster_report *r, zpi_sbuf *b, const heat_layout *L, int g)
{
    int per = L->per;
    int r0 = g * per, r1 = (g + 1) * per < r->size ? (g + 1) * per - 1 : r->size - 1;
    char who_s[48];
    if (L->ch >= 14 || g % 8 == 0) {
        if (r0 == r1)
            zpi_fmt(who_s, sizeof who_s, "rank %d", r0);
        else
            zpi_fmt(who_s, sizeof who_s, "ranks %d-%d", r0, r1);
        zpi_sb_printf(b, "<text x=\"%d\" y=\"%d\" class=\"lbl\" text-anchor=\"end\">%s</text>\n",
                      L->left - 6, L->top + g * L->ch + (L->ch >= 14 ? 11 : 7), who_s);
    }
    /* runs of equal colour in a row are one rectangle */
    for (int w = 0; w < r->n_windows;)
        w = heat_run(r, b, L, g, w);
}

static void svg_heatmap(const zp_cluster_report *r, zpi_sbuf *b)
{
    heat_layout L;
    heat_layout_of(r, &L);
    int nw = r->n_windows, per = L.per, rows = L.rows, warm = L.warm;
    int left = L.left, top = L.top, cw = L.cw, ch = L.ch;
    int height = top + ch * rows + 4;
    zpi_sb_printf(b,
                  "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                  "role=\"img\" aria-label=\"fetch time per batch, rank by window\">\n",
                  left + cw * (nw > 0 ? nw : 1) + 20, height);
    char hi_s[32];
    for (int g = 0; g < rows; g++)
        heat_row(r, b, &L, g);
    if (warm > 0)
        zpi_sb_printf(b,
                      "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\" "
                      "stroke-dasharray=\"3,2\"/>\n",
                      left + warm * cw - 1, top, left + warm * cw - 1, top + ch * rows);
    zpi_sb_puts(b, "</svg>\n");
    zpi_mpi_human_seconds(hi_s, sizeof hi_s, L.maxv);
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
    zpi_sb_printf(b, "<td>%s</td>", ZPI_MPI_HUMAN(t, u, v));
}

/* The page's head and style, and the partial report's banner. */
static void html_head(const zp_cluster_report *r, zpi_sbuf *b)
{
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
        zpi_mpi_partial_line(r, &pl);
        zpi_sb_puts(b, "<div class=\"partial\" id=\"partial\">");
        zpi_sb_html(b, pl.p ? pl.p : "PARTIAL REPORT");
        zpi_sb_puts(b, "</div>\n");
        if (pl.oom)
            b->oom = 1;
        free(pl.p);
    }
}

/* The title line, the verdict, the dataset, the settings and the
 * criterion. */
static void html_header(const zp_cluster_report *r, zpi_sbuf *b)
{
    char t1[48], t2[48];
    zpi_sb_printf(b, "<h1>Zephon cluster fetch-timing report</h1>\n<p>%s report %u &middot; job ",
                  zpi_mpi_kind_name(r->kind), r->index);
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
                  ZPI_MPI_HUMAN(t1, ZPI_U_SECONDS, r->seconds), ZPI_MPI_HUMAN(t2, ZPI_U_BYTES, (double)r->gather_bytes));
    int holds = r->stat[ZP_MPI_M_STALL_FRACTION].ranks &&
                r->stat[ZP_MPI_M_STALL_FRACTION].max >= r->cfg.straggler_min_stall;
    zpi_sb_printf(b, "<p class=\"verdict%s\">", holds ? "" : " ok");
    zpi_sb_html(b, r->verdict);
    zpi_sb_puts(b, "</p>\n<p>");
    if (r->info.have_dataset)
        zpi_sb_printf(b, "Dataset: %llu shards, %s samples, %s. ",
                      (unsigned long long)r->info.ds_shards,
                      ZPI_MPI_HUMAN(t1, ZPI_U_COUNT, (double)r->info.ds_samples),
                      ZPI_MPI_HUMAN(t2, ZPI_U_BYTES, (double)r->info.ds_bytes));
    zpi_sbuf st = {0};
    zpi_mpi_settings_text(&r->info, &st);
    zpi_sb_puts(b, "Settings: <code>");
    zpi_sb_html(b, st.p ? st.p : "");
    free(st.p);
    zpi_sb_puts(b, "</code>.<br>Straggler criterion: ");
    zpi_sbuf cr = {0};
    zpi_mpi_criterion_text(r, &cr);
    zpi_sb_html(b, cr.p ? cr.p : "");
    free(cr.p);
    zpi_sb_puts(b, ".</p>\n");
}

/* The stragglers named. */
static void html_stragglers(const zp_cluster_report *r, zpi_sbuf *b)
{
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
}

/* One row per rank, the stragglers highlighted. */
static void html_ranks(const zp_cluster_report *r, zpi_sbuf *b)
{
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
}

/* The statistics of each metric over the ranks, and the throughput. */
static void html_summary(const zp_cluster_report *r, zpi_sbuf *b)
{
    char t1[48], t2[48];
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
                  ZPI_MPI_HUMAN(t1, ZPI_U_SAMPLE_RATE, r->throughput),
                  ZPI_MPI_HUMAN(t2, ZPI_U_SAMPLE_RATE, r->bounded),
                  r->stat[ZP_MPI_M_SAMPLES_PER_SECOND].min_rank);
}

/* The realized mixture proportions. */
static void html_mixture(const zp_cluster_report *r, zpi_sbuf *b)
{
    if (zpi_mpi_has_mixture(r)) {
        zpi_sb_printf(b, "<h2>Mixture</h2>\n<p>Realized proportions of the %u parts, summed over "
                         "ranks",
                      r->parts_total);
        zpi_mpi_parts_cut_note(r, b, " (", ")");
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
}

/* One row per node, and the end of the page. */
static void html_nodes(const zp_cluster_report *r, zpi_sbuf *b)
{
    zpi_sb_puts(b, "<h2>Nodes</h2>\n<table><tr><th>node</th><th class=\"l\">host</th>"
                   "<th class=\"l\">ranks</th><th>samples</th><th>bytes read</th><th>stall %</th>"
                   "<th>samples/s</th></tr>\n");
    for (int j = 0; j < r->nodes; j++) {
        const zp_mpi_rank_stats *s = &r->node_tot[j];
        char list[256];
        zpi_mpi_node_ranks(r, j, list, sizeof list);
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

void zpi_mpi_render_html(const zp_cluster_report *r, zpi_sbuf *b)
{
    html_head(r, b);
    html_header(r, b);
    zpi_mpi_watch_html(r, b);
    html_stragglers(r, b);
    zpi_sb_puts(b, "<h2>Where each rank's time goes</h2>\n");
    svg_bars(r, b);
    zpi_sb_puts(b, "<h2>Fetch time per batch, rank &times; window</h2>\n");
    svg_heatmap(r, b);
    html_ranks(r, b);
    html_summary(r, b);
    html_mixture(r, b);
    html_nodes(r, b);
}
