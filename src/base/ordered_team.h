/*
 * ordered_team.h - a team of threads that works on a stream of items in
 * parallel and consumes the results in input order (private).
 *
 * Items are numbered 0, 1, 2, ... and live in `window` slots (item i in
 * slot i % window; the caller owns the slots' memory). Three callbacks:
 *
 *   take(i, slot)       sets up item i (reads its input): one call at a
 *                       time, in item order. ZP_OK: an item; ZP_END: the
 *                       stream is over (no item i); anything else stops
 *                       the team.
 *   work(i, slot, t)    works on item i (the thread that took it, right
 *                       after the take): any number at once. t is the
 *                       thread's number (0 .. threads-1), for per-thread
 *                       state. A status other than ZP_OK stops the team.
 *   put(i, slot)        consumes item i (writes its output): one call at a
 *                       time, in item order, once item i is worked. A
 *                       status other than ZP_OK stops the team.
 *
 * At most `window` items are taken and not yet put, which bounds memory. A
 * thread with nothing to do sleeps on a condition variable (it does not
 * spin in a barrier, which matters on a shared machine). No callback runs
 * with the team's lock held, and each callback's writes are seen by the
 * later ones of the same item (the lock orders the hand-overs).
 *
 * A callback that fails sets its zpi_err; the team stops taking, lets the
 * calls under way finish, and returns that first failure (its message in
 * *err). Items taken and not put are left in their slots (the caller frees
 * them). The threads are one OpenMP parallel region (num_threads clause
 * only: no process-wide OpenMP setting), opened by a thread started for
 * the run (so each run has a fresh OpenMP pool: runs one after the other
 * from one thread stay clean under ThreadSanitizer); the caller waits.
 */
#ifndef ZP_ORDERED_TEAM_H
#define ZP_ORDERED_TEAM_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct zpi_oteam_ops {
    zp_status (*take)(void *ctx, uint64_t i, size_t slot, zpi_err *err);
    zp_status (*work)(void *ctx, uint64_t i, size_t slot, int thread, zpi_err *err);
    zp_status (*put)(void *ctx, uint64_t i, size_t slot, zpi_err *err);
} zpi_oteam_ops;

/* Runs the team on `threads` threads (at least 1) until the stream is over
 * and every item is put (ZP_OK), or the first failure (its status, message
 * in err). window: slots, at least 1 (a few per thread keeps every thread
 * busy while the items are put in order). ZP_ERR_NOMEM when the team's
 * own state cannot be allocated. */
zp_status zpi_oteam_run(const zpi_oteam_ops *ops, void *ctx, size_t window, int threads,
                        zpi_err *err);

#endif
