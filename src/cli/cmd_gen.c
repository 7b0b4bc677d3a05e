/* cmd_gen.c - `zephon gen --out DIR ...`: the command-line face of the
 * synthetic dataset generator (src/api/gen.c): option parsing and printing. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "api/gen.h"
#include "formats/hdf5_util.h"
#include "base/util.h"

static void gen_usage(FILE *f)
{
    fprintf(f,
            "usage: zephon gen --out DIR [--shards N] [--samples-per-shard N | --bytes TOTAL]\n"
            "                  [--format jsonl|jsonl.zst] [--zstd-level L] [--seed S]\n"
            "                  [--uneven] [--hash] [--threads T] [--single-frame]\n"
            "       zephon gen --format h5 --out FILE.h5 [--samples-per-shard N | --bytes TOTAL]\n"
            "                  [--shards N] [--features F] [--h5-tokens] [--seed S]\n"
            "\n"
            "Generate a synthetic text dataset: records {\"id\": N, \"text\": \"...\"} with\n"
            "English-like text (200 B - 20 KB per document), deterministic in the options.\n"
            "  --out DIR              output folder (created); writes shard-NNNNN.* and\n"
            "                         manifest.json\n"
            "  --shards N             number of shards, 1 to 1000000 (default 4)\n"
            "  --samples-per-shard N  records per shard (default 1000)\n"
            "  --bytes TOTAL          instead: about TOTAL bytes of JSONL in all (suffixes\n"
            "                         k, M, G, T = 10^3, 10^6, ...; Ki, Mi, Gi, Ti = 2^10, ...)\n"
            "  --format F             jsonl, jsonl.zst (default) or h5: one HDF5 file FILE.h5\n"
            "                         with /text (strings), /features float32 [N, F],\n"
            "                         /label int64 [N] and, with --h5-tokens, /tokens\n"
            "                         (token id sequences); N = shards x samples-per-shard\n"
            "                         or about TOTAL bytes (docs/hdf5.md)\n"
            "  --features F           h5: columns of /features, 0 to 1048576 (default 16)\n"
            "  --h5-tokens            h5: also write /tokens\n"
            "  --zstd-level L         zstd level (default 3)\n"
            "  --single-frame         jsonl.zst: each shard one zstd frame (default: the zstd\n"
            "                         seekable format, frames of about 4 MiB and a seek table;\n"
            "                         docs/datasets.md \"Segments\")\n"
            "  --seed S               random seed (default 1)\n"
            "  --uneven               very uneven shard sizes (each half the previous)\n"
            "  --hash                 write XXH64 content hashes into the manifest\n"
            "  --threads T            worker threads, 1 to 1024 (default: online CPUs); the\n"
            "                         output does not depend on it\n"
            "Exit status: 0 done, 1 failed (message names the file), 2 usage error.\n");
}

/* --bytes: a number (decimals allowed) with an optional suffix k, M, G, T
 * (powers of 10) or Ki, Mi, Gi, Ti (powers of 2), and an optional B; a
 * whole count of bytes from 1 to 2^50. 0, or -1 with errno. */
static int parse_bytes(const char *s, uint64_t *out)
{
    size_t n = strlen(s);
    char num[64];
    const char *suf = s;
    while (*suf && (strchr("0123456789.", *suf) || ((*suf == 'e' || *suf == 'E') && suf != s)))
        suf++;
    if (suf == s || (size_t)(suf - s) >= sizeof num || n >= 64) {
        errno = EINVAL;
        return -1;
    }
    memcpy(num, s, (size_t)(suf - s));
    num[suf - s] = '\0';
    double m = 1;
    if (*suf) {
        int bin = suf[1] == 'i';
        switch (suf[0]) {
        case 'k': case 'K': m = bin ? 0x1p10 : 1e3; break;
        case 'm': case 'M': m = bin ? 0x1p20 : 1e6; break;
        case 'g': case 'G': m = bin ? 0x1p30 : 1e9; break;
        case 't': case 'T': m = bin ? 0x1p40 : 1e12; break;
        case 'B': bin = -1; break;
        default: errno = EINVAL; return -1;
        }
        const char *rest = bin < 0 ? suf : suf + 1 + bin;
        if (*rest == 'B')
            rest++;
        if (*rest) {
            errno = EINVAL;
            return -1;
        }
    }
    double v;
    if (zpi_parse_double(num, 0, 0x1p50, &v) != 0)
        return -1;
    v = floor(v * m);
    if (v < 1 || v > 0x1p50) {
        errno = ERANGE;
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

/* The options of `zephon gen`. */
typedef struct gen_args {
    zpi_gen_config o;
    zpi_h5_sample_opts h5o;
    int h5, shards_set;
} gen_args;

/* Option C (getopt_long's code) with its value optarg into A. Returns -1
 * to go on (*BAD and *RANGE set when the value is invalid), or the exit
 * status (help printed: 0; an unknown option: 2). */
static int gen_option(gen_args *a, int c, const char **bad, const char **range)
{
    zpi_gen_config *o = &a->o;
    zpi_h5_sample_opts *h5o = &a->h5o;
    uint64_t v = 0;
    switch (c) {
    case 'o': o->out = optarg; break;
    case 'n':
        if (zpi_parse_u64(optarg, 1, 1000000, 0, &v) != 0)
            *bad = "--shards", *range = "1 to 1000000";
        o->shards = (uint32_t)v;
        a->shards_set = 1;
        break;
    case 's':
        if (zpi_parse_u64(optarg, 1, (uint64_t)1 << 40, 0, &v) != 0)
            *bad = "--samples-per-shard", *range = "1 to 2^40";
        o->samples_per_shard = v;
        break;
    case 'b':
        if (parse_bytes(optarg, &o->total_bytes) != 0)
            *bad = "--bytes", *range = "1 byte to 2^50 bytes";
        break;
    case 'l':
        if (zpi_parse_u64(optarg, 1, 22, 0, &v) != 0)
            *bad = "--zstd-level", *range = "1 to 22";
        o->level = (int)v;
        break;
    case 'f':
        if (!strcmp(optarg, "jsonl"))
            o->zst = 0;
        else if (!strcmp(optarg, "jsonl.zst"))
            o->zst = 1;
        else if (!strcmp(optarg, "h5"))
            a->h5 = 1;
        else
            *bad = "--format", *range = "jsonl, jsonl.zst or h5";
        break;
    case 'S':
        if (zpi_parse_u64(optarg, 0, UINT64_MAX, 0, &o->seed) != 0)
            *bad = "--seed", *range = "0 to 2^64-1";
        break;
    case 'u': o->uneven = 1; break;
    case '1': o->single_frame = 1; break;
    case 'H': o->hash = 1; break;
    case 't':
        if (zpi_parse_u64(optarg, 1, 1024, 0, &v) != 0)
            *bad = "--threads", *range = "1 to 1024";
        o->threads = (uint32_t)v;
        break;
    case 'F':
        if (zpi_parse_u64(optarg, 0, 1u << 20, 0, &v) != 0)
            *bad = "--features", *range = "0 to 1048576";
        h5o->features = (uint32_t)v;
        break;
    case 'K': h5o->tokens = 1; break;
    case 'h':
        gen_usage(stdout);
        return cli_flush_stdout("zephon gen") == 0 ? 0 : 1;
    default:
        fprintf(stderr, "(zephon gen --help lists the options)\n");
        return 2;
    }
    return -1;
}

/* Parse the options into A. Returns -1 to go on, or the exit status (help
 * printed: 0; a usage error: 2, printed). */
static int gen_parse(int argc, char **argv, gen_args *a)
{
    static const struct option opts[] = {
        {"out", required_argument, NULL, 'o'},
        {"shards", required_argument, NULL, 'n'},
        {"samples-per-shard", required_argument, NULL, 's'},
        {"bytes", required_argument, NULL, 'b'},
        {"zstd-level", required_argument, NULL, 'l'},
        {"format", required_argument, NULL, 'f'},
        {"seed", required_argument, NULL, 'S'},
        {"uneven", no_argument, NULL, 'u'},
        {"single-frame", no_argument, NULL, '1'},
        {"hash", no_argument, NULL, 'H'},
        {"threads", required_argument, NULL, 't'},
        {"features", required_argument, NULL, 'F'},
        {"h5-tokens", no_argument, NULL, 'K'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    zpi_gen_config_init(&a->o);
    zpi_h5_sample_opts_init(&a->h5o);
    const zpi_gen_config *o = &a->o;
    int c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        const char *bad = NULL, *range = NULL;
        int rc = gen_option(a, c, &bad, &range);
        if (rc >= 0)
            return rc;
        if (bad) {
            fprintf(stderr, "zephon gen: %s '%s': invalid value (%s)\n", bad, optarg, range);
            return 2;
        }
    }
    if (!o->out || optind < argc) {
        fprintf(stderr, "zephon gen: %s\n(zephon gen --help lists the options)\n",
                !o->out ? "--out DIR is required" : "unexpected argument");
        return 2;
    }
    if (o->total_bytes && o->samples_per_shard) {
        fprintf(stderr, "zephon gen: give --samples-per-shard or --bytes, not both\n");
        return 2;
    }
    return -1;
}

/* --format h5: one HDF5 file of N records of about `per` bytes each. */
static int gen_h5(const gen_args *a)
{
    const zpi_gen_config *o = &a->o;
    const zpi_h5_sample_opts *h5o = &a->h5o;
    uint64_t per = (uint64_t)h5o->features * 4 + 8 + h5o->text_bytes + 80 + (h5o->tokens ? 140 : 0);
    uint64_t shards = a->shards_set ? o->shards : 1, n;
    if (o->total_bytes)
        n = o->total_bytes / per ? o->total_bytes / per : 1;
    else if (o->samples_per_shard > UINT64_MAX / shards)
        n = UINT64_MAX;
    else
        n = shards * (o->samples_per_shard ? o->samples_per_shard : 1000);
    zpi_err msg;
    double t0 = zpi_now();
    if (zpi_hdf5_write_sample(o->out, n, o->seed, h5o, &msg) != ZP_OK) {
        fprintf(stderr, "zephon gen: %s\n", msg.msg);
        return 1;
    }
    printf("generated %s (hdf5): %llu samples, /text%s%s%s in %.2f s\n", o->out,
           (unsigned long long)n, h5o->features ? ", /features" : "", h5o->label ? ", /label" : "",
           h5o->tokens ? ", /tokens" : "", zpi_now() - t0);
    return cli_flush_stdout("zephon gen") == 0 ? 0 : 1;
}

/* JSONL shards and their manifest. */
static int gen_jsonl(const gen_args *a)
{
    const zpi_gen_config *o = &a->o;
    zpi_gen_result r;
    zpi_err err = {0};
    if (zpi_gen(o, &r, &err) != ZP_OK) {
        fprintf(stderr, "zephon gen: %s\n", zpi_err_msg(&err));
        return 1;
    }
    free(r.manifest);
    printf("generated %u shards (%s), %llu samples, %.1f MB of JSONL", o->shards,
           o->zst ? "jsonl.zst" : "jsonl", (unsigned long long)r.samples,
           (double)r.jsonl_bytes / 1e6);
    if (o->zst)
        printf(" -> %.1f MB compressed (ratio %.2f, level %d)", (double)r.written_bytes / 1e6,
               r.written_bytes ? (double)r.jsonl_bytes / (double)r.written_bytes : 0.0, o->level);
    printf("\nin %.2f s (%.0f MB/s of JSONL, %u threads); wrote %s/manifest.json\n", r.seconds,
           r.gen_seconds > 0 ? (double)r.jsonl_bytes / 1e6 / r.gen_seconds : 0.0, r.threads, o->out);
    return cli_flush_stdout("zephon gen") == 0 ? 0 : 1;
}

int cli_cmd_gen(int argc, char **argv)
{
    gen_args a = {0};
    int rc = gen_parse(argc, argv, &a);
    if (rc >= 0)
        return rc;
    return a.h5 ? gen_h5(&a) : gen_jsonl(&a);
}
