/*
 * tok_tiktoken_data.c - embeds the built-in tiktoken rank files
 * (data/tiktoken/{p50k_base,cl100k_base,o200k_base}.tiktoken, written by
 * data/tiktoken/convert.py, MIT licence in data/tiktoken/LICENSE) into the
 * library with the assembler's .incbin, as tok_gpt2_data.c does for GPT-2:
 * zp_tokenizer_create("cl100k_base") needs no file and no network at run
 * time. The bytes are read-only data: only the pages of the vocabulary a
 * process loads are ever read from disk.
 *
 * The build defines ZP_TIKTOKEN_DIR to data/tiktoken's absolute path as a
 * string literal (src/base/tokenizer/sources.cmake). The symbols are hidden.
 */
#include "base/tokenizer/tiktoken.h"

#ifndef ZP_TIKTOKEN_DIR
#error "define ZP_TIKTOKEN_DIR to the path of data/tiktoken (a string literal)"
#endif

#define ZPI_EMBED(sym, file)                                                                       \
    __asm__(".pushsection .rodata." #sym ",\"a\",@progbits\n"                                       \
            ".balign 16\n"                                                                         \
            ".globl " #sym "\n"                                                                    \
            ".hidden " #sym "\n"                                                                   \
            ".type " #sym ", @object\n" #sym ":\n"                                                 \
            ".incbin \"" ZP_TIKTOKEN_DIR "/" file "\"\n"                                           \
            ".globl " #sym "_end\n"                                                                \
            ".hidden " #sym "_end\n" #sym "_end:\n"                                                \
            ".byte 0\n"                                                                            \
            ".size " #sym ", . - " #sym "\n"                                                       \
            ".popsection\n")

ZPI_EMBED(zpi_tiktoken_p50k_base, "p50k_base.tiktoken");
ZPI_EMBED(zpi_tiktoken_cl100k_base, "cl100k_base.tiktoken");
ZPI_EMBED(zpi_tiktoken_o200k_base, "o200k_base.tiktoken");
