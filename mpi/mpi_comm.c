/* mpi_comm.c - the MPI layer's handle: the duplicated communicator, the
 * node of each rank, errors, the communicator-aware WorkSource and
 * lock-step delivery (zp_mpi_next). */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpi_internal.h"

/* ------------------------------------------------------------ helpers */

double zpi_mpi_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void zpi_mpi_fmt(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

zp_status zpi_mpi_fail(zp_mpi *m, zp_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err, sizeof m->err, fmt, ap);
    va_end(ap);
    return st;
}

zp_status zpi_mpi_check(zp_mpi *m, int rc, const char *what)
{
    if (rc == MPI_SUCCESS)
        return ZP_OK;
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS)
        zpi_mpi_fmt(s, sizeof s, "MPI error %d", rc);
    return zpi_mpi_fail(m, ZP_ERR_MPI, "rank %d: %s failed: %s", m->rank, what, s);
}

zp_status zpi_mpi_agree_status(zp_mpi *m, zp_status local)
{
    struct {
        int v, r;
    } in = {local == ZP_OK ? INT_MAX : (int)local, m->rank}, res;
    zp_status st = zpi_mpi_check(m, MPI_Allreduce(&in, &res, 1, MPI_2INT, MPI_MINLOC, m->comm),
                                 "MPI_Allreduce (agreeing on an outcome)");
    if (st != ZP_OK)
        return st;
    if (res.v == INT_MAX)
        return ZP_OK;
    char msg[ZPI_MPI_ERRMAX];
    if (m->rank == res.r)
        memcpy(msg, m->err, sizeof msg);
    st = zpi_mpi_check(m, MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, res.r, m->comm),
                       "MPI_Bcast (an error message)");
    if (st != ZP_OK)
        return st;
    msg[sizeof msg - 1] = '\0';
    if (m->rank != res.r) {
        /* Messages from MPI failures already start with "rank R:". */
        char pre[32];
        zpi_mpi_fmt(pre, sizeof pre, "rank %d:", res.r);
        if (strncmp(msg, pre, strlen(pre)) == 0)
            zpi_mpi_fail(m, (zp_status)res.v, "%s", msg);
        else
            zpi_mpi_fail(m, (zp_status)res.v, "rank %d: %s", res.r, msg);
    }
    return (zp_status)res.v;
}

zp_status zp_mpi_agree_status(zp_mpi *m, zp_status local, const char *msg)
{
    if (!m)
        return ZP_ERR_INVALID;
    if (local != ZP_OK && msg != m->err)
        zpi_mpi_fail(m, local, "%s", msg ? msg : zp_status_str(local));
    return zpi_mpi_agree_status(m, local);
}

void zpi_mpi_ranklist(char *buf, size_t cap, const int *ranks, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && ranks[j + 1] == ranks[j] + 1)
            j++;
        char item[48];
        if (j == i)
            zpi_mpi_fmt(item, sizeof item, "%s%d", i ? "," : "", ranks[i]);
        else
            zpi_mpi_fmt(item, sizeof item, "%s%d-%d", i ? "," : "", ranks[i], ranks[j]);
        size_t il = strlen(item);
        if (len + il + 24 >= cap) {
            zpi_mpi_fmt(buf + len, cap - len, ",... (%zu ranks)", n);
            return;
        }
        memcpy(buf + len, item, il + 1);
        len += il;
        i = j + 1;
    }
}

/* ------------------------------------------------------------ create / destroy */

void zp_mpi_config_init(zp_mpi_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->root = 0;
    cfg->straggler_ratio = 0.25;
    cfg->straggler_z = 3.5;
    cfg->straggler_min_stall = 0.05;
    cfg->straggler_windows = 3;
    cfg->max_windows = 256;
    cfg->node_group_size = 0;
}

/* Node of each rank: node_comm, local rank and size, node index (nodes in
 * order of their lowest rank) and node count. */
static zp_status find_node(zp_mpi *m)
{
    zp_status st;
    if (m->cfg.node_group_size > 0) {
        int color = m->rank / (int)m->cfg.node_group_size;
        st = zpi_mpi_check(m, MPI_Comm_split(m->comm, color, m->rank, &m->node_comm),
                           "MPI_Comm_split (node groups)");
    } else {
        st = zpi_mpi_check(m, MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, m->rank,
                                                  MPI_INFO_NULL, &m->node_comm),
                           "MPI_Comm_split_type (MPI_COMM_TYPE_SHARED)");
    }
    if (st != ZP_OK)
        return st;
    MPI_Comm_set_errhandler(m->node_comm, MPI_ERRORS_RETURN);
    if ((st = zpi_mpi_check(m, MPI_Comm_rank(m->node_comm, &m->local_rank), "MPI_Comm_rank")) ||
        (st = zpi_mpi_check(m, MPI_Comm_size(m->node_comm, &m->local_size), "MPI_Comm_size")))
        return st;
    /* node_comm is ordered by rank, so local rank 0 is the node's lowest
     * rank: the leaders, counted in rank order, number the nodes. */
    int leader = m->local_rank == 0, before = 0;
    if ((st = zpi_mpi_check(m, MPI_Exscan(&leader, &before, 1, MPI_INT, MPI_SUM, m->comm),
                            "MPI_Exscan (numbering nodes)")))
        return st;
    if (m->rank == 0)
        before = 0; /* MPI_Exscan leaves rank 0's result undefined */
    m->node = before;
    if ((st = zpi_mpi_check(m, MPI_Bcast(&m->node, 1, MPI_INT, 0, m->node_comm),
                            "MPI_Bcast (node index)")) ||
        (st = zpi_mpi_check(m, MPI_Allreduce(&leader, &m->nodes, 1, MPI_INT, MPI_SUM, m->comm),
                            "MPI_Allreduce (counting nodes)")))
        return st;
    return ZP_OK;
}

/* Host name of every rank, to the root (each NUL-terminated in its
 * ZPI_MPI_HOST bytes, as m->host is). */
static zp_status gather_hosts(zp_mpi *m)
{
    zp_status local = ZP_OK;
    if (m->rank == m->cfg.root && !(m->hosts = calloc((size_t)m->size, ZPI_MPI_HOST)))
        local = zpi_mpi_fail(m, ZP_ERR_NOMEM, "rank %d: out of memory for %d host names", m->rank,
                             m->size);
    zp_status st = zpi_mpi_agree_status(m, local);
    if (st == ZP_OK)
        st = zpi_mpi_check(m, MPI_Gather(m->host, ZPI_MPI_HOST, MPI_CHAR, m->hosts, ZPI_MPI_HOST,
                                         MPI_CHAR, m->cfg.root, m->comm),
                           "MPI_Gather (host names)");
    return st;
}

zp_status zp_mpi_create(MPI_Comm comm, const zp_mpi_config *cfg, zp_mpi **out)
{
    if (!out)
        return ZP_ERR_INVALID;
    *out = NULL;
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (!init || fin)
        return ZP_ERR_STATE;
    if (comm == MPI_COMM_NULL)
        return ZP_ERR_INVALID;
    zp_mpi *m = calloc(1, sizeof *m);
    if (!m)
        return ZP_ERR_NOMEM;
    if (cfg)
        m->cfg = *cfg;
    else
        zp_mpi_config_init(&m->cfg);
    m->comm = MPI_COMM_NULL;
    m->node_comm = MPI_COMM_NULL;
    if (MPI_Comm_dup(comm, &m->comm) != MPI_SUCCESS) {
        free(m);
        return ZP_ERR_MPI;
    }
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->comm, &m->rank);
    MPI_Comm_size(m->comm, &m->size);
    int hl = 0;
    char host[MPI_MAX_PROCESSOR_NAME] = {0};
    if (MPI_Get_processor_name(host, &hl) != MPI_SUCCESS)
        zpi_mpi_fmt(host, sizeof host, "?");
    host[sizeof m->host - 1] = '\0'; /* host names are cut to 63 bytes */
    memcpy(m->host, host, sizeof m->host);

    zp_status local = ZP_OK;
    const zp_mpi_config *c = &m->cfg;
    if (c->root < 0 || c->root >= m->size)
        local = zpi_mpi_fail(m, ZP_ERR_INVALID, "root %d is not a rank of a communicator of %d",
                             c->root, m->size);
    else if (!(c->straggler_ratio >= 0) || !(c->straggler_z >= 0) ||
             !(c->straggler_min_stall >= 0) || c->straggler_windows == 0 || c->max_windows == 0)
        local = zpi_mpi_fail(m, ZP_ERR_INVALID,
                             "bad straggler settings (ratio, z and min stall must be >= 0, "
                             "windows and max_windows >= 1)");
    zp_status st = zpi_mpi_agree_status(m, local);
    if (st == ZP_OK)
        st = find_node(m);
    if (st == ZP_OK)
        st = gather_hosts(m);
    if (st == ZP_OK && m->rank == m->cfg.root) {
        zpi_mpi_history *h = &m->hist;
        h->cap = m->cfg.max_windows;
        h->fetch = malloc((size_t)h->cap * (size_t)m->size * sizeof *h->fetch);
        h->t_end = calloc(h->cap, sizeof *h->t_end);
        h->streak = calloc((size_t)m->size, sizeof *h->streak);
        m->pend.recv = malloc((size_t)m->size * sizeof *m->pend.recv);
        local = (h->fetch && h->t_end && h->streak && m->pend.recv)
                    ? ZP_OK
                    : zpi_mpi_fail(m, ZP_ERR_NOMEM, "out of memory for %u report windows", h->cap);
    } else {
        local = ZP_OK;
    }
    if (st == ZP_OK)
        st = zpi_mpi_agree_status(m, local);
    if (st != ZP_OK) {
        zp_mpi_destroy(m);
        return st;
    }
    *out = m;
    return ZP_OK;
}

void zp_mpi_destroy(zp_mpi *m)
{
    if (!m)
        return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) {
        if (m->pend.active) {
            MPI_Waitall(3, m->pend.req, MPI_STATUSES_IGNORE);
            m->pend.active = 0;
        }
        if (m->node_comm != MPI_COMM_NULL)
            MPI_Comm_free(&m->node_comm);
        if (m->comm != MPI_COMM_NULL)
            MPI_Comm_free(&m->comm);
    }
    free(m->pend.recv);
    free(m->hosts);
    free(m->hist.fetch);
    free(m->hist.t_end);
    free(m->hist.streak);
    zpi_mpi_info_free(&m->info);
    free(m);
}

const char *zp_mpi_errmsg(const zp_mpi *m) { return m ? m->err : ""; }
int zp_mpi_rank(const zp_mpi *m) { return m ? m->rank : -1; }
int zp_mpi_size(const zp_mpi *m) { return m ? m->size : 0; }
int zp_mpi_node(const zp_mpi *m) { return m ? m->node : -1; }
int zp_mpi_num_nodes(const zp_mpi *m) { return m ? m->nodes : 0; }
int zp_mpi_local_rank(const zp_mpi *m) { return m ? m->local_rank : -1; }
int zp_mpi_local_size(const zp_mpi *m) { return m ? m->local_size : 0; }
const char *zp_mpi_hostname(const zp_mpi *m) { return m ? m->host : ""; }
MPI_Comm zp_mpi_comm(const zp_mpi *m) { return m ? m->comm : MPI_COMM_NULL; }
uint64_t zp_mpi_batches_dropped(const zp_mpi *m) { return m ? m->dropped : 0; }
double zp_mpi_sync_seconds(const zp_mpi *m) { return m ? m->sync_seconds : 0; }

/* ------------------------------------------------------------ worksource */

void zp_mpi_worksource_config(const zp_mpi *m, zp_worksource_config *cfg)
{
    if (!m || !cfg)
        return;
    cfg->rank = (uint32_t)m->rank;
    cfg->world_size = (uint32_t)m->size;
}

zp_status zp_mpi_worksource_create(zp_mpi *m, zp_dataset *ds, const zp_worksource_config *cfg,
                                   zp_worksource **out)
{
    if (!m)
        return ZP_ERR_INVALID;
    zp_worksource_config c;
    if (cfg)
        c = *cfg;
    else
        zp_worksource_config_init(&c);
    zp_mpi_worksource_config(m, &c);
    zp_worksource *ws = NULL;
    zp_status local = ZP_OK;
    if (!out || !ds)
        local = zpi_mpi_fail(m, ZP_ERR_INVALID, "no dataset or no output given");
    else if ((local = zp_worksource_create(ds, &c, &ws)) != ZP_OK)
        zpi_mpi_fail(m, local, "worksource: %s", zp_worksource_errmsg(ws));
    zp_status st = zpi_mpi_agree_status(m, local);
    if (st != ZP_OK) {
        zp_worksource_destroy(ws);
        if (out)
            *out = NULL;
        return st;
    }
    *out = ws;
    return ZP_OK;
}

/* ------------------------------------------------------------ lock-step delivery */

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

zp_status zp_mpi_next(zp_mpi *m, zp_pipeline *p, const zp_batch **out)
{
    if (!m)
        return ZP_ERR_INVALID;
    if (out)
        *out = NULL;
    if (m->step_final != ZP_OK)
        return zpi_mpi_fail(m, m->step_final, "%s", m->step_msg);
    const zp_batch *b = NULL;
    zp_status st;
    if (!p || !out)
        st = zpi_mpi_fail(m, ZP_ERR_INVALID, "no pipeline or no output given");
    else if ((st = zp_pipeline_next(p, &b)) != ZP_OK && st != ZP_END)
        zpi_mpi_fail(m, st, "%s", zp_pipeline_errmsg(p));
    /* 2: a batch, 1: end, 0: an error; MINLOC: errors win over end, and the
     * lowest rank in that state is named. */
    struct {
        int v, r;
    } in = {st == ZP_OK ? 2 : st == ZP_END ? 1 : 0, m->rank}, res;
    double t0 = zpi_mpi_now();
    zp_status mst = zpi_mpi_check(m, MPI_Allreduce(&in, &res, 1, MPI_2INT, MPI_MINLOC, m->comm),
                                  "MPI_Allreduce (lock-step next)");
    m->sync_seconds += zpi_mpi_now() - t0;
    if (mst != ZP_OK)
        return step_stop(m, mst, "%s", m->err);
    if (res.v == 2) {
        *out = b;
        return ZP_OK;
    }
    if (res.v == 1) {
        if (st == ZP_OK)
            m->dropped++;
        return step_stop(m, ZP_END,
                         "end of stream: rank %d ended first, every rank stops at this step", res.r);
    }
    /* An error on rank res.r: every rank learns its status and message. */
    struct {
        int status;
        char msg[ZPI_MPI_ERRMAX];
    } e;
    memset(&e, 0, sizeof e);
    if (m->rank == res.r) {
        e.status = (int)st;
        memcpy(e.msg, m->err, sizeof e.msg);
    }
    mst = zpi_mpi_check(m, MPI_Bcast(&e, (int)sizeof e, MPI_BYTE, res.r, m->comm),
                        "MPI_Bcast (a rank's pipeline error)");
    if (mst != ZP_OK)
        return step_stop(m, mst, "%s", m->err);
    e.msg[sizeof e.msg - 1] = '\0';
    if (m->rank == res.r || in.v == 0) /* this rank failed too: its own error */
        return step_stop(m, st, "%s", m->rank == res.r ? e.msg : m->err);
    if (st == ZP_OK)
        m->dropped++;
    return step_stop(m, (zp_status)e.status, "rank %d failed: %s: %s", res.r,
                     zp_status_str((zp_status)e.status), e.msg);
}
