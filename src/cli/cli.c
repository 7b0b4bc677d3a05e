/* cli.c - helpers every subcommand of the zephon command uses (cli.h). */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int cli_flush_stdout(const char *cmd)
{
    static int reported;
    errno = 0;
    int r = fflush(stdout);
    int e = errno;
    if (r == 0 && !ferror(stdout))
        return 0;
    if (!reported)
        fprintf(stderr, "%s: cannot write to standard output: %s\n", cmd,
                e ? strerror(e) : "write error");
    reported = 1;
    return -1;
}
