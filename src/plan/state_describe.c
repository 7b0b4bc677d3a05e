/*
 * state_describe.c - the words of `zephon state show` (state.h): the job,
 * each rank's position, plans, counts, proportions per part and skipped
 * batches, and the settings.
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

#include <jansson.h>

#include "base/util.h"
#include "plan/mixture.h"
#include "zephon/worksource.h"

/* ------------------------------------------------------------ describe */

static void describe_counts(zpi_buf *b, const char *indent, const zp_pipeline_counts *c)
{
    zpi_buf_printf(b,
                   "%sdelivered: %" PRIu64 " batches, %" PRIu64 " samples (%" PRIu64
                   " padded), %" PRIu64 " tokens (%" PRIu64 " padding, %" PRIu64
                   " truncated); %" PRIu64 " bad records skipped, %" PRIu64 " filtered\n",
                   indent, c->batches, c->samples, c->padded, c->tokens, c->pad_tokens,
                   c->truncated_tokens, c->skipped, c->filtered);
    if (c->cut_documents)
        zpi_buf_printf(b, "%s%" PRIu64 " documents cut over rows or truncated\n", indent,
                       c->cut_documents);
}

static void describe_parts(zpi_buf *b, const zpi_state *s, const char *indent,
                           const uint64_t *samples, const uint64_t *tokens)
{
    uint64_t ts = 0, tt = 0;
    for (size_t i = 0; i < s->n_parts; i++) {
        ts += samples[i];
        tt += tokens[i];
    }
    for (size_t i = 0; i < s->n_parts; i++)
        zpi_buf_printf(b,
                       "%s%s: %" PRIu64 " samples (%.2f%%), %" PRIu64
                       " tokens (%.2f%%); weight %.4g%%\n",
                       indent, s->part_names[i], samples[i],
                       ts ? 100.0 * (double)samples[i] / (double)ts : 0.0, tokens[i],
                       tt ? 100.0 * (double)tokens[i] / (double)tt : 0.0,
                       100.0 * s->part_weights[i]);
}

/* Each part's pass at the rank's next draw: the draw's number in the
 * mixture (epoch x N + its place in the epoch's stream), the parts' draw
 * counts before it from the schedule of the state's weights, and the
 * parts' sizes from the settings. Left out when the settings do not say
 * the sizes. */
static void describe_passes(zpi_buf *b, const zpi_state *s, const zpi_rank_state *r)
{
    json_t *set = json_loads(s->settings ? s->settings : "", 0, NULL);
    json_t *parts = set ? json_object_get(set, "parts") : NULL;
    uint64_t *size = calloc(s->n_parts ? s->n_parts : 1, sizeof *size);
    uint64_t *cnt = calloc(s->n_parts ? s->n_parts : 1, sizeof *cnt);
    int ok = size && cnt && json_is_array(parts) && json_array_size(parts) == s->n_parts &&
             s->n_parts > 0 && s->epoch_samples > 0;
    for (size_t i = 0; ok && i < s->n_parts; i++) {
        json_t *n = json_object_get(json_array_get(parts, i), "samples");
        ok = json_is_integer(n) && json_integer_value(n) > 0;
        if (ok)
            size[i] = (uint64_t)json_integer_value(n);
    }
    /* the next sample's place in the epoch's stream */
    uint64_t g = 0, pos = r->position;
    const zpi_epoch_plan *p = ok ? zpi_rank_find_plan(r, r->epoch) : NULL;
    if (p) {
        ok = zpi_plan_locate(p, NULL, pos, &g) < p->n;
    } else if (ok) {
        uint64_t a, c;
        zpi_state_default_range(s->epoch_samples, s->world_size, s->remainder, r->rank, &a, &c);
        ok = pos < c;
        g = a + pos;
    }
    unsigned __int128 G = (unsigned __int128)r->epoch * s->epoch_samples + g % s->epoch_samples;
    ok = ok && G <= UINT64_MAX;
    zpi_mix *mix = NULL;
    zpi_err e = {0};
    if (ok && s->n_parts == 1)
        cnt[0] = (uint64_t)G;
    else if (ok && s->sched.n_phases)
        ok = zpi_sched_counts(&s->sched, (uint64_t)G, cnt, &e) == ZP_OK;
    else if (ok)
        ok = zpi_mix_create(s->part_weights, (const char *const *)s->part_names, s->n_parts,
                            &mix, &e) == ZP_OK &&
             zpi_mix_counts(mix, (uint64_t)G, cnt) == ZP_OK;
    if (ok) {
        zpi_buf_printf(b, "  each part's pass at draw %" PRIu64 " of the mixture:",
                       (uint64_t)G);
        size_t show = s->n_parts < 16 ? s->n_parts : 16;
        for (size_t i = 0; i < show; i++)
            zpi_buf_printf(b, "%s %s pass %" PRIu64 " (%" PRIu64 " of %" PRIu64 " drawn)",
                           i ? ";" : "", s->part_names[i], cnt[i] / size[i], cnt[i] % size[i],
                           size[i]);
        zpi_buf_puts(b, s->n_parts > show ? "; ...\n" : "\n");
    }
    zpi_mix_destroy(mix);
    free(size);
    free(cnt);
    json_decref(set);
}

static void describe_rank(zpi_buf *b, const zpi_state *s, const zpi_rank_state *r)
{
    uint64_t cnt = zpi_state_rank_epoch_count(s, r, r->epoch);
    zpi_buf_printf(b,
                   "rank %" PRIu32 ": next batch %" PRIu64 "; epoch %" PRIu32 ", position %" PRIu64
                   " of %" PRIu64,
                   r->rank, r->next_batch, r->epoch, r->position, cnt);
    if (r->token_offset)
        zpi_buf_printf(b, " (%" PRIu64 " tokens of that sample already delivered)",
                       r->token_offset);
    if (r->window_rows)
        zpi_buf_printf(b, " (a best-fit window starts there: its first %" PRIu64
                          " rows already delivered, %zu of its documents in whole or part)",
                       r->window_rows, r->n_window_done);
    if (r->balance_done)
        zpi_buf_printf(b, " (an attention-balance window starts there: its first %" PRIu64
                          " batches already delivered)",
                       r->balance_done);
    zpi_buf_printf(b, "%s\n", r->carry ? "; the next row carries the last token over" : "");
    for (size_t i = 0; i < r->n_plans; i++) {
        const zpi_epoch_plan *p = &r->plans[i];
        zpi_buf_printf(b, "  epoch %" PRIu32 " plan: %" PRIu64 " positions in %zu span%s:",
                       p->epoch, zpi_plan_total(p), p->n, p->n == 1 ? "" : "s");
        size_t show = p->n < 8 ? p->n : 8;
        for (size_t j = 0; j < show; j++) {
            const zpi_span *sp = &p->spans[j];
            zpi_buf_printf(b, " %" PRIu64 "..%" PRIu64, sp->start, sp->start + sp->count - 1);
            if (sp->start >= s->epoch_samples)
                zpi_buf_puts(b, " (padding)");
            else if (sp->start + sp->count > s->epoch_samples)
                zpi_buf_printf(b, " (padding from %" PRIu64 ")", s->epoch_samples);
            if (sp->token_offset)
                zpi_buf_printf(b, " (from token %" PRIu64 ")", sp->token_offset);
        }
        zpi_buf_puts(b, p->n > show ? " ...\n" : "\n");
    }
    describe_passes(b, s, r);
    describe_counts(b, "  ", &r->counts);
    for (size_t i = 0; i < r->n_cov; i++) /* the coverage certificate's digests */
        zpi_buf_printf(b, "  coverage digest of epoch %" PRIu32 ": %" PRIu64 " samples (%" PRIu64
                          " padded apart), sum %016" PRIx64 ", xor %016" PRIx64 "\n",
                       r->cov[i].epoch, r->cov[i].c.count, r->cov[i].padded, r->cov[i].c.sum,
                       r->cov[i].c.xr);
    if (s->n_parts) {
        zpi_buf_puts(b, "  proportions so far:\n");
        describe_parts(b, s, "    ", r->part_samples, r->part_tokens);
    }
    for (size_t i = 0; i < r->n_skips; i++) {
        const zpi_skip *x = &r->skips[i];
        zpi_buf_printf(b,
                       "  skipped batches %" PRIu64 "..%" PRIu64 ": %" PRIu64 " samples, %" PRIu64
                       " tokens, from epoch %" PRIu32 " position %" PRIu64 " to epoch %" PRIu32
                       " position %" PRIu64 "\n",
                       x->first, x->last, x->samples, x->tokens, x->from_epoch, x->from_position,
                       x->to_epoch, x->to_position);
    }
}

zp_status zpi_state_describe(const zpi_state *s, char **out, zpi_err *err)
{
    *out = NULL;
    zpi_buf b = {0};
    int job = s->n_ranks == s->world_size && s->world_size > 1;
    zpi_buf_printf(&b, "zephon state, version %d: %s\n", s->version,
                   job ? "a job state (every rank)"
                       : s->n_ranks == 1 ? "the state of one rank" : "the state of some ranks");
    zpi_buf_printf(&b,
                   "seed %" PRIu64 "; world size %" PRIu32 "; %" PRIu64
                   " draws per epoch; remainder %s\n",
                   s->seed, s->world_size, s->epoch_samples, zpi_remainder_name(s->remainder));
    zpi_buf_printf(&b, "settings (hash %016" PRIx64 "):\n", s->settings_hash);
    json_t *set = s->settings ? json_loads(s->settings, JSON_REJECT_DUPLICATES, NULL) : NULL;
    if (json_is_object(set)) {
        const char *key;
        json_t *v;
        json_object_foreach(set, key, v)
        {
            zpi_buf_printf(&b, "  %s = ", key);
            zpi_state_put_compact(&b, v);
            zpi_buf_puts(&b, "\n");
        }
    }
    json_decref(set);
    if (s->n_parts) {
        zpi_buf_puts(&b, "parts:\n");
        for (size_t i = 0; i < s->n_parts; i++)
            zpi_buf_printf(&b, "  %s: weight %.6g\n", s->part_names[i], s->part_weights[i]);
    }
    if (s->sched.n_phases > 1 || s->sched.since) {
        /* the weight schedule followed, with the samples each phase
         * delivered over the ranks held and their proportions */
        const size_t np = s->n_parts;
        zpi_buf_printf(&b, "schedule (%zu phases; the configured one followed from draw %llu):\n",
                       s->sched.n_phases, (unsigned long long)s->sched.since);
        for (size_t k = 0; k < s->sched.n_phases; k++) {
            uint64_t t = 0, wt = 0;
            for (size_t i = 0; i < np; i++)
                wt += s->sched.w[k * np + i];
            uint64_t *cnt = zpi_state_alloc_n(np, sizeof(uint64_t));
            for (size_t r = 0; cnt && r < s->n_ranks; r++)
                for (size_t i = 0; k < s->ranks[r].n_phases && i < np; i++)
                    cnt[i] += s->ranks[r].phase_samples[k * np + i];
            for (size_t i = 0; cnt && i < np; i++)
                t += cnt[i];
            zpi_buf_printf(&b, "  phase %zu from draw %llu: %llu samples;", k,
                           (unsigned long long)s->sched.start[k], (unsigned long long)t);
            for (size_t i = 0; cnt && i < np; i++)
                zpi_buf_printf(&b, " %s %.4f (weight %.4g)", s->part_names[i],
                               t ? (double)cnt[i] / (double)t : 0.0,
                               (double)s->sched.w[k * np + i] / (double)wt);
            zpi_buf_puts(&b, "\n");
            free(cnt);
        }
    }
    for (size_t k = 0; k < s->n_ranks; k++)
        describe_rank(&b, s, &s->ranks[k]);
    if (s->n_ranks > 1) {
        zp_pipeline_counts c = {0};
        uint64_t *ps = zpi_state_alloc_n(s->n_parts, sizeof(uint64_t));
        uint64_t *pt = zpi_state_alloc_n(s->n_parts, sizeof(uint64_t));
        for (size_t k = 0; k < s->n_ranks; k++) {
            const zpi_rank_state *r = &s->ranks[k];
#define X(f) c.f += r->counts.f;
            COUNT_FIELDS(X)
#undef X
            c.cut_documents += r->counts.cut_documents;
            for (size_t i = 0; ps && pt && i < s->n_parts; i++) {
                ps[i] += r->part_samples[i];
                pt[i] += r->part_tokens[i];
            }
        }
        zpi_buf_printf(&b, "all %zu ranks:\n", s->n_ranks);
        describe_counts(&b, "  ", &c);
        if (s->n_parts && ps && pt) {
            zpi_buf_puts(&b, "  proportions so far:\n");
            describe_parts(&b, s, "    ", ps, pt);
        }
        free(ps);
        free(pt);
    }
    if (!b.p || zpi_buf_puts(&b, "") != 0) {
        zpi_buf_free(&b);
        return zpi_err_set(err, ZP_ERR_NOMEM, "state: out of memory");
    }
    *out = b.p;
    return ZP_OK;
}
