/*
 * test_coverage.c - the coverage certificate's digests (zephon/coverage.h,
 * zephon/certificate.h):
 *  - the fold: order and split independent; a dropped, a repeated and a
 *    swapped sample each change it, and the count tells which;
 *  - the epoch's stream digest (zp_worksource_coverage) equals the ranks'
 *    plans merged, for 1..5 ranks, pad and drop; the fast one
 *    (zp_worksource_epoch_coverage: whole passes by id, in slices) equals
 *    it, with and without a mixture, for epochs of whole and partial
 *    passes;
 *  - pipelines (records, concat, best-fit; 1 and 3 ranks, two epochs):
 *    delivered == expected, and the ranks' digests merge to the stream's;
 *  - across a checkpoint/resume (same world size, mid-epoch, token modes
 *    with a carried document) and an elastic resume (4 ranks -> 3): the
 *    same holds, the state carrying the digests;
 *  - a map callback dropping one record on one rank: that rank's digest
 *    misses one sample and the job's differs from the stream's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"
#include "zephon.h"

static char *g_dir;
static const uint64_t g_draws = 600; /* draws per epoch */
static zp_mix_part g_parts[3] = {{"web", 4, 0.5}, {"code", 2, 0.3}, {"books", 2, 0.2}};

static void write_shard(const char *name, int shard, int records)
{
    size_t cap = (size_t)records * 2048 + 1;
    char *buf = malloc(cap), *p = buf;
    for (int r = 0; r < records; r++) {
        int words = 1 + (r * 7919 + shard * 104729) % 61;
        if (r % 13 == 0)
            words += 90;
        p += sprintf(p, "{\"text\": \"%s %d %d", name, shard, r);
        for (int w = 0; w < words; w++)
            p += sprintf(p, " w%d", (w * 31 + r) % 500);
        p += sprintf(p, "\"}\n");
    }
    char fn[256];
    snprintf(fn, sizeof fn, "%s-%02d.jsonl", name, shard);
    char *path = zpt_path(g_dir, fn);
    assert_int_equal(zpt_write_file(path, buf, (size_t)(p - buf)), 0);
    free(path);
    free(buf);
}

static int setup(void **state)
{
    (void)state;
    g_dir = zpt_tmpdir();
    for (int s = 0; s < 4; s++)
        write_shard("web", s, 40);
    for (int s = 0; s < 2; s++)
        write_shard("code", s, 30);
    for (int s = 0; s < 2; s++)
        write_shard("books", s, 25);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    zpt_rmtree(g_dir);
    free(g_dir);
    return 0;
}

/* ------------------------------------------------------------ the fold */

static void test_fold_order_independent(void **state)
{
    (void)state;
    enum { N = 1000 };
    zp_coverage fwd = {0}, rev = {0}, lo = {0}, hi = {0};
    for (uint64_t i = 0; i < N; i++)
        zp_coverage_fold(&fwd, i * 7 + 3, i % 3);
    for (uint64_t i = N; i-- > 0;)
        zp_coverage_fold(i % 2 ? &lo : &hi, i * 7 + 3, i % 3);
    for (uint64_t i = N; i-- > 0;)
        zp_coverage_fold(&rev, i * 7 + 3, i % 3);
    assert_true(zp_coverage_equal(&fwd, &rev));
    zp_coverage_merge(&lo, &hi);
    assert_true(zp_coverage_equal(&fwd, &lo));
    assert_int_equal(fwd.count, N);
    zp_coverage empty = {0};
    assert_false(zp_coverage_equal(&fwd, &empty));
}

/* The fold of samples 0 .. N-1 but for the changes asked. */
static zp_coverage fold_except(uint64_t n, int64_t drop, int64_t repeat, int64_t swap_in)
{
    zp_coverage c = {0};
    for (uint64_t i = 0; i < n; i++) {
        if ((int64_t)i == drop)
            continue;
        zp_coverage_fold(&c, i, 0);
        if ((int64_t)i == repeat)
            zp_coverage_fold(&c, i, 0);
    }
    if (swap_in >= 0)
        zp_coverage_fold(&c, (uint64_t)swap_in, 0);
    return c;
}

static void test_fold_detects_drop_repeat_swap(void **state)
{
    (void)state;
    const uint64_t n = 5000;
    zp_coverage want = fold_except(n, -1, -1, -1);
    for (int64_t k = 0; k < (int64_t)n; k += 97) {
        zp_coverage d = fold_except(n, k, -1, -1);
        assert_false(zp_coverage_equal(&d, &want));
        assert_int_equal(d.count, n - 1); /* missing: fewer */
        zp_coverage r = fold_except(n, -1, k, -1);
        assert_false(zp_coverage_equal(&r, &want));
        assert_int_equal(r.count, n + 1); /* repeated: more */
        /* one sample in place of another: same count, other digest */
        zp_coverage s = fold_except(n, k, -1, (k + 1) % (int64_t)n);
        assert_int_equal(s.count, n);
        assert_false(zp_coverage_equal(&s, &want));
    }
    /* the pass is part of the sample */
    assert_true(zp_coverage_mix(5, 0) != zp_coverage_mix(5, 1));
    /* the xor alone misses a sample repeated twice more; the sum does not */
    zp_coverage t = fold_except(n, -1, -1, 7);
    zp_coverage_fold(&t, 7, 0);
    assert_int_equal(t.xr, want.xr);
    t.count = want.count;
    assert_false(zp_coverage_equal(&t, &want));
}

/* ------------------------------------------------------------ pipelines */

typedef struct run_t {
    zp_dataset *ds;
    zp_worksource *ws;
    zp_pipeline *p;
} run_t;

typedef struct setup_t {
    zp_pack_mode mode;
    uint32_t rank, world;
    uint32_t epochs;
    zp_remainder remainder;
    zp_map_fn map; /* may be NULL */
} setup_t;

static void run_open(run_t *r, const setup_t *s)
{
    zp_dataset_config dc;
    zp_dataset_config_init(&dc);
    assert_int_equal(zp_dataset_create(&dc, &r->ds), ZP_OK);
    const char *globs[3] = {"web-*.jsonl", "code-*.jsonl", "books-*.jsonl"};
    for (int i = 0; i < 3; i++) {
        char *g = zpt_path(g_dir, globs[i]);
        assert_int_equal(zp_dataset_add(r->ds, g), ZP_OK);
        free(g);
    }
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.seed = 11;
    wc.rank = s->rank;
    wc.world_size = s->world;
    wc.shuffle_block_shards = 2;
    wc.parts = g_parts;
    wc.n_parts = 3;
    wc.epoch_samples = g_draws;
    wc.remainder = s->remainder;
    assert_int_equal(zp_worksource_create(r->ds, &wc, &r->ws), ZP_OK);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = 2;
    pc.epochs = s->epochs;
    pc.chunk_samples = 16;
    pc.microbatch_size = 4;
    assert_int_equal(zp_pipeline_create(r->ws, &pc, &r->p), ZP_OK);
    if (s->map)
        assert_int_equal(zp_pipeline_map_transform(r->p, s->map, NULL, 2, NULL), ZP_OK);
    if (s->mode != ZP_PACK_RECORDS) {
        assert_int_equal(zp_pipeline_tokenize(r->p, "gpt2", "text", 2), ZP_OK);
        assert_int_equal(zp_pipeline_pack(r->p, s->mode, 48), ZP_OK);
    }
}

static void run_close(run_t *r)
{
    zp_pipeline_destroy(r->p);
    zp_worksource_destroy(r->ws);
    zp_dataset_destroy(r->ds);
    memset(r, 0, sizeof *r);
}

/* The digest of epoch e's stream under the remainder policy (world w). */
static zp_coverage stream_digest(uint32_t e, uint32_t w, zp_remainder rem)
{
    setup_t s = {ZP_PACK_RECORDS, 0, w, 1, rem, NULL};
    run_t r;
    run_open(&r, &s);
    uint64_t keep = rem == ZP_REMAINDER_PAD ? g_draws : w * zp_worksource_samples_per_rank(r.ws);
    zp_coverage c;
    assert_int_equal(zp_worksource_coverage(r.ws, e, 0, keep, &c), ZP_OK);
    /* past the stream: refused */
    zp_coverage x;
    assert_int_equal(zp_worksource_coverage(r.ws, e, 1, g_draws, &x), ZP_ERR_INVALID);
    run_close(&r);
    return c;
}

static void test_stream_is_the_plans_merged(void **state)
{
    (void)state;
    for (int rem = 0; rem < 2; rem++)
        for (uint32_t w = 1; w <= 5; w++) {
            zp_coverage all = {0};
            for (uint32_t rank = 0; rank < w; rank++) {
                setup_t s = {ZP_PACK_RECORDS, rank, w, 1, (zp_remainder)rem, NULL};
                run_t r;
                run_open(&r, &s);
                for (uint32_t e = 1; e < 2; e++)
                    for (uint64_t pos = 0; pos < zp_worksource_samples_per_rank(r.ws); pos++) {
                        zp_sample smp;
                        assert_int_equal(zp_worksource_sample(r.ws, e, pos, &smp), ZP_OK);
                        if (!smp.padded)
                            zp_coverage_fold(&all, smp.global_id, smp.pass);
                    }
                run_close(&r);
            }
            zp_coverage want = stream_digest(1, w, (zp_remainder)rem);
            if (!zp_coverage_equal(&all, &want))
                fail_msg("%u ranks, %s: the plans merged differ from the stream", w,
                         rem ? "drop" : "pad");
        }
}

/* The fast epoch digest (whole passes folded by id, slices) equals the
 * position-by-position one, with and without a mixture, for epochs that
 * are whole passes, parts of passes and several passes, pad and drop. */
static void test_epoch_digest_fast_path(void **state)
{
    (void)state;
    static const uint64_t draws[] = {0, 600, 1700, 97};
    for (int mix = 0; mix < 2; mix++)
        for (size_t d = 0; d < sizeof draws / sizeof draws[0]; d++)
            for (int rem = 0; rem < 2; rem++)
                for (uint32_t w = 1; w <= 4; w += 3) {
                    zp_dataset_config dc;
                    zp_dataset_config_init(&dc);
                    zp_dataset *ds;
                    assert_int_equal(zp_dataset_create(&dc, &ds), ZP_OK);
                    const char *globs[3] = {"web-*.jsonl", "code-*.jsonl", "books-*.jsonl"};
                    for (int i = 0; i < 3; i++) {
                        char *g = zpt_path(g_dir, globs[i]);
                        assert_int_equal(zp_dataset_add(ds, g), ZP_OK);
                        free(g);
                    }
                    zp_worksource_config wc;
                    zp_worksource_config_init(&wc);
                    wc.seed = 5;
                    wc.world_size = w;
                    wc.shuffle_block_shards = 2;
                    wc.remainder = (zp_remainder)rem;
                    wc.epoch_samples = draws[d];
                    if (mix) {
                        wc.parts = g_parts;
                        wc.n_parts = 3;
                    }
                    zp_worksource *ws;
                    assert_int_equal(zp_worksource_create(ds, &wc, &ws), ZP_OK);
                    uint64_t n = zp_worksource_draws_per_epoch(ws);
                    uint64_t keep = rem ? w * zp_worksource_samples_per_rank(ws) : n;
                    for (uint32_t e = 0; e < 4; e++) {
                        zp_coverage slow, fast[4];
                        assert_int_equal(zp_worksource_coverage(ws, e, 0, keep, &slow), ZP_OK);
                        for (uint32_t k = 1; k <= 4; k++) {
                            zp_coverage all = {0};
                            for (uint32_t i = 0; i < k; i++) {
                                assert_int_equal(zp_worksource_epoch_coverage(ws, e, i, k, &fast[i]),
                                                 ZP_OK);
                                zp_coverage_merge(&all, &fast[i]);
                            }
                            if (!zp_coverage_equal(&all, &slow))
                                fail_msg("mix %d, %llu draws, %s, %u ranks, epoch %u, %u slices: "
                                         "%llu samples, want %llu",
                                         mix, (unsigned long long)n, rem ? "drop" : "pad", w, e, k,
                                         (unsigned long long)all.count,
                                         (unsigned long long)slow.count);
                        }
                    }
                    zp_coverage x;
                    assert_int_equal(zp_worksource_epoch_coverage(ws, 0, 2, 2, &x), ZP_ERR_INVALID);
                    zp_worksource_destroy(ws);
                    zp_dataset_destroy(ds);
                }
}

/* Runs rank s->rank to the end (or `batches` batches, 0: the end), then
 * checks delivered == expected for epochs 0 .. epochs-1 (when `own` is
 * set) and adds the delivered digests to job[]. Returns the state saved
 * at the stop when asked (*state_out). */
static void run_rank(const setup_t *s, const char *restore, uint64_t batches, int own,
                     zp_coverage *job, char **state_out)
{
    run_t r;
    run_open(&r, s);
    if (restore) {
        zp_status st = zp_pipeline_state_restore(r.p, restore, strlen(restore));
        if (st != ZP_OK)
            fail_msg("rank %u of %u: restore: %s", s->rank, s->world, zp_pipeline_errmsg(r.p));
    }
    const zp_batch *b;
    zp_status st = ZP_OK;
    for (uint64_t i = 0; (batches == 0 || i < batches) && (st = zp_pipeline_next(r.p, &b)) == ZP_OK;
         i++)
        ;
    if (batches == 0)
        assert_int_equal(st, ZP_END);
    if (state_out)
        assert_int_equal(zp_pipeline_state_save(r.p, state_out, NULL), ZP_OK);
    /* the epochs delivered (a run resumed inside epoch 1 runs epochs 1
     * and 2): each one's digests */
    uint32_t ep[8];
    size_t n = zp_pipeline_coverage_epochs(r.p, ep, 8);
    assert_true(n >= 1 && n <= 3);
    for (size_t i = 0; i < n; i++) {
        uint32_t e = ep[i];
        zp_epoch_coverage c;
        assert_int_equal(zp_pipeline_coverage(r.p, e, 1, &c), ZP_OK);
        assert_int_equal(c.epoch, e);
        if (own && batches == 0) {
            assert_true(c.checked);
            assert_true(c.finished);
            if (!zp_coverage_equal(&c.delivered, &c.expected))
                fail_msg("rank %u of %u, mode %d, epoch %u: delivered %llu samples, expected "
                         "%llu, digests differ",
                         s->rank, s->world, (int)s->mode, e, (unsigned long long)c.delivered.count,
                         (unsigned long long)c.expected.count);
        }
        if (job && e < 3)
            zp_coverage_merge(&job[e], &c.delivered);
    }
    run_close(&r);
}

static void whole_epochs(zp_pack_mode mode, uint32_t world)
{
    zp_coverage job[3] = {{0}};
    for (uint32_t rank = 0; rank < world; rank++) {
        setup_t s = {mode, rank, world, 2, ZP_REMAINDER_PAD, NULL};
        run_rank(&s, NULL, 0, 1, job, NULL);
    }
    for (uint32_t e = 0; e < 2; e++) {
        zp_coverage want = stream_digest(e, world, ZP_REMAINDER_PAD);
        if (!zp_coverage_equal(&job[e], &want))
            fail_msg("mode %d, %u ranks, epoch %u: job %llu samples, stream %llu", (int)mode, world,
                     e, (unsigned long long)job[e].count, (unsigned long long)want.count);
    }
}

static void test_records_whole_epochs(void **state)
{
    (void)state;
    whole_epochs(ZP_PACK_RECORDS, 1);
    whole_epochs(ZP_PACK_RECORDS, 3);
}

static void test_tokens_whole_epochs(void **state)
{
    (void)state;
    whole_epochs(ZP_PACK_CONCAT, 1);
    whole_epochs(ZP_PACK_BESTFIT, 1);
    whole_epochs(ZP_PACK_PAD, 3);
}

/* Stop after k batches, save, restore in a fresh pipeline, run to the
 * end: the digests carry over and still certify each epoch. */
static void resume_at(zp_pack_mode mode, uint64_t k)
{
    const uint32_t world = 2;
    zp_coverage job[3] = {{0}};
    for (uint32_t rank = 0; rank < world; rank++) {
        setup_t s = {mode, rank, world, 2, ZP_REMAINDER_PAD, NULL};
        char *st = NULL;
        run_rank(&s, NULL, k, 0, NULL, &st);
        assert_non_null(strstr(st, "\"coverage\""));
        run_rank(&s, st, 0, 1, job, NULL);
        free(st);
    }
    for (uint32_t e = 0; e < 2; e++) {
        zp_coverage want = stream_digest(e, world, ZP_REMAINDER_PAD);
        if (!zp_coverage_equal(&job[e], &want))
            fail_msg("mode %d resumed after %llu batches, epoch %u: job %llu samples, stream %llu",
                     (int)mode, (unsigned long long)k, e, (unsigned long long)job[e].count,
                     (unsigned long long)want.count);
    }
}

static void test_resume_keeps_certificate(void **state)
{
    (void)state;
    static const uint64_t at[] = {1, 17, 40, 75, 90};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        resume_at(ZP_PACK_RECORDS, at[i]);
        resume_at(ZP_PACK_CONCAT, at[i]);
        resume_at(ZP_PACK_BESTFIT, at[i]);
    }
}

/* 4 ranks stop in lock step inside epoch 0, the job state restores on 3:
 * every new rank delivers its expected digest, and the job's (rank 0
 * carrying the old ranks' sums) is the stream's, for both epochs. */
static void elastic(zp_pack_mode mode, uint64_t k)
{
    const uint32_t W = 4, W2 = 3;
    char *states[4];
    size_t lens[4];
    for (uint32_t r = 0; r < W; r++) {
        setup_t s = {mode, r, W, 2, ZP_REMAINDER_PAD, NULL};
        run_rank(&s, NULL, k, 0, NULL, &states[r]);
        lens[r] = strlen(states[r]);
    }
    char *job = NULL, err[512];
    if (zp_state_merge((const char *const *)states, lens, W, &job, NULL, err, sizeof err) != ZP_OK)
        fail_msg("merge: %s", err);
    for (uint32_t r = 0; r < W; r++)
        free(states[r]);
    zp_coverage sum[3] = {{0}};
    for (uint32_t r = 0; r < W2; r++) {
        setup_t s = {mode, r, W2, 2, ZP_REMAINDER_PAD, NULL};
        run_rank(&s, job, 0, 1, sum, NULL);
    }
    free(job);
    for (uint32_t e = 0; e < 2; e++) {
        /* epoch 1 is read by 3 ranks from the start: its stream is the same */
        zp_coverage want = stream_digest(e, W, ZP_REMAINDER_PAD);
        if (!zp_coverage_equal(&sum[e], &want))
            fail_msg("mode %d, elastic after %llu batches, epoch %u: job %llu samples, stream "
                     "%llu",
                     (int)mode, (unsigned long long)k, e, (unsigned long long)sum[e].count,
                     (unsigned long long)want.count);
    }
}

static void test_elastic_keeps_certificate(void **state)
{
    (void)state;
    elastic(ZP_PACK_RECORDS, 12);
    elastic(ZP_PACK_CONCAT, 9);
}

/* A map callback that drops the record of global id 5 (on whichever rank
 * reads it). */
static zp_status drop_one(void *user, zp_record *rec)
{
    (void)user;
    if (zp_record_sample(rec)->global_id == 5 && zp_record_sample(rec)->pass == 0)
        zp_record_drop(rec);
    return ZP_OK;
}

static void test_dropped_sample_detected(void **state)
{
    (void)state;
    const uint32_t world = 3;
    zp_coverage job[3] = {{0}};
    int failing = 0;
    for (uint32_t rank = 0; rank < world; rank++) {
        setup_t s = {ZP_PACK_RECORDS, rank, world, 1, ZP_REMAINDER_PAD, drop_one};
        run_t r;
        run_open(&r, &s);
        const zp_batch *b;
        while (zp_pipeline_next(r.p, &b) == ZP_OK)
            ;
        zp_epoch_coverage c;
        assert_int_equal(zp_pipeline_coverage(r.p, 0, 1, &c), ZP_OK);
        if (!zp_coverage_equal(&c.delivered, &c.expected)) {
            failing++;
            assert_int_equal(c.delivered.count + 1, c.expected.count); /* one missing */
            zp_pipeline_counts n;
            zp_pipeline_get_counts(r.p, &n);
            assert_int_equal(n.filtered, 1);
        }
        zp_coverage_merge(&job[0], &c.delivered);
        run_close(&r);
    }
    assert_int_equal(failing, 1); /* exactly the rank that read it */
    zp_coverage want = stream_digest(0, world, ZP_REMAINDER_PAD);
    assert_false(zp_coverage_equal(&job[0], &want));
    assert_int_equal(job[0].count + 1, want.count);
}

/* A state with a malformed digest is refused, naming the field. */
static void test_state_coverage_field(void **state)
{
    (void)state;
    setup_t s = {ZP_PACK_RECORDS, 0, 1, 1, ZP_REMAINDER_PAD, NULL};
    char *st = NULL;
    run_rank(&s, NULL, 5, 0, NULL, &st);
    char *at = strstr(st, "\"sum\": \"");
    assert_non_null(at);
    at[8] = 'X';
    run_t r;
    run_open(&r, &s);
    assert_int_equal(zp_pipeline_state_restore(r.p, st, strlen(st)), ZP_ERR_FORMAT);
    assert_non_null(strstr(zp_pipeline_errmsg(r.p), "coverage[0].sum"));
    run_close(&r);
    free(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fold_order_independent),
        cmocka_unit_test(test_fold_detects_drop_repeat_swap),
        cmocka_unit_test(test_stream_is_the_plans_merged),
        cmocka_unit_test(test_epoch_digest_fast_path),
        cmocka_unit_test(test_records_whole_epochs),
        cmocka_unit_test(test_tokens_whole_epochs),
        cmocka_unit_test(test_resume_keeps_certificate),
        cmocka_unit_test(test_elastic_keeps_certificate),
        cmocka_unit_test(test_dropped_sample_detected),
        cmocka_unit_test(test_state_coverage_field),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
