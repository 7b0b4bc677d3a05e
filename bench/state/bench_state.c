/*
 * bench_state.c - checkpoint states at scale and the mixture's selection
 * cost per sample (issue 10, point 7), measured in one run.
 *
 *   bench_state [DIR]
 *
 * The dataset: 1,000 shard files of 3 real records each, and a manifest
 * whose entries say 1,000,000 samples per shard (10^9 samples in all, the
 * real "bytes"). Neither the worksource nor the state reads a record, so
 * the manifest's counts are all they see; no batch is ever made (a shard
 * load would find 3 records, not 10^6). Each shard is one mixture part
 * with a random weight (fixed seed). DIR (default: a new folder under
 * $TMPDIR or /tmp, removed at the end) holds the files.
 *
 * The pipeline is configured as a real run: rank 0 of 1, shuffled, 10^9
 * draws per epoch, tokenize gpt2 "text", concat packing, 8 rows of 2048.
 *
 * Figures (medians of 20; min and max in brackets):
 *  1. save of a pipeline that has delivered nothing: time, size;
 *  2. a state deep into the run: the saved JSON edited (jansson) to epoch
 *     3, position 5 * 10^8 (draw 3.5 * 10^9), the exact per-part draw
 *     counts of those draws (zp_worksource_draw_counts) and tokens near
 *     600 per document; restore on a fresh pipeline, then the first sample
 *     at the restored position (the mixture's seek to draw 3.5 * 10^9:
 *     restore itself does not seek, the first sample does), then save;
 *  3. a job of 64 ranks: 64 such rank states (world_size 64, each rank at
 *     epoch 3 near the middle of its 15,625,000 positions, with the exact
 *     draw counts of its own draws) merged with zp_state_merge(); the job
 *     state restored on 64 ranks (exact) and on 48 (elastic re-split),
 *     with the first sample and the save of the re-split rank;
 * 3b. a job of 1,024 ranks made the same way (per = ceil(N / 1,024); the
 *     part counts of the 64-rank job's rank r * 64 / 1,024, divided by 16),
 *     merged (median of 5): time, CPU time, and the peak resident size above the
 *     one before the merge (the freed heap trimmed, the peak reset through
 *     /proc/self/clear_refs), which counts the parsed states and the job
 *     state but not the rank texts, which are the caller's;
 *  4. the selection per sample: zp_worksource_sample() over 10^6
 *     consecutive positions (median of 5 runs) for the plain dataset (one
 *     part), 3 parts and 1,000 parts, from draw 0 and from draw
 *     3.5 * 10^9; and the bare quota schedule (zpi_mix_cursor_next) for 3
 *     and 1,000 parts. Ratios are to the plain dataset in the same run.
 *
 * $BENCH_STATE_DUMP=FOLDER writes the states there (fresh.json, deep.json,
 * job64.json, job1024.json, rank0of48.json, rank47of48.json).
 * $BENCH_STATE_ONLY=merge measures the merges (3 and 3b) only.
 *
 * Each figure is printed with what it checked (the restored position and
 * counts read back, the re-split's lengths): a figure of a restore that did
 * not restore is worth nothing.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <zephon.h>

#include "base/error.h"
#include "plan/mixture.h"

#define NSHARDS 1000
#define SHARD_SAMPLES 1000000ull
#define NDRAWS (NSHARDS * SHARD_SAMPLES) /* draws per epoch: 10^9 */
#define REPS 20
#define SEL_RUNS 5
#define SEL_SAMPLES 1000000ull
#define TOKENS_PER_DOC 600 /* EOT included: what the edited counts assume */
#define ROWS 8
#define SEQ_LEN 2048
#define SEED 20260
#define DEEP_EPOCH 3u
#define DEEP_POS 500000000ull
#define JOB_W 64u
#define JOB_W2 48u
#define JOB_BIG 1024u /* a job of 1,024 ranks: the merge alone */
#define BIG_REPS 5

static char g_dir[4096];
static char g_manifest[4200];
static zp_mix_part g_parts[NSHARDS];
static char g_names[NSHARDS][24];
static zp_dataset *g_ds;

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench_state: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median (sorts v), min and max of n values. */
typedef struct stat3 {
    double med, min, max;
} stat3;

static stat3 stats(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    stat3 s = {n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v[0], v[n - 1]};
    return s;
}

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ------------------------------------------------------------ dataset */

static void write_dataset(void)
{
    json_t *shards = json_array();
    for (int i = 0; i < NSHARDS; i++) {
        char fn[64], path[4300];
        snprintf(fn, sizeof fn, "shard-%04d.jsonl", i);
        snprintf(path, sizeof path, "%s/%s", g_dir, fn);
        FILE *f = fopen(path, "w");
        if (!f)
            die("%s: %s", path, strerror(errno));
        for (int r = 0; r < 3; r++)
            fprintf(f, "{\"text\": \"shard %d record %d: a few words of text\"}\n", i, r);
        if (fclose(f) != 0)
            die("%s: %s", path, strerror(errno));
        struct stat sb;
        if (stat(path, &sb) != 0)
            die("%s: %s", path, strerror(errno));
        json_t *o = json_object();
        json_object_set_new(o, "path", json_string(fn));
        json_object_set_new(o, "format", json_string("jsonl"));
        json_object_set_new(o, "bytes", json_integer((json_int_t)sb.st_size));
        json_object_set_new(o, "samples", json_integer((json_int_t)SHARD_SAMPLES));
        json_array_append_new(shards, o);
    }
    json_t *m = json_object();
    json_object_set_new(m, "format_version", json_integer(1));
    json_object_set_new(m, "shards", shards);
    snprintf(g_manifest, sizeof g_manifest, "%s/manifest.json", g_dir);
    if (json_dump_file(m, g_manifest, JSON_INDENT(1)) != 0)
        die("%s: cannot write", g_manifest);
    json_decref(m);

    uint64_t rng = SEED;
    for (int i = 0; i < NSHARDS; i++) {
        snprintf(g_names[i], sizeof g_names[i], "dataset-%04d", i);
        g_parts[i].name = g_names[i];
        g_parts[i].shards = 1;
        /* weights 1 .. 100 with 53 random bits: the worksource rounds them */
        g_parts[i].weight = 1.0 + 99.0 * (double)(splitmix(&rng) >> 11) / 9007199254740992.0;
    }
}

static void rmdir_all(void)
{
    for (int i = 0; i < NSHARDS; i++) {
        char path[4300];
        snprintf(path, sizeof path, "%s/shard-%04d.jsonl", g_dir, i);
        unlink(path);
    }
    unlink(g_manifest);
    rmdir(g_dir);
}

/* ------------------------------------------------------------ pipelines */

typedef enum mix_kind { MIX_PLAIN, MIX_3, MIX_1000 } mix_kind;

static zp_worksource *ws_open(mix_kind k, uint32_t rank, uint32_t world)
{
    static const zp_mix_part three[3] = {{"web", 500, 0.5}, {"code", 300, 0.3},
                                         {"books", 200, 0.2}};
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.seed = SEED;
    wc.rank = rank;
    wc.world_size = world;
    if (k == MIX_3) {
        wc.parts = three;
        wc.n_parts = 3;
    } else if (k == MIX_1000) {
        wc.parts = g_parts;
        wc.n_parts = NSHARDS;
    }
    wc.epoch_samples = NDRAWS;
    zp_worksource *ws = NULL;
    if (zp_worksource_create(g_ds, &wc, &ws) != ZP_OK)
        die("worksource: %s", zp_worksource_errmsg(ws));
    return ws;
}

static zp_pipeline *pipe_open(zp_worksource *ws)
{
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.epochs = 0;
    pc.microbatch_size = ROWS;
    pc.seq_len = SEQ_LEN;
    zp_pipeline *p = NULL;
    if (zp_pipeline_create(ws, &pc, &p) != ZP_OK)
        die("pipeline: %s", zp_pipeline_errmsg(p));
    if (zp_pipeline_tokenize(p, "gpt2", "text", 4) != ZP_OK ||
        zp_pipeline_pack(p, ZP_PACK_CONCAT, SEQ_LEN) != ZP_OK)
        die("pipeline: %s", zp_pipeline_errmsg(p));
    return p;
}

/* ------------------------------------------------------------ JSON edits */

static json_t *load(const char *s, size_t len)
{
    json_error_t je;
    json_t *j = json_loadb(s, len, 0, &je);
    if (!j)
        die("state: not JSON: %s", je.text);
    return j;
}

static char *dump(json_t *j, size_t *len)
{
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (!s)
        die("json_dumps failed");
    *len = strlen(s);
    return s;
}

static void set_u64(json_t *o, const char *key, uint64_t v)
{
    if (json_object_set_new(o, key, json_integer((json_int_t)v)) != 0)
        die("cannot set %s", key);
}

/* counts[i] += the draws of part i among draws [a, b). */
static void add_draws(zp_worksource *ws, uint64_t a, uint64_t b, uint64_t *counts)
{
    static uint64_t ca[NSHARDS], cb[NSHARDS];
    if (zp_worksource_draw_counts(ws, a, ca) != ZP_OK ||
        zp_worksource_draw_counts(ws, b, cb) != ZP_OK)
        die("draw counts: %s", zp_worksource_errmsg(ws));
    for (size_t i = 0; i < NSHARDS; i++)
        counts[i] += cb[i] - ca[i];
}

/* Rank object r of a state: epoch, position, its part counts (draw counts
 * and TOKENS_PER_DOC tokens each, a little jitter), counts, next batch. */
static void edit_rank(json_t *r, uint32_t rank, uint32_t epoch, uint64_t position,
                      const uint64_t *draws, uint64_t next_batch)
{
    set_u64(r, "rank", rank);
    set_u64(r, "epoch", epoch);
    set_u64(r, "position", position);
    set_u64(r, "token_offset", 137);
    json_object_set_new(r, "carry", json_true());
    set_u64(r, "next_batch", next_batch);
    json_t *ps = json_array(), *pt = json_array();
    uint64_t samples = 0, tokens = 0;
    for (size_t i = 0; i < NSHARDS; i++) {
        uint64_t t = draws[i] * TOKENS_PER_DOC + (draws[i] ? (i * 7919) % 600 : 0);
        json_array_append_new(ps, json_integer((json_int_t)draws[i]));
        json_array_append_new(pt, json_integer((json_int_t)t));
        samples += draws[i];
        tokens += t;
    }
    json_object_set_new(r, "part_samples", ps);
    json_object_set_new(r, "part_tokens", pt);
    json_t *c = json_object_get(r, "counts");
    if (!c)
        die("state: no counts");
    set_u64(c, "batches", next_batch);
    set_u64(c, "samples", samples);
    set_u64(c, "tokens", tokens);
}

/* $BENCH_STATE_DUMP (a folder): write the state as name there, to read. */
static void dump_state(const char *name, const char *json, size_t len)
{
    const char *d = getenv("BENCH_STATE_DUMP");
    if (!d || !*d)
        return;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", d, name);
    FILE *f = fopen(path, "w");
    if (!f || fwrite(json, 1, len, f) != len || fclose(f) != 0)
        die("%s: cannot write", path);
}

/* ------------------------------------------------------------ memory */

/* A field of /proc/self/status in kB ("VmHWM", "VmRSS"); -1 when absent. */
static long status_kb(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':')
            v = strtol(line + n + 1, NULL, 10);
    if (f)
        fclose(f);
    return v;
}

/* Starts a peak measurement: the freed heap given back (malloc_trim) and
 * the process's peak resident size reset to its current one (writing 5 to
 * /proc/self/clear_refs, Linux >= 4.0); the resident size now in kB. */
static long peak_start(void)
{
    malloc_trim(0);
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
    return status_kb("VmRSS");
}

/* The peak resident size since peak_start() above its resident size then,
 * in MB (-1 when /proc does not say). */
static double peak_mb(long rss0)
{
    long hwm = status_kb("VmHWM");
    return hwm < 0 || rss0 < 0 ? -1 : (double)(hwm - rss0) / 1024.0;
}

/* ------------------------------------------------------------ figures */

static void line(const char *what, stat3 s, const char *unit, const char *extra)
{
    printf("  %-52s %10.3f %-3s [%.3f .. %.3f]%s%s\n", what, s.med, unit, s.min, s.max,
           extra ? "  " : "", extra ? extra : "");
}

typedef struct restore_fig {
    stat3 open_ms, restore_ms, seek_ms, save_ms;
    size_t size;
    char *saved; /* the last save, caller frees */
} restore_fig;

/* REPS times: a fresh worksource (rank of world) and pipeline, restore
 * json, the first sample at (epoch, position), save. */
static restore_fig restore_runs(const char *json, size_t len, uint32_t rank, uint32_t world,
                                uint32_t epoch, uint64_t position)
{
    double o[REPS], r[REPS], k[REPS], s[REPS];
    restore_fig f = {0};
    for (int i = 0; i < REPS; i++) {
        double t0 = now();
        zp_worksource *ws = ws_open(MIX_1000, rank, world);
        zp_pipeline *p = pipe_open(ws);
        double t1 = now();
        if (zp_pipeline_state_restore(p, json, len) != ZP_OK)
            die("restore (rank %u of %u): %s", rank, world, zp_pipeline_errmsg(p));
        double t2 = now();
        zp_sample smp;
        if (zp_worksource_sample(ws, epoch, position, &smp) != ZP_OK)
            die("first sample: %s", zp_worksource_errmsg(ws));
        double t3 = now();
        char *out;
        size_t olen;
        if (zp_pipeline_state_save(p, &out, &olen) != ZP_OK)
            die("save after restore: %s", zp_pipeline_errmsg(p));
        double t4 = now();
        o[i] = (t1 - t0) * 1e3;
        r[i] = (t2 - t1) * 1e3;
        k[i] = (t3 - t2) * 1e3;
        s[i] = (t4 - t3) * 1e3;
        f.size = olen;
        free(f.saved);
        f.saved = out;
        zp_pipeline_destroy(p);
        zp_worksource_destroy(ws);
    }
    f.open_ms = stats(o, REPS);
    f.restore_ms = stats(r, REPS);
    f.seek_ms = stats(k, REPS);
    f.save_ms = stats(s, REPS);
    return f;
}

static void check_rank(const char *saved, uint32_t epoch, uint64_t position, const char *what)
{
    json_t *j = load(saved, strlen(saved));
    json_t *r = json_array_get(json_object_get(j, "ranks"), 0);
    json_int_t e = json_integer_value(json_object_get(r, "epoch"));
    json_int_t pos = json_integer_value(json_object_get(r, "position"));
    if ((uint64_t)e != epoch || (uint64_t)pos != position)
        die("%s: the state saved after the restore is at epoch %lld position %lld, not %u %llu",
            what, (long long)e, (long long)pos, epoch, (unsigned long long)position);
    json_decref(j);
}

/* Selection: ns per zp_worksource_sample() over SEL_SAMPLES consecutive
 * positions from (epoch, pos0), median of SEL_RUNS. */
static stat3 select_ns(zp_worksource *ws, uint32_t epoch, uint64_t pos0, uint64_t *sink)
{
    double v[SEL_RUNS];
    for (int r = 0; r < SEL_RUNS; r++) {
        zp_sample s;
        double t0 = now();
        for (uint64_t i = 0; i < SEL_SAMPLES; i++) {
            if (zp_worksource_sample(ws, epoch, pos0 + i, &s) != ZP_OK)
                die("sample: %s", zp_worksource_errmsg(ws));
            *sink += s.global_id;
        }
        v[r] = (now() - t0) * 1e9 / (double)SEL_SAMPLES;
    }
    return stats(v, SEL_RUNS);
}

/* The bare quota schedule: ns per zpi_mix_cursor_next(), from draw g0. */
static stat3 bare_ns(const zp_mix_part *parts, size_t n, uint64_t g0, uint64_t *sink)
{
    double w[NSHARDS];
    for (size_t i = 0; i < n; i++)
        w[i] = parts[i].weight;
    zpi_err err = {0};
    zpi_mix *m;
    zpi_mix_cursor *c;
    if (zpi_mix_create(w, NULL, n, &m, &err) != ZP_OK || zpi_mix_cursor_create(m, &c) != ZP_OK)
        die("mix: %s", zpi_err_msg(&err));
    double v[SEL_RUNS];
    for (int r = 0; r < SEL_RUNS; r++) {
        zpi_mix_cursor_seek(c, g0);
        double t0 = now();
        for (uint64_t i = 0; i < SEL_SAMPLES; i++) {
            uint32_t part;
            uint64_t d;
            zpi_mix_cursor_next(c, &part, &d);
            *sink += part + d;
        }
        v[r] = (now() - t0) * 1e9 / (double)SEL_SAMPLES;
    }
    zpi_mix_cursor_destroy(c);
    zpi_mix_destroy(m);
    return stats(v, SEL_RUNS);
}

/* The 64-rank job's per-part draw counts, rank by rank (make_job). */
static uint64_t g_job_draws[JOB_W][NSHARDS];

/* W rank states of a job at epoch DEEP_EPOCH (world_size W, each rank
 * near the middle of its per = ceil(N / W) positions): texts into json[]
 * (caller frees), positions into pos[], the positions the ranks have left
 * of the epoch added to *left. W == JOB_W: each rank with the exact draw
 * counts of its own draws up to there (kept in g_job_draws); a multiple
 * of JOB_W: rank r with those of 64-rank rank r * 64 / W divided by
 * W / 64 (numbers of the same sizes, without 8 draw-count walks per rank:
 * the merge reads them, it does not check them against the mixture). */
static void make_job(zp_worksource *ws, const char *fresh, size_t fresh_len, uint32_t W,
                     char **json, size_t *len, uint64_t *pos, uint64_t *left)
{
    static uint64_t draws[NSHARDS];
    const uint64_t per = (NDRAWS + W - 1) / W;
    for (uint32_t r = 0; r < W; r++) {
        const uint64_t a = r * per, b = (r + 1) * per < NDRAWS ? (r + 1) * per : NDRAWS;
        pos[r] = per / 2 + (r * 7919u) % 4096;
        memset(draws, 0, sizeof draws);
        if (W == JOB_W) {
            for (uint64_t e = 0; e < DEEP_EPOCH; e++)
                add_draws(ws, e * NDRAWS + a, e * NDRAWS + b, draws);
            add_draws(ws, DEEP_EPOCH * NDRAWS + a, DEEP_EPOCH * NDRAWS + a + pos[r], draws);
            memcpy(g_job_draws[r], draws, sizeof draws);
        } else {
            for (size_t i = 0; i < NSHARDS; i++)
                draws[i] = g_job_draws[(uint64_t)r * JOB_W / W][i] / (W / JOB_W);
        }
        json_t *rj = load(fresh, fresh_len);
        set_u64(rj, "world_size", W);
        const uint64_t delivered = DEEP_EPOCH * NDRAWS + (uint64_t)W * per / 2;
        edit_rank(json_array_get(json_object_get(rj, "ranks"), 0), r, DEEP_EPOCH, pos[r], draws,
                  delivered * TOKENS_PER_DOC / ((uint64_t)W * ROWS * SEQ_LEN));
        json[r] = dump(rj, &len[r]);
        json_decref(rj);
        *left += per - pos[r];
    }
}

/* reps merges of the W texts: the time of each (ms) into v, its CPU time
 * (the process's, ms; the machine's other load does not count) into cv, the peak
 * resident growth of the last into *peak (MB); the job state of the last
 * (caller frees). */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *merge_runs(char **json, const size_t *len, uint32_t W, int reps, double *v,
                        double *cv, double *peak, size_t *job_len)
{
    char *job = NULL;
    for (int i = 0; i < reps; i++) {
        free(job);
        job = NULL;
        char err[512];
        long rss0 = i == reps - 1 ? peak_start() : 0;
        double a = now(), ca = cpu_now();
        if (zp_state_merge((const char *const *)json, len, W, &job, job_len, err, sizeof err) !=
            ZP_OK)
            die("merge of %u: %s", W, err);
        v[i] = (now() - a) * 1e3;
        cv[i] = (cpu_now() - ca) * 1e3;
        if (i == reps - 1)
            *peak = peak_mb(rss0);
    }
    return job;
}

int main(int argc, char **argv)
{
    int own_dir = argc < 2;
    if (own_dir) {
        const char *t = getenv("TMPDIR");
        snprintf(g_dir, sizeof g_dir, "%s/bench_state.XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(g_dir))
            die("mkdtemp %s: %s", g_dir, strerror(errno));
    } else {
        snprintf(g_dir, sizeof g_dir, "%s", argv[1]);
        if (mkdir(g_dir, 0777) != 0 && errno != EEXIST)
            die("%s: %s", g_dir, strerror(errno));
    }
    write_dataset();

    double t0 = now();
    zp_dataset_config dc;
    zp_dataset_config_init(&dc);
    if (zp_dataset_create(&dc, &g_ds) != ZP_OK || zp_dataset_add(g_ds, g_manifest) != ZP_OK ||
        zp_dataset_index(g_ds) != ZP_OK)
        die("dataset: %s", zp_dataset_errmsg(g_ds));
    double t_ds = (now() - t0) * 1e3;
    if (zp_dataset_num_samples(g_ds) != NDRAWS || zp_dataset_num_shards(g_ds) != NSHARDS)
        die("dataset: %llu samples in %zu shards", (unsigned long long)zp_dataset_num_samples(g_ds),
            zp_dataset_num_shards(g_ds));

    printf("bench_state: %d shards x %llu samples = %llu samples (manifest counts), %d parts "
           "with random weights;\n  gpt2, concat packing, %d x %d; medians of %d [min .. max]\n\n",
           NSHARDS, (unsigned long long)SHARD_SAMPLES, (unsigned long long)NDRAWS, NSHARDS, ROWS,
           SEQ_LEN, REPS);
    printf("  %-52s %10.3f ms\n", "dataset from the manifest (not timed again)", t_ds);

    /* 1. save of a fresh pipeline */
    double v[REPS];
    char *fresh = NULL;
    size_t fresh_len = 0;
    const char *only = getenv("BENCH_STATE_ONLY");
    const int merge_only = only && strcmp(only, "merge") == 0;
    const int reps1 = merge_only ? 1 : REPS;
    {
        double o[REPS];
        for (int i = 0; i < reps1; i++) {
            double a = now();
            zp_worksource *ws = ws_open(MIX_1000, 0, 1);
            double b = now();
            zp_pipeline *p = pipe_open(ws);
            o[i] = (b - a) * 1e3;
            free(fresh);
            a = now();
            if (zp_pipeline_state_save(p, &fresh, &fresh_len) != ZP_OK)
                die("save: %s", zp_pipeline_errmsg(p));
            v[i] = (now() - a) * 1e6;
            zp_pipeline_destroy(p);
            zp_worksource_destroy(ws);
        }
        line("worksource create, 1,000 parts", stats(o, reps1), "ms", NULL);
    }
    char extra[256];
    snprintf(extra, sizeof extra, "state %zu bytes", fresh_len);
    line("1. save, fresh pipeline (rank 0 of 1)", stats(v, reps1), "us", extra);
    dump_state("fresh.json", fresh, fresh_len);

    /* 2. deep into the run: epoch 3, position 5e8 of 1e9 */
    zp_worksource *ws = ws_open(MIX_1000, 0, 1);
    static uint64_t draws[NSHARDS];
    const uint64_t deep_g = DEEP_EPOCH * NDRAWS + DEEP_POS;
    add_draws(ws, 0, deep_g, draws);
    const uint64_t deep_batches = deep_g * TOKENS_PER_DOC / (ROWS * SEQ_LEN);
    json_t *j = load(fresh, fresh_len);
    edit_rank(json_array_get(json_object_get(j, "ranks"), 0), 0, DEEP_EPOCH, DEEP_POS, draws,
              deep_batches);
    size_t deep_len;
    char *deep = dump(j, &deep_len);
    json_decref(j);
    restore_fig f = {0};
    if (merge_only)
        goto job;
    f = restore_runs(deep, deep_len, 0, 1, DEEP_EPOCH, DEEP_POS);
    check_rank(f.saved, DEEP_EPOCH, DEEP_POS, "deep state");
    dump_state("deep.json", f.saved, strlen(f.saved));
    {
        /* the counts read back */
        zp_worksource *w2 = ws_open(MIX_1000, 0, 1);
        zp_pipeline *p = pipe_open(w2);
        if (zp_pipeline_state_restore(p, deep, deep_len) != ZP_OK)
            die("restore: %s", zp_pipeline_errmsg(p));
        for (size_t i = 0; i < NSHARDS; i++) {
            uint64_t s, t;
            if (zp_pipeline_part_counts(p, i, &s, &t) != ZP_OK || s != draws[i])
                die("part %zu: %llu samples after the restore, %llu in the state", i,
                    (unsigned long long)s, (unsigned long long)draws[i]);
        }
        zp_pipeline_destroy(p);
        zp_worksource_destroy(w2);
    }
    printf("\n  deep state: epoch %u position %llu (draw %llu), batch %llu; "
           "position and part counts read back\n",
           DEEP_EPOCH, (unsigned long long)DEEP_POS, (unsigned long long)deep_g,
           (unsigned long long)deep_batches);
    line("   fresh worksource + pipeline (not in the restore)", f.open_ms, "ms", NULL);
    snprintf(extra, sizeof extra, "input %zu bytes", deep_len);
    line("2. restore (parse, settings check, plan, counts)", f.restore_ms, "ms", extra);
    line("   first sample at draw 3.5e9 (the mixture's seek)", f.seek_ms, "ms", NULL);
    snprintf(extra, sizeof extra, "state %zu bytes", f.size);
    line("   save after the restore", f.save_ms, "ms", extra);
    free(f.saved);

    /* 3. a job of 64 ranks */
job:;
    const uint64_t per = NDRAWS / JOB_W; /* 15,625,000: W divides N */
    char *rank_json[JOB_W];
    size_t rank_len[JOB_W];
    uint64_t job_left = 0, rank_pos[JOB_W];
    double te = now();
    make_job(ws, fresh, fresh_len, JOB_W, rank_json, rank_len, rank_pos, &job_left);
    double t_edit = now() - te;
    size_t job_len = 0;
    double peak = 0, cv[REPS];
    char *job = merge_runs(rank_json, rank_len, JOB_W, REPS, v, cv, &peak, &job_len);
    printf("\n  job of %u ranks at epoch %u, each near the middle of its %llu positions "
           "(made in %.2f s)\n",
           JOB_W, DEEP_EPOCH, (unsigned long long)per, t_edit);
    snprintf(extra, sizeof extra,
             "CPU %.0f ms; rank states %zu bytes each, job state %zu bytes, peak +%.1f MB",
             stats(cv, REPS).med, rank_len[0], job_len, peak);
    line("3. merge of 64 rank states", stats(v, REPS), "ms", extra);
    dump_state("job64.json", job, job_len);
    {
        /* the same at 1,024 ranks: the merge only */
        static char *big_json[JOB_BIG];
        static size_t big_len[JOB_BIG];
        static uint64_t big_pos[JOB_BIG];
        uint64_t big_left = 0;
        double tb = now(), bv[BIG_REPS], bcv[BIG_REPS], bpeak = 0;
        make_job(ws, fresh, fresh_len, JOB_BIG, big_json, big_len, big_pos, &big_left);
        tb = now() - tb;
        size_t big_job_len = 0, in_bytes = 0;
        for (uint32_t r = 0; r < JOB_BIG; r++)
            in_bytes += big_len[r];
        char *big =
            merge_runs(big_json, big_len, JOB_BIG, BIG_REPS, bv, bcv, &bpeak, &big_job_len);
        json_t *bj = load(big, big_job_len);
        size_t got = json_array_size(json_object_get(bj, "ranks"));
        json_decref(bj);
        if (got != JOB_BIG)
            die("merge of %u: the job state holds %zu ranks", JOB_BIG, got);
        printf("  job of %u ranks, the same way (made in %.2f s; the %.1f MB of rank states "
               "are the caller's)\n",
               JOB_BIG, tb, (double)in_bytes / 1e6);
        snprintf(extra, sizeof extra, "CPU %.0f ms; job state %zu bytes (%zu ranks), peak +%.1f MB",
                 stats(bcv, BIG_REPS).med, big_job_len, got, bpeak);
        line("3b. merge of 1,024 rank states (median of 5)", stats(bv, BIG_REPS), "ms", extra);
        dump_state("job1024.json", big, big_job_len);
        free(big);
        for (uint32_t r = 0; r < JOB_BIG; r++)
            free(big_json[r]);
    }
    if (merge_only) {
        for (uint32_t r = 0; r < JOB_W; r++)
            free(rank_json[r]);
        free(job);
        free(deep);
        free(fresh);
        zp_worksource_destroy(ws);
        zp_dataset_destroy(g_ds);
        if (own_dir)
            rmdir_all();
        return 0;
    }

    f = restore_runs(job, job_len, 5, JOB_W, DEEP_EPOCH, rank_pos[5]);
    check_rank(f.saved, DEEP_EPOCH, rank_pos[5], "job state on 64 ranks");
    snprintf(extra, sizeof extra, "then saved: %zu bytes", f.size);
    line("   restore on 64 ranks (rank 5: exact)", f.restore_ms, "ms", extra);
    free(f.saved);

    const uint64_t per48 = (job_left + JOB_W2 - 1) / JOB_W2;
    for (uint32_t rank = 0; rank < JOB_W2; rank += JOB_W2 - 1) {
        f = restore_runs(job, job_len, rank, JOB_W2, DEEP_EPOCH, 0);
        check_rank(f.saved, DEEP_EPOCH, 0, "job state on 48 ranks");
        dump_state(rank ? "rank47of48.json" : "rank0of48.json", f.saved, strlen(f.saved));
        zp_worksource *w2 = ws_open(MIX_1000, rank, JOB_W2);
        zp_pipeline *p = pipe_open(w2);
        if (zp_pipeline_state_restore(p, job, job_len) != ZP_OK)
            die("restore: %s", zp_pipeline_errmsg(p));
        uint64_t got = zp_worksource_epoch_samples(w2, DEEP_EPOCH);
        if (got != per48)
            die("rank %u of 48: %llu positions in epoch %u after the re-split, expected %llu",
                rank, (unsigned long long)got, DEEP_EPOCH, (unsigned long long)per48);
        zp_pipeline_destroy(p);
        zp_worksource_destroy(w2);
        char what[96];
        snprintf(what, sizeof what, "restore on 48 ranks (rank %u: elastic re-split)", rank);
        snprintf(extra, sizeof extra, "%llu positions left of epoch %u", (unsigned long long)got,
                 DEEP_EPOCH);
        line(what, f.restore_ms, "ms", extra);
        line("   first sample (the mixture's seek)", f.seek_ms, "ms", NULL);
        snprintf(extra, sizeof extra, "state %zu bytes", f.size);
        line("   save after the restore", f.save_ms, "ms", extra);
        free(f.saved);
    }
    for (uint32_t r = 0; r < JOB_W; r++)
        free(rank_json[r]);
    free(job);
    free(deep);
    free(fresh);
    zp_worksource_destroy(ws);

    /* 4. selection per sample */
    printf("\n  4. selection: ns per sample, %llu consecutive positions, median of %d "
           "[min .. max], ratio to the plain dataset\n",
           (unsigned long long)SEL_SAMPLES, SEL_RUNS);
    uint64_t sink = 0;
    static const char *const kname[3] = {"plain dataset (1 part)", "3 parts", "1,000 parts"};
    static const zp_mix_part three[3] = {{"web", 500, 0.5}, {"code", 300, 0.3},
                                         {"books", 200, 0.2}};
    for (int from = 0; from < 2; from++) {
        uint32_t e = from ? DEEP_EPOCH : 0;
        uint64_t p0 = from ? DEEP_POS : 0;
        stat3 base = {0};
        for (int k = 0; k < 3; k++) {
            zp_worksource *w = ws_open((mix_kind)k, 0, 1);
            stat3 s = select_ns(w, e, p0, &sink);
            zp_worksource_destroy(w);
            if (k == 0)
                base = s;
            char what[96];
            snprintf(what, sizeof what, "zp_worksource_sample, %s, from draw %s", kname[k],
                     from ? "3.5e9" : "0");
            snprintf(extra, sizeof extra, "x%.2f", s.med / base.med);
            line(what, s, "ns", extra);
        }
        for (int k = 1; k < 3; k++) {
            stat3 s = k == 1 ? bare_ns(three, 3, from ? DEEP_EPOCH * NDRAWS + DEEP_POS : 0, &sink)
                             : bare_ns(g_parts, NSHARDS,
                                       from ? DEEP_EPOCH * NDRAWS + DEEP_POS : 0, &sink);
            char what[96];
            snprintf(what, sizeof what, "bare quota schedule, %s, from draw %s", kname[k],
                     from ? "3.5e9" : "0");
            snprintf(extra, sizeof extra, "x%.2f", s.med / base.med);
            line(what, s, "ns", extra);
        }
    }
    printf("  (checksum %llu)\n", (unsigned long long)(sink & 0xffff));

    zp_dataset_destroy(g_ds);
    if (own_dir)
        rmdir_all();
    return 0;
}
