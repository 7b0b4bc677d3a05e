/*
 * format_megatron.c - Megatron indexed datasets (a .bin/.idx pair) as a
 * token shard format read on demand (reader.h), and their writer (tokw.h).
 *
 * The .idx (all little-endian, packed, no alignment):
 *
 *   offset 0   9 bytes   magic "MMIDIDX\0\0"
 *          9   uint64    version, 1
 *         17   uint8     dtype code of the tokens in the .bin:
 *                        1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
 *                        6 float64, 7 float32, 8 uint16
 *         18   uint64    S, the number of sequences
 *         26   uint64    D, the number of document indices (documents + 1)
 *         34   int32     [S] sequence lengths, in tokens
 *              int64     [S] sequence pointers, byte offsets into the .bin
 *              int64     [D] document indices: document d is sequences
 *                        [idx[d], idx[d+1]); idx[0] = 0, idx[D-1] = S
 *              int8      [S] sequence modes, only in multimodal datasets
 *
 * and the .bin is the sequences' tokens one after the other (Megatron's
 * writer computes every pointer as the sum of the lengths before it, and
 * its slice reads rely on that). A record of the shard is a sequence
 * (usually one per document: Megatron's preprocessing writes one sequence
 * per document unless it splits sentences).
 *
 * The load checks the whole .idx against itself and against the .bin's
 * size, before anything is sized from it: the .idx must be exactly as long
 * as its counts say, lengths non-negative, the pointers contiguous from
 * byte 0, the .bin exactly as long as the sequences, the document indices
 * non-decreasing from 0 to S, and a modes array, where there is one, all
 * text (0). Both files are then mapped read-only; nothing is allocated per
 * sequence, and a read converts tokens straight from the mapping into the
 * chunk. The files must not change while the shard is in use: a file
 * truncated under a mapping faults (SIGBUS) on access, which a library
 * cannot recover from (docs/megatron.md).
 *
 * Thread safety: a loaded reader is immutable; reads from many threads at
 * once are safe. A writer belongs to one thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/shard.h"
#include "formats/reader.h"
#include "formats/tokw.h"
#include "base/fsio.h"
#include "base/util.h"

#define MG_MAGIC "MMIDIDX\0\0"
#define MG_MAGIC_LEN 9
#define MG_HEADER 34 /* magic, version, dtype code, S, D */

/* dtype code (1..8) -> zp_dtype */
static const zp_dtype mg_dtypes[9] = {
    ZP_DTYPE_NONE, ZP_DTYPE_U8,  ZP_DTYPE_I8,  ZP_DTYPE_I16, ZP_DTYPE_I32,
    ZP_DTYPE_I64,  ZP_DTYPE_F64, ZP_DTYPE_F32, ZP_DTYPE_U16,
};

static uint64_t rd_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static int64_t rd_i64(const unsigned char *p) { return (int64_t)rd_u64(p); }

static int32_t rd_i32(const unsigned char *p)
{
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                 (uint32_t)p[3] << 24;
    return (int32_t)v;
}

static void wr_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void wr_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* s with a trailing ".bin" replaced by ".idx" (or ".idx" appended when s
 * does not end with ".bin"). Caller frees; NULL when out of memory. */
static char *idx_name_of(const char *s)
{
    size_t n = strlen(s);
    size_t keep = n >= 4 && strcmp(s + n - 4, ".bin") == 0 ? n - 4 : n;
    char *r = malloc(keep + 5);
    if (!r)
        return NULL;
    memcpy(r, s, keep);
    memcpy(r + keep, ".idx", 5);
    return r;
}

/* ------------------------------------------------------------ reader */

typedef struct mg_reader {
    zpi_reader base;
    zpi_schema schema;
    char *name;     /* the shard's name (the .bin) */
    char *idx_name; /* its .idx, for messages */
    zp_dtype dtype;
    size_t isz;     /* bytes per token */
    uint64_t n_seq;
    size_t max_record_bytes;
    unsigned char *idx; /* mapping of the .idx */
    size_t idx_len;
    unsigned char *bin; /* mapping of the .bin (NULL when it is empty) */
    size_t bin_len;
} mg_reader;

static void mg_close(zpi_reader *r)
{
    mg_reader *m = (mg_reader *)r;
    if (!m)
        return;
    if (m->idx)
        munmap(m->idx, m->idx_len);
    if (m->bin)
        munmap(m->bin, m->bin_len);
    free(m->name);
    free(m->idx_name);
    free(m);
}

static inline int32_t seq_len(const mg_reader *m, uint64_t i)
{
    return rd_i32(m->idx + MG_HEADER + 4 * i);
}

static inline uint64_t seq_ptr(const mg_reader *m, uint64_t i)
{
    return (uint64_t)rd_i64(m->idx + MG_HEADER + 4 * m->n_seq + 8 * i);
}

/* The first of n tokens at src (of dtype t) that is not a token id: 1 with
 * its index in *bad and its value written into val (index 0 and "?" when
 * none is). */
static int first_bad(zp_dtype t, const unsigned char *src, size_t n, size_t *bad, char *val,
                     size_t valcap)
{
    for (size_t i = 0; i < n; i++) {
        const unsigned char *p = src + i * zp_dtype_size(t);
        int ok = 1;
        switch (t) {
        case ZP_DTYPE_I8:
            ok = *(const int8_t *)p >= 0;
            if (!ok)
                snprintf(val, valcap, "%d", *(const int8_t *)p);
            break;
        case ZP_DTYPE_I16:
            ok = *(const int16_t *)(const void *)p >= 0;
            if (!ok)
                snprintf(val, valcap, "%d", *(const int16_t *)(const void *)p);
            break;
        case ZP_DTYPE_I32:
            ok = *(const int32_t *)(const void *)p >= 0;
            if (!ok)
                snprintf(val, valcap, "%d", *(const int32_t *)(const void *)p);
            break;
        case ZP_DTYPE_I64: {
            int64_t v = *(const int64_t *)(const void *)p;
            ok = v >= 0 && v <= INT32_MAX;
            if (!ok)
                snprintf(val, valcap, "%lld", (long long)v);
            break;
        }
        case ZP_DTYPE_F32: {
            float v = *(const float *)(const void *)p;
            ok = v >= 0.0f && v < 2147483648.0f && (float)(int32_t)v == v;
            if (!ok)
                snprintf(val, valcap, "%.9g", (double)v);
            break;
        }
        case ZP_DTYPE_F64: {
            double v = *(const double *)(const void *)p;
            ok = v >= 0.0 && v <= (double)INT32_MAX && (double)(int32_t)v == v;
            if (!ok)
                snprintf(val, valcap, "%.17g", v);
            break;
        }
        default:
            break;
        }
        if (!ok) {
            *bad = i;
            return 1;
        }
    }
    *bad = 0;
    snprintf(val, valcap, "?");
    return 1;
}

/* Convert n tokens at src (aligned: every pointer is a multiple of the
 * token size) into dst. 0, or 1 with the first bad token's index in *bad
 * and its value written into val. */
static int convert(zp_dtype t, const unsigned char *src, size_t n, int32_t *dst, size_t *bad,
                   char *val, size_t valcap)
{
    size_t i;
    switch (t) {
    case ZP_DTYPE_U8: {
        const uint8_t *s = (const uint8_t *)src;
        for (i = 0; i < n; i++)
            dst[i] = s[i];
        return 0;
    }
    case ZP_DTYPE_U16: {
        const uint16_t *s = (const uint16_t *)(const void *)src;
        for (i = 0; i < n; i++)
            dst[i] = s[i];
        return 0;
    }
    case ZP_DTYPE_I8: {
        const int8_t *s = (const int8_t *)src;
        int neg = 0;
        for (i = 0; i < n; i++) {
            dst[i] = s[i];
            neg |= s[i] < 0;
        }
        if (!neg)
            return 0;
        break;
    }
    case ZP_DTYPE_I16: {
        const int16_t *s = (const int16_t *)(const void *)src;
        int neg = 0;
        for (i = 0; i < n; i++) {
            dst[i] = s[i];
            neg |= s[i] < 0;
        }
        if (!neg)
            return 0;
        break;
    }
    case ZP_DTYPE_I32: {
        memcpy(dst, src, n * sizeof *dst);
        int32_t acc = 0;
        for (i = 0; i < n; i++)
            acc |= dst[i];
        if (acc >= 0)
            return 0;
        break;
    }
    case ZP_DTYPE_I64: {
        const int64_t *s = (const int64_t *)(const void *)src;
        for (i = 0; i < n; i++) {
            if (s[i] < 0 || s[i] > INT32_MAX)
                break;
            dst[i] = (int32_t)s[i];
        }
        if (i == n)
            return 0;
        break;
    }
    case ZP_DTYPE_F32: {
        const float *s = (const float *)(const void *)src;
        for (i = 0; i < n; i++) {
            float v = s[i];
            /* 2147483648.0f: the first float above INT32_MAX */
            if (!(v >= 0.0f && v < 2147483648.0f) || (float)(int32_t)v != v)
                break;
            dst[i] = (int32_t)v;
        }
        if (i == n)
            return 0;
        break;
    }
    case ZP_DTYPE_F64: {
        const double *s = (const double *)(const void *)src;
        for (i = 0; i < n; i++) {
            double v = s[i];
            if (!(v >= 0.0 && v <= (double)INT32_MAX) || (double)(int32_t)v != v)
                break;
            dst[i] = (int32_t)v;
        }
        if (i == n)
            return 0;
        break;
    }
    default:
        *bad = 0;
        snprintf(val, valcap, "of an unknown dtype");
        return 1;
    }
    /* the first bad one, for the message */
    return first_bad(t, src, n, bad, val, valcap);
}

static zp_status mg_read(zpi_reader *r, zpi_read_req *req, zpi_err *err)
{
    mg_reader *m = (mg_reader *)r;
    const zpi_read_sink *out = &req->out;
    uint64_t t0 = zpi_now_ns();
    uint64_t bytes = 0;
    zp_status st = ZP_OK;
    for (size_t k = 0; k < req->n; k++) {
        uint64_t s = req->records[k];
        size_t row = req->rows[k];
        if (s >= m->n_seq) {
            st = zpi_err_set(err, ZP_ERR_INTERNAL,
                             "shard '%s': sequence %llu asked for, the shard has %llu", m->name,
                             (unsigned long long)s, (unsigned long long)m->n_seq);
            break;
        }
        size_t len = (size_t)seq_len(m, s); /* checked >= 0 at load */
        if (len > m->max_record_bytes / 4) {
            char msg[512];
            zpi_fmt(msg, sizeof msg,
                    "shard '%s': sequence %llu: %zu tokens (%zu bytes as int32) exceed "
                    "max_record_bytes (%zu)",
                    m->name, (unsigned long long)s, len, len * 4, m->max_record_bytes);
            if (req->bad)
                req->bad(req->bad_ctx, row, ZP_ERR_LIMIT, msg);
            continue;
        }
        int32_t *dst;
        if (out->put_tokens(out->ctx, row, len, &dst) != ZP_OK) {
            st = zpi_err_set(err, ZP_ERR_NOMEM,
                             "shard '%s': out of memory for sequence %llu (%zu tokens)", m->name,
                             (unsigned long long)s, len);
            break;
        }
        size_t nb = len * m->isz;
        bytes += nb;
        size_t bad;
        char val[64];
        if (len && convert(m->dtype, m->bin + seq_ptr(m, s), len, dst, &bad, val, sizeof val)) {
            out->unput_tokens(out->ctx, row, len); /* the row has no tokens */
            char msg[512];
            zpi_fmt(msg, sizeof msg, "shard '%s': sequence %llu: token %zu is %s: not a token id",
                    m->name, (unsigned long long)s, bad, val);
            if (req->bad)
                req->bad(req->bad_ctx, row, ZP_ERR_FORMAT, msg);
        }
    }
    req->bytes += bytes;
    req->io_ns += zpi_now_ns() - t0;
    return st;
}

/* ------------------------------------------------------------ load */

/* Open path read-only as a regular file; its size into *size. */
static zp_status open_file(const char *path, const char *name, const char *what, int *fd,
                           uint64_t *size, zpi_err *err)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) {
        int e = errno;
        if (e == ENOENT && strcmp(what, "index") == 0)
            return zpi_err_set(err, ZP_ERR_IO,
                               "shard '%s': its index '%s' is missing (a Megatron dataset is a "
                               ".bin and .idx pair)", name, path);
        return zpi_err_set(err, ZP_ERR_IO, "shard '%s': cannot open %s '%s': %s", name, what, path,
                           strerror(e));
    }
    struct stat sb;
    if (fstat(*fd, &sb) != 0) {
        int e = errno;
        zpi_err_set(err, ZP_ERR_IO, "shard '%s': cannot stat %s '%s': %s", name, what, path,
                    strerror(e));
        close(*fd);
        *fd = -1;
        return ZP_ERR_IO;
    }
    if (!S_ISREG(sb.st_mode)) {
        zpi_err_set(err, ZP_ERR_IO, "shard '%s': %s '%s' is not a regular file", name, what, path);
        close(*fd);
        *fd = -1;
        return ZP_ERR_IO;
    }
    *size = (uint64_t)sb.st_size;
    return ZP_OK;
}

/* The .idx's checks, on its mapping (m->idx, m->idx_len, m->n_seq set);
 * *bin_end gets the end of the last sequence. */
static zp_status check_idx(mg_reader *m, uint64_t n_doc, int has_modes, uint64_t *bin_end,
                           zpi_err *err)
{
    const char *nm = m->name, *ix = m->idx_name;
    uint64_t S = m->n_seq, end = 0;
    for (uint64_t i = 0; i < S; i++) {
        int32_t len = seq_len(m, i);
        int64_t ptr = (int64_t)seq_ptr(m, i);
        if (len < 0) {
            return zpi_err_set(err, ZP_ERR_FORMAT,
                               "shard '%s': '%s' says sequence %llu has %d tokens", nm, ix,
                               (unsigned long long)i, (int)len);
        }
        if (ptr < 0 || (uint64_t)ptr != end) {
            if (i == 0)
                return zpi_err_set(err, ZP_ERR_FORMAT,
                                   "shard '%s': '%s' says sequence 0 starts at byte %lld, not 0",
                                   nm, ix, (long long)ptr);
            return zpi_err_set(err, ZP_ERR_FORMAT,
                               "shard '%s': '%s' says sequence %llu starts at byte %lld but "
                               "sequence "
                               "%llu ends at byte %llu (sequences are stored one after the other)",
                               nm, ix, (unsigned long long)i, (long long)ptr,
                               (unsigned long long)i - 1, (unsigned long long)end);
        }
        /* end < 2^63 before; len * isz < 2^34: no overflow in uint64 */
        end += (uint64_t)len * m->isz;
        if (end > (uint64_t)INT64_MAX) {
            return zpi_err_set(err, ZP_ERR_FORMAT,
                               "shard '%s': '%s' says sequence %llu ends past byte 2^63", nm, ix,
                               (unsigned long long)i);
        }
    }
    const unsigned char *doc = m->idx + MG_HEADER + 12 * S;
    uint64_t prev = 0;
    for (uint64_t d = 0; d < n_doc; d++) {
        int64_t v = rd_i64(doc + 8 * d);
        if (d == 0 && v != 0) {
            return zpi_err_set(err, ZP_ERR_FORMAT,
                               "shard '%s': '%s' says document 0 starts at sequence %lld, not 0",
                               nm, ix, (long long)v);
        }
        if (v < 0 || (uint64_t)v < prev || (uint64_t)v > S) {
            return zpi_err_set(err, ZP_ERR_FORMAT,
                               "shard '%s': '%s' has document index %llu = %lld (after %llu; the "
                               "shard has %llu sequences)", nm, ix, (unsigned long long)d,
                               (long long)v, (unsigned long long)prev, (unsigned long long)S);
        }
        prev = (uint64_t)v;
    }
    if (prev != S) {
        return zpi_err_set(err, ZP_ERR_FORMAT,
                           "shard '%s': '%s' says its documents end at sequence %llu but it has "
                           "%llu sequences", nm, ix, (unsigned long long)prev,
                           (unsigned long long)S);
    }
    if (has_modes) {
        const unsigned char *modes = doc + 8 * n_doc;
        for (uint64_t i = 0; i < S; i++)
            if (modes[i] != 0) {
                return zpi_err_set(err, ZP_ERR_UNSUPPORTED,
                                   "shard '%s': '%s' is multimodal and sequence %llu has mode %d: "
                                   "only text sequences (mode 0) are read", nm, ix,
                                   (unsigned long long)i, (int)(int8_t)modes[i]);
            }
    }
    *bin_end = end;
    return ZP_OK;
}

/* The header and the size of the .idx: S, D, the dtype and whether a modes
 * array follows. Nothing is read past the header before the size agrees. */
static zp_status check_header(mg_reader *m, int fd, uint64_t size, uint64_t *n_doc,
                              int *has_modes, zpi_err *err)
{
    const char *nm = m->name, *ix = m->idx_name;
    unsigned char h[MG_HEADER];
    memset(h, 0, sizeof h);
    ssize_t got = pread(fd, h, sizeof h, 0);
    if (got < 0) {
        int e = errno;
        return zpi_err_set(err, ZP_ERR_IO, "shard '%s': cannot read '%s': %s", nm, ix, strerror(e));
    }
    size_t have = (size_t)got < MG_MAGIC_LEN ? (size_t)got : MG_MAGIC_LEN;
    if (memcmp(h, MG_MAGIC, have) != 0) { /* a shorter file that matches: below */
        if ((size_t)got >= 6 && memcmp(h, "TNTIDX", 6) == 0)
            return zpi_err_set(err, ZP_ERR_FORMAT,
                               "shard '%s': '%s' is an index of Megatron's old non-mmap format "
                               "(\"TNTIDX\"), "
                               "not read: convert the dataset to the mmap format (\"MMIDIDX\")", nm,
                               ix);
        return zpi_err_set(err, ZP_ERR_FORMAT,
                           "shard '%s': '%s' is not a Megatron index (it does not start with "
                           "\"MMIDIDX\")", nm, ix);
    }
    if (size < MG_HEADER || (size_t)got < MG_HEADER) {
        return zpi_err_set(err, ZP_ERR_FORMAT,
                           "shard '%s': '%s' is %llu bytes, shorter than its %d-byte header", nm,
                           ix, (unsigned long long)size, MG_HEADER);
    }
    uint64_t version = rd_u64(h + 9);
    if (version != 1) {
        return zpi_err_set(err, ZP_ERR_FORMAT,
                           "shard '%s': '%s' has version %llu (only version 1 is known)", nm, ix,
                           (unsigned long long)version);
    }
    unsigned code = h[17];
    if (code < 1 || code > 8) {
        return zpi_err_set(err, ZP_ERR_FORMAT,
                           "shard '%s': '%s' has token dtype code %u (known: 1 uint8, 2 int8, 3 "
                           "int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16)", nm, ix,
                           code);
    }
    m->dtype = mg_dtypes[code];
    m->isz = zp_dtype_size(m->dtype);
    uint64_t S = rd_u64(h + 18), D = rd_u64(h + 26);
    /* each count needs at least 8 bytes of the file per entry (lengths and
     * pointers: 12): a count above the file size is wrong before any
     * arithmetic could overflow */
    uint64_t body = size - MG_HEADER;
    if (S > body / 12 || D > body / 8 || 12 * S + 8 * D > body) {
        return zpi_err_set(err, ZP_ERR_FORMAT,
                           "shard '%s': '%s' says %llu sequences and %llu document indices, which "
                           "need more than its %llu bytes", nm, ix, (unsigned long long)S,
                           (unsigned long long)D, (unsigned long long)size);
    }
    uint64_t want = MG_HEADER + 12 * S + 8 * D;
    if (D == 0) {
        return zpi_err_set(err, ZP_ERR_FORMAT,
                           "shard '%s': '%s' has no document indices (at least the leading 0 is "
                           "needed)", nm, ix);
    }
    *has_modes = 0;
    if (size != want) {
        if (S > 0 && size == want + S) {
            *has_modes = 1;
        } else {
            return zpi_err_set(err, ZP_ERR_FORMAT,
                               "shard '%s': '%s' is %llu bytes but its counts (%llu sequences, "
                               "%llu "
                               "document indices) make %llu bytes (or %llu with sequence modes)",
                               nm, ix, (unsigned long long)size, (unsigned long long)S,
                               (unsigned long long)D, (unsigned long long)want,
                               (unsigned long long)(want + S));
        }
    }
    m->n_seq = S;
    *n_doc = D;
    return ZP_OK;
}

/* The .idx of shard NAME at IDX_PATH: its header and size first, then
 * the whole of it mapped and checked; *IFD its descriptor (closed by the
 * caller), *BIN_END the byte where its sequences end in the .bin. */
static zp_status load_idx(mg_reader *m, const char *idx_path, const char *name, int *ifd,
                          uint64_t *bin_end, zpi_err *err)
{
    uint64_t idx_size = 0, n_doc = 0;
    int has_modes = 0;
    zp_status st;
    if ((st = open_file(idx_path, name, "index", ifd, &idx_size, err)) != ZP_OK)
        return st;
    if ((st = check_header(m, *ifd, idx_size, &n_doc, &has_modes, err)) != ZP_OK)
        return st;
#if SIZE_MAX < UINT64_MAX
    if (idx_size > SIZE_MAX)
        return zpi_err_set(err, ZP_ERR_LIMIT, "shard '%s': '%s' is too large to map", name,
                           m->idx_name);
#endif
    m->idx_len = (size_t)idx_size;
    void *p = mmap(NULL, m->idx_len, PROT_READ, MAP_PRIVATE, *ifd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        return zpi_err_set(err, e == ENOMEM ? ZP_ERR_NOMEM : ZP_ERR_IO,
                           "shard '%s': cannot map '%s': %s", name, idx_path, strerror(e));
    }
    m->idx = p;
    (void)madvise(m->idx, m->idx_len, MADV_SEQUENTIAL); /* the checks scan it once */
    if ((st = check_idx(m, n_doc, has_modes, bin_end, err)) != ZP_OK)
        return st;
    (void)madvise(m->idx, m->idx_len, MADV_NORMAL);
    return ZP_OK;
}

/* The .bin is BIN_SIZE bytes where the .idx says BIN_END: the message. */
static zp_status bin_size_error(const mg_reader *m, const char *name, uint64_t bin_size,
                                uint64_t bin_end, zpi_err *err)
{
    if (bin_size < bin_end) {
        /* the first sequence that does not fit, for the message */
        uint64_t i = 0;
        while (i + 1 < m->n_seq && seq_ptr(m, i) + (uint64_t)seq_len(m, i) * m->isz <= bin_size)
            i++;
        zpi_err_set(err, ZP_ERR_FORMAT,
                    "shard '%s': '%s' says sequence %llu ends at byte %llu but '%s' has %llu "
                    "bytes (truncated?)", name, m->idx_name, (unsigned long long)i,
                    (unsigned long long)(seq_ptr(m, i) + (uint64_t)seq_len(m, i) * m->isz),
                    name, (unsigned long long)bin_size);
    } else {
        zpi_err_set(err, ZP_ERR_FORMAT,
                    "shard '%s': '%s' has %llu bytes but '%s' says its %llu sequences end at "
                    "byte %llu", name, name, (unsigned long long)bin_size, m->idx_name,
                    (unsigned long long)m->n_seq, (unsigned long long)bin_end);
    }
    return ZP_ERR_FORMAT;
}

/* The .bin of shard NAME at PATH: exactly as long as the sequences
 * (BIN_END), hashed when the manifest has a hash (*HASH), mapped; *BFD its
 * descriptor (closed by the caller), *BIN_SIZE its size. */
static zp_status load_bin(mg_reader *m, const char *path, const char *name,
                          const zpi_load_limits *lim, uint64_t bin_end, int *bfd,
                          uint64_t *bin_size, uint64_t *hash, zpi_err *err)
{
    zp_status st;
    if ((st = open_file(path, name, "data file", bfd, bin_size, err)) != ZP_OK)
        return st;
    if (*bin_size != bin_end)
        return bin_size_error(m, name, *bin_size, bin_end, err);
#if SIZE_MAX < UINT64_MAX
    if (*bin_size > SIZE_MAX)
        return zpi_err_set(err, ZP_ERR_LIMIT, "shard '%s': '%s' is too large to map", name, name);
#endif
    if (lim->has_xxh64) {
        uint64_t at = 0;
        int e = zpi_xxh64_fd(*bfd, hash, &at);
        if (e)
            return zpi_err_set(err, e == ENOMEM ? ZP_ERR_NOMEM : ZP_ERR_IO,
                               "shard '%s': cannot hash '%s': %s at byte %llu", name, path,
                               strerror(e), (unsigned long long)at);
    }
    if (*bin_size > 0) {
        m->bin_len = (size_t)*bin_size;
        void *p = mmap(NULL, m->bin_len, PROT_READ, MAP_PRIVATE, *bfd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            m->bin_len = 0;
            return zpi_err_set(err, e == ENOMEM ? ZP_ERR_NOMEM : ZP_ERR_IO,
                               "shard '%s': cannot map '%s': %s", name, path, strerror(e));
        }
        m->bin = p;
    }
    return ZP_OK;
}

static zp_status mg_load(const char *path, const char *name, const zpi_load_limits *lim,
                         zpi_shard *out, zpi_err *err)
{
    memset(out, 0, sizeof *out);
    double t0 = zpi_now();
    zp_status st = ZP_OK;
    int ifd = -1, bfd = -1;
    char *idx_path = idx_name_of(path);
    mg_reader *m = calloc(1, sizeof *m);
    if (!idx_path || !m || !(m->name = zpi_strdup(name)) || !(m->idx_name = idx_name_of(name))) {
        st = zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory", name);
        goto fail;
    }
    m->base.schema = &m->schema;
    m->base.read = mg_read;
    m->base.close = mg_close;
    m->max_record_bytes = lim->max_record_bytes;

    uint64_t bin_size = 0, bin_end = 0, hash = 0;
    if ((st = load_idx(m, idx_path, name, &ifd, &bin_end, err)) != ZP_OK)
        goto fail;
    if ((st = load_bin(m, path, name, lim, bin_end, &bfd, &bin_size, &hash, err)) != ZP_OK)
        goto fail;
    close(bfd);
    bfd = -1;
    close(ifd);
    ifd = -1;

    if (m->n_seq == 0 && !lim->allow_empty) {
        st = zpi_err_set(err, ZP_ERR_FORMAT, "shard '%s': no sequences ('%s' is empty)", name,
                         m->idx_name);
        goto fail;
    }
    m->schema.n = 1;
    snprintf(m->schema.f[0].name, sizeof m->schema.f[0].name, "tokens");
    m->schema.f[0].kind = ZPI_FIELD_TOKENS;
    m->schema.f[0].dtype = m->dtype;

    out->n_records = m->n_seq;
    /* the shard's size as the dataset knows it (its manifests and index
     * store size the .bin; the .idx is checked against it) */
    out->file_bytes = bin_size;
    out->rd = &m->base;
    out->read_seconds = zpi_now() - t0;
    st = zpi_load_check(lim, name, path, lim->has_xxh64 ? &hash : NULL, out, err);
    if (st != ZP_OK) {
        zpi_shard_free(out);
        memset(out, 0, sizeof *out);
    }
    free(idx_path);
    return st;

fail:
    if (ifd >= 0)
        close(ifd);
    if (bfd >= 0)
        close(bfd);
    mg_close(&m->base);
    free(idx_path);
    memset(out, 0, sizeof *out);
    return st;
}

const zpi_format zpi_format_megatron = {.name = "megatron", .suffix = ".bin", .load = mg_load};

/* ------------------------------------------------------------ writer */

#define MG_WBUF ((size_t)4 << 20)

typedef struct mg_writer {
    zpi_tokw base;
    zp_dtype dtype;
    size_t isz;
    unsigned code;
    char *bin_final, *idx_final, *bin_part, *idx_part;
    int bin_fd, idx_fd;
    unsigned char *bbuf, *ibuf; /* pending bytes of the .bin and the .idx */
    size_t blen, ilen;
    uint64_t bin_bytes, idx_bytes; /* written to the files so far */
    int broken; /* a write failed: the files are not consistent, commit fails */
} mg_writer;

static zp_status w_flush(int fd, const char *file, unsigned char *buf, size_t *len, uint64_t *done,
                         zpi_err *err)
{
    size_t off = 0;
    while (off < *len) {
        ssize_t w = write(fd, buf + off, *len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            int e = errno;
            return zpi_err_set(err, ZP_ERR_IO, "'%s': write failed at byte %llu: %s", file,
                               (unsigned long long)(*done + off), strerror(e));
        }
        off += (size_t)w;
    }
    *done += *len;
    *len = 0;
    return ZP_OK;
}

static zp_status w_idx(mg_writer *w, const void *b, size_t n, zpi_err *err)
{
    if (w->ilen + n > MG_WBUF) {
        zp_status st = w_flush(w->idx_fd, w->idx_final, w->ibuf, &w->ilen, &w->idx_bytes, err);
        if (st != ZP_OK)
            return st;
    }
    memcpy(w->ibuf + w->ilen, b, n);
    w->ilen += n;
    return ZP_OK;
}

static void w_free(mg_writer *w, int unlink_parts)
{
    if (!w)
        return;
    if (w->bin_fd >= 0)
        close(w->bin_fd);
    if (w->idx_fd >= 0)
        close(w->idx_fd);
    if (unlink_parts) {
        if (w->bin_part)
            (void)unlink(w->bin_part);
        if (w->idx_part)
            (void)unlink(w->idx_part);
    }
    free(w->bin_final);
    free(w->idx_final);
    free(w->bin_part);
    free(w->idx_part);
    free(w->bbuf);
    free(w->ibuf);
    free(w);
}

static zp_status mg_add(zpi_tokw *tw, const int32_t *tok, size_t n, zpi_err *err)
{
    mg_writer *w = (mg_writer *)tw;
    if (n > INT32_MAX) {
        return zpi_err_set(err, ZP_ERR_LIMIT,
                           "'%s': document %llu has %zu tokens (at most 2^31-1 per sequence)",
                           w->bin_final, (unsigned long long)w->base.docs, n);
    }
    int32_t hi = w->dtype == ZP_DTYPE_U16 ? 65535 : INT32_MAX;
    for (size_t i = 0; i < n; i++)
        if (tok[i] < 0 || tok[i] > hi) {
            return zpi_err_set(err, ZP_ERR_INVALID,
                               "'%s': document %llu: token %zu is %d: not a %s token id",
                               w->bin_final, (unsigned long long)w->base.docs, i, (int)tok[i],
                               zp_dtype_name(w->dtype));
        }
    unsigned char l[4];
    wr_u32(l, (uint32_t)n);
    zp_status st = w_idx(w, l, 4, err);
    for (size_t i = 0; st == ZP_OK && i < n;) {
        if (w->blen == MG_WBUF &&
            (st = w_flush(w->bin_fd, w->bin_final, w->bbuf, &w->blen, &w->bin_bytes, err)) != ZP_OK)
            break;
        size_t room = (MG_WBUF - w->blen) / w->isz, k = n - i < room ? n - i : room;
        unsigned char *d = w->bbuf + w->blen;
        if (w->dtype == ZP_DTYPE_U16) {
            for (size_t j = 0; j < k; j++) {
                uint16_t v = (uint16_t)tok[i + j];
                d[2 * j] = (unsigned char)v;
                d[2 * j + 1] = (unsigned char)(v >> 8);
            }
        } else {
            for (size_t j = 0; j < k; j++)
                wr_u32(d + 4 * j, (uint32_t)tok[i + j]);
        }
        w->blen += k * w->isz;
        i += k;
    }
    if (st != ZP_OK) {
        w->broken = 1;
        return st;
    }
    w->base.docs++;
    w->base.tokens += n;
    return ZP_OK;
}

static void mg_abort(zpi_tokw *tw) { w_free((mg_writer *)tw, 1); }

static zp_status close_fd(int *fd, const char *file, zpi_err *err)
{
    int rc = close(*fd);
    *fd = -1;
    if (rc != 0) {
        int e = errno;
        return zpi_err_set(err, ZP_ERR_IO, "'%s': close failed: %s", file, strerror(e));
    }
    return ZP_OK;
}

static zp_status mg_commit(zpi_tokw *tw, zpi_err *err)
{
    mg_writer *w = (mg_writer *)tw;
    uint64_t S = w->base.docs;
    if (w->broken) {
        zpi_err_set(err, ZP_ERR_IO, "'%s': an earlier write failed: nothing committed",
                    w->bin_final);
        w_free(w, 1);
        return ZP_ERR_IO;
    }
    zp_status st = w_flush(w->bin_fd, w->bin_final, w->bbuf, &w->blen, &w->bin_bytes, err);
    if (st == ZP_OK)
        st = w_flush(w->idx_fd, w->idx_final, w->ibuf, &w->ilen, &w->idx_bytes, err);
    /* the pointers, from the lengths read back from the file (nothing per
     * document is kept in memory) */
    enum { BLOCK = 1 << 16 };
    unsigned char *lens = st == ZP_OK ? malloc((size_t)BLOCK * 4) : NULL;
    if (st == ZP_OK && !lens) {
        st = zpi_err_set(err, ZP_ERR_NOMEM, "'%s': out of memory", w->idx_final);
    }
    uint64_t ptr = 0;
    for (uint64_t i = 0; st == ZP_OK && i < S;) {
        size_t k = S - i < BLOCK ? (size_t)(S - i) : BLOCK;
        size_t want = k * 4, got = 0;
        while (got < want) {
            ssize_t r = pread(w->idx_fd, lens + got, want - got, (off_t)(MG_HEADER + 4 * i + got));
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                int e = r < 0 ? errno : EIO;
                st = zpi_err_set(err, ZP_ERR_IO, "'%s': cannot read back its lengths: %s",
                                 w->idx_final, strerror(e));
                break;
            }
            got += (size_t)r;
        }
        for (size_t j = 0; st == ZP_OK && j < k; j++) {
            unsigned char b[8];
            wr_u64(b, ptr);
            st = w_idx(w, b, 8, err);
            ptr += (uint64_t)(uint32_t)rd_i32(lens + 4 * j) * w->isz;
        }
        i += k;
    }
    free(lens);
    /* one document per sequence: 0, 1, ..., S */
    for (uint64_t d = 0; st == ZP_OK && d <= S; d++) {
        unsigned char b[8];
        wr_u64(b, d);
        st = w_idx(w, b, 8, err);
    }
    if (st == ZP_OK)
        st = w_flush(w->idx_fd, w->idx_final, w->ibuf, &w->ilen, &w->idx_bytes, err);
    if (st == ZP_OK) {
        unsigned char h[MG_HEADER];
        memcpy(h, MG_MAGIC, MG_MAGIC_LEN);
        wr_u64(h + 9, 1);
        h[17] = (unsigned char)w->code;
        wr_u64(h + 18, S);
        wr_u64(h + 26, S + 1);
        if (pwrite(w->idx_fd, h, sizeof h, 0) != (ssize_t)sizeof h) {
            int e = errno;
            st = zpi_err_set(err, ZP_ERR_IO, "'%s': cannot write its header: %s", w->idx_final,
                             strerror(e));
        }
    }
    if (st == ZP_OK)
        st = close_fd(&w->bin_fd, w->bin_final, err);
    if (st == ZP_OK)
        st = close_fd(&w->idx_fd, w->idx_final, err);
    /* the .bin first, then the .idx (each synced, renamed, the folder
     * synced: zpi_tmp_commit): a pair is complete once its .idx exists. An
     * older pair's .idx goes first, so that it never pairs with the new
     * .bin. */
    if (st == ZP_OK && unlink(w->idx_final) != 0 && errno != ENOENT) {
        int e = errno;
        st = zpi_err_set(err, ZP_ERR_IO, "'%s': cannot replace it: %s", w->idx_final, strerror(e));
    }
    zpi_err e = {0};
    if (st == ZP_OK && (st = zpi_tmp_commit(w->bin_part, w->bin_final, &e)) != ZP_OK)
        zpi_err_set(err, st, "'%s': %s", w->bin_final, zpi_err_msg(&e));
    if (st == ZP_OK && (st = zpi_tmp_commit(w->idx_part, w->idx_final, &e)) != ZP_OK) {
        zpi_err_set(err, st, "'%s': %s", w->idx_final, zpi_err_msg(&e));
        (void)unlink(w->bin_final); /* not a complete pair */
    }
    w_free(w, st != ZP_OK);
    return st;
}

static const zpi_tokw_ops mg_ops = {mg_add, mg_commit, mg_abort};

static char *cat3(const char *a, const char *b, const char *c)
{
    size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
    char *r = malloc(la + lb + lc + 1);
    if (r) {
        memcpy(r, a, la);
        memcpy(r + la, b, lb);
        memcpy(r + la + lb, c, lc + 1);
    }
    return r;
}

zp_status zpi_tokw_open_megatron(const char *prefix, zp_dtype dtype, zpi_tokw **out, zpi_err *err)
{
    *out = NULL;
    if (!prefix || !*prefix || (dtype != ZP_DTYPE_U16 && dtype != ZP_DTYPE_I32)) {
        return zpi_err_set(err, ZP_ERR_INVALID,
                           "Megatron writer: needs a path prefix and dtype uint16 or int32 (got "
                           "%s)", zp_dtype_name(dtype));
    }
    mg_writer *w = calloc(1, sizeof *w);
    if (w) {
        w->bin_fd = w->idx_fd = -1;
        w->bin_final = cat3(prefix, ".bin", "");
        w->idx_final = cat3(prefix, ".idx", "");
        w->bin_part = calloc(1, PATH_MAX);
        w->idx_part = calloc(1, PATH_MAX);
        w->bbuf = malloc(MG_WBUF);
        w->ibuf = malloc(MG_WBUF);
    }
    if (!w || !w->bin_final || !w->idx_final || !w->bin_part || !w->idx_part || !w->bbuf ||
        !w->ibuf) {
        zpi_err_set(err, ZP_ERR_NOMEM, "'%s.bin': out of memory", prefix);
        w_free(w, 0);
        return ZP_ERR_NOMEM;
    }
    w->base.ops = &mg_ops;
    w->dtype = dtype;
    w->isz = zp_dtype_size(dtype);
    w->code = dtype == ZP_DTYPE_U16 ? 8 : 4;
    /* temporaries beside the finals (base/fsio.h); the .idx is read back at
     * commit, so it is reopened read-write */
    zpi_err e = {0};
    int tfd = -1;
    zp_status st = zpi_tmp_open(w->bin_final, w->bin_part, PATH_MAX, &w->bin_fd, &e);
    if (st == ZP_OK && (st = zpi_tmp_open(w->idx_final, w->idx_part, PATH_MAX, &tfd, &e)) == ZP_OK) {
        w->idx_fd = open(w->idx_part, O_RDWR | O_CLOEXEC);
        if (w->idx_fd < 0) {
            int en = errno;
            st = zpi_err_set(&e, ZP_ERR_IO, "cannot open '%s': %s", w->idx_part, strerror(en));
        }
        close(tfd);
    }
    if (st != ZP_OK) {
        zpi_err_set(err, st, "%s", zpi_err_msg(&e));
        w_free(w, 1);
        return st;
    }
    /* the header is written at commit, when the counts are known */
    memset(w->ibuf, 0, MG_HEADER);
    w->ilen = MG_HEADER;
    *out = &w->base;
    return ZP_OK;
}
