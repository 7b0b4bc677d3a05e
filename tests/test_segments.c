/* test_segments.c - shards read by segments (docs/datasets.md "Segments"):
 * the segment reader gives the records of the whole-shard load, for plain
 * .jsonl, seekable .jsonl.zst (zpi_seekable_convert and `zephon gen`'s
 * writer), single-frame and multi-frame .jsonl.zst without a seek table,
 * .jsonl.gz of one and of several members (one streaming decoder), in any
 * order of segments, a segment behind the gzip decoder's window restarting
 * it; a damaged seek table is an error naming the
 * file; a shard with another record count than the dataset's is an error;
 * the shard cache's resident bytes over a shuffled pass of big shards stay
 * at about block x segment, not block x shard, and at that in a run's last
 * pass whatever the budget; readers reuse a closed reader's decoder and
 * buffers, and recycled segment buffers are kept whole; read forward in
 * parts of about a byte count (what preprocess reads), every format gives
 * the whole load's records. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "data/shard_cache.h"
#include "formats/format.h"
#include "formats/segment.h"
#include "testutil.h"
#include "zephon.h"

#define N_RECORDS 1000

/* Records of varying length (10 - 400 bytes of text). */
static char *records_text(int seed, int n, size_t *len)
{
    size_t cap = (size_t)n * 480, k = 0;
    char *buf = malloc(cap);
    uint64_t x = 0x9e3779b97f4a7c15ULL * (uint64_t)(seed + 1);
    for (int i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int tl = 10 + (int)(x % 390);
        k += (size_t)snprintf(buf + k, cap - k, "{\"id\": %d, \"text\": \"", i);
        for (int c = 0; c < tl; c++)
            buf[k++] = (char)('a' + (c + i) % 26);
        k += (size_t)snprintf(buf + k, cap - k, "\"}\n");
    }
    *len = k;
    return buf;
}

static zpi_load_limits limits(void)
{
    zpi_load_limits lim;
    memset(&lim, 0, sizeof lim);
    lim.max_record_bytes = 1 << 20;
    lim.max_shard_bytes = (size_t)1 << 30;
    return lim;
}

/* Every segment of `path` (per records each), in the order given by
 * `descending`, against the whole load of the file. */
static void check_segments_n(const char *path, int compressed, uint64_t per, int descending,
                             zpi_seg_kind want_kind, uint64_t n_records)
{
    zpi_load_limits lim = limits();
    zpi_err err;
    zpi_shard whole;
    const zpi_format *fmt = zpi_format_for_path(path);
    assert_non_null(fmt);
    assert_int_equal(fmt->load(path, "t", &lim, &whole, &err), ZP_OK);
    assert_int_equal(whole.n_records, n_records);
    zpi_seg_reader *r;
    assert_int_equal(zpi_seg_reader_open(path, "t", compressed, &lim, n_records, per, &r, &err),
                     ZP_OK);
    assert_int_equal(zpi_seg_reader_kind(r), want_kind);
    const uint64_t nseg = (n_records + per - 1) / per;
    uint64_t seen = 0;
    for (uint64_t k = 0; k < nseg; k++) {
        uint64_t j = descending ? nseg - 1 - k : k;
        zpi_shard s;
        zp_status st = zpi_seg_reader_load(r, j, NULL, &s, &err);
        if (st != ZP_OK)
            fail_msg("segment %llu: %s", (unsigned long long)j, err.msg);
        assert_int_equal(s.first_record, j * per);
        uint64_t m = n_records - j * per < per ? n_records - j * per : per;
        assert_int_equal(s.n_records, m);
        for (uint64_t i = 0; i < m; i++) {
            uint64_t g = j * per + i;
            size_t a = whole.offsets[g + 1] - whole.offsets[g];
            size_t b = s.offsets[i + 1] - s.offsets[i];
            assert_int_equal(a, b);
            assert_memory_equal(whole.data + whole.offsets[g], s.data + s.offsets[i], a - 1);
        }
        seen += m;
        zpi_shard_free(&s);
    }
    assert_int_equal(seen, n_records);
    /* read in order, a stream is decoded once: never restarted */
    if (!descending)
        assert_int_equal(zpi_seg_reader_restarts(r), 0);
    zpi_seg_reader_close(r);
    zpi_shard_free(&whole);
}

/* Segments js[0..nj) of path loaded in that order: each one's records as
 * in a whole load; the decoder restarted `restarts` times. */
static void check_order(const char *path, int compressed, uint64_t per, uint64_t n_records,
                        const uint64_t *js, size_t nj, uint64_t restarts)
{
    zpi_load_limits lim = limits();
    zpi_err err;
    zpi_shard whole;
    assert_int_equal(zpi_format_for_path(path)->load(path, "t", &lim, &whole, &err), ZP_OK);
    zpi_seg_reader *r;
    assert_int_equal(zpi_seg_reader_open(path, "t", compressed, &lim, n_records, per, &r, &err),
                     ZP_OK);
    for (size_t k = 0; k < nj; k++) {
        uint64_t j = js[k];
        zpi_shard s;
        if (zpi_seg_reader_load(r, j, NULL, &s, &err) != ZP_OK)
            fail_msg("segment %llu: %s", (unsigned long long)j, err.msg);
        uint64_t m = n_records - j * per < per ? n_records - j * per : per;
        assert_int_equal(s.n_records, m);
        size_t a = whole.offsets[j * per + m] - whole.offsets[j * per];
        assert_int_equal(s.offsets[m] - s.offsets[0], a);
        assert_memory_equal(whole.data + whole.offsets[j * per], s.data + s.offsets[0], a - 1);
        zpi_shard_free(&s);
    }
    assert_int_equal(zpi_seg_reader_restarts(r), restarts);
    zpi_seg_reader_close(r);
    zpi_shard_free(&whole);
}

static void check_segments(const char *path, int compressed, uint64_t per, int descending,
                           zpi_seg_kind want_kind)
{
    check_segments_n(path, compressed, per, descending, want_kind, N_RECORDS);
}

static void test_segments_every_format(void **state)
{
    (void)state;
    char *dir = zpt_tmpdir();
    size_t n;
    char *t = records_text(1, N_RECORDS, &n);
    /* a final record without newline */
    char *plain = zpt_path(dir, "a.jsonl");
    char *single = zpt_path(dir, "a1.jsonl.zst");
    char *multi = zpt_path(dir, "a5.jsonl.zst");
    char *seek = zpt_path(dir, "as.jsonl.zst");
    assert_int_equal(zpt_write_file(plain, t, n - 1), 0);
    assert_int_equal(zpt_write_zst(single, t, n, 1), 0);
    assert_int_equal(zpt_write_zst(multi, t, n, 5), 0);
    zpi_err err;
    /* frames of 4 KiB: about 20 records each, segments across frames */
    assert_int_equal(zpi_seekable_convert(plain, seek, 4096, 3, &err), ZP_OK);
    static const uint64_t pers[] = {1, 7, 64, 333, N_RECORDS};
    for (size_t k = 0; k < sizeof pers / sizeof pers[0]; k++) {
        for (int desc = 0; desc < 2; desc++) {
            check_segments(plain, 0, pers[k], desc, ZPI_SEG_PLAIN);
            check_segments(seek, 1, pers[k], desc, ZPI_SEG_SEEKABLE);
            check_segments(single, 1, pers[k], desc, ZPI_SEG_STREAM);
            check_segments(multi, 1, pers[k], desc, ZPI_SEG_STREAM);
        }
    }
    /* a stream of several MiB (more than the decoder's window): read in
     * order, each byte decoded once (no restart) */
    size_t bn;
    char *bt = records_text(5, 20 * N_RECORDS, &bn);
    char *big = zpt_path(dir, "big1.jsonl.zst");
    assert_int_equal(zpt_write_zst(big, bt, bn, 1), 0);
    check_segments_n(big, 1, 3001, 0, ZPI_SEG_STREAM, 20 * N_RECORDS);
    check_segments_n(big, 1, 777, 1, ZPI_SEG_STREAM, 20 * N_RECORDS);
    /* a load decodes straight into the segment's buffer and keeps only the
     * next segment's first bytes in the window: skipping segments ahead
     * (their starts found by scanning through the window) and segments
     * of several reads never restart; a segment behind the window (more
     * than two reads back) does, once */
    static const uint64_t ahead[] = {0, 2, 3, 6, 7, 9};
    check_order(big, 1, 1777, 20 * N_RECORDS, ahead, 6, 0);
    static const uint64_t back[] = {1, 8, 9, 2};
    check_order(big, 1, 1777, 20 * N_RECORDS, back, 4, 1);
    static const uint64_t large[] = {0, 1, 2};
    check_order(big, 1, 7001, 20 * N_RECORDS, large, 3, 0);
    free(big);
    free(bt);
    /* the seekable file is an ordinary .jsonl.zst for a whole load (the
     * seek table is a skippable frame), with the same records */
    size_t sl;
    char *sb = zpt_read_file(seek, &sl);
    assert_non_null(sb);
    assert_true(sl < n); /* compressed */
    free(sb);
    free(plain);
    free(single);
    free(multi);
    free(seek);
    free(t);
    zpt_rmtree(dir);
    free(dir);
}

/* Reader after reader of the same shards, as the shard cache opens them:
 * a reader opened with the kit of one closed before takes its decoder and
 * buffers (the kit is left without them) and gives a fresh reader's records,
 * for a single-frame stream, a seekable file and a gzip stream, read
 * partly (a decoder retired mid-stream) and in full; a recycled segment
 * buffer a little larger than its segment is kept whole (its pages are
 * not given back to be touched fresh by the next load), one much larger
 * is trimmed. */
static void kit_round(const char *path, int compressed, uint64_t per, uint64_t n_records,
                      uint64_t nload, zpi_seg_kit *kit, const zpi_shard *whole)
{
    zpi_load_limits lim = limits();
    zpi_err err;
    zpi_seg_kit before = *kit;
    zpi_seg_reader *r;
    assert_int_equal(
        zpi_seg_reader_open_kit(path, "t", compressed, &lim, n_records, per, kit, &r, &err),
        ZP_OK);
    if (before.dctx && compressed == ZPI_SEG_ZSTD) /* taken */
        assert_null(kit->dctx);
    if (before.sbuf)
        assert_null(kit->sbuf);
    if (before.inb && zpi_seg_reader_kind(r) == ZPI_SEG_STREAM)
        assert_null(kit->inb);
    for (uint64_t j = 0; j < nload; j++) {
        zpi_shard s;
        if (zpi_seg_reader_load(r, j, NULL, &s, &err) != ZP_OK)
            fail_msg("%s segment %llu: %s", path, (unsigned long long)j, err.msg);
        uint64_t m = n_records - j * per < per ? n_records - j * per : per;
        size_t a = whole->offsets[j * per + m] - whole->offsets[j * per];
        assert_int_equal(s.n_records, m);
        assert_int_equal(s.offsets[m] - s.offsets[0], a);
        assert_memory_equal(whole->data + whole->offsets[j * per], s.data + s.offsets[0], a - 1);
        zpi_shard_free(&s);
    }
    zpi_seg_kit_free(kit); /* what the reader left */
    zpi_seg_reader_retire(r, kit);
    assert_non_null(kit->sbuf);
    if (compressed == ZPI_SEG_ZSTD)
        assert_non_null(kit->dctx);
}

static void test_segments_reuse(void **state)
{
    (void)state;
    char *dir = zpt_tmpdir();
    size_t n;
    char *t = records_text(3, 8 * N_RECORDS, &n);
    char *plain = zpt_path(dir, "r.jsonl");
    char *single = zpt_path(dir, "r1.jsonl.zst");
    char *seek = zpt_path(dir, "rs.jsonl.zst");
    char *gz = zpt_path(dir, "r.jsonl.gz");
    assert_int_equal(zpt_write_file(plain, t, n), 0);
    assert_int_equal(zpt_write_zst(single, t, n, 1), 0);
    zpi_err err;
    assert_int_equal(zpi_seekable_convert(plain, seek, 8192, 3, &err), ZP_OK);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "gzip -c '%s' > '%s'", plain, gz);
    assert_int_equal(system(cmd), 0);
    zpi_load_limits lim = limits();
    zpi_shard whole;
    assert_int_equal(zpi_format_for_path(plain)->load(plain, "t", &lim, &whole, &err), ZP_OK);
    const uint64_t nr = 8 * N_RECORDS, per = 900, nseg = (nr + per - 1) / per;
    zpi_seg_kit kit;
    memset(&kit, 0, sizeof kit);
    /* the same decoder through single-frame, seekable and gzip readers,
     * retired mid-stream and at the end */
    kit_round(single, ZPI_SEG_ZSTD, per, nr, 3, &kit, &whole);
    kit_round(single, ZPI_SEG_ZSTD, per, nr, nseg, &kit, &whole);
    kit_round(seek, ZPI_SEG_ZSTD, per, nr, nseg, &kit, &whole);
    kit_round(single, ZPI_SEG_ZSTD, per, nr, nseg, &kit, &whole);
    kit_round(gz, ZPI_SEG_GZIP, per, nr, nseg, &kit, &whole);
    kit_round(single, ZPI_SEG_ZSTD, per, nr, 5, &kit, &whole);
    kit_round(plain, ZPI_SEG_NONE, per, nr, nseg, &kit, &whole);
    zpi_seg_kit_free(&kit);
    assert_null(kit.dctx);

    /* recycled decode buffers: segment 0 is about 900 x 205 bytes */
    zpi_seg_reader *r;
    assert_int_equal(zpi_seg_reader_open(single, "t", ZPI_SEG_ZSTD, &lim, nr, per, &r, &err),
                     ZP_OK);
    zpi_shard s;
    assert_int_equal(zpi_seg_reader_load(r, 0, NULL, &s, &err), ZP_OK);
    const size_t len = s.data_len;
    zpi_shard_free(&s);
    /* a little larger: kept whole, the same buffer */
    zpi_load_bufs bufs;
    memset(&bufs, 0, sizeof bufs);
    bufs.data_cap = len + len / 8;
    bufs.data = malloc(bufs.data_cap + ZPI_JSON_PADDING);
    char *given = bufs.data;
    assert_int_equal(zpi_seg_reader_load(r, 1, &bufs, &s, &err), ZP_OK);
    assert_null(bufs.data); /* taken */
    assert_ptr_equal(s.data, given);
    assert_int_equal(s.data_cap, len + len / 8);
    zpi_shard_free(&s);
    /* larger by 2 MiB: trimmed to the segment */
    bufs.data_cap = len + ((size_t)2 << 20);
    bufs.data = malloc(bufs.data_cap + ZPI_JSON_PADDING);
    assert_int_equal(zpi_seg_reader_load(r, 2, &bufs, &s, &err), ZP_OK);
    assert_true(s.data_cap < 2 * len);
    zpi_shard_free(&s);
    /* too small: grown by a little, not by half and a read chunk more */
    bufs.data_cap = len / 2;
    bufs.data = malloc(bufs.data_cap + ZPI_JSON_PADDING);
    assert_int_equal(zpi_seg_reader_load(r, 3, &bufs, &s, &err), ZP_OK);
    assert_true(s.data_cap >= s.data_len);
    assert_true(s.data_cap <= s.data_len + s.data_len / 4 + (16 << 10));
    zpi_shard_free(&s);
    zpi_seg_reader_close(r);
    zpi_shard_free(&whole);
    free(plain);
    free(single);
    free(seek);
    free(gz);
    free(t);
    zpt_rmtree(dir);
    free(dir);
}

/* gzip: `gzip -c` of `path` (from byte `from`, `len` bytes; len 0: to
 * the end) appended to `out`. 0 on success. */
static int gzip_part(const char *path, size_t from, size_t len, const char *out)
{
    char cmd[4096];
    if (len)
        snprintf(cmd, sizeof cmd, "tail -c +%zu '%s' | head -c %zu | gzip -6 -c >> '%s'",
                 from + 1, path, len, out);
    else
        snprintf(cmd, sizeof cmd, "tail -c +%zu '%s' | gzip -6 -c >> '%s'", from + 1, path, out);
    return system(cmd) == 0 ? 0 : -1;
}

/* .jsonl.gz shards: one decoder (kind STREAM) over every member, the
 * records of the whole load in either order; a segment behind the window
 * restarts the decoder and gives the same records. */
static void test_segments_gzip(void **state)
{
    (void)state;
    char *dir = zpt_tmpdir();
    size_t n;
    char *t = records_text(3, N_RECORDS, &n);
    char *plain = zpt_path(dir, "a.jsonl");
    char *one = zpt_path(dir, "a1.jsonl.gz");
    char *three = zpt_path(dir, "a3.jsonl.gz");
    assert_int_equal(zpt_write_file(plain, t, n), 0);
    assert_int_equal(gzip_part(plain, 0, 0, one), 0);
    /* three members cut inside lines: the members make one stream */
    assert_int_equal(gzip_part(plain, 0, n / 3 + 5, three), 0);
    assert_int_equal(gzip_part(plain, n / 3 + 5, n / 3, three), 0);
    assert_int_equal(gzip_part(plain, 2 * (n / 3) + 5, 0, three), 0);
    static const uint64_t pers[] = {1, 7, 333, N_RECORDS};
    for (size_t k = 0; k < sizeof pers / sizeof pers[0]; k++) {
        for (int desc = 0; desc < 2; desc++) {
            check_segments(one, ZPI_SEG_GZIP, pers[k], desc, ZPI_SEG_STREAM);
            check_segments(three, ZPI_SEG_GZIP, pers[k], desc, ZPI_SEG_STREAM);
        }
    }
    /* several MiB, more than the window: in order no restart (checked by
     * check_segments_n), then segment 0 again restarts once */
    size_t bn;
    char *bt = records_text(6, 20 * N_RECORDS, &bn);
    char *bigp = zpt_path(dir, "big.jsonl");
    char *big = zpt_path(dir, "big.jsonl.gz");
    assert_int_equal(zpt_write_file(bigp, bt, bn), 0);
    assert_int_equal(gzip_part(bigp, 0, 0, big), 0);
    check_segments_n(big, ZPI_SEG_GZIP, 3001, 0, ZPI_SEG_STREAM, 20 * N_RECORDS);
    zpi_load_limits lim = limits();
    zpi_err err;
    zpi_seg_reader *r;
    assert_int_equal(
        zpi_seg_reader_open(big, "t", ZPI_SEG_GZIP, &lim, 20 * N_RECORDS, 3001, &r, &err), ZP_OK);
    zpi_shard a, b;
    assert_int_equal(zpi_seg_reader_load(r, 0, NULL, &a, &err), ZP_OK);
    for (uint64_t j = 1; j < 7; j++) {
        zpi_shard s;
        assert_int_equal(zpi_seg_reader_load(r, j, NULL, &s, &err), ZP_OK);
        zpi_shard_free(&s);
    }
    assert_int_equal(zpi_seg_reader_restarts(r), 0);
    assert_int_equal(zpi_seg_reader_load(r, 0, NULL, &b, &err), ZP_OK);
    assert_int_equal(zpi_seg_reader_restarts(r), 1);
    assert_int_equal(a.data_len, b.data_len);
    assert_memory_equal(a.data, b.data, a.data_len);
    zpi_shard_free(&a);
    zpi_shard_free(&b);
    zpi_seg_reader_close(r);
    /* convert --seekable reads gzip: the same records, frame by frame */
    char *conv = zpt_path(dir, "c.jsonl.zst");
    assert_int_equal(zpi_seekable_convert(three, conv, 4096, 3, &err), ZP_OK);
    check_segments(conv, ZPI_SEG_ZSTD, 64, 0, ZPI_SEG_SEEKABLE);
    size_t cl;
    char *cb = zpt_read_file(plain, &cl);
    zpi_shard w;
    zpi_load_limits l2 = limits();
    assert_int_equal(zpi_format_for_path(conv)->load(conv, "c", &l2, &w, &err), ZP_OK);
    assert_int_equal(w.data_len, cl);
    assert_memory_equal(w.data, cb, cl);
    zpi_shard_free(&w);
    free(cb);
    free(conv);
    free(bt);
    free(bigp);
    free(big);
    free(plain);
    free(one);
    free(three);
    free(t);
    zpt_rmtree(dir);
    free(dir);
}

/* A shard read forward in parts (zpi_seg_reader_next, what `zephon
 * preprocess` reads): the parts' records, in order, are the whole load's,
 * each part starts where the one before ended, the last one says so and a
 * call after it gives ZP_END; a stream is never restarted; the buffer of
 * one part serves the next. */
static void check_parts(const char *path, int compressed, size_t target, zpi_seg_kind want_kind)
{
    zpi_load_limits lim = limits();
    lim.max_record_bytes = (size_t)8 << 20; /* the long record below */
    zpi_err err;
    zpi_shard whole;
    assert_int_equal(zpi_format_for_path(path)->load(path, "t", &lim, &whole, &err), ZP_OK);
    zpi_seg_reader *r;
    assert_int_equal(zpi_seg_reader_open(path, "t", compressed, &lim, 0, 1, &r, &err), ZP_OK);
    assert_int_equal(zpi_seg_reader_kind(r), want_kind);
    uint64_t seen = 0, parts = 0;
    zpi_load_bufs bufs;
    memset(&bufs, 0, sizeof bufs);
    while (!zpi_seg_reader_ended(r)) {
        zpi_shard s;
        zp_status st = zpi_seg_reader_next(r, target, &bufs, &s, &err);
        if (st != ZP_OK)
            fail_msg("%s, target %zu, part %llu: %s", path, target, (unsigned long long)parts,
                     err.msg);
        assert_null(bufs.data); /* the spare buffer was taken */
        assert_int_equal(s.first_record, seen);
        assert_true(seen + s.n_records <= whole.n_records);
        size_t longest = 0;
        for (uint64_t i = 0; i < s.n_records; i++) {
            uint64_t g = seen + i;
            size_t a = whole.offsets[g + 1] - whole.offsets[g];
            assert_int_equal(s.offsets[i + 1] - s.offsets[i], a);
            assert_memory_equal(whole.data + whole.offsets[g], s.data + s.offsets[i], a - 1);
            longest = a > longest ? a : longest;
        }
        /* a part is about the target: never more than a read chunk (1
         * MiB) past it unless a record is that long */
        if (longest < ((size_t)1 << 20))
            assert_true(s.data_len <= (target > (16 << 10) ? target : (16 << 10)) +
                                          ((size_t)1 << 20));
        seen += s.n_records;
        parts++;
        bufs.data = s.data; /* the next part's buffer */
        bufs.data_cap = s.data_cap;
        s.data = NULL;
        zpi_shard_free(&s);
    }
    free(bufs.data);
    assert_int_equal(seen, whole.n_records);
    if (target < whole.data_len / 2)
        assert_true(parts > 1);
    zpi_shard e;
    assert_int_equal(zpi_seg_reader_next(r, target, NULL, &e, &err), ZP_END);
    assert_int_equal(zpi_seg_reader_restarts(r), 0);
    zpi_seg_reader_close(r);
    zpi_shard_free(&whole);
}

/* The 1-based line of byte at in buf. */
static size_t line_of(const char *buf, size_t at)
{
    size_t line = 1;
    for (size_t i = 0; i < at; i++)
        line += buf[i] == '\n';
    return line;
}

static void test_segments_parts(void **state)
{
    (void)state;
    char *dir = zpt_tmpdir();
    size_t n;
    char *t = records_text(7, 20 * N_RECORDS, &n);
    char *plain = zpt_path(dir, "p.jsonl"), *plain_nl = zpt_path(dir, "pn.jsonl");
    char *single = zpt_path(dir, "p1.jsonl.zst"), *multi = zpt_path(dir, "p5.jsonl.zst");
    char *seek = zpt_path(dir, "ps.jsonl.zst"), *gz1 = zpt_path(dir, "p1.jsonl.gz");
    char *gz3 = zpt_path(dir, "p3.jsonl.gz");
    assert_int_equal(zpt_write_file(plain, t, n - 1), 0); /* no final newline */
    assert_int_equal(zpt_write_file(plain_nl, t, n), 0);
    assert_int_equal(zpt_write_zst(single, t, n, 1), 0);
    assert_int_equal(zpt_write_zst(multi, t, n, 5), 0);
    zpi_err err;
    assert_int_equal(zpi_seekable_convert(plain, seek, 64 << 10, 3, &err), ZP_OK);
    assert_int_equal(gzip_part(plain_nl, 0, 0, gz1), 0);
    assert_int_equal(gzip_part(plain_nl, 0, n / 3 + 5, gz3), 0);
    assert_int_equal(gzip_part(plain_nl, n / 3 + 5, n / 3, gz3), 0);
    assert_int_equal(gzip_part(plain_nl, 2 * (n / 3) + 5, 0, gz3), 0);
    static const size_t targets[] = {1, 50000, (1 << 20) + 7, (size_t)64 << 20};
    for (size_t k = 0; k < sizeof targets / sizeof targets[0]; k++) {
        check_parts(plain, ZPI_SEG_NONE, targets[k], ZPI_SEG_PLAIN);
        check_parts(plain_nl, ZPI_SEG_NONE, targets[k], ZPI_SEG_PLAIN);
        check_parts(single, ZPI_SEG_ZSTD, targets[k], ZPI_SEG_STREAM);
        check_parts(multi, ZPI_SEG_ZSTD, targets[k], ZPI_SEG_STREAM);
        check_parts(seek, ZPI_SEG_ZSTD, targets[k], ZPI_SEG_SEEKABLE);
        check_parts(gz1, ZPI_SEG_GZIP, targets[k], ZPI_SEG_STREAM);
        check_parts(gz3, ZPI_SEG_GZIP, targets[k], ZPI_SEG_STREAM);
    }
    /* a record of 2.5 MiB (more than a read chunk and the window) among
     * small ones: its part grows to hold it */
    size_t big = (size_t)5 << 19, bn = 0;
    char *bt = malloc(big + 2 * n + 64);
    memcpy(bt, t, n / 2);
    bn = n / 2;
    while (bt[bn - 1] != '\n')
        bn--;
    bn += (size_t)sprintf(bt + bn, "{\"text\": \"");
    memset(bt + bn, 'x', big);
    bn += big;
    bn += (size_t)sprintf(bt + bn, "\"}\n");
    memcpy(bt + bn, t, n);
    bn += n;
    char *lp = zpt_path(dir, "long.jsonl"), *lz = zpt_path(dir, "long.jsonl.zst");
    assert_int_equal(zpt_write_file(lp, bt, bn), 0);
    assert_int_equal(zpt_write_zst(lz, bt, bn, 1), 0);
    check_parts(lp, ZPI_SEG_NONE, 50000, ZPI_SEG_PLAIN);
    check_parts(lz, ZPI_SEG_ZSTD, 50000, ZPI_SEG_STREAM);
    /* an empty file: one empty last part, then the end */
    char *ep = zpt_path(dir, "empty.jsonl");
    assert_int_equal(zpt_write_file(ep, "", 0), 0);
    zpi_load_limits lim = limits();
    zpi_seg_reader *r;
    zpi_shard s;
    assert_int_equal(zpi_seg_reader_open(ep, "e", ZPI_SEG_NONE, &lim, 0, 1, &r, &err), ZP_OK);
    assert_int_equal(zpi_seg_reader_next(r, 50000, NULL, &s, &err), ZP_OK);
    assert_int_equal(s.n_records, 0);
    assert_true(zpi_seg_reader_ended(r));
    zpi_shard_free(&s);
    assert_int_equal(zpi_seg_reader_next(r, 50000, NULL, &s, &err), ZP_END);
    zpi_seg_reader_close(r);
    /* an empty line in a later part: an error naming the shard, the line
     * and the byte in the shard (not in the part) */
    memcpy(bt, t, n);
    size_t at = n / 2;
    while (bt[at - 1] != '\n')
        at++;
    bt[at] = '\n'; /* the record that started here is now an empty line + rest */
    assert_int_equal(zpt_write_file(lp, bt, n), 0);
    assert_int_equal(zpi_seg_reader_open(lp, "bad", ZPI_SEG_NONE, &lim, 0, 1, &r, &err), ZP_OK);
    zp_status st = ZP_OK;
    while (st == ZP_OK && !zpi_seg_reader_ended(r)) {
        st = zpi_seg_reader_next(r, 50000, NULL, &s, &err);
        if (st == ZP_OK)
            zpi_shard_free(&s);
    }
    assert_int_equal(st, ZP_ERR_FORMAT);
    char want[128];
    snprintf(want, sizeof want, "shard 'bad': empty record at line %zu (byte %zu)",
             line_of(bt, at), at);
    if (!strstr(err.msg, want))
        fail_msg("'%s' does not say '%s'", err.msg, want);
    zpi_seg_reader_close(r);
    free(ep);
    free(lp);
    free(lz);
    free(bt);
    free(plain);
    free(plain_nl);
    free(single);
    free(multi);
    free(seek);
    free(gz1);
    free(gz3);
    free(t);
    zpt_rmtree(dir);
    free(dir);
}

/* A damaged seek table: a clear error naming the file, at open. */
static void test_segments_corrupt_seek_table(void **state)
{
    (void)state;
    char *dir = zpt_tmpdir();
    size_t n;
    char *t = records_text(2, N_RECORDS, &n);
    char *plain = zpt_path(dir, "b.jsonl");
    char *seek = zpt_path(dir, "b.jsonl.zst");
    assert_int_equal(zpt_write_file(plain, t, n), 0);
    zpi_err err;
    assert_int_equal(zpi_seekable_convert(plain, seek, 8192, 3, &err), ZP_OK);
    size_t len;
    char *good = zpt_read_file(seek, &len);
    assert_non_null(good);
    zpi_load_limits lim = limits();
    /* 1: a frame's compressed size off by one (the sizes no longer add up);
     * 2: reserved bits in the descriptor; 3: the skippable frame's magic;
     * 4: a frame listed as decoding to nothing (no read would decode it:
     * its records would be dropped without a word) */
    for (int damage = 1; damage <= 4; damage++) {
        char *bad = malloc(len);
        memcpy(bad, good, len);
        size_t nf = (size_t)(unsigned char)bad[len - 9] | (size_t)(unsigned char)bad[len - 8] << 8;
        size_t table = len - 9 - nf * 8 - 8;
        if (damage == 1)
            bad[table + 8] = (char)(bad[table + 8] + 1);
        else if (damage == 2)
            bad[len - 5] = 0x04;
        else if (damage == 3)
            bad[table] = 0x00;
        else
            memset(bad + table + 8 + 8 + 4, 0, 4); /* frame 1's decoded size */
        assert_int_equal(zpt_write_file(seek, bad, len), 0);
        free(bad);
        zpi_seg_reader *r = NULL;
        memset(&err, 0, sizeof err);
        zp_status st = zpi_seg_reader_open(seek, "b.jsonl.zst", 1, &lim, N_RECORDS, 100, &r, &err);
        assert_int_equal(st, ZP_ERR_FORMAT);
        assert_null(r);
        assert_non_null(strstr(err.msg, "seek table"));
        assert_non_null(strstr(err.msg, seek));
    }
    /* a frame that does not decode to its table's size: an error naming
     * the file and the frame when it is read */
    char *bad = malloc(len);
    memcpy(bad, good, len);
    size_t nf = (size_t)(unsigned char)bad[len - 9] | (size_t)(unsigned char)bad[len - 8] << 8;
    size_t table = len - 9 - nf * 8 - 8;
    bad[table + 8 + 4] = (char)(bad[table + 8 + 4] + 1); /* frame 0's decoded size */
    assert_int_equal(zpt_write_file(seek, bad, len), 0);
    free(bad);
    zpi_seg_reader *r = NULL;
    assert_int_equal(zpi_seg_reader_open(seek, "b.jsonl.zst", 1, &lim, N_RECORDS, 100, &r, &err),
                     ZP_OK);
    zpi_shard s;
    assert_int_equal(zpi_seg_reader_load(r, 0, NULL, &s, &err), ZP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "frame 0"));
    assert_non_null(strstr(err.msg, seek));
    zpi_seg_reader_close(r);
    free(good);
    free(t);
    free(plain);
    free(seek);
    zpt_rmtree(dir);
    free(dir);
}

/* A shard with fewer or more records than the dataset counted. */
static void test_segments_count_mismatch(void **state)
{
    (void)state;
    char *dir = zpt_tmpdir();
    size_t n;
    char *t = records_text(3, N_RECORDS, &n);
    char *plain = zpt_path(dir, "c.jsonl");
    assert_int_equal(zpt_write_file(plain, t, n), 0);
    zpi_load_limits lim = limits();
    zpi_err err;
    zpi_shard s;
    zpi_seg_reader *r;
    /* more records counted than there are: the last segment says so */
    assert_int_equal(zpi_seg_reader_open(plain, "c", 0, &lim, N_RECORDS + 5, 100, &r, &err), ZP_OK);
    zp_status st10 = zpi_seg_reader_load(r, 10, NULL, &s, &err);
    assert_int_equal(st10, ZP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "dataset counted"));
    zpi_seg_reader_close(r);
    /* fewer counted: the last segment finds more */
    assert_int_equal(zpi_seg_reader_open(plain, "c", 0, &lim, N_RECORDS - 5, 100, &r, &err), ZP_OK);
    assert_int_equal(zpi_seg_reader_load(r, 9, NULL, &s, &err), ZP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "dataset counted"));
    zpi_seg_reader_close(r);
    free(t);
    free(plain);
    zpt_rmtree(dir);
    free(dir);
}

#define BIG_SHARDS 8
#define BIG_RECORDS 4000

/* A pass over a shuffled dataset of 8 shards of about 0.8 MB (block 8),
 * each sample's unit got and put in stream order as the fetch operator
 * does, through a cache of budget 0 that keeps the working set: the peak
 * of resident bytes. segment_bytes: the dataset's setting. */
static uint64_t pass_peak_b(const char *dir, size_t segment_bytes, uint64_t *segment_loads,
                            size_t budget, int last_pass);
static uint64_t pass_peak(const char *dir, size_t segment_bytes, uint64_t *segment_loads)
{
    return pass_peak_b(dir, segment_bytes, segment_loads, 0, 0);
}

/* A shuffled pass with a cache budget of `budget`, told (last_pass) that
 * it is the run's last pass or not: the cache's peak resident bytes. */
static uint64_t pass_peak_b(const char *dir, size_t segment_bytes, uint64_t *segment_loads,
                            size_t budget, int last_pass)
{
    zp_dataset_config dc;
    zp_dataset_config_init(&dc);
    dc.segment_bytes = segment_bytes;
    zp_dataset *ds;
    assert_int_equal(zp_dataset_create(&dc, &ds), ZP_OK);
    for (int s = 0; s < BIG_SHARDS; s++) {
        char name[32];
        snprintf(name, sizeof name, "big%d.jsonl", s);
        char *p = zpt_path(dir, name);
        assert_int_equal(zp_dataset_add(ds, p), ZP_OK);
        free(p);
    }
    assert_int_equal(zp_dataset_index(ds), ZP_OK);
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.shuffle = 1;
    wc.seed = 7;
    wc.shuffle_block_shards = BIG_SHARDS;
    zp_worksource *ws;
    assert_int_equal(zp_worksource_create(ds, &wc, &ws), ZP_OK);
    zpi_shard_cache_config cc;
    memset(&cc, 0, sizeof cc);
    cc.budget_bytes = budget;
    cc.keep_shards = zpi_shard_cache_keep_shards(BIG_SHARDS, 1, 0);
    zpi_shard_cache *c;
    assert_int_equal(zpi_shard_cache_create(ds, &cc, &c), ZP_OK);
    if (last_pass)
        zpi_shard_cache_last_pass(c);
    uint64_t total = zp_worksource_samples_per_rank(ws);
    unsigned char *seen = calloc(BIG_SHARDS * BIG_RECORDS, 1);
    for (uint64_t q = 0; q < total; q++) {
        zp_sample smp;
        assert_int_equal(zp_worksource_sample(ws, 0, q, &smp), ZP_OK);
        uint32_t u = zpi_shard_cache_unit(c, smp.shard, smp.record);
        const zpi_shard *sh;
        zpi_err err;
        assert_int_equal(zpi_shard_cache_get(c, u, &sh, NULL, &err), ZP_OK);
        assert_true(smp.record >= sh->first_record);
        assert_true(smp.record - sh->first_record < sh->n_records);
        /* the record's bytes are its id's: {"id": <record>, ... */
        char want[32];
        int wl = snprintf(want, sizeof want, "{\"id\": %llu,", (unsigned long long)smp.record);
        assert_memory_equal(sh->data + sh->offsets[smp.record - sh->first_record], want,
                            (size_t)wl);
        seen[smp.shard * BIG_RECORDS + smp.record]++;
        zpi_shard_cache_put(c, u);
    }
    for (size_t i = 0; i < BIG_SHARDS * BIG_RECORDS; i++)
        assert_int_equal(seen[i], 1); /* every sample once */
    free(seen);
    zpi_shard_cache_stats st;
    zpi_shard_cache_stats_get(c, &st);
    zpi_shard_cache_destroy(c);
    zp_worksource_destroy(ws);
    zp_dataset_destroy(ds);
    if (segment_loads)
        *segment_loads = st.segment_loads;
    return st.bytes_peak;
}

static void test_segments_cache_bounded(void **state)
{
    (void)state;
    char *dir = zpt_tmpdir();
    size_t shard_bytes = 0;
    for (int s = 0; s < BIG_SHARDS; s++) {
        char name[32];
        snprintf(name, sizeof name, "big%d.jsonl", s);
        char *p = zpt_path(dir, name);
        size_t n;
        char *t = records_text(10 + s, BIG_RECORDS, &n);
        assert_int_equal(zpt_write_file(p, t, n), 0);
        shard_bytes = n;
        free(t);
        free(p);
    }
    /* segments of 64 KiB: about 13 per shard */
    uint64_t loads;
    uint64_t seg_peak = pass_peak(dir, 64 << 10, &loads);
    assert_true(loads > 0);
    /* whole shards (SIZE_MAX): the block's 8 shards decoded at once */
    uint64_t whole_peak = pass_peak(dir, SIZE_MAX, NULL);
    /* by default these shards (under 8 MiB) are one segment each: as whole */
    uint64_t dflt_peak = pass_peak(dir, 0, NULL);
    print_message("peak resident: segments of 64 KiB %.2f MB, whole shards %.2f MB (shard %.2f MB)\n",
                  (double)seg_peak / 1e6, (double)whole_peak / 1e6, (double)shard_bytes / 1e6);
    assert_true(whole_peak >= (uint64_t)BIG_SHARDS * shard_bytes);
    assert_int_equal(dflt_peak, whole_peak);
    /* the working set: 9 segments of ~64 KiB (and their offsets) */
    assert_true(seg_peak < (uint64_t)(BIG_SHARDS + 2) * (128 << 10));
    assert_true(seg_peak * 2 < whole_peak);
    /* a budget larger than the data keeps every segment read, unless the
     * pass is the run's last: then only the working set, as with none */
    uint64_t kept_peak = pass_peak_b(dir, 64 << 10, NULL, (size_t)1 << 30, 0);
    uint64_t last_peak = pass_peak_b(dir, 64 << 10, NULL, (size_t)1 << 30, 1);
    print_message("budget 1 GiB: %.2f MB, in the last pass %.2f MB\n", (double)kept_peak / 1e6,
                  (double)last_peak / 1e6);
    assert_true(kept_peak >= (uint64_t)BIG_SHARDS * shard_bytes);
    assert_true(last_peak < (uint64_t)(BIG_SHARDS + 2) * (128 << 10));
    zpt_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_segments_every_format),
        cmocka_unit_test(test_segments_gzip),
        cmocka_unit_test(test_segments_parts),
        cmocka_unit_test(test_segments_reuse),
        cmocka_unit_test(test_segments_corrupt_seek_table),
        cmocka_unit_test(test_segments_count_mismatch),
        cmocka_unit_test(test_segments_cache_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
