/*
 * certificate.c - a pipeline's per-epoch coverage digests
 * (zephon/certificate.h): folded by the consumer as batches are delivered
 * (pipeline.c's bookkeeping), saved in and restored from states
 * (pipeline_state.c), and compared with the rank's plan for the epoch.
 *
 * The table holds one entry per epoch with deliveries: the memory is set
 * by the epochs run, not by the samples.
 */
#include <stdlib.h>
#include <string.h>

#include "api/pipeline_internal.h"
#include "base/util.h"
#include "plan/worksource_internal.h"
#include "zephon/certificate.h"

/* The entry of `epoch` in a[0 .. n) (ascending), or NULL. */
static zpi_cov_epoch *find(zpi_cov_epoch *a, size_t n, uint32_t epoch)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a[mid].epoch < epoch)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && a[lo].epoch == epoch ? &a[lo] : NULL;
}

/* The delivered entry of `epoch`, made when missing (NULL: out of memory). */
static zpi_cov_epoch *entry(zpi_covtab *t, uint32_t epoch)
{
    /* deliveries move forward: the last entry is almost always the one */
    if (t->n && t->d[t->n - 1].epoch == epoch)
        return &t->d[t->n - 1];
    zpi_cov_epoch *e = find(t->d, t->n, epoch);
    if (e)
        return e;
    void *a = t->d;
    if (zpi_grow(&a, &t->cap, t->n + 1, sizeof *t->d) != 0)
        return NULL;
    t->d = a;
    size_t i = t->n;
    while (i > 0 && t->d[i - 1].epoch > epoch)
        i--;
    memmove(&t->d[i + 1], &t->d[i], (t->n - i) * sizeof *t->d);
    memset(&t->d[i], 0, sizeof t->d[i]);
    t->d[i].epoch = epoch;
    t->n++;
    return &t->d[i];
}

void zpi_cov_fold_batch(zpi_covtab *t, const zp_batch *b)
{
    zpi_cov_epoch *e = NULL;
    for (size_t i = 0; i < b->n_samples; i++) {
        const zp_sample *s = &b->samples[i];
        if (!e || e->epoch != s->epoch)
            e = entry(t, s->epoch);
        if (!e) {
            t->lost = 1;
            continue;
        }
        if (s->padded)
            e->padded++;
        else
            zp_coverage_fold(&e->c, s->global_id, s->pass);
    }
}

void zpi_cov_mark_start(zp_pipeline *p)
{
    zpi_ckpt *ck = zpi_pipeline_ckpt(p);
    zpi_covtab *t = &ck->cov;
    if (t->start_set)
        return;
    t->start_set = 1;
    free(t->done0);
    t->done0 = NULL;
    t->n_done0 = 0;
    if (ck->restored) {
        t->epoch0 = ck->at.epoch;
        t->pos0 = ck->at.position;
        t->tok0 = ck->at.token_offset;
        t->bal0 = ck->bal_done;
        if (ck->at.n_done) {
            t->done0 = malloc(2 * ck->at.n_done * sizeof *t->done0);
            if (t->done0) {
                memcpy(t->done0, ck->at.done, 2 * ck->at.n_done * sizeof *t->done0);
                t->n_done0 = ck->at.n_done;
            } else {
                t->lost = 1;
            }
        }
    } else {
        zp_worksource_state st;
        zp_worksource_get_state(zpi_pipeline_ws(p), &st);
        t->epoch0 = st.epoch;
        t->pos0 = st.position;
        t->tok0 = t->bal0 = 0;
    }
}

zp_status zpi_cov_restore(zpi_covtab *t, const zpi_cov_epoch *c, size_t n)
{
    zpi_cov_epoch *d = malloc((n ? n : 1) * sizeof *d);
    zpi_cov_epoch *b = malloc((n ? n : 1) * sizeof *b);
    if (!d || !b) {
        free(d);
        free(b);
        return ZP_ERR_NOMEM;
    }
    if (n) {
        memcpy(d, c, n * sizeof *d);
        memcpy(b, c, n * sizeof *b);
    }
    free(t->d);
    free(t->base);
    t->d = d;
    t->n = t->cap = n;
    if (!n)
        t->cap = 1;
    t->base = b;
    t->n_base = n;
    t->lost = 0;
    t->start_set = 0;
    return ZP_OK;
}

zp_status zpi_cov_copy(const zpi_covtab *t, zpi_cov_epoch **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (!t->n)
        return ZP_OK;
    *out = malloc(t->n * sizeof **out);
    if (!*out)
        return ZP_ERR_NOMEM;
    memcpy(*out, t->d, t->n * sizeof **out);
    *n = t->n;
    return ZP_OK;
}

void zpi_cov_clear(zpi_covtab *t)
{
    free(t->d);
    free(t->base);
    free(t->done0);
    memset(t, 0, sizeof *t);
}

size_t zp_pipeline_coverage_epochs(const zp_pipeline *p, uint32_t *epochs, size_t cap)
{
    if (!p)
        return 0;
    const zpi_covtab *t = &zpi_pipeline_ckpt((zp_pipeline *)p)->cov;
    for (size_t i = 0; i < t->n && i < cap && epochs; i++)
        epochs[i] = t->d[i].epoch;
    return t->n;
}

/* 1 when position pos0 + k of the start epoch was delivered before the
 * resume, as a document of a best-fit window (listed then). */
static int done_before(const zpi_covtab *t, uint64_t k)
{
    for (size_t i = 0; i < t->n_done0; i++)
        if (t->done0[2 * i] == k)
            return 1;
    return 0;
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
    const zpi_cov_epoch *d = find(t->d, t->n, epoch);
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
        zpi_cov_mark_start(p);
    const zpi_cov_epoch *b = find(t->base, t->n_base, epoch);
    if (b)
        out->expected = b->c;
    out->checked = !(epoch == t->epoch0 && t->bal0);
    if (!out->checked || epoch < t->epoch0)
        return ZP_OK;
    const uint64_t len = zp_worksource_epoch_samples(ws, epoch);
    for (uint64_t pos = epoch == t->epoch0 ? t->pos0 : 0; pos < len; pos++) {
        if (epoch == t->epoch0 && pos == t->pos0 && t->tok0)
            continue; /* listed before the resume, continued after it */
        if (epoch == t->epoch0 && t->n_done0 && done_before(t, pos - t->pos0))
            continue;
        zp_sample s;
        zp_status st = zp_worksource_sample(ws, epoch, pos, &s);
        ZPI_RETURN_ERR_IF(st != ZP_OK, perr, st, "zp_pipeline_coverage: epoch %u: %s", epoch,
                          zp_worksource_errmsg(ws));
        if (!s.padded && !s.token_offset)
            zp_coverage_fold(&out->expected, s.global_id, s.pass);
    }
    return ZP_OK;
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
    const zp_worksource_config *wc = zp_worksource_get_config(ws);
    uint64_t keep = zp_worksource_draws_per_epoch(ws);
    if (wc->remainder == ZP_REMAINDER_DROP) {
        unsigned __int128 k = (unsigned __int128)wc->world_size * zp_worksource_samples_per_rank(ws);
        if (k < keep)
            keep = (uint64_t)k;
    }
    uint64_t lo = (uint64_t)((unsigned __int128)keep * slice / slices);
    uint64_t hi = (uint64_t)((unsigned __int128)keep * (slice + 1) / slices);
    zp_status st = zp_worksource_coverage(ws, epoch, lo, hi - lo, out);
    ZPI_RETURN_ERR_IF(st != ZP_OK, perr, st, "zp_pipeline_stream_coverage: epoch %u: %s", epoch,
                      zp_worksource_errmsg(ws));
    return ZP_OK;
}
