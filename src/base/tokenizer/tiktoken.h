/*
 * tiktoken.h - the tiktoken family (private; tok_tiktoken.c): the built-in
 * encodings r50k_base, p50k_base, p50k_edit, cl100k_base, o200k_base, and
 * rank files given by path (docs/tokenizer.md, "Vocabularies").
 */
#ifndef ZP_TOKENIZER_TIKTOKEN_H
#define ZP_TOKENIZER_TIKTOKEN_H

#include "base/tokenizer/tok_internal.h"

/* 1 when zpi_tiktoken_load() takes id: a built-in encoding name other than
 * "gpt2", "PATTERN:PATH" with PATTERN a pattern or encoding name, or a path
 * ending in .tiktoken. */
int zpi_tiktoken_claims(const char *id);

/* Fill the zeroed tokenizer t from id (see zpi_tiktoken_claims): ranks, the
 * encoding's special tokens (never produced by zp_encode), its EOT (and BOS
 * for "llama3:PATH"), the split pattern, tiktoken's merge semantics. A rank
 * file whose pattern cannot be told from its id is refused. The caller runs
 * zpi_tok_build_finish() and destroys t on failure. */
zp_status zpi_tiktoken_load(zp_tokenizer *t, const char *id, zpi_err *err);

/* The embedded rank files (tok_tiktoken_data.c); each is followed by a NUL
 * byte, not counted. */
extern const char zpi_tiktoken_p50k_base[] __attribute__((visibility("hidden")));
extern const char zpi_tiktoken_p50k_base_end[] __attribute__((visibility("hidden")));
extern const char zpi_tiktoken_cl100k_base[] __attribute__((visibility("hidden")));
extern const char zpi_tiktoken_cl100k_base_end[] __attribute__((visibility("hidden")));
extern const char zpi_tiktoken_o200k_base[] __attribute__((visibility("hidden")));
extern const char zpi_tiktoken_o200k_base_end[] __attribute__((visibility("hidden")));

#endif
