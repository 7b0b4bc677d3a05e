/*
 * hdf5_write.c - what the HDF5 writers (hdf5_write_tokens.c,
 * hdf5_write_samples.c) share: the temporary file, its creation and
 * commit, appending to a 1-D dataset.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/hdf5_internal.h"
#include "base/fsio.h"
#include "base/util.h"

/* Common: a temporary beside path (base/fsio.h: "<path>.zptmp.<host>.<pid>.<rand>",
 * created empty here, then truncated by H5Fcreate), made final at the end
 * by zpi_tmp_commit (synced, renamed, the folder synced). NULL when it
 * cannot be created (out of memory, or the folder is not writable: the
 * H5Fcreate that follows fails and names the file). */
char *zpi_h5_part_name(const char *path)
{
    char *p = calloc(1, PATH_MAX);
    int fd = -1;
    if (p && zpi_tmp_open(path, p, PATH_MAX, &fd, NULL) == ZP_OK)
        close(fd);
    else if (p) {
        /* keep a name for the messages of the create that fails next */
        snprintf(p, PATH_MAX, "%s" ZPI_TMP_MARK "unwritable", path);
    }
    return p;
}

int zpi_h5_fsync_rename(const char *part, const char *path, char *why, size_t cap)
{
    zpi_err e = {0};
    if (zpi_tmp_commit(part, path, &e) != ZP_OK) {
        zpi_fmt(why, cap, "%s", zpi_err_msg(&e));
        return -1;
    }
    return 0;
}

/* A new file at part (truncated), strong close degree. Under the lock. */
hid_t zpi_h5_create_file(const char *part)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0)
        return -1;
    H5Pset_fapl_sec2(fapl);
    H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
    hid_t f = H5Fcreate(part, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    return f;
}

/* Appends n elements of buf to the 1-D extendible dataset d (now `have`
 * long). Under the lock. 0 or -1. */
/* The writer's last HDF5 failure, captured where it happened (each HDF5
 * call clears the error stack, and cleanup calls follow a failure); per
 * thread, like the writers. */
_Thread_local char zpi_h5_w_last[256];

int zpi_h5_append_1d(hid_t d, hid_t mt, uint64_t have, const void *buf, size_t n)
{
    zpi_h5_w_last[0] = '\0';
    if (n == 0)
        return 0;
    hsize_t nsz = have + n, start = have, count = n, cur = 0;
    hid_t s0 = H5Dget_space(d);
    if (s0 < 0 || H5Sget_simple_extent_dims(s0, &cur, NULL) < 0) {
        if (s0 >= 0)
            H5Sclose(s0);
        return -1;
    }
    H5Sclose(s0);
    if (cur < nsz && H5Dset_extent(d, &nsz) < 0)
        return -1;
    hid_t fs = H5Dget_space(d);
    hid_t ms = H5Screate_simple(1, &count, NULL);
    int rc = -1;
    if (fs >= 0 && ms >= 0 &&
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL) >= 0 &&
        H5Dwrite(d, mt, ms, fs, H5P_DEFAULT, buf) >= 0)
        rc = 0;
    else {
        int e = errno;
        zpi_h5_errmsg(zpi_h5_w_last, sizeof zpi_h5_w_last);
        if (e)
            zpi_fmt(zpi_h5_w_last + strlen(zpi_h5_w_last), sizeof zpi_h5_w_last - strlen(zpi_h5_w_last), " (%s)", strerror(e));
    }
    if (fs >= 0)
        H5Sclose(fs);
    if (ms >= 0)
        H5Sclose(ms);
    return rc;
}
