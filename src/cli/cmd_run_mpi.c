/* cmd_run_mpi.c - `zephon run` under mpirun or srun: the command (never the
 * library) initialises MPI; rank 0 builds the dataset and broadcasts it; the
 * ranks agree on the dataset and the settings; each rank runs its pipeline
 * through the same code path as a plain run (cli_run_pipeline), with the
 * ranks in lock-step (zp_mpi_next: all stop at the same step, which token
 * packing needs); periodic report windows are gathered without blocking the
 * loop, and a final report is written with --report DIR. With --save-state
 * the job's state (every rank's, merged) is written by rank 0
 * (zp_mpi_state_save) at agreed steps; --resume restores it on every rank,
 * on this world size or another (elastic resume). */
#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "run_opts.h"
#include "zephon/mpi.h"

/* 1 when a launcher started this process as a rank of an MPI job, read
 * from the environment it sets: Open MPI's mpirun (OMPI_COMM_WORLD_SIZE),
 * PMIx (srun --mpi=pmix, prterun: PMIX_RANK), PMI-1/2 and MPICH's Hydra
 * (PMI_RANK, PMI_SIZE, MPI_LOCALNRANKS). A plain srun without --mpi sets
 * none of them, and neither does Slurm's batch step: such a process is a
 * world of one (docs/mpi.md). */
int cli_under_mpi(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK",
                                       "PMI_SIZE", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]))
            return 1;
    return 0;
}

typedef struct mpi_run {
    zp_mpi *m;
    cli_run_opts *o;
    uint64_t every;      /* report window every N steps */
    zp_cluster_report *final;
    /* a report window failed on this rank: voted (ZP_MPI_VOTE_USER) at the
     * next step, so that every rank stops starting windows at the same step */
    int report_failed;
    /* ZEPHON_TEST_REPORT_FAIL_RANK=R (tests): rank R takes its first
     * completed report window as failed, a rank-local failure */
    int fail_rank;
    int stopped; /* the agreed stop reason (hook_stop) */
    int voted;   /* this rank's own stop reason, once it had one */
    uint64_t saved_at; /* batches delivered at the last state written (UINT64_MAX: none) */
} mpi_run;

static void say(const mpi_run *r, const char *fmt, const char *detail)
{
    fprintf(stderr, "zephon run: rank %d: ", zp_mpi_rank(r->m));
    fprintf(stderr, fmt, detail);
    fputc('\n', stderr);
}

static int hook_start(void *user, zp_pipeline *p, const char *why)
{
    mpi_run *r = user;
    zp_status local = ZP_OK;
    const char *msg = why ? why : "the pipeline could not be built on this rank";
    if (!p)
        local = ZP_ERR_STATE;
    else if ((local = zp_pipeline_enable_observability(p)) != ZP_OK)
        msg = "cannot turn observability on";
    zp_status st = zp_mpi_agree_status(r->m, local, msg);
    if (st != ZP_OK && p)
        say(r, "%s", zp_mpi_errmsg(r->m));
    return st != ZP_OK;
}

/* Every rank takes the same decision to stop at a step, with no collective
 * of its own: this rank's stop reason (0, a signal number, or
 * CLI_RUN_STOP_OUTPUT) and whether a report window failed here ride on
 * zp_mpi_next's one MPI_Allreduce as the user vote (ZP_MPI_VOTE_USER:
 * reason << 1 | report flag; the maximum gives the largest reason), so
 * that a rank that was signalled (or whose output failed) never leaves the
 * others waiting in a collective. The batch of the step that carried the
 * vote is delivered on every rank, and every rank stops before the next
 * step, before its pipeline makes another batch: no batch is made and left
 * undelivered, so the state saved after the stop is the state after the
 * last delivered batch on every rank (a stop vote of zp_mpi_next itself,
 * ZP_MPI_VOTE_STOP, would leave the batch of that step made and not
 * delivered). */
static int hook_stop(void *user, int local)
{
    mpi_run *r = user;
    if (r->stopped)
        return r->stopped;
    if (local && !r->voted)
        r->voted = local;
    int all = (int)(zp_mpi_vote(r->m, ZP_MPI_VOTE_USER) >> 1);
    if (all && r->o->balance_ranks) {
        /* with cross-rank balance a step's K batches are delivered whole
         * (the votes were agreed at its first call): stop at its end */
        zp_mpi_balance_stats bs;
        zp_mpi_balance_stats_get(r->m, &bs);
        if (bs.window_pos != 0)
            return 0;
    }
    if (all && all != r->voted) {
        if (all == CLI_RUN_STOP_OUTPUT)
            fprintf(stderr, "zephon run: rank %d: stopping: another rank could not write an "
                            "output\n", zp_mpi_rank(r->m));
        else
            fprintf(stderr, "zephon run: rank %d: stopping: another rank received %s\n",
                    zp_mpi_rank(r->m), cli_run_signal_name(all));
    }
    r->stopped = all;
    return all;
}

static zp_status hook_next(void *user, zp_pipeline *p, const zp_batch **out)
{
    mpi_run *r = user;
    zp_mpi_set_vote(r->m, ZP_MPI_VOTE_USER, ((int64_t)r->voted << 1) | r->report_failed);
    return zp_mpi_next(r->m, p, out);
}

/* The job's state to path (--save-state), at the same step on every rank.
 * At the end of a stream that ended on one rank first (token packing), the
 * ranks that held a batch made it and did not deliver it: their states are
 * past the job's, so no job state is written then (said, not an error; the
 * file keeps the last periodic state). */
static int hook_save(void *user, zp_pipeline *p, const char *path, int at_end)
{
    mpi_run *r = user;
    int rank = zp_mpi_rank(r->m);
    if (at_end) {
        uint64_t d = zp_mpi_batches_dropped(r->m);
        char msg[256];
        snprintf(msg, sizeof msg, "its stream went on after another rank's had ended: %llu batch(es) "
                                  "made and not delivered",
                 (unsigned long long)d);
        if (zp_mpi_agree_status(r->m, d ? ZP_ERR_STATE : ZP_OK, msg) != ZP_OK) {
            if (rank == 0) {
                char kept[64] = "nothing";
                if (r->saved_at != UINT64_MAX)
                    snprintf(kept, sizeof kept, "the state after batch %llu",
                             (unsigned long long)r->saved_at);
                fprintf(stderr, "zephon run: warning: the state at the end of the stream was not "
                                "written to %s: %s; the file keeps %s\n",
                        path, zp_mpi_errmsg(r->m), kept);
            }
            return 1;
        }
    }
    zp_status st = zp_mpi_state_save(r->m, p, path);
    if (st != ZP_OK) {
        if (rank == 0)
            fprintf(stderr, "zephon run: --save-state %s: %s: %s\n", path, zp_status_str(st),
                    zp_mpi_errmsg(r->m));
        return -1;
    }
    zp_pipeline_counts c;
    zp_pipeline_get_counts(p, &c);
    r->saved_at = c.batches;
    if (at_end && rank == 0 && !r->o->quiet)
        fprintf(stderr, "zephon run: job state after batch %llu written to %s\n",
                (unsigned long long)c.batches, path);
    return 0;
}

static const char *hook_errmsg(void *user, zp_pipeline *p)
{
    (void)p;
    mpi_run *r = user;
    return zp_mpi_errmsg(r->m);
}

/* A window report completed (st ZP_OK) or failed: the root keeps a
 * completed one in the handle's history (the heatmap); nothing to print. A
 * failure is said and voted at the next step (hook_next). */
static void window_done(mpi_run *r, zp_status st, zp_cluster_report *rep)
{
    if (st == ZP_OK && r->fail_rank == zp_mpi_rank(r->m)) {
        r->fail_rank = -1;
        st = ZP_ERR_INTERNAL;
        say(r, "report window: %s", "failure injected by ZEPHON_TEST_REPORT_FAIL_RANK");
    } else if (st != ZP_OK)
        say(r, "report window: %s", zp_mpi_errmsg(r->m));
    if (st != ZP_OK)
        r->report_failed = 1;
    zp_cluster_report_destroy(rep);
}

/* The report windows. Whether to start one is decided only from what every
 * rank agreed on (the step count and the voted report flag), never from a
 * rank-local failure, so every rank starts the same windows at the same
 * steps: a rank whose test or wait failed sets report_failed, which is
 * voted at the next step, and until then it keeps starting windows with
 * the others. */
static void hook_step(void *user, zp_pipeline *p, uint64_t batches)
{
    mpi_run *r = user;
    zp_cluster_report *rep = NULL;
    if (zp_mpi_report_pending(r->m)) {
        int done = 0;
        zp_status st = zp_mpi_report_test(r->m, &done, &rep);
        if (st != ZP_OK || done)
            window_done(r, st, rep);
    }
    if (zp_mpi_vote(r->m, ZP_MPI_VOTE_USER) || batches % r->every != 0)
        return;
    if (zp_mpi_report_pending(r->m)) {
        /* the previous window is still in flight: finish it first (every
         * rank does the same at the same step) */
        zp_status wst = zp_mpi_report_wait(r->m, &rep);
        window_done(r, wst, rep);
    }
    zp_mpi_input in;
    zp_status st = zp_mpi_input_from_pipeline(p, &in);
    /* started on every rank: a failure here is an MPI failure */
    if (zp_mpi_report_start(r->m, st == ZP_OK ? &in : NULL, ZP_MPI_REPORT_WINDOW) != ZP_OK) {
        say(r, "report window: %s", zp_mpi_errmsg(r->m));
        r->report_failed = 1;
    }
}

static int hook_finish(void *user, zp_pipeline *p, int rc)
{
    mpi_run *r = user;
    zp_cluster_report *rep = NULL;
    /* a window failing here is reported, and every rank still makes the
     * final report (a collective: no rank may skip it) */
    if (zp_mpi_report_pending(r->m)) {
        zp_status wst = zp_mpi_report_wait(r->m, &rep);
        window_done(r, wst, rep);
    }
    zp_mpi_input in;
    int have = p && zp_mpi_input_from_pipeline(p, &in) == ZP_OK;
    if (zp_mpi_report(r->m, have ? &in : NULL, ZP_MPI_REPORT_FINAL, &r->final) != ZP_OK) {
        say(r, "report: %s", zp_mpi_errmsg(r->m));
        return 1;
    }
    /* token packing: this rank's stream went on after another's had
     * ended, so its last documents were not delivered: from where, and how
     * many (the certificate counts them) */
    const zp_sample *u;
    size_t nu = zp_mpi_undelivered_samples(r->m, &u);
    if (p && !r->o->no_coverage && (nu || zp_mpi_batches_dropped(r->m))) {
        zp_worksource_state ws;
        zp_pipeline_resume_state(p, &ws);
        uint32_t e = ws.epoch;
        uint64_t from = ws.position, held = 0;
        for (size_t k = 0; k < nu; k++)
            if (!u[k].padded && (u[k].epoch < e || (u[k].epoch == e && u[k].position < from))) {
                e = u[k].epoch;
                from = u[k].position;
            }
        for (size_t k = 0; k < nu; k++)
            held += !u[k].padded && u[k].epoch == e;
        zp_epoch_coverage c;
        if (zp_pipeline_coverage(p, e, 1, &c) == ZP_OK && c.checked &&
            c.expected.count > c.delivered.count - held)
            printf("rank %d: coverage: epoch %u: %llu document(s) of this rank's plan not "
                   "delivered, from position %llu on (another rank's stream ended first)\n",
                   zp_mpi_rank(r->m), e,
                   (unsigned long long)(c.expected.count - (c.delivered.count - held)),
                   (unsigned long long)from);
    }
    /* the job's coverage certificate, in the final report (a collective:
     * every rank, with or without its pipeline) */
    if (!r->o->no_coverage && zp_mpi_report_coverage(r->m, p, r->final) != ZP_OK) {
        say(r, "coverage: %s", zp_mpi_errmsg(r->m));
        return 1;
    }
    return rc;
}

/* The settings that must be equal on every rank beyond the library's
 * configs (compared as text by zp_mpi_agree). */
static char *extra_settings(const cli_run_opts *o)
{
    size_t cap = 1024 + 48 * o->n_skips;
    for (size_t i = 0; i < o->n_specs; i++)
        cap += strlen(o->specs[i]) + 24;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    /* the state's collectives run at the same steps on every rank: whether
     * and when states are saved must agree, as must what is resumed and
     * skipped (the mixture's parts are compared by zp_mpi_agree) */
    int n = 0;
    if (o->tok_id[0] && o->pack == ZP_PACK_BESTFIT) /* (only then: other runs' text as before) */
        n = snprintf(s, cap, "pack_window=%llu ",
                     (unsigned long long)(o->pack_window ? o->pack_window
                                                         : ZP_PACK_WINDOW_DEFAULT));
    if (o->tok_id[0] && o->balance > 1)
        n += snprintf(s + n, cap - (size_t)n, "balance=%llu ", (unsigned long long)o->balance);
    if (o->no_coverage) /* the certificate's collectives: on every rank or none */
        n += snprintf(s + n, cap - (size_t)n, "coverage=no ");
    n += snprintf(s + n, cap - (size_t)n,
                     "tokenize=%s field=%s map=%s start_epoch=%llu max_batches=%llu "
                     "report_every=%llu save_state=%s save_every=%llu resume=%s skip_batches=",
                     o->tok_id[0] ? o->tok_id : "none", o->field, o->map_strip ? "strip" : "none",
                     (unsigned long long)o->start_epoch,
                     o->max_batches == UINT64_MAX ? 0ULL : (unsigned long long)o->max_batches,
                     (unsigned long long)o->report_every, o->save_state ? "yes" : "no",
                     (unsigned long long)o->save_every, o->resume ? "yes" : "no");
    for (size_t i = 0; i < o->n_skips && n > 0 && (size_t)n < cap; i++)
        n += snprintf(s + n, cap - (size_t)n, "%s%llu-%llu", i ? "," : "",
                      (unsigned long long)o->skips[i].first, (unsigned long long)o->skips[i].last);
    if (n > 0 && (size_t)n < cap)
        n += snprintf(s + n, cap - (size_t)n, "%s data=", o->n_skips ? "" : "none");
    /* the specs without their secrets: this text is compared, and shown
     * where the ranks disagree (the dataset's fingerprint compares the
     * shards themselves) */
    for (size_t i = 0; i < o->n_specs && n > 0 && (size_t)n < cap; i++) {
        n += snprintf(s + n, cap - (size_t)n, "%s", i ? "," : "");
        if (n > 0 && (size_t)n < cap) {
            zp_dataset_spec_redact(o->specs[i], s + n, cap - (size_t)n);
            n += (int)strlen(s + n);
        }
    }
    return s;
}

/* Steps between report windows: about 32 windows over the run. */
static uint64_t auto_every(const cli_run_opts *o, zp_dataset *ds)
{
    zp_worksource *ws = NULL;
    uint64_t per = 0;
    if (zp_worksource_create(ds, &o->ws, &ws) == ZP_OK)
        per = zp_worksource_samples_per_rank(ws);
    zp_worksource_destroy(ws);
    uint64_t mb = o->pc.microbatch_size ? o->pc.microbatch_size : 32;
    uint64_t steps;
    if (__builtin_mul_overflow(per / mb + (per % mb != 0), (uint64_t)(o->pc.epochs ? o->pc.epochs : 1),
                               &steps))
        steps = UINT64_MAX;
    if (o->max_batches < steps)
        steps = o->max_batches;
    uint64_t every = steps / 32;
    return every ? every : 1;
}

/* The dataset, the same on every rank: rank 0 indexes (or reads the
 * manifest); the others get its bytes. With a mixture, each part's shard
 * count. 0, or the exit status. */
static int open_dataset(cli_run_opts *o, zp_mpi *m, zp_dataset **out)
{
    int rank = zp_mpi_rank(m);
    zp_dataset_config dcfg;
    zp_dataset_config_init(&dcfg);
    dcfg.storage = o->storage;
    dcfg.segment_bytes = o->segment_bytes;
    /* A signal is a stop voted at the next step by every rank together
     * (hook_stop). A rank blocked in a download must take part within the
     * launcher's grace period (mpirun kills the ranks about 2 s after its
     * SIGTERM): the stop hook ends its transfers at once, its next() ends
     * "stopped", and zp_mpi_next gives every rank that status at the same
     * step, which a signalled rank takes as its stop (docs/storage.md). */
    dcfg.storage.stop_requested = cli_run_stop_requested;
    dcfg.log = cli_run_log_debug; /* ZEPHON_DEBUG=1: the trace of downloads and evictions */
    char cache_dir[PATH_MAX];
    if (!o->no_index_store && cli_run_index_store_dir(cache_dir, sizeof cache_dir) == 0)
        dcfg.index_store_dir = cache_dir;
    zp_dataset *ds = NULL;
    zp_status st = zp_mpi_dataset_config_hdf5(m, &dcfg, (zp_mpi_h5_driver)o->h5_driver);
    if (st != ZP_OK) {
        if (rank == 0)
            fprintf(stderr, "zephon run: --h5-driver: %s\n", zp_mpi_errmsg(m));
        return 2;
    }
    const char *const *specs = (const char *const *)o->specs;
    if (o->n_parts) {
        /* a mixture: the shards each spec added on rank 0, summed per part */
        size_t *per = calloc(o->n_specs, sizeof *per); /* NULL: refused on every rank */
        st = zp_mpi_dataset_create_parts(m, specs, o->n_specs, &dcfg, per, &ds);
        if (st == ZP_OK) {
            for (size_t k = 0; k < o->n_parts; k++) {
                o->parts[k].shards = 0;
                for (size_t i = 0; i < o->parts[k].n; i++)
                    o->parts[k].shards += per[o->parts[k].first + i];
            }
        }
        free(per);
    } else {
        st = zp_mpi_dataset_create(m, specs, o->n_specs, &dcfg, &ds);
    }
    if (st != ZP_OK) {
        fprintf(stderr, "zephon run: rank %d: dataset: %s: %s\n", rank, zp_status_str(st),
                zp_mpi_errmsg(m));
        return 1;
    }
    /* the parts' shard counts are rank 0's on every rank: the same outcome
     * everywhere, no agreement needed */
    if (cli_run_set_parts(o) != 0) {
        zp_dataset_destroy(ds);
        return 1;
    }
    *out = ds;
    return 0;
}

/* The ranks agree on the dataset and the settings; 0, or 1 (printed). */
static int agree_settings(cli_run_opts *o, zp_mpi *m, zp_dataset *ds)
{
    char *extra = extra_settings(o);
    /* agree on the packing the pipeline will use (tokenize turns it on) */
    o->pc.pack = !o->tok_id[0] ? ZP_PACK_RECORDS : o->pack ? o->pack : ZP_PACK_CONCAT;
    zp_status st = zp_mpi_agree(m, ds, &o->ws, &o->pc, extra ? extra : "?");
    free(extra);
    if (st != ZP_OK) {
        fprintf(stderr, "zephon run: rank %d: %s: %s\n", zp_mpi_rank(m), zp_status_str(st),
                zp_mpi_errmsg(m));
        return 1;
    }
    return 0;
}

/* The final report (rank 0's): marked partial after a stop, written to
 * --report DIR, printed (its text, or its verdict); destroyed. Returns rc,
 * or 1 when it could not be written or printed. */
static int final_report(const cli_run_opts *o, const cli_run_result *res, zp_cluster_report *rep,
                        int rc)
{
    /* a run that a signal (or a failed output) stopped: every format
     * of the report says so */
    if (res->stop)
        zp_cluster_report_set_partial(
            rep, res->stop != CLI_RUN_STOP_OUTPUT ? cli_run_signal_name(res->stop) : NULL,
            res->stop != CLI_RUN_STOP_OUTPUT ? NULL : "an output could not be written",
            res->batches);
    if (o->report_dir) {
        char err[512];
        if (zp_cluster_report_write(rep, o->report_dir, err, sizeof err) != ZP_OK) {
            fprintf(stderr, "zephon run: report: %s\n", err);
            rc = 1;
        }
    }
    if (!o->json) {
        char *text = NULL;
        if (o->report_dir && zp_cluster_report_render(rep, ZP_MPI_TEXT, &text, NULL) == ZP_OK)
            fputs(text, stdout);
        else {
            printf("%s\n", zp_cluster_report_verdict(rep));
            const zp_coverage_cert *cov;
            size_t n = zp_cluster_report_coverage(rep, &cov);
            for (size_t i = 0; i < n; i++) {
                char line[512];
                zp_coverage_cert_line(&cov[i], line, sizeof line);
                printf("coverage: %s\n", line);
            }
        }
        free(text);
        if (o->report_dir)
            printf("report written to %s/report.{txt,json,csv,html}\n", o->report_dir);
    }
    if (cli_flush_stdout("zephon run") != 0 && (rc == 0 || rc > 128))
        rc = 1;
    zp_cluster_report_destroy(rep);
    return rc;
}

/* The summary's line of --balance-ranks: the step imbalance before and
 * after (every rank computed the same; rank 0 prints). */
static void print_balance(zp_mpi *m)
{
    zp_mpi_balance_stats bs;
    zp_mpi_balance_stats_get(m, &bs);
    if (zp_mpi_rank(m) != 0)
        return;
    printf("  cross-rank balance (K=%llu, %llu steps, %llu rows moved): attention cost max/mean "
           "per step: ranks %.3f -> %.3f, microbatches %.3f -> %.3f\n",
           (unsigned long long)bs.window, (unsigned long long)bs.steps,
           (unsigned long long)bs.rows_moved, bs.rank_imbalance_before, bs.rank_imbalance_after,
           bs.mb_imbalance_before, bs.mb_imbalance_after);
}

/* The root's log (stall notices of other ranks: zp_mpi_config.log). */
static void log_root(void *user, zp_log_level lvl, const char *msg)
{
    (void)user;
    fprintf(stderr, "zephon: %s: %s\n", lvl == ZP_LOG_ERROR ? "error" : "warning", msg);
}

static int run_ranks(cli_run_opts *o, zp_mpi *m)
{
    int rank = zp_mpi_rank(m);
    /* Threads under a launcher: --threads, else OMP_NUM_THREADS, else the
     * cores of this rank's binding shared among the node's ranks that
     * share them (zp_mpi_suggested_threads; docs/mpi.md) */
    const char *omp = getenv("OMP_NUM_THREADS");
    if (o->pc.threads == 0 && !(omp && *omp))
        o->pc.threads = zp_mpi_suggested_threads(m, NULL, NULL, NULL);
    if (o->rank_set && rank == 0)
        fprintf(stderr, "zephon run: under MPI the rank and world size come from the "
                        "communicator: --rank/--world-size ignored\n");
    zp_mpi_worksource_config(m, &o->ws);

    zp_dataset *ds = NULL;
    int orc = open_dataset(o, m, &ds);
    if (orc != 0)
        return orc;
    if (agree_settings(o, m, ds) != 0) {
        zp_dataset_destroy(ds);
        return 1;
    }
    if (o->balance_ranks) {
        /* the window is compared by the first step's agreement */
        zp_status bst = zp_mpi_balance(m, o->balance_ranks);
        if (bst != ZP_OK) {
            fprintf(stderr, "zephon run: rank %d: --balance-ranks: %s\n", rank, zp_mpi_errmsg(m));
            zp_dataset_destroy(ds);
            return 2;
        }
        /* whole steps only: a state saved at the end is at a step boundary */
        if (o->max_batches != UINT64_MAX) {
            uint64_t whole = o->max_batches - o->max_batches % o->balance_ranks;
            if (whole != o->max_batches && rank == 0 && !o->quiet)
                fprintf(stderr, "zephon run: --max-batches %llu rounded down to %llu (whole steps "
                                "of --balance-ranks %llu)\n",
                        (unsigned long long)o->max_batches, (unsigned long long)whole,
                        (unsigned long long)o->balance_ranks);
            o->max_batches = whole;
        }
    }

    mpi_run r = {.m = m, .o = o, .fail_rank = -1, .saved_at = UINT64_MAX};
    const char *fr = getenv("ZEPHON_TEST_REPORT_FAIL_RANK");
    if (fr && *fr)
        r.fail_rank = atoi(fr);
    r.every = o->report_every ? o->report_every : auto_every(o, ds);
    cli_run_hooks hooks = {&r,        hook_start, hook_stop,  hook_next,
                          hook_errmsg, hook_step,  hook_finish, hook_save};
    o->hooks = &hooks;
    cli_run_result res;
    cli_run_signals_install();
    int rc = cli_run_pipeline(o, ds, &res);
    o->hooks = NULL;
    if (rc == 0 || res.stop)
        cli_run_print(o, &res);
    if ((rc == 0 || res.stop) && o->balance_ranks && !o->json)
        print_balance(m);
    if (rc == 0 && zp_mpi_batches_dropped(m))
        printf("rank %d: %llu batch(es) not delivered: another rank's stream ended first (all "
               "ranks stop at the same step)\n",
               rank, (unsigned long long)zp_mpi_batches_dropped(m));
    if (cli_flush_stdout("zephon run") != 0 && (rc == 0 || rc > 128))
        rc = 1;

    if (r.final)
        rc = final_report(o, &res, r.final, rc);
    cli_run_result_free(&res);
    zp_dataset_destroy(ds);
    return rc;
}

int cli_cmd_run_mpi(cli_run_opts *o)
{
    /* Started without a launcher (`zephon run --report` alone): a world of
     * one without MPI (zp_mpi_create_local), the same code path and the
     * same report as `mpirun -np 1`, but MPI is never initialised. An MPI
     * singleton would start Open MPI's runtime (an orted, PMIx and its
     * threads, dlopen'ed components) for nothing, may fail or hang where
     * no MPI job can run (a login node), and made LeakSanitizer crash at
     * exit on fresh machines (docs/mpi.md). */
    int launched = cli_under_mpi();
    int provided = 0, already = 0;
    if (launched) {
        MPI_Initialized(&already);
        /* MPI_THREAD_MULTIPLE: HDF5 shards read through MPI-IO are read on
         * the pipeline's threads (zp_mpi_dataset_config_hdf5) */
        if (!already &&
            MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
            fprintf(stderr, "zephon run: MPI_Init_thread failed\n");
            return 1;
        }
    }
    zp_mpi_config mc;
    zp_mpi_config_init(&mc);
    mc.log = log_root; /* the root's stall notices from other ranks */
    zp_mpi *m = NULL;
    /* The command owns MPI and may name MPI_COMM_WORLD; the library
     * duplicates it. */
    zp_status st = launched ? zp_mpi_create(MPI_COMM_WORLD, &mc, &m) : zp_mpi_create_local(&mc, &m);
    int rc;
    if (st != ZP_OK) {
        fprintf(stderr, "zephon run: MPI layer: %s: %s\n", zp_status_str(st), zp_mpi_errmsg(m));
        rc = 1;
    } else {
        rc = run_ranks(o, m);
    }
    zp_mpi_destroy(m);
    if (launched && !already)
        MPI_Finalize();
    cli_run_opts_free(o);
    return rc;
}
