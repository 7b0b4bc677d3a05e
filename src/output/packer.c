/*
 * packer.c - the ordered batch stage (packer.h).
 */
#include "output/packer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

void zpi_packer_init(zpi_packer *pk, const zpi_pack_settings *set, zpi_outq *q,
                     zpi_ctr *blocked_ns)
{
    memset(pk, 0, sizeof *pk);
    pk->set = *set;
    pk->q = q;
    pk->blocked_ns = blocked_ns;
    pk->next_index = set->first_index;
    pk->restore_pending = set->first_offset > 0 || set->first_carry;
    pk->bf.skip_pending = set->mode == ZP_PACK_BESTFIT && set->first_rows > 0;
    if (set->balance) {
        /* the restored window is packed again from its start: its
         * delivered batches keep their numbers and are left out */
        uint64_t done = set->first_bal_done <= set->first_index ? set->first_bal_done : 0;
        pk->bal.skip = done;
        pk->next_index = set->first_index - done;
    }
}

static void bal_free(zpi_bal_window *w)
{
    free(w->b);
    free(w->cost);
    free(w->group);
    free(w->dest);
    free(w->sums);
    free(w->fill);
    zpi_balance_ws_fini(&w->ws);
    free(w->tok);
    free(w->seg);
    free(w->mask);
    free(w->rowpos);
    free(w->racct);
    free(w->rpart);
    for (int k = 0; k < 16; k++)
        free(w->fixed[k]);
    free(w->smp);
    free(w->sg);
    memset(w, 0, sizeof *w);
}

void zpi_packer_fini(zpi_packer *pk)
{
    free(pk->bf.docs);
    free(pk->bf.tok);
    free(pk->bf.pc);
    free(pk->bf.room);
    free(pk->bf.order);
    free(pk->bf.rk);
    memset(&pk->bf, 0, sizeof pk->bf);
    bal_free(&pk->bal);
}

void zpi_packer_take_pending(zpi_packer *pk, zp_pipeline_counts *out)
{
    *out = pk->pending;
    memset(&pk->pending, 0, sizeof pk->pending);
}

/* ------------------------------------------------------------ batch building */

/* Fixed-shape fields: the current batch's arrays, sized for a full batch. */
static zp_status arrays_prepare(zpi_packer *pk, zpi_batchbuf *bb)
{
    size_t na = 0;
    for (int k = 0; pk->has_schema && k < pk->schema.n; k++) {
        const zpi_field *f = &pk->schema.f[k];
        if (f->kind != ZPI_FIELD_FIXED)
            continue;
        size_t need = pk->set.microbatch * f->item_bytes;
        if (need > bb->fixed_cap[k]) {
            void *d = realloc(bb->fixed[k], need);
            if (!d)
                return ZP_ERR_NOMEM;
            bb->fixed[k] = d;
            bb->fixed_cap[k] = need;
        }
        if (pk->set.balance && !pk->bal.fixed[k] &&
            !(pk->bal.fixed[k] = malloc(pk->set.balance * need)))
            return ZP_ERR_NOMEM;
        zp_array *a = &bb->arrays[na++];
        memset(a, 0, sizeof *a);
        a->name = f->name;
        a->dtype = f->dtype;
        a->ndim = 1 + f->ndim;
        for (int d = 0; d < f->ndim; d++)
            a->shape[1 + d] = f->dims[d];
        a->data = bb->fixed[k];
    }
    bb->b.n_arrays = na;
    bb->b.arrays = na ? bb->arrays : NULL;
    return ZP_OK;
}

/* Copies row i of chunk c's fixed fields into row `row` of the batch. */
static zp_status arrays_put(zpi_packer *pk, const zpi_chunk *c, size_t i, size_t row)
{
    if (!c->schema)
        return ZP_OK;
    if (!pk->has_schema) {
        pk->schema = *c->schema;
        pk->has_schema = 1;
        zp_status st = arrays_prepare(pk, pk->cur);
        if (st != ZP_OK)
            return st;
    }
    /* every chunk's schema equals the first (fetch checks each shard's
     * against its chunk's; chunks of different schemas cannot meet here
     * without one of them failing first) */
    for (int k = 0; k < pk->schema.n; k++) {
        const zpi_field *f = &pk->schema.f[k];
        if (f->kind == ZPI_FIELD_FIXED && c->fixed[k])
            memcpy(pk->cur->fixed[k] + row * f->item_bytes, c->fixed[k] + i * f->item_bytes,
                   f->item_bytes);
    }
    return ZP_OK;
}

/* Zeroes rows [from, microbatch) of the batch's arrays and sets their rows. */
static void arrays_finish(zpi_packer *pk, zpi_batchbuf *bb, size_t rows, size_t from)
{
    size_t na = 0;
    for (int k = 0; pk->has_schema && k < pk->schema.n; k++) {
        const zpi_field *f = &pk->schema.f[k];
        if (f->kind != ZPI_FIELD_FIXED)
            continue;
        if (from < rows)
            memset(bb->fixed[k] + from * f->item_bytes, 0, (rows - from) * f->item_bytes);
        bb->arrays[na++].shape[0] = rows;
    }
}

/* Attention balance: the batch's per-row accounts, and (once) the
 * window's scratch. */
static zp_status bal_prepare(zpi_packer *pk, zpi_batchbuf *bb)
{
    const size_t rows = pk->set.microbatch, cols = pk->set.seq_len + 1, K = pk->set.balance;
    const size_t np = pk->set.nparts, n = K * rows;
    if (!bb->racct && !(bb->racct = malloc(rows * sizeof *bb->racct)))
        return ZP_ERR_NOMEM;
    if (np && !bb->rpart && !(bb->rpart = malloc(rows * np * sizeof *bb->rpart)))
        return ZP_ERR_NOMEM;
    memset(bb->racct, 0, rows * sizeof *bb->racct);
    if (np)
        memset(bb->rpart, 0, rows * np * sizeof *bb->rpart);
    zpi_bal_window *w = &pk->bal;
    if (w->b)
        return ZP_OK;
    w->b = malloc(K * sizeof *w->b);
    w->cost = malloc(n * sizeof *w->cost);
    w->group = malloc(n * sizeof *w->group);
    w->dest = malloc(n * sizeof *w->dest);
    w->sums = malloc(K * sizeof *w->sums);
    w->fill = malloc(K * sizeof *w->fill);
    w->tok = malloc(n * cols * sizeof *w->tok);
    w->seg = malloc(n * cols * sizeof *w->seg);
    w->mask = malloc(n * cols);
    w->rowpos = bb->rowpos ? malloc(n * sizeof *w->rowpos) : NULL;
    w->racct = malloc(n * sizeof *w->racct);
    w->rpart = np ? malloc(n * np * sizeof *w->rpart) : NULL;
    if (!w->b || !w->cost || !w->group || !w->dest || !w->sums || !w->fill || !w->tok || !w->seg ||
        !w->mask || (bb->rowpos && !w->rowpos) || !w->racct || (np && !w->rpart) ||
        zpi_balance_ws_init(&w->ws, K, rows) != 0) {
        uint64_t skip = w->skip;
        bal_free(w);
        w->skip = skip;
        return ZP_ERR_NOMEM;
    }
    return ZP_OK;
}

static zp_status begin_batch(zpi_packer *pk, uint32_t epoch)
{
    zpi_batchbuf *bb;
    zp_status st = zpi_outq_get_free(pk->q, pk->blocked_ns, &bb);
    if (st != ZP_OK)
        return st;
    memset(&bb->b, 0, sizeof bb->b);
    memset(&bb->delta, 0, sizeof bb->delta);
    bb->b.epoch = epoch;
    bb->b.mode = pk->set.tokens ? pk->set.mode : ZP_PACK_RECORDS;
    bb->data_len = 0;
    bb->resume.valid = 0;
    if (pk->set.nparts) {
        if (!bb->part_samples) {
            bb->part_samples = calloc(pk->set.nparts, sizeof *bb->part_samples);
            bb->part_tokens = calloc(pk->set.nparts, sizeof *bb->part_tokens);
            if (!bb->part_samples || !bb->part_tokens)
                return ZP_ERR_NOMEM; /* the buffer keeps what it got; freed with the queue */
        }
        memset(bb->part_samples, 0, pk->set.nparts * sizeof *bb->part_samples);
        memset(bb->part_tokens, 0, pk->set.nparts * sizeof *bb->part_tokens);
    }
    bb->bal_done = 0;
    if (pk->set.balance && (st = bal_prepare(pk, bb)) != ZP_OK)
        return st;
    if (pk->set.tokens) {
        /* no initialisation: every position is written, by a token or by
         * pad_range() when the row or the batch is closed */
        bb->b.cols = pk->set.seq_len + 1;
        bb->b.rows = pk->set.microbatch;
    } else {
        bb->offsets[0] = 0;
    }
    pk->cur = bb;
    pk->row = 0;
    pk->col = 0;
    pk->seg = 0;
    return arrays_prepare(pk, bb);
}

/* Token modes: positions [from, to) of the batch are padding: EOT tokens,
 * loss mask 0, segment -1. */
static void pad_range(const zpi_packer *pk, zpi_batchbuf *bb, size_t from, size_t to)
{
    if (from >= to)
        return;
    for (size_t i = from; i < to; i++)
        bb->tokens[i] = pk->set.eot;
    memset(bb->mask + from, 0, to - from);
    memset(bb->seg + from, 0xff, (to - from) * sizeof *bb->seg); /* -1 */
    bb->delta.pad_tokens += to - from;
}

/* The stream resumes at sample s, `offset` of its tokens delivered. */
static void set_resume(zpi_packer *pk, const zp_sample *s, uint64_t offset, int carry)
{
    zpi_resume_pt *r = &pk->cur->resume;
    r->valid = 1;
    r->epoch = s->epoch;
    r->position = s->position;
    r->token_offset = offset;
    r->carry = carry;
    r->rows = 0;
    r->n_done = 0;
}

static void part_tokens(zpi_packer *pk, const zp_sample *s, uint64_t n)
{
    if (pk->set.nparts && s->part < pk->set.nparts) {
        pk->cur->part_tokens[s->part] += n;
        if (pk->cur->rpart)
            pk->cur->rpart[pk->row * pk->set.nparts + s->part] += n;
    }
}

/* What the current row adds to the counts, for attention balance (which
 * moves rows between batches; the batch's delta has it too). */
static inline void row_acct(zpi_packer *pk, uint64_t tokens, uint64_t truncated, uint64_t cut)
{
    zpi_rowacct *a = pk->cur->racct;
    if (a) {
        a[pk->row].tokens += tokens;
        a[pk->row].truncated += truncated;
        a[pk->row].cut += cut;
    }
}

/* The row's first token is at position `at` of its document (for
 * ZP_POSITIONS_CONTINUE). */
static inline void row_starts_at(zpi_packer *pk, size_t row, uint64_t at)
{
    if (pk->cur->rowpos)
        pk->cur->rowpos[row] = (int64_t)at;
}

/* position_ids of the batch: 0 at each segment start in a row, the first
 * segment of a real row from its document position in continue mode. */
static void position_ids(const zpi_packer *pk, zpi_batchbuf *bb)
{
    const size_t rows = bb->b.rows, cols = bb->b.cols;
    const int cont = pk->set.positions == ZP_POSITIONS_CONTINUE;
    for (size_t r = 0; r < rows; r++) {
        const int32_t *sg = bb->seg + r * cols;
        int32_t *po = bb->pos + r * cols;
        int64_t p = cont && sg[0] >= 0 ? bb->rowpos[r] : 0;
        po[0] = (int32_t)(p < INT32_MAX ? p : INT32_MAX);
        for (size_t c = 1; c < cols; c++) {
            p = sg[c] != sg[c - 1] ? 0 : p + 1;
            po[c] = (int32_t)(p < INT32_MAX ? p : INT32_MAX);
        }
    }
    bb->b.position_ids = bb->pos;
}

/* cu_seqlens, max_seqlen and doc_counts over the inputs (the first cols - 1
 * positions of each row): a sequence starts at each row start and where
 * the segment id changes. */
static void sequences(zpi_batchbuf *bb)
{
    const size_t rows = bb->b.rows, cols = bb->b.cols, in = cols - 1;
    size_t n = 0;
    int32_t last = 0, maxlen = 0;
    for (size_t r = 0; r < rows; r++) {
        const int32_t *sg = bb->seg + r * cols;
        int32_t docs = 0;
        for (size_t c = 0; c < in; c++) {
            if (c > 0 && sg[c] == sg[c - 1])
                continue;
            int32_t at = (int32_t)(r * in + c);
            if (bb->cu) {
                if (n > 0 && at - last > maxlen)
                    maxlen = at - last;
                bb->cu[n++] = at;
                last = at;
            }
            docs += sg[c] >= 0;
        }
        if (bb->ndocs)
            bb->ndocs[r] = docs;
    }
    if (bb->cu) {
        int32_t end = (int32_t)(rows * in);
        if (n > 0 && end - last > maxlen)
            maxlen = end - last;
        bb->cu[n++] = end;
        bb->b.cu_seqlens = bb->cu;
        bb->b.n_cu_seqlens = n;
        bb->b.max_seqlen = maxlen;
    }
    if (bb->ndocs)
        bb->b.doc_counts = bb->ndocs;
}

/* The document-masking outputs, then the batch to the consumer. */
static void publish(zpi_packer *pk, zpi_batchbuf *bb)
{
    if (pk->set.tokens && bb->pos)
        position_ids(pk, bb);
    if (pk->set.tokens && (bb->cu || bb->ndocs))
        sequences(bb);
    zpi_outq_push(pk->q, bb);
}

/* ------------------------------------------------------------ attention-cost balance
 *
 * The batches of a window (K consecutive batches of the rank's stream, or
 * fewer at the end of an epoch) are held until it is complete. Then each
 * row's cost (zp_row_cost) is taken, zpi_balance_assign gives every row a
 * batch of the window, and the rows move there: each batch's rows in
 * stream order (a padding-only row, the last of an epoch, stays last), its
 * samples the documents whose first token is in its rows, in stream
 * order, its counts those of its rows. A batch's index, epoch, skipped and
 * filtered counts stay with its place in the window. The stream resumes at
 * the window's start for every batch but the last (bal_done: the batches
 * of the window delivered), at the next window for the last. */

static void bal_publish_window(zpi_packer *pk)
{
    zpi_bal_window *w = &pk->bal;
    const size_t n = w->n, rows = pk->set.microbatch, cols = pk->set.seq_len + 1;
    const size_t np = pk->set.nparts, nr = n * rows;
    /* the rows' costs, before */
    uint64_t total = 0, max_before = 0;
    for (size_t j = 0; j < n; j++) {
        zp_batch_row_costs(&w->b[j]->b, w->cost + j * rows);
        uint64_t sum = 0;
        for (size_t r = 0; r < rows; r++)
            sum += w->cost[j * rows + r];
        total += sum;
        if (sum > max_before)
            max_before = sum;
    }
    zpi_balance_assign(w->cost, n, rows, w->group, w->sums, &w->ws);
    uint64_t max_after = 0;
    for (size_t j = 0; j < n; j++)
        if (w->sums[j] > max_after)
            max_after = w->sums[j];
    /* each row's place: its batch's rows in stream order */
    size_t *fill = w->fill;
    memset(fill, 0, n * sizeof *fill);
    for (size_t g = 0; g < nr; g++)
        w->dest[g] = w->group[g] * rows + fill[w->group[g]]++;
    /* copy the rows out, then into their places */
    for (size_t j = 0; j < n; j++) {
        zpi_batchbuf *bb = w->b[j];
        memcpy(w->tok + j * rows * cols, bb->tokens, rows * cols * sizeof *w->tok);
        memcpy(w->seg + j * rows * cols, bb->seg, rows * cols * sizeof *w->seg);
        memcpy(w->mask + j * rows * cols, bb->mask, rows * cols);
        if (w->rowpos)
            memcpy(w->rowpos + j * rows, bb->rowpos, rows * sizeof *w->rowpos);
        memcpy(w->racct + j * rows, bb->racct, rows * sizeof *w->racct);
        if (np)
            memcpy(w->rpart + j * rows * np, bb->rpart, rows * np * sizeof *w->rpart);
        for (int k = 0; pk->has_schema && k < pk->schema.n; k++) {
            const zpi_field *f = &pk->schema.f[k];
            if (f->kind == ZPI_FIELD_FIXED)
                memcpy(w->fixed[k] + j * rows * f->item_bytes, bb->fixed[k],
                       rows * f->item_bytes);
        }
    }
    for (size_t g = 0; g < nr; g++) {
        zpi_batchbuf *bb = w->b[w->dest[g] / rows];
        const size_t r = w->dest[g] % rows;
        memcpy(bb->tokens + r * cols, w->tok + g * cols, cols * sizeof *w->tok);
        memcpy(bb->seg + r * cols, w->seg + g * cols, cols * sizeof *w->seg);
        memcpy(bb->mask + r * cols, w->mask + g * cols, cols);
        if (w->rowpos)
            bb->rowpos[r] = w->rowpos[g];
        bb->racct[r] = w->racct[g];
        if (np)
            memcpy(bb->rpart + r * np, w->rpart + g * np, np * sizeof *w->rpart);
        for (int k = 0; pk->has_schema && k < pk->schema.n; k++) {
            const zpi_field *f = &pk->schema.f[k];
            if (f->kind == ZPI_FIELD_FIXED)
                memcpy(bb->fixed[k] + r * f->item_bytes, w->fixed[k] + g * f->item_bytes,
                       f->item_bytes);
        }
    }
    /* the samples, in stream order, each to its first token's batch */
    w->nsmp = 0;
    for (size_t j = 0; j < n; j++) {
        const zpi_batchbuf *bb = w->b[j];
        for (size_t i = 0; i < bb->b.n_samples; i++, w->nsmp++) {
            w->smp[w->nsmp] = bb->samples[i];
            w->sg[w->nsmp] = w->dest[j * rows + bb->srow[i]];
        }
    }
    for (size_t j = 0; j < n; j++) {
        zpi_batchbuf *bb = w->b[j];
        bb->b.n_samples = 0;
        if (bb->part_samples) {
            memset(bb->part_samples, 0, np * sizeof *bb->part_samples);
            memset(bb->part_tokens, 0, np * sizeof *bb->part_tokens);
        }
        zp_pipeline_counts *d = &bb->delta;
        d->samples = d->padded = d->tokens = d->truncated_tokens = d->cut_documents = 0;
        d->pad_tokens = 0;
        size_t filled = 0;
        for (size_t r = 0; r < rows; r++) {
            d->tokens += bb->racct[r].tokens;
            d->truncated_tokens += bb->racct[r].truncated;
            d->cut_documents += bb->racct[r].cut;
            for (size_t k = 0; k < np; k++)
                bb->part_tokens[k] += bb->rpart[r * np + k];
            size_t real = 0;
            for (size_t c = 0; c < cols; c++)
                real += bb->mask[r * cols + c];
            d->pad_tokens += cols - real;
            filled += real > 0;
        }
        bb->b.rows_filled = filled;
    }
    for (size_t i = 0; i < w->nsmp; i++) {
        zpi_batchbuf *bb = w->b[w->sg[i] / rows];
        /* (the buffers' sample arrays were grown to the window's total) */
        bb->srow[bb->b.n_samples] = (uint32_t)(w->sg[i] % rows);
        bb->samples[bb->b.n_samples++] = w->smp[i];
        if (bb->part_samples && w->smp[i].part < np)
            bb->part_samples[w->smp[i].part]++;
        bb->delta.samples++;
        bb->delta.padded += w->smp[i].padded != 0;
    }
    /* resume points, the window's figures, and out */
    zpi_batchbuf *last = w->b[n - 1];
    last->delta.balance_windows = 1;
    last->delta.attn_cost = total;
    last->delta.attn_peak_before = max_before * n;
    last->delta.attn_peak_after = max_after * n;
    for (size_t j = 0; j < n; j++) {
        zpi_batchbuf *bb = w->b[j];
        if (j + 1 < n) {
            bb->resume.valid = 0;
            bb->bal_done = j + 1;
        }
        if (w->skip > 0 && j + 1 < n && j < w->skip) {
            /* a restored state delivered it: skipped, its counts with it */
            zpi_outq_put_back(pk->q, bb);
            continue;
        }
        publish(pk, bb);
    }
    w->skip = 0;
    w->n = 0;
}

/* The window out when it is complete (room for its samples made first:
 * moving them cannot fail). */
static zp_status bal_out(zpi_packer *pk)
{
    zpi_bal_window *w = &pk->bal;
    size_t total = 0;
    for (size_t j = 0; j < w->n; j++)
        total += w->b[j]->b.n_samples;
    void *a = w->smp;
    if (zpi_grow(&a, &w->smpcap, total + 1, sizeof *w->smp) != 0)
        return ZP_ERR_NOMEM;
    w->smp = a;
    a = w->sg;
    if (zpi_grow(&a, &w->sgcap, total + 1, sizeof *w->sg) != 0)
        return ZP_ERR_NOMEM;
    w->sg = a;
    for (size_t j = 0; j < w->n; j++) {
        zpi_batchbuf *b = w->b[j];
        a = b->samples;
        if (zpi_grow(&a, &b->samples_cap, total + 1, sizeof *b->samples) != 0)
            return ZP_ERR_NOMEM;
        b->samples = a;
        a = b->srow;
        if (zpi_grow(&a, &b->srow_cap, total + 1, sizeof *b->srow) != 0)
            return ZP_ERR_NOMEM;
        b->srow = a;
        b->b.samples = b->samples;
        b->b.sample_rows = b->srow;
    }
    bal_publish_window(pk);
    return ZP_OK;
}

/* A finished batch into the window. */
static zp_status bal_add(zpi_packer *pk, zpi_batchbuf *bb, int last_in_epoch)
{
    zpi_bal_window *w = &pk->bal;
    w->b[w->n++] = bb;
    return w->n < pk->set.balance && !last_in_epoch ? ZP_OK : bal_out(pk);
}

static zp_status push_batch(zpi_packer *pk, int last_in_epoch)
{
    zpi_batchbuf *bb = pk->cur;
    zp_batch *b = &bb->b;
    b->index = pk->next_index++;
    b->last_in_epoch = last_in_epoch;
    b->samples = bb->samples;
    b->sample_rows = bb->srow;
    if (pk->set.tokens) {
        b->tokens = bb->tokens;
        b->loss_mask = bb->mask;
        b->segment_ids = bb->seg;
        size_t filled = pk->row + (pk->col > 0 ? 1 : 0);
        if (filled > pk->set.microbatch)
            filled = pk->set.microbatch;
        b->rows_filled = filled;
        /* what follows the fill position is padding (pad mode fills each
         * row's tail as it closes the row) */
        size_t at = pk->row * b->cols + pk->col, n = b->rows * b->cols;
        pad_range(pk, bb, at < n ? at : n, n);
        arrays_finish(pk, bb, b->rows, filled);
    } else {
        b->data = bb->data;
        b->offsets = bb->offsets;
        arrays_finish(pk, bb, b->rows, b->rows);
    }
    bb->delta.skipped += pk->pending.skipped;
    bb->delta.filtered += pk->pending.filtered;
    memset(&pk->pending, 0, sizeof pk->pending);
    pk->cur = NULL;
    if (pk->set.balance)
        return bal_add(pk, bb, last_in_epoch);
    publish(pk, bb);
    return ZP_OK;
}

/* Sample s, whose first token is in row `row`, to the batch's list. */
static zp_status add_sample(zpi_batchbuf *bb, const zp_sample *s, size_t row)
{
    if (bb->part_samples)
        bb->part_samples[s->part]++;
    zp_batch *b = &bb->b;
    void *arr = bb->samples;
    if (zpi_grow(&arr, &bb->samples_cap, b->n_samples + 1, sizeof *bb->samples) != 0)
        return ZP_ERR_NOMEM;
    bb->samples = arr;
    arr = bb->srow;
    if (zpi_grow(&arr, &bb->srow_cap, b->n_samples + 1, sizeof *bb->srow) != 0)
        return ZP_ERR_NOMEM;
    bb->srow = arr;
    bb->srow[b->n_samples] = (uint32_t)row;
    bb->samples[b->n_samples++] = *s;
    if (s->padded)
        bb->delta.padded++;
    bb->delta.samples++;
    return ZP_OK;
}

static zp_status pack_record(zpi_packer *pk, const zpi_chunk *c, size_t i)
{
    if (pk->cur && pk->cur->b.rows == pk->set.microbatch) {
        set_resume(pk, &c->samples[i], 0, 0);
        zp_status st = push_batch(pk, 0);
        if (st != ZP_OK)
            return st;
    }
    if (!pk->cur) {
        zp_status st = begin_batch(pk, c->epoch);
        if (st != ZP_OK)
            return st;
    }
    zpi_batchbuf *bb = pk->cur;
    const zpi_rec *r = &c->recs[i];
    /* a record read on demand (reader.h) has no JSON: its row is its text */
    const char *src = c->json + r->json_off;
    size_t len = r->json_len;
    if (len == 0 && (r->flags & ZPI_REC_TEXT)) {
        src = c->text + r->text_off;
        len = r->text_len;
    }
    size_t need = bb->data_len + len;
    void *data = bb->data;
    if (zpi_grow(&data, &bb->data_cap, need < 65536 ? 65536 : need, 1) != 0)
        return ZP_ERR_NOMEM;
    bb->data = data;
    if (len)
        memcpy(bb->data + bb->data_len, src, len);
    bb->data_len += len;
    zp_status st = arrays_put(pk, c, i, bb->b.rows);
    if (st != ZP_OK)
        return st;
    st = add_sample(bb, &c->samples[i], bb->b.rows);
    if (st != ZP_OK)
        return st;
    bb->b.rows++;
    bb->offsets[bb->b.rows] = bb->data_len;
    return ZP_OK;
}

/* Concatenate mode: make room for at least one token. A full row is
 * followed by a new one that starts with its last token (the carry). */
static zp_status concat_room(zpi_packer *pk, const zp_sample *s, uint64_t pos)
{
    const uint32_t epoch = s->epoch;
    size_t cols = pk->set.seq_len + 1;
    if (pk->cur && pk->col == cols) {
        zpi_batchbuf *bb = pk->cur;
        int32_t carry = bb->tokens[pk->row * cols + cols - 1];
        if (pk->row + 1 == pk->set.microbatch) {
            pk->row = pk->set.microbatch; /* for rows_filled */
            pk->col = 0;
            set_resume(pk, s, pos, 1);
            zp_status st = push_batch(pk, 0);
            if (st == ZP_OK)
                st = begin_batch(pk, epoch);
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
        pk->seg = carry == pk->set.eot ? 1 : 0;
        /* the carry is this document's token pos - 1, or (pos 0) the
         * previous document's EOT, alone in its segment: position 0 */
        row_starts_at(pk, pk->row, pos > 0 ? pos - 1 : 0);
    }
    if (!pk->cur)
        return begin_batch(pk, epoch);
    return ZP_OK;
}

/* A restored state's token offset beyond its document (n tokens and the
 * EOT: a state carries at most n of them as delivered): refused, naming
 * the field, the document and its length. */
static zp_status bad_offset(zpi_packer *pk, const zp_sample *s, uint64_t off, size_t n,
                            const char *field)
{
    const char *name = pk->set.ds ? zp_dataset_shard_name(pk->set.ds, s->shard) : NULL;
    char shard[64];
    zpi_fmt(shard, sizeof shard, "shard %u", (unsigned)s->shard);
    return zpi_err_set(&pk->err, ZP_ERR_FORMAT,
                       "state: %s = %llu for the document at epoch %u, position %llu ('%s' "
                       "record %llu), which has %zu tokens: at most %zu of them can have been "
                       "delivered (a state edited by hand, or saved for other data?)",
                       field, (unsigned long long)off, (unsigned)s->epoch,
                       (unsigned long long)s->position, name ? name : shard,
                       (unsigned long long)s->record, n, n);
}

/* A document as packed: BOS (when the tokenizer adds one: hb = 1), its
 * tokens t, then EOT. Position j < hb + tok_len of it: */
static inline int32_t doc_at(const zpi_packer *pk, const int32_t *t, size_t hb, size_t j)
{
    return j < hb ? pk->set.bos : t[j - hb];
}

/* Positions [pos, pos + k) of the document (all before its EOT) to dst. */
static void doc_copy(const zpi_packer *pk, int32_t *dst, const int32_t *t, size_t hb, size_t pos,
                     size_t k)
{
    if (k && pos < hb) {
        *dst++ = pk->set.bos;
        pos++;
        k--;
    }
    if (k)
        memcpy(dst, t + (pos - hb), k * sizeof *t);
}

/* Concatenate mode: one document's tokens (after BOS when the tokenizer adds
 * one) followed by EOT, copied in spans as long as the rows allow. n counts
 * the BOS: token offsets in states are positions in the document as packed. */
static zp_status pack_concat(zpi_packer *pk, const zpi_chunk *c, size_t i)
{
    const zpi_rec *r = &c->recs[i];
    const zp_sample *s = &c->samples[i];
    const int32_t *t = c->tok + r->tok_off;
    const size_t hb = pk->set.bos >= 0;
    size_t n = hb + r->tok_len, total = n + 1, pos = 0, cols = pk->set.seq_len + 1;
    if (pk->restore_pending) {
        /* the first document after a restored state: its delivered tokens
         * are skipped, and the first row starts as the saved one would */
        pk->restore_pending = 0;
        if (pk->set.first_offset > n)
            return bad_offset(pk, s, pk->set.first_offset, n, "token_offset");
        pos = (size_t)pk->set.first_offset;
        if (pk->set.first_carry) {
            zp_status st = begin_batch(pk, c->epoch);
            if (st != ZP_OK)
                return st;
            int32_t carry = pos > 0 && pos - 1 < n ? doc_at(pk, t, hb, pos - 1) : pk->set.eot;
            pk->cur->tokens[0] = carry;
            pk->cur->mask[0] = 1;
            pk->cur->seg[0] = 0;
            pk->col = 1;
            pk->seg = carry == pk->set.eot ? 1 : 0;
            row_starts_at(pk, 0, pos > 0 ? pos - 1 : 0);
        }
    } else if (s->token_offset > 0) {
        /* carried over by an elastic resume: the rest of the document */
        if (s->token_offset > n)
            return bad_offset(pk, s, s->token_offset, n, "a plan span's token_offset");
        pos = (size_t)s->token_offset;
    }
    const size_t pos0 = pos;
    while (pos < total) {
        zp_status st = concat_room(pk, s, pos);
        if (st != ZP_OK)
            return st;
        zpi_batchbuf *bb = pk->cur;
        if (pos == 0 && (st = add_sample(bb, &c->samples[i], pk->row)) != ZP_OK)
            return st;
        if (pos == 0 && total > cols - pk->col) {
            bb->delta.cut_documents++; /* it goes on in the next row */
            row_acct(pk, 0, 0, 1);
        }
        size_t k = cols - pk->col;
        if (k > total - pos)
            k = total - pos;
        size_t at = pk->row * cols + pk->col;
        if (pk->col == 0)
            row_starts_at(pk, pk->row, pos);
        size_t from_doc = pos + k <= n ? k : n - pos; /* the span may end with EOT */
        doc_copy(pk, bb->tokens + at, t, hb, pos, from_doc);
        if (from_doc < k)
            bb->tokens[at + from_doc] = pk->set.eot;
        memset(bb->mask + at, 1, k);
        for (size_t j = 0; j < k; j++)
            bb->seg[at + j] = pk->seg;
        pk->col += k;
        pos += k;
        bb->delta.tokens += k;
        row_acct(pk, k, 0, 0);
        part_tokens(pk, s, k);
    }
    if (pos0 < total)
        pk->seg++; /* the EOT ended the document */
    return ZP_OK;
}

static zp_status pack_pad(zpi_packer *pk, const zpi_chunk *c, size_t i)
{
    size_t cols = pk->set.seq_len + 1;
    if (pk->cur && pk->row == pk->set.microbatch) {
        set_resume(pk, &c->samples[i], 0, 0);
        zp_status st = push_batch(pk, 0);
        if (st != ZP_OK)
            return st;
    }
    if (!pk->cur) {
        zp_status st = begin_batch(pk, c->epoch);
        if (st != ZP_OK)
            return st;
    }
    zpi_batchbuf *bb = pk->cur;
    const zpi_rec *r = &c->recs[i];
    /* BOS (when the tokenizer adds one), the tokens, EOT; cut to the row */
    const size_t hb = pk->set.bos >= 0, n = hb + r->tok_len;
    size_t total = n + 1, keep = total < cols ? total : cols;
    int32_t *row = bb->tokens + pk->row * cols;
    row_starts_at(pk, pk->row, 0);
    size_t from_doc = keep < n ? keep : n;
    doc_copy(pk, row, c->tok + r->tok_off, hb, 0, from_doc);
    if (keep > n)
        row[n] = pk->set.eot;
    memset(bb->mask + pk->row * cols, 1, keep);
    memset(bb->seg + pk->row * cols, 0, keep * sizeof *bb->seg);
    pad_range(pk, bb, pk->row * cols + keep, (pk->row + 1) * cols);
    bb->delta.tokens += keep;
    part_tokens(pk, &c->samples[i], keep);
    bb->delta.truncated_tokens += total - keep;
    bb->delta.cut_documents += total > keep;
    row_acct(pk, keep, total - keep, total > keep);
    zp_status st = arrays_put(pk, c, i, pk->row);
    if (st == ZP_OK)
        st = add_sample(bb, &c->samples[i], pk->row);
    pk->row++;
    pk->col = 0;
    return st;
}

/* ------------------------------------------------------------ best-fit packing
 *
 * The documents of a window (the rank's positions [k W, (k + 1) W) of an
 * epoch, W = window) are gathered with their tokens as packed (BOS, tokens,
 * EOT: L positions). A document longer than a row (L > seq_len + 1) is cut
 * into full rows, row j holding its positions [j seq_len, j seq_len +
 * seq_len + 1): consecutive rows overlap by one token, as concat's carry,
 * so that each token is a target once. What is left of it (from the last
 * full row's last token on: a piece of at least 2 positions, or nothing)
 * and the documents that fit a row are placed best-fit decreasing: by
 * length descending, ties in stream order, each into the open row with the
 * least room that holds it (ties: the row opened first), or a new row. The
 * window's rows go out in a fixed order: by the last document (in stream
 * order) each holds, ties in the order they were made (full rows in stream
 * order, then the bins in opening order); a row's pieces in stream order;
 * each row is padded as in pad mode. Nothing depends on timing or threads. */

/* a before b: for the items, length descending then stream order; for the
 * rows, row then stream order (by = 0 / 1) */
static int bf_before(const zpi_bf_piece *a, const zpi_bf_piece *b, int by)
{
    if (by == 0 && a->len != b->len)
        return a->len > b->len;
    if (by == 1 && a->row != b->row)
        return a->row < b->row;
    return a->doc < b->doc;
}

/* Stable merge sort of idx[0..n) (tmp: n more) by bf_before. */
static void bf_sort(const zpi_bf_piece *pc, size_t *idx, size_t *tmp, size_t n, int by)
{
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = bf_before(&pc[idx[j]], &pc[idx[i]], by) ? idx[j++] : idx[i++];
            while (i < mid)
                tmp[k++] = idx[i++];
            while (j < hi)
                tmp[k++] = idx[j++];
        }
        memcpy(idx, tmp, n * sizeof *idx);
    }
}

static zp_status bf_piece(zpi_bf_window *w, size_t doc, size_t from, size_t len, size_t row)
{
    void *a = w->pc;
    if (zpi_grow(&a, &w->pccap, w->npc + 1, sizeof *w->pc) != 0)
        return ZP_ERR_NOMEM;
    w->pc = a;
    w->pc[w->npc++] = (zpi_bf_piece){.doc = doc, .from = from, .len = len, .row = row};
    return ZP_OK;
}

/* The window's documents delivered by its first r rows, into the resume
 * point of the batch being filled: (k, 0) for a document at pos0 + k all of
 * whose pieces are in them, (k, t) for one whose first pieces are (its
 * first t positions delivered: the next piece starts at t - 1). A piece
 * list is its document's full rows, then its rest: the delivered ones are
 * always the first. */
static zp_status bf_done_list(zpi_packer *pk, size_t r)
{
    zpi_bf_window *w = &pk->bf;
    zpi_batchbuf *bb = pk->cur;
    zpi_resume_pt *rp = &bb->resume;
    rp->n_done = 0;
    for (size_t d = 0, j = 0; r > 0 && d < w->n; d++) { /* (r = 0: nothing delivered) */
        size_t g = j, nd = 0;
        while (j < w->npc && w->pc[j].doc == d) {
            nd += w->pc[j].row < r;
            j++;
        }
        uint64_t t;
        if (nd == j - g)
            t = 0; /* whole (or nothing was left of it) */
        else if (nd > 0)
            t = w->pc[g + nd].from + 1;
        else
            continue;
        void *a = bb->done;
        if (zpi_grow(&a, &bb->done_cap, 2 * (rp->n_done + 1), sizeof *bb->done) != 0)
            return ZP_ERR_NOMEM;
        bb->done = a;
        bb->done[2 * rp->n_done] = w->docs[d].s.position - w->pos0;
        bb->done[2 * rp->n_done + 1] = t;
        rp->n_done++;
    }
    rp->done = bb->done;
    return ZP_OK;
}

/* One row of the window (pieces idx[a..b)), row r of it, into the batch. */
static zp_status bf_row(zpi_packer *pk, const size_t *idx, size_t a, size_t b, size_t r)
{
    zpi_bf_window *w = &pk->bf;
    const size_t cols = pk->set.seq_len + 1;
    if (pk->cur && pk->row == pk->set.microbatch) {
        /* the stream resumes at this window, r of its rows delivered */
        zpi_resume_pt *rp = &pk->cur->resume;
        rp->valid = 1;
        rp->epoch = w->epoch;
        rp->position = w->pos0;
        rp->token_offset = 0;
        rp->carry = 0;
        rp->rows = r;
        zp_status st = bf_done_list(pk, r);
        if (st == ZP_OK)
            st = push_batch(pk, 0);
        if (st != ZP_OK)
            return st;
    }
    if (!pk->cur) {
        zp_status st = begin_batch(pk, w->epoch);
        if (st != ZP_OK)
            return st;
    }
    zpi_batchbuf *bb = pk->cur;
    const size_t at = pk->row * cols;
    size_t col = 0;
    row_starts_at(pk, pk->row, w->pc[idx[a]].from);
    for (size_t k = a; k < b; k++) {
        const zpi_bf_piece *p = &w->pc[idx[k]];
        const zpi_bf_doc *d = &w->docs[p->doc];
        memcpy(bb->tokens + at + col, w->tok + d->off + p->from, p->len * sizeof *w->tok);
        memset(bb->mask + at + col, 1, p->len);
        for (size_t j = 0; j < p->len; j++)
            bb->seg[at + col + j] = (int32_t)(k - a);
        if (p->from == 0) {
            /* the document's first token (a resumed span's document was
             * listed and counted when its first token went out) */
            zp_status st = add_sample(bb, &d->s, pk->row);
            if (st != ZP_OK)
                return st;
            if (d->len > cols) {
                bb->delta.cut_documents++;
                row_acct(pk, 0, 0, 1);
            }
        }
        /* a piece from inside its document starts with the token the row
         * before ended with (or a resumed span's last delivered one) */
        size_t n = p->len - (p->from > 0);
        bb->delta.tokens += n;
        row_acct(pk, n, 0, 0);
        part_tokens(pk, &d->s, n);
        col += p->len;
    }
    pad_range(pk, bb, at + col, at + cols);
    pk->row++;
    pk->col = 0;
    return ZP_OK;
}

/* Packs the gathered window and puts its rows into batches. */
static zp_status bf_window_done(zpi_packer *pk)
{
    zpi_bf_window *w = &pk->bf;
    const size_t cols = pk->set.seq_len + 1, sl = pk->set.seq_len;
    zp_status st;
    w->open = 0;
    w->npc = 0;
    /* full rows, in stream order */
    size_t nfull = 0, nitems = 0;
    for (size_t d = 0; d < w->n; d++) {
        size_t b = w->docs[d].start, L = w->docs[d].len;
        while (L - b > cols) {
            if ((st = bf_piece(w, d, b, cols, nfull++)) != ZP_OK)
                return st;
            b += sl;
        }
        if (b == 0 || L - b >= 2) {
            if ((st = bf_piece(w, d, b, L - b, SIZE_MAX)) != ZP_OK)
                return st;
            nitems++;
        }
    }
    void *a = w->order;
    if (zpi_grow(&a, &w->ordercap, 2 * w->npc + 1, sizeof *w->order) != 0)
        return ZP_ERR_NOMEM;
    w->order = a;
    a = w->room;
    if (zpi_grow(&a, &w->roomcap, nitems + 1, sizeof *w->room) != 0)
        return ZP_ERR_NOMEM;
    w->room = a;
    size_t *idx = w->order, *tmp = w->order + w->npc;
    /* best-fit decreasing over the items */
    size_t ni = 0;
    for (size_t k = 0; k < w->npc; k++)
        if (w->pc[k].row == SIZE_MAX)
            idx[ni++] = k;
    bf_sort(w->pc, idx, tmp, ni, 0);
    size_t nbins = 0;
    for (size_t k = 0; k < ni; k++) {
        zpi_bf_piece *p = &w->pc[idx[k]];
        size_t best = SIZE_MAX;
        for (size_t j = 0; j < nbins; j++)
            if (w->room[j] >= p->len && (best == SIZE_MAX || w->room[j] < w->room[best]))
                best = j;
        if (best == SIZE_MAX) {
            best = nbins++;
            w->room[best] = cols;
        }
        w->room[best] -= p->len;
        p->row = nfull + best;
    }
    /* The rows' order: by the last document (in stream order) each holds,
     * ties in the order they were made (a long document's full rows, then
     * the bins in opening order), so that the rows follow the stream. A
     * long document's rest lies in a row whose last document is it or a
     * later one, made after its full rows: its delivered pieces are always
     * its first ones (bf_done_list). */
    const size_t rows = nfull + nbins;
    a = w->rk;
    if (zpi_grow(&a, &w->rkcap, 4 * rows + 1, sizeof *w->rk) != 0)
        return ZP_ERR_NOMEM;
    w->rk = a;
    size_t *key = w->rk, *ord = key + rows, *otmp = ord + rows, *rank = otmp + rows;
    for (size_t r = 0; r < rows; r++) {
        key[r] = 0;
        ord[r] = r;
    }
    for (size_t k = 0; k < w->npc; k++)
        if (w->pc[k].doc > key[w->pc[k].row])
            key[w->pc[k].row] = w->pc[k].doc;
    for (size_t span = 1; span < rows; span *= 2) { /* stable merge sort by key */
        for (size_t lo = 0; lo < rows; lo += 2 * span) {
            size_t mid = lo + span < rows ? lo + span : rows;
            size_t hi = lo + 2 * span < rows ? lo + 2 * span : rows;
            size_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi)
                otmp[o++] = key[ord[j]] < key[ord[i]] ? ord[j++] : ord[i++];
            while (i < mid)
                otmp[o++] = ord[i++];
            while (j < hi)
                otmp[o++] = ord[j++];
        }
        memcpy(ord, otmp, rows * sizeof *ord);
    }
    for (size_t r = 0; r < rows; r++)
        rank[ord[r]] = r;
    for (size_t k = 0; k < w->npc; k++)
        w->pc[k].row = rank[w->pc[k].row];
    /* the rows in order, each row's pieces in stream order */
    for (size_t k = 0; k < w->npc; k++)
        idx[k] = k;
    bf_sort(w->pc, idx, tmp, w->npc, 1);
    size_t skip = 0;
    if (w->skip_pending) {
        w->skip_pending = 0;
        skip = (size_t)pk->set.first_rows;
        if (pk->set.first_rows > rows) {
            const zp_sample *s = &w->docs[0].s;
            return zpi_err_set(&pk->err, ZP_ERR_FORMAT,
                               "state: window_rows = %llu for the best-fit window at epoch %u, "
                               "position %llu, which packs into %zu rows (a state edited by "
                               "hand, or saved for other data or another window?)",
                               (unsigned long long)pk->set.first_rows, (unsigned)s->epoch,
                               (unsigned long long)w->pos0, rows);
        }
    }
    for (size_t k = 0, r = 0; k < w->npc; r++) {
        size_t e = k;
        while (e < w->npc && w->pc[idx[e]].row == w->pc[idx[k]].row)
            e++;
        if (r >= skip && (st = bf_row(pk, idx, k, e, r)) != ZP_OK)
            return st;
        k = e;
    }
    w->n = 0;
    w->ntok = 0;
    return ZP_OK;
}

/* Best-fit packing: one document into the window (the window before it
 * packed first when it belongs to another). */
static zp_status bf_add(zpi_packer *pk, const zpi_chunk *c, size_t i)
{
    zpi_bf_window *w = &pk->bf;
    const zp_sample *s = &c->samples[i];
    const uint64_t id = s->position / pk->set.window;
    zp_status st;
    if (w->open && (s->epoch != w->epoch || id != w->id) && (st = bf_window_done(pk)) != ZP_OK)
        return st;
    if (!w->open) {
        w->open = 1;
        w->epoch = s->epoch;
        w->id = id;
        w->pos0 = s->position;
    }
    const zpi_rec *r = &c->recs[i];
    const int32_t *t = c->tok + r->tok_off;
    const size_t hb = pk->set.bos >= 0, n = hb + r->tok_len, L = n + 1;
    size_t start = 0;
    if (s->token_offset > 0) {
        /* carried over by an elastic resume: the rest of the document,
         * from its last delivered token on */
        if (s->token_offset > n)
            return bad_offset(pk, s, s->token_offset, n, "a plan span's token_offset");
        start = (size_t)s->token_offset - 1;
    }
    void *a = w->docs;
    if (zpi_grow(&a, &w->cap, w->n + 1, sizeof *w->docs) != 0)
        return ZP_ERR_NOMEM;
    w->docs = a;
    a = w->tok;
    if (zpi_grow(&a, &w->tokcap, w->ntok + L, sizeof *w->tok) != 0)
        return ZP_ERR_NOMEM;
    w->tok = a;
    int32_t *dst = w->tok + w->ntok;
    doc_copy(pk, dst, t, hb, 0, n);
    dst[n] = pk->set.eot;
    w->docs[w->n++] = (zpi_bf_doc){.s = *s, .off = w->ntok, .len = L, .start = start};
    w->ntok += L;
    return ZP_OK;
}

zp_status zpi_pack_chunk(zpi_packer *pk, const zpi_chunk *c)
{
    pk->pending.skipped += c->skipped;
    pk->pending.filtered += c->filtered;
    pk->last_epoch = c->epoch;
    const int bestfit = pk->set.tokens && pk->set.mode == ZP_PACK_BESTFIT;
    for (size_t i = 0; i < c->n; i++) {
        if (c->recs[i].flags & (ZPI_REC_SKIP | ZPI_REC_DROP))
            continue;
        zp_status st;
        if (bestfit)
            st = bf_add(pk, c, i);
        else if (!pk->set.tokens)
            st = pack_record(pk, c, i);
        else if (pk->set.mode == ZP_PACK_PAD)
            st = pack_pad(pk, c, i);
        else
            st = pack_concat(pk, c, i);
        if (st != ZP_OK)
            return st;
    }
    /* a window never spans epochs */
    if (bestfit && c->last_in_epoch && pk->bf.open)
        return bf_window_done(pk);
    return ZP_OK;
}

zp_status zpi_pack_flush(zpi_packer *pk, int last_in_epoch)
{
    if (!pk->cur)
        return pk->bal.n && last_in_epoch ? bal_out(pk) : ZP_OK; /* (the window as it is) */
    /* the end of an epoch: the stream resumes at the next one's start */
    zpi_resume_pt *r = &pk->cur->resume;
    r->valid = last_in_epoch && pk->last_epoch != UINT32_MAX;
    r->epoch = pk->last_epoch + 1;
    r->position = 0;
    r->token_offset = 0;
    r->carry = 0;
    r->rows = 0;
    r->n_done = 0;
    return push_batch(pk, last_in_epoch);
}

void zpi_pack_flush_full(zpi_packer *pk)
{
    if (!pk->cur)
        return;
    const zpi_pack_settings *set = &pk->set;
    int full;
    if (!set->tokens)
        full = pk->cur->b.rows == set->microbatch;
    else if (set->mode == ZP_PACK_PAD || set->mode == ZP_PACK_BESTFIT)
        full = pk->row == set->microbatch;
    else
        full = pk->row + 1 == set->microbatch && pk->col == set->seq_len + 1;
    if (full) {
        if (set->tokens && set->mode == ZP_PACK_CONCAT)
            pk->row = set->microbatch; /* for rows_filled */
        (void)push_batch(pk, 0); /* a balance window stays held */
    }
}
