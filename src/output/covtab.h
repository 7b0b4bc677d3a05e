/*
 * covtab.h - a pipeline's per-epoch coverage digests (private): folded by
 * the consumer as batches are delivered (api/pipeline.c), saved in and
 * restored from states (api/pipeline_state.c), read by
 * api/certificate.c (zephon/certificate.h). One entry per epoch with
 * deliveries: the memory is set by the epochs run, not by the samples.
 *
 * Thread safety: the consumer's thread only.
 */
#ifndef ZP_COVTAB_H
#define ZP_COVTAB_H

#include "output/outq.h"
#include "plan/state.h"
#include "zephon/batch.h"
#include "zephon/worksource.h"

/* The coverage digests the consumer folds (covtab.c): per epoch,
 * what was delivered (restored digests included) and what a restored state
 * brought; and where this run's stream started, for the expected digest. */
typedef struct zpi_covtab {
    zpi_cov_epoch *d;   /* delivered, ascending by epoch (owned) */
    size_t n, cap;
    zpi_cov_epoch *base; /* restored, ascending by epoch (owned) */
    size_t n_base;
    int lost;           /* out of memory while folding: digests incomplete */
    int start_set;      /* the start below was taken (first next()) */
    uint32_t epoch0;    /* this run's first sample: (epoch0, pos0); */
    uint64_t pos0, tok0; /* tok0 > 0: the one at pos0 was listed before */
    uint64_t bal0;      /* resumed inside an attention-balance window */
    uint64_t *done0;    /* best-fit: window documents delivered before, */
    size_t n_done0;     /* pairs (k, t) after pos0 (owned) */
    int exact;          /* restored from this rank's own state (same world
                           size): its digests before are its own */
} zpi_covtab;

/* Fold a delivered batch's samples (padded ones counted apart). Out of
 * memory: t->lost is set. */
void zpi_covtab_fold_batch(zpi_covtab *t, const zp_batch *b);
/* Take where this run's stream starts (once, before the first batch is
 * made): a restored state's resume point `at` (with its best-fit window
 * documents and the balance window's delivered batches), else the
 * worksource's state. */
void zpi_covtab_mark_start(zpi_covtab *t, int restored, const zpi_resume_pt *at,
                           uint64_t bal_done, const zp_worksource *ws);
/* A restored state's digests (copied; the start is taken again); exact: the
 * rank's own state (an exact resume), else an elastic re-split's.
 * ZP_ERR_NOMEM. */
zp_status zpi_covtab_restore(zpi_covtab *t, const zpi_cov_epoch *c, size_t n, int exact);
/* A copy of the digests for a state (*out owned, NULL when n is 0).
 * ZP_ERR_NOMEM. */
zp_status zpi_covtab_copy(const zpi_covtab *t, zpi_cov_epoch **out, size_t *n);
/* The entry of `epoch` in a[0 .. n) (ascending), or NULL. */
const zpi_cov_epoch *zpi_covtab_find(const zpi_cov_epoch *a, size_t n, uint32_t epoch);
/* 1 when position pos0 + k of the start epoch was delivered before the
 * resume (a best-fit window's document, listed then). */
int zpi_covtab_done_before(const zpi_covtab *t, uint64_t k);
/* Free the table (accepts a zeroed one). */
void zpi_covtab_clear(zpi_covtab *t);

#endif
