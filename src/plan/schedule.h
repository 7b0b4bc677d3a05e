/*
 * schedule.h - mixture weight schedules (private; docs/mixtures.md,
 * "Weight schedules").
 *
 * A schedule is a list of constant phases over the mixture's stream of
 * draws counted across epochs (draw G = epoch * epoch_samples + position in
 * the epoch's stream): phase k covers draws [start_k, start_{k+1}), start_0
 * = 0, and draws them by its own integer weights (the quota schedule of
 * mixture.h, restarted at start_k, so that every prefix of every phase is
 * within one sample of its weights). A part's draw index continues across
 * phases: draw G of phase k is the part's draw base_k[i] + (its draws in
 * the phase before G), base_k[i] the part's draws before start_k. No draw
 * index is repeated or skipped, whatever the phases.
 *
 * The weights of a phase are the integer weights (quanta) of mixture.h, so
 * a schedule written to a state and read back makes the same draws.
 *
 * `since` is the draw from which the phases come from the configured
 * schedule: 0, or the cut point of the last resume that changed the
 * schedule (the phases before it are the schedule the run followed then).
 *
 * Thread safety: none needed; every call works on its arguments.
 */
#ifndef ZP_SCHEDULE_H
#define ZP_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "zephon/worksource.h"

/* At most this many constant phases (linear ramps included). */
#define ZPI_SCHED_MAX_PHASES 1024u
/* A linear ramp's sub-phase weights are its interpolated shares rounded
 * to integers with a total of 10^4, 10^5 or this, the first that keeps
 * every share within 1% of the interpolated one. */
#define ZPI_SCHED_RAMP_TOTAL 1000000.0

typedef struct zpi_sched {
    size_t n_parts;
    size_t n_phases;  /* >= 1 */
    uint64_t *start;  /* [n_phases]: ascending, start[0] = 0 */
    uint32_t *w;      /* [n_phases * n_parts]: integer weights (quanta) */
    uint64_t since;
} zpi_sched;

/* Frees what s owns and zeroes it; accepts NULL. */
void zpi_sched_clear(zpi_sched *s);
/* Deep copy (dst's old contents are not freed). */
zp_status zpi_sched_copy(zpi_sched *dst, const zpi_sched *src);

/* The schedule of a configuration: phase 0 from the parts' weights, then
 * the phases (a linear one expanded into constant sub-phases of
 * linear_every draws, each with the shares interpolated at its middle
 * draw, rounded to integers with a total of ZPI_SCHED_RAMP_TOTAL, each at
 * least 1). ZP_ERR_INVALID naming the phase and field ("phases[1].start =
 * 10: must be above the start of phases[0] = 20"), ZP_ERR_LIMIT for more
 * than ZPI_SCHED_MAX_PHASES phases, ZP_ERR_NOMEM. names: the parts' names
 * for messages (may be NULL). */
zp_status zpi_sched_from_config(const double *part_weights, const char *const *names, size_t np,
                                const zp_mix_phase *phases, size_t n_phases, zpi_sched *out,
                                zpi_err *err);

/* 1 when a and b make the same draws (the same phases and weights;
 * `since` is not compared). */
int zpi_sched_same_draws(const zpi_sched *a, const zpi_sched *b);

/* 1 when the configured schedule cfg is what s follows from s->since on:
 * s's phases from since equal cfg's phase in force at since restarted
 * there, and cfg's later phases. */
int zpi_sched_follows(const zpi_sched *s, const zpi_sched *cfg);

/* The schedule that keeps old's phases for draws before `cut` and follows
 * cfg from `cut` on (cfg's phase in force at cut restarted at cut), with
 * since = cut. Parts' counts continue through the cut (see above). */
zp_status zpi_sched_cut(const zpi_sched *old, const zpi_sched *cfg, uint64_t cut,
                        zpi_sched *out, zpi_err *err);

/* counts[0 .. n_parts): each part's draws among draws [0, g) under s
 * (builds each phase's quota schedule up to g's: for reports, not for the
 * data path). ZP_ERR_NOMEM. */
zp_status zpi_sched_counts(const zpi_sched *s, uint64_t g, uint64_t *counts, zpi_err *err);

/* The phase in force at draw g. */
size_t zpi_sched_phase_at(const zpi_sched *s, uint64_t g);

#endif
