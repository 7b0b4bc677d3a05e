/* test_pipeline.c - the pipeline engine: exactly-once, determinism across
 * threads and parallelism, backpressure, shutdown, errors in stream order,
 * skip policy, epochs, resume, token packing. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "testutil.h"
#include "zephon.h"

/* ------------------------------------------------------------ fixtures */

typedef struct fixture {
    char *dir;
    zp_dataset *ds;
    uint64_t total;
} fixture;

/* Shards of uneven sizes; record text varies in length and content. */
static const size_t SHARD_SIZES[] = {1, 37, 200, 5, 411, 64, 2};
#define N_SHARDS (sizeof SHARD_SIZES / sizeof SHARD_SIZES[0])

static void make_dataset(fixture *f, int zst)
{
    f->dir = zpt_tmpdir();
    assert_non_null(f->dir);
    assert_int_equal(zp_dataset_create(NULL, &f->ds), ZP_OK);
    f->total = 0;
    for (size_t s = 0; s < N_SHARDS; s++) {
        size_t cap = 1 << 16, len = 0;
        char *buf = malloc(cap);
        for (size_t i = 0; i < SHARD_SIZES[s]; i++) {
            if (len + 512 > cap)
                buf = realloc(buf, cap *= 2);
            int reps = (int)((s * 7 + i * 13) % 20);
            len += (size_t)sprintf(buf + len, "{\"id\": %zu, \"text\": \"  doc %zu-%zu", i, s, i);
            for (int r = 0; r < reps; r++)
                len += (size_t)sprintf(buf + len, " word%d,", r);
            len += (size_t)sprintf(buf + len, " end.  \"}\n");
        }
        char path[512];
        snprintf(path, sizeof path, "%s/shard-%02zu.jsonl%s", f->dir, s, zst ? ".zst" : "");
        if (zst)
            assert_int_equal(zpt_write_zst(path, buf, len, 2), 0);
        else
            assert_int_equal(zpt_write_file(path, buf, len), 0);
        free(buf);
        assert_int_equal(zp_dataset_add(f->ds, path), ZP_OK);
        f->total += SHARD_SIZES[s];
    }
    assert_int_equal(zp_dataset_index(f->ds), ZP_OK);
    assert_int_equal(zp_dataset_num_samples(f->ds), f->total);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    make_dataset(f, 1);
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

typedef struct run_cfg {
    int threads;
    size_t fetch_par, map_par, tok_par;
    size_t chunk, in_flight, microbatch, prefetch;
    int with_map;
    int tokenize;
    zp_pack_mode pack;
    size_t seq_len;
    uint32_t rank, world, epochs;
    zp_remainder remainder;
} run_cfg;

static run_cfg default_run(void)
{
    run_cfg r = {.threads = 2, .fetch_par = 1, .map_par = 1, .tok_par = 1, .chunk = 16,
                 .in_flight = 0, .microbatch = 7, .prefetch = 2, .with_map = 0, .tokenize = 0,
                 .pack = ZP_PACK_CONCAT, .seq_len = 31, .rank = 0, .world = 1, .epochs = 1,
                 .remainder = ZP_REMAINDER_PAD};
    return r;
}

/* default_run() tokenizing into rows of seq_len + 1 tokens. */
static run_cfg token_run(int threads, size_t microbatch, size_t seq_len)
{
    run_cfg r = default_run();
    r.tokenize = 1;
    r.threads = threads;
    r.microbatch = microbatch;
    r.seq_len = seq_len;
    return r;
}

static atomic_long map_calls;

/* Strips surrounding spaces of "text" (a deterministic transform). */
static zp_status strip_map(void *user, zp_record *rec)
{
    (void)user;
    atomic_fetch_add(&map_calls, 1);
    const char *s;
    size_t n;
    zp_status st = zp_record_text(rec, &s, &n);
    if (st != ZP_OK)
        return st;
    while (n && *s == ' ') {
        s++;
        n--;
    }
    while (n && s[n - 1] == ' ')
        n--;
    return zp_record_set_text(rec, s, n);
}

/* The same transform, a chunk at a time; it also reads "text" of every
 * record before changing any (the records share one parser). */
static zp_status strip_batch(void *user, zp_record *const *recs, size_t n, zp_status *st)
{
    (void)user;
    for (size_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        if (zp_record_get_string(recs[i], "text", &s, &len) != ZP_OK)
            return ZP_ERR_FORMAT;
    }
    for (size_t i = 0; i < n; i++)
        st[i] = strip_map(NULL, recs[i]);
    return ZP_OK;
}

static zp_pipeline *make_pipeline(fixture *f, const run_cfg *r, zp_worksource **ws_out)
{
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.seed = 42;
    wc.rank = r->rank;
    wc.world_size = r->world;
    wc.shuffle_block_shards = 3;
    wc.remainder = r->remainder;
    zp_worksource *ws;
    assert_int_equal(zp_worksource_create(f->ds, &wc, &ws), ZP_OK);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = r->threads;
    pc.fetch_parallelism = r->fetch_par;
    pc.chunk_samples = r->chunk;
    pc.in_flight_chunks = r->in_flight;
    pc.microbatch_size = r->microbatch;
    pc.prefetch_batches = r->prefetch;
    pc.epochs = r->epochs;
    zp_pipeline *p;
    assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_OK);
    if (r->with_map == 1)
        assert_int_equal(zp_pipeline_map_transform(p, strip_map, NULL, r->map_par, "strip"), ZP_OK);
    if (r->with_map == 2)
        assert_int_equal(zp_pipeline_map_transform_batch(p, strip_batch, NULL, r->map_par, "strip"),
                         ZP_OK);
    if (r->tokenize) {
        assert_int_equal(zp_pipeline_tokenize(p, "gpt2", "text", r->tok_par), ZP_OK);
        assert_int_equal(zp_pipeline_pack(p, r->pack, r->seq_len), ZP_OK);
    }
    *ws_out = ws;
    return p;
}

static uint64_t digest_batch(const zp_batch *b, uint64_t h)
{
    if (b->mode == ZP_PACK_RECORDS) {
        h = XXH64(b->data, b->offsets[b->rows], h);
        h = XXH64(b->offsets, (b->rows + 1) * sizeof *b->offsets, h);
    } else {
        size_t n = b->rows * b->cols;
        h = XXH64(b->tokens, n * sizeof *b->tokens, h);
        h = XXH64(b->loss_mask, n, h);
        h = XXH64(b->segment_ids, n * sizeof *b->segment_ids, h);
    }
    for (size_t i = 0; i < b->n_samples; i++)
        h = XXH64(&b->samples[i].global_id, sizeof(uint64_t), h);
    return h;
}

/* Run to the end; returns the digest of the whole stream. */
static uint64_t run_digest(fixture *f, const run_cfg *r, uint64_t *n_batches)
{
    zp_worksource *ws;
    zp_pipeline *p = make_pipeline(f, r, &ws);
    const zp_batch *b;
    uint64_t h = 0, n = 0;
    zp_status st;
    while ((st = zp_pipeline_next(p, &b)) == ZP_OK) {
        h = digest_batch(b, h);
        n++;
    }
    assert_int_equal(st, ZP_END);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    if (n_batches)
        *n_batches = n;
    return h;
}

/* ------------------------------------------------------------ tests */

static void test_pipeline_exactly_once_across_ranks(void **state)
{
    fixture *f = *state;
    for (uint32_t world = 1; world <= 5; world++) {
        uint8_t *seen = calloc(f->total, 1);
        uint64_t per_rank_batches = UINT64_MAX, padded = 0;
        for (uint32_t rank = 0; rank < world; rank++) {
            run_cfg r = default_run();
            r.rank = rank;
            r.world = world;
            zp_worksource *ws;
            zp_pipeline *p = make_pipeline(f, &r, &ws);
            const zp_batch *b;
            uint64_t nb = 0;
            while (zp_pipeline_next(p, &b) == ZP_OK) {
                nb++;
                assert_int_equal(b->rows, b->n_samples);
                for (size_t i = 0; i < b->n_samples; i++) {
                    const zp_sample *s = &b->samples[i];
                    assert_true(s->global_id < f->total);
                    if (s->padded)
                        padded++;
                    else
                        seen[s->global_id]++;
                    /* the row holds that very record */
                    char want[64];
                    snprintf(want, sizeof want, "doc %u-%llu", s->shard, (unsigned long long)s->record);
                    size_t len = b->offsets[i + 1] - b->offsets[i];
                    assert_non_null(memmem(b->data + b->offsets[i], len, want, strlen(want)));
                }
            }
            assert_string_equal(zp_pipeline_errmsg(p), "");
            if (per_rank_batches == UINT64_MAX)
                per_rank_batches = nb;
            assert_int_equal(nb, per_rank_batches); /* equal batch counts: nobody hangs */
            zp_pipeline_destroy(p);
            zp_worksource_destroy(ws);
        }
        for (uint64_t i = 0; i < f->total; i++)
            assert_int_equal(seen[i], 1);
        uint64_t per = (f->total + world - 1) / world;
        assert_int_equal(padded, per * world - f->total);
        free(seen);
    }
}

static void test_pipeline_deterministic_across_threads_and_parallelism(void **state)
{
    fixture *f = *state;
    run_cfg base = default_run();
    base.with_map = 1;
    base.threads = 1;
    uint64_t nb0;
    uint64_t ref = run_digest(f, &base, &nb0);
    assert_true(nb0 > 10);
    const struct {
        int threads;
        size_t fetch, map, chunk, in_flight;
    } var[] = {{2, 1, 1, 16, 0}, {4, 2, 3, 16, 0}, {3, 4, 4, 5, 3}, {2, 1, 8, 1, 64}, {1, 3, 1, 100, 2}};
    for (size_t i = 0; i < sizeof var / sizeof var[0]; i++) {
        run_cfg r = base;
        r.threads = var[i].threads;
        r.fetch_par = var[i].fetch;
        r.map_par = var[i].map;
        r.chunk = var[i].chunk;
        r.in_flight = var[i].in_flight;
        uint64_t nb;
        assert_int_equal(run_digest(f, &r, &nb), ref);
        assert_int_equal(nb, nb0);
    }
}

static void test_pipeline_epochs_differ_and_each_is_complete(void **state)
{
    fixture *f = *state;
    run_cfg r = default_run();
    r.epochs = 2;
    zp_worksource *ws;
    zp_pipeline *p = make_pipeline(f, &r, &ws);
    uint8_t *seen[2] = {calloc(f->total, 1), calloc(f->total, 1)};
    uint64_t first[2] = {UINT64_MAX, UINT64_MAX};
    int lasts = 0;
    const zp_batch *b;
    while (zp_pipeline_next(p, &b) == ZP_OK) {
        assert_true(b->epoch < 2);
        for (size_t i = 0; i < b->n_samples; i++) {
            assert_int_equal(b->samples[i].epoch, b->epoch); /* batches never mix epochs */
            seen[b->epoch][b->samples[i].global_id]++;
            if (first[b->epoch] == UINT64_MAX)
                first[b->epoch] = b->samples[i].global_id;
        }
        lasts += b->last_in_epoch;
    }
    assert_int_equal(lasts, 2);
    for (int e = 0; e < 2; e++)
        for (uint64_t i = 0; i < f->total; i++)
            assert_int_equal(seen[e][i], 1);
    assert_true(first[0] != first[1] || f->total == 1);
    free(seen[0]);
    free(seen[1]);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
}

static void test_pipeline_destroy_midstream(void **state)
{
    fixture *f = *state;
    /* Not started at all. */
    run_cfg r = default_run();
    zp_worksource *ws;
    zp_pipeline *p = make_pipeline(f, &r, &ws);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    /* After a few batches, with several threads and the output full. */
    for (int threads = 1; threads <= 4; threads *= 2) {
        r = default_run();
        r.threads = threads;
        r.with_map = 1;
        r.map_par = 3;
        r.epochs = 0; /* without end */
        p = make_pipeline(f, &r, &ws);
        const zp_batch *b;
        for (int i = 0; i < 3; i++)
            assert_int_equal(zp_pipeline_next(p, &b), ZP_OK);
        usleep(20000);
        zp_pipeline_destroy(p);
        zp_worksource_destroy(ws);
    }
}

static void test_pipeline_backpressure_bounds_work(void **state)
{
    fixture *f = *state;
    run_cfg r = default_run();
    r.with_map = 1;
    r.threads = 2;
    r.chunk = 4;
    r.in_flight = 3;
    r.microbatch = 2;
    r.prefetch = 1;
    r.epochs = 0;
    atomic_store(&map_calls, 0);
    zp_worksource *ws;
    zp_pipeline *p = make_pipeline(f, &r, &ws);
    const zp_batch *b;
    assert_int_equal(zp_pipeline_next(p, &b), ZP_OK);
    usleep(300000); /* the consumer stalls; the pipeline must stop at its buffers */
    long calls = atomic_load(&map_calls);
    /* chunks in flight + the batch buffers (prefetch + 2) + the one delivered */
    long bound = (long)(r.in_flight * r.chunk + (r.prefetch + 3) * r.microbatch);
    assert_true(calls <= bound);
    /* and it does not burn CPU while it waits */
    struct timespec c0, c1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    usleep(300000);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    double cpu = (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) * 1e-9;
    assert_true(cpu < 0.05);
    assert_int_equal(atomic_load(&map_calls), calls);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
}

/* A dataset with a bad record at shard b, line 4. */
static void make_bad_dataset(fixture *f)
{
    f->dir = zpt_tmpdir();
    assert_non_null(f->dir);
    assert_int_equal(zp_dataset_create(NULL, &f->ds), ZP_OK);
    char path[512];
    const char *good = "{\"text\":\"a\"}\n{\"text\":\"b\"}\n{\"text\":\"c\"}\n{\"text\":\"d\"}\n";
    const char *bad = "{\"text\":\"e\"}\n{\"text\":\"f\"}\n{\"text\":\"g\"}\n{\"text\": oops}\n{\"text\":\"h\"}\n";
    snprintf(path, sizeof path, "%s/a.jsonl", f->dir);
    zpt_write_file(path, good, strlen(good));
    assert_int_equal(zp_dataset_add(f->ds, path), ZP_OK);
    snprintf(path, sizeof path, "%s/b.jsonl", f->dir);
    zpt_write_file(path, bad, strlen(bad));
    assert_int_equal(zp_dataset_add(f->ds, path), ZP_OK);
    f->total = 9;
}

static void test_pipeline_error_names_shard_and_line(void **state)
{
    (void)state;
    fixture f;
    make_bad_dataset(&f);
    for (int threads = 1; threads <= 4; threads *= 2) {
        zp_worksource_config wc;
        zp_worksource_config_init(&wc);
        wc.shuffle = 0;
        zp_worksource *ws;
        assert_int_equal(zp_worksource_create(f.ds, &wc, &ws), ZP_OK);
        zp_pipeline_config pc;
        zp_pipeline_config_init(&pc);
        pc.threads = threads;
        pc.chunk_samples = 2;
        pc.microbatch_size = 2;
        pc.fetch_parallelism = 3;
        zp_pipeline *p;
        assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_OK);
        const zp_batch *b;
        uint64_t rows = 0;
        zp_status st;
        while ((st = zp_pipeline_next(p, &b)) == ZP_OK)
            rows += b->rows;
        /* every batch before the bad record's chunk came first, in order */
        assert_int_equal(rows, 6);
        assert_int_equal(st, ZP_ERR_FORMAT);
        const char *m = zp_pipeline_errmsg(p);
        assert_non_null(strstr(m, "b.jsonl"));
        assert_non_null(strstr(m, "line 4"));
        /* sticky */
        assert_int_equal(zp_pipeline_next(p, &b), ZP_ERR_FORMAT);
        zp_pipeline_destroy(p);
        zp_worksource_destroy(ws);
    }
    zp_dataset_destroy(f.ds);
    zpt_rmtree(f.dir);
    free(f.dir);
}

static void test_pipeline_skip_policy_counts(void **state)
{
    (void)state;
    fixture f;
    make_bad_dataset(&f);
    zp_worksource *ws;
    assert_int_equal(zp_worksource_create(f.ds, NULL, &ws), ZP_OK);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.on_bad_record = ZP_BAD_RECORD_SKIP;
    pc.microbatch_size = 4;
    zp_pipeline *p;
    assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_OK);
    const zp_batch *b;
    uint64_t rows = 0;
    zp_status st;
    while ((st = zp_pipeline_next(p, &b)) == ZP_OK)
        rows += b->rows;
    assert_int_equal(st, ZP_END);
    assert_int_equal(rows, 8);
    zp_pipeline_counts c;
    zp_pipeline_get_counts(p, &c);
    assert_int_equal(c.skipped, 1);
    assert_int_equal(c.samples, 8);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    zp_dataset_destroy(f.ds);
    zpt_rmtree(f.dir);
    free(f.dir);
}

/* Every line malformed: with the skip policy, a run that delivers nothing
 * because all its records are bad fails, saying so (without the check it
 * ended with ZP_END and zero batches, like an empty dataset). */
static void make_all_bad_dataset(fixture *f)
{
    f->dir = zpt_tmpdir();
    assert_non_null(f->dir);
    assert_int_equal(zp_dataset_create(NULL, &f->ds), ZP_OK);
    const char *bad[] = {"{\"text\": oops}\n[1, 2]\nnot json\n", "{\"text\": \"unterminated}\n\"x\"\n"};
    f->total = 0;
    for (int s = 0; s < 2; s++) {
        char path[512];
        snprintf(path, sizeof path, "%s/bad%d.jsonl", f->dir, s);
        assert_int_equal(zpt_write_file(path, bad[s], strlen(bad[s])), 0);
        assert_int_equal(zp_dataset_add(f->ds, path), ZP_OK);
    }
    f->total = 5;
}

static void test_pipeline_all_records_skipped_fails(void **state)
{
    (void)state;
    fixture f;
    make_all_bad_dataset(&f);
    /* epochs 1 (ends at the end of the stream), 3, and 0 (without end: ends
     * after the first whole epoch instead of spinning forever) */
    const uint32_t epochs[] = {1, 3, 0};
    for (int k = 0; k < 3; k++) {
        for (int threads = 1; threads <= 2; threads++) {
            zp_worksource_config wc;
            zp_worksource_config_init(&wc);
            wc.shuffle = 0;
            zp_worksource *ws;
            assert_int_equal(zp_worksource_create(f.ds, &wc, &ws), ZP_OK);
            zp_pipeline_config pc;
            zp_pipeline_config_init(&pc);
            pc.threads = threads;
            pc.chunk_samples = 2;
            pc.microbatch_size = 2;
            pc.epochs = epochs[k];
            pc.on_bad_record = ZP_BAD_RECORD_SKIP;
            zp_pipeline *p;
            assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_OK);
            const zp_batch *b;
            zp_status st;
            int batches = 0;
            while ((st = zp_pipeline_next(p, &b)) == ZP_OK)
                batches++;
            assert_int_equal(batches, 0);
            assert_int_equal(st, ZP_ERR_FORMAT);
            const char *m = zp_pipeline_errmsg(p);
            assert_non_null(strstr(m, "every record was skipped as bad"));
            assert_non_null(strstr(m, "5 of 5 records"));
            /* the first skip's reason, in stream order */
            assert_non_null(strstr(m, "bad0.jsonl' line 1"));
            assert_int_equal(zp_pipeline_next(p, &b), ZP_ERR_FORMAT); /* sticky */
            zp_pipeline_counts c;
            zp_pipeline_get_counts(p, &c);
            assert_int_equal(c.skipped, 5);
            assert_int_equal(c.samples, 0);
            zp_pipeline_destroy(p);
            zp_worksource_destroy(ws);
        }
    }
    zp_dataset_destroy(f.ds);
    zpt_rmtree(f.dir);
    free(f.dir);
}

/* Records skipped at tokenize (no text field) count as skipped too; one
 * good record is enough for the run to succeed. */
static void test_pipeline_all_skipped_at_tokenize_fails_one_good_succeeds(void **state)
{
    (void)state;
    for (int good = 0; good <= 1; good++) {
        fixture f;
        f.dir = zpt_tmpdir();
        assert_int_equal(zp_dataset_create(NULL, &f.ds), ZP_OK);
        char path[512];
        snprintf(path, sizeof path, "%s/t.jsonl", f.dir);
        const char *data = good ? "{\"body\": \"x\"}\n{\"text\": \"hello\"}\n{\"body\": \"y\"}\n"
                                : "{\"body\": \"x\"}\n{\"body\": \"z\"}\n{\"body\": \"y\"}\n";
        assert_int_equal(zpt_write_file(path, data, strlen(data)), 0);
        assert_int_equal(zp_dataset_add(f.ds, path), ZP_OK);
        zp_worksource *ws;
        assert_int_equal(zp_worksource_create(f.ds, NULL, &ws), ZP_OK);
        zp_pipeline_config pc;
        zp_pipeline_config_init(&pc);
        pc.threads = 2;
        pc.on_bad_record = ZP_BAD_RECORD_SKIP;
        zp_pipeline *p;
        assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_OK);
        assert_int_equal(zp_pipeline_tokenize(p, "gpt2", "text", 1), ZP_OK);
        assert_int_equal(zp_pipeline_pack(p, ZP_PACK_CONCAT, 8), ZP_OK);
        const zp_batch *b;
        zp_status st;
        int batches = 0;
        while ((st = zp_pipeline_next(p, &b)) == ZP_OK)
            batches++;
        zp_pipeline_counts c;
        zp_pipeline_get_counts(p, &c);
        if (good) {
            assert_int_equal(st, ZP_END);
            assert_int_equal(batches, 1);
            assert_int_equal(c.skipped, 2);
        } else {
            assert_int_equal(st, ZP_ERR_FORMAT);
            assert_int_equal(batches, 0);
            assert_int_equal(c.skipped, 3);
            const char *m = zp_pipeline_errmsg(p);
            assert_non_null(strstr(m, "3 of 3 records skipped"));
            assert_non_null(strstr(m, "no field 'text'"));
        }
        zp_pipeline_destroy(p);
        zp_worksource_destroy(ws);
        zp_dataset_destroy(f.ds);
        zpt_rmtree(f.dir);
        free(f.dir);
    }
}

static zp_status failing_map(void *user, zp_record *rec)
{
    (void)user;
    const zp_sample *s = zp_record_sample(rec);
    if (s->shard == 3 && s->record == 2) {
        zp_record_error(rec, "refusing record %llu", (unsigned long long)s->record);
        return ZP_ERR_INVALID;
    }
    return ZP_OK;
}

static void test_pipeline_map_error_reported(void **state)
{
    fixture *f = *state;
    zp_worksource *ws;
    assert_int_equal(zp_worksource_create(f->ds, NULL, &ws), ZP_OK);
    zp_pipeline *p;
    assert_int_equal(zp_pipeline_create(ws, NULL, &p), ZP_OK);
    assert_int_equal(zp_pipeline_map_transform(p, failing_map, NULL, 2, "picky"), ZP_OK);
    const zp_batch *b;
    zp_status st;
    while ((st = zp_pipeline_next(p, &b)) == ZP_OK) {
    }
    assert_int_equal(st, ZP_ERR_CALLBACK);
    const char *m = zp_pipeline_errmsg(p);
    assert_non_null(strstr(m, "shard-03"));
    assert_non_null(strstr(m, "line 3"));
    assert_non_null(strstr(m, "picky"));
    assert_non_null(strstr(m, "refusing record 2"));
    /* builder calls are refused once iterating */
    assert_int_equal(zp_pipeline_batch(p, 3), ZP_ERR_STATE);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
}

/* Fails records whose id is 2 mod 5 from a batch callback. */
static zp_status picky_batch(void *user, zp_record *const *recs, size_t n, zp_status *st)
{
    (void)user;
    for (size_t i = 0; i < n; i++) {
        const zp_sample *s = zp_record_sample(recs[i]);
        if (s->record % 5 == 2) {
            zp_record_error(recs[i], "refusing record %llu", (unsigned long long)s->record);
            st[i] = ZP_ERR_CALLBACK;
        } else if (s->record % 5 == 4) {
            zp_record_drop(recs[i]);
        }
    }
    return ZP_OK;
}

static zp_status crashing_batch(void *user, zp_record *const *recs, size_t n, zp_status *st)
{
    (void)user;
    (void)st;
    zp_record_error(recs[0], "worker gone after %zu records", n);
    return ZP_ERR_IO;
}

/* A batch map gives the per-record map's stream, at any parallelism; its
 * per-record failures name the record and follow the skip policy; a failed
 * call fails the stream, also under the skip policy. */
static void test_pipeline_map_batch(void **state)
{
    fixture *f = *state;
    run_cfg r = default_run();
    r.with_map = 1;
    r.tokenize = 1;
    uint64_t want = run_digest(f, &r, NULL);
    r.with_map = 2;
    assert_true(run_digest(f, &r, NULL) == want);
    r.map_par = 3;
    r.chunk = 5;
    assert_true(run_digest(f, &r, NULL) == want);

    for (int skip = 0; skip < 2; skip++) {
        zp_worksource *ws;
        assert_int_equal(zp_worksource_create(f->ds, NULL, &ws), ZP_OK);
        zp_pipeline_config pc;
        zp_pipeline_config_init(&pc);
        pc.on_bad_record = skip ? ZP_BAD_RECORD_SKIP : ZP_BAD_RECORD_FAIL;
        zp_pipeline *p;
        assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_OK);
        assert_int_equal(zp_pipeline_map_transform_batch(p, picky_batch, NULL, 2, "picky"), ZP_OK);
        const zp_batch *b;
        zp_status st;
        while ((st = zp_pipeline_next(p, &b)) == ZP_OK) {
        }
        zp_pipeline_counts cn;
        zp_pipeline_get_counts(p, &cn);
        if (skip) {
            assert_int_equal(st, ZP_END);
            assert_true(cn.skipped > 0 && cn.filtered > 0);
            assert_int_equal(cn.samples + cn.skipped + cn.filtered, f->total);
        } else {
            assert_int_equal(st, ZP_ERR_CALLBACK);
            assert_non_null(strstr(zp_pipeline_errmsg(p), "picky"));
            assert_non_null(strstr(zp_pipeline_errmsg(p), "refusing record"));
            assert_non_null(strstr(zp_pipeline_errmsg(p), "shard-"));
        }
        zp_pipeline_destroy(p);

        assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_OK);
        assert_int_equal(zp_pipeline_map_transform_batch(p, crashing_batch, NULL, 1, "crashy"),
                         ZP_OK);
        while ((st = zp_pipeline_next(p, &b)) == ZP_OK) {
        }
        assert_int_equal(st, ZP_ERR_CALLBACK);
        assert_non_null(strstr(zp_pipeline_errmsg(p), "worker gone after"));
        zp_pipeline_destroy(p);
        zp_worksource_destroy(ws);
    }
}

/* A kept batch stays intact while the stream goes on (its buffer is not
 * reused), keeping every batch never stalls the stream, and release gives
 * buffers back. */
static void test_pipeline_keep_batch(void **state)
{
    fixture *f = *state;
    run_cfg r = default_run();
    r.tokenize = 1;
    r.prefetch = 1;
    uint64_t n_batches;
    uint64_t want = run_digest(f, &r, &n_batches);
    assert_true(n_batches > 8);
    zp_worksource *ws;
    zp_pipeline *p = make_pipeline(f, &r, &ws);
    const zp_batch *b;
    const zp_batch **kept = calloc(n_batches, sizeof *kept);
    uint64_t *dig = calloc(n_batches, sizeof *dig);
    assert_int_equal(zp_pipeline_keep_batch(p, NULL), ZP_ERR_STATE);
    size_t n = 0;
    zp_status st;
    while ((st = zp_pipeline_next(p, &b)) == ZP_OK) {
        assert_int_equal(zp_pipeline_keep_batch(p, b), ZP_OK);
        assert_int_equal(zp_pipeline_keep_batch(p, b), ZP_OK); /* twice is once */
        if (n > 0)
            assert_int_equal(zp_pipeline_keep_batch(p, kept[n - 1]), ZP_ERR_INVALID);
        kept[n] = b;
        dig[n] = digest_batch(b, 0);
        n++;
        assert_int_equal(zp_pipeline_kept_batches(p), n);
    }
    assert_int_equal(st, ZP_END);
    assert_int_equal(n, n_batches);
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(digest_batch(kept[i], 0) == dig[i]); /* untouched since */
        h = digest_batch(kept[i], h);
    }
    assert_true(h == want);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(zp_pipeline_release_batch(p, kept[i]), ZP_OK);
    assert_int_equal(zp_pipeline_release_batch(p, kept[0]), ZP_ERR_INVALID);
    assert_int_equal(zp_pipeline_kept_batches(p), 0);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);

    /* keep one batch in two, release it two batches later: same stream */
    p = make_pipeline(f, &r, &ws);
    h = 0;
    n = 0;
    const zp_batch *prev = NULL;
    uint64_t prev_dig = 0;
    while ((st = zp_pipeline_next(p, &b)) == ZP_OK) {
        h = digest_batch(b, h);
        if (prev && n % 2 == 1) {
            assert_true(digest_batch(prev, 0) == prev_dig);
            assert_int_equal(zp_pipeline_release_batch(p, prev), ZP_OK);
            prev = NULL;
        }
        if (n % 2 == 0) {
            assert_int_equal(zp_pipeline_keep_batch(p, b), ZP_OK);
            prev = b;
            prev_dig = digest_batch(b, 0);
        }
        n++;
    }
    assert_int_equal(st, ZP_END);
    assert_true(h == want);
    zp_pipeline_destroy(p); /* a batch may still be kept: freed here */
    zp_worksource_destroy(ws);
    free(kept);
    free(dig);
}

static void test_pipeline_resume_continues_identically(void **state)
{
    fixture *f = *state;
    run_cfg r = default_run();
    r.epochs = 2;
    r.microbatch = 5;
    /* reference: the whole stream's per-batch digests */
    zp_worksource *ws;
    zp_pipeline *p = make_pipeline(f, &r, &ws);
    uint64_t ref[1024];
    size_t n = 0;
    const zp_batch *b;
    while (zp_pipeline_next(p, &b) == ZP_OK && n < 1024)
        ref[n++] = digest_batch(b, 0);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    assert_true(n > 20);
    /* stop after k batches (k not at an epoch end), resume */
    size_t k = n / 2 + 1;
    p = make_pipeline(f, &r, &ws);
    for (size_t i = 0; i < k; i++)
        assert_int_equal(zp_pipeline_next(p, &b), ZP_OK);
    zp_worksource_state st;
    zp_pipeline_resume_state(p, &st);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);

    p = make_pipeline(f, &r, &ws);
    zp_pipeline_destroy(p); /* only to get a worksource configured alike */
    assert_int_equal(zp_worksource_set_state(ws, &st), ZP_OK);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.microbatch_size = r.microbatch;
    pc.chunk_samples = r.chunk;
    pc.epochs = 2 - st.epoch;
    assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_OK);
    size_t i = k;
    while (zp_pipeline_next(p, &b) == ZP_OK) {
        assert_true(i < n);
        /* batch index restarts; compare content only */
        assert_int_equal(digest_batch(b, 0), ref[i]);
        i++;
    }
    assert_int_equal(i, n);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
}

/* Epochs counted from a late start epoch must not wrap the engine's 32-bit
 * end epoch (it delivered nothing, ending as if done). */
static void test_pipeline_epochs_past_the_last_epoch(void **state)
{
    fixture *f = *state;
    run_cfg r = default_run();
    zp_worksource *ws;
    zp_pipeline *p = make_pipeline(f, &r, &ws);
    zp_pipeline_destroy(p); /* only to get a worksource configured alike */
    zp_worksource_state st;
    zp_worksource_get_state(ws, &st);
    st.epoch = UINT32_MAX - 1;
    st.position = 0;
    assert_int_equal(zp_worksource_set_state(ws, &st), ZP_OK);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.microbatch_size = r.microbatch;
    pc.epochs = 2;
    assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_OK);
    const zp_batch *b;
    assert_int_equal(zp_pipeline_next(p, &b), ZP_ERR_INVALID);
    const char *m = zp_pipeline_errmsg(p);
    if (!strstr(m, "epochs = 2 from start epoch 4294967294"))
        fail_msg("message '%s'", m);
    zp_pipeline_destroy(p);
    /* one epoch from there is fine */
    pc.epochs = 1;
    assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_OK);
    assert_int_equal(zp_pipeline_next(p, &b), ZP_OK);
    assert_int_equal(b->samples[0].epoch, UINT32_MAX - 1);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
}

/* The message of the last error contains `want` (and never ends in an
 * empty colon). */
static void assert_msg(const zp_pipeline *p, const char *want)
{
    const char *m = zp_pipeline_errmsg(p);
    if (!strstr(m, want))
        fail_msg("message '%s' does not contain '%s'", m, want);
    size_t n = strlen(m);
    assert_true(n > 2 && strcmp(m + n - 2, ": ") != 0 && m[n - 1] != ':');
}

/* A config that zp_pipeline_create() refuses: the error names the setting
 * and its value, and the failed create leaves an error-only handle holding
 * that message; the builder calls and next() on it return the same error. */
static void expect_create_fails(zp_worksource *ws, const zp_pipeline_config *pc, const char *want)
{
    zp_pipeline *p = NULL;
    assert_int_equal(zp_pipeline_create(ws, pc, &p), ZP_ERR_INVALID);
    assert_non_null(p);
    assert_msg(p, want);
    const zp_batch *b;
    assert_int_equal(zp_pipeline_next(p, &b), ZP_ERR_INVALID);
    assert_int_equal(zp_pipeline_fetch(p, 2), ZP_ERR_INVALID);
    assert_msg(p, want);
    zp_pipeline_destroy(p);
}

static void test_pipeline_rejects_bad_settings(void **state)
{
    fixture *f = *state;
    zp_worksource *ws;
    assert_int_equal(zp_worksource_create(f->ds, NULL, &ws), ZP_OK);
    zp_pipeline_config pc;
    static const char *const want[] = {
        "threads = -1: must be 0..1024",
        "threads = 2000",
        "chunk_samples = 0: must be 1..1048576",
        "fetch_parallelism = 0",
        "prefetch_batches = 5000: must be 0..4096",
        "microbatch_size = 0",
        "seq_len = 0",
        "in_flight_chunks = 70000",
        "pack = 7",
        "on_bad_record = 9",
    };
    for (int i = 0; i < (int)(sizeof want / sizeof want[0]); i++) {
        zp_pipeline_config_init(&pc);
        switch (i) {
        case 0: pc.threads = -1; break;
        case 1: pc.threads = 2000; break;
        case 2: pc.chunk_samples = 0; break;
        case 3: pc.fetch_parallelism = 0; break;
        case 4: pc.prefetch_batches = 5000; break;
        case 5: pc.microbatch_size = 0; break;
        case 6: pc.seq_len = 0; break;
        case 7: pc.in_flight_chunks = 70000; break;
        case 8: pc.pack = (zp_pack_mode)7; break;
        case 9: pc.on_bad_record = (zp_bad_record)9; break;
        }
        expect_create_fails(ws, &pc, want[i]);
    }
    expect_create_fails(NULL, NULL, "ws = NULL");
    assert_int_equal(zp_pipeline_create(ws, NULL, NULL), ZP_ERR_INVALID);

    /* builder calls: the call, the setting and the value */
    zp_pipeline *p = NULL;
    assert_int_equal(zp_pipeline_create(ws, NULL, &p), ZP_OK);
    assert_string_equal(zp_pipeline_errmsg(p), "");
    assert_int_equal(zp_pipeline_map_transform(p, NULL, NULL, 1, NULL), ZP_ERR_INVALID);
    assert_msg(p, "zp_pipeline_map_transform: fn = NULL");
    assert_int_equal(zp_pipeline_map_transform(p, NULL, NULL, 2000, NULL), ZP_ERR_INVALID);
    assert_msg(p, "zp_pipeline_map_transform: parallelism = 2000: must be 1..1024");
    assert_int_equal(zp_pipeline_fetch(p, 0), ZP_ERR_INVALID);
    assert_msg(p, "zp_pipeline_fetch: parallelism = 0");
    assert_int_equal(zp_pipeline_prefetch(p, 64, 0), ZP_ERR_INVALID);
    assert_msg(p, "zp_pipeline_prefetch: parallelism = 0");
    assert_int_equal(zp_pipeline_tokenize(p, "gpt2", "text", 0), ZP_ERR_INVALID);
    assert_msg(p, "zp_pipeline_tokenize: parallelism = 0");
    assert_int_equal(zp_pipeline_tokenize(p, "", "text", 1), ZP_ERR_INVALID);
    assert_msg(p, "tokenizer_id = \"\"");
    assert_int_equal(zp_pipeline_tokenize(p, "no-such-tokenizer", "text", 1) != ZP_OK, 1);
    assert_msg(p, "tokenizer_id = 'no-such-tokenizer'");
    assert_int_equal(zp_pipeline_batch(p, 0), ZP_ERR_INVALID);
    assert_msg(p, "zp_pipeline_batch: microbatch_size = 0");
    assert_int_equal(zp_pipeline_pack(p, (zp_pack_mode)7, 16), ZP_ERR_INVALID);
    assert_msg(p, "zp_pipeline_pack: mode = 7");
    assert_int_equal(zp_pipeline_pack(p, ZP_PACK_CONCAT, 0), ZP_ERR_INVALID);
    assert_msg(p, "zp_pipeline_pack: seq_len = 0");
    assert_int_equal(zp_pipeline_options(p, 5000), ZP_ERR_INVALID);
    assert_msg(p, "zp_pipeline_options: prefetch_batches = 5000");
    /* a successful call keeps the last message (as errno) */
    assert_int_equal(zp_pipeline_batch(p, 4), ZP_OK);
    assert_msg(p, "prefetch_batches = 5000");
    zp_metrics_snapshot *m = malloc(sizeof *m);
    assert_int_equal(zp_pipeline_metrics_snapshot(p, m), ZP_ERR_STATE);
    assert_msg(p, "observability is off");
    free(m);
    assert_int_equal(zp_pipeline_pack(p, ZP_PACK_CONCAT, 16), ZP_OK);
    const zp_batch *b;
    assert_int_equal(zp_pipeline_next(p, NULL), ZP_ERR_INVALID);
    assert_msg(p, "out = NULL");
    assert_int_equal(zp_pipeline_next(p, &b), ZP_ERR_INVALID); /* packing without tokenize */
    assert_msg(p, "pack = 1 (concat): token packing needs a tokenize operator");
    zp_pipeline_destroy(p);

    /* after the start: the builder calls name themselves and the state */
    assert_int_equal(zp_pipeline_create(ws, NULL, &p), ZP_OK);
    assert_int_equal(zp_pipeline_next(p, &b), ZP_OK);
    assert_int_equal(zp_pipeline_fetch(p, 2), ZP_ERR_STATE);
    assert_msg(p, "zp_pipeline_fetch: pipeline already iterating");
    assert_int_equal(zp_pipeline_enable_observability(p), ZP_ERR_STATE);
    assert_msg(p, "zp_pipeline_enable_observability: pipeline already iterating");
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
}

/* ------------------------------------------------------------ token packing */

/* Expected token stream: for each delivered document, encode(text) + EOT. */
static void expected_doc_tokens(fixture *f, const zp_sample *s, zp_encoder *enc, int32_t **ids,
                                size_t *n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/shard-%02u.jsonl.zst", f->dir, s->shard);
    (void)path;
    /* Rebuild the text the fixture wrote for (shard, record), stripped of
     * nothing: the tokenize field is the raw text. */
    char text[2048];
    size_t len = 0;
    int reps = (int)((s->shard * 7 + s->record * 13) % 20);
    len += (size_t)sprintf(text + len, "  doc %u-%llu", s->shard, (unsigned long long)s->record);
    for (int r = 0; r < reps; r++)
        len += (size_t)sprintf(text + len, " word%d,", r);
    len += (size_t)sprintf(text + len, " end.  ");
    *ids = malloc((len + 1) * sizeof **ids);
    assert_int_equal(zp_encode(enc, text, len, *ids, n), ZP_OK);
}

static void test_pipeline_concat_tokens_in_equal_tokens_out(void **state)
{
    fixture *f = *state;
    zp_tokenizer *tok;
    assert_int_equal(zp_tokenizer_create("gpt2", NULL, &tok, NULL, 0), ZP_OK);
    zp_encoder *enc;
    assert_int_equal(zp_encoder_create(tok, &enc), ZP_OK);
    int32_t eot = zp_tokenizer_eot(tok);
    for (int threads = 1; threads <= 2; threads++) {
        run_cfg r = token_run(threads, 3, 17);
        r.tok_par = 2;
        zp_worksource *ws;
        zp_pipeline *p = make_pipeline(f, &r, &ws);
        assert_int_equal(zp_pipeline_eot(p), eot);
        size_t cap = 1 << 20, got_n = 0, want_n = 0;
        int32_t *got = malloc(cap * sizeof *got), *want = malloc(cap * sizeof *want);
        const zp_batch *b;
        int32_t prev_last = -1;
        uint64_t docs = 0, pad = 0;
        zp_status st;
        while ((st = zp_pipeline_next(p, &b)) == ZP_OK) {
            assert_int_equal(b->cols, r.seq_len + 1);
            for (size_t i = 0; i < b->n_samples; i++) {
                int32_t *ids;
                size_t n;
                expected_doc_tokens(f, &b->samples[i], enc, &ids, &n);
                memcpy(want + want_n, ids, n * sizeof *ids);
                want_n += n;
                want[want_n++] = eot;
                free(ids);
                docs++;
            }
            for (size_t row = 0; row < b->rows; row++) {
                const int32_t *t = b->tokens + row * b->cols;
                const uint8_t *m = b->loss_mask + row * b->cols;
                const int32_t *sg = b->segment_ids + row * b->cols;
                size_t start = 0;
                if (m[0] && prev_last >= 0) {
                    /* row k starts with the last token of row k-1 */
                    assert_int_equal(t[0], prev_last);
                    start = 1;
                }
                for (size_t c = start; c < b->cols; c++) {
                    if (!m[c]) {
                        assert_int_equal(sg[c], -1);
                        assert_int_equal(t[c], eot);
                        pad++;
                        continue;
                    }
                    got[got_n++] = t[c];
                }
                /* segment ids never decrease within a row and step after EOT */
                for (size_t c = 1; c < b->cols && m[c]; c++)
                    assert_int_equal(sg[c], sg[c - 1] + (t[c - 1] == eot ? 1 : 0));
                if (m[b->cols - 1])
                    prev_last = t[b->cols - 1];
                else
                    prev_last = -1;
            }
        }
        assert_int_equal(st, ZP_END);
        assert_int_equal(docs, f->total);
        assert_int_equal(got_n, want_n);
        assert_memory_equal(got, want, got_n * sizeof *got);
        zp_pipeline_counts c;
        zp_pipeline_get_counts(p, &c);
        assert_int_equal(c.tokens, want_n);
        assert_int_equal(c.pad_tokens, pad);
        free(got);
        free(want);
        zp_pipeline_destroy(p);
        zp_worksource_destroy(ws);
    }
    zp_encoder_destroy(enc);
    zp_tokenizer_destroy(tok);
}

static void test_pipeline_pad_mode_one_doc_per_row(void **state)
{
    fixture *f = *state;
    zp_tokenizer *tok;
    assert_int_equal(zp_tokenizer_create("gpt2", NULL, &tok, NULL, 0), ZP_OK);
    zp_encoder *enc;
    assert_int_equal(zp_encoder_create(tok, &enc), ZP_OK);
    int32_t eot = zp_tokenizer_eot(tok);
    run_cfg r = default_run();
    r.tokenize = 1;
    r.pack = ZP_PACK_PAD;
    r.seq_len = 15; /* short: many documents are truncated */
    r.microbatch = 4;
    zp_worksource *ws;
    zp_pipeline *p = make_pipeline(f, &r, &ws);
    const zp_batch *b;
    uint64_t truncated = 0, real = 0, docs = 0;
    while (zp_pipeline_next(p, &b) == ZP_OK) {
        assert_true(b->n_samples <= b->rows);
        assert_int_equal(b->rows_filled, b->n_samples);
        for (size_t i = 0; i < b->n_samples; i++) {
            int32_t *ids;
            size_t n;
            expected_doc_tokens(f, &b->samples[i], enc, &ids, &n);
            const int32_t *t = b->tokens + i * b->cols;
            const uint8_t *m = b->loss_mask + i * b->cols;
            size_t keep = n + 1 < b->cols ? n + 1 : b->cols;
            for (size_t c = 0; c < b->cols; c++) {
                int32_t w = c < n ? ids[c] : (c == n ? eot : eot);
                assert_int_equal(m[c], c < keep);
                assert_int_equal(t[c], c < keep ? w : eot); /* padding is EOT */
                assert_int_equal(b->segment_ids[i * b->cols + c], c < keep ? 0 : -1);
            }
            truncated += n + 1 - keep;
            real += keep;
            docs++;
            free(ids);
        }
    }
    assert_int_equal(docs, f->total);
    assert_true(truncated > 0);
    zp_pipeline_counts c;
    zp_pipeline_get_counts(p, &c);
    assert_int_equal(c.truncated_tokens, truncated);
    assert_int_equal(c.tokens, real);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    zp_encoder_destroy(enc);
    zp_tokenizer_destroy(tok);
}

/* The document-masking outputs of one batch, recomputed from its
 * segment_ids (and the rule for continued positions) and compared. */
static void check_masking(const zp_batch *b, zp_position_mode pm, int32_t eot,
                          const int32_t *prev_last_pos, int32_t prev_last_tok)
{
    const size_t in = b->cols - 1;
    assert_non_null(b->position_ids);
    assert_non_null(b->cu_seqlens);
    assert_non_null(b->doc_counts);
    size_t n = 0;
    int32_t maxlen = 0;
    for (size_t r = 0; r < b->rows; r++) {
        const int32_t *sg = b->segment_ids + r * b->cols, *po = b->position_ids + r * b->cols;
        const int32_t *t = b->tokens + r * b->cols;
        /* positions: consecutive within a segment, 0 at every start but the
         * row's first in continue mode */
        for (size_t c = 1; c < b->cols; c++)
            assert_int_equal(po[c], sg[c] != sg[c - 1] ? 0 : po[c - 1] + 1);
        if (pm == ZP_POSITIONS_RESTART || sg[0] < 0) {
            assert_int_equal(po[0], 0);
        } else if (r == 0 && prev_last_pos && *prev_last_pos >= 0 && t[0] == prev_last_tok &&
                   !(t[0] == eot && sg[1] != sg[0])) {
            /* the carry is the previous row's last token, at its position */
            assert_int_equal(po[0], *prev_last_pos);
        }
        if (r > 0 && pm == ZP_POSITIONS_CONTINUE && sg[0] >= 0 &&
            !(t[0] == eot && (b->cols < 2 || sg[1] != sg[0])))
            assert_int_equal(po[0], b->position_ids[r * b->cols - 1]);
        int32_t docs = 0;
        for (size_t c = 0; c < in; c++) {
            if (c > 0 && sg[c] == sg[c - 1])
                continue;
            int32_t at = (int32_t)(r * in + c);
            assert_true(n < b->n_cu_seqlens);
            assert_int_equal(b->cu_seqlens[n], at);
            if (n > 0 && at - b->cu_seqlens[n - 1] > maxlen)
                maxlen = at - b->cu_seqlens[n - 1];
            n++;
            docs += sg[c] >= 0;
        }
        assert_int_equal(b->doc_counts[r], docs);
    }
    int32_t end = (int32_t)(b->rows * in);
    if (end - b->cu_seqlens[n - 1] > maxlen)
        maxlen = end - b->cu_seqlens[n - 1];
    assert_int_equal(b->n_cu_seqlens, n + 1);
    assert_int_equal(b->cu_seqlens[n], end);
    assert_int_equal(b->max_seqlen, maxlen);
}

static void test_pipeline_doc_masking(void **state)
{
    fixture *f = *state;
    int32_t eot = 50256;
    const unsigned all = ZP_OUT_POSITION_IDS | ZP_OUT_CU_SEQLENS | ZP_OUT_DOC_COUNTS;
    for (int mode = 0; mode < 3; mode++) {
        zp_position_mode pm = mode == 1 ? ZP_POSITIONS_CONTINUE : ZP_POSITIONS_RESTART;
        uint64_t dig[2] = {0, 0};
        for (int threads = 1; threads <= 2; threads++) {
            run_cfg r = token_run(threads, 3, 17);
            r.pack = mode == 2 ? ZP_PACK_PAD : ZP_PACK_CONCAT;
            zp_worksource *ws;
            zp_pipeline *p = make_pipeline(f, &r, &ws);
            assert_int_equal(zp_pipeline_doc_masking(p, all, pm), ZP_OK);
            const zp_batch *b;
            int32_t last_pos = -1, last_tok = -1;
            uint64_t docs_in_rows = 0, h = 0;
            zp_status st;
            while ((st = zp_pipeline_next(p, &b)) == ZP_OK) {
                check_masking(b, pm, eot, r.pack == ZP_PACK_CONCAT ? &last_pos : NULL, last_tok);
                size_t lr = b->rows - 1;
                last_pos = b->loss_mask[lr * b->cols + b->cols - 1]
                               ? b->position_ids[lr * b->cols + b->cols - 1]
                               : -1;
                last_tok = b->tokens[lr * b->cols + b->cols - 1];
                for (size_t i = 0; i < b->rows; i++)
                    docs_in_rows += (uint64_t)b->doc_counts[i];
                h = XXH64(&(uint64_t){zp_batch_digest(b)}, sizeof(uint64_t), h);
                if (r.pack == ZP_PACK_PAD) {
                    /* one document a row: positions 0.. of it */
                    for (size_t i = 0; i < b->rows_filled; i++)
                        assert_int_equal(b->doc_counts[i], 1);
                }
            }
            assert_int_equal(st, ZP_END);
            assert_true(docs_in_rows >= f->total);
            dig[threads - 1] = h;
            zp_pipeline_destroy(p);
            zp_worksource_destroy(ws);
        }
        assert_true(dig[0] == dig[1]); /* the same with any thread count */
    }
    /* not asked: nothing delivered, and bad arguments are refused */
    run_cfg r = default_run();
    r.tokenize = 1;
    zp_worksource *ws;
    zp_pipeline *p = make_pipeline(f, &r, &ws);
    assert_int_equal(zp_pipeline_doc_masking(p, 8, ZP_POSITIONS_RESTART), ZP_ERR_INVALID);
    assert_non_null(strstr(zp_pipeline_errmsg(p), "unknown flags 0x8"));
    assert_int_equal(zp_pipeline_doc_masking(p, all, (zp_position_mode)7), ZP_ERR_INVALID);
    const zp_batch *b;
    assert_int_equal(zp_pipeline_next(p, &b), ZP_OK);
    assert_null(b->position_ids);
    assert_null(b->cu_seqlens);
    assert_null(b->doc_counts);
    assert_int_equal(b->n_cu_seqlens, 0);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    /* without tokenize: refused at the first next() */
    r = default_run();
    p = make_pipeline(f, &r, &ws);
    assert_int_equal(zp_pipeline_doc_masking(p, all, ZP_POSITIONS_RESTART), ZP_OK);
    assert_int_equal(zp_pipeline_next(p, &b), ZP_ERR_INVALID);
    assert_non_null(strstr(zp_pipeline_errmsg(p), "need a tokenize operator"));
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
}

static void test_pipeline_tokens_deterministic_across_threads(void **state)
{
    fixture *f = *state;
    run_cfg r = default_run();
    r.tokenize = 1;
    r.with_map = 1;
    r.threads = 1;
    uint64_t ref = run_digest(f, &r, NULL);
    r.threads = 3;
    r.tok_par = 4;
    r.map_par = 2;
    r.fetch_par = 2;
    r.chunk = 3;
    assert_int_equal(run_digest(f, &r, NULL), ref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipeline_exactly_once_across_ranks),
        cmocka_unit_test(test_pipeline_deterministic_across_threads_and_parallelism),
        cmocka_unit_test(test_pipeline_epochs_differ_and_each_is_complete),
        cmocka_unit_test(test_pipeline_destroy_midstream),
        cmocka_unit_test(test_pipeline_backpressure_bounds_work),
        cmocka_unit_test(test_pipeline_error_names_shard_and_line),
        cmocka_unit_test(test_pipeline_skip_policy_counts),
        cmocka_unit_test(test_pipeline_all_records_skipped_fails),
        cmocka_unit_test(test_pipeline_all_skipped_at_tokenize_fails_one_good_succeeds),
        cmocka_unit_test(test_pipeline_map_error_reported),
        cmocka_unit_test(test_pipeline_map_batch),
        cmocka_unit_test(test_pipeline_keep_batch),
        cmocka_unit_test(test_pipeline_resume_continues_identically),
        cmocka_unit_test(test_pipeline_rejects_bad_settings),
        cmocka_unit_test(test_pipeline_epochs_past_the_last_epoch),
        cmocka_unit_test(test_pipeline_concat_tokens_in_equal_tokens_out),
        cmocka_unit_test(test_pipeline_pad_mode_one_doc_per_row),
        cmocka_unit_test(test_pipeline_tokens_deterministic_across_threads),
        cmocka_unit_test(test_pipeline_doc_masking),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
