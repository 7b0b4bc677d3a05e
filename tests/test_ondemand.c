/*
 * test_ondemand.c - shards read on demand through the whole pipeline
 * (reader.h): pre-tokenized documents (Megatron .bin/.idx, HDF5 ragged and
 * variable-length) give exactly the batches that tokenizing the same texts
 * on the fly gives, in concat and pad packing, shuffled, with and without a
 * stored EOT; fixed-shape HDF5 fields are batched as [rows, ...] arrays;
 * the errors name the shard.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"
#include "formats/tokw.h"
#include "zephon/dataset.h"
#include "zephon/pipeline.h"
#include "zephon/tokenizer.h"
#include "zephon/worksource.h"

#define SHARDS 3
#define PER_SHARD 37

/* The i-th document of shard s (deterministic, varied lengths, some empty). */
static void doc_text(int s, int i, char *buf, size_t cap)
{
    static const char *const words[] = {"the", "data", "loader", "feeds", "accelerators",
                                        "Zephon", "tokens", "fast", "naïve", "日本語",
                                        "code()", "  spaces", "\n", "42", "über"};
    size_t n = (size_t)((s * 131 + i * 17) % 40);
    if (i % 11 == 5)
        n = 0; /* an empty document */
    size_t len = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < n && len + 32 < cap; k++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", k ? " " : "",
                                words[(s * 7 + i * 3 + k * 5) % 15]);
}

/* JSON string escaping for the few characters doc_text makes. */
static void json_line(const char *t, char *out, size_t cap)
{
    size_t o = 0;
    o += (size_t)snprintf(out + o, cap - o, "{\"text\":\"");
    for (const char *p = t; *p && o + 8 < cap; p++) {
        if (*p == '\n')
            o += (size_t)snprintf(out + o, cap - o, "\\n");
        else if (*p == '"' || *p == '\\')
            o += (size_t)snprintf(out + o, cap - o, "\\%c", *p);
        else
            out[o++] = *p;
    }
    snprintf(out + o, cap - o, "\"}\n");
}

typedef struct fixture {
    char *dir;
    zp_tokenizer *tok;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->dir = zpt_tmpdir();
    char err[256];
    if (!f->dir || zp_tokenizer_create("gpt2", NULL, &f->tok, err, sizeof err) != ZP_OK)
        return -1;
    /* the JSONL shards */
    for (int s = 0; s < SHARDS; s++) {
        char name[64], text[4096], line[8192];
        snprintf(name, sizeof name, "s%d.jsonl", s);
        char *p = zpt_path(f->dir, name);
        char *all = calloc(1, (size_t)PER_SHARD * 8192);
        size_t len = 0;
        for (int i = 0; i < PER_SHARD; i++) {
            doc_text(s, i, text, sizeof text);
            json_line(text, line, sizeof line);
            memcpy(all + len, line, strlen(line));
            len += strlen(line);
        }
        if (zpt_write_file(p, all, len) != 0)
            return -1;
        free(all);
        free(p);
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    zpt_rmtree(f->dir);
    free(f->dir);
    zp_tokenizer_destroy(f->tok);
    free(f);
    return 0;
}

/* Writes the shards' documents, tokenized, as pre-tokenized shards named
 * <prefix><s><suffix> (Megatron: prefix + s, HDF5: prefix + s + ".h5"). */
static void write_tokens(fixture *f, const char *prefix, int hdf5, zp_dtype dt, int append_eot)
{
    zp_encoder *enc;
    assert_int_equal(zp_encoder_create(f->tok, &enc), ZP_OK);
    int32_t *ids = malloc(8192 * sizeof *ids);
    for (int s = 0; s < SHARDS; s++) {
        char name[256], text[4096];
        zpi_err err = {0};
        snprintf(name, sizeof name, "%s%d%s", prefix, s, hdf5 ? ".h5" : "");
        char *p = zpt_path(f->dir, name);
        zpi_tokw *w = NULL;
#ifdef ZP_HAVE_FORMAT_HDF5
        zp_status st = hdf5 ? zpi_tokw_open_hdf5(p, dt, "gpt2", &w, &err)
                            : zpi_tokw_open_megatron(p, dt, &w, &err);
#else
        zp_status st = zpi_tokw_open_megatron(p, dt, &w, &err);
#endif
        if (st != ZP_OK)
            fail_msg("open %s: %s", p, err.msg);
        for (int i = 0; i < PER_SHARD; i++) {
            doc_text(s, i, text, sizeof text);
            size_t n = 0;
            assert_int_equal(zp_encode(enc, text, strlen(text), ids, &n), ZP_OK);
            if (append_eot)
                ids[n++] = zp_tokenizer_eot(f->tok);
            if (zpi_tokw_add(w, ids, n, &err) != ZP_OK)
                fail_msg("add: %s", err.msg);
        }
        if (zpi_tokw_commit(w, &err) != ZP_OK)
            fail_msg("commit %s: %s", p, err.msg);
        free(p);
    }
    free(ids);
    zp_encoder_destroy(enc);
}

/* Every batch of a run over the shards matching glob, hashed into digests
 * (tokens, mask, segments, sample identities). Returns the batch count. */
typedef struct run_out {
    size_t batches;
    uint64_t digest[512];
    zp_status st;
    char err[1024];
} run_out;

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static void run(fixture *f, const char *glob, zp_pack_mode mode, run_out *o)
{
    memset(o, 0, sizeof *o);
    zp_dataset *ds;
    assert_int_equal(zp_dataset_create(NULL, &ds), ZP_OK);
    char *spec = zpt_path(f->dir, glob);
    if (zp_dataset_add(ds, spec) != ZP_OK || zp_dataset_index(ds) != ZP_OK)
        fail_msg("dataset %s: %s", spec, zp_dataset_errmsg(ds));
    free(spec);
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.seed = 7;
    zp_worksource *ws;
    assert_int_equal(zp_worksource_create(ds, &wc, &ws), ZP_OK);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = 2;
    pc.chunk_samples = 8;
    pc.fetch_parallelism = 2;
    zp_pipeline *p;
    assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_OK);
    assert_int_equal(zp_pipeline_tokenize(p, "gpt2", "text", 2), ZP_OK);
    assert_int_equal(zp_pipeline_pack(p, mode, 31), ZP_OK);
    assert_int_equal(zp_pipeline_batch(p, 3), ZP_OK);
    const zp_batch *b;
    while ((o->st = zp_pipeline_next(p, &b)) == ZP_OK) {
        uint64_t h = 1469598103934665603ULL;
        size_t n = b->rows * b->cols;
        h = fnv(h, b->tokens, n * sizeof *b->tokens);
        h = fnv(h, b->loss_mask, n);
        h = fnv(h, b->segment_ids, n * sizeof *b->segment_ids);
        for (size_t i = 0; i < b->n_samples; i++) {
            uint64_t id[2] = {b->samples[i].shard, b->samples[i].record};
            h = fnv(h, id, sizeof id);
        }
        if (o->batches < 512)
            o->digest[o->batches] = h;
        o->batches++;
    }
    snprintf(o->err, sizeof o->err, "%s", zp_pipeline_errmsg(p));
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    zp_dataset_destroy(ds);
}

static void expect_same(fixture *f, const char *glob, zp_pack_mode mode)
{
    run_out *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    run(f, "s*.jsonl", mode, a);
    assert_int_equal(a->st, ZP_END);
    run(f, glob, mode, b);
    if (b->st != ZP_END)
        fail_msg("%s: %s", glob, b->err);
    assert_true(a->batches > 10);
    assert_int_equal(a->batches, b->batches);
    for (size_t i = 0; i < a->batches && i < 512; i++)
        if (a->digest[i] != b->digest[i])
            fail_msg("%s: batch %zu differs from tokenizing on the fly", glob, i);
    free(a);
    free(b);
}

static void test_megatron_equals_on_the_fly(void **state)
{
    fixture *f = *state;
    write_tokens(f, "m16_", 0, ZP_DTYPE_U16, 0);
    write_tokens(f, "m32e_", 0, ZP_DTYPE_I32, 1); /* each document followed by EOT */
    expect_same(f, "m16_*.bin", ZP_PACK_CONCAT);
    expect_same(f, "m16_*.bin", ZP_PACK_PAD);
    expect_same(f, "m32e_*.bin", ZP_PACK_CONCAT);
    expect_same(f, "m32e_*.bin", ZP_PACK_PAD);
}

static void test_record_mode_refused(void **state)
{
    fixture *f = *state;
    write_tokens(f, "rm_", 0, ZP_DTYPE_U16, 0);
    zp_dataset *ds;
    zp_dataset_create(NULL, &ds);
    char *spec = zpt_path(f->dir, "rm_*.bin");
    assert_int_equal(zp_dataset_add(ds, spec), ZP_OK);
    free(spec);
    zp_worksource *ws;
    assert_int_equal(zp_worksource_create(ds, NULL, &ws), ZP_OK);
    zp_pipeline *p;
    assert_int_equal(zp_pipeline_create(ws, NULL, &p), ZP_OK);
    const zp_batch *b;
    assert_int_equal(zp_pipeline_next(p, &b), ZP_ERR_UNSUPPORTED);
    assert_non_null(strstr(zp_pipeline_errmsg(p), "pre-tokenized"));
    assert_non_null(strstr(zp_pipeline_errmsg(p), "rm_"));
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    zp_dataset_destroy(ds);
}

/* Ids outside the vocabulary: a bad record naming shard and record. */
static void test_ids_outside_vocab(void **state)
{
    fixture *f = *state;
    char *p = zpt_path(f->dir, "big_0");
    zpi_err err = {0};
    zpi_tokw *w;
    assert_int_equal(zpi_tokw_open_megatron(p, ZP_DTYPE_I32, &w, &err), ZP_OK);
    int32_t ok[3] = {10, 20, 30}, bad[2] = {5, 60000};
    assert_int_equal(zpi_tokw_add(w, ok, 3, &err), ZP_OK);
    assert_int_equal(zpi_tokw_add(w, bad, 2, &err), ZP_OK);
    assert_int_equal(zpi_tokw_commit(w, &err), ZP_OK);
    free(p);
    run_out *o = malloc(sizeof *o);
    run(f, "big_0.bin", ZP_PACK_CONCAT, o);
    assert_int_equal(o->st, ZP_ERR_FORMAT);
    assert_non_null(strstr(o->err, "big_0.bin"));
    assert_non_null(strstr(o->err, "60000"));
    free(o);
}

#ifdef ZP_HAVE_FORMAT_HDF5
static void test_hdf5_equals_on_the_fly(void **state)
{
    fixture *f = *state;
    write_tokens(f, "h16_", 1, ZP_DTYPE_U16, 0);
    write_tokens(f, "h32e_", 1, ZP_DTYPE_I32, 1);
    expect_same(f, "h16_*.h5", ZP_PACK_CONCAT);
    expect_same(f, "h16_*.h5", ZP_PACK_PAD);
    expect_same(f, "h32e_*.h5", ZP_PACK_CONCAT);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_megatron_equals_on_the_fly),
        cmocka_unit_test(test_record_mode_refused),
        cmocka_unit_test(test_ids_outside_vocab),
#ifdef ZP_HAVE_FORMAT_HDF5
        cmocka_unit_test(test_hdf5_equals_on_the_fly),
#endif
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
