/*
 * zephon/tokenizer.h - GPT-2 byte-level BPE, identical to tiktoken's "gpt2"
 * encoding with encode_ordinary (docs/tokenizer.md).
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
} zp_tokenizer_config;

ZP_API void zp_tokenizer_config_init(zp_tokenizer_config *cfg);

/* Create a tokenizer. id is either "gpt2" (the vocabulary that ships with
 * Zephon, no network needed), a folder holding vocab.json + merges.txt (as
 * Hugging Face publishes them), or a path to a tiktoken rank file
 * (*.tiktoken). cfg may be NULL. On failure *out is NULL and, when err is
 * not NULL, err (errcap bytes) holds the reason.
 * OUT: *out, caller owns; release with zp_tokenizer_destroy(). */
ZP_API zp_status zp_tokenizer_create(const char *id, const zp_tokenizer_config *cfg,
                              zp_tokenizer **out, char *err, size_t errcap);
ZP_API void zp_tokenizer_destroy(zp_tokenizer *tok);

/* Number of ids (50257 for gpt2). */
ZP_API size_t zp_tokenizer_vocab_size(const zp_tokenizer *tok);
/* The end-of-text id (50256 for gpt2). */
ZP_API int32_t zp_tokenizer_eot(const zp_tokenizer *tok);
/* Resident bytes of the tokenizer's tables (not counting encoders). */
ZP_API size_t zp_tokenizer_memory(const zp_tokenizer *tok);

/* Per-thread encoder. tok is borrowed and must outlive the encoder.
 * OUT: *out, caller owns; release with zp_encoder_destroy(). */
ZP_API zp_status zp_encoder_create(const zp_tokenizer *tok, zp_encoder **out);
ZP_API void zp_encoder_destroy(zp_encoder *enc);
/* Resident bytes of the encoder (scratch and cache). */
ZP_API size_t zp_encoder_memory(const zp_encoder *enc);

/* Encode len bytes of text. ids must have room for len ids (a token is at
 * least one byte); *n_ids gets the count. Never fails on any input bytes;
 * returns ZP_ERR_NOMEM only when scratch memory cannot grow. */
ZP_API zp_status zp_encode(zp_encoder *enc, const char *text, size_t len, int32_t *ids,
                    size_t *n_ids);

/* Decode ids into bytes. out has cap bytes; *out_len gets the length needed.
 * Returns ZP_ERR_LIMIT when cap is too small (nothing useful written),
 * ZP_ERR_INVALID for an id out of range. */
ZP_API zp_status zp_decode(const zp_tokenizer *tok, const int32_t *ids, size_t n_ids, char *out,
                    size_t cap, size_t *out_len);

#ifdef __cplusplus
}
#endif
#endif
