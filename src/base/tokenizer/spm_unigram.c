/*
 * spm_unigram.c - SentencePiece's Unigram encoding: the Viterbi over the
 * lattice of pieces in float arithmetic as SentencePiece's, its exact
 * double version, and segment by segment with the cache (the exactness
 * check of a cached path). spm_model.c's comment says what it replicates.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/tokenizer/spm_internal.h"

/* ------------------------------------------------------------ Unigram */

static int vit_reserve(zpi_spm_enc *e, size_t n)
{
    if (n <= e->vit_cap)
        return 0;
    size_t c = e->vit_cap ? e->vit_cap : 256;
    while (c < n)
        c *= 2;
    void *b = realloc(e->best, c * sizeof *e->best);
    if (b)
        e->best = b;
    void *f = realloc(e->from, c * sizeof *e->from);
    if (f)
        e->from = f;
    void *d = realloc(e->bid, c * sizeof *e->bid);
    if (d)
        e->bid = d;
    void *p = realloc(e->path, c * sizeof *e->path);
    if (p)
        e->path = p;
    void *db = realloc(e->dbest, c * sizeof *e->dbest);
    if (db)
        e->dbest = db;
    void *dg = realloc(e->dgap, c * sizeof *e->dgap);
    if (dg)
        e->dgap = dg;
    void *nc = realloc(e->nchar, c * sizeof *e->nchar);
    if (nc)
        e->nchar = nc;
    if (!b || !f || !d || !p || !db || !dg || !nc)
        return -1;
    e->vit_cap = c;
    return 0;
}

static int path_reserve(zpi_spm_enc *e, size_t n)
{
    if (n <= e->pcap)
        return 0;
    size_t c = e->pcap ? e->pcap : 256;
    while (c < n)
        c *= 2;
    void *a = realloc(e->pid, c * sizeof *e->pid);
    if (a)
        e->pid = a;
    void *b = realloc(e->plen, c * sizeof *e->plen);
    if (b)
        e->plen = b;
    if (!a || !b)
        return -1;
    e->pcap = c;
    return 0;
}

/* The score of a Unigram lattice node: a user-defined piece 0.1 * (length
 * - 1), an unknown character unk_score, others their score; float values
 * as SentencePiece's. */
static inline float uni_score(const struct zpi_spm *m, int32_t id, size_t length)
{
    if (id == m->unk_id)
        return m->unk_score; /* the unknown piece is no lattice piece */
    if (m->type[id] == PT_USER)
        return (float)(0.1 * (double)((int)length - 1));
    return m->score[id];
}

/* Backtrack from n through from[]/bid[] into e->pid/e->plen (in order).
 * Returns the number of pieces or (size_t)-1 (out of memory). */
static size_t uni_backtrack(zpi_spm_enc *e, size_t n)
{
    int32_t *path = e->path;
    size_t cnt = 0;
    for (size_t end = n; end > 0; end = (size_t)e->from[end])
        path[cnt++] = (int32_t)end;
    if (path_reserve(e, cnt + 1) != 0)
        return (size_t)-1;
    size_t start = 0;
    for (size_t i = 0; i < cnt; i++) {
        size_t end = (size_t)path[cnt - 1 - i];
        e->pid[i] = e->bid[end];
        e->plen[i] = (uint32_t)(end - start);
        start = end;
    }
    return cnt;
}

/* Viterbi over s[0..n) (n >= 1) as SentencePiece computes it, in float,
 * the path score at s being *h (updated to the score at the end); the
 * best path goes to e->pid/e->plen. Returns its length or (size_t)-1 (out
 * of memory). */
static size_t uni_float(zpi_spm_enc *e, const uint8_t *s, size_t n, float *h)
{
    const struct zpi_spm *m = e->m;
    if (vit_reserve(e, n + 1) != 0)
        return (size_t)-1;
    float *best = e->best;
    int32_t *from = e->from, *bid = e->bid;
    for (size_t i = 0; i <= n; i++)
        from[i] = -1;
    best[0] = *h;
    const da_unit *u = m->pieces.u;
    const uint32_t un = m->pieces.n;
    const float *score = m->score;
    const uint8_t *type = m->type;
    const float unk_score = m->unk_score;
    size_t st = 0, frontier = 0;
    while (st < n) {
        float here = best[st];
        if (here < -100000.0f || here > 100000.0f) {
            /* SentencePiece keeps path scores near zero: subtract the score
             * here from every position reached so far */
            const float off = here;
            for (size_t i = st; i <= frontier; i++)
                if (i == st || from[i] != -1)
                    best[i] -= off;
            here = 0.0f;
        }
        size_t mblen = one_char_len(s + st, n - st);
        int single = 0;
        int32_t node = 0;
        for (size_t k = st; k < n; k++) {
            uint32_t nx = (uint32_t)u[node].base + s[k];
            if (nx >= un || u[nx].check != node)
                break;
            node = (int32_t)nx;
            int32_t v = u[nx].val;
            if (v < 0)
                continue;
            uint8_t ty = type[v];
            if (ty == PT_UNUSED)
                continue;
            size_t end = k + 1, length = end - st;
            if (end > frontier)
                frontier = end;
            /* a user-defined piece scores 0.1 * (length - 1), others their
             * score; float arithmetic as SentencePiece's */
            float sc = ty == PT_USER ? (float)(0.1 * (double)((int)length - 1)) : score[v];
            float cand = sc + here;
            if (from[end] == -1 || cand > best[end]) {
                best[end] = cand;
                from[end] = (int32_t)st;
                bid[end] = v;
            }
            if (length == mblen)
                single = 1;
        }
        if (!single) {
            size_t end = st + mblen;
            if (end > frontier)
                frontier = end;
            float cand = unk_score + here;
            if (from[end] == -1 || cand > best[end]) {
                best[end] = cand;
                from[end] = (int32_t)st;
                bid[end] = m->unk_id;
            }
        }
        st += mblen;
    }
    *h = best[n];
    return uni_backtrack(e, n);
}

static inline void relax_exact(zpi_spm_enc *e, size_t end, size_t st, int32_t v, double cand)
{
    double *best = e->dbest, *gap = e->dgap;
    if (e->from[end] == -1) {
        best[end] = cand;
        gap[end] = INFINITY;
        e->from[end] = (int32_t)st;
        e->bid[end] = v;
    } else if (cand > best[end]) {
        if (cand - best[end] < gap[end])
            gap[end] = cand - best[end];
        best[end] = cand;
        e->from[end] = (int32_t)st;
        e->bid[end] = v;
    } else if (best[end] - cand < gap[end]) {
        gap[end] = best[end] - cand;
    }
}

/* The same lattice in double arithmetic from 0 (exact but for rounding far
 * below what matters here; ties to the earlier start): the best path goes
 * to e->pid/e->plen, and *mu gets its margin: the least, over the path's
 * nodes, of (best - second-best candidate) / (2 * characters before the
 * node); *chars the segment's characters. */
static size_t uni_exact(zpi_spm_enc *e, const uint8_t *s, size_t n, double *mu, size_t *chars)
{
    const struct zpi_spm *m = e->m;
    if (vit_reserve(e, n + 1) != 0)
        return (size_t)-1;
    double *best = e->dbest, *gap = e->dgap;
    int32_t *from = e->from;
    uint32_t *nchar = e->nchar;
    for (size_t i = 0; i <= n; i++)
        from[i] = -1;
    best[0] = 0.0;
    nchar[0] = 0;
    const da_unit *u = m->pieces.u;
    const uint32_t un = m->pieces.n;
    size_t st = 0;
    uint32_t k_here = 0;
    while (st < n) {
        double here = best[st];
        size_t mblen = one_char_len(s + st, n - st);
        int single = 0;
        int32_t node = 0;
        for (size_t k = st; k < n; k++) {
            uint32_t nx = (uint32_t)u[node].base + s[k];
            if (nx >= un || u[nx].check != node)
                break;
            node = (int32_t)nx;
            int32_t v = u[nx].val;
            if (v < 0 || m->type[v] == PT_UNUSED)
                continue;
            size_t end = k + 1;
            if (end - st == mblen)
                single = 1;
            relax_exact(e, end, st, v, (double)uni_score(m, v, end - st) + here);
        }
        if (!single)
            relax_exact(e, st + mblen, st, m->unk_id, (double)m->unk_score + here);
        st += mblen;
        nchar[st] = ++k_here;
    }
    *chars = k_here;
    double mn = INFINITY;
    for (size_t end = n; end > 0; end = (size_t)from[end]) {
        double g = gap[end] / (2.0 * nchar[end]);
        if (g < mn)
            mn = g;
    }
    *mu = mn;
    return uni_backtrack(e, n);
}

/* Emit the pieces e->pid/e->plen[0..np) of s into out (byte fallback). */
static size_t uni_emit(const zpi_spm_enc *e, const uint8_t *s, size_t np, int32_t *out)
{
    size_t o = 0, at = 0;
    for (size_t i = 0; i < np; i++) {
        put_id(e->m, e->pid[i], s + at, e->plen[i], out, &o);
        at += e->plen[i];
    }
    return o;
}

/* Viterbi over the whole text s[0..n) (n >= 1) from path score 0; the ids
 * (byte fallback applied) go to out (room for n ids). Returns the count, or
 * (size_t)-1 (out of memory). */
size_t zpi_spm_unigram(zpi_spm_enc *e, const uint8_t *s, size_t n, int32_t *out)
{
    float h = 0.0f;
    size_t np = uni_float(e, s, n, &h);
    if (np == (size_t)-1)
        return (size_t)-1;
    return uni_emit(e, s, np, out);
}

/* ------------------------------------------------------------ Unigram by segments
 * Where no piece crosses a segment boundary, every path of the whole text's
 * lattice goes through each boundary, and what SentencePiece computes after
 * a boundary depends only on the (float) path score h there. The float
 * Viterbi of a segment from h picks the exact best path whenever, at each
 * node of that path, the best candidate beats the others by more than twice
 * the rounding error any candidate can carry: at most (characters before
 * the node) * u * M, with u = 2^-24 and M a bound of every value (|h| +
 * characters * the largest score). The cache keeps a segment's exact path
 * (uni_exact, from 0) with its margin mu (the least gap / (2 * characters)
 * over the path's nodes); a cached path is used when mu > M * 2^-23 (twice
 * the bound) and no rescaling can happen inside the segment (M < 100000),
 * its end score being the float sum along the path as SentencePiece's;
 * otherwise (near-ties, rescaling, long segments) the segment runs the float
 * Viterbi itself. test_spm_parity checks long documents (scores to 100000
 * and past) against the reference. */

static inline int uni_usable(const struct zpi_spm *m, float h, double mu, size_t chars)
{
    double bound = fabs((double)h) + (double)chars * m->smax + 1.0;
    return bound < 100000.0 && mu > bound * 0x1p-23 + 1e-6;
}

/* Encode segment s[0..n) (n >= 1) from e->uh into out (byte fallback).
 * Returns the count or (size_t)-1 (out of memory). */
size_t zpi_spm_uni_segment(zpi_spm_enc *e, const uint8_t *s, size_t n, uint64_t hh,
                           int32_t *out)
{
    const struct zpi_spm *m = e->m;
    float h = e->uh;
    if (h < -100000.0f || h > 100000.0f)
        h = 0.0f; /* SentencePiece's rescaling at the segment's first position */
    size_t np = (size_t)-1;
    if (e->ctag && n <= e->cache_max) {
        const cache_slot *c = cache_get(e, s, n, hh);
        if (c) {
            if (uni_usable(m, h, c->mu, c->pad[0])) {
                np = c->nids;
                if (path_reserve(e, np + 1) != 0)
                    return (size_t)-1;
                memcpy(e->pid, c->data + align4(n), np * sizeof(int32_t));
                const uint8_t *lens = c->data + align4(n) + np * sizeof(int32_t);
                for (size_t i = 0; i < np; i++)
                    e->plen[i] = lens[i];
            }
        } else {
            double mu;
            size_t chars;
            np = uni_exact(e, s, n, &mu, &chars);
            if (np == (size_t)-1)
                return (size_t)-1;
            /* a float at most mu: the test stays on the safe side */
            float muf = (float)mu;
            if ((double)muf > mu)
                muf = nextafterf(muf, 0.0f);
            cache_put(e, s, n, hh, e->pid, np, e->plen, muf, chars);
            if (!uni_usable(m, h, muf, chars))
                np = (size_t)-1;
        }
        if (np != (size_t)-1) {
            for (size_t i = 0; i < np; i++)
                h = uni_score(m, e->pid[i], e->plen[i]) + h;
            e->uh = h;
            return uni_emit(e, s, np, out);
        }
    }
    np = uni_float(e, s, n, &h);
    if (np == (size_t)-1)
        return (size_t)-1;
    e->uh = h;
    return uni_emit(e, s, np, out);
}
