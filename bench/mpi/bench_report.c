/* bench_report.c - the cost of one cluster report at this world size:
 *   mpirun -np N bench_mpi_report [REPEATS]
 * Every rank fills a snapshot by hand (histograms populated), then the
 * ranks make REPEATS blocking reports (MPI_Barrier before each, so that
 * the time is the report's, not a late rank's). Printed by rank 0:
 *  - the report's time at the root (gather + histogram reduce + analysis):
 *    median and 90th percentile over the repeats;
 *  - the same collectives alone (MPI_Gather of the record + the two
 *    MPI_Reduce), so that analysis = report - collectives;
 *  - what a non-root rank pays in its training loop for a non-blocking
 *    window report (start + the test that completes it);
 *  - bytes: the record each rank sends, what it adds to the reduce, what
 *    the root receives;
 *  - rendering times at the root (text, JSON, HTML), not part of a report.
 *   bench_mpi_report --analyse N [WINDOWS [SHARDS [MAX_WINDOWS]]]
 * simulates the root's side in one process (report_sim.c) and prints the
 * analysis time and the report files' sizes.
 * docs/report.md explains the figures and the 10,000-rank estimate. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "mpi_internal.h"
#include "report_sim.h"
#include "zephon.h"
#include "zephon/mpi.h"

static double now(void) { return MPI_Wtime(); }

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double q(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

static void fill(zp_mpi_input *in, int rank)
{
    memset(in, 0, sizeof *in);
    zp_hist_init(&in->fetch.open_ns);
    zp_hist_init(&in->fetch.record_ns);
    zp_hist_init(&in->prefetch.latency_ns);
    unsigned x = 12345u + (unsigned)rank * 7919u;
    for (int i = 0; i < 2000; i++) {
        x = x * 1103515245u + 12345u;
        zp_hist_record(&in->fetch.record_ns, 200 + x % 50000);
        if (i % 20 == 0)
            zp_hist_record(&in->fetch.open_ns, 1000000 + x % 9000000);
        if (i % 40 == 0)
            zp_hist_record(&in->prefetch.latency_ns, 5000000 + x % 20000000);
    }
    in->metrics.batches = 1000 + (uint64_t)rank;
    in->metrics.samples = 32000 + (uint64_t)rank * 7;
    in->metrics.wall_seconds = 100;
    in->metrics.time_to_first_batch = 1;
    in->metrics.stall_seconds = 1 + 0.01 * rank;
    in->metrics.stall_fraction = in->metrics.stall_seconds / 99;
    in->metrics.threads = 4;
    in->fetch.fetch_seconds = 10 + (rank == 1 ? 20 : 0);
    in->fetch.records = 32000;
    in->fetch.bytes_uncompressed = 64000000;
    in->fetch.bytes_compressed = 20000000;
    in->fetch.open_seconds = 3;
}

/* --analyse N [WINDOWS [SHARDS [MAX_WINDOWS]]]: the root's analysis
 * (statistics, medians, stragglers, per-node totals, window history) of N
 * ranks' records over WINDOWS window reports and a final one, for a
 * dataset of SHARDS shards named one by one (report_sim.c), in one process:
 * the part of a report that grows with the rank count, measured at sizes no
 * test machine can launch; then the five report files written, with their
 * sizes (docs/report.md states the bound they stay within). */
static int analyse_only(int n, int windows, long long shards, int history)
{
    zp_sim_opts o = {n, windows, (uint64_t)shards, n > 3 ? 3 : -1, history};
    double an = 0;
    double t0 = now();
    zp_cluster_report *r = zp_sim_report(&o, &an);
    double t_sim = now() - t0;
    if (!r) {
        fprintf(stderr, "bench_mpi_report: simulating %d ranks failed\n", n);
        return 1;
    }
    char dir[] = "/tmp/zp-bench-report-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char err[512];
    t0 = now();
    if (zp_cluster_report_write(r, dir, err, sizeof err) != ZP_OK) {
        fprintf(stderr, "bench_mpi_report: %s\n", err);
        return 1;
    }
    double t_write = now() - t0;
    static const char *const files[] = {"report.txt", "report.json", "report.csv", "report.html",
                                        "windows.csv"};
    long long total = 0;
    printf("%6d ranks, %4d windows kept, %6lld shards: analysis %7.3f ms (median of the last 10 "
           "windows; %d reports in %.1f s); files written in %.0f ms:",
           n, zp_cluster_report_num_windows(r), shards, an * 1e3, windows + 1, t_sim,
           t_write * 1e3);
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", dir, files[k]);
        struct stat st;
        long long sz = stat(path, &st) == 0 ? (long long)st.st_size : -1;
        total += sz;
        printf(" %s %.2f MB%s", files[k], (double)sz / 1e6, k + 1 < 5 ? "," : "");
        unlink(path);
    }
    printf("; total %.2f MB\n", (double)total / 1e6);
    /* the HTML page alone, rendered in memory: the median of 5 */
    double th[5];
    size_t hlen = 0;
    for (int k = 0; k < 5; k++) {
        char *html = NULL;
        t0 = now();
        zp_status st = zp_cluster_report_render(r, ZP_MPI_HTML, &html, &hlen);
        th[k] = now() - t0;
        free(html);
        if (st != ZP_OK) {
            fprintf(stderr, "bench_mpi_report: rendering the HTML page failed\n");
            return 1;
        }
    }
    for (int i = 1; i < 5; i++)
        for (int j = i; j > 0 && th[j] < th[j - 1]; j--) {
            double x = th[j];
            th[j] = th[j - 1];
            th[j - 1] = x;
        }
    printf("%6d ranks: report.html rendered in %.0f ms (median of 5), %.2f MB\n", n, th[2] * 1e3,
           (double)hlen / 1e6);
    rmdir(dir);
    zp_cluster_report_destroy(r);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 2 && !strcmp(argv[1], "--analyse"))
        return analyse_only(atoi(argv[2]), argc > 3 ? atoi(argv[3]) : 20,
                            argc > 4 ? atoll(argv[4]) : 1000, argc > 5 ? atoi(argv[5]) : 0);
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int reps = argc > 1 ? atoi(argv[1]) : 40;
    if (reps < 4)
        reps = 4;
    zp_mpi_config c;
    zp_mpi_config_init(&c);
    c.max_windows = 64;
    zp_mpi *m = NULL;
    if (zp_mpi_create(MPI_COMM_WORLD, &c, &m) != ZP_OK) {
        fprintf(stderr, "zp_mpi_create failed\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    zp_mpi_input in;
    fill(&in, rank);
    double *t_rep = calloc((size_t)reps, sizeof *t_rep), *t_coll = calloc((size_t)reps, sizeof *t_coll);
    double *t_nb = calloc((size_t)reps, sizeof *t_nb), *t_an = calloc((size_t)reps, sizeof *t_an);
    size_t hist_words = 3 * (2 + ZP_HIST_BUCKETS);
    uint64_t *hs = calloc(hist_words, 8), *hr = calloc(hist_words, 8), mn[6] = {0}, mnr[6];
    zp_mpi_rank_stats rec, *recs = calloc((size_t)size, sizeof *recs);
    memset(&rec, 0, sizeof rec);
    size_t gather_bytes = 0;

    for (int i = -3; i < reps; i++) { /* 3 warm-up rounds */
        /* the report */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now();
        zp_cluster_report *r = NULL;
        if (zp_mpi_report(m, &in, ZP_MPI_REPORT_FINAL, &r) != ZP_OK)
            MPI_Abort(MPI_COMM_WORLD, 2);
        double t1 = now();
        if (r) {
            gather_bytes = zp_cluster_report_gather_bytes(r);
            if (i >= 0)
                t_an[i] = zp_cluster_report_analysis_seconds(r);
        }
        zp_cluster_report_destroy(r);
        /* its collectives alone */
        MPI_Barrier(MPI_COMM_WORLD);
        double t2 = now();
        MPI_Gather(&rec, (int)sizeof rec, MPI_BYTE, recs, (int)sizeof rec, MPI_BYTE, 0, MPI_COMM_WORLD);
        MPI_Reduce(hs, hr, (int)hist_words, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
        MPI_Reduce(mn, mnr, 6, MPI_UINT64_T, MPI_MIN, 0, MPI_COMM_WORLD);
        double t3 = now();
        /* a non-blocking window: what the loop pays on this rank */
        MPI_Barrier(MPI_COMM_WORLD);
        double t4 = now(), spent = 0;
        if (zp_mpi_report_start(m, &in, ZP_MPI_REPORT_WINDOW) != ZP_OK)
            MPI_Abort(MPI_COMM_WORLD, 3);
        spent += now() - t4;
        int done = 0;
        while (!done) {
            double a = now();
            zp_mpi_report_test(m, &done, NULL);
            spent += now() - a;
        }
        if (i >= 0) {
            t_rep[i] = t1 - t0;
            t_coll[i] = t3 - t2;
            t_nb[i] = spent;
        }
    }
    /* the worst rank's non-blocking cost per window */
    double nb_med = q(t_nb, reps, 0.5), nb_worst;
    MPI_Reduce(&nb_med, &nb_worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

    if (rank == 0) {
        double rep_med = q(t_rep, reps, 0.5), rep_p90 = q(t_rep, reps, 0.9);
        double col_med = q(t_coll, reps, 0.5), an_med = q(t_an, reps, 0.5);
        /* rendering (one final report) */
        zp_cluster_report *r = NULL;
        zp_mpi_report(m, &in, ZP_MPI_REPORT_FINAL, &r);
        double tr[3];
        size_t len[3];
        zp_mpi_format f[3] = {ZP_MPI_TEXT, ZP_MPI_JSON, ZP_MPI_HTML};
        for (int k = 0; k < 3; k++) {
            char *s = NULL;
            double a = now();
            zp_cluster_report_render(r, f[k], &s, &len[k]);
            tr[k] = now() - a;
            free(s);
        }
        zp_cluster_report_destroy(r);
        size_t reduce_bytes = hist_words * 8 + 6 * 8;
        printf("ranks %3d: report %7.3f ms (p90 %7.3f), collectives alone %7.3f ms, analysis %6.3f ms; "
               "non-blocking window on the worst rank %6.3f ms of loop time; "
               "gathered %zu B/rank (root receives %zu B), histogram reduce %zu B/rank; "
               "render text %.2f ms (%zu B), json %.2f ms (%zu B), html %.2f ms (%zu B)\n",
               size, rep_med * 1e3, rep_p90 * 1e3, col_med * 1e3, an_med * 1e3,
               nb_worst * 1e3, gather_bytes, gather_bytes * (size_t)size, reduce_bytes,
               tr[0] * 1e3, len[0], tr[1] * 1e3, len[1], tr[2] * 1e3, len[2]);
    } else {
        zp_mpi_report(m, &in, ZP_MPI_REPORT_FINAL, NULL);
    }
    free(t_rep);
    free(t_coll);
    free(t_nb);
    free(t_an);
    free(hs);
    free(hr);
    free(recs);
    zp_mpi_destroy(m);
    MPI_Finalize();
    return 0;
}
