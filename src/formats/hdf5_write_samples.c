/*
 * hdf5_write_samples.c - the sample HDF5 file (hdf5_util.h: zephon gen
 * --format h5, tests, benchmarks).
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
#include "base/util.h"

void zpi_h5_sample_opts_init(zpi_h5_sample_opts *o)
{
    memset(o, 0, sizeof *o);
    o->text = 1;
    o->text_bytes = 1000;
    o->features = 16;
    o->label = 1;
}

static const char *const sample_words[] = {
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be",
    "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have",
    "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has",
    "there", "been", "if", "more", "when", "will", "would", "who", "so", "no", "data", "model",
    "river", "mountain", "energy", "system", "history", "language", "network", "village",
    "science", "music", "garden", "winter", "caf\xc3\xa9", "na\xc3\xafve", "\xce\xb1\xce\xbb\xcf\x86\xce\xb1",
};
#define N_SAMPLE_WORDS (sizeof sample_words / sizeof sample_words[0])

size_t zpi_h5_sample_text(uint64_t seed, uint64_t i, size_t text_bytes, char *buf, size_t cap)
{
    uint64_t s = zpi_hash2(seed, i);
    if (text_bytes == 0)
        text_bytes = 1;
    size_t target = 64 + (size_t)(zpi_mix64(s) % (2 * text_bytes));
    if (target + 32 > cap)
        target = cap > 32 ? cap - 32 : 0;
    size_t n = 0;
    int start = 1;
    while (n < target) {
        s = zpi_mix64(s + 0x9e3779b97f4a7c15ULL);
        const char *w = sample_words[(s >> 8) % N_SAMPLE_WORDS];
        size_t wl = strlen(w);
        if (n)
            buf[n++] = ' ';
        memcpy(buf + n, w, wl);
        if (start && buf[n] >= 'a' && buf[n] <= 'z')
            buf[n] = (char)(buf[n] - 32);
        n += wl;
        start = (s & 15) == 0;
        if (start)
            buf[n++] = '.';
    }
    buf[n++] = '.';
    buf[n] = '\0';
    return n;
}

zp_status zpi_hdf5_write_sample(const char *path, uint64_t n, uint64_t seed,
                                const zpi_h5_sample_opts *o, zpi_err *err)
{
    zpi_h5_sample_opts def;
    if (!o) {
        zpi_h5_sample_opts_init(&def);
        o = &def;
    }
    if (n == 0 || (!o->text && !o->tokens && !o->features && !o->label)) {
        return zpi_err_set(err, ZP_ERR_INVALID, "'%s': nothing to write (%s)", path,
                           n == 0 ? "0 records" : "no dataset chosen");
    }
    if (o->features > (1u << 20) || o->text_bytes > ((size_t)1 << 24)) {
        return zpi_err_set(err, ZP_ERR_INVALID,
                           "'%s': features (%u) or text_bytes (%zu) out of range", path,
                           o->features, o->text_bytes);
    }
    size_t tcap = 4 * o->text_bytes + 128;
    /* records per slab: about 8 MB of data */
    size_t per = (size_t)o->features * 4 + 8 + (o->text ? o->text_bytes + 80 : 0) +
                 (o->tokens ? 140 : 0);
    size_t slab = ((size_t)8 << 20) / per;
    if (slab < 1)
        slab = 1;
    if (slab > n)
        slab = (size_t)n;
    char *part = zpi_h5_part_name(path);
    char *tbuf = o->text ? malloc(slab * tcap) : NULL;
    char **tptr = o->text ? malloc(slab * sizeof *tptr) : NULL;
    hvl_t *vl = o->tokens ? malloc(slab * sizeof *vl) : NULL;
    int32_t *tok = o->tokens ? malloc(slab * 64 * sizeof *tok) : NULL;
    float *feat = o->features ? malloc(slab * o->features * sizeof *feat) : NULL;
    int64_t *lab = o->label ? malloc(slab * sizeof *lab) : NULL;
    zp_status st = ZP_OK;
    if (!part || (o->text && (!tbuf || !tptr)) || (o->tokens && (!vl || !tok)) ||
        (o->features && !feat) || (o->label && !lab)) {
        st = zpi_err_set(err, ZP_ERR_NOMEM, "'%s': out of memory", path);
        goto out;
    }
    hid_t ds[4] = {-1, -1, -1, -1}, mt[4] = {-1, -1, -1, -1};
    hid_t f = -1, strt = -1;
    const char *what = "H5Fcreate";
    zpi_h5_lock(NULL);
    f = zpi_h5_create_file(part);
    if (f < 0)
        goto h5fail;
    {
        hsize_t dims[2] = {n, o->features};
        what = "H5Dcreate2";
        if (o->text) {
            strt = H5Tcopy(H5T_C_S1);
            H5Tset_size(strt, H5T_VARIABLE);
            H5Tset_cset(strt, H5T_CSET_UTF8);
            hid_t sp = H5Screate_simple(1, dims, NULL);
            ds[0] = H5Dcreate2(f, "text", strt, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            H5Sclose(sp);
            mt[0] = H5Tcopy(strt);
            if (ds[0] < 0)
                goto h5fail;
        }
        if (o->tokens) {
            hid_t ft = H5Tvlen_create(H5T_STD_I32LE);
            hid_t sp = H5Screate_simple(1, dims, NULL);
            ds[1] = H5Dcreate2(f, "tokens", ft, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            H5Sclose(sp);
            H5Tclose(ft);
            mt[1] = H5Tvlen_create(H5T_NATIVE_INT32);
            if (ds[1] < 0)
                goto h5fail;
        }
        if (o->features) {
            hid_t sp = H5Screate_simple(2, dims, NULL);
            ds[2] = H5Dcreate2(f, "features", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT,
                               H5P_DEFAULT);
            H5Sclose(sp);
            mt[2] = H5Tcopy(H5T_NATIVE_FLOAT);
            if (ds[2] < 0)
                goto h5fail;
        }
        if (o->label) {
            hid_t sp = H5Screate_simple(1, dims, NULL);
            ds[3] = H5Dcreate2(f, "label", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT,
                               H5P_DEFAULT);
            H5Sclose(sp);
            mt[3] = H5Tcopy(H5T_NATIVE_INT64);
            if (ds[3] < 0)
                goto h5fail;
        }
    }
    zpi_h5_unlock();
    for (uint64_t i0 = 0; i0 < n; i0 += slab) {
        size_t m = n - i0 < slab ? (size_t)(n - i0) : slab;
        /* fill the slab outside the lock */
        for (size_t j = 0; j < m; j++) {
            uint64_t i = i0 + j;
            if (o->text) {
                tptr[j] = tbuf + j * tcap;
                zpi_h5_sample_text(seed, i, o->text_bytes, tptr[j], tcap);
            }
            if (o->tokens) {
                size_t len = zpi_h5_sample_doc_len(seed, i);
                for (size_t t = 0; t < len; t++)
                    tok[j * 64 + t] = zpi_h5_sample_token(seed, i, t);
                vl[j].len = len;
                vl[j].p = tok + j * 64;
            }
            for (uint32_t c = 0; c < o->features; c++)
                feat[j * o->features + c] = zpi_h5_sample_feature(seed, i, c);
            if (o->label)
                lab[j] = zpi_h5_sample_label(seed, i);
        }
        const void *bufs[4] = {tptr, vl, feat, lab};
        zpi_h5_lock(NULL);
        what = "H5Dwrite";
        for (int k = 0; k < 4; k++) {
            if (ds[k] < 0)
                continue;
            hsize_t start[2] = {i0, 0}, count[2] = {m, o->features};
            hid_t fs = H5Dget_space(ds[k]);
            hsize_t mcount = k == 2 ? (hsize_t)m * o->features : m;
            hid_t ms = H5Screate_simple(1, &mcount, NULL);
            herr_t e = -1;
            if (fs >= 0 && ms >= 0 &&
                H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) >= 0)
                e = H5Dwrite(ds[k], mt[k], ms, fs, H5P_DEFAULT, bufs[k]);
            if (fs >= 0)
                H5Sclose(fs);
            if (ms >= 0)
                H5Sclose(ms);
            if (e < 0)
                goto h5fail;
        }
        zpi_h5_unlock();
    }
    zpi_h5_lock(NULL);
    what = "H5Fclose";
    for (int k = 0; k < 4; k++) {
        if (ds[k] >= 0)
            H5Dclose(ds[k]);
        if (mt[k] >= 0)
            H5Tclose(mt[k]);
        ds[k] = mt[k] = -1;
    }
    if (strt >= 0)
        H5Tclose(strt);
    strt = -1;
    herr_t e = H5Fclose(f);
    f = -1;
    if (e < 0)
        goto h5fail;
    zpi_h5_unlock();
    {
        char why[512];
        if (zpi_h5_fsync_rename(part, path, why, sizeof why) != 0) {
            zpi_err_set(err, ZP_ERR_IO, "'%s': %s", path, why);
            unlink(part);
            st = ZP_ERR_IO;
        }
    }
    goto out;
h5fail: {
    char h[256];
    zpi_h5_errmsg(h, sizeof h);
    for (int k = 0; k < 4; k++) {
        if (ds[k] >= 0)
            H5Dclose(ds[k]);
        if (mt[k] >= 0)
            H5Tclose(mt[k]);
    }
    if (strt >= 0)
        H5Tclose(strt);
    if (f >= 0)
        H5Fclose(f);
    zpi_h5_unlock();
    unlink(part);
    st = zpi_err_set(err, ZP_ERR_IO, "'%s': %s failed: %s", path, what, h);
}
out:
    free(part);
    free(tbuf);
    free(tptr);
    free(vl);
    free(tok);
    free(feat);
    free(lab);
    return st;
}
