/*
 * hf_internal.h - the data of a tokenizer.json tokenizer, shared by
 * hf_json.c (loading) and hf_encode.c (encoding). Private; see hf_json.h
 * and hf_encode.h. Includes neither (they are the nodes above it).
 */
#ifndef ZP_TOKENIZER_HF_INTERNAL_H
#define ZP_TOKENIZER_HF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/tokenizer/pretok.h"
#include "base/tokenizer/tok_internal.h"

/* Normalizers, applied in order. */
enum { HF_N_PREPEND, HF_N_REPLACE, HF_N_NFC, HF_N_NFKC, HF_N_NFD, HF_N_NFKD };

typedef struct hf_norm {
    int kind;
    char *a, *b; /* prepend: a; replace: a -> b (owned) */
    size_t alen, blen;
} hf_norm;

/* Split behaviours (tokenizers' SplitDelimiterBehavior). */
enum { HF_B_REMOVED, HF_B_ISOLATED, HF_B_MERGED_PREV, HF_B_MERGED_NEXT, HF_B_CONTIGUOUS };

/* Pre-tokenizers, applied in order (a Sequence is flattened). */
enum { HF_P_SPLIT_REGEX, HF_P_SPLIT_STRING, HF_P_DIGITS, HF_P_METASPACE, HF_P_BYTELEVEL };
enum { HF_PREPEND_ALWAYS, HF_PREPEND_FIRST, HF_PREPEND_NEVER };

typedef struct hf_pt {
    int kind;
    int behavior, invert;
    zpi_pretok *re; /* SPLIT_REGEX; BYTELEVEL with use_regex (GPT-2's pattern); owned */
    char *str;      /* SPLIT_STRING pattern, owned */
    size_t slen;
    int individual;  /* DIGITS */
    char rep[8];     /* METASPACE replacement (UTF-8) */
    size_t replen;
    int scheme, split; /* METASPACE */
    int add_prefix_space; /* BYTELEVEL */
} hf_pt;

typedef struct hf_added {
    uint32_t id;
    const char *s; /* content, in the added blob */
    uint32_t len;
    /* what the matcher looks for: the content, or for a normalized token
     * the content through the normalizer (as tokenizers builds its
     * normalized trie), in the normalized blob */
    const char *m;
    uint32_t mlen;
    uint8_t special, lstrip, rstrip, single_word, normalized;
} hf_added;

/* Leftmost-longest matcher over a set of added tokens: the tokens sorted by
 * bytes; first[b] says whether some token starts with byte b. */
typedef struct hf_matcher {
    uint32_t *idx; /* indices into added[], sorted by content; owned */
    uint32_t n;
    uint32_t n_act; /* tokens that split the text (not special, or match_special):
                     * none, and matching changes nothing */
    int one_first;  /* the first byte of every token when they share one, else -1 */
    uint8_t first[256];
} hf_matcher;

struct zpi_hf {
    int bytelevel;        /* model on bytes: the GPT-2 path of tok_encode.c */
    int core_fast;        /* bytelevel and the pre-tokenizer is one pattern the core runs */
    int ignore_merges, byte_fallback, fuse_unk;
    uint32_t unk_id;      /* ZPI_TOK_NONE: no unk token */
    int match_special;
    int lossy;            /* always 1: invalid UTF-8 -> U+FFFD */

    hf_norm *norm;
    size_t n_norm;
    int unicode_norm;     /* some NFC/NFKC/NFD/NFKD: the quick-check table is needed */
    uint8_t *nf_unsafe;   /* bitmap over code points: may change under the Unicode
                           * normalizations used; owned */

    hf_pt *pt;
    size_t n_pt;
    const zpi_pretok *given; /* the pt[].re that t->pretok owns (core_fast) */

    hf_added *added;
    size_t n_added;
    char *added_blob;
    char *added_nblob; /* the normalized tokens' hf_added.m */
    size_t added_nblob_len;
    hf_matcher raw, normd; /* normalized=false / normalized=true tokens */

    /* SentencePiece-style model */
    uint32_t byte_tok[256]; /* id of <0xXX>, ZPI_TOK_NONE when absent */
    int all_byte_toks;
    uint32_t ascii_id[128]; /* id of each ASCII character, ZPI_TOK_NONE */
    /* Word split at U+2581: text may be cut before a U+2581 that follows a
     * character c that is not U+2581 when no vocabulary token holds c
     * followed by U+2581 (then no merge crosses the cut). */
    int ws_split;
    uint32_t *ws_bad; /* sorted code points c that do; owned */
    size_t n_ws_bad;
    int ws_bad_unknown; /* a byte token or unk before U+2581 may merge */

    size_t max_factor, max_extra; /* zpi_hf_max_ids = len * factor + extra */
};

/* An upper bound of the ids zp_encode() gives for len bytes of text. */
static inline size_t zpi_hf_max_ids(const struct zpi_hf *m, size_t len)
{
    return len * m->max_factor + m->max_extra;
}

/* Byte-level core (tok_encode.c): the GPT-2 path's encoding of one piece
 * (any length >= 1) and of a whole text with t->pretok. */
size_t zpi_tok_encode_piece(zp_encoder *e, const uint8_t *p, size_t n, int32_t *out);
zp_status zpi_tok_encode_bytes(zp_encoder *enc, const char *text, size_t len, int32_t *ids,
                               size_t *n_ids);

#endif
