/*
 * backend.h - what a storage backend is (private): the ops table, the
 * storage handle's fields and the object every backend's object starts
 * with. Types only: the backends (storage_local.c, storage_http.c,
 * storage_s3.c) include this, never storage.h, so that calls run one way:
 * storage.c (the registry) -> the backends -> request.c (one request's
 * tries) -> url.c.
 *
 * Adding a backend is adding a file with one zpi_backend and a line in
 * storage.c's registry.
 */
#ifndef ZP_BACKEND_H
#define ZP_BACKEND_H

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

/* One object of a listing: its key (the name after the bucket) and size.
 * Returns ZP_OK to go on, else an error (set in err) that ends the listing. */
typedef zp_status (*zpi_list_fn)(void *user, const char *key, uint64_t size, zpi_err *err);

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
    /* Backends that can list (s3): every object whose name starts with
     * spec's prefix ("s3://bucket/prefix", "s3://bucket/" for all), in
     * the server's order (bytewise for S3), each given to fn with its size.
     * fn's error ends the listing and is returned. NULL: cannot list. */
    zp_status (*list)(zpi_storage *s, const char *spec, zpi_list_fn fn, void *user,
                      zpi_err *err);
} zpi_backend;

/* The backends (storage_local.c, storage_http.c, storage_s3.c). */
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
 * the retries of request.c. be is the calling backend (the object's). */
zp_status zpi_remote_open(const zpi_backend *be, zpi_storage *s, const char *spec,
                          zpi_object **out, zpi_err *err);
zp_status zpi_remote_read(zpi_object *o, uint64_t off, void *buf, size_t len, size_t *got,
                          zpi_err *err);
void zpi_remote_close(zpi_object *o);
/* The easy-handle settings common to every remote request: URL, TLS
 * (verification, ca_file), connect timeout and low-speed abort, redirects
 * (at most 5, never from https to another protocol), no signals. */
zp_status zpi_http_setup_common(zpi_storage *s, const char *url, void *easy, zpi_err *err);

#endif
