/* autotune.c - the caps of automatic settings (autotune.h). */
#include "api/autotune.h"

void zpi_tune_caps_get(const zp_pipeline_config *cfg, const zpi_op *ops, int n_ops, int threads,
                       size_t batch_bytes, zpi_tune_caps *out)
{
    /* an operator gains nothing from more tasks than the team has threads */
    out->op_parallelism = threads > 0 ? (size_t)threads : 1;
    size_t max = ZP_PREFETCH_AUTO_BYTES / (batch_bytes ? batch_bytes : 1);
    if (max > ZP_PREFETCH_AUTO_MAX)
        max = ZP_PREFETCH_AUTO_MAX;
    out->prefetch_batches = max < 2 ? 2 : max;
    size_t par = 0;
    for (int i = 0; i < n_ops; i++)
        par += ops[i].parallelism == ZP_AUTO ? out->op_parallelism : ops[i].parallelism;
    out->in_flight_chunks = cfg->in_flight_chunks ? cfg->in_flight_chunks : 2 * par + 2;
}
