/*
 * spm_internal.h - what the SentencePiece files share (private to
 * spm_model.c, spm_proto.c, spm_trie.c, spm_norm.c, spm_unigram.c,
 * spm_bpe.c): the model (struct zpi_spm), the raw ModelProto, the piece
 * trie, the per-encoder state (struct zpi_spm_enc) and its segment cache,
 * and the small inline helpers several of them use. spm_model.c's comment
 * says what the encoders replicate.
 *
 * It includes no SentencePiece header: spm_model.c calls the others, none
 * calls it (tools/check_layers.py: no circle).
 */
#ifndef ZP_TOKENIZER_SPM_INTERNAL_H
#define ZP_TOKENIZER_SPM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "zephon/tokenizer.h"

#define ERR(st, ...) return zpi_err_set(err, (st), __VA_ARGS__)

typedef struct zpi_spm_enc zpi_spm_enc; /* as in spm_model.h */

/* piece types (ModelProto.SentencePiece.Type) */
enum { PT_NORMAL = 1, PT_UNKNOWN = 2, PT_CONTROL = 3, PT_USER = 4, PT_UNUSED = 5, PT_BYTE = 6 };
/* TrainerSpec.ModelType */
enum { MT_UNIGRAM = 1, MT_BPE = 2, MT_WORD = 3, MT_CHAR = 4 };

static const uint8_t SPACE_SYM[3] = {0xE2, 0x96, 0x81}; /* U+2581 */

/* ------------------------------------------------------------ double-array trie
 * Our own trie over piece bytes: node n's child by byte c is m = base[n] + c
 * when check[m] == n. val[m]: the piece id ending at m, or -1. */

typedef struct da_unit {
    int32_t base;
    int32_t check;
    int32_t val;
} da_unit;

typedef struct da_trie {
    da_unit *u;
    uint32_t n; /* units */
} da_trie;

/* Child of node by byte c, or -1. */
static inline int32_t da_next(const da_trie *t, int32_t node, uint8_t c)
{
    uint32_t m = (uint32_t)t->u[node].base + c;
    if (m >= t->n || t->u[m].check != node)
        return -1;
    return (int32_t)m;
}

/* Node reached from node by p[0..n), or -1. */
static inline int32_t da_walk(const da_trie *t, int32_t node, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n && node >= 0; i++)
        node = da_next(t, node, p[i]);
    return node;
}

typedef struct da_key {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
    uint64_t pre; /* the first 8 bytes, big-endian, zero-padded (keys hold no NUL) */
} da_key;

/* ------------------------------------------------------------ the model */

struct zpi_spm {
    int model_type; /* MT_UNIGRAM or MT_BPE */
    int byte_fallback;
    int ws_suffix; /* treat_whitespace_as_suffix */
    int add_dummy_prefix, remove_extra_ws, escape_ws;
    int32_t unk_id, bos_id, eos_id, pad_id;
    uint32_t n_pieces;
    float *score;  /* per id */
    uint8_t *type; /* per id */
    int has_user;  /* USER_DEFINED pieces exist */
    int has_unused;
    float min_score; /* over NORMAL pieces (Unigram) */
    double smax;     /* the largest |score| of a Unigram lattice node */
    float unk_score;
    int32_t byte_id[256]; /* <0xXX> pieces (byte_fallback) */

    da_trie pieces;   /* NORMAL, USER_DEFINED, UNUSED: SentencePiece's pieces_ */
    da_trie reserved; /* CONTROL, UNKNOWN, BYTE */

    /* Segments: no piece crosses a boundary, so text can be encoded one
     * segment at a time (and cached). 1: before each U+2581 that follows a
     * character other than U+2581; 2: after each U+2581 followed by another
     * character (treat_whitespace_as_suffix); 0: never (whole text). */
    int seg_mode;

    /* precompiled charsmap: Darts-clone units and the replacement pool */
    const uint32_t *cm_units;
    uint32_t cm_n;
    const char *cm_pool;
    uint32_t cm_pool_len;
    uint8_t cm_first[256]; /* 1: some key starts with this byte */
    /* 1: an ASCII byte that no key is, nor starts with followed by another
     * ASCII byte (letters that start only keys with combining marks): before
     * an ASCII byte or at the end it is copied as it is */
    uint8_t cm_plain[128];
    /* zpi_spm_norm()'s runs (without user-defined pieces): 1: an ASCII byte
     * other than a space that no charsmap key starts with; 2: one that
     * cm_plain allows before an ASCII byte or the end; 0: others */
    uint8_t ascii_copy[128];
    size_t max_repl;       /* longest replacement string */
    /* the most normalized bytes per input byte: grow_num / grow_den (>= 3:
     * a space becomes U+2581, an invalid byte U+FFFD) */
    size_t grow_num, grow_den;
    uint8_t *cm_copy;      /* owned copy of the charsmap (aligned) */

    char name[64]; /* normalizer_spec.name */
};

typedef struct raw_piece {
    const uint8_t *p;
    uint32_t len;
    float score;
    int type;
} raw_piece;

typedef struct raw_model {
    raw_piece *pc;
    size_t n, cap;
    /* trainer_spec */
    int model_type, byte_fallback, ws_suffix, split_digits, allow_ws_only;
    int64_t unk_id, bos_id, eos_id, pad_id;
    /* normalizer_spec */
    const uint8_t *nm_name, *charsmap;
    size_t nm_name_len, charsmap_len;
    int add_dummy_prefix, remove_extra_ws, escape_ws;
    int has_normalizer;
} raw_model;

/* ------------------------------------------------------------ encoder state */

#define CACHE_WAYS 4
#define CACHE_DATA 56 /* a slot is one 64-byte cache line */

typedef struct cache_slot {
    uint8_t klen;
    uint8_t nids;
    uint8_t pad[2];
    float mu; /* Unigram: the path's margin (see uni_cached) */
    uint8_t data[CACHE_DATA];
} cache_slot;

typedef struct bpe_sym {
    int32_t prev, next;
    uint32_t start, len;
    int32_t node; /* trie node of the symbol's bytes, -1: no piece starts so */
    int32_t freeze;
} bpe_sym;

typedef struct bpe_pair {
    uint64_t key; /* (inverted score) << 32 | left: the smallest merges first */
    uint32_t right, size;
    int32_t node;
} bpe_pair;

struct zpi_spm_enc {
    const zp_tokenizer *tok;
    const struct zpi_spm *m;
    /* normalized text */
    uint8_t *norm;
    size_t norm_cap;
    /* Unigram: per byte position */
    float *best;
    int32_t *from, *bid, *path;
    double *dbest, *dgap; /* the exact Viterbi: best and second-best candidate */
    uint32_t *nchar;      /* characters before the position */
    size_t vit_cap;
    /* Unigram: the path of a segment (ids before byte fallback, lengths) */
    int32_t *pid;
    uint32_t *plen;
    size_t pcap;
    float uh; /* the path score at the current segment's start */
    /* BPE */
    bpe_sym *sym;
    size_t sym_cap;
    bpe_pair *heap;
    size_t heap_cap;
    uint32_t *rev;     /* UNUSED piece id -> left length of the last pair that formed it */
    uint32_t *rev_gen; /* generation of rev[] entries */
    uint32_t gen;
    size_t *cut; /* ends of the text's segments */
    size_t cut_cap;
    /* segment ids (before byte fallback) */
    int32_t *seg;
    size_t seg_cap;
    /* cache of segments (BPE): sets of CACHE_WAYS slots */
    uint32_t *ctag;
    cache_slot *cslot;
    uint32_t cset_mask;
    uint32_t cvictim;
    size_t cache_max;
};

static inline int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    void *np = realloc(*p, c * elem);
    if (!np)
        return -1;
    *p = np;
    *cap = c;
    return 0;
}

/* ------------------------------------------------------------ normalizer */

/* SentencePiece's length of the UTF-8 character at s (from its first byte
 * only), at most n. */
static inline size_t one_char_len(const uint8_t *s, size_t n)
{
    static const uint8_t tab[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    size_t l = tab[s[0] >> 4];
    return l < n ? l : n;
}

/* Longest USER_DEFINED piece that prefixes s[0..n), 0: none. */
static inline size_t user_match(const struct zpi_spm *m, const uint8_t *s, size_t n)
{
    const da_trie *t = &m->pieces;
    int32_t node = 0;
    size_t best = 0;
    for (size_t i = 0; i < n; i++) {
        node = da_next(t, node, s[i]);
        if (node < 0)
            break;
        int32_t v = t->u[node].val;
        if (v >= 0 && m->type[v] == PT_USER)
            best = i + 1;
    }
    return best;
}

/* ------------------------------------------------------------ output of a segment */

/* Append id for the piece s[0..n) to out[*o] (room: one id per byte of the
 * segment): an unknown piece becomes its bytes' <0xXX> ids with
 * byte_fallback. */
static inline void put_id(const struct zpi_spm *m, int32_t id, const uint8_t *s, size_t n,
                          int32_t *out, size_t *o)
{
    if (id == m->unk_id && m->byte_fallback) {
        for (size_t i = 0; i < n; i++)
            out[(*o)++] = m->byte_id[s[i]];
        return;
    }
    out[(*o)++] = id;
}

/* ------------------------------------------------------------ cache */

static inline size_t align4(size_t n) { return (n + 3) & ~(size_t)3; }

static inline size_t cache_set(const zpi_spm_enc *e, uint64_t h)
{
    return (size_t)(((uint32_t)h >> 8) & e->cset_mask) * CACHE_WAYS;
}

/* The slot holding p[0..n), or NULL. Its data: the key (padded to 4
 * bytes), nids int32 ids, then (Unigram) nids uint8 piece lengths. */
static inline const cache_slot *cache_get(const zpi_spm_enc *e, const uint8_t *p, size_t n,
                                          uint64_t h)
{
    uint32_t tag = (uint32_t)(h >> 32) | 1u;
    size_t base = cache_set(e, h);
    for (int w = 0; w < CACHE_WAYS; w++) {
        if (e->ctag[base + (size_t)w] != tag)
            continue;
        const cache_slot *s = &e->cslot[base + (size_t)w];
        if (s->klen == n && memcmp(s->data, p, n) == 0)
            return s;
    }
    return NULL;
}

static inline void cache_put(zpi_spm_enc *e, const uint8_t *p, size_t n, uint64_t h,
                             const int32_t *ids, size_t nids, const uint32_t *lens, float mu,
                             size_t chars)
{
    if (align4(n) + nids * (sizeof(int32_t) + (lens ? 1 : 0)) > CACHE_DATA || chars > 255)
        return;
    uint32_t tag = (uint32_t)(h >> 32) | 1u;
    size_t base = cache_set(e, h);
    int w = 0;
    while (w < CACHE_WAYS && e->ctag[base + (size_t)w] != 0)
        w++;
    if (w == CACHE_WAYS)
        w = (int)(e->cvictim++ % CACHE_WAYS);
    e->ctag[base + (size_t)w] = tag;
    cache_slot *s = &e->cslot[base + (size_t)w];
    s->klen = (uint8_t)n;
    s->nids = (uint8_t)nids;
    s->pad[0] = (uint8_t)chars;
    s->mu = mu;
    memcpy(s->data, p, n);
    memcpy(s->data + align4(n), ids, nids * sizeof(int32_t));
    if (lens)
        for (size_t i = 0; i < nids; i++)
            s->data[align4(n) + nids * sizeof(int32_t) + i] = (uint8_t)lens[i];
}
/* ------------------------------------------------------------ between the files */

/* spm_proto.c: parse a serialized ModelProto buf[0..len) into r (defaults
 * set by the caller); r->pc is allocated (the caller frees it). */
zp_status zpi_spm_parse_model(raw_model *r, const uint8_t *buf, size_t len, const char *name,
                              zpi_err *err);

/* spm_trie.c: the sort prefix of a key; a trie of keys[0..n) (sorted
 * there; no duplicates): 0 or -1 (out of memory). */
uint64_t zpi_spm_key_prefix(const uint8_t *p, size_t n);
int zpi_spm_da_build(da_trie *out, da_key *keys, size_t n);

/* spm_norm.c: load the precompiled charsmap cm[0..len) into m (none when
 * len is 0); normalize text[0..len) into e->norm, returning its length or
 * (size_t)-1 (out of memory). */
zp_status zpi_spm_cm_load(struct zpi_spm *m, const uint8_t *cm, size_t len, const char *name,
                          zpi_err *err);
size_t zpi_spm_norm(zpi_spm_enc *e, const uint8_t *s, size_t len);

/* spm_unigram.c: Viterbi over a whole text s[0..n) (n >= 1), or over one
 * segment from the path score e->uh (the cache when on; hh: the segment's
 * hash); ids (byte fallback applied) into out (room for n ids). Return the
 * count or (size_t)-1 (out of memory). */
size_t zpi_spm_unigram(zpi_spm_enc *e, const uint8_t *s, size_t n, int32_t *out);
size_t zpi_spm_uni_segment(zpi_spm_enc *e, const uint8_t *s, size_t n, uint64_t hh,
                           int32_t *out);

/* spm_bpe.c: BPE of s[0..n) (n >= 1); the same contract. */
size_t zpi_spm_bpe(zpi_spm_enc *e, const uint8_t *s, size_t n, int32_t *out);

#endif
