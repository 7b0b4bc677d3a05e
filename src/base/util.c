/* util.c - small shared helpers. */
#include "base/util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double zpi_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t zpi_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void zpi_vfmt(char *buf, size_t cap, const char *fmt, va_list ap)
{
    if (!buf || cap == 0)
        return;
    int n = vsnprintf(buf, cap, fmt, ap);
    if (n < 0)
        buf[0] = '\0';
}

void zpi_fmt(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zpi_vfmt(buf, cap, fmt, ap);
    va_end(ap);
}

char *zpi_strdup(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

int zpi_has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

const char *zpi_node_tmpdir(const char **var)
{
    static const char *const names[] = {"SLURM_TMPDIR", "TMPDIR"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (v && v[0]) {
            if (var)
                *var = names[i];
            return v;
        }
    }
    if (var)
        *var = NULL;
    return "/tmp";
}

int zpi_mkdir_p(const char *dir, unsigned mode)
{
    size_t n = strlen(dir);
    if (n == 0) {
        errno = ENOENT;
        return -1;
    }
    char *p = malloc(n + 1);
    if (!p)
        return -1;
    memcpy(p, dir, n + 1);
    int rc = 0;
    for (char *c = p + 1; *c && rc == 0; c++) {
        if (*c != '/')
            continue;
        *c = '\0';
        if (mkdir(p, (mode_t)mode) != 0 && errno != EEXIST)
            rc = -1;
        *c = '/';
    }
    if (rc == 0 && mkdir(p, (mode_t)mode) != 0 && errno != EEXIST)
        rc = -1;
    if (rc == 0) {
        struct stat st;
        if (stat(p, &st) != 0)
            rc = -1;
        else if (!S_ISDIR(st.st_mode)) {
            errno = ENOTDIR;
            rc = -1;
        }
    }
    int e = errno;
    free(p);
    errno = e;
    return rc;
}

int zpi_parse_u64(const char *s, uint64_t min, uint64_t max, int sizes, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9') {
        errno = EINVAL;
        return -1;
    }
    uint64_t v = 0;
    int range = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            range = 1;
        else
            v = v * 10 + d;
    }
    if (*s && sizes) {
        unsigned shift = 0;
        switch (*s) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        case 't': case 'T': shift = 40; break;
        default: break;
        }
        if (shift) {
            s++;
            if (*s == 'i' && s[1] == 'B')
                s += 2;
            else if (*s == 'B')
                s++;
            if (v > (UINT64_MAX >> shift))
                range = 1;
            else
                v <<= shift;
        } else if (*s == 'B' && s[1] == '\0') {
            s++;
        }
    }
    if (*s) {
        errno = EINVAL;
        return -1;
    }
    if (range || v < min || v > max) {
        errno = ERANGE;
        return -1;
    }
    *out = v;
    return 0;
}

int zpi_parse_double(const char *s, double min, double max, double *out)
{
    if (!s || !*s || isspace((unsigned char)*s)) {
        errno = EINVAL;
        return -1;
    }
    char *end;
    double v = strtod(s, &end);
    if (*end || end == s || isnan(v)) {
        errno = EINVAL;
        return -1;
    }
    /* strtod's ERANGE also flags underflow (a subnormal or a rounding to
     * zero), which is a value like any other here: only overflow (inf) and
     * the bounds are range errors. */
    if (!isfinite(v) || v < min || v > max) {
        errno = ERANGE;
        return -1;
    }
    *out = v;
    return 0;
}

int zpi_write_file_atomic(const char *path, const void *data, size_t len)
{
    /* A name of its own for every call (mkostemp: O_EXCL with a random
     * suffix): two threads or processes writing the same path never share
     * a temporary file. */
    size_t n = strlen(path) + 16;
    char *tmp = malloc(n);
    if (!tmp)
        return -1;
    snprintf(tmp, n, "%s.tmp.XXXXXX", path);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        errno = e;
        return -1;
    }
    int rc = 0;
    if (fchmod(fd, 0644) != 0) /* mkostemp creates 0600 */
        rc = -1;
    const char *c = data;
    size_t left = rc == 0 ? len : 0;
    while (left > 0) {
        ssize_t w = write(fd, c, left);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            rc = -1;
            break;
        }
        c += w;
        left -= (size_t)w;
    }
    if (rc == 0 && fsync(fd) != 0)
        rc = -1;
    int e = errno;
    if (close(fd) != 0 && rc == 0) {
        rc = -1;
        e = errno;
    }
    if (rc == 0 && rename(tmp, path) != 0) {
        rc = -1;
        e = errno;
    }
    if (rc != 0)
        unlink(tmp);
    free(tmp);
    errno = e;
    return rc;
}

int zpi_grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    if (elem == 0) { /* realloc(p, 0) would free the array */
        errno = EINVAL;
        return -1;
    }
    size_t nc = *cap ? *cap : 16;
    while (nc < need) {
        if (nc > SIZE_MAX / 2) {
            errno = ENOMEM;
            return -1;
        }
        nc *= 2;
    }
    if (nc > SIZE_MAX / elem) {
        errno = ENOMEM;
        return -1;
    }
    void *p = realloc(*arr, nc * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = nc;
    return 0;
}

int zpi_buf_reserve(zpi_buf *b, size_t extra)
{
    if (extra > SIZE_MAX - b->len - 1)
        return -1;
    void *p = b->p;
    if (zpi_grow(&p, &b->cap, b->len + extra + 1, 1) != 0)
        return -1;
    b->p = p;
    return 0;
}

int zpi_buf_append(zpi_buf *b, const void *data, size_t n)
{
    if (zpi_buf_reserve(b, n) != 0)
        return -1;
    if (n)
        memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

int zpi_buf_puts(zpi_buf *b, const char *s) { return zpi_buf_append(b, s, strlen(s)); }

int zpi_buf_printf(zpi_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || zpi_buf_reserve(b, (size_t)n) != 0)
        return -1;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void zpi_buf_free(zpi_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

void zpi_vlog(zp_log_fn fn, void *user, zp_log_level lvl, const char *fmt, va_list ap)
{
    if (!fn)
        return;
    char buf[2048];
    zpi_vfmt(buf, sizeof buf, fmt, ap);
    fn(user, lvl, buf);
}

void zpi_log(zp_log_fn fn, void *user, zp_log_level lvl, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zpi_vlog(fn, user, lvl, fmt, ap);
    va_end(ap);
}

long zpi_read_full(int fd, void *buf, size_t want)
{
    char *b = buf;
    size_t got = 0;
    while (got < want) {
        ssize_t r = read(fd, b + got, want - got);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (long)got;
}

int zpi_buf_put_json_str(zpi_buf *b, const char *s)
{
    if (zpi_buf_puts(b, "\"") != 0)
        return -1;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int r;
        switch (*p) {
        case '"': r = zpi_buf_puts(b, "\\\""); break;
        case '\\': r = zpi_buf_puts(b, "\\\\"); break;
        case '\n': r = zpi_buf_puts(b, "\\n"); break;
        case '\r': r = zpi_buf_puts(b, "\\r"); break;
        case '\t': r = zpi_buf_puts(b, "\\t"); break;
        case '\b': r = zpi_buf_puts(b, "\\b"); break;
        case '\f': r = zpi_buf_puts(b, "\\f"); break;
        default:
            r = *p < 0x20 ? zpi_buf_printf(b, "\\u%04x", *p) : zpi_buf_append(b, p, 1);
        }
        if (r != 0)
            return -1;
    }
    return zpi_buf_puts(b, "\"");
}
