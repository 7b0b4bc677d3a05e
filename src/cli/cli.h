/* cli.h - the zephon command's subcommands. The command (unlike the
 * library) prints: results to stdout, errors to stderr. */
#ifndef ZP_CLI_H
#define ZP_CLI_H

int zp_cmd_run(int argc, char **argv);
int zp_cmd_index(int argc, char **argv);
int zp_cmd_gen(int argc, char **argv);
int zp_cmd_tokenize(int argc, char **argv);

/* Flush standard output: 0, or -1 after printing "<cmd>: cannot write to
 * standard output: <reason>" (once per process). A command whose output
 * could not be written exits nonzero. */
int zp_cli_flush_stdout(const char *cmd);

#endif
