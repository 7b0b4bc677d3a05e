/*
 * state_merge.c - rank states into a job state, and a job state re-split
 * for another world size (the elastic resume) (state.h, docs/state.md).
 *
 * Thread safety: no shared state; every call works on its arguments.
 */
#include "plan/state.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "zephon/worksource.h"

/* ------------------------------------------------------------ merge */

/* How b differs from a (a job-wide field), into msg; 0 when it does not. */
static int job_diff(const zpi_state *a, const zpi_state *b, char *msg, size_t cap)
{
    if (a->version != b->version)
        return zpi_fmt(msg, cap, "version %d, %d in", b->version, a->version), 1;
    if (a->seed != b->seed)
        return zpi_fmt(msg, cap, "seed %" PRIu64 ", %" PRIu64 " in", b->seed, a->seed), 1;
    if (a->world_size != b->world_size)
        return zpi_fmt(msg, cap, "world_size %" PRIu32 ", %" PRIu32 " in", b->world_size,
                       a->world_size),
               1;
    if (a->epoch_samples != b->epoch_samples)
        return zpi_fmt(msg, cap, "epoch_samples %" PRIu64 ", %" PRIu64 " in", b->epoch_samples,
                       a->epoch_samples),
               1;
    if (a->remainder != b->remainder)
        return zpi_fmt(msg, cap, "remainder %s, %s in", zpi_remainder_name(b->remainder),
                       zpi_remainder_name(a->remainder)),
               1;
    if (a->settings_hash != b->settings_hash ||
        (a->settings != b->settings && strcmp(a->settings, b->settings) != 0))
        return zpi_fmt(msg, cap,
                       "settings (hash %016" PRIx64 ": %.200s), hash %016" PRIx64 " (%.200s) in",
                       b->settings_hash, b->settings, a->settings_hash, a->settings),
               1;
    if (a->n_parts != b->n_parts)
        return zpi_fmt(msg, cap, "%zu parts, %zu in", b->n_parts, a->n_parts), 1;
    for (size_t i = 0; i < a->n_parts && a->part_names != b->part_names; i++)
        if (strcmp(a->part_names[i], b->part_names[i]) != 0 ||
            a->part_weights[i] != b->part_weights[i])
            return zpi_fmt(msg, cap, "part %zu = %s (weight %.17g), %s (weight %.17g) in", i,
                           b->part_names[i], b->part_weights[i], a->part_names[i],
                           a->part_weights[i]),
                   1;
    if (a->sched.n_phases != b->sched.n_phases || a->sched.since != b->sched.since ||
        (a->sched.n_phases && !zpi_sched_same_draws(&a->sched, &b->sched)))
        return zpi_fmt(msg, cap, "a schedule of %zu phases since draw %" PRIu64
                       ", %zu phases since draw %" PRIu64 " in",
                       b->sched.n_phases, b->sched.since, a->sched.n_phases, a->sched.since),
               1;
    return 0;
}

zp_status zpi_state_merge(const zpi_state *const *in, size_t n, zpi_state *out, zpi_err *err)
{
    memset(out, 0, sizeof *out);
    ZPI_RETURN_ERR_IF(n == 0, err, ZP_ERR_INVALID, "merge: no states given");
    const zpi_state *a = in[0];
    ZPI_RETURN_ERR_IF(a->n_ranks == 0, err, ZP_ERR_INVALID, "merge: state 0 holds no rank");
    uint32_t w = a->world_size;
    const zpi_rank_state **by = zpi_state_alloc_n(w, sizeof *by);
    ZPI_RETURN_ERR_IF(!by, err, ZP_ERR_NOMEM, "merge: out of memory");
    zp_status st = ZP_OK;
    char msg[700];
    size_t total = 0;
    for (size_t i = 0; i < n && st == ZP_OK; i++) {
        const zpi_state *b = in[i];
        for (size_t k = 0; k < b->n_ranks && st == ZP_OK; k++) {
            const zpi_rank_state *r = &b->ranks[k];
            if (job_diff(a, b, msg, sizeof msg)) {
                st = zpi_err_set(err, ZP_ERR_MISMATCH,
                                 "rank %" PRIu32 "'s state differs from rank %" PRIu32
                                 "'s: %s rank %" PRIu32 "'s",
                                 r->rank, a->ranks[0].rank, msg, a->ranks[0].rank);
            } else if (r->next_batch != a->ranks[0].next_batch) {
                st = zpi_err_set(err, ZP_ERR_MISMATCH,
                                 "rank %" PRIu32 "'s state differs from rank %" PRIu32
                                 "'s: next_batch %" PRIu64 ", %" PRIu64 " in rank %" PRIu32
                                 "'s (the states were not saved after the same batch)",
                                 r->rank, a->ranks[0].rank, r->next_batch,
                                 a->ranks[0].next_batch, a->ranks[0].rank);
            } else if (r->rank >= w) {
                st = zpi_err_set(err, ZP_ERR_MISMATCH,
                                 "rank %" PRIu32 ": not a rank of a job of %" PRIu32, r->rank, w);
            } else if (by[r->rank]) {
                st = zpi_err_set(err, ZP_ERR_MISMATCH,
                                 "rank %" PRIu32 " appears twice (state %zu and an earlier one)",
                                 r->rank, i);
            } else {
                by[r->rank] = r;
                total++;
            }
        }
    }
    for (uint32_t r = 0; r < w && st == ZP_OK; r++)
        if (!by[r])
            st = zpi_err_set(err, ZP_ERR_MISMATCH,
                             "rank %" PRIu32 " is missing: a job of %" PRIu32
                             " ranks needs the state of each (%zu given)",
                             r, w, total);
    if (st == ZP_OK) {
        *out = *a;
        out->borrowed = 0;
        out->settings = zpi_strdup(a->settings);
        out->part_names = zpi_state_alloc_n(a->n_parts, sizeof(char *));
        out->part_weights = zpi_state_dup_n(a->part_weights, a->n_parts, sizeof(double));
        memset(&out->sched, 0, sizeof out->sched);
        out->n_parts = 0;
        out->n_ranks = 0;
        out->ranks = zpi_state_alloc_n(w, sizeof *out->ranks);
        int bad = !out->settings || !out->part_names || !out->part_weights || !out->ranks;
        if (!bad && a->sched.n_phases)
            bad = zpi_sched_copy(&out->sched, &a->sched) != ZP_OK;
        for (size_t i = 0; !bad && i < a->n_parts; i++) {
            out->part_names[i] = zpi_strdup(a->part_names[i]);
            out->n_parts = i + 1;
            bad = !out->part_names[i];
        }
        if (!bad)
            out->n_parts = a->n_parts;
        for (uint32_t r = 0; !bad && r < w; r++) {
            bad = zpi_rank_state_copy(&out->ranks[r], by[r]) != ZP_OK;
            if (!bad)
                out->n_ranks = r + 1;
        }
        if (bad) {
            zpi_state_clear(out);
            st = zpi_err_set(err, ZP_ERR_NOMEM, "merge: out of memory");
        }
    }
    free(by);
    return st;
}

/* ------------------------------------------------------------ elastic re-split */

typedef struct spanlist {
    zpi_span *v;
    size_t n, cap;
    uint64_t total;
} spanlist;

/* Appends [start, start + count) (nothing when count is 0), joining it to
 * the last span (when join is set) if it continues it and carries no token
 * offset. */
static int sl_push(spanlist *l, uint64_t start, uint64_t count, uint64_t tok, int join)
{
    if (!count)
        return 0;
    zpi_span *last = l->n ? &l->v[l->n - 1] : NULL;
    if (join && last && !tok && last->start + last->count == start) {
        last->count += count;
    } else {
        if (zpi_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v) != 0)
            return -1;
        l->v[l->n++] = (zpi_span){.start = start, .count = count, .token_offset = tok};
    }
    l->total += count;
    return 0;
}

/* [a, a + c) less its padding positions (>= n), appended to l. */
static int push_real(spanlist *l, uint64_t n, uint64_t a, uint64_t c, uint64_t tok)
{
    if (a >= n || !c)
        return 0;
    return sl_push(l, a, c > n - a ? n - a : c, tok, 1);
}

/* Old rank r's remaining real positions of epoch e, appended to l. A rank
 * stopped inside a best-fit window (window_rows) leaves out the documents
 * of it delivered whole and continues those delivered in part from their
 * token offset (window_done). */
static int add_remaining(spanlist *l, const zpi_state *s, const zpi_rank_state *r, uint32_t e)
{
    if (r->epoch > e)
        return 0;
    const zpi_epoch_plan *p = zpi_rank_find_plan(r, e);
    zpi_span def = {0, 0, 0};
    const zpi_span *sp = &def;
    size_t ns = 1;
    if (p) {
        sp = p->spans;
        ns = p->n;
    } else {
        zpi_state_default_range(s->epoch_samples, s->world_size, s->remainder, r->rank,
                                &def.start, &def.count);
    }
    uint64_t skip = r->epoch == e ? r->position : 0;
    int first = r->epoch == e;
    uint64_t n = s->epoch_samples;
    const uint64_t *wd = r->epoch == e && r->window_rows ? r->window_done : NULL;
    const size_t nwd = wd ? r->n_window_done : 0;
    size_t wi = 0;
    uint64_t rel = 0; /* positions after r->position before this span's rest */
    for (size_t i = 0; i < ns; i++) {
        uint64_t a = sp[i].start, c = sp[i].count, tok = sp[i].token_offset;
        if (skip >= c) {
            skip -= c;
            continue;
        }
        if (skip) {
            a += skip;
            c -= skip;
            tok = 0;
            skip = 0;
        }
        if (first && r->token_offset > tok)
            tok = r->token_offset;
        first = 0;
        /* padding positions are left out (push_real) */
        const uint64_t a0 = a, end = a + c;
        for (; wi < nwd && wd[2 * wi] < rel + c; wi++) {
            uint64_t at = a0 + (wd[2 * wi] - rel), t = wd[2 * wi + 1];
            if (push_real(l, n, a, at - a, tok) != 0 || (t && push_real(l, n, at, 1, t) != 0))
                return -1;
            tok = 0;
            a = at + 1;
        }
        if (push_real(l, n, a, end - a, tok) != 0)
            return -1;
        rel += c;
    }
    return 0;
}

/* Positions [lo, hi) of the concatenation of `all`, appended to l; a piece
 * keeps its span's token offset when it starts with the span's first
 * sample. */
static int slice(spanlist *l, const spanlist *all, uint64_t lo, uint64_t hi)
{
    uint64_t off = 0;
    for (size_t i = 0; i < all->n && off < hi; i++) {
        const zpi_span *sp = &all->v[i];
        uint64_t a = off, b = off + sp->count;
        off = b;
        if (b <= lo)
            continue;
        uint64_t from = a > lo ? a : lo, to = b < hi ? b : hi;
        if (sl_push(l, sp->start + (from - a), to - from, from == a ? sp->token_offset : 0, 1) !=
            0)
            return -1;
    }
    return 0;
}

/* The error for a state that holds some ranks of its world only. */
static zp_status held_error(const zpi_state *s, uint32_t rank, uint32_t world_size, zpi_err *err)
{
    char held[64];
    if (s->n_ranks == 1)
        zpi_fmt(held, sizeof held, "rank %" PRIu32, s->ranks[0].rank);
    else
        zpi_fmt(held, sizeof held, "%zu ranks", s->n_ranks);
    if (world_size == s->world_size)
        return zpi_err_set(err, ZP_ERR_INVALID,
                           "the state holds %s of %" PRIu32 " only, not rank %" PRIu32
                           ": restore each rank's own state, or the job state of all %" PRIu32,
                           held, s->world_size, rank, s->world_size);
    return zpi_err_set(err, ZP_ERR_INVALID,
                       "the state holds %s of %" PRIu32 " only; restoring on %" PRIu32
                       " ranks needs the job state of all %" PRIu32,
                       held, s->world_size, world_size, s->world_size);
}

/* The epochs [*e0, *e1] that the job state's ranks still have to read;
 * an error when the ranks were not saved after the same batch. */
static zp_status epoch_range(const zpi_state *s, uint32_t *e0, uint32_t *e1, zpi_err *err)
{
    *e0 = UINT32_MAX;
    *e1 = 0;
    for (size_t k = 0; k < s->n_ranks; k++) {
        const zpi_rank_state *r = &s->ranks[k];
        ZPI_RETURN_ERR_IF(r->next_batch != s->ranks[0].next_batch, err, ZP_ERR_INVALID,
                          "rank %" PRIu32 "'s next_batch %" PRIu64 " differs from rank %" PRIu32
                          "'s %" PRIu64 ": not a job state saved after one batch",
                          r->rank, r->next_batch, s->ranks[0].rank, s->ranks[0].next_batch);
        if (r->epoch < *e0)
            *e0 = r->epoch;
        if (r->epoch > *e1)
            *e1 = r->epoch;
        if (r->n_plans && r->plans[r->n_plans - 1].epoch > *e1)
            *e1 = r->plans[r->n_plans - 1].epoch;
    }
    return ZP_OK;
}

/* Appends to o the plan of epoch e for rank of world_size: its share of
 * the samples every rank has left in e; nonzero when out of memory. */
static int plan_epoch(zpi_rank_state *o, const zpi_state *s, uint32_t rank, uint32_t world_size,
                      uint32_t e)
{
    uint64_t n = s->epoch_samples;
    spanlist all = {0}, mine = {0};
    int bad = 0;
    for (size_t k = 0; !bad && k < s->n_ranks; k++)
        bad = add_remaining(&all, s, &s->ranks[k], e) != 0;
    uint64_t l = all.total, w = world_size;
    uint64_t per = l / w + (s->remainder == ZP_REMAINDER_PAD && l % w ? 1 : 0);
    uint64_t lo = rank * per, hi = lo + per;
    if (lo > l)
        lo = l;
    if (hi > l)
        hi = l;
    if (!bad)
        bad = slice(&mine, &all, lo, hi) != 0;
    if (!bad && s->remainder == ZP_REMAINDER_PAD) {
        /* padding repeats the epoch's first samples, k counting up over
         * the ranks left short */
        uint64_t k0 = rank * per - lo;
        bad = sl_push(&mine, n + k0, per - (hi - lo), 0, 0) != 0;
    }
    free(all.v);
    zpi_epoch_plan *pl = &o->plans[o->n_plans++];
    pl->epoch = e;
    pl->n = mine.n;
    pl->spans = mine.v ? mine.v : zpi_state_alloc_n(0, sizeof(zpi_span));
    bad |= !pl->spans;
    return bad;
}

/* Rank 0's share of the job's totals: the sums of every rank's counts. */
static void add_totals(zpi_rank_state *o, const zpi_state *s)
{
    for (size_t k = 0; k < s->n_ranks; k++) {
        const zpi_rank_state *r = &s->ranks[k];
        for (size_t i = 0; i < s->n_parts; i++) {
            o->part_samples[i] += r->part_samples[i];
            o->part_tokens[i] += r->part_tokens[i];
        }
        for (size_t i = 0; i < r->n_phases * s->n_parts && i < o->n_phases * s->n_parts; i++)
            o->phase_samples[i] += r->phase_samples[i];
#define X(f) o->counts.f += r->counts.f;
        COUNT_FIELDS(X)
#undef X
        o->counts.cut_documents += r->counts.cut_documents;
    }
}

/* Rank 0's coverage digests: every rank's, summed epoch by epoch. */
static int join_coverage(zpi_rank_state *o, const zpi_state *s)
{
    size_t cap = 0;
    for (size_t k = 0; k < s->n_ranks; k++)
        cap += s->ranks[k].n_cov;
    free(o->cov);
    o->n_cov = 0;
    o->cov = zpi_state_alloc_n(cap, sizeof *o->cov);
    if (!o->cov)
        return 1;
    for (size_t k = 0; k < s->n_ranks; k++)
        for (size_t i = 0; i < s->ranks[k].n_cov; i++) {
            const zpi_cov_epoch *c = &s->ranks[k].cov[i];
            size_t j = 0;
            while (j < o->n_cov && o->cov[j].epoch < c->epoch)
                j++;
            if (j == o->n_cov || o->cov[j].epoch != c->epoch) {
                memmove(&o->cov[j + 1], &o->cov[j], (o->n_cov - j) * sizeof *o->cov);
                memset(&o->cov[j], 0, sizeof o->cov[j]);
                o->cov[j].epoch = c->epoch;
                o->n_cov++;
            }
            zp_coverage_merge(&o->cov[j].c, &c->c);
            o->cov[j].padded += c->padded;
            o->cov[j].merged = 1;
        }
    return 0;
}

/* Rank 0's skips: the skipped ranges of every rank, overlapping ones
 * joined; nonzero when out of memory. */
static int join_skips(zpi_rank_state *o, const zpi_state *s)
{
    size_t cap = 0;
    for (size_t k = 0; k < s->n_ranks; k++)
        cap += s->ranks[k].n_skips;
    free(o->skips);
    o->skips = zpi_state_alloc_n(cap, sizeof *o->skips);
    int bad = !o->skips;
    for (size_t k = 0; !bad && k < s->n_ranks; k++)
        for (size_t i = 0; i < s->ranks[k].n_skips; i++)
            o->skips[o->n_skips++] = s->ranks[k].skips[i];
    /* sort by first (insertion: few ranges), then join */
    for (size_t i = 1; !bad && i < o->n_skips; i++)
        for (size_t j = i; j > 0 && o->skips[j].first < o->skips[j - 1].first; j--) {
            zpi_skip t = o->skips[j];
            o->skips[j] = o->skips[j - 1];
            o->skips[j - 1] = t;
        }
    size_t m = 0;
    for (size_t i = 0; !bad && i < o->n_skips; i++) {
        zpi_skip *x = &o->skips[i];
        zpi_skip *y = m ? &o->skips[m - 1] : NULL;
        if (y && x->first <= y->last) {
            if (x->last > y->last)
                y->last = x->last;
            y->samples += x->samples;
            y->tokens += x->tokens;
            if (x->from_epoch < y->from_epoch ||
                (x->from_epoch == y->from_epoch && x->from_position < y->from_position)) {
                y->from_epoch = x->from_epoch;
                y->from_position = x->from_position;
            }
            if (x->to_epoch > y->to_epoch ||
                (x->to_epoch == y->to_epoch && x->to_position > y->to_position)) {
                y->to_epoch = x->to_epoch;
                y->to_position = x->to_position;
            }
        } else {
            o->skips[m++] = *x;
        }
    }
    o->n_skips = m;
    return bad;
}

zp_status zpi_state_rank_plan(const zpi_state *s, uint32_t rank, uint32_t world_size,
                              zpi_rank_state *out, zpi_err *err)
{
    memset(out, 0, sizeof *out);
    ZPI_RETURN_ERR_IF(world_size == 0 || rank >= world_size, err, ZP_ERR_INVALID,
                      "rank %" PRIu32 " of %" PRIu32 ": not a rank of that world", rank,
                      world_size);
    ZPI_FORWARD_IF_ERR(zpi_state_validate(s, ZP_ERR_INVALID, err));
    if (world_size == s->world_size) {
        for (size_t k = 0; k < s->n_ranks; k++)
            if (s->ranks[k].rank == rank) {
                zp_status st = zpi_rank_state_copy(out, &s->ranks[k]);
                return st == ZP_OK ? ZP_OK
                                   : zpi_err_set(err, st, "state: out of memory (rank %" PRIu32
                                                          ")",
                                                 rank);
            }
    }
    if (s->n_ranks != s->world_size)
        return held_error(s, rank, world_size, err);
    for (size_t k = 0; k < s->n_ranks; k++)
        ZPI_RETURN_ERR_IF(s->ranks[k].balance_done, err, ZP_ERR_INVALID,
                          "rank %" PRIu32 " was saved inside an attention-balance window (%" PRIu64
                          " of its batches delivered): its rows went out in another order "
                          "than the stream's, so only the same world size (%" PRIu32
                          ") can resume it; save at a window boundary (a multiple of the "
                          "balance window's batches) to change the world size",
                          s->ranks[k].rank, s->ranks[k].balance_done, s->world_size);
    uint32_t e0, e1;
    ZPI_FORWARD_IF_ERR(epoch_range(s, &e0, &e1, err));
    zpi_rank_state o = {0};
    o.rank = rank;
    o.next_batch = s->ranks[0].next_batch;
    o.epoch = e0;
    o.n_parts = s->n_parts;
    o.part_samples = zpi_state_alloc_n(s->n_parts, sizeof(uint64_t));
    o.part_tokens = zpi_state_alloc_n(s->n_parts, sizeof(uint64_t));
    o.plans = zpi_state_alloc_n((size_t)(e1 - e0) + 1, sizeof *o.plans);
    o.skips = zpi_state_alloc_n(0, sizeof *o.skips);
    for (size_t k = 0; k < s->n_ranks; k++)
        o.n_phases = s->ranks[k].n_phases > o.n_phases ? s->ranks[k].n_phases : o.n_phases;
    o.phase_samples = zpi_state_alloc_n(o.n_phases * s->n_parts, sizeof(uint64_t));
    int bad = !o.part_samples || !o.part_tokens || !o.plans || !o.skips || !o.phase_samples;
    for (uint64_t e = e0; !bad && e <= e1; e++)
        bad = plan_epoch(&o, s, rank, world_size, (uint32_t)e);
    if (!bad && rank == 0) {
        /* rank 0 carries the job's totals */
        add_totals(&o, s);
        bad = join_skips(&o, s) || join_coverage(&o, s);
    }
    if (bad) {
        zpi_rank_state_clear(&o);
        return zpi_err_set(err, ZP_ERR_NOMEM, "state: out of memory (re-split for rank %" PRIu32
                                              ")",
                           rank);
    }
    *out = o;
    return ZP_OK;
}

