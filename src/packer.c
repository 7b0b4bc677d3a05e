/*
 * packer.c - the ordered batch stage and the output queue.
 *
 * Only the drainer (one thread at a time, chunks in order) calls the
 * zpi_pack_* functions, so the packer state needs no lock. The output queue
 * is shared with the consumer under qmu.
 *
 * A full batch is pushed lazily, when the next row is needed or at the
 * epoch's flush, so that the last batch of an epoch can be marked as such.
 */
#include <stdlib.h>
#include <string.h>

#include "pipeline_internal.h"
#include "util.h"

/* ------------------------------------------------------------ output queue */

zp_status zpi_batchbufs_alloc(zp_pipeline *p)
{
    size_t B = p->cfg.microbatch_size;
    int tokens = p->tok != NULL;
    size_t cols = tokens ? p->cfg.seq_len + 1 : 0;
    p->n_bufs = p->cfg.prefetch_batches + 2;
    p->bufs = calloc(p->n_bufs, sizeof *p->bufs);
    if (!p->bufs)
        return ZP_ERR_NOMEM;
    for (size_t i = 0; i < p->n_bufs; i++) {
        zpi_batchbuf *bb = &p->bufs[i];
        bb->samples_cap = B;
        bb->samples = malloc(B * sizeof *bb->samples);
        if (!bb->samples)
            return ZP_ERR_NOMEM;
        if (tokens) {
            bb->tokens = malloc(B * cols * sizeof *bb->tokens);
            bb->mask = malloc(B * cols);
            bb->seg = malloc(B * cols * sizeof *bb->seg);
            if (!bb->tokens || !bb->mask || !bb->seg)
                return ZP_ERR_NOMEM;
        } else {
            bb->offsets = malloc((B + 1) * sizeof *bb->offsets);
            if (!bb->offsets)
                return ZP_ERR_NOMEM;
        }
        bb->next = p->free_list;
        p->free_list = bb;
    }
    return ZP_OK;
}

void zpi_batchbufs_free(zp_pipeline *p)
{
    if (!p->bufs)
        return;
    for (size_t i = 0; i < p->n_bufs; i++) {
        zpi_batchbuf *bb = &p->bufs[i];
        free(bb->samples);
        free(bb->data);
        free(bb->offsets);
        free(bb->tokens);
        free(bb->mask);
        free(bb->seg);
    }
    free(p->bufs);
    p->bufs = NULL;
    p->free_list = p->ready_head = p->ready_tail = p->held = NULL;
}

zp_status zpi_out_get_free(zp_pipeline *p, zpi_batchbuf **out)
{
    pthread_mutex_lock(&p->qmu);
    if (!p->free_list && p->obs) {
        /* blocked on a full output: time it (drain() takes it out of busy) */
        uint64_t t0 = zpi_now_ns();
        while (!p->free_list && !atomic_load(&p->stop))
            pthread_cond_wait(&p->q_free, &p->qmu);
        uint64_t dt = zpi_now_ns() - t0;
        zpi_ctr_add(&p->obs->batch_blocked_ns, dt);
    }
    while (!p->free_list && !atomic_load(&p->stop))
        pthread_cond_wait(&p->q_free, &p->qmu);
    zpi_batchbuf *bb = atomic_load(&p->stop) ? NULL : p->free_list;
    if (bb)
        p->free_list = bb->next;
    pthread_mutex_unlock(&p->qmu);
    *out = bb;
    return bb ? ZP_OK : ZP_ERR_STATE;
}

void zpi_out_push(zp_pipeline *p, zpi_batchbuf *bb)
{
    bb->next = NULL;
    pthread_mutex_lock(&p->qmu);
    if (p->ready_tail)
        p->ready_tail->next = bb;
    else
        p->ready_head = bb;
    p->ready_tail = bb;
    pthread_cond_signal(&p->q_ready);
    pthread_mutex_unlock(&p->qmu);
}

void zpi_out_finish(zp_pipeline *p, zp_status st, const char *msg)
{
    pthread_mutex_lock(&p->qmu);
    if (!p->final_set) {
        p->final_set = 1;
        p->final_status = st;
        zpi_fmt(p->final_msg, sizeof p->final_msg, "%s", msg ? msg : "");
        p->counts.skipped += p->pk.pending.skipped;
        p->counts.filtered += p->pk.pending.filtered;
        memset(&p->pk.pending, 0, sizeof p->pk.pending);
    }
    pthread_cond_broadcast(&p->q_ready);
    pthread_mutex_unlock(&p->qmu);
}

/* ------------------------------------------------------------ batch building */

static zp_status begin_batch(zp_pipeline *p, uint32_t epoch)
{
    zpi_packer *pk = &p->pk;
    zpi_batchbuf *bb;
    zp_status st = zpi_out_get_free(p, &bb);
    if (st != ZP_OK)
        return st;
    memset(&bb->b, 0, sizeof bb->b);
    memset(&bb->delta, 0, sizeof bb->delta);
    bb->b.epoch = epoch;
    bb->b.mode = p->tok ? p->cfg.pack : ZP_PACK_RECORDS;
    bb->data_len = 0;
    if (p->tok) {
        /* no initialisation: every position is written, by a token or by
         * pad_range() when the row or the batch is closed */
        bb->b.cols = p->cfg.seq_len + 1;
        bb->b.rows = p->cfg.microbatch_size;
    } else {
        bb->offsets[0] = 0;
    }
    pk->cur = bb;
    pk->row = 0;
    pk->col = 0;
    pk->seg = 0;
    return ZP_OK;
}

/* Token modes: positions [from, to) of the batch are padding: EOT tokens,
 * loss mask 0, segment -1. */
static void pad_range(zp_pipeline *p, zpi_batchbuf *bb, size_t from, size_t to)
{
    if (from >= to)
        return;
    for (size_t i = from; i < to; i++)
        bb->tokens[i] = p->eot;
    memset(bb->mask + from, 0, to - from);
    memset(bb->seg + from, 0xff, (to - from) * sizeof *bb->seg); /* -1 */
    bb->delta.pad_tokens += to - from;
}

static void push_batch(zp_pipeline *p, int last_in_epoch)
{
    zpi_packer *pk = &p->pk;
    zpi_batchbuf *bb = pk->cur;
    zp_batch *b = &bb->b;
    b->index = pk->next_index++;
    b->last_in_epoch = last_in_epoch;
    b->samples = bb->samples;
    if (p->tok) {
        b->tokens = bb->tokens;
        b->loss_mask = bb->mask;
        b->segment_ids = bb->seg;
        size_t filled = pk->row + (pk->col > 0 ? 1 : 0);
        if (filled > p->cfg.microbatch_size)
            filled = p->cfg.microbatch_size;
        b->rows_filled = filled;
        /* what follows the fill position is padding (pad mode fills each
         * row's tail as it closes the row) */
        size_t at = pk->row * b->cols + pk->col, n = b->rows * b->cols;
        pad_range(p, bb, at < n ? at : n, n);
    } else {
        b->data = bb->data;
        b->offsets = bb->offsets;
    }
    bb->delta.skipped += pk->pending.skipped;
    bb->delta.filtered += pk->pending.filtered;
    memset(&pk->pending, 0, sizeof pk->pending);
    pk->cur = NULL;
    zpi_out_push(p, bb);
}

static zp_status add_sample(zpi_batchbuf *bb, const zp_sample *s)
{
    zp_batch *b = &bb->b;
    if (b->n_samples == bb->samples_cap) {
        size_t nc = bb->samples_cap * 2;
        zp_sample *ns = realloc(bb->samples, nc * sizeof *ns);
        if (!ns)
            return ZP_ERR_NOMEM;
        bb->samples = ns;
        bb->samples_cap = nc;
    }
    bb->samples[b->n_samples++] = *s;
    if (s->padded)
        bb->delta.padded++;
    bb->delta.samples++;
    return ZP_OK;
}

static zp_status pack_record(zp_pipeline *p, const zpi_chunk *c, size_t i)
{
    zpi_packer *pk = &p->pk;
    if (pk->cur && pk->cur->b.rows == p->cfg.microbatch_size)
        push_batch(p, 0);
    if (!pk->cur) {
        zp_status st = begin_batch(p, c->epoch);
        if (st != ZP_OK)
            return st;
    }
    zpi_batchbuf *bb = pk->cur;
    const zpi_rec *r = &c->recs[i];
    size_t need = bb->data_len + r->json_len;
    if (need > bb->data_cap) {
        size_t nc = bb->data_cap ? bb->data_cap : 65536;
        while (nc < need)
            nc *= 2;
        char *nd = realloc(bb->data, nc);
        if (!nd)
            return ZP_ERR_NOMEM;
        bb->data = nd;
        bb->data_cap = nc;
    }
    memcpy(bb->data + bb->data_len, c->json + r->json_off, r->json_len);
    bb->data_len += r->json_len;
    zp_status st = add_sample(bb, &c->samples[i]);
    if (st != ZP_OK)
        return st;
    bb->b.rows++;
    bb->offsets[bb->b.rows] = bb->data_len;
    return ZP_OK;
}

/* Concatenate mode: make room for at least one token. A full row is
 * followed by a new one that starts with its last token (the carry). */
static zp_status concat_room(zp_pipeline *p, uint32_t epoch)
{
    zpi_packer *pk = &p->pk;
    size_t cols = p->cfg.seq_len + 1;
    if (pk->cur && pk->col == cols) {
        zpi_batchbuf *bb = pk->cur;
        int32_t carry = bb->tokens[pk->row * cols + cols - 1];
        if (pk->row + 1 == p->cfg.microbatch_size) {
            pk->row = p->cfg.microbatch_size; /* for rows_filled */
            pk->col = 0;
            push_batch(p, 0);
            zp_status st = begin_batch(p, epoch);
            if (st != ZP_OK)
                return st;
        } else {
            pk->row++;
        }
        bb = pk->cur;
        size_t at = pk->row * cols;
        bb->tokens[at] = carry;
        bb->mask[at] = 1;
        bb->seg[at] = 0;
        pk->col = 1;
        pk->seg = carry == p->eot ? 1 : 0;
    }
    if (!pk->cur)
        return begin_batch(p, epoch);
    return ZP_OK;
}

/* Concatenate mode: one document's tokens followed by EOT, copied in spans
 * as long as the rows allow. */
static zp_status pack_concat(zp_pipeline *p, const zpi_chunk *c, size_t i)
{
    zpi_packer *pk = &p->pk;
    const zpi_rec *r = &c->recs[i];
    const int32_t *t = c->tok + r->tok_off;
    size_t n = r->tok_len, total = n + 1, pos = 0, cols = p->cfg.seq_len + 1;
    while (pos < total) {
        zp_status st = concat_room(p, c->epoch);
        if (st != ZP_OK)
            return st;
        zpi_batchbuf *bb = pk->cur;
        if (pos == 0 && (st = add_sample(bb, &c->samples[i])) != ZP_OK)
            return st;
        size_t k = cols - pk->col;
        if (k > total - pos)
            k = total - pos;
        size_t at = pk->row * cols + pk->col;
        size_t from_doc = pos + k <= n ? k : n - pos; /* the span may end with EOT */
        memcpy(bb->tokens + at, t + pos, from_doc * sizeof *t);
        if (from_doc < k)
            bb->tokens[at + from_doc] = p->eot;
        memset(bb->mask + at, 1, k);
        for (size_t j = 0; j < k; j++)
            bb->seg[at + j] = pk->seg;
        pk->col += k;
        pos += k;
    }
    pk->seg++; /* the EOT ended the document */
    pk->cur->delta.tokens += total;
    return ZP_OK;
}

static zp_status pack_pad(zp_pipeline *p, const zpi_chunk *c, size_t i)
{
    zpi_packer *pk = &p->pk;
    size_t cols = p->cfg.seq_len + 1;
    if (pk->cur && pk->row == p->cfg.microbatch_size)
        push_batch(p, 0);
    if (!pk->cur) {
        zp_status st = begin_batch(p, c->epoch);
        if (st != ZP_OK)
            return st;
    }
    zpi_batchbuf *bb = pk->cur;
    const zpi_rec *r = &c->recs[i];
    size_t total = r->tok_len + 1, keep = total < cols ? total : cols;
    int32_t *row = bb->tokens + pk->row * cols;
    size_t from_doc = keep < r->tok_len ? keep : r->tok_len;
    memcpy(row, c->tok + r->tok_off, from_doc * sizeof *row);
    if (keep > r->tok_len)
        row[r->tok_len] = p->eot;
    memset(bb->mask + pk->row * cols, 1, keep);
    memset(bb->seg + pk->row * cols, 0, keep * sizeof *bb->seg);
    pad_range(p, bb, pk->row * cols + keep, (pk->row + 1) * cols);
    bb->delta.tokens += keep;
    bb->delta.truncated_tokens += total - keep;
    zp_status st = add_sample(bb, &c->samples[i]);
    pk->row++;
    pk->col = 0;
    return st;
}

zp_status zpi_pack_chunk(zp_pipeline *p, zpi_chunk *c)
{
    p->pk.pending.skipped += c->skipped;
    p->pk.pending.filtered += c->filtered;
    for (size_t i = 0; i < c->n; i++) {
        if (c->recs[i].flags & (ZPI_REC_SKIP | ZPI_REC_DROP))
            continue;
        zp_status st;
        if (!p->tok)
            st = pack_record(p, c, i);
        else if (p->cfg.pack == ZP_PACK_PAD)
            st = pack_pad(p, c, i);
        else
            st = pack_concat(p, c, i);
        if (st != ZP_OK)
            return st;
    }
    return ZP_OK;
}

zp_status zpi_pack_flush(zp_pipeline *p, int last_in_epoch)
{
    if (p->pk.cur)
        push_batch(p, last_in_epoch);
    return ZP_OK;
}

void zpi_pack_flush_full(zp_pipeline *p)
{
    zpi_packer *pk = &p->pk;
    if (!pk->cur)
        return;
    int full;
    if (!p->tok)
        full = pk->cur->b.rows == p->cfg.microbatch_size;
    else if (p->cfg.pack == ZP_PACK_PAD)
        full = pk->row == p->cfg.microbatch_size;
    else
        full = pk->row + 1 == p->cfg.microbatch_size && pk->col == p->cfg.seq_len + 1;
    if (full) {
        if (p->tok && p->cfg.pack == ZP_PACK_CONCAT)
            pk->row = p->cfg.microbatch_size; /* for rows_filled */
        push_batch(p, 0);
    }
}
