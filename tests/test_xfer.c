/*
 * test_xfer.c - transfers against the loopback servers (tests/net): plain
 * downloads from nginx over http and https, the S3 server with SigV4, and
 * every fault of the fault proxy: retried statuses (500, 503, 429 with
 * Retry-After), resets mid-body resumed with Range (counted at the proxy),
 * stalls ending in a timeout error, short bodies, slow first bytes, a
 * wrong Content-Length, corrupt bodies caught by the hash, a file changed
 * between attempts (If-Range answered 200: restart from byte 0); 404/403
 * failing at once with the URL redacted; TLS verification; the queue
 * (max_parallel, demand and promote order) and destroy with jobs in flight.
 *
 * Each test writes its fixture files into ZT_ROOT/xfer-<pid>/ (served by
 * nginx and, behind it, by the proxy) and removes them at the end.
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cmocka.h>

#include "io/storage.h"
#include "testutil.h"
#include "base/util.h"
#include "io/request.h"
#include "io/xfer.h"

/* ------------------------------------------------------------ fixtures */

static char *g_root, *g_http, *g_https, *g_ca, *g_proxy, *g_s3, *g_bucket, *g_key, *g_secret;
static char g_prefix[64]; /* "xfer-<pid>" */
static char *g_tmp;       /* downloads go here */

static int setup_all(void **state)
{
    (void)state;
    g_root = zpt_netenv("ZT_ROOT");
    g_http = zpt_netenv("ZT_HTTP");
    g_https = zpt_netenv("ZT_HTTPS");
    g_ca = zpt_netenv("ZT_CA");
    g_proxy = zpt_netenv("ZT_PROXY");
    g_s3 = zpt_netenv("ZT_S3");
    g_bucket = zpt_netenv("ZT_S3_BUCKET");
    g_key = zpt_netenv("ZT_S3_KEY");
    g_secret = zpt_netenv("ZT_S3_SECRET");
    if (!g_root || !g_http || !g_https || !g_ca || !g_proxy || !g_s3 || !g_bucket || !g_key ||
        !g_secret) {
        fprintf(stderr, "test_xfer: the loopback servers' env file ($ZT_NETENV) is missing "
                        "or incomplete\n");
        return -1;
    }
    snprintf(g_prefix, sizeof g_prefix, "xfer-%d", (int)getpid());
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", g_root, g_prefix);
    if (zpi_mkdir_p(dir, 0755) != 0)
        return -1;
    g_tmp = zpt_tmpdir();
    return g_tmp ? 0 : -1;
}

static int teardown_all(void **state)
{
    (void)state;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", g_root, g_prefix);
    zpt_rmtree(dir);
    zpt_rmtree(g_tmp);
    free(g_tmp);
    char *all[] = {g_root, g_http, g_https, g_ca, g_proxy, g_s3, g_bucket, g_key, g_secret};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    return 0;
}

/* size bytes of a pattern that depends on seed. */
static char *make_data(size_t size, unsigned seed)
{
    char *data = malloc(size);
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
    for (size_t i = 0; i < size; i++) {
        if (i % 8 == 0)
            x = zpi_mix64(x + i);
        data[i] = (char)(x >> (8 * (i % 8)));
    }
    return data;
}

/* make_data written to ZT_ROOT/<prefix>/name. */
static char *make_file(const char *name, size_t size, unsigned seed)
{
    char *data = make_data(size, seed);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/%s", g_root, g_prefix, name);
    assert_int_equal(zpt_write_file(path, data, size), 0);
    return data;
}

/* base + "/" + [faults] + prefix/name */
static void url_of(char *out, size_t cap, const char *base, const char *faults, const char *name)
{
    if (faults)
        snprintf(out, cap, "%s/f/%s/%s/%s", base, faults, g_prefix, name);
    else
        snprintf(out, cap, "%s/%s/%s", base, g_prefix, name);
}

/* The proxy's count of method requests for our file name. */
static size_t curl_sink(char *p, size_t s, size_t n, void *u)
{
    zpi_buf_append(u, p, s * n);
    return s * n;
}

static long proxy_count(const char *method, const char *name)
{
    char url[1024];
    snprintf(url, sizeof url, "%s/__stats?prefix=/%s/", g_proxy, g_prefix);
    CURL *e = curl_easy_init();
    zpi_buf b = {0};
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, curl_sink);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    assert_int_equal(curl_easy_perform(e), CURLE_OK);
    curl_easy_cleanup(e);
    json_error_t je;
    json_t *j = json_loads(b.p, 0, &je);
    assert_non_null(j);
    char key[512];
    snprintf(key, sizeof key, "/%s/%s", g_prefix, name);
    json_t *v = json_object_get(json_object_get(j, method), key);
    long n = v ? (long)json_integer_value(v) : 0;
    json_decref(j);
    zpi_buf_free(&b);
    return n;
}

/* ------------------------------------------------------------ running jobs */

typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_done;
    int calls[16];
    int order[16];
    zpi_xfer_result res[16];
} waiter;

typedef struct slot {
    waiter *w;
    int idx;
} slot;

static void waiter_init(waiter *w)
{
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
}

static void waiter_destroy(waiter *w)
{
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

static void on_done(void *user, const zpi_xfer_result *r)
{
    slot *s = user;
    waiter *w = s->w;
    pthread_mutex_lock(&w->mu);
    w->calls[s->idx]++;
    w->res[s->idx] = *r;
    w->order[w->n_done++] = s->idx;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void wait_for(waiter *w, int n)
{
    pthread_mutex_lock(&w->mu);
    while (w->n_done < n)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

static zpi_storage *make_storage(void (*tweak)(zp_storage_config *), zp_log_fn log, void *lu)
{
    zp_storage_config c;
    zp_storage_config_init(&c);
    c.connect_timeout_s = 5;
    c.low_speed_time_s = 2;
    c.retries = 3;
    c.retry_base_s = 0.02;
    c.retry_max_s = 3;
    c.ca_file = g_ca;
    c.s3_endpoint = g_s3;
    if (tweak)
        tweak(&c);
    zpi_storage *s = NULL;
    zpi_err err = {0};
    assert_int_equal(zpi_storage_create(&c, log, lu, &s, &err), ZP_OK);
    return s;
}

static int open_dest(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", g_tmp, name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    return fd;
}

static char *read_fd(int fd, size_t *len)
{
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    char *b = malloc((size_t)st.st_size + 1);
    assert_int_equal(pread(fd, b, (size_t)st.st_size, 0), st.st_size);
    *len = (size_t)st.st_size;
    return b;
}

/* One job through a fresh zpi_xfer; the result, and the bytes in *got. */
static zpi_xfer_result run_one(zpi_storage *s, const char *url, uint64_t expect, const char *data,
                               char **got, size_t *got_len)
{
    zpi_xfer *x = NULL;
    zpi_err err = {0};
    assert_int_equal(zpi_xfer_create(s, 2, 1, &x, &err), ZP_OK);
    waiter w;
    waiter_init(&w);
    slot sl = {&w, 0};
    int fd = open_dest("one.bin");
    zpi_xfer_job j = {.spec = url, .fd = fd, .expect_size = expect, .done = on_done, .user = &sl};
    if (data) {
        j.has_xxh64 = 1;
        j.xxh64 = XXH64(data, expect, 0);
    }
    assert_int_equal(zpi_xfer_submit(x, &j, NULL, &err), ZP_OK);
    wait_for(&w, 1);
    zpi_xfer_destroy(x);
    assert_int_equal(w.calls[0], 1);
    zpi_xfer_result r = w.res[0];
    if (got)
        *got = read_fd(fd, got_len);
    close(fd);
    waiter_destroy(&w);
    return r;
}

/* ------------------------------------------------------------ tests */

static void test_plain_http(void **state)
{
    (void)state;
    size_t size = 300000;
    char *data = make_file("plain.bin", size, 1);
    zpi_storage *s = make_storage(NULL, NULL, NULL);
    char url[1024];
    url_of(url, sizeof url, g_http, NULL, "plain.bin");
    char *got;
    size_t len;
    zpi_xfer_result r = run_one(s, url, size, data, &got, &len);
    assert_int_equal(r.status, ZP_OK);
    assert_int_equal(r.retries, 0);
    assert_true(r.size == size);
    assert_true(r.bytes == size);
    assert_int_equal(len, size);
    assert_memory_equal(got, data, size);
    free(got);
    /* Size unknown: the server's length is trusted. */
    r = run_one(s, url, UINT64_MAX, NULL, &got, &len);
    assert_int_equal(r.status, ZP_OK);
    assert_int_equal(len, size);
    assert_memory_equal(got, data, size);
    free(got);

    /* The synchronous path: open (HEAD) and ranged reads, read_all. */
    zpi_object *o = NULL;
    zpi_object_info info;
    zpi_err err = {0};
    assert_int_equal(zpi_object_open(s, url, &o, &info, &err), ZP_OK);
    assert_true(info.size == size);
    assert_true(info.etag[0] != '\0');
    assert_true(info.last_modified[0] != '\0');
    char buf[5000];
    size_t n = 0;
    assert_int_equal(zpi_object_read(o, 123456, buf, sizeof buf, &n, &err), ZP_OK);
    assert_int_equal(n, sizeof buf);
    assert_memory_equal(buf, data + 123456, sizeof buf);
    assert_int_equal(zpi_object_read(o, size - 100, buf, sizeof buf, &n, &err), ZP_OK);
    assert_int_equal(n, 100);
    assert_memory_equal(buf, data + size - 100, 100);
    zpi_object_close(o);
    char *all = NULL;
    assert_int_equal(zpi_object_read_all(s, url, size, &all, &n, &err), ZP_OK);
    assert_int_equal(n, size);
    assert_memory_equal(all, data, size);
    free(all);
    zpi_storage_destroy(s);
    free(data);
}

typedef struct fault_case {
    const char *faults;
    int with_hash;
    zp_status status;
    unsigned retries;
    long gets;         /* GET requests the proxy saw (0: not checked) */
    const char *in_msg;
} fault_case;

static void test_faults(void **state)
{
    (void)state;
    size_t size = 400000;
    static const fault_case cases[] = {
        {"500", 1, ZP_OK, 1, 2, NULL},
        {"503*2", 1, ZP_OK, 2, 3, NULL},
        {"429:1", 1, ZP_OK, 1, 2, NULL},
        {"reset:150000", 1, ZP_OK, 1, 2, NULL},
        {"short:100000", 1, ZP_OK, 1, 2, NULL},
        {"badlen", 1, ZP_OK, 1, 2, NULL},
        {"slowfirst:300", 1, ZP_OK, 0, 1, NULL},
        {"reset:1000,503,short:5000", 1, ZP_OK, 3, 4, NULL},
        {"corrupt", 1, ZP_ERR_FORMAT, 0, 1, "XXH64"},
        {"500*0", 1, ZP_ERR_NETWORK, 3, 4, "HTTP 500"},
        {"404", 1, ZP_ERR_NETWORK, 0, 1, "HTTP 404"},
        {"403", 1, ZP_ERR_NETWORK, 0, 1, "HTTP 403"},
    };
    zpi_storage *s = make_storage(NULL, NULL, NULL);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const fault_case *c = &cases[i];
        char name[64];
        snprintf(name, sizeof name, "fault%zu.bin", i);
        char *data = make_file(name, size, 10 + (unsigned)i);
        char url[1024];
        url_of(url, sizeof url, g_proxy, c->faults, name);
        char *got;
        size_t len;
        double t0 = zpi_now();
        zpi_xfer_result r = run_one(s, url, size, c->with_hash ? data : NULL, &got, &len);
        double dt = zpi_now() - t0;
        print_message("fault %s: status %d, retries %u, bytes %llu, %.2f s: %s\n", c->faults,
                      r.status, r.retries, (unsigned long long)r.bytes, dt, r.err.msg);
        assert_int_equal(r.status, c->status);
        assert_int_equal(r.retries, c->retries);
        if (c->gets)
            assert_int_equal(proxy_count("GET", name), c->gets);
        if (c->status == ZP_OK) {
            assert_int_equal(len, size);
            assert_memory_equal(got, data, size);
            assert_true(r.size == size);
        } else {
            assert_non_null(strstr(r.err.msg, c->in_msg));
            assert_non_null(strstr(r.err.msg, name));
        }
        if (strchr("54", c->faults[0]) && c->status == ZP_OK)
            assert_true(r.bytes == size); /* the error pages were not taken as data */
        if (!strncmp(c->faults, "429", 3))
            assert_true(dt >= 0.9); /* Retry-After: 1 honoured (the backoff alone is < 0.1 s) */
        if (!strncmp(c->faults, "slowfirst", 9))
            assert_true(dt >= 0.29);
        if (!strncmp(c->faults, "reset", 5) && c->retries == 1)
            /* Resumed: the bytes before the reset are not fetched again. */
            assert_true(r.bytes < size + 20000);
        free(got);
        free(data);
    }
    zpi_storage_destroy(s);
}

static void low_speed_1s(zp_storage_config *c)
{
    c->low_speed_time_s = 1;
    c->low_speed_bytes = 5000;
    c->retries = 1;
}

static void test_stall_times_out(void **state)
{
    (void)state;
    size_t size = 200000;
    char *data = make_file("stall.bin", size, 3);
    zpi_storage *s = make_storage(low_speed_1s, NULL, NULL);
    char url[1024];
    url_of(url, sizeof url, g_proxy, "stall:1000*0", "stall.bin");
    double t0 = zpi_now();
    zpi_xfer_result r = run_one(s, url, size, data, NULL, NULL);
    double dt = zpi_now() - t0;
    print_message("stall: %.2f s: %s\n", dt, r.err.msg);
    assert_int_equal(r.status, ZP_ERR_NETWORK);
    assert_int_equal(r.retries, 1);
    assert_non_null(strstr(r.err.msg, "after 1 retries"));
    assert_true(dt >= 1.9 && dt < 10);
    assert_int_equal(proxy_count("GET", "stall.bin"), 2);
    /* A stall only on the first request: resumed, complete. */
    url_of(url, sizeof url, g_proxy, "stall:1000", "stall.bin");
    char *got;
    size_t len;
    r = run_one(s, url, size, data, &got, &len);
    assert_int_equal(r.status, ZP_OK);
    assert_int_equal(r.retries, 1);
    assert_int_equal(len, size);
    assert_memory_equal(got, data, size);
    free(got);
    zpi_storage_destroy(s);
    free(data);
}

static void one_retry(zp_storage_config *c) { c->retries = 1; }

/* Nobody listens: "couldn't connect" is retried, then a network error. */
static void test_refused(void **state)
{
    (void)state;
    int sk = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    assert_int_equal(bind(sk, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(sk, (struct sockaddr *)&a, &al), 0);
    close(sk); /* the port is now closed */
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/nothing.bin", ntohs(a.sin_port));
    zpi_storage *s = make_storage(one_retry, NULL, NULL);
    zpi_xfer *x = NULL;
    zpi_err err = {0};
    assert_int_equal(zpi_xfer_create(s, 1, 0, &x, &err), ZP_OK);
    waiter w;
    waiter_init(&w);
    slot sl = {&w, 0};
    int fd = open_dest("refused.bin");
    zpi_xfer_job j = {.spec = url, .fd = fd, .expect_size = UINT64_MAX, .done = on_done,
                      .user = &sl};
    assert_int_equal(zpi_xfer_submit(x, &j, NULL, &err), ZP_OK);
    wait_for(&w, 1);
    assert_int_equal(w.res[0].status, ZP_ERR_NETWORK);
    assert_int_equal(w.res[0].retries, 1);
    assert_non_null(strstr(w.res[0].err.msg, "nothing.bin"));
    assert_non_null(strstr(w.res[0].err.msg, "after 1 retries"));
    zpi_xfer_stats st;
    zpi_xfer_stats_get(x, &st);
    assert_true(st.failures == 1 && st.downloads == 0 && st.retries == 1);
    zpi_xfer_destroy(x);
    close(fd);
    waiter_destroy(&w);
    zpi_storage_destroy(s);
}

static void retry_max_half(zp_storage_config *c) { c->retry_max_s = 0.5; }

/* Retry-After: 30 is capped at retry_max_s. */
static void test_retry_after_capped(void **state)
{
    (void)state;
    size_t size = 10000;
    char *data = make_file("cap.bin", size, 2);
    zpi_storage *s = make_storage(retry_max_half, NULL, NULL);
    char url[1024];
    url_of(url, sizeof url, g_proxy, "429:30", "cap.bin");
    double t0 = zpi_now();
    zpi_xfer_result r = run_one(s, url, size, data, NULL, NULL);
    double dt = zpi_now() - t0;
    assert_int_equal(r.status, ZP_OK);
    assert_int_equal(r.retries, 1);
    assert_true(dt >= 0.45 && dt < 5);
    zpi_storage_destroy(s);
    free(data);
}

static void test_redacted_fail_fast(void **state)
{
    (void)state;
    char *data = make_file("secret.bin", 1000, 4);
    zpi_storage *s = make_storage(NULL, NULL, NULL);
    const char *kinds[] = {"404", "403"};
    for (int i = 0; i < 2; i++) {
        /* http://user:pass@127.0.0.1:port/f/404/.../secret.bin?Signature=... */
        const char *hp = g_proxy + strlen("http://");
        char url[1024];
        snprintf(url, sizeof url,
                 "http://zuser:hunter2@%s/f/%s*0/%s/secret.bin?Signature=s3cr3tsig", hp,
                 kinds[i], g_prefix);
        double t0 = zpi_now();
        zpi_xfer_result r = run_one(s, url, 1000, data, NULL, NULL);
        double dt = zpi_now() - t0;
        assert_int_equal(r.status, ZP_ERR_NETWORK);
        assert_int_equal(r.retries, 0);
        assert_true(dt < 2);
        assert_null(strstr(r.err.msg, "hunter2"));
        assert_null(strstr(r.err.msg, "zuser"));
        assert_null(strstr(r.err.msg, "s3cr3tsig"));
        assert_null(strstr(r.err.msg, "Signature"));
        assert_non_null(strstr(r.err.msg, "secret.bin?<redacted>"));
        assert_non_null(strstr(r.err.msg, kinds[i]));
        /* The synchronous open fails the same way. */
        zpi_object *o = NULL;
        zpi_err err = {0};
        assert_int_equal(zpi_object_open(s, url, &o, NULL, &err), ZP_ERR_NETWORK);
        assert_null(strstr(err.msg, "hunter2"));
        assert_null(strstr(err.msg, "s3cr3tsig"));
        assert_non_null(strstr(err.msg, kinds[i]));
    }
    /* one download each; the open's HEAD refused with 403 is followed by one
     * GET of the first byte (a server may refuse HEAD only), a 404 is not */
    assert_int_equal(proxy_count("GET", "secret.bin"), 3);
    assert_int_equal(proxy_count("HEAD", "secret.bin"), 2);
    zpi_storage_destroy(s);
    free(data);
}

static void test_sync_retries(void **state)
{
    (void)state;
    size_t size = 100000;
    char *data = make_file("sync.bin", size, 5);
    zpi_storage *s = make_storage(NULL, NULL, NULL);
    char url[1024];
    /* HEAD gets the 503 (status kinds apply to HEAD), the GET the reset. */
    url_of(url, sizeof url, g_proxy, "503,reset:30000", "sync.bin");
    zpi_object *o = NULL;
    zpi_object_info info;
    zpi_err err = {0};
    unsigned retries = 9;
    assert_int_equal(zpi_request_head(s, zpi_backend_for(url), url, &info, &retries, &err), ZP_OK);
    assert_int_equal(retries, 1);
    assert_true(info.size == size);
    assert_int_equal(zpi_object_open(s, url, &o, &info, &err), ZP_OK);
    char *buf = malloc(size);
    size_t n = 0;
    assert_int_equal(zpi_request_get(s, zpi_backend_for(url), url, &info, 0, buf, size, &n, &retries, &err), ZP_OK);
    assert_int_equal(retries, 1);
    assert_int_equal(n, size);
    assert_memory_equal(buf, data, size);
    assert_int_equal(proxy_count("GET", "sync.bin"), 2);
    zpi_object_close(o);
    free(buf);
    zpi_storage_destroy(s);
    free(data);
}

/* The file changes between two attempts: If-Range with the old validator is
 * answered 200 with the new file, and the download restarts from byte 0. */
static void test_changed_restarts(void **state)
{
    (void)state;
    size_t size = 300000;
    char *data = make_file("changed.bin", size, 6);
    zpi_storage *s = make_storage(NULL, NULL, NULL);
    zpi_xfer *x = NULL;
    zpi_err err = {0};
    assert_int_equal(zpi_xfer_create(s, 1, 0, &x, &err), ZP_OK);
    char url[1024];
    url_of(url, sizeof url, g_proxy, "reset:100000,429:2", "changed.bin");
    waiter w;
    waiter_init(&w);
    slot sl = {&w, 0};
    int fd = open_dest("changed.bin");
    size_t size2 = 250000;
    char *data2 = make_data(size2, 7);
    /* The hash of the new version: the hash restarts with the download. */
    zpi_xfer_job j = {.spec = url, .fd = fd, .expect_size = UINT64_MAX, .has_xxh64 = 1,
                      .xxh64 = XXH64(data2, size2, 0), .done = on_done, .user = &sl};
    assert_int_equal(zpi_xfer_submit(x, &j, NULL, &err), ZP_OK);
    usleep(1000000); /* the reset, then the 429 with Retry-After 2 */
    free(make_file("changed.bin", size2, 7));
    wait_for(&w, 1);
    zpi_xfer_result r = w.res[0];
    assert_int_equal(r.status, ZP_OK);
    assert_int_equal(r.retries, 2);
    size_t len;
    char *got = read_fd(fd, &len);
    assert_int_equal(len, size2);
    assert_memory_equal(got, data2, size2);
    assert_true(r.size == size2);
    assert_int_equal(proxy_count("GET", "changed.bin"), 3);
    zpi_xfer_destroy(x);
    close(fd);
    free(got);
    waiter_destroy(&w);
    zpi_storage_destroy(s);
    free(data);
    free(data2);
}

static int g_warns;
static void count_warns(void *user, zp_log_level lvl, const char *msg)
{
    (void)user;
    (void)msg;
    if (lvl == ZP_LOG_WARN)
        g_warns++;
}
static void no_ca(zp_storage_config *c) { c->ca_file = NULL; }
static void insecure(zp_storage_config *c)
{
    c->ca_file = NULL;
    c->insecure_tls = 1;
}

static void test_https(void **state)
{
    (void)state;
    size_t size = 100000;
    char *data = make_file("tls.bin", size, 8);
    char url[1024];
    url_of(url, sizeof url, g_https, NULL, "tls.bin");
    char *got;
    size_t len;
    /* With the tests' CA. */
    zpi_storage *s = make_storage(NULL, NULL, NULL);
    zpi_xfer_result r = run_one(s, url, size, data, &got, &len);
    assert_int_equal(r.status, ZP_OK);
    assert_memory_equal(got, data, size);
    free(got);
    zpi_storage_destroy(s);
    /* Without it: the certificate is not trusted, no retry. */
    g_warns = 0;
    s = make_storage(no_ca, count_warns, NULL);
    assert_int_equal(g_warns, 0);
    r = run_one(s, url, size, data, NULL, NULL);
    assert_int_equal(r.status, ZP_ERR_NETWORK);
    assert_int_equal(r.retries, 0);
    assert_non_null(strstr(r.err.msg, "tls.bin"));
    print_message("no CA: %s\n", r.err.msg);
    zpi_storage_destroy(s);
    /* Insecure: works, and warns. */
    s = make_storage(insecure, count_warns, NULL);
    assert_int_equal(g_warns, 1);
    r = run_one(s, url, size, data, &got, &len);
    assert_int_equal(r.status, ZP_OK);
    assert_memory_equal(got, data, size);
    free(got);
    zpi_storage_destroy(s);
    free(data);
}

/* PUT data as s3://bucket/key, signed by libcurl (the test's own upload). */
static void s3_put(zpi_storage *s, const char *key, const char *data, size_t size)
{
    char spec[512];
    snprintf(spec, sizeof spec, "s3://%s/%s", g_bucket, key);
    char *url = zpi_s3_http_url(g_s3, spec);
    assert_non_null(url);
    CURL *e = curl_easy_init();
    char sig[64];
    snprintf(sig, sizeof sig, "aws:amz:%s:s3", zpi_storage_config(s)->s3_region);
    struct curl_slist *h = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_AWS_SIGV4, sig);
    curl_easy_setopt(e, CURLOPT_USERNAME, g_key);
    curl_easy_setopt(e, CURLOPT_PASSWORD, g_secret);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "PUT");
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, data);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)size);
    zpi_buf b = {0};
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, curl_sink);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &b);
    assert_int_equal(curl_easy_perform(e), CURLE_OK);
    long code = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    if (code != 200)
        print_message("PUT %s: %ld %s\n", url, code, b.p ? b.p : "");
    assert_int_equal(code, 200);
    zpi_buf_free(&b);
    curl_slist_free_all(h);
    curl_easy_cleanup(e);
    free(url);
}

static void test_s3(void **state)
{
    (void)state;
    size_t size = 200000;
    char *data = make_file("s3src.bin", size, 9);
    setenv("AWS_ACCESS_KEY_ID", g_key, 1);
    setenv("AWS_SECRET_ACCESS_KEY", g_secret, 1);
    unsetenv("AWS_SESSION_TOKEN");
    setenv("AWS_REGION", "us-east-1", 1);
    zpi_storage *s = make_storage(NULL, NULL, NULL);
    const char *keys[] = {"plain/obj.bin", "dir/a b+c~(1).bin"};
    for (int i = 0; i < 2; i++) {
        char key[256], spec[512];
        snprintf(key, sizeof key, "%s/%s", g_prefix, keys[i]);
        s3_put(s, key, data, size);
        snprintf(spec, sizeof spec, "s3://%s/%s", g_bucket, key);
        char *got;
        size_t len;
        zpi_xfer_result r = run_one(s, spec, size, data, &got, &len);
        assert_int_equal(r.status, ZP_OK);
        assert_int_equal(r.retries, 0);
        assert_int_equal(len, size);
        assert_memory_equal(got, data, size);
        free(got);
        zpi_object *o = NULL;
        zpi_object_info info;
        zpi_err err = {0};
        assert_int_equal(zpi_object_open(s, spec, &o, &info, &err), ZP_OK);
        assert_true(info.size == size);
        char buf[1000];
        size_t n;
        assert_int_equal(zpi_object_read(o, 5000, buf, sizeof buf, &n, &err), ZP_OK);
        assert_int_equal(n, sizeof buf);
        assert_memory_equal(buf, data + 5000, sizeof buf);
        zpi_object_close(o);
    }
    zpi_storage_destroy(s);
    /* A wrong secret: 403 at once, no retry, no secret in the message. */
    setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-value", 1);
    s = make_storage(NULL, NULL, NULL);
    char spec[512];
    snprintf(spec, sizeof spec, "s3://%s/%s/%s", g_bucket, g_prefix, keys[0]);
    zpi_xfer_result r = run_one(s, spec, size, data, NULL, NULL);
    print_message("s3 wrong secret: %s\n", r.err.msg);
    assert_int_equal(r.status, ZP_ERR_NETWORK);
    assert_int_equal(r.retries, 0);
    assert_non_null(strstr(r.err.msg, "403"));
    assert_non_null(strstr(r.err.msg, spec));
    assert_null(strstr(r.err.msg, "wrong-secret-value"));
    zpi_storage_destroy(s);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    unsetenv("AWS_REGION");
    free(data);
}

static void test_parallel_and_stats(void **state)
{
    (void)state;
    enum { N = 6 };
    size_t size = 50000;
    char *data[N];
    int fds[N];
    slot sl[N];
    waiter w;
    waiter_init(&w);
    zpi_storage *s = make_storage(NULL, NULL, NULL);
    zpi_xfer *x = NULL;
    zpi_err err = {0};
    assert_int_equal(zpi_xfer_create(s, 2, 0, &x, &err), ZP_OK);
    double t0 = zpi_now();
    for (int i = 0; i < N; i++) {
        char name[64], url[1024];
        snprintf(name, sizeof name, "par%d.bin", i);
        data[i] = make_file(name, size, 20 + (unsigned)i);
        /* Every request waits 300 ms; the second file also needs a retry. */
        url_of(url, sizeof url, g_proxy, i == 1 ? "delay:300*0,503" : "delay:300*0", name);
        fds[i] = open_dest(name);
        sl[i] = (slot){&w, i};
        zpi_xfer_job j = {.spec = url, .fd = fds[i], .expect_size = size, .has_xxh64 = 1,
                          .xxh64 = XXH64(data[i], size, 0), .done = on_done, .user = &sl[i]};
        assert_int_equal(zpi_xfer_submit(x, &j, NULL, &err), ZP_OK);
    }
    wait_for(&w, N);
    double dt = zpi_now() - t0;
    print_message("6 jobs x 300 ms, 2 at a time: %.2f s\n", dt);
    /* 7 requests of >= 300 ms, 2 at a time: at least 4 rounds. */
    assert_true(dt >= 1.15);
    for (int i = 0; i < N; i++) {
        assert_int_equal(w.calls[i], 1);
        assert_int_equal(w.res[i].status, ZP_OK);
        size_t len;
        char *got = read_fd(fds[i], &len);
        assert_int_equal(len, size);
        assert_memory_equal(got, data[i], size);
        free(got);
    }
    zpi_xfer_stats st;
    zpi_xfer_stats_get(x, &st);
    assert_true(st.downloads == N);
    assert_true(st.failures == 0);
    assert_true(st.retries == 1);
    assert_true(st.bytes == N * size);
    assert_true(st.latency_ns.count == N);
    assert_true(st.latency_ns.min_ns >= 250000000ULL);
    assert_true(st.busy_ns >= 1000000000ULL && st.busy_ns <= (uint64_t)(dt * 1e9) + 1000000);
    zpi_xfer_destroy(x);
    for (int i = 0; i < N; i++) {
        close(fds[i]);
        free(data[i]);
    }
    waiter_destroy(&w);
    zpi_storage_destroy(s);
}

static void test_demand_order(void **state)
{
    (void)state;
    size_t size = 1000;
    zpi_storage *s = make_storage(NULL, NULL, NULL);
    waiter w;
    waiter_init(&w);
    zpi_xfer *x = NULL;
    zpi_err err = {0};
    /* One slot, one extra for demand. */
    assert_int_equal(zpi_xfer_create(s, 1, 1, &x, &err), ZP_OK);
    enum { N = 6 };
    slot sl[N];
    int fds[N];
    uint64_t ids[N];
    /* 0: a slow prefetch holding the slot; 1-3 prefetches queued; 3 is
     * promoted, 4 and 5 are demands: they take the extra slot in turn while 0
     * still runs, ahead of 1 and 2. Expected: 3, 4, 5, 0, 1, 2. */
    for (int i = 0; i < N; i++) {
        char name[64], url[1024];
        snprintf(name, sizeof name, "ord%d.bin", i);
        free(make_file(name, size, 30 + (unsigned)i));
        url_of(url, sizeof url, g_proxy, i == 0 ? "delay:1500" : i == 5 ? "delay:100" : "delay:1",
               name);
        fds[i] = open_dest(name);
        sl[i] = (slot){&w, i};
        zpi_xfer_job j = {.spec = url, .fd = fds[i], .expect_size = size, .demand = i >= 4,
                          .done = on_done, .user = &sl[i]};
        if (i == 4)
            zpi_xfer_promote(x, ids[3]);
        assert_int_equal(zpi_xfer_submit(x, &j, &ids[i], &err), ZP_OK);
        if (i == 0)
            usleep(100000); /* let it take the slot */
    }
    wait_for(&w, N);
    int want[N] = {3, 4, 5, 0, 1, 2};
    for (int i = 0; i < N; i++) {
        assert_int_equal(w.order[i], want[i]);
        assert_int_equal(w.res[i].status, ZP_OK);
    }
    zpi_xfer_destroy(x);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    waiter_destroy(&w);
    zpi_storage_destroy(s);
}

static void test_destroy_in_flight(void **state)
{
    (void)state;
    size_t size = 100000;
    free(make_file("inflight.bin", size, 40));
    zpi_storage *s = make_storage(NULL, NULL, NULL);
    waiter w;
    waiter_init(&w);
    zpi_xfer *x = NULL;
    zpi_err err = {0};
    assert_int_equal(zpi_xfer_create(s, 2, 0, &x, &err), ZP_OK);
    enum { N = 5 };
    slot sl[N];
    int fds[N];
    for (int i = 0; i < N; i++) {
        char url[1024], name[64];
        /* Two stall mid-body, one waits for a retry, two are queued. */
        url_of(url, sizeof url, g_proxy, i == 2 ? "429:5*0" : "stall:1000*0", "inflight.bin");
        snprintf(name, sizeof name, "inflight%d.bin", i);
        fds[i] = open_dest(name);
        sl[i] = (slot){&w, i};
        zpi_xfer_job j = {.spec = url, .fd = fds[i], .expect_size = size, .done = on_done,
                          .user = &sl[i], .demand = i == 2};
        assert_int_equal(zpi_xfer_submit(x, &j, NULL, &err), ZP_OK);
    }
    usleep(300000);
    double t0 = zpi_now();
    zpi_xfer_destroy(x);
    assert_true(zpi_now() - t0 < 2);
    assert_int_equal(w.n_done, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(w.calls[i], 1);
        assert_int_equal(w.res[i].status, ZP_ERR_STATE);
        assert_non_null(strstr(w.res[i].err.msg, "cancelled"));
        close(fds[i]);
    }
    waiter_destroy(&w);
    zpi_storage_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_http),
        cmocka_unit_test(test_faults),
        cmocka_unit_test(test_stall_times_out),
        cmocka_unit_test(test_retry_after_capped),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_redacted_fail_fast),
        cmocka_unit_test(test_sync_retries),
        cmocka_unit_test(test_changed_restarts),
        cmocka_unit_test(test_https),
        cmocka_unit_test(test_s3),
        cmocka_unit_test(test_parallel_and_stats),
        cmocka_unit_test(test_demand_order),
        cmocka_unit_test(test_destroy_in_flight),
    };
    return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
