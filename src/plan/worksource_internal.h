/* worksource_internal.h - what the pipeline's state and the fetcher need
 * from a worksource beyond its public API (private). */
#ifndef ZP_WORKSOURCE_INTERNAL_H
#define ZP_WORKSOURCE_INTERNAL_H

#include "plan/plan.h"
#include "plan/schedule.h"
#include "zephon/worksource.h"

/* Replace the per-epoch plans (copied; ascending by epoch; an epoch
 * without a plan reads its default range). The sequential state moves
 * past epochs left without samples. ZP_ERR_INVALID for an empty or
 * oversized span or epochs out of order, ZP_ERR_NOMEM. */
zp_status zpi_worksource_set_plans(zp_worksource *ws, const zpi_epoch_plan *plans, size_t n);
size_t zpi_worksource_num_plans(const zp_worksource *ws);
/* Plan i: out->spans borrowed, valid until the next set_plans or destroy. */
void zpi_worksource_plan(const zp_worksource *ws, size_t i, zpi_epoch_plan *out);
/* The schedule the worksource draws by (borrowed, valid until the next
 * set_schedule or destroy); NULL without a mixture. */
const zpi_sched *zpi_worksource_schedule(const zp_worksource *ws);
/* The schedule of the configuration (the parts' weights and phases). */
const zpi_sched *zpi_worksource_config_schedule(const zp_worksource *ws);
/* Draw by schedule s (copied) from now on, in place of the configured one:
 * before the first sample is read (a resume). ZP_ERR_INVALID when it does
 * not fit the mixture, ZP_ERR_NOMEM. */
zp_status zpi_worksource_set_schedule(zp_worksource *ws, const zpi_sched *s);
/* The mixture's draw number of position g of epoch's stream (UINT64_MAX
 * past 2^64 - 1). */
uint64_t zpi_worksource_draw_of(const zp_worksource *ws, uint32_t epoch, uint64_t g);
/* Past the end of an epoch: the start of the next epoch that holds samples
 * of this rank (an elastic resume's plan may leave one empty; every
 * epoch without a plan has samples_per_rank >= 1, so this ends). After
 * the last epoch (UINT32_MAX) it stays at (UINT32_MAX, its length). */
void zpi_worksource_settle(const zp_worksource *ws, uint32_t *epoch, uint64_t *position);
/* The samples of this rank's stream before (epoch, position) (UINT64_MAX
 * when that passes 2^64 - 1), and back: 1, or 0 when g is past the end. */
uint64_t zpi_worksource_linear(const zp_worksource *ws, uint32_t epoch, uint64_t position);
int zpi_worksource_unlinear(const zp_worksource *ws, uint64_t g, uint32_t *epoch,
                            uint64_t *position);

#endif
