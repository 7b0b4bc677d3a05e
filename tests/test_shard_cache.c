/* test_shard_cache.c - LRU within the budget, pins, single load under
 * concurrency, failed loads not cached, the working set kept beyond the
 * budget (a shard larger than the cache is decoded once per pass, with one
 * warning), decode buffers of evicted shards reused. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "data/dataset_internal.h"
#include "data/shard_cache.h"
#include "testutil.h"
#include "zephon.h"

typedef struct fixture {
    char *dir;
    zp_dataset *ds;
    size_t shard_size; /* accounted size of one shard (all are equal) */
    size_t spare_size; /* accounted size of a spare decode buffer (one shard's data) */
} fixture;

#define N_SHARDS 4
#define N_RECORDS 1000

static char *shard_text(int s, size_t *len)
{
    size_t cap = N_RECORDS * 64, n = 0;
    char *buf = malloc(cap);
    for (int i = 0; i < N_RECORDS; i++)
        n += (size_t)snprintf(buf + n, cap - n, "{\"id\": %6d, \"text\": \"shard %d\"}\n",
                              s * N_RECORDS + i, s);
    *len = n;
    return buf;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->dir = zpt_tmpdir();
    if (!f->dir || zp_dataset_create(NULL, &f->ds) != ZP_OK)
        return -1;
    for (int s = 0; s < N_SHARDS; s++) {
        char name[32];
        snprintf(name, sizeof name, "s%d.jsonl.zst", s);
        char *p = zpt_path(f->dir, name);
        size_t n;
        char *t = shard_text(s, &n);
        if (zpt_write_zst(p, t, n, 2) != 0 || zp_dataset_add(f->ds, p) != ZP_OK)
            return -1;
        f->shard_size = n + ZPI_JSON_PADDING + (N_RECORDS + 1) * sizeof(uint64_t);
        f->spare_size = n + ZPI_JSON_PADDING;
        free(t);
        free(p);
    }
    if (zp_dataset_index(f->ds) != ZP_OK)
        return -1;
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

static const zpi_shard *get_ok(zpi_shard_cache *c, uint32_t i, int *loaded)
{
    const zpi_shard *sh = NULL;
    zpi_err err = {0};
    zp_status st = zpi_shard_cache_get(c, i, &sh, loaded, &err);
    if (st != ZP_OK)
        fail_msg("get %u: %s", i, err.msg);
    assert_int_equal(sh->n_records, N_RECORDS);
    /* it is the right shard */
    char want[32];
    snprintf(want, sizeof want, "\"shard %u\"", i);
    assert_non_null(memmem(sh->data, (size_t)(sh->offsets[1] - 1), want, strlen(want)));
    return sh;
}

/* Log messages received through the cache's callback. */
typedef struct logbook {
    int n;
    char last[1024];
} logbook;

static void log_cb(void *user, zp_log_level lvl, const char *msg)
{
    logbook *lb = user;
    if (lvl == ZP_LOG_WARN) {
        lb->n++;
        snprintf(lb->last, sizeof lb->last, "%s", msg);
    }
}

static zpi_shard_cache *mk(const zp_dataset *ds, size_t budget, size_t keep, logbook *lb)
{
    zpi_shard_cache_config cfg = {budget, keep, lb ? log_cb : NULL, lb, NULL};
    zpi_shard_cache *c = NULL;
    assert_int_equal(zpi_shard_cache_create(ds, &cfg, &c), ZP_OK);
    return c;
}

/* get_ok() and put at once; returns whether the get loaded the shard. */
static int touch(zpi_shard_cache *c, uint32_t i)
{
    int loaded;
    get_ok(c, i, &loaded);
    zpi_shard_cache_put(c, i);
    return loaded;
}

static void test_hits_misses_evictions(void **state)
{
    fixture *f = *state;
    /* room for two unpinned shards */
    zpi_shard_cache *c = mk(f->ds, 2 * f->shard_size, 0, NULL);
    zpi_shard_cache_stats st;
    assert_int_equal(touch(c, 0), 1);
    assert_int_equal(touch(c, 0), 0); /* hit */
    touch(c, 1);
    zpi_shard_cache_stats_get(c, &st);
    assert_int_equal(st.hits, 1);
    assert_int_equal(st.misses, 2);
    assert_int_equal(st.evictions, 0);
    assert_int_equal(st.bytes_resident, 2 * f->shard_size);
    /* touch 0 so that 1 is least recently used, then load 2: 1 goes */
    touch(c, 0);
    touch(c, 2);
    zpi_shard_cache_stats_get(c, &st);
    assert_int_equal(st.evictions, 1);
    /* 1's decode buffer is kept as a spare */
    assert_int_equal(st.bytes_resident, 2 * f->shard_size + f->spare_size);
    assert_int_equal(st.spare_reuses, 0);
    assert_int_equal(touch(c, 0), 0); /* still cached */
    assert_int_equal(touch(c, 1), 1); /* was evicted; decoded into the spare */
    zpi_shard_cache_stats_get(c, &st);
    assert_int_equal(st.hits, 3);
    assert_int_equal(st.misses, 4);
    assert_int_equal(st.evictions, 2); /* 2 went when 1 came back */
    assert_int_equal(st.loads_failed, 0);
    assert_int_equal(st.spare_reuses, 1);
    assert_int_equal(st.bytes_resident, 2 * f->shard_size + f->spare_size);
    zpi_shard_cache_destroy(c);
}

static void test_pinned_not_evicted(void **state)
{
    fixture *f = *state;
    zpi_shard_cache *c = mk(f->ds, 0, 0, NULL); /* no unpinned room at all */
    const zpi_shard *s0 = get_ok(c, 0, NULL);
    const zpi_shard *s0b = get_ok(c, 0, NULL); /* pinned twice */
    assert_ptr_equal(s0, s0b);
    for (uint32_t i = 1; i < N_SHARDS; i++)
        touch(c, i); /* evicted at once */
    zpi_shard_cache_stats st;
    zpi_shard_cache_stats_get(c, &st);
    assert_int_equal(st.evictions, N_SHARDS - 1);
    assert_int_equal(st.spare_reuses, N_SHARDS - 2); /* 2 and 3 reused 1's buffer */
    assert_int_equal(st.bytes_resident, f->shard_size + f->spare_size);
    zpi_shard_cache_put(c, 0);
    /* still pinned once: data stays valid */
    assert_memory_equal(s0->data, "{\"id\":      0", 13);
    zpi_shard_cache_stats_get(c, &st);
    assert_int_equal(st.evictions, N_SHARDS - 1);
    zpi_shard_cache_put(c, 0);
    zpi_shard_cache_put(c, 0); /* unbalanced put is ignored */
    zpi_shard_cache_stats_get(c, &st);
    assert_int_equal(st.evictions, N_SHARDS);
    assert_int_equal(st.bytes_resident, 2 * f->spare_size); /* two spares, nothing else */
    zpi_shard_cache_destroy(c);
}

/* A cached, unpinned shard that is pinned again leaves the LRU list: later
 * pressure evicts others, never it. */
static void test_repinned_not_evicted(void **state)
{
    fixture *f = *state;
    zpi_shard_cache *c = mk(f->ds, f->shard_size, 0, NULL);
    int loaded;
    touch(c, 0); /* cached, unpinned, least recently used */
    const zpi_shard *s0 = get_ok(c, 0, &loaded);
    assert_int_equal(loaded, 0);
    for (uint32_t i = 1; i < N_SHARDS; i++)
        touch(c, i);
    zpi_shard_cache_stats st;
    zpi_shard_cache_stats_get(c, &st);
    assert_int_equal(st.evictions, N_SHARDS - 2); /* 1 and 2 went; 3 fits the budget */
    assert_int_equal(st.bytes_resident, 2 * f->shard_size + f->spare_size);
    assert_memory_equal(s0->data, "{\"id\":      0", 13);
    zpi_shard_cache_put(c, 0); /* now 0 and 3 are unpinned: one must go */
    zpi_shard_cache_stats_get(c, &st);
    assert_int_equal(st.evictions, N_SHARDS - 1);
    assert_int_equal(touch(c, 0), 0); /* 3 was the least recently used */
    zpi_shard_cache_destroy(c);
}

typedef struct race {
    zpi_shard_cache *c;
    pthread_barrier_t *go;
    const zpi_shard *got;
    int loaded;
    zp_status st;
} race;

static void *race_main(void *arg)
{
    race *r = arg;
    zpi_err err = {0};
    pthread_barrier_wait(r->go);
    r->st = zpi_shard_cache_get(r->c, 3, &r->got, &r->loaded, &err);
    return NULL;
}

static void test_concurrent_load_once(void **state)
{
    fixture *f = *state;
    enum { T = 8 };
    for (int round = 0; round < 20; round++) {
        zpi_shard_cache *c = mk(f->ds, 0, 0, NULL);
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, T);
        pthread_t th[T];
        race r[T];
        for (int i = 0; i < T; i++) {
            r[i] = (race){c, &go, NULL, 0, ZP_ERR_INTERNAL};
            assert_int_equal(pthread_create(&th[i], NULL, race_main, &r[i]), 0);
        }
        int loads = 0;
        for (int i = 0; i < T; i++) {
            pthread_join(th[i], NULL);
            assert_int_equal(r[i].st, ZP_OK);
            assert_ptr_equal(r[i].got, r[0].got);
            loads += r[i].loaded;
        }
        assert_int_equal(loads, 1);
        zpi_shard_cache_stats st;
        zpi_shard_cache_stats_get(c, &st);
        assert_int_equal(st.misses, 1);
        assert_int_equal(st.hits, T - 1);
        for (int i = 0; i < T; i++)
            zpi_shard_cache_put(c, 3);
        zpi_shard_cache_stats_get(c, &st);
        assert_int_equal(st.evictions, 1);
        pthread_barrier_destroy(&go);
        zpi_shard_cache_destroy(c);
    }
}

/* A load that blocks: shard 1's file replaced by a FIFO, whose open()
 * waits for a writer. */
typedef struct blocked_load {
    zpi_shard_cache *c;
    zp_status st;
    zpi_err err;
} blocked_load;

static void *blocked_main(void *arg)
{
    blocked_load *b = arg;
    const zpi_shard *sh;
    b->st = zpi_shard_cache_get(b->c, 1, &sh, NULL, &b->err);
    return NULL;
}

/* zpi_shard_cache_get_unless_loading() returns at once, pinning nothing,
 * while another thread loads the shard (without it, the first fetch tasks
 * of a shuffle block wait for each other's loads instead of decoding other
 * shards); a shard no one loads it loads and pins as the waiting get does.
 * Without the non-waiting branch, this test blocks until ctest's timeout. */
static void test_get_unless_loading(void **state)
{
    fixture *f = *state;
    zpi_shard_cache *c = mk(f->ds, 1 << 30, 0, NULL);
    char *p = zpt_path(f->dir, "s1.jsonl.zst");
    assert_int_equal(unlink(p), 0);
    assert_int_equal(mkfifo(p, 0600), 0);
    blocked_load b = {c, ZP_ERR_INTERNAL, {ZP_OK, ""}};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, blocked_main, &b), 0);
    zpi_shard_cache_stats st;
    do { /* the load of shard 1 has begun (its slot is LOADING) */
        usleep(1000);
        zpi_shard_cache_stats_get(c, &st);
    } while (st.misses == 0);
    const zpi_shard *sh = (const zpi_shard *)1;
    int loaded = -1;
    zpi_err err = {0};
    assert_int_equal(zpi_shard_cache_get_unless_loading(c, 1, &sh, &loaded, &err),
                     ZP_OK);
    assert_null(sh);
    assert_int_equal(loaded, 0);
    /* shard 0: loaded and pinned */
    assert_int_equal(zpi_shard_cache_get_unless_loading(c, 0, &sh, &loaded, &err),
                     ZP_OK);
    assert_non_null(sh);
    assert_int_equal(loaded, 1);
    assert_int_equal(sh->n_records, N_RECORDS);
    zpi_shard_cache_put(c, 0);
    /* let the blocked load go on: it fails (not a regular file) */
    int w = open(p, O_WRONLY);
    assert_true(w >= 0);
    pthread_join(th, NULL);
    close(w);
    assert_int_equal(b.st, ZP_ERR_IO);
    assert_non_null(strstr(b.err.msg, "not a regular file"));
    zpi_shard_cache_stats_get(c, &st);
    assert_int_equal(st.loads_failed, 1);
    assert_int_equal(st.misses, 2);
    zpi_shard_cache_destroy(c);
    free(p);
}

static void test_failed_load_each_time(void **state)
{
    fixture *f = *state;
    zpi_shard_cache *c = mk(f->ds, 1 << 30, 0, NULL);
    char *p = zpt_path(f->dir, "s2.jsonl.zst");
    assert_int_equal(unlink(p), 0);
    const zpi_shard *sh;
    zpi_err err1 = {0}, err2 = {0};
    assert_int_equal(zpi_shard_cache_get(c, 2, &sh, NULL, &err1), ZP_ERR_IO);
    assert_non_null(strstr(err1.msg, "s2.jsonl.zst"));
    assert_non_null(strstr(err1.msg, "No such file"));
    assert_int_equal(zpi_shard_cache_get(c, 2, &sh, NULL, &err2), ZP_ERR_IO);
    assert_string_equal(err1.msg, err2.msg);
    zpi_shard_cache_stats st;
    zpi_shard_cache_stats_get(c, &st);
    assert_int_equal(st.loads_failed, 2);
    assert_int_equal(st.misses, 2);
    assert_int_equal(st.bytes_resident, 0);
    /* other shards are unaffected; a repaired file loads */
    touch(c, 1);
    size_t n;
    char *t = shard_text(2, &n);
    assert_int_equal(zpt_write_zst(p, t, n, 2), 0);
    touch(c, 2);
    /* out of range */
    assert_int_equal(zpi_shard_cache_get(c, N_SHARDS, &sh, NULL, &err1),
                     ZP_ERR_INVALID);
    free(t);
    free(p);
    zpi_shard_cache_destroy(c);
}

/* A manifest whose sample count is wrong (same bytes) is caught at load. */
static void test_stale_count(void **state)
{
    fixture *f = *state;
    char *m = zpt_path(f->dir, "m.json");
    char text[1024];
    snprintf(text, sizeof text,
             "{\"format_version\": 1, \"shards\": [{\"path\": \"s0.jsonl.zst\", \"samples\": %d}]}",
             N_RECORDS + 1);
    assert_int_equal(zpt_write_file(m, text, strlen(text)), 0);
    zp_dataset *ds;
    assert_int_equal(zp_dataset_create(NULL, &ds), ZP_OK);
    assert_int_equal(zp_dataset_add(ds, m), ZP_OK);
    zpi_shard_cache *c = mk(ds, 1 << 30, 0, NULL);
    const zpi_shard *sh;
    zpi_err err = {0};
    assert_int_equal(zpi_shard_cache_get(c, 0, &sh, NULL, &err), ZP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "shard 's0.jsonl.zst'"));
    assert_non_null(strstr(err.msg, "stale manifest"));
    zpi_shard_cache_destroy(c);
    zp_dataset_destroy(ds);
    free(m);
}

/* A shard larger than the cache, read chunk after chunk (get, read, put):
 * decoded once, not once per chunk, with one warning naming the size the
 * cache needs; when the pass moves on to the next shard the old one goes. */
static void test_large_shard_decoded_once(void **state)
{
    fixture *f = *state;
    logbook lb = {0, ""};
    zpi_shard_cache *c = mk(f->ds, f->shard_size / 2, 1, &lb);
    for (int chunk = 0; chunk < 20; chunk++)
        touch(c, 0);
    zpi_shard_cache_stats st;
    zpi_shard_cache_stats_get(c, &st);
    assert_int_equal(st.misses, 1);
    assert_int_equal(st.hits, 19);
    assert_int_equal(st.evictions, 0);
    assert_int_equal(st.bytes_resident, f->shard_size);
    assert_int_equal(lb.n, 1);
    char need[64];
    assert_non_null(strstr(lb.last, "shard cache too small"));
    assert_non_null(strstr(lb.last, "s0.jsonl.zst"));
    snprintf(need, sizeof need, "(%zu bytes)", f->shard_size / 2);
    assert_non_null(strstr(lb.last, need)); /* the budget */
    snprintf(need, sizeof need, "set shard_cache_bytes to at least %zu", f->shard_size);
    assert_non_null(strstr(lb.last, need));
    /* the next shard: 0 leaves the working set and is evicted, its buffer
     * kept for the next load; one warning in all */
    for (int chunk = 0; chunk < 20; chunk++)
        touch(c, 1);
    zpi_shard_cache_stats_get(c, &st);
    assert_int_equal(st.misses, 2);
    assert_int_equal(st.evictions, 1);
    assert_int_equal(st.bytes_resident, f->shard_size + f->spare_size);
    touch(c, 2);
    zpi_shard_cache_stats_get(c, &st);
    assert_int_equal(st.misses, 3);
    assert_int_equal(st.spare_reuses, 1);
    assert_int_equal(lb.n, 1);
    zpi_shard_cache_destroy(c);
}

/* The shards of a shuffle block read in turn (a record from each): the
 * working set keeps them all, each decoded once; a budget that holds them
 * gives no warning. */
static void test_block_working_set(void **state)
{
    fixture *f = *state;
    logbook lb = {0, ""};
    zpi_shard_cache *c = mk(f->ds, 0, 3, &lb);
    for (int round = 0; round < 10; round++)
        for (uint32_t i = 0; i < 3; i++)
            touch(c, i);
    zpi_shard_cache_stats st;
    zpi_shard_cache_stats_get(c, &st);
    assert_int_equal(st.misses, 3);
    assert_int_equal(st.evictions, 0);
    assert_int_equal(lb.n, 1);
    char need[64];
    snprintf(need, sizeof need, "at least %zu", 3 * f->shard_size);
    assert_non_null(strstr(lb.last, need));
    zpi_shard_cache_destroy(c);

    lb.n = 0;
    c = mk(f->ds, 3 * f->shard_size, 3, &lb);
    for (int round = 0; round < 10; round++)
        for (uint32_t i = 0; i < 3; i++)
            touch(c, i);
    zpi_shard_cache_stats_get(c, &st);
    assert_int_equal(st.misses, 3);
    assert_int_equal(lb.n, 0);
    zpi_shard_cache_destroy(c);
}

/* Through a whole pipeline: one shard 8x the cache, read in chunks of 16
 * records by 2 fetch tasks, over 2 epochs (a pass each): at most one decode
 * per pass (the counters), and the warning once through the log callback. */
static void test_pipeline_large_shard(void **state)
{
    fixture *f = *state;
    zp_dataset *ds;
    assert_int_equal(zp_dataset_create(NULL, &ds), ZP_OK);
    char *p = zpt_path(f->dir, "s1.jsonl.zst");
    assert_int_equal(zp_dataset_add(ds, p), ZP_OK);
    assert_int_equal(zp_dataset_index(ds), ZP_OK);
    for (int shuffle = 0; shuffle <= 1; shuffle++) {
        zp_worksource_config wc;
        zp_worksource_config_init(&wc);
        wc.shuffle = shuffle;
        zp_worksource *ws;
        assert_int_equal(zp_worksource_create(ds, &wc, &ws), ZP_OK);
        zp_pipeline_config pc;
        zp_pipeline_config_init(&pc);
        logbook lb = {0, ""};
        pc.log = log_cb;
        pc.log_user = &lb;
        pc.threads = 2;
        pc.epochs = 2;
        pc.chunk_samples = 16;
        pc.fetch_parallelism = 2;
        pc.microbatch_size = 8;
        pc.shard_cache_bytes = f->shard_size / 8;
        zp_pipeline *pl;
        assert_int_equal(zp_pipeline_create(ws, &pc, &pl), ZP_OK);
        assert_int_equal(zp_pipeline_enable_observability(pl), ZP_OK);
        const zp_batch *b;
        zp_status st;
        uint64_t rows = 0;
        while ((st = zp_pipeline_next(pl, &b)) == ZP_OK)
            rows += b->rows;
        assert_int_equal(st, ZP_END);
        assert_int_equal(rows, 2 * N_RECORDS);
        zp_prefetch_timing pt;
        zp_fetch_timing ft;
        assert_int_equal(zp_pipeline_prefetch_timing_snapshot(pl, &pt), ZP_OK);
        assert_int_equal(zp_pipeline_fetch_timing_snapshot(pl, &ft), ZP_OK);
        /* 2 passes: one decode each at most (the shard may stay across the
         * epoch boundary: then once in all) */
        assert_true(pt.cache_misses >= 1 && pt.cache_misses <= 2);
        assert_true(ft.shards_opened >= 1 && ft.shards_opened <= 2);
        assert_int_equal(lb.n, 1);
        assert_non_null(strstr(lb.last, "shard cache too small"));
        assert_non_null(strstr(lb.last, "s1.jsonl.zst"));
        zp_pipeline_destroy(pl);
        zp_worksource_destroy(ws);
    }
    free(p);
    zp_dataset_destroy(ds);
}

/* Tokenize without a map parses each record where it lies in the pinned
 * shard and copies only its text: a record without the text field, or with
 * a text that is not a string, is still reported with its shard and line
 * (fail policy) or skipped and counted (skip policy). */
static void test_pipeline_text_from_shard(void **state)
{
    fixture *f = *state;
    const char *text = "{\"text\": \"hello world\"}\n"
                       "{\"id\": 1}\n"
                       "{\"text\": 5}\n"
                       "{\"text\": \"caf\\u00e9\"}\n";
    char *path = zpt_path(f->dir, "t.jsonl");
    assert_int_equal(zpt_write_file(path, text, strlen(text)), 0);
    for (int skip = 0; skip <= 1; skip++) {
        zp_dataset *ds;
        assert_int_equal(zp_dataset_create(NULL, &ds), ZP_OK);
        assert_int_equal(zp_dataset_add(ds, path), ZP_OK);
        assert_int_equal(zp_dataset_index(ds), ZP_OK);
        zp_worksource_config wc;
        zp_worksource_config_init(&wc);
        wc.shuffle = 0;
        zp_worksource *ws;
        assert_int_equal(zp_worksource_create(ds, &wc, &ws), ZP_OK);
        zp_pipeline_config pc;
        zp_pipeline_config_init(&pc);
        pc.threads = 1;
        pc.on_bad_record = skip ? ZP_BAD_RECORD_SKIP : ZP_BAD_RECORD_FAIL;
        zp_pipeline *pl;
        assert_int_equal(zp_pipeline_create(ws, &pc, &pl), ZP_OK);
        assert_int_equal(zp_pipeline_tokenize(pl, "gpt2", "text", 1), ZP_OK);
        assert_int_equal(zp_pipeline_pack(pl, ZP_PACK_PAD, 8), ZP_OK);
        const zp_batch *b;
        zp_status st;
        uint64_t rows = 0;
        while ((st = zp_pipeline_next(pl, &b)) == ZP_OK)
            rows += b->rows;
        if (skip) {
            assert_int_equal(st, ZP_END);
            zp_pipeline_counts cnt;
            zp_pipeline_get_counts(pl, &cnt);
            assert_int_equal(cnt.skipped, 2);
            assert_int_equal(cnt.samples, 2);
            assert_true(rows >= 2); /* one row per document */
        } else {
            assert_int_equal(st, ZP_ERR_FORMAT);
            const char *m = zp_pipeline_errmsg(pl);
            assert_non_null(strstr(m, "t.jsonl' line 2 (record 1)"));
            assert_non_null(strstr(m, "no field 'text'"));
        }
        zp_pipeline_destroy(pl);
        zp_worksource_destroy(ws);
        zp_dataset_destroy(ds);
    }
    free(path);
}

/* The format's load_bufs entry: a spare decode buffer large enough is used
 * as it is (the shard's data is that buffer), one too small is replaced
 * (the data is still right), and the scratch buffer is kept for the next
 * load. */
static void test_load_bufs_reuse(void **state)
{
    fixture *f = *state;
    const char *path = zpi_dataset_shard_path(f->ds, 1);
    const zpi_format *fmt = zpi_dataset_shard_format(f->ds, 1);
    const zpi_load_limits *lim = zpi_dataset_shard_limits(f->ds, 1);
    assert_non_null(fmt->load_bufs);
    zpi_err err = {0};
    zpi_load_bufs bufs;
    memset(&bufs, 0, sizeof bufs);
    size_t big = f->spare_size * 2;
    char *spare = malloc(big + ZPI_JSON_PADDING);
    memset(spare, 'x', big + ZPI_JSON_PADDING);
    bufs.data = spare;
    bufs.data_cap = big;
    zpi_shard sh;
    assert_int_equal(fmt->load_bufs(path, "s1", lim, &bufs, &sh, &err), ZP_OK);
    assert_null(bufs.data); /* taken */
    assert_ptr_equal(sh.data, spare);
    assert_int_equal(sh.n_records, N_RECORDS);
    assert_memory_equal(sh.data, "{\"id\":   1000", 13);
    assert_int_equal(sh.data[sh.data_len], 0); /* padding zeroed */
    assert_non_null(bufs.scratch);
    char *scr = bufs.scratch;
    /* a spare too small is replaced */
    bufs.data = malloc(16 + ZPI_JSON_PADDING);
    bufs.data_cap = 16;
    zpi_shard sh2;
    assert_int_equal(fmt->load_bufs(path, "s1", lim, &bufs, &sh2, &err), ZP_OK);
    assert_null(bufs.data);
    assert_int_equal(sh2.data_len, sh.data_len);
    assert_memory_equal(sh2.data, sh.data, sh.data_len);
    assert_true(sh2.data_cap >= sh2.data_len);
    assert_ptr_equal(bufs.scratch, scr); /* the scratch buffer is reused */
    /* the hash check holds with recycled buffers: a wrong expected hash is
     * an error naming the shard, and the spare taken is released */
    zpi_load_limits bad = *lim;
    bad.has_xxh64 = 1;
    bad.expect_xxh64 = 42;
    bufs.data = malloc(big + ZPI_JSON_PADDING);
    bufs.data_cap = big;
    zpi_shard sh3;
    assert_int_equal(fmt->load_bufs(path, "s1", &bad, &bufs, &sh3, &err), ZP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "'s1'"));
    assert_null(sh3.data);
    free(bufs.data); /* NULL when the load took it */
    zpi_shard_free(&sh);
    zpi_shard_free(&sh2);
    free(bufs.scratch);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_hits_misses_evictions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pinned_not_evicted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repinned_not_evicted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_load_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_get_unless_loading, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_load_each_time, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_count, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_shard_decoded_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_block_working_set, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipeline_large_shard, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipeline_text_from_shard, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_bufs_reuse, setup, teardown),
    };
    return cmocka_run_group_tests_name("shard_cache", tests, NULL, NULL);
}
