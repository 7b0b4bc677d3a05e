/*
 * hdf5_check.c - the checks of an HDF5 shard's variable-length data
 * (strings, vlen token sequences) before HDF5 follows it: every descriptor
 * of the records about to be read points at a heap object that exists,
 * lies inside its collection and has the length the descriptor says (see
 * vlen_layout in format_hdf5.c); and the direct reads of the strings so
 * located.
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

static uint64_t le_get(const unsigned char *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;)
        v = v << 8 | p[i];
    return v;
}

#define ALIGN8(x) (((x) + 7) & ~(uint64_t)7)

/* One global heap collection, parsed the way HDF5 parses it, with every
 * object's bounds checked. */
typedef struct gcol {
    uint64_t addr; /* absolute file offset */
    unsigned char *buf;
    uint64_t size;
    uint32_t nidx;  /* entries in off/len */
    uint64_t *off;  /* object idx: data at off (UINT64_MAX: none), len bytes */
    uint64_t *len;
} gcol;

static void gcol_free(gcol *g)
{
    free(g->buf);
    free(g->off);
    free(g->len);
}

/* 0, or -1 with the reason in why. */
static int gcol_load(const h5_reader *r, uint64_t a, gcol *g, char *why, size_t cap)
{
    memset(g, 0, sizeof *g);
    g->addr = a;
    uint64_t hdr = ALIGN8(8 + r->sizeof_size), ohdr = ALIGN8(8 + r->sizeof_size);
    unsigned char h[16];
    if (a > r->file_size || r->file_size - a < hdr) {
        zpi_fmt(why, cap, "its heap collection at byte %llu is beyond the end of the file",
                (unsigned long long)a);
        return -1;
    }
    if (zpi_h5_pread_all(r->fd, h, (size_t)hdr, a) != 0) {
        zpi_fmt(why, cap, "cannot read its heap collection at byte %llu", (unsigned long long)a);
        return -1;
    }
    uint64_t size = le_get(h + 8, r->sizeof_size);
    if (memcmp(h, "GCOL", 4) != 0 || h[4] != 1 || size < hdr || size > r->file_size - a ||
        size > ((uint64_t)1 << 32)) {
        zpi_fmt(why, cap, "no valid heap collection at byte %llu", (unsigned long long)a);
        return -1;
    }
    g->size = size;
    g->buf = malloc((size_t)size);
    if (!g->buf || zpi_h5_pread_all(r->fd, g->buf, (size_t)size, a) != 0) {
        zpi_fmt(why, cap, "cannot read its heap collection at byte %llu (%llu bytes)",
                (unsigned long long)a, (unsigned long long)size);
        return -1;
    }
    uint32_t ncap = 0;
    for (uint64_t p = hdr; p < size;) {
        if (p + ohdr > size)
            break; /* the rest is free space */
        uint32_t idx = (uint32_t)le_get(g->buf + p, 2);
        uint64_t osz = le_get(g->buf + p + 8, r->sizeof_size);
        uint64_t need = idx > 0 ? (osz > size ? UINT64_MAX : ohdr + ALIGN8(osz)) : osz;
        if (need == 0 || need > size - p) {
            zpi_fmt(why, cap, "heap collection at byte %llu: object %u at offset %llu has a zpi_h5_bad "
                    "size (%llu)", (unsigned long long)a, idx, (unsigned long long)p,
                    (unsigned long long)osz);
            return -1;
        }
        if (idx > 0) {
            if (idx >= ncap) {
                uint32_t nc = ncap ? ncap : 64;
                while (nc <= idx)
                    nc *= 2;
                uint64_t *o = realloc(g->off, nc * sizeof *o), *l = o ? realloc(g->len, nc * sizeof *l) : NULL;
                if (o)
                    g->off = o;
                if (!o || !l) {
                    zpi_fmt(why, cap, "out of memory");
                    return -1;
                }
                g->len = l;
                for (uint32_t i = ncap; i < nc; i++)
                    g->off[i] = UINT64_MAX, g->len[i] = 0;
                ncap = nc;
            }
            g->off[idx] = p + ohdr;
            g->len[idx] = osz;
            if (idx >= g->nidx)
                g->nidx = idx + 1;
        }
        p += need;
    }
    return 0;
}

/* The descriptors (D bytes each) of the unique records of R into desc
 * (nu * D bytes). Contiguous: pread; chunked: H5Dread_chunk per chunk. */
static zp_status vlen_descriptors(rctx *R, const h5_field *hf, size_t D, unsigned char *desc)
{
    h5_reader *r = R->r;
    if (!hf->chunked) {
        if (hf->raw_addr == UINT64_MAX) { /* never written: every record is empty */
            memset(desc, 0, R->nu * D);
            return ZP_OK;
        }
        size_t at = 0;
        for (size_t i = 0; i < R->nr; i++) {
            uint64_t off = hf->raw_addr + R->runs[i].start * D, n = R->runs[i].len * D;
            if (off < hf->raw_addr || off > r->file_size || r->file_size - off < n ||
                zpi_h5_pread_all(r->fd, desc + at, (size_t)n, off) != 0)
                RFAIL(R, ZP_ERR_FORMAT,
                      "dataset '%s': its data (records %llu..%llu at byte %llu) is beyond the end "
                      "of the file", hf->path, (unsigned long long)R->runs[i].start,
                      (unsigned long long)(R->runs[i].start + R->runs[i].len - 1),
                      (unsigned long long)off);
            at += (size_t)n;
        }
        return ZP_OK;
    }
    size_t cbytes;
    if (__builtin_mul_overflow((size_t)hf->chunk_dim, D, &cbytes))
        RFAIL(R, ZP_ERR_FORMAT, "dataset '%s': chunks too large", hf->path);
    unsigned char *cb = malloc(cbytes);
    if (!cb)
        RFAIL(R, ZP_ERR_NOMEM, "dataset '%s': out of memory", hf->path);
    uint64_t cur = UINT64_MAX;
    zp_status st = ZP_OK;
    for (size_t ui = 0; ui < R->nu && st == ZP_OK; ui++) {
        uint64_t c = R->u[ui] / hf->chunk_dim;
        if (c != cur) {
            hsize_t coord = c * hf->chunk_dim, sz = 0;
            haddr_t addr = HADDR_UNDEF;
            unsigned fm = 0;
            uint32_t filt = 0;
            char h[256] = "";
            zpi_h5_lock(&R->req->lock_wait_ns);
            herr_t e = H5Dget_chunk_info_by_coord(hf->dset, &coord, &fm, &addr, &sz);
            if (e >= 0 && addr != HADDR_UNDEF && sz == cbytes)
                e = H5Dread_chunk(hf->dset, H5P_DEFAULT, &coord, &filt, cb);
            if (e < 0)
                zpi_h5_errmsg(h, sizeof h);
            zpi_h5_unlock();
            if (e < 0) {
                st = zpi_err_set(R->err, ZP_ERR_FORMAT,
                                 "shard '%s': dataset '%s': reading chunk %llu: %s", r->name,
                                 hf->path, (unsigned long long)c, h);
            } else if (addr == HADDR_UNDEF) {
                memset(cb, 0, cbytes); /* not written: empty records */
            } else if (sz != cbytes) {
                st = zpi_err_set(R->err, ZP_ERR_FORMAT,
                                 "shard '%s': dataset '%s': chunk %llu has %llu bytes, not %zu",
                                 r->name, hf->path, (unsigned long long)c, (unsigned long long)sz,
                                 cbytes);
            }
            cur = c;
        }
        if (st == ZP_OK)
            memcpy(desc + ui * D, cb + (R->u[ui] - cur * hf->chunk_dim) * D, D);
    }
    free(cb);
    return st;
}

/* Checks every descriptor of the records about to be read: its heap
 * object exists, lies inside its collection, and has exactly the length
 * the descriptor says. Outside the lock but for chunk reads. */
static size_t gc_slot(uint64_t a)
{
    uint64_t h = a * 0x9E3779B97F4A7C15ULL;
    return (size_t)(h >> 52) & (GC_SLOTS - 1);
}

zp_status zpi_h5_vlen_check(rctx *R, const h5_field *hf, vloc *loc)
{
    h5_reader *r = R->r;
    size_t D = 4 + r->sizeof_addr + 4;
    unsigned char *desc = malloc(R->nu * D + 1);
    if (!desc)
        RFAIL(R, ZP_ERR_NOMEM, "dataset '%s': out of memory", hf->path);
    zp_status st = vlen_descriptors(R, hf, D, desc);
    char why[256] = "";
    for (size_t ui = 0; st == ZP_OK && ui < R->nu; ui++) {
        const unsigned char *d = desc + ui * D;
        uint64_t len = le_get(d, 4), addr = le_get(d + 4, r->sizeof_addr);
        uint32_t idx = (uint32_t)le_get(d + 4 + r->sizeof_addr, 4);
        if (addr == 0)
            continue; /* nil: an empty (NULL) element, HDF5 reads nothing */
        uint64_t a = r->base_addr + addr;
        if (loc)
            loc[ui].off = loc[ui].nbytes = 0;
        pthread_mutex_lock(&r->gc_mu);
        size_t e = gc_slot(a);
        while (r->gc[e].off && r->gc[e].addr != a)
            e = (e + 1) & (GC_SLOTS - 1);
        if (!r->gc[e].off) {
            /* parse it outside the mutex, then keep its table */
            pthread_mutex_unlock(&r->gc_mu);
            gcol g;
            if (gcol_load(r, a, &g, why, sizeof why) != 0) {
                gcol_free(&g);
                st = zpi_err_set(R->err, ZP_ERR_FORMAT,
                                 "shard '%s': dataset '%s': record %llu: damaged variable-length "
                                 "data: %s", r->name, hf->path, (unsigned long long)R->u[ui],
                                 why);
                break;
            }
            free(g.buf);
            if (!g.off) { /* no object at all: an empty table */
                g.off = calloc(1, sizeof *g.off);
                g.len = calloc(1, sizeof *g.len);
                g.nidx = 0;
                if (!g.off || !g.len) {
                    free(g.off);
                    free(g.len);
                    st = ZP_ERR_NOMEM;
                    break;
                }
            }
            pthread_mutex_lock(&r->gc_mu);
            if (r->gc_used >= GC_MAX_USED) { /* full: start again */
                for (size_t i = 0; i < GC_SLOTS; i++) {
                    free(r->gc[i].off);
                    free(r->gc[i].len);
                    r->gc[i].off = r->gc[i].len = NULL;
                }
                r->gc_used = 0;
            }
            e = gc_slot(a);
            while (r->gc[e].off && r->gc[e].addr != a)
                e = (e + 1) & (GC_SLOTS - 1);
            if (r->gc[e].off) { /* another read kept it meanwhile */
                free(g.off);
                free(g.len);
            } else {
                r->gc[e].addr = a;
                r->gc[e].nidx = g.nidx;
                r->gc[e].off = g.off;
                r->gc[e].len = g.len;
                r->gc_used++;
            }
        }
        struct gc_entry *g = &r->gc[e];
        int bad_obj = idx == 0 || idx >= g->nidx || g->off[idx] == UINT64_MAX;
        int bad_len = !bad_obj && (g->len[idx] / hf->disk_base != len ||
                                   g->len[idx] % hf->disk_base != 0);
        if (loc && !bad_obj && !bad_len) {
            loc[ui].off = a + g->off[idx];
            loc[ui].nbytes = g->len[idx];
        }
        pthread_mutex_unlock(&r->gc_mu);
        if (bad_obj || bad_len) {
            st = zpi_err_set(R->err, ZP_ERR_FORMAT,
                             "shard '%s': dataset '%s': record %llu: damaged variable-length "
                             "data: object "
                             "%u of the heap collection at byte %llu %s (%llu elements expected)",
                             r->name, hf->path, (unsigned long long)R->u[ui], idx,
                             (unsigned long long)a,
                             bad_obj ? "does not exist" : "has another length",
                             (unsigned long long)len);
        }
    }
    free(desc);
    if (st == ZP_ERR_NOMEM && R->err->msg[0] == '\0')
        zpi_err_set(R->err, ZP_ERR_NOMEM, "shard '%s': dataset '%s': out of memory", r->name,
                    hf->path);
    return st;
}

/* The strings located by zpi_h5_vlen_check, read with pread into malloc'd,
 * NUL-terminated buffers (out[ui], as H5Dread of a variable-length string
 * gives them; NULL for nil elements). Without the HDF5 lock. */
zp_status zpi_h5_direct_vlen(rctx *R, const h5_field *hf, const vloc *loc, size_t cap,
                             char **out)
{
    uint64_t t0 = zpi_now_ns();
    for (size_t ui = 0; ui < R->nu; ui++) {
        if (!loc[ui].off)
            continue;
        if (loc[ui].nbytes > cap) {
            R->req->io_ns += zpi_now_ns() - t0;
            RFAIL(R, ZP_ERR_LIMIT,
                  "dataset '%s': a variable-length element of %llu bytes, far above the limit "
                  "(max_record_bytes %zu)",
                  hf->path, (unsigned long long)loc[ui].nbytes, R->r->max_record_bytes);
        }
        char *p = malloc((size_t)loc[ui].nbytes + 1);
        if (!p || zpi_h5_pread_all(R->r->fd, p, (size_t)loc[ui].nbytes, loc[ui].off) != 0) {
            free(p);
            R->req->io_ns += zpi_now_ns() - t0;
            RFAIL(R, ZP_ERR_IO, "dataset '%s': record %llu: cannot read %llu bytes at byte %llu",
                  hf->path, (unsigned long long)R->u[ui], (unsigned long long)loc[ui].nbytes,
                  (unsigned long long)loc[ui].off);
        }
        p[loc[ui].nbytes] = '\0';
        out[ui] = p;
    }
    R->req->io_ns += zpi_now_ns() - t0;
    return ZP_OK;
}
