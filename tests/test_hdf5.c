/* test_hdf5.c - HDF5 shards (src/formats/format_hdf5.c): the reader of every
 * layout (load + read of all records: in order, shuffled subsets,
 * repeats), what it refuses, damaged files, the token writer, the sample
 * writer, and the HDF5 lock. Fixtures are written with the HDF5 C API
 * (under the HDF5 lock, like every HDF5 call of the process). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <hdf5.h>
#include <xxhash.h>

#include "ops/chunk.h"
#include "formats/format.h"
#include "formats/hdf5_util.h"
#include "formats/reader.h"
#include "testutil.h"
#include "formats/tokw.h"
#include "zephon/pipeline.h"

/* ------------------------------------------------------------ helpers */

typedef struct fixture {
    char *dir;
    zpi_load_limits lim;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->dir = zpt_tmpdir();
    f->lim.max_record_bytes = 1 << 20;
    f->lim.max_shard_bytes = (size_t)64 << 20;
    if (!f->dir)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    /* every HDF5 object the test and the library opened is closed */
    zpi_h5_lock(NULL);
    ssize_t open_ids = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
    hsize_t nt = 0, ns = 0, np = 0;
    H5Inmembers(H5I_DATATYPE, &nt);
    H5Inmembers(H5I_DATASPACE, &ns);
    H5Inmembers(H5I_GENPROP_LST, &np);
    zpi_h5_unlock();
    if (nt || ns || np)
        print_error("open HDF5 ids: %llu types, %llu spaces, %llu property lists\n",
                    (unsigned long long)nt, (unsigned long long)ns, (unsigned long long)np);
    assert_true(nt == 0 && ns == 0 && np == 0);
    if (open_ids != 0)
        print_error("%zd HDF5 objects still open\n", open_ids);
    assert_int_equal(open_ids, 0);
    zpt_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

static uint64_t rng_s = 12345;
static uint64_t rnd(void)
{
    uint64_t z = (rng_s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A new file for fixtures (caller holds the lock). */
static hid_t fx_create(const char *path)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(f >= 0);
    return f;
}

static void fx_write(hid_t loc, const char *name, hid_t ftype, hid_t mtype, int rank,
                     const hsize_t *dims, const void *buf)
{
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t d = H5Dcreate2(loc, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(d >= 0);
    assert_true(H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
    H5Dclose(d);
    H5Sclose(sp);
}

static void fx_strings(hid_t f, const char *name, char **s, size_t n)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hsize_t d = n;
    fx_write(f, name, t, t, 1, &d, s);
    H5Tclose(t);
}

/* Load path (lim) and return the shard; asserts success. */
static zpi_shard load_ok(const char *path, const zpi_load_limits *lim)
{
    const zpi_format *fmt = zpi_format_for_path(path);
    assert_non_null(fmt);
    assert_string_equal(fmt->name, "hdf5");
    zpi_shard sh;
    zpi_err err = {0};
    zp_status st = fmt->load(path, "s.h5", lim, &sh, &err);
    if (st != ZP_OK)
        fail_msg("load failed: %s", err.msg);
    assert_non_null(sh.rd);
    return sh;
}

/* A failed load: its status, and the message in err (must name the shard
 * and, when given, contain `want`). */
static zp_status load_fail(const char *path, const zpi_load_limits *lim, const char *want)
{
    const zpi_format *fmt = zpi_format_for_path(path);
    zpi_shard sh;
    zpi_err err = {0};
    zp_status st = fmt->load(path, "s.h5", lim, &sh, &err);
    if (st == ZP_OK)
        fail_msg("load of %s succeeded (wanted '%s')", path, want ? want : "");
    assert_null(sh.rd);
    assert_non_null(strstr(err.msg, "shard 's.h5'"));
    if (want && !strstr(err.msg, want))
        fail_msg("message '%s' lacks '%s'", err.msg, want);
    return st;
}

typedef struct badlog {
    size_t rows[64];
    zp_status st[64];
    char last[512];
    size_t n;
} badlog;

static void on_bad(void *ctx, size_t row, zp_status st, const char *msg)
{
    badlog *b = ctx;
    if (b->n < 64)
        b->rows[b->n] = row, b->st[b->n] = st;
    b->n++;
    snprintf(b->last, sizeof b->last, "%s", msg);
}

/* Read records recs[0..n) (ascending, repeats allowed) into rows rows[]
 * of a fresh chunk of `cap` rows. */
static zp_status do_read(zpi_shard *sh, zpi_chunk *c, size_t cap, const uint64_t *recs,
                         const size_t *rows, size_t n, const char *text_field, badlog *bl,
                         zpi_err *err, zpi_read_req *out_req)
{
    assert_int_equal(zpi_chunk_init(c, cap), ZP_OK);
    c->n = cap;
    memset(c->recs, 0, cap * sizeof *c->recs);
    assert_int_equal(zpi_chunk_set_schema(c, sh->rd->schema), ZP_OK);
    zpi_read_req req = {.out = zpi_chunk_sink(c), .records = recs, .rows = rows, .n = n, .text_field = text_field,
                        .bad = on_bad, .bad_ctx = bl};
    zp_status st = sh->rd->read(sh->rd, &req, err);
    if (out_req)
        *out_req = req;
    return st;
}

/* The three read patterns over a shard of n records: every record in
 * order; a shuffled subset (ascending records, rows in random order); and
 * repeats. check(row, rec) verifies one delivered row. */
typedef void (*check_fn)(void *ctx, zpi_chunk *c, size_t row, uint64_t rec);

static void read_patterns(zpi_shard *sh, uint64_t n, const char *text_field, check_fn check,
                          void *ctx)
{
    uint64_t *recs = malloc((n * 2 + 8) * sizeof *recs);
    size_t *rows = malloc((n * 2 + 8) * sizeof *rows);
    zpi_err err = {0};
    for (int pass = 0; pass < 4; pass++) {
        size_t m = 0;
        if (pass == 0) {
            for (uint64_t i = 0; i < n; i++)
                recs[m] = i, rows[m] = m, m++;
        } else if (pass == 1 || pass == 2) {
            for (uint64_t i = 0; i < n; i++)
                if (rnd() % 3 == 0)
                    recs[m++] = i;
            for (size_t i = 0; i < m; i++)
                rows[i] = i;
            for (size_t i = m; i > 1; i--) { /* rows shuffled */
                size_t j = rnd() % i, t = rows[i - 1];
                rows[i - 1] = rows[j], rows[j] = t;
            }
        } else {
            for (uint64_t i = 0; i < n; i += 1 + rnd() % 3) {
                size_t rep = 1 + rnd() % 3;
                for (size_t k = 0; k < rep; k++)
                    recs[m] = i, rows[m] = m, m++;
            }
        }
        if (m == 0)
            continue;
        zpi_chunk c;
        badlog bl = {0};
        zpi_read_req req;
        zp_status st = do_read(sh, &c, m, recs, rows, m, text_field, &bl, &err, &req);
        if (st != ZP_OK)
            fail_msg("read failed (pass %d): %s", pass, err.msg);
        assert_int_equal(bl.n, 0);
        assert_true(req.bytes > 0);
        for (size_t i = 0; i < m; i++)
            check(ctx, &c, rows[i], recs[i]);
        zpi_chunk_fini(&c);
    }
    free(recs);
    free(rows);
}

static const char *text_of(zpi_chunk *c, size_t row, size_t *len)
{
    assert_true(c->recs[row].flags & ZPI_REC_TEXT);
    *len = c->recs[row].text_len;
    return c->text + c->recs[row].text_off;
}

static const int32_t *tok_of(zpi_chunk *c, size_t row, size_t *len)
{
    assert_true(c->recs[row].flags & ZPI_REC_TOKENS);
    *len = c->recs[row].tok_len;
    return c->tok + c->recs[row].tok_off;
}

/* ------------------------------------------------------------ text */

#define NTEXT 120

typedef struct text_ctx {
    char *s[NTEXT];
} text_ctx;

static void check_text(void *ctx, zpi_chunk *c, size_t row, uint64_t rec)
{
    text_ctx *t = ctx;
    size_t n;
    const char *s = text_of(c, row, &n);
    assert_int_equal(n, strlen(t->s[rec]));
    assert_memory_equal(s, t->s[rec], n);
}

static void make_texts(text_ctx *t)
{
    for (int i = 0; i < NTEXT; i++) {
        t->s[i] = malloc(400);
        if (i == 5)
            t->s[i][0] = '\0'; /* an empty text */
        else
            snprintf(t->s[i], 400, "record %d caf\xc3\xa9 \xe2\x82\xac %.*s", i, i * 2,
                     "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"
                     "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"
                     "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz");
    }
}

static void free_texts(text_ctx *t)
{
    for (int i = 0; i < NTEXT; i++)
        free(t->s[i]);
}

static void test_text_vlen(void **state)
{
    fixture *f = *state;
    char *path = zpt_path(f->dir, "t.h5");
    text_ctx t;
    make_texts(&t);
    zpi_h5_lock(NULL);
    hid_t h = fx_create(path);
    fx_strings(h, "text", t.s, NTEXT);
    H5Fclose(h);
    zpi_h5_unlock();
    zpi_shard sh = load_ok(path, &f->lim);
    assert_int_equal(sh.n_records, NTEXT);
    const zpi_schema *s = sh.rd->schema;
    assert_int_equal(s->n, 1);
    assert_string_equal(s->f[0].name, "text");
    assert_int_equal(s->f[0].kind, ZPI_FIELD_TEXT);
    read_patterns(&sh, NTEXT, NULL, check_text, &t);
    read_patterns(&sh, NTEXT, "text", check_text, &t);
    zpi_shard_free(&sh);
    /* the alternative suffix is the same format */
    char *alt = zpt_path(f->dir, "t.hdf5");
    assert_int_equal(rename(path, alt), 0);
    sh = load_ok(alt, &f->lim);
    assert_int_equal(sh.n_records, NTEXT);
    zpi_shard_free(&sh);
    free_texts(&t);
    free(path);
    free(alt);
}

static void test_text_fixed(void **state)
{
    fixture *f = *state;
    char *path = zpt_path(f->dir, "tf.h5");
    text_ctx t;
    make_texts(&t);
    size_t w = 400;
    char *buf = calloc(NTEXT, w);
    for (int i = 0; i < NTEXT; i++)
        memcpy(buf + (size_t)i * w, t.s[i], strlen(t.s[i]));
    zpi_h5_lock(NULL);
    hid_t h = fx_create(path);
    hid_t ty = H5Tcopy(H5T_C_S1);
    H5Tset_size(ty, w);
    H5Tset_strpad(ty, H5T_STR_NULLPAD);
    H5Tset_cset(ty, H5T_CSET_UTF8);
    hsize_t d = NTEXT;
    fx_write(h, "text", ty, ty, 1, &d, buf);
    H5Tclose(ty);
    H5Fclose(h);
    zpi_h5_unlock();
    zpi_shard sh = load_ok(path, &f->lim);
    assert_int_equal(sh.rd->schema->f[0].kind, ZPI_FIELD_TEXT);
    read_patterns(&sh, NTEXT, NULL, check_text, &t);
    zpi_shard_free(&sh);
    free(buf);
    free_texts(&t);
    free(path);
}

/* invalid UTF-8 and too long texts are bad records; the others arrive */
static void test_text_bad_records(void **state)
{
    fixture *f = *state;
    char *path = zpt_path(f->dir, "tb.h5");
    char *s[4] = {"good", "bad \xff\xfe utf8", "also good", NULL};
    char *big = malloc(5000);
    memset(big, 'x', 4999);
    big[4999] = '\0';
    s[3] = big;
    zpi_h5_lock(NULL);
    hid_t h = fx_create(path);
    fx_strings(h, "text", s, 4);
    H5Fclose(h);
    zpi_h5_unlock();
    zpi_load_limits lim = f->lim;
    lim.max_record_bytes = 1000;
    zpi_shard sh = load_ok(path, &lim);
    uint64_t recs[4] = {0, 1, 2, 3};
    size_t rows[4] = {0, 1, 2, 3};
    zpi_chunk c;
    badlog bl = {0};
    zpi_err err = {0};
    assert_int_equal(do_read(&sh, &c, 4, recs, rows, 4, NULL, &bl, &err, NULL), ZP_OK);
    assert_int_equal(bl.n, 2);
    assert_int_equal(bl.rows[0], 1);
    assert_int_equal(bl.st[0], ZP_ERR_FORMAT);
    assert_int_equal(bl.rows[1], 3);
    assert_int_equal(bl.st[1], ZP_ERR_LIMIT);
    assert_non_null(strstr(bl.last, "dataset '/text': record 3"));
    size_t n;
    assert_memory_equal(text_of(&c, 2, &n), "also good", 9);
    assert_false(c.recs[1].flags & ZPI_REC_TEXT);
    zpi_chunk_fini(&c);
    zpi_shard_free(&sh);
    free(big);
    free(path);
}

/* ------------------------------------------------------------ tokens */

#define NDOC 90

static size_t doc_len(uint64_t i) { return i == 7 ? 0 : 1 + (i * 37) % 50; }
static int64_t doc_tok(uint64_t i, size_t j, int64_t maxv) { return (int64_t)((i * 131 + j * 17) % (uint64_t)(maxv + 1)); }

typedef struct tok_ctx {
    int64_t maxv;
} tok_ctx;

static void check_tok(void *ctx, zpi_chunk *c, size_t row, uint64_t rec)
{
    tok_ctx *t = ctx;
    size_t n;
    const int32_t *p = tok_of(c, row, &n);
    assert_int_equal(n, doc_len(rec));
    for (size_t j = 0; j < n; j++)
        assert_int_equal(p[j], doc_tok(rec, j, t->maxv));
}

static void test_tokens_vlen_dtypes(void **state)
{
    fixture *f = *state;
    struct {
        hid_t ft, mt;
        zp_dtype dt;
        size_t es;
        int64_t maxv;
    } ty[] = {
        {H5T_STD_U8LE, H5T_NATIVE_UINT8, ZP_DTYPE_U8, 1, 255},
        {H5T_STD_I8LE, H5T_NATIVE_INT8, ZP_DTYPE_I8, 1, 127},
        {H5T_STD_U16BE, H5T_NATIVE_UINT16, ZP_DTYPE_U16, 2, 65535}, /* big-endian on disk */
        {H5T_STD_I16LE, H5T_NATIVE_INT16, ZP_DTYPE_I16, 2, 32767},
        {H5T_STD_U32LE, H5T_NATIVE_UINT32, ZP_DTYPE_U32, 4, 1000000},
        {H5T_STD_I32LE, H5T_NATIVE_INT32, ZP_DTYPE_I32, 4, 2000000000},
        {H5T_STD_U64LE, H5T_NATIVE_UINT64, ZP_DTYPE_U64, 8, 2147483647},
        {H5T_STD_I64BE, H5T_NATIVE_INT64, ZP_DTYPE_I64, 8, 70000},
    };
    for (size_t k = 0; k < sizeof ty / sizeof ty[0]; k++) {
        char name[64];
        snprintf(name, sizeof name, "tok%zu.h5", k);
        char *path = zpt_path(f->dir, name);
        hvl_t vl[NDOC];
        for (uint64_t i = 0; i < NDOC; i++) {
            size_t n = doc_len(i);
            vl[i].len = n;
            vl[i].p = malloc(n * ty[k].es + 1);
            for (size_t j = 0; j < n; j++) {
                int64_t v = doc_tok(i, j, ty[k].maxv);
                switch (ty[k].es) {
                case 1: ((uint8_t *)vl[i].p)[j] = (uint8_t)v; break;
                case 2: ((uint16_t *)vl[i].p)[j] = (uint16_t)v; break;
                case 4: ((uint32_t *)vl[i].p)[j] = (uint32_t)v; break;
                default: ((uint64_t *)vl[i].p)[j] = (uint64_t)v; break;
                }
            }
        }
        zpi_h5_lock(NULL);
        hid_t h = fx_create(path);
        hid_t ft = H5Tvlen_create(ty[k].ft), mt = H5Tvlen_create(ty[k].mt);
        hsize_t d = NDOC;
        fx_write(h, "ids", ft, mt, 1, &d, vl);
        H5Tclose(ft);
        H5Tclose(mt);
        H5Fclose(h);
        zpi_h5_unlock();
        for (uint64_t i = 0; i < NDOC; i++)
            free(vl[i].p);
        zpi_shard sh = load_ok(path, &f->lim);
        const zpi_schema *s = sh.rd->schema;
        assert_int_equal(s->n, 1);
        assert_int_equal(s->f[0].kind, ZPI_FIELD_TOKENS);
        assert_int_equal(s->f[0].dtype, ty[k].dt);
        tok_ctx t = {ty[k].maxv};
        read_patterns(&sh, NDOC, NULL, check_tok, &t);
        zpi_shard_free(&sh);
        free(path);
    }
}

/* negative ids (and ids above int32) are bad records */
static void test_tokens_out_of_range(void **state)
{
    fixture *f = *state;
    char *path = zpt_path(f->dir, "neg.h5");
    int64_t a[3] = {1, 2, 3}, b[2] = {4, -5}, cc[2] = {(int64_t)1 << 40, 1};
    hvl_t vl[3] = {{3, a}, {2, b}, {2, cc}};
    zpi_h5_lock(NULL);
    hid_t h = fx_create(path);
    hid_t t = H5Tvlen_create(H5T_NATIVE_INT64);
    hsize_t d = 3;
    fx_write(h, "ids", t, t, 1, &d, vl);
    H5Tclose(t);
    H5Fclose(h);
    zpi_h5_unlock();
    zpi_shard sh = load_ok(path, &f->lim);
    uint64_t recs[3] = {0, 1, 2};
    size_t rows[3] = {2, 1, 0};
    zpi_chunk c;
    badlog bl = {0};
    zpi_err err = {0};
    assert_int_equal(do_read(&sh, &c, 3, recs, rows, 3, NULL, &bl, &err, NULL), ZP_OK);
    assert_int_equal(bl.n, 2);
    assert_int_equal(bl.rows[0], 1);
    assert_int_equal(bl.rows[1], 0);
    assert_non_null(strstr(bl.last, "dataset '/ids': record 2: token 0"));
    size_t n;
    const int32_t *p = tok_of(&c, 2, &n);
    assert_int_equal(n, 3);
    assert_int_equal(p[2], 3);
    assert_false(c.recs[1].flags & ZPI_REC_TOKENS);
    zpi_chunk_fini(&c);
    zpi_shard_free(&sh);
    free(path);
}

/* the token writer's ragged layout, U16 and I32, read back */
static void test_ragged_tokw(void **state)
{
    fixture *f = *state;
    zp_dtype dts[2] = {ZP_DTYPE_U16, ZP_DTYPE_I32};
    for (int k = 0; k < 2; k++) {
        char *path = zpt_path(f->dir, k ? "r32.h5" : "r16.h5");
        zpi_tokw *w;
        zpi_err err = {0};
        assert_int_equal(zpi_tokw_open_hdf5(path, dts[k], "gpt2", &w, &err), ZP_OK);
        int64_t maxv = k ? 2000000000 : 65535;
        int32_t buf[64];
        for (uint64_t i = 0; i < NDOC; i++) {
            size_t n = doc_len(i);
            for (size_t j = 0; j < n; j++)
                buf[j] = (int32_t)doc_tok(i, j, maxv);
            assert_int_equal(zpi_tokw_add(w, buf, n, &err), ZP_OK);
        }
        /* nothing under the final name before commit */
        struct stat sb;
        assert_int_not_equal(stat(path, &sb), 0);
        assert_int_equal(zpi_tokw_commit(w, &err), ZP_OK);
        assert_int_equal(stat(path, &sb), 0);
        zpi_shard sh = load_ok(path, &f->lim);
        assert_int_equal(sh.n_records, NDOC);
        const zpi_schema *s = sh.rd->schema;
        assert_int_equal(s->n, 1);
        assert_string_equal(s->f[0].name, "tokens");
        assert_int_equal(s->f[0].kind, ZPI_FIELD_TOKENS);
        assert_int_equal(s->f[0].dtype, dts[k]);
        tok_ctx t = {maxv};
        read_patterns(&sh, NDOC, NULL, check_tok, &t);
        zpi_shard_free(&sh);
        /* the tokenizer attribute */
        zpi_h5_lock(NULL);
        hid_t h = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        hid_t a = H5Aopen(h, "zephon_tokenizer", H5P_DEFAULT);
        assert_true(a >= 0);
        hid_t at = H5Aget_type(a);
        char name[32] = "";
        assert_true(H5Aread(a, at, name) >= 0);
        assert_string_equal(name, "gpt2");
        H5Tclose(at);
        H5Aclose(a);
        H5Fclose(h);
        zpi_h5_unlock();
        free(path);
    }
    /* U16 refuses an id that does not fit; abort leaves nothing */
    char *path = zpt_path(f->dir, "ab.h5");
    zpi_tokw *w;
    zpi_err err = {0};
    assert_int_equal(zpi_tokw_open_hdf5(path, ZP_DTYPE_U16, NULL, &w, &err), ZP_OK);
    int32_t big[2] = {5, 70000};
    assert_int_equal(zpi_tokw_add(w, big, 2, &err), ZP_ERR_INVALID);
    assert_non_null(strstr(err.msg, "70000"));
    zpi_tokw_abort(w);
    struct stat sb;
    assert_int_not_equal(stat(path, &sb), 0);
    free(path);
}

/* a document larger than the writer's buffer (4 MB) */
static void test_ragged_big_doc(void **state)
{
    fixture *f = *state;
    char *path = zpt_path(f->dir, "bigdoc.h5");
    zpi_tokw *w;
    zpi_err err = {0};
    assert_int_equal(zpi_tokw_open_hdf5(path, ZP_DTYPE_U16, NULL, &w, &err), ZP_OK);
    size_t n = 3u << 20;
    int32_t *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++)
        d[i] = (int32_t)(i % 50000);
    int32_t one[1] = {9};
    assert_int_equal(zpi_tokw_add(w, one, 1, &err), ZP_OK);
    assert_int_equal(zpi_tokw_add(w, d, n, &err), ZP_OK);
    assert_int_equal(zpi_tokw_add(w, one, 1, &err), ZP_OK);
    assert_int_equal(zpi_tokw_commit(w, &err), ZP_OK);
    zpi_load_limits lim = f->lim;
    lim.max_record_bytes = (size_t)64 << 20;
    zpi_shard sh = load_ok(path, &lim);
    assert_int_equal(sh.n_records, 3);
    uint64_t recs[3] = {0, 1, 2};
    size_t rows[3] = {0, 1, 2};
    zpi_chunk c;
    badlog bl = {0};
    assert_int_equal(do_read(&sh, &c, 3, recs, rows, 3, NULL, &bl, &err, NULL), ZP_OK);
    size_t m;
    const int32_t *p = tok_of(&c, 1, &m);
    assert_int_equal(m, n);
    assert_memory_equal(p, d, n * sizeof *d);
    p = tok_of(&c, 2, &m);
    assert_int_equal(m, 1);
    assert_int_equal(p[0], 9);
    zpi_chunk_fini(&c);
    /* with a smaller limit, the big document is a bad record */
    zpi_shard_free(&sh);
    lim.max_record_bytes = 1 << 20;
    sh = load_ok(path, &lim);
    memset(&bl, 0, sizeof bl);
    assert_int_equal(do_read(&sh, &c, 3, recs, rows, 3, NULL, &bl, &err, NULL), ZP_OK);
    assert_int_equal(bl.n, 1);
    assert_int_equal(bl.rows[0], 1);
    assert_int_equal(bl.st[0], ZP_ERR_LIMIT);
    tok_of(&c, 2, &m);
    assert_int_equal(m, 1);
    zpi_chunk_fini(&c);
    zpi_shard_free(&sh);
    free(d);
    free(path);
}

/* hand-made ragged groups: int64 offsets accepted; bad offsets refused */
static void write_ragged(const char *path, const int64_t *offs, size_t no, hid_t oft)
{
    int32_t vals[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    zpi_h5_lock(NULL);
    hid_t h = fx_create(path);
    hid_t g = H5Gcreate2(h, "doc", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dv = 10, dof = no;
    fx_write(g, "values", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, &dv, vals);
    fx_write(g, "offsets", oft, H5T_NATIVE_INT64, 1, &dof, offs);
    H5Gclose(g);
    H5Fclose(h);
    zpi_h5_unlock();
}

static void test_ragged_checks(void **state)
{
    fixture *f = *state;
    char *path = zpt_path(f->dir, "rg.h5");
    zpi_err err = {0};
    int64_t good[4] = {0, 3, 3, 10};
    write_ragged(path, good, 4, H5T_STD_I64LE);
    zpi_shard sh = load_ok(path, &f->lim);
    assert_int_equal(sh.n_records, 3);
    uint64_t recs[3] = {0, 1, 2};
    size_t rows[3] = {0, 1, 2};
    zpi_chunk c;
    badlog bl = {0};
    assert_int_equal(do_read(&sh, &c, 3, recs, rows, 3, NULL, &bl, &err, NULL), ZP_OK);
    size_t m;
    const int32_t *p = tok_of(&c, 2, &m);
    assert_int_equal(m, 7);
    assert_int_equal(p[0], 3);
    tok_of(&c, 1, &m);
    assert_int_equal(m, 0);
    zpi_chunk_fini(&c);
    zpi_shard_free(&sh);

    int64_t end_wrong[4] = {0, 3, 3, 9};
    write_ragged(path, end_wrong, 4, H5T_STD_I64LE);
    load_fail(path, &f->lim, "dataset '/doc/offsets'");
    int64_t start_wrong[4] = {1, 3, 3, 10};
    write_ragged(path, start_wrong, 4, H5T_STD_U64LE);
    load_fail(path, &f->lim, "dataset '/doc/offsets'");
    /* decreasing in the middle: found where it is read */
    int64_t dec[4] = {0, 8, 2, 10};
    write_ragged(path, dec, 4, H5T_STD_I64LE);
    sh = load_ok(path, &f->lim);
    assert_int_equal(do_read(&sh, &c, 3, recs, rows, 3, NULL, &bl, &err, NULL),
                     ZP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "dataset '/doc/offsets': record 1"));
    zpi_chunk_fini(&c);
    zpi_shard_free(&sh);
    int64_t neg[4] = {0, -4, 3, 10};
    write_ragged(path, neg, 4, H5T_STD_I64LE);
    sh = load_ok(path, &f->lim);
    assert_int_equal(do_read(&sh, &c, 3, recs, rows, 3, NULL, &bl, &err, NULL),
                     ZP_ERR_FORMAT);
    zpi_chunk_fini(&c);
    zpi_shard_free(&sh);
    /* offsets of 32 bits are not the layout */
    write_ragged(path, good, 4, H5T_STD_I32LE);
    load_fail(path, &f->lim, "uint64 or int64");
    free(path);
}

/* ------------------------------------------------------------ fixed */

#define NFIX 77

static void check_fixed(void *ctx, zpi_chunk *c, size_t row, uint64_t rec)
{
    (void)ctx;
    /* fields sorted by name: emb (float32 [4,3]), id (int64), mask (uint8 [16]), text */
    const float *e = zpi_chunk_fixed_row(c, 0, row);
    for (int j = 0; j < 12; j++)
        assert_true(e[j] == (float)rec * 0.5f + (float)j);
    const int64_t *id = zpi_chunk_fixed_row(c, 1, row);
    assert_int_equal(*id, (int64_t)rec * -1000 - 7);
    const uint8_t *mk = zpi_chunk_fixed_row(c, 2, row);
    for (int j = 0; j < 16; j++)
        assert_int_equal(mk[j], (uint8_t)(rec + (uint64_t)j));
    size_t n;
    const char *s = text_of(c, row, &n);
    char want[32];
    snprintf(want, sizeof want, "t%llu", (unsigned long long)rec);
    assert_int_equal(n, strlen(want));
    assert_memory_equal(s, want, n);
}

static void write_fixed_file(const char *path, int deflate)
{
    float *e = malloc(NFIX * 12 * sizeof *e);
    int64_t *id = malloc(NFIX * sizeof *id);
    uint8_t *mk = malloc(NFIX * 16);
    char **t = malloc(NFIX * sizeof *t);
    for (uint64_t i = 0; i < NFIX; i++) {
        for (int j = 0; j < 12; j++)
            e[i * 12 + (uint64_t)j] = (float)i * 0.5f + (float)j;
        id[i] = (int64_t)i * -1000 - 7;
        for (int j = 0; j < 16; j++)
            mk[i * 16 + (uint64_t)j] = (uint8_t)(i + (uint64_t)j);
        t[i] = malloc(32);
        snprintf(t[i], 32, "t%llu", (unsigned long long)i);
    }
    zpi_h5_lock(NULL);
    hid_t h = fx_create(path);
    hsize_t de[3] = {NFIX, 4, 3}, di = NFIX, dm[2] = {NFIX, 16};
    if (deflate) {
        hsize_t ch[3] = {10, 4, 3};
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_chunk(dcpl, 3, ch);
        H5Pset_shuffle(dcpl);
        H5Pset_deflate(dcpl, 4);
        hid_t sp = H5Screate_simple(3, de, NULL);
        hid_t d = H5Dcreate2(h, "emb", H5T_IEEE_F32BE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        assert_true(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, e) >= 0);
        H5Dclose(d);
        H5Sclose(sp);
        H5Pclose(dcpl);
    } else {
        fx_write(h, "emb", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 3, de, e);
    }
    fx_write(h, "id", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &di, id);
    fx_write(h, "mask", H5T_STD_U8LE, H5T_NATIVE_UINT8, 2, dm, mk);
    fx_strings(h, "text", t, NFIX);
    /* attributes are ignored */
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(h, "note", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT);
    int one = 1;
    H5Awrite(a, H5T_NATIVE_INT, &one);
    H5Aclose(a);
    H5Sclose(sp);
    H5Fclose(h);
    zpi_h5_unlock();
    for (uint64_t i = 0; i < NFIX; i++)
        free(t[i]);
    free(t);
    free(e);
    free(id);
    free(mk);
}

static void test_fixed(void **state)
{
    fixture *f = *state;
    for (int deflate = 0; deflate < 2; deflate++) {
        char *path = zpt_path(f->dir, deflate ? "fz.h5" : "f.h5");
        write_fixed_file(path, deflate);
        zpi_shard sh = load_ok(path, &f->lim);
        assert_int_equal(sh.n_records, NFIX);
        const zpi_schema *s = sh.rd->schema;
        assert_int_equal(s->n, 4);
        assert_string_equal(s->f[0].name, "emb");
        assert_int_equal(s->f[0].kind, ZPI_FIELD_FIXED);
        assert_int_equal(s->f[0].dtype, ZP_DTYPE_F32);
        assert_int_equal(s->f[0].ndim, 2);
        assert_int_equal(s->f[0].dims[0], 4);
        assert_int_equal(s->f[0].dims[1], 3);
        assert_int_equal(s->f[0].item_bytes, 48);
        assert_string_equal(s->f[1].name, "id");
        assert_int_equal(s->f[1].dtype, ZP_DTYPE_I64);
        assert_int_equal(s->f[1].ndim, 0);
        assert_int_equal(s->f[1].item_bytes, 8);
        assert_string_equal(s->f[2].name, "mask");
        assert_int_equal(s->f[2].dtype, ZP_DTYPE_U8);
        assert_int_equal(s->f[2].item_bytes, 16);
        assert_int_equal(s->f[3].kind, ZPI_FIELD_TEXT);
        char desc[256];
        zpi_schema_describe(s, desc, sizeof desc);
        read_patterns(&sh, NFIX, NULL, check_fixed, NULL);
        zpi_shard_free(&sh);
        free(path);
    }
}

/* ------------------------------------------------------------ refusals */

static void test_dim0_mismatch(void **state)
{
    fixture *f = *state;
    char *path = zpt_path(f->dir, "mm.h5");
    int64_t a[5] = {0}, b[6] = {0};
    zpi_h5_lock(NULL);
    hid_t h = fx_create(path);
    hsize_t da = 5, db = 6;
    fx_write(h, "a", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &da, a);
    fx_write(h, "b", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &db, b);
    H5Fclose(h);
    zpi_h5_unlock();
    assert_int_equal(load_fail(path, &f->lim, "'/a' has 5, '/b' has 6"), ZP_ERR_FORMAT);
    free(path);
}

static void test_unsupported(void **state)
{
    fixture *f = *state;
    char *path = zpt_path(f->dir, "u.h5");
    hsize_t d = 4;
    /* compound */
    zpi_h5_lock(NULL);
    hid_t h = fx_create(path);
    hid_t ct = H5Tcreate(H5T_COMPOUND, 8);
    H5Tinsert(ct, "x", 0, H5T_NATIVE_INT32);
    H5Tinsert(ct, "y", 4, H5T_NATIVE_INT32);
    int32_t cbuf[8] = {0};
    fx_write(h, "c", ct, ct, 1, &d, cbuf);
    H5Tclose(ct);
    H5Fclose(h);
    zpi_h5_unlock();
    assert_int_equal(load_fail(path, &f->lim, "dataset '/c': type compound"), ZP_ERR_UNSUPPORTED);
    /* enum */
    zpi_h5_lock(NULL);
    h = fx_create(path);
    hid_t et = H5Tenum_create(H5T_NATIVE_INT);
    int v0 = 0, v1 = 1;
    H5Tenum_insert(et, "no", &v0);
    H5Tenum_insert(et, "yes", &v1);
    int ebuf[4] = {0, 1, 0, 1};
    fx_write(h, "e", et, et, 1, &d, ebuf);
    H5Tclose(et);
    H5Fclose(h);
    zpi_h5_unlock();
    assert_int_equal(load_fail(path, &f->lim, "dataset '/e': type enum"), ZP_ERR_UNSUPPORTED);
    /* no members */
    zpi_h5_lock(NULL);
    h = fx_create(path);
    H5Fclose(h);
    zpi_h5_unlock();
    assert_int_equal(load_fail(path, &f->lim, "no datasets"), ZP_ERR_FORMAT);
    /* two token fields */
    zpi_h5_lock(NULL);
    h = fx_create(path);
    int32_t x[1] = {1};
    hvl_t vl[4] = {{1, x}, {1, x}, {1, x}, {1, x}};
    hid_t vt = H5Tvlen_create(H5T_NATIVE_INT32);
    fx_write(h, "t1", vt, vt, 1, &d, vl);
    fx_write(h, "t2", vt, vt, 1, &d, vl);
    H5Tclose(vt);
    H5Fclose(h);
    zpi_h5_unlock();
    assert_int_equal(load_fail(path, &f->lim, "more than one token field"), ZP_ERR_UNSUPPORTED);
    /* scalar dataspace; a vlen of floats; a group that is not ragged; a
     * half-precision float */
    zpi_h5_lock(NULL);
    h = fx_create(path);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t ds = H5Dcreate2(h, "s", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Fclose(h);
    zpi_h5_unlock();
    load_fail(path, &f->lim, "dataset '/s' is a scalar");
    zpi_h5_lock(NULL);
    h = fx_create(path);
    float fl[1] = {1};
    hvl_t fv[4] = {{1, fl}, {1, fl}, {1, fl}, {1, fl}};
    vt = H5Tvlen_create(H5T_NATIVE_FLOAT);
    fx_write(h, "vf", vt, vt, 1, &d, fv);
    H5Tclose(vt);
    H5Fclose(h);
    zpi_h5_unlock();
    assert_int_equal(load_fail(path, &f->lim, "dataset '/vf'"), ZP_ERR_UNSUPPORTED);
    zpi_h5_lock(NULL);
    h = fx_create(path);
    hid_t g = H5Gcreate2(h, "grp", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(g);
    H5Fclose(h);
    zpi_h5_unlock();
    assert_int_equal(load_fail(path, &f->lim, "group '/grp'"), ZP_ERR_UNSUPPORTED);
    zpi_h5_lock(NULL);
    h = fx_create(path);
    hid_t half = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(half, 15, 10, 5, 0, 10);
    H5Tset_precision(half, 16);
    H5Tset_size(half, 2);
    H5Tset_ebias(half, 15);
    uint16_t hb[4] = {0};
    sp = H5Screate_simple(1, &d, NULL);
    ds = H5Dcreate2(h, "half", half, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(ds >= 0);
    H5Dwrite(ds, half, H5S_ALL, H5S_ALL, H5P_DEFAULT, hb);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Tclose(half);
    H5Fclose(h);
    zpi_h5_unlock();
    assert_int_equal(load_fail(path, &f->lim, "dataset '/half': type float of 2 bytes"),
                     ZP_ERR_UNSUPPORTED);
    /* a fixed record larger than ZPI_MAX_FIXED_BYTES (no data written) */
    zpi_h5_lock(NULL);
    h = fx_create(path);
    hsize_t big[3] = {2, 1 << 14, 1 << 14};
    sp = H5Screate_simple(3, big, NULL);
    ds = H5Dcreate2(h, "big", H5T_NATIVE_FLOAT, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Fclose(h);
    zpi_h5_unlock();
    assert_int_equal(load_fail(path, &f->lim, "dataset '/big'"), ZP_ERR_LIMIT);
    /* not an HDF5 file; a missing file */
    assert_int_equal(zpt_write_file(path, "{\"text\": \"json\"}\n", (size_t)-1), 0);
    load_fail(path, &f->lim, "is not an HDF5 file");
    char *missing = zpt_path(f->dir, "missing.h5");
    assert_int_equal(load_fail(missing, &f->lim, "missing.h5"), ZP_ERR_IO);
    free(missing);
    free(path);
}

static void test_empty(void **state)
{
    fixture *f = *state;
    char *path = zpt_path(f->dir, "empty.h5");
    hsize_t d = 0;
    zpi_h5_lock(NULL);
    hid_t h = fx_create(path);
    hid_t sp = H5Screate_simple(1, &d, NULL);
    hid_t ds = H5Dcreate2(h, "x", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Fclose(h);
    zpi_h5_unlock();
    load_fail(path, &f->lim, "no records");
    zpi_load_limits lim = f->lim;
    lim.allow_empty = 1;
    zpi_shard sh = load_ok(path, &lim);
    assert_int_equal(sh.n_records, 0);
    zpi_shard_free(&sh);
    free(path);
}

static void test_links_refused(void **state)
{
    fixture *f = *state;
    char *other = zpt_path(f->dir, "other.h5");
    char *path = zpt_path(f->dir, "links.h5");
    int64_t a[3] = {1, 2, 3};
    hsize_t d = 3;
    zpi_h5_lock(NULL);
    hid_t h = fx_create(other);
    fx_write(h, "a", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &d, a);
    H5Fclose(h);
    h = fx_create(path);
    fx_write(h, "a", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &d, a);
    assert_true(H5Lcreate_external(other, "/a", h, "ext", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    H5Fclose(h);
    zpi_h5_unlock();
    assert_int_equal(load_fail(path, &f->lim, "member '/ext' is an external link"),
                     ZP_ERR_UNSUPPORTED);
    zpi_h5_lock(NULL);
    h = fx_create(path);
    fx_write(h, "a", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &d, a);
    assert_true(H5Lcreate_soft("/a", h, "soft", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    H5Fclose(h);
    zpi_h5_unlock();
    assert_int_equal(load_fail(path, &f->lim, "member '/soft' is a soft link"),
                     ZP_ERR_UNSUPPORTED);
    /* a dataset whose data lives in an external raw file */
    zpi_h5_lock(NULL);
    h = fx_create(path);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_external(dcpl, "/etc/hostname", 0, 24);
    hid_t sp = H5Screate_simple(1, &d, NULL);
    hid_t ds = H5Dcreate2(h, "raw", H5T_STD_I64LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    assert_true(ds >= 0);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Pclose(dcpl);
    H5Fclose(h);
    zpi_h5_unlock();
    assert_int_equal(load_fail(path, &f->lim, "dataset '/raw' keeps its data in external files"),
                     ZP_ERR_UNSUPPORTED);
    free(path);
    free(other);
}

/* a filter that is not built in (a plugin id, optional so HDF5 lets us
 * create the dataset without it) */
static void test_filter_unavailable(void **state)
{
    fixture *f = *state;
    char *path = zpt_path(f->dir, "filt.h5");
    int64_t a[4] = {1, 2, 3, 4};
    hsize_t d = 4, ch = 2;
    zpi_h5_lock(NULL);
    hid_t h = fx_create(path);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &ch);
    herr_t e = H5Pset_filter(dcpl, 32015, H5Z_FLAG_OPTIONAL, 0, NULL);
    hid_t sp = H5Screate_simple(1, &d, NULL);
    hid_t ds = e >= 0 ? H5Dcreate2(h, "z", H5T_STD_I64LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT) : -1;
    if (ds >= 0) {
        H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, a);
        H5Dclose(ds);
    }
    H5Sclose(sp);
    H5Pclose(dcpl);
    H5Fclose(h);
    zpi_h5_unlock();
    if (ds < 0) {
        free(path);
        skip();
    }
    assert_int_equal(load_fail(path, &f->lim, "dataset '/z' needs HDF5 filter 32015"),
                     ZP_ERR_UNSUPPORTED);
    free(path);
}

static void test_hash(void **state)
{
    fixture *f = *state;
    char *path = zpt_path(f->dir, "h.h5");
    write_fixed_file(path, 0);
    size_t len;
    char *bytes = zpt_read_file(path, &len);
    zpi_load_limits lim = f->lim;
    lim.has_xxh64 = 1;
    lim.expect_xxh64 = XXH64(bytes, len, 0);
    lim.has_records = 1;
    lim.expect_records = NFIX;
    zpi_shard sh = load_ok(path, &lim);
    zpi_shard_free(&sh);
    lim.expect_xxh64 ^= 1;
    load_fail(path, &lim, "content hash mismatch");
    lim.has_xxh64 = 0;
    lim.expect_records = NFIX + 1;
    load_fail(path, &lim, "records");
    free(bytes);
    free(path);
}

/* ------------------------------------------------------------ damage */

/* Load and read every record of the file at path; whatever happens, no
 * crash, and a failure names the shard. */
static int load_read_all(const char *path, const zpi_load_limits *lim)
{
    const zpi_format *fmt = zpi_format_for_path(path);
    zpi_shard sh;
    zpi_err err = {0};
    zp_status st = fmt->load(path, "s.h5", lim, &sh, &err);
    if (st != ZP_OK) {
        assert_non_null(strstr(err.msg, "shard 's.h5'"));
        return 0;
    }
    uint64_t n = sh.n_records;
    if (n > 4096)
        n = 4096;
    uint64_t *recs = malloc((n + 1) * sizeof *recs);
    size_t *rows = malloc((n + 1) * sizeof *rows);
    for (uint64_t i = 0; i < n; i++)
        recs[i] = i, rows[i] = i;
    zpi_chunk c;
    badlog bl = {0};
    int ok = 1;
    if (n) {
        st = do_read(&sh, &c, n, recs, rows, n, NULL, &bl, &err, NULL);
        if (st != ZP_OK) {
            assert_non_null(strstr(err.msg, "shard 's.h5'"));
            ok = 0;
        }
        zpi_chunk_fini(&c);
    }
    free(recs);
    free(rows);
    zpi_shard_free(&sh);
    return ok;
}

static void damage(const char *src, const char *dst, const zpi_load_limits *lim, int *good,
                   int *tried)
{
    size_t len;
    char *bytes = zpt_read_file(src, &len);
    assert_non_null(bytes);
    /* truncations */
    for (size_t cut = 0; cut < len; cut += len / 40 + 1) {
        assert_int_equal(zpt_write_file(dst, bytes, cut), 0);
        *good += load_read_all(dst, lim);
        (*tried)++;
    }
    /* single-byte flips at many offsets, and a few multi-byte smashes */
    char *m = malloc(len);
    for (int k = 0; k < 300; k++) {
        memcpy(m, bytes, len);
        size_t off = k < 200 ? (size_t)k * (len / 200) : rnd() % len;
        m[off] ^= (char)(1 + rnd() % 255);
        if (k % 10 == 0)
            for (int j = 0; j < 8 && off + (size_t)j < len; j++)
                m[off + (size_t)j] = (char)rnd();
        assert_int_equal(zpt_write_file(dst, m, len), 0);
        *good += load_read_all(dst, lim);
        (*tried)++;
    }
    free(m);
    free(bytes);
}

/* Loads path and returns the error's message ("" when it loaded). */
static void load_msg(const char *path, const zpi_load_limits *lim, char *msg, size_t cap)
{
    zpi_shard sh;
    zpi_err err = {0};
    zp_status st = zpi_format_for_path(path)->load(path, "s.h5", lim, &sh, &err);
    snprintf(msg, cap, "%s", st == ZP_OK ? "" : err.msg);
    if (st == ZP_OK)
        zpi_shard_free(&sh);
}

/* The superblock's end address is checked against the file before HDF5
 * reads more: a damaged 133-byte file (found by fuzz_shard_hdf5) saying
 * the data ends at 2^62 with a 2 GB driver block made H5Fopen allocate
 * 2 GB. Files of every superblock version and with a user block (the
 * superblock at 512) still load. */
static void test_superblock_end(void **state)
{
    fixture *f = *state;
    static const unsigned char fuzzed[133] = {
        0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n', 0, 0, 0, 0, 0, 8, 8, 0,
        4, 0, 0xa0, 0x10, 0, 0x7c, 0x7c, 0x7c, 0x7c, 0x7c, 0x7c, 0x7c, 0x7c, 0x7c, 0x7c, 0x7c,
        0x7c, 0x7c, 0x7c, 0x7c, 0x7c, 0x7c, 0x7c, 0x7c, 0x7c, 0x7c, 0x7c, 0x7c, 0x7c, 0x7c, 0x7c,
        0x7c, 0x7c, [0x73] = 0x0f, [0x74] = 0xe6, [0x82] = 0x7c, 0x7c, 0x7c};
    char *p = zpt_path(f->dir, "sb.h5");
    char msg[sizeof ((zpi_err *)0)->msg];
    assert_int_equal(zpt_write_file(p, (const char *)fuzzed, sizeof fuzzed), 0);
    load_msg(p, &f->lim, msg, sizeof msg);
    assert_non_null(strstr(msg, "shard 's.h5'"));
    assert_non_null(strstr(msg, "the superblock at byte 0 says the data ends at byte "
                                "8970181431921507452, past the file's end"));
    /* files of the old and the newest format, with and without a user
     * block, with addresses of 8 and of 4 bytes: they load; with their end
     * address moved past the file's end, they are refused with the
     * superblock's place */
    for (int k = 0; k < 8; k++) {
        int latest = k & 1, ub = k & 2;
        size_t so = k & 4 ? 4 : 8;
        zpi_h5_lock(NULL);
        hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), fcpl = H5Pcreate(H5P_FILE_CREATE);
        if (latest)
            H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
        if (ub)
            H5Pset_userblock(fcpl, 512);
        assert_true(H5Pset_sizes(fcpl, so, so) >= 0);
        hid_t h = H5Fcreate(p, H5F_ACC_TRUNC, fcpl, fapl);
        assert_true(h >= 0);
        int32_t v[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
        hsize_t d = 10;
        fx_write(h, "x", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, &d, v);
        H5Fclose(h);
        H5Pclose(fapl);
        H5Pclose(fcpl);
        zpi_h5_unlock();
        zpi_shard sh = load_ok(p, &f->lim);
        assert_int_equal(sh.n_records, 10);
        zpi_shard_free(&sh);
        size_t len;
        char *b = zpt_read_file(p, &len);
        assert_non_null(b);
        size_t at = ub ? 512 : 0;
        unsigned char *sb = (unsigned char *)b + at;
        assert_int_equal(sb[8], latest ? 3 : 0);
        /* version 0: after 24 bytes, the base and free-space addresses;
         * version 3: after 12 bytes, the base and extension addresses */
        size_t off = at + (latest ? 12 : 24) + 2 * so;
        uint64_t eof = 0;
        for (size_t i = so; i-- > 0;)
            eof = eof << 8 | (unsigned char)b[off + i];
        assert_true(eof > 0 && eof <= len);
        uint64_t bad = (uint64_t)len + 1;
        for (size_t i = 0; i < so; i++)
            b[off + i] = (char)(bad >> (8 * i));
        assert_int_equal(zpt_write_file(p, b, len), 0);
        load_msg(p, &f->lim, msg, sizeof msg);
        char want[160];
        snprintf(want, sizeof want, "the superblock at byte %zu says the data ends at byte %llu",
                 at, (unsigned long long)bad);
        assert_non_null(strstr(msg, want));
        free(b);
    }
    /* addresses of 2 bytes: a valid file that the reader does not read,
     * refused as such (not as damaged); with its end address past the
     * file's end, refused before HDF5 opens it */
    zpi_h5_lock(NULL);
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    assert_true(H5Pset_sizes(fcpl, 2, 2) >= 0);
    hid_t h = H5Fcreate(p, H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
    assert_true(h >= 0);
    H5Fclose(h);
    H5Pclose(fcpl);
    zpi_h5_unlock();
    zpi_shard sh;
    zpi_err err = {0};
    assert_int_equal(zpi_format_for_path(p)->load(p, "s.h5", &f->lim, &sh, &err),
                     ZP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "addresses of 2 and lengths of 2 bytes"));
    size_t len;
    char *b = zpt_read_file(p, &len);
    assert_non_null(b);
    assert_int_equal((unsigned char)b[13], 2);
    b[24 + 4] = (char)0xff, b[24 + 5] = (char)0xff; /* version 0: the end address */
    assert_int_equal(zpt_write_file(p, b, len), 0);
    load_msg(p, &f->lim, msg, sizeof msg);
    assert_non_null(strstr(msg, "the superblock at byte 0 says the data ends at byte 65535"));
    free(b);
    free(p);
}

static void test_damaged_files(void **state)
{
    fixture *f = *state;
    rng_s = getenv("ZP_TEST_SEED") ? strtoull(getenv("ZP_TEST_SEED"), NULL, 0) : 777;
    char *a = zpt_path(f->dir, "sample.h5");
    char *b = zpt_path(f->dir, "ragged.h5");
    char *dst = zpt_path(f->dir, "damaged.h5");
    zpi_h5_sample_opts o;
    zpi_h5_sample_opts_init(&o);
    o.tokens = 1;
    o.text_bytes = 60;
    o.features = 3;
    zpi_err err = {0};
    assert_int_equal(zpi_hdf5_write_sample(a, 40, 3, &o, &err), ZP_OK);
    zpi_tokw *w;
    assert_int_equal(zpi_tokw_open_hdf5(b, ZP_DTYPE_U16, "gpt2", &w, &err), ZP_OK);
    int32_t buf[64];
    for (uint64_t i = 0; i < 40; i++) {
        for (size_t j = 0; j < doc_len(i); j++)
            buf[j] = (int32_t)doc_tok(i, j, 65535);
        assert_int_equal(zpi_tokw_add(w, buf, doc_len(i), &err), ZP_OK);
    }
    assert_int_equal(zpi_tokw_commit(w, &err), ZP_OK);
    zpi_load_limits lim = f->lim;
    lim.max_record_bytes = 4096;
    int good = 0, tried = 0;
    assert_int_equal(load_read_all(a, &lim), 1);
    assert_int_equal(load_read_all(b, &lim), 1);
    damage(a, dst, &lim, &good, &tried);
    damage(b, dst, &lim, &good, &tried);
    print_message("damaged files: %d of %d still loaded and read\n", good, tried);
    assert_true(good < tried);
    free(a);
    free(b);
    free(dst);
}

/* ------------------------------------------------------------ sample, lock */

static void test_sample(void **state)
{
    fixture *f = *state;
    char *path = zpt_path(f->dir, "sample.h5");
    zpi_h5_sample_opts o;
    zpi_h5_sample_opts_init(&o);
    o.tokens = 1;
    o.features = 5;
    o.text_bytes = 300;
    zpi_err err = {0};
    uint64_t n = 3000, seed = 9;
    assert_int_equal(zpi_hdf5_write_sample(path, n, seed, &o, &err), ZP_OK);
    zpi_shard sh = load_ok(path, &f->lim);
    assert_int_equal(sh.n_records, n);
    const zpi_schema *s = sh.rd->schema;
    assert_int_equal(s->n, 4);
    assert_string_equal(s->f[0].name, "features");
    assert_string_equal(s->f[1].name, "label");
    assert_string_equal(s->f[2].name, "text");
    assert_string_equal(s->f[3].name, "tokens");
    uint64_t *recs = malloc(n * sizeof *recs);
    size_t *rows = malloc(n * sizeof *rows);
    size_t m = 0;
    for (uint64_t i = 0; i < n; i += 1 + i % 4)
        recs[m] = i, rows[m] = m, m++;
    zpi_chunk c;
    badlog bl = {0};
    assert_int_equal(do_read(&sh, &c, m, recs, rows, m, "text", &bl, &err, NULL), ZP_OK);
    char *want = malloc(4 * o.text_bytes + 128);
    for (size_t k = 0; k < m; k++) {
        uint64_t i = recs[k];
        const float *ft = zpi_chunk_fixed_row(&c, 0, k);
        for (uint32_t j = 0; j < o.features; j++)
            assert_true(ft[j] == zpi_h5_sample_feature(seed, i, j));
        assert_int_equal(*(const int64_t *)zpi_chunk_fixed_row(&c, 1, k),
                         zpi_h5_sample_label(seed, i));
        size_t tl;
        const char *t = text_of(&c, k, &tl);
        size_t wl = zpi_h5_sample_text(seed, i, o.text_bytes, want, 4 * o.text_bytes + 128);
        assert_int_equal(tl, wl);
        assert_memory_equal(t, want, wl);
        const int32_t *tok = tok_of(&c, k, &tl);
        assert_int_equal(tl, zpi_h5_sample_doc_len(seed, i));
        for (size_t j = 0; j < tl; j++)
            assert_int_equal(tok[j], zpi_h5_sample_token(seed, i, j));
    }
    zpi_chunk_fini(&c);
    zpi_shard_free(&sh);
    free(want);
    free(recs);
    free(rows);
    free(path);
}

typedef struct lock_job {
    zpi_shard *sh;
    uint64_t n;
    uint64_t wait_ns;
    int iters;
    int failed;
} lock_job;

static void *lock_reader(void *arg)
{
    lock_job *j = arg;
    uint64_t *recs = malloc(j->n * sizeof *recs);
    size_t *rows = malloc(j->n * sizeof *rows);
    for (uint64_t i = 0; i < j->n; i++)
        recs[i] = i, rows[i] = i;
    for (int it = 0; it < j->iters; it++) {
        zpi_chunk c;
        if (zpi_chunk_init(&c, j->n) != ZP_OK) {
            j->failed = 1;
            break;
        }
        c.n = j->n;
        memset(c.recs, 0, j->n * sizeof *c.recs);
        zpi_chunk_set_schema(&c, j->sh->rd->schema);
        zpi_err err = {0};
        zpi_read_req req = {.out = zpi_chunk_sink(&c), .records = recs, .rows = rows, .n = j->n};
        if (j->sh->rd->read(j->sh->rd, &req, &err) != ZP_OK)
            j->failed = 1;
        j->wait_ns += req.lock_wait_ns;
        zpi_chunk_fini(&c);
    }
    free(recs);
    free(rows);
    return NULL;
}

/* two threads reading one shard's variable-length token sequences
 * (through HDF5) wait for the lock (and read correctly); contiguous fixed
 * fields and variable-length strings are read with pread, without taking
 * the lock */
static void test_lock_wait(void **state)
{
    fixture *f = *state;
    char *fpath = zpt_path(f->dir, "fixed_only.h5");
    zpi_h5_sample_opts o;
    zpi_h5_sample_opts_init(&o);
    o.text = 1;
    o.features = 64;
    zpi_err ferr = {0};
    assert_int_equal(zpi_hdf5_write_sample(fpath, 2000, 1, &o, &ferr), ZP_OK);
    zpi_shard fsh = load_ok(fpath, &f->lim);
    uint64_t b0, b1;
    zpi_h5_lock_stats(&b0, NULL);
    lock_job fj = {&fsh, 2000, 0, 40, 0};
    lock_reader(&fj);
    zpi_h5_lock_stats(&b1, NULL);
    assert_int_equal(fj.failed, 0);
    assert_true(b1 == b0); /* no HDF5 call for contiguous fixed fields and strings */
    zpi_shard_free(&fsh);
    free(fpath);

    char *path = zpt_path(f->dir, "lock.h5");
    o.text = 0;
    o.tokens = 1;
    zpi_err err = {0};
    assert_int_equal(zpi_hdf5_write_sample(path, 2000, 1, &o, &err), ZP_OK);
    zpi_shard sh = load_ok(path, &f->lim);
    uint64_t total = 0, acq0, acq1;
    zpi_h5_lock_stats(&acq0, NULL);
    for (int round = 0; round < 50 && total == 0; round++) {
        lock_job j[2] = {{&sh, 2000, 0, 40, 0}, {&sh, 2000, 0, 40, 0}};
        pthread_t t[2];
        for (int k = 0; k < 2; k++)
            assert_int_equal(pthread_create(&t[k], NULL, lock_reader, &j[k]), 0);
        for (int k = 0; k < 2; k++) {
            pthread_join(t[k], NULL);
            assert_int_equal(j[k].failed, 0);
            total += j[k].wait_ns;
        }
    }
    zpi_h5_lock_stats(&acq1, NULL);
    assert_true(acq1 > acq0);
    assert_true(total > 0);
    zpi_shard_free(&sh);
    free(path);
}

/* zephon gen --format h5 writes one loadable sample file */
/* A string field that holds integers, in token mode: the message says the
 * field holds numbers where tokenize expects text, and what to store
 * instead (it was "fixed-shape fields need one sample per row"). */
static void pipeline_error(const char *path, zp_pack_mode mode, zp_status want, char *msg,
                           size_t cap)
{
    zp_dataset *ds;
    assert_int_equal(zp_dataset_create(NULL, &ds), ZP_OK);
    assert_int_equal(zp_dataset_add(ds, path), ZP_OK);
    zp_worksource *ws;
    assert_int_equal(zp_worksource_create(ds, NULL, &ws), ZP_OK);
    zp_pipeline *p;
    assert_int_equal(zp_pipeline_create(ws, NULL, &p), ZP_OK);
    assert_int_equal(zp_pipeline_tokenize(p, "gpt2", "text", 1), ZP_OK);
    assert_int_equal(zp_pipeline_pack(p, mode, 15), ZP_OK);
    assert_int_equal(zp_pipeline_batch(p, 2), ZP_OK);
    const zp_batch *b;
    assert_int_equal(zp_pipeline_next(p, &b), want);
    snprintf(msg, cap, "%s", zp_pipeline_errmsg(p));
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    zp_dataset_destroy(ds);
}

static void test_integer_text_field(void **state)
{
    fixture *f = *state;
    char *path = zpt_path(f->dir, "ints.h5");
    int64_t v[4] = {464, 2068, 318, 257};
    hsize_t d = 4;
    zpi_h5_lock(NULL);
    hid_t h = fx_create(path);
    fx_write(h, "text", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &d, v);
    H5Fclose(h);
    zpi_h5_unlock();
    zp_pack_mode modes[2] = {ZP_PACK_CONCAT, ZP_PACK_PAD};
    for (int m = 0; m < 2; m++) {
        char msg[2048];
        pipeline_error(path, modes[m], ZP_ERR_FORMAT, msg, sizeof msg);
        if (!strstr(msg, "ints.h5") || !strstr(msg, "field 'text' holds int64 numbers") ||
            !strstr(msg, "tokenize expects text") || !strstr(msg, "token field"))
            fail_msg("pack mode %d: message '%s'", m, msg);
    }
    free(path);
}

static void test_gen_cli(void **state)
{
    fixture *f = *state;
    char *path = zpt_path(f->dir, "gen.h5");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s gen --format h5 --out %s --samples-per-shard 300 --features 3 --h5-tokens "
             "--seed 5 > /dev/null",
             ZP_CLI, path);
    assert_int_equal(system(cmd), 0);
    zpi_shard sh = load_ok(path, &f->lim);
    assert_int_equal(sh.n_records, 300);
    assert_int_equal(sh.rd->schema->n, 4);
    assert_int_equal(sh.rd->schema->f[0].dims[0], 3);
    zpi_shard_free(&sh);
    free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_text_vlen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_text_fixed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_text_bad_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tokens_vlen_dtypes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tokens_out_of_range, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_tokw, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_big_doc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ragged_checks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fixed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dim0_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unsupported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty, setup, teardown),
        cmocka_unit_test_setup_teardown(test_links_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_filter_unavailable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hash, setup, teardown),
        cmocka_unit_test_setup_teardown(test_superblock_end, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sample, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lock_wait, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gen_cli, setup, teardown),
        cmocka_unit_test_setup_teardown(test_integer_text_field, setup, teardown),
    };
    /* ZP_TEST_FILTER: run only the tests matching this pattern */
    if (getenv("ZP_TEST_FILTER"))
        cmocka_set_test_filter(getenv("ZP_TEST_FILTER"));
    if (getenv("ZP_TEST_SKIP"))
        cmocka_set_skip_filter(getenv("ZP_TEST_SKIP"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
