/*
 * format_parquet.c - .parquet shards in the format table (docs/formats.md,
 * "Parquet").
 *
 * The reader (parquet.h) turns rows into JSON lines, so a Parquet shard's
 * records are JSON objects like a .jsonl shard's: the tokenize field, the
 * record mode's bytes and map_transform's fields work unchanged. This file
 * gives the format its three entries: a whole-shard load (a shard of one
 * segment), the count from the footer (no row is decoded to index a
 * corpus), and the count from a remote file's last bytes. A shard of
 * several segments is read through segment.h, which opens the same reader.
 */

#include "base/util.h"
#include "formats/parquet.h"
#include "formats/shard.h"

static zp_status pq_load_bufs(const char *path, const char *name, const zpi_load_limits *lim,
                              zpi_load_bufs *bufs, zpi_shard *out, zpi_err *err)
{
    zp_status st = zpi_load_check_size(lim, name, path, err);
    if (st == ZP_OK)
        st = zpi_load_check_file_hash(lim, name, path, err);
    if (st != ZP_OK)
        return st;
    zpi_pq_file *f;
    if ((st = zpi_pq_open(path, name, &f, err)) != ZP_OK)
        return st;
    uint64_t n = zpi_pq_num_rows(f);
    if (lim->has_records && n != lim->expect_records) {
        zpi_pq_close(f);
        /* the count check's message, before anything is decoded */
        zpi_shard empty = {0};
        empty.n_records = n;
        return zpi_load_check(lim, name, path, NULL, &empty, err);
    }
    st = zpi_pq_read_rows(f, 0, n, bufs, out, err);
    uint64_t size = zpi_pq_file_size(f);
    zpi_pq_close(f);
    if (st != ZP_OK)
        return st;
    out->file_bytes = size; /* the shard's stored size (the index compares it) */
    return zpi_load_check(lim, name, path, NULL, out, err);
}

static zp_status pq_load(const char *path, const char *name, const zpi_load_limits *lim,
                         zpi_shard *out, zpi_err *err)
{
    return pq_load_bufs(path, name, lim, NULL, out, err);
}

static zp_status pq_count(const char *path, const char *name, const zpi_load_limits *lim,
                          uint64_t *records, uint64_t *file_bytes, zpi_err *err)
{
    zp_status st = zpi_load_check_size(lim, name, path, err);
    if (st != ZP_OK)
        return st;
    zpi_pq_file *f;
    if ((st = zpi_pq_open(path, name, &f, err)) != ZP_OK)
        return st;
    *records = zpi_pq_num_rows(f);
    *file_bytes = zpi_pq_file_size(f);
    zpi_pq_close(f);
    return ZP_OK;
}

const zpi_format zpi_format_parquet = {.name = "parquet",
                                       .suffix = ".parquet",
                                       .seg = ZPI_FMT_SEG_PARQUET,
                                       .load = pq_load,
                                       .load_bufs = pq_load_bufs,
                                       .count = pq_count,
                                       .count_tail = zpi_pq_footer_rows};
