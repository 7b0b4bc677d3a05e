/*
 * disk_cache.h - the shard cache on local disk: downloaded remote shards,
 * shared by the processes of a job on one node (private).
 *
 * A folder of complete files named by key, plus per download a lock file
 * and a temporary file. Everything is coordinated through the file system,
 * so the ranks of a job on one node (any processes) share it without MPI.
 * The cache's names carry a suffix, so that its folder may be one a user
 * keeps other files in (e.g. $TMPDIR): "<key>.zdc" (complete),
 * "<key>.zdc.lock" (download lock), "<key>.zdc.part.<nonce, 16 hex>"
 * (temporary file), ".zephon-cache.lock" (folder lock). Below, "<key>"
 * stands for "<key>.zdc". Nothing else in the folder is read or deleted.
 *
 *  - Metadata decisions (who downloads, what is evicted, the byte count)
 *    are made under an exclusive flock() of "<dir>/.zephon-cache.lock" (and
 *    a mutex of the cache object), held for microseconds (a folder listing
 *    when a download starts); the kernel releases it when a process dies.
 *  - A download is owned through "<key>.lock", which names its owner (host,
 *    pid, a nonce) and the bytes reserved (one line: "zdc1 <host>/<pid
 *    namespace> <pid> <nonce hex> <bytes>"), and carries a lease: the owner
 *    renews it (its mtime) while it writes. A lock whose lease ran out, or
 *    whose owner is a process of this host that no longer exists, is taken
 *    over. Nobody waits forever.
 *  - Data is written to "<key>.part.<nonce>" and renamed to "<key>" only
 *    when the caller has checked it (size, hash) and commits: after a crash
 *    the cache never serves a partial file; temporary files whose lock is
 *    dead are deleted when a cache is created and when room is made.
 *  - A reader pins a complete file (a shared flock() on it, plus a count in
 *    the process, for file systems that emulate flock() with POSIX locks,
 *    which do not conflict inside one process); eviction takes an exclusive
 *    non-blocking flock() first, so a file in use is never evicted under its
 *    reader, in any process. A READY acquire sets the file's mtime: its
 *    last use, for LRU.
 *  - The limit counts complete files plus the bytes reserved by live
 *    downloads. Room is made by evicting unpinned files: the one whose next
 *    use (next_use callback, this process's known order) is farthest first,
 *    files with no known next use before any other, least recently used
 *    first among those (Belady's rule; LRU only where the order is unknown).
 *    A prefetch never evicts a file needed sooner than the one it fetches,
 *    nor as soon (one of unknown next use evicts only files of unknown next
 *    use): ZPI_DC_NOROOM instead, and then it evicts nothing. A demand
 *    acquire that cannot make room (everything left is in use) evicts all
 *    it can and goes over the limit by its one object rather than wait: the
 *    documented in-flight allowance, at most the files in use plus the
 *    objects being demanded at once (stats.over_limit_bytes records it).
 *  - Source files (local shards) never enter the cache; it deletes only
 *    files it wrote.
 *
 * Thread safety: all calls from any thread.
 */
#ifndef ZP_DISK_CACHE_H
#define ZP_DISK_CACHE_H

#include <stdint.h>

#include "base/error.h"
#include "zephon/common.h"

typedef struct zpi_disk_cache zpi_disk_cache;

/* Next use of the object `key` in this process's order (smaller = sooner),
 * UINT64_MAX when unknown. Called with the cache's locks held: must not call
 * into the cache. */
typedef uint64_t (*zpi_next_use_fn)(void *user, const char *key);

typedef struct zpi_disk_cache_config {
    const char *dir;          /* created when missing (copied) */
    uint64_t limit_bytes;
    double lease_s;           /* > 0 */
    zpi_next_use_fn next_use; /* optional: without it every file is "unknown" (LRU) */
    void *next_use_user;
    zp_log_fn log;            /* optional, borrowed */
    void *log_user;
} zpi_disk_cache_config;

typedef enum zpi_dc_state {
    ZPI_DC_READY = 0,    /* e->path is the complete file, pinned: zpi_dc_release() when done */
    ZPI_DC_DOWNLOAD = 1, /* this caller owns the download: write e->fd, then commit or abort */
    ZPI_DC_BUSY = 2,     /* another caller (thread or process) downloads it under a live lease */
    ZPI_DC_NOROOM = 3    /* prefetch only: no room without evicting something needed sooner */
} zpi_dc_state;

/* One acquired object. Filled by zpi_dc_acquire; the caller keeps it until
 * release/commit/abort. Fields other than path and fd are the cache's. */
typedef struct zpi_dc_entry {
    char key[200];
    char path[4096];  /* READY: the complete file; DOWNLOAD: the temporary file */
    int fd;           /* DOWNLOAD: the temporary file, open for writing; READY: the pin (-1 else) */
    uint64_t size;
    uint64_t nonce;
    int state;        /* zpi_dc_state */
} zpi_dc_entry;

typedef struct zpi_disk_cache_stats {
    uint64_t hits, misses;        /* acquires that found the file / had to download or wait */
    uint64_t evictions;           /* files this process evicted */
    uint64_t takeovers;           /* locks taken over (lease expired or owner gone) */
    uint64_t stale_cleaned;       /* temporary files of dead downloads deleted */
    uint64_t bytes_in_cache;      /* at the last scan: complete files + live reservations */
    uint64_t over_limit_bytes;    /* the most the cache went over its limit (demand allowance) */
} zpi_disk_cache_stats;

zp_status zpi_disk_cache_create(const zpi_disk_cache_config *cfg, zpi_disk_cache **out,
                                zpi_err *err);
void zpi_disk_cache_destroy(zpi_disk_cache *c);
const char *zpi_disk_cache_dir(const zpi_disk_cache *c);

/* key: [A-Za-z0-9._-]{1,150}, chosen by the caller (unique per object).
 * size: the object's size in bytes (what is reserved against the limit; a
 * complete file of another size is stale: deleted, then downloaded again).
 * demand: 1 when the caller needs it now (may go over the limit), 0 for a
 * prefetch. *state says what the caller got (see zpi_dc_state); e is
 * filled for READY and DOWNLOAD. Errors: ZP_ERR_IO naming the file and the
 * cause. */
zp_status zpi_dc_acquire(zpi_disk_cache *c, const char *key, uint64_t size, int demand,
                         zpi_dc_entry *e, zpi_dc_state *state, zpi_err *err);
/* DOWNLOAD: renew the lease (call at least every lease_s / 3 while the
 * download runs). ZP_ERR_STATE when the lease was lost (taken over): abort. */
zp_status zpi_dc_renew(zpi_disk_cache *c, zpi_dc_entry *e, zpi_err *err);
/* DOWNLOAD, the temporary file complete and checked: rename it into place
 * (closing e->fd), drop the lock; e becomes READY (pinned) on ZP_OK. The
 * file is flushed (fdatasync) first. ZP_ERR_IO when it does not hold
 * exactly the acquired size, ZP_ERR_STATE when the lease was taken over:
 * in both cases the temporary file is deleted and e is done with. */
zp_status zpi_dc_commit(zpi_disk_cache *c, zpi_dc_entry *e, zpi_err *err);
/* DOWNLOAD failed: delete the temporary file, drop the lock. */
void zpi_dc_abort(zpi_disk_cache *c, zpi_dc_entry *e);
/* READY: unpin. */
void zpi_dc_release(zpi_disk_cache *c, zpi_dc_entry *e);
/* READY, found corrupt by its reader (wrong hash): unpin and delete it, so
 * that the next acquire downloads it again. */
void zpi_dc_invalidate(zpi_disk_cache *c, zpi_dc_entry *e);
/* Wait (poll, at most timeout_s) until key is no longer BUSY; returns at
 * once when it is not. */
void zpi_dc_wait(zpi_disk_cache *c, const char *key, double timeout_s);
void zpi_disk_cache_stats_get(zpi_disk_cache *c, zpi_disk_cache_stats *out);

#endif
