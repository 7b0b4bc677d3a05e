/*
 * fuzz_shard_gz.c - the gzip shard readers (src/formats/gzip_stream.c and
 * the "jsonl.gz" paths of format_jsonl.c and segment.c) on a .jsonl.gz
 * file whose bytes are the fuzzer's input (the first byte chooses the
 * segment size: 1 to 8 records). Checked:
 *
 *  - the whole-shard load as fuzz_shard.c checks every format (records,
 *    padding, the record parser);
 *  - when the whole load succeeds, the segment reader (one streaming
 *    decoder) loads every segment in ascending order with exactly the
 *    whole load's records, and segment 0 once more afterwards (from the
 *    decoder's window, or a restart from the file's start when the file
 *    decodes to more than the window) gives the same records again;
 *  - when it fails (corrupt, truncated, not gzip, over max_shard_bytes),
 *    its message names the shard, and a segment reader told the file has 4
 *    records either loads segments or fails naming the shard: never a
 *    crash, a leak or an unbounded allocation.
 *
 * The file is a memfd reached through /proc/self/fd/N: no disk I/O.
 */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "formats/format.h"
#include "formats/segment.h"
#include "fuzz_common.h"
#include "fuzz_shard.h"

#define MAX_RECORD ((size_t)32 << 10)
#define MAX_SHARD ((size_t)1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int g_fd = -1;
static char g_path[64];

/* Segment j of r against the whole load's records (whole may be NULL: the
 * load must then fail naming the shard). 1: loaded, 0: failed. */
static int check_segment(zpi_seg_reader *r, uint64_t j, uint64_t per, const zpi_shard *whole)
{
    zpi_shard s;
    zpi_err err = {0};
    zp_status st = zpi_seg_reader_load(r, j, NULL, &s, &err);
    if (st != ZP_OK) {
        FUZZ_CHECK(!whole, "segment %llu of a good file failed: %s", (unsigned long long)j,
                   err.msg);
        FUZZ_CHECK(strstr(err.msg, "fuzz-shard") != NULL, "message without the shard: %s",
                   err.msg);
        return 0;
    }
    FUZZ_CHECK(s.first_record == j * per, "segment %llu starts at record %llu",
               (unsigned long long)j, (unsigned long long)s.first_record);
    for (uint64_t i = 0; whole && i < s.n_records; i++) {
        uint64_t g = j * per + i;
        FUZZ_CHECK(g < whole->n_records, "record %llu past the shard's %llu",
                   (unsigned long long)g, (unsigned long long)whole->n_records);
        size_t a = whole->offsets[g + 1] - whole->offsets[g];
        size_t b = s.offsets[i + 1] - s.offsets[i];
        FUZZ_CHECK(a == b && memcmp(whole->data + whole->offsets[g], s.data + s.offsets[i],
                                    a - 1) == 0,
                   "record %llu differs", (unsigned long long)g);
    }
    for (size_t k = 0; k < ZPI_JSON_PADDING; k++)
        FUZZ_CHECK(s.data[s.data_len + k] == 0, "padding byte %zu not zero", k);
    zpi_shard_free(&s);
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint64_t per = 1 + data[0] % 8;
    data++;
    size--;
    fuzz_shard("jsonl.gz", data, size);
    if (g_fd < 0) {
        g_fd = memfd_create("zephon-fuzz-gz", 0);
        FUZZ_CHECK(g_fd >= 0, "memfd_create failed");
        snprintf(g_path, sizeof g_path, "/proc/self/fd/%d", g_fd);
    }
    FUZZ_CHECK(ftruncate(g_fd, 0) == 0 && lseek(g_fd, 0, SEEK_SET) == 0, "reset memfd");
    for (size_t off = 0; off < size;) {
        ssize_t w = write(g_fd, data + off, size - off);
        FUZZ_CHECK(w > 0, "write memfd");
        off += (size_t)w;
    }
    zpi_load_limits lim = {.max_record_bytes = MAX_RECORD, .max_shard_bytes = MAX_SHARD};
    zpi_shard whole;
    zpi_err err = {0};
    zp_status wst = zpi_format_by_name("jsonl.gz")->load(g_path, "fuzz-shard", &lim, &whole, &err);
    if (wst != ZP_OK)
        FUZZ_CHECK(strstr(err.msg, "fuzz-shard") != NULL, "whole load: message without the "
                   "shard: %s", err.msg);
    const uint64_t n = wst == ZP_OK ? whole.n_records : 4;
    zpi_seg_reader *r = NULL;
    zp_status st = zpi_seg_reader_open(g_path, "fuzz-shard", ZPI_SEG_GZIP, &lim, n, per, &r, &err);
    FUZZ_CHECK(st == ZP_OK, "open failed (%d): %s", (int)st, err.msg);
    FUZZ_CHECK(zpi_seg_reader_kind(r) == ZPI_SEG_STREAM, "a gzip reader is not a stream");
    const zpi_shard *w = wst == ZP_OK ? &whole : NULL;
    const uint64_t nseg = n ? (n + per - 1) / per : 1;
    int all = 1;
    for (uint64_t j = 0; j < nseg && all; j++)
        all = check_segment(r, j, per, w);
    if (all && nseg > 1)
        (void)check_segment(r, 0, per, w); /* again: from the window, or a restart */
    zpi_seg_reader_close(r);
    if (wst == ZP_OK)
        zpi_shard_free(&whole);
    return 0;
}
