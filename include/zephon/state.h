/*
 * zephon/state.h - checkpoint and exact resume of a pipeline, elastic resume
 * on another world size, and skipping a stretch of batches
 * (docs/state.md has the format, an example and the guarantees).
 *
 * A state is small, versioned, human-readable JSON: the seed, the next
 * batch, the position of the next sample in this rank's stream (epoch,
 * position), the packer's carried-over document as a sample position and a
 * token offset (never the tokens), the realized counts per mixture part,
 * the skipped ranges, and every setting that changes the data (dataset
 * fingerprint, parts and weights, shuffle, remainder, epoch draws,
 * packing, tokenizer, field, map operators) with a hash of them. It does
 * not depend on threads, parallelism, prefetching or buffering.
 *
 * A rank's state restores that rank's exact stream. A job state (every
 * rank's state, merged by zp_state_merge(); under MPI zp_mpi_state_save()
 * writes it) restores on any world size: the same world size continues
 * each rank's exact stream; another one re-splits what the job had not
 * delivered among the new ranks (elastic resume), so that over the epoch
 * no sample is lost or repeated.
 *
 * Thread safety: like the pipeline's (the consumer's thread).
 */
#ifndef ZEPHON_STATE_H
#define ZEPHON_STATE_H

#include "common.h"
#include "pipeline.h"
#include "state_json.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The pipeline's state after the last delivered batch (before the first
 * zp_pipeline_next(): where it will start), as JSON.
 * OUT: *json, NUL-terminated, caller owns; release with free(); *len its
 * length without the NUL (len may be NULL).
 * @return ZP_OK; ZP_ERR_STATE after an error ended the stream (the state
 * of a failed stream is not saved); ZP_ERR_NOMEM. */
ZP_API zp_status zp_pipeline_state_save(zp_pipeline *p, char **json, size_t *len);

/* Continue from a saved state. Call after the builder calls and before the
 * first zp_pipeline_next(); json (len bytes, no NUL needed) is a rank's
 * state or a job state.
 * @return ZP_OK; ZP_ERR_FORMAT for bytes that are not a state (the message
 * names the field); ZP_ERR_UNSUPPORTED for another version;
 * ZP_ERR_MISMATCH when a setting that changes the data differs (the
 * message names each one, with the state's value and this pipeline's);
 * ZP_ERR_INVALID when the state cannot be restored on this rank (a rank's
 * state on another rank or world size: restore a job state instead);
 * ZP_ERR_STATE after the first next(). */
ZP_API zp_status zp_pipeline_state_restore(zp_pipeline *p, const char *json, size_t len);

/* Make batches first .. last (inclusive, numbered as zp_batch.index) and
 * drop them instead of delivering them: every later batch is exactly the
 * batch it would have been, with its index. The skipped batches' samples
 * and tokens are counted and named in the state. Before the first next();
 * repeatable; ranges may not overlap (ZP_ERR_INVALID). */
ZP_API zp_status zp_pipeline_skip_batches(zp_pipeline *p, uint64_t first, uint64_t last);

/* Realized proportions per phase of the mixture's weight schedule
 * (docs/mixtures.md, "Weight schedules"): the samples of `part` delivered
 * from draws of `phase` (zp_worksource_num_phases() phases; 1 without a
 * schedule), carried through a state like zp_pipeline_part_counts().
 * @return ZP_OK; ZP_ERR_INVALID when phase or part is out of range. */
ZP_API zp_status zp_pipeline_phase_counts(const zp_pipeline *p, size_t phase, size_t part,
                                          uint64_t *samples);

/* Realized mixture proportions: the samples and tokens (EOT separators
 * included) of each part delivered so far (skipped batches not counted).
 * @return ZP_OK; ZP_ERR_INVALID when part >= zp_worksource_num_parts(). */
ZP_API zp_status zp_pipeline_part_counts(const zp_pipeline *p, size_t part, uint64_t *samples,
                                         uint64_t *tokens);

#ifdef __cplusplus
}
#endif
#endif
