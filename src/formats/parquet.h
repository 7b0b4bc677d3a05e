/*
 * parquet.h - the Parquet reader (private): .parquet shards read on
 * demand, each row delivered as one compact JSON object line, so that the
 * rest of Zephon treats a row as a JSON-lines record (docs/formats.md,
 * "Parquet", lists what is supported and what is refused).
 *
 * The open reads the footer only (a stat and two preads); rows are then
 * read a row group at a time: a read opens the row groups its range
 * overlaps (their column chunks' stored bytes) and decodes their pages up to
 * its last row, and keeps the last row group for the next read (so
 * consecutive segments of one row group decode each page once, and the
 * first segment does not pay for the whole row group). A row group's
 * column chunks are mapped (mmap), not copied, and unmapped once decoded
 * (or when the row group is dropped); a failed mapping falls back to
 * pread. As for every mapped shard (Megatron's), the file must not be
 * truncated while it is read: a mapped page past its end faults (SIGBUS).
 * Memory: the footer, the open row group's levels and value references,
 * and the decompressed pages of string columns from the first row not yet
 * read on (a page read past goes back to a pool of PQ_POOL spare buffers
 * that the next pages reuse; a read that goes back before a released page
 * decodes the row group again).
 *
 * A zpi_pq_file is used by one thread at a time (not thread-safe); several
 * files may be used by several threads. Errors name the shard and, where
 * they apply, the column, the row group, and the byte offset in the file.
 */
#ifndef ZP_PARQUET_H
#define ZP_PARQUET_H

#include <stddef.h>
#include <stdint.h>

#include "formats/shard.h" /* zpi_shard, zpi_load_bufs, ZPI_JSON_PADDING (base/json.h) */

typedef struct zpi_pq_file zpi_pq_file;

/* Open: stat + pread of the footer only; parses the footer and checks the
 * schema (every top-level column supported, else ZP_ERR_FORMAT naming the
 * shard, the column and what is unsupported; an unsupported codec names
 * the row group too). name: the shard's name for messages (copied).
 * ZP_ERR_IO when the file cannot be opened or read; ZP_ERR_FORMAT for a file
 * that is not Parquet, is truncated, or has a corrupt footer. *out: caller
 * owns; release with zpi_pq_close. NULL on failure. */
zp_status zpi_pq_open(const char *path, const char *name, zpi_pq_file **out, zpi_err *err);
uint64_t zpi_pq_num_rows(const zpi_pq_file *f); /* from the footer */
size_t zpi_pq_num_row_groups(const zpi_pq_file *f);
uint64_t zpi_pq_row_group_rows(const zpi_pq_file *f, size_t g); /* 0 for g out of range */
uint64_t zpi_pq_file_size(const zpi_pq_file *f);

/* The row count from a file's last bytes (tail: the last tail_len bytes of
 * a file of file_size bytes), for counting rows from a footer fetched with
 * a range request. ZP_OK with *rows; ZP_END with *need set when tail_len is
 * too short (need = bytes of tail required: the footer, its length and the
 * magic); ZP_ERR_FORMAT for a tail that is not a Parquet footer (naming
 * the shard). Only the footer is checked, not the schema. */
zp_status zpi_pq_footer_rows(const void *tail, size_t tail_len, uint64_t file_size,
                             const char *name, uint64_t *rows, size_t *need, zpi_err *err);

/* Rows [first, first+n) as JSON lines into *out (caller owns; release with
 * zpi_shard_free): data = n lines each ending '\n', offsets[n+1],
 * n_records = n, first_record = first, data padded with ZPI_JSON_PADDING
 * zero bytes, file_bytes = stored bytes read by this call, read_seconds
 * (preads) and decompress_seconds (page decompression) timed. bufs: a spare
 * data buffer the read takes (bufs->data set to NULL), may be NULL.
 * A range past the end is ZP_ERR_INVALID; n = 0 gives an empty shard.
 * On error *out is left empty (all zero). Not thread-safe. */
zp_status zpi_pq_read_rows(zpi_pq_file *f, uint64_t first, uint64_t n, zpi_load_bufs *bufs,
                           zpi_shard *out, zpi_err *err);
void zpi_pq_close(zpi_pq_file *f); /* accepts NULL */

#endif
