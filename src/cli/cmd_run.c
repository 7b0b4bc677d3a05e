/* cmd_run.c - `zephon run`: run a pipeline from flags (the same code path
 * as the library) and print its throughput. The options are parsed in
 * run_opts.c, the run is run.c, its printing run_print.c; under mpirun or
 * srun the MPI front end (cmd_run_mpi.c) takes over. */
#include <stdio.h>

#include "cli.h"
#include "run_opts.h"

int zp_cmd_run(int argc, char **argv)
{
    zp_run_opts o;
    zp_run_opts_init(&o);
    int rc = zp_run_opts_parse(&o, argc, argv);
    if (rc == 1) {
        zp_run_usage(stdout);
        return zp_cli_flush_stdout("zephon run") == 0 ? 0 : 1;
    }
    if (rc != 0) {
        fprintf(stderr, "(zephon run --help lists the options)\n");
        return 2;
    }
#ifdef ZEPHON_CLI_MPI
    if (zp_cli_under_mpi() || o.report_dir)
        return zp_cmd_run_mpi(&o);
    if (o.h5_driver == 1) {
        fprintf(stderr, "zephon run: --h5-driver mpio: MPI-IO needs the ranks of mpirun or srun; "
                        "a single process reads HDF5 with the serial driver\n");
        zp_run_opts_free(&o);
        return 2;
    }
#else
    if (o.report_dir) {
        fprintf(stderr, "zephon run: --report needs zephon built with MPI (ZEPHON_WITH_MPI)\n");
        return 2;
    }
#endif
    return zp_run_main(&o);
}
