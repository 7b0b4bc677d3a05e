/*
 * coverage.c - the order-independent digest of delivered samples
 * (zephon/coverage.h): the mix, the fold and the merge.
 */
#include "zephon/coverage.h"

#include "base/util.h"

uint64_t zp_coverage_mix(uint64_t global_id, uint64_t pass)
{
    /* for a fixed pass a bijection of global_id; the pass moves the whole
     * map (the constant keeps pass 0 away from the identity key) */
    return zpi_hash2(global_id, pass);
}

void zp_coverage_fold(zp_coverage *c, uint64_t global_id, uint64_t pass)
{
    uint64_t m = zp_coverage_mix(global_id, pass);
    c->count++;
    c->sum += m;
    c->xr ^= m;
}

void zp_coverage_merge(zp_coverage *a, const zp_coverage *b)
{
    a->count += b->count;
    a->sum += b->sum;
    a->xr ^= b->xr;
}

int zp_coverage_equal(const zp_coverage *a, const zp_coverage *b)
{
    return a->count == b->count && a->sum == b->sum && a->xr == b->xr;
}
