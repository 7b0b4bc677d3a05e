/*
 * bench_util.h - what the C benchmarks share: a monotonic clock, the
 * median of a sample, and a failure that names the benchmark.
 */
#ifndef ZP_BENCH_UTIL_H
#define ZP_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void bench_die(const char *bench, const char *what, const char *msg)
{
    fprintf(stderr, "%s: %s: %s\n", bench, what, msg);
    exit(1);
}

static inline int bench_cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (sorts v; n > 0). */
static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
