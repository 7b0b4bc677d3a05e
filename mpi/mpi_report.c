/* mpi_report.c - reports: each rank's snapshots become one fixed-size
 * record, gathered to the root (MPI_Igather); histograms are merged on the
 * way (MPI_Ireduce); the root computes statistics over ranks, per-node
 * totals and the stragglers. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_internal.h"

/* ------------------------------------------------------------ metrics table */

typedef struct metric_def {
    const char *name;
    size_t off;
    int is_u64;
    zpi_mpi_unit unit;
} metric_def;

#define U(n, f, u) {n, offsetof(zp_mpi_rank_stats, f), 1, u}
#define D(n, f, u) {n, offsetof(zp_mpi_rank_stats, f), 0, u}
static const metric_def METRICS[ZP_MPI_M_COUNT] = {
    U("samples", samples, ZPI_U_COUNT),
    U("batches", batches, ZPI_U_COUNT),
    U("tokens", tokens, ZPI_U_COUNT),
    U("bytes_read", bytes_read, ZPI_U_BYTES),
    U("bytes_fetched", bytes_fetched, ZPI_U_BYTES),
    U("shards_opened", shards_opened, ZPI_U_COUNT),
    U("retries", retries, ZPI_U_COUNT),
    D("wall_s", wall, ZPI_U_SECONDS),
    D("first_batch_s", first_batch, ZPI_U_SECONDS),
    D("fetch_s", fetch, ZPI_U_SECONDS),
    D("open_s", open, ZPI_U_SECONDS),
    D("read_s", read, ZPI_U_SECONDS),
    D("decompress_s", decompress, ZPI_U_SECONDS),
    D("transfer_s", transfer, ZPI_U_SECONDS),
    D("stall_s", stall, ZPI_U_SECONDS),
    D("stall_fraction", stall_fraction, ZPI_U_FRACTION),
    D("sync_s", sync, ZPI_U_SECONDS),
    D("step_s", step, ZPI_U_SECONDS),
    D("fetch_per_batch_s", fetch_per_batch, ZPI_U_SECONDS),
    D("samples_per_s", samples_per_second, ZPI_U_SAMPLE_RATE),
    D("bytes_per_s", bytes_per_second, ZPI_U_BYTE_RATE),
    D("slowest_shard_s", slowest_shard, ZPI_U_SECONDS),
    D("cache_hit_rate", cache_hit_rate, ZPI_U_FRACTION),
    D("padding_fraction", padding_fraction, ZPI_U_FRACTION),
    D("cut_fraction", cut_fraction, ZPI_U_FRACTION),
};
#undef U
#undef D

zpi_mpi_unit zpi_mpi_metric_unit(int m)
{
    return (unsigned)m < ZP_MPI_M_COUNT ? METRICS[m].unit : ZPI_U_COUNT;
}

void zpi_mpi_human(char *buf, size_t cap, zpi_mpi_unit u, double v)
{
    switch (u) {
    case ZPI_U_COUNT:
        zpi_mpi_human_count(buf, cap, v);
        break;
    case ZPI_U_BYTES:
        zpi_mpi_human_bytes(buf, cap, v);
        break;
    case ZPI_U_SECONDS:
        zpi_mpi_human_seconds(buf, cap, v);
        break;
    case ZPI_U_FRACTION:
        zpi_mpi_human_percent(buf, cap, v);
        break;
    case ZPI_U_SAMPLE_RATE:
        zpi_mpi_human_rate(buf, cap, v, "samples");
        break;
    case ZPI_U_BYTE_RATE:
        if (isfinite(v)) {
            char t[40];
            zpi_mpi_human_bytes(t, sizeof t, v);
            zpi_fmt(buf, cap, "%s/s", t);
        } else {
            zpi_fmt(buf, cap, "-");
        }
        break;
    }
}

const char *zp_mpi_metric_name(zp_mpi_metric m)
{
    return (unsigned)m < ZP_MPI_M_COUNT ? METRICS[m].name : NULL;
}

static double metric_value(const zp_mpi_rank_stats *s, int m)
{
    const char *p = (const char *)s + METRICS[m].off;
    if (METRICS[m].is_u64) {
        uint64_t v;
        memcpy(&v, p, sizeof v);
        return (double)v;
    }
    double d;
    memcpy(&d, p, sizeof d);
    return d;
}

/* ------------------------------------------------------------ the record */

zp_status zp_mpi_input_from_pipeline(zp_pipeline *p, zp_mpi_input *in)
{
    if (!p || !in)
        return ZP_ERR_INVALID;
    zp_status st;
    if ((st = zp_pipeline_metrics_snapshot(p, &in->metrics)) != ZP_OK ||
        (st = zp_pipeline_fetch_timing_snapshot(p, &in->fetch)) != ZP_OK ||
        (st = zp_pipeline_prefetch_timing_snapshot(p, &in->prefetch)) != ZP_OK)
        return st;
    zp_pipeline_get_counts(p, &in->counts);
    return ZP_OK;
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0; }

static void fill_record(zp_mpi *m, const zp_mpi_input *in, zp_mpi_rank_stats *s)
{
    memset(s, 0, sizeof *s);
    s->rank = m->rank;
    s->node = m->node;
    s->local_rank = m->local_rank;
    s->report_index = m->reports;
    s->batches_dropped = m->dropped;
    s->sync = m->sync_seconds;
    s->slowest_shard_index = -1;
    s->cores = (uint32_t)m->bind_cores;
    s->sharing = (uint32_t)m->bind_share;
    s->node_cores = (uint32_t)m->node_cores;
    s->stall_notices = m->wd_sent;
    if (!in) {
        s->win_fetch_per_batch = NAN;
        s->win_stall_fraction = NAN;
        return;
    }
    const zp_metrics_snapshot *mt = &in->metrics;
    const zp_fetch_timing *f = &in->fetch;
    const zp_prefetch_timing *pf = &in->prefetch;
    s->valid = 1;
    s->threads = mt->threads;
    s->batches = mt->batches;
    s->samples = mt->samples;
    s->tokens = mt->tokens;
    s->records = f->records;
    s->bytes_read = f->bytes_compressed + pf->bytes;
    s->bytes_fetched = f->bytes_uncompressed;
    s->shards_opened = f->shards_opened;
    s->downloads = pf->downloads;
    s->retries = pf->retries;
    s->cache_hits = pf->cache_hits;
    s->cache_misses = pf->cache_misses;
    s->peer_shards = pf->peer_shards;
    s->peer_bytes = pf->peer_bytes;
    s->peer_seconds = pf->peer_seconds;
    s->peer_fallbacks = pf->peer_fallbacks;
    s->peer_served = pf->peer_served;
    s->peer_served_bytes = pf->peer_served_bytes;
    s->padded = in->counts.padded;
    s->skipped = in->counts.skipped;
    s->wall = mt->wall_seconds;
    s->first_batch = mt->time_to_first_batch;
    s->stall = mt->stall_seconds;
    s->fetch = f->fetch_seconds;
    s->open = f->open_seconds;
    s->read = f->read_seconds;
    s->decompress = f->decompress_seconds;
    s->fetch_wait = f->wait_seconds + pf->wait_seconds;
    s->transfer = (double)pf->latency_ns.sum_ns * 1e-9;
    s->ondemand_reads = f->ondemand_reads;
    s->ondemand_bytes = f->ondemand_bytes;
    s->ondemand = f->ondemand_seconds;
    s->ondemand_io = f->ondemand_io_seconds;
    s->hdf5_lock_wait = f->hdf5_lock_wait_seconds;
    s->slowest_shard = f->slowest_shard_seconds;
    s->slowest_shard_index = f->slowest_shard;
    s->slowest_record = f->record_ns.count ? (double)f->record_ns.max_ns * 1e-9 : 0;
    s->stall_fraction = mt->stall_fraction;
    for (uint32_t i = 0; i < mt->n_tuned && i < ZP_OBS_MAX_OPS + 1; i++) {
        const zp_tuned_setting *t = &mt->tuned[i];
        int bit = !strcmp(t->op, "output") ? 0 : !strcmp(t->op, "fetch") ? 1
                  : !strcmp(t->op, "tokenize")                          ? 2
                                                                        : -1;
        uint32_t *v = bit == 0 ? &s->tuned_prefetch_batches : bit == 1 ? &s->tuned_fetch
                      : bit == 2                               ? &s->tuned_tokenize
                                                               : NULL;
        if (v) {
            *v = t->value;
            s->tuned_auto |= t->is_auto ? 1u << bit : 0;
        }
    }
    s->step = s->batches ? s->wall / (double)s->batches : 0;
    s->fetch_per_batch = s->batches ? s->fetch / (double)s->batches : 0;
    s->samples_per_second = ratio((double)s->samples, s->wall);
    s->bytes_per_second = ratio((double)s->bytes_fetched, s->wall);
    s->cache_hit_rate = ratio((double)s->cache_hits, (double)(s->cache_hits + s->cache_misses));
    s->pad_tokens = mt->pad_tokens;
    s->cut_documents = mt->cut_documents;
    s->padding_fraction = mt->padding_fraction;
    s->cut_fraction = mt->cut_fraction;
    s->balance_windows = in->counts.balance_windows;
    s->attn_cost = in->counts.attn_cost;
    s->attn_peak_before = in->counts.attn_peak_before;
    s->attn_peak_after = in->counts.attn_peak_after;
    s->attn_imbalance_before = ratio((double)s->attn_peak_before, (double)s->attn_cost);
    s->attn_imbalance_after = ratio((double)s->attn_peak_after, (double)s->attn_cost);
    /* the window: the change since this rank's previous report */
    const zp_mpi_rank_stats *pv = m->have_prev ? &m->prev : NULL;
    uint64_t db = s->batches - (pv ? pv->batches : 0);
    double dt = s->wall - (pv ? pv->wall : 0);
    double df = s->fetch - (pv ? pv->fetch : 0);
    double dstall = s->stall - (pv ? pv->stall : 0);
    s->win_batches = db;
    s->win_seconds = dt;
    s->win_fetch_per_batch = db ? df / (double)db : NAN;
    if (!pv)
        s->win_stall_fraction = s->stall_fraction; /* excludes the wait for the first batch */
    else
        s->win_stall_fraction = dt > 0 ? dstall / dt : NAN;
}

/* The mixture parts' counters (see ZPI_MPI_PSUM / ZPI_MPI_PMIN). */
static void fill_parts(const zp_mpi_input *in, uint64_t *psum, uint64_t *pmin)
{
    memset(psum, 0, ZPI_MPI_PSUM * sizeof *psum);
    for (int k = 0; k < ZPI_MPI_PMIN; k++)
        pmin[k] = UINT64_MAX;
    if (!in)
        return;
    const zp_metrics_snapshot *mt = &in->metrics;
    uint32_t n = mt->n_parts < ZP_OBS_MAX_PARTS ? mt->n_parts : ZP_OBS_MAX_PARTS;
    uint64_t all_s = 0, all_t = 0;
    for (uint32_t i = 0; i < n; i++) {
        const zp_part_metrics *pm = &mt->parts[i];
        psum[2 * i] = pm->samples;
        psum[2 * i + 1] = pm->tokens;
        all_s += pm->samples;
        all_t += pm->tokens;
        double w = pm->weight > 0 && isfinite(pm->weight) ? pm->weight : 0;
        uint64_t bits;
        memcpy(&bits, &w, sizeof bits);
        pmin[2 + i] = UINT64_MAX - bits;
    }
    if (mt->parts_total > n) {
        /* parts beyond the listed ones: the sums over every part from a
         * listed part's fraction (exact to rounding) */
        for (uint32_t i = 0; i < n; i++)
            if (mt->parts[i].sample_fraction > 0) {
                all_s = (uint64_t)llround((double)mt->parts[i].samples /
                                          mt->parts[i].sample_fraction);
                break;
            }
        for (uint32_t i = 0; i < n; i++)
            if (mt->parts[i].token_fraction > 0) {
                all_t = (uint64_t)llround((double)mt->parts[i].tokens /
                                          mt->parts[i].token_fraction);
                break;
            }
    }
    psum[2 * ZP_OBS_MAX_PARTS] = all_s;
    psum[2 * ZP_OBS_MAX_PARTS + 1] = all_t;
    pmin[0] = UINT64_MAX - n;
    pmin[1] = UINT64_MAX - mt->parts_total;
}

static void fill_hists(const zp_mpi_input *in, uint64_t *hsum, uint64_t *hmin)
{
    memset(hsum, 0, ZPI_MPI_NHIST * ZPI_MPI_HSUM * sizeof *hsum);
    for (int h = 0; h < ZPI_MPI_NHIST; h++) {
        hmin[2 * h] = UINT64_MAX;
        hmin[2 * h + 1] = UINT64_MAX; /* UINT64_MAX - max, max = 0 */
    }
    fill_parts(in, hsum + ZPI_MPI_NHIST * ZPI_MPI_HSUM, hmin + ZPI_MPI_NHIST * 2);
    if (!in)
        return;
    const zp_hist *src[ZPI_MPI_NHIST] = {&in->fetch.open_ns, &in->fetch.record_ns,
                                         &in->prefetch.latency_ns};
    for (int h = 0; h < ZPI_MPI_NHIST; h++) {
        uint64_t *d = hsum + (size_t)h * ZPI_MPI_HSUM;
        d[0] = src[h]->count;
        d[1] = src[h]->sum_ns;
        memcpy(d + 2, src[h]->buckets, sizeof src[h]->buckets);
        if (src[h]->count) {
            hmin[2 * h] = src[h]->min_ns;
            hmin[2 * h + 1] = UINT64_MAX - src[h]->max_ns;
        }
    }
}

/* ------------------------------------------------------------ start / test / wait */

zp_status zp_mpi_report_start(zp_mpi *m, const zp_mpi_input *in, zp_mpi_report_kind kind)
{
    ZPI_MPI_USABLE(m);
    zpi_mpi_pending *pd = &m->pend;
    /* A rank-local refusal here would leave the others in a collective: the
     * state check is the same on every rank that follows the rules. */
    if (pd->active)
        return zpi_mpi_fail(m, ZP_ERR_STATE, "a report is already in flight on this handle");
    if (kind != ZP_MPI_REPORT_FINAL && kind != ZP_MPI_REPORT_WINDOW)
        return zpi_mpi_fail(m, ZP_ERR_INVALID, "bad report kind %d", (int)kind);
    pd->t0 = zpi_now();
    pd->kind = kind;
    fill_record(m, in, &pd->send);
    fill_hists(in, pd->hsum, pd->hmin);
    pd->have_names = 0;
    if (in && m->rank == m->cfg.root) {
        pd->have_names = 1;
        for (uint32_t i = 0; i < ZP_OBS_MAX_PARTS; i++)
            zpi_fmt(pd->part_names[i], ZP_OBS_NAME, "%s",
                    i < in->metrics.n_parts ? in->metrics.parts[i].name : "");
    }
    m->prev = pd->send;
    m->have_prev = in != NULL;
    m->reports++;
    zp_status st;
    st = zpi_mpi_check(m, zpi_coll_igather(m, &pd->send, pd->recv, (int)sizeof pd->send,
                                           MPI_BYTE, m->cfg.root, &pd->req[0]),
                       "MPI_Igather (report records)");
    if (st == ZP_OK)
        st = zpi_mpi_check(m, zpi_coll_ireduce(m, pd->hsum, pd->hsum_out, ZPI_MPI_SUMN, MPI_UINT64_T,
                                               MPI_SUM, m->cfg.root, &pd->req[1]),
                           "MPI_Ireduce (histograms, mixture parts)");
    if (st == ZP_OK)
        st = zpi_mpi_check(m, zpi_coll_ireduce(m, pd->hmin, pd->hmin_out, ZPI_MPI_MINN, MPI_UINT64_T,
                                               MPI_MIN, m->cfg.root, &pd->req[2]),
                           "MPI_Ireduce (histogram extremes, part counts)");
    if (st != ZP_OK)
        return st;
    pd->active = 1;
    return ZP_OK;
}

/* The end of the report in flight, whose requests completed with st: the
 * analysis at the root; the report to *out, or destroyed when out is NULL. */
static zp_status finish(zp_mpi *m, zp_status st, zp_cluster_report **out)
{
    m->pend.active = 0;
    zp_cluster_report *r = NULL;
    if (st == ZP_OK && m->rank == m->cfg.root)
        st = zpi_mpi_analyse(m, &m->pend, &r);
    if (out)
        *out = r;
    else
        zp_cluster_report_destroy(r);
    return st;
}

zp_status zp_mpi_report_test(zp_mpi *m, int *done, zp_cluster_report **out)
{
    if (out)
        *out = NULL;
    if (done)
        *done = 0;
    if (!m || !done)
        return ZP_ERR_INVALID;
    if (!m->pend.active)
        return zpi_mpi_fail(m, ZP_ERR_STATE, "no report in flight");
    int flag = 0;
    zp_status st = zpi_mpi_check(m, zpi_coll_testall(m, 3, m->pend.req, &flag),
                                 "MPI_Testall (report)");
    if (st == ZP_OK && !flag)
        return ZP_OK;
    *done = st == ZP_OK;
    return finish(m, st, out);
}

zp_status zp_mpi_report_wait(zp_mpi *m, zp_cluster_report **out)
{
    if (out)
        *out = NULL;
    ZPI_MPI_USABLE(m);
    if (!m->pend.active)
        return zpi_mpi_fail(m, ZP_ERR_STATE, "no report in flight");
    return finish(m, zpi_mpi_check(m, zpi_coll_waitall(m, 3, m->pend.req),
                                   "MPI_Waitall (report)"),
                  out);
}

int zp_mpi_report_pending(const zp_mpi *m) { return m ? m->pend.active : 0; }

zp_status zp_mpi_report(zp_mpi *m, const zp_mpi_input *in, zp_mpi_report_kind kind,
                        zp_cluster_report **out)
{
    if (out)
        *out = NULL;
    zp_status st = zp_mpi_report_start(m, in, kind);
    if (st != ZP_OK)
        return st;
    return zp_mpi_report_wait(m, out);
}

/* ------------------------------------------------------------ analysis */

/* The k-th smallest of v[0..n) (Hoare's selection, O(n) on average);
 * reorders v so that v[0..k) <= v[k]. */
static double select_kth(double *v, size_t n, size_t k)
{
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        double pivot = v[lo + (hi - lo) / 2];
        size_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot)
                i++;
            while (v[j] > pivot)
                j--;
            if (i <= j) {
                double t = v[i];
                v[i] = v[j];
                v[j] = t;
                i++;
                if (j == 0)
                    break;
                j--;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            break;
    }
    return v[k];
}

/* The median of v[0..n) (v is reordered); NaN when empty. */
static double median_of(double *v, size_t n)
{
    if (n == 0)
        return NAN;
    double hi = select_kth(v, n, n / 2);
    if (n % 2)
        return hi;
    double lo = v[0]; /* the largest of the lower half */
    for (size_t i = 1; i < n / 2; i++)
        if (v[i] > lo)
            lo = v[i];
    return 0.5 * (lo + hi);
}

/* The straggler criterion on values x (fetch per batch) and stall
 * fractions of the ranks whose ok[i] is set. Fills flag, ratio, z; returns
 * the bits per rank in flag (0 when not flagged). */
static void judge(const zp_mpi_config *cfg, int n, const double *x, const double *stall,
                  const uint8_t *ok, uint8_t *flag, double *rat, double *z, double *med_out,
                  double *mad_out, double *scratch)
{
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        flag[i] = 0;
        rat[i] = NAN;
        z[i] = NAN;
        if (ok[i] && isfinite(x[i]))
            scratch[k++] = x[i];
    }
    double med = median_of(scratch, k);
    size_t k2 = 0;
    for (int i = 0; i < n; i++)
        if (ok[i] && isfinite(x[i]))
            scratch[k2++] = fabs(x[i] - med);
    double mad = median_of(scratch, k2);
    /* MAD is 0 when more than half the ranks are equal: fall back to the
     * mean absolute deviation (the usual modified z-score fallback), so one
     * rank that differs a little from identical peers is not infinitely far. */
    double meanad = 0;
    for (size_t i = 0; i < k2; i++)
        meanad += scratch[i];
    meanad = k2 ? meanad / (double)k2 : 0;
    *med_out = med;
    *mad_out = mad;
    for (int i = 0; i < n; i++) {
        if (!ok[i] || !isfinite(x[i]))
            continue;
        rat[i] = med > 0 ? x[i] / med : (x[i] > 0 ? INFINITY : 1.0);
        if (mad > 0)
            z[i] = 0.6745 * (x[i] - med) / mad;
        else if (meanad > 0)
            z[i] = (x[i] - med) / (1.253314 * meanad);
        else
            z[i] = 0.0; /* all equal */
        if (k < 2)
            continue; /* nobody to compare with */
        unsigned bits = 0;
        if (x[i] > med && rat[i] >= 1.0 + cfg->straggler_ratio)
            bits |= ZP_MPI_SLOW_RATIO;
        if (z[i] > cfg->straggler_z)
            bits |= ZP_MPI_SLOW_Z;
        if (bits && isfinite(stall[i]) && stall[i] >= cfg->straggler_min_stall)
            flag[i] = (uint8_t)(bits | ZP_MPI_SLOW_STALL);
    }
}

static void add_into(zp_mpi_rank_stats *t, const zp_mpi_rank_stats *s)
{
    t->threads += s->threads;
    t->local_rank += 1; /* rank count */
    t->batches += s->batches;
    t->samples += s->samples;
    t->tokens += s->tokens;
    t->records += s->records;
    t->bytes_read += s->bytes_read;
    t->bytes_fetched += s->bytes_fetched;
    t->shards_opened += s->shards_opened;
    t->downloads += s->downloads;
    t->retries += s->retries;
    t->cache_hits += s->cache_hits;
    t->cache_misses += s->cache_misses;
    t->peer_shards += s->peer_shards;
    t->peer_bytes += s->peer_bytes;
    t->peer_seconds += s->peer_seconds;
    t->peer_fallbacks += s->peer_fallbacks;
    t->peer_served += s->peer_served;
    t->peer_served_bytes += s->peer_served_bytes;
    t->padded += s->padded;
    t->skipped += s->skipped;
    t->batches_dropped += s->batches_dropped;
    t->wall = fmax(t->wall, s->wall);
    t->first_batch = fmax(t->first_batch, s->first_batch);
    t->stall += s->stall;
    t->fetch += s->fetch;
    t->open += s->open;
    t->read += s->read;
    t->decompress += s->decompress;
    t->fetch_wait += s->fetch_wait;
    t->transfer += s->transfer;
    t->sync += s->sync;
    t->ondemand_reads += s->ondemand_reads;
    t->ondemand_bytes += s->ondemand_bytes;
    t->ondemand += s->ondemand;
    t->ondemand_io += s->ondemand_io;
    t->hdf5_lock_wait += s->hdf5_lock_wait;
    t->pad_tokens += s->pad_tokens;
    t->cut_documents += s->cut_documents;
    t->balance_windows += s->balance_windows;
    t->attn_cost += s->attn_cost;
    t->attn_peak_before += s->attn_peak_before;
    t->attn_peak_after += s->attn_peak_after;
    if (s->slowest_shard > t->slowest_shard) {
        t->slowest_shard = s->slowest_shard;
        t->slowest_shard_index = s->slowest_shard_index;
    }
    t->slowest_record = fmax(t->slowest_record, s->slowest_record);
    t->win_batches += s->win_batches;
    t->win_seconds = fmax(t->win_seconds, s->win_seconds);
    /* running sums for the derived fields, finished in derive() */
    t->stall_fraction += s->wall - s->first_batch;
    t->step += s->step;
}

static void derive(zp_mpi_rank_stats *t)
{
    uint32_t n = (uint32_t)t->local_rank;
    double active = t->stall_fraction; /* summed wall after the first batch */
    t->stall_fraction = ratio(t->stall, active);
    t->step = n ? t->step / n : 0; /* mean step */
    t->fetch_per_batch = ratio(t->fetch, (double)t->batches);
    t->samples_per_second = ratio((double)t->samples, t->wall);
    t->bytes_per_second = ratio((double)t->bytes_fetched, t->wall);
    t->cache_hit_rate = ratio((double)t->cache_hits, (double)(t->cache_hits + t->cache_misses));
    t->padding_fraction = ratio((double)t->pad_tokens, (double)(t->tokens + t->pad_tokens));
    t->cut_fraction = ratio((double)t->cut_documents, (double)t->samples);
    t->attn_imbalance_before = ratio((double)t->attn_peak_before, (double)t->attn_cost);
    t->attn_imbalance_after = ratio((double)t->attn_peak_after, (double)t->attn_cost);
    t->win_fetch_per_batch = NAN;
    t->win_stall_fraction = NAN;
}

static void stat_of(const zp_mpi_rank_stats *rs, int n, int metric, zp_mpi_stat *s)
{
    memset(s, 0, sizeof *s);
    s->min_rank = s->max_rank = -1;
    double sum = 0;
    uint32_t k = 0;
    for (int i = 0; i < n; i++) {
        if (!rs[i].valid)
            continue;
        double v = metric_value(&rs[i], metric);
        if (!isfinite(v))
            continue;
        if (k == 0 || v < s->min) {
            s->min = v;
            s->min_rank = rs[i].rank;
        }
        if (k == 0 || v > s->max) {
            s->max = v;
            s->max_rank = rs[i].rank;
        }
        sum += v;
        k++;
    }
    s->ranks = k;
    s->sum = sum;
    if (!k)
        return;
    s->mean = sum / k;
    double ss = 0;
    for (int i = 0; i < n; i++) {
        if (!rs[i].valid)
            continue;
        double v = metric_value(&rs[i], metric);
        if (isfinite(v))
            ss += (v - s->mean) * (v - s->mean);
    }
    s->stddev = sqrt(ss / k);
    s->imbalance = s->mean > 0 ? s->max / s->mean : 0;
}

static void straggler_text(char *buf, size_t cap, const zp_mpi_config *cfg,
                           const zp_mpi_straggler *s, zp_mpi_report_kind kind)
{
    size_t n = 0;
    buf[0] = '\0';
    char f[32], md[32];
    zpi_mpi_human_seconds(f, sizeof f, s->fetch_per_batch);
    zpi_mpi_human_seconds(md, sizeof md, s->median);
    zpi_mpi_append(buf, cap, &n, "fetch %s/batch", f);
    if (isfinite(s->ratio))
        zpi_mpi_append(buf, cap, &n, " = %.2fx the median %s", s->ratio, md);
    else
        zpi_mpi_append(buf, cap, &n, " (median %s)", md);
    if (s->reasons & ZP_MPI_SLOW_RATIO)
        zpi_mpi_append(buf, cap, &n, " (>= %.2fx)", 1.0 + cfg->straggler_ratio);
    if (s->reasons & ZP_MPI_SLOW_Z) {
        if (isfinite(s->z))
            zpi_mpi_append(buf, cap, &n, "; robust z %.1f (> %.1f)", s->z, cfg->straggler_z);
        else
            zpi_mpi_append(buf, cap, &n, "; robust z inf (> %.1f)", cfg->straggler_z);
    }
    zpi_mpi_append(buf, cap, &n, "; consumer waits %.1f%% of its step (>= %.1f%%)",
           s->stall_fraction * 100, cfg->straggler_min_stall * 100);
    if (kind == ZP_MPI_REPORT_WINDOW)
        zpi_mpi_append(buf, cap, &n, "; in the last %u windows", s->windows);
}

static int cmp_strag(const void *a, const void *b)
{
    const zp_mpi_straggler *x = a, *y = b;
    if (x->fetch_per_batch != y->fetch_per_batch)
        return x->fetch_per_batch < y->fetch_per_batch ? 1 : -1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static const char *job_env(void)
{
    static const char *const names[] = {"SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v)
            return v;
    }
    return NULL;
}

/* The analysis's work arrays, freed at its end. */
typedef struct {
    double *x, *stall, *scratch, *wz, *wr;
    uint8_t *ok, *wflag;
} analyse_scratch;

static void scratch_free(analyse_scratch *sc)
{
    free(sc->x);
    free(sc->stall);
    free(sc->scratch);
    free(sc->wz);
    free(sc->wr);
    free(sc->ok);
    free(sc->wflag);
}

/* A report of N ranks with its arrays allocated (keep windows of history),
 * and the work arrays; 0, or -1 when out of memory (r is then destroyed by
 * the caller). */
static int report_alloc(zp_mpi *m, zp_cluster_report *r, int n, int keep, analyse_scratch *sc)
{
    r->ranks = malloc((size_t)n * sizeof *r->ranks);
    r->node_tot = calloc((size_t)(m->nodes > 0 ? m->nodes : 1), sizeof *r->node_tot);
    r->hosts = malloc((size_t)n * ZPI_MPI_HOST);
    r->z = malloc((size_t)n * sizeof *r->z);
    r->ratio = malloc((size_t)n * sizeof *r->ratio);
    r->flag = calloc((size_t)n, 1);
    r->named = calloc((size_t)n, 1);
    r->node_off = calloc((size_t)(m->nodes > 0 ? m->nodes : 1) + 1, sizeof *r->node_off);
    r->node_list = malloc((size_t)n * sizeof *r->node_list);
    sc->x = calloc((size_t)n, sizeof *sc->x);
    sc->stall = calloc((size_t)n, sizeof *sc->stall);
    sc->scratch = malloc((size_t)n * sizeof *sc->scratch);
    sc->wz = malloc((size_t)n * sizeof *sc->wz);
    sc->wr = malloc((size_t)n * sizeof *sc->wr);
    sc->ok = calloc((size_t)n, 1);
    sc->wflag = calloc((size_t)n, 1);
    r->strag = calloc((size_t)n, sizeof *r->strag);
    r->win = malloc((size_t)keep * (size_t)n * sizeof *r->win);
    r->win_t = malloc((size_t)keep * sizeof *r->win_t);
    if (!r->ranks || !r->node_tot || !r->hosts || !r->named || !r->node_off || !r->node_list ||
        !r->z || !r->ratio || !r->flag || !sc->x || !sc->stall || !sc->scratch || !sc->wz ||
        !sc->wr || !sc->ok || !sc->wflag || !r->strag || !r->win || !r->win_t ||
        zpi_mpi_info_copy(&r->info, &m->info) != 0)
        return -1;
    return 0;
}

/* The merged histograms, from the reduced sums and minima. */
static void merge_histograms(zp_cluster_report *r, const zpi_mpi_pending *pd)
{
    for (int k = 0; k < ZPI_MPI_NHIST; k++) {
        zp_hist *hh = &r->hist[k];
        const uint64_t *s = pd->hsum_out + (size_t)k * ZPI_MPI_HSUM;
        hh->count = s[0];
        hh->sum_ns = s[1];
        memcpy(hh->buckets, s + 2, sizeof hh->buckets);
        hh->min_ns = pd->hmin_out[2 * k];
        hh->max_ns = hh->count ? UINT64_MAX - pd->hmin_out[2 * k + 1] : 0;
    }
}

/* The mixture parts summed over ranks. */
static void merge_parts(zp_cluster_report *r, const zpi_mpi_pending *pd)
{
    const uint64_t *ps = pd->hsum_out + ZPI_MPI_NHIST * ZPI_MPI_HSUM;
    const uint64_t *pm = pd->hmin_out + ZPI_MPI_NHIST * 2;
    uint64_t listed = UINT64_MAX - pm[0], total = UINT64_MAX - pm[1];
    r->n_parts = (uint32_t)(listed < ZP_OBS_MAX_PARTS ? listed : ZP_OBS_MAX_PARTS);
    r->parts_total = (uint32_t)(total < UINT32_MAX ? total : UINT32_MAX);
    uint64_t all_s = ps[2 * ZP_OBS_MAX_PARTS], all_t = ps[2 * ZP_OBS_MAX_PARTS + 1];
    for (uint32_t i = 0; i < r->n_parts; i++) {
        zp_part_metrics *p = &r->parts[i];
        if (pd->have_names && pd->part_names[i][0])
            zpi_fmt(p->name, sizeof p->name, "%s", pd->part_names[i]);
        else
            zpi_fmt(p->name, sizeof p->name, "part%u", i);
        uint64_t bits = UINT64_MAX - pm[2 + i];
        memcpy(&p->weight, &bits, sizeof bits);
        p->samples = ps[2 * i];
        p->tokens = ps[2 * i + 1];
        p->sample_fraction = all_s ? (double)p->samples / (double)all_s : 0;
        p->token_fraction = all_t ? (double)p->tokens / (double)all_t : 0;
    }
}

/* The cluster's and each node's totals, the threads per rank, the ranks
 * per node (PER_NODE: their counts, of r->nodes entries). */
static void sum_totals(zp_cluster_report *r, int *per_node)
{
    int n = r->size;
    memset(&r->totals, 0, sizeof r->totals);
    r->totals.rank = -1;
    r->totals.node = -1;
    r->totals.slowest_shard_index = -1;
    r->threads_min = UINT32_MAX;
    for (int j = 0; j < r->nodes; j++) {
        r->node_tot[j].rank = -1;
        r->node_tot[j].node = j;
        r->node_tot[j].slowest_shard_index = -1;
    }
    for (int i = 0; i < n; i++) {
        zp_mpi_rank_stats *s = &r->ranks[i];
        if (s->node >= 0 && s->node < r->nodes)
            per_node[s->node]++;
        if (!s->valid)
            continue;
        add_into(&r->totals, s);
        if (s->node >= 0 && s->node < r->nodes)
            add_into(&r->node_tot[s->node], s);
        if (s->threads < r->threads_min)
            r->threads_min = s->threads;
        if (s->threads > r->threads_max)
            r->threads_max = s->threads;
    }
    if (r->threads_min == UINT32_MAX)
        r->threads_min = 0;
    r->ranks_per_node_min = n;
    r->ranks_per_node_max = 0;
    for (int j = 0; j < r->nodes; j++) {
        if (per_node[j] < r->ranks_per_node_min)
            r->ranks_per_node_min = per_node[j];
        if (per_node[j] > r->ranks_per_node_max)
            r->ranks_per_node_max = per_node[j];
    }
}

/* The ranks of each node, in rank order (counting sort; PER_NODE: their
 * counts, used up). */
static void list_node_ranks(zp_cluster_report *r, int *per_node)
{
    for (int j = 0; j < r->nodes; j++)
        r->node_off[j + 1] = r->node_off[j] + per_node[j];
    for (int j = 0; j < r->nodes; j++)
        per_node[j] = r->node_off[j];
    for (int i = 0; i < r->size; i++) {
        int j = r->ranks[i].node;
        if (j >= 0 && j < r->nodes)
            r->node_list[per_node[j]++] = i;
    }
}

/* Totals, nodes, threads, the statistics of each metric. */
static zp_status summarise(zp_mpi *m, zp_cluster_report *r)
{
    int *per_node = calloc((size_t)(r->nodes > 0 ? r->nodes : 1), sizeof *per_node);
    if (!per_node)
        return zpi_mpi_fail(m, ZP_ERR_NOMEM, "out of memory counting the ranks of %d nodes",
                            r->nodes);
    sum_totals(r, per_node);
    list_node_ranks(r, per_node);
    free(per_node);
    derive(&r->totals);
    for (int j = 0; j < r->nodes; j++)
        derive(&r->node_tot[j]);
    for (int k = 0; k < ZP_MPI_M_COUNT; k++)
        stat_of(r->ranks, r->size, k, &r->stat[k]);
    return ZP_OK;
}

/* The criterion on this window (the history's streaks need it in every
 * report) and, in a final report, on the whole run: the report holds the
 * one of its basis. Returns the window's flags. */
static const uint8_t *judge_report(const zp_mpi *m, zp_cluster_report *r, analyse_scratch *sc)
{
    int n = r->size;
    int window = r->kind == ZP_MPI_REPORT_WINDOW;
    uint8_t *wf = window ? r->flag : sc->wflag;
    for (int i = 0; i < n; i++) {
        const zp_mpi_rank_stats *s = &r->ranks[i];
        sc->ok[i] = s->valid && s->win_batches > 0;
        sc->x[i] = s->win_fetch_per_batch;
        sc->stall[i] = s->win_stall_fraction;
    }
    judge(&m->cfg, n, sc->x, sc->stall, sc->ok, wf, window ? r->ratio : sc->wr,
          window ? r->z : sc->wz, &r->median, &r->mad, sc->scratch);
    if (!window) {
        for (int i = 0; i < n; i++) {
            const zp_mpi_rank_stats *s = &r->ranks[i];
            sc->ok[i] = s->valid && s->batches > 0;
            sc->x[i] = s->batches ? s->fetch_per_batch : NAN;
            sc->stall[i] = s->stall_fraction;
        }
        judge(&m->cfg, n, sc->x, sc->stall, sc->ok, r->flag, r->ratio, r->z, &r->median, &r->mad,
              sc->scratch);
    }
    return wf;
}

/* The root's window history: this window added (the oldest dropped when
 * full), each rank's streak of flagged windows, and the kept windows
 * copied into the report. */
static void record_window(zpi_mpi_history *h, zp_cluster_report *r, const uint8_t *wf)
{
    int n = r->size;
    uint32_t slot = h->kept < h->cap ? (h->head + h->kept) % h->cap : h->head;
    if (h->kept < h->cap)
        h->kept++;
    else
        h->head = (h->head + 1) % h->cap;
    for (int i = 0; i < n; i++) {
        h->fetch[(size_t)slot * (size_t)n + (size_t)i] = (float)r->ranks[i].win_fetch_per_batch;
        h->streak[i] = wf[i] ? h->streak[i] + 1 : 0;
    }
    h->t_end[slot] = r->totals.wall;
    h->total++;
    r->n_windows = (int)h->kept;
    r->first_window = h->total - h->kept;
    for (uint32_t w = 0; w < h->kept; w++) {
        uint32_t src = (h->head + w) % h->cap;
        memcpy(r->win + (size_t)w * (size_t)n, h->fetch + (size_t)src * (size_t)n,
               (size_t)n * sizeof *r->win);
        r->win_t[w] = h->t_end[src];
    }
}

/* The stragglers: in a window report the ranks flagged in the last
 * straggler_windows windows, in a final one the ranks flagged; slowest
 * first. */
static void name_stragglers(const zp_mpi *m, zp_cluster_report *r)
{
    const zpi_mpi_history *h = &m->hist;
    int window = r->kind == ZP_MPI_REPORT_WINDOW;
    for (int i = 0; i < r->size; i++) {
        const zp_mpi_rank_stats *s = &r->ranks[i];
        int named = window ? h->streak[i] >= m->cfg.straggler_windows : r->flag[i] != 0;
        if (!named)
            continue;
        r->named[i] = 1;
        zp_mpi_straggler *g = &r->strag[r->n_strag++];
        g->rank = s->rank;
        g->reasons = r->flag[i];
        g->fetch_per_batch = window ? s->win_fetch_per_batch : s->fetch_per_batch;
        g->median = r->median;
        g->ratio = r->ratio[i];
        g->z = r->z[i];
        g->stall_fraction = window ? s->win_stall_fraction : s->stall_fraction;
        g->windows = h->streak[i];
        straggler_text(g->reason, sizeof g->reason, &m->cfg, g, r->kind);
    }
    qsort(r->strag, r->n_strag, sizeof *r->strag, cmp_strag);
}

/* The throughput and the verdict. */
static void verdict(const zp_mpi *m, zp_cluster_report *r)
{
    const zp_mpi_stat *sps = &r->stat[ZP_MPI_M_SAMPLES_PER_SECOND];
    r->throughput = r->totals.samples_per_second;
    r->bounded = sps->ranks ? sps->min * (double)sps->ranks : 0;
    const zp_mpi_stat *sf = &r->stat[ZP_MPI_M_STALL_FRACTION];
    if (!sf->ranks) {
        zpi_fmt(r->verdict, sizeof r->verdict, "verdict: no rank reported data");
        return;
    }
    int holds = sf->max >= m->cfg.straggler_min_stall;
    size_t len = 0;
    zpi_mpi_append(r->verdict, sizeof r->verdict, &len,
           "verdict: data loading %s: mean stall %.1f%% of step time, worst rank %d at %.1f%%",
           holds ? "holds training back" : "keeps up", sf->mean * 100, sf->max_rank,
           sf->max * 100);
    if (r->n_strag) {
        int ranks[8];
        size_t nr = r->n_strag < 8 ? r->n_strag : 8;
        for (size_t i = 0; i < nr; i++)
            ranks[i] = r->strag[i].rank;
        char list[96];
        zpi_mpi_ranklist(list, sizeof list, ranks, nr);
        zpi_mpi_append(r->verdict, sizeof r->verdict, &len, "; straggler%s: rank%s %s%s",
               r->n_strag > 1 ? "s" : "", nr > 1 ? "s" : "", list,
               r->n_strag > nr ? " ..." : "");
    }
}

zp_status zpi_mpi_analyse(zp_mpi *m, zpi_mpi_pending *pd, zp_cluster_report **out)
{
    int n = m->size;
    double t_analysis = zpi_now();
    zp_cluster_report *r = calloc(1, sizeof *r);
    if (!r)
        return zpi_mpi_fail(m, ZP_ERR_NOMEM, "out of memory for a report");
    r->kind = pd->kind;
    r->size = n;
    r->nodes = m->nodes;
    r->root = m->cfg.root;
    r->cfg = m->cfg;
    r->index = m->reports - 1;
    r->gather_bytes = sizeof(zp_mpi_rank_stats);
    zpi_mpi_history *h = &m->hist;
    int keep = (int)(h->kept < h->cap ? h->kept + 1 : h->cap);
    analyse_scratch sc = {0};
    zp_status st = ZP_OK;
    if (report_alloc(m, r, n, keep, &sc) != 0) {
        st = zpi_mpi_fail(m, ZP_ERR_NOMEM, "out of memory analysing a report of %d ranks", n);
        goto out;
    }
    memcpy(r->ranks, pd->recv, (size_t)n * sizeof *r->ranks);
    zp_mpi_balance_stats_get(m, &r->bal); /* a report is collective: the root's own figures */
    memcpy(r->hosts, m->hosts, (size_t)n * ZPI_MPI_HOST);
    const char *job = job_env();
    zpi_fmt(r->job_id, sizeof r->job_id, "%s", job ? job : "-");

    merge_histograms(r, pd);
    merge_parts(r, pd);
    st = summarise(m, r);
    if (st != ZP_OK)
        goto out;
    zpi_mpi_watch_drain(m, r->ranks);
    zpi_mpi_watch_report(m, r);
    const uint8_t *wf = judge_report(m, r, &sc);
    record_window(h, r, wf);
    name_stragglers(m, r);
    verdict(m, r);
out:
    scratch_free(&sc);
    if (st != ZP_OK) {
        zp_cluster_report_destroy(r);
        return st;
    }
    double t_end = zpi_now();
    r->seconds = t_end - pd->t0;
    r->analysis_seconds = t_end - t_analysis;
    *out = r;
    return ZP_OK;
}

/* ------------------------------------------------------------ accessors */

void zp_cluster_report_destroy(zp_cluster_report *r)
{
    if (!r)
        return;
    free(r->ranks);
    free(r->node_tot);
    free(r->hosts);
    free(r->z);
    free(r->ratio);
    free(r->flag);
    free(r->named);
    free(r->node_off);
    free(r->node_list);
    free(r->strag);
    free(r->win);
    free(r->win_t);
    free(r->cov);
    free(r->stalls);
    zpi_mpi_info_free(&r->info);
    free(r);
}

zp_mpi_report_kind zp_cluster_report_get_kind(const zp_cluster_report *r)
{
    return r ? r->kind : ZP_MPI_REPORT_FINAL;
}
int zp_cluster_report_num_ranks(const zp_cluster_report *r) { return r ? r->size : 0; }
const zp_mpi_rank_stats *zp_cluster_report_rank(const zp_cluster_report *r, int i)
{
    return r && i >= 0 && i < r->size ? &r->ranks[i] : NULL;
}
const zp_mpi_rank_stats *zp_cluster_report_totals(const zp_cluster_report *r)
{
    return r ? &r->totals : NULL;
}
int zp_cluster_report_num_nodes(const zp_cluster_report *r) { return r ? r->nodes : 0; }
const zp_mpi_rank_stats *zp_cluster_report_node(const zp_cluster_report *r, int j)
{
    return r && j >= 0 && j < r->nodes ? &r->node_tot[j] : NULL;
}
const char *zp_cluster_report_rank_host(const zp_cluster_report *r, int i)
{
    return r && i >= 0 && i < r->size ? r->hosts + (size_t)i * ZPI_MPI_HOST : "";
}
const char *zp_cluster_report_node_host(const zp_cluster_report *r, int j)
{
    if (!r || j < 0 || j >= r->nodes || r->node_off[j] == r->node_off[j + 1])
        return "";
    return r->hosts + (size_t)r->node_list[r->node_off[j]] * ZPI_MPI_HOST;
}
zp_status zp_cluster_report_stat(const zp_cluster_report *r, zp_mpi_metric metric, zp_mpi_stat *out)
{
    if (!r || !out || (unsigned)metric >= ZP_MPI_M_COUNT)
        return ZP_ERR_INVALID;
    *out = r->stat[metric];
    return ZP_OK;
}
const zp_hist *zp_cluster_report_hist(const zp_cluster_report *r, int which)
{
    return r && which >= 0 && which < ZPI_MPI_NHIST ? &r->hist[which] : NULL;
}
size_t zp_cluster_report_stragglers(const zp_cluster_report *r, const zp_mpi_straggler **out)
{
    if (out)
        *out = r ? r->strag : NULL;
    return r ? r->n_strag : 0;
}
size_t zp_cluster_report_parts(const zp_cluster_report *r, const zp_part_metrics **out,
                               size_t *total)
{
    if (out)
        *out = r ? r->parts : NULL;
    if (total)
        *total = r ? r->parts_total : 0;
    return r ? r->n_parts : 0;
}

double zp_cluster_report_throughput(const zp_cluster_report *r, double *bounded)
{
    if (bounded)
        *bounded = r ? r->bounded : 0;
    return r ? r->throughput : 0;
}
double zp_cluster_report_seconds(const zp_cluster_report *r) { return r ? r->seconds : 0; }
double zp_cluster_report_analysis_seconds(const zp_cluster_report *r)
{
    return r ? r->analysis_seconds : 0;
}
size_t zp_cluster_report_gather_bytes(const zp_cluster_report *r) { return r ? r->gather_bytes : 0; }
int zp_cluster_report_num_windows(const zp_cluster_report *r) { return r ? r->n_windows : 0; }
double zp_cluster_report_window_fetch(const zp_cluster_report *r, int w, int i)
{
    if (!r || w < 0 || w >= r->n_windows || i < 0 || i >= r->size)
        return NAN;
    return (double)r->win[(size_t)w * (size_t)r->size + (size_t)i];
}
zp_status zp_cluster_report_set_partial(zp_cluster_report *r, const char *signal,
                                        const char *reason, uint64_t steps)
{
    if (!r || (signal && strlen(signal) >= sizeof r->partial_signal))
        return ZP_ERR_INVALID;
    r->partial = 1;
    r->partial_steps = steps;
    r->partial_own_reason = reason != NULL;
    snprintf(r->partial_signal, sizeof r->partial_signal, "%s", signal ? signal : "");
    if (reason)
        zpi_fmt(r->partial_reason, sizeof r->partial_reason, "%s", reason);
    else if (signal)
        zpi_fmt(r->partial_reason, sizeof r->partial_reason, "stopped by %s", signal);
    else
        zpi_fmt(r->partial_reason, sizeof r->partial_reason, "stopped");
    return ZP_OK;
}

int zp_cluster_report_partial(const zp_cluster_report *r, const char **signal, const char **reason,
                              uint64_t *steps)
{
    if (!r || !r->partial)
        return 0;
    if (signal)
        *signal = r->partial_signal[0] ? r->partial_signal : NULL;
    if (reason)
        *reason = r->partial_reason;
    if (steps)
        *steps = r->partial_steps;
    return 1;
}

const char *zp_cluster_report_verdict(const zp_cluster_report *r) { return r ? r->verdict : ""; }

int zp_cluster_report_balance(const zp_cluster_report *r, zp_mpi_balance_stats *out)
{
    int have = r && r->bal.steps > 0;
    if (out) {
        if (have)
            *out = r->bal;
        else
            memset(out, 0, sizeof *out);
    }
    return have;
}

int zp_cluster_report_has_balance(const zp_cluster_report *r)
{
    return r && (r->bal.steps > 0 || r->totals.balance_windows > 0);
}
