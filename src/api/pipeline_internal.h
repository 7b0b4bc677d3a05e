/*
 * pipeline_internal.h - what observe.c reads from a pipeline handle
 * (private). struct zp_pipeline itself is pipeline.c's; the engine, the
 * operators, the packer and the output queue never see it.
 */
#ifndef ZP_PIPELINE_INTERNAL_H
#define ZP_PIPELINE_INTERNAL_H

#include "engine/engine.h"
#include "zephon/pipeline.h"

#include "output/covtab.h"
#include "plan/state.h"
#include "api/watchdog.h"

/* The consumer's checkpoint bookkeeping: pipeline.c updates it as batches
 * are delivered; pipeline_state.c saves it and sets it from a state before
 * the start. */
typedef struct zpi_ckpt {
    zpi_resume_pt at;          /* the stream after the last delivered batch */
    uint64_t next_batch;       /* the next batch's index */
    size_t nparts;
    uint64_t *part_samples;    /* [nparts] delivered per part (owned) */
    uint64_t *part_tokens;
    size_t nphases;            /* the weight schedule's phases */
    uint64_t *phase_samples;   /* [nphases * nparts] delivered per phase and part (owned) */
    zp_pipeline_counts base;   /* counts restored from a state */
    zp_pipeline_counts skipped; /* counts of the skipped batches */
    zpi_skip *skips;           /* ranges to skip (owned), ascending; samples, */
    size_t n_skips;            /* tokens and the stream covered filled as they pass */
    size_t n_prior_skips;      /* the first n_prior_skips came with a restored state */
    int restored;              /* a state was restored */
    uint64_t *done;            /* at.done's storage (owned) */
    size_t done_cap;
    int done_lost;             /* at.done could not be copied (out of memory) */
    uint64_t bal_done;         /* batches of the attention-balance window in
                                  progress delivered (at is its start) */
    zpi_covtab cov;            /* coverage digests (certificate.c) */
} zpi_ckpt;

zpi_ckpt *zpi_pipeline_ckpt(zp_pipeline *p);
zp_worksource *zpi_pipeline_ws(const zp_pipeline *p);
/* 1 after the first next(). */
int zpi_pipeline_started(const zp_pipeline *p);
/* The first failure that ended the stream (ZP_OK when none). */
zp_status zpi_pipeline_failed(const zp_pipeline *p);
/* The settings that change the data, as a compact JSON object (state.h),
 * malloc'd. */
zp_status zpi_pipeline_settings_json(const zp_pipeline *p, char **out);
/* The same with `dataset_fp` as the dataset's fingerprint (a resume of a
 * state that holds the fingerprint of earlier versions). */
zp_status zpi_pipeline_settings_json_fp(const zp_pipeline *p, uint64_t dataset_fp, char **out);
/* The pipeline's total counts (restored base + delivered - skipped). */
void zpi_pipeline_total_counts(const zp_pipeline *p, zp_pipeline_counts *out);

/* 1 once zp_pipeline_enable_observability() succeeded. */
int zpi_pipeline_observing(const zp_pipeline *p);
/* The running engine, or NULL before the first next() (or after a failed
 * start). */
zpi_engine *zpi_pipeline_engine(const zp_pipeline *p);
/* Finished batches waiting for the consumer (0 before the start). */
size_t zpi_pipeline_ready_batches(zp_pipeline *p);
/* The handle's error, for the public calls observe.c implements. */
zpi_err *zpi_pipeline_err(zp_pipeline *p);
/* The prefetch depth now (prefetch_batches, or where auto took it). */
size_t zpi_pipeline_prefetch_batches(const zp_pipeline *p);
/* The tunable settings now (zp_metrics_snapshot.tuned): prefetch_batches,
 * then each operator's parallelism. Returns the entries filled (<= max). */
int zpi_pipeline_tuning(zp_pipeline *p, zp_tuned_setting *out, int max);
/* The memory plan in use (zeros when the pipeline runs without a budget or
 * has not started). */
const zp_memory_plan *zpi_pipeline_mem(const zp_pipeline *p);
/* For an autotuner of the output queue or the in-flight chunks: the most
 * prefetch_batches and in_flight_chunks the memory budget allows with the
 * pipeline's other settings as they are (output/budget.h,
 * zpi_budget_max_*); SIZE_MAX without a budget, 0 when even the least does
 * not fit. Either pointer may be NULL. Reads the shards' sizes the first
 * time. Consumer thread. */
zp_status zpi_pipeline_budget_caps(zp_pipeline *p, size_t *max_prefetch_batches,
                                   size_t *max_in_flight);

/* The stall watchdog's state (api/watchdog.h), held by the pipeline. */
zpi_watchdog *zpi_pipeline_wd(zp_pipeline *p);

#endif
