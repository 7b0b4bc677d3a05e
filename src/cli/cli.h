/* cli.h - the zephon command's subcommands. The command (unlike the
 * library) prints: results to stdout, errors to stderr. */
#ifndef CLI_H
#define CLI_H

#include <stdio.h>

#include "zephon/storage.h"

int cli_cmd_run(int argc, char **argv);
int cli_cmd_tune(int argc, char **argv);
int cli_cmd_index(int argc, char **argv);
int cli_cmd_gen(int argc, char **argv);
int cli_cmd_tokenize(int argc, char **argv);
int cli_cmd_state(int argc, char **argv);
int cli_cmd_preprocess(int argc, char **argv);
int cli_cmd_convert(int argc, char **argv);

/* Flush standard output: 0, or -1 after printing "<cmd>: cannot write to
 * standard output: <reason>" (once per process). A command whose output
 * could not be written exits nonzero. */
int cli_flush_stdout(const char *cmd);

/* Remote storage options (storage_opts.c), shared by run and index: opt is
 * the option ("--cache-dir"), val the next argument (may be NULL).
 * Returns 0: not a storage option; 1: a flag (val not used); 2: val used;
 * -1: a bad value (printed, naming cmd, the option and the value). */
int cli_storage_opt(zp_storage_config *c, const char *cmd, const char *opt, const char *val);
void cli_storage_usage(FILE *f);

#endif
