/* run_opts.h - `zephon run`: its options (run_opts.c), the run (run.c) and
 * its printing (run_print.c), shared with the MPI front end of the command
 * (cmd_run_mpi.c).
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

/* Why a run stopped before its end (cli_run_result.stop). */
#define CLI_RUN_STOP_OUTPUT 1000 /* an output could not be written */

/* Hooks through which the MPI front end (cmd_run_mpi.c) takes part in a
 * run; NULL in a plain run. Every rank calls start exactly once (p NULL when
 * building the pipeline failed on this rank) and then finish exactly once,
 * so that collective hooks never leave a rank waiting. save is called at
 * the same step on every rank (the steps are agreed). */
typedef struct cli_run_hooks {
    void *user;
    /* before the first batch; nonzero: stop the run (rc 1). why: this
     * rank's reason when p is NULL (said to the other ranks), else NULL */
    int (*start)(void *user, zp_pipeline *p, const char *why);
    /* before each step, and once more when next returned ZP_END: agree on
     * whether to stop. local is this rank's reason (0: go on; a signal
     * number; CLI_RUN_STOP_OUTPUT); returns the reason every rank takes
     * (the same on every rank). */
    int (*stop)(void *user, int local);
    /* replaces zp_pipeline_next() */
    zp_status (*next)(void *user, zp_pipeline *p, const zp_batch **out);
    /* the message of an error returned by next */
    const char *(*errmsg)(void *user, zp_pipeline *p);
    /* after each consumed batch (after --step-time) */
    void (*step)(void *user, zp_pipeline *p, uint64_t batches);
    /* before the pipeline is destroyed; returns the run's rc */
    int (*finish)(void *user, zp_pipeline *p, int rc);
    /* save the job's state to path (--save-state); at_end: after the last
     * step (the stream may have ended on one rank first). 0; -1 (message
     * printed, the same outcome on every rank); 1: not saved, said, not an
     * error (the ranks ended at different batches) */
    int (*save)(void *user, zp_pipeline *p, const char *path, int at_end);
} cli_run_hooks;

/* One part of a mixture (--data SPEC[@WEIGHT], or a part of --mixture):
 * specs[first .. first + n) of the options. */
typedef struct cli_run_part {
    char *name;    /* owned: the mixture file's name, else the spec as given */
    double weight; /* > 0, finite; default 1 */
    size_t first, n;
    size_t shards; /* shards its specs added (filled when the dataset is built) */
} cli_run_part;

/* --skip-batches N-M */
typedef struct cli_run_skip {
    uint64_t first, last;
} cli_run_skip;

typedef struct cli_run_opts {
    char **specs; /* owned (copies): positional specs, or the parts' specs in order */
    size_t n_specs, cap_specs;
    /* mixture: --data or --mixture given (n_parts >= 1); the worksource's
     * parts are set when there are two parts or more */
    cli_run_part *parts;
    size_t n_parts, cap_parts;
    int positional;          /* specs given as positional arguments */
    const char *mixture_file; /* --mixture FILE */
    zp_mix_part *mix;        /* the worksource's parts (built with the dataset) */
    int epoch_samples_set;   /* --epoch-samples given (wins over the mixture file's) */
    zp_worksource_config ws;
    zp_pipeline_config pc;
    uint64_t start_epoch;
    int rank_set; /* bit 0: --rank given, bit 1: --world-size given */
    int map_strip;
    uint64_t map_parallelism;
    char tok_id[512];
    uint64_t tok_parallelism;
    uint64_t prefetch_buffer, prefetch_parallelism; /* --prefetch N[:P]; 0: off */
    const char *field;
    zp_pack_mode pack; /* 0: default */
    double step_time;
    uint64_t max_batches;
    const char *emit_ids, *emit_digest;
    const char *emit_samples; /* --emit-samples DIR: DIR/rank-<R>.samples */
    int h5_driver;            /* --h5-driver: 0 auto, 1 mpio, 2 serial (zp_mpi_h5_driver) */
    /* checkpoints: --save-state FILE, --save-every N (0: at the end only),
     * --resume FILE, --skip-batches N-M (repeatable, ascending, disjoint) */
    const char *save_state, *resume;
    uint64_t save_every;
    cli_run_skip *skips;
    size_t n_skips, cap_skips;
    int json, quiet;
    double observe;          /* --observe[=SECONDS]: print interval; <0 off, 0 end only */
    const char *metrics_out; /* --metrics-out FILE */
    const char *report_dir;  /* --report DIR (MPI build) */
    uint64_t report_every;   /* --report-every N batches; 0: automatic */
    zp_storage_config storage; /* remote shards, the shard cache on disk */
    int no_index_store;      /* --no-index-store: count shards without the index store */
    const cli_run_hooks *hooks; /* set by the MPI front end */
} cli_run_opts;

/* Realized proportions of one part (the summary). */
typedef struct cli_run_part_count {
    const char *name; /* borrowed from the options */
    double weight;    /* as used: a fraction of 1 */
    uint64_t samples, tokens;
} cli_run_part_count;

typedef struct cli_run_result {
    uint64_t batches, bytes;
    double seconds, first_batch_seconds;
    zp_pipeline_counts counts;
    uint64_t padded_per_epoch, dropped_per_epoch;
    int stop; /* 0: ran to its end; a signal number; CLI_RUN_STOP_OUTPUT */
    cli_run_part_count *parts; /* malloc'd, n_parts entries when a mixture has 2+ parts */
    size_t n_parts;
} cli_run_result;

/* ---- run_opts.c: options */

void cli_run_opts_init(cli_run_opts *o);
/* Frees what the options own. */
void cli_run_opts_free(cli_run_opts *o);
/* 0: ok, 1: --help, -1: bad options (message printed). On 1 and -1 what
 * the options own is freed already; after 0, cli_run_main() and
 * cli_cmd_run_mpi() free it when they return. */
int cli_run_opts_parse(cli_run_opts *o, int argc, char **argv);
/* Parse "SPEC[@WEIGHT]" (--data): the weight is the text after the last
 * '@' when it reads as a number (strtod's syntax, whole; it must then be
 * positive and finite), else the whole is the spec with weight 1. *spec
 * malloc'd. 0, or -1 (message printed, naming the option's value). */
int cli_run_parse_data(const char *v, char **spec, double *weight);
/* Read a mixture file into o's parts (relative specs resolved against the
 * file's folder). 0, or -1 (message printed naming the file and field). */
int cli_run_read_mixture(cli_run_opts *o, const char *path);
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
