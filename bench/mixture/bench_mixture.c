/*
 * bench_mixture.c - the cost of the mixture's selection (src/plan/mixture.c):
 * nanoseconds per draw of zpi_mix_cursor_next() walking sequentially, per
 * zpi_mix_cursor_seek() to a random position, per zpi_mix_counts(), and
 * the one-time zpi_mix_create(), for 3 parts (0.7/0.2/0.1) and for 1000
 * parts with random real weights. Prints figures, no pass/fail.
 *
 *   bench/mixture/run.sh [BUILD_DIR]        (or: bench_mixture [DRAWS])
 *
 * Single-threaded; owns everything it allocates.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "plan/mixture.h"

#include "../bench_util.h"

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Keeps the results alive. */
static volatile uint64_t sink;

static int run(const char *name, const double *w, size_t n, uint64_t draws, uint64_t seeks)
{
    zpi_err err;
    zpi_err_clear(&err);
    zpi_mix *m;
    double t0 = bench_now();
    if (zpi_mix_create(w, NULL, n, &m, &err) != ZP_OK) {
        fprintf(stderr, "bench_mixture: %s: %s\n", name, zpi_err_msg(&err));
        return 1;
    }
    double t_create = bench_now() - t0;
    zpi_mix_cursor *c;
    if (zpi_mix_cursor_create(m, &c) != ZP_OK) {
        fprintf(stderr, "bench_mixture: %s: out of memory\n", name);
        zpi_mix_destroy(m);
        return 1;
    }
    uint64_t T = zpi_mix_period(m);
    uint64_t K = (T + 255) / 256;

    /* Sequential: best of 3 rounds (the machine is shared and noisy). */
    double best = 1e30;
    uint64_t acc = 0;
    for (int round = 0; round < 3; round++) {
        zpi_mix_cursor_seek(c, 0);
        t0 = bench_now();
        for (uint64_t g = 0; g < draws; g++) {
            uint32_t p;
            uint64_t pd;
            zpi_mix_cursor_next(c, &p, &pd);
            acc += p + pd;
        }
        double t = bench_now() - t0;
        best = t < best ? t : best;
    }
    sink = acc;
    double ns_next = best * 1e9 / (double)draws;

    /* Seek to random positions in [0, 2^62), then one draw. */
    uint64_t s = 1234;
    t0 = bench_now();
    for (uint64_t i = 0; i < seeks; i++) {
        uint32_t p;
        uint64_t pd;
        zpi_mix_cursor_seek(c, rng_next(&s) >> 2);
        zpi_mix_cursor_next(c, &p, &pd);
        acc += p + pd;
    }
    double ns_seek = (bench_now() - t0) * 1e9 / (double)seeks;

    /* counts(g) (allocates a temporary cursor). */
    uint64_t *cnt = malloc(n * sizeof *cnt);
    uint64_t nc = seeks / 4 + 1;
    t0 = bench_now();
    for (uint64_t i = 0; cnt && i < nc; i++) {
        zpi_mix_counts(m, rng_next(&s) >> 2, cnt);
        acc += cnt[0];
    }
    double ns_counts = (bench_now() - t0) * 1e9 / (double)nc;
    sink = acc;
    free(cnt);

    printf("%-28s period T = %llu, checkpoint every K = %llu draws\n", name,
           (unsigned long long)T, (unsigned long long)K);
    printf("  next (sequential)  %10.1f ns/draw   (best of 3 x %llu draws)\n", ns_next,
           (unsigned long long)draws);
    printf("  seek + next        %10.1f ns        (%llu random positions < 2^62)\n", ns_seek,
           (unsigned long long)seeks);
    printf("  counts             %10.1f ns        (%llu random positions)\n", ns_counts,
           (unsigned long long)nc);
    printf("  create             %10.3f ms        (walks one period)\n", t_create * 1e3);
    zpi_mix_cursor_destroy(c);
    zpi_mix_destroy(m);
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t draws = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000000;
    if (draws == 0)
        draws = 10000000;
    const double w3[] = {0.7, 0.2, 0.1};
    int rc = run("3 parts (0.7/0.2/0.1)", w3, 3, draws, 1000000);

    size_t n = 1000;
    double *w = malloc(n * sizeof *w);
    if (!w)
        return 1;
    uint64_t s = 42;
    for (size_t i = 0; i < n; i++)
        w[i] = 0.01 + (double)(rng_next(&s) >> 11) / 9007199254740992.0;
    rc |= run("1000 parts (random weights)", w, n, draws, 2000);
    free(w);
    return rc;
}
