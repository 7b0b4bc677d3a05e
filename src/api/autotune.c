/* autotune.c - the caps of automatic settings (autotune.h). */
#include "api/autotune.h"

void zpi_tune_caps_get(const zp_pipeline_config *cfg, const zpi_op *ops, int n_ops, int threads,
                       size_t batch_bytes, zpi_tune_caps *out)
{
    /* an operator gains nothing from more tasks than the team has threads */
    out->op_parallelism = threads > 0 ? (size_t)threads : 1;
    out->fetch_parallelism = out->op_parallelism;
    size_t max = ZP_PREFETCH_AUTO_BYTES / (batch_bytes ? batch_bytes : 1);
    if (max > ZP_PREFETCH_AUTO_MAX)
        max = ZP_PREFETCH_AUTO_MAX;
    out->prefetch_batches = max < 2 ? 2 : max;
    size_t par = 0;
    for (int i = 0; i < n_ops; i++)
        par += ops[i].parallelism == ZP_AUTO ? out->op_parallelism : ops[i].parallelism;
    out->in_flight_chunks = cfg->in_flight_chunks ? cfg->in_flight_chunks : 2 * par + 2;
}

void zpi_tune_caps_clamp(zpi_tune_caps *c, size_t max_prefetch_batches, size_t max_in_flight,
                         size_t max_fetch)
{
    if (c->fetch_parallelism > max_fetch)
        c->fetch_parallelism = max_fetch < 1 ? 1 : max_fetch;
    if (c->prefetch_batches > max_prefetch_batches)
        c->prefetch_batches = max_prefetch_batches < 2 ? 2 : max_prefetch_batches;
    if (c->in_flight_chunks > max_in_flight && max_in_flight > 0)
        c->in_flight_chunks = max_in_flight;
}
