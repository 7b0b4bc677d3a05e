/* cmd_run.c - `zephon run`: run a pipeline from flags (the same code path
 * as the library) and print its throughput. */
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "cli.h"
#include "util.h"
#include "run_opts.h"
#include "zephon.h"

static void run_usage(FILE *f)
{
    fprintf(f,
        "usage: zephon run [options] SHARD|GLOB|MANIFEST...\n"
        "\n"
        "dataset and plan:\n"
        "  --data SPEC             add shards (path, glob or manifest .json); repeatable\n"
        "  --seed N                shuffle seed (default 0)\n"
        "  --epochs N              epochs to run (default 1; 0 = without end)\n"
        "  --start-epoch N         first epoch (default 0)\n"
        "  --no-shuffle            dataset order\n"
        "  --block-shards N        shards per shuffle block (default 8)\n"
        "  --remainder pad|drop    samples %% world size policy (default pad)\n"
        "  --no-index-cache        count shards lacking a manifest count by reading them,\n"
        "                          without the index cache ($XDG_CACHE_HOME/zephon/index,\n"
        "                          else ~/.cache/zephon/index; docs/datasets.md)\n"
        "  --rank R --world-size W this rank (default: MPI, else RANK/WORLD_SIZE,\n"
        "                          else SLURM_PROCID/SLURM_NTASKS, else 0/1)\n"
        "pipeline:\n"
        "  --threads N             OpenMP threads of the pipeline (default OMP_NUM_THREADS)\n"
        "  --fetch-parallelism N   (default 1)\n"
        "  --map strip[:N]         add the built-in map_transform that strips the text's\n"
        "                          surrounding whitespace, with parallelism N (default 1)\n"
        "  --tokenize ID[:N]       tokenize with ID (gpt2) and parallelism N (default 1)\n"
        "  --field NAME            text field (default text)\n"
        "  --pack concat|pad       token packing (default concat)\n"
        "  --seq-len N             tokens per row minus one (default 2048)\n"
        "  --microbatch N          rows per batch (default 32)\n"
        "  --prefetch N[:P]        load the shards of the next N samples ahead of fetch,\n"
        "                          with P loads at once (default P 1; default off)\n"
        "  --prefetch-batches N    finished batches buffered (default 2)\n"
        "  --chunk-samples N       samples per task (default 64)\n"
        "  --in-flight N           chunks in flight (default: from parallelism)\n"
        "  --cache-mb N            decoded-shard cache budget in MiB (default 1024)\n"
        "  --skip-bad-records      skip (and count) bad records instead of failing\n"
        "  --fetch-delay-us N      fault injection: delay each fetched chunk\n"
        "consumer:\n"
        "  --step-time SECONDS     simulated training step per batch (default 0)\n"
        "  --max-batches N         stop after N batches\n"
        "outputs:\n"
        "  --emit-ids DIR          write DIR/rank-<R>.ids: shard:record per sample\n"
        "  --emit-digest FILE      one line per batch: index epoch xxh64 (FILE.rank-<R>\n"
        "                          when the world size is above 1)\n"
        "  --report DIR            MPI: write the cluster fetch-timing report (txt, json,\n"
        "                          csv, html) into DIR (see docs/report.md)\n"
        "  --report-every N        MPI: a report window every N steps (default: about 32\n"
        "                          windows per run)\n"
        "  --observe[=SECONDS]     observability on: print the snapshots every SECONDS\n"
        "                          (default 5) and at the end\n"
        "  --metrics-out FILE      write the final snapshots as one JSON document\n"
        "  --json                  print the summary (and snapshots) as JSON lines\n"
        "  --quiet                 no progress line\n");
}

static int parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s)
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || s[0] == '-')
        return -1;
    *out = v;
    return 0;
}

static int env_u64(const char *name, uint64_t *out)
{
    const char *v = getenv(name);
    return v ? parse_u64(v, out) : -1;
}

/* The built-in map: strip the text field's surrounding whitespace. In record
 * mode the record becomes {"text": ...} so that batches carry the change. */
typedef struct strip_ctx {
    const char *field;
    int rewrite_json;
} strip_ctx;

static zp_status map_strip(void *user, zp_record *rec)
{
    strip_ctx *sc = user;
    const char *s;
    size_t n;
    zp_status st = zp_record_text(rec, &s, &n);
    if (st == ZP_END) {
        zp_record_error(rec, "no field '%s'", sc->field);
        return ZP_ERR_FORMAT;
    }
    if (st != ZP_OK)
        return st;
    while (n && isspace((unsigned char)*s)) {
        s++;
        n--;
    }
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    if (!sc->rewrite_json)
        return zp_record_set_text(rec, s, n);
    json_t *o = json_object();
    json_object_set_new(o, sc->field, json_stringn(s, n));
    char *j = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!j)
        return ZP_ERR_NOMEM;
    st = zp_record_set_json(rec, j, strlen(j));
    free(j);
    return st;
}

static void log_to_stderr(void *user, zp_log_level lvl, const char *msg)
{
    static const char *names[] = {"error", "warning", "info", "debug"};
    int quiet = *(int *)user;
    if (lvl == ZP_LOG_DEBUG || (lvl == ZP_LOG_INFO && quiet))
        return;
    fprintf(stderr, "zephon: %s: %s\n", names[lvl], msg);
}

static uint64_t batch_digest(const zp_batch *b)
{
    XXH64_state_t *h = XXH64_createState();
    XXH64_reset(h, 0);
    if (b->mode == ZP_PACK_RECORDS) {
        for (size_t i = 0; i < b->rows; i++) {
            uint64_t len = b->offsets[i + 1] - b->offsets[i];
            XXH64_update(h, &len, sizeof len);
        }
        XXH64_update(h, b->data, b->offsets[b->rows]);
    } else {
        size_t n = b->rows * b->cols;
        XXH64_update(h, b->tokens, n * sizeof *b->tokens);
        XXH64_update(h, b->loss_mask, n);
        XXH64_update(h, b->segment_ids, n * sizeof *b->segment_ids);
    }
    uint64_t d = XXH64_digest(h);
    XXH64_freeState(h);
    return d;
}

static size_t batch_bytes(const zp_batch *b)
{
    if (b->mode == ZP_PACK_RECORDS)
        return b->offsets[b->rows];
    return b->rows * b->cols * sizeof(int32_t);
}

int zp_cmd_run(int argc, char **argv)
{
    zp_run_opts o;
    zp_run_opts_init(&o);
    int rc = zp_run_opts_parse(&o, argc, argv);
    if (rc == 1) {
        run_usage(stdout);
        return 0;
    }
    if (rc != 0) {
        run_usage(stderr);
        return 2;
    }
#ifdef ZEPHON_CLI_MPI
    if (zp_cli_under_mpi() || o.report_dir)
        return zp_cmd_run_mpi(&o);
#else
    if (o.report_dir) {
        fprintf(stderr, "zephon run: --report needs zephon built with MPI (ZEPHON_WITH_MPI)\n");
        return 2;
    }
#endif
    return zp_run_main(&o);
}

void zp_run_opts_init(zp_run_opts *o)
{
    memset(o, 0, sizeof *o);
    zp_worksource_config_init(&o->ws);
    zp_pipeline_config_init(&o->pc);
    o->field = "text";
    o->max_batches = UINT64_MAX;
    o->map_parallelism = 1;
    o->tok_parallelism = 1;
    o->rank_set = 0;
    o->observe = -1;
}

int zp_run_opts_parse(zp_run_opts *o, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t u;
#define NEED_U64(dst)                                                                 \
    do {                                                                              \
        if (parse_u64(v, &u) != 0) {                                                  \
            fprintf(stderr, "zephon run: %s needs a non-negative integer\n", a);      \
            return -1;                                                                \
        }                                                                             \
        dst = u;                                                                      \
        i++;                                                                          \
    } while (0)
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return 1;
        else if (!strcmp(a, "--data")) {
            if (!v) {
                fprintf(stderr, "zephon run: --data needs a value\n");
                return -1;
            }
            if (o->n_specs < ZP_RUN_MAX_SPECS)
                o->specs[o->n_specs++] = v;
            i++;
        } else if (!strcmp(a, "--seed"))
            NEED_U64(o->ws.seed);
        else if (!strcmp(a, "--epochs"))
            NEED_U64(o->pc.epochs);
        else if (!strcmp(a, "--start-epoch"))
            NEED_U64(o->start_epoch);
        else if (!strcmp(a, "--no-shuffle"))
            o->ws.shuffle = 0;
        else if (!strcmp(a, "--no-index-cache"))
            o->no_index_cache = 1;
        else if (!strcmp(a, "--block-shards"))
            NEED_U64(o->ws.shuffle_block_shards);
        else if (!strcmp(a, "--remainder")) {
            if (v && !strcmp(v, "pad"))
                o->ws.remainder = ZP_REMAINDER_PAD;
            else if (v && !strcmp(v, "drop"))
                o->ws.remainder = ZP_REMAINDER_DROP;
            else {
                fprintf(stderr, "zephon run: --remainder is pad or drop\n");
                return -1;
            }
            i++;
        } else if (!strcmp(a, "--rank")) {
            NEED_U64(o->ws.rank);
            o->rank_set |= 1;
        } else if (!strcmp(a, "--world-size")) {
            NEED_U64(o->ws.world_size);
            o->rank_set |= 2;
        } else if (!strcmp(a, "--threads"))
            NEED_U64(o->pc.threads);
        else if (!strcmp(a, "--fetch-parallelism"))
            NEED_U64(o->pc.fetch_parallelism);
        else if (!strcmp(a, "--map")) {
            if (!v || strncmp(v, "strip", 5) != 0 || (v[5] && v[5] != ':')) {
                fprintf(stderr, "zephon run: --map takes strip[:N]\n");
                return -1;
            }
            o->map_strip = 1;
            if (v[5] == ':' && (parse_u64(v + 6, &u) != 0 || u == 0)) {
                fprintf(stderr, "zephon run: bad parallelism in --map %s\n", v);
                return -1;
            }
            if (v[5] == ':')
                o->map_parallelism = u;
            i++;
        } else if (!strcmp(a, "--tokenize")) {
            if (!v) {
                fprintf(stderr, "zephon run: --tokenize needs ID[:N]\n");
                return -1;
            }
            snprintf(o->tok_id, sizeof o->tok_id, "%s", v);
            char *colon = strrchr(o->tok_id, ':');
            if (colon && parse_u64(colon + 1, &u) == 0 && u > 0) {
                o->tok_parallelism = u;
                *colon = '\0';
            }
            i++;
        } else if (!strcmp(a, "--field")) {
            if (!v)
                return -1;
            o->field = v;
            i++;
        } else if (!strcmp(a, "--pack")) {
            if (v && !strcmp(v, "concat"))
                o->pack = ZP_PACK_CONCAT;
            else if (v && !strcmp(v, "pad"))
                o->pack = ZP_PACK_PAD;
            else {
                fprintf(stderr, "zephon run: --pack is concat or pad\n");
                return -1;
            }
            i++;
        } else if (!strcmp(a, "--seq-len"))
            NEED_U64(o->pc.seq_len);
        else if (!strcmp(a, "--microbatch"))
            NEED_U64(o->pc.microbatch_size);
        else if (!strcmp(a, "--prefetch")) {
            char *end = NULL;
            unsigned long long n = v && *v != '-' ? strtoull(v, &end, 10) : 0, par = 1;
            if (end && *end == ':' && end[1] && end[1] != '-')
                par = strtoull(end + 1, &end, 10);
            if (!v || n == 0 || par == 0 || !end || *end) {
                fprintf(stderr, "zephon run: --prefetch takes N[:P] with N, P >= 1\n");
                return -1;
            }
            o->prefetch_buffer = n;
            o->prefetch_parallelism = par;
            i++;
        } else if (!strcmp(a, "--prefetch-batches"))
            NEED_U64(o->pc.prefetch_batches);
        else if (!strcmp(a, "--chunk-samples"))
            NEED_U64(o->pc.chunk_samples);
        else if (!strcmp(a, "--in-flight"))
            NEED_U64(o->pc.in_flight_chunks);
        else if (!strcmp(a, "--cache-mb")) {
            NEED_U64(u);
            o->pc.shard_cache_bytes = (size_t)u << 20;
        } else if (!strcmp(a, "--skip-bad-records"))
            o->pc.on_bad_record = ZP_BAD_RECORD_SKIP;
        else if (!strcmp(a, "--fetch-delay-us"))
            NEED_U64(o->pc.fetch_delay_us);
        else if (!strcmp(a, "--step-time")) {
            char *end;
            o->step_time = v ? strtod(v, &end) : -1;
            if (!v || *end || o->step_time < 0) {
                fprintf(stderr, "zephon run: --step-time needs seconds >= 0\n");
                return -1;
            }
            i++;
        } else if (!strcmp(a, "--max-batches"))
            NEED_U64(o->max_batches);
        else if (!strcmp(a, "--emit-ids")) {
            if (!v)
                return -1;
            o->emit_ids = v;
            i++;
        } else if (!strcmp(a, "--emit-digest")) {
            if (!v)
                return -1;
            o->emit_digest = v;
            i++;
        } else if (!strcmp(a, "--report")) {
            if (!v) {
                fprintf(stderr, "zephon run: --report needs a folder\n");
                return -1;
            }
            o->report_dir = v;
            i++;
        } else if (!strcmp(a, "--report-every"))
            NEED_U64(o->report_every);
        else if (!strcmp(a, "--observe"))
            o->observe = 5.0;
        else if (!strncmp(a, "--observe=", 10)) {
            char *end;
            o->observe = strtod(a + 10, &end);
            if (*end || o->observe < 0) {
                fprintf(stderr, "zephon run: --observe=SECONDS needs seconds >= 0\n");
                return -1;
            }
        } else if (!strcmp(a, "--metrics-out")) {
            if (!v)
                return -1;
            o->metrics_out = v;
            i++;
        } else if (!strcmp(a, "--json"))
            o->json = 1;
        else if (!strcmp(a, "--quiet"))
            o->quiet = 1;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "zephon run: unknown option '%s'\n", a);
            return -1;
        } else if (o->n_specs < ZP_RUN_MAX_SPECS)
            o->specs[o->n_specs++] = a;
#undef NEED_U64
    }
    if (o->n_specs == 0) {
        fprintf(stderr, "zephon run: no dataset given\n");
        return -1;
    }
    return 0;
}

void zp_run_rank_from_env(zp_run_opts *o)
{
    uint64_t r, w;
    if (o->rank_set == 3)
        return;
    if (env_u64("RANK", &r) == 0 && env_u64("WORLD_SIZE", &w) == 0) {
    } else if (env_u64("SLURM_PROCID", &r) == 0 && env_u64("SLURM_NTASKS", &w) == 0) {
    } else {
        r = 0;
        w = 1;
    }
    if (!(o->rank_set & 1))
        o->ws.rank = (uint32_t)r;
    if (!(o->rank_set & 2))
        o->ws.world_size = (uint32_t)w;
}

static FILE *open_out(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        fprintf(stderr, "zephon run: cannot write '%s': %s\n", path, strerror(errno));
    return f;
}

int zp_run_pipeline(zp_run_opts *o, zp_dataset *ds, zp_run_result *res)
{
    int rc = 1;
    zp_worksource *ws = NULL;
    zp_pipeline *p = NULL;
    FILE *ids = NULL, *dig = NULL;
    const zp_run_hooks *hk = o->hooks;
    int started = 0;
    memset(res, 0, sizeof *res);
    static int quiet_flag;
    quiet_flag = o->quiet;

    zp_status st = zp_worksource_create(ds, &o->ws, &ws);
    if (st != ZP_OK) {
        fprintf(stderr, "zephon run: worksource: %s: %s\n", zp_status_str(st), zp_dataset_errmsg(ds));
        goto out;
    }
    if (o->start_epoch) {
        zp_worksource_state s0 = {o->ws.seed, (uint32_t)o->start_epoch, 0};
        zp_worksource_set_state(ws, &s0);
    }
    o->pc.log = log_to_stderr;
    o->pc.log_user = &quiet_flag;
    if (o->tok_id[0] && o->pack)
        o->pc.pack = o->pack;
    st = zp_pipeline_create(ws, &o->pc, &p);
    if (st != ZP_OK) {
        fprintf(stderr, "zephon run: bad settings: %s\n", zp_status_str(st));
        goto out;
    }
    strip_ctx sc = {o->field, o->tok_id[0] == '\0'};
    if (o->map_strip && (st = zp_pipeline_map_transform(p, map_strip, &sc, o->map_parallelism, "strip")) != ZP_OK)
        goto perr;
    if (o->tok_id[0] && (st = zp_pipeline_tokenize(p, o->tok_id, o->field, o->tok_parallelism)) != ZP_OK)
        goto perr;
    if (o->tok_id[0] && o->pack && (st = zp_pipeline_pack(p, o->pack, o->pc.seq_len)) != ZP_OK)
        goto perr;
    if (o->prefetch_buffer &&
        (st = zp_pipeline_prefetch(p, o->prefetch_buffer, o->prefetch_parallelism)) != ZP_OK)
        goto perr;
    int observing = o->observe >= 0 || o->metrics_out;
    if (observing && (st = zp_pipeline_enable_observability(p)) != ZP_OK)
        goto perr;
    double last_observe = zpi_now();

    char path[PATH_MAX];
    if (o->emit_ids) {
        mkdir(o->emit_ids, 0777);
        snprintf(path, sizeof path, "%s/rank-%u.ids", o->emit_ids, o->ws.rank);
        if (!(ids = open_out(path)))
            goto out;
    }
    if (o->emit_digest) {
        if (o->ws.world_size > 1)
            snprintf(path, sizeof path, "%s.rank-%u", o->emit_digest, o->ws.rank);
        else
            snprintf(path, sizeof path, "%s", o->emit_digest);
        if (!(dig = open_out(path)))
            goto out;
    }

    if (hk) {
        started = 1;
        if (hk->start(hk->user, p) != 0)
            goto out;
    }
    int tty = !o->quiet && isatty(STDERR_FILENO);
    double t0 = zpi_now(), t_first = 0, last_progress = t0;
    const zp_batch *b;
    while (res->batches < o->max_batches) {
        st = hk ? hk->next(hk->user, p, &b) : zp_pipeline_next(p, &b);
        if (st == ZP_END)
            break;
        if (st != ZP_OK)
            goto perr;
        if (res->batches == 0)
            t_first = zpi_now() - t0;
        res->batches++;
        res->bytes += batch_bytes(b);
        if (ids)
            for (size_t i = 0; i < b->n_samples; i++)
                fprintf(ids, "%s:%llu\n", zp_dataset_shard_name(ds, b->samples[i].shard),
                        (unsigned long long)b->samples[i].record);
        if (dig)
            fprintf(dig, "%llu %u %016llx\n", (unsigned long long)b->index, b->epoch,
                    (unsigned long long)batch_digest(b));
        if (o->step_time > 0) {
            double until = zpi_now() + o->step_time;
            double left;
            while ((left = until - zpi_now()) > 0) {
                struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
                nanosleep(&ts, NULL);
            }
        }
        if (hk)
            hk->step(hk->user, p, res->batches);
        if (o->observe > 0 && zpi_now() - last_observe >= o->observe) {
            last_observe = zpi_now();
            zp_run_print_observe(o, p, stdout);
        }
        if (tty) {
            double t = zpi_now();
            if (t - last_progress >= 1.0) {
                last_progress = t;
                zp_pipeline_counts c;
                zp_pipeline_get_counts(p, &c);
                fprintf(stderr, "\r%llu batches, %llu samples, %.0f samples/s   ",
                        (unsigned long long)res->batches, (unsigned long long)c.samples,
                        (double)c.samples / (t - t0));
            }
        }
    }
    res->seconds = zpi_now() - t0;
    res->first_batch_seconds = t_first;
    if (tty)
        fprintf(stderr, "\r%*s\r", 60, "");
    zp_pipeline_get_counts(p, &res->counts);
    if (o->observe >= 0)
        zp_run_print_observe(o, p, stdout);
    if (o->metrics_out && zp_run_write_metrics(p, o->metrics_out) != 0) {
        fprintf(stderr, "zephon run: cannot write '%s': %s\n", o->metrics_out, strerror(errno));
        rc = 1;
        goto out;
    }
    res->padded_per_epoch = zp_worksource_padded(ws);
    res->dropped_per_epoch = zp_worksource_dropped(ws);
    rc = 0;
    goto out;
perr:
    fprintf(stderr, "zephon run: %s: %s\n", zp_status_str(st),
            hk && started ? hk->errmsg(hk->user, p) : zp_pipeline_errmsg(p));
out:
    if (ids && fclose(ids) != 0)
        rc = 1;
    if (dig && fclose(dig) != 0)
        rc = 1;
    if (hk) {
        if (!started)
            hk->start(hk->user, NULL);
        rc = hk->finish(hk->user, started ? p : NULL, rc);
    }
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    return rc;
}

void zp_run_print(const zp_run_opts *o, const zp_run_result *r)
{
    double s = r->seconds > 0 ? r->seconds : 1e-9;
    if (o->json) {
        printf("{\"rank\":%u,\"world_size\":%u,\"batches\":%llu,\"samples\":%llu,\"seconds\":%.6f,"
               "\"samples_per_s\":%.1f,\"batches_per_s\":%.2f,\"mb_per_s\":%.2f,\"tokens\":%llu,"
               "\"first_batch_s\":%.6f,\"padded\":%llu,\"skipped\":%llu}\n",
               o->ws.rank, o->ws.world_size, (unsigned long long)r->batches,
               (unsigned long long)r->counts.samples, r->seconds, (double)r->counts.samples / s,
               (double)r->batches / s, (double)r->bytes / s / 1e6,
               (unsigned long long)r->counts.tokens, r->first_batch_seconds,
               (unsigned long long)r->counts.padded, (unsigned long long)r->counts.skipped);
        return;
    }
    printf("rank %u/%u: %llu batches, %llu samples in %.3f s: %.0f samples/s, %.1f batches/s, "
           "%.1f MB/s of %s",
           o->ws.rank, o->ws.world_size, (unsigned long long)r->batches,
           (unsigned long long)r->counts.samples, r->seconds, (double)r->counts.samples / s,
           (double)r->batches / s, (double)r->bytes / s / 1e6,
           r->counts.tokens ? "token batches" : "records");
    if (r->counts.tokens)
        printf(", %.0f tokens/s", (double)r->counts.tokens / s);
    printf("\n");
    if (r->counts.padded || r->padded_per_epoch || r->dropped_per_epoch || r->counts.skipped ||
        r->counts.truncated_tokens)
        printf("  padded %llu (per epoch, all ranks: %llu), dropped per epoch %llu, skipped %llu, "
               "truncated tokens %llu\n",
               (unsigned long long)r->counts.padded, (unsigned long long)r->padded_per_epoch,
               (unsigned long long)r->dropped_per_epoch, (unsigned long long)r->counts.skipped,
               (unsigned long long)r->counts.truncated_tokens);
}

/* The index cache folder of `zephon run`: $XDG_CACHE_HOME/zephon/index
 * (when absolute, as the XDG spec asks), else $HOME/.cache/zephon/index,
 * created like mkdir -p (new folders 0700). 0, or -1 with errno (ENOENT
 * when neither variable is usable). */
int zp_run_index_cache_dir(char *buf, size_t cap)
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
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        int r = mkdir(buf, 0700);
        int e = errno;
        *p = c;
        if (r != 0 && e != EEXIST) {
            errno = e;
            return -1;
        }
        if (c == '\0')
            break;
    }
    struct stat sb;
    if (stat(buf, &sb) != 0)
        return -1;
    if (!S_ISDIR(sb.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

int zp_run_main(zp_run_opts *o)
{
    zp_run_rank_from_env(o);
    if (o->ws.world_size == 0 || o->ws.rank >= o->ws.world_size) {
        fprintf(stderr, "zephon run: rank %u is not below world size %u\n", o->ws.rank,
                o->ws.world_size);
        return 2;
    }
    zp_dataset_config dcfg;
    zp_dataset_config_init(&dcfg);
    char cache_dir[PATH_MAX];
    if (!o->no_index_cache) {
        if (zp_run_index_cache_dir(cache_dir, sizeof cache_dir) == 0)
            dcfg.index_cache_dir = cache_dir;
        else if (!o->quiet)
            fprintf(stderr, "zephon run: warning: index cache off: %s%s%s: %s\n",
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
        fprintf(stderr, "zephon run: %s\n", zp_status_str(st));
        return 1;
    }
    for (size_t i = 0; i < o->n_specs; i++) {
        st = zp_dataset_add(ds, o->specs[i]);
        if (st != ZP_OK) {
            fprintf(stderr, "zephon run: %s: %s\n", zp_status_str(st), zp_dataset_errmsg(ds));
            zp_dataset_destroy(ds);
            return 1;
        }
    }
    zp_run_result r;
    int rc = zp_run_pipeline(o, ds, &r);
    if (rc == 0)
        zp_run_print(o, &r);
    zp_dataset_destroy(ds);
    return rc;
}

/* ------------------------------------------------------------ observability */

static void print_hist(FILE *f, const char *what, const zp_hist *h)
{
    if (!h->count) {
        fprintf(f, "%s -", what);
        return;
    }
    fprintf(f, "%s p50 %.3gms p90 %.3gms p99 %.3gms max %.3gms", what,
            (double)zp_hist_quantile(h, 0.5) * 1e-6, (double)zp_hist_quantile(h, 0.9) * 1e-6,
            (double)zp_hist_quantile(h, 0.99) * 1e-6, (double)h->max_ns * 1e-6);
}

void zp_run_print_observe(const zp_run_opts *o, zp_pipeline *p, FILE *f)
{
    zp_metrics_snapshot m;
    zp_fetch_timing ft;
    zp_prefetch_timing pt;
    if (zp_pipeline_metrics_snapshot(p, &m) != ZP_OK ||
        zp_pipeline_fetch_timing_snapshot(p, &ft) != ZP_OK ||
        zp_pipeline_prefetch_timing_snapshot(p, &pt) != ZP_OK)
        return;
    if (o->json) {
        char *a = NULL, *b = NULL, *c = NULL;
        if (zp_metrics_json(&m, &a) == ZP_OK && zp_fetch_timing_json(&ft, &b) == ZP_OK &&
            zp_prefetch_timing_json(&pt, &c) == ZP_OK)
            fprintf(f, "%s\n%s\n%s\n", a, b, c);
        free(a);
        free(b);
        free(c);
        fflush(f);
        return;
    }
    fprintf(f, "[%7.2fs] %llu batches (%.1f/s), %llu samples (%.0f/s), first batch %.3fs, "
               "stall %.2fs = %.1f%% of wall\n",
            m.wall_seconds, (unsigned long long)m.batches, m.batches_per_second,
            (unsigned long long)m.samples, m.samples_per_second, m.time_to_first_batch,
            m.stall_seconds, 100.0 * m.stall_fraction);
    fprintf(f, "  %-14s %3s %10s %10s %6s %9s %9s %15s %10s\n", "operator", "par", "in", "out",
            "util", "starved", "blocked", "queue now/avg/max", "items/s");
    for (uint32_t i = 0; i < m.n_ops; i++) {
        const zp_op_metrics *op = &m.ops[i];
        char q[32];
        snprintf(q, sizeof q, "%u/%.1f/%u", op->queue_now, op->queue_mean, op->queue_max);
        fprintf(f, "  %-14s %3u %10llu %10llu %5.0f%% %8.2fs %8.2fs %15s %10.0f\n", op->name,
                op->parallelism, (unsigned long long)op->items_in,
                (unsigned long long)op->items_out, 100.0 * op->utilization, op->starved_seconds,
                op->blocked_seconds, q, op->items_per_second);
    }
    fprintf(f, "  fetch: %llu shards opened in %.2fs (read %.2fs, decompress %.2fs), waited %.2fs, "
               "%.1f MB from storage, %.1f MB of records, %llu records\n         ",
            (unsigned long long)ft.shards_opened, ft.open_seconds, ft.read_seconds,
            ft.decompress_seconds, ft.wait_seconds, (double)ft.bytes_compressed / 1e6,
            (double)ft.bytes_uncompressed / 1e6, (unsigned long long)ft.records);
    print_hist(f, "shard open", &ft.open_ns);
    fprintf(f, "; ");
    print_hist(f, "record", &ft.record_ns);
    if (ft.slowest_shard >= 0)
        fprintf(f, "; slowest shard #%lld %.3fs", (long long)ft.slowest_shard,
                ft.slowest_shard_seconds);
    uint64_t lookups = pt.cache_hits + pt.cache_misses;
    fprintf(f, "\n  prefetch: %llu loads, %.1f MB; cache %.1f%% hits (%llu/%llu), %llu evictions, "
               "%.1f MB resident\n",
            (unsigned long long)pt.downloads, (double)pt.bytes / 1e6,
            lookups ? 100.0 * (double)pt.cache_hits / (double)lookups : 0.0,
            (unsigned long long)pt.cache_hits, (unsigned long long)lookups,
            (unsigned long long)pt.cache_evictions, (double)pt.cache_bytes / 1e6);
    fflush(f);
}

int zp_run_write_metrics(zp_pipeline *p, const char *path)
{
    zp_metrics_snapshot m;
    zp_fetch_timing ft;
    zp_prefetch_timing pt;
    char *a = NULL, *b = NULL, *c = NULL;
    int rc = -1;
    if (zp_pipeline_metrics_snapshot(p, &m) == ZP_OK &&
        zp_pipeline_fetch_timing_snapshot(p, &ft) == ZP_OK &&
        zp_pipeline_prefetch_timing_snapshot(p, &pt) == ZP_OK && zp_metrics_json(&m, &a) == ZP_OK &&
        zp_fetch_timing_json(&ft, &b) == ZP_OK && zp_prefetch_timing_json(&pt, &c) == ZP_OK) {
        FILE *f = fopen(path, "w");
        if (f) {
            fprintf(f, "{\"metrics\":%s,\"fetch_timing\":%s,\"prefetch_timing\":%s}\n", a, b, c);
            rc = fclose(f) == 0 ? 0 : -1;
        }
    }
    free(a);
    free(b);
    free(c);
    return rc;
}
