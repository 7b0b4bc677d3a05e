/*
 * tok_encode_internal.h - the encoder object (struct zp_encoder), shared by
 * tok_encode.c (the byte-level BPE core, which owns the fields below
 * "tiktoken") and encoder.c (the zp_encoder API and zp_encode's dispatch on
 * the model kind, which owns spm and hf). Private to src/base/tokenizer.
 */
#ifndef ZP_TOKENIZER_TOK_ENCODE_INTERNAL_H
#define ZP_TOKENIZER_TOK_ENCODE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/tokenizer/tok_internal.h"

struct zpi_spm_enc;
struct zpi_hf_enc;

/* Pieces up to this many bytes are merged by the simple quadratic loop
 * (scratch inside the encoder); longer ones by the heap merge. */
#define SHORT_MAX 128
/* Cache: sets of CACHE_WAYS slots of 64 bytes (one cache line); the tags of
 * a set are stored together in ctag. A slot holds the piece bytes followed
 * (4-aligned) by its ids; pieces that do not fit are not cached. */
#define CACHE_WAYS 4
#define CACHE_DATA 60

/* Entries of the per-encoder pair cache (8 bytes each). */
#define PAIR_CACHE_BITS 16
#define PAIR_CACHE (1u << PAIR_CACHE_BITS)

typedef struct cache_slot {
    uint8_t klen;
    uint8_t nids;
    uint8_t pad[2];
    uint8_t data[CACHE_DATA];
} cache_slot;

struct zp_encoder {
    const zp_tokenizer *tok; /* borrowed */
    /* whole-piece lookup first: always in tiktoken mode and with
     * ignore_merges; in merges-list mode for the tokens of tok->whole */
    int tiktoken;
    size_t cache_max;        /* longest cached piece (bytes), 0: no cache */
    size_t short_max;        /* longest piece for bpe_short, <= SHORT_MAX */
    size_t hash_max;         /* longest piece that is hashed (whole-token lookup, cache) */

    /* short merge: rank of each adjacent pair */
    uint32_t srank[SHORT_MAX];

    /* direct-mapped cache of pair-map lookups (slot format of the pair
     * map; rank PAIR_NONE: no merge). BPE of text reuses few pairs over and
     * over: this keeps them in L1/L2 instead of the megabytes-large map. */
    uint64_t pcache[PAIR_CACHE];

    /* long merge, one entry per byte position, lcap positions, owned */
    size_t lcap;
    uint32_t *lid, *lnext, *lprev, *where;
    uint64_t *lheap;

    /* cache, owned */
    uint32_t *ctag;     /* nsets * CACHE_WAYS tags, 0 = empty */
    cache_slot *cslot;  /* nsets * CACHE_WAYS slots */
    uint32_t cset_mask; /* nsets - 1 */
    uint32_t cvictim;   /* round-robin replacement */

    void *pscratch; /* the pre-tokenizer's per-thread scratch, owned */
    struct zpi_spm_enc *spm; /* kind SPM: the SentencePiece encoder, owned */
    struct zpi_hf_enc *hf; /* a tokenizer.json: its pipeline's state (hf_encode.c), owned */
};

/* The byte-level BPE part of a zeroed encoder whose tok is set: the cache,
 * the pre-tokenizer's scratch.
 * whole_first: whole-piece lookup before BPE (tiktoken, ignore_merges).
 * ZP_ERR_NOMEM: the caller frees with zpi_tok_bpe_free. */
zp_status zpi_tok_bpe_init(zp_encoder *e, int whole_first);
void zpi_tok_bpe_free(zp_encoder *e);
size_t zpi_tok_bpe_memory(const zp_encoder *e);

/* Byte-level BPE of a whole text with tok->pretok. Room for len ids. */
zp_status zpi_tok_encode_bytes(zp_encoder *enc, const char *text, size_t len, int32_t *ids,
                               size_t *n_ids);

#endif
