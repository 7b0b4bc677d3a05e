/*
 * bench_startup.c - startup at job scale (issue 24, point 6): the time to
 * every rank's first batch and the bytes each rank reads on the way, with
 * a manifest of many shards.
 *
 *   bench_startup make DIR N       N shards of 2 records (DIR/s/) and
 *                                  DIR/manifest.json with their sizes and
 *                                  counts (written fast: no stat, one
 *                                  write per file)
 *   mpirun ... bench_startup run MANIFEST [ROUNDS]
 *
 * run: every rank, after an MPI_Barrier, times zp_mpi_create,
 * zp_mpi_dataset_create (rank 0 reads the manifest and broadcasts it),
 * zp_mpi_worksource_create, a pipeline (batches of 8 records, 1 thread),
 * zp_mpi_agree and the first zp_pipeline_next; and reads /proc/self/io
 * before and after (rchar: bytes through read() and its kin, from files,
 * pipes and sockets alike; syscr: those calls). Rank 0 prints the slowest
 * rank's time to its first batch, the phases of it, and the bytes read
 * by rank 0 and by the other ranks (max and median), against the
 * manifest's size. ROUNDS (default 3) repeats the whole startup (the
 * handles destroyed between) and prints each round: the first pays for a
 * cold page cache of the shard folder, the others show the steady state.
 *
 * The stat() calls on shard files are counted by tests/mpi/fscount.c when
 * it is preloaded (bench/startup/run.sh does).
 */
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zephon.h>
#include <zephon/mpi.h>

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "bench_startup: %s: %s\n", what, msg);
    exit(1);
}

/* ------------------------------------------------------------ make */

static int make(const char *dir, long n)
{
    char path[4096], line[256];
    snprintf(path, sizeof path, "%s/s", dir);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        die(dir, strerror(errno));
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
        die(path, strerror(errno));
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    FILE *m = fopen(path, "w");
    if (!m)
        die(path, strerror(errno));
    fprintf(m, "{\"format_version\": 1, \"shards\": [\n");
    for (long i = 0; i < n; i++) {
        int len = snprintf(line, sizeof line,
                           "{\"text\": \"shard %ld record 0\"}\n{\"text\": \"shard %ld record 1\"}\n",
                           i, i);
        snprintf(path, sizeof path, "%s/s/shard-%06ld.jsonl", dir, i);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || write(fd, line, (size_t)len) != len || close(fd) != 0)
            die(path, strerror(errno));
        fprintf(m, "%s{\"path\": \"s/shard-%06ld.jsonl\", \"format\": \"jsonl\", \"bytes\": %d, "
                   "\"samples\": 2}\n",
                i ? "," : "", i, len);
    }
    fprintf(m, "]}\n");
    if (fclose(m) != 0)
        die("manifest", strerror(errno));
    return 0;
}

/* ------------------------------------------------------------ run */

typedef struct io_counts {
    double rchar, read_bytes, syscr;
} io_counts;

static io_counts io_now(void)
{
    io_counts c = {0, 0, 0};
    FILE *f = fopen("/proc/self/io", "r");
    char k[64];
    unsigned long long v;
    while (f && fscanf(f, "%63[^:]: %llu\n", k, &v) == 2) {
        if (!strcmp(k, "rchar"))
            c.rchar = (double)v;
        else if (!strcmp(k, "read_bytes"))
            c.read_bytes = (double)v;
        else if (!strcmp(k, "syscr"))
            c.syscr = (double)v;
    }
    if (f)
        fclose(f);
    return c;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Max and median of v[from .. n) (sorts that part). */
static void maxmed(double *v, int from, int n, double *mx, double *md)
{
    int k = n - from;
    if (k <= 0) {
        *mx = *md = 0;
        return;
    }
    qsort(v + from, (size_t)k, sizeof *v, cmp_d);
    *mx = v[n - 1];
    *md = k % 2 ? v[from + k / 2] : (v[from + k / 2 - 1] + v[from + k / 2]) / 2;
}

#define NF 8 /* per rank: t_create, t_dataset, t_ws, t_first, rchar, read_bytes, syscr, shards */

static void one_round(const char *manifest, int round, int rank, int size, off_t mbytes)
{
    MPI_Barrier(MPI_COMM_WORLD);
    io_counts a = io_now();
    double t0 = MPI_Wtime();
    zp_mpi *m = NULL;
    if (zp_mpi_create(MPI_COMM_WORLD, NULL, &m) != ZP_OK)
        die("zp_mpi_create", zp_mpi_errmsg(m));
    double t1 = MPI_Wtime();
    zp_dataset *ds = NULL;
    if (zp_mpi_dataset_create(m, &manifest, 1, NULL, &ds) != ZP_OK)
        die("zp_mpi_dataset_create", zp_mpi_errmsg(m));
    double t2 = MPI_Wtime();
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.seed = 24;
    zp_worksource *ws = NULL;
    if (zp_mpi_worksource_create(m, ds, &wc, &ws) != ZP_OK)
        die("zp_mpi_worksource_create", zp_mpi_errmsg(m));
    double t3 = MPI_Wtime();
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = 1;
    pc.epochs = 1;
    zp_pipeline *p = NULL;
    if (zp_pipeline_create(ws, &pc, &p) != ZP_OK || zp_pipeline_batch(p, 8) != ZP_OK)
        die("pipeline", zp_pipeline_errmsg(p));
    zp_mpi_worksource_config(m, &wc);
    if (zp_mpi_agree(m, ds, &wc, &pc, "bench=startup") != ZP_OK)
        die("zp_mpi_agree", zp_mpi_errmsg(m));
    const zp_batch *b;
    if (zp_pipeline_next(p, &b) != ZP_OK)
        die("first batch", zp_pipeline_errmsg(p));
    double t4 = MPI_Wtime();
    io_counts z = io_now();
    double mine[NF] = {t1 - t0,
                       t2 - t0,
                       t3 - t0,
                       t4 - t0,
                       z.rchar - a.rchar,
                       z.read_bytes - a.read_bytes,
                       z.syscr - a.syscr,
                       (double)zp_dataset_num_shards(ds)};
    double *all = rank == 0 ? malloc(sizeof(double) * NF * (size_t)size) : NULL;
    MPI_Gather(mine, NF, MPI_DOUBLE, all, NF, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    zp_dataset_destroy(ds);
    zp_mpi_destroy(m);
    if (rank != 0)
        return;
    double *col = malloc(sizeof(double) * (size_t)size);
    double mx[NF], md[NF], mx1[NF], md1[NF];
    for (int f = 0; f < NF; f++) {
        for (int r = 0; r < size; r++)
            col[r] = all[r * NF + f];
        double r0 = col[0];
        maxmed(col, 0, size, &mx[f], &md[f]);
        for (int r = 0; r < size; r++)
            col[r] = all[r * NF + f];
        maxmed(col, 1, size, &mx1[f], &md1[f]);
        all[f] = r0; /* (rank 0's row is read below) */
    }
    printf("round %d: %d ranks, %.0f shards, manifest %.2f MB\n", round, size, all[7],
           (double)mbytes / 1e6);
    printf("  time to every rank's first batch: %.3f s (slowest rank; median %.3f s)\n", mx[3],
           md[3]);
    printf("    of which: zp_mpi_create %.3f s, zp_mpi_dataset_create %.3f s, worksource %.3f s "
           "(slowest rank, from the start)\n",
           mx[0], mx[1], mx[2]);
    printf("  read at startup, rank 0: %.2f MB (rchar; %.0f read calls, %.2f MB from the disk)\n",
           all[4] / 1e6, all[6], all[5] / 1e6);
    printf("  read at startup, ranks 1..%d: max %.2f MB, median %.2f MB (rchar; max %.0f read "
           "calls, %.2f MB from the disk)\n",
           size - 1, mx1[4] / 1e6, md1[4] / 1e6, mx1[6], mx1[5] / 1e6);
    printf("  job total %.2f MB read = %.2f x the manifest\n",
           (all[4] + md1[4] * (size - 1)) / 1e6,
           (all[4] + md1[4] * (size - 1)) / (double)(mbytes ? mbytes : 1));
    fflush(stdout);
    free(col);
    free(all);
}

int main(int argc, char **argv)
{
    if (argc >= 4 && !strcmp(argv[1], "make"))
        return make(argv[2], atol(argv[3]));
    if (argc < 3 || strcmp(argv[1], "run") != 0) {
        fprintf(stderr, "usage: bench_startup make DIR N | bench_startup run MANIFEST [ROUNDS]\n");
        return 2;
    }
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *manifest = argv[2];
    int rounds = argc > 3 ? atoi(argv[3]) : 3;
    struct stat sb;
    off_t mbytes = rank == 0 && stat(manifest, &sb) == 0 ? sb.st_size : 0;
    for (int i = 0; i < rounds; i++)
        one_round(manifest, i + 1, rank, size, mbytes);
    MPI_Finalize();
    return 0;
}
