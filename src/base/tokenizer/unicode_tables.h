/*
 * unicode_tables.h - code point classes for the pre-tokenizers' scanners
 * (private; pretok_scan.h). The tables are generated (unicode_tables.c, from
 * gen_unicode_tables.mjs) from the Unicode 16.0 database.
 */
#ifndef ZP_TOKENIZER_UNICODE_TABLES_H
#define ZP_TOKENIZER_UNICODE_TABLES_H

#include <stdint.h>

enum {
    ZPI_CLS_OTHER = 0,  /* not \s, not \p{L}, not \p{N} (also invalid UTF-8) */
    ZPI_CLS_LETTER = 1, /* General_Category L */
    ZPI_CLS_NUMBER = 2, /* General_Category N */
    ZPI_CLS_SPACE = 3,  /* White_Space */
    ZPI_CLS_MASK = 3,   /* the class is the low two bits of a table entry */
    ZPI_UNI_UP = 4,     /* flag: [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] (o200k) */
    ZPI_UNI_LO = 8      /* flag: [\p{Ll}\p{Lm}\p{Lo}\p{M}] (o200k) */
};

#define ZPI_UNI_SHIFT 7

extern const uint8_t zpi_uni_index[0x110000 >> ZPI_UNI_SHIFT];
extern const uint8_t zpi_uni_blocks[];

/* Table entry of code point cp (cp <= 0x10FFFF): class | flags. */
static inline unsigned zpi_uni_class(uint32_t cp)
{
    return zpi_uni_blocks[((uint32_t)zpi_uni_index[cp >> ZPI_UNI_SHIFT] << ZPI_UNI_SHIFT) |
                          (cp & ((1u << ZPI_UNI_SHIFT) - 1))];
}

#endif
