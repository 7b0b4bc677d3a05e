/*
 * hdf5_read.c - reading the records of an HDF5 shard into the caller's
 * rows (the reader's read, reader.h): fixed fields, text, token sequences
 * (variable-length and ragged). Runs of consecutive records are read with
 * one selection; HDF5 calls run under the HDF5 lock, conversion and
 * delivery outside it.
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

/* A selection of 1-D runs (dims beyond the first: whole, from full[]) on
 * the file space fs, and a 1-D memory space of its element count. Under
 * the lock. 0 or -1. */
static int select_runs(hid_t fs, const run *runs, size_t nr, int rank, const hsize_t *full,
                       hid_t *ms_out)
{
    hsize_t start[1 + ZPI_MAX_DIMS] = {0}, count[1 + ZPI_MAX_DIMS];
    hsize_t per = 1;
    for (int i = 1; i < rank; i++)
        count[i] = full[i], per *= full[i];
    hsize_t total = 0;
    if (nr == 0)
        return -1;
    for (size_t i = 0; i < nr; i++) {
        start[0] = runs[i].start;
        count[0] = runs[i].len;
        if (H5Sselect_hyperslab(fs, i == 0 ? H5S_SELECT_SET : H5S_SELECT_OR, start, NULL, count,
                                NULL) < 0)
            return -1;
        total += runs[i].len * per;
    }
    *ms_out = H5Screate_simple(1, &total, NULL);
    return *ms_out < 0 ? -1 : 0;
}

/* The runs of a dataset stored contiguous at file offset addr (see
 * direct_addr), `unit` bytes per index of dimension 0, into buf one after
 * the other (as H5Dread of the same selection delivers them): one pread per
 * run, without the HDF5 lock (the file is only read). */
static zp_status direct_runs(rctx *R, uint64_t addr, size_t unit, const run *runs, size_t nr,
                             void *buf, const char *path)
{
    uint64_t t0 = zpi_now_ns();
    char *p = buf;
    for (size_t i = 0; i < nr; i++) {
        size_t n = (size_t)(runs[i].len * unit);
        uint64_t off = addr + runs[i].start * unit;
        if (zpi_h5_pread_all(R->r->fd, p, n, off) != 0) {
            int e = errno;
            R->req->io_ns += zpi_now_ns() - t0;
            RFAIL(R, ZP_ERR_IO, "dataset '%s': reading %zu bytes at byte %llu: %s", path, n,
                  (unsigned long long)off, e ? strerror(e) : "end of file (truncated?)");
        }
        p += n;
    }
    R->req->io_ns += zpi_now_ns() - t0;
    return ZP_OK;
}

/* One H5Dread of the runs (or of explicit runs) of dataset d into buf.
 * rank/full: the dataset's dims (fixed fields). Takes and releases the lock.
 * vl: the variable-length allocator (NULL: none). daddr/unit: a dataset
 * read directly (direct_addr; UINT64_MAX: through HDF5). */
static zp_status read_sel(rctx *R, hid_t d, hid_t mt, const run *runs, size_t nr, int rank,
                          const hsize_t *full, void *buf, vlen_alloc *vl, const char *path,
                          uint64_t daddr, size_t unit)
{
    if (daddr != UINT64_MAX && !vl)
        return direct_runs(R, daddr, unit, runs, nr, buf, path);
    zpi_h5_lock(&R->req->lock_wait_ns);
    uint64_t t0 = zpi_now_ns();
    hid_t fs = H5Dget_space(d), ms = -1, dxpl = H5P_DEFAULT;
    const char *what = "H5Dget_space";
    herr_t e = -1;
    if (fs >= 0) {
        what = "H5Sselect_hyperslab";
        if (select_runs(fs, runs, nr, rank, full, &ms) == 0) {
            what = "H5Pset_vlen_mem_manager";
            if (vl) {
                dxpl = H5Pcreate(H5P_DATASET_XFER);
                if (dxpl < 0 || H5Pset_vlen_mem_manager(dxpl, zpi_h5_vlen_malloc, vl, zpi_h5_vlen_free, NULL) < 0)
                    goto done;
            }
            what = "H5Dread";
            e = H5Dread(d, mt, ms, fs, dxpl, buf);
        }
    }
done:;
    char h[256] = "";
    if (e < 0)
        zpi_h5_errmsg(h, sizeof h);
    if (dxpl > 0 && dxpl != H5P_DEFAULT)
        H5Pclose(dxpl);
    if (ms > 0)
        H5Sclose(ms);
    if (fs > 0)
        H5Sclose(fs);
    R->req->io_ns += zpi_now_ns() - t0;
    zpi_h5_unlock();
    if (e < 0) {
        if (vl && vl->refused)
            RFAIL(R, ZP_ERR_LIMIT,
                  "dataset '%s': a variable-length element of %zu bytes, far above the limit "
                  "(max_record_bytes %zu)",
                  path, vl->refused, R->r->max_record_bytes);
        RFAIL(R, ZP_ERR_FORMAT, "dataset '%s': %s failed: %s", path, what, h);
    }
    return ZP_OK;
}

/* Cap of one variable-length element as allocated (bytes): generous, the
 * exact limit is checked per record. */
static size_t vlen_cap(const h5_reader *r, size_t elem)
{
    size_t m = r->max_record_bytes ? r->max_record_bytes : ((size_t)1 << 30);
    if (m > ((size_t)1 << 40))
        m = (size_t)1 << 40;
    return (m / 4 + 1) * (elem < 4 ? 4 : elem) * 2 + 4096;
}

static zp_status read_fixed(rctx *R, int k)
{
    h5_reader *r = R->r;
    h5_field *hf = &r->hf[k];
    const zpi_field *f = &r->schema.f[k];
    zpi_read_req *q = R->req;
    hsize_t full[1 + ZPI_MAX_DIMS];
    full[0] = r->n;
    for (int i = 0; i < f->ndim; i++)
        full[i + 1] = f->dims[i];
    /* rows consecutive and no repeats: straight into the chunk's arena */
    int direct = R->nu == q->n;
    for (size_t i = 1; direct && i < q->n; i++)
        direct = q->rows[i] == q->rows[0] + i;
    size_t bytes;
    if (__builtin_mul_overflow(R->nu, f->item_bytes, &bytes))
        RFAIL(R, ZP_ERR_LIMIT, "dataset '%s': %zu records of %zu bytes overflow", hf->path, R->nu,
              f->item_bytes);
    void *buf = direct ? q->out.fixed_row(q->out.ctx, k, q->rows[0]) : malloc(bytes ? bytes : 1);
    if (!buf)
        RFAIL(R, ZP_ERR_NOMEM, "dataset '%s': out of memory (%zu bytes)", hf->path, bytes);
    zp_status st = read_sel(R, hf->dset, hf->memtype, R->runs, R->nr, 1 + f->ndim, full, buf, NULL,
                            hf->path, hf->direct_addr, f->item_bytes);
    if (st == ZP_OK) {
        q->bytes += bytes;
        if (!direct)
            for (size_t i = 0; i < q->n; i++)
                memcpy(q->out.fixed_row(q->out.ctx, k, q->rows[i]),
                       (char *)buf + R->map[i] * f->item_bytes, f->item_bytes);
    }
    if (!direct)
        free(buf);
    return st;
}

static zp_status read_text(rctx *R, int k)
{
    h5_reader *r = R->r;
    h5_field *hf = &r->hf[k];
    zpi_read_req *q = R->req;
    int vlen = hf->kind == K_TEXT_VLEN;
    size_t es = vlen ? sizeof(char *) : hf->str_size, bytes;
    if (__builtin_mul_overflow(R->nu, es, &bytes))
        RFAIL(R, ZP_ERR_LIMIT, "dataset '%s': too many records", hf->path);
    char *buf = calloc(1, bytes ? bytes : 1);
    if (!buf)
        RFAIL(R, ZP_ERR_NOMEM, "dataset '%s': out of memory (%zu bytes)", hf->path, bytes);
    vlen_alloc va = {vlen_cap(r, 1), 0};
    /* variable-length strings in a file read with the serial driver: each
     * checked heap object is read with pread (HDF5 would read its whole
     * collection, 64 KiB for a 1 KiB string, through its metadata cache) */
    vloc *loc = vlen && r->sec2 ? calloc(R->nu ? R->nu : 1, sizeof *loc) : NULL;
    if (vlen && r->sec2 && !loc) {
        free(buf);
        RFAIL(R, ZP_ERR_NOMEM, "dataset '%s': out of memory", hf->path);
    }
    zp_status st = vlen ? zpi_h5_vlen_check(R, hf, loc) : ZP_OK;
    if (st != ZP_OK) {
        free(loc);
        free(buf);
        return st;
    }
    if (loc)
        st = zpi_h5_direct_vlen(R, hf, loc, va.cap, (char **)buf);
    else
        st = read_sel(R, hf->dset, hf->memtype, R->runs, R->nr, 1, NULL, buf,
                      vlen ? &va : NULL, hf->path, UINT64_MAX, 0);
    free(loc);
    for (size_t i = 0; st == ZP_OK && i < q->n; i++) {
        size_t ui = R->map[i];
        const char *s;
        size_t n;
        if (vlen) {
            s = ((char **)buf)[ui];
            n = s ? strlen(s) : 0;
        } else {
            s = buf + ui * es;
            n = strnlen(s, es);
            if (hf->spacepad)
                while (n && s[n - 1] == ' ')
                    n--;
        }
        if (i == 0 || R->map[i] != R->map[i - 1])
            q->bytes += n;
        if (r->max_record_bytes && n > r->max_record_bytes) {
            zpi_h5_bad(R, q->rows[i], ZP_ERR_LIMIT,
                "dataset '%s': record %llu: text of %zu bytes (max_record_bytes %zu)", hf->path,
                (unsigned long long)R->u[ui], n, r->max_record_bytes);
            continue;
        }
        if (!zpi_h5_utf8_valid((const unsigned char *)s, n)) {
            zpi_h5_bad(R, q->rows[i], ZP_ERR_FORMAT, "dataset '%s': record %llu: invalid UTF-8",
                hf->path, (unsigned long long)R->u[ui]);
            continue;
        }
        if (q->out.put_text(q->out.ctx, q->rows[i], s ? s : "", n) != ZP_OK) {
            st = zpi_err_set(R->err, ZP_ERR_NOMEM, "shard '%s': dataset '%s': out of memory",
                             r->name, hf->path);
        }
    }
    if (vlen)
        for (size_t i = 0; i < R->nu; i++)
            free(((char **)buf)[i]);
    free(buf);
    return st;
}

/* Deliver one document of stored ids (src[off .. off+len)) to row. 0, or
 * -1 with the error set (out of memory). */
static int put_doc(rctx *R, const h5_field *hf, zp_dtype dt, size_t row, uint64_t rec,
                   const void *src, size_t off, size_t len)
{
    zpi_read_req *q = R->req;
    if (R->r->max_record_bytes && len > R->r->max_record_bytes / sizeof(int32_t)) {
        zpi_h5_bad(R, row, ZP_ERR_LIMIT,
            "dataset '%s': record %llu: document of %zu tokens (%zu bytes as int32; "
            "max_record_bytes %zu)",
            hf->path, (unsigned long long)rec, len, len * sizeof(int32_t),
            R->r->max_record_bytes);
        return 0;
    }
    int32_t *dst;
    if (q->out.put_tokens(q->out.ctx, row, len, &dst) != ZP_OK) {
        zpi_err_set(R->err, ZP_ERR_NOMEM, "shard '%s': dataset '%s': out of memory", R->r->name,
                    hf->path);
        return -1;
    }
    size_t at = 0;
    if (zpi_h5_tok_convert(src, dt, off, len, dst, &at) != 0) {
        q->out.unput_tokens(q->out.ctx, row, len); /* the last put: give its room back */
        zpi_h5_bad(R, row, ZP_ERR_FORMAT,
            "dataset '%s': record %llu: token %zu is %lld, outside 0 .. 2^31-1", hf->path,
            (unsigned long long)rec, at, (long long)zpi_h5_tok_at(src, dt, off + at));
    }
    return 0;
}

static zp_status read_tok_vlen(rctx *R, int k)
{
    h5_reader *r = R->r;
    h5_field *hf = &r->hf[k];
    zp_dtype dt = r->schema.f[k].dtype;
    zpi_read_req *q = R->req;
    hvl_t *buf = calloc(R->nu ? R->nu : 1, sizeof *buf);
    if (!buf)
        RFAIL(R, ZP_ERR_NOMEM, "dataset '%s': out of memory", hf->path);
    vlen_alloc va = {vlen_cap(r, hf->elem_size), 0};
    zp_status st = zpi_h5_vlen_check(R, hf, NULL);
    if (st != ZP_OK) {
        free(buf);
        return st;
    }
    st = read_sel(R, hf->dset, hf->memtype, R->runs, R->nr, 1, NULL, buf, &va, hf->path,
                  UINT64_MAX, 0);
    for (size_t i = 0; st == ZP_OK && i < q->n; i++) {
        size_t ui = R->map[i];
        if (i == 0 || R->map[i] != R->map[i - 1])
            q->bytes += buf[ui].len * hf->elem_size;
        if (buf[ui].len && !buf[ui].p) {
            st = zpi_err_set(R->err, ZP_ERR_FORMAT,
                             "shard '%s': dataset '%s': record %llu: no data", r->name, hf->path,
                             (unsigned long long)R->u[ui]);
            break;
        }
        if (put_doc(R, hf, dt, q->rows[i], R->u[ui], buf[ui].p ? buf[ui].p : (void *)buf, 0,
                    buf[ui].len) != 0)
            st = ZP_ERR_NOMEM;
    }
    for (size_t i = 0; i < R->nu; i++)
        free(buf[i].p);
    free(buf);
    return st;
}

/* Merge sorted, possibly overlapping or touching intervals [start, start+len)
 * in place; returns the count. */
static size_t merge_runs(run *v, size_t n)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].len == 0)
            continue;
        if (m && v[i].start <= v[m - 1].start + v[m - 1].len) {
            uint64_t end = v[i].start + v[i].len, cur = v[m - 1].start + v[m - 1].len;
            if (end > cur)
                v[m - 1].len = end - v[m - 1].start;
        } else {
            v[m++] = v[i];
        }
    }
    return m;
}

/* Ragged field: each unique record's [lo, hi) in values, read from the
 * offsets (one read of every run's offsets[r .. r+len]) and checked:
 * non-decreasing in record order, within values. */
static zp_status ragged_bounds(rctx *R, const h5_field *hf, const char *opath, const char *vpath,
                               uint64_t *lo, uint64_t *hi)
{
    h5_reader *r = R->r;
    zp_status st = ZP_OK;
    run *or = malloc((R->nr ? R->nr : 1) * sizeof *or);
    uint64_t *offs = NULL;
    if (!or) {
        st = ZP_ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < R->nr; i++)
        or[i].start = R->runs[i].start, or[i].len = R->runs[i].len + 1;
    size_t nor = merge_runs(or, R->nr);
    uint64_t total = 0;
    for (size_t i = 0; i < nor; i++)
        total += or[i].len;
    offs = malloc(total * sizeof *offs);
    if (!offs) {
        st = ZP_ERR_NOMEM;
        goto out;
    }
    st = read_sel(R, hf->offs, hf->offs_signed ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64, or, nor, 1,
                  NULL, offs, NULL, opath, hf->direct_offs_addr, 8);
    if (st != ZP_OK)
        goto out;
    R->req->bytes += total * sizeof *offs;
    size_t oi = 0;
    uint64_t base = 0, prev = 0;
    for (size_t ui = 0; ui < R->nu; ui++) {
        uint64_t rec = R->u[ui];
        while (rec >= or[oi].start + or[oi].len - 1)
            base += or[oi].len, oi++;
        size_t at = (size_t)(base + rec - or[oi].start);
        uint64_t a = offs[at], b = offs[at + 1];
        if (hf->offs_signed && ((int64_t)a < 0 || (int64_t)b < 0))
            a = UINT64_MAX;
        if (a > b || b > hf->n_values || a < prev) {
            st = zpi_err_set(R->err, ZP_ERR_FORMAT,
                             "shard '%s': dataset '%s': record %llu: offsets %lld .. %lld are not "
                             "non-decreasing within 0 .. %llu (the length of '%s')",
                             r->name, opath, (unsigned long long)rec, (long long)offs[at],
                             (long long)offs[at + 1], (unsigned long long)hf->n_values, vpath);
            goto out;
        }
        lo[ui] = a, hi[ui] = b, prev = b;
    }
out:
    free(or);
    free(offs);
    return st;
}

/* Ragged field k: the values of every record [lo, hi) (too long ones left
 * out), one read, delivered to the rows. */
static zp_status ragged_values(rctx *R, int k, const char *vpath, const uint64_t *lo,
                               const uint64_t *hi)
{
    h5_reader *r = R->r;
    h5_field *hf = &r->hf[k];
    zp_dtype dt = r->schema.f[k].dtype;
    zpi_read_req *q = R->req;
    zp_status st = ZP_OK;
    run *vr = malloc((R->nu ? R->nu : 1) * sizeof *vr);
    uint64_t *vpos = malloc((R->nu ? R->nu : 1) * sizeof *vpos);
    void *vals = NULL;
    if (!vr || !vpos) {
        st = ZP_ERR_NOMEM;
        goto out;
    }
    size_t lim_tok = r->max_record_bytes ? r->max_record_bytes / sizeof(int32_t) : SIZE_MAX;
    for (size_t ui = 0; ui < R->nu; ui++) {
        uint64_t len = hi[ui] - lo[ui];
        vr[ui].start = lo[ui];
        vr[ui].len = len > lim_tok ? 0 : len;
    }
    size_t nvr = merge_runs(vr, R->nu);
    uint64_t vtotal = 0;
    for (size_t i = 0; i < nvr; i++)
        vtotal += vr[i].len;
    /* position of each record's first value in the packed buffer */
    size_t vi = 0;
    uint64_t base = 0;
    for (size_t ui = 0; ui < R->nu; ui++) {
        if (hi[ui] - lo[ui] == 0 || hi[ui] - lo[ui] > lim_tok) {
            vpos[ui] = 0;
            continue;
        }
        while (lo[ui] >= vr[vi].start + vr[vi].len)
            base += vr[vi].len, vi++;
        vpos[ui] = base + lo[ui] - vr[vi].start;
    }
    size_t vbytes;
    if (__builtin_mul_overflow((size_t)vtotal, hf->elem_size, &vbytes) || vtotal > SIZE_MAX) {
        st = zpi_err_set(R->err, ZP_ERR_LIMIT, "shard '%s': dataset '%s': %llu values overflow",
                         r->name, vpath, (unsigned long long)vtotal);
        goto out;
    }
    vals = malloc(vbytes ? vbytes : 1);
    if (!vals) {
        st = ZP_ERR_NOMEM;
        goto out;
    }
    if (nvr) {
        st = read_sel(R, hf->dset, hf->memtype, vr, nvr, 1, NULL, vals, NULL, vpath,
                      hf->direct_addr, hf->elem_size);
        if (st != ZP_OK)
            goto out;
        q->bytes += vbytes;
    }
    for (size_t i = 0; i < q->n; i++) {
        size_t ui = R->map[i];
        if (put_doc(R, hf, dt, q->rows[i], R->u[ui], vals, (size_t)vpos[ui],
                    (size_t)(hi[ui] - lo[ui])) != 0) {
            st = ZP_ERR_NOMEM;
            goto out;
        }
    }
out:
    free(vr);
    free(vpos);
    free(vals);
    return st;
}

static zp_status read_ragged(rctx *R, int k)
{
    h5_field *hf = &R->r->hf[k];
    char opath[96];
    zpi_fmt(opath, sizeof opath, "%s/offsets", hf->path);
    char vpath[96];
    zpi_fmt(vpath, sizeof vpath, "%s/values", hf->path);
    zp_status st = ZP_OK;
    uint64_t *lo = malloc((R->nu ? R->nu : 1) * sizeof *lo);
    uint64_t *hi = malloc((R->nu ? R->nu : 1) * sizeof *hi);
    if (!lo || !hi)
        st = ZP_ERR_NOMEM;
    if (st == ZP_OK)
        st = ragged_bounds(R, hf, opath, vpath, lo, hi);
    if (st == ZP_OK)
        st = ragged_values(R, k, vpath, lo, hi);
    if (st == ZP_ERR_NOMEM && R->err->msg[0] == '\0')
        zpi_err_set(R->err, ZP_ERR_NOMEM, "shard '%s': dataset '%s': out of memory", R->r->name,
                    vpath);
    free(lo);
    free(hi);
    return st;
}

zp_status zpi_h5_read(zpi_reader *rd, zpi_read_req *req, zpi_err *err)
{
    h5_reader *r = (h5_reader *)rd;
    zpi_err local;
    if (!err)
        err = &local;
    zpi_err_clear(err);
    if (req->n == 0)
        return ZP_OK;
    rctx R = {r, req, err, NULL, 0, NULL, 0, NULL};
    R.u = malloc(req->n * sizeof *R.u);
    R.runs = malloc(req->n * sizeof *R.runs);
    R.map = malloc(req->n * sizeof *R.map);
    zp_status st = ZP_OK;
    if (!R.u || !R.runs || !R.map) {
        st = zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory", r->name);
        goto out;
    }
    for (size_t i = 0; i < req->n; i++) {
        uint64_t rec = req->records[i];
        if (rec >= r->n || (i && rec < req->records[i - 1])) {
            st = zpi_err_set(err, ZP_ERR_INTERNAL,
                             "shard '%s': read of record %llu (of %llu) out of order or range",
                             r->name, (unsigned long long)rec, (unsigned long long)r->n);
            goto out;
        }
        if (i == 0 || rec != req->records[i - 1]) {
            if (R.nr && R.runs[R.nr - 1].start + R.runs[R.nr - 1].len == rec)
                R.runs[R.nr - 1].len++;
            else
                R.runs[R.nr].start = rec, R.runs[R.nr].len = 1, R.nr++;
            R.u[R.nu++] = rec;
        }
        R.map[i] = R.nu - 1;
    }
    /* the text field delivered */
    int text_k = -1, n_text = 0;
    for (int k = 0; k < r->schema.n; k++) {
        if (r->schema.f[k].kind != ZPI_FIELD_TEXT)
            continue;
        n_text++;
        if (req->text_field ? !strcmp(req->text_field, r->schema.f[k].name) : text_k < 0)
            text_k = k;
    }
    if (!req->text_field && n_text != 1)
        text_k = -1;
    for (int k = 0; st == ZP_OK && k < r->schema.n; k++) {
        switch (r->hf[k].kind) {
        case K_FIXED: st = read_fixed(&R, k); break;
        case K_TEXT_VLEN:
        case K_TEXT_FIXED:
            if (k == text_k)
                st = read_text(&R, k);
            break;
        case K_TOK_VLEN: st = read_tok_vlen(&R, k); break;
        case K_TOK_RAGGED: st = read_ragged(&R, k); break;
        default: st = ZP_ERR_INTERNAL; break;
        }
    }
out:
    free(R.u);
    free(R.runs);
    free(R.map);
    return st;
}
