/*
 * bench_parquet.c - the Parquet reader's decode speed (src/formats/parquet.h):
 * every row of each file read as JSON lines in segments of SEG rows (as the
 * segment reader asks for them), one thread, best of PASSES passes.
 *
 *   bench_parquet [-s SEG] [-p PASSES] FILE.parquet...
 *
 * Prints per file: rows, stored MB, JSON MB, and the best pass's records/s,
 * MB/s of JSON text and MB/s of stored bytes (wall clock), and MB/s of
 * JSON text per second of the thread's CPU time (steadier on a shared
 * machine). bench/parquet/run.sh makes the
 * files (pyarrow) and runs it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "formats/parquet.h"

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    uint64_t seg = 4096;
    int passes = 3, opt;
    while ((opt = getopt(argc, argv, "s:p:")) != -1) {
        if (opt == 's')
            seg = strtoull(optarg, NULL, 10);
        else if (opt == 'p')
            passes = atoi(optarg);
        else
            return 2;
    }
    if (optind >= argc || seg == 0 || passes < 1) {
        fprintf(stderr, "usage: bench_parquet [-s SEG] [-p PASSES] FILE.parquet...\n");
        return 2;
    }
    printf("%-22s %7s %9s %7s %10s %9s %11s %13s\n", "file", "rows", "stored_MB", "json_MB",
           "records/s", "json_MB/s", "stored_MB/s", "json_MB/cpu_s");
    for (int a = optind; a < argc; a++) {
        zpi_err err = {0};
        uint64_t rows = 0;
        double best = 1e30, best_cpu = 1e30;
        uint64_t json_bytes = 0, stored = 0;
        zpi_load_bufs bufs = {0};
        for (int p = 0; p < passes; p++) {
            /* each pass opens the file: the footer and every row group are read again */
            double t0 = zpi_now(), c0 = cpu_now();
            zpi_pq_file *f;
            if (zpi_pq_open(argv[a], argv[a], &f, &err) != ZP_OK) {
                fprintf(stderr, "%s\n", zpi_err_msg(&err));
                return 1;
            }
            rows = zpi_pq_num_rows(f);
            json_bytes = stored = 0;
            for (uint64_t at = 0; at < rows; at += seg) {
                uint64_t n = rows - at < seg ? rows - at : seg;
                zpi_shard sh;
                if (zpi_pq_read_rows(f, at, n, &bufs, &sh, &err) != ZP_OK) {
                    fprintf(stderr, "%s\n", zpi_err_msg(&err));
                    return 1;
                }
                json_bytes += sh.data_len;
                stored += sh.file_bytes;
                /* the buffer back for the next segment, as the fetch operator does */
                bufs.data = sh.data;
                bufs.data_cap = sh.data_cap;
                sh.data = NULL;
                zpi_shard_free(&sh);
            }
            zpi_pq_close(f);
            double t = zpi_now() - t0, c = cpu_now() - c0;
            if (t < best)
                best = t;
            if (c < best_cpu)
                best_cpu = c;
        }
        free(bufs.data);
        const char *base = strrchr(argv[a], '/');
        printf("%-22s %7llu %9.1f %7.1f %10.0f %9.1f %11.1f %13.1f\n", base ? base + 1 : argv[a],
               (unsigned long long)rows, stored / 1e6, json_bytes / 1e6, rows / best,
               json_bytes / 1e6 / best, stored / 1e6 / best, json_bytes / 1e6 / best_cpu);
    }
    return 0;
}
