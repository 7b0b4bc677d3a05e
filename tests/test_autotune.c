/* test_autotune.c - settings set to ZP_AUTO (docs/pipeline.md,
 * "Autotune"): the data never depends on tuning; an automatic parallelism
 * rises where the consumer waits on an operator, and only there; the
 * chosen values and the reasons are in zp_metrics_snapshot.tuned. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "zephon.h"

typedef struct fixture {
    char *dir;
    zp_dataset *ds;
} fixture;

#define N_SHARDS 6
#define PER_SHARD 100

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->dir = zpt_tmpdir();
    assert_non_null(f->dir);
    assert_int_equal(zp_dataset_create(NULL, &f->ds), ZP_OK);
    for (int s = 0; s < N_SHARDS; s++) {
        size_t cap = 1 << 20, len = 0;
        char *buf = malloc(cap);
        for (int i = 0; i < PER_SHARD; i++) {
            len += (size_t)snprintf(buf + len, cap - len, "{\"id\": %d, \"text\": \"  doc %d-%d", i,
                                    s, i);
            for (int r = 0; r < (s * 7 + i * 13) % 40; r++)
                len += (size_t)snprintf(buf + len, cap - len, " word%d,", r);
            len += (size_t)snprintf(buf + len, cap - len, " end.  \"}\n");
        }
        char path[512];
        snprintf(path, sizeof path, "%s/shard-%02d.jsonl", f->dir, s);
        assert_int_equal(zpt_write_file(path, buf, len), 0);
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

static zp_status strip_map(void *user, zp_record *rec)
{
    (void)user;
    (void)rec;
    return ZP_OK;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* A map that holds the pipeline 100 ms on every 200th record (parallelism
 * 1: one call at a time): production in bursts. */
static zp_status hiccup_map(void *user, zp_record *rec)
{
    (void)rec;
    unsigned *calls = user;
    if (++*calls % 200 == 0)
        sleep_s(0.1);
    return ZP_OK;
}

typedef struct run_cfg {
    int threads;
    size_t fetch, map, tok, prefetch; /* a count or ZP_AUTO; map/tok 0: none */
    uint64_t fetch_delay_us;
    double step_seconds; /* the consumer's time per batch */
    size_t max_batches;  /* 0: to the end */
    int hiccups;         /* add hiccup_map (parallelism 1) */
    uint64_t budget;     /* memory_budget, bytes (0: none) */
    uint32_t epochs;     /* 0: 1 */
} run_cfg;

typedef struct run_out {
    uint64_t digest, batches;
    zp_metrics_snapshot m;
} run_out;

static unsigned hiccup_calls;

static zp_pipeline *make(fixture *f, const run_cfg *r, zp_worksource **ws)
{
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.seed = 7;
    assert_int_equal(zp_worksource_create(f->ds, &wc, ws), ZP_OK);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = r->threads;
    pc.fetch_parallelism = r->fetch;
    pc.prefetch_batches = r->prefetch;
    pc.chunk_samples = 8;
    pc.microbatch_size = 8;
    pc.fetch_delay_us = r->fetch_delay_us;
    pc.epochs = r->epochs ? r->epochs : 1;
    pc.memory_budget = r->budget;
    if (r->budget)
        pc.shard_cache_bytes = 1; /* the cache keeps its working set only */
    zp_pipeline *p;
    assert_int_equal(zp_pipeline_create(*ws, &pc, &p), ZP_OK);
    assert_int_equal(zp_pipeline_enable_observability(p), ZP_OK);
    if (r->map)
        assert_int_equal(zp_pipeline_map_transform(p, strip_map, NULL, r->map, "strip"), ZP_OK);
    hiccup_calls = 0;
    if (r->hiccups)
        assert_int_equal(zp_pipeline_map_transform(p, hiccup_map, &hiccup_calls, 1, "hiccup"),
                         ZP_OK);
    if (r->tok) {
        assert_int_equal(zp_pipeline_tokenize(p, "gpt2", "text", r->tok), ZP_OK);
        assert_int_equal(zp_pipeline_pack(p, ZP_PACK_CONCAT, 63), ZP_OK);
    }
    return p;
}

static void run(fixture *f, const run_cfg *r, run_out *o)
{
    zp_worksource *ws;
    zp_pipeline *p = make(f, r, &ws);
    const zp_batch *b;
    zp_status st;
    o->digest = 0;
    o->batches = 0;
    while ((!r->max_batches || o->batches < r->max_batches) &&
           (st = zp_pipeline_next(p, &b)) == ZP_OK) {
        o->digest = o->digest * 1000003u ^ zp_batch_digest(b);
        o->batches++;
        if (r->step_seconds > 0)
            sleep_s(r->step_seconds);
    }
    if (!r->max_batches)
        assert_int_equal(st, ZP_END);
    assert_int_equal(zp_pipeline_metrics_snapshot(p, &o->m), ZP_OK);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
}

/* The entry of zp_metrics_snapshot.tuned for op ("output": prefetch_batches). */
static const zp_tuned_setting *tuned(const zp_metrics_snapshot *m, const char *op)
{
    for (uint32_t i = 0; i < m->n_tuned; i++)
        if (!strcmp(m->tuned[i].op, op))
            return &m->tuned[i];
    fail_msg("no tuned entry for '%s'", op);
    return NULL;
}

/* ------------------------------------------------------------ tests */

static void test_autotune_settings(void **state)
{
    fixture *f = *state;
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    assert_true(pc.fetch_parallelism == ZP_AUTO);
    assert_true(pc.prefetch_batches == ZP_AUTO);
    run_cfg r = {.threads = 2, .fetch = ZP_AUTO, .map = ZP_AUTO, .tok = ZP_AUTO,
                 .prefetch = ZP_AUTO};
    zp_worksource *ws;
    zp_pipeline *p = make(f, &r, &ws);
    /* a count of 0 is still refused, and so is one past 1024 */
    assert_int_equal(zp_pipeline_fetch(p, 0), ZP_ERR_INVALID);
    assert_non_null(strstr(zp_pipeline_errmsg(p), "or ZP_AUTO"));
    assert_int_equal(zp_pipeline_fetch(p, 1025), ZP_ERR_INVALID);
    assert_int_equal(zp_pipeline_fetch(p, ZP_AUTO), ZP_OK);
    /* before the first next(): the starting values, marked automatic */
    zp_metrics_snapshot m;
    assert_int_equal(zp_pipeline_metrics_snapshot(p, &m), ZP_OK);
    assert_int_equal(m.n_tuned, 4);
    assert_string_equal(m.tuned[0].setting, "prefetch_batches");
    assert_int_equal(m.tuned[0].is_auto, 1);
    assert_int_equal(m.tuned[0].value, 8); /* ZPI_PREFETCH_AUTO_START */
    const char *ops[] = {"fetch", "strip", "tokenize"};
    for (int i = 0; i < 3; i++) {
        assert_string_equal(m.tuned[i + 1].op, ops[i]);
        assert_string_equal(m.tuned[i + 1].setting, "parallelism");
        assert_int_equal(m.tuned[i + 1].is_auto, 1);
        assert_int_equal(m.tuned[i + 1].value, 1);
    }
    /* started: the caps are the team's threads */
    const zp_batch *b;
    assert_int_equal(zp_pipeline_next(p, &b), ZP_OK);
    assert_int_equal(zp_pipeline_metrics_snapshot(p, &m), ZP_OK);
    for (int i = 1; i < 4; i++)
        assert_int_equal(m.tuned[i].cap, 2);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);

    /* fixed values are reported as they are */
    run_cfg fx = {.threads = 2, .fetch = 3, .tok = 2, .prefetch = 5};
    run_out o;
    fx.max_batches = 3;
    run(f, &fx, &o);
    assert_int_equal(tuned(&o.m, "output")->value, 5);
    assert_int_equal(tuned(&o.m, "output")->is_auto, 0);
    assert_int_equal(tuned(&o.m, "fetch")->value, 3);
    assert_int_equal(tuned(&o.m, "fetch")->is_auto, 0);
    assert_int_equal(tuned(&o.m, "tokenize")->value, 2);
    assert_string_equal(tuned(&o.m, "tokenize")->why, "");
}

/* Fetch slowed down (fault injection): the consumer waits, chunks queue for
 * fetch, so automatic fetch parallelism rises to its cap. */
static void test_autotune_raises_fetch_when_it_holds_the_consumer(void **state)
{
    fixture *f = *state;
    run_cfg r = {.threads = 2, .fetch = ZP_AUTO, .tok = 1, .prefetch = 2,
                 .fetch_delay_us = 10000};
    run_out o;
    run(f, &r, &o);
    const zp_tuned_setting *t = tuned(&o.m, "fetch");
    assert_int_equal(t->is_auto, 1);
    assert_int_equal(t->cap, 2);
    assert_int_equal(t->value, 2);
    assert_non_null(strstr(t->why, "raised 1 -> 2"));
    /* the same settings fixed at 1: nothing moves */
    r.fetch = 1;
    run(f, &r, &o);
    assert_int_equal(tuned(&o.m, "fetch")->value, 1);
}

/* A consumer slower than the pipeline (a long step): the loop never waits,
 * so nothing is added even though fetch is the slowest operator. */
static void test_autotune_keeps_when_the_pipeline_keeps_up(void **state)
{
    fixture *f = *state;
    run_cfg r = {.threads = 2, .fetch = ZP_AUTO, .prefetch = 2, .fetch_delay_us = 500,
                 .step_seconds = 0.03, .max_batches = 25};
    run_out o;
    run(f, &r, &o);
    const zp_tuned_setting *t = tuned(&o.m, "fetch");
    assert_int_equal(t->is_auto, 1);
    assert_int_equal(t->value, 1);
    assert_non_null(strstr(t->why, "kept 1"));
}

/* Production in bursts (a map that stalls 100 ms every 25 batches, fast in
 * between) against a consumer at 5 ms a batch, about 80% of the
 * pipeline's mean rate: with the 8 batches an automatic queue starts with
 * (40 ms of the consumer's steps) the consumer waits at each burst while
 * the packer waits for room between them, so automatic prefetch_batches
 * deepens; fixed at 2 it stays. */
static void test_autotune_deepens_the_output_queue_for_bursts(void **state)
{
    fixture *f = *state;
    run_cfg r = {.threads = 2, .fetch = 1, .prefetch = ZP_AUTO, .hiccups = 1,
                 .step_seconds = 0.005, .epochs = 2};
    run_out o;
    run(f, &r, &o);
    const zp_tuned_setting *t = tuned(&o.m, "output");
    assert_int_equal(t->is_auto, 1);
    assert_true(t->value > 2);
    assert_true(t->value <= t->cap);
    assert_non_null(strstr(t->why, "raised"));
    r.prefetch = 2;
    run(f, &r, &o);
    assert_int_equal(tuned(&o.m, "output")->value, 2);
}

/* The chunks in flight follow the tuned parallelism (in_flight_chunks 0):
 * a consumer that stops after one batch leaves 2 x (1 + 1) + 2 = 6 chunks in
 * flight, not the 2 x (2 + 1) + 2 = 8 of fetch's cap; with fetch fixed at 2,
 * 8. */
static void test_autotune_chunks_in_flight_follow_parallelism(void **state)
{
    fixture *f = *state;
    for (int k = 0; k < 2; k++) {
        run_cfg r = {.threads = 2, .fetch = k ? 2 : ZP_AUTO, .tok = 1, .prefetch = 2};
        zp_worksource *ws;
        zp_pipeline *p = make(f, &r, &ws);
        const zp_batch *b;
        assert_int_equal(zp_pipeline_next(p, &b), ZP_OK);
        sleep_s(0.3); /* the pipeline fills up and waits */
        zp_watchdog_report *w = calloc(1, sizeof *w);
        assert_non_null(w);
        assert_int_equal(zp_pipeline_activity(p, w), ZP_OK);
        assert_int_equal(w->chunks_in_flight, k ? 8 : 6);
        free(w);
        zp_pipeline_destroy(p);
        zp_worksource_destroy(ws);
    }
}

/* Under a memory budget the automatic prefetch_batches grows only into
 * what the budget's plan left unassigned (the kept batches and the shard
 * cache keep their room): its cap is 2 + that room in batches, well under
 * the 64 it has without a budget; the data is the same. */
static void test_autotune_caps_within_the_memory_budget(void **state)
{
    fixture *f = *state;
    run_cfg r = {.threads = 2, .fetch = ZP_AUTO, .tok = ZP_AUTO, .prefetch = ZP_AUTO};
    run_out free_run, o;
    run(f, &r, &free_run);
    assert_int_equal(tuned(&free_run.m, "output")->cap, 64);
    r.budget = 1ull << 30;
    run(f, &r, &o);
    const zp_memory_plan *mp = &o.m.memory;
    assert_true(mp->total > 0 && mp->total <= mp->budget && mp->batch_bytes > 0);
    const zp_tuned_setting *t = tuned(&o.m, "output");
    assert_true(t->cap >= 2 && t->cap < 64);
    assert_true(t->cap <= 2 + (mp->budget - mp->total) / mp->batch_bytes);
    assert_true(t->value <= t->cap);
    assert_true(o.digest == free_run.digest);
}

/* The data never depends on tuning: every setting automatic (with fetch
 * slowed so that tuning moves) gives the digests of fixed settings, at 1
 * and 2 threads. */
static void test_autotune_digests_equal_auto_and_fixed(void **state)
{
    fixture *f = *state;
    run_cfg fixed = {.threads = 1, .fetch = 1, .map = 1, .tok = 1, .prefetch = 2};
    run_out ref, o;
    run(f, &fixed, &ref);
    assert_true(ref.batches > 10);
    for (int threads = 1; threads <= 2; threads++) {
        run_cfg a = {.threads = threads, .fetch = ZP_AUTO, .map = ZP_AUTO, .tok = ZP_AUTO,
                     .prefetch = ZP_AUTO, .fetch_delay_us = 5000};
        run(f, &a, &o);
        assert_int_equal(o.batches, ref.batches);
        assert_true(o.digest == ref.digest);
        if (threads == 2) /* tuning did move something during that run */
            assert_int_equal(tuned(&o.m, "fetch")->value, 2);
        run_cfg fx = {.threads = threads, .fetch = 2, .map = 2, .tok = 2, .prefetch = 7};
        run(f, &fx, &o);
        assert_true(o.digest == ref.digest);
    }
    /* records (no tokenize) too */
    run_cfg rec = {.threads = 1, .fetch = 1, .prefetch = 2};
    run(f, &rec, &ref);
    run_cfg rec_auto = {.threads = 2, .fetch = ZP_AUTO, .map = ZP_AUTO, .prefetch = ZP_AUTO,
                        .fetch_delay_us = 5000};
    run(f, &rec_auto, &o);
    assert_true(o.digest == ref.digest);
    assert_int_equal(tuned(&o.m, "fetch")->value, 2);
}

/* The automatic prefetch look-ahead: shards whose loads take fetch's time
 * (jsonl.zst, shuffle blocks of one shard, a cache that keeps only its
 * working set, 2 epochs, a consumer that never waits on its own) make the
 * tuner start the look-ahead, and the batches are those of a run without
 * it. */
static void test_autotune_prefetch_look_ahead(void **state)
{
    (void)state;
    char *dir = zpt_tmpdir();
    assert_non_null(dir);
    zp_dataset *ds;
    assert_int_equal(zp_dataset_create(NULL, &ds), ZP_OK);
    const size_t cap = 4u << 20;
    char *buf = malloc(cap);
    assert_non_null(buf);
    uint64_t x = 88172645463325252ull;
    for (int sh = 0; sh < 10; sh++) {
        size_t len = 0;
        for (int i = 0; i < 2500; i++) {
            len += (size_t)snprintf(buf + len, cap - len, "{\"id\": %d, \"text\": \"", i);
            for (int w = 0; w < 120; w++) { /* words of a xorshift: little to compress */
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                len += (size_t)snprintf(buf + len, cap - len, "%c%llx", w ? ' ' : 'w',
                                        (unsigned long long)(x & 0xfffff));
            }
            len += (size_t)snprintf(buf + len, cap - len, "\"}\n");
        }
        char path[512];
        snprintf(path, sizeof path, "%s/big-%02d.jsonl.zst", dir, sh);
        assert_int_equal(zpt_write_zst(path, buf, len, 1), 0);
        assert_int_equal(zp_dataset_add(ds, path), ZP_OK);
    }
    free(buf);
    assert_int_equal(zp_dataset_index(ds), ZP_OK);
    uint64_t digest[2] = {0, 0};
    zp_metrics_snapshot *m = calloc(1, sizeof *m);
    assert_non_null(m);
    for (int k = 0; k < 2; k++) {
        zp_worksource_config wc;
        zp_worksource_config_init(&wc);
        wc.seed = 3;
        wc.shuffle_block_shards = 1;
        zp_worksource *ws;
        assert_int_equal(zp_worksource_create(ds, &wc, &ws), ZP_OK);
        zp_pipeline_config pc;
        zp_pipeline_config_init(&pc);
        pc.threads = 2;
        pc.fetch_parallelism = 1;
        pc.epochs = 2;
        pc.microbatch_size = 16;
        pc.shard_cache_bytes = 1; /* the working set only: every shard loaded per epoch */
        zp_pipeline *p;
        assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_OK);
        assert_int_equal(zp_pipeline_enable_observability(p), ZP_OK);
        if (k == 1)
            assert_int_equal(zp_pipeline_prefetch(p, ZP_AUTO, ZP_AUTO), ZP_OK);
        const zp_batch *b;
        zp_status st;
        while ((st = zp_pipeline_next(p, &b)) == ZP_OK)
            digest[k] = digest[k] * 1000003u ^ zp_batch_digest(b);
        assert_int_equal(st, ZP_END);
        assert_int_equal(zp_pipeline_metrics_snapshot(p, m), ZP_OK);
        const zp_tuned_setting *la = NULL, *lp = NULL;
        for (uint32_t i = 0; i < m->n_tuned; i++)
            if (!strcmp(m->tuned[i].op, "prefetch"))
                *(strcmp(m->tuned[i].setting, "look_ahead") ? &lp : &la) = &m->tuned[i];
        if (k == 0) {
            assert_null(la); /* no look-ahead set: none listed */
        } else {
            assert_non_null(la);
            assert_non_null(lp);
            assert_true(la->is_auto && lp->is_auto);
            print_message("# look-ahead %u (cap %u), tasks %u (cap %u): %s\n", la->value, la->cap,
                          lp->value, lp->cap, la->why);
            assert_true(la->value > 0);
            assert_true(la->value <= la->cap);
            assert_non_null(strstr(la->why, "raised look-ahead"));
        }
        zp_pipeline_destroy(p);
        zp_worksource_destroy(ws);
    }
    assert_true(digest[0] == digest[1]);
    free(m);
    zp_dataset_destroy(ds);
    zpt_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_autotune_settings),
        cmocka_unit_test(test_autotune_raises_fetch_when_it_holds_the_consumer),
        cmocka_unit_test(test_autotune_keeps_when_the_pipeline_keeps_up),
        cmocka_unit_test(test_autotune_deepens_the_output_queue_for_bursts),
        cmocka_unit_test(test_autotune_chunks_in_flight_follow_parallelism),
        cmocka_unit_test(test_autotune_caps_within_the_memory_budget),
        cmocka_unit_test(test_autotune_digests_equal_auto_and_fixed),
        cmocka_unit_test(test_autotune_prefetch_look_ahead),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
