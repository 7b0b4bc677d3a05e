/* main.c - `zephon <command> ...` */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "zephon.h"

static void usage(FILE *f)
{
    fprintf(f,
            "zephon %s - data loading for distributed training\n"
            "\n"
            "usage: zephon <command> [options]\n"
            "\n"
            "commands:\n"
            "  run        run a pipeline over a dataset and print its throughput\n"
            "  index      write a manifest (sample counts, sizes, hashes) for shards\n"
            "  gen        generate a synthetic JSONL(.zst) text dataset\n"
            "  tokenize   print GPT-2 token ids for each line of a JSONL file\n"
            "\n"
            "`zephon <command> --help` describes each command.\n",
            zp_version());
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run"))
        return zp_cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "index"))
        return zp_cmd_index(argc - 1, argv + 1);
    if (!strcmp(cmd, "gen"))
        return zp_cmd_gen(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize"))
        return zp_cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("zephon %s\n", zp_version());
        return 0;
    }
    fprintf(stderr, "zephon: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
