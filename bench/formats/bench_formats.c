/*
 * bench_formats.c - the formats read on demand, measured (issue: HDF5 and
 * token formats; docs/hdf5.md, docs/formats.md).
 *
 *   bench_formats fixed FILE.h5 [ROWS [COLS]]
 *     (a) a fixed-shape float32 [ROWS, COLS] dataset "/features" (created
 *     when FILE does not exist; default 262144 x 1024 = 1 GiB), read
 *     (1) with the HDF5 C API in 64 MiB hyperslabs into one buffer, the
 *     reference, and (2) through the pipeline in record mode (batches of
 *     256 rows, [256, COLS] arrays), without and with shuffle; GB/s and
 *     pipeline/reference, medians of ROUNDS (env, default 3) rounds, plus
 *     the time the pipeline's fetch tasks waited for the HDF5 lock.
 *
 *   bench_formats lock FILE.h5
 *     the HDF5 lock's cost: record mode over a chunked, deflate-compressed
 *     float32 dataset (created when missing), which is read through
 *     H5Dread under the lock, with 1 and 2 fetch tasks.
 *
 *   bench_formats tokens JSONL_SPEC H5_SPEC BIN_SPEC
 *     (b) the same documents trained from JSONL.zst with tokenization on
 *     the fly, from pre-tokenized HDF5 and from Megatron .bin/.idx
 *     (`zephon preprocess` output): concat packing, seq_len 2048,
 *     microbatch 8; samples (documents)/s and tokens/s and the ratios to
 *     JSONL, medians of ROUNDS rounds. The token counts must agree.
 *
 * THREADS (env, default 2): the pipeline's threads.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <hdf5.h>

#include "zephon/observe.h"
#include "zephon/dataset.h"
#include "zephon/pipeline.h"
#include "zephon/worksource.h"

#include "../bench_util.h"

static void die(const char *what, const char *msg) { bench_die("bench_formats", what, msg); }

static int env_int(const char *name, int def)
{
    const char *s = getenv(name);
    return s && atoi(s) > 0 ? atoi(s) : def;
}

/* A run over spec: its dataset, worksource (shuffled or not) and a
 * pipeline with pc (threads, parallelism); run_end frees them. */
typedef struct run_h {
    zp_dataset *ds;
    zp_worksource *ws;
    zp_pipeline *p;
} run_h;

static void run_begin(run_h *h, const char *spec, int shuffle, const zp_pipeline_config *pc)
{
    zp_dataset_create(NULL, &h->ds);
    if (zp_dataset_add(h->ds, spec) != ZP_OK || zp_dataset_index(h->ds) != ZP_OK)
        die(spec, zp_dataset_errmsg(h->ds));
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.shuffle = shuffle;
    if (zp_worksource_create(h->ds, &wc, &h->ws) != ZP_OK)
        die("worksource", zp_worksource_errmsg(h->ws));
    if (zp_pipeline_create(h->ws, pc, &h->p) != ZP_OK)
        die("pipeline", zp_pipeline_errmsg(h->p));
}

static void run_end(run_h *h)
{
    zp_pipeline_destroy(h->p);
    zp_worksource_destroy(h->ws);
    zp_dataset_destroy(h->ds);
}

/* ------------------------------------------------------------ (a) fixed */

static void create_fixed(const char *path, hsize_t rows, hsize_t cols)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.part", path);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[2] = {rows, cols};
    hid_t sp = H5Screate_simple(2, dims, NULL);
    hid_t d = H5Dcreate2(f, "features", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0 || d < 0)
        die(path, "cannot create the HDF5 file");
    hsize_t slab = ((hsize_t)64 << 20) / (cols * 4);
    float *buf = malloc(slab * cols * sizeof *buf);
    for (hsize_t r0 = 0; r0 < rows; r0 += slab) {
        hsize_t n = rows - r0 < slab ? rows - r0 : slab;
        for (hsize_t i = 0; i < n * cols; i++)
            buf[i] = (float)((r0 * cols + i) % 1000003) * 0.5f;
        hsize_t start[2] = {r0, 0}, count[2] = {n, cols};
        hid_t ms = H5Screate_simple(2, count, NULL);
        H5Sselect_hyperslab(sp, H5S_SELECT_SET, start, NULL, count, NULL);
        if (H5Dwrite(d, H5T_NATIVE_FLOAT, ms, sp, H5P_DEFAULT, buf) < 0)
            die(path, "write failed");
        H5Sclose(ms);
    }
    free(buf);
    H5Dclose(d);
    H5Sclose(sp);
    H5Fclose(f);
    if (rename(tmp, path) != 0)
        die(path, "rename failed");
}

/* The reference: the whole dataset in 64 MiB hyperslabs, one buffer. */
static double read_reference(const char *path, hsize_t *rows_out, hsize_t *cols_out, double *sum)
{
    double t0 = bench_now();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "features", H5P_DEFAULT);
    if (f < 0 || d < 0)
        die(path, "cannot open /features");
    hid_t sp = H5Dget_space(d);
    hsize_t dims[2];
    H5Sget_simple_extent_dims(sp, dims, NULL);
    hsize_t slab = ((hsize_t)64 << 20) / (dims[1] * 4);
    float *buf = malloc(slab * dims[1] * sizeof *buf);
    double s = 0;
    for (hsize_t r0 = 0; r0 < dims[0]; r0 += slab) {
        hsize_t n = dims[0] - r0 < slab ? dims[0] - r0 : slab;
        hsize_t start[2] = {r0, 0}, count[2] = {n, dims[1]};
        hid_t ms = H5Screate_simple(2, count, NULL);
        H5Sselect_hyperslab(sp, H5S_SELECT_SET, start, NULL, count, NULL);
        if (H5Dread(d, H5T_NATIVE_FLOAT, ms, sp, H5P_DEFAULT, buf) < 0)
            die(path, "read failed");
        H5Sclose(ms);
        s += buf[0] + buf[n * dims[1] - 1]; /* touch: the reads are used */
    }
    free(buf);
    H5Sclose(sp);
    H5Dclose(d);
    H5Fclose(f);
    *rows_out = dims[0];
    *cols_out = dims[1];
    *sum = s;
    return bench_now() - t0;
}

static double read_pipeline(const char *path, int shuffle, int threads, uint64_t *rows_out,
                            double *lock_wait, double *sum)
{
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = threads;
    pc.fetch_parallelism = (size_t)threads;
    pc.chunk_samples = 256;
    pc.prefetch_batches = 4;
    run_h h;
    run_begin(&h, path, shuffle, &pc);
    zp_pipeline *p = h.p;
    if (zp_pipeline_batch(p, 256) != ZP_OK || zp_pipeline_enable_observability(p) != ZP_OK)
        die("pipeline", zp_pipeline_errmsg(p));
    const zp_batch *b;
    zp_status st;
    uint64_t rows = 0;
    double s = 0, t0 = bench_now();
    while ((st = zp_pipeline_next(p, &b)) == ZP_OK) {
        if (b->n_arrays != 1)
            die("pipeline", "expected one array per batch");
        const float *x = b->arrays[0].data;
        size_t n = (size_t)(b->arrays[0].shape[0] * b->arrays[0].shape[1]);
        s += x[0] + x[n - 1];
        rows += b->arrays[0].shape[0];
    }
    double dt = bench_now() - t0;
    if (st != ZP_END)
        die("pipeline", zp_pipeline_errmsg(p));
    zp_fetch_timing ft;
    zp_pipeline_fetch_timing_snapshot(p, &ft);
    *lock_wait = ft.hdf5_lock_wait_seconds;
    run_end(&h);
    *rows_out = rows;
    *sum = s;
    return dt;
}

static int bench_fixed(int argc, char **argv)
{
    const char *path = argv[2];
    hsize_t rows = argc > 3 ? strtoull(argv[3], NULL, 10) : 262144;
    hsize_t cols = argc > 4 ? strtoull(argv[4], NULL, 10) : 1024;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        printf("creating %s: float32 [%llu, %llu]\n", path, (unsigned long long)rows,
               (unsigned long long)cols);
        create_fixed(path, rows, cols);
    }
    int rounds = env_int("ROUNDS", 3), threads = env_int("THREADS", 2);
    double tr[16], tp[16], ts[16], lw = 0, lws = 0, sum;
    uint64_t prow = 0;
    if (rounds > 16)
        rounds = 16;
    for (int r = 0; r < rounds; r++) {
        tr[r] = read_reference(path, &rows, &cols, &sum);
        tp[r] = read_pipeline(path, 0, threads, &prow, &lw, &sum);
        ts[r] = read_pipeline(path, 1, threads, &prow, &lws, &sum);
        if (prow != rows)
            die("pipeline", "row count differs from the dataset's");
    }
    double gb = (double)rows * (double)cols * 4 / 1e9;
    double mr = bench_median(tr, rounds), mp = bench_median(tp, rounds), ms = bench_median(ts, rounds);
    printf("dataset: %s, float32 [%llu, %llu], %.2f GB (page cache: warm after the first read); "
           "medians of %d rounds, pipeline with %d threads, batches of 256 rows\n",
           path, (unsigned long long)rows, (unsigned long long)cols, gb, rounds, threads);
    printf("HDF5 C API, 64 MiB hyperslabs:       %6.2f GB/s\n", gb / mr);
    printf("pipeline, in order:                  %6.2f GB/s | pipeline/reference = %.3f | "
           "HDF5 lock wait %.3f s\n",
           gb / mp, mr / mp, lw);
    printf("pipeline, shuffled:                  %6.2f GB/s | pipeline/reference = %.3f | "
           "HDF5 lock wait %.3f s\n",
           gb / ms, mr / ms, lws);
    return 0;
}

/* ------------------------------------------------------------ the lock */

/* A float32 [rows, cols] dataset "/features" in chunks of 64 rows,
 * deflate level 1: read through H5Dread (and decompressed) under the
 * process's HDF5 lock, unlike contiguous data (pread). */
static void create_chunked(const char *path, hsize_t rows, hsize_t cols)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.part", path);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[2] = {rows, cols}, ch[2] = {64, cols};
    hid_t sp = H5Screate_simple(2, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 2, ch);
    H5Pset_deflate(dcpl, 1);
    hid_t d = H5Dcreate2(f, "features", H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (f < 0 || d < 0)
        die(path, "cannot create the HDF5 file");
    float *buf = malloc(rows * cols * sizeof *buf);
    for (hsize_t i = 0; i < rows * cols; i++)
        buf[i] = (float)(i % 1000) * 0.25f;
    if (H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
        die(path, "write failed");
    free(buf);
    H5Pclose(dcpl);
    H5Dclose(d);
    H5Sclose(sp);
    H5Fclose(f);
    if (rename(tmp, path) != 0)
        die(path, "rename failed");
}

/* Record mode over that file, with 1 and then 2 fetch tasks: records/s,
 * and the lock's wait as a share of the fetch tasks' time. */
/* Runs p to the end of its stream; the seconds it took. Dies (naming
 * what) on an error. */
static double drain(zp_pipeline *p, const char *what)
{
    const zp_batch *b;
    zp_status st;
    double t0 = bench_now();
    while ((st = zp_pipeline_next(p, &b)) == ZP_OK) {
    }
    double dt = bench_now() - t0;
    if (st != ZP_END)
        die(what, zp_pipeline_errmsg(p));
    return dt;
}

static double lock_run(const char *path, int shuffle, int fetch_par, double *wait, double *fetch,
                       uint64_t *n)
{
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = 2;
    pc.fetch_parallelism = (size_t)fetch_par;
    pc.in_flight_chunks = 8;
    run_h h;
    run_begin(&h, path, shuffle, &pc);
    zp_pipeline *p = h.p;
    if (zp_pipeline_batch(p, 64) != ZP_OK || zp_pipeline_enable_observability(p) != ZP_OK)
        die("pipeline", zp_pipeline_errmsg(p));
    double dt = drain(p, path);
    zp_fetch_timing ft;
    zp_pipeline_fetch_timing_snapshot(p, &ft);
    *wait = ft.hdf5_lock_wait_seconds;
    *fetch = ft.fetch_seconds;
    *n = ft.records;
    run_end(&h);
    return dt;
}

static int bench_lock(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        create_chunked(path, 65536, 256);
    int rounds = env_int("ROUNDS", 3);
    if (rounds > 16)
        rounds = 16;
    for (int shuffle = 0; shuffle <= 1; shuffle++) {
        double base = 0;
        for (int par = 1; par <= 2; par++) {
            double t[16], w[16], f[16];
            uint64_t n = 0;
            for (int r = 0; r < rounds; r++)
                t[r] = lock_run(path, shuffle, par, &w[r], &f[r], &n);
            double mt = bench_median(t, rounds), mw = bench_median(w, rounds), mf = bench_median(f, rounds);
            double rps = (double)n / mt;
            if (par == 1)
                base = rps;
            printf("chunked+deflate float32 [65536, 256], %s, %d fetch task%s: %7.0f records/s "
                   "(x%.2f) | HDF5 lock wait %.3f s = %.1f%% of the fetch tasks' %.3f s\n",
                   shuffle ? "shuffled" : "in order", par, par > 1 ? "s" : " ", rps, rps / base,
                   mw, mf > 0 ? 100 * mw / mf : 0, mf);
        }
    }
    return 0;
}

/* ------------------------------------------------------------ (b) tokens */

static double train(const char *spec, int threads, uint64_t *docs, uint64_t *tokens)
{
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = threads;
    pc.fetch_parallelism = (size_t)threads;
    run_h h;
    run_begin(&h, spec, 1, &pc);
    zp_pipeline *p = h.p;
    if (zp_pipeline_tokenize(p, "gpt2", "text", (size_t)threads) != ZP_OK ||
        zp_pipeline_pack(p, ZP_PACK_CONCAT, 2048) != ZP_OK || zp_pipeline_batch(p, 8) != ZP_OK)
        die("pipeline", zp_pipeline_errmsg(p));
    double dt = drain(p, spec);
    zp_pipeline_counts c;
    zp_pipeline_get_counts(p, &c);
    *docs = c.samples;
    *tokens = c.tokens;
    run_end(&h);
    return dt;
}

static int bench_tokens(char **argv)
{
    const char *names[3] = {"JSONL.zst + tokenize", "HDF5 pre-tokenized", "Megatron .bin/.idx"};
    int rounds = env_int("ROUNDS", 3), threads = env_int("THREADS", 2);
    if (rounds > 16)
        rounds = 16;
    double t[3][16];
    uint64_t docs[3] = {0}, toks[3] = {0};
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < 3; k++)
            t[k][r] = train(argv[2 + k], threads, &docs[k], &toks[k]);
    if (docs[1] != docs[0] || docs[2] != docs[0] || toks[1] != toks[0] || toks[2] != toks[0])
        die("tokens", "the three datasets did not give the same documents and tokens");
    printf("%llu documents, %llu tokens (EOT included); concat, seq_len 2048, microbatch 8, %d "
           "threads; medians of %d rounds\n",
           (unsigned long long)docs[0], (unsigned long long)toks[0], threads, rounds);
    double base = 0;
    for (int k = 0; k < 3; k++) {
        double m = bench_median(t[k], rounds), sps = (double)docs[k] / m;
        if (k == 0)
            base = sps;
        printf("%-22s %10.0f samples/s %8.2f M tokens/s | x%.2f of JSONL\n", names[k], sps,
               (double)toks[k] / m / 1e6, sps / base);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "fixed") == 0)
        return bench_fixed(argc, argv);
    if (argc == 5 && strcmp(argv[1], "tokens") == 0)
        return bench_tokens(argv);
    if (argc == 3 && strcmp(argv[1], "lock") == 0)
        return bench_lock(argv[2]);
    fprintf(stderr, "usage: bench_formats fixed FILE.h5 [ROWS [COLS]]\n"
                    "       bench_formats lock FILE.h5\n"
                    "       bench_formats tokens JSONL_SPEC H5_SPEC BIN_SPEC\n");
    return 2;
}
