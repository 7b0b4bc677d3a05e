/*
 * schedule.c - mixture weight schedules (schedule.h).
 *
 * Ownership: a zpi_sched owns its arrays (zpi_sched_clear frees them).
 */
#include "plan/schedule.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/mixture.h"

void zpi_sched_clear(zpi_sched *s)
{
    if (!s)
        return;
    free(s->start);
    free(s->w);
    memset(s, 0, sizeof *s);
}

/* Room for m phases of np parts (contents undefined). */
static zp_status sched_alloc(zpi_sched *s, size_t np, size_t m, zpi_err *err)
{
    memset(s, 0, sizeof *s);
    s->n_parts = np;
    s->n_phases = m;
    s->start = malloc((m ? m : 1) * sizeof *s->start);
    const size_t nw = m * np;
    s->w = (np && m <= SIZE_MAX / np / sizeof *s->w) ? malloc((nw ? nw : 1) * sizeof *s->w) : NULL;
    if (!s->start || !s->w) {
        zpi_sched_clear(s);
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for a schedule of %zu phases", m);
    }
    return ZP_OK;
}

zp_status zpi_sched_copy(zpi_sched *dst, const zpi_sched *src)
{
    zpi_err e = {0};
    zp_status st = sched_alloc(dst, src->n_parts, src->n_phases, &e);
    if (st != ZP_OK)
        return st;
    memcpy(dst->start, src->start, src->n_phases * sizeof *src->start);
    memcpy(dst->w, src->w, src->n_phases * src->n_parts * sizeof *src->w);
    dst->since = src->since;
    return ZP_OK;
}

size_t zpi_sched_phase_at(const zpi_sched *s, uint64_t g)
{
    size_t lo = 0, hi = s->n_phases; /* start[lo] <= g < start[hi] */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->start[mid] <= g)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* The share of part i interpolated between a (total ta) and b (total tb)
 * at t in [0, 1]. Every intermediate is kept in memory (volatile) so that
 * no compiler fuses a multiply-add: every machine computes the same. */
static double ramp_share(const uint32_t *a, uint64_t ta, const uint32_t *b, uint64_t tb, double t,
                         size_t i)
{
    volatile double fa = (double)a[i] / (double)ta;
    volatile double fb = (double)b[i] / (double)tb;
    volatile double d = fb - fa;
    volatile double dt = d * t;
    volatile double f = fa + dt;
    return f;
}

/* The weights of a linear ramp's sub-phase: the interpolated shares times
 * a total R, rounded, at least 1, with R the first of 10^4, 10^5 and
 * ZPI_SCHED_RAMP_TOTAL (10^6) for which every part's share as drawn is
 * within 1% of its interpolated share (10^6 otherwise). A small total
 * keeps the phase's quota schedule short (its create walks one period). */
static void ramp_weights(const uint32_t *a, uint64_t ta, const uint32_t *b, uint64_t tb,
                         double t, size_t np, double *out)
{
    static const double totals[] = {1e4, 1e5, ZPI_SCHED_RAMP_TOTAL};
    for (size_t k = 0; k < sizeof totals / sizeof totals[0]; k++) {
        double sum = 0.0;
        for (size_t i = 0; i < np; i++) {
            volatile double x = ramp_share(a, ta, b, tb, t, i) * totals[k];
            double r = nearbyint(x);
            out[i] = r < 1.0 ? 1.0 : r;
            sum += out[i];
        }
        int ok = 1;
        for (size_t i = 0; ok && i < np; i++) {
            double f = ramp_share(a, ta, b, tb, t, i);
            volatile double u = out[i] / sum;
            ok = f > 0.0 && fabs(u - f) <= 0.01 * f;
        }
        if (ok)
            return;
    }
}

static uint64_t total_of(const uint32_t *w, size_t np)
{
    uint64_t t = 0;
    for (size_t i = 0; i < np; i++)
        t += w[i];
    return t;
}

zp_status zpi_sched_from_config(const double *part_weights, const char *const *names, size_t np,
                                const zp_mix_phase *phases, size_t n_phases, zpi_sched *out,
                                zpi_err *err)
{
    memset(out, 0, sizeof *out);
    ZPI_RETURN_ERR_IF(n_phases && !phases, err, ZP_ERR_INVALID,
                      "n_phases = %zu but phases is NULL", n_phases);
    ZPI_RETURN_ERR_IF(n_phases >= ZPI_SCHED_MAX_PHASES, err, ZP_ERR_LIMIT,
                      "n_phases = %zu: a schedule has at most %u phases", n_phases,
                      ZPI_SCHED_MAX_PHASES);
    /* the configured entries' integer weights: entry 0 the parts', then each phase's */
    const size_t ne = n_phases + 1;
    uint32_t *ew = calloc(ne * np, sizeof *ew);
    double *tmp = calloc(np, sizeof *tmp);
    if (!ew || !tmp) {
        free(ew);
        free(tmp);
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for a schedule of %zu phases",
                           n_phases);
    }
    zp_status st = zpi_mix_quantize(part_weights, names, np, ew, err);
    size_t total = 1; /* constant phases after expansion */
    for (size_t k = 0; st == ZP_OK && k < n_phases; k++) {
        const zp_mix_phase *ph = &phases[k];
        uint64_t prev = k ? phases[k - 1].start : 0;
        if (ph->start <= prev) {
            st = k ? zpi_err_set(err, ZP_ERR_INVALID,
                                 "phases[%zu].start = %llu: must be above phases[%zu].start = "
                                 "%llu",
                                 k, (unsigned long long)ph->start, k - 1,
                                 (unsigned long long)prev)
                   : zpi_err_set(err, ZP_ERR_INVALID,
                                 "phases[0].start = 0: must be above 0 (the parts' weights are "
                                 "the phase from draw 0)");
            break;
        }
        if (!ph->weights) {
            st = zpi_err_set(err, ZP_ERR_INVALID, "phases[%zu].weights is NULL", k);
            break;
        }
        zpi_err e2 = {0};
        st = zpi_mix_quantize(ph->weights, names, np, ew + (k + 1) * np, &e2);
        if (st != ZP_OK) {
            zpi_err_set(err, st, "phases[%zu].weights: %s", k, zpi_err_msg(&e2));
            break;
        }
        if (ph->linear_every) {
            uint64_t len = ph->start - prev;
            uint64_t m = len / ph->linear_every + (len % ph->linear_every != 0);
            total += m - 1 + 1; /* the ramp replaces the constant phase before it */
            if (m > ZPI_SCHED_MAX_PHASES)
                total = ZPI_SCHED_MAX_PHASES + 1;
        } else {
            total += 1;
        }
        if (total > ZPI_SCHED_MAX_PHASES) {
            st = zpi_err_set(err, ZP_ERR_LIMIT,
                             "phases[%zu]: the schedule would have more than %u constant "
                             "phases (a linear ramp has one per linear_every draws: give a "
                             "larger linear_every)",
                             k, ZPI_SCHED_MAX_PHASES);
            break;
        }
    }
    if (st == ZP_OK)
        st = sched_alloc(out, np, total, err);
    size_t at = 0;
    for (size_t k = 0; st == ZP_OK && k < ne; k++) {
        /* the segment [s_k, s_{k+1}) of entry k: constant, or the ramp to
         * entry k + 1 when that one is linear */
        uint64_t sk = k ? phases[k - 1].start : 0;
        const uint32_t *wk = ew + k * np;
        if (k + 1 < ne && phases[k].linear_every) {
            const uint64_t E = phases[k].linear_every, S = phases[k].start;
            const uint32_t *wn = ew + (k + 1) * np;
            const uint64_t ta = total_of(wk, np), tb = total_of(wn, np);
            for (uint64_t a = sk; a < S && st == ZP_OK; a += (S - a > E ? E : S - a)) {
                uint64_t b = S - a > E ? a + E : S;
                /* the middle of [a, b) relative to the ramp: ((a + b) / 2 - sk) / (S - sk) */
                volatile double t = ((double)(a - sk) + (double)(b - a) / 2.0) / (double)(S - sk);
                ramp_weights(wk, ta, wn, tb, t, np, tmp);
                out->start[at] = a;
                st = zpi_mix_quantize(tmp, names, np, out->w + at * np, err);
                at++;
            }
        } else {
            out->start[at] = sk;
            memcpy(out->w + at * np, wk, np * sizeof *wk);
            at++;
        }
    }
    if (st == ZP_OK && at != out->n_phases)
        st = zpi_err_set(err, ZP_ERR_INTERNAL, "schedule: %zu phases made, %zu counted", at,
                         out->n_phases);
    free(ew);
    free(tmp);
    if (st != ZP_OK)
        zpi_sched_clear(out);
    return st;
}

zp_status zpi_sched_counts(const zpi_sched *s, uint64_t g, uint64_t *counts, zpi_err *err)
{
    const size_t np = s->n_parts;
    double *w = calloc(np ? np : 1, sizeof *w);
    uint64_t *c = calloc(np ? np : 1, sizeof *c);
    zp_status st = w && c ? ZP_OK : zpi_err_set(err, ZP_ERR_NOMEM, "schedule: out of memory");
    memset(counts, 0, np * sizeof *counts);
    for (size_t k = 0; st == ZP_OK && k < s->n_phases && s->start[k] < g; k++) {
        uint64_t end = k + 1 < s->n_phases && s->start[k + 1] < g ? s->start[k + 1] : g;
        for (size_t i = 0; i < np; i++)
            w[i] = (double)s->w[k * np + i];
        zpi_mix *m = NULL;
        st = zpi_mix_create(w, NULL, np, &m, err);
        if (st == ZP_OK)
            st = zpi_mix_counts(m, end - s->start[k], c);
        for (size_t i = 0; st == ZP_OK && i < np; i++)
            counts[i] += c[i];
        zpi_mix_destroy(m);
    }
    free(w);
    free(c);
    return st;
}

static int same_phase(const zpi_sched *a, size_t i, const zpi_sched *b, size_t j)
{
    return !memcmp(a->w + i * a->n_parts, b->w + j * b->n_parts, a->n_parts * sizeof *a->w);
}

int zpi_sched_same_draws(const zpi_sched *a, const zpi_sched *b)
{
    if (a->n_parts != b->n_parts || a->n_phases != b->n_phases)
        return 0;
    for (size_t k = 0; k < a->n_phases; k++)
        if (a->start[k] != b->start[k] || !same_phase(a, k, b, k))
            return 0;
    return 1;
}

int zpi_sched_follows(const zpi_sched *s, const zpi_sched *cfg)
{
    if (s->n_parts != cfg->n_parts)
        return 0;
    size_t i = zpi_sched_phase_at(s, s->since), j = zpi_sched_phase_at(cfg, s->since);
    if (s->start[i] != s->since)
        return 0;
    for (; i < s->n_phases || j < cfg->n_phases; i++, j++) {
        if (i >= s->n_phases || j >= cfg->n_phases)
            return 0;
        uint64_t cs = j == zpi_sched_phase_at(cfg, s->since) ? s->since : cfg->start[j];
        if (s->start[i] != cs || !same_phase(s, i, cfg, j))
            return 0;
    }
    return 1;
}

zp_status zpi_sched_cut(const zpi_sched *old, const zpi_sched *cfg, uint64_t cut,
                        zpi_sched *out, zpi_err *err)
{
    memset(out, 0, sizeof *out);
    ZPI_RETURN_ERR_IF(old->n_parts != cfg->n_parts, err, ZP_ERR_MISMATCH,
                      "schedule: %zu parts in the state, %zu here", old->n_parts, cfg->n_parts);
    size_t keep = 0;
    while (keep < old->n_phases && old->start[keep] < cut)
        keep++;
    size_t j0 = zpi_sched_phase_at(cfg, cut);
    /* The phase in force at the cut is the same in both (start and
     * weights): it goes on without a restart, and the cut moves back to
     * its start. */
    size_t i0 = zpi_sched_phase_at(old, cut);
    if (old->start[i0] == cfg->start[j0] && same_phase(old, i0, cfg, j0) &&
        old->start[i0] >= old->since) {
        cut = old->start[i0];
        keep = i0;
    }
    size_t m = keep + (cfg->n_phases - j0);
    ZPI_RETURN_ERR_IF(m > ZPI_SCHED_MAX_PHASES, err, ZP_ERR_LIMIT,
                      "schedule: the state's %zu phases before draw %llu and the %zu phases "
                      "from there on make more than %u",
                      keep, (unsigned long long)cut, cfg->n_phases - j0, ZPI_SCHED_MAX_PHASES);
    ZPI_FORWARD_IF_ERR(sched_alloc(out, cfg->n_parts, m, err));
    const size_t np = cfg->n_parts;
    memcpy(out->start, old->start, keep * sizeof *out->start);
    memcpy(out->w, old->w, keep * np * sizeof *out->w);
    for (size_t j = j0; j < cfg->n_phases; j++) {
        out->start[keep + j - j0] = j == j0 ? cut : cfg->start[j];
        memcpy(out->w + (keep + j - j0) * np, cfg->w + j * np, np * sizeof *out->w);
    }
    out->since = cut < old->since ? old->since : cut;
    return ZP_OK;
}
