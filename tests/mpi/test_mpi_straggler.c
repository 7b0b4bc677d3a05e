/* test_mpi_straggler.c - straggler detection under mpirun (1..4 ranks):
 *  - the criterion on hand-made snapshots: slow fetch AND consumer stall is
 *    named (ratio); slow fetch without stall is not; a small but far outlier
 *    is named by the robust z-score alone; thresholds are settings;
 *  - a reason longer than its buffer is cut without writing past it;
 *  - real pipelines with a fetch delay injected on the last rank: the final
 *    report names that rank and no other; periodic (non-blocking) window
 *    reports name it only from its third consecutive flagged window. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpitest.h"
#include "zephon.h"
#include "zephon/mpi.h"

static void input(zp_mpi_input *in, double fetch_per_batch, double stall_fraction)
{
    memset(in, 0, sizeof *in);
    zp_hist_init(&in->fetch.open_ns);
    zp_hist_init(&in->fetch.record_ns);
    zp_hist_init(&in->prefetch.latency_ns);
    in->metrics.batches = 100;
    in->metrics.samples = 800;
    in->metrics.wall_seconds = 11.0;
    in->metrics.time_to_first_batch = 1.0;
    in->metrics.stall_fraction = stall_fraction;
    in->metrics.stall_seconds = stall_fraction * 10.0;
    in->fetch.fetch_seconds = fetch_per_batch * 100;
}

/* The named ranks of a report as a bit set. */
static unsigned named(const zp_cluster_report *r, unsigned *reasons_of_last)
{
    const zp_mpi_straggler *s;
    size_t n = zp_cluster_report_stragglers(r, &s);
    unsigned set = 0;
    for (size_t i = 0; i < n; i++) {
        set |= 1u << s[i].rank;
        if (s[i].rank == mpt_size - 1 && reasons_of_last)
            *reasons_of_last = s[i].reasons;
    }
    return set;
}

/* Wait for the window report in flight, if any; rank 0 keeps whom it names. */
static void wait_window(zp_mpi *m, unsigned *sets, int *n)
{
    if (!zp_mpi_report_pending(m))
        return;
    zp_cluster_report *r = NULL;
    MPT_CHECK(zp_mpi_report_wait(m, &r) == ZP_OK);
    if (mpt_rank == 0)
        sets[(*n)++] = r ? named(r, NULL) : 0;
    zp_cluster_report_destroy(r);
}

static void test_criterion_synthetic(void **state)
{
    (void)state;
    zp_mpi *m = NULL;
    MPT_CHECK(zp_mpi_create(MPI_COMM_WORLD, NULL, &m) == ZP_OK);
    int last = mpt_size - 1;
    zp_mpi_input in;

    /* 1. the last rank fetches 3x slower than most and its consumer waits
     * 20%; with 4 ranks rank 0 is as slow but its consumer never waits (1%):
     * only the last is named */
    if (mpt_rank == last)
        input(&in, 0.003, 0.20);
    else if (mpt_rank == 0 && mpt_size >= 4)
        input(&in, 0.003, 0.01);
    else
        input(&in, 0.001, 0.01);
    zp_cluster_report *r = NULL;
    MPT_CHECK(zp_mpi_report(m, &in, ZP_MPI_REPORT_FINAL, &r) == ZP_OK);
    if (r) {
        unsigned why = 0, set = named(r, &why);
        if (mpt_size == 1) {
            MPT_CHECK(set == 0, "a single rank has nobody to lag behind");
        } else {
            MPT_CHECK(set == 1u << last, "named set %x", set);
            MPT_CHECK(why & ZP_MPI_SLOW_RATIO);
            MPT_CHECK(why & ZP_MPI_SLOW_STALL);
            const zp_mpi_straggler *s;
            zp_cluster_report_stragglers(r, &s);
            const char *want = mpt_size == 3 ? "3.00x the median 1.00 ms" : "1.50x the median 2.00 ms";
            MPT_CHECK(strstr(s[0].reason, want) != NULL, "'%s' lacks '%s'", s[0].reason, want);
            MPT_CHECK(strstr(s[0].reason, "waits 20.0%") != NULL, "'%s'", s[0].reason);
            MPT_CHECK(strstr(zp_cluster_report_verdict(r), "straggler: rank") != NULL, "'%s'",
                      zp_cluster_report_verdict(r));
        }
    }
    zp_cluster_report_destroy(r);

    /* 2. robust z alone: 1.2x the median (below 1.25x) but far outside a
     * tight spread (needs 4 ranks) */
    static const double v4[] = {1.00e-3, 1.01e-3, 0.99e-3, 1.20e-3};
    double v = mpt_rank == last ? v4[3] : v4[mpt_rank % 3];
    input(&in, v, 0.2);
    MPT_CHECK(zp_mpi_report(m, &in, ZP_MPI_REPORT_FINAL, &r) == ZP_OK);
    if (r && mpt_size == 4) {
        unsigned why = 0, set = named(r, &why);
        MPT_CHECK(set == 1u << last, "named set %x", set);
        MPT_CHECK(why == (ZP_MPI_SLOW_Z | ZP_MPI_SLOW_STALL), "reasons %x", why);
    }
    zp_cluster_report_destroy(r);
    zp_mpi_destroy(m);

    /* 3. thresholds are settings: with a 5x ratio and z 1000 the 3x rank of
     * case 1 is not named */
    zp_mpi_config c;
    zp_mpi_config_init(&c);
    c.straggler_ratio = 4.0;
    c.straggler_z = 1000;
    MPT_CHECK(zp_mpi_create(MPI_COMM_WORLD, &c, &m) == ZP_OK);
    input(&in, mpt_rank == last ? 0.003 : 0.001, mpt_rank == last ? 0.2 : 0.01);
    MPT_CHECK(zp_mpi_report(m, &in, ZP_MPI_REPORT_FINAL, &r) == ZP_OK);
    if (r)
        MPT_CHECK(named(r, NULL) == 0);
    zp_cluster_report_destroy(r);
    zp_mpi_destroy(m);
    mpt_sync();
}

/* Absurd but finite times (1e300 s) give a reason that fits its buffer,
 * in human units, and nothing is written past it (run under ASan). */
static void test_long_reason_cut(void **state)
{
    (void)state;
    zp_mpi *m = NULL;
    MPT_CHECK(zp_mpi_create(MPI_COMM_WORLD, NULL, &m) == ZP_OK);
    zp_mpi_input in;
    input(&in, mpt_rank == mpt_size - 1 ? 1e300 : 0.001, 0.2);
    zp_cluster_report *r = NULL;
    MPT_CHECK(zp_mpi_report(m, &in, ZP_MPI_REPORT_FINAL, &r) == ZP_OK);
    if (r && mpt_size > 1) {
        const zp_mpi_straggler *s;
        MPT_CHECK(zp_cluster_report_stragglers(r, &s) == 1);
        MPT_CHECK(strlen(s[0].reason) < sizeof s[0].reason, "%zu", strlen(s[0].reason));
        MPT_CHECK(strstr(s[0].reason, " d/batch") != NULL, "'%s'", s[0].reason);
        MPT_CHECK(strncmp(s[0].reason, "fetch ", 6) == 0, "'%.40s'", s[0].reason);
    }
    zp_cluster_report_destroy(r);
    zp_mpi_destroy(m);
    mpt_sync();
}

/* ------------------------------------------------------------ real pipelines */

#define STEPS 36
#define EVERY 4

static void test_slow_rank_named(void **state)
{
    (void)state;
    static const size_t sz[] = {100, 100, 100, 100, 100, 100, 100, 100};
    mpt_job j;
    mpt_job_open(&j, "s.json", sz, 8, -1);
    zp_mpi *m = j.m;
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    zp_worksource *ws = NULL;
    MPT_CHECK(zp_mpi_worksource_create(m, j.ds, &wc, &ws) == ZP_OK);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = 1;
    pc.microbatch_size = 4;
    pc.chunk_samples = 4; /* one fetch (and one delay) per batch */
    pc.prefetch_batches = 8;
    int slow = mpt_size > 1 ? mpt_size - 1 : -1;
    if (mpt_rank == slow)
        pc.fetch_delay_us = 25000;
    zp_pipeline *p = NULL;
    MPT_CHECK(zp_pipeline_create(ws, &pc, &p) == ZP_OK);
    MPT_CHECK(zp_pipeline_enable_observability(p) == ZP_OK);

    const zp_batch *b;
    zp_mpi_input in;
    unsigned window_sets[STEPS / EVERY + 2];
    int windows = 0;
    for (int step = 1; step <= STEPS; step++) {
        zp_status st = zp_mpi_next(m, p, &b);
        MPT_CHECK(st == ZP_OK, "%s", zp_mpi_errmsg(m));
        if (st != ZP_OK)
            break;
        mpt_sleep(0.004); /* the training step */
        zp_cluster_report *r = NULL;
        if (zp_mpi_report_pending(m)) {
            int done = 0;
            MPT_CHECK(zp_mpi_report_test(m, &done, &r) == ZP_OK);
            if (done && mpt_rank == 0) {
                MPT_CHECK(r && zp_cluster_report_get_kind(r) == ZP_MPI_REPORT_WINDOW);
                window_sets[windows++] = r ? named(r, NULL) : 0;
            }
            zp_cluster_report_destroy(r);
        }
        if (step % EVERY == 0) {
            wait_window(m, window_sets, &windows);
            MPT_CHECK(zp_mpi_input_from_pipeline(p, &in) == ZP_OK);
            MPT_CHECK(zp_mpi_report_start(m, &in, ZP_MPI_REPORT_WINDOW) == ZP_OK);
        }
    }
    wait_window(m, window_sets, &windows);
    MPT_CHECK(zp_mpi_input_from_pipeline(p, &in) == ZP_OK);
    zp_cluster_report *r = NULL;
    MPT_CHECK(zp_mpi_report(m, &in, ZP_MPI_REPORT_FINAL, &r) == ZP_OK);
    if (mpt_rank == 0 && r) {
        unsigned why = 0, set = named(r, &why);
        unsigned want = slow >= 0 ? 1u << slow : 0;
        MPT_CHECK(set == want, "final report names %x, expected %x", set, want);
        if (set != want) {
            char *txt = NULL;
            zp_cluster_report_render(r, ZP_MPI_TEXT, &txt, NULL);
            fprintf(stderr, "%s\n", txt ? txt : "");
            free(txt);
        }
        /* window reports: named from the 3rd consecutive flagged window on */
        MPT_CHECK(windows == STEPS / EVERY, "%d windows", windows);
        for (int w = 0; w < windows; w++) {
            unsigned expect = w >= 2 ? want : 0;
            MPT_CHECK(window_sets[w] == expect, "window %d names %x, expected %x", w,
                      window_sets[w], expect);
        }
        /* the heatmap holds one row per window, the slow rank the slowest */
        MPT_CHECK(zp_cluster_report_num_windows(r) == windows + 1);
        if (slow >= 0) {
            double a = zp_cluster_report_window_fetch(r, 1, slow);
            double z = zp_cluster_report_window_fetch(r, 1, 0);
            MPT_CHECK(a > 5 * z, "window fetch %g vs %g", a, z);
        }
    }
    zp_cluster_report_destroy(r);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    mpt_job_close(&j);
    mpt_sync();
}

int main(int argc, char **argv)
{
    mpt_init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_criterion_synthetic),
        cmocka_unit_test(test_long_reason_cut),
        cmocka_unit_test(test_slow_rank_named),
    };
    return mpt_finish(cmocka_run_group_tests_name("mpi_straggler", tests, NULL, NULL));
}
