/*
 * line_index.c - the record index of the line-based formats, built while a
 * shard's bytes arrive. Thread safety: one zpi_line_index per load.
 */
#include "formats/line_index.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

void zpi_line_index_init(zpi_line_index *ix, const char *name, const zpi_load_limits *lim)
{
    memset(ix, 0, sizeof *ix);
    ix->name = name;
    ix->lim = lim;
}

void zpi_line_index_free(zpi_line_index *ix)
{
    if (!ix)
        return;
    free(ix->offsets);
    ix->offsets = NULL;
    ix->n = ix->cap = 0;
}

static zp_status reserve(zpi_line_index *ix, size_t need, zpi_err *err)
{
    if (need <= ix->cap)
        return ZP_OK;
    if (need < 1024)
        need = 1024;
    if (zpi_grow((void **)&ix->offsets, &ix->cap, need, sizeof *ix->offsets) != 0) {
        return zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory indexing %zu records",
                           ix->name, need);
    }
    return ZP_OK;
}

static inline int is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* Record the line data[start..end) (end excludes the newline). */
static zp_status add_line(zpi_line_index *ix, const char *data, size_t start, size_t end,
                          zpi_err *err)
{
    size_t len = end - start;
    uint64_t line = ix->line0 + ix->n + 1;
    if (len > ix->lim->max_record_bytes) {
        return zpi_err_set(err, ZP_ERR_LIMIT,
                           "shard '%s': line %llu is longer than max_record_bytes (%zu bytes > "
                           "%zu) at byte %llu", ix->name, (unsigned long long)line, len,
                           ix->lim->max_record_bytes, (unsigned long long)(ix->byte0 + start));
    }
    /* A record normally starts with '{': the whitespace scan only runs for
     * the rare line that starts with whitespace. */
    size_t p = start;
    while (p < end && is_ws((unsigned char)data[p]))
        p++;
    if (p == end) {
        return zpi_err_set(err, ZP_ERR_FORMAT, "shard '%s': empty record at line %llu (byte %llu)",
                           ix->name, (unsigned long long)line,
                           (unsigned long long)(ix->byte0 + start));
    }
    zp_status st = reserve(ix, ix->n + 2, err); /* +1 for the end sentinel */
    if (st != ZP_OK)
        return st;
    ix->offsets[ix->n++] = start;
    return ZP_OK;
}

zp_status zpi_line_index_feed(zpi_line_index *ix, const char *data, size_t len, zpi_err *err)
{
    size_t pos = ix->scanned;
    while (pos < len) {
        const char *nl = memchr(data + pos, '\n', len - pos);
        if (!nl)
            break;
        size_t end = (size_t)(nl - data);
        zp_status st = add_line(ix, data, ix->line_start, end, err);
        if (st != ZP_OK)
            return st;
        ix->line_start = end + 1;
        pos = end + 1;
    }
    ix->scanned = len;
    /* Fail a runaway line early instead of decoding the rest of it. */
    if (len - ix->line_start > ix->lim->max_record_bytes) {
        return zpi_err_set(err, ZP_ERR_LIMIT,
                           "shard '%s': line %llu is longer than max_record_bytes (more than %zu "
                           "bytes) at byte %llu", ix->name,
                           (unsigned long long)(ix->line0 + ix->n + 1), ix->lim->max_record_bytes,
                           (unsigned long long)(ix->byte0 + ix->line_start));
    }
    return ZP_OK;
}

zp_status zpi_line_index_finish(zpi_line_index *ix, const char *data, size_t len, zpi_shard *out,
                                zpi_err *err)
{
    zp_status st = zpi_line_index_feed(ix, data, len, err);
    if (st != ZP_OK)
        return st;
    uint64_t end = len;
    if (ix->line_start < len) {
        /* A final line without newline is a record; its "newline" is the
         * first padding byte. */
        st = add_line(ix, data, ix->line_start, len, err);
        if (st != ZP_OK)
            return st;
        ix->line_start = len;
        end = (uint64_t)len + 1;
    }
    if (ix->n == 0 && !ix->lim->allow_empty) {
        return zpi_err_set(err, ZP_ERR_FORMAT, "shard '%s': no records (empty shard)", ix->name);
    }
    st = reserve(ix, ix->n + 1, err);
    if (st != ZP_OK)
        return st;
    ix->offsets[ix->n] = end;
    out->offsets = ix->offsets;
    out->n_records = ix->n;
    ix->offsets = NULL;
    ix->n = ix->cap = 0;
    return ZP_OK;
}
