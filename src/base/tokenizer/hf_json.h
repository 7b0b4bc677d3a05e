/*
 * hf_json.h - Hugging Face tokenizer.json files (private; src/base/tokenizer).
 * docs/tokenizers.md.
 *
 * hf_json.c reads a tokenizer.json (a fast hand-written JSON scanner for the
 * model's vocab and merges, jansson for the small rest) and, beside it,
 * tokenizer_config.json (BOS/EOS); hf_encode.c encodes as the Hugging Face
 * `tokenizers` library does with encode(text, add_special_tokens=False):
 *
 *   invalid UTF-8 -> U+FFFD (maximal subparts, as String::from_utf8_lossy)
 *   added tokens (normalized=false) matched in the raw text, leftmost-longest
 *   normalizer (Sequence, Prepend, Replace with a string, NFC/NFKC/NFD/NFKD)
 *   added tokens (normalized=true) matched in the normalized text
 *   pre-tokenizer (Sequence, Split, ByteLevel, Digits, Metaspace)
 *   model BPE: byte-level (the GPT-2 path of tok_encode.c, merges.txt
 *   semantics, ignore_merges = whole-piece lookup first) or SentencePiece
 *   style (initial symbols = UTF-8 characters, byte_fallback <0xXX>, unk,
 *   fuse_unk, ignore_merges)
 *
 * Special added tokens are ordinary text unless the tokenizer was created
 * with zp_tokenizer_config.match_special = 1. Anything else in the file is
 * refused naming the component and its type.
 *
 * Ownership: the zp_tokenizer owns its struct zpi_hf (t->hf); each
 * zp_encoder owns one zpi_hf_enc (scratch, the SentencePiece-style BPE
 * cache), used by one thread at a time; the model is only read.
 *
 * This header: the loader (hf_json.c). hf_encode.h: the encoder
 * (hf_encode.c). hf_internal.h: the model's data, which both read.
 */
#ifndef ZP_TOKENIZER_HF_JSON_H
#define ZP_TOKENIZER_HF_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "zephon/tokenizer.h"

struct zpi_hf;

/* Does path name a tokenizer.json: a folder holding tokenizer.json, or a
 * file whose name ends with ".json" that is not a token -> id map (the
 * vocab.json of a vocab.json + merges.txt pair: named vocab.json with a
 * merges.txt beside it, or an object whose first member is a number)? */
int zpi_hf_is_json_path(const char *path);

/* Load path (a tokenizer.json, or a folder holding one) into t (zeroed but
 * for cfg): t->hf, the byte-level tables or the SentencePiece-style model,
 * n_ids, eot and bos (from tokenizer_config.json beside it, else the
 * post_processor's template), t->kind. On failure the error names the file
 * and the component; the caller destroys t. match_special: match special
 * added tokens in text (else they are ordinary text). */
zp_status zpi_hf_load(zp_tokenizer *t, const char *path, int match_special, zpi_err *err);
void zpi_hf_destroy(struct zpi_hf *m);
size_t zpi_hf_memory(const struct zpi_hf *m);

#endif
