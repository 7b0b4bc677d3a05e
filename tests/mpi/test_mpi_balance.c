/*
 * test_mpi_balance.c - cross-rank attention-cost balance (zp_mpi_balance),
 * under mpirun with 1..4 ranks, on token batches (best-fit packing of
 * documents of varied length, document masking on):
 *  - every row of a step is delivered exactly once: the multiset of row
 *    digests over all ranks for each step, and of the samples, equals the
 *    unbalanced run's;
 *  - each delivered batch is well formed: rows with a real token first,
 *    cu_seqlens over the inputs, each sample's row holding its document;
 *  - after <= before at the rank and the microbatch level on every step,
 *    and lower overall (every rank computes the same figures);
 *  - deterministic: a second run delivers the same batches;
 *  - a state saved at a step boundary resumes byte for byte; inside a step
 *    it is refused on every rank;
 *  - another window on one rank, record mode, and zp_mpi_balance after the
 *    first zp_mpi_next are refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpitest.h"
#include "zephon/state.h"

#define K 3
#define M 4
#define SEQ 48
#define MAX_STEPS 256

static const size_t SIZES[] = {60, 60, 60, 60};

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static uint64_t row_digest(const zp_batch *b, size_t r)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    h = fnv(h, b->tokens + r * b->cols, b->cols * 4);
    h = fnv(h, b->segment_ids + r * b->cols, b->cols * 4);
    h = fnv(h, b->loss_mask + r * b->cols, b->cols);
    if (b->position_ids)
        h = fnv(h, b->position_ids + r * b->cols, b->cols * 4);
    if (b->doc_counts)
        h = fnv(h, b->doc_counts + r, 4);
    return h;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static zp_pipeline *token_pipeline(zp_worksource *ws, int records)
{
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = 1;
    pc.chunk_samples = 8;
    zp_pipeline *p = NULL;
    if (zp_pipeline_create(ws, &pc, &p) != ZP_OK) {
        zp_pipeline_destroy(p);
        return NULL;
    }
    if (!records && (zp_pipeline_tokenize(p, "gpt2", "text", 1) != ZP_OK ||
                     zp_pipeline_pack_bestfit(p, SEQ, 8) != ZP_OK ||
                     zp_pipeline_doc_masking(p, ZP_OUT_POSITION_IDS | ZP_OUT_CU_SEQLENS |
                                                    ZP_OUT_DOC_COUNTS,
                                             ZP_POSITIONS_RESTART) != ZP_OK)) {
        zp_pipeline_destroy(p);
        return NULL;
    }
    if (zp_pipeline_batch(p, M) != ZP_OK) {
        zp_pipeline_destroy(p);
        return NULL;
    }
    return p;
}

/* What a run delivered: per step the sorted row digests and sample ids over
 * every rank, this rank's batch digests in order, the figures per step. */
typedef struct run_out {
    size_t steps;
    uint64_t *rows;    /* steps x (W K M), sorted per step */
    uint64_t *samples; /* steps x cap, sorted, UINT64_MAX padded */
    size_t sample_cap;
    uint64_t batch_digest[MAX_STEPS * K];
    size_t batches;
    zp_mpi_balance_stats stats;
} run_out;

static void run_out_free(run_out *o)
{
    free(o->rows);
    free(o->samples);
}

/* A batch is well formed: filled rows first, cu_seqlens over the inputs,
 * each sample's row. */
static void check_batch(const zp_batch *b)
{
    size_t in = b->cols - 1;
    for (size_t r = 0; r < b->rows; r++) {
        int filled = 0;
        for (size_t c = 0; c < b->cols; c++)
            filled |= b->loss_mask[r * b->cols + c] != 0;
        MPT_CHECK(filled == (r < b->rows_filled), "row %zu of %zu, %zu filled", r, b->rows,
                  b->rows_filled);
    }
    MPT_CHECK(b->cu_seqlens && b->n_cu_seqlens >= b->rows + 1);
    if (b->cu_seqlens) {
        MPT_CHECK(b->cu_seqlens[0] == 0 &&
                  b->cu_seqlens[b->n_cu_seqlens - 1] == (int32_t)(b->rows * in));
        size_t n = 1;
        int32_t mx = 0;
        for (size_t r = 0; r < b->rows; r++)
            for (size_t c = 0; c < in; c++) {
                size_t at = r * in + c;
                if (at && (c == 0 || b->segment_ids[r * b->cols + c] !=
                                         b->segment_ids[r * b->cols + c - 1])) {
                    MPT_CHECK(n < b->n_cu_seqlens && b->cu_seqlens[n] == (int32_t)at);
                    n++;
                }
            }
        MPT_CHECK(n + 1 == b->n_cu_seqlens, "%zu sequences, cu_seqlens %zu", n, b->n_cu_seqlens);
        for (size_t k = 1; k < b->n_cu_seqlens; k++)
            if (b->cu_seqlens[k] - b->cu_seqlens[k - 1] > mx)
                mx = b->cu_seqlens[k] - b->cu_seqlens[k - 1];
        MPT_CHECK(mx == b->max_seqlen);
    }
    for (size_t i = 0; i < b->n_samples; i++) {
        MPT_CHECK(b->sample_rows[i] < b->rows_filled);
        MPT_CHECK(i == 0 || b->sample_rows[i] >= b->sample_rows[i - 1]);
    }
}

/* Run `steps` steps (at most; fewer when the stream ends) with window k (0:
 * unbalanced, K calls a step all the same) on a fresh pipeline; state saved
 * to save_path after save_after steps when given; resume from resume_path
 * when given. */
static void run_steps(mpt_job *j, zp_mpi *m, size_t k, size_t steps, const char *save_path,
                      size_t save_after, const char *resume_path, run_out *o)
{
    memset(o, 0, sizeof *o);
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.seed = 7;
    zp_worksource *ws = NULL;
    MPT_CHECK(zp_mpi_worksource_create(m, j->ds, &wc, &ws) == ZP_OK);
    zp_pipeline *p = ws ? token_pipeline(ws, 0) : NULL;
    MPT_CHECK(p != NULL);
    if (resume_path && p) {
        FILE *f = fopen(resume_path, "rb");
        char *buf = malloc(1 << 20);
        size_t len = f && buf ? fread(buf, 1, 1 << 20, f) : 0;
        if (f)
            fclose(f);
        MPT_CHECK(len > 0 && zp_pipeline_state_restore(p, buf, len) == ZP_OK, "%s",
                  zp_pipeline_errmsg(p));
        free(buf);
    }
    if (k)
        MPT_CHECK(zp_mpi_balance(m, k) == ZP_OK, "%s", zp_mpi_errmsg(m));
    const size_t per = (size_t)mpt_size * K * M;
    o->sample_cap = per * 16;
    o->rows = calloc(steps * per, sizeof *o->rows);
    o->samples = calloc(steps * o->sample_cap, sizeof *o->samples);
    uint64_t *mine = malloc(K * M * sizeof *mine);
    uint64_t *smine = malloc(o->sample_cap * sizeof *smine);
    int done = 0;
    for (size_t s = 0; s < steps && p && !done; s++) {
        size_t ns = 0;
        for (size_t i = 0; i < o->sample_cap; i++)
            smine[i] = UINT64_MAX;
        for (size_t c = 0; c < K; c++) {
            const zp_batch *b = NULL;
            zp_status st = zp_mpi_next(m, p, &b);
            if (st != ZP_OK) {
                MPT_CHECK(st == ZP_END && (k == 0 || c == 0), "step %zu call %zu: %s: %s", s, c,
                          zp_status_str(st), zp_mpi_errmsg(m));
                done = 1;
                break;
            }
            check_batch(b);
            MPT_CHECK(b->rows == M);
            o->batch_digest[o->batches++] = zp_batch_digest(b);
            for (size_t r = 0; r < M; r++)
                mine[c * M + r] = row_digest(b, r);
            for (size_t i = 0; i < b->n_samples && ns < o->sample_cap / (size_t)mpt_size; i++)
                smine[ns++] = b->samples[i].global_id;
        }
        /* a step is the same on every rank: done agrees */
        if (done)
            break;
        if (k) {
            zp_mpi_balance_stats bs;
            zp_mpi_balance_stats_get(m, &bs);
            MPT_CHECK(bs.window_pos == 0 && bs.steps == s + 1);
            MPT_CHECK(bs.last_rank_after <= bs.last_rank_before + 1e-12, "step %zu: ranks %g -> %g",
                      s, bs.last_rank_before, bs.last_rank_after);
            MPT_CHECK(bs.last_mb_after <= bs.last_mb_before + 1e-12, "step %zu: microbatches %g -> %g",
                      s, bs.last_mb_before, bs.last_mb_after);
        }
        MPI_Allgather(mine, K * M, MPI_UINT64_T, o->rows + s * per, K * M, MPI_UINT64_T,
                      MPI_COMM_WORLD);
        qsort(o->rows + s * per, per, sizeof *o->rows, cmp_u64);
        size_t each = o->sample_cap / (size_t)mpt_size;
        MPI_Allgather(smine, (int)each, MPI_UINT64_T, o->samples + s * o->sample_cap, (int)each,
                      MPI_UINT64_T, MPI_COMM_WORLD);
        qsort(o->samples + s * o->sample_cap, o->sample_cap, sizeof *o->samples, cmp_u64);
        o->steps = s + 1;
        if (save_path && o->steps == save_after) {
            /* inside a step first (k > 1): refused on every rank */
            zp_status st = zp_mpi_state_save(m, p, save_path);
            MPT_CHECK(st == ZP_OK, "%s", zp_mpi_errmsg(m));
        }
    }
    zp_mpi_balance_stats_get(m, &o->stats);
    free(mine);
    free(smine);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
}

static zp_mpi *new_handle(void)
{
    zp_mpi *m = NULL;
    MPT_CHECK(zp_mpi_create(MPI_COMM_WORLD, NULL, &m) == ZP_OK);
    return m;
}

static void test_rows_once_and_figures(void **state)
{
    (void)state;
    mpt_job j;
    mpt_job_open(&j, "b.json", SIZES, 4, -1);
    zp_mpi *m0 = new_handle(), *m1 = new_handle(), *m2 = new_handle();
    run_out u, b, b2;
    run_steps(&j, m0, 0, MAX_STEPS, NULL, 0, NULL, &u);
    run_steps(&j, m1, K, MAX_STEPS, NULL, 0, NULL, &b);
    run_steps(&j, m2, K, MAX_STEPS, NULL, 0, NULL, &b2);
    MPT_CHECK(u.steps >= 3 && b.steps == u.steps, "steps: unbalanced %zu, balanced %zu", u.steps,
              b.steps);
    size_t per = (size_t)mpt_size * K * M;
    size_t n = u.steps < b.steps ? u.steps : b.steps;
    for (size_t s = 0; s < n; s++) {
        MPT_CHECK(memcmp(u.rows + s * per, b.rows + s * per, per * sizeof *u.rows) == 0,
                  "step %zu: the rows over every rank differ from the unbalanced run's", s);
        MPT_CHECK(memcmp(u.samples + s * u.sample_cap, b.samples + s * b.sample_cap,
                         u.sample_cap * sizeof *u.samples) == 0,
                  "step %zu: the samples over every rank differ from the unbalanced run's", s);
    }
    /* deterministic */
    MPT_CHECK(b.batches == b2.batches &&
              memcmp(b.batch_digest, b2.batch_digest, b.batches * sizeof *b.batch_digest) == 0);
    /* the figures: equal on every rank, lower after overall */
    zp_mpi_balance_stats *bs = &b.stats;
    MPT_CHECK(bs->window == K && bs->steps == b.steps && bs->attn_cost > 0);
    MPT_CHECK(bs->mb_peak_after < bs->mb_peak_before, "microbatch peaks %llu -> %llu",
              (unsigned long long)bs->mb_peak_before, (unsigned long long)bs->mb_peak_after);
    MPT_CHECK(bs->rank_peak_after <= bs->rank_peak_before);
    if (mpt_size > 1)
        MPT_CHECK(bs->rank_peak_after < bs->rank_peak_before && bs->rows_moved > 0,
                  "rank peaks %llu -> %llu, %llu rows moved",
                  (unsigned long long)bs->rank_peak_before, (unsigned long long)bs->rank_peak_after,
                  (unsigned long long)bs->rows_moved);
    uint64_t lo, hi;
    mpt_minmax_u64(bs->mb_peak_after, &lo, &hi);
    MPT_CHECK(lo == hi);
    mpt_minmax_u64(bs->rank_peak_before, &lo, &hi);
    MPT_CHECK(lo == hi);
    if (mpt_rank == 0)
        printf("  %d ranks, K=%d: %llu steps, rank max/mean %.3f -> %.3f, microbatch %.3f -> "
               "%.3f, %llu rows moved\n",
               mpt_size, K, (unsigned long long)bs->steps, bs->rank_imbalance_before,
               bs->rank_imbalance_after, bs->mb_imbalance_before, bs->mb_imbalance_after,
               (unsigned long long)bs->rows_moved);
    run_out_free(&u);
    run_out_free(&b);
    run_out_free(&b2);
    zp_mpi_destroy(m0);
    zp_mpi_destroy(m1);
    zp_mpi_destroy(m2);
    mpt_job_close(&j);
    mpt_sync();
}

static void test_resume_at_boundary(void **state)
{
    (void)state;
    mpt_job j;
    mpt_job_open(&j, "r.json", SIZES, 4, -1);
    char path[1200];
    snprintf(path, sizeof path, "%s/state.json", j.dir);
    zp_mpi *m1 = new_handle(), *m2 = new_handle(), *m3 = new_handle();
    run_out full, first, rest;
    run_steps(&j, m1, K, MAX_STEPS, NULL, 0, NULL, &full);
    run_steps(&j, m2, K, 2, path, 2, NULL, &first);
    run_steps(&j, m3, K, MAX_STEPS, NULL, 0, path, &rest);
    MPT_CHECK(first.batches == 2 * K && first.batches + rest.batches == full.batches,
              "%zu + %zu batches, uninterrupted %zu", first.batches, rest.batches, full.batches);
    if (first.batches + rest.batches == full.batches) {
        MPT_CHECK(memcmp(first.batch_digest, full.batch_digest, first.batches * 8) == 0);
        MPT_CHECK(memcmp(rest.batch_digest, full.batch_digest + first.batches,
                         rest.batches * 8) == 0,
                  "the resumed batches differ from the uninterrupted run's");
    }
    run_out_free(&full);
    run_out_free(&first);
    run_out_free(&rest);
    zp_mpi_destroy(m1);
    zp_mpi_destroy(m2);
    zp_mpi_destroy(m3);
    mpt_job_close(&j);
    mpt_sync();
}

static void test_refusals(void **state)
{
    (void)state;
    mpt_job j;
    mpt_job_open(&j, "f.json", SIZES, 4, -1);
    char path[1200];
    snprintf(path, sizeof path, "%s/inside.json", j.dir);
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);

    /* a state inside a step: refused on every rank, saying where to save */
    zp_mpi *m = new_handle();
    zp_worksource *ws = NULL;
    MPT_CHECK(zp_mpi_worksource_create(m, j.ds, &wc, &ws) == ZP_OK);
    zp_pipeline *p = token_pipeline(ws, 0);
    MPT_CHECK(zp_mpi_balance(m, K) == ZP_OK);
    MPT_CHECK(zp_mpi_balance(m, ZP_BALANCE_WINDOW_MAX + 1) == ZP_ERR_INVALID);
    MPT_CHECK(zp_mpi_balance(m, K) == ZP_OK);
    const zp_batch *b;
    MPT_CHECK(zp_mpi_next(m, p, &b) == ZP_OK);
    MPT_CHECK(zp_mpi_balance(m, K) == ZP_ERR_STATE);
    zp_status st = zp_mpi_state_save(m, p, path);
    MPT_CHECK(st == ZP_ERR_STATE && strstr(zp_mpi_errmsg(m), "step boundary") &&
                  strstr(zp_mpi_errmsg(m), "multiple of 3"),
              "%s: %s", zp_status_str(st), zp_mpi_errmsg(m));
    MPT_CHECK(zp_mpi_next(m, p, &b) == ZP_OK && zp_mpi_next(m, p, &b) == ZP_OK);
    MPT_CHECK(zp_mpi_state_save(m, p, path) == ZP_OK, "%s", zp_mpi_errmsg(m));
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    zp_mpi_destroy(m);

    /* another window on rank 0: every rank fails naming both */
    m = new_handle();
    ws = NULL;
    MPT_CHECK(zp_mpi_worksource_create(m, j.ds, &wc, &ws) == ZP_OK);
    p = token_pipeline(ws, 0);
    if (mpt_size > 1) {
        MPT_CHECK(zp_mpi_balance(m, mpt_rank == 0 ? 2 : K) == ZP_OK);
        st = zp_mpi_next(m, p, &b);
        MPT_CHECK(st == ZP_ERR_MISMATCH && strstr(zp_mpi_errmsg(m), "rank 0: 2") &&
                      strstr(zp_mpi_errmsg(m), ": 3"),
                  "%s: %s", zp_status_str(st), zp_mpi_errmsg(m));
    }
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    zp_mpi_destroy(m);

    /* record mode: refused on every rank */
    m = new_handle();
    ws = NULL;
    MPT_CHECK(zp_mpi_worksource_create(m, j.ds, &wc, &ws) == ZP_OK);
    p = token_pipeline(ws, 1);
    MPT_CHECK(zp_mpi_balance(m, K) == ZP_OK);
    st = zp_mpi_next(m, p, &b);
    MPT_CHECK(st == ZP_ERR_INVALID && strstr(zp_mpi_errmsg(m), "record mode"), "%s: %s",
              zp_status_str(st), zp_mpi_errmsg(m));
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    zp_mpi_destroy(m);
    mpt_job_close(&j);
    mpt_sync();
}

/* A bad record on one rank's share: every rank returns the same error at
 * the same step, naming the rank; the batches held are released. */
static void test_error_reaches_every_rank(void **state)
{
    (void)state;
    mpt_job j;
    mpt_job_open(&j, "e.json", SIZES, 4, 37);
    zp_mpi *m = new_handle();
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    zp_worksource *ws = NULL;
    MPT_CHECK(zp_mpi_worksource_create(m, j.ds, &wc, &ws) == ZP_OK);
    zp_pipeline *p = ws ? token_pipeline(ws, 0) : NULL;
    MPT_CHECK(p != NULL);
    MPT_CHECK(zp_mpi_balance(m, K) == ZP_OK);
    const zp_batch *b;
    zp_status st = ZP_OK;
    uint64_t calls = 0;
    while (p && (st = zp_mpi_next(m, p, &b)) == ZP_OK)
        calls++;
    MPT_CHECK(st != ZP_OK && st != ZP_END, "%s", zp_status_str(st));
    MPT_CHECK(calls % K == 0, "%llu calls", (unsigned long long)calls);
    MPT_CHECK(strncmp(zp_mpi_errmsg(m), "rank ", 5) == 0, "'%s'", zp_mpi_errmsg(m));
    MPT_CHECK(!p || zp_pipeline_kept_batches(p) == 0);
    uint64_t lo, hi;
    mpt_minmax_u64((uint64_t)st, &lo, &hi);
    MPT_CHECK(lo == hi);
    mpt_minmax_u64(calls, &lo, &hi);
    MPT_CHECK(lo == hi);
    /* later calls answer the same without communicating */
    MPT_CHECK(!p || zp_mpi_next(m, p, &b) == st);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    zp_mpi_destroy(m);
    mpt_job_close(&j);
    mpt_sync();
}

int main(int argc, char **argv)
{
    mpt_init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_once_and_figures),
        cmocka_unit_test(test_resume_at_boundary),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_error_reaches_every_rank),
    };
    return mpt_finish(cmocka_run_group_tests_name("mpi_balance", tests, NULL, NULL));
}
