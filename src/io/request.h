/*
 * request.h - one request's tries (private): the attempts of one GET or
 * HEAD of a remote object, their retries and backoff, and the Range resume
 * of a body (the `zpi_tx` below, the one copy of that logic). It is driven
 * either synchronously on the caller's thread (zpi_request_head/get, the
 * remote backends' open and read) or by the multi-handle engine of xfer.c
 * (many at once on one I/O thread).
 *
 * A zpi_tx's life: init, then for each attempt prepare (the backend
 * configures the easy handle; Range + If-Range when bytes are already
 * delivered), run it (curl_easy_perform, or a multi handle), and finish
 * (done, failed, or retry after a delay); free. Only a 200 (or the 206 that
 * was asked for) body is delivered: an error page is never data. The size
 * is checked against the expected size and Content-Length / Content-Range,
 * and, when set, the XXH64 of the bytes (seed 0). Messages redact URLs.
 *
 * Thread safety: a zpi_tx is used by one thread at a time.
 */
#ifndef ZP_REQUEST_H
#define ZP_REQUEST_H

#include <curl/curl.h>
#include <stdint.h>
#include <xxhash.h>

#include "base/error.h"
#include "io/backend.h"

/* NONE: a HEAD; FD: a file; MEM: a caller's buffer of want bytes; BUF: the
 * whole body, of unknown size, into a buffer the tx grows (a listing). */
typedef enum { ZPI_SINK_NONE, ZPI_SINK_FD, ZPI_SINK_MEM, ZPI_SINK_BUF } zpi_tx_sink;
/* Why a callback stopped the transfer. */
typedef enum {
    ZPI_FK_NONE, ZPI_FK_STATUS, ZPI_FK_RANGE, ZPI_FK_SIZE, ZPI_FK_IO, ZPI_FK_DONE, ZPI_FK_STOP,
    ZPI_FK_STALE /* the same wrong size announced twice: the object's real size */
} zpi_tx_fault;
typedef enum { ZPI_TX_OK, ZPI_TX_FAIL, ZPI_TX_RETRY } zpi_tx_decision;

typedef struct zpi_tx {
    zpi_storage *s;
    const zpi_backend *be;
    char *spec;
    char label[512];        /* the name in messages (redacted) */
    zpi_tx_sink sink;
    int fd;                 /* ZPI_SINK_FD */
    char *mem;              /* ZPI_SINK_MEM: want bytes; ZPI_SINK_BUF: grown, malloc'd */
    size_t mem_cap;         /* ZPI_SINK_BUF: bytes allocated at mem */
    size_t mem_max;         /* ZPI_SINK_BUF: the most bytes accepted */
    char errbody[1024];     /* ZPI_SINK_BUF: the start of an error answer's body */
    size_t errbody_len;
    uint64_t off;           /* first byte wanted (object offset) */
    uint64_t want;          /* bytes wanted from off; UINT64_MAX: to the end */
    uint64_t written;       /* bytes delivered: [off, off + written) */
    uint64_t expect_size;   /* the object's size (UINT64_MAX when not known) */
    int has_hash;
    uint64_t hash;
    XXH64_state_t *xs;
    char etag[128], lastmod[64]; /* validator for If-Range */
    zpi_object_info *info;  /* HEAD: filled on success */
    unsigned retries;
    uint64_t bytes;         /* body bytes received, all attempts */
    uint64_t rng;
    CURL *easy;
    struct curl_slist *hdrs;
    char errbuf[CURL_ERROR_SIZE];
    /* The attempt. */
    uint64_t req_start;     /* object offset asked for with Range */
    int ranged;
    int decided;            /* the write callback checked the response */
    uint64_t pos;           /* object offset of the next body byte */
    zpi_tx_fault fault;
    char fault_msg[256];
    int os_errno;           /* the errno of a failed write to the file */
    uint64_t size_seen;     /* the last wrong size announced (UINT64_MAX: none) */
    /* The current response's headers. */
    long h_code;
    char h_reason[64];
    uint64_t h_clen;
    int h_crange;
    uint64_t h_cr_start, h_cr_total;
    char h_etag[128], h_lastmod[64];
    /* The outcome. */
    zp_status status;
    zpi_err err;
} zpi_tx;

/* t for one request of spec through backend be (its setup_easy); name
 * (may be NULL) names the object in messages. On failure t->err says why;
 * free t either way. */
zp_status zpi_tx_init(zpi_tx *t, zpi_storage *s, const zpi_backend *be, const char *spec,
                      const char *name);
/* t delivers the whole object into fd (pwrite at [0, size)); expect_size
 * UINT64_MAX when unknown; the XXH64 is checked when has_hash. */
zp_status zpi_tx_set_file(zpi_tx *t, int fd, uint64_t expect_size, int has_hash, uint64_t hash);
void zpi_tx_free(zpi_tx *t);
/* Configure t->easy for the next attempt (its CURLOPT_PRIVATE is t). */
zp_status zpi_tx_prepare(zpi_tx *t);
/* After an attempt ended with cc: done, failed (t->status, t->err) or retry
 * after *delay_s. */
zpi_tx_decision zpi_tx_finish(zpi_tx *t, CURLcode cc, double *delay_s);
/* The settings' stop_requested hook: 1 when the caller asks every transfer
 * to end now. */
int zpi_tx_stop_requested(const zpi_storage *s);

/* Synchronous requests for the remote backends (storage_http.c), run by the
 * same attempt/retry/resume code, on the calling thread (the backoff sleeps
 * there, in slices that a stop request ends). be is the backend (its
 * setup_easy configures each attempt). *retries (may be NULL) receives the
 * retries needed.
 * head: the object's size (Content-Length of a 200), ETag (strong only) and
 * Last-Modified; a server refusing HEAD (403, 405) is asked for the first
 * byte with a GET instead.
 * get: the bytes [off, off + len) into buf (*got: fewer only at the end of
 * the object); v (may be NULL) gives the object's size and validator (for
 * If-Range) from head. */
zp_status zpi_request_head(zpi_storage *s, const zpi_backend *be, const char *spec,
                           zpi_object_info *info, unsigned *retries, zpi_err *err);
zp_status zpi_request_get(zpi_storage *s, const zpi_backend *be, const char *spec,
                          const zpi_object_info *v, uint64_t off, void *buf, size_t len,
                          size_t *got, unsigned *retries, zpi_err *err);

/* get_all: the whole body of a GET of spec (no Range; each retry starts
 * again at byte 0) into *out (malloc'd, NUL-terminated; caller frees),
 * *len its bytes; more than max bytes fails (ZP_ERR_IO). label (may be NULL)
 * names the request in messages instead of the redacted URL. On an HTTP
 * error the start of the answer's body (an S3 error document) is copied
 * into errbody (NUL-terminated, may be NULL) and *code (may be NULL) is the
 * status; the message is in err. */
zp_status zpi_request_get_all(zpi_storage *s, const zpi_backend *be, const char *spec,
                              const char *label, size_t max, char **out, size_t *len,
                              char *errbody, size_t errcap, long *code, zpi_err *err);

#endif
