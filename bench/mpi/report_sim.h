/* report_sim.h - a cluster report simulated in one process, at sizes no
 * test machine can launch: the root's analysis of N ranks' records over W
 * report windows, for a dataset of S shards named one by one on the
 * command line (a shell-expanded glob: the worst case for the settings
 * line). Used by bench_mpi_report --analyse and tests/mpi/test_mpi_report.c.
 *
 * The ranks' fetch time per batch: 1 ms (+0.1% per rank mod 97, +-5%
 * noise per window) after warm-up; the first window (warm-up) 20 ms on every rank; rank `slow` (if
 * >= 0) 2.5 ms after warm-up with its consumer waiting 30% of its step. */
#ifndef ZP_REPORT_SIM_H
#define ZP_REPORT_SIM_H

#include <stdint.h>

#include "mpi_internal.h"

typedef struct zp_sim_opts {
    int ranks;          /* N */
    int windows;        /* W window reports, then the final one */
    uint64_t shards;    /* S */
    int slow;           /* straggler rank, -1 for none */
    int history;        /* zp_mpi_config.max_windows (default 256 when 0) */
} zp_sim_opts;

/* The final report (NULL when out of memory); *analysis_s (may be NULL):
 * the median analysis time of the last 10 window reports. */
zp_cluster_report *zp_sim_report(const zp_sim_opts *o, double *analysis_s);

#endif
