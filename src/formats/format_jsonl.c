/*
 * format_jsonl.c - the "jsonl", "jsonl.zst" and "jsonl.gz" shard formats:
 * one JSON record per line, plain, zstd-compressed (any number of frames,
 * skippable frames ignored) or gzip-compressed (any number of members,
 * gzip_stream.h; suffixes .jsonl.gz and .json.gz).
 *
 * A load reads the file in 1 MiB reads into one buffer (decompressing with
 * one ZSTD_DCtx per load), and indexes lines as the bytes arrive. The
 * load_bufs entry points decode into a recycled buffer and read compressed
 * bytes into a reused scratch buffer when the caller has them (the shard
 * cache does), so that a steady stream of loads faults in no fresh pages.
 * When the manifest gives the shard's hash, the bytes are hashed (XXH64) as
 * they are read and checked at the end, with the record count
 * (zpi_load_check). JSON
 * validity is not checked here: the fetch stage parses each record.
 *
 * Ownership: on success the caller owns out->data and out->offsets (release
 * with zpi_shard_free()); on error nothing is left allocated.
 * Thread safety: loads share no state; any number may run concurrently.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "formats/gzip_stream.h"
#include "formats/line_index.h"
#include "base/util.h"

#define READ_CHUNK ((size_t)1 << 20) /* bytes per read() */

/* zpi_read_full(), its time added to *t. On error the message names the shard
 * and the byte offset `at` where the read started. */
static ssize_t timed_read(int fd, char *buf, size_t want, double *t, const char *name,
                          uint64_t at, zpi_err *err)
{
    double t0 = zpi_now();
    ssize_t r = zpi_read_full(fd, buf, want);
    *t += zpi_now() - t0;
    if (r < 0) {
        int e = errno;
        zpi_err_set(err, ZP_ERR_IO, "shard '%s': read error at byte %llu: %s", name,
                    (unsigned long long)at, strerror(e));
    }
    return r;
}

/* Open path for reading. */
static zp_status open_shard(const char *path, const char *name, int *fd, struct stat *st,
                            zpi_err *err)
{
    *fd = -1;
    int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0) {
        int e = errno;
        return zpi_err_set(err, ZP_ERR_IO, "shard '%s': cannot open '%s': %s", name, path,
                           strerror(e));
    }
    if (fstat(f, st) != 0) {
        int e = errno;
        zpi_err_set(err, ZP_ERR_IO, "shard '%s': cannot stat '%s': %s", name, path, strerror(e));
        close(f);
        return ZP_ERR_IO;
    }
    if (!S_ISREG(st->st_mode)) {
        zpi_err_set(err, ZP_ERR_IO, "shard '%s': '%s' is not a regular file", name, path);
        close(f);
        return ZP_ERR_IO;
    }
    (void)posix_fadvise(f, 0, 0, POSIX_FADV_SEQUENTIAL);
    *fd = f;
    return ZP_OK;
}

#define HUGE_PAGE ((size_t)2 << 20)

/* Ask for transparent huge pages on the whole 2 MiB pages inside d[0..n):
 * filling hundreds of MB of fresh memory otherwise costs one page fault
 * per 4 KiB. */
static void advise_huge(char *d, size_t n)
{
    if (n < 4 * HUGE_PAGE)
        return;
    uintptr_t a = ((uintptr_t)d + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
    uintptr_t b = ((uintptr_t)d + n) & ~(uintptr_t)(HUGE_PAGE - 1);
    if (b > a)
        (void)madvise((void *)a, b - a, MADV_HUGEPAGE);
}

/* malloc(n); a large block starts on a huge-page boundary, so that all of
 * it can be backed by huge pages. Released with free(). */
static char *big_alloc(size_t n)
{
    if (n < 4 * HUGE_PAGE)
        return malloc(n ? n : 1);
    void *p = NULL;
    if (posix_memalign(&p, HUGE_PAGE, n) != 0)
        return NULL;
    advise_huge(p, n);
    return p;
}

/* Make the data buffer (*data, capacity *cap) hold at least want bytes plus
 * the parser's padding, keeping its first `keep` bytes; a buffer already
 * large enough is kept as it is (a recycled one may be larger). With
 * nothing to keep, a buffer too small is replaced, not grown: realloc
 * would copy it. Large buffers use huge pages. */
static zp_status resize(char **data, size_t *cap, size_t want, size_t keep, const char *name,
                        zpi_err *err)
{
    if (*data && *cap >= want)
        return ZP_OK;
    char *d;
    if (keep == 0) {
        free(*data);
        *data = NULL;
        *cap = 0;
        d = big_alloc(want + ZPI_JSON_PADDING);
    } else {
        d = realloc(*data, want + ZPI_JSON_PADDING);
        if (d)
            advise_huge(d, want);
    }
    if (!d) {
        return zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory (%zu bytes)", name, want);
    }
    *data = d;
    *cap = want;
    return ZP_OK;
}

/* Capacity for a buffer that must hold exactly n bytes: large ones get 1/16
 * more, so that once recycled they fit the next shard of about the same
 * size without being replaced. */
static size_t with_headroom(size_t n)
{
    return n >= ((size_t)4 << 20) ? n + n / 16 : n;
}

/* The spare decode buffer of bufs, if any: the load takes it over. */
static void take_spare(zpi_load_bufs *bufs, char **data, size_t *cap)
{
    *data = NULL;
    *cap = 0;
    if (bufs && bufs->data) {
        *data = bufs->data;
        *cap = bufs->data_cap;
        bufs->data = NULL;
        bufs->data_cap = 0;
    }
}

/* A scratch buffer of at least want bytes: the caller's (grown if needed)
 * when bufs is given, else a new one (*own set: free it after the load). */
static char *scratch(zpi_load_bufs *bufs, size_t want, int *own)
{
    *own = !bufs;
    if (!bufs)
        return malloc(want ? want : 1);
    if (bufs->scratch_cap < want || !bufs->scratch) {
        free(bufs->scratch); /* contents are not kept: no copy */
        size_t n = with_headroom(want ? want : 1);
        bufs->scratch = big_alloc(n);
        bufs->scratch_cap = bufs->scratch ? n : 0;
    }
    return bufs->scratch;
}

static zp_status too_big(const char *name, const zpi_load_limits *lim, size_t line, zpi_err *err)
{
    return zpi_err_set(err, ZP_ERR_LIMIT,
                       "shard '%s': decoded size exceeds max_shard_bytes (%zu bytes) at line %zu",
                       name, lim->max_shard_bytes, line);
}

/* A hash of the bytes read, when the manifest has one to check (h NULL
 * otherwise). */
static zp_status hash_begin(const zpi_load_limits *lim, const char *name, XXH64_state_t **h,
                            zpi_err *err)
{
    *h = NULL;
    if (!lim->has_xxh64)
        return ZP_OK;
    if (!(*h = XXH64_createState()) || XXH64_reset(*h, 0) != XXH_OK) {
        XXH64_freeState(*h);
        *h = NULL;
        return zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory", name);
    }
    return ZP_OK;
}

/* The digest of h (freed), or NULL without one. */
static const uint64_t *hash_end(XXH64_state_t *h, uint64_t *v)
{
    if (!h)
        return NULL;
    *v = XXH64_digest(h);
    XXH64_freeState(h);
    return v;
}

/* End of every load, whatever stopped it (st): on ZP_OK, index the final
 * line, check the shard against lim (hash: of the bytes read, NULL when not
 * hashed), zero the padding, give back a large unused tail of data
 * (capacity cap) and hand data (with its capacity) and the offsets to out;
 * otherwise, or when that fails, free both and clear out (also the figures
 * the caller set in it). */
static zp_status end_load(zp_status st, zpi_line_index *ix, char *data, size_t len, size_t cap,
                          const char *path, const uint64_t *hash, zpi_shard *out, zpi_err *err)
{
    if (st == ZP_OK)
        st = zpi_line_index_finish(ix, data, len, out, err);
    if (st == ZP_OK) {
        st = zpi_load_check(ix->lim, ix->name, path, hash, out, err);
        if (st != ZP_OK)
            free(out->offsets);
    }
    if (st != ZP_OK) {
        zpi_line_index_free(ix);
        free(data);
        memset(out, 0, sizeof *out);
        return st;
    }
    zpi_shard_set_data(out, data, len, cap);
    return ZP_OK;
}

static zp_status load_plain_bufs(const char *path, const char *name, const zpi_load_limits *lim,
                                 zpi_load_bufs *bufs, zpi_shard *out, zpi_err *err)
{
    memset(out, 0, sizeof *out);
    int fd;
    struct stat sb;
    zp_status st = open_shard(path, name, &fd, &sb, err);
    if (st != ZP_OK)
        return st;
    if ((uint64_t)sb.st_size > lim->max_shard_bytes) {
        close(fd);
        return zpi_err_set(err, ZP_ERR_LIMIT,
                           "shard '%s': %llu bytes exceed max_shard_bytes (%zu bytes)", name,
                           (unsigned long long)sb.st_size, lim->max_shard_bytes);
    }
    char *data;
    size_t cap, len = 0;
    take_spare(bufs, &data, &cap);
    zpi_line_index ix;
    zpi_line_index_init(&ix, name, lim);
    XXH64_state_t *h;
    st = hash_begin(lim, name, &h, err);
    if (st == ZP_OK)
        st = resize(&data, &cap, with_headroom((size_t)sb.st_size), 0, name, err);
    double t_read = 0;
    while (st == ZP_OK) {
        if (len == cap) {
            /* The expected size is read: one probe read tells EOF from a
             * file that grew while we read it. */
            char probe;
            ssize_t r = timed_read(fd, &probe, 1, &t_read, name, len, err);
            if (r < 0) {
                st = ZP_ERR_IO;
                break;
            }
            if (r == 0)
                break;
            st = resize(&data, &cap, cap + cap / 2 + READ_CHUNK, len, name, err);
            if (st != ZP_OK)
                break;
            data[len++] = probe;
            if (h)
                XXH64_update(h, &probe, 1);
        }
        size_t want = cap - len < READ_CHUNK ? cap - len : READ_CHUNK;
        ssize_t r = timed_read(fd, data + len, want, &t_read, name, len, err);
        if (r < 0) {
            st = ZP_ERR_IO;
            break;
        }
        if (h)
            XXH64_update(h, data + len, (size_t)r);
        len += (size_t)r;
        if (len > lim->max_shard_bytes) {
            st = too_big(name, lim, ix.n + 1, err);
            break;
        }
        st = zpi_line_index_feed(&ix, data, len, err);
        if (r == 0 || (size_t)r < want)
            break; /* EOF */
    }
    close(fd);
    out->file_bytes = len;
    out->read_seconds = t_read;
    uint64_t hv;
    const uint64_t *hash = hash_end(h, &hv);
    return end_load(st, &ix, data, len, cap, path, hash, out, err);
}

static zp_status load_plain(const char *path, const char *name, const zpi_load_limits *lim,
                            zpi_shard *out, zpi_err *err)
{
    return load_plain_bufs(path, name, lim, NULL, out, err);
}

/* Smallest power of two >= x, as a log2 (for the zstd window limit). */
static int log2_ceil(size_t x)
{
    int l = 0;
    while (l < 63 && ((size_t)1 << l) < x)
        l++;
    return l;
}

/* Sum of the decoded sizes recorded in the headers of all frames of src
 * (skippable frames count 0), with the stable API only. UNKNOWN when a
 * frame does not record its size, ERROR when a frame is damaged. */
static unsigned long long frames_content_size(const char *src, size_t n)
{
    unsigned long long total = 0;
    while (n) {
        if (n < 4)
            return ZSTD_CONTENTSIZE_ERROR;
        uint32_t magic = (uint32_t)(unsigned char)src[0] | (uint32_t)(unsigned char)src[1] << 8 |
                         (uint32_t)(unsigned char)src[2] << 16 |
                         (uint32_t)(unsigned char)src[3] << 24;
        size_t fsz = ZSTD_findFrameCompressedSize(src, n);
        if (ZSTD_isError(fsz) || fsz > n)
            return ZSTD_CONTENTSIZE_ERROR;
        if ((magic & ZSTD_MAGIC_SKIPPABLE_MASK) != ZSTD_MAGIC_SKIPPABLE_START) {
            unsigned long long c = ZSTD_getFrameContentSize(src, n);
            if (c == ZSTD_CONTENTSIZE_UNKNOWN || c == ZSTD_CONTENTSIZE_ERROR)
                return c;
            total += c;
        }
        src += fsz;
        n -= fsz;
    }
    return total;
}

/* Fast path of load_zst: when every frame's header records its decoded
 * size, read the file whole and decode it in one call straight into a
 * buffer of the exact size (no copies out of a window buffer, no
 * regrowth). Returns 1 when it did the load (*st says how it went), 0 when
 * the streaming path must do it: unknown sizes, or any zstd error (the
 * streaming path then names the failing line and byte). Costs the
 * compressed size in memory while it runs. */
static int load_zst_whole(int fd, const struct stat *sb, const char *path, const char *name,
                          const zpi_load_limits *lim, zpi_load_bufs *bufs, zpi_shard *out,
                          zpi_err *err, zp_status *st)
{
    if (sb->st_size <= 0 || (uint64_t)sb->st_size > lim->max_shard_bytes)
        return 0;
    size_t csize = (size_t)sb->st_size;
    int own_src;
    char *src = scratch(bufs, csize, &own_src);
    if (!src)
        return 0;
    double t0 = zpi_now();
    ssize_t r = zpi_read_full(fd, src, csize);
    double t_read = zpi_now() - t0;
    unsigned long long dsize =
        r == (ssize_t)csize ? frames_content_size(src, csize) : ZSTD_CONTENTSIZE_ERROR;
    if (dsize == ZSTD_CONTENTSIZE_UNKNOWN || dsize == ZSTD_CONTENTSIZE_ERROR ||
        dsize > lim->max_shard_bytes) {
        if (own_src)
            free(src);
        return 0;
    }
    char *data;
    size_t cap;
    take_spare(bufs, &data, &cap);
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    if (!dctx ||
        resize(&data, &cap, with_headroom((size_t)dsize), 0, name, err) != ZP_OK) {
        ZSTD_freeDCtx(dctx);
        if (own_src)
            free(src);
        free(data);
        return 0;
    }
    t0 = zpi_now();
    size_t got = ZSTD_decompressDCtx(dctx, data, (size_t)dsize, src, csize);
    double t_dec = zpi_now() - t0;
    ZSTD_freeDCtx(dctx);
    uint64_t hv = lim->has_xxh64 ? XXH64(src, csize, 0) : 0;
    if (own_src)
        free(src);
    if (ZSTD_isError(got) || got != dsize) {
        free(data);
        return 0;
    }
    zpi_line_index ix;
    zpi_line_index_init(&ix, name, lim);
    out->file_bytes = csize;
    out->read_seconds = t_read;
    out->decompress_seconds = t_dec;
    *st = end_load(ZP_OK, &ix, data, got, cap, path, lim->has_xxh64 ? &hv : NULL, out, err);
    return 1;
}

/* The streaming path's state: the open shard, the decoder and its input
 * buffer, the decoded bytes and their line index. */
typedef struct {
    int fd;
    struct stat sb;
    int own_in;
    char *inbuf;
    ZSTD_DCtx *dctx;
    XXH64_state_t *h;
    char *data;
    size_t len, cap;
    zpi_line_index ix;
    size_t limit;     /* the decoded size that tells a shard too big */
    size_t min_space; /* free room wanted before a decoding call */
} zst_stream;

/* Sets up the streaming path (s->fd and s->sb already open); zst_end
 * releases what it took, whether it fails or not. */
static zp_status zst_begin(zst_stream *s, const char *name, const zpi_load_limits *lim,
                           zpi_load_bufs *bufs, zpi_err *err)
{
    s->inbuf = scratch(bufs, READ_CHUNK, &s->own_in);
    s->dctx = ZSTD_createDCtx();
    s->len = 0;
    take_spare(bufs, &s->data, &s->cap);
    zpi_line_index_init(&s->ix, name, lim);
    s->limit = lim->max_shard_bytes < SIZE_MAX - ZPI_JSON_PADDING - 1 ? lim->max_shard_bytes + 1
                                                                      : lim->max_shard_bytes;
    s->min_space = ZSTD_DStreamOutSize();
    zp_status st = hash_begin(lim, name, &s->h, err);
    if (st != ZP_OK)
        return st;
    if (!s->inbuf || !s->dctx)
        return zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory", name);
    /* Frames may use windows up to the shard limit (e.g. zstd --long), and
     * no more: a hostile header cannot make us reserve more than that. */
    int wl = log2_ceil(lim->max_shard_bytes);
    ZSTD_bounds b = ZSTD_dParam_getBounds(ZSTD_d_windowLogMax);
    if (!ZSTD_isError(b.error) && wl > b.upperBound)
        wl = b.upperBound;
    if (wl > 27) /* 27 is the default; only ever raise it */
        (void)ZSTD_DCtx_setParameter(s->dctx, ZSTD_d_windowLogMax, wl);
    return ZP_OK;
}

static zp_status zst_end(zst_stream *s, zp_status st, const char *path, zpi_shard *out,
                         zpi_err *err)
{
    close(s->fd);
    ZSTD_freeDCtx(s->dctx);
    if (s->own_in)
        free(s->inbuf);
    uint64_t hv;
    const uint64_t *hash = hash_end(s->h, &hv);
    return end_load(st, &s->ix, s->data, s->len, s->cap, path, hash, out, err);
}

/* First guess of the decoded size, from the first chunk read (r bytes):
 * the first frame's content size when its header says, and at least 4x
 * the file (text compresses 3-5x). Untouched capacity costs no memory, and
 * glibc grows large blocks with mremap, not copies. */
static size_t zst_first_guess(const char *inbuf, ssize_t r, const struct stat *sb,
                              size_t min_space, size_t limit)
{
    unsigned long long fcs =
        r > 0 ? ZSTD_getFrameContentSize(inbuf, (size_t)r) : ZSTD_CONTENTSIZE_UNKNOWN;
    uint64_t guess = (uint64_t)sb->st_size * 4;
    if (fcs != ZSTD_CONTENTSIZE_UNKNOWN && fcs != ZSTD_CONTENTSIZE_ERROR && fcs > guess)
        guess = fcs;
    if (guess < min_space)
        guess = min_space;
    if (guess > limit)
        guess = limit;
    return (size_t)guess;
}

/* The error of a failed ZSTD_decompressStream call (ret), on the input
 * chunk at file bytes [from, to). */
static zp_status zst_frame_error(const char *name, const zpi_load_limits *lim,
                                 const zpi_line_index *ix, uint64_t from, uint64_t to,
                                 size_t ret, zpi_err *err)
{
    if (ZSTD_getErrorCode(ret) == ZSTD_error_frameParameter_windowTooLarge) {
        return zpi_err_set(err, ZP_ERR_LIMIT,
                           "shard '%s': zstd frame needs a window larger than "
                           "max_shard_bytes "
                           "(%zu bytes) after line %zu (decoded byte %zu, file bytes "
                           "%llu-%llu): %s", name, lim->max_shard_bytes, ix->n, ix->line_start,
                           (unsigned long long)from, (unsigned long long)to,
                           ZSTD_getErrorName(ret));
    }
    return zpi_err_set(err, ZP_ERR_FORMAT,
                       "shard '%s': corrupt zstd frame after line %zu (decoded byte "
                       "%zu, file bytes %llu-%llu): %s", name, ix->n, ix->line_start,
                       (unsigned long long)from, (unsigned long long)to, ZSTD_getErrorName(ret));
}

/* After the last chunk (consumed: the file's bytes; last_ret: the last
 * decoding call's): a frame left unfinished is an error; an empty file
 * gets its (empty) buffer; the sizes and times go to out. */
static zp_status zst_finish(const char *name, const zpi_line_index *ix, size_t last_ret,
                            uint64_t consumed, double t_read, double t_dec, char **data,
                            size_t *cap, zpi_shard *out, zpi_err *err)
{
    if (last_ret != 0) {
        return zpi_err_set(err, ZP_ERR_FORMAT,
                           "shard '%s': truncated zstd frame after line %zu (decoded byte %zu, "
                           "file byte %llu)", name, ix->n, ix->line_start,
                           (unsigned long long)consumed);
    }
    if (!*data) { /* empty file */
        zp_status st = resize(data, cap, 0, 0, name, err);
        if (st != ZP_OK)
            return st;
    }
    out->file_bytes = consumed;
    out->read_seconds = t_read;
    out->decompress_seconds = t_dec;
    return ZP_OK;
}

/* The streaming loop: reads the shard by chunks, decodes them into
 * s->data (grown as needed) and indexes the lines as they come. */
static zp_status zst_decode(zst_stream *s, const char *name, const zpi_load_limits *lim,
                            zpi_shard *out, zpi_err *err)
{
    char *const inbuf = s->inbuf;
    zpi_line_index *const ix = &s->ix;
    const size_t limit = s->limit, min_space = s->min_space;
    char *data = s->data;
    size_t len = s->len, cap = s->cap;
    zp_status st = ZP_OK;
    ZSTD_inBuffer in = {inbuf, 0, 0};
    uint64_t consumed = 0; /* compressed bytes consumed before the current chunk */
    int eof = 0, need_flush = 0, first = 1;
    size_t last_ret = 0;
    double t_read = 0, t_dec = 0;
    for (;;) {
        if (in.pos == in.size && !need_flush) {
            if (eof)
                break;
            consumed += in.size;
            ssize_t r = timed_read(s->fd, inbuf, READ_CHUNK, &t_read, name, consumed, err);
            if (r < 0) {
                st = ZP_ERR_IO;
                goto done;
            }
            if (s->h)
                XXH64_update(s->h, inbuf, (size_t)r);
            in.size = (size_t)r;
            in.pos = 0;
            if ((size_t)r < READ_CHUNK)
                eof = 1;
            if (first) {
                st = resize(&data, &cap, zst_first_guess(inbuf, r, &s->sb, min_space, limit), 0,
                            name, err);
                if (st != ZP_OK)
                    goto done;
                first = 0;
            }
            continue;
        }
        if (cap - len < min_space && cap < limit) {
            size_t ncap = cap + cap / 2;
            if (ncap < cap + min_space)
                ncap = cap + min_space;
            if (ncap > limit)
                ncap = limit;
            st = resize(&data, &cap, ncap, len, name, err);
            if (st != ZP_OK)
                goto done;
        }
        ZSTD_outBuffer ob = {data, cap, len};
        const size_t in_pos0 = in.pos;
        double t0 = zpi_now();
        size_t ret = ZSTD_decompressStream(s->dctx, &ob, &in);
        t_dec += zpi_now() - t0;
        if (ZSTD_isError(ret)) {
            st = zst_frame_error(name, lim, ix, consumed + in_pos0, consumed + in.size, ret, err);
            goto done;
        }
        len = ob.pos;
        /* A full output buffer may hide decoded bytes still inside zstd,
         * unless the call ended a frame (ret == 0): then nothing is left,
         * and calling again without input would start reading a next frame. */
        need_flush = ob.pos == ob.size && ret != 0;
        last_ret = ret;
        if (len > lim->max_shard_bytes) {
            st = too_big(name, lim, ix->n + 1, err);
            goto done;
        }
        st = zpi_line_index_feed(ix, data, len, err);
        if (st != ZP_OK)
            goto done;
    }
    consumed += in.size;
    st = zst_finish(name, ix, last_ret, consumed, t_read, t_dec, &data, &cap, out, err);
done:
    s->data = data;
    s->len = len;
    s->cap = cap;
    return st;
}

static zp_status load_zst_bufs(const char *path, const char *name, const zpi_load_limits *lim,
                               zpi_load_bufs *bufs, zpi_shard *out, zpi_err *err)
{
    memset(out, 0, sizeof *out);
    zst_stream s;
    zp_status st = open_shard(path, name, &s.fd, &s.sb, err);
    if (st != ZP_OK)
        return st;
    if (load_zst_whole(s.fd, &s.sb, path, name, lim, bufs, out, err, &st)) {
        close(s.fd);
        return st;
    }
    if (lseek(s.fd, 0, SEEK_SET) != 0) {
        int e = errno;
        zpi_err_set(err, ZP_ERR_IO, "shard '%s': cannot seek '%s': %s", name, path, strerror(e));
        close(s.fd);
        return ZP_ERR_IO;
    }
    st = zst_begin(&s, name, lim, bufs, err);
    if (st == ZP_OK)
        st = zst_decode(&s, name, lim, out, err);
    return zst_end(&s, st, path, out, err);
}

static zp_status load_zst(const char *path, const char *name, const zpi_load_limits *lim,
                          zpi_shard *out, zpi_err *err)
{
    return load_zst_bufs(path, name, lim, NULL, out, err);
}

/* ------------------------------------------------------------ gzip */

/* Free room wanted in the decode buffer before a gzip decoding call, and
 * the most one call decodes. */
#define GZ_MIN_SPACE ((size_t)128 << 10)
#define GZ_SLICE ((size_t)256 << 10)

/* First guess of a gzip shard's decoded size: the ISIZE of its last
 * member (the whole decoded size mod 2^32 for a file of one member) when
 * that is larger, else 4x the file; at most limit. */
static size_t gz_first_guess(int fd, const struct stat *sb, size_t limit)
{
    uint64_t guess = (uint64_t)sb->st_size * 4;
    unsigned char t[4];
    if (sb->st_size >= 20 && pread(fd, t, 4, sb->st_size - 4) == 4) {
        uint64_t isize = (uint64_t)t[0] | (uint64_t)t[1] << 8 | (uint64_t)t[2] << 16 |
                         (uint64_t)t[3] << 24;
        if (isize > guess)
            guess = isize + 1;
    }
    if (guess < GZ_MIN_SPACE)
        guess = GZ_MIN_SPACE;
    return guess > limit ? limit : (size_t)guess;
}

/* The whole-shard load of a .jsonl.gz: the file read in chunks and
 * decoded by one streaming decoder (every member) into one buffer, its
 * lines indexed as they arrive. */
static zp_status load_gz_bufs(const char *path, const char *name, const zpi_load_limits *lim,
                              zpi_load_bufs *bufs, zpi_shard *out, zpi_err *err)
{
    memset(out, 0, sizeof *out);
    int fd;
    struct stat sb;
    zp_status st = open_shard(path, name, &fd, &sb, err);
    if (st != ZP_OK)
        return st;
    const size_t limit = lim->max_shard_bytes < SIZE_MAX - ZPI_JSON_PADDING - 1
                             ? lim->max_shard_bytes + 1
                             : lim->max_shard_bytes;
    int own_in;
    char *inbuf = scratch(bufs, READ_CHUNK, &own_in);
    zpi_gz *g = NULL;
    char *data;
    size_t cap, len = 0;
    take_spare(bufs, &data, &cap);
    zpi_line_index ix;
    zpi_line_index_init(&ix, name, lim);
    XXH64_state_t *h = NULL;
    double t_read = 0, t_dec = 0;
    char where[96];
    if (!inbuf || zpi_gz_create(&g) != ZP_OK)
        st = zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory", name);
    if (st == ZP_OK)
        st = hash_begin(lim, name, &h, err);
    if (st == ZP_OK)
        st = resize(&data, &cap, gz_first_guess(fd, &sb, limit), 0, name, err);
    int eof = 0;
    while (st == ZP_OK) {
        if (zpi_gz_avail_in(g) == 0 && !eof) {
            uint64_t at = zpi_gz_consumed(g);
            ssize_t r = timed_read(fd, inbuf, READ_CHUNK, &t_read, name, at, err);
            if (r < 0) {
                st = ZP_ERR_IO;
                break;
            }
            if (h)
                XXH64_update(h, inbuf, (size_t)r);
            if ((size_t)r < READ_CHUNK)
                eof = 1;
            zpi_gz_input(g, inbuf, (size_t)r);
        }
        if (cap - len < GZ_MIN_SPACE && cap < limit) {
            size_t ncap = cap + cap / 2;
            if (ncap < cap + GZ_MIN_SPACE)
                ncap = cap + GZ_MIN_SPACE;
            if (ncap > limit)
                ncap = limit;
            st = resize(&data, &cap, ncap, len, name, err);
            if (st != ZP_OK)
                break;
        }
        zpi_fmt(where, sizeof where, "after line %zu", ix.n);
        size_t got;
        double t0 = zpi_now();
        /* 256 KiB at most per call: the lines are indexed between calls,
         * so that a message names a line near the damage */
        size_t room = cap - len < GZ_SLICE ? cap - len : GZ_SLICE;
        st = zpi_gz_decode(g, data + len, room, &got, name, where, err);
        t_dec += zpi_now() - t0;
        if (st != ZP_OK)
            break;
        len += got;
        if (len > lim->max_shard_bytes) {
            st = too_big(name, lim, ix.n + 1, err);
            break;
        }
        st = zpi_line_index_feed(&ix, data, len, err);
        if (st == ZP_OK && got == 0 && zpi_gz_avail_in(g) == 0 && eof) {
            zpi_fmt(where, sizeof where, "after line %zu", ix.n);
            st = zpi_gz_end(g, name, where, err);
            break;
        }
    }
    out->file_bytes = g ? zpi_gz_consumed(g) : 0;
    out->read_seconds = t_read;
    out->decompress_seconds = t_dec;
    close(fd);
    zpi_gz_destroy(g);
    if (own_in)
        free(inbuf);
    if (st == ZP_OK && !data)
        st = resize(&data, &cap, 0, 0, name, err);
    uint64_t hv;
    const uint64_t *hash = hash_end(h, &hv);
    return end_load(st, &ix, data, len, cap, path, hash, out, err);
}

static zp_status load_gz(const char *path, const char *name, const zpi_load_limits *lim,
                         zpi_shard *out, zpi_err *err)
{
    return load_gz_bufs(path, name, lim, NULL, out, err);
}

const zpi_format zpi_format_jsonl = {
    .name = "jsonl", .suffix = ".jsonl", .seg = ZPI_FMT_SEG_PLAIN,
    .load = load_plain, .load_bufs = load_plain_bufs};
const zpi_format zpi_format_jsonl_zst = {
    .name = "jsonl.zst", .suffix = ".jsonl.zst", .seg = ZPI_FMT_SEG_ZSTD,
    .load = load_zst, .load_bufs = load_zst_bufs};
/* One format under two suffixes: ".json.gz" is JSON Lines too (docs/formats.md). */
const zpi_format zpi_format_jsonl_gz = {
    .name = "jsonl.gz", .suffix = ".jsonl.gz", .seg = ZPI_FMT_SEG_GZIP,
    .load = load_gz, .load_bufs = load_gz_bufs};
const zpi_format zpi_format_json_gz = {
    .name = "jsonl.gz", .suffix = ".json.gz", .seg = ZPI_FMT_SEG_GZIP,
    .load = load_gz, .load_bufs = load_gz_bufs};
