/*
 * bench_e2e.c - the whole text pipeline (jsonl.zst -> fetch -> tokenize gpt2
 * -> packed batches) against tokenizer-only throughput on the same texts,
 * measured in one run, at 1 and 2 threads.
 *
 *   bench_e2e MANIFEST [ROUNDS]
 *   bench_e2e MANIFEST ROUNDS --scaling 1,2,4,8,16   (bench/scaling/run.sh)
 *
 * Tokenizer-only: all texts are first extracted into memory (not timed),
 * then encoded with zp_encode, one encoder per thread, texts split between
 * threads by an OpenMP dynamic loop. Pipeline: the same dataset end to end,
 * with `threads` OpenMP threads, fetch and tokenize parallelism = threads. Both
 * report MB/s of text (the bytes of the "text" fields). Each figure is the
 * median of ROUNDS runs (default 5; min and max in brackets), the two sides
 * alternated in one process, so that both see the same machine. A line
 * gives the pipeline 2 threads but 1 tokenize task (fetch overlapped on the
 * other core) against the tokenizer alone on 1 thread. Each thread count
 * also prints the process CPU time of both sides (medians) and the page
 * faults of the pipeline's last round: on a busy machine, wall times swing
 * with the load, CPU time at 1 thread much less. A last line runs a steady
 * state: 2 epochs with a shard cache smaller than the dataset, so that
 * shards are evicted and decoded again (the case recycled decode buffers
 * are for); there the first pass's fresh pages weigh half as much. The
 * single pass is also set against a cold floor: a new floor each round,
 * whose buffers are touched for the first time as a single pass's are
 * (the floor's own rounds reuse theirs).
 *
 * What the reference leaves out: reading and decompressing the shards,
 * checking their hashes, validating each record's JSON and extracting its
 * text, the EOT token per document, packing rows and handing batches to a
 * consumer thread. Its texts sit in memory already faulted in (extracted
 * before the timer), so the first-touch cost of the pipeline's decoded
 * shards (the kernel zeroing fresh pages, slow on VMs that hand freed
 * memory back to the host) has no counterpart in it.
 */
#include <jansson.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <zephon.h>

#include "../bench_util.h"
#include "../floor/floor.h"

/* CPU time of the whole process: unlike wall time, barely inflated by other
 * processes on a busy machine (at 1 thread it is the work done). */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long minflt(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

typedef struct texts {
    char *buf;
    size_t len, cap;
    size_t *off; /* n + 1 */
    size_t n, ncap;
} texts;

static void die(const char *what, const char *msg) { bench_die("bench_e2e", what, msg); }

/* Extract every record's text, in dataset order (not timed). */
static void load_texts(zp_dataset *ds, texts *t)
{
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.shuffle = 0;
    zp_worksource *ws;
    if (zp_worksource_create(ds, &wc, &ws) != ZP_OK)
        die("worksource", zp_worksource_errmsg(ws));
    zp_pipeline *p;
    zp_pipeline_create(ws, NULL, &p);
    const zp_batch *b;
    zp_status st;
    t->off = malloc(sizeof *t->off);
    t->off[0] = 0;
    while ((st = zp_pipeline_next(p, &b)) == ZP_OK) {
        for (size_t i = 0; i < b->rows; i++) {
            json_error_t e;
            json_t *j = json_loadb(b->data + b->offsets[i], b->offsets[i + 1] - b->offsets[i], JSON_ALLOW_NUL, &e);
            const char *s = json_string_value(json_object_get(j, "text"));
            size_t n = json_string_length(json_object_get(j, "text"));
            if (!s)
                die("record", "no text field");
            if (t->len + n > t->cap) {
                t->cap = (t->len + n) * 2;
                t->buf = realloc(t->buf, t->cap);
            }
            memcpy(t->buf + t->len, s, n);
            t->len += n;
            if (t->n + 2 > t->ncap) {
                t->ncap = (t->n + 2) * 2;
                t->off = realloc(t->off, t->ncap * sizeof *t->off);
            }
            t->off[++t->n] = t->len;
            json_decref(j);
        }
    }
    if (st != ZP_END)
        die("pipeline", zp_pipeline_errmsg(p));
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
}

static double tokenizer_only(const zp_tokenizer *tok, const texts *t, int threads,
                             uint64_t *tokens_out, double *cpu_out)
{
    uint64_t tokens = 0;
    double c0 = cpu_s();
    double t0 = bench_now();
#pragma omp parallel num_threads(threads) reduction(+ : tokens)
    {
        zp_encoder *enc;
        zp_encoder_create(tok, &enc);
        int32_t *ids = NULL;
        size_t cap = 0;
#pragma omp for schedule(dynamic, 64)
        for (size_t i = 0; i < t->n; i++) {
            size_t n = t->off[i + 1] - t->off[i], got;
            if (n > cap) {
                cap = n * 2;
                ids = realloc(ids, cap * sizeof *ids);
            }
            zp_encode(enc, t->buf + t->off[i], n, ids, &got);
            tokens += got;
        }
        free(ids);
        zp_encoder_destroy(enc);
    }
    double dt = bench_now() - t0;
    *cpu_out = cpu_s() - c0;
    *tokens_out = tokens;
    return dt;
}

/* Steady-state variant of a pipeline run (0 everywhere: the defaults). */
typedef struct variant {
    uint32_t block_shards; /* shuffle block */
    size_t cache_bytes;    /* shard cache budget */
    uint32_t epochs;
    uint32_t timed_epoch;  /* > 0: time only this epoch (from the end of the one before) */
} variant;

static double pipeline_v(zp_dataset *ds, int threads, int tok_par, const variant *v,
                         uint64_t *tokens_out, double *cpu_out, long *faults_out)
{
    double c0 = cpu_s();
    long f0 = minflt();
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    if (v && v->block_shards)
        wc.shuffle_block_shards = v->block_shards;
    zp_worksource *ws;
    zp_worksource_create(ds, &wc, &ws);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = threads;
    pc.fetch_parallelism = (size_t)threads;
    if (v && v->cache_bytes)
        pc.shard_cache_bytes = v->cache_bytes;
    if (v && v->epochs)
        pc.epochs = v->epochs;
    zp_pipeline *p;
    zp_pipeline_create(ws, &pc, &p);
    zp_pipeline_tokenize(p, "gpt2", "text", (size_t)tok_par);
    zp_pipeline_pack(p, ZP_PACK_CONCAT, 2048);
    zp_pipeline_batch(p, 8);
    const zp_batch *b;
    zp_status st;
    const uint32_t te = v ? v->timed_epoch : 0;
    double t0 = bench_now(), c_from = c0;
    long f_from = f0;
    while ((st = zp_pipeline_next(p, &b)) == ZP_OK) {
        if (te && b->last_in_epoch && b->epoch + 1 == te) {
            t0 = bench_now();
            c_from = cpu_s();
            f_from = minflt();
        }
    }
    double dt = bench_now() - t0;
    if (st != ZP_END)
        die("pipeline", zp_pipeline_errmsg(p));
    zp_pipeline_counts c;
    zp_pipeline_get_counts(p, &c);
    *tokens_out = c.tokens - c.samples; /* minus one EOT per document */
    if (te)
        *cpu_out = cpu_s() - c_from; /* the timed epoch's */
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    if (!te)
        *cpu_out = cpu_s() - c0;
    *faults_out = minflt() - f_from;
    return dt;
}

static double pipeline(zp_dataset *ds, int threads, int tok_par, uint64_t *tokens_out,
                       double *cpu_out, long *faults_out)
{
    return pipeline_v(ds, threads, tok_par, NULL, tokens_out, cpu_out, faults_out);
}

#define MAXR 64

/* The floor (bench/floor): the shards' local paths, as given in the
 * manifest or relative to its folder. */
static bench_floor *floor_of(zp_dataset *ds, const char *manifest, const zp_tokenizer *tok,
                             char ***paths_out)
{
    size_t n = zp_dataset_num_shards(ds);
    char **paths = calloc(n, sizeof *paths);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", manifest);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    for (size_t i = 0; i < n; i++) {
        const char *name = zp_dataset_shard_name(ds, i);
        size_t len = strlen(dir) + strlen(name) + 2;
        paths[i] = malloc(len);
        if (name[0] == '/' || access(name, R_OK) == 0)
            snprintf(paths[i], len, "%s", name);
        else
            snprintf(paths[i], len, "%s/%s", dir, name);
    }
    *paths_out = paths;
    return bench_floor_create((const char *const *)paths, n, tok, 1);
}

static double floor_once(bench_floor *f, int threads, uint64_t *tokens_out, double *cpu_out)
{
    bench_floor_result r;
    double c0 = cpu_s();
    if (bench_floor_run(f, threads, &r) != 0)
        die("floor", "a round failed (see above)");
    if (cpu_out)
        *cpu_out = cpu_s() - c0;
    *tokens_out = r.tokens;
    return r.seconds;
}

/* Median, min and max of v[0..n) (sorts v). */
typedef struct stats {
    double med, min, max;
} stats;

static stats stats_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_d);
    stats s = {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v[0], v[n - 1]};
    return s;
}

/* Rates in MB/s from times: median rate = mb / median time. */
static void print_rate(const char *label, double mb, stats t)
{
    printf("%s %7.1f MB/s [%.1f..%.1f]", label, mb / t.med, mb / t.max, mb / t.min);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MANIFEST [ROUNDS [--scaling T1,T2,...]]\n", argv[0]);
        return 2;
    }
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    if (rounds < 1 || rounds > MAXR) {
        fprintf(stderr, "bench_e2e: ROUNDS must be 1..%d\n", MAXR);
        return 2;
    }
    zp_dataset *ds;
    zp_dataset_create(NULL, &ds);
    if (zp_dataset_add(ds, argv[1]) != ZP_OK || zp_dataset_index(ds) != ZP_OK)
        die("dataset", zp_dataset_errmsg(ds));
    texts t = {0};
    load_texts(ds, &t);
    zp_tokenizer *tok;
    char err[256];
    if (zp_tokenizer_create("gpt2", NULL, &tok, err, sizeof err) != ZP_OK)
        die("tokenizer", err);
    char **fpaths;
    bench_floor *fl = floor_of(ds, argv[1], tok, &fpaths);
    double mb = (double)t.len / 1e6;
    double wf[MAXR], fratio[MAXR], cf[MAXR], cfratio[MAXR];
    printf("dataset: %s, %zu documents, %.1f MB of text; medians of %d rounds [min..max]\n",
           argv[1], t.n, mb, rounds);
    double wt[MAXR], wp[MAXR], ct[MAXR], cp[MAXR], ratio[MAXR], cratio[MAXR];
    if (argc > 4 && strcmp(argv[3], "--scaling") == 0) {
        /* Thread scaling on a larger machine (bench/scaling): at each count,
         * the tokenizer alone, the floor, the pipeline's single pass and its
         * steady state (2nd epoch, cache = working set; fetch and tokenize
         * parallelism = threads), alternated round by round. Each rate's
         * share of linear is its speed-up over the first count divided by
         * the thread ratio; pipeline/floor is at equal thread counts. */
        double base[4] = {0, 0, 0, 0};
        int base_threads = 0;
        variant sv = {0, 1, 2, 1};
        for (char *tk = strtok(argv[4], ","); tk; tk = strtok(NULL, ",")) {
            int threads = atoi(tk);
            if (threads < 1 || threads > 1024)
                die("--scaling", "thread counts must be 1..1024");
            uint64_t tk_tok = 0, tk_pipe = 0, tk_floor = 0, tk_st = 0;
            long faults = 0;
            double ws[MAXR], sratio[MAXR];
            for (int r = 0; r < rounds; r++) {
                wt[r] = tokenizer_only(tok, &t, threads, &tk_tok, &ct[r]);
                wf[r] = floor_once(fl, threads, &tk_floor, NULL);
                wp[r] = pipeline(ds, threads, threads, &tk_pipe, &cp[r], &faults);
                ws[r] = pipeline_v(ds, threads, threads, &sv, &tk_st, &cp[r], &faults);
                ratio[r] = wt[r] / wp[r];
                fratio[r] = wf[r] / wp[r];
                sratio[r] = wf[r] / ws[r];
            }
            if (tk_tok != tk_pipe || tk_floor != tk_pipe || tk_st != 2 * tk_pipe)
                die("scaling", "token counts differ between tokenizer, floor and pipeline");
            stats st = stats_of(wt, rounds), sf = stats_of(wf, rounds), sp = stats_of(wp, rounds);
            stats ss = stats_of(ws, rounds), sfr = stats_of(fratio, rounds);
            stats ssr = stats_of(sratio, rounds);
            double rate[4] = {mb / st.med, mb / sf.med, mb / sp.med, mb / ss.med}, lin[4];
            if (!base_threads) {
                base_threads = threads;
                for (int k = 0; k < 4; k++)
                    base[k] = rate[k];
            }
            for (int k = 0; k < 4; k++)
                lin[k] = rate[k] / base[k] / ((double)threads / base_threads);
            printf("scaling %2d threads: tokenizer %7.1f MB/s (%.2f of linear) | floor %7.1f MB/s "
                   "(%.2f) | pipeline single pass %7.1f MB/s (%.2f), /floor %.3f [%.3f..%.3f] | "
                   "steady state %7.1f MB/s (%.2f), /floor %.3f [%.3f..%.3f]\n",
                   threads, rate[0], lin[0], rate[1], lin[1], rate[2], lin[2], sfr.med, sfr.min,
                   sfr.max, rate[3], lin[3], ssr.med, ssr.min, ssr.max);
            fflush(stdout);
        }
        return 0;
    }
    for (int threads = 1; threads <= 2; threads++) {
        uint64_t tk_tok = 0, tk_pipe = 0, tk_floor = 0;
        long faults = 0;
        double wcold[MAXR], coldratio[MAXR];
        for (int r = 0; r < rounds; r++) {
            wt[r] = tokenizer_only(tok, &t, threads, &tk_tok, &ct[r]);
            wf[r] = floor_once(fl, threads, &tk_floor, &cf[r]);
            /* a cold floor: a new one, whose buffers are touched for the
             * first time in its one round, as a single pass's are */
            bench_floor *cold = bench_floor_create((const char *const *)fpaths,
                                                   zp_dataset_num_shards(ds), tok, 1);
            uint64_t tk_cold = 0;
            wcold[r] = floor_once(cold, threads, &tk_cold, NULL);
            bench_floor_destroy(cold);
            wp[r] = pipeline(ds, threads, threads, &tk_pipe, &cp[r], &faults);
            ratio[r] = wt[r] / wp[r];
            fratio[r] = wf[r] / wp[r];
            coldratio[r] = wcold[r] / wp[r];
            cfratio[r] = cf[r] / cp[r];
            cratio[r] = ct[r] / cp[r];
            if (tk_tok != tk_pipe || tk_floor != tk_pipe) {
                fprintf(stderr, "bench_e2e: token counts differ: tokenizer %llu, floor %llu, "
                        "pipeline %llu\n", (unsigned long long)tk_tok,
                        (unsigned long long)tk_floor, (unsigned long long)tk_pipe);
                return 1;
            }
        }
        stats sf = stats_of(wf, rounds), sfr = stats_of(fratio, rounds);
        printf("%d thread%s:", threads, threads > 1 ? "s" : " ");
        print_rate(" floor (read, hash, decompress, parse, encode)", mb, sf);
        print_rate(" | pipeline", mb, stats_of(wp, rounds));
        printf(" | pipeline/floor = %.3f [%.3f..%.3f]\n", sfr.med, sfr.min, sfr.max);
        stats swc = stats_of(wcold, rounds), swcr = stats_of(coldratio, rounds);
        printf("%d thread%s, single pass against a cold floor (a new floor each round):", threads,
               threads > 1 ? "s" : " ");
        print_rate(" cold floor", mb, swc);
        printf(" | pipeline/cold floor = %.3f [%.3f..%.3f]\n", swcr.med, swcr.min, swcr.max);
        stats scf = stats_of(cf, rounds), scfr = stats_of(cfratio, rounds);
        printf("%d thread%s, CPU time: floor %.2f s | pipeline (below) | floor/pipeline = %.3f "
               "[%.3f..%.3f]\n", threads, threads > 1 ? "s" : " ", scf.med, scfr.med, scfr.min,
               scfr.max);
        stats st = stats_of(wt, rounds), sp = stats_of(wp, rounds);
        stats sr = stats_of(ratio, rounds), sct = stats_of(ct, rounds),
              scp = stats_of(cp, rounds), scr = stats_of(cratio, rounds);
        printf("%d thread%s:", threads, threads > 1 ? "s" : " ");
        print_rate(" tokenizer only", mb, st);
        print_rate(" | pipeline jsonl.zst->tokenize->packed", mb, sp);
        printf(" (%.2f M tokens/s) | pipeline/tokenizer = %.3f [%.3f..%.3f]\n",
               (double)tk_pipe / sp.med / 1e6, sr.med, sr.min, sr.max);
        /* CPU time: at 1 thread the work each side does, little inflated by
         * a busy machine; at 2 threads it also counts OpenMP's spinning. */
        printf("%d thread%s, CPU time: tokenizer only %.2f s | pipeline %.2f s (%ld page faults) "
               "| tokenizer/pipeline = %.3f [%.3f..%.3f]\n",
               threads, threads > 1 ? "s" : " ", sct.med, scp.med, faults, scr.med, scr.min,
               scr.max);
        /* Steady state beside the floor's: the floor's rounds reuse their
         * buffers, so the pipeline is timed in its second epoch, when its
         * cache recycles the buffers of the first. The cache holds only the
         * working set (a budget of 1 byte: it keeps the segments a pass
         * reads at once beyond the budget), so every epoch decodes every
         * shard as the floor's rounds do: a corpus larger than memory. */
        variant sv = {0, 1, 2, 1};
        uint64_t tk_st = 0;
        double sfl[MAXR], sfc[MAXR], spw[MAXR], spc[MAXR], sratio[MAXR], scratio[MAXR];
        for (int r = 0; r < rounds; r++) {
            sfl[r] = floor_once(fl, threads, &tk_floor, &sfc[r]);
            spw[r] = pipeline_v(ds, threads, threads, &sv, &tk_st, &spc[r], &faults);
            sratio[r] = sfl[r] / spw[r];
            scratio[r] = sfc[r] / spc[r];
            if (tk_st != 2 * tk_floor) {
                fprintf(stderr, "bench_e2e: token counts differ: floor 2 x %llu, pipeline %llu\n",
                        (unsigned long long)tk_floor, (unsigned long long)tk_st);
                return 1;
            }
        }
        stats ssr = stats_of(sratio, rounds), sscr = stats_of(scratio, rounds);
        printf("%d thread%s, steady state (2nd epoch, cache = working set):", threads,
               threads > 1 ? "s" : " ");
        print_rate(" floor", mb, stats_of(sfl, rounds));
        print_rate(" | pipeline", mb, stats_of(spw, rounds));
        printf(" | pipeline/floor = %.3f [%.3f..%.3f] | CPU time floor/pipeline = %.3f "
               "[%.3f..%.3f] (%ld page faults in the epoch)\n",
               ssr.med, ssr.min, ssr.max, sscr.med, sscr.min, sscr.max, faults);
        fflush(stdout);
    }
    /* The read path beside tokenization: 2 threads, 1 tokenize task, so
     * fetch (decompress, parse) runs on the other core, against the
     * tokenizer alone on 1 thread. */
    {
        uint64_t tk_tok = 0, tk_pipe = 0;
        for (int r = 0; r < rounds; r++) {
            long faults;
            wt[r] = tokenizer_only(tok, &t, 1, &tk_tok, &ct[r]);
            wp[r] = pipeline(ds, 2, 1, &tk_pipe, &cp[r], &faults);
            ratio[r] = wt[r] / wp[r];
        }
        stats st = stats_of(wt, rounds), sp = stats_of(wp, rounds), sr = stats_of(ratio, rounds);
        printf("overlapped:");
        print_rate(" tokenizer only, 1 thread", mb, st);
        print_rate(" | pipeline, 2 threads with 1 tokenize task", mb, sp);
        printf(" | pipeline/tokenizer = %.3f [%.3f..%.3f]\n", sr.med, sr.min, sr.max);
    }
    /* Steady state: 2 epochs, shuffle blocks of 1 shard, a shard cache of
     * 32 MiB, about one decoded shard: shards are evicted as the pass moves
     * on and decoded again in the next epoch (a long run with a dataset
     * larger than the cache). 1 thread, against the tokenizer alone on the
     * same texts twice. */
    {
        variant v = {1, (size_t)32 << 20, 2, 0};
        uint64_t tk_tok = 0, tk_pipe = 0;
        long faults = 0;
        for (int r = 0; r < rounds; r++) {
            wt[r] = tokenizer_only(tok, &t, 1, &tk_tok, &ct[r]);
            wp[r] = pipeline_v(ds, 1, 1, &v, &tk_pipe, &cp[r], &faults);
            ratio[r] = 2 * wt[r] / wp[r];
            cratio[r] = 2 * ct[r] / cp[r];
        }
        if (2 * tk_tok != tk_pipe) {
            fprintf(stderr, "bench_e2e: token counts differ: tokenizer 2 x %llu, pipeline %llu\n",
                    (unsigned long long)tk_tok, (unsigned long long)tk_pipe);
            return 1;
        }
        stats st = stats_of(wt, rounds), sp = stats_of(wp, rounds), sr = stats_of(ratio, rounds),
              scr = stats_of(cratio, rounds);
        printf("steady state (2 epochs, block 1, 32 MiB shard cache), 1 thread:");
        print_rate(" tokenizer only", mb, st);
        print_rate(" | pipeline", 2 * mb, sp);
        printf(" | pipeline/tokenizer = %.3f [%.3f..%.3f] | CPU time tokenizer/pipeline = %.3f "
               "[%.3f..%.3f] (%ld page faults)\n",
               sr.med, sr.min, sr.max, scr.med, scr.min, scr.max, faults);
    }
    bench_floor_destroy(fl);
    for (size_t i = 0; i < zp_dataset_num_shards(ds); i++)
        free(fpaths[i]);
    free(fpaths);
    zp_tokenizer_destroy(tok);
    free(t.buf);
    free(t.off);
    zp_dataset_destroy(ds);
    return 0;
}
