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

/* The HDF5 objects of the sample file being written, and the call that
 * failed (for the message). Datasets: text, tokens, features, label. */
typedef struct {
    hid_t f, strt;
    hid_t ds[4], mt[4];
    const char *what;
} sample_file;

/* One slab of records, filled outside the HDF5 lock. */
typedef struct {
    size_t slab, tcap;
    char *tbuf;
    char **tptr;
    hvl_t *vl;
    int32_t *tok;
    float *feat;
    int64_t *lab;
} sample_slab;

static zp_status sample_check(const char *path, uint64_t n, const zpi_h5_sample_opts *o,
                              zpi_err *err)
{
    if (n == 0 || (!o->text && !o->tokens && !o->features && !o->label)) {
        return zpi_err_set(err, ZP_ERR_INVALID, "'%s': nothing to write (%s)", path,
                           n == 0 ? "0 records" : "no dataset chosen");
    }
    if (o->features > (1u << 20) || o->text_bytes > ((size_t)1 << 24)) {
        return zpi_err_set(err, ZP_ERR_INVALID,
                           "'%s': features (%u) or text_bytes (%zu) out of range", path,
                           o->features, o->text_bytes);
    }
    return ZP_OK;
}

/* Allocates the slab's buffers; 0, or -1 when one is missing (free them
 * with slab_free either way). */
static int slab_alloc(sample_slab *s, uint64_t n, const zpi_h5_sample_opts *o)
{
    s->tcap = 4 * o->text_bytes + 128;
    /* records per slab: about 8 MB of data */
    size_t per = (size_t)o->features * 4 + 8 + (o->text ? o->text_bytes + 80 : 0) +
                 (o->tokens ? 140 : 0);
    size_t slab = ((size_t)8 << 20) / per;
    if (slab < 1)
        slab = 1;
    if (slab > n)
        slab = (size_t)n;
    s->slab = slab;
    s->tbuf = o->text ? malloc(slab * s->tcap) : NULL;
    s->tptr = o->text ? malloc(slab * sizeof *s->tptr) : NULL;
    s->vl = o->tokens ? malloc(slab * sizeof *s->vl) : NULL;
    s->tok = o->tokens ? malloc(slab * 64 * sizeof *s->tok) : NULL;
    s->feat = o->features ? malloc(slab * o->features * sizeof *s->feat) : NULL;
    s->lab = o->label ? malloc(slab * sizeof *s->lab) : NULL;
    if ((o->text && (!s->tbuf || !s->tptr)) || (o->tokens && (!s->vl || !s->tok)) ||
        (o->features && !s->feat) || (o->label && !s->lab))
        return -1;
    return 0;
}

static void slab_free(sample_slab *s)
{
    free(s->tbuf);
    free(s->tptr);
    free(s->vl);
    free(s->tok);
    free(s->feat);
    free(s->lab);
}

/* Creates the file part and its datasets, under the HDF5 lock; -1 on a
 * failure (f->what names the call). */
static int sample_create(sample_file *f, const char *part, uint64_t n,
                         const zpi_h5_sample_opts *o)
{
    f->what = "H5Fcreate";
    f->f = zpi_h5_create_file(part);
    if (f->f < 0)
        return -1;
    hsize_t dims[2] = {n, o->features};
    f->what = "H5Dcreate2";
    if (o->text) {
        f->strt = H5Tcopy(H5T_C_S1);
        H5Tset_size(f->strt, H5T_VARIABLE);
        H5Tset_cset(f->strt, H5T_CSET_UTF8);
        hid_t sp = H5Screate_simple(1, dims, NULL);
        f->ds[0] = H5Dcreate2(f->f, "text", f->strt, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5Sclose(sp);
        f->mt[0] = H5Tcopy(f->strt);
        if (f->ds[0] < 0)
            return -1;
    }
    if (o->tokens) {
        hid_t ft = H5Tvlen_create(H5T_STD_I32LE);
        hid_t sp = H5Screate_simple(1, dims, NULL);
        f->ds[1] = H5Dcreate2(f->f, "tokens", ft, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5Sclose(sp);
        H5Tclose(ft);
        f->mt[1] = H5Tvlen_create(H5T_NATIVE_INT32);
        if (f->ds[1] < 0)
            return -1;
    }
    if (o->features) {
        hid_t sp = H5Screate_simple(2, dims, NULL);
        f->ds[2] = H5Dcreate2(f->f, "features", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT,
                              H5P_DEFAULT);
        H5Sclose(sp);
        f->mt[2] = H5Tcopy(H5T_NATIVE_FLOAT);
        if (f->ds[2] < 0)
            return -1;
    }
    if (o->label) {
        hid_t sp = H5Screate_simple(1, dims, NULL);
        f->ds[3] = H5Dcreate2(f->f, "label", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT,
                              H5P_DEFAULT);
        H5Sclose(sp);
        f->mt[3] = H5Tcopy(H5T_NATIVE_INT64);
        if (f->ds[3] < 0)
            return -1;
    }
    return 0;
}

/* Fills records i0 .. i0+m-1 into the slab (no HDF5 call: outside the lock). */
static void slab_fill(sample_slab *s, const zpi_h5_sample_opts *o, uint64_t seed, uint64_t i0,
                      size_t m)
{
    for (size_t j = 0; j < m; j++) {
        uint64_t i = i0 + j;
        if (o->text) {
            s->tptr[j] = s->tbuf + j * s->tcap;
            zpi_h5_sample_text(seed, i, o->text_bytes, s->tptr[j], s->tcap);
        }
        if (o->tokens) {
            size_t len = zpi_h5_sample_doc_len(seed, i);
            for (size_t t = 0; t < len; t++)
                s->tok[j * 64 + t] = zpi_h5_sample_token(seed, i, t);
            s->vl[j].len = len;
            s->vl[j].p = s->tok + j * 64;
        }
        for (uint32_t c = 0; c < o->features; c++)
            s->feat[j * o->features + c] = zpi_h5_sample_feature(seed, i, c);
        if (o->label)
            s->lab[j] = zpi_h5_sample_label(seed, i);
    }
}

/* Writes the slab's m records at i0, under the HDF5 lock; -1 on a failure. */
static int slab_write(sample_file *f, const sample_slab *s, const zpi_h5_sample_opts *o,
                      uint64_t i0, size_t m)
{
    const void *bufs[4] = {s->tptr, s->vl, s->feat, s->lab};
    f->what = "H5Dwrite";
    for (int k = 0; k < 4; k++) {
        if (f->ds[k] < 0)
            continue;
        hsize_t start[2] = {i0, 0}, count[2] = {m, o->features};
        hid_t fs = H5Dget_space(f->ds[k]);
        hsize_t mcount = k == 2 ? (hsize_t)m * o->features : m;
        hid_t ms = H5Screate_simple(1, &mcount, NULL);
        herr_t e = -1;
        if (fs >= 0 && ms >= 0 &&
            H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) >= 0)
            e = H5Dwrite(f->ds[k], f->mt[k], ms, fs, H5P_DEFAULT, bufs[k]);
        if (fs >= 0)
            H5Sclose(fs);
        if (ms >= 0)
            H5Sclose(ms);
        if (e < 0)
            return -1;
    }
    return 0;
}

/* Closes the datasets, types and file, under the HDF5 lock; -1 when
 * H5Fclose fails. */
static int sample_close(sample_file *f)
{
    f->what = "H5Fclose";
    for (int k = 0; k < 4; k++) {
        if (f->ds[k] >= 0)
            H5Dclose(f->ds[k]);
        if (f->mt[k] >= 0)
            H5Tclose(f->mt[k]);
        f->ds[k] = f->mt[k] = -1;
    }
    if (f->strt >= 0)
        H5Tclose(f->strt);
    f->strt = -1;
    herr_t e = H5Fclose(f->f);
    f->f = -1;
    return e < 0 ? -1 : 0;
}

/* After a failed HDF5 call (the lock held): closes what is open, releases
 * the lock, removes the part and sets the error. */
static zp_status sample_fail(sample_file *f, const char *path, const char *part, zpi_err *err)
{
    char h[256];
    zpi_h5_errmsg(h, sizeof h);
    for (int k = 0; k < 4; k++) {
        if (f->ds[k] >= 0)
            H5Dclose(f->ds[k]);
        if (f->mt[k] >= 0)
            H5Tclose(f->mt[k]);
    }
    if (f->strt >= 0)
        H5Tclose(f->strt);
    if (f->f >= 0)
        H5Fclose(f->f);
    zpi_h5_unlock();
    unlink(part);
    return zpi_err_set(err, ZP_ERR_IO, "'%s': %s failed: %s", path, f->what, h);
}

zp_status zpi_hdf5_write_sample(const char *path, uint64_t n, uint64_t seed,
                                const zpi_h5_sample_opts *o, zpi_err *err)
{
    zpi_h5_sample_opts def;
    if (!o) {
        zpi_h5_sample_opts_init(&def);
        o = &def;
    }
    zp_status st = sample_check(path, n, o, err);
    if (st != ZP_OK)
        return st;
    char *part = zpi_h5_part_name(path);
    sample_slab s;
    int bad = slab_alloc(&s, n, o);
    sample_file f = {-1, -1, {-1, -1, -1, -1}, {-1, -1, -1, -1}, NULL};
    if (!part || bad) {
        st = zpi_err_set(err, ZP_ERR_NOMEM, "'%s': out of memory", path);
        goto out;
    }
    zpi_h5_lock(NULL);
    if (sample_create(&f, part, n, o) != 0)
        goto h5fail;
    zpi_h5_unlock();
    for (uint64_t i0 = 0; i0 < n; i0 += s.slab) {
        size_t m = n - i0 < s.slab ? (size_t)(n - i0) : s.slab;
        slab_fill(&s, o, seed, i0, m);
        zpi_h5_lock(NULL);
        if (slab_write(&f, &s, o, i0, m) != 0)
            goto h5fail;
        zpi_h5_unlock();
    }
    zpi_h5_lock(NULL);
    if (sample_close(&f) != 0)
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
h5fail:
    st = sample_fail(&f, path, part, err);
out:
    free(part);
    slab_free(&s);
    return st;
}
