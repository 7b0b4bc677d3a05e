/*
 * outq.h - the pipeline's output queue (private): finished batches between
 * the ordered batch stage (the producer) and zp_pipeline_next() (the
 * consumer), after nng's msgqueue.
 *
 * Batch buffers cycle free -> being filled (producer) -> ready FIFO -> held
 * by the consumer -> free. `n_bufs` of them are in rotation; the producer
 * blocks for a free one (backpressure), the consumer for a ready one or the
 * final status. A buffer the consumer keeps (zpi_outq_keep: a zero-copy
 * view outlives the next call) leaves the rotation until it is released;
 * the producer then allocates a replacement, so keeping never stalls the
 * stream, and memory is n_bufs + kept buffers (released ones beyond
 * 2 * n_bufs + kept are freed).
 * The final status (ZP_END or the stream's error, with its message) is set
 * once and delivered after every batch pushed before it. The queue also
 * keeps the counts of what was delivered (zp_pipeline_counts).
 *
 * Thread safety: one producer thread at a time and one consumer thread;
 * every function takes the queue's lock, except init/fini.
 */
#ifndef ZP_OUTQ_H
#define ZP_OUTQ_H

#include <pthread.h>

#include "base/error.h"
#include "base/obs_counters.h"
#include "base/util.h"
#include "zephon/batch.h"

/* Where the stream resumes after a batch (the checkpoint state): the next
 * sample of the rank's stream, the tokens of it already delivered, and
 * whether the next row starts with the previous row's last token. */
typedef struct zpi_resume_pt {
    int valid;
    uint32_t epoch;
    uint64_t position;
    uint64_t token_offset;
    int carry;
    uint64_t rows; /* best-fit packing: position is the first of a window,
                      rows of which were delivered; */
    size_t n_done; /* and the documents of it delivered, n_done pairs */
    uint64_t *done; /* (k, t): the one at position + k, whole (t = 0) or its
                       first t tokens (borrowed from the batch buffer or the
                       checkpoint's copy) */
} zpi_resume_pt;

/* What a row adds to the counts (attention balance moves rows between
 * batches). */
typedef struct zpi_rowacct {
    uint64_t tokens, truncated, cut;
} zpi_rowacct;

/* A batch buffer: the zp_batch handed out plus the arrays it points into. */
typedef struct zpi_batchbuf {
    zp_batch b;
    zp_sample *samples;
    size_t samples_cap;
    uint32_t *srow;    /* the row of each sample's first token */
    size_t srow_cap;
    char *data;
    size_t data_len, data_cap;
    uint64_t *offsets; /* record mode: rows + 1 */
    int32_t *tokens;   /* token modes: rows * cols */
    uint8_t *mask;
    int32_t *seg;
    /* document masking (zp_pipeline_doc_masking), when asked: */
    int32_t *pos;      /* rows * cols */
    int32_t *cu;       /* rows * (cols - 1) + 1 */
    int32_t *ndocs;    /* rows */
    int64_t *rowpos;   /* rows: the document position of each row's first token */
    zp_array arrays[16];      /* fixed-shape fields (reader.h), b.n_arrays of them */
    unsigned char *fixed[16]; /* their data: rows * item_bytes each */
    size_t fixed_cap[16];
    zp_pipeline_counts delta; /* what delivering this batch adds to the counts */
    zpi_resume_pt resume;     /* the stream's state after this batch */
    uint64_t bal_done;        /* attention balance: this is batch bal_done - 1
                                 of a window, the stream resumes at the
                                 window's start (resume not valid); 0: at a
                                 window boundary */
    struct zpi_rowacct *racct; /* balance: per row, what it adds to the counts */
    uint64_t *rpart;          /* balance: per row and mixture part, tokens */
    uint64_t *done;           /* resume.done's storage (owned) */
    size_t done_cap;
    uint64_t *part_samples;   /* [nparts] per mixture part: samples listed and */
    uint64_t *part_tokens;    /* tokens placed in this batch (NULL: none yet) */
    zpi_fifo_node node;       /* link in the free list or the ready FIFO */
    int kept;                 /* out of the rotation until zpi_outq_release */
} zpi_batchbuf;

/* prefetch_batches = auto: the queue deepens while it runs when the
 * consumer waits for batches in the same stretch in which the producer
 * waits for room, i.e. when production comes in bursts that a deeper
 * queue would absorb (docs/pipeline.md, "Automatic prefetch"). */
typedef struct zpi_outq_tune {
    int on;
    size_t prefetch;     /* the depth now */
    size_t max;          /* the most it may reach */
    size_t raises;
    uint64_t win_batches; /* the stretch measured: batches taken, */
    uint64_t win_t0;      /* since (ns), */
    uint64_t stall_ns;    /* consumer waiting (after the first batch), */
    uint64_t blocked_ns;  /* producer waiting for a free buffer */
    uint64_t waited_ns;   /* consumer waiting after its first batch, in all */
    char why[200];        /* the last decision, for the metrics */
} zpi_outq_tune;

/* A consumer waiting for batches is woken when up to this many are ready
 * (wake_count in outq.c), or after ZPI_OUTQ_WAKE_NS with fewer. */
#define ZPI_OUTQ_WAKE_BATCHES 4
#define ZPI_OUTQ_WAKE_NS (10u * 1000000u)
/* ... and only a consumer that spends less than this with a batch (one
 * that passes batches on: a wake costs as much as its step) */
#define ZPI_OUTQ_WAKE_STEP_NS (20u * 1000u)

typedef struct zpi_outq {
    pthread_mutex_t mu;
    pthread_cond_t ready_cv, free_cv;
    zpi_batchbuf **all;        /* every allocated buffer */
    size_t n_all, cap_all;
    size_t n_bufs;             /* buffers in rotation (not kept) */
    size_t n_kept;
    size_t rows, cols;         /* shape of new buffers */
    unsigned masking;          /* ZP_OUT_* arrays new buffers have */
    zpi_fifo free, ready;
    zpi_batchbuf *held;        /* handed to the consumer */
    int closed;                /* producers get no more buffers */
    int final_set;
    zpi_err final;             /* ZP_END or the stream's error */
    zp_pipeline_counts counts; /* delivered so far */
    zpi_outq_tune tune;
    /* a waiting consumer is woken when this many batches are ready (0: not
     * waiting), so that a consumer faster than the pipeline is not woken
     * (two context switches) for every batch; it wakes by itself after
     * ZPI_OUTQ_WAKE_NS when fewer come */
    size_t wake_at;
    uint64_t last_taken_ns; /* when the consumer took its last batch */
    /* the stall watchdog (zpi_outq_watch): 0 = off */
    uint64_t watch_ns;
    void (*watch_fn)(void *user, uint64_t waited_ns);
    void *watch_user;
} zpi_outq;

/* *a += *d, field by field. */
void zpi_counts_add(zp_pipeline_counts *a, const zp_pipeline_counts *d);

/* Sets up n_bufs buffers for batches of `rows` rows: record rows when cols
 * is 0, else token rows of `cols` tokens, with the document-masking arrays
 * of `masking` (ZP_OUT_* flags). On failure the queue can still be given to
 * zpi_outq_fini. */
zp_status zpi_outq_init(zpi_outq *q, size_t n_bufs, size_t rows, size_t cols, unsigned masking);
void zpi_outq_fini(zpi_outq *q);
/* prefetch_batches = auto (before the queue is shared): the depth starts at
 * `prefetch` (n_bufs counts it) and may grow to `max`. */
void zpi_outq_autotune(zpi_outq *q, size_t prefetch, size_t max);
/* The prefetch depth now, whether it is automatic, and the last decision
 * ("" before one; at most len - 1 bytes copied). */
size_t zpi_outq_prefetch(zpi_outq *q, int *is_auto, size_t *cap, char *why, size_t len);
/* The time the consumer has waited for batches since it took its first
 * (ns; counted whether the depth is automatic or not): what the engine's
 * tuner measures. Any thread. */
uint64_t zpi_outq_waited_ns(zpi_outq *q);

/* Producer: take a free buffer, waiting while all are in use. When
 * blocked_ns is given, the time spent waiting is added to it. ZP_ERR_STATE
 * (and *out NULL) once the queue is closed. */
zp_status zpi_outq_get_free(zpi_outq *q, zpi_ctr *blocked_ns, zpi_batchbuf **out);
/* Producer: give back a buffer taken with zpi_outq_get_free, unused. */
void zpi_outq_put_back(zpi_outq *q, zpi_batchbuf *bb);
/* Producer: append a filled buffer to the ready FIFO. */
void zpi_outq_push(zpi_outq *q, zpi_batchbuf *bb);
/* Sets the final status once (later calls only wake the consumer); msg may
 * be NULL. `extra` (may be NULL) is added to the counts: what was skipped
 * or filtered after the last batch. */
void zpi_outq_finish(zpi_outq *q, zp_status st, const char *msg, const zp_pipeline_counts *extra);
/* Wakes a producer waiting for a buffer and refuses it further ones. */
void zpi_outq_close(zpi_outq *q);

/* Consumer: keep bb (the held buffer) out of the rotation past the next
 * zpi_outq_next, until zpi_outq_release. ZP_ERR_INVALID when bb is not the
 * held buffer, ZP_ERR_NOMEM never (nothing is allocated here). */
zp_status zpi_outq_keep(zpi_outq *q, zpi_batchbuf *bb);
/* Any thread: give a kept buffer back. ZP_ERR_INVALID when bb is not a kept
 * buffer of q. */
zp_status zpi_outq_release(zpi_outq *q, zpi_batchbuf *bb);
/* Buffers kept now. */
size_t zpi_outq_kept(zpi_outq *q);

/* Consumer: returns the held buffer to the free list (unless kept), then waits for the
 * next ready buffer (ZP_OK, *out set, held until the next call) or the
 * final status (its code, with the message copied into err). When taken_ns
 * is given, it gets the time the buffer was taken, under the lock: a wait
 * measured up to then excludes the scheduler's delay in waking the
 * producer at unlock. */
zp_status zpi_outq_next(zpi_outq *q, zpi_batchbuf **out, zpi_err *err, uint64_t *taken_ns);
/* The stream's error once every batch before it was taken (the consumer's
 * next call returns it), else ZP_OK (also for ZP_END). Under the lock. */
zp_status zpi_outq_failed(zpi_outq *q);
/* Whether the final status was set. */
int zpi_outq_finished(zpi_outq *q);
void zpi_outq_counts(zpi_outq *q, zp_pipeline_counts *out);
/* Batches waiting for the consumer. */
size_t zpi_outq_ready(zpi_outq *q);
/* The stall watchdog: while zpi_outq_next waits, it calls fn(user, the
 * time waited so far) on the consumer's thread, outside the lock, after
 * each period_ns of the wait (fn NULL or period 0: off). Set before the
 * producer starts. */
void zpi_outq_watch(zpi_outq *q, uint64_t period_ns, void (*fn)(void *user, uint64_t waited_ns),
                    void *user);

#endif
