/*
 * next_use.c - this rank's known order of shards (next_use.h has the
 * model), computed from a private copy of the pipeline's worksource.
 */
#include "engine/next_use.h"

#include <pthread.h>
#include <stdlib.h>

#include "plan/worksource_internal.h"

#define NU_UNKNOWN UINT64_MAX
#define NU_HORIZON ZPI_NEXT_USE_HORIZON

struct zpi_next_use {
    pthread_mutex_t mu;
    zp_worksource *ws;      /* private copy */
    uint32_t end_epoch;     /* the first epoch not read (UINT32_MAX: none) */
    size_t n;               /* shards */
    uint64_t *nu;           /* per shard: next global position, NU_UNKNOWN */
    uint32_t *seq;          /* the horizon: shard of position from + k */
    uint32_t *next;         /* next k of the same shard, UINT32_MAX: none */
    uint64_t len;           /* positions in the horizon */
    uint64_t from;          /* global position the table was computed from */
    int valid;
    uint64_t pos;           /* consumer's global position */
};

static void compute_locked(zpi_next_use *u, uint64_t from)
{
    for (size_t i = 0; i < u->n; i++)
        u->nu[i] = NU_UNKNOWN;
    /* the shard of each position of the horizon, then for each position the
     * next one of the same shard (scanning backwards) */
    uint64_t k = 0;
    zp_sample s;
    for (; k < NU_HORIZON; k++) {
        uint32_t epoch;
        uint64_t position;
        if (!zpi_worksource_unlinear(u->ws, from + k, &epoch, &position) ||
            epoch == UINT32_MAX || epoch >= u->end_epoch ||
            zp_worksource_sample(u->ws, epoch, position, &s) != ZP_OK)
            break;
        u->seq[k] = s.shard;
    }
    u->len = k;
    while (k-- > 0) {
        uint32_t sh = u->seq[k];
        if (sh >= u->n) {
            u->next[k] = UINT32_MAX;
            continue;
        }
        u->next[k] = u->nu[sh] == NU_UNKNOWN ? UINT32_MAX : (uint32_t)(u->nu[sh] - from);
        u->nu[sh] = from + k;
    }
    u->from = from;
    u->valid = 1;
}

uint64_t zpi_next_use_of(void *user, size_t shard)
{
    zpi_next_use *u = user;
    if (!u || shard >= u->n)
        return NU_UNKNOWN;
    pthread_mutex_lock(&u->mu);
    uint64_t v = NU_UNKNOWN;
    if (u->valid) {
        /* a use already passed: follow the shard's chain to its next one */
        v = u->nu[shard];
        while (v != NU_UNKNOWN && v < u->pos) {
            uint32_t nx = u->next[v - u->from];
            v = nx == UINT32_MAX ? NU_UNKNOWN : u->from + nx;
        }
        u->nu[shard] = v;
    }
    pthread_mutex_unlock(&u->mu);
    return v;
}

int zpi_next_use_locate(void *user, uint64_t g, uint32_t *epoch, uint64_t *position)
{
    zpi_next_use *u = user;
    if (!u || g == NU_UNKNOWN)
        return 0;
    pthread_mutex_lock(&u->mu);
    int ok = zpi_worksource_unlinear(u->ws, g, epoch, position) && *epoch != UINT32_MAX;
    pthread_mutex_unlock(&u->mu);
    return ok;
}

void zpi_next_use_set_position(zpi_next_use *u, uint32_t epoch, uint64_t position)
{
    if (!u)
        return;
    uint64_t g = zpi_worksource_linear(u->ws, epoch, position);
    pthread_mutex_lock(&u->mu);
    u->pos = g;
    /* recomputed when half the horizon has been consumed (or on a jump back) */
    if (!u->valid || g < u->from || g - u->from >= NU_HORIZON / 2)
        compute_locked(u, g);
    pthread_mutex_unlock(&u->mu);
}

/* The same stream as ws's, its plans (an elastic resume) too. */
static zp_status copy_worksource(const zp_worksource *ws, zp_worksource **out, zpi_err *err)
{
    zp_worksource_config wc = *zp_worksource_get_config(ws);
    zp_status st = zp_worksource_create(zp_worksource_dataset(ws), &wc, out);
    if (st != ZP_OK)
        return zpi_err_set(err, st, "shard order: %s", zp_worksource_errmsg(*out));
    size_t np = zpi_worksource_num_plans(ws);
    zpi_epoch_plan *pl = np ? calloc(np, sizeof *pl) : NULL;
    for (size_t i = 0; pl && i < np; i++)
        zpi_worksource_plan(ws, i, &pl[i]);
    st = np && !pl ? ZP_ERR_NOMEM : zpi_worksource_set_plans(*out, pl, np);
    free(pl);
    if (st != ZP_OK)
        return zpi_err_set(err, st, "shard order: %s", zp_worksource_errmsg(*out));
    return ZP_OK;
}

zp_status zpi_next_use_create(const zp_worksource *ws, uint32_t end_epoch, zpi_next_use **out,
                              zpi_err *err)
{
    *out = NULL;
    zpi_next_use *u = calloc(1, sizeof *u);
    if (!u)
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for the shard order");
    u->end_epoch = end_epoch;
    pthread_mutex_init(&u->mu, NULL);
    zp_status st = copy_worksource(ws, &u->ws, err);
    if (st != ZP_OK || zp_worksource_samples_per_rank(u->ws) == 0) {
        zpi_next_use_destroy(u);
        return st;
    }
    u->n = zp_dataset_num_shards(zp_worksource_dataset(u->ws));
    u->nu = malloc((u->n ? u->n : 1) * sizeof *u->nu);
    u->seq = malloc(NU_HORIZON * sizeof *u->seq);
    u->next = malloc(NU_HORIZON * sizeof *u->next);
    if (!u->nu || !u->seq || !u->next) {
        zpi_next_use_destroy(u);
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for the shard order");
    }
    *out = u;
    return ZP_OK;
}

void zpi_next_use_destroy(zpi_next_use *u)
{
    if (!u)
        return;
    zp_worksource_destroy(u->ws);
    free(u->nu);
    free(u->seq);
    free(u->next);
    pthread_mutex_destroy(&u->mu);
    free(u);
}
