/*
 * hdf5_lock.c - the HDF5 lock, its statistics, and HDF5's error message
 * (hdf5_util.h).
 */
#include "formats/hdf5_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <hdf5.h>

#include "base/util.h"

/* The HDF5 lock: see hdf5_util.h. Process-wide by necessity (HDF5 is). */
static pthread_mutex_t g_h5_mu = PTHREAD_MUTEX_INITIALIZER;
/* HDF5 settings saved at lock and restored at unlock (guarded by g_h5_mu). */
static H5E_auto2_t g_saved_efunc;
static void *g_saved_edata;
static unsigned g_saved_plugins;
static atomic_uint_fast64_t g_h5_acquired, g_h5_wait_ns;

void zpi_h5_lock(uint64_t *wait_ns)
{
    uint64_t waited = 0;
    if (pthread_mutex_trylock(&g_h5_mu) != 0) {
        uint64_t t0 = zpi_now_ns();
        pthread_mutex_lock(&g_h5_mu);
        waited = zpi_now_ns() - t0;
    }
    atomic_fetch_add_explicit(&g_h5_acquired, 1, memory_order_relaxed);
    if (waited)
        atomic_fetch_add_explicit(&g_h5_wait_ns, waited, memory_order_relaxed);
    if (wait_ns)
        *wait_ns += waited;
    g_saved_efunc = NULL;
    g_saved_edata = NULL;
    H5Eget_auto2(H5E_DEFAULT, &g_saved_efunc, &g_saved_edata);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    g_saved_plugins = 0;
    H5PLget_loading_state(&g_saved_plugins);
    H5PLset_loading_state(0);
}

void zpi_h5_unlock(void)
{
    H5PLset_loading_state(g_saved_plugins);
    H5Eset_auto2(H5E_DEFAULT, g_saved_efunc, g_saved_edata);
    pthread_mutex_unlock(&g_h5_mu);
}

void zpi_h5_lock_stats(uint64_t *acquired, uint64_t *wait_ns)
{
    if (acquired)
        *acquired = atomic_load_explicit(&g_h5_acquired, memory_order_relaxed);
    if (wait_ns)
        *wait_ns = atomic_load_explicit(&g_h5_wait_ns, memory_order_relaxed);
}

typedef struct errwalk {
    char func[64];
    char desc[192];
    int seen;
} errwalk;

/* Walking upward, the first entry is the innermost: the most specific
 * cause ("addr overflow", "can't open file"). */
static herr_t errwalk_cb(unsigned n, const H5E_error2_t *e, void *data)
{
    errwalk *w = data;
    if (w->seen)
        return 0;
    w->seen = 1;
    zpi_fmt(w->func, sizeof w->func, "%s", e->func_name ? e->func_name : "?");
    zpi_fmt(w->desc, sizeof w->desc, "%s", e->desc ? e->desc : "?");
    (void)n;
    return 0;
}

void zpi_h5_errmsg(char *buf, size_t cap)
{
    errwalk w = {"", "", 0};
    /* H5Ewalk2 does not clear the stack it walks */
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, errwalk_cb, &w);
    if (!w.seen)
        zpi_fmt(buf, cap, "(no HDF5 message)");
    else
        zpi_fmt(buf, cap, "%s(): %s", w.func, w.desc);
    for (char *p = buf; *p; p++) /* HDF5's descriptions may hold newlines */
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}
