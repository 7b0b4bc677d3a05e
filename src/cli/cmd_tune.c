/* cmd_tune.c - `zephon tune`: runs a dataset with `zephon run`'s options
 * (the same run, run.c) for a bounded time or number of batches against a
 * simulated training step, with every setting not given set to automatic
 * (ZP_AUTO; docs/pipeline.md, "Autotune"), and prints the settings it
 * would use and the stall, throughput and memory it measured with them, as
 * text or JSON (--json): a `zephon run` line and Python builder calls to
 * paste. docs/cli.md has the command. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli.h"
#include "run_opts.h"

#define TUNE_SECONDS_DEFAULT 20.0

typedef struct tune_ctx {
    int argc;
    char **argv; /* as given, for the run line */
    const cli_run_opts *o;
    int failed;
} tune_ctx;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: zephon tune DATA... [zephon run's options] [--step-time S]\n"
            "                   [--seconds T] [--max-batches N] [--json]\n"
            "\n"
            "Runs the pipeline for at most T seconds (default 20) or N batches, or to\n"
            "the end of its epochs, consuming each batch in S seconds (a simulated\n"
            "training step; default 0), with every tunable setting that is not given\n"
            "automatic (--fetch-parallelism, --tokenize ID[:N], --prefetch-batches:\n"
            "auto). Prints the values the pipeline chose and why, the consumer's stall,\n"
            "the throughput and the peak memory measured with them, a `zephon run` line\n"
            "and Python builder calls with those values (JSON with --json).\n"
            "Exit status: 0 done, 1 the run failed, 2 a usage error.\n");
}

/* Options the run line leaves out (tune's own, and the tuned ones, which
 * it writes with their values); *takes_value: it is followed by its value. */
static int dropped(const char *a, int *takes_value)
{
    static const char *with_value[] = {"--seconds", "--max-batches", "--step-time",
                                       "--fetch-parallelism", "--tokenize", "--map",
                                       "--prefetch-batches", "--metrics-out", "--prefetch"};
    *takes_value = 1;
    for (size_t i = 0; i < sizeof with_value / sizeof *with_value; i++)
        if (!strcmp(a, with_value[i]))
            return 1;
    *takes_value = 0;
    return !strcmp(a, "--json") || !strcmp(a, "--quiet") || !strcmp(a, "--observe") ||
           !strncmp(a, "--observe=", 10);
}

/* s, shell-quoted when it needs to be, appended to buf. */
static void append_arg(char *buf, size_t cap, const char *s)
{
    size_t n = strlen(buf);
    int plain = *s != '\0';
    for (const char *c = s; *c; c++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:=@,+-%",
                    *c))
            plain = 0;
    if (plain) {
        snprintf(buf + n, cap - n, " %s", s);
        return;
    }
    snprintf(buf + n, cap - n, " '");
    for (const char *c = s; *c; c++) {
        n = strlen(buf);
        if (*c == '\'')
            snprintf(buf + n, cap - n, "'\\''");
        else
            snprintf(buf + n, cap - n, "%c", *c);
    }
    n = strlen(buf);
    snprintf(buf + n, cap - n, "'");
}

/* The `zephon run` line and the Python builder calls for the settings in m. */
static void paste_lines(const tune_ctx *t, const zp_metrics_snapshot *m, char *run, size_t run_cap,
                        char *py, size_t py_cap)
{
    const cli_run_opts *o = t->o;
    snprintf(run, run_cap, "zephon run");
    for (int i = 1; i < t->argc; i++) {
        int val;
        if (dropped(t->argv[i], &val)) {
            i += val;
            continue;
        }
        append_arg(run, run_cap, t->argv[i]);
    }
    snprintf(py, py_cap, "zephon.Pipeline(ws)");
    char arg[700];
    unsigned look = 0, look_par = 1;
    for (uint32_t i = 0; i < m->n_tuned; i++) {
        const zp_tuned_setting *s = &m->tuned[i];
        size_t r = strlen(run), q = strlen(py);
        if (!strcmp(s->op, "output")) {
            snprintf(run + r, run_cap - r, " --prefetch-batches %u", s->value);
        } else if (!strcmp(s->op, "fetch")) {
            snprintf(run + r, run_cap - r, " --fetch-parallelism %u", s->value);
            snprintf(py + q, py_cap - q, ".fetch(%u)", s->value);
        } else if (!strcmp(s->op, "tokenize") && o->tok_id[0]) {
            snprintf(arg, sizeof arg, "%s:%u", o->tok_id, s->value);
            append_arg(run, run_cap, "--tokenize");
            append_arg(run, run_cap, arg);
            snprintf(py + q, py_cap - q, ".tokenize(\"%s\", field=\"%s\", parallelism=%u)",
                     o->tok_id, o->field ? o->field : "text", s->value);
        } else if (!strcmp(s->op, "strip") && o->map_strip) {
            snprintf(run + r, run_cap - r, " --map strip:%u", s->value);
        } else if (!strcmp(s->op, "prefetch") && !strcmp(s->setting, "look_ahead")) {
            look = s->value;
        } else if (!strcmp(s->op, "prefetch")) {
            look_par = s->value ? s->value : 1;
        }
    }
    if (look) { /* the look-ahead as it ended (0: it never started: off) */
        size_t r = strlen(run), q = strlen(py);
        snprintf(run + r, run_cap - r, " --prefetch %u:%u", look, look_par);
        snprintf(py + q, py_cap - q, ".prefetch(%u, %u)", look, look_par);
    }
    size_t q = strlen(py);
    snprintf(py + q, py_cap - q, ".options(prefetch_batches=%u)",
             m->n_tuned ? m->tuned[0].value : 2);
}

static void tune_report(void *user, zp_pipeline *p, const cli_run_result *r)
{
    tune_ctx *t = user;
    const cli_run_opts *o = t->o;
    zp_metrics_snapshot *m = calloc(1, sizeof *m);
    if (!m || zp_pipeline_metrics_snapshot(p, m) != ZP_OK) {
        fprintf(stderr, "zephon tune: cannot read the pipeline's metrics: %s\n",
                m ? zp_pipeline_errmsg(p) : "out of memory");
        free(m);
        t->failed = 1;
        return;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const double rss = (double)ru.ru_maxrss * 1024.0; /* Linux: KiB */
    const double sec = r->seconds > 0 ? r->seconds : 1e-9;
    char run[8192], py[2048];
    paste_lines(t, m, run, sizeof run, py, sizeof py);
    if (o->json) {
        json_t *j = json_object(), *set = json_array();
        json_object_set_new(j, "batches", json_integer((json_int_t)r->batches));
        json_object_set_new(j, "seconds", json_real(r->seconds));
        json_object_set_new(j, "step_time", json_real(o->step_time));
        json_object_set_new(j, "threads", json_integer(m->threads));
        json_object_set_new(j, "stall_fraction", json_real(m->stall_fraction));
        json_object_set_new(j, "time_to_first_batch", json_real(r->first_batch_seconds));
        json_object_set_new(j, "batches_per_second", json_real((double)r->batches / sec));
        json_object_set_new(j, "samples_per_second", json_real((double)r->counts.samples / sec));
        json_object_set_new(j, "tokens_per_second", json_real((double)r->counts.tokens / sec));
        json_object_set_new(j, "peak_rss_bytes", json_integer((json_int_t)rss));
        for (uint32_t i = 0; i < m->n_tuned; i++) {
            const zp_tuned_setting *s = &m->tuned[i];
            json_t *e = json_object();
            json_object_set_new(e, "op", json_string(s->op));
            json_object_set_new(e, "setting", json_string(s->setting));
            json_object_set_new(e, "value", json_integer(s->value));
            json_object_set_new(e, "auto", json_boolean(s->is_auto));
            json_object_set_new(e, "cap", json_integer(s->cap));
            json_object_set_new(e, "why", json_string(s->why));
            json_array_append_new(set, e);
        }
        json_object_set_new(j, "settings", set);
        json_object_set_new(j, "zephon_run", json_string(run));
        json_object_set_new(j, "python", json_string(py));
        char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
        json_decref(j);
        if (!s) {
            fprintf(stderr, "zephon tune: out of memory\n");
            t->failed = 1;
        } else {
            printf("%s\n", s);
            free(s);
        }
        free(m);
        return;
    }
    printf("zephon tune: %llu batches in %.1f s, a step of %.4f s, %u threads\n",
           (unsigned long long)r->batches, r->seconds, o->step_time, m->threads);
    printf("  stall          %.2f%% of the time after the first batch (first batch after %.2f s)\n",
           100.0 * m->stall_fraction, r->first_batch_seconds);
    printf("  throughput     %.2f batches/s, %.0f samples/s, %.0f tokens/s\n",
           (double)r->batches / sec, (double)r->counts.samples / sec,
           (double)r->counts.tokens / sec);
    printf("  memory         %.1f MiB peak resident\n", rss / (1024.0 * 1024.0));
    printf("settings it would use:\n");
    for (uint32_t i = 0; i < m->n_tuned; i++) {
        const zp_tuned_setting *s = &m->tuned[i];
        char name[80];
        snprintf(name, sizeof name, "%s%s%s", strcmp(s->op, "output") ? s->op : "",
                 strcmp(s->op, "output") ? " " : "", s->setting);
        if (s->is_auto)
            printf("  %-22s %3u  auto, cap %u: %s\n", name, s->value, s->cap,
                   s->why[0] ? s->why : "no decision yet (a run too short to measure)");
        else
            printf("  %-22s %3u  as given\n", name, s->value);
    }
    printf("%s\n", run);
    printf("python: %s\n", py);
    free(m);
}

int cli_cmd_tune(int argc, char **argv)
{
    /* tune's own option (--seconds) out, the rest is zephon run's */
    char **args = calloc((size_t)argc + 1, sizeof *args);
    if (!args) {
        fprintf(stderr, "zephon tune: out of memory\n");
        return 1;
    }
    int n = 0;
    double max_seconds = TUNE_SECONDS_DEFAULT;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            free(args);
            return cli_flush_stdout("zephon tune") == 0 ? 0 : 1;
        }
        if (!strcmp(argv[i], "--seconds")) {
            char *end = NULL;
            double v = i + 1 < argc ? strtod(argv[i + 1], &end) : 0;
            if (i + 1 >= argc || end == argv[i + 1] || *end || !(v > 0 && v <= 1e6)) {
                fprintf(stderr, "zephon tune: --seconds '%s': must be a number of seconds, more "
                                "than 0 and at most 1000000\n",
                        i + 1 < argc ? argv[i + 1] : "");
                free(args);
                return 2;
            }
            max_seconds = v;
            i++;
            continue;
        }
        args[n++] = argv[i];
    }
    cli_run_opts o;
    cli_run_opts_init(&o);
    int rc = cli_run_opts_parse(&o, n, args);
    free(args);
    if (rc == 1) {
        usage(stdout);
        return cli_flush_stdout("zephon tune") == 0 ? 0 : 1;
    }
    if (rc != 0) {
        fprintf(stderr, "(zephon tune --help; zephon run --help lists the options)\n");
        return 2;
    }
    if (o.report_dir || o.balance_ranks) {
        fprintf(stderr, "zephon tune: %s: tune runs one process (no MPI report)\n",
                o.report_dir ? "--report" : "--balance-ranks");
        cli_run_opts_free(&o);
        return 2;
    }
    tune_ctx t = {.argc = argc, .argv = argv, .o = &o};
    o.quiet = 1;
    o.observe = -1;
    o.max_seconds = max_seconds;
    o.report = tune_report;
    o.report_user = &t;
    rc = cli_run_main(&o);
    return rc == 0 && t.failed ? 1 : rc;
}
