/*
 * tokenize_input.c - the input of `zephon tokenize` (tokenize_input.h):
 * decoding (plain, zstd or gzip) and cutting into runs of complete lines.
 */
#include "tokenize_input.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/json.h"
#include "base/util.h"

/* Bytes read at a time (and the least the line buffer holds). */
#define READ_BYTES ((size_t)1 << 20)

/* One read() (retried on EINTR): what is available now, 0 at EOF. */
static ssize_t read_once(tok_input *in, char *buf, size_t want)
{
    ssize_t r;
    do
        r = read(in->fd, buf, want);
    while (r < 0 && errno == EINTR);
    in->short_read = r > 0 && (size_t)r < want;
    return r;
}

static int is_zstd_magic(const unsigned char *p, size_t n)
{
    if (n < 4)
        return 0;
    uint32_t m = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                 (uint32_t)p[3] << 24;
    return m == 0xFD2FB528u || (m & 0xFFFFFFF0u) == 0x184D2A50u;
}

/* Open: read the first 4 bytes (a zstd or gzip magic number or not). 0, or
 * -1 with the message printed. */
int tok_input_open(tok_input *in, int fd, const char *name)
{
    memset(in, 0, sizeof *in);
    in->fd = fd;
    in->name = name;
    in->zcap = ZSTD_DStreamInSize() > ((size_t)1 << 20) ? ZSTD_DStreamInSize() : (size_t)1 << 20;
    in->zbuf = malloc(in->zcap);
    if (!in->zbuf) {
        fprintf(stderr, "zephon tokenize: out of memory\n");
        return -1;
    }
    ssize_t r = zpi_read_full(fd, in->zbuf, 4);
    if (r < 0) {
        fprintf(stderr, "zephon tokenize: %s: read error: %s\n", name, strerror(errno));
        return -1;
    }
    in->zlen = (size_t)r;
    in->eof = r < 4;
    in->zst = is_zstd_magic((const unsigned char *)in->zbuf, in->zlen);
    const unsigned char *m = (const unsigned char *)in->zbuf;
    if (in->zlen >= 2 && m[0] == 0x1f && m[1] == 0x8b && zpi_gz_create(&in->gz) != ZP_OK) {
        fprintf(stderr, "zephon tokenize: out of memory\n");
        return -1;
    }
    if (in->zst) {
        in->dctx = ZSTD_createDCtx();
        if (!in->dctx) {
            fprintf(stderr, "zephon tokenize: out of memory\n");
            return -1;
        }
    }
    return 0;
}

void tok_input_close(tok_input *in)
{
    ZSTD_freeDCtx(in->dctx);
    zpi_gz_destroy(in->gz);
    free(in->zbuf);
}

/* Read up to cap decoded bytes into dst; *got gets the count (0 only at the
 * end of the input). 0, or -1 with the cause in err ("read error: ...",
 * "truncated zstd frame", ...). */
static int input_read(tok_input *in, char *dst, size_t cap, size_t *got, zpi_err *err);

/* input_read of gzip data: every member decoded by one decoder (errors:
 * "truncated gzip file ...", "corrupt deflate data ...", gzip_stream.h). */
static int gz_read(tok_input *in, char *dst, size_t cap, size_t *got, zpi_err *err)
{
    for (;;) {
        if (zpi_gz_avail_in(in->gz) == 0) {
            if (in->zpos < in->zlen) { /* borrowed until used up */
                zpi_gz_input(in->gz, in->zbuf + in->zpos, in->zlen - in->zpos);
                in->zpos = in->zlen;
            } else if (!in->eof) {
                ssize_t r = read_once(in, in->zbuf, in->zcap);
                if (r < 0) {
                    zpi_err_set(err, ZP_ERR_IO, "read error: %s", strerror(errno));
                    return -1;
                }
                in->zlen = (size_t)r;
                in->zpos = 0;
                if (r == 0)
                    in->eof = 1;
                continue;
            }
        }
        size_t g;
        if (zpi_gz_decode(in->gz, dst, cap, &g, in->name, NULL, err) != ZP_OK)
            return -1;
        if (g > 0) {
            *got = g;
            return 0;
        }
        if (zpi_gz_avail_in(in->gz) == 0 && in->zpos == in->zlen && in->eof)
            return zpi_gz_end(in->gz, in->name, NULL, err) == ZP_OK ? 0 : -1;
    }
}

static int input_read(tok_input *in, char *dst, size_t cap, size_t *got, zpi_err *err)
{
    *got = 0;
    if (in->gz)
        return gz_read(in, dst, cap, got, err);
    if (!in->zst) {
        if (in->zpos < in->zlen) { /* the bytes read by input_open first */
            size_t n = in->zlen - in->zpos < cap ? in->zlen - in->zpos : cap;
            memcpy(dst, in->zbuf + in->zpos, n);
            in->zpos += n;
            *got = n;
            return 0;
        }
        if (in->eof)
            return 0;
        ssize_t r = read_once(in, dst, cap);
        if (r < 0) {
            zpi_err_set(err, ZP_ERR_IO, "read error: %s", strerror(errno));
            return -1;
        }
        if (r == 0)
            in->eof = 1;
        *got = (size_t)r;
        return 0;
    }
    ZSTD_outBuffer ob = {dst, cap, 0};
    while (ob.pos == 0) {
        if (in->zpos == in->zlen) {
            if (in->eof) {
                /* The input is over. A frame not ended may still hold
                 * decoded bytes (the last call filled its output), or be
                 * truncated. */
                if (in->last_ret != 0) {
                    ZSTD_inBuffer ib = {in->zbuf, 0, 0};
                    size_t ret = ZSTD_decompressStream(in->dctx, &ob, &ib);
                    if (!ZSTD_isError(ret) && ob.pos > 0) {
                        in->last_ret = ret;
                        break;
                    }
                    zpi_err_set(err, ZP_ERR_FORMAT, "truncated zstd frame");
                    return -1;
                }
                break;
            }
            ssize_t r = read_once(in, in->zbuf, in->zcap);
            if (r < 0) {
                zpi_err_set(err, ZP_ERR_IO, "read error: %s", strerror(errno));
                return -1;
            }
            in->zlen = (size_t)r;
            in->zpos = 0;
            if (r == 0)
                in->eof = 1;
            continue;
        }
        ZSTD_inBuffer ib = {in->zbuf, in->zlen, in->zpos};
        size_t ret = ZSTD_decompressStream(in->dctx, &ob, &ib);
        if (ZSTD_isError(ret)) {
            zpi_err_set(err, ZP_ERR_FORMAT, "corrupt zstd data (%s)", ZSTD_getErrorName(ret));
            return -1;
        }
        in->zpos = ib.pos;
        in->last_ret = ret;
    }
    *got = ob.pos;
    return 0;
}

/* ------------------------------------------------------------ lines */

void tok_lines_init(tok_lines *L, tok_input *in)
{
    memset(L, 0, sizeof *L);
    L->in = in;
}

void tok_lines_free(tok_lines *L)
{
    free(L->buf);
    L->buf = NULL;
}

/* Read more input after [pos, len) (moved to the front). 0, or -1 when
 * out of memory. A read error ends the input (L->failed). */
static int read_more(tok_lines *L)
{
    if (L->pos > 0) {
        memmove(L->buf, L->buf + L->pos, L->len - L->pos);
        L->len -= L->pos;
        L->pos = 0;
    }
    if (L->cap - L->len < READ_BYTES / 2) { /* one line longer than the buffer: grow it */
        size_t ncap = L->cap ? L->cap * 2 : READ_BYTES;
        char *nb = ncap > L->cap ? realloc(L->buf, ncap) : NULL;
        if (!nb)
            return -1;
        L->buf = nb;
        L->cap = ncap;
    }
    size_t got = 0;
    if (input_read(L->in, L->buf + L->len, L->cap - L->len, &got, &L->err) != 0) {
        L->eof = L->failed = 1;
        return 0;
    }
    if (got == 0)
        L->eof = 1;
    L->len += got;
    return 0;
}

/* Copy the n lines at buf[pos, end) into out (line_end: 1 when the last
 * line has no newline: its "newline" is the first padding byte). */
static int emit(tok_lines *L, size_t end, int line_end, tok_run *out)
{
    size_t bytes = end - L->pos;
    if (zpi_grow((void **)&out->buf, &out->cap, bytes + ZPI_JSON_PADDING, 1) != 0)
        return -2;
    memcpy(out->buf, L->buf + L->pos, bytes);
    memset(out->buf + bytes, 0, ZPI_JSON_PADDING);
    out->len = bytes;
    out->n_lines = 0;
    out->line0 = L->line0;
    size_t p = 0;
    while (p < bytes) {
        const char *nl = memchr(out->buf + p, '\n', bytes - p);
        size_t next = nl ? (size_t)(nl - out->buf) + 1 : bytes + (size_t)line_end;
        if (zpi_grow((void **)&out->starts, &out->starts_cap, out->n_lines + 2,
                     sizeof *out->starts) != 0)
            return -2;
        out->starts[out->n_lines++] = p;
        p = next;
    }
    out->starts[out->n_lines] = p;
    L->line0 += out->n_lines;
    L->pos = end;
    return 1;
}

int tok_lines_next(tok_lines *L, size_t chunk_bytes, tok_run *out)
{
    if (L->done)
        return 0;
    for (;;) {
        /* complete lines from pos, until about chunk_bytes */
        size_t p = L->pos, n = 0;
        while (p < L->len && p - L->pos < chunk_bytes) {
            const char *nl = memchr(L->buf + p, '\n', L->len - p);
            if (!nl)
                break;
            p = (size_t)(nl - L->buf) + 1;
            n++;
        }
        if (n > 0 && (p - L->pos >= chunk_bytes || L->eof || L->in->short_read))
            return emit(L, p, 0, out);
        if (L->eof) {
            if (n > 0)
                return emit(L, p, 0, out);
            if (L->pos < L->len && !L->failed) /* a last line without newline */
                return emit(L, L->len, 1, out);
            L->done = 1;
            return L->failed ? -1 : 0;
        }
        if (read_more(L) != 0)
            return -2;
    }
}
