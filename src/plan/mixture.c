/*
 * mixture.c - the draw sequence of a weighted mixture (mixture.h).
 *
 * Notation: n parts, integer weights W_i with total T, D = 2n - 2 (n >= 2).
 * Within a period the position r (0 <= r < T) is the number of draws made
 * and c_i the draws of part i so far (c_i <= W_i). Draw number m = r + 1
 * (1-based) may go to part i when
 *
 *     W_i m D >= T (c_i D + 1)            (w_i m - c_i >= s, s = 1/D)
 *
 * and goes, among those parts, to the one with the smallest deadline
 * (c_i D + D - 1) / W_i (compared by cross-multiplication; ties: the lowest
 * index). Part i's release draw, the first m at which it may go, is
 * ceil(T (c_i D + 1) / (W_i D)); it changes only when part i is drawn.
 *
 * A cursor keeps two binary heaps: the waiting parts keyed by release draw,
 * the eligible ones keyed by deadline. Before draw m the waiting parts with
 * release <= m move to the eligible heap; the drawn part goes back to the
 * eligible heap (its deadline grows by D / W_i) when it is eligible for the
 * next draw, else to the waiting heap. After draw T every c_i = W_i (create
 * walks the first period and checks it), every part is waiting and all keys
 * are those of draw 0 shifted by the same amount (T for release draws, D
 * for deadline numerators), so the cursor wraps by resetting to the state
 * of draw 0 (a copy of the initial waiting heap).
 *
 * Create records the counts every K = ceil(T / 256) draws of the first
 * period (uint32: c_i <= W_i <= 2^24); a seek loads the checkpoint below
 * the position, rebuilds both heaps by heapify (O(n)) and walks fewer than
 * K draws.
 *
 * Ownership: zpi_mix owns its weights, checkpoints and initial heap; a
 * cursor owns its counts and heaps and borrows its zpi_mix (which must
 * outlive it).
 * Thread safety: a zpi_mix is immutable after create; a cursor belongs to
 * one thread at a time.
 */
#include "plan/mixture.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The largest total of exact integer or decimal weights. */
#define MIX_MAX_TOTAL (1ULL << 24)
/* Rounded weights sum to about this (as in every earlier version)... */
#define MIX_ROUND_TOTAL 1048576.0
/* ... or, when that changes a part's share by more than MIX_MAX_CHANGE, to
 * about this (2^24 - 2^17: with at most 2^16 parts, each rounded up by at
 * most 1, the total stays at most 2^24). */
#define MIX_ROUND_FINE 16646144.0
/* The largest change of a part's share (relative to it) that rounding may
 * make; weights that need more are refused. */
#define MIX_MAX_CHANGE 0.01
/* At most this many checkpoints per period. */
#define MIX_CHECKPOINTS 256u
/* Decimal places tried for exact weights. */
#define MIX_MAX_DECIMALS 6

typedef unsigned __int128 u128;

/* An eligible part: deadline numerator num = c D + D - 1 over w = W_i. */
typedef struct el_ent {
    uint64_t num;
    uint32_t w;
    uint32_t idx;
} el_ent;

/* A waiting part: the draw (1-based, within the period) that releases it. */
typedef struct wt_ent {
    uint64_t rel;
    uint32_t idx;
    uint32_t pad;
} wt_ent;

struct zpi_mix {
    size_t n;
    uint64_t T;
    uint64_t D;      /* 2n - 2 (0 when n == 1) */
    uint64_t K;      /* draws between checkpoints */
    size_t nck;      /* checkpoints: ceil(T / K) */
    uint32_t *W;     /* n integer weights */
    uint32_t *ck;    /* nck * n counts: ck[j * n + i] = c_i(j K) */
    wt_ent *wait0;   /* the waiting heap at draw 0 (all parts) */
};

struct zpi_mix_cursor {
    const zpi_mix *m;
    uint64_t pos; /* the absolute draw: q T + r */
    uint64_t q;   /* completed periods */
    uint64_t r;   /* position within the period */
    uint32_t *c;  /* c_i(r) */
    el_ent *el;   /* eligible heap (n slots) */
    size_t nel;
    wt_ent *wt;   /* waiting heap (n slots) */
    size_t nwt;
};

/* ---------------------------------------------------------------- keys */

/* The first draw (1-based, within the period) at which a part with weight w
 * and count c may be drawn: ceil(T (c D + 1) / (w D)). */
static inline uint64_t release_draw(const zpi_mix *m, uint64_t c, uint64_t w)
{
    u128 num = (u128)m->T * (c * m->D + 1);
    uint64_t den = w * m->D;
    if ((uint64_t)(num >> 64) == 0) {
        uint64_t n64 = (uint64_t)num;
        return n64 / den + (n64 % den != 0);
    }
    return (uint64_t)(num / den + (num % den != 0));
}

#define MIX_INLINE static inline __attribute__((always_inline))

/* Deadline order: num_a / w_a < num_b / w_b, ties by index. The cross
 * products fit in 64 bits: an eligible part has c < W, so num < (W + 1) D,
 * and for two parts (W_a + 1) W_b <= ((T + 1) / 2)^2 < 2^46 + 2^23 (T <=
 * 2^24), times D < 2^17 (n <= 65536): below 2^63 + 2^40. */
_Static_assert(ZPI_MIX_MAX_PARTS <= 65536u && MIX_MAX_TOTAL <= (1ULL << 24),
               "deadline cross products must fit in 64 bits");

MIX_INLINE int el_less(const el_ent *a, const el_ent *b)
{
    uint64_t x = a->num * b->w, y = b->num * a->w;
    return x < y || (x == y && a->idx < b->idx);
}

MIX_INLINE int wt_less(const wt_ent *a, const wt_ent *b)
{
    return a->rel < b->rel || (a->rel == b->rel && a->idx < b->idx);
}

/* ---------------------------------------------------------------- heaps */

/* Binary heaps in arrays. *_sift_down: the entry at i moved down to its
 * place (used when it is likely to stay near the top). *_fill_top: the
 * root was taken and x (the heap's last entry, likely large) goes in its
 * place: the hole goes down along the smaller children to a leaf, one
 * comparison a level, and x comes up from there (Floyd's bottom-up heap
 * deletion). */

MIX_INLINE void el_sift_down(el_ent *h, size_t n, size_t i)
{
    el_ent x = h[i];
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= n)
            break;
        if (k + 1 < n)
            k += el_less(&h[k + 1], &h[k]);
        if (!el_less(&h[k], &x))
            break;
        h[i] = h[k];
        i = k;
    }
    h[i] = x;
}

MIX_INLINE void el_up(el_ent *h, size_t i, size_t top, el_ent x)
{
    while (i > top) {
        size_t p = (i - 1) / 2;
        if (!el_less(&x, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

MIX_INLINE void el_fill_top(el_ent *h, size_t n, el_ent x)
{
    size_t i = 0, k;
    while ((k = 2 * i + 1) + 1 < n) {
        k += el_less(&h[k + 1], &h[k]);
        h[i] = h[k];
        i = k;
    }
    if (k < n) {
        h[i] = h[k];
        i = k;
    }
    el_up(h, i, 0, x);
}

MIX_INLINE void wt_sift_down(wt_ent *h, size_t n, size_t i)
{
    wt_ent x = h[i];
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= n)
            break;
        if (k + 1 < n)
            k += wt_less(&h[k + 1], &h[k]);
        if (!wt_less(&h[k], &x))
            break;
        h[i] = h[k];
        i = k;
    }
    h[i] = x;
}

MIX_INLINE void wt_up(wt_ent *h, size_t i, wt_ent x)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!wt_less(&x, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

MIX_INLINE void wt_fill_top(wt_ent *h, size_t n, wt_ent x)
{
    size_t i = 0, k;
    while ((k = 2 * i + 1) + 1 < n) {
        k += wt_less(&h[k + 1], &h[k]);
        h[i] = h[k];
        i = k;
    }
    if (k < n) {
        h[i] = h[k];
        i = k;
    }
    wt_up(h, i, x);
}

static void el_heapify(el_ent *h, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        el_sift_down(h, n, i);
}

static void wt_heapify(wt_ent *h, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        wt_sift_down(h, n, i);
}

/* ---------------------------------------------------------------- steps */

/* One draw at position c->r (< T, n >= 2): its part, and c->r moves on.
 * UINT32_MAX when no part is eligible, which create's walk of the first
 * period rules out for every draw (Tijdeman's theorem says it cannot
 * happen; create checks it rather than trusting it). */
static inline uint32_t step(zpi_mix_cursor *c)
{
    const zpi_mix *m = c->m;
    uint64_t draw = c->r + 1;
    /* Released parts become eligible. */
    while (c->nwt > 0 && c->wt[0].rel <= draw) {
        uint32_t i = c->wt[0].idx;
        c->nwt--;
        if (c->nwt > 0)
            wt_fill_top(c->wt, c->nwt, c->wt[c->nwt]);
        el_ent e = {(uint64_t)c->c[i] * m->D + m->D - 1, m->W[i], i};
        el_up(c->el, c->nel++, 0, e);
    }
    if (c->nel == 0)
        return UINT32_MAX;
    /* The earliest deadline is drawn; it stays eligible for the next draw
     * or waits for its release. */
    uint32_t p = c->el[0].idx;
    uint32_t cp = ++c->c[p];
    uint64_t rel = release_draw(m, cp, m->W[p]);
    if (rel <= draw + 1) {
        c->el[0].num += m->D;
        el_sift_down(c->el, c->nel, 0);
    } else {
        c->nel--;
        if (c->nel > 0)
            el_fill_top(c->el, c->nel, c->el[c->nel]);
        wt_ent e = {rel, p, 0};
        wt_up(c->wt, c->nwt++, e);
    }
    c->r++;
    return p;
}

/* The state of draw 0 of a period. */
static void reset_period(zpi_mix_cursor *c)
{
    const zpi_mix *m = c->m;
    c->r = 0;
    memset(c->c, 0, m->n * sizeof *c->c);
    c->nel = 0;
    memcpy(c->wt, m->wait0, m->n * sizeof *c->wt);
    c->nwt = m->n;
}

/* Loads checkpoint j: counts, then both heaps rebuilt for the next draw. */
static void load_checkpoint(zpi_mix_cursor *c, size_t j)
{
    const zpi_mix *m = c->m;
    uint64_t r0 = (uint64_t)j * m->K;
    memcpy(c->c, m->ck + j * m->n, m->n * sizeof *c->c);
    c->r = r0;
    c->nel = c->nwt = 0;
    for (size_t i = 0; i < m->n; i++) {
        uint64_t rel = release_draw(m, c->c[i], m->W[i]);
        if (rel <= r0 + 1) {
            el_ent e = {(uint64_t)c->c[i] * m->D + m->D - 1, m->W[i], (uint32_t)i};
            c->el[c->nel++] = e;
        } else {
            wt_ent e = {rel, (uint32_t)i, 0};
            c->wt[c->nwt++] = e;
        }
    }
    el_heapify(c->el, c->nel);
    wt_heapify(c->wt, c->nwt);
}

/* ---------------------------------------------------------------- weights */

static uint64_t gcd64(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Divides W by its gcd; returns the new total, or 0 when it exceeds
 * `limit`. */
static uint64_t reduce(uint64_t *W, size_t n, uint64_t limit)
{
    uint64_t g = 0;
    for (size_t i = 0; i < n; i++)
        g = gcd64(W[i], g);
    uint64_t T = 0;
    for (size_t i = 0; i < n; i++) {
        W[i] /= g;
        if (W[i] > limit || T > limit - W[i])
            return 0;
        T += W[i];
    }
    return T;
}

/* Exact weights: the first k in 0..6 for which every w 10^k is an integer
 * (within 1e-9 relative); 0 when there is none or the reduced total exceeds
 * 2^24 (a larger k gives the same reduced weights). */
static uint64_t quantize_exact(const double *w, size_t n, uint64_t *W)
{
    double scale = 1.0;
    for (int k = 0; k <= MIX_MAX_DECIMALS; k++, scale *= 10.0) {
        size_t i;
        for (i = 0; i < n; i++) {
            /* In memory: a compiler must not fuse the product into the
             * subtraction below (an FMA), so that every machine decides the
             * same. */
            volatile double x = w[i] * scale;
            double xv = x;
            if (xv > 9007199254740992.0) /* 2^53: too large to be exact */
                return 0;
            double r = nearbyint(xv);
            if (r < 1.0 || fabs(xv - r) > 1e-9 * xv)
                break;
            W[i] = (uint64_t)r;
        }
        if (i == n)
            return reduce(W, n, MIX_MAX_TOTAL);
    }
    return 0;
}

/* Rounded weights: w_i / sum * total, each at least 1, reduced. The
 * sum of w_i / max is in (0, n]: finite even for weights near DBL_MAX. */
static double round_sum(const double *w, size_t n, double *mx)
{
    double m = 0.0, sum = 0.0;
    for (size_t i = 0; i < n; i++)
        m = w[i] > m ? w[i] : m;
    for (size_t i = 0; i < n; i++)
        sum += w[i] / m;
    *mx = m;
    return sum;
}

static uint64_t quantize_round(const double *w, size_t n, double total, uint64_t *W)
{
    double mx, sum = round_sum(w, n, &mx);
    for (size_t i = 0; i < n; i++) {
        volatile double f = w[i] / mx / sum; /* in memory: no FMA below */
        double x = nearbyint(f * total);
        W[i] = x < 1.0 ? 1 : (uint64_t)x;
    }
    /* At most total + n <= 2^24 before the division (MIX_ROUND_FINE). */
    return reduce(W, n, MIX_MAX_TOTAL);
}

/* The part whose share changed most by the rounding, relative to its
 * share: its index, its share as given (*given) and as used (*used). */
static size_t worst_rounded(const double *w, size_t n, const uint64_t *W, uint64_t T,
                            double *given, double *used, double *change)
{
    double mx, sum = round_sum(w, n, &mx);
    size_t worst = 0;
    *change = -1.0;
    for (size_t i = 0; i < n; i++) {
        volatile double f = w[i] / mx / sum;
        volatile double u = (double)W[i] / (double)T;
        double c = fabs(u - f) / f;
        if (c > *change) {
            *change = c;
            *given = f;
            *used = u;
            worst = i;
        }
    }
    return worst;
}

/* Integer weights for w into W: exact (decimals), else rounded to a total
 * of about 2^20 (the rounding of every earlier version), else of about
 * 2^24, the first whose every share is within MIX_MAX_CHANGE of the given
 * one. 0 (with the message in err) when none is. */
static uint64_t quantize(const double *w, const char *const *names, size_t n, uint64_t *W,
                         zpi_err *err)
{
    uint64_t T = quantize_exact(w, n, W);
    if (T)
        return T;
    static const double totals[] = {MIX_ROUND_TOTAL, MIX_ROUND_FINE};
    double given = 0.0, used = 0.0, change = 0.0;
    size_t worst = 0;
    for (size_t k = 0; k < sizeof totals / sizeof totals[0]; k++) {
        T = quantize_round(w, n, totals[k], W);
        if (T == 0) /* cannot happen: rounded totals stay at most 2^24 */
            break;
        worst = worst_rounded(w, n, W, T, &given, &used, &change);
        if (change <= MIX_MAX_CHANGE)
            return T;
    }
    size_t big = 0;
    for (size_t i = 1; i < n; i++)
        big = w[i] > w[big] ? i : big;
    char a[160], b[160];
    if (names) {
        snprintf(a, sizeof a, "part '%.100s' (weight %g)", names[worst], w[worst]);
        snprintf(b, sizeof b, "part '%.100s' (weight %g)", names[big], w[big]);
    } else {
        snprintf(a, sizeof a, "weight %zu (%g)", worst, w[worst]);
        snprintf(b, sizeof b, "weight %zu (%g)", big, w[big]);
    }
    char off[64];
    if (change < 1.0)
        snprintf(off, sizeof off, "%.3g%% off", 100.0 * change);
    else
        snprintf(off, sizeof off, "%.3g times its weight", used / given);
    zpi_err_set(err, ZP_ERR_INVALID,
                "%s is %g of the mixture next to %s: the schedule draws by integer weights "
                "with a total of at most %llu and would draw it as %g of the mixture (%s, "
                "more than %g%%); give weights closer together, or integers (or decimals of "
                "up to %d places) whose total, divided by their common factor, is at most "
                "%llu",
                a, given, b, (unsigned long long)MIX_MAX_TOTAL, used, off,
                100.0 * MIX_MAX_CHANGE, MIX_MAX_DECIMALS, (unsigned long long)MIX_MAX_TOTAL);
    return 0;
}

/* ---------------------------------------------------------------- create */

void zpi_mix_destroy(zpi_mix *m)
{
    if (!m)
        return;
    free(m->W);
    free(m->ck);
    free(m->wait0);
    free(m);
}

static zp_status cursor_alloc(const zpi_mix *m, zpi_mix_cursor **out)
{
    *out = NULL;
    zpi_mix_cursor *c = calloc(1, sizeof *c);
    if (!c)
        return ZP_ERR_NOMEM;
    c->m = m;
    if (m->n >= 2) {
        c->c = malloc(m->n * sizeof *c->c);
        c->el = malloc(m->n * sizeof *c->el);
        c->wt = malloc(m->n * sizeof *c->wt);
        if (!c->c || !c->el || !c->wt) {
            zpi_mix_cursor_destroy(c);
            return ZP_ERR_NOMEM;
        }
        reset_period(c);
    }
    *out = c;
    return ZP_OK;
}

/* Walks the first period: records the checkpoints, checks that a part is
 * eligible at every draw and that the period ends with c = W. */
static zp_status walk_first_period(zpi_mix *m, zpi_err *err)
{
    zpi_mix_cursor *c;
    if (cursor_alloc(m, &c) != ZP_OK)
        return zpi_err_set(err, ZP_ERR_NOMEM, "mixture of %zu parts: out of memory", m->n);
    zp_status st = ZP_OK;
    for (uint64_t r = 0; r < m->T; r++) {
        if (r % m->K == 0)
            memcpy(m->ck + (r / m->K) * m->n, c->c, m->n * sizeof *c->c);
        if (step(c) == UINT32_MAX) {
            st = zpi_err_set(err, ZP_ERR_INTERNAL,
                             "mixture of %zu parts (period %llu): no part eligible at draw %llu",
                             m->n, (unsigned long long)m->T, (unsigned long long)r);
            break;
        }
    }
    for (size_t i = 0; st == ZP_OK && i < m->n; i++)
        if (c->c[i] != m->W[i])
            st = zpi_err_set(err, ZP_ERR_INTERNAL,
                             "mixture of %zu parts: part %zu drawn %lu times in a period of "
                             "%llu, expected %lu",
                             m->n, i, (unsigned long)c->c[i], (unsigned long long)m->T,
                             (unsigned long)m->W[i]);
    zpi_mix_cursor_destroy(c);
    return st;
}

zp_status zpi_mix_create(const double *weights, const char *const *names, size_t n,
                         zpi_mix **out, zpi_err *err)
{
    *out = NULL;
    if (n == 0)
        return zpi_err_set(err, ZP_ERR_INVALID, "mixture: no weights (at least 1 part)");
    if (n > ZPI_MIX_MAX_PARTS)
        return zpi_err_set(err, ZP_ERR_INVALID, "mixture: %zu weights: at most %u parts", n,
                           ZPI_MIX_MAX_PARTS);
    if (!weights)
        return zpi_err_set(err, ZP_ERR_INVALID, "mixture: weights = NULL");
    for (size_t i = 0; i < n; i++)
        if (!isfinite(weights[i]) || !(weights[i] > 0.0))
            return zpi_err_set(err, ZP_ERR_INVALID,
                               "weight %zu = %g: must be a positive finite number", i,
                               weights[i]);

    zpi_mix *m = calloc(1, sizeof *m);
    uint64_t *W64 = malloc(n * sizeof *W64);
    if (!m || !W64)
        goto nomem;
    m->n = n;
    m->T = quantize(weights, names, n, W64, err);
    if (m->T == 0) {
        free(W64);
        zpi_mix_destroy(m);
        return err ? err->code : ZP_ERR_INVALID;
    }
    m->W = malloc(n * sizeof *m->W);
    if (!m->W)
        goto nomem;
    for (size_t i = 0; i < n; i++)
        m->W[i] = (uint32_t)W64[i];
    free(W64);
    W64 = NULL;
    if (n == 1) {
        *out = m;
        return ZP_OK;
    }

    m->D = 2 * (uint64_t)n - 2;
    m->K = (m->T + MIX_CHECKPOINTS - 1) / MIX_CHECKPOINTS;
    m->nck = (size_t)((m->T + m->K - 1) / m->K);
    m->ck = malloc(m->nck * n * sizeof *m->ck);
    m->wait0 = malloc(n * sizeof *m->wait0);
    if (!m->ck || !m->wait0)
        goto nomem;
    for (size_t i = 0; i < n; i++) {
        wt_ent e = {release_draw(m, 0, m->W[i]), (uint32_t)i, 0};
        m->wait0[i] = e;
    }
    wt_heapify(m->wait0, n);
    zp_status st = walk_first_period(m, err);
    if (st != ZP_OK) {
        zpi_mix_destroy(m);
        return st;
    }
    *out = m;
    return ZP_OK;

nomem:
    free(W64);
    zpi_mix_destroy(m);
    return zpi_err_set(err, ZP_ERR_NOMEM, "mixture of %zu parts: out of memory", n);
}

zp_status zpi_mix_quantize(const double *weights, const char *const *names, size_t n,
                           uint32_t *W, zpi_err *err)
{
    if (n == 0 || n > ZPI_MIX_MAX_PARTS || !weights)
        return zpi_err_set(err, ZP_ERR_INVALID, "mixture: %zu weights: 1 .. %u parts", n,
                           ZPI_MIX_MAX_PARTS);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(weights[i]) || !(weights[i] > 0.0))
            return zpi_err_set(err, ZP_ERR_INVALID,
                               "weight %zu = %g: must be a positive finite number", i,
                               weights[i]);
    uint64_t *W64 = malloc(n * sizeof *W64);
    if (!W64)
        return zpi_err_set(err, ZP_ERR_NOMEM, "mixture of %zu parts: out of memory", n);
    uint64_t T = quantize(weights, names, n, W64, err);
    for (size_t i = 0; T && i < n; i++)
        W[i] = (uint32_t)W64[i];
    free(W64);
    return T ? ZP_OK : (err && err->code ? err->code : ZP_ERR_INVALID);
}

size_t zpi_mix_parts(const zpi_mix *m)
{
    return m->n;
}

uint64_t zpi_mix_period(const zpi_mix *m)
{
    return m->T;
}

uint64_t zpi_mix_quantum(const zpi_mix *m, size_t i)
{
    return i < m->n ? m->W[i] : 0;
}

/* ---------------------------------------------------------------- cursor */

zp_status zpi_mix_cursor_create(const zpi_mix *m, zpi_mix_cursor **out)
{
    return cursor_alloc(m, out);
}

void zpi_mix_cursor_destroy(zpi_mix_cursor *c)
{
    if (!c)
        return;
    free(c->c);
    free(c->el);
    free(c->wt);
    free(c);
}

void zpi_mix_cursor_seek(zpi_mix_cursor *c, uint64_t g)
{
    const zpi_mix *m = c->m;
    c->pos = g;
    if (m->n == 1)
        return;
    c->q = g / m->T;
    uint64_t r = g % m->T;
    load_checkpoint(c, (size_t)(r / m->K));
    while (c->r < r)
        step(c);
}

void zpi_mix_cursor_rebind(zpi_mix_cursor *c, const zpi_mix *m)
{
    c->m = m;
    c->pos = 0;
    c->q = 0;
    if (m->n >= 2)
        reset_period(c);
}

uint64_t zpi_mix_cursor_pos(const zpi_mix_cursor *c)
{
    return c->pos;
}

void zpi_mix_cursor_next(zpi_mix_cursor *c, uint32_t *part, uint64_t *part_draw)
{
    const zpi_mix *m = c->m;
    if (m->n == 1) {
        *part = 0;
        *part_draw = c->pos;
        if (c->pos != UINT64_MAX)
            c->pos++;
        return;
    }
    uint32_t p = step(c);
    if (p == UINT32_MAX) /* ruled out by create (walk_first_period) */
        p = 0;
    *part = p;
    *part_draw = c->q * m->W[p] + c->c[p] - 1;
    if (c->pos == UINT64_MAX) {
        zpi_mix_cursor_seek(c, UINT64_MAX);
        return;
    }
    c->pos++;
    if (c->r == m->T) {
        c->q++;
        reset_period(c);
    }
}

zp_status zpi_mix_counts(const zpi_mix *m, uint64_t g, uint64_t *counts)
{
    if (m->n == 1) {
        counts[0] = g;
        return ZP_OK;
    }
    zpi_mix_cursor *c;
    ZPI_FORWARD_IF_ERR(cursor_alloc(m, &c));
    zpi_mix_cursor_seek(c, g);
    for (size_t i = 0; i < m->n; i++)
        counts[i] = c->q * m->W[i] + c->c[i];
    zpi_mix_cursor_destroy(c);
    return ZP_OK;
}
