/* error.c - the one error mechanism of every handle (error.h). */
#include "base/error.h"

#include <stdio.h>
#include <string.h>

zp_status zpi_err_vset(zpi_err *e, zp_status code, const char *fmt, va_list ap)
{
    if (!e)
        return code;
    /* Formatted aside first: the arguments may point into e->msg (a new
     * message that quotes the old one), and vsnprintf's source and
     * destination must not overlap. */
    char m[ZPI_ERRMAX];
    if (!fmt || vsnprintf(m, sizeof m, fmt, ap) < 0)
        m[0] = '\0';
    e->code = code;
    memcpy(e->msg, m, sizeof m);
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
    if (!src)
        return ZP_OK;
    if (dst && dst != src)
        memcpy(dst, src, sizeof *dst);
    return src->code;
}

zp_status zpi_err_prefix(zpi_err *e, const char *fmt, ...)
{
    if (!e)
        return ZP_OK;
    char head[ZPI_ERRMAX], old[ZPI_ERRMAX];
    va_list ap;
    va_start(ap, fmt);
    if (vsnprintf(head, sizeof head, fmt, ap) < 0)
        head[0] = '\0';
    va_end(ap);
    if (!head[0]) /* no empty "what": the message stays as it was */
        return e->code;
    memcpy(old, e->msg, sizeof old);
    if (snprintf(e->msg, sizeof e->msg, "%s: %s", head, old[0] ? old : zp_status_str(e->code)) < 0)
        memcpy(e->msg, old, sizeof old);
    return e->code;
}

void zpi_err_clear(zpi_err *e)
{
    if (!e)
        return;
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
