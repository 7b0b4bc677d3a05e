/*
 * pretok.h - pre-tokenizers: split text into the pieces that BPE encodes
 * one by one (private; src/base/tokenizer). docs/tokenizer.md.
 *
 * A zpi_pretok is one split pattern. The patterns the project knows get a
 * hand-written scanner (pretok_scan.h), as fast as the GPT-2 one:
 *
 *   "gpt2"   GPT-2, r50k_base, p50k_base:
 *            's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   "cl100k" cl100k_base, Llama 3 (its tokenizer.json's Split regex):
 *            (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *             ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   "qwen2"  Qwen 2 / 2.5 / 3: cl100k's with \p{N} (one digit a piece)
 *   "o200k"  o200k_base, GPT-4o: upper/lower letter classes with \p{M},
 *            contractions as suffixes, [\r\n/]* after punctuation
 *
 * zpi_pretok_create() recognises these patterns in the spellings the
 * reference files use (tiktoken's pat_str, tokenizer.json Split regexes,
 * tiktoken's newer possessive forms); any other pattern is compiled by PCRE2
 * (UTF, UCP, JIT) with \s and \S meaning White_Space as in the references'
 * engines (Rust regex, Oniguruma).
 *
 * Input bytes that do not start a valid UTF-8 sequence are one-byte
 * characters of no class (not letter, number, mark or space), like U+FFFD;
 * every scanner treats them so, and a PCRE2 pattern sees each as U+FFFD
 * (it matches a copy of the text where they are, made only for a text that
 * has any).
 *
 * Threads: a zpi_pretok is immutable after creation and shared; the scratch
 * (PCRE2 match data) is per thread.
 */
#ifndef ZP_TOKENIZER_PRETOK_H
#define ZP_TOKENIZER_PRETOK_H

#include <stddef.h>

#include "base/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum zpi_pretok_kind {
    ZPI_PRETOK_GPT2 = 0,
    ZPI_PRETOK_CL100K = 1,
    ZPI_PRETOK_QWEN2 = 2,
    ZPI_PRETOK_O200K = 3,
    ZPI_PRETOK_REGEX = 4 /* PCRE2 */
} zpi_pretok_kind;

typedef struct zpi_pretok zpi_pretok;

/* A pre-tokenizer for a regex pattern (NUL-terminated, as written in a
 * tokenizer.json Split or a tiktoken pat_str). Known patterns get their
 * scanner; others PCRE2, refused with ZP_ERR_FORMAT naming the pattern and
 * PCRE2's message when it does not compile.
 * OUT: *out, caller owns; release with zpi_pretok_destroy(). */
zp_status zpi_pretok_create(const char *pattern, zpi_pretok **out, zpi_err *err);
/* A known pattern by name: "gpt2" (also "r50k_base", "p50k_base"),
 * "cl100k" ("cl100k_base", "llama3"), "qwen2", "o200k" ("o200k_base"). */
zp_status zpi_pretok_create_known(const char *name, zpi_pretok **out, zpi_err *err);
void zpi_pretok_destroy(zpi_pretok *pt);

zpi_pretok_kind zpi_pretok_get_kind(const zpi_pretok *pt);
/* The known name ("gpt2", "cl100k", "qwen2", "o200k") or "regex". */
const char *zpi_pretok_name(const zpi_pretok *pt);
/* The pattern as given (known patterns: their canonical spelling). */
const char *zpi_pretok_pattern(const zpi_pretok *pt);

/* Per-thread scratch for zpi_pretok_next/find: *out is NULL for the
 * hand-written scanners (which need none). ZP_ERR_NOMEM on failure.
 * OUT: *out, caller owns; release with zpi_pretok_scratch_destroy(). */
zp_status zpi_pretok_scratch_create(const zpi_pretok *pt, void **out);
void zpi_pretok_scratch_destroy(void *scratch);
/* The scratch remembers the text being split (by address and length) from
 * one call to the next; a call at pos 0 starts a new text. Call this
 * before splitting, at an address and length just used, new text that is
 * not started at pos 0. */
void zpi_pretok_scratch_reset(void *scratch);

/* End of the piece that starts at text[pos] (pos < len; returns len when
 * pos >= len). Pieces are asked for in order: pos 0, then the end of each
 * piece (for PCRE2 patterns, whose scratch keeps state between calls). Pieces cover the text: a piece is either a match of the
 * pattern or a stretch that the pattern does not match (never for the known
 * patterns, which match every character). Always > pos. */
size_t zpi_pretok_next(const zpi_pretok *pt, const char *text, size_t len, size_t pos,
                       void *scratch);

/* As zpi_pretok_next, also saying whether the piece is a match of the
 * pattern (1) or text between matches (0): what Split behaviours such as
 * "Removed" or invert need. */
size_t zpi_pretok_find(const zpi_pretok *pt, const char *text, size_t len, size_t pos,
                       void *scratch, int *is_match);

#ifdef __cplusplus
}
#endif
#endif
