/*
 * fsio.h - durable file writes and their temporary files (private).
 *
 * The one way the project replaces a file: the bytes go to a temporary file
 * in the same folder, which is fsync'ed, renamed over the final path, and the
 * folder is fsync'ed so that the rename itself survives a crash. A reader
 * sees the old file or the new one, never a part of either.
 *
 * Temporary names say who made them:
 *
 *     <final name>.zptmp.<host>.<pid>.<rand>
 *
 * host: gethostname() with every character outside [A-Za-z0-9_-] written as
 * '-' (at most 64 characters); pid: the writer's process id in decimal;
 * rand: 8 lowercase hex digits. A process killed while writing leaves such a
 * file; zpi_tmp_sweep() removes it later, and only when it is sure the writer
 * is gone: the name has this exact form, the host is this host and
 * kill(pid, 0) fails with ESRCH. It never removes another host's temporary
 * (a shared file system), a name of another form, or one of a live process
 * (a pid reused by an unrelated process keeps the file until that process
 * ends). Processes that share a folder and a host name must share a pid
 * namespace (containers get a host name of their own by default).
 *
 * Errors go to a zpi_err (may be NULL) naming the path and the cause; errno
 * is kept as the failing call left it. Thread safety: every function is safe
 * to call from any thread; concurrent writers of one path each use their own
 * temporary and the last rename wins.
 */
#ifndef ZP_FSIO_H
#define ZP_FSIO_H

#include <stddef.h>

#include "base/error.h"
#include "zephon/common.h"

/* The marker between the final name and the host in a temporary's name. */
#define ZPI_TMP_MARK ".zptmp."

/* Writes len bytes (data may be NULL when len is 0) to path durably: a
 * temporary file of its own in path's folder (mode 0666 less the umask),
 * fsync, rename over path, fsync of the folder. On failure the temporary is
 * removed and path is left as it was. ZP_OK, ZP_ERR_INVALID (no path),
 * ZP_ERR_IO. */
/* Write all n bytes of data to fd (retrying short writes and EINTR).
 * 0, or -1 with errno set (EIO for a write that wrote nothing). */
int zpi_write_all(int fd, const void *data, size_t n);

zp_status zpi_write_durable(const char *path, const void *data, size_t len, zpi_err *err);

/* For streaming writers: creates (O_EXCL) a temporary file for final_path,
 * stores its name in tmp_path (cap bytes; PATH_MAX is always enough for a
 * path of PATH_MAX - 100 bytes) and an open, writable descriptor (O_CLOEXEC)
 * in *fd. The caller writes, closes the descriptor and calls
 * zpi_tmp_commit(), or on its own failure unlinks tmp_path. ZP_OK,
 * ZP_ERR_INVALID (no path, tmp_path too small), ZP_ERR_IO. */
zp_status zpi_tmp_open(const char *final_path, char *tmp_path, size_t cap, int *fd, zpi_err *err);

/* Makes a temporary file final: fsync of its data, rename over final_path,
 * fsync of the folder. On failure the temporary is removed. ZP_OK or
 * ZP_ERR_IO. */
zp_status zpi_tmp_commit(const char *tmp_path, const char *final_path, zpi_err *err);

/* Removes from dir the temporaries (names of the form above) whose writer is
 * dead: same host, kill(pid, 0) failing with ESRCH. With final_name only
 * those of that final name (a bare name, no folder), otherwise all of them.
 * Best effort: the number removed, or -1 with errno when dir cannot be
 * read (a name that cannot be removed is left and not counted). */
int zpi_tmp_sweep(const char *dir, const char *final_name);
/* The same for the temporaries of one final path (its folder, its name). */
int zpi_tmp_sweep_for(const char *final_path);

/* Parses a temporary's name (no folder). 1 when it has the form above, with
 * the final name's length, the host (a pointer into name and its length)
 * and the pid; 0 otherwise. Exposed for the tests. */
int zpi_tmp_parse(const char *name, size_t *final_len, const char **host, size_t *host_len,
                  long *pid);

#endif
