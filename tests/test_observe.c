/* test_observe.c - observability: histograms, exact counters, the stall
 * figure, the JSON renderings. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "zephon.h"

/* ------------------------------------------------------------ histograms */

static uint64_t rng(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ULL;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void test_hist_buckets_cover_values(void **state)
{
    (void)state;
    uint64_t s = 1;
    for (int i = 0; i < 200000; i++) {
        uint64_t v = rng(&s) >> (rng(&s) % 64);
        if (v >= (1ull << 48))
            continue;
        size_t b = zp_hist_bucket(v);
        uint64_t lo, hi;
        zp_hist_bucket_range(b, &lo, &hi);
        assert_true(lo <= v && v <= hi);
        /* relative width within 1/16 */
        assert_true((double)(hi - lo) <= (double)lo / 16.0 + 1.0);
    }
    for (uint64_t v = 0; v < 4096; v++) { /* buckets are monotone */
        assert_true(zp_hist_bucket(v) <= zp_hist_bucket(v + 1));
    }
    assert_int_equal(zp_hist_bucket(UINT64_MAX), ZP_HIST_BUCKETS - 1);
}

static void test_hist_quantiles_of_known_inputs(void **state)
{
    (void)state;
    zp_hist *h = malloc(sizeof *h);
    zp_hist_init(h);
    assert_int_equal(zp_hist_quantile(h, 0.5), 0);
    for (uint64_t v = 1; v <= 100000; v++)
        zp_hist_record(h, v * 1000); /* 1 us .. 100 ms */
    assert_int_equal(h->count, 100000);
    assert_int_equal(h->min_ns, 1000);
    assert_int_equal(h->max_ns, 100000000);
    const double qs[] = {0.5, 0.9, 0.99, 0.999};
    for (size_t i = 0; i < 4; i++) {
        double want = qs[i] * 100000 * 1000;
        double got = (double)zp_hist_quantile(h, qs[i]);
        assert_true(got >= want * 0.999);
        assert_true(got <= want * (1 + 1.0 / 16) + 1);
    }
    assert_int_equal(zp_hist_quantile(h, 1.0), 100000000);
    /* a single value: every quantile is that value */
    zp_hist_init(h);
    zp_hist_record(h, 123456);
    assert_int_equal(zp_hist_quantile(h, 0.5), 123456);
    assert_int_equal(zp_hist_quantile(h, 0.99), 123456);
    free(h);
}

static void test_hist_merge_equals_union(void **state)
{
    (void)state;
    zp_hist *a = malloc(sizeof *a), *b = malloc(sizeof *b), *u = malloc(sizeof *u);
    zp_hist_init(a);
    zp_hist_init(b);
    zp_hist_init(u);
    uint64_t s = 7;
    for (int i = 0; i < 50000; i++) {
        uint64_t v = rng(&s) % 10000000;
        zp_hist_record(i % 3 ? a : b, v);
        zp_hist_record(u, v);
    }
    zp_hist_merge(a, b);
    assert_memory_equal(a, u, sizeof *a);
    for (double q = 0.01; q < 1; q += 0.07)
        assert_int_equal(zp_hist_quantile(a, q), zp_hist_quantile(u, q));
    free(a);
    free(b);
    free(u);
}

/* ------------------------------------------------------------ pipelines */

typedef struct fixture {
    char *dir;
    zp_dataset *ds;
    uint64_t total, file_bytes, record_bytes;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->dir = zpt_tmpdir();
    assert_int_equal(zp_dataset_create(NULL, &f->ds), ZP_OK);
    for (int s = 0; s < 4; s++) {
        char *buf = malloc(1 << 20);
        size_t len = 0;
        int n = 50 + s * 30;
        for (int i = 0; i < n; i++) {
            int w = sprintf(buf + len, "{\"text\": \"shard %d record %d %.*s\"}\n", s, i, i % 40,
                            "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz");
            f->record_bytes += (uint64_t)w - 1;
            len += (size_t)w;
        }
        char path[512];
        snprintf(path, sizeof path, "%s/s%d.jsonl%s", f->dir, s, s % 2 ? ".zst" : "");
        if (s % 2)
            assert_int_equal(zpt_write_zst(path, buf, len, 2), 0);
        else
            assert_int_equal(zpt_write_file(path, buf, len), 0);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        f->file_bytes += (uint64_t)st.st_size;
        f->total += (uint64_t)n;
        assert_int_equal(zp_dataset_add(f->ds, path), ZP_OK);
        free(buf);
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

static long map_sleep_us;

static zp_status slow_map(void *user, zp_record *rec)
{
    (void)user;
    (void)rec;
    if (map_sleep_us)
        usleep((useconds_t)map_sleep_us);
    return ZP_OK;
}

static zp_pipeline *make(fixture *f, zp_worksource **ws, int map, size_t microbatch)
{
    assert_int_equal(zp_worksource_create(f->ds, NULL, ws), ZP_OK);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = 2;
    pc.chunk_samples = 8;
    pc.microbatch_size = microbatch;
    zp_pipeline *p;
    assert_int_equal(zp_pipeline_create(*ws, &pc, &p), ZP_OK);
    if (map)
        assert_int_equal(zp_pipeline_map_transform(p, slow_map, NULL, 1, "slow"), ZP_OK);
    return p;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static void test_observe_off_by_default_and_only_before_start(void **state)
{
    fixture *f = *state;
    zp_worksource *ws;
    zp_pipeline *p = make(f, &ws, 0, 4);
    zp_metrics_snapshot *m = malloc(sizeof *m);
    assert_int_equal(zp_pipeline_metrics_snapshot(p, m), ZP_ERR_STATE);
    const zp_batch *b;
    assert_int_equal(zp_pipeline_next(p, &b), ZP_OK);
    assert_int_equal(zp_pipeline_enable_observability(p), ZP_ERR_STATE);
    free(m);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
}

static void test_observe_counters_exact(void **state)
{
    fixture *f = *state;
    map_sleep_us = 0;
    zp_worksource *ws;
    zp_pipeline *p = make(f, &ws, 1, 5);
    assert_int_equal(zp_pipeline_enable_observability(p), ZP_OK);
    const zp_batch *b;
    uint64_t batches = 0, rows = 0, bytes = 0;
    while (zp_pipeline_next(p, &b) == ZP_OK) {
        batches++;
        rows += b->rows;
        bytes += b->offsets[b->rows];
    }
    zp_metrics_snapshot *m = malloc(sizeof *m);
    zp_fetch_timing *ft = malloc(sizeof *ft);
    zp_prefetch_timing *pt = malloc(sizeof *pt);
    assert_int_equal(zp_pipeline_metrics_snapshot(p, m), ZP_OK);
    assert_int_equal(zp_pipeline_fetch_timing_snapshot(p, ft), ZP_OK);
    assert_int_equal(zp_pipeline_prefetch_timing_snapshot(p, pt), ZP_OK);
    assert_int_equal(rows, f->total);
    assert_int_equal(m->batches, batches);
    assert_int_equal(m->samples, f->total);
    assert_int_equal(m->n_ops, 3); /* fetch, slow, batch */
    /* without a mixture: one part of weight 1 holding every sample */
    assert_int_equal(m->parts_total, 1);
    assert_int_equal(m->n_parts, 1);
    assert_true(m->parts[0].weight == 1.0);
    assert_int_equal(m->parts[0].samples, f->total);
    assert_true(m->parts[0].sample_fraction == 1.0);
    assert_string_equal(m->ops[0].name, "fetch");
    assert_string_equal(m->ops[1].name, "slow");
    assert_string_equal(m->ops[2].name, "batch");
    for (int i = 0; i < 3; i++) {
        assert_int_equal(m->ops[i].items_in, f->total);
        assert_int_equal(m->ops[i].items_out, f->total);
        assert_true(m->ops[i].busy_seconds >= 0);
    }
    assert_int_equal(ft->records, f->total);
    assert_int_equal(ft->bytes_uncompressed, f->record_bytes);
    assert_int_equal(bytes, f->record_bytes);
    assert_int_equal(ft->shards_opened + pt->downloads, 4);
    assert_int_equal(ft->bytes_compressed + pt->bytes, f->file_bytes);
    assert_int_equal(ft->open_ns.count, ft->shards_opened);
    assert_int_equal(ft->record_ns.count, f->total);
    assert_true(ft->slowest_shard >= 0 && ft->slowest_shard < 4);
    assert_true(ft->open_seconds >= ft->decompress_seconds);
    assert_true(pt->cache_misses >= 4);
    free(m);
    free(ft);
    free(pt);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
}

static double run_stall(fixture *f, long map_us, double consumer_s)
{
    map_sleep_us = map_us;
    zp_worksource *ws;
    zp_pipeline *p = make(f, &ws, 1, 4);
    assert_int_equal(zp_pipeline_enable_observability(p), ZP_OK);
    const zp_batch *b;
    int n = 0;
    while (n < 30 && zp_pipeline_next(p, &b) == ZP_OK) {
        if (consumer_s > 0)
            sleep_s(consumer_s);
        n++;
    }
    zp_metrics_snapshot *m = malloc(sizeof *m);
    assert_int_equal(zp_pipeline_metrics_snapshot(p, m), ZP_OK);
    double frac = m->stall_fraction;
    assert_true(m->stall_seconds >= 0);
    assert_true(m->time_to_first_batch > 0);
    free(m);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    map_sleep_us = 0;
    return frac;
}

static void test_observe_stall_large_when_transform_slow(void **state)
{
    /* 2 ms per record, 4 records per batch, fast consumer: the consumer waits
     * for nearly all of its time */
    double frac = run_stall(*state, 2000, 0);
    assert_true(frac > 0.8);
}

static void test_observe_stall_small_when_consumer_slow(void **state)
{
    /* fast pipeline, 20 ms per training step: data is always ready */
    double frac = run_stall(*state, 0, 0.02);
    assert_true(frac < 0.05);
}

static void expect_keys(json_t *o, const char *const *keys)
{
    for (size_t i = 0; keys[i]; i++) {
        if (!json_object_get(o, keys[i]))
            fail_msg("missing field '%s'", keys[i]);
    }
}

static void test_observe_json_has_every_documented_field(void **state)
{
    fixture *f = *state;
    zp_worksource *ws;
    zp_pipeline *p = make(f, &ws, 1, 4);
    assert_int_equal(zp_pipeline_enable_observability(p), ZP_OK);
    const zp_batch *b;
    while (zp_pipeline_next(p, &b) == ZP_OK) {
    }
    zp_metrics_snapshot *m = malloc(sizeof *m);
    zp_fetch_timing *ft = malloc(sizeof *ft);
    zp_prefetch_timing *pt = malloc(sizeof *pt);
    assert_int_equal(zp_pipeline_metrics_snapshot(p, m), ZP_OK);
    assert_int_equal(zp_pipeline_fetch_timing_snapshot(p, ft), ZP_OK);
    assert_int_equal(zp_pipeline_prefetch_timing_snapshot(p, pt), ZP_OK);
    char *s;
    json_error_t err;

    assert_int_equal(zp_metrics_json(m, &s), ZP_OK);
    json_t *j = json_loads(s, 0, &err);
    assert_non_null(j);
    static const char *const mk[] = {"snapshot", "wall_seconds", "time_to_first_batch", "batches",
                                     "samples", "tokens", "stall_seconds", "stall_fraction",
                                     "batches_per_second", "samples_per_second", "threads",
                                     "operators", "parts", "parts_total", NULL};
    expect_keys(j, mk);
    json_t *ops = json_object_get(j, "operators");
    assert_int_equal(json_array_size(ops), 3);
    static const char *const ok[] = {"name", "parallelism", "items_in", "items_out",
                                     "busy_seconds", "starved_seconds", "blocked_seconds",
                                     "queue_now", "queue_mean", "queue_max", "items_per_second",
                                     "utilization", NULL};
    for (size_t i = 0; i < 3; i++)
        expect_keys(json_array_get(ops, i), ok);
    assert_int_equal(json_integer_value(json_object_get(j, "samples")), (json_int_t)f->total);
    json_decref(j);
    free(s);

    assert_int_equal(zp_fetch_timing_json(ft, &s), ZP_OK);
    j = json_loads(s, 0, &err);
    assert_non_null(j);
    static const char *const fk[] = {"snapshot", "shards_opened", "open_seconds", "read_seconds",
                                     "decompress_seconds", "wait_seconds", "fetch_seconds",
                                     "bytes_compressed", "bytes_uncompressed", "records",
                                     "shard_open", "record_read", "slowest_shard",
                                     "slowest_shard_seconds", NULL};
    expect_keys(j, fk);
    static const char *const hk[] = {"count", "mean_s", "p50_s", "p90_s", "p99_s", "max_s", "min_s",
                                     NULL};
    expect_keys(json_object_get(j, "shard_open"), hk);
    expect_keys(json_object_get(j, "record_read"), hk);
    json_decref(j);
    free(s);

    assert_int_equal(zp_prefetch_timing_json(pt, &s), ZP_OK);
    j = json_loads(s, 0, &err);
    assert_non_null(j);
    static const char *const pk[] = {"snapshot", "downloads", "bytes", "latency", "retries",
                                     "cache_hits", "cache_misses", "cache_evictions",
                                     "cache_bytes", "wait_seconds", NULL};
    expect_keys(j, pk);
    expect_keys(json_object_get(j, "latency"), hk);
    json_decref(j);
    free(s);
    free(m);
    free(ft);
    free(pt);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
}

/* ------------------------------------------------------------ mixture parts */

/* The snapshot's parts against counts made from the delivered batches:
 * equal per part, summing to the snapshot's samples, each within 2
 * samples of its weight's share (the quota schedule keeps every prefix
 * within one sample of it). */
static void check_parts(const zp_metrics_snapshot *m, const uint64_t *seen, const char *const *names,
                        const double *w)
{
    assert_int_equal(m->parts_total, 3);
    assert_int_equal(m->n_parts, 3);
    uint64_t sum = 0;
    double fsum = 0;
    for (int i = 0; i < 3; i++) {
        const zp_part_metrics *pm = &m->parts[i];
        assert_string_equal(pm->name, names[i]);
        assert_true(fabs(pm->weight - w[i]) < 1e-9);
        assert_int_equal(pm->samples, seen[i]);
        sum += pm->samples;
        fsum += pm->sample_fraction;
        double want = w[i] * (double)m->samples;
        if (fabs((double)pm->samples - want) > 2.0)
            fail_msg("part %d: %llu samples of %llu, weight %.2f wants %.1f", i,
                     (unsigned long long)pm->samples, (unsigned long long)m->samples, w[i], want);
        if (m->samples)
            assert_true(fabs(pm->sample_fraction - (double)pm->samples / (double)m->samples) <
                        1e-12);
    }
    assert_int_equal(sum, m->samples);
    if (m->samples)
        assert_true(fabs(fsum - 1.0) < 1e-9);
}

static void test_observe_mixture_parts(void **state)
{
    fixture *f = *state;
    static const char *const names[3] = {"web", "code", "books"};
    const double w[3] = {0.5, 0.3, 0.2};
    /* shards 0-1 (130 samples), 2 (110), 3 (140): weights 5:3:2 */
    zp_mix_part parts[3] = {{names[0], 2, 5}, {names[1], 1, 3}, {names[2], 1, 2}};
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.seed = 3;
    wc.parts = parts;
    wc.n_parts = 3;
    zp_worksource *ws;
    assert_int_equal(zp_worksource_create(f->ds, &wc, &ws), ZP_OK);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = 2;
    pc.chunk_samples = 8;
    pc.microbatch_size = 5;
    zp_pipeline *p;
    assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_OK);
    assert_int_equal(zp_pipeline_enable_observability(p), ZP_OK);
    zp_metrics_snapshot *m = malloc(sizeof *m);
    uint64_t seen[3] = {0, 0, 0};
    /* before the first batch: the parts with zero counts */
    assert_int_equal(zp_pipeline_metrics_snapshot(p, m), ZP_OK);
    check_parts(m, seen, names, w);
    const zp_batch *b;
    uint64_t batches = 0;
    while (zp_pipeline_next(p, &b) == ZP_OK) {
        for (size_t i = 0; i < b->n_samples; i++) {
            assert_true(b->samples[i].part < 3);
            seen[b->samples[i].part]++;
        }
        if (++batches % 13 == 0) { /* mid-run */
            assert_int_equal(zp_pipeline_metrics_snapshot(p, m), ZP_OK);
            check_parts(m, seen, names, w);
        }
    }
    assert_int_equal(zp_pipeline_metrics_snapshot(p, m), ZP_OK);
    assert_int_equal(m->samples, f->total);
    check_parts(m, seen, names, w);

    /* the JSON rendering */
    char *s;
    json_error_t err;
    assert_int_equal(zp_metrics_json(m, &s), ZP_OK);
    json_t *j = json_loads(s, 0, &err);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "parts_total")), 3);
    json_t *ja = json_object_get(j, "parts");
    assert_int_equal(json_array_size(ja), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *o = json_array_get(ja, i);
        static const char *const pk[] = {"name", "weight", "samples", "tokens",
                                         "sample_fraction", "token_fraction", NULL};
        expect_keys(o, pk);
        assert_string_equal(json_string_value(json_object_get(o, "name")), names[i]);
        assert_int_equal(json_integer_value(json_object_get(o, "samples")), (json_int_t)seen[i]);
        assert_true(fabs(json_real_value(json_object_get(o, "weight")) - w[i]) < 1e-9);
    }
    json_decref(j);
    free(s);
    zp_pipeline_destroy(p);

    /* tokens: packed rows; the parts' tokens sum to the delivered tokens */
    zp_worksource_destroy(ws);
    assert_int_equal(zp_worksource_create(f->ds, &wc, &ws), ZP_OK);
    assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_OK);
    assert_int_equal(zp_pipeline_tokenize(p, "gpt2", "text", 2), ZP_OK);
    assert_int_equal(zp_pipeline_pack(p, ZP_PACK_CONCAT, 32), ZP_OK);
    assert_int_equal(zp_pipeline_enable_observability(p), ZP_OK);
    while (zp_pipeline_next(p, &b) == ZP_OK) {
    }
    assert_int_equal(zp_pipeline_metrics_snapshot(p, m), ZP_OK);
    uint64_t tsum = 0;
    double tf = 0;
    for (int i = 0; i < 3; i++) {
        assert_true(m->parts[i].tokens > 0);
        tsum += m->parts[i].tokens;
        tf += m->parts[i].token_fraction;
    }
    assert_true(m->tokens > 0);
    assert_int_equal(tsum, m->tokens);
    assert_true(fabs(tf - 1.0) < 1e-9);
    free(m);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
}

static uint64_t stream_hash(zp_pipeline *p)
{
    const zp_batch *b;
    uint64_t h = 1469598103934665603ull;
    while (zp_pipeline_next(p, &b) == ZP_OK) {
        for (size_t i = 0; i < b->offsets[b->rows]; i++)
            h = (h ^ (unsigned char)b->data[i]) * 1099511628211ull;
        h = (h ^ b->rows) * 1099511628211ull;
    }
    return h;
}

static void test_prefetch_loads_ahead_and_keeps_output(void **state)
{
    fixture *f = *state;
    zp_worksource *ws;
    zp_pipeline *p = make(f, &ws, 0, 4);
    uint64_t ref = stream_hash(p);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);

    /* look ahead over the whole dataset with 2 prefetch tasks; then a cache
     * too small to hold two shards (evictions, reloads) */
    for (int small = 0; small <= 1; small++) {
        assert_int_equal(zp_worksource_create(f->ds, NULL, &ws), ZP_OK);
        zp_pipeline_config pc;
        zp_pipeline_config_init(&pc);
        pc.threads = 2;
        pc.chunk_samples = 8;
        pc.microbatch_size = 4;
        if (small)
            pc.shard_cache_bytes = 1;
        assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_OK);
        assert_int_equal(zp_pipeline_prefetch(p, 1000, 2), ZP_OK);
        assert_int_equal(zp_pipeline_enable_observability(p), ZP_OK);
        assert_int_equal(stream_hash(p), ref);
        zp_fetch_timing *ft = malloc(sizeof *ft);
        zp_prefetch_timing *pt = malloc(sizeof *pt);
        assert_int_equal(zp_pipeline_fetch_timing_snapshot(p, ft), ZP_OK);
        assert_int_equal(zp_pipeline_prefetch_timing_snapshot(p, pt), ZP_OK);
        assert_true(pt->downloads >= 1);
        assert_int_equal(pt->latency_ns.count, pt->downloads);
        if (!small) {
            /* every shard loaded exactly once, by prefetch or by fetch */
            assert_int_equal(ft->shards_opened + pt->downloads, 4);
            assert_int_equal(pt->cache_evictions, 0);
        } else {
            /* the cache keeps the shuffle block's shards beyond its budget:
             * still each decoded once */
            assert_int_equal(ft->shards_opened + pt->downloads, 4);
        }
        free(ft);
        free(pt);
        zp_pipeline_destroy(p);
        zp_worksource_destroy(ws);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hist_buckets_cover_values),
        cmocka_unit_test(test_hist_quantiles_of_known_inputs),
        cmocka_unit_test(test_hist_merge_equals_union),
        cmocka_unit_test(test_observe_off_by_default_and_only_before_start),
        cmocka_unit_test(test_observe_counters_exact),
        cmocka_unit_test(test_observe_stall_large_when_transform_slow),
        cmocka_unit_test(test_observe_stall_small_when_consumer_slow),
        cmocka_unit_test(test_observe_json_has_every_documented_field),
        cmocka_unit_test(test_prefetch_loads_ahead_and_keeps_output),
        cmocka_unit_test(test_observe_mixture_parts),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
