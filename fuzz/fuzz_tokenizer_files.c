/*
 * fuzz_tokenizer_files.c - the tokenizers loaded from files and the
 * tiktoken built-ins (include/zephon/tokenizer.h) on any bytes:
 *
 *  - two tokenizer.json files the target writes at start-up: a byte-level
 *    BPE (ByteLevel pre-tokenizer with GPT-2's regex, the 256 byte tokens,
 *    merges, an added special token) and a SentencePiece-style BPE (NFKC,
 *    Replace " " -> U+2581, Prepend, Digits and Metaspace pre-tokenizers,
 *    byte_fallback <0xXX>, unk, fuse_unk, an lstrip/rstrip added token),
 *    each also with match_special = 1;
 *  - cl100k_base and o200k_base (built-in tiktoken rank files), and a rank
 *    file by path (the target writes a 256-byte + merges one, named
 *    cl100k:PATH).
 *
 * For every tokenizer: zp_encode() succeeds, gives at most
 * zp_encode_max_ids() ids, every id is below the vocabulary size, and a
 * second encoder gives the same ids (caches filled by earlier inputs change
 * nothing). For the tiktoken ones also decode(encode(x)) == x.
 *
 * Input: raw text bytes (NUL and invalid UTF-8 included).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_common.h"
#include "zephon/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define N_TOK 7

static zp_tokenizer *g_tok[N_TOK];
static zp_encoder *g_enc[N_TOK], *g_enc2[N_TOK];
static int g_roundtrip[N_TOK];

/* The character GPT-2's byte-level alphabet gives byte b, as UTF-8. */
static size_t byte_char(unsigned b, char *out)
{
    unsigned cp;
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) {
        cp = b;
    } else {
        unsigned n = 0;
        for (unsigned c = 0; c < b; c++)
            if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)))
                n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* A JSON string of the byte-level alphabet's spelling of s. */
static void put_bl(FILE *f, const char *s)
{
    char c[4];
    for (; *s; s++) {
        size_t n = byte_char((unsigned char)*s, c);
        if (n == 1 && (c[0] == '"' || c[0] == '\\'))
            fputc('\\', f);
        fwrite(c, 1, n, f);
    }
}

static void write_bytelevel(const char *dir)
{
    char p[600];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    FILE *f = fopen(p, "wb");
    FUZZ_CHECK(f, "cannot write %s", p);
    static const char *merges[][2] = {{"t", "h"}, {"th", "e"}, {" ", "the"}, {"i", "n"},
                                      {" ", "in"}, {"e", "r"}, {"1", "2"}, {"\xc3", "\xa9"},
                                      {" ", "t"}, {"a", "n"}, {"an", "d"}, {" ", "and"}};
    size_t nm = sizeof merges / sizeof merges[0];
    fputs("{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 300, \"content\": "
          "\"<|endoftext|>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
          "\"normalized\": false, \"special\": true}], \"normalizer\": null, "
          "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
          "\"trim_offsets\": true, \"use_regex\": true}, \"post_processor\": null, "
          "\"decoder\": null, \"model\": {\"type\": \"BPE\", \"dropout\": null, "
          "\"unk_token\": null, \"fuse_unk\": false, \"byte_fallback\": false, "
          "\"ignore_merges\": false, \"vocab\": {",
          f);
    for (unsigned b = 0; b < 256; b++) {
        char s[2] = {(char)b, 0};
        fputs(b ? ", \"" : "\"", f);
        if (b == 0) {
            char c[4];
            size_t n = byte_char(0, c);
            fwrite(c, 1, n, f);
        } else {
            put_bl(f, s);
        }
        fprintf(f, "\": %u", b);
    }
    for (size_t i = 0; i < nm; i++) {
        char s[16];
        snprintf(s, sizeof s, "%s%s", merges[i][0], merges[i][1]);
        fputs(", \"", f);
        put_bl(f, s);
        fprintf(f, "\": %zu", 256 + i);
    }
    fputs(", \"<|endoftext|>\": 300}, \"merges\": [", f);
    for (size_t i = 0; i < nm; i++) {
        fputs(i ? ", \"" : "\"", f);
        put_bl(f, merges[i][0]);
        fputc(' ', f);
        put_bl(f, merges[i][1]);
        fputc('"', f);
    }
    fputs("]}}\n", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    f = fopen(p, "wb");
    FUZZ_CHECK(f, "cannot write %s", p);
    fputs("{\"eos_token\": \"<|endoftext|>\"}\n", f);
    fclose(f);
}

static void write_sentencepiece(const char *dir)
{
    char p[600];
    snprintf(p, sizeof p, "%s/sp.json", dir);
    FILE *f = fopen(p, "wb");
    FUZZ_CHECK(f, "cannot write %s", p);
    fputs("{\"version\": \"1.0\", \"added_tokens\": ["
          "{\"id\": 1, \"content\": \"<s>\", \"single_word\": false, \"lstrip\": false, "
          "\"rstrip\": false, \"normalized\": false, \"special\": true}, "
          "{\"id\": 2, \"content\": \"</s>\", \"single_word\": false, \"lstrip\": false, "
          "\"rstrip\": false, \"normalized\": false, \"special\": true}, "
          "{\"id\": 270, \"content\": \"<mask>\", \"single_word\": false, \"lstrip\": true, "
          "\"rstrip\": true, \"normalized\": true, \"special\": false}], "
          "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKC\"}, "
          "{\"type\": \"Prepend\", \"prepend\": \"\xe2\x96\x81\"}, {\"type\": \"Replace\", "
          "\"pattern\": {\"String\": \" \"}, \"content\": \"\xe2\x96\x81\"}]}, "
          "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
          "\"Digits\", \"individual_digits\": true}, {\"type\": \"Metaspace\", \"replacement\": "
          "\"\xe2\x96\x81\", \"prepend_scheme\": \"never\", \"split\": true}]}, "
          "\"post_processor\": null, \"decoder\": null, \"model\": {\"type\": \"BPE\", "
          "\"dropout\": null, \"unk_token\": \"<unk>\", \"fuse_unk\": true, "
          "\"byte_fallback\": true, \"ignore_merges\": false, \"vocab\": {\"<unk>\": 0, "
          "\"<s>\": 1, \"</s>\": 2",
          f);
    for (unsigned b = 0; b < 256; b++)
        fprintf(f, ", \"<0x%02X>\": %u", b, 3 + b);
    static const char *pieces[] = {"\xe2\x96\x81", "a", "b", "c", "1", "ab", "abc",
                                   "\xe2\x96\x81"
                                   "a",
                                   "\xe2\x96\x81"
                                   "ab",
                                   "\xc3\xa9", "\xe4\xb8\xad"};
    size_t np = sizeof pieces / sizeof pieces[0];
    for (size_t i = 0; i < np; i++)
        fprintf(f, ", \"%s\": %zu", pieces[i], 259 + i);
    fputs(", \"<mask>\": 270}, \"merges\": [\"a b\", \"ab c\", \"\xe2\x96\x81 a\", "
          "\"\xe2\x96\x81" "a b\"]}}\n",
          f);
    fclose(f);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    f = fopen(p, "wb");
    FUZZ_CHECK(f, "cannot write %s", p);
    fputs("{\"eos_token\": \"</s>\", \"bos_token\": \"<s>\", \"add_bos_token\": true}\n", f);
    fclose(f);
}

static void b64(const uint8_t *s, size_t n, char *out)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)s[i + 1] << 8;
        if (i + 2 < n)
            v |= s[i + 2];
        out[o++] = a[(v >> 18) & 63];
        out[o++] = a[(v >> 12) & 63];
        out[o++] = i + 1 < n ? a[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? a[v & 63] : '=';
    }
    out[o] = 0;
}

static void write_tiktoken(const char *path)
{
    FILE *f = fopen(path, "wb");
    FUZZ_CHECK(f, "cannot write %s", path);
    char line[64];
    for (unsigned b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        b64(&c, 1, line);
        fprintf(f, "%s %u\n", line, b);
    }
    static const char *more[] = {"th", "the", " the", "in", " in", "er", "12", "\xc3\xa9", " t"};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) {
        b64((const uint8_t *)more[i], strlen(more[i]), line);
        fprintf(f, "%s %zu\n", line, 256 + i);
    }
    fclose(f);
}

static void load(int k, const char *id, int match_special, int roundtrip)
{
    char err[1024] = "";
    zp_tokenizer_config cfg;
    zp_tokenizer_config_init(&cfg);
    cfg.match_special = match_special;
    FUZZ_CHECK(zp_tokenizer_create(id, &cfg, &g_tok[k], err, sizeof err) == ZP_OK, "%s: %s", id,
               err);
    FUZZ_CHECK(zp_encoder_create(g_tok[k], &g_enc[k]) == ZP_OK, "encoder");
    FUZZ_CHECK(zp_encoder_create(g_tok[k], &g_enc2[k]) == ZP_OK, "encoder");
    g_roundtrip[k] = roundtrip;
}

static void init(void)
{
    const char *dir = fuzz_tmpdir();
    char bl[300], sp[320], tk[300], tkid[320];
    snprintf(bl, sizeof bl, "%s/bytelevel", dir);
    mkdir(bl, 0700);
    write_bytelevel(bl);
    snprintf(sp, sizeof sp, "%s/sp", dir);
    mkdir(sp, 0700);
    write_sentencepiece(sp);
    snprintf(sp, sizeof sp, "%s/sp/sp.json", dir);
    snprintf(tk, sizeof tk, "%s/small.tiktoken", dir);
    write_tiktoken(tk);
    snprintf(tkid, sizeof tkid, "cl100k:%s", tk);
    load(0, bl, 0, 0);
    load(1, bl, 1, 0);
    load(2, sp, 0, 0);
    load(3, sp, 1, 0);
    load(4, "cl100k_base", 0, 1);
    load(5, "o200k_base", 0, 1);
    load(6, tkid, 0, 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_tok[0])
        init();
    const char *text = size ? (const char *)data : "";
    for (int k = 0; k < N_TOK; k++) {
        size_t cap = zp_encode_max_ids(g_tok[k], size);
        FUZZ_CHECK(cap >= size, "tokenizer %d: max_ids %zu for %zu bytes", k, cap, size);
        int32_t *ids = malloc((cap + 1) * sizeof *ids);
        int32_t *ids2 = malloc((cap + 1) * sizeof *ids2);
        FUZZ_CHECK(ids && ids2, "out of memory");
        size_t n = 0, n2 = 0;
        zp_status st = zp_encode(g_enc[k], text, size, ids, &n);
        FUZZ_CHECK(st == ZP_OK, "tokenizer %d: zp_encode: %s", k, zp_status_str(st));
        FUZZ_CHECK(n <= cap, "tokenizer %d: %zu ids, at most %zu", k, n, cap);
        size_t vocab = zp_tokenizer_vocab_size(g_tok[k]);
        for (size_t i = 0; i < n; i++)
            FUZZ_CHECK(ids[i] >= 0 && (size_t)ids[i] < vocab, "tokenizer %d: id %d at %zu", k,
                       (int)ids[i], i);
        /* every other input through the second encoder too, so that the
         * two encoders' caches hold different pieces */
        if (size % 2 == 0 || k >= 4) {
            st = zp_encode(g_enc2[k], text, size, ids2, &n2);
            FUZZ_CHECK(st == ZP_OK, "tokenizer %d: zp_encode (2nd encoder)", k);
            FUZZ_CHECK(n2 == n && memcmp(ids, ids2, n * sizeof *ids) == 0,
                       "tokenizer %d: the encoders disagree (%zu vs %zu ids)", k, n, n2);
        }
        if (g_roundtrip[k]) {
            char *back = malloc(size + 1);
            size_t len = 0;
            FUZZ_CHECK(back, "out of memory");
            st = zp_decode(g_tok[k], ids, n, back, size + 1, &len);
            FUZZ_CHECK(st == ZP_OK, "tokenizer %d: zp_decode: %s", k, zp_status_str(st));
            FUZZ_CHECK(len == size && memcmp(back, text, size) == 0,
                       "tokenizer %d: decode(encode(x)) != x", k);
            free(back);
        }
        free(ids);
        free(ids2);
    }
    return 0;
}
