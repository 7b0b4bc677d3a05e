/*
 * test_throttle.c - the per-host window of transfers (io/throttle.c) and
 * the transfers kept within it (io/xfer.c).
 *
 * Without a network: a 503/429 lowers the window to 0.9 of what was sent
 * (before an answer time is known: of what is in flight), once per
 * congestion event (answers to requests started before the decrease, or
 * within an answer time of it, do not lower it again); good answers while
 * starts are refused raise it by 1 (slow start) or, after a decrease of
 * paced requests, by 1/window; requests beyond floor(window) wait, and
 * once an answer time is known starts are paced; the state is shared
 * through the folder's file by two processes (a child's requests count in
 * the parent's total); a process that died with requests in flight is
 * dropped.
 *
 * Against the fault proxy (tests/net): two processes, each with its own
 * transfer engine of 32 parallel transfers sharing one folder, download 400
 * files each through "slowdown:40" (a limit of 40 requests a second, a
 * token bucket with a burst of 10, answered 503 SlowDown + Retry-After: 1
 * above it) with 1 s per request: every download completes with the right
 * bytes; after the first 5 s the request rate (every request, the refused
 * ones too) stays within 1.1x of the limit over every 4 s (a 4 s window
 * holds at most 2.5% of burst), and the successful downloads reach 0.9 of
 * the limit. Without the window the two engines keep 64 requests in
 * flight: 64 a second, most of them refused.
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/util.h"
#include "io/storage.h"
#include "io/throttle.h"
#include "io/xfer.h"
#include "testutil.h"

#define HOST "http://127.0.0.1:9"

/* ------------------------------------------------------------ no network */

static void test_host_key(void **state)
{
    (void)state;
    char k[256];
    zpi_throttle_host("HTTP://u:p@Host.Example:8080/a/b?x=1", NULL, k, sizeof k);
    assert_string_equal(k, "http://host.example:8080");
    zpi_throttle_host("s3://bucket/key", "https://minio.example:9000/", k, sizeof k);
    assert_string_equal(k, "https://minio.example:9000");
}

/* n requests begun (asserting each is let through) */
static void begin_n(zpi_throttle *th, int n, uint64_t *starts)
{
    for (int i = 0; i < n; i++)
        assert_int_equal(zpi_throttle_begin(th, HOST, &starts[i]), 1);
}

static int near(double a, double b) { return a > b - 0.01 && a < b + 0.01; }

static void test_aimd(void **state)
{
    (void)state;
    zpi_throttle *th = zpi_throttle_create(NULL);
    assert_non_null(th);
    uint64_t st[64], s;
    begin_n(th, 20, st); /* no slow-down yet: not limited */
    assert_true(zpi_throttle_window(th, HOST) >= 1024.0);
    /* a slow-down with 20 in flight and no answer time known: 0.9 x 20 */
    zpi_throttle_end(th, HOST, st[0], ZPI_THR_SLOWDOWN);
    assert_true(near(zpi_throttle_window(th, HOST), 18.0));
    /* the same event (no answer time known yet): no second decrease */
    zpi_throttle_end(th, HOST, st[1], ZPI_THR_SLOWDOWN);
    zpi_throttle_end(th, HOST, st[2], ZPI_THR_SLOWDOWN);
    assert_true(near(zpi_throttle_window(th, HOST), 18.0));
    /* 17 in flight, window 18: one more, then none */
    assert_int_equal(zpi_throttle_begin(th, HOST, &st[20]), 1);
    assert_int_equal(zpi_throttle_begin(th, HOST, &s), 0);
    /* a good answer after 100 ms while starts are refused: the answer time
     * is known, and the slow start adds 1 */
    zpi_throttle_end(th, HOST, zpi_now_ns() - 100000000ULL, ZPI_THR_OK);
    assert_true(near(zpi_throttle_window(th, HOST), 19.0));
    /* paced now: 17 in flight, window 19, one start, then the next one
     * waits about 100 ms / 19 */
    assert_int_equal(zpi_throttle_begin(th, HOST, &st[21]), 1);
    assert_int_equal(zpi_throttle_begin(th, HOST, &s), 0);
    /* no answer (a connection error, a stop): the window stays */
    zpi_throttle_end(th, HOST, st[3], ZPI_THR_OTHER);
    assert_true(near(zpi_throttle_window(th, HOST), 19.0));
    /* a slow-down of a request started before the last decrease: the same event */
    zpi_throttle_end(th, HOST, st[4], ZPI_THR_SLOWDOWN);
    assert_true(near(zpi_throttle_window(th, HOST), 19.0));
    /* one answer time later, a paced request refused: a new event, from the
     * requests started within about the last answer time (far fewer than
     * 19), and the slow start ends */
    struct timespec ts = {0, 150000000L};
    nanosleep(&ts, NULL);
    assert_int_equal(zpi_throttle_begin(th, HOST, &st[22]), 1);
    zpi_throttle_end(th, HOST, st[22], ZPI_THR_SLOWDOWN);
    double w = zpi_throttle_window(th, HOST);
    assert_true(w >= 1.0 && w < 19.0 * 0.9);
    /* congestion avoidance: a good answer while starts are refused adds
     * 1/window */
    for (int i = 0; i < 40 && zpi_throttle_begin(th, HOST, &s); i++)
        ;
    zpi_throttle_end(th, HOST, zpi_now_ns() - 100000000ULL, ZPI_THR_OK);
    double w2 = zpi_throttle_window(th, HOST);
    assert_true(near(w2, w + 1.0 / w));
    /* never below 1 */
    for (int i = 0; i < 3; i++) {
        nanosleep(&ts, NULL);
        zpi_throttle_end(th, HOST, zpi_now_ns(), ZPI_THR_SLOWDOWN);
    }
    assert_true(zpi_throttle_window(th, HOST) >= 1.0);
    zpi_throttle_destroy(th);
}

/* The window and the requests in flight are the node's: a child process
 * holding requests counts in the parent's total, and is dropped when it
 * dies without ending them. */
static void test_shared_between_processes(void **state)
{
    (void)state;
    char *dir = zpt_tmpdir();
    assert_non_null(dir);
    zpi_throttle *th = zpi_throttle_create(dir);
    uint64_t st[16];
    begin_n(th, 10, st);
    zpi_throttle_end(th, HOST, st[0], ZPI_THR_SLOWDOWN); /* window 9, 9 in flight */
    int p[2], q[2]; /* child -> parent, parent -> child */
    assert_int_equal(pipe(p), 0);
    assert_int_equal(pipe(q), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* the child sees the parent's window and total: nothing may start */
        zpi_throttle *c = zpi_throttle_create(dir);
        uint64_t s;
        int ok = zpi_throttle_window(c, HOST) == 0.0 && !zpi_throttle_begin(c, HOST, &s) &&
                 near(zpi_throttle_window(c, HOST), 9.0);
        char r = ok ? 'y' : 'n';
        if (write(p[1], &r, 1) != 1)
            _exit(3);
        /* wait until the parent made room, take 2, then die holding them */
        char go;
        if (read(q[0], &go, 1) != 1)
            _exit(3);
        ok = zpi_throttle_begin(c, HOST, &s) && zpi_throttle_begin(c, HOST, &s);
        _exit(ok ? 0 : 4); /* no zpi_throttle_end: died with 2 in flight */
    }
    char r = 0;
    ssize_t got = read(p[0], &r, 1);
    for (int i = 1; i < 5; i++) /* 5 left in flight */
        zpi_throttle_end(th, HOST, st[i], ZPI_THR_OTHER);
    ssize_t put = write(q[1], "g", 1); /* the child goes on (and ends) in every case */
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(got, 1);
    assert_int_equal(put, 1);
    assert_int_equal(r, 'y');
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* the dead child's 2 are dropped: 5 in flight, 4 more may start */
    uint64_t s;
    assert_int_equal(zpi_throttle_begin(th, HOST, &s), 1);
    assert_int_equal(zpi_throttle_begin(th, HOST, &s), 1);
    assert_int_equal(zpi_throttle_begin(th, HOST, &s), 1);
    assert_int_equal(zpi_throttle_begin(th, HOST, &s), 1);
    assert_int_equal(zpi_throttle_begin(th, HOST, &s), 0);
    close(p[0]);
    close(p[1]);
    close(q[0]);
    close(q[1]);
    /* the file is the user's own, 0600 */
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "test \"$(stat -c %%a %s/.zephon-throttle-*)\" = 600", dir);
    assert_int_equal(system(cmd), 0);
    zpi_throttle_destroy(th);
    zpt_rmtree(dir);
    free(dir);
}

/* ------------------------------------------------------------ the fault proxy */

#define LIMIT 40.0 /* requests a second */
#define FILES 400  /* per process */
#define PAR 32     /* transfers per process */
#define DELAY_MS 1000 /* each request's time at the proxy: 40 in flight at the limit */

typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t left, failed;
} waiter;

static void done(void *user, const zpi_xfer_result *r)
{
    waiter *w = user;
    pthread_mutex_lock(&w->mu);
    if (r->status != ZP_OK) {
        fprintf(stderr, "test_throttle: %s\n", zpi_err_msg(&r->err));
        w->failed++;
    }
    w->left--;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* One process's downloads: FILES files of prefix/p<k>-<i> through the
 * proxy's rate limit, into out; exit status 0 when all are right. */
static int child_downloads(const char *proxy, const char *prefix, int k, const char *cache,
                           const char *out)
{
    zp_storage_config sc;
    zp_storage_config_init(&sc);
    sc.retries = 20; /* a SlowDown answer is retried after its Retry-After */
    zpi_storage *s = NULL;
    zpi_err err;
    zpi_xfer *x = NULL;
    if (zpi_storage_create(&sc, NULL, NULL, &s, &err) != ZP_OK ||
        zpi_xfer_create_shared(s, PAR, 1, cache, &x, &err) != ZP_OK)
        return 5;
    waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, FILES, 0};
    int fds[FILES];
    for (int i = 0; i < FILES; i++) {
        char url[1024], path[1024];
        snprintf(url, sizeof url, "%s/f/slowdown:%d*0,delay:%d*0/%s/p%d-%03d", proxy, (int)LIMIT,
                 DELAY_MS, prefix, k, i);
        snprintf(path, sizeof path, "%s/p%d-%03d", out, k, i);
        fds[i] = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        zpi_xfer_job j = {.spec = url, .fd = fds[i], .expect_size = 100, .done = done, .user = &w};
        if (fds[i] < 0 || zpi_xfer_submit(x, &j, NULL, &err) != ZP_OK)
            return 6;
    }
    pthread_mutex_lock(&w.mu);
    while (w.left > 0)
        pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    zpi_xfer_destroy(x);
    zpi_storage_destroy(s);
    int bad = 0;
    for (int i = 0; i < FILES; i++) {
        char buf[128];
        ssize_t n = pread(fds[i], buf, sizeof buf, 0);
        char want[101];
        memset(want, 'a' + (i + k) % 26, 100);
        bad |= n != 100 || memcmp(buf, want, 100) != 0;
        close(fds[i]);
    }
    return w.failed ? 7 : bad ? 8 : 0;
}

static size_t body_cb(char *p, size_t size, size_t n, void *user)
{
    zpi_buf *b = user;
    return zpi_buf_printf(b, "%.*s", (int)(size * n), p) == 0 ? size * n : 0;
}

static void test_rate_limited_host(void **state)
{
    (void)state;
    char *root = zpt_netenv("ZT_ROOT"), *proxy = zpt_netenv("ZT_PROXY");
    if (!root || !proxy) {
        free(root);
        free(proxy);
        fail_msg("the loopback servers' env file ($ZT_NETENV) is missing or incomplete");
    }
    char prefix[64], dir[1024];
    snprintf(prefix, sizeof prefix, "throttle-%d", (int)getpid());
    snprintf(dir, sizeof dir, "%s/%s", root, prefix);
    assert_int_equal(zpi_mkdir_p(dir, 0755), 0);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < FILES; i++) {
            char path[1200], data[100];
            memset(data, 'a' + (i + k) % 26, sizeof data);
            snprintf(path, sizeof path, "%s/p%d-%03d", dir, k, i);
            assert_int_equal(zpt_write_file(path, data, sizeof data), 0);
        }
    char *cache = zpt_tmpdir(), *out = zpt_tmpdir();
    assert_true(cache && out);
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = fork();
        assert_true(kids[k] >= 0);
        if (kids[k] == 0)
            _exit(child_downloads(proxy, prefix, k, cache, out));
    }
    for (int k = 0; k < 2; k++) {
        int status = 0;
        assert_int_equal(waitpid(kids[k], &status, 0), kids[k]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fail_msg("process %d: downloads failed (status %d)", k, status);
    }
    /* the proxy's record of every request: arrival time and status */
    char url[1200];
    snprintf(url, sizeof url, "%s/__events?prefix=/%s/", proxy, prefix);
    zpi_buf body = {0};
    CURL *e = curl_easy_init();
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, body_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &body);
    assert_int_equal(curl_easy_perform(e), CURLE_OK);
    curl_easy_cleanup(e);
    json_error_t jerr;
    json_t *ev = json_loads(body.p, 0, &jerr);
    assert_non_null(ev);
    size_t n = json_array_size(ev);
    double t0 = json_real_value(json_array_get(json_array_get(ev, 0), 0));
    double t1 = json_real_value(json_array_get(json_array_get(ev, n - 1), 0));
    /* every 4 s from 5 s after the start to 1 s before the end */
    double worst = 0, ok_in = 0, from = t0 + 5.0, to = t1 - 1.0;
    size_t rejected = 0;
    for (double a = from; a + 4.0 <= to; a += 0.5) {
        size_t cnt = 0;
        for (size_t i = 0; i < n; i++) {
            double t = json_real_value(json_array_get(json_array_get(ev, i), 0));
            cnt += t >= a && t < a + 4.0;
        }
        if (cnt / 4.0 > worst)
            worst = cnt / 4.0;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *r = json_array_get(ev, i);
        double t = json_real_value(json_array_get(r, 0));
        long code = (long)json_integer_value(json_array_get(r, 1));
        rejected += code == 503;
        ok_in += code == 200 && t >= from && t < to;
    }
    double goodput = ok_in / (to - from);
    fprintf(stderr,
            "# %zu requests (%zu answered SlowDown) in %.1f s; after the first 5 s: at most "
            "%.1f requests/s over 4 s (limit %.0f: %.2fx), %.1f downloads/s (%.2f of the "
            "limit)\n",
            n, rejected, t1 - t0, worst, LIMIT, worst / LIMIT, goodput, goodput / LIMIT);
    assert_true(to - from > 8.0); /* a run long enough to measure */
    assert_true(worst <= 1.1 * LIMIT);
    assert_true(goodput >= 0.9 * LIMIT);
    json_decref(ev);
    zpi_buf_free(&body);
    /* this test's 800 paths out of the proxy's counts (other tests list them all) */
    snprintf(url, sizeof url, "%s/__reset?prefix=/%s/", proxy, prefix);
    e = curl_easy_init();
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, "");
    assert_int_equal(curl_easy_perform(e), CURLE_OK);
    curl_easy_cleanup(e);
    zpt_rmtree(dir);
    zpt_rmtree(cache);
    zpt_rmtree(out);
    free(cache);
    free(out);
    free(root);
    free(proxy);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_key),
        cmocka_unit_test(test_aimd),
        cmocka_unit_test(test_shared_between_processes),
        cmocka_unit_test(test_rate_limited_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
