/*
 * cmd_preprocess.c - `zephon preprocess`: tokenize a JSONL (.zst, .gz)
 * dataset once into pre-tokenized shards (HDF5 or Megatron .bin/.idx) and
 * a manifest (the library's zephon/preprocess.h; docs/preprocess.md).
 *
 * Under mpirun or srun (or with --shared) the MPI layer splits the shards
 * between the ranks (zp_mpi_preprocess, zp_mpi_preprocess_shared): the
 * command, never the library, initialises MPI.
 *
 * SIGINT / SIGTERM: the run stops at the next block of records, the open
 * writers are aborted (their .part files removed), no manifest is
 * written, and the command exits 130 / 143. A second signal kills the
 * process at once (its .part files stay: no reader takes them).
 */
#include <errno.h>
#include <omp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "base/util.h"
#include "zephon/dataset.h"
#include "zephon/preprocess.h"

#ifdef ZEPHON_CLI_MPI
#include <mpi.h>

#include "run_opts.h"
#include "zephon/mpi.h"
#endif

#define CMD "zephon preprocess"

static void usage(FILE *f)
{
    fputs("usage: zephon preprocess --out DIR [options] DATA...\n"
          "\n"
          "Tokenizes the text field of every record of a text dataset (.jsonl, .jsonl.zst,\n"
          ".jsonl.gz, .parquet) once and writes pre-tokenized shards: one output shard per input\n"
          "shard, with the same base name and one document per record, and\n"
          "DIR/manifest.json listing them (written\n"
          "last: the output is finished when it exists). `zephon run --data DIR/manifest.json\n"
          "--tokenize ...` then gives the same batches as tokenizing DATA on the fly.\n"
          "\n"
          "  DATA                 shards, folders, globs or manifests (as `zephon run` takes\n"
          "                       them); --data SPEC is the same\n"
          "  --out DIR            the output folder (created when missing; it may hold\n"
          "                       other files)\n"
          "  --format FMT         h5 (default: NAME.h5) or megatron (NAME.bin + NAME.idx)\n"
          "  --tokenizer NAME     gpt2 (default), r50k_base, p50k_base, cl100k_base, o200k_base,\n"
          "                       or a path: tokenizer.json (or its folder), PATTERN:FILE.tiktoken,\n"
          "                       FILE.model; ids are stored as uint16 when they fit, else\n"
          "                       int32; the outputs record the tokenizer (docs/tokenizers.md)\n"
          "  --field NAME         the text field (default text)\n"
          "  --append-eot         store the EOT id after each document, and the BOS before it\n"
          "                       when the tokenizer adds one (for Megatron\n"
          "                       trainers; Zephon trains the same either way)\n"
          "  --eot ID, --bos ID|none  with --append-eot: the ids stored after / before each\n"
          "                       document instead of the tokenizer's (give `zephon run` the\n"
          "                       same --eot/--bos)\n"
          "  --threads N          encoding threads (default: OMP_NUM_THREADS or the CPUs)\n"
          "  --on-bad-record P    fail (default) or skip: a bad record (bad JSON, text field\n"
          "                       missing or not a string) is written as an empty document\n"
          "                       and counted\n"
          "  --force              replace existing outputs of the same names\n"
          "  --hash               write each output's XXH64 into the manifest\n"
          "  --progress           show the progress line (default: on a terminal only)\n"
          "  --no-progress        never show it\n"
          "  --quiet              no summary line\n"
          "  --shared FILE.h5     (MPI) every rank writes its documents into this one HDF5\n"
          "                       file (parallel HDF5) instead of one file per shard\n"
          "\n"
          "Under mpirun/srun, shard i goes to rank i % N; rank 0 writes the manifest once\n"
          "every rank succeeded. Exit status: 0 ok, 1 error, 2 usage, 130/143 interrupted.\n",
          f);
}

/* ------------------------------------------------------------ signals */

static volatile sig_atomic_t got_signal;

static void on_signal(int sig) { got_signal = sig; }

static int stop_cb(void *user)
{
    (void)user;
    return got_signal != 0;
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND; /* a second signal: the default action */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* ------------------------------------------------------------ progress */

typedef struct progress {
    int on;
    double last;
    int shown;
    const char *prefix; /* "" or "rank 0: " */
} progress;

static void human_time(char *buf, size_t cap, double s)
{
    if (!(s >= 0) || s > 1e7)
        snprintf(buf, cap, "?");
    else if (s < 60)
        snprintf(buf, cap, "%.0fs", s);
    else if (s < 3600)
        snprintf(buf, cap, "%dm%02ds", (int)s / 60, (int)s % 60);
    else
        snprintf(buf, cap, "%dh%02dm", (int)s / 3600, (int)s % 3600 / 60);
}

static void on_progress(void *user, const zp_preprocess_stats *s)
{
    progress *p = user;
    if (!p->on)
        return;
    double now = zpi_now();
    if (p->shown && now - p->last < 0.5)
        return;
    p->last = now;
    p->shown = 1;
    double rate = s->seconds > 0 ? (double)s->bytes_in / s->seconds : 0;
    char left[32];
    human_time(left, sizeof left,
               rate > 0 ? (double)(s->bytes_in_total - s->bytes_in) / rate : -1.0);
    fprintf(stderr,
            "\r\033[K%s%llu documents, %.1f / %.1f MB in, %.1f MB/s, shard %zu/%zu, %s left",
            p->prefix, (unsigned long long)s->docs, (double)s->bytes_in / 1e6,
            (double)s->bytes_in_total / 1e6, rate / 1e6,
            s->shards_done < s->shards_total ? s->shards_done + 1 : s->shards_total,
            s->shards_total, left);
    fflush(stderr);
}

static void progress_end(progress *p)
{
    if (p->on && p->shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    p->shown = 0;
}

static void log_cb(void *user, zp_log_level lvl, const char *msg)
{
    progress *p = user;
    progress_end(p);
    fprintf(stderr, CMD ": %s%s%s\n", p->prefix, lvl == ZP_LOG_ERROR ? "error: " : lvl == ZP_LOG_WARN ? "warning: " : "",
            msg);
}

static void summary(const zp_preprocess_stats *s, int threads, const char *where)
{
    double sec = s->seconds > 0 ? s->seconds : 1e-9;
    printf(CMD ": %zu shards, %llu documents, %llu tokens, %.1f MB in (%.1f MB of JSONL), "
           "%.1f MB out%s%s, %.2f s, %.1f MB/s of JSONL (%d thread%s%s)\n",
           s->shards_done, (unsigned long long)s->docs, (unsigned long long)s->tokens,
           (double)s->bytes_in / 1e6, (double)s->json_bytes / 1e6, (double)s->bytes_out / 1e6,
           where ? " into " : "", where ? where : "", s->seconds,
           (double)s->json_bytes / sec / 1e6, threads, threads == 1 ? "" : "s", s->skipped ? ", bad records skipped" : "");
    if (s->skipped)
        printf(CMD ": %llu bad records written as empty documents\n",
               (unsigned long long)s->skipped);
}

/* ------------------------------------------------------------ options */

typedef struct opts {
    const char **specs;
    size_t n_specs;
    zp_preprocess_config pc;
    zp_tokenizer_config tc; /* --eot, --bos (pc.tokenizer_config points here when given) */
    const char *shared;
    int progress; /* -1 auto, 0 off, 1 on */
    int quiet;
} opts;

static int need_value(int argc, char **argv, int i)
{
    if (i + 1 >= argc) {
        fprintf(stderr, CMD ": %s needs a value\n", argv[i]);
        return -1;
    }
    return 0;
}

/* One option A (the name, without its =value) with its value V (NULL
 * when it takes none); ARG as given. 0 ok, 1 help, 2 usage error
 * (printed). */
static int parse_option(opts *o, const char *a, const char *v, const char *arg)
{
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
        return 1;
    } else if (!strcmp(a, "--out")) {
        o->pc.out_dir = v;
    } else if (!strcmp(a, "--data")) {
        o->specs[o->n_specs++] = v;
    } else if (!strcmp(a, "--format")) {
        if (!strcmp(v, "h5") || !strcmp(v, "hdf5"))
            o->pc.format = ZP_PREPROCESS_HDF5;
        else if (!strcmp(v, "megatron"))
            o->pc.format = ZP_PREPROCESS_MEGATRON;
        else {
            fprintf(stderr, CMD ": --format '%s': must be h5 or megatron\n", v);
            return 2;
        }
    } else if (!strcmp(a, "--tokenizer")) {
        o->pc.tokenizer = v;
    } else if (!strcmp(a, "--field")) {
        if (!*v) {
            fprintf(stderr, CMD ": --field: must not be empty\n");
            return 2;
        }
        o->pc.field = v;
    } else if (!strcmp(a, "--threads")) {
        uint64_t n;
        if (zpi_parse_u64(v, 1, 1024, 0, &n) != 0) {
            fprintf(stderr, CMD ": --threads '%s': must be an integer from 1 to 1024\n", v);
            return 2;
        }
        o->pc.threads = (int)n;
    } else if (!strcmp(a, "--on-bad-record")) {
        if (!strcmp(v, "fail"))
            o->pc.skip_bad_records = 0;
        else if (!strcmp(v, "skip"))
            o->pc.skip_bad_records = 1;
        else {
            fprintf(stderr, CMD ": --on-bad-record '%s': must be fail or skip\n", v);
            return 2;
        }
    } else if (!strcmp(a, "--shared")) {
        o->shared = v;
    } else if (!strcmp(a, "--eot") || !strcmp(a, "--bos")) {
        int bos = a[2] == 'b';
        uint64_t n;
        if (bos && (!strcmp(v, "none") || !strcmp(v, "-1"))) {
            o->tc.bos = -1;
        } else if (zpi_parse_u64(v, 0, INT32_MAX, 0, &n) != 0) {
            fprintf(stderr, CMD ": %s '%s': must be a token id (0 to %d)%s\n", a, v, INT32_MAX,
                    bos ? " or none" : "");
            return 2;
        } else if (bos) {
            o->tc.bos = (int32_t)n;
        } else {
            o->tc.eot = (int32_t)n;
        }
        o->pc.tokenizer_config = &o->tc;
    } else if (!strcmp(a, "--append-eot")) {
        o->pc.append_eot = 1;
    } else if (!strcmp(a, "--force")) {
        o->pc.force = 1;
    } else if (!strcmp(a, "--hash")) {
        o->pc.hash = 1;
    } else if (!strcmp(a, "--progress")) {
        o->progress = 1;
    } else if (!strcmp(a, "--no-progress")) {
        o->progress = 0;
    } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
        o->quiet = 1;
    } else if (a[0] == '-' && a[1]) {
        fprintf(stderr, CMD ": unknown option '%s'\n", arg);
        return 2;
    } else {
        o->specs[o->n_specs++] = a;
    }
    return 0;
}

/* The options that go together. 0 ok, 2 usage error (printed). */
static int check_options(const opts *o)
{
    if (!o->n_specs) {
        fprintf(stderr, CMD ": no input (give shards, folders, globs or manifests)\n");
        return 2;
    }
    if (!o->shared && (!o->pc.out_dir || !o->pc.out_dir[0])) {
        fprintf(stderr, CMD ": --out DIR is required\n");
        return 2;
    }
    if (o->pc.tokenizer_config && !o->pc.append_eot) {
        fprintf(stderr, CMD ": --eot and --bos set the ids that --append-eot stores around each "
                        "document: give --append-eot too\n");
        return 2;
    }
    if (o->shared) {
        if (o->pc.format == ZP_PREPROCESS_MEGATRON) {
            fprintf(stderr, CMD ": --shared writes one HDF5 file: not with --format megatron\n");
            return 2;
        }
        if (o->pc.out_dir) {
            fprintf(stderr, CMD ": --shared FILE and --out DIR: give one of them\n");
            return 2;
        }
    }
    return 0;
}

/* 0 ok, 1 help, 2 usage error (printed). */
static int parse(opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    zp_preprocess_config_init(&o->pc);
    zp_tokenizer_config_init(&o->tc);
    o->progress = -1;
    o->specs = calloc((size_t)argc + 1, sizeof *o->specs);
    if (!o->specs) {
        fprintf(stderr, CMD ": out of memory\n");
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = NULL;
        char key[64];
        /* --opt=value */
        const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        if (eq && (size_t)(eq - a) < sizeof key) {
            memcpy(key, a, (size_t)(eq - a));
            key[eq - a] = '\0';
            v = eq + 1;
            a = key;
        }
        int takes = !strcmp(a, "--out") || !strcmp(a, "--format") || !strcmp(a, "--tokenizer") ||
                    !strcmp(a, "--field") || !strcmp(a, "--threads") ||
                    !strcmp(a, "--on-bad-record") || !strcmp(a, "--shared") ||
                    !strcmp(a, "--data") || !strcmp(a, "--eot") || !strcmp(a, "--bos");
        if (takes && !v) {
            if (need_value(argc, argv, i) != 0)
                return 2;
            v = argv[++i];
        } else if (!takes && v) {
            fprintf(stderr, CMD ": %s takes no value\n", a);
            return 2;
        }
        int rc = parse_option(o, a, v, argv[i]);
        if (rc != 0)
            return rc;
    }
    return check_options(o);
}

/* Build the input dataset (every spec; not indexed: counts come as the
 * shards are read). */
static zp_dataset *make_dataset(const opts *o, progress *pg, const char *out_dir)
{
    zp_dataset_config dc;
    zp_dataset_config_init(&dc);
    dc.log = log_cb;
    dc.log_user = pg;
    zp_dataset *ds = NULL;
    zp_status st = zp_dataset_create(&dc, &ds);
    if (st == ZP_OK && out_dir) {
        char mp[4096];
        snprintf(mp, sizeof mp, "%s/manifest.json", out_dir);
        st = zp_dataset_exclude(ds, mp);
    }
    for (size_t i = 0; st == ZP_OK && i < o->n_specs; i++)
        st = zp_dataset_add(ds, o->specs[i]);
    if (st != ZP_OK) {
        fprintf(stderr, CMD ": %s%s\n", pg->prefix, ds ? zp_dataset_errmsg(ds) : "out of memory");
        zp_dataset_destroy(ds);
        return NULL;
    }
    return ds;
}

static int exit_for_signal(void)
{
    return got_signal ? 128 + (int)got_signal : 1;
}

static const char *signame(int s) { return s == SIGINT ? "SIGINT" : s == SIGTERM ? "SIGTERM" : "a signal"; }

#ifdef ZEPHON_CLI_MPI
static int run_mpi(opts *o)
{
    int provided = 0, already = 0;
    MPI_Initialized(&already);
    if (!already && MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, CMD ": MPI_Init_thread failed\n");
        return 1;
    }
    zp_mpi *m = NULL;
    zp_status st = zp_mpi_create(MPI_COMM_WORLD, NULL, &m);
    int rc = 1;
    if (st != ZP_OK) {
        fprintf(stderr, CMD ": MPI layer: %s\n", zp_mpi_errmsg(m));
        goto out;
    }
    int rank = zp_mpi_rank(m);
    char prefix[32];
    snprintf(prefix, sizeof prefix, "rank %d: ", rank);
    progress pg = {o->progress == 1 && rank == 0, 0, 0, prefix};
    o->pc.progress = on_progress;
    o->pc.user = &pg;
    o->pc.log = log_cb;
    o->pc.log_user = &pg;
    o->pc.stop = stop_cb;
    /* every rank lists the inputs itself (no rank reads a shard twice;
     * the MPI layer checks that the ranks found the same shards) */
    zp_dataset *ds = make_dataset(o, &pg, o->pc.out_dir);
    zp_status local = ds ? ZP_OK : ZP_ERR_INVALID;
    st = zp_mpi_agree_status(m, local, "the input dataset could not be built");
    if (st != ZP_OK) {
        if (rank == 0 && ds)
            fprintf(stderr, CMD ": %s\n", zp_mpi_errmsg(m));
        zp_dataset_destroy(ds);
        goto out;
    }
    zp_preprocess_stats tot;
    memset(&tot, 0, sizeof tot);
    if (o->shared)
        st = zp_mpi_preprocess_shared(m, ds, &o->pc, o->shared, &tot);
    else
        st = zp_mpi_preprocess(m, ds, &o->pc, &tot);
    progress_end(&pg);
    if (st != ZP_OK) {
        if (rank == 0) {
            if (got_signal)
                fprintf(stderr, CMD ": interrupted (%s): %s\n", signame(got_signal),
                        o->shared ? "no shared file written" : "no manifest written");
            else
                fprintf(stderr, CMD ": %s%s\n", zp_mpi_errmsg(m),
                        st == ZP_ERR_STATE ? " (--force replaces it)" : "");
        }
        rc = got_signal ? exit_for_signal() : 1;
    } else {
        if (rank == 0 && !o->quiet) {
            summary(&tot, o->pc.threads, o->shared);
            printf(CMD ": %d ranks\n", zp_mpi_size(m));
        }
        rc = 0;
    }
    zp_dataset_destroy(ds);
out:
    zp_mpi_destroy(m);
    if (!already)
        MPI_Finalize();
    return rc;
}
#endif

int cli_cmd_preprocess(int argc, char **argv)
{
    opts o;
    int r = parse(&o, argc, argv);
    if (r == 1) {
        usage(stdout);
        free(o.specs);
        return 0;
    }
    if (r != 0) {
        fprintf(stderr, "(zephon preprocess --help lists the options)\n");
        free(o.specs);
        return 2;
    }
    if (!o.pc.threads)
        o.pc.threads = omp_get_max_threads();
    install_signals();
#ifdef ZEPHON_CLI_MPI
    if (cli_under_mpi() || o.shared) {
        int rc = run_mpi(&o);
        free(o.specs);
        return rc;
    }
#else
    if (o.shared) {
        fprintf(stderr, CMD ": --shared needs zephon built with MPI (ZEPHON_WITH_MPI)\n");
        free(o.specs);
        return 2;
    }
#endif
    progress pg = {o.progress == 1 || (o.progress == -1 && isatty(STDERR_FILENO)), 0, 0, ""};
    zp_dataset *ds = make_dataset(&o, &pg, o.pc.out_dir);
    if (!ds) {
        free(o.specs);
        return 1;
    }
    o.pc.progress = on_progress;
    o.pc.user = &pg;
    o.pc.log = log_cb;
    o.pc.log_user = &pg;
    o.pc.stop = stop_cb;
    zp_preprocess *pp = NULL;
    int rc = 1;
    zp_status st = zp_preprocess_create(&o.pc, ds, &pp);
    if (st == ZP_OK)
        st = zp_preprocess_run(pp);
    if (st == ZP_OK && got_signal)
        st = ZP_ERR_CALLBACK; /* a signal after the last block: still no manifest */
    if (st == ZP_OK)
        st = zp_preprocess_write_manifest(pp);
    progress_end(&pg);
    if (st != ZP_OK) {
        if (got_signal) {
            fprintf(stderr,
                    CMD ": interrupted (%s): no manifest written; '%s' is not finished (training "
                        "from it is refused): run the same command again with --force\n",
                    signame(got_signal), o.pc.out_dir);
            rc = exit_for_signal();
        } else {
            fprintf(stderr, CMD ": %s%s\n", zp_preprocess_errmsg(pp),
                    st == ZP_ERR_STATE ? " (--force replaces it)" : "");
        }
    } else {
        rc = 0;
        if (!o.quiet) {
            zp_preprocess_stats s;
            zp_preprocess_get_stats(pp, &s);
            summary(&s, o.pc.threads, o.pc.out_dir);
        }
    }
    zp_preprocess_destroy(pp);
    zp_dataset_destroy(ds);
    free(o.specs);
    return rc;
}
