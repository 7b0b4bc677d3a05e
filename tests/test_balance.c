/*
 * test_balance.c - zp_balance_rows and zp_row_cost (zephon/balance.h):
 * exact group sizes, a known optimum, never worse than the stream's own
 * grouping on random long-tailed costs, the same answer every time, and
 * bad arguments. The pipeline's use of it is tested in test_resume.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "zephon/balance.h"

static void test_row_cost(void **state)
{
    (void)state;
    /* documents of 3, 1 and 2 inputs, then padding: 9 + 1 + 4 */
    const int32_t sg[] = {0, 0, 0, 1, 2, 2, -1, -1, 7};
    assert_int_equal(zp_row_cost(sg, 8), 14);
    assert_int_equal(zp_row_cost(sg, 0), 0);
    /* the last position (a target only) is not an input */
    assert_int_equal(zp_row_cost(sg, 9), 15);
    const int32_t pad[] = {-1, -1, -1};
    assert_int_equal(zp_row_cost(pad, 3), 0);
}

static void test_known_optimum(void **state)
{
    (void)state;
    /* two heavy rows must go to different groups */
    const uint64_t c[] = {100, 100, 1, 1};
    uint32_t g[4];
    uint64_t sums[2];
    assert_int_equal(zp_balance_rows(c, 2, 2, g, sums), ZP_OK);
    assert_int_not_equal(g[0], g[1]);
    assert_int_equal(sums[0], 101);
    assert_int_equal(sums[1], 101);
    /* {5,5,4,3,3,3} into 2 groups of 3 (sum 23): the best is 12/11 */
    const uint64_t d[] = {5, 5, 4, 3, 3, 3};
    uint32_t h[6];
    uint64_t s2[2];
    assert_int_equal(zp_balance_rows(d, 2, 3, h, s2), ZP_OK);
    assert_true((s2[0] > s2[1] ? s2[0] : s2[1]) <= 12);
}

static uint64_t lognormal_cost(unsigned *seed)
{
    /* a long tail: mostly small, sometimes a row-filling document */
    unsigned r = rand_r(seed) % 1000;
    uint64_t len = r < 700 ? 20 + r % 100 : r < 950 ? 200 + r : 2048;
    return len * len;
}

static void test_random_windows(void **state)
{
    (void)state;
    unsigned seed = 22;
    for (int trial = 0; trial < 200; trial++) {
        size_t groups = 1 + (size_t)(rand_r(&seed) % 16), per = 1 + (size_t)(rand_r(&seed) % 8);
        size_t n = groups * per;
        uint64_t *c = malloc(n * sizeof *c), *sums = calloc(groups, sizeof *sums);
        uint32_t *g = malloc(n * sizeof *g), *g2 = malloc(n * sizeof *g2);
        uint64_t before = 0, total = 0, biggest = 0;
        for (size_t i = 0; i < n; i++) {
            c[i] = lognormal_cost(&seed);
            total += c[i];
            biggest = c[i] > biggest ? c[i] : biggest;
        }
        for (size_t k = 0; k < groups; k++) { /* the stream's own grouping */
            uint64_t s = 0;
            for (size_t j = 0; j < per; j++)
                s += c[k * per + j];
            before = s > before ? s : before;
        }
        assert_int_equal(zp_balance_rows(c, groups, per, g, sums), ZP_OK);
        size_t *cnt = calloc(groups, sizeof *cnt);
        uint64_t *chk = calloc(groups, sizeof *chk), after = 0, sum_all = 0;
        for (size_t i = 0; i < n; i++) {
            assert_true(g[i] < groups);
            cnt[g[i]]++;
            chk[g[i]] += c[i];
        }
        for (size_t k = 0; k < groups; k++) {
            assert_int_equal(cnt[k], per); /* exactly per rows each */
            assert_int_equal(chk[k], sums[k]);
            after = chk[k] > after ? chk[k] : after;
            sum_all += chk[k];
        }
        assert_int_equal(sum_all, total);
        assert_true(after <= before);
        /* within the lower bounds' reach: max(mean, biggest row) + biggest */
        uint64_t lb = (total + groups - 1) / groups;
        lb = lb > biggest ? lb : biggest;
        assert_true(after <= lb + biggest);
        /* the same answer again */
        assert_int_equal(zp_balance_rows(c, groups, per, g2, NULL), ZP_OK);
        assert_memory_equal(g, g2, n * sizeof *g);
        free(c);
        free(sums);
        free(g);
        free(g2);
        free(cnt);
        free(chk);
    }
}

static void test_bad_arguments(void **state)
{
    (void)state;
    uint64_t c[2] = {1, 2};
    uint32_t g[2];
    assert_int_equal(zp_balance_rows(c, 0, 2, g, NULL), ZP_ERR_INVALID);
    assert_int_equal(zp_balance_rows(c, 2, 0, g, NULL), ZP_ERR_INVALID);
    assert_int_equal(zp_balance_rows(NULL, 1, 2, g, NULL), ZP_ERR_INVALID);
    assert_int_equal(zp_balance_rows(c, 1, 2, NULL, NULL), ZP_ERR_INVALID);
    assert_int_equal(zp_balance_rows(c, (size_t)1 << 20, (size_t)1 << 20, g, NULL),
                     ZP_ERR_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_cost),
        cmocka_unit_test(test_known_optimum),
        cmocka_unit_test(test_random_windows),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
