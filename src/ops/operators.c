/* operators.c - what the operator bodies share: the worker's parser, the
 * bad-record policy, logging (operators.h). The engine dispatches to the
 * bodies and releases the workers. */
#include <stdarg.h>

#include "ops/operators.h"

zpi_json *zpi_worker_json(zpi_worker *w, zpi_chunk *c)
{
    if (!w->json && zpi_json_create(&w->json) != ZP_OK) {
        zpi_chunk_fail(c, ZP_ERR_NOMEM, "cannot create a JSON parser");
        return NULL;
    }
    return w->json;
}

void zpi_op_log(const zpi_op_env *env, zp_log_level lvl, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zpi_vlog(env->log, env->log_user, lvl, fmt, ap);
    va_end(ap);
}

void zpi_op_bad_record(const zpi_op_env *env, zpi_chunk *c, size_t i, zp_status st,
                       const char *msg)
{
    if (env->on_bad_record == ZP_BAD_RECORD_SKIP && st != ZP_ERR_NOMEM) {
        c->recs[i].flags |= ZPI_REC_SKIP;
        if (c->skipped++ == 0)
            zpi_err_set(&c->first_skip, st, "%s", msg);
        zpi_op_log(env, ZP_LOG_WARN, "skipped bad record: %s", msg);
    } else {
        zpi_chunk_fail(c, st, "%s", msg);
    }
}
