/*
 * test_tokenizer.c - GPT-2 byte-level BPE: parity with tiktoken on the
 * committed corpus, round trips, invalid UTF-8, NUL, long pieces, loading
 * other vocabulary formats, errors, the `zephon tokenize` command, and two
 * threads sharing one tokenizer.
 *
 * Data: ZP_TEST_DATA/tokenizer/corpus.jsonl and expected.jsonl (made once by
 * src/base/tokenizer/gen_expected.mjs from tiktoken's Rust core), and the shipped
 * vocabulary in ZP_TEST_DATA/../../data/gpt2.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/tokenizer/tok_internal.h"
#include "base/tokenizer/unicode_tables.h"
#include "zephon/tokenizer.h"

#ifndef ZP_TEST_DATA
#error "ZP_TEST_DATA must be defined"
#endif

#define CORPUS ZP_TEST_DATA "/tokenizer/corpus.jsonl"
#define EXPECTED ZP_TEST_DATA "/tokenizer/expected.jsonl"
#define GPT2_DIR ZP_TEST_DATA "/../../data/gpt2"

/* ------------------------------------------------------------ helpers */

typedef struct text {
    char *s;
    size_t n;
} text;

typedef struct idlist {
    int32_t *v;
    size_t n;
} idlist;

typedef struct corpus {
    text *texts;
    idlist *expected;
    size_t n;
} corpus;

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        print_error("cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 20, n = 0;
    char *b = malloc(cap + 1);
    assert_non_null(b);
    size_t got;
    while ((got = fread(b + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            b = realloc(b, cap + 1);
            assert_non_null(b);
        }
    }
    fclose(f);
    b[n] = '\0';
    if (len)
        *len = n;
    return b;
}

/* Every line of a JSONL file, parsed. */
static json_t **load_jsonl(const char *path, size_t *count)
{
    size_t len;
    char *buf = slurp(path, &len);
    assert_non_null(buf);
    size_t cap = 512, n = 0;
    json_t **v = malloc(cap * sizeof *v);
    char *p = buf, *end = buf + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (l > 0) {
            json_error_t jerr;
            json_t *j = json_loadb(p, l, JSON_ALLOW_NUL, &jerr);
            if (!j)
                print_error("%s:%zu: %s\n", path, n + 1, jerr.text);
            assert_non_null(j);
            if (n == cap) {
                cap *= 2;
                v = realloc(v, cap * sizeof *v);
            }
            v[n++] = j;
        }
        p += l + 1;
    }
    free(buf);
    *count = n;
    return v;
}

static corpus *corpus_load(void)
{
    size_t nt, ne;
    json_t **t = load_jsonl(CORPUS, &nt);
    json_t **e = load_jsonl(EXPECTED, &ne);
    assert_int_equal(nt, ne);
    assert_true(nt > 100);
    corpus *c = calloc(1, sizeof *c);
    c->n = nt;
    c->texts = calloc(nt, sizeof *c->texts);
    c->expected = calloc(nt, sizeof *c->expected);
    for (size_t i = 0; i < nt; i++) {
        json_t *s = json_object_get(t[i], "text");
        assert_true(json_is_string(s));
        c->texts[i].n = json_string_length(s);
        c->texts[i].s = malloc(c->texts[i].n + 1);
        memcpy(c->texts[i].s, json_string_value(s), c->texts[i].n + 1);
        json_t *ids = json_object_get(e[i], "ids");
        assert_true(json_is_array(ids));
        c->expected[i].n = json_array_size(ids);
        c->expected[i].v = malloc((c->expected[i].n + 1) * sizeof(int32_t));
        for (size_t k = 0; k < c->expected[i].n; k++)
            c->expected[i].v[k] = (int32_t)json_integer_value(json_array_get(ids, k));
        json_decref(t[i]);
        json_decref(e[i]);
    }
    free(t);
    free(e);
    return c;
}

static void corpus_free(corpus *c)
{
    for (size_t i = 0; i < c->n; i++) {
        free(c->texts[i].s);
        free(c->expected[i].v);
    }
    free(c->texts);
    free(c->expected);
    free(c);
}

static zp_tokenizer *make_tok(const char *id, size_t cache_entries)
{
    zp_tokenizer_config cfg;
    zp_tokenizer_config_init(&cfg);
    cfg.cache_entries = cache_entries;
    zp_tokenizer *t = NULL;
    char err[512];
    zp_status st = zp_tokenizer_create(id, &cfg, &t, err, sizeof err);
    if (st != ZP_OK)
        print_error("zp_tokenizer_create(%s): %s\n", id, err);
    assert_int_equal(st, ZP_OK);
    assert_non_null(t);
    return t;
}

/* Encode; caller frees the ids. */
static int32_t *encode(zp_encoder *e, const char *s, size_t n, size_t *n_ids)
{
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    assert_non_null(ids);
    assert_int_equal(zp_encode(e, s, n, ids, n_ids), ZP_OK);
    assert_true(*n_ids <= n);
    return ids;
}

static void assert_roundtrip(const zp_tokenizer *t, const int32_t *ids, size_t n_ids,
                             const char *s, size_t n)
{
    char *out = malloc(n + 1);
    size_t out_len = 0;
    assert_int_equal(zp_decode(t, ids, n_ids, out, n + 1, &out_len), ZP_OK);
    assert_int_equal(out_len, n);
    assert_memory_equal(out, s, n);
    free(out);
}

/* Compare with the expected ids of corpus line `line` (1-based); returns 0
 * when equal, else prints the line and the first differing position. */
static int compare_ids(const char *what, size_t line, const int32_t *got, size_t n_got,
                       const idlist *want)
{
    size_t k = 0;
    while (k < n_got && k < want->n && got[k] == want->v[k])
        k++;
    if (k == n_got && k == want->n)
        return 0;
    print_error("%s: corpus line %zu: first difference at id %zu of %zu (expected %zu ids): "
                "got %d, expected %d\n",
                what, line, k, n_got, want->n, k < n_got ? (int)got[k] : -1,
                k < want->n ? (int)want->v[k] : -1);
    return 1;
}

/* Check every corpus line against expected.jsonl with tokenizer t. */
static void check_parity(const char *what, const zp_tokenizer *t, const corpus *c, int passes)
{
    zp_encoder *e = NULL;
    assert_int_equal(zp_encoder_create(t, &e), ZP_OK);
    size_t bad = 0;
    /* two passes: the second one hits the cache */
    for (int pass = 0; pass < passes; pass++) {
        for (size_t i = 0; i < c->n; i++) {
            size_t n_ids = 0;
            int32_t *ids = encode(e, c->texts[i].s, c->texts[i].n, &n_ids);
            bad += (size_t)compare_ids(what, i + 1, ids, n_ids, &c->expected[i]);
            free(ids);
        }
    }
    zp_encoder_destroy(e);
    assert_int_equal(bad, 0);
}

/* Deterministic PRNG for the random tests. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* ------------------------------------------------------------ tests */

static void test_parity_with_tiktoken(void **state)
{
    corpus *c = *state;
    zp_tokenizer *t = make_tok("gpt2", 16384);
    check_parity("gpt2 (cache on)", t, c, 2);
    zp_tokenizer_destroy(t);
}

static void test_parity_cache_off_and_tiny(void **state)
{
    corpus *c = *state;
    zp_tokenizer *t = make_tok("gpt2", 0);
    check_parity("gpt2 (cache off)", t, c, 1);
    zp_tokenizer_destroy(t);
    t = make_tok("gpt2", 4); /* one set: constant eviction */
    check_parity("gpt2 (4-entry cache)", t, c, 2);
    zp_tokenizer_destroy(t);
}

/* The heap merge (long pieces) gives the same ids as the quadratic merge. */
static void test_heap_merge_matches_short_merge(void **state)
{
    corpus *c = *state;
    zp_tokenizer *t = make_tok("gpt2", 0);
    zp_encoder *e;
    assert_int_equal(zp_encoder_create(t, &e), ZP_OK);
    zpi_encoder_set_short_max(e, 1); /* every piece through the heap */
    size_t bad = 0;
    for (size_t i = 0; i < c->n; i++) {
        size_t n_ids = 0;
        int32_t *ids = encode(e, c->texts[i].s, c->texts[i].n, &n_ids);
        bad += (size_t)compare_ids("heap merge", i + 1, ids, n_ids, &c->expected[i]);
        free(ids);
    }
    assert_int_equal(bad, 0);
    zp_encoder *e2;
    assert_int_equal(zp_encoder_create(t, &e2), ZP_OK);
    uint64_t seed = 99;
    char buf[128];
    for (int iter = 0; iter < 2000; iter++) {
        size_t n = 1 + rng_next(&seed) % sizeof buf;
        for (size_t i = 0; i < n; i++) {
            uint64_t r = rng_next(&seed);
            buf[i] = (char)(iter % 2 ? (int)r : 'a' + (int)(r % 4)); /* bytes, or "abcd" words */
        }
        size_t n1, n2;
        int32_t *a = encode(e, buf, n, &n1);
        int32_t *b = encode(e2, buf, n, &n2);
        assert_int_equal(n1, n2);
        assert_memory_equal(a, b, n1 * sizeof *a);
        free(a);
        free(b);
    }
    zp_encoder_destroy(e);
    zp_encoder_destroy(e2);
    zp_tokenizer_destroy(t);
}

static void test_roundtrip_corpus(void **state)
{
    corpus *c = *state;
    zp_tokenizer *t = make_tok("gpt2", 16384);
    zp_encoder *e;
    assert_int_equal(zp_encoder_create(t, &e), ZP_OK);
    for (size_t i = 0; i < c->n; i++) {
        size_t n_ids;
        int32_t *ids = encode(e, c->texts[i].s, c->texts[i].n, &n_ids);
        assert_roundtrip(t, ids, n_ids, c->texts[i].s, c->texts[i].n);
        for (size_t k = 0; k < n_ids; k++)
            assert_int_not_equal(ids[k], 50256);
        free(ids);
    }
    zp_encoder_destroy(e);
    zp_tokenizer_destroy(t);
}

static void test_roundtrip_random_bytes(void **state)
{
    (void)state;
    zp_tokenizer *t = make_tok("gpt2", 16384);
    zp_tokenizer *t0 = make_tok("gpt2", 0);
    zp_encoder *e, *e0;
    assert_int_equal(zp_encoder_create(t, &e), ZP_OK);
    assert_int_equal(zp_encoder_create(t0, &e0), ZP_OK);
    uint64_t seed = 42;
    char buf[600];
    /* byte alphabets: anything; mostly UTF-8 lead/continuation bytes; text-like */
    static const char textish[] = "ab 'sS\t\n\xc2\xa0\xc2\x85\xe3\x80\x80" "19.!\xf0\x9f\x98\x80"
                                  "\xed\xa0\x80\xc0\xaf\xe0\x80\xaf\xf4\x90\x80\x80\xff";
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = rng_next(&seed) % (iter < 2900 ? 64 : sizeof buf);
        int mode = iter % 3;
        for (size_t i = 0; i < n; i++) {
            uint64_t r = rng_next(&seed);
            if (mode == 0)
                buf[i] = (char)r;
            else if (mode == 1)
                buf[i] = (char)(0x80 + (r % 0x80));
            else
                buf[i] = textish[r % (sizeof textish - 1)];
        }
        size_t n1, n2;
        int32_t *a = encode(e, buf, n, &n1);
        int32_t *b = encode(e0, buf, n, &n2);
        assert_int_equal(n1, n2);
        assert_memory_equal(a, b, n1 * sizeof *a);
        assert_roundtrip(t, a, n1, buf, n);
        /* pieces tile the input */
        size_t pos = 0;
        while (pos < n) {
            size_t end = zpi_tok_next_piece(buf, pos, n);
            assert_true(end > pos && end <= n);
            pos = end;
        }
        free(a);
        free(b);
    }
    zp_encoder_destroy(e);
    zp_encoder_destroy(e0);
    zp_tokenizer_destroy(t);
    zp_tokenizer_destroy(t0);
}

/* The pre-tokenizer's pieces of s[0..n), joined with '|'. */
static void pieces(const char *s, size_t n, char *out, size_t cap)
{
    size_t pos = 0, o = 0;
    while (pos < n) {
        size_t end = zpi_tok_next_piece(s, pos, n);
        if (pos && o + 1 < cap)
            out[o++] = '|';
        for (size_t i = pos; i < end && o + 1 < cap; i++)
            out[o++] = s[i];
        pos = end;
    }
    out[o] = '\0';
}

#define ASSERT_PIECES(lit, want)                                    \
    do {                                                            \
        char got_[512];                                             \
        pieces(lit, sizeof(lit) - 1, got_, sizeof got_);            \
        if (strcmp(got_, want) != 0)                                \
            print_error("pieces of %s: got '%s'\n", #lit, got_);    \
        assert_string_equal(got_, want);                            \
    } while (0)

static void test_pretokenizer_pieces(void **state)
{
    (void)state;
    ASSERT_PIECES("Hello world", "Hello| world");
    ASSERT_PIECES("it's IT'S", "it|'s| IT|'|S");
    ASSERT_PIECES("we'll 'LL x'd", "we|'ll| '|LL| x|'d");
    ASSERT_PIECES("a  b", "a| | b");
    ASSERT_PIECES("a   ", "a|   ");
    ASSERT_PIECES("a \tb", "a| |\t|b");
    ASSERT_PIECES("a\n\nb", "a|\n|\n|b");
    ASSERT_PIECES("x 123 ?!", "x| 123| ?!");
    ASSERT_PIECES("\xc2\xa0word", "\xc2\xa0|word");          /* NBSP is \s */
    ASSERT_PIECES(" \xc2\x85x", " |\xc2\x85|x");              /* NEL is \s */
    ASSERT_PIECES(" \xe1\xa0\x8ex", " \xe1\xa0\x8e|x");       /* U+180E is not */
    ASSERT_PIECES("a\xef\xbb\xbf b", "a|\xef\xbb\xbf| b");    /* U+FEFF is not */
    ASSERT_PIECES("\xe3\x80\x80\xe3\x80\x80x", "\xe3\x80\x80|\xe3\x80\x80|x"); /* U+3000 */
    ASSERT_PIECES("ab\xcc\x81" "c", "ab|\xcc\x81|c");         /* a combining mark is "other" */
    /* 16.0 letter U+10D4A and digit U+10D40 */
    ASSERT_PIECES("x\xf0\x90\xb5\x8a" "1\xf0\x90\xb5\x80", "x\xf0\x90\xb5\x8a|1\xf0\x90\xb5\x80");
    /* block 0 of the table is ASCII, as the scanner's fast path assumes */
    assert_int_equal(zpi_uni_blocks['a'] & ZPI_CLS_MASK, ZPI_CLS_LETTER);
    assert_int_equal(zpi_uni_blocks['7'], ZPI_CLS_NUMBER);
    assert_int_equal(zpi_uni_blocks[' '], ZPI_CLS_SPACE);
    assert_int_equal(zpi_uni_blocks['\''], ZPI_CLS_OTHER);
    assert_int_equal(zpi_uni_class(0x85), ZPI_CLS_SPACE);
    assert_int_equal(zpi_uni_class(0x10D40), ZPI_CLS_NUMBER);
    assert_int_equal(zpi_uni_class(0x2EBF0) & ZPI_CLS_MASK, ZPI_CLS_LETTER);
    assert_int_equal(zpi_uni_class(0xFFFD), ZPI_CLS_OTHER);
}

static void test_invalid_utf8(void **state)
{
    (void)state;
    /* each byte that does not start a valid sequence is "other", like U+FFFD */
    ASSERT_PIECES("ab\x80" "cd", "ab|\x80|cd");                 /* stray continuation */
    ASSERT_PIECES("ab\xff\xfe" "cd", "ab|\xff\xfe|cd");         /* never valid */
    ASSERT_PIECES("a\xc0\xaf" "b", "a|\xc0\xaf|b");             /* overlong '/' */
    ASSERT_PIECES("a\xe0\x80\xaf" "b", "a|\xe0\x80\xaf|b");     /* overlong 3 bytes */
    ASSERT_PIECES("a\xf0\x80\x80\xaf" "b", "a|\xf0\x80\x80\xaf|b");
    ASSERT_PIECES("a\xed\xa0\x80" "b", "a|\xed\xa0\x80|b");     /* surrogate U+D800 */
    ASSERT_PIECES("a\xf4\x90\x80\x80" "b", "a|\xf4\x90\x80\x80|b"); /* > U+10FFFF */
    ASSERT_PIECES("a\xf5\x80" "b", "a|\xf5\x80|b");
    ASSERT_PIECES("a\xe2\x82" "b", "a|\xe2\x82|b");             /* truncated */
    ASSERT_PIECES("ab\xe2", "ab|\xe2");                         /* truncated at the end */
    ASSERT_PIECES("x \xff" "y", "x| \xff|y");                   /* " ?" + other */
    ASSERT_PIECES(" \x85" "b", " \x85|b");                      /* raw 0x85 is not NEL */
    ASSERT_PIECES("!\xff?", "!\xff?");                          /* joins an "other" run */
    ASSERT_PIECES("\xc3\xa9\xc3" "a", "\xc3\xa9|\xc3|a");       /* é, then a broken é */
    /* valid neighbours are unaffected: U+00E9 U+20AC U+10FFFF */
    ASSERT_PIECES("\xc3\xa9t\xc3\xa9", "\xc3\xa9t\xc3\xa9");
    ASSERT_PIECES("a\xe2\x82\xac" "b", "a|\xe2\x82\xac|b");
    ASSERT_PIECES("a\xf4\x8f\xbf\xbf" "b", "a|\xf4\x8f\xbf\xbf|b");

    zp_tokenizer *t = make_tok("gpt2", 16384);
    zp_encoder *e;
    assert_int_equal(zp_encoder_create(t, &e), ZP_OK);
    static const char *cases[] = {"\xff", "\x80\x80\x80", "a\xed\xa0\x80z", "\xc0\xaf",
                                  "caf\xc3", "\xf4\x90\x80\x80\xf0\x9f\x98", " \xfe\xff "};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i]), n_ids;
        int32_t *ids = encode(e, cases[i], n, &n_ids);
        assert_true(n_ids >= 1);
        assert_roundtrip(t, ids, n_ids, cases[i], n);
        free(ids);
    }
    /* "ab\xffcd": the invalid byte is its own piece: ids of "ab", 0xFF, "cd" */
    size_t n1, n2, n3, n4;
    int32_t *all = encode(e, "ab\xff" "cd", 5, &n1);
    int32_t *p1 = encode(e, "ab", 2, &n2);
    int32_t *p2 = encode(e, "\xff", 1, &n3);
    int32_t *p3 = encode(e, "cd", 2, &n4);
    assert_int_equal(n1, n2 + n3 + n4);
    assert_memory_equal(all, p1, n2 * sizeof(int32_t));
    assert_memory_equal(all + n2, p2, n3 * sizeof(int32_t));
    assert_memory_equal(all + n2 + n3, p3, n4 * sizeof(int32_t));
    free(all);
    free(p1);
    free(p2);
    free(p3);
    zp_encoder_destroy(e);
    zp_tokenizer_destroy(t);
}

static void test_nul_bytes(void **state)
{
    (void)state;
    zp_tokenizer *t = make_tok("gpt2", 16384);
    zp_encoder *e;
    assert_int_equal(zp_encoder_create(t, &e), ZP_OK);
    size_t n_ids;
    /* NUL (byte id 188 in GPT-2) is an ordinary "other" character */
    int32_t *ids = encode(e, "a\0b", 3, &n_ids);
    assert_int_equal(n_ids, 3);
    assert_int_equal(ids[0], 64);
    assert_int_equal(ids[1], 188);
    assert_int_equal(ids[2], 65);
    free(ids);
    /* the length is explicit: bytes after a NUL are encoded */
    ids = encode(e, "\0\0 hello\0", 9, &n_ids);
    assert_roundtrip(t, ids, n_ids, "\0\0 hello\0", 9);
    size_t n_prefix;
    int32_t *prefix = encode(e, "\0\0", 2, &n_prefix);
    assert_true(n_ids > n_prefix);
    free(prefix);
    free(ids);
    zp_encoder_destroy(e);
    zp_tokenizer_destroy(t);
}

static void test_long_pieces(void **state)
{
    (void)state;
    const size_t n = 1 << 20;
    char *word = malloc(n), *spaces = malloc(n), *newlines = malloc(n);
    uint64_t seed = 7;
    for (size_t i = 0; i < n; i++) {
        word[i] = (char)('a' + rng_next(&seed) % 26);
        spaces[i] = ' ';
        newlines[i] = '\n';
    }
    assert_int_equal(zpi_tok_next_piece(word, 0, n), n); /* one piece each */
    assert_int_equal(zpi_tok_next_piece(spaces, 0, n), n);
    assert_int_equal(zpi_tok_next_piece(newlines, 0, n), n);
    zp_tokenizer *t = make_tok("gpt2", 16384);
    zp_tokenizer *t0 = make_tok("gpt2", 0);
    zp_encoder *e, *e0;
    assert_int_equal(zp_encoder_create(t, &e), ZP_OK);
    assert_int_equal(zp_encoder_create(t0, &e0), ZP_OK);
    const char *inputs[3] = {word, spaces, newlines};
    /* random letters merge to ~0.6 ids per byte; GPT-2 has no token of
     * several spaces; "\n\n" is id 628 */
    const size_t max_ids[3] = {n * 3 / 4, n, n / 2};
    for (int k = 0; k < 3; k++) {
        size_t n1, n2;
        int32_t *a = encode(e, inputs[k], n, &n1);
        int32_t *b = encode(e0, inputs[k], n, &n2);
        assert_int_equal(n1, n2);
        assert_memory_equal(a, b, n1 * sizeof *a);
        assert_true(n1 <= max_ids[k]);
        if (k == 2)
            assert_int_equal(a[0], 628);
        assert_roundtrip(t, a, n1, inputs[k], n);
        free(a);
        free(b);
    }
    /* long-piece scratch is released after a huge piece */
    assert_true(zp_encoder_memory(e) < 4u << 20);
    /* words around the short/heap boundary (128 bytes) round-trip and do
     * not depend on the cache */
    for (size_t len = 100; len < 300; len += 7) {
        size_t n1, n2;
        int32_t *a = encode(e, word, len, &n1);
        int32_t *b = encode(e0, word, len, &n2);
        assert_int_equal(n1, n2);
        assert_memory_equal(a, b, n1 * sizeof *a);
        assert_roundtrip(t, a, n1, word, len);
        free(a);
        free(b);
    }
    zp_encoder_destroy(e);
    zp_encoder_destroy(e0);
    zp_tokenizer_destroy(t);
    zp_tokenizer_destroy(t0);
    free(word);
    free(spaces);
    free(newlines);
}

static void test_vocab_size_eot_decode(void **state)
{
    (void)state;
    zp_tokenizer *t = make_tok("gpt2", 16384);
    assert_int_equal(zp_tokenizer_vocab_size(t), 50257);
    assert_int_equal(zp_tokenizer_eot(t), 50256);
    assert_true(zp_tokenizer_memory(t) > 1000000);
    char out[64];
    size_t len;
    int32_t eot = 50256;
    assert_int_equal(zp_decode(t, &eot, 1, out, sizeof out, &len), ZP_OK);
    assert_int_equal(len, 13);
    assert_memory_equal(out, "<|endoftext|>", 13);
    int32_t hello[2] = {15496, 995}; /* "Hello", " world" */
    assert_int_equal(zp_decode(t, hello, 2, out, sizeof out, &len), ZP_OK);
    assert_int_equal(len, 11);
    assert_memory_equal(out, "Hello world", 11);
    assert_int_equal(zp_decode(t, hello, 2, out, 5, &len), ZP_ERR_LIMIT);
    assert_int_equal(len, 11);
    int32_t bad[2] = {15496, 50257};
    assert_int_equal(zp_decode(t, bad, 2, out, sizeof out, &len), ZP_ERR_INVALID);
    bad[1] = -1;
    assert_int_equal(zp_decode(t, bad, 2, out, sizeof out, &len), ZP_ERR_INVALID);
    assert_int_equal(zp_decode(t, NULL, 0, out, sizeof out, &len), ZP_OK);
    assert_int_equal(len, 0);

    zp_encoder *e;
    assert_int_equal(zp_encoder_create(t, &e), ZP_OK);
    size_t n_ids;
    int32_t ids[64];
    assert_int_equal(zp_encode(e, "<|endoftext|>", 13, ids, &n_ids), ZP_OK);
    assert_int_equal(n_ids, 7); /* tiktoken: 27 91 437 1659 5239 91 29 */
    static const int32_t want[7] = {27, 91, 437, 1659, 5239, 91, 29};
    assert_memory_equal(ids, want, sizeof want);
    for (size_t i = 0; i < n_ids; i++)
        assert_int_not_equal(ids[i], 50256);
    assert_int_equal(zp_encode(e, "", 0, ids, &n_ids), ZP_OK);
    assert_int_equal(n_ids, 0);
    assert_int_equal(zp_encode(e, NULL, 0, NULL, &n_ids), ZP_OK);
    assert_int_equal(zp_encode(NULL, "a", 1, ids, &n_ids), ZP_ERR_INVALID);
    assert_int_equal(zp_encode(e, "a", 1, ids, NULL), ZP_ERR_INVALID);
    assert_true(zp_encoder_memory(e) > 0);
    zp_encoder_destroy(e);
    zp_encoder_destroy(NULL);
    zp_tokenizer_destroy(t);
    zp_tokenizer_destroy(NULL);
}

/* ------------------------------------------------------------ formats */

static char g_tmpdir[256];

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void copy_file(const char *from, const char *to)
{
    size_t n;
    char *b = slurp(from, &n);
    assert_non_null(b);
    write_file(to, b, n);
    free(b);
}

static void b64(const uint8_t *p, size_t n, char *out)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        out[o++] = tab[(v >> 18) & 63];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? tab[v & 63] : '=';
    }
    out[o] = '\0';
}

/* A temp folder with: hf/vocab.json + hf/merges.txt (copies of the shipped
 * files) and gpt2.tiktoken (written from the built-in tokenizer's decode). */
static int setup_formats(void **state)
{
    corpus *c = corpus_load();
    *state = c;
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/zp_test_tokenizer_XXXXXX");
    if (!mkdtemp(g_tmpdir))
        return -1;
    char p[512], q[512];
    snprintf(p, sizeof p, "%s/hf", g_tmpdir);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/hf/vocab.json", g_tmpdir);
    copy_file(GPT2_DIR "/encoder.json", p);
    snprintf(p, sizeof p, "%s/hf/merges.txt", g_tmpdir);
    copy_file(GPT2_DIR "/vocab.bpe", p);
    snprintf(q, sizeof q, "%s/gpt2.tiktoken", g_tmpdir);
    zp_tokenizer *t = make_tok("gpt2", 0);
    FILE *f = fopen(q, "wb");
    if (!f)
        return -1;
    for (int32_t id = 0; id < 50256; id++) {
        char bytes[256], line[400];
        size_t len;
        if (zp_decode(t, &id, 1, bytes, sizeof bytes, &len) != ZP_OK)
            return -1;
        b64((const uint8_t *)bytes, len, line);
        fprintf(f, "%s %d\n", line, (int)id);
    }
    fclose(f);
    zp_tokenizer_destroy(t);
    return 0;
}

static int teardown_formats(void **state)
{
    corpus_free(*state);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_load_hf_and_tiktoken_files(void **state)
{
    corpus *c = *state;
    char hf[512], tk[512];
    snprintf(hf, sizeof hf, "%s/hf", g_tmpdir);
    snprintf(tk, sizeof tk, "%s/gpt2.tiktoken", g_tmpdir);
    zp_tokenizer *th = make_tok(hf, 16384);
    zp_tokenizer *tt = make_tok(tk, 16384);
    assert_int_equal(zp_tokenizer_vocab_size(th), 50257);
    assert_int_equal(zp_tokenizer_vocab_size(tt), 50257);
    assert_int_equal(zp_tokenizer_eot(th), 50256);
    assert_int_equal(zp_tokenizer_eot(tt), 50256);
    check_parity("vocab.json + merges.txt", th, c, 1);
    check_parity(".tiktoken file", tt, c, 1);
    /* the shipped encoder.json's ids decode like the built-in ones */
    zp_tokenizer *tb = make_tok("gpt2", 0);
    for (int32_t id = 0; id < 50257; id++) {
        char a[256], b[256];
        size_t la, lb;
        assert_int_equal(zp_decode(tb, &id, 1, a, sizeof a, &la), ZP_OK);
        assert_int_equal(zp_decode(th, &id, 1, b, sizeof b, &lb), ZP_OK);
        assert_int_equal(la, lb);
        assert_memory_equal(a, b, la);
    }
    zp_tokenizer_destroy(tb);
    zp_tokenizer_destroy(th);
    zp_tokenizer_destroy(tt);
}

static void expect_error(const char *id, zp_status want, const char *needle)
{
    zp_tokenizer *t = (zp_tokenizer *)1;
    char err[512] = "";
    zp_status st = zp_tokenizer_create(id, NULL, &t, err, sizeof err);
    if (st != want || !strstr(err, needle))
        print_error("create(%s): status %d, err '%s' (want %d, '%s')\n", id ? id : "NULL",
                    (int)st, err, (int)want, needle);
    assert_int_equal(st, want);
    assert_null(t);
    assert_non_null(strstr(err, needle));
}

static void test_bad_vocab_paths(void **state)
{
    (void)state;
    char p[400], q[512];
    expect_error("gpt3", ZP_ERR_INVALID, "gpt3");
    expect_error("/nonexistent/vocab", ZP_ERR_INVALID, "No such file");
    expect_error("", ZP_ERR_INVALID, "no tokenizer name");
    zp_tokenizer *t;
    assert_int_equal(zp_tokenizer_create(NULL, NULL, &t, NULL, 0), ZP_ERR_INVALID);
    assert_int_equal(zp_tokenizer_create("gpt2", NULL, NULL, NULL, 0), ZP_ERR_INVALID);

    /* a folder without merges.txt */
    snprintf(p, sizeof p, "%s/empty", g_tmpdir);
    mkdir(p, 0700);
    snprintf(q, sizeof q, "%s/vocab.json", p);
    write_file(q, "{}", 2);
    expect_error(p, ZP_ERR_IO, "merges.txt");
    /* vocab.json that cannot be read (a folder): the reason is given */
    {
        char d[600], v[700], mm[700];
        snprintf(d, sizeof d, "%s/unreadable", g_tmpdir);
        mkdir(d, 0700);
        snprintf(v, sizeof v, "%s/vocab.json", d);
        mkdir(v, 0700);
        snprintf(mm, sizeof mm, "%s/merges.txt", d);
        write_file(mm, "#version: 0.2\n", 14);
        expect_error(d, ZP_ERR_IO, "vocab.json': Is a directory");
    }
    /* an invalid setting names the setting and the value */
    {
        zp_tokenizer_config cfg;
        zp_tokenizer_config_init(&cfg);
        cfg.cache_entries = ((size_t)1 << 26) + 1;
        char err[512] = "";
        zp_tokenizer *t2 = (zp_tokenizer *)1;
        assert_int_equal(zp_tokenizer_create("gpt2", &cfg, &t2, err, sizeof err), ZP_ERR_INVALID);
        assert_null(t2);
        assert_non_null(strstr(err, "cache_entries = 67108865"));
    }
    /* bad JSON */
    snprintf(q, sizeof q, "%s/merges.txt", p);
    write_file(q, "#version: 0.2\n", 14);
    snprintf(q, sizeof q, "%s/vocab.json", p);
    write_file(q, "{\"a\": 1,", 8);
    expect_error(p, ZP_ERR_FORMAT, "invalid JSON");
    /* too small to be byte-level */
    write_file(q, "{\"a\": 0}", 8);
    expect_error(p, ZP_ERR_FORMAT, "not a byte-level");
    /* a merge that uses a token missing from the vocabulary */
    snprintf(q, sizeof q, "%s/hf/merges.txt", g_tmpdir);
    size_t n;
    char *m = slurp(q, &n);
    snprintf(q, sizeof q, "%s/badmerge", g_tmpdir);
    mkdir(q, 0700);
    char v2[600], m2[600];
    snprintf(v2, sizeof v2, "%s/vocab.json", q);
    snprintf(m2, sizeof m2, "%s/merges.txt", q);
    snprintf(p, sizeof p, "%s/hf/vocab.json", g_tmpdir);
    copy_file(p, v2);
    {
        FILE *f = fopen(m2, "wb");
        fwrite(m, 1, 200, f); /* some good lines, starting with #version */
        const char *nl = memchr(m + 200, '\n', n - 200);
        fwrite(m + 200, 1, (size_t)(nl - (m + 200)) + 1, f);
        fputs("zzqq xxyy\n", f);
        fclose(f);
    }
    free(m);
    expect_error(q, ZP_ERR_FORMAT, "not in vocab.json");
    /* giving a file of the folder: vocab.json (named so, merges.txt beside
     * it) or a token -> id map under another name is not a tokenizer.json */
    expect_error(v2, ZP_ERR_INVALID, "folder");
    expect_error(m2, ZP_ERR_INVALID, "folder");
    {
        char v3[600];
        snprintf(v3, sizeof v3, "%s/gpt2-vocab.json", g_tmpdir);
        copy_file(v2, v3);
        expect_error(v3, ZP_ERR_INVALID, "give the folder that holds vocab.json and merges.txt");
        {
            static const char map[] = " \n{ \"a\\\"b\" : -1}";
            write_file(v3, map, sizeof map - 1);
        }
        expect_error(v3, ZP_ERR_INVALID, "give the folder");
    }
    /* ... while a tokenizer.json document under any .json name (vocab.json
     * too, without a merges.txt beside it) is one */
    {
        static const char doc[] =
            "{\"version\": \"1.0\", \"added_tokens\": [], \"normalizer\": null, "
            "\"pre_tokenizer\": null, \"post_processor\": null, \"decoder\": null, "
            "\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"fuse_unk\": true, "
            "\"vocab\": {\"<unk>\": 0, \"a\": 1, \"b\": 2, \"ab\": 3, \"</s>\": 4}, "
            "\"merges\": [\"a b\"]}}";
        static const char conf[] = "{\"eos_token\": \"</s>\"}";
        const char *names[] = {"tokenizer.json", "my-model.json", "vocab.json"};
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
            char d[600], f[700], c[700];
            snprintf(d, sizeof d, "%s/tj%zu", g_tmpdir, k);
            mkdir(d, 0700);
            snprintf(f, sizeof f, "%s/%s", d, names[k]);
            snprintf(c, sizeof c, "%s/tokenizer_config.json", d);
            write_file(f, doc, sizeof doc - 1);
            write_file(c, conf, sizeof conf - 1);
            zp_tokenizer *tj = NULL;
            char e2[512] = "";
            zp_status st = zp_tokenizer_create(f, NULL, &tj, e2, sizeof e2);
            if (st != ZP_OK)
                print_error("create(%s): %s\n", f, e2);
            assert_int_equal(st, ZP_OK);
            assert_int_equal(zp_tokenizer_eot(tj), 4);
            assert_non_null(strstr(zp_tokenizer_ident(tj), "tokenizer.json"));
            zp_encoder *en = NULL;
            assert_int_equal(zp_encoder_create(tj, &en), ZP_OK);
            int32_t ids[16];
            size_t nid = 0;
            assert_int_equal(zp_encode(en, "abab", 4, ids, &nid), ZP_OK);
            assert_int_equal(nid, 2);
            assert_int_equal(ids[0], 3);
            assert_int_equal(ids[1], 3);
            zp_encoder_destroy(en);
            zp_tokenizer_destroy(tj);
        }
    }
    /* malformed .tiktoken files, named with their pattern (PATTERN:PATH; a
     * bare rank file that reads is refused asking for it) */
    snprintf(p, sizeof p, "%s/bad.tiktoken", g_tmpdir);
    snprintf(q, sizeof q, "gpt2:%s", p);
    write_file(p, "IQ== 0\nIg== one\n", 16);
    expect_error(q, ZP_ERR_FORMAT, ":2: expected '<base64 token> <rank>'");
    {
        /* the 256 bytes, then a token that is not base64 (line 257) */
        FILE *f = fopen(p, "wb");
        for (int b = 0; b < 256; b++) {
            uint8_t c = (uint8_t)b;
            char line[16];
            b64(&c, 1, line);
            fprintf(f, "%s %d\n", line, b);
        }
        fputs("!!!! 256\n", f);
        fclose(f);
    }
    expect_error(q, ZP_ERR_FORMAT, ":257: invalid base64");
    write_file(p, "IQ== 0\nIQ== 1\n", 14);
    expect_error(q, ZP_ERR_FORMAT, "not a tiktoken rank file");
    /* all 256 bytes but one token twice */
    {
        FILE *f = fopen(p, "wb");
        for (int b = 0; b < 256; b++) {
            uint8_t c = (uint8_t)b;
            char line[16];
            b64(&c, 1, line);
            fprintf(f, "%s %d\n", line, b);
        }
        fputs("IQ== 256\n", f);
        fclose(f);
    }
    expect_error(q, ZP_ERR_FORMAT, "same bytes");
    /* 255 bytes only */
    {
        FILE *f = fopen(p, "wb");
        for (int b = 0; b < 256; b++) {
            uint8_t c[2] = {(uint8_t)b, 'x'};
            char line[16];
            b64(c, b == 200 ? 2 : 1, line);
            fprintf(f, "%s %d\n", line, b);
        }
        fclose(f);
    }
    expect_error(q, ZP_ERR_FORMAT, "byte 0xC8");
}

/* ------------------------------------------------------------ threads */

typedef struct thread_arg {
    const zp_tokenizer *tok;
    const corpus *c;
    size_t first;
    size_t bad;
} thread_arg;

static void *thread_main(void *p)
{
    thread_arg *a = p;
    zp_encoder *e;
    if (zp_encoder_create(a->tok, &e) != ZP_OK) {
        a->bad = 1;
        return NULL;
    }
    for (int pass = 0; pass < 3; pass++) {
        for (size_t k = 0; k < a->c->n; k++) {
            size_t i = (a->first + k) % a->c->n;
            const text *tx = &a->c->texts[i];
            int32_t *ids = malloc((tx->n + 1) * sizeof *ids);
            size_t n_ids;
            if (zp_encode(e, tx->s, tx->n, ids, &n_ids) != ZP_OK ||
                n_ids != a->c->expected[i].n ||
                memcmp(ids, a->c->expected[i].v, n_ids * sizeof *ids) != 0)
                a->bad++;
            free(ids);
        }
    }
    zp_encoder_destroy(e);
    return NULL;
}

static void test_two_threads_share_a_tokenizer(void **state)
{
    corpus *c = *state;
    zp_tokenizer *t = make_tok("gpt2", 1024);
    pthread_t th[2];
    thread_arg args[2] = {{t, c, 0, 0}, {t, c, c->n / 2, 0}};
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, thread_main, &args[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(args[0].bad, 0);
    assert_int_equal(args[1].bad, 0);
    zp_tokenizer_destroy(t);
}

/* ------------------------------------------------------------ command */

/* Run the zephon command through sh; returns the exit status; output in
 * *out (caller frees). */
static int run_cli(const char *args, char **out)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", ZP_CLI, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, n = 0, got;
    char *b = malloc(cap + 1);
    while ((got = fread(b + n, 1, cap - n, p)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            b = realloc(b, cap + 1);
        }
    }
    b[n] = '\0';
    int st = pclose(p);
    *out = b;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_cli_tokenize(void **state)
{
    corpus *c = *state;
    struct stat sb;
    if (stat(ZP_CLI, &sb) != 0)
        print_error("the zephon command is missing: %s\n", ZP_CLI);
    assert_int_equal(stat(ZP_CLI, &sb), 0);

    /* the whole corpus, through a file and through stdin */
    char *out;
    char args[1024];
    snprintf(args, sizeof args, "tokenize --tokenizer gpt2 '%s'", CORPUS);
    assert_int_equal(run_cli(args, &out), 0);
    char *line = out;
    for (size_t i = 0; i < c->n; i++) {
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        json_error_t jerr;
        json_t *arr = json_loadb(line, (size_t)(nl - line), 0, &jerr);
        assert_true(json_is_array(arr));
        assert_int_equal(json_array_size(arr), c->expected[i].n);
        for (size_t k = 0; k < c->expected[i].n; k++)
            assert_int_equal(json_integer_value(json_array_get(arr, k)), c->expected[i].v[k]);
        json_decref(arr);
        line = nl + 1;
    }
    assert_int_equal(*line, '\0');
    free(out);

    char p[512];
    snprintf(p, sizeof p, "%s/in.jsonl", g_tmpdir);
    const char *in = "{\"body\": \"Hello world\", \"text\": 1}\n\n{\"body\": \"a\\u0000b\"}\n";
    write_file(p, in, strlen(in));
    snprintf(args, sizeof args, "tokenize --field body - < '%s'", p);
    assert_int_equal(run_cli(args, &out), 0);
    assert_string_equal(out, "[15496,995]\n[64,188,65]\n");
    free(out);

    /* errors name the line */
    in = "{\"text\": \"ok\"}\n{\"text\": \"broken\"\n";
    write_file(p, in, strlen(in));
    snprintf(args, sizeof args, "tokenize '%s'", p);
    assert_int_equal(run_cli(args, &out), 1);
    assert_non_null(strstr(out, "[482]\n"));
    assert_non_null(strstr(out, ":2: invalid JSON"));
    free(out);
    in = "{\"text\": \"ok\"}\n{\"txt\": \"x\"}\n";
    write_file(p, in, strlen(in));
    assert_int_equal(run_cli(args, &out), 1);
    assert_non_null(strstr(out, ":2: no field 'text'"));
    free(out);
    in = "{\"text\": [1]}\n";
    write_file(p, in, strlen(in));
    assert_int_equal(run_cli(args, &out), 1);
    assert_non_null(strstr(out, ":1: field 'text' is not a string"));
    free(out);
    in = "[1]\n";
    write_file(p, in, strlen(in));
    assert_int_equal(run_cli(args, &out), 1);
    assert_non_null(strstr(out, ":1: not a JSON object"));
    free(out);
    assert_int_equal(run_cli("tokenize --tokenizer /nonexistent /dev/null", &out), 1);
    assert_non_null(strstr(out, "/nonexistent"));
    free(out);
    assert_int_equal(run_cli("tokenize --bogus", &out), 2);
    free(out);
    assert_int_equal(run_cli("tokenize /nonexistent.jsonl", &out), 1);
    assert_non_null(strstr(out, "cannot open"));
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity_with_tiktoken),
        cmocka_unit_test(test_parity_cache_off_and_tiny),
        cmocka_unit_test(test_heap_merge_matches_short_merge),
        cmocka_unit_test(test_roundtrip_corpus),
        cmocka_unit_test(test_roundtrip_random_bytes),
        cmocka_unit_test(test_pretokenizer_pieces),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_nul_bytes),
        cmocka_unit_test(test_long_pieces),
        cmocka_unit_test(test_vocab_size_eot_decode),
        cmocka_unit_test(test_load_hf_and_tiktoken_files),
        cmocka_unit_test(test_bad_vocab_paths),
        cmocka_unit_test(test_two_threads_share_a_tokenizer),
        cmocka_unit_test(test_cli_tokenize),
    };
    return cmocka_run_group_tests(tests, setup_formats, teardown_formats);
}
