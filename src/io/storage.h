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
 * This file is the registry: it picks the backend of a spec and runs the
 * generic operations through it. The backends' types are in backend.h
 * (the backends include that, not this), the URL helpers in url.h.
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
#include "io/backend.h"
#include "io/url.h"
#include "zephon/storage.h"

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
/* Every object under spec's prefix ("s3://bucket/prefix"), in the server's
 * order, to fn with its size (backend.h: zpi_list_fn); ZP_ERR_INVALID for
 * storage that cannot list (local paths are listed with readdir/glob by
 * the dataset, http has no listing). */
zp_status zpi_storage_list(zpi_storage *s, const char *spec, zpi_list_fn fn, void *user,
                           zpi_err *err);
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

#endif
