/* cmd_run.c - `zephon run`: run a pipeline from flags (the same code path
 * as the library) and print its throughput. The options are parsed in
 * run_opts.c, the run is run.c, its printing run_print.c; under mpirun or
 * srun the MPI front end (cmd_run_mpi.c) takes over. */
#include <stdio.h>

#include "cli.h"
#include "run_opts.h"

int cli_cmd_run(int argc, char **argv)
{
    cli_run_opts o;
    cli_run_opts_init(&o);
    int rc = cli_run_opts_parse(&o, argc, argv);
    if (rc == 1) {
        cli_run_usage(stdout);
        return cli_flush_stdout("zephon run") == 0 ? 0 : 1;
    }
    if (rc != 0) {
        fprintf(stderr, "(zephon run --help lists the options)\n");
        return 2;
    }
#ifdef ZEPHON_CLI_MPI
    if (cli_under_mpi() || o.report_dir || o.balance_ranks)
        return cli_cmd_run_mpi(&o);
    if (o.h5_driver == 1) {
        fprintf(stderr, "zephon run: --h5-driver mpio: MPI-IO needs the ranks of mpirun or srun; "
                        "a single process reads HDF5 with the serial driver\n");
        cli_run_opts_free(&o);
        return 2;
    }
#else
    if (o.report_dir || o.balance_ranks) {
        fprintf(stderr, "zephon run: %s needs zephon built with MPI (ZEPHON_WITH_MPI)\n",
                o.report_dir ? "--report" : "--balance-ranks");
        return 2;
    }
#endif
    return cli_run_main(&o);
}
