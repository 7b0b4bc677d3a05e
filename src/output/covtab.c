/*
 * covtab.c - a pipeline's per-epoch coverage digests (covtab.h).
 */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "output/covtab.h"

const zpi_cov_epoch *zpi_covtab_find(const zpi_cov_epoch *a, size_t n, uint32_t epoch)
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
    const zpi_cov_epoch *f = zpi_covtab_find(t->d, t->n, epoch);
    if (f)
        return &t->d[f - t->d];
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

void zpi_covtab_fold_batch(zpi_covtab *t, const zp_batch *b)
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

void zpi_covtab_mark_start(zpi_covtab *t, int restored, const zpi_resume_pt *at,
                           uint64_t bal_done, const zp_worksource *ws)
{
    if (t->start_set)
        return;
    t->start_set = 1;
    free(t->done0);
    t->done0 = NULL;
    t->n_done0 = 0;
    if (restored) {
        t->epoch0 = at->epoch;
        t->pos0 = at->position;
        t->tok0 = at->token_offset;
        t->bal0 = bal_done;
        if (at->n_done) {
            t->done0 = malloc(2 * at->n_done * sizeof *t->done0);
            if (t->done0) {
                memcpy(t->done0, at->done, 2 * at->n_done * sizeof *t->done0);
                t->n_done0 = at->n_done;
            } else {
                t->lost = 1;
            }
        }
    } else {
        zp_worksource_state st;
        zp_worksource_get_state(ws, &st);
        t->epoch0 = st.epoch;
        t->pos0 = st.position;
        t->tok0 = t->bal0 = 0;
    }
}

zp_status zpi_covtab_restore(zpi_covtab *t, const zpi_cov_epoch *c, size_t n, int exact)
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
    t->exact = exact;
    return ZP_OK;
}

zp_status zpi_covtab_copy(const zpi_covtab *t, zpi_cov_epoch **out, size_t *n)
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

void zpi_covtab_clear(zpi_covtab *t)
{
    free(t->d);
    free(t->base);
    free(t->done0);
    memset(t, 0, sizeof *t);
}

/* 1 when position pos0 + k of the start epoch was delivered before the
 * resume, as a document of a best-fit window (listed then). */
int zpi_covtab_done_before(const zpi_covtab *t, uint64_t k)
{
    size_t lo = 0, hi = t->n_done0; /* pairs ascending by k (state.h) */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->done0[2 * mid] < k)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < t->n_done0 && t->done0[2 * lo] == k;
}

