/*
 * test_ws_schedule.c - mixture weight schedules in the WorkSource
 * (docs/mixtures.md, "Weight schedules"): every prefix of every phase
 * within one sample of the phase's weights, step and linear phases,
 * phases crossing epochs, each part's draws continuing across phase
 * changes (no sample repeated or skipped within a pass), a schedule
 * changed at a cut point (zpi_sched_cut) keeping every draw before it, and
 * bad phases. Built with tests/fake_dataset.c like test_ws_mixture.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "plan/schedule.h"
#include "plan/worksource_internal.h"
#include "zephon/worksource.h"

zp_status fake_dataset_create(const uint64_t *counts, size_t n, int indexed, zp_dataset **out);
void fake_dataset_destroy(zp_dataset *ds);

/* Three parts: 4 shards of 50 (200 samples), 2 of 40 (80), 3 of 10 (30). */
static const uint64_t counts3[] = {50, 50, 50, 50, 40, 40, 10, 10, 10};
static const uint64_t part_first[3] = {0, 200, 280};
static const uint64_t part_size[3] = {200, 80, 30};

static zp_dataset *mkds(void)
{
    zp_dataset *ds = NULL;
    assert_int_equal(fake_dataset_create(counts3, 9, 1, &ds), ZP_OK);
    return ds;
}

static zp_status mksched(zp_dataset *ds, uint64_t n_epoch, const double *w0,
                         const zp_mix_phase *ph, size_t nph, zp_worksource **ws)
{
    zp_mix_part parts[3] = {{"web", 4, w0[0]}, {"code", 2, w0[1]}, {"books", 3, w0[2]}};
    zp_worksource_config c;
    zp_worksource_config_init(&c);
    c.seed = 11;
    c.shuffle_block_shards = 2;
    c.parts = parts;
    c.n_parts = 3;
    c.epoch_samples = n_epoch;
    c.phases = ph;
    c.n_phases = nph;
    return zp_worksource_create(ds, &c, ws);
}

static zp_worksource *mk(zp_dataset *ds, uint64_t n_epoch, const double *w0,
                         const zp_mix_phase *ph, size_t nph)
{
    zp_worksource *ws = NULL;
    if (mksched(ds, n_epoch, w0, ph, nph, &ws) != ZP_OK)
        fail_msg("create: %s", zp_worksource_errmsg(ws));
    return ws;
}

/* Draw G of the mixture (world size 1: epoch G / N, position G % N). */
static void draw(zp_worksource *ws, uint64_t N, uint64_t G, zp_sample *s)
{
    assert_int_equal(zp_worksource_sample(ws, (uint32_t)(G / N), G % N, s), ZP_OK);
}

/* Every prefix of every phase within one sample of the phase's weights as
 * used; and per part and pass every sample at most once, every complete
 * pass whole (no draw repeated or skipped). */
static void check_stream(zp_worksource *ws, uint64_t N, uint64_t draws)
{
    const size_t nph = zp_worksource_num_phases(ws);
    uint64_t c[3] = {0, 0, 0};
    size_t k = 0;
    uint64_t start = 0;
    uint8_t *seen[3];
    uint64_t maxpass = draws + 1;
    for (int i = 0; i < 3; i++)
        seen[i] = calloc(maxpass * part_size[i], 1);
    uint64_t per_part[3] = {0, 0, 0};
    for (uint64_t G = 0; G < draws; G++) {
        if (k + 1 < nph && G == zp_worksource_phase_start(ws, k + 1)) {
            k++;
            start = G;
            memset(c, 0, sizeof c);
        }
        assert_int_equal(zp_worksource_phase_of(ws, G), k);
        zp_sample s;
        draw(ws, N, G, &s);
        assert_int_equal(s.phase, k); /* each sample names its phase */
        assert_true(s.part < 3);
        assert_true(s.global_id >= part_first[s.part] &&
                    s.global_id < part_first[s.part] + part_size[s.part]);
        uint8_t *b = &seen[s.part][s.pass * part_size[s.part] + s.global_id - part_first[s.part]];
        if (*b)
            fail_msg("draw %llu: part %u pass %llu sample %llu drawn twice",
                     (unsigned long long)G, s.part, (unsigned long long)s.pass,
                     (unsigned long long)s.global_id);
        *b = 1;
        per_part[s.part]++;
        c[s.part]++;
        for (int i = 0; i < 3; i++) {
            double dev = (double)c[i] - zp_worksource_phase_weight(ws, k, (size_t)i) *
                                            (double)(G + 1 - start);
            if (dev <= -1.0 || dev >= 1.0)
                fail_msg("phase %zu (from draw %llu), prefix %llu: part %d off by %.3f", k,
                         (unsigned long long)start, (unsigned long long)(G + 1 - start), i, dev);
        }
    }
    /* no skip: part i's draws are its draws 0 .. per_part[i] - 1, so its
     * complete passes are whole and its last pass holds the rest */
    for (int i = 0; i < 3; i++) {
        uint64_t full = per_part[i] / part_size[i];
        for (uint64_t p = 0; p <= full && p < maxpass; p++) {
            uint64_t n = 0;
            for (uint64_t j = 0; j < part_size[i]; j++)
                n += seen[i][p * part_size[i] + j];
            uint64_t want = p < full ? part_size[i] : per_part[i] % part_size[i];
            if (n != want)
                fail_msg("part %d pass %llu: %llu samples drawn, want %llu", i,
                         (unsigned long long)p, (unsigned long long)n, (unsigned long long)want);
        }
        free(seen[i]);
    }
}

static void test_steps(void **state)
{
    (void)state;
    zp_dataset *ds = mkds();
    const double w0[3] = {0.7, 0.2, 0.1}, w1[3] = {0.1, 0.3, 0.6}, w2[3] = {1, 1, 1};
    zp_mix_phase ph[2] = {{2500, w1, 0}, {4100, w2, 0}};
    zp_worksource *ws = mk(ds, 1000, w0, ph, 2); /* phases cross epochs */
    assert_int_equal(zp_worksource_num_phases(ws), 3);
    assert_int_equal(zp_worksource_phase_start(ws, 1), 2500);
    assert_true(zp_worksource_phase_weight(ws, 1, 2) == 0.6);
    assert_true(zp_worksource_part_weight(ws, 0) == 0.7); /* phase 0's */
    check_stream(ws, 1000, 7000);
    /* the counts over phases: phase 0's quota for 2500 draws, then phase 1's */
    uint64_t cnt[3];
    assert_int_equal(zp_worksource_draw_counts(ws, 3500, cnt), ZP_OK);
    assert_int_equal(cnt[0], 1750 + 100);
    assert_int_equal(cnt[1], 500 + 300);
    assert_int_equal(cnt[2], 250 + 600);
    /* before the first change the stream is the plain mixture's */
    zp_worksource *plain = mk(ds, 1000, w0, NULL, 0);
    for (uint64_t G = 0; G < 2500; G++) {
        zp_sample a, b;
        draw(ws, 1000, G, &a);
        draw(plain, 1000, G, &b);
        assert_true(a.global_id == b.global_id && a.pass == b.pass);
    }
    zp_worksource_destroy(plain);
    zp_worksource_destroy(ws);
    fake_dataset_destroy(ds);
}

static void test_linear(void **state)
{
    (void)state;
    zp_dataset *ds = mkds();
    const double w0[3] = {0.8, 0.1, 0.1}, w1[3] = {0.2, 0.2, 0.6};
    /* from draw 1000 (phase 1 starts there as a step) to 3000: linear to w1
     * in steps of 500 */
    const double w_mid[3] = {0.8, 0.1, 0.1};
    zp_mix_phase ph[2] = {{1000, w_mid, 0}, {3000, w1, 500}};
    zp_worksource *ws = mk(ds, 700, w0, ph, 2);
    assert_int_equal(zp_worksource_num_phases(ws), 1 + 4 + 1);
    for (size_t k = 1; k <= 4; k++) {
        assert_int_equal(zp_worksource_phase_start(ws, k), 1000 + 500 * (k - 1));
        /* interpolated at the middle of [start, start + 500): t = (k - 0.5) / 4 */
        double t = ((double)k - 0.5) / 4.0;
        double want = 0.8 + (0.2 - 0.8) * t;
        double got = zp_worksource_phase_weight(ws, k, 0);
        assert_true(got > want - 1e-6 && got < want + 1e-6);
    }
    assert_int_equal(zp_worksource_phase_start(ws, 5), 3000);
    assert_true(zp_worksource_phase_weight(ws, 5, 2) == 0.6);
    check_stream(ws, 700, 5000);
    zp_worksource_destroy(ws);
    fake_dataset_destroy(ds);
}

/* A schedule changed at draw C: the draws before C are the old schedule's,
 * the new weights hold from C (a phase restarted there), and each part
 * continues: no sample repeated or skipped. Megatron's failure (the new
 * weights applied to the whole stream, as a fresh blend would) repeats and
 * skips samples: that is checked too, so that this test can tell. */
static void test_cut(void **state)
{
    (void)state;
    zp_dataset *ds = mkds();
    const double wa[3] = {0.7, 0.2, 0.1}, wa1[3] = {0.5, 0.25, 0.25}, wb[3] = {0.1, 0.1, 0.8};
    zp_mix_phase pa[1] = {{3000, wa1, 0}};
    zp_worksource *a = mk(ds, 1000, wa, pa, 1);
    zp_worksource *b = mk(ds, 1000, wb, NULL, 0); /* the new configuration */
    const uint64_t C = 1717;
    zpi_sched cut;
    zpi_err err = {0};
    assert_int_equal(zpi_sched_cut(zpi_worksource_schedule(a), zpi_worksource_config_schedule(b),
                                   C, &cut, &err),
                     ZP_OK);
    assert_int_equal(cut.n_phases, 2);
    assert_int_equal(cut.since, C);
    /* the cut schedule follows b from C on: a later resume keeps it */
    assert_true(zpi_sched_follows(&cut, zpi_worksource_config_schedule(b)));
    assert_false(zpi_sched_follows(&cut, zpi_worksource_config_schedule(a)));
    zp_worksource *r = mk(ds, 1000, wb, NULL, 0);
    assert_int_equal(zpi_worksource_set_schedule(r, &cut), ZP_OK);
    zpi_sched_clear(&cut);
    for (uint64_t G = 0; G < C; G++) {
        zp_sample x, y;
        draw(a, 1000, G, &x);
        draw(r, 1000, G, &y);
        assert_true(x.global_id == y.global_id && x.pass == y.pass);
    }
    assert_true(zp_worksource_phase_weight(r, 1, 2) == 0.8);
    check_stream(r, 1000, 6000);
    /* Megatron's failure: the old draws, then the new weights' draws from
     * C as if they had held from the start: some samples come twice */
    uint8_t seen[3][310];
    memset(seen, 0, sizeof seen);
    int twice = 0;
    for (uint64_t G = 0; G < 2000; G++) {
        zp_sample s;
        draw(G < C ? a : b, 1000, G, &s);
        if (s.pass == 0 && seen[s.part][s.global_id]++)
            twice++;
    }
    assert_true(twice > 0);
    zp_worksource_destroy(r);
    zp_worksource_destroy(a);
    zp_worksource_destroy(b);
    fake_dataset_destroy(ds);
}

static void test_bad_phases(void **state)
{
    (void)state;
    zp_dataset *ds = mkds();
    const double w0[3] = {1, 1, 1}, bad[3] = {1, -1, 1};
    zp_worksource *ws = NULL;
    zp_mix_phase ph[2] = {{0, w0, 0}, {10, w0, 0}};
    assert_int_equal(mksched(ds, 100, w0, ph, 2, &ws), ZP_ERR_INVALID);
    assert_non_null(strstr(zp_worksource_errmsg(ws), "phases[0].start = 0"));
    zp_worksource_destroy(ws);
    ph[0].start = 20;
    assert_int_equal(mksched(ds, 100, w0, ph, 2, &ws), ZP_ERR_INVALID);
    assert_non_null(strstr(zp_worksource_errmsg(ws), "phases[1].start = 10"));
    zp_worksource_destroy(ws);
    ph[1] = (zp_mix_phase){30, bad, 0};
    assert_int_equal(mksched(ds, 100, w0, ph, 2, &ws), ZP_ERR_INVALID);
    assert_non_null(strstr(zp_worksource_errmsg(ws), "phases[1].weights"));
    zp_worksource_destroy(ws);
    ph[1] = (zp_mix_phase){2000000, w0, 1000}; /* 1,999,980 draws in steps of 1000 */
    assert_int_equal(mksched(ds, 100, w0, ph, 2, &ws), ZP_ERR_LIMIT);
    assert_non_null(strstr(zp_worksource_errmsg(ws), "linear_every"));
    zp_worksource_destroy(ws);
    /* a schedule needs a mixture */
    zp_worksource_config c;
    zp_worksource_config_init(&c);
    c.phases = ph;
    c.n_phases = 1;
    assert_int_equal(zp_worksource_create(ds, &c, &ws), ZP_ERR_INVALID);
    assert_non_null(strstr(zp_worksource_errmsg(ws), "2 parts or more"));
    zp_worksource_destroy(ws);
    fake_dataset_destroy(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_steps),
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_cut),
        cmocka_unit_test(test_bad_phases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
