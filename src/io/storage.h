/*
 * storage.h - storage backends behind one small ops table (private).
 *
 * A backend serves objects named by a spec: a local path (storage_local.c),
 * an http:// or https:// URL (storage_http.c, libcurl), an s3://bucket/key
 * URL (storage_s3.c: the same transfers, addressed at the endpoint and
 * signed with libcurl's AWS SigV4). Each has three operations: open (learn
 * the object's size and validator), read a byte range, close. Adding a
 * backend is adding a file with one zpi_backend and a line in storage.c.
 *
 * Bulk downloads of remote shards do not use read_range one call at a
 * time: they go through xfer.h (one libcurl multi handle per pipeline),
 * which asks the backend to set up its easy handles (setup_easy). The
 * synchronous operations serve everything else: sizes when a dataset is
 * built, remote manifests, small reads.
 *
 * Secrets: a URL's user:password@ part, its query string (signed URLs) and
 * every header are never written into a message: messages use
 * zpi_url_redact(). Thread safety: a zpi_storage is immutable after create
 * and may be used from any thread; a zpi_object is used by one thread at a
 * time.
 */
#ifndef ZP_STORAGE_H
#define ZP_STORAGE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "zephon/storage.h"

typedef struct zpi_storage zpi_storage;
typedef struct zpi_object zpi_object;

/* What open learned of an object. */
typedef struct zpi_object_info {
    uint64_t size;
    char etag[128];    /* strong validator ("" when none): If-Range on resumed transfers */
    char last_modified[64]; /* Last-Modified ("" when none) */
} zpi_object_info;

typedef struct zpi_backend {
    const char *name;                /* "local", "http", "s3" */
    int (*matches)(const char *spec);
    zp_status (*open)(zpi_storage *s, const char *spec, zpi_object **out, zpi_err *err);
    zp_status (*read_range)(zpi_object *o, uint64_t off, void *buf, size_t len, size_t *got,
                            zpi_err *err);
    void (*close)(zpi_object *o);
    /* Remote backends: configure a libcurl easy handle (void * to keep curl
     * out of this header) for a GET of spec: URL, signing, headers, TLS,
     * timeouts, redirect policy. *headers receives a curl_slist the caller
     * frees after the transfer (may stay NULL). NULL for local. */
    zp_status (*setup_easy)(zpi_storage *s, const char *spec, void *easy, void **headers,
                            zpi_err *err);
} zpi_backend;

/* Settings are copied (strings too); environment variables for S3 are read
 * here, once. log (optional, borrowed) receives warnings, such as the
 * insecure-TLS warning, which create logs when insecure_tls is set. */
zp_status zpi_storage_create(const zp_storage_config *cfg, zp_log_fn log, void *log_user,
                             zpi_storage **out, zpi_err *err);
void zpi_storage_destroy(zpi_storage *s);
const zp_storage_config *zpi_storage_config(const zpi_storage *s);

/* The backend serving spec (local for anything that is not a URL). */
const zpi_backend *zpi_backend_for(const char *spec);

/* Open, read, close through spec's backend. open fills *info when info is
 * not NULL. Errors name the object (redacted) and the cause:
 * "https://host/a.jsonl: HTTP 404 Not Found". 403/404 fail at once; other
 * failures are retried per the settings. */
zp_status zpi_object_open(zpi_storage *s, const char *spec, zpi_object **out,
                          zpi_object_info *info, zpi_err *err);
zp_status zpi_object_read(zpi_object *o, uint64_t off, void *buf, size_t len, size_t *got,
                          zpi_err *err);
const zpi_object_info *zpi_object_info_get(const zpi_object *o);
void zpi_object_close(zpi_object *o);

/* Read a whole object (at most max bytes, else ZP_ERR_LIMIT) into a
 * malloc'd buffer with a NUL after the *len bytes. */
zp_status zpi_object_read_all(zpi_storage *s, const char *spec, size_t max, char **out,
                              size_t *len, zpi_err *err);

/* spec with its secrets removed, for messages: user:password@ dropped, a
 * query string replaced by "?<redacted>". Always NUL-terminated. */
void zpi_url_redact(const char *spec, char *out, size_t cap);
/* The object's identity for caches and for "this object is in the dataset
 * twice": scheme://host[:port]/path for URLs (no credentials, no query,
 * scheme and host lower-cased), s3://bucket/key for S3. Malloc'd. */
char *zpi_url_identity(const char *spec);
/* The last component of spec's path ("b.jsonl" for "s3://a/x/b.jsonl?q"). Malloc'd. */
char *zpi_url_basename(const char *spec);
/* 1 when spec is http://, https:// or s3:// (case-insensitive scheme). */
int zpi_is_url(const char *spec);

/* Internal to the backends (storage.c, storage_*.c and xfer.c). */
extern const zpi_backend zpi_backend_local, zpi_backend_http, zpi_backend_s3;

/* The storage handle: the settings (strings owned) and what create read
 * from the environment for S3 (NULL when unset). Immutable after create. */
struct zpi_storage {
    zp_storage_config cfg;
    char *cache_dir, *ca_file, *s3_endpoint, *s3_region; /* owned copies behind cfg */
    char *s3_key, *s3_secret, *s3_token;                 /* $AWS_* (NULL when unset) */
    zp_log_fn log;
    void *log_user;
};

/* The part every backend's object starts with (a backend allocates its own
 * larger struct with this as its first member). spec is owned. */
struct zpi_object {
    const zpi_backend *be;
    zpi_storage *s;
    char *spec;
    zpi_object_info info;
};

/* The remote backends' open/read/close (storage_http.c), shared by http and
 * s3: open is a HEAD, read a ranged GET (with If-Range), both run through
 * the retries of xfer.c. */
zp_status zpi_remote_open(zpi_storage *s, const char *spec, zpi_object **out, zpi_err *err);
zp_status zpi_remote_read(zpi_object *o, uint64_t off, void *buf, size_t len, size_t *got,
                          zpi_err *err);
void zpi_remote_close(zpi_object *o);
/* The easy-handle settings common to every remote request: URL, TLS
 * (verification, ca_file), connect timeout and low-speed abort, redirects
 * (at most 5, never from https to another protocol), no signals. */
zp_status zpi_http_setup_common(zpi_storage *s, const char *url, void *easy, zpi_err *err);

/* The http(s) URL an s3://bucket/key spec is fetched from (path style):
 * endpoint (without trailing '/') + "/bucket/" + key, the key
 * percent-encoded except for unreserved characters (A-Z a-z 0-9 - . _ ~)
 * and '/'. The spec's key ends at '?' or '#'. Malloc'd; NULL when spec is
 * not s3://bucket/key with a non-empty bucket and key (or out of memory). */
char *zpi_s3_http_url(const char *endpoint, const char *spec);

#endif
