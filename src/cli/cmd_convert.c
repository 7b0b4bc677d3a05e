/* cmd_convert.c - `zephon convert --seekable [--frame-mb N] [--zstd-level L] IN OUT`
 *
 * Rewrites a .jsonl, .jsonl.zst or .jsonl.gz shard as a seekable .jsonl.zst (the zstd
 * seekable format: independent frames, each ending at a record's end, and
 * a seek table), which the loader reads frame by frame (docs/datasets.md
 * "Segments"). Streams: memory is a frame or two whatever the shard's
 * size. The records are the same bytes, so the shard's record count and
 * the delivered stream stay the same (its stored size changes, and with it
 * its segments when it is larger than one). */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "base/util.h"
#include "formats/segment.h"

static void convert_usage(FILE *f)
{
    fprintf(f,
            "usage: zephon convert --seekable [--frame-mb N] [--zstd-level L] IN OUT\n"
            "\n"
            "Rewrite the shard IN (.jsonl, .jsonl.zst of one frame or many, or .jsonl.gz)\n"
            "as OUT, a seekable .jsonl.zst: independent zstd frames, each ending at a\n"
            "record's end, and a seek table (the zstd seekable format), read frame by frame.\n"
            "  --seekable        the output format (the only one)\n"
            "  --frame-mb N      decoded MiB per frame, 1 to 1024 (default 4)\n"
            "  --zstd-level L    zstd level, 1 to 22 (default 3)\n"
            "Exit status: 0 done, 1 failed (message names the file), 2 usage error.\n");
}

int cli_cmd_convert(int argc, char **argv)
{
    static const struct option opts[] = {
        {"seekable", no_argument, NULL, 's'},
        {"frame-mb", required_argument, NULL, 'f'},
        {"zstd-level", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int seekable = 0, c;
    uint64_t frame_mb = 4, level = 3;
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's': seekable = 1; break;
        case 'f':
            if (zpi_parse_u64(optarg, 1, 1024, 0, &frame_mb) != 0) {
                fprintf(stderr, "zephon convert: --frame-mb '%s': must be 1 to 1024\n", optarg);
                return 2;
            }
            break;
        case 'l':
            if (zpi_parse_u64(optarg, 1, 22, 0, &level) != 0) {
                fprintf(stderr, "zephon convert: --zstd-level '%s': must be 1 to 22\n", optarg);
                return 2;
            }
            break;
        case 'h':
            convert_usage(stdout);
            return cli_flush_stdout("zephon convert") == 0 ? 0 : 1;
        default:
            fprintf(stderr, "(zephon convert --help lists the options)\n");
            return 2;
        }
    }
    if (!seekable || argc - optind != 2) {
        fprintf(stderr, "zephon convert: %s\n(zephon convert --help lists the options)\n",
                !seekable ? "--seekable is required (the output format)"
                          : "expected two files: IN OUT");
        return 2;
    }
    const char *in = argv[optind], *out = argv[optind + 1];
    if (strcmp(in, out) == 0) {
        fprintf(stderr, "zephon convert: IN and OUT are the same file '%s'\n", in);
        return 2;
    }
    zpi_err err;
    memset(&err, 0, sizeof err);
    zp_status st = zpi_seekable_convert(in, out, (size_t)frame_mb << 20, (int)level, &err);
    if (st != ZP_OK) {
        fprintf(stderr, "zephon convert: %s\n", err.msg[0] ? err.msg : zp_status_str(st));
        return 1;
    }
    return 0;
}
