/*
 * line_index.h - the record index of the line-based formats (one JSON
 * record per line: jsonl, jsonl.zst) (private).
 */
#ifndef ZP_LINE_INDEX_H
#define ZP_LINE_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "formats/shard.h"

/* Builds a shard's record index incrementally while its bytes arrive, so the
 * scan runs on data still in cache. Not thread-safe; one per load. */
typedef struct zpi_line_index {
    const char *name;              /* shard name for messages (borrowed) */
    const zpi_load_limits *lim;    /* borrowed */
    uint64_t *offsets;             /* start of each complete record; owned */
    size_t n, cap;                 /* records indexed so far, capacity of offsets */
    size_t line_start;             /* start of the line not yet terminated */
    size_t scanned;                /* bytes already scanned */
    /* added to the line and byte numbers of messages, for data that does
     * not start at the shard's beginning (0 after init) */
    uint64_t line0, byte0;
} zpi_line_index;

void zpi_line_index_init(zpi_line_index *ix, const char *name, const zpi_load_limits *lim);
/* Index the lines completed in data[0..len) since the last call (data may
 * have moved; only offsets are kept). Checks empty lines and line length. */
zp_status zpi_line_index_feed(zpi_line_index *ix, const char *data, size_t len, zpi_err *err);
/* End of data: index a final line without newline, check for an empty
 * shard, and move the offsets into out (out->n_records, out->offsets). */
zp_status zpi_line_index_finish(zpi_line_index *ix, const char *data, size_t len, zpi_shard *out,
                                zpi_err *err);
void zpi_line_index_free(zpi_line_index *ix);

#endif
