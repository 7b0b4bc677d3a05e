/*
 * test_resume.c - checkpoint and exact resume of whole pipelines
 * (zephon/state.h), in the style of the best loaders' checkpoint tests:
 *  - a 3-part mixture, shuffled, concat packing, 500 batches crossing an
 *    epoch boundary: the state is saved before every batch; each state is
 *    restored in a fresh pipeline with another thread count, chunk size
 *    and buffer, and the rest of the stream must be the same bytes;
 *  - the same in record mode and in pad mode (every 7th state);
 *  - a state from other settings is refused, naming the setting;
 *  - skipping batches: the range is absent, nothing else moves, the state
 *    names the range;
 *  - elastic: 4 ranks save part of an epoch, 3 ranks restore the job state,
 *    and over the epoch every draw is delivered exactly once (padding
 *    aside).
 * `test_resume STRIDE` (or $ZT_RESUME_STRIDE) restores every STRIDE-th state
 * only (the sanitizer runs).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <xxhash.h>

#include "data/dataset_internal.h"
#include "plan/state.h"
#include "testutil.h"
#include "zephon.h"

#define NB 500

static char *g_dir;
static char *g_spell; /* when set: the folder as run_open spells it */
static int g_stride = 1;
static uint64_t g_epoch_draws = 1200; /* draws per epoch */
static zp_mix_part g_parts[3] = {{"web", 6, 0.5}, {"code", 3, 0.3}, {"books", 2, 0.2}};
static const zp_mix_phase *g_phases; /* a weight schedule (docs/mixtures.md) */
static size_t g_balance; /* zp_pipeline_balance window, 0 off */
static size_t g_n_phases;

/* Deterministic records of varied lengths: some far longer than a row. */
static void write_shard(const char *name, int shard, int records, int salt)
{
    size_t cap = (size_t)records * 2048 + 1;
    char *buf = malloc(cap), *p = buf;
    for (int r = 0; r < records; r++) {
        int words = 1 + (int)((r * 7919 + shard * 104729 + salt * 31) % 97);
        if (r % 17 == 0)
            words += 150;
        p += sprintf(p, "{\"text\": \"%s %d %d", name, shard, r);
        for (int w = 0; w < words; w++)
            p += sprintf(p, " w%d", (w * 31 + r + salt) % 500);
        p += sprintf(p, "\"}\n");
    }
    char fn[256];
    snprintf(fn, sizeof fn, "%s-%02d.jsonl", name, shard);
    char *path = zpt_path(g_dir, fn);
    assert_int_equal(zpt_write_file(path, buf, (size_t)(p - buf)), 0);
    free(path);
    free(buf);
}

static int setup(void **state)
{
    (void)state;
    g_dir = zpt_tmpdir();
    for (int s = 0; s < 6; s++)
        write_shard("web", s, 40, 1);
    for (int s = 0; s < 3; s++)
        write_shard("code", s, 30, 2);
    for (int s = 0; s < 2; s++)
        write_shard("books", s, 20, 3);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    zpt_rmtree(g_dir);
    free(g_dir);
    return 0;
}

typedef struct setup_t {
    zp_pack_mode mode; /* ZP_PACK_RECORDS: no tokenize */
    int threads;
    size_t chunk, prefetch;
    uint32_t rank, world;
    uint64_t seed;
    size_t seq_len;
    uint32_t epochs;
    unsigned masking; /* ZP_OUT_* (zp_pipeline_doc_masking), 0 none */
    zp_position_mode positions;
    size_t window; /* ZP_PACK_BESTFIT: 0 the default */
} setup_t;

typedef struct run_t {
    zp_dataset *ds;
    zp_worksource *ws;
    zp_pipeline *p;
} run_t;

static void run_open(run_t *r, const setup_t *s)
{
    zp_dataset_config dc;
    zp_dataset_config_init(&dc);
    assert_int_equal(zp_dataset_create(&dc, &r->ds), ZP_OK);
    const char *globs[3] = {"web-*.jsonl", "code-*.jsonl", "books-*.jsonl"};
    for (int i = 0; i < 3; i++) {
        char *g = zpt_path(g_spell ? g_spell : g_dir, globs[i]);
        assert_int_equal(zp_dataset_add(r->ds, g), ZP_OK);
        free(g);
    }
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.seed = s->seed;
    wc.rank = s->rank;
    wc.world_size = s->world;
    wc.shuffle_block_shards = 2;
    wc.parts = g_parts;
    wc.n_parts = 3;
    wc.epoch_samples = g_epoch_draws;
    wc.phases = g_phases;
    wc.n_phases = g_n_phases;
    assert_int_equal(zp_worksource_create(r->ds, &wc, &r->ws), ZP_OK);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = s->threads;
    pc.epochs = s->epochs;
    pc.chunk_samples = s->chunk;
    pc.prefetch_batches = s->prefetch;
    pc.microbatch_size = 4;
    assert_int_equal(zp_pipeline_create(r->ws, &pc, &r->p), ZP_OK);
    if (s->mode != ZP_PACK_RECORDS) {
        assert_int_equal(zp_pipeline_tokenize(r->p, "gpt2", "text", 2), ZP_OK);
        if (s->mode == ZP_PACK_BESTFIT && s->window)
            assert_int_equal(zp_pipeline_pack_bestfit(r->p, s->seq_len, s->window), ZP_OK);
        else
            assert_int_equal(zp_pipeline_pack(r->p, s->mode, s->seq_len), ZP_OK);
        if (s->masking)
            assert_int_equal(zp_pipeline_doc_masking(r->p, s->masking, s->positions), ZP_OK);
        if (g_balance)
            assert_int_equal(zp_pipeline_balance(r->p, g_balance), ZP_OK);
    }
}

static void run_close(run_t *r)
{
    zp_pipeline_destroy(r->p);
    zp_worksource_destroy(r->ws);
    zp_dataset_destroy(r->ds);
    memset(r, 0, sizeof *r);
}

/* A batch's bytes, with its index, as one hash. */
static uint64_t batch_hash(const zp_batch *b)
{
    XXH64_state_t *h = XXH64_createState();
    XXH64_reset(h, 0);
    XXH64_update(h, &b->index, sizeof b->index);
    XXH64_update(h, &b->rows, sizeof b->rows);
    if (b->mode == ZP_PACK_RECORDS) {
        XXH64_update(h, b->data, b->offsets[b->rows]);
        XXH64_update(h, b->offsets, (b->rows + 1) * sizeof *b->offsets);
    } else {
        size_t n = b->rows * b->cols;
        XXH64_update(h, b->tokens, n * sizeof *b->tokens);
        XXH64_update(h, b->loss_mask, n);
        XXH64_update(h, b->segment_ids, n * sizeof *b->segment_ids);
        uint64_t d = zp_batch_digest(b); /* with the document-masking outputs */
        XXH64_update(h, &d, sizeof d);
    }
    for (size_t i = 0; i < b->n_samples; i++) {
        XXH64_update(h, &b->samples[i].global_id, sizeof b->samples[i].global_id);
        XXH64_update(h, &b->samples[i].pass, sizeof b->samples[i].pass);
    }
    uint64_t v = XXH64_digest(h);
    XXH64_freeState(h);
    return v;
}

/* Save before every batch, then restore each state in a fresh pipeline
 * with other speed settings and compare the rest. */
static void checkpoint_every_batch(const setup_t *ref_setup, int stride)
{
    run_t r;
    run_open(&r, ref_setup);
    uint64_t *hash = calloc(NB, sizeof *hash);
    char **states = calloc(NB, sizeof *states);
    int epochs_seen = 0;
    for (int i = 0; i < NB; i++) {
        assert_int_equal(zp_pipeline_state_save(r.p, &states[i], NULL), ZP_OK);
        const zp_batch *b;
        zp_status st = zp_pipeline_next(r.p, &b);
        if (st != ZP_OK)
            fail_msg("batch %d: %s", i, zp_pipeline_errmsg(r.p));
        assert_int_equal(b->index, (uint64_t)i);
        hash[i] = batch_hash(b);
        epochs_seen = (int)b->epoch;
    }
    assert_true(epochs_seen >= 1); /* the run crossed an epoch boundary */
    run_close(&r);

    setup_t other = *ref_setup;
    other.threads = ref_setup->threads == 1 ? 3 : 1;
    other.chunk = 7;
    other.prefetch = 5;
    for (int i = 0; i < NB; i += stride) {
        run_open(&r, &other);
        zp_status st = zp_pipeline_state_restore(r.p, states[i], strlen(states[i]));
        if (st != ZP_OK)
            fail_msg("restore state %d: %s", i, zp_pipeline_errmsg(r.p));
        for (int k = i; k < NB; k++) {
            const zp_batch *b;
            st = zp_pipeline_next(r.p, &b);
            if (st != ZP_OK)
                fail_msg("restored at %d: batch %d: %s", i, k, zp_pipeline_errmsg(r.p));
            if (b->index != (uint64_t)k || batch_hash(b) != hash[k])
                fail_msg("restored at batch %d: batch %d differs (index %llu)", i, k,
                         (unsigned long long)b->index);
        }
        run_close(&r);
    }
    for (int i = 0; i < NB; i++)
        free(states[i]);
    free(states);
    free(hash);
}

static void test_concat_every_batch(void **state)
{
    (void)state;
    setup_t s = {ZP_PACK_CONCAT, 2, 64, 2, 0, 1, 5, 32, 0, 0, ZP_POSITIONS_RESTART, 0};
    g_epoch_draws = 300; /* 500 batches of long documents cross an epoch */
    checkpoint_every_batch(&s, g_stride);
    g_epoch_draws = 1200;
}

/* Document masking with continued positions: a restored stream's first
 * row continues its document's position from the saved carry (issue 22). */
static void test_concat_masking_every_batch(void **state)
{
    (void)state;
    setup_t s = {ZP_PACK_CONCAT, 2, 64, 2, 0, 1, 5, 32, 0,
                 ZP_OUT_POSITION_IDS | ZP_OUT_CU_SEQLENS | ZP_OUT_DOC_COUNTS,
                 ZP_POSITIONS_CONTINUE, 0};
    g_epoch_draws = 300;
    checkpoint_every_batch(&s, g_stride * 5);
    g_epoch_draws = 1200;
}

static void test_records_every_batch(void **state)
{
    (void)state;
    g_epoch_draws = 1200;
    setup_t s = {ZP_PACK_RECORDS, 2, 64, 2, 0, 1, 6, 0, 0, 0, ZP_POSITIONS_RESTART, 0};
    checkpoint_every_batch(&s, g_stride * 7);
}

static void test_pad_every_batch(void **state)
{
    (void)state;
    setup_t s = {ZP_PACK_PAD, 2, 64, 2, 0, 1, 7, 24, 0, 0, ZP_POSITIONS_RESTART, 0};
    checkpoint_every_batch(&s, g_stride * 7);
}

static uint64_t draw_key(const zp_sample *s) { return s->global_id * 4096 + s->pass; }

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Best-fit packing: a state saved before every batch (most of them inside
 * a window, some rows of it delivered) continues byte for byte, with
 * other threads and chunk sizes; continued positions too (issue 22). */
static void test_bestfit_every_batch(void **state)
{
    (void)state;
    setup_t s = {ZP_PACK_BESTFIT, 2, 64, 2, 0, 1, 5, 48, 0,
                 ZP_OUT_POSITION_IDS | ZP_OUT_CU_SEQLENS | ZP_OUT_DOC_COUNTS,
                 ZP_POSITIONS_CONTINUE, 37};
    g_epoch_draws = 300;
    checkpoint_every_batch(&s, g_stride * 3);
    s.window = 0; /* the default window (256) */
    s.masking = 0;
    checkpoint_every_batch(&s, g_stride * 11);
    g_epoch_draws = 1200;
}

/* What one epoch delivers: the within-document token pairs (input, target
 * in one segment, the input not EOT) as sorted keys, the documents listed,
 * and the counts. */
typedef struct epoch_t {
    uint64_t *pairs, *docs;
    size_t n_pairs, n_docs;
    zp_pipeline_counts c;
    size_t rows_cut; /* rows whose first segment does not start a document */
} epoch_t;

static void one_epoch(const setup_t *s, epoch_t *o)
{
    run_t r;
    run_open(&r, s);
    int32_t eot = zp_pipeline_eot(r.p);
    size_t cap = 1 << 20;
    memset(o, 0, sizeof *o);
    o->pairs = malloc(cap * sizeof *o->pairs);
    o->docs = malloc(4096 * sizeof *o->docs);
    const zp_batch *b;
    zp_status st;
    while ((st = zp_pipeline_next(r.p, &b)) == ZP_OK) {
        for (size_t i = 0; i < b->n_samples; i++)
            o->docs[o->n_docs++] = draw_key(&b->samples[i]);
        for (size_t row = 0; row < b->rows; row++) {
            const int32_t *t = b->tokens + row * b->cols;
            const int32_t *sg = b->segment_ids + row * b->cols;
            for (size_t c = 0; c + 1 < b->cols; c++)
                if (sg[c] >= 0 && sg[c] == sg[c + 1] && t[c] != eot) {
                    if (o->n_pairs == cap)
                        o->pairs = realloc(o->pairs, (cap *= 2) * sizeof *o->pairs);
                    o->pairs[o->n_pairs++] = (uint64_t)(uint32_t)t[c] << 32 | (uint32_t)t[c + 1];
                }
        }
    }
    assert_int_equal(st, ZP_END);
    zp_pipeline_get_counts(r.p, &o->c);
    run_close(&r);
    qsort(o->pairs, o->n_pairs, sizeof *o->pairs, cmp_u64);
    qsort(o->docs, o->n_docs, sizeof *o->docs, cmp_u64);
}

static void epoch_free(epoch_t *e)
{
    free(e->pairs);
    free(e->docs);
}

/* Best-fit packing delivers every token of every document once an epoch:
 * the same documents and the same within-document token pairs as concat
 * (each once), the same token count; documents of up to seq_len + 1 tokens
 * are never cut (the cut ones are exactly those longer, as pad mode with
 * the same rows truncates); and any window gives the same. */
static void test_bestfit_exactly_once(void **state)
{
    (void)state;
    g_epoch_draws = 300;
    setup_t s = {ZP_PACK_CONCAT, 2, 64, 2, 0, 1, 5, 40, 1, 0, ZP_POSITIONS_RESTART, 0};
    epoch_t cat, bf, bf1, pad;
    one_epoch(&s, &cat);
    s.mode = ZP_PACK_PAD;
    one_epoch(&s, &pad);
    s.mode = ZP_PACK_BESTFIT;
    s.window = 50;
    one_epoch(&s, &bf);
    s.window = 1;
    s.threads = 3;
    one_epoch(&s, &bf1);
    const epoch_t *all[2] = {&bf, &bf1};
    for (int k = 0; k < 2; k++) {
        const epoch_t *e = all[k];
        assert_int_equal(e->n_docs, cat.n_docs);
        assert_memory_equal(e->docs, cat.docs, cat.n_docs * sizeof *cat.docs);
        assert_int_equal(e->c.tokens, cat.c.tokens);
        assert_int_equal(e->n_pairs, cat.n_pairs);
        assert_memory_equal(e->pairs, cat.pairs, cat.n_pairs * sizeof *cat.pairs);
        /* cut: the documents pad mode truncates (longer than a row) */
        assert_int_equal(e->c.cut_documents, pad.c.cut_documents);
        assert_int_equal(e->c.truncated_tokens, 0);
    }
    assert_true(pad.c.cut_documents > 0);
    assert_true(cat.c.cut_documents > bf.c.cut_documents);
    /* a window of one document pads more than a window of 50 */
    assert_true(bf1.c.pad_tokens > bf.c.pad_tokens);
    assert_true(bf.c.batches < bf1.c.batches);
    epoch_free(&cat);
    epoch_free(&pad);
    epoch_free(&bf);
    epoch_free(&bf1);
    g_epoch_draws = 1200;
}

/* A state from other settings is refused, naming what differs. */
static void test_other_settings_refused(void **state)
{
    (void)state;
    setup_t s = {ZP_PACK_CONCAT, 1, 64, 2, 0, 1, 5, 32, 0, 0, ZP_POSITIONS_RESTART, 0};
    run_t r;
    run_open(&r, &s);
    const zp_batch *b;
    for (int i = 0; i < 3; i++)
        assert_int_equal(zp_pipeline_next(r.p, &b), ZP_OK);
    char *json;
    assert_int_equal(zp_pipeline_state_save(r.p, &json, NULL), ZP_OK);
    run_close(&r);
    s.seq_len = 48;
    run_open(&r, &s);
    assert_int_equal(zp_pipeline_state_restore(r.p, json, strlen(json)), ZP_ERR_MISMATCH);
    assert_non_null(strstr(zp_pipeline_errmsg(r.p), "seq_len"));
    run_close(&r);
    s.seq_len = 32;
    s.seed = 6;
    run_open(&r, &s);
    assert_int_equal(zp_pipeline_state_restore(r.p, json, strlen(json)), ZP_ERR_MISMATCH);
    assert_non_null(strstr(zp_pipeline_errmsg(r.p), "seed"));
    run_close(&r);
    s.seed = 5;
    run_open(&r, &s);
    assert_int_equal(zp_pipeline_state_restore(r.p, "{\"version\": 1}", 14), ZP_ERR_FORMAT);
    assert_int_equal(zp_pipeline_state_restore(r.p, json, strlen(json)), ZP_OK);
    assert_int_equal(zp_pipeline_next(r.p, &b), ZP_OK);
    assert_int_equal(b->index, 3);
    assert_int_equal(zp_pipeline_state_restore(r.p, json, strlen(json)), ZP_ERR_STATE);
    run_close(&r);
    free(json);
}

/* The same files spelled another way (dir/../dir) resume a state (issue
 * 20 item 7: the fingerprint hashed the names as spelled); a state of an
 * earlier version, which holds that fingerprint, resumes with the spelling
 * it was saved with, and another spelling is refused saying why. */
static void test_other_spelling(void **state)
{
    (void)state;
    setup_t s = {ZP_PACK_RECORDS, 1, 64, 2, 0, 1, 5, 0, 0, 0, ZP_POSITIONS_RESTART, 0};
    run_t r;
    run_open(&r, &s);
    const zp_batch *b;
    for (int i = 0; i < 3; i++)
        assert_int_equal(zp_pipeline_next(r.p, &b), ZP_OK);
    char *json;
    assert_int_equal(zp_pipeline_state_save(r.p, &json, NULL), ZP_OK);
    assert_int_equal(zp_pipeline_next(r.p, &b), ZP_OK);
    uint64_t next = batch_hash(b);
    char fp[32], spelled[32];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)zp_dataset_fingerprint(r.ds));
    snprintf(spelled, sizeof spelled, "%016llx",
             (unsigned long long)zpi_dataset_fingerprint_spelled(r.ds));
    assert_string_not_equal(fp, spelled);
    run_close(&r);
    /* the state of an earlier version: its fingerprint of the names as
     * spelled (and the settings_hash of those settings) */
    zpi_state ost;
    zpi_err e = {0};
    assert_int_equal(zpi_state_parse(json, strlen(json), &ost, &e), ZP_OK);
    char *at = strstr(ost.settings, fp);
    assert_non_null(at);
    memcpy(at, spelled, 16);
    char *old;
    assert_int_equal(zpi_state_render(&ost, &old, NULL, &e), ZP_OK);
    zpi_state_clear(&ost);

    const char *base = strrchr(g_dir, '/') + 1;
    size_t cap = 2 * strlen(g_dir) + 8;
    g_spell = malloc(cap);
    snprintf(g_spell, cap, "%s/../%s", g_dir, base);
    run_open(&r, &s);
    zp_status st = zp_pipeline_state_restore(r.p, json, strlen(json));
    if (st != ZP_OK)
        fail_msg("restore with '%s': %s", g_spell, zp_pipeline_errmsg(r.p));
    assert_int_equal(zp_pipeline_next(r.p, &b), ZP_OK);
    assert_int_equal(b->index, 3);
    assert_true(batch_hash(b) == next);
    run_close(&r);
    run_open(&r, &s);
    assert_int_equal(zp_pipeline_state_restore(r.p, old, strlen(old)), ZP_ERR_MISMATCH);
    assert_non_null(strstr(zp_pipeline_errmsg(r.p), "paths as they were spelled then"));
    run_close(&r);
    free(g_spell);
    g_spell = NULL;

    run_open(&r, &s);
    st = zp_pipeline_state_restore(r.p, old, strlen(old));
    if (st != ZP_OK)
        fail_msg("restore an earlier version's state: %s", zp_pipeline_errmsg(r.p));
    assert_int_equal(zp_pipeline_next(r.p, &b), ZP_OK);
    assert_true(batch_hash(b) == next);
    run_close(&r);
    free(old);
    free(json);
}

/* Skipping batches 120..129 from a state at 100: the others are the same
 * bytes with the same indices; the state names the range. */
static void test_skip_range(void **state)
{
    (void)state;
    setup_t s = {ZP_PACK_CONCAT, 2, 64, 2, 0, 1, 5, 32, 0, 0, ZP_POSITIONS_RESTART, 0};
    run_t r;
    run_open(&r, &s);
    uint64_t hash[200];
    char *at100 = NULL;
    for (int i = 0; i < 200; i++) {
        if (i == 100)
            assert_int_equal(zp_pipeline_state_save(r.p, &at100, NULL), ZP_OK);
        const zp_batch *b;
        assert_int_equal(zp_pipeline_next(r.p, &b), ZP_OK);
        hash[i] = batch_hash(b);
    }
    run_close(&r);
    run_open(&r, &s);
    assert_int_equal(zp_pipeline_skip_batches(r.p, 120, 129), ZP_OK);
    assert_int_equal(zp_pipeline_skip_batches(r.p, 125, 140), ZP_ERR_INVALID);
    assert_int_equal(zp_pipeline_skip_batches(r.p, 9, 8), ZP_ERR_INVALID);
    assert_int_equal(zp_pipeline_state_restore(r.p, at100, strlen(at100)), ZP_OK);
    zp_pipeline_counts c0;
    zp_pipeline_get_counts(r.p, &c0);
    for (int i = 100; i < 200; i++) {
        if (i >= 120 && i <= 129)
            continue;
        const zp_batch *b;
        assert_int_equal(zp_pipeline_next(r.p, &b), ZP_OK);
        assert_int_equal(b->index, (uint64_t)i);
        assert_true(batch_hash(b) == hash[i]);
    }
    zp_pipeline_counts c1;
    zp_pipeline_get_counts(r.p, &c1);
    assert_int_equal(c1.batches - c0.batches, 90);
    char *json;
    assert_int_equal(zp_pipeline_state_save(r.p, &json, NULL), ZP_OK);
    assert_non_null(strstr(json, "120"));
    assert_non_null(strstr(json, "129"));
    char *text = NULL, err[256];
    assert_int_equal(zp_state_describe(json, strlen(json), &text, err, sizeof err), ZP_OK);
    assert_non_null(strstr(text, "skipped batches 120..129"));
    assert_non_null(strstr(text, "web pass ")); /* each part's pass */
    free(text);
    run_close(&r);
    /* a range already delivered before the state is refused */
    run_open(&r, &s);
    assert_int_equal(zp_pipeline_skip_batches(r.p, 50, 60), ZP_OK);
    assert_int_equal(zp_pipeline_state_restore(r.p, at100, strlen(at100)), ZP_ERR_INVALID);
    run_close(&r);
    free(json);
    free(at100);
}

/* Draw identity within an epoch: (global id, pass). */

/* 4 ranks deliver different amounts of epoch 0, save; 3 ranks restore the
 * job state and finish the epoch; every draw of the epoch is delivered
 * once (padding aside). */
static void elastic(zp_pack_mode mode)
{
    const uint32_t W = 4, W2 = 3;
    g_epoch_draws = 1200;
    uint64_t *got = calloc(4000, sizeof *got);
    size_t n_got = 0;
    char *states[4];
    size_t lens[4];
    for (uint32_t r = 0; r < W; r++) {
        setup_t s = {mode, 2, 16, 2, r, W, 9, 32, 1, 0, ZP_POSITIONS_RESTART, 0};
        run_t run;
        run_open(&run, &s);
        for (uint32_t i = 0; i < 10 + 3 * r; i++) {
            const zp_batch *b;
            assert_int_equal(zp_pipeline_next(run.p, &b), ZP_OK);
            for (size_t k = 0; k < b->n_samples; k++)
                if (!b->samples[k].padded)
                    got[n_got++] = draw_key(&b->samples[k]);
        }
        assert_int_equal(zp_pipeline_state_save(run.p, &states[r], &lens[r]), ZP_OK);
        run_close(&run);
    }
    /* the ranks must agree on the next batch: they did not (10, 13, ...) */
    char *job = NULL, err[512];
    assert_int_equal(zp_state_merge((const char *const *)states, lens, W, &job, NULL, err,
                                    sizeof err),
                     ZP_ERR_MISMATCH);
    for (uint32_t r = 0; r < W; r++)
        free(states[r]);
    /* again, in lock step: 12 batches each */
    n_got = 0;
    for (uint32_t r = 0; r < W; r++) {
        setup_t s = {mode, 2, 16, 2, r, W, 9, 32, 1, 0, ZP_POSITIONS_RESTART, 0};
        run_t run;
        run_open(&run, &s);
        for (int i = 0; i < 12; i++) {
            const zp_batch *b;
            assert_int_equal(zp_pipeline_next(run.p, &b), ZP_OK);
            for (size_t k = 0; k < b->n_samples; k++)
                if (!b->samples[k].padded)
                    got[n_got++] = draw_key(&b->samples[k]);
        }
        assert_int_equal(zp_pipeline_state_save(run.p, &states[r], &lens[r]), ZP_OK);
        run_close(&run);
    }
    if (zp_state_merge((const char *const *)states, lens, W, &job, NULL, err, sizeof err) !=
        ZP_OK)
        fail_msg("merge: %s", err);
    for (uint32_t r = 0; r < W; r++)
        free(states[r]);
    /* a rank's own state does not restore on another world size */
    for (uint32_t r = 0; r < W2; r++) {
        setup_t s = {mode, 1, 32, 1, r, W2, 9, 32, 1, 0, ZP_POSITIONS_RESTART, 0};
        run_t run;
        run_open(&run, &s);
        zp_status st = zp_pipeline_state_restore(run.p, job, strlen(job));
        if (st != ZP_OK)
            fail_msg("rank %u of %u: %s", r, W2, zp_pipeline_errmsg(run.p));
        const zp_batch *b;
        while ((st = zp_pipeline_next(run.p, &b)) == ZP_OK)
            for (size_t k = 0; k < b->n_samples; k++) {
                assert_int_equal(b->samples[k].epoch, 0);
                if (!b->samples[k].padded)
                    got[n_got++] = draw_key(&b->samples[k]);
            }
        assert_int_equal(st, ZP_END);
        run_close(&run);
    }
    free(job);
    /* what the epoch holds: its 1200 draws */
    setup_t s = {ZP_PACK_RECORDS, 1, 64, 2, 0, 1, 9, 32, 1, 0, ZP_POSITIONS_RESTART, 0};
    run_t ref;
    run_open(&ref, &s);
    uint64_t want[1200];
    for (uint64_t g = 0; g < 1200; g++) {
        zp_sample smp;
        assert_int_equal(zp_worksource_sample(ref.ws, 0, g, &smp), ZP_OK);
        want[g] = draw_key(&smp);
    }
    run_close(&ref);
    qsort(want, 1200, sizeof *want, cmp_u64);
    qsort(got, n_got, sizeof *got, cmp_u64);
    if (n_got != 1200)
        fail_msg("%zu draws delivered over the epoch: want 1200 exactly once", n_got);
    for (size_t i = 0; i < 1200; i++)
        assert_true(got[i] == want[i]);
    free(got);
}

static void test_elastic_records(void **state)
{
    (void)state;
    elastic(ZP_PACK_RECORDS);
}

static void test_elastic_concat(void **state)
{
    (void)state;
    elastic(ZP_PACK_CONCAT);
}

static void test_elastic_bestfit(void **state)
{
    (void)state;
    elastic(ZP_PACK_BESTFIT);
}

/* Collects a batch's within-document token pairs and listed documents
 * (as one_epoch). */
static void collect(epoch_t *o, const zp_batch *b, int32_t eot, size_t *cap)
{
    for (size_t i = 0; i < b->n_samples; i++)
        o->docs[o->n_docs++] = draw_key(&b->samples[i]);
    for (size_t row = 0; row < b->rows; row++) {
        const int32_t *t = b->tokens + row * b->cols;
        const int32_t *sg = b->segment_ids + row * b->cols;
        for (size_t c = 0; c + 1 < b->cols; c++)
            if (sg[c] >= 0 && sg[c] == sg[c + 1] && t[c] != eot) {
                if (o->n_pairs == *cap)
                    o->pairs = realloc(o->pairs, (*cap *= 2) * sizeof *o->pairs);
                o->pairs[o->n_pairs++] = (uint64_t)(uint32_t)t[c] << 32 | (uint32_t)t[c + 1];
            }
    }
}

/* Best-fit packing under an elastic resume: 4 ranks stop inside their
 * windows (some documents of a window delivered whole, some long ones in
 * part), the job state restores on 1 rank, and the epoch's tokens are
 * delivered exactly once: the same documents and within-document token
 * pairs as one rank's uninterrupted concat epoch. */
static void test_bestfit_elastic_tokens(void **state)
{
    (void)state;
    g_epoch_draws = 1200;
    const uint32_t W = 4;
    setup_t ref = {ZP_PACK_CONCAT, 2, 64, 2, 0, 1, 9, 32, 1, 0, ZP_POSITIONS_RESTART, 0};
    epoch_t want, got;
    one_epoch(&ref, &want);
    size_t cap = 1 << 20;
    memset(&got, 0, sizeof got);
    got.pairs = malloc(cap * sizeof *got.pairs);
    got.docs = malloc(4096 * sizeof *got.docs);
    char *states[4];
    size_t lens[4];
    int mid = 0, part = 0;
    for (uint32_t r = 0; r < W; r++) {
        setup_t s = {ZP_PACK_BESTFIT, 2, 16, 2, r, W, 9, 32, 1, 0, ZP_POSITIONS_RESTART, 37};
        run_t run;
        run_open(&run, &s);
        int32_t eot = zp_pipeline_eot(run.p);
        for (int i = 0; i < 15; i++) {
            const zp_batch *b;
            assert_int_equal(zp_pipeline_next(run.p, &b), ZP_OK);
            collect(&got, b, eot, &cap);
        }
        assert_int_equal(zp_pipeline_state_save(run.p, &states[r], &lens[r]), ZP_OK);
        mid += strstr(states[r], "\"window_rows\"") != NULL;
        part += strstr(states[r], "\"window_done\": [[") != NULL;
        run_close(&run);
    }
    assert_true(mid >= 2); /* most ranks stopped inside a window */
    assert_true(part >= 2);
    char *job = NULL, err[512];
    if (zp_state_merge((const char *const *)states, lens, W, &job, NULL, err, sizeof err) != ZP_OK)
        fail_msg("merge: %s", err);
    for (uint32_t r = 0; r < W; r++)
        free(states[r]);
    setup_t s = {ZP_PACK_BESTFIT, 3, 32, 1, 0, 1, 9, 32, 1, 0, ZP_POSITIONS_RESTART, 37};
    run_t run;
    run_open(&run, &s);
    int32_t eot = zp_pipeline_eot(run.p);
    zp_status st = zp_pipeline_state_restore(run.p, job, strlen(job));
    if (st != ZP_OK)
        fail_msg("restore on 1 rank: %s", zp_pipeline_errmsg(run.p));
    const zp_batch *b;
    while ((st = zp_pipeline_next(run.p, &b)) == ZP_OK) {
        assert_int_equal(b->epoch, 0);
        collect(&got, b, eot, &cap);
    }
    assert_int_equal(st, ZP_END);
    run_close(&run);
    free(job);
    qsort(got.pairs, got.n_pairs, sizeof *got.pairs, cmp_u64);
    qsort(got.docs, got.n_docs, sizeof *got.docs, cmp_u64);
    assert_int_equal(got.n_docs, want.n_docs);
    assert_memory_equal(got.docs, want.docs, want.n_docs * sizeof *want.docs);
    assert_int_equal(got.n_pairs, want.n_pairs);
    assert_memory_equal(got.pairs, want.pairs, want.n_pairs * sizeof *want.pairs);
    epoch_free(&want);
    epoch_free(&got);
}

/* ------------------------------------------------------------ weight schedules */

static const double g_w1[3] = {0.1, 0.3, 0.6}, g_w2[3] = {0.6, 0.2, 0.2};

/* A schedule with a step (draw 120) and a linear ramp (to draw 320, steps
 * of 40), crossing an epoch (300 draws): every state restored gives the
 * same bytes, before, at and after the change points. Fails without
 * schedules (the stream would follow 0.5/0.3/0.2 throughout: checked). */
static void test_schedule_every_batch(void **state)
{
    (void)state;
    zp_mix_phase ph[2] = {{120, g_w1, 0}, {320, g_w2, 40}};
    g_phases = ph;
    g_n_phases = 2;
    g_epoch_draws = 300;
    setup_t s = {ZP_PACK_CONCAT, 2, 64, 2, 0, 1, 5, 32, 0, 0, ZP_POSITIONS_RESTART, 0};
    checkpoint_every_batch(&s, g_stride * 3);
    /* the stream did change weights: phase 0, then the ramp from 0.1/0.3/0.6
     * (draw 120) to 0.6/0.2/0.2 (draw 320) in 5 steps, then 0.6/0.2/0.2 */
    run_t r;
    run_open(&r, &s);
    assert_int_equal(zp_worksource_num_phases(r.ws), 1 + 5 + 1);
    uint64_t c[3] = {0, 0, 0};
    for (uint64_t g = 120; g < 160; g++) {
        zp_sample smp;
        assert_int_equal(zp_worksource_sample(r.ws, 0, g, &smp), ZP_OK);
        c[smp.part]++;
    }
    /* books at 0.6 + (0.2 - 0.6) x 0.1 = 0.56 (the middle of [120, 160)) */
    assert_true(zp_worksource_phase_weight(r.ws, 1, 2) == 0.56);
    assert_true(c[2] == 22 || c[2] == 23);
    run_close(&r);
    g_phases = NULL;
    g_n_phases = 0;
    g_epoch_draws = 1200;
}

/* Every sample delivered, as (part, pass, global id), for the check that
 * none is repeated or left out. */
typedef struct got_t {
    uint64_t *key;
    size_t n, cap;
} got_t;

static void got_batch(got_t *g, const zp_batch *b)
{
    for (size_t k = 0; k < b->n_samples; k++) {
        if (g->n == g->cap) {
            g->cap = g->cap ? 2 * g->cap : 1024;
            g->key = realloc(g->key, g->cap * sizeof *g->key);
        }
        const zp_sample *s = &b->samples[k];
        g->key[g->n++] = ((uint64_t)s->part << 56) | (s->pass << 32) | s->global_id;
    }
}

/* Megatron-LM #457: a run resumed with new weights. Run 1 (0.5/0.3/0.2
 * with a step at draw 600) delivers 70 batches of 4 records and saves; run
 * 2 resumes that state with another schedule (0.1/0.3/0.6 from draw 100,
 * 0.6/0.2/0.2 from draw 500). Over both runs: no sample repeated or left out
 * (the delivered draws of each part are its draws 0 .. count - 1: the
 * same samples as a worksource configured with the schedule that the run
 * followed, the old phases before the cut and the new ones after), the
 * part counts of the state are those draws, the new weights hold from the
 * cut (the resumed position, draw 280) and a state saved after the change
 * resumes byte-identically (the schedule it followed is in the state). */
static void test_schedule_changed_on_resume(void **state)
{
    (void)state;
    const double wa1[3] = {0.2, 0.2, 0.6};
    zp_mix_phase pa[1] = {{600, wa1, 0}};
    zp_mix_phase pb[2] = {{100, g_w1, 0}, {500, g_w2, 0}};
    g_epoch_draws = 200;
    setup_t s = {ZP_PACK_RECORDS, 1, 16, 2, 0, 1, 13, 0, 0, 0, ZP_POSITIONS_RESTART, 0};
    got_t got = {0};
    run_t r;
    g_phases = pa;
    g_n_phases = 1;
    run_open(&r, &s);
    const zp_batch *b;
    for (int i = 0; i < 70; i++) {
        assert_int_equal(zp_pipeline_next(r.p, &b), ZP_OK);
        got_batch(&got, b);
    }
    char *st1;
    assert_int_equal(zp_pipeline_state_save(r.p, &st1, NULL), ZP_OK);
    run_close(&r);
    assert_non_null(strstr(st1, "\"schedule\": {\"since\": 0"));

    g_phases = pb;
    g_n_phases = 2;
    run_open(&r, &s);
    if (zp_pipeline_state_restore(r.p, st1, strlen(st1)) != ZP_OK)
        fail_msg("restore with a new schedule: %s", zp_pipeline_errmsg(r.p));
    /* the schedule followed: the old one before draw 280, the new one from there */
    assert_int_equal(zp_worksource_num_phases(r.ws), 3);
    assert_int_equal(zp_worksource_phase_start(r.ws, 1), 280);
    assert_true(zp_worksource_phase_weight(r.ws, 0, 0) == 0.5);
    assert_true(zp_worksource_phase_weight(r.ws, 1, 2) == 0.6);
    assert_int_equal(zp_worksource_phase_start(r.ws, 2), 500);
    uint64_t hash[60];
    char *st2 = NULL;
    for (int i = 0; i < 120; i++) {
        if (i == 40)
            assert_int_equal(zp_pipeline_state_save(r.p, &st2, NULL), ZP_OK);
        assert_int_equal(zp_pipeline_next(r.p, &b), ZP_OK);
        if (i >= 40 && i < 100)
            hash[i - 40] = batch_hash(b);
        got_batch(&got, b);
    }
    uint64_t part[3];
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(zp_pipeline_part_counts(r.p, i, &part[i], NULL), ZP_OK);
    run_close(&r);
    assert_non_null(strstr(st2, "\"schedule\": {\"since\": 280"));

    /* the reference: the schedule that was followed, as a configuration */
    const double w0[3] = {0.5, 0.3, 0.2};
    zp_mix_phase ref_ph[2] = {{280, g_w1, 0}, {500, g_w2, 0}};
    (void)w0;
    g_phases = ref_ph;
    g_n_phases = 2;
    run_open(&r, &s);
    const uint64_t total = 190 * 4;
    uint64_t *want = calloc(total, sizeof *want);
    uint64_t cnt[3] = {0, 0, 0};
    for (uint64_t G = 0; G < total; G++) {
        zp_sample smp;
        assert_int_equal(zp_worksource_sample(r.ws, (uint32_t)(G / 200), G % 200, &smp), ZP_OK);
        want[G] = ((uint64_t)smp.part << 56) | (smp.pass << 32) | smp.global_id;
        cnt[smp.part]++;
    }
    run_close(&r);
    assert_int_equal(got.n, total);
    qsort(got.key, got.n, sizeof *got.key, cmp_u64);
    qsort(want, total, sizeof *want, cmp_u64);
    for (size_t i = 0; i < total; i++) {
        if (i && got.key[i] == got.key[i - 1])
            fail_msg("part %llu pass %llu sample %llu delivered twice",
                     (unsigned long long)(got.key[i] >> 56),
                     (unsigned long long)(got.key[i] >> 32 & 0xffffff),
                     (unsigned long long)(got.key[i] & 0xffffffff));
        assert_true(got.key[i] == want[i]);
    }
    for (int i = 0; i < 3; i++)
        assert_int_equal(part[i], cnt[i]);
    /* from the cut: 0.1/0.3/0.6 of draws [280, 500) */
    assert_int_equal(cnt[2], 56 /* 0.2 x 280 */ + 132 /* 0.6 x 220 */ + 52 /* 0.2 x 260 */);

    /* a state saved after the change resumes exactly, with the new schedule */
    g_phases = pb;
    g_n_phases = 2;
    run_open(&r, &s);
    if (zp_pipeline_state_restore(r.p, st2, strlen(st2)) != ZP_OK)
        fail_msg("restore after the change: %s", zp_pipeline_errmsg(r.p));
    for (int i = 0; i < 60; i++) {
        assert_int_equal(zp_pipeline_next(r.p, &b), ZP_OK);
        if (batch_hash(b) != hash[i])
            fail_msg("resumed after the change: batch %d differs", 110 + i);
    }
    run_close(&r);
    /* ... and with yet another schedule, the phases before draw 440 stay */
    zp_mix_phase pc[1] = {{900, g_w1, 0}};
    g_phases = pc;
    g_n_phases = 1;
    run_open(&r, &s);
    assert_int_equal(zp_pipeline_state_restore(r.p, st2, strlen(st2)), ZP_OK);
    assert_int_equal(zp_worksource_num_phases(r.ws), 4);
    assert_int_equal(zp_worksource_phase_start(r.ws, 1), 280);
    assert_int_equal(zp_worksource_phase_start(r.ws, 2), 440);
    assert_true(zp_worksource_phase_weight(r.ws, 2, 0) == 0.5);
    assert_int_equal(zp_worksource_phase_start(r.ws, 3), 900);
    run_close(&r);
    g_phases = NULL;
    g_n_phases = 0;
    g_epoch_draws = 1200;
    free(want);
    free(got.key);
    free(st1);
    free(st2);
}

/* A state saved without a schedule (by a run of the parts' weights alone,
 * or by an earlier version) resumed with a schedule whose first change
 * lies ahead: the same batches as a run that had the schedule from the
 * start. */
static void test_schedule_added_on_resume(void **state)
{
    (void)state;
    zp_mix_phase pb[1] = {{500, g_w2, 0}};
    g_epoch_draws = 200;
    setup_t s = {ZP_PACK_RECORDS, 1, 16, 2, 0, 1, 17, 0, 0, 0, ZP_POSITIONS_RESTART, 0};
    run_t r;
    g_phases = pb;
    g_n_phases = 1;
    run_open(&r, &s);
    uint64_t hash[200];
    const zp_batch *b;
    for (int i = 0; i < 200; i++) {
        assert_int_equal(zp_pipeline_next(r.p, &b), ZP_OK);
        hash[i] = batch_hash(b);
    }
    run_close(&r);
    g_phases = NULL;
    g_n_phases = 0;
    run_open(&r, &s);
    for (int i = 0; i < 70; i++)
        assert_int_equal(zp_pipeline_next(r.p, &b), ZP_OK);
    char *st;
    assert_int_equal(zp_pipeline_state_save(r.p, &st, NULL), ZP_OK);
    run_close(&r);
    assert_null(strstr(st, "\"schedule\""));
    g_phases = pb;
    g_n_phases = 1;
    run_open(&r, &s);
    if (zp_pipeline_state_restore(r.p, st, strlen(st)) != ZP_OK)
        fail_msg("restore: %s", zp_pipeline_errmsg(r.p));
    assert_int_equal(zp_worksource_num_phases(r.ws), 2);
    for (int i = 70; i < 200; i++) {
        assert_int_equal(zp_pipeline_next(r.p, &b), ZP_OK);
        if (batch_hash(b) != hash[i])
            fail_msg("batch %d differs from the run with the schedule from the start", i);
    }
    run_close(&r);
    free(st);
    g_phases = NULL;
    g_n_phases = 0;
    g_epoch_draws = 1200;
}

/* Attention-cost balance (issue 22): a state saved before every batch,
 * most of them inside a balance window, continues byte for byte with
 * other threads and chunk sizes; concat with continued positions, and
 * best-fit, whose windows do not line up with the balance windows. */
static void test_balance_every_batch(void **state)
{
    (void)state;
    g_epoch_draws = 300;
    g_balance = 3;
    setup_t s = {ZP_PACK_CONCAT, 2, 64, 2, 0, 1, 5, 32, 0,
                 ZP_OUT_POSITION_IDS | ZP_OUT_CU_SEQLENS | ZP_OUT_DOC_COUNTS,
                 ZP_POSITIONS_CONTINUE, 0};
    checkpoint_every_batch(&s, g_stride * 2);
    g_balance = 5;
    setup_t bf = {ZP_PACK_BESTFIT, 2, 64, 2, 0, 1, 5, 48, 0, 0, ZP_POSITIONS_RESTART, 37};
    checkpoint_every_batch(&bf, g_stride * 3);
    g_balance = 0;
    g_epoch_draws = 1200;
}

/* One row's bytes as a key. */
static uint64_t row_key(const zp_batch *b, size_t r)
{
    XXH64_state_t *h = XXH64_createState();
    XXH64_reset(h, 0);
    XXH64_update(h, b->tokens + r * b->cols, b->cols * sizeof *b->tokens);
    XXH64_update(h, b->loss_mask + r * b->cols, b->cols);
    XXH64_update(h, b->segment_ids + r * b->cols, b->cols * sizeof *b->segment_ids);
    uint64_t v = XXH64_digest(h);
    XXH64_freeState(h);
    return v;
}

/* What a stream delivers, window by window of K batches: the sorted row
 * keys, the sorted documents, and the costliest batch's cost. */
typedef struct balwin_t {
    uint64_t rows[64], docs[512];
    size_t n_rows, n_docs;
    uint64_t max_cost, total;
    uint32_t epoch;
} balwin_t;

static size_t balance_windows(const setup_t *s, size_t K, balwin_t *w, size_t max_w,
                              zp_pipeline_counts *counts)
{
    run_t r;
    run_open(&r, s);
    size_t n = 0, in = 0;
    uint64_t cost[16];
    const zp_batch *b;
    zp_status st;
    uint64_t want_index = 0;
    while ((st = zp_pipeline_next(r.p, &b)) == ZP_OK) {
        assert_int_equal(b->index, want_index++);
        assert_true(b->rows <= 16);
        if (in == 0) {
            assert_true(n < max_w);
            memset(&w[n], 0, sizeof w[n]);
            w[n].epoch = b->epoch;
        }
        balwin_t *x = &w[n];
        zp_batch_row_costs(b, cost);
        uint64_t sum = 0;
        size_t filled = 0;
        for (size_t i = 0; i < b->rows; i++) {
            sum += cost[i];
            x->rows[x->n_rows++] = row_key(b, i);
            int real = 0;
            for (size_t c = 0; c < b->cols; c++)
                real |= b->loss_mask[i * b->cols + c];
            /* the rows with a real token come first */
            if (real)
                assert_int_equal(filled++, i);
        }
        assert_int_equal(filled, b->rows_filled);
        for (size_t i = 0; i < b->n_samples; i++) {
            /* each listed document starts in its row: a segment begins there
             * (or the row's first token is its BOS/first token) */
            assert_true(b->sample_rows[i] < b->rows);
            x->docs[x->n_docs++] = draw_key(&b->samples[i]);
            if (i > 0 && s->mode != ZP_PACK_BESTFIT) /* stream order (best-fit: row order) */
                assert_true(b->samples[i].position > b->samples[i - 1].position ||
                            b->samples[i].epoch > b->samples[i - 1].epoch);
        }
        x->total += sum;
        if (sum > x->max_cost)
            x->max_cost = sum;
        if (++in == K || b->last_in_epoch) {
            qsort(x->rows, x->n_rows, sizeof *x->rows, cmp_u64);
            qsort(x->docs, x->n_docs, sizeof *x->docs, cmp_u64);
            n++;
            in = 0;
        }
    }
    assert_int_equal(st, ZP_END);
    assert_int_equal(in, 0);
    zp_pipeline_get_counts(r.p, counts);
    run_close(&r);
    return n;
}

/* Balanced windows hold exactly the rows and documents of the unbalanced
 * stream's windows (each row delivered once), none costlier at its top;
 * the counts agree; threads do not change it; a short last window at the
 * epoch's end; and the figures in the counts are the windows'. */
static void test_balance_exactly_once(void **state)
{
    (void)state;
    g_epoch_draws = 300;
    const size_t K = 4;
    enum { MAXW = 2048 };
    balwin_t *plain = calloc(MAXW, sizeof *plain), *bal = calloc(MAXW, sizeof *bal),
             *bal3 = calloc(MAXW, sizeof *bal3);
    zp_pack_mode modes[3] = {ZP_PACK_CONCAT, ZP_PACK_BESTFIT, ZP_PACK_PAD};
    for (int m = 0; m < 3; m++) {
        setup_t s = {modes[m], 2, 64, 2, 0, 1, 5, 64, 2, 0, ZP_POSITIONS_RESTART, 40};
        zp_pipeline_counts cp, cb, cb3;
        size_t np = balance_windows(&s, K, plain, MAXW, &cp);
        g_balance = K;
        size_t nb = balance_windows(&s, K, bal, MAXW, &cb);
        s.threads = 3;
        s.chunk = 5;
        size_t nb3 = balance_windows(&s, K, bal3, MAXW, &cb3);
        g_balance = 0;
        assert_int_equal(np, nb);
        assert_int_equal(nb, nb3);
        assert_true(nb >= 4);
        uint64_t peak_b = 0, peak_a = 0, total = 0;
        int lower = 0;
        for (size_t i = 0; i < nb; i++) {
            assert_int_equal(plain[i].n_rows, bal[i].n_rows);
            assert_memory_equal(plain[i].rows, bal[i].rows, bal[i].n_rows * sizeof(uint64_t));
            assert_int_equal(plain[i].n_docs, bal[i].n_docs);
            assert_memory_equal(plain[i].docs, bal[i].docs, bal[i].n_docs * sizeof(uint64_t));
            assert_int_equal(plain[i].total, bal[i].total);
            if (bal[i].max_cost > plain[i].max_cost)
                fail_msg("mode %d window %zu: costliest batch %llu after, %llu before", m, i,
                         (unsigned long long)bal[i].max_cost,
                         (unsigned long long)plain[i].max_cost);
            lower += bal[i].max_cost < plain[i].max_cost;
            assert_memory_equal(&bal[i], &bal3[i], sizeof bal[i]);
            size_t nbat = bal[i].n_rows / 4; /* microbatch 4 */
            peak_b += plain[i].max_cost * nbat;
            peak_a += bal[i].max_cost * nbat;
            total += bal[i].total;
        }
        assert_true(lower > 0);
        /* the epochs' last windows are short (the runs cross epochs) */
        assert_true(nb > cb.batches / K);
        cb.balance_windows = cb.attn_cost = cb.attn_peak_before = cb.attn_peak_after = 0;
        assert_memory_equal(&cp, &cb, sizeof cp);
        assert_int_equal(cb3.balance_windows, nb);
        assert_int_equal(cb3.attn_cost, total);
        assert_int_equal(cb3.attn_peak_before, peak_b);
        assert_int_equal(cb3.attn_peak_after, peak_a);
    }
    free(plain);
    free(bal);
    free(bal3);
    g_epoch_draws = 1200;
}

/* A job state saved inside a balance window resumes on its own world size
 * only; at a window boundary it re-splits. Record mode refuses balance. */
static void test_balance_elastic(void **state)
{
    (void)state;
    const uint32_t W = 2;
    g_epoch_draws = 300;
    g_balance = 3;
    for (int inside = 1; inside >= 0; inside--) {
        char *states[2];
        size_t lens[2];
        for (uint32_t r = 0; r < W; r++) {
            setup_t s = {ZP_PACK_CONCAT, 2, 16, 2, r, W, 9, 32, 2, 0, ZP_POSITIONS_RESTART, 0};
            run_t run;
            run_open(&run, &s);
            for (int i = 0; i < (inside ? 4 : 6); i++) {
                const zp_batch *b;
                assert_int_equal(zp_pipeline_next(run.p, &b), ZP_OK);
            }
            assert_int_equal(zp_pipeline_state_save(run.p, &states[r], &lens[r]), ZP_OK);
            assert_true((strstr(states[r], "\"balance_done\"") != NULL) == inside);
            run_close(&run);
        }
        char *job = NULL, err[512];
        if (zp_state_merge((const char *const *)states, lens, W, &job, NULL, err, sizeof err) !=
            ZP_OK)
            fail_msg("merge: %s", err);
        setup_t s = {ZP_PACK_CONCAT, 1, 32, 1, 0, 3, 9, 32, 2, 0, ZP_POSITIONS_RESTART, 0};
        run_t run;
        run_open(&run, &s);
        zp_status st = zp_pipeline_state_restore(run.p, job, strlen(job));
        if (inside) {
            assert_int_equal(st, ZP_ERR_INVALID);
            assert_non_null(strstr(zp_pipeline_errmsg(run.p), "inside an attention-balance window"));
        } else if (st != ZP_OK) {
            fail_msg("restore at a window boundary on 3 ranks: %s", zp_pipeline_errmsg(run.p));
        }
        run_close(&run);
        /* the same world size resumes it */
        setup_t s1 = {ZP_PACK_CONCAT, 1, 32, 1, 1, W, 9, 32, 2, 0, ZP_POSITIONS_RESTART, 0};
        run_open(&run, &s1);
        if (zp_pipeline_state_restore(run.p, job, strlen(job)) != ZP_OK)
            fail_msg("restore on %u ranks: %s", W, zp_pipeline_errmsg(run.p));
        const zp_batch *b;
        assert_int_equal(zp_pipeline_next(run.p, &b), ZP_OK);
        assert_int_equal(b->index, inside ? 4 : 6);
        run_close(&run);
        /* another balance window is refused, naming it */
        g_balance = 4;
        run_open(&run, &s1);
        assert_int_not_equal(zp_pipeline_state_restore(run.p, job, strlen(job)), ZP_OK);
        assert_non_null(strstr(zp_pipeline_errmsg(run.p), "balance"));
        run_close(&run);
        g_balance = 3;
        free(job);
        for (uint32_t r = 0; r < W; r++)
            free(states[r]);
    }
    g_balance = 0;
    setup_t rec = {ZP_PACK_RECORDS, 1, 32, 1, 0, 1, 9, 32, 2, 0, ZP_POSITIONS_RESTART, 0};
    run_t run;
    run_open(&run, &rec);
    assert_int_equal(zp_pipeline_balance(run.p, 4), ZP_OK);
    assert_int_equal(zp_pipeline_balance(run.p, ZP_BALANCE_WINDOW_MAX + 1), ZP_ERR_INVALID);
    assert_non_null(strstr(zp_pipeline_errmsg(run.p), "window = 4097"));
    const zp_batch *b;
    assert_int_equal(zp_pipeline_next(run.p, &b), ZP_ERR_INVALID);
    assert_non_null(strstr(zp_pipeline_errmsg(run.p), "needs a tokenize operator"));
    run_close(&run);
    g_epoch_draws = 1200;
}

int main(int argc, char **argv)
{
    const char *env = getenv("ZT_RESUME_STRIDE"); /* the sanitizer runs */
    if (argc > 1)
        g_stride = atoi(argv[1]) > 0 ? atoi(argv[1]) : 1;
    else if (env && atoi(env) > 0)
        g_stride = atoi(env);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concat_every_batch),
        cmocka_unit_test(test_concat_masking_every_batch),
        cmocka_unit_test(test_records_every_batch),
        cmocka_unit_test(test_pad_every_batch),
        cmocka_unit_test(test_bestfit_every_batch),
        cmocka_unit_test(test_bestfit_exactly_once),
        cmocka_unit_test(test_other_settings_refused),
        cmocka_unit_test(test_other_spelling),
        cmocka_unit_test(test_skip_range),
        cmocka_unit_test(test_elastic_records),
        cmocka_unit_test(test_elastic_concat),
        cmocka_unit_test(test_elastic_bestfit),
        cmocka_unit_test(test_bestfit_elastic_tokens),
        cmocka_unit_test(test_schedule_every_batch),
        cmocka_unit_test(test_schedule_changed_on_resume),
        cmocka_unit_test(test_schedule_added_on_resume),
        cmocka_unit_test(test_balance_every_batch),
        cmocka_unit_test(test_balance_exactly_once),
        cmocka_unit_test(test_balance_elastic),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
