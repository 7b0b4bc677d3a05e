/*
 * operators.h - the bodies of the pipeline's operators (private).
 *
 *   fetch (op_fetch.c)      sample ids -> record bytes, via the shard cache
 *   map (op_map.c)          a user callback on each record (record.c is the
 *                           zp_record handle it sees)
 *   tokenize (op_tokenize.c) the text field -> token ids
 *   prefetch (op_fetch.c)   load one shard into the shard cache ahead of fetch
 *
 * The ordered batch stage is packer.c; scheduling is engine.c.
 *
 * An operator body runs on one chunk, in one task, on one team thread; it
 * takes the narrow pieces it needs: the run's read-only settings
 * (zpi_op_env), the operator's own settings (zpi_op), the calling thread's
 * resources (zpi_worker) and observability slot (NULL when off). It never
 * locks: the chunk is its own, the worker is its thread's, the shard cache
 * is thread-safe, and counters have one writer per thread. A record-level
 * problem follows the bad-record policy (zpi_op_bad_record); anything else
 * fails the chunk (zpi_chunk_fail), and the scheduler delivers that error in
 * stream order.
 */
#ifndef ZP_OPERATORS_H
#define ZP_OPERATORS_H

#include "ops/chunk.h"
#include "base/json.h"
#include "base/obs_counters.h"
#include "base/util.h"
#include "data/shard_cache.h"
#include "zephon/batch.h"
#include "zephon/dataset.h"
#include "zephon/record.h"
#include "zephon/tokenizer.h"
#include "zephon/watchdog.h"

#include <stdatomic.h>

#define ZPI_MAX_MAPS 8
#define ZPI_MAX_OPS (ZPI_MAX_MAPS + 2)

typedef enum zpi_op_kind { ZPI_OP_FETCH, ZPI_OP_MAP, ZPI_OP_TOKENIZE } zpi_op_kind;

/* One operator's settings, fixed before the run starts. */
typedef struct zpi_op {
    zpi_op_kind kind;
    char name[32];
    size_t parallelism;       /* tasks at once (ZP_AUTO in the builder) */
    size_t auto_max;          /* > 0: parallelism is tuned while running, up to this */
    zp_map_fn fn;             /* map: one record a call, or */
    zp_map_batch_fn batch_fn; /* map: a chunk's records a call */
    void *user;               /* map */
} zpi_op;

/* What every operator reads during a run (read-only while it runs). */
typedef struct zpi_op_env {
    const zp_dataset *ds;          /* shard names for messages */
    zpi_shard_cache *cache;        /* fetch, prefetch */
    zp_bad_record on_bad_record;
    zp_log_fn log;                 /* may be NULL */
    void *log_user;
    const zp_tokenizer *tok;       /* NULL without tokenize */
    const char *tok_field;         /* NULL without tokenize */
    uint64_t fetch_delay_us;       /* fault injection */
    /* Set by the engine: tokenize runs and no map does, so later operators
     * read only the records' texts; fetch then parses each record where it
     * lies in the pinned shard and copies only its text. */
    int text_only;
    /* Set by the engine: fixed-shape fields can be batched (record mode or
     * pad packing: one sample per row). */
    int fixed_ok;
    /* Set by the engine when the prefetch look-ahead is automatic: fetch
     * tasks add the time they spent getting shard units from the cache
     * (loading one themselves, or waiting for another task's load: what a
     * look-ahead far enough ahead saves), in ns; NULL otherwise. */
    _Atomic uint64_t *sync_load_ns;
} zpi_op_env;

/* What a team thread is doing now, for the stall watchdog
 * (zephon/watchdog.h): written by its own thread only (relaxed stores), read
 * by the consumer's thread. op: the stage index, ZPI_ACT_PREFETCH,
 * ZPI_ACT_BATCH or ZPI_ACT_IDLE; shard1/record1: index + 1 (0: none); the
 * times are zpi_now_ns(). The fields are read one by one: a reader may see
 * a mix of two moments, which a diagnostic tolerates. */
#define ZPI_ACT_IDLE (-1)
#define ZPI_ACT_PREFETCH (-2)
#define ZPI_ACT_BATCH (-3)
typedef struct zpi_activity {
    atomic_int op;
    atomic_int state;               /* zp_task_state */
    atomic_uint_fast64_t shard1, record1;
    atomic_uint_fast64_t since_ns;  /* the current item's start */
    atomic_uint_fast64_t chunk_ns;  /* the chunk's start */
    atomic_uint_fast64_t epoch, position; /* the chunk's */
} zpi_activity;

/* Sets a's item: state, shard (UINT32_MAX: none), record (UINT64_MAX:
 * none), starting now. */
static inline void zpi_act_item(zpi_activity *a, int state, uint32_t shard, uint64_t record)
{
    if (!a)
        return;
    atomic_store_explicit(&a->shard1, shard == UINT32_MAX ? 0 : (uint64_t)shard + 1,
                          memory_order_relaxed);
    atomic_store_explicit(&a->record1, record == UINT64_MAX ? 0 : record + 1, memory_order_relaxed);
    atomic_store_explicit(&a->state, state, memory_order_relaxed);
    atomic_store_explicit(&a->since_ns, zpi_now_ns(), memory_order_relaxed);
}

/* Per-thread resources, created lazily by the thread that owns them. */
typedef struct zpi_worker {
    zpi_json *json;
    zp_encoder *enc;
    struct zpi_batch_scratch *bs; /* batch maps (record.c) */
    const void *json_of;          /* the zp_record whose JSON json holds */
    zpi_activity act;             /* the engine sets op; bodies their items */
} zpi_worker;

/* operators.c */
/* The worker's JSON parser (created on first use), or NULL after failing
 * the chunk. */
zpi_json *zpi_worker_json(zpi_worker *w, zpi_chunk *c);
/* The bad-record policy: with ZP_BAD_RECORD_SKIP (and st not ZP_ERR_NOMEM)
 * record i is marked skipped, counted, kept as the chunk's first skip and
 * logged as a warning; otherwise the chunk fails with msg. */
void zpi_op_bad_record(const zpi_op_env *env, zpi_chunk *c, size_t i, zp_status st,
                       const char *msg);
/* Logs through the run's callback (no-op without one). */
void zpi_op_log(const zpi_op_env *env, zp_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* op_fetch.c */
void zpi_op_fetch(const zpi_op_env *env, zpi_worker *w, zpi_obs_thread *ot, zpi_chunk *c);
/* Loads shard unit `unit` (a segment, shard_cache.h) into the shard cache
 * and unpins it. A failed load is not cached: fetch meets the same error
 * and reports it in stream order. */
void zpi_op_prefetch(const zpi_op_env *env, zpi_obs_thread *ot, uint32_t unit);

/* op_map.c */
void zpi_op_map(const zpi_op_env *env, const zpi_op *op, zpi_worker *w, zpi_chunk *c);

/* op_tokenize.c */
void zpi_op_tokenize(const zpi_op_env *env, zpi_worker *w, zpi_chunk *c);

/* record.c: run op's callback on record i of c; on failure err holds the
 * message naming the shard, the line and the cause. */
zp_status zpi_record_map(const zpi_op_env *env, const zpi_op *op, zpi_worker *w, zpi_chunk *c,
                         size_t i, zpi_err *err);
/* record.c: run op's batch callback on the live records of c; bad records
 * follow the policy, a failed call fails the chunk. */
void zpi_record_map_batch(const zpi_op_env *env, const zpi_op *op, zpi_worker *w, zpi_chunk *c);
/* Frees the worker's batch scratch. */
void zpi_record_scratch_free(zpi_worker *w);
/* The text of record i for tokenize (parsing its JSON when not kept). A
 * tokenize field that is an array of token ids (a pre-tokenized document:
 * a Parquet list<int> column such as input_ids, or the same in a JSON
 * line) is not a text: its ids are appended to c->tok as the record's
 * tokens (tok_off, tok_len, ZPI_REC_TOKENS) and *ids set to 1. */
zp_status zpi_record_tokenize_text(const zpi_op_env *env, zpi_worker *w, zpi_chunk *c, size_t i,
                                   const char **s, size_t *n, int *ids, zpi_err *err);

#endif
