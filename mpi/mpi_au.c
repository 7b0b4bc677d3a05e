/* mpi_au.c - accelerator utilisation (AU) in MLPerf Storage's terms, from
 * the ranks' records: the training loop's compute time over the wall time
 * of its steps, per rank and for the job, and whether the job passes the
 * 90% threshold (docs/report.md, "Accelerator utilisation"). */
#include <math.h>

#include "mpi_internal.h"

double zpi_mpi_rank_au(const zp_mpi_rank_stats *s)
{
    /* the steps: from the first batch's delivery to the report; compute is
     * the consumer's time outside zp_pipeline_next() and the lock-step
     * agreement (a simulated --step-time, or the training loop's measured
     * time between next() calls) */
    double active = s->wall - s->first_batch;
    if (!s->valid || !s->batches || !(active > 0))
        return NAN;
    double compute = active - s->stall - s->sync;
    if (compute < 0)
        compute = 0;
    return compute / active;
}

void zpi_mpi_au_of(const zp_cluster_report *r, zpi_mpi_au *a)
{
    double sum = 0;
    *a = (zpi_mpi_au){NAN, 0, NAN, -1, 0, 0};
    for (int i = 0; i < r->size; i++) {
        double v = zpi_mpi_rank_au(&r->ranks[i]);
        if (!isfinite(v))
            continue;
        sum += v;
        a->ranks++;
        if (!(v >= a->min)) {
            a->min = v;
            a->min_rank = i;
        }
        if (v < ZPI_MPI_AU_THRESHOLD)
            a->below++;
    }
    if (a->ranks) {
        /* the job's: the mean over ranks, as MLPerf Storage averages its
         * accelerators */
        a->job = sum / a->ranks;
        a->passes = a->job >= ZPI_MPI_AU_THRESHOLD;
    }
}

void zpi_mpi_au_sentence(const zp_cluster_report *r, zpi_sbuf *b)
{
    zpi_mpi_au a;
    zpi_mpi_au_of(r, &a);
    char t1[48], t2[48], t3[48];
    zpi_mpi_human_percent(t3, sizeof t3, ZPI_MPI_AU_THRESHOLD);
    if (!a.ranks) {
        zpi_sb_puts(b, "accelerator utilisation (AU): no training step measured");
        return;
    }
    zpi_mpi_human_percent(t1, sizeof t1, a.job);
    zpi_mpi_human_percent(t2, sizeof t2, a.min);
    zpi_sb_printf(b,
                  "accelerator utilisation (AU, compute time / wall time of the steps): job %s "
                  "(mean over %d rank%s; lowest rank %d at %s; %d rank%s below %s): %s the %s AU "
                  "threshold",
                  t1, a.ranks, a.ranks == 1 ? "" : "s", a.min_rank, t2, a.below,
                  a.below == 1 ? "" : "s", t3, a.passes ? "passes" : "fails", t3);
}

double zp_cluster_report_au(const zp_cluster_report *r, int rank)
{
    if (!r || rank < -1 || rank >= r->size)
        return NAN;
    if (rank >= 0)
        return zpi_mpi_rank_au(&r->ranks[rank]);
    zpi_mpi_au a;
    zpi_mpi_au_of(r, &a);
    return a.job;
}
