/*
 * gz_libs.c - decode one .gz file (all its members) with each inflate
 * library installed: zlib (streaming), ISA-L igzip (streaming) and
 * libdeflate (whole members only: no streaming API), and print the decoded
 * MB/s of each, best of R runs, measured in one process. The file is read
 * into memory first: only decoding is timed.
 *   gz_libs FILE.gz [RUNS]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <isa-l/igzip_lib.h>
#include <libdeflate.h>
#include <zlib.h>

#define OUT_CHUNK ((size_t)1 << 20)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* zlib: inflate with gzip wrapper, member after member, into a 1 MiB
 * buffer overwritten each time (the bytes are counted, not kept). */
static uint64_t dec_zlib(const unsigned char *src, size_t n, unsigned char *out)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 16 + 15) != Z_OK)
        return 0;
    uint64_t total = 0;
    z.next_in = (unsigned char *)src;
    z.avail_in = (uInt)n;
    for (;;) {
        z.next_out = out;
        z.avail_out = (uInt)OUT_CHUNK;
        int ret = inflate(&z, Z_NO_FLUSH);
        total += OUT_CHUNK - z.avail_out;
        if (ret == Z_STREAM_END) {
            if (z.avail_in == 0)
                break;
            inflateReset(&z);
            continue;
        }
        if (ret != Z_OK) {
            total = 0;
            break;
        }
    }
    inflateEnd(&z);
    return total;
}

static uint64_t dec_isal(const unsigned char *src, size_t n, unsigned char *out)
{
    struct inflate_state *s = malloc(sizeof *s);
    if (!s)
        return 0;
    isal_inflate_init(s);
    s->crc_flag = ISAL_GZIP;
    s->next_in = (uint8_t *)src;
    s->avail_in = (uint32_t)n;
    uint64_t total = 0;
    for (;;) {
        s->next_out = out;
        s->avail_out = (uint32_t)OUT_CHUNK;
        int ret = isal_inflate(s);
        total += OUT_CHUNK - s->avail_out;
        if (ret != ISAL_DECOMP_OK) {
            total = 0;
            break;
        }
        if (s->block_state == ISAL_BLOCK_FINISH) {
            if (s->avail_in == 0)
                break;
            const uint8_t *p = s->next_in;
            uint32_t a = s->avail_in;
            isal_inflate_reset(s);
            s->crc_flag = ISAL_GZIP;
            s->next_in = (uint8_t *)p;
            s->avail_in = a;
        }
    }
    free(s);
    return total;
}

/* libdeflate: each member whole into a buffer of its ISIZE (the trailer's
 * last 4 bytes give the size of a file of one member). */
static uint64_t dec_libdeflate(const unsigned char *src, size_t n, unsigned char *big,
                               size_t big_cap)
{
    struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
    uint64_t total = 0;
    while (n > 0) {
        size_t in_used = 0, out_got = 0;
        enum libdeflate_result r =
            libdeflate_gzip_decompress_ex(d, src, n, big, big_cap, &in_used, &out_got);
        if (r != LIBDEFLATE_SUCCESS) {
            total = 0;
            break;
        }
        total += out_got;
        src += in_used;
        n -= in_used;
    }
    libdeflate_free_decompressor(d);
    return total;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: gz_libs FILE.gz [RUNS]\n");
        return 2;
    }
    int runs = argc > 2 ? atoi(argv[2]) : 3;
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *src = malloc((size_t)n);
    if (!src || fread(src, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 1;
    }
    fclose(f);
    unsigned char *out = malloc(OUT_CHUNK);
    /* ISIZE of the last member: the decoded size of a one-member file */
    size_t isize = (size_t)src[n - 4] | (size_t)src[n - 3] << 8 | (size_t)src[n - 2] << 16 |
                   (size_t)src[n - 1] << 24;
    size_t big_cap = isize + 1;
    unsigned char *big = malloc(big_cap);
    if (!out || !big)
        return 1;
    const char *names[] = {"zlib (inflate, streaming)", "ISA-L igzip (streaming)",
                           "libdeflate (whole member)"};
    for (int lib = 0; lib < 3; lib++) {
        double best = 1e30;
        uint64_t got = 0;
        for (int k = 0; k < runs; k++) {
            double t0 = now();
            got = lib == 0   ? dec_zlib(src, (size_t)n, out)
                  : lib == 1 ? dec_isal(src, (size_t)n, out)
                             : dec_libdeflate(src, (size_t)n, big, big_cap);
            double t = now() - t0;
            if (t < best)
                best = t;
        }
        if (!got)
            printf("%-28s failed\n", names[lib]);
        else
            printf("%-28s %8.1f MB/s decoded  (%.1f MB in %.3f s, best of %d)\n", names[lib],
                   (double)got / best / 1e6, (double)got / 1e6, best, runs);
    }
    return 0;
}
