/* mpi_watchdog.c - threads under a launcher (the binding of each rank and
 * the ranks of its node sharing it: zp_mpi_suggested_threads, the report's
 * oversubscribed nodes) and the stall watchdog across ranks: a stuck
 * rank's pipeline watchdog (zephon/watchdog.h) sends a notice to the root
 * with MPI_Isend; the root receives it with MPI_Iprobe while it waits in
 * zp_mpi_next's agreement (no collective is added to a step), logs it and
 * lists it in the cluster report. */
#include <inttypes.h>
#include <jansson.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpi_internal.h"

/* The tag of stall notices on the handle's communicator (its own
 * duplicate: no other point-to-point message uses it). */
#define WD_TAG 23017

/* ------------------------------------------------------------ binding */

size_t zpi_mpi_mask_bytes(void) { return sizeof(cpu_set_t); }

zp_status zpi_mpi_binding(zp_mpi *m, void *masks)
{
    cpu_set_t mine;
    CPU_ZERO(&mine);
    if (sched_getaffinity(0, sizeof mine, &mine) != 0 || CPU_COUNT(&mine) == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        for (long i = 0; i < n && i < CPU_SETSIZE; i++)
            CPU_SET((int)i, &mine);
    }
    m->bind_cores = CPU_COUNT(&mine) > 0 ? CPU_COUNT(&mine) : 1;
    m->bind_share = 1;
    m->node_cores = m->bind_cores;
    cpu_set_t *all = masks;
    if (m->solo || m->local_size <= 1 || !all)
        return ZP_OK;
    zp_status st = zpi_mpi_check(m, MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine,
                                            MPI_BYTE, m->node_comm),
                           "MPI_Allgather (CPU bindings of the node's ranks)");
    if (st == ZP_OK) {
        cpu_set_t uni, x;
        CPU_ZERO(&uni);
        int share = 0;
        for (int j = 0; j < m->local_size; j++) {
            CPU_AND(&x, &mine, &all[j]);
            share += CPU_COUNT(&x) > 0;
            CPU_OR(&uni, &uni, &all[j]);
        }
        m->bind_share = share > 0 ? share : 1;
        m->node_cores = CPU_COUNT(&uni);
    }
    return st;
}

int zp_mpi_suggested_threads(const zp_mpi *m, int *cores, int *sharing, int *node_cores)
{
    int c = m ? m->bind_cores : 1, s = m ? m->bind_share : 1;
    if (c < 1)
        c = 1;
    if (s < 1)
        s = 1;
    if (cores)
        *cores = c;
    if (sharing)
        *sharing = s;
    if (node_cores)
        *node_cores = m && m->node_cores > 0 ? m->node_cores : c;
    return c / s > 0 ? c / s : 1;
}

/* ------------------------------------------------------------ notices */

const char *zp_mpi_stall_text(const zp_mpi_stall *s, char *buf, size_t cap)
{
    if (!buf || !cap)
        return buf;
    buf[0] = '\0';
    if (!s)
        return buf;
    size_t len = 0;
    zpi_mpi_append(buf, cap, &len, "rank %d: no batch for %.1f s", s->rank, s->waited);
    if (s->state < 0 || !s->op[0]) {
        zpi_mpi_append(buf, cap, &len, ": no task busy");
        return buf;
    }
    zpi_mpi_append(buf, cap, &len, ": %s: %s", s->op, zp_task_state_name((zp_task_state)s->state));
    if (s->shard >= 0)
        zpi_mpi_append(buf, cap, &len, " shard '%s' (#%" PRId64 "%s)", s->shard_name, s->shard,
                       s->remote ? (s->state == ZP_TASK_LOADING ? ", remote: downloading" : ", remote")
                                 : "");
    if (s->record >= 0)
        zpi_mpi_append(buf, cap, &len, " record %" PRId64, s->record);
    zpi_mpi_append(buf, cap, &len, " for %.1f s", s->seconds);
    return buf;
}

static void stall_of(zp_mpi_stall *s, int rank, const zp_watchdog_report *r)
{
    memset(s, 0, sizeof *s);
    s->rank = rank;
    s->waited = s->longest_wait = r->waited;
    s->busy = r->tasks_busy;
    s->state = -1;
    s->shard = s->record = -1;
    if (r->n_tasks) {
        const zp_task_activity *t = &r->tasks[0];
        zpi_fmt(s->op, sizeof s->op, "%s", t->op);
        s->state = (int32_t)t->state;
        s->shard = t->shard;
        s->record = t->record;
        s->remote = t->remote;
        s->seconds = t->seconds;
        zpi_fmt(s->shard_name, sizeof s->shard_name, "%s", t->shard_name ? t->shard_name : "");
    }
}

/* Root: fold notice s into the list (one entry per rank); log it when it
 * came from another rank. */
static void note(zp_mpi *m, const zp_mpi_stall *s, int live)
{
    zp_mpi_stall *e = NULL;
    for (size_t i = 0; i < m->n_stalls; i++)
        if (m->stalls[i].rank == s->rank)
            e = &m->stalls[i];
    if (!e) {
        if (m->n_stalls == m->cap_stalls) {
            size_t cap = m->cap_stalls ? 2 * m->cap_stalls : 8;
            zp_mpi_stall *a = realloc(m->stalls, cap * sizeof *a);
            if (!a)
                return; /* the notice is lost; the run goes on */
            m->stalls = a;
            m->cap_stalls = cap;
        }
        e = &m->stalls[m->n_stalls++];
        *e = *s;
        e->notices = 0;
        e->live = 0;
        e->learned = zpi_now() - m->t_create;
    } else {
        double longest = e->longest_wait > s->waited ? e->longest_wait : s->waited;
        uint32_t n = e->notices, l = e->live;
        double learned = e->learned;
        *e = *s;
        e->longest_wait = longest;
        e->notices = n;
        e->live = l;
        e->learned = learned;
    }
    e->notices++;
    e->live += live != 0;
    if (m->cfg.log && s->rank != m->rank) {
        char line[512], msg[600];
        zp_mpi_stall_text(s, line, sizeof line);
        zpi_fmt(msg, sizeof msg, "watchdog: %s%s", line, live ? "" : " (received late)");
        m->cfg.log(m->cfg.log_user, ZP_LOG_WARN, msg);
    }
}

/* The pipeline's watchdog fired (inside zp_pipeline_next, on the thread
 * that calls the handle). */
static void on_watchdog(void *user, const zp_watchdog_report *r)
{
    zp_mpi *m = user;
    zp_mpi_stall s;
    stall_of(&s, m->rank, r);
    if (m->solo || m->rank == m->cfg.root) {
        note(m, &s, 1);
        return;
    }
    if (m->wd_sent >= ZP_MPI_STALL_NOTICES)
        return;
    if (!m->wd_out) {
        m->wd_out = calloc(ZP_MPI_STALL_NOTICES, sizeof *m->wd_out);
        m->wd_req = calloc(ZP_MPI_STALL_NOTICES, sizeof *m->wd_req);
        if (!m->wd_out || !m->wd_req) {
            free(m->wd_out);
            free(m->wd_req);
            m->wd_out = NULL;
            m->wd_req = NULL;
            return;
        }
    }
    m->wd_out[m->wd_sent] = s;
    if (MPI_Isend(&m->wd_out[m->wd_sent], (int)sizeof s, MPI_BYTE, m->cfg.root, WD_TAG, m->comm,
                  &m->wd_req[m->wd_sent]) == MPI_SUCCESS)
        m->wd_sent++;
}

void zpi_mpi_watch(zp_mpi *m, zp_pipeline *p)
{
    if (p && !zp_pipeline_watchdog_hook(p))
        (void)zp_pipeline_on_watchdog(p, on_watchdog, m);
}

/* Root: receive one notice from src (blocking: it was sent). */
static void recv_one(zp_mpi *m, int src, int live)
{
    zp_mpi_stall s;
    MPI_Status stt;
    if (MPI_Recv(&s, (int)sizeof s, MPI_BYTE, src, WD_TAG, m->comm, &stt) != MPI_SUCCESS)
        return;
    s.op[sizeof s.op - 1] = '\0';
    s.shard_name[sizeof s.shard_name - 1] = '\0';
    s.rank = stt.MPI_SOURCE;
    if (m->wd_recv && stt.MPI_SOURCE >= 0 && stt.MPI_SOURCE < m->size)
        m->wd_recv[stt.MPI_SOURCE]++;
    note(m, &s, live);
}

/* Root: the notices that have arrived. */
static void poll_notices(zp_mpi *m)
{
    for (;;) {
        int flag = 0;
        MPI_Status stt;
        if (MPI_Iprobe(MPI_ANY_SOURCE, WD_TAG, m->comm, &flag, &stt) != MPI_SUCCESS || !flag)
            return;
        recv_one(m, stt.MPI_SOURCE, 1);
    }
}

int zpi_mpi_wait_step(zp_mpi *m, MPI_Request *req)
{
    if (m->solo)
        return MPI_SUCCESS;
    if (m->rank != m->cfg.root) {
        if (m->wd_sent) { /* let finished sends go */
            int done = 0;
            MPI_Testall((int)m->wd_sent, m->wd_req, &done, MPI_STATUSES_IGNORE);
        }
        return MPI_Wait(req, MPI_STATUS_IGNORE);
    }
    for (;;) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || done)
            return rc;
        poll_notices(m);
        /* give the core up between polls, as MPI_Wait does when ranks
         * share cores: the root must not slow the ranks it waits for */
        sched_yield();
    }
}

void zpi_mpi_watch_drain(zp_mpi *m, const zp_mpi_rank_stats *ranks)
{
    if (m->solo || !m->wd_recv)
        return;
    for (int i = 0; i < m->size; i++) {
        uint32_t want = ranks[i].stall_notices;
        if (want > ZP_MPI_STALL_NOTICES)
            want = ZP_MPI_STALL_NOTICES;
        while (i != m->rank && m->wd_recv[i] < want)
            recv_one(m, i, 0);
    }
}

void zpi_mpi_watch_release(zp_mpi *m)
{
    int fin = 0;
    MPI_Finalized(&fin);
    if (m->wd_ready && !fin && !m->solo && m->comm != MPI_COMM_NULL) {
        /* every rank's count of notices sent to the root, which receives
         * those still in flight; then every send is complete */
        uint32_t *sent = m->wd_recv ? m->wd_recv + m->size : NULL;
        if (MPI_Gather(&m->wd_sent, 1, MPI_UINT32_T, sent, 1, MPI_UINT32_T, m->cfg.root, m->comm) ==
                MPI_SUCCESS &&
            sent) {
            for (int i = 0; i < m->size; i++)
                while (i != m->rank && m->wd_recv[i] < sent[i])
                    recv_one(m, i, 0);
        }
        if (m->wd_sent)
            MPI_Waitall((int)m->wd_sent, m->wd_req, MPI_STATUSES_IGNORE);
    }
    m->wd_ready = 0;
    free(m->wd_out);
    free(m->wd_req);
    free(m->wd_recv);
    free(m->stalls);
    m->wd_out = NULL;
    m->wd_req = NULL;
    m->wd_recv = NULL;
    m->stalls = NULL;
    m->n_stalls = m->cap_stalls = 0;
    m->wd_sent = 0;
}

size_t zp_mpi_stalls(const zp_mpi *m, const zp_mpi_stall **out)
{
    if (out)
        *out = m ? m->stalls : NULL;
    return m ? m->n_stalls : 0;
}

/* ------------------------------------------------------------ the report */

static const char *rank_host(const zp_cluster_report *r, int i)
{
    return i >= 0 && i < r->size ? r->hosts + (size_t)i * ZPI_MPI_HOST : "";
}

static const char *node_host(const zp_cluster_report *r, int j)
{
    if (j < 0 || j >= r->nodes || r->node_off[j] == r->node_off[j + 1])
        return "";
    return rank_host(r, r->node_list[r->node_off[j]]);
}

void zpi_mpi_watch_report(zp_mpi *m, zp_cluster_report *r)
{
    r->stalls_total = m->n_stalls;
    r->n_stalls = m->n_stalls < 64 ? m->n_stalls : 64;
    if (r->n_stalls && (r->stalls = malloc(r->n_stalls * sizeof *r->stalls)))
        memcpy(r->stalls, m->stalls, r->n_stalls * sizeof *r->stalls);
    else
        r->n_stalls = 0;
    /* nodes whose ranks run more threads than their bindings' cores */
    size_t len = 0;
    int shown = 0, more = 0;
    r->oversub[0] = '\0';
    for (int j = 0; j < r->nodes; j++) {
        uint64_t threads = 0;
        uint32_t cores = 0;
        int ranks = 0;
        for (int k = r->node_off[j]; k < r->node_off[j + 1]; k++) {
            const zp_mpi_rank_stats *s = &r->ranks[r->node_list[k]];
            if (!s->valid)
                continue;
            threads += s->threads;
            ranks++;
            if (s->node_cores > cores)
                cores = s->node_cores;
        }
        if (!cores || threads <= cores)
            continue;
        if (shown == 8) {
            more++;
            continue;
        }
        zpi_mpi_append(r->oversub, sizeof r->oversub, &len,
                       "%snode %d (%s): %llu threads of %d rank%s on %u core%s", shown ? "; " : "", j,
                       node_host(r, j), (unsigned long long)threads, ranks,
                       ranks == 1 ? "" : "s", cores, cores == 1 ? "" : "s");
        shown++;
    }
    if (more)
        zpi_mpi_append(r->oversub, sizeof r->oversub, &len, "; %d more node%s", more,
                       more == 1 ? "" : "s");
}

size_t zp_cluster_report_stalls(const zp_cluster_report *r, const zp_mpi_stall **out,
                                size_t *total)
{
    if (out)
        *out = r ? r->stalls : NULL;
    if (total)
        *total = r ? r->stalls_total : 0;
    return r ? r->n_stalls : 0;
}

const char *zp_cluster_report_oversubscribed(const zp_cluster_report *r)
{
    return r ? r->oversub : "";
}

void zpi_mpi_watch_text(const zp_cluster_report *r, zpi_sbuf *b)
{
    if (r->oversub[0])
        zpi_sb_printf(b, "warning: oversubscribed: %s (threads per rank: zephon run --threads, "
                         "docs/mpi.md)\n",
                      r->oversub);
    if (!r->n_stalls)
        return;
    zpi_sb_printf(b, "\nstalls (watchdog): %zu rank%s waited a watchdog period for a batch\n",
                  r->stalls_total, r->stalls_total == 1 ? "" : "s");
    char line[512];
    for (size_t i = 0; i < r->n_stalls; i++) {
        const zp_mpi_stall *s = &r->stalls[i];
        zpi_sb_printf(b, "  %s (%s; %u notice%s, longest wait %.1f s)\n",
                      zp_mpi_stall_text(s, line, sizeof line),
                      rank_host(r, s->rank), s->notices,
                      s->notices == 1 ? "" : "s", s->longest_wait);
    }
    if (r->stalls_total > r->n_stalls)
        zpi_sb_printf(b, "  ... %zu more ranks\n", r->stalls_total - r->n_stalls);
}

void zpi_mpi_watch_html(const zp_cluster_report *r, zpi_sbuf *b)
{
    if (r->oversub[0]) {
        zpi_sb_puts(b, "<p class=\"warn\"><b>Oversubscribed:</b> ");
        zpi_sb_html(b, r->oversub);
        zpi_sb_puts(b, "</p>\n");
    }
    if (!r->n_stalls)
        return;
    zpi_sb_printf(b, "<h2>Stalls (watchdog): %zu rank%s</h2>\n<ul>\n", r->stalls_total,
                  r->stalls_total == 1 ? "" : "s");
    char line[512];
    for (size_t i = 0; i < r->n_stalls; i++) {
        zpi_sb_puts(b, "<li>");
        zpi_sb_html(b, zp_mpi_stall_text(&r->stalls[i], line, sizeof line));
        zpi_sb_puts(b, "</li>\n");
    }
    zpi_sb_puts(b, "</ul>\n");
}

void zpi_mpi_watch_json(const zp_cluster_report *r, struct json_t *obj)
{
    json_t *a = json_array();
    for (size_t i = 0; i < r->n_stalls; i++) {
        const zp_mpi_stall *s = &r->stalls[i];
        json_t *o = json_object();
        json_object_set_new(o, "rank", json_integer(s->rank));
        json_object_set_new(o, "host", json_string(rank_host(r, s->rank)));
        json_object_set_new(o, "waited_s", json_real(s->waited));
        json_object_set_new(o, "longest_wait_s", json_real(s->longest_wait));
        json_object_set_new(o, "notices", json_integer(s->notices));
        json_object_set_new(o, "live_notices", json_integer(s->live));
        json_object_set_new(o, "learned_s", json_real(s->learned));
        json_object_set_new(o, "op", json_string(s->op));
        json_object_set_new(o, "state", json_string(s->state < 0 ? "none"
                                                    : zp_task_state_name((zp_task_state)s->state)));
        json_object_set_new(o, "shard", json_integer(s->shard));
        json_object_set_new(o, "shard_name", json_string(s->shard_name));
        json_object_set_new(o, "remote", json_boolean(s->remote));
        json_object_set_new(o, "record", json_integer(s->record));
        json_object_set_new(o, "seconds", json_real(s->seconds));
        json_object_set_new(o, "busy_tasks", json_integer(s->busy));
        json_array_append_new(a, o);
    }
    json_object_set_new(obj, "stalls", a);
    json_object_set_new(obj, "stalled_ranks", json_integer((json_int_t)r->stalls_total));
    json_object_set_new(obj, "oversubscribed", json_string(r->oversub));
}
