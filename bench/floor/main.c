/*
 * bench_floor - the unavoidable work of a text pipeline over some files
 * (floor.h): read, hash, decompress, parse, encode, in a tight loop.
 *
 *   bench_floor [--threads N] [--rounds R] [--no-hash] [--tokenizer ID] FILE...
 *
 * Prints one line per round and a last line "floor: ... MB/s" (the best
 * round: the floor is a bound, so its fastest measurement is the one to
 * compare against) in MB/s of document text (the "text" strings, 10^6
 * bytes), the unit bench/preprocess and bench/tokenize_cli use.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zephon.h>

#include "floor.h"

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int threads = 1, rounds = 3, hash = 1, i = 1;
    const char *tid = "gpt2";
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc)
            tid = argv[++i];
        else if (strcmp(argv[i], "--no-hash") == 0)
            hash = 0;
        else
            break;
    }
    if (i >= argc || threads < 1 || threads > 1024 || rounds < 1 || rounds > 100) {
        fprintf(stderr, "usage: bench_floor [--threads 1..1024] [--rounds 1..100] [--no-hash] "
                        "[--tokenizer ID] FILE...\n");
        return 2;
    }
    zp_tokenizer *tok;
    char err[256];
    if (zp_tokenizer_create(tid, NULL, &tok, err, sizeof err) != ZP_OK) {
        fprintf(stderr, "bench_floor: tokenizer %s: %s\n", tid, err);
        return 1;
    }
    bench_floor *f = bench_floor_create((const char *const *)(argv + i), (size_t)(argc - i), tok, hash);
    double best = 0, best_cpu = 0;
    bench_floor_result r = {0};
    for (int k = 0; k < rounds; k++) {
        double c0 = cpu_s();
        if (bench_floor_run(f, threads, &r) != 0)
            return 1;
        double cpu = cpu_s() - c0;
        printf("round %d: %.3f s (%.3f s reading), %.2f s CPU, %.1f MB/s of text\n", k, r.seconds,
               r.read_seconds, cpu, (double)r.text_bytes / r.seconds / 1e6);
        if (!best || r.seconds < best) {
            best = r.seconds;
            best_cpu = cpu;
        }
    }
    printf("floor: %d threads, %llu records, %llu tokens, %.1f MB of text: %.1f MB/s (best of %d), "
           "%.2f s CPU\n", threads, (unsigned long long)r.records, (unsigned long long)r.tokens,
           (double)r.text_bytes / 1e6, (double)r.text_bytes / best / 1e6, rounds, best_cpu);
    bench_floor_destroy(f);
    zp_tokenizer_destroy(tok);
    return 0;
}
