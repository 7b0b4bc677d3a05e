/*
 * hf_encode.h - encoding with a tokenizer.json tokenizer (hf_encode.c;
 * private to src/base/tokenizer). hf_json.h describes the pipeline and
 * loads the file.
 */
#ifndef ZP_TOKENIZER_HF_ENCODE_H
#define ZP_TOKENIZER_HF_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "zephon/tokenizer.h"

typedef struct zpi_hf_enc zpi_hf_enc;

/* Per-encoder state. NULL when out of memory. */
zpi_hf_enc *zpi_hf_enc_create(const zp_tokenizer *t);
void zpi_hf_enc_destroy(zpi_hf_enc *e);
size_t zpi_hf_enc_memory(const zpi_hf_enc *e);

/* zp_encode() of a tokenizer.json tokenizer. ids: room for
 * zpi_hf_max_ids(len) ids (hf_internal.h). */
zp_status zpi_hf_encode(zp_encoder *enc, zpi_hf_enc *he, const char *text, size_t len,
                        int32_t *ids, size_t *n_ids);

/* The tokenizer's normalizer over s[0..n) (valid UTF-8) into *out (malloc,
 * NUL-terminated; *on bytes): a normalized added token's pattern, as
 * tokenizers builds its normalized trie. -1 when out of memory. */
struct zpi_hf;
int zpi_hf_normalize_string(const struct zpi_hf *h, const char *s, size_t n, char **out,
                            size_t *on);

#endif
