/*
 * gen.h - the synthetic dataset generator (private): shards of
 * {"id": N, "text": "..."} records with English-like text, in jsonl or
 * jsonl.zst, and their manifest. `zephon gen` is its command-line face;
 * tests and benchmarks call it in-process.
 *
 * Output depends only on the settings (seed, shard count, sizes, level,
 * format): every shard has its own random streams, ids come from a
 * precomputed plan, and each shard is compressed by one thread, so the
 * thread count changes nothing. The manifest is built in memory (through
 * the dataset's manifest writer) and handed back as bytes; it is also
 * written to out/manifest.json unless asked not to.
 *
 * Never prints; errors carry a message naming the setting or the file.
 */
#ifndef ZP_GEN_H
#define ZP_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct zpi_gen_config {
    const char *out;            /* output folder, created like mkdir -p. Required */
    uint32_t shards;            /* shard files shard-NNNNN.<format>, 1..1000000. Default 4 */
    uint64_t samples_per_shard; /* records per shard (the mean, with uneven). Default 1000
                                   when total_bytes is 0 */
    uint64_t total_bytes;       /* instead: about this many bytes of JSONL in all. Default 0 */
    int zst;                    /* 1 (default): jsonl.zst; 0: jsonl */
    int single_frame;           /* jsonl.zst: 0 (default): seekable (independent frames of
                                   about 4 MiB decoded, each ending at a record's end, and
                                   a seek table: the zstd seekable format); 1: the shard
                                   is one zstd frame */
    int level;                  /* zstd level, 1..ZSTD_maxCLevel(). Default 3 */
    uint64_t seed;              /* default 1 */
    int uneven;                 /* 1: each shard half the previous. Default 0 */
    int hash;                   /* 1: XXH64 content hashes in the manifest. Default 0 */
    uint32_t threads;           /* worker threads, 0 (default): online CPUs; at most shards */
    int no_manifest_file;       /* 1: only hand the manifest back, do not write it */
} zpi_gen_config;

void zpi_gen_config_init(zpi_gen_config *cfg);

typedef struct zpi_gen_result {
    uint32_t threads;       /* threads used */
    uint64_t samples;       /* records in all */
    uint64_t jsonl_bytes;   /* bytes of JSONL generated */
    uint64_t written_bytes; /* bytes written (compressed with jsonl.zst) */
    double gen_seconds;     /* generating and writing the shards */
    double seconds;         /* all, the manifest included */
    char *manifest;         /* the manifest JSON (NUL-terminated); caller frees */
    size_t manifest_len;
} zpi_gen_result;

/* Generate the dataset. ZP_OK and *res filled (release res->manifest with
 * free()); else an error status with the message in *err (ZP_ERR_INVALID
 * naming the setting and its value, ZP_ERR_IO naming the file and the
 * system's reason, ZP_ERR_NOMEM), and res->manifest NULL. */
zp_status zpi_gen(const zpi_gen_config *cfg, zpi_gen_result *res, zpi_err *err);

#endif
