/*
 * fuzz_shard.c - the shard readers (src/formats/format_jsonl.c through the format
 * table of src/formats/format.h: zpi_format_by_name(fmt)->load), on a shard file
 * whose bytes are the fuzzer's input, checked against an independent
 * reading of the same bytes:
 *
 *  - jsonl: the load succeeds exactly when every line (the last one may
 *    lack its newline) is at most max_record_bytes long and not blank, and
 *    there is at least one; then data is the file's bytes and the record
 *    index gives exactly those lines.
 *  - jsonl.zst: the same rule on the bytes zstd's streaming decoder gives
 *    (any number of frames, skippable frames ignored); a file zstd cannot
 *    decode fully (corrupt, truncated, larger than max_shard_bytes) fails.
 *  - jsonl.gz: the same rule on the bytes zlib's inflate gives (another
 *    library than the loader's ISA-L), member after member; a file zlib
 *    cannot decode fully (not gzip, corrupt, bad trailer, truncated, bytes
 *    after a member that are not one, too large) fails.
 *
 * Every record is then parsed by the record parser (src/base/json.h, with the
 * padding the loader guarantees), as the fetch stage does.
 *
 * The file is a memfd reached through /proc/self/fd/N: no disk I/O.
 */
#include "fuzz_shard.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <zlib.h>
#include <zstd.h>

#include "formats/format.h"
#include "fuzz_common.h"
#include "base/json.h"

#define MAX_RECORD ((size_t)32 << 10)
#define MAX_SHARD ((size_t)1 << 20) /* small: zstd bombs reach it fast */

static int is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* The reference rule for the lines of d[0..n): 1 when a load must succeed. */
static int lines_ok(const char *d, size_t n, size_t *n_lines)
{
    size_t start = 0, count = 0;
    int ok = 1;
    while (start < n) {
        const char *nl = memchr(d + start, '\n', n - start);
        size_t end = nl ? (size_t)(nl - d) : n;
        size_t len = end - start, k = 0;
        while (k < len && is_ws((unsigned char)d[start + k]))
            k++;
        if (len > MAX_RECORD || k == len)
            ok = 0;
        count++;
        start = end + 1;
    }
    *n_lines = count;
    return ok && count > 0;
}

/* zstd's streaming decoder over all of src: 1 and the bytes in *out
 * (borrowed until the next call), or 0 when it fails, is truncated or gives
 * more than MAX_SHARD. Its context and buffer live across calls (large
 * allocations are slow under ASan). */
static int zstd_reference(const uint8_t *src, size_t n, const char **out, size_t *out_len)
{
    static ZSTD_DCtx *dc;
    static char *buf;
    static size_t cap;
    *out = NULL;
    *out_len = 0;
    if (!dc) {
        dc = ZSTD_createDCtx();
        cap = 1 << 16;
        buf = malloc(cap);
        FUZZ_CHECK(dc && buf, "out of memory");
    }
    ZSTD_DCtx_reset(dc, ZSTD_reset_session_only);
    size_t len = 0, ret = 0;
    int ok = 1;
    ZSTD_inBuffer in = {src, n, 0};
    for (;;) {
        if (cap - len < ZSTD_DStreamOutSize()) {
            if (cap > MAX_SHARD) {
                ok = 0; /* more than the loader may give */
                break;
            }
            cap *= 2;
            buf = realloc(buf, cap);
            FUZZ_CHECK(buf, "out of memory");
        }
        ZSTD_outBuffer ob = {buf, cap, len};
        size_t in0 = in.pos;
        ret = ZSTD_decompressStream(dc, &ob, &in);
        if (ZSTD_isError(ret)) {
            ok = 0;
            break;
        }
        int progress = ob.pos != len || in.pos != in0;
        len = ob.pos;
        if (in.pos == in.size && (ret == 0 || !progress))
            break;
    }
    if (ok && ret != 0)
        ok = 0; /* truncated frame */
    if (ok && len > MAX_SHARD)
        ok = 0;
    if (!ok)
        return 0;
    *out = buf;
    *out_len = len;
    return 1;
}

static int g_fd = -1;
static char g_path[64];
static zpi_json *g_json;

/* zlib's inflate over all of src, every gzip member: 1 and the bytes in
 * *out (borrowed until the next call), or 0 when it fails, ends inside a
 * member, or gives more than MAX_SHARD. An empty file is no member. */
static int gzip_reference(const uint8_t *src, size_t n, const char **out, size_t *out_len)
{
    static char *buf;
    *out = NULL;
    *out_len = 0;
    if (!buf) {
        buf = malloc(MAX_SHARD + 1);
        FUZZ_CHECK(buf, "out of memory");
    }
    z_stream z;
    memset(&z, 0, sizeof z);
    FUZZ_CHECK(inflateInit2(&z, 16 + 15) == Z_OK, "inflateInit2");
    z.next_in = (Bytef *)(uintptr_t)src;
    z.avail_in = (uInt)n;
    z.next_out = (Bytef *)buf;
    z.avail_out = (uInt)(MAX_SHARD + 1);
    int ok = 1, in_member = 0;
    while (z.avail_in > 0) {
        in_member = 1;
        int ret = inflate(&z, Z_NO_FLUSH);
        if (ret == Z_STREAM_END) {
            in_member = 0;
            inflateReset(&z);
            continue;
        }
        if (ret != Z_OK || z.avail_out == 0) {
            ok = 0; /* damaged, or more than MAX_SHARD */
            break;
        }
    }
    size_t len = MAX_SHARD + 1 - z.avail_out;
    inflateEnd(&z);
    if (!ok || in_member || len > MAX_SHARD)
        return 0;
    *out = buf;
    *out_len = len;
    return 1;
}

void fuzz_shard(const char *fmt_name, const uint8_t *data, size_t size)
{
    if (g_fd < 0) {
        g_fd = memfd_create("zephon-fuzz-shard", 0);
        FUZZ_CHECK(g_fd >= 0, "memfd_create failed");
        snprintf(g_path, sizeof g_path, "/proc/self/fd/%d", g_fd);
        FUZZ_CHECK(zpi_json_create(&g_json) == ZP_OK, "zpi_json_create");
    }
    FUZZ_CHECK(ftruncate(g_fd, 0) == 0 && lseek(g_fd, 0, SEEK_SET) == 0, "reset memfd");
    for (size_t off = 0; off < size;) {
        ssize_t w = write(g_fd, data + off, size - off);
        FUZZ_CHECK(w > 0, "write memfd");
        off += (size_t)w;
    }

    const zpi_format *fmt = zpi_format_by_name(fmt_name);
    FUZZ_CHECK(fmt != NULL, "format %s", fmt_name);
    zpi_load_limits lim = {.max_record_bytes = MAX_RECORD, .max_shard_bytes = MAX_SHARD};
    zpi_shard sh;
    zpi_err err = {0};
    zp_status st = fmt->load(g_path, "fuzz-shard", &lim, &sh, &err);

    /* the reference */
    const char *ref = (const char *)data;
    size_t ref_len = size, n_lines = 0;
    int decoded = 1;
    if (strcmp(fmt_name, "jsonl.zst") == 0)
        decoded = zstd_reference(data, size, &ref, &ref_len);
    else if (strcmp(fmt_name, "jsonl.gz") == 0)
        decoded = gzip_reference(data, size, &ref, &ref_len);
    int expect_ok = decoded && lines_ok(ref ? ref : "", ref_len, &n_lines);

    if (st != ZP_OK) {
        FUZZ_CHECK(!expect_ok, "load failed on a good shard (%zu bytes, %zu lines): %s", ref_len,
                   n_lines, err.msg);
        FUZZ_CHECK(err.msg[0] != '\0', "a failed load left no message");
        FUZZ_CHECK(strstr(err.msg, "fuzz-shard") != NULL, "the message does not name the shard: %s",
                   err.msg);
        FUZZ_CHECK(sh.data == NULL && sh.offsets == NULL, "a failed load left buffers");
        return;
    }
    FUZZ_CHECK(expect_ok, "load succeeded on a bad shard (decoded %d, %zu lines)", decoded,
               n_lines);
    FUZZ_CHECK(sh.data_len == ref_len && memcmp(sh.data, ref, ref_len) == 0,
               "decoded bytes differ (%zu vs %zu)", sh.data_len, ref_len);
    FUZZ_CHECK(sh.n_records == n_lines, "%llu records, %zu lines",
               (unsigned long long)sh.n_records, n_lines);
    for (size_t k = 0; k < ZPI_JSON_PADDING; k++)
        FUZZ_CHECK(sh.data[sh.data_len + k] == 0, "padding byte %zu not zero", k);
    uint64_t expect_start = 0;
    for (uint64_t i = 0; i < sh.n_records; i++) {
        uint64_t a = sh.offsets[i], b = sh.offsets[i + 1];
        FUZZ_CHECK(a == expect_start && b > a && b <= sh.data_len + 1, "record %llu at [%llu, %llu)",
                   (unsigned long long)i, (unsigned long long)a, (unsigned long long)b);
        FUZZ_CHECK(b - 1 == sh.data_len || sh.data[b - 1] == '\n',
                   "record %llu does not end with a newline", (unsigned long long)i);
        FUZZ_CHECK(memchr(sh.data + a, '\n', b - 1 - a) == NULL, "newline inside record %llu",
                   (unsigned long long)i);
        expect_start = b;
        /* what the fetch stage does with each record */
        zpi_err jerr = {0};
        if (zpi_json_parse(g_json, sh.data + a, b - 1 - a, &jerr) == ZP_OK) {
            const char *s;
            size_t n;
            if (zpi_json_get_string(g_json, "text", &s, &n) == ZP_OK && n)
                FUZZ_CHECK(s != NULL, "NULL string");
        } else {
            FUZZ_CHECK(jerr.msg[0] != '\0', "a parse error without a cause");
        }
    }
    FUZZ_CHECK(expect_start == sh.data_len || expect_start == sh.data_len + 1,
               "records end at %llu of %zu", (unsigned long long)expect_start, sh.data_len);
    zpi_shard_free(&sh);
}
