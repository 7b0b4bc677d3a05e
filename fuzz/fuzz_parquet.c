/*
 * fuzz_parquet.c - the Parquet reader (src/formats/parquet.h): the footer
 * (Thrift, schema mapping, row-group checks), page headers, codecs and
 * every page decoder, on a .parquet file made of the fuzzer's input.
 *
 * Input: the file. Seeds: fuzz/corpus/parquet (small files pyarrow wrote
 * with each codec, page version and encoding).
 *
 * Checked besides ASan/UBSan: a failed open or read returns ZP_ERR_FORMAT
 * (or ZP_ERR_NOMEM) with a message naming the shard; an open that succeeds
 * agrees with zpi_pq_footer_rows on the file's tail (same row count) and
 * with the sum of its row groups; reads (in ranges of 1, 7 and 1000 rows,
 * then the first row again, at most 20000 rows) give n lines, each a
 * '{' ... "}\n" line, offsets rising from 0 to data_len, zero padding.
 *
 * The file is a memfd reached through /proc/self/fd/N: no disk I/O.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "formats/parquet.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int g_fd = -1;
static char g_path[64];

static void check_err(zp_status s, const zpi_err *err)
{
    FUZZ_CHECK(s == ZP_ERR_FORMAT || s == ZP_ERR_NOMEM, "status %d: %s", (int)s, zpi_err_msg(err));
    FUZZ_CHECK(strstr(zpi_err_msg(err), "shard 'fz'") != NULL, "message without the shard: %s",
               zpi_err_msg(err));
}

static void check_shard(const zpi_shard *sh, uint64_t first, uint64_t n)
{
    FUZZ_CHECK(sh->n_records == n && sh->first_record == first, "counts");
    FUZZ_CHECK(sh->offsets[0] == 0 && sh->offsets[n] == sh->data_len, "offsets' ends");
    for (uint64_t i = 0; i < n; i++) {
        uint64_t a = sh->offsets[i], b = sh->offsets[i + 1];
        FUZZ_CHECK(b >= a + 3, "record %llu of %llu bytes", (unsigned long long)i,
                   (unsigned long long)(b - a));
        FUZZ_CHECK(sh->data[a] == '{' && sh->data[b - 2] == '}' && sh->data[b - 1] == '\n',
                   "record %llu is not an object line", (unsigned long long)i);
    }
    for (size_t i = 0; i < ZPI_JSON_PADDING; i++)
        FUZZ_CHECK(sh->data[sh->data_len + i] == 0, "padding");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (g_fd < 0) {
        g_fd = memfd_create("zephon-fuzz-parquet", 0);
        FUZZ_CHECK(g_fd >= 0, "memfd_create failed");
        snprintf(g_path, sizeof g_path, "/proc/self/fd/%d", g_fd);
    }
    FUZZ_CHECK(ftruncate(g_fd, 0) == 0 && lseek(g_fd, 0, SEEK_SET) == 0, "reset memfd");
    for (size_t off = 0; off < size;) {
        ssize_t w = write(g_fd, data + off, size - off);
        FUZZ_CHECK(w > 0, "write memfd");
        off += (size_t)w;
    }
    zpi_err err = {0};
    zpi_pq_file *f = NULL;
    zp_status s = zpi_pq_open(g_path, "fz", &f, &err);
    uint64_t trows = 0;
    size_t need = 0;
    zpi_err terr = {0};
    zp_status ts = zpi_pq_footer_rows(data, size, size, "fz", &trows, &need, &terr);
    if (s != ZP_OK) {
        check_err(s, &err);
        FUZZ_CHECK(f == NULL, "failed open with a file");
        return 0;
    }
    FUZZ_CHECK(ts == ZP_OK && trows == zpi_pq_num_rows(f), "footer_rows disagrees with open");
    uint64_t sum = 0;
    for (size_t g = 0; g < zpi_pq_num_row_groups(f); g++)
        sum += zpi_pq_row_group_rows(f, g);
    FUZZ_CHECK(sum == zpi_pq_num_rows(f), "row groups' rows");
    uint64_t total = zpi_pq_num_rows(f);
    if (total > 20000)
        total = 20000;
    static const uint64_t steps[] = {1, 7, 1000};
    uint64_t at = 0;
    for (int k = 0; at < total; k++) {
        uint64_t n = steps[k % 3];
        if (n > total - at)
            n = total - at;
        zpi_shard sh;
        s = zpi_pq_read_rows(f, at, n, NULL, &sh, &err);
        if (s != ZP_OK) {
            check_err(s, &err);
            FUZZ_CHECK(sh.data == NULL && sh.offsets == NULL, "failed read left data");
            break;
        }
        check_shard(&sh, at, n);
        zpi_shard_free(&sh);
        at += n;
    }
    if (total > 0) {
        zpi_shard sh;
        s = zpi_pq_read_rows(f, 0, 1, NULL, &sh, &err);
        if (s == ZP_OK) {
            check_shard(&sh, 0, 1);
            zpi_shard_free(&sh);
        } else {
            check_err(s, &err);
        }
    }
    zpi_pq_close(f);
    return 0;
}
