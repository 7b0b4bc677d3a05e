/* mpi_next.c - lock-step delivery (zp_mpi_next): this rank's next batch,
 * then the step's agreement (mpi_step.c); with cross-rank balance on, the
 * step's batches from mpi_balance.c. */
#include "mpi_internal.h"

zp_status zp_mpi_next(zp_mpi *m, zp_pipeline *p, const zp_batch **out)
{
    ZPI_MPI_USABLE(m);
    if (out)
        *out = NULL;
    if (m->step_final != ZP_OK)
        return zpi_mpi_fail(m, m->step_final, "%s", m->step_msg);
    m->bal.started = 1;
    if (m->bal.window)
        return zpi_mpi_balance_next(m, p, out);
    const zp_batch *b = NULL;
    zp_status st;
    if (!p || !out)
        st = zpi_mpi_fail(m, ZP_ERR_INVALID, "zp_mpi_next: %s is NULL", !p ? "the pipeline" : "out");
    else if (zpi_mpi_watch(m, p), (st = zp_pipeline_next(p, &b)) != ZP_OK && st != ZP_END)
        zpi_mpi_fail(m, st, "%s", zp_pipeline_errmsg(p));
    zp_status got = st;
    st = zpi_mpi_step_agree(m, st, st == ZP_OK ? 1 : 0, 0);
    if (st == ZP_OK)
        *out = b;
    else if (got == ZP_OK)
        zpi_mpi_keep_undelivered(m, b); /* held, not delivered */
    return st;
}
