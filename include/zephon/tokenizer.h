/*
 * zephon/tokenizer.h - the tokenizers of today's models: GPT-2 and the
 * tiktoken encodings, Hugging Face tokenizer.json files, SentencePiece
 * models, with the reference implementations' ids (docs/tokenizers.md;
 * the GPT-2 encoder's design: docs/tokenizer.md).
 *
 * A zp_tokenizer is immutable once created and may be shared by any number
 * of threads. Encoding needs scratch memory and a bounded cache of pieces
 * already seen: that lives in a zp_encoder, one per thread.
 *
 * Text handling:
 *  - The literal text "<|endoftext|>" is ordinary text. The EOT id (50256
 *    for gpt2) is never produced by zp_encode(); the packer inserts it.
 *  - Text may contain NUL bytes: lengths are always explicit.
 *  - Input that is not valid UTF-8: each byte that does not start a valid
 *    UTF-8 sequence is classified like U+FFFD (neither letter, number nor
 *    space) for pre-tokenization, and its byte is kept as is by the
 *    byte-level BPE, so decode(encode(x)) == x holds for any bytes.
 */
#ifndef ZEPHON_TOKENIZER_H
#define ZEPHON_TOKENIZER_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zp_tokenizer zp_tokenizer;
typedef struct zp_encoder zp_encoder;

typedef struct zp_tokenizer_config {
    /* Entries in each encoder's cache of already-seen pieces. 0 disables the
     * cache. Default 16384. The cache's memory is bounded by this count and
     * by cache_max_piece_bytes. */
    size_t cache_entries;
    /* Pieces longer than this (bytes) are never cached. Default 64. */
    size_t cache_max_piece_bytes;
    /* The end-of-document id: the token the packer puts after each document
     * (and pads with), and that pre-tokenized documents may end with.
     * ZP_TOKEN_DEFAULT (the default): the tokenizer's own (gpt2 and the
     * tiktoken encodings: <|endoftext|>; a tokenizer.json: its config's
     * eos_token, e.g. Llama 3's <|end_of_text|>; a SentencePiece model: its
     * eos id, </s>). Otherwise an id of the vocabulary (docs/tokenizers.md). */
    int32_t eot;
    /* The beginning-of-sequence id the packer puts before each document.
     * ZP_TOKEN_DEFAULT (the default): the tokenizer's own when its config
     * adds one (a tokenizer_config.json with add_bos_token, or a
     * post_processor template that starts with BOS: Llama 2/3, Gemma),
     * none otherwise (gpt2, tiktoken encodings, Qwen). -1: none. Otherwise
     * an id of the vocabulary. */
    int32_t bos;
    /* 0 (the default): special tokens' strings in the text ("<|endoftext|>",
     * "<s>", ...) are ordinary text, as training data needs. 1: they are
     * matched and encoded as their ids, where the tokenizer supports it
     * (zp_tokenizer_create() refuses it otherwise). */
    int match_special;
} zp_tokenizer_config;

/* zp_tokenizer_config.eot/bos: take the tokenizer's own. */
#define ZP_TOKEN_DEFAULT (-2)

ZP_API void zp_tokenizer_config_init(zp_tokenizer_config *cfg);

/* Create a tokenizer. id is a built-in name ("gpt2", "r50k_base",
 * "p50k_base", "cl100k_base", "o200k_base": vocabularies that ship with
 * Zephon, no network needed) or a path: a Hugging Face tokenizer.json (or
 * the folder holding it, with tokenizer_config.json beside it), a folder
 * holding vocab.json + merges.txt, a tiktoken rank file (*.tiktoken), or a
 * SentencePiece model (*.model); docs/tokenizers.md lists what each
 * supports and refuses. cfg may be NULL (defaults). On failure *out is NULL
 * and, when err is not NULL, err (errcap bytes) holds the reason.
 * OUT: *out, caller owns; release with zp_tokenizer_destroy(). */
ZP_API zp_status zp_tokenizer_create(const char *id, const zp_tokenizer_config *cfg,
                              zp_tokenizer **out, char *err, size_t errcap);
ZP_API void zp_tokenizer_destroy(zp_tokenizer *tok);

/* Number of ids (50257 for gpt2). */
ZP_API size_t zp_tokenizer_vocab_size(const zp_tokenizer *tok);
/* The end-of-document id the packer uses (50256 for gpt2; the config's
 * eot when it set one). */
ZP_API int32_t zp_tokenizer_eot(const zp_tokenizer *tok);
/* The beginning-of-sequence id the packer puts before each document, -1
 * when none (gpt2). */
ZP_API int32_t zp_tokenizer_bos(const zp_tokenizer *tok);
/* A stable identity of the vocabulary and its encoding, recorded in
 * pre-tokenized shards and in pipeline states: the built-in name ("gpt2",
 * "cl100k_base", ...), or for a file the kind and a hash of its content
 * (and of the files read beside it), e.g.
 * "tokenizer.json:xxh64:0123456789abcdef": the same file under another path
 * has the same identity. It does not include the eot/bos/match_special
 * settings. Borrowed, valid while tok lives. */
ZP_API const char *zp_tokenizer_ident(const zp_tokenizer *tok);
/* Resident bytes of the tokenizer's tables (not counting encoders). */
ZP_API size_t zp_tokenizer_memory(const zp_tokenizer *tok);

/* Per-thread encoder. tok is borrowed and must outlive the encoder.
 * OUT: *out, caller owns; release with zp_encoder_destroy(). */
ZP_API zp_status zp_encoder_create(const zp_tokenizer *tok, zp_encoder **out);
ZP_API void zp_encoder_destroy(zp_encoder *enc);
/* Resident bytes of the encoder (scratch and cache). */
ZP_API size_t zp_encoder_memory(const zp_encoder *enc);

/* Encode len bytes of text. ids must have room for zp_encode_max_ids(tok,
 * len) ids; *n_ids gets the count. Never fails on any input bytes; returns
 * ZP_ERR_NOMEM only when scratch memory cannot grow. */
ZP_API zp_status zp_encode(zp_encoder *enc, const char *text, size_t len, int32_t *ids,
                    size_t *n_ids);
/* The most ids zp_encode() gives for len bytes of text: len for byte-level
 * BPE without a normalizer (gpt2, tiktoken encodings; a token is at least one
 * byte); more for tokenizers whose normalizer or pre-tokenizer lengthens the
 * text (a tokenizer.json replaces invalid UTF-8 by U+FFFD, may prepend
 * U+2581, replace ' ' by U+2581, apply NFKC ...). */
ZP_API size_t zp_encode_max_ids(const zp_tokenizer *tok, size_t len);

/* Decode ids into bytes. out has cap bytes; *out_len gets the length needed.
 * Returns ZP_ERR_LIMIT when cap is too small (nothing useful written),
 * ZP_ERR_INVALID for an id out of range. */
ZP_API zp_status zp_decode(const zp_tokenizer *tok, const int32_t *ids, size_t n_ids, char *out,
                    size_t cap, size_t *out_len);

#ifdef __cplusplus
}
#endif
#endif
