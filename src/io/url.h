/*
 * url.h - URL helpers (private): which specs are URLs, redaction, the
 * canonical identity of an object, the file name, the S3 object's URL.
 * Pure functions, any thread. The lowest part of the io layer.
 */
#ifndef ZP_URL_H
#define ZP_URL_H

#include <stddef.h>

/* 1 when spec is http://, https:// or s3:// (case-insensitive scheme). */
int zpi_is_url(const char *spec);

/* spec with its secrets removed, for messages: user:password@ dropped, a
 * query string replaced by "?<redacted>". Always NUL-terminated. */
void zpi_url_redact(const char *spec, char *out, size_t cap);
/* The object's identity for caches and for "this object is in the dataset
 * twice": scheme://host[:port]/path for URLs (no credentials, no query,
 * scheme and host lower-cased), s3://bucket/key for S3. Malloc'd. */
char *zpi_url_identity(const char *spec);
/* The last component of spec's path ("b.jsonl" for "s3://a/x/b.jsonl?q"). Malloc'd. */
char *zpi_url_basename(const char *spec);

/* The http(s) URL an s3://bucket/key spec is fetched from (path style):
 * endpoint (without trailing '/') + "/bucket/" + key, the key
 * percent-encoded except for unreserved characters (A-Z a-z 0-9 - . _ ~)
 * and '/'. The spec's key ends at '?' or '#'. Malloc'd; NULL when spec is
 * not s3://bucket/key with a non-empty bucket and key (or out of memory). */
char *zpi_s3_http_url(const char *endpoint, const char *spec);

#endif
