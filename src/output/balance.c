/*
 * balance.c - attention-cost balance of packed rows (zephon/balance.h).
 *
 * Greedy longest-first with a room limit per group (each microbatch has
 * exactly `per` rows), then a bounded local search that swaps one row of
 * the costliest group with one of another group. Nothing depends on
 * anything but the costs, so every rank of a job computes the same
 * assignment from the same gathered costs.
 */
#include <stdlib.h>
#include <string.h>

#include "output/balance.h"

uint64_t zp_row_cost(const int32_t *sg, size_t inputs)
{
    uint64_t cost = 0;
    for (size_t c = 0; c < inputs;) {
        size_t e = c + 1;
        while (e < inputs && sg[e] == sg[c])
            e++;
        if (sg[c] >= 0)
            cost += (uint64_t)(e - c) * (uint64_t)(e - c);
        c = e;
    }
    return cost;
}

void zp_batch_row_costs(const zp_batch *b, uint64_t *cost)
{
    if (!b || !cost)
        return;
    for (size_t r = 0; r < b->rows; r++)
        cost[r] = b->segment_ids && b->cols > 1
                      ? zp_row_cost(b->segment_ids + r * b->cols, b->cols - 1)
                      : 0;
}

/* cost descending, then row ascending: a total order, so qsort's result is
 * the same everywhere */
static int cmp_cost(const void *pa, const void *pb)
{
    const by_cost *a = pa, *b = pb;
    if (a->cost != b->cost)
        return a->cost > b->cost ? -1 : 1;
    return a->row < b->row ? -1 : a->row > b->row;
}

/* The best swap of a row of group g with a row of another group: the one
 * that leaves the larger of the two sums smallest (ties: the first found,
 * in group then row order). 0 when none lowers g's sum below where it is. */
static int best_swap(const uint64_t *cost, const uint32_t *mem, const uint64_t *sum,
                     size_t groups, size_t per, size_t g, size_t *ia, size_t *ib)
{
    uint64_t best = sum[g];
    int found = 0;
    for (size_t h = 0; h < groups; h++) {
        if (h == g || sum[h] >= sum[g])
            continue;
        for (size_t i = 0; i < per; i++) {
            uint64_t ca = cost[mem[g * per + i]];
            for (size_t j = 0; j < per; j++) {
                uint64_t cb = cost[mem[h * per + j]];
                if (cb >= ca)
                    continue;
                uint64_t d = ca - cb, ng = sum[g] - d, nh = sum[h] + d;
                uint64_t worst = ng > nh ? ng : nh;
                if (worst < best) {
                    best = worst;
                    *ia = g * per + i;
                    *ib = h * per + j;
                    found = 1;
                }
            }
        }
    }
    return found;
}

void zpi_balance_assign(const uint64_t *cost, size_t groups, size_t per, uint32_t *group,
                        uint64_t *sum, zpi_balance_ws *ws)
{
    const size_t n = groups * per;
    by_cost *ord = ws->ord;
    uint32_t *mem = ws->mem; /* group g's rows: mem[g per ..] */
    size_t *cnt = ws->cnt;
    memset(sum, 0, groups * sizeof *sum);
    memset(cnt, 0, groups * sizeof *cnt);
    for (size_t i = 0; i < n; i++)
        ord[i] = (by_cost){.cost = cost[i], .row = (uint32_t)i};
    qsort(ord, n, sizeof *ord, cmp_cost);
    for (size_t i = 0; i < n; i++) {
        size_t g = SIZE_MAX;
        for (size_t h = 0; h < groups; h++)
            if (cnt[h] < per && (g == SIZE_MAX || sum[h] < sum[g]))
                g = h;
        mem[g * per + cnt[g]++] = ord[i].row;
        sum[g] += ord[i].cost;
    }
    /* local search: bounded, each swap strictly lowers the costliest
     * group's sum (or the number of groups tied at the top) */
    const size_t max_swaps = n < 64 ? n : 64;
    for (size_t it = 0; it < max_swaps; it++) {
        size_t g = 0;
        for (size_t h = 1; h < groups; h++)
            if (sum[h] > sum[g])
                g = h;
        size_t ia, ib;
        if (!best_swap(cost, mem, sum, groups, per, g, &ia, &ib))
            break;
        uint64_t d = cost[mem[ia]] - cost[mem[ib]];
        sum[ia / per] -= d;
        sum[ib / per] += d;
        uint32_t t = mem[ia];
        mem[ia] = mem[ib];
        mem[ib] = t;
    }
    for (size_t i = 0; i < n; i++)
        group[mem[i]] = (uint32_t)(i / per);
}

int zpi_balance_ws_init(zpi_balance_ws *ws, size_t groups, size_t per)
{
    memset(ws, 0, sizeof *ws);
    const size_t n = groups * per;
    ws->ord = malloc(n * sizeof *ws->ord);
    ws->mem = malloc(n * sizeof *ws->mem);
    ws->cnt = malloc(groups * sizeof *ws->cnt);
    if (!ws->ord || !ws->mem || !ws->cnt) {
        zpi_balance_ws_fini(ws);
        return -1;
    }
    return 0;
}

void zpi_balance_ws_fini(zpi_balance_ws *ws)
{
    free(ws->ord);
    free(ws->mem);
    free(ws->cnt);
    memset(ws, 0, sizeof *ws);
}

zp_status zp_balance_rows(const uint64_t *cost, size_t groups, size_t per, uint32_t *group,
                          uint64_t *sums)
{
    if (!cost || !group || groups == 0 || per == 0 || groups > UINT32_MAX / per)
        return ZP_ERR_INVALID;
    zpi_balance_ws ws;
    uint64_t *sum = calloc(groups, sizeof *sum);
    if (!sum || zpi_balance_ws_init(&ws, groups, per) != 0) {
        free(sum);
        return ZP_ERR_NOMEM;
    }
    zpi_balance_assign(cost, groups, per, group, sum, &ws);
    if (sums)
        memcpy(sums, sum, groups * sizeof *sum);
    zpi_balance_ws_fini(&ws);
    free(sum);
    return ZP_OK;
}
