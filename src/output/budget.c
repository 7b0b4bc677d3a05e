/*
 * budget.c - the memory budget's arithmetic (budget.h).
 *
 * The parts (docs/pipeline.md, "Memory budget"), with B one batch buffer,
 * C one chunk and S the largest shard's share:
 *   output queue    (prefetch_batches + 2 + balance) x B
 *   in-flight       in_flight_chunks x C
 *   shard cache     keep x S                 its working set (shard_cache.h)
 *                 + loads x S + loads x Z    shards pinned by the tasks loading
 *                                            them, with a scratch buffer of Z
 *                                            compressed bytes each (jsonl.zst)
 *                 + spares x S               decode buffers kept for reuse
 *                                            (decoded shards only)
 *                 + extra                    unused shards kept beyond the
 *                                            working set
 *   packer          pack_window x 2 x the average record (best-fit packing
 *                                            holds a window of documents' tokens)
 *   kept batches    kept x B
 * The working set, the loads and the spares are what the settings need; the
 * rest of the budget goes half to the cache's extra (at most
 * shard_cache_bytes; none when shards are read on demand: an open reader is
 * kept only in the working set, as its mapped pages count) and half to the
 * batches the consumer may keep (at least ZP_MEMORY_KEPT_MIN).
 */
#include "output/budget.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>

#include "base/json.h"
#include "base/util.h"
#include "data/dataset_internal.h"
#include "zephon/batch.h"
#include "data/shard_cache.h"
#include "ops/chunk.h"

void zpi_budget_fmt(char *buf, size_t cap, uint64_t n)
{
    if (n >= ((uint64_t)1 << 30))
        zpi_fmt(buf, cap, "%.2f GiB", (double)n / (double)((uint64_t)1 << 30));
    else if (n >= ((uint64_t)1 << 20))
        zpi_fmt(buf, cap, "%.1f MiB", (double)n / (double)((uint64_t)1 << 20));
    else
        zpi_fmt(buf, cap, "%.1f KiB", (double)n / 1024.0);
}

/* ------------------------------------------------------------ the shards */

/* The decoded size of a local jsonl.zst file from its frames' headers (each
 * frame's blocks are walked to find the next one; nothing is decoded).
 * 0 when a frame does not record its size or the file cannot be read. */
static uint64_t zstd_decoded_size(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat sb;
    uint64_t total = 0, off = 0, size = 0;
    int ok = fstat(fd, &sb) == 0;
    size = ok ? (uint64_t)sb.st_size : 0;
    while (ok && off < size) {
        unsigned char h[18]; /* the longest frame header */
        ssize_t got = pread(fd, h, sizeof h, (off_t)off);
        if (got < 8) {
            ok = 0;
            break;
        }
        uint32_t magic = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 |
                         (uint32_t)h[3] << 24;
        if ((magic & ZSTD_MAGIC_SKIPPABLE_MASK) == ZSTD_MAGIC_SKIPPABLE_START) {
            uint32_t len = (uint32_t)h[4] | (uint32_t)h[5] << 8 | (uint32_t)h[6] << 16 |
                           (uint32_t)h[7] << 24;
            off += 8 + (uint64_t)len;
            continue;
        }
        /* the frame header (RFC 8878 3.1.1.1): magic, descriptor, window,
         * dictionary id and content size fields */
        unsigned d = h[4], fcs_flag = d >> 6, single = (d >> 5) & 1, did = d & 3;
        static const unsigned did_len[4] = {0, 1, 2, 4}, fcs_len[4] = {0, 2, 4, 8};
        size_t hsize = 5 + (single ? 0 : 1) + did_len[did] +
                       (fcs_flag == 0 ? (single ? 1 : 0) : fcs_len[fcs_flag]);
        unsigned long long fcs = ZSTD_getFrameContentSize(h, (size_t)got);
        if (magic != ZSTD_MAGICNUMBER || fcs == ZSTD_CONTENTSIZE_UNKNOWN ||
            fcs == ZSTD_CONTENTSIZE_ERROR) {
            ok = 0;
            break;
        }
        total += fcs;
        off += hsize;
        for (;;) { /* the blocks: 3-byte headers */
            unsigned char b[3];
            if (pread(fd, b, 3, (off_t)off) != 3) {
                ok = 0;
                break;
            }
            uint32_t bh = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16;
            uint32_t type = (bh >> 1) & 3, bsize = bh >> 3;
            off += 3 + (type == 1 ? 1 : bsize); /* RLE: one byte */
            if (bh & 1)
                break;
        }
        if ((d >> 2) & 1)
            off += 4;
    }
    close(fd);
    return ok && off == size ? total : 0;
}

/* The Megatron pair's index: PREFIX.idx beside PREFIX.bin. */
static uint64_t megatron_idx_bytes(const char *path)
{
    size_t n = strlen(path);
    if (n < 4 || strcmp(path + n - 4, ".bin") != 0)
        return 0;
    char idx[4096];
    if (n >= sizeof idx)
        return 0;
    memcpy(idx, path, n - 4);
    memcpy(idx + n - 4, ".idx", 5);
    struct stat sb;
    return stat(idx, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

zp_status zpi_budget_scan(const zp_dataset *ds, zpi_budget_shards *out, zpi_err *err)
{
    (void)err;
    memset(out, 0, sizeof *out);
    out->largest_index = -1;
    size_t n = zp_dataset_num_shards(ds);
    out->n_shards = n;
    for (size_t i = 0; i < n; i++) {
        const zpi_format *f = zpi_dataset_shard_format(ds, i);
        const char *path = zpi_dataset_shard_path(ds, i);
        const char *fmt = f ? f->name : "";
        uint64_t bytes = zp_dataset_shard_bytes(ds, i);
        uint64_t recs = zp_dataset_shard_samples(ds, i);
        if (recs == UINT64_MAX || recs == 0)
            recs = 1;
        uint64_t rps = recs, segs = zp_dataset_shard_segments(ds, i, &rps);
        if (segs < 1 || rps < 1 || rps > recs)
            segs = 1, rps = recs;
        int remote = path && strstr(path, "://") != NULL;
        uint64_t share = 0, data = bytes, comp = 0;
        /* what the shard cache counts for a shard: its decode buffer with
         * padding and its record index (shard_cache.c) */
        uint64_t index = ZPI_JSON_PADDING + (recs + 1) * sizeof(uint64_t);
        if (!strcmp(fmt, "megatron") || !strcmp(fmt, "hdf5")) {
            share = !strcmp(fmt, "hdf5") ? ZP_MEMORY_HDF5_READER_BYTES
                                         : bytes + (remote ? 0 : megatron_idx_bytes(path));
            out->on_demand = 1;
            if (index > out->reader_index)
                out->reader_index = index;
        } else {
            if (!strcmp(fmt, "jsonl.zst") || !strcmp(fmt, "parquet")) {
                /* parquet: its rows as JSON lines, estimated as zstd's */
                data = remote || strcmp(fmt, "jsonl.zst") ? 0 : zstd_decoded_size(path);
                if (!data)
                    data = bytes * ZPI_BUDGET_ZSTD_RATIO;
                comp = bytes;
            } else if (!strcmp(fmt, "jsonl.gz")) {
                /* a gzip shard's decoded size is known only once decoded
                 * (ISIZE is mod 2^32 and per member); a load streams it
                 * through a 1 MiB read buffer, not the whole file */
                data = bytes * ZPI_BUDGET_ZSTD_RATIO;
            }
            if (segs > 1) {
                /* a segment at a time (docs/datasets.md "Segments"): its
                 * records' share of the decoded bytes, with a quarter more
                 * for records longer than the shard's average, and its
                 * share of the stored bytes */
                uint64_t seg = (uint64_t)((double)data * (double)rps / (double)recs * 1.25) + 1;
                data = seg < data ? seg : data;
                comp = comp ? comp / segs + 1 : 0;
                index = ZPI_JSON_PADDING + (rps + 1) * sizeof(uint64_t);
                out->segmented = 1;
            }
            /* the decode buffer (with its padding) and the record index */
            share = data + index;
            out->decoded = 1;
        }
        out->n_units += segs;
        double rec = (double)data / (double)rps;
        if (rec > out->record_bytes)
            out->record_bytes = rec;
        if (share > out->largest || out->largest_index < 0) {
            out->largest = share;
            out->largest_index = (int64_t)i;
        }
        if (comp > out->largest_compressed)
            out->largest_compressed = comp;
    }
    return ZP_OK;
}

/* ------------------------------------------------------------ the sums */

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

/* One batch buffer: the arrays outq.c allocates for the shape, the record
 * bytes of a record batch (twice their average: buffers grow by doubling)
 * and the sample lists. */
static uint64_t batch_bytes(const zpi_budget_in *in)
{
    uint64_t rows = in->rows, cols = in->cols, cells = rows * cols;
    double rec = in->sh.record_bytes;
    uint64_t b = 0;
    if (cols) {
        b = cells * (sizeof(int32_t) * 2 + 1); /* tokens, segment ids, loss mask */
        if (in->masking & ZP_OUT_POSITION_IDS)
            b += cells * sizeof(int32_t) + rows * sizeof(int64_t);
        if (in->masking & ZP_OUT_CU_SEQLENS)
            b += (rows * (cols - 1) + 1) * sizeof(int32_t);
        if (in->masking & ZP_OUT_DOC_COUNTS)
            b += rows * sizeof(int32_t);
        /* the documents listed: at least one per row, more when short */
        uint64_t docs = rows + cells / 64;
        b += 2 * docs * (sizeof(zp_sample) + sizeof(uint32_t) + 2 * sizeof(uint64_t));
    } else {
        b = (uint64_t)(2.0 * rec * (double)rows) + (rows + 1) * sizeof(uint64_t) +
            rows * (sizeof(zp_sample) + sizeof(uint32_t));
    }
    return b + 4096; /* the struct and the allocator's headers */
}

/* One chunk: its sample and record arrays and its arenas (record bytes,
 * and with tokens the texts and token ids, each about the record bytes),
 * twice the average as they grow by doubling and keep their capacity. */
static uint64_t chunk_bytes(const zpi_budget_in *in)
{
    double rec = in->sh.record_bytes;
    double arenas = in->cols ? 3.0 : 1.0;
    return (uint64_t)((double)in->chunk_samples *
                      ((double)(sizeof(zp_sample) + sizeof(zpi_rec)) + 2.0 * arenas * rec)) +
           4096;
}

static size_t auto_in_flight(const zpi_budget_in *in)
{
    return in->in_flight_chunks ? in->in_flight_chunks : 2 * in->op_parallelism + 2;
}

/* The least automatic in-flight count: one chunk per operator and one in
 * the reorder window. */
static size_t min_in_flight(const zpi_budget_in *in) { return (size_t)in->n_ops + 1; }

typedef struct parts {
    uint64_t B, C, S, keep, loads, spares;
    uint64_t queue, chunks, pack, cache_min, kept_min;
} parts;

static void parts_of(const zpi_budget_in *in, size_t prefetch_batches, size_t in_flight, parts *p)
{
    memset(p, 0, sizeof *p);
    p->B = batch_bytes(in);
    p->C = chunk_bytes(in);
    p->S = in->sh.largest;
    int prefetch = in->prefetch_buffer > 0;
    p->keep = zpi_shard_cache_keep_shards(in->block_shards, in->fetch_parallelism, prefetch);
    if (in->sh.segmented) /* as zpi_shard_cache_keep_units */
        p->keep += in->block_shards < 1 ? 1 : in->block_shards;
    p->loads = in->fetch_parallelism + (prefetch ? in->prefetch_parallelism : 0);
    /* no more units at once than the dataset has */
    if (p->keep > in->sh.n_units)
        p->keep = in->sh.n_units;
    if (p->keep + p->loads > in->sh.n_units)
        p->loads = in->sh.n_units - p->keep;
    p->spares = in->sh.decoded ? ZPI_SHARD_CACHE_SPARES : 0;
    p->queue = sat_mul(prefetch_batches + 2 + in->balance, p->B);
    p->chunks = sat_mul(in_flight, p->C);
    p->pack = (uint64_t)((double)in->pack_window * 2.0 * in->sh.record_bytes);
    p->cache_min = sat_add(sat_mul(p->keep + p->loads + p->spares, p->S),
                           sat_mul(p->loads, in->sh.largest_compressed));
    if (in->sh.largest_index < 0)
        p->cache_min = 0;
    p->kept_min = sat_mul(ZP_MEMORY_KEPT_MIN, p->B);
}

static uint64_t parts_sum(const parts *p)
{
    return sat_add(sat_add(sat_add(p->queue, p->chunks), p->pack),
                   sat_add(p->cache_min, p->kept_min));
}

zp_status zpi_budget_plan(const zpi_budget_in *in, zp_memory_plan *out, zpi_err *err)
{
    memset(out, 0, sizeof *out);
    size_t W = auto_in_flight(in);
    parts p;
    parts_of(in, in->prefetch_batches, W, &p);
    uint64_t need = parts_sum(&p);
    if (in->budget && need > in->budget && !in->in_flight_chunks) {
        /* the automatic in-flight count gives way, down to its least */
        size_t wmin = min_in_flight(in);
        uint64_t other = need - p.chunks;
        size_t fit = other < in->budget ? (size_t)((in->budget - other) / (p.C ? p.C : 1)) : 0;
        W = fit > wmin ? (fit < W ? fit : W) : wmin;
        parts_of(in, in->prefetch_batches, W, &p);
        need = parts_sum(&p);
    }
    if (in->budget && need > in->budget) {
        char bb[32], nb[32], q[32], b1[32], c[32], c1[32], s[32], s1[32], k[32], pk[40];
        zpi_budget_fmt(bb, sizeof bb, in->budget);
        zpi_budget_fmt(nb, sizeof nb, need);
        zpi_budget_fmt(q, sizeof q, p.queue);
        zpi_budget_fmt(b1, sizeof b1, p.B);
        zpi_budget_fmt(c, sizeof c, p.chunks);
        zpi_budget_fmt(c1, sizeof c1, p.C);
        zpi_budget_fmt(s, sizeof s, p.cache_min);
        zpi_budget_fmt(s1, sizeof s1, p.S);
        zpi_budget_fmt(k, sizeof k, p.kept_min);
        zpi_budget_fmt(pk, sizeof pk - 1, p.pack);
        strcat(pk, ";");
        return zpi_err_set(
            err, ZP_ERR_LIMIT,
            "memory_budget = %s (%llu bytes): too small for these settings: needs at least %s "
            "(%llu bytes): output queue (prefetch_batches = %zu + 2%s) x %s a batch "
            "(microbatch_size = %zu%s) = %s; in_flight_chunks = %zu%s x %s a chunk "
            "(chunk_samples = %zu) = %s;%s%s shard cache %llu %s (working set %llu, %llu "
            "loading%s%s) x %s%s%s%s = %s; %d kept batches = %s",
            bb, (unsigned long long)in->budget, nb, (unsigned long long)need,
            in->prefetch_batches, in->balance ? " + balance window" : "", b1, in->rows,
            in->cols ? ", seq_len + 1 tokens" : "", q, W, in->in_flight_chunks ? "" : " (automatic)",
            c1, in->chunk_samples, c, p.pack ? " best-fit window " : "", p.pack ? pk : "",
            (unsigned long long)(p.keep + p.loads + p.spares),
            in->sh.segmented ? "shard segments" : "shards", (unsigned long long)p.keep, (unsigned long long)p.loads,
            p.spares ? ", spare buffers" : "", in->prefetch_buffer ? "; prefetch doubles the working set" : "",
            s1, in->largest_name ? (in->sh.segmented ? " (the largest: a segment of shard '" : " (the largest: shard '") : "",
            in->largest_name ? in->largest_name : "", in->largest_name ? "')" : "", s,
            ZP_MEMORY_KEPT_MIN, k);
    }
    out->budget = in->budget;
    out->batch_bytes = p.B;
    out->queue_batches = in->prefetch_batches + 2 + in->balance;
    out->queue_bytes = p.queue;
    out->in_flight_chunks = W;
    out->chunk_bytes = p.C;
    out->chunks_bytes = p.chunks;
    out->pack_bytes = p.pack;
    out->cache_shards = p.keep;
    out->cache_loads = p.loads;
    out->shard_bytes = p.S;
    out->largest_shard = in->sh.largest_index;
    uint64_t ws = sat_mul(p.keep, p.S);
    if (!in->budget) {
        uint64_t cap = in->sh.on_demand ? 0 : in->shard_cache_bytes;
        out->cache_budget = in->shard_cache_bytes;
        out->cache_bytes = sat_add(p.cache_min, cap > ws ? cap - ws : 0);
        out->kept_batches = 0;
        out->kept_bytes = 0;
        out->total = sat_add(sat_add(sat_add(p.queue, p.chunks), p.pack), out->cache_bytes);
        return ZP_OK;
    }
    uint64_t rest = in->budget - need;
    uint64_t extra = 0;
    if (!in->sh.on_demand && in->sh.largest_index >= 0) {
        uint64_t cap = in->shard_cache_bytes > ws ? in->shard_cache_bytes - ws : 0;
        extra = rest / 2 < cap ? rest / 2 : cap;
    }
    /* readers: the cache counts their record index only, so its budget
     * holds the working set's (and no reader beyond it) */
    out->cache_budget = in->sh.on_demand ? p.keep * in->sh.reader_index : ws + extra;
    out->cache_bytes = p.cache_min + extra;
    out->kept_batches = ZP_MEMORY_KEPT_MIN + (rest - extra) / (p.B ? p.B : 1);
    out->kept_bytes = out->kept_batches * p.B;
    out->total = p.queue + p.chunks + p.pack + out->cache_bytes + out->kept_bytes;
    return ZP_OK;
}

size_t zpi_budget_max_prefetch_batches(const zpi_budget_in *in)
{
    if (!in->budget)
        return SIZE_MAX;
    parts p;
    parts_of(in, 0, in->in_flight_chunks ? in->in_flight_chunks : min_in_flight(in), &p);
    uint64_t need = parts_sum(&p);
    if (need > in->budget)
        return 0;
    uint64_t n = (in->budget - need) / (p.B ? p.B : 1);
    return n > 4096 ? 4096 : (size_t)n;
}

size_t zpi_budget_max_in_flight(const zpi_budget_in *in)
{
    if (!in->budget)
        return SIZE_MAX;
    parts p;
    parts_of(in, in->prefetch_batches, 0, &p);
    uint64_t need = parts_sum(&p);
    if (need > in->budget)
        return 0;
    uint64_t n = (in->budget - need) / (p.C ? p.C : 1);
    return n > 65536 ? 65536 : (size_t)n;
}
