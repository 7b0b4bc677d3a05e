/*
 * tok_gpt2_data.c - embeds data/gpt2/vocab.bpe (OpenAI's GPT-2 merges, see
 * data/gpt2/LICENSE) into the library with the assembler's .incbin, so that
 * zp_tokenizer_create("gpt2") needs no file and no network at run time.
 *
 * The build defines ZP_GPT2_VOCAB_BPE to the file's absolute path as a
 * string literal (src/base/tokenizer/sources.cmake). The symbols are hidden:
 * they are not part of libzephon's ABI. The bytes are read-only data
 * (.rodata); zpi_gpt2_vocab_bpe_end points just past the last byte of the
 * file (a NUL byte follows it, not counted).
 */
#include "base/tokenizer/tok_internal.h"

#ifndef ZP_GPT2_VOCAB_BPE
#error "define ZP_GPT2_VOCAB_BPE to the path of data/gpt2/vocab.bpe (a string literal)"
#endif

__asm__(".pushsection .rodata.zpi_gpt2_vocab_bpe,\"a\",@progbits\n"
        ".balign 16\n"
        ".globl zpi_gpt2_vocab_bpe\n"
        ".hidden zpi_gpt2_vocab_bpe\n"
        ".type zpi_gpt2_vocab_bpe, @object\n"
        "zpi_gpt2_vocab_bpe:\n"
        ".incbin \"" ZP_GPT2_VOCAB_BPE "\"\n"
        ".globl zpi_gpt2_vocab_bpe_end\n"
        ".hidden zpi_gpt2_vocab_bpe_end\n"
        "zpi_gpt2_vocab_bpe_end:\n"
        ".byte 0\n"
        ".size zpi_gpt2_vocab_bpe, . - zpi_gpt2_vocab_bpe\n"
        ".popsection\n");
