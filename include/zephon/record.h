/*
 * zephon/record.h - a record as a map_transform callback sees it, the callback
 * types, and what to do with a bad record (included by zephon/pipeline.h).
 */
#ifndef ZEPHON_RECORD_H
#define ZEPHON_RECORD_H

#include "common.h"
#include "worksource.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A record as seen by a map_transform callback: borrowed, valid only during
 * the callback. */
typedef struct zp_record zp_record;

/* Sample identity of the record. */
ZP_API const zp_sample *zp_record_sample(const zp_record *rec);
/* The record's JSON bytes (not NUL-terminated). Borrowed: valid until the
 * callback returns or the record is changed. */
ZP_API const char *zp_record_json(const zp_record *rec, size_t *len);
/* A top-level string field of the record (unescaped, may contain NUL).
 * Borrowed: valid until the callback returns or the record is changed.
 * ZP_END when absent, ZP_ERR_FORMAT when not a string. */
ZP_API zp_status zp_record_get_string(zp_record *rec, const char *key, const char **s, size_t *len);
/* The text the tokenize operator will encode: the tokenize field, or what
 * zp_record_set_text() stored. */
ZP_API zp_status zp_record_text(zp_record *rec, const char **s, size_t *len);
/* Replace the text handed to tokenize (copied). */
ZP_API zp_status zp_record_set_text(zp_record *rec, const char *s, size_t len);
/* Replace the record's JSON bytes (copied; what record batches carry). */
ZP_API zp_status zp_record_set_json(zp_record *rec, const char *s, size_t len);
/* Drop this record from the stream (counted in zp_pipeline_counts.filtered). */
ZP_API void zp_record_drop(zp_record *rec);
/* A batch map (zp_map_batch_fn) tells the stall watchdog (zephon/watchdog.h)
 * that it now works on rec, so that a stall names this record; optional:
 * without it the watchdog names the chunk's first record. (Per-record maps
 * need not call it.) */
ZP_API void zp_record_begin(zp_record *rec);

/* A map_transform callback. Called concurrently from several threads (as
 * many as the operator's parallelism) on different records; must be
 * deterministic for the pipeline to be. Return ZP_OK, or an error status
 * after zp_record_error() to fail (or skip, with ZP_BAD_RECORD_SKIP) the
 * record. */
typedef zp_status (*zp_map_fn)(void *user, zp_record *rec);
/* A map_transform over several records at once: the live records of one
 * chunk (up to chunk_samples, in stream order), for transforms with a cost
 * per call (a round trip to another process, a call into an interpreter).
 * status[i] is ZP_OK on entry; set it as a zp_map_fn would return for
 * recs[i] (zp_record_error(recs[i], ...) for the message, zp_record_drop()
 * to filter). Return ZP_OK, or an error that fails the whole chunk (not a
 * bad record: never skipped), with its message on recs[0]. Same threading
 * and determinism rules as zp_map_fn. */
typedef zp_status (*zp_map_batch_fn)(void *user, zp_record *const *recs, size_t n,
                                     zp_status *status);
/* Attach a message to a failing record (printf-style). */
ZP_API void zp_record_error(zp_record *rec, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

typedef enum zp_bad_record {
    ZP_BAD_RECORD_FAIL = 0, /* the first bad record ends the stream with its error */
    ZP_BAD_RECORD_SKIP = 1  /* skip it, count it, log it (warning); a run in
                               which every record read was skipped (none
                               delivered) still fails, at the end of the
                               stream or of its first whole epoch, with a
                               message naming the count and the first skip */
} zp_bad_record;

#ifdef __cplusplus
}
#endif
#endif
