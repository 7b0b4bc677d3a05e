/* test_budget.c - the memory budget (zephon/memory.h, src/output/budget.c):
 * a budget too small for the settings fails the start naming what they
 * need; a budget that fits never changes the batches; the budget sizes the
 * shard cache and the in-flight chunks; kept batches count against it; the
 * caps an autotuner asks for. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/pipeline_internal.h"
#include "output/budget.h"
#include "testutil.h"
#include "zephon.h"

typedef struct fixture {
    char *dir;
    zp_dataset *ds;
    size_t shard_decoded; /* the largest shard's JSONL bytes */
} fixture;

/* 12 jsonl.zst shards of about 64 KiB decoded each, written in 3 frames
 * (each recording its size). */
static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->dir = zpt_tmpdir();
    assert_int_equal(zp_dataset_create(NULL, &f->ds), ZP_OK);
    for (int s = 0; s < 12; s++) {
        size_t cap = 1 << 18, len = 0;
        char *buf = malloc(cap);
        for (int i = 0; len < 64000; i++) {
            len += (size_t)sprintf(buf + len, "{\"id\": %d, \"text\": \"doc %d-%d", i, s, i);
            for (int r = 0; r < (i * 7 + s) % 40; r++)
                len += (size_t)sprintf(buf + len, " word%d", r * s);
            len += (size_t)sprintf(buf + len, ".\"}\n");
        }
        if (len > f->shard_decoded)
            f->shard_decoded = len;
        char path[512];
        snprintf(path, sizeof path, "%s/shard-%02d.jsonl.zst", f->dir, s);
        assert_int_equal(zpt_write_zst(path, buf, len, 3), 0);
        free(buf);
        assert_int_equal(zp_dataset_add(f->ds, path), ZP_OK);
    }
    assert_int_equal(zp_dataset_index(f->ds), ZP_OK);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    zp_dataset_destroy(f->ds);
    zpt_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* A token pipeline over f's dataset with `budget` (0: none). */
static zp_pipeline *make(fixture *f, zp_worksource **ws, size_t budget, int threads)
{
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.seed = 11;
    wc.shuffle_block_shards = 2;
    assert_int_equal(zp_worksource_create(f->ds, &wc, ws), ZP_OK);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = threads;
    pc.chunk_samples = 16;
    pc.microbatch_size = 4;
    pc.seq_len = 127;
    pc.memory_budget = budget;
    zp_pipeline *p = NULL;
    assert_int_equal(zp_pipeline_create(*ws, &pc, &p), ZP_OK);
    assert_int_equal(zp_pipeline_tokenize(p, "gpt2", "text", 1), ZP_OK);
    return p;
}

/* XXH64-like fold of every batch digest of the stream. */
static uint64_t stream_digest(zp_pipeline *p, size_t *batches)
{
    uint64_t h = 0;
    const zp_batch *b;
    zp_status st;
    *batches = 0;
    while ((st = zp_pipeline_next(p, &b)) == ZP_OK) {
        h = h * 0x9E3779B97F4A7C15ull ^ zp_batch_digest(b);
        (*batches)++;
    }
    assert_int_equal(st, ZP_END);
    return h;
}

/* The budget never changes the data: equal digests with and without one
 * that fits, at 1 and 2 threads. */
static void test_budget_same_batches(void **state)
{
    fixture *f = *state;
    zp_worksource *ws;
    zp_pipeline *p = make(f, &ws, 0, 2);
    size_t n0, n1;
    uint64_t want = stream_digest(p, &n0);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    assert_true(n0 > 20);
    for (int threads = 1; threads <= 2; threads++) {
        p = make(f, &ws, (size_t)8 << 20, threads);
        assert_int_equal(stream_digest(p, &n1), want);
        assert_int_equal(n1, n0);
        zp_memory_plan m;
        assert_int_equal(zp_pipeline_memory_plan(p, &m), ZP_OK);
        assert_int_equal(m.budget, (uint64_t)8 << 20);
        assert_true(m.total <= m.budget);
        assert_true(m.cache_budget < ((uint64_t)8 << 20)); /* not the 1 GiB default */
        assert_true(m.kept_batches >= ZP_MEMORY_KEPT_MIN);
        zp_pipeline_destroy(p);
        zp_worksource_destroy(ws);
    }
}

/* A budget too small: the first next() fails, naming the budget, what the
 * settings need and the largest shard; the plan says the same before. */
static void test_budget_too_small_names_need(void **state)
{
    fixture *f = *state;
    zp_worksource *ws;
    zp_pipeline *p = make(f, &ws, 256 << 10, 1);
    zp_memory_plan m;
    assert_int_equal(zp_pipeline_memory_plan(p, &m), ZP_ERR_LIMIT);
    const zp_batch *b;
    assert_int_equal(zp_pipeline_next(p, &b), ZP_ERR_LIMIT);
    const char *msg = zp_pipeline_errmsg(p);
    assert_non_null(strstr(msg, "memory_budget = 256.0 KiB (262144 bytes): too small"));
    assert_non_null(strstr(msg, "needs at least"));
    assert_non_null(strstr(msg, "shard cache"));
    assert_non_null(strstr(msg, "shard-"));
    /* the need it names is enough */
    const char *at = strstr(msg, "needs at least ");
    assert_non_null(at);
    at = strchr(at, '(');
    assert_non_null(at);
    unsigned long long need = strtoull(at + 1, NULL, 10);
    assert_true(need > (256u << 10));
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    p = make(f, &ws, (size_t)need, 1);
    size_t n;
    (void)stream_digest(p, &n);
    assert_true(n > 0);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    p = make(f, &ws, (size_t)need - 1, 1);
    assert_int_equal(zp_pipeline_next(p, &b), ZP_ERR_LIMIT);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
}

/* An explicit setting that does not fit is named: prefetch_batches. */
static void test_budget_explicit_setting_named(void **state)
{
    fixture *f = *state;
    zp_worksource *ws;
    zp_pipeline *p = make(f, &ws, (size_t)4 << 20, 1);
    assert_int_equal(zp_pipeline_options(p, 4000), ZP_OK);
    const zp_batch *b;
    assert_int_equal(zp_pipeline_next(p, &b), ZP_ERR_LIMIT);
    assert_non_null(strstr(zp_pipeline_errmsg(p), "prefetch_batches = 4000"));
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
}

/* Kept batches count against the budget: keeping more than the plan's
 * kept_batches fails with ZP_ERR_LIMIT; releasing one makes room. Without
 * a budget keeping is unlimited. */
static void test_budget_kept_batches(void **state)
{
    fixture *f = *state;
    zp_worksource *ws;
    zp_pipeline *p = make(f, &ws, (size_t)3 << 20, 1);
    zp_memory_plan m;
    assert_int_equal(zp_pipeline_memory_plan(p, &m), ZP_OK);
    size_t cap = (size_t)m.kept_batches;
    assert_true(cap >= ZP_MEMORY_KEPT_MIN);
    const zp_batch *b, *first = NULL;
    for (size_t i = 0; i < cap; i++) {
        assert_int_equal(zp_pipeline_next(p, &b), ZP_OK);
        assert_int_equal(zp_pipeline_keep_batch(p, b), ZP_OK);
        assert_int_equal(zp_pipeline_keep_batch(p, b), ZP_OK); /* twice is once */
        if (!first)
            first = b;
    }
    assert_int_equal(zp_pipeline_kept_batches(p), cap);
    assert_int_equal(zp_pipeline_next(p, &b), ZP_OK);
    assert_int_equal(zp_pipeline_keep_batch(p, b), ZP_ERR_LIMIT);
    assert_non_null(strstr(zp_pipeline_errmsg(p), "zp_pipeline_keep_batch"));
    assert_non_null(strstr(zp_pipeline_errmsg(p), "memory_budget"));
    assert_int_equal(zp_pipeline_kept_batches(p), cap);
    assert_int_equal(zp_pipeline_release_batch(p, first), ZP_OK);
    assert_int_equal(zp_pipeline_keep_batch(p, b), ZP_OK);
    assert_int_equal(zp_pipeline_kept_batches(p), cap);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);

    p = make(f, &ws, 0, 1);
    for (size_t i = 0; i < cap + 5; i++) {
        assert_int_equal(zp_pipeline_next(p, &b), ZP_OK);
        assert_int_equal(zp_pipeline_keep_batch(p, b), ZP_OK);
    }
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
}

/* The scan reads a jsonl.zst shard's decoded size from its frames. */
static void test_budget_scan_zstd_frames(void **state)
{
    fixture *f = *state;
    zpi_budget_shards sh;
    zpi_err e = {0};
    assert_int_equal(zpi_budget_scan(f->ds, &sh, &e), ZP_OK);
    assert_true(sh.decoded);
    assert_false(sh.on_demand);
    assert_true(sh.largest >= f->shard_decoded);
    assert_true(sh.largest < f->shard_decoded + f->shard_decoded / 4); /* not the 8x guess */
    assert_true(sh.largest_index >= 0);
}

/* The arithmetic: caps for an autotuner, the automatic in-flight count
 * giving way, an explicit one refused. */
static void test_budget_arithmetic(void **state)
{
    (void)state;
    zpi_budget_in in = {
        .budget = 0, .rows = 8, .cols = 2049, .chunk_samples = 64, .op_parallelism = 4,
        .n_ops = 2, .fetch_parallelism = 1, .prefetch_batches = 2, .block_shards = 2,
        .shard_cache_bytes = 0,
        .sh = {.largest = 1 << 20, .largest_index = 0, .record_bytes = 4000, .decoded = 1,
               .n_shards = 100},
    };
    zp_memory_plan m;
    zpi_err e = {0};
    assert_int_equal(zpi_budget_max_prefetch_batches(&in), SIZE_MAX);
    assert_int_equal(zpi_budget_plan(&in, &m, &e), ZP_OK);
    assert_int_equal(m.in_flight_chunks, 10);
    assert_int_equal(m.kept_batches, 0);
    const zp_memory_plan m0 = m;

    in.budget = 64ull << 20;
    assert_int_equal(zpi_budget_plan(&in, &m, &e), ZP_OK);
    assert_true(m.total <= in.budget);
    size_t maxpb = zpi_budget_max_prefetch_batches(&in);
    assert_true(maxpb > 2);
    in.prefetch_batches = maxpb;
    assert_int_equal(zpi_budget_plan(&in, &m, &e), ZP_OK);
    in.prefetch_batches = maxpb + 1;
    assert_int_equal(zpi_budget_plan(&in, &m, &e), ZP_ERR_LIMIT);
    in.prefetch_batches = 2;

    /* a tight budget: the automatic in-flight count gives way */
    in.budget = m0.queue_bytes + m0.cache_bytes + ZP_MEMORY_KEPT_MIN * m0.batch_bytes +
                m0.chunks_bytes / 2;
    assert_int_equal(zpi_budget_plan(&in, &m, &e), ZP_OK);
    assert_true(m.in_flight_chunks < 10 && m.in_flight_chunks >= 3);
    /* the same count given explicitly does not */
    in.in_flight_chunks = 10;
    assert_int_equal(zpi_budget_plan(&in, &m, &e), ZP_ERR_LIMIT);
    assert_non_null(strstr(e.msg, "in_flight_chunks = 10 x"));
    size_t maxw = zpi_budget_max_in_flight(&in);
    assert_true(maxw >= 3 && maxw < 10);
    in.in_flight_chunks = maxw;
    assert_int_equal(zpi_budget_plan(&in, &m, &e), ZP_OK);

    /* prefetch doubles the working set */
    in.in_flight_chunks = 0;
    in.budget = 0;
    assert_int_equal(zpi_budget_plan(&in, &m, &e), ZP_OK);
    uint64_t cache0 = m.cache_shards;
    in.prefetch_buffer = 1000;
    in.prefetch_parallelism = 2;
    assert_int_equal(zpi_budget_plan(&in, &m, &e), ZP_OK);
    assert_int_equal(m.cache_shards, 2 * cache0 - 1);
    assert_int_equal(m.cache_loads, 3);
}

/* The caps an autotuner asks the pipeline for: the most prefetch_batches
 * that fit runs, one more is the start error. */
static void test_budget_caps_for_autotuner(void **state)
{
    fixture *f = *state;
    zp_worksource *ws;
    zp_pipeline *p = make(f, &ws, 0, 1);
    size_t pb = 0, w = 0;
    assert_int_equal(zpi_pipeline_budget_caps(p, &pb, &w), ZP_OK);
    assert_int_equal(pb, SIZE_MAX);
    assert_int_equal(w, SIZE_MAX);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);

    p = make(f, &ws, (size_t)3 << 20, 1);
    assert_int_equal(zpi_pipeline_budget_caps(p, &pb, &w), ZP_OK);
    assert_true(pb > 2 && pb < 4096);
    assert_true(w >= 3);
    assert_int_equal(zp_pipeline_options(p, pb + 1), ZP_OK);
    const zp_batch *b;
    assert_int_equal(zp_pipeline_next(p, &b), ZP_ERR_LIMIT);
    assert_non_null(strstr(zp_pipeline_errmsg(p), "prefetch_batches = "));
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);

    p = make(f, &ws, (size_t)3 << 20, 1);
    assert_int_equal(zp_pipeline_options(p, pb), ZP_OK);
    size_t n;
    (void)stream_digest(p, &n);
    assert_true(n > 0);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_budget_arithmetic),
        cmocka_unit_test_setup_teardown(test_budget_scan_zstd_frames, setup, teardown),
        cmocka_unit_test_setup_teardown(test_budget_same_batches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_budget_too_small_names_need, setup, teardown),
        cmocka_unit_test_setup_teardown(test_budget_explicit_setting_named, setup, teardown),
        cmocka_unit_test_setup_teardown(test_budget_kept_batches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_budget_caps_for_autotuner, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
