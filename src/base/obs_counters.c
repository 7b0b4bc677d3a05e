/*
 * obs_counters.c - the recording side of observability: histograms (the
 * public zp_hist_* functions and the one-writer zpi_ahist), the per-run
 * counter block and the operators' scheduling accounting
 * (obs_counters.h). Snapshots and JSON are observe.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/obs_counters.h"
#include "base/util.h"

/* ------------------------------------------------------------ histograms */

size_t zp_hist_bucket(uint64_t v)
{
    if (v < ZP_HIST_SUB)
        return (size_t)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v);
    if (e >= ZP_HIST_MAX_EXP)
        return ZP_HIST_BUCKETS - 1;
    unsigned sub = (unsigned)(v >> (e - 4)) & (ZP_HIST_SUB - 1);
    return ZP_HIST_SUB + (size_t)(e - 4) * ZP_HIST_SUB + sub;
}

void zp_hist_bucket_range(size_t b, uint64_t *lo, uint64_t *hi)
{
    if (b < ZP_HIST_SUB) {
        *lo = *hi = b;
        return;
    }
    if (b >= ZP_HIST_BUCKETS)
        b = ZP_HIST_BUCKETS - 1;
    unsigned e = (unsigned)((b - ZP_HIST_SUB) / ZP_HIST_SUB) + 4;
    uint64_t sub = (b - ZP_HIST_SUB) % ZP_HIST_SUB;
    *lo = (ZP_HIST_SUB + sub) << (e - 4);
    *hi = *lo + ((uint64_t)1 << (e - 4)) - 1;
}

void zp_hist_init(zp_hist *h)
{
    memset(h, 0, sizeof *h);
    h->min_ns = UINT64_MAX;
}

void zp_hist_record(zp_hist *h, uint64_t ns)
{
    h->count++;
    h->sum_ns += ns;
    if (ns < h->min_ns)
        h->min_ns = ns;
    if (ns > h->max_ns)
        h->max_ns = ns;
    h->buckets[zp_hist_bucket(ns)]++;
}

void zp_hist_merge(zp_hist *dst, const zp_hist *src)
{
    dst->count += src->count;
    dst->sum_ns += src->sum_ns;
    if (src->min_ns < dst->min_ns)
        dst->min_ns = src->min_ns;
    if (src->max_ns > dst->max_ns)
        dst->max_ns = src->max_ns;
    for (size_t i = 0; i < ZP_HIST_BUCKETS; i++)
        dst->buckets[i] += src->buckets[i];
}

uint64_t zp_hist_quantile(const zp_hist *h, double q)
{
    if (!h->count)
        return 0;
    if (q <= 0)
        return h->min_ns;
    if (q >= 1)
        return h->max_ns;
    uint64_t rank = (uint64_t)ceil(q * (double)h->count);
    if (rank < 1)
        rank = 1;
    uint64_t seen = 0;
    for (size_t b = 0; b < ZP_HIST_BUCKETS; b++) {
        seen += h->buckets[b];
        if (seen >= rank) {
            uint64_t lo, hi;
            zp_hist_bucket_range(b, &lo, &hi);
            if (hi > h->max_ns)
                hi = h->max_ns;
            if (hi < h->min_ns)
                hi = h->min_ns;
            return hi;
        }
    }
    return h->max_ns;
}

void zpi_ahist_init(zpi_ahist *h)
{
    memset(h, 0, sizeof *h);
    atomic_store_explicit(&h->min, UINT64_MAX, memory_order_relaxed);
}

void zpi_ahist_record(zpi_ahist *h, uint64_t ns)
{
    zpi_ctr_add(&h->count, 1);
    zpi_ctr_add(&h->sum, ns);
    if (ns < zpi_ctr_get(&h->min))
        atomic_store_explicit(&h->min, ns, memory_order_relaxed);
    if (ns > zpi_ctr_get(&h->max))
        atomic_store_explicit(&h->max, ns, memory_order_relaxed);
    zpi_ctr_add(&h->buckets[zp_hist_bucket(ns)], 1);
}

void zpi_ahist_read(const zpi_ahist *h, zp_hist *dst)
{
    zp_hist t;
    t.count = zpi_ctr_get(&h->count);
    t.sum_ns = zpi_ctr_get(&h->sum);
    t.min_ns = zpi_ctr_get(&h->min);
    t.max_ns = zpi_ctr_get(&h->max);
    for (size_t i = 0; i < ZP_HIST_BUCKETS; i++)
        t.buckets[i] = zpi_ctr_get(&h->buckets[i]);
    zp_hist_merge(dst, &t);
}

/* ------------------------------------------------------------ counter block */

zp_status zpi_obs_create(int threads, zpi_obs **out)
{
    *out = NULL;
    zpi_obs *o = calloc(1, sizeof *o);
    if (!o)
        return ZP_ERR_NOMEM;
    o->threads = threads;
    o->th = aligned_alloc(64, ((sizeof *o->th * (size_t)threads) + 63) / 64 * 64);
    if (!o->th) {
        free(o);
        return ZP_ERR_NOMEM;
    }
    memset(o->th, 0, sizeof *o->th * (size_t)threads);
    for (int i = 0; i < threads; i++) {
        zpi_ahist_init(&o->th[i].open_hist);
        zpi_ahist_init(&o->th[i].record_hist);
        zpi_ahist_init(&o->th[i].pf_hist);
        zpi_ahist_init(&o->th[i].od_hist);
    }
    o->t_start = zpi_now_ns();
    for (int s = 0; s < ZPI_OBS_STAGES; s++)
        o->stage[s].t_last = o->t_start;
    *out = o;
    return ZP_OK;
}

void zpi_obs_destroy(zpi_obs *o)
{
    if (o) {
        free(o->th);
        free(o);
    }
}

void zpi_obs_stage_tick(zpi_obs_stage *os, uint64_t now, size_t queued, size_t running,
                        size_t parallelism)
{
    double dt = (double)(now - os->t_last);
    if (now <= os->t_last)
        return;
    if (queued == 0 && running < parallelism)
        os->starved_ns += dt * (double)(parallelism - running);
    os->queue_area += dt * (double)queued;
    os->t_last = now;
}
