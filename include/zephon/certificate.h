/*
 * zephon/certificate.h - a pipeline's per-epoch coverage digests: what it
 * delivered of each epoch and what its plan says it should deliver
 * (zephon/coverage.h explains the digest; docs/report.md, "Coverage
 * certificate", how a job's certificate is made from them).
 *
 * Thread safety: the consumer's thread (like zp_pipeline_next).
 */
#ifndef ZEPHON_CERTIFICATE_H
#define ZEPHON_CERTIFICATE_H

#include "coverage.h"
#include "pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One epoch of one pipeline (one rank). */
typedef struct zp_epoch_coverage {
    uint32_t epoch;
    zp_coverage delivered; /* samples of the epoch delivered (padded ones
                              left out), those of a restored state included */
    zp_coverage expected;  /* what this rank should deliver of the epoch: the
                              restored state's digest of it plus this rank's
                              plan for it from where the run started (padded
                              positions and documents continued with a token
                              offset left out) */
    uint64_t padded;       /* padded samples delivered (remainder padding) */
    int finished;          /* 1: this rank's stream is past the epoch */
    int checked;           /* 0: `expected` is not known for this rank (a
                              run resumed inside an attention-balance window
                              of the epoch); the job's digest still is */
} zp_epoch_coverage;

/* The epochs this pipeline delivered samples of or restored digests of,
 * ascending: the first min(n, cap) into epochs (may be NULL with cap 0);
 * returns n. */
ZP_API size_t zp_pipeline_coverage_epochs(const zp_pipeline *p, uint32_t *epochs, size_t cap);
/* The coverage of `epoch` (any epoch: one without deliveries has empty
 * digests). With `expected` 0, out->expected is left empty and checked 0
 * (cheap: a lookup); with 1 it is computed, at the cost of one
 * zp_worksource_sample() per position of the rank's plan for the epoch:
 * ask for it at the end of an epoch or at report time, not per batch.
 * Consumer's thread.
 * @return ZP_OK; ZP_ERR_INVALID for NULL arguments; the worksource's status
 *         (zp_pipeline_errmsg names it). */
ZP_API zp_status zp_pipeline_coverage(zp_pipeline *p, uint32_t epoch, int expected,
                                      zp_epoch_coverage *out);

/* The expected digest of `epoch` for the whole job, in `slices` slices
 * (the ranks of a job compute one each and merge them):
 * zp_worksource_epoch_coverage on the pipeline's worksource.
 * @return ZP_OK; ZP_ERR_INVALID (slice >= slices, out NULL); the
 *         worksource's status. */
ZP_API zp_status zp_pipeline_stream_coverage(zp_pipeline *p, uint32_t epoch, uint32_t slice,
                                             uint32_t slices, zp_coverage *out);

#ifdef __cplusplus
}
#endif
#endif
