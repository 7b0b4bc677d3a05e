/*
 * fuzz_shard_hdf5.c - the HDF5 shard reader (src/formats/format_hdf5.c, through
 * the format table: zpi_format_by_name("hdf5")->load, then the reader's
 * read of every record, as the fetch stage does). Input: the bytes of an
 * .h5 file (seeds in fuzz/corpus/shard_hdf5: a sample file with text,
 * tokens, features and labels; a ragged token file; small variants).
 *
 * Checked: no crash, leak or sanitizer report on any input; no HDF5
 * object (file, dataset, type, space, attribute) left open after the
 * shard is freed or its load failed (leaks inside libhdf5 itself, on
 * files it refuses, are suppressed by fuzz/lsan.supp: this count is what
 * sees the reader's own); a failed load
 * or read leaves a message naming the shard and no reader; a successful
 * load has a schema of 1..ZPI_MAX_FIELDS fields; every record a read
 * delivers lies inside the chunk's arenas; bad-record messages name the
 * shard.
 *
 * The file is a memfd reached through /proc/self/fd/N: no disk I/O.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <hdf5.h>

#include "ops/chunk.h"
#include "formats/format.h"
#include "fuzz_common.h"
#include "formats/reader.h"

#define MAX_RECORD ((size_t)64 << 10)
#define MAX_READ 512 /* records read per input */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void on_bad(void *ctx, size_t row, zp_status st, const char *msg)
{
    size_t *n = ctx;
    (*n)++;
    FUZZ_CHECK(st != ZP_OK, "bad record %zu with ZP_OK", row);
    FUZZ_CHECK(strstr(msg, "fuzz-shard") != NULL, "bad-record message without the shard: %s",
               msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("zephon-fuzz-h5", 0);
        FUZZ_CHECK(fd >= 0, "memfd_create failed");
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    FUZZ_CHECK(ftruncate(fd, 0) == 0 && lseek(fd, 0, SEEK_SET) == 0, "reset memfd");
    for (size_t off = 0; off < size;) {
        ssize_t w = write(fd, data + off, size - off);
        FUZZ_CHECK(w > 0, "write memfd");
        off += (size_t)w;
    }
    const zpi_format *fmt = zpi_format_by_name("hdf5");
    FUZZ_CHECK(fmt != NULL, "no hdf5 format");
    zpi_load_limits lim;
    memset(&lim, 0, sizeof lim);
    lim.max_record_bytes = MAX_RECORD;
    lim.max_shard_bytes = (size_t)1 << 20;
    zpi_shard sh;
    zpi_err err = {0};
    zp_status st = fmt->load(path, "fuzz-shard", &lim, &sh, &err);
    if (st != ZP_OK) {
        FUZZ_CHECK(strstr(err.msg, "fuzz-shard") != NULL, "load message without the shard: %s", err.msg);
        FUZZ_CHECK(sh.rd == NULL, "a failed load left a reader");
        FUZZ_CHECK(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == 0,
                   "a failed load left %zd HDF5 objects open",
                   (ssize_t)H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL));
        return 0;
    }
    const zpi_schema *s = sh.rd->schema;
    FUZZ_CHECK(s->n >= 1 && s->n <= ZPI_MAX_FIELDS, "%d fields", s->n);
    size_t n = sh.n_records < MAX_READ ? (size_t)sh.n_records : MAX_READ;
    if (n) {
        uint64_t recs[MAX_READ];
        size_t rows[MAX_READ];
        for (size_t i = 0; i < n; i++)
            recs[i] = i, rows[i] = n - 1 - i;
        zpi_chunk c;
        FUZZ_CHECK(zpi_chunk_init(&c, n) == ZP_OK, "chunk");
        c.n = n;
        memset(c.recs, 0, n * sizeof *c.recs);
        FUZZ_CHECK(zpi_chunk_set_schema(&c, s) == ZP_OK, "schema");
        size_t nbad = 0;
        zpi_read_req req = {.out = zpi_chunk_sink(&c), .records = recs, .rows = rows, .n = n, .bad = on_bad,
                            .bad_ctx = &nbad};
        st = sh.rd->read(sh.rd, &req, &err);
        if (st != ZP_OK) {
            FUZZ_CHECK(strstr(err.msg, "fuzz-shard") != NULL, "read message without the shard: %s",
                       err.msg);
        } else {
            for (size_t i = 0; i < n; i++) {
                const zpi_rec *r = &c.recs[i];
                if (r->flags & ZPI_REC_TEXT)
                    FUZZ_CHECK(r->text_off + r->text_len <= c.text_len, "text of row %zu", i);
                if (r->flags & ZPI_REC_TOKENS)
                    FUZZ_CHECK(r->tok_off + r->tok_len <= c.tok_len, "tokens of row %zu", i);
            }
        }
        zpi_chunk_fini(&c);
    }
    zpi_shard_free(&sh);
    FUZZ_CHECK(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == 0,
               "the freed shard left %zd HDF5 objects open",
               (ssize_t)H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL));
    return 0;
}
