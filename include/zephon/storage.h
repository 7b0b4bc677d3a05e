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
} zp_storage_config;

/* Fill cfg with the defaults above. */
ZP_API void zp_storage_config_init(zp_storage_config *cfg);

/* 1 when spec names a remote object (http://, https://, s3://), else 0. */
ZP_API int zp_storage_is_url(const char *spec);

#ifdef __cplusplus
}
#endif
#endif
