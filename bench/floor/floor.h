/*
 * floor.h - the unavoidable work of a text pipeline, as a reference for
 * the pipeline's own cost (issue 23, point 9): the same number of threads
 * doing only read, hash, decompress, parse and tokenize over the same
 * shards in a tight loop, with nothing else (no plan, no shuffle, no
 * chunks, no queues, no packing, no consumer thread).
 *
 *   phase 1, one file per task (OpenMP dynamic loop): read the whole file,
 *     XXH64 its bytes (when asked: the pipeline checks a manifest's hashes),
 *     decompress it (.zst) into a buffer kept from round to round (a tight
 *     loop reuses its buffers: no fresh pages after the first round), split
 *     it into lines;
 *   phase 2, the lines of every file split between the threads (dynamic,
 *     64 lines a task): validate each line as a JSON object with simdjson's
 *     DOM parser (what the pipeline uses), take its "text" string, encode it
 *     with zp_encode (one encoder per thread).
 *
 * Splitting the lines over the threads in phase 2 gives the reference the
 * parallelism of the records even when there are fewer files than threads,
 * which a pipeline reading whole files per task does not have: that is the
 * scaling the issue asks the pipeline to reach.
 */
#ifndef ZP_BENCH_FLOOR_H
#define ZP_BENCH_FLOOR_H

#include <stddef.h>
#include <stdint.h>

#include <zephon.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bench_floor bench_floor;

typedef struct bench_floor_result {
    double seconds;      /* wall time of both phases */
    double read_seconds; /* of which phase 1 (read, hash, decompress, split) */
    uint64_t file_bytes, decoded_bytes, text_bytes, records, tokens;
} bench_floor_result;

/* paths: local .jsonl or .jsonl.zst files (borrowed for the floor's life). */
bench_floor *bench_floor_create(const char *const *paths, size_t n, const zp_tokenizer *tok,
                                int hash);
/* One round on `threads` threads. Returns 0, or -1 with a message on stderr. */
int bench_floor_run(bench_floor *f, int threads, bench_floor_result *out);
void bench_floor_destroy(bench_floor *f);

#ifdef __cplusplus
}
#endif
#endif
