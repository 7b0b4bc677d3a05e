/*
 * floor.cpp - the unavoidable work of a text pipeline (floor.h).
 */
#include "floor.h"

#include <fcntl.h>
#include <omp.h>
#include <simdjson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <string>
#include <vector>

namespace {

double now()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct file_buf {
    std::string path;
    std::vector<char> raw;     /* the file's bytes */
    std::vector<char> decoded; /* its records, with simdjson's padding after them */
    size_t decoded_len = 0;
    std::vector<size_t> lines; /* start of each line, then the end */
    uint64_t hash = 0;
};

struct span {
    uint32_t file;
    size_t begin, end;
};

bool ends_with(const std::string &s, const char *suffix)
{
    size_t n = strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

/* Phase 1 for one file. Returns false with a message on stderr. */
bool load(file_buf &f, int hash, ZSTD_DCtx *dctx)
{
    int fd = open(f.path.c_str(), O_RDONLY);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        fprintf(stderr, "bench_floor: %s: cannot open\n", f.path.c_str());
        if (fd >= 0)
            close(fd);
        return false;
    }
    size_t n = (size_t)sb.st_size;
    f.raw.resize(n);
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, f.raw.data() + got, n - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (got != n) {
        fprintf(stderr, "bench_floor: %s: short read\n", f.path.c_str());
        return false;
    }
    if (hash)
        f.hash = XXH64(f.raw.data(), n, 0);
    if (ends_with(f.path, ".zst")) {
        size_t cap = f.decoded.size() > simdjson::SIMDJSON_PADDING
                         ? f.decoded.size() - simdjson::SIMDJSON_PADDING
                         : n * 4 + 4096;
        if (f.decoded.size() < cap + simdjson::SIMDJSON_PADDING)
            f.decoded.resize(cap + simdjson::SIMDJSON_PADDING);
        ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only);
        ZSTD_inBuffer in = {f.raw.data(), n, 0};
        size_t out_pos = 0;
        for (;;) {
            if (out_pos == cap) {
                cap *= 2;
                f.decoded.resize(cap + simdjson::SIMDJSON_PADDING);
            }
            ZSTD_outBuffer out = {f.decoded.data(), cap, out_pos};
            size_t ret = ZSTD_decompressStream(dctx, &out, &in);
            if (ZSTD_isError(ret)) {
                fprintf(stderr, "bench_floor: %s: %s\n", f.path.c_str(), ZSTD_getErrorName(ret));
                return false;
            }
            out_pos = out.pos;
            if (in.pos == in.size && ret == 0)
                break;
            if (in.pos == in.size && out.pos < out.size) {
                fprintf(stderr, "bench_floor: %s: truncated frame\n", f.path.c_str());
                return false;
            }
        }
        f.decoded_len = out_pos;
    } else {
        if (f.decoded.size() < n + simdjson::SIMDJSON_PADDING)
            f.decoded.resize(n + simdjson::SIMDJSON_PADDING);
        memcpy(f.decoded.data(), f.raw.data(), n);
        f.decoded_len = n;
    }
    memset(f.decoded.data() + f.decoded_len, ' ', simdjson::SIMDJSON_PADDING);
    f.lines.clear();
    const char *d = f.decoded.data(), *end = d + f.decoded_len, *p = d;
    while (p < end) {
        const char *nl = (const char *)memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        if (e > p)
            f.lines.push_back((size_t)(p - d));
        if (e > p)
            f.lines.push_back((size_t)(e - d));
        p = e + 1;
    }
    return true;
}

} // namespace

struct bench_floor {
    std::vector<file_buf> files;
    std::vector<span> spans;
    const zp_tokenizer *tok = nullptr;
    int hash = 0;
};

extern "C" bench_floor *bench_floor_create(const char *const *paths, size_t n,
                                           const zp_tokenizer *tok, int hash)
{
    bench_floor *f = new bench_floor;
    f->files.resize(n);
    for (size_t i = 0; i < n; i++)
        f->files[i].path = paths[i];
    f->tok = tok;
    f->hash = hash;
    return f;
}

extern "C" void bench_floor_destroy(bench_floor *f) { delete f; }

extern "C" int bench_floor_run(bench_floor *f, int threads, bench_floor_result *out)
{
    memset(out, 0, sizeof *out);
    int failed = 0;
    double t0 = now();
    /* Phase 1: read, hash, decompress, split, one file per task. */
#pragma omp parallel num_threads(threads) reduction(| : failed)
    {
        ZSTD_DCtx *dctx = ZSTD_createDCtx();
#pragma omp for schedule(dynamic, 1)
        for (size_t i = 0; i < f->files.size(); i++)
            if (!load(f->files[i], f->hash, dctx))
                failed = 1;
        ZSTD_freeDCtx(dctx);
    }
    if (failed)
        return -1;
    f->spans.clear();
    for (size_t i = 0; i < f->files.size(); i++) {
        const file_buf &fb = f->files[i];
        out->file_bytes += fb.raw.size();
        out->decoded_bytes += fb.decoded_len;
        for (size_t k = 0; k + 1 < fb.lines.size(); k += 2)
            f->spans.push_back(span{(uint32_t)i, fb.lines[k], fb.lines[k + 1]});
    }
    double t1 = now();
    /* Phase 2: parse and encode, the lines of all files split between the
     * threads. */
    uint64_t text = 0, tokens = 0;
#pragma omp parallel num_threads(threads) reduction(+ : text, tokens) reduction(| : failed)
    {
        simdjson::dom::parser parser;
        zp_encoder *enc = nullptr;
        if (zp_encoder_create(f->tok, &enc) != ZP_OK)
            failed = 1;
        std::vector<int32_t> ids;
#pragma omp for schedule(dynamic, 64)
        for (size_t i = 0; i < f->spans.size(); i++) {
            if (!enc)
                continue;
            const span &s = f->spans[i];
            const char *rec = f->files[s.file].decoded.data() + s.begin;
            simdjson::dom::element doc;
            if (parser.parse(rec, s.end - s.begin, false).get(doc) != simdjson::SUCCESS) {
                failed = 1;
                continue;
            }
            std::string_view sv;
            if (doc["text"].get_string().get(sv) != simdjson::SUCCESS) {
                failed = 1;
                continue;
            }
            size_t need = zp_encode_max_ids(f->tok, sv.size());
            if (ids.size() < need)
                ids.resize(need * 2);
            size_t got = 0;
            zp_encode(enc, sv.data(), sv.size(), ids.data(), &got);
            text += sv.size();
            tokens += got;
        }
        zp_encoder_destroy(enc);
    }
    double t2 = now();
    if (failed) {
        fprintf(stderr, "bench_floor: a record failed to parse or encode\n");
        return -1;
    }
    out->seconds = t2 - t0;
    out->read_seconds = t1 - t0;
    out->text_bytes = text;
    out->records = f->spans.size();
    out->tokens = tokens;
    return 0;
}
