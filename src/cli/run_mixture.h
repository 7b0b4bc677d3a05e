/* run_mixture.h - the data of `zephon run`: specs and mixture parts, from
 * positional specs, --data SPEC[@WEIGHT] or a mixture file
 * (run_mixture.c). */
#ifndef CLI_RUN_MIXTURE_H
#define CLI_RUN_MIXTURE_H

#include "run_types.h"

/* Append a spec (taking ownership of s; s NULL: out of memory). 0, or -1
 * (message printed). */
int cli_run_push_spec(cli_run_opts *o, char *s);
/* Append a part of the n specs that end at the last one pushed (taking
 * ownership of name). 0, or -1 (message printed). */
int cli_run_push_part(cli_run_opts *o, char *name, double weight, size_t n);
/* --data V: the spec and its part, named by the spec without secrets
 * (zp_dataset_spec_redact). 0, or -1 (message printed). */
int cli_run_data_option(cli_run_opts *o, const char *v);
/* Parse "SPEC[@WEIGHT]" (--data): the weight is the text after the last
 * '@' when it reads as a number (strtod's syntax, whole; it must then be
 * positive and finite), else the whole is the spec with weight 1. *spec
 * malloc'd. 0, or -1 (message printed, naming the option's value). */
int cli_run_parse_data(const char *v, char **spec, double *weight);
/* Read a mixture file into o's parts (relative specs resolved against the
 * file's folder). 0, or -1 (message printed naming the file and field). */
int cli_run_read_mixture(cli_run_opts *o, const char *path);

#endif
