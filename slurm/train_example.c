/*
 * train_example.c - a training loop fed by Zephon under MPI, the program
 * slurm/zephon-with-training.sbatch runs. Copy the loop into your trainer.
 *
 *   srun --mpi=pmix example_mpi_train DATA REPORT_DIR [STEPS] [STEP_SECONDS]
 *
 * DATA: a manifest, glob or shard; REPORT_DIR: where rank 0 writes the
 * cluster fetch-timing report; STEPS: training steps (default 200; fewer
 * when the data ends first); STEP_SECONDS: the simulated compute of one
 * step (default 0.01). Every 20 steps a report window is gathered without
 * blocking the loop; at the end the final report is written.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <mpi.h>

#include "zephon.h"
#include "zephon/mpi.h"

static void compute(double seconds) /* stands in for forward + backward + allreduce */
{
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
}

static int fail(zp_mpi *m, const char *what, zp_status st)
{
    fprintf(stderr, "rank %d: %s: %s: %s\n", zp_mpi_rank(m), what, zp_status_str(st),
            zp_mpi_errmsg(m));
    return 1;
}

static int train(zp_mpi *m, const char *data, const char *report_dir, long steps, double step_s)
{
    int rc = 1;
    zp_dataset *ds = NULL;
    zp_worksource *ws = NULL;
    zp_pipeline *p = NULL;
    zp_cluster_report *rep = NULL;
    zp_status st;

    /* rank 0 reads the manifest once; every rank gets it */
    if ((st = zp_mpi_dataset_create(m, &data, 1, NULL, &ds)) != ZP_OK)
        return fail(m, "dataset", st);
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.seed = 1234;
    if ((st = zp_mpi_worksource_create(m, ds, &wc, &ws)) != ZP_OK) {
        fail(m, "worksource", st);
        goto out;
    }
    zp_mpi_worksource_config(m, &wc);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc); /* threads: OMP_NUM_THREADS */
    pc.seq_len = 256;
    pc.microbatch_size = 4;
    /* every rank must tokenize and pack alike: say so in the agreement */
    if ((st = zp_mpi_agree(m, ds, &wc, &pc, "tokenize=gpt2 field=text pack=concat")) != ZP_OK) {
        fail(m, "agreement", st);
        goto out;
    }
    zp_status local = zp_pipeline_create(ws, &pc, &p);
    if (local == ZP_OK)
        local = zp_pipeline_tokenize(p, "gpt2", "text", 2);
    if (local == ZP_OK)
        local = zp_pipeline_pack(p, ZP_PACK_CONCAT, pc.seq_len);
    if (local == ZP_OK)
        local = zp_pipeline_enable_observability(p);
    if ((st = zp_mpi_agree_status(m, local, "cannot build the pipeline")) != ZP_OK) {
        fail(m, "pipeline", st);
        goto out;
    }

    const zp_batch *b;
    zp_mpi_input in;
    long step = 0;
    while (step < steps && (st = zp_mpi_next(m, p, &b)) == ZP_OK) {
        compute(step_s); /* train on b->tokens, b->loss_mask, b->segment_ids */
        step++;
        if (zp_mpi_report_pending(m)) {
            int done = 0;
            zp_cluster_report *w = NULL;
            zp_mpi_report_test(m, &done, &w); /* progresses the gather; cheap */
            zp_cluster_report_destroy(w);
        }
        if (step % 20 == 0) {
            if (zp_mpi_report_pending(m))
                zp_mpi_report_wait(m, NULL);
            if (zp_mpi_input_from_pipeline(p, &in) == ZP_OK)
                zp_mpi_report_start(m, &in, ZP_MPI_REPORT_WINDOW);
        }
    }
    if (st != ZP_OK && st != ZP_END) {
        fail(m, "next", st);
        goto out;
    }
    if (zp_mpi_report_pending(m))
        zp_mpi_report_wait(m, NULL);
    zp_status have = zp_mpi_input_from_pipeline(p, &in);
    if ((st = zp_mpi_report(m, have == ZP_OK ? &in : NULL, ZP_MPI_REPORT_FINAL, &rep)) != ZP_OK) {
        fail(m, "report", st);
        goto out;
    }
    /* the coverage certificate: every sample of each epoch once? (collective) */
    if ((st = zp_mpi_report_coverage(m, p, rep)) != ZP_OK) {
        fail(m, "coverage", st);
        goto out;
    }
    rc = 0;
    if (rep) { /* rank 0 */
        char err[512];
        if (zp_cluster_report_write(rep, report_dir, err, sizeof err) != ZP_OK) {
            fprintf(stderr, "report: %s\n", err);
            rc = 1;
        }
        printf("%ld steps on %d ranks\n%s\nreport: %s/report.html\n", step, zp_mpi_size(m),
               zp_cluster_report_verdict(rep), report_dir);
        const zp_coverage_cert *cov;
        size_t n = zp_cluster_report_coverage(rep, &cov);
        for (size_t i = 0; i < n; i++) {
            char line[512];
            zp_coverage_cert_line(&cov[i], line, sizeof line);
            printf("coverage: %s\n", line);
        }
    }
out:
    zp_cluster_report_destroy(rep);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    zp_dataset_destroy(ds);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s DATA REPORT_DIR [STEPS] [STEP_SECONDS]\n", argv[0]);
        return 2;
    }
    long steps = argc > 3 ? atol(argv[3]) : 200;
    double step_s = argc > 4 ? atof(argv[4]) : 0.01;
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    zp_mpi *m = NULL;
    int rc = 1;
    zp_status st = zp_mpi_create(MPI_COMM_WORLD, NULL, &m);
    if (st != ZP_OK)
        fprintf(stderr, "zp_mpi_create: %s\n", zp_status_str(st));
    else
        rc = train(m, argv[1], argv[2], steps, step_s);
    zp_mpi_destroy(m);
    MPI_Finalize();
    return rc;
}
