/*
 * gzip_stream.h - one forward gzip decoder (ISA-L igzip), member after
 * member, with the checks and messages of a gzip shard (private).
 *
 * A gzip file is one or more members (RFC 1952), each a header, deflate
 * data and a trailer (CRC-32 and ISIZE, the decoded size mod 2^32): `cat
 * a.gz b.gz`, pigz and bgzip write several. The decoder reads them all as
 * one stream of decoded bytes. Its errors name the shard, the compressed
 * byte offset where it failed (to within the few bytes the decoder reads
 * ahead), the decoded bytes before it, and the caller's `where` (or NULL),
 * e.g. "after line 120":
 *   - not gzip at all: the file does not start with a gzip header;
 *   - garbage after member k: bytes after a member that are not a header;
 *   - corrupt deflate data: an invalid block, symbol or distance;
 *   - bad trailer: CRC-32 or ISIZE of a member differs from its data;
 *   - truncated: the file ends inside a member (zpi_gz_end).
 * An empty file is zero members: an empty stream.
 *
 * Why ISA-L: it streams (memory bounded by its window, whatever the
 * shard's size) and decodes faster than zlib and libdeflate here
 * (bench/gzip, docs/formats.md "gzip").
 *
 * Not thread-safe: one decoder per load or per segment reader.
 */
#ifndef ZP_GZIP_STREAM_H
#define ZP_GZIP_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct zpi_gz zpi_gz;

/* A decoder at the start of a file. OUT: *out, release with
 * zpi_gz_destroy(). ZP_OK or ZP_ERR_NOMEM. */
zp_status zpi_gz_create(zpi_gz **out);
void zpi_gz_destroy(zpi_gz *g);
/* Back to the start of a file (a new file or the same from byte 0). */
void zpi_gz_reset(zpi_gz *g);
/* The next input: in[0..n) (n < 4 GiB) are the file's bytes that follow
 * those given before; borrowed until zpi_gz_avail_in() is 0. */
void zpi_gz_input(zpi_gz *g, const void *in, size_t n);
/* Input bytes given and not yet consumed. */
size_t zpi_gz_avail_in(const zpi_gz *g);
/* Compressed bytes consumed so far (the file offset the decoder reached). */
uint64_t zpi_gz_consumed(const zpi_gz *g);
/* Members begun so far. */
uint64_t zpi_gz_members(const zpi_gz *g);

/* Decodes into out[0..cap): *got bytes written (0 when it needs input).
 * Stops when out is full, the input is used up or a member ends. name, where: for
 * messages. ZP_OK, or ZP_ERR_FORMAT with the message in err. */
zp_status zpi_gz_decode(zpi_gz *g, char *out, size_t cap, size_t *got, const char *name,
                        const char *where, zpi_err *err);
/* The file's end (all its bytes given and decoded, zpi_gz_decode giving
 * 0 bytes): ZP_OK when it ended after a whole member (or had no bytes),
 * else a ZP_ERR_FORMAT "truncated" message. */
zp_status zpi_gz_end(zpi_gz *g, const char *name, const char *where, zpi_err *err);

#endif
