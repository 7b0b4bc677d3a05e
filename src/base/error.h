/*
 * error.h - the one error mechanism of every handle (private).
 *
 * Every handle (dataset, worksource, pipeline, tokenizer, ...) embeds one
 * zpi_err and its zp_<type>_errmsg() returns zpi_err_msg(&h->err). A failing
 * function sets the code and the message in one call and returns the code:
 *
 *     if (cfg->world_size == 0)
 *         return zpi_err_set(&ws->err, ZP_ERR_INVALID,
 *                            "world_size = %u: must be at least 1", cfg->world_size);
 *     ZPI_FORWARD_IF_ERR(load(ds, i));
 *
 * Messages name the setting or the file and the value (never an empty
 * colon). A message is kept until the next failing call on the handle;
 * successful calls do not clear it (as errno, and SQLite's errmsg after an
 * error), so it can be read after the status was returned.
 *
 * Failed create: zp_<type>_create() on failure stores in *out a handle that
 * holds only the error (NULL only when even that could not be allocated);
 * the caller reads zp_<type>_errmsg() and releases it with
 * zp_<type>_destroy() (SQLite's sqlite3_open convention, docs/api.md).
 *
 * Thread safety: a zpi_err belongs to its handle; writers are the calls
 * documented as writing the handle. Worker threads keep their own zpi_err
 * (one per chunk or task) and the owner copies the first one over.
 */
#ifndef ZP_ERROR_H
#define ZP_ERROR_H

#include <stdarg.h>
#include <stddef.h>

#include "zephon/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZPI_ERRMAX 1024

typedef struct zpi_err {
    zp_status code;
    char msg[ZPI_ERRMAX];
} zpi_err;

/* Sets code and message (printf-style, truncated to fit) and returns code.
 * The arguments may quote the old message (e->msg). e may be NULL. */
zp_status zpi_err_set(zpi_err *e, zp_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
zp_status zpi_err_vset(zpi_err *e, zp_status code, const char *fmt, va_list ap);
/* Copies src into dst (dst may be NULL) and returns src's code (ZP_OK for a
 * NULL src). */
zp_status zpi_err_copy(zpi_err *dst, const zpi_err *src);
/* Prefixes the message with "what: " (e.g. a file name), keeping the code;
 * an empty "what" leaves the message as it is. */
zp_status zpi_err_prefix(zpi_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void zpi_err_clear(zpi_err *e);
/* The message; never NULL: "" when no error was set, the status name when a
 * code was set without a message. */
const char *zpi_err_msg(const zpi_err *e);

#define ZPI_RETURN_ERR_IF(cond, e, code, ...)                                                      \
    do {                                                                                           \
        if (cond)                                                                                  \
            return zpi_err_set((e), (code), __VA_ARGS__);                                          \
    } while (0)

#define ZPI_FORWARD_IF_ERR(expr)                                                                   \
    do {                                                                                           \
        zp_status zpi_s_ = (expr);                                                                 \
        if (zpi_s_ != ZP_OK)                                                                       \
            return zpi_s_;                                                                         \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
