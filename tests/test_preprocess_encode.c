/*
 * test_preprocess_encode.c - zp_preprocess_encode_shard (the tokens of a
 * shard in memory) and zp_preprocess_encode_shard_to (handed over in
 * pieces, the MPI layer's shared file): the same tokens, offsets and
 * counts; pieces of at most 2^20 tokens, several for a shard of about 2.5
 * million; a writer's failure stops the shard with its message; bad
 * arguments.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <zephon.h>

#include "testutil.h"

/* A shard of n documents of varied English-like words (one per line). */
static char *make_shard(const char *dir, size_t n)
{
    static const char *words[] = {"the",   "pipeline", "reads",  "shards", "and",    "tokens",
                                  "of",    "every",    "rank",   "are",    "packed", "into",
                                  "rows",  "Zephon",   "1234",   "data,",  "loader", "batch."};
    size_t cap = n * 400 + 64, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    uint64_t x = 88172645463325252ULL;
    for (size_t d = 0; d < n; d++) {
        len += (size_t)snprintf(buf + len, cap - len, "{\"text\": \"");
        size_t nw = 20 + d % 60;
        for (size_t w = 0; w < nw; w++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", w ? " " : "",
                                    words[x % (sizeof words / sizeof words[0])]);
        }
        len += (size_t)snprintf(buf + len, cap - len, "\"}\n");
    }
    char *path = zpt_path(dir, "docs.jsonl");
    assert_int_equal(zpt_write_file(path, buf, len), 0);
    free(buf);
    return path;
}

typedef struct got {
    uint16_t *tok;
    size_t n, cap;
    size_t calls, max_piece;
    size_t fail_at; /* fail on this call (1-based); 0: never */
} got;

static zp_status put(void *user, const void *tokens, size_t n, char *err, size_t errcap)
{
    got *g = user;
    g->calls++;
    if (g->fail_at && g->calls == g->fail_at) {
        snprintf(err, errcap, "the test's writer refuses piece %zu", g->calls);
        return ZP_ERR_IO;
    }
    if (n > g->max_piece)
        g->max_piece = n;
    if (g->n + n > g->cap) {
        g->cap = (g->n + n) * 2;
        g->tok = realloc(g->tok, g->cap * sizeof *g->tok);
        assert_non_null(g->tok);
    }
    memcpy(g->tok + g->n, tokens, n * sizeof *g->tok);
    g->n += n;
    return ZP_OK;
}

static zp_preprocess *make_pp(zp_dataset **ds, const char *shard, const char *out)
{
    assert_int_equal(zp_dataset_create(NULL, ds), ZP_OK);
    assert_int_equal(zp_dataset_add(*ds, shard), ZP_OK);
    zp_preprocess_config c;
    zp_preprocess_config_init(&c);
    c.out_dir = out;
    c.threads = 2;
    zp_preprocess *pp;
    if (zp_preprocess_create(&c, *ds, &pp) != ZP_OK)
        fail_msg("create: %s", pp ? zp_preprocess_errmsg(pp) : "");
    assert_int_equal(zp_preprocess_dtype(pp), ZP_DTYPE_U16);
    return pp;
}

static void test_pieces_equal_memory(void **state)
{
    (void)state;
    char *dir = zpt_tmpdir();
    char *shard = make_shard(dir, 50000);
    char *out = zpt_path(dir, "out");
    zp_dataset *ds;
    zp_preprocess *pp = make_pp(&ds, shard, out);

    void *tok = NULL;
    uint64_t ntok = 0, *off = NULL, ndocs = 0;
    assert_int_equal(zp_preprocess_encode_shard(pp, 0, &tok, &ntok, &off, &ndocs), ZP_OK);
    assert_int_equal(ndocs, 50000);
    assert_true(ntok > 2 * ((uint64_t)1 << 20)); /* three pieces at least */
    assert_int_equal(off[0], 0);
    assert_int_equal(off[ndocs], ntok);

    got g = {0};
    uint64_t ntok2 = 0, *off2 = NULL, ndocs2 = 0;
    assert_int_equal(zp_preprocess_encode_shard_to(pp, 0, put, &g, &ntok2, &off2, &ndocs2), ZP_OK);
    assert_int_equal(ntok2, ntok);
    assert_int_equal(g.n, ntok);
    assert_int_equal(ndocs2, ndocs);
    assert_true(g.calls >= 3);
    assert_int_equal(g.max_piece, (size_t)1 << 20);
    assert_memory_equal(g.tok, tok, ntok * sizeof(uint16_t));
    assert_memory_equal(off2, off, (ndocs + 1) * sizeof *off);

    /* the writer's failure stops the shard with its message */
    got f = {0};
    f.fail_at = 2;
    uint64_t n3 = 0, *off3 = (uint64_t *)1, d3 = 0;
    assert_int_equal(zp_preprocess_encode_shard_to(pp, 0, put, &f, &n3, &off3, &d3), ZP_ERR_IO);
    assert_null(off3);
    assert_non_null(strstr(zp_preprocess_errmsg(pp), "the test's writer refuses piece 2"));

    /* bad arguments */
    assert_int_equal(zp_preprocess_encode_shard_to(pp, 0, NULL, &f, &n3, &off3, &d3),
                     ZP_ERR_INVALID);
    assert_int_equal(zp_preprocess_encode_shard_to(pp, 1, put, &f, &n3, &off3, &d3),
                     ZP_ERR_INVALID);
    assert_non_null(strstr(zp_preprocess_errmsg(pp), "out of range"));

    free(tok);
    free(off);
    free(off2);
    free(g.tok);
    free(f.tok);
    zp_preprocess_destroy(pp);
    zp_dataset_destroy(ds);
    zpt_rmtree(dir);
    free(shard);
    free(out);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pieces_equal_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
