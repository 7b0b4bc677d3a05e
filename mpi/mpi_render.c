/* mpi_render.c - the cluster-wide fetch-timing report rendered in one
 * format (zp_cluster_report_render) or written as its five files
 * (zp_cluster_report_write). The formats are mpi_render_text.c,
 * mpi_render_data.c (JSON, CSV) and mpi_render_html.c; what they share is
 * mpi_render_common.c. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mpi_internal.h"

/* ------------------------------------------------------------ entry points */

typedef void (*render_fn)(const zp_cluster_report *r, zpi_sbuf *b);

/* Render into a new string: *out malloc'd (len bytes, NUL-terminated). */
static zp_status render_with(render_fn fn, const zp_cluster_report *r, char **out, size_t *len)
{
    zpi_sbuf b = {0};
    fn(r, &b);
    if (b.oom || !b.p) {
        free(b.p);
        return ZP_ERR_NOMEM;
    }
    *out = b.p;
    if (len)
        *len = b.len;
    return ZP_OK;
}

zp_status zp_cluster_report_render(const zp_cluster_report *r, zp_mpi_format fmt, char **out, size_t *len)
{
    static const render_fn by_format[] = {
        [ZP_MPI_TEXT] = zpi_mpi_render_text,
        [ZP_MPI_JSON] = zpi_mpi_render_json,
        [ZP_MPI_CSV] = zpi_mpi_render_csv,
        [ZP_MPI_HTML] = zpi_mpi_render_html,
    };
    if (!r || !out)
        return ZP_ERR_INVALID;
    *out = NULL;
    if ((unsigned)fmt >= sizeof by_format / sizeof by_format[0])
        return ZP_ERR_INVALID;
    return render_with(by_format[fmt], r, out, len);
}

static zp_status write_file(const char *dir, const char *name, const char *data, size_t len,
                            char *errbuf, size_t errlen)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *path = malloc(n);
    if (!path)
        return ZP_ERR_NOMEM;
    zpi_fmt(path, n, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(data, 1, len, f) == len;
    int e = errno;
    if (f && fclose(f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (!ok && errbuf)
        zpi_fmt(errbuf, errlen, "cannot write '%s': %s", path, strerror(e));
    free(path);
    return ok ? ZP_OK : ZP_ERR_IO;
}

zp_status zp_cluster_report_write(const zp_cluster_report *r, const char *dir, char *errbuf, size_t errlen)
{
    if (errbuf && errlen)
        errbuf[0] = '\0';
    if (!r || !dir || !*dir) {
        if (errbuf)
            zpi_fmt(errbuf, errlen, "zp_cluster_report_write: %s",
                        !r ? "no report (NULL)" : "no folder given");
        return ZP_ERR_INVALID;
    }
    if (zpi_mkdir_p(dir, 0777) != 0) {
        if (errbuf)
            zpi_fmt(errbuf, errlen, "cannot create '%s': %s", dir, strerror(errno));
        return ZP_ERR_IO;
    }
    static const struct {
        const char *name;
        render_fn fn;
    } files[] = {{"report.txt", zpi_mpi_render_text},
                 {"report.json", zpi_mpi_render_json},
                 {"report.csv", zpi_mpi_render_csv},
                 {"report.html", zpi_mpi_render_html},
                 {"windows.csv", zpi_mpi_render_windows_csv}};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *s = NULL;
        size_t len = 0;
        zp_status st = render_with(files[i].fn, r, &s, &len);
        if (st != ZP_OK) {
            if (errbuf)
                zpi_fmt(errbuf, errlen, "cannot render %s: %s", files[i].name, zp_status_str(st));
            return st;
        }
        st = write_file(dir, files[i].name, s, len, errbuf, errlen);
        free(s);
        if (st != ZP_OK)
            return st;
    }
    if (zp_cluster_report_coverage(r, NULL)) { /* the certificate's own file */
        char *s = NULL;
        size_t len = 0;
        zp_status st = render_with(zpi_mpi_coverage_csv, r, &s, &len);
        if (st == ZP_OK)
            st = write_file(dir, "coverage.csv", s, len, errbuf, errlen);
        else if (errbuf)
            zpi_fmt(errbuf, errlen, "cannot render coverage.csv: %s", zp_status_str(st));
        free(s);
        return st;
    }
    return ZP_OK;
}
