/*
 * plan.c - a rank's plan for one epoch (plan.h).
 */
#include "plan/plan.h"

const zpi_epoch_plan *zpi_plan_find(const zpi_epoch_plan *plans, size_t n, uint32_t epoch)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (plans[mid].epoch < epoch)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && plans[lo].epoch == epoch ? &plans[lo] : NULL;
}

uint64_t zpi_plan_total(const zpi_epoch_plan *p)
{
    uint64_t t = 0;
    for (size_t i = 0; i < p->n; i++)
        t += p->spans[i].count;
    return t;
}

size_t zpi_plan_locate(const zpi_epoch_plan *p, const uint64_t *pre, uint64_t position,
                       uint64_t *at)
{
    size_t k = 0;
    uint64_t before = 0;
    if (pre) {
        if (position >= pre[p->n])
            return p->n;
        /* the last span whose first position is at most `position` */
        size_t lo = 0, hi = p->n;
        while (hi - lo > 1) {
            size_t mid = lo + (hi - lo) / 2;
            if (pre[mid] <= position)
                lo = mid;
            else
                hi = mid;
        }
        k = lo;
        before = pre[k];
    } else {
        while (k < p->n && position - before >= p->spans[k].count)
            before += p->spans[k++].count;
        if (k == p->n)
            return k;
    }
    *at = p->spans[k].start + (position - before);
    return k;
}
