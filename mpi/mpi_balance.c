/* mpi_balance.c - cross-rank attention-cost balance (zp_mpi_balance): at a
 * global step's first zp_mpi_next every rank takes K batches from its
 * pipeline, the ranks agree (zpi_mpi_step_agree), gather every row's cost,
 * number of samples and whether it holds a real token (MPI_Allgather),
 * compute the same assignment of rows to the step's W x K microbatches
 * (zp_balance_rows) and exchange the rows and the samples
 * (MPI_Alltoallv); the step's K batches are then delivered from the
 * handle's buffers, the K - 1 later calls without communication.
 *
 * Ownership: the pipeline's batches are kept (zp_pipeline_keep_batch)
 * only until their rows are copied into the send buffer; the delivered
 * batches point into buffers of the handle (zpi_mpi_bal), valid until the
 * next zp_mpi_next. Thread safety: the thread that created the zp_mpi. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_internal.h"

/* Per row in the allgather: its cost, its samples, 1 when it holds a real
 * token. */
#define ROW_INFO 3

zp_status zp_mpi_balance(zp_mpi *m, size_t window)
{
    ZPI_MPI_USABLE(m);
    if (m->bal.started)
        return zpi_mpi_fail(m, ZP_ERR_STATE,
                            "zp_mpi_balance: call it before the first zp_mpi_next (the window "
                            "is compared by the first step's agreement)");
    if (window > ZP_BALANCE_WINDOW_MAX)
        return zpi_mpi_fail(m, ZP_ERR_INVALID,
                            "zp_mpi_balance: window %zu: at most %u microbatches per rank "
                            "(ZP_BALANCE_WINDOW_MAX); 0 turns balance off",
                            window, ZP_BALANCE_WINDOW_MAX);
    m->bal.window = window;
    m->bal.stats.window = window;
    return ZP_OK;
}

void zp_mpi_balance_stats_get(const zp_mpi *m, zp_mpi_balance_stats *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!m || m->failed_create)
        return;
    *out = m->bal.stats;
    out->window_pos = m->bal.pos;
}

int zpi_mpi_balance_inside(zp_mpi *m)
{
    if (!m->bal.window || m->bal.pos == 0)
        return 0;
    zpi_mpi_fail(m, ZP_ERR_STATE,
                 "rank %d: zp_mpi_state_save inside a step of cross-rank balance (%zu of %zu "
                 "microbatches delivered): the step's rows came from every rank, so no rank's "
                 "state describes them; save at a step boundary (after a multiple of %zu "
                 "zp_mpi_next calls)",
                 m->rank, m->bal.pos, m->bal.window, m->bal.window);
    return 1;
}

/* The layout of one row in the exchange: tokens, segment ids, position
 * ids (when delivered), its document count (when delivered), the loss mask
 * (padded to 4 bytes). */
typedef struct row_layout {
    size_t cols;
    int pos, cu, doc;
    size_t bytes;
} row_layout;

static row_layout layout_of(const zp_batch *b)
{
    row_layout L = {.cols = b->cols,
                    .pos = b->position_ids != NULL,
                    .cu = b->cu_seqlens != NULL,
                    .doc = b->doc_counts != NULL};
    L.bytes = 8 * L.cols + (L.pos ? 4 * L.cols : 0) + (L.doc ? 4 : 0) + ((L.cols + 3) & ~(size_t)3);
    return L;
}

static void pack_row(const row_layout *L, const zp_batch *b, size_t r, char *dst)
{
    size_t C = L->cols;
    memcpy(dst, b->tokens + r * C, 4 * C);
    dst += 4 * C;
    memcpy(dst, b->segment_ids + r * C, 4 * C);
    dst += 4 * C;
    if (L->pos) {
        memcpy(dst, b->position_ids + r * C, 4 * C);
        dst += 4 * C;
    }
    if (L->doc) {
        memcpy(dst, b->doc_counts + r, 4);
        dst += 4;
    }
    memcpy(dst, b->loss_mask + r * C, C);
}

static void unpack_row(const row_layout *L, const char *src, zpi_mpi_bal *bb, size_t at)
{
    size_t C = L->cols;
    memcpy(bb->tokens + at * C, src, 4 * C);
    src += 4 * C;
    memcpy(bb->segment_ids + at * C, src, 4 * C);
    src += 4 * C;
    if (L->pos) {
        memcpy(bb->position_ids + at * C, src, 4 * C);
        src += 4 * C;
    }
    if (L->doc) {
        memcpy(bb->doc_counts + at, src, 4);
        src += 4;
    }
    memcpy(bb->loss_mask + at * C, src, C);
}

/* Resize *p to n elements of size sz (at least one); 0, or -1 when out
 * of memory (*p kept). */
static int resize(void **p, size_t n, size_t sz)
{
    void *q = realloc(*p, (n ? n : 1) * sz);
    if (!q)
        return -1;
    *p = q;
    return 0;
}

/* The handle's output buffers for K batches of M rows of the layout L. */
static int out_buffers(zpi_mpi_bal *bb, size_t K, size_t M, const row_layout *L)
{
    size_t rows = K * M, cells = rows * L->cols;
    size_t cu = K * (M * (L->cols > 1 ? L->cols - 1 : 0) + 1);
    if (!bb->out && !(bb->out = calloc(K, sizeof *bb->out)))
        return -1;
    if (resize((void **)&bb->tokens, cells, 4) || resize((void **)&bb->segment_ids, cells, 4) ||
        resize((void **)&bb->loss_mask, cells, 1) ||
        (L->pos && resize((void **)&bb->position_ids, cells, 4)) ||
        (L->doc && resize((void **)&bb->doc_counts, rows, 4)) ||
        (L->cu && resize((void **)&bb->cu_seqlens, cu, 4)))
        return -1;
    return 0;
}

/* cu_seqlens and max_seqlen of batch o (rows x cols, its segment ids set)
 * into cu: as zephon/batch.h defines them. */
static void make_cu(zp_batch *o, int32_t *cu)
{
    size_t in = o->cols > 1 ? o->cols - 1 : 0, n = 0;
    int32_t maxlen = 0, last = 0;
    cu[n++] = 0;
    for (size_t r = 0; r < o->rows; r++) {
        const int32_t *sg = o->segment_ids + r * o->cols;
        for (size_t c = 0; c < in; c++) {
            int32_t at = (int32_t)(r * in + c);
            if (at != 0 && (c == 0 || sg[c] != sg[c - 1])) {
                if (at - last > maxlen)
                    maxlen = at - last;
                cu[n++] = at;
                last = at;
            }
        }
    }
    int32_t end = (int32_t)(o->rows * in);
    if (end > last || n == 1) {
        if (end - last > maxlen)
            maxlen = end - last;
        cu[n++] = end;
    }
    o->cu_seqlens = cu;
    o->n_cu_seqlens = n;
    o->max_seqlen = maxlen;
}

static void release_all(zp_pipeline *p, const zp_batch **src, size_t got)
{
    for (size_t k = 0; k < got; k++)
        zp_pipeline_release_batch(p, src[k]);
}

/* A value equal on every rank for batches of the same shape. */
static int64_t shape_of(const zp_batch *b)
{
    uint64_t h = (uint64_t)b->rows * 0x9e3779b97f4a7c15ULL ^ (uint64_t)b->cols * 0xc2b2ae3d27d4eb4fULL;
    h ^= (uint64_t)((b->position_ids != NULL) | (b->cu_seqlens != NULL) << 1 |
                    (b->doc_counts != NULL) << 2)
         << 60;
    return (int64_t)(h & (uint64_t)INT64_MAX) | 1; /* never 0 (0: no shape) */
}

/* max / mean of n sums (0 when the mean is 0) and the max. */
static uint64_t max_of(const uint64_t *v, size_t n)
{
    uint64_t mx = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i] > mx)
            mx = v[i];
    return mx;
}

static double ratio_of(uint64_t mx, uint64_t total, size_t n)
{
    return total ? (double)mx * (double)n / (double)total : 0;
}

/* A received row: its global index, its position in the receive buffer
 * and its first sample's there. */
typedef struct recv_row {
    size_t global, pos, spos;
} recv_row;

/* The scratch of one step (freed at its end). */
typedef struct step_scratch {
    uint64_t *mine, *all;   /* ROW_INFO per row: this rank's K x M, every rank's W x K x M */
    uint32_t *group;        /* W x K x M */
    uint64_t *sums, *mb_before, *rank_before, *rank_after; /* W K, W K, W, W */
    int *scount, *sdispl, *rcount, *rdispl, *sscount, *ssdispl, *srcount, *srdispl; /* W each */
    char *send, *recv;
    zp_sample *ssend, *srecv;
    uint32_t *row_first;    /* K x M: each local row's first sample (counting sort) */
    uint32_t *row_samples;  /* the samples' indices, row by row */
    recv_row *by_group;     /* K x M: the received rows of each delivered batch */
    size_t *by_group_cnt;   /* K */
} step_scratch;

static void scratch_free(step_scratch *s)
{
    free(s->mine);
    free(s->all);
    free(s->group);
    free(s->sums);
    free(s->mb_before);
    free(s->rank_before);
    free(s->rank_after);
    free(s->scount);
    free(s->sdispl);
    free(s->rcount);
    free(s->rdispl);
    free(s->sscount);
    free(s->ssdispl);
    free(s->srcount);
    free(s->srdispl);
    free(s->send);
    free(s->recv);
    free(s->ssend);
    free(s->srecv);
    free(s->row_first);
    free(s->row_samples);
    free(s->by_group);
    free(s->by_group_cnt);
}

/* Computed on every rank from the gathered rows: the assignment (group)
 * and the step's figures. The balanced assignment is used when it is no
 * worse than the rows as they are at both levels (the costliest rank and
 * the costliest microbatch); otherwise the rows stay. */
static zp_status assign(zp_mpi *m, step_scratch *s, size_t W, size_t K, size_t M)
{
    size_t G = W * K, n = G * M;
    uint64_t *cost = malloc(n * sizeof *cost);
    if (!cost)
        return ZP_ERR_NOMEM;
    uint64_t total = 0;
    memset(s->mb_before, 0, G * sizeof *s->mb_before);
    for (size_t i = 0; i < n; i++) {
        cost[i] = s->all[i * ROW_INFO];
        total += cost[i];
        s->mb_before[i / M] += cost[i];
    }
    zp_status st = zp_balance_rows(cost, G, M, s->group, s->sums);
    free(cost);
    if (st != ZP_OK)
        return st;
    memset(s->rank_before, 0, W * sizeof *s->rank_before);
    memset(s->rank_after, 0, W * sizeof *s->rank_after);
    for (size_t g = 0; g < G; g++) {
        s->rank_before[g / K] += s->mb_before[g];
        s->rank_after[g / K] += s->sums[g];
    }
    uint64_t mbb = max_of(s->mb_before, G), mba = max_of(s->sums, G);
    uint64_t rkb = max_of(s->rank_before, W), rka = max_of(s->rank_after, W);
    if (mba > mbb || rka > rkb) { /* keep the rows where they are */
        for (size_t i = 0; i < n; i++)
            s->group[i] = (uint32_t)(i / M);
        mba = mbb;
        rka = rkb;
    }
    zp_mpi_balance_stats *bs = &m->bal.stats;
    bs->steps++;
    bs->attn_cost += total;
    bs->rank_peak_before += rkb * W;
    bs->rank_peak_after += rka * W;
    bs->mb_peak_before += mbb * G;
    bs->mb_peak_after += mba * G;
    for (size_t i = 0; i < n; i++)
        if (s->group[i] / K != i / (K * M))
            bs->rows_moved++;
    bs->last_rank_before = ratio_of(rkb, total, W);
    bs->last_rank_after = ratio_of(rka, total, W);
    bs->last_mb_before = ratio_of(mbb, total, G);
    bs->last_mb_after = ratio_of(mba, total, G);
    if (bs->attn_cost) {
        double c = (double)bs->attn_cost;
        bs->rank_imbalance_before = (double)bs->rank_peak_before / c;
        bs->rank_imbalance_after = (double)bs->rank_peak_after / c;
        bs->mb_imbalance_before = (double)bs->mb_peak_before / c;
        bs->mb_imbalance_after = (double)bs->mb_peak_after / c;
    }
    return ZP_OK;
}

/* A step that could not be exchanged after the agreement: stop every
 * rank with the agreed status (the message on m). */
static zp_status step_fail(zp_mpi *m, zp_status st)
{
    char msg[ZPI_MPI_ERRMAX];
    zpi_fmt(msg, sizeof msg, "%s", m->err.msg);
    m->step_final = st;
    zpi_fmt(m->step_msg, sizeof m->step_msg, "%s", msg);
    return zpi_mpi_fail(m, st, "%s", msg);
}

/* The sample row of sample i of b (clamped to the batch). */
static size_t sample_row(const zp_batch *b, size_t i, size_t M)
{
    size_t r = b->sample_rows ? b->sample_rows[i] : 0;
    return r < M ? r : M - 1;
}

/* This rank's rows for the allgather (cost, samples, filled) and its
 * samples bucketed by row (a stable counting sort: stream order within a
 * row). 0, or -1 when out of memory. */
static int local_rows(step_scratch *s, const zp_batch **src, size_t K, size_t M, size_t cols)
{
    const size_t mine_n = K * M;
    uint64_t *cost = malloc(M * sizeof *cost);
    uint32_t *fill = calloc(mine_n ? mine_n : 1, sizeof *fill);
    if (!cost || !fill) {
        free(cost);
        free(fill);
        return -1;
    }
    for (size_t k = 0; k < K; k++) {
        const zp_batch *b = src[k];
        zp_batch_row_costs(b, cost);
        for (size_t r = 0; r < M; r++) {
            uint64_t *e = s->mine + (k * M + r) * ROW_INFO;
            int filled = 0;
            for (size_t c = 0; c < cols && !filled; c++)
                filled = b->loss_mask[r * cols + c] != 0;
            e[0] = cost[r];
            e[1] = 0;
            e[2] = (uint64_t)filled;
        }
        for (size_t i = 0; i < b->n_samples; i++)
            s->mine[(k * M + sample_row(b, i, M)) * ROW_INFO + 1]++;
    }
    size_t at = 0;
    for (size_t j = 0; j < mine_n; j++) {
        s->row_first[j] = (uint32_t)at;
        at += s->mine[j * ROW_INFO + 1];
    }
    s->row_first[mine_n] = (uint32_t)at;
    size_t base = 0;
    for (size_t k = 0; k < K; k++) {
        const zp_batch *b = src[k];
        for (size_t i = 0; i < b->n_samples; i++) {
            size_t j = k * M + sample_row(b, i, M);
            s->row_samples[s->row_first[j] + fill[j]++] = (uint32_t)(base + i);
        }
        base += b->n_samples;
    }
    free(cost);
    free(fill);
    return 0;
}

/* The step's scratch for W ranks, K batches of M rows of the layout L and
 * n_smp local samples; the handle's output buffers. 0, or -1. */
static int scratch_alloc(step_scratch *s, zpi_mpi_bal *bb, size_t W, size_t K, size_t M,
                         const row_layout *L, size_t n_smp)
{
    const size_t G = W * K, n = G * M, mine_n = K * M;
    s->mine = malloc(mine_n * ROW_INFO * sizeof *s->mine);
    s->all = malloc(n * ROW_INFO * sizeof *s->all);
    s->group = malloc(n * sizeof *s->group);
    s->sums = malloc(G * sizeof *s->sums);
    s->mb_before = malloc(G * sizeof *s->mb_before);
    s->rank_before = malloc(W * sizeof *s->rank_before);
    s->rank_after = malloc(W * sizeof *s->rank_after);
    int **ints[] = {&s->scount,  &s->sdispl,  &s->rcount,  &s->rdispl,
                    &s->sscount, &s->ssdispl, &s->srcount, &s->srdispl};
    int ok = 1;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        ok &= (*ints[i] = malloc(W * sizeof(int))) != NULL;
    s->send = malloc(mine_n * L->bytes);
    s->recv = malloc(mine_n * L->bytes); /* every rank receives exactly K x M rows */
    s->ssend = malloc((n_smp ? n_smp : 1) * sizeof *s->ssend);
    s->row_first = calloc(mine_n + 1, sizeof *s->row_first);
    s->row_samples = malloc((n_smp ? n_smp : 1) * sizeof *s->row_samples);
    s->by_group = malloc(mine_n * sizeof *s->by_group);
    ok &= s->mine && s->all && s->group && s->sums && s->mb_before && s->rank_before &&
          s->rank_after && s->send && s->recv && s->ssend && s->row_first && s->row_samples &&
          s->by_group;
    return ok && out_buffers(bb, K, M, L) == 0 ? 0 : -1;
}

/* The send buffers (rows, and their samples, by destination rank, each
 * destination's in local order) and the receive counts (from each source
 * rank its rows for this rank, in global order). */
static void pack_send(step_scratch *s, const zp_batch **src, size_t W, size_t me, size_t K,
                      size_t M, const row_layout *L)
{
    const size_t mine_n = K * M, off = me * mine_n; /* this rank's first row, globally */
    size_t pos = 0, spos = 0;
    for (size_t d = 0; d < W; d++) {
        s->sdispl[d] = (int)(pos * L->bytes);
        s->ssdispl[d] = (int)(spos * sizeof(zp_sample));
        size_t rows_d = 0, smp_d = 0, base = 0, k = 0;
        for (size_t j = 0; j < mine_n; j++) {
            if (j / M != k) {
                base += src[k]->n_samples;
                k = j / M;
            }
            if (s->group[off + j] / K != d)
                continue;
            pack_row(L, src[k], j % M, s->send + (pos + rows_d) * L->bytes);
            for (uint32_t q = s->row_first[j]; q < s->row_first[j + 1]; q++)
                s->ssend[spos + smp_d++] = src[k]->samples[s->row_samples[q] - base];
            rows_d++;
        }
        s->scount[d] = (int)(rows_d * L->bytes);
        s->sscount[d] = (int)(smp_d * sizeof(zp_sample));
        pos += rows_d;
        spos += smp_d;
    }
    size_t rpos = 0, rspos = 0;
    for (size_t r = 0; r < W; r++) {
        size_t rows_r = 0, smp_r = 0;
        for (size_t i = r * mine_n; i < (r + 1) * mine_n; i++)
            if (s->group[i] / K == me) {
                rows_r++;
                smp_r += s->all[i * ROW_INFO + 1];
            }
        s->rdispl[r] = (int)(rpos * L->bytes);
        s->rcount[r] = (int)(rows_r * L->bytes);
        s->srdispl[r] = (int)(rspos * sizeof(zp_sample));
        s->srcount[r] = (int)(smp_r * sizeof(zp_sample));
        rpos += rows_r;
        rspos += smp_r;
    }
}

/* The delivered batches from the received rows: microbatch k holds the
 * rows of group me K + k, those with a real token first, each part in
 * global order (source rank, batch, row); samples with their rows. */
static void assemble(zpi_mpi_bal *bb, step_scratch *s, size_t n, size_t me, size_t K, size_t M,
                     const row_layout *L)
{
    /* the received rows (in global order) by group: their receive position */
    size_t *cnt = s->by_group_cnt;
    memset(cnt, 0, K * sizeof *cnt);
    for (size_t i = 0, q = 0, sq = 0; i < n; i++) {
        if (s->group[i] / K != me)
            continue;
        size_t k = s->group[i] % K;
        s->by_group[k * M + cnt[k]++] = (recv_row){i, q++, sq};
        sq += s->all[i * ROW_INFO + 1];
    }
    size_t sample_out = 0;
    for (size_t k = 0; k < K; k++) {
        zp_batch *o = &bb->out[k];
        size_t at = 0, first_sample = sample_out;
        for (int pass = 0; pass < 2; pass++)
            for (size_t c = 0; c < M; c++) {
                const recv_row *x = &s->by_group[k * M + c];
                int filled = s->all[x->global * ROW_INFO + 2] != 0;
                if (filled != (pass == 0))
                    continue;
                unpack_row(L, s->recv + x->pos * L->bytes, bb, k * M + at);
                size_t ns = s->all[x->global * ROW_INFO + 1];
                for (size_t t = 0; t < ns; t++, sample_out++) {
                    bb->samples[sample_out] = s->srecv[x->spos + t];
                    bb->sample_rows[sample_out] = (uint32_t)at;
                }
                o->rows_filled += (size_t)filled;
                at++;
            }
        o->rows = M;
        o->cols = L->cols;
        o->tokens = bb->tokens + k * M * L->cols;
        o->segment_ids = bb->segment_ids + k * M * L->cols;
        o->loss_mask = bb->loss_mask + k * M * L->cols;
        o->position_ids = L->pos ? bb->position_ids + k * M * L->cols : NULL;
        o->doc_counts = L->doc ? bb->doc_counts + k * M : NULL;
        o->n_samples = sample_out - first_sample;
        o->samples = bb->samples + first_sample;
        o->sample_rows = bb->sample_rows + first_sample;
        if (L->cu)
            make_cu(o, bb->cu_seqlens + k * (M * (L->cols > 1 ? L->cols - 1 : 0) + 1));
    }
}

/* The samples this rank receives: room for them (scratch and handle). */
static zp_status recv_samples(zp_mpi *m, step_scratch *s, size_t n, size_t K)
{
    zpi_mpi_bal *bb = &m->bal;
    size_t n_recv = 0;
    for (size_t i = 0; i < n; i++)
        if (s->group[i] / K == (size_t)m->rank)
            n_recv += s->all[i * ROW_INFO + 1];
    if (!(s->srecv = malloc((n_recv ? n_recv : 1) * sizeof *s->srecv)) ||
        !(s->by_group_cnt = malloc(K * sizeof *s->by_group_cnt)) ||
        resize((void **)&bb->samples, n_recv, sizeof *bb->samples) ||
        resize((void **)&bb->sample_rows, n_recv, sizeof *bb->sample_rows))
        return zpi_mpi_fail(m, ZP_ERR_NOMEM, "rank %d: out of memory for %zu samples", m->rank,
                            n_recv);
    if (n_recv * sizeof(zp_sample) > INT_MAX)
        return zpi_mpi_fail(m, ZP_ERR_LIMIT, "rank %d: %zu samples in one step", m->rank, n_recv);
    return ZP_OK;
}

/* The exchange of a step whose K batches every rank holds (released here). */
static zp_status exchange(zp_mpi *m, zp_pipeline *p, const zp_batch **src, size_t K)
{
    zpi_mpi_bal *bb = &m->bal;
    const size_t W = (size_t)m->size, me = (size_t)m->rank;
    const size_t M = src[0]->rows, n = W * K * M, mine_n = K * M;
    const row_layout L = layout_of(src[0]);
    step_scratch s = {0};
    zp_status local = ZP_OK, st;

    size_t n_smp = 0;
    for (size_t k = 0; k < K; k++)
        n_smp += src[k]->n_samples;
    if (scratch_alloc(&s, bb, W, K, M, &L, n_smp) != 0 || local_rows(&s, src, K, M, L.cols) != 0)
        local = zpi_mpi_fail(m, ZP_ERR_NOMEM,
                             "rank %d: out of memory balancing a step of %zu x %zu rows of %zu "
                             "tokens",
                             m->rank, W * K, M, L.cols);
    else if (mine_n * L.bytes > INT_MAX || n_smp * sizeof(zp_sample) > INT_MAX)
        local = zpi_mpi_fail(m, ZP_ERR_LIMIT,
                             "rank %d: a step of %zu rows of %zu bytes is too large for one "
                             "MPI_Alltoallv",
                             m->rank, mine_n, L.bytes);
    st = zpi_mpi_agree_status(m, local);
    if (st == ZP_OK)
        st = zpi_mpi_check(m, zpi_coll_allgather(m, s.mine, s.all, (int)(mine_n * ROW_INFO),
                                                 MPI_UINT64_T),
                           "MPI_Allgather (row costs)");
    if (st == ZP_OK) {
        local = assign(m, &s, W, K, M);
        if (local != ZP_OK)
            zpi_mpi_fail(m, local, "rank %d: zp_balance_rows: %s", m->rank, zp_status_str(local));
        else
            local = recv_samples(m, &s, n, K);
        st = zpi_mpi_agree_status(m, local);
    }
    if (st != ZP_OK) {
        release_all(p, src, K);
        scratch_free(&s);
        return step_fail(m, st);
    }
    pack_send(&s, src, W, me, K, M, &L);
    /* what the delivered batches take from the sources, before releasing them */
    for (size_t k = 0; k < K; k++) {
        zp_batch *o = &bb->out[k];
        memset(o, 0, sizeof *o);
        o->index = src[k]->index;
        o->epoch = src[k]->epoch;
        o->last_in_epoch = src[k]->last_in_epoch;
        o->mode = src[0]->mode;
    }
    release_all(p, src, K);

    st = zpi_mpi_check(m, zpi_coll_alltoallv(m, s.send, s.scount, s.sdispl, s.recv, s.rcount,
                                             s.rdispl, MPI_BYTE),
                       "MPI_Alltoallv (balanced rows)");
    if (st == ZP_OK)
        st = zpi_mpi_check(m, zpi_coll_alltoallv(m, s.ssend, s.sscount, s.ssdispl, s.srecv,
                                                 s.srcount, s.srdispl, MPI_BYTE),
                           "MPI_Alltoallv (samples of the balanced rows)");
    st = zpi_mpi_agree_status(m, st);
    if (st == ZP_OK)
        assemble(bb, &s, n, me, K, M, &L);
    scratch_free(&s);
    return st == ZP_OK ? ZP_OK : step_fail(m, st);
}

zp_status zpi_mpi_balance_next(zp_mpi *m, zp_pipeline *p, const zp_batch **out)
{
    zpi_mpi_bal *bb = &m->bal;
    const size_t K = bb->window;
    if (!p || !out)
        return step_fail(m, zpi_mpi_fail(m, ZP_ERR_INVALID, "zp_mpi_next: %s is NULL",
                                         !p ? "the pipeline" : "out"));
    if (bb->pos > 0) { /* inside a step: no communication */
        *out = &bb->out[bb->pos];
        bb->pos = (bb->pos + 1) % K;
        return ZP_OK;
    }
    const zp_batch **src = calloc(K, sizeof *src);
    size_t got = 0;
    zp_status st = src ? ZP_OK
                       : zpi_mpi_fail(m, ZP_ERR_NOMEM, "out of memory for %zu batches of a step",
                                      K);
    if (st == ZP_OK)
        zpi_mpi_watch(m, p);
    while (st == ZP_OK && got < K) {
        const zp_batch *b = NULL;
        st = zp_pipeline_next(p, &b);
        if (st == ZP_END)
            break;
        if (st != ZP_OK) {
            zpi_mpi_fail(m, st, "%s", zp_pipeline_errmsg(p));
            break;
        }
        if ((st = zp_pipeline_keep_batch(p, b)) != ZP_OK) {
            zpi_mpi_fail(m, st, "zp_mpi_balance: cannot keep a batch: %s", zp_pipeline_errmsg(p));
            break;
        }
        src[got++] = b;
        if (!b->tokens)
            st = zpi_mpi_fail(m, ZP_ERR_INVALID,
                              "zp_mpi_balance: record mode (no tokenize) has no packed rows to "
                              "balance: cross-rank balance needs token packing");
        else if (b->n_arrays > 0)
            st = zpi_mpi_fail(m, ZP_ERR_INVALID,
                              "zp_mpi_balance: batches with fixed-shape fields (%zu arrays) "
                              "cannot be balanced across ranks: only token batches can",
                              b->n_arrays);
        else if (!b->segment_ids || !b->loss_mask || b->rows != src[0]->rows ||
                 b->cols != src[0]->cols)
            st = zpi_mpi_fail(m, ZP_ERR_INTERNAL,
                              "zp_mpi_balance: the batches of a step differ in shape");
    }
    int64_t shape = st == ZP_OK && got == K ? shape_of(src[0]) : 0;
    st = zpi_mpi_step_agree(m, st, got, shape);
    if (st != ZP_OK) {
        for (size_t k = 0; k < got; k++)
            zpi_mpi_keep_undelivered(m, src[k]); /* held, not delivered */
        if (src)
            release_all(p, src, got);
        free(src);
        return st;
    }
    st = exchange(m, p, src, K);
    free(src);
    if (st != ZP_OK)
        return st;
    *out = &bb->out[0];
    bb->pos = K > 1 ? 1 : 0;
    return ZP_OK;
}
