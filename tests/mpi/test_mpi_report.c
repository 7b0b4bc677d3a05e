/*
 * test_mpi_report.c - the cluster report for people, on reports simulated
 * in one process (bench/mpi/report_sim.c; no mpirun needed):
 *  - numbers in human units (17.2 M, 1.30 GB, 12.5 ms) and no exponent in
 *    the text, HTML and CSV reports; CSV headers name their units;
 *  - the settings line summarises the data (shard count, bytes,
 *    fingerprint, where it came from), even when 100,000 shards were named
 *    one by one;
 *  - the heat map's colour scale leaves out warm-up: a steady-state
 *    straggler gets the darkest colour though the first window was 8x
 *    slower on every rank;
 *  - the report files stay within the bound docs/report.md states, at
 *    1,000 ranks, 256 windows and 100,000 shards;
 *  - a report marked partial (zp_cluster_report_set_partial) says so in
 *    every format and every file; a complete one says "partial": false;
 *  - the HTML page has a bounded number of drawn rows at any size: at
 *    10,000 ranks, outside the collapsed full tables, 19 bars, a heat map
 *    of at most 64 rows of whole nodes, 5 histograms over every rank and a
 *    few dozen table rows; at 16 ranks every rank has its bar and row;
 *  - accelerator utilisation (compute time / wall time of the steps) per
 *    rank and for the job, and the 90% threshold passed or failed, in
 *    every format and through zp_cluster_report_au().
 * `test_mpi_report --write DIR [RANKS]` writes a simulated report (600
 * ranks by default) into DIR for the browser test (test_report_browser.sh).
 */
#include <math.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "mpi_internal.h"
#include "report_sim.h"

/* The report in format f into *out (caller frees). The string comes back
 * through the caller's own variable, not a local of this helper: gcc 12 at
 * -O2 assumes that the library may have stored the address of the cell it
 * was given into that cell, and when the cell is a local of an inlined
 * helper it warns (-Wdangling-pointer) on every later use of the string. */
static void render(const zp_cluster_report *r, zp_mpi_format f, char **out)
{
    *out = NULL;
    assert_int_equal(zp_cluster_report_render(r, f, out, NULL), ZP_OK);
    assert_non_null(*out);
}

static void test_human_units(void **state)
{
    (void)state;
    char b[48];
    zpi_mpi_human_count(b, sizeof b, 17158100);
    assert_string_equal(b, "17.2 M");
    zpi_mpi_human_count(b, sizeof b, 512);
    assert_string_equal(b, "512");
    zpi_mpi_human_count(b, sizeof b, 999999);
    assert_string_equal(b, "1.00 M");
    zpi_mpi_human_bytes(b, sizeof b, 1.3e9);
    assert_string_equal(b, "1.30 GB");
    zpi_mpi_human_bytes(b, sizeof b, 320);
    assert_string_equal(b, "320 B");
    zpi_mpi_human_seconds(b, sizeof b, 0.0125);
    assert_string_equal(b, "12.5 ms");
    zpi_mpi_human_seconds(b, sizeof b, 0.000830);
    assert_string_equal(b, "830 us");
    zpi_mpi_human_seconds(b, sizeof b, 3.25);
    assert_string_equal(b, "3.25 s");
    zpi_mpi_human_seconds(b, sizeof b, 4000);
    assert_string_equal(b, "66.7 min");
    zpi_mpi_human_rate(b, sizeof b, 1234.5, "samples");
    assert_string_equal(b, "1.23 k samples/s");
    zpi_mpi_human_percent(b, sizeof b, 0.125);
    assert_string_equal(b, "12.5%");
}

/* 1 when s holds a number in exponent notation (1.71581e+07). */
static int has_exponent(const char *s)
{
    regex_t re;
    assert_int_equal(regcomp(&re, "[0-9]e[-+][0-9]", REG_NOSUB), 0);
    int found = regexec(&re, s, 0, NULL, 0) == 0;
    regfree(&re);
    return found;
}

static void test_report_for_people(void **state)
{
    (void)state;
    zp_sim_opts o = {64, 40, 100000, 3, 0};
    zp_cluster_report *r = zp_sim_report(&o, NULL);
    assert_non_null(r);
    char *txt, *html, *csv;
    render(r, ZP_MPI_TEXT, &txt), render(r, ZP_MPI_HTML, &html), render(r, ZP_MPI_CSV, &csv);
    assert_false(has_exponent(txt));
    assert_false(has_exponent(html));
    assert_false(has_exponent(csv));
    /* units in the tables */
    assert_non_null(strstr(txt, " ms "));
    assert_non_null(strstr(txt, " GB "));
    assert_non_null(strstr(txt, "samples/s"));
    assert_non_null(strstr(html, " ms</td>"));
    assert_non_null(strstr(csv, "bytes_read_B,"));
    assert_non_null(strstr(csv, ",wall_s,"));
    assert_non_null(strstr(csv, ",stall_frac,"));
    /* the settings line: one short line summarising the data */
    const char *set = strstr(txt, "\nsettings: ");
    assert_non_null(set);
    const char *eol = strchr(set + 1, '\n');
    assert_non_null(eol);
    size_t len = (size_t)(eol - set);
    char *line = strndup(set + 1, len - 1);
    assert_true(len < 600);
    assert_non_null(strstr(line, "data=100000 paths/globs: /lustre/corpus/shard-000000.jsonl.zst ... "
                                 "/lustre/corpus/shard-099999.jsonl.zst (100000 shards, 25.0 TB, "
                                 "fingerprint 5eed5eed5eed5eed)"));
    assert_null(strstr(line, "shard-000001"));
    assert_non_null(strstr(line, "tokenize=gpt2"));
    assert_null(strstr(html, "shard-000001"));
    free(line);
    free(txt);
    free(html);
    free(csv);
    zp_cluster_report_destroy(r);
}

/* The heat map's cells are runs of equal colour in a rank's row:
 * "<rect ... fill="#c"><title>rank R, window A: ..." or "..., windows A-B: ...".
 * After warm-up only the straggler's cells have the darkest colour. */
static void test_heatmap_leaves_out_warmup(void **state)
{
    (void)state;
    zp_sim_opts o = {16, 20, 100, 3, 0};
    zp_cluster_report *r = zp_sim_report(&o, NULL);
    assert_non_null(r);
    assert_int_equal(zpi_mpi_warmup_windows(r), 1);
    char *html;
    render(r, ZP_MPI_HTML, &html);
    const char *p = strstr(html, "aria-label=\"fetch time per batch");
    assert_non_null(p);
    int dark_straggler = 0, dark_other = 0, cells = 0;
    const char *dark = "#a51919"; /* the top of the scale */
    while ((p = strstr(p, "<rect ")) != NULL) {
        const char *fill = strstr(p, "fill=\""), *title = strstr(p, "<title>rank ");
        if (!fill || !title)
            break;
        int rank = -1;
        unsigned long long w0 = 0, w1 = 0;
        int k = sscanf(title, "<title>rank %d, windows %llu-%llu", &rank, &w0, &w1);
        if (k < 3) {
            if (sscanf(title, "<title>rank %d, window %llu", &rank, &w0) < 2)
                break;
            w1 = w0;
        }
        cells++;
        int is_dark = strncmp(fill + 6, dark, 7) == 0;
        if (w1 >= 1) { /* a run of equal colour reaching past warm-up */
            if (rank == 3)
                dark_straggler += is_dark;
            else
                dark_other += is_dark;
        }
        p = title;
    }
    assert_true(cells >= 16);
    assert_true(dark_straggler >= 1);
    assert_int_equal(dark_other, 0);
    assert_non_null(strstr(html, "warm-up"));
    free(html);
    zp_cluster_report_destroy(r);
}

static long long file_size(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    long long n = stat(path, &st) == 0 ? (long long)st.st_size : -1;
    unlink(path);
    return n;
}

/* The bound of docs/report.md ("Size of the files"), for N ranks and W
 * kept windows, whatever the shard count. */
static void test_size_bound(void **state)
{
    (void)state;
    zp_sim_opts o = {1000, 270, 100000, 3, 0};
    zp_cluster_report *r = zp_sim_report(&o, NULL);
    assert_non_null(r);
    long long N = zp_cluster_report_num_ranks(r), W = zp_cluster_report_num_windows(r);
    assert_int_equal(W, 256);
    long long Nh = N < 128 ? N : 128;
    char dir[] = "/tmp/zp-test-report-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char err[256];
    assert_int_equal(zp_cluster_report_write(r, dir, err, sizeof err), ZP_OK);
    struct {
        const char *name;
        long long bound;
    } f[] = {
        {"report.txt", 16000 + 400 * N},
        {"report.csv", 4000 + 400 * N},
        {"report.json", 64000 + 2200 * N + 8 * N * W},
        {"report.html", 512000 + 800 * N + 150 * Nh * W},
        {"windows.csv", 1000 + 8 * N + 8 * N * W},
    };
    for (size_t k = 0; k < sizeof f / sizeof f[0]; k++) {
        long long sz = file_size(dir, f[k].name);
        print_message("%s: %lld bytes, bound %lld\n", f[k].name, sz, f[k].bound);
        assert_true(sz > 0);
        assert_true(sz <= f[k].bound);
    }
    rmdir(dir);
    zp_cluster_report_destroy(r);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *s = calloc(1, 1 << 22);
    assert_non_null(s);
    size_t n = fread(s, 1, (1 << 22) - 1, f);
    s[n] = 0;
    fclose(f);
    return s;
}

static void test_partial_every_format(void **state)
{
    (void)state;
    zp_sim_opts o = {8, 6, 10, -1, 0};
    zp_cluster_report *r = zp_sim_report(&o, NULL);
    assert_non_null(r);
    /* complete */
    assert_int_equal(zp_cluster_report_partial(r, NULL, NULL, NULL), 0);
    char *txt, *json, *csv, *html;
    render(r, ZP_MPI_TEXT, &txt), render(r, ZP_MPI_JSON, &json), render(r, ZP_MPI_CSV, &csv),
        render(r, ZP_MPI_HTML, &html);
    assert_null(strstr(txt, "PARTIAL"));
    assert_null(strstr(csv, "PARTIAL"));
    assert_null(strstr(html, "PARTIAL"));
    assert_non_null(strstr(json, "\"partial\":false"));
    assert_null(strstr(json, "\"partial_steps\""));
    free(txt), free(json), free(csv), free(html);

    /* bad arguments */
    assert_int_equal(zp_cluster_report_set_partial(NULL, "SIGINT", NULL, 1), ZP_ERR_INVALID);
    assert_int_equal(zp_cluster_report_set_partial(r, "SIGNAL_WITH_A_NAME_FAR_TOO_LONG_X", NULL, 1),
                     ZP_ERR_INVALID);
    assert_int_equal(zp_cluster_report_partial(r, NULL, NULL, NULL), 0);

    /* stopped by a signal */
    assert_int_equal(zp_cluster_report_set_partial(r, "SIGINT", NULL, 42), ZP_OK);
    const char *sig = NULL, *why = NULL;
    uint64_t steps = 0;
    assert_int_equal(zp_cluster_report_partial(r, &sig, &why, &steps), 1);
    assert_string_equal(sig, "SIGINT");
    assert_string_equal(why, "stopped by SIGINT");
    assert_int_equal(steps, 42);
    const char *line = "PARTIAL REPORT: the run was stopped (SIGINT) after 42 steps";
    render(r, ZP_MPI_TEXT, &txt), render(r, ZP_MPI_JSON, &json), render(r, ZP_MPI_CSV, &csv),
        render(r, ZP_MPI_HTML, &html);
    assert_memory_equal(txt, line, strlen(line));
    assert_int_equal(txt[strlen(line)], '\n');
    assert_non_null(strstr(json, "\"partial\":true"));
    assert_non_null(strstr(json, "\"signal\":\"SIGINT\""));
    assert_non_null(strstr(json, "\"partial_reason\":\"stopped by SIGINT\""));
    assert_non_null(strstr(json, "\"partial_steps\":42"));
    assert_memory_equal(csv, "# ", 2);
    assert_memory_equal(csv + 2, line, strlen(line));
    assert_non_null(strstr(csv, "\nrank,node,host,"));
    const char *ban = strstr(html, "<div class=\"partial\" id=\"partial\">");
    assert_non_null(ban);
    assert_non_null(strstr(ban, line));
    assert_true(ban < strstr(html, "<h1>"));
    free(txt), free(json), free(csv), free(html);

    /* stopped by something else, the files written */
    assert_int_equal(zp_cluster_report_set_partial(r, NULL, "an output could not be written", 7), ZP_OK);
    char dir[] = "/tmp/zp_partial_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char err[256] = "";
    assert_int_equal(zp_cluster_report_write(r, dir, err, sizeof err), ZP_OK);
    line = "PARTIAL REPORT: the run was stopped (an output could not be written) after 7 steps";
    const char *names[] = {"report.txt", "report.json", "report.csv", "report.html", "windows.csv"};
    for (size_t k = 0; k < 5; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        char *s = slurp(path);
        if (k == 1) {
            assert_non_null(strstr(s, "\"partial\":true"));
            assert_null(strstr(s, "\"signal\""));
            assert_non_null(strstr(s, "\"partial_reason\":\"an output could not be written\""));
            assert_non_null(strstr(s, "\"partial_steps\":7"));
        } else {
            assert_non_null(strstr(s, line));
            if (k == 0)
                assert_memory_equal(s, line, strlen(line));
            if (k == 2 || k == 4)
                assert_memory_equal(s, "# PARTIAL REPORT", 16);
        }
        free(s);
        unlink(path);
    }
    rmdir(dir);
    zp_cluster_report_destroy(r);
}

/* The attention-cost balance section: absent without balance; with the
 * cross-rank figures (the root's) and the ranks' within-rank windows, in
 * every format. */
static void test_balance_section(void **state)
{
    (void)state;
    zp_sim_opts o = {4, 6, 10, -1, 0};
    zp_cluster_report *r = zp_sim_report(&o, NULL);
    assert_non_null(r);
    char *t = NULL;
    assert_int_equal(zp_cluster_report_has_balance(r), 0);
    render(r, ZP_MPI_TEXT, &t);
    assert_null(strstr(t, "attention-cost balance"));
    free(t);
    render(r, ZP_MPI_CSV, &t);
    assert_null(strstr(t, "imbalance"));
    free(t);

    r->bal.window = 3;
    r->bal.steps = 10;
    r->bal.rows_moved = 77;
    r->bal.attn_cost = 1000;
    r->bal.rank_imbalance_before = 1.25;
    r->bal.rank_imbalance_after = 1.01;
    r->bal.mb_imbalance_before = 1.75;
    r->bal.mb_imbalance_after = 1.05;
    for (int i = 0; i < r->size; i++) {
        r->ranks[i].balance_windows = 5;
        r->ranks[i].attn_imbalance_before = 1.5;
        r->ranks[i].attn_imbalance_after = 1.125;
    }
    r->totals.balance_windows = 5 * (uint64_t)r->size;
    r->totals.attn_imbalance_before = 1.5;
    r->totals.attn_imbalance_after = 1.125;
    zp_mpi_balance_stats bs;
    assert_int_equal(zp_cluster_report_balance(r, &bs), 1);
    assert_int_equal(bs.rows_moved, 77);
    render(r, ZP_MPI_TEXT, &t);
    assert_non_null(strstr(t, "attention-cost balance"));
    assert_non_null(strstr(t, "K=3 microbatches per rank, 10 steps, 77 rows moved"));
    assert_non_null(strstr(t, "ranks per step        1.250 -> 1.010"));
    assert_non_null(strstr(t, "microbatches per step 1.750 -> 1.050"));
    assert_non_null(strstr(t, "within ranks (20 windows): 1.500 -> 1.125"));
    free(t);
    render(r, ZP_MPI_JSON, &t);
    assert_non_null(strstr(t, "\"attn_balance\""));
    assert_non_null(strstr(t, "\"rows_moved\":77"));
    assert_non_null(strstr(t, "\"microbatch_imbalance_before\":1.75"));
    assert_non_null(strstr(t, "\"balance_windows\":20"));
    free(t);
    render(r, ZP_MPI_CSV, &t);
    assert_non_null(strstr(t, ",balance_windows,attn_imbalance_before,attn_imbalance_after,"
                              "step_rank_imbalance_before,step_rank_imbalance_after,"
                              "step_microbatch_imbalance_before,step_microbatch_imbalance_after\n"));
    assert_non_null(strstr(t, ",5,1.500000,1.125000,1.250000,1.010000,1.750000,1.050000\n"));
    free(t);
    render(r, ZP_MPI_HTML, &t);
    assert_non_null(strstr(t, "<h2>Attention-cost balance</h2>"));
    assert_non_null(strstr(t, "microbatches per step</td><td>1.750</td><td>1.050</td>"));
    free(t);
    zp_cluster_report_destroy(r);
}

/* Every format states the job's AU and the verdict on the threshold. */
static void check_au_formats(const zp_cluster_report *r, const char *sentence, const char *json_au,
                             const char *csv_row3, const char *html_cell3)
{
    char *txt, *json, *csv, *html;
    render(r, ZP_MPI_TEXT, &txt), render(r, ZP_MPI_JSON, &json), render(r, ZP_MPI_CSV, &csv),
        render(r, ZP_MPI_HTML, &html);
    assert_non_null(strstr(txt, sentence));
    assert_non_null(strstr(json, json_au));
    assert_non_null(strstr(csv, ",cut_frac,au_frac,job_au_frac,job_au_passes"));
    assert_non_null(strstr(csv, csv_row3));
    const char *p = strstr(html, "<p class=\"verdict");
    assert_non_null(p);
    p = strstr(p + 1, "id=\"au\">");
    assert_non_null(p);
    assert_memory_equal(p + 8, sentence, strlen(sentence));
    assert_non_null(strstr(html, "<th>AU</th>"));
    assert_non_null(strstr(html, html_cell3));
    free(txt), free(json), free(csv), free(html);
}

static void test_accelerator_utilisation(void **state)
{
    (void)state;
    /* 16 ranks: rank 3 waits 30% of its steps, the others 1% */
    zp_sim_opts o = {16, 6, 10, 3, 0};
    zp_cluster_report *r = zp_sim_report(&o, NULL);
    assert_non_null(r);
    assert_float_equal(zp_cluster_report_au(r, 3), 0.70, 1e-9);
    assert_float_equal(zp_cluster_report_au(r, 0), 0.99, 1e-9);
    assert_float_equal(zp_cluster_report_au(r, -1), (15 * 0.99 + 0.70) / 16, 1e-9);
    assert_true(isnan(zp_cluster_report_au(r, 16)));
    assert_true(isnan(zp_cluster_report_au(NULL, -1)));
    check_au_formats(r,
                     "accelerator utilisation (AU, compute time / wall time of the steps): job "
                     "97.2% (mean over 16 ranks; lowest rank 3 at 70.0%; 1 rank below 90.0%): "
                     "passes the 90.0% AU threshold",
                     "\"accelerator_utilisation\":{\"job\":0.971875,\"threshold\":0.9,"
                     "\"passes\":true,\"ranks\":16,\"min\":0.7",
                     ",0.7000,0.9719,1\n", "<td>0</td><td>70.0%</td></tr>");

    /* every rank waits 10% of its steps and waits 5% for the other ranks
     * (sync): 85%, below the threshold; rank 3 gave no batch: no AU */
    for (int i = 0; i < r->size; i++) {
        zp_mpi_rank_stats *s = &r->ranks[i];
        double active = s->wall - s->first_batch;
        s->stall = 0.10 * active;
        s->sync = 0.05 * active;
    }
    r->ranks[3].batches = 0;
    assert_float_equal(zp_cluster_report_au(r, 0), 0.85, 1e-9);
    assert_true(isnan(zp_cluster_report_au(r, 3)));
    check_au_formats(r,
                     "accelerator utilisation (AU, compute time / wall time of the steps): job "
                     "85.0% (mean over 15 ranks; lowest rank 0 at 85.0%; 15 ranks below 90.0%): "
                     "fails the 90.0% AU threshold",
                     "\"accelerator_utilisation\":{\"job\":0.85",
                     ",,0.8500,0\n", "<td>0</td><td>-</td></tr>");
    char *json;
    render(r, ZP_MPI_JSON, &json);
    assert_non_null(strstr(json, "\"passes\":false,\"ranks\":15,"));
    assert_non_null(strstr(json, "\"au\":null"));
    free(json);

    /* no rank with a step */
    for (int i = 0; i < r->size; i++)
        r->ranks[i].batches = 0;
    assert_true(isnan(zp_cluster_report_au(r, -1)));
    char *txt;
    render(r, ZP_MPI_TEXT, &txt);
    assert_non_null(strstr(txt, "accelerator utilisation (AU): no training step measured"));
    free(txt);
    zp_cluster_report_destroy(r);
}

static size_t count_of(const char *s, const char *end, const char *what)
{
    size_t n = 0, k = strlen(what);
    for (const char *p = s; (p = strstr(p, what)) != NULL && (!end || p < end); p += k)
        n++;
    return n;
}

/* The HTML page without its collapsed parts (<details>...</details>). */
static char *without_details(const char *html, size_t *rows_inside)
{
    char *out = malloc(strlen(html) + 1);
    assert_non_null(out);
    size_t o = 0;
    *rows_inside = 0;
    const char *p = html, *d;
    while ((d = strstr(p, "<details")) != NULL) {
        memcpy(out + o, p, (size_t)(d - p));
        o += (size_t)(d - p);
        const char *e = strstr(d, "</details>");
        assert_non_null(e);
        *rows_inside += count_of(d, e, "<tr>") + count_of(d, e, "<tr class=");
        p = e + strlen("</details>");
    }
    strcpy(out + o, p);
    return out;
}

static void test_html_bounded_at_scale(void **state)
{
    (void)state;
    static const int sizes[] = {16, 1000, 10000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int n = sizes[k];
        zp_sim_opts o = {n, 20, 1000, 3, 0};
        zp_cluster_report *r = zp_sim_report(&o, NULL);
        assert_non_null(r);
        char *html;
        render(r, ZP_MPI_HTML, &html);
        size_t inside = 0;
        char *vis = without_details(html, &inside);
        const char *bars = strstr(vis, "aria-label=\"where each rank's time goes\"");
        const char *heat = strstr(vis, "aria-label=\"fetch time per batch, rank by window\"");
        assert_non_null(bars);
        assert_non_null(heat);
        size_t n_bars = count_of(bars, heat, "text-anchor=\"end\">rank ") +
                        count_of(bars, heat, "text-anchor=\"end\">p");
        size_t heat_rows = 0;
        for (const char *p = heat; (p = strstr(p, "<rect ")) != NULL && p < strstr(heat, "</svg>");
             p++) {
            int y = -1;
            const char *yy = strstr(p, " y=\"");
            if (yy && sscanf(yy, " y=\"%d\"", &y) == 1 && y >= 0)
                heat_rows = (size_t)y + 1 > heat_rows ? (size_t)y + 1 : heat_rows;
        }
        size_t rows = count_of(vis, NULL, "<tr>") + count_of(vis, NULL, "<tr class=");
        size_t dists = count_of(vis, NULL, "aria-label=\"distribution over ranks: ");
        print_message("%d ranks: %zu bars, heat map %zu px tall, %zu table rows shown, %zu "
                      "collapsed, %zu bytes\n",
                      n, n_bars, heat_rows, rows, inside, strlen(html));
        assert_int_equal(dists, 5);
        assert_non_null(strstr(vis, "<b>rank 3</b>")); /* the straggler named */
        if (n <= 32) {
            assert_int_equal(n_bars, n);
            assert_null(strstr(html, "<details"));
            assert_true(rows >= (size_t)n);
        } else {
            assert_int_equal(n_bars, 16 + 3);
            assert_non_null(strstr(vis, "p50: rank "));
            assert_non_null(strstr(vis, ">rank 3</text>")); /* the straggler's bar */
            /* a bounded page: the worst ranks (the straggler first) and nodes, the
             * summary; the whole tables collapsed */
            assert_true(rows <= 60);
            assert_true(inside >= (size_t)n);
            const char *worst = strstr(vis, "<h2>Worst ranks</h2>");
            assert_non_null(worst);
            assert_non_null(strstr(worst, "<tr class=\"strag\"><td>3</td>"));
            assert_true(heat_rows <= 64 * 8);
            assert_non_null(strstr(heat, "<title>nodes 0-"));
        }
        free(vis);
        free(html);
        zp_cluster_report_destroy(r);
    }
}

int main(int argc, char **argv)
{
    if ((argc == 3 || argc == 4) && strcmp(argv[1], "--write") == 0) {
        zp_sim_opts o = {argc == 4 ? atoi(argv[3]) : 600, 40, 100000, 3, 0};
        zp_cluster_report *r = zp_sim_report(&o, NULL);
        char err[256] = "";
        int rc = r && zp_cluster_report_write(r, argv[2], err, sizeof err) == ZP_OK ? 0 : 1;
        if (rc)
            fprintf(stderr, "test_mpi_report: cannot write the report: %s\n", err);
        zp_cluster_report_destroy(r);
        return rc;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_human_units),
        cmocka_unit_test(test_report_for_people),
        cmocka_unit_test(test_heatmap_leaves_out_warmup),
        cmocka_unit_test(test_size_bound),
        cmocka_unit_test(test_partial_every_format),
        cmocka_unit_test(test_balance_section),
        cmocka_unit_test(test_html_bounded_at_scale),
        cmocka_unit_test(test_accelerator_utilisation),
    };
    return cmocka_run_group_tests_name("mpi_report", tests, NULL, NULL);
}
