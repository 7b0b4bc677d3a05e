/* test_format.c - the record parser (json.h) and the jsonl / jsonl.zst shard
 * readers (format.h): good input and every malformed case. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <xxhash.h>
#include <zstd.h>

#include "formats/format.h"
#include "base/json.h"
#include "testutil.h"

/* ------------------------------------------------------------ helpers */

typedef struct fixture {
    char *dir;
    zpi_load_limits lim;
    zpi_json *json;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->dir = zpt_tmpdir();
    f->lim.max_record_bytes = 1 << 20;
    f->lim.max_shard_bytes = (size_t)64 << 20;
    f->lim.allow_empty = 0;
    if (!f->dir || zpi_json_create(&f->json) != ZP_OK)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    zpt_rmtree(f->dir);
    free(f->dir);
    zpi_json_destroy(f->json);
    free(f);
    return 0;
}

/* Parse a NUL-terminated string with the required padding. */
static zp_status parse_str(zpi_json *j, const char *s, zpi_err *err)
{
    size_t n = strlen(s);
    char *buf = calloc(1, n + ZPI_JSON_PADDING);
    memcpy(buf, s, n);
    zp_status st = zpi_json_parse(j, buf, n, err);
    free(buf);
    return st;
}

/* Write content to dir/name (zstd with `frames` frames when frames > 0) and
 * load it with the format chosen by the name. */
static zp_status load_file(fixture *f, const char *name, const char *content, size_t len,
                           int frames, zpi_shard *sh, zpi_err *err)
{
    char *p = zpt_path(f->dir, name);
    if (frames > 0)
        assert_int_equal(zpt_write_zst(p, content, len, frames), 0);
    else
        assert_int_equal(zpt_write_file(p, content, len), 0);
    const zpi_format *fmt = zpi_format_for_path(p);
    assert_non_null(fmt);
    zp_status st = fmt->load(p, name, &f->lim, sh, err);
    free(p);
    return st;
}

static void assert_record(const zpi_shard *sh, uint64_t i, const char *want)
{
    assert_true(i < sh->n_records);
    size_t n = (size_t)(sh->offsets[i + 1] - 1 - sh->offsets[i]);
    assert_int_equal(n, strlen(want));
    assert_memory_equal(sh->data + sh->offsets[i], want, n);
}

static void assert_contains(const char *hay, const char *needle)
{
    if (!strstr(hay, needle))
        fail_msg("message \"%s\" does not contain \"%s\"", hay, needle);
}

/* ------------------------------------------------------------ json */

static void test_json_string_field(void **state)
{
    fixture *f = *state;
    zpi_err err = {0};
    assert_int_equal(parse_str(f->json, "{\"id\": 7, \"text\": \"hello world\", \"n\": null}", &err),
                     ZP_OK);
    const char *s;
    size_t n;
    assert_int_equal(zpi_json_get_string(f->json, "text", &s, &n), ZP_OK);
    assert_int_equal(n, 11);
    assert_memory_equal(s, "hello world", 11);
    assert_int_equal(zpi_json_get_string(f->json, "missing", &s, &n), ZP_END);
    assert_int_equal(zpi_json_get_string(f->json, "id", &s, &n), ZP_ERR_FORMAT);
    assert_int_equal(zpi_json_get_string(f->json, "n", &s, &n), ZP_ERR_FORMAT);
}

static void test_json_escapes_and_nul(void **state)
{
    fixture *f = *state;
    zpi_err err = {0};
    const char *rec = "{\"te\\u0078t\": \"a\\\"b\\\\c\\nd\\u00e9\\u0000z\\ud83d\\ude00\"}";
    assert_int_equal(parse_str(f->json, rec, &err), ZP_OK);
    const char *s;
    size_t n;
    /* the key is matched unescaped */
    assert_int_equal(zpi_json_get_string(f->json, "text", &s, &n), ZP_OK);
    const char want[] = "a\"b\\c\nd\xc3\xa9\0z\xf0\x9f\x98\x80";
    assert_int_equal(n, sizeof want - 1);
    assert_memory_equal(s, want, n);
}

static void test_json_not_object(void **state)
{
    fixture *f = *state;
    zpi_err err = {0};
    assert_int_equal(parse_str(f->json, "[1, 2, 3]", &err), ZP_ERR_FORMAT);
    assert_contains(err.msg, "not an object");
    assert_int_equal(parse_str(f->json, "\"text\"", &err), ZP_ERR_FORMAT);
    assert_contains(err.msg, "not an object");
    assert_int_equal(parse_str(f->json, "42", &err), ZP_ERR_FORMAT);
    assert_contains(err.msg, "not an object");
    /* no document after a failed parse */
    const char *s;
    size_t n;
    assert_int_equal(zpi_json_get_string(f->json, "text", &s, &n), ZP_ERR_STATE);
}

static void test_json_invalid_utf8(void **state)
{
    fixture *f = *state;
    zpi_err err = {0};
    assert_int_equal(parse_str(f->json, "{\"text\": \"caf\xc3\"}", &err), ZP_ERR_FORMAT);
    assert_contains(err.msg, "UTF-8");
    assert_int_equal(parse_str(f->json, "{\"text\": \"\xff\xfe\"}", &err), ZP_ERR_FORMAT);
    assert_contains(err.msg, "UTF-8");
}

static void test_json_truncated(void **state)
{
    fixture *f = *state;
    zpi_err err = {0};
    assert_int_equal(parse_str(f->json, "{\"text\": \"abc", &err), ZP_ERR_FORMAT);
    assert_contains(err.msg, "unclosed string");
    assert_int_equal(parse_str(f->json, "{\"text\": \"abc\"", &err), ZP_ERR_FORMAT);
    assert_true(strlen(err.msg) > 0);
    assert_int_equal(parse_str(f->json, "{\"a\": 1,}", &err), ZP_ERR_FORMAT);
    assert_true(strlen(err.msg) > 0);
    assert_int_equal(parse_str(f->json, "", &err), ZP_ERR_FORMAT);
    assert_int_equal(parse_str(f->json, "{\"a\": tru}", &err), ZP_ERR_FORMAT);
    assert_contains(err.msg, "invalid literal");
    assert_int_equal(parse_str(f->json, "{\"a\": 1} x", &err), ZP_ERR_FORMAT);
}

static void test_json_reuse(void **state)
{
    fixture *f = *state;
    zpi_err err = {0};
    const char *s;
    size_t n;
    assert_int_equal(parse_str(f->json, "{\"text\": \"one\"}", &err), ZP_OK);
    assert_int_equal(parse_str(f->json, "{\"text\": [}", &err), ZP_ERR_FORMAT);
    assert_int_equal(parse_str(f->json, "{\"text\": \"two\"}", &err), ZP_OK);
    assert_int_equal(zpi_json_get_string(f->json, "text", &s, &n), ZP_OK);
    assert_memory_equal(s, "two", 3);
}

/* ------------------------------------------------------------ format table */

static void test_format_lookup(void **state)
{
    (void)state;
    assert_string_equal(zpi_format_for_path("a/b.jsonl")->name, "jsonl");
    assert_string_equal(zpi_format_for_path("a/b.jsonl.zst")->name, "jsonl.zst");
    assert_null(zpi_format_for_path("b.json"));
    assert_string_equal(zpi_format_for_path("b.jsonl.gz")->name, "jsonl.gz");
    assert_string_equal(zpi_format_for_path("c4/c4-train.00000-of-01024.json.gz")->name,
                        "jsonl.gz"); /* .json.gz: JSON Lines too */
    assert_null(zpi_format_for_path("b.gz"));
    assert_null(zpi_format_for_path("b.txt.gz"));
    assert_null(zpi_format_for_path(""));
    assert_string_equal(zpi_format_by_name("jsonl.zst")->suffix, ".jsonl.zst");
    assert_null(zpi_format_by_name("hdf5-nope"));
}

/* ------------------------------------------------------------ good input */

static const char three[] = "{\"id\": 0, \"text\": \"a\"}\n{\"id\": 1, \"text\": \"bb\"}\n"
                            "{\"id\": 2, \"text\": \"ccc\"}\n";

static void check_three(const zpi_shard *sh)
{
    assert_int_equal(sh->n_records, 3);
    assert_record(sh, 0, "{\"id\": 0, \"text\": \"a\"}");
    assert_record(sh, 1, "{\"id\": 1, \"text\": \"bb\"}");
    assert_record(sh, 2, "{\"id\": 2, \"text\": \"ccc\"}");
    assert_int_equal(sh->offsets[3], sh->data_len);
    for (int i = 0; i < ZPI_JSON_PADDING; i++)
        assert_int_equal(sh->data[sh->data_len + (size_t)i], 0);
}

static void test_jsonl_good(void **state)
{
    fixture *f = *state;
    zpi_shard sh;
    zpi_err err = {0};
    assert_int_equal(load_file(f, "a.jsonl", three, strlen(three), 0, &sh, &err), ZP_OK);
    check_three(&sh);
    assert_int_equal(sh.file_bytes, strlen(three));
    assert_true(sh.read_seconds >= 0);
    assert_true(sh.decompress_seconds == 0);
    /* every record parses */
    for (uint64_t i = 0; i < sh.n_records; i++)
        assert_int_equal(zpi_json_parse(f->json, sh.data + sh.offsets[i],
                                        sh.offsets[i + 1] - 1 - sh.offsets[i], &err),
                         ZP_OK);
    zpi_shard_free(&sh);
}

static void test_zst_single_frame(void **state)
{
    fixture *f = *state;
    zpi_shard sh;
    zpi_err err = {0};
    assert_int_equal(load_file(f, "a.jsonl.zst", three, strlen(three), 1, &sh, &err),
                     ZP_OK);
    check_three(&sh);
    assert_true(sh.file_bytes > 0 && sh.file_bytes < 200);
    zpi_shard_free(&sh);
}

static void test_zst_multi_frame(void **state)
{
    fixture *f = *state;
    zpi_shard sh;
    zpi_err err = {0};
    /* 7 frames: boundaries fall inside lines */
    assert_int_equal(load_file(f, "m.jsonl.zst", three, strlen(three), 7, &sh, &err),
                     ZP_OK);
    check_three(&sh);
    zpi_shard_free(&sh);
}

static void test_zst_skippable_and_empty_frames(void **state)
{
    fixture *f = *state;
    size_t n1, n2, n0;
    void *z1 = zpt_zst_compress(three, 30, 1, &n1);
    void *z2 = zpt_zst_compress(three + 30, strlen(three) - 30, 1, &n2);
    void *z0 = zpt_zst_compress("", 0, 1, &n0);
    /* skippable frame: magic 0x184D2A5? little-endian, 4-byte size, payload */
    unsigned char skip[8 + 5] = {0x53, 0x2A, 0x4D, 0x18, 5, 0, 0, 0, 'h', 'e', 'l', 'l', 'o'};
    char *p = zpt_path(f->dir, "s.jsonl.zst");
    assert_int_equal(zpt_write_file(p, skip, sizeof skip), 0);
    assert_int_equal(zpt_append_file(p, z1, n1), 0);
    assert_int_equal(zpt_append_file(p, z0, n0), 0);
    assert_int_equal(zpt_append_file(p, skip, sizeof skip), 0);
    assert_int_equal(zpt_append_file(p, z2, n2), 0);
    zpi_shard sh;
    zpi_err err = {0};
    assert_int_equal(zpi_format_for_path(p)->load(p, "s.jsonl.zst", &f->lim, &sh, &err),
                     ZP_OK);
    check_three(&sh);
    assert_int_equal(sh.file_bytes, 2 * sizeof skip + n0 + n1 + n2);
    zpi_shard_free(&sh);
    free(p);
    free(z0);
    free(z1);
    free(z2);
}

/* Highly compressible data: the decoded size is far above the first
 * capacity guess, so the buffer must grow many times. */
static void test_zst_large_grows(void **state)
{
    fixture *f = *state;
    const size_t n_rec = 200000;
    const char *rec = "{\"text\": \"the same line over and over again\"}\n";
    size_t rl = strlen(rec);
    char *buf = malloc(n_rec * rl);
    for (size_t i = 0; i < n_rec; i++)
        memcpy(buf + i * rl, rec, rl);
    zpi_shard sh;
    zpi_err err = {0};
    assert_int_equal(load_file(f, "big.jsonl.zst", buf, n_rec * rl, 3, &sh, &err), ZP_OK);
    assert_int_equal(sh.n_records, n_rec);
    assert_int_equal(sh.data_len, n_rec * rl);
    assert_memory_equal(sh.data, buf, n_rec * rl);
    assert_int_equal(sh.offsets[n_rec - 1], (n_rec - 1) * rl);
    assert_true(sh.file_bytes * 20 < sh.data_len);
    zpi_shard_free(&sh);
    /* and plain, larger than one read */
    assert_int_equal(load_file(f, "big.jsonl", buf, n_rec * rl, 0, &sh, &err), ZP_OK);
    assert_int_equal(sh.n_records, n_rec);
    assert_memory_equal(sh.data, buf, n_rec * rl);
    zpi_shard_free(&sh);
    free(buf);
}

/* One zstd frame written by the streaming API: no content size in its
 * header. */
static char *zst_unknown_size(const char *data, size_t len, size_t *out_len)
{
    size_t cap = ZSTD_compressBound(len) + 1024;
    char *out = malloc(cap);
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ZSTD_outBuffer ob = {out, cap, 0};
    ZSTD_inBuffer ib = {data, len, 0};
    assert_false(ZSTD_isError(ZSTD_compressStream2(cc, &ob, &ib, ZSTD_e_continue)));
    assert_int_equal(ib.pos, len);
    ZSTD_inBuffer none = {NULL, 0, 0};
    assert_int_equal(ZSTD_compressStream2(cc, &ob, &none, ZSTD_e_end), 0);
    ZSTD_freeCCtx(cc);
    assert_int_equal(ZSTD_getFrameContentSize(out, ob.pos), ZSTD_CONTENTSIZE_UNKNOWN);
    *out_len = ob.pos;
    return out;
}

/* Decoded sizes around the output buffer's growth steps: when the last block
 * of the file does not fit the space left, zstd keeps the rest inside and
 * must be called again after all input is consumed. */
static void test_zst_output_boundaries(void **state)
{
    fixture *f = *state;
    const char *rec = "{\"text\": \"compressible compressible compressible\"}\n";
    size_t rl = strlen(rec);
    size_t max_n = (size_t)3 << 20;
    char *buf = malloc(max_n + rl);
    for (size_t i = 0; i + rl <= max_n + rl; i += rl)
        memcpy(buf + i, rec, rl);
    zpi_err err = {0};
    char *p = zpt_path(f->dir, "u.jsonl.zst");
    for (size_t n = 100 * 1000; n <= max_n; n = n * 9 / 8) {
        size_t len = n - n % rl;
        zpi_shard sh;
        /* frame header with the content size */
        zp_status st = load_file(f, "o.jsonl.zst", buf, len, 1, &sh, &err);
        if (st != ZP_OK)
            fail_msg("%zu bytes: %s", len, err.msg);
        assert_int_equal(sh.data_len, len);
        assert_int_equal(sh.n_records, len / rl);
        zpi_shard_free(&sh);
        /* streamed frame: size unknown, the buffer grows */
        size_t zn;
        char *z = zst_unknown_size(buf, len, &zn);
        assert_int_equal(zpt_write_file(p, z, zn), 0);
        free(z);
        st = zpi_format_for_path(p)->load(p, "u.jsonl.zst", &f->lim, &sh, &err);
        if (st != ZP_OK)
            fail_msg("%zu bytes, streamed: %s", len, err.msg);
        assert_int_equal(sh.data_len, len);
        assert_int_equal(sh.n_records, len / rl);
        zpi_shard_free(&sh);
    }
    free(p);
    free(buf);
}

static void test_no_final_newline(void **state)
{
    fixture *f = *state;
    const char *c = "{\"a\": 1}\n{\"a\": 22}";
    for (int frames = 0; frames <= 2; frames++) {
        zpi_shard sh;
        zpi_err err = {0};
        assert_int_equal(load_file(f, frames ? "n.jsonl.zst" : "n.jsonl", c, strlen(c), frames, &sh,
                                   &err),
                         ZP_OK);
        assert_int_equal(sh.n_records, 2);
        assert_record(&sh, 0, "{\"a\": 1}");
        assert_record(&sh, 1, "{\"a\": 22}");
        assert_int_equal(sh.offsets[2], sh.data_len + 1);
        /* the last record parses in place (padding after it) */
        assert_int_equal(zpi_json_parse(f->json, sh.data + sh.offsets[1], 9, &err),
                         ZP_OK);
        zpi_shard_free(&sh);
    }
}

static void test_crlf(void **state)
{
    fixture *f = *state;
    const char *c = "{\"text\": \"x\"}\r\n{\"text\": \"y\"}\r\n";
    for (int frames = 0; frames <= 1; frames++) {
        zpi_shard sh;
        zpi_err err = {0};
        assert_int_equal(load_file(f, frames ? "c.jsonl.zst" : "c.jsonl", c, strlen(c), frames, &sh,
                                   &err),
                         ZP_OK);
        assert_int_equal(sh.n_records, 2);
        /* the CR stays part of the record; JSON treats it as whitespace */
        assert_record(&sh, 1, "{\"text\": \"y\"}\r");
        const char *s;
        size_t n;
        assert_int_equal(zpi_json_parse(f->json, sh.data + sh.offsets[1],
                                        sh.offsets[2] - 1 - sh.offsets[1], &err),
                         ZP_OK);
        assert_int_equal(zpi_json_get_string(f->json, "text", &s, &n), ZP_OK);
        assert_memory_equal(s, "y", 1);
        zpi_shard_free(&sh);
    }
}

/* ------------------------------------------------------------ malformed */

/* A shard loads (JSON is not checked at load); the fetch stage's parse of
 * the bad line names the problem. */
static void test_bad_json_line(void **state)
{
    fixture *f = *state;
    const char *c = "{\"text\": \"ok\"}\n{\"text\": \"broken}\n{\"text\": \"ok\"}\n";
    zpi_shard sh;
    zpi_err err = {0};
    assert_int_equal(load_file(f, "b.jsonl.zst", c, strlen(c), 1, &sh, &err), ZP_OK);
    assert_int_equal(sh.n_records, 3);
    assert_int_equal(zpi_json_parse(f->json, sh.data + sh.offsets[0],
                                    sh.offsets[1] - 1 - sh.offsets[0], &err),
                     ZP_OK);
    assert_int_equal(zpi_json_parse(f->json, sh.data + sh.offsets[1],
                                    sh.offsets[2] - 1 - sh.offsets[1], &err),
                     ZP_ERR_FORMAT);
    assert_contains(err.msg, "unclosed string");
    zpi_shard_free(&sh);
}

static void test_zst_truncated(void **state)
{
    fixture *f = *state;
    size_t zn;
    char *z = zpt_zst_compress(three, strlen(three), 2, &zn);
    char *p = zpt_path(f->dir, "t.jsonl.zst");
    assert_int_equal(zpt_write_file(p, z, zn - 6), 0); /* cut the second frame's end */
    zpi_shard sh;
    zpi_err err = {0};
    assert_int_equal(zpi_format_for_path(p)->load(p, "t.jsonl.zst", &f->lim, &sh, &err),
                     ZP_ERR_FORMAT);
    assert_contains(err.msg, "shard 't.jsonl.zst'");
    assert_contains(err.msg, "truncated zstd frame after line");
    assert_contains(err.msg, "byte");
    assert_null(sh.data);
    free(p);
    free(z);
}

static void test_zst_corrupt(void **state)
{
    fixture *f = *state;
    /* enough varied text that the frame has real compressed blocks */
    char *c = malloc(200000);
    size_t n = 0;
    for (int i = 0; n < 190000; i++)
        n += (size_t)sprintf(c + n, "{\"id\": %d, \"text\": \"value %d is %x\"}\n", i, i * 7919,
                             i * 31337);
    size_t zn;
    char *z = zpt_zst_compress(c, n, 1, &zn);
    for (size_t i = zn / 2; i < zn / 2 + 16; i++)
        z[i] ^= 0x5a;
    char *p = zpt_path(f->dir, "x.jsonl.zst");
    assert_int_equal(zpt_write_file(p, z, zn), 0);
    zpi_shard sh;
    zpi_err err = {0};
    assert_int_equal(zpi_format_for_path(p)->load(p, "x.jsonl.zst", &f->lim, &sh, &err),
                     ZP_ERR_FORMAT);
    assert_contains(err.msg, "shard 'x.jsonl.zst'");
    assert_contains(err.msg, "corrupt zstd frame after line");
    /* not zstd at all */
    assert_int_equal(zpt_write_file(p, three, strlen(three)), 0);
    assert_int_equal(zpi_format_for_path(p)->load(p, "x.jsonl.zst", &f->lim, &sh, &err),
                     ZP_ERR_FORMAT);
    assert_contains(err.msg, "corrupt zstd frame after line 0 (decoded byte 0");
    free(p);
    free(z);
    free(c);
}

static void test_missing_file(void **state)
{
    fixture *f = *state;
    char *p = zpt_path(f->dir, "nope.jsonl.zst");
    zpi_shard sh;
    zpi_err err = {0};
    assert_int_equal(zpi_format_for_path(p)->load(p, "nope.jsonl.zst", &f->lim, &sh, &err),
                     ZP_ERR_IO);
    assert_contains(err.msg, "shard 'nope.jsonl.zst'");
    assert_contains(err.msg, "No such file or directory");
    free(p);
    p = zpt_path(f->dir, "nope.jsonl");
    assert_int_equal(zpi_format_for_path(p)->load(p, "nope.jsonl", &f->lim, &sh, &err),
                     ZP_ERR_IO);
    assert_contains(err.msg, "No such file or directory");
    /* a folder is not a shard */
    assert_int_equal(zpi_format_by_name("jsonl")->load(f->dir, "d", &f->lim, &sh, &err),
                     ZP_ERR_IO);
    free(p);
}

/* No remote storage yet: a URL is a path that does not exist. */
static void test_url_is_a_missing_file(void **state)
{
    fixture *f = *state;
    zpi_shard sh;
    zpi_err err = {0};
    const char *u = "https://example.com/a.jsonl.zst";
    assert_int_equal(zpi_format_for_path(u)->load(u, u, &f->lim, &sh, &err),
                     ZP_ERR_IO);
    assert_contains(err.msg, "shard 'https://example.com/a.jsonl.zst'");
    assert_contains(err.msg, "No such file or directory");
}

/* ------------------------------------------------------------ checks on load */

/* dir/name written as plain JSONL, as zstd with the decoded size in the
 * frame header (the whole-file path) or as zstd without it (the streaming
 * path); returns the XXH64 of the file's bytes. */
static uint64_t write_kind(fixture *f, const char *name, int kind)
{
    char *p = zpt_path(f->dir, name);
    size_t n = strlen(three);
    if (kind == 0) {
        assert_int_equal(zpt_write_file(p, three, n), 0);
    } else {
        ZSTD_CCtx *c = ZSTD_createCCtx();
        assert_non_null(c);
        assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, kind == 1)));
        char z[1024];
        ZSTD_inBuffer in = {three, n, 0};
        ZSTD_outBuffer out = {z, sizeof z, 0};
        if (kind == 1)
            assert_false(ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(c, n)));
        assert_int_equal(ZSTD_compressStream2(c, &out, &in, ZSTD_e_end), 0);
        ZSTD_freeCCtx(c);
        unsigned long long fcs = ZSTD_getFrameContentSize(z, out.pos);
        assert_true(kind == 1 ? fcs == n : fcs == ZSTD_CONTENTSIZE_UNKNOWN);
        assert_int_equal(zpt_write_file(p, z, out.pos), 0);
    }
    size_t len;
    char *bytes = zpt_read_file(p, &len);
    assert_non_null(bytes);
    uint64_t h = XXH64(bytes, len, 0);
    free(bytes);
    free(p);
    return h;
}

/* The manifest's hash is checked on every load, on each read path: the
 * right hash loads, another one is an error naming the shard, the path and
 * both hashes. */
static void test_load_checks_hash(void **state)
{
    fixture *f = *state;
    const char *names[] = {"h.jsonl", "h1.jsonl.zst", "h2.jsonl.zst"};
    for (int kind = 0; kind < 3; kind++) {
        uint64_t h = write_kind(f, names[kind], kind);
        char *p = zpt_path(f->dir, names[kind]);
        zpi_load_limits lim = f->lim;
        lim.has_xxh64 = 1;
        lim.expect_xxh64 = h;
        zpi_shard sh;
        zpi_err err = {0};
        if (zpi_format_for_path(p)->load(p, names[kind], &lim, &sh, &err) != ZP_OK)
            fail_msg("%s: %s", names[kind], err.msg);
        check_three(&sh);
        zpi_shard_free(&sh);
        lim.expect_xxh64 = h ^ 1;
        assert_int_equal(zpi_format_for_path(p)->load(p, names[kind], &lim, &sh, &err),
                         ZP_ERR_FORMAT);
        char want[256];
        snprintf(want, sizeof want, "shard '%s': content hash mismatch", names[kind]);
        assert_contains(err.msg, want);
        assert_contains(err.msg, p);
        snprintf(want, sizeof want, "xxh64 %016llx", (unsigned long long)(h ^ 1));
        assert_contains(err.msg, want);
        snprintf(want, sizeof want, "has %016llx", (unsigned long long)h);
        assert_contains(err.msg, want);
        assert_null(sh.data);
        assert_null(sh.offsets);
        free(p);
    }
}

/* A record count the dataset has for the shard is checked on every load:
 * another count is an error naming the shard and both counts. */
static void test_load_checks_count(void **state)
{
    fixture *f = *state;
    const char *names[] = {"n.jsonl", "n1.jsonl.zst", "n2.jsonl.zst"};
    for (int kind = 0; kind < 3; kind++) {
        write_kind(f, names[kind], kind);
        char *p = zpt_path(f->dir, names[kind]);
        zpi_load_limits lim = f->lim;
        lim.has_records = 1;
        lim.expect_records = 3;
        zpi_shard sh;
        zpi_err err = {0};
        assert_int_equal(zpi_format_for_path(p)->load(p, names[kind], &lim, &sh, &err),
                         ZP_OK);
        zpi_shard_free(&sh);
        lim.expect_records = 4;
        lim.records_from_manifest = 1;
        assert_int_equal(zpi_format_for_path(p)->load(p, names[kind], &lim, &sh, &err),
                         ZP_ERR_FORMAT);
        char want[256];
        snprintf(want, sizeof want, "shard '%s': has 3 records but the manifest says 4",
                 names[kind]);
        assert_contains(err.msg, want);
        lim.records_from_manifest = 0;
        assert_int_equal(zpi_format_for_path(p)->load(p, names[kind], &lim, &sh, &err),
                         ZP_ERR_FORMAT);
        assert_contains(err.msg, "has 3 records but had 4 when it was indexed");
        free(p);
    }
}

static void test_empty_shard(void **state)
{
    fixture *f = *state;
    for (int frames = 0; frames <= 1; frames++) {
        const char *name = frames ? "e.jsonl.zst" : "e.jsonl";
        zpi_shard sh;
        zpi_err err = {0};
        f->lim.allow_empty = 0;
        assert_int_equal(load_file(f, name, "", 0, frames, &sh, &err), ZP_ERR_FORMAT);
        assert_contains(err.msg, name);
        assert_contains(err.msg, "empty shard");
        f->lim.allow_empty = 1;
        assert_int_equal(load_file(f, name, "", 0, frames, &sh, &err), ZP_OK);
        assert_int_equal(sh.n_records, 0);
        assert_non_null(sh.offsets);
        assert_int_equal(sh.offsets[0], 0);
        zpi_shard_free(&sh);
    }
    /* a zero-byte .zst file (no frame at all) */
    f->lim.allow_empty = 0;
    char *p = zpt_path(f->dir, "z.jsonl.zst");
    assert_int_equal(zpt_write_file(p, "", 0), 0);
    zpi_shard sh;
    zpi_err err = {0};
    assert_int_equal(zpi_format_for_path(p)->load(p, "z.jsonl.zst", &f->lim, &sh, &err),
                     ZP_ERR_FORMAT);
    assert_contains(err.msg, "empty shard");
    free(p);
}

static void test_empty_line(void **state)
{
    fixture *f = *state;
    struct {
        const char *content;
        const char *want;
    } cases[] = {
        {"{\"a\": 1}\n\n{\"a\": 2}\n", "empty record at line 2"},
        {"{\"a\": 1}\n{\"a\": 2}\n \t\r\n", "empty record at line 3"},
        {"\n", "empty record at line 1"},
        {"{\"a\": 1}\n{\"a\": 2}\n\n", "empty record at line 3"},
        {"{\"a\": 1}\n  ", "empty record at line 2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int frames = 0; frames <= 1; frames++) {
            const char *name = frames ? "l.jsonl.zst" : "l.jsonl";
            zpi_shard sh;
            zpi_err err = {0};
            assert_int_equal(load_file(f, name, cases[i].content, strlen(cases[i].content), frames,
                                       &sh, &err),
                             ZP_ERR_FORMAT);
            assert_contains(err.msg, name);
            assert_contains(err.msg, cases[i].want);
        }
    }
}

static void test_line_too_long(void **state)
{
    fixture *f = *state;
    f->lim.max_record_bytes = 16;
    const char *c = "{\"a\": 1}\n{\"a\": \"0123456789\"}\n{\"a\": 3}\n";
    for (int frames = 0; frames <= 1; frames++) {
        const char *name = frames ? "long.jsonl.zst" : "long.jsonl";
        zpi_shard sh;
        zpi_err err = {0};
        assert_int_equal(load_file(f, name, c, strlen(c), frames, &sh, &err), ZP_ERR_LIMIT);
        assert_contains(err.msg, name);
        assert_contains(err.msg, "line 2 is longer than max_record_bytes");
    }
    /* exactly at the limit is fine; the newline does not count */
    const char *ok = "{\"a\": \"0123456\"}\n"; /* 16 bytes + newline */
    zpi_shard sh;
    zpi_err err = {0};
    assert_int_equal(load_file(f, "ok.jsonl", ok, strlen(ok), 0, &sh, &err), ZP_OK);
    zpi_shard_free(&sh);
    /* a runaway final line without newline, long past the limit */
    f->lim.max_record_bytes = 1000;
    size_t n = 3 << 20;
    char *big = malloc(n);
    memset(big, 'x', n);
    big[0] = '{';
    assert_int_equal(load_file(f, "run.jsonl.zst", big, n, 1, &sh, &err), ZP_ERR_LIMIT);
    assert_contains(err.msg, "line 1 is longer than max_record_bytes");
    free(big);
}

static void test_shard_too_big(void **state)
{
    fixture *f = *state;
    f->lim.max_shard_bytes = 100;
    char c[300];
    size_t n = 0;
    for (int i = 0; i < 20; i++)
        n += (size_t)sprintf(c + n, "{\"a\": %d}\n", i);
    for (int frames = 0; frames <= 1; frames++) {
        const char *name = frames ? "big.jsonl.zst" : "big.jsonl";
        zpi_shard sh;
        zpi_err err = {0};
        assert_int_equal(load_file(f, name, c, n, frames, &sh, &err), ZP_ERR_LIMIT);
        assert_contains(err.msg, name);
        assert_contains(err.msg, "max_shard_bytes");
    }
    /* exactly at the limit loads */
    f->lim.max_shard_bytes = n;
    for (int frames = 0; frames <= 1; frames++) {
        zpi_shard sh;
        zpi_err err = {0};
        assert_int_equal(load_file(f, frames ? "eq.jsonl.zst" : "eq.jsonl", c, n, frames, &sh, &err),
                         ZP_OK);
        assert_int_equal(sh.n_records, 20);
        zpi_shard_free(&sh);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_json_string_field, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_escapes_and_nul, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_not_object, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_invalid_utf8, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_reuse, setup, teardown),
        cmocka_unit_test(test_format_lookup),
        cmocka_unit_test_setup_teardown(test_jsonl_good, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zst_single_frame, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zst_multi_frame, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zst_skippable_and_empty_frames, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zst_large_grows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zst_output_boundaries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_final_newline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crlf, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_json_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zst_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zst_corrupt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_url_is_a_missing_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_checks_hash, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_checks_count, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_shard, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_line_too_long, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shard_too_big, setup, teardown),
    };
    return cmocka_run_group_tests_name("format", tests, NULL, NULL);
}
