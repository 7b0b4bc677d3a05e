/* run_opts.c - `zephon run`'s options. Every number is parsed as 64-bit and
 * checked against the range of the setting it fills (util.h's
 * zpi_parse_u64/zpi_parse_double): a malformed or out-of-range value is a
 * usage error naming the option and the value, never a wrap or a silent
 * default. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "run_opts.h"
#include "base/util.h"

/* Bounds of the settings that have no natural limit but their type's: a
 * pipeline of more threads or tasks than this is a typing mistake. */
#define MAX_PAR 65536u                 /* threads and operator parallelism */
#define MAX_ROWS ((uint64_t)1 << 30)   /* microbatch, seq-len, chunk samples */
#define MAX_SECONDS (7.0 * 24 * 3600)  /* --step-time, --observe */

void cli_run_usage(FILE *f)
{
    fprintf(f,
        "usage: zephon run [options] SHARD|GLOB|MANIFEST...\n"
        "       zephon run [options] --data SPEC[@WEIGHT] [--data SPEC[@WEIGHT]]...\n"
        "       zephon run [options] --mixture FILE\n"
        "\n"
        "dataset and plan:\n"
        "  SHARD|GLOB|MANIFEST...  the dataset's shards (path, glob, folder, manifest .json, or\n"
        "                          a URL of a shard or manifest: http://, https://, s3://)\n"
        "  --data SPEC[@WEIGHT]    one part of a mixture (SPEC as above; WEIGHT a positive\n"
        "                          number, default 1); repeatable; not with positional specs\n"
        "  --mixture FILE          the mixture's parts from a JSON file (docs/mixtures.md)\n"
        "  --epoch-samples N       draws per epoch (default: the dataset's sample count)\n"
        "  --seed N                shuffle seed (default 0)\n"
        "  --epochs N              epochs to run (default 1; 0 = without end)\n"
        "  --start-epoch N         first epoch (default 0)\n"
        "  --no-shuffle            dataset order\n"
        "  --block-shards N        shards per shuffle block (default 8)\n"
        "  --remainder pad|drop    samples %% world size policy (default pad)\n"
        "  --no-coverage           leave out the coverage certificate at the end (each\n"
        "                          epoch's delivered samples against its plan; docs/report.md)\n"
        "  --no-index-store        count shards lacking a manifest count by reading them,\n"
        "                          without the on-disk index store of record counts\n"
        "                          ($XDG_CACHE_HOME/zephon/index, else ~/.cache/zephon/index;\n"
        "                          docs/datasets.md; --no-index-cache is the old name)\n"
        "  --rank R --world-size W this rank (default: MPI, else RANK/WORLD_SIZE,\n"
        "                          else SLURM_PROCID/SLURM_NTASKS, else 0/1)\n"
        "pipeline:\n"
        "  --threads N             OpenMP threads of the pipeline (default OMP_NUM_THREADS)\n"
        "  --fetch-parallelism N|auto fetch tasks at once (default auto: from 1, raised\n"
        "                          while the loop waits and chunks queue for fetch)\n"
        "  --map strip[:N|auto]    add the built-in map_transform that strips the\n"
        "                          surrounding whitespace of the --field text (in place),\n"
        "                          with parallelism N (default 1)\n"
        "  --tokenize ID[:N|auto]  tokenize with ID and parallelism N (default auto): gpt2,\n"
        "                          r50k_base, p50k_base, cl100k_base, o200k_base, or a path:\n"
        "                          tokenizer.json (or its folder), .tiktoken, .model\n"
        "  --eot ID                the end-of-document id packed after each document\n"
        "                          (default: the tokenizer's own)\n"
        "  --bos ID|none           the id packed before each document (default: the\n"
        "                          tokenizer's, when its config adds one)\n"
        "  --field NAME            text field (default text)\n"
        "  --pack concat|pad|bestfit[:W] token packing (default concat); bestfit keeps\n"
        "                          documents of up to seq_len + 1 tokens whole, packing\n"
        "                          each window of W documents best-fit (default 256)\n"
        "  --seq-len N             tokens per row minus one (default 2048)\n"
        "  --doc-masking[=continue] also make position_ids, cu_seqlens and per-row document\n"
        "                          counts (positions restart at each row's first document,\n"
        "                          or continue a cut one; docs/packing.md)\n"
        "  --balance K             balance the attention cost (the sum of squared\n"
        "                          document lengths) over each K batches: rows move\n"
        "                          between them so the costliest is as cheap as the\n"
        "                          window allows (gradient accumulation; docs/packing.md)\n"
        "  --microbatch N          rows per batch (default 32)\n"
        "  --prefetch N[:P]|off    load the shards of the next N samples ahead of fetch,\n"
        "                          with P loads at once (default P 1); N or P auto:\n"
        "                          raised while running when fetch waits for shard loads\n"
        "                          (--prefetch auto: both; docs/pipeline.md); default off\n"
        "  --prefetch-batches N|auto finished batches buffered (default auto: from 8,\n"
        "                          deepened while the loop waits in bursts; docs/pipeline.md)\n"
        "  --chunk-samples N       samples per task (default 64)\n"
        "  --in-flight N           chunks in flight (default: from parallelism)\n"
        "  --cache-mb N            decoded-shard cache budget in MiB (default 1024)\n"
        "  --memory-budget SIZE    size every buffer of the pipeline from SIZE bytes\n"
        "                          (512M, 4G: powers of 2): output queue, in-flight\n"
        "                          chunks, shard cache, kept batches; too small for the\n"
        "                          settings is an error that says what they need\n"
        "                          (docs/pipeline.md, \"Memory budget\"; default off)\n"
        "  --segment-mb N|whole    segments of .jsonl(.zst|.gz) shards, in stored MiB\n"
        "                          (default 8 for .jsonl, 2 for .jsonl.zst and .jsonl.gz);\n"
        "                          whole: whole shards.\n"
        "                          Part of the dataset: it changes the shuffled order of\n"
        "                          shards larger than one segment (docs/datasets.md)\n"
        "  --skip-bad-records      skip (and count) bad records instead of failing\n"
        "  --fetch-delay-us N      fault injection: delay each fetched chunk\n"
        "  --watchdog SECONDS      stall watchdog: when no batch came for SECONDS, print\n"
        "                          what every operator is doing (default 30; 0 = off;\n"
        "                          under MPI rank 0 also names the stuck rank)\n"
        "consumer:\n"
        "  --step-time SECONDS     simulated training step per batch (default 0)\n"
        "  --max-batches N         stop after N batches\n"
        "checkpoints (docs/state.md):\n"
        "  --save-state FILE       write the state after the last batch (atomically) at the\n"
        "                          end, also when stopped by SIGINT/SIGTERM; under MPI one\n"
        "                          job state written by rank 0\n"
        "  --save-every N          also every N batches\n"
        "  --resume FILE           continue from a state (the same or another world size)\n"
        "  --skip-batches N-M      make batches N..M (or N) and drop them; repeatable\n"
        "  --h5-driver D           HDF5 shards under mpirun: auto (MPI-IO on a shared file\n"
        "                          system, serial on a local one), mpio or serial\n"
        "outputs:\n"
        "  --emit-ids DIR          write DIR/rank-<R>.ids: shard:record per sample\n"
        "  --emit-digest FILE      one line per batch: index epoch xxh64 (FILE.rank-<R>\n"
        "                          when the world size is above 1)\n"
        "  --emit-samples DIR      write DIR/rank-<R>.samples: per sample its batch, epoch,\n"
        "                          part, pass, padded (0/1) and shard:record\n"
        "  --emit-records DIR      record mode: write DIR/rank-<R>.jsonl, each delivered\n"
        "                          record's JSON on a line (a Parquet row as its JSON object)\n"
        "  --balance-ranks K       MPI: balance the attention cost across the ranks of each\n"
        "                          global step of K microbatches per rank (rows move\n"
        "                          between ranks; docs/mpi.md); --max-batches is rounded\n"
        "                          down to a multiple of K so that --save-state saves at\n"
        "                          a step boundary\n"
        "  --report DIR            MPI: write the cluster fetch-timing report (txt, json,\n"
        "                          csv, html) into DIR (see docs/report.md)\n"
        "  --report-every N        MPI: a report window every N steps (default: about 32\n"
        "                          windows per run)\n"
        "  --observe[=SECONDS]     observability on: print the snapshots every SECONDS\n"
        "                          (default 5) and at the end\n"
        "  --metrics-out FILE      write the final snapshots as one JSON document (FILE.rank-<R>\n"
        "                          when the world size is above 1)\n"
        "  --json                  print the summary (and snapshots) as JSON lines\n"
        "  --quiet                 no progress line\n");
    cli_storage_usage(f);
    fprintf(f,
        "\n"
        "Exit status: 0 done, 1 the run failed, 2 usage error, 128+N stopped by signal N\n"
        "(SIGINT 130, SIGTERM 143; outputs complete and marked partial). docs/cli.md\n");
}

void cli_run_opts_init(cli_run_opts *o)
{
    memset(o, 0, sizeof *o);
    zp_worksource_config_init(&o->ws);
    zp_pipeline_config_init(&o->pc);
    zp_storage_config_init(&o->storage);
    o->field = "text";
    o->max_batches = UINT64_MAX;
    o->map_parallelism = 1;
    o->tok_parallelism = ZP_AUTO;
    o->tok_eot = ZP_TOKEN_DEFAULT;
    o->tok_bos = ZP_TOKEN_DEFAULT;
    o->rank_set = 0;
    o->observe = -1;
}

void cli_run_opts_free(cli_run_opts *o)
{
    for (size_t i = 0; i < o->n_specs; i++)
        free(o->specs[i]);
    for (size_t i = 0; i < o->n_parts; i++)
        free(o->parts[i].name);
    free(o->specs);
    free(o->parts);
    free(o->mix);
    free(o->phases);
    free(o->phase_w);
    o->phases = NULL;
    o->phase_w = NULL;
    o->n_phases = 0;
    free(o->skips);
    o->specs = NULL;
    o->parts = NULL;
    o->mix = NULL;
    o->skips = NULL;
    o->n_specs = o->n_parts = o->n_skips = 0;
    o->ws.parts = NULL;
    o->ws.n_parts = 0;
}

/* "N-M" or "N" (--skip-batches): appended to o->skips. */
static int parse_skip(cli_run_opts *o, const char *v)
{
    if (!v || !*v) {
        fprintf(stderr, "zephon run: --skip-batches needs a value (N-M or N)\n");
        return -1;
    }
    const char *dash = strchr(v, '-');
    char a[32], b[32];
    size_t na = dash ? (size_t)(dash - v) : strlen(v);
    const char *bs = dash ? dash + 1 : v;
    if (na == 0 || na >= sizeof a || strlen(bs) >= sizeof b || !*bs) {
        fprintf(stderr, "zephon run: --skip-batches '%s': not N-M or N (batch numbers)\n", v);
        return -1;
    }
    memcpy(a, v, na);
    a[na] = '\0';
    snprintf(b, sizeof b, "%s", bs);
    uint64_t first, last;
    /* batch numbers travel in the state as JSON integers (signed 64-bit) */
    const uint64_t max = INT64_MAX;
    if (zpi_parse_u64(a, 0, max, 0, &first) != 0 || zpi_parse_u64(b, 0, max, 0, &last) != 0) {
        fprintf(stderr, "zephon run: --skip-batches '%s': %s (batch numbers 0 to %llu)\n", v,
                errno == ERANGE ? "out of range" : "not N-M or N with whole numbers",
                (unsigned long long)max);
        return -1;
    }
    if (last < first) {
        fprintf(stderr, "zephon run: --skip-batches '%s': the last batch %llu is before the first "
                        "%llu\n",
                v, (unsigned long long)last, (unsigned long long)first);
        return -1;
    }
    for (size_t i = 0; i < o->n_skips; i++)
        if (first <= o->skips[i].last && o->skips[i].first <= last) {
            fprintf(stderr, "zephon run: --skip-batches '%s' overlaps --skip-batches %llu-%llu\n", v,
                    (unsigned long long)o->skips[i].first, (unsigned long long)o->skips[i].last);
            return -1;
        }
    if (zpi_grow((void **)&o->skips, &o->cap_skips, o->n_skips + 1, sizeof *o->skips) != 0) {
        fprintf(stderr, "zephon run: out of memory\n");
        return -1;
    }
    /* kept ascending */
    size_t i = o->n_skips;
    while (i > 0 && o->skips[i - 1].first > first) {
        o->skips[i] = o->skips[i - 1];
        i--;
    }
    o->skips[i].first = first;
    o->skips[i].last = last;
    o->n_skips++;
    return 0;
}

/* The value of option opt (what names it in messages, e.g. "--prefetch"
 * or "the P of --prefetch 3:x"): a whole number in [min, max]. */
static int num(const char *opt, const char *v, uint64_t min, uint64_t max, uint64_t *out)
{
    if (!v) {
        fprintf(stderr, "zephon run: %s needs a value\n", opt);
        return -1;
    }
    if (zpi_parse_u64(v, min, max, 0, out) == 0)
        return 0;
    if (errno == ERANGE)
        fprintf(stderr, "zephon run: %s %s: out of range (%llu to %llu)\n", opt, v,
                (unsigned long long)min, (unsigned long long)max);
    else
        fprintf(stderr, "zephon run: %s '%s': not a whole number (%llu to %llu)\n", opt, v,
                (unsigned long long)min, (unsigned long long)max);
    return -1;
}

static int seconds(const char *opt, const char *v, double *out)
{
    if (!v) {
        fprintf(stderr, "zephon run: %s needs a value\n", opt);
        return -1;
    }
    if (zpi_parse_double(v, 0, MAX_SECONDS, out) == 0)
        return 0;
    if (errno == ERANGE)
        fprintf(stderr, "zephon run: %s %s: out of range (0 to %.0f seconds)\n", opt, v,
                MAX_SECONDS);
    else
        fprintf(stderr, "zephon run: %s '%s': not a number of seconds\n", opt, v);
    return -1;
}

/* A parallelism: 1..MAX_PAR, or "auto" (ZP_AUTO: tuned while running). */
static int par_num(const char *what, const char *v, uint64_t *par)
{
    if (v && !strcmp(v, "auto")) {
        *par = ZP_AUTO;
        return 0;
    }
    return num(what, v, 1, MAX_PAR, par);
}

/* "NAME[:N]" (--map strip:4, --tokenize gpt2:8): the part after the last
 * colon, when there is one, must be a parallelism. */
static int name_par(const char *opt, const char *v, char *name, size_t cap, uint64_t *par)
{
    if (!v || !*v) {
        fprintf(stderr, "zephon run: %s needs a value\n", opt);
        return -1;
    }
    const char *colon = strrchr(v, ':');
    size_t n = colon ? (size_t)(colon - v) : strlen(v);
    if (n == 0 || n >= cap) {
        fprintf(stderr, "zephon run: %s '%s': %s\n", opt, v,
                n ? "too long" : "nothing before the ':'");
        return -1;
    }
    memcpy(name, v, n);
    name[n] = '\0';
    if (!colon)
        return 0;
    char what[600];
    snprintf(what, sizeof what, "%s %.500s: the parallelism", opt, v);
    return par_num(what, colon + 1, par);
}

/* --tokenize ID|PATH[:N]: a value that names an existing path is the
 * tokenizer whole (a path may hold colons), and so is one whose part after
 * the last colon looks like a path (has a '/' or a '.': "cl100k:r.tiktoken");
 * otherwise the part after the last colon is the parallelism. */
static int tokenize_spec(const char *opt, const char *v, char *name, size_t cap, uint64_t *par)
{
    if (!v || !*v) {
        fprintf(stderr, "zephon run: %s needs a value\n", opt);
        return -1;
    }
    struct stat sb;
    const char *colon = strrchr(v, ':');
    size_t n = strlen(v);
    if (stat(v, &sb) != 0 && colon && !strpbrk(colon + 1, "/."))
        n = (size_t)(colon - v);
    if (n == 0 || n >= cap) {
        fprintf(stderr, "zephon run: %s '%s': %s\n", opt, v,
                n ? "too long" : "nothing before the ':'");
        return -1;
    }
    memcpy(name, v, n);
    name[n] = '\0';
    if (v[n] == '\0')
        return 0;
    char what[600];
    snprintf(what, sizeof what, "%s %.500s: the parallelism", opt, v);
    return par_num(what, v + n + 1, par);
}

/* --eot ID, --bos ID|none|-1: a token id (checked against the vocabulary
 * when the tokenizer is loaded). */
static int token_id(const char *opt, const char *v, int none_ok, int64_t *out)
{
    if (none_ok && v && (!strcmp(v, "none") || !strcmp(v, "-1"))) {
        *out = -1;
        return 0;
    }
    uint64_t u;
    if (num(opt, v, 0, INT32_MAX, &u) != 0)
        return -1;
    *out = (int64_t)u;
    return 0;
}

static int parse_args(cli_run_opts *o, int argc, char **argv);

int cli_run_opts_parse(cli_run_opts *o, int argc, char **argv)
{
    int rc = parse_args(o, argc, argv);
    if (rc != 0)
        cli_run_opts_free(o); /* the caller returns at once */
    return rc;
}

/* The option groups below return -1 (a bad value: message printed), 0
 * (not one of the group's options), 1 (a flag) or 2 (an option and its
 * value v). An option taking a whole number in [lo, hi], stored into dst: */
#define NUM(dst, lo, hi)                                                                           \
    do {                                                                                           \
        uint64_t u_;                                                                               \
        if (num(a, v, (lo), (hi), &u_) != 0)                                                       \
            return -1;                                                                             \
        dst = u_;                                                                                  \
        used = 2;                                                                                  \
    } while (0)
/* An option taking a string. */
#define STR(dst)                                                                                   \
    do {                                                                                           \
        if (!v || !*v) {                                                                           \
            fprintf(stderr, "zephon run: %s needs a value\n", a);                                  \
            return -1;                                                                             \
        }                                                                                          \
        dst = v;                                                                                   \
        used = 2;                                                                                  \
    } while (0)

/* The data, the plan and checkpoints: --data, --mixture, --seed, --save-state, ... */
static int opt_data(cli_run_opts *o, const char *a, const char *v)
{
    int used = 1;
    if (!strcmp(a, "--data")) {
        const char *val;
        STR(val);
        if (o->mixture_file || o->positional) {
            fprintf(stderr, "zephon run: %s\n",
                    o->mixture_file ? "--data and --mixture cannot be combined (list every "
                                      "part in the mixture file)"
                                    : "positional specs cannot be combined with --data (give "
                                      "each part with --data SPEC[@WEIGHT])");
            return -1;
        }
        if (cli_run_data_option(o, val) != 0)
            return -1;
    } else if (!strcmp(a, "--mixture")) {
        if (o->mixture_file || o->n_parts || o->positional) {
            fprintf(stderr, "zephon run: %s\n",
                    o->mixture_file ? "--mixture given twice"
                    : o->n_parts    ? "--data and --mixture cannot be combined (list every "
                                      "part in the mixture file)"
                                    : "positional specs cannot be combined with --mixture");
            return -1;
        }
        STR(o->mixture_file);
        if (cli_run_read_mixture(o, o->mixture_file) != 0)
            return -1;
    } else if (!strcmp(a, "--epoch-samples")) {
        NUM(o->ws.epoch_samples, 1, INT64_MAX);
        o->epoch_samples_set = 1;
    } else if (!strcmp(a, "--save-state"))
        STR(o->save_state);
    else if (!strcmp(a, "--save-every"))
        NUM(o->save_every, 1, INT64_MAX);
    else if (!strcmp(a, "--resume"))
        STR(o->resume);
    else if (!strcmp(a, "--skip-batches")) {
        if (parse_skip(o, v) != 0)
            return -1;
        used = 2;
    } else if (!strcmp(a, "--emit-samples"))
        STR(o->emit_samples);
    else if (!strcmp(a, "--emit-records"))
        STR(o->emit_records);
    else if (!strcmp(a, "--seed"))
        NUM(o->ws.seed, 0, UINT64_MAX);
    else if (!strcmp(a, "--epochs"))
        NUM(o->pc.epochs, 0, UINT32_MAX);
    else if (!strcmp(a, "--start-epoch"))
        NUM(o->start_epoch, 0, UINT32_MAX - 1);
    else if (!strcmp(a, "--no-shuffle"))
        o->ws.shuffle = 0;
    else if (!strcmp(a, "--no-coverage"))
        o->no_coverage = 1;
    else if (!strcmp(a, "--no-index-store") || !strcmp(a, "--no-index-cache"))
        o->no_index_store = 1;
    else if (!strcmp(a, "--block-shards"))
        NUM(o->ws.shuffle_block_shards, 1, UINT32_MAX);
    else if (!strcmp(a, "--remainder")) {
        if (v && !strcmp(v, "pad"))
            o->ws.remainder = ZP_REMAINDER_PAD;
        else if (v && !strcmp(v, "drop"))
            o->ws.remainder = ZP_REMAINDER_DROP;
        else {
            fprintf(stderr, "zephon run: --remainder '%s': pad or drop\n", v ? v : "");
            return -1;
        }
        used = 2;
    } else if (!strcmp(a, "--rank")) {
        NUM(o->ws.rank, 0, UINT32_MAX - 1);
        o->rank_set |= 1;
    } else if (!strcmp(a, "--world-size")) {
        NUM(o->ws.world_size, 1, UINT32_MAX);
        o->rank_set |= 2;
    }
    else
        return 0;
    return used;
}

/* The pipeline: threads, operators, batches, prefetch, caches. */
static int opt_pipeline(cli_run_opts *o, const char *a, const char *v)
{
    int used = 1;
    uint64_t u = 0;
    if (!strcmp(a, "--threads"))
        NUM(o->pc.threads, 1, MAX_PAR);
    else if (!strcmp(a, "--fetch-parallelism")) {
        if (par_num(a, v, &u) != 0)
            return -1;
        o->pc.fetch_parallelism = (size_t)u;
        used = 2;
    }
    else if (!strcmp(a, "--map")) {
        char name[16];
        if (name_par(a, v, name, sizeof name, &o->map_parallelism) != 0)
            return -1;
        if (strcmp(name, "strip") != 0) {
            fprintf(stderr, "zephon run: --map '%s': the built-in map is strip[:N]\n", v);
            return -1;
        }
        o->map_strip = 1;
        used = 2;
    } else if (!strcmp(a, "--tokenize")) {
        if (tokenize_spec(a, v, o->tok_id, sizeof o->tok_id, &o->tok_parallelism) != 0)
            return -1;
        used = 2;
    } else if (!strcmp(a, "--eot") || !strcmp(a, "--bos")) {
        if (token_id(a, v, a[2] == 'b', a[2] == 'b' ? &o->tok_bos : &o->tok_eot) != 0)
            return -1;
        used = 2;
    } else if (!strcmp(a, "--field"))
        STR(o->field);
    else if (!strcmp(a, "--h5-driver")) {
        if (v && !strcmp(v, "auto"))
            o->h5_driver = 0;
        else if (v && !strcmp(v, "mpio"))
            o->h5_driver = 1;
        else if (v && !strcmp(v, "serial"))
            o->h5_driver = 2;
        else {
            fprintf(stderr, "zephon run: --h5-driver '%s': auto, mpio or serial\n", v ? v : "");
            return -1;
        }
        used = 2;
    } else if (!strcmp(a, "--pack")) {
        if (v && !strcmp(v, "concat"))
            o->pack = ZP_PACK_CONCAT;
        else if (v && !strcmp(v, "pad"))
            o->pack = ZP_PACK_PAD;
        else if (v && !strcmp(v, "bestfit"))
            o->pack = ZP_PACK_BESTFIT;
        else if (v && !strncmp(v, "bestfit:", 8)) {
            o->pack = ZP_PACK_BESTFIT;
            if (zpi_parse_u64(v + 8, 1, ZP_PACK_WINDOW_MAX, 0, &o->pack_window) != 0) {
                fprintf(stderr,
                        "zephon run: --pack '%s': the window must be 1..%u documents\n", v,
                        (unsigned)ZP_PACK_WINDOW_MAX);
                return -1;
            }
        } else {
            fprintf(stderr, "zephon run: --pack '%s': concat, pad or bestfit[:WINDOW]\n",
                    v ? v : "");
            return -1;
        }
        used = 2;
    } else if (!strcmp(a, "--doc-masking") || !strcmp(a, "--doc-masking=restart")) {
        o->doc_masking = 1;
    } else if (!strcmp(a, "--doc-masking=continue")) {
        o->doc_masking = 2;
    } else if (!strncmp(a, "--doc-masking=", 14)) {
        fprintf(stderr, "zephon run: %s: --doc-masking takes =restart or =continue\n", a);
        return -1;
    } else if (!strcmp(a, "--balance"))
        NUM(o->balance, 0, ZP_BALANCE_WINDOW_MAX);
    else if (!strcmp(a, "--seq-len"))
        NUM(o->pc.seq_len, 1, MAX_ROWS);
    else if (!strcmp(a, "--microbatch"))
        NUM(o->pc.microbatch_size, 1, MAX_ROWS);
    else if (!strcmp(a, "--prefetch") && v && !strcmp(v, "off")) {
        o->prefetch_buffer = 0;
        o->prefetch_parallelism = 1;
        o->prefetch_set = 1;
        used = 2;
    } else if (!strcmp(a, "--prefetch")) {
        char n[32];
        uint64_t par = v && !strncmp(v, "auto", 4) ? ZP_AUTO : 1; /* auto: auto:auto */
        if (name_par(a, v, n, sizeof n, &par) != 0)
            return -1;
        if (!strcmp(n, "auto"))
            u = ZP_AUTO;
        else if (num("--prefetch", n, 1, (uint64_t)1 << 40, &u) != 0)
            return -1;
        o->prefetch_buffer = u;
        o->prefetch_parallelism = par;
        o->prefetch_set = 1;
        used = 2;
    } else if (!strcmp(a, "--prefetch-batches") && v && !strcmp(v, "auto")) {
        o->pc.prefetch_batches = ZP_PREFETCH_AUTO;
        used = 2;
    } else if (!strcmp(a, "--prefetch-batches"))
        NUM(o->pc.prefetch_batches, 1, 4096);
    else if (!strcmp(a, "--chunk-samples"))
        NUM(o->pc.chunk_samples, 1, MAX_ROWS);
    else if (!strcmp(a, "--in-flight"))
        NUM(o->pc.in_flight_chunks, 1, MAX_ROWS);
    else if (!strcmp(a, "--cache-mb")) {
        NUM(u, 0, (uint64_t)(SIZE_MAX >> 20));
        o->pc.shard_cache_bytes = (size_t)u << 20;
    } else if (!strcmp(a, "--memory-budget")) {
        if (!v || zpi_parse_u64(v, 1, (uint64_t)(SIZE_MAX >> 1), 1, &u) != 0) {
            fprintf(stderr,
                    "zephon run: --memory-budget '%s': a size in bytes, with an optional "
                    "suffix K, M, G, T (powers of 2), e.g. 512M or 4G\n",
                    v ? v : "");
            return -1;
        }
        o->pc.memory_budget = (size_t)u;
        used = 2;
    } else if (!strcmp(a, "--segment-mb") && v && !strcmp(v, "whole")) {
        o->segment_bytes = SIZE_MAX;
        used = 2;
    } else if (!strcmp(a, "--segment-mb")) {
        NUM(u, 1, (uint64_t)(SIZE_MAX >> 21));
        o->segment_bytes = (size_t)u << 20;
    } else if (!strcmp(a, "--skip-bad-records"))
        o->pc.on_bad_record = ZP_BAD_RECORD_SKIP;
    else if (!strcmp(a, "--fetch-delay-us"))
        NUM(o->pc.fetch_delay_us, 0, (uint64_t)MAX_SECONDS * 1000000);
    else if (!strcmp(a, "--watchdog")) {
        if (seconds(a, v, &o->pc.watchdog_seconds) != 0)
            return -1;
        used = 2;
    } else
        return 0;
    return used;
}

/* The consumer and the outputs: --step-time, --max-batches, --emit-*, --report, --observe, --json. */
static int opt_output(cli_run_opts *o, const char *a, const char *v)
{
    int used = 1;
    if (!strcmp(a, "--step-time")) {
        if (seconds(a, v, &o->step_time) != 0)
            return -1;
        used = 2;
    } else if (!strcmp(a, "--max-batches"))
        NUM(o->max_batches, 1, UINT64_MAX);
    else if (!strcmp(a, "--emit-ids"))
        STR(o->emit_ids);
    else if (!strcmp(a, "--emit-digest"))
        STR(o->emit_digest);
    else if (!strcmp(a, "--report"))
        STR(o->report_dir);
    else if (!strcmp(a, "--report-every"))
        NUM(o->report_every, 1, UINT64_MAX);
    else if (!strcmp(a, "--balance-ranks"))
        NUM(o->balance_ranks, 1, ZP_BALANCE_WINDOW_MAX);
    else if (!strcmp(a, "--observe"))
        o->observe = 5.0;
    else if (!strncmp(a, "--observe=", 10)) {
        if (seconds("--observe", a + 10, &o->observe) != 0)
            return -1;
    } else if (!strcmp(a, "--metrics-out"))
        STR(o->metrics_out);
    else if (!strcmp(a, "--json"))
        o->json = 1;
    else if (!strcmp(a, "--quiet"))
        o->quiet = 1;
    else
        return 0;
    return used;
}

#undef NUM
#undef STR

static int parse_args(cli_run_opts *o, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int so = cli_storage_opt(&o->storage, "zephon run", a, v);
        if (so == 0 && (!strcmp(a, "--help") || !strcmp(a, "-h")))
            return 1;
        if (so == 0 && (so = opt_data(o, a, v)) == 0 && (so = opt_pipeline(o, a, v)) == 0)
            so = opt_output(o, a, v);
        if (so < 0)
            return -1;
        if (so > 0) {
            i += so - 1;
            continue;
        }
        if (a[0] == '-' && a[1]) {
            fprintf(stderr, "zephon run: unknown option '%s'\n", a);
            return -1;
        } else {
            if (o->n_parts) {
                char red[4096];
                zp_dataset_spec_redact(a, red, sizeof red);
                fprintf(stderr, "zephon run: '%s': positional specs cannot be combined with %s "
                                "(give each part with --data SPEC[@WEIGHT])\n",
                        red, o->mixture_file ? "--mixture" : "--data");
                return -1;
            }
            if (cli_run_push_spec(o, zpi_strdup(a)) != 0)
                return -1;
            o->positional = 1;
        }
    }
    if (o->n_specs == 0) {
        fprintf(stderr, "zephon run: no dataset given\n");
        return -1;
    }
    for (size_t i = 0; i < o->n_parts; i++)
        for (size_t j = 0; j < i; j++)
            if (!strcmp(o->parts[i].name, o->parts[j].name)) {
                fprintf(stderr, "zephon run: %s%s%stwo parts of the mixture are named '%s' (parts "
                                "%zu and %zu)\n",
                        o->mixture_file ? "--mixture " : "",
                        o->mixture_file ? o->mixture_file : "", o->mixture_file ? ": " : "",
                        o->parts[i].name, j, i);
                return -1;
            }
    if (o->save_every && !o->save_state) {
        fprintf(stderr, "zephon run: --save-every needs --save-state FILE\n");
        return -1;
    }
    if (o->resume && o->start_epoch) {
        fprintf(stderr, "zephon run: --start-epoch cannot be combined with --resume (the state "
                        "holds the position)\n");
        return -1;
    }
    return 0;
}

/* An environment variable holding a rank or a world size: absent (1),
 * valid (0), or an error (-1, message printed). */
static int env_num(const char *name, uint64_t min, uint64_t max, uint64_t *out)
{
    const char *v = getenv(name);
    if (!v)
        return 1;
    if (zpi_parse_u64(v, min, max, 0, out) == 0)
        return 0;
    fprintf(stderr, "zephon run: %s=%s: not a whole number from %llu to %llu\n", name, v,
            (unsigned long long)min, (unsigned long long)max);
    return -1;
}

int cli_run_rank_from_env(cli_run_opts *o)
{
    static const char *const pairs[][2] = {{"RANK", "WORLD_SIZE"},
                                           {"SLURM_PROCID", "SLURM_NTASKS"}};
    uint64_t r = 0, w = 1;
    if (o->rank_set == 3)
        return 0;
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        int a = env_num(pairs[k][0], 0, UINT32_MAX - 1, &r);
        int b = env_num(pairs[k][1], 1, UINT32_MAX, &w);
        if (a < 0 || b < 0)
            return -1;
        if (a == 0 && b == 0)
            break;
        r = 0;
        w = 1;
    }
    if (!(o->rank_set & 1))
        o->ws.rank = (uint32_t)r;
    if (!(o->rank_set & 2))
        o->ws.world_size = (uint32_t)w;
    return 0;
}
