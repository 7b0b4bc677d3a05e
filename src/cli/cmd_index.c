/* cmd_index.c - `zephon index [--hash] -o MANIFEST SHARD_OR_GLOB...`
 *
 * Reads every shard once (validating its framing and line limits), counts
 * its records and writes a manifest (docs/datasets.md). Shard paths are
 * written relative to the manifest's folder when they lie under it. The
 * manifest being written is never read as input (a glob or a folder that
 * holds it skips it), so running the same command again gives the same
 * bytes. */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "base/util.h"
#include "zephon/dataset.h"
#include "data/dataset_internal.h"
#include "data/manifest.h"

static void index_usage(FILE *f)
{
    fprintf(f,
            "usage: zephon index [--hash] [--allow-empty] [--max-record-bytes N] -o MANIFEST\n"
            "                    SHARD_OR_GLOB...\n"
            "\n"
            "Count the records of every shard and write MANIFEST (JSON).\n"
            "  SHARD_OR_GLOB     a .jsonl, .jsonl.zst or .jsonl.gz file, a folder (its\n"
            "                    shard files, or its manifest.json), a quoted glob pattern\n"
            "                    ('data/*.jsonl.zst'), an existing manifest (.json), or\n"
            "                    the URL of a shard or manifest (http://, https://, s3://)\n"
            "  -o, --output F    the manifest to write (replaced atomically; never read\n"
            "                    as input, even when a glob or folder holds it)\n"
            "  --hash            also write each shard's XXH64 content hash\n"
            "  --no-count        write the shards and their sizes only, without reading\n"
            "                    them (a manifest from a listing: an s3:// folder or\n"
            "                    glob of many keys); a run counts their records\n"
            "  --allow-empty     accept shards without records\n"
            "  --max-record-bytes N  longest line accepted (default 16 MiB)\n"
            "  -v, --verbose     print each shard as it is indexed\n");
    cli_storage_usage(f);
}

static void log_stderr(void *user, zp_log_level lvl, const char *msg)
{
    int verbose = *(const int *)user;
    /* errors are printed once, by the command, from zp_dataset_errmsg() */
    if (lvl == ZP_LOG_WARN || (verbose && lvl >= ZP_LOG_INFO))
        fprintf(stderr, "zephon index: %s\n", msg);
}

/* The options of `zephon index`. */
typedef struct index_args {
    const char *out;
    int hash, verbose, no_count;
    zp_dataset_config cfg;
} index_args;

/* Parse the options into A. Returns -1 to go on, or the exit status (help
 * printed: 0; a usage error: 2, printed). */
static int index_parse(int argc, char **argv, index_args *a)
{
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"hash", no_argument, NULL, 'H'},
        {"no-count", no_argument, NULL, 'N'},
        {"allow-empty", no_argument, NULL, 'E'},
        {"max-record-bytes", required_argument, NULL, 'R'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        /* remote storage (storage_opts.c): codes from 256, by name below */
        {"cache-dir", required_argument, NULL, 256},
        {"cache-limit", required_argument, NULL, 256},
        {"connect-timeout", required_argument, NULL, 256},
        {"low-speed-time", required_argument, NULL, 256},
        {"low-speed-limit", required_argument, NULL, 256},
        {"retries", required_argument, NULL, 256},
        {"retry-base", required_argument, NULL, 256},
        {"retry-max", required_argument, NULL, 256},
        {"ca-file", required_argument, NULL, 256},
        {"s3-endpoint", required_argument, NULL, 256},
        {"s3-region", required_argument, NULL, 256},
        {"lease", required_argument, NULL, 256},
        {"cache-policy", required_argument, NULL, 256},
        {"insecure", no_argument, NULL, 256},
        {NULL, 0, NULL, 0},
    };
    zp_dataset_config *cfg = &a->cfg;
    zp_dataset_config_init(cfg);
    optind = 0; /* full getopt re-initialisation (GNU) */
    int c;
    int li = 0;
    while ((c = getopt_long(argc, argv, "o:vh", opts, &li)) != -1) {
        switch (c) {
        case 256: {
            char name[64];
            snprintf(name, sizeof name, "--%s", opts[li].name);
            if (cli_storage_opt(&cfg->storage, "zephon index", name, optarg) < 0)
                return 2;
            break;
        }
        case 'o': a->out = optarg; break;
        case 'H': a->hash = 1; break;
        case 'N': a->no_count = 1; break;
        case 'E': cfg->allow_empty_shards = 1; break;
        case 'v': a->verbose = 1; break;
        case 'R': {
            uint64_t v;
            if (zpi_parse_u64(optarg, 1, SIZE_MAX / 2, 1, &v) != 0) {
                fprintf(stderr,
                        "zephon index: --max-record-bytes '%s': %s (a size from 1 byte to %zu, "
                        "k/M/G suffixes allowed)\n",
                        optarg, errno == ERANGE ? "out of range" : "not a size", SIZE_MAX / 2);
                return 2;
            }
            cfg->max_record_bytes = (size_t)v;
            break;
        }
        case 'h': index_usage(stdout); return 0;
        default: index_usage(stderr); return 2;
        }
    }
    if (a->hash && a->no_count) {
        fprintf(stderr, "zephon index: --hash reads every shard: it cannot be combined with "
                        "--no-count\n");
        return 2;
    }
    if (!a->out || optind >= argc) {
        fprintf(stderr, "zephon index: %s\n\n", !a->out ? "-o MANIFEST is required" : "no shards given");
        index_usage(stderr);
        return 2;
    }
    return -1;
}

/* The shards given (argv[optind..]) added and indexed, the manifest
 * written (never read as input: a glob or folder may hold it); T_INDEX and
 * T_WRITE the time each took. 0, or -1 (printed). */
static int index_write(zp_dataset *ds, const index_args *a, int argc, char **argv,
                       double *t_index, double *t_write)
{
    if (zp_dataset_exclude(ds, a->out) != ZP_OK) {
        fprintf(stderr, "zephon index: %s\n", zp_dataset_errmsg(ds));
        return -1;
    }
    double t0 = zpi_now();
    for (int i = optind; i < argc; i++) {
        if (zp_dataset_add(ds, argv[i]) != ZP_OK) {
            fprintf(stderr, "zephon index: %s\n", zp_dataset_errmsg(ds));
            return -1;
        }
    }
    if (a->no_count) { /* the paths and sizes as added: nothing read */
        *t_index = zpi_now() - t0;
        char *dir = zpi_path_dir(a->out), *json = NULL;
        size_t len = 0;
        zp_status st = dir ? zpi_dataset_listing_json(ds, dir, &json, &len) : ZP_ERR_NOMEM;
        free(dir);
        if (st != ZP_OK) {
            fprintf(stderr, "zephon index: %s\n", zp_dataset_errmsg(ds));
            return -1;
        }
        int w = zpi_write_file_atomic(a->out, json, len);
        int e = errno;
        free(json);
        if (w != 0) {
            fprintf(stderr, "zephon index: cannot write '%s': %s\n", a->out, strerror(e));
            return -1;
        }
        return 0;
    }
    if (zp_dataset_index(ds) != ZP_OK) {
        fprintf(stderr, "zephon index: %s\n", zp_dataset_errmsg(ds));
        return -1;
    }
    *t_index = zpi_now() - t0;
    double t1 = zpi_now();
    if (zp_dataset_write_manifest(ds, a->out, a->hash) != ZP_OK) {
        fprintf(stderr, "zephon index: %s\n", zp_dataset_errmsg(ds));
        return -1;
    }
    *t_write = zpi_now() - t1;
    return 0;
}

/* What was indexed: each shard (with -v), the totals, the manifest. */
static void index_print(zp_dataset *ds, const index_args *a, double t_index, double t_write)
{
    size_t n = zp_dataset_num_shards(ds);
    uint64_t bytes = 0;
    if (a->no_count) {
        for (size_t i = 0; i < n; i++)
            bytes += zp_dataset_shard_bytes(ds, i);
        printf("listed %zu shards, %.1f MB, in %.2f s (records not counted: --no-count)\n"
               "wrote %s\n",
               n, (double)bytes / 1e6, t_index, a->out);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        bytes += zp_dataset_shard_bytes(ds, i);
        if (a->verbose)
            printf("  %s: %llu samples, %llu bytes\n", zp_dataset_shard_name(ds, i),
                   (unsigned long long)zp_dataset_shard_samples(ds, i),
                   (unsigned long long)zp_dataset_shard_bytes(ds, i));
    }
    double mb = (double)bytes / 1e6;
    printf("indexed %zu shards, %llu samples, %.1f MB on disk in %.2f s (%.0f MB/s)", n,
           (unsigned long long)zp_dataset_num_samples(ds), mb, t_index,
           t_index > 0 ? mb / t_index : 0.0);
    if (a->hash)
        printf(", hashed in %.2f s", t_write);
    printf("\nwrote %s (fingerprint %016llx)\n", a->out,
           (unsigned long long)zp_dataset_fingerprint(ds));
}

int cli_cmd_index(int argc, char **argv)
{
    index_args a = {0};
    int rc = index_parse(argc, argv, &a);
    if (rc >= 0)
        return rc;
    a.cfg.log = log_stderr;
    a.cfg.log_user = &a.verbose;

    zp_dataset *ds = NULL;
    zp_status st = zp_dataset_create(&a.cfg, &ds);
    if (st != ZP_OK) {
        fprintf(stderr, "zephon index: %s\n", ds ? zp_dataset_errmsg(ds) : zp_status_str(st));
        zp_dataset_destroy(ds);
        return 1;
    }
    double t_index = 0, t_write = 0;
    rc = 1;
    if (index_write(ds, &a, argc, argv, &t_index, &t_write) == 0) {
        index_print(ds, &a, t_index, t_write);
        rc = 0;
    }
    zp_dataset_destroy(ds);
    return rc;
}
