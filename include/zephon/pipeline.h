/*
 * zephon/pipeline.h - a rank's data pipeline and the batches it delivers.
 *
 *   fetch -> map_transform* -> tokenize? -> batch -> output buffer -> zp_pipeline_next()
 *
 * Operators run as OpenMP tasks on the pipeline's own team of `threads`
 * threads; an operator's parallelism is the number of its tasks that may run
 * at once. Work moves in chunks of `chunk_samples` consecutive samples; at
 * most `in_flight_chunks` chunks exist at a time and at most
 * `prefetch_batches` finished batches wait for the consumer, so memory is
 * set by the settings (docs/pipeline.md).
 *
 * Determinism: the batches depend only on the worksource, the operators and
 * the batch settings - never on threads, parallelism or timing.
 *
 * Thread safety: build and iterate a pipeline from one thread (the
 * consumer's). The library's own threads call the user's map callbacks.
 */
#ifndef ZEPHON_PIPELINE_H
#define ZEPHON_PIPELINE_H

#include "balance.h"
#include "batch.h"
#include "common.h"
#include "dataset.h"
#include "memory.h"
#include "record.h"
#include "tokenizer.h"
#include "watchdog.h"
#include "worksource.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zp_pipeline zp_pipeline;

/* Autotune (docs/pipeline.md, "Autotune"): a count set to ZP_AUTO is
 * chosen by the pipeline while it runs, from what it measures (the
 * consumer's wait, the operators' queues, the output queue). Accepted by
 * fetch_parallelism, prefetch_batches and the parallelism argument of the
 * operator builder calls (zp_pipeline_fetch, zp_pipeline_map_transform,
 * zp_pipeline_map_transform_batch, zp_pipeline_tokenize*). Tuning changes
 * how many tasks run and how deep queues are, never the data delivered.
 * What it chose, and why: zp_metrics_snapshot.tuning. */
#define ZP_AUTO ((size_t)-1)
#define ZP_PREFETCH_AUTO ZP_AUTO
/* Caps of prefetch_batches = auto: at most this many batches, and at most
 * this many bytes of batch buffers. */
#define ZP_PREFETCH_AUTO_MAX 64
#define ZP_PREFETCH_AUTO_BYTES ((size_t)256 << 20)

/* ------------------------------------------------------------------ config */

typedef struct zp_pipeline_config {
    int threads;             /* OpenMP threads of the pipeline's team;
                                0 (default): omp_get_max_threads(), which
                                follows OMP_NUM_THREADS */
    uint32_t epochs;         /* epochs to deliver from the worksource's
                                current state; 0 = without end. Default 1 */
    size_t chunk_samples;    /* samples per task. Default 64 */
    size_t in_flight_chunks; /* chunks in the pipeline at once; 0 (default):
                                2 * (sum of operator parallelism) + 2,
                                following automatic parallelism as it is
                                tuned */
    size_t fetch_parallelism;   /* fetch tasks at once, 1..1024, or ZP_AUTO
                                   (default): from 1, raised while running
                                   when the consumer waits and chunks queue
                                   for fetch, up to the team's threads */
    size_t prefetch_batches;    /* finished batches buffered, 0..4096, or
                                   ZP_PREFETCH_AUTO (default): from 8,
                                   deepened while running when the
                                   consumer waits for batches while the
                                   packer waits for room (bursts), up to
                                   ZP_PREFETCH_AUTO_MAX batches or
                                   ZP_PREFETCH_AUTO_BYTES of batch buffers
                                   (docs/pipeline.md) */
    size_t microbatch_size;     /* rows per batch. Default 32 */
    size_t seq_len;             /* tokens per row minus one. Default 2048 */
    zp_pack_mode pack;          /* token modes; default ZP_PACK_CONCAT once
                                   tokenize is set */
    zp_bad_record on_bad_record; /* default ZP_BAD_RECORD_FAIL */
    size_t shard_cache_bytes;    /* decoded shards kept when unused, bytes.
                                    Default 1 GiB */
    uint64_t fetch_delay_us;     /* fault injection: sleep this long per
                                    fetched chunk. Default 0 */
    zp_log_fn log;               /* optional; borrowed */
    void *log_user;
    double watchdog_seconds;     /* stall watchdog (zephon/watchdog.h): when
                                    the consumer has waited this long in one
                                    zp_pipeline_next(), log what every
                                    operator is doing (ZP_LOG_WARN). Seconds;
                                    0 = off. Default 30 */
    size_t memory_budget;        /* bytes that every buffer the pipeline owns
                                    is sized from (zephon/memory.h,
                                    docs/pipeline.md "Memory budget"): the
                                    output queue, in-flight chunks, shard
                                    cache and kept batches; a budget too small
                                    for the settings fails the start. 0 = off
                                    (default): the settings alone decide */
} zp_pipeline_config;

ZP_API void zp_pipeline_config_init(zp_pipeline_config *cfg);

/* ------------------------------------------------------------------ lifecycle */

/* Create a pipeline reading from ws (borrowed; must outlive the pipeline
 * and must not be used by the caller while the pipeline runs). The stream
 * starts at the worksource's state when the first zp_pipeline_next() is
 * called. cfg may be NULL. Nothing runs until the first zp_pipeline_next().
 * OUT: *out, caller owns; release with zp_pipeline_destroy(), also on
 * failure: then *out is an error-only handle whose zp_pipeline_errmsg()
 * names the setting and its value (e.g. "chunk_samples = 0: must be
 * 1..1048576"); the builder calls and zp_pipeline_next() on it return the
 * same error. *out is
 * NULL only when even that handle could not be allocated (ZP_ERR_NOMEM) or
 * out is NULL (ZP_ERR_INVALID). */
ZP_API zp_status zp_pipeline_create(zp_worksource *ws, const zp_pipeline_config *cfg, zp_pipeline **out);

/* Stop the pipeline's threads (mid-stream is fine: no leak, no hang) and
 * free it. NULL is accepted. */
ZP_API void zp_pipeline_destroy(zp_pipeline *p);

/* Builder calls mirroring the seed API; only before the first next(). Each
 * returns ZP_ERR_STATE after iteration started, ZP_ERR_INVALID on a bad
 * value; zp_pipeline_errmsg() then names the call, the setting and the
 * value (e.g. "zp_pipeline_fetch: parallelism = 0: must be 1..1024").
 * Every parallelism may be ZP_AUTO: tuned while running (from 1, up to the
 * team's threads; a map callback must then be safe to call concurrently,
 * as with any parallelism above 1). */
/* zp_pipeline_prefetch: the look-ahead of shard loads (buffer_size samples
 * ahead of fetch, parallelism loads at once; buffer_size 0: off, the
 * default; docs/pipeline.md, "Autotune"). */
ZP_API zp_status zp_pipeline_prefetch(zp_pipeline *p, size_t buffer_size, size_t parallelism);
ZP_API zp_status zp_pipeline_fetch(zp_pipeline *p, size_t parallelism);
/* Append a map operator (at most 8). name may be NULL ("map_transform"). */
ZP_API zp_status zp_pipeline_map_transform(zp_pipeline *p, zp_map_fn fn, void *user, size_t parallelism,
                                    const char *name);
/* Append a map operator taking the records of a chunk at once
 * (zp_map_batch_fn); counts against the same limit of 8. */
ZP_API zp_status zp_pipeline_map_transform_batch(zp_pipeline *p, zp_map_batch_fn fn, void *user,
                                                 size_t parallelism, const char *name);
/* Tokenize the string field `field` with tokenizer id: a built-in name
 * ("gpt2", "r50k_base", "p50k_base", "cl100k_base", "o200k_base") or a path
 * (a tokenizer.json or its folder, a .tiktoken, a SentencePiece .model; see
 * zephon/tokenizer.h and docs/tokenizers.md). Packing puts the tokenizer's
 * BOS (when its config adds one) before and its EOT after each document. */
ZP_API zp_status zp_pipeline_tokenize(zp_pipeline *p, const char *tokenizer_id, const char *field,
                               size_t parallelism);
/* The same with tokenizer settings (cfg may be NULL: defaults): eot and bos
 * override the tokenizer's document boundaries, match_special matches
 * special tokens in text (zp_tokenizer_config). A resumed state must have
 * been saved with the same tokenizer identity and the same overrides. */
ZP_API zp_status zp_pipeline_tokenize_config(zp_pipeline *p, const char *tokenizer_id,
                                             const zp_tokenizer_config *cfg, const char *field,
                                             size_t parallelism);
ZP_API zp_status zp_pipeline_batch(zp_pipeline *p, size_t microbatch_size);
ZP_API zp_status zp_pipeline_pack(zp_pipeline *p, zp_pack_mode mode, size_t seq_len);
/* Best-fit packing (ZP_PACK_BESTFIT) with a window of `window` positions
 * of the rank's stream (documents; 1..ZP_PACK_WINDOW_MAX): a document of
 * up to seq_len + 1 tokens (BOS and EOT counted) is never cut, longer ones
 * are cut into full rows first, the rest placed best-fit decreasing within
 * the window (docs/packing.md). zp_pipeline_pack(p, ZP_PACK_BESTFIT, ...)
 * takes ZP_PACK_WINDOW_DEFAULT. The window's documents and their tokens are
 * held until it is packed: memory grows with window x document length. */
#define ZP_PACK_WINDOW_DEFAULT 256
#define ZP_PACK_WINDOW_MAX (1u << 20)
ZP_API zp_status zp_pipeline_pack_bestfit(zp_pipeline *p, size_t seq_len, size_t window);
/* The best-fit window in use; 0 when the pipeline does not pack best-fit. */
ZP_API size_t zp_pipeline_pack_window(const zp_pipeline *p);
ZP_API zp_status zp_pipeline_options(zp_pipeline *p, size_t prefetch_batches);
/* The memory budget (zp_pipeline_config.memory_budget), bytes; 0 = off.
 * Checked against the settings at the first zp_pipeline_next(), which fails
 * with ZP_ERR_LIMIT when the budget is too small: the message names the
 * budget, what the settings need and each part (e.g. "memory_budget = 64.0
 * MiB (67108864 bytes): too small for these settings: needs at least ..."). */
ZP_API zp_status zp_pipeline_memory_budget(zp_pipeline *p, size_t bytes);
/* The memory plan (zephon/memory.h): with a budget, the sizes the pipeline
 * uses (as computed at its start, or as it would compute them now); without
 * one, what the settings cost. Reads the shards' sizes (not their records)
 * the first time. ZP_ERR_LIMIT (message in zp_pipeline_errmsg) when the
 * budget is too small for the settings. Consumer thread only. */
ZP_API zp_status zp_pipeline_memory_plan(zp_pipeline *p, zp_memory_plan *out);
/* The stall watchdog's period (zp_pipeline_config.watchdog_seconds,
 * zephon/watchdog.h): seconds, 0 = off. ZP_ERR_INVALID outside 0..1e6. */
ZP_API zp_status zp_pipeline_watchdog(zp_pipeline *p, double seconds);
/* Token modes: also deliver the document-masking outputs named by
 * `outputs` (ZP_OUT_* flags, zephon/batch.h; 0 turns them off), computed
 * in the pipeline's packing thread; positions: ZP_POSITIONS_RESTART or
 * _CONTINUE. A run that does not ask pays nothing. ZP_ERR_INVALID on an
 * unknown flag or mode; zp_pipeline_next() refuses them without tokenize. */
ZP_API zp_status zp_pipeline_doc_masking(zp_pipeline *p, unsigned outputs,
                                         zp_position_mode positions);
/* Token modes: balance the attention cost (zephon/balance.h) within
 * windows of `window` consecutive batches of the rank's stream (its
 * gradient-accumulation microbatches of one step): the window's rows are
 * given to its batches by zp_balance_rows, so that the costliest
 * microbatch is as cheap as the window allows; each batch's rows stay in
 * stream order, its samples are the documents whose first token is in its
 * rows. An epoch's last window may be shorter. Every row is delivered
 * exactly once, deterministically; a state saved inside a window resumes
 * exactly (the window is packed again and its delivered batches skipped),
 * but only a state saved at a window boundary can change the world size.
 * An error is delivered after the last whole window. 0 or 1: off
 * (default); at most ZP_BALANCE_WINDOW_MAX. The window's batches are held
 * until it is complete: memory grows by `window` batch buffers. */
ZP_API zp_status zp_pipeline_balance(zp_pipeline *p, size_t window);
/* The balance window in use (0: off). */
ZP_API size_t zp_pipeline_balance_window(const zp_pipeline *p);

/* Deliver the next batch. Blocks until one is ready.
 * @return ZP_OK with *out set (borrowed until the next call);
 *         ZP_END when the configured epochs are done;
 *         an error status when a worker failed: the message
 *         (zp_pipeline_errmsg) names the shard, the record and the cause.
 *         Errors come in stream order, after every batch that precedes
 *         the bad record, and stay: later calls return the same error. */
ZP_API zp_status zp_pipeline_next(zp_pipeline *p, const zp_batch **out);

/* A digest of the batch's contents (XXH64, seed 0): record mode: each
 * row's length (uint64) then the rows' bytes; token modes: tokens,
 * loss_mask and segment_ids, then the document-masking outputs delivered
 * (position_ids; cu_seqlens and max_seqlen; doc_counts); then each
 * fixed-shape field's name and bytes.
 * What `zephon run --emit-digest` prints: equal streams, equal digests. */
ZP_API uint64_t zp_batch_digest(const zp_batch *b);

/* Keep batch b, the one the last zp_pipeline_next() returned, valid past
 * the next zp_pipeline_next() call, until zp_pipeline_release_batch(): a
 * zero-copy view of it (the Python binding's arrays) may live as long as
 * its user wants. The pipeline keeps producing meanwhile: a kept batch's
 * buffer leaves the rotation and a new one takes its place, so memory grows
 * by one batch per kept batch (as a copy would) and keeping every batch of
 * a stream never stalls it. Keeping twice is keeping once. Under a memory
 * budget kept batches count against it: at most
 * zp_memory_plan.kept_batches are kept at once, and keeping one more fails
 * with ZP_ERR_LIMIT (the batch stays valid until the next
 * zp_pipeline_next(), as any batch not kept).
 * @return ZP_OK; ZP_ERR_INVALID when b is not the last batch returned;
 *         ZP_ERR_STATE before the first batch; ZP_ERR_LIMIT past the
 *         budget's kept batches. Consumer thread only. */
ZP_API zp_status zp_pipeline_keep_batch(zp_pipeline *p, const zp_batch *b);
/* Hand a kept batch back: its memory may be reused from now on. Any thread
 * (also while another thread is inside zp_pipeline_next()).
 * @return ZP_OK; ZP_ERR_INVALID when b is not a kept batch of p.
 * zp_pipeline_destroy() frees kept batches too: release (or stop using)
 * them before. */
ZP_API zp_status zp_pipeline_release_batch(zp_pipeline *p, const zp_batch *b);
/* Batches kept now. */
ZP_API size_t zp_pipeline_kept_batches(const zp_pipeline *p);

/* Detail of the last error (borrowed, valid until the next call on p): it
 * names the setting and value, or the shard, record and cause. Kept until
 * the next failing call (successful calls do not clear it); "" when no call
 * failed; never NULL (also for p NULL). */
ZP_API const char *zp_pipeline_errmsg(const zp_pipeline *p);

ZP_API void zp_pipeline_get_counts(const zp_pipeline *p, zp_pipeline_counts *out);

/* The worksource state to resume after the last delivered batch: a new
 * pipeline on a worksource restored with it continues the identical stream
 * (record mode; token modes resume at the first document not yet started;
 * best-fit packing at the first document of the window in progress, and
 * attention balance at the start of its window in progress, whose
 * documents already delivered come again: zp_pipeline_state_save() is
 * exact). */
ZP_API void zp_pipeline_resume_state(const zp_pipeline *p, zp_worksource_state *st);

/* The tokenizer's EOT id in token modes, -1 otherwise. */
ZP_API int32_t zp_pipeline_eot(const zp_pipeline *p);
/* The BOS id packed before each document, -1 when none (or no tokenize). */
ZP_API int32_t zp_pipeline_bos(const zp_pipeline *p);
/* The pipeline's tokenizer (NULL without tokenize). Borrowed, valid while p
 * lives. */
ZP_API const zp_tokenizer *zp_pipeline_tokenizer(const zp_pipeline *p);

#ifdef __cplusplus
}
#endif
#endif
