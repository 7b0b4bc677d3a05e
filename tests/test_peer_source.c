/*
 * test_peer_source.c - the fetcher's peer source (zp_storage_config.peer,
 * src/io/fetcher.c) with a fake source, no MPI and no server: storage is
 * an address nothing listens on (127.0.0.1:1), so a shard the peer does
 * not deliver fails with storage's error, which shows the fallback.
 *  - the peer's bytes become the cache file (no download), counted;
 *    the next acquire is a hit, the peer not asked again;
 *  - bytes that fail the manifest hash, or a failed answer, fall back to
 *    storage at once (counted); a declined request goes to storage;
 *  - serve() gives the shard's bytes through the cache;
 *  - destroy with a request in flight: detach fails it, nothing hangs;
 *  - next_use(): the source's next use keeps a shard in the cache that
 *    this process's own order does not need;
 *  - a demanded shard is handed to its reader still pinned by the commit:
 *    the cache is not looked up again (between the two, another rank of
 *    the node could evict the file and the reader would download it twice);
 *  - the trace of downloads names the read each download is for: this
 *    rank's next read (its order's position as epoch and position), or the
 *    asking rank's read that serve() was given.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>
#include <unistd.h>
#include <xxhash.h>

#include "io/fetcher.h"
#include "testutil.h"

#define NSH 4
#define SZ 1000

typedef struct fake {
    int mode;            /* 0 good bytes, 1 bad bytes, 2 fail, 3 decline, 4 never answer */
    int requests;
    void *ctx;
    zp_peer_serve_fn serve;
    pthread_mutex_t mu;
    /* the request held by mode 4 */
    void (*held_done)(void *, int);
    void *held_user;
    uint64_t nu[NSH];    /* next_use answers (UINT64_MAX: none) */
    uint64_t own[NSH];   /* this process's order (UINT64_MAX: none) */
    char trace[8][512];  /* the debug messages, the first 8 */
    int ntrace;
    int answering;       /* answer threads not done (detach waits for them, as a source must) */
    pthread_cond_t cv;
} fake;

static char content[NSH][SZ];

typedef struct job {
    fake *f;
    int fd, ok;
    char bytes[SZ];
    void (*done)(void *, int);
    void *user;
} job;

static void *answer(void *arg)
{
    job *j = arg;
    if (j->ok && pwrite(j->fd, j->bytes, SZ, 0) != SZ)
        j->ok = 0;
    j->done(j->user, j->ok);
    fake *f = j->f;
    free(j);
    pthread_mutex_lock(&f->mu);
    f->answering--;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

static int f_request(void *user, void *ctx, size_t shard, uint64_t bytes, int fd,
                     void (*done)(void *, int), void *done_user)
{
    fake *f = user;
    pthread_mutex_lock(&f->mu);
    f->requests++;
    int mode = f->mode;
    if (mode == 4) {
        f->held_done = done;
        f->held_user = done_user;
    }
    pthread_mutex_unlock(&f->mu);
    assert_true(ctx == f->ctx);
    assert_int_equal(bytes, SZ);
    if (mode == 3)
        return -1;
    if (mode == 4)
        return 0;
    job *j = calloc(1, sizeof *j);
    j->f = f;
    pthread_mutex_lock(&f->mu);
    f->answering++;
    pthread_mutex_unlock(&f->mu);
    j->fd = fd;
    j->ok = mode != 2;
    memcpy(j->bytes, content[shard], SZ);
    if (mode == 1)
        j->bytes[7] ^= 1;
    j->done = done;
    j->user = done_user;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, answer, j), 0);
    pthread_detach(t);
    return 0;
}

static void f_attach(void *user, void *ctx, zp_peer_serve_fn serve)
{
    fake *f = user;
    f->ctx = ctx;
    f->serve = serve;
}

static void f_detach(void *user, void *ctx)
{
    fake *f = user;
    pthread_mutex_lock(&f->mu);
    while (f->answering)
        pthread_cond_wait(&f->cv, &f->mu);
    void (*d)(void *, int) = f->held_done;
    void *du = f->held_user;
    f->held_done = NULL;
    pthread_mutex_unlock(&f->mu);
    if (d)
        d(du, 0);
    f->ctx = NULL;
    (void)ctx;
}

static uint64_t f_next_use(void *user, size_t shard) { return ((fake *)user)->nu[shard]; }

typedef struct fx {
    char *dir;
    fake fk;
    zp_peer_source src;
    zpi_storage *st;
    zpi_fetcher *f;
} fx;

/* this process's order: the fake's own[] (next_use_user is the fake) */
static uint64_t own_next(void *user, size_t shard) { return ((fake *)user)->own[shard]; }

/* positions of that order: 100 samples an epoch */
static int own_locate(void *user, uint64_t g, uint32_t *epoch, uint64_t *position)
{
    (void)user;
    *epoch = (uint32_t)(g / 100);
    *position = g % 100;
    return 1;
}

static void capture(void *user, zp_log_level level, const char *msg)
{
    fake *f = user;
    pthread_mutex_lock(&f->mu);
    if (level == ZP_LOG_DEBUG && f->ntrace < 8)
        snprintf(f->trace[f->ntrace++], sizeof f->trace[0], "%s", msg);
    pthread_mutex_unlock(&f->mu);
}

static void fx_start(fx *x, uint64_t limit)
{
    memset(x, 0, sizeof *x);
    x->dir = zpt_tmpdir();
    pthread_mutex_init(&x->fk.mu, NULL);
    pthread_cond_init(&x->fk.cv, NULL);
    for (int i = 0; i < NSH; i++)
        x->fk.nu[i] = x->fk.own[i] = UINT64_MAX;
    x->src = (zp_peer_source){.request = f_request, .attach = f_attach, .detach = f_detach,
                              .next_use = f_next_use, .user = &x->fk};
    zp_storage_config c;
    zp_storage_config_init(&c);
    c.cache_dir = x->dir;
    c.cache_limit_bytes = limit;
    c.retries = 0;
    c.connect_timeout_s = 2;
    c.peer = &x->src;
    zpi_err err;
    assert_int_equal(zpi_storage_create(&c, NULL, NULL, &x->st, &err), ZP_OK);
    zpi_fetch_shard sh[NSH];
    char spec[NSH][64], name[NSH][16];
    for (int i = 0; i < NSH; i++) {
        for (int k = 0; k < SZ; k++)
            content[i][k] = (char)('a' + (i * 7 + k) % 26);
        snprintf(spec[i], sizeof spec[i], "http://127.0.0.1:1/peer/s%d.bin", i);
        snprintf(name[i], sizeof name[i], "s%d", i);
        sh[i] = (zpi_fetch_shard){.spec = spec[i], .name = name[i], .bytes = SZ, .has_xxh64 = 1,
                                  .xxh64 = XXH64(content[i], SZ, 0)};
    }
    zpi_fetcher_config fc = {.storage = x->st, .shards = sh, .n_shards = NSH, .parallelism = 1,
                             .demand_slots = 1, .use_peer = 1, .next_use = own_next,
                             .next_use_user = &x->fk, .locate = own_locate, .log = capture,
                             .log_user = &x->fk};
    assert_int_equal(zpi_fetcher_create(&fc, &x->f, &err), ZP_OK);
    assert_non_null(x->fk.ctx); /* attached */
}

static void fx_stop(fx *x)
{
    zpi_fetcher_destroy(x->f);
    assert_null(x->fk.ctx); /* detached */
    zpi_storage_destroy(x->st);
    zpt_rmtree(x->dir);
    free(x->dir);
    pthread_mutex_destroy(&x->fk.mu);
    pthread_cond_destroy(&x->fk.cv);
}

static void test_peer_bytes_become_the_cache_file(void **state)
{
    (void)state;
    fx x;
    fx_start(&x, 1 << 20);
    zpi_fetch_pin pin;
    zpi_err err;
    assert_int_equal(zpi_fetcher_acquire(x.f, 1, &pin, &err), ZP_OK);
    size_t len = 0;
    char *got = zpt_read_file(pin.path, &len);
    assert_int_equal(len, SZ);
    assert_memory_equal(got, content[1], SZ);
    free(got);
    zpi_fetcher_release(x.f, &pin, 0);
    assert_int_equal(zpi_fetcher_acquire(x.f, 1, &pin, &err), ZP_OK); /* a hit */
    zpi_fetcher_release(x.f, &pin, 0);
    zpi_fetcher_stats s;
    zpi_fetcher_stats_get(x.f, &s);
    assert_int_equal(x.fk.requests, 1);
    assert_int_equal(s.peer_shards, 1);
    assert_int_equal(s.peer_bytes, SZ);
    assert_int_equal(s.peer_fallbacks, 0);
    assert_int_equal(s.xfer.downloads, 0);
    assert_int_equal(s.hits, 1);

    /* serve(): another node's request, through this cache */
    char buf[SZ];
    zp_peer_use use = {3, 1, 17};
    assert_int_equal(x.fk.serve(x.fk.ctx, 1, buf, SZ, &use), 0);
    assert_memory_equal(buf, content[1], SZ);
    zpi_fetcher_stats_get(x.f, &s);
    assert_int_equal(s.peer_served, 1);
    assert_int_equal(s.peer_served_bytes, SZ);
    fx_stop(&x);
}

/* mode: the peer's answer; the acquire then meets storage's error */
static void falls_back(int mode)
{
    fx x;
    fx_start(&x, 1 << 20);
    x.fk.mode = mode;
    zpi_fetch_pin pin;
    zpi_err err;
    zpi_err_clear(&err);
    zp_status st = zpi_fetcher_acquire(x.f, 2, &pin, &err);
    assert_int_not_equal(st, ZP_OK);
    assert_non_null(strstr(zpi_err_msg(&err), "127.0.0.1:1"));
    zpi_fetcher_stats s;
    zpi_fetcher_stats_get(x.f, &s);
    assert_int_equal(s.peer_shards, 0);
    assert_int_equal(s.peer_fallbacks, mode == 3 ? 0 : 1);
    assert_true(x.fk.requests >= 1);
    fx_stop(&x);
}

static void test_bad_bytes_fall_back(void **state)
{
    (void)state;
    falls_back(1);
}

static void test_failed_answer_falls_back(void **state)
{
    (void)state;
    falls_back(2);
}

static void test_declined_goes_to_storage(void **state)
{
    (void)state;
    falls_back(3);
}

static void *acquire_thread(void *arg)
{
    fx *x = arg;
    zpi_fetch_pin pin;
    zpi_err err;
    static zp_status st;
    st = zpi_fetcher_acquire(x->f, 0, &pin, &err);
    return &st;
}

static void test_destroy_with_a_request_in_flight(void **state)
{
    (void)state;
    fx x;
    fx_start(&x, 1 << 20);
    x.fk.mode = 4; /* never answers */
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, acquire_thread, &x), 0);
    for (int i = 0; i < 500; i++) {
        pthread_mutex_lock(&x.fk.mu);
        int held = x.fk.held_done != NULL;
        pthread_mutex_unlock(&x.fk.mu);
        if (held)
            break;
        usleep(2000);
    }
    assert_non_null(x.fk.held_done);
    zpi_fetcher_cancel(x.f); /* as a pipeline's stop does before joining its users */
    void *r;
    pthread_join(t, &r);
    assert_int_equal(*(zp_status *)r, ZP_ERR_STATE);
    fx_stop(&x); /* detach fails the held request: no hang, nothing left */
}

static void test_next_use_keeps_what_the_source_needs(void **state)
{
    (void)state;
    fx x;
    fx_start(&x, 2 * SZ); /* room for two */
    zpi_fetch_pin pin;
    zpi_err err;
    /* shard 0: needed by the source's ranks soon; shard 1: by nobody */
    x.fk.nu[0] = 5;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(zpi_fetcher_acquire(x.f, (size_t)i, &pin, &err), ZP_OK);
        zpi_fetcher_release(x.f, &pin, 0);
    }
    assert_int_equal(zpi_fetcher_acquire(x.f, 2, &pin, &err), ZP_OK); /* evicts one */
    zpi_fetcher_release(x.f, &pin, 0);
    assert_int_equal(zpi_fetcher_acquire(x.f, 0, &pin, &err), ZP_OK);
    zpi_fetcher_release(x.f, &pin, 0);
    zpi_fetcher_stats s;
    zpi_fetcher_stats_get(x.f, &s);
    assert_int_equal(x.fk.requests, 3); /* shard 0 was kept: a hit */
    assert_int_equal(s.hits, 1);
    fx_stop(&x);
}

static void test_demanded_shard_handed_over_pinned(void **state)
{
    (void)state;
    fx x;
    fx_start(&x, 1 << 20);
    zpi_fetch_pin pin;
    zpi_err err;
    assert_int_equal(zpi_fetcher_acquire(x.f, 3, &pin, &err), ZP_OK);
    assert_int_equal(pin.remote, 1);
    assert_true(pin.e.fd >= 0);
    size_t len = 0;
    char *got = zpt_read_file(pin.path, &len);
    assert_int_equal(len, SZ);
    assert_memory_equal(got, content[3], SZ);
    free(got);
    zpi_fetcher_stats s;
    zpi_fetcher_stats_get(x.f, &s);
    assert_int_equal(s.cache.misses, 1); /* the one lookup: not there, received */
    assert_int_equal(s.cache.hits, 0);   /* no second lookup after the commit */
    assert_int_equal(s.misses, 1);
    zpi_fetcher_release(x.f, &pin, 0);
    assert_int_equal(zpi_fetcher_acquire(x.f, 3, &pin, &err), ZP_OK); /* now a hit */
    zpi_fetcher_release(x.f, &pin, 0);
    zpi_fetcher_stats_get(x.f, &s);
    assert_int_equal(s.cache.hits, 1);
    assert_int_equal(x.fk.requests, 1);
    fx_stop(&x);
}

static void test_trace_names_the_read(void **state)
{
    (void)state;
    fx x;
    fx_start(&x, 1 << 20);
    x.fk.mode = 3; /* declined: from storage (nothing listens there: it fails) */
    x.fk.own[2] = 205; /* this rank reads shard 2 at epoch 2, position 5 */
    zpi_fetch_pin pin;
    zpi_err err;
    assert_int_not_equal(zpi_fetcher_acquire(x.f, 2, &pin, &err), ZP_OK);
    /* another node's rank 3 asked for shard 1, for its read at epoch 1,
     * position 17: the download is for that read, not for this rank's */
    char buf[SZ];
    zp_peer_use use = {3, 1, 17};
    assert_int_not_equal(x.fk.serve(x.fk.ctx, 1, buf, SZ, &use), 0);
    pthread_mutex_lock(&x.fk.mu);
    int n = x.fk.ntrace;
    char t0[512], t1[512];
    snprintf(t0, sizeof t0, "%s", n > 0 ? x.fk.trace[0] : "");
    snprintf(t1, sizeof t1, "%s", n > 1 ? x.fk.trace[1] : "");
    pthread_mutex_unlock(&x.fk.mu);
    assert_int_equal(n, 2);
    assert_non_null(strstr(t0, "download: shard 's2' from storage (needed now), read at epoch 2 position 5"));
    assert_non_null(
        strstr(t1, "download: shard 's1' from storage (for another node: rank 3), read at epoch 1 "
                   "position 17"));
    fx_stop(&x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peer_bytes_become_the_cache_file),
        cmocka_unit_test(test_bad_bytes_fall_back),
        cmocka_unit_test(test_failed_answer_falls_back),
        cmocka_unit_test(test_declined_goes_to_storage),
        cmocka_unit_test(test_destroy_with_a_request_in_flight),
        cmocka_unit_test(test_next_use_keeps_what_the_source_needs),
        cmocka_unit_test(test_demanded_shard_handed_over_pinned),
        cmocka_unit_test(test_trace_names_the_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
