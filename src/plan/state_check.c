/*
 * state_check.c - a parsed state checked against itself (zpi_state_check,
 * state.h): the top-level fields against the settings they were saved
 * with, each rank's fields against each other, and the ranks' plans
 * against each other. zpi_state_parse() checks each field alone; this is
 * what a hand-edited state can get wrong while every field is well formed.
 *
 * Thread safety: none needed; every call works on its arguments.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/util.h"
#include "plan/state.h"
#include "zephon/worksource.h"

static const char *rem_name(int r) { return r == ZP_REMAINDER_DROP ? "drop" : "pad"; }

/* A settings member that is an unsigned integer (a JSON integer, or a
 * decimal string from 2^63 on): 1 and *v, else 0. */
static int set_u64(json_t *set, const char *key, uint64_t *v)
{
    json_t *x = json_object_get(set, key);
    if (json_is_string(x))
        return zpi_parse_u64(json_string_value(x), 0, UINT64_MAX, 0, v) == 0;
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return 0;
    *v = (uint64_t)json_integer_value(x);
    return 1;
}

static int same_weight(double a, double b) { return fabs(a - b) <= 1e-12 * fmax(fabs(a), fabs(b)); }

/* The top-level fields and the parts against the settings object. */
static zp_status check_settings(const zpi_state *s, json_t *set, zpi_err *err)
{
    uint64_t v;
    ZPI_RETURN_ERR_IF(set_u64(set, "seed", &v) && v != s->seed, err, ZP_ERR_FORMAT,
                      "seed: %" PRIu64 ", but the settings' seed is %" PRIu64
                      ": the state contradicts itself (the seed was edited in one place only?)",
                      s->seed, v);
    ZPI_RETURN_ERR_IF(set_u64(set, "epoch_samples", &v) && v != s->epoch_samples, err,
                      ZP_ERR_FORMAT,
                      "epoch_samples: %" PRIu64 ", but the settings' epoch_samples is %" PRIu64,
                      s->epoch_samples, v);
    json_t *rem = json_object_get(set, "remainder");
    ZPI_RETURN_ERR_IF(json_is_string(rem) && strcmp(json_string_value(rem), rem_name(s->remainder)),
                      err, ZP_ERR_FORMAT, "remainder: \"%s\", but the settings' remainder is \"%s\"",
                      rem_name(s->remainder), json_string_value(rem));
    json_t *parts = json_object_get(set, "parts");
    if (!json_is_array(parts))
        return ZP_OK;
    ZPI_RETURN_ERR_IF(json_array_size(parts) != s->n_parts, err, ZP_ERR_FORMAT,
                      "parts: %zu parts, but the settings list %zu", s->n_parts,
                      json_array_size(parts));
    for (size_t i = 0; i < s->n_parts; i++) {
        json_t *p = json_array_get(parts, i);
        json_t *nm = json_object_get(p, "name"), *w = json_object_get(p, "weight");
        ZPI_RETURN_ERR_IF(json_is_string(nm) && strcmp(json_string_value(nm), s->part_names[i]),
                          err, ZP_ERR_FORMAT,
                          "parts[%zu].name: \"%s\", but the settings name part %zu \"%s\" (a "
                          "part renamed in one place only?)",
                          i, s->part_names[i], i, json_string_value(nm));
        ZPI_RETURN_ERR_IF(json_is_number(w) && !same_weight(json_number_value(w), s->part_weights[i]),
                          err, ZP_ERR_FORMAT,
                          "parts[%zu].weight: %.15g, but the settings give part \"%s\" the "
                          "weight %.15g",
                          i, s->part_weights[i], s->part_names[i], json_number_value(w));
    }
    return ZP_OK;
}

typedef struct rspan {
    uint64_t a, b;    /* real positions [a, b) */
    size_t rank, idx; /* ranks[rank].plans[.].spans[idx] */
    size_t plan;
} rspan;

static int cmp_rspan(const void *x, const void *y)
{
    const rspan *p = x, *q = y;
    return p->a < q->a ? -1 : p->a > q->a;
}

/* The real positions (below N) of the spans of `plans` (one plan per
 * entry, NULL for none; entry k is ranks[rank0 + k]'s plans[plan_idx[k]])
 * must not overlap: each sample once. */
static zp_status check_overlap(const zpi_state *s, const zpi_epoch_plan *const *plans,
                               const size_t *plan_idx, size_t n, size_t rank0, zpi_err *err)
{
    size_t total = 0;
    for (size_t k = 0; k < n; k++)
        total += plans[k] ? plans[k]->n : 0;
    rspan *v = calloc(total ? total : 1, sizeof *v);
    ZPI_RETURN_ERR_IF(!v, err, ZP_ERR_NOMEM, "state: out of memory checking the plans");
    size_t m = 0;
    for (size_t k = 0; k < n; k++)
        for (size_t j = 0; plans[k] && j < plans[k]->n; j++) {
            const zpi_span *sp = &plans[k]->spans[j];
            if (sp->start >= s->epoch_samples)
                continue;
            uint64_t b = sp->count > s->epoch_samples - sp->start ? s->epoch_samples
                                                                  : sp->start + sp->count;
            v[m++] = (rspan){sp->start, b, rank0 + k, j, plan_idx[k]};
        }
    qsort(v, m, sizeof *v, cmp_rspan);
    zp_status st = ZP_OK;
    for (size_t i = 1; i < m && st == ZP_OK; i++) {
        const rspan *p = &v[i - 1], *q = &v[i];
        if (q->a < p->b)
            st = zpi_err_set(err, ZP_ERR_FORMAT,
                             "ranks[%zu].plans[%zu].spans[%zu]: positions %" PRIu64 "..%" PRIu64
                             " overlap ranks[%zu].plans[%zu].spans[%zu] (%" PRIu64 "..%" PRIu64
                             "): every sample of an epoch is read once",
                             q->rank, q->plan, q->idx, q->a, q->b - 1, p->rank, p->plan, p->idx,
                             p->a, p->b - 1);
    }
    free(v);
    return st;
}

/* One rank's fields against each other and the state's. */
static zp_status check_rank(const zpi_state *s, size_t k, int concat, int bestfit, int64_t balance,
                            zpi_err *err)
{
    const zpi_rank_state *r = &s->ranks[k];
    uint64_t ps = 0;
    for (size_t i = 0; i < r->n_parts; i++)
        ps += r->part_samples[i];
    ZPI_RETURN_ERR_IF(r->n_parts && ps != r->counts.samples, err, ZP_ERR_FORMAT,
                      "ranks[%zu].part_samples: %" PRIu64 " samples over the parts, but "
                      "counts.samples is %" PRIu64,
                      k, ps, r->counts.samples);
    ZPI_RETURN_ERR_IF(r->counts.padded > r->counts.samples, err, ZP_ERR_FORMAT,
                      "ranks[%zu].counts.padded: %" PRIu64 " padded of %" PRIu64 " samples", k,
                      r->counts.padded, r->counts.samples);
    ZPI_RETURN_ERR_IF(!concat && (r->token_offset || r->carry), err, ZP_ERR_FORMAT,
                      "ranks[%zu].%s: a document carried over, but the settings pack no "
                      "token stream (pack is not concat)",
                      k, r->token_offset ? "token_offset" : "carry");
    ZPI_RETURN_ERR_IF(balance >= 0 && r->balance_done >= (uint64_t)(balance > 1 ? balance : 1),
                      err, ZP_ERR_FORMAT,
                      "ranks[%zu].balance_done: %" PRIu64 " batches of an attention-balance "
                      "window delivered, but the settings balance %s",
                      k, r->balance_done, balance > 1 ? "fewer batches per window" : "no window");
    ZPI_RETURN_ERR_IF(!bestfit && r->window_rows, err, ZP_ERR_FORMAT,
                      "ranks[%zu].window_rows: %" PRIu64 " rows of a best-fit window, but the "
                      "settings do not pack bestfit",
                      k, r->window_rows);
    if (r->token_offset || r->window_rows) {
        uint64_t a, c;
        const zpi_epoch_plan *p = zpi_rank_find_plan(r, r->epoch);
        zpi_state_default_range(s->epoch_samples, s->world_size, s->remainder, r->rank, &a, &c);
        uint64_t cnt = p ? zpi_plan_total(p) : c;
        ZPI_RETURN_ERR_IF(r->position >= cnt, err, ZP_ERR_FORMAT,
                          "ranks[%zu].%s: %" PRIu64 " %s at position "
                          "%" PRIu64 ", but the rank's epoch %" PRIu32 " ends at %" PRIu64,
                          k, r->token_offset ? "token_offset" : "window_rows",
                          r->token_offset ? r->token_offset : r->window_rows,
                          r->token_offset ? "tokens of the sample" : "rows of the window",
                          r->position, r->epoch, cnt);
    }
    for (size_t i = 0; i < r->n_skips; i++) {
        const zpi_skip *x = &r->skips[i];
        ZPI_RETURN_ERR_IF(x->first >= r->next_batch, err, ZP_ERR_FORMAT,
                          "ranks[%zu].skipped[%zu].batches: %" PRIu64 "..%" PRIu64
                          ", but the rank's next batch is %" PRIu64 " (a skip is recorded once "
                          "passed)",
                          k, i, x->first, x->last, r->next_batch);
        ZPI_RETURN_ERR_IF(x->to_epoch < x->from_epoch ||
                              (x->to_epoch == x->from_epoch && x->to_position < x->from_position),
                          err, ZP_ERR_FORMAT,
                          "ranks[%zu].skipped[%zu]: to (%" PRIu32 ", %" PRIu64
                          ") comes before from (%" PRIu32 ", %" PRIu64 ")",
                          k, i, x->to_epoch, x->to_position, x->from_epoch, x->from_position);
    }
    for (size_t i = 0; i < r->n_plans; i++) {
        const zpi_epoch_plan *p = &r->plans[i];
        ZPI_RETURN_ERR_IF(p->epoch < r->epoch, err, ZP_ERR_FORMAT,
                          "ranks[%zu].plans[%zu].epoch: %" PRIu32 ", before the rank's epoch %" PRIu32
                          " (a state keeps the plans of the epochs ahead only)",
                          k, i, p->epoch, r->epoch);
        for (size_t j = 0; j < p->n; j++) {
            const zpi_span *sp = &p->spans[j];
            ZPI_RETURN_ERR_IF(s->remainder == ZP_REMAINDER_DROP &&
                                  sp->start + sp->count > s->epoch_samples,
                              err, ZP_ERR_FORMAT,
                              "ranks[%zu].plans[%zu].spans[%zu]: [%" PRIu64 ", %" PRIu64
                              "] reaches past epoch_samples %" PRIu64
                              " (padding), but the remainder is drop",
                              k, i, j, sp->start, sp->count, s->epoch_samples);
            ZPI_RETURN_ERR_IF(!concat && sp->token_offset, err, ZP_ERR_FORMAT,
                              "ranks[%zu].plans[%zu].spans[%zu]: a token offset, but the "
                              "settings pack no token stream (pack is not concat)",
                              k, i, j);
        }
        const zpi_epoch_plan *one[1] = {p};
        ZPI_FORWARD_IF_ERR(check_overlap(s, one, &i, 1, k, err));
    }
    return ZP_OK;
}

/* The ranks' plans for epoch e against each other: the ranks not past e
 * all plan it or none does, with the same number of positions each
 * (every rank reads as many), and no sample twice. */
static zp_status check_epoch(const zpi_state *s, uint32_t e, zpi_err *err)
{
    const zpi_epoch_plan **plans = calloc(s->n_ranks, sizeof *plans);
    size_t *idx = calloc(s->n_ranks, sizeof *idx);
    zp_status st = plans && idx ? ZP_OK
                                : zpi_err_set(err, ZP_ERR_NOMEM, "state: out of memory checking "
                                                                 "the plans");
    size_t with = SIZE_MAX, without = SIZE_MAX;
    for (size_t k = 0; k < s->n_ranks && st == ZP_OK; k++) {
        const zpi_rank_state *r = &s->ranks[k];
        if (r->epoch > e)
            continue; /* its plan for e is gone with the epoch */
        for (size_t i = 0; i < r->n_plans; i++)
            if (r->plans[i].epoch == e) {
                plans[k] = &r->plans[i];
                idx[k] = i;
            }
        if (plans[k] && with == SIZE_MAX)
            with = k;
        if (!plans[k] && without == SIZE_MAX)
            without = k;
        if (plans[k] && with != k && zpi_plan_total(plans[k]) != zpi_plan_total(plans[with]))
            st = zpi_err_set(err, ZP_ERR_FORMAT,
                             "ranks[%zu].plans[%zu]: %" PRIu64 " positions in epoch %" PRIu32
                             ", but ranks[%zu] has %" PRIu64
                             ": every rank reads as many (spans missing or added?)",
                             k, idx[k], zpi_plan_total(plans[k]), e, with,
                             zpi_plan_total(plans[with]));
    }
    if (st == ZP_OK && with != SIZE_MAX && without != SIZE_MAX)
        st = zpi_err_set(err, ZP_ERR_FORMAT,
                         "ranks[%zu].plans: no plan for epoch %" PRIu32
                         ", which ranks[%zu] has a plan for: the ranks of a job are split "
                         "alike",
                         without, e, with);
    if (st == ZP_OK && with != SIZE_MAX)
        st = check_overlap(s, plans, idx, s->n_ranks, 0, err);
    free(plans);
    free(idx);
    return st;
}

zp_status zpi_state_check(const zpi_state *s, zpi_err *err)
{
    json_t *set = json_loads(s->settings ? s->settings : "{}", 0, NULL);
    if (!json_is_object(set)) {
        json_decref(set);
        return zpi_err_set(err, ZP_ERR_FORMAT, "settings: not a JSON object");
    }
    zp_status st = check_settings(s, set, err);
    json_t *pack = json_object_get(set, "pack");
    /* (settings that do not name the packing leave token offsets unchecked) */
    int concat = !pack || (json_is_string(pack) && !strcmp(json_string_value(pack), "concat"));
    int bestfit = !pack || (json_is_string(pack) && !strcmp(json_string_value(pack), "bestfit"));
    /* the balance window: -1 unchecked (settings without "pack") */
    json_t *bal = json_object_get(set, "balance");
    int64_t balance = !pack ? -1 : json_is_integer(bal) ? (int64_t)json_integer_value(bal) : 0;
    json_decref(set);
    for (size_t k = 0; k < s->n_ranks && st == ZP_OK; k++)
        st = check_rank(s, k, concat, bestfit, balance, err);
    /* the epochs any rank plans, each once, in the order of their first
     * plan (a rank's plans are of its epoch and later: check_rank) */
    uint32_t *seen = NULL;
    size_t n_seen = 0, cap = 0;
    for (size_t k = 0; k < s->n_ranks && st == ZP_OK && s->n_ranks > 1; k++)
        for (size_t i = 0; i < s->ranks[k].n_plans && st == ZP_OK; i++) {
            uint32_t e = s->ranks[k].plans[i].epoch;
            size_t j = 0;
            while (j < n_seen && seen[j] != e) /* few epochs: a list */
                j++;
            if (j < n_seen)
                continue;
            if (zpi_grow((void **)&seen, &cap, n_seen + 1, sizeof *seen) != 0)
                st = zpi_err_set(err, ZP_ERR_NOMEM, "state: out of memory checking the plans");
            else
                seen[n_seen++] = e;
            if (st == ZP_OK)
                st = check_epoch(s, e, err);
        }
    free(seen);
    return st;
}
