/*
 * watchdog.h - the stall watchdog's state and its firing (private;
 * zephon/watchdog.h is the public side). pipeline.c holds a zpi_watchdog
 * and arms it once the engine runs; activity.c implements the public calls
 * on a pipeline with it. It knows the output queue and the engine, not the
 * pipeline handle.
 */
#ifndef ZP_API_WATCHDOG_H
#define ZP_API_WATCHDOG_H

#include "engine/engine.h"
#include "output/outq.h"
#include "zephon/watchdog.h"

typedef struct zpi_watchdog {
    double seconds;          /* 0: off */
    zp_log_fn log;
    void *log_user;
    zp_watchdog_fn fn;       /* zp_pipeline_on_watchdog */
    void *user;
    uint64_t fired;
    zpi_outq *q;             /* set by zpi_watchdog_arm; NULL before */
    zpi_engine *engine;
    zp_watchdog_report report; /* the last one (the consumer's thread) */
} zpi_watchdog;

/* Arms wd on q once engine e runs: after each `seconds` of a wait in
 * zpi_outq_next, the picture is logged through log and given to the hook.
 * seconds 0: only the picture (zpi_watchdog_fill) is available. */
void zpi_watchdog_arm(zpi_watchdog *wd, zpi_outq *q, zpi_engine *e, double seconds, zp_log_fn log,
                      void *log_user);
/* The picture now (waited: the consumer's wait so far, 0 when not waiting). */
void zpi_watchdog_fill(const zpi_watchdog *wd, double waited, zp_watchdog_report *r);

#endif
