/*
 * bench_coverage.c - what the coverage certificate costs a run, measured in
 * one run (docs/report.md, "Coverage certificate"):
 *
 *   bench_coverage MANIFEST [ROUNDS] [WORLD]
 *
 * For two pipelines over the dataset (records: no tokenizer, the cheapest
 * pipeline, where the certificate weighs most; gpt2 + concat packing, 2048
 * tokens a row), 2 epochs, 2 threads, as rank 0 of WORLD ranks (default 1):
 *  - run:  the wall time of the whole stream (zp_pipeline_next to ZP_END),
 *          the per-batch fold included (it is always on);
 *  - fold: the time to fold the delivered samples again, alone (what the
 *          consumer's bookkeeping adds to run);
 *  - end:  the end-of-run work of a rank when the certificate holds: for
 *          each epoch its delivered digest and its 1/WORLD slice of the
 *          epoch's stream digest (zp_pipeline_stream_coverage);
 *  - plan: what a rank adds when an epoch fails: its plan's digest
 *          (zp_pipeline_coverage with expected), to name the ranks;
 *  - cost: (fold + end) / run, and with plan when the certificate fails.
 * Medians of ROUNDS rounds (default 5).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zephon.h>

#include "../bench_util.h"

static void die(const char *what, const char *msg) { bench_die("bench_coverage", what, msg); }

typedef struct round_t {
    double run, fold, end, plan;
    uint64_t samples;
} round_t;

static round_t one_round(zp_dataset *ds, int tokens, uint32_t world)
{
    round_t r = {0};
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.world_size = world;
    zp_worksource *ws;
    if (zp_worksource_create(ds, &wc, &ws) != ZP_OK)
        die("worksource", zp_worksource_errmsg(ws));
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = 2;
    pc.epochs = 2;
    pc.fetch_parallelism = 2;
    pc.microbatch_size = tokens ? 8 : 32;
    zp_pipeline *p;
    if (zp_pipeline_create(ws, &pc, &p) != ZP_OK)
        die("pipeline", zp_pipeline_errmsg(p));
    if (tokens && (zp_pipeline_tokenize(p, "gpt2", "text", 2) != ZP_OK ||
                   zp_pipeline_pack(p, ZP_PACK_CONCAT, 2048) != ZP_OK))
        die("pipeline", zp_pipeline_errmsg(p));
    size_t cap = 1 << 16, n = 0;
    uint64_t *ids = malloc(2 * cap * sizeof *ids);
    const zp_batch *b;
    zp_status st;
    double t0 = bench_now();
    while ((st = zp_pipeline_next(p, &b)) == ZP_OK) {
        if (n + b->n_samples > cap) {
            cap = 2 * (n + b->n_samples);
            ids = realloc(ids, 2 * cap * sizeof *ids);
        }
        for (size_t i = 0; i < b->n_samples; i++) {
            ids[2 * n] = b->samples[i].global_id;
            ids[2 * n + 1] = b->samples[i].pass;
            n++;
        }
    }
    r.run = bench_now() - t0;
    if (st != ZP_END)
        die("pipeline", zp_pipeline_errmsg(p));
    r.samples = n;
    /* the fold alone, over the same samples */
    zp_coverage c = {0};
    t0 = bench_now();
    for (size_t i = 0; i < n; i++)
        zp_coverage_fold(&c, ids[2 * i], ids[2 * i + 1]);
    r.fold = bench_now() - t0;
    if (c.count != n)
        die("fold", "count");
    /* the end of the run: each epoch's delivered digest and stream slice */
    zp_coverage job[2];
    t0 = bench_now();
    for (uint32_t e = 0; e < 2; e++) {
        zp_epoch_coverage ec;
        if (zp_pipeline_coverage(p, e, 0, &ec) != ZP_OK ||
            zp_pipeline_stream_coverage(p, e, 0, world, &job[e]) != ZP_OK)
            die("coverage", zp_pipeline_errmsg(p));
    }
    r.end = bench_now() - t0;
    /* a failing epoch adds each rank's plan digest */
    t0 = bench_now();
    for (uint32_t e = 0; e < 2; e++) {
        zp_epoch_coverage ec;
        if (zp_pipeline_coverage(p, e, 1, &ec) != ZP_OK)
            die("coverage", zp_pipeline_errmsg(p));
        if (!zp_coverage_equal(&ec.delivered, &ec.expected))
            die("coverage", "the rank's digest differs from its plan's");
        if (world == 1 && !zp_coverage_equal(&ec.delivered, &job[e]))
            die("coverage", "the digest differs from the epoch's stream");
    }
    r.plan = bench_now() - t0;
    free(ids);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    return r;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        die("usage", "bench_coverage MANIFEST [ROUNDS] [WORLD]");
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    uint32_t world = argc > 3 ? (uint32_t)atoi(argv[3]) : 1;
    if (rounds < 1 || rounds > 99 || world < 1)
        die("usage", "ROUNDS 1..99, WORLD >= 1");
    zp_dataset *ds;
    zp_dataset_create(NULL, &ds);
    if (zp_dataset_add(ds, argv[1]) != ZP_OK || zp_dataset_index(ds) != ZP_OK)
        die("dataset", zp_dataset_errmsg(ds));
    printf("%-12s %9s %9s %10s %9s %10s %7s %13s\n", "pipeline", "samples", "run (s)",
           "fold (ms)", "end (ms)", "plan (ms)", "cost", "cost failing");
    for (int tokens = 0; tokens < 2; tokens++) {
        double run[99], fold[99], end[99], plan[99];
        uint64_t samples = 0;
        for (int i = 0; i < rounds; i++) {
            round_t r = one_round(ds, tokens, world);
            run[i] = r.run;
            fold[i] = r.fold;
            end[i] = r.end;
            plan[i] = r.plan;
            samples = r.samples;
        }
        double a = bench_median(run, rounds), f = bench_median(fold, rounds), e = bench_median(end, rounds);
        double pl = bench_median(plan, rounds);
        printf("%-12s %9llu %9.4f %10.3f %9.3f %10.3f %6.3f%% %12.3f%%\n",
               tokens ? "gpt2-concat" : "records", (unsigned long long)samples, a, f * 1e3,
               e * 1e3, pl * 1e3, 100.0 * (f + e) / a, 100.0 * (f + e + pl) / a);
    }
    zp_dataset_destroy(ds);
    return 0;
}
