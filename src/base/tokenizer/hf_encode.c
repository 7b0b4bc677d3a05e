/*
 * hf_encode.c - encoding with a tokenizer.json tokenizer (hf_json.h): the
 * steps of the Hugging Face `tokenizers` pipeline in its order, and the
 * SentencePiece-style BPE model (initial symbols = UTF-8 characters,
 * byte_fallback, unk, fuse_unk) with a per-encoder cache of words.
 *
 * The pipeline is streamed: each pre-tokenizer stage hands its pieces one
 * by one to the next (stage buffers per encoder), the last to the model,
 * which writes ids straight into the caller's array.
 *
 * Ownership and threads: a zpi_hf_enc belongs to one zp_encoder (one
 * thread at a time) and owns its buffers; the tokenizer is only read.
 */
#include "base/tokenizer/hf_encode.h"
#include "base/tokenizer/hf_internal.h"

#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "base/tokenizer/unicode_tables.h"

#define SHORT_SYMS 64   /* words of up to this many symbols: quadratic merge */
#define PAIR_BITS 12
#define CACHE_WAYS 4
#define CACHE_DATA 120
#define CACHE_SETS 2048 /* 8192 entries, 1 MiB */
#define LONG_KEEP 4096

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

typedef struct cslot {
    uint8_t klen, nids, pad[2];
    uint8_t data[CACHE_DATA];
} cslot;

struct zpi_hf_enc {
    const zp_tokenizer *t;
    const struct zpi_hf *h;
    zp_encoder *enc; /* the owner, for the byte-level core */
    buf lossy, nb[2];
    buf *ptb;    /* one per pre-tokenizer stage */
    void **scr;  /* pretok scratch per stage */
    int32_t *out;
    size_t o, cap;
    zp_status st;
    /* SentencePiece-style BPE */
    size_t scap;
    uint32_t *sid, *snext, *sprev, *swhere;
    uint64_t *sheap;
    uint32_t srank[SHORT_SYMS];
    uint64_t pcache[1u << PAIR_BITS];
    uint32_t *ctag;
    cslot *cslot;
    uint32_t cmask; /* cache sets - 1 */
    size_t cache_max;
};

static int buf_reserve(buf *b, size_t n)
{
    if (n <= b->cap)
        return 0;
    size_t c = b->cap ? b->cap : 256;
    while (c < n)
        c *= 2;
    uint8_t *p = realloc(b->p, c);
    if (!p)
        return -1;
    b->p = p;
    b->cap = c;
    return 0;
}

/* ------------------------------------------------------------ encoder state */

zpi_hf_enc *zpi_hf_enc_create(const zp_tokenizer *t)
{
    const struct zpi_hf *h = t->hf;
    zpi_hf_enc *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->t = t;
    e->h = h;
    e->ptb = calloc(h->n_pt + 1, sizeof *e->ptb);
    e->scr = calloc(h->n_pt + 1, sizeof *e->scr);
    if (!e->ptb || !e->scr) {
        zpi_hf_enc_destroy(e);
        return NULL;
    }
    for (size_t i = 0; i < h->n_pt; i++)
        if (h->pt[i].re && zpi_pretok_scratch_create(h->pt[i].re, &e->scr[i]) != ZP_OK) {
            zpi_hf_enc_destroy(e);
            return NULL;
        }
    if (!h->bytelevel && t->cfg.cache_entries >= CACHE_WAYS && t->cfg.cache_max_piece_bytes >= 2) {
        size_t sets = 1;
        while (sets * 2 * CACHE_WAYS <= t->cfg.cache_entries)
            sets *= 2;
        e->ctag = calloc(sets * CACHE_WAYS, sizeof *e->ctag);
        e->cslot = malloc(sets * CACHE_WAYS * sizeof *e->cslot);
        if (!e->ctag || !e->cslot) {
            zpi_hf_enc_destroy(e);
            return NULL;
        }
        e->cmask = (uint32_t)(sets - 1);
        e->cache_max = t->cfg.cache_max_piece_bytes > 96 ? 96 : t->cfg.cache_max_piece_bytes;
    }
    return e;
}

static void long_release(zpi_hf_enc *e)
{
    free(e->sid);
    free(e->snext);
    free(e->sprev);
    free(e->swhere);
    free(e->sheap);
    e->sid = e->snext = e->sprev = e->swhere = NULL;
    e->sheap = NULL;
    e->scap = 0;
}

void zpi_hf_enc_destroy(zpi_hf_enc *e)
{
    if (!e)
        return;
    free(e->lossy.p);
    free(e->nb[0].p);
    free(e->nb[1].p);
    if (e->ptb)
        for (size_t i = 0; i <= e->h->n_pt; i++)
            free(e->ptb[i].p);
    if (e->scr)
        for (size_t i = 0; i <= e->h->n_pt; i++)
            zpi_pretok_scratch_destroy(e->scr[i]);
    free(e->ptb);
    free(e->scr);
    long_release(e);
    free(e->ctag);
    free(e->cslot);
    free(e);
}

size_t zpi_hf_enc_memory(const zpi_hf_enc *e)
{
    if (!e)
        return 0;
    size_t n = sizeof *e + e->lossy.cap + e->nb[0].cap + e->nb[1].cap +
               e->scap * (4 * sizeof(uint32_t) + sizeof(uint64_t));
    for (size_t i = 0; i < e->h->n_pt; i++)
        n += e->ptb[i].cap;
    if (e->ctag)
        n += ((size_t)e->cmask + 1) * CACHE_WAYS * (sizeof(uint32_t) + sizeof(cslot));
    return n;
}

/* ------------------------------------------------------------ output */

static inline int32_t *out_room(zpi_hf_enc *e, size_t k)
{
    if (e->o + k > e->cap) {
        e->st = ZP_ERR_INTERNAL; /* the bound of zpi_hf_max_ids() was wrong */
        return NULL;
    }
    return e->out + e->o;
}

static inline void emit1(zpi_hf_enc *e, uint32_t id)
{
    int32_t *o = out_room(e, 1);
    if (o) {
        o[0] = (int32_t)id;
        e->o++;
    }
}

/* ------------------------------------------------------------ UTF-8 */

/* Length of the valid UTF-8 prefix of s[0..n). */
static size_t utf8_valid_prefix(const uint8_t *s, size_t n)
{
    size_t i = 0;
    for (;;) {
        while (i + 8 <= n) {
            uint64_t v;
            memcpy(&v, s + i, 8);
            if (v & 0x8080808080808080ULL)
                break;
            i += 8;
        }
        while (i < n && s[i] < 0x80)
            i++;
        if (i >= n)
            return n;
        uint32_t cp;
        size_t l = zpi_utf8_decode(s + i, n - i, &cp);
        if (!l)
            return i;
        i += l;
    }
}

/* Length of the maximal subpart of an ill-formed sequence at s[0..n) (the
 * bytes one U+FFFD replaces, as Python's 'replace' and Rust's
 * from_utf8_lossy do). */
static size_t maximal_subpart(const uint8_t *s, size_t n)
{
    uint8_t b = s[0];
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF)
        need = 1;
    else if (b >= 0xE0 && b <= 0xEF) {
        need = 2;
        if (b == 0xE0)
            lo = 0xA0;
        if (b == 0xED)
            hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3;
        if (b == 0xF0)
            lo = 0x90;
        if (b == 0xF4)
            hi = 0x8F;
    } else
        return 1;
    size_t i = 1;
    if (i < n && s[i] >= lo && s[i] <= hi) {
        i++;
        while (i <= need && i < n && (s[i] & 0xC0) == 0x80)
            i++;
    }
    return i;
}

static int make_lossy(zpi_hf_enc *e, const uint8_t *s, size_t n, size_t valid)
{
    buf *b = &e->lossy;
    if (buf_reserve(b, n * 3 + 4) != 0)
        return -1;
    size_t o = 0, i = 0;
    while (i < n) {
        size_t v = utf8_valid_prefix(s + i, n - i);
        if (i == 0)
            v = valid;
        memcpy(b->p + o, s + i, v);
        o += v;
        i += v;
        if (i >= n)
            break;
        i += maximal_subpart(s + i, n - i);
        b->p[o++] = 0xEF;
        b->p[o++] = 0xBF;
        b->p[o++] = 0xBD;
    }
    b->n = o;
    return 0;
}

/* ------------------------------------------------------------ normalizers */

static inline int nf_unsafe(const struct zpi_hf *h, uint32_t c)
{
    return (h->nf_unsafe[c >> 3] >> (c & 7)) & 1;
}

static int nf_chunk(buf *ob, size_t *o, const uint8_t *s, size_t n, int kind)
{
    int opts = UTF8PROC_STABLE;
    if (kind == HF_N_NFC || kind == HF_N_NFKC)
        opts |= UTF8PROC_COMPOSE;
    else
        opts |= UTF8PROC_DECOMPOSE;
    if (kind == HF_N_NFKC || kind == HF_N_NFKD)
        opts |= UTF8PROC_COMPAT;
    uint8_t *r = NULL;
    utf8proc_ssize_t rl = utf8proc_map(s, (utf8proc_ssize_t)n, &r, (utf8proc_option_t)opts);
    if (rl < 0) {
        free(r);
        return -1;
    }
    if (buf_reserve(ob, *o + (size_t)rl + 1) != 0) {
        free(r);
        return -1;
    }
    memcpy(ob->p + *o, r, (size_t)rl);
    *o += (size_t)rl;
    free(r);
    return 0;
}

/* Unicode normalization of s[0..n) into ob; 1 when it changed nothing (ob
 * unused), 0 done, -1 out of memory. Characters that no normalization
 * touches (nf_unsafe clear) are copied; each stretch from the last such
 * character before an unsafe one to the next such character goes through
 * utf8proc. */
static int nf_apply(zpi_hf_enc *e, const uint8_t *s, size_t n, int kind, buf *ob)
{
    const struct zpi_hf *h = e->h;
    size_t i = 0, copy_from = 0, last_safe = SIZE_MAX, o = 0;
    int changed = 0;
    while (i < n) {
        if (s[i] < 0x80) { /* ASCII is safe: skip the run, 8 bytes at a time */
            while (i + 8 <= n) {
                uint64_t v;
                memcpy(&v, s + i, 8);
                if (v & 0x8080808080808080ULL)
                    break;
                i += 8;
            }
            while (i < n && s[i] < 0x80)
                i++;
            last_safe = i - 1;
            continue;
        }
        uint32_t cp;
        size_t l = zpi_utf8_decode(s + i, n - i, &cp);
        if (!l) { /* cannot happen after the lossy step */
            i++;
            continue;
        }
        if (!nf_unsafe(h, cp)) {
            last_safe = i;
            i += l;
            continue;
        }
        size_t cs = (last_safe != SIZE_MAX && last_safe >= copy_from) ? last_safe : copy_from;
        size_t j = i + l;
        while (j < n) {
            if (s[j] < 0x80)
                break;
            size_t l2 = zpi_utf8_decode(s + j, n - j, &cp);
            if (!l2 || !nf_unsafe(h, cp))
                break;
            j += l2;
        }
        if (!changed) {
            if (buf_reserve(ob, n + 64) != 0)
                return -1;
            changed = 1;
        }
        if (buf_reserve(ob, o + (cs - copy_from) + 1) != 0)
            return -1;
        memcpy(ob->p + o, s + copy_from, cs - copy_from);
        o += cs - copy_from;
        if (nf_chunk(ob, &o, s + cs, j - cs, kind) != 0)
            return -1;
        copy_from = j;
        i = j;
        last_safe = SIZE_MAX;
    }
    if (!changed)
        return 1;
    if (buf_reserve(ob, o + (n - copy_from) + 1) != 0)
        return -1;
    memcpy(ob->p + o, s + copy_from, n - copy_from);
    o += n - copy_from;
    ob->n = o;
    return 0;
}

static int replace_all(const uint8_t *s, size_t n, const hf_norm *r, buf *ob)
{
    const uint8_t *hit = r->alen == 1 ? memchr(s, (uint8_t)r->a[0], n)
                                      : memmem(s, n, r->a, r->alen);
    if (!hit)
        return 1;
    size_t grow = r->blen > r->alen ? r->blen - r->alen : 0;
    size_t o = 0, i = 0;
    if (buf_reserve(ob, n + 64) != 0)
        return -1;
    while (hit) {
        size_t k = (size_t)(hit - s);
        if (buf_reserve(ob, o + (k - i) + r->blen + grow + 1) != 0)
            return -1;
        memcpy(ob->p + o, s + i, k - i);
        o += k - i;
        memcpy(ob->p + o, r->b, r->blen);
        o += r->blen;
        i = k + r->alen;
        hit = i < n ? (r->alen == 1 ? memchr(s + i, (uint8_t)r->a[0], n - i)
                                    : memmem(s + i, n - i, r->a, r->alen))
                    : NULL;
    }
    if (buf_reserve(ob, o + (n - i) + 1) != 0)
        return -1;
    memcpy(ob->p + o, s + i, n - i);
    ob->n = o + (n - i);
    return 0;
}

/* The normalizer over s[0..n); out, on: the result (s itself, or one of
 * the encoder's buffers). -1 when out of memory. */
static int normalize(zpi_hf_enc *e, const uint8_t *s, size_t n, const uint8_t **out, size_t *on)
{
    const struct zpi_hf *h = e->h;
    int which = 0;
    for (size_t k = 0; k < h->n_norm; k++) {
        const hf_norm *nm = &h->norm[k];
        buf *ob = &e->nb[which];
        int r;
        switch (nm->kind) {
        case HF_N_PREPEND:
            if (n == 0) {
                r = 1;
                break;
            }
            if (buf_reserve(ob, n + nm->alen + 1) != 0)
                return -1;
            memcpy(ob->p, nm->a, nm->alen);
            memcpy(ob->p + nm->alen, s, n);
            ob->n = n + nm->alen;
            r = 0;
            break;
        case HF_N_REPLACE:
            r = replace_all(s, n, nm, ob);
            break;
        default:
            r = nf_apply(e, s, n, nm->kind, ob);
            break;
        }
        if (r < 0)
            return -1;
        if (r == 0) {
            s = ob->p;
            n = ob->n;
            which ^= 1;
        }
    }
    *out = s;
    *on = n;
    return 0;
}

int zpi_hf_normalize_string(const struct zpi_hf *h, const char *s, size_t n, char **out,
                            size_t *on)
{
    zpi_hf_enc *e = calloc(1, sizeof *e);
    if (!e)
        return -1;
    e->h = h;
    const uint8_t *q;
    size_t qn;
    int r = normalize(e, (const uint8_t *)s, n, &q, &qn);
    if (r == 0) {
        *out = malloc(qn + 1);
        if (*out) {
            memcpy(*out, q, qn);
            (*out)[qn] = '\0';
            *on = qn;
        } else {
            r = -1;
        }
    }
    free(e->nb[0].p);
    free(e->nb[1].p);
    free(e);
    return r;
}

/* ------------------------------------------------------------ SentencePiece-style BPE */

static inline uint32_t pair_rank(zpi_hf_enc *e, uint32_t a, uint32_t b)
{
    uint64_t key = zpi_tok_pair_key(a, b);
    uint32_t i = (uint32_t)((key * 0xD6E8FEB86659FD93ULL) >> (64 - PAIR_BITS));
    uint64_t s = e->pcache[i];
    if ((s >> ZPI_TOK_ID_BITS) == key) {
        uint32_t r = (uint32_t)s & ZPI_TOK_ID_MASK;
        return r == ZPI_TOK_ID_MASK ? ZPI_TOK_NONE : r;
    }
    uint32_t r = zpi_tok_pair(e->t, a, b);
    e->pcache[i] = (key << ZPI_TOK_ID_BITS) | (r == ZPI_TOK_NONE ? ZPI_TOK_ID_MASK : r);
    return r;
}

static int sym_reserve(zpi_hf_enc *e, size_t n)
{
    if (n <= e->scap)
        return 0;
    long_release(e);
    size_t c = n < 256 ? 256 : n;
    e->sid = malloc(c * sizeof *e->sid);
    e->snext = malloc(c * sizeof *e->snext);
    e->sprev = malloc(c * sizeof *e->sprev);
    e->swhere = malloc(c * sizeof *e->swhere);
    e->sheap = malloc(c * sizeof *e->sheap);
    if (!e->sid || !e->snext || !e->sprev || !e->swhere || !e->sheap) {
        long_release(e);
        return -1;
    }
    e->scap = c;
    return 0;
}

/* Quadratic merge of ids[0..m) in place; returns the new count. */
static size_t merge_short(zpi_hf_enc *e, uint32_t *id, size_t m)
{
    const zp_tokenizer *t = e->t;
    uint32_t *rk = e->srank;
    size_t i;
    for (i = 0; i + 1 < m; i++)
        rk[i] = pair_rank(e, id[i], id[i + 1]);
    while (m > 1) {
        uint32_t best = rk[0];
        size_t bi = 0;
        for (i = 1; i + 1 < m; i++)
            if (rk[i] < best) {
                best = rk[i];
                bi = i;
            }
        if (best == ZPI_TOK_NONE)
            break;
        id[bi] = zpi_tok_merged(t, best);
        for (i = bi + 1; i + 1 < m; i++)
            id[i] = id[i + 1];
        for (i = bi + 1; i + 2 < m; i++)
            rk[i] = rk[i + 1];
        m--;
        if (bi + 1 < m)
            rk[bi] = pair_rank(e, id[bi], id[bi + 1]);
        if (bi > 0)
            rk[bi - 1] = pair_rank(e, id[bi - 1], id[bi]);
    }
    return m;
}

/* heap of rank << 32 | position */
static inline void hset(zpi_hf_enc *e, size_t k, uint64_t key)
{
    e->sheap[k] = key;
    e->swhere[(uint32_t)key] = (uint32_t)k;
}

static void hup(zpi_hf_enc *e, size_t k)
{
    uint64_t x = e->sheap[k];
    while (k > 0) {
        size_t p = (k - 1) / 2;
        if (e->sheap[p] <= x)
            break;
        hset(e, k, e->sheap[p]);
        k = p;
    }
    hset(e, k, x);
}

static void hdown(zpi_hf_enc *e, size_t k, size_t hn)
{
    uint64_t x = e->sheap[k];
    for (;;) {
        size_t c = 2 * k + 1;
        if (c >= hn)
            break;
        if (c + 1 < hn && e->sheap[c + 1] < e->sheap[c])
            c++;
        if (x <= e->sheap[c])
            break;
        hset(e, k, e->sheap[c]);
        k = c;
    }
    hset(e, k, x);
}

static void hremove(zpi_hf_enc *e, size_t k, size_t *hn)
{
    e->swhere[(uint32_t)e->sheap[k]] = ZPI_TOK_NONE;
    size_t last = --*hn;
    if (k == last)
        return;
    uint64_t x = e->sheap[last];
    hset(e, k, x);
    hup(e, k);
    hdown(e, e->swhere[(uint32_t)x], *hn);
}

static void hupdate(zpi_hf_enc *e, uint32_t pos, uint32_t rank, size_t *hn)
{
    uint32_t k = e->swhere[pos];
    if (rank == ZPI_TOK_NONE) {
        if (k != ZPI_TOK_NONE)
            hremove(e, k, hn);
        return;
    }
    if (k == ZPI_TOK_NONE)
        k = (uint32_t)(*hn)++;
    hset(e, k, ((uint64_t)rank << 32) | pos);
    hup(e, k);
    hdown(e, e->swhere[pos], *hn);
}

/* Heap merge of e->sid[0..m) (lowest rank first, leftmost on ties, as
 * tokenizers' Word::merge_all); the result is compacted into e->sid. */
static size_t merge_long(zpi_hf_enc *e, size_t m)
{
    const zp_tokenizer *t = e->t;
    uint32_t *id = e->sid, *next = e->snext, *prev = e->sprev, *where = e->swhere;
    const uint32_t nn = (uint32_t)m;
    size_t hn = 0;
    for (uint32_t i = 0; i < nn; i++) {
        next[i] = i + 1;
        prev[i] = i == 0 ? ZPI_TOK_NONE : i - 1;
        where[i] = ZPI_TOK_NONE;
    }
    for (uint32_t i = 0; i + 1 < nn; i++) {
        uint32_t r = pair_rank(e, id[i], id[i + 1]);
        if (r != ZPI_TOK_NONE)
            hset(e, hn++, ((uint64_t)r << 32) | i);
    }
    for (size_t k = hn / 2; k-- > 0;)
        hdown(e, k, hn);
    while (hn > 0) {
        uint64_t top = e->sheap[0];
        uint32_t i = (uint32_t)top;
        hremove(e, 0, &hn);
        uint32_t j = next[i];
        id[i] = zpi_tok_merged(t, (uint32_t)(top >> 32));
        if (where[j] != ZPI_TOK_NONE)
            hremove(e, where[j], &hn);
        uint32_t nj = next[j];
        next[i] = nj;
        if (nj < nn) {
            prev[nj] = i;
            hupdate(e, i, pair_rank(e, id[i], id[nj]), &hn);
        }
        uint32_t pi = prev[i];
        if (pi != ZPI_TOK_NONE)
            hupdate(e, pi, pair_rank(e, id[pi], id[i]), &hn);
    }
    size_t k = 0;
    for (uint32_t i = 0; i < nn; i = next[i])
        id[k++] = id[i];
    return k;
}

static inline uint64_t whash(const uint8_t *p, size_t n) { return zpi_tok_hash(p, n); }

static inline size_t align4(size_t n) { return (n + 3) & ~(size_t)3; }

/* One word: cache, else symbols and merges. */
static void sp_word(zpi_hf_enc *e, const uint8_t *p, size_t n)
{
    const struct zpi_hf *h = e->h;
    const zp_tokenizer *t = e->t;
    uint64_t hh = 0;
    size_t set = 0;
    uint32_t tag = 0;
    int cacheable = e->ctag && n <= e->cache_max;
    if (cacheable) {
        hh = whash(p, n);
        set = (size_t)(((uint32_t)hh >> 8) & e->cmask) * CACHE_WAYS;
        tag = (uint32_t)(hh >> 32) | 1u;
        for (int w = 0; w < CACHE_WAYS; w++) {
            if (e->ctag[set + (size_t)w] != tag)
                continue;
            const cslot *s = &e->cslot[set + (size_t)w];
            if (s->klen == n && memcmp(s->data, p, n) == 0) {
                int32_t *o = out_room(e, s->nids);
                if (o) {
                    memcpy(o, s->data + align4(n), (size_t)s->nids * 4);
                    e->o += s->nids;
                }
                return;
            }
        }
    }
    /* symbols: at most n (a character gives at most its bytes) */
    if (sym_reserve(e, n + 1) != 0) {
        e->st = ZP_ERR_NOMEM;
        return;
    }
    uint32_t *id = e->sid;
    size_t m = 0, i = 0;
    int unk = 0;
    while (i < n) {
        uint32_t c;
        size_t l;
        uint32_t tid;
        if (p[i] < 0x80) {
            l = 1;
            tid = h->ascii_id[p[i]];
        } else {
            l = zpi_utf8_decode(p + i, n - i, &c);
            if (!l)
                l = 1;
            tid = zpi_tok_find(t, p + i, l, zpi_tok_hash(p + i, l));
        }
        if (tid != ZPI_TOK_NONE) {
            if (unk) {
                id[m++] = h->unk_id;
                unk = 0;
            }
            id[m++] = tid;
        } else {
            int done = 0;
            if (h->byte_fallback) {
                size_t k;
                for (k = 0; k < l && h->byte_tok[p[i + k]] != ZPI_TOK_NONE; k++)
                    ;
                if (k == l) {
                    /* as tokenizers: a pending unk stays pending */
                    for (k = 0; k < l; k++)
                        id[m++] = h->byte_tok[p[i + k]];
                    done = 1;
                }
            }
            if (!done && h->unk_id != ZPI_TOK_NONE) {
                if (unk && !h->fuse_unk)
                    id[m++] = h->unk_id;
                unk = 1;
            }
        }
        i += l;
    }
    if (unk)
        id[m++] = h->unk_id;
    if (m > 1)
        m = m <= SHORT_SYMS ? merge_short(e, id, m) : merge_long(e, m);
    int32_t *o = out_room(e, m);
    if (!o)
        return;
    for (size_t k = 0; k < m; k++)
        o[k] = (int32_t)id[k];
    e->o += m;
    if (cacheable && align4(n) + m * 4 <= CACHE_DATA) {
        int w = 0;
        while (w < CACHE_WAYS && e->ctag[set + (size_t)w] != 0)
            w++;
        if (w == CACHE_WAYS)
            w = (int)((hh >> 20) % CACHE_WAYS);
        e->ctag[set + (size_t)w] = tag;
        cslot *s = &e->cslot[set + (size_t)w];
        s->klen = (uint8_t)n;
        s->nids = (uint8_t)m;
        memcpy(s->data, p, n);
        memcpy(s->data + align4(n), o, m * 4);
    }
    if (e->scap > LONG_KEEP)
        long_release(e);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* May the piece be cut before the U+2581 at p[j] (j > 0)? */
static int ws_cut(const zpi_hf_enc *e, const uint8_t *p, size_t j)
{
    const struct zpi_hf *h = e->h;
    size_t k = j - 1;
    while (k > 0 && (p[k] & 0xC0) == 0x80 && j - k < 4)
        k--;
    uint32_t cp = 0;
    size_t l = zpi_utf8_decode(p + k, j - k, &cp);
    if (l != j - k)
        return 0;
    if (cp == 0x2581)
        return 0;
    if (h->n_ws_bad && bsearch(&cp, h->ws_bad, h->n_ws_bad, sizeof cp, cmp_u32))
        return 0;
    if (h->ws_bad_unknown && zpi_tok_find(e->t, p + k, l, zpi_tok_hash(p + k, l)) == ZPI_TOK_NONE)
        return 0;
    return 1;
}

static void sp_piece(zpi_hf_enc *e, const uint8_t *p, size_t n)
{
    const struct zpi_hf *h = e->h;
    const zp_tokenizer *t = e->t;
    if (h->ignore_merges && n <= t->max_token_len) {
        uint32_t id = zpi_tok_find(t, p, n, zpi_tok_hash(p, n));
        if (id != ZPI_TOK_NONE) {
            emit1(e, id);
            return;
        }
    }
    if (!h->ws_split) {
        sp_word(e, p, n);
        return;
    }
    size_t ws = 0, i = 1;
    while (i + 3 <= n) {
        const uint8_t *q = memchr(p + i, 0xE2, n - i);
        if (!q)
            break;
        size_t j = (size_t)(q - p);
        if (j + 3 <= n && q[1] == 0x96 && q[2] == 0x81 && j > ws && ws_cut(e, p, j)) {
            sp_word(e, p + ws, j - ws);
            ws = j;
        }
        i = j + 1;
        if (e->st != ZP_OK)
            return;
    }
    sp_word(e, p + ws, n - ws);
}

/* ------------------------------------------------------------ pre-tokenizers */

static void pt_run(zpi_hf_enc *e, size_t k, const uint8_t *p, size_t n, int first);

static void model(zpi_hf_enc *e, const uint8_t *p, size_t n)
{
    if (e->h->bytelevel) {
        int32_t *o = out_room(e, n);
        if (!o)
            return;
        size_t m = zpi_tok_encode_piece(e->enc, p, n, o);
        if (m == (size_t)-1) {
            e->st = ZP_ERR_NOMEM;
            return;
        }
        e->o += m;
    } else {
        sp_piece(e, p, n);
    }
}

/* Split behaviours over a stream of (start, end, is_match) parts. */
typedef struct feeder {
    zpi_hf_enc *e;
    size_t k; /* the next stage */
    const uint8_t *p;
    int first;
    int beh;
    size_t ps, pe;
    int pending, pend_match, prev_match;
} feeder;

static inline void fd_emit(feeder *f, size_t s, size_t end)
{
    if (end > s)
        pt_run(f->e, f->k, f->p + s, end - s, f->first && s == 0);
}

static void fd_feed(feeder *f, size_t s, size_t end, int m)
{
    switch (f->beh) {
    case HF_B_REMOVED:
        if (!m)
            fd_emit(f, s, end);
        break;
    case HF_B_ISOLATED:
        fd_emit(f, s, end);
        break;
    case HF_B_MERGED_PREV:
        if (m && !f->prev_match && f->pending) {
            f->pe = end;
        } else {
            if (f->pending)
                fd_emit(f, f->ps, f->pe);
            f->ps = s;
            f->pe = end;
            f->pending = 1;
        }
        f->prev_match = m;
        break;
    case HF_B_MERGED_NEXT:
        if (f->pending) { /* a match waiting for the next part */
            if (!m) {
                fd_emit(f, f->ps, end);
                f->pending = 0;
                break;
            }
            fd_emit(f, f->ps, f->pe);
            f->pending = 0;
        }
        if (m) {
            f->ps = s;
            f->pe = end;
            f->pending = 1;
        } else {
            fd_emit(f, s, end);
        }
        break;
    default: /* HF_B_CONTIGUOUS */
        if (f->pending && f->pend_match == m && m) {
            f->pe = end;
        } else {
            if (f->pending)
                fd_emit(f, f->ps, f->pe);
            f->ps = s;
            f->pe = end;
            f->pending = 1;
            f->pend_match = m;
        }
        break;
    }
}

static void fd_end(feeder *f)
{
    if (f->pending)
        fd_emit(f, f->ps, f->pe);
    f->pending = 0;
}

static inline int is_numeric_at(const uint8_t *p, size_t n, size_t i, size_t *l)
{
    if (p[i] < 0x80) {
        *l = 1;
        return p[i] >= '0' && p[i] <= '9';
    }
    uint32_t cp;
    size_t k = zpi_utf8_decode(p + i, n - i, &cp);
    if (!k) {
        *l = 1;
        return 0;
    }
    *l = k;
    return (zpi_uni_class(cp) & ZPI_CLS_MASK) == ZPI_CLS_NUMBER;
}

/* The stages of pt_run, one per pre-tokenizer kind: pt (stage k) on
 * p[0..n), its pieces to stage k + 1 (through the feeder f, which pt_run
 * set up for stage k + 1). */
static void pt_split_regex(zpi_hf_enc *e, size_t k, const hf_pt *pt, feeder *f, const uint8_t *p,
                           size_t n, int first)
{
    size_t pos = 0;
    if (pt->behavior == HF_B_ISOLATED && !pt->invert) {
        while (pos < n && e->st == ZP_OK) {
            size_t end = zpi_pretok_next(pt->re, (const char *)p, n, pos, e->scr[k]);
            pt_run(e, k + 1, p + pos, end - pos, first && pos == 0);
            pos = end;
        }
        return;
    }
    while (pos < n && e->st == ZP_OK) {
        int m = 0;
        size_t end = zpi_pretok_find(pt->re, (const char *)p, n, pos, e->scr[k], &m);
        fd_feed(f, pos, end, pt->invert ? !m : m);
        pos = end;
    }
    fd_end(f);
}

/* p[0, n) fed as the pieces between occurrences of lit (0) and the
 * occurrences themselves (1), then the feeder ended. */
static void feed_literal_split(feeder *f, const uint8_t *p, size_t n, const void *lit,
                               size_t llen)
{
    size_t pos = 0;
    while (pos < n) {
        const uint8_t *q = memmem(p + pos, n - pos, lit, llen);
        if (!q)
            break;
        size_t j = (size_t)(q - p);
        if (j > pos)
            fd_feed(f, pos, j, 0);
        fd_feed(f, j, j + llen, 1);
        pos = j + llen;
    }
    if (pos < n)
        fd_feed(f, pos, n, 0);
    fd_end(f);
}

static void pt_split_string(const hf_pt *pt, feeder *f, const uint8_t *p, size_t n)
{
    feed_literal_split(f, p, n, pt->str, pt->slen);
}

static void pt_digits(const hf_pt *pt, feeder *f, const uint8_t *p, size_t n)
{
    f->beh = pt->individual ? HF_B_ISOLATED : HF_B_CONTIGUOUS;
    size_t i = 0, last = 0;
    while (i < n) {
        size_t l;
        if (is_numeric_at(p, n, i, &l)) {
            if (i > last)
                fd_feed(f, last, i, 0);
            fd_feed(f, i, i + l, 1);
            last = i + l;
        }
        i += l;
    }
    if (n > last)
        fd_feed(f, last, n, 0);
    fd_end(f);
}

static void pt_metaspace(zpi_hf_enc *e, size_t k, const hf_pt *pt, feeder *f, const uint8_t *p,
                         size_t n, int first)
{
    buf *b = &e->ptb[k];
    if (buf_reserve(b, n * pt->replen + pt->replen + 1) != 0) {
        e->st = ZP_ERR_NOMEM;
        return;
    }
    /* ' ' -> the replacement, written after room for a prepended one */
    size_t o = pt->replen;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == ' ') {
            memcpy(b->p + o, pt->rep, pt->replen);
            o += pt->replen;
        } else {
            b->p[o++] = p[i];
        }
    }
    const uint8_t *q = b->p + pt->replen;
    o -= pt->replen;
    int starts = o >= pt->replen && memcmp(q, pt->rep, pt->replen) == 0;
    if (!starts && (pt->scheme == HF_PREPEND_ALWAYS ||
                    (pt->scheme == HF_PREPEND_FIRST && first))) {
        memcpy(b->p, pt->rep, pt->replen);
        q = b->p;
        o += pt->replen;
    }
    if (!pt->split) {
        pt_run(e, k + 1, q, o, first);
        return;
    }
    f->p = q;
    f->beh = HF_B_MERGED_NEXT;
    feed_literal_split(f, q, o, pt->rep, pt->replen);
}

/* ByteLevel, the last stage. */
static void pt_bytelevel(zpi_hf_enc *e, size_t k, const hf_pt *pt, const uint8_t *p, size_t n)
{
    if (pt->add_prefix_space && p[0] != ' ') {
        buf *b = &e->ptb[k];
        if (buf_reserve(b, n + 2) != 0) {
            e->st = ZP_ERR_NOMEM;
            return;
        }
        b->p[0] = ' ';
        memcpy(b->p + 1, p, n);
        p = b->p;
        n++;
    }
    if (!pt->re) {
        model(e, p, n);
        return;
    }
    size_t pos = 0;
    while (pos < n && e->st == ZP_OK) {
        size_t end = zpi_pretok_next(pt->re, (const char *)p, n, pos, e->scr[k]);
        model(e, p + pos, end - pos);
        pos = end;
    }
}

static void pt_run(zpi_hf_enc *e, size_t k, const uint8_t *p, size_t n, int first)
{
    const struct zpi_hf *h = e->h;
    if (n == 0 || e->st != ZP_OK)
        return;
    if (k == h->n_pt) {
        model(e, p, n);
        return;
    }
    const hf_pt *pt = &h->pt[k];
    feeder f = {e, k + 1, p, first, pt->behavior, 0, 0, 0, 0, 0};
    switch (pt->kind) {
    case HF_P_SPLIT_REGEX:
        pt_split_regex(e, k, pt, &f, p, n, first);
        return;
    case HF_P_SPLIT_STRING:
        pt_split_string(pt, &f, p, n);
        return;
    case HF_P_DIGITS:
        pt_digits(pt, &f, p, n);
        return;
    case HF_P_METASPACE:
        pt_metaspace(e, k, pt, &f, p, n, first);
        return;
    default: /* HF_P_BYTELEVEL, the last stage */
        pt_bytelevel(e, k, pt, p, n);
        return;
    }
}

/* ------------------------------------------------------------ added tokens */

/* Longest added token of m at s[i..n); its index in h->added or -1. */
static long match_at(const struct zpi_hf *h, const hf_matcher *m, const uint8_t *s, size_t n,
                     size_t i)
{
    size_t lo = 0, hi = m->n, k = 0;
    long best = -1;
    /* [lo, hi): tokens whose first k bytes equal s[i..i+k) */
    while (lo < hi && i + k < n) {
        uint8_t c = s[i + k];
        /* narrow to tokens with byte k == c (tokens of length k sort first) */
        size_t a = lo, b = hi;
        while (a < b) {
            size_t mid = (a + b) / 2;
            const hf_added *t = &h->added[m->idx[mid]];
            if (t->mlen <= k || (uint8_t)t->m[k] < c)
                a = mid + 1;
            else
                b = mid;
        }
        size_t l2 = a;
        b = hi;
        while (a < b) {
            size_t mid = (a + b) / 2;
            const hf_added *t = &h->added[m->idx[mid]];
            if ((uint8_t)t->m[k] <= c)
                a = mid + 1;
            else
                b = mid;
        }
        lo = l2;
        hi = a;
        k++;
        if (lo < hi && h->added[m->idx[lo]].mlen == k)
            best = (long)m->idx[lo];
    }
    return best;
}

static int is_ws_at(const uint8_t *s, size_t n, size_t i, size_t *l)
{
    uint32_t cp;
    size_t k = zpi_utf8_decode(s + i, n - i, &cp);
    if (!k) {
        *l = 1;
        return 0;
    }
    *l = k;
    return (zpi_uni_class(cp) & ZPI_CLS_MASK) == ZPI_CLS_SPACE;
}

static int is_word_cp(uint32_t cp)
{
    unsigned c = zpi_uni_class(cp) & ZPI_CLS_MASK;
    return c == ZPI_CLS_LETTER || c == ZPI_CLS_NUMBER || cp == '_' || cp == 0x200C ||
           cp == 0x200D;
}

static void segment(zpi_hf_enc *e, const uint8_t *s, size_t n, int first, int raw);

static void added_split(zpi_hf_enc *e, const hf_matcher *m, const uint8_t *s, size_t n,
                        int first, int raw)
{
    const struct zpi_hf *h = e->h;
    if (m->n_act == 0) { /* no token to match, or only special ones left as text */
        segment(e, s, n, first, raw);
        return;
    }
    size_t i = 0, start_off = 0;
    while (i < n && e->st == ZP_OK) {
        if (m->one_first >= 0) {
            const uint8_t *q = memchr(s + i, m->one_first, n - i);
            if (!q)
                break;
            i = (size_t)(q - s);
        } else if (!m->first[s[i]]) {
            i++;
            continue;
        }
        long a = match_at(h, m, s, n, i);
        if (a < 0) {
            i++;
            continue;
        }
        const hf_added *tk = &h->added[a];
        size_t start = i, stop = i + tk->mlen;
        i = stop;
        if (tk->special && !h->match_special)
            continue;
        if (tk->single_word) {
            int ok = 1;
            if (start > 0) {
                size_t k = start - 1;
                while (k > 0 && (s[k] & 0xC0) == 0x80)
                    k--;
                uint32_t cp;
                if (zpi_utf8_decode(s + k, start - k, &cp) && is_word_cp(cp))
                    ok = 0;
            }
            uint32_t cp;
            if (stop < n && zpi_utf8_decode(s + stop, n - stop, &cp) && is_word_cp(cp))
                ok = 0;
            if (!ok)
                continue;
        }
        if (tk->lstrip) {
            size_t k = start;
            while (k > start_off) {
                size_t b = k - 1;
                while (b > start_off && (s[b] & 0xC0) == 0x80)
                    b--;
                size_t l;
                if (!is_ws_at(s, k, b, &l))
                    break;
                k = b;
            }
            start = k;
        }
        if (tk->rstrip) {
            size_t l;
            while (stop < n && is_ws_at(s, n, stop, &l))
                stop += l;
        }
        if (start_off < start)
            segment(e, s + start_off, start - start_off, first && start_off == 0, raw);
        emit1(e, tk->id);
        start_off = stop;
        if (i < stop)
            i = stop;
    }
    if (start_off < n)
        segment(e, s + start_off, n - start_off, first && start_off == 0, raw);
}

/* A part of the text between added tokens: raw: normalize, then the
 * normalized added tokens; then the pre-tokenizers. */
static void segment(zpi_hf_enc *e, const uint8_t *s, size_t n, int first, int raw)
{
    const struct zpi_hf *h = e->h;
    if (e->st != ZP_OK)
        return;
    if (raw) {
        const uint8_t *q;
        size_t qn;
        if (normalize(e, s, n, &q, &qn) != 0) {
            e->st = ZP_ERR_NOMEM;
            return;
        }
        if (h->normd.n) {
            added_split(e, &h->normd, q, qn, first, 0);
            return;
        }
        s = q;
        n = qn;
    }
    if (n == 0)
        return;
    if (h->core_fast) {
        int32_t *o = out_room(e, n);
        size_t m = 0;
        if (!o)
            return;
        zp_status st = zpi_tok_encode_bytes(e->enc, (const char *)s, n, o, &m);
        if (st != ZP_OK) {
            e->st = st;
            return;
        }
        e->o += m;
        return;
    }
    pt_run(e, 0, s, n, first);
}

zp_status zpi_hf_encode(zp_encoder *enc, zpi_hf_enc *he, const char *text, size_t len,
                        int32_t *ids, size_t *n_ids)
{
    const struct zpi_hf *h = he->h;
    he->enc = enc;
    he->out = ids;
    he->o = 0;
    he->cap = zpi_hf_max_ids(h, len);
    he->st = ZP_OK;
    const uint8_t *s = (const uint8_t *)text;
    size_t n = len;
    size_t v = utf8_valid_prefix(s, n);
    if (v < n) {
        if (make_lossy(he, s, n, v) != 0) {
            *n_ids = 0;
            return ZP_ERR_NOMEM;
        }
        s = he->lossy.p;
        n = he->lossy.n;
    }
    added_split(he, &h->raw, s, n, 1, 1);
    *n_ids = he->o;
    return he->st;
}
