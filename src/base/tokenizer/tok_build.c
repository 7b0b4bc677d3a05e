/*
 * tok_build.c - filling a zp_tokenizer's tables (the vocabulary map, the
 * id spans, the pair map of merges, the splits of each token): the
 * zpi_tok_build_* functions of tok_internal.h, which every loader calls
 * (tok_vocab.c: GPT-2 and vocab.json + merges.txt; tok_tiktoken.c; hf_json.c)
 * and which call none of them.
 *
 * Ownership: the tables belong to the zp_tokenizer; zp_tokenizer_destroy()
 * frees them.
 */
#include "base/tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define ERR(st, ...) return zpi_err_set(err, (st), __VA_ARGS__)

static uint32_t next_pow2_u32(uint64_t v)
{
    uint64_t p = 16;
    while (p < v)
        p <<= 1;
    return (uint32_t)p;
}

/* ------------------------------------------------------------ builder */

void *zpi_tok_table_alloc(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    if (bytes < huge)
        return calloc(1, bytes ? bytes : 1);
    size_t sz = (bytes + huge - 1) / huge * huge;
    void *p = aligned_alloc(huge, sz);
    if (!p)
        return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, sz, MADV_HUGEPAGE); /* a hint: failure is harmless */
#endif
    memset(p, 0, sz);
    return p;
}

zp_status zpi_tok_build_begin(zp_tokenizer *t, uint32_t max_ids, zpi_err *err)
{
    if (max_ids == 0 || max_ids > ZPI_TOK_MAX_IDS)
        ERR(ZP_ERR_FORMAT, "vocabulary has %u ids (at most %u supported)", max_ids,
            ZPI_TOK_MAX_IDS);
    t->span = malloc((size_t)max_ids * sizeof *t->span);
    uint32_t cap = next_pow2_u32((uint64_t)max_ids * 8 / 5 + 1);
    t->vmap = zpi_tok_table_alloc((size_t)cap * sizeof *t->vmap);
    t->blob_cap = (size_t)max_ids * 8 + 64;
    t->blob = malloc(t->blob_cap);
    if (!t->span || !t->vmap || !t->blob)
        ERR(ZP_ERR_NOMEM, "out of memory for a vocabulary of %u ids", max_ids);
    for (uint32_t i = 0; i < max_ids; i++) {
        t->span[i].off = ZPI_TOK_NONE;
        t->span[i].len = 0;
    }
    t->n_ids = max_ids;
    t->vmap_mask = cap - 1;
    t->vmap_count = 0;
    t->blob_len = 0;
    return ZP_OK;
}

zp_status zpi_tok_build_add(zp_tokenizer *t, uint32_t id, const uint8_t *p, size_t n, int in_map,
                            zpi_err *err)
{
    if (id >= t->n_ids)
        ERR(ZP_ERR_FORMAT, "id %u out of range (vocabulary of %u ids)", id, t->n_ids);
    if (t->span[id].off != ZPI_TOK_NONE)
        ERR(ZP_ERR_FORMAT, "id %u appears twice", id);
    if (n == 0)
        ERR(ZP_ERR_FORMAT, "id %u has an empty token", id);
    if (n > UINT32_MAX / 2 || t->blob_len + n > UINT32_MAX - 1)
        ERR(ZP_ERR_FORMAT, "vocabulary too large");
    if (in_map) {
        uint64_t h = zpi_tok_hash(p, n);
        uint32_t other = zpi_tok_find(t, p, n, h);
        if (other != ZPI_TOK_NONE)
            ERR(ZP_ERR_FORMAT, "ids %u and %u have the same bytes", other, id);
        if (n > UINT16_MAX)
            ERR(ZP_ERR_FORMAT, "id %u: token of %zu bytes (at most %u)", id, n, UINT16_MAX);
        uint32_t i = (uint32_t)h & t->vmap_mask;
        while (t->vmap[i].key >> ZPI_TOK_ID_BITS != 0)
            i = (i + 1) & t->vmap_mask;
        t->vmap[i].head = zpi_tok_head(p, n);
        t->vmap[i].off = (uint32_t)t->blob_len;
        t->vmap[i].key = id | (n < ZPI_VSLOT_LONG ? (uint32_t)n : ZPI_VSLOT_LONG)
                                  << ZPI_TOK_ID_BITS;
        t->vmap_count++;
    }
    if (t->blob_len + n > t->blob_cap) {
        size_t cap = t->blob_cap * 2 + n;
        uint8_t *nb = realloc(t->blob, cap);
        if (!nb)
            ERR(ZP_ERR_NOMEM, "out of memory for token bytes");
        t->blob = nb;
        t->blob_cap = cap;
    }
    memcpy(t->blob + t->blob_len, p, n);
    t->span[id].off = (uint32_t)t->blob_len;
    t->span[id].len = (uint32_t)n;
    t->blob_len += n;
    return ZP_OK;
}

static int pmap_alloc(zp_tokenizer *t, uint32_t cap)
{
    uint64_t *m = zpi_tok_table_alloc((size_t)cap * sizeof *m);
    if (!m)
        return -1;
    unsigned bits = 0;
    while ((1u << bits) < cap)
        bits++;
    uint64_t *old = t->pmap;
    uint32_t old_cap = old ? t->pmap_mask + 1 : 0;
    t->pmap = m;
    t->pmap_mask = cap - 1;
    t->pmap_shift = 64 - bits;
    for (uint32_t i = 0; i < old_cap; i++) {
        if (old[i] == 0)
            continue;
        uint32_t j = zpi_tok_pair_home(t, old[i] >> ZPI_TOK_ID_BITS);
        while (m[j] != 0)
            j = (j + 1) & t->pmap_mask;
        m[j] = old[i];
    }
    free(old);
    return 0;
}

zp_status zpi_tok_build_pairs_begin(zp_tokenizer *t, size_t max_pairs, zpi_err *err)
{
    if (pmap_alloc(t, next_pow2_u32((uint64_t)max_pairs * 8 / 5 + 1)) != 0)
        ERR(ZP_ERR_NOMEM, "out of memory for the merge table");
    t->pmap_count = 0;
    return ZP_OK;
}

/* Insert slot value v without growing (the caller made room). An existing
 * pair keeps the lower rank. */
void zpi_tok_build_pair_insert(zp_tokenizer *t, uint64_t v)
{
    uint64_t key = v >> ZPI_TOK_ID_BITS;
    uint32_t i = zpi_tok_pair_home(t, key);
    for (;;) {
        uint64_t s = t->pmap[i];
        if ((s >> ZPI_TOK_ID_BITS) == key) {
            if ((v & ZPI_TOK_ID_MASK) < (s & ZPI_TOK_ID_MASK))
                t->pmap[i] = v;
            return;
        }
        if (s == 0) {
            t->pmap[i] = v;
            t->pmap_count++;
            return;
        }
        i = (i + 1) & t->pmap_mask;
    }
}

static uint64_t pair_slot(uint32_t a, uint32_t b, uint32_t rank)
{
    return (zpi_tok_pair_key(a, b) << ZPI_TOK_ID_BITS) | rank;
}

/* Make room for n more pairs at load <= 5/8. Returns 0 or -1. */
static int pairs_reserve(zp_tokenizer *t, size_t n)
{
    uint64_t cap = (uint64_t)t->pmap_mask + 1;
    while (((uint64_t)t->pmap_count + n) * 8 > cap * 5)
        cap *= 2;
    if (cap == (uint64_t)t->pmap_mask + 1)
        return 0;
    if (cap > ((uint64_t)1 << 31))
        return -1;
    return pmap_alloc(t, (uint32_t)cap);
}

/* Returns 0, or -1 when the map could not grow (tok_internal.h). */
int zpi_tok_build_pair(zp_tokenizer *t, uint32_t a, uint32_t b, uint32_t rank)
{
    if (pairs_reserve(t, 1) != 0)
        return -1;
    zpi_tok_build_pair_insert(t, pair_slot(a, b, rank));
    return 0;
}

/* Insert n slot values in the order of their home slots, so that the writes
 * into the (megabytes large) map are nearly sequential: much faster than
 * random insertion. Returns 0 or -1 (out of memory). */
static int insert_pairs_sorted(zp_tokenizer *t, const uint64_t *v, size_t n)
{
    if (pairs_reserve(t, n) != 0)
        return -1;
    unsigned bits = 64 - t->pmap_shift;
    unsigned nbits = bits < 12 ? bits : 12;
    size_t nb = (size_t)1 << nbits;
    size_t *cnt = calloc(nb + 1, sizeof *cnt);
    uint64_t *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!cnt || !tmp) {
        free(cnt);
        free(tmp);
        return -1;
    }
#define BUCKET(x) ((size_t)(zpi_tok_pair_home(t, (x) >> ZPI_TOK_ID_BITS) >> (bits - nbits)))
    for (size_t i = 0; i < n; i++)
        cnt[BUCKET(v[i]) + 1]++;
    for (size_t b = 0; b < nb; b++)
        cnt[b + 1] += cnt[b];
    for (size_t i = 0; i < n; i++)
        tmp[cnt[BUCKET(v[i])]++] = v[i];
#undef BUCKET
    for (size_t i = 0; i < n; i++)
        zpi_tok_build_pair_insert(t, tmp[i]);
    free(cnt);
    free(tmp);
    return 0;
}

/* A lookup of all_splits' queue: a token whole (k = 0: is it the token
 * its bytes find, or a special one?) or its split at k. */
typedef struct split_q {
    const uint8_t *p;
    uint32_t id, k, len;
    uint64_t ha, hb; /* hashes of p[0..k) and p[k..len) (k = 0: ha of the whole) */
} split_q;

#define SPLIT_BATCH 64

/* Append pair (a, b) -> id to v (grown as needed). 0 or -1. */
static int push_split(uint64_t **v, size_t *n, size_t *cap, uint32_t a, uint32_t b, uint32_t id)
{
    if (*n == *cap) {
        uint64_t *nv = realloc(*v, *cap * 2 * sizeof **v);
        if (!nv)
            return -1;
        *v = nv;
        *cap *= 2;
    }
    (*v)[(*n)++] = pair_slot(a, b, id);
    return 0;
}

/* Every two-token split (a, b) of every token: the vocabulary's lookups
 * are queued SPLIT_BATCH at a time, their slots prefetched, and then made,
 * so that their cache misses overlap (o200k_base: about 2 million lookups
 * in a table of several MB). */
zp_status zpi_tok_build_all_splits(zp_tokenizer *t, zpi_err *err)
{
    size_t n = 0, cap = (size_t)t->n_ids * 2 + 16;
    uint64_t *v = malloc(cap * sizeof *v);
    if (!v)
        ERR(ZP_ERR_NOMEM, "out of memory for the merge table");
    split_q q[SPLIT_BATCH];
    unsigned nq = 0;
    int special = 0; /* the current token is a special one: skip its splits */
    uint32_t id = 0, k = 0;
    for (;;) {
        /* fill the queue: the rest of the current token, then the next */
        while (nq < SPLIT_BATCH && id < t->n_ids) {
            const zpi_tok_span *sp = &t->span[id];
            if (sp->off == ZPI_TOK_NONE || sp->len < 2) {
                id++;
                continue;
            }
            const uint8_t *p = t->blob + sp->off;
            split_q *e = &q[nq++];
            e->p = p;
            e->id = id;
            e->k = k;
            e->len = sp->len;
            if (k == 0) {
                e->ha = zpi_tok_hash(p, sp->len);
                __builtin_prefetch(&t->vmap[e->ha & t->vmap_mask]);
            } else {
                e->ha = zpi_tok_hash(p, k);
                e->hb = zpi_tok_hash(p + k, sp->len - k);
                __builtin_prefetch(&t->vmap[e->ha & t->vmap_mask]);
                __builtin_prefetch(&t->vmap[e->hb & t->vmap_mask]);
            }
            if (++k == sp->len) {
                k = 0;
                id++;
            }
        }
        if (nq == 0)
            break;
        for (unsigned i = 0; i < nq; i++) {
            const split_q *e = &q[i];
            if (e->k == 0) {
                special = zpi_tok_find(t, e->p, e->len, e->ha) != e->id;
                continue; /* a special token: BPE never produces it */
            }
            if (special)
                continue;
            uint32_t a = zpi_tok_find(t, e->p, e->k, e->ha);
            if (a == ZPI_TOK_NONE)
                continue;
            uint32_t b = zpi_tok_find(t, e->p + e->k, e->len - e->k, e->hb);
            if (b == ZPI_TOK_NONE)
                continue;
            if (push_split(&v, &n, &cap, a, b, e->id) != 0) {
                free(v);
                ERR(ZP_ERR_NOMEM, "out of memory for the merge table");
            }
        }
        nq = 0;
    }
    int r = insert_pairs_sorted(t, v, n);
    free(v);
    if (r != 0)
        ERR(ZP_ERR_NOMEM, "out of memory for the merge table");
    return ZP_OK;
}

void zpi_tok_pack_merges(zp_tokenizer *t)
{
    const uint32_t *id = t->merge_id;
    uint32_t n = t->merge_cap;
    if (!id || n == 0)
        return;
    for (uint32_t r = 1; r < n; r++)
        if ((r & 63) && id[r] != id[r - 1] && id[r] != id[r - 1] + 1)
            return;
    uint32_t nb = (n + 63) / 64;
    zpi_merge_block *b = calloc(nb, sizeof *b);
    if (!b)
        return;
    for (uint32_t r = 0; r < n; r++) {
        if ((r & 63) == 0)
            b[r >> 6].base = id[r];
        else if (id[r] != id[r - 1])
            b[r >> 6].inc |= 1ULL << (r & 63);
    }
    free(t->merge_id);
    t->merge_id = NULL;
    t->merge_cap = 0;
    t->mblock = b;
    t->mblock_n = nb;
}

zp_status zpi_tok_build_finish(zp_tokenizer *t, zpi_err *err)
{
    for (unsigned b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        uint32_t id = zpi_tok_find(t, &c, 1, zpi_tok_hash(&c, 1));
        if (id == ZPI_TOK_NONE)
            ERR(ZP_ERR_FORMAT, "the vocabulary lacks the single-byte token for byte 0x%02X "
                "(not a byte-level BPE vocabulary)", b);
        t->byte_id[b] = id;
    }
    uint32_t maxlen = 0;
    for (uint32_t id = 0; id < t->n_ids; id++)
        if (t->span[id].off != ZPI_TOK_NONE && t->span[id].len > maxlen)
            maxlen = t->span[id].len;
    t->max_token_len = maxlen;
    if (t->eot < 0 || (uint32_t)t->eot >= t->n_ids || t->span[t->eot].off == ZPI_TOK_NONE)
        ERR(ZP_ERR_INTERNAL, "end-of-text id %d not set", (int)t->eot);
    if (!t->pmap && zpi_tok_build_pairs_begin(t, 16, err) != ZP_OK)
        return ZP_ERR_NOMEM;
    /* byte-pair ranks: walk the pair map once */
    t->bp_rank = malloc(65536 * sizeof *t->bp_rank);
    int16_t *byte_of = malloc((size_t)t->n_ids * sizeof *byte_of);
    if (!t->bp_rank || !byte_of) {
        free(byte_of);
        ERR(ZP_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < 65536; i++)
        t->bp_rank[i] = ZPI_TOK_NONE;
    for (uint32_t id = 0; id < t->n_ids; id++)
        byte_of[id] = -1;
    for (unsigned b = 0; b < 256; b++)
        byte_of[t->byte_id[b]] = (int16_t)b;
    for (uint32_t i = 0; i <= t->pmap_mask; i++) {
        uint64_t s = t->pmap[i];
        if (s == 0)
            continue;
        uint32_t a = (uint32_t)(s >> (2 * ZPI_TOK_ID_BITS)) & ZPI_TOK_ID_MASK;
        uint32_t b = (uint32_t)(s >> ZPI_TOK_ID_BITS) & ZPI_TOK_ID_MASK;
        if (byte_of[a] >= 0 && byte_of[b] >= 0)
            t->bp_rank[(unsigned)byte_of[a] << 8 | (unsigned)byte_of[b]] =
                (uint32_t)s & ZPI_TOK_ID_MASK;
    }
    free(byte_of);
    /* the pair filter: 8 bits per pair at least, a power of two of words */
    uint32_t words = next_pow2_u32(((uint64_t)t->pmap_count * 8 + 63) / 64);
    t->pfilter = zpi_tok_table_alloc((size_t)words * sizeof *t->pfilter);
    if (!t->pfilter)
        ERR(ZP_ERR_NOMEM, "out of memory");
    t->pfilter_mask = words - 1;
    for (uint32_t i = 0; i <= t->pmap_mask; i++) {
        uint64_t s = t->pmap[i];
        if (s == 0)
            continue;
        uint64_t h = zpi_tok_pfilter_hash(s >> ZPI_TOK_ID_BITS);
        t->pfilter[(uint32_t)(h >> 32) & t->pfilter_mask] |= zpi_tok_pfilter_bits(h);
    }
    return ZP_OK;
}
