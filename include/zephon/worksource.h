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
 *  - Mixtures (docs/mixtures.md): the dataset's shards may be cut into
 *    consecutive parts drawn by weight. An epoch is then `epoch_samples`
 *    draws; every prefix of the draws follows the weights as used
 *    (zp_worksource_part_weight) within one sample (a deterministic quota
 *    schedule, not random draws); each part
 *    is drawn in its own shuffled passes (a part smaller than its share
 *    repeats, each pass reshuffled; a larger one is subsampled without
 *    repeats and continues where it stopped in the next epoch). The epoch's
 *    stream does not depend on the world size: ranks read contiguous
 *    ranges of it. Without parts the dataset is one part of weight 1 and
 *    the stream is the plain shuffled epoch described above.
 *  - Weight schedules (docs/mixtures.md, "Weight schedules"): the weights
 *    may change at given draws (zp_mix_phase: steps or linear ramps); each
 *    phase is drawn by its own quota schedule from its first draw (every
 *    prefix of every phase within one sample of its weights), and each
 *    part's draws continue across phases (none repeated or skipped).
 *
 * Thread safety: a worksource is used by one thread at a time.
 */
#ifndef ZEPHON_WORKSOURCE_H
#define ZEPHON_WORKSOURCE_H

#include "common.h"
#include "coverage.h"
#include "dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zp_worksource zp_worksource;

typedef enum zp_remainder {
    ZP_REMAINDER_PAD = 0,  /* repeat samples from the start of the epoch's order */
    ZP_REMAINDER_DROP = 1  /* drop the last samples of the epoch's order */
} zp_remainder;

/* One part of a mixture. */
typedef struct zp_mix_part {
    const char *name; /* for states and reports; NULL: "part<k>" */
    size_t shards;    /* the next `shards` shards of the dataset (>= 1) */
    double weight;    /* relative weight, > 0 and finite; the weights are
                         made integers with a total of at most 2^24 (exact
                         for integers and decimals of up to 6 places, else
                         rounded, changing each part's weight by at most
                         1% of itself; weights that would change more are
                         ZP_ERR_INVALID naming the part, docs/mixtures.md) */
} zp_mix_part;

/* A phase of a mixture weight schedule (docs/mixtures.md, "Weight
 * schedules"): from draw `start` of the mixture's stream on (draws counted
 * across epochs: draw epoch * epoch_samples + g is position g of the
 * epoch's stream), the parts are drawn by `weights`. */
typedef struct zp_mix_phase {
    uint64_t start;         /* the first draw of the phase; > 0 and above the
                               previous phase's start (the parts' weights are
                               the phase from draw 0) */
    const double *weights;  /* n_parts weights as zp_mix_part.weight (borrowed
                               for zp_worksource_create() only) */
    uint64_t linear_every;  /* 0 (default): the weights change at `start` (a
                               step). > 0: they move linearly from the previous
                               phase's weights (at its start) to these (at
                               `start`), in constant steps of linear_every draws,
                               each drawn by the weights interpolated at its
                               middle draw, rounded to integers with a total of
                               10^4, 10^5 or 10^6, the first that keeps every
                               share within 1% of the interpolated one */
} zp_mix_phase;

typedef struct zp_worksource_config {
    uint64_t seed;                 /* default 0 */
    uint32_t rank;                 /* this rank, default 0 */
    uint32_t world_size;           /* ranks, default 1 */
    int shuffle;                   /* 1 (default): shuffle; 0: dataset order */
    uint32_t shuffle_block_shards; /* shards per shuffle block, default 8 */
    zp_remainder remainder;        /* default ZP_REMAINDER_PAD */
    /* Mixture: n_parts consecutive ranges of the dataset's shards, each
     * with a weight; the parts cover every shard, in order. parts is
     * borrowed for zp_worksource_create() only (copied, names included).
     * n_parts 0 (default): the whole dataset is one part of weight 1. */
    const zp_mix_part *parts;
    size_t n_parts;
    /* Draws per epoch; 0 (default): the dataset's sample count. */
    uint64_t epoch_samples;
    /* Weight schedule (needs n_parts >= 2): the phases after the first
     * (draw 0, the parts' weights), ascending by start; borrowed for
     * zp_worksource_create() only. Every prefix of every phase is within
     * one sample of the phase's weights as used; each part continues its
     * draws across phases (none repeated or skipped). At most 1023 phases,
     * a linear one counting one per linear_every draws. n_phases 0
     * (default): the parts' weights throughout. */
    const zp_mix_phase *phases;
    size_t n_phases;
} zp_worksource_config;


ZP_API void zp_worksource_config_init(zp_worksource_config *cfg);

/* One planned sample. */
typedef struct zp_sample {
    uint32_t shard;     /* index in the dataset */
    uint64_t record;    /* record index within the shard */
    uint64_t global_id; /* shard prefix offset + record: unique in the dataset */
    uint32_t epoch;
    uint64_t position;  /* position within this rank's epoch stream */
    int padded;         /* 1 when this sample repeats one (remainder padding) */
    uint32_t part;      /* the mixture part it was drawn from (0 without parts) */
    uint64_t pass;      /* the part's pass (its own epoch: each pass is
                           reshuffled); equals epoch without parts */
    uint64_t token_offset; /* token modes: tokens of this document already
                              delivered before an elastic resume (the packer
                              starts there and does not list it again); 0 */
    uint32_t phase;     /* the weight schedule's phase of its draw
                           (zp_worksource_phase_of); 0 without a schedule */
} zp_sample;

/* Resumable state: continue the identical stream with set_state(). */
typedef struct zp_worksource_state {
    uint64_t seed;
    uint32_t epoch;
    uint64_t position; /* next position within the epoch */
} zp_worksource_state;

/* Create. ds is borrowed and must outlive the worksource; it is indexed if
 * needed. cfg may be NULL for defaults.
 * @return ZP_OK; ZP_ERR_INVALID for an invalid setting (rank >= world_size,
 *         world_size or shuffle_block_shards 0, an unknown remainder policy,
 *         DROP with fewer samples than ranks, no dataset, an empty dataset);
 *         the dataset's status when indexing it fails; ZP_ERR_LIMIT for
 *         2^32 shards or 2^63 samples and more; ZP_ERR_NOMEM.
 * OUT: *out, caller owns; release with zp_worksource_destroy(). On failure
 * *out is an error-only handle (NULL only when out is NULL or memory ran
 * out): zp_worksource_errmsg(*out) says why, naming the setting and its
 * value, and every other call on it returns ZP_ERR_STATE; release it with
 * zp_worksource_destroy() too. */
ZP_API zp_status zp_worksource_create(zp_dataset *ds, const zp_worksource_config *cfg,
                               zp_worksource **out);
/* Accepts NULL. */
ZP_API void zp_worksource_destroy(zp_worksource *ws);

/* The message of the last failed call on ws (create included): borrowed,
 * valid until the next call on ws; "" when no call failed. Successful calls
 * keep the message. Never NULL. */
ZP_API const char *zp_worksource_errmsg(const zp_worksource *ws);

/* Samples this rank gets per epoch (equal on every rank). An epoch re-split
 * by an elastic resume (zephon/state.h) may be shorter:
 * zp_worksource_epoch_samples() gives each epoch's count. */
ZP_API uint64_t zp_worksource_samples_per_rank(const zp_worksource *ws);
/* This rank's samples in `epoch` (samples_per_rank unless a restored state
 * gave that epoch its own plan). */
ZP_API uint64_t zp_worksource_epoch_samples(const zp_worksource *ws, uint32_t epoch);
/* The schedule's constant phases (1 without a schedule; a linear phase
 * counts one per linear_every draws; a resume that changed the schedule
 * keeps the phases the run followed before the change), the draw at which
 * phase k starts (phase 0 at 0), and part i's weight as used in it (a
 * fraction of 1). Out of range: 0. */
ZP_API size_t zp_worksource_num_phases(const zp_worksource *ws);
ZP_API uint64_t zp_worksource_phase_start(const zp_worksource *ws, size_t phase);
ZP_API double zp_worksource_phase_weight(const zp_worksource *ws, size_t phase, size_t part);
/* The phase that mixture draw `draw` (epoch * epoch_samples + position in
 * the epoch's stream) belongs to. */
ZP_API size_t zp_worksource_phase_of(const zp_worksource *ws, uint64_t draw);
/* Draws per epoch (epoch_samples, or the dataset's sample count). */
ZP_API uint64_t zp_worksource_draws_per_epoch(const zp_worksource *ws);

/* Mixture parts (1 without parts): name (borrowed, valid until destroy),
 * sample count, and the weight as used (a fraction of 1, after making the
 * weights integers). */
ZP_API size_t zp_worksource_num_parts(const zp_worksource *ws);
ZP_API const char *zp_worksource_part_name(const zp_worksource *ws, size_t part);
ZP_API uint64_t zp_worksource_part_samples(const zp_worksource *ws, size_t part);
ZP_API double zp_worksource_part_weight(const zp_worksource *ws, size_t part);
/* How many of the first `draws` draws of the mixture (over all epochs, in
 * stream order) come from each part: counts[0 .. num_parts). */
ZP_API zp_status zp_worksource_draw_counts(zp_worksource *ws, uint64_t draws, uint64_t *counts);
/* Samples padded (repeats) or dropped per epoch over all ranks. */
ZP_API uint64_t zp_worksource_padded(const zp_worksource *ws);
ZP_API uint64_t zp_worksource_dropped(const zp_worksource *ws);

/* Random access: the sample at `position` of `epoch` for this rank.
 * position >= samples_per_rank is ZP_ERR_INVALID (errmsg names both). */
ZP_API zp_status zp_worksource_sample(zp_worksource *ws, uint32_t epoch, uint64_t position,
                               zp_sample *out);

/* Sequential: the next sample; epochs follow each other until the last one,
 * UINT32_MAX, after which it returns ZP_ERR_LIMIT (the caller decides when
 * to stop). */
ZP_API zp_status zp_worksource_next(zp_worksource *ws, zp_sample *out);

ZP_API void zp_worksource_get_state(const zp_worksource *ws, zp_worksource_state *st);
/* st->seed must equal the configured seed and st->position be at most
 * samples_per_rank (else ZP_ERR_INVALID, errmsg names the values). */
ZP_API zp_status zp_worksource_set_state(zp_worksource *ws, const zp_worksource_state *st);

/* Checked epoch arithmetic, for callers counting samples over epochs.
 *
 * stream_index: epoch * samples_per_rank + position in *out, the number of
 * samples of this rank's stream before (epoch, position).
 * @return ZP_OK; ZP_ERR_INVALID when position > samples_per_rank;
 *         ZP_ERR_LIMIT (the message names the three values) when the
 *         result exceeds UINT64_MAX. */
ZP_API zp_status zp_worksource_stream_index(zp_worksource *ws, uint32_t epoch, uint64_t position,
                                     uint64_t *out);
/* last_epoch: the last epoch of a run of `epochs` epochs from start_epoch,
 * start_epoch + epochs - 1, in *out; epochs 0 (without end) gives
 * UINT32_MAX. @return ZP_OK; ZP_ERR_INVALID (naming both values) when the
 * run would go past epoch UINT32_MAX. */
ZP_API zp_status zp_worksource_last_epoch(zp_worksource *ws, uint32_t start_epoch, uint64_t epochs,
                                   uint32_t *out);

/* The digest of positions [first, first + count) of epoch's stream: the
 * mixture's draws epoch * draws_per_epoch + g, which do not depend on the
 * world size nor on how the epoch was split between ranks (positions past
 * draws_per_epoch are refused, ZP_ERR_INVALID). The expected digest of an
 * epoch is [0, draws_per_epoch) under ZP_REMAINDER_PAD and
 * [0, world_size * samples_per_rank) under ZP_REMAINDER_DROP. Costs one
 * zp_worksource_sample() per position; the ranks of a job may compute
 * slices and merge them. */
ZP_API zp_status zp_worksource_coverage(zp_worksource *ws, uint32_t epoch, uint64_t first,
                                        uint64_t count, zp_coverage *out);

/* The expected digest of `epoch`: the samples of its stream that the
 * remainder policy keeps ([0, draws_per_epoch) under ZP_REMAINDER_PAD,
 * [0, world_size * samples_per_rank) under ZP_REMAINDER_DROP), as
 * zp_worksource_coverage over those positions gives it, but computed from
 * each part's draws of the epoch: a whole pass of a part is folded from its
 * records' ids (a few ns a sample), a part of a pass is looked up place
 * by place. The work is split in `slices` slices whose digests merge to the
 * epoch's (slice 0 takes out the dropped positions): the ranks of a job
 * compute one each. ZP_ERR_INVALID (slice >= slices, out NULL),
 * ZP_ERR_LIMIT past draw 2^64, ZP_ERR_NOMEM. */
ZP_API zp_status zp_worksource_epoch_coverage(zp_worksource *ws, uint32_t epoch, uint32_t slice,
                                              uint32_t slices, zp_coverage *out);

/* The borrowed dataset and the copied config. */
ZP_API zp_dataset *zp_worksource_dataset(const zp_worksource *ws);
ZP_API const zp_worksource_config *zp_worksource_get_config(const zp_worksource *ws);

#ifdef __cplusplus
}
#endif
#endif
