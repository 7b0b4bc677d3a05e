/*
 * testutil.h - small helpers shared by the tests: temporary folders and
 * writing plain or zstd-compressed files. They return -1/NULL on failure
 * (they never abort), so any test framework can assert on them.
 *
 * Not thread-safe where noted; everything returned by malloc is the
 * caller's to free().
 */
#ifndef ZP_TESTUTIL_H
#define ZP_TESTUTIL_H

#include <stddef.h>

/* A fresh, empty folder under $TMPDIR (or /tmp). Caller frees the string
 * and removes the folder with zpt_rmtree(). */
char *zpt_tmpdir(void);

/* Remove a folder and everything in it. */
void zpt_rmtree(const char *dir);

/* dir + "/" + name. Caller frees. */
char *zpt_path(const char *dir, const char *name);

/* Write len bytes (or strlen(data) when len == (size_t)-1) to path,
 * replacing it. 0 or -1. */
int zpt_write_file(const char *path, const void *data, size_t len);

/* Compress data into `frames` (>= 1) zstd frames of about equal input size
 * (frame boundaries fall anywhere, also inside a line), with content
 * checksums, at level 3. Caller frees; *out_len gets the size. */
void *zpt_zst_compress(const void *data, size_t len, int frames, size_t *out_len);

/* zpt_zst_compress() written to path. 0 or -1. */
int zpt_write_zst(const char *path, const void *data, size_t len, int frames);

/* Whole file into a malloc'd, NUL-terminated buffer; NULL on error. */
char *zpt_read_file(const char *path, size_t *len);

/* Append len bytes to path. 0 or -1. */
int zpt_append_file(const char *path, const void *data, size_t len);

/* A value from the loopback servers' environment file (tests/net/servers.sh
 * writes it; ctest passes its path in $ZT_NETENV): "ZT_HTTP", "ZT_HTTPS",
 * "ZT_CA", "ZT_ROOT", "ZT_PROXY", "ZT_S3", ... (tests/net/README.md).
 * Caller frees; NULL when the file or the key is missing. */
char *zpt_netenv(const char *key);

#endif
