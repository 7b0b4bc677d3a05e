/*
 * zephon/balance.h - attention-cost balance of packed rows (included by
 * zephon/pipeline.h). docs/packing.md, "Balanced attention cost".
 *
 * With document masking, attention over a packed row costs about the sum
 * of its documents' squared lengths, not its token count: rows with equal
 * token counts differ by up to seq_len times. A window of microbatches (a
 * rank's gradient-accumulation steps, or every rank's of a global step)
 * can give its rows to its microbatches so that the costliest microbatch
 * is as cheap as the window allows; these functions compute that, and the
 * pipeline (zp_pipeline_balance) and the MPI layer (zp_mpi_balance) apply
 * them.
 */
#ifndef ZEPHON_BALANCE_H
#define ZEPHON_BALANCE_H

#include <stdint.h>

#include "batch.h"
#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The attention cost of row r of a token batch: the sum over the runs of
 * equal segment ids among its inputs (tokens[:, :-1]) that are documents
 * (segment id >= 0) of the run's length squared. Padding costs 0. */
ZP_API uint64_t zp_row_cost(const int32_t *segment_ids, size_t inputs);

/* The costs of every row of token batch b into cost[0 .. b->rows). */
ZP_API void zp_batch_row_costs(const zp_batch *b, uint64_t *cost);

/* Assigns n = groups x per rows to `groups` groups of exactly `per` rows
 * each, so that the largest group's sum of costs is small: rows by cost
 * descending (ties: lower index first), each to the group with the
 * smallest sum that still has room (ties: lower group), then swaps of a
 * row of the costliest group with a cheaper row of another while that
 * lowers the costliest group's sum (at most `n` swaps). The result depends
 * only on the costs: every rank computing it gets the same.
 * group[i] receives the group of row i (0 .. groups - 1). When sums is not
 * NULL, sums[g] receives group g's cost.
 * @return ZP_OK; ZP_ERR_INVALID (groups or per 0, or n over 2^32 - 1);
 *         ZP_ERR_NOMEM. */
ZP_API zp_status zp_balance_rows(const uint64_t *cost, size_t groups, size_t per, uint32_t *group,
                                 uint64_t *sums);

#ifdef __cplusplus
}
#endif
#endif
