/*
 * tiktoken_check.c - helper of the tiktoken-family parity test
 * (tests/tokenizer/tiktoken_parity.py): runs Zephon on records and prints
 * what the script compares with the references.
 *
 *   tiktoken_check ids TOKENIZER INPUT     ids of each record (zp_encode)
 *   tiktoken_check pieces PATTERN INPUT    pre-tokenizer pieces of each
 *                                          record: PATTERN is a known name
 *                                          (gpt2, cl100k, qwen2, o200k) or
 *                                          "re:" and a regex (zpi_pretok_create)
 *   tiktoken_check roundtrip TOKENIZER INPUT
 *                                          decode(encode(x)) == x for each
 *   tiktoken_check speed TOKENIZER INPUT   MB/s of one thread, best of 3
 *   tiktoken_check kind REGEX -            the scanner zpi_pretok_create
 *                                          picks for REGEX ("regex": PCRE2)
 *
 * INPUT holds records, each a 4-byte little-endian length and that many
 * bytes (any bytes). Output, one line per record: the ids separated by
 * spaces; or the pieces' end offsets, each prefixed with '-' when the piece
 * is text between matches rather than a match. roundtrip prints "ok N";
 * speed "mbps X load_ms Y". Exit status 1 with a message on stderr when
 * something fails.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/tokenizer/pretok.h"
#include "zephon/tokenizer.h"

typedef struct rec {
    const char *s;
    size_t n;
} rec;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return NULL;
    }
    size_t cap = 1 << 20, n = 0;
    char *b = malloc(cap);
    size_t got;
    while (b && (got = fread(b + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    fclose(f);
    *len = n;
    return b;
}

static rec *parse(const char *buf, size_t len, size_t *count)
{
    size_t cap = 1024, n = 0, pos = 0;
    rec *r = malloc(cap * sizeof *r);
    while (r && pos + 4 <= len) {
        const unsigned char *p = (const unsigned char *)buf + pos;
        size_t l = (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 | (size_t)p[3] << 24;
        pos += 4;
        if (l > len - pos) {
            fprintf(stderr, "tiktoken_check: truncated record %zu\n", n);
            free(r);
            return NULL;
        }
        if (n == cap) {
            rec *nr = realloc(r, cap * 2 * sizeof *r);
            if (!nr) {
                free(r);
                return NULL;
            }
            r = nr;
            cap *= 2;
        }
        r[n].s = buf + pos;
        r[n].n = l;
        n++;
        pos += l;
    }
    *count = n;
    return r;
}

static int run_pieces(const char *pattern, const rec *r, size_t n)
{
    zpi_err err;
    zpi_err_clear(&err);
    zpi_pretok *pt = NULL;
    zp_status st = strncmp(pattern, "re:", 3) == 0 ? zpi_pretok_create(pattern + 3, &pt, &err)
                                                   : zpi_pretok_create_known(pattern, &pt, &err);
    if (st != ZP_OK) {
        fprintf(stderr, "tiktoken_check: %s\n", zpi_err_msg(&err));
        return 1;
    }
    void *scratch = NULL;
    if (zpi_pretok_scratch_create(pt, &scratch) != ZP_OK) {
        zpi_pretok_destroy(pt);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        size_t pos = 0;
        int first = 1;
        while (pos < r[i].n) {
            int m;
            size_t e = zpi_pretok_find(pt, r[i].s, r[i].n, pos, scratch, &m);
            if (e <= pos) {
                fprintf(stderr, "tiktoken_check: record %zu: no progress at %zu\n", i, pos);
                return 1;
            }
            printf(first ? "%s%zu" : " %s%zu", m ? "" : "-", e);
            first = 0;
            pos = e;
        }
        putchar('\n');
    }
    zpi_pretok_scratch_destroy(scratch);
    zpi_pretok_destroy(pt);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: tiktoken_check ids|pieces|roundtrip|speed|kind ARG INPUT\n");
        return 2;
    }
    if (strcmp(argv[1], "kind") == 0) {
        zpi_err err;
        zpi_pretok *pt;
        if (zpi_pretok_create(argv[2], &pt, &err) != ZP_OK) {
            fprintf(stderr, "tiktoken_check: %s\n", zpi_err_msg(&err));
            return 1;
        }
        printf("%s\n", zpi_pretok_name(pt));
        zpi_pretok_destroy(pt);
        return 0;
    }
    size_t len, n;
    char *buf = read_all(argv[3], &len);
    rec *r = buf ? parse(buf, len, &n) : NULL;
    if (!r)
        return 1;
    if (strcmp(argv[1], "pieces") == 0) {
        int rc = run_pieces(argv[2], r, n);
        free(r);
        free(buf);
        return rc;
    }
    char msg[1024];
    zp_tokenizer *tok = NULL;
    double t0 = now();
    if (zp_tokenizer_create(argv[2], NULL, &tok, msg, sizeof msg) != ZP_OK) {
        fprintf(stderr, "tiktoken_check: %s\n", msg);
        return 1;
    }
    double load_ms = (now() - t0) * 1e3;
    zp_encoder *enc = NULL;
    if (zp_encoder_create(tok, &enc) != ZP_OK)
        return 1;
    size_t maxn = 1, total = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i].n > maxn)
            maxn = r[i].n;
        total += r[i].n;
    }
    int32_t *ids = malloc(maxn * sizeof *ids);
    char *out = malloc(maxn);
    if (!ids || !out)
        return 1;
    int rc = 0;
    if (strcmp(argv[1], "speed") == 0) {
        double best = 1e30;
        for (int pass = 0; pass < 3; pass++) {
            double a = now();
            for (size_t i = 0; i < n; i++) {
                size_t k;
                if (zp_encode(enc, r[i].s, r[i].n, ids, &k) != ZP_OK)
                    return 1;
            }
            double d = now() - a;
            if (d < best)
                best = d;
        }
        printf("mbps %.2f load_ms %.1f\n", (double)total / best / 1e6, load_ms);
    }
    for (size_t i = 0; i < n && strcmp(argv[1], "speed") != 0; i++) {
        size_t k;
        if (zp_encode(enc, r[i].s, r[i].n, ids, &k) != ZP_OK) {
            fprintf(stderr, "tiktoken_check: zp_encode failed on record %zu\n", i);
            rc = 1;
            break;
        }
        if (strcmp(argv[1], "ids") == 0) {
            for (size_t j = 0; j < k; j++)
                printf(j ? " %d" : "%d", (int)ids[j]);
            putchar('\n');
        } else {
            size_t ol;
            if (zp_decode(tok, ids, k, out, maxn, &ol) != ZP_OK || ol != r[i].n ||
                memcmp(out, r[i].s, ol) != 0) {
                fprintf(stderr, "tiktoken_check: record %zu does not round-trip\n", i);
                rc = 1;
                break;
            }
        }
    }
    if (rc == 0 && strcmp(argv[1], "roundtrip") == 0)
        printf("ok %zu\n", n);
    free(ids);
    free(out);
    free(r);
    free(buf);
    zp_encoder_destroy(enc);
    zp_tokenizer_destroy(tok);
    return rc;
}
