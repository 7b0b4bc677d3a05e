/*
 * test_mixture.c - the mixture's draw sequence (src/plan/mixture.c): every prefix
 * within one sample of the weights, seek and counts against a sequential
 * walk, the period, the weights made integers, refused weights,
 * determinism, and a sequence fixed by an exact-fraction reference of the
 * rule.
 *
 * Built with src/plan/mixture.c, src/base/error.c and src/base/status.c only
 * (tests/mixture.cmake).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "plan/mixture.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

typedef __int128 i128;

/* ---------------------------------------------------------------- helpers */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static double rng_real(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * ((double)(rng_next(s) >> 11) / 9007199254740992.0);
}

static zpi_mix *mk(const double *w, size_t n)
{
    zpi_mix *m = NULL;
    zpi_err e;
    zpi_err_clear(&e);
    zp_status st = zpi_mix_create(w, NULL, n, &m, &e);
    if (st != ZP_OK)
        fail_msg("zpi_mix_create(%zu parts): %s", n, zpi_err_msg(&e));
    assert_non_null(m);
    assert_int_equal(zpi_mix_parts(m), n);
    return m;
}

static zpi_mix_cursor *mkcur(const zpi_mix *m)
{
    zpi_mix_cursor *c = NULL;
    assert_int_equal(zpi_mix_cursor_create(m, &c), ZP_OK);
    assert_non_null(c);
    assert_int_equal(zpi_mix_cursor_pos(c), 0);
    return c;
}

/* The first `g` draws of a sequential walk: parts and part draws. */
typedef struct walk {
    uint64_t g;
    uint32_t *part;
    uint64_t *pdraw;
} walk;

static walk walk_seq(const zpi_mix *m, uint64_t g)
{
    walk w = {g, malloc(g * sizeof(uint32_t)), malloc(g * sizeof(uint64_t))};
    assert_non_null(w.part);
    assert_non_null(w.pdraw);
    zpi_mix_cursor *c = mkcur(m);
    for (uint64_t i = 0; i < g; i++) {
        zpi_mix_cursor_next(c, &w.part[i], &w.pdraw[i]);
        assert_int_equal(zpi_mix_cursor_pos(c), i + 1);
    }
    zpi_mix_cursor_destroy(c);
    return w;
}

static void walk_free(walk *w)
{
    free(w->part);
    free(w->pdraw);
}

/* Walks `g` draws and checks, after every prefix, the bound the rule keeps
 * for the integer weights, |c_i - (W_i / T) g| <= 1 - 1 / (2n - 2) (so < 1),
 * in exact arithmetic; that each draw's part draw is the part's count so
 * far; and, when `real` is given (normalised to sum 1), |c_i - real_i g| < 1
 * + g |real_i - W_i / T| (the rule's bound plus the drift that rounding the
 * weights to integers allows; exact weights give < 1). */
static void check_prefixes(const zpi_mix *m, uint64_t g, const double *real)
{
    size_t n = zpi_mix_parts(m);
    uint64_t T = zpi_mix_period(m);
    uint64_t D = 2 * (uint64_t)n - 2;
    uint64_t *W = malloc(n * sizeof *W);
    uint64_t *cnt = calloc(n, sizeof *cnt);
    assert_non_null(W);
    assert_non_null(cnt);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        W[i] = zpi_mix_quantum(m, i);
        assert_true(W[i] >= 1);
        sum += W[i];
    }
    assert_int_equal(sum, T);
    zpi_mix_cursor *c = mkcur(m);
    for (uint64_t k = 1; k <= g; k++) {
        uint32_t p;
        uint64_t pd;
        zpi_mix_cursor_next(c, &p, &pd);
        assert_true(p < n);
        assert_int_equal(pd, cnt[p]);
        cnt[p]++;
        for (size_t i = 0; i < n; i++) {
            i128 d = (i128)cnt[i] * (i128)T - (i128)W[i] * (i128)k;
            if (d < 0)
                d = -d;
            if (n >= 2 && d * (i128)D > (i128)(D - 1) * (i128)T)
                fail_msg("prefix %llu: part %zu drawn %llu times, W %llu / T %llu",
                         (unsigned long long)k, i, (unsigned long long)cnt[i],
                         (unsigned long long)W[i], (unsigned long long)T);
            if (real) {
                double q = (double)W[i] / (double)T;
                double dev = fabs((double)cnt[i] - real[i] * (double)k);
                double allow = 1.0 + (double)k * fabs(real[i] - q);
                if (!(dev < allow))
                    fail_msg("prefix %llu: part %zu drawn %llu times, weight %.12g",
                             (unsigned long long)k, i, (unsigned long long)cnt[i], real[i]);
            }
        }
    }
    zpi_mix_cursor_destroy(c);
    free(W);
    free(cnt);
}

static void normalise(const double *w, size_t n, double *out)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += w[i];
    for (size_t i = 0; i < n; i++)
        out[i] = w[i] / s;
}

/* ---------------------------------------------------------------- prefixes */

static void test_prefix_07_02_01(void **state)
{
    (void)state;
    const double w[] = {0.7, 0.2, 0.1};
    zpi_mix *m = mk(w, 3);
    check_prefixes(m, 10000, w);
    /* The plain statement with the doubles as given. */
    zpi_mix_cursor *c = mkcur(m);
    uint64_t cnt[3] = {0};
    for (uint64_t g = 1; g <= 10000; g++) {
        uint32_t p;
        uint64_t pd;
        zpi_mix_cursor_next(c, &p, &pd);
        cnt[p]++;
        for (size_t i = 0; i < 3; i++)
            assert_true(fabs((double)cnt[i] - w[i] * (double)g) < 1.0);
    }
    zpi_mix_cursor_destroy(c);
    zpi_mix_destroy(m);
}

static void test_prefix_5_3_1(void **state)
{
    (void)state;
    const double w[] = {5, 3, 1};
    double r[3];
    normalise(w, 3, r);
    zpi_mix *m = mk(w, 3);
    assert_int_equal(zpi_mix_period(m), 9);
    check_prefixes(m, 10000, r);
    zpi_mix_destroy(m);
}

/* Seven vectors of 2..50 parts, fixed seeds: even seeds real weights in
 * [0.001, 10), odd seeds integers in 1..100. */
static void test_prefix_random(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 7; seed++) {
        uint64_t s = seed * 1000003;
        size_t n = 2 + (size_t)(rng_next(&s) % 49);
        double *w = malloc(n * sizeof *w), *r = malloc(n * sizeof *r);
        assert_non_null(w);
        assert_non_null(r);
        for (size_t i = 0; i < n; i++)
            w[i] = seed % 2 ? (double)(1 + rng_next(&s) % 100) : rng_real(&s, 0.001, 10.0);
        normalise(w, n, r);
        zpi_mix *m = mk(w, n);
        if (seed % 2)
            assert_true(zpi_mix_period(m) <= 100 * n);
        check_prefixes(m, 20000, r);
        zpi_mix_destroy(m);
        free(w);
        free(r);
    }
}

static void test_prefix_1000_parts(void **state)
{
    (void)state;
    size_t n = 1000;
    double *w = malloc(n * sizeof *w), *r = malloc(n * sizeof *r);
    assert_non_null(w);
    assert_non_null(r);
    uint64_t s = 42;
    for (size_t i = 0; i < n; i++)
        w[i] = rng_real(&s, 0.01, 1.0);
    normalise(w, n, r);
    zpi_mix *m = mk(w, n);
    check_prefixes(m, 100000, r);
    zpi_mix_destroy(m);
    free(w);
    free(r);
}

/* The first period of integer weights 19:18:5:12:30 (T = 84) from a
 * reference of the rule in exact fractions (O(n) per draw, no heaps): the
 * sequence is fixed, the same on every machine and in every version. */
static void test_reference_sequence(void **state)
{
    (void)state;
    static const uint8_t ref[84] = {
        4, 0, 1, 4, 3, 4, 0, 1, 4, 0, 3, 1, 4, 2, 4, 0, 1, 4, 3, 0, 4, 1, 4, 0, 3, 1, 4, 0,
        4, 2, 1, 4, 3, 0, 4, 1, 4, 0, 3, 1, 4, 0, 4, 1, 0, 4, 3, 2, 4, 1, 0, 4, 3, 1, 4, 0,
        4, 1, 0, 4, 3, 4, 1, 2, 0, 4, 3, 1, 4, 0, 4, 1, 0, 4, 3, 4, 1, 0, 4, 2, 3, 1, 0, 4};
    static const uint8_t ref721[10] = {0, 0, 1, 0, 0, 2, 0, 0, 1, 0};
    /* Ties of deadlines go to the lowest index. */
    static const uint8_t ref3322[10] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1};
    const double w3322[] = {3, 3, 2, 2};
    zpi_mix *m3322 = mk(w3322, 4);
    walk t = walk_seq(m3322, 20);
    for (uint64_t g = 0; g < t.g; g++)
        assert_int_equal(t.part[g], ref3322[g % 10]);
    walk_free(&t);
    zpi_mix_destroy(m3322);
    const double w[] = {19, 18, 5, 12, 30};
    const double w721[] = {0.7, 0.2, 0.1};
    zpi_mix *m = mk(w, 5), *m721 = mk(w721, 3);
    assert_int_equal(zpi_mix_period(m), 84);
    walk a = walk_seq(m, 3 * 84), b = walk_seq(m721, 30);
    for (uint64_t g = 0; g < a.g; g++)
        if (a.part[g] != ref[g % 84])
            fail_msg("19:18:5:12:30 draw %llu: part %u, expected %u", (unsigned long long)g,
                     a.part[g], ref[g % 84]);
    for (uint64_t g = 0; g < b.g; g++)
        assert_int_equal(b.part[g], ref721[g % 10]);
    walk_free(&a);
    walk_free(&b);
    zpi_mix_destroy(m);
    zpi_mix_destroy(m721);
}

/* ---------------------------------------------------------------- seek */

/* Mixtures for seek and counts: small and large periods, few and many
 * parts (the last: T about 2^20, 4096 draws between checkpoints). */
static zpi_mix *mk_case(int k)
{
    static const double w0[] = {0.7, 0.2, 0.1};
    static const double w1[] = {19, 18, 5, 12, 30};
    static const double w2[] = {1.0 / 3, 1.0 / 3, 1.0 / 3, 0.25};
    if (k == 0)
        return mk(w0, ARRAY_LEN(w0));
    if (k == 1)
        return mk(w1, ARRAY_LEN(w1));
    if (k == 2)
        return mk(w2, ARRAY_LEN(w2));
    size_t n = k == 3 ? 37 : 1000;
    double *w = malloc(n * sizeof *w);
    assert_non_null(w);
    uint64_t s = 7 + (uint64_t)k;
    for (size_t i = 0; i < n; i++)
        w[i] = k == 3 ? (double)(1 + rng_next(&s) % 60) : rng_real(&s, 0.01, 1.0);
    zpi_mix *m = mk(w, n);
    free(w);
    return m;
}
#define N_CASES 5

/* Seeks at position g and compares the next `len` draws with the walk. */
static void check_seek_at(zpi_mix_cursor *c, const walk *w, uint64_t g, uint64_t len)
{
    zpi_mix_cursor_seek(c, g);
    assert_int_equal(zpi_mix_cursor_pos(c), g);
    for (uint64_t i = g; i < g + len && i < w->g; i++) {
        uint32_t p;
        uint64_t pd;
        zpi_mix_cursor_next(c, &p, &pd);
        if (p != w->part[i] || pd != w->pdraw[i])
            fail_msg("seek %llu, draw %llu: part %u (draw %llu), walk: part %u (draw %llu)",
                     (unsigned long long)g, (unsigned long long)i, p, (unsigned long long)pd,
                     w->part[i], (unsigned long long)w->pdraw[i]);
        assert_int_equal(zpi_mix_cursor_pos(c), i + 1);
    }
}

static void test_seek_matches_walk(void **state)
{
    (void)state;
    for (int k = 0; k < N_CASES; k++) {
        zpi_mix *m = mk_case(k);
        uint64_t T = zpi_mix_period(m);
        walk w = walk_seq(m, 2 * T + 100);
        zpi_mix_cursor *c = mkcur(m);
        /* Every position of small periods; else a stride, each checkpoint
         * and its neighbours, and around the period ends. */
        uint64_t stride = T <= 5000 ? 1 : T / 300 + 1;
        for (uint64_t g = 0; g < w.g; g += stride)
            check_seek_at(c, &w, g, 3);
        uint64_t K = (T + 255) / 256;
        for (uint64_t j = 0; j * K < T; j += 1 + (T > 5000) * 13) {
            uint64_t g = j * K;
            if (g > 0)
                check_seek_at(c, &w, g - 1, 3);
            check_seek_at(c, &w, g, 3);
            check_seek_at(c, &w, T + g + 1, 3);
        }
        for (uint64_t e = 1; e <= 2; e++)
            for (uint64_t g = e * T - 5; g <= e * T + 5; g++)
                check_seek_at(c, &w, g, 20);
        /* A seek backwards, then a long walk across a period end. */
        check_seek_at(c, &w, T / 2, T + 50);
        /* The walk itself repeats with period T, counts added. */
        for (uint64_t g = T; g < w.g; g++) {
            assert_int_equal(w.part[g], w.part[g - T]);
            assert_int_equal(w.pdraw[g], w.pdraw[g - T] + zpi_mix_quantum(m, w.part[g]));
        }
        zpi_mix_cursor_destroy(c);
        walk_free(&w);
        zpi_mix_destroy(m);
    }
}

/* Far positions: the draw at g is the draw at g mod T with q W_p more
 * earlier draws of its part; a walk from there crosses period ends; at
 * UINT64_MAX the cursor stays. */
static void test_seek_far(void **state)
{
    (void)state;
    for (int k = 0; k < N_CASES; k++) {
        zpi_mix *m = mk_case(k);
        uint64_t T = zpi_mix_period(m);
        walk w = walk_seq(m, T);
        zpi_mix_cursor *c = mkcur(m);
        const uint64_t far[] = {1ULL << 62,
                                (1ULL << 62) - 7,
                                (1ULL << 62) / T * T - 3,
                                (1ULL << 63) - 1,
                                UINT64_MAX / T * T - 2,
                                UINT64_MAX - 300};
        for (size_t f = 0; f < ARRAY_LEN(far); f++) {
            uint64_t g0 = far[f];
            zpi_mix_cursor_seek(c, g0);
            for (uint64_t g = g0; g < g0 + 300 && g < UINT64_MAX; g++) {
                uint32_t p;
                uint64_t pd;
                assert_int_equal(zpi_mix_cursor_pos(c), g);
                zpi_mix_cursor_next(c, &p, &pd);
                uint64_t r = g % T, q = g / T;
                assert_int_equal(p, w.part[r]);
                assert_int_equal(pd, q * zpi_mix_quantum(m, p) + w.pdraw[r]);
            }
        }
        /* UINT64_MAX: the last draw, twice, without moving. */
        uint64_t r = UINT64_MAX % T, q = UINT64_MAX / T;
        zpi_mix_cursor_seek(c, UINT64_MAX - 1);
        for (int i = 0; i < 3; i++) {
            uint32_t p;
            uint64_t pd;
            zpi_mix_cursor_next(c, &p, &pd);
            assert_int_equal(zpi_mix_cursor_pos(c), UINT64_MAX);
            if (i == 0) {
                assert_int_equal(p, w.part[(UINT64_MAX - 1) % T]);
                continue;
            }
            assert_int_equal(p, w.part[r]);
            assert_int_equal(pd, q * zpi_mix_quantum(m, p) + w.pdraw[r]);
        }
        zpi_mix_cursor_destroy(c);
        walk_free(&w);
        zpi_mix_destroy(m);
    }
}

/* ---------------------------------------------------------------- counts */

static void check_counts_at(const zpi_mix *m, uint64_t g, const uint64_t *expect, uint64_t *got)
{
    size_t n = zpi_mix_parts(m);
    assert_int_equal(zpi_mix_counts(m, g, got), ZP_OK);
    for (size_t i = 0; i < n; i++)
        if (got[i] != expect[i])
            fail_msg("counts(%llu)[%zu] = %llu, walk: %llu", (unsigned long long)g, i,
                     (unsigned long long)got[i], (unsigned long long)expect[i]);
}

static void test_counts_match_walk(void **state)
{
    (void)state;
    for (int k = 0; k < N_CASES; k++) {
        zpi_mix *m = mk_case(k);
        size_t n = zpi_mix_parts(m);
        uint64_t T = zpi_mix_period(m);
        uint64_t *cnt = calloc(n, sizeof *cnt), *got = calloc(n, sizeof *got);
        assert_non_null(cnt);
        assert_non_null(got);
        zpi_mix_cursor *c = mkcur(m);
        uint64_t stride = T <= 5000 ? 1 : T / 200 + 1;
        for (uint64_t g = 0; g <= 2 * T + 10; g++) {
            if (g % stride == 0 || g % T <= 2 || g % T >= T - 2)
                check_counts_at(m, g, cnt, got);
            uint32_t p;
            uint64_t pd;
            zpi_mix_cursor_next(c, &p, &pd);
            cnt[p]++;
        }
        /* Far: q W_i + c_i(r); the total is g. */
        const uint64_t far[] = {1ULL << 62, UINT64_MAX};
        for (size_t f = 0; f < ARRAY_LEN(far); f++) {
            uint64_t g = far[f], q = g / T;
            uint64_t *base = calloc(n, sizeof *base);
            assert_non_null(base);
            assert_int_equal(zpi_mix_counts(m, g % T, base), ZP_OK);
            assert_int_equal(zpi_mix_counts(m, g, got), ZP_OK);
            uint64_t total = 0;
            for (size_t i = 0; i < n; i++) {
                assert_int_equal(got[i], q * zpi_mix_quantum(m, i) + base[i]);
                total += got[i];
            }
            assert_int_equal(total, g);
            free(base);
        }
        zpi_mix_cursor_destroy(c);
        free(cnt);
        free(got);
        zpi_mix_destroy(m);
    }
}

/* ---------------------------------------------------------------- period */

static void test_period(void **state)
{
    (void)state;
    for (int k = 0; k < N_CASES; k++) {
        zpi_mix *m = mk_case(k);
        size_t n = zpi_mix_parts(m);
        uint64_t T = zpi_mix_period(m);
        uint64_t *got = calloc(n, sizeof *got);
        assert_non_null(got);
        uint64_t sum = 0;
        for (size_t i = 0; i < n; i++)
            sum += zpi_mix_quantum(m, i);
        assert_int_equal(sum, T);
        assert_true(T <= (1ULL << 24));
        for (uint64_t e = 1; e <= 3; e++) {
            assert_int_equal(zpi_mix_counts(m, e * T, got), ZP_OK);
            for (size_t i = 0; i < n; i++)
                assert_int_equal(got[i], e * zpi_mix_quantum(m, i));
        }
        /* One period walked: c(T) = W. */
        walk w = walk_seq(m, T);
        memset(got, 0, n * sizeof *got);
        for (uint64_t g = 0; g < T; g++)
            got[w.part[g]]++;
        for (size_t i = 0; i < n; i++)
            assert_int_equal(got[i], zpi_mix_quantum(m, i));
        walk_free(&w);
        free(got);
        zpi_mix_destroy(m);
    }
}

/* The most parts and the longest period: one part of weight 2^24 - 65535
 * and 65535 of weight 1 (T = 2^24; the largest numbers in the deadline and
 * release arithmetic). */
static void test_most_parts_longest_period(void **state)
{
    (void)state;
    size_t n = ZPI_MIX_MAX_PARTS;
    uint64_t T = 1ULL << 24, W0 = T - (n - 1);
    double *w = malloc(n * sizeof *w);
    uint64_t *cnt = calloc(n, sizeof *cnt), *got = calloc(n, sizeof *got);
    assert_non_null(w);
    assert_non_null(cnt);
    assert_non_null(got);
    for (size_t i = 0; i < n; i++)
        w[i] = i ? 1.0 : (double)W0;
    zpi_mix *m = mk(w, n);
    assert_int_equal(zpi_mix_period(m), T);
    assert_int_equal(zpi_mix_quantum(m, 0), W0);
    /* The prefixes: part 0 within 1 - 1/(2n - 2) of W0 g / T, the others
     * drawn at most once; the walk is kept for the seeks below. */
    uint64_t G = 200000, D = 2 * (uint64_t)n - 2;
    walk wk = walk_seq(m, G);
    for (uint64_t g = 1; g <= G; g++) {
        uint32_t p = wk.part[g - 1];
        assert_int_equal(wk.pdraw[g - 1], cnt[p]);
        cnt[p]++;
        assert_true(p == 0 || cnt[p] == 1);
        i128 d = (i128)cnt[0] * (i128)T - (i128)W0 * (i128)g;
        if (d < 0)
            d = -d;
        assert_true(d * (i128)D <= (i128)(D - 1) * (i128)T);
    }
    zpi_mix_cursor *c = mkcur(m);
    const uint64_t at[] = {1, 65535, 65536, 131071, 199000, 5 * T + 777, (1ULL << 62) / T * T};
    for (size_t a = 0; a < ARRAY_LEN(at); a++) {
        uint64_t r = at[a] % T, q = at[a] / T;
        zpi_mix_cursor_seek(c, at[a]);
        for (uint64_t i = 0; i < 1000; i++) {
            uint32_t p;
            uint64_t pd;
            zpi_mix_cursor_next(c, &p, &pd);
            assert_int_equal(p, wk.part[r + i]);
            assert_int_equal(pd, q * zpi_mix_quantum(m, p) + wk.pdraw[r + i]);
        }
    }
    assert_int_equal(zpi_mix_counts(m, 3 * T, got), ZP_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(got[i], 3 * zpi_mix_quantum(m, i));
    zpi_mix_cursor_destroy(c);
    walk_free(&wk);
    zpi_mix_destroy(m);
    free(w);
    free(cnt);
    free(got);
}

/* ---------------------------------------------------------------- one part */

static void test_one_part(void **state)
{
    (void)state;
    const double w[] = {0.3};
    zpi_mix *m = mk(w, 1);
    assert_int_equal(zpi_mix_period(m), 1);
    assert_int_equal(zpi_mix_quantum(m, 0), 1);
    zpi_mix_cursor *c = mkcur(m);
    for (uint64_t g = 0; g < 100; g++) {
        uint32_t p;
        uint64_t pd;
        zpi_mix_cursor_next(c, &p, &pd);
        assert_int_equal(p, 0);
        assert_int_equal(pd, g);
    }
    zpi_mix_cursor_seek(c, 1ULL << 62);
    uint32_t p;
    uint64_t pd, cnt;
    zpi_mix_cursor_next(c, &p, &pd);
    assert_int_equal(pd, 1ULL << 62);
    assert_int_equal(zpi_mix_cursor_pos(c), (1ULL << 62) + 1);
    zpi_mix_cursor_seek(c, UINT64_MAX);
    zpi_mix_cursor_next(c, &p, &pd);
    assert_int_equal(pd, UINT64_MAX);
    assert_int_equal(zpi_mix_cursor_pos(c), UINT64_MAX);
    assert_int_equal(zpi_mix_counts(m, 12345, &cnt), ZP_OK);
    assert_int_equal(cnt, 12345);
    zpi_mix_cursor_destroy(c);
    zpi_mix_destroy(m);
}

/* ---------------------------------------------------------------- weights */

static void expect_refused(const double *w, size_t n, const char *needle)
{
    zpi_mix *m = (zpi_mix *)&m; /* not NULL: create must clear it */
    zpi_err e;
    zpi_err_clear(&e);
    assert_int_equal(zpi_mix_create(w, NULL, n, &m, &e), ZP_ERR_INVALID);
    assert_null(m);
    if (!strstr(zpi_err_msg(&e), needle))
        fail_msg("message '%s' does not name '%s'", zpi_err_msg(&e), needle);
}

static void test_bad_weights(void **state)
{
    (void)state;
    double w[] = {0.5, 1, -1, 2};
    expect_refused(w, 4, "weight 2 = -1: must be a positive finite number");
    w[2] = 0.0;
    expect_refused(w, 4, "weight 2 = 0");
    w[2] = -0.0;
    expect_refused(w, 4, "weight 2 = -0");
    w[2] = NAN;
    expect_refused(w, 4, "weight 2 = nan");
    w[2] = INFINITY;
    expect_refused(w, 4, "weight 2 = inf");
    w[2] = 1.0;
    w[0] = -INFINITY;
    expect_refused(w, 4, "weight 0 = -inf");
    w[0] = 0.5;
    w[3] = 1e-320; /* positive, but no schedule draws it in proportion */
    expect_refused(w, 4, "weight 3 (9.99989e-321) is ");
    expect_refused(w, 0, "no weights");
    zpi_mix *m;

    size_t big = ZPI_MIX_MAX_PARTS + 1;
    double *many = malloc(big * sizeof *many);
    assert_non_null(many);
    for (size_t i = 0; i < big; i++)
        many[i] = 1.0;
    expect_refused(many, big, "65537 weights: at most 65536 parts");
    /* The most parts: accepted, and the period holds. */
    m = mk(many, ZPI_MIX_MAX_PARTS);
    assert_int_equal(zpi_mix_period(m), ZPI_MIX_MAX_PARTS);
    zpi_mix_cursor *c = mkcur(m);
    for (uint32_t i = 0; i < 1000; i++) {
        uint32_t p;
        uint64_t pd;
        zpi_mix_cursor_next(c, &p, &pd);
        assert_int_equal(p, i); /* equal weights: deadline ties go to the lowest index */
        assert_int_equal(pd, 0);
    }
    zpi_mix_cursor_destroy(c);
    zpi_mix_destroy(m);
    free(many);
}

static void expect_quanta(const double *w, size_t n, const uint64_t *W)
{
    zpi_mix *m = mk(w, n);
    uint64_t T = 0;
    for (size_t i = 0; i < n; i++) {
        if (zpi_mix_quantum(m, i) != W[i])
            fail_msg("weight %zu = %.17g: W = %llu, expected %llu", i, w[i],
                     (unsigned long long)zpi_mix_quantum(m, i), (unsigned long long)W[i]);
        T += W[i];
    }
    assert_int_equal(zpi_mix_period(m), T);
    zpi_mix_destroy(m);
}

static void test_quantization(void **state)
{
    (void)state;
    {
        const double w[] = {0.7, 0.2, 0.1};
        const uint64_t W[] = {7, 2, 1};
        expect_quanta(w, 3, W);
    }
    {
        const double w[] = {1.0 / 3, 1.0 / 3, 1.0 / 3};
        const uint64_t W[] = {1, 1, 1};
        expect_quanta(w, 3, W);
    }
    {
        const double w[] = {10, 20, 30}; /* divided by the gcd */
        const uint64_t W[] = {1, 2, 3};
        expect_quanta(w, 3, W);
    }
    {
        const double w[] = {0.5, 0.25, 0.125, 0.000125};
        const uint64_t W[] = {4000, 2000, 1000, 1};
        expect_quanta(w, 4, W);
    }
    {
        /* Six places, but T = 124456789 > 2^24: rounded instead. */
        const double w[] = {123.456789, 1};
        zpi_mix *m = mk(w, 2);
        assert_true(zpi_mix_period(m) <= (1ULL << 24));
        assert_true(zpi_mix_quantum(m, 0) != 123456789);
        zpi_mix_destroy(m);
    }
    {
        const double w[] = {1.234567, 1}; /* six places, T = 2234567: exact */
        const uint64_t W[] = {1234567, 1000000};
        expect_quanta(w, 2, W);
    }
    {
        const double w[] = {16777215, 1}; /* T = 2^24: exact */
        const uint64_t W[] = {16777215, 1};
        expect_quanta(w, 2, W);
    }
    {
        /* T = 2^24 + 1: rounded. To 2^20 : 1 the small part's share would
         * be 16 times too large; to about 2^24 it is 0.79% too large. */
        const double w[] = {16777216, 1};
        const uint64_t W[] = {16646143, 1};
        expect_quanta(w, 2, W);
    }
    {
        /* Rounded to about 2^20 as before whenever every share stays
         * within 1% (a checkpoint's schedule does not change). */
        const double w[] = {0.9999, 0.0001 + 1e-12};
        const uint64_t W[] = {1048471, 105};
        expect_quanta(w, 2, W);
    }
    {
        const double w[] = {0.1234567, 0.5}; /* seven places: rounded */
        /* 0.1234567 / 0.6234567 * 2^20 = 207638.69, 0.5 / 0.6234567 * 2^20 = 840937.31 */
        const uint64_t W[] = {207639, 840937};
        expect_quanta(w, 2, W);
    }
    {
        const double w[] = {1e308, 1e308, 5e307}; /* no overflow in the sum */
        const uint64_t W[] = {2, 2, 1};
        expect_quanta(w, 3, W);
    }
    {
        const double w[] = {7.000000005, 3, 1}; /* integers within 1e-9 relative */
        const uint64_t W[] = {7, 3, 1};
        expect_quanta(w, 3, W);
    }
    {
        /* 2.9e-9 relative from an integer (and more than six places): rounded. */
        const double w[] = {7.00000002, 3, 1};
        zpi_mix *m = mk(w, 3);
        assert_true(zpi_mix_period(m) > 1000000);
        zpi_mix_destroy(m);
    }
}

/* Weights whose ratio the schedule cannot keep within 1% are refused,
 * naming both parts and their weights (issue 20 item 8: 1e300 and 1 were
 * drawn as 2^20 : 1, the small part 10^294 times too often, silently). */
static void test_refused_ratios(void **state)
{
    (void)state;
    static const char *const names[] = {"u", "d", "e"};
    zpi_mix *m = (zpi_mix *)&m;
    zpi_err e;
    zpi_err_clear(&e);
    const double w[] = {1e300, 1};
    assert_int_equal(zpi_mix_create(w, names, 2, &m, &e), ZP_ERR_INVALID);
    assert_null(m);
    const char *msg = zpi_err_msg(&e);
    if (!strstr(msg, "part 'd' (weight 1) is 1e-300 of the mixture next to part 'u' (weight "
                     "1e+300)") ||
        !strstr(msg, "more than 1%"))
        fail_msg("message: %s", msg);
    /* The smallest share kept within 1% by rounding to about 2^24: about
     * 0.5 / 0.01 / 2^24 = 3e-6 of the mixture. */
    const double ok[] = {1.0 / 3, 4e-6 / 3};
    m = mk(ok, 2);
    zpi_mix_destroy(m);
    const double bad[] = {1.0 / 3, 1.0 / 7, 2e-6 / 3};
    assert_int_equal(zpi_mix_create(bad, names, 3, &m, &e), ZP_ERR_INVALID);
    if (!strstr(zpi_err_msg(&e), "part 'e' (weight 6.66667e-07)") ||
        !strstr(zpi_err_msg(&e), "next to part 'u' (weight 0.333333)"))
        fail_msg("message: %s", zpi_err_msg(&e));
    /* Exact weights keep any ratio that fits 2^24. */
    const double exact[] = {16777215, 1};
    m = mk(exact, 2);
    assert_int_equal(zpi_mix_quantum(m, 1), 1);
    zpi_mix_destroy(m);
}

/* Every accepted mixture keeps every share within 1% of the given one,
 * over weights spread across 12 orders of magnitude; the ones refused are
 * the ones that rounding could not keep. */
static void test_shares_within_one_percent(void **state)
{
    (void)state;
    uint64_t s = 2024;
    size_t refused = 0, accepted = 0;
    for (int t = 0; t < 300; t++) {
        size_t n = 2 + (size_t)(rng_next(&s) % 6);
        double w[8], r[8];
        for (size_t i = 0; i < n; i++)
            w[i] = pow(10.0, rng_real(&s, -12.0, 0.0)) * (1.0 + 1e-7 * (double)(i + 1));
        normalise(w, n, r);
        zpi_mix *m = NULL;
        zpi_err e;
        zpi_err_clear(&e);
        if (zpi_mix_create(w, NULL, n, &m, &e) != ZP_OK) {
            assert_non_null(strstr(zpi_err_msg(&e), "more than 1%"));
            refused++;
            continue;
        }
        accepted++;
        for (size_t i = 0; i < n; i++) {
            double u = (double)zpi_mix_quantum(m, i) / (double)zpi_mix_period(m);
            if (fabs(u - r[i]) > 0.01 * r[i])
                fail_msg("mixture %d: part %zu weight %g (share %g) is drawn as %g", t, i, w[i],
                         r[i], u);
        }
        zpi_mix_destroy(m);
    }
    assert_true(refused > 0 && accepted > 0);
}

/* ---------------------------------------------------------------- determinism */

static void test_determinism(void **state)
{
    (void)state;
    size_t n = 200;
    double *w = malloc(n * sizeof *w);
    assert_non_null(w);
    uint64_t s = 99;
    for (size_t i = 0; i < n; i++)
        w[i] = rng_real(&s, 0.1, 3.0);
    zpi_mix *a = mk(w, n), *b = mk(w, n);
    assert_int_equal(zpi_mix_period(a), zpi_mix_period(b));
    for (size_t i = 0; i < n; i++)
        assert_int_equal(zpi_mix_quantum(a, i), zpi_mix_quantum(b, i));
    zpi_mix_cursor *ca = mkcur(a), *cb = mkcur(b), *cs = mkcur(a);
    for (uint64_t g = 0; g < 50000; g++) {
        uint32_t pa, pb;
        uint64_t da, db;
        zpi_mix_cursor_next(ca, &pa, &da);
        zpi_mix_cursor_next(cb, &pb, &db);
        assert_int_equal(pa, pb);
        assert_int_equal(da, db);
        if (g % 4999 == 0) { /* a second cursor on the same mixture, seeking */
            zpi_mix_cursor_seek(cs, g);
            zpi_mix_cursor_next(cs, &pb, &db);
            assert_int_equal(pa, pb);
            assert_int_equal(da, db);
        }
    }
    zpi_mix_cursor_destroy(ca);
    zpi_mix_cursor_destroy(cb);
    zpi_mix_cursor_destroy(cs);
    zpi_mix_destroy(a);
    zpi_mix_destroy(b);
    free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_07_02_01),
        cmocka_unit_test(test_prefix_5_3_1),
        cmocka_unit_test(test_prefix_random),
        cmocka_unit_test(test_prefix_1000_parts),
        cmocka_unit_test(test_reference_sequence),
        cmocka_unit_test(test_seek_matches_walk),
        cmocka_unit_test(test_seek_far),
        cmocka_unit_test(test_counts_match_walk),
        cmocka_unit_test(test_period),
        cmocka_unit_test(test_most_parts_longest_period),
        cmocka_unit_test(test_one_part),
        cmocka_unit_test(test_bad_weights),
        cmocka_unit_test(test_quantization),
        cmocka_unit_test(test_refused_ratios),
        cmocka_unit_test(test_shares_within_one_percent),
        cmocka_unit_test(test_determinism),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
