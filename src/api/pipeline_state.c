/*
 * pipeline_state.c - checkpoint and exact resume of a pipeline
 * (zephon/state.h): a state is filled from the consumer's bookkeeping
 * (pipeline.c's zpi_ckpt, updated as batches are delivered), the
 * worksource's per-epoch plans and the pipeline's settings; a state is
 * applied to a new pipeline before its start by setting the worksource's
 * plans and position and the packer's first document (offset, carry).
 * The JSON form, the settings check and the elastic re-split are state.c's.
 *
 * Thread safety: the consumer's thread, like the pipeline.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "api/pipeline_internal.h"
#include "data/dataset_internal.h"
#include "io/storage.h"
#include "plan/state.h"
#include "base/util.h"
#include "plan/worksource_internal.h"
#include "zephon/state.h"

/* The pipeline's state as a one-rank zpi_state (borrowing nothing: every
 * array is copied; clear it with zpi_state_clear). */
static zp_status fill_state(zp_pipeline *p, zpi_state *st, zpi_err *err)
{
    zp_worksource *ws = zpi_pipeline_ws(p);
    const zp_worksource_config *wc = zp_worksource_get_config(ws);
    zpi_ckpt *ck = zpi_pipeline_ckpt(p);
    memset(st, 0, sizeof *st);
    st->version = ZP_STATE_VERSION;
    st->seed = wc->seed;
    st->world_size = wc->world_size;
    st->epoch_samples = zp_worksource_draws_per_epoch(ws);
    st->remainder = (int)wc->remainder;
    /* (settings_hash is computed by zpi_state_render, from the canonical form) */
    if (zpi_pipeline_settings_json(p, &st->settings) != ZP_OK)
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for the state");
    const size_t np = zp_worksource_num_parts(ws);
    st->n_parts = np;
    st->part_names = calloc(np, sizeof *st->part_names);
    st->part_weights = calloc(np, sizeof *st->part_weights);
    st->n_ranks = 1;
    st->ranks = calloc(1, sizeof *st->ranks);
    if (!st->part_names || !st->part_weights || !st->ranks)
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for the state");
    for (size_t i = 0; i < np; i++) {
        st->part_names[i] = zpi_strdup(zp_worksource_part_name(ws, i));
        st->part_weights[i] = zp_worksource_part_weight(ws, i);
        if (!st->part_names[i])
            return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for the state");
    }
    const zpi_sched *sc = zpi_worksource_schedule(ws);
    if (sc && zpi_sched_copy(&st->sched, sc) != ZP_OK)
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for the state");

    zpi_rank_state *r = &st->ranks[0];
    r->rank = wc->rank;
    r->next_batch = ck->next_batch;
    if (zpi_pipeline_started(p) || ck->restored) {
        r->epoch = ck->at.epoch;
        r->position = ck->at.position;
        r->token_offset = ck->at.token_offset;
        r->carry = ck->at.carry;
        r->window_rows = ck->at.rows;
        r->balance_done = ck->bal_done;
        if (ck->done_lost)
            return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for the state (the documents "
                                                  "of the best-fit window delivered)");
        if (ck->at.n_done) {
            r->window_done = zpi_state_dup_n(ck->at.done, 2 * ck->at.n_done, sizeof(uint64_t));
            if (!r->window_done)
                return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for the state");
            r->n_window_done = ck->at.n_done;
        }
    } else {
        zp_worksource_state w;
        zp_worksource_get_state(ws, &w);
        r->epoch = w.epoch;
        r->position = w.position;
    }
    /* plans: the worksource's, as far as they are still ahead */
    size_t n_plans = zpi_worksource_num_plans(ws);
    r->plans = n_plans ? calloc(n_plans, sizeof *r->plans) : NULL;
    if (n_plans && !r->plans)
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for the state");
    for (size_t i = 0; i < n_plans; i++) {
        zpi_epoch_plan pl;
        zpi_worksource_plan(ws, i, &pl);
        if (pl.epoch < r->epoch)
            continue;
        zpi_epoch_plan *d = &r->plans[r->n_plans++];
        d->epoch = pl.epoch;
        d->n = pl.n;
        d->spans = malloc((pl.n ? pl.n : 1) * sizeof *d->spans);
        if (!d->spans)
            return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for the state");
        memcpy(d->spans, pl.spans, pl.n * sizeof *d->spans);
    }
    r->n_parts = np;
    r->part_samples = calloc(np, sizeof *r->part_samples);
    r->part_tokens = calloc(np, sizeof *r->part_tokens);
    if (!r->part_samples || !r->part_tokens)
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for the state");
    if (ck->part_samples && ck->nparts == np) {
        memcpy(r->part_samples, ck->part_samples, np * sizeof *r->part_samples);
        memcpy(r->part_tokens, ck->part_tokens, np * sizeof *r->part_tokens);
    }
    if (st->sched.n_phases > 1 || (st->sched.n_phases && st->sched.since)) {
        /* per phase, with a weight schedule (the state writes it then) */
        r->n_phases = st->sched.n_phases;
        r->phase_samples = calloc(r->n_phases * np, sizeof *r->phase_samples);
        if (!r->phase_samples)
            return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for the state");
        for (size_t k = 0; ck->phase_samples && ck->nparts == np && k < ck->nphases &&
                           k < r->n_phases;
             k++)
            memcpy(r->phase_samples + k * np, ck->phase_samples + k * np,
                   np * sizeof *r->phase_samples);
    }
    /* skipped ranges already passed (or restored with the state) */
    if (zpi_covtab_copy(&ck->cov, &r->cov, &r->n_cov) != ZP_OK)
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for the state");
    r->skips = ck->n_skips ? calloc(ck->n_skips, sizeof *r->skips) : NULL;
    if (ck->n_skips && !r->skips)
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for the state");
    for (size_t i = 0; i < ck->n_skips; i++)
        if (i < ck->n_prior_skips || ck->skips[i].first < ck->next_batch)
            r->skips[r->n_skips++] = ck->skips[i];
    zpi_pipeline_total_counts(p, &r->counts);
    return ZP_OK;
}

/* 1 when the storage settings' stop_requested hook asks to stop: a stream
 * that this ended (its transfers ended "stopped") lost no delivered batch,
 * and its state is the checkpoint after the last delivered batch, as after
 * a stop between two batches (docs/storage.md, "Stopping"). */
static int stopped_by_request(const zp_pipeline *p)
{
    const zpi_storage *s = zpi_dataset_storage(zp_worksource_dataset(zpi_pipeline_ws(p)));
    const zp_storage_config *c = s ? zpi_storage_config(s) : NULL;
    return c && c->stop_requested && c->stop_requested(c->stop_user) != 0;
}

zp_status zp_pipeline_state_save(zp_pipeline *p, char **json, size_t *len)
{
    if (!p)
        return ZP_ERR_INVALID;
    zpi_err *perr = zpi_pipeline_err(p);
    ZPI_RETURN_ERR_IF(!json, perr, ZP_ERR_INVALID, "zp_pipeline_state_save: json is NULL");
    *json = NULL;
    if (len)
        *len = 0;
    zp_status failed = zpi_pipeline_failed(p);
    if (failed == ZP_ERR_STATE && stopped_by_request(p))
        failed = ZP_OK;
    ZPI_RETURN_ERR_IF(failed != ZP_OK, perr, ZP_ERR_STATE,
                      "zp_pipeline_state_save: the stream ended with an error (%s): a failed "
                      "stream has no state to save",
                      zp_status_str(failed));
    zpi_state st;
    zpi_err err = {0};
    zp_status rc = fill_state(p, &st, &err);
    if (rc == ZP_OK)
        rc = zpi_state_render(&st, json, len, &err);
    zpi_state_clear(&st);
    if (rc != ZP_OK)
        return zpi_err_set(perr, rc, "zp_pipeline_state_save: %s", zpi_err_msg(&err));
    return ZP_OK;
}

/* The skip ranges requested so far that lie before batch `next`. */
static const zpi_skip *skip_before(const zpi_ckpt *ck, uint64_t next)
{
    for (size_t i = ck->n_prior_skips; i < ck->n_skips; i++)
        if (ck->skips[i].first < next)
            return &ck->skips[i];
    return NULL;
}

/* This pipeline's settings to compare with the state's: with the
 * dataset's fingerprint, or the fingerprint of earlier versions (local
 * names as spelled) when the state holds that one, so that a state saved
 * before resumes as it did. */
static zp_status settings_for(const zp_pipeline *p, const zpi_state *st, char **mine)
{
    const zp_dataset *ds = zp_worksource_dataset(zpi_pipeline_ws(p));
    uint64_t fp = zp_dataset_fingerprint(ds), old = zpi_dataset_fingerprint_spelled(ds);
    char have[32], spelled[32];
    zpi_fmt(spelled, sizeof spelled, "%016llx", (unsigned long long)old);
    if (zpi_state_settings_string(st, "dataset", have, sizeof have) && !strcmp(have, spelled))
        fp = old;
    return zpi_pipeline_settings_json_fp(p, fp, mine);
}

/* A refusal that names a dataset which differs says what the fingerprint
 * covers and which dataset is here. */
static void dataset_hint(const zp_pipeline *p, const zpi_state *st, zpi_err *err)
{
    const zp_dataset *ds = zp_worksource_dataset(zpi_pipeline_ws(p));
    char have[32], here[32];
    zpi_fmt(here, sizeof here, "%016llx", (unsigned long long)zp_dataset_fingerprint(ds));
    if (!zpi_state_settings_string(st, "dataset", have, sizeof have) || !strcmp(have, here))
        return;
    size_t n = zp_dataset_num_shards(ds);
    zpi_err_set(err, err->code,
                "%s (the dataset's fingerprint covers its shards' file names, without their "
                "folders, formats, sizes and record counts, in order; here: %zu shard%s, the "
                "first '%s'. A state saved by an earlier version holds a fingerprint of the "
                "paths as they were spelled then, './data' and 'data' differing: resume it "
                "with that spelling)",
                err->msg, n, n == 1 ? "" : "s", n ? zp_dataset_shard_name(ds, 0) : "");
}

/* The state's parts against this pipeline's mixture (their names and
 * weights, in order). */
static zp_status check_parts(const zpi_state *st, zp_worksource *ws, zpi_err *err)
{
    size_t np = zp_worksource_num_parts(ws);
    ZPI_RETURN_ERR_IF(st->n_parts != np, err, ZP_ERR_MISMATCH,
                      "parts: the state has %zu parts, this pipeline's mixture %zu", st->n_parts,
                      np);
    for (size_t i = 0; i < np; i++) {
        const char *nm = zp_worksource_part_name(ws, i);
        ZPI_RETURN_ERR_IF(!nm || strcmp(nm, st->part_names[i]) != 0, err, ZP_ERR_MISMATCH,
                          "parts[%zu].name: \"%s\" in the state, \"%s\" in this pipeline's "
                          "mixture",
                          i, st->part_names[i], nm ? nm : "");
    }
    return ZP_OK;
}

/* The schedule a restored pipeline draws by (docs/mixtures.md, "Resuming
 * with another schedule"): the state's schedule (or, for a state without
 * one, its parts' weights) when this pipeline's configured schedule is what
 * it follows; otherwise the state's phases before the draw past everything
 * the job delivered (zpi_state_high_water), and the configured schedule
 * from there on. That needs the whole job's positions: a state of every
 * rank. Sets it on the worksource. */
static zp_status restore_schedule(const zpi_state *st, zp_worksource *ws, zpi_err *err)
{
    const zpi_sched *cfg = zpi_worksource_config_schedule(ws);
    if (!cfg || st->n_parts != cfg->n_parts)
        return ZP_OK; /* no mixture (check_parts refuses other part counts) */
    zpi_sched old, use;
    memset(&old, 0, sizeof old);
    memset(&use, 0, sizeof use);
    zp_status rc = ZP_OK;
    if (st->sched.n_phases) {
        rc = zpi_sched_copy(&old, &st->sched);
    } else {
        /* a state without a schedule drew by its parts' weights (as used):
         * when they are this configuration's first weights, by those
         * integer weights exactly */
        int same = 1;
        for (size_t i = 0; same && i < cfg->n_parts; i++) {
            double u = zp_worksource_phase_weight(ws, 0, i), w = st->part_weights[i];
            same = u == w || (u - w < 1e-12 * w && w - u < 1e-12 * w);
        }
        if (same && cfg->n_phases == 1)
            return zpi_worksource_set_schedule(ws, cfg) == ZP_OK
                       ? ZP_OK
                       : zpi_err_set(err, ZP_ERR_NOMEM, "%s", zp_worksource_errmsg(ws));
        if (same) {
            zpi_sched one = *cfg;
            one.n_phases = 1;
            one.since = 0;
            rc = zpi_sched_copy(&old, &one);
        } else {
            /* other weights: the state's shares, made integers again (exact
             * for weights given as integers or decimals of up to 6 places;
             * rounded ones may come out a little different) */
            rc = zpi_sched_from_config(st->part_weights, (const char *const *)st->part_names,
                                       st->n_parts, NULL, 0, &old, err);
        }
    }
    if (rc == ZP_OK && zpi_sched_follows(&old, cfg)) {
        rc = zpi_sched_copy(&use, &old);
    } else if (rc == ZP_OK) {
        if (st->n_ranks != st->world_size)
            rc = zpi_err_set(err, ZP_ERR_INVALID,
                             "the mixture's weight schedule differs from the state's: a resume "
                             "that changes the schedule needs the job state of all %" PRIu32
                             " ranks (zp_mpi_state_save, zephon state merge), which says "
                             "where the whole job stands; this state holds %zu",
                             st->world_size, st->n_ranks);
        else {
            uint64_t cut = zpi_state_high_water(st);
            rc = zpi_sched_cut(&old, cfg, cut < old.since ? old.since : cut, &use, err);
        }
    }
    if (rc == ZP_OK && zpi_worksource_set_schedule(ws, &use) != ZP_OK)
        rc = zpi_err_set(err, ZP_ERR_INVALID, "%s", zp_worksource_errmsg(ws));
    if (rc != ZP_OK && !err->code)
        zpi_err_set(err, rc, "out of memory for the schedule");
    zpi_sched_clear(&old);
    zpi_sched_clear(&use);
    return rc;
}

zp_status zp_pipeline_state_restore(zp_pipeline *p, const char *json, size_t len)
{
    if (!p)
        return ZP_ERR_INVALID;
    zpi_err *perr = zpi_pipeline_err(p);
    ZPI_RETURN_ERR_IF(!json, perr, ZP_ERR_INVALID, "zp_pipeline_state_restore: json is NULL");
    ZPI_RETURN_ERR_IF(zpi_pipeline_started(p), perr, ZP_ERR_STATE,
                      "zp_pipeline_state_restore: the pipeline already started: restore before "
                      "the first next()");
    zp_status failed = zpi_pipeline_failed(p);
    if (failed != ZP_OK)
        return failed;
    zp_worksource *ws = zpi_pipeline_ws(p);
    const zp_worksource_config *wc = zp_worksource_get_config(ws);
    zpi_ckpt *ck = zpi_pipeline_ckpt(p);
    zpi_err err = {0};
    zpi_state st;
    memset(&st, 0, sizeof st);
    zpi_rank_state rs;
    memset(&rs, 0, sizeof rs);
    char *mine = NULL;
    zp_status rc = zpi_state_parse(json, len, &st, &err);
    if (rc == ZP_OK)
        rc = zpi_state_check(&st, &err);
    if (rc == ZP_OK && st.n_parts == zp_worksource_num_parts(ws))
        rc = restore_schedule(&st, ws, &err);
    if (rc == ZP_OK && (rc = settings_for(p, &st, &mine)) != ZP_OK)
        zpi_err_set(&err, rc, "out of memory");
    if (rc == ZP_OK && (rc = zpi_state_check_settings(&st, mine, &err)) == ZP_ERR_MISMATCH)
        dataset_hint(p, &st, &err);
    if (rc == ZP_OK)
        rc = check_parts(&st, ws, &err);
    if (rc == ZP_OK)
        rc = zpi_state_rank_plan(&st, wc->rank, wc->world_size, &rs, &err);
    if (rc == ZP_OK && rs.n_parts != zp_worksource_num_parts(ws))
        rc = zpi_err_set(&err, ZP_ERR_FORMAT, "the state counts %zu parts: the mixture has %zu",
                         rs.n_parts, zp_worksource_num_parts(ws));
    const zpi_skip *late = rc == ZP_OK ? skip_before(ck, rs.next_batch) : NULL;
    if (late)
        rc = zpi_err_set(&err, ZP_ERR_INVALID,
                         "skip batches %llu-%llu: the state resumes at batch %llu, so they "
                         "were delivered already",
                         (unsigned long long)late->first, (unsigned long long)late->last,
                         (unsigned long long)rs.next_batch);
    if (rc == ZP_OK && (rc = zpi_worksource_set_plans(ws, rs.plans, rs.n_plans)) == ZP_OK) {
        zp_worksource_state w = {wc->seed, rs.epoch, rs.position};
        rc = zp_worksource_set_state(ws, &w);
    }
    if (rc != ZP_OK && !err.code)
        zpi_err_set(&err, rc, "%s", zp_worksource_errmsg(ws));
    if (rc != ZP_OK && zpi_worksource_config_schedule(ws)) /* back to the configured one */
        zpi_worksource_set_schedule(ws, zpi_worksource_config_schedule(ws));
    /* the bookkeeping: counts, parts, the skips that came with the state */
    zpi_skip *skips = NULL;
    const size_t n_req = ck->n_skips - ck->n_prior_skips;
    if (rc == ZP_OK && rs.n_skips + n_req) {
        skips = calloc(rs.n_skips + n_req, sizeof *skips);
        if (!skips)
            rc = zpi_err_set(&err, ZP_ERR_NOMEM, "out of memory");
    }
    uint64_t *ps = NULL, *pt = NULL;
    if (rc == ZP_OK) {
        ps = calloc(rs.n_parts ? rs.n_parts : 1, sizeof *ps);
        pt = calloc(rs.n_parts ? rs.n_parts : 1, sizeof *pt);
        if (!ps || !pt)
            rc = zpi_err_set(&err, ZP_ERR_NOMEM, "out of memory");
    }
    if (rc == ZP_OK) {
        if (rs.n_skips)
            memcpy(skips, rs.skips, rs.n_skips * sizeof *skips);
        if (n_req)
            memcpy(skips + rs.n_skips, ck->skips + ck->n_prior_skips, n_req * sizeof *skips);
        free(ck->skips);
        ck->skips = skips;
        ck->n_skips = rs.n_skips + n_req;
        ck->n_prior_skips = rs.n_skips;
        skips = NULL;
        memcpy(ps, rs.part_samples, rs.n_parts * sizeof *ps);
        memcpy(pt, rs.part_tokens, rs.n_parts * sizeof *pt);
        free(ck->part_samples);
        free(ck->part_tokens);
        ck->part_samples = ps;
        ck->part_tokens = pt;
        ck->nparts = rs.n_parts;
        /* per phase: the phases the restored schedule keeps (pipeline.c
         * sizes the array to the schedule at the start) */
        free(ck->phase_samples);
        ck->phase_samples = NULL;
        ck->nphases = 0;
        if (rs.n_phases && rs.n_parts &&
            (ck->phase_samples = calloc(rs.n_phases * rs.n_parts, sizeof *ck->phase_samples))) {
            size_t keep = rs.n_phases < zp_worksource_num_phases(ws)
                              ? rs.n_phases
                              : zp_worksource_num_phases(ws);
            memcpy(ck->phase_samples, rs.phase_samples,
                   keep * rs.n_parts * sizeof *ck->phase_samples);
            ck->nphases = keep;
        }
        ps = pt = NULL;
        ck->base = rs.counts;
        if (zpi_covtab_restore(&ck->cov, rs.cov, rs.n_cov, st.world_size == wc->world_size) !=
            ZP_OK)
            ck->cov.lost = 1; /* zp_pipeline_coverage says so */
        ck->next_batch = rs.next_batch;
        ck->at.valid = 1;
        ck->at.epoch = rs.epoch;
        ck->at.position = rs.position;
        ck->at.token_offset = rs.token_offset;
        ck->at.carry = rs.carry;
        ck->at.rows = rs.window_rows;
        ck->bal_done = rs.balance_done;
        free(ck->done);
        ck->done = rs.window_done; /* taken */
        ck->done_cap = rs.n_window_done * 2;
        ck->at.done = ck->done;
        ck->at.n_done = rs.n_window_done;
        ck->done_lost = 0;
        rs.window_done = NULL;
        rs.n_window_done = 0;
        ck->restored = 1;
    }
    free(skips);
    free(ps);
    free(pt);
    free(mine);
    zpi_rank_state_clear(&rs);
    zpi_state_clear(&st);
    if (rc != ZP_OK)
        return zpi_err_set(perr, rc, "zp_pipeline_state_restore: %s", zpi_err_msg(&err));
    return ZP_OK;
}

zp_status zp_pipeline_skip_batches(zp_pipeline *p, uint64_t first, uint64_t last)
{
    if (!p)
        return ZP_ERR_INVALID;
    zpi_err *perr = zpi_pipeline_err(p);
    ZPI_RETURN_ERR_IF(zpi_pipeline_started(p), perr, ZP_ERR_STATE,
                      "zp_pipeline_skip_batches: the pipeline already started: skip before the "
                      "first next()");
    ZPI_RETURN_ERR_IF(last < first, perr, ZP_ERR_INVALID,
                      "zp_pipeline_skip_batches: %llu-%llu: the last batch comes before the first",
                      (unsigned long long)first, (unsigned long long)last);
    zpi_ckpt *ck = zpi_pipeline_ckpt(p);
    ZPI_RETURN_ERR_IF(first < ck->next_batch, perr, ZP_ERR_INVALID,
                      "zp_pipeline_skip_batches: %llu-%llu: the stream resumes at batch %llu, so "
                      "batch %llu was delivered already",
                      (unsigned long long)first, (unsigned long long)last,
                      (unsigned long long)ck->next_batch, (unsigned long long)first);
    for (size_t i = ck->n_prior_skips; i < ck->n_skips; i++)
        ZPI_RETURN_ERR_IF(first <= ck->skips[i].last && ck->skips[i].first <= last, perr,
                          ZP_ERR_INVALID,
                          "zp_pipeline_skip_batches: %llu-%llu overlaps %llu-%llu",
                          (unsigned long long)first, (unsigned long long)last,
                          (unsigned long long)ck->skips[i].first,
                          (unsigned long long)ck->skips[i].last);
    zpi_skip *a = realloc(ck->skips, (ck->n_skips + 1) * sizeof *a);
    ZPI_RETURN_ERR_IF(!a, perr, ZP_ERR_NOMEM, "zp_pipeline_skip_batches: out of memory");
    ck->skips = a;
    /* keep the requested ranges ascending */
    size_t at = ck->n_skips;
    while (at > ck->n_prior_skips && a[at - 1].first > first) {
        a[at] = a[at - 1];
        at--;
    }
    memset(&a[at], 0, sizeof a[at]);
    a[at].first = first;
    a[at].last = last;
    ck->n_skips++;
    return ZP_OK;
}

zp_status zp_pipeline_phase_counts(const zp_pipeline *p, size_t phase, size_t part,
                                   uint64_t *samples)
{
    if (!p)
        return ZP_ERR_INVALID;
    zp_pipeline *mp = (zp_pipeline *)p;
    zpi_ckpt *ck = zpi_pipeline_ckpt(mp);
    zp_worksource *ws = zpi_pipeline_ws(p);
    size_t np = zp_worksource_num_parts(ws), nph = zp_worksource_num_phases(ws);
    ZPI_RETURN_ERR_IF(part >= np || phase >= nph, zpi_pipeline_err(mp), ZP_ERR_INVALID,
                      "zp_pipeline_phase_counts: phase %zu, part %zu: the mixture has %zu "
                      "phase(s) and %zu part(s)",
                      phase, part, nph, np);
    uint64_t s = 0;
    if (ck->phase_samples && phase < ck->nphases && part < ck->nparts)
        s = ck->phase_samples[phase * ck->nparts + part];
    if (samples)
        *samples = s;
    return ZP_OK;
}

zp_status zp_pipeline_part_counts(const zp_pipeline *p, size_t part, uint64_t *samples,
                                  uint64_t *tokens)
{
    if (!p)
        return ZP_ERR_INVALID;
    zp_pipeline *mp = (zp_pipeline *)p;
    zpi_ckpt *ck = zpi_pipeline_ckpt(mp);
    size_t np = zp_worksource_num_parts(zpi_pipeline_ws(p));
    ZPI_RETURN_ERR_IF(part >= np, zpi_pipeline_err(mp), ZP_ERR_INVALID,
                      "zp_pipeline_part_counts: part = %zu: the mixture has %zu part(s)", part, np);
    uint64_t s = 0, t = 0;
    if (ck->part_samples && part < ck->nparts) {
        s = ck->part_samples[part];
        t = ck->part_tokens[part];
    }
    if (samples)
        *samples = s;
    if (tokens)
        *tokens = t;
    return ZP_OK;
}
