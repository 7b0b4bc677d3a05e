/*
 * utf8.h - decoding one UTF-8 character (private; src/base/tokenizer).
 * Header-only and including nothing of the tokenizer, so that the
 * pre-tokenizer's scanners (pretok_scan.h) and the encoders share it
 * without depending on each other.
 */
#ifndef ZP_TOKENIZER_UTF8_H
#define ZP_TOKENIZER_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Decode one UTF-8 character at s[0..n) (n >= 1). Returns its length, or 0
 * when s does not start with a valid sequence: overlong forms, surrogates
 * (ED A0..BF), code points above U+10FFFF, stray continuation bytes and
 * truncated sequences are invalid. *cp gets the code point. */
static inline size_t zpi_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp)
{
    uint32_t b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    if (b < 0xC2)
        return 0;
    if (b < 0xE0) {
        if (n < 2 || (s[1] & 0xC0) != 0x80)
            return 0;
        *cp = ((b & 0x1F) << 6) | (s[1] & 0x3Fu);
        return 2;
    }
    if (b < 0xF0) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80)
            return 0;
        uint32_t c = ((b & 0x0F) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
        if (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF))
            return 0;
        *cp = c;
        return 3;
    }
    if (b < 0xF5) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        uint32_t c = ((b & 0x07) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) |
                     (s[3] & 0x3Fu);
        if (c < 0x10000 || c > 0x10FFFF)
            return 0;
        *cp = c;
        return 4;
    }
    return 0;
}

#endif
