/*
 * balance.h - attention-cost balance (private): zp_balance_rows with its
 * scratch given, for the packer, which must not fail halfway through a
 * window.
 */
#ifndef ZP_OUTPUT_BALANCE_H
#define ZP_OUTPUT_BALANCE_H

#include <stddef.h>
#include <stdint.h>

#include "zephon/balance.h"

typedef struct by_cost {
    uint64_t cost;
    uint32_t row;
} by_cost;

/* Scratch for up to groups x per rows. */
typedef struct zpi_balance_ws {
    by_cost *ord;
    uint32_t *mem;
    size_t *cnt;
} zpi_balance_ws;

/* 0, or -1 when memory ran out (ws is then empty). */
int zpi_balance_ws_init(zpi_balance_ws *ws, size_t groups, size_t per);
void zpi_balance_ws_fini(zpi_balance_ws *ws);
/* zp_balance_rows on groups x per rows (within the sizes ws was made for);
 * sum: groups entries, always filled. Cannot fail. */
void zpi_balance_assign(const uint64_t *cost, size_t groups, size_t per, uint32_t *group,
                        uint64_t *sum, zpi_balance_ws *ws);

#endif
