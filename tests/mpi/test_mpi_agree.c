/* test_mpi_agree.c - the startup agreement under mpirun (1..4 ranks):
 *  - equal datasets and settings agree; settings that only change speed
 *    (threads, parallelism, fetch_delay_us) may differ;
 *  - a rank given a different manifest fails on every rank (no hang), with
 *    ZP_ERR_MISMATCH naming the ranks on each side;
 *  - a different seed or different extra settings are named the same way;
 *  - a worksource rank that does not match the communicator is refused on
 *    every rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpitest.h"
#include "zephon.h"
#include "zephon/mpi.h"

static const size_t SZ_A[] = {20, 30, 10};
static const size_t SZ_B[] = {20, 30, 10, 5};

typedef struct fix {
    char *dir;
    char a[600], b[600];
    zp_mpi *m;
} fix;

static int setup(void **state)
{
    fix *f = calloc(1, sizeof *f);
    f->dir = mpt_tmpdir();
    mpt_make_dataset(f->dir, "a.json", SZ_A, 3, -1);
    mpt_make_dataset(f->dir, "b.json", SZ_B, 4, -1);
    snprintf(f->a, sizeof f->a, "%s/a.json", f->dir);
    snprintf(f->b, sizeof f->b, "%s/b.json", f->dir);
    if (zp_mpi_create(MPI_COMM_WORLD, NULL, &f->m) != ZP_OK)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fix *f = *state;
    zp_mpi_destroy(f->m);
    mpt_rmdir(f->dir);
    free(f);
    return 0;
}

/* Each rank builds its own dataset (not the broadcast): what a job whose
 * ranks read different files would do. */
static zp_dataset *local_dataset(const char *spec)
{
    zp_dataset *ds = NULL;
    if (zp_dataset_create(NULL, &ds) != ZP_OK || zp_dataset_add(ds, spec) != ZP_OK) {
        zp_dataset_destroy(ds);
        return NULL;
    }
    return ds;
}

static void configs(zp_mpi *m, zp_worksource_config *wc, zp_pipeline_config *pc)
{
    zp_worksource_config_init(wc);
    wc->seed = 1;
    zp_mpi_worksource_config(m, wc);
    zp_pipeline_config_init(pc);
}

static void test_equal_agree(void **state)
{
    fix *f = *state;
    zp_dataset *ds = local_dataset(f->a);
    MPT_CHECK(ds != NULL);
    zp_worksource_config wc;
    zp_pipeline_config pc;
    configs(f->m, &wc, &pc);
    /* speed settings differ between ranks: still agreed */
    pc.threads = 1 + mpt_rank;
    pc.fetch_parallelism = 1 + (size_t)mpt_rank;
    pc.prefetch_batches = 2 + (size_t)mpt_rank;
    pc.fetch_delay_us = mpt_rank == mpt_size - 1 ? 5000 : 0;
    zp_status st = zp_mpi_agree(f->m, ds, &wc, &pc, "tokenize=gpt2 field=text");
    MPT_CHECK(st == ZP_OK, "%s: %s", zp_status_str(st), zp_mpi_errmsg(f->m));
    /* parts may be left out */
    MPT_CHECK(zp_mpi_agree(f->m, NULL, NULL, NULL, NULL) == ZP_OK);
    MPT_CHECK(zp_mpi_agree(f->m, ds, NULL, NULL, NULL) == ZP_OK);
    zp_dataset_destroy(ds);
    mpt_sync();
}

static void test_different_manifest_fails_everywhere(void **state)
{
    fix *f = *state;
    int odd = mpt_size - 1; /* the last rank gets manifest b */
    zp_dataset *ds = local_dataset(mpt_size > 1 && mpt_rank == odd ? f->b : f->a);
    MPT_CHECK(ds != NULL);
    zp_worksource_config wc;
    zp_pipeline_config pc;
    configs(f->m, &wc, &pc);
    zp_status st = zp_mpi_agree(f->m, ds, &wc, &pc, NULL);
    if (mpt_size == 1) {
        MPT_CHECK(st == ZP_OK);
    } else {
        MPT_CHECK(st == ZP_ERR_MISMATCH, "%s", zp_status_str(st));
        const char *msg = zp_mpi_errmsg(f->m);
        MPT_CHECK(strstr(msg, "dataset manifest differs") != NULL, "'%s'", msg);
        char want[64];
        snprintf(want, sizeof want, "rank %d: fingerprint", odd);
        MPT_CHECK(strstr(msg, want) != NULL, "'%s' lacks '%s'", msg, want);
        MPT_CHECK(strstr(msg, "(4 shards, 65 samples)") && strstr(msg, "(3 shards, 60 samples)"),
                  "'%s'", msg);
        /* every rank holds the same message */
        unsigned h = 5381;
        for (const char *c = msg; *c; c++)
            h = h * 33 + (unsigned char)*c;
        unsigned lo, hi;
        MPI_Allreduce(&h, &lo, 1, MPI_UNSIGNED, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&h, &hi, 1, MPI_UNSIGNED, MPI_MAX, MPI_COMM_WORLD);
        MPT_CHECK(lo == hi, "ranks hold different messages");
    }
    zp_dataset_destroy(ds);
    mpt_sync();
}

static void test_different_seed_named(void **state)
{
    fix *f = *state;
    zp_dataset *ds = local_dataset(f->a);
    zp_worksource_config wc;
    zp_pipeline_config pc;
    configs(f->m, &wc, &pc);
    int odd = mpt_size - 1;
    if (mpt_size > 1 && mpt_rank == odd) {
        wc.seed = 7;
        pc.microbatch_size = 16;
    }
    zp_status st = zp_mpi_agree(f->m, ds, &wc, &pc, NULL);
    if (mpt_size == 1) {
        MPT_CHECK(st == ZP_OK);
    } else {
        MPT_CHECK(st == ZP_ERR_MISMATCH);
        const char *msg = zp_mpi_errmsg(f->m);
        char want[96];
        if (mpt_size == 2)
            snprintf(want, sizeof want, "seed differs: rank 0: 1, rank 1: 7");
        else
            snprintf(want, sizeof want, "seed differs: ranks 0-%d: 1, rank %d: 7", odd - 1, odd);
        MPT_CHECK(strstr(msg, want) != NULL, "'%s' lacks '%s'", msg, want);
        MPT_CHECK(strstr(msg, "microbatch_size differs") != NULL, "'%s'", msg);
        MPT_CHECK(strstr(msg, "dataset") == NULL, "'%s'", msg);
    }
    zp_dataset_destroy(ds);
    mpt_sync();
}

static void test_different_extra_named(void **state)
{
    fix *f = *state;
    int odd = mpt_size - 1;
    const char *extra = mpt_size > 1 && mpt_rank == odd ? "tokenize=gpt2 field=body"
                                                         : "tokenize=gpt2 field=text";
    zp_status st = zp_mpi_agree(f->m, NULL, NULL, NULL, extra);
    if (mpt_size == 1) {
        MPT_CHECK(st == ZP_OK);
    } else {
        MPT_CHECK(st == ZP_ERR_MISMATCH);
        const char *msg = zp_mpi_errmsg(f->m);
        char want0[96];
        if (mpt_size == 2)
            snprintf(want0, sizeof want0, "extra settings differ: rank 0: 'tokenize=gpt2 field=text'");
        else
            snprintf(want0, sizeof want0, "extra settings differ: ranks 0-%d: 'tokenize=gpt2 field=text'",
                     odd - 1);
        MPT_CHECK(strstr(msg, want0) != NULL, "'%s' lacks '%s'", msg, want0);
        char want[96];
        snprintf(want, sizeof want, "rank %d: 'tokenize=gpt2 field=body'", odd);
        MPT_CHECK(strstr(msg, want) != NULL, "'%s'", msg);
    }
    mpt_sync();
}

static void test_rank_must_match_comm(void **state)
{
    fix *f = *state;
    zp_worksource_config wc;
    zp_worksource_config_init(&wc); /* rank 0 / world 1 on every rank */
    zp_status st = zp_mpi_agree(f->m, NULL, &wc, NULL, NULL);
    if (mpt_size == 1) {
        MPT_CHECK(st == ZP_OK);
    } else {
        MPT_CHECK(st == ZP_ERR_INVALID, "%s", zp_status_str(st));
        MPT_CHECK(strstr(zp_mpi_errmsg(f->m), "do not match the communicator") != NULL, "'%s'",
                  zp_mpi_errmsg(f->m));
    }
    mpt_sync();
}

int main(int argc, char **argv)
{
    mpt_init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal_agree),
        cmocka_unit_test(test_different_manifest_fails_everywhere),
        cmocka_unit_test(test_different_seed_named),
        cmocka_unit_test(test_different_extra_named),
        cmocka_unit_test(test_rank_must_match_comm),
    };
    return mpt_finish(cmocka_run_group_tests_name("mpi_agree", tests, setup, teardown));
}
