/*
 * pipeline_internal.h - the pipeline's private structures, shared by
 * pipeline.c (API, builder, consumer side), engine.c (scheduling of operator
 * tasks), record.c (the record handle given to callbacks) and packer.c (the
 * ordered batch stage).
 *
 * Threading model (docs/pipeline.md has the prose version):
 *  - The consumer thread calls zp_pipeline_next(); it only touches the
 *    output queue (qmu).
 *  - The engine thread (a pthread owned by the pipeline) opens an OpenMP
 *    parallel region of cfg.threads threads; one thread admits the first
 *    chunks, and from then on work spreads as tasks: each operator (stage)
 *    has a FIFO of ready chunks and runs at most `parallelism` tasks; a task
 *    that finishes a chunk hands it to the next stage (spawning a task when
 *    that stage has a free slot) and takes the next ready chunk of its own
 *    stage. Completed chunks go to a reorder window; whoever completes the
 *    chunk next in order becomes the drainer and runs the batch stage for
 *    all consecutive completed chunks, in order (so batches are
 *    deterministic), then retires them and admits new chunks.
 *  - mu protects the stage queues, running counts, reorder window and
 *    admission state. It is never held while running a stage or spawning a
 *    task (a task may run undeferred, inside the spawning call).
 */
#ifndef ZP_PIPELINE_INTERNAL_H
#define ZP_PIPELINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "error.h"
#include "json.h"
#include "observe_internal.h"
#include "shard_cache.h"
#include "zephon/pipeline.h"
#include "zephon/tokenizer.h"

#define ZPI_MAX_MAPS 8
#define ZPI_MAX_STAGES (ZPI_MAX_MAPS + 2)


/* ZPI_REC_TEXT: text_off/text_len hold the tokenize text, either extracted
 * at fetch (then a new JSON from a callback invalidates it) or set by a
 * callback (ZPI_REC_TEXT_USER). */
enum { ZPI_REC_SKIP = 1u, ZPI_REC_DROP = 2u, ZPI_REC_TEXT = 4u, ZPI_REC_TEXT_USER = 8u };

typedef struct zpi_rec {
    uint64_t json_off; /* in chunk->json */
    size_t json_len;
    uint64_t text_off; /* in chunk->text, when ZPI_REC_TEXT */
    size_t text_len;
    uint64_t tok_off;  /* in chunk->tok */
    size_t tok_len;
    uint32_t flags;
} zpi_rec;

typedef struct zpi_chunk {
    uint64_t seq;       /* admission order */
    uint32_t epoch;
    uint64_t pos0;      /* first position (within the epoch) */
    size_t n;           /* samples */
    int last_in_epoch;
    zp_sample *samples; /* n (capacity chunk_samples) */
    zpi_rec *recs;      /* n */
    char *json;         /* record bytes, ZPI_JSON_PADDING spare at the end */
    size_t json_len, json_cap;
    char *text;         /* texts set by callbacks */
    size_t text_len, text_cap;
    int32_t *tok;       /* token ids */
    size_t tok_len, tok_cap;
    int stage;          /* next stage to run */
    int complete;
    uint64_t enq_ns;    /* when it was queued for its stage (observability) */
    zp_status err;
    char errmsg[ZPI_ERRMAX];
    uint64_t skipped, filtered;
    struct zpi_chunk *next; /* stage FIFO link */
} zpi_chunk;

/* Per-thread resources, indexed by omp_get_thread_num(). Created lazily by
 * the thread that owns the slot. */
typedef struct zpi_worker {
    zpi_json *json;
    zp_encoder *enc;
} zpi_worker;

typedef enum zpi_stage_kind { ZPI_STAGE_FETCH, ZPI_STAGE_MAP, ZPI_STAGE_TOKENIZE } zpi_stage_kind;

typedef struct zpi_stage {
    zpi_stage_kind kind;
    char name[32];
    size_t parallelism;
    zp_map_fn fn; /* map */
    void *user;
    /* scheduling state, under mu */
    size_t running;
    zpi_chunk *head, *tail;
    size_t queued;
} zpi_stage;

/* A batch buffer: the zp_batch handed out plus the arrays it points into. */
typedef struct zpi_batchbuf {
    zp_batch b;
    zp_sample *samples;
    size_t samples_cap;
    char *data;
    size_t data_len, data_cap;
    uint64_t *offsets; /* microbatch + 1 */
    int32_t *tokens;   /* microbatch * cols */
    uint8_t *mask;
    int32_t *seg;
    zp_pipeline_counts delta; /* what delivering this batch adds to the counts */
    struct zpi_batchbuf *next;
} zpi_batchbuf;

/* The ordered batch stage's state (touched only by the drainer). */
typedef struct zpi_packer {
    zpi_batchbuf *cur;  /* batch being filled, or NULL */
    size_t row, col;    /* token modes: fill position */
    int32_t seg;        /* segment id of the current document in the row */
    uint64_t next_index;
    zp_pipeline_counts pending; /* skips/filters not yet attached to a batch */
} zpi_packer;

struct zp_pipeline {
    zp_pipeline_config cfg;
    zp_worksource *ws;
    zp_dataset *ds;
    char errmsg[ZPI_ERRMAX];

    /* operators */
    zpi_stage stages[ZPI_MAX_STAGES];
    int n_stages;
    int n_maps;
    char *tok_id, *tok_field;
    size_t tok_parallelism;
    zp_tokenizer *tok;
    int32_t eot;
    size_t prefetch_buffer, prefetch_parallelism; /* recorded; see docs */

    /* observability: on when `observe`; obs exists once started */
    int observe;
    zpi_obs *obs;

    /* engine */
    int started;
    int threads;
    pthread_t engine;
    atomic_int stop;
    pthread_mutex_t mu;
    zpi_shard_cache *cache;
    zpi_worker *workers;
    zpi_chunk *chunk_pool;   /* in_flight chunks */
    zpi_chunk *chunk_free;   /* free list, under mu */
    zpi_chunk **window;      /* reorder window: seq % W */
    size_t W;
    uint64_t next_seq;       /* next chunk to drain */
    uint64_t admit_seq;      /* next chunk to admit */
    size_t in_flight;
    int draining;
    int admit_done;
    uint32_t adm_epoch, end_epoch; /* end_epoch = UINT32_MAX without end */
    uint64_t adm_pos, per_rank;
    zp_worksource_state start_state;
    zpi_packer pk;

    /* prefetch: shards of the next `prefetch_buffer` positions are loaded
     * into the shard cache ahead of fetch, by at most prefetch_parallelism
     * tasks. Under mu. */
    uint32_t pf_epoch;
    uint64_t pf_pos;
    uint32_t pf_recent[16];
    unsigned pf_recent_n;
    uint32_t pf_queue[64];
    size_t pf_head, pf_count, pf_running;

    /* output queue, under qmu */
    pthread_mutex_t qmu;
    pthread_cond_t q_ready, q_free;
    zpi_batchbuf *bufs;
    size_t n_bufs;
    zpi_batchbuf *free_list;
    zpi_batchbuf *ready_head, *ready_tail;
    zpi_batchbuf *held;       /* given to the consumer */
    int final_set;
    zp_status final_status;
    char final_msg[ZPI_ERRMAX];

    /* counters: written by the drainer, read by the consumer under qmu */
    zp_pipeline_counts counts;
    zp_worksource_state resume;
};

/* engine.c */
zp_status zpi_engine_start(zp_pipeline *p);
void zpi_engine_stop(zp_pipeline *p);

/* record.c: run a map callback on record i of chunk c. */
zp_status zpi_record_map(zp_pipeline *p, zpi_stage *st, zpi_worker *w, zpi_chunk *c, size_t i,
                         char *err, size_t errcap);
/* Text of record i for tokenize (parsing its JSON when not set). */
zp_status zpi_record_tokenize_text(zp_pipeline *p, zpi_worker *w, zpi_chunk *c, size_t i,
                                   const char **s, size_t *n, char *err, size_t errcap);
/* Append bytes to a chunk arena, keeping ZPI_JSON_PADDING spare. */
zp_status zpi_arena_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n,
                           uint64_t *off);

/* packer.c (called by the drainer only). Feed one completed chunk; may
 * block waiting for a free batch buffer. Returns ZP_ERR_STATE when the
 * pipeline is stopping. */
zp_status zpi_pack_chunk(zp_pipeline *p, zpi_chunk *c);
/* Flush the batch being filled (end of an epoch). */
zp_status zpi_pack_flush(zp_pipeline *p, int last_in_epoch);
/* Push the batch being filled only if it is full (before an error). */
void zpi_pack_flush_full(zp_pipeline *p);
/* Output queue. */
zp_status zpi_out_get_free(zp_pipeline *p, zpi_batchbuf **out);
void zpi_out_push(zp_pipeline *p, zpi_batchbuf *bb);
void zpi_out_finish(zp_pipeline *p, zp_status st, const char *msg);
zp_status zpi_batchbufs_alloc(zp_pipeline *p);
void zpi_batchbufs_free(zp_pipeline *p);

/* observe.c */
zp_status zpi_obs_create(zp_pipeline *p);
void zpi_obs_destroy(zp_pipeline *p);
void zpi_obs_stage_tick(zp_pipeline *p, int s, uint64_t now);

/* pipeline.c */
void zpi_pipeline_log(const zp_pipeline *p, zp_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
