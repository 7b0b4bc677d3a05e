/*
 * spm_model.h - SentencePiece .model files (private; src/base/tokenizer).
 * docs/tokenizers.md.
 *
 * A .model file is a ModelProto (SentencePiece's protobuf): pieces with
 * their scores and types, the trainer's settings and the normalizer's
 * (a precompiled character map: a double-array trie over the input bytes
 * and a pool of replacement strings). spm_model.c reads it with its own
 * protobuf wire-format reader and encodes exactly as SentencePiece's
 * SentencePieceProcessor::Encode (no sampling, no BOS/EOS): normalization,
 * then BPE (merges by piece score) or Unigram (Viterbi), then unknown pieces
 * as their UTF-8 bytes (byte_fallback) or one unknown id per run of unknown
 * pieces. WORD and CHAR models are refused.
 *
 * Ownership: the zp_tokenizer owns its struct zpi_spm (t->spm); each
 * zp_encoder owns one zpi_spm_enc (scratch and cache), used by one thread
 * at a time; the model is only read.
 */
#ifndef ZP_TOKENIZER_SPM_MODEL_H
#define ZP_TOKENIZER_SPM_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "zephon/tokenizer.h"

struct zpi_spm;
typedef struct zpi_spm_enc zpi_spm_enc;

/* Does path name a SentencePiece model (ends with ".model")? */
int zpi_spm_is_model_path(const char *path);

/* Load the .model file at path into t (zeroed but for cfg): t->spm, the id
 * spans for zp_decode, n_ids, eot (the model's eos id) and bos. On failure
 * the error names the file and what is not supported; the caller destroys
 * t. */
zp_status zpi_spm_load_file(zp_tokenizer *t, const char *path, zpi_err *err);
/* The same from a serialized ModelProto in memory (name: for messages). */
zp_status zpi_spm_load_buffer(zp_tokenizer *t, const uint8_t *buf, size_t len, const char *name,
                              zpi_err *err);
void zpi_spm_destroy(struct zpi_spm *m);
size_t zpi_spm_memory(const struct zpi_spm *m);
/* The model's bos id, -1 when none. */
int32_t zpi_spm_bos(const struct zpi_spm *m);

/* Per-encoder state. NULL when out of memory. */
zpi_spm_enc *zpi_spm_enc_create(const zp_tokenizer *t);
void zpi_spm_enc_destroy(zpi_spm_enc *e);
size_t zpi_spm_enc_memory(const zpi_spm_enc *e);

/* Encode text[0..len) into ids (room for cap ids); *n_ids gets the count.
 * Normalization can make more ids than input bytes (the dummy prefix, NFKC
 * expansions, byte fallback of expanded characters): ZP_ERR_LIMIT when cap
 * is too small (*n_ids then holds the count needed).
 * zpi_spm_max_ids(t, len) is a bound that always suffices. */
zp_status zpi_spm_encode(zpi_spm_enc *e, const char *text, size_t len, int32_t *ids, size_t cap,
                         size_t *n_ids);
size_t zpi_spm_max_ids(const struct zpi_spm *m, size_t len);

/* For tests: the normalized text (SentencePiece's Normalizer::Normalize) of
 * text[0..len), in e's scratch; *out_len gets its length. NULL when out of
 * memory. */
const char *zpi_spm_normalize(zpi_spm_enc *e, const char *text, size_t len, size_t *out_len);

#endif
