/*
 * unfinished.c - the marker of an unfinished preprocessing output folder
 * (unfinished.h).
 */
#include "formats/unfinished.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fsio.h"
#include "base/util.h"

static const char marker_text[] =
    "This folder is the output of a `zephon preprocess` that has not finished\n"
    "(it was interrupted, failed, or is still running). Its manifest.json is\n"
    "written, and this file removed, only when every output shard is complete.\n"
    "Zephon refuses to train from this folder while this file exists.\n"
    "To finish: run the same `zephon preprocess` command again with --force.\n";

/* dir + "/" + name into buf; 0, or -1 when it does not fit. */
static int join(char *buf, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(buf, cap, "%s/%s", dir && dir[0] ? dir : ".", name);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

zp_status zpi_unfinished_mark(const char *dir, zpi_err *err)
{
    char p[PATH_MAX];
    if (join(p, sizeof p, dir, ZPI_UNFINISHED_NAME) != 0)
        return zpi_err_set(err, ZP_ERR_INVALID, "output folder '%s': path too long", dir);
    return zpi_write_durable(p, marker_text, sizeof marker_text - 1, err);
}

zp_status zpi_unfinished_clear(const char *dir, zpi_err *err)
{
    char p[PATH_MAX];
    if (join(p, sizeof p, dir, ZPI_UNFINISHED_NAME) != 0)
        return zpi_err_set(err, ZP_ERR_INVALID, "output folder '%s': path too long", dir);
    if (unlink(p) != 0 && errno != ENOENT) {
        int e = errno;
        return zpi_err_set(err, ZP_ERR_IO, "cannot remove '%s': %s", p, strerror(e));
    }
    int fd = open(dir && dir[0] ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd); /* best effort: the manifest, synced before, decides */
        close(fd);
    }
    return ZP_OK;
}

zp_status zpi_unfinished_check(const char *path, const char *name, zpi_err *err)
{
    char dir[PATH_MAX], p[PATH_MAX];
    const char *slash = path ? strrchr(path, '/') : NULL;
    if (!slash)
        zpi_fmt(dir, sizeof dir, ".");
    else if (slash == path)
        zpi_fmt(dir, sizeof dir, "/");
    else if ((size_t)(slash - path) < sizeof dir)
        zpi_fmt(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else
        return ZP_OK; /* longer than any path: the open of the shard will say */
    if (join(p, sizeof p, dir, ZPI_UNFINISHED_NAME) != 0)
        return ZP_OK;
    struct stat sb;
    if (lstat(p, &sb) != 0)
        return ZP_OK;
    return zpi_err_set(err, ZP_ERR_STATE,
                       "shard '%s': its folder '%s' is the output of a zephon preprocess that did "
                       "not finish ('%s' exists, and the folder has no manifest.json yet): some of "
                       "its shards are missing. Run the same zephon preprocess again with --force "
                       "to redo it, then train from its manifest.json",
                       name ? name : path, dir, p);
}
