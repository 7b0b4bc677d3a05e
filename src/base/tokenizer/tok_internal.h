/*
 * tok_internal.h - the tokenizer's private data structures, shared by
 * tok_vocab.c (building the tables from a vocabulary) and tok_encode.c
 * (pre-tokenizer, BPE, cache, encoder). Not installed.
 *
 * A zp_tokenizer is built once and then only read: every table below is
 * immutable after zpi_tok_build_finish() returns, so any number of encoders
 * in any number of threads may use one tokenizer without locking.
 */
#ifndef ZP_TOKENIZER_TOK_INTERNAL_H
#define ZP_TOKENIZER_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "zephon/tokenizer.h"
#include "base/error.h"
#include "base/tokenizer/pretok.h"
#include "base/tokenizer/utf8.h"

#define ZPI_TOK_NONE UINT32_MAX
/* Ids and ranks must stay below this: a pair-map slot packs two ids and a
 * rank in 21 bits each. */
#define ZPI_TOK_ID_BITS 21
#define ZPI_TOK_MAX_IDS (1u << ZPI_TOK_ID_BITS)
#define ZPI_TOK_ID_MASK (ZPI_TOK_MAX_IDS - 1)
#define ZPI_TOK_IDENT_MAX 160 /* bytes of zp_tokenizer.ident, with its NUL */

/* Merge semantics. */
typedef enum zpi_tok_mode {
    /* tiktoken: a piece that is a whole token is that token; otherwise merge,
     * lowest rank first (leftmost on ties), the adjacent pair whose
     * concatenated bytes form the token of lowest rank. Used for "gpt2" and
     * *.tiktoken files (rank == id). */
    ZPI_TOK_TIKTOKEN = 0,
    /* Hugging Face merges.txt: merge, lowest merge line first (leftmost on
     * ties), only the pairs listed in merges.txt; no whole-piece shortcut. */
    ZPI_TOK_HF_MERGES = 1
} zpi_tok_mode;

/* bytes -> id map slot (16 bytes). head: zpi_tok_head() of the token, which
 * decides equality by itself for tokens of up to 8 bytes; longer tokens also
 * compare their bytes after the 8th at blob + off (one memory access, not
 * two through span). key: the id in its low ZPI_TOK_ID_BITS bits, above them
 * the length, ZPI_VSLOT_LONG for ZPI_VSLOT_LONG bytes and more (span has the
 * length); key >> ZPI_TOK_ID_BITS == 0: empty. */
#define ZPI_VSLOT_LONG 2047u
typedef struct zpi_vslot {
    uint64_t head;
    uint32_t off;
    uint32_t key;
} zpi_vslot;

/* id -> bytes: blob[off .. off+len). off == ZPI_TOK_NONE: no such id (a hole
 * in a rank file). */
/* 64 ranks of a packed merges list: the merged id of the block's first
 * rank, and bit j (j >= 1) set when rank j's merged id is rank j-1's + 1. */
typedef struct zpi_merge_block {
    uint64_t inc;
    uint32_t base;
    uint32_t pad;
} zpi_merge_block;

typedef struct zpi_tok_span {
    uint32_t off;
    uint32_t len;
} zpi_tok_span;

/* Which encoder zp_encode dispatches to (t->kind). */
#define ZPI_TOK_KIND_BYTE_BPE 0 /* byte-level BPE (this file, tok_encode.c) */
#define ZPI_TOK_KIND_SP_BPE 1   /* SentencePiece-style BPE of tokenizer.json (hf_json.c) */
#define ZPI_TOK_KIND_SPM 2      /* a SentencePiece .model, BPE or Unigram (spm_model.c) */

struct zpi_spm;
struct zpi_hf;

struct zp_tokenizer {
    zp_tokenizer_config cfg;
    int kind;            /* ZPI_TOK_KIND_* */
    struct zpi_spm *spm; /* kind SPM: the model (spm_model.h), owned */
    struct zpi_hf *hf;   /* a tokenizer.json (hf_json.h): its pipeline and model, owned */
    zpi_tok_mode mode;
    uint32_t n_ids;       /* vocabulary size: ids are 0 .. n_ids-1 */
    int32_t eot;          /* end-of-text id */
    /* Beginning-of-sequence id the packer puts before each document, -1 none
     * (t4). Loaders set it from the file's config; zp_tokenizer_config's bos
     * overrides it. */
    int32_t bos;
    /* Stable identity (zp_tokenizer_ident()): a built-in name, or the file's
     * kind and a content hash ("tokenizer.json:xxh64:0123456789abcdef").
     * Loaders may fill it; tok_vocab.c hashes the file(s) when they do not. */
    char ident[ZPI_TOK_IDENT_MAX];
    /* Set by a loader whose encoder matches special tokens in text when
     * cfg.match_special is 1; zp_tokenizer_create() refuses the setting
     * otherwise. */
    int match_special_ok;
    uint32_t max_token_len;
    uint32_t byte_id[256]; /* id of each single-byte token */
    /* The split pattern (pretok.h), owned; NULL: GPT-2's. */
    zpi_pretok *pretok;

    zpi_tok_span *span; /* n_ids entries, owned */
    uint8_t *blob;      /* token bytes, owned */
    size_t blob_len, blob_cap;

    /* bytes -> id: open addressing, linear probing, load <= 5/8. Only tokens
     * that BPE can produce are in it (not special tokens such as the
     * <|endoftext|> of rank files). Owned. */
    zpi_vslot *vmap;
    uint32_t vmap_mask;
    uint32_t vmap_count;

    /* (left id, right id) -> merge rank: open addressing, linear probing,
     * load <= 5/8. Slot = 1 << 63 | left << 42 | right << 21 | rank; 0 is
     * empty. Owned. */
    uint64_t *pmap;
    uint32_t pmap_mask;
    uint32_t pmap_count;
    unsigned pmap_shift; /* 64 - log2(capacity) */

    /* Which pairs the pair map may hold: a Bloom filter of two bits in one
     * 64-bit word per pair (about 8 to 16 bits per pair, so a few hundred
     * KiB where the map is megabytes), made by zpi_tok_build_finish. Most
     * pairs that BPE looks up are absent, and this answers them without
     * touching the map. NULL: not made (look in the map). Owned. */
    uint64_t *pfilter;
    uint32_t pfilter_mask; /* words - 1 */

    /* rank -> merged id, packed (zpi_tok_pack_merges), where merged ids
     * step by 0 or 1 from rank to rank within each block of 64 ranks, as in
     * every merges list whose vocabulary is numbered in merge order (Llama
     * 3, Qwen, GPT-4o): 16 bytes per 64 ranks instead of 256, small enough
     * to stay in cache, where merge_id's lookup was a cache miss on every
     * merge. NULL: merge_id, or rank == id. mblock_n blocks. Owned. */
    struct zpi_merge_block *mblock;
    uint32_t mblock_n;

    /* rank -> merged id, for merges.txt vocabularies (rank = merge line);
     * NULL when rank == merged id (tiktoken). merge_cap entries. Owned. */
    uint32_t *merge_id;
    uint32_t merge_cap;

    /* rank of the merge of two single bytes, [first << 8 | second]: the
     * first round of every merge, without hashing. 65536 entries. Owned. */
    uint32_t *bp_rank;

    /* Merges-list mode without ignore_merges (zpi_tok_whole_table): bit id
     * set when BPE of token id's own bytes gives back id alone, so that a
     * piece equal to such a token is that token without a merge, exactly as
     * BPE would give it. NULL: not computed (tiktoken mode and ignore_merges
     * take every whole token). n_ids bits. Owned. */
    uint8_t *whole;
};

/* ------------------------------------------------------------ hashing */

static inline uint64_t zpi_tok_load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint64_t zpi_tok_load32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint64_t zpi_tok_mulfold(uint64_t a, uint64_t b)
{
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

/* Hash of a byte string, fast for short strings (one or two multiplies up
 * to 16 bytes). Never reads outside p[0..n). */
static inline uint64_t zpi_tok_hash(const uint8_t *p, size_t n)
{
    const uint64_t k0 = 0x9E3779B97F4A7C15ULL, k1 = 0xC2B2AE3D27D4EB4FULL,
                   k2 = 0x165667B19E3779F9ULL;
    uint64_t a, b;
    if (n <= 16) {
        if (n >= 8) {
            a = zpi_tok_load64(p);
            b = zpi_tok_load64(p + n - 8);
        } else if (n >= 4) {
            a = zpi_tok_load32(p);
            b = zpi_tok_load32(p + n - 4);
        } else if (n > 0) {
            a = ((uint64_t)p[0] << 16) | ((uint64_t)p[n >> 1] << 8) | p[n - 1];
            b = 0;
        } else {
            a = b = 0;
        }
        return zpi_tok_mulfold(a ^ k1 ^ n, b ^ k0) * k2;
    }
    uint64_t h = n * k0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        h = zpi_tok_mulfold(zpi_tok_load64(p + i) ^ k1 ^ h, zpi_tok_load64(p + i + 8) ^ k0);
    a = zpi_tok_load64(p + n - 16);
    b = zpi_tok_load64(p + n - 8);
    return zpi_tok_mulfold(a ^ k1 ^ h, b ^ k2) * k2;
}

/* The 43-bit key of pair (a, b): a slot's bits 21..63. */
static inline uint64_t zpi_tok_pair_key(uint32_t a, uint32_t b)
{
    return (1ULL << 42) | ((uint64_t)a << ZPI_TOK_ID_BITS) | b;
}

static inline uint32_t zpi_tok_pair_home(const zp_tokenizer *t, uint64_t key)
{
    return (uint32_t)((key * 0x9E3779B97F4A7C15ULL) >> t->pmap_shift);
}

/* Rank of the merge of adjacent ids (a, b); ZPI_TOK_NONE when they never
 * merge. */
static inline uint32_t zpi_tok_pair(const zp_tokenizer *t, uint32_t a, uint32_t b)
{
    uint64_t key = zpi_tok_pair_key(a, b);
    uint32_t i = zpi_tok_pair_home(t, key);
    for (;;) {
        uint64_t s = t->pmap[i];
        if ((s >> ZPI_TOK_ID_BITS) == key)
            return (uint32_t)s & ZPI_TOK_ID_MASK;
        if (s == 0)
            return ZPI_TOK_NONE;
        i = (i + 1) & t->pmap_mask;
    }
}

/* The id a merge of rank `rank` makes. */
/* The filter word and bits of a pair key (zpi_tok_pair_key). */
static inline uint64_t zpi_tok_pfilter_hash(uint64_t key) { return key * 0xA24BAED4963EE407ULL; }

static inline uint64_t zpi_tok_pfilter_bits(uint64_t h)
{
    return (1ULL << (h & 63)) | (1ULL << ((h >> 6) & 63));
}

/* 0 when the pair map cannot hold the pair of key; 1 when it may. */
static inline int zpi_tok_pair_maybe(const zp_tokenizer *t, uint64_t key)
{
    if (!t->pfilter)
        return 1;
    uint64_t h = zpi_tok_pfilter_hash(key), m = zpi_tok_pfilter_bits(h);
    return (t->pfilter[(uint32_t)(h >> 32) & t->pfilter_mask] & m) == m;
}

static inline uint32_t zpi_tok_popcount64(uint64_t x)
{
    x -= (x >> 1) & 0x5555555555555555ULL;
    x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0FULL;
    return (uint32_t)((x * 0x0101010101010101ULL) >> 56);
}

static inline uint32_t zpi_tok_merged(const zp_tokenizer *t, uint32_t rank)
{
    if (t->mblock) {
        const zpi_merge_block *b = &t->mblock[rank >> 6];
        return b->base + zpi_tok_popcount64(b->inc & ((2ULL << (rank & 63)) - 1));
    }
    return t->merge_id ? t->merge_id[rank] : rank;
}

/* a[0..n) == b[0..n)? Inlined for the short strings compared here. */
static inline int zpi_tok_eq(const uint8_t *a, const uint8_t *b, size_t n)
{
    if (n >= 8) {
        size_t i = 0;
        for (; i + 8 < n; i += 8)
            if (zpi_tok_load64(a + i) != zpi_tok_load64(b + i))
                return 0;
        return zpi_tok_load64(a + n - 8) == zpi_tok_load64(b + n - 8);
    }
    if (n >= 4)
        return zpi_tok_load32(a) == zpi_tok_load32(b) &&
               zpi_tok_load32(a + n - 4) == zpi_tok_load32(b + n - 4);
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

/* The first bytes of p[0..n) (n >= 1) packed in 64 bits: for n <= 8 two
 * strings of the same length are equal iff their heads are (bytes 0-3 and
 * n-4..n-1 together cover a string of 4 to 8 bytes); for n > 8, the first 8
 * bytes. Never reads outside p[0..n). */
static inline uint64_t zpi_tok_head(const uint8_t *p, size_t n)
{
    if (n >= 8)
        return zpi_tok_load64(p);
    if (n >= 4)
        return zpi_tok_load32(p) | (zpi_tok_load32(p + n - 4) << 32);
    return (uint64_t)p[0] | ((uint64_t)p[n >> 1] << 8) | ((uint64_t)p[n - 1] << 16);
}

/* The id of the token whose bytes are p[0..n) (h = zpi_tok_hash(p, n)), or
 * ZPI_TOK_NONE. One memory access for tokens of up to 8 bytes. */
static inline __attribute__((always_inline)) uint32_t zpi_tok_find(const zp_tokenizer *t,
                                                                    const uint8_t *p, size_t n,
                                                                    uint64_t h)
{
    uint64_t head = zpi_tok_head(p, n);
    uint32_t want = n < ZPI_VSLOT_LONG ? (uint32_t)n : ZPI_VSLOT_LONG;
    uint32_t i = (uint32_t)h & t->vmap_mask;
    for (;;) {
        const zpi_vslot *s = &t->vmap[i];
        uint32_t len = s->key >> ZPI_TOK_ID_BITS;
        if (len == 0)
            return ZPI_TOK_NONE;
        if (s->head == head && len == want) {
            uint32_t id = s->key & ZPI_TOK_ID_MASK;
            if (n <= 8)
                return id;
            if ((want < ZPI_VSLOT_LONG || t->span[id].len == n) &&
                zpi_tok_eq(t->blob + s->off + 8, p + 8, n - 8))
                return id;
        }
        i = (i + 1) & t->vmap_mask;
    }
}

/* ------------------------------------------------------------ memory */

/* Zeroed memory for a large, randomly accessed table: tables of 2 MiB and
 * more are 2 MiB aligned and, where the system offers it, backed by huge
 * pages (fewer TLB misses on lookups). Free with free(). NULL on failure. */
void *zpi_tok_table_alloc(size_t bytes);

/* ------------------------------------------------------------ building
 * (tok_vocab.c). zpi_tok_build_* fill a zeroed zp_tokenizer; on error they
 * write a message to err and return the status; the caller then destroys
 * the half-built tokenizer with zp_tokenizer_destroy(). */

/* Allocate id spans and the bytes -> id map for up to max_ids ids. */
zp_status zpi_tok_build_begin(zp_tokenizer *t, uint32_t max_ids, zpi_err *err);
/* Set id's bytes. in_map: also enter them in the bytes -> id map (BPE can
 * produce the token). Fails on a duplicate id or duplicate bytes. */
zp_status zpi_tok_build_add(zp_tokenizer *t, uint32_t id, const uint8_t *p, size_t n, int in_map,
                            zpi_err *err);
/* Allocate the pair map for up to max_pairs pairs. */
zp_status zpi_tok_build_pairs_begin(zp_tokenizer *t, size_t max_pairs, zpi_err *err);
/* One merge (a, b) -> rank, after zpi_tok_build_pairs_begin (the map grows
 * when needed). 0, or -1 when the map could not grow. */
int zpi_tok_build_pair(zp_tokenizer *t, uint32_t a, uint32_t b, uint32_t rank);
/* Slot value v (zpi_tok_pair_key(a, b) << ZPI_TOK_ID_BITS | rank) into the
 * pair map without growing it (the caller made room, e.g. with
 * zpi_tok_build_pairs_begin); an existing pair keeps the lower rank. */
void zpi_tok_build_pair_insert(zp_tokenizer *t, uint64_t v);
/* tiktoken semantics: enter every split of every mapped token into two
 * mapped tokens, with rank = id of the whole token. */
zp_status zpi_tok_build_all_splits(zp_tokenizer *t, zpi_err *err);
/* Checks (all 256 byte tokens present) and the derived tables. */
zp_status zpi_tok_build_finish(zp_tokenizer *t, zpi_err *err);

/* Replaces t->merge_id (merge_cap entries, all set) by t->mblock where its
 * merged ids allow it; otherwise, or out of memory, keeps merge_id. */
void zpi_tok_pack_merges(zp_tokenizer *t);

/* Sets t->whole for a finished byte-level vocabulary in merges-list mode:
 * BPE of every token's bytes, once at load (tok_encode.c). */
zp_status zpi_tok_whole_table(zp_tokenizer *t, zpi_err *err);

static inline int zpi_tok_whole_ok(const zp_tokenizer *t, uint32_t id)
{
    return !t->whole || (t->whole[id >> 3] >> (id & 7) & 1u);
}

/* ------------------------------------------------------------ identity
 * (tok_ident.c) */

/* 1 when id is a built-in tokenizer name ("gpt2", "cl100k_base", ...). */
int zpi_tok_is_builtin(const char *id);
/* t->ident = "KIND:xxh64:HASH" (for loaders that hash what they read). */
void zpi_tok_set_ident(zp_tokenizer *t, const char *kind, uint64_t hash);
/* After a loader succeeded: the identity when the loader left it empty,
 * the config's eot/bos overrides (checked against the vocabulary), an EOT
 * required, match_special refused unless the loader supports it. */
zp_status zpi_tok_finish_common(zp_tokenizer *t, const char *id, const zp_tokenizer_config *c,
                                zpi_err *err);

/* ------------------------------------------------------------ encoding */

/* End of the pre-tokenizer piece that starts at text[pos] (the GPT-2
 * pattern; tok_encode.c). Returns len when pos >= len. For tests. */
size_t zpi_tok_next_piece(const char *text, size_t pos, size_t len);

/* Pieces longer than n bytes (n <= 128, the default) use the heap merge.
 * For tests: n = 1 sends every piece through the heap merge. */
void zpi_encoder_set_short_max(zp_encoder *enc, size_t n);

/* The GPT-2 vocab.bpe embedded in the library (tok_gpt2_data.c). */
extern const char zpi_gpt2_vocab_bpe[] __attribute__((visibility("hidden")));
extern const char zpi_gpt2_vocab_bpe_end[] __attribute__((visibility("hidden")));

#endif
