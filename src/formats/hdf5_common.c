/*
 * hdf5_common.c - helpers the HDF5 reader's files share (hdf5_internal.h):
 * types, token conversion, the variable-length allocator, reporting a bad
 * record, pread.
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

int zpi_h5_utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        unsigned min;
        uint32_t cp;
        if (c >= 0xc2 && c <= 0xdf)
            k = 1, min = 0x80, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef)
            k = 2, min = 0x800, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4)
            k = 3, min = 0x10000, cp = c & 0x07;
        else
            return 0;
        if (n - i <= k)
            return 0;
        for (size_t j = 1; j <= k; j++) {
            unsigned d = s[i + j];
            if ((d & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (d & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += k + 1;
    }
    return 1;
}

/* The native memory type of an integer/float of this zp_dtype. */
hid_t zpi_h5_native_of(zp_dtype t)
{
    switch (t) {
    case ZP_DTYPE_U8: return H5T_NATIVE_UINT8;
    case ZP_DTYPE_I8: return H5T_NATIVE_INT8;
    case ZP_DTYPE_U16: return H5T_NATIVE_UINT16;
    case ZP_DTYPE_I16: return H5T_NATIVE_INT16;
    case ZP_DTYPE_U32: return H5T_NATIVE_UINT32;
    case ZP_DTYPE_I32: return H5T_NATIVE_INT32;
    case ZP_DTYPE_U64: return H5T_NATIVE_UINT64;
    case ZP_DTYPE_I64: return H5T_NATIVE_INT64;
    case ZP_DTYPE_F32: return H5T_NATIVE_FLOAT;
    case ZP_DTYPE_F64: return H5T_NATIVE_DOUBLE;
    default: return -1;
    }
}

const char *zpi_h5_class_name(H5T_class_t c)
{
    switch (c) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "float";
    case H5T_TIME: return "time";
    case H5T_STRING: return "string";
    case H5T_BITFIELD: return "bitfield";
    case H5T_OPAQUE: return "opaque";
    case H5T_COMPOUND: return "compound";
    case H5T_REFERENCE: return "reference";
    case H5T_ENUM: return "enum";
    case H5T_VLEN: return "variable-length sequence";
    case H5T_ARRAY: return "array";
    default: return "unknown";
    }
}

/* An integer or float file type -> zp_dtype (ZP_DTYPE_NONE: not one). */
zp_dtype zpi_h5_dtype_of(hid_t t)
{
    H5T_class_t c = H5Tget_class(t);
    size_t sz = H5Tget_size(t);
    if (c == H5T_INTEGER) {
        int sgn = H5Tget_sign(t) == H5T_SGN_2;
        switch (sz) {
        case 1: return sgn ? ZP_DTYPE_I8 : ZP_DTYPE_U8;
        case 2: return sgn ? ZP_DTYPE_I16 : ZP_DTYPE_U16;
        case 4: return sgn ? ZP_DTYPE_I32 : ZP_DTYPE_U32;
        case 8: return sgn ? ZP_DTYPE_I64 : ZP_DTYPE_U64;
        default: return ZP_DTYPE_NONE;
        }
    }
    if (c == H5T_FLOAT)
        return sz == 4 ? ZP_DTYPE_F32 : sz == 8 ? ZP_DTYPE_F64 : ZP_DTYPE_NONE;
    return ZP_DTYPE_NONE;
}

/* An element of an integer token dtype as int64 (values of U64 above
 * INT64_MAX come back as -1: out of range either way). */
int64_t zpi_h5_tok_at(const void *p, zp_dtype t, size_t i)
{
    switch (t) {
    case ZP_DTYPE_U8: return ((const uint8_t *)p)[i];
    case ZP_DTYPE_I8: return ((const int8_t *)p)[i];
    case ZP_DTYPE_U16: return ((const uint16_t *)p)[i];
    case ZP_DTYPE_I16: return ((const int16_t *)p)[i];
    case ZP_DTYPE_U32: return ((const uint32_t *)p)[i];
    case ZP_DTYPE_I32: return ((const int32_t *)p)[i];
    case ZP_DTYPE_U64: {
        uint64_t v = ((const uint64_t *)p)[i];
        return v > (uint64_t)INT64_MAX ? -1 : (int64_t)v;
    }
    case ZP_DTYPE_I64: return ((const int64_t *)p)[i];
    default: return -1;
    }
}

/* Convert n stored ids at src[off..] into dst; -1 and the position of the
 * first id outside [0, INT32_MAX], else 0. */
int zpi_h5_tok_convert(const void *src, zp_dtype t, size_t off, size_t n, int32_t *dst, size_t *bad_at)
{
    if (t == ZP_DTYPE_U16) { /* the common cases, without the switch per id */
        const uint16_t *s = (const uint16_t *)src + off;
        for (size_t i = 0; i < n; i++)
            dst[i] = s[i];
        return 0;
    }
    if (t == ZP_DTYPE_I32) {
        const int32_t *s = (const int32_t *)src + off;
        for (size_t i = 0; i < n; i++) {
            if (s[i] < 0) {
                *bad_at = i;
                return -1;
            }
            dst[i] = s[i];
        }
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        int64_t v = zpi_h5_tok_at(src, t, off + i);
        if (v < 0 || v > INT32_MAX) {
            *bad_at = i;
            return -1;
        }
        dst[i] = (int32_t)v;
    }
    return 0;
}


void *zpi_h5_vlen_malloc(size_t size, void *info)
{
    vlen_alloc *a = info;
    if (size > a->cap) {
        if (!a->refused)
            a->refused = size;
        return NULL;
    }
    return malloc(size ? size : 1);
}

void zpi_h5_vlen_free(void *p, void *info)
{
    (void)info;
    free(p);
}

void zpi_h5_bad(rctx *R, size_t row, zp_status st, const char *fmt, ...)
{
    char m[400], msg[512];
    va_list ap;
    va_start(ap, fmt);
    zpi_vfmt(m, sizeof m, fmt, ap);
    va_end(ap);
    zpi_fmt(msg, sizeof msg, "shard '%s': %s", R->r->name, m);
    if (R->req->bad)
        R->req->bad(R->req->bad_ctx, row, st, msg);
}

/* n bytes at off: 0, or -1 with errno (0 at the end of the file). */
int zpi_h5_pread_all(int fd, void *buf, size_t n, uint64_t off)
{
    char *p = buf;
    while (n) {
        ssize_t got = pread(fd, p, n, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            if (got == 0)
                errno = 0;
            return -1;
        }
        p += got, n -= (size_t)got, off += (uint64_t)got;
    }
    return 0;
}
