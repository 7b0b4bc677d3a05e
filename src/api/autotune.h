/* autotune.h - the upper bounds of what the pipeline tunes while it runs
 * (settings set to ZP_AUTO; docs/pipeline.md, "Autotune"). Every cap a
 * tuner may grow to is computed here, in one function, from the
 * pipeline's settings: a memory budget clamps them in this one place. The
 * tuners themselves are the engine's (operator parallelism, engine.c) and
 * the output queue's (prefetch depth, outq.c). */
#ifndef ZPI_API_AUTOTUNE_H
#define ZPI_API_AUTOTUNE_H

#include <stddef.h>

#include "ops/operators.h"
#include "zephon/pipeline.h"

/* Where an automatic prefetch_batches starts (at most its cap): 8 batches
 * cost little (a few MiB at the usual shapes), and a run no longer stalls
 * while the queue doubles up from 2 (docs/pipeline.md, "Autotune"). */
#define ZPI_PREFETCH_AUTO_START 8

typedef struct zpi_tune_caps {
    size_t op_parallelism;   /* tasks an automatic operator may reach: the team's threads */
    size_t fetch_parallelism; /* the same for fetch: op_parallelism, or less under a memory
                                 budget (each fetch task may load a shard) */
    size_t prefetch_batches; /* the deepest automatic output queue: ZP_PREFETCH_AUTO_MAX
                                batches and ZP_PREFETCH_AUTO_BYTES of batch buffers */
    size_t in_flight_chunks; /* chunks in flight: the setting, or 2 x (sum of operator
                                parallelism, automatic ones at their cap) + 2; in
                                the latter case the engine allocates that many and
                                uses 2 x (sum of the parallelism now) + 2 of them */
} zpi_tune_caps;

/* The caps for settings cfg, operators ops[0 .. n_ops) (their parallelism
 * as given: ZP_AUTO or a count), a team of `threads` (> 0) and batch
 * buffers of batch_bytes each. */
void zpi_tune_caps_get(const zp_pipeline_config *cfg, const zpi_op *ops, int n_ops, int threads,
                       size_t batch_bytes, zpi_tune_caps *out);
/* The caps lowered to what a memory budget allows (zpi_pipeline_budget_caps
 * and the most fetch tasks its plan holds; SIZE_MAX: no limit);
 * prefetch_batches never below its start, 2, nor fetch below 1 (the
 * budget's plan was checked with them). */
void zpi_tune_caps_clamp(zpi_tune_caps *c, size_t max_prefetch_batches, size_t max_in_flight,
                         size_t max_fetch);

#endif
