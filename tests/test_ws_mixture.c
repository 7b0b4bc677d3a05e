/*
 * test_ws_mixture.c - the WorkSource over a mixture: proportions of every
 * prefix, passes (repeats reshuffled, subsampling without repeats), the
 * epoch's stream independent of the world size, per-epoch plans, bad
 * parts. Built with tests/fake_dataset.c like test_worksource.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "plan/worksource_internal.h"
#include "zephon/worksource.h"

zp_status fake_dataset_create(const uint64_t *counts, size_t n, int indexed, zp_dataset **out);
void fake_dataset_destroy(zp_dataset *ds);

/* Three parts: 4 shards of 50 (200 samples), 2 of 40 (80), 3 of 10 (30). */
static const uint64_t counts3[] = {50, 50, 50, 50, 40, 40, 10, 10, 10};

static zp_dataset *mkds(const uint64_t *c, size_t n)
{
    zp_dataset *ds = NULL;
    assert_int_equal(fake_dataset_create(c, n, 1, &ds), ZP_OK);
    return ds;
}

static zp_worksource *mkmix(zp_dataset *ds, uint32_t rank, uint32_t world, uint64_t n_epoch,
                            const double *w)
{
    static zp_mix_part parts[3];
    parts[0] = (zp_mix_part){"web", 4, w[0]};
    parts[1] = (zp_mix_part){"code", 2, w[1]};
    parts[2] = (zp_mix_part){"books", 3, w[2]};
    zp_worksource_config c;
    zp_worksource_config_init(&c);
    c.seed = 11;
    c.rank = rank;
    c.world_size = world;
    c.shuffle_block_shards = 2;
    c.parts = parts;
    c.n_parts = 3;
    c.epoch_samples = n_epoch;
    zp_worksource *ws = NULL;
    zp_status st = zp_worksource_create(ds, &c, &ws);
    if (st != ZP_OK)
        fail_msg("create: %s", zp_worksource_errmsg(ws));
    return ws;
}

static const uint64_t part_first[3] = {0, 200, 280}; /* global ids of each part */

static void test_prefix_proportions(void **state)
{
    (void)state;
    zp_dataset *ds = mkds(counts3, 9);
    const double w[3] = {0.7, 0.2, 0.1};
    zp_worksource *ws = mkmix(ds, 0, 1, 10000, w);
    assert_int_equal(zp_worksource_num_parts(ws), 3);
    assert_string_equal(zp_worksource_part_name(ws, 1), "code");
    assert_true(zp_worksource_part_weight(ws, 0) == 0.7);
    uint64_t c[3] = {0, 0, 0};
    for (uint64_t g = 0; g < 10000; g++) {
        zp_sample s;
        assert_int_equal(zp_worksource_sample(ws, 0, g, &s), ZP_OK);
        assert_true(s.part < 3);
        /* the sample belongs to its part */
        assert_true(s.global_id >= part_first[s.part]);
        assert_true(s.part == 2 || s.global_id < part_first[s.part + 1]);
        c[s.part]++;
        for (int i = 0; i < 3; i++) {
            double dev = (double)c[i] - w[i] * (double)(g + 1);
            if (dev <= -1.0 || dev >= 1.0)
                fail_msg("prefix %llu: part %d has %llu draws, weight %.1f: off by %.3f",
                         (unsigned long long)g + 1, i, (unsigned long long)c[i], w[i], dev);
        }
    }
    uint64_t dc[3];
    assert_int_equal(zp_worksource_draw_counts(ws, 10000, dc), ZP_OK);
    assert_int_equal(dc[0], c[0]);
    assert_int_equal(dc[1], c[1]);
    assert_int_equal(dc[2], c[2]);
    zp_worksource_destroy(ws);
    fake_dataset_destroy(ds);
}

/* Part "books" (30 samples, 10% of 3000 draws = 300) repeats 10 passes, each
 * a permutation of its samples, each pass in its own order; "web" (200
 * samples, 70% of 3000 = 2100) 10.5 passes; with 100 draws per epoch "web"
 * is subsampled: 70 draws, no repeat, and the next epoch continues its pass. */
static void test_passes(void **state)
{
    (void)state;
    zp_dataset *ds = mkds(counts3, 9);
    const double w[3] = {0.7, 0.2, 0.1};
    zp_worksource *ws = mkmix(ds, 0, 1, 3000, w);
    uint64_t seen[10][30];
    memset(seen, 0, sizeof seen);
    uint64_t order0[30], order1[30];
    size_t n0 = 0, n1 = 0;
    for (uint64_t g = 0; g < 3000; g++) {
        zp_sample s;
        assert_int_equal(zp_worksource_sample(ws, 0, g, &s), ZP_OK);
        if (s.part != 2)
            continue;
        assert_true(s.pass < 10);
        seen[s.pass][s.global_id - 280]++;
        if (s.pass == 0)
            order0[n0++] = s.global_id;
        if (s.pass == 1)
            order1[n1++] = s.global_id;
    }
    for (int p = 0; p < 10; p++)
        for (int i = 0; i < 30; i++)
            assert_int_equal(seen[p][i], 1);
    assert_int_equal(n0, 30);
    assert_int_equal(n1, 30);
    assert_true(memcmp(order0, order1, sizeof order0) != 0); /* reshuffled */
    zp_worksource_destroy(ws);

    ws = mkmix(ds, 0, 1, 100, w);
    uint8_t web[200];
    memset(web, 0, sizeof web);
    for (uint32_t e = 0; e < 2; e++)
        for (uint64_t g = 0; g < 100; g++) {
            zp_sample s;
            assert_int_equal(zp_worksource_sample(ws, e, g, &s), ZP_OK);
            if (s.part == 0) {
                assert_int_equal(s.pass, 0);
                assert_int_equal(web[s.global_id], 0); /* no repeat within the pass */
                web[s.global_id] = 1;
            }
        }
    int n = 0;
    for (int i = 0; i < 200; i++)
        n += web[i];
    assert_int_equal(n, 140);
    zp_worksource_destroy(ws);
    fake_dataset_destroy(ds);
}

/* The epoch's stream does not depend on the world size: rank r of W reads
 * positions [r*per, (r+1)*per) of one sequence. */
static void test_world_size_independent(void **state)
{
    (void)state;
    zp_dataset *ds = mkds(counts3, 9);
    const double w[3] = {5, 3, 2};
    const uint64_t N = 997;
    uint64_t ref[997];
    zp_worksource *ws = mkmix(ds, 0, 1, N, w);
    for (uint64_t g = 0; g < N; g++) {
        zp_sample s;
        assert_int_equal(zp_worksource_sample(ws, 1, g, &s), ZP_OK);
        ref[g] = s.global_id * 1000 + s.pass;
    }
    zp_worksource_destroy(ws);
    for (uint32_t W = 2; W <= 7; W++) {
        uint64_t at = 0;
        for (uint32_t r = 0; r < W; r++) {
            ws = mkmix(ds, r, W, N, w);
            uint64_t per = zp_worksource_samples_per_rank(ws);
            for (uint64_t k = 0; k < per; k++) {
                zp_sample s;
                assert_int_equal(zp_worksource_sample(ws, 1, k, &s), ZP_OK);
                if (s.padded)
                    continue;
                assert_true(at < N);
                assert_int_equal(s.global_id * 1000 + s.pass, ref[at]);
                at++;
            }
            zp_worksource_destroy(ws);
        }
        assert_int_equal(at, N);
    }
    fake_dataset_destroy(ds);
}

/* A plan replaces an epoch's range by spans; token offsets go to the first
 * sample of their span; the stream index counts the plan's length. */
static void test_plans(void **state)
{
    (void)state;
    zp_dataset *ds = mkds(counts3, 9);
    const double w[3] = {0.7, 0.2, 0.1};
    zp_worksource *ref = mkmix(ds, 0, 1, 300, w);
    zp_worksource *ws = mkmix(ds, 1, 3, 300, w);
    zpi_span sp[2] = {{10, 5, 0}, {250, 3, 17}};
    zpi_epoch_plan pl = {2, 2, sp};
    assert_int_equal(zpi_worksource_set_plans(ws, &pl, 1), ZP_OK);
    assert_int_equal(zp_worksource_epoch_samples(ws, 2), 8);
    assert_int_equal(zp_worksource_epoch_samples(ws, 3), 100);
    for (uint64_t k = 0; k < 8; k++) {
        zp_sample a, b;
        uint64_t g = k < 5 ? 10 + k : 250 + (k - 5);
        assert_int_equal(zp_worksource_sample(ws, 2, k, &a), ZP_OK);
        assert_int_equal(zp_worksource_sample(ref, 2, g, &b), ZP_OK);
        assert_int_equal(a.global_id, b.global_id);
        assert_int_equal(a.token_offset, k == 5 ? 17 : 0);
    }
    zp_sample s;
    assert_int_equal(zp_worksource_sample(ws, 2, 8, &s), ZP_ERR_INVALID);
    uint64_t idx;
    assert_int_equal(zp_worksource_stream_index(ws, 3, 0, &idx), ZP_OK);
    assert_int_equal(idx, 100 + 100 + 8);
    uint32_t e;
    uint64_t pos;
    assert_true(zpi_worksource_unlinear(ws, 205, &e, &pos));
    assert_int_equal(e, 2);
    assert_int_equal(pos, 5);
    assert_true(zpi_worksource_unlinear(ws, 208, &e, &pos));
    assert_int_equal(e, 3);
    assert_int_equal(pos, 0);
    assert_int_equal(zpi_worksource_linear(ws, 3, 4), 212);
    /* sequential: epoch 2 holds 8 samples */
    zp_worksource_state st = {11, 2, 7};
    assert_int_equal(zp_worksource_set_state(ws, &st), ZP_OK);
    assert_int_equal(zp_worksource_next(ws, &s), ZP_OK);
    assert_int_equal(zp_worksource_next(ws, &s), ZP_OK);
    assert_int_equal(s.epoch, 3);
    assert_int_equal(s.position, 0);
    zp_worksource_destroy(ws);
    zp_worksource_destroy(ref);
    fake_dataset_destroy(ds);
}

static void test_bad_parts(void **state)
{
    (void)state;
    zp_dataset *ds = mkds(counts3, 9);
    zp_worksource_config c;
    zp_worksource_config_init(&c);
    zp_mix_part parts[3] = {{"a", 4, 1}, {"b", 2, 1}, {"c", 2, 1}};
    c.parts = parts;
    c.n_parts = 3;
    zp_worksource *ws = NULL;
    assert_int_equal(zp_worksource_create(ds, &c, &ws), ZP_ERR_INVALID);
    assert_non_null(strstr(zp_worksource_errmsg(ws), "cover 8 shards"));
    zp_worksource_destroy(ws);
    parts[2].shards = 3;
    parts[1].weight = -1;
    assert_int_equal(zp_worksource_create(ds, &c, &ws), ZP_ERR_INVALID);
    assert_non_null(strstr(zp_worksource_errmsg(ws), "weight"));
    zp_worksource_destroy(ws);
    parts[1].weight = 1;
    parts[0].shards = 0;
    assert_int_equal(zp_worksource_create(ds, &c, &ws), ZP_ERR_INVALID);
    assert_non_null(strstr(zp_worksource_errmsg(ws), "part 0 (a)"));
    zp_worksource_destroy(ws);
    fake_dataset_destroy(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_proportions),
        cmocka_unit_test(test_passes),
        cmocka_unit_test(test_world_size_independent),
        cmocka_unit_test(test_plans),
        cmocka_unit_test(test_bad_parts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
