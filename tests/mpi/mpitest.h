/*
 * mpitest.h - helpers for cmocka tests that run as MPI programs (under
 * mpirun, 1..N ranks).
 *
 * Rules that keep a failing test from hanging the others:
 *  - checks inside a test do not longjmp: MPT_CHECK records a failure on
 *    this rank and goes on, so every rank reaches every collective;
 *  - mpt_sync() (collective) combines the failures of all ranks with
 *    MPI_Allreduce and fails the test on every rank when any rank failed;
 *    each failing rank's messages are on its stderr, prefixed with its rank;
 *  - normal output (cmocka's progress lines) comes from rank 0 only: the
 *    other ranks' stdout goes to /dev/null (their stderr stays).
 * ctest gives every MPI test a TIMEOUT in case a rank dies anyway.
 */
#ifndef ZP_MPITEST_H
#define ZP_MPITEST_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <mpi.h>

#include "zephon/mpi.h"

extern int mpt_rank, mpt_size;

/* MPI_Init_thread, rank/size, quiet stdout on ranks other than 0. */
void mpt_init(int *argc, char ***argv);
/* Run the group; combine with the other ranks; MPI_Finalize. @return the
 * process exit status (0 only when every rank passed every test). */
int mpt_finish(int cmocka_failures);

/* Record a failure on this rank (no longjmp). */
void mpt_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define MPT_CHECK(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond))                                                                               \
            mpt_fail(__FILE__, __LINE__, #cond, "-" __VA_ARGS__);                                  \
    } while (0)

/* Collective: fail the current test on every rank when any rank recorded a
 * failure since the last sync. */
void mpt_sync(void);

/* Rank 0 makes a fresh folder; every rank gets its path (one node: they
 * share /tmp). Caller frees; rank 0 removes it with mpt_rmdir(). */
char *mpt_tmpdir(void);
void mpt_rmdir(char *dir);

/* Write `shards` JSONL shards of n[i] records into dir (rank 0), and a
 * manifest dir/<name> listing them; every rank waits for it. Record j of
 * shard s is {"id": <global id>, "text": "..."} with text of varied length.
 * bad_global >= 0 makes that record malformed JSON. Returns the total. */
uint64_t mpt_make_dataset(const char *dir, const char *name, const size_t *n, size_t shards,
                          int64_t bad_global);

/* A test's job on MPI_COMM_WORLD: a fresh folder holding the dataset
 * mpt_make_dataset(dir, name, n, shards, bad_global) writes, a handle with
 * the default settings, and the dataset built by rank 0 from the manifest
 * dir/<name> and broadcast (zp_mpi_dataset_create; only rank 0 names it).
 * Failures are recorded with MPT_CHECK; what could not be made is NULL. */
typedef struct mpt_job {
    char *dir;
    uint64_t total; /* samples in the dataset */
    zp_mpi *m;
    zp_dataset *ds;
} mpt_job;
void mpt_job_open(mpt_job *j, const char *name, const size_t *n, size_t shards,
                  int64_t bad_global);
/* Destroy the dataset and the handle; remove the folder (collective). */
void mpt_job_close(mpt_job *j);

/* Collective: the least and the greatest of v over the ranks. */
void mpt_minmax_u64(uint64_t v, uint64_t *lo, uint64_t *hi);

/* Sleep s seconds. */
void mpt_sleep(double s);

#endif
