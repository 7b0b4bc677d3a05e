/*
 * parquet.c - the Parquet reader (parquet.h): the footer's schema mapped to
 * top-level columns, column chunks decoded a row group at a time (pages,
 * codecs, levels and the value encodings), and rows written as JSON lines.
 *
 * The footer and page headers are read by parquet_thrift.cpp; everything
 * else is here. Every length read from the file is checked against the
 * bytes it claims to describe before it is used, and every allocation whose
 * size comes from the file is bounded (PQ_MAX_*).
 */
#include "formats/parquet.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <snappy-c.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "base/util.h"
#include "formats/parquet_meta.h"

#define PQ_MAX_FOOTER (64u << 20)         /* bytes of the footer */
#define PQ_MAX_PAGE (256u << 20)          /* decompressed bytes of one page */
#define PQ_MAX_LEVELS ((size_t)1 << 27)   /* levels (values and nulls) of one column chunk */
#define PQ_MAX_STRINGS ((size_t)1 << 26)  /* byte-array values of one column chunk */

/* Codecs (CompressionCodec). */
enum { CODEC_NONE = 0, CODEC_SNAPPY = 1, CODEC_GZIP = 2, CODEC_ZSTD = 6 };
/* Encodings. */
enum { ENC_PLAIN = 0, ENC_PLAIN_DICT = 2, ENC_RLE = 3, ENC_BIT_PACKED = 4, ENC_DELTA_BP = 5,
       ENC_DELTA_LBA = 6, ENC_DELTA_BA = 7, ENC_RLE_DICT = 8, ENC_BSS = 9 };

/* What a leaf's values become in JSON. */
enum { K_BOOL, K_I32, K_U32, K_I64, K_U64, K_F32, K_F64, K_STR, K_BIN, K_DEC32, K_DEC64 };

typedef struct pq_bytes {
    const uint8_t *p;
    size_t n;
} pq_bytes;

/* One top-level column (one leaf of the schema). */
typedef struct pq_leaf {
    const char *name; /* borrowed from the footer */
    char *key;        /* "name": as JSON */
    size_t key_len;
    int ptype, kind, scale;
    size_t width;     /* bytes of one stored value */
    int max_def, max_rep;
    int is_list;
    int d_list;       /* list columns: the definition level of an empty list */
} pq_leaf;

/* A decompressed page buffer. */
typedef struct pq_page {
    void *p;
    size_t cap;
    size_t end_val; /* the column's value count after this page */
} pq_page;

#define PQ_POOL 8 /* spare page buffers a file keeps */

/* One decoded column chunk. */
typedef struct pq_col {
    uint8_t *def, *rep; /* n_lev levels each (NULL when the max level is 0) */
    size_t n_lev, cap_lev;
    uint8_t *vals;      /* n_vals values of the leaf's width */
    size_t n_vals, cap_vals;
    pq_bytes *dict;     /* the dictionary as values of the leaf's width (pq_bytes for strings) */
    size_t n_dict;
    void **bufs;        /* buffers the values point into */
    size_t n_bufs, cap_bufs;
    void *map;          /* the stored chunk's pages mapped (NULL: read into bufs) */
    size_t map_len, map_dropped; /* bytes of the mapping given back (decoded) */
    /* decompressed data pages the values point into, oldest first, each
     * with the value count after it: released (to the file's pool) once
     * the rows read have gone past them */
    pq_page *pages;
    size_t n_pages, cap_pages, pages_head;
    /* where the next row starts (zpi_pq_read_rows reads consecutive ranges) */
    uint64_t row_pos;
    size_t lev_pos, val_pos;
    /* the column chunk, decoded page by page as rows are asked for
     * (decode_more): its stored bytes (in bufs[ck_buf]), the next page's
     * offset in them, and the complete rows decoded so far */
    uint8_t *ck;
    size_t ck_len, ck_pos, ck_values, ck_buf;
    uint64_t ck_start;
    int ck_keep, ck_raw_used, ck_done;
    size_t ck_lev_seen;   /* levels counted for ck_rows_started */
    uint64_t ck_rows_started, ck_rows;
} pq_col;

struct zpi_pq_file {
    int fd;
    char *name;
    uint64_t size;
    uint64_t data_end; /* the first byte of the footer */
    zpi_pq_meta meta;
    size_t n_leaves;
    pq_leaf *leaves;
    uint64_t *rg_first; /* n_rg + 1: the first row of each row group */
    long cur_g;         /* the decoded row group, -1: none */
    pq_col *cols;
    ZSTD_DCtx *zstd;
    pq_page pool[PQ_POOL]; /* spare page buffers (p NULL: none), reused warm */
    uint32_t *idx;      /* scratch: dictionary indices, levels */
    size_t cap_idx;
    uint64_t *u64;      /* scratch: delta-decoded integers */
    size_t cap_u64;
    uint64_t *u64b;
    size_t cap_u64b;
    uint8_t *pbuf;      /* scratch: a decompressed page of fixed-width values */
    size_t cap_pbuf;
    /* the current read's counters */
    uint64_t bytes_read;
    double t_read, t_dec;
};

/* ------------------------------------------------------------ small helpers */

static zp_status grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need == 0)
        need = 1; /* never a NULL buffer to offset into */
    if (need <= *cap)
        return ZP_OK;
    size_t nc = *cap ? *cap : 64;
    while (nc < need)
        nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q)
        return ZP_ERR_NOMEM;
    *p = q;
    *cap = nc;
    return ZP_OK;
}

static int col_keep(pq_col *c, void *buf) {
    if (grow((void **)&c->bufs, &c->cap_bufs, c->n_bufs + 1, sizeof *c->bufs) != ZP_OK)
        return -1;
    c->bufs[c->n_bufs++] = buf;
    return 0;
}

/* A page buffer of at least n bytes: a spare of the pool (the smallest
 * that fits) or a new one. */
static void *pool_take(pq_page *pool, size_t n, size_t *cap) {
    size_t best = PQ_POOL;
    for (size_t i = 0; i < PQ_POOL; i++)
        if (pool[i].p && pool[i].cap >= n && (best == PQ_POOL || pool[i].cap < pool[best].cap))
            best = i;
    if (best < PQ_POOL) {
        void *p = pool[best].p;
        *cap = pool[best].cap;
        pool[best].p = NULL;
        return p;
    }
    /* a little over n, so that the next slightly larger page fits */
    *cap = (n + n / 16 + 65535) & ~(size_t)65535;
    return malloc(*cap);
}

/* p back to the pool (replacing its smallest spare when full). */
static void pool_put(pq_page *pool, void *p, size_t cap) {
    size_t small = 0;
    for (size_t i = 0; i < PQ_POOL; i++) {
        if (!pool[i].p) {
            small = i;
            break;
        }
        if (pool[i].cap < pool[small].cap)
            small = i;
    }
    if (pool[small].p && pool[small].cap >= cap) {
        free(p);
        return;
    }
    free(pool[small].p);
    pool[small].p = p;
    pool[small].cap = cap;
}

static void col_clear(pq_col *c, pq_page *pool) {
    for (size_t i = c->pages_head; i < c->n_pages; i++)
        pool_put(pool, c->pages[i].p, c->pages[i].cap);
    free(c->pages);
    if (c->map)
        munmap(c->map, c->map_len);
    for (size_t i = 0; i < c->n_bufs; i++)
        free(c->bufs[i]);
    free(c->bufs);
    free(c->def);
    free(c->rep);
    free(c->vals);
    free(c->dict);
    memset(c, 0, sizeof *c);
}

static uint32_t rd_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int rd_uleb(const uint8_t *p, size_t n, size_t *pos, uint64_t *v) {
    uint64_t r = 0;
    for (int sh = 0; sh < 64; sh += 7) {
        if (*pos >= n)
            return -1;
        uint8_t b = p[(*pos)++];
        r |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -1;
}

static int rd_zigzag(const uint8_t *p, size_t n, size_t *pos, int64_t *v) {
    uint64_t u;
    if (rd_uleb(p, n, pos, &u))
        return -1;
    *v = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
    return 0;
}

/* bw bits at bit offset `bit` of src[0..srclen), little-endian bit order. */
static inline uint64_t load_bits(const uint8_t *src, size_t srclen, size_t bit, int bw) {
    size_t byte = bit >> 3;
    unsigned sh = (unsigned)(bit & 7);
    uint64_t v;
    if (byte + 8 <= srclen && sh + (unsigned)bw <= 64) {
        memcpy(&v, src + byte, 8);
        v >>= sh;
    } else {
        unsigned __int128 acc = 0;
        for (unsigned i = 0; i < 9 && byte + i < srclen; i++)
            acc |= (unsigned __int128)src[byte + i] << (8 * i);
        v = (uint64_t)(acc >> sh);
    }
    return bw == 64 ? v : v & (((uint64_t)1 << bw) - 1);
}

/* The RLE / bit-packed hybrid: count values of bw bits (0..32) from
 * p[0..n) into out (uint32_t for dictionary indices, uint8_t for levels,
 * whose bw is at most 8). 0, or -1 when the runs end early. */
#define PQ_HYBRID(NAME, T)                                                                         \
    static int NAME(const uint8_t *p, size_t n, int bw, T *out, size_t count) {                    \
        size_t pos = 0, k = 0;                                                                     \
        size_t bytew = ((size_t)bw + 7) / 8;                                                       \
        while (k < count) {                                                                        \
            uint64_t h;                                                                            \
            if (rd_uleb(p, n, &pos, &h))                                                           \
                return -1;                                                                         \
            if (h & 1) {                                                                           \
                uint64_t groups = h >> 1;                                                          \
                if (bw > 0 && groups > (n - pos) / (size_t)bw)                                     \
                    return -1;                                                                     \
                size_t nbytes = (size_t)groups * (size_t)bw;                                       \
                size_t take = count - k;                                                           \
                if (groups < take / 8 + 1 && groups * 8 < take)                                    \
                    take = (size_t)groups * 8;                                                     \
                const uint8_t *src = p + pos;                                                      \
                if (bw == 0) {                                                                     \
                    memset(out + k, 0, take * sizeof *out);                                        \
                } else if (bw == 1) {                                                              \
                    for (size_t i = 0; i < take; i++)                                              \
                        out[k + i] = (T)((src[i >> 3] >> (i & 7)) & 1);                            \
                } else if (bw == 8) {                                                              \
                    for (size_t i = 0; i < take; i++)                                              \
                        out[k + i] = src[i];                                                       \
                } else {                                                                           \
                    for (size_t i = 0; i < take; i++)                                              \
                        out[k + i] = (T)load_bits(src, nbytes, i * (size_t)bw, bw);                \
                }                                                                                  \
                k += take;                                                                         \
                pos += nbytes;                                                                     \
            } else {                                                                               \
                uint64_t run = h >> 1;                                                             \
                if (bytew > n - pos)                                                               \
                    return -1;                                                                     \
                uint32_t v = 0;                                                                    \
                for (size_t i = 0; i < bytew; i++)                                                 \
                    v |= (uint32_t)p[pos + i] << (8 * i);                                          \
                pos += bytew;                                                                      \
                size_t take = count - k;                                                           \
                if (run < take)                                                                    \
                    take = (size_t)run;                                                            \
                if (sizeof(T) == 1 && v > 255)                                                     \
                    return -1;                                                                     \
                for (size_t i = 0; i < take; i++)                                                  \
                    out[k + i] = (T)v;                                                             \
                k += take;                                                                         \
            }                                                                                      \
        }                                                                                          \
        return 0;                                                                                  \
    }
PQ_HYBRID(hybrid_decode, uint32_t)
PQ_HYBRID(hybrid_decode8, uint8_t)

/* DELTA_BINARY_PACKED: exactly count integers from p[0..n) into out;
 * *used: the stream's bytes. NULL, or what is wrong. */
static const char *delta_decode(const uint8_t *p, size_t n, size_t count, uint64_t *out,
                                size_t *used) {
    size_t pos = 0;
    uint64_t block, nmini, total;
    int64_t first;
    if (rd_uleb(p, n, &pos, &block) || rd_uleb(p, n, &pos, &nmini) || rd_uleb(p, n, &pos, &total) ||
        rd_zigzag(p, n, &pos, &first))
        return "truncated DELTA_BINARY_PACKED header";
    if (block == 0 || block % 128 || block > (1u << 20) || nmini == 0 || block % nmini ||
        (block / nmini) % 32)
        return "bad DELTA_BINARY_PACKED block size";
    if (total != count)
        return "DELTA_BINARY_PACKED value count differs from the page's";
    size_t per = (size_t)(block / nmini);
    if (count > 0)
        out[0] = (uint64_t)first;
    size_t k = 1;
    uint64_t prev = (uint64_t)first;
    while (k < count) {
        int64_t mind;
        if (rd_zigzag(p, n, &pos, &mind))
            return "truncated DELTA_BINARY_PACKED block";
        if (nmini > n - pos)
            return "truncated DELTA_BINARY_PACKED block";
        const uint8_t *widths = p + pos;
        pos += (size_t)nmini;
        for (size_t m = 0; m < nmini && k < count; m++) {
            int bw = widths[m];
            if (bw > 64)
                return "DELTA_BINARY_PACKED bit width over 64";
            size_t nbytes = per * (size_t)bw / 8;
            if (nbytes > n - pos)
                return "truncated DELTA_BINARY_PACKED miniblock";
            size_t take = count - k < per ? count - k : per;
            const uint8_t *src = p + pos;
            for (size_t i = 0; i < take; i++) {
                uint64_t d = bw ? load_bits(src, nbytes, i * (size_t)bw, bw) : 0;
                prev = prev + (uint64_t)mind + d;
                out[k + i] = prev;
            }
            k += take;
            pos += nbytes;
        }
    }
    *used = pos;
    return NULL;
}

/* --------------------------------------------------------------- JSON out */

typedef struct obuf {
    char *p;
    size_t len, cap;
} obuf;

static int ob_resize(obuf *b, size_t nc) {
    char *q = realloc(b->p, nc + ZPI_JSON_PADDING);
    if (!q)
        return -1;
    b->p = q;
    b->cap = nc;
    return 0;
}

static int ob_grow(obuf *b, size_t extra) {
    size_t need = b->len + extra;
    size_t nc = b->cap ? b->cap : 65536;
    while (nc < need)
        nc *= 2;
    return ob_resize(b, nc);
}

/* Room for extra more bytes, allocated once at about that size (not by
 * doubling: a row group's text is tens of MB, and each doubling copies it
 * and touches fresh memory). */
static int ob_reserve(obuf *b, size_t extra) {
    if (b->cap - b->len >= extra)
        return 0;
    if (extra > SIZE_MAX / 2 - b->len)
        return -1;
    return ob_resize(b, b->len + extra + extra / 16);
}

#define OB_NEED(b, n)                                                                              \
    do {                                                                                           \
        if ((b)->cap - (b)->len < (size_t)(n) && ob_grow((b), (n)))                                \
            return -1;                                                                             \
    } while (0)

static const char hexd[] = "0123456789abcdef";

/* s[0..n) as a JSON string. */
static int put_str(obuf *b, const uint8_t *s, size_t n) {
    size_t i = 0;
    /* eight bytes at a time: any byte < 0x20, '"' or '\\' stops the scan */
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    while (i + 8 <= n) {
        uint64_t x;
        memcpy(&x, s + i, 8);
        uint64_t q = x ^ (ones * '"'), bs = x ^ (ones * '\\');
        uint64_t hit = ((x - ones * 0x20) | (q - ones) | (bs - ones)) & ~x & highs;
        if (hit)
            break;
        i += 8;
    }
    while (i < n && s[i] >= 0x20 && s[i] != '"' && s[i] != '\\')
        i++;
    if (i == n) {
        OB_NEED(b, n + 2);
        char *o = b->p + b->len;
        *o++ = '"';
        memcpy(o, s, n);
        o[n] = '"';
        b->len += n + 2;
        return 0;
    }
    if (n > (SIZE_MAX - 2) / 6)
        return -1;
    OB_NEED(b, n * 6 + 2);
    char *o = b->p + b->len;
    *o++ = '"';
    memcpy(o, s, i);
    o += i;
    for (; i < n; i++) {
        uint8_t c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *o++ = (char)c;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\n': *o++ = 'n'; break;
        case '\r': *o++ = 'r'; break;
        case '\t': *o++ = 't'; break;
        case '\b': *o++ = 'b'; break;
        case '\f': *o++ = 'f'; break;
        default:
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = hexd[c >> 4];
            *o++ = hexd[c & 15];
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->p);
    return 0;
}

static const char digit_pairs[201] = "00010203040506070809101112131415161718192021222324252627282930"
                                     "31323334353637383940414243444546474849505152535455565758596061"
                                     "62636465666768697071727374757677787980818283848586878889909192"
                                     "93949596979899";

static inline size_t fmt_u64(uint64_t v, char *out) {
    size_t n = 1;
    for (uint64_t t = v; t >= 10; t /= 10)
        n++;
    char *p = out + n;
    while (v >= 100) {
        unsigned r = (unsigned)(v % 100);
        v /= 100;
        p -= 2;
        p[0] = digit_pairs[2 * r];
        p[1] = digit_pairs[2 * r + 1];
    }
    if (v >= 10) {
        p[-2] = digit_pairs[2 * v];
        p[-1] = digit_pairs[2 * v + 1];
    } else {
        p[-1] = (char)('0' + v);
    }
    return n;
}

static inline size_t fmt_i64(int64_t v, char *out) {
    if (v < 0) {
        out[0] = '-';
        return 1 + fmt_u64((uint64_t)0 - (uint64_t)v, out + 1);
    }
    return fmt_u64((uint64_t)v, out);
}

/* An unscaled decimal as a JSON string ("-12.345"). */
static size_t fmt_decimal(int64_t v, int scale, char *out) {
    char digs[24];
    size_t o = 0;
    *out = '"';
    o++;
    uint64_t a = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    if (v < 0)
        out[o++] = '-';
    size_t nd = fmt_u64(a, digs);
    size_t sc = (size_t)scale;
    if (nd <= sc) {
        out[o++] = '0';
        out[o++] = '.';
        for (size_t i = nd; i < sc; i++)
            out[o++] = '0';
        memcpy(out + o, digs, nd);
        o += nd;
    } else {
        memcpy(out + o, digs, nd - sc);
        o += nd - sc;
        if (sc) {
            out[o++] = '.';
            memcpy(out + o, digs + nd - sc, sc);
            o += sc;
        }
    }
    out[o++] = '"';
    return o;
}

/* ------------------------------------------------------------ the schema */

static zp_status fmt_err(zpi_pq_file *f, zpi_err *err, zp_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static zp_status fmt_err(zpi_pq_file *f, zpi_err *err, zp_status code, const char *fmt, ...) {
    char msg[ZPI_ERRMAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return zpi_err_set(err, code, "shard '%s': %s", f->name, msg);
}

static const char *type_name(int t) {
    static const char *n[] = {"BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE",
                              "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
    return t >= 0 && t < 8 ? n[t] : "unknown type";
}

static const char *logical_name(const zpi_pq_schema_el *e) {
    switch (e->logical) {
    case ZPI_PQL_STRING: return "STRING";
    case ZPI_PQL_MAP: return "MAP";
    case ZPI_PQL_LIST: return "LIST";
    case ZPI_PQL_ENUM: return "ENUM";
    case ZPI_PQL_DECIMAL: return "DECIMAL";
    case ZPI_PQL_DATE: return "DATE";
    case ZPI_PQL_TIME: return "TIME";
    case ZPI_PQL_TIMESTAMP: return "TIMESTAMP";
    case ZPI_PQL_INTEGER: return "INTEGER";
    case ZPI_PQL_JSON: return "JSON";
    case ZPI_PQL_BSON: return "BSON";
    case ZPI_PQL_UUID: return "UUID";
    case ZPI_PQL_FLOAT16: return "FLOAT16";
    default: break;
    }
    switch (e->converted) {
    case 1: case 2: return "MAP";
    case 5: return "DECIMAL";
    case 20: return "BSON";
    case 21: return "INTERVAL";
    default: return e->logical ? "an unknown logical type" : "no annotation";
    }
}

/* The JSON kind of a leaf's values; NULL, or why it is refused. */
static const char *leaf_kind(const zpi_pq_schema_el *e, pq_leaf *l) {
    int lt = e->logical, ct = e->converted;
    int is_dec = lt == ZPI_PQL_DECIMAL || (lt == 0 && ct == 5);
    int scale = lt == ZPI_PQL_DECIMAL ? e->lt_scale : e->scale;
    int is_unsigned = (lt == ZPI_PQL_INTEGER && !e->lt_signed) || (lt == 0 && ct >= 11 && ct <= 14);
    l->ptype = e->type;
    switch (e->type) {
    case ZPI_PQT_BOOLEAN: l->kind = K_BOOL; l->width = 1; return NULL;
    case ZPI_PQT_INT32:
    case ZPI_PQT_INT64:
        l->width = e->type == ZPI_PQT_INT32 ? 4 : 8;
        if (is_dec) {
            if (scale < 0 || scale > 18)
                return "DECIMAL with a scale outside 0..18";
            l->kind = e->type == ZPI_PQT_INT32 ? K_DEC32 : K_DEC64;
            l->scale = scale;
            return NULL;
        }
        if (lt == ZPI_PQL_UUID || lt == ZPI_PQL_FLOAT16 || lt == ZPI_PQL_BSON ||
            lt == ZPI_PQL_STRING || lt == ZPI_PQL_JSON || ct == 21)
            return "an annotation not valid on integers";
        if (e->type == ZPI_PQT_INT32)
            l->kind = is_unsigned ? K_U32 : K_I32;
        else
            l->kind = is_unsigned ? K_U64 : K_I64;
        return NULL;
    case ZPI_PQT_FLOAT: l->kind = K_F32; l->width = 4; return NULL;
    case ZPI_PQT_DOUBLE: l->kind = K_F64; l->width = 8; return NULL;
    case ZPI_PQT_BYTE_ARRAY:
        l->width = sizeof(pq_bytes);
        if (lt == ZPI_PQL_STRING || lt == ZPI_PQL_ENUM || lt == ZPI_PQL_JSON ||
            (lt == 0 && (ct == 0 || ct == 4 || ct == 19))) {
            l->kind = K_STR;
            return NULL;
        }
        if (lt == 0 && ct < 0) {
            l->kind = K_BIN;
            return NULL;
        }
        return "a byte array annotation that is not read (only STRING, ENUM, JSON or none)";
    case ZPI_PQT_INT96: return "INT96 (legacy timestamps) is not read";
    case ZPI_PQT_FIXED: return "FIXED_LEN_BYTE_ARRAY is not read";
    default: return "an unknown physical type";
    }
}

static zp_status add_leaf(zpi_pq_file *f, const char *name, const zpi_pq_schema_el *e, int max_def,
                          int max_rep, int is_list, int d_list, zpi_err *err) {
    pq_leaf *l = &f->leaves[f->n_leaves];
    memset(l, 0, sizeof *l);
    l->name = name;
    const char *why = leaf_kind(e, l);
    if (why)
        return fmt_err(f, err, ZP_ERR_FORMAT, "column '%s': unsupported type %s (%s): %s", name,
                       type_name(e->type), logical_name(e), why);
    l->max_def = max_def;
    l->max_rep = max_rep;
    l->is_list = is_list;
    l->d_list = d_list;
    obuf b = {0};
    if (put_str(&b, (const uint8_t *)name, strlen(name)) || ob_grow(&b, 2)) {
        free(b.p);
        return zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory", f->name);
    }
    b.p[b.len++] = ':';
    l->key = b.p;
    l->key_len = b.len;
    f->n_leaves++;
    return ZP_OK;
}

static int is_list_group(const zpi_pq_schema_el *e) {
    return e->logical == ZPI_PQL_LIST || (e->logical == 0 && e->converted == 3);
}

/* The top-level columns: plain leaves, and lists (3-level, 2-level, or a
 * repeated leaf). Everything else is refused, naming the column. */
static zp_status map_schema(zpi_pq_file *f, zpi_err *err) {
    const zpi_pq_meta *m = &f->meta;
    if (m->n_schema < 1)
        return fmt_err(f, err, ZP_ERR_FORMAT, "footer has no schema");
    const zpi_pq_schema_el *s = m->schema;
    if (s[0].num_children < 0 || (size_t)s[0].num_children >= m->n_schema)
        return fmt_err(f, err, ZP_ERR_FORMAT, "schema root has %d children of %zu elements",
                       s[0].num_children, m->n_schema - 1);
    f->leaves = calloc(m->n_schema, sizeof *f->leaves);
    if (!f->leaves)
        return zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory", f->name);
    size_t i = 1;
    for (int c = 0; c < s[0].num_children; c++) {
        if (i >= m->n_schema)
            return fmt_err(f, err, ZP_ERR_FORMAT, "schema ends before its column %d", c + 1);
        const zpi_pq_schema_el *e = &s[i];
        const char *name = e->name;
        int opt = e->repetition == ZPI_PQR_OPTIONAL;
        if (e->num_children <= 0) {
            if (e->type < 0)
                return fmt_err(f, err, ZP_ERR_FORMAT, "column '%s': a leaf without a type", name);
            if (e->repetition == ZPI_PQR_REPEATED)
                ZPI_FORWARD_IF_ERR(add_leaf(f, name, e, 1, 1, 1, 0, err));
            else
                ZPI_FORWARD_IF_ERR(add_leaf(f, name, e, opt, 0, 0, 0, err));
            i++;
            continue;
        }
        if (e->logical == ZPI_PQL_MAP || e->converted == 1 || e->converted == 2)
            return fmt_err(f, err, ZP_ERR_FORMAT, "column '%s': unsupported type: a map", name);
        if (!is_list_group(e))
            return fmt_err(f, err, ZP_ERR_FORMAT, "column '%s': unsupported type: a struct", name);
        if (e->repetition == ZPI_PQR_REPEATED || e->num_children != 1 || i + 1 >= m->n_schema ||
            s[i + 1].repetition != ZPI_PQR_REPEATED)
            return fmt_err(f, err, ZP_ERR_FORMAT,
                           "column '%s': unsupported type: a LIST not in the standard 3-level or "
                           "the 2-level form", name);
        const zpi_pq_schema_el *r = &s[i + 1];
        if (r->num_children <= 0) { /* 2-level: the repeated leaf is the element */
            if (r->type < 0)
                return fmt_err(f, err, ZP_ERR_FORMAT, "column '%s': a leaf without a type", name);
            ZPI_FORWARD_IF_ERR(add_leaf(f, name, r, opt + 1, 1, 1, opt, err));
            i += 2;
            continue;
        }
        if (r->num_children != 1 || i + 2 >= m->n_schema || s[i + 2].num_children > 0 ||
            s[i + 2].type < 0)
            return fmt_err(f, err, ZP_ERR_FORMAT, "column '%s': unsupported type: a list of %s",
                           name, r->num_children == 1 && i + 2 < m->n_schema &&
                                         is_list_group(&s[i + 2]) ? "lists" : "structs or maps");
        const zpi_pq_schema_el *el = &s[i + 2];
        if (el->repetition == ZPI_PQR_REPEATED)
            return fmt_err(f, err, ZP_ERR_FORMAT,
                           "column '%s': unsupported type: a list of lists", name);
        int el_opt = el->repetition == ZPI_PQR_OPTIONAL;
        ZPI_FORWARD_IF_ERR(add_leaf(f, name, el, opt + 1 + el_opt, 1, 1, opt, err));
        i += 3;
    }
    if (i != m->n_schema)
        return fmt_err(f, err, ZP_ERR_FORMAT, "schema has %zu elements after its columns",
                       m->n_schema - i);
    return ZP_OK;
}

static const char *codec_name(int c) {
    switch (c) {
    case 0: return "UNCOMPRESSED";
    case 1: return "SNAPPY";
    case 2: return "GZIP";
    case 3: return "LZO";
    case 4: return "BROTLI";
    case 5: return "LZ4";
    case 6: return "ZSTD";
    case 7: return "LZ4_RAW";
    default: return "an unknown codec";
    }
}

/* Every row group: as many chunks as leaves, of the leaves' types, a codec
 * read here, rows adding up to the footer's count. */
static zp_status check_row_groups(zpi_pq_file *f, zpi_err *err) {
    const zpi_pq_meta *m = &f->meta;
    f->rg_first = calloc(m->n_rg + 1, sizeof *f->rg_first);
    if (!f->rg_first)
        return zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory", f->name);
    uint64_t rows = 0;
    for (size_t g = 0; g < m->n_rg; g++) {
        const zpi_pq_row_group *rg = &m->rgs[g];
        if (rg->num_rows < 0 || (uint64_t)rg->num_rows > UINT64_MAX / 2 - rows)
            return fmt_err(f, err, ZP_ERR_FORMAT, "row group %zu: %lld rows", g,
                           (long long)rg->num_rows);
        f->rg_first[g] = rows;
        rows += (uint64_t)rg->num_rows;
        if (rg->n_cols != f->n_leaves)
            return fmt_err(f, err, ZP_ERR_FORMAT, "row group %zu has %zu columns, the schema %zu",
                           g, rg->n_cols, f->n_leaves);
        for (size_t c = 0; c < rg->n_cols; c++) {
            const zpi_pq_chunk_meta *cm = &rg->cols[c];
            const char *cn = f->leaves[c].name;
            if (!cm->has_meta)
                return fmt_err(f, err, ZP_ERR_FORMAT,
                               "column '%s', row group %zu: unsupported: an encrypted column "
                               "(no plaintext metadata)", cn, g);
            if (cm->has_file_path)
                return fmt_err(f, err, ZP_ERR_FORMAT,
                               "column '%s', row group %zu: unsupported: data in another file",
                               cn, g);
            if (cm->codec != CODEC_NONE && cm->codec != CODEC_SNAPPY && cm->codec != CODEC_GZIP &&
                cm->codec != CODEC_ZSTD)
                return fmt_err(f, err, ZP_ERR_FORMAT,
                               "column '%s', row group %zu: unsupported codec %s (%d)", cn, g,
                               codec_name(cm->codec), cm->codec);
            if (cm->type != f->leaves[c].ptype)
                return fmt_err(f, err, ZP_ERR_FORMAT,
                               "column '%s', row group %zu: chunk of type %s, schema %s", cn, g,
                               type_name(cm->type), type_name(f->leaves[c].ptype));
        }
    }
    f->rg_first[m->n_rg] = rows;
    if (m->num_rows < 0 || (uint64_t)m->num_rows != rows)
        return fmt_err(f, err, ZP_ERR_FORMAT, "footer says %lld rows, its row groups %llu",
                       (long long)m->num_rows, (unsigned long long)rows);
    return ZP_OK;
}

/* --------------------------------------------------------------- footer */

/* The footer's length and place from the last 8 bytes of a file of size
 * bytes. NULL, or what is wrong. */
static const char *footer_place(const uint8_t *last8, uint64_t size, uint64_t *flen) {
    if (!memcmp(last8 + 4, "PARE", 4))
        return "unsupported: an encrypted footer (magic PARE)";
    if (memcmp(last8 + 4, "PAR1", 4))
        return "not a Parquet file (no PAR1 magic at its end)";
    *flen = rd_u32le(last8);
    if (*flen + 12 > size)
        return "footer length larger than the file (truncated?)";
    if (*flen > PQ_MAX_FOOTER)
        return "footer over 64 MiB";
    return NULL;
}

zp_status zpi_pq_footer_rows(const void *tail, size_t tail_len, uint64_t file_size,
                             const char *name, uint64_t *rows, size_t *need, zpi_err *err) {
    const uint8_t *t = tail;
    if (file_size < 12)
        return zpi_err_set(err, ZP_ERR_FORMAT, "shard '%s': %llu bytes: too short for Parquet",
                           name, (unsigned long long)file_size);
    if (tail_len > file_size)
        return zpi_err_set(err, ZP_ERR_INVALID, "shard '%s': tail of %zu bytes of a %llu-byte file",
                           name, tail_len, (unsigned long long)file_size);
    if (tail_len < 8) {
        *need = 8;
        return ZP_END;
    }
    uint64_t flen;
    const char *why = footer_place(t + tail_len - 8, file_size, &flen);
    if (why)
        return zpi_err_set(err, ZP_ERR_FORMAT, "shard '%s': %s (byte %llu)", name, why,
                           (unsigned long long)(file_size - 8));
    if (tail_len < flen + 8) {
        *need = (size_t)flen + 8;
        return ZP_END;
    }
    zpi_pq_meta m;
    zp_status s = zpi_pq_meta_parse(t + tail_len - 8 - flen, (size_t)flen, &m, err);
    if (s != ZP_OK)
        return zpi_err_prefix(err, "shard '%s': footer at byte %llu", name,
                              (unsigned long long)(file_size - 8 - flen));
    int64_t sum = 0;
    int bad = m.num_rows < 0;
    for (size_t g = 0; g < m.n_rg && !bad; g++) {
        if (m.rgs[g].num_rows < 0 || m.rgs[g].num_rows > INT64_MAX - sum)
            bad = 1;
        else
            sum += m.rgs[g].num_rows;
    }
    if (bad || sum != m.num_rows) {
        s = zpi_err_set(err, ZP_ERR_FORMAT, "shard '%s': footer says %lld rows, its row groups %lld",
                        name, (long long)m.num_rows, (long long)sum);
        zpi_pq_meta_free(&m);
        return s;
    }
    *rows = (uint64_t)m.num_rows;
    zpi_pq_meta_free(&m);
    return ZP_OK;
}

static zp_status pread_all(zpi_pq_file *f, void *buf, size_t n, uint64_t off, zpi_err *err) {
    double t0 = zpi_now();
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(f->fd, (char *)buf + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return fmt_err(f, err, ZP_ERR_IO, "read of %zu bytes at byte %llu: %s", n,
                           (unsigned long long)off, strerror(errno));
        if (r == 0)
            return fmt_err(f, err, ZP_ERR_FORMAT, "file ends at byte %llu, before %zu bytes at %llu "
                           "(truncated while open?)", (unsigned long long)(off + done), n,
                           (unsigned long long)off);
        done += (size_t)r;
    }
    f->bytes_read += n;
    f->t_read += zpi_now() - t0;
    return ZP_OK;
}

zp_status zpi_pq_open(const char *path, const char *name, zpi_pq_file **out, zpi_err *err) {
    *out = NULL;
    if (!name)
        name = path;
    zpi_pq_file *f = calloc(1, sizeof *f);
    if (f)
        f->fd = -1;
    if (!f || !(f->name = strdup(name))) {
        free(f);
        return zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory", name);
    }
    f->cur_g = -1;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    zp_status s = ZP_OK;
    if (f->fd < 0) {
        s = zpi_err_set(err, ZP_ERR_IO, "shard '%s': cannot open '%s': %s", name, path,
                        strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(f->fd, &st) || !S_ISREG(st.st_mode)) {
        s = zpi_err_set(err, ZP_ERR_IO, "shard '%s': '%s' is not a readable regular file", name,
                        path);
        goto fail;
    }
    f->size = (uint64_t)st.st_size;
    if (f->size < 12) {
        s = fmt_err(f, err, ZP_ERR_FORMAT, "%llu bytes: too short for Parquet (truncated?)",
                    (unsigned long long)f->size);
        goto fail;
    }
    uint8_t head[4], last8[8];
    if ((s = pread_all(f, head, 4, 0, err)) != ZP_OK ||
        (s = pread_all(f, last8, 8, f->size - 8, err)) != ZP_OK)
        goto fail;
    uint64_t flen = 0;
    const char *why = footer_place(last8, f->size, &flen);
    if (!why && memcmp(head, "PAR1", 4))
        why = "not a Parquet file (no PAR1 magic at its start)";
    if (why) {
        s = fmt_err(f, err, ZP_ERR_FORMAT, "%s (byte %llu)", why,
                    (unsigned long long)(memcmp(head, "PAR1", 4) && !memcmp(last8 + 4, "PAR1", 4)
                                             ? 0 : f->size - 8));
        goto fail;
    }
    f->data_end = f->size - 8 - flen;
    uint8_t *fb = malloc(flen ? (size_t)flen : 1);
    if (!fb) {
        s = zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory", name);
        goto fail;
    }
    if ((s = pread_all(f, fb, (size_t)flen, f->data_end, err)) != ZP_OK) {
        free(fb);
        goto fail;
    }
    s = zpi_pq_meta_parse(fb, (size_t)flen, &f->meta, err);
    free(fb);
    if (s != ZP_OK) {
        zpi_err_prefix(err, "shard '%s': footer at byte %llu", name,
                       (unsigned long long)f->data_end);
        goto fail;
    }
    if (f->meta.encrypted) {
        s = fmt_err(f, err, ZP_ERR_FORMAT, "unsupported: an encrypted file (plaintext footer "
                    "with an encryption algorithm)");
        goto fail;
    }
    if ((s = map_schema(f, err)) != ZP_OK || (s = check_row_groups(f, err)) != ZP_OK) {
        if (err && s == ZP_ERR_FORMAT) { /* where the footer is, for a corrupt one */
            size_t l = strlen(err->msg);
            snprintf(err->msg + l, sizeof err->msg - l, " (footer at byte %llu)",
                     (unsigned long long)f->data_end);
        }
        goto fail;
    }
    f->cols = calloc(f->n_leaves ? f->n_leaves : 1, sizeof *f->cols);
    if (!f->cols) {
        s = zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory", name);
        goto fail;
    }
    *out = f;
    return ZP_OK;
fail:
    zpi_pq_close(f);
    return s;
}

uint64_t zpi_pq_num_rows(const zpi_pq_file *f) { return f->rg_first[f->meta.n_rg]; }
size_t zpi_pq_num_row_groups(const zpi_pq_file *f) { return f->meta.n_rg; }
uint64_t zpi_pq_row_group_rows(const zpi_pq_file *f, size_t g) {
    return g < f->meta.n_rg ? (uint64_t)f->meta.rgs[g].num_rows : 0;
}
uint64_t zpi_pq_file_size(const zpi_pq_file *f) { return f->size; }

static void drop_row_group(zpi_pq_file *f) {
    for (size_t c = 0; c < f->n_leaves; c++)
        col_clear(&f->cols[c], f->pool);
    f->cur_g = -1;
}

void zpi_pq_close(zpi_pq_file *f) {
    if (!f)
        return;
    if (f->cols)
        drop_row_group(f);
    free(f->cols);
    if (f->leaves)
        for (size_t i = 0; i < f->n_leaves; i++)
            free(f->leaves[i].key);
    free(f->leaves);
    free(f->rg_first);
    zpi_pq_meta_free(&f->meta);
    if (f->fd >= 0)
        close(f->fd);
    ZSTD_freeDCtx(f->zstd);
    free(f->idx);
    free(f->u64);
    free(f->u64b);
    free(f->pbuf);
    for (size_t i = 0; i < PQ_POOL; i++)
        free(f->pool[i].p);
    free(f->name);
    free(f);
}

/* ------------------------------------------------------------- pages */

/* Context of the chunk being decoded, for messages. */
typedef struct pq_ctx {
    zpi_pq_file *f;
    size_t g, c;
    uint64_t page_off; /* the page header's byte in the file */
    zpi_err *err;
} pq_ctx;

static zp_status page_err(pq_ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static zp_status page_err(pq_ctx *x, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fmt_err(x->f, x->err, ZP_ERR_FORMAT, "column '%s', row group %zu: page at byte %llu: %s",
                   x->f->leaves[x->c].name, x->g, (unsigned long long)x->page_off, msg);
}

static zp_status nomem(pq_ctx *x) {
    return fmt_err(x->f, x->err, ZP_ERR_NOMEM, "column '%s', row group %zu: out of memory",
                   x->f->leaves[x->c].name, x->g);
}

/* src[0..n) decompressed with the chunk's codec into exactly usz bytes;
 * *dst: src itself (uncompressed), a new buffer kept by the column (keep:
 * byte arrays point into their page), or the file's page scratch, valid
 * until the next page (fixed-width values are copied out). */
static zp_status decompress(pq_ctx *x, pq_col *col, int codec, const uint8_t *src, size_t n,
                            size_t usz, const uint8_t **dst, int keep) {
    if (codec == CODEC_NONE) {
        if (n != usz)
            return page_err(x, "uncompressed page of %zu bytes, its header says %zu", n, usz);
        *dst = src;
        return ZP_OK;
    }
    if (usz > PQ_MAX_PAGE)
        return page_err(x, "page of %zu bytes decompressed: over the limit of 256 MiB", usz);
    uint8_t *buf;
    if (keep == 2) { /* a data page: released once read past (release_pages) */
        if (grow((void **)&col->pages, &col->cap_pages, col->n_pages + 1, sizeof *col->pages))
            return nomem(x);
        size_t cap;
        if (!(buf = pool_take(x->f->pool, usz, &cap)))
            return nomem(x);
        col->pages[col->n_pages++] = (pq_page){buf, cap, SIZE_MAX};
    } else if (keep) {
        buf = malloc(usz ? usz : 1);
        if (!buf || col_keep(col, buf)) {
            free(buf);
            return nomem(x);
        }
    } else {
        if (grow((void **)&x->f->pbuf, &x->f->cap_pbuf, usz, 1))
            return nomem(x);
        buf = x->f->pbuf;
    }
    double t0 = zpi_now();
    size_t got = 0;
    int ok = 0;
    if (codec == CODEC_SNAPPY) {
        size_t ul;
        ok = snappy_uncompressed_length((const char *)src, n, &ul) == SNAPPY_OK && ul == usz;
        got = usz;
        ok = ok && snappy_uncompress((const char *)src, n, (char *)buf, &got) == SNAPPY_OK;
    } else if (codec == CODEC_ZSTD) {
        if (!x->f->zstd && !(x->f->zstd = ZSTD_createDCtx()))
            return nomem(x);
        size_t r = ZSTD_decompressDCtx(x->f->zstd, buf, usz, src, n);
        ok = !ZSTD_isError(r);
        got = ok ? r : 0;
    } else if (codec == CODEC_GZIP) {
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        if (inflateInit2(&zs, 15 + 32) != Z_OK)
            return nomem(x);
        zs.next_in = (Bytef *)(uintptr_t)src;
        zs.avail_in = (uInt)(n > UINT32_MAX ? UINT32_MAX : n);
        zs.next_out = buf;
        zs.avail_out = (uInt)usz;
        int r = inflate(&zs, Z_FINISH);
        ok = r == Z_STREAM_END;
        got = usz - zs.avail_out;
        inflateEnd(&zs);
    }
    x->f->t_dec += zpi_now() - t0;
    if (!ok || got != usz)
        return page_err(x, "%s data of %zu bytes do not decompress to the %zu bytes of its header",
                        codec_name(codec), n, usz);
    *dst = buf;
    return ZP_OK;
}

static zp_status need_u32(pq_ctx *x, size_t n) {
    if (grow((void **)&x->f->idx, &x->f->cap_idx, n ? n : 1, sizeof(uint32_t)))
        return nomem(x);
    return ZP_OK;
}

static zp_status need_u64(pq_ctx *x, uint64_t **p, size_t *cap, size_t n) {
    if (grow((void **)p, cap, n ? n : 1, sizeof(uint64_t)))
        return nomem(x);
    return ZP_OK;
}

/* Levels of max level mx: nv of them from p[0..n) into out. */
static zp_status decode_levels(pq_ctx *x, const uint8_t *p, size_t n, int mx, uint8_t *out,
                               size_t nv, const char *what) {
    int bw = 0;
    while ((1 << bw) <= mx)
        bw++;
    if (hybrid_decode8(p, n, bw, out, nv))
        return page_err(x, "%s levels end before their %zu values", what, nv);
    for (size_t i = 0; i < nv; i++)
        if (out[i] > mx)
            return page_err(x, "%s level %u over the maximum %d", what, out[i], mx);
    return ZP_OK;
}

/* Byte-array values from lengths len[0..count) and data p[0..n). */
static zp_status put_lengths(pq_ctx *x, pq_bytes *o, const uint64_t *len, size_t count,
                             const uint8_t *p, size_t n) {
    size_t pos = 0;
    for (size_t i = 0; i < count; i++) {
        if (len[i] > n - pos)
            return page_err(x, "byte array %zu of %llu bytes past the page's end", i,
                            (unsigned long long)len[i]);
        o[i].p = p + pos;
        o[i].n = (size_t)len[i];
        pos += (size_t)len[i];
    }
    return ZP_OK;
}

/* count values in encoding enc from p[0..n) into o (count * width bytes). */
static zp_status decode_values(pq_ctx *x, pq_col *col, int enc, const uint8_t *p, size_t n,
                               size_t count, uint8_t *o) {
    const pq_leaf *l = &x->f->leaves[x->c];
    size_t w = l->width;
    int pt = l->ptype;
    switch (enc) {
    case ENC_PLAIN:
        if (pt == ZPI_PQT_BOOLEAN) {
            if ((count + 7) / 8 > n)
                return page_err(x, "%zu PLAIN booleans in %zu bytes", count, n);
            for (size_t i = 0; i < count; i++)
                o[i] = (p[i >> 3] >> (i & 7)) & 1;
            return ZP_OK;
        }
        if (pt == ZPI_PQT_BYTE_ARRAY) {
            pq_bytes *b = (pq_bytes *)(void *)o;
            size_t pos = 0;
            for (size_t i = 0; i < count; i++) {
                if (n - pos < 4)
                    return page_err(x, "PLAIN byte array %zu of %zu past the page's end", i, count);
                uint32_t len = rd_u32le(p + pos);
                pos += 4;
                if (len > n - pos)
                    return page_err(x, "PLAIN byte array %zu of %u bytes past the page's end", i,
                                    len);
                b[i].p = p + pos;
                b[i].n = len;
                pos += len;
            }
            return ZP_OK;
        }
        if (count > n / w)
            return page_err(x, "%zu PLAIN values of %zu bytes in %zu bytes", count, w, n);
        memcpy(o, p, count * w);
        return ZP_OK;
    case ENC_PLAIN_DICT:
    case ENC_RLE_DICT: {
        if (!col->dict)
            return page_err(x, "dictionary-encoded page without a dictionary page");
        if (count == 0)
            return ZP_OK;
        if (n < 1 || p[0] > 32)
            return page_err(x, "bad dictionary index bit width");
        ZPI_FORWARD_IF_ERR(need_u32(x, count));
        uint32_t *ix = x->f->idx;
        if (hybrid_decode(p + 1, n - 1, p[0], ix, count))
            return page_err(x, "dictionary indices end before their %zu values", count);
        size_t nd = col->n_dict;
        const uint8_t *d = (const uint8_t *)col->dict;
        for (size_t i = 0; i < count; i++)
            if (ix[i] >= nd)
                return page_err(x, "dictionary index %u of a dictionary of %zu", ix[i], nd);
        if (w == sizeof(pq_bytes)) {
            const pq_bytes *ds = col->dict;
            pq_bytes *ob = (pq_bytes *)(void *)o;
            for (size_t i = 0; i < count; i++)
                ob[i] = ds[ix[i]];
        } else if (w == 4) {
            for (size_t i = 0; i < count; i++)
                memcpy(o + 4 * i, d + 4 * (size_t)ix[i], 4);
        } else if (w == 8) {
            for (size_t i = 0; i < count; i++)
                memcpy(o + 8 * i, d + 8 * (size_t)ix[i], 8);
        } else {
            for (size_t i = 0; i < count; i++)
                o[i] = d[ix[i]];
        }
        return ZP_OK;
    }
    case ENC_RLE: {
        if (pt != ZPI_PQT_BOOLEAN)
            return page_err(x, "RLE values of type %s: unsupported", type_name(pt));
        if (n < 4 || rd_u32le(p) > n - 4)
            return page_err(x, "RLE booleans: bad length");
        ZPI_FORWARD_IF_ERR(need_u32(x, count));
        if (hybrid_decode(p + 4, rd_u32le(p), 1, x->f->idx, count))
            return page_err(x, "RLE booleans end before their %zu values", count);
        for (size_t i = 0; i < count; i++)
            o[i] = (uint8_t)x->f->idx[i];
        return ZP_OK;
    }
    case ENC_DELTA_BP: {
        if (pt != ZPI_PQT_INT32 && pt != ZPI_PQT_INT64)
            return page_err(x, "DELTA_BINARY_PACKED values of type %s", type_name(pt));
        ZPI_FORWARD_IF_ERR(need_u64(x, &x->f->u64, &x->f->cap_u64, count));
        size_t used;
        const char *why = delta_decode(p, n, count, x->f->u64, &used);
        if (why)
            return page_err(x, "%s", why);
        if (w == 4)
            for (size_t i = 0; i < count; i++) {
                uint32_t v = (uint32_t)x->f->u64[i];
                memcpy(o + 4 * i, &v, 4);
            }
        else
            memcpy(o, x->f->u64, count * 8);
        return ZP_OK;
    }
    case ENC_DELTA_LBA: {
        if (pt != ZPI_PQT_BYTE_ARRAY)
            return page_err(x, "DELTA_LENGTH_BYTE_ARRAY values of type %s", type_name(pt));
        ZPI_FORWARD_IF_ERR(need_u64(x, &x->f->u64, &x->f->cap_u64, count));
        size_t used = 0;
        const char *why = delta_decode(p, n, count, x->f->u64, &used);
        if (why)
            return page_err(x, "lengths: %s", why);
        return put_lengths(x, (pq_bytes *)(void *)o, x->f->u64, count, p + used, n - used);
    }
    case ENC_DELTA_BA: {
        if (pt != ZPI_PQT_BYTE_ARRAY)
            return page_err(x, "DELTA_BYTE_ARRAY values of type %s", type_name(pt));
        ZPI_FORWARD_IF_ERR(need_u64(x, &x->f->u64, &x->f->cap_u64, count));
        ZPI_FORWARD_IF_ERR(need_u64(x, &x->f->u64b, &x->f->cap_u64b, count));
        size_t u1 = 0, u2 = 0;
        const char *why = delta_decode(p, n, count, x->f->u64b, &u1);
        if (why)
            return page_err(x, "prefix lengths: %s", why);
        why = delta_decode(p + u1, n - u1, count, x->f->u64, &u2);
        if (why)
            return page_err(x, "suffix lengths: %s", why);
        pq_bytes *ob = (pq_bytes *)(void *)o;
        ZPI_FORWARD_IF_ERR(put_lengths(x, ob, x->f->u64, count, p + u1 + u2, n - u1 - u2));
        /* the whole values: prefix of the previous value + suffix */
        uint64_t total = 0, prevlen = 0;
        for (size_t i = 0; i < count; i++) {
            uint64_t pre = x->f->u64b[i];
            if (pre > prevlen)
                return page_err(x, "DELTA_BYTE_ARRAY prefix of %llu bytes after a value of %llu",
                                (unsigned long long)pre, (unsigned long long)prevlen);
            prevlen = pre + ob[i].n;
            total += prevlen;
            if (total > PQ_MAX_PAGE)
                return page_err(x, "DELTA_BYTE_ARRAY values over 256 MiB");
        }
        uint8_t *arena = malloc(total ? (size_t)total : 1);
        if (!arena || col_keep(col, arena)) {
            free(arena);
            return nomem(x);
        }
        size_t pos = 0;
        const uint8_t *prev = NULL;
        for (size_t i = 0; i < count; i++) {
            size_t pre = (size_t)x->f->u64b[i];
            uint8_t *dst = arena + pos;
            if (pre)
                memcpy(dst, prev, pre);
            memcpy(dst + pre, ob[i].p, ob[i].n);
            ob[i].p = dst;
            ob[i].n += pre;
            prev = dst;
            pos += ob[i].n;
        }
        return ZP_OK;
    }
    case ENC_BSS: {
        if (pt != ZPI_PQT_FLOAT && pt != ZPI_PQT_DOUBLE && pt != ZPI_PQT_INT32 &&
            pt != ZPI_PQT_INT64)
            return page_err(x, "BYTE_STREAM_SPLIT values of type %s", type_name(pt));
        if (count > n / w)
            return page_err(x, "%zu BYTE_STREAM_SPLIT values in %zu bytes", count, n);
        size_t stride = n / w; /* the streams span the page's values */
        if (stride != count)
            return page_err(x, "BYTE_STREAM_SPLIT data of %zu bytes for %zu values", n, count);
        for (size_t i = 0; i < count; i++)
            for (size_t k = 0; k < w; k++)
                o[i * w + k] = p[k * stride + i];
        return ZP_OK;
    }
    case ENC_BIT_PACKED:
        return page_err(x, "unsupported encoding BIT_PACKED (deprecated) for values");
    default:
        return page_err(x, "unsupported encoding %d", enc);
    }
}

static zp_status grow_vals(pq_ctx *x, pq_col *col, size_t add) {
    size_t w = x->f->leaves[x->c].width;
    size_t limit = w == sizeof(pq_bytes) ? PQ_MAX_STRINGS : PQ_MAX_LEVELS;
    if (add > limit - col->n_vals)
        return page_err(x, "over %zu values in one column chunk: unsupported", limit);
    if (grow((void **)&col->vals, &col->cap_vals, col->n_vals + add, w))
        return nomem(x);
    return ZP_OK;
}

static zp_status dict_page(pq_ctx *x, pq_col *col, const zpi_pq_page_header *h, const uint8_t *p,
                           size_t n) {
    const pq_leaf *l = &x->f->leaves[x->c];
    if (col->dict)
        return page_err(x, "a second dictionary page");
    if (h->encoding != ENC_PLAIN && h->encoding != ENC_PLAIN_DICT)
        return page_err(x, "dictionary page in unsupported encoding %d", h->encoding);
    if (h->num_values < 0)
        return page_err(x, "dictionary of %d values", h->num_values);
    size_t nv = (size_t)h->num_values;
    /* every PLAIN value takes at least a bit (booleans), 4 bytes (byte
     * arrays: their length) or its width: the allocation below is bounded
     * by the page's size */
    size_t min_bytes = l->ptype == ZPI_PQT_BYTE_ARRAY ? 4 : l->width;
    if (l->ptype == ZPI_PQT_BOOLEAN ? (nv + 7) / 8 > n : nv > n / min_bytes)
        return page_err(x, "dictionary of %zu values in %zu bytes", nv, n);
    col->dict = malloc((nv ? nv : 1) * l->width);
    if (!col->dict)
        return nomem(x);
    col->n_dict = nv;
    return decode_values(x, col, ENC_PLAIN, p, n, nv, (uint8_t *)col->dict);
}

/* One data page's levels (already separated) and values. */
static zp_status data_page(pq_ctx *x, pq_col *col, int nv_i, int enc, const uint8_t *rl,
                           size_t rl_n, const uint8_t *dl, size_t dl_n, const uint8_t *vp,
                           size_t vn, size_t chunk_values) {
    const pq_leaf *l = &x->f->leaves[x->c];
    if (nv_i < 0)
        return page_err(x, "page of %d values", nv_i);
    size_t nv = (size_t)nv_i;
    size_t have = l->max_def || l->max_rep ? col->n_lev : col->n_vals;
    if (nv > chunk_values - have)
        return page_err(x, "pages hold more values than the column chunk's %zu", chunk_values);
    size_t count = nv;
    if (l->max_def || l->max_rep) {
        if (grow((void **)&col->def, &col->cap_lev, col->n_lev + nv, 1))
            return nomem(x);
        size_t cap = col->cap_lev;
        if (l->max_rep) {
            size_t c2 = col->n_lev;
            uint8_t *r = realloc(col->rep, cap);
            if (!r)
                return nomem(x);
            col->rep = r;
            ZPI_FORWARD_IF_ERR(decode_levels(x, rl, rl_n, l->max_rep, col->rep + c2, nv,
                                             "repetition"));
        }
        uint8_t *d = col->def + col->n_lev;
        if (l->max_def) {
            ZPI_FORWARD_IF_ERR(decode_levels(x, dl, dl_n, l->max_def, d, nv, "definition"));
            count = 0;
            for (size_t i = 0; i < nv; i++)
                count += d[i] == l->max_def;
        } else {
            memset(d, 0, nv);
        }
        col->n_lev += nv;
    }
    ZPI_FORWARD_IF_ERR(grow_vals(x, col, count));
    ZPI_FORWARD_IF_ERR(decode_values(x, col, enc, vp, vn, count, col->vals + col->n_vals * l->width));
    col->n_vals += count;
    return ZP_OK;
}

/* A v1 page's levels: rep then def, each a 4-byte length and RLE runs. */
static zp_status v1_levels(pq_ctx *x, const uint8_t **p, size_t *n, const uint8_t **lp, size_t *ln,
                           int mx, int enc, const char *what) {
    *lp = NULL;
    *ln = 0;
    if (!mx)
        return ZP_OK;
    if (enc != ENC_RLE)
        return page_err(x, "unsupported %s level encoding %d (only RLE)", what, enc);
    if (*n < 4 || rd_u32le(*p) > *n - 4)
        return page_err(x, "%s levels: length past the page's end", what);
    *ln = rd_u32le(*p);
    *lp = *p + 4;
    *p += 4 + *ln;
    *n -= 4 + *ln;
    return ZP_OK;
}

/* Reads and decodes column chunk c of row group g into f->cols[c]. */
/* Opens column c of row group g for decoding: its stored bytes read, no
 * page decoded yet (decode_more decodes them as rows are asked for, so that
 * the first segment of a large row group does not pay for all of it). */
static zp_status open_chunk(zpi_pq_file *f, size_t g, size_t c, zpi_err *err) {
    pq_ctx x = {f, g, c, 0, err};
    const zpi_pq_chunk_meta *cm = &f->meta.rgs[g].cols[c];
    const pq_leaf *l = &f->leaves[c];
    pq_col *col = &f->cols[c];
    int64_t start = cm->data_page_offset;
    if (cm->dict_page_offset > 0 && cm->dict_page_offset < start)
        start = cm->dict_page_offset;
    x.page_off = start > 0 ? (uint64_t)start : 0;
    if (start < 4 || cm->total_compressed <= 0 || (uint64_t)start > f->data_end ||
        (uint64_t)cm->total_compressed > f->data_end - (uint64_t)start)
        return page_err(&x, "column chunk of %lld bytes at byte %lld: outside the file's data",
                        (long long)cm->total_compressed, (long long)start);
    if (cm->num_values < 0 || (uint64_t)cm->num_values > PQ_MAX_LEVELS)
        return page_err(&x, "column chunk of %lld values: unsupported (limit %zu)",
                        (long long)cm->num_values, PQ_MAX_LEVELS);
    size_t len = (size_t)cm->total_compressed;
    /* The stored bytes are mapped, not copied: no copy and no fresh
     * anonymous memory for each chunk (the page cache holds them anyway).
     * Given back as they are decoded and unmapped once the chunk is (or
     * when the row group is dropped), so a large file's pages do not pile
     * up in the process. A failed mapping falls back to a read. */
    uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE), moff = (uint64_t)start / pg * pg;
    size_t mlen = len + (size_t)((uint64_t)start - moff);
    void *m = mmap(NULL, mlen, PROT_READ, MAP_PRIVATE, f->fd, (off_t)moff);
    if (m != MAP_FAILED) {
        col->map = m;
        col->map_len = mlen;
        col->ck = (uint8_t *)m + ((uint64_t)start - moff);
        col->ck_buf = SIZE_MAX;
        f->bytes_read += len;
    }
    uint8_t *buf = NULL;
    if (!col->map) {
        buf = malloc(len);
        if (!buf || col_keep(col, buf)) {
            free(buf);
            return nomem(&x);
        }
        col->ck = buf;
        col->ck_buf = col->n_bufs - 1;
    }
    col->ck_len = len;
    col->ck_pos = 0;
    col->ck_start = (uint64_t)start;
    col->ck_values = (size_t)cm->num_values;
    /* Byte-array values point into their pages: a decompressed page is kept
     * with the row group, and the stored chunk too when a page is stored
     * uncompressed (raw_used). Fixed-width values are copied out: their
     * pages are decompressed into the file's scratch, and the stored chunk
     * is freed once decoded. */
    col->ck_keep = l->ptype == ZPI_PQT_BYTE_ARRAY;
    col->ck_raw_used = col->ck_keep && cm->codec == CODEC_NONE;
    col->ck_done = 0;
    col->ck_lev_seen = 0;
    col->ck_rows_started = col->ck_rows = 0;
    return buf ? pread_all(f, buf, len, (uint64_t)start, err) : ZP_OK;
}

/* Column c's complete rows after a page: all its rows once the chunk is
 * decoded; before, for a repeated column, the rows started but the last
 * (it may go on in the next page). */
static void count_rows(const pq_leaf *l, pq_col *col) {
    if (!l->max_rep) {
        col->ck_rows = l->max_def ? col->n_lev : col->n_vals;
        return;
    }
    for (; col->ck_lev_seen < col->n_lev; col->ck_lev_seen++)
        col->ck_rows_started += col->rep[col->ck_lev_seen] == 0;
    col->ck_rows = col->ck_done || !col->ck_rows_started ? col->ck_rows_started
                                                         : col->ck_rows_started - 1;
}

/* Decodes column c's next pages of row group g until it holds `rows`
 * complete rows (or all of them); at the chunk's end, checks its row count
 * against the row group's. */
static zp_status decode_more(zpi_pq_file *f, size_t g, size_t c, uint64_t rows, zpi_err *err) {
    pq_ctx x = {f, g, c, 0, err};
    const zpi_pq_chunk_meta *cm = &f->meta.rgs[g].cols[c];
    const pq_leaf *l = &f->leaves[c];
    pq_col *col = &f->cols[c];
    const uint8_t *buf = col->ck;
    const size_t len = col->ck_len, chunk_values = col->ck_values;
    while (!col->ck_done && col->ck_rows < rows) {
        size_t have = l->max_def || l->max_rep ? col->n_lev : col->n_vals;
        if (have == chunk_values) {
            col->ck_done = 1;
            break;
        }
        size_t pos = col->ck_pos;
        x.page_off = col->ck_start + pos;
        if (pos >= len)
            return page_err(&x, "column chunk ends after %zu of its %zu values", have, chunk_values);
        zpi_pq_page_header h;
        size_t used;
        if (zpi_pq_page_header_parse(buf + pos, len - pos, &h, &used, err) != ZP_OK)
            return page_err(&x, "%s", zpi_err_msg(err));
        pos += used;
        if (h.compressed_size < 0 || (size_t)h.compressed_size > len - pos ||
            h.uncompressed_size < 0)
            return page_err(&x, "page of %d bytes (%d uncompressed) past the column chunk's end",
                            h.compressed_size, h.uncompressed_size);
        const uint8_t *raw = buf + pos;
        size_t csz = (size_t)h.compressed_size, usz = (size_t)h.uncompressed_size;
        pos += csz;
        col->ck_pos = pos;
        if (h.type == ZPI_PQP_INDEX)
            continue;
        if (h.type != ZPI_PQP_DICT && h.type != ZPI_PQP_DATA && h.type != ZPI_PQP_DATA_V2)
            return page_err(&x, "unsupported page type %d", h.type);
        if (!h.has_sub)
            return page_err(&x, "page header without its type's header");
        /* a data page's buffer is released once read past; a dictionary's
         * is kept with the chunk */
        const size_t np0 = col->n_pages;
        const int keep = col->ck_keep ? (h.type == ZPI_PQP_DICT ? 1 : 2) : 0;
        if (h.type == ZPI_PQP_DICT || h.type == ZPI_PQP_DATA) {
            const uint8_t *p;
            ZPI_FORWARD_IF_ERR(decompress(&x, col, cm->codec, raw, csz, usz, &p, keep));
            size_t n = usz;
            if (h.type == ZPI_PQP_DICT) {
                ZPI_FORWARD_IF_ERR(dict_page(&x, col, &h, p, n));
                continue;
            }
            const uint8_t *rl, *dl;
            size_t rl_n, dl_n;
            ZPI_FORWARD_IF_ERR(v1_levels(&x, &p, &n, &rl, &rl_n, l->max_rep, h.rep_encoding,
                                         "repetition"));
            ZPI_FORWARD_IF_ERR(v1_levels(&x, &p, &n, &dl, &dl_n, l->max_def, h.def_encoding,
                                         "definition"));
            ZPI_FORWARD_IF_ERR(data_page(&x, col, h.num_values, h.encoding, rl, rl_n, dl, dl_n, p,
                                         n, chunk_values));
            if (col->n_pages > np0)
                col->pages[col->n_pages - 1].end_val = col->n_vals;
            count_rows(l, col);
            continue;
        }
        /* v2: levels uncompressed before the (maybe compressed) values */
        if (h.rep_len < 0 || h.def_len < 0 || (size_t)h.rep_len + (size_t)h.def_len > csz ||
            (size_t)h.rep_len + (size_t)h.def_len > usz)
            return page_err(&x, "v2 page levels of %d + %d bytes in a page of %zu", h.rep_len,
                            h.def_len, csz);
        size_t lv = (size_t)h.rep_len + (size_t)h.def_len;
        const uint8_t *vp;
        if (h.is_compressed) {
            ZPI_FORWARD_IF_ERR(
                decompress(&x, col, cm->codec, raw + lv, csz - lv, usz - lv, &vp, keep));
        } else if (csz != usz) {
            return page_err(&x, "uncompressed v2 page of %zu bytes, its header says %zu", csz, usz);
        } else {
            vp = raw + lv;
            col->ck_raw_used |= col->ck_keep;
        }
        ZPI_FORWARD_IF_ERR(data_page(&x, col, h.num_values, h.encoding, raw, (size_t)h.rep_len,
                                     raw + h.rep_len, (size_t)h.def_len, vp, usz - lv,
                                     chunk_values));
        if (col->n_pages > np0)
            col->pages[col->n_pages - 1].end_val = col->n_vals;
        count_rows(l, col);
    }
    if (!col->ck_done) {
        /* the mapped pages decoded so far leave the process (the page cache
         * keeps them): a large chunk is not resident whole while decoded */
        if (col->map && !col->ck_raw_used) {
            uintptr_t base = (uintptr_t)col->map, upto = (uintptr_t)(col->ck + col->ck_pos);
            size_t pg = (size_t)sysconf(_SC_PAGESIZE);
            size_t drop = (size_t)(upto - base) / pg * pg;
            if (drop > col->map_dropped) {
                madvise((char *)col->map + col->map_dropped, drop - col->map_dropped,
                        MADV_DONTNEED);
                col->map_dropped = drop;
            }
        }
        return ZP_OK;
    }
    if (col->ck && !col->ck_raw_used && col->ck_buf != SIZE_MAX) {
        free(col->bufs[col->ck_buf]);
        col->bufs[col->ck_buf] = NULL;
    } else if (col->map && !col->ck_raw_used) {
        munmap(col->map, col->map_len);
        col->map = NULL;
    }
    col->ck = NULL;
    count_rows(l, col);
    if (l->max_rep && col->n_lev && col->rep[0] != 0)
        return page_err(&x, "column chunk starts inside a row (repetition level %u)", col->rep[0]);
    if (col->ck_rows != (uint64_t)f->meta.rgs[g].num_rows)
        return page_err(&x, "column chunk holds %llu rows, its row group %lld",
                        (unsigned long long)col->ck_rows, (long long)f->meta.rgs[g].num_rows);
    col->ck_rows = UINT64_MAX; /* checked: asks of any row are met */
    return ZP_OK;
}

/* Row group g opened (its chunks read, decoded as rows are asked for:
 * decode_rows); the one already open is kept. */
static zp_status load_row_group(zpi_pq_file *f, size_t g, zpi_err *err) {
    if (f->cur_g == (long)g)
        return ZP_OK;
    drop_row_group(f);
    for (size_t c = 0; c < f->n_leaves; c++) {
        zp_status s = open_chunk(f, g, c, err);
        if (s != ZP_OK) {
            drop_row_group(f);
            return s;
        }
    }
    f->cur_g = (long)g;
    return ZP_OK;
}

/* Every column of the open row group g decoded through its row `rows` - 1
 * (and the start of row `rows`: a repeated column's row is complete only
 * when the next begins or the chunk ends). On an error the row group is
 * dropped. */
static zp_status decode_rows(zpi_pq_file *f, size_t g, uint64_t rows, zpi_err *err) {
    for (size_t c = 0; c < f->n_leaves; c++) {
        zp_status s = decode_more(f, g, c, rows, err);
        if (s != ZP_OK) {
            drop_row_group(f);
            return s;
        }
    }
    return ZP_OK;
}

/* ------------------------------------------------------------- rows */

/* Moves a column's cursor to row r of the decoded row group. */
static void seek_row(const pq_leaf *l, pq_col *c, uint64_t r) {
    if (r < c->row_pos) {
        c->row_pos = 0;
        c->lev_pos = c->val_pos = 0;
    }
    if (!l->max_def && !l->max_rep) {
        c->row_pos = r;
        c->lev_pos = c->val_pos = (size_t)r;
        return;
    }
    size_t lv = c->lev_pos, vv = c->val_pos;
    uint64_t row = c->row_pos;
    if (!l->max_rep) {
        for (; row < r; row++, lv++)
            vv += c->def[lv] == l->max_def;
    } else {
        while (row < r) {
            vv += c->def[lv] == l->max_def;
            lv++;
            if (lv >= c->n_lev || c->rep[lv] == 0)
                row++;
        }
    }
    c->row_pos = row;
    c->lev_pos = lv;
    c->val_pos = vv;
}

/* An integer of the leaf's kind (K_I32, K_U32, K_I64, K_U64) at out (at least 24 bytes). */
static inline size_t fmt_num(const pq_leaf *l, const uint8_t *v, char *out) {
    switch (l->kind) {
    case K_I32: {
        int32_t x;
        memcpy(&x, v, 4);
        return fmt_i64(x, out);
    }
    case K_U32: {
        uint32_t x;
        memcpy(&x, v, 4);
        return fmt_u64(x, out);
    }
    case K_I64: {
        int64_t x;
        memcpy(&x, v, 8);
        return fmt_i64(x, out);
    }
    default: {
        uint64_t x;
        memcpy(&x, v, 8);
        return fmt_u64(x, out);
    }
    }
}

static int put_value(const pq_leaf *l, const pq_col *c, size_t i, obuf *b, const char **bad) {
    char tmp[48];
    size_t n;
    const uint8_t *v = c->vals + i * l->width;
    switch (l->kind) {
    case K_BOOL:
        OB_NEED(b, 5);
        if (*v) {
            memcpy(b->p + b->len, "true", 4);
            b->len += 4;
        } else {
            memcpy(b->p + b->len, "false", 5);
            b->len += 5;
        }
        return 0;
    case K_I32:
    case K_U32:
    case K_I64:
    case K_U64:
        n = fmt_num(l, v, tmp);
        break;
    case K_DEC32: {
        int32_t x;
        memcpy(&x, v, 4);
        n = fmt_decimal(x, l->scale, tmp);
        break;
    }
    case K_DEC64: {
        int64_t x;
        memcpy(&x, v, 8);
        n = fmt_decimal(x, l->scale, tmp);
        break;
    }
    case K_F32: {
        float x;
        memcpy(&x, v, 4);
        if (!isfinite(x)) {
            memcpy(tmp, "null", 4);
            n = 4;
        } else {
            n = zpi_pq_fmt_float(x, tmp);
        }
        break;
    }
    case K_F64: {
        double x;
        memcpy(&x, v, 8);
        if (!isfinite(x)) {
            memcpy(tmp, "null", 4);
            n = 4;
        } else {
            n = zpi_pq_fmt_double(x, tmp);
        }
        break;
    }
    case K_BIN: {
        const pq_bytes *s = (const pq_bytes *)(const void *)v;
        if (!zpi_pq_utf8_valid((const char *)s->p, s->n)) {
            *bad = "a binary value that is not valid UTF-8";
            return -2;
        }
        return put_str(b, s->p, s->n);
    }
    default: { /* K_STR */
        const pq_bytes *s = (const pq_bytes *)(const void *)v;
        return put_str(b, s->p, s->n);
    }
    }
    OB_NEED(b, n);
    memcpy(b->p + b->len, tmp, n);
    b->len += n;
    return 0;
}

static int put_raw(obuf *b, const char *s, size_t n) {
    OB_NEED(b, n);
    memcpy(b->p + b->len, s, n);
    b->len += n;
    return 0;
}

/* Rows [a, e) of the decoded row group; offsets[0..b-a) set. -1: out of
 * memory; -2: a value refused (*bad, *bad_col). */
static int emit_rows(zpi_pq_file *f, uint64_t a, uint64_t e, obuf *b, uint64_t *offsets,
                     const char **bad, size_t *bad_col, uint64_t *bad_row) {
    for (size_t c = 0; c < f->n_leaves; c++)
        seek_row(&f->leaves[c], &f->cols[c], a);
    for (uint64_t r = a; r < e; r++) {
        *offsets++ = b->len;
        if (put_raw(b, "{", 1))
            return -1;
        for (size_t ci = 0; ci < f->n_leaves; ci++) {
            const pq_leaf *l = &f->leaves[ci];
            pq_col *c = &f->cols[ci];
            if (ci && put_raw(b, ",", 1))
                return -1;
            if (put_raw(b, l->key, l->key_len))
                return -1;
            int rc = 0;
            if (!l->is_list) {
                if (l->max_def && c->def[c->lev_pos++] != l->max_def)
                    rc = put_raw(b, "null", 4);
                else
                    rc = put_value(l, c, c->val_pos++, b, bad);
                if (!l->max_def)
                    c->lev_pos++;
            } else {
                int d = c->def[c->lev_pos];
                if (d < l->d_list) {
                    rc = put_raw(b, "null", 4);
                    c->lev_pos++;
                } else if (d == l->d_list) {
                    rc = put_raw(b, "[]", 2);
                    c->lev_pos++;
                } else if (l->kind == K_I32 || l->kind == K_U32 || l->kind == K_I64 ||
                           l->kind == K_U64) {
                    /* integer lists (input_ids): one capacity check per list */
                    size_t e_lev = c->lev_pos + 1;
                    while (e_lev < c->n_lev && c->rep[e_lev] != 0)
                        e_lev++;
                    OB_NEED(b, (e_lev - c->lev_pos) * 22 + 2);
                    char *o = b->p + b->len;
                    *o++ = '[';
                    const uint8_t *vals = c->vals;
                    size_t w = l->width, vp = c->val_pos;
                    for (size_t k = c->lev_pos; k < e_lev; k++) {
                        if (c->def[k] == l->max_def) {
                            o += fmt_num(l, vals + w * vp++, o);
                        } else {
                            memcpy(o, "null", 4);
                            o += 4;
                        }
                        *o++ = ',';
                    }
                    o[-1] = ']';
                    b->len = (size_t)(o - b->p);
                    c->val_pos = vp;
                    c->lev_pos = e_lev;
                } else {
                    rc = put_raw(b, "[", 1);
                    int first = 1;
                    do {
                        d = c->def[c->lev_pos++];
                        if (!first && !rc)
                            rc = put_raw(b, ",", 1);
                        first = 0;
                        if (rc)
                            break;
                        if (d == l->max_def)
                            rc = put_value(l, c, c->val_pos++, b, bad);
                        else
                            rc = put_raw(b, "null", 4);
                    } while (!rc && c->lev_pos < c->n_lev && c->rep[c->lev_pos] != 0);
                    if (!rc)
                        rc = put_raw(b, "]", 1);
                }
            }
            c->row_pos = r + 1;
            if (rc) {
                *bad_col = ci;
                *bad_row = r;
                return rc;
            }
        }
        if (put_raw(b, "}\n", 2))
            return -1;
    }
    return 0;
}

/* The data pages every column has read past (their values all before the
 * column's cursor) back to the pool: a row group's decompressed text is not
 * held whole, and the next pages reuse warm buffers. */
static void release_pages(zpi_pq_file *f) {
    for (size_t c = 0; c < f->n_leaves; c++) {
        pq_col *col = &f->cols[c];
        while (col->pages_head < col->n_pages &&
               col->pages[col->pages_head].end_val <= col->val_pos) {
            pool_put(f->pool, col->pages[col->pages_head].p, col->pages[col->pages_head].cap);
            col->pages[col->pages_head++].p = NULL;
        }
    }
}

/* Whether row a of the open row group lies before a column's released
 * pages (a read that goes back: the row group must be decoded again). */
static int before_released(const zpi_pq_file *f, uint64_t a) {
    for (size_t c = 0; c < f->n_leaves; c++)
        if (f->cols[c].pages_head && a < f->cols[c].row_pos)
            return 1;
    return 0;
}

zp_status zpi_pq_read_rows(zpi_pq_file *f, uint64_t first, uint64_t n, zpi_load_bufs *bufs,
                           zpi_shard *out, zpi_err *err) {
    memset(out, 0, sizeof *out);
    uint64_t total = zpi_pq_num_rows(f);
    if (first > total || n > total - first)
        return fmt_err(f, err, ZP_ERR_INVALID, "rows %llu..%llu asked of %llu rows",
                       (unsigned long long)first, (unsigned long long)(first + n),
                       (unsigned long long)total);
    f->bytes_read = 0;
    f->t_read = f->t_dec = 0;
    obuf b = {0};
    if (bufs && bufs->data) {
        b.p = bufs->data;
        b.cap = bufs->data_cap;
        bufs->data = NULL;
        bufs->data_cap = 0;
    } else if (ob_grow(&b, 65536)) {
        return fmt_err(f, err, ZP_ERR_NOMEM, "out of memory");
    }
    uint64_t *offsets = malloc((size_t)(n + 1) * sizeof *offsets);
    zp_status s = ZP_OK;
    if (!offsets || n > SIZE_MAX / 16) {
        s = fmt_err(f, err, ZP_ERR_NOMEM, "out of memory for %llu rows", (unsigned long long)n);
        goto fail;
    }
    /* the row group holding `first` */
    size_t lo = 0, hi = f->meta.n_rg;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (f->rg_first[mid] <= first)
            lo = mid;
        else
            hi = mid;
    }
    uint64_t done = 0;
    for (size_t g = lo; done < n; g++) {
        uint64_t rg0 = f->rg_first[g], rg1 = f->rg_first[g + 1];
        if (rg1 <= first + done)
            continue;
        uint64_t a = first + done - rg0;
        uint64_t e = rg1 - rg0;
        if (e - a > n - done)
            e = a + (n - done);
        if (f->cur_g == (long)g && before_released(f, a))
            drop_row_group(f); /* rows asked again whose pages were released: decoded anew */
        if ((s = load_row_group(f, g, err)) != ZP_OK || (s = decode_rows(f, g, e, err)) != ZP_OK)
            goto fail;
        /* the rows' JSON, estimated from their share of the row group's
         * decoded bytes, plus the keys and separators */
        const zpi_pq_row_group *rg = &f->meta.rgs[g];
        double est = 0, share = (double)(e - a) / (double)(rg1 - rg0);
        for (size_t c = 0; c < f->n_leaves; c++)
            est += share * (double)(rg->cols[c].total_uncompressed > 0
                                        ? rg->cols[c].total_uncompressed : 0) +
                   (double)(e - a) * (double)(f->leaves[c].key_len + 8);
        if (est < 1e12 && ob_reserve(&b, (size_t)est) != 0) {
            s = fmt_err(f, err, ZP_ERR_NOMEM, "out of memory for rows of row group %zu", g);
            goto fail;
        }
        const char *bad = NULL;
        size_t bc = 0;
        uint64_t br = 0;
        int rc = emit_rows(f, a, e, &b, offsets + done, &bad, &bc, &br);
        if (rc == -1) {
            s = fmt_err(f, err, ZP_ERR_NOMEM, "out of memory for rows of row group %zu", g);
            drop_row_group(f); /* its cursors are mid-row */
            goto fail;
        }
        if (rc) {
            s = fmt_err(f, err, ZP_ERR_FORMAT, "column '%s', row group %zu, row %llu: %s",
                        f->leaves[bc].name, g, (unsigned long long)(rg0 + br), bad);
            drop_row_group(f); /* its cursors are mid-row */
            goto fail;
        }
        release_pages(f);
        done += e - a;
    }
    offsets[n] = b.len;
    zpi_shard_set_data(out, b.p, b.len, b.cap);
    out->offsets = offsets;
    out->n_records = n;
    out->first_record = first;
    out->file_bytes = f->bytes_read;
    out->read_seconds = f->t_read;
    out->decompress_seconds = f->t_dec;
    return ZP_OK;
fail:
    free(b.p);
    free(offsets);
    memset(out, 0, sizeof *out);
    return s;
}
