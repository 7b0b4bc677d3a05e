/*
 * plan.h - a rank's plan for one epoch (private): the positions it reads,
 * as spans of the epoch's stream, and the one lookup that the worksource
 * (which follows plans) and the state (which saves, checks, re-splits and
 * describes them) share.
 *
 * A plan's positions are its spans concatenated: position i of the rank's
 * epoch is the i-th position of that concatenation (state.h, "Positions").
 *
 * Thread safety: none needed; every call works on its arguments.
 */
#ifndef ZP_PLAN_H
#define ZP_PLAN_H

#include <stddef.h>
#include <stdint.h>

/* Positions [start, start + count) of an epoch's stream. */
typedef struct zpi_span {
    uint64_t start, count;
    /* Token modes: tokens of the span's first sample already delivered
     * (a document carried over when an elastic resume re-split the epoch);
     * usually 0. */
    uint64_t token_offset;
} zpi_span;

/* A rank's positions in one epoch: the spans, concatenated. */
typedef struct zpi_epoch_plan {
    uint32_t epoch;
    size_t n;
    zpi_span *spans; /* owned by whoever holds the plan */
} zpi_epoch_plan;

/* The plan of `epoch` among plans[0 .. n) (ascending by epoch), or NULL.
 * O(log n). */
const zpi_epoch_plan *zpi_plan_find(const zpi_epoch_plan *plans, size_t n, uint32_t epoch);

/* The plan's positions: its spans' counts added (the caller has checked
 * that they do not overflow). */
uint64_t zpi_plan_total(const zpi_epoch_plan *p);

/* The span that holds `position` and, in *at, the position of the epoch's
 * stream it stands for. pre: NULL (a walk over the spans, O(n)), or the
 * plan's prefix counts (pre[k]: the positions before span k, pre[n] the
 * total; O(log n)). Returns p->n when position is past the plan's end. */
size_t zpi_plan_locate(const zpi_epoch_plan *p, const uint64_t *pre, uint64_t position,
                       uint64_t *at);

#endif
