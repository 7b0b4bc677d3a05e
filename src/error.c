/* error.c - the one error mechanism of every handle (error.h). */
#include "error.h"

#include <stdio.h>
#include <string.h>

zp_status zpi_err_vset(zpi_err *e, zp_status code, const char *fmt, va_list ap)
{
    if (!e)
        return code;
    e->code = code;
    if (!fmt) {
        e->msg[0] = '\0';
        return code;
    }
    if (vsnprintf(e->msg, sizeof e->msg, fmt, ap) < 0)
        e->msg[0] = '\0';
    return code;
}

zp_status zpi_err_set(zpi_err *e, zp_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zpi_err_vset(e, code, fmt, ap);
    va_end(ap);
    return code;
}

zp_status zpi_err_copy(zpi_err *dst, const zpi_err *src)
{
    if (dst && dst != src)
        memcpy(dst, src, sizeof *dst);
    return src->code;
}

zp_status zpi_err_prefix(zpi_err *e, const char *fmt, ...)
{
    char head[ZPI_ERRMAX], old[ZPI_ERRMAX];
    va_list ap;
    va_start(ap, fmt);
    if (vsnprintf(head, sizeof head, fmt, ap) < 0)
        head[0] = '\0';
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    snprintf(e->msg, sizeof e->msg, "%s: %s", head, old[0] ? old : zp_status_str(e->code));
    return e->code;
}

void zpi_err_clear(zpi_err *e)
{
    e->code = ZP_OK;
    e->msg[0] = '\0';
}

const char *zpi_err_msg(const zpi_err *e)
{
    if (!e)
        return "";
    if (e->msg[0])
        return e->msg;
    return e->code == ZP_OK ? "" : zp_status_str(e->code);
}
