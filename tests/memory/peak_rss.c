/* peak_rss.c - runs a command and writes its peak resident set (the
 * child's getrusage ru_maxrss, which counts mapped file pages too) in bytes
 * to a file: `peak_rss OUT COMMAND ARGS...`. Exits with the command's
 * status (1 when it could not run, 128 + N when killed by signal N). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: peak_rss OUT COMMAND [ARGS...]\n");
        return 2;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("peak_rss: fork");
        return 1;
    }
    if (pid == 0) {
        execvp(argv[2], argv + 2);
        perror("peak_rss: exec");
        _exit(127);
    }
    int status = 0;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0) {
        perror("peak_rss: wait4");
        return 1;
    }
    FILE *f = fopen(argv[1], "w");
    if (!f || fprintf(f, "%llu\n", (unsigned long long)ru.ru_maxrss * 1024ull) < 0 || fclose(f)) {
        perror("peak_rss: write");
        return 1;
    }
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}
