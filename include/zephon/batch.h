/*
 * zephon/batch.h - a delivered batch, its packing mode and the stream's counts
 * (included by zephon/pipeline.h). Types only.
 */
#ifndef ZEPHON_BATCH_H
#define ZEPHON_BATCH_H

#include "array.h"
#include "common.h"
#include "worksource.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum zp_pack_mode {
    ZP_PACK_RECORDS = 0, /* no tokenize: a batch stacks microbatch_size records */
    ZP_PACK_CONCAT = 1,  /* concatenate documents (each followed by EOT) and cut
                            rows of seq_len + 1 tokens; row k+1 starts with the
                            last token of row k (each token is a target once) */
    ZP_PACK_PAD = 2,     /* one document per row: its tokens + EOT, truncated to
                            seq_len + 1 or padded (loss_mask 0) */
    ZP_PACK_BESTFIT = 3  /* best-fit within a window of documents: a document
                            of up to seq_len + 1 tokens is never cut, longer
                            ones are cut into full rows first (overlapping by
                            one token, as concat), the rest placed best-fit
                            decreasing; rows padded (docs/packing.md) */
} zp_pack_mode;

/* A delivered batch. Borrowed from the pipeline: valid until the next
 * zp_pipeline_next() or zp_pipeline_destroy(), or, when kept
 * (zp_pipeline_keep_batch), until released. */
typedef struct zp_batch {
    uint64_t index;  /* 0-based number in this pipeline's stream */
    uint32_t epoch;  /* epoch of the batch's first sample */
    int last_in_epoch;
    zp_pack_mode mode;

    /* Samples: one per row in record mode; in token modes the documents whose
     * first token is in this batch, in stream order. */
    size_t n_samples;
    const zp_sample *samples;
    /* sample_rows[i]: the row of samples[i]'s first token (token modes;
     * record mode: i). */
    const uint32_t *sample_rows;

    /* Record mode: rows records; row i is data[offsets[i] .. offsets[i+1]). */
    size_t rows;
    const char *data;
    const uint64_t *offsets;

    /* Token modes: rows == microbatch_size rows of cols == seq_len + 1 tokens
     * (row-major). Inputs are tokens[:, :-1], targets tokens[:, 1:].
     * loss_mask[i] is 1 where tokens[i] is real, 0 for padding; a target
     * counts when its mask is 1. segment_ids[i] numbers the documents within
     * a row (0, 1, ...; an EOT belongs to the document it ends), -1 for
     * padding: keep attention within equal segment ids. rows_filled counts
     * rows holding at least one real token. */
    size_t cols;
    size_t rows_filled;
    const int32_t *tokens;
    const uint8_t *loss_mask;
    const int32_t *segment_ids;

    /* Fixed-shape fields (record mode and ZP_PACK_PAD, one sample per row):
     * arrays[k] is field k for the batch's rows (rows_filled of them in pad
     * mode, the rest zero). 0 for JSON datasets. */
    size_t n_arrays;
    const zp_array *arrays;

    /* Document masking (token modes; each NULL / 0 unless asked for with
     * zp_pipeline_doc_masking). docs/packing.md has a worked example.
     * position_ids: rows x cols like tokens: each token's position in its
     *   document, 0 at each document start in the row (ZP_POSITIONS_RESTART;
     *   ZP_POSITIONS_CONTINUE: the row's first document, cut from the row
     *   before, goes on from its position there); a padding run counts
     *   0, 1, ... on its own.
     * cu_seqlens: n_cu_seqlens int32 offsets over the inputs
     *   (tokens[:, :-1]) flattened row by row, rows x (cols - 1) positions:
     *   0, the start of every other document or padding run, and at each
     *   row start, then rows x (cols - 1). Sequence k is
     *   [cu_seqlens[k], cu_seqlens[k+1]); max_seqlen is the longest. As
     *   FlashAttention's variable-length kernels take them.
     * doc_counts: rows int32: the documents with a token among the row's
     *   inputs (padding runs not counted). */
    const int32_t *position_ids;
    const int32_t *cu_seqlens;
    size_t n_cu_seqlens;
    int32_t max_seqlen;
    const int32_t *doc_counts;
} zp_batch;

/* Outputs of zp_pipeline_doc_masking (flags). */
#define ZP_OUT_POSITION_IDS 1u
#define ZP_OUT_CU_SEQLENS 2u /* with max_seqlen */
#define ZP_OUT_DOC_COUNTS 4u

/* Positions of a row's first document when the row before cut it. */
typedef enum zp_position_mode {
    ZP_POSITIONS_RESTART = 0, /* 0, as Megatron's reset_position_ids (default) */
    ZP_POSITIONS_CONTINUE = 1 /* its position in the document, as if uncut */
} zp_position_mode;

/* The largest attention-cost balance window, in batches
 * (zp_pipeline_balance). */
#define ZP_BALANCE_WINDOW_MAX 4096u

/* Counts of what the stream did, for reports. */
typedef struct zp_pipeline_counts {
    uint64_t batches;     /* batches delivered */
    uint64_t samples;     /* samples delivered (record mode rows / documents) */
    uint64_t padded;      /* delivered samples that repeat (remainder padding) */
    uint64_t skipped;     /* bad records skipped (ZP_BAD_RECORD_SKIP) */
    uint64_t filtered;    /* records dropped by map callbacks */
    uint64_t tokens;      /* real tokens delivered, EOT separators included */
    uint64_t truncated_tokens; /* tokens cut by ZP_PACK_PAD */
    uint64_t pad_tokens;  /* padding tokens delivered */
    uint64_t cut_documents; /* token modes: delivered documents split over
                               rows (concat, bestfit) or truncated (pad);
                               counted with the batch of their first token */
    /* Attention-cost balance (zp_pipeline_balance; 0 without): windows
     * balanced, the sum of their rows' costs (zephon/balance.h), and the
     * sums over windows of the costliest microbatch's cost times the
     * window's microbatches, before and after: attn_peak_before /
     * attn_cost is the mean max/mean ratio (1 = perfectly even). Counted
     * with each window's last batch. */
    uint64_t balance_windows;
    uint64_t attn_cost;
    uint64_t attn_peak_before;
    uint64_t attn_peak_after;
} zp_pipeline_counts;

#ifdef __cplusplus
}
#endif
#endif
