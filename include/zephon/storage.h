/*
 * zephon/storage.h - where shards live: local files, http(s):// and s3://
 * URLs, and the shard cache on local disk that remote shards are downloaded
 * into (docs/storage.md).
 *
 * The settings are part of zp_dataset_config (its `storage` field): the
 * dataset reads remote manifests and sizes with them, and every pipeline
 * built on the dataset downloads its shards with them.
 */
#ifndef ZEPHON_STORAGE_H
#define ZEPHON_STORAGE_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A source of shards other than storage: another node of the job (the MPI
 * layer implements it, docs/storage.md "Shards from other nodes"). The
 * pipeline's fetcher asks it before it downloads a remote shard and, when
 * it declines or fails, downloads from storage as without it. The core
 * never calls MPI: these function pointers are the whole interface.
 *
 *  - request(): asked for shard `shard` (index in the dataset, `bytes`
 *    long) on behalf of fetcher `ctx`; returns 0 when it took the request:
 *    it then writes the shard's bytes into fd (pwrite at [0, bytes)) and
 *    calls done(done_user, ok) exactly once, from any thread but never from
 *    inside request(); ok = 1 when fd holds the shard. Nonzero: declined
 *    (this node fetches it from storage): done is never called. Must not
 *    block.
 *  - attach()/detach(): the fetcher `ctx` starts / stops. While attached,
 *    the source may call serve(ctx, shard, buf, bytes, use) from its own
 *    thread to get a shard for another node: serve puts the shard in this
 *    node's cache (downloading it when needed) and copies its bytes into
 *    buf; 0 on success. use (or NULL) names the read it is for: the asking
 *    rank and the epoch and position of its stream at which it reads the
 *    shard, for the trace of downloads (docs/storage.md, "Tracing
 *    downloads"). detach() returns once no serve() runs for ctx any more and
 *    done() was called for each of ctx's requests (with ok = 0 for those in
 *    flight); nothing is called for ctx after it.
 *  - position() (optional): fetcher ctx's consumer is at (epoch,
 *    position) of its rank's stream. next_use() (optional): the next use
 *    of shard by the other ranks the source speaks for (the node's, and
 *    other nodes' readers of the shards this node serves), in samples
 *    ahead of that position, UINT64_MAX when none is known: the cache's
 *    eviction keeps a shard until its last user in the node (and the
 *    nodes it serves) is done with it. Called under the cache's lock:
 *    quick, and never calling the fetcher.
 * request, attach and detach are set together (or none: no source). */
typedef struct zp_peer_use {
    int rank;          /* the asking rank, -1 unknown */
    uint32_t epoch;    /* UINT32_MAX unknown */
    uint64_t position; /* in the asking rank's stream of that epoch */
} zp_peer_use;
typedef int (*zp_peer_serve_fn)(void *ctx, size_t shard, void *buf, uint64_t bytes,
                                const zp_peer_use *use);
typedef struct zp_peer_source {
    int (*request)(void *user, void *ctx, size_t shard, uint64_t bytes, int fd,
                   void (*done)(void *done_user, int ok), void *done_user);
    void (*attach)(void *user, void *ctx, zp_peer_serve_fn serve);
    void (*detach)(void *user, void *ctx);
    void (*position)(void *user, void *ctx, uint32_t epoch, uint64_t position);
    uint64_t (*next_use)(void *user, size_t shard);
    void *user;
} zp_peer_source;

typedef struct zp_storage_config {
    /* Folder of the shard cache on local disk (created 0700 when missing;
     * the string is copied). NULL or "": $SLURM_TMPDIR/zephon-cache-<uid>,
     * else $TMPDIR/zephon-cache-<uid>, else /tmp/zephon-cache-<uid> (uid:
     * the effective user id). A folder that another user owns, or that its
     * group or others can write, is refused (ZP_ERR_INVALID). The processes
     * of a job on one node share it: each shard is downloaded once per node. */
    const char *cache_dir;
    /* Bytes of shards the cache may hold (complete files and downloads in
     * progress). Default 16 GiB. Too small for what the pipeline needs in
     * flight is a ZP_ERR_INVALID at pipeline start. */
    uint64_t cache_limit_bytes;
    /* Seconds to establish a connection (TCP and TLS). Default 10. */
    double connect_timeout_s;
    /* A transfer slower than low_speed_bytes per second for low_speed_time_s
     * seconds is aborted (and retried). Defaults 1024 B/s, 30 s. */
    uint64_t low_speed_bytes;
    double low_speed_time_s;
    /* Retries of a failed transfer (timeouts, connection errors, HTTP 408,
     * 429 and 5xx; never other 4xx). Default 5. */
    unsigned retries;
    /* Backoff before retry k (k = 1, 2, ...): min(retry_max_s, retry_base_s
     * * 2^(k-1)) with full jitter, or the server's Retry-After when it sends
     * one (capped at retry_max_s). Defaults 0.25 s and 20 s. */
    double retry_base_s;
    double retry_max_s;
    /* 1: do not verify TLS certificates (warned on every run). Default 0. */
    int insecure_tls;
    /* CA bundle file for TLS (copied). NULL: the system's. */
    const char *ca_file;
    /* S3: endpoint URL (copied; NULL: $AWS_ENDPOINT_URL, else
     * https://s3.<region>.amazonaws.com) and region (NULL: $AWS_REGION, else
     * $AWS_DEFAULT_REGION, else us-east-1). Credentials come from
     * $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY and $AWS_SESSION_TOKEN. */
    const char *s3_endpoint;
    const char *s3_region;
    /* Seconds a download's lock in the shared cache lives without renewal;
     * a lock older than that (or whose process is gone) is taken over.
     * Default 30. */
    double lease_s;
    /* Eviction order of the shard cache: 0 (default) Belady's rule, by
     * each shard's next use in this rank's known order (LRU among shards
     * whose next use is unknown); 1 LRU only (the usual cache, kept for
     * comparison: bench/remote). */
    int cache_lru;
    /* Asked (about every 0.1 s, from the library's threads) while transfers
     * run or a fetch waits for a download: when it returns nonzero, running
     * and queued transfers end with ZP_ERR_STATE ("stopped"), so that a
     * consumer blocked in zp_pipeline_next() gets an error back at once
     * instead of waiting for a slow server (zephon run: SIGINT/SIGTERM).
     * Must be thread-safe and must not block. NULL (default): never. */
    int (*stop_requested)(void *user);
    void *stop_user;
    /* Shards from other nodes (above): borrowed, outlives every pipeline
     * built with these settings. NULL (default): every remote shard comes
     * from storage. The MPI layer sets it (zp_mpi_dataset_create). */
    const zp_peer_source *peer;
} zp_storage_config;

/* Fill cfg with the defaults above. */
ZP_API void zp_storage_config_init(zp_storage_config *cfg);

/* The shard cache folder cfg names (its cache_dir, else the default above)
 * into buf (cap bytes, NUL-terminated, cut when longer). cfg NULL: the
 * default. */
ZP_API void zp_storage_cache_dir(const zp_storage_config *cfg, char *buf, size_t cap);

/* 1 when spec names a remote object (http://, https://, s3://), else 0. */
ZP_API int zp_storage_is_url(const char *spec);

#ifdef __cplusplus
}
#endif
#endif
