/* operators.c - what the operator bodies share: dispatch, worker
 * resources, the bad-record policy, logging (operators.h). */
#include <stdarg.h>

#include "ops/operators.h"

void zpi_op_run(const zpi_op_env *env, const zpi_op *op, zpi_worker *w, zpi_obs_thread *ot,
                zpi_chunk *c)
{
    switch (op->kind) {
    case ZPI_OP_FETCH: zpi_op_fetch(env, w, ot, c); break;
    case ZPI_OP_MAP: zpi_op_map(env, op, w, c); break;
    case ZPI_OP_TOKENIZE: zpi_op_tokenize(env, w, c); break;
    }
}

void zpi_worker_fini(zpi_worker *w)
{
    zpi_json_destroy(w->json);
    zp_encoder_destroy(w->enc);
    zpi_record_scratch_free(w);
    w->json = NULL;
    w->enc = NULL;
}

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
