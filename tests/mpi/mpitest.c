/* mpitest.c - see mpitest.h. */
#include "mpitest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

int mpt_rank, mpt_size;
static int local_failures;

void mpt_init(int *argc, char ***argv)
{
    int provided;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &mpt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mpt_size);
    if (mpt_rank != 0 && !freopen("/dev/null", "w", stdout))
        fprintf(stderr, "rank %d: cannot silence stdout\n", mpt_rank);
}

int mpt_finish(int cmocka_failures)
{
    int any = 0;
    MPI_Allreduce(&cmocka_failures, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (mpt_rank == 0)
        printf("%s at %d rank%s\n", any ? "FAILED" : "passed", mpt_size, mpt_size > 1 ? "s" : "");
    fflush(stdout);
    MPI_Finalize();
    return any ? 1 : 0;
}

void mpt_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt + 1, ap); /* fmt starts with "-" (see MPT_CHECK) */
    va_end(ap);
    fprintf(stderr, "rank %d: %s:%d: check '%s' failed: %s\n", mpt_rank, file, line, cond, msg);
    local_failures++;
}

void mpt_sync(void)
{
    int mine = local_failures, worst = 0, failing = 0, one = local_failures ? 1 : 0;
    local_failures = 0;
    MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&one, &failing, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (worst)
        fail_msg("%d of %d ranks recorded failures (see their stderr)", failing, mpt_size);
}

char *mpt_tmpdir(void)
{
    char buf[512] = {0};
    if (mpt_rank == 0) {
        char *d = zpt_tmpdir();
        if (d)
            snprintf(buf, sizeof buf, "%s", d);
        free(d);
    }
    MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD);
    return buf[0] ? strdup(buf) : NULL;
}

void mpt_rmdir(char *dir)
{
    MPI_Barrier(MPI_COMM_WORLD);
    if (mpt_rank == 0)
        zpt_rmtree(dir);
    free(dir);
}

uint64_t mpt_make_dataset(const char *dir, const char *name, const size_t *n, size_t shards,
                          int64_t bad_global)
{
    uint64_t total = 0;
    for (size_t s = 0; s < shards; s++)
        total += n[s];
    if (mpt_rank == 0) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        FILE *man = fopen(path, "w");
        fprintf(man, "{\"format_version\": 1, \"shards\": [");
        uint64_t g = 0;
        for (size_t s = 0; s < shards; s++) {
            char sp[1024];
            snprintf(sp, sizeof sp, "%s/%s-%02zu.jsonl", dir, name, s);
            FILE *f = fopen(sp, "w");
            for (size_t j = 0; j < n[s]; j++, g++) {
                if ((int64_t)g == bad_global) {
                    fprintf(f, "{\"id\": %llu, \"text\": \"broken\n", (unsigned long long)g);
                    continue;
                }
                fprintf(f, "{\"id\": %llu, \"text\": \"doc %llu", (unsigned long long)g,
                        (unsigned long long)g);
                /* varied lengths, longer towards the end of the dataset */
                for (size_t w = 0; w < (g * 7919) % 23 + (g * 48) / total; w++)
                    fprintf(f, " word%zu", w);
                fprintf(f, "\"}\n");
            }
            fclose(f);
            fprintf(man, "%s{\"path\": \"%s-%02zu.jsonl\", \"samples\": %zu}", s ? ", " : "", name,
                    s, n[s]);
        }
        fprintf(man, "]}\n");
        fclose(man);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return total;
}

void mpt_job_open(mpt_job *j, const char *name, const size_t *n, size_t shards,
                  int64_t bad_global)
{
    memset(j, 0, sizeof *j);
    j->dir = mpt_tmpdir();
    MPT_CHECK(j->dir != NULL);
    j->total = mpt_make_dataset(j->dir, name, n, shards, bad_global);
    char man[600];
    snprintf(man, sizeof man, "%s/%s", j->dir, name);
    const char *specs[] = {man};
    MPT_CHECK(zp_mpi_create(MPI_COMM_WORLD, NULL, &j->m) == ZP_OK);
    zp_status st = zp_mpi_dataset_create(j->m, mpt_rank == 0 ? specs : NULL, mpt_rank == 0 ? 1 : 0,
                                         NULL, &j->ds);
    MPT_CHECK(st == ZP_OK, "%s: %s", zp_status_str(st), zp_mpi_errmsg(j->m));
}

void mpt_job_close(mpt_job *j)
{
    zp_dataset_destroy(j->ds);
    zp_mpi_destroy(j->m);
    mpt_rmdir(j->dir);
    memset(j, 0, sizeof *j);
}

void mpt_minmax_u64(uint64_t v, uint64_t *lo, uint64_t *hi)
{
    MPI_Allreduce(&v, lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&v, hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
}

void mpt_sleep(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}
