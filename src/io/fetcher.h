/*
 * fetcher.h - remote shards made local files for one user of a dataset (a
 * pipeline, or the dataset's own indexing): a table of the shards (what the
 * fetcher needs of each: its path or URL, name, size, hash), the storage
 * settings, one transfer engine (xfer.h: one libcurl multi handle and its
 * I/O thread), the shard cache on disk (disk_cache.h) and, from the caller,
 * a next-use callback for Belady eviction (private). The fetcher knows
 * shards, not plans: the order comes from above through the callback.
 *
 * acquire() gives a local path for a shard: a local shard's own path, or a
 * remote shard's file in the disk cache, downloading it first when needed
 * (demanded: ahead of every prefetch) and pinning it until release().
 * prefetch() starts a shard's download without waiting: at most
 * 2 x `parallelism` prefetch downloads are handed to the transfers at once
 * (`parallelism` of them run); the others wait in call order, holding no
 * cache entry, and start as those end. A download whose bytes do not match the shard's
 * size or manifest hash is fetched again (ZPI_FETCH_REFETCHES times) before
 * its error is returned. The processes of a node share the cache folder: a
 * shard downloaded by one of them is a hit for the others.
 *
 * Thread safety: every call from any thread, except create/destroy.
 */
#ifndef ZP_FETCHER_H
#define ZP_FETCHER_H

#include <stdint.h>

#include "base/error.h"
#include "io/disk_cache.h"
#include "io/storage.h"
#include "io/xfer.h"

#define ZPI_FETCH_REFETCHES 2
/* A download whose lock's lease was taken over by another process (this
 * one was paused longer than the lease) is not an error: acquire waits for
 * the other process's download instead, this many times before failing. */
#define ZPI_FETCH_LEASE_RETRIES 3

typedef struct zpi_fetcher zpi_fetcher;

/* What the fetcher needs of a shard. */
typedef struct zpi_fetch_shard {
    const char *spec;   /* its path or URL: a URL is remote */
    const char *name;   /* its name in messages */
    uint64_t bytes;     /* its size (UINT64_MAX: unknown) */
    int has_xxh64;      /* a manifest gave its content hash */
    uint64_t xxh64;
} zpi_fetch_shard;

/* The next use of shard i in this process's order (any position that grows
 * along the order), or UINT64_MAX when unknown. Called under the disk
 * cache's lock: quick, and never calling the fetcher. */
typedef uint64_t (*zpi_fetch_next_use_fn)(void *user, size_t shard);
/* A position g of that order as the epoch and position of this rank's
 * stream; 0 when unknown. */
typedef int (*zpi_fetch_locate_fn)(void *user, uint64_t g, uint32_t *epoch, uint64_t *position);

typedef struct zpi_fetcher_config {
    zpi_storage *storage;          /* borrowed: outlives the fetcher */
    const zpi_fetch_shard *shards; /* copied (strings too) */
    size_t n_shards;
    unsigned parallelism;  /* concurrent prefetch downloads (>= 1) */
    unsigned demand_slots; /* extra downloads for shards a fetch waits on (>= 1) */
    /* The known order (optional): decides eviction (Belady) unless the
     * storage settings ask for LRU. */
    zpi_fetch_next_use_fn next_use;
    void *next_use_user;
    /* (optional, with next_use; its user is next_use_user) the trace of
     * downloads names the read a download is for with it. */
    zpi_fetch_locate_fn locate;
    zp_log_fn log;         /* optional: the cache's warnings */
    void *log_user;
    /* 1: ask the storage settings' peer source (zp_storage_config.peer)
     * before each download, and serve it shards (the pipeline's fetcher);
     * 0: storage only (the dataset's own fetcher, for indexing). */
    int use_peer;
} zpi_fetcher_config;

typedef struct zpi_fetch_pin {
    const char *path;  /* the file to read (borrowed until release) */
    int remote;        /* 0: the shard's own path, nothing pinned */
    zpi_dc_entry e;    /* remote: the pinned cache file */
} zpi_fetch_pin;

typedef struct zpi_fetcher_stats {
    zpi_xfer_stats xfer;
    zpi_disk_cache_stats cache;
    uint64_t wait_ns;        /* acquirers waiting on downloads (their own or in flight) */
    uint64_t prefetches;     /* downloads started by prefetch() */
    uint64_t demands;        /* downloads started by acquire() */
    uint64_t refetches;      /* downloads repeated after a size or hash mismatch */
    uint64_t noroom;         /* prefetches skipped: no room without evicting sooner needs */
    uint64_t hits, misses;   /* acquires of remote shards: in the cache / not (downloaded or
                                waited for) */
    /* the peer source (another node): shards received from it, their bytes
     * and time (request to the file checked); requests it failed (timeout,
     * refused, bad bytes: downloaded from storage then); shards served to
     * it and their bytes */
    uint64_t peer_shards, peer_bytes, peer_ns, peer_fallbacks;
    uint64_t peer_served, peer_served_bytes;
} zpi_fetcher_stats;

/* 1 when shard i is remote (f's table, O(1); 0 for f NULL). */
int zpi_fetcher_is_remote(const zpi_fetcher *f, size_t i);

/* Creates the disk cache folder when missing. */
zp_status zpi_fetcher_create(const zpi_fetcher_config *cfg, zpi_fetcher **out, zpi_err *err);
void zpi_fetcher_destroy(zpi_fetcher *f);
/* Wake every waiter with ZP_ERR_STATE ("stopped") and refuse new waits:
 * before the users of a fetcher are joined. */
void zpi_fetcher_cancel(zpi_fetcher *f);

/* The cache limit against what a pipeline with fetch_parallelism fetch
 * tasks needs in flight: one shard per fetch task plus one download ahead,
 * each as large as the largest remote shard. ZP_ERR_INVALID naming the
 * setting, what it needs and why, when it is smaller. */
zp_status zpi_fetcher_check_limit(const zpi_fetcher *f, size_t fetch_parallelism, zpi_err *err);
/* How many remote shards of the average size the cache limit holds (at
 * least 1), and in *all whether it holds every remote shard. */
uint64_t zpi_fetcher_limit_shards(const zpi_fetcher *f, int *all);

zp_status zpi_fetcher_acquire(zpi_fetcher *f, size_t shard, zpi_fetch_pin *pin, zpi_err *err);
/* corrupt: the reader found the file bad (a format error on a shard with a
 * manifest hash). The file's XXH64 is checked first: it is deleted from the
 * cache (and 1 returned: fetch it again) only when its bytes differ from
 * the manifest's hash; a file that matches was downloaded right and its
 * error is the shard's own (e.g. a stale record count): kept, 0. */
int zpi_fetcher_release(zpi_fetcher *f, zpi_fetch_pin *pin, int corrupt);
void zpi_fetcher_prefetch(zpi_fetcher *f, size_t shard);
/* The consumer's position: (epoch, position) of this rank's stream, and
 * the same as the next-use callback's global position g. Passed on to the
 * peer source (its next uses are counted from it). */
void zpi_fetcher_set_position(zpi_fetcher *f, uint32_t epoch, uint64_t position, uint64_t g);
void zpi_fetcher_stats_get(zpi_fetcher *f, zpi_fetcher_stats *out);
const char *zpi_fetcher_cache_dir(const zpi_fetcher *f);

/* The cache folder the settings name (cfg->cache_dir, else $SLURM_TMPDIR,
 * $TMPDIR, /tmp, each + "/zephon-cache-<uid>", the effective uid) into buf. */
void zpi_fetcher_cache_dir_for(const zp_storage_config *cfg, char *buf, size_t cap);

#endif
