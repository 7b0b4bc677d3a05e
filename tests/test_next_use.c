/*
 * test_next_use.c - the next-use order the disk cache evicts by
 * (src/engine/next_use.c), over a fake dataset (tests/fake_dataset.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "engine/next_use.h"
#include "plan/worksource_internal.h"
#include "zephon/worksource.h"

/* tests/fake_dataset.c */
zp_status fake_dataset_create(const uint64_t *counts, size_t n, int indexed, zp_dataset **out);
void fake_dataset_destroy(zp_dataset *ds);

/* At the last sample of epoch 0: the shard being read has its use there;
 * every other shard's next use is in epoch 1 for an order without end, and
 * unknown for an order that ends with epoch 0 (the run reads one epoch: its
 * later epochs are never computed). */
static void test_next_use_ends_with_the_run(void **state)
{
    (void)state;
    const uint64_t counts[8] = {10, 10, 10, 10, 10, 10, 10, 10};
    zp_dataset *ds;
    assert_int_equal(fake_dataset_create(counts, 8, 1, &ds), ZP_OK);
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.seed = 7;
    zp_worksource *ws;
    assert_int_equal(zp_worksource_create(ds, &wc, &ws), ZP_OK);
    const uint64_t per = zp_worksource_samples_per_rank(ws);
    assert_int_equal(per, 80);
    zp_sample last;
    assert_int_equal(zp_worksource_sample(ws, 0, per - 1, &last), ZP_OK);
    const uint64_t g_last = zpi_worksource_linear(ws, 0, per - 1);
    const uint64_t g_next = zpi_worksource_linear(ws, 1, 0);
    for (int bounded = 0; bounded < 2; bounded++) {
        zpi_next_use *nu = NULL;
        zpi_err err = {0};
        assert_int_equal(zpi_next_use_create(ws, bounded ? 1 : UINT32_MAX, &nu, &err), ZP_OK);
        assert_non_null(nu);
        zpi_next_use_set_position(nu, 0, 0);
        zpi_next_use_set_position(nu, 0, per - 1);
        for (size_t i = 0; i < 8; i++) {
            uint64_t v = zpi_next_use_of(nu, i);
            if (i == last.shard)
                assert_int_equal(v, g_last);
            else if (bounded)
                assert_int_equal(v, UINT64_MAX);
            else
                assert_true(v != UINT64_MAX && v >= g_next);
        }
        zpi_next_use_destroy(nu);
    }
    zp_worksource_destroy(ws);
    fake_dataset_destroy(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_next_use_ends_with_the_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
