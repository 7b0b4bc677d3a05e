/*
 * pipeline_internal.h - what observe.c reads from a pipeline handle
 * (private). struct zp_pipeline itself is pipeline.c's; the engine, the
 * operators, the packer and the output queue never see it.
 */
#ifndef ZP_PIPELINE_INTERNAL_H
#define ZP_PIPELINE_INTERNAL_H

#include "engine.h"
#include "zephon/pipeline.h"

/* 1 once zp_pipeline_enable_observability() succeeded. */
int zpi_pipeline_observing(const zp_pipeline *p);
/* The running engine, or NULL before the first next() (or after a failed
 * start). */
zpi_engine *zpi_pipeline_engine(const zp_pipeline *p);
/* Finished batches waiting for the consumer (0 before the start). */
size_t zpi_pipeline_ready_batches(zp_pipeline *p);
/* The handle's error, for the public calls observe.c implements. */
zpi_err *zpi_pipeline_err(zp_pipeline *p);
/* The prefetch_batches setting. */
size_t zpi_pipeline_prefetch_batches(const zp_pipeline *p);

#endif
