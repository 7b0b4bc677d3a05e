/* run_opts.h - `zephon run`: its command line (run_opts.c), the run
 * (run.c) and its printing (run_print.c), shared with the MPI front end of
 * the command (cmd_run_mpi.c); the types are in run_types.h, the mixture's
 * parts (--data, --mixture) in run_mixture.h.
 *
 * Exit statuses of `zephon run` (docs/cli.md): 0 done; 1 the run failed
 * (data, settings the library refused, an output that could not be
 * written); 2 a usage error (unknown option, malformed or out-of-range
 * value); 128+N the run was stopped by signal N (SIGINT 130, SIGTERM 143)
 * after writing its outputs, marked partial. */
#ifndef CLI_RUN_OPTS_H
#define CLI_RUN_OPTS_H

#include <stdio.h>

#include "cli.h"
#include "run_signal.h"
#include "zephon.h"

#include "run_types.h"
#include "run_mixture.h"

/* ---- run_opts.c: options */

void cli_run_opts_init(cli_run_opts *o);
/* Frees what the options own. */
void cli_run_opts_free(cli_run_opts *o);
/* 0: ok, 1: --help, -1: bad options (message printed). On 1 and -1 what
 * the options own is freed already; after 0, cli_run_main() and
 * cli_cmd_run_mpi() free it when they return. */
int cli_run_opts_parse(cli_run_opts *o, int argc, char **argv);
void cli_run_usage(FILE *f);
/* Fill rank/world size from RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS
 * where not given as options. 0, or -1 (message printed) when a variable
 * is not a number in range. */
int cli_run_rank_from_env(cli_run_opts *o);

/* ---- run.c: the run */

/* Check that the run's settings cannot overflow the epoch arithmetic
 * (epochs x samples per rank, the epoch counter). 0, or -1 (message
 * printed). */
int cli_run_check_epochs(const cli_run_opts *o, uint64_t samples_per_rank);
/* Run the pipeline over ds and consume it as the options say. 0; 1 (the
 * run failed); 2 (settings that overflow the epoch arithmetic); or
 * 128+signal (outputs written and complete up to the last batch). */
int cli_run_pipeline(cli_run_opts *o, zp_dataset *ds, cli_run_result *res);
/* Build the dataset and run (cli_run_pipeline); frees o's own memory
 * (cli_run_opts_free) before it returns. */
int cli_run_main(cli_run_opts *o);
/* Add the specs to ds part by part (o->parts[k].shards set; the
 * worksource's parts o->mix and o->ws.parts/n_parts set for 2+ parts). 0,
 * or -1 (message printed). */
int cli_run_add_data(cli_run_opts *o, zp_dataset *ds);
/* The worksource's parts from o->parts[k].shards (after the dataset was
 * built). 0, or -1 (message printed). */
int cli_run_set_parts(cli_run_opts *o);
void cli_run_result_free(cli_run_result *r);
/* The index store folder of `zephon run` ($XDG_CACHE_HOME/zephon/index or
 * $HOME/.cache/zephon/index), created if needed. 0, or -1 with errno. */
int cli_run_index_store_dir(char *buf, size_t cap);
/* A dataset's log under mpirun (zp_log_fn): nothing, unless ZEPHON_DEBUG=1
 * is set: then every message on stderr, the debug ones among them (the trace
 * of downloads and evictions, docs/storage.md). user: unused. */
void cli_run_log_debug(void *user, zp_log_level lvl, const char *msg);

/* ---- run_print.c: printing and output files */

/* One output file of the command: opened, written line by line, closed;
 * the first write error is printed with the path and the system's reason
 * and makes every later call fail. */
typedef struct cli_out {
    FILE *f;
    char path[4096];
    int failed;
} cli_out;
/* fopen(path, "w"); 0, or -1 (message printed). */
int cli_out_open(cli_out *o, const char *path);
/* 0, or -1 (message printed once). */
int cli_out_printf(cli_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Flush and close (NULL f is fine). 0, or -1 (message printed). */
int cli_out_close(cli_out *o);
/* Write a state document to path atomically (a temporary file beside it,
 * fsync, rename, then the folder synced). 0, or -1 (message printed
 * naming the path and the reason). */
int cli_run_write_state(const char *path, const char *data, size_t len);

void cli_run_print(const cli_run_opts *o, const cli_run_result *r);
/* Print the pipeline's snapshots (table, or JSON lines with --json). */
void cli_run_print_observe(const cli_run_opts *o, zp_pipeline *p, FILE *f);
/* Write the final snapshots as one JSON document, with "partial" (and
 * "signal" when a signal stopped the run). 0, or -1 (message printed). */
int cli_run_write_metrics(zp_pipeline *p, const char *path, int stop);

#ifdef ZEPHON_CLI_MPI
/* cmd_run_mpi.c: 1 when launched by mpirun/srun (PMIx/Open MPI variables). */
int cli_under_mpi(void);
/* `zephon run` over MPI: initialises MPI (the command owns it, never the
 * library), runs the pipeline on this rank, writes the report; frees o's
 * own memory before it returns. */
int cli_cmd_run_mpi(cli_run_opts *o);
#endif

#endif
