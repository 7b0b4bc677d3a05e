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
            "  tune       run a pipeline against a step time; print the settings to use\n"
            "  index      write a manifest (sample counts, sizes, hashes) for shards\n"
            "  gen        generate a synthetic JSONL(.zst) text dataset\n"
            "  tokenize   print the token ids of each line of a JSONL file (any tokenizer)\n"
            "  state      show a saved pipeline state; merge the states of a job's ranks\n"
            "  preprocess tokenize a JSONL dataset once into token shards (HDF5, Megatron)\n"
            "  convert    rewrite a .jsonl(.zst|.gz) shard as a seekable .jsonl.zst\n"
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
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {{"run", cli_cmd_run}, {"tune", cli_cmd_tune}, {"index", cli_cmd_index}, {"gen", cli_cmd_gen},
                {"tokenize", cli_cmd_tokenize}, {"state", cli_cmd_state},
                {"preprocess", cli_cmd_preprocess}, {"convert", cli_cmd_convert}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (strcmp(cmd, cmds[i].name) != 0)
            continue;
        int rc = cmds[i].fn(argc - 1, argv + 1);
        /* whatever the command printed must have reached its destination
         * (reported once if the command found the error itself) */
        char who[32];
        snprintf(who, sizeof who, "zephon %s", cmds[i].name);
        if (cli_flush_stdout(who) != 0 && rc == 0)
            rc = 1;
        return rc;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return cli_flush_stdout("zephon") == 0 ? 0 : 1;
    }
    if (!strcmp(cmd, "--version")) {
        printf("zephon %s\n", zp_version());
        return cli_flush_stdout("zephon") == 0 ? 0 : 1;
    }
    fprintf(stderr, "zephon: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
