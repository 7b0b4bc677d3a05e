/* fsio.c - durable file writes and their temporary files (fsio.h). */
#include "base/fsio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

#define HOST_MAX 64

/* This host's name as it appears in a temporary's name. */
static void host_token(char *out, size_t cap)
{
    char h[256];
    if (gethostname(h, sizeof h) != 0)
        zpi_fmt(h, sizeof h, "unknown");
    h[sizeof h - 1] = '\0';
    size_t n = 0;
    for (const char *c = h; *c && n + 1 < cap && n < HOST_MAX; c++, n++) {
        unsigned char u = (unsigned char)*c;
        int ok = (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') ||
                 u == '_' || u == '-';
        out[n] = ok ? (char)u : '-';
    }
    if (n == 0 && cap > 1)
        out[n++] = '-';
    out[n] = '\0';
}

static uint32_t rand32(void)
{
    uint32_t r;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r)
        return r;
    uint64_t x = zpi_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&r;
    return (uint32_t)zpi_mix64(x);
}

/* The folder of path into dir ("." when it has none). */
static void dir_of(const char *path, char *dir, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        zpi_fmt(dir, cap, ".");
    else
        zpi_fmt(dir, cap, "%.*s", slash == path ? 1 : (int)(slash - path), path);
}

/* fsync of path's folder, so that a rename in it is durable. File systems
 * that cannot sync a folder (EINVAL) are not an error. */
static zp_status sync_dir_of(const char *path, zpi_err *err)
{
    char dir[PATH_MAX];
    dir_of(path, dir, sizeof dir);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return zpi_err_set(err, ZP_ERR_IO, "cannot open the folder '%s' of '%s' to sync it: %s",
                           dir, path, strerror(errno));
    int bad = fsync(fd) != 0 && errno != EINVAL && errno != EROFS;
    int e = errno;
    close(fd);
    if (bad) {
        errno = e;
        return zpi_err_set(err, ZP_ERR_IO, "cannot sync the folder '%s' of '%s': %s", dir, path,
                           strerror(e));
    }
    return ZP_OK;
}

zp_status zpi_tmp_open(const char *final_path, char *tmp_path, size_t cap, int *fd, zpi_err *err)
{
    if (fd)
        *fd = -1;
    if (!final_path || !*final_path || !tmp_path || !fd)
        return zpi_err_set(err, ZP_ERR_INVALID, "zpi_tmp_open: no path given");
    char host[HOST_MAX + 1];
    host_token(host, sizeof host);
    for (int attempt = 0; attempt < 100; attempt++) {
        int n = snprintf(tmp_path, cap, "%s" ZPI_TMP_MARK "%s.%ld.%08x", final_path, host,
                         (long)getpid(), (unsigned)rand32());
        if (n < 0 || (size_t)n >= cap) {
            if (cap)
                tmp_path[0] = '\0';
            errno = ENAMETOOLONG;
            return zpi_err_set(err, ZP_ERR_INVALID,
                               "'%s': the path is too long for a temporary file beside it",
                               final_path);
        }
        *fd = open(tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (*fd >= 0)
            return ZP_OK;
        if (errno != EEXIST)
            break;
    }
    int e = errno;
    zpi_err_set(err, ZP_ERR_IO, "cannot create a temporary file beside '%s' ('%s'): %s",
                final_path, tmp_path, strerror(e));
    tmp_path[0] = '\0';
    errno = e;
    return ZP_ERR_IO;
}

zp_status zpi_tmp_commit(const char *tmp_path, const char *final_path, zpi_err *err)
{
    int fd = open(tmp_path, O_RDONLY | O_CLOEXEC);
    int e = 0;
    if (fd < 0 || fsync(fd) != 0) {
        e = errno;
        zpi_err_set(err, ZP_ERR_IO, "cannot sync '%s' (the new '%s'): %s", tmp_path, final_path,
                    strerror(e));
    }
    if (fd >= 0 && close(fd) != 0 && !e) {
        e = errno;
        zpi_err_set(err, ZP_ERR_IO, "cannot close '%s' (the new '%s'): %s", tmp_path, final_path,
                    strerror(e));
    }
    if (!e && rename(tmp_path, final_path) != 0) {
        e = errno;
        zpi_err_set(err, ZP_ERR_IO, "cannot rename '%s' to '%s': %s", tmp_path, final_path,
                    strerror(e));
    }
    if (e) {
        unlink(tmp_path);
        errno = e;
        return ZP_ERR_IO;
    }
    return sync_dir_of(final_path, err);
}

int zpi_write_all(int fd, const void *data, size_t len)
{
    const char *c = data;
    while (len > 0) {
        ssize_t w = write(fd, c, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            return -1;
        }
        c += w;
        len -= (size_t)w;
    }
    return 0;
}

zp_status zpi_write_durable(const char *path, const void *data, size_t len, zpi_err *err)
{
    char tmp[PATH_MAX];
    int fd;
    ZPI_FORWARD_IF_ERR(zpi_tmp_open(path, tmp, sizeof tmp, &fd, err));
    int rc = zpi_write_all(fd, data, len);
    int e = errno;
    if (close(fd) != 0 && rc == 0) {
        rc = -1;
        e = errno;
    }
    if (rc != 0) {
        unlink(tmp);
        errno = e;
        return zpi_err_set(err, ZP_ERR_IO, "cannot write '%s' (%zu bytes into '%s'): %s", path,
                           len, tmp, strerror(e));
    }
    return zpi_tmp_commit(tmp, path, err);
}

static int all_digits(const char *s, size_t n, size_t max)
{
    if (n == 0 || n > max)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

int zpi_tmp_parse(const char *name, size_t *final_len, const char **host, size_t *host_len,
                  long *pid)
{
    size_t n = strlen(name);
    /* from the end: ".<8 hex>" */
    if (n < 9 || name[n - 9] != '.')
        return 0;
    for (size_t i = n - 8; i < n; i++)
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
            return 0;
    /* ".<pid>" before it */
    size_t pe = n - 9, ps = pe;
    while (ps > 0 && name[ps - 1] != '.')
        ps--;
    if (ps == 0 || !all_digits(name + ps, pe - ps, 9))
        return 0;
    /* the host between the marker and the pid: no '.' in it */
    size_t he = ps - 1, hs = he;
    while (hs > 0 && name[hs - 1] != '.')
        hs--;
    size_t ml = strlen(ZPI_TMP_MARK);
    if (he == hs || he - hs > HOST_MAX || hs < ml || hs == ml ||
        memcmp(name + hs - ml, ZPI_TMP_MARK, ml) != 0)
        return 0;
    for (size_t i = hs; i < he; i++) {
        unsigned char u = (unsigned char)name[i];
        if (!((u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') ||
              u == '_' || u == '-'))
            return 0;
    }
    if (final_len)
        *final_len = hs - ml;
    if (host)
        *host = name + hs;
    if (host_len)
        *host_len = he - hs;
    if (pid)
        *pid = strtol(name + ps, NULL, 10);
    return 1;
}

int zpi_tmp_sweep(const char *dir, const char *final_name)
{
    DIR *d = opendir(dir && *dir ? dir : ".");
    if (!d)
        return -1;
    char me[HOST_MAX + 1];
    host_token(me, sizeof me);
    size_t mel = strlen(me), fl = final_name ? strlen(final_name) : 0;
    int removed = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t flen, hl;
        const char *h;
        long pid;
        if (!zpi_tmp_parse(de->d_name, &flen, &h, &hl, &pid))
            continue;
        if (final_name && (flen != fl || memcmp(de->d_name, final_name, fl) != 0))
            continue;
        if (hl != mel || memcmp(h, me, hl) != 0 || pid <= 0 || pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* alive, or not ours to judge (EPERM: alive) */
        if (unlinkat(dirfd(d), de->d_name, 0) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}

int zpi_tmp_sweep_for(const char *final_path)
{
    char dir[PATH_MAX];
    if (!final_path || !*final_path) {
        errno = EINVAL;
        return -1;
    }
    dir_of(final_path, dir, sizeof dir);
    const char *slash = strrchr(final_path, '/');
    return zpi_tmp_sweep(dir, slash ? slash + 1 : final_path);
}
