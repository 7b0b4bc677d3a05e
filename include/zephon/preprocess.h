/*
 * zephon/preprocess.h - tokenize a text dataset once, offline, into
 * pre-tokenized token shards (`zephon preprocess`, docs/preprocess.md).
 *
 * The input is any dataset of JSON shards (jsonl, jsonl.zst: paths,
 * folders, globs, manifests; zephon/dataset.h). Each input shard gives ONE
 * output shard in the output folder, with the same base name:
 *   "a/part-7.jsonl.zst" -> OUT/part-7.h5            (ZP_PREPROCESS_HDF5)
 *                        -> OUT/part-7.bin + .idx    (ZP_PREPROCESS_MEGATRON)
 * holding one document per input record, in record order (an empty text
 * gives an empty document), so the output has the input's shard structure
 * and record counts: training from OUT/manifest.json gives the same
 * batches as tokenizing the input on the fly, with the same settings.
 * OUT/manifest.json (docs/datasets.md) lists the output shards in input
 * order with their record counts and sizes; it is written last.
 *
 * Atomicity: every output file is written under a temporary name
 * ("<final>.part.<pid>") and renamed once complete; the manifest is written
 * beside its final name and renamed. A run that fails or is stopped aborts
 * its open writers (their .part files are removed) and writes no
 * manifest: the output is finished exactly when manifest.json exists.
 *
 * Threads: a run encodes with `threads` OpenMP threads (a num_threads
 * clause; no process-wide OpenMP setting is changed), one JSON parser and
 * one encoder per thread; the documents are written in record order.
 *
 * Errors: every call that fails keeps its message on the handle
 * (zp_preprocess_errmsg); a bad record is named by shard, line and cause:
 * "shard 'a.jsonl' line 12 (record 11): no field 'text'".
 *
 * Thread safety: one handle is used by one thread at a time.
 */
#ifndef ZEPHON_PREPROCESS_H
#define ZEPHON_PREPROCESS_H

#include "common.h"
#include "dataset.h"
#include "pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zp_preprocess zp_preprocess;

typedef enum zp_preprocess_format {
    ZP_PREPROCESS_HDF5 = 0,    /* NAME.h5: /tokens/values + /tokens/offsets */
    ZP_PREPROCESS_MEGATRON = 1 /* NAME.bin + NAME.idx (Megatron's indexed dataset) */
} zp_preprocess_format;

/* What a run did so far (progress) or in all (at the end). */
typedef struct zp_preprocess_stats {
    uint64_t docs;           /* documents written (one per input record) */
    uint64_t tokens;         /* tokens written (EOTs stored by append_eot included) */
    uint64_t skipped;        /* bad records written as empty documents (skip_bad_records) */
    uint64_t text_bytes;     /* bytes of the text fields encoded */
    uint64_t json_bytes;     /* bytes of the JSON records read (decoded, newlines included) */
    uint64_t bytes_in;       /* bytes of the input shard files as stored (compressed for
                                jsonl.zst) done; within a shard, in proportion to its
                                records done */
    uint64_t bytes_in_total; /* bytes of all input shard files this run processes */
    uint64_t bytes_out;      /* bytes of the output files completed */
    size_t shards_done;      /* output shards completed */
    size_t shards_total;     /* shards this run processes */
    double seconds;          /* since zp_preprocess_run() started */
} zp_preprocess_stats;

typedef struct zp_preprocess_config {
    /* The output folder (required; copied at create). Created (like mkdir
     * -p) when missing; it may exist and hold other files. An output file
     * of the run that exists already (a shard's .h5/.bin/.idx, or
     * manifest.json) is refused unless `force` is set. */
    const char *out_dir;
    zp_preprocess_format format; /* default ZP_PREPROCESS_HDF5 */
    /* Tokenizer id as zp_tokenizer_create() takes it. Default "gpt2". Its
     * vocabulary decides the stored dtype: uint16 when every id fits (GPT-2:
     * 50257 ids), else int32. */
    const char *tokenizer;
    const char *field;       /* the text field of each record. Default "text" */
    /* 0 (default): documents are stored without EOT (the packer adds it at
     * training time, as for text). 1: each document is stored followed by
     * the tokenizer's EOT id, as Megatron trainers expect; Zephon's
     * readers drop a trailing EOT, so both train identically through
     * Zephon. */
    int append_eot;
    /* Optional tokenizer settings, as zp_tokenizer_create() takes them (read
     * at create, borrowed until then): eot/bos override the ids append_eot
     * stores after / before each document (ZP_TOKEN_DEFAULT: the tokenizer's
     * own; bos -1: none). NULL (default): zp_tokenizer_config_init's. A
     * run over the output gives its tokenize the same overrides, so that
     * the readers drop the stored EOT and BOS. */
    const zp_tokenizer_config *tokenizer_config;
    /* Encoding threads; 0 (default): omp_get_max_threads(). At most 1024. */
    int threads;
    /* 0 (default): a bad record (not JSON, not an object, text field
     * missing or not a string) fails the run with its message. 1: it is
     * written as an empty document (no EOT), counted in stats.skipped, and
     * logged (ZP_LOG_WARN), so the record count is kept. */
    int skip_bad_records;
    /* 1: output files of the same names that exist already are replaced
     * (manifest.json is removed before the first shard is written). Default
     * 0: refused (ZP_ERR_STATE naming the file). */
    int force;
    /* 1: write each output shard's XXH64 into the manifest (each file is
     * read once more after it is written). Default 0. */
    int hash;
    /* Shards this handle processes: those with index % shard_stride ==
     * shard_offset (the MPI layer gives rank r of N stride N, offset r).
     * Default stride 1, offset 0 (all). */
    size_t shard_stride, shard_offset;
    /* Input bytes (JSON records) per unit of work. Default 64 KiB. */
    size_t block_bytes;
    /* Optional. Polled often (between blocks of records, from any of the
     * run's threads, possibly at once: read a flag); nonzero stops the run:
     * zp_preprocess_run() returns ZP_ERR_CALLBACK with "stopped". */
    int (*stop)(void *user);
    /* Optional. Called about every block with the stats so far, by one
     * thread at a time (one of the run's threads). Keep it short. */
    void (*progress)(void *user, const zp_preprocess_stats *s);
    void *user;
    zp_log_fn log; /* optional warnings (skipped records); borrowed */
    void *log_user;
} zp_preprocess_config;

/* Fill cfg with the defaults above (out_dir NULL). */
ZP_API void zp_preprocess_config_init(zp_preprocess_config *cfg);

/* Create a preprocessing job over the shards of ds (borrowed; must outlive
 * the handle; it need not be indexed: record counts are found as shards
 * are read). Checks the settings, loads the tokenizer, works out every
 * output name (two input shards with the same base name are
 * ZP_ERR_INVALID naming both; a shard that is not JSON text is
 * ZP_ERR_UNSUPPORTED). Writes nothing. OUT: *out, caller owns; release
 * with zp_preprocess_destroy(); on failure an error-only handle (read
 * zp_preprocess_errmsg(), then destroy it), NULL only when out of memory. */
ZP_API zp_status zp_preprocess_create(const zp_preprocess_config *cfg, zp_dataset *ds,
                                      zp_preprocess **out);
ZP_API void zp_preprocess_destroy(zp_preprocess *pp);

/* Create the output folder and check that no output of this handle's
 * shards (nor manifest.json) exists, unless force; then write the marker
 * "zephon-preprocess.unfinished" into the folder (and with force remove
 * manifest.json). While the marker exists, a dataset refuses every shard of
 * the folder; zp_preprocess_write_manifest() removes it. Called by
 * zp_preprocess_run(); separate so that the ranks of an MPI job can agree
 * on it before any of them writes. */
ZP_API zp_status zp_preprocess_prepare(zp_preprocess *pp);

/* Process this handle's shards in order: prepare, then for each shard
 * decode, parse, encode in parallel, write in record order, commit. No
 * manifest is written (zp_preprocess_write_manifest). On failure or stop
 * the open writer is aborted; shards completed before stay (each is
 * complete) but no manifest says the output is finished. */
ZP_API zp_status zp_preprocess_run(zp_preprocess *pp);

/* What this handle knows of output shard i (0 <= i < the dataset's shard
 * count). */
typedef struct zp_preprocess_shard {
    int done;          /* written and committed (by this handle, or set below) */
    uint64_t docs;     /* documents (= the input shard's records) */
    uint64_t tokens;
    uint64_t bytes;    /* size of the output file the manifest lists (.h5 or .bin) */
    int has_xxh64;
    uint64_t xxh64;
} zp_preprocess_shard;

/* The output file name of shard i relative to the output folder ("x.h5",
 * for Megatron the "x.bin" the manifest lists); borrowed; NULL when out of
 * range. */
ZP_API const char *zp_preprocess_output_name(const zp_preprocess *pp, size_t i);
ZP_API zp_status zp_preprocess_get_shard(const zp_preprocess *pp, size_t i,
                                         zp_preprocess_shard *out);
/* Record what another process wrote for shard i (the MPI layer gathers
 * the ranks' results to the rank writing the manifest). */
ZP_API zp_status zp_preprocess_set_shard(zp_preprocess *pp, size_t i,
                                         const zp_preprocess_shard *s);

/* Write OUT/manifest.json (durably: a temporary file synced and renamed,
 * the folder synced) listing every shard of the dataset in order with its
 * record count and size (and XXH64 with hash), then remove the folder's
 * unfinished marker. ZP_ERR_STATE when a shard is not done. */
ZP_API zp_status zp_preprocess_write_manifest(zp_preprocess *pp);

/* Stats of the last run (zeros before). */
ZP_API void zp_preprocess_get_stats(const zp_preprocess *pp, zp_preprocess_stats *out);

/* The stored token dtype (ZP_DTYPE_U16 or ZP_DTYPE_I32) and the EOT id. */
ZP_API zp_dtype zp_preprocess_dtype(const zp_preprocess *pp);
ZP_API int32_t zp_preprocess_eot(const zp_preprocess *pp);
/* The identity of the tokenizer (zp_tokenizer_ident()) that the outputs
 * record: HDF5's root attribute zephon_tokenizer, a Megatron pair's
 * PREFIX.tokenizer file, each manifest entry's "tokenizer". NULL before
 * zp_preprocess_create() succeeded. Borrowed, valid while pp lives. */
ZP_API const char *zp_preprocess_tokenizer(const zp_preprocess *pp);

/* Encode shard i into memory, without writing a file (the MPI layer's
 * shared HDF5 file): *tokens (*n_tokens ids of zp_preprocess_dtype(): a
 * uint16_t or int32_t array) and *offsets (*n_docs + 1 entries, document d
 * is tokens[offsets[d] .. offsets[d+1])), both malloc'd: the caller frees
 * them with free() (also set to NULL on error). EOT and bad records as in
 * a run; the stats are added to. */
ZP_API zp_status zp_preprocess_encode_shard(zp_preprocess *pp, size_t i, void **tokens,
                                            uint64_t *n_tokens, uint64_t **offsets,
                                            uint64_t *n_docs);

/* Where zp_preprocess_encode_shard_to() hands the tokens: n_tokens ids of
 * zp_preprocess_dtype() (uint16_t or int32_t), the next ones of the shard
 * in order, at most 2^20 at a time; the pointer is valid during the call
 * only. ZP_OK goes on; any other status stops the shard with it, and the
 * message written into err (errcap bytes, NUL-terminated) becomes the
 * error's detail. */
typedef zp_status (*zp_tokens_fn)(void *user, const void *tokens, size_t n_tokens, char *err,
                                  size_t errcap);

/* As zp_preprocess_encode_shard(), but the tokens go to put as they are
 * made instead of into one array: memory does not grow with the shard,
 * except for *offsets (8 bytes a document), which is malloc'd as there
 * (NULL on error). *n_tokens is the number put was given. */
ZP_API zp_status zp_preprocess_encode_shard_to(zp_preprocess *pp, size_t i, zp_tokens_fn put,
                                               void *user, uint64_t *n_tokens,
                                               uint64_t **offsets, uint64_t *n_docs);

/* The last error's detail (borrowed, valid until the next call on pp).
 * Never NULL ("" when there was none). */
ZP_API const char *zp_preprocess_errmsg(const zp_preprocess *pp);

#ifdef __cplusplus
}
#endif
#endif
