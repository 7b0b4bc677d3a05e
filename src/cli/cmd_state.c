/* cmd_state.c - `zephon state show [--json] FILE` and
 * `zephon state merge -o OUT FILE...`: a pipeline state in words (or
 * normalized JSON), and the states of every rank of a job merged into a
 * job state (docs/state.md).
 *
 * Exit status: 0; 1 when a file cannot be read or is not a state (the
 * message names the file and the cause), or the states do not agree; 2 for
 * a usage error. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "base/error.h"
#include "base/fsio.h"
#include "plan/state.h"
#include "base/util.h"
#include "zephon/state.h"

static void state_usage(FILE *f)
{
    fprintf(f, "usage: zephon state show [--json] FILE\n"
               "       zephon state merge -o OUT FILE...\n"
               "\n"
               "show    print a saved pipeline state in words: seed, position and epoch of\n"
               "        each rank, plans of an elastic resume, counts, proportions per\n"
               "        mixture part, skipped batches, settings and their hash\n"
               "  --json  print the state as normalized JSON instead\n"
               "merge   merge the states of every rank of a job (one file per rank, any\n"
               "        order) into a job state, which restores on any number of ranks\n"
               "  -o, --output OUT  the job state to write (replaced atomically)\n");
}

/* The whole file, NUL-terminated; NULL after printing why. */
static char *read_file(const char *cmd, const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: %s: %s\n", cmd, path, strerror(errno));
        return NULL;
    }
    zpi_buf b = {0};
    char chunk[65536];
    size_t n;
    int bad = 0;
    while (!bad && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        bad = zpi_buf_append(&b, chunk, n) != 0;
    int rerr = ferror(f);
    int e = errno;
    fclose(f);
    if (bad || rerr) {
        fprintf(stderr, "%s: %s: %s\n", cmd, path, bad ? "out of memory" : strerror(e));
        zpi_buf_free(&b);
        return NULL;
    }
    if (!b.p && zpi_buf_puts(&b, "") != 0) {
        fprintf(stderr, "%s: %s: out of memory\n", cmd, path);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

static int cmd_show(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *cmd = "zephon state show";
    int json = 0, c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        if (c == 'j') {
            json = 1;
        } else if (c == 'h') {
            state_usage(stdout);
            return 0;
        } else {
            state_usage(stderr);
            return 2;
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, "%s: %s\n\n", cmd, argc - optind ? "one FILE only" : "FILE missing");
        state_usage(stderr);
        return 2;
    }
    const char *path = argv[optind];
    size_t len;
    char *text = read_file(cmd, path, &len);
    if (!text)
        return 1;
    zpi_err err = {0};
    char *out = NULL;
    zp_status st;
    if (json) {
        zpi_state s;
        if ((st = zpi_state_parse(text, len, &s, &err)) == ZP_OK)
            st = zpi_state_render(&s, &out, NULL, &err);
        zpi_state_clear(&s);
    } else {
        /* the words, and why a resume would refuse the state */
        st = zp_state_describe(text, len, &out, err.msg, sizeof err.msg);
    }
    free(text);
    if (st != ZP_OK) {
        fprintf(stderr, "%s: %s: %s\n", cmd, path, zpi_err_msg(&err));
        return 1;
    }
    fputs(out, stdout);
    free(out);
    return 0;
}

static int cmd_merge(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *cmd = "zephon state merge";
    const char *outp = NULL;
    int c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "+ho:", opts, NULL)) != -1) {
        if (c == 'o') {
            outp = optarg;
        } else if (c == 'h') {
            state_usage(stdout);
            return 0;
        } else {
            state_usage(stderr);
            return 2;
        }
    }
    if (!outp || optind >= argc) {
        fprintf(stderr, "%s: %s\n\n", cmd, !outp ? "-o OUT missing" : "no FILE given");
        state_usage(stderr);
        return 2;
    }
    size_t n = (size_t)(argc - optind);
    char **texts = calloc(n, sizeof *texts);
    size_t *lens = calloc(n, sizeof *lens);
    int rc = texts && lens ? 0 : 1;
    if (rc)
        fprintf(stderr, "%s: out of memory\n", cmd);
    for (size_t i = 0; i < n && !rc; i++) {
        const char *path = argv[optind + (int)i];
        if (!(texts[i] = read_file(cmd, path, &lens[i]))) {
            rc = 1;
            break;
        }
        /* each file on its own first, so that a message names the file */
        char *words = NULL, msg[ZPI_ERRMAX];
        if (zp_state_describe(texts[i], lens[i], &words, msg, sizeof msg) != ZP_OK) {
            fprintf(stderr, "%s: %s: %s\n", cmd, path, msg);
            rc = 1;
        }
        free(words);
    }
    if (!rc) {
        char *job = NULL, msg[ZPI_ERRMAX];
        size_t jlen = 0;
        if (zp_state_merge((const char *const *)texts, lens, n, &job, &jlen, msg, sizeof msg) !=
            ZP_OK) {
            fprintf(stderr, "%s: %s\n", cmd, msg);
            rc = 1;
        } else {
            zpi_err err = {0};
            (void)zpi_tmp_sweep_for(outp);
            if (zpi_write_durable(outp, job, jlen, &err) != ZP_OK) {
                fprintf(stderr, "%s: %s\n", cmd, zpi_err_msg(&err));
                rc = 1;
            }
        }
        free(job);
    }
    for (size_t i = 0; texts && i < n; i++)
        free(texts[i]);
    free(texts);
    free(lens);
    return rc;
}

int cli_cmd_state(int argc, char **argv)
{
    if (argc < 2) {
        state_usage(stderr);
        return 2;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "show"))
        return cmd_show(argc - 1, argv + 1);
    if (!strcmp(sub, "merge"))
        return cmd_merge(argc - 1, argv + 1);
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        state_usage(stdout);
        return 0;
    }
    fprintf(stderr, "zephon state: unknown subcommand '%s'\n\n", sub);
    state_usage(stderr);
    return 2;
}
