/*
 * tok_dump.c - a helper of the tokenizer parity tests (tests/tokenizer/
 * hf_parity.py): encodes records with zp_encode and prints their ids.
 *
 *   tok_dump TOKENIZER INPUT [match_special]
 *
 * INPUT holds records, each a 4-byte little-endian length and that many
 * bytes (any bytes). Output: one line per record, the ids separated by
 * spaces. Exit status 1 with a message on stderr when something fails.
 * With ZP_TOK_DUMP_TIME=1 it prints to stderr the load time and the MB/s of
 * a second pass over all records (one thread), by the clock and by the
 * thread's CPU time.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zephon/tokenizer.h"

static double clock_s(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double now(void) { return clock_s(CLOCK_MONOTONIC); }
/* CPU time of this thread: the steadier figure on a shared machine */
static double cpu(void) { return clock_s(CLOCK_THREAD_CPUTIME_ID); }

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: tok_dump TOKENIZER INPUT [match_special]\n");
        return 2;
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)sz + 1);
    if (!buf || fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 1;
    }
    fclose(f);
    zp_tokenizer_config cfg;
    zp_tokenizer_config_init(&cfg);
    if (argc > 3)
        cfg.match_special = atoi(argv[3]);
    char err[1024];
    zp_tokenizer *tok;
    double t0 = now(), c0 = cpu();
    if (zp_tokenizer_create(argv[1], &cfg, &tok, err, sizeof err) != ZP_OK) {
        fprintf(stderr, "tok_dump: %s\n", err);
        return 1;
    }
    double t_load = now() - t0, c_load = cpu() - c0;
    zp_encoder *enc;
    if (zp_encoder_create(tok, &enc) != ZP_OK) {
        fprintf(stderr, "tok_dump: encoder\n");
        return 1;
    }
    size_t cap = 0;
    int32_t *ids = NULL;
    for (int pass = 0; pass < (getenv("ZP_TOK_DUMP_TIME") ? 2 : 1); pass++) {
        double t1 = now(), c1 = cpu();
        size_t bytes = 0;
        for (long pos = 0; pos + 4 <= sz;) {
            uint32_t n = (uint32_t)buf[pos] | (uint32_t)buf[pos + 1] << 8 |
                         (uint32_t)buf[pos + 2] << 16 | (uint32_t)buf[pos + 3] << 24;
            pos += 4;
            if (pos + (long)n > sz) {
                fprintf(stderr, "tok_dump: truncated input\n");
                return 1;
            }
            size_t need = zp_encode_max_ids(tok, n);
            if (need > cap) {
                cap = need * 2;
                ids = realloc(ids, cap * sizeof *ids);
            }
            size_t m;
            zp_status st = zp_encode(enc, (const char *)buf + pos, n, ids, &m);
            if (st != ZP_OK) {
                fprintf(stderr, "tok_dump: zp_encode failed (%d)\n", (int)st);
                return 1;
            }
            if (pass == 0) {
                for (size_t i = 0; i < m; i++)
                    printf(i ? " %d" : "%d", ids[i]);
                putchar('\n');
            }
            bytes += n;
            pos += n;
        }
        if (pass == 1)
            fprintf(stderr, "load %.3f s (cpu %.3f s), encode %.1f MB/s (cpu %.1f MB/s) (%zu bytes)\n",
                    t_load, c_load, (double)bytes / 1e6 / (now() - t1),
                    (double)bytes / 1e6 / (cpu() - c1), bytes);
    }
    zp_encoder_destroy(enc);
    zp_tokenizer_destroy(tok);
    free(ids);
    free(buf);
    return 0;
}
