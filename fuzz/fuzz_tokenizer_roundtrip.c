/*
 * fuzz_tokenizer_roundtrip.c - the GPT-2 tokenizer (include/zephon/
 * tokenizer.h) on any bytes:
 *
 *  - zp_encode() succeeds, gives at most one id per byte, every id is below
 *    the vocabulary size and none is the end-of-text id;
 *  - zp_decode() of those ids gives the input bytes back exactly;
 *  - an encoder without the piece cache gives the same ids as one with it
 *    (both live across inputs, so the cache holds pieces of earlier inputs).
 *
 * Input: raw text bytes (NUL and invalid UTF-8 included).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "zephon/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static zp_tokenizer *g_tok, *g_tok_nocache;
static zp_encoder *g_enc, *g_enc_nocache;

static void init(void)
{
    char err[512];
    zp_tokenizer_config cfg;
    zp_tokenizer_config_init(&cfg);
    FUZZ_CHECK(zp_tokenizer_create("gpt2", &cfg, &g_tok, err, sizeof err) == ZP_OK, "%s", err);
    cfg.cache_entries = 0;
    FUZZ_CHECK(zp_tokenizer_create("gpt2", &cfg, &g_tok_nocache, err, sizeof err) == ZP_OK, "%s",
               err);
    FUZZ_CHECK(zp_encoder_create(g_tok, &g_enc) == ZP_OK, "encoder");
    FUZZ_CHECK(zp_encoder_create(g_tok_nocache, &g_enc_nocache) == ZP_OK, "encoder");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_tok)
        init();
    const char *text = size ? (const char *)data : "";
    int32_t *ids = malloc((size + 1) * sizeof *ids);
    int32_t *ids2 = malloc((size + 1) * sizeof *ids2);
    char *back = malloc(size + 1);
    FUZZ_CHECK(ids && ids2 && back, "out of memory");
    size_t n = 0, n2 = 0;
    FUZZ_CHECK(zp_encode(g_enc, text, size, ids, &n) == ZP_OK, "zp_encode failed");
    FUZZ_CHECK(n <= size, "%zu ids for %zu bytes", n, size);
    size_t vocab = zp_tokenizer_vocab_size(g_tok);
    int32_t eot = zp_tokenizer_eot(g_tok);
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(ids[i] >= 0 && (size_t)ids[i] < vocab && ids[i] != eot, "id %d at %zu",
                   (int)ids[i], i);

    size_t len = 0;
    zp_status st = zp_decode(g_tok, ids, n, back, size + 1, &len);
    FUZZ_CHECK(st == ZP_OK, "zp_decode: %s", zp_status_str(st));
    FUZZ_CHECK(len == size && memcmp(back, text, size) == 0,
               "decode(encode(x)) != x (%zu bytes back for %zu)", len, size);

    FUZZ_CHECK(zp_encode(g_enc_nocache, text, size, ids2, &n2) == ZP_OK, "zp_encode (no cache)");
    FUZZ_CHECK(n2 == n && memcmp(ids, ids2, n * sizeof *ids) == 0,
               "the cache changes the ids (%zu vs %zu ids)", n, n2);
    free(ids);
    free(ids2);
    free(back);
    return 0;
}
