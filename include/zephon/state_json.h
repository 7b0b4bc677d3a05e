/*
 * zephon/state_json.h - state documents on their own, without a pipeline:
 * the format's version, merging the states of a job's ranks, and a state
 * in words (zephon/state.h saves and restores them; docs/state.md).
 */
#ifndef ZEPHON_STATE_JSON_H
#define ZEPHON_STATE_JSON_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Version written in the "version" field; states of another version are
 * refused. */
#define ZP_STATE_VERSION 1

/* Merge the states of every rank of a job (n states, one per rank, any
 * order) into a job state, after checking that they agree: the same
 * version, settings, world size (= n) and next batch, each rank once.
 * OUT: *out caller frees with free(); *out_len may be NULL. On failure err
 * (errcap bytes) names the rank and what differs.
 * @return ZP_OK; ZP_ERR_MISMATCH; ZP_ERR_FORMAT; ZP_ERR_NOMEM. */
ZP_API zp_status zp_state_merge(const char *const *states, const size_t *lens, size_t n, char **out,
                                size_t *out_len, char *err, size_t errcap);

/* A state in words (what `zephon state show` prints): position, epoch and
 * pass per part, proportions so far, skipped ranges, settings and hash.
 * OUT: *text caller frees with free(). On failure err names the cause. */
ZP_API zp_status zp_state_describe(const char *json, size_t len, char **text, char *err,
                                   size_t errcap);

#ifdef __cplusplus
}
#endif
#endif
