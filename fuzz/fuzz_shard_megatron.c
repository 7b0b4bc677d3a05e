/*
 * fuzz_shard_megatron.c - the Megatron indexed dataset reader
 * (src/formats/format_megatron.c through the format table: load, then read every
 * record), on a .bin/.idx pair made from the fuzzer's input, checked
 * against an independent reading of the same bytes.
 *
 * Input: a 2-byte little-endian length L, then min(L, rest) bytes of the
 * .bin, then the .idx (the rest). Seeds: fuzz/corpus/shard_megatron.
 *
 * The reference (below) says whether the load must succeed: a 34-byte
 * header "MMIDIDX\0\0", version 1, dtype code 1..8, S sequences and D >= 1
 * document indices; the .idx exactly 34 + 12 S + 8 D bytes (or S more: a
 * modes array, all 0); lengths >= 0; pointers contiguous from 0; the .bin
 * exactly as long as the sequences; document indices from 0, non-decreasing,
 * ending at S; S > 0 (empty shards are not allowed here). When it succeeds,
 * every record is read (in order, then the last one again) and each row is
 * either exactly the reference's tokens or reported bad because the
 * reference finds a token that is not an id (negative, above INT32_MAX,
 * not integral) or the sequence is longer than max_record_bytes / 4.
 *
 * The files live in the target's private folder (fuzz_tmpdir).
 */
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "ops/chunk.h"
#include "formats/format.h"
#include "fuzz_common.h"
#include "formats/reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_RECORD 256 /* bytes: sequences of more than 64 tokens are bad records */

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void put_file(const char *path, const uint8_t *d, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    FUZZ_CHECK(fd >= 0, "open %s", path);
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fd, d + off, n - off);
        FUZZ_CHECK(w > 0, "write %s", path);
        off += (size_t)w;
    }
    close(fd);
}

/* The reference rule: 1 when the pair must load; S and the dtype code. */
static int pair_ok(const uint8_t *bin, size_t bn, const uint8_t *idx, size_t in, uint64_t *S_out,
                   int *code_out)
{
    static const size_t isz[9] = {0, 1, 1, 2, 4, 8, 8, 4, 2};
    if (in < 34 || memcmp(idx, "MMIDIDX\0\0", 9) != 0 || le(idx + 9, 8) != 1)
        return 0;
    int code = idx[17];
    if (code < 1 || code > 8)
        return 0;
    uint64_t S = le(idx + 18, 8), D = le(idx + 26, 8);
    if (D == 0 || S > in || D > in)
        return 0;
    uint64_t want = 34 + 12 * S + 8 * D;
    int modes = 0;
    if (in == want + S && S > 0)
        modes = 1;
    else if (in != want)
        return 0;
    uint64_t end = 0;
    for (uint64_t i = 0; i < S; i++) {
        int32_t len = (int32_t)(uint32_t)le(idx + 34 + 4 * i, 4);
        uint64_t ptr = le(idx + 34 + 4 * S + 8 * i, 8);
        if (len < 0 || ptr != end)
            return 0;
        end += (uint64_t)len * isz[code];
    }
    if (end != bn)
        return 0;
    uint64_t prev = 0;
    for (uint64_t d = 0; d < D; d++) {
        uint64_t v = le(idx + 34 + 12 * S + 8 * d, 8);
        if ((d == 0 && v != 0) || (int64_t)v < 0 || v < prev || v > S)
            return 0;
        prev = v;
    }
    if (prev != S)
        return 0;
    for (uint64_t i = 0; modes && i < S; i++)
        if (idx[34 + 12 * S + 8 * D + i] != 0)
            return 0;
    (void)bin;
    *S_out = S;
    *code_out = code;
    return S > 0;
}

/* Token k of a sequence at p as an id, or -1 when it is none. */
static int64_t ref_token(int code, const uint8_t *p)
{
    double f;
    int64_t v;
    switch (code) {
    case 1: return p[0];
    case 2: return (int8_t)p[0] < 0 ? -1 : p[0];
    case 3: v = (int16_t)(uint16_t)le(p, 2); return v < 0 ? -1 : v;
    case 4: v = (int32_t)(uint32_t)le(p, 4); return v < 0 ? -1 : v;
    case 5: v = (int64_t)le(p, 8); return v < 0 || v > INT32_MAX ? -1 : v;
    case 6: memcpy(&f, p, 8); break;
    case 7: { float x; memcpy(&x, p, 4); f = x; break; }
    case 8: return (int64_t)le(p, 2);
    default: return -1;
    }
    if (!(f >= 0 && f <= INT32_MAX) || floor(f) != f)
        return -1;
    return (int64_t)f;
}

typedef struct bads {
    size_t n;
    unsigned char *row_bad; /* per row */
} bads;

static void on_bad(void *ctx, size_t row, zp_status st, const char *msg)
{
    bads *b = ctx;
    FUZZ_CHECK(st == ZP_ERR_FORMAT || st == ZP_ERR_LIMIT, "bad record status %d", (int)st);
    FUZZ_CHECK(msg && strstr(msg, "fuzz.bin") != NULL, "bad record message: %s", msg);
    b->row_bad[row] = 1;
    b->n++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char *bin_path, *idx_path;
    if (!bin_path) {
        char *dir = fuzz_tmpdir();
        FUZZ_CHECK(dir, "tmpdir");
        size_t n = strlen(dir) + 16;
        bin_path = malloc(n);
        idx_path = malloc(n);
        snprintf(bin_path, n, "%s/fuzz.bin", dir);
        snprintf(idx_path, n, "%s/fuzz.idx", dir);
    }
    if (size < 2)
        return 0;
    size_t bn = (size_t)le(data, 2);
    if (bn > size - 2)
        bn = size - 2;
    const uint8_t *bin = data + 2, *idx = data + 2 + bn;
    size_t in = size - 2 - bn;
    put_file(bin_path, bin, bn);
    put_file(idx_path, idx, in);

    const zpi_format *fmt = zpi_format_for_path(bin_path);
    FUZZ_CHECK(fmt && strcmp(fmt->name, "megatron") == 0, "the format of .bin");
    zpi_load_limits lim;
    memset(&lim, 0, sizeof lim);
    lim.max_record_bytes = MAX_RECORD;
    lim.max_shard_bytes = 1 << 20;
    zpi_shard sh;
    zpi_err err = {0};
    zp_status st = fmt->load(bin_path, "fuzz.bin", &lim, &sh, &err);
    uint64_t S = 0;
    int code = 0;
    int expect_ok = pair_ok(bin, bn, idx, in, &S, &code);
    if (st != ZP_OK) {
        FUZZ_CHECK(!expect_ok, "load failed on a good pair: %s", err.msg);
        FUZZ_CHECK(err.msg[0] != '\0', "a failed load left no message");
        FUZZ_CHECK(strstr(err.msg, "shard 'fuzz.bin'") != NULL, "message without the shard: %s", err.msg);
        FUZZ_CHECK(sh.rd == NULL && sh.data == NULL && sh.offsets == NULL, "failed load left state");
        return 0;
    }
    FUZZ_CHECK(expect_ok, "load succeeded on a bad pair (%zu + %zu bytes)", bn, in);
    FUZZ_CHECK(sh.n_records == S, "%llu records, the reference %llu",
               (unsigned long long)sh.n_records, (unsigned long long)S);
    FUZZ_CHECK(sh.rd && sh.rd->schema && sh.rd->schema->n == 1 &&
                   sh.rd->schema->f[0].kind == ZPI_FIELD_TOKENS,
               "schema");

    /* every record in order, then the last one again */
    size_t n = (size_t)S + 1;
    uint64_t *recs = malloc(n * sizeof *recs);
    size_t *rows = malloc(n * sizeof *rows);
    bads bad = {0, calloc(n, 1)};
    FUZZ_CHECK(recs && rows && bad.row_bad, "out of memory");
    for (size_t k = 0; k < n; k++) {
        recs[k] = k < S ? k : S - 1;
        rows[k] = k;
    }
    zpi_chunk c;
    FUZZ_CHECK(zpi_chunk_init(&c, n) == ZP_OK, "chunk");
    c.n = n;
    memset(c.recs, 0, n * sizeof *c.recs);
    FUZZ_CHECK(zpi_chunk_set_schema(&c, sh.rd->schema) == ZP_OK, "schema");
    zpi_read_req req;
    memset(&req, 0, sizeof req);
    req.out = zpi_chunk_sink(&c);
    req.records = recs;
    req.rows = rows;
    req.n = n;
    req.bad = on_bad;
    req.bad_ctx = &bad;
    FUZZ_CHECK(sh.rd->read(sh.rd, &req, &err) == ZP_OK, "read: %s", err.msg);
    static const size_t isz[9] = {0, 1, 1, 2, 4, 8, 8, 4, 2};
    for (size_t k = 0; k < n; k++) {
        uint64_t s = recs[k];
        size_t len = (size_t)le(idx + 34 + 4 * s, 4);
        const uint8_t *p = bin + le(idx + 34 + 4 * S + 8 * s, 8);
        int want_bad = len > MAX_RECORD / 4;
        for (size_t i = 0; !want_bad && i < len; i++)
            want_bad = ref_token(code, p + i * isz[code]) < 0;
        FUZZ_CHECK(bad.row_bad[k] == want_bad, "row %zu (sequence %llu): bad %d, reference %d", k,
                   (unsigned long long)s, bad.row_bad[k], want_bad);
        if (want_bad) {
            FUZZ_CHECK(!(c.recs[k].flags & ZPI_REC_TOKENS), "a bad row has tokens");
            continue;
        }
        FUZZ_CHECK(c.recs[k].tok_len == len, "row %zu: %zu tokens, the reference %zu", k,
                   c.recs[k].tok_len, len);
        for (size_t i = 0; i < len; i++)
            FUZZ_CHECK(c.tok[c.recs[k].tok_off + i] == ref_token(code, p + i * isz[code]),
                       "row %zu token %zu", k, i);
    }
    zpi_chunk_fini(&c);
    free(recs);
    free(rows);
    free(bad.row_bad);
    zpi_shard_free(&sh);
    return 0;
}
