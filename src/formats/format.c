/*
 * format.c - the table of shard formats, and the record index shared by the
 * line-based formats (one JSON record per line).
 *
 * Thread safety: the table is immutable; a zpi_line_index belongs to one
 * load (one thread).
 */
#include "formats/format.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

#include "formats/reader.h"
#include "base/util.h"

/* Formats live in their own files; adding one is a line here. */
extern const zpi_format zpi_format_jsonl;
extern const zpi_format zpi_format_jsonl_zst;
extern const zpi_format zpi_format_hdf5;     /* ".h5" */
extern const zpi_format zpi_format_hdf5_alt; /* ".hdf5", the same format */
extern const zpi_format zpi_format_megatron;

static const zpi_format *const formats[] = {
    &zpi_format_jsonl,
    &zpi_format_jsonl_zst,
#ifdef ZP_HAVE_FORMAT_HDF5
    &zpi_format_hdf5,
    &zpi_format_hdf5_alt,
#endif
#ifdef ZP_HAVE_FORMAT_MEGATRON
    &zpi_format_megatron,
#endif
};
#define N_FORMATS (sizeof formats / sizeof formats[0])

const zpi_format *zpi_format_for_path(const char *path)
{
    if (!path)
        return NULL;
    size_t n = strlen(path);
    const zpi_format *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < N_FORMATS; i++) {
        size_t sl = strlen(formats[i]->suffix);
        if (sl <= n && sl > best_len && memcmp(path + n - sl, formats[i]->suffix, sl) == 0) {
            best = formats[i];
            best_len = sl;
        }
    }
    return best;
}

const zpi_format *zpi_format_by_name(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < N_FORMATS; i++)
        if (strcmp(formats[i]->name, name) == 0)
            return formats[i];
    return NULL;
}

void zpi_shard_free(zpi_shard *s)
{
    if (!s)
        return;
    if (s->rd) {
        s->rd->close(s->rd);
        s->rd = NULL;
    }
    free(s->data);
    free(s->offsets);
    s->data = NULL;
    s->offsets = NULL;
    s->data_len = 0;
    s->n_records = 0;
}

/* ------------------------------------------------------------ line index */

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

static zp_status reserve(zpi_line_index *ix, size_t need, char *err, size_t errcap)
{
    if (need <= ix->cap)
        return ZP_OK;
    if (need < 1024)
        need = 1024;
    if (zpi_grow((void **)&ix->offsets, &ix->cap, need, sizeof *ix->offsets) != 0) {
        zpi_fmt(err, errcap, "shard '%s': out of memory indexing %zu records", ix->name, need);
        return ZP_ERR_NOMEM;
    }
    return ZP_OK;
}

static inline int is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* Record the line data[start..end) (end excludes the newline). */
static zp_status add_line(zpi_line_index *ix, const char *data, size_t start, size_t end, char *err,
                          size_t errcap)
{
    size_t len = end - start;
    size_t line = ix->n + 1;
    if (len > ix->lim->max_record_bytes) {
        zpi_fmt(err, errcap,
                "shard '%s': line %zu is longer than max_record_bytes (%zu bytes > %zu) at byte %zu",
                ix->name, line, len, ix->lim->max_record_bytes, start);
        return ZP_ERR_LIMIT;
    }
    /* A record normally starts with '{': the whitespace scan only runs for
     * the rare line that starts with whitespace. */
    size_t p = start;
    while (p < end && is_ws((unsigned char)data[p]))
        p++;
    if (p == end) {
        zpi_fmt(err, errcap, "shard '%s': empty record at line %zu (byte %zu)", ix->name, line,
                start);
        return ZP_ERR_FORMAT;
    }
    zp_status st = reserve(ix, ix->n + 2, err, errcap); /* +1 for the end sentinel */
    if (st != ZP_OK)
        return st;
    ix->offsets[ix->n++] = start;
    return ZP_OK;
}

zp_status zpi_line_index_feed(zpi_line_index *ix, const char *data, size_t len, char *err,
                              size_t errcap)
{
    size_t pos = ix->scanned;
    while (pos < len) {
        const char *nl = memchr(data + pos, '\n', len - pos);
        if (!nl)
            break;
        size_t end = (size_t)(nl - data);
        zp_status st = add_line(ix, data, ix->line_start, end, err, errcap);
        if (st != ZP_OK)
            return st;
        ix->line_start = end + 1;
        pos = end + 1;
    }
    ix->scanned = len;
    /* Fail a runaway line early instead of decoding the rest of it. */
    if (len - ix->line_start > ix->lim->max_record_bytes) {
        zpi_fmt(err, errcap,
                "shard '%s': line %zu is longer than max_record_bytes (more than %zu bytes) at byte %zu",
                ix->name, ix->n + 1, ix->lim->max_record_bytes, ix->line_start);
        return ZP_ERR_LIMIT;
    }
    return ZP_OK;
}

zp_status zpi_line_index_finish(zpi_line_index *ix, const char *data, size_t len, zpi_shard *out,
                                char *err, size_t errcap)
{
    zp_status st = zpi_line_index_feed(ix, data, len, err, errcap);
    if (st != ZP_OK)
        return st;
    uint64_t end = len;
    if (ix->line_start < len) {
        /* A final line without newline is a record; its "newline" is the
         * first padding byte. */
        st = add_line(ix, data, ix->line_start, len, err, errcap);
        if (st != ZP_OK)
            return st;
        ix->line_start = len;
        end = (uint64_t)len + 1;
    }
    if (ix->n == 0 && !ix->lim->allow_empty) {
        zpi_fmt(err, errcap, "shard '%s': no records (empty shard)", ix->name);
        return ZP_ERR_FORMAT;
    }
    st = reserve(ix, ix->n + 1, err, errcap);
    if (st != ZP_OK)
        return st;
    ix->offsets[ix->n] = end;
    out->offsets = ix->offsets;
    out->n_records = ix->n;
    ix->offsets = NULL;
    ix->n = ix->cap = 0;
    return ZP_OK;
}

/* ------------------------------------------------------------ checks */

int zpi_xxh64_fd(int fd, uint64_t *out, uint64_t *err_off)
{
    enum { CHUNK = 1 << 20 };
    char *buf = malloc(CHUNK);
    XXH64_state_t *h = XXH64_createState();
    int rc = 0;
    if (!buf || !h || XXH64_reset(h, 0) != XXH_OK) {
        rc = ENOMEM;
        goto out;
    }
    uint64_t off = 0;
    for (;;) {
        ssize_t r = pread(fd, buf, CHUNK, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = errno;
            if (err_off)
                *err_off = off;
            goto out;
        }
        if (r == 0)
            break;
        XXH64_update(h, buf, (size_t)r);
        off += (uint64_t)r;
    }
    *out = XXH64_digest(h);
out:
    XXH64_freeState(h);
    free(buf);
    return rc;
}

zp_status zpi_load_check(const zpi_load_limits *lim, const char *name, const char *path,
                         const uint64_t *hash, const zpi_shard *sh, char *err, size_t errcap)
{
    if (lim->has_xxh64 && hash && *hash != lim->expect_xxh64) {
        zpi_fmt(err, errcap,
                "shard '%s': content hash mismatch: the manifest says xxh64 %016llx, '%s' has "
                "%016llx (the file changed since it was indexed: re-run zephon index)",
                name, (unsigned long long)lim->expect_xxh64, path, (unsigned long long)*hash);
        return ZP_ERR_FORMAT;
    }
    if (lim->has_records && sh->n_records != lim->expect_records) {
        if (lim->records_from_manifest)
            zpi_fmt(err, errcap,
                    "shard '%s': has %llu records but the manifest says %llu (stale manifest: "
                    "re-run zephon index)",
                    name, (unsigned long long)sh->n_records,
                    (unsigned long long)lim->expect_records);
        else
            zpi_fmt(err, errcap,
                    "shard '%s': has %llu records but had %llu when it was indexed (the file "
                    "changed)",
                    name, (unsigned long long)sh->n_records,
                    (unsigned long long)lim->expect_records);
        return ZP_ERR_FORMAT;
    }
    return ZP_OK;
}
