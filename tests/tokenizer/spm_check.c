/*
 * spm_check.c - helper of test_spm_parity.py (SentencePiece .model parity)
 * and of bench/tokenizer/bench_spm.py.
 *
 *   spm_check MODEL                 load; print "vocab EOT BOS" or the error (exit 1)
 *   spm_check MODEL IN OUT          IN: strings as [u32 little-endian length][bytes];
 *                                        OUT: one line of ids per string
 *   spm_check --norm MODEL IN OUT   the same, lines of normalized text (hex)
 *   spm_check --bench MODEL IN SECS MB/s of one thread encoding IN's strings
 *                                        again and again for about SECS seconds
 *
 * Every string goes through zp_encode() (room for zp_encode_max_ids() ids)
 * and through the model's own encoder: both must agree, within the bound.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/tokenizer/spm_model.h"
#include "base/tokenizer/tok_internal.h"
#include "zephon/tokenizer.h"

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 20, n = 0;
    unsigned char *b = malloc(cap);
    for (;;) {
        size_t got = fread(b + n, 1, cap - n, f);
        n += got;
        if (n < cap)
            break;
        cap *= 2;
        b = realloc(b, cap);
    }
    fclose(f);
    *len = n;
    return b;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int norm = 0, bench = 0;
    if (argc > 1 && strcmp(argv[1], "--norm") == 0)
        norm = 1, argv++, argc--;
    else if (argc > 1 && strcmp(argv[1], "--bench") == 0)
        bench = 1, argv++, argc--;
    if (argc != 2 && argc != 4 && !(bench && argc == 4)) {
        fprintf(stderr, "usage: spm_check [--norm|--bench] MODEL [IN OUT|IN SECS]\n");
        return 2;
    }
    char err[1024];
    zp_tokenizer *tok = NULL;
    double t0 = now(), tc0 = cpu_now();
    zp_status st = zp_tokenizer_create(argv[1], NULL, &tok, err, sizeof err);
    double load_s = now() - t0, load_cpu = cpu_now() - tc0;
    if (st != ZP_OK) {
        printf("ERROR %s\n", err);
        return 1;
    }
    if (argc == 2) {
        /* load time: wall clock, then CPU time of the thread */
        printf("%zu %d %d %.4f %.4f\n", zp_tokenizer_vocab_size(tok), (int)zp_tokenizer_eot(tok),
               (int)zpi_spm_bos(tok->spm), load_s, load_cpu);
        zp_tokenizer_destroy(tok);
        return 0;
    }
    size_t len;
    unsigned char *in = read_all(argv[2], &len);
    if (!in) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 2;
    }
    zp_encoder *enc = NULL;
    zpi_spm_enc *se = zpi_spm_enc_create(tok);
    if (zp_encoder_create(tok, &enc) != ZP_OK || !se) {
        fprintf(stderr, "out of memory\n");
        return 2;
    }
    size_t cap = 1 << 16;
    int32_t *ids = malloc(cap * sizeof *ids), *ids2 = malloc(cap * sizeof *ids2);
    if (bench) {
        double secs = atof(argv[3]), t = now(), c0 = cpu_now(), total = 0;
        size_t bytes = 0, tokens = 0;
        int passes = 0;
        do {
            for (size_t p = 0; p + 4 <= len;) {
                uint32_t n;
                memcpy(&n, in + p, 4);
                p += 4;
                size_t need = zpi_spm_max_ids(tok->spm, n);
                if (need > cap) {
                    cap = need;
                    ids = realloc(ids, cap * sizeof *ids);
                }
                size_t got;
                if (zpi_spm_encode(se, (const char *)in + p, n, ids, cap, &got) != ZP_OK)
                    return 3;
                bytes += n;
                p += n;
                if (passes == 0)
                    tokens += got;
            }
            passes++;
            total = now() - t;
        } while (total < secs);
        double cpu = cpu_now() - c0;
        printf("%.2f MB/s (CPU %.2f MB/s; %zu bytes in %.3f s, %d passes), %zu tokens a pass, "
               "load %.4f s\n", bytes / total / 1e6, bytes / cpu / 1e6, bytes, total, passes,
               tokens, load_s);
        return 0;
    }
    FILE *out = fopen(argv[3], "w");
    if (!out)
        return 2;
    int bad = 0;
    for (size_t p = 0; p + 4 <= len;) {
        uint32_t n;
        memcpy(&n, in + p, 4);
        p += 4;
        const char *s = (const char *)in + p;
        p += n;
        if (norm) {
            size_t nl;
            const char *q = zpi_spm_normalize(se, s, n, &nl);
            for (size_t i = 0; q && i < nl; i++)
                fprintf(out, "%02x", (unsigned char)q[i]);
            fputc('\n', out);
            continue;
        }
        size_t need = zpi_spm_max_ids(tok->spm, n);
        if (need > cap) {
            cap = need;
            ids = realloc(ids, cap * sizeof *ids);
            ids2 = realloc(ids2, cap * sizeof *ids2);
        }
        size_t got = 0, got2 = 0;
        st = zpi_spm_encode(se, s, n, ids, cap, &got);
        if (st != ZP_OK) {
            fprintf(out, "ERROR %d\n", (int)st);
            continue;
        }
        for (size_t i = 0; i < got; i++)
            fprintf(out, i ? " %d" : "%d", (int)ids[i]);
        fputc('\n', out);
        /* the public call, with room for zp_encode_max_ids() ids: the same */
        if (zp_encode_max_ids(tok, n) != need || got > need) {
            fprintf(stderr, "zp_encode_max_ids(%u) = %zu, spm bound %zu, ids %zu\n", n,
                    zp_encode_max_ids(tok, n), need, got);
            bad = 1;
        }
        st = zp_encode(enc, s, n, ids2, &got2);
        if (st != ZP_OK || got2 != got || memcmp(ids, ids2, got * 4) != 0) {
            fprintf(stderr, "zp_encode differs from the model's encoder on string at %zu\n",
                    p - n - 4);
            bad = 1;
        }
    }
    fclose(out);
    zpi_spm_enc_destroy(se);
    zp_encoder_destroy(enc);
    zp_tokenizer_destroy(tok);
    free(in);
    free(ids);
    free(ids2);
    return bad ? 4 : 0;
}
