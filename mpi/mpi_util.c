/* mpi_util.c - the MPI layer's own small helpers: appending to
 * a bounded buffer, the handle's error (zpi_err of src/base/error.h, with the
 * failed-create convention of every handle), rank lists, the growable
 * string of the renderers, numbers in human units, the agreed settings'
 * copy and release (zpi_mpi_info).
 *
 * What the core library already has (zpi_now, zpi_fmt, zpi_mkdir_p, zpi_err) is
 * used from src/base/util.c and src/base/error.c, which libzephon_mpi carries as its
 * own hidden copy of those objects (CMakeLists.txt: zephon_util_objects),
 * so it never needs a zpi_ symbol exported by libzephon.so. */#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "mpi_internal.h"

/* ------------------------------------------------------------ formatting */


void zpi_mpi_append(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    if (*len + 1 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (k > 0)
        *len = *len + (size_t)k < cap ? *len + (size_t)k : cap - 1;
}

/* ------------------------------------------------------------ errors */

zp_status zpi_mpi_fail(zp_mpi *m, zp_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zpi_err_vset(&m->err, st, fmt, ap);
    va_end(ap);
    return st;
}

zp_status zpi_mpi_check(zp_mpi *m, int rc, const char *what)
{
    if (rc == MPI_SUCCESS)
        return ZP_OK;
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS)
        zpi_fmt(s, sizeof s, "MPI error %d", rc);
    return zpi_mpi_fail(m, ZP_ERR_MPI, "rank %d: %s failed: %s", m->rank, what, s);
}

/* ------------------------------------------------------------ rank lists */

void zpi_mpi_ranklist(char *buf, size_t cap, const int *ranks, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && ranks[j + 1] == ranks[j] + 1)
            j++;
        char item[48];
        if (j == i)
            zpi_fmt(item, sizeof item, "%s%d", i ? "," : "", ranks[i]);
        else
            zpi_fmt(item, sizeof item, "%s%d-%d", i ? "," : "", ranks[i], ranks[j]);
        size_t il = strlen(item);
        if (len + il + 24 >= cap) {
            zpi_fmt(buf + len, cap - len, ",... (%zu ranks)", n);
            return;
        }
        memcpy(buf + len, item, il + 1);
        len += il;
        i = j + 1;
    }
}

/* ------------------------------------------------------------ string builder */

static void sb_grow(zpi_sbuf *b, size_t need)
{
    if (b->oom || b->len + need + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + need + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return;
    }
    b->p = p;
    b->cap = cap;
}

void zpi_sb_printf(zpi_sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    sb_grow(b, (size_t)n);
    if (b->oom)
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void zpi_sb_putn(zpi_sbuf *b, const char *s, size_t n)
{
    sb_grow(b, n);
    if (b->oom)
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void zpi_sb_puts(zpi_sbuf *b, const char *s) { zpi_sb_putn(b, s, strlen(s)); }

void zpi_sb_html(zpi_sbuf *b, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<':
            zpi_sb_puts(b, "&lt;");
            break;
        case '>':
            zpi_sb_puts(b, "&gt;");
            break;
        case '&':
            zpi_sb_puts(b, "&amp;");
            break;
        case '"':
            zpi_sb_puts(b, "&quot;");
            break;
        default:
            zpi_sb_putn(b, s, 1);
        }
    }
}

void zpi_sb_csv(zpi_sbuf *b, const char *s)
{
    if (!strpbrk(s, ",\"\n\r")) {
        zpi_sb_puts(b, s);
        return;
    }
    zpi_sb_puts(b, "\"");
    for (; *s; s++) {
        if (*s == '"')
            zpi_sb_puts(b, "\"\"");
        else
            zpi_sb_putn(b, s, 1);
    }
    zpi_sb_puts(b, "\"");
}

/* ------------------------------------------------------------ human units */

/* v scaled by powers of 1000 with a unit prefix ("", k, M, G, T, P, E):
 * 3 significant digits ("17.2 M", "512", "1.30 G"). */
static void scaled(char *buf, size_t cap, double v, const char *unit, const char *space)
{
    static const char *const pre[] = {"", "k", "M", "G", "T", "P", "E"};
    if (!isfinite(v)) {
        zpi_fmt(buf, cap, "-");
        return;
    }
    double a = fabs(v);
    int i = 0;
    while (a >= 999.5 && i < 6) {
        a /= 1000;
        v /= 1000;
        i++;
    }
    const char *fmt = a >= 99.95 || (i == 0 && v == floor(v)) ? "%.0f%s%s%s"
                      : a >= 9.995                              ? "%.1f%s%s%s"
                                                                : "%.2f%s%s%s";
    int sep = *pre[i] || *unit;
    zpi_fmt(buf, cap, fmt, v, sep ? space : "", pre[i], unit);
}

void zpi_mpi_human_count(char *buf, size_t cap, double v) { scaled(buf, cap, v, "", " "); }

void zpi_mpi_human_bytes(char *buf, size_t cap, double v) { scaled(buf, cap, v, "B", " "); }

void zpi_mpi_human_rate(char *buf, size_t cap, double v, const char *unit)
{
    char n[48];
    scaled(n, sizeof n, v, "", " ");
    zpi_fmt(buf, cap, "%s %s/s", n, unit);
}

void zpi_mpi_human_seconds(char *buf, size_t cap, double s)
{
    if (!isfinite(s)) {
        zpi_fmt(buf, cap, "-");
        return;
    }
    double a = fabs(s);
    if (a == 0)
        zpi_fmt(buf, cap, "0 s");
    else if (a < 1e-6)
        zpi_fmt(buf, cap, "%.0f ns", s * 1e9);
    else if (a < 1e-3)
        zpi_fmt(buf, cap, a < 9.995e-6 ? "%.2f us" : a < 99.95e-6 ? "%.1f us" : "%.0f us",
                    s * 1e6);
    else if (a < 1)
        zpi_fmt(buf, cap, a < 9.995e-3 ? "%.2f ms" : a < 99.95e-3 ? "%.1f ms" : "%.0f ms",
                    s * 1e3);
    else if (a < 600)
        zpi_fmt(buf, cap, a < 9.995 ? "%.2f s" : a < 99.95 ? "%.1f s" : "%.0f s", s);
    else if (a < 36000)
        zpi_fmt(buf, cap, "%.1f min", s / 60);
    else if (a < 48 * 3600.0)
        zpi_fmt(buf, cap, "%.1f h", s / 3600);
    else if (a < 1e6 * 86400)
        zpi_fmt(buf, cap, "%.1f d", s / 86400);
    else /* absurd: keep it short */
        zpi_fmt(buf, cap, "%.3g d", s / 86400);
}

void zpi_mpi_human_percent(char *buf, size_t cap, double fraction)
{
    if (!isfinite(fraction))
        zpi_fmt(buf, cap, "-");
    else
        zpi_fmt(buf, cap, "%.1f%%", fraction * 100);
}

/* ------------------------------------------------------------ agreed settings */

int zpi_mpi_info_copy(zpi_mpi_info *dst, const zpi_mpi_info *src)
{
    *dst = *src;
    dst->extra = src->extra ? strdup(src->extra) : NULL;
    return src->extra && !dst->extra ? -1 : 0;
}

void zpi_mpi_info_free(zpi_mpi_info *i)
{
    free(i->extra);
    i->extra = NULL;
}

/* The buffers of cross-rank balance (mpi_balance.c), freed with the handle. */
void zpi_mpi_balance_free(zp_mpi *m)
{
    zpi_mpi_bal *b = &m->bal;
    free(b->out);
    free(b->tokens);
    free(b->segment_ids);
    free(b->position_ids);
    free(b->doc_counts);
    free(b->cu_seqlens);
    free(b->loss_mask);
    free(b->samples);
    free(b->sample_rows);
    b->out = NULL;
    b->tokens = b->segment_ids = b->position_ids = b->doc_counts = b->cu_seqlens = NULL;
    b->loss_mask = NULL;
    b->samples = NULL;
    b->sample_rows = NULL;
}
