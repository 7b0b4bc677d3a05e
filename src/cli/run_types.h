/* run_types.h - what `zephon run` is given and what it gives back: the
 * options (with the mixture's parts and the skips), the MPI front end's
 * hooks, the result. run_opts.c fills the options from the command line,
 * run_mixture.c the parts; run.c runs them. */
#ifndef CLI_RUN_TYPES_H
#define CLI_RUN_TYPES_H

#include <stddef.h>
#include <stdint.h>

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

struct cli_run_result;

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
    zp_mix_phase *phases;    /* the mixture file's "schedule" (owned; weights in phase_w) */
    size_t n_phases;
    double *phase_w;         /* n_phases * n_parts weights (owned) */
    int epoch_samples_set;   /* --epoch-samples given (wins over the mixture file's) */
    zp_worksource_config ws;
    zp_pipeline_config pc;
    uint64_t start_epoch;
    int rank_set; /* bit 0: --rank given, bit 1: --world-size given */
    int map_strip;
    uint64_t map_parallelism;
    char tok_id[512];
    uint64_t tok_parallelism;
    int64_t tok_eot, tok_bos; /* --eot, --bos (-1: none); ZP_TOKEN_DEFAULT when not given */
    uint64_t prefetch_buffer, prefetch_parallelism; /* --prefetch N[:P]; 0: off */
    int prefetch_set;                               /* --prefetch given (else the default) */
    const char *field;
    zp_pack_mode pack; /* 0: default */
    uint64_t pack_window; /* --pack bestfit:N; 0: ZP_PACK_WINDOW_DEFAULT */
    int doc_masking;   /* --doc-masking: 0 off, 1 restart, 2 continue positions */
    uint64_t balance;  /* --balance K: attention-cost balance window (0: off) */
    double step_time;
    uint64_t max_batches;
    const char *emit_ids, *emit_digest, *emit_records;
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
    uint64_t balance_ranks;  /* --balance-ranks K (MPI): 0 off */
    uint64_t report_every;   /* --report-every N batches; 0: automatic */
    zp_storage_config storage; /* remote shards, the shard cache on disk */
    size_t segment_bytes;      /* zp_dataset_config.segment_bytes (--segment-mb); 0: default */
    int no_index_store;      /* --no-index-store: count shards without the index store */
    int no_coverage;         /* --no-coverage: no coverage certificate */
    const cli_run_hooks *hooks; /* set by the MPI front end */
    /* `zephon tune` (cmd_tune.c): a bound on the run's time (seconds; 0:
     * none), and its report, called after the last batch with the
     * pipeline still alive (observability on) instead of the run's own
     * summary */
    double max_seconds;
    void (*report)(void *user, zp_pipeline *p, const struct cli_run_result *r);
    void *report_user;
} cli_run_opts;

/* Realized proportions of one part (the summary). */
typedef struct cli_run_part_count {
    const char *name; /* borrowed from the options */
    double weight;    /* as used: a fraction of 1 */
    uint64_t samples, tokens;
} cli_run_part_count;

/* The coverage of one epoch as this process checks it (a plain run; under
 * MPI rank 0 prints the job's certificate instead, cmd_run_mpi.c). */
typedef struct cli_run_cov {
    uint32_t epoch;
    int judged;          /* the rank's stream is past the epoch */
    int ok;              /* delivered == expected */
    int whole;           /* expected is the epoch's stream (a world of one),
                            else this rank's plan for it */
    zp_coverage delivered, expected;
    uint64_t padded;
} cli_run_cov;

typedef struct cli_run_result {
    uint64_t batches, bytes;
    double seconds, first_batch_seconds;
    zp_pipeline_counts counts;
    uint64_t padded_per_epoch, dropped_per_epoch;
    int stop; /* 0: ran to its end; a signal number; CLI_RUN_STOP_OUTPUT */
    /* --doc-masking: rows and their documents, sequences of cu_seqlens,
     * the longest sequence */
    uint64_t mask_rows, mask_docs, mask_seqs;
    int32_t mask_max_seqlen;
    cli_run_part_count *parts; /* malloc'd, n_parts entries when a mixture has 2+ parts */
    size_t n_parts;
    /* with a weight schedule (2+ phases): per phase its first draw, and
     * per phase and part the weight as used and the samples delivered
     * (malloc'd, n_phases * n_parts) */
    size_t n_phases;
    uint64_t *phase_start;
    double *phase_weight;
    uint64_t *phase_samples;
    cli_run_cov *cov;   /* malloc'd: the epochs delivered (the last 64) */
    size_t n_cov;
    int cov_failed;     /* the digests could not be computed (said on stderr) */
    zp_memory_plan mem; /* --memory-budget: the plan in use (budget 0: none) */
    uint64_t peak_rss;  /* the process's peak resident set (VmHWM), bytes; 0: unknown */
} cli_run_result;

#endif
