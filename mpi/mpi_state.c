/* mpi_state.c - the job's state under MPI (zp_mpi_state_save): every rank
 * saves its pipeline's state, rank 0 gathers them (MPI_Gather of the
 * lengths, MPI_Gatherv of the bytes), merges them into one job state after
 * checking that they agree (zp_state_merge), and writes it atomically; the
 * outcome is agreed, so every rank returns the same status and message.
 *
 * Ownership: the states are the callers' pipelines'; the bytes gathered are
 * freed before return. Thread safety: the thread that created the zp_mpi. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fsio.h"
#include "mpi_internal.h"
#include "zephon/state.h"

/* Store "rank R: <message>" on m (the form every rank gets after the
 * agreement, so that the failing rank's message is the others' too). */
static zp_status rfail(zp_mpi *m, zp_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static zp_status rfail(zp_mpi *m, zp_status st, const char *fmt, ...)
{
    char msg[ZPI_MPI_ERRMAX];
    va_list ap;
    va_start(ap, fmt);
    zpi_vfmt(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return zpi_mpi_fail(m, st, "rank %d: %s", m->rank, msg);
}

/* Write the job state to path durably (zpi_write_durable: a temporary file
 * beside it, fsync, rename, fsync of the folder), after removing what
 * earlier saves killed while writing left there (zpi_tmp_sweep_for). ZP_OK,
 * or ZP_ERR_IO with the message on m naming the path. */
static zp_status write_state(zp_mpi *m, const char *path, const char *data, size_t len)
{
    zpi_err err = {0};
    (void)zpi_tmp_sweep_for(path); /* best effort: a folder not readable fails below */
    zp_status st = zpi_write_durable(path, data, len, &err);
    if (st != ZP_OK)
        return rfail(m, st, "cannot write the job state: %s", zpi_err_msg(&err));
    return ZP_OK;
}

zp_status zp_mpi_state_save(zp_mpi *m, zp_pipeline *p, const char *path)
{
    ZPI_MPI_USABLE(m);
    char *mine = NULL, *all = NULL, *job = NULL;
    size_t mine_len = 0, job_len = 0;
    uint64_t *lens = NULL;
    int *counts = NULL, *displs = NULL;
    zp_status local = ZP_OK, st;

    if (zpi_mpi_balance_inside(m))
        local = ZP_ERR_STATE; /* the message is on m */
    else if (!p)
        local = rfail(m, ZP_ERR_INVALID, "zp_mpi_state_save: the pipeline is NULL");
    else if (m->rank == 0 && (!path || !*path))
        local = rfail(m, ZP_ERR_INVALID, "zp_mpi_state_save: no path given");
    else if ((local = zp_pipeline_state_save(p, &mine, &mine_len)) != ZP_OK)
        rfail(m, local, "cannot save the state: %s", zp_pipeline_errmsg(p));
    else if (mine_len > INT_MAX)
        local = rfail(m, ZP_ERR_LIMIT, "its state of %zu bytes is too large to gather",
                             mine_len);
    if (m->rank == 0 && local == ZP_OK) {
        lens = malloc((size_t)m->size * sizeof *lens);
        counts = malloc((size_t)m->size * sizeof *counts);
        displs = malloc((size_t)m->size * sizeof *displs);
        if (!lens || !counts || !displs)
            local = rfail(m, ZP_ERR_NOMEM, "out of memory gathering %d states", m->size);
    }
    st = zpi_mpi_agree_status(m, local);

    /* the lengths, then the bytes, to rank 0 */
    uint64_t len64 = mine_len;
    if (st == ZP_OK)
        st = zpi_mpi_check(m, zpi_coll_gather(m, &len64, lens, 1, MPI_UINT64_T, 0),
                           "MPI_Gather (state lengths)");
    if (st == ZP_OK) {
        local = ZP_OK;
        if (m->rank == 0) {
            uint64_t total = 0;
            for (int r = 0; r < m->size; r++) {
                counts[r] = (int)lens[r];
                displs[r] = (int)total;
                total += lens[r];
            }
            if (total > INT_MAX)
                local = rfail(m, ZP_ERR_LIMIT,
                                     "the ranks' states (%llu bytes together) are too large to "
                                     "gather in one MPI_Gatherv",
                                     (unsigned long long)total);
            else if (!(all = malloc(total ? (size_t)total : 1)))
                local = rfail(m, ZP_ERR_NOMEM, "out of memory for %llu bytes of states",
                                     (unsigned long long)total);
        }
        st = zpi_mpi_agree_status(m, local);
    }
    if (st == ZP_OK)
        st = zpi_mpi_check(m, zpi_coll_gatherv(m, mine, (int)mine_len, all, counts, displs,
                                               MPI_CHAR, 0),
                           "MPI_Gatherv (states)");

    /* rank 0: merge (the states must agree) and write */
    if (st == ZP_OK) {
        local = ZP_OK;
        if (m->rank == 0) {
            const char **ptrs = malloc((size_t)m->size * sizeof *ptrs);
            size_t *szs = malloc((size_t)m->size * sizeof *szs);
            char err[ZPI_MPI_ERRMAX / 2];
            err[0] = '\0';
            if (!ptrs || !szs) {
                local = rfail(m, ZP_ERR_NOMEM, "out of memory merging %d states", m->size);
            } else {
                for (int r = 0; r < m->size; r++) {
                    ptrs[r] = all + displs[r];
                    szs[r] = (size_t)counts[r];
                }
                local = zp_state_merge(ptrs, szs, (size_t)m->size, &job, &job_len, err, sizeof err);
                if (local != ZP_OK)
                    rfail(m, local, "the ranks' states do not make one job state: %s",
                                 err[0] ? err : zp_status_str(local));
                else
                    local = write_state(m, path, job, job_len);
            }
            free(ptrs);
            free(szs);
        }
        st = zpi_mpi_agree_status(m, local);
    }
    free(mine);
    free(all);
    free(job);
    free(lens);
    free(counts);
    free(displs);
    return st;
}
