/*
 * fetcher.c - remote shards made local files (fetcher.h has the model).
 *
 * State per remote shard: its cache key and, while this process downloads
 * it, a `download` record (the cache entry being written, the transfer's
 * id, who waits). The transfer's completion (on the xfer I/O thread)
 * commits or aborts the cache entry and wakes the waiters; a small renewal
 * thread keeps the leases of running downloads alive, so that a node's
 * other processes wait for them instead of taking them over.
 *
 * Next use (Belady): the caller's callback (the engine's order of shards,
 * engine/next_use.h) behind the cache's next_use hook, which names cache
 * keys: a key is mapped back to its shard through an open-addressing table.
 *
 * Locks: f->mu (slots, downloads, stats) is never held while calling the
 * cache or the transfer engine except for commit/abort/renew of an entry
 * this process owns (those take the cache's own locks briefly, and the
 * cache never calls back into the fetcher but for next_use, which takes
 * no lock of the fetcher's).
 */
#include "io/fetcher.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "base/util.h"
#include "base/filehash.h"
#include "io/storage.h"

#define NU_UNKNOWN UINT64_MAX

typedef struct download {
    size_t shard;
    zpi_dc_entry e;
    uint64_t id;      /* the transfer's */
    int demand;
    int done;         /* the transfer ended (and the entry was committed or aborted) */
    int lost;         /* downloaded, but the lock's lease was taken over meanwhile */
    zp_status status;
    zpi_err err;
    int waiters;
    int pinned;       /* e is the committed file, pinned for a waiter to take over */
    int serving;      /* demanded to serve another node (peer_serve) */
    zp_peer_use use;  /* serving: the read it is for (the trace) */
    int peer;         /* asked from the peer source, its answer not in yet */
    int pf;           /* started by prefetch(): counted in f->pf_out until done */
    uint64_t t_peer;  /* when asked */
    struct download *next_active; /* in f->active while not done */
} download;

typedef struct slot {
    zpi_fetch_shard sh; /* the caller's, strings owned */
    char *key;        /* NULL for a local shard */
    download *dl;     /* this process's download in progress (or done, with waiters) */
    unsigned bad;     /* downloads of it that failed the size or hash check */
    int pending;      /* in f->pend: a prefetch waiting for a place */
} slot;

struct zpi_fetcher {
    zpi_storage *st;    /* borrowed */
    zpi_xfer *x;
    zpi_disk_cache *dc;
    size_t n;
    slot *slots;
    /* key -> shard: open addressing over the keys' hash */
    size_t *kmap;
    size_t kcap;
    double lease_s;

    pthread_mutex_t mu;
    pthread_cond_t cv;  /* a download ended, or cancel */
    int cancelled;
    download *active;
    zpi_fetcher_stats stats;

    /* prefetches: at most pf_cap downloads started by prefetch() are out
     * (queued or running in the transfers) at once; the others wait in
     * pend (a FIFO of shard numbers, each shard at most once), holding no
     * cache entry (no lock file, no open file), until one ends. So a
     * look-ahead of thousands of shards keeps neither thousands of files
     * open nor thousands of cache locks that another process of the node
     * would wait on while the download is still far back in this
     * process's queue. */
    unsigned pf_out, pf_cap;
    size_t *pend;       /* n slots: a ring */
    size_t pend_head, pend_n;

    /* renewal thread (also starts the pending prefetches) */
    pthread_t renew_thread;
    int renew_started;
    int renew_stop;
    pthread_cond_t renew_cv;

    /* shards from other nodes (attached when set) */
    const zp_peer_source *peer;
    uint64_t pos_g;     /* the consumer's global position (atomic) */
    uint64_t pos_ep;    /* the same as (epoch << 40 | position) + 1, 0 unknown (atomic) */

    /* debug messages (the trace of downloads: trace_download) */
    zp_log_fn log;
    void *log_user;

    /* next use: the caller's order */
    zpi_fetch_next_use_fn next_use;
    void *next_use_user;
    zpi_fetch_locate_fn locate;
};

void zpi_fetcher_cache_dir_for(const zp_storage_config *cfg, char *buf, size_t cap)
{
    if (cfg && cfg->cache_dir && cfg->cache_dir[0]) {
        zpi_fmt(buf, cap, "%s", cfg->cache_dir);
        return;
    }
    const char *base = zpi_node_tmpdir(NULL);
    /* per user: another user's cache is neither read nor written */
    zpi_fmt(buf, cap, "%s/zephon-cache-%u", base, (unsigned)geteuid());
}

void zp_storage_cache_dir(const zp_storage_config *cfg, char *buf, size_t cap)
{
    if (buf && cap)
        zpi_fetcher_cache_dir_for(cfg, buf, cap);
}

/* ------------------------------------------------------------ keys */

static uint64_t key_hash_of(const char *identity) { return XXH64(identity, strlen(identity), 0); }

/* "<16 hex of the identity's hash>-<file name, characters outside
 * [A-Za-z0-9._-] as '_', at most 100>". */
static char *make_key(const char *spec)
{
    char *id = zpi_url_identity(spec);
    char *base = zpi_url_basename(spec);
    char *key = NULL;
    if (id && base) {
        size_t bl = strlen(base);
        if (bl > 100)
            bl = 100;
        key = malloc(17 + 1 + bl + 1);
        if (key) {
            snprintf(key, 18, "%016llx", (unsigned long long)key_hash_of(id));
            key[16] = '-';
            for (size_t i = 0; i < bl; i++) {
                char c = base[i];
                int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                         c == '.' || c == '_' || c == '-';
                key[17 + i] = ok ? c : '_';
            }
            key[17 + bl] = '\0';
            if (bl == 0) {
                key[17] = 'x';
                key[18] = '\0';
            }
        }
    }
    free(id);
    free(base);
    return key;
}

static uint64_t key_prefix(const char *key)
{
    uint64_t h = 0;
    for (int i = 0; i < 16 && key[i]; i++) {
        char c = key[i];
        unsigned v = c >= 'a' ? (unsigned)(c - 'a' + 10) : (unsigned)(c - '0');
        h = (h << 4) | (v & 15);
    }
    return h;
}

static size_t shard_of_key(const zpi_fetcher *f, const char *key)
{
    if (!f->kcap)
        return SIZE_MAX;
    size_t m = f->kcap - 1;
    for (size_t h = (size_t)zpi_mix64(key_prefix(key)) & m;; h = (h + 1) & m) {
        size_t i = f->kmap[h];
        if (i == SIZE_MAX)
            return SIZE_MAX;
        if (strcmp(f->slots[i].key, key) == 0)
            return i;
    }
}

/* ------------------------------------------------------------ next use */

static uint64_t next_use_cb(void *user, const char *key)
{
    zpi_fetcher *f = user;
    size_t i = shard_of_key(f, key);
    if (i == SIZE_MAX)
        return NU_UNKNOWN;
    uint64_t v = f->next_use(f->next_use_user, i);
    if (f->peer && f->peer->next_use) {
        /* the node's other ranks (and the nodes it serves): in samples ahead */
        uint64_t d = f->peer->next_use(f->peer->user, i);
        uint64_t g = __atomic_load_n(&f->pos_g, __ATOMIC_RELAXED);
        if (d != NU_UNKNOWN && g + d >= g && g + d < v)
            v = g + d;
    }
    return v;
}

void zpi_fetcher_set_position(zpi_fetcher *f, uint32_t epoch, uint64_t position, uint64_t g)
{
    if (!f)
        return;
    __atomic_store_n(&f->pos_g, g, __ATOMIC_RELAXED);
    __atomic_store_n(&f->pos_ep, (((uint64_t)epoch << 40) | (position & (((uint64_t)1 << 40) - 1))) + 1,
                     __ATOMIC_RELAXED);
    if (f->peer && f->peer->position)
        f->peer->position(f->peer->user, f, epoch, position);
}

/* ------------------------------------------------------------ renewal */

static void feed_locked(zpi_fetcher *f);

static void *renew_main(void *arg)
{
    zpi_fetcher *f = arg;
    pthread_mutex_lock(&f->mu);
    double step = f->lease_s / 4;
    if (step < 0.01)
        step = 0.01;
    uint64_t next_renew = zpi_now_ns() + (uint64_t)(step * 1e9);
    while (!f->renew_stop) {
        feed_locked(f);
        uint64_t now = zpi_now_ns();
        if (now >= next_renew) {
            for (download *d = f->active; d && !f->renew_stop; d = d->next_active) {
                zpi_err e;
                (void)zpi_dc_renew(f->dc, &d->e, &e); /* a lost lease shows at commit */
            }
            next_renew = zpi_now_ns() + (uint64_t)(step * 1e9);
            continue;
        }
        if (f->renew_stop || (f->pend_n && f->pf_out < f->pf_cap && !f->cancelled))
            continue;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (next_renew - now);
        ts.tv_sec += (time_t)(ns / 1000000000u);
        ts.tv_nsec = (long)(ns % 1000000000u);
        pthread_cond_timedwait(&f->renew_cv, &f->mu, &ts);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

/* ------------------------------------------------------------ create / destroy */

static int peer_serve(void *ctx, size_t i, void *buf, uint64_t bytes, const zp_peer_use *use);

/* The caller's shard table, copied into f->slots, and the key map of the
 * remote shards. */
static zp_status copy_shards(zpi_fetcher *f, const zpi_fetcher_config *cfg, zpi_err *err)
{
    f->n = cfg->n_shards;
    f->slots = calloc(f->n ? f->n : 1, sizeof *f->slots);
    f->pend = malloc((f->n ? f->n : 1) * sizeof *f->pend);
    for (f->kcap = 16; f->kcap < 2 * f->n + 2; f->kcap *= 2)
        ;
    f->kmap = malloc(f->kcap * sizeof *f->kmap);
    if (!f->slots || !f->kmap || !f->pend)
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for the shard fetcher");
    for (size_t h = 0; h < f->kcap; h++)
        f->kmap[h] = SIZE_MAX;
    for (size_t i = 0; i < f->n; i++) {
        const zpi_fetch_shard *in = &cfg->shards[i];
        slot *sl = &f->slots[i];
        sl->sh = *in;
        sl->sh.spec = zpi_strdup(in->spec ? in->spec : "");
        sl->sh.name = zpi_strdup(in->name ? in->name : "");
        if (!sl->sh.spec || !sl->sh.name)
            return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for the shard fetcher");
        if (!zpi_is_url(sl->sh.spec))
            continue;
        if (!(sl->key = make_key(sl->sh.spec)))
            return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for the shard fetcher");
        size_t m = f->kcap - 1;
        size_t h = (size_t)zpi_mix64(key_prefix(sl->key)) & m;
        while (f->kmap[h] != SIZE_MAX)
            h = (h + 1) & m;
        f->kmap[h] = i;
    }
    return ZP_OK;
}

zp_status zpi_fetcher_create(const zpi_fetcher_config *cfg, zpi_fetcher **out, zpi_err *err)
{
    *out = NULL;
    if (!cfg || !cfg->storage || (cfg->n_shards && !cfg->shards))
        return zpi_err_set(err, ZP_ERR_INVALID, "shard fetcher: no storage or no shard table");
    zpi_fetcher *f = calloc(1, sizeof *f);
    if (!f)
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for the shard fetcher");
    f->st = cfg->storage;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    pthread_cond_init(&f->renew_cv, NULL);
    const zp_storage_config *sc = zpi_storage_config(f->st);
    f->lease_s = sc->lease_s; /* > 0: checked by the storage settings */
    if (!sc->cache_lru) {
        f->next_use = cfg->next_use;
        f->next_use_user = cfg->next_use_user;
        f->locate = cfg->locate;
    }
    zp_status st = copy_shards(f, cfg, err);
    if (st != ZP_OK)
        goto fail;
    char dir[4096];
    zpi_fetcher_cache_dir_for(sc, dir, sizeof dir);
    zpi_disk_cache_config dcc = {
        .dir = dir,
        .limit_bytes = sc->cache_limit_bytes,
        .lease_s = f->lease_s,
        .next_use = f->next_use ? next_use_cb : NULL,
        .next_use_user = f,
        .log = cfg->log,
        .log_user = cfg->log_user,
    };
    f->log = cfg->log;
    f->log_user = cfg->log_user;
    if ((st = zpi_disk_cache_create(&dcc, &f->dc, err)) != ZP_OK)
        goto fail;
    unsigned par = cfg->parallelism ? cfg->parallelism : 1;
    unsigned dem = cfg->demand_slots ? cfg->demand_slots : 1;
    /* twice the transfers' slots: the next ones are queued when one ends */
    f->pf_cap = 2 * par;
    if ((st = zpi_xfer_create_shared(f->st, par, dem, zpi_disk_cache_dir(f->dc), &f->x, err)) != ZP_OK)
        goto fail;
    if (pthread_create(&f->renew_thread, NULL, renew_main, f) != 0) {
        st = zpi_err_set(err, ZP_ERR_NOMEM, "shard fetcher: cannot create its thread");
        goto fail;
    }
    f->renew_started = 1;
    if (cfg->use_peer && sc->peer && sc->peer->request && sc->peer->attach && sc->peer->detach) {
        f->peer = sc->peer;
        f->peer->attach(f->peer->user, f, peer_serve);
    }
    *out = f;
    return ZP_OK;
fail:
    zpi_fetcher_destroy(f);
    return st;
}

void zpi_fetcher_cancel(zpi_fetcher *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    f->cancelled = 1;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

void zpi_fetcher_destroy(zpi_fetcher *f)
{
    if (!f)
        return;
    zpi_fetcher_cancel(f);
    /* the peer's answers in flight end now (storage is not asked: cancelled) */
    if (f->peer)
        f->peer->detach(f->peer->user, f);
    if (f->renew_started) {
        pthread_mutex_lock(&f->mu);
        f->renew_stop = 1;
        pthread_cond_signal(&f->renew_cv);
        pthread_mutex_unlock(&f->mu);
        pthread_join(f->renew_thread, NULL);
    }
    /* cancels the transfers: every done callback runs (aborting its entry) */
    zpi_xfer_destroy(f->x);
    for (size_t i = 0; f->slots && i < f->n; i++) {
        free(f->slots[i].dl); /* done, no waiters left once the users are joined */
        free(f->slots[i].key);
        free((char *)f->slots[i].sh.spec);
        free((char *)f->slots[i].sh.name);
    }
    zpi_disk_cache_destroy(f->dc);
    free(f->slots);
    free(f->pend);
    free(f->kmap);
    pthread_cond_destroy(&f->cv);
    pthread_cond_destroy(&f->renew_cv);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

const char *zpi_fetcher_cache_dir(const zpi_fetcher *f) { return zpi_disk_cache_dir(f->dc); }

int zpi_fetcher_is_remote(const zpi_fetcher *f, size_t i)
{
    return f && i < f->n && f->slots[i].key != NULL;
}

/* ------------------------------------------------------------ downloads */

/* The storage settings' stop_requested hook says stop. */
static int stop_requested(const zpi_fetcher *f)
{
    const zp_storage_config *c = zpi_storage_config(f->st);
    return c->stop_requested && c->stop_requested(c->stop_user) != 0;
}

/* Under mu: a download that has ended and that nobody waits on any more is
 * dropped from its slot and freed. */
static void dl_drop_if_unused_locked(zpi_fetcher *f, download *d)
{
    if (d->done && d->waiters == 0) {
        if (d->pinned) /* no waiter took the file over */
            zpi_dc_release(f->dc, &d->e);
        d->pinned = 0;
        f->slots[d->shard].dl = NULL;
        free(d);
    }
}

static void active_remove_locked(zpi_fetcher *f, download *d)
{
    for (download **pp = &f->active; *pp; pp = &(*pp)->next_active)
        if (*pp == d) {
            *pp = d->next_active;
            return;
        }
}

/* Under mu: d (ending now) no longer counts among the prefetches out; the
 * renewal thread starts the next pending one. */
static void pf_end_locked(zpi_fetcher *f, download *d)
{
    if (!d->pf)
        return;
    d->pf = 0;
    f->pf_out--;
    if (f->pend_n)
        pthread_cond_signal(&f->renew_cv);
}

/* Under mu: d's file was just committed (and pinned by the commit). With
 * a thread waiting on d (a demand), the pin is kept for the first waiter to
 * take over (zpi_fetcher_acquire): released here and pinned again there,
 * another process of the node could evict the file in between, and the
 * waiter would download it once more (docs/storage.md, "A shard downloaded
 * twice in an epoch"). Without a waiter (a prefetch), released. */
static void keep_or_release_locked(zpi_fetcher *f, download *d)
{
    if (d->waiters > 0)
        d->pinned = 1;
    else
        zpi_dc_release(f->dc, &d->e);
}

/* The trace of downloads (docs/storage.md, "Tracing downloads"): one
 * debug message per download from storage, naming the shard, why it is
 * downloaded (a fetch waits on it, the look-ahead, another node asked for
 * it, another node did not send it) and this rank's position. */
static void trace_download(zpi_fetcher *f, const download *d, int fallback)
{
    if (!f->log)
        return;
    uint64_t v = __atomic_load_n(&f->pos_ep, __ATOMIC_RELAXED);
    char msg[640], at[64] = "", rd[96] = "", who[32] = "";
    const char *why = d->serving ? "for another node" : d->demand ? "needed now" : "look-ahead";
    if (v)
        zpi_fmt(at, sizeof at, ", this rank at epoch %u position %llu", (unsigned)((v - 1) >> 40),
                (unsigned long long)((v - 1) & (((uint64_t)1 << 40) - 1)));
    /* the read it is for: the asking rank's, or this rank's next one (a
     * look-ahead may cross into the next epoch, and another node asks
     * ahead of its reads: the epoch of the download is the read's) */
    uint32_t re = UINT32_MAX;
    uint64_t rp = 0;
    if (d->serving) {
        re = d->use.epoch;
        rp = d->use.position;
        if (d->use.rank >= 0)
            zpi_fmt(who, sizeof who, ": rank %d", d->use.rank);
    } else if (f->next_use && f->locate) {
        uint64_t g = f->next_use(f->next_use_user, d->shard);
        if (g == NU_UNKNOWN || !f->locate(f->next_use_user, g, &re, &rp))
            re = UINT32_MAX;
    }
    if (re != UINT32_MAX)
        zpi_fmt(rd, sizeof rd, ", read at epoch %u position %llu", (unsigned)re,
                (unsigned long long)rp);
    zpi_fmt(msg, sizeof msg, "download: shard '%s' from storage (%s%s%s)%s%s",
            f->slots[d->shard].sh.name, why, who,
            fallback ? ", after another node did not send it" : "", rd, at);
    f->log(f->log_user, ZP_LOG_DEBUG, msg);
}

typedef struct done_ctx {
    zpi_fetcher *f;
    download *d;
} done_ctx;

/* A finished download's file flushed to the disk before the fetcher's lock
 * is taken: the commit's own fdatasync (which reports errors and decides)
 * then finds nothing to write, and the rank's fetch tasks and other
 * completions do not wait on this disk write under the lock. */
static void flush_early(download *d)
{
    if (d->e.fd >= 0)
        (void)fdatasync(d->e.fd);
}

/* xfer's completion, on its I/O thread. */
static void on_done(void *user, const zpi_xfer_result *r)
{
    done_ctx *c = user;
    zpi_fetcher *f = c->f;
    download *d = c->d;
    free(c);
    if (r->status == ZP_OK)
        flush_early(d);
    pthread_mutex_lock(&f->mu);
    active_remove_locked(f, d);
    zp_status st = r->status;
    zpi_err e;
    zpi_err_clear(&e);
    if (st == ZP_OK) {
        st = zpi_dc_commit(f->dc, &d->e, &e);
        if (st == ZP_OK)
            keep_or_release_locked(f, d);
        else if (st == ZP_ERR_STATE)
            d->lost = 1; /* another process took the download over: its file will do */
    } else if (st == ZP_ERR_IO && r->os_errno) {
        /* writing into the cache failed: name its file, and for a full disk
         * say what to do */
        int full = r->os_errno == ENOSPC || r->os_errno == EDQUOT;
        zpi_err_set(&e, ZP_ERR_IO, "%s (shard cache file %s)%s", zpi_err_msg(&r->err), d->e.path,
                    full ? ": the cache's file system is full: free space there, or give a "
                           "smaller cache limit or another cache folder"
                         : "");
        zpi_dc_abort(f->dc, &d->e);
    } else {
        zpi_err_copy(&e, &r->err);
        zpi_dc_abort(f->dc, &d->e);
        if (st == ZP_ERR_FORMAT)
            f->slots[d->shard].bad++;
    }
    d->status = st;
    zpi_err_copy(&d->err, &e);
    d->done = 1;
    pf_end_locked(f, d);
    pthread_cond_broadcast(&f->cv);
    dl_drop_if_unused_locked(f, d);
    pthread_mutex_unlock(&f->mu);
}

/* Under mu: d ended with st (its entry committed or aborted): wake its
 * waiters. */
static void dl_end_locked(zpi_fetcher *f, download *d, zp_status st, const zpi_err *e)
{
    d->status = st;
    if (e)
        zpi_err_copy(&d->err, e);
    d->done = 1;
    pf_end_locked(f, d);
    pthread_cond_broadcast(&f->cv);
    dl_drop_if_unused_locked(f, d);
}

/* 1 when fd holds the shard's bytes: its size, and its manifest hash when
 * it has one. */
static int peer_file_ok(const zpi_dc_entry *e, const zpi_fetch_shard *sh)
{
    struct stat sb;
    if (fstat(e->fd, &sb) != 0 || (sh->bytes != UINT64_MAX && (uint64_t)sb.st_size != sh->bytes))
        return 0;
    if (!sh->has_xxh64)
        return 1;
    /* the entry's descriptor is open for writing only */
    int fd = open(e->path, O_RDONLY | O_CLOEXEC);
    uint64_t h;
    int ok = fd >= 0 && zpi_xxh64_fd(fd, &h, NULL) == 0 && h == sh->xxh64;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* The peer source's answer (on its thread): the shard is in the entry's
 * file (checked, then committed as a download's is), or it is downloaded
 * from storage now. */
static void peer_done(void *user, int ok)
{
    done_ctx *c = user;
    zpi_fetcher *f = c->f;
    download *d = c->d;
    const zpi_fetch_shard *sh = &f->slots[d->shard].sh;
    int good = ok && peer_file_ok(&d->e, sh); /* d lives until done */
    if (good)
        flush_early(d);
    zpi_err e;
    zpi_err_clear(&e);
    pthread_mutex_lock(&f->mu);
    d->peer = 0;
    uint64_t ns = zpi_now_ns() - d->t_peer;
    if (good) {
        free(c);
        active_remove_locked(f, d);
        zp_status st = zpi_dc_commit(f->dc, &d->e, &e);
        if (st == ZP_OK) {
            keep_or_release_locked(f, d);
            f->stats.peer_shards++;
            f->stats.peer_bytes += sh->bytes;
            f->stats.peer_ns += ns;
        } else if (st == ZP_ERR_STATE) {
            d->lost = 1;
        }
        dl_end_locked(f, d, st, &e);
        pthread_mutex_unlock(&f->mu);
        return;
    }
    f->stats.peer_fallbacks++;
    if (f->cancelled) {
        free(c);
        active_remove_locked(f, d);
        zpi_dc_abort(f->dc, &d->e);
        zpi_err_set(&e, ZP_ERR_STATE, "shard '%s': stopped while waiting for it", sh->name);
        dl_end_locked(f, d, ZP_ERR_STATE, &e);
        pthread_mutex_unlock(&f->mu);
        return;
    }
    /* from storage, as without a peer (the transfer truncates the file) */
    trace_download(f, d, 1);
    zpi_xfer_job job = {
        .spec = sh->spec,
        .name = sh->name,
        .fd = d->e.fd,
        .expect_size = sh->bytes,
        .has_xxh64 = sh->has_xxh64,
        .xxh64 = sh->xxh64,
        .demand = d->demand,
        .done = on_done,
        .user = c,
    };
    d->waiters++;
    pthread_mutex_unlock(&f->mu);
    uint64_t id = 0;
    zp_status st = zpi_xfer_submit(f->x, &job, &id, &e);
    pthread_mutex_lock(&f->mu);
    d->waiters--;
    if (st != ZP_OK) {
        free(c);
        active_remove_locked(f, d);
        zpi_dc_abort(f->dc, &d->e);
        dl_end_locked(f, d, st, &e);
    } else {
        d->id = id;
        if (d->demand)
            zpi_xfer_promote(f->x, id); /* promoted while the peer was asked */
        dl_drop_if_unused_locked(f, d);
    }
    pthread_mutex_unlock(&f->mu);
}

static zp_status acquire(zpi_fetcher *f, size_t i, zpi_fetch_pin *pin, const zp_peer_use *serving,
                         zpi_err *err);

/* The peer source's serve(): shard i for another node, through this
 * node's cache (downloaded when needed), copied into buf. */
static int peer_serve(void *ctx, size_t i, void *buf, uint64_t bytes, const zp_peer_use *use)
{
    zpi_fetcher *f = ctx;
    zpi_fetch_pin pin;
    zpi_err err;
    zp_peer_use u = use ? *use : (zp_peer_use){-1, UINT32_MAX, 0};
    if (i >= f->n || !f->slots[i].key || acquire(f, i, &pin, &u, &err) != ZP_OK)
        return -1;
    int rc = 0;
    struct stat sb;
    if (pin.e.fd < 0 || fstat(pin.e.fd, &sb) != 0 || (uint64_t)sb.st_size != bytes)
        rc = -1;
    for (uint64_t at = 0; rc == 0 && at < bytes;) {
        ssize_t r = pread(pin.e.fd, (char *)buf + at, (size_t)(bytes - at), (off_t)at);
        if (r <= 0) {
            if (r < 0 && errno == EINTR)
                continue;
            rc = -1;
        } else {
            at += (uint64_t)r;
        }
    }
    zpi_fetcher_release(f, &pin, 0);
    if (rc == 0) {
        pthread_mutex_lock(&f->mu);
        f->stats.peer_served++;
        f->stats.peer_served_bytes += bytes;
        pthread_mutex_unlock(&f->mu);
    }
    return rc;
}

/* Start the download of shard i into the entry e the cache gave us
 * (DOWNLOAD). Under f->mu. */
static zp_status start_locked(zpi_fetcher *f, size_t i, const zpi_dc_entry *e, int demand,
                              const zp_peer_use *serving, download **hold, zpi_err *err)
{
    download *d = calloc(1, sizeof *d);
    done_ctx *c = malloc(sizeof *c);
    if (!d || !c) {
        free(d);
        free(c);
        zpi_dc_abort(f->dc, (zpi_dc_entry *)e);
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory starting a download");
    }
    d->shard = i;
    d->e = *e;
    d->demand = demand;
    d->serving = serving != NULL;
    if (serving)
        d->use = *serving;
    if (!demand) {
        d->pf = 1;
        f->pf_out++;
    }
    c->f = f;
    c->d = d;
    const zpi_fetch_shard *sh = &f->slots[i].sh;
    zpi_xfer_job job = {
        .spec = sh->spec,
        .name = sh->name,
        .fd = d->e.fd,
        .expect_size = sh->bytes,
        .has_xxh64 = sh->has_xxh64,
        .xxh64 = sh->xxh64,
        .demand = demand,
        .done = on_done,
        .user = c,
    };
    f->slots[i].dl = d;
    d->next_active = f->active;
    f->active = d;
    if (demand)
        f->stats.demands++;
    else
        f->stats.prefetches++;
    if (f->slots[i].bad)
        f->stats.refetches++;
    /* the I/O thread may complete it (taking f->mu) as soon as it is
     * submitted: unlock around the submit, holding a reference to d */
    d->waiters++;
    if (f->peer) {
        /* another node first: it answers through peer_done, which falls
         * back to storage when it cannot */
        d->peer = 1;
        d->t_peer = zpi_now_ns();
        pthread_mutex_unlock(&f->mu);
        int taken = f->peer->request(f->peer->user, f, i, sh->bytes, d->e.fd, peer_done, c) == 0;
        pthread_mutex_lock(&f->mu);
        if (taken) {
            if (hold) {
                *hold = d; /* the caller's reference: it waits on d */
                return ZP_OK;
            }
            d->waiters--;
            dl_drop_if_unused_locked(f, d);
            return ZP_OK;
        }
        d->peer = 0;
    }
    trace_download(f, d, 0);
    pthread_mutex_unlock(&f->mu);
    uint64_t id = 0;
    zp_status st = zpi_xfer_submit(f->x, &job, &id, err);
    pthread_mutex_lock(&f->mu);
    d->waiters--;
    if (st != ZP_OK) {
        /* not queued: done will not be called */
        active_remove_locked(f, d);
        zpi_dc_abort(f->dc, &d->e);
        d->status = st;
        zpi_err_copy(&d->err, err);
        d->done = 1;
        pf_end_locked(f, d);
        free(c);
        pthread_cond_broadcast(&f->cv);
        dl_drop_if_unused_locked(f, d);
        return st;
    }
    d->id = id;
    if (hold) {
        d->waiters++; /* kept for the caller, who waits on d */
        *hold = d;
    }
    dl_drop_if_unused_locked(f, d);
    return ZP_OK;
}

/* Shard i's download started now, unless it is in the cache or on its way
 * (f->mu not held). */
static void prefetch_now(zpi_fetcher *f, size_t i)
{
    zpi_dc_entry e;
    zpi_dc_state state;
    zpi_err err;
    if (zpi_dc_acquire(f->dc, f->slots[i].key, f->slots[i].sh.bytes, 0, &e, &state,
                       &err) != ZP_OK)
        return; /* the fetch will meet the error and report it */
    if (state == ZPI_DC_READY) {
        zpi_dc_release(f->dc, &e);
    } else if (state == ZPI_DC_DOWNLOAD) {
        pthread_mutex_lock(&f->mu);
        if (f->slots[i].dl) /* another thread of ours started it meanwhile: cannot be, the cache
                               gives DOWNLOAD to one caller; keep ours consistent anyway */
            zpi_dc_abort(f->dc, &e);
        else
            (void)start_locked(f, i, &e, 0, NULL, NULL, &err);
        pthread_mutex_unlock(&f->mu);
    } else if (state == ZPI_DC_NOROOM) {
        pthread_mutex_lock(&f->mu);
        f->stats.noroom++;
        pthread_mutex_unlock(&f->mu);
    }
}

/* Under mu (the renewal thread): the pending prefetches started while
 * fewer than pf_cap are out, in their order (mu released around each). */
static void feed_locked(zpi_fetcher *f)
{
    while (f->pend_n && f->pf_out < f->pf_cap && !f->renew_stop) {
        size_t i = f->pend[f->pend_head];
        f->pend_head = (f->pend_head + 1) % f->n;
        f->pend_n--;
        f->slots[i].pending = 0;
        if (f->slots[i].dl || f->cancelled || stop_requested(f))
            continue; /* on its way already (demanded meanwhile), or stopping */
        pthread_mutex_unlock(&f->mu);
        prefetch_now(f, i);
        pthread_mutex_lock(&f->mu);
    }
}

void zpi_fetcher_prefetch(zpi_fetcher *f, size_t i)
{
    if (!f || i >= f->n || !f->slots[i].key)
        return;
    pthread_mutex_lock(&f->mu);
    int busy = f->slots[i].dl != NULL || f->slots[i].pending || f->cancelled || stop_requested(f);
    int wait = !busy && (f->pf_out >= f->pf_cap || f->pend_n);
    if (wait) {
        /* behind the others: started in this order as places free up */
        f->pend[(f->pend_head + f->pend_n) % f->n] = i;
        f->pend_n++;
        f->slots[i].pending = 1;
    }
    pthread_mutex_unlock(&f->mu);
    if (busy || wait)
        return;
    prefetch_now(f, i);
}

/* serving: for another node (peer_serve), the read it is for; the trace
 * only. NULL: for this rank. */
static zp_status acquire(zpi_fetcher *f, size_t i, zpi_fetch_pin *pin, const zp_peer_use *serving,
                         zpi_err *err)
{
    memset(pin, 0, sizeof *pin);
    pin->e.fd = -1;
    if (i >= f->n)
        return zpi_err_set(err, ZP_ERR_INVALID, "shard %zu: out of range", i);
    if (!f->slots[i].key) {
        pin->path = f->slots[i].sh.spec;
        return ZP_OK;
    }
    const char *name = f->slots[i].sh.name;
    uint64_t t0 = zpi_now_ns();
    zp_status st = ZP_OK;
    int waited = 0; /* not found in the cache at the first look */
    download *held = NULL; /* our download, a reference held until we wait on it */
    unsigned lost = 0; /* our downloads of it whose lease was taken over */
    for (;;) {
        pthread_mutex_lock(&f->mu);
        if (f->cancelled || stop_requested(f)) {
            if (held) {
                held->waiters--;
                dl_drop_if_unused_locked(f, held);
            }
            pthread_mutex_unlock(&f->mu);
            st = zpi_err_set(err, ZP_ERR_STATE, "shard '%s': stopped while waiting for it", name);
            break;
        }
        /* our own download just started (a reference held), or another
         * thread's in flight */
        download *d = held ? held : f->slots[i].dl;
        if (d) {
            waited = 1;
            if (!held)
                d->waiters++;
            held = NULL;
            if (!d->demand && !d->done) {
                d->demand = 1;
                if (d->id) /* 0: the peer source is asked (peer_done promotes it) */
                    zpi_xfer_promote(f->x, d->id);
            }
            while (!d->done && !f->cancelled)
                pthread_cond_wait(&f->cv, &f->mu);
            d->waiters--;
            int done = d->done;
            zp_status ds = d->status;
            int was_lost = d->lost;
            if (done && ds == ZP_OK && d->pinned) {
                /* the committed file, still pinned: ours now */
                pin->e = d->e;
                d->pinned = 0;
                d->e.fd = -1;
                d->e.state = -1;
                pin->path = pin->e.path;
                pin->remote = 1;
                f->stats.misses++;
                dl_drop_if_unused_locked(f, d);
                pthread_mutex_unlock(&f->mu);
                break;
            }
            if (done && ds != ZP_OK)
                zpi_err_copy(err, &d->err);
            dl_drop_if_unused_locked(f, d);
            unsigned bad = f->slots[i].bad;
            pthread_mutex_unlock(&f->mu);
            if (!done)
                continue; /* cancelled: reported above */
            if (was_lost && ++lost <= ZPI_FETCH_LEASE_RETRIES)
                continue; /* the process that took it over downloads it: wait for it */
            if (ds == ZP_ERR_FORMAT && bad <= ZPI_FETCH_REFETCHES)
                continue; /* size or hash mismatch: fetch it again */
            if (ds != ZP_OK) {
                st = ds;
                break;
            }
            continue; /* downloaded: take our own pin */
        }
        pthread_mutex_unlock(&f->mu);
        zpi_dc_state state;
        st = zpi_dc_acquire(f->dc, f->slots[i].key, f->slots[i].sh.bytes, 1, &pin->e,
                            &state, err);
        if (st != ZP_OK)
            break;
        if (state == ZPI_DC_READY) {
            pin->path = pin->e.path;
            pin->remote = 1;
            pthread_mutex_lock(&f->mu);
            if (waited)
                f->stats.misses++;
            else
                f->stats.hits++;
            pthread_mutex_unlock(&f->mu);
            break;
        }
        waited = 1;
        if (state == ZPI_DC_DOWNLOAD) {
            pthread_mutex_lock(&f->mu);
            st = start_locked(f, i, &pin->e, 1, serving, &held, err);
            pthread_mutex_unlock(&f->mu);
            pin->e.fd = -1;
            if (st != ZP_OK)
                break;
            continue;
        }
        /* BUSY: another process downloads it. Waited in slices of 0.1 s so
         * that a stop request ends the wait (checked at the loop's top). */
        for (double left = f->lease_s; left > 0 && !stop_requested(f); left -= 0.1) {
            double t1 = zpi_now(), slice = left < 0.1 ? left : 0.1;
            zpi_dc_wait(f->dc, f->slots[i].key, slice);
            if (zpi_now() - t1 < slice * 0.5)
                break; /* no longer busy */
        }
    }
    pthread_mutex_lock(&f->mu);
    f->stats.wait_ns += zpi_now_ns() - t0;
    pthread_mutex_unlock(&f->mu);
    return st;
}

zp_status zpi_fetcher_acquire(zpi_fetcher *f, size_t i, zpi_fetch_pin *pin, zpi_err *err)
{
    return acquire(f, i, pin, NULL, err);
}

/* 1 when the pinned file's bytes do not have the shard's manifest hash (or
 * cannot be read); 0 when they do. */
static int pinned_file_bad(zpi_fetcher *f, const zpi_fetch_pin *pin)
{
    size_t i = shard_of_key(f, pin->e.key);
    if (i == SIZE_MAX || pin->e.fd < 0)
        return 1;
    const zpi_fetch_shard *sh = &f->slots[i].sh;
    uint64_t h;
    return !sh->has_xxh64 || zpi_xxh64_fd(pin->e.fd, &h, NULL) != 0 || h != sh->xxh64;
}

int zpi_fetcher_release(zpi_fetcher *f, zpi_fetch_pin *pin, int corrupt)
{
    if (!f || !pin || !pin->remote)
        return 0;
    int bad = corrupt && pinned_file_bad(f, pin);
    if (bad)
        zpi_dc_invalidate(f->dc, &pin->e);
    else
        zpi_dc_release(f->dc, &pin->e);
    pin->remote = 0;
    pin->path = NULL;
    return bad;
}

zp_status zpi_fetcher_check_limit(const zpi_fetcher *f, size_t fetch_parallelism, zpi_err *err)
{
    uint64_t largest = 0;
    size_t largest_i = 0;
    for (size_t i = 0; i < f->n; i++)
        if (f->slots[i].key && f->slots[i].sh.bytes > largest) {
            largest = f->slots[i].sh.bytes;
            largest_i = i;
        }
    uint64_t k = (uint64_t)(fetch_parallelism ? fetch_parallelism : 1) + 1;
    uint64_t limit = zpi_storage_config(f->st)->cache_limit_bytes;
    if (largest && limit / k < largest)
        return zpi_err_set(err, ZP_ERR_INVALID,
                           "cache_limit_bytes = %llu: too small for what the pipeline needs in "
                           "flight: %llu shards (one per fetch task, parallelism %zu, and one "
                           "download ahead) of up to %llu bytes (shard '%s'): give at least %llu",
                           (unsigned long long)limit, (unsigned long long)k, fetch_parallelism,
                           (unsigned long long)largest, f->slots[largest_i].sh.name,
                           (unsigned long long)(largest * k));
    return ZP_OK;
}

uint64_t zpi_fetcher_limit_shards(const zpi_fetcher *f, int *all)
{
    uint64_t total = 0, n = 0;
    for (size_t i = 0; i < f->n; i++)
        if (f->slots[i].key) {
            total += f->slots[i].sh.bytes;
            n++;
        }
    uint64_t limit = zpi_storage_config(f->st)->cache_limit_bytes;
    *all = limit >= total;
    if (!n || !total)
        return n ? n : 1;
    uint64_t fit = limit / (total / n ? total / n : 1);
    return fit < 1 ? 1 : fit > n ? n : fit;
}

void zpi_fetcher_stats_get(zpi_fetcher *f, zpi_fetcher_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    *out = f->stats;
    pthread_mutex_unlock(&f->mu);
    zpi_xfer_stats_get(f->x, &out->xfer);
    zpi_disk_cache_stats_get(f->dc, &out->cache);
}
