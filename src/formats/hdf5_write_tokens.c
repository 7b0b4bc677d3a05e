/*
 * hdf5_write_tokens.c - the HDF5 token writer (tokw.h).
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
#include "formats/tokw.h"
#include "base/util.h"
#include "base/fsio.h"

/* ---- the token writer (ragged layout) ----
 *
 * Both datasets are written contiguous, of their exact sizes, so that
 * readers read them with pread (direct_addr) and no chunk cache stands
 * between a shuffled read and the bytes: the documents are buffered (4 MiB)
 * and, once more than that, spilled to two raw files beside the output
 * ("<part>.values", "<part>.offsets"); commit creates the datasets and
 * copies the spilled elements into them, then removes the spill files. */

#define TOKW_BUF_BYTES ((size_t)4 << 20)
#define TOKW_OFFS_BUF 65536

typedef struct h5_tokw {
    zpi_tokw base;
    char *path, *part;
    char *vspill, *ospill; /* spill file names */
    int vfd, ofd;          /* spill files, -1 until the first spill */
    zp_dtype dtype;
    size_t es;
    hid_t file, grp, values, offsets;
    void *vbuf;            /* values not yet written */
    size_t vn, vcap;       /* elements in vbuf, capacity (elements) */
    uint64_t *obuf;        /* offsets not yet written */
    size_t on;
    uint64_t v_written, o_written; /* elements spilled */
    char *tokenizer;
} h5_tokw;

static void tokw_free(h5_tokw *w, int unlink_part)
{
    zpi_h5_lock(NULL);
    if (w->values > 0)
        H5Dclose(w->values);
    if (w->offsets > 0)
        H5Dclose(w->offsets);
    if (w->grp > 0)
        H5Gclose(w->grp);
    if (w->file > 0)
        H5Fclose(w->file);
    zpi_h5_unlock();
    if (unlink_part && w->part)
        unlink(w->part);
    if (w->vfd >= 0) {
        close(w->vfd);
        unlink(w->vspill);
    }
    if (w->ofd >= 0) {
        close(w->ofd);
        unlink(w->ospill);
    }
    free(w->path);
    free(w->part);
    free(w->vspill);
    free(w->ospill);
    free(w->vbuf);
    free(w->obuf);
    free(w->tokenizer);
    free(w);
}

static zp_status tokw_h5fail(h5_tokw *w, const char *what, zpi_err *err)
{
    char h[256];
    if (zpi_h5_w_last[0])
        zpi_fmt(h, sizeof h, "%s", zpi_h5_w_last);
    else
        zpi_h5_errmsg(h, sizeof h);
    zpi_h5_w_last[0] = '\0';
    zpi_h5_unlock();
    return zpi_err_set(err, ZP_ERR_IO, "'%s': %s failed: %s", w->path, what, h);
}

/* The two datasets, contiguous, nv and no elements. Under the lock. */
static int tokw_create(h5_tokw *w, hsize_t nv, hsize_t no)
{
    hid_t vt = w->dtype == ZP_DTYPE_U16 ? H5T_STD_U16LE : H5T_STD_I32LE;
    hid_t sv = H5Screate_simple(1, &nv, NULL), so = H5Screate_simple(1, &no, NULL);
    /* no modification times in the object headers: the same documents
     * make the same file */
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (sv >= 0 && so >= 0 && dcpl >= 0 && H5Pset_obj_track_times(dcpl, 0) >= 0) {
        w->values = H5Dcreate2(w->grp, "values", vt, sv, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        w->offsets = H5Dcreate2(w->grp, "offsets", H5T_STD_U64LE, so, H5P_DEFAULT, dcpl,
                                H5P_DEFAULT);
    }
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (sv >= 0)
        H5Sclose(sv);
    if (so >= 0)
        H5Sclose(so);
    if (w->values < 0)
        w->values = 0;
    if (w->offsets < 0)
        w->offsets = 0;
    return w->values > 0 && w->offsets > 0 ? 0 : -1;
}

static zp_status spill_fail(h5_tokw *w, const char *file, zpi_err *err)
{
    return zpi_err_set(err, ZP_ERR_IO, "'%s': writing '%s': %s", w->path, file, strerror(errno));
}

/* Appends n elements of `bytes` each to the spill file (opened on first use). */
static zp_status spill(h5_tokw *w, int *fd, const char *file, const void *buf, size_t n,
                       size_t bytes, zpi_err *err)
{
    if (*fd < 0 && (*fd = open(file, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
        return spill_fail(w, file, err);
    if (n && zpi_write_all(*fd, buf, n * bytes) != 0)
        return spill_fail(w, file, err);
    return ZP_OK;
}

/* Moves the buffered values and offsets to the spill files. */
static zp_status tokw_spill(h5_tokw *w, zpi_err *err)
{
    zp_status st = spill(w, &w->vfd, w->vspill, w->vbuf, w->vn, w->es, err);
    if (st == ZP_OK)
        st = spill(w, &w->ofd, w->ospill, w->obuf, w->on, sizeof *w->obuf, err);
    if (st != ZP_OK)
        return st;
    w->v_written += w->vn;
    w->o_written += w->on;
    w->vn = w->on = 0;
    return ZP_OK;
}

/* Moves n elements of `bytes` each from the spill file fd into dataset d
 * (from element 0), through buf (cap elements), from the end backwards,
 * cutting each copied piece off the spill file (ftruncate): the file's
 * pages go back to the kernel as the dataset's are written, so the output
 * never needs its room twice (page cache and disk), and the freed pages,
 * still warm, serve the dataset's. Under the lock. */
static int copy_spill(int fd, hid_t d, hid_t mt, uint64_t n, size_t bytes, void *buf, size_t cap)
{
    for (uint64_t end = n; end > 0;) {
        size_t m = end < cap ? (size_t)end : cap;
        uint64_t at = end - m;
        if (zpi_h5_pread_all(fd, buf, m * bytes, at * bytes) != 0 ||
            ftruncate(fd, (off_t)(at * bytes)) != 0 || zpi_h5_append_1d(d, mt, at, buf, m) != 0)
            return -1;
        end = at;
    }
    return 0;
}

/* Everything into the datasets (commit). */
static zp_status tokw_finish(h5_tokw *w, zpi_err *err)
{
    hid_t vmt = w->dtype == ZP_DTYPE_U16 ? H5T_NATIVE_UINT16 : H5T_NATIVE_INT32;
    if (w->vfd < 0 && w->ofd < 0) { /* all in the buffers */
        zpi_h5_lock(NULL);
        if (tokw_create(w, w->vn, w->on) != 0)
            return tokw_h5fail(w, "creating /tokens/values and /tokens/offsets", err);
        if (zpi_h5_append_1d(w->values, vmt, 0, w->vbuf, w->vn) != 0)
            return tokw_h5fail(w, "writing /tokens/values", err);
        if (zpi_h5_append_1d(w->offsets, H5T_NATIVE_UINT64, 0, w->obuf, w->on) != 0)
            return tokw_h5fail(w, "writing /tokens/offsets", err);
        zpi_h5_unlock();
        return ZP_OK;
    }
    zp_status st = tokw_spill(w, err);
    if (st != ZP_OK)
        return st;
    zpi_h5_lock(NULL);
    if (tokw_create(w, w->v_written, w->o_written) != 0)
        return tokw_h5fail(w, "creating /tokens/values and /tokens/offsets", err);
    if (copy_spill(w->vfd, w->values, vmt, w->v_written, w->es, w->vbuf, w->vcap) != 0)
        return tokw_h5fail(w, "writing /tokens/values", err);
    if (copy_spill(w->ofd, w->offsets, H5T_NATIVE_UINT64, w->o_written, sizeof *w->obuf, w->obuf,
                   TOKW_OFFS_BUF) != 0)
        return tokw_h5fail(w, "writing /tokens/offsets", err);
    zpi_h5_unlock();
    return ZP_OK;
}

static zp_status tokw_add(zpi_tokw *base, const int32_t *tok, size_t n, zpi_err *err)
{
    h5_tokw *w = (h5_tokw *)base;
    for (size_t i = 0; i < n; i++)
        if (tok[i] < 0 || (w->dtype == ZP_DTYPE_U16 && tok[i] > 65535)) {
            return zpi_err_set(err, ZP_ERR_INVALID,
                               "'%s': document %llu: token %zu is %d, outside the range of %s",
                               w->path, (unsigned long long)base->docs, i, (int)tok[i],
                               zp_dtype_name(w->dtype));
        }
    if (w->vn + n > w->vcap || w->on == TOKW_OFFS_BUF) {
        zp_status st = tokw_spill(w, err);
        if (st != ZP_OK)
            return st;
    }
    /* a document larger than the buffer goes out on its own */
    if (n > w->vcap) {
        zp_status st = ZP_OK;
        if (w->dtype == ZP_DTYPE_I32) {
            st = spill(w, &w->vfd, w->vspill, tok, n, w->es, err);
        } else {
            for (size_t i = 0; st == ZP_OK && i < n; i += w->vcap) {
                size_t m = n - i < w->vcap ? n - i : w->vcap;
                for (size_t j = 0; j < m; j++)
                    ((uint16_t *)w->vbuf)[j] = (uint16_t)tok[i + j];
                st = spill(w, &w->vfd, w->vspill, w->vbuf, m, w->es, err);
            }
        }
        if (st != ZP_OK)
            return st;
        w->v_written += n;
    } else if (w->dtype == ZP_DTYPE_U16) {
        uint16_t *d = (uint16_t *)w->vbuf + w->vn;
        for (size_t i = 0; i < n; i++)
            d[i] = (uint16_t)tok[i];
        w->vn += n;
    } else {
        memcpy((int32_t *)w->vbuf + w->vn, tok, n * sizeof *tok);
        w->vn += n;
    }
    base->docs++;
    base->tokens += n;
    w->obuf[w->on++] = base->tokens;
    return ZP_OK;
}

static zp_status tokw_commit(zpi_tokw *base, zpi_err *err)
{
    h5_tokw *w = (h5_tokw *)base;
    zp_status st = tokw_finish(w, err);
    if (st == ZP_OK && w->tokenizer) {
        zpi_h5_lock(NULL);
        hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR), a = -1;
        herr_t e = -1;
        if (t >= 0 && sp >= 0 && H5Tset_size(t, strlen(w->tokenizer) + 1) >= 0) {
            a = H5Acreate2(w->file, "zephon_tokenizer", t, sp, H5P_DEFAULT, H5P_DEFAULT);
            if (a >= 0)
                e = H5Awrite(a, t, w->tokenizer);
        }
        if (a >= 0)
            H5Aclose(a);
        if (sp >= 0)
            H5Sclose(sp);
        if (t >= 0)
            H5Tclose(t);
        if (e < 0)
            st = tokw_h5fail(w, "writing the attribute zephon_tokenizer", err);
        else
            zpi_h5_unlock();
    }
    if (st == ZP_OK) {
        zpi_h5_lock(NULL);
        herr_t e = 0;
        if (H5Dclose(w->values) < 0 || H5Dclose(w->offsets) < 0 || H5Gclose(w->grp) < 0)
            e = -1;
        w->values = w->offsets = w->grp = 0;
        if (e >= 0 && H5Fclose(w->file) < 0)
            e = -1;
        w->file = 0;
        if (e < 0)
            st = tokw_h5fail(w, "closing the file", err);
        else
            zpi_h5_unlock();
    }
    if (st == ZP_OK) {
        char why[512];
        if (zpi_h5_fsync_rename(w->part, w->path, why, sizeof why) != 0) {
            st = zpi_err_set(err, ZP_ERR_IO, "'%s': %s", w->path, why);
        }
    }
    tokw_free(w, st != ZP_OK);
    return st;
}

static void tokw_abort(zpi_tokw *base)
{
    tokw_free((h5_tokw *)base, 1);
}

static const zpi_tokw_ops h5_tokw_ops = {tokw_add, tokw_commit, tokw_abort};

zp_status zpi_tokw_open_hdf5(const char *path, zp_dtype dtype, const char *tokenizer,
                             zpi_tokw **out, zpi_err *err)
{
    *out = NULL;
    if (dtype != ZP_DTYPE_U16 && dtype != ZP_DTYPE_I32) {
        return zpi_err_set(err, ZP_ERR_INVALID, "'%s': token dtype %s (uint16 or int32 is written)",
                           path, zp_dtype_name(dtype));
    }
    h5_tokw *w = calloc(1, sizeof *w);
    if (!w)
        goto nomem;
    w->base.ops = &h5_tokw_ops;
    w->dtype = dtype;
    w->es = zp_dtype_size(dtype);
    w->vcap = TOKW_BUF_BYTES / w->es;
    w->vfd = w->ofd = -1;
    w->path = strdup(path);
    w->part = zpi_h5_part_name(path);
    if (w->part) {
        size_t pl = strlen(w->part) + 16;
        if ((w->vspill = malloc(pl)))
            snprintf(w->vspill, pl, "%s.values", w->part);
        if ((w->ospill = malloc(pl)))
            snprintf(w->ospill, pl, "%s.offsets", w->part);
    }
    w->vbuf = malloc(TOKW_BUF_BYTES);
    w->obuf = malloc(TOKW_OFFS_BUF * sizeof *w->obuf);
    if (tokenizer)
        w->tokenizer = strdup(tokenizer);
    if (!w->path || !w->part || !w->vspill || !w->ospill || !w->vbuf || !w->obuf ||
        (tokenizer && !w->tokenizer))
        goto nomem;
    zpi_h5_lock(NULL);
    const char *what = "H5Fcreate";
    w->file = zpi_h5_create_file(w->part);
    if (w->file < 0)
        goto h5fail;
    what = "H5Gcreate2 /tokens";
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    if (gcpl >= 0)
        H5Pset_obj_track_times(gcpl, 0);
    w->grp = H5Gcreate2(w->file, "tokens", H5P_DEFAULT, gcpl >= 0 ? gcpl : H5P_DEFAULT, H5P_DEFAULT);
    if (gcpl >= 0)
        H5Pclose(gcpl);
    if (w->grp < 0)
        goto h5fail;
    zpi_h5_unlock();
    w->obuf[w->on++] = 0;
    *out = &w->base;
    return ZP_OK;
h5fail: {
    char h[256];
    zpi_h5_errmsg(h, sizeof h);
    zpi_h5_unlock();
    zpi_err_set(err, ZP_ERR_IO, "'%s': %s failed: %s", path, what, h);
    if (w->file < 0)
        w->file = 0;
    if (w->grp < 0)
        w->grp = 0;
    if (w->values < 0)
        w->values = 0;
    if (w->offsets < 0)
        w->offsets = 0;
    tokw_free(w, 1);
    return ZP_ERR_IO;
}
nomem:
    if (w) {
        free(w->path);
        free(w->part);
        free(w->vspill);
        free(w->ospill);
        free(w->vbuf);
        free(w->obuf);
        free(w->tokenizer);
        free(w);
    }
    return zpi_err_set(err, ZP_ERR_NOMEM, "'%s': out of memory", path);
}
