/* mpi_step.c - the agreement of one lock-step step (zpi_mpi_step_agree):
 * one MPI_Allreduce of the ranks' states, votes, balance windows and batch
 * shapes, so that every rank takes the same decision (a batch, the end, a
 * stop vote, an error named by its rank). Used by zp_mpi_next (mpi_comm.c)
 * and by cross-rank balance (mpi_balance.c). */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "mpi_internal.h"

/* Lock-step delivery has stopped with st: every later zp_mpi_next answers
 * st and the message formatted here (stored on m too). */
static zp_status step_stop(zp_mpi *m, zp_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static zp_status step_stop(zp_mpi *m, zp_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->step_msg, sizeof m->step_msg, fmt, ap);
    va_end(ap);
    m->step_final = st;
    return zpi_mpi_fail(m, st, "%s", m->step_msg);
}

zp_status zpi_mpi_step_agree(zp_mpi *m, zp_status st, uint64_t held, int64_t shape)
{
    /* One MPI_Allreduce (MAX) of seven values:
     *   [0] the state and the rank: (2: an error, 1: end, 0: a batch) << 32
     *       | (INT32_MAX - rank): errors win over end, and the lowest rank
     *       in that state is named;
     *   [1] the stop vote and the rank: reason << 32 | (INT32_MAX - rank):
     *       the largest reason, the lowest rank that voted it;
     *   [2] the user vote;
     *   [3], [4] the balance window (zp_mpi_balance) and the rank: the
     *       largest window and the smallest (as ZP_BALANCE_WINDOW_MAX minus
     *       it), each with the lowest rank holding it;
     *   [5], [6] the batch shape with balance on, and its complement. */
    int state = st == ZP_OK ? 0 : st == ZP_END ? 1 : 2;
    int64_t stop = m->vote_local[ZP_MPI_VOTE_STOP];
    if (stop > INT32_MAX)
        stop = INT32_MAX;
    int64_t win = (int64_t)m->bal.window;
    int64_t in[7] = {((int64_t)state << 32) | (INT32_MAX - m->rank),
                     stop > 0 ? (stop << 32) | (INT32_MAX - m->rank) : 0,
                     m->vote_local[ZP_MPI_VOTE_USER],
                     (win << 32) | (INT32_MAX - m->rank),
                     (((int64_t)ZP_BALANCE_WINDOW_MAX - win) << 32) | (INT32_MAX - m->rank),
                     shape, ~shape},
            all[7];
    double t0 = zpi_now();
    /* non-blocking, so that the root receives stall notices while it waits
     * (mpi_watchdog.c) */
    MPI_Request req;
    int rc = zpi_coll_iallreduce(m, in, all, 7, MPI_INT64_T, MPI_MAX, &req);
    if (rc == MPI_SUCCESS)
        rc = zpi_mpi_wait_step(m, &req);
    zp_status mst = zpi_mpi_check(m, rc, "MPI_Iallreduce (lock-step next)");
    m->sync_seconds += zpi_now() - t0;
    if (mst != ZP_OK)
        return step_stop(m, mst, "%s", m->err.msg);
    struct {
        int v, r;
    } res = {(int)(all[0] >> 32), INT32_MAX - (int)(all[0] & 0xffffffff)};
    m->vote_all[ZP_MPI_VOTE_STOP] = all[1] >> 32;
    m->vote_all[ZP_MPI_VOTE_USER] = all[2];
    int64_t wmax = all[3] >> 32, wmin = (int64_t)ZP_BALANCE_WINDOW_MAX - (all[4] >> 32);
    if (wmax != wmin)
        return step_stop(m, ZP_ERR_MISMATCH,
                         "zp_mpi_balance: the ranks were given different windows: rank %d: %lld, "
                         "rank %d: %lld (0: off); every rank must use the same value",
                         INT32_MAX - (int)(all[3] & 0xffffffff), (long long)wmax,
                         INT32_MAX - (int)(all[4] & 0xffffffff), (long long)wmin);
    if (res.v == 0 && all[1] == 0) {
        if (all[5] != ~all[6])
            return step_stop(m, ZP_ERR_MISMATCH,
                             "zp_mpi_balance: the ranks' batches differ in shape (rows, columns "
                             "or document-masking outputs): they cannot exchange rows");
        return ZP_OK;
    }
    if (res.v < 2 && all[1] != 0) {
        m->stop_rank = INT32_MAX - (int)(all[1] & 0xffffffff);
        return step_stop(m, ZP_END, "stopped: rank %d voted to stop (reason %lld), every rank stops "
                                    "at this step",
                         m->stop_rank, (long long)m->vote_all[ZP_MPI_VOTE_STOP]);
    }
    if (res.v == 1) {
        m->dropped += held;
        return step_stop(m, ZP_END,
                         "end of stream: rank %d ended first, every rank stops at this step", res.r);
    }
    /* An error on rank res.r (the lowest failing rank): every rank, that one
     * too, returns its status and "rank R: its message"; a rank that failed
     * as well adds its own message. */
    struct {
        int status;
        char msg[ZPI_MPI_ERRMAX];
    } e;
    memset(&e, 0, sizeof e);
    if (m->rank == res.r) {
        e.status = (int)st;
        zpi_fmt(e.msg, sizeof e.msg, "%s", m->err.msg[0] ? m->err.msg : zp_status_str(st));
    }
    char own[ZPI_MPI_ERRMAX / 2];
    zpi_fmt(own, sizeof own, "%s", state == 2 ? m->err.msg : "");
    mst = zpi_mpi_check(m, zpi_coll_bcast(m, &e, (int)sizeof e, MPI_BYTE, res.r),
                        "MPI_Bcast (a rank's pipeline error)");
    if (mst != ZP_OK)
        return step_stop(m, mst, "%s", m->err.msg);
    e.msg[sizeof e.msg - 1] = '\0';
    m->dropped += held;
    /* messages of MPI failures already start with "rank R: " */
    char pre[32];
    zpi_fmt(pre, sizeof pre, "rank %d: ", res.r);
    const char *msg = strncmp(e.msg, pre, strlen(pre)) == 0 ? e.msg + strlen(pre) : e.msg;
    if (state == 2 && m->rank != res.r && strcmp(own, msg) != 0)
        return step_stop(m, (zp_status)e.status, "rank %d: %s (rank %d failed too: %s)", res.r, msg,
                         m->rank, own);
    return step_stop(m, (zp_status)e.status, "rank %d: %s", res.r, msg);
}
