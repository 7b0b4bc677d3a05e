/*
 * zephon/histogram.h - fixed-size, mergeable histograms of durations, used by
 * the observability snapshots (zephon/observe.h) and recorded by every layer
 * that times its work.
 */
#ifndef ZEPHON_HISTOGRAM_H
#define ZEPHON_HISTOGRAM_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A log-linear histogram of durations in nanoseconds (HDR-style): values
 * below 16 ns have their own bucket; above, each power of two is split into
 * 16 buckets, so a reported percentile is within 1/16 (6.25%) of the true
 * value. Values up to 2^48 ns (about 78 hours); larger ones are clamped.
 * Fixed size, mergeable by adding counts (across threads and ranks). */
#define ZP_HIST_SUB 16
#define ZP_HIST_MAX_EXP 48
#define ZP_HIST_BUCKETS (ZP_HIST_SUB + (ZP_HIST_MAX_EXP - 4) * ZP_HIST_SUB)

typedef struct zp_hist {
    uint64_t count;
    uint64_t sum_ns;
    uint64_t min_ns; /* UINT64_MAX when empty */
    uint64_t max_ns;
    uint64_t buckets[ZP_HIST_BUCKETS];
} zp_hist;

ZP_API void zp_hist_init(zp_hist *h);
ZP_API void zp_hist_record(zp_hist *h, uint64_t ns);
/* dst += src. */
ZP_API void zp_hist_merge(zp_hist *dst, const zp_hist *src);
/* The value at quantile q (0..1): the upper bound of the bucket holding it,
 * clamped to [min, max]. 0 when empty. */
ZP_API uint64_t zp_hist_quantile(const zp_hist *h, double q);
/* Bucket index of a value, and the bucket's [lo, hi] range. */
ZP_API size_t zp_hist_bucket(uint64_t ns);
ZP_API void zp_hist_bucket_range(size_t b, uint64_t *lo, uint64_t *hi);

#ifdef __cplusplus
}
#endif
#endif
