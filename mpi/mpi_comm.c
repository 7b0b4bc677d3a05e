/* mpi_comm.c - the MPI layer's handle: the duplicated communicator, the
 * node of each rank, agreeing on an outcome, the communicator-aware
 * WorkSource; the votes and counts of lock-step delivery (zp_mpi_next is
 * mpi_next.c). */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mpi_internal.h"

typedef struct outcome {
    int v, r;
} outcome;

static zp_status agree_end(zp_mpi *m, outcome res);

zp_status zpi_mpi_agree_status(zp_mpi *m, zp_status local)
{
    outcome in = {local == ZP_OK ? INT_MAX : (int)local, m->rank}, res;
    zp_status st = zpi_mpi_check(m, zpi_coll_allreduce(m, &in, &res, 1, MPI_2INT, MPI_MINLOC),
                                 "MPI_Allreduce (agreeing on an outcome)");
    if (st != ZP_OK)
        return st;
    return agree_end(m, res);
}

zp_status zpi_mpi_agree_status_idle(zp_mpi *m, zp_status local)
{
    outcome in = {local == ZP_OK ? INT_MAX : (int)local, m->rank}, res;
    MPI_Request req;
    zp_status st = zpi_mpi_check(m, zpi_coll_iallreduce(m, &in, &res, 1, MPI_2INT, MPI_MINLOC,
                                                        &req),
                                 "MPI_Iallreduce (agreeing on an outcome)");
    for (int done = 0; st == ZP_OK && !done;) {
        st = zpi_mpi_check(m, zpi_coll_testall(m, 1, &req, &done), "MPI_Test (agreeing on an "
                                                                   "outcome)");
        if (st == ZP_OK && !done)
            nanosleep(&(struct timespec){0, 1000000}, NULL); /* 1 ms */
    }
    if (st != ZP_OK)
        return st;
    return agree_end(m, res);
}

/* The agreed outcome res (the lowest status, and the rank that has it):
 * ZP_OK, or that rank's message on every rank. */
static zp_status agree_end(zp_mpi *m, outcome res)
{
    zp_status st;
    if (res.v == INT_MAX)
        return ZP_OK;
    char msg[ZPI_MPI_ERRMAX];
    if (m->rank == res.r)
        memcpy(msg, m->err.msg, sizeof msg);
    st = zpi_mpi_check(m, zpi_coll_bcast(m, msg, (int)sizeof msg, MPI_CHAR, res.r),
                       "MPI_Bcast (an error message)");
    if (st != ZP_OK)
        return st;
    msg[sizeof msg - 1] = '\0';
    if (m->rank != res.r) {
        /* Messages from MPI failures already start with "rank R:". */
        char pre[32];
        zpi_fmt(pre, sizeof pre, "rank %d:", res.r);
        if (strncmp(msg, pre, strlen(pre)) == 0)
            zpi_mpi_fail(m, (zp_status)res.v, "%s", msg);
        else
            zpi_mpi_fail(m, (zp_status)res.v, "rank %d: %s", res.r, msg);
    }
    return (zp_status)res.v;
}

zp_status zp_mpi_agree_status(zp_mpi *m, zp_status local, const char *msg)
{
    ZPI_MPI_USABLE(m);
    if (local != ZP_OK && msg != m->err.msg)
        zpi_mpi_fail(m, local, "%s", msg ? msg : zp_status_str(local));
    return zpi_mpi_agree_status(m, local);
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
    /* the settings a launcher's environment may give (docs/mpi.md) */
    const char *e = getenv("ZEPHON_EMULATED_NODES");
    long v;
    char *end;
    if (e && *e && (v = strtol(e, &end, 10)) > 0 && *end == '\0' && v < 65536)
        cfg->emulated_nodes = (uint32_t)v;
    cfg->peer_sharing = 1;
    if ((e = getenv("ZEPHON_PEER")) && strcmp(e, "0") == 0)
        cfg->peer_sharing = 0;
    cfg->peer_timeout_s = 30;
    double d;
    if ((e = getenv("ZEPHON_PEER_TIMEOUT")) && *e && (d = strtod(e, &end)) > 0 && *end == '\0')
        cfg->peer_timeout_s = d;
    cfg->node_order = 1;
    if ((e = getenv("ZEPHON_NODE_ORDER")) && strcmp(e, "0") == 0)
        cfg->node_order = 0;
    cfg->peer_stall_node = -1;
    if ((e = getenv("ZEPHON_PEER_STALL_NODE")) && *e && (v = strtol(e, &end, 10)) >= 0 &&
        *end == '\0' && v < 65536)
        cfg->peer_stall_node = (int)v;
}

/* Node of each rank: node_comm, local rank and size, node index (nodes in
 * order of their lowest rank) and node count. */
static zp_status find_node(zp_mpi *m)
{
    if (m->solo) {
        m->local_rank = m->node = 0;
        m->local_size = m->nodes = 1;
        return ZP_OK;
    }
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
    if (m->cfg.emulated_nodes > 0) {
        /* N emulated nodes of consecutive ranks on each machine (group) */
        int l = 0, L = 1;
        MPI_Comm_rank(m->node_comm, &l);
        MPI_Comm_size(m->node_comm, &L);
        int color = (int)((int64_t)l * (int64_t)m->cfg.emulated_nodes / L);
        MPI_Comm sub = MPI_COMM_NULL;
        st = zpi_mpi_check(m, MPI_Comm_split(m->node_comm, color, m->rank, &sub),
                           "MPI_Comm_split (emulated nodes)");
        MPI_Comm_free(&m->node_comm);
        m->node_comm = sub;
        if (st != ZP_OK)
            return st;
    }
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
        st = zpi_mpi_check(m, zpi_coll_gather(m, m->host, m->hosts, ZPI_MPI_HOST, MPI_CHAR, m->cfg.root),
                           "MPI_Gather (host names)");
    return st;
}

/* Release what a handle holds besides its error: communicators (collective),
 * the report in flight, the root's buffers. */
static void release(zp_mpi *m)
{
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && !m->solo && m->pend.active)
        MPI_Waitall(3, m->pend.req, MPI_STATUSES_IGNORE);
    zpi_mpi_watch_release(m); /* collective on a created handle */
    if (!fin) /* collective (the handles that made it) */
        zpi_mpi_peer_destroy(m->peer);
    m->peer = NULL;
    if (!fin && !m->solo) {
        if (m->node_comm != MPI_COMM_NULL)
            MPI_Comm_free(&m->node_comm);
        if (m->comm != MPI_COMM_NULL)
            MPI_Comm_free(&m->comm);
    }
    m->pend.active = 0;
    m->node_comm = m->comm = MPI_COMM_NULL;
    free(m->pend.recv);
    free(m->hosts);
    free(m->hist.fetch);
    free(m->hist.t_end);
    free(m->hist.streak);
    free(m->undelivered);
    m->undelivered = NULL;
    m->n_undelivered = 0;
    m->pend.recv = NULL;
    m->hosts = NULL;
    m->hist.fetch = NULL;
    m->hist.t_end = NULL;
    m->hist.streak = NULL;
    zpi_mpi_info_free(&m->info);
    zpi_mpi_balance_free(m);
}

/* A failed create: the handle keeps only its error (the failed-create
 * convention of every handle: the caller reads zp_mpi_errmsg() and calls
 * zp_mpi_destroy()). */
static zp_status create_failed(zp_mpi *m, zp_status st, zp_mpi **out)
{
    release(m);
    m->failed_create = 1;
    if (m->err.code == ZP_OK)
        m->err.code = st;
    *out = m;
    return st;
}

/* A new handle with its settings, or NULL when out of memory. */
static zp_mpi *handle_new(const zp_mpi_config *cfg)
{
    zp_mpi *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->comm = MPI_COMM_NULL;
    m->node_comm = MPI_COMM_NULL;
    m->stop_rank = -1;
    if (cfg)
        m->cfg = *cfg;
    else
        zp_mpi_config_init(&m->cfg);
    return m;
}

static zp_status create_rest(zp_mpi *m, zp_mpi **out);

zp_status zp_mpi_create(MPI_Comm comm, const zp_mpi_config *cfg, zp_mpi **out)
{
    if (!out)
        return ZP_ERR_INVALID;
    *out = NULL;
    zp_mpi *m = handle_new(cfg);
    if (!m)
        return ZP_ERR_NOMEM;
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (!init || fin)
        return create_failed(m,
                             zpi_mpi_fail(m, ZP_ERR_STATE, "zp_mpi_create: MPI is %s",
                                          fin ? "already finalised" : "not initialised (call "
                                                                      "MPI_Init_thread first)"),
                             out);
    if (comm == MPI_COMM_NULL)
        return create_failed(
            m, zpi_mpi_fail(m, ZP_ERR_INVALID, "zp_mpi_create: the communicator is MPI_COMM_NULL"),
            out);
    zp_status st0 = zpi_mpi_check(m, MPI_Comm_dup(comm, &m->comm), "MPI_Comm_dup (zp_mpi_create)");
    if (st0 != ZP_OK) {
        m->comm = MPI_COMM_NULL;
        return create_failed(m, st0, out);
    }
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->comm, &m->rank);
    MPI_Comm_size(m->comm, &m->size);
    int hl = 0;
    char host[MPI_MAX_PROCESSOR_NAME] = {0};
    if (MPI_Get_processor_name(host, &hl) != MPI_SUCCESS)
        zpi_fmt(host, sizeof host, "?");
    host[sizeof m->host - 1] = '\0'; /* host names are cut to 63 bytes */
    memcpy(m->host, host, sizeof m->host);
    return create_rest(m, out);
}

zp_status zp_mpi_create_local(const zp_mpi_config *cfg, zp_mpi **out)
{
    if (!out)
        return ZP_ERR_INVALID;
    *out = NULL;
    zp_mpi *m = handle_new(cfg);
    if (!m)
        return ZP_ERR_NOMEM;
    m->solo = 1;
    m->rank = 0;
    m->size = 1;
    if (gethostname(m->host, sizeof m->host) != 0)
        zpi_fmt(m->host, sizeof m->host, "?");
    m->host[sizeof m->host - 1] = '\0'; /* cut to 63 bytes, as MPI's names are */
    return create_rest(m, out);
}

/* The rest of a create, on a handle with its rank, size and host name:
 * the settings checked (agreed), the nodes, the host names and the root's
 * report buffers. */
static zp_status create_rest(zp_mpi *m, zp_mpi **out)
{
    zp_status local = ZP_OK;
    const zp_mpi_config *c = &m->cfg;
    if (c->root < 0 || c->root >= m->size)
        local = zpi_mpi_fail(m, ZP_ERR_INVALID,
                             "zp_mpi_config.root = %d: not a rank of the communicator (size %d)",
                             c->root, m->size);
    else if (!(c->straggler_ratio >= 0) || !(c->straggler_z >= 0) ||
             !(c->straggler_min_stall >= 0) || c->straggler_windows == 0 || c->max_windows == 0)
        local = zpi_mpi_fail(m, ZP_ERR_INVALID,
                             "zp_mpi_config: straggler_ratio = %g, straggler_z = %g, "
                             "straggler_min_stall = %g, straggler_windows = %u, max_windows = %u: "
                             "ratio, z and min stall must be >= 0, the window counts >= 1",
                             c->straggler_ratio, c->straggler_z, c->straggler_min_stall,
                             c->straggler_windows, c->max_windows);
    zp_status st = zpi_mpi_agree_status(m, local);
    if (st == ZP_OK)
        st = find_node(m);
    if (st == ZP_OK)
        st = gather_hosts(m);
    m->t_create = zpi_now();
    if (st == ZP_OK && !m->solo) { /* the node's CPU bindings (mpi_watchdog.c) */
        void *masks = malloc((size_t)m->local_size * zpi_mpi_mask_bytes());
        st = zpi_mpi_agree_status(m, masks ? ZP_OK
                                           : zpi_mpi_fail(m, ZP_ERR_NOMEM,
                                                          "rank %d: out of memory for %d CPU masks",
                                                          m->rank, m->local_size));
        if (st == ZP_OK)
            st = zpi_mpi_binding(m, masks);
        free(masks);
    } else if (st == ZP_OK) {
        st = zpi_mpi_binding(m, NULL);
    }
    if (st == ZP_OK && m->rank == m->cfg.root) {
        zpi_mpi_history *h = &m->hist;
        h->cap = m->cfg.max_windows;
        h->fetch = malloc((size_t)h->cap * (size_t)m->size * sizeof *h->fetch);
        h->t_end = calloc(h->cap, sizeof *h->t_end);
        h->streak = calloc((size_t)m->size, sizeof *h->streak);
        m->pend.recv = malloc((size_t)m->size * sizeof *m->pend.recv);
        /* stall notices received per rank, and sent (at destroy) */
        m->wd_recv = calloc(2 * (size_t)m->size, sizeof *m->wd_recv);
        local = (h->fetch && h->t_end && h->streak && m->pend.recv && m->wd_recv)
                    ? ZP_OK
                    : zpi_mpi_fail(m, ZP_ERR_NOMEM,
                                   "zp_mpi_create: out of memory for %u report windows of %d ranks "
                                   "(zp_mpi_config.max_windows)",
                                   h->cap, m->size);
    } else {
        local = ZP_OK;
    }
    if (st == ZP_OK)
        st = zpi_mpi_agree_status(m, local);
    if (st != ZP_OK)
        return create_failed(m, st, out);
    m->wd_ready = 1;
    *out = m;
    return ZP_OK;
}

void zp_mpi_destroy(zp_mpi *m)
{
    if (!m)
        return;
    release(m);
    free(m);
}

const char *zp_mpi_errmsg(const zp_mpi *m)
{
    if (!m)
        return "";
    if (!m->err.msg[0] && m->err.code != ZP_OK)
        return zp_status_str(m->err.code);
    return m->err.msg;
}
int zp_mpi_rank(const zp_mpi *m) { return m ? m->rank : -1; }
int zp_mpi_size(const zp_mpi *m) { return m ? m->size : 0; }
int zp_mpi_node(const zp_mpi *m) { return m ? m->node : -1; }
int zp_mpi_num_nodes(const zp_mpi *m) { return m ? m->nodes : 0; }
int zp_mpi_local_rank(const zp_mpi *m) { return m ? m->local_rank : -1; }
int zp_mpi_local_size(const zp_mpi *m) { return m ? m->local_size : 0; }
const char *zp_mpi_hostname(const zp_mpi *m) { return m ? m->host : ""; }
MPI_Comm zp_mpi_comm(const zp_mpi *m) { return m ? m->comm : MPI_COMM_NULL; }
uint64_t zp_mpi_batches_dropped(const zp_mpi *m) { return m ? m->dropped : 0; }

size_t zp_mpi_undelivered_samples(const zp_mpi *m, const zp_sample **out)
{
    if (out)
        *out = m ? m->undelivered : NULL;
    return m ? m->n_undelivered : 0;
}

/* (mpi_internal.h) */
void zpi_mpi_keep_undelivered(zp_mpi *m, const zp_batch *b)
{
    if (!b || !b->n_samples)
        return;
    zp_sample *a = realloc(m->undelivered, (m->n_undelivered + b->n_samples) * sizeof *a);
    if (!a) {
        m->undelivered_lost = 1;
        return;
    }
    memcpy(a + m->n_undelivered, b->samples, b->n_samples * sizeof *a);
    m->undelivered = a;
    m->n_undelivered += b->n_samples;
}

zp_status zp_mpi_set_vote(zp_mpi *m, zp_mpi_vote_kind kind, int64_t value)
{
    ZPI_MPI_USABLE(m);
    if ((int)kind < 0 || kind >= ZP_MPI_VOTE_COUNT)
        return zpi_mpi_fail(m, ZP_ERR_INVALID, "zp_mpi_set_vote: bad vote kind %d", (int)kind);
    m->vote_local[kind] = value > 0 ? value : 0;
    return ZP_OK;
}

int64_t zp_mpi_vote(const zp_mpi *m, zp_mpi_vote_kind kind)
{
    if (!m || (int)kind < 0 || kind >= ZP_MPI_VOTE_COUNT)
        return 0;
    return m->vote_all[kind];
}

int64_t zp_mpi_stop_reason(const zp_mpi *m, int *rank)
{
    int have = m && m->stop_rank >= 0;
    if (rank)
        *rank = have ? m->stop_rank : -1;
    return have ? m->vote_all[ZP_MPI_VOTE_STOP] : 0;
}
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
    ZPI_MPI_USABLE(m);
    zp_worksource_config c;
    if (cfg)
        c = *cfg;
    else
        zp_worksource_config_init(&c);
    zp_mpi_worksource_config(m, &c);
    zp_worksource *ws = NULL;
    zp_status local = ZP_OK;
    if (!out || !ds)
        local = zpi_mpi_fail(m, ZP_ERR_INVALID,
                             "zp_mpi_worksource_create: %s is NULL", !ds ? "the dataset" : "out");
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
