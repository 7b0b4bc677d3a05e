/*
 * test_disk_cache.c - the shard cache on disk (src/io/disk_cache.c): hit, miss,
 * download and commit; no partial file under the final name; two threads and
 * four processes sharing one folder (each object downloaded once); kill -9
 * and a stuck owner (lease expiry) taken over; stale temporary files; the
 * byte limit with prefetches and with demands; pins (also in another
 * process); Belady order, LRU among unknown next uses, NOROOM; wrong sizes,
 * invalidation, foreign files, bad keys and a folder that cannot be made.
 *
 * Child processes (fork) never call cmocka: they report through their exit
 * status and pipes.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

#include "io/disk_cache.h"
#include "testutil.h"
#include "base/util.h"

/* ------------------------------------------------------------ helpers */

typedef struct nu_table {
    const char *keys[32];
    uint64_t next[32];
    int n;
} nu_table;

static uint64_t nu_fn(void *user, const char *key)
{
    nu_table *t = user;
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->keys[i], key) == 0)
            return t->next[i];
    return UINT64_MAX;
}

static void nu_set(nu_table *t, const char *key, uint64_t v)
{
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->keys[i], key) == 0) {
            t->next[i] = v;
            return;
        }
    t->keys[t->n] = key;
    t->next[t->n++] = v;
}

static zpi_disk_cache *mk(const char *dir, uint64_t limit, double lease, nu_table *nu)
{
    zpi_disk_cache_config cfg = {0};
    cfg.dir = dir;
    cfg.limit_bytes = limit;
    cfg.lease_s = lease;
    if (nu) {
        cfg.next_use = nu_fn;
        cfg.next_use_user = nu;
    }
    zpi_disk_cache *c = NULL;
    zpi_err err = {0};
    if (zpi_disk_cache_create(&cfg, &c, &err) != ZP_OK)
        return NULL;
    return c;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The byte `i` of object key (so that contents can be checked). */
static unsigned char obj_byte(const char *key, uint64_t i)
{
    unsigned h = 0;
    for (const char *p = key; *p; p++)
        h = h * 31u + (unsigned char)*p;
    return (unsigned char)(h + i * 7u);
}

static int write_obj(int fd, const char *key, uint64_t from, uint64_t to)
{
    unsigned char buf[4096];
    while (from < to) {
        size_t n = 0;
        for (; n < sizeof buf && from + n < to; n++)
            buf[n] = obj_byte(key, from + n);
        if (write(fd, buf, n) != (ssize_t)n)
            return -1;
        from += n;
    }
    return 0;
}

/* 1 when path holds exactly object key of size bytes. */
static int obj_ok(const char *path, const char *key, uint64_t size)
{
    size_t len = 0;
    unsigned char *d = (unsigned char *)zpt_read_file(path, &len);
    if (!d)
        return 0;
    int ok = len == size;
    for (size_t i = 0; ok && i < len; i++)
        ok = d[i] == obj_byte(key, i);
    free(d);
    return ok;
}

/* Downloads and commits key (expects DOWNLOAD), leaves it READY in e. */
static void download(zpi_disk_cache *c, const char *key, uint64_t size, int demand,
                     zpi_dc_entry *e)
{
    zpi_dc_state st = ZPI_DC_NOROOM;
    zpi_err err = {0};
    assert_int_equal(zpi_dc_acquire(c, key, size, demand, e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_DOWNLOAD);
    assert_int_equal(write_obj(e->fd, key, 0, size), 0);
    if (zpi_dc_commit(c, e, &err) != ZP_OK)
        fail_msg("commit %s: %s", key, zpi_err_msg(&err));
    assert_int_equal(e->state, ZPI_DC_READY);
}

static void put(zpi_disk_cache *c, const char *key, uint64_t size, int demand)
{
    zpi_dc_entry e;
    download(c, key, size, demand, &e);
    zpi_dc_release(c, &e);
}

static int exists_in(const char *dir, const char *name)
{
    char *p = zpt_path(dir, name);
    struct stat st;
    int r = stat(p, &st) == 0;
    free(p);
    return r;
}

static int done_exists(const char *dir, const char *key)
{
    char n[256];
    snprintf(n, sizeof n, "%s.zdc", key);
    return exists_in(dir, n);
}

/* Counts folder entries whose name contains s. */
static int count_names(const char *dir, const char *s)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL)
        n += strstr(de->d_name, s) != NULL;
    if (d)
        closedir(d);
    return n;
}

/* Complete files plus the bytes reserved in lock files, read from the folder. */
static uint64_t folder_bytes(const char *dir)
{
    DIR *d = opendir(dir);
    uint64_t sum = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        char *p = zpt_path(dir, de->d_name);
        struct stat st;
        if (zpi_has_suffix(de->d_name, ".zdc") && stat(p, &st) == 0) {
            sum += (uint64_t)st.st_size;
        } else if (zpi_has_suffix(de->d_name, ".zdc.lock")) {
            char *t = zpt_read_file(p, NULL);
            char host[320];
            long pid;
            unsigned long long nonce, res;
            if (t && sscanf(t, "zdc1 %319s %ld %llx %llu", host, &pid, &nonce, &res) == 4)
                sum += res;
            free(t);
        }
        free(p);
    }
    if (d)
        closedir(d);
    return sum;
}

typedef struct tdir {
    char *dir;
} tdir;

static int setup(void **state)
{
    tdir *t = calloc(1, sizeof *t);
    t->dir = zpt_tmpdir();
    *state = t;
    return t->dir ? 0 : -1;
}

static int teardown(void **state)
{
    tdir *t = *state;
    zpt_rmtree(t->dir);
    free(t->dir);
    free(t);
    return 0;
}

#define DIR_OF(state) (((tdir *)*(state))->dir)

/* ------------------------------------------------------------ basics */

static void test_hit_miss_commit_release(void **state)
{
    const char *dir = DIR_OF(state);
    zpi_disk_cache *c = mk(dir, 1 << 20, 30, NULL);
    assert_non_null(c);
    assert_string_equal(zpi_disk_cache_dir(c), dir);
    zpi_dc_entry e;
    zpi_dc_state st;
    zpi_err err = {0};
    assert_int_equal(zpi_dc_acquire(c, "shard-0.jsonl", 5000, 1, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_DOWNLOAD);
    assert_true(e.fd >= 0);
    assert_int_equal(write_obj(e.fd, "shard-0.jsonl", 0, 5000), 0);
    assert_int_equal(zpi_dc_commit(c, &e, &err), ZP_OK);
    assert_int_equal(e.state, ZPI_DC_READY);
    assert_true(e.fd >= 0);
    assert_true(obj_ok(e.path, "shard-0.jsonl", 5000));
    zpi_dc_release(c, &e);
    assert_int_equal(count_names(dir, ".zdc.lock"), 0); /* no download lock left */
    assert_int_equal(count_names(dir, ".part."), 0);

    assert_int_equal(zpi_dc_acquire(c, "shard-0.jsonl", 5000, 0, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_READY);
    assert_true(obj_ok(e.path, "shard-0.jsonl", 5000));
    zpi_dc_release(c, &e);
    zpi_disk_cache_stats s;
    zpi_disk_cache_stats_get(c, &s);
    assert_int_equal(s.hits, 1);
    assert_int_equal(s.misses, 1);
    assert_int_equal(s.evictions, 0);
    assert_int_equal(s.bytes_in_cache, 5000);
    zpi_disk_cache_destroy(c);

    /* Another cache object (another process would be the same) finds it. */
    c = mk(dir, 1 << 20, 30, NULL);
    assert_int_equal(zpi_dc_acquire(c, "shard-0.jsonl", 5000, 1, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_READY);
    zpi_dc_release(c, &e);
    zpi_disk_cache_destroy(c);
    zpi_disk_cache_destroy(NULL);
}

static void test_no_partial_under_final_name(void **state)
{
    const char *dir = DIR_OF(state);
    zpi_disk_cache *c = mk(dir, 1 << 20, 30, NULL);
    zpi_disk_cache *c2 = mk(dir, 1 << 20, 30, NULL);
    zpi_dc_entry e, e2;
    zpi_dc_state st;
    zpi_err err = {0};
    assert_int_equal(zpi_dc_acquire(c, "k", 1000, 1, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_DOWNLOAD);
    assert_int_equal(write_obj(e.fd, "k", 0, 500), 0);
    assert_false(done_exists(dir, "k"));
    assert_non_null(strstr(e.path, ".zdc.part."));
    /* Another user sees it busy, never the partial file. */
    assert_int_equal(zpi_dc_acquire(c2, "k", 1000, 1, &e2, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_BUSY);
    assert_int_equal(e2.fd, -1);
    /* A commit of an incomplete file fails and leaves nothing. */
    assert_int_equal(zpi_dc_commit(c, &e, &err), ZP_ERR_IO);
    assert_non_null(strstr(zpi_err_msg(&err), "500 bytes written, 1000 expected"));
    assert_false(done_exists(dir, "k"));
    assert_int_equal(count_names(dir, ".part."), 0);
    assert_int_equal(count_names(dir, ".zdc.lock"), 0);
    /* Abort drops the lock and the temporary file. */
    assert_int_equal(zpi_dc_acquire(c2, "k", 1000, 1, &e2, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_DOWNLOAD);
    assert_int_equal(write_obj(e2.fd, "k", 0, 10), 0);
    zpi_dc_abort(c2, &e2);
    assert_int_equal(count_names(dir, ".part."), 0);
    assert_int_equal(count_names(dir, ".zdc.lock"), 0);
    assert_false(done_exists(dir, "k"));
    put(c, "k", 1000, 1);
    assert_true(done_exists(dir, "k"));
    zpi_disk_cache_destroy(c);
    zpi_disk_cache_destroy(c2);
}

/* ------------------------------------------------------------ two threads */

typedef struct thr_arg {
    zpi_disk_cache *c;
    const char *key;
    pthread_barrier_t *bar;
    zpi_dc_state first;
    int ok;
} thr_arg;

static void *thr_main(void *p)
{
    thr_arg *a = p;
    zpi_dc_entry e;
    zpi_err err = {0};
    pthread_barrier_wait(a->bar);
    if (zpi_dc_acquire(a->c, a->key, 3000, 1, &e, &a->first, &err) != ZP_OK)
        return NULL;
    zpi_dc_state st = a->first;
    if (st == ZPI_DC_DOWNLOAD) {
        sleep_s(0.05);
        if (write_obj(e.fd, a->key, 0, 3000) != 0 || zpi_dc_commit(a->c, &e, &err) != ZP_OK)
            return NULL;
    } else {
        for (int i = 0; i < 100 && st == ZPI_DC_BUSY; i++) {
            zpi_dc_wait(a->c, a->key, 5);
            if (zpi_dc_acquire(a->c, a->key, 3000, 1, &e, &st, &err) != ZP_OK)
                return NULL;
        }
        if (st != ZPI_DC_READY)
            return NULL;
    }
    a->ok = obj_ok(e.path, a->key, 3000);
    zpi_dc_release(a->c, &e);
    return NULL;
}

static void test_two_threads_one_download(void **state)
{
    const char *dir = DIR_OF(state);
    zpi_disk_cache *c = mk(dir, 1 << 20, 30, NULL);
    const char *keys[] = {"t0", "t1", "t2", "t3", "t4"};
    for (int k = 0; k < 5; k++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, 2);
        thr_arg a[2] = {{c, keys[k], &bar, ZPI_DC_NOROOM, 0}, {c, keys[k], &bar, ZPI_DC_NOROOM, 0}};
        pthread_t t[2];
        for (int i = 0; i < 2; i++)
            pthread_create(&t[i], NULL, thr_main, &a[i]);
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
        pthread_barrier_destroy(&bar);
        assert_true(a[0].ok && a[1].ok);
        int downloads = (a[0].first == ZPI_DC_DOWNLOAD) + (a[1].first == ZPI_DC_DOWNLOAD);
        int busy = (a[0].first == ZPI_DC_BUSY) + (a[1].first == ZPI_DC_BUSY);
        /* One downloads; the other was either BUSY, or came after the commit
         * (READY): never two downloads. */
        assert_int_equal(downloads, 1);
        assert_true(busy == 1 || a[0].first == ZPI_DC_READY || a[1].first == ZPI_DC_READY);
    }
    zpi_disk_cache_stats s;
    zpi_disk_cache_stats_get(c, &s);
    assert_int_equal(s.takeovers, 0);
    zpi_disk_cache_destroy(c);
}

/* ------------------------------------------------------------ four processes */

#define NPROC 4
#define NKEYS 12

static int child_fetch_all(const char *dir, const char *countfile, int rank)
{
    zpi_disk_cache *c = mk(dir, 1 << 24, 30, NULL);
    if (!c)
        return 10;
    int order[NKEYS];
    for (int i = 0; i < NKEYS; i++)
        order[i] = (rank % 2) ? (NKEYS - 1 - (i + rank) % NKEYS) : (i + 3 * rank) % NKEYS;
    for (int i = 0; i < NKEYS; i++) {
        char key[32];
        snprintf(key, sizeof key, "obj-%02d.bin", order[i]);
        uint64_t size = 20000 + (uint64_t)order[i] * 1000;
        zpi_dc_entry e;
        zpi_dc_state st = ZPI_DC_BUSY;
        zpi_err err = {0};
        for (int tries = 0; st == ZPI_DC_BUSY; tries++) {
            if (tries > 500)
                return 11;
            if (tries)
                zpi_dc_wait(c, key, 5);
            if (zpi_dc_acquire(c, key, size, 1, &e, &st, &err) != ZP_OK)
                return 12;
        }
        if (st == ZPI_DC_DOWNLOAD) {
            int fd = open(countfile, O_WRONLY | O_APPEND | O_CLOEXEC);
            char line[64];
            int n = snprintf(line, sizeof line, "%s\n", key);
            if (fd < 0 || write(fd, line, (size_t)n) != n)
                return 13;
            close(fd);
            if (write_obj(e.fd, key, 0, size / 2) != 0)
                return 14;
            sleep_s(0.005);
            if (zpi_dc_renew(c, &e, &err) != ZP_OK)
                return 15;
            if (write_obj(e.fd, key, size / 2, size) != 0 || zpi_dc_commit(c, &e, &err) != ZP_OK)
                return 16;
        } else if (st != ZPI_DC_READY) {
            return 17;
        }
        if (!obj_ok(e.path, key, size))
            return 18;
        zpi_dc_release(c, &e);
    }
    zpi_disk_cache_destroy(c);
    return 0;
}

static void test_four_processes_download_once(void **state)
{
    const char *dir = DIR_OF(state);
    char *cache = zpt_path(dir, "cache");
    char *countfile = zpt_path(dir, "downloads.txt");
    assert_int_equal(zpt_write_file(countfile, "", 0), 0);
    for (int round = 0; round < 3; round++) {
        zpt_rmtree(cache);
        assert_int_equal(zpt_write_file(countfile, "", 0), 0);
        pid_t pids[NPROC];
        for (int r = 0; r < NPROC; r++) {
            pids[r] = fork();
            assert_true(pids[r] >= 0);
            if (pids[r] == 0)
                _exit(child_fetch_all(cache, countfile, r));
        }
        for (int r = 0; r < NPROC; r++) {
            int ws = 0;
            assert_int_equal(waitpid(pids[r], &ws, 0), pids[r]);
            assert_true(WIFEXITED(ws));
            assert_int_equal(WEXITSTATUS(ws), 0);
        }
        char *t = zpt_read_file(countfile, NULL);
        assert_non_null(t);
        for (int k = 0; k < NKEYS; k++) {
            char key[32];
            snprintf(key, sizeof key, "obj-%02d.bin\n", k);
            int n = 0;
            for (char *p = t; (p = strstr(p, key)) != NULL; p++)
                n++;
            if (n != 1)
                fail_msg("round %d: %s downloaded %d times", round, key, n);
            key[strlen(key) - 1] = '\0';
            assert_true(done_exists(cache, key));
        }
        free(t);
        assert_int_equal(count_names(cache, ".part."), 0);
        assert_int_equal(count_names(cache, ".zdc.lock"), 0);
    }
    free(cache);
    free(countfile);
}

/* ------------------------------------------------------------ crashes, leases */

/* A child that starts downloading key, writes half, tells the parent (one
 * byte on `ready`) and then blocks on `go`; after a byte on go it renews and
 * commits, and exits 0 when both said ZP_ERR_STATE (its lease was taken). */
static pid_t stuck_child(const char *dir, const char *key, uint64_t size, double lease,
                         int *ready_rd, int *go_wr)
{
    int r[2], g[2];
    if (pipe(r) != 0 || pipe(g) != 0)
        return -1;
    pid_t pid = fork();
    if (pid != 0) {
        close(r[1]);
        close(g[0]);
        *ready_rd = r[0];
        *go_wr = g[1];
        return pid;
    }
    close(r[0]);
    close(g[1]);
    zpi_disk_cache *c = mk(dir, 1 << 20, lease, NULL);
    zpi_dc_entry e;
    zpi_dc_state st;
    zpi_err err = {0};
    if (!c || zpi_dc_acquire(c, key, size, 1, &e, &st, &err) != ZP_OK || st != ZPI_DC_DOWNLOAD)
        _exit(20);
    if (write_obj(e.fd, key, 0, size / 2) != 0)
        _exit(21);
    char b = 'r';
    if (write(r[1], &b, 1) != 1)
        _exit(22);
    if (read(g[0], &b, 1) != 1)
        _exit(23);
    if (zpi_dc_renew(c, &e, &err) != ZP_ERR_STATE)
        _exit(24);
    if (write_obj(e.fd, key, size / 2, size) != 0)
        _exit(25);
    if (zpi_dc_commit(c, &e, &err) != ZP_ERR_STATE)
        _exit(26);
    if (strstr(zpi_err_msg(&err), "taken over") == NULL)
        _exit(27);
    zpi_disk_cache_destroy(c);
    _exit(0);
}

static void wait_ready(int fd)
{
    char b;
    assert_int_equal(read(fd, &b, 1), 1);
    close(fd);
}

static void test_kill9_taken_over_at_once(void **state)
{
    const char *dir = DIR_OF(state);
    zpi_disk_cache *c = mk(dir, 1 << 20, 60, NULL); /* long lease: only death frees the lock */
    int rd, go;
    pid_t pid = stuck_child(dir, "victim", 8000, 60, &rd, &go);
    assert_true(pid > 0);
    wait_ready(rd);
    zpi_dc_entry e;
    zpi_dc_state st;
    zpi_err err = {0};
    assert_int_equal(zpi_dc_acquire(c, "victim", 8000, 1, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_BUSY); /* alive: busy */
    assert_int_equal(count_names(dir, ".part."), 1);
    kill(pid, SIGKILL);
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    close(go);
    assert_false(done_exists(dir, "victim"));
    assert_int_equal(zpi_dc_acquire(c, "victim", 8000, 1, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_DOWNLOAD); /* dead pid: taken over at once */
    assert_int_equal(count_names(dir, ".part."), 1); /* the new one only */
    zpi_disk_cache_stats s;
    zpi_disk_cache_stats_get(c, &s);
    assert_int_equal(s.takeovers, 1);
    assert_int_equal(write_obj(e.fd, "victim", 0, 8000), 0);
    assert_int_equal(zpi_dc_commit(c, &e, &err), ZP_OK);
    assert_true(obj_ok(e.path, "victim", 8000));
    zpi_dc_release(c, &e);
    zpi_disk_cache_destroy(c);
}

static void test_kill9_then_restart_cleans(void **state)
{
    const char *dir = DIR_OF(state);
    int rd, go;
    pid_t pid = stuck_child(dir, "victim", 8000, 60, &rd, &go);
    assert_true(pid > 0);
    wait_ready(rd);
    kill(pid, SIGKILL);
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    close(go);
    assert_int_equal(count_names(dir, ".part."), 1);
    /* A restart: a new cache cleans the dead download and serves nothing partial. */
    zpi_disk_cache *c = mk(dir, 1 << 20, 60, NULL);
    zpi_disk_cache_stats s;
    zpi_disk_cache_stats_get(c, &s);
    assert_int_equal(s.stale_cleaned, 1);
    assert_int_equal(s.bytes_in_cache, 0);
    assert_int_equal(count_names(dir, ".part."), 0);
    assert_int_equal(count_names(dir, ".zdc.lock"), 0);
    zpi_dc_entry e;
    zpi_dc_state st;
    zpi_err err = {0};
    assert_int_equal(zpi_dc_acquire(c, "victim", 8000, 1, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_DOWNLOAD);
    zpi_dc_abort(c, &e);
    zpi_disk_cache_destroy(c);
}

static void test_lease_expiry_of_stuck_owner(void **state)
{
    const char *dir = DIR_OF(state);
    zpi_disk_cache *c = mk(dir, 1 << 20, 0.5, NULL);
    int rd, go;
    pid_t pid = stuck_child(dir, "slow", 6000, 0.5, &rd, &go);
    assert_true(pid > 0);
    wait_ready(rd);
    zpi_dc_entry e;
    zpi_dc_state st;
    zpi_err err = {0};
    assert_int_equal(zpi_dc_acquire(c, "slow", 6000, 1, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_BUSY);
    double t0 = zpi_now();
    zpi_dc_wait(c, "slow", 10); /* returns when the lease runs out */
    double waited = zpi_now() - t0;
    assert_true(waited < 2.0);
    assert_int_equal(zpi_dc_acquire(c, "slow", 6000, 1, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_DOWNLOAD);
    zpi_disk_cache_stats s;
    zpi_disk_cache_stats_get(c, &s);
    assert_int_equal(s.takeovers, 1);
    assert_int_equal(write_obj(e.fd, "slow", 0, 6000), 0);
    assert_int_equal(zpi_dc_commit(c, &e, &err), ZP_OK);
    zpi_dc_release(c, &e);
    /* The old owner wakes up: renew and commit say ZP_ERR_STATE. */
    char b = 'g';
    assert_int_equal(write(go, &b, 1), 1);
    close(go);
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws));
    assert_int_equal(WEXITSTATUS(ws), 0);
    char *p = zpt_path(dir, "slow.zdc");
    assert_true(obj_ok(p, "slow", 6000));
    free(p);
    assert_int_equal(count_names(dir, ".part."), 0);
    zpi_disk_cache_destroy(c);
}

static void test_renew_keeps_lease_and_fails_after_takeover(void **state)
{
    const char *dir = DIR_OF(state);
    zpi_disk_cache *a = mk(dir, 1 << 20, 0.5, NULL);
    zpi_disk_cache *b = mk(dir, 1 << 20, 0.5, NULL);
    zpi_dc_entry e1, e2;
    zpi_dc_state st;
    zpi_err err = {0};
    assert_int_equal(zpi_dc_acquire(a, "r", 100, 1, &e1, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_DOWNLOAD);
    for (int i = 0; i < 10; i++) { /* 1 s, renewed every 0.1 s: stays busy */
        sleep_s(0.1);
        assert_int_equal(zpi_dc_renew(a, &e1, &err), ZP_OK);
        assert_int_equal(zpi_dc_acquire(b, "r", 100, 1, &e2, &st, &err), ZP_OK);
        assert_int_equal(st, ZPI_DC_BUSY);
    }
    sleep_s(0.6); /* not renewed: the lease runs out (same pid, alive) */
    assert_int_equal(zpi_dc_acquire(b, "r", 100, 1, &e2, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_DOWNLOAD);
    assert_int_equal(zpi_dc_renew(a, &e1, &err), ZP_ERR_STATE);
    assert_int_equal(write_obj(e1.fd, "r", 0, 100), 0);
    char old[4096];
    snprintf(old, sizeof old, "%s", e1.path);
    assert_int_equal(zpi_dc_commit(a, &e1, &err), ZP_ERR_STATE);
    struct stat sb;
    assert_int_not_equal(stat(old, &sb), 0); /* its temporary file is gone */
    assert_false(done_exists(dir, "r"));
    assert_int_equal(zpi_dc_renew(b, &e2, &err), ZP_OK);
    assert_int_equal(write_obj(e2.fd, "r", 0, 100), 0);
    assert_int_equal(zpi_dc_commit(b, &e2, &err), ZP_OK);
    zpi_dc_release(b, &e2);
    zpi_disk_cache_destroy(a);
    zpi_disk_cache_destroy(b);
}

static void test_stale_temps_cleaned_at_create(void **state)
{
    const char *dir = DIR_OF(state);
    char *p;
    /* A temporary file without a lock. */
    p = zpt_path(dir, "a.zdc.part.0123456789abcdef");
    assert_int_equal(zpt_write_file(p, "partial", 7), 0);
    free(p);
    /* A lock whose lease ran out long ago, with its temporary file. */
    p = zpt_path(dir, "b.zdc.lock");
    assert_int_equal(zpt_write_file(p, "zdc1 otherhost 1 00000000000000aa 100\n", (size_t)-1), 0);
    struct timespec old[2] = {{1000, 0}, {1000, 0}};
    assert_int_equal(utimensat(AT_FDCWD, p, old, 0), 0);
    free(p);
    p = zpt_path(dir, "b.zdc.part.00000000000000aa");
    assert_int_equal(zpt_write_file(p, "half", 4), 0);
    free(p);
    /* A live lock of another host, with its temporary file: kept. */
    p = zpt_path(dir, "c.zdc.lock");
    assert_int_equal(zpt_write_file(p, "zdc1 otherhost 1 00000000000000bb 100\n", (size_t)-1), 0);
    free(p);
    p = zpt_path(dir, "c.zdc.part.00000000000000bb");
    assert_int_equal(zpt_write_file(p, "half", 4), 0);
    free(p);
    /* Not the cache's: kept. */
    p = zpt_path(dir, "a.zdc.part.notahexnonce!");
    assert_int_equal(zpt_write_file(p, "user", 4), 0);
    free(p);
    zpi_disk_cache *c = mk(dir, 1 << 20, 30, NULL);
    assert_non_null(c);
    zpi_disk_cache_stats s;
    zpi_disk_cache_stats_get(c, &s);
    assert_int_equal(s.stale_cleaned, 2);
    assert_int_equal(s.bytes_in_cache, 100); /* c's reservation */
    assert_false(exists_in(dir, "a.zdc.part.0123456789abcdef"));
    assert_false(exists_in(dir, "b.zdc.part.00000000000000aa"));
    assert_false(exists_in(dir, "b.zdc.lock"));
    assert_true(exists_in(dir, "c.zdc.lock"));
    assert_true(exists_in(dir, "c.zdc.part.00000000000000bb"));
    assert_true(exists_in(dir, "a.zdc.part.notahexnonce!"));
    zpi_dc_entry e;
    zpi_dc_state st;
    zpi_err err = {0};
    assert_int_equal(zpi_dc_acquire(c, "c", 100, 1, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_BUSY);
    /* Later, while the cache runs: cleaned when the next download starts. */
    p = zpt_path(dir, "d.zdc.part.00000000000000cc");
    assert_int_equal(zpt_write_file(p, "half", 4), 0);
    free(p);
    assert_int_equal(zpi_dc_acquire(c, "other", 100, 0, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_DOWNLOAD);
    assert_false(exists_in(dir, "d.zdc.part.00000000000000cc"));
    zpi_disk_cache_stats_get(c, &s);
    assert_int_equal(s.stale_cleaned, 3);
    zpi_dc_abort(c, &e);
    zpi_disk_cache_destroy(c);
}

/* ------------------------------------------------------------ the limit */

/* The random runs below hold entries for a while: one held entry ends, its
 * download written and committed (finish) or abandoned (drop). */
static void finish_held(zpi_disk_cache *c, zpi_dc_entry *e)
{
    zpi_err err = {0};
    if (e->state == ZPI_DC_DOWNLOAD) {
        assert_int_equal(write_obj(e->fd, e->key, 0, e->size), 0);
        assert_int_equal(zpi_dc_commit(c, e, &err), ZP_OK);
    }
    zpi_dc_release(c, e);
}

static void drop_held(zpi_disk_cache *c, zpi_dc_entry *e)
{
    if (e->state == ZPI_DC_DOWNLOAD)
        zpi_dc_abort(c, e);
    else
        zpi_dc_release(c, e);
}

static void test_limit_never_exceeded_by_prefetch(void **state)
{
    const char *dir = DIR_OF(state);
    nu_table nu = {0};
    static const char *keys[] = {"p00", "p01", "p02", "p03", "p04", "p05", "p06", "p07",
                                 "p08", "p09", "p10", "p11", "p12", "p13", "p14", "p15"};
    const uint64_t limit = 2000;
    zpi_disk_cache *c = mk(dir, limit, 30, &nu);
    zpi_dc_entry held[16];
    int nheld = 0;
    unsigned rng = 12345;
    int downloads = 0, noroom = 0, hits = 0;
    for (int step = 0; step < 600; step++) {
        rng = rng * 1103515245u + 12345u;
        int k = (int)((rng >> 16) % 16);
        uint64_t size = 100 + (uint64_t)k * 37;
        /* The order moves on: next uses change as the run goes. */
        for (int i = 0; i < 16; i++) {
            uint64_t v = (uint64_t)((i * 7 + step) % 23);
            nu_set(&nu, keys[i], v == 0 ? UINT64_MAX : v);
        }
        rng = rng * 1103515245u + 12345u;
        int op = (int)((rng >> 16) % 4);
        if (op == 0 && nheld > 0) { /* finish or release one held entry */
            finish_held(c, &held[--nheld]);
        } else if (nheld < 6) {
            zpi_dc_entry *e = &held[nheld];
            zpi_dc_state st;
            zpi_err err = {0};
            assert_int_equal(zpi_dc_acquire(c, keys[k], size, 0, e, &st, &err), ZP_OK);
            if (st == ZPI_DC_DOWNLOAD || st == ZPI_DC_READY) {
                nheld++;
                downloads += st == ZPI_DC_DOWNLOAD;
                hits += st == ZPI_DC_READY;
            } else {
                noroom += st == ZPI_DC_NOROOM;
            }
        }
        uint64_t b = folder_bytes(dir);
        if (b > limit)
            fail_msg("step %d: %llu bytes in the cache, limit %llu", step, (unsigned long long)b,
                     (unsigned long long)limit);
    }
    /* The run exercised every path. */
    assert_true(downloads > 10 && noroom > 0 && hits > 0);
    zpi_disk_cache_stats s;
    zpi_disk_cache_stats_get(c, &s);
    assert_true(s.evictions > 0);
    assert_int_equal(s.over_limit_bytes, 0);
    while (nheld > 0)
        drop_held(c, &held[--nheld]);
    zpi_disk_cache_destroy(c);
}

/* Demands and prefetches mixed, entries held for a while: right after each
 * download starts, the cache holds at most max(limit, the bytes this run
 * holds: pinned files and downloads in flight, the new one included) --
 * a demand goes over only by what is in use or being demanded. */
static void test_limit_with_demand(void **state)
{
    const char *dir = DIR_OF(state);
    nu_table nu = {0};
    static const char *keys[] = {"q00", "q01", "q02", "q03", "q04", "q05", "q06", "q07",
                                 "q08", "q09", "q10", "q11"};
    const uint64_t limit = 1500;
    zpi_disk_cache *c = mk(dir, limit, 30, &nu);
    zpi_dc_entry held[8];
    int nheld = 0, over = 0;
    unsigned rng = 777;
    uint64_t most_over = 0;
    for (int step = 0; step < 500; step++) {
        rng = rng * 1103515245u + 12345u;
        int k = (int)((rng >> 16) % 12);
        uint64_t size = 200 + (uint64_t)k * 41;
        for (int i = 0; i < 12; i++)
            nu_set(&nu, keys[i], (uint64_t)((i * 5 + step) % 17));
        rng = rng * 1103515245u + 12345u;
        int op = (int)((rng >> 16) % 3);
        if (op == 0 && nheld > 0) {
            finish_held(c, &held[--nheld]);
        } else if (nheld < 8) {
            zpi_dc_entry *e = &held[nheld];
            zpi_dc_state st;
            zpi_err err = {0};
            int demand = (rng >> 20) & 1;
            assert_int_equal(zpi_dc_acquire(c, keys[k], size, demand, e, &st, &err), ZP_OK);
            if (st != ZPI_DC_DOWNLOAD && st != ZPI_DC_READY)
                continue;
            nheld++;
            if (st != ZPI_DC_DOWNLOAD)
                continue;
            uint64_t in_use = 0; /* distinct keys held */
            for (int i = 0; i < nheld; i++) {
                int dup = 0;
                for (int j = 0; j < i; j++)
                    dup |= strcmp(held[i].key, held[j].key) == 0;
                if (!dup)
                    in_use += held[i].size;
            }
            uint64_t b = folder_bytes(dir);
            uint64_t cap = demand && in_use > limit ? in_use : limit;
            if (b > cap)
                fail_msg("step %d: %llu bytes in the cache, limit %llu, in use %llu", step,
                         (unsigned long long)b, (unsigned long long)limit,
                         (unsigned long long)in_use);
            if (b > limit) {
                over++;
                if (b - limit > most_over)
                    most_over = b - limit;
            }
        }
    }
    assert_true(over > 0); /* the run did go over, through demands */
    zpi_disk_cache_stats s;
    zpi_disk_cache_stats_get(c, &s);
    assert_int_equal(s.over_limit_bytes, most_over);
    while (nheld > 0)
        drop_held(c, &held[--nheld]);
    zpi_disk_cache_destroy(c);
}

static void test_demand_goes_over_by_its_object(void **state)
{
    const char *dir = DIR_OF(state);
    zpi_disk_cache *c = mk(dir, 1000, 30, NULL);
    zpi_dc_entry pin[3], e;
    zpi_dc_state st;
    zpi_err err = {0};
    download(c, "a", 300, 1, &pin[0]);
    download(c, "b", 300, 1, &pin[1]);
    download(c, "c", 300, 1, &pin[2]); /* 900 bytes, all in use */
    /* A prefetch does not go over. */
    assert_int_equal(zpi_dc_acquire(c, "d", 400, 0, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_NOROOM);
    assert_int_equal(folder_bytes(dir), 900);
    zpi_disk_cache_stats s;
    zpi_disk_cache_stats_get(c, &s);
    assert_int_equal(s.misses, 3); /* a NOROOM is neither a hit nor a miss */
    assert_int_equal(s.hits, 0);
    /* A demand does, by its one object, and says so. */
    assert_int_equal(zpi_dc_acquire(c, "d", 400, 1, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_DOWNLOAD);
    assert_int_equal(folder_bytes(dir), 1300);
    zpi_disk_cache_stats_get(c, &s);
    assert_int_equal(s.over_limit_bytes, 300);
    assert_int_equal(s.evictions, 0);
    assert_int_equal(write_obj(e.fd, "d", 0, 400), 0);
    assert_int_equal(zpi_dc_commit(c, &e, &err), ZP_OK);
    zpi_dc_release(c, &e);
    /* Once the pins go, the next demand evicts back under the limit. */
    for (int i = 0; i < 3; i++)
        zpi_dc_release(c, &pin[i]);
    put(c, "e", 100, 1);
    assert_true(folder_bytes(dir) <= 1000);
    zpi_disk_cache_stats_get(c, &s);
    assert_int_equal(s.over_limit_bytes, 300);
    assert_true(s.evictions >= 1);
    zpi_disk_cache_destroy(c);
}

static void test_pinned_never_evicted(void **state)
{
    const char *dir = DIR_OF(state);
    zpi_disk_cache *c = mk(dir, 1000, 30, NULL);
    put(c, "mine", 400, 1);
    put(c, "theirs", 400, 1);
    zpi_dc_entry mine;
    zpi_dc_state st;
    zpi_err err = {0};
    assert_int_equal(zpi_dc_acquire(c, "mine", 400, 1, &mine, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_READY);
    /* Another process pins "theirs". */
    int r[2], g[2];
    assert_int_equal(pipe(r), 0);
    assert_int_equal(pipe(g), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(r[0]);
        close(g[1]);
        zpi_disk_cache *cc = mk(dir, 1000, 30, NULL);
        zpi_dc_entry e;
        zpi_dc_state s2;
        zpi_err e2 = {0};
        if (!cc || zpi_dc_acquire(cc, "theirs", 400, 1, &e, &s2, &e2) != ZP_OK ||
            s2 != ZPI_DC_READY)
            _exit(30);
        char b = 'r';
        if (write(r[1], &b, 1) != 1 || read(g[0], &b, 1) != 1)
            _exit(31);
        int ok = obj_ok(e.path, "theirs", 400);
        zpi_dc_release(cc, &e);
        zpi_disk_cache_destroy(cc);
        _exit(ok ? 0 : 32);
    }
    close(r[1]);
    close(g[0]);
    wait_ready(r[0]);
    /* Demands for many other objects: neither pinned file goes. */
    for (int i = 0; i < 6; i++) {
        char key[24];
        snprintf(key, sizeof key, "other%d", i);
        put(c, key, 150, 1);
        assert_true(done_exists(dir, "mine"));
        assert_true(done_exists(dir, "theirs"));
    }
    zpi_disk_cache_stats s;
    zpi_disk_cache_stats_get(c, &s);
    assert_int_equal(s.evictions, 5); /* each "other" evicted the one before */
    char b = 'g';
    assert_int_equal(write(g[1], &b, 1), 1);
    close(g[1]);
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws));
    assert_int_equal(WEXITSTATUS(ws), 0);
    /* Unpinned now: "theirs" can go, "mine" is still pinned here. */
    put(c, "big", 500, 1);
    assert_false(done_exists(dir, "theirs"));
    assert_true(done_exists(dir, "mine"));
    zpi_dc_release(c, &mine);
    put(c, "big2", 500, 1);
    assert_false(done_exists(dir, "mine"));
    zpi_disk_cache_destroy(c);
}

/* ------------------------------------------------------------ eviction order */

static void test_belady_order(void **state)
{
    const char *dir = DIR_OF(state);
    nu_table nu = {0};
    zpi_disk_cache *c = mk(dir, 400, 30, &nu);
    nu_set(&nu, "a", 10);
    nu_set(&nu, "b", 50);
    nu_set(&nu, "d", 30);
    /* "c": no known next use */
    put(c, "c", 100, 1);
    put(c, "a", 100, 1);
    put(c, "b", 100, 1);
    put(c, "d", 100, 1);
    nu_set(&nu, "e", 5);
    put(c, "e", 100, 1);
    assert_false(done_exists(dir, "c")); /* unknown first */
    assert_true(done_exists(dir, "a") && done_exists(dir, "b") && done_exists(dir, "d"));
    nu_set(&nu, "f", 1);
    put(c, "f", 100, 1);
    assert_false(done_exists(dir, "b")); /* then the farthest */
    assert_true(done_exists(dir, "a") && done_exists(dir, "d"));
    nu_set(&nu, "g", 2);
    put(c, "g", 100, 1);
    assert_false(done_exists(dir, "d"));
    assert_true(done_exists(dir, "a") && done_exists(dir, "e") && done_exists(dir, "f"));
    /* The order changes: the callback is asked at each eviction. */
    nu_set(&nu, "a", 1000);
    nu_set(&nu, "h", 3);
    put(c, "h", 100, 1);
    assert_false(done_exists(dir, "a"));
    zpi_disk_cache_destroy(c);
}

static void test_lru_among_unknown(void **state)
{
    const char *dir = DIR_OF(state);
    nu_table nu = {0};
    zpi_disk_cache *c = mk(dir, 300, 30, &nu);
    nu_set(&nu, "known", 7);
    put(c, "known", 100, 1);
    sleep_s(0.02);
    put(c, "x", 100, 1);
    sleep_s(0.02);
    put(c, "y", 100, 1);
    sleep_s(0.02);
    /* Use x again: y is now the least recently used. */
    zpi_dc_entry e;
    zpi_dc_state st;
    zpi_err err = {0};
    assert_int_equal(zpi_dc_acquire(c, "x", 100, 1, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_READY);
    zpi_dc_release(c, &e);
    sleep_s(0.02);
    nu_set(&nu, "z", 1);
    put(c, "z", 100, 1);
    assert_false(done_exists(dir, "y"));
    assert_true(done_exists(dir, "x") && done_exists(dir, "known"));
    sleep_s(0.02);
    nu_set(&nu, "w", 1);
    put(c, "w", 100, 1);
    assert_false(done_exists(dir, "x")); /* the other unknown, before the known one */
    assert_true(done_exists(dir, "known"));
    zpi_disk_cache_destroy(c);

    /* Without a callback every file is unknown: plain LRU. */
    zpt_rmtree(dir);
    c = mk(dir, 200, 30, NULL);
    put(c, "m", 100, 1);
    sleep_s(0.02);
    put(c, "n", 100, 1);
    sleep_s(0.02);
    assert_int_equal(zpi_dc_acquire(c, "m", 100, 0, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_READY);
    zpi_dc_release(c, &e);
    sleep_s(0.02);
    put(c, "o", 100, 0);
    assert_false(done_exists(dir, "n"));
    assert_true(done_exists(dir, "m"));
    zpi_disk_cache_destroy(c);
}

static void test_prefetch_noroom(void **state)
{
    const char *dir = DIR_OF(state);
    nu_table nu = {0};
    zpi_disk_cache *c = mk(dir, 200, 30, &nu);
    nu_set(&nu, "a", 10);
    nu_set(&nu, "b", 20);
    put(c, "a", 100, 1);
    put(c, "b", 100, 1);
    zpi_dc_entry e;
    zpi_dc_state st;
    zpi_err err = {0};
    /* Needed after both: no room without evicting sooner-needed files. */
    nu_set(&nu, "c", 30);
    assert_int_equal(zpi_dc_acquire(c, "c", 100, 0, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_NOROOM);
    assert_true(done_exists(dir, "a") && done_exists(dir, "b"));
    /* Bigger than what can be freed by files needed later: nothing evicted. */
    nu_set(&nu, "c", 15);
    assert_int_equal(zpi_dc_acquire(c, "c", 200, 0, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_NOROOM);
    assert_true(done_exists(dir, "a") && done_exists(dir, "b"));
    /* Needed before b: b goes. */
    assert_int_equal(zpi_dc_acquire(c, "c", 100, 0, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_DOWNLOAD);
    assert_false(done_exists(dir, "b"));
    assert_true(done_exists(dir, "a"));
    zpi_dc_abort(c, &e);
    /* A demand for something needed late still gets its room. */
    nu_set(&nu, "d", 99);
    put(c, "x", 100, 1);
    put(c, "d", 100, 1);
    assert_true(folder_bytes(dir) <= 200);
    zpi_disk_cache_stats s;
    zpi_disk_cache_stats_get(c, &s);
    assert_int_equal(s.over_limit_bytes, 0);
    zpi_disk_cache_destroy(c);
}

/* ------------------------------------------------------------ stale, corrupt, foreign */

static void test_wrong_size_replaced(void **state)
{
    const char *dir = DIR_OF(state);
    zpi_disk_cache *c = mk(dir, 1 << 20, 30, NULL);
    put(c, "w", 100, 1);
    zpi_dc_entry e;
    zpi_dc_state st;
    zpi_err err = {0};
    assert_int_equal(zpi_dc_acquire(c, "w", 120, 1, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_DOWNLOAD);
    assert_false(done_exists(dir, "w"));
    assert_int_equal(write_obj(e.fd, "w", 0, 120), 0);
    assert_int_equal(zpi_dc_commit(c, &e, &err), ZP_OK);
    assert_true(obj_ok(e.path, "w", 120));
    zpi_dc_release(c, &e);
    /* A truncated complete file (a crash of the disk, a hand edit) is not served. */
    char *p = zpt_path(dir, "w.zdc");
    assert_int_equal(truncate(p, 60), 0);
    free(p);
    assert_int_equal(zpi_dc_acquire(c, "w", 120, 1, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_DOWNLOAD);
    zpi_dc_abort(c, &e);
    zpi_disk_cache_destroy(c);
}

static void test_invalidate(void **state)
{
    const char *dir = DIR_OF(state);
    zpi_disk_cache *c = mk(dir, 1 << 20, 30, NULL);
    put(c, "bad", 100, 1);
    zpi_dc_entry e, e2;
    zpi_dc_state st;
    zpi_err err = {0};
    assert_int_equal(zpi_dc_acquire(c, "bad", 100, 1, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_READY);
    zpi_dc_invalidate(c, &e);
    assert_int_equal(e.fd, -1);
    assert_false(done_exists(dir, "bad"));
    assert_int_equal(zpi_dc_acquire(c, "bad", 100, 1, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_DOWNLOAD);
    assert_int_equal(write_obj(e.fd, "bad", 0, 100), 0);
    assert_int_equal(zpi_dc_commit(c, &e, &err), ZP_OK);
    /* Two readers: one invalidates, downloads again; the other's late
     * invalidate must not delete the fresh copy. */
    assert_int_equal(zpi_dc_acquire(c, "bad", 100, 1, &e2, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_READY);
    zpi_dc_invalidate(c, &e);
    put(c, "bad", 100, 1);
    zpi_dc_invalidate(c, &e2);
    assert_true(done_exists(dir, "bad"));
    zpi_disk_cache_destroy(c);
}

/* A folder filled under a larger limit is trimmed to a smaller one when a
 * cache is created on it (unpinned files, least recently used first); a
 * file pinned by another user of the folder stays. */
static void test_smaller_limit_trims_at_create(void **state)
{
    const char *dir = DIR_OF(state);
    zpi_disk_cache *big = mk(dir, 1000, 30, NULL);
    put(big, "a", 200, 1);
    sleep_s(0.02); /* distinct mtimes: a is the least recently used */
    put(big, "b", 200, 1);
    sleep_s(0.02);
    put(big, "c", 200, 1);
    zpi_dc_entry pin;
    zpi_dc_state st;
    zpi_err err = {0};
    assert_int_equal(zpi_dc_acquire(big, "a", 200, 1, &pin, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_READY); /* a: in use (and now the most recent) */
    assert_int_equal(folder_bytes(dir), 600);
    zpi_disk_cache *small = mk(dir, 300, 30, NULL);
    assert_non_null(small);
    assert_true(folder_bytes(dir) <= 300 + 200); /* only the pinned file over the limit */
    assert_true(done_exists(dir, "a"));
    assert_true(obj_ok(pin.path, "a", 200));
    assert_int_equal(done_exists(dir, "b") + done_exists(dir, "c"), 0);
    zpi_dc_release(big, &pin);
    zpi_disk_cache_destroy(small);
    zpi_disk_cache_destroy(big);
    /* unpinned: the folder is trimmed to the limit itself */
    zpi_disk_cache *tiny = mk(dir, 100, 30, NULL);
    assert_true(folder_bytes(dir) <= 100);
    zpi_disk_cache_destroy(tiny);
}

static void test_foreign_files_never_deleted(void **state)
{
    const char *dir = DIR_OF(state);
    const char *names[] = {"notes.txt", "x", "shard.jsonl", "k.part.0123456789abcdef",
                           "bad key.zdc", "y.zdc.part.0123", ".hidden"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char *p = zpt_path(dir, names[i]);
        char big[500];
        memset(big, 'u', sizeof big);
        assert_int_equal(zpt_write_file(p, big, sizeof big), 0);
        free(p);
    }
    char *sub = zpt_path(dir, "sub.zdc");
    assert_int_equal(mkdir(sub, 0755), 0);
    free(sub);
    zpi_disk_cache *c = mk(dir, 300, 30, NULL);
    zpi_disk_cache_stats s;
    zpi_disk_cache_stats_get(c, &s);
    assert_int_equal(s.bytes_in_cache, 0); /* not counted either */
    for (int i = 0; i < 10; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", i);
        put(c, key, 150, i % 2);
    }
    zpi_disk_cache_stats_get(c, &s);
    assert_true(s.evictions >= 8);
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!exists_in(dir, names[i]))
            fail_msg("%s was deleted", names[i]);
    assert_true(exists_in(dir, "sub.zdc"));
    /* A key equal to a user's file name does not touch that file. */
    put(c, "x", 100, 1);
    char *p = zpt_path(dir, "x");
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_size, 500);
    free(p);
    zpi_disk_cache_destroy(c);
}

static void test_bad_keys(void **state)
{
    const char *dir = DIR_OF(state);
    zpi_disk_cache *c = mk(dir, 1 << 20, 30, NULL);
    char longkey[160];
    memset(longkey, 'k', sizeof longkey);
    longkey[151] = '\0';
    const char *bad[] = {"", "a/b", "../up", "a b", "t\xc3\xa9", "x\n", longkey, "a*"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        zpi_dc_entry e;
        zpi_dc_state st;
        zpi_err err = {0};
        assert_int_equal(zpi_dc_acquire(c, bad[i], 10, 1, &e, &st, &err), ZP_ERR_INVALID);
        assert_non_null(strstr(zpi_err_msg(&err), "[A-Za-z0-9._-]"));
    }
    zpi_dc_entry e;
    zpi_dc_state st;
    zpi_err err = {0};
    assert_int_equal(zpi_dc_acquire(c, NULL, 10, 1, &e, &st, &err), ZP_ERR_INVALID);
    longkey[150] = '\0'; /* 150 characters: fine */
    assert_int_equal(zpi_dc_acquire(c, longkey, 10, 1, &e, &st, &err), ZP_OK);
    assert_int_equal(st, ZPI_DC_DOWNLOAD);
    zpi_dc_abort(c, &e);
    const char *good[] = {"A-z_0.9", "..", "s3.bucket.key-00001.jsonl.zst"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        assert_int_equal(zpi_dc_acquire(c, good[i], 10, 1, &e, &st, &err), ZP_OK);
        assert_int_equal(st, ZPI_DC_DOWNLOAD);
        zpi_dc_abort(c, &e);
    }
    zpi_disk_cache_destroy(c);
}

static void test_bad_folder_and_settings(void **state)
{
    const char *dir = DIR_OF(state);
    char *file = zpt_path(dir, "plainfile");
    assert_int_equal(zpt_write_file(file, "x", 1), 0);
    char *under = zpt_path(file, "cache");
    zpi_disk_cache_config cfg = {0};
    cfg.dir = under;
    cfg.limit_bytes = 1000;
    cfg.lease_s = 10;
    zpi_disk_cache *c = (zpi_disk_cache *)1;
    zpi_err err = {0};
    assert_int_equal(zpi_disk_cache_create(&cfg, &c, &err), ZP_ERR_IO);
    assert_null(c);
    assert_non_null(strstr(zpi_err_msg(&err), under));
    assert_non_null(strstr(zpi_err_msg(&err), strerror(ENOTDIR)));
    /* Created when missing, parents too. */
    char *deep = zpt_path(dir, "a/b/c");
    cfg.dir = deep;
    assert_int_equal(zpi_disk_cache_create(&cfg, &c, &err), ZP_OK);
    zpi_disk_cache_destroy(c);
    struct stat sb;
    assert_int_equal(stat(deep, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    cfg.lease_s = 0;
    assert_int_equal(zpi_disk_cache_create(&cfg, &c, &err), ZP_ERR_INVALID);
    cfg.lease_s = 10;
    cfg.limit_bytes = 0;
    assert_int_equal(zpi_disk_cache_create(&cfg, &c, &err), ZP_ERR_INVALID);
    cfg.limit_bytes = 10;
    cfg.dir = "";
    assert_int_equal(zpi_disk_cache_create(&cfg, &c, &err), ZP_ERR_INVALID);
    free(deep);
    free(under);
    free(file);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_hit_miss_commit_release, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_partial_under_final_name, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_threads_one_download, setup, teardown),
        cmocka_unit_test_setup_teardown(test_four_processes_download_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill9_taken_over_at_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill9_then_restart_cleans, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_expiry_of_stuck_owner, setup, teardown),
        cmocka_unit_test_setup_teardown(test_renew_keeps_lease_and_fails_after_takeover, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stale_temps_cleaned_at_create, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limit_never_exceeded_by_prefetch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limit_with_demand, setup, teardown),
        cmocka_unit_test_setup_teardown(test_demand_goes_over_by_its_object, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pinned_never_evicted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_belady_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lru_among_unknown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prefetch_noroom, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_size_replaced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalidate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_smaller_limit_trims_at_create, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_files_never_deleted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_folder_and_settings, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
