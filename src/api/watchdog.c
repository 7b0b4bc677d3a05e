/*
 * watchdog.c - the stall watchdog (zephon/watchdog.h, watchdog.h): while
 * the consumer waits in zp_pipeline_next(), the output queue calls fire()
 * after each period (outq.h, zpi_outq_watch); it takes the engine's picture
 * of every busy task and queue, logs it and calls the user's hook.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "api/watchdog.h"

const char *zp_task_state_name(zp_task_state s)
{
    switch (s) {
    case ZP_TASK_IDLE: return "idle";
    case ZP_TASK_LOADING: return "loading";
    case ZP_TASK_READING: return "reading";
    case ZP_TASK_RUNNING: return "running";
    case ZP_TASK_PACKING: return "packing";
    }
    return "?";
}

void zpi_watchdog_fill(const zpi_watchdog *wd, double waited, zp_watchdog_report *r)
{
    memset(r, 0, sizeof *r);
    r->waited = waited;
    if (!wd->q)
        return;
    r->seconds = wd->seconds;
    zp_pipeline_counts c;
    zpi_outq_counts(wd->q, &c);
    r->batches = c.batches;
    if (wd->engine)
        zpi_engine_activity(wd->engine, zpi_now_ns(), r);
}

/* One task as the log says it: "fetch: loading shard 'a.jsonl' (#2, remote:
 * downloading) for 3.0 s". */
static int task_text(const zp_task_activity *t, char *buf, size_t cap)
{
    char shard[320] = "", rec[48] = "";
    if (t->shard >= 0)
        snprintf(shard, sizeof shard, " shard '%s' (#%" PRId64 "%s)",
                 t->shard_name ? t->shard_name : "?", t->shard,
                 t->remote ? (t->state == ZP_TASK_LOADING ? ", remote: downloading" : ", remote")
                           : "");
    if (t->record >= 0)
        snprintf(rec, sizeof rec, " record %" PRId64, t->record);
    const char *what = "";
    switch (t->state) {
    case ZP_TASK_LOADING: what = "loading"; break;
    case ZP_TASK_READING: what = "reading"; break;
    case ZP_TASK_RUNNING: what = t->record >= 0 ? "running on" : "running on a chunk from"; break;
    case ZP_TASK_PACKING: what = "packing a chunk from"; break;
    case ZP_TASK_IDLE: what = "idle"; break;
    }
    return snprintf(buf, cap,
                    "watchdog: thread %u: %s: %s%s%s for %.1f s (chunk at epoch %u position "
                    "%" PRIu64 ", %.1f s)\n",
                    t->thread, t->op, what, shard, rec, t->seconds, t->epoch, t->position,
                    t->chunk_seconds);
}

size_t zp_watchdog_report_text(const zp_watchdog_report *r, char *buf, size_t cap)
{
    size_t len = 0;
    char line[1024];
#define PUT(...)                                                                          \
    do {                                                                                  \
        int n_ = snprintf(line, sizeof line, __VA_ARGS__);                                \
        if (n_ > 0) {                                                                     \
            if (buf && len < cap)                                                         \
                snprintf(buf + len, cap - len, "%s", line);                               \
            len += (size_t)n_ < sizeof line ? (size_t)n_ : sizeof line - 1;               \
        }                                                                                 \
    } while (0)
    if (buf && cap)
        buf[0] = '\0';
    if (!r)
        return 0;
    PUT("watchdog: no batch for %.1f s (the consumer is waiting in zp_pipeline_next; %" PRIu64
        " batches delivered; %u of %u threads busy)\n",
        r->waited, r->batches, r->tasks_busy, r->threads);
    for (uint32_t i = 0; i < r->n_tasks; i++) {
        task_text(&r->tasks[i], line, sizeof line);
        if (buf && len < cap)
            snprintf(buf + len, cap - len, "%s", line);
        len += strlen(line);
    }
    if (r->tasks_busy > r->n_tasks)
        PUT("watchdog: ... %u more busy tasks\n", r->tasks_busy - r->n_tasks);
    char q[768] = "";
    size_t ql = 0;
    for (uint32_t i = 0; i < r->n_ops && ql < sizeof q; i++) {
        int n = snprintf(q + ql, sizeof q - ql, "%s%s %u queued, %u/%u running", i ? "; " : "",
                         r->ops[i].name, r->ops[i].queued, r->ops[i].running,
                         r->ops[i].parallelism);
        if (n > 0)
            ql += (size_t)n;
    }
    PUT("watchdog: queues: %s; prefetch %u queued, %u running; %u chunks in flight; %u batches "
        "ready\n",
        q, r->prefetch_queued, r->prefetch_running, r->chunks_in_flight, r->batches_ready);
#undef PUT
    return len;
}

/* The output queue's callback (outq.h): the consumer has waited waited_ns
 * in this next(). */
static void fire(void *user, uint64_t waited_ns)
{
    zpi_watchdog *wd = user;
    zp_watchdog_report *r = &wd->report;
    zpi_watchdog_fill(wd, (double)waited_ns / 1e9, r);
    wd->fired++;
    if (wd->log) {
        char text[8192];
        zp_watchdog_report_text(r, text, sizeof text);
        /* one log call per line */
        for (char *s = text, *nl; *s; s = nl + 1) {
            nl = strchr(s, '\n');
            if (!nl)
                break;
            *nl = '\0';
            wd->log(wd->log_user, ZP_LOG_WARN, s);
        }
    }
    if (wd->fn)
        wd->fn(wd->user, r);
}

void zpi_watchdog_arm(zpi_watchdog *wd, zpi_outq *q, zpi_engine *e, double seconds, zp_log_fn log,
                      void *log_user)
{
    wd->seconds = seconds;
    wd->log = log;
    wd->log_user = log_user;
    wd->q = q;
    wd->engine = e;
    if (seconds > 0)
        zpi_outq_watch(q, (uint64_t)(seconds * 1e9), fire, wd);
}
