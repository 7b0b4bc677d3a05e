/*
 * pretok_scan.h - the hand-written scanners of the known split patterns
 * (private; pretok.h lists them). Inline, so that the encoder's loop
 * (tok_encode.c) is compiled once per scanner with the scanner inside it.
 *
 * Each zpi_scan_<name>(s, i, n) returns the end of the piece that starts at
 * s[i] (i < n): the match a backtracking regex engine (leftmost-first
 * alternation, greedy quantifiers) finds at i. Every character is matched by
 * some alternative, so pieces cover the text. Bytes that do not start a
 * valid UTF-8 sequence are one-byte characters of class "other" (as U+FFFD:
 * not \s, \p{L}, \p{N} or \p{M}).
 *
 * Classes come from unicode_tables (Unicode 16.0): the low two bits are
 * other / letter (\p{L}) / number (\p{N}) / space (White_Space, = \s in the
 * references' engines); ZPI_UNI_UP and ZPI_UNI_LO mark o200k's
 * [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}].
 */
#ifndef ZP_TOKENIZER_PRETOK_SCAN_H
#define ZP_TOKENIZER_PRETOK_SCAN_H

#include <stddef.h>
#include <stdint.h>

#include "base/tokenizer/utf8.h"
#include "base/tokenizer/unicode_tables.h"

#define ZPI_SCAN_INLINE static inline __attribute__((always_inline))

/* Full class byte of the character at s[i] (i < n); *clen gets its length. */
ZPI_SCAN_INLINE unsigned zpi_scan_cls(const uint8_t *s, size_t i, size_t n, size_t *clen)
{
    uint8_t b = s[i];
    if (b < 0x80) {
        *clen = 1;
        return zpi_uni_blocks[b]; /* block 0 holds U+0000..U+007F */
    }
    uint32_t cp;
    size_t l = zpi_utf8_decode(s + i, n - i, &cp);
    if (l == 0) {
        *clen = 1;
        return ZPI_CLS_OTHER;
    }
    *clen = l;
    return zpi_uni_class(cp);
}

/* The coarse class (ZPI_CLS_*) only. */
ZPI_SCAN_INLINE unsigned zpi_scan_cls4(const uint8_t *s, size_t i, size_t n, size_t *clen)
{
    return zpi_scan_cls(s, i, n, clen) & ZPI_CLS_MASK;
}

/* ------------------------------------------------------------ GPT-2
 *   's|'t|'re|'ve|'m|'ll|'d | ?\p{L}+ | ?\p{N}+ | ?[^\s\p{L}\p{N}]+ |
 *   \s+(?!\S) | \s+
 * The contractions are case-sensitive ASCII. " ?" is only U+0020. A
 * whitespace run followed by a non-space leaves its last character to the
 * next piece (which then may be " word"), unless the run is one character. */
ZPI_SCAN_INLINE size_t zpi_scan_gpt2(const uint8_t *s, size_t i, size_t n)
{
    const size_t start = i;
    uint8_t b = s[i];
    if (b == '\'' && i + 1 < n) {
        uint8_t c = s[i + 1];
        if (c == 's' || c == 't' || c == 'm' || c == 'd')
            return i + 2;
        if (i + 2 < n) {
            uint8_t d = s[i + 2];
            if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l'))
                return i + 3;
        }
    }
    size_t clen;
    unsigned cls;
    if (b == ' ' && i + 1 < n) {
        cls = zpi_scan_cls4(s, i + 1, n, &clen);
        if (cls != ZPI_CLS_SPACE)
            i += 1; /* " ?" then a run of cls */
        else
            clen = 1, cls = ZPI_CLS_SPACE;
    } else {
        cls = zpi_scan_cls4(s, i, n, &clen);
    }
    if (cls != ZPI_CLS_SPACE) {
        i += clen;
        if (cls == ZPI_CLS_LETTER) {
            /* fast path for ASCII letters */
            while (i < n) {
                uint8_t c = s[i];
                if (c < 0x80) {
                    if ((zpi_uni_blocks[c] & ZPI_CLS_MASK) != ZPI_CLS_LETTER)
                        return i;
                    i++;
                } else {
                    if (zpi_scan_cls4(s, i, n, &clen) != ZPI_CLS_LETTER)
                        return i;
                    i += clen;
                }
            }
            return i;
        }
        while (i < n && zpi_scan_cls4(s, i, n, &clen) == cls)
            i += clen;
        return i;
    }
    /* whitespace run */
    size_t last = i;
    i += clen;
    while (i < n) {
        if (zpi_scan_cls4(s, i, n, &clen) != ZPI_CLS_SPACE)
            break;
        last = i;
        i += clen;
    }
    if (i == n)
        return n; /* \s+(?!\S) at the end of the text */
    if (last > start)
        return last; /* \s+(?!\S): all but the last whitespace character */
    return i;        /* \s+: a single whitespace character */
}

/* ------------------------------------------------------------ shared parts */

/* Length of a case-insensitive contraction 's 't 're 've 'm 'll 'd at s[i]
 * (s[i] == '\''), or 0. Case folding is Unicode's simple folding, as the
 * references' engines apply for (?i): U+017F (long s, C5 BF) matches 's'. */
ZPI_SCAN_INLINE size_t zpi_scan_contraction(const uint8_t *s, size_t i, size_t n)
{
    if (i + 1 >= n)
        return 0;
    uint8_t c = s[i + 1] | 0x20;
    if (c == 's' || c == 't' || c == 'm' || c == 'd')
        return 2;
    if (i + 2 < n) {
        uint8_t d = s[i + 2] | 0x20;
        if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l'))
            return 3;
        if (s[i + 1] == 0xC5 && s[i + 2] == 0xBF)
            return 3; /* 'ſ */
    }
    return 0;
}

/* The whitespace alternatives shared by cl100k, Qwen 2 and o200k, at s[i]
 * (a whitespace character of length clen):
 *   \s*[\r\n]+ | \s+(?!\S) | \s+
 * A run holding a line end ends after its last \r or \n; otherwise the run
 * leaves its last character to the next piece when followed by a
 * non-space, unless it is one character. */
ZPI_SCAN_INLINE size_t zpi_scan_space_nl(const uint8_t *s, size_t i, size_t n, size_t clen)
{
    const size_t start = i;
    size_t last = i, nl_end = 0;
    if (s[i] == '\n' || s[i] == '\r')
        nl_end = i + 1;
    i += clen;
    while (i < n) {
        uint8_t b = s[i];
        if (b == '\n' || b == '\r') {
            last = i;
            nl_end = ++i;
            continue;
        }
        if (b == ' ' || b == '\t') {
            last = i++;
            continue;
        }
        size_t l;
        if (zpi_scan_cls4(s, i, n, &l) != ZPI_CLS_SPACE)
            break;
        last = i;
        i += l;
    }
    if (nl_end)
        return nl_end;
    if (i == n)
        return n;
    if (last > start)
        return last;
    return i;
}

/* \p{N}{1,max}: the number at s[i] (clen bytes) and up to max - 1 more;
 * the end. */
ZPI_SCAN_INLINE size_t zpi_scan_digits(const uint8_t *s, size_t i, size_t n, size_t clen,
                                       unsigned max)
{
    size_t l;
    i += clen;
    for (unsigned k = 1; k < max && i < n; k++) {
        if (zpi_scan_cls4(s, i, n, &l) != ZPI_CLS_NUMBER)
            break;
        i += l;
    }
    return i;
}

/* [^\s\p{L}\p{N}]+ from the character at s[i] (clen bytes, of that class);
 * the end. */
ZPI_SCAN_INLINE size_t zpi_scan_other_run(const uint8_t *s, size_t i, size_t n, size_t clen)
{
    size_t l;
    i += clen;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            if ((zpi_uni_blocks[c] & ZPI_CLS_MASK) != ZPI_CLS_OTHER)
                break;
            i++;
        } else {
            if (zpi_scan_cls4(s, i, n, &l) != ZPI_CLS_OTHER)
                break;
            i += l;
        }
    }
    return i;
}

/* ------------------------------------------------------------ cl100k, Qwen 2
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,3} |
 *    ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
 * Qwen 2 (max_digits 1) has \p{N} where cl100k has \p{N}{1,3}. */
ZPI_SCAN_INLINE size_t zpi_scan_cl100k_t(const uint8_t *s, size_t i, size_t n,
                                         unsigned max_digits)
{
    uint8_t b = s[i];
    size_t clen, l;
    unsigned cls;
    if (b == '\'') {
        size_t c = zpi_scan_contraction(s, i, n);
        if (c)
            return i + c;
    }
    cls = zpi_scan_cls4(s, i, n, &clen);
    if (cls == ZPI_CLS_LETTER) {
        i += clen;
        goto letters;
    }
    if (cls == ZPI_CLS_NUMBER) {
        return zpi_scan_digits(s, i, n, clen, max_digits);
    }
    /* [^\r\n\p{L}\p{N}]\p{L}+ */
    if (b != '\r' && b != '\n' && i + clen < n &&
        zpi_scan_cls4(s, i + clen, n, &l) == ZPI_CLS_LETTER) {
        i += clen + l;
        goto letters;
    }
    if (cls == ZPI_CLS_SPACE) {
        /* " ?[^\s\p{L}\p{N}]+" */
        if (b == ' ' && i + 1 < n && zpi_scan_cls4(s, i + 1, n, &l) == ZPI_CLS_OTHER) {
            i += 1;
            cls = ZPI_CLS_OTHER;
            clen = l;
        } else {
            return zpi_scan_space_nl(s, i, n, clen);
        }
    }
    /* [^\s\p{L}\p{N}]+[\r\n]* */
    i = zpi_scan_other_run(s, i, n, clen);
    while (i < n && (s[i] == '\r' || s[i] == '\n'))
        i++;
    return i;
letters:
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            if ((zpi_uni_blocks[c] & ZPI_CLS_MASK) != ZPI_CLS_LETTER)
                return i;
            i++;
        } else {
            if (zpi_scan_cls4(s, i, n, &l) != ZPI_CLS_LETTER)
                return i;
            i += l;
        }
    }
    return i;
}

ZPI_SCAN_INLINE size_t zpi_scan_cl100k(const uint8_t *s, size_t i, size_t n)
{
    return zpi_scan_cl100k_t(s, i, n, 3);
}

ZPI_SCAN_INLINE size_t zpi_scan_qwen2(const uint8_t *s, size_t i, size_t n)
{
    return zpi_scan_cl100k_t(s, i, n, 1);
}

/* ------------------------------------------------------------ o200k
 *   [^\r\n\p{L}\p{N}]?[UP]*[LO]+(?i:'s|'t|'re|'ve|'m|'ll|'d)? |
 *   [^\r\n\p{L}\p{N}]?[UP]+[LO]*(?i:'s|'t|'re|'ve|'m|'ll|'d)? |
 *   \p{N}{1,3} | ?[^\s\p{L}\p{N}]+[\r\n/]* | \s*[\r\n]+ | \s+(?!\S) | \s+
 * UP = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], LO = [\p{Ll}\p{Lm}\p{Lo}\p{M}]. */

/* [UP]*[LO]+ then [UP]+[LO]* from q, as the backtracking engine takes them:
 * the longest UP run, then the longest LO run after it; when no LO
 * character follows the UP run, the run gives characters back up to its
 * last one that is also LO (Lm, Lo, M), which then ends the match. Returns
 * the end, or 0 when neither matches at q (q < n); *alt: which alternative
 * matched (1 or 2). */
ZPI_SCAN_INLINE size_t zpi_scan_o200k_word(const uint8_t *s, size_t q, size_t n, int *alt)
{
    size_t i = q, l, last_both = 0;
    unsigned cls = 0;
    while (i < n) {
        cls = zpi_scan_cls(s, i, n, &l);
        if (!(cls & ZPI_UNI_UP))
            break;
        if (cls & ZPI_UNI_LO)
            last_both = i + l;
        i += l;
    }
    if (i < n && (cls & ZPI_UNI_LO) && !(cls & ZPI_UNI_UP)) {
        /* [LO]+ after the UP run */
        i += l;
        while (i < n) {
            uint8_t c = s[i];
            if (c < 0x80) {
                if (!(zpi_uni_blocks[c] & ZPI_UNI_LO))
                    break;
                i++;
                continue;
            }
            if (!(zpi_scan_cls(s, i, n, &l) & ZPI_UNI_LO))
                break;
            i += l;
        }
        *alt = 1;
        return i;
    }
    *alt = last_both ? 1 : 2;
    if (last_both)
        return last_both; /* alternative 1, giving back the UP-only tail */
    return i > q ? i : 0; /* alternative 2 ([LO]* empty) or no match */
}

ZPI_SCAN_INLINE size_t zpi_scan_o200k(const uint8_t *s, size_t i, size_t n)
{
    uint8_t b = s[i];
    size_t clen, l, e;
    int alt;
    unsigned cls = zpi_scan_cls(s, i, n, &clen);
    unsigned c4 = cls & ZPI_CLS_MASK;
    /* the two word alternatives, in the engine's order: 1 with the
     * one-character prefix [^\r\n\p{L}\p{N}], 1 without it, 2 with it, 2
     * without it. "Without" differs from "with" only for a mark (UP and LO,
     * yet not \p{L}), and alternative 1 always matches from a mark. */
    if (c4 == ZPI_CLS_LETTER) {
        e = zpi_scan_o200k_word(s, i, n, &alt);
        goto suffix;
    }
    if (c4 != ZPI_CLS_NUMBER && b != '\r' && b != '\n') {
        e = i + clen < n ? zpi_scan_o200k_word(s, i + clen, n, &alt) : 0;
        if (e && (alt == 1 || !(cls & ZPI_UNI_UP)))
            goto suffix;
        if (cls & ZPI_UNI_UP) {
            e = zpi_scan_o200k_word(s, i, n, &alt);
            goto suffix;
        }
    }
    if (c4 == ZPI_CLS_NUMBER) {
        return zpi_scan_digits(s, i, n, clen, 3);
    }
    if (c4 == ZPI_CLS_SPACE) {
        if (b == ' ' && i + 1 < n && zpi_scan_cls4(s, i + 1, n, &l) == ZPI_CLS_OTHER) {
            i += 1;
            clen = l;
        } else {
            return zpi_scan_space_nl(s, i, n, clen);
        }
    }
    /* [^\s\p{L}\p{N}]+[\r\n/]* */
    i = zpi_scan_other_run(s, i, n, clen);
    while (i < n && (s[i] == '\r' || s[i] == '\n' || s[i] == '/'))
        i++;
    return i;
suffix:
    if (e < n && s[e] == '\'') {
        size_t c = zpi_scan_contraction(s, e, n);
        e += c;
    }
    return e;
}

#endif
