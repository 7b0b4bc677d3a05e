/*
 * bench_tokenizer.c - throughput of a Zephon tokenizer (GPT-2 unless
 * named) on a JSONL text file (one {"text": ...} per line), as run by
 * bench/tokenizer/run.sh.
 *
 *   bench_tokenizer TEXT.jsonl [PASSES] [TOKENIZER]
 *
 * Prints "key value" lines (MB = 10^6 bytes of UTF-8 text; best of PASSES,
 * default 3):
 *   docs, bytes, tokens          the input and the ids it gives
 *   load_ms_min, load_ms_median  zp_tokenizer_create(TOKENIZER) (20 runs)
 *   mbps_1t                      one thread, cache on (wall clock)
 *   mbps_1t_nocache              one thread, cache off (wall clock)
 *   cpu_mbps_1t[_nocache]        the same per second of CPU time (less
 *                                sensitive to other load on the machine)
 *   mbps_2t                      two threads, one encoder each, each on its
 *                                own half of the documents (wall clock)
 *   tokenizer_bytes, encoder_bytes
 *                                zp_tokenizer_memory(), zp_encoder_memory()
 *                                (the latter after a pass over the text)
 *   rss_after_create_bytes, rss_after_one_pass_bytes
 *                                growth of the process's resident set after
 *                                creating the tokenizer + one encoder, and
 *                                after that encoder encoded the whole text
 *
 *   bench_tokenizer --interleaved TEXT.jsonl ROUNDS TOKENIZER...
 *
 * Ratios that the machine's load cannot skew: each round encodes the text
 * once with every TOKENIZER in turn (one thread, a new encoder each time),
 * so that all of them meet the same conditions; prints one line per
 * tokenizer: "interleaved NAME CPU_MBPS RATIO", the best pass's MB per CPU
 * second and its ratio to the first TOKENIZER's.
 */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "zephon/tokenizer.h"

typedef struct doc {
    const char *s;
    size_t n;
} doc;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long rss_bytes(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = 0;
    fclose(f);
    return resident * sysconf(_SC_PAGESIZE);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct job {
    const zp_tokenizer *tok;
    const doc *docs;
    size_t first, end;
    size_t tokens;
    int failed;
} job;

/* Encode docs[first..end) with a fresh encoder (created before timing by
 * the caller is not needed: creation is microseconds). */
static void *run_job(void *p)
{
    job *j = p;
    zp_encoder *e = NULL;
    if (zp_encoder_create(j->tok, &e) != ZP_OK) {
        j->failed = 1;
        return NULL;
    }
    size_t cap = 1 << 16;
    int32_t *ids = malloc(cap * sizeof *ids);
    j->tokens = 0;
    for (size_t i = j->first; i < j->end && ids; i++) {
        if (j->docs[i].n > cap) {
            cap = j->docs[i].n;
            free(ids);
            ids = malloc(cap * sizeof *ids);
            if (!ids)
                break;
        }
        size_t n_ids;
        if (zp_encode(e, j->docs[i].s, j->docs[i].n, ids, &n_ids) != ZP_OK) {
            j->failed = 1;
            break;
        }
        j->tokens += n_ids;
    }
    if (!ids)
        j->failed = 1;
    free(ids);
    zp_encoder_destroy(e);
    return NULL;
}

/* Encode all documents with `threads` threads; returns the wall time and
 * puts the process CPU time in *cpu. */
static double timed_threads(const zp_tokenizer *tok, const doc *docs, size_t n_docs,
                            size_t bytes, int threads, size_t *tokens, double *cpu)
{
    job jobs[2];
    pthread_t th[2];
    /* split at the document where half the bytes are done */
    size_t split = n_docs, acc = 0;
    for (size_t i = 0; i < n_docs && threads == 2; i++) {
        acc += docs[i].n;
        if (acc >= bytes / 2) {
            split = i + 1;
            break;
        }
    }
    double c0 = cpu_now();
    double t0 = now();
    for (int k = 0; k < threads; k++) {
        jobs[k] = (job){tok, docs, threads == 1 ? 0 : (k == 0 ? 0 : split),
                        threads == 1 ? n_docs : (k == 0 ? split : n_docs), 0, 0};
        if (threads == 1)
            run_job(&jobs[k]);
        else
            pthread_create(&th[k], NULL, run_job, &jobs[k]);
    }
    if (threads == 2)
        for (int k = 0; k < 2; k++)
            pthread_join(th[k], NULL);
    double dt = now() - t0;
    *cpu = cpu_now() - c0;
    *tokens = 0;
    for (int k = 0; k < threads; k++) {
        if (jobs[k].failed) {
            fprintf(stderr, "bench_tokenizer: encoding failed\n");
            exit(1);
        }
        *tokens += jobs[k].tokens;
    }
    return dt;
}

static int load_docs(const char *path, doc **out, size_t *n_out, size_t *bytes_out);

static int interleaved(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: bench_tokenizer --interleaved TEXT.jsonl ROUNDS TOKENIZER...\n");
        return 2;
    }
    doc *docs;
    size_t n_docs, bytes;
    if (load_docs(argv[2], &docs, &n_docs, &bytes) != 0)
        return 1;
    int rounds = atoi(argv[3]) < 1 ? 1 : atoi(argv[3]);
    int nt = argc - 4;
    zp_tokenizer **tok = calloc((size_t)nt, sizeof *tok);
    double *best = malloc((size_t)nt * sizeof *best);
    char err[512];
    for (int k = 0; k < nt; k++) {
        if (zp_tokenizer_create(argv[4 + k], NULL, &tok[k], err, sizeof err) != ZP_OK) {
            fprintf(stderr, "bench_tokenizer: %s: %s\n", argv[4 + k], err);
            return 1;
        }
        best[k] = 1e30;
    }
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < nt; k++) {
            size_t tokens;
            double cpu;
            timed_threads(tok[k], docs, n_docs, bytes, 1, &tokens, &cpu);
            if (cpu < best[k])
                best[k] = cpu;
        }
    }
    for (int k = 0; k < nt; k++) {
        printf("interleaved %s %.2f %.3f\n", argv[4 + k], (double)bytes / best[k] / 1e6,
               best[0] / best[k]);
        zp_tokenizer_destroy(tok[k]);
    }
    free(tok);
    free(best);
    return 0;
}

/* The documents of a JSONL file (one {"text": ...} per line). */
static int load_docs(const char *path, doc **out, size_t *n_out, size_t *bytes_out)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t cap = 16, n_docs = 0, bytes = 0;
    doc *docs = malloc(cap * sizeof *docs);
    char *line = NULL;
    size_t linecap = 0;
    ssize_t got;
    while ((got = getline(&line, &linecap, f)) > 0) {
        json_error_t jerr;
        json_t *o = json_loadb(line, (size_t)got, JSON_ALLOW_NUL, &jerr);
        json_t *t = o ? json_object_get(o, "text") : NULL;
        if (!json_is_string(t)) {
            fprintf(stderr, "%s:%zu: no text\n", path, n_docs + 1);
            return -1;
        }
        if (n_docs == cap) {
            cap *= 2;
            docs = realloc(docs, cap * sizeof *docs);
        }
        size_t n = json_string_length(t);
        char *s = malloc(n + 1);
        memcpy(s, json_string_value(t), n + 1);
        docs[n_docs].s = s;
        docs[n_docs].n = n;
        n_docs++;
        bytes += n;
        json_decref(o);
    }
    free(line);
    fclose(f);
    *out = docs;
    *n_out = n_docs;
    *bytes_out = bytes;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--interleaved") == 0)
        return interleaved(argc, argv);
    if (argc < 2) {
        fprintf(stderr, "usage: bench_tokenizer TEXT.jsonl [PASSES] [TOKENIZER]\n");
        return 2;
    }
    int passes = argc > 2 ? atoi(argv[2]) : 3;
    const char *tid = argc > 3 ? argv[3] : "gpt2";
    if (passes < 1)
        passes = 1;

    doc *docs;
    size_t n_docs, bytes;
    if (load_docs(argv[1], &docs, &n_docs, &bytes) != 0)
        return 1;

    /* load time */
    double lt[20];
    char err[512];
    for (int i = 0; i < 20; i++) {
        zp_tokenizer *t;
        double t0 = now();
        if (zp_tokenizer_create(tid, NULL, &t, err, sizeof err) != ZP_OK) {
            fprintf(stderr, "bench_tokenizer: %s\n", err);
            return 1;
        }
        lt[i] = (now() - t0) * 1e3;
        zp_tokenizer_destroy(t);
    }
    qsort(lt, 20, sizeof lt[0], cmp_double);

    /* memory: the tokenizer and one encoder whose cache has been filled by
     * a pass over the text, before any other allocation */
    long rss0 = rss_bytes();
    zp_tokenizer *tok, *tok_nc;
    zp_tokenizer_config cfg;
    zp_tokenizer_config_init(&cfg);
    if (zp_tokenizer_create(tid, &cfg, &tok, err, sizeof err) != ZP_OK)
        return 1;
    zp_encoder *e;
    if (zp_encoder_create(tok, &e) != ZP_OK)
        return 1;
    long rss1 = rss_bytes();
    {
        size_t idcap = 1 << 16;
        int32_t *ids = malloc(sizeof(int32_t) * idcap);
        for (size_t i = 0; i < n_docs && ids; i++) {
            size_t n_ids;
            if (docs[i].n > idcap) {
                idcap = docs[i].n;
                free(ids);
                ids = malloc(sizeof(int32_t) * idcap);
                if (!ids)
                    break;
            }
            zp_encode(e, docs[i].s, docs[i].n, ids, &n_ids);
        }
        free(ids);
    }
    long rss2 = rss_bytes();
    size_t enc_bytes = zp_encoder_memory(e);
    zp_encoder_destroy(e);

    cfg.cache_entries = 0;
    if (zp_tokenizer_create(tid, &cfg, &tok_nc, err, sizeof err) != ZP_OK)
        return 1;
    size_t tokens = 0;
    double best1 = 1e30, best1nc = 1e30, best2 = 1e30, cpu1 = 1e30, cpu1nc = 1e30, c;
    size_t tk1 = 0, tk2 = 0, tknc = 0;
    for (int p = 0; p < passes; p++) {
        double d = timed_threads(tok, docs, n_docs, bytes, 1, &tk1, &c);
        if (d < best1)
            best1 = d;
        if (c < cpu1)
            cpu1 = c;
        d = timed_threads(tok_nc, docs, n_docs, bytes, 1, &tknc, &c);
        if (d < best1nc)
            best1nc = d;
        if (c < cpu1nc)
            cpu1nc = c;
        d = timed_threads(tok, docs, n_docs, bytes, 2, &tk2, &c);
        if (d < best2)
            best2 = d;
    }
    if (tk1 != tk2 || tk1 != tknc) {
        fprintf(stderr, "bench_tokenizer: token counts differ (%zu %zu %zu)\n", tk1, tknc, tk2);
        return 1;
    }
    tokens = tk1;

    printf("docs %zu\n", n_docs);
    printf("bytes %zu\n", bytes);
    printf("tokens %zu\n", tokens);
    printf("bytes_per_token %.3f\n", (double)bytes / (double)tokens);
    printf("load_ms_min %.2f\n", lt[0]);
    printf("load_ms_median %.2f\n", lt[10]);
    printf("mbps_1t %.2f\n", (double)bytes / best1 / 1e6);
    printf("mbps_1t_nocache %.2f\n", (double)bytes / best1nc / 1e6);
    printf("cpu_mbps_1t %.2f\n", (double)bytes / cpu1 / 1e6);
    printf("cpu_mbps_1t_nocache %.2f\n", (double)bytes / cpu1nc / 1e6);
    printf("mbps_2t %.2f\n", (double)bytes / best2 / 1e6);
    printf("tokenizer_bytes %zu\n", zp_tokenizer_memory(tok));
    printf("encoder_bytes %zu\n", enc_bytes);
    printf("rss_after_create_bytes %ld\n", rss1 - rss0);
    printf("rss_after_one_pass_bytes %ld\n", rss2 - rss0);
    zp_tokenizer_destroy(tok);
    zp_tokenizer_destroy(tok_nc);
    for (size_t i = 0; i < n_docs; i++)
        free((void *)docs[i].s);
    free(docs);
    return 0;
}
