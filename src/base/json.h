/*
 * json.h - the record parser (private). A thin C face over simdjson's DOM
 * parser: it validates a whole record (JSON syntax and UTF-8) at several
 * GB/s and hands back string fields without copying when it can.
 *
 * One zpi_json per worker thread; not thread-safe.
 */
#ifndef ZP_JSON_H
#define ZP_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "zephon/common.h"
#include "base/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes that must be readable (any value) after the end of a record given
 * to zpi_json_parse(): simdjson reads ahead in 64-byte blocks. */
#define ZPI_JSON_PADDING 64

typedef struct zpi_json zpi_json;

zp_status zpi_json_create(zpi_json **out);
void zpi_json_destroy(zpi_json *j);

/* Parse one record (buf[0..len), with ZPI_JSON_PADDING readable bytes
 * after it). It must be a JSON object. On error returns ZP_ERR_FORMAT and
 * writes the cause ("invalid UTF-8", "not an object", "unclosed string",
 * ...) into err (may be NULL). The parsed document stays valid until the
 * next parse. */
zp_status zpi_json_parse(zpi_json *j, const char *buf, size_t len, zpi_err *err);

/* After a successful parse: look up a top-level string field.
 * Returns ZP_OK and sets *s and *n (borrowed, valid until the next parse; the
 * string is unescaped and may contain NUL), ZP_END when the key is absent,
 * ZP_ERR_FORMAT when present but not a string. */
zp_status zpi_json_get_string(zpi_json *j, const char *key, const char **s, size_t *n);

/* After a successful parse: a top-level field that is an array of token
 * ids (integers 0..INT32_MAX; a pre-tokenized document such as a Parquet
 * list<int> column input_ids). room(ctx, count) gives space for the
 * array's count ids (NULL: out of memory); they are written there and *n
 * set. ZP_OK; ZP_END when the key is absent; ZP_ERR_UNSUPPORTED when the
 * field is not an array (a text, say); ZP_ERR_FORMAT when element
 * *bad_at is not such an integer; ZP_ERR_NOMEM. */
zp_status zpi_json_get_ids(zpi_json *j, const char *key, int32_t *(*room)(void *ctx, size_t n),
                           void *ctx, size_t *n, size_t *bad_at);

#ifdef __cplusplus
}
#endif
#endif
