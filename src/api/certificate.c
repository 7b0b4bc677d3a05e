/*
 * certificate.c - a pipeline's per-epoch coverage digests
 * (zephon/certificate.h): the table the consumer folds (output/covtab.c)
 * read, and the expected digests computed from the rank's plan and from the
 * epoch's stream.
 */
#include <stdlib.h>
#include <string.h>

#include "api/pipeline_internal.h"
#include "engine/engine.h"
#include "base/util.h"
#include "plan/worksource_internal.h"
#include "zephon/certificate.h"

size_t zp_pipeline_coverage_epochs(const zp_pipeline *p, uint32_t *epochs, size_t cap)
{
    if (!p)
        return 0;
    const zpi_covtab *t = &zpi_pipeline_ckpt((zp_pipeline *)p)->cov;
    for (size_t i = 0; i < t->n && i < cap && epochs; i++)
        epochs[i] = t->d[i].epoch;
    return t->n;
}

/* 1 when a plan (an elastic re-split's) gives the rank its positions in
 * `epoch`. */
static int has_plan(const zp_worksource *ws, uint32_t epoch)
{
    for (size_t i = 0; i < zpi_worksource_num_plans(ws); i++) {
        zpi_epoch_plan pl;
        zpi_worksource_plan(ws, i, &pl);
        if (pl.epoch == epoch)
            return 1;
    }
    return 0;
}

/* Fold the rank's positions [from, len) of `epoch` into out->expected,
 * padded ones and documents continued with a token offset left out; with
 * t (the start epoch of a resumed run), also those delivered before the
 * resume (the document at pos0 continued, best-fit window documents). */
static zp_status fold_range(zp_pipeline *p, zp_worksource *ws, uint32_t epoch, uint64_t from,
                            uint64_t len, const zpi_covtab *t, zp_epoch_coverage *out,
                            zpi_err *perr)
{
    if (t && epoch != t->epoch0)
        t = NULL;
    /* the worksource is the running engine's: read it under its lock, in
     * blocks, so that the engine is not held up for a whole epoch */
    zpi_engine *e = zpi_pipeline_engine(p);
    for (uint64_t pos = from; pos < len; pos++) {
        if ((pos - from) % 4096 == 0) {
            if (pos > from)
                zpi_engine_lock_ws(e, 0);
            zpi_engine_lock_ws(e, 1);
        }
        if (t && pos == t->pos0 && t->tok0)
            continue; /* listed before the resume, continued after it */
        if (t && t->n_done0 && zpi_covtab_done_before(t, pos - t->pos0))
            continue;
        zp_sample s;
        zp_status st = zp_worksource_sample(ws, epoch, pos, &s);
        if (st != ZP_OK) {
            zpi_err_set(perr, st, "zp_pipeline_coverage: epoch %u: %s", epoch,
                        zp_worksource_errmsg(ws));
            zpi_engine_lock_ws(e, 0);
            return st;
        }
        if (!s.padded && !s.token_offset)
            zp_coverage_fold(&out->expected, s.global_id, s.pass);
    }
    if (len > from)
        zpi_engine_lock_ws(e, 0);
    return ZP_OK;
}

zp_status zp_pipeline_coverage(zp_pipeline *p, uint32_t epoch, int expected,
                               zp_epoch_coverage *out)
{
    if (!p)
        return ZP_ERR_INVALID;
    zpi_err *perr = zpi_pipeline_err(p);
    ZPI_RETURN_ERR_IF(!out, perr, ZP_ERR_INVALID, "zp_pipeline_coverage: out is NULL");
    zpi_ckpt *ck = zpi_pipeline_ckpt(p);
    zpi_covtab *t = &ck->cov;
    zp_worksource *ws = zpi_pipeline_ws(p);
    ZPI_RETURN_ERR_IF(!ws, perr, ZP_ERR_STATE, "zp_pipeline_coverage: no worksource");
    ZPI_RETURN_ERR_IF(t->lost, perr, ZP_ERR_NOMEM,
                      "zp_pipeline_coverage: memory ran out while the digests were folded: "
                      "they are incomplete");
    memset(out, 0, sizeof *out);
    out->epoch = epoch;
    const zpi_cov_epoch *d = zpi_covtab_find(t->d, t->n, epoch);
    if (d) {
        out->delivered = d->c;
        out->padded = d->padded;
    }
    zp_worksource_state rs;
    zp_pipeline_resume_state(p, &rs);
    out->finished = rs.epoch > epoch;
    if (!expected)
        return ZP_OK;
    if (!t->start_set) /* not started: nothing of this run yet */
        zpi_covtab_mark_start(t, ck->restored, &ck->at, ck->bal_done, ws);
    const zpi_cov_epoch *b = zpi_covtab_find(t->base, t->n_base, epoch);
    const uint64_t len = zp_worksource_epoch_samples(ws, epoch);
    if (t->exact && !(b && b->merged) && !has_plan(ws, epoch)) {
        /* an exact resume of the rank's own state, in an epoch it reads by
         * its default range: what it delivered before and after the resume
         * is that range, each sample once (a fault carried in the state, a
         * position moved back or forth, shows here too) */
        out->checked = 1;
        return fold_range(p, ws, epoch, 0, len, NULL, out, perr);
    }
    if (b)
        out->expected = b->c;
    out->checked = !(epoch == t->epoch0 && t->bal0);
    if (!out->checked || epoch < t->epoch0)
        return ZP_OK;
    return fold_range(p, ws, epoch, epoch == t->epoch0 ? t->pos0 : 0, len, t, out, perr);
}

zp_status zp_pipeline_stream_coverage(zp_pipeline *p, uint32_t epoch, uint32_t slice,
                                      uint32_t slices, zp_coverage *out)
{
    if (!p)
        return ZP_ERR_INVALID;
    zpi_err *perr = zpi_pipeline_err(p);
    ZPI_RETURN_ERR_IF(!out || slices == 0 || slice >= slices, perr, ZP_ERR_INVALID,
                      "zp_pipeline_stream_coverage: slice %u of %u (out %s)", slice, slices,
                      out ? "given" : "NULL");
    zp_worksource *ws = zpi_pipeline_ws(p);
    ZPI_RETURN_ERR_IF(!ws, perr, ZP_ERR_STATE, "zp_pipeline_stream_coverage: no worksource");
    zpi_engine *e = zpi_pipeline_engine(p);
    zpi_engine_lock_ws(e, 1); /* (the running engine's worksource) */
    zp_status st = zp_worksource_epoch_coverage(ws, epoch, slice, slices, out);
    zpi_engine_lock_ws(e, 0);
    ZPI_RETURN_ERR_IF(st != ZP_OK, perr, st, "zp_pipeline_stream_coverage: epoch %u: %s", epoch,
                      zp_worksource_errmsg(ws));
    return ZP_OK;
}
