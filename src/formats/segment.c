/*
 * segment.c - line-based shards read one segment at a time (segment.h),
 * and the zstd seekable format (the seek table read and written per the
 * format's published description: a skippable frame at the end of the
 * file holding one entry of compressed and decompressed size per frame
 * and a 9-byte footer ending with the magic number 0x8F92EAB1).
 *
 * Ownership: the reader owns its buffers; a loaded segment belongs to the
 * caller. Thread safety: one thread at a time per reader.
 */
#include "formats/segment.h"
#include "formats/parquet.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>

#include "base/util.h"
#include "formats/gzip_stream.h"
#include "formats/line_index.h"
#include "base/fsio.h"

#define SEG_CHUNK ((size_t)1 << 20) /* bytes per read of the decoded stream */
/* The streaming decoder's window of decoded bytes: the last 2 read chunks
 * stay in it, so that a segment that starts inside the read that ended the
 * one before finds its bytes there (no restart). */
#define WIN_CAP (3 * SEG_CHUNK)
#define SEG_MIN_READ ((size_t)16 << 10) /* the least room a read is given */
#define WIN_KEEP (2 * SEG_CHUNK)
#define UNKNOWN_START UINT64_MAX

#define SKIPPABLE_SEEK_MAGIC 0x184D2A5EU
#define SEEKABLE_MAGIC 0x8F92EAB1U
#define SEEK_FOOTER 9
/* Frames a seek table may describe (the format's own limit). */
#define SEEK_MAX_FRAMES 0x8000000U

struct zpi_seg_reader {
    char *path, *name;
    int fd;
    uint64_t fsize;
    zpi_seg_kind kind;
    const zpi_load_limits *lim;
    uint64_t n, per, nseg;
    uint64_t *start; /* [nseg + 1] decoded offset of each segment's first record */
    ZSTD_DCtx *dctx;
    zpi_gz *gz; /* a gzip shard's decoder (kind STREAM), else NULL */
    /* seekable */
    uint64_t nf;
    uint64_t *doff, *coff; /* [nf + 1] decoded and compressed start of each frame */
    char *fbuf;            /* the decoded frame fcur */
    size_t fbuf_cap;
    uint64_t fcur;
    char *cbuf;
    size_t cbuf_cap;
    /* stream */
    char *inb;
    size_t in_size, in_pos;
    int eof, need_flush;
    size_t last_ret;
    uint64_t cpos;   /* file bytes read */
    char *win;       /* decoded bytes [wpos, wpos + wlen) */
    uint64_t dpos;   /* zstd: decoded bytes the decoder has given (wpos + wlen
                      * but after a read decoded straight into its buffer) */
    uint64_t restarts; /* decoder restarts (a read behind its window) */
    size_t wlen;
    uint64_t wpos;
    /* scan buffer */
    char *sbuf;
    /* figures of the current load */
    uint64_t bytes_read;
    double t_read, t_dec;
    /* parquet: the file's reader (parquet.h); nothing above is used */
    zpi_pq_file *pq;
    /* zpi_seg_reader_next: where the next part starts (decoded byte,
     * record), and whether the stream is over */
    uint64_t fwd_pos, fwd_rec;
    int fwd_end;
};

static inline uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void wr32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

/* pread of exactly n bytes at off (fewer only at the end of the file):
 * the count read, or -1 with errno. */
static ssize_t pread_full(int fd, void *buf, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

static zp_status io_error(const zpi_seg_reader *r, uint64_t at, zpi_err *err)
{
    int e = errno;
    return zpi_err_set(err, ZP_ERR_IO, "shard '%s': read error in '%s' at byte %llu: %s",
                       r->name, r->path, (unsigned long long)at, strerror(e));
}

static int grow_buf(char **p, size_t *cap, size_t want)
{
    if (want <= *cap)
        return 0;
    char *q = realloc(*p, want);
    if (!q)
        return -1;
    *p = q;
    *cap = want;
    return 0;
}

/* ------------------------------------------------------------ seek table */

static zp_status seek_decode_frame(zpi_seg_reader *r, uint64_t f, zpi_err *err);

/* Reads the seek table when the file ends with the seekable magic number:
 * kind SEEKABLE and the frame offsets. Without the magic number: kind
 * STREAM. A table present but inconsistent: ZP_ERR_FORMAT naming the file. */
static zp_status read_seek_table(zpi_seg_reader *r, uint64_t max_frame, zpi_err *err)
{
    r->kind = ZPI_SEG_STREAM;
    if (r->fsize < SEEK_FOOTER + 8)
        return ZP_OK;
    unsigned char foot[SEEK_FOOTER];
    ssize_t got = pread_full(r->fd, foot, SEEK_FOOTER, r->fsize - SEEK_FOOTER);
    if (got < 0)
        return io_error(r, r->fsize - SEEK_FOOTER, err);
    if (got != SEEK_FOOTER || rd32(foot + 5) != SEEKABLE_MAGIC)
        return ZP_OK;
    const uint32_t nf = rd32(foot);
    const unsigned desc = foot[4];
#define BAD_TABLE(...)                                                                             \
    zpi_err_set(err, ZP_ERR_FORMAT, "shard '%s': corrupt zstd seek table in '%s': " __VA_ARGS__)
    if (desc & 0x7c)
        return BAD_TABLE("reserved bits set in its descriptor (0x%02x)", r->name, r->path, desc);
    if (nf > SEEK_MAX_FRAMES)
        return BAD_TABLE("%u frames (at most %u)", r->name, r->path, nf, SEEK_MAX_FRAMES);
    const uint64_t es = (desc & 0x80) ? 12 : 8;
    const uint64_t tsize = (uint64_t)nf * es + SEEK_FOOTER; /* the skippable frame's content */
    if (tsize + 8 > r->fsize)
        return BAD_TABLE("%u frames do not fit in a file of %llu bytes", r->name, r->path, nf,
                         (unsigned long long)r->fsize);
    const uint64_t tstart = r->fsize - tsize - 8;
    unsigned char *t = malloc((size_t)tsize + 8);
    if (!t)
        return zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory reading its seek table",
                           r->name);
    got = pread_full(r->fd, t, (size_t)tsize + 8, tstart);
    if (got < 0) {
        free(t);
        return io_error(r, tstart, err);
    }
    zp_status st = ZP_OK;
    if ((uint64_t)got != tsize + 8) {
        st = BAD_TABLE("short read of the table at byte %llu", r->name, r->path,
                       (unsigned long long)tstart);
    } else if (rd32(t) != SKIPPABLE_SEEK_MAGIC || rd32(t + 4) != tsize) {
        st = BAD_TABLE("no skippable frame of %llu bytes at byte %llu (magic 0x%08x, size %u)",
                       r->name, r->path, (unsigned long long)tsize, (unsigned long long)tstart,
                       rd32(t), rd32(t + 4));
    } else {
        r->nf = nf;
        r->doff = malloc(((size_t)nf + 1) * sizeof *r->doff);
        r->coff = malloc(((size_t)nf + 1) * sizeof *r->coff);
        if (!r->doff || !r->coff) {
            st = zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory reading its seek table",
                             r->name);
        } else {
            r->doff[0] = r->coff[0] = 0;
            uint32_t big = UINT32_MAX;
            for (uint32_t i = 0; i < nf; i++) {
                const unsigned char *e = t + 8 + (uint64_t)i * es;
                r->coff[i + 1] = r->coff[i] + rd32(e);
                r->doff[i + 1] = r->doff[i] + rd32(e + 4);
                if (rd32(e + 4) > max_frame && big == UINT32_MAX)
                    big = i;
            }
            if (big != UINT32_MAX)
                st = BAD_TABLE("frame %u decodes to %u bytes, more than %llu", r->name, r->path,
                               big, rd32(t + 8 + (uint64_t)big * es + 4),
                               (unsigned long long)max_frame);
            else if (r->coff[nf] != tstart)
                st = BAD_TABLE("its frames add up to %llu compressed bytes, the file has %llu "
                               "before the table", r->name, r->path,
                               (unsigned long long)r->coff[nf], (unsigned long long)tstart);
            /* a frame the table says is empty is never decoded by a read
             * (no position falls in it): decode it here, or a table that
             * lies would drop its records without a word */
            for (uint32_t i = 0; st == ZP_OK && i < nf; i++)
                if (r->doff[i + 1] == r->doff[i] && r->coff[i + 1] > r->coff[i])
                    st = seek_decode_frame(r, i, err);
        }
    }
#undef BAD_TABLE
    free(t);
    if (st == ZP_OK) {
        r->kind = ZPI_SEG_SEEKABLE;
        r->fcur = UINT64_MAX;
    }
    return st;
}

int zpi_seek_table_add(zpi_seek_table *t, uint64_t csize, uint64_t dsize)
{
    if (csize > UINT32_MAX || dsize > UINT32_MAX || t->n >= SEEK_MAX_FRAMES)
        return -1;
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 64;
        uint32_t *c = realloc(t->csize, nc * sizeof *c);
        if (!c)
            return -1;
        t->csize = c;
        uint32_t *d = realloc(t->dsize, nc * sizeof *d);
        if (!d)
            return -1;
        t->dsize = d;
        t->cap = nc;
    }
    t->csize[t->n] = (uint32_t)csize;
    t->dsize[t->n] = (uint32_t)dsize;
    t->n++;
    return 0;
}

int zpi_seek_table_encode(const zpi_seek_table *t, char **out, size_t *len)
{
    const size_t tsize = t->n * 8 + SEEK_FOOTER;
    unsigned char *b = malloc(tsize + 8);
    if (!b)
        return -1;
    wr32(b, SKIPPABLE_SEEK_MAGIC);
    wr32(b + 4, (uint32_t)tsize);
    for (size_t i = 0; i < t->n; i++) {
        wr32(b + 8 + i * 8, t->csize[i]);
        wr32(b + 12 + i * 8, t->dsize[i]);
    }
    unsigned char *f = b + 8 + t->n * 8;
    wr32(f, (uint32_t)t->n);
    f[4] = 0; /* no checksums */
    wr32(f + 5, SEEKABLE_MAGIC);
    *out = (char *)b;
    *len = tsize + 8;
    return 0;
}

void zpi_seek_table_free(zpi_seek_table *t)
{
    if (!t)
        return;
    free(t->csize);
    free(t->dsize);
    memset(t, 0, sizeof *t);
}

/* ------------------------------------------------------------ the decoded stream */

/* Frame f of a seekable file into fbuf. */
static zp_status seek_decode_frame(zpi_seg_reader *r, uint64_t f, zpi_err *err)
{
    const uint64_t csz = r->coff[f + 1] - r->coff[f], dsz = r->doff[f + 1] - r->doff[f];
    if (grow_buf(&r->cbuf, &r->cbuf_cap, (size_t)csz) != 0 ||
        grow_buf(&r->fbuf, &r->fbuf_cap, (size_t)dsz) != 0)
        return zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory decoding frame %llu",
                           r->name, (unsigned long long)f);
    double t0 = zpi_now();
    ssize_t got = pread_full(r->fd, r->cbuf, (size_t)csz, r->coff[f]);
    r->t_read += zpi_now() - t0;
    if (got < 0)
        return io_error(r, r->coff[f], err);
    r->bytes_read += (uint64_t)got;
    t0 = zpi_now();
    size_t d = (uint64_t)got == csz
                   ? ZSTD_decompressDCtx(r->dctx, r->fbuf, (size_t)dsz, r->cbuf, (size_t)csz)
                   : 0;
    r->t_dec += zpi_now() - t0;
    if ((uint64_t)got != csz || ZSTD_isError(d) || d != dsz) {
        r->fcur = UINT64_MAX;
        return zpi_err_set(err, ZP_ERR_FORMAT,
                           "shard '%s': frame %llu of '%s' (file bytes %llu-%llu) does not decode "
                           "to the %llu bytes its seek table gives: %s",
                           r->name, (unsigned long long)f, r->path,
                           (unsigned long long)r->coff[f], (unsigned long long)r->coff[f + 1],
                           (unsigned long long)dsz,
                           (uint64_t)got != csz ? "file truncated"
                           : ZSTD_isError(d)    ? ZSTD_getErrorName(d)
                                                : "size differs");
    }
    r->fcur = f;
    return ZP_OK;
}

/* The streaming decoder back at the file's beginning. */
static void stream_restart(zpi_seg_reader *r)
{
    if (r->gz)
        zpi_gz_reset(r->gz);
    else
        ZSTD_DCtx_reset(r->dctx, ZSTD_reset_session_only);
    r->in_size = r->in_pos = 0;
    r->eof = r->need_flush = 0;
    r->last_ret = 0;
    r->cpos = 0;
    r->wpos = 0;
    r->wlen = 0;
    r->dpos = 0;
}

/* stream_next for a gzip shard: more decoded bytes at the end of win
 * (room made by the caller). *more 0: the end of the file, after its last
 * whole member. */
static zp_status gz_stream_next(zpi_seg_reader *r, int *more, zpi_err *err)
{
    for (;;) {
        if (zpi_gz_avail_in(r->gz) == 0 && !r->eof) {
            double t0 = zpi_now();
            ssize_t got = pread_full(r->fd, r->inb, SEG_CHUNK, r->cpos);
            r->t_read += zpi_now() - t0;
            if (got < 0)
                return io_error(r, r->cpos, err);
            r->cpos += (uint64_t)got;
            r->bytes_read += (uint64_t)got;
            if ((size_t)got < SEG_CHUNK)
                r->eof = 1;
            zpi_gz_input(r->gz, r->inb, (size_t)got);
        }
        size_t got;
        double t0 = zpi_now();
        zp_status st = zpi_gz_decode(r->gz, r->win + r->wlen, WIN_CAP - r->wlen, &got, r->name,
                                     NULL, err);
        r->t_dec += zpi_now() - t0;
        if (st != ZP_OK)
            return st;
        if (got > 0) {
            r->wlen += got;
            *more = 1;
            return ZP_OK;
        }
        if (zpi_gz_avail_in(r->gz) == 0 && r->eof)
            return zpi_gz_end(r->gz, r->name, NULL, err);
    }
}

static zp_status stream_decode(zpi_seg_reader *r, char *dst, size_t cap, size_t *got,
                               zpi_err *err);

/* More decoded bytes of the stream at the end of win, dropping its oldest
 * bytes beyond WIN_KEEP first. *more 0: end of the stream. */
static zp_status stream_next(zpi_seg_reader *r, int *more, zpi_err *err)
{
    *more = 0;
    if (r->wlen > WIN_KEEP) {
        size_t drop = r->wlen - WIN_KEEP;
        memmove(r->win, r->win + drop, WIN_KEEP);
        r->wpos += drop;
        r->wlen = WIN_KEEP;
    }
    if (r->gz)
        return gz_stream_next(r, more, err);
    size_t got;
    zp_status st = stream_decode(r, r->win + r->wlen, WIN_CAP - r->wlen, &got, err);
    if (st == ZP_OK && got > 0) {
        r->wlen += got;
        *more = 1;
    }
    return st;
}

/* More decoded bytes of a zstd stream into dst (at most cap, at least 1
 * unless the stream ended): *got of them. The decoder's position moves on;
 * the window is left to the caller. */
static zp_status stream_decode(zpi_seg_reader *r, char *dst, size_t cap, size_t *got,
                               zpi_err *err)
{
    *got = 0;
    for (;;) {
        if (r->in_pos == r->in_size && !r->need_flush) {
            if (r->eof) {
                if (r->last_ret != 0)
                    return zpi_err_set(err, ZP_ERR_FORMAT,
                                       "shard '%s': truncated zstd frame at the end of '%s' "
                                       "(decoded byte %llu)", r->name, r->path,
                                       (unsigned long long)r->dpos);
                return ZP_OK;
            }
            double t0 = zpi_now();
            ssize_t rd = pread_full(r->fd, r->inb, SEG_CHUNK, r->cpos);
            r->t_read += zpi_now() - t0;
            if (rd < 0)
                return io_error(r, r->cpos, err);
            r->cpos += (uint64_t)rd;
            r->bytes_read += (uint64_t)rd;
            r->in_size = (size_t)rd;
            r->in_pos = 0;
            if ((size_t)rd < SEG_CHUNK)
                r->eof = 1;
            continue;
        }
        ZSTD_inBuffer in = {r->inb, r->in_size, r->in_pos};
        ZSTD_outBuffer ob = {dst, cap, 0};
        double t0 = zpi_now();
        size_t ret = ZSTD_decompressStream(r->dctx, &ob, &in);
        r->t_dec += zpi_now() - t0;
        if (ZSTD_isError(ret))
            return zpi_err_set(err, ZP_ERR_FORMAT,
                               "shard '%s': corrupt zstd frame in '%s' (decoded byte %llu, file "
                               "bytes %llu-%llu): %s", r->name, r->path,
                               (unsigned long long)r->dpos,
                               (unsigned long long)(r->cpos - r->in_size + r->in_pos),
                               (unsigned long long)r->cpos, ZSTD_getErrorName(ret));
        r->in_pos = in.pos;
        r->need_flush = ob.pos == ob.size && ret != 0;
        r->last_ret = ret;
        if (ob.pos > 0) {
            r->dpos += ob.pos;
            *got = ob.pos;
            return ZP_OK;
        }
    }
}

/* Decoded bytes [pos, pos + n) into dst; *got < n only at the end.
 * direct (a zstd stream): the bytes past the window are decoded straight
 * into dst, not through the window, which is then empty at the decoder's
 * position (zpi_seg_reader_load puts back what the next segment needs). */
static zp_status dread(zpi_seg_reader *r, uint64_t pos, char *dst, size_t n, size_t *got,
                       int direct, zpi_err *err)
{
    *got = 0;
    if (r->kind == ZPI_SEG_PLAIN) {
        double t0 = zpi_now();
        ssize_t g = pread_full(r->fd, dst, n, pos);
        r->t_read += zpi_now() - t0;
        if (g < 0)
            return io_error(r, pos, err);
        r->bytes_read += (uint64_t)g;
        *got = (size_t)g;
        return ZP_OK;
    }
    size_t done = 0;
    if (r->kind == ZPI_SEG_SEEKABLE) {
        while (done < n && pos < r->doff[r->nf]) {
            uint64_t f = r->fcur;
            if (f == UINT64_MAX || pos < r->doff[f] || pos >= r->doff[f + 1]) {
                uint64_t lo = 0, hi = r->nf; /* the last frame with doff <= pos */
                while (hi - lo > 1) {
                    uint64_t mid = lo + (hi - lo) / 2;
                    if (r->doff[mid] <= pos)
                        lo = mid;
                    else
                        hi = mid;
                }
                f = lo;
                zp_status st = seek_decode_frame(r, f, err);
                if (st != ZP_OK)
                    return st;
            }
            size_t k = (size_t)(r->doff[f + 1] - pos);
            if (k > n - done)
                k = n - done;
            memcpy(dst + done, r->fbuf + (pos - r->doff[f]), k);
            done += k;
            pos += k;
        }
        *got = done;
        return ZP_OK;
    }
    if (pos < r->wpos) {
        stream_restart(r);
        r->restarts++;
    }
    while (done < n) {
        if (pos < r->wpos + r->wlen) {
            size_t k = (size_t)(r->wpos + r->wlen - pos);
            if (k > n - done)
                k = n - done;
            memcpy(dst + done, r->win + (pos - r->wpos), k);
            done += k;
            pos += k;
            continue;
        }
        if (direct && !r->gz && pos == r->dpos) {
            /* at the decoder's position (the window is used up) */
            size_t k;
            zp_status st = stream_decode(r, dst + done, n - done, &k, err);
            r->wpos = r->dpos;
            r->wlen = 0;
            if (st != ZP_OK)
                return st;
            if (k == 0)
                break;
            done += k;
            pos += k;
            continue;
        }
        int more;
        zp_status st = stream_next(r, &more, err);
        if (st != ZP_OK)
            return st;
        if (!more)
            break;
    }
    *got = done;
    return ZP_OK;
}

/* ------------------------------------------------------------ open, load */

/* A buffer from the kit (which no longer holds it), else a new one. */
static void *kit_take(void **slot, size_t size)
{
    void *p = slot ? *slot : NULL;
    if (p) {
        *slot = NULL;
        return p;
    }
    return malloc(size);
}

/* max_frame: the largest decoded frame a seek table may list. */
static zp_status open_raw(const char *path, const char *name, int compressed, uint64_t max_frame,
                          zpi_seg_kit *kit, zpi_seg_reader **out, zpi_err *err)
{
    *out = NULL;
    zpi_seg_reader *r = calloc(1, sizeof *r);
    if (!r)
        return zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory", name);
    r->fd = -1;
    r->path = strdup(path);
    r->name = strdup(name);
    r->sbuf = kit_take(kit ? (void **)&kit->sbuf : NULL, SEG_CHUNK);
    if (!r->path || !r->name || !r->sbuf) {
        zpi_seg_reader_close(r);
        return zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory", name);
    }
    r->fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (r->fd < 0 || fstat(r->fd, &sb) != 0) {
        int e = errno;
        zpi_seg_reader_close(r);
        return zpi_err_set(err, ZP_ERR_IO,
                           "shard '%s': cannot open '%s': %s", name, path, strerror(e));
    }
    r->fsize = (uint64_t)sb.st_size;
    r->kind = ZPI_SEG_PLAIN;
    zp_status st = ZP_OK;
    if (compressed == ZPI_SEG_GZIP) {
        /* gzip has no seek table: always one forward decoder */
        if (zpi_gz_create(&r->gz) != ZP_OK)
            st = zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory", name);
        r->kind = ZPI_SEG_STREAM;
    } else if (compressed) {
        if (kit && kit->dctx) { /* its window and buffers are reused */
            r->dctx = kit->dctx;
            kit->dctx = NULL;
            ZSTD_DCtx_reset(r->dctx, ZSTD_reset_session_and_parameters);
        } else {
            r->dctx = ZSTD_createDCtx();
        }
        if (!r->dctx)
            st = zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory", name);
        if (st == ZP_OK)
            st = read_seek_table(r, max_frame, err);
    }
    if (compressed) {
        if (st == ZP_OK && r->kind == ZPI_SEG_STREAM) {
            r->inb = kit_take(kit ? (void **)&kit->inb : NULL, SEG_CHUNK);
            r->win = kit_take(kit ? (void **)&kit->win : NULL, WIN_CAP);
            if (!r->inb || !r->win)
                st = zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory", name);
            else
                stream_restart(r);
        }
    }
    if (st != ZP_OK) {
        zpi_seg_reader_close(r);
        return st;
    }
    *out = r;
    return ZP_OK;
}

zp_status zpi_seg_reader_open(const char *path, const char *name, int compressed,
                              const zpi_load_limits *lim, uint64_t n_records,
                              uint64_t per_segment, zpi_seg_reader **out, zpi_err *err)
{
    return zpi_seg_reader_open_kit(path, name, compressed, lim, n_records, per_segment, NULL, out,
                                   err);
}

zp_status zpi_seg_reader_open_kit(const char *path, const char *name, int compressed,
                                  const zpi_load_limits *lim, uint64_t n_records,
                                  uint64_t per_segment, zpi_seg_kit *kit, zpi_seg_reader **out,
                                  zpi_err *err)
{
    if (!out || !path || !name || !lim || per_segment == 0)
        return ZP_ERR_INVALID;
    zpi_seg_reader *r;
    zp_status st = open_raw(path, name, compressed, lim->max_shard_bytes, kit, &r, err);
    if (st != ZP_OK)
        return st;
    r->lim = lim;
    r->n = n_records;
    r->per = per_segment;
    r->nseg = n_records ? (n_records + per_segment - 1) / per_segment : 1;
    r->start = malloc(((size_t)r->nseg + 1) * sizeof *r->start);
    if (!r->start) {
        zpi_seg_reader_close(r);
        return zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory", name);
    }
    for (uint64_t j = 0; j <= r->nseg; j++)
        r->start[j] = UNKNOWN_START;
    r->start[0] = 0;
    *out = r;
    return ZP_OK;
}

zp_status zpi_seg_reader_open_parquet(const char *path, const char *name,
                                      const zpi_load_limits *lim, uint64_t n_records,
                                      uint64_t per_segment, zpi_seg_reader **out, zpi_err *err)
{
    if (!out || !path || !name || !lim || per_segment == 0)
        return ZP_ERR_INVALID;
    zpi_seg_reader *r = calloc(1, sizeof *r);
    if (!r)
        return zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory", name);
    r->fd = -1;
    r->kind = ZPI_SEG_PARQUET;
    r->lim = lim;
    r->n = n_records;
    r->per = per_segment;
    r->nseg = n_records ? (n_records + per_segment - 1) / per_segment : 1;
    zp_status st = zpi_pq_open(path, name, &r->pq, err);
    if (st == ZP_OK && zpi_pq_num_rows(r->pq) != n_records)
        st = zpi_err_set(err, ZP_ERR_FORMAT,
                         "shard '%s': %llu records, but the dataset counted %llu (the "
                         "file changed since it was indexed?)",
                         name, (unsigned long long)zpi_pq_num_rows(r->pq),
                         (unsigned long long)n_records);
    if (st != ZP_OK) {
        zpi_seg_reader_close(r);
        return st;
    }
    *out = r;
    return ZP_OK;
}

static zp_status load_parquet(zpi_seg_reader *r, uint64_t j, zpi_load_bufs *bufs, zpi_shard *out,
                              zpi_err *err)
{
    const uint64_t first = j * r->per;
    const uint64_t m = r->n - first < r->per ? r->n - first : r->per;
    return zpi_pq_read_rows(r->pq, first, m, bufs, out, err);
}

zpi_seg_kind zpi_seg_reader_kind(const zpi_seg_reader *r) { return r->kind; }

uint64_t zpi_seg_reader_restarts(const zpi_seg_reader *r) { return r->restarts; }

void zpi_seg_reader_retire(zpi_seg_reader *r, zpi_seg_kit *kit)
{
    if (!r)
        return;
    if (kit) { /* (a kit's member still set keeps its own buffer) */
        if (!kit->dctx) {
            kit->dctx = r->dctx;
            r->dctx = NULL;
        }
        if (!kit->sbuf) {
            kit->sbuf = r->sbuf;
            r->sbuf = NULL;
        }
        if (!kit->inb) {
            kit->inb = r->inb;
            r->inb = NULL;
        }
        if (!kit->win) {
            kit->win = r->win;
            r->win = NULL;
        }
    }
    zpi_seg_reader_close(r);
}

void zpi_seg_kit_free(zpi_seg_kit *kit)
{
    if (!kit)
        return;
    ZSTD_freeDCtx(kit->dctx);
    free(kit->sbuf);
    free(kit->inb);
    free(kit->win);
    memset(kit, 0, sizeof *kit);
}

void zpi_seg_reader_close(zpi_seg_reader *r)
{
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    if (r->pq)
        zpi_pq_close(r->pq);
    ZSTD_freeDCtx(r->dctx);
    zpi_gz_destroy(r->gz);
    free(r->path);
    free(r->name);
    free(r->start);
    free(r->doff);
    free(r->coff);
    free(r->fbuf);
    free(r->cbuf);
    free(r->inb);
    free(r->win);
    free(r->sbuf);
    free(r);
}

/* The next read of a load that has decoded bytes [s0, s0 + len) into
 * *data (*cap bytes): it fills the room left, up to a chunk (*want), and
 * gets *got bytes (fewer only at the end). A buffer is grown only when
 * nearly full, a recycled one by a little (growing touches fresh pages, and
 * it keeps what it grew by). ZP_ERR_NOMEM (no message) when it cannot
 * grow; a read error with its message. */
static zp_status read_on(zpi_seg_reader *r, uint64_t s0, char **data, size_t *cap, size_t len,
                         int recycled, size_t *got, size_t *want, zpi_err *err)
{
    if (*cap - len < SEG_MIN_READ) {
        size_t nc = recycled ? *cap + *cap / 8 + SEG_MIN_READ : *cap + *cap / 2 + SEG_CHUNK;
        char *d = realloc(*data, nc + ZPI_JSON_PADDING);
        if (!d)
            return ZP_ERR_NOMEM;
        *data = d;
        *cap = nc;
    }
    *want = *cap - len < SEG_CHUNK ? *cap - len : SEG_CHUNK;
    return dread(r, s0 + len, *data + len, *want, got, 1, err);
}

/* After a load of decoded bytes [s0, s0 + len) into data that ends at
 * s0 + end: a zstd stream decoded straight into data (which left its
 * window empty at the decoder's position) puts the bytes past end back
 * into the window, so that the next load finds them there (no restart). */
static void keep_tail(zpi_seg_reader *r, uint64_t s0, const char *data, size_t len, size_t end)
{
    if (r->kind == ZPI_SEG_STREAM && !r->gz && r->wlen == 0 && r->wpos == s0 + len &&
        len - end <= WIN_CAP) {
        memcpy(r->win, data + end, len - end);
        r->wpos = s0 + end;
        r->wlen = len - end;
    }
}

/* Learns start[j] by counting lines from the nearest known start before it. */
static zp_status find_start(zpi_seg_reader *r, uint64_t j, zpi_err *err)
{
    uint64_t k = j;
    while (r->start[k] == UNKNOWN_START)
        k--;
    uint64_t pos = r->start[k], lines = 0;
    while (k < j) {
        size_t got;
        zp_status st = dread(r, pos, r->sbuf, SEG_CHUNK, &got, 0, err);
        if (st != ZP_OK)
            return st;
        if (got == 0)
            return zpi_err_set(err, ZP_ERR_FORMAT,
                               "shard '%s': '%s' ends after %llu records, the dataset counted "
                               "%llu (changed since it was indexed?)", r->name, r->path,
                               (unsigned long long)(k * r->per + lines),
                               (unsigned long long)r->n);
        const char *p = r->sbuf, *end = r->sbuf + got;
        while (k < j) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            if (!nl)
                break;
            p = nl + 1;
            if (++lines == r->per) {
                r->start[++k] = pos + (uint64_t)(p - r->sbuf);
                lines = 0;
            }
        }
        pos += got;
    }
    return ZP_OK;
}

zp_status zpi_seg_reader_load(zpi_seg_reader *r, uint64_t j, zpi_load_bufs *bufs, zpi_shard *out,
                              zpi_err *err)
{
    memset(out, 0, sizeof *out);
    if (!r || j >= r->nseg)
        return zpi_err_set(err, ZP_ERR_INVALID, "segment %llu out of range",
                           (unsigned long long)j);
    if (r->kind == ZPI_SEG_PARQUET)
        return load_parquet(r, j, bufs, out, err);
    r->bytes_read = 0;
    r->t_read = r->t_dec = 0;
    zp_status st = find_start(r, j, err);
    if (st != ZP_OK)
        return st;
    const uint64_t first = j * r->per;
    const uint64_t m = r->n - first < r->per ? r->n - first : r->per;
    const int last = j + 1 == r->nseg;
    const uint64_t s0 = r->start[j];
    /* messages name the segment: its lines and bytes count from its start */
    char sname[512];
    zpi_fmt(sname, sizeof sname, "%s, segment %llu from record %llu at decoded byte %llu",
            r->name, (unsigned long long)j, (unsigned long long)first, (unsigned long long)s0);
    /* an empty segment is a count mismatch, said below */
    zpi_load_limits llim = *r->lim;
    llim.allow_empty = 1;
    zpi_line_index ix;
    zpi_line_index_init(&ix, sname, &llim);
    /* room for the segment: its size when known, else the mean of those
     * before it or the decoded size (plain: the file; seekable: its
     * table; stream: 4x the file) over the segments, an eighth more; a
     * read chunk more (reads run past its end) */
    uint64_t total = r->kind == ZPI_SEG_PLAIN      ? r->fsize
                     : r->kind == ZPI_SEG_SEEKABLE ? r->doff[r->nf]
                                                   : 4 * r->fsize;
    uint64_t guess = j > 0 ? s0 / j : total / r->nseg;
    if (guess > r->lim->max_shard_bytes)
        guess = r->lim->max_shard_bytes;
    size_t cap = r->start[j + 1] != UNKNOWN_START ? (size_t)(r->start[j + 1] - s0)
                                                  : (size_t)(guess + guess / 8);
    cap += SEG_CHUNK;
    char *data;
    const int recycled = bufs && bufs->data;
    if (recycled) { /* a recycled buffer: grown below if too small */
        data = bufs->data;
        cap = bufs->data_cap;
        bufs->data = NULL;
    } else {
        data = malloc(cap + ZPI_JSON_PADDING);
    }
    size_t len = 0, end = 0;
    if (!data)
        return zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory loading segment %llu",
                           r->name, (unsigned long long)j);
    for (;;) {
        size_t got, want;
        st = read_on(r, s0, &data, &cap, len, recycled, &got, &want, err);
        if (st == ZP_ERR_NOMEM)
            st = zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory loading segment %llu",
                             r->name, (unsigned long long)j);
        if (st != ZP_OK)
            break;
        len += got;
        st = zpi_line_index_feed(&ix, data, len, err);
        if (st != ZP_OK)
            break;
        if (len > r->lim->max_shard_bytes + SEG_CHUNK) {
            st = zpi_err_set(err, ZP_ERR_LIMIT,
                             "shard '%s': segment %llu is larger than max_shard_bytes (%zu bytes)",
                             r->name, (unsigned long long)j, r->lim->max_shard_bytes);
            break;
        }
        if (!last && ix.n >= m) {
            end = ix.n > m ? (size_t)ix.offsets[m] : ix.line_start;
            break;
        }
        if (last && ix.n > m)
            break; /* too many records: the count check below says so */
        if (got < want) {
            if (!last)
                st = zpi_err_set(err, ZP_ERR_FORMAT,
                                 "shard '%s': '%s' ends in segment %llu after %llu records, the "
                                 "dataset counted %llu (changed since it was indexed?)", r->name,
                                 r->path, (unsigned long long)j,
                                 (unsigned long long)(first + ix.n), (unsigned long long)r->n);
            break;
        }
    }
    if (st == ZP_OK && !last) {
        /* the next segment starts at s0 + end: its first bytes, decoded
         * into data past the end, stay in the window; a chunk at most */
        keep_tail(r, s0, data, len, end);
        len = end;
        ix.n = (size_t)m;
        ix.line_start = end;
        ix.scanned = end;
    }
    if (st == ZP_OK)
        st = zpi_line_index_finish(&ix, data, len, out, err);
    if (st == ZP_OK && out->n_records != m) {
        st = zpi_err_set(err, ZP_ERR_FORMAT,
                         "shard '%s': '%s' has %llu records, the dataset counted %llu (changed "
                         "since it was indexed?)", r->name, r->path,
                         (unsigned long long)(first + out->n_records), (unsigned long long)r->n);
        free(out->offsets);
    }
    zpi_line_index_free(&ix);
    if (st != ZP_OK) {
        free(data);
        memset(out, 0, sizeof *out);
        return st;
    }
    /* the cache accounts for capacity; a recycled buffer a little larger
     * than the segment stays whole: trimmed, and grown again by the next
     * load, its pages would be fresh at every load */
    if (recycled && cap - len <= len / 4 + SEG_MIN_READ)
        zpi_shard_set_data_keep(out, data, len, cap);
    else
        zpi_shard_set_data(out, data, len, cap);
    out->first_record = first;
    out->file_bytes = r->bytes_read;
    out->read_seconds = r->t_read;
    out->decompress_seconds = r->t_dec;
    r->start[j + 1] = s0 + len;
    return ZP_OK;
}

zp_status zpi_seg_reader_next(zpi_seg_reader *r, size_t target, zpi_load_bufs *bufs,
                              zpi_shard *out, zpi_err *err)
{
    memset(out, 0, sizeof *out);
    if (!r || r->kind == ZPI_SEG_PARQUET)
        return zpi_err_set(err, ZP_ERR_INVALID, "not a line-based segment reader");
    if (r->fwd_end)
        return ZP_END;
    if (target < SEG_MIN_READ)
        target = SEG_MIN_READ;
    r->bytes_read = 0;
    r->t_read = r->t_dec = 0;
    const uint64_t s0 = r->fwd_pos;
    zpi_load_limits llim = *r->lim;
    llim.allow_empty = 1; /* the caller checks the shard's count */
    zpi_line_index ix;
    zpi_line_index_init(&ix, r->name, &llim);
    ix.line0 = r->fwd_rec; /* messages give the shard's lines and decoded bytes */
    ix.byte0 = s0;
    size_t cap = target + SEG_CHUNK;
    char *data;
    if (bufs && bufs->data) {
        data = bufs->data;
        cap = bufs->data_cap;
        bufs->data = NULL;
    } else {
        data = malloc(cap + ZPI_JSON_PADDING);
    }
    if (!data)
        return zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory reading a part",
                           r->name);
    zp_status st = ZP_OK;
    size_t len = 0, end = 0;
    int eof = 0;
    for (;;) {
        size_t got, want; /* grown only for a record longer than the buffer's room */
        st = read_on(r, s0, &data, &cap, len, 0, &got, &want, err);
        if (st == ZP_ERR_NOMEM)
            st = zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory reading a part",
                             r->name);
        if (st != ZP_OK)
            break;
        const size_t before = len;
        len += got;
        st = zpi_line_index_feed(&ix, data, len, err);
        if (st != ZP_OK)
            break;
        if (got < want) {
            eof = 1;
            end = len;
            break;
        }
        /* enough: cut after the last newline of this read, so that what
         * follows it (the next part's first bytes) is less than a chunk */
        if (len >= target && ix.line_start > before) {
            end = ix.line_start;
            break;
        }
    }
    if (st == ZP_OK && !eof) {
        keep_tail(r, s0, data, len, end); /* the next part's first bytes */
        len = end;
        ix.scanned = end;
    }
    if (st == ZP_OK)
        st = zpi_line_index_finish(&ix, data, len, out, err);
    zpi_line_index_free(&ix);
    if (st != ZP_OK) {
        free(data);
        memset(out, 0, sizeof *out);
        return st;
    }
    zpi_shard_set_data_keep(out, data, len, cap);
    out->first_record = r->fwd_rec;
    out->file_bytes = r->bytes_read;
    out->read_seconds = r->t_read;
    out->decompress_seconds = r->t_dec;
    r->fwd_pos = s0 + len;
    r->fwd_rec += out->n_records;
    r->fwd_end = eof;
    return ZP_OK;
}

int zpi_seg_reader_ended(const zpi_seg_reader *r) { return r && r->fwd_end; }

/* ------------------------------------------------------------ conversion */

zp_status zpi_seekable_convert(const char *in_path, const char *out_path, size_t frame_bytes,
                               int level, zpi_err *err)
{
    if (!in_path || !out_path)
        return ZP_ERR_INVALID;
    if (frame_bytes == 0)
        frame_bytes = (size_t)4 << 20;
    if (frame_bytes > ((size_t)1 << 30))
        return zpi_err_set(err, ZP_ERR_INVALID, "frame size %zu bytes: at most 1 GiB",
                           frame_bytes);
    if (level == 0)
        level = 3;
    size_t il = strlen(in_path);
    int compressed = il > 4 && strcmp(in_path + il - 4, ".zst") == 0   ? ZPI_SEG_ZSTD
                     : il > 3 && strcmp(in_path + il - 3, ".gz") == 0 ? ZPI_SEG_GZIP
                                                                      : ZPI_SEG_NONE;
    zpi_seg_reader *r;
    zp_status st = open_raw(in_path, in_path, compressed, (uint64_t)1 << 30, NULL, &r, err);
    if (st != ZP_OK)
        return st;
    int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        zpi_seg_reader_close(r);
        return zpi_err_set(err, ZP_ERR_IO, "cannot create '%s': %s", out_path, strerror(e));
    }
    zpi_seek_table tab = {0};
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    size_t cap = frame_bytes + SEG_CHUNK, len = 0;
    char *buf = malloc(cap);
    size_t ocap = ZSTD_compressBound(cap);
    char *obuf = malloc(ocap);
    if (!cc || !buf || !obuf) {
        st = zpi_err_set(err, ZP_ERR_NOMEM, "out of memory converting '%s'", in_path);
        goto out;
    }
    ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
    uint64_t pos = 0;
    int eof = 0;
    while (!eof || len > 0) {
        if (!eof && len < frame_bytes) {
            size_t want = cap - len < SEG_CHUNK ? cap - len : SEG_CHUNK, got;
            st = dread(r, pos, buf + len, want, &got, 0, err);
            if (st != ZP_OK)
                goto out;
            pos += got;
            len += got;
            if (got < want)
                eof = 1;
            if (len < frame_bytes && !eof)
                continue;
        }
        /* a frame ends at a record's end: the last newline within the
         * buffer (the whole rest at the end of the input) */
        size_t cut = len;
        if (!eof || len > frame_bytes) {
            size_t lim = len < frame_bytes ? len : frame_bytes;
            const char *nl = NULL;
            for (size_t k = lim; k > 0; k--)
                if (buf[k - 1] == '\n') {
                    nl = buf + k - 1;
                    break;
                }
            if (nl)
                cut = (size_t)(nl - buf) + 1;
            else { /* a record longer than a frame: up to its end */
                const char *n2 = memchr(buf + lim, '\n', len - lim);
                if (n2)
                    cut = (size_t)(n2 - buf) + 1;
                else if (!eof) {
                    if (cap - len < SEG_CHUNK) {
                        if (grow_buf(&buf, &cap, cap * 2) != 0) {
                            st = zpi_err_set(err, ZP_ERR_NOMEM, "out of memory converting '%s'",
                                             in_path);
                            goto out;
                        }
                        free(obuf);
                        ocap = ZSTD_compressBound(cap);
                        if (!(obuf = malloc(ocap))) {
                            st = zpi_err_set(err, ZP_ERR_NOMEM, "out of memory converting '%s'",
                                             in_path);
                            goto out;
                        }
                    }
                    size_t got;
                    st = dread(r, pos, buf + len, SEG_CHUNK, &got, 0, err);
                    if (st != ZP_OK)
                        goto out;
                    pos += got;
                    len += got;
                    if (got < SEG_CHUNK)
                        eof = 1;
                    continue;
                }
            }
        }
        size_t c = ZSTD_compress2(cc, obuf, ocap, buf, cut);
        if (ZSTD_isError(c)) {
            st = zpi_err_set(err, ZP_ERR_INTERNAL, "'%s': zstd: %s", out_path,
                             ZSTD_getErrorName(c));
            goto out;
        }
        if (zpi_write_all(fd, obuf, c) != 0) {
            st = zpi_err_set(err, ZP_ERR_IO, "cannot write '%s': %s", out_path, strerror(errno));
            goto out;
        }
        if (zpi_seek_table_add(&tab, c, cut) != 0) {
            st = zpi_err_set(err, ZP_ERR_LIMIT, "'%s': too many frames or a frame too large",
                             out_path);
            goto out;
        }
        memmove(buf, buf + cut, len - cut);
        len -= cut;
    }
    char *t;
    size_t tl;
    if (zpi_seek_table_encode(&tab, &t, &tl) != 0) {
        st = zpi_err_set(err, ZP_ERR_NOMEM, "out of memory converting '%s'", in_path);
        goto out;
    }
    if (zpi_write_all(fd, t, tl) != 0)
        st = zpi_err_set(err, ZP_ERR_IO, "cannot write '%s': %s", out_path, strerror(errno));
    free(t);
out:
    if (close(fd) != 0 && st == ZP_OK)
        st = zpi_err_set(err, ZP_ERR_IO, "cannot write '%s': %s", out_path, strerror(errno));
    ZSTD_freeCCtx(cc);
    free(buf);
    free(obuf);
    zpi_seek_table_free(&tab);
    zpi_seg_reader_close(r);
    return st;
}
