/*
 * segment.h - a line-based shard (jsonl, jsonl.zst, jsonl.gz) read one segment at a
 * time, and the zstd seekable format (private).
 *
 * A segment is a run of consecutive records of a shard: segment j of a
 * shard of n records cut into segments of `per` records holds records
 * [j*per, min((j+1)*per, n)) (docs/datasets.md, "Segments"). A segment
 * reader loads one segment into a zpi_shard (data + offsets of that
 * segment's records only, first_record set), so that memory follows the
 * segment, not the shard:
 *
 *   - plain .jsonl: the segment's byte range is read with pread;
 *   - seekable .jsonl.zst (independent frames and a seek table in a
 *     skippable frame at the end, the zstd seekable format): only the
 *     frames that hold the segment are decoded, one at a time;
 *   - any other .jsonl.zst (one frame, or frames without a seek table),
 *     and every .jsonl.gz (all its members, gzip_stream.h): the file is
 *     decoded forward by one streaming decoder kept between loads; a
 *     segment before the decoder's position restarts it from the file's
 *     beginning (decoded and discarded: bounded memory, more time).
 *
 * Where a segment starts in the decoded stream is found by counting lines:
 * the reader keeps the start of every segment it has passed, so reading
 * the segments of a shard in ascending order scans each byte once; the
 * first load of a segment j > 0 scans from the nearest known start.
 *
 * Not thread-safe: one thread at a time per reader (the shard cache
 * serializes the loads of one shard).
 */
#ifndef ZP_SEGMENT_H
#define ZP_SEGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "formats/shard.h"

typedef struct zpi_seg_reader zpi_seg_reader;

/* How a reader reads the decoded stream (for docs, stats and tests). */
typedef enum zpi_seg_kind {
    ZPI_SEG_PLAIN = 0,    /* pread of the file */
    ZPI_SEG_SEEKABLE = 1, /* frame by frame through the seek table */
    ZPI_SEG_STREAM = 2,   /* one forward streaming decoder */
    ZPI_SEG_PARQUET = 3   /* a .parquet file's row groups (parquet.h) */
} zpi_seg_kind;

/* How a shard's bytes are stored: zpi_seg_reader_open's `compressed`. */
enum { ZPI_SEG_NONE = 0, ZPI_SEG_ZSTD = 1, ZPI_SEG_GZIP = 2 };

/* Open shard `path` (name: for messages) of n_records records cut into
 * segments of per_segment records. compressed: ZPI_SEG_NONE (.jsonl),
 * ZPI_SEG_ZSTD (.jsonl.zst) or ZPI_SEG_GZIP (.jsonl.gz). A seek table
 * that is present (the file ends with the seekable magic number) but
 * damaged is a ZP_ERR_FORMAT naming the file. OUT: *out, release with
 * zpi_seg_reader_close(). */
zp_status zpi_seg_reader_open(const char *path, const char *name, int compressed,
                              const zpi_load_limits *lim, uint64_t n_records,
                              uint64_t per_segment, zpi_seg_reader **out, zpi_err *err);
/* The buffers a closed reader leaves for the next one to open (its zstd
 * decoder with its window, its read and window buffers): a reader opened
 * with a kit takes what it needs from it, so that a pipeline that opens
 * shard after shard touches no fresh pages. NULL members: none. */
typedef struct zpi_seg_kit {
    struct ZSTD_DCtx_s *dctx;
    char *sbuf, *inb, *win;
} zpi_seg_kit;
/* zpi_seg_reader_open, taking buffers from kit (or NULL). */
zp_status zpi_seg_reader_open_kit(const char *path, const char *name, int compressed,
                                  const zpi_load_limits *lim, uint64_t n_records,
                                  uint64_t per_segment, zpi_seg_kit *kit, zpi_seg_reader **out,
                                  zpi_err *err);
/* Closes r, first moving its reusable buffers into the empty members of
 * kit (or NULL). */
void zpi_seg_reader_retire(zpi_seg_reader *r, zpi_seg_kit *kit);
/* Frees what kit holds and empties it. */
void zpi_seg_kit_free(zpi_seg_kit *kit);
/* The same for a .parquet shard (parquet.h): a segment's records are the
 * rows [j*per, ...) of the file as JSON lines, decoded from the row groups
 * that hold them. The file's row count must be n_records. */
zp_status zpi_seg_reader_open_parquet(const char *path, const char *name,
                                      const zpi_load_limits *lim, uint64_t n_records,
                                      uint64_t per_segment, zpi_seg_reader **out, zpi_err *err);
/* Load segment j into *out (caller owns; zpi_shard_free()). The last
 * segment checks that the shard ends with record n_records. bufs (or
 * NULL): a spare decode buffer the load takes (bufs->data set to NULL)
 * instead of allocating fresh memory, as zpi_format.load_bufs. */
zp_status zpi_seg_reader_load(zpi_seg_reader *r, uint64_t j, zpi_load_bufs *bufs, zpi_shard *out,
                              zpi_err *err);
/* The shard read forward in parts, whatever its record count (a reader
 * opened with n_records 0, not used with zpi_seg_reader_load): the next
 * run of whole records after the last part, about target decoded bytes
 * (more when a record is longer), into *out (caller owns; zpi_shard_free()
 * or keep its buffer for the next call's bufs). out->first_record: its
 * first record's number in the shard. The last part holds the rest of the
 * shard (a final line without newline is a record, as in a whole load);
 * then ZP_END. A read or decode error names the shard and the part. Line
 * checks as in a whole load (empty lines, max_record_bytes); the caller
 * checks the total count. Not for .parquet readers. */
zp_status zpi_seg_reader_next(zpi_seg_reader *r, size_t target, zpi_load_bufs *bufs,
                              zpi_shard *out, zpi_err *err);
/* 1 once zpi_seg_reader_next has given the shard's last part. */
int zpi_seg_reader_ended(const zpi_seg_reader *r);
zpi_seg_kind zpi_seg_reader_kind(const zpi_seg_reader *r);
/* Times a streaming reader went back to the file's start (a segment, or a
 * segment's start, behind its decoded window). */
uint64_t zpi_seg_reader_restarts(const zpi_seg_reader *r);
void zpi_seg_reader_close(zpi_seg_reader *r);

/* ---- the zstd seekable format: writing */

/* The seek table of a file being written: one entry per frame. */
typedef struct zpi_seek_table {
    uint32_t *csize, *dsize;
    size_t n, cap;
} zpi_seek_table;

/* Add a frame's compressed and decompressed sizes (each < 2^32; frames
 * larger than that cannot be described). 0 or -1 (out of memory or too
 * large). */
int zpi_seek_table_add(zpi_seek_table *t, uint64_t csize, uint64_t dsize);
/* The seek table frame (skippable frame, no checksums) into a malloc'd
 * buffer *out of *len bytes, to be written after the last frame. 0 or -1. */
int zpi_seek_table_encode(const zpi_seek_table *t, char **out, size_t *len);
void zpi_seek_table_free(zpi_seek_table *t);

/* Rewrite the .jsonl, .jsonl.zst or gzip (.gz) file in_path as a seekable .jsonl.zst
 * at out_path: frames of about frame_bytes decoded bytes (0: 4 MiB), each
 * ending at a record's end, zstd level `level` (0: 3), then the seek table.
 * Streams: memory is a frame or two, whatever the file's size. ZP_OK, or an
 * error naming the file. */
zp_status zpi_seekable_convert(const char *in_path, const char *out_path, size_t frame_bytes,
                               int level, zpi_err *err);

#endif
