/*
 * bench_e2e.c - the whole text pipeline (jsonl.zst -> fetch -> tokenize gpt2
 * -> packed batches) against tokenizer-only throughput on the same texts,
 * measured in one run, at 1 and 2 threads.
 *
 *   bench_e2e MANIFEST [ROUNDS]
 *
 * Tokenizer-only: all texts are first extracted into memory (not timed),
 * then encoded with zp_encode, one encoder per thread, texts split between
 * threads by an OpenMP dynamic loop. Pipeline: the same dataset end to end,
 * with `threads` OpenMP threads, fetch and tokenize parallelism = threads. Both
 * report MB/s of text (the bytes of the "text" fields). Each measurement is
 * the best of ROUNDS (default 3), alternating the two sides. A last line
 * gives the pipeline 2 threads but 1 tokenize task (fetch overlapped on the
 * other core) against the tokenizer alone on 1 thread.
 */
#include <jansson.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zephon.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct texts {
    char *buf;
    size_t len, cap;
    size_t *off; /* n + 1 */
    size_t n, ncap;
} texts;

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "bench_e2e: %s: %s\n", what, msg);
    exit(1);
}

/* Extract every record's text, in dataset order (not timed). */
static void load_texts(zp_dataset *ds, texts *t)
{
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.shuffle = 0;
    zp_worksource *ws;
    if (zp_worksource_create(ds, &wc, &ws) != ZP_OK)
        die("worksource", zp_dataset_errmsg(ds));
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
                             uint64_t *tokens_out)
{
    uint64_t tokens = 0;
    double t0 = now_s();
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
    double dt = now_s() - t0;
    *tokens_out = tokens;
    return dt;
}

static double pipeline(zp_dataset *ds, int threads, int tok_par, uint64_t *tokens_out)
{
    zp_worksource *ws;
    zp_worksource_create(ds, NULL, &ws);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = threads;
    pc.fetch_parallelism = (size_t)threads;
    zp_pipeline *p;
    zp_pipeline_create(ws, &pc, &p);
    zp_pipeline_tokenize(p, "gpt2", "text", (size_t)tok_par);
    zp_pipeline_pack(p, ZP_PACK_CONCAT, 2048);
    zp_pipeline_batch(p, 8);
    const zp_batch *b;
    zp_status st;
    double t0 = now_s();
    while ((st = zp_pipeline_next(p, &b)) == ZP_OK) {
    }
    double dt = now_s() - t0;
    if (st != ZP_END)
        die("pipeline", zp_pipeline_errmsg(p));
    zp_pipeline_counts c;
    zp_pipeline_get_counts(p, &c);
    *tokens_out = c.tokens - c.samples; /* minus one EOT per document */
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    return dt;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MANIFEST [ROUNDS]\n", argv[0]);
        return 2;
    }
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
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
    double mb = (double)t.len / 1e6;
    printf("dataset: %s, %zu documents, %.1f MB of text\n", argv[1], t.n, mb);
    for (int threads = 1; threads <= 2; threads++) {
        double best_tok = 1e30, best_pipe = 1e30;
        uint64_t tk_tok = 0, tk_pipe = 0;
        for (int r = 0; r < rounds; r++) {
            double a = tokenizer_only(tok, &t, threads, &tk_tok);
            double b = pipeline(ds, threads, threads, &tk_pipe);
            if (a < best_tok)
                best_tok = a;
            if (b < best_pipe)
                best_pipe = b;
        }
        if (tk_tok != tk_pipe) {
            fprintf(stderr, "bench_e2e: token counts differ: tokenizer %llu, pipeline %llu\n",
                    (unsigned long long)tk_tok, (unsigned long long)tk_pipe);
            return 1;
        }
        printf("%d thread%s: tokenizer only %7.1f MB/s | pipeline jsonl.zst->tokenize->packed "
               "%7.1f MB/s (%.2f M tokens/s) | pipeline/tokenizer = %.3f\n",
               threads, threads > 1 ? "s" : " ", mb / best_tok, mb / best_pipe,
               (double)tk_pipe / best_pipe / 1e6, best_tok / best_pipe);
    }
    /* The read path beside tokenization: 2 threads, 1 tokenize task, so
     * fetch (decompress, parse) runs on the other core, against the
     * tokenizer alone on 1 thread. */
    {
        double best_tok = 1e30, best_pipe = 1e30;
        uint64_t tk_tok = 0, tk_pipe = 0;
        for (int r = 0; r < rounds; r++) {
            double a = tokenizer_only(tok, &t, 1, &tk_tok);
            double b = pipeline(ds, 2, 1, &tk_pipe);
            if (a < best_tok)
                best_tok = a;
            if (b < best_pipe)
                best_pipe = b;
        }
        printf("overlapped: tokenizer only, 1 thread %7.1f MB/s | pipeline, 2 threads with 1 "
               "tokenize task %7.1f MB/s | pipeline/tokenizer = %.3f\n",
               mb / best_tok, mb / best_pipe, best_tok / best_pipe);
    }
    zp_tokenizer_destroy(tok);
    free(t.buf);
    free(t.off);
    zp_dataset_destroy(ds);
    return 0;
}
