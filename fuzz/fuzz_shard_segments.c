/*
 * fuzz_shard_segments.c - the segment reader (src/formats/segment.c) and
 * its seek table parser, on a .jsonl.zst file whose bytes are the
 * fuzzer's input (the first byte chooses the segment size: 1 to 8
 * records). Checked against the whole-shard load of the same bytes:
 *
 *  - when the whole load succeeds and the file has no seek table (a
 *    stream), every segment loads, in ascending order, and holds exactly
 *    the whole load's records;
 *  - with a seek table (the file ends with the seekable magic number), a
 *    segment either loads with those records or fails with a message that
 *    names the shard (a table that lies about its frames);
 *  - a damaged table fails the open with ZP_ERR_FORMAT naming the file.
 *
 * The file is a memfd reached through /proc/self/fd/N: no disk I/O.
 */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "formats/format.h"
#include "formats/segment.h"
#include "fuzz_common.h"

#define MAX_RECORD ((size_t)32 << 10)
#define MAX_SHARD ((size_t)1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int g_fd = -1;
static char g_path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint64_t per = 1 + data[0] % 8;
    data++;
    size--;
    if (g_fd < 0) {
        g_fd = memfd_create("zephon-fuzz-segments", 0);
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
    if (zpi_format_by_name("jsonl.zst")->load(g_path, "fuzz-shard", &lim, &whole, &err) != ZP_OK)
        return 0; /* the segments need the record count a whole load gives */
    const uint64_t n = whole.n_records;
    zpi_seg_reader *r = NULL;
    zp_status st = zpi_seg_reader_open(g_path, "fuzz-shard", 1, &lim, n, per, &r, &err);
    if (st != ZP_OK) {
        FUZZ_CHECK(st == ZP_ERR_FORMAT && strstr(err.msg, g_path) != NULL,
                   "open failed (%d) without naming the file: %s", (int)st, err.msg);
        zpi_shard_free(&whole);
        return 0;
    }
    const int seekable = zpi_seg_reader_kind(r) == ZPI_SEG_SEEKABLE;
    const uint64_t nseg = n ? (n + per - 1) / per : 1;
    for (uint64_t j = 0; j < nseg; j++) {
        zpi_shard s;
        st = zpi_seg_reader_load(r, j, NULL, &s, &err);
        if (st != ZP_OK) {
            FUZZ_CHECK(seekable, "segment %llu of a stream failed: %s", (unsigned long long)j,
                       err.msg);
            FUZZ_CHECK(strstr(err.msg, "fuzz-shard") != NULL, "message without the shard: %s",
                       err.msg);
            break;
        }
        FUZZ_CHECK(s.first_record == j * per, "segment %llu starts at record %llu",
                   (unsigned long long)j, (unsigned long long)s.first_record);
        for (uint64_t i = 0; i < s.n_records; i++) {
            uint64_t g = j * per + i;
            FUZZ_CHECK(g < n, "record %llu past the shard's %llu", (unsigned long long)g,
                       (unsigned long long)n);
            size_t a = whole.offsets[g + 1] - whole.offsets[g];
            size_t b = s.offsets[i + 1] - s.offsets[i];
            FUZZ_CHECK(a == b && memcmp(whole.data + whole.offsets[g], s.data + s.offsets[i],
                                        a - 1) == 0,
                       "record %llu differs", (unsigned long long)g);
        }
        for (size_t k = 0; k < ZPI_JSON_PADDING; k++)
            FUZZ_CHECK(s.data[s.data_len + k] == 0, "padding byte %zu not zero", k);
        zpi_shard_free(&s);
    }
    zpi_seg_reader_close(r);
    zpi_shard_free(&whole);
    return 0;
}
