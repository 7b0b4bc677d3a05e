/* test_tokenizers_integration.c - the tokenizer as the rest of Zephon sees it
 * (issue 21, integration): identity, EOT/BOS defaults and overrides, BOS
 * and EOT around each packed document, states that record the tokenizer,
 * pre-tokenized shards that record theirs (a run with another is refused),
 * int32 token storage above 65,536 ids, Megatron path prefixes. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "zephon.h"
#include "zephon/preprocess.h"

/* ------------------------------------------------------------ helpers */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static size_t b64(const unsigned char *s, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)s[i] << 16 | (i + 1 < n ? (unsigned)s[i + 1] << 8 : 0) |
                     (i + 2 < n ? s[i + 2] : 0);
        out[o++] = B64[v >> 18 & 63];
        out[o++] = B64[v >> 12 & 63];
        out[o++] = i + 1 < n ? B64[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? B64[v & 63] : '=';
    }
    out[o] = '\0';
    return o;
}

/* A tiktoken rank file: the 256 bytes, then `extra` tokens of 2 and 3
 * letters (ranks 256...), so the vocabulary has 256 + extra + 1 ids (the
 * end-of-text id after the largest rank). */
static char *write_ranks(const char *dir, const char *name, size_t extra)
{
    char *path = zpt_path(dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    char enc[16];
    for (unsigned i = 0; i < 256; i++) {
        unsigned char c = (unsigned char)i;
        b64(&c, 1, enc);
        fprintf(f, "%s %u\n", enc, i);
    }
    size_t r = 256;
    /* 2-letter tokens first (every 3-letter one splits into a 2-letter one
     * and a letter), then 3-letter ones */
    for (size_t len = 2; len <= 4 && r < 256 + extra; len++)
        for (size_t k = 0; r < 256 + extra; k++) {
            unsigned char t[4];
            size_t v = k;
            for (size_t j = 0; j < len; j++, v /= 26)
                t[j] = (unsigned char)('a' + v % 26);
            if (v)
                break;
            b64(t, len, enc);
            fprintf(f, "%s %zu\n", enc, r++);
        }
    assert_int_equal(fclose(f), 0);
    return path;
}

static zp_tokenizer *tok_with(const char *id, int32_t eot, int32_t bos, zp_status want,
                              const char *msg_part)
{
    zp_tokenizer_config cfg;
    zp_tokenizer_config_init(&cfg);
    cfg.eot = eot;
    cfg.bos = bos;
    zp_tokenizer *t = NULL;
    char err[512] = "";
    zp_status st = zp_tokenizer_create(id, &cfg, &t, err, sizeof err);
    if (st != want)
        fail_msg("tokenizer '%s' eot %d bos %d: status %d (%s), wanted %d", id, eot, bos, st, err,
                 want);
    if (msg_part && !strstr(err, msg_part))
        fail_msg("'%s' not in: %s", msg_part, err);
    return t;
}

/* ------------------------------------------------------------ identity and boundaries */

static void test_gpt2_defaults_and_overrides(void **state)
{
    (void)state;
    zp_tokenizer *t = tok_with("gpt2", ZP_TOKEN_DEFAULT, ZP_TOKEN_DEFAULT, ZP_OK, NULL);
    assert_int_equal(zp_tokenizer_eot(t), 50256);
    assert_int_equal(zp_tokenizer_bos(t), -1);
    assert_string_equal(zp_tokenizer_ident(t), "gpt2");
    zp_tokenizer_destroy(t);

    t = tok_with("gpt2", 100, 7, ZP_OK, NULL);
    assert_int_equal(zp_tokenizer_eot(t), 100);
    assert_int_equal(zp_tokenizer_bos(t), 7);
    assert_string_equal(zp_tokenizer_ident(t), "gpt2"); /* settings are not the identity */
    zp_tokenizer_destroy(t);

    t = tok_with("gpt2", ZP_TOKEN_DEFAULT, -1, ZP_OK, NULL);
    assert_int_equal(zp_tokenizer_bos(t), -1);
    zp_tokenizer_destroy(t);

    assert_null(tok_with("gpt2", ZP_TOKEN_DEFAULT, 50257, ZP_ERR_INVALID, "bos = 50257"));
    assert_null(tok_with("gpt2", -1, ZP_TOKEN_DEFAULT, ZP_ERR_INVALID, "eot = -1"));
    assert_null(tok_with("gpt2", 1 << 30, ZP_TOKEN_DEFAULT, ZP_ERR_INVALID, "0 to 50256"));

    /* special tokens matched in text: refused where the kind does not do it */
    zp_tokenizer_config cfg;
    zp_tokenizer_config_init(&cfg);
    assert_int_equal(cfg.match_special, 0);
    cfg.match_special = 1;
    char err[512] = "";
    zp_tokenizer *t2 = (zp_tokenizer *)1;
    assert_int_equal(zp_tokenizer_create("gpt2", &cfg, &t2, err, sizeof err), ZP_ERR_UNSUPPORTED);
    assert_null(t2);
    assert_non_null(strstr(err, "match_special"));
}

/* A file's identity is its kind and content hash: the same bytes under
 * another path are the same tokenizer, other bytes another one. */
static void test_file_identity(void **state)
{
    (void)state;
    char *d = zpt_tmpdir();
    char *sub = zpt_path(d, "copy:with colon");
    assert_int_equal(mkdir(sub, 0700), 0);
    char *a = write_ranks(d, "a.tiktoken", 40);
    char *b = write_ranks(sub, "b.tiktoken", 40);
    char *c = write_ranks(d, "c.tiktoken", 41);
    char ida[4200], idb[4200], idc[4200];
    snprintf(ida, sizeof ida, "gpt2:%s", a);
    snprintf(idb, sizeof idb, "gpt2:%s", b);
    snprintf(idc, sizeof idc, "gpt2:%s", c);
    zp_tokenizer *ta = tok_with(ida, ZP_TOKEN_DEFAULT, ZP_TOKEN_DEFAULT, ZP_OK, NULL);
    zp_tokenizer *tb = tok_with(idb, ZP_TOKEN_DEFAULT, ZP_TOKEN_DEFAULT, ZP_OK, NULL);
    zp_tokenizer *tc = tok_with(idc, ZP_TOKEN_DEFAULT, ZP_TOKEN_DEFAULT, ZP_OK, NULL);
    assert_non_null(ta);
    assert_non_null(tb);
    assert_non_null(tc);
    assert_true(strncmp(zp_tokenizer_ident(ta), "tiktoken", 8) == 0);
    assert_non_null(strstr(zp_tokenizer_ident(ta), ":xxh64:"));
    assert_string_equal(zp_tokenizer_ident(ta), zp_tokenizer_ident(tb));
    assert_string_not_equal(zp_tokenizer_ident(ta), zp_tokenizer_ident(tc));
    assert_int_equal(zp_tokenizer_eot(ta), 256 + 40);
    zp_tokenizer_destroy(ta);
    zp_tokenizer_destroy(tb);
    zp_tokenizer_destroy(tc);
    free(a);
    free(b);
    free(c);
    free(sub);
    zpt_rmtree(d);
    free(d);
}

/* ------------------------------------------------------------ packing */

typedef struct run_out {
    int32_t tok[4096];
    uint8_t mask[4096];
    size_t n;
} run_out;

static const char *DOCS[] = {"hello world", "abc", "Zephon packs documents."};
#define N_DOCS 3

static char *docs_file(const char *dir)
{
    char buf[1024];
    size_t len = 0;
    for (int i = 0; i < N_DOCS; i++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "{\"text\": \"%s\"}\n", DOCS[i]);
    char *p = zpt_path(dir, "docs.jsonl");
    assert_int_equal(zpt_write_file(p, buf, len), 0);
    return p;
}

static zp_pipeline *make_pipe(const char *spec, const char *tok, const zp_tokenizer_config *tc,
                              zp_pack_mode mode, size_t seq_len, zp_worksource **ws_out,
                              zp_dataset **ds_out)
{
    zp_dataset *ds;
    assert_int_equal(zp_dataset_create(NULL, &ds), ZP_OK);
    if (zp_dataset_add(ds, spec) != ZP_OK)
        fail_msg("add '%s': %s", spec, zp_dataset_errmsg(ds));
    assert_int_equal(zp_dataset_index(ds), ZP_OK);
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.shuffle = 0;
    zp_worksource *ws;
    assert_int_equal(zp_worksource_create(ds, &wc, &ws), ZP_OK);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.microbatch_size = 1;
    pc.epochs = 1;
    pc.threads = 2;
    zp_pipeline *p;
    assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_OK);
    zp_status st = zp_pipeline_tokenize_config(p, tok, tc, "text", 2);
    if (st != ZP_OK)
        fail_msg("tokenize: %s", zp_pipeline_errmsg(p));
    assert_int_equal(zp_pipeline_pack(p, mode, seq_len), ZP_OK);
    *ws_out = ws;
    *ds_out = ds;
    return p;
}

/* Every token (and loss mask) of every batch, rows one after the other;
 * the status that ended the stream. */
static zp_status run_all(zp_pipeline *p, run_out *o)
{
    o->n = 0;
    const zp_batch *b;
    zp_status st;
    while ((st = zp_pipeline_next(p, &b)) == ZP_OK) {
        size_t n = b->rows * b->cols;
        assert_true(o->n + n <= 4096);
        memcpy(o->tok + o->n, b->tokens, n * sizeof *b->tokens);
        memcpy(o->mask + o->n, b->loss_mask, n);
        o->n += n;
    }
    return st;
}

static size_t encode(const zp_tokenizer *t, const char *s, int32_t *ids)
{
    zp_encoder *e;
    assert_int_equal(zp_encoder_create(t, &e), ZP_OK);
    size_t n = 0;
    assert_int_equal(zp_encode(e, s, strlen(s), ids, &n), ZP_OK);
    zp_encoder_destroy(e);
    return n;
}

/* The documents as packed: [BOS] ids EOT, one after the other. */
static size_t expected_stream(int32_t bos, int32_t eot, int32_t *out)
{
    zp_tokenizer *t = tok_with("gpt2", ZP_TOKEN_DEFAULT, ZP_TOKEN_DEFAULT, ZP_OK, NULL);
    size_t n = 0;
    for (int i = 0; i < N_DOCS; i++) {
        if (bos >= 0)
            out[n++] = bos;
        n += encode(t, DOCS[i], out + n);
        out[n++] = eot;
    }
    zp_tokenizer_destroy(t);
    return n;
}

static void free_pipe(zp_pipeline *p, zp_worksource *ws, zp_dataset *ds)
{
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    zp_dataset_destroy(ds);
}

/* Concatenated: with a BOS each document is BOS ids EOT; without, ids EOT
 * (as before). seq_len 4 cuts documents across rows (each row starts with
 * the previous row's last token). */
static void test_pack_concat_bos(void **state)
{
    (void)state;
    char *d = zpt_tmpdir();
    char *docs = docs_file(d);
    for (int with_bos = 0; with_bos < 2; with_bos++) {
        for (size_t seq_len = 4; seq_len <= 64; seq_len += 60) {
            zp_tokenizer_config tc;
            zp_tokenizer_config_init(&tc);
            if (with_bos) {
                tc.bos = 1000;
                tc.eot = 2000;
            }
            zp_worksource *ws;
            zp_dataset *ds;
            zp_pipeline *p = make_pipe(docs, "gpt2", &tc, ZP_PACK_CONCAT, seq_len, &ws, &ds);
            assert_int_equal(zp_pipeline_bos(p), with_bos ? 1000 : -1);
            assert_int_equal(zp_pipeline_eot(p), with_bos ? 2000 : 50256);
            static run_out o;
            assert_int_equal(run_all(p, &o), ZP_END);
            int32_t want[256];
            size_t nw = expected_stream(with_bos ? 1000 : -1, with_bos ? 2000 : 50256, want);
            /* the delivered stream without the carried first token of each
             * row after the first, and without padding */
            int32_t got[4096];
            size_t ng = 0, cols = seq_len + 1;
            for (size_t i = 0; i < o.n; i++) {
                if (i >= cols && i % cols == 0)
                    continue;
                if (o.mask[i])
                    got[ng++] = o.tok[i];
            }
            assert_int_equal(ng, nw);
            assert_memory_equal(got, want, nw * sizeof *want);
            free_pipe(p, ws, ds);
        }
    }
    free(docs);
    zpt_rmtree(d);
    free(d);
}

/* Padded: each row is [BOS] ids EOT, then padding (EOT, mask 0); a
 * document longer than the row is cut. */
static void test_pack_pad_bos(void **state)
{
    (void)state;
    char *d = zpt_tmpdir();
    char *docs = docs_file(d);
    zp_tokenizer_config tc;
    zp_tokenizer_config_init(&tc);
    tc.bos = 1000;
    zp_worksource *ws;
    zp_dataset *ds;
    const size_t seq_len = 5, cols = seq_len + 1;
    zp_pipeline *p = make_pipe(docs, "gpt2", &tc, ZP_PACK_PAD, seq_len, &ws, &ds);
    static run_out o;
    assert_int_equal(run_all(p, &o), ZP_END);
    assert_int_equal(o.n, N_DOCS * cols);
    zp_tokenizer *t = tok_with("gpt2", ZP_TOKEN_DEFAULT, ZP_TOKEN_DEFAULT, ZP_OK, NULL);
    for (int i = 0; i < N_DOCS; i++) {
        int32_t want[64];
        want[0] = 1000;
        size_t n = 1 + encode(t, DOCS[i], want + 1);
        want[n++] = 50256;
        size_t keep = n < cols ? n : cols;
        assert_memory_equal(o.tok + i * cols, want, keep * sizeof *want);
        for (size_t k = 0; k < cols; k++)
            assert_int_equal(o.mask[i * cols + k], k < keep);
    }
    zp_tokenizer_destroy(t);
    free_pipe(p, ws, ds);
    free(docs);
    zpt_rmtree(d);
    free(d);
}

/* A state records the tokenizer's identity and the boundary overrides: a
 * resume with other ones is refused, naming them; a state without
 * overrides has none of the new keys (states saved before them resume). */
static void test_state_records_tokenizer(void **state)
{
    (void)state;
    char *d = zpt_tmpdir();
    char *docs = docs_file(d);
    zp_tokenizer_config tc;
    zp_tokenizer_config_init(&tc);
    tc.bos = 1000;
    zp_worksource *ws;
    zp_dataset *ds;
    zp_pipeline *p = make_pipe(docs, "gpt2", &tc, ZP_PACK_CONCAT, 4, &ws, &ds);
    const zp_batch *b;
    assert_int_equal(zp_pipeline_next(p, &b), ZP_OK);
    char *js;
    size_t len;
    assert_int_equal(zp_pipeline_state_save(p, &js, &len), ZP_OK);
    if (!strstr(js, "\"tokenizer\": \"gpt2\""))
        fail_msg("no tokenizer gpt2 in %s", js);
    assert_non_null(strstr(js, "\"bos\": 1000"));
    free_pipe(p, ws, ds);

    /* the same settings resume */
    p = make_pipe(docs, "gpt2", &tc, ZP_PACK_CONCAT, 4, &ws, &ds);
    assert_int_equal(zp_pipeline_state_restore(p, js, len), ZP_OK);
    free_pipe(p, ws, ds);
    /* without the BOS: refused, naming it */
    p = make_pipe(docs, "gpt2", NULL, ZP_PACK_CONCAT, 4, &ws, &ds);
    assert_int_equal(zp_pipeline_state_restore(p, js, len), ZP_ERR_MISMATCH);
    assert_non_null(strstr(zp_pipeline_errmsg(p), "bos"));
    free_pipe(p, ws, ds);
    free(js);

    /* defaults: no boundary keys */
    p = make_pipe(docs, "gpt2", NULL, ZP_PACK_CONCAT, 4, &ws, &ds);
    assert_int_equal(zp_pipeline_next(p, &b), ZP_OK);
    assert_int_equal(zp_pipeline_state_save(p, &js, &len), ZP_OK);
    assert_null(strstr(js, "\"bos\""));
    assert_null(strstr(js, "\"eot\""));
    free_pipe(p, ws, ds);
    free(js);
    free(docs);
    zpt_rmtree(d);
    free(d);
}

/* ------------------------------------------------------------ pre-tokenized shards */

typedef struct logbuf {
    char text[4096];
} logbuf;

static void log_keep(void *user, zp_log_level lvl, const char *msg)
{
    logbuf *l = user;
    if (lvl == ZP_LOG_WARN)
        snprintf(l->text + strlen(l->text), sizeof l->text - strlen(l->text), "%s\n", msg);
}

/* zephon preprocess of docs.jsonl into dir/out with tokenizer tok. */
static zp_dtype preprocess(const char *docs, const char *out, const char *tok,
                           zp_preprocess_format fmt, int append_eot)
{
    zp_dataset *ds;
    assert_int_equal(zp_dataset_create(NULL, &ds), ZP_OK);
    assert_int_equal(zp_dataset_add(ds, docs), ZP_OK);
    zp_preprocess_config c;
    zp_preprocess_config_init(&c);
    c.out_dir = out;
    c.format = fmt;
    c.tokenizer = tok;
    c.append_eot = append_eot;
    c.threads = 2;
    c.force = 1;
    zp_preprocess *pp;
    zp_status st = zp_preprocess_create(&c, ds, &pp);
    if (st != ZP_OK)
        fail_msg("preprocess create: %s", pp ? zp_preprocess_errmsg(pp) : "");
    if (zp_preprocess_run(pp) != ZP_OK || zp_preprocess_write_manifest(pp) != ZP_OK)
        fail_msg("preprocess: %s", zp_preprocess_errmsg(pp));
    zp_dtype dt = zp_preprocess_dtype(pp);
    zp_preprocess_destroy(pp);
    zp_dataset_destroy(ds);
    return dt;
}

/* The status of a pipeline that tokenizes spec with tok (its message into
 * msg), and its stream into *o when it runs. */
static zp_status try_run(const char *spec, const char *tok, logbuf *log, char *msg, size_t cap,
                         run_out *o)
{
    zp_dataset *ds;
    assert_int_equal(zp_dataset_create(NULL, &ds), ZP_OK);
    if (zp_dataset_add(ds, spec) != ZP_OK)
        fail_msg("add '%s': %s", spec, zp_dataset_errmsg(ds));
    assert_int_equal(zp_dataset_index(ds), ZP_OK);
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.shuffle = 0;
    zp_worksource *ws;
    assert_int_equal(zp_worksource_create(ds, &wc, &ws), ZP_OK);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.microbatch_size = 1;
    pc.epochs = 1;
    pc.log = log_keep;
    pc.log_user = log;
    zp_pipeline *p;
    assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_OK);
    zp_status st = zp_pipeline_tokenize(p, tok, "text", 1);
    snprintf(msg, cap, "%s", zp_pipeline_errmsg(p));
    if (st == ZP_OK) {
        assert_int_equal(zp_pipeline_pack(p, ZP_PACK_CONCAT, 64), ZP_OK);
        st = run_all(p, o);
        if (st != ZP_END)
            fail_msg("run of '%s': %s", spec, zp_pipeline_errmsg(p));
        st = ZP_OK;
    }
    free_pipe(p, ws, ds);
    return st;
}

/* An HDF5 shard named directly, its record count from the index store
 * (filled by an earlier index: no load now, so the dataset has not read
 * the shard's attribute zephon_tokenizer): zp_pipeline_tokenize accepts
 * tok, and the run fails at the shard's first read with what the read
 * found (ZP_ERR_MISMATCH naming both identities), or ends (ZP_END). */
static zp_status try_run_stored(const char *spec, const char *store, const char *tok, char *msg,
                                size_t cap)
{
    zp_dataset_config dc;
    zp_dataset_config_init(&dc);
    dc.index_store_dir = store;
    zp_dataset *ds;
    assert_int_equal(zp_dataset_create(&dc, &ds), ZP_OK);
    if (zp_dataset_add(ds, spec) != ZP_OK)
        fail_msg("add '%s': %s", spec, zp_dataset_errmsg(ds));
    assert_int_equal(zp_dataset_index(ds), ZP_OK);
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.shuffle = 0;
    zp_worksource *ws;
    assert_int_equal(zp_worksource_create(ds, &wc, &ws), ZP_OK);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.microbatch_size = 1;
    pc.epochs = 1;
    zp_pipeline *p;
    assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_OK);
    zp_status st = zp_pipeline_tokenize(p, tok, "text", 1);
    if (st != ZP_OK)
        fail_msg("tokenize: %s", zp_pipeline_errmsg(p));
    assert_int_equal(zp_pipeline_pack(p, ZP_PACK_CONCAT, 64), ZP_OK);
    static run_out o;
    st = run_all(p, &o);
    snprintf(msg, cap, "%s", zp_pipeline_errmsg(p));
    free_pipe(p, ws, ds);
    return st;
}

/* Preprocessed shards record their tokenizer (HDF5 attribute and manifest,
 * a Megatron pair's PREFIX.tokenizer and manifest); a run with another
 * tokenizer is refused naming both (an HDF5 file named directly through
 * its attribute: at zp_pipeline_tokenize when the index read the file, at
 * its first read when the count came from the index store); one with the same gives the batches of
 * the text; a pair without its record is accepted with a warning. A
 * Megatron prefix names the pair. */
static void test_shards_record_tokenizer(void **state)
{
    (void)state;
    char *d = zpt_tmpdir();
    char *docs = docs_file(d);
    char *ranks = write_ranks(d, "r.tiktoken", 40);
    char other[4200];
    snprintf(other, sizeof other, "gpt2:%s", ranks);
    char *out = zpt_path(d, "out");
    static run_out text, o;
    char msg[2048];
    logbuf log = {""};
    assert_int_equal(try_run(docs, "gpt2", &log, msg, sizeof msg, &text), ZP_OK);

    for (int fmt = 0; fmt < 2; fmt++) {
        zp_preprocess_format pf = fmt ? ZP_PREPROCESS_MEGATRON : ZP_PREPROCESS_HDF5;
        assert_int_equal(preprocess(docs, out, "gpt2", pf, fmt), ZP_DTYPE_U16);
        char *man = zpt_path(out, "manifest.json");
        char *mj = zpt_read_file(man, NULL);
        assert_non_null(mj);
        if (!strstr(mj, "\"tokenizer\": \"gpt2\""))
            fail_msg("manifest without the tokenizer: %s", mj);
        free(mj);
        char *bin = zpt_path(out, fmt ? "docs.bin" : "docs.h5");
        char *prefix = zpt_path(out, "docs");
        const char *specs[3] = {man, bin, prefix};
        /* HDF5: the manifest and the file named directly (its attribute
         * zephon_tokenizer); Megatron: the manifest, the .bin, the prefix */
        for (int k = 0; k < (fmt ? 3 : 2); k++) {
            /* the same tokenizer: the batches of the text */
            log.text[0] = '\0';
            assert_int_equal(try_run(specs[k], "gpt2", &log, msg, sizeof msg, &o), ZP_OK);
            assert_int_equal(o.n, text.n);
            assert_memory_equal(o.tok, text.tok, o.n * sizeof *o.tok);
            assert_string_equal(log.text, "");
            /* another: refused, naming both */
            assert_int_equal(try_run(specs[k], other, &log, msg, sizeof msg, &o),
                             ZP_ERR_MISMATCH);
            if (!strstr(msg, "'gpt2'") || !strstr(msg, "'tiktoken:gpt2:xxh64:"))
                fail_msg("%s: %s", specs[k], msg);
        }
        if (!fmt) {
            /* the file named directly, its count from the index store: the
             * attribute is compared when the shard is read */
            char *store = zpt_path(d, "store");
            assert_int_equal(mkdir(store, 0700), 0);
            /* the store keeps no entry for a file changed in the last 2 s */
            struct timeval tv[2] = {{time(NULL) - 10, 0}, {time(NULL) - 10, 0}};
            assert_int_equal(utimes(bin, tv), 0);
            assert_int_equal(try_run_stored(bin, store, "gpt2", msg, sizeof msg), ZP_END);
            assert_int_equal(try_run_stored(bin, store, other, msg, sizeof msg),
                             ZP_ERR_MISMATCH);
            if (!strstr(msg, "'gpt2'") || !strstr(msg, "'tiktoken:gpt2:xxh64:") ||
                !strstr(msg, "zephon_tokenizer"))
                fail_msg("stored count: %s", msg);
            assert_int_equal(try_run_stored(bin, store, "gpt2", msg, sizeof msg), ZP_END);
            free(store);
        }
        if (fmt) {
            /* the pair's record alone (no manifest) says so ... */
            char *side = zpt_path(out, "docs.tokenizer");
            char *sj = zpt_read_file(side, NULL);
            assert_string_equal(sj, "gpt2\n");
            free(sj);
            /* ... and without it the pair is accepted, with a warning */
            assert_int_equal(unlink(side), 0);
            log.text[0] = '\0';
            assert_int_equal(try_run(bin, "gpt2", &log, msg, sizeof msg, &o), ZP_OK);
            if (!strstr(log.text, "record no tokenizer identity") &&
                !strstr(log.text, "records no tokenizer identity"))
                fail_msg("no warning: '%s'", log.text);
            free(side);
        }
        free(man);
        free(bin);
        free(prefix);
    }
    free(out);
    free(ranks);
    free(docs);
    zpt_rmtree(d);
    free(d);
}

/* A vocabulary above 65,536 ids is stored as int32 (HDF5 and Megatron),
 * and read back to the ids of the text, ids above 65,535 included. */
static void test_int32_storage(void **state)
{
    (void)state;
    char *d = zpt_tmpdir();
    char *ranks = write_ranks(d, "big.tiktoken", 70000);
    char tok[4200];
    snprintf(tok, sizeof tok, "gpt2:%s", ranks);
    zp_tokenizer *t = tok_with(tok, ZP_TOKEN_DEFAULT, ZP_TOKEN_DEFAULT, ZP_OK, NULL);
    assert_true(zp_tokenizer_vocab_size(t) > 65536);
    /* a 4-letter token of rank above 65,535: k-th 4-letter word */
    char word[5];
    size_t k = 66000 - (256 + 26 * 26 + 26 * 26 * 26);
    for (int j = 0; j < 4; j++, k /= 26)
        word[j] = (char)('a' + k % 26);
    word[4] = '\0';
    int32_t ids[16];
    assert_int_equal(encode(t, word, ids), 1);
    assert_int_equal(ids[0], 66000);
    zp_tokenizer_destroy(t);
    char line[256];
    int n = snprintf(line, sizeof line, "{\"text\": \"%s abc\"}\n{\"text\": \"%s\"}\n", word, word);
    char *docs = zpt_path(d, "docs.jsonl");
    assert_int_equal(zpt_write_file(docs, line, (size_t)n), 0);
    static run_out text, o;
    char msg[2048];
    logbuf log = {""};
    assert_int_equal(try_run(docs, tok, &log, msg, sizeof msg, &text), ZP_OK);
    char *out = zpt_path(d, "out");
    for (int fmt = 0; fmt < 2; fmt++) {
        assert_int_equal(preprocess(docs, out, tok, fmt ? ZP_PREPROCESS_MEGATRON : ZP_PREPROCESS_HDF5, 0),
                         ZP_DTYPE_I32);
        char *man = zpt_path(out, "manifest.json");
        assert_int_equal(try_run(man, tok, &log, msg, sizeof msg, &o), ZP_OK);
        assert_int_equal(o.n, text.n);
        assert_memory_equal(o.tok, text.tok, o.n * sizeof *o.tok);
        assert_int_equal(o.tok[0], 66000);
        free(man);
    }
    free(out);
    free(docs);
    free(ranks);
    zpt_rmtree(d);
    free(d);
}

/* A Megatron prefix in a manifest; one that names nothing is refused
 * saying what was looked for. */
static void test_megatron_prefix_in_manifest(void **state)
{
    (void)state;
    char *d = zpt_tmpdir();
    char *docs = docs_file(d);
    char *out = zpt_path(d, "out");
    preprocess(docs, out, "gpt2", ZP_PREPROCESS_MEGATRON, 1);
    char *m = zpt_path(d, "m.json");
    const char *js = "{\"format_version\": 1, \"shards\": [{\"path\": \"out/docs\"}]}";
    assert_int_equal(zpt_write_file(m, js, (size_t)-1), 0);
    static run_out text, o;
    char msg[2048];
    logbuf log = {""};
    assert_int_equal(try_run(docs, "gpt2", &log, msg, sizeof msg, &text), ZP_OK);
    assert_int_equal(try_run(m, "gpt2", &log, msg, sizeof msg, &o), ZP_OK);
    assert_int_equal(o.n, text.n);
    assert_memory_equal(o.tok, text.tok, o.n * sizeof *o.tok);
    const char *bad = "{\"format_version\": 1, \"shards\": [{\"path\": \"out/nothing\"}]}";
    assert_int_equal(zpt_write_file(m, bad, (size_t)-1), 0);
    zp_dataset *ds;
    assert_int_equal(zp_dataset_create(NULL, &ds), ZP_OK);
    assert_int_equal(zp_dataset_add(ds, m), ZP_ERR_FORMAT);
    if (!strstr(zp_dataset_errmsg(ds), "Megatron prefix"))
        fail_msg("%s", zp_dataset_errmsg(ds));
    zp_dataset_destroy(ds);
    free(m);
    free(out);
    free(docs);
    zpt_rmtree(d);
    free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_defaults_and_overrides),
        cmocka_unit_test(test_file_identity),
        cmocka_unit_test(test_pack_concat_bos),
        cmocka_unit_test(test_pack_pad_bos),
        cmocka_unit_test(test_state_records_tokenizer),
        cmocka_unit_test(test_shards_record_tokenizer),
        cmocka_unit_test(test_int32_storage),
        cmocka_unit_test(test_megatron_prefix_in_manifest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
