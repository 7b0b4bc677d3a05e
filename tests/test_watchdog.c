/* test_watchdog.c - the stall watchdog (zephon/watchdog.h): a map
 * transform that sleeps on one record is named in the log (operator,
 * shard, record, how long) with the queue depths, the hook gets the same
 * picture, the watchdog stays silent when off or when batches come, and
 * its setting is checked. (The stalled-server case: tests/remote/
 * test_remote_watchdog.sh; under MPI: tests/mpi/test_mpi_watchdog.sh.) */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "zephon.h"

typedef struct fixture {
    char *dir;
    zp_dataset *ds;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->dir = zpt_tmpdir();
    assert_int_equal(zp_dataset_create(NULL, &f->ds), ZP_OK);
    const char *names[2] = {"alpha.jsonl", "beta.jsonl"};
    for (int s = 0; s < 2; s++) {
        char buf[8192];
        size_t len = 0;
        for (int i = 0; i < 40; i++)
            len += (size_t)sprintf(buf + len, "{\"text\": \"shard %d record %d%s\"}\n", s, i,
                                   s == 1 && i == 17 ? " SLOW" : "");
        char *path = zpt_path(f->dir, names[s]);
        assert_int_equal(zpt_write_file(path, buf, len), 0);
        assert_int_equal(zp_dataset_add(f->ds, path), ZP_OK);
        free(path);
    }
    assert_int_equal(zp_dataset_index(f->ds), ZP_OK);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    zp_dataset_destroy(f->ds);
    zpt_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* the log, collected from any thread */
typedef struct logbuf {
    pthread_mutex_t mu;
    char text[1 << 16];
    size_t len;
    int warnings;
} logbuf;

static void collect(void *user, zp_log_level lvl, const char *msg)
{
    logbuf *l = user;
    pthread_mutex_lock(&l->mu);
    l->len += (size_t)snprintf(l->text + l->len, sizeof l->text - l->len, "%s\n", msg);
    if (l->len >= sizeof l->text)
        l->len = sizeof l->text - 1;
    l->warnings += lvl == ZP_LOG_WARN;
    pthread_mutex_unlock(&l->mu);
}

/* sleeps on the record whose text says SLOW */
static double g_sleep_s;

static zp_status sleepy(void *user, zp_record *rec)
{
    (void)user;
    const char *s;
    size_t n;
    if (zp_record_get_string(rec, "text", &s, &n) == ZP_OK && n >= 4 && memcmp(s + n - 4, "SLOW", 4) == 0)
        usleep((useconds_t)(g_sleep_s * 1e6));
    return ZP_OK;
}

typedef struct hooked {
    int calls;
    zp_watchdog_report first;
} hooked;

static void hook(void *user, const zp_watchdog_report *r)
{
    hooked *h = user;
    if (h->calls++ == 0)
        h->first = *r;
}

/* Runs the whole stream with the sleepy map; returns the batches. */
static uint64_t run(fixture *f, double watchdog, logbuf *l, hooked *h, uint64_t *fired)
{
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.shuffle = 0;
    zp_worksource *ws;
    assert_int_equal(zp_worksource_create(f->ds, &wc, &ws), ZP_OK);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = 2;
    pc.chunk_samples = 4;
    pc.microbatch_size = 4;
    pc.watchdog_seconds = watchdog;
    pc.log = collect;
    pc.log_user = l;
    zp_pipeline *p;
    assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_OK);
    assert_int_equal(zp_pipeline_map_transform(p, sleepy, NULL, 1, "sleepy"), ZP_OK);
    if (h)
        assert_int_equal(zp_pipeline_on_watchdog(p, hook, h), ZP_OK);
    const zp_batch *b;
    uint64_t n = 0;
    zp_status st;
    while ((st = zp_pipeline_next(p, &b)) == ZP_OK)
        n++;
    assert_int_equal(st, ZP_END);
    *fired = zp_pipeline_watchdog_fired(p);
    /* the hook may change between nexts (consumer thread) */
    assert_int_equal(zp_pipeline_on_watchdog(p, NULL, NULL), ZP_OK);
    assert_null(zp_pipeline_watchdog_hook(p));
    assert_int_equal(zp_pipeline_on_watchdog(NULL, hook, h), ZP_ERR_INVALID);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    return n;
}

static void test_watchdog_names_the_sleeping_transform(void **state)
{
    fixture *f = *state;
    logbuf *l = calloc(1, sizeof *l);
    pthread_mutex_init(&l->mu, NULL);
    hooked h = {0};
    uint64_t fired = 0;
    g_sleep_s = 1.5;
    assert_int_equal(run(f, 0.4, l, &h, &fired), 20);
    /* fired while the record slept: at 0.4, 0.8, 1.2 s (scheduling may
     * lose the last one) */
    assert_true(fired >= 2 && fired <= 4);
    assert_int_equal(h.calls, (int)fired);
    /* the log: the wait, the task on its record with the time, the queues */
    assert_non_null(strstr(l->text, "watchdog: no batch for 0.4 s"));
    char want[1024];
    snprintf(want, sizeof want, ": sleepy: running on shard '%s/beta.jsonl' (#1) record 17 for ",
             f->dir);
    assert_non_null(strstr(l->text, want));
    assert_non_null(strstr(l->text, "watchdog: queues: fetch "));
    assert_non_null(strstr(l->text, "; sleepy "));
    assert_non_null(strstr(l->text, "chunks in flight; 0 batches ready"));
    /* the hook: the same picture, the transform first (the longest) */
    const zp_watchdog_report *r = &h.first;
    assert_true(r->waited >= 0.39 && r->waited < 1.0);
    assert_true(fabs(r->seconds - 0.4) < 1e-9);
    assert_true(r->n_tasks >= 1);
    assert_string_equal(r->tasks[0].op, "sleepy");
    assert_int_equal(r->tasks[0].state, ZP_TASK_RUNNING);
    assert_int_equal(r->tasks[0].shard, 1);
    snprintf(want, sizeof want, "%s/beta.jsonl", f->dir);
    assert_string_equal(r->tasks[0].shard_name, want);
    assert_int_equal(r->tasks[0].record, 17);
    assert_true(r->tasks[0].seconds > 0.2);
    assert_int_equal(r->n_ops, 2);
    assert_string_equal(r->ops[0].name, "fetch");
    assert_string_equal(r->ops[1].name, "sleepy");
    assert_int_equal(r->ops[1].running, 1);
    assert_true(r->chunks_in_flight >= 1);
    /* the text rendering is what was logged */
    char text[4096];
    size_t need = zp_watchdog_report_text(r, text, sizeof text);
    assert_int_equal(need, strlen(text));
    assert_non_null(strstr(text, "record 17"));
    char small[16];
    assert_int_equal(zp_watchdog_report_text(r, small, sizeof small), need);
    assert_int_equal(strlen(small), sizeof small - 1);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* a batch map: sleeps on the SLOW record; names each record it works on
 * when g_begin (zp_record_begin) */
static int g_begin;

static zp_status sleepy_batch(void *user, zp_record *const *recs, size_t n, zp_status *status)
{
    (void)user;
    (void)status;
    for (size_t i = 0; i < n; i++) {
        if (g_begin)
            zp_record_begin(recs[i]);
        (void)sleepy(NULL, recs[i]);
    }
    return ZP_OK;
}

static void test_watchdog_batch_map_names_its_record(void **state)
{
    fixture *f = *state;
    for (g_begin = 0; g_begin < 2; g_begin++) {
        zp_worksource_config wc;
        zp_worksource_config_init(&wc);
        wc.shuffle = 0;
        zp_worksource *ws;
        assert_int_equal(zp_worksource_create(f->ds, &wc, &ws), ZP_OK);
        zp_pipeline_config pc;
        zp_pipeline_config_init(&pc);
        pc.threads = 2;
        pc.chunk_samples = 4;
        pc.microbatch_size = 4;
        pc.watchdog_seconds = 0.3;
        zp_pipeline *p;
        assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_OK);
        assert_int_equal(zp_pipeline_map_transform_batch(p, sleepy_batch, NULL, 1, "batchy"), ZP_OK);
        hooked h = {0};
        assert_int_equal(zp_pipeline_on_watchdog(p, hook, &h), ZP_OK);
        g_sleep_s = 0.8;
        const zp_batch *b;
        while (zp_pipeline_next(p, &b) == ZP_OK) {
        }
        assert_true(h.calls >= 1);
        const zp_task_activity *t = &h.first.tasks[0];
        assert_string_equal(t->op, "batchy");
        assert_int_equal(t->state, ZP_TASK_RUNNING);
        assert_int_equal(t->shard, 1);
        /* with zp_record_begin the record; without, the chunk (from record 16) */
        assert_int_equal(t->record, g_begin ? 17 : -1);
        char text[4096];
        zp_watchdog_report_text(&h.first, text, sizeof text);
        assert_non_null(strstr(text, g_begin ? ") record 17 for " : "batchy: running on a chunk from shard"));
        zp_pipeline_destroy(p);
        zp_worksource_destroy(ws);
    }
}

static void test_watchdog_silent_when_off_or_batches_come(void **state)
{
    fixture *f = *state;
    logbuf *l = calloc(1, sizeof *l);
    pthread_mutex_init(&l->mu, NULL);
    hooked h = {0};
    uint64_t fired = 1;
    /* off: a stall of 1 s is not reported */
    g_sleep_s = 1.0;
    assert_int_equal(run(f, 0, l, &h, &fired), 20);
    assert_int_equal(fired, 0);
    assert_int_equal(h.calls, 0);
    assert_null(strstr(l->text, "watchdog"));
    /* on, with a period longer than any wait: silent */
    g_sleep_s = 0.1;
    assert_int_equal(run(f, 2.0, l, &h, &fired), 20);
    assert_int_equal(fired, 0);
    assert_int_equal(h.calls, 0);
    assert_int_equal(l->warnings, 0);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

static void test_watchdog_setting_and_activity(void **state)
{
    fixture *f = *state;
    zp_worksource *ws;
    assert_int_equal(zp_worksource_create(f->ds, NULL, &ws), ZP_OK);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    assert_true(pc.watchdog_seconds == ZP_WATCHDOG_DEFAULT_SECONDS);
    const double bad[] = {-1.0, NAN, 2e6};
    for (int i = 0; i < 3; i++) {
        pc.watchdog_seconds = bad[i];
        zp_pipeline *p;
        assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_ERR_INVALID);
        assert_non_null(strstr(zp_pipeline_errmsg(p), "watchdog_seconds"));
        zp_pipeline_destroy(p);
    }
    pc.watchdog_seconds = 5;
    zp_pipeline *p;
    assert_int_equal(zp_pipeline_create(ws, &pc, &p), ZP_OK);
    zp_watchdog_report *r = malloc(sizeof *r);
    /* before the start: nothing runs */
    assert_int_equal(zp_pipeline_activity(p, r), ZP_OK);
    assert_int_equal(r->n_tasks, 0);
    assert_int_equal(r->n_ops, 0);
    assert_int_equal(zp_pipeline_activity(NULL, r), ZP_ERR_INVALID);
    assert_int_equal(zp_pipeline_activity(p, NULL), ZP_ERR_INVALID);
    const zp_batch *b;
    assert_int_equal(zp_pipeline_next(p, &b), ZP_OK);
    /* running: the operators are listed, the batches counted */
    assert_int_equal(zp_pipeline_activity(p, r), ZP_OK);
    assert_int_equal(r->n_ops, 1);
    assert_string_equal(r->ops[0].name, "fetch");
    assert_int_equal(r->batches, 1);
    assert_true(r->waited == 0);
    assert_true(r->seconds == 5);
    assert_string_equal(zp_task_state_name(ZP_TASK_LOADING), "loading");
    free(r);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_watchdog_names_the_sleeping_transform, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watchdog_batch_map_names_its_record, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watchdog_silent_when_off_or_batches_come, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_watchdog_setting_and_activity, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
