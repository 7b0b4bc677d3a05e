/*
 * tuning_loop.c - the tuning workflow in C: turn observability on, iterate,
 * and every 100 steps print the snapshots that say where the time goes.
 *
 *   tuning_loop MANIFEST_OR_SHARDS [STEP_MS] [TOKENIZE_PARALLELISM]
 *
 * STEP_MS simulates the training step (default 5 ms). Change one setting at a
 * time (the tokenize parallelism here) and compare stall_fraction and the
 * operators' utilization; docs/observability.md explains how to read them.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <zephon.h>

static void print_snapshots(zp_pipeline *p, uint64_t step)
{
    zp_metrics_snapshot m;
    zp_fetch_timing f;
    if (zp_pipeline_metrics_snapshot(p, &m) != ZP_OK ||
        zp_pipeline_fetch_timing_snapshot(p, &f) != ZP_OK)
        return;
    printf("step %llu: %.1f batches/s, stall %.1f%% (%.2f s), first batch after %.2f s\n",
           (unsigned long long)step, m.batches_per_second, 100.0 * m.stall_fraction,
           m.stall_seconds, m.time_to_first_batch);
    for (uint32_t i = 0; i < m.n_ops; i++)
        printf("  %-10s par %2u  util %5.1f%%  starved %6.2f s  blocked %6.2f s  queue %.1f\n",
               m.ops[i].name, m.ops[i].parallelism, 100.0 * m.ops[i].utilization,
               m.ops[i].starved_seconds, m.ops[i].blocked_seconds, m.ops[i].queue_mean);
    printf("  fetch: %llu shards opened (p99 %.1f ms), record read p99 %.1f us, waited %.2f s\n",
           (unsigned long long)f.shards_opened, (double)zp_hist_quantile(&f.open_ns, 0.99) * 1e-6,
           (double)zp_hist_quantile(&f.record_ns, 0.99) * 1e-3, f.wait_seconds);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MANIFEST_OR_SHARDS [STEP_MS] [TOKENIZE_PARALLELISM]\n", argv[0]);
        return 2;
    }
    double step_ms = argc > 2 ? atof(argv[2]) : 5.0;
    size_t tok_par = argc > 3 ? (size_t)atoi(argv[3]) : 2;
    zp_dataset *ds = NULL;
    zp_worksource *ws = NULL;
    zp_pipeline *p = NULL;
    int rc = 1;
    if (zp_dataset_create(NULL, &ds) != ZP_OK || zp_dataset_add(ds, argv[1]) != ZP_OK) {
        fprintf(stderr, "dataset: %s\n", ds ? zp_dataset_errmsg(ds) : "out of memory");
        goto out;
    }
    if (zp_worksource_create(ds, NULL, &ws) != ZP_OK) {
        fprintf(stderr, "worksource: %s\n", zp_worksource_errmsg(ws));
        goto out;
    }
    if (zp_pipeline_create(ws, NULL, &p) != ZP_OK)
        goto out;
    /* Tracking is cheap enough to leave on; turn it on before iterating. */
    if (zp_pipeline_tokenize(p, "gpt2", "text", tok_par) != ZP_OK ||
        zp_pipeline_pack(p, ZP_PACK_CONCAT, 2048) != ZP_OK || zp_pipeline_batch(p, 8) != ZP_OK ||
        zp_pipeline_options(p, 4) != ZP_OK || zp_pipeline_enable_observability(p) != ZP_OK) {
        fprintf(stderr, "pipeline: %s\n", zp_pipeline_errmsg(p));
        goto out;
    }
    const zp_batch *b;
    uint64_t step = 0;
    zp_status st;
    long step_ns = (long)(step_ms * 1e6);
    struct timespec ts = {step_ns / 1000000000L, step_ns % 1000000000L};
    while ((st = zp_pipeline_next(p, &b)) == ZP_OK) {
        nanosleep(&ts, NULL); /* the training step */
        if (++step % 100 == 0)
            print_snapshots(p, step);
    }
    if (st != ZP_END) {
        fprintf(stderr, "pipeline: %s\n", zp_pipeline_errmsg(p));
        goto out;
    }
    print_snapshots(p, step);
    rc = 0;
out:
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    zp_dataset_destroy(ds);
    return rc;
}
