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

/* Up to HTML_FULL_RANKS ranks the page draws a bar per rank and shows the
 * per-rank tables open; beyond, the bar chart draws HTML_BAR_ROWS ranks (the
 * named stragglers and the longest bars) and the ranks at three percentiles,
 * the tables list the HTML_WORST worst ranks (nodes) and keep the full ones
 * collapsed. The heat map draws at most HEAT_MAX_ROWS rows (beyond, a row
 * is a group of consecutive ranks). They bound the page's height whatever
 * the rank count (docs/report.md). */
#define HTML_FULL_RANKS 32
#define HTML_BAR_ROWS 16
#define HTML_WORST 10
#define HTML_MAX_STRAGGLERS 20
#define HEAT_MAX_ROWS 64

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

/* A bar of the chart: its rank, and the percentile it stands for (0: a
 * rank drawn for itself). */
typedef struct bar_row {
    int rank, pct;
} bar_row;

/* The bars drawn: every rank in rank order up to HTML_FULL_RANKS; beyond,
 * the named stragglers and the longest bars (HTML_BAR_ROWS), longest first,
 * then the ranks at p99, p90 and p50 of the bar length. *n out. */
static bar_row *bar_rows(const zp_cluster_report *r, int *n)
{
    bar_row *row = malloc((size_t)(r->size > 0 ? r->size : 1) * sizeof *row);
    if (!row)
        return NULL;
    *n = r->size;
    for (int i = 0; i < r->size; i++)
        row[i] = (bar_row){i, 0};
    if (r->size <= HTML_FULL_RANKS)
        return row;
    bar_key *k = malloc((size_t)r->size * sizeof *k);
    if (!k) {
        free(row);
        return NULL;
    }
    for (int i = 0; i < r->size; i++)
        k[i] = (bar_key){r->named[i], bar_total(&r->ranks[i]), i};
    qsort(k, (size_t)r->size, sizeof *k, cmp_bar);
    *n = HTML_BAR_ROWS;
    for (int i = 0; i < *n; i++)
        row[i] = (bar_row){k[i].rank, 0};
    /* the percentiles of the length alone (stragglers not put first) */
    for (int i = 0; i < r->size; i++)
        k[i].named = 0;
    qsort(k, (size_t)r->size, sizeof *k, cmp_bar);
    static const int pct[] = {99, 90, 50};
    for (size_t q = 0; q < sizeof pct / sizeof pct[0]; q++) {
        /* the nearest rank from the top: (100 - p)% of the ranks are longer */
        int at = (int)((double)(100 - pct[q]) / 100.0 * r->size);
        row[(*n)++] = (bar_row){k[at < r->size ? at : r->size - 1].rank, pct[q]};
    }
    free(k);
    return row;
}

static void svg_bars(const zp_cluster_report *r, zpi_sbuf *b)
{
    int n = 0;
    bar_row *row = bar_rows(r, &n);
    if (!row) {
        b->oom = 1;
        return;
    }
    double maxt = 0;
    for (int k = 0; k < n; k++)
        maxt = fmax(maxt, bar_total(&r->ranks[row[k].rank]));
    if (maxt <= 0)
        maxt = 1;
    const int rh = 16, left = 110, width = 640;
    int height = n * rh + 40;
    zpi_sb_printf(b,
                  "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                  "role=\"img\" aria-label=\"where each rank's time goes\">\n",
                  left + width + 20, height);
    char t[32];
    for (int k = 0; k < n; k++) {
        const zp_mpi_rank_stats *s = &r->ranks[row[k].rank];
        double p[P_N];
        parts_of(s, p);
        int y = 4 + k * rh;
        zpi_sb_printf(b, "<text x=\"%d\" y=\"%d\" class=\"lbl\" text-anchor=\"end\">", left - 6,
                      y + 11);
        if (row[k].pct)
            zpi_sb_printf(b, "p%d: ", row[k].pct);
        zpi_sb_printf(b, "rank %d</text>\n", s->rank);
        double x = left;
        for (int q = 0; q < P_N; q++) {
            double w = p[q] / maxt * width;
            if (w <= 0)
                continue;
            zpi_sb_printf(b,
                          "<rect x=\"%.1f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\">"
                          "<title>rank %d %s: %s</title></rect>\n",
                          x, y, w, rh - 3, PART_COLOR[q], s->rank, PART_NAME[q],
                          ZPI_MPI_HUMAN(t, ZPI_U_SECONDS, p[q]));
            x += w;
        }
    }
    int ay = 4 + n * rh + 14;
    zpi_sb_printf(b, "<text x=\"%d\" y=\"%d\" class=\"lbl\">0 s</text>", left, ay);
    zpi_sb_printf(b, "<text x=\"%d\" y=\"%d\" class=\"lbl\" text-anchor=\"end\">%s</text>\n",
                  left + width, ay, ZPI_MPI_HUMAN(t, ZPI_U_SECONDS, maxt));
    zpi_sb_puts(b, "</svg>\n<div class=\"legend\">");
    for (int k = 0; k < P_N; k++)
        zpi_sb_printf(b, "<span><i style=\"background:%s\"></i>%s</span> ", PART_COLOR[k],
                      PART_NAME[k]);
    zpi_sb_puts(b, "</div>\n");
    if (r->size > HTML_FULL_RANKS)
        zpi_sb_printf(b,
                      "<p class=\"note\">%d of %d ranks are drawn: the named stragglers and the "
                      "ranks with the longest bars, longest first, then the ranks at the 99th, "
                      "90th and 50th percentile of the bar length (p99: 1%% of the ranks have "
                      "longer bars); the distributions below cover every rank.</p>\n",
                      HTML_BAR_ROWS, r->size);
    free(row);
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
    int rpn; /* >0: a row is whole nodes of rpn ranks each (rank i on node i / rpn) */
} heat_layout;

/* The ranks per node when every node has as many and rank i is on node
 * i / that count (the launcher's block placement), else 0. */
static int heat_block_nodes(const zp_cluster_report *r)
{
    int rpn = r->ranks_per_node_max;
    if (rpn < 1 || r->ranks_per_node_min != rpn)
        return 0;
    for (int i = 0; i < r->size; i++)
        if (r->ranks[i].node != i / rpn)
            return 0;
    return rpn;
}

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
    /* grouped rows: whole nodes when the placement allows */
    int rpn = per > 1 ? heat_block_nodes(r) : 0;
    if (rpn)
        per = rpn * ((r->nodes + HEAT_MAX_ROWS - 1) / HEAT_MAX_ROWS);
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
    const int left = 130, top = 4;
    int cw = nw > 0 ? 640 / nw : 8, ch = rows <= HTML_FULL_RANKS ? 14 : 8;
    if (cw > 40)
        cw = 40;
    if (cw < 2)
        cw = 2;
    *L = (heat_layout){per, rows, warm, left, top, cw, ch, maxv, rpn};
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
    if (L->rpn)
        zpi_sb_printf(b, "nodes %d-%d (ranks %d-%d), ", r0 / L->rpn, r1 / L->rpn, r0, r1);
    else if (per > 1)
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
        else if (L->rpn)
            zpi_fmt(who_s, sizeof who_s, "nodes %d-%d", r0 / L->rpn, r1 / L->rpn);
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
                  L.rpn ? "; a row is a group of whole nodes, its ranks' slowest"
                  : per > 1 ? "; a row is its ranks' slowest" : "");
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
                   ".dists{display:flex;flex-wrap:wrap;gap:8px 24px}.dist{margin:0}"
                   ".dist figcaption{font-size:13px}.dist .note{font-size:12px}\n"
                   "details summary{cursor:pointer;color:#1f4e99;margin:4px 0 12px}\n"
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
    zpi_mpi_au au;
    zpi_mpi_au_of(r, &au);
    zpi_sb_printf(b, "</p>\n<p class=\"verdict%s\" id=\"au\">", au.passes ? " ok" : "");
    zpi_sbuf as = {0};
    zpi_mpi_au_sentence(r, &as);
    if (as.oom)
        b->oom = 1;
    zpi_sb_html(b, as.p ? as.p : "");
    free(as.p);
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
        for (size_t i = 0; i < r->n_strag && i < HTML_MAX_STRAGGLERS; i++) {
            zpi_sb_printf(b, "<li><b>rank %d</b> (", r->strag[i].rank);
            zpi_sb_html(b, zp_cluster_report_rank_host(r, r->strag[i].rank));
            zpi_sb_puts(b, "): ");
            zpi_sb_html(b, r->strag[i].reason);
            zpi_sb_puts(b, "</li>\n");
        }
        zpi_sb_puts(b, "</ul>\n");
        if (r->n_strag > HTML_MAX_STRAGGLERS)
            zpi_sb_printf(b, "<p class=\"note\">The first %d of %zu named stragglers; the "
                             "per-rank table below, the JSON and the CSV name all.</p>\n",
                          HTML_MAX_STRAGGLERS, r->n_strag);
    }
}

/* The per-rank table's head. */
static void html_ranks_head(zpi_sbuf *b)
{
    zpi_sb_puts(b, "<table><tr><th>rank</th><th>node</th><th class=\"l\">host</th>"
                   "<th>samples</th><th>bytes read</th><th>open</th><th>read</th>"
                   "<th>decompress</th><th>transfer</th><th>stall</th><th>stall %</th>"
                   "<th>samples/s</th><th>fetch per batch</th><th>slowest shard</th>"
                   "<th>cache hit %</th><th>retries</th><th>AU</th></tr>\n");
}

/* Rank i's row, highlighted when it is a named straggler. */
static void html_rank_row(const zp_cluster_report *r, zpi_sbuf *b, int i)
{
    const zp_mpi_rank_stats *s = &r->ranks[i];
    zpi_sb_printf(b, "<tr%s><td>%d</td><td>%d</td><td class=\"l\">",
                  r->named[i] ? " class=\"strag\"" : "", s->rank, s->node);
    zpi_sb_html(b, zp_cluster_report_rank_host(r, i));
    zpi_sb_puts(b, "</td>");
    if (!s->valid) {
        zpi_sb_puts(b, "<td colspan=\"14\" class=\"l\">no snapshot</td></tr>\n");
        return;
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
    html_cell(b, ZPI_U_FRACTION, zpi_mpi_rank_au(s));
    zpi_sb_puts(b, "</tr>\n");
}

typedef struct worst_key {
    int named;
    double v;
    int i;
} worst_key;

static int cmp_worst(const void *a, const void *b)
{
    const worst_key *x = a, *y = b;
    if (x->named != y->named)
        return y->named - x->named;
    if (x->v != y->v)
        return x->v < y->v ? 1 : -1;
    return x->i - y->i;
}

/* The HTML_WORST highest of v[0..n) (named first when `named`), worst
 * first, into out; returns how many (fewer when n is smaller), -1 when out
 * of memory. */
static int worst_of(int n, const double *v, const uint8_t *named, int *out)
{
    worst_key *k = malloc((size_t)(n > 0 ? n : 1) * sizeof *k);
    if (!k)
        return -1;
    for (int i = 0; i < n; i++)
        k[i] = (worst_key){named ? named[i] : 0, isfinite(v[i]) ? v[i] : -INFINITY, i};
    qsort(k, (size_t)n, sizeof *k, cmp_worst);
    int m = n < HTML_WORST ? n : HTML_WORST;
    for (int j = 0; j < m; j++)
        out[j] = k[j].i;
    free(k);
    return m;
}

/* One row per rank, the stragglers highlighted: open up to HTML_FULL_RANKS
 * ranks; beyond, the worst ranks (named stragglers first, then the highest
 * fetch time per batch) and the whole table collapsed. */
static void html_ranks(const zp_cluster_report *r, zpi_sbuf *b)
{
    if (r->size > HTML_FULL_RANKS) {
        double *v = malloc((size_t)r->size * sizeof *v);
        int worst[HTML_WORST], m = -1;
        if (v) {
            for (int i = 0; i < r->size; i++)
                v[i] = r->ranks[i].valid ? r->ranks[i].fetch_per_batch : -INFINITY;
            m = worst_of(r->size, v, r->named, worst);
            free(v);
        }
        if (m < 0) {
            b->oom = 1;
            return;
        }
        zpi_sb_printf(b, "<h2>Worst ranks</h2>\n<p>The named stragglers, then the highest fetch "
                         "time per batch; %d of %d ranks.</p>\n",
                      m, r->size);
        html_ranks_head(b);
        for (int j = 0; j < m; j++)
            html_rank_row(r, b, worst[j]);
        zpi_sb_printf(b, "</table>\n<details id=\"all-ranks\"><summary>All %d ranks, a row "
                         "each (collapsed; the browser's find-in-page searches it; report.csv "
                         "has every field)</summary>\n",
                      r->size);
    } else {
        zpi_sb_puts(b, "<h2>Per rank</h2>\n");
    }
    html_ranks_head(b);
    for (int i = 0; i < r->size; i++)
        html_rank_row(r, b, i);
    zpi_sb_puts(b, "</table>\n");
    if (r->size > HTML_FULL_RANKS)
        zpi_sb_puts(b, "</details>\n");
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

/* Attention-cost balance, when it ran: across the ranks of each step and
 * within each rank's windows. */
static void html_balance(const zp_cluster_report *r, zpi_sbuf *b)
{
    if (!zp_cluster_report_has_balance(r))
        return;
    zpi_sb_puts(b, "<h2>Attention-cost balance</h2>\n<p>Max/mean of the attention cost "
                   "(1 = even), before and after balance.</p>\n");
    zp_mpi_balance_stats bs;
    if (zp_cluster_report_balance(r, &bs))
        zpi_sb_printf(b,
                      "<table><tr><th class=\"l\">across ranks (K=%llu, %llu steps, %llu rows "
                      "moved)</th><th>before</th><th>after</th></tr>\n"
                      "<tr><td class=\"l\">ranks per step</td><td>%.3f</td><td>%.3f</td></tr>\n"
                      "<tr><td class=\"l\">microbatches per step</td><td>%.3f</td><td>%.3f</td>"
                      "</tr>\n</table>\n",
                      (unsigned long long)bs.window, (unsigned long long)bs.steps,
                      (unsigned long long)bs.rows_moved, bs.rank_imbalance_before,
                      bs.rank_imbalance_after, bs.mb_imbalance_before, bs.mb_imbalance_after);
    if (r->totals.balance_windows) {
        if (r->size > HTML_FULL_RANKS)
            zpi_sb_printf(b, "<details><summary>Within each rank (%d rows, collapsed)</summary>\n",
                          r->size);
        zpi_sb_puts(b, "<table><tr><th class=\"l\">within rank</th><th>windows</th>"
                       "<th>before</th><th>after</th></tr>\n");
        for (int i = 0; i < r->size; i++) {
            const zp_mpi_rank_stats *s = &r->ranks[i];
            if (s->valid)
                zpi_sb_printf(b, "<tr><td class=\"l\">%d</td><td>%llu</td><td>%.3f</td>"
                                 "<td>%.3f</td></tr>\n",
                              s->rank, (unsigned long long)s->balance_windows,
                              s->attn_imbalance_before, s->attn_imbalance_after);
        }
        zpi_sb_printf(b, "<tr><td class=\"l\">all</td><td>%llu</td><td>%.3f</td><td>%.3f</td>"
                         "</tr>\n</table>\n",
                      (unsigned long long)r->totals.balance_windows,
                      r->totals.attn_imbalance_before, r->totals.attn_imbalance_after);
        if (r->size > HTML_FULL_RANKS)
            zpi_sb_puts(b, "</details>\n");
    }
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

/* Node j's row. */
static void html_node_row(const zp_cluster_report *r, zpi_sbuf *b, int j)
{
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

static void html_nodes_head(zpi_sbuf *b)
{
    zpi_sb_puts(b, "<table><tr><th>node</th><th class=\"l\">host</th>"
                   "<th class=\"l\">ranks</th><th>samples</th><th>bytes read</th><th>stall %</th>"
                   "<th>samples/s</th></tr>\n");
}

/* One row per node, open up to HTML_WORST nodes; beyond, the nodes with
 * the highest stall and the whole table collapsed. Then the end of the
 * page. */
static void html_nodes(const zp_cluster_report *r, zpi_sbuf *b)
{
    zpi_sb_puts(b, "<h2>Nodes</h2>\n");
    int many = r->nodes > HTML_WORST;
    if (many) {
        double *v = malloc((size_t)r->nodes * sizeof *v);
        int worst[HTML_WORST], m = -1;
        if (v) {
            for (int j = 0; j < r->nodes; j++)
                v[j] = r->node_tot[j].stall_fraction;
            m = worst_of(r->nodes, v, NULL, worst);
            free(v);
        }
        if (m < 0) {
            b->oom = 1;
            return;
        }
        zpi_sb_printf(b, "<p>The %d nodes with the highest stall, of %d.</p>\n", m, r->nodes);
        html_nodes_head(b);
        for (int j = 0; j < m; j++)
            html_node_row(r, b, worst[j]);
        zpi_sb_printf(b, "</table>\n<details id=\"all-nodes\"><summary>All %d nodes, a row "
                         "each (collapsed)</summary>\n",
                      r->nodes);
    }
    html_nodes_head(b);
    for (int j = 0; j < r->nodes; j++)
        html_node_row(r, b, j);
    zpi_sb_puts(b, "</table>\n");
    if (many)
        zpi_sb_puts(b, "</details>\n");
    zpi_sb_puts(b, "</body></html>\n");
}

void zpi_mpi_render_html(const zp_cluster_report *r, zpi_sbuf *b)
{
    html_head(r, b);
    html_header(r, b);
    zpi_mpi_watch_html(r, b);
    html_stragglers(r, b);
    zpi_mpi_coverage_html(r, b);
    zpi_sb_puts(b, "<h2>Where each rank's time goes</h2>\n");
    svg_bars(r, b);
    zpi_sb_puts(b, "<h2>Fetch time per batch, rank &times; window</h2>\n");
    svg_heatmap(r, b);
    zpi_mpi_html_distributions(r, b);
    html_ranks(r, b);
    html_summary(r, b);
    html_mixture(r, b);
    html_balance(r, b);
    html_nodes(r, b);
}
