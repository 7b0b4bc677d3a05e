/* op_map.c - the map_transform operator: the user's callback on each live
 * record of a chunk (the zp_record handle is record.c). */
#include "ops/operators.h"

void zpi_op_map(const zpi_op_env *env, const zpi_op *op, zpi_worker *w, zpi_chunk *c)
{
    zpi_err err;
    if (!zpi_worker_json(w, c))
        return;
    if (op->batch_fn) {
        zpi_record_map_batch(env, op, w, c);
        return;
    }
    for (size_t i = 0; i < c->n && c->err.code == ZP_OK; i++) {
        if (c->recs[i].flags & (ZPI_REC_SKIP | ZPI_REC_DROP))
            continue;
        zpi_act_item(&w->act, ZP_TASK_RUNNING, c->samples[i].shard, c->samples[i].record);
        zp_status s = zpi_record_map(env, op, w, c, i, &err);
        if (s != ZP_OK)
            zpi_op_bad_record(env, c, i, s, err.msg);
    }
}
