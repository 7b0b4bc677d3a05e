/*
 * tok_encode.c - the byte-level BPE encoder: pre-tokenizer (pretok.h: a
 * hand-written scanner for known patterns, else PCRE2), byte-level BPE (a quadratic merge for short pieces
 * and an O(n log n) heap merge for long ones) and the per-encoder cache of
 * pieces already seen. See docs/tokenizer.md.
 *
 * Ownership and threads: a zp_encoder owns its scratch arrays and cache; it
 * borrows the (immutable) zp_tokenizer. One encoder is used by one thread at
 * a time; the tokenizer is only read.
 */
#include "base/tokenizer/tok_encode_internal.h"

#include <stdlib.h>
#include <string.h>

#include "base/tokenizer/pretok_scan.h"

/* Long-merge scratch above this many positions is freed after use, so that
 * one huge piece does not keep megabytes resident in the encoder. */
#define LONG_KEEP 4096

/* The rank stored in the pair cache for "these two never merge" (ranks are
 * below it). */
#define PAIR_NONE ZPI_TOK_ID_MASK

/* Pieces found ahead of their lookups (zp_encode). */
#define BATCH 16

/* ------------------------------------------------------------ scanner
 * pretok_scan.h: the scanners are inlined into zp_encode's loop, one copy
 * of the loop per known pattern. */

size_t zpi_tok_next_piece(const char *text, size_t pos, size_t len)
{
    return pos < len ? zpi_scan_gpt2((const uint8_t *)text, pos, len) : len;
}

/* ------------------------------------------------------------ merges */

/* zpi_tok_pair() through the encoder's pair cache. */
static inline uint32_t pair_rank(zp_encoder *e, uint32_t a, uint32_t b)
{
    uint64_t key = zpi_tok_pair_key(a, b);
    uint32_t i = (uint32_t)((key * 0xD6E8FEB86659FD93ULL) >> (64 - PAIR_CACHE_BITS));
    uint64_t s = e->pcache[i];
    if ((s >> ZPI_TOK_ID_BITS) == key) {
        uint32_t r = (uint32_t)s & ZPI_TOK_ID_MASK;
        return r == PAIR_NONE ? ZPI_TOK_NONE : r;
    }
    uint32_t r = zpi_tok_pair_maybe(e->tok, key) ? zpi_tok_pair(e->tok, a, b) : ZPI_TOK_NONE;
    e->pcache[i] = (key << ZPI_TOK_ID_BITS) | (r == ZPI_TOK_NONE ? PAIR_NONE : r);
    return r;
}

/* pair_rank() of (a, b) into *ab and of (b, c) into *bc: the filter words
 * of both pair-cache misses are prefetched before either is looked up, so
 * that their memory latencies overlap. */
static inline void pair_rank2(zp_encoder *e, uint32_t a, uint32_t b, uint32_t c, uint32_t *ab,
                              uint32_t *bc)
{
    const zp_tokenizer *t = e->tok;
    uint64_t k1 = zpi_tok_pair_key(a, b), k2 = zpi_tok_pair_key(b, c);
    uint32_t i1 = (uint32_t)((k1 * 0xD6E8FEB86659FD93ULL) >> (64 - PAIR_CACHE_BITS));
    uint32_t i2 = (uint32_t)((k2 * 0xD6E8FEB86659FD93ULL) >> (64 - PAIR_CACHE_BITS));
    int miss1 = (e->pcache[i1] >> ZPI_TOK_ID_BITS) != k1;
    int miss2 = (e->pcache[i2] >> ZPI_TOK_ID_BITS) != k2;
    if (miss1 && t->pfilter)
        __builtin_prefetch(&t->pfilter[(uint32_t)(zpi_tok_pfilter_hash(k1) >> 32) & t->pfilter_mask]);
    if (miss2 && t->pfilter)
        __builtin_prefetch(&t->pfilter[(uint32_t)(zpi_tok_pfilter_hash(k2) >> 32) & t->pfilter_mask]);
    *ab = pair_rank(e, a, b);
    *bc = pair_rank(e, b, c);
}

/* Quadratic merge of p[0..n), n <= SHORT_MAX, into out (room for n ids).
 * Returns the id count. */
static size_t bpe_short(zp_encoder *e, const uint8_t *p, size_t n, int32_t *out)
{
    const zp_tokenizer *t = e->tok;
    uint32_t *rk = e->srank;
    size_t i;
    for (i = 0; i < n; i++)
        out[i] = (int32_t)t->byte_id[p[i]];
    for (i = 0; i + 1 < n; i++)
        rk[i] = t->bp_rank[(unsigned)p[i] << 8 | p[i + 1]];
    size_t m = n;
    while (m > 1) {
        uint32_t best = rk[0];
        size_t bi = 0;
        for (i = 1; i + 1 < m; i++) {
            if (rk[i] < best) {
                best = rk[i];
                bi = i;
            }
        }
        if (best == ZPI_TOK_NONE)
            break;
        out[bi] = (int32_t)zpi_tok_merged(t, best);
        for (i = bi + 1; i + 1 < m; i++)
            out[i] = out[i + 1];
        for (i = bi + 1; i + 2 < m; i++)
            rk[i] = rk[i + 1];
        m--;
        if (bi > 0 && bi + 1 < m)
            pair_rank2(e, (uint32_t)out[bi - 1], (uint32_t)out[bi], (uint32_t)out[bi + 1],
                       &rk[bi - 1], &rk[bi]);
        else if (bi + 1 < m)
            rk[bi] = pair_rank(e, (uint32_t)out[bi], (uint32_t)out[bi + 1]);
        else if (bi > 0)
            rk[bi - 1] = pair_rank(e, (uint32_t)out[bi - 1], (uint32_t)out[bi]);
    }
    return m;
}

/* Indexed binary min-heap of keys rank << 32 | position: the smallest key
 * is the next merge (lowest rank, leftmost). where[pos] is the index of
 * pos's key in the heap, or NONE. */
static inline void heap_set(zp_encoder *e, size_t k, uint64_t key)
{
    e->lheap[k] = key;
    e->where[(uint32_t)key] = (uint32_t)k;
}

static void heap_up(zp_encoder *e, size_t k)
{
    const uint64_t *h = e->lheap;
    uint64_t x = h[k];
    while (k > 0) {
        size_t parent = (k - 1) / 2;
        if (h[parent] <= x)
            break;
        heap_set(e, k, h[parent]);
        k = parent;
    }
    heap_set(e, k, x);
}

static void heap_down(zp_encoder *e, size_t k, size_t hn)
{
    const uint64_t *h = e->lheap;
    uint64_t x = h[k];
    for (;;) {
        size_t c = 2 * k + 1;
        if (c >= hn)
            break;
        if (c + 1 < hn && h[c + 1] < h[c])
            c++;
        if (x <= h[c])
            break;
        heap_set(e, k, h[c]);
        k = c;
    }
    heap_set(e, k, x);
}

static void heap_remove(zp_encoder *e, size_t k, size_t *hn)
{
    e->where[(uint32_t)e->lheap[k]] = ZPI_TOK_NONE;
    size_t last = --*hn;
    if (k == last)
        return;
    uint64_t x = e->lheap[last];
    heap_set(e, k, x);
    heap_up(e, k);
    heap_down(e, e->where[(uint32_t)x], *hn);
}

/* The pair starting at pos now has rank `rank`: insert, move or remove it. */
static void heap_update(zp_encoder *e, uint32_t pos, uint32_t rank, size_t *hn)
{
    uint32_t k = e->where[pos];
    if (rank == ZPI_TOK_NONE) {
        if (k != ZPI_TOK_NONE)
            heap_remove(e, k, hn);
        return;
    }
    if (k == ZPI_TOK_NONE)
        k = (uint32_t)(*hn)++;
    heap_set(e, k, ((uint64_t)rank << 32) | pos);
    heap_up(e, k);
    heap_down(e, e->where[pos], *hn);
}

static void long_release(zp_encoder *e)
{
    free(e->lid);
    free(e->lnext);
    free(e->lprev);
    free(e->where);
    free(e->lheap);
    e->lid = e->lnext = e->lprev = e->where = NULL;
    e->lheap = NULL;
    e->lcap = 0;
}

static int long_reserve(zp_encoder *e, size_t n)
{
    if (n <= e->lcap)
        return 0;
    long_release(e);
    e->lid = malloc(n * sizeof *e->lid);
    e->lnext = malloc(n * sizeof *e->lnext);
    e->lprev = malloc(n * sizeof *e->lprev);
    e->where = malloc(n * sizeof *e->where);
    e->lheap = malloc(n * sizeof *e->lheap);
    if (!e->lid || !e->lnext || !e->lprev || !e->where || !e->lheap) {
        long_release(e);
        return -1;
    }
    e->lcap = n;
    return 0;
}

/* Heap merge of p[0..n), O(n log n): the parts are a doubly linked list over
 * byte positions (a part starting at i has id[i]); the same result as
 * bpe_short. Returns the id count, or (size_t)-1 when scratch memory cannot
 * grow. */
static size_t bpe_long(zp_encoder *e, const uint8_t *p, size_t n, int32_t *out)
{
    const zp_tokenizer *t = e->tok;
    if (n >= ZPI_TOK_NONE || long_reserve(e, n) != 0)
        return (size_t)-1;
    uint32_t *id = e->lid, *next = e->lnext, *prev = e->lprev, *where = e->where;
    const uint32_t nn = (uint32_t)n;
    size_t hn = 0;
    for (uint32_t i = 0; i < nn; i++) {
        id[i] = t->byte_id[p[i]];
        next[i] = i + 1;
        prev[i] = i == 0 ? ZPI_TOK_NONE : i - 1;
        uint32_t r = i + 1 < nn ? t->bp_rank[(unsigned)p[i] << 8 | p[i + 1]] : ZPI_TOK_NONE;
        where[i] = ZPI_TOK_NONE;
        if (r != ZPI_TOK_NONE)
            heap_set(e, hn++, ((uint64_t)r << 32) | i);
    }
    for (size_t k = hn / 2; k-- > 0;)
        heap_down(e, k, hn);
    while (hn > 0) {
        uint64_t top = e->lheap[0];
        uint32_t i = (uint32_t)top;
        heap_remove(e, 0, &hn);
        uint32_t j = next[i];
        id[i] = zpi_tok_merged(t, (uint32_t)(top >> 32));
        if (where[j] != ZPI_TOK_NONE)
            heap_remove(e, where[j], &hn);
        uint32_t nj = next[j];
        next[i] = nj;
        if (nj < nn) {
            prev[nj] = i;
            heap_update(e, i, pair_rank(e, id[i], id[nj]), &hn);
        }
        uint32_t pi = prev[i];
        if (pi != ZPI_TOK_NONE)
            heap_update(e, pi, pair_rank(e, id[pi], id[i]), &hn);
    }
    size_t m = 0;
    for (uint32_t i = 0; i < nn; i = next[i])
        out[m++] = (int32_t)id[i];
    if (e->lcap > LONG_KEEP)
        long_release(e);
    return m;
}

/* ------------------------------------------------------------ cache */

static inline size_t align4(size_t n) { return (n + 3) & ~(size_t)3; }

/* Index in ctag/cslot of the first slot of h's set. */
static inline size_t cache_set(const zp_encoder *e, uint64_t h)
{
    return (size_t)(((uint32_t)h >> 12) & e->cset_mask) * CACHE_WAYS;
}

static inline int cache_get(const zp_encoder *e, const uint8_t *p, size_t n, uint64_t h,
                            int32_t *out, size_t *nout)
{
    uint32_t tag = (uint32_t)(h >> 32) | 1u;
    size_t base = cache_set(e, h);
    const uint32_t *tg = e->ctag + base;
    for (int w = 0; w < CACHE_WAYS; w++) {
        if (tg[w] != tag)
            continue;
        const cache_slot *s = &e->cslot[base + (size_t)w];
        if (s->klen == n && memcmp(s->data, p, n) == 0) {
            memcpy(out, s->data + align4(n), (size_t)s->nids * sizeof(int32_t));
            *nout = s->nids;
            return 1;
        }
    }
    return 0;
}

static inline void cache_put(zp_encoder *e, const uint8_t *p, size_t n, uint64_t h,
                             const int32_t *ids, size_t nids)
{
    if (align4(n) + nids * sizeof(int32_t) > CACHE_DATA)
        return;
    uint32_t tag = (uint32_t)(h >> 32) | 1u;
    size_t base = cache_set(e, h);
    uint32_t *tg = e->ctag + base;
    int w = 0;
    while (w < CACHE_WAYS && tg[w] != 0)
        w++;
    if (w == CACHE_WAYS)
        w = (int)(e->cvictim++ % CACHE_WAYS);
    tg[w] = tag;
    cache_slot *s = &e->cslot[base + (size_t)w];
    s->klen = (uint8_t)n;
    s->nids = (uint8_t)nids;
    memcpy(s->data, p, n);
    memcpy(s->data + align4(n), ids, nids * sizeof(int32_t));
}

/* ------------------------------------------------------------ encoder */

static size_t encode_cached(zp_encoder *e, const uint8_t *p, size_t n, uint64_t h, int32_t *out);

/* Encode one piece p[0..n), n >= 2, into out (room for n ids). h is
 * zpi_tok_hash(p, n) when n <= e->hash_max (else unused). Returns the id
 * count, or (size_t)-1 when out of memory. */
static inline size_t encode_piece(zp_encoder *e, const uint8_t *p, size_t n, uint64_t h,
                                  int32_t *out)
{
    const zp_tokenizer *t = e->tok;
    if (e->tiktoken && n <= t->max_token_len) {
        uint32_t id = zpi_tok_find(t, p, n, h);
        if (id != ZPI_TOK_NONE && zpi_tok_whole_ok(t, id)) {
            out[0] = (int32_t)id;
            return 1;
        }
    }
    return encode_cached(e, p, n, h, out);
}

/* BPE of p[0..n), n >= 2, without the cache: the quadratic merge up to
 * short_max bytes, the heap merge above. */
static inline size_t bpe_merge(zp_encoder *e, const uint8_t *p, size_t n, int32_t *out)
{
    return n <= e->short_max ? bpe_short(e, p, n, out) : bpe_long(e, p, n, out);
}

/* encode_piece() without the whole-piece rules: the cache, else BPE. */
static size_t encode_cached(zp_encoder *e, const uint8_t *p, size_t n, uint64_t h, int32_t *out)
{
    if (n <= e->cache_max) {
        size_t m;
        if (cache_get(e, p, n, h, out, &m))
            return m;
        m = bpe_merge(e, p, n, out);
        if (m != (size_t)-1)
            cache_put(e, p, n, h, out, m);
        return m;
    }
    return bpe_merge(e, p, n, out);
}

zp_status zpi_tok_bpe_init(zp_encoder *e, int whole_first)
{
    const zp_tokenizer *tok = e->tok;
    e->tiktoken = whole_first || tok->whole;
    e->short_max = SHORT_MAX;
    size_t nsets = 0;
    if (tok->cfg.cache_entries >= CACHE_WAYS && tok->cfg.cache_max_piece_bytes >= 2) {
        nsets = 1;
        while (nsets * 2 * CACHE_WAYS <= tok->cfg.cache_entries)
            nsets *= 2;
    }
    if (nsets) {
        e->ctag = calloc(nsets * CACHE_WAYS, sizeof *e->ctag);
        e->cslot = malloc(nsets * CACHE_WAYS * sizeof *e->cslot);
        if (!e->ctag || !e->cslot)
            return ZP_ERR_NOMEM;
        e->cset_mask = (uint32_t)(nsets - 1);
        size_t mx = tok->cfg.cache_max_piece_bytes;
        e->cache_max = mx > CACHE_DATA - 4 ? CACHE_DATA - 4 : mx;
    }
    if (zpi_pretok_scratch_create(tok->pretok, &e->pscratch) != ZP_OK)
        return ZP_ERR_NOMEM;
    e->hash_max = e->cache_max;
    if (e->tiktoken && tok->max_token_len > e->hash_max)
        e->hash_max = tok->max_token_len;
    return ZP_OK;
}

void zpi_tok_bpe_free(zp_encoder *e)
{
    long_release(e);
    zpi_pretok_scratch_destroy(e->pscratch);
    free(e->ctag);
    free(e->cslot);
    e->pscratch = NULL;
    e->ctag = NULL;
    e->cslot = NULL;
}

size_t zpi_tok_bpe_memory(const zp_encoder *e)
{
    size_t slots = e->ctag ? ((size_t)e->cset_mask + 1) * CACHE_WAYS : 0;
    return e->lcap * (4 * sizeof(uint32_t) + sizeof(uint64_t)) +
           slots * (sizeof(uint32_t) + sizeof(cache_slot));
}

zp_status zpi_tok_whole_table(zp_tokenizer *t, zpi_err *err)
{
    zp_encoder *e = calloc(1, sizeof *e); /* no cache, no whole-piece rule */
    uint8_t *whole = calloc((size_t)t->n_ids / 8 + 1, 1);
    int32_t *out = malloc(((size_t)t->max_token_len + 1) * sizeof *out);
    zp_status st = ZP_OK;
    if (!e || !whole || !out) {
        st = ZP_ERR_NOMEM;
        goto done;
    }
    e->tok = t;
    e->short_max = SHORT_MAX;
    for (uint32_t id = 0; id < t->n_ids; id++) {
        const zpi_tok_span *sp = &t->span[id];
        if (sp->off == ZPI_TOK_NONE)
            continue;
        const uint8_t *p = t->blob + sp->off;
        size_t n = sp->len;
        if (n == 1 || zpi_tok_find(t, p, n, zpi_tok_hash(p, n)) != id) {
            continue; /* one byte: never merged; not found: never a whole piece */
        }
        size_t m = bpe_merge(e, p, n, out);
        if (m == (size_t)-1) {
            st = ZP_ERR_NOMEM;
            goto done;
        }
        if (m == 1 && (uint32_t)out[0] == id)
            whole[id >> 3] = (uint8_t)(whole[id >> 3] | 1u << (id & 7));
    }
    t->whole = whole;
    whole = NULL;
done:
    if (e)
        long_release(e);
    free(e);
    free(whole);
    free(out);
    if (st != ZP_OK)
        zpi_err_set(err, st, "out of memory for the whole-token table");
    return st;
}

void zpi_encoder_set_short_max(zp_encoder *enc, size_t n)
{
    enc->short_max = n > SHORT_MAX ? SHORT_MAX : n;
}

/* The piece that starts at s[i] (i < len) under scanner kind (a constant
 * in each copy of encode_loop). */
static inline __attribute__((always_inline)) size_t next_piece(zp_encoder *enc, int kind,
                                                               const uint8_t *s, size_t i,
                                                               size_t len)
{
    switch (kind) {
    case ZPI_PRETOK_GPT2:
        return zpi_scan_gpt2(s, i, len);
    case ZPI_PRETOK_CL100K:
        return zpi_scan_cl100k(s, i, len);
    case ZPI_PRETOK_QWEN2:
        return zpi_scan_qwen2(s, i, len);
    case ZPI_PRETOK_O200K:
        return zpi_scan_o200k(s, i, len);
    default:
        return zpi_pretok_next(enc->tok->pretok, (const char *)s, len, i, enc->pscratch);
    }
}

static inline __attribute__((always_inline)) zp_status
encode_loop(zp_encoder *enc, int kind, const uint8_t *s, size_t len, int32_t *ids, size_t *n_ids)
{
    const zp_tokenizer *t = enc->tok;
    size_t i = 0, o = 0;
    /* Pieces are found BATCH at a time and the table slots they will look up
     * are prefetched, so that the (mostly cache-missing) lookups of a batch
     * overlap instead of waiting one after the other. */
    size_t start[BATCH], plen[BATCH];
    uint64_t hash[BATCH];
    while (i < len) {
        size_t nb = 0;
        for (; nb < BATCH && i < len; nb++) {
            size_t j = next_piece(enc, kind, s, i, len), n = j - i;
            start[nb] = i;
            plen[nb] = n;
            hash[nb] = 0;
            if (n >= 2 && n <= enc->hash_max) {
                uint64_t h = zpi_tok_hash(s + i, n);
                hash[nb] = h;
                if (enc->tiktoken)
                    __builtin_prefetch(&t->vmap[(uint32_t)h & t->vmap_mask]);
                else if (enc->ctag)
                    __builtin_prefetch(&enc->ctag[cache_set(enc, h)]);
            }
            i = j;
        }
        for (size_t k = 0; k < nb; k++) {
            const uint8_t *p = s + start[k];
            if (plen[k] == 1) {
                ids[o++] = (int32_t)t->byte_id[p[0]];
                continue;
            }
            size_t m = encode_piece(enc, p, plen[k], hash[k], ids + o);
            if (m == (size_t)-1) {
                *n_ids = o;
                return ZP_ERR_NOMEM;
            }
            o += m;
        }
    }
    *n_ids = o;
    return ZP_OK;
}

/* Byte-level BPE of text (the model kind of "gpt2", tiktoken files and
 * byte-level tokenizer.json files). */
static zp_status encode_byte_bpe(zp_encoder *enc, const uint8_t *s, size_t len, int32_t *ids,
                                 size_t *n_ids)
{
    switch (zpi_pretok_get_kind(enc->tok->pretok)) {
    case ZPI_PRETOK_GPT2:
        return encode_loop(enc, ZPI_PRETOK_GPT2, s, len, ids, n_ids);
    case ZPI_PRETOK_CL100K:
        return encode_loop(enc, ZPI_PRETOK_CL100K, s, len, ids, n_ids);
    case ZPI_PRETOK_QWEN2:
        return encode_loop(enc, ZPI_PRETOK_QWEN2, s, len, ids, n_ids);
    case ZPI_PRETOK_O200K:
        return encode_loop(enc, ZPI_PRETOK_O200K, s, len, ids, n_ids);
    case ZPI_PRETOK_REGEX:
        break;
    }
    zpi_pretok_scratch_reset(enc->pscratch);
    zp_status st = encode_loop(enc, ZPI_PRETOK_REGEX, s, len, ids, n_ids);
    zpi_pretok_scratch_reset(enc->pscratch);
    return st;
}

/* For hf_encode.c: one piece of any length >= 1 (the byte-level model of a
 * tokenizer.json whose pre-tokenizer the loop below cannot run), and a
 * whole text with t->pretok. Room for n ids / len ids. */
size_t zpi_tok_encode_piece(zp_encoder *e, const uint8_t *p, size_t n, int32_t *out)
{
    if (n == 1) {
        out[0] = (int32_t)e->tok->byte_id[p[0]];
        return 1;
    }
    uint64_t h = n <= e->hash_max ? zpi_tok_hash(p, n) : 0;
    return encode_piece(e, p, n, h, out);
}

zp_status zpi_tok_encode_bytes(zp_encoder *enc, const char *text, size_t len, int32_t *ids,
                               size_t *n_ids)
{
    return encode_byte_bpe(enc, (const uint8_t *)text, len, ids, n_ids);
}
