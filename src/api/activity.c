/*
 * activity.c - the public calls of the stall watchdog on a pipeline
 * (zephon/watchdog.h): the picture now, the hook, the count. The watchdog
 * itself is watchdog.c; pipeline.c arms it.
 */
#include "api/pipeline_internal.h"

zp_status zp_pipeline_activity(zp_pipeline *p, zp_watchdog_report *out)
{
    if (!p || !out)
        return ZP_ERR_INVALID;
    zpi_watchdog_fill(zpi_pipeline_wd(p), 0.0, out);
    return ZP_OK;
}

zp_status zp_pipeline_on_watchdog(zp_pipeline *p, zp_watchdog_fn fn, void *user)
{
    if (!p)
        return ZP_ERR_INVALID;
    zpi_watchdog *wd = zpi_pipeline_wd(p);
    wd->fn = fn;
    wd->user = user;
    return ZP_OK;
}

zp_watchdog_fn zp_pipeline_watchdog_hook(const zp_pipeline *p)
{
    return p ? zpi_pipeline_wd((zp_pipeline *)p)->fn : NULL;
}

uint64_t zp_pipeline_watchdog_fired(const zp_pipeline *p)
{
    return p ? zpi_pipeline_wd((zp_pipeline *)p)->fired : 0;
}
