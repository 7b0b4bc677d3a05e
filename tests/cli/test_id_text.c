/*
 * test_id_text.c - `zephon tokenize`'s id formatter (src/cli/id_text.h):
 * every id below 2^21 and the edges above (10^6, 2^31, 2^32 - 1) against
 * snprintf, each followed by its comma, with the 8-byte stores' overhang
 * never reaching past the room the formatter promises.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cli/id_text.h"

static void check(const zpc_id_text *t, uint32_t id)
{
    char want[16], buf[32];
    int n = snprintf(want, sizeof want, "%u,", id);
    memset(buf, 'x', sizeof buf);
    char *end = zpc_id_put(t, buf + 4, id);
    if ((int)(end - (buf + 4)) != n || memcmp(buf + 4, want, (size_t)n) != 0) {
        fail_msg("id %u: got '%.*s', want '%s'", id, (int)(end - (buf + 4)), buf + 4, want);
    }
    /* nothing before the start; at most 8 bytes past the end (12 in all) */
    assert_memory_equal(buf, "xxxx", 4);
    size_t used = 0;
    for (size_t i = 4; i < sizeof buf; i++)
        if (buf[i] != 'x')
            used = i - 4 + 1;
    assert_true(used <= (size_t)(end - (buf + 4)) + 8);
    assert_true(used <= 12);
}

static void test_every_small_id(void **state)
{
    (void)state;
    zpc_id_text t;
    zpc_id_text_init(&t);
    for (uint32_t id = 0; id < (1u << 21); id++)
        check(&t, id);
}

static void test_large_ids(void **state)
{
    (void)state;
    zpc_id_text t;
    zpc_id_text_init(&t);
    const uint32_t ids[] = {999999, 1000000, 1000001, 9999999, 10000000, 123456789,
                            2147483647u, 2147483648u, 4294967295u};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        check(&t, ids[i]);
    /* a run of ids into one buffer, as the command writes them */
    char buf[64];
    char *p = buf;
    const uint32_t run[] = {0, 7, 10, 100, 1000, 50256, 200018};
    for (size_t i = 0; i < sizeof run / sizeof run[0]; i++)
        p = zpc_id_put(&t, p, run[i]);
    assert_int_equal(p - buf, 29);
    assert_memory_equal(buf, "0,7,10,100,1000,50256,200018,", 29);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_small_id),
        cmocka_unit_test(test_large_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
