/*
 * mpi_peer.c - shards from other nodes: the MPI side of the core's peer
 * source (zp_peer_source in zephon/storage.h; docs/storage.md, "Shards
 * from other nodes").
 *
 * Owner: each shard has one owner rank, from the plan: the rank that reads
 * it first in epoch 0 (position by position over the ranks, the lowest
 * rank first); a shard epoch 0 does not read is owned by rank shard % size.
 * The owner's node fetches the shard from storage (through its cache);
 * every other node asks the owner for it instead. Every rank computes the
 * same table (zp_mpi_agree), so nothing is negotiated.
 *
 * One service thread per rank (it needs MPI_THREAD_MULTIPLE; without it
 * the ranks fetch from storage as before) on a communicator of its own
 * (MPI_Comm_dup): it sends this rank's requests, answers the other nodes'
 * (serve(): the shard through this node's cache, downloaded when needed)
 * and receives the answers, writing them into the cache's temporary file.
 * A request not answered within peer_timeout_s is failed: the fetcher then
 * downloads the shard from storage, so a slow or stalled node never blocks
 * another.
 *
 * Messages (tags on the service's communicator): a request, five
 * uint64 (request id, shard, bytes, and the epoch and position of the
 * asking rank's read it is for: the owner's trace of downloads and which
 * epoch's readers it has served); an answer, two uint64 (request id,
 * ok) followed, when ok, by the shard's bytes (one message: shards of 2 GiB
 * and more are not asked for).
 *
 * Shutdown (zp_mpi_destroy, collective): new requests are declined; the
 * service keeps answering until every rank has begun to close (a
 * non-blocking barrier), then only drains answers until every rank's own
 * sends are complete (a second barrier), so no send is left pending when
 * the communicator is freed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mpi_internal.h"

#define TAG_REQ 71
#define TAG_ANS 72
#define MAX_CTX 8
#define REQ_WORDS 5
#define MAX_MSG ((uint64_t)INT32_MAX - 64)

typedef struct preq {
    uint64_t id;
    uint64_t use_epoch;  /* the read it is for: this rank's epoch, UINT64_MAX unknown */
    uint64_t use_pos;
    void *ctx;
    size_t shard;
    uint64_t bytes;
    int fd;
    int dest;
    int sent;
    double deadline;
    void (*done)(void *, int);
    void *done_user;
    struct preq *next;
} preq;

typedef struct psend {
    MPI_Request r;
    void *buf;
    struct psend *next;
} psend;

struct zpi_mpi_peer {
    zp_peer_source src; /* user = this */
    MPI_Comm comm;
    int rank, size;
    int *node_of;       /* size */
    int node;
    double timeout_s;
    int stall;          /* tests: this rank never answers */
    zp_log_fn log;
    void *log_user;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t *owner;     /* n_shards, or NULL before agreement */
    size_t n_shards;
    void *ctx[MAX_CTX];
    zp_peer_serve_fn serve[MAX_CTX];
    int n_ctx;
    int serving;        /* serve() calls running */
    int in_done;        /* done() callbacks running (a request taken off reqs) */
    void *serving_ctx;
    preq *reqs;
    uint64_t next_id;
    int closing;        /* new requests declined */
    int stop;           /* the service thread ends */
    pthread_t th;
    int started;
    /* the service thread's own */
    psend *sends;

    /* the node's shared order (docs/storage.md, "Eviction by the node's
     * order"): every rank's plan (ws, the service thread's after
     * set_owners), per epoch the intervals [first, last] of positions at
     * which each rank reads each shard, kept for this node's ranks and for
     * the other nodes' readers of the shards this node owns; this rank's
     * position, and the node's positions in a shared window */
    int node_order;          /* 0: this rank's order only (comparisons) */
    int sharing;             /* shards from other nodes (peer_sharing) */
    zp_worksource **ws;      /* size */
    uint64_t per;            /* samples per rank and epoch */
    struct ivtab *tab[2];    /* epochs tab[k]->epoch, or NULL */
    uint64_t tab_failed;     /* epoch + 1 whose table could not be built */
    uint32_t epoch;          /* this rank's consumer position */
    uint64_t pos;
    MPI_Comm ncomm;          /* the node's ranks (a duplicate) */
    MPI_Win win;
    int nlocal;
    int *local_rank_of;      /* nlocal: rank in comm */
    /* nlocal: each local rank's slots: [0] (epoch << 40 | position) + 1, 0
     * unknown; [1] the shard it is serving + 1, 0 none */
    volatile uint64_t **npos;
};

typedef struct ivtab {
    uint32_t epoch;
    size_t *off;             /* n_shards + 1 */
    struct iv {
        int32_t rank;
        int32_t served;      /* another node's reader: its node was sent the shard */
        uint64_t first, last;
    } *iv;
} ivtab;

static void ivtab_free(ivtab *t)
{
    if (t) {
        free(t->off);
        free(t->iv);
        free(t);
    }
}

/* The intervals of epoch e (on the thread that owns p->ws). NULL when out
 * of memory or a plan fails. */
static ivtab *ivtab_build(zpi_mpi_peer *p, uint32_t e)
{
    size_t n = p->n_shards;
    ivtab *t = calloc(1, sizeof *t);
    uint64_t *first = malloc((n ? n : 1) * sizeof *first), *last = malloc((n ? n : 1) * sizeof *last);
    size_t cap = 64, len = 0;
    struct {
        uint32_t shard;
        struct iv v;
    } *tmp = malloc(cap * sizeof *tmp);
    int ok = t && first && last && tmp;
    for (int r = 0; ok && r < p->size; r++) {
        for (size_t i = 0; i < n; i++)
            first[i] = UINT64_MAX;
        for (uint64_t pos = 0; ok && pos < p->per; pos++) {
            zp_sample sm;
            if (zp_worksource_sample(p->ws[r], e, pos, &sm) != ZP_OK) {
                ok = 0;
                break;
            }
            if (sm.shard >= n)
                continue;
            if (first[sm.shard] == UINT64_MAX)
                first[sm.shard] = pos;
            last[sm.shard] = pos;
        }
        int mine = p->node_of[r] == p->node;
        for (size_t i = 0; ok && i < n; i++) {
            if (first[i] == UINT64_MAX)
                continue;
            int keep = mine || (p->owner && p->node_of[p->owner[i]] == p->node && r != p->owner[i]);
            if (!keep)
                continue;
            if (len == cap) {
                void *nt = realloc(tmp, 2 * cap * sizeof *tmp);
                if (!nt) {
                    ok = 0;
                    break;
                }
                tmp = nt;
                cap *= 2;
            }
            tmp[len].shard = (uint32_t)i;
            tmp[len].v.rank = r;
            tmp[len].v.served = 0;
            tmp[len].v.first = first[i];
            tmp[len].v.last = last[i];
            len++;
        }
    }
    if (ok) {
        t->epoch = e;
        t->off = calloc(n + 1, sizeof *t->off);
        t->iv = malloc((len ? len : 1) * sizeof *t->iv);
        ok = t->off && t->iv;
    }
    if (ok) {
        for (size_t k = 0; k < len; k++)
            t->off[tmp[k].shard + 1]++;
        for (size_t i = 0; i < n; i++)
            t->off[i + 1] += t->off[i];
        size_t *at = malloc((n ? n : 1) * sizeof *at);
        ok = at != NULL;
        for (size_t i = 0; ok && i < n; i++)
            at[i] = t->off[i];
        for (size_t k = 0; ok && k < len; k++)
            t->iv[at[tmp[k].shard]++] = tmp[k].v;
        free(at);
    }
    free(first);
    free(last);
    free(tmp);
    if (!ok) {
        ivtab_free(t);
        return NULL;
    }
    return t;
}

/* The position of comm rank r: its own in the node's window, else ours
 * (the ranks move in lock-step: zp_mpi_next), as (epoch, position). */
static void pos_of(const zpi_mpi_peer *p, int r, uint32_t *e, uint64_t *pos)
{
    *e = p->epoch;
    *pos = p->pos;
    for (int k = 0; p->npos && k < p->nlocal; k++)
        if (p->local_rank_of[k] == r) {
            uint64_t v = __atomic_load_n(&p->npos[k][0], __ATOMIC_RELAXED);
            if (v) {
                v -= 1;
                *e = (uint32_t)(v >> 40);
                *pos = v & (((uint64_t)1 << 40) - 1);
            }
            return;
        }
}

static uint64_t p_next_use(void *user, size_t shard)
{
    zpi_mpi_peer *p = user;
    uint64_t best = UINT64_MAX;
    pthread_mutex_lock(&p->mu);
    /* a shard being served (by a rank of the node) is in use */
    for (int k = 0; p->npos && k < p->nlocal; k++)
        if (__atomic_load_n(&p->npos[k][1], __ATOMIC_RELAXED) == (uint64_t)shard + 1)
            best = 0;
    if (p->node_order && shard < p->n_shards && best) {
        /* distances from our position: epoch e's table covers the rest of
         * epoch e, the next epoch's table what follows */
        for (int k = 0; k < 2; k++) {
            const ivtab *t = p->tab[k];
            if (!t)
                continue;
            for (size_t j = t->off[shard]; j < t->off[shard + 1]; j++) {
                const struct iv *v = &t->iv[j];
                uint32_t e;
                uint64_t pos;
                pos_of(p, v->rank, &e, &pos);
                /* another node's reader needs our copy until its node has
                 * been sent it (this epoch), or, when its node never asks
                 * (it kept the shard from the epoch before), until its last
                 * use. Not until its first use at our position: its
                 * position is not ours (the ranks are in lock-step at the
                 * batches they deliver, not at the chunks they fetch), and
                 * a reader behind us that had not asked yet found the shard
                 * evicted: downloaded twice in the epoch (docs/storage.md,
                 * "A shard downloaded twice in an epoch") */
                if (p->node_of[v->rank] != p->node && v->served)
                    continue;
                uint64_t last = v->last;
                uint64_t at; /* its next use, as a global position of its stream */
                if (e < t->epoch)
                    at = (uint64_t)t->epoch * p->per + v->first;
                else if (e == t->epoch && pos <= last)
                    at = (uint64_t)t->epoch * p->per + (pos > v->first ? pos : v->first);
                else
                    continue;
                /* its stream runs beside ours (lock-step): it is as many
                 * samples away for us as for it */
                uint64_t its = (uint64_t)e * p->per + pos;
                uint64_t d = at - its;
                /* another node's use ranks after the node's own (an epoch
                 * later): its copy is kept with the room the node's own
                 * uses leave */
                if (p->node_of[v->rank] != p->node)
                    d += p->per;
                if (d < best)
                    best = d;
            }
        }
    }
    pthread_mutex_unlock(&p->mu);
    return best;
}

static void p_position(void *user, void *ctx, uint32_t epoch, uint64_t pos)
{
    zpi_mpi_peer *p = user;
    if (p->per && pos >= p->per) { /* an epoch's end: the next one's start */
        epoch += (uint32_t)(pos / p->per);
        pos %= p->per;
    }
    pthread_mutex_lock(&p->mu);
    p->epoch = epoch;
    p->pos = pos;
    pthread_mutex_unlock(&p->mu);
    for (int k = 0; p->npos && k < p->nlocal; k++)
        if (p->local_rank_of[k] == p->rank)
            __atomic_store_n(&p->npos[k][0], (((uint64_t)epoch << 40) | pos) + 1, __ATOMIC_RELAXED);
}

/* Service thread: the tables of our epoch and the next one. */
static int tables_progress(zpi_mpi_peer *p)
{
    pthread_mutex_lock(&p->mu);
    uint32_t e = p->epoch;
    int have = p->ws && p->node_order;
    int need = -1;
    for (uint32_t want = e; have && want <= e + 1 && need < 0; want++) {
        int found = 0;
        for (int k = 0; k < 2; k++)
            found |= p->tab[k] && p->tab[k]->epoch == want;
        if (!found)
            need = (int)(want - e);
    }
    pthread_mutex_unlock(&p->mu);
    if (need < 0 || p->tab_failed == (uint64_t)e + (uint64_t)need + 1)
        return 0;
    ivtab *t = ivtab_build(p, e + (uint32_t)need);
    if (!t) {
        p->tab_failed = (uint64_t)e + (uint64_t)need + 1; /* not again: the next_use is unknown */
        return 0;
    }
    pthread_mutex_lock(&p->mu);
    /* into a slot that is empty or holds neither our epoch nor the next
     * (one is: the table built was missing) */
    int k = 0;
    for (int j = 0; j < 2; j++)
        if (!p->tab[j] || p->tab[j]->epoch < p->epoch || p->tab[j]->epoch > p->epoch + 1) {
            k = j;
            break;
        }
    ivtab_free(p->tab[k]);
    p->tab[k] = t;
    pthread_mutex_unlock(&p->mu);
    return 1;
}

/* ------------------------------------------------------------ the fetcher's side */

/* Under mu: this rank's next read of shard (epoch, position), from the
 * node's tables; 0 when they do not know it. */
static int own_use_locked(const zpi_mpi_peer *p, size_t shard, uint32_t *epoch, uint64_t *pos)
{
    int found = 0;
    for (int k = 0; k < 2 && shard < p->n_shards; k++) {
        const ivtab *t = p->tab[k];
        if (!t || t->epoch < p->epoch)
            continue;
        for (size_t j = t->off[shard]; j < t->off[shard + 1]; j++) {
            const struct iv *v = &t->iv[j];
            if (v->rank != p->rank || (t->epoch == p->epoch && p->pos > v->last))
                continue;
            uint64_t at = t->epoch == p->epoch && p->pos > v->first ? p->pos : v->first;
            if (!found || t->epoch < *epoch || (t->epoch == *epoch && at < *pos)) {
                *epoch = t->epoch;
                *pos = at;
                found = 1;
            }
        }
    }
    return found;
}

static int p_request(void *user, void *ctx, size_t shard, uint64_t bytes, int fd,
                     void (*done)(void *, int), void *done_user)
{
    zpi_mpi_peer *p = user;
    pthread_mutex_lock(&p->mu);
    int dest = -1;
    if (p->sharing && !p->closing && p->owner && shard < p->n_shards && bytes < MAX_MSG) {
        int o = p->owner[shard];
        if (o >= 0 && o < p->size && p->node_of[o] != p->node)
            dest = o;
    }
    preq *q = dest >= 0 ? calloc(1, sizeof *q) : NULL;
    if (!q) {
        pthread_mutex_unlock(&p->mu);
        return -1; /* this node fetches it from storage */
    }
    q->id = ++p->next_id;
    uint32_t ue = UINT32_MAX;
    uint64_t up = 0; /* left 0 when not known */
    q->use_epoch = own_use_locked(p, shard, &ue, &up) ? ue : UINT64_MAX;
    q->use_pos = up;
    q->ctx = ctx;
    q->shard = shard;
    q->bytes = bytes;
    q->fd = fd;
    q->dest = dest;
    q->deadline = zpi_now() + p->timeout_s;
    q->done = done;
    q->done_user = done_user;
    q->next = p->reqs;
    p->reqs = q;
    pthread_mutex_unlock(&p->mu);
    return 0;
}

static void p_attach(void *user, void *ctx, zp_peer_serve_fn serve)
{
    zpi_mpi_peer *p = user;
    pthread_mutex_lock(&p->mu);
    if (p->n_ctx < MAX_CTX) {
        p->ctx[p->n_ctx] = ctx;
        p->serve[p->n_ctx] = serve;
        p->n_ctx++;
    }
    pthread_mutex_unlock(&p->mu);
}

static void p_detach(void *user, void *ctx)
{
    zpi_mpi_peer *p = user;
    pthread_mutex_lock(&p->mu);
    for (int k = 0; k < p->n_ctx; k++)
        if (p->ctx[k] == ctx) {
            p->ctx[k] = p->ctx[p->n_ctx - 1];
            p->serve[k] = p->serve[p->n_ctx - 1];
            p->n_ctx--;
            break;
        }
    /* nothing may call into ctx once we return: a serve() for it, or an
     * answer (or a timeout) being delivered, is waited for */
    while ((p->serving && p->serving_ctx == ctx) || p->in_done)
        pthread_cond_wait(&p->cv, &p->mu);
    /* its requests in flight end unanswered (their answers, if any come,
     * are dropped) */
    preq *mine = NULL;
    for (preq **pp = &p->reqs; *pp;) {
        if ((*pp)->ctx == ctx) {
            preq *q = *pp;
            *pp = q->next;
            q->next = mine;
            mine = q;
        } else {
            pp = &(*pp)->next;
        }
    }
    pthread_mutex_unlock(&p->mu);
    while (mine) {
        preq *q = mine;
        mine = q->next;
        q->done(q->done_user, 0);
        free(q);
    }
}

/* ------------------------------------------------------------ the service thread */

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* A done() callback taken off the list has returned. */
static void done_end(zpi_mpi_peer *p)
{
    pthread_mutex_lock(&p->mu);
    p->in_done--;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* Completed sends freed; 1 when none is left. */
static int sends_progress(zpi_mpi_peer *p)
{
    for (psend **pp = &p->sends; *pp;) {
        int flag = 0;
        MPI_Test(&(*pp)->r, &flag, MPI_STATUS_IGNORE);
        if (flag) {
            psend *s = *pp;
            *pp = s->next;
            free(s->buf);
            free(s);
        } else {
            pp = &(*pp)->next;
        }
    }
    return p->sends == NULL;
}

static int send_async(zpi_mpi_peer *p, void *buf, size_t len, int dest, int tag)
{
    psend *s = malloc(sizeof *s);
    if (!s) {
        free(buf);
        return -1;
    }
    s->buf = buf;
    if (MPI_Isend(buf, (int)len, MPI_BYTE, dest, tag, p->comm, &s->r) != MPI_SUCCESS) {
        free(buf);
        free(s);
        return -1;
    }
    s->next = p->sends;
    p->sends = s;
    return 0;
}

/* Our queued requests sent, expired ones failed. Returns the work done. */
static int requests_progress(zpi_mpi_peer *p)
{
    int work = 0;
    double now = zpi_now();
    preq *expired = NULL;
    pthread_mutex_lock(&p->mu);
    for (preq **pp = &p->reqs; *pp;) {
        preq *q = *pp;
        if (now > q->deadline) {
            *pp = q->next;
            q->next = expired;
            expired = q;
            p->in_done++;
            continue;
        }
        if (!q->sent) {
            uint64_t *m = malloc(REQ_WORDS * sizeof *m);
            if (m) {
                m[0] = q->id;
                m[1] = q->shard;
                m[2] = q->bytes;
                m[3] = q->use_epoch;
                m[4] = q->use_pos;
                if (send_async(p, m, REQ_WORDS * sizeof *m, q->dest, TAG_REQ) == 0)
                    q->sent = 1;
            }
            work = 1;
        }
        pp = &q->next;
    }
    pthread_mutex_unlock(&p->mu);
    while (expired) {
        preq *q = expired;
        expired = q->next;
        if (p->log) {
            char msg[256];
            zpi_fmt(msg, sizeof msg,
                    "shard %zu: rank %d (node %d) did not send it within %g s: downloading it "
                    "from storage",
                    q->shard, q->dest, p->node_of[q->dest], p->timeout_s);
            p->log(p->log_user, ZP_LOG_WARN, msg);
        }
        q->done(q->done_user, 0);
        free(q);
        done_end(p);
        work = 1;
    }
    return work;
}

/* This rank's "serving" slot in the node's window (its eviction keeps
 * the shard). */
static void set_serving(zpi_mpi_peer *p, uint64_t v)
{
    for (int k = 0; p->npos && k < p->nlocal; k++)
        if (p->local_rank_of[k] == p->rank)
            __atomic_store_n(&p->npos[k][1], v, __ATOMIC_RELAXED);
}

/* Under mu: shard was sent to rank `to` for its read in epoch `epoch`
 * (UINT64_MAX unknown): the readers of its node no longer need our copy in
 * that epoch, or, unknown, in the earliest epoch (of our two tables) in
 * which they had not been sent it. */
static void mark_served_locked(zpi_mpi_peer *p, size_t shard, int to, uint64_t epoch)
{
    if (shard >= p->n_shards || to < 0 || to >= p->size)
        return;
    for (int k = 0; epoch != UINT64_MAX && k < 2; k++) {
        ivtab *t = p->tab[k];
        if (!t || t->epoch != epoch)
            continue;
        for (size_t j = t->off[shard]; j < t->off[shard + 1]; j++)
            if (p->node_of[t->iv[j].rank] == p->node_of[to])
                t->iv[j].served = 1;
        return;
    }
    ivtab *t[2] = {p->tab[0], p->tab[1]};
    if (t[0] && t[1] && t[1]->epoch < t[0]->epoch) {
        ivtab *x = t[0];
        t[0] = t[1];
        t[1] = x;
    }
    for (int k = 0; k < 2; k++) {
        if (!t[k])
            continue;
        int marked = 0;
        for (size_t j = t[k]->off[shard]; j < t[k]->off[shard + 1]; j++) {
            struct iv *v = &t[k]->iv[j];
            if (p->node_of[v->rank] == p->node_of[to] && !v->served) {
                v->served = 1;
                marked = 1;
            }
        }
        if (marked)
            return;
    }
}

/* A request from another node: answered with the shard (through this
 * node's cache) or with a refusal. */
static int serve_one(zpi_mpi_peer *p, int answer)
{
    int flag = 0;
    MPI_Status s;
    MPI_Iprobe(MPI_ANY_SOURCE, TAG_REQ, p->comm, &flag, &s);
    if (!flag)
        return 0;
    uint64_t m[REQ_WORDS];
    MPI_Recv(m, (int)sizeof m, MPI_BYTE, s.MPI_SOURCE, TAG_REQ, p->comm, MPI_STATUS_IGNORE);
    zp_peer_use use = {s.MPI_SOURCE, m[3] < UINT32_MAX ? (uint32_t)m[3] : UINT32_MAX, m[4]};
    if (!answer || p->stall)
        return 1; /* closing (the asker has given up) or stalled (tests) */
    uint64_t bytes = m[2] < MAX_MSG ? m[2] : 0;
    uint64_t *buf = malloc(2 * sizeof *buf + bytes);
    if (!buf)
        return 1; /* unanswered: the asker times out */
    int ok = 0;
    pthread_mutex_lock(&p->mu);
    if (p->n_ctx > 0 && m[2] < MAX_MSG) {
        void *ctx = p->ctx[0];
        zp_peer_serve_fn serve = p->serve[0];
        p->serving = 1;
        p->serving_ctx = ctx;
        pthread_mutex_unlock(&p->mu);
        set_serving(p, m[1] + 1);
        ok = serve(ctx, (size_t)m[1], buf + 2, bytes, &use) == 0;
        set_serving(p, 0);
        pthread_mutex_lock(&p->mu);
        if (ok)
            mark_served_locked(p, (size_t)m[1], s.MPI_SOURCE, m[3]);
        p->serving = 0;
        p->serving_ctx = NULL;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    buf[0] = m[0];
    buf[1] = (uint64_t)ok;
    send_async(p, buf, 2 * sizeof *buf + (ok ? bytes : 0), s.MPI_SOURCE, TAG_ANS);
    return 1;
}

/* An answer to one of our requests: its bytes written into the request's
 * file; dropped when the request has ended meanwhile. */
static int receive_one(zpi_mpi_peer *p)
{
    int flag = 0, count = 0;
    MPI_Status s;
    MPI_Iprobe(MPI_ANY_SOURCE, TAG_ANS, p->comm, &flag, &s);
    if (!flag)
        return 0;
    MPI_Get_count(&s, MPI_BYTE, &count);
    char *buf = malloc(count > 16 ? (size_t)count : 16);
    if (!buf) {
        char b[16];
        MPI_Recv(b, 16, MPI_BYTE, s.MPI_SOURCE, TAG_ANS, p->comm, MPI_STATUS_IGNORE);
        return 1;
    }
    MPI_Recv(buf, count, MPI_BYTE, s.MPI_SOURCE, TAG_ANS, p->comm, MPI_STATUS_IGNORE);
    uint64_t h[2] = {0, 0};
    if (count >= 16)
        memcpy(h, buf, sizeof h);
    pthread_mutex_lock(&p->mu);
    preq *q = NULL;
    for (preq **pp = &p->reqs; *pp; pp = &(*pp)->next)
        if ((*pp)->id == h[0] && (*pp)->dest == s.MPI_SOURCE && (*pp)->sent) {
            q = *pp;
            *pp = q->next;
            p->in_done++;
            break;
        }
    pthread_mutex_unlock(&p->mu);
    if (q) {
        int ok = h[1] == 1 && (uint64_t)count == 16 + q->bytes;
        for (uint64_t at = 0; ok && at < q->bytes;) {
            ssize_t w = pwrite(q->fd, buf + 16 + at, (size_t)(q->bytes - at), (off_t)at);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                ok = 0;
            else
                at += (uint64_t)w;
        }
        if (ok && ftruncate(q->fd, (off_t)q->bytes) != 0)
            ok = 0;
        q->done(q->done_user, ok);
        free(q);
        done_end(p);
    }
    free(buf);
    return 1;
}

static void *service_main(void *arg)
{
    zpi_mpi_peer *p = arg;
    double idle = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop)
            break;
        int work = requests_progress(p);
        work |= serve_one(p, 1);
        work |= receive_one(p);
        sends_progress(p);
        work |= tables_progress(p);
        /* idle: back off up to 2 ms (a rank's share of a busy node's cores) */
        idle = work ? 0 : (idle < 1e-4 ? 1e-4 : idle * 2 > 2e-3 ? 2e-3 : idle * 2);
        if (idle > 0)
            sleep_s(idle);
    }
    return NULL;
}

/* ------------------------------------------------------------ create / destroy */

const zp_peer_source *zpi_mpi_peer_source(zpi_mpi_peer *p) { return p ? &p->src : NULL; }

/* Every rank's outcome: local, or on a rank that succeeded when another
 * failed, that rank's status (mpi_peer.c sits below mpi_comm.c: the
 * handle's own agreement is not called from here). */
static zp_status agree_ok(zp_mpi *m, zp_status local)
{
    int in[2] = {local != ZP_OK ? (int)local : 0, local != ZP_OK ? m->rank : -1}, out[2] = {0, -1};
    if (MPI_Allreduce(in, out, 1, MPI_2INT, MPI_MAXLOC, m->comm) != MPI_SUCCESS)
        return local != ZP_OK ? local : zpi_mpi_fail(m, ZP_ERR_MPI, "MPI_Allreduce (shard sharing)");
    if (local == ZP_OK && out[0] != 0)
        return zpi_mpi_fail(m, (zp_status)out[0], "rank %d could not start the shard sharing", out[1]);
    return local;
}

/* The node's positions in a window of shared memory (one uint64 per
 * rank); left without (NULL: every rank taken as at our position) where
 * the node's ranks do not share memory (node_group_size over machines). */
static zp_status shared_positions(zp_mpi *m, zpi_mpi_peer *p)
{
    zp_status st = zpi_mpi_check(m, MPI_Comm_dup(m->node_comm, &p->ncomm),
                                 "MPI_Comm_dup (the node's positions)");
    if (st != ZP_OK)
        return st;
    MPI_Comm_set_errhandler(p->ncomm, MPI_ERRORS_RETURN);
    p->nlocal = m->local_size;
    p->local_rank_of = malloc((size_t)p->nlocal * sizeof *p->local_rank_of);
    p->npos = calloc((size_t)p->nlocal, sizeof *p->npos);
    int ok = p->local_rank_of && p->npos;
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, p->ncomm);
    if (!all_ok)
        goto without;
    if ((st = zpi_mpi_check(m, MPI_Allgather(&m->rank, 1, MPI_INT, p->local_rank_of, 1, MPI_INT,
                                             p->ncomm),
                            "MPI_Allgather (the node's ranks)")) != ZP_OK)
        return st;
    uint64_t *base = NULL;
    int rc = MPI_Win_allocate_shared((MPI_Aint)(2 * sizeof(uint64_t)), (int)sizeof(uint64_t),
                                     MPI_INFO_NULL, p->ncomm, &base, &p->win);
    ok = rc == MPI_SUCCESS;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, p->ncomm);
    if (!all_ok) {
        if (ok)
            MPI_Win_free(&p->win);
        p->win = MPI_WIN_NULL;
        goto without;
    }
    base[0] = base[1] = 0;
    for (int k = 0; k < p->nlocal; k++) {
        MPI_Aint sz;
        int du;
        void *b = NULL;
        if (MPI_Win_shared_query(p->win, k, &sz, &du, &b) != MPI_SUCCESS || !b)
            ok = 0;
        p->npos[k] = b;
    }
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, p->ncomm);
    MPI_Barrier(p->ncomm); /* every rank's slot is 0 before any is read */
    if (all_ok)
        return ZP_OK;
    MPI_Win_free(&p->win);
    p->win = MPI_WIN_NULL;
without:
    free(p->npos);
    p->npos = NULL;
    return ZP_OK;
}

zp_status zpi_mpi_peer_create(zp_mpi *m, zpi_mpi_peer **out)
{
    *out = NULL;
    int provided = 0;
    MPI_Query_thread(&provided);
    zp_status local = ZP_OK;
    /* one node of several ranks shares its order (eviction), several nodes
     * their shards too */
    int want = (m->cfg.peer_sharing || m->cfg.node_order) && m->size > 1 &&
               provided == MPI_THREAD_MULTIPLE;
    zpi_mpi_peer *p = want ? calloc(1, sizeof *p) : NULL;
    if (want && (!p || !(p->node_of = malloc((size_t)m->size * sizeof *p->node_of))))
        local = zpi_mpi_fail(m, ZP_ERR_NOMEM, "out of memory for the shard sharing between nodes");
    /* every rank decides alike: same settings (agreed), same node count,
     * same thread level (the launcher's) */
    zp_status st = agree_ok(m, local);
    if (st != ZP_OK || !want) {
        if (p)
            free(p->node_of);
        free(p);
        if (st == ZP_OK && (m->cfg.peer_sharing || m->cfg.node_order) && m->size > 1 &&
            m->rank == 0 && m->cfg.log)
            m->cfg.log(m->cfg.log_user, ZP_LOG_INFO,
                       "shards are not shared between nodes nor evicted by the node's order: "
                       "MPI was initialised without MPI_THREAD_MULTIPLE");
        return st;
    }
    p->rank = m->rank;
    p->size = m->size;
    p->node = m->node;
    p->timeout_s = m->cfg.peer_timeout_s;
    p->stall = m->cfg.peer_stall_node >= 0 && m->cfg.peer_stall_node == m->node;
    p->log = m->cfg.log;
    p->log_user = m->cfg.log_user;
    p->comm = MPI_COMM_NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->src.request = p_request;
    p->src.attach = p_attach;
    p->src.detach = p_detach;
    p->src.position = p_position;
    p->src.next_use = p_next_use;
    p->src.user = p;
    p->node_order = m->cfg.node_order;
    p->sharing = m->cfg.peer_sharing;
    p->ncomm = MPI_COMM_NULL;
    p->win = MPI_WIN_NULL;
    st = zpi_mpi_check(m, MPI_Allgather(&m->node, 1, MPI_INT, p->node_of, 1, MPI_INT, m->comm),
                       "MPI_Allgather (node of each rank)");
    if (st == ZP_OK)
        st = zpi_mpi_check(m, MPI_Comm_dup(m->comm, &p->comm), "MPI_Comm_dup (shard sharing)");
    if (st == ZP_OK)
        MPI_Comm_set_errhandler(p->comm, MPI_ERRORS_RETURN);
    if (st == ZP_OK)
        st = shared_positions(m, p);
    if (st == ZP_OK) {
        local = pthread_create(&p->th, NULL, service_main, p) == 0
                    ? ZP_OK
                    : zpi_mpi_fail(m, ZP_ERR_NOMEM, "rank %d: cannot start the shard sharing's thread",
                                   m->rank);
        p->started = local == ZP_OK;
        st = agree_ok(m, local);
    }
    if (st != ZP_OK) {
        zpi_mpi_peer_destroy(p);
        return st;
    }
    *out = p;
    return ZP_OK;
}

zp_status zpi_mpi_peer_set_owners(zp_mpi *m, zpi_mpi_peer *p, const zp_dataset *ds,
                                  const zp_worksource_config *wc)
{
    size_t n = zp_dataset_num_shards(ds);
    int32_t *own = malloc((n ? n : 1) * sizeof *own);
    zp_worksource **ws = calloc((size_t)m->size, sizeof *ws);
    zp_status local = ZP_OK;
    if (!own || !ws)
        local = zpi_mpi_fail(m, ZP_ERR_NOMEM, "out of memory for the owners of %zu shards", n);
    for (size_t i = 0; own && i < n; i++)
        own[i] = -1;
    for (int r = 0; local == ZP_OK && r < m->size; r++) {
        zp_worksource_config c = *wc;
        c.rank = (uint32_t)r;
        c.world_size = (uint32_t)m->size;
        if (zp_worksource_create((zp_dataset *)ds, &c, &ws[r]) != ZP_OK)
            local = zpi_mpi_fail(m, ZP_ERR_INVALID, "the owners of the shards: rank %d's plan: %s", r,
                                 zp_worksource_errmsg(ws[r]));
    }
    if (local == ZP_OK) {
        /* position by position over the ranks: the first reader of each shard */
        uint64_t per = zp_worksource_samples_per_rank(ws[0]);
        size_t left = n;
        for (uint64_t pos = 0; pos < per && left; pos++)
            for (int r = 0; r < m->size && left; r++) {
                zp_sample s;
                if (zp_worksource_sample(ws[r], 0, pos, &s) == ZP_OK && s.shard < n &&
                    own[s.shard] < 0) {
                    own[s.shard] = r;
                    left--;
                }
            }
        for (size_t i = 0; i < n; i++)
            if (own[i] < 0)
                own[i] = (int32_t)(i % (size_t)m->size);
    }
    zp_status st = agree_ok(m, local);
    if (st != ZP_OK || p->owner) {
        /* the first dataset agreed keeps the sharing (docs/storage.md) */
        for (int r = 0; ws && r < m->size; r++)
            zp_worksource_destroy(ws[r]);
        free(ws);
        free(own);
        return st;
    }
    uint64_t per = zp_worksource_samples_per_rank(ws[0]);
    pthread_mutex_lock(&p->mu);
    p->owner = own;
    p->n_shards = n;
    p->per = per;
    p->ws = ws; /* the service thread's from now on (tables_progress) */
    pthread_mutex_unlock(&p->mu);
    return ZP_OK;
}

/* Collective (zp_mpi_destroy): the shutdown described above. */
void zpi_mpi_peer_destroy(zpi_mpi_peer *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->closing = 1;
    pthread_mutex_unlock(&p->mu);
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        p->stop = 1;
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->th, NULL);
    }
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && p->comm != MPI_COMM_NULL) {
        /* 1: answer until every rank closes; 2: drain until every rank's
         * sends are done. On this thread now (the service thread ended). */
        MPI_Request b;
        int phase = 1, flag = 0;
        MPI_Ibarrier(p->comm, &b);
        for (;;) {
            int work = requests_progress(p); /* fails what is left (closing) */
            work |= serve_one(p, phase == 1);
            work |= receive_one(p);
            int drained = sends_progress(p);
            MPI_Test(&b, &flag, MPI_STATUS_IGNORE);
            if (flag && phase == 1) {
                phase = 2;
                flag = 0;
                MPI_Request b2;
                /* enter the second barrier once our sends are done */
                while (!sends_progress(p)) {
                    serve_one(p, 0);
                    receive_one(p);
                    sleep_s(1e-4);
                }
                MPI_Ibarrier(p->comm, &b2);
                b = b2;
                continue;
            }
            if (flag && phase == 2 && drained)
                break;
            if (!work)
                sleep_s(2e-4);
        }
        MPI_Comm_free(&p->comm);
    }
    /* requests left (none after detach): failed */
    while (p->reqs) {
        preq *q = p->reqs;
        p->reqs = q->next;
        q->done(q->done_user, 0);
        free(q);
    }
    while (p->sends) {
        psend *s = p->sends;
        p->sends = s->next;
        free(s->buf);
        free(s);
    }
    if (!fin && p->win != MPI_WIN_NULL)
        MPI_Win_free(&p->win);
    if (!fin && p->ncomm != MPI_COMM_NULL)
        MPI_Comm_free(&p->ncomm);
    for (int r = 0; p->ws && r < p->size; r++)
        zp_worksource_destroy(p->ws[r]);
    free(p->ws);
    ivtab_free(p->tab[0]);
    ivtab_free(p->tab[1]);
    free(p->npos);
    free(p->local_rank_of);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->owner);
    free(p->node_of);
    free(p);
}
