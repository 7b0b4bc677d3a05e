/*
 * spm_model.c - SentencePiece .model files: a protobuf wire-format reader
 * for ModelProto, the precompiled-charsmap normalizer, and SentencePiece's
 * BPE and Unigram encoders, giving the ids of SentencePieceProcessor's
 * Encode (sentencepiece 0.2). See spm_model.h and docs/tokenizers.md.
 *
 * What the encoders replicate, step by step (facts of SentencePiece's
 * behaviour; the code is this project's own):
 *  - Normalizer: at each position, a user-defined piece (longest match) is
 *    copied as is; else the longest key of the charsmap's trie that
 *    prefixes the input (among its first 32 matches) is replaced by its
 *    string; else one UTF-8 character is copied, or one invalid byte
 *    becomes U+FFFD. With remove_extra_whitespaces, leading spaces are
 *    dropped, a replacement's leading spaces are dropped after a space, and
 *    trailing spaces are dropped at the end. Spaces become U+2581 with
 *    escape_whitespaces; add_dummy_prefix puts one before the text (after
 *    it with treat_whitespace_as_suffix).
 *  - Unigram: Viterbi over byte positions, character starts only: every
 *    piece (NORMAL score; USER_DEFINED 0.1 * (bytes - 1); UNUSED skipped)
 *    that prefixes the rest, path scores in float arithmetic as
 *    SentencePiece's (strictly greater wins, so earlier starts win ties;
 *    scores beyond +-100000 are rebased to 0 as it does); a character that
 *    no piece of exactly its length covers gets an unknown node scored
 *    min_score - 10.
 *  - BPE: symbols are characters (a user-defined piece is one frozen
 *    symbol); repeatedly merge the adjacent pair whose concatenation is a
 *    piece of the highest score (leftmost on ties); UNUSED results are split
 *    back by the last pair that formed them (unknown when none did, or
 *    after 100 levels the UNUSED id); symbols that are no piece (or are a
 *    CONTROL, UNKNOWN or BYTE piece) are unknown.
 *  - Unknown pieces: with byte_fallback, each of their bytes becomes its
 *    <0xXX> piece; without, a run of unknown pieces is one unknown id.
 *
 * The reference is sentencepiece 0.2.3 (tools/tokref.sh pins it); 0.2.0
 * and 0.2.1 differ in Unigram arithmetic (double, no rebase, user-defined
 * score length * max_score - 0.1) and in BPE's leftover UNUSED pieces.
 *
 * Threads: a struct zpi_spm is immutable after loading; a zpi_spm_enc is
 * one thread's.
 */
#include "base/tokenizer/spm_model.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/tokenizer/tok_internal.h"

#define ERR(st, ...) return zpi_err_set(err, (st), __VA_ARGS__)

/* piece types (ModelProto.SentencePiece.Type) */
enum { PT_NORMAL = 1, PT_UNKNOWN = 2, PT_CONTROL = 3, PT_USER = 4, PT_UNUSED = 5, PT_BYTE = 6 };
/* TrainerSpec.ModelType */
enum { MT_UNIGRAM = 1, MT_BPE = 2, MT_WORD = 3, MT_CHAR = 4 };

static const uint8_t SPACE_SYM[3] = {0xE2, 0x96, 0x81}; /* U+2581 */
static const uint8_t REPL_CHAR[3] = {0xEF, 0xBF, 0xBD}; /* U+FFFD */

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

static uint64_t key_prefix(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < 8; i++)
        v = (v << 8) | (i < n ? p[i] : 0);
    return v;
}

static int key_cmp(const void *a, const void *b)
{
    const da_key *x = a, *y = b;
    if (x->pre != y->pre)
        return x->pre < y->pre ? -1 : 1;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = n > 8 ? memcmp(x->p + 8, y->p + 8, n - 8) : 0;
    if (c)
        return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

typedef struct da_builder {
    da_trie t;
    uint32_t cap;
    uint32_t free_from;  /* every unit below is used */
    uint32_t multi_from; /* nodes of several children search from here */
} da_builder;

static int da_reserve(da_builder *b, uint32_t need)
{
    if (need <= b->cap)
        return 0;
    uint32_t cap = b->cap ? b->cap : 1024;
    while (cap < need)
        cap *= 2;
    da_unit *nu = realloc(b->t.u, (size_t)cap * sizeof *nu);
    if (!nu)
        return -1;
    for (uint32_t i = b->cap; i < cap; i++) {
        nu[i].base = 0;
        nu[i].check = -1;
        nu[i].val = -1;
    }
    b->t.u = nu;
    b->cap = cap;
    return 0;
}

/* Build the children of node from keys[lo..hi), all sharing their first
 * depth bytes. Returns 0 or -1 (out of memory). Recursion depth: the longest
 * key. */
static int da_build_node(da_builder *b, int32_t node, const da_key *k, size_t lo, size_t hi,
                         uint32_t depth)
{
    if (lo < hi && k[lo].len == depth) {
        b->t.u[node].val = k[lo].id;
        lo++;
    }
    if (lo == hi)
        return 0;
    uint8_t labels[256];
    size_t start[257];
    int nl = 0;
    for (size_t i = lo; i < hi; i++) {
        uint8_t c = k[i].p[depth];
        if (nl == 0 || labels[nl - 1] != c) {
            labels[nl] = c;
            start[nl++] = i;
        }
    }
    start[nl] = hi;
    /* a base whose child slots are all free (slot 0 is the root). A single
     * child takes the first free slot (free_from only moves forward). A node
     * of several children tries a bounded number of bases from where the
     * last such node was placed, then goes past every used unit (the holes
     * it leaves are filled by single children later): linear time, where an
     * unbounded search is quadratic for large vocabularies */
    if (da_reserve(b, b->t.n + 512) != 0)
        return -1;
    uint32_t pos = b->free_from;
    while (pos < b->cap && b->t.u[pos].check >= 0)
        pos++;
    b->free_from = pos;
    uint32_t base;
    if (nl == 1) {
        base = pos - labels[0]; /* pos >= 256: see da_build */
    } else {
        if (b->multi_from > pos)
            pos = b->multi_from;
        base = pos > labels[0] ? pos - labels[0] : 1;
        int found = 0;
        for (int tries = 0; tries < 64; tries++, base++) {
            if (da_reserve(b, base + 256 + 1) != 0)
                return -1;
            int ok = base + labels[0] != 0;
            for (int i = 0; ok && i < nl; i++)
                ok = b->t.u[base + labels[i]].check < 0;
            if (ok) {
                found = 1;
                break;
            }
        }
        if (!found) {
            base = b->t.n; /* every unit from here on is free */
            if (da_reserve(b, base + 256 + 1) != 0)
                return -1;
        }
        b->multi_from = base + labels[0];
    }
    if (da_reserve(b, base + 256 + 1) != 0)
        return -1;
    b->t.u[node].base = (int32_t)base;
    for (int i = 0; i < nl; i++) {
        b->t.u[base + labels[i]].check = node;
        if (base + labels[i] + 1 > b->t.n)
            b->t.n = base + labels[i] + 1;
    }
    for (int i = 0; i < nl; i++)
        if (da_build_node(b, (int32_t)(base + labels[i]), k, start[i], start[i + 1], depth + 1) !=
            0)
            return -1;
    return 0;
}

/* Build a trie of keys[0..n) (sorted here; no duplicates). */
static int da_build(da_trie *out, da_key *keys, size_t n)
{
    da_builder b;
    memset(&b, 0, sizeof b);
    qsort(keys, n, sizeof *keys, key_cmp);
    if (da_reserve(&b, 1024) != 0)
        return -1;
    b.t.u[0].check = 0; /* the root: never a child */
    b.t.n = 1;
    /* single children search free units from 256 on (a unit below could
     * hold only smaller labels: scanning it again and again is quadratic) */
    b.free_from = 256;
    if (da_build_node(&b, 0, keys, 0, n, 0) != 0) {
        free(b.t.u);
        return -1;
    }
    /* every base + 255 stays inside the array: da_next needs no other bound
     * than t->n, which covers it */
    b.t.n = b.cap;
    *out = b.t;
    return 0;
}

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
    /* normalize()'s runs (without user-defined pieces): 1: an ASCII byte
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

void zpi_spm_destroy(struct zpi_spm *m)
{
    if (!m)
        return;
    free(m->score);
    free(m->type);
    free(m->pieces.u);
    free(m->reserved.u);
    free(m->cm_copy);
    free(m);
}

size_t zpi_spm_memory(const struct zpi_spm *m)
{
    if (!m)
        return 0;
    return sizeof *m + (size_t)m->n_pieces * (sizeof(float) + 1) +
           ((size_t)m->pieces.n + m->reserved.n) * sizeof(da_unit) + (size_t)m->cm_n * 4 +
           m->cm_pool_len;
}

int32_t zpi_spm_bos(const struct zpi_spm *m) { return m ? m->bos_id : -1; }

int zpi_spm_is_model_path(const char *path)
{
    size_t n = path ? strlen(path) : 0;
    return n > 6 && strcmp(path + n - 6, ".model") == 0;
}

/* ------------------------------------------------------------ protobuf wire format */

typedef struct pb {
    const uint8_t *p, *end;
} pb;

static int pb_varint(pb *b, uint64_t *v)
{
    uint64_t r = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end)
            return -1;
        uint8_t c = *b->p++;
        r |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -1;
}

/* One field: its number and wire type; for wire type 2 (length-delimited)
 * *sub gets the bytes, for 0 *v the varint, for 5 *v the 32 bits, for 1 the
 * 64 bits. Returns 1, 0 at the end, -1 when malformed. */
static int pb_next(pb *b, uint32_t *field, uint32_t *wt, uint64_t *v, pb *sub)
{
    if (b->p >= b->end)
        return 0;
    uint64_t key;
    if (pb_varint(b, &key) != 0 || (key >> 3) == 0 || (key >> 3) > 0x1FFFFFFF)
        return -1;
    *field = (uint32_t)(key >> 3);
    *wt = (uint32_t)(key & 7);
    switch (*wt) {
    case 0:
        return pb_varint(b, v) == 0 ? 1 : -1;
    case 1:
        if (b->end - b->p < 8)
            return -1;
        memcpy(v, b->p, 8);
        b->p += 8;
        return 1;
    case 2: {
        uint64_t n;
        if (pb_varint(b, &n) != 0 || n > (uint64_t)(b->end - b->p))
            return -1;
        sub->p = b->p;
        sub->end = b->p + n;
        b->p += n;
        return 1;
    }
    case 5: {
        uint32_t x;
        if (b->end - b->p < 4)
            return -1;
        memcpy(&x, b->p, 4);
        b->p += 4;
        *v = x;
        return 1;
    }
    default: /* groups (3, 4) and reserved types */
        return -1;
    }
}

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

#define WIRE(want)                                                                                 \
    do {                                                                                           \
        if (wt != (want))                                                                          \
            ERR(ZP_ERR_FORMAT, "%s: %s field %u has wire type %u (expected %u): not a "            \
                               "SentencePiece model", name, msg, f, wt, (want));                   \
    } while (0)

static zp_status parse_piece(raw_model *r, pb b, const char *name, zpi_err *err)
{
    const char *msg = "SentencePiece";
    raw_piece pc = {NULL, 0, 0.0f, PT_NORMAL};
    uint32_t f, wt;
    uint64_t v = 0;
    pb sub;
    int k;
    while ((k = pb_next(&b, &f, &wt, &v, &sub)) == 1) {
        if (f == 1) {
            WIRE(2);
            if ((size_t)(sub.end - sub.p) > UINT16_MAX)
                ERR(ZP_ERR_FORMAT, "%s: piece %zu is %zu bytes long (at most %u)", name, r->n,
                    (size_t)(sub.end - sub.p), UINT16_MAX);
            pc.p = sub.p;
            pc.len = (uint32_t)(sub.end - sub.p);
        } else if (f == 2) {
            WIRE(5);
            uint32_t x = (uint32_t)v;
            memcpy(&pc.score, &x, 4);
        } else if (f == 3) {
            WIRE(0);
            pc.type = (int)v;
            if (v < PT_NORMAL || v > PT_BYTE)
                ERR(ZP_ERR_FORMAT, "%s: piece %zu has type %llu (not one of SentencePiece's "
                    "NORMAL..BYTE)", name, r->n, (unsigned long long)v);
        }
    }
    if (k < 0)
        ERR(ZP_ERR_FORMAT, "%s: piece %zu: malformed protobuf", name, r->n);
    if (!pc.p || pc.len == 0)
        ERR(ZP_ERR_FORMAT, "%s: piece %zu is empty", name, r->n);
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 1024;
        raw_piece *np = realloc(r->pc, cap * sizeof *np);
        if (!np)
            ERR(ZP_ERR_NOMEM, "%s: out of memory", name);
        r->pc = np;
        r->cap = cap;
    }
    r->pc[r->n++] = pc;
    return ZP_OK;
}

static zp_status parse_trainer(raw_model *r, pb b, const char *name, zpi_err *err)
{
    const char *msg = "trainer_spec";
    uint32_t f, wt;
    uint64_t v = 0;
    pb sub;
    int k;
    while ((k = pb_next(&b, &f, &wt, &v, &sub)) == 1) {
        switch (f) {
        case 3: WIRE(0); r->model_type = (int)v; break;
        case 35: WIRE(0); r->byte_fallback = v != 0; break;
        case 24: WIRE(0); r->ws_suffix = v != 0; break;
        case 25: WIRE(0); r->split_digits = v != 0; break;
        case 26: WIRE(0); r->allow_ws_only = v != 0; break;
        case 40: WIRE(0); r->unk_id = (int32_t)v; break;
        case 41: WIRE(0); r->bos_id = (int32_t)v; break;
        case 42: WIRE(0); r->eos_id = (int32_t)v; break;
        case 43: WIRE(0); r->pad_id = (int32_t)v; break;
        default: break; /* training-only settings */
        }
    }
    if (k < 0)
        ERR(ZP_ERR_FORMAT, "%s: trainer_spec: malformed protobuf", name);
    return ZP_OK;
}

static zp_status parse_normalizer(raw_model *r, pb b, const char *name, zpi_err *err)
{
    const char *msg = "normalizer_spec";
    uint32_t f, wt;
    uint64_t v = 0;
    pb sub;
    int k;
    r->has_normalizer = 1;
    while ((k = pb_next(&b, &f, &wt, &v, &sub)) == 1) {
        switch (f) {
        case 1:
            WIRE(2);
            r->nm_name = sub.p;
            r->nm_name_len = (size_t)(sub.end - sub.p);
            break;
        case 2:
            WIRE(2);
            r->charsmap = sub.p;
            r->charsmap_len = (size_t)(sub.end - sub.p);
            break;
        case 3: WIRE(0); r->add_dummy_prefix = v != 0; break;
        case 4: WIRE(0); r->remove_extra_ws = v != 0; break;
        case 5: WIRE(0); r->escape_ws = v != 0; break;
        default: break; /* normalization_rule_tsv: training only */
        }
    }
    if (k < 0)
        ERR(ZP_ERR_FORMAT, "%s: normalizer_spec: malformed protobuf", name);
    return ZP_OK;
}

static zp_status parse_model(raw_model *r, const uint8_t *buf, size_t len, const char *name,
                             zpi_err *err)
{
    const char *msg = "ModelProto";
    pb b = {buf, buf + len};
    uint32_t f, wt;
    uint64_t v = 0;
    pb sub;
    int k;
    while ((k = pb_next(&b, &f, &wt, &v, &sub)) == 1) {
        zp_status st = ZP_OK;
        if (f == 1) {
            WIRE(2);
            st = parse_piece(r, sub, name, err);
        } else if (f == 2) {
            WIRE(2);
            st = parse_trainer(r, sub, name, err);
        } else if (f == 3) {
            WIRE(2);
            st = parse_normalizer(r, sub, name, err);
        } /* 4 self_test_data, 5 denormalizer_spec: not used to encode */
        if (st != ZP_OK)
            return st;
    }
    if (k < 0)
        ERR(ZP_ERR_FORMAT, "%s: malformed protobuf (not a SentencePiece model)", name);
    return ZP_OK;
}

/* ------------------------------------------------------------ charsmap
 * The precompiled charsmap: a little-endian uint32 n, then n bytes of
 * Darts-clone double-array units (uint32 each), then the replacement pool:
 * NUL-terminated strings, a leaf's value being an offset into it.
 * Unit fields: has_leaf bit 8; value bits 0..30; label bits 0..7 and 31;
 * offset (u >> 10) << ((u & (1 << 9)) >> 6). */

static inline uint32_t cm_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
static inline uint32_t cm_label(uint32_t u) { return u & ((1u << 31) | 0xFF); }

/* Longest charsmap key that prefixes s[0..n), considering the first 32
 * matches as SentencePiece does. Returns its length (0: none); *repl gets
 * the replacement. */
static inline size_t cm_match(const struct zpi_spm *m, const uint8_t *s, size_t n,
                              const char **repl)
{
    const uint32_t *a = m->cm_units;
    uint32_t id = cm_offset(a[0]);
    size_t best = 0, found = 0;
    uint32_t bestv = 0;
    for (size_t i = 0; i < n; i++) {
        id ^= s[i];
        if (id >= m->cm_n)
            break;
        uint32_t u = a[id];
        if (cm_label(u) != s[i])
            break;
        id ^= cm_offset(u);
        if ((u >> 8) & 1) {
            if (id >= m->cm_n)
                break;
            if (found < 32) {
                best = i + 1;
                bestv = a[id] & 0x7FFFFFFFu;
            }
            found++;
        }
    }
    if (best == 0)
        return 0;
    if (bestv >= m->cm_pool_len)
        return 0; /* SentencePiece: then the character as it is */
    *repl = m->cm_pool + bestv;
    return best;
}

/* For zpi_spm_max_ids(): the most escaped replacement bytes (a space
 * counts 3) per key byte, bounded per first byte of the keys: the largest
 * replacement under it over its shortest key. Each node of the trie (a
 * DAWG: subtrees are shared) is visited once; a trie with a cycle or too
 * deep is refused. memo[id]: the node's (max bytes, min depth), 0: not yet,
 * UINT64_MAX: being visited. */
static int cm_subtree(const struct zpi_spm *m, uint64_t *memo, uint32_t id, int depth,
                      uint32_t *max_esc, uint32_t *min_depth)
{
    if (depth > 256 || memo[id] == UINT64_MAX)
        return -1;
    if (memo[id] != 0) {
        *max_esc = (uint32_t)(memo[id] >> 32);
        *min_depth = (uint32_t)memo[id];
        return 0;
    }
    memo[id] = UINT64_MAX;
    uint32_t mx = 0, mn = UINT32_MAX;
    for (unsigned c = 1; c < 256; c++) {
        uint32_t id2 = id ^ c;
        if (id2 >= m->cm_n || cm_label(m->cm_units[id2]) != c)
            continue;
        uint32_t u = m->cm_units[id2], nid = id2 ^ cm_offset(u);
        if (nid >= m->cm_n)
            continue;
        if ((u >> 8) & 1) {
            uint32_t v = m->cm_units[nid] & 0x7FFFFFFFu, esc = 0;
            if (v < m->cm_pool_len)
                for (const char *q = m->cm_pool + v; *q; q++)
                    esc += *q == ' ' ? 3 : 1;
            if (esc > mx)
                mx = esc;
            mn = 1;
        }
        uint32_t cx, cn;
        if (cm_subtree(m, memo, nid, depth + 1, &cx, &cn) != 0)
            return -1;
        if (cx > mx)
            mx = cx;
        if (cn != UINT32_MAX && cn + 1 < mn)
            mn = cn + 1;
    }
    memo[id] = ((uint64_t)mx << 32) | mn;
    *max_esc = mx;
    *min_depth = mn;
    return 0;
}

static zp_status cm_growth(struct zpi_spm *m, const char *name, zpi_err *err)
{
    uint64_t *memo = calloc(m->cm_n, sizeof *memo);
    if (!memo)
        ERR(ZP_ERR_NOMEM, "%s: out of memory", name);
    uint32_t root = cm_offset(m->cm_units[0]);
    if (root >= m->cm_n) {
        free(memo);
        ERR(ZP_ERR_FORMAT, "%s: normalizer_spec: precompiled_charsmap is invalid", name);
    }
    for (unsigned c = 1; c < 256; c++) {
        uint32_t id2 = root ^ c;
        if (id2 >= m->cm_n || cm_label(m->cm_units[id2]) != c)
            continue;
        uint32_t u = m->cm_units[id2], nid = id2 ^ cm_offset(u);
        if (nid >= m->cm_n)
            continue;
        uint32_t mx = 0, mn = UINT32_MAX, cx, cn;
        if ((u >> 8) & 1) {
            uint32_t v = m->cm_units[nid] & 0x7FFFFFFFu;
            if (v < m->cm_pool_len)
                for (const char *q = m->cm_pool + v; *q; q++)
                    mx += *q == ' ' ? 3 : 1;
            mn = 1;
        }
        if (cm_subtree(m, memo, nid, 1, &cx, &cn) != 0) {
            free(memo);
            ERR(ZP_ERR_FORMAT, "%s: normalizer_spec: precompiled_charsmap is invalid (its trie "
                "loops or is deeper than 256)", name);
        }
        if (cx > mx)
            mx = cx;
        if (cn != UINT32_MAX && cn + 1 < mn)
            mn = cn + 1;
        if (mn != UINT32_MAX && (size_t)mx * m->grow_den > m->grow_num * mn) {
            m->grow_num = mx;
            m->grow_den = mn;
        }
    }
    free(memo);
    return ZP_OK;
}

/* Check every leaf value of the charsmap points into the pool (walking all
 * units: a leaf unit's value is read only through its parent). */
static zp_status cm_load(struct zpi_spm *m, const uint8_t *cm, size_t len, const char *name,
                         zpi_err *err)
{
    if (len == 0)
        return ZP_OK;
    uint32_t tsize;
    if (len <= 4)
        ERR(ZP_ERR_FORMAT, "%s: normalizer_spec: precompiled_charsmap of %zu bytes is broken",
            name, len);
    memcpy(&tsize, cm, 4);
    if ((size_t)tsize >= len - 4 || tsize < 1024 || tsize % 1024 != 0)
        ERR(ZP_ERR_FORMAT, "%s: normalizer_spec: precompiled_charsmap is broken (trie of %u "
            "bytes in %zu)", name, tsize, len);
    m->cm_copy = malloc(len);
    if (!m->cm_copy)
        ERR(ZP_ERR_NOMEM, "%s: out of memory", name);
    memcpy(m->cm_copy, cm, len);
    m->cm_units = (const uint32_t *)(const void *)(m->cm_copy + 4);
    m->cm_n = tsize / 4;
    m->cm_pool = (const char *)m->cm_copy + 4 + tsize;
    m->cm_pool_len = (uint32_t)(len - 4 - tsize);
    if (m->cm_pool_len == 0 || m->cm_pool[m->cm_pool_len - 1] != '\0')
        ERR(ZP_ERR_FORMAT, "%s: normalizer_spec: precompiled_charsmap's strings are not "
            "terminated", name);
    size_t cur = 0;
    for (uint32_t i = 0; i < m->cm_pool_len; i++) {
        if (m->cm_pool[i] == '\0') {
            if (cur > m->max_repl)
                m->max_repl = cur;
            cur = 0;
        } else {
            cur++;
        }
    }
    zp_status st = cm_growth(m, name, err);
    if (st != ZP_OK)
        return st;
    uint32_t root = cm_offset(m->cm_units[0]);
    for (unsigned c = 0; c < 256; c++) {
        uint32_t id = root ^ c;
        m->cm_first[c] = id < m->cm_n && cm_label(m->cm_units[id]) == c;
    }
    for (unsigned c = 1; c < 128; c++) {
        if (!m->cm_first[c])
            continue;
        uint32_t id = root ^ c, u = m->cm_units[id], nid = id ^ cm_offset(u);
        int plain = !((u >> 8) & 1);
        for (unsigned d = 0; plain && d < 128; d++) {
            uint32_t id2 = nid ^ d;
            if (id2 < m->cm_n && cm_label(m->cm_units[id2]) == d)
                plain = 0;
        }
        m->cm_plain[c] = (uint8_t)plain;
    }
    return ZP_OK;
}

/* ------------------------------------------------------------ loading */

static int has_inner_boundary(const uint8_t *p, size_t n, int suffix)
{
    /* prefix mode: a U+2581 after another character; suffix mode: a U+2581
     * before another character */
    for (size_t i = 0; i + 3 <= n; i++) {
        if (memcmp(p + i, SPACE_SYM, 3) != 0)
            continue;
        if (!suffix) {
            if (i > 0 && !(i >= 3 && memcmp(p + i - 3, SPACE_SYM, 3) == 0))
                return 1;
        } else {
            if (i + 3 < n && !(i + 6 <= n && memcmp(p + i + 3, SPACE_SYM, 3) == 0))
                return 1;
        }
    }
    return 0;
}

static int byte_piece_value(const uint8_t *p, size_t n)
{
    /* "<0xXX>" with upper-case hex digits, as SentencePiece writes them */
    if (n != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        int c = p[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* The bytes zp_decode gives for a piece: U+2581 as a space, a byte piece
 * as its byte, control pieces as nothing, the unknown piece as " \u2047 "
 * (SentencePiece's default unk_surface). */
static zp_status add_span(zp_tokenizer *t, uint32_t id, const raw_piece *pc, zpi_err *err)
{
    uint8_t tmp[8];
    const uint8_t *src = pc->p;
    size_t n = pc->len;
    if (pc->type == PT_CONTROL) {
        n = 0;
    } else if (pc->type == PT_UNKNOWN) {
        src = (const uint8_t *)" \xE2\x81\x87 ";
        n = 5;
    } else if (pc->type == PT_BYTE) {
        tmp[0] = (uint8_t)byte_piece_value(pc->p, pc->len);
        src = tmp;
        n = 1;
    }
    if (t->blob_len + n > t->blob_cap) {
        size_t cap = t->blob_cap * 2 + n + 64;
        uint8_t *nb = realloc(t->blob, cap);
        if (!nb)
            ERR(ZP_ERR_NOMEM, "out of memory for token bytes");
        t->blob = nb;
        t->blob_cap = cap;
    }
    size_t o = t->blob_len;
    for (size_t i = 0; i < n;) {
        if (pc->type != PT_BYTE && i + 3 <= n && memcmp(src + i, SPACE_SYM, 3) == 0) {
            t->blob[o++] = ' ';
            i += 3;
        } else {
            t->blob[o++] = src[i++];
        }
    }
    t->span[id].off = (uint32_t)t->blob_len;
    t->span[id].len = (uint32_t)(o - t->blob_len);
    t->blob_len = o;
    return ZP_OK;
}

/* The model's settings from r (its types checked) and the charsmap: a new
 * t->spm. */
static zp_status model_settings(zp_tokenizer *t, const raw_model *r, const char *name,
                                zpi_err *err)
{
    if (r->model_type == MT_WORD || r->model_type == MT_CHAR)
        ERR(ZP_ERR_UNSUPPORTED, "%s: trainer_spec.model_type %s is not supported (only BPE and "
            "UNIGRAM SentencePiece models)", name, r->model_type == MT_WORD ? "WORD" : "CHAR");
    if (r->model_type != MT_UNIGRAM && r->model_type != MT_BPE)
        ERR(ZP_ERR_UNSUPPORTED, "%s: trainer_spec.model_type %d is not supported (only BPE and "
            "UNIGRAM SentencePiece models)", name, r->model_type);
    if (r->n == 0)
        ERR(ZP_ERR_FORMAT, "%s: no pieces (not a SentencePiece model)", name);
    if (r->n >= ZPI_TOK_MAX_IDS || r->n > INT32_MAX / 2)
        ERR(ZP_ERR_FORMAT, "%s: %zu pieces (at most %u supported)", name, r->n,
            ZPI_TOK_MAX_IDS - 1);
    if (r->charsmap_len > UINT32_MAX / 2)
        ERR(ZP_ERR_FORMAT, "%s: precompiled_charsmap too large", name);
    struct zpi_spm *m = calloc(1, sizeof *m);
    if (!m)
        ERR(ZP_ERR_NOMEM, "%s: out of memory", name);
    t->spm = m;
    m->model_type = r->model_type;
    m->byte_fallback = r->byte_fallback;
    m->ws_suffix = r->ws_suffix;
    m->add_dummy_prefix = r->add_dummy_prefix;
    m->remove_extra_ws = r->remove_extra_ws;
    m->escape_ws = r->escape_ws;
    m->n_pieces = (uint32_t)r->n;
    m->grow_num = 3;
    m->grow_den = 1;
    size_t nl = r->nm_name_len < sizeof m->name - 1 ? r->nm_name_len : sizeof m->name - 1;
    memcpy(m->name, r->nm_name ? (const char *)r->nm_name : "", nl);
    m->name[nl] = '\0';
    /* trainer_spec ids: -1 disables; SentencePiece checks them against the
     * pieces' types when it trains; an id out of range means none here */
    m->bos_id = r->bos_id >= 0 && (uint64_t)r->bos_id < r->n ? (int32_t)r->bos_id : -1;
    m->eos_id = r->eos_id >= 0 && (uint64_t)r->eos_id < r->n ? (int32_t)r->eos_id : -1;
    m->pad_id = r->pad_id >= 0 && (uint64_t)r->pad_id < r->n ? (int32_t)r->pad_id : -1;
    zp_status st = cm_load(m, r->charsmap, r->charsmap_len, name, err);
    if (st != ZP_OK)
        return st;
    for (unsigned c = 0; c < 128; c++)
        m->ascii_copy[c] = c == ' ' ? 0
                           : !(m->cm_units && m->cm_first[c]) ? 1
                           : m->cm_plain[c] ? 2 : 0;
    return ZP_OK;
}

/* Why SentencePiece refuses the piece, or NULL. */
static const char *piece_problem(const raw_piece *pc)
{
    if (pc->score != pc->score || pc->score > FLT_MAX || pc->score < -FLT_MAX)
        return "has a score that is NaN or infinite";
    if (pc->len >= 8000)
        return "is 8000 bytes or longer";
    if (memchr(pc->p, 0, pc->len) && !(pc->len == 1 && pc->type == PT_UNUSED))
        return "holds a NUL byte";
    return NULL;
}

/* The largest |score| of a Unigram lattice node (uni_usable). */
static double unigram_smax(const struct zpi_spm *m, const raw_model *r)
{
    double mx = fabs((double)m->unk_score);
    for (size_t i = 0; i < r->n; i++) {
        const raw_piece *pc = &r->pc[i];
        double a = pc->type == PT_NORMAL ? fabs((double)pc->score)
                   : pc->type == PT_USER ? fabs(0.1 * ((double)pc->len - 1)) : 0.0;
        if (a > mx)
            mx = a;
    }
    return mx;
}

/* The piece tries from the keys pk (NORMAL, USER_DEFINED, UNUSED) and rk
 * (the others); a piece defined twice is refused. */
static zp_status build_tries(struct zpi_spm *m, const raw_model *r, da_key *pk, size_t npk,
                             da_key *rk, size_t nrk, const char *name, zpi_err *err)
{
    /* duplicates: SentencePiece refuses a piece twice in the same map */
    int rc = da_build(&m->pieces, pk, npk);
    if (rc == 0)
        rc = da_build(&m->reserved, rk, nrk);
    if (rc != 0) {
        ERR(ZP_ERR_NOMEM, "%s: out of memory for the piece trie", name);
    }
    for (int pass = 0; pass < 2; pass++) {
        da_key *k = pass ? rk : pk;
        size_t n = pass ? nrk : npk;
        for (size_t i = 1; i < n; i++) {
            if (k[i].len == k[i - 1].len && memcmp(k[i].p, k[i - 1].p, k[i].len) == 0) {
                int a = k[i - 1].id, b = k[i].id;
                ERR(ZP_ERR_FORMAT, "%s: piece '%.*s' is defined twice (ids %d and %d)", name,
                    (int)r->pc[b].len, (const char *)r->pc[b].p, a < b ? a : b, a < b ? b : a);
            }
        }
    }
    /* a string both in pieces and reserved: SentencePiece looks the reserved
     * one up first; refused here rather than handled */
    for (size_t i = 0; i < nrk; i++) {
        int32_t nd = da_walk(&m->pieces, 0, rk[i].p, rk[i].len);
        if (nd >= 0 && m->pieces.u[nd].val >= 0) {
            int32_t a = m->pieces.u[nd].val;
            ERR(ZP_ERR_UNSUPPORTED, "%s: piece '%.*s' is defined twice with different types "
                "(ids %d and %d): not supported", name, (int)rk[i].len, (const char *)rk[i].p,
                a, rk[i].id);
        }
    }
    return ZP_OK;
}

/* The tokenizer's id table (zp_decode). */
static zp_status build_spans(zp_tokenizer *t, const raw_model *r, const char *name, zpi_err *err)
{
    t->n_ids = (uint32_t)r->n;
    t->span = malloc(r->n * sizeof *t->span);
    t->blob_cap = r->n * 8 + 64;
    t->blob = malloc(t->blob_cap);
    if (!t->span || !t->blob)
        ERR(ZP_ERR_NOMEM, "%s: out of memory", name);
    for (size_t i = 0; i < r->n; i++) {
        zp_status st = add_span(t, (uint32_t)i, &r->pc[i], err);
        if (st != ZP_OK)
            return st;
    }
    return ZP_OK;
}

static zp_status build_model(zp_tokenizer *t, raw_model *r, const char *name, zpi_err *err)
{
    zp_status st = model_settings(t, r, name, err);
    if (st != ZP_OK)
        return st;
    struct zpi_spm *m = t->spm;
    m->score = malloc(r->n * sizeof *m->score);
    m->type = malloc(r->n);
    da_key *pk = malloc(r->n * sizeof *pk);
    da_key *rk = malloc(r->n * sizeof *rk);
    if (!m->score || !m->type || !pk || !rk) {
        free(pk);
        free(rk);
        ERR(ZP_ERR_NOMEM, "%s: out of memory", name);
    }
    size_t npk = 0, nrk = 0;
    int unk = -1, nbytes = 0;
    int byte_seen[256] = {0};
    m->min_score = FLT_MAX; /* stays so without NORMAL pieces, as SentencePiece */
    int cross = 0;
    for (size_t i = 0; i < r->n; i++) {
        const raw_piece *pc = &r->pc[i];
        m->score[i] = pc->score;
        m->type[i] = (uint8_t)pc->type;
        int normal = pc->type == PT_NORMAL || pc->type == PT_USER || pc->type == PT_UNUSED;
        da_key key = {pc->p, pc->len, (int32_t)i, key_prefix(pc->p, pc->len)};
        const char *bad = piece_problem(pc);
        if (bad) {
            free(pk);
            free(rk);
            ERR(ZP_ERR_FORMAT, "%s: piece %zu %s (SentencePiece refuses it)", name, i, bad);
        }
        if (pc->len == 1 && pc->p[0] == 0)
            continue; /* an UNUSED "\0" piece: SentencePiece skips it */
        if (normal) {
            pk[npk++] = key;
            cross |= has_inner_boundary(pc->p, pc->len, r->ws_suffix);
        } else {
            rk[nrk++] = key;
        }
        if (pc->type == PT_NORMAL && pc->score < m->min_score)
            m->min_score = pc->score;
        if (pc->type == PT_USER)
            m->has_user = 1;
        if (pc->type == PT_UNUSED)
            m->has_unused = 1;
        if (pc->type == PT_UNKNOWN) {
            if (unk >= 0) {
                free(pk);
                free(rk);
                ERR(ZP_ERR_FORMAT, "%s: pieces %d and %zu are both of type UNKNOWN", name, unk,
                    i);
            }
            unk = (int)i;
        }
        if (pc->type == PT_BYTE) {
            int b = byte_piece_value(pc->p, pc->len);
            if (!r->byte_fallback || b < 0) {
                free(pk);
                free(rk);
                ERR(ZP_ERR_FORMAT, "%s: byte piece '%.*s' (%zu) %s", name, (int)pc->len,
                    (const char *)pc->p, i,
                    b < 0 ? "is invalid" : "is found although byte_fallback is false");
            }
            if (!byte_seen[b]) {
                byte_seen[b] = 1;
                nbytes++;
                m->byte_id[b] = (int32_t)i;
            }
        }
    }
    m->unk_score = m->min_score - 10.0f;
    m->smax = unigram_smax(m, r);
    if (unk < 0 && !r->byte_fallback) {
        free(pk);
        free(rk);
        ERR(ZP_ERR_FORMAT, "%s: no piece of type UNKNOWN (and byte_fallback is false)", name);
    }
    if (r->byte_fallback && nbytes != 256) {
        free(pk);
        free(rk);
        ERR(ZP_ERR_FORMAT, "%s: byte_fallback is true but there are %d byte pieces, not 256",
            name, nbytes);
    }
    m->unk_id = unk;
    st = build_tries(m, r, pk, npk, rk, nrk, name, err);
    free(pk);
    free(rk);
    if (st != ZP_OK)
        return st;
    m->seg_mode = cross ? 0 : (m->ws_suffix ? 2 : 1);
    if (!m->escape_ws)
        m->seg_mode = 0; /* spaces stay spaces: no U+2581 boundaries */
    if (m->model_type == MT_BPE && m->has_unused)
        m->seg_mode = 0; /* UNUSED resegmentation depends on the whole text */

    st = build_spans(t, r, name, err);
    if (st != ZP_OK)
        return st;
    t->eot = m->eos_id;
    t->bos = m->bos_id;
    return ZP_OK;
}

zp_status zpi_spm_load_buffer(zp_tokenizer *t, const uint8_t *buf, size_t len, const char *name,
                              zpi_err *err)
{
    raw_model r;
    memset(&r, 0, sizeof r);
    r.model_type = MT_UNIGRAM; /* protobuf defaults */
    r.unk_id = 0;
    r.bos_id = 1;
    r.eos_id = 2;
    r.pad_id = -1;
    r.add_dummy_prefix = r.remove_extra_ws = r.escape_ws = 1;
    zp_status st = parse_model(&r, buf, len, name, err);
    if (st == ZP_OK)
        st = build_model(t, &r, name, err);
    free(r.pc);
    return st;
}

zp_status zpi_spm_load_file(zp_tokenizer *t, const char *path, zpi_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        ERR(ZP_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        ERR(ZP_ERR_IO, "'%s' is not a regular file", path);
    }
    size_t len = (size_t)sb.st_size;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) {
        fclose(f);
        ERR(ZP_ERR_NOMEM, "out of memory reading '%s'", path);
    }
    size_t got = fread(buf, 1, len, f);
    int rerr = ferror(f) ? errno : 0;
    fclose(f);
    if (got != len) {
        free(buf);
        ERR(ZP_ERR_IO, "cannot read '%s': %s", path, rerr ? strerror(rerr) : "short read");
    }
    zp_status st = zpi_spm_load_buffer(t, buf, len, path, err);
    free(buf);
    return st;
}

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

static int grow(void **p, size_t *cap, size_t need, size_t elem)
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

zpi_spm_enc *zpi_spm_enc_create(const zp_tokenizer *t)
{
    zpi_spm_enc *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->tok = t;
    e->m = t->spm;
    if (e->m->has_unused) {
        e->rev = calloc(e->m->n_pieces, sizeof *e->rev);
        e->rev_gen = calloc(e->m->n_pieces, sizeof *e->rev_gen);
        if (!e->rev || !e->rev_gen) {
            zpi_spm_enc_destroy(e);
            return NULL;
        }
    }
    size_t nsets = 0;
    if (e->m->seg_mode != 0 && t->cfg.cache_entries >= CACHE_WAYS &&
        t->cfg.cache_max_piece_bytes >= 2) {
        /* twice cache_entries slots of 64 bytes (2 MiB at the default): most
         * segments are short words; a segment whose key and ids do not fit
         * a slot is encoded each time */
        nsets = 1;
        while (nsets * CACHE_WAYS <= t->cfg.cache_entries)
            nsets *= 2;
    }
    if (nsets) {
        e->ctag = calloc(nsets * CACHE_WAYS, sizeof *e->ctag);
        e->cslot = aligned_alloc(64, nsets * CACHE_WAYS * sizeof *e->cslot);
        if (!e->ctag || !e->cslot) {
            zpi_spm_enc_destroy(e);
            return NULL;
        }
        e->cset_mask = (uint32_t)(nsets - 1);
        size_t mx = t->cfg.cache_max_piece_bytes;
        e->cache_max = mx > 64 ? 64 : mx;
    }
    return e;
}

void zpi_spm_enc_destroy(zpi_spm_enc *e)
{
    if (!e)
        return;
    free(e->norm);
    free(e->best);
    free(e->from);
    free(e->bid);
    free(e->path);
    free(e->dbest);
    free(e->dgap);
    free(e->nchar);
    free(e->pid);
    free(e->plen);
    free(e->sym);
    free(e->heap);
    free(e->rev);
    free(e->rev_gen);
    free(e->seg);
    free(e->ctag);
    free(e->cslot);
    free(e->cut);
    free(e);
}

size_t zpi_spm_enc_memory(const zpi_spm_enc *e)
{
    if (!e)
        return 0;
    size_t slots = e->ctag ? ((size_t)e->cset_mask + 1) * CACHE_WAYS : 0;
    return sizeof *e + e->norm_cap + e->vit_cap * 36 + e->pcap * 8 + e->sym_cap * sizeof(bpe_sym) +
           e->heap_cap * sizeof(bpe_pair) + e->seg_cap * 4 +
           slots * (sizeof(uint32_t) + sizeof(cache_slot)) +
           (e->rev ? (size_t)e->m->n_pieces * 8 : 0);
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

/* out: growable buffer; appends are checked by the callers' reservation. */
typedef struct nbuf {
    uint8_t *p;
    size_t n;
} nbuf;

static inline void put_piece(const struct zpi_spm *m, nbuf *o, const uint8_t *sp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (sp[i] == ' ' && m->escape_ws) {
            memcpy(o->p + o->n, SPACE_SYM, 3);
            o->n += 3;
        } else {
            o->p[o->n++] = sp[i];
        }
    }
}

/* One normalization step at s[0..n) (n >= 1): *sp and *spn get the output
 * string, the return value the bytes consumed. */
static inline size_t norm_prefix(const struct zpi_spm *m, const uint8_t *s, size_t n,
                                 const uint8_t **sp, size_t *spn)
{
    if (m->has_user) {
        size_t l = user_match(m, s, n);
        if (l) {
            *sp = s;
            *spn = l;
            return l;
        }
    }
    if (m->cm_units && m->cm_first[s[0]]) {
        const char *repl;
        size_t l = cm_match(m, s, n, &repl);
        if (l) {
            *sp = (const uint8_t *)repl;
            *spn = strlen(repl);
            return l;
        }
    }
    uint32_t cp;
    size_t l = s[0] < 0x80 ? 1 : zpi_utf8_decode(s, n, &cp);
    if (l == 0) {
        *sp = REPL_CHAR;
        *spn = 3;
        return 1;
    }
    *sp = s;
    *spn = l;
    return l;
}

/* Bytes the normalized form of len input bytes can take at most: every
 * step consumes k >= 1 bytes and writes at most k * grow_num / grow_den
 * (a charsmap key), 3k (a character whose spaces are escaped, a
 * user-defined piece) or 3 (an invalid byte); plus the dummy prefix. An id
 * covers at least one normalized byte (a byte-fallback id exactly one). */
size_t zpi_spm_max_ids(const struct zpi_spm *m, size_t len)
{
    if (!m)
        return len;
    size_t g = m->grow_num > 3 * m->grow_den ? m->grow_num : 3 * m->grow_den;
    return 3 + (len / m->grow_den) * g + ((len % m->grow_den) * g + m->grow_den - 1) / m->grow_den;
}

/* Normalize text[0..len) into e->norm; returns its length or (size_t)-1
 * (out of memory). */
static size_t normalize(zpi_spm_enc *e, const uint8_t *s, size_t len)
{
    const struct zpi_spm *m = e->m;
    /* the output grows as needed: check room before each step */
    size_t step_max = 3 * (m->max_repl > 4 ? m->max_repl : 4) + 8;
    size_t want = len + len / 2 + step_max + 8;
    if (grow((void **)&e->norm, &e->norm_cap, want, 1) != 0)
        return (size_t)-1;
    nbuf o = {e->norm, 0};
    size_t i = 0;
    if (m->remove_extra_ws) {
        while (i < len) {
            const uint8_t *sp;
            size_t spn, c = norm_prefix(m, s + i, len - i, &sp, &spn);
            if (!(spn == 1 && sp[0] == ' '))
                break;
            i += c;
        }
    }
    if (i == len)
        return 0;
    if (!m->ws_suffix && m->add_dummy_prefix)
        put_piece(m, &o, (const uint8_t *)" ", 1);
    int prev_space = m->remove_extra_ws;
    while (i < len) {
        if (o.n + step_max > e->norm_cap) {
            e->norm = o.p;
            if (grow((void **)&e->norm, &e->norm_cap, o.n + step_max + (len - i) + 64, 1) != 0)
                return (size_t)-1;
            o.p = e->norm;
        }
        const uint8_t *sp;
        size_t spn;
        uint8_t c0 = s[i];
        size_t c;
        if (c0 < 0x80 && !m->has_user &&
            (!(m->cm_units && m->cm_first[c0]) ||
             (m->cm_plain[c0] && (i + 1 == len || s[i + 1] < 0x80)))) {
            /* fast path: an ASCII byte no rule starts with */
            if (c0 == ' ') {
                if (!prev_space) {
                    put_piece(m, &o, &c0, 1);
                    prev_space = 1;
                }
                i++;
            } else {
                /* and the run of such bytes (other than spaces) after it,
                 * copied as they are, within the room checked above */
                size_t j = i + 1, lim = e->norm_cap - o.n - step_max + i + 1;
                if (lim > len)
                    lim = len;
                const uint8_t *cp = m->ascii_copy;
                while (j < lim && s[j] < 0x80 &&
                       (cp[s[j]] == 1 || (cp[s[j]] == 2 && (j + 1 == len || s[j + 1] < 0x80))))
                    j++;
                memcpy(o.p + o.n, s + i, j - i);
                o.n += j - i;
                i = j;
                prev_space = 0;
            }
            if (!m->remove_extra_ws)
                prev_space = 0;
            continue;
        }
        c = norm_prefix(m, s + i, len - i, &sp, &spn);
        while (prev_space && spn > 0 && sp[0] == ' ') {
            sp++;
            spn--;
        }
        if (spn > 0) {
            put_piece(m, &o, sp, spn);
            prev_space = sp[spn - 1] == ' ';
        }
        i += c;
        if (!m->remove_extra_ws)
            prev_space = 0;
    }
    if (m->remove_extra_ws) {
        if (m->escape_ws) {
            while (o.n >= 3 && memcmp(o.p + o.n - 3, SPACE_SYM, 3) == 0)
                o.n -= 3;
        } else {
            while (o.n >= 1 && o.p[o.n - 1] == ' ')
                o.n--;
        }
    }
    if (m->ws_suffix && m->add_dummy_prefix) {
        if (o.n + 3 > e->norm_cap) {
            e->norm = o.p;
            if (grow((void **)&e->norm, &e->norm_cap, o.n + 3, 1) != 0)
                return (size_t)-1;
            o.p = e->norm;
        }
        put_piece(m, &o, (const uint8_t *)" ", 1);
    }
    e->norm = o.p;
    return o.n;
}

const char *zpi_spm_normalize(zpi_spm_enc *e, const char *text, size_t len, size_t *out_len)
{
    size_t n = normalize(e, (const uint8_t *)text, len);
    if (n == (size_t)-1)
        return NULL;
    *out_len = n;
    return (const char *)e->norm;
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
static size_t unigram(zpi_spm_enc *e, const uint8_t *s, size_t n, int32_t *out)
{
    float h = 0.0f;
    size_t np = uni_float(e, s, n, &h);
    if (np == (size_t)-1)
        return (size_t)-1;
    return uni_emit(e, s, np, out);
}

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
 * the same merges as bpe() (highest score, leftmost on ties) on small
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
static size_t bpe(zpi_spm_enc *e, const uint8_t *s, size_t n, int32_t *out)
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
static size_t uni_segment(zpi_spm_enc *e, const uint8_t *s, size_t n, uint64_t hh,
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

/* ------------------------------------------------------------ encode */

typedef struct emitter {
    int32_t *ids;
    size_t cap, n; /* n may pass cap: then only counted */
    int prev_unk;
} emitter;

/* Emit a segment's ids: without byte_fallback a run of unknown pieces is
 * one unknown id (SentencePiece merges them), also across segments. */
static inline void emit_ids(const struct zpi_spm *m, emitter *o, const int32_t *ids, size_t k)
{
    for (size_t i = 0; i < k; i++) {
        int32_t id = ids[i];
        if (id == m->unk_id) {
            if (o->prev_unk)
                continue;
            o->prev_unk = !m->byte_fallback;
        } else {
            o->prev_unk = 0;
        }
        if (o->n < o->cap)
            o->ids[o->n] = id;
        o->n++;
    }
}

/* Encode the normalized segment s[0..n) (n >= 1; h: its hash when the
 * cache is on and n <= cache_max) and emit its ids.
 * Returns 0 or -1 (out of memory). */
static int encode_segment(zpi_spm_enc *e, const uint8_t *s, size_t n, uint64_t h, emitter *o)
{
    const struct zpi_spm *m = e->m;
    if (grow((void **)&e->seg, &e->seg_cap, n + 1, sizeof *e->seg) != 0)
        return -1;
    size_t k;
    if (m->model_type == MT_UNIGRAM) {
        k = m->seg_mode == 0 ? unigram(e, s, n, e->seg) : uni_segment(e, s, n, h, e->seg);
    } else if (e->ctag && n <= e->cache_max) {
        const cache_slot *c = cache_get(e, s, n, h);
        if (c) {
            k = c->nids;
            memcpy(e->seg, c->data + align4(n), k * sizeof(int32_t));
        } else {
            k = bpe(e, s, n, e->seg);
            if (k != (size_t)-1)
                cache_put(e, s, n, h, e->seg, k, NULL, 0.0f, 0);
        }
    } else {
        k = bpe(e, s, n, e->seg);
    }
    if (k == (size_t)-1)
        return -1;
    emit_ids(m, o, e->seg, k);
    return 0;
}

#define PREFETCH_AHEAD 4

/* The hash of segment s[a..b) when cached, its cache set prefetched. */
static inline uint64_t seg_hash_prefetch(const zpi_spm_enc *e, const uint8_t *s, size_t a,
                                         size_t b)
{
    if (!e->ctag || b - a > e->cache_max)
        return 0;
    uint64_t h = zpi_tok_hash(s + a, b - a);
    size_t set = cache_set(e, h);
    __builtin_prefetch(&e->ctag[set]);
    __builtin_prefetch(&e->cslot[set]);
    __builtin_prefetch(&e->cslot[set + 1]);
    __builtin_prefetch(&e->cslot[set + 2]);
    __builtin_prefetch(&e->cslot[set + 3]);
    return h;
}

static inline int is_space_sym(const uint8_t *s, size_t n, size_t i)
{
    return i + 3 <= n && s[i] == 0xE2 && s[i + 1] == 0x96 && s[i + 2] == 0x81;
}

zp_status zpi_spm_encode(zpi_spm_enc *e, const char *text, size_t len, int32_t *ids, size_t cap,
                         size_t *n_ids)
{
    *n_ids = 0;
    const struct zpi_spm *m = e->m;
    size_t n = normalize(e, (const uint8_t *)text, len);
    if (n == (size_t)-1)
        return ZP_ERR_NOMEM;
    emitter o = {ids, cap, 0, 0};
    const uint8_t *s = e->norm;
    e->uh = 0.0f;
    /* one segment when pieces may cross U+2581 boundaries */
    if (n > 0 && m->seg_mode == 0) {
        if (encode_segment(e, s, n, 0, &o) != 0)
            return ZP_ERR_NOMEM;
    } else if (n > 0) {
        /* the segments' ends first, then the segments, the cache sets of
         * the one PREFETCH_AHEAD further fetched meanwhile */
        size_t nc = 0, start = 0, i = 0;
        while (i < n) {
            const uint8_t *q = memchr(s + i, 0xE2, n - i);
            if (!q)
                break;
            i = (size_t)(q - s);
            if (!is_space_sym(s, n, i)) {
                i++;
                continue;
            }
            size_t cut;
            if (m->seg_mode == 1) {
                /* before a U+2581 that follows another character */
                cut = i > 0 && !(i >= 3 && is_space_sym(s, n, i - 3)) ? i : 0;
            } else {
                /* after a U+2581 that another character follows */
                cut = i + 3 < n && !is_space_sym(s, n, i + 3) ? i + 3 : 0;
            }
            if (cut > start) {
                if (nc == e->cut_cap &&
                    grow((void **)&e->cut, &e->cut_cap, nc + 2, sizeof *e->cut) != 0)
                    return ZP_ERR_NOMEM;
                e->cut[nc++] = cut;
                start = cut;
            }
            i += 3;
        }
        if (grow((void **)&e->cut, &e->cut_cap, nc + 2, sizeof *e->cut) != 0)
            return ZP_ERR_NOMEM;
        e->cut[nc++] = n;
        const size_t *cut = e->cut;
        uint64_t hq[PREFETCH_AHEAD + 1];
        for (size_t j = 0; j < nc && j < PREFETCH_AHEAD; j++)
            hq[j] = seg_hash_prefetch(e, s, j ? cut[j - 1] : 0, cut[j]);
        start = 0;
        for (size_t j = 0; j < nc; j++) {
            if (j + PREFETCH_AHEAD < nc)
                hq[(j + PREFETCH_AHEAD) % (PREFETCH_AHEAD + 1)] = seg_hash_prefetch(
                    e, s, cut[j + PREFETCH_AHEAD - 1], cut[j + PREFETCH_AHEAD]);
            uint64_t h = hq[j % (PREFETCH_AHEAD + 1)];
            if (encode_segment(e, s + start, cut[j] - start, h, &o) != 0)
                return ZP_ERR_NOMEM;
            start = cut[j];
        }
    }
    *n_ids = o.n;
    return o.n > cap ? ZP_ERR_LIMIT : ZP_OK;
}
