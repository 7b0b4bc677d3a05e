/*
 * zephon/worksource.h - the global sample plan: which samples this rank
 * reads, in which order, in each epoch.
 *
 * Guarantees (docs/worksource.md explains them):
 *  - Deterministic: the stream depends only on (dataset, seed, epoch, rank,
 *    world size, shuffle settings).
 *  - Exactly once: in one epoch the ranks' streams partition the dataset;
 *    every rank gets the same count. The remainder (samples % world_size)
 *    is padded by repeating samples (ZP_REMAINDER_PAD, default) or dropped
 *    (ZP_REMAINDER_DROP); the count is reported.
 *  - Shuffled with locality: shard order is permuted per epoch; samples are
 *    permuted within blocks of `shuffle_block_shards` consecutive shards of
 *    that order; each rank reads a contiguous range of the permuted stream,
 *    so it opens about shards / world_size shards.
 *  - Resumable: the state is (seed, epoch, position), O(1).
 *
 * Thread safety: a worksource is used by one thread at a time.
 */
#ifndef ZEPHON_WORKSOURCE_H
#define ZEPHON_WORKSOURCE_H

#include "common.h"
#include "dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zp_worksource zp_worksource;

typedef enum zp_remainder {
    ZP_REMAINDER_PAD = 0,  /* repeat samples from the start of the epoch's order */
    ZP_REMAINDER_DROP = 1  /* drop the last samples of the epoch's order */
} zp_remainder;

typedef struct zp_worksource_config {
    uint64_t seed;                 /* default 0 */
    uint32_t rank;                 /* this rank, default 0 */
    uint32_t world_size;           /* ranks, default 1 */
    int shuffle;                   /* 1 (default): shuffle; 0: dataset order */
    uint32_t shuffle_block_shards; /* shards per shuffle block, default 8 */
    zp_remainder remainder;        /* default ZP_REMAINDER_PAD */
} zp_worksource_config;

void zp_worksource_config_init(zp_worksource_config *cfg);

/* One planned sample. */
typedef struct zp_sample {
    uint32_t shard;     /* index in the dataset */
    uint64_t record;    /* record index within the shard */
    uint64_t global_id; /* shard prefix offset + record: unique in the dataset */
    uint32_t epoch;
    uint64_t position;  /* position within this rank's epoch stream */
    int padded;         /* 1 when this sample repeats one (remainder padding) */
} zp_sample;

/* Resumable state: continue the identical stream with set_state(). */
typedef struct zp_worksource_state {
    uint64_t seed;
    uint32_t epoch;
    uint64_t position; /* next position within the epoch */
} zp_worksource_state;

/* Create. ds is borrowed and must outlive the worksource; it is indexed if
 * needed. cfg may be NULL for defaults. rank >= world_size is
 * ZP_ERR_INVALID. OUT: *out, caller owns; release with
 * zp_worksource_destroy(). */
zp_status zp_worksource_create(zp_dataset *ds, const zp_worksource_config *cfg,
                               zp_worksource **out);
void zp_worksource_destroy(zp_worksource *ws);

/* Samples this rank gets per epoch (equal on every rank). */
uint64_t zp_worksource_samples_per_rank(const zp_worksource *ws);
/* Samples padded (repeats) or dropped per epoch over all ranks. */
uint64_t zp_worksource_padded(const zp_worksource *ws);
uint64_t zp_worksource_dropped(const zp_worksource *ws);

/* Random access: the sample at `position` of `epoch` for this rank.
 * position >= samples_per_rank is ZP_ERR_INVALID. */
zp_status zp_worksource_sample(zp_worksource *ws, uint32_t epoch, uint64_t position,
                               zp_sample *out);

/* Sequential: the next sample; epochs follow each other without end (the
 * caller decides when to stop). */
zp_status zp_worksource_next(zp_worksource *ws, zp_sample *out);

void zp_worksource_get_state(const zp_worksource *ws, zp_worksource_state *st);
/* st->seed must equal the configured seed (else ZP_ERR_INVALID). */
zp_status zp_worksource_set_state(zp_worksource *ws, const zp_worksource_state *st);

/* The borrowed dataset and the copied config. */
zp_dataset *zp_worksource_dataset(const zp_worksource *ws);
const zp_worksource_config *zp_worksource_get_config(const zp_worksource *ws);

#ifdef __cplusplus
}
#endif
#endif
