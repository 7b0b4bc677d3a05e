/* storage_opts.c - the options of remote storage and the shard cache on
 * disk, shared by `zephon run` and `zephon index` (docs/storage.md). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "base/util.h"

void cli_storage_usage(FILE *f)
{
    fprintf(f,
        "remote shards (http://, https://, s3://; docs/storage.md):\n"
        "  --cache-dir DIR         shard cache on local disk, shared by the ranks of a node\n"
        "                          (default $SLURM_TMPDIR, else $TMPDIR, else /tmp,\n"
        "                          + /zephon-cache-UID; yours only: mode 0700)\n"
        "  --cache-limit SIZE      bytes the shard cache may hold (k/M/G/T suffixes;\n"
        "                          default 16G)\n"
        "  --connect-timeout S     seconds to connect (default 10)\n"
        "  --low-speed-time S      abort a transfer slower than --low-speed-limit for S\n"
        "                          seconds, then retry (default 30)\n"
        "  --low-speed-limit B     bytes per second (default 1024)\n"
        "  --retries N             retries of a failed transfer (default 5)\n"
        "  --retry-base S          first backoff, doubled each retry, with jitter (0.25)\n"
        "  --retry-max S           longest backoff and Retry-After honoured (default 20)\n"
        "  --ca-file FILE          CA certificates for https (default: the system's)\n"
        "  --insecure              do not verify TLS certificates (warned on every run)\n"
        "  --s3-endpoint URL       S3 endpoint (default $AWS_ENDPOINT_URL, else AWS)\n"
        "  --s3-region R           S3 region (default $AWS_REGION, else us-east-1)\n"
        "  --lease S               download lock lease in the shared cache (default 30)\n"
        "  --cache-policy P        eviction: belady (by the known order; default) or lru\n");
}

static int bad(const char *cmd, const char *opt, const char *val, const char *what)
{
    fprintf(stderr, "%s: %s '%s': %s (%s)\n", cmd, opt, val ? val : "",
            val && errno == ERANGE ? "out of range" : "not valid", what);
    return -1;
}

int cli_storage_opt(zp_storage_config *c, const char *cmd, const char *opt, const char *val)
{
    uint64_t u;
    double d;
    if (!strcmp(opt, "--insecure")) {
        c->insecure_tls = 1;
        return 1;
    }
    static const char *const with_value[] = {
        "--cache-dir", "--cache-limit", "--connect-timeout", "--low-speed-time",
        "--low-speed-limit", "--retries", "--retry-base", "--retry-max", "--ca-file",
        "--s3-endpoint", "--s3-region", "--lease", "--cache-policy", NULL};
    int known = 0;
    for (int i = 0; with_value[i]; i++)
        known |= !strcmp(opt, with_value[i]);
    if (!known)
        return 0;
    if (!val || !*val) {
        fprintf(stderr, "%s: %s needs a value\n", cmd, opt);
        return -1;
    }
    errno = 0;
    if (!strcmp(opt, "--cache-dir"))
        c->cache_dir = val;
    else if (!strcmp(opt, "--ca-file"))
        c->ca_file = val;
    else if (!strcmp(opt, "--s3-endpoint")) {
        if (strncasecmp(val, "http://", 7) && strncasecmp(val, "https://", 8)) {
            fprintf(stderr, "%s: %s '%s': an http:// or https:// URL\n", cmd, opt, val);
            return -1;
        }
        c->s3_endpoint = val;
    }
    else if (!strcmp(opt, "--s3-region"))
        c->s3_region = val;
    else if (!strcmp(opt, "--cache-policy")) {
        if (strcmp(val, "belady") && strcmp(val, "lru")) {
            fprintf(stderr, "%s: %s '%s': belady or lru\n", cmd, opt, val);
            return -1;
        }
        c->cache_lru = !strcmp(val, "lru");
    }
    else if (!strcmp(opt, "--cache-limit")) {
        if (zpi_parse_u64(val, 1, UINT64_MAX, 1, &u) != 0)
            return bad(cmd, opt, val, "a size in bytes, k/M/G/T suffixes allowed");
        c->cache_limit_bytes = u;
    } else if (!strcmp(opt, "--low-speed-limit")) {
        if (zpi_parse_u64(val, 1, (uint64_t)1 << 40, 1, &u) != 0)
            return bad(cmd, opt, val, "bytes per second, at least 1");
        c->low_speed_bytes = u;
    } else if (!strcmp(opt, "--retries")) {
        if (zpi_parse_u64(val, 0, 1000, 0, &u) != 0)
            return bad(cmd, opt, val, "a count from 0 to 1000");
        c->retries = (unsigned)u;
    } else if (!strcmp(opt, "--lease")) {
        /* renewed every quarter of it, through a file's mtime: below a
         * second, a busy node or a coarse file system clock would have the
         * other ranks take every download over */
        if (zpi_parse_double(val, 1, 86400, &d) != 0)
            return bad(cmd, opt, val, "seconds from 1 to 86400");
        c->lease_s = d;
    } else {
        if (zpi_parse_double(val, 0.001, 86400, &d) != 0)
            return bad(cmd, opt, val, "seconds from 0.001 to 86400");
        if (!strcmp(opt, "--connect-timeout"))
            c->connect_timeout_s = d;
        else if (!strcmp(opt, "--low-speed-time"))
            c->low_speed_time_s = d;
        else if (!strcmp(opt, "--retry-base"))
            c->retry_base_s = d;
        else
            c->retry_max_s = d;
    }
    return 2;
}
