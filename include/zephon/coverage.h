/*
 * zephon/coverage.h - the coverage certificate: an order-independent digest
 * of the samples delivered in an epoch, compared with the digest of the
 * epoch's plan (docs/report.md, "Coverage certificate").
 *
 * A digest folds each sample's (global_id, pass) through a 64-bit mix m and
 * keeps the count, the sum of m mod 2^64 and the xor of m. Folding is
 * commutative and associative, so the digest does not depend on the order of
 * delivery, on the thread count or on how samples were split between ranks:
 * the digests of the ranks add up (zp_coverage_merge) to the job's. Two
 * digests that differ mean different multisets of samples; the count tells
 * missing (fewer) from repeated (more). Equal digests of different
 * multisets need a collision of the 64-bit sum and xor together.
 *
 * What a pipeline folds: each sample of zp_batch.samples with padded == 0
 * (remainder padding repeats samples by policy: counted apart). In token
 * modes a document is listed once, with the batch of its first token, and
 * folded there; a document continued after a resume (token_offset > 0) is
 * not listed again, so not folded again. Records dropped by a map callback
 * (zp_record_drop), bad records skipped (ZP_BAD_RECORD_SKIP) and batches
 * skipped on request (zp_pipeline_skip_batches) are not delivered: they are
 * not folded, and a certificate names them as missing.
 *
 * The expected digest of an epoch comes from the WorkSource
 * (zp_worksource_coverage, zephon/worksource.h); a pipeline's per-epoch
 * digests from zp_pipeline_coverage (zephon/certificate.h).
 *
 * Thread safety: these helpers work on their arguments only.
 */
#ifndef ZEPHON_COVERAGE_H
#define ZEPHON_COVERAGE_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An order-independent digest of a multiset of samples. All zero: empty. */
typedef struct zp_coverage {
    uint64_t count; /* samples folded */
    uint64_t sum;   /* sum of zp_coverage_mix() mod 2^64 */
    uint64_t xr;    /* xor of zp_coverage_mix() */
} zp_coverage;

/* The 64-bit mix of a sample: a bijective finalizer of global_id combined
 * with pass (the same global id in another pass of its part is another
 * sample of the epoch). Fixed: states store digests. */
ZP_API uint64_t zp_coverage_mix(uint64_t global_id, uint64_t pass);
/* Fold one sample into c. */
ZP_API void zp_coverage_fold(zp_coverage *c, uint64_t global_id, uint64_t pass);
/* a += b (the digest of both multisets). */
ZP_API void zp_coverage_merge(zp_coverage *a, const zp_coverage *b);
/* 1 when a and b hold the same digest. */
ZP_API int zp_coverage_equal(const zp_coverage *a, const zp_coverage *b);

#ifdef __cplusplus
}
#endif
#endif
