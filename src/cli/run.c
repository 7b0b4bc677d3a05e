/* run.c - the run of `zephon run`: build the dataset (its mixture parts),
 * the worksource and the pipeline from the options (the same code path as
 * the library), resume from a state, consume the batches, write the outputs
 * and the state, and stop cleanly on SIGINT/SIGTERM. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "run_opts.h"
#include "run_signal.h"
#include "base/util.h"

/* Sleeps `seconds` unless a signal asks the run to stop: in slices, since
 * the signal may be delivered to one of the pipeline's threads rather than
 * interrupt this one's nanosleep. */
static void sleep_interruptible(double seconds)
{
    double until = zpi_now() + seconds, left;
    while (!cli_run_signal() && (left = until - zpi_now()) > 0) {
        if (left > 0.05)
            left = 0.05;
        struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

/* ------------------------------------------------------------ the strip map */

/* The built-in map: strip the surrounding whitespace of field `field`, in
 * the field itself. When tokenizing, the stripped text is what tokenize
 * encodes (tokenize reads the same field); in record mode the field's value
 * is replaced in the record's JSON, every other byte kept. */
typedef struct strip_ctx {
    const char *field;
    int rewrite_json;
} strip_ctx;

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static const char *skip_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* End of the JSON string starting at p (on its opening quote), or NULL. */
static const char *skip_string(const char *p, const char *e)
{
    for (p++; p < e; p++) {
        if (*p == '\\')
            p++;
        else if (*p == '"')
            return p + 1;
    }
    return NULL;
}

/* End of the JSON value starting at p, or NULL. The record was validated
 * by the parser already, so this only has to find the value's end. */
static const char *skip_value(const char *p, const char *e)
{
    if (p >= e)
        return NULL;
    if (*p == '"')
        return skip_string(p, e);
    if (*p == '{' || *p == '[') {
        int depth = 0;
        for (; p < e; p++) {
            if (*p == '"') {
                if (!(p = skip_string(p, e)))
                    return NULL;
                p--;
            } else if (*p == '{' || *p == '[')
                depth++;
            else if ((*p == '}' || *p == ']') && --depth == 0)
                return p + 1;
        }
        return NULL;
    }
    while (p < e && *p != ',' && *p != '}' && *p != ']' && !is_ws(*p))
        p++;
    return p;
}

/* 1 when the JSON string token [k, ke) (quotes included) is `key`. */
static int key_is(const char *k, const char *ke, const char *key)
{
    size_t n = (size_t)(ke - k) - 2, kl = strlen(key);
    if (!memchr(k + 1, '\\', n))
        return n == kl && !memcmp(k + 1, key, n);
    json_t *s = json_loadb(k, (size_t)(ke - k), JSON_DECODE_ANY, NULL);
    int eq = json_is_string(s) && json_string_length(s) == kl && !memcmp(json_string_value(s), key, kl);
    json_decref(s);
    return eq;
}

/* Finds the value of top-level member `key` in the object json[0..len):
 * *vs, *ve. 0, or -1 when absent. The first member of that name, as the
 * record parser answers. */
static int find_member(const char *json, size_t len, const char *key, const char **vs,
                       const char **ve)
{
    const char *p = skip_ws(json, json + len), *e = json + len;
    if (p >= e || *p != '{')
        return -1;
    p = skip_ws(p + 1, e);
    while (p < e && *p == '"') {
        const char *ke = skip_string(p, e);
        if (!ke)
            return -1;
        const char *v = skip_ws(ke, e);
        if (v >= e || *v != ':')
            return -1;
        v = skip_ws(v + 1, e);
        const char *end = skip_value(v, e);
        if (!end)
            return -1;
        if (key_is(p, ke, key)) {
            *vs = v;
            *ve = end;
            return 0;
        }
        p = skip_ws(end, e);
        if (p < e && *p == ',')
            p = skip_ws(p + 1, e);
    }
    return -1;
}

/* ZEPHON_TEST_DROP_SAMPLE's map callback: drops the sample at position 0
 * of the first epoch (user: the start epoch). */
static zp_status test_drop_first(void *user, zp_record *rec)
{
    const zp_sample *smp = zp_record_sample(rec);
    if (smp->position == 0 && !smp->padded && smp->epoch == *(const uint64_t *)user)
        zp_record_drop(rec);
    return ZP_OK;
}

static zp_status map_strip(void *user, zp_record *rec)
{
    const strip_ctx *sc = user;
    const char *s;
    size_t n;
    zp_status st = zp_record_get_string(rec, sc->field, &s, &n);
    if (st == ZP_END) {
        zp_record_error(rec, "no field '%s'", sc->field);
        return ZP_ERR_FORMAT;
    }
    if (st == ZP_ERR_FORMAT) {
        zp_record_error(rec, "field '%s' is not a string", sc->field);
        return st;
    }
    if (st != ZP_OK)
        return st;
    size_t n0 = n;
    while (n && is_ws(*s)) {
        s++;
        n--;
    }
    while (n && is_ws(s[n - 1]))
        n--;
    if (!sc->rewrite_json)
        return zp_record_set_text(rec, s, n);
    if (n == n0)
        return ZP_OK; /* nothing to strip: the record stays as it is */
    size_t len;
    const char *json = zp_record_json(rec, &len), *vs, *ve;
    if (find_member(json, len, sc->field, &vs, &ve) != 0) {
        zp_record_error(rec, "field '%s' not found in the record's bytes", sc->field);
        return ZP_ERR_FORMAT;
    }
    json_t *str = json_stringn(s, n);
    char *enc = str ? json_dumps(str, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    json_decref(str);
    zpi_buf out = {0};
    st = ZP_ERR_NOMEM;
    if (enc && zpi_buf_append(&out, json, (size_t)(vs - json)) == 0 && zpi_buf_puts(&out, enc) == 0 &&
        zpi_buf_append(&out, ve, (size_t)(json + len - ve)) == 0)
        st = zp_record_set_json(rec, out.p, out.len);
    free(enc);
    zpi_buf_free(&out);
    return st;
}

/* ------------------------------------------------------------ batches */

/* ZEPHON_DEBUG=1 in the environment: the library's debug messages on
 * stderr too, among them the trace of downloads and evictions
 * (docs/storage.md, "Tracing downloads"). */
static int debug_wanted;
static pthread_once_t debug_once = PTHREAD_ONCE_INIT;
static void debug_read_env(void)
{
    const char *v = getenv("ZEPHON_DEBUG");
    debug_wanted = v && v[0] && strcmp(v, "0") != 0;
}

static void print_log(zp_log_level lvl, const char *msg)
{
    static const char *names[] = {"error", "warning", "info", "debug"};
    fprintf(stderr, "zephon: %s: %s\n", names[lvl], msg);
}

static void log_to_stderr(void *user, zp_log_level lvl, const char *msg)
{
    int quiet = *(int *)user;
    pthread_once(&debug_once, debug_read_env);
    if ((lvl == ZP_LOG_DEBUG && !debug_wanted) || (lvl == ZP_LOG_INFO && quiet))
        return;
    print_log(lvl, msg);
}

void cli_run_log_debug(void *user, zp_log_level lvl, const char *msg)
{
    (void)user;
    pthread_once(&debug_once, debug_read_env);
    if (debug_wanted)
        print_log(lvl, msg);
}

static size_t batch_bytes(const zp_batch *b)
{
    if (b->mode == ZP_PACK_RECORDS)
        return b->offsets[b->rows];
    return b->rows * b->cols * sizeof(int32_t);
}

/* ------------------------------------------------------------ mixture parts */

int cli_run_set_parts(cli_run_opts *o)
{
    free(o->mix);
    o->mix = NULL;
    o->ws.parts = NULL;
    o->ws.n_parts = 0;
    o->ws.phases = NULL;
    o->ws.n_phases = 0;
    for (size_t k = 0; k < o->n_parts; k++)
        if (o->parts[k].shards == 0) {
            fprintf(stderr, "zephon run: mixture part '%s' has no shards\n", o->parts[k].name);
            return -1;
        }
    if (o->n_parts < 2)
        return 0; /* one part: the plain dataset (its weight does not matter) */
    if (!(o->mix = calloc(o->n_parts, sizeof *o->mix))) {
        fprintf(stderr, "zephon run: out of memory\n");
        return -1;
    }
    for (size_t k = 0; k < o->n_parts; k++) {
        o->mix[k].name = o->parts[k].name;
        o->mix[k].shards = o->parts[k].shards;
        o->mix[k].weight = o->parts[k].weight;
    }
    o->ws.parts = o->mix;
    o->ws.n_parts = o->n_parts;
    o->ws.phases = o->phases;
    o->ws.n_phases = o->n_phases;
    return 0;
}

/* The part spec i belongs to (o->n_parts when none: positional specs). */
static size_t part_of_spec(const cli_run_opts *o, size_t i)
{
    for (size_t k = 0; k < o->n_parts; k++)
        if (i >= o->parts[k].first && i < o->parts[k].first + o->parts[k].n)
            return k;
    return o->n_parts;
}

int cli_run_add_data(cli_run_opts *o, zp_dataset *ds)
{
    for (size_t k = 0; k < o->n_parts; k++)
        o->parts[k].shards = 0;
    for (size_t i = 0; i < o->n_specs; i++) {
        size_t before = zp_dataset_num_shards(ds);
        zp_status st = zp_dataset_add(ds, o->specs[i]);
        if (st != ZP_OK) {
            const char *at = strrchr(o->specs[i], '@');
            fprintf(stderr, "zephon run: %s: %s%s\n", zp_status_str(st), zp_dataset_errmsg(ds),
                    at && o->n_parts && !o->mixture_file
                        ? " (the text after the last '@' of the --data value is not a number, so "
                          "it was read as part of the spec, not as a weight)"
                        : "");
            return -1;
        }
        size_t k = part_of_spec(o, i);
        if (k < o->n_parts)
            o->parts[k].shards += zp_dataset_num_shards(ds) - before;
    }
    return cli_run_set_parts(o);
}

/* ------------------------------------------------------------ states */

/* Read a whole file: *out malloc'd (NUL-terminated), *len. 0, or -1 with
 * errno. */
static int read_whole(const char *path, char **out, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        int e = errno ? errno : EINVAL;
        if (S_ISDIR(sb.st_mode))
            e = EISDIR;
        close(fd);
        errno = e;
        return -1;
    }
    char *buf = malloc((size_t)sb.st_size + 1);
    long n = buf ? zpi_read_full(fd, buf, (size_t)sb.st_size) : -1;
    int e = buf ? errno : ENOMEM;
    close(fd);
    if (n < 0) {
        free(buf);
        errno = e;
        return -1;
    }
    buf[n] = '\0';
    *out = buf;
    *len = (size_t)n;
    return 0;
}

/* 1 when a spec of o is a URL with secrets (credentials, a query string):
 * its part's default name is not the spec as given. */
static int specs_have_secrets(const cli_run_opts *o)
{
    for (size_t i = 0; i < o->n_specs; i++) {
        char red[4096];
        zp_dataset_spec_redact(o->specs[i], red, sizeof red);
        if (strcmp(red, o->specs[i]) != 0)
            return 1;
    }
    return 0;
}

/* --resume and --skip-batches on a built pipeline, before the first batch.
 * 0, or -1 with the message in why (why_cap bytes). */
static int restore_and_skip(const cli_run_opts *o, zp_pipeline *p, char *why, size_t why_cap)
{
    if (o->resume) {
        char *json = NULL;
        size_t len = 0;
        if (read_whole(o->resume, &json, &len) != 0) {
            zpi_fmt(why, why_cap, "--resume %s: cannot read the state: %s", o->resume,
                    strerror(errno));
            return -1;
        }
        zp_status st = zp_pipeline_state_restore(p, json, len);
        free(json);
        if (st != ZP_OK) {
            /* the library's message says what (MISMATCH's generic words,
             * "ranks disagree", would mislead here) */
            zpi_fmt(why, why_cap, "--resume %s: cannot continue from this state: %s%s", o->resume,
                    zp_pipeline_errmsg(p),
                    specs_have_secrets(o)
                        ? " (a part given by a URL with credentials or a query string is named "
                          "by the URL without them; a state saved before this was so named it by the "
                          "URL as given: to continue such a state, give each part the state's "
                          "name in a --mixture file)"
                        : "");
            return -1;
        }
    }
    for (size_t i = 0; i < o->n_skips; i++) {
        zp_status st = zp_pipeline_skip_batches(p, o->skips[i].first, o->skips[i].last);
        if (st != ZP_OK) {
            zpi_fmt(why, why_cap, "--skip-batches %llu-%llu: %s: %s",
                    (unsigned long long)o->skips[i].first, (unsigned long long)o->skips[i].last,
                    zp_status_str(st), zp_pipeline_errmsg(p));
            return -1;
        }
    }
    return 0;
}

/* Save the state to --save-state (the MPI front end's hook under MPI).
 * 0, -1 (message printed), 1 (not saved, said). */
static int save_state(const cli_run_opts *o, zp_pipeline *p, int at_end)
{
    const cli_run_hooks *hk = o->hooks;
    if (hk && hk->save)
        return hk->save(hk->user, p, o->save_state, at_end);
    char *json = NULL;
    size_t len = 0;
    zp_status st = zp_pipeline_state_save(p, &json, &len);
    if (st != ZP_OK) {
        fprintf(stderr, "zephon run: --save-state %s: the state could not be made: %s: %s\n",
                o->save_state, zp_status_str(st), zp_pipeline_errmsg(p));
        return -1;
    }
    int rc = cli_run_write_state(o->save_state, json, len);
    free(json);
    return rc;
}

/* The realized proportions of a mixture of 2+ parts into r. */
static void part_counts(const cli_run_opts *o, zp_pipeline *p, zp_worksource *ws, cli_run_result *r)
{
    size_t n = zp_worksource_num_parts(ws);
    if (n < 2 || !(r->parts = calloc(n, sizeof *r->parts)))
        return;
    r->n_parts = n;
    for (size_t k = 0; k < n; k++) {
        cli_run_part_count *c = &r->parts[k];
        c->name = k < o->n_parts ? o->parts[k].name : "?";
        c->weight = zp_worksource_part_weight(ws, k);
        if (zp_pipeline_part_counts(p, k, &c->samples, &c->tokens) != ZP_OK)
            c->samples = c->tokens = 0;
    }
    size_t m = zp_worksource_num_phases(ws);
    if (m < 2)
        return;
    r->phase_start = calloc(m, sizeof *r->phase_start);
    r->phase_weight = calloc(m * n, sizeof *r->phase_weight);
    r->phase_samples = calloc(m * n, sizeof *r->phase_samples);
    if (!r->phase_start || !r->phase_weight || !r->phase_samples)
        return;
    r->n_phases = m;
    for (size_t k = 0; k < m; k++) {
        r->phase_start[k] = zp_worksource_phase_start(ws, k);
        for (size_t i = 0; i < n; i++) {
            r->phase_weight[k * n + i] = zp_worksource_phase_weight(ws, k, i);
            if (zp_pipeline_phase_counts(p, k, i, &r->phase_samples[k * n + i]) != ZP_OK)
                r->phase_samples[k * n + i] = 0;
        }
    }
}

void cli_run_result_free(cli_run_result *r)
{
    free(r->parts);
    r->parts = NULL;
    r->n_parts = 0;
    free(r->phase_start);
    free(r->phase_weight);
    free(r->phase_samples);
    r->phase_start = NULL;
    r->phase_weight = NULL;
    r->phase_samples = NULL;
    r->n_phases = 0;
    free(r->cov);
    r->cov = NULL;
    r->n_cov = 0;
}

/* The coverage of the epochs this rank delivered (the last 64), judged
 * for those its stream went past: against the epoch's stream in a world of
 * one, else against this rank's plan (docs/report.md). */
static void run_coverage(zp_pipeline *p, const cli_run_opts *o, cli_run_result *r)
{
    size_t n = zp_pipeline_coverage_epochs(p, NULL, 0);
    uint32_t *ep = n ? malloc(n * sizeof *ep) : NULL;
    size_t first = n > 64 ? n - 64 : 0;
    r->cov = n ? calloc(n - first, sizeof *r->cov) : NULL;
    if (n && (!ep || !r->cov)) {
        r->cov_failed = 1;
        fprintf(stderr, "zephon run: coverage: out of memory\n");
        free(ep);
        return;
    }
    zp_pipeline_coverage_epochs(p, ep, n);
    for (size_t i = first; i < n; i++) {
        cli_run_cov *c = &r->cov[r->n_cov];
        zp_epoch_coverage ec;
        zp_status st = zp_pipeline_coverage(p, ep[i], 0, &ec);
        c->epoch = ep[i];
        c->judged = st == ZP_OK && ec.finished;
        c->whole = o->ws.world_size <= 1;
        if (st == ZP_OK && c->judged) {
            if (c->whole)
                st = zp_pipeline_stream_coverage(p, ep[i], 0, 1, &c->expected);
            else if ((st = zp_pipeline_coverage(p, ep[i], 1, &ec)) == ZP_OK)
                c->expected = ec.expected;
        }
        if (st != ZP_OK) {
            r->cov_failed = 1;
            fprintf(stderr, "zephon run: coverage of epoch %u: %s\n", ep[i],
                    zp_pipeline_errmsg(p));
            break;
        }
        c->delivered = ec.delivered;
        c->padded = ec.padded;
        c->ok = c->judged && zp_coverage_equal(&c->delivered, &c->expected);
        r->n_cov++;
    }
    free(ep);
}

/* ------------------------------------------------------------ the run */

int cli_run_check_epochs(const cli_run_opts *o, uint64_t samples_per_rank)
{
    uint64_t epochs = o->pc.epochs, total;
    /* the pipeline's end epoch (start + epochs) is a 32-bit number, and
     * UINT32_MAX stands for "without end" */
    if (epochs && o->start_epoch + epochs > UINT32_MAX - 1 + (uint64_t)1) {
        fprintf(stderr,
                "zephon run: --start-epoch %llu with --epochs %llu: epoch numbers would pass %u\n",
                (unsigned long long)o->start_epoch, (unsigned long long)epochs, UINT32_MAX - 1);
        return -1;
    }
    if (epochs && __builtin_mul_overflow(epochs, samples_per_rank, &total)) {
        fprintf(stderr,
                "zephon run: --epochs %llu x %llu samples per rank overflows a 64-bit count\n",
                (unsigned long long)epochs, (unsigned long long)samples_per_rank);
        return -1;
    }
    return 0;
}

/* The stop reason of this rank before a step: a signal, or an output
 * that failed. */
static int local_stop(int out_failed)
{
    int sig = cli_run_signal();
    return sig ? sig : out_failed ? CLI_RUN_STOP_OUTPUT : 0;
}

/* One run of cli_run_pipeline: its inputs, its handles and outputs, and
 * what the steps below share. */
typedef struct run_ctx {
    cli_run_opts *o;
    zp_dataset *ds;
    cli_run_result *res;
    const cli_run_hooks *hk;
    int *quiet_flag; /* the log's user pointer */
    zp_worksource *ws;
    zp_pipeline *p;
    strip_ctx sc; /* the strip transform's (lives as long as the pipeline) */
    cli_out ids, dig, smp, rec;
    int started, out_failed, save_failed;
    uint64_t saved_at; /* batches delivered at the last save */
    char why[1024];
    /* the delivery loop's clocks */
    int tty;
    double t0, last_progress, last_observe;
} run_ctx;

/* A step of the run returns RUN_GO to go on, or the exit status the run
 * ends with (after run_close). */
#define RUN_GO (-1)

/* The pipeline failed with st: its message (the hooks' once started), and
 * the last state saved. Returns 1. */
static int run_pipeline_error(run_ctx *x, zp_status st)
{
    cli_run_opts *o = x->o;
    const cli_run_hooks *hk = x->hk;
    fprintf(stderr, "zephon run: %s: %s\n", zp_status_str(st),
            hk && x->started ? hk->errmsg(hk->user, x->p) : zp_pipeline_errmsg(x->p));
    if (o->save_state && x->saved_at != UINT64_MAX)
        fprintf(stderr, "zephon run: %s keeps the state after batch %llu (the state of a failed "
                        "stream is not saved)\n",
                o->save_state, (unsigned long long)x->saved_at);
    return 1;
}

/* This rank's worksource, at --start-epoch. */
static int run_make_worksource(run_ctx *x)
{
    cli_run_opts *o = x->o;
    cli_run_result *res = x->res;
    zp_status st = zp_worksource_create(x->ds, &o->ws, &x->ws);
    if (st == ZP_ERR_STATE && !x->hk && cli_run_signal()) {
        /* a signal ended the downloads of shards being counted: a stop */
        res->stop = cli_run_signal();
        fprintf(stderr, "zephon run: stopped by %s before the first batch\n",
                cli_run_signal_name(res->stop));
        return 0;
    }
    if (st != ZP_OK) {
        const char *msg = x->ws ? zp_worksource_errmsg(x->ws) : "";
        fprintf(stderr, "zephon run: worksource: %s%s%s\n", zp_status_str(st), *msg ? ": " : "",
                msg);
        return 1;
    }
    if (cli_run_check_epochs(o, zp_worksource_samples_per_rank(x->ws)) != 0)
        return 2;
    if (o->start_epoch) {
        zp_worksource_state s0 = {o->ws.seed, (uint32_t)o->start_epoch, 0};
        zp_worksource_set_state(x->ws, &s0);
    }
    return RUN_GO;
}

/* The pipeline and its operators: strip, tokenize, pack, prefetch,
 * observability. */
static int run_make_pipeline(run_ctx *x)
{
    cli_run_opts *o = x->o;
    o->pc.log = log_to_stderr;
    o->pc.log_user = x->quiet_flag;
    if (o->tok_id[0] && o->pack)
        o->pc.pack = o->pack;
    zp_status st = zp_pipeline_create(x->ws, &o->pc, &x->p);
    if (st != ZP_OK) {
        const char *msg = x->p ? zp_pipeline_errmsg(x->p) : "";
        fprintf(stderr, "zephon run: bad settings: %s%s%s\n", zp_status_str(st), *msg ? ": " : "",
                msg);
        zp_pipeline_destroy(x->p);
        x->p = NULL;
        return 1;
    }
    zp_pipeline *p = x->p;
    /* ZEPHON_TEST_DROP_SAMPLE=R (tests of the coverage certificate): rank
     * R drops the first sample of its first epoch, as a map callback that
     * filters a record would */
    const char *drop = getenv("ZEPHON_TEST_DROP_SAMPLE");
    if (drop && *drop && (uint32_t)atoi(drop) == o->ws.rank &&
        (st = zp_pipeline_map_transform(p, test_drop_first, &o->start_epoch, 1, "test_drop")) !=
            ZP_OK)
        return run_pipeline_error(x, st);
    x->sc = (strip_ctx){o->field, o->tok_id[0] == '\0'};
    if (o->map_strip && (st = zp_pipeline_map_transform(p, map_strip, &x->sc, o->map_parallelism, "strip")) != ZP_OK)
        return run_pipeline_error(x, st);
    zp_tokenizer_config tc;
    zp_tokenizer_config_init(&tc);
    tc.eot = (int32_t)o->tok_eot;
    tc.bos = (int32_t)o->tok_bos;
    if (o->tok_id[0] &&
        (st = zp_pipeline_tokenize_config(p, o->tok_id, &tc, o->field, o->tok_parallelism)) != ZP_OK)
        return run_pipeline_error(x, st);
    if (o->tok_id[0] && o->pack == ZP_PACK_BESTFIT)
        st = zp_pipeline_pack_bestfit(p, o->pc.seq_len,
                                      o->pack_window ? o->pack_window : ZP_PACK_WINDOW_DEFAULT);
    else if (o->tok_id[0] && o->pack)
        st = zp_pipeline_pack(p, o->pack, o->pc.seq_len);
    if (st != ZP_OK)
        return run_pipeline_error(x, st);
    if (o->doc_masking &&
        (st = zp_pipeline_doc_masking(p, ZP_OUT_POSITION_IDS | ZP_OUT_CU_SEQLENS |
                                             ZP_OUT_DOC_COUNTS,
                                      o->doc_masking == 2 ? ZP_POSITIONS_CONTINUE
                                                          : ZP_POSITIONS_RESTART)) != ZP_OK)
        return run_pipeline_error(x, st);
    if (o->balance && (st = zp_pipeline_balance(p, o->balance)) != ZP_OK)
        return run_pipeline_error(x, st);
    if (o->prefetch_set &&
        (st = zp_pipeline_prefetch(p, o->prefetch_buffer, o->prefetch_parallelism)) != ZP_OK)
        return run_pipeline_error(x, st);
    int observing = o->observe >= 0 || o->metrics_out || o->report;
    if (observing && (st = zp_pipeline_enable_observability(p)) != ZP_OK)
        return run_pipeline_error(x, st);
    x->last_observe = zpi_now();
    return RUN_GO;
}

/* The files of --emit-ids, --emit-samples and --emit-digest. */
static int run_open_outputs(run_ctx *x)
{
    const cli_run_opts *o = x->o;
    char path[PATH_MAX];
    if (o->emit_ids) {
        if (zpi_mkdir_p(o->emit_ids, 0777) != 0) {
            fprintf(stderr, "zephon run: cannot create folder '%s': %s\n", o->emit_ids,
                    strerror(errno));
            return 1;
        }
        zpi_fmt(path, sizeof path, "%s/rank-%u.ids", o->emit_ids, o->ws.rank);
        if (cli_out_open(&x->ids, path) != 0)
            return 1;
    }
    if (o->emit_samples) {
        if (zpi_mkdir_p(o->emit_samples, 0777) != 0) {
            fprintf(stderr, "zephon run: cannot create folder '%s': %s\n", o->emit_samples,
                    strerror(errno));
            return 1;
        }
        zpi_fmt(path, sizeof path, "%s/rank-%u.samples", o->emit_samples, o->ws.rank);
        if (cli_out_open(&x->smp, path) != 0)
            return 1;
    }
    if (o->emit_records) {
        if (o->tok_id[0]) {
            fprintf(stderr, "zephon run: --emit-records writes records: it needs record mode "
                            "(no --tokenize)\n");
            return 2;
        }
        if (zpi_mkdir_p(o->emit_records, 0777) != 0) {
            fprintf(stderr, "zephon run: cannot create folder '%s': %s\n", o->emit_records,
                    strerror(errno));
            return 1;
        }
        zpi_fmt(path, sizeof path, "%s/rank-%u.jsonl", o->emit_records, o->ws.rank);
        if (cli_out_open(&x->rec, path) != 0)
            return 1;
    }
    if (o->emit_digest) {
        if (o->ws.world_size > 1)
            zpi_fmt(path, sizeof path, "%s.rank-%u", o->emit_digest, o->ws.rank);
        else
            zpi_fmt(path, sizeof path, "%s", o->emit_digest);
        if (cli_out_open(&x->dig, path) != 0)
            return 1;
    }
    return RUN_GO;
}

/* A restored state or skipped batches, then the hooks' start. */
static int run_start(run_ctx *x)
{
    const cli_run_hooks *hk = x->hk;
    if (restore_and_skip(x->o, x->p, x->why, sizeof x->why) != 0) {
        fprintf(stderr, "zephon run: %s\n", x->why);
        return 1;
    }
    if (hk) {
        x->started = 1;
        if (hk->start(hk->user, x->p, NULL) != 0)
            return 1;
    }
    return RUN_GO;
}

/* A batch's lines in the --emit-* files: written whole, or the run stops
 * at the first failing write. */
static void run_emit(run_ctx *x, const zp_batch *b)
{
    const zp_dataset *ds = x->ds;
    cli_out *ids = &x->ids, *smp = &x->smp, *dig = &x->dig, *rec = &x->rec;
    if (ids->f)
        for (size_t i = 0; i < b->n_samples && !ids->failed; i++)
            cli_out_printf(ids, "%s:%llu\n", zp_dataset_shard_name(ds, b->samples[i].shard),
                          (unsigned long long)b->samples[i].record);
    if (smp->f)
        for (size_t i = 0; i < b->n_samples && !smp->failed; i++) {
            const zp_sample *s = &b->samples[i];
            cli_out_printf(smp, "%llu %u %u %llu %d %s:%llu\n", (unsigned long long)b->index,
                          s->epoch, s->part, (unsigned long long)s->pass, s->padded,
                          zp_dataset_shard_name(ds, s->shard), (unsigned long long)s->record);
        }
    if (rec->f && b->data && b->offsets)
        for (size_t i = 0; i < b->rows && !rec->failed; i++) {
            const char *d = b->data + b->offsets[i];
            size_t n = (size_t)(b->offsets[i + 1] - b->offsets[i]);
            while (n && (d[n - 1] == '\n' || d[n - 1] == '\0'))
                n--;
            cli_out_printf(rec, "%.*s\n", (int)n, d);
        }
    if (dig->f)
        cli_out_printf(dig, "%llu %u %016llx\n", (unsigned long long)b->index, b->epoch,
                      (unsigned long long)zp_batch_digest(b));
}

/* After a batch: --step-time, the hooks' step, the periodic state, the
 * periodic snapshots, the outputs' failures, the progress line. */
static void run_after_step(run_ctx *x)
{
    cli_run_opts *o = x->o;
    cli_run_result *res = x->res;
    zp_pipeline *p = x->p;
    if (o->step_time > 0)
        sleep_interruptible(o->step_time);
    if (x->hk)
        x->hk->step(x->hk->user, p, res->batches);
    if (o->save_state && o->save_every && res->batches % o->save_every == 0 && !x->save_failed) {
        /* a state that cannot be written stops the run (as an output) */
        if (save_state(o, p, 0) < 0)
            x->save_failed = x->out_failed = 1;
        else
            x->saved_at = res->batches;
    }
    if (o->observe > 0 && zpi_now() - x->last_observe >= o->observe) {
        x->last_observe = zpi_now();
        cli_run_print_observe(o, p, stdout);
        if (cli_flush_stdout("zephon run") != 0)
            x->out_failed = 1;
    }
    x->out_failed |= x->ids.failed | x->dig.failed | x->smp.failed | x->rec.failed;
    if (x->tty) {
        double t = zpi_now();
        if (t - x->last_progress >= 1.0) {
            x->last_progress = t;
            zp_pipeline_counts c;
            zp_pipeline_get_counts(p, &c);
            fprintf(stderr, "\r%llu batches, %llu samples, %.0f samples/s   ",
                    (unsigned long long)res->batches, (unsigned long long)c.samples,
                    (double)c.samples / (t - x->t0));
        }
    }
}

/* Batches until --max-batches, the end of the stream or a stop. */
static int run_loop(run_ctx *x)
{
    cli_run_result *res = x->res;
    const cli_run_hooks *hk = x->hk;
    zp_pipeline *p = x->p;
    x->tty = !x->o->quiet && isatty(STDERR_FILENO);
    x->t0 = zpi_now();
    x->last_progress = x->t0;
    double t_first = 0;
    const zp_batch *b;
    while (res->batches < x->o->max_batches &&
           !(x->o->max_seconds > 0 && zpi_now() - x->t0 >= x->o->max_seconds)) {
        int stop = local_stop(x->out_failed);
        if (hk)
            stop = hk->stop(hk->user, stop);
        if (stop) {
            res->stop = stop;
            break;
        }
        zp_status st = hk ? hk->next(hk->user, p, &b) : zp_pipeline_next(p, &b);
        if (st == ZP_END) {
            /* the ranks' stop vote may have ended the stream: its reason */
            if (hk && (stop = hk->stop(hk->user, stop)) != 0)
                res->stop = stop;
            break;
        }
        if (st == ZP_ERR_STATE && cli_run_signal()) {
            /* a signal ended the downloads the pipeline waited on: a stop
             * (under MPI every rank got this status at the same step) */
            res->stop = cli_run_signal();
            break;
        }
        if (st != ZP_OK)
            return run_pipeline_error(x, st);
        if (res->batches == 0)
            t_first = zpi_now() - x->t0;
        res->batches++;
        res->bytes += batch_bytes(b);
        if (b->doc_counts) {
            for (size_t i = 0; i < b->rows_filled; i++)
                res->mask_docs += (uint64_t)b->doc_counts[i];
            res->mask_rows += b->rows_filled;
            res->mask_seqs += b->n_cu_seqlens - 1;
            if (b->max_seqlen > res->mask_max_seqlen)
                res->mask_max_seqlen = b->max_seqlen;
        }
        run_emit(x, b);
        run_after_step(x);
    }
    res->seconds = zpi_now() - x->t0;
    res->first_batch_seconds = t_first;
    return RUN_GO;
}

/* The process's peak resident set (VmHWM of /proc/self/status), bytes; 0
 * when it cannot be read. */
static uint64_t peak_rss(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

/* After the last batch: why the run stopped, the counts, the last
 * snapshots, the final state, the metrics document. */
static int run_finish(run_ctx *x)
{
    cli_run_opts *o = x->o;
    cli_run_result *res = x->res;
    zp_pipeline *p = x->p;
    if (x->tty)
        fprintf(stderr, "\r%*s\r", 60, "");
    if (res->stop && res->stop != CLI_RUN_STOP_OUTPUT)
        fprintf(stderr, "zephon run: stopped by %s after %llu batches; outputs are complete up to "
                        "that batch and marked partial\n",
                cli_run_signal_name(res->stop), (unsigned long long)res->batches);
    else if (res->stop)
        fprintf(stderr, "zephon run: stopped after %llu batches: an output could not be written\n",
                (unsigned long long)res->batches);
    zp_pipeline_get_counts(p, &res->counts);
    part_counts(o, p, x->ws, res);
    if (!x->hk && !o->no_coverage)
        run_coverage(p, o, res);
    if (o->observe >= 0)
        cli_run_print_observe(o, p, stdout);
    int rc = 0;
    /* the state after the last delivered batch: at the end, after a stop
     * by a signal or by --max-batches (not after an error: the periodic
     * state is kept then) */
    if (o->save_state && !x->save_failed && x->saved_at != res->batches) {
        int sv = save_state(o, p, 1);
        if (sv < 0)
            rc = 1;
        else if (sv == 0 && !o->quiet && !x->hk)
            fprintf(stderr, "zephon run: state after batch %llu written to %s\n",
                    (unsigned long long)res->batches, o->save_state);
    }
    if (o->metrics_out) {
        /* one document per rank, named as --emit-digest's files are */
        char path[PATH_MAX];
        if (o->ws.world_size > 1)
            zpi_fmt(path, sizeof path, "%s.rank-%u", o->metrics_out, o->ws.rank);
        else
            zpi_fmt(path, sizeof path, "%s", o->metrics_out);
        if (cli_run_write_metrics(p, path, res->stop) != 0)
            rc = 1;
    }
    res->padded_per_epoch = zp_worksource_padded(x->ws);
    res->dropped_per_epoch = zp_worksource_dropped(x->ws);
    if (o->pc.memory_budget && zp_pipeline_memory_plan(p, &res->mem) != ZP_OK)
        memset(&res->mem, 0, sizeof res->mem);
    res->peak_rss = peak_rss();
    if (o->report && rc == 0)
        o->report(o->report_user, p, res);
    return rc;
}

/* Every file closed, whichever failed; the exit status (a stop's, the
 * hooks'); the handles destroyed. */
static int run_close(run_ctx *x, int rc)
{
    cli_run_result *res = x->res;
    const cli_run_hooks *hk = x->hk;
    if (cli_out_close(&x->ids) + cli_out_close(&x->dig) + cli_out_close(&x->smp) +
        cli_out_close(&x->rec) != 0) /* each 0 or -1 */
        rc = 1;
    if (res->stop == CLI_RUN_STOP_OUTPUT)
        rc = 1;
    else if (res->stop && rc == 0)
        rc = 128 + res->stop;
    if (hk) {
        if (!x->started)
            hk->start(hk->user, NULL, x->why[0] ? x->why : NULL);
        rc = hk->finish(hk->user, x->started ? x->p : NULL, rc);
    }
    zp_pipeline_destroy(x->p);
    zp_worksource_destroy(x->ws);
    return rc;
}

int cli_run_pipeline(cli_run_opts *o, zp_dataset *ds, cli_run_result *res)
{
    static int quiet_flag;
    run_ctx x = {.o = o, .ds = ds, .res = res, .hk = o->hooks, .quiet_flag = &quiet_flag,
                 .saved_at = UINT64_MAX};
    memset(res, 0, sizeof *res);
    quiet_flag = o->quiet;
    int rc = run_make_worksource(&x);
    if (rc == RUN_GO)
        rc = run_make_pipeline(&x);
    if (rc == RUN_GO)
        rc = run_open_outputs(&x);
    if (rc == RUN_GO)
        rc = run_start(&x);
    if (rc == RUN_GO)
        rc = run_loop(&x);
    if (rc == RUN_GO)
        rc = run_finish(&x);
    return run_close(&x, rc);
}

/* The index store folder of `zephon run`: $XDG_CACHE_HOME/zephon/index
 * (when absolute, as the XDG spec asks), else $HOME/.cache/zephon/index,
 * created like mkdir -p (new folders 0700). 0, or -1 with errno (ENOENT
 * when neither variable is usable). */
int cli_run_index_store_dir(char *buf, size_t cap)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    buf[0] = '\0';
    if (xdg && xdg[0] == '/')
        n = snprintf(buf, cap, "%s/zephon/index", xdg);
    else if (home && *home)
        n = snprintf(buf, cap, "%s/.cache/zephon/index", home);
    else {
        errno = ENOENT;
        return -1;
    }
    if (n < 0 || (size_t)n >= cap) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return zpi_mkdir_p(buf, 0700);
}

static int run_main(cli_run_opts *o)
{
    if (cli_run_rank_from_env(o) != 0)
        return 2;
    if (o->ws.rank >= o->ws.world_size) {
        fprintf(stderr, "zephon run: rank %u is not below world size %u\n", o->ws.rank,
                o->ws.world_size);
        return 2;
    }
    zp_dataset_config dcfg;
    zp_dataset_config_init(&dcfg);
    dcfg.storage = o->storage;
    dcfg.segment_bytes = o->segment_bytes;
    /* A signal ends the downloads in flight at once (docs/storage.md,
     * "Stopping"): the run stops within about 0.1 s even during a stalled
     * download, and the state after the last delivered batch can still be
     * written. */
    dcfg.storage.stop_requested = cli_run_stop_requested;
    char cache_dir[PATH_MAX];
    if (!o->no_index_store) {
        if (cli_run_index_store_dir(cache_dir, sizeof cache_dir) == 0)
            dcfg.index_store_dir = cache_dir;
        else if (!o->quiet)
            fprintf(stderr, "zephon run: warning: index store off: %s%s%s: %s\n",
                    cache_dir[0] ? "cannot create '" : "no $XDG_CACHE_HOME or $HOME",
                    cache_dir, cache_dir[0] ? "'" : "", strerror(errno));
    }
    static int quiet_flag;
    quiet_flag = o->quiet;
    dcfg.log = log_to_stderr;
    dcfg.log_user = &quiet_flag;
    zp_dataset *ds = NULL;
    zp_status st = zp_dataset_create(&dcfg, &ds);
    if (st != ZP_OK) {
        const char *msg = ds ? zp_dataset_errmsg(ds) : "";
        fprintf(stderr, "zephon run: %s%s%s\n", zp_status_str(st), *msg ? ": " : "", msg);
        zp_dataset_destroy(ds);
        return 1;
    }
    if (cli_run_add_data(o, ds) != 0) {
        zp_dataset_destroy(ds);
        return 1;
    }
    cli_run_signals_install();
    cli_run_result r;
    int rc = cli_run_pipeline(o, ds, &r);
    if ((rc == 0 || r.stop) && !o->report) {
        cli_run_print(o, &r);
        if (cli_flush_stdout("zephon run") != 0 && rc == 0)
            rc = 1;
    }
    cli_run_result_free(&r);
    zp_dataset_destroy(ds);
    return rc;
}

int cli_run_main(cli_run_opts *o)
{
    int rc = run_main(o);
    cli_run_opts_free(o);
    return rc;
}
