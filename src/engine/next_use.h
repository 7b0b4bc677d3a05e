/*
 * next_use.h - this rank's known order of shards, for the disk cache's
 * Belady eviction (private). The engine creates it from its worksource and
 * hands zpi_next_use_of() to the fetcher (io/fetcher.h) as its next-use
 * callback, so that the fetcher knows shards, not plans.
 *
 * Model: a private copy of the worksource (a worksource is used by one
 * thread at a time; the callback runs on the cache's callers' threads)
 * maps the next ZPI_NEXT_USE_HORIZON positions from the consumer's to
 * shards, and links each position to the next one of the same shard; a
 * shard's next use is followed along its chain as the consumer moves
 * (amortised O(1) per sample), and the horizon is recomputed when half of
 * it has been consumed. Shards beyond it are "unknown". 8 bytes per
 * position: 8 MiB.
 *
 * Thread safety: set_position and next_use_of from any thread (one lock).
 */
#ifndef ZP_NEXT_USE_H
#define ZP_NEXT_USE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "zephon/worksource.h"

/* Samples ahead over which next uses are known. */
#define ZPI_NEXT_USE_HORIZON ((uint64_t)1 << 20)

typedef struct zpi_next_use zpi_next_use;

/* The order of ws's stream (its settings and plans; ws is only read here)
 * up to epoch end_epoch (excluded; UINT32_MAX: without end): positions of
 * epochs the run does not read are never computed (a run of 2 epochs of a
 * few thousand samples computed a horizon of 2^20). *out stays NULL, with
 * ZP_OK, when ws delivers no sample to this rank. */
zp_status zpi_next_use_create(const zp_worksource *ws, uint32_t end_epoch, zpi_next_use **out,
                              zpi_err *err);
void zpi_next_use_destroy(zpi_next_use *nu);
/* The consumer's position in the order (the next sample to admit). */
void zpi_next_use_set_position(zpi_next_use *nu, uint32_t epoch, uint64_t position);
/* The next use of shard (a global position in this rank's order, at or
 * after the consumer's), or UINT64_MAX when unknown. user: the
 * zpi_next_use. The fetcher's next-use callback. */
uint64_t zpi_next_use_of(void *user, size_t shard);
/* A position of that order as (epoch, position); 0 when unknown. The
 * fetcher's locate callback. */
int zpi_next_use_locate(void *user, uint64_t g, uint32_t *epoch, uint64_t *position);

#endif
