/*
 * fscount.c - a preload library (LD_PRELOAD) that counts the file system
 * calls a process makes on two kinds of paths, for the startup test and
 * benchmark (tests/mpi/test_mpi_startup.sh, bench/startup):
 *
 *   FSCOUNT_MANIFEST=PATH   opens of PATH (open, openat, fopen: any flags)
 *   FSCOUNT_SHARDS=PREFIX   stat-family calls (stat, lstat, fstatat, statx,
 *                           access) and opens of paths starting with PREFIX
 *   FSCOUNT_OUT=FOLDER      where the counts go at exit: one file per
 *                           process, rank-R.txt (R from OMPI_COMM_WORLD_RANK
 *                           or PMIX_RANK, else pid-P.txt), three lines
 *                           "manifest_opens N", "shard_stats N",
 *                           "shard_opens N".
 *
 * Each wrapper counts, then calls the next definition (dlsym RTLD_NEXT).
 * Calls glibc makes inside itself (fopen's own open) do not come through
 * here; fopen is wrapped for that reason. Thread-safe (atomic counters).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static unsigned long n_manifest, n_stat, n_open;

static int is_manifest(const char *p)
{
    const char *m = getenv("FSCOUNT_MANIFEST");
    return p && m && *m && strcmp(p, m) == 0;
}

static int is_shard(const char *p)
{
    const char *s = getenv("FSCOUNT_SHARDS");
    return p && s && *s && strncmp(p, s, strlen(s)) == 0;
}

static void count_open(const char *p)
{
    if (is_manifest(p))
        __atomic_add_fetch(&n_manifest, 1, __ATOMIC_RELAXED);
    else if (is_shard(p))
        __atomic_add_fetch(&n_open, 1, __ATOMIC_RELAXED);
}

static void count_stat(const char *p)
{
    if (is_shard(p))
        __atomic_add_fetch(&n_stat, 1, __ATOMIC_RELAXED);
}

#define NEXT(type, name, args) ((type(*) args)dlsym(RTLD_NEXT, name))

int open(const char *p, int flags, ...)
{
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, mode_t);
        va_end(ap);
    }
    count_open(p);
    return NEXT(int, "open", (const char *, int, ...))(p, flags, mode);
}

int open64(const char *p, int flags, ...)
{
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, mode_t);
        va_end(ap);
    }
    count_open(p);
    return NEXT(int, "open64", (const char *, int, ...))(p, flags, mode);
}

int openat(int dir, const char *p, int flags, ...)
{
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, mode_t);
        va_end(ap);
    }
    count_open(p);
    return NEXT(int, "openat", (int, const char *, int, ...))(dir, p, flags, mode);
}

int openat64(int dir, const char *p, int flags, ...)
{
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, mode_t);
        va_end(ap);
    }
    count_open(p);
    return NEXT(int, "openat64", (int, const char *, int, ...))(dir, p, flags, mode);
}

FILE *fopen(const char *p, const char *mode)
{
    count_open(p);
    return NEXT(FILE *, "fopen", (const char *, const char *))(p, mode);
}

FILE *fopen64(const char *p, const char *mode)
{
    count_open(p);
    return NEXT(FILE *, "fopen64", (const char *, const char *))(p, mode);
}

int stat(const char *p, struct stat *sb)
{
    count_stat(p);
    return NEXT(int, "stat", (const char *, struct stat *))(p, sb);
}

int stat64(const char *p, struct stat64 *sb)
{
    count_stat(p);
    return NEXT(int, "stat64", (const char *, struct stat64 *))(p, sb);
}

int lstat(const char *p, struct stat *sb)
{
    count_stat(p);
    return NEXT(int, "lstat", (const char *, struct stat *))(p, sb);
}

int lstat64(const char *p, struct stat64 *sb)
{
    count_stat(p);
    return NEXT(int, "lstat64", (const char *, struct stat64 *))(p, sb);
}

int fstatat(int dir, const char *p, struct stat *sb, int flags)
{
    count_stat(p);
    return NEXT(int, "fstatat", (int, const char *, struct stat *, int))(dir, p, sb, flags);
}

int fstatat64(int dir, const char *p, struct stat64 *sb, int flags)
{
    count_stat(p);
    return NEXT(int, "fstatat64", (int, const char *, struct stat64 *, int))(dir, p, sb, flags);
}

int statx(int dir, const char *p, int flags, unsigned mask, struct statx *sb)
{
    count_stat(p);
    return NEXT(int, "statx", (int, const char *, int, unsigned, struct statx *))(dir, p, flags,
                                                                                 mask, sb);
}

int access(const char *p, int mode)
{
    count_stat(p);
    return NEXT(int, "access", (const char *, int))(p, mode);
}

__attribute__((destructor)) static void fscount_write(void)
{
    const char *dir = getenv("FSCOUNT_OUT");
    if (!dir || !*dir)
        return;
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    if (!r)
        r = getenv("PMIX_RANK");
    char path[4096];
    if (r)
        snprintf(path, sizeof path, "%s/rank-%s.txt", dir, r);
    else
        snprintf(path, sizeof path, "%s/pid-%ld.txt", dir, (long)getpid());
    int fd = (int)NEXT(int, "open", (const char *, int, ...))(path, O_WRONLY | O_CREAT | O_TRUNC,
                                                              0644);
    if (fd < 0)
        return;
    char buf[256];
    int n = snprintf(buf, sizeof buf, "manifest_opens %lu\nshard_stats %lu\nshard_opens %lu\n",
                     n_manifest, n_stat, n_open);
    if (n > 0)
        (void)!write(fd, buf, (size_t)n);
    close(fd);
}
