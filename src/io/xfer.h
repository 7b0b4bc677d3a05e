/*
 * xfer.h - downloads of remote objects into files, driven by one libcurl
 * multi handle and one I/O thread per zpi_xfer (private).
 *
 * A pipeline owns one zpi_xfer: no thread per download, no process-wide
 * state (curl_global_init is not called here; libcurl >= 7.84 initialises
 * itself thread-safely). Jobs are queued; at most max_parallel run at once,
 * demand jobs (a fetch waiting on the shard) first and, when every slot is
 * busy with prefetches, in up to max_demand extra slots. Each host's
 * requests are also kept within its window (throttle.h: lowered by 503
 * SlowDown / 429 answers, raised again by the others), shared by the
 * node's processes.
 *
 * Each transfer is one request's tries (request.h): connect timeout and low-speed abort from the settings; on a
 * timeout, a connection error, a short body, HTTP 408/429/5xx: retry after
 * the backoff (Retry-After honoured), resuming at the bytes already written
 * with Range + If-Range (the validator from the first response; a 200 to a
 * ranged request restarts from byte 0); any other status is an error at
 * once. Only a 200 (or the expected 206) body is written: an error page is
 * never taken for data. The size is checked against the expected size and
 * Content-Length / Content-Range, and, when the job has one, the XXH64 of
 * the bytes (seed 0). Messages redact URLs (storage.h).
 *
 * Thread safety: submit/promote/stats from any thread; completion callbacks
 * run on the I/O thread and must not block (signal and return).
 */
#ifndef ZP_XFER_H
#define ZP_XFER_H

#include <stdint.h>

#include "base/error.h"
#include "io/storage.h"
#include "zephon/histogram.h"

typedef struct zpi_xfer zpi_xfer;

typedef struct zpi_xfer_result {
    zp_status status;   /* ZP_OK, ZP_ERR_NETWORK, ZP_ERR_FORMAT (size/hash), ZP_ERR_IO (writing) */
    zpi_err err;        /* the message when status != ZP_OK */
    uint64_t bytes;     /* bytes received over the network, retries included */
    uint64_t size;      /* the object's size (bytes written) on success */
    unsigned retries;   /* retries this job needed */
    uint64_t ns;        /* from the job's start (not its queueing) to its end */
    int os_errno;       /* ZP_ERR_IO: the errno of the failed write (ENOSPC, EDQUOT...), else 0 */
} zpi_xfer_result;

typedef void (*zpi_xfer_done_fn)(void *user, const zpi_xfer_result *r);

typedef struct zpi_xfer_job {
    const char *spec;       /* URL (copied) */
    const char *name;       /* the shard's name for messages (copied; NULL: the redacted URL) */
    int fd;                 /* destination file, written with pwrite at [0, size); borrowed,
                               open until done is called */
    uint64_t expect_size;   /* UINT64_MAX: unknown (then the server's length is trusted) */
    int has_xxh64;
    uint64_t xxh64;
    int demand;             /* 1: someone waits on it (queued first) */
    zpi_xfer_done_fn done;  /* called exactly once, on the I/O thread (or in destroy) */
    void *user;
} zpi_xfer_job;

typedef struct zpi_xfer_stats {
    uint64_t downloads;     /* jobs completed successfully */
    uint64_t failures;      /* jobs failed after their retries */
    uint64_t bytes;         /* bytes received, retries included */
    uint64_t retries;
    uint64_t busy_ns;       /* wall time with at least one transfer running */
    zp_hist latency_ns;     /* per successful job */
} zpi_xfer_stats;

/* s is borrowed (must outlive the zpi_xfer). Starts the I/O thread. */
zp_status zpi_xfer_create(zpi_storage *s, unsigned max_parallel, unsigned max_demand,
                          zpi_xfer **out, zpi_err *err);
/* The same, with the hosts' windows (throttle.h) shared by the node's
 * processes through files in throttle_dir (the shard cache folder; NULL:
 * this process's own windows, as zpi_xfer_create). */
zp_status zpi_xfer_create_shared(zpi_storage *s, unsigned max_parallel, unsigned max_demand,
                                 const char *throttle_dir, zpi_xfer **out, zpi_err *err);
/* Cancels queued and running jobs (their done gets ZP_ERR_STATE "cancelled"),
 * joins the thread. NULL accepted. */
void zpi_xfer_destroy(zpi_xfer *x);
/* Queue a job; *id (may be NULL) identifies it for promote. */
zp_status zpi_xfer_submit(zpi_xfer *x, const zpi_xfer_job *job, uint64_t *id, zpi_err *err);
/* A queued or running job is now demanded (if queued, it moves ahead of every
 * queued prefetch, behind the jobs demanded before it). */
void zpi_xfer_promote(zpi_xfer *x, uint64_t id);
void zpi_xfer_stats_get(zpi_xfer *x, zpi_xfer_stats *out);

#endif
