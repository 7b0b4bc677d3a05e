/* test_megatron.c - Megatron indexed datasets (src/formats/format_megatron.c): the
 * .bin/.idx reader for every token dtype (fixtures written by hand here, byte
 * by byte, independent of the writer), the writer, and bad pairs: every
 * header field, counts that disagree with the files, truncations and bit
 * flips of the .idx, truncated .bin, a missing .idx. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <xxhash.h>

#include "ops/chunk.h"
#include "formats/format.h"
#include "formats/reader.h"
#include "testutil.h"
#include "formats/tokw.h"

/* ------------------------------------------------------------ fixtures */

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
    zpt_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* dtype code -> bytes per token */
static size_t code_size(int code)
{
    static const size_t sz[9] = {0, 1, 1, 2, 4, 8, 8, 4, 2};
    return code >= 1 && code <= 8 ? sz[code] : 1;
}

/* A growable byte buffer with little-endian appends. */
typedef struct bytes {
    unsigned char *p;
    size_t n, cap;
} bytes;

static void put(bytes *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void put_le(bytes *b, uint64_t v, int n)
{
    unsigned char t[8];
    for (int i = 0; i < n; i++)
        t[i] = (unsigned char)(v >> (8 * i));
    put(b, t, (size_t)n);
}

/* One token of dtype `code` holding v, appended to b. */
static void put_tok(bytes *b, int code, double v)
{
    switch (code) {
    case 1: put_le(b, (uint8_t)v, 1); break;
    case 2: put_le(b, (uint8_t)(int8_t)v, 1); break;
    case 3: put_le(b, (uint16_t)(int16_t)v, 2); break;
    case 4: put_le(b, (uint32_t)(int32_t)v, 4); break;
    case 5: put_le(b, (uint64_t)(int64_t)v, 8); break;
    case 6: { double d = v; put(b, &d, 8); break; }
    case 7: { float x = (float)v; put(b, &x, 4); break; }
    case 8: put_le(b, (uint16_t)v, 2); break;
    default: fail();
    }
}

/* A .idx by hand: S sequences of lens, contiguous pointers (or ptrs when
 * given), document indices docs[D] (NULL: 0..S), modes when given. */
static bytes make_idx(int code, uint64_t S, const int32_t *lens, const int64_t *ptrs,
                      uint64_t D, const int64_t *docs, const int8_t *modes)
{
    bytes b = {0};
    put(&b, "MMIDIDX\0\0", 9);
    put_le(&b, 1, 8);
    put_le(&b, (uint64_t)code, 1);
    put_le(&b, S, 8);
    if (!docs)
        D = S + 1;
    put_le(&b, D, 8);
    for (uint64_t i = 0; i < S; i++)
        put_le(&b, (uint32_t)lens[i], 4);
    int64_t p = 0;
    for (uint64_t i = 0; i < S; i++) {
        put_le(&b, (uint64_t)(ptrs ? ptrs[i] : p), 8);
        p += (int64_t)lens[i] * (int64_t)code_size(code);
    }
    for (uint64_t d = 0; d < D; d++)
        put_le(&b, docs ? (uint64_t)docs[d] : d, 8);
    if (modes)
        put(&b, modes, S);
    return b;
}

/* Write dir/prefix.bin and dir/prefix.idx. */
static char *write_pair(fixture *f, const char *prefix, const bytes *bin, const bytes *idx)
{
    char name[256];
    snprintf(name, sizeof name, "%s.bin", prefix);
    char *bp = zpt_path(f->dir, name);
    snprintf(name, sizeof name, "%s.idx", prefix);
    char *ip = zpt_path(f->dir, name);
    assert_int_equal(zpt_write_file(bp, bin->p ? (const char *)bin->p : "", bin->n), 0);
    if (idx)
        assert_int_equal(zpt_write_file(ip, idx->p ? (const char *)idx->p : "", idx->n), 0);
    free(ip);
    return bp;
}

static zp_status load(fixture *f, const char *path, zpi_shard *sh, zpi_err *err)
{
    const zpi_format *fmt = zpi_format_for_path(path);
    assert_non_null(fmt);
    assert_string_equal(fmt->name, "megatron");
    const char *slash = strrchr(path, '/');
    zpi_err_clear(err);
    zp_status st = fmt->load(path, slash ? slash + 1 : path, &f->lim, sh, err);
    if (st != ZP_OK) {
        assert_null(sh->rd);
        assert_null(sh->data);
        assert_null(sh->offsets);
        assert_true(err->msg[0] != '\0');
    }
    return st;
}

/* Bad records reported by a read. */
typedef struct bads {
    int n;
    size_t rows[64];
    zp_status st[64];
    char msg[64][512];
} bads;

static void on_bad(void *ctx, size_t row, zp_status st, const char *msg)
{
    bads *b = ctx;
    if (b->n < 64) {
        b->rows[b->n] = row;
        b->st[b->n] = st;
        snprintf(b->msg[b->n], sizeof b->msg[b->n], "%s", msg);
    }
    b->n++;
}

/* Read records[0..n) into rows 0..n of a fresh chunk. */
static zp_status read_recs(zpi_shard *sh, zpi_chunk *c, const uint64_t *records, size_t n,
                           bads *bad, zpi_read_req *req_out)
{
    assert_int_equal(zpi_chunk_init(c, n ? n : 1), ZP_OK);
    c->n = n;
    memset(c->recs, 0, (n ? n : 1) * sizeof *c->recs);
    assert_int_equal(zpi_chunk_set_schema(c, sh->rd->schema), ZP_OK);
    size_t *rows = calloc(n ? n : 1, sizeof *rows);
    for (size_t k = 0; k < n; k++)
        rows[k] = k;
    memset(bad, 0, sizeof *bad);
    zpi_read_req req = {0};
    req.out = zpi_chunk_sink(c);
    req.records = records;
    req.rows = rows;
    req.n = n;
    req.bad = on_bad;
    req.bad_ctx = bad;
    zpi_err err = {0};
    zp_status st = sh->rd->read(sh->rd, &req, &err);
    if (req_out)
        *req_out = req;
    free(rows);
    return st;
}

static void assert_row(const zpi_chunk *c, size_t row, const double *want, size_t n)
{
    const zpi_rec *r = &c->recs[row];
    assert_true(r->flags & ZPI_REC_TOKENS);
    assert_int_equal(r->tok_len, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(c->tok[r->tok_off + i], (int32_t)want[i]);
}

/* ------------------------------------------------------------ round trips */

/* Three sequences per dtype (one empty), with each dtype's extreme ids. */
static void test_every_dtype(void **state)
{
    fixture *f = *state;
    static const double hi[9] = {0, 255, 127, 32767, 2147483647.0, 2147483647.0,
                                 2147483647.0, 16777216.0, 65535};
    static const char *names[9] = {"", "uint8", "int8", "int16", "int32", "int64",
                                   "float64", "float32", "uint16"};
    static const zp_dtype dts[9] = {0, ZP_DTYPE_U8, ZP_DTYPE_I8, ZP_DTYPE_I16, ZP_DTYPE_I32,
                                    ZP_DTYPE_I64, ZP_DTYPE_F64, ZP_DTYPE_F32, ZP_DTYPE_U16};
    for (int code = 1; code <= 8; code++) {
        double s0[] = {1, 2, 3, hi[code], 0};
        double s2[] = {100, 0, 7, hi[code] - 1};
        const double *seqs[3] = {s0, NULL, s2};
        int32_t lens[3] = {5, 0, 4};
        bytes bin = {0};
        for (int s = 0; s < 3; s++)
            for (int i = 0; i < lens[s]; i++)
                put_tok(&bin, code, seqs[s][i]);
        bytes idx = make_idx(code, 3, lens, NULL, 0, NULL, NULL);
        char prefix[32];
        snprintf(prefix, sizeof prefix, "d%s", names[code]);
        char *bp = write_pair(f, prefix, &bin, &idx);
        zpi_shard sh;
        zpi_err err = {0};
        assert_int_equal(load(f, bp, &sh, &err), ZP_OK);
        assert_int_equal(sh.n_records, 3);
        assert_non_null(sh.rd);
        assert_int_equal(sh.rd->schema->n, 1);
        assert_string_equal(sh.rd->schema->f[0].name, "tokens");
        assert_int_equal(sh.rd->schema->f[0].kind, ZPI_FIELD_TOKENS);
        assert_int_equal(sh.rd->schema->f[0].dtype, dts[code]);
        char desc[128];
        zpi_schema_describe(sh.rd->schema, desc, sizeof desc);
        assert_non_null(strstr(desc, zp_dtype_name(dts[code])));

        /* in order; a subset; repeats */
        const uint64_t orders[3][6] = {{0, 1, 2}, {2}, {0, 0, 1, 2, 2, 2}};
        const size_t counts[3] = {3, 1, 6};
        for (int o = 0; o < 3; o++) {
            zpi_chunk c;
            bads bad;
            zpi_read_req req;
            assert_int_equal(read_recs(&sh, &c, orders[o], counts[o], &bad, &req), ZP_OK);
            assert_int_equal(bad.n, 0);
            uint64_t want_bytes = 0;
            for (size_t k = 0; k < counts[o]; k++) {
                uint64_t s = orders[o][k];
                assert_row(&c, k, seqs[s], (size_t)lens[s]);
                want_bytes += (uint64_t)lens[s] * code_size(code);
            }
            assert_int_equal(req.bytes, want_bytes);
            zpi_chunk_fini(&c);
        }
        zpi_shard_free(&sh);
        free(bp);
        free(bin.p);
        free(idx.p);
    }
}

/* Ids a token dtype can hold that are no token ids: a bad record naming
 * the sequence, the token and its value; the other rows are read. */
static void test_bad_tokens(void **state)
{
    fixture *f = *state;
    struct {
        int code;
        double v;
        const char *shown;
    } cases[] = {
        {2, -1, "is -1:"},          {3, -5, "is -5:"},          {4, -1, "is -1:"},
        {5, 2147483648.0, "is 2147483648:"}, {5, -1, "is -1:"},
        {7, 70000.5, "is 70000.5:"}, {7, -1, "is -1:"},          {7, 3e9, "is 3e+09:"},
        {6, 0.5, "is 0.5:"},         {6, 1e300, "is 1.0000000000000001e+300:"},
        {6, -3, "is -3:"},
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        int code = cases[t].code;
        bytes bin = {0};
        int32_t lens[3] = {2, 3, 1};
        put_tok(&bin, code, 5);
        put_tok(&bin, code, 6);
        put_tok(&bin, code, 7);
        put_tok(&bin, code, 8);
        put_tok(&bin, code, cases[t].v); /* sequence 1, token 2 */
        put_tok(&bin, code, 9);
        bytes idx = make_idx(code, 3, lens, NULL, 0, NULL, NULL);
        char *bp = write_pair(f, "bad", &bin, &idx);
        zpi_shard sh;
        zpi_err err = {0};
        assert_int_equal(load(f, bp, &sh, &err), ZP_OK);
        zpi_chunk c;
        bads bad;
        uint64_t recs[4] = {0, 1, 1, 2};
        assert_int_equal(read_recs(&sh, &c, recs, 4, &bad, NULL), ZP_OK);
        assert_int_equal(bad.n, 2); /* both rows of sequence 1 */
        assert_int_equal(bad.rows[0], 1);
        assert_int_equal(bad.rows[1], 2);
        assert_int_equal(bad.st[0], ZP_ERR_FORMAT);
        assert_non_null(strstr(bad.msg[0], "shard 'bad.bin': sequence 1: token 2 "));
        if (!strstr(bad.msg[0], cases[t].shown))
            fail_msg("case %zu: %s", t, bad.msg[0]);
        assert_non_null(strstr(bad.msg[0], "not a token id"));
        double s0[] = {5, 6}, s2[] = {9};
        assert_row(&c, 0, s0, 2);
        assert_row(&c, 3, s2, 1);
        assert_false(c.recs[1].flags & ZPI_REC_TOKENS);
        assert_false(c.recs[2].flags & ZPI_REC_TOKENS);
        assert_int_equal(c.tok_len, 3); /* the bad rows' tokens are taken back */
        zpi_chunk_fini(&c);
        zpi_shard_free(&sh);
        free(bp);
        free(bin.p);
        free(idx.p);
    }
}

/* A sequence longer than max_record_bytes / 4 tokens is a bad record. */
static void test_max_record_bytes(void **state)
{
    fixture *f = *state;
    bytes bin = {0};
    int32_t lens[2] = {3, 1};
    for (int i = 0; i < 4; i++)
        put_tok(&bin, 8, i + 1);
    bytes idx = make_idx(8, 2, lens, NULL, 0, NULL, NULL);
    char *bp = write_pair(f, "long", &bin, &idx);
    f->lim.max_record_bytes = 11; /* 2 tokens */
    zpi_shard sh;
    zpi_err err = {0};
    assert_int_equal(load(f, bp, &sh, &err), ZP_OK);
    zpi_chunk c;
    bads bad;
    uint64_t recs[2] = {0, 1};
    assert_int_equal(read_recs(&sh, &c, recs, 2, &bad, NULL), ZP_OK);
    assert_int_equal(bad.n, 1);
    assert_int_equal(bad.rows[0], 0);
    assert_int_equal(bad.st[0], ZP_ERR_LIMIT);
    assert_non_null(strstr(bad.msg[0], "sequence 0"));
    assert_non_null(strstr(bad.msg[0], "max_record_bytes"));
    double s1[] = {4};
    assert_row(&c, 1, s1, 1);
    zpi_chunk_fini(&c);
    zpi_shard_free(&sh);
    free(bp);
    free(bin.p);
    free(idx.p);
}

/* A record index past the shard fails the read (a caller's bug). */
static void test_record_out_of_range(void **state)
{
    fixture *f = *state;
    bytes bin = {0};
    int32_t lens[1] = {1};
    put_tok(&bin, 4, 1);
    bytes idx = make_idx(4, 1, lens, NULL, 0, NULL, NULL);
    char *bp = write_pair(f, "oor", &bin, &idx);
    zpi_shard sh;
    zpi_err err = {0};
    assert_int_equal(load(f, bp, &sh, &err), ZP_OK);
    zpi_chunk c;
    bads bad;
    uint64_t recs[1] = {1};
    assert_int_not_equal(read_recs(&sh, &c, recs, 1, &bad, NULL), ZP_OK);
    zpi_chunk_fini(&c);
    zpi_shard_free(&sh);
    free(bp);
    free(bin.p);
    free(idx.p);
}

/* ------------------------------------------------------------ writer */

static int count_files(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p) {
        if (fscanf(p, "%d", &n) != 1)
            n = -1;
        pclose(p);
    }
    return n;
}

static void writer_round_trip(fixture *f, zp_dtype dt, int big)
{
    char *prefix = zpt_path(f->dir, dt == ZP_DTYPE_U16 ? "w16" : "w32");
    zpi_tokw *w;
    zpi_err err = {0};
    assert_int_equal(zpi_tokw_open_megatron(prefix, dt, &w, &err), ZP_OK);
    enum { DOCS = 50 };
    size_t lens[DOCS];
    int32_t *docs[DOCS];
    int32_t hi = dt == ZP_DTYPE_U16 ? 65535 : INT32_MAX;
    for (int d = 0; d < DOCS; d++) {
        lens[d] = d == 7 ? 0 : (size_t)(d * 13 % 97) + 1;
        if (big && d == 20)
            lens[d] = (size_t)3 << 20; /* crosses the 4 MiB buffer */
        docs[d] = malloc((lens[d] ? lens[d] : 1) * sizeof(int32_t));
        for (size_t i = 0; i < lens[d]; i++)
            docs[d][i] = (int32_t)((d * 1000003u + i * 7919u) % ((uint32_t)hi + 1u));
        if (lens[d])
            docs[d][0] = hi;
        assert_int_equal(zpi_tokw_add(w, docs[d], lens[d], &err), ZP_OK);
    }
    /* ids the dtype cannot hold: refused, nothing added */
    int32_t neg[2] = {1, -1};
    assert_int_equal(zpi_tokw_add(w, neg, 2, &err), ZP_ERR_INVALID);
    assert_non_null(strstr(err.msg, "token 1 is -1"));
    if (dt == ZP_DTYPE_U16) {
        int32_t wide[1] = {65536};
        assert_int_equal(zpi_tokw_add(w, wide, 1, &err), ZP_ERR_INVALID);
        assert_non_null(strstr(err.msg, "65536"));
    }
    assert_int_equal(w->docs, DOCS);
    /* nothing under the final names before commit */
    char *bp = zpt_path(f->dir, dt == ZP_DTYPE_U16 ? "w16.bin" : "w32.bin");
    char *ip = zpt_path(f->dir, dt == ZP_DTYPE_U16 ? "w16.idx" : "w32.idx");
    struct stat sb;
    assert_int_not_equal(stat(bp, &sb), 0);
    assert_int_not_equal(stat(ip, &sb), 0);
    int before = count_files(f->dir);
    assert_int_equal(zpi_tokw_commit(w, &err), ZP_OK);
    assert_int_equal(count_files(f->dir), before); /* the .part files became the pair */
    assert_int_equal(stat(bp, &sb), 0);
    assert_int_equal(stat(ip, &sb), 0);

    /* the .idx is exactly what Megatron's writer would write */
    int code = dt == ZP_DTYPE_U16 ? 8 : 4;
    int32_t l32[DOCS];
    for (int d = 0; d < DOCS; d++)
        l32[d] = (int32_t)lens[d];
    bytes want = make_idx(code, DOCS, l32, NULL, 0, NULL, NULL);
    size_t got_len;
    char *got = zpt_read_file(ip, &got_len);
    assert_non_null(got);
    assert_int_equal(got_len, want.n);
    assert_memory_equal(got, want.p, want.n);
    free(got);
    free(want.p);

    zpi_shard sh;
    f->lim.max_record_bytes = (size_t)64 << 20;
    assert_int_equal(load(f, bp, &sh, &err), ZP_OK);
    assert_int_equal(sh.n_records, DOCS);
    assert_int_equal(sh.rd->schema->f[0].dtype, dt);
    uint64_t recs[DOCS];
    for (int d = 0; d < DOCS; d++)
        recs[d] = (uint64_t)d;
    zpi_chunk c;
    bads bad;
    assert_int_equal(read_recs(&sh, &c, recs, DOCS, &bad, NULL), ZP_OK);
    assert_int_equal(bad.n, 0);
    for (int d = 0; d < DOCS; d++) {
        assert_int_equal(c.recs[d].tok_len, lens[d]);
        assert_memory_equal(c.tok + c.recs[d].tok_off, docs[d], lens[d] * sizeof(int32_t));
        free(docs[d]);
    }
    zpi_chunk_fini(&c);
    zpi_shard_free(&sh);
    free(bp);
    free(ip);
    free(prefix);
}

static void test_writer_u16(void **state) { writer_round_trip(*state, ZP_DTYPE_U16, 0); }
static void test_writer_i32(void **state) { writer_round_trip(*state, ZP_DTYPE_I32, 1); }

/* Many documents: the .idx outgrows the writer's buffer several times over
 * while the pointers are computed from the lengths read back in blocks. */
static void test_writer_many_docs(void **state)
{
    fixture *f = *state;
    char *prefix = zpt_path(f->dir, "many");
    zpi_tokw *w;
    zpi_err err = {0};
    enum { N = 700001 };
    assert_int_equal(zpi_tokw_open_megatron(prefix, ZP_DTYPE_U16, &w, &err), ZP_OK);
    for (uint32_t d = 0; d < N; d++) {
        int32_t t[3] = {(int32_t)(d % 65536), (int32_t)(d / 65536), 7};
        assert_int_equal(zpi_tokw_add(w, t, d % 4 == 3 ? 0 : 1 + d % 3, &err), ZP_OK);
    }
    assert_int_equal(w->docs, N);
    assert_int_equal(zpi_tokw_commit(w, &err), ZP_OK);
    char *bp = zpt_path(f->dir, "many.bin");
    zpi_shard sh;
    assert_int_equal(load(f, bp, &sh, &err), ZP_OK);
    assert_int_equal(sh.n_records, N);
    uint64_t recs[6] = {0, 65535, 65536, 131073, 524287, N - 1};
    zpi_chunk c;
    bads bad;
    assert_int_equal(read_recs(&sh, &c, recs, 6, &bad, NULL), ZP_OK);
    assert_int_equal(bad.n, 0);
    for (int k = 0; k < 6; k++) {
        uint32_t d = (uint32_t)recs[k];
        size_t n = d % 4 == 3 ? 0 : 1 + d % 3;
        double want[3] = {d % 65536, d / 65536, 7};
        assert_row(&c, (size_t)k, want, n);
    }
    zpi_chunk_fini(&c);
    zpi_shard_free(&sh);
    free(bp);
    free(prefix);
}

/* abort leaves nothing; a commit over an older pair replaces it; an empty
 * writer gives a pair of 0 sequences; bad arguments are refused. */
static void test_writer_abort_replace_empty(void **state)
{
    fixture *f = *state;
    char *prefix = zpt_path(f->dir, "x");
    zpi_tokw *w;
    zpi_err err = {0};
    int32_t t[3] = {1, 2, 3};
    assert_int_equal(zpi_tokw_open_megatron(prefix, ZP_DTYPE_U16, &w, &err), ZP_OK);
    assert_int_equal(zpi_tokw_add(w, t, 3, &err), ZP_OK);
    zpi_tokw_abort(w);
    zpi_tokw_abort(NULL);
    assert_int_equal(count_files(f->dir), 0);

    assert_int_equal(zpi_tokw_open_megatron(prefix, ZP_DTYPE_U16, &w, &err), ZP_OK);
    assert_int_equal(zpi_tokw_commit(w, &err), ZP_OK);
    assert_int_equal(count_files(f->dir), 2);
    char *bp = zpt_path(f->dir, "x.bin");
    zpi_shard sh;
    assert_int_equal(load(f, bp, &sh, &err), ZP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "no sequences"));
    f->lim.allow_empty = 1;
    assert_int_equal(load(f, bp, &sh, &err), ZP_OK);
    assert_int_equal(sh.n_records, 0);
    zpi_chunk c;
    bads bad;
    assert_int_equal(read_recs(&sh, &c, NULL, 0, &bad, NULL), ZP_OK);
    zpi_chunk_fini(&c);
    zpi_shard_free(&sh);

    /* replace it */
    assert_int_equal(zpi_tokw_open_megatron(prefix, ZP_DTYPE_I32, &w, &err), ZP_OK);
    assert_int_equal(zpi_tokw_add(w, t, 3, &err), ZP_OK);
    assert_int_equal(zpi_tokw_commit(w, &err), ZP_OK);
    assert_int_equal(count_files(f->dir), 2);
    assert_int_equal(load(f, bp, &sh, &err), ZP_OK);
    assert_int_equal(sh.n_records, 1);
    assert_int_equal(sh.rd->schema->f[0].dtype, ZP_DTYPE_I32);
    zpi_shard_free(&sh);

    assert_int_equal(zpi_tokw_open_megatron(prefix, ZP_DTYPE_F32, &w, &err),
                     ZP_ERR_INVALID);
    assert_null(w);
    char *nodir = zpt_path(f->dir, "no/such/dir/x");
    assert_int_equal(zpi_tokw_open_megatron(nodir, ZP_DTYPE_U16, &w, &err), ZP_ERR_IO);
    assert_non_null(strstr(err.msg, "no/such/dir/x.bin"));
    free(nodir);
    free(bp);
    free(prefix);
}

/* ------------------------------------------------------------ bad pairs */

/* A good small pair (uint16, 3 sequences) as bytes. */
static void good_pair(bytes *bin, bytes *idx)
{
    int32_t lens[3] = {2, 3, 1};
    memset(bin, 0, sizeof *bin);
    for (int i = 0; i < 6; i++)
        put_tok(bin, 8, 10 + i);
    *idx = make_idx(8, 3, lens, NULL, 0, NULL, NULL);
}

/* Load the pair and expect failure with `st` and a message containing
 * each of the strings (NULL-terminated). */
static void expect_fail(fixture *f, const bytes *bin, const bytes *idx, zp_status want, ...)
{
    char *bp = write_pair(f, "c", bin, idx);
    zpi_shard sh;
    zpi_err err = {0};
    zp_status st = load(f, bp, &sh, &err);
    if (st != want)
        fail_msg("status %d (want %d): %s", (int)st, (int)want, err.msg);
    va_list ap;
    va_start(ap, want);
    const char *s;
    while ((s = va_arg(ap, const char *)) != NULL)
        if (!strstr(err.msg, s))
            fail_msg("'%s' not in: %s", s, err.msg);
    va_end(ap);
    free(bp);
}

static void test_idx_header(void **state)
{
    fixture *f = *state;
    bytes bin, idx;
    good_pair(&bin, &idx);
    bytes b = {0};
    put(&b, idx.p, idx.n);

    b.p[0] = 'X';
    expect_fail(f, &bin, &b, ZP_ERR_FORMAT, "shard 'c.bin'", "'c.idx'", "not a Megatron index",
                NULL);
    memcpy(b.p, "TNTIDX\0\0", 8);
    expect_fail(f, &bin, &b, ZP_ERR_FORMAT, "TNTIDX", NULL);
    memcpy(b.p, idx.p, idx.n);
    b.p[9] = 2;
    expect_fail(f, &bin, &b, ZP_ERR_FORMAT, "'c.idx' has version 2", NULL);
    memcpy(b.p, idx.p, idx.n);
    b.p[17] = 0;
    expect_fail(f, &bin, &b, ZP_ERR_FORMAT, "dtype code 0", NULL);
    b.p[17] = 9;
    expect_fail(f, &bin, &b, ZP_ERR_FORMAT, "dtype code 9", NULL);
    b.p[17] = 4; /* int32: the pointers no longer follow the lengths */
    expect_fail(f, &bin, &b, ZP_ERR_FORMAT, "sequence 1 starts at byte 4 but sequence 0 ends at byte 8",
                NULL);
    /* huge counts: refused from the header, nothing allocated */
    memcpy(b.p, idx.p, idx.n);
    for (int i = 0; i < 8; i++)
        b.p[18 + i] = 0xff;
    expect_fail(f, &bin, &b, ZP_ERR_FORMAT, "18446744073709551615 sequences", NULL);
    memcpy(b.p, idx.p, idx.n);
    b.p[26 + 7] = 0x40;
    expect_fail(f, &bin, &b, ZP_ERR_FORMAT, "document indices", "more than", NULL);
    memcpy(b.p, idx.p, idx.n);
    b.p[18] = 4; /* 4 sequences: the file is 12 bytes short */
    expect_fail(f, &bin, &b, ZP_ERR_FORMAT, "says 4 sequences and 4 document indices",
                "more than its 102 bytes", NULL);
    b.p[18] = 2; /* counts that fit but do not add up */
    expect_fail(f, &bin, &b, ZP_ERR_FORMAT, "'c.idx' is 102 bytes",
                "(2 sequences, 4 document indices) make 90 bytes", NULL);
    memcpy(b.p, idx.p, idx.n);
    /* no document indices */
    bytes z = make_idx(8, 0, NULL, NULL, 0, (const int64_t[]){0}, NULL);
    bytes empty = {0};
    expect_fail(f, &empty, &z, ZP_ERR_FORMAT, "no document indices", NULL);
    /* one byte too many (not a modes array: that is S bytes) */
    put(&b, "", 1);
    expect_fail(f, &bin, &b, ZP_ERR_FORMAT, "is 103 bytes", "make 102 bytes", NULL);
    free(z.p);
    free(b.p);
    free(bin.p);
    free(idx.p);
}

static void test_idx_arrays(void **state)
{
    fixture *f = *state;
    bytes bin, idx;
    good_pair(&bin, &idx);
    int32_t lens[3] = {2, 3, 1};

    int32_t neg[3] = {2, -3, 1};
    bytes b = make_idx(8, 3, neg, (const int64_t[]){0, 4, 10}, 0, NULL, NULL);
    expect_fail(f, &bin, &b, ZP_ERR_FORMAT, "sequence 1 has -3 tokens", NULL);
    free(b.p);
    b = make_idx(8, 3, lens, (const int64_t[]){2, 6, 12}, 0, NULL, NULL);
    expect_fail(f, &bin, &b, ZP_ERR_FORMAT, "sequence 0 starts at byte 2", NULL);
    free(b.p);
    b = make_idx(8, 3, lens, (const int64_t[]){0, 6, 10}, 0, NULL, NULL); /* a gap */
    expect_fail(f, &bin, &b, ZP_ERR_FORMAT, "sequence 1 starts at byte 6", "ends at byte 4",
                NULL);
    free(b.p);
    b = make_idx(8, 3, lens, (const int64_t[]){0, 2, 10}, 0, NULL, NULL); /* an overlap */
    expect_fail(f, &bin, &b, ZP_ERR_FORMAT, "sequence 1 starts at byte 2", NULL);
    free(b.p);
    b = make_idx(8, 3, lens, (const int64_t[]){0, 4, -1}, 0, NULL, NULL);
    expect_fail(f, &bin, &b, ZP_ERR_FORMAT, "sequence 2 starts at byte -1", NULL);
    free(b.p);
    int32_t huge[3] = {2, 3, INT32_MAX};
    b = make_idx(8, 3, huge, NULL, 0, NULL, NULL);
    expect_fail(f, &bin, &b, ZP_ERR_FORMAT, "'c.idx' says sequence 2 ends at byte 4294967304",
                "'c.bin' has 12 bytes", NULL);
    free(b.p);
    /* document indices */
    b = make_idx(8, 3, lens, NULL, 4, (const int64_t[]){1, 1, 2, 3}, NULL);
    expect_fail(f, &bin, &b, ZP_ERR_FORMAT, "document 0 starts at sequence 1", NULL);
    free(b.p);
    b = make_idx(8, 3, lens, NULL, 4, (const int64_t[]){0, 2, 1, 3}, NULL);
    expect_fail(f, &bin, &b, ZP_ERR_FORMAT, "document index 2 = 1", NULL);
    free(b.p);
    b = make_idx(8, 3, lens, NULL, 3, (const int64_t[]){0, 1, 2}, NULL);
    expect_fail(f, &bin, &b, ZP_ERR_FORMAT, "documents end at sequence 2", NULL);
    free(b.p);
    b = make_idx(8, 3, lens, NULL, 3, (const int64_t[]){0, 1, 4}, NULL);
    expect_fail(f, &bin, &b, ZP_ERR_FORMAT, "document index 2 = 4", NULL);
    free(b.p);
    /* several sequences per document, and empty documents, are fine */
    b = make_idx(8, 3, lens, NULL, 4, (const int64_t[]){0, 2, 2, 3}, NULL);
    char *bp = write_pair(f, "c", &bin, &b);
    zpi_shard sh;
    zpi_err err = {0};
    assert_int_equal(load(f, bp, &sh, &err), ZP_OK);
    assert_int_equal(sh.n_records, 3);
    zpi_shard_free(&sh);
    free(b.p);
    /* multimodal: modes all text are read, others refused */
    b = make_idx(8, 3, lens, NULL, 0, NULL, (const int8_t[]){0, 0, 0});
    free(write_pair(f, "c", &bin, &b));
    assert_int_equal(load(f, bp, &sh, &err), ZP_OK);
    zpi_shard_free(&sh);
    free(b.p);
    b = make_idx(8, 3, lens, NULL, 0, NULL, (const int8_t[]){0, 1, 0});
    expect_fail(f, &bin, &b, ZP_ERR_UNSUPPORTED, "sequence 1 has mode 1", NULL);
    free(b.p);
    free(bp);
    free(bin.p);
    free(idx.p);
}

static void test_bin_size(void **state)
{
    fixture *f = *state;
    bytes bin, idx;
    good_pair(&bin, &idx);
    /* every truncation of the .bin */
    for (size_t n = 0; n < bin.n; n++) {
        bytes t = {bin.p, n, n};
        expect_fail(f, &t, &idx, ZP_ERR_FORMAT, "'c.idx' says sequence", "truncated", NULL);
    }
    /* the example of the documentation: sequence 1 is the first past the end */
    bytes t = {bin.p, 7, 7};
    expect_fail(f, &t, &idx, ZP_ERR_FORMAT,
                "shard 'c.bin': 'c.idx' says sequence 1 ends at byte 10 but 'c.bin' has 7 bytes",
                NULL);
    /* trailing bytes */
    put(&bin, "xy", 2);
    expect_fail(f, &bin, &idx, ZP_ERR_FORMAT, "'c.bin' has 14 bytes",
                "its 3 sequences end at byte 12", NULL);
    /* missing files */
    char *bp = write_pair(f, "m", &bin, NULL);
    zpi_shard sh;
    zpi_err err = {0};
    assert_int_equal(load(f, bp, &sh, &err), ZP_ERR_IO);
    assert_non_null(strstr(err.msg, "shard 'm.bin'"));
    assert_non_null(strstr(err.msg, "m.idx' is missing"));
    unlink(bp);
    char *ip = zpt_path(f->dir, "m.idx");
    assert_int_equal(zpt_write_file(ip, (const char *)idx.p, idx.n), 0);
    assert_int_equal(load(f, bp, &sh, &err), ZP_ERR_IO);
    assert_non_null(strstr(err.msg, "shard 'm.bin'"));
    free(ip);
    free(bp);
    free(bin.p);
    free(idx.p);
}

/* Every truncation of a small .idx fails cleanly. */
static void test_idx_truncated(void **state)
{
    fixture *f = *state;
    bytes bin, idx;
    good_pair(&bin, &idx);
    for (size_t n = 0; n < idx.n; n++) {
        bytes t = {idx.p, n, n};
        char *bp = write_pair(f, "c", &bin, &t);
        zpi_shard sh;
        zpi_err err = {0};
        zp_status st = load(f, bp, &sh, &err);
        if (st != ZP_ERR_FORMAT)
            fail_msg("idx truncated to %zu: status %d: %s", n, (int)st, err.msg);
        assert_non_null(strstr(err.msg, "'c.idx'"));
        free(bp);
    }
    free(bin.p);
    free(idx.p);
}

/* A bit flip anywhere in a small .idx: the load fails cleanly, or succeeds
 * and every read stays in bounds (ASan) with the right record count. */
static void test_idx_bit_flips(void **state)
{
    fixture *f = *state;
    bytes bin, idx;
    good_pair(&bin, &idx);
    bytes b = {0};
    put(&b, idx.p, idx.n);
    int ok = 0, failed = 0;
    for (size_t i = 0; i < idx.n; i++) {
        for (int bit = 0; bit < 8; bit++) {
            memcpy(b.p, idx.p, idx.n);
            b.p[i] ^= (unsigned char)(1u << bit);
            char *bp = write_pair(f, "c", &bin, &b);
            zpi_shard sh;
            zpi_err err = {0};
            zp_status st = load(f, bp, &sh, &err);
            if (st == ZP_OK) {
                ok++;
                uint64_t recs[64];
                size_t n = sh.n_records < 64 ? (size_t)sh.n_records : 64;
                for (size_t k = 0; k < n; k++)
                    recs[k] = k;
                zpi_chunk c;
                bads bad;
                assert_int_equal(read_recs(&sh, &c, recs, n, &bad, NULL), ZP_OK);
                zpi_chunk_fini(&c);
                zpi_shard_free(&sh);
            } else {
                failed++;
                assert_true(st == ZP_ERR_FORMAT || st == ZP_ERR_UNSUPPORTED);
                assert_non_null(strstr(err.msg, "shard 'c.bin'"));
            }
            free(bp);
        }
    }
    /* flips in the document indices' high bytes and the like always fail;
     * a flip that only reinterprets the dtype (uint16 -> int16) may load */
    assert_true(failed > ok);
    free(b.p);
    free(bin.p);
    free(idx.p);
}

/* The load checks the manifest's hash of the .bin and record count. */
static void test_expectations(void **state)
{
    fixture *f = *state;
    bytes bin, idx;
    good_pair(&bin, &idx);
    char *bp = write_pair(f, "h", &bin, &idx);
    zpi_shard sh;
    zpi_err err = {0};
    f->lim.has_xxh64 = 1;
    f->lim.expect_xxh64 = XXH64(bin.p, bin.n, 0);
    f->lim.has_records = 1;
    f->lim.expect_records = 3;
    assert_int_equal(load(f, bp, &sh, &err), ZP_OK);
    zpi_shard_free(&sh);
    f->lim.expect_xxh64 ^= 1;
    assert_int_equal(load(f, bp, &sh, &err), ZP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "content hash mismatch"));
    f->lim.has_xxh64 = 0;
    f->lim.expect_records = 4;
    assert_int_equal(load(f, bp, &sh, &err), ZP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "has 3 records"));
    free(bp);
    free(bin.p);
    free(idx.p);
}

/* A .bin path without the suffix: its index is the path + ".idx". */
static void test_path_without_suffix(void **state)
{
    fixture *f = *state;
    bytes bin, idx;
    good_pair(&bin, &idx);
    char *bp = zpt_path(f->dir, "data");
    char *ip = zpt_path(f->dir, "data.idx");
    assert_int_equal(zpt_write_file(bp, (const char *)bin.p, bin.n), 0);
    assert_int_equal(zpt_write_file(ip, (const char *)idx.p, idx.n), 0);
    const zpi_format *fmt = zpi_format_by_name("megatron");
    assert_non_null(fmt);
    zpi_shard sh;
    zpi_err err = {0};
    assert_int_equal(fmt->load(bp, "data", &f->lim, &sh, &err), ZP_OK);
    assert_int_equal(sh.n_records, 3);
    zpi_shard_free(&sh);
    free(bp);
    free(ip);
    free(bin.p);
    free(idx.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_every_dtype, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_tokens, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_record_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_record_out_of_range, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_u16, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_i32, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_many_docs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_abort_replace_empty, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idx_header, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idx_arrays, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bin_size, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idx_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idx_bit_flips, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expectations, setup, teardown),
        cmocka_unit_test_setup_teardown(test_path_without_suffix, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
