/*
 * test_parquet.c - the Parquet reader (src/formats/parquet.h) against files
 * pyarrow wrote (tests/parquet/make_fixtures.py, run by the ctest fixture
 * parquet_fixtures with tools/pqref.sh's pyarrow; the folder comes in
 * ZP_PQ_FIXTURES): every codec, page version, dictionary setting and forced
 * encoding compared field by field with pyarrow's own reading; row ranges;
 * the footer from a file's tail; refused files; truncated and bit-flipped
 * files.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "formats/parquet.h"
#include "testutil.h"

static const char *fixdir(void) {
    const char *d = getenv("ZP_PQ_FIXTURES");
    if (!d || !*d)
        fail_msg("ZP_PQ_FIXTURES is not set (run through ctest: the parquet_fixtures test makes "
                 "the files)");
    return d;
}

static char *fixture(const char *name, const char *ext) {
    char *p = NULL;
    if (asprintf(&p, "%s/%s%s", fixdir(), name, ext) < 0)
        fail();
    return p;
}

/* Numbers equal by value (pyarrow writes 3.0 where the reader writes 3),
 * integers exactly; everything else as jansson compares it. */
static int same(json_t *a, json_t *b) {
    if (json_is_number(a) && json_is_number(b)) {
        if (json_is_integer(a) && json_is_integer(b))
            return json_integer_value(a) == json_integer_value(b);
        return json_number_value(a) == json_number_value(b);
    }
    if (json_is_array(a) && json_is_array(b)) {
        if (json_array_size(a) != json_array_size(b))
            return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!same(json_array_get(a, i), json_array_get(b, i)))
                return 0;
        return 1;
    }
    if (json_is_object(a) && json_is_object(b)) {
        if (json_object_size(a) != json_object_size(b))
            return 0;
        const char *k;
        json_t *v;
        json_object_foreach(a, k, v) {
            json_t *w = json_object_get(b, k);
            if (!w || !same(v, w))
                return 0;
        }
        return 1;
    }
    return json_equal(a, b);
}

/* The expected lines of a fixture. */
static char **expected_lines(const char *name, size_t *n) {
    char *path = fixture(name, ".expected.jsonl");
    size_t len;
    char *all = zpt_read_file(path, &len);
    assert_non_null(all);
    free(path);
    size_t cap = 16, k = 0;
    char **v = malloc(cap * sizeof *v);
    char *s = all;
    while (*s) {
        char *e = strchr(s, '\n');
        assert_non_null(e);
        if (k == cap)
            v = realloc(v, (cap *= 2) * sizeof *v);
        v[k++] = strndup(s, (size_t)(e - s));
        s = e + 1;
    }
    free(all);
    *n = k;
    return v;
}

/* Records [0, sh->n_records) of sh against expected lines first.. */
static void compare_shard(const char *name, const zpi_shard *sh, char **exp, size_t first) {
    assert_non_null(sh->offsets);
    for (size_t i = 0; i < sh->n_records; i++) {
        const char *rec = sh->data + sh->offsets[i];
        size_t len = (size_t)(sh->offsets[i + 1] - sh->offsets[i]);
        assert_true(len >= 1);
        assert_int_equal(rec[len - 1], '\n');
        json_error_t je;
        json_t *a = json_loadb(rec, len - 1, 0, &je);
        if (!a)
            fail_msg("%s row %zu: not JSON (%s): %.*s", name, first + i, je.text, (int)len, rec);
        json_t *b = json_loads(exp[first + i], 0, &je);
        assert_non_null(b);
        if (!same(a, b))
            fail_msg("%s row %zu differs:\n zephon:  %.*s\n pyarrow: %s", name, first + i,
                     (int)len - 1, rec, exp[first + i]);
        json_decref(a);
        json_decref(b);
    }
    /* the padding is zero */
    for (size_t i = 0; i < ZPI_JSON_PADDING; i++)
        assert_int_equal(sh->data[sh->data_len + i], 0);
}

static void free_lines(char **v, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* Every readable fixture, read in ranges of several sizes (crossing row
 * groups), equals pyarrow's reading. */
static void test_parquet_fixtures_match(void **state) {
    (void)state;
    char *man = fixture("MANIFEST", "");
    size_t len;
    char *all = zpt_read_file(man, &len);
    assert_non_null(all);
    free(man);
    int files = 0;
    for (char *name = strtok(all, "\n"); name; name = strtok(NULL, "\n")) {
        size_t n_exp;
        char **exp = expected_lines(name, &n_exp);
        char *path = fixture(name, ".parquet");
        zpi_pq_file *f = NULL;
        zpi_err err = {0};
        if (zpi_pq_open(path, name, &f, &err) != ZP_OK)
            fail_msg("%s: %s", name, zpi_err_msg(&err));
        assert_int_equal(zpi_pq_num_rows(f), n_exp);
        uint64_t sum = 0;
        for (size_t g = 0; g < zpi_pq_num_row_groups(f); g++)
            sum += zpi_pq_row_group_rows(f, g);
        assert_int_equal(sum, n_exp);
        static const uint64_t steps[] = {1, 333, 1000, 7, 100000};
        uint64_t at = 0;
        for (size_t k = 0; at < n_exp || k == 0; k++) {
            uint64_t n = steps[k % 5];
            if (n > n_exp - at)
                n = n_exp - at;
            zpi_shard sh;
            if (zpi_pq_read_rows(f, at, n, NULL, &sh, &err) != ZP_OK)
                fail_msg("%s rows %llu+%llu: %s", name, (unsigned long long)at,
                         (unsigned long long)n, zpi_err_msg(&err));
            assert_int_equal(sh.n_records, n);
            assert_int_equal(sh.first_record, at);
            compare_shard(name, &sh, exp, (size_t)at);
            zpi_shard_free(&sh);
            at += n;
            if (n == 0)
                break;
        }
        zpi_pq_close(f);
        free(path);
        free_lines(exp, n_exp);
        files++;
    }
    free(all);
    assert_true(files >= 20);
}

/* Ranges: across a row-group boundary, first and last row, backwards, n = 0,
 * out of range; a spare buffer is taken; the stored bytes are counted. */
static void test_parquet_ranges(void **state) {
    (void)state;
    const char *name = "snappy_v1_dict";
    size_t n_exp;
    char **exp = expected_lines(name, &n_exp);
    char *path = fixture(name, ".parquet");
    zpi_pq_file *f = NULL;
    zpi_err err = {0};
    assert_int_equal(zpi_pq_open(path, name, &f, &err), ZP_OK);
    assert_true(zpi_pq_num_row_groups(f) >= 3);
    uint64_t g0 = zpi_pq_row_group_rows(f, 0);
    zpi_shard sh;
    /* crossing the first boundary */
    assert_int_equal(zpi_pq_read_rows(f, g0 - 2, 5, NULL, &sh, &err), ZP_OK);
    compare_shard(name, &sh, exp, g0 - 2);
    assert_true(sh.file_bytes > 0);
    zpi_shard_free(&sh);
    /* the last row, then the first (backwards), then one in the same group again */
    assert_int_equal(zpi_pq_read_rows(f, n_exp - 1, 1, NULL, &sh, &err), ZP_OK);
    compare_shard(name, &sh, exp, n_exp - 1);
    zpi_shard_free(&sh);
    assert_int_equal(zpi_pq_read_rows(f, 0, 1, NULL, &sh, &err), ZP_OK);
    compare_shard(name, &sh, exp, 0);
    zpi_shard_free(&sh);
    /* consecutive segments of the row group: decoded once (no bytes read) */
    assert_int_equal(zpi_pq_read_rows(f, 1, 10, NULL, &sh, &err), ZP_OK);
    compare_shard(name, &sh, exp, 1);
    assert_int_equal(sh.file_bytes, 0);
    zpi_shard_free(&sh);
    /* a spare buffer is taken */
    zpi_load_bufs bufs = {0};
    bufs.data_cap = 1 << 20;
    bufs.data = malloc(bufs.data_cap + ZPI_JSON_PADDING);
    char *spare = bufs.data;
    assert_int_equal(zpi_pq_read_rows(f, 500, 600, &bufs, &sh, &err), ZP_OK);
    assert_null(bufs.data);
    assert_ptr_equal(sh.data, spare);
    compare_shard(name, &sh, exp, 500);
    zpi_shard_free(&sh);
    /* n = 0, at the end too */
    assert_int_equal(zpi_pq_read_rows(f, 5, 0, NULL, &sh, &err), ZP_OK);
    assert_int_equal(sh.n_records, 0);
    assert_int_equal(sh.data_len, 0);
    assert_int_equal(sh.offsets[0], 0);
    zpi_shard_free(&sh);
    assert_int_equal(zpi_pq_read_rows(f, n_exp, 0, NULL, &sh, &err), ZP_OK);
    zpi_shard_free(&sh);
    /* out of range */
    assert_int_equal(zpi_pq_read_rows(f, n_exp, 1, NULL, &sh, &err), ZP_ERR_INVALID);
    assert_non_null(strstr(zpi_err_msg(&err), name));
    assert_null(sh.data);
    assert_int_equal(zpi_pq_read_rows(f, n_exp - 3, 4, NULL, &sh, &err), ZP_ERR_INVALID);
    assert_int_equal(zpi_pq_read_rows(f, UINT64_MAX, 2, NULL, &sh, &err), ZP_ERR_INVALID);
    zpi_pq_close(f);
    free(path);
    free_lines(exp, n_exp);

    /* random ranges (fixed seed), forwards and backwards: on lists with the
     * DELTA encodings, and on files of many small pages (a range that goes
     * back before pages already released decodes its row group anew) */
    static const char *const rnd[] = {"enc_v2_zstd", "snappy_v1_plain", "zstd_v2_plain",
                                      "dict_fallback", "none_v1_plain"};
    for (size_t fi = 0; fi < sizeof rnd / sizeof *rnd; fi++) {
        name = rnd[fi];
        exp = expected_lines(name, &n_exp);
        path = fixture(name, ".parquet");
        assert_int_equal(zpi_pq_open(path, name, &f, &err), ZP_OK);
        unsigned seed = 7;
        for (int k = 0; k < 60; k++) {
            seed = seed * 1103515245u + 12345u;
            uint64_t a = (seed >> 8) % n_exp;
            seed = seed * 1103515245u + 12345u;
            uint64_t n = (seed >> 8) % (k % 2 ? 1500 : 40);
            if (n > n_exp - a)
                n = n_exp - a;
            assert_int_equal(zpi_pq_read_rows(f, a, n, NULL, &sh, &err), ZP_OK);
            compare_shard(name, &sh, exp, (size_t)a);
            zpi_shard_free(&sh);
            /* and the rows right after, as the next segment asks for them */
            if (a + n < n_exp) {
                uint64_t m = n_exp - (a + n) < 25 ? n_exp - (a + n) : 25;
                assert_int_equal(zpi_pq_read_rows(f, a + n, m, NULL, &sh, &err), ZP_OK);
                compare_shard(name, &sh, exp, (size_t)(a + n));
                zpi_shard_free(&sh);
            }
        }
        zpi_pq_close(f);
        free(path);
        free_lines(exp, n_exp);
    }
}

/* The row count from the tail of a file, as a range request fetches it. */
static void test_parquet_footer_rows(void **state) {
    (void)state;
    char *path = fixture("zstd_v2_dict", ".parquet");
    size_t len;
    char *all = zpt_read_file(path, &len);
    assert_non_null(all);
    uint64_t rows = 0;
    size_t need = 0;
    zpi_err err = {0};
    assert_int_equal(zpi_pq_footer_rows(all + len - 4, 4, len, "t", &rows, &need, &err), ZP_END);
    assert_int_equal(need, 8);
    assert_int_equal(zpi_pq_footer_rows(all + len - 8, 8, len, "t", &rows, &need, &err), ZP_END);
    assert_true(need > 8 && need < len);
    assert_int_equal(zpi_pq_footer_rows(all + len - need + 1, need - 1, len, "t", &rows, &need, &err),
                     ZP_END);
    assert_int_equal(zpi_pq_footer_rows(all + len - need, need, len, "t", &rows, &need, &err), ZP_OK);
    assert_int_equal(rows, 2500);
    assert_int_equal(zpi_pq_footer_rows(all, len, len, "t", &rows, &need, &err), ZP_OK);
    assert_int_equal(rows, 2500);
    /* a corrupt footer */
    all[len - need + 2] ^= 0x5a;
    all[len - need + 3] ^= 0xff;
    zp_status s = zpi_pq_footer_rows(all, len, len, "t", &rows, &need, &err);
    if (s != ZP_OK) {
        assert_int_equal(s, ZP_ERR_FORMAT);
        assert_non_null(strstr(zpi_err_msg(&err), "shard 't'"));
    }
    memcpy(all + len - 4, "PARX", 4);
    assert_int_equal(zpi_pq_footer_rows(all, len, len, "t", &rows, &need, &err), ZP_ERR_FORMAT);
    assert_non_null(strstr(zpi_err_msg(&err), "not a Parquet file"));
    free(all);
    free(path);
}

static void expect_refused(const char *name, const char *s1, const char *s2, int at_open) {
    char *path = fixture(name, ".parquet");
    zpi_pq_file *f = NULL;
    zpi_err err = {0};
    zp_status s = zpi_pq_open(path, name, &f, &err);
    if (!at_open) {
        assert_int_equal(s, ZP_OK);
        zpi_shard sh;
        s = zpi_pq_read_rows(f, 0, zpi_pq_num_rows(f), NULL, &sh, &err);
        zpi_pq_close(f);
    } else {
        assert_null(f);
    }
    assert_int_equal(s, ZP_ERR_FORMAT);
    const char *m = zpi_err_msg(&err);
    if (!strstr(m, name) || !strstr(m, s1) || (s2 && !strstr(m, s2)))
        fail_msg("%s: message '%s' lacks '%s' / '%s'", name, m, s1, s2 ? s2 : "");
    free(path);
}

/* What the reader does not read is refused, naming the column (and the row
 * group for a codec) and what is unsupported. */
static void test_parquet_refused(void **state) {
    (void)state;
    expect_refused("bad_lz4", "row group 0", "LZ4", 1);
    expect_refused("bad_brotli", "row group 0", "BROTLI", 1);
    expect_refused("bad_struct", "column 's'", "struct", 1);
    expect_refused("bad_int96", "column 't'", "INT96", 1);
    expect_refused("bad_fixed", "column 'd'", "FIXED_LEN_BYTE_ARRAY", 1);
    expect_refused("bad_map", "column 'm'", "map", 1);
    expect_refused("bad_nested", "column 'l'", "list of lists", 1);
    expect_refused("bad_binary", "column 'b', row group 0, row 1", "not valid UTF-8", 0);
}

static char *write_tmp(const char *dir, const char *name, const char *data, size_t len) {
    char *p = zpt_path(dir, name);
    assert_int_equal(zpt_write_file(p, data, len), 0);
    return p;
}

/* Open and read all; the result is OK or an error naming the shard. */
static zp_status read_all(const char *path, zpi_err *err) {
    zpi_pq_file *f = NULL;
    zp_status s = zpi_pq_open(path, "damaged", &f, err);
    if (s == ZP_OK) {
        zpi_shard sh;
        s = zpi_pq_read_rows(f, 0, zpi_pq_num_rows(f), NULL, &sh, err);
        if (s == ZP_OK)
            zpi_shard_free(&sh);
        zpi_pq_close(f);
    }
    if (s != ZP_OK) {
        if (!strstr(zpi_err_msg(err), "shard 'damaged'"))
            fail_msg("message without the shard: %s", zpi_err_msg(err));
        assert_true(s == ZP_ERR_FORMAT || s == ZP_ERR_NOMEM);
    }
    return s;
}

/* Truncated, bit-flipped (footer, page headers, page data), wrong magic,
 * encrypted footer: clear errors, no crash (run under ASan in CI). */
static void test_parquet_damaged(void **state) {
    (void)state;
    char *dir = zpt_tmpdir();
    const char *srcs[] = {"snappy_v2_dict", "none_v1_plain", "enc_v1_zstd"};
    for (size_t si = 0; si < 3; si++) {
        char *path = fixture(srcs[si], ".parquet");
        size_t len;
        char *all = zpt_read_file(path, &len);
        assert_non_null(all);
        zpi_err err = {0};
        /* truncated at several offsets: always an error */
        size_t cuts[] = {0, 3, 4, 11, 12, 100, len / 3, len / 2, len - 200, len - 9, len - 1};
        for (size_t k = 0; k < sizeof cuts / sizeof *cuts; k++) {
            char *p = write_tmp(dir, "t.parquet", all, cuts[k]);
            assert_int_not_equal(read_all(p, &err), ZP_OK);
            free(p);
        }
        /* a truncated file keeping its last 8 bytes: the footer is cut */
        {
            char *buf = malloc(len);
            memcpy(buf, all, len / 2);
            memcpy(buf + len / 2, all + len - 8, 8);
            char *p = write_tmp(dir, "t.parquet", buf, len / 2 + 8);
            assert_int_not_equal(read_all(p, &err), ZP_OK);
            if (!strstr(zpi_err_msg(&err), "byte"))
                fail_msg("no offset in: %s", zpi_err_msg(&err));
            free(p);
            free(buf);
        }
        /* wrong magic, encrypted footer */
        char *buf = malloc(len);
        memcpy(buf, all, len);
        memcpy(buf + len - 4, "PARX", 4);
        char *p = write_tmp(dir, "t.parquet", buf, len);
        assert_int_equal(read_all(p, &err), ZP_ERR_FORMAT);
        assert_non_null(strstr(zpi_err_msg(&err), "not a Parquet file"));
        free(p);
        memcpy(buf + len - 4, "PARE", 4);
        p = write_tmp(dir, "t.parquet", buf, len);
        assert_int_equal(read_all(p, &err), ZP_ERR_FORMAT);
        assert_non_null(strstr(zpi_err_msg(&err), "encrypted"));
        free(p);
        memcpy(buf, all, len);
        memcpy(buf, "XAR1", 4);
        p = write_tmp(dir, "t.parquet", buf, len);
        assert_int_equal(read_all(p, &err), ZP_ERR_FORMAT);
        free(p);
        /* bit flips over the whole file (page headers, data, footer): each
         * a clear error or a read that succeeds, never a crash */
        unsigned seed = 25 + (unsigned)si;
        size_t step = len / 200 + 1;
        int errors = 0, flips = 0;
        for (size_t off = 4; off < len - 8; off += step) {
            memcpy(buf, all, len);
            seed = seed * 1103515245u + 12345u;
            size_t o = off + (seed >> 8) % step;
            if (o >= len - 8)
                o = len - 9;
            buf[o] ^= (char)(1u << ((seed >> 4) & 7));
            p = write_tmp(dir, "t.parquet", buf, len);
            errors += read_all(p, &err) != ZP_OK;
            flips++;
            free(p);
        }
        /* the footer's bytes one by one */
        size_t flen = (unsigned char)all[len - 8] | (size_t)(unsigned char)all[len - 7] << 8 |
                      (size_t)(unsigned char)all[len - 6] << 16;
        for (size_t o = len - 8 - flen; o < len - 8; o += flen / 150 + 1) {
            memcpy(buf, all, len);
            buf[o] ^= 0x41;
            p = write_tmp(dir, "t.parquet", buf, len);
            errors += read_all(p, &err) != ZP_OK;
            flips++;
            free(p);
        }
        assert_true(errors > 0 && flips > 0);
        free(buf);
        free(all);
        free(path);
    }
    zpt_rmtree(dir);
    free(dir);
}

/* Damage in the first page of the first column chunk (header, then snappy
 * data): the error names the column, the row group and the page's offset. */
static void test_parquet_damaged_page(void **state) {
    (void)state;
    char *dir = zpt_tmpdir();
    char *path = fixture("snappy_v1_plain", ".parquet");
    size_t len;
    char *all = zpt_read_file(path, &len);
    assert_non_null(all);
    char *buf = malloc(len);
    int header = 0, data = 0;
    for (size_t o = 4; o < 300; o += 2) {
        memcpy(buf, all, len);
        buf[o] = (char)0xff;
        char *p = write_tmp(dir, "p.parquet", buf, len);
        zpi_err err = {0};
        if (read_all(p, &err) != ZP_OK) {
            const char *m = zpi_err_msg(&err);
            if (!strstr(m, "column 'id', row group 0: page at byte 4: "))
                fail_msg("offset %zu: %s", o, m);
            header += strstr(m, "page header") != NULL;
            data += strstr(m, "SNAPPY data") != NULL;
        }
        free(p);
    }
    assert_true(header > 0 && data > 0);
    free(buf);
    free(all);
    free(path);
    zpt_rmtree(dir);
    free(dir);
}

/* Inputs the fuzz target found (tests/parquet/regress): each reads or fails
 * with a message naming the shard; under the sanitizer builds, without
 * undefined behaviour (empty-page-values: a page of no values offset a NULL
 * value buffer). */
static void test_parquet_fuzz_regressions(void **state) {
    (void)state;
    static const char *files[] = {"empty-page-values.parquet"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char *p = NULL;
        assert_true(asprintf(&p, "%s/parquet/regress/%s", ZP_TEST_SRC, files[i]) > 0);
        zpi_err err = {0};
        read_all(p, &err);
        free(p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parquet_fixtures_match),
        cmocka_unit_test(test_parquet_ranges),
        cmocka_unit_test(test_parquet_footer_rows),
        cmocka_unit_test(test_parquet_refused),
        cmocka_unit_test(test_parquet_damaged),
        cmocka_unit_test(test_parquet_damaged_page),
        cmocka_unit_test(test_parquet_fuzz_regressions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
