/*
 * test_worksource.c - the WorkSource's guarantees: exactly once, equal
 * counts, remainder policies, determinism, shuffle with locality, the
 * within-block bijection, resume, and invalid settings.
 *
 * Built with tests/fake_dataset.c (shards given as record counts) instead of
 * libzephon, so it needs no files.
 *
 * `test_worksource --bench` measures the cost of a lookup instead (not run
 * by ctest).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/util.h"
#include "zephon/worksource.h"

/* tests/fake_dataset.c */
zp_status fake_dataset_create(const uint64_t *counts, size_t n, int indexed, zp_dataset **out);
void fake_dataset_set_index_status(zp_dataset *ds, zp_status st);
int fake_dataset_index_calls(const zp_dataset *ds);
void fake_dataset_destroy(zp_dataset *ds);
void fake_dataset_set_segment_records(zp_dataset *ds, uint64_t per);

/* ---------------------------------------------------------------- helpers */

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static zp_dataset *mkds(const uint64_t *counts, size_t n)
{
    zp_dataset *ds = NULL;
    assert_int_equal(fake_dataset_create(counts, n, 1, &ds), ZP_OK);
    return ds;
}

static zp_worksource_config mkcfg(uint64_t seed, uint32_t rank, uint32_t world, int shuffle,
                                  uint32_t block, zp_remainder rem)
{
    zp_worksource_config c;
    zp_worksource_config_init(&c);
    c.seed = seed;
    c.rank = rank;
    c.world_size = world;
    c.shuffle = shuffle;
    c.shuffle_block_shards = block;
    c.remainder = rem;
    return c;
}

static zp_worksource *mkws(zp_dataset *ds, const zp_worksource_config *c)
{
    zp_worksource *ws = NULL;
    assert_int_equal(zp_worksource_create(ds, c, &ws), ZP_OK);
    assert_non_null(ws);
    return ws;
}

static uint64_t sum_counts(const uint64_t *counts, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += counts[i];
    return s;
}

/* Deterministic test data (not the library's hashing). */
static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

/* Check one sample against the dataset it came from. */
static void check_sample(const zp_sample *s, const uint64_t *counts, size_t n, uint32_t epoch,
                         uint64_t position)
{
    assert_true(s->shard < n);
    assert_true(s->record < counts[s->shard]);
    assert_int_equal(s->global_id, sum_counts(counts, s->shard) + s->record);
    assert_int_equal(s->epoch, epoch);
    assert_int_equal(s->position, position);
}

/* Field by field: the struct has padding. */
static void assert_same_sample(const zp_sample *a, const zp_sample *b)
{
    assert_int_equal(a->shard, b->shard);
    assert_int_equal(a->record, b->record);
    assert_int_equal(a->global_id, b->global_id);
    assert_int_equal(a->epoch, b->epoch);
    assert_int_equal(a->position, b->position);
    assert_int_equal(a->padded, b->padded);
}

/*
 * Run every rank of one configuration over `epoch` and check the partition:
 * equal counts; PAD: every sample at least once, the unpadded ones exactly
 * once, repeats == padded() == W*per - N; DROP: no sample twice, dropped()
 * == N - W*per samples never delivered.
 */
static void check_partition(const uint64_t *counts, size_t n, uint32_t world, int shuffle,
                            uint32_t block, zp_remainder rem, uint64_t seed, uint32_t epoch)
{
    zp_dataset *ds = mkds(counts, n);
    const uint64_t N = sum_counts(counts, n);
    const uint64_t per = rem == ZP_REMAINDER_PAD ? (N + world - 1) / world : N / world;
    if (per == 0) { /* DROP with fewer samples than ranks: refused */
        zp_worksource_config c = mkcfg(seed, 0, world, shuffle, block, rem);
        zp_worksource *ws = NULL;
        assert_int_equal(zp_worksource_create(ds, &c, &ws), ZP_ERR_INVALID);
        assert_non_null(ws); /* error-only handle */
        assert_non_null(strstr(zp_worksource_errmsg(ws), "every rank would get no sample"));
        zp_worksource_destroy(ws);
        fake_dataset_destroy(ds);
        return;
    }
    uint32_t *hits = calloc(N, sizeof *hits);
    uint32_t *hits_unpadded = calloc(N, sizeof *hits_unpadded);
    assert_non_null(hits);
    assert_non_null(hits_unpadded);
    uint64_t padded_flags = 0;
    for (uint32_t r = 0; r < world; r++) {
        zp_worksource_config c = mkcfg(seed, r, world, shuffle, block, rem);
        zp_worksource *ws = mkws(ds, &c);
        assert_int_equal(zp_worksource_samples_per_rank(ws), per);
        if (rem == ZP_REMAINDER_PAD) {
            assert_int_equal(zp_worksource_padded(ws), world * per - N);
            assert_int_equal(zp_worksource_dropped(ws), 0);
        } else {
            assert_int_equal(zp_worksource_dropped(ws), N - world * per);
            assert_int_equal(zp_worksource_padded(ws), 0);
        }
        for (uint64_t p = 0; p < per; p++) {
            zp_sample s;
            assert_int_equal(zp_worksource_sample(ws, epoch, p, &s), ZP_OK);
            check_sample(&s, counts, n, epoch, p);
            hits[s.global_id]++;
            if (s.padded)
                padded_flags++;
            else
                hits_unpadded[s.global_id]++;
        }
        zp_sample s;
        assert_int_equal(zp_worksource_sample(ws, epoch, per, &s), ZP_ERR_INVALID);
        zp_worksource_destroy(ws);
    }
    uint64_t delivered = 0, repeats = 0;
    for (uint64_t i = 0; i < N; i++) {
        delivered += hits[i] > 0;
        repeats += hits[i] > 1 ? hits[i] - 1 : 0;
        if (rem == ZP_REMAINDER_PAD) {
            assert_true(hits[i] >= 1);
            assert_int_equal(hits_unpadded[i], 1);
        } else {
            assert_true(hits[i] <= 1);
        }
    }
    if (rem == ZP_REMAINDER_PAD) {
        assert_int_equal(repeats, world * per - N);
        assert_int_equal(padded_flags, world * per - N);
    } else {
        assert_int_equal(repeats, 0);
        assert_int_equal(padded_flags, 0);
        assert_int_equal(delivered, world * per);
        assert_int_equal(N - delivered, N - world * per);
    }
    free(hits);
    free(hits_unpadded);
    fake_dataset_destroy(ds);
}

static void check_partition_all(const uint64_t *counts, size_t n)
{
    static const uint32_t blocks[] = {1, 3, 8};
    for (uint32_t world = 1; world <= 8; world++)
        for (int shuffle = 0; shuffle <= 1; shuffle++)
            for (size_t b = 0; b < ARRAY_LEN(blocks); b++)
                for (uint32_t epoch = 0; epoch < 2; epoch++) {
                    check_partition(counts, n, world, shuffle, blocks[b], ZP_REMAINDER_PAD, 42,
                                    epoch);
                    check_partition(counts, n, world, shuffle, blocks[b], ZP_REMAINDER_DROP, 42,
                                    epoch);
                }
}

/* ------------------------------------------------------------------ tests */

static void test_config_defaults(void **state)
{
    (void)state;
    zp_worksource_config c;
    memset(&c, 0xff, sizeof c);
    zp_worksource_config_init(&c);
    assert_int_equal(c.seed, 0);
    assert_int_equal(c.rank, 0);
    assert_int_equal(c.world_size, 1);
    assert_int_equal(c.shuffle, 1);
    assert_int_equal(c.shuffle_block_shards, 8);
    assert_int_equal(c.remainder, ZP_REMAINDER_PAD);

    static const uint64_t counts[] = {4, 5};
    zp_dataset *ds = mkds(counts, 2);
    zp_worksource *ws = NULL;
    assert_int_equal(zp_worksource_create(ds, NULL, &ws), ZP_OK);
    assert_ptr_equal(zp_worksource_dataset(ws), ds);
    const zp_worksource_config *got = zp_worksource_get_config(ws);
    assert_non_null(got);
    assert_int_equal(got->world_size, 1);
    assert_int_equal(got->shuffle_block_shards, 8);
    assert_int_equal(zp_worksource_samples_per_rank(ws), 9);
    zp_worksource_destroy(ws);
    zp_worksource_destroy(NULL);
    fake_dataset_destroy(ds);
}

static void test_exactly_once_uneven_shards(void **state)
{
    (void)state;
    static const uint64_t counts[] = {1, 2, 997, 5000, 13, 64, 1, 250, 3};
    check_partition_all(counts, ARRAY_LEN(counts));
}

static void test_exactly_once_many_small_shards(void **state)
{
    (void)state;
    uint64_t counts[60];
    uint64_t rng = 7;
    for (size_t i = 0; i < ARRAY_LEN(counts); i++)
        counts[i] = 1 + xorshift(&rng) % 40;
    check_partition_all(counts, ARRAY_LEN(counts));
}

static void test_exactly_once_fewer_shards_than_ranks(void **state)
{
    (void)state;
    static const uint64_t three[] = {3, 1, 2};   /* N = 6 < W = 8 */
    static const uint64_t three_b[] = {5, 7, 11}; /* N = 23 */
    static const uint64_t one[] = {1};            /* N = 1 */
    check_partition_all(three, ARRAY_LEN(three));
    check_partition_all(three_b, ARRAY_LEN(three_b));
    check_partition_all(one, ARRAY_LEN(one));

    /* N < W with PAD: every rank still gets one sample, N repeated. */
    zp_dataset *ds = mkds(three, 3);
    zp_worksource_config c = mkcfg(1, 7, 8, 1, 8, ZP_REMAINDER_PAD);
    zp_worksource *ws = mkws(ds, &c);
    assert_int_equal(zp_worksource_samples_per_rank(ws), 1);
    assert_int_equal(zp_worksource_padded(ws), 2);
    zp_sample s;
    assert_int_equal(zp_worksource_sample(ws, 0, 0, &s), ZP_OK);
    assert_int_equal(s.padded, 1);
    zp_worksource_destroy(ws);
    fake_dataset_destroy(ds);
}

/* With N < W and a repeat of the whole dataset needed more than once
 * (W >= 2N), positions wrap modulo N. */
static void test_pad_wraps_more_than_once(void **state)
{
    (void)state;
    static const uint64_t counts[] = {2};
    zp_dataset *ds = mkds(counts, 1);
    uint32_t hits[2] = {0, 0};
    for (uint32_t r = 0; r < 7; r++) {
        zp_worksource_config c = mkcfg(3, r, 7, 0, 8, ZP_REMAINDER_PAD);
        zp_worksource *ws = mkws(ds, &c);
        zp_sample s;
        assert_int_equal(zp_worksource_sample(ws, 0, 0, &s), ZP_OK);
        assert_int_equal(s.global_id, r % 2);
        assert_int_equal(s.padded, r >= 2);
        hits[s.global_id]++;
        assert_int_equal(zp_worksource_padded(ws), 5);
        zp_worksource_destroy(ws);
    }
    assert_int_equal(hits[0], 4);
    assert_int_equal(hits[1], 3);
    fake_dataset_destroy(ds);
}

static void read_stream(zp_worksource *ws, uint64_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        zp_sample s;
        assert_int_equal(zp_worksource_next(ws, &s), ZP_OK);
        ids[i] = s.global_id;
    }
}

static size_t count_differences(const uint64_t *a, const uint64_t *b, size_t n)
{
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += a[i] != b[i];
    return d;
}

static void test_determinism(void **state)
{
    (void)state;
    static const uint64_t counts[] = {100, 3, 250, 1, 77, 500, 20, 9, 40, 40, 40, 60};
    zp_dataset *ds = mkds(counts, ARRAY_LEN(counts));
    zp_worksource_config c = mkcfg(1234, 1, 3, 1, 2, ZP_REMAINDER_PAD);
    zp_worksource *a = mkws(ds, &c);
    zp_worksource *b = mkws(ds, &c);
    const size_t per = (size_t)zp_worksource_samples_per_rank(a);
    const size_t n = per * 5 / 2; /* two and a half epochs */
    uint64_t *x = malloc(n * sizeof *x);
    uint64_t *y = malloc(n * sizeof *y);
    assert_non_null(x);
    assert_non_null(y);
    read_stream(a, x, n);
    read_stream(b, y, n);
    assert_memory_equal(x, y, n * sizeof *x);

    /* Another seed: a different order. */
    zp_worksource_config c2 = c;
    c2.seed = 1235;
    zp_worksource *d = mkws(ds, &c2);
    read_stream(d, y, n);
    assert_true(count_differences(x, y, n) > n / 2);

    zp_worksource_destroy(a);
    zp_worksource_destroy(b);
    zp_worksource_destroy(d);
    free(x);
    free(y);
    fake_dataset_destroy(ds);
}

static void test_epochs_differ(void **state)
{
    (void)state;
    static const uint64_t counts[] = {100, 3, 250, 1, 77, 500, 20, 9, 40, 40, 40, 60};
    zp_dataset *ds = mkds(counts, ARRAY_LEN(counts));
    zp_worksource_config c = mkcfg(99, 0, 1, 1, 4, ZP_REMAINDER_PAD);
    zp_worksource *ws = mkws(ds, &c);
    const size_t per = (size_t)zp_worksource_samples_per_rank(ws);
    uint64_t *e[3];
    for (uint32_t k = 0; k < 3; k++) {
        e[k] = malloc(per * sizeof *e[k]);
        assert_non_null(e[k]);
        for (size_t p = 0; p < per; p++) {
            zp_sample s;
            assert_int_equal(zp_worksource_sample(ws, k, p, &s), ZP_OK);
            e[k][p] = s.global_id;
        }
    }
    assert_true(count_differences(e[0], e[1], per) > per / 2);
    assert_true(count_differences(e[1], e[2], per) > per / 2);
    assert_true(count_differences(e[0], e[2], per) > per / 2);

    /* The shard order itself changes between epochs: first shard read. */
    uint64_t singles[64];
    for (size_t i = 0; i < 64; i++)
        singles[i] = 1;
    zp_dataset *ds1 = mkds(singles, 64);
    zp_worksource_config c1 = mkcfg(5, 0, 1, 1, 1, ZP_REMAINDER_PAD);
    zp_worksource *w1 = mkws(ds1, &c1);
    uint64_t o0[64], o1[64];
    for (uint64_t p = 0; p < 64; p++) {
        zp_sample s;
        assert_int_equal(zp_worksource_sample(w1, 0, p, &s), ZP_OK);
        o0[p] = s.shard;
        assert_int_equal(zp_worksource_sample(w1, 1, p, &s), ZP_OK);
        o1[p] = s.shard;
    }
    assert_true(count_differences(o0, o1, 64) > 32);
    zp_worksource_destroy(w1);
    fake_dataset_destroy(ds1);

    for (int k = 0; k < 3; k++)
        free(e[k]);
    zp_worksource_destroy(ws);
    fake_dataset_destroy(ds);
}

static void test_shuffle_off_is_dataset_order(void **state)
{
    (void)state;
    static const uint64_t counts[] = {1, 2, 997, 5000, 13};
    const uint64_t N = sum_counts(counts, ARRAY_LEN(counts));
    zp_dataset *ds = mkds(counts, ARRAY_LEN(counts));

    zp_worksource_config c = mkcfg(77, 0, 1, 0, 8, ZP_REMAINDER_PAD);
    zp_worksource *ws = mkws(ds, &c);
    for (uint32_t epoch = 0; epoch < 3; epoch += 2)
        for (uint64_t p = 0; p < N; p++) {
            zp_sample s;
            assert_int_equal(zp_worksource_sample(ws, epoch, p, &s), ZP_OK);
            assert_int_equal(s.global_id, p);
            check_sample(&s, counts, ARRAY_LEN(counts), epoch, p);
        }
    zp_worksource_destroy(ws);

    /* Three ranks: contiguous ranges of the dataset order. */
    for (int rem = 0; rem <= 1; rem++) {
        for (uint32_t r = 0; r < 3; r++) {
            zp_worksource_config c3 = mkcfg(77, r, 3, 0, 8, (zp_remainder)rem);
            zp_worksource *w3 = mkws(ds, &c3);
            uint64_t per = zp_worksource_samples_per_rank(w3);
            for (uint64_t p = 0; p < per; p++) {
                zp_sample s;
                assert_int_equal(zp_worksource_sample(w3, 1, p, &s), ZP_OK);
                assert_int_equal(s.global_id, (r * per + p) % N);
            }
            zp_worksource_destroy(w3);
        }
    }
    fake_dataset_destroy(ds);
}

/* Each rank's epoch touches about shards/W + 2*block shards. */
static void check_locality(const uint64_t *counts, size_t n, uint32_t world, uint32_t block,
                           size_t bound)
{
    zp_dataset *ds = mkds(counts, n);
    unsigned char *seen = malloc(n);
    assert_non_null(seen);
    for (uint32_t r = 0; r < world; r++) {
        zp_worksource_config c = mkcfg(2024, r, world, 1, block, ZP_REMAINDER_PAD);
        zp_worksource *ws = mkws(ds, &c);
        memset(seen, 0, n);
        size_t distinct = 0;
        uint64_t per = zp_worksource_samples_per_rank(ws);
        for (uint64_t p = 0; p < per; p++) {
            zp_sample s;
            assert_int_equal(zp_worksource_sample(ws, 3, p, &s), ZP_OK);
            if (!seen[s.shard]) {
                seen[s.shard] = 1;
                distinct++;
            }
        }
        assert_true(distinct <= bound);
        zp_worksource_destroy(ws);
    }
    free(seen);
    fake_dataset_destroy(ds);
}

static void test_locality(void **state)
{
    (void)state;
    enum { S = 1000 };
    uint64_t *equal = malloc(S * sizeof *equal);
    uint64_t *uneven = malloc(S * sizeof *uneven);
    assert_non_null(equal);
    assert_non_null(uneven);
    uint64_t rng = 11;
    for (size_t i = 0; i < S; i++) {
        equal[i] = 37;
        uneven[i] = 80 + xorshift(&rng) % 41; /* 80..120 */
    }
    static const uint32_t worlds[] = {4, 8, 16};
    static const uint32_t blocks[] = {1, 4, 8};
    for (size_t w = 0; w < ARRAY_LEN(worlds); w++)
        for (size_t b = 0; b < ARRAY_LEN(blocks); b++) {
            uint32_t W = worlds[w], B = blocks[b];
            /* Equal shards: the range spans S/W shards, plus a partial block
             * at each end, plus (last rank) the padding's wrap to the start. */
            check_locality(equal, S, W, B, (S + W - 1) / W + 3 * B);
            /* Shards within 1.5x of each other in size. */
            check_locality(uneven, S, W, B, (3 * S / 2 + W - 1) / W + 3 * B);
        }
    /* The bound fails when the whole epoch is one block. */
    zp_dataset *ds = mkds(equal, S);
    zp_worksource_config c = mkcfg(2024, 0, 8, 1, S, ZP_REMAINDER_PAD);
    zp_worksource *ws = mkws(ds, &c);
    unsigned char *seen = calloc(S, 1);
    assert_non_null(seen);
    size_t distinct = 0;
    for (uint64_t p = 0; p < zp_worksource_samples_per_rank(ws); p++) {
        zp_sample s;
        assert_int_equal(zp_worksource_sample(ws, 0, p, &s), ZP_OK);
        distinct += !seen[s.shard];
        seen[s.shard] = 1;
    }
    assert_true(distinct > S / 2);
    free(seen);
    zp_worksource_destroy(ws);
    fake_dataset_destroy(ds);
    free(equal);
    free(uneven);
}

/* block = 1: a shard's samples are read contiguously (shuffled inside). */
static void test_block_one_reads_shards_whole(void **state)
{
    (void)state;
    uint64_t counts[40];
    uint64_t rng = 3;
    for (size_t i = 0; i < ARRAY_LEN(counts); i++)
        counts[i] = 1 + xorshift(&rng) % 30;
    zp_dataset *ds = mkds(counts, ARRAY_LEN(counts));
    zp_worksource_config c = mkcfg(8, 0, 1, 1, 1, ZP_REMAINDER_PAD);
    zp_worksource *ws = mkws(ds, &c);
    uint64_t N = zp_worksource_samples_per_rank(ws);
    size_t runs = 0;
    uint32_t prev = UINT32_MAX;
    size_t in_order = 0;
    uint64_t prev_rec = 0;
    for (uint64_t p = 0; p < N; p++) {
        zp_sample s;
        assert_int_equal(zp_worksource_sample(ws, 0, p, &s), ZP_OK);
        if (s.shard != prev)
            runs++;
        else
            in_order += s.record == prev_rec + 1;
        prev = s.shard;
        prev_rec = s.record;
    }
    assert_int_equal(runs, ARRAY_LEN(counts));   /* each shard one run */
    assert_true(in_order < (N - runs) / 4);       /* records shuffled within */
    zp_worksource_destroy(ws);
    fake_dataset_destroy(ds);
}

/* block = 8: a block's samples interleave its shards. */
static void test_block_mixes_its_shards(void **state)
{
    (void)state;
    uint64_t counts[16];
    for (size_t i = 0; i < 16; i++)
        counts[i] = 100;
    zp_dataset *ds = mkds(counts, 16);
    zp_worksource_config c = mkcfg(8, 0, 1, 1, 8, ZP_REMAINDER_PAD);
    zp_worksource *ws = mkws(ds, &c);
    size_t changes = 0;
    uint32_t prev = UINT32_MAX;
    unsigned char first_half[16] = {0};
    for (uint64_t p = 0; p < 1600; p++) {
        zp_sample s;
        assert_int_equal(zp_worksource_sample(ws, 0, p, &s), ZP_OK);
        changes += s.shard != prev;
        prev = s.shard;
        if (p < 800)
            first_half[s.shard] = 1;
    }
    size_t in_first = 0;
    for (size_t i = 0; i < 16; i++)
        in_first += first_half[i];
    assert_int_equal(in_first, 8); /* the first block holds 8 whole shards */
    assert_true(changes > 1000);   /* ~7/8 of neighbours differ in shard */
    zp_worksource_destroy(ws);
    fake_dataset_destroy(ds);
}

/* The within-block permutation is a bijection of [0, n): one shard of n
 * samples in one block, one rank, so the epoch is exactly that permutation. */
static void check_bijection(uint64_t n, uint64_t seed, uint32_t epoch)
{
    zp_dataset *ds = mkds(&n, 1);
    zp_worksource_config c = mkcfg(seed, 0, 1, 1, 1, ZP_REMAINDER_DROP);
    zp_worksource *ws = mkws(ds, &c);
    uint8_t *seen = calloc((size_t)(n + 7) / 8, 1);
    assert_non_null(seen);
    size_t fixed = 0;
    for (uint64_t p = 0; p < n; p++) {
        zp_sample s;
        assert_int_equal(zp_worksource_sample(ws, epoch, p, &s), ZP_OK);
        assert_true(s.record < n);
        assert_false(seen[s.record / 8] & (1u << (s.record % 8)));
        seen[s.record / 8] |= (uint8_t)(1u << (s.record % 8));
        fixed += s.record == p;
    }
    if (n >= 1000)
        assert_true(fixed < 20); /* a random permutation has ~1 fixed point */
    free(seen);
    zp_worksource_destroy(ws);
    fake_dataset_destroy(ds);
}

static void test_block_permutation_is_bijection(void **state)
{
    (void)state;
    for (uint64_t n = 1; n <= 1000; n++)
        check_bijection(n, n * 31 + 1, (uint32_t)(n % 3));
    static const uint64_t big[] = {1u << 16, (1u << 16) + 1, 1000003, (1u << 21) - 1, 3000000};
    for (size_t i = 0; i < ARRAY_LEN(big); i++)
        check_bijection(big[i], 5, 1);
}

/* Every block has its own permutation: equal-size blocks are not shuffled
 * alike. */
static void test_blocks_have_own_permutation(void **state)
{
    (void)state;
    uint64_t counts[6] = {50, 50, 50, 50, 50, 50};
    zp_dataset *ds = mkds(counts, 6);
    zp_worksource_config c = mkcfg(10, 0, 1, 1, 1, ZP_REMAINDER_PAD);
    zp_worksource *ws = mkws(ds, &c);
    uint64_t rec[6][50];
    for (uint64_t p = 0; p < 300; p++) {
        zp_sample s;
        assert_int_equal(zp_worksource_sample(ws, 0, p, &s), ZP_OK);
        rec[p / 50][p % 50] = s.record;
    }
    for (int i = 0; i < 6; i++)
        for (int j = i + 1; j < 6; j++)
            assert_true(count_differences(rec[i], rec[j], 50) > 25);
    zp_worksource_destroy(ws);
    fake_dataset_destroy(ds);
}

/* Tiny blocks are shuffled evenly too: over many seeds, each element of a
 * 5-, 7- or 9-element epoch lands in each place about equally often. */
static void test_small_domain_uniform(void **state)
{
    (void)state;
    static const uint64_t sizes[] = {5, 7, 9};
    enum { SEEDS = 20000 };
    for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
        uint64_t n = sizes[i];
        zp_dataset *ds = mkds(&n, 1);
        unsigned hist[9][9] = {{0}};
        for (uint64_t seed = 0; seed < SEEDS; seed++) {
            zp_worksource_config c = mkcfg(seed, 0, 1, 1, 1, ZP_REMAINDER_PAD);
            zp_worksource *ws = mkws(ds, &c);
            for (uint64_t p = 0; p < n; p++) {
                zp_sample s;
                assert_int_equal(zp_worksource_sample(ws, 0, p, &s), ZP_OK);
                hist[p][s.record]++;
            }
            zp_worksource_destroy(ws);
        }
        /* Uniform: SEEDS/n per cell, sd about 2% of it; 10% is > 4 sd. A
         * 4-round network is 14-18% off on some cells. */
        const double expect = (double)SEEDS / (double)n;
        for (uint64_t p = 0; p < n; p++)
            for (uint64_t r = 0; r < n; r++) {
                assert_true(hist[p][r] > 0.90 * expect);
                assert_true(hist[p][r] < 1.10 * expect);
            }
        fake_dataset_destroy(ds);
    }
}

static void test_next_matches_sample(void **state)
{
    (void)state;
    static const uint64_t counts[] = {10, 20, 30, 5, 5, 1};
    zp_dataset *ds = mkds(counts, ARRAY_LEN(counts));
    zp_worksource_config c = mkcfg(6, 2, 4, 1, 2, ZP_REMAINDER_PAD);
    zp_worksource *ws = mkws(ds, &c);
    zp_worksource *ref = mkws(ds, &c);
    uint64_t per = zp_worksource_samples_per_rank(ws);
    for (uint32_t epoch = 0; epoch < 3; epoch++)
        for (uint64_t p = 0; p < per; p++) {
            zp_sample a, b;
            assert_int_equal(zp_worksource_next(ws, &a), ZP_OK);
            assert_int_equal(zp_worksource_sample(ref, epoch, p, &b), ZP_OK);
            assert_same_sample(&a, &b);
            check_sample(&a, counts, ARRAY_LEN(counts), epoch, p);
        }
    zp_worksource_state st;
    zp_worksource_get_state(ws, &st);
    assert_int_equal(st.seed, 6);
    assert_int_equal(st.epoch, 3);
    assert_int_equal(st.position, 0);
    zp_worksource_destroy(ws);
    zp_worksource_destroy(ref);
    fake_dataset_destroy(ds);
}

/* Switching between epochs (more than the cache holds) gives the same
 * samples as a fresh worksource per epoch. */
static void test_epoch_cache_switching(void **state)
{
    (void)state;
    static const uint64_t counts[] = {10, 20, 30, 5, 5, 1, 7, 9, 100};
    zp_dataset *ds = mkds(counts, ARRAY_LEN(counts));
    zp_worksource_config c = mkcfg(6, 0, 1, 1, 2, ZP_REMAINDER_PAD);
    zp_worksource *ws = mkws(ds, &c);
    uint64_t per = zp_worksource_samples_per_rank(ws);
    zp_worksource *fresh[4];
    for (int e = 0; e < 4; e++)
        fresh[e] = mkws(ds, &c);
    uint64_t rng = 99;
    for (int i = 0; i < 2000; i++) {
        uint32_t e = (uint32_t)(xorshift(&rng) % 4);
        uint64_t p = xorshift(&rng) % per;
        zp_sample a, b;
        assert_int_equal(zp_worksource_sample(ws, e, p, &a), ZP_OK);
        assert_int_equal(zp_worksource_sample(fresh[e], e, p, &b), ZP_OK);
        assert_same_sample(&a, &b);
    }
    for (int e = 0; e < 4; e++)
        zp_worksource_destroy(fresh[e]);
    zp_worksource_destroy(ws);
    fake_dataset_destroy(ds);
}

static void test_resume(void **state)
{
    (void)state;
    static const uint64_t counts[] = {1, 2, 997, 50, 13, 400};
    zp_dataset *ds = mkds(counts, ARRAY_LEN(counts));
    for (int rem = 0; rem <= 1; rem++) {
        zp_worksource_config c = mkcfg(31337, 1, 3, 1, 2, (zp_remainder)rem);
        zp_worksource *probe = mkws(ds, &c);
        const uint64_t per = zp_worksource_samples_per_rank(probe);
        zp_worksource_destroy(probe);
        const uint64_t ks[] = {0, 1, per - 1, per, per + 5, 2 * per - 1, 2 * per + 3};
        for (size_t i = 0; i < ARRAY_LEN(ks); i++) {
            zp_worksource *a = mkws(ds, &c);
            zp_sample s, t;
            for (uint64_t k = 0; k < ks[i]; k++)
                assert_int_equal(zp_worksource_next(a, &s), ZP_OK);
            zp_worksource_state st;
            zp_worksource_get_state(a, &st);
            assert_int_equal(st.seed, 31337);
            assert_int_equal(st.epoch, ks[i] / per);
            assert_int_equal(st.position, ks[i] % per);
            zp_worksource *b = mkws(ds, &c);
            assert_int_equal(zp_worksource_set_state(b, &st), ZP_OK);
            for (uint64_t k = 0; k < 2 * per + 1; k++) { /* across epoch boundaries */
                assert_int_equal(zp_worksource_next(a, &s), ZP_OK);
                assert_int_equal(zp_worksource_next(b, &t), ZP_OK);
                assert_same_sample(&s, &t);
            }
            zp_worksource_destroy(a);
            zp_worksource_destroy(b);
        }

        /* position == per is the start of the next epoch. */
        zp_worksource *w = mkws(ds, &c);
        zp_worksource_state st = {31337, 4, per};
        assert_int_equal(zp_worksource_set_state(w, &st), ZP_OK);
        zp_worksource_get_state(w, &st);
        assert_int_equal(st.epoch, 5);
        assert_int_equal(st.position, 0);
        zp_worksource_destroy(w);
    }
    fake_dataset_destroy(ds);
}

static void test_last_epoch(void **state)
{
    (void)state;
    static const uint64_t counts[] = {3, 4};
    zp_dataset *ds = mkds(counts, 2);
    zp_worksource *ws = mkws(ds, NULL);
    zp_worksource_state st = {0, UINT32_MAX, 6};
    assert_int_equal(zp_worksource_set_state(ws, &st), ZP_OK);
    zp_sample s;
    assert_int_equal(zp_worksource_next(ws, &s), ZP_OK);
    assert_int_equal(s.epoch, UINT32_MAX);
    assert_int_equal(s.position, 6);
    assert_int_equal(zp_worksource_next(ws, &s), ZP_ERR_LIMIT);
    zp_worksource_get_state(ws, &st);
    assert_int_equal(st.epoch, UINT32_MAX);
    assert_int_equal(st.position, 7);
    zp_worksource_destroy(ws);
    fake_dataset_destroy(ds);
}

/* A failed create: status st, an error-only handle whose message contains
 * every string of `want` (NULL-terminated) and does not end in an empty
 * colon; every other call on it fails with ZP_ERR_STATE, keeping the
 * message. */
static void expect_create_fails(zp_dataset *ds, const zp_worksource_config *c, zp_status st,
                                const char *const *want)
{
    zp_worksource *ws = (zp_worksource *)(uintptr_t)1;
    assert_int_equal(zp_worksource_create(ds, c, &ws), st);
    assert_non_null(ws);
    assert_true(ws != (zp_worksource *)(uintptr_t)1);
    const char *m = zp_worksource_errmsg(ws);
    assert_non_null(m);
    size_t n = strlen(m);
    if (n == 0 || m[n - 1] == ':' || (n >= 2 && m[n - 2] == ':' && m[n - 1] == ' '))
        fail_msg("message \"%s\" is empty or ends in an empty colon", m);
    for (; *want; want++)
        if (!strstr(m, *want))
            fail_msg("message \"%s\" does not name \"%s\"", m, *want);
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", m);
    zp_sample s;
    zp_worksource_state stt = {0, 0, 0};
    uint64_t u;
    assert_int_equal(zp_worksource_samples_per_rank(ws), 0);
    assert_int_equal(zp_worksource_next(ws, &s), ZP_ERR_STATE);
    assert_int_equal(zp_worksource_sample(ws, 0, 0, &s), ZP_ERR_STATE);
    assert_int_equal(zp_worksource_set_state(ws, &stt), ZP_ERR_STATE);
    assert_int_equal(zp_worksource_stream_index(ws, 0, 0, &u), ZP_ERR_STATE);
    assert_string_equal(zp_worksource_errmsg(ws), saved);
    zp_worksource_destroy(ws);
}

#define WANT(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_invalid(void **state)
{
    (void)state;
    static const uint64_t counts[] = {3, 4, 5};
    zp_dataset *ds = mkds(counts, 3);
    zp_worksource *ws = (zp_worksource *)(uintptr_t)1;
    zp_worksource_config c;

    expect_create_fails(NULL, NULL, ZP_ERR_INVALID, WANT("no dataset"));
    assert_int_equal(zp_worksource_create(ds, NULL, NULL), ZP_ERR_INVALID);

    c = mkcfg(0, 4, 4, 1, 8, ZP_REMAINDER_PAD); /* rank == world_size */
    expect_create_fails(ds, &c, ZP_ERR_INVALID, WANT("rank = 4", "world_size = 4"));
    c = mkcfg(0, 9, 4, 1, 8, ZP_REMAINDER_PAD);
    expect_create_fails(ds, &c, ZP_ERR_INVALID, WANT("rank = 9", "world_size = 4"));
    c = mkcfg(0, 0, 0, 1, 8, ZP_REMAINDER_PAD); /* world_size 0 */
    expect_create_fails(ds, &c, ZP_ERR_INVALID, WANT("world_size = 0"));
    c = mkcfg(0, 0, 1, 1, 0, ZP_REMAINDER_PAD); /* block 0 */
    expect_create_fails(ds, &c, ZP_ERR_INVALID, WANT("shuffle_block_shards = 0"));
    c = mkcfg(0, 0, 1, 1, 8, (zp_remainder)2); /* unknown policy */
    expect_create_fails(ds, &c, ZP_ERR_INVALID, WANT("remainder = 2"));
    c = mkcfg(0, 0, 13, 1, 8, ZP_REMAINDER_DROP); /* 12 samples, 13 ranks */
    expect_create_fails(ds, &c, ZP_ERR_INVALID, WANT("drop", "12 samples", "world_size = 13"));

    /* Empty datasets: no shards; shards with no records. */
    zp_dataset *none = mkds(counts, 0);
    expect_create_fails(none, NULL, ZP_ERR_INVALID, WANT("no shards"));
    static const uint64_t zeros[] = {0, 0};
    zp_dataset *empty = mkds(zeros, 2);
    expect_create_fails(empty, NULL, ZP_ERR_INVALID, WANT("2 shard(s) hold no records"));
    fake_dataset_destroy(none);
    fake_dataset_destroy(empty);

    /* 2^63 samples or more: refused, naming the shard and the counts. */
    static const uint64_t huge[] = {1ull << 62, 1ull << 62};
    zp_dataset *big = mkds(huge, 2);
    expect_create_fails(big, NULL, ZP_ERR_LIMIT,
                        WANT("shard 1 (fake-1.jsonl)", "4611686018427387904 records after "
                                                       "4611686018427387904"));
    fake_dataset_destroy(big);

    /* set_state with another seed; position past the epoch; sample past it:
     * each names the values, and a later success keeps the message. */
    c = mkcfg(17, 0, 2, 1, 8, ZP_REMAINDER_PAD);
    ws = mkws(ds, &c);
    assert_string_equal(zp_worksource_errmsg(ws), "");
    zp_worksource_state st = {18, 0, 0};
    assert_int_equal(zp_worksource_set_state(ws, &st), ZP_ERR_INVALID);
    assert_non_null(strstr(zp_worksource_errmsg(ws), "seed = 18"));
    assert_non_null(strstr(zp_worksource_errmsg(ws), "seed = 17"));
    st.seed = 17;
    st.position = 7;
    assert_int_equal(zp_worksource_set_state(ws, &st), ZP_ERR_INVALID);
    assert_non_null(strstr(zp_worksource_errmsg(ws), "position = 7"));
    assert_non_null(strstr(zp_worksource_errmsg(ws), "samples_per_rank = 6"));
    st.position = 6;
    assert_int_equal(zp_worksource_set_state(ws, &st), ZP_OK);
    assert_non_null(strstr(zp_worksource_errmsg(ws), "position = 7"));
    assert_int_equal(zp_worksource_set_state(ws, NULL), ZP_ERR_INVALID);
    assert_non_null(strstr(zp_worksource_errmsg(ws), "state is NULL"));
    zp_sample s;
    assert_int_equal(zp_worksource_sample(ws, 3, 6, &s), ZP_ERR_INVALID);
    assert_non_null(strstr(zp_worksource_errmsg(ws), "position = 6 (epoch 3)"));
    assert_non_null(strstr(zp_worksource_errmsg(ws), "samples_per_rank = 6"));
    /* Positions near UINT64_MAX are refused, never wrapped onto a sample. */
    assert_int_equal(zp_worksource_sample(ws, UINT32_MAX, UINT64_MAX, &s), ZP_ERR_INVALID);
    assert_non_null(strstr(zp_worksource_errmsg(ws),
                           "position = 18446744073709551615 (epoch 4294967295)"));
    st.position = UINT64_MAX;
    assert_int_equal(zp_worksource_set_state(ws, &st), ZP_ERR_INVALID);
    assert_non_null(strstr(zp_worksource_errmsg(ws), "position = 18446744073709551615"));
    assert_int_equal(zp_worksource_sample(ws, 0, 5, NULL), ZP_ERR_INVALID);
    assert_int_equal(zp_worksource_next(ws, NULL), ZP_ERR_INVALID);
    assert_non_null(strstr(zp_worksource_errmsg(ws), "out is NULL"));
    zp_worksource_destroy(ws);
    assert_string_equal(zp_worksource_errmsg(NULL), "no worksource (NULL)");
    fake_dataset_destroy(ds);
}

/* The sequential stream ends after epoch UINT32_MAX with ZP_ERR_LIMIT and a
 * message naming the epoch; (UINT32_MAX, per) is a valid resume state. */
static void test_last_epoch_message(void **state)
{
    (void)state;
    static const uint64_t counts[] = {2, 1};
    zp_dataset *ds = mkds(counts, 2);
    zp_worksource *ws = mkws(ds, NULL);
    zp_worksource_state st = {0, UINT32_MAX, 2};
    assert_int_equal(zp_worksource_set_state(ws, &st), ZP_OK);
    zp_sample s;
    assert_int_equal(zp_worksource_next(ws, &s), ZP_OK);
    assert_int_equal(s.epoch, UINT32_MAX);
    assert_int_equal(s.position, 2);
    assert_int_equal(zp_worksource_next(ws, &s), ZP_ERR_LIMIT);
    assert_non_null(strstr(zp_worksource_errmsg(ws), "epoch 4294967295"));
    assert_int_equal(zp_worksource_next(ws, &s), ZP_ERR_LIMIT); /* stays at the end */
    zp_worksource_get_state(ws, &st);
    assert_int_equal(st.epoch, UINT32_MAX);
    assert_int_equal(st.position, 3);
    zp_worksource_destroy(ws);
    fake_dataset_destroy(ds);
}

/* Epoch arithmetic: epoch x samples_per_rank + position and start + epochs
 * are checked; an overflow is an error naming the values, never a wrap. */
static void test_epoch_arithmetic_checked(void **state)
{
    (void)state;
    /* 2^40 + 3 samples on 1 rank: epoch 2^24 starts past 2^64. */
    static const uint64_t counts[] = {1ull << 40, 3};
    zp_dataset *ds = mkds(counts, 2);
    zp_worksource_config c = mkcfg(5, 0, 1, 0, 8, ZP_REMAINDER_PAD);
    zp_worksource *ws = mkws(ds, &c);
    const uint64_t per = zp_worksource_samples_per_rank(ws);
    assert_int_equal(per, (1ull << 40) + 3);
    uint64_t u = 0;
    assert_int_equal(zp_worksource_stream_index(ws, 0, 7, &u), ZP_OK);
    assert_int_equal(u, 7);
    assert_int_equal(zp_worksource_stream_index(ws, 3, per, &u), ZP_OK);
    assert_int_equal(u, 4 * per);
    /* The largest epoch that fits: floor((2^64 - 1) / per). */
    const uint32_t emax = (uint32_t)(UINT64_MAX / per);
    assert_int_equal(zp_worksource_stream_index(ws, emax, 0, &u), ZP_OK);
    assert_int_equal(u, (uint64_t)emax * per);
    u = 99;
    assert_int_equal(zp_worksource_stream_index(ws, emax + 1, 0, &u), ZP_ERR_LIMIT);
    assert_int_equal(u, 99);
    char want[128];
    snprintf(want, sizeof want, "epoch %u x samples_per_rank %llu + position 0", emax + 1,
             (unsigned long long)per);
    assert_non_null(strstr(zp_worksource_errmsg(ws), want));
    /* The multiplication fits, the addition does not. */
    const uint64_t room = UINT64_MAX - (uint64_t)emax * per; /* < per */
    assert_int_equal(zp_worksource_stream_index(ws, emax, room, &u), ZP_OK);
    assert_int_equal(u, UINT64_MAX);
    assert_int_equal(zp_worksource_stream_index(ws, emax, room + 1, &u), ZP_ERR_LIMIT);
    assert_int_equal(zp_worksource_stream_index(ws, UINT32_MAX, per, &u), ZP_ERR_LIMIT);
    assert_int_equal(zp_worksource_stream_index(ws, 0, per + 1, &u), ZP_ERR_INVALID);
    assert_non_null(strstr(zp_worksource_errmsg(ws), "position = "));

    /* The last epoch of a run. */
    uint32_t last = 0;
    assert_int_equal(zp_worksource_last_epoch(ws, 0, 1, &last), ZP_OK);
    assert_int_equal(last, 0);
    assert_int_equal(zp_worksource_last_epoch(ws, 10, 5, &last), ZP_OK);
    assert_int_equal(last, 14);
    assert_int_equal(zp_worksource_last_epoch(ws, 7, 0, &last), ZP_OK); /* without end */
    assert_int_equal(last, UINT32_MAX);
    assert_int_equal(zp_worksource_last_epoch(ws, 0, 1ull << 32, &last), ZP_OK);
    assert_int_equal(last, UINT32_MAX);
    assert_int_equal(zp_worksource_last_epoch(ws, UINT32_MAX, 1, &last), ZP_OK);
    assert_int_equal(last, UINT32_MAX);
    last = 3;
    assert_int_equal(zp_worksource_last_epoch(ws, 1, 1ull << 32, &last), ZP_ERR_INVALID);
    assert_int_equal(last, 3);
    assert_non_null(strstr(zp_worksource_errmsg(ws), "epochs = 4294967296 from start epoch 1"));
    assert_int_equal(zp_worksource_last_epoch(ws, UINT32_MAX, 2, &last), ZP_ERR_INVALID);
    assert_non_null(strstr(zp_worksource_errmsg(ws), "epochs = 2 from start epoch 4294967295"));
    assert_int_equal(zp_worksource_last_epoch(ws, 2, UINT64_MAX, &last), ZP_ERR_INVALID);
    zp_worksource_destroy(ws);
    fake_dataset_destroy(ds);
}

/* Shards with no records (allowed by allow_empty_shards) are skipped. */
static void test_empty_shards_skipped(void **state)
{
    (void)state;
    static const uint64_t counts[] = {0, 5, 0, 0, 3, 0, 1, 0};
    for (int shuffle = 0; shuffle <= 1; shuffle++)
        for (uint32_t block = 1; block <= 3; block++)
            for (uint32_t w = 1; w <= 4; w++) {
                check_partition(counts, ARRAY_LEN(counts), w, shuffle, block, ZP_REMAINDER_PAD,
                                4, 0);
                check_partition(counts, ARRAY_LEN(counts), w, shuffle, block, ZP_REMAINDER_DROP,
                                4, 1);
            }
}

static void test_create_indexes_dataset(void **state)
{
    (void)state;
    static const uint64_t counts[] = {3, 4, 5};
    zp_dataset *ds = NULL;
    assert_int_equal(fake_dataset_create(counts, 3, 0, &ds), ZP_OK);
    zp_worksource *ws = NULL;
    assert_int_equal(zp_worksource_create(ds, NULL, &ws), ZP_OK);
    assert_true(fake_dataset_index_calls(ds) >= 1);
    assert_int_equal(zp_worksource_samples_per_rank(ws), 12);
    zp_worksource_destroy(ws);
    fake_dataset_destroy(ds);

    /* An indexing failure is returned as is, with the dataset's message. */
    assert_int_equal(fake_dataset_create(counts, 3, 0, &ds), ZP_OK);
    fake_dataset_set_index_status(ds, ZP_ERR_IO);
    expect_create_fails(ds, NULL, ZP_ERR_IO,
                        WANT("dataset: fake-1.jsonl: cannot open: No such file or directory"));
    fake_dataset_destroy(ds);
}

/* ------------------------------------------------------------------ bench */

static int bench(void)
{
    enum { S = 10000 };
    uint64_t *counts = malloc(S * sizeof *counts);
    if (!counts)
        return 1;
    uint64_t rng = 1;
    for (size_t i = 0; i < S; i++)
        counts[i] = 5000 + xorshift(&rng) % 10001; /* mean 10^4: N ~ 10^8 */
    zp_dataset *ds = NULL;
    if (fake_dataset_create(counts, S, 1, &ds) != ZP_OK)
        return 1;
    uint64_t sink = 0;
    double shuffled_seq = 0;
    zp_sample s;
    for (int shuffle = 1; shuffle >= 0; shuffle--) {
        zp_worksource_config c = mkcfg(1, 3, 8, shuffle, 8, ZP_REMAINDER_PAD);
        zp_worksource *ws = NULL;
        if (zp_worksource_create(ds, &c, &ws) != ZP_OK)
            return 1;
        const uint64_t per = zp_worksource_samples_per_rank(ws);

        zp_worksource_sample(ws, 0, 0, &s); /* build epoch 0 */
        uint64_t t0 = zpi_now_ns();
        for (uint64_t p = 0; p < per; p++) {
            zp_worksource_next(ws, &s);
            sink += s.global_id;
        }
        uint64_t t1 = zpi_now_ns();
        const uint64_t nr = 1u << 22;
        for (uint64_t i = 0; i < nr; i++) {
            zp_worksource_sample(ws, 0, ((xorshift(&rng) >> 32) * per) >> 32, &s);
            sink += s.global_id;
        }
        uint64_t t2 = zpi_now_ns();
        const uint32_t ne = shuffle ? 200 : 0;
        for (uint32_t e = 1; e <= ne; e++) { /* every call rebuilds an epoch */
            zp_worksource_sample(ws, e, 0, &s);
            sink += s.global_id;
        }
        uint64_t t3 = zpi_now_ns();
        double seq = (double)(t1 - t0) / (double)per;
        double rnd = (double)(t2 - t1) / (double)nr;
        printf("shuffle=%d shards=%d samples=%llu W=8 per_rank=%llu block=8\n", shuffle, S,
               (unsigned long long)sum_counts(counts, S), (unsigned long long)per);
        if (shuffle)
            shuffled_seq = seq;
        printf("  next() sequential:   %.1f ns/sample\n", seq);
        if (!shuffle)
            printf("  shuffled / unshuffled sequential: %.2fx\n", shuffled_seq / seq);
        printf("  sample() random:     %.1f ns/sample (%.2fx sequential)\n", rnd, rnd / seq);
        if (ne)
            printf("  epoch rebuild:       %.1f us/epoch\n", (double)(t3 - t2) / ne / 1e3);
        zp_worksource_destroy(ws);
    }
    printf("(checksum %llu)\n", (unsigned long long)sink);
    fake_dataset_destroy(ds);
    free(counts);
    return 0;
}

/* Shards of several segments (docs/worksource.md "Rounds"): a block goes
 * in rounds, round j taking segment j of each of its shards; every sample
 * once per epoch over the ranks; within a block, a shard's segments come
 * in ascending order and the records of one round mix across its shards;
 * shards of one segment give the plain block order. */
static void check_rounds(const uint64_t *counts, size_t n, uint64_t per, uint32_t block,
                         uint32_t world)
{
    uint64_t total = sum_counts(counts, n);
    zp_dataset *ds = mkds(counts, n);
    fake_dataset_set_segment_records(ds, per);
    uint64_t off[64];
    off[0] = 0;
    for (size_t i = 0; i < n; i++)
        off[i + 1] = off[i] + counts[i];
    unsigned char *seen = calloc(total, 1);
    for (uint32_t epoch = 0; epoch < 2; epoch++) {
        memset(seen, 0, total);
        for (uint32_t r = 0; r < world; r++) {
            zp_worksource_config c = mkcfg(11, r, world, 1, block, ZP_REMAINDER_DROP);
            zp_worksource *ws = mkws(ds, &c);
            uint64_t per_rank = zp_worksource_samples_per_rank(ws);
            uint64_t last_seg[64];
            for (size_t i = 0; i < n; i++)
                last_seg[i] = 0;
            for (uint64_t p = 0; p < per_rank; p++) {
                zp_sample s;
                assert_int_equal(zp_worksource_sample(ws, epoch, p, &s), ZP_OK);
                assert_true(s.shard < n && s.record < counts[s.shard]);
                uint64_t g = off[s.shard] + s.record;
                assert_int_equal(seen[g], 0);
                seen[g] = 1;
                /* ascending segments of each shard in a rank's stream */
                assert_true(s.record / per >= last_seg[s.shard]);
                last_seg[s.shard] = s.record / per;
            }
            zp_worksource_destroy(ws);
        }
        uint64_t got = 0;
        for (uint64_t g = 0; g < total; g++)
            got += seen[g];
        assert_true(got + world > total); /* drop: fewer than world left out */
    }
    free(seen);
    fake_dataset_destroy(ds);
}

static void test_rounds_of_segments(void **state)
{
    (void)state;
    static const uint64_t counts[] = {1000, 37, 512, 999, 1, 250, 640, 0, 300, 1001};
    check_rounds(counts, ARRAY_LEN(counts), 100, 4, 1);
    check_rounds(counts, ARRAY_LEN(counts), 100, 4, 3);
    check_rounds(counts, ARRAY_LEN(counts), 7, 8, 2);
    check_rounds(counts, ARRAY_LEN(counts), 333, 1, 1);
    check_rounds(counts, ARRAY_LEN(counts), 1, 3, 1);

    /* a round mixes the block's shards: the first 8 x 100 places of a
     * block of 8 shards of 1000 hold segment 0 of each, ~7/8 of
     * neighbours from different shards */
    uint64_t c8[8];
    for (size_t i = 0; i < 8; i++)
        c8[i] = 1000;
    zp_dataset *ds = mkds(c8, 8);
    fake_dataset_set_segment_records(ds, 100);
    zp_worksource_config c = mkcfg(5, 0, 1, 1, 8, ZP_REMAINDER_PAD);
    zp_worksource *ws = mkws(ds, &c);
    size_t changes = 0;
    uint32_t prev = UINT32_MAX;
    for (uint64_t p = 0; p < 800; p++) {
        zp_sample s;
        assert_int_equal(zp_worksource_sample(ws, 0, p, &s), ZP_OK);
        assert_true(s.record < 100);
        changes += s.shard != prev;
        prev = s.shard;
    }
    assert_true(changes > 600);
    zp_worksource_destroy(ws);
    fake_dataset_destroy(ds);

    /* one segment per shard (per >= count): the same stream as without */
    static const uint64_t c3[] = {50, 60, 70, 80, 90};
    zp_dataset *a = mkds(c3, 5), *b = mkds(c3, 5);
    fake_dataset_set_segment_records(b, 1000);
    zp_worksource_config cc = mkcfg(3, 0, 1, 1, 2, ZP_REMAINDER_PAD);
    zp_worksource *wa = mkws(a, &cc), *wb = mkws(b, &cc);
    for (uint64_t p = 0; p < 350; p++) {
        zp_sample x, y;
        assert_int_equal(zp_worksource_sample(wa, 1, p, &x), ZP_OK);
        assert_int_equal(zp_worksource_sample(wb, 1, p, &y), ZP_OK);
        assert_same_sample(&x, &y);
    }
    zp_worksource_destroy(wa);
    zp_worksource_destroy(wb);
    fake_dataset_destroy(a);
    fake_dataset_destroy(b);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--bench") == 0)
        return bench();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_defaults),
        cmocka_unit_test(test_rounds_of_segments),
        cmocka_unit_test(test_exactly_once_uneven_shards),
        cmocka_unit_test(test_exactly_once_many_small_shards),
        cmocka_unit_test(test_exactly_once_fewer_shards_than_ranks),
        cmocka_unit_test(test_pad_wraps_more_than_once),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_epochs_differ),
        cmocka_unit_test(test_shuffle_off_is_dataset_order),
        cmocka_unit_test(test_locality),
        cmocka_unit_test(test_block_one_reads_shards_whole),
        cmocka_unit_test(test_block_mixes_its_shards),
        cmocka_unit_test(test_block_permutation_is_bijection),
        cmocka_unit_test(test_blocks_have_own_permutation),
        cmocka_unit_test(test_small_domain_uniform),
        cmocka_unit_test(test_next_matches_sample),
        cmocka_unit_test(test_epoch_cache_switching),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_last_epoch),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_last_epoch_message),
        cmocka_unit_test(test_epoch_arithmetic_checked),
        cmocka_unit_test(test_empty_shards_skipped),
        cmocka_unit_test(test_create_indexes_dataset),
    };
    return cmocka_run_group_tests_name("worksource", tests, NULL, NULL);
}
