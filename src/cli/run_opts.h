/* run_opts.h - `zephon run`'s options and its steps, shared with the MPI
 * front end of the command. */
#ifndef ZP_RUN_OPTS_H
#define ZP_RUN_OPTS_H

#include <stdio.h>

#include "zephon.h"

#define ZP_RUN_MAX_SPECS 256

/* Hooks through which the MPI front end (cmd_run_mpi.c) takes part in a
 * run; NULL in a plain run. Every rank calls start exactly once (p NULL when
 * building the pipeline failed on this rank) and then finish exactly once,
 * so that collective hooks never leave a rank waiting. */
typedef struct zp_run_hooks {
    void *user;
    /* before the first batch; nonzero: stop the run (rc 1) */
    int (*start)(void *user, zp_pipeline *p);
    /* replaces zp_pipeline_next() */
    zp_status (*next)(void *user, zp_pipeline *p, const zp_batch **out);
    /* the message of an error returned by next */
    const char *(*errmsg)(void *user, zp_pipeline *p);
    /* after each consumed batch (after --step-time) */
    void (*step)(void *user, zp_pipeline *p, uint64_t batches);
    /* before the pipeline is destroyed; returns the run's rc */
    int (*finish)(void *user, zp_pipeline *p, int rc);
} zp_run_hooks;

typedef struct zp_run_opts {
    const char *specs[ZP_RUN_MAX_SPECS];
    size_t n_specs;
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
    int json, quiet;
    double observe;          /* --observe[=SECONDS]: print interval; <0 off, 0 end only */
    const char *metrics_out; /* --metrics-out FILE */
    const char *report_dir;  /* --report DIR (MPI build) */
    uint64_t report_every;   /* --report-every N batches; 0: automatic */
    int no_index_cache;      /* --no-index-cache: count shards without the index cache */
    const zp_run_hooks *hooks; /* set by the MPI front end */
} zp_run_opts;

typedef struct zp_run_result {
    uint64_t batches, bytes;
    double seconds, first_batch_seconds;
    zp_pipeline_counts counts;
    uint64_t padded_per_epoch, dropped_per_epoch;
} zp_run_result;

void zp_run_opts_init(zp_run_opts *o);
/* 0: ok, 1: --help, -1: bad options (message printed). */
int zp_run_opts_parse(zp_run_opts *o, int argc, char **argv);
/* Fill rank/world size from RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS
 * where not given as options. */
void zp_run_rank_from_env(zp_run_opts *o);
/* Run the pipeline over ds and consume it as the options say. */
int zp_run_pipeline(zp_run_opts *o, zp_dataset *ds, zp_run_result *res);
void zp_run_print(const zp_run_opts *o, const zp_run_result *r);
/* Print the pipeline's snapshots (table, or JSON lines with --json). */
void zp_run_print_observe(const zp_run_opts *o, zp_pipeline *p, FILE *f);
/* Write the final snapshots as one JSON document. 0 or -1. */
int zp_run_write_metrics(zp_pipeline *p, const char *path);
int zp_run_main(zp_run_opts *o);
/* The index cache folder of `zephon run` ($XDG_CACHE_HOME/zephon/index or
 * $HOME/.cache/zephon/index), created if needed. 0, or -1 with errno. */
int zp_run_index_cache_dir(char *buf, size_t cap);

#ifdef ZEPHON_CLI_MPI
/* cmd_run_mpi.c: 1 when launched by mpirun/srun (PMIx/Open MPI variables). */
int zp_cli_under_mpi(void);
/* `zephon run` over MPI: initialises MPI (the command owns it, never the
 * library), runs the pipeline on this rank, writes the report. */
int zp_cmd_run_mpi(zp_run_opts *o);
#endif

#endif
