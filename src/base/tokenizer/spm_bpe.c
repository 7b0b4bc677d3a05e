/*
 * spm_bpe.c - SentencePiece's BPE encoding: merges by piece score
 * (leftmost on ties) with a heap, a scan for short segments, and UNUSED
 * pieces split back (resegment). spm_model.c's comment says what it
 * replicates.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/tokenizer/spm_internal.h"

/* ------------------------------------------------------------ BPE */

static inline uint32_t score_order(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    /* order-preserving map of floats to unsigned */
    return (x & 0x80000000u) ? ~x : (x | 0x80000000u);
}

static void heap_push(bpe_pair *h, size_t *hn, bpe_pair x)
{
    size_t k = (*hn)++;
    while (k > 0) {
        size_t p = (k - 1) / 2;
        if (h[p].key <= x.key)
            break;
        h[k] = h[p];
        k = p;
    }
    h[k] = x;
}

static bpe_pair heap_pop(bpe_pair *h, size_t *hn)
{
    bpe_pair top = h[0];
    bpe_pair x = h[--*hn];
    size_t n = *hn, k = 0;
    if (n == 0)
        return top;
    for (;;) {
        size_t c = 2 * k + 1;
        if (c >= n)
            break;
        if (c + 1 < n && h[c + 1].key < h[c].key)
            c++;
        if (h[c].key >= x.key)
            break;
        h[k] = h[c];
        k = c;
    }
    h[k] = x;
    return top;
}

/* Push the pair (left, right) when their concatenation is a piece (of
 * SentencePiece's pieces_: NORMAL, USER_DEFINED, UNUSED). Returns -1 when
 * the heap cannot grow. */
static inline int maybe_pair(zpi_spm_enc *e, const uint8_t *s, int32_t left, int32_t right,
                             size_t *hn)
{
    if (left < 0 || right < 0)
        return 0;
    const bpe_sym *a = &e->sym[left], *b = &e->sym[right];
    if (a->freeze || b->freeze || a->node < 0)
        return 0;
    const struct zpi_spm *m = e->m;
    int32_t node = da_walk(&m->pieces, a->node, s + b->start, b->len);
    if (node < 0)
        return 0;
    int32_t v = m->pieces.u[node].val;
    if (v < 0)
        return 0;
    if (*hn == e->heap_cap &&
        grow((void **)&e->heap, &e->heap_cap, *hn + 1, sizeof *e->heap) != 0)
        return -1;
    bpe_pair p;
    /* highest score first, then leftmost */
    p.key = ((uint64_t)(~score_order(m->score[v])) << 32) | (uint32_t)left;
    p.right = (uint32_t)right;
    p.size = a->len + b->len;
    p.node = node;
    heap_push(e->heap, hn, p);
    if (m->type[v] == PT_UNUSED) {
        e->rev[v] = a->len;
        e->rev_gen[v] = e->gen;
    }
    return 0;
}

/* The id of BPE's symbol s[0..n): a NORMAL, USER_DEFINED or UNUSED piece;
 * anything else (a CONTROL, UNKNOWN or BYTE piece included) is unknown, as
 * in SentencePiece's BPE. node: its trie node when known, -2: walk. */
static inline int32_t piece_id(const struct zpi_spm *m, const uint8_t *s, size_t n, int32_t node)
{
    if (node == -2)
        node = da_walk(&m->pieces, 0, s, n);
    if (node >= 0 && m->pieces.u[node].val >= 0)
        return m->pieces.u[node].val;
    return m->unk_id;
}

/* Output symbol s[0..n) of id `id`, splitting UNUSED pieces back by the
 * last pair that formed them (SentencePiece's resegment). */
static void reseg(zpi_spm_enc *e, const uint8_t *s, size_t n, int32_t id, int32_t *out, size_t *o,
                  int depth)
{
    const struct zpi_spm *m = e->m;
    if (id >= 0 && m->type[id] == PT_UNUSED && depth <= 100) {
        if (e->rev_gen[id] != e->gen || e->rev[id] == 0 || e->rev[id] >= n) {
            put_id(m, m->unk_id, s, n, out, o); /* never formed by a pair here */
            return;
        }
        size_t l = e->rev[id];
        reseg(e, s, l, piece_id(m, s, l, -2), out, o, depth + 1);
        reseg(e, s + l, n - l, piece_id(m, s + l, n - l, -2), out, o, depth + 1);
        return;
    }
    put_id(m, id, s, n, out, o);
}

#define BPE_SMALL 24

/* The trie node of piece a + b (a's node given), or -1. */
static inline int32_t pair_node(const struct zpi_spm *m, int32_t anode, const uint8_t *b,
                                size_t blen)
{
    if (anode < 0)
        return -1;
    int32_t node = da_walk(&m->pieces, anode, b, blen);
    if (node < 0 || m->pieces.u[node].val < 0)
        return -1;
    return node;
}

/* BPE of a segment of at most BPE_SMALL characters without UNUSED pieces:
 * the same merges as zpi_spm_bpe() (highest score, leftmost on ties) on small
 * arrays, each step a scan instead of a heap. Returns the count of ids. */
static size_t bpe_small(const struct zpi_spm *m, const uint8_t *s, size_t n, int32_t *out)
{
    uint32_t start[BPE_SMALL], len[BPE_SMALL];
    int32_t node[BPE_SMALL], pnode[BPE_SMALL];
    int8_t next[BPE_SMALL], prev[BPE_SMALL]; /* -1: none */
    uint8_t frz[BPE_SMALL];
    uint32_t pkey[BPE_SMALL]; /* the pair (i, next[i]): score_order + 1, 0: none */
    int ns = 0;
    for (size_t i = 0; i < n;) {
        size_t l = 0;
        if (m->has_user)
            l = user_match(m, s + i, n - i);
        frz[ns] = l > 0;
        if (!l)
            l = one_char_len(s + i, n - i);
        start[ns] = (uint32_t)i;
        len[ns] = (uint32_t)l;
        node[ns] = da_walk(&m->pieces, 0, s + i, l);
        prev[ns] = (int8_t)(ns - 1);
        next[ns] = (int8_t)(i + l < n ? ns + 1 : -1);
        ns++;
        i += l;
    }
#define SMALL_PAIR(i)                                                                              \
    do {                                                                                           \
        int j_ = next[i];                                                                          \
        pnode[i] = j_ < 0 || frz[i] || frz[j_] ? -1                                                \
                   : pair_node(m, node[i], s + start[j_], len[j_]);                                \
        pkey[i] = pnode[i] < 0 ? 0 : score_order(m->score[m->pieces.u[pnode[i]].val]) + 1;        \
    } while (0)
    for (int i = 0; i < ns; i++)
        SMALL_PAIR(i);
    for (;;) {
        int bi = -1;
        uint32_t bk = 0;
        for (int i = 0; i >= 0; i = next[i])
            if (pkey[i] > bk) {
                bk = pkey[i];
                bi = i;
            }
        if (bi < 0)
            break;
        int j = next[bi];
        len[bi] += len[j];
        node[bi] = pnode[bi];
        next[bi] = next[j];
        if (next[j] >= 0)
            prev[next[j]] = (int8_t)bi;
        SMALL_PAIR(bi);
        if (prev[bi] >= 0)
            SMALL_PAIR(prev[bi]);
    }
#undef SMALL_PAIR
    size_t o = 0;
    for (int i = 0; i >= 0; i = next[i])
        put_id(m, piece_id(m, s + start[i], len[i], node[i]), s + start[i], len[i], out, &o);
    return o;
}

/* BPE of s[0..n) (n >= 1); the ids (byte fallback applied) go to out (room
 * for n ids). Returns the count or (size_t)-1 (out of memory). */
size_t zpi_spm_bpe(zpi_spm_enc *e, const uint8_t *s, size_t n, int32_t *out)
{
    const struct zpi_spm *m = e->m;
    if (n <= BPE_SMALL && !m->has_unused)
        return bpe_small(m, s, n, out);
    if (grow((void **)&e->sym, &e->sym_cap, n, sizeof *e->sym) != 0 ||
        grow((void **)&e->heap, &e->heap_cap, n + 8, sizeof *e->heap) != 0)
        return (size_t)-1;
    bpe_sym *sym = e->sym;
    size_t ns = 0;
    for (size_t i = 0; i < n;) {
        size_t l = 0;
        int frz = 0;
        if (m->has_user) {
            l = user_match(m, s + i, n - i);
            frz = l > 0;
        }
        if (!l)
            l = one_char_len(s + i, n - i);
        bpe_sym *y = &sym[ns];
        y->start = (uint32_t)i;
        y->len = (uint32_t)l;
        y->freeze = frz;
        y->prev = (int32_t)ns - 1;
        y->next = i + l < n ? (int32_t)ns + 1 : -1;
        y->node = da_walk(&m->pieces, 0, s + i, l);
        ns++;
        i += l;
    }
    e->gen++;
    size_t hn = 0;
    for (size_t i = 1; i < ns; i++)
        if (maybe_pair(e, s, (int32_t)i - 1, (int32_t)i, &hn) != 0)
            return (size_t)-1;
    while (hn > 0) {
        bpe_pair top = heap_pop(e->heap, &hn);
        uint32_t left = (uint32_t)top.key;
        bpe_sym *a = &sym[left], *b = &sym[top.right];
        /* stale: one of the two changed since the pair was pushed */
        if (a->len == 0 || b->len == 0 || a->len + b->len != top.size)
            continue;
        a->len += b->len;
        a->node = top.node;
        a->next = b->next;
        if (b->next >= 0)
            sym[b->next].prev = (int32_t)left;
        b->len = 0;
        if (maybe_pair(e, s, a->prev, (int32_t)left, &hn) != 0 ||
            maybe_pair(e, s, (int32_t)left, a->next, &hn) != 0)
            return (size_t)-1;
    }
    size_t o = 0;
    for (int32_t i = 0; i >= 0; i = sym[i].next) {
        const bpe_sym *y = &sym[i];
        int32_t id = piece_id(m, s + y->start, y->len, y->node);
        if (m->has_unused)
            reseg(e, s + y->start, y->len, id, out, &o, 0);
        else
            put_id(m, id, s + y->start, y->len, out, &o);
    }
    return o;
}
