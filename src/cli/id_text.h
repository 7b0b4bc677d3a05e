/*
 * id_text.h - token ids as decimal text, for `zephon tokenize`.
 *
 * zpc_id_put() appends an id's decimal form and a comma. Ids below 10^6
 * (every shipped tokenizer's vocabulary, o200k_base's 200,019 included) take
 * two lookups in tables of 1,000 entries (9 KB, which stay in the L1 cache
 * beside the encoder's tables) and one unaligned 8-byte store: the id is cut
 * into its thousands and the three digits below them. An earlier table of
 * every id's text (8 bytes per id, 400 KB for GPT-2) missed the cache on
 * most lookups: 4 ns an id, 6.8% of a 1-thread `zephon tokenize`.
 *
 * The caller leaves 8 bytes of room past the text's end (the store's
 * overhang); the bytes past the returned end are not meaningful.
 */
#ifndef ZEPHON_CLI_ID_TEXT_H
#define ZEPHON_CLI_ID_TEXT_H

#include <stdint.h>
#include <string.h>

typedef struct zpc_id_text {
    uint32_t pad[1000];     /* i as 3 digits, zero-padded, then ','       */
    uint32_t lead[1000];    /* i's digits without leading zeros; 0: none   */
    uint8_t lead_len[1000]; /* their count (0 for i = 0)                   */
    uint8_t zeros[1000];    /* pad[i]'s leading zeros when i is a whole id
                               (i = 0 keeps its one digit: 2)              */
} zpc_id_text;

static inline void zpc_id_text_init(zpc_id_text *t)
{
    for (uint32_t i = 0; i < 1000; i++) {
        char d[4] = {(char)('0' + i / 100), (char)('0' + i / 10 % 10), (char)('0' + i % 10), ','};
        memcpy(&t->pad[i], d, 4);
        unsigned z = i >= 100 ? 0 : i >= 10 ? 1 : 2;
        t->zeros[i] = (uint8_t)z;
        t->lead_len[i] = (uint8_t)(i ? 3 - z : 0);
        uint32_t lead = 0;
        memcpy(&lead, d + z, 3 - z);
        t->lead[i] = i ? lead : 0;
    }
}

/* The decimal form of any uint32 u at p, without a comma (at most 10
 * bytes); returns the end. */
static inline char *zpc_u32_put(char *p, uint32_t u)
{
    char tmp[10];
    char *q = tmp + sizeof tmp;
    do {
        *--q = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    size_t n = (size_t)(tmp + sizeof tmp - q);
    memcpy(p, q, n);
    return p + n;
}

/* Append id's decimal form and ',' at p; returns the new end. Writes up to
 * 8 bytes past it (ids below 10^6) or 12 bytes in all (larger ids). */
static inline char *zpc_id_put(const zpc_id_text *t, char *p, uint32_t id)
{
    if (id < 1000000) {
        uint32_t hi = id / 1000, lo = id - hi * 1000;
        unsigned hl = t->lead_len[hi];
        /* the thousands' digits, then the padded three; a whole id below
         * 1000 drops the padding's zeros (no branch: hi = 0 has hl = 0) */
        unsigned z = t->zeros[lo] & (0u - (unsigned)(hi == 0));
        uint64_t v = ((uint64_t)t->pad[lo] << (8 * hl) | t->lead[hi]) >> (8 * z);
        memcpy(p, &v, 8);
        return p + hl + 4 - z;
    }
    p = zpc_u32_put(p, id);
    *p++ = ',';
    return p;
}

#endif
