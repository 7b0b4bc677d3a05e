/*
 * state.h - pipeline states in memory and as JSON (private): parse, render,
 * the settings check, merging ranks into a job state, the elastic re-split,
 * and the words of `zephon state show` (docs/state.md).
 *
 * This file knows states only; the pipeline (pipeline_state.c) fills a
 * state from a running pipeline and applies one to a new pipeline, and the
 * worksource follows the per-epoch plans.
 *
 * Positions. For epoch e, the epoch's stream is the sequence of the
 * mixture's draws [e * N, (e + 1) * N) (N = epoch_samples); the same for
 * every world size. Positions g >= N stand for g mod N as padding (a
 * repeat, ZP_REMAINDER_PAD). By default (no plan for that epoch) rank r of
 * W reads positions [r * per, (r + 1) * per), per = ceil(N / W) for PAD,
 * floor(N / W) for DROP. A plan replaces that range by a list of spans,
 * read in order. A rank's `position` (and a skip's from/to positions)
 * count the rank's own sequence of the epoch: position i is the i-th
 * element of the default range or of the plan's spans concatenated (as
 * zp_sample.position), not a position of the epoch's stream.
 *
 * Thread safety: none needed; every call works on its arguments.
 */
#ifndef ZP_STATE_H
#define ZP_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "plan/plan.h"
#include "plan/schedule.h"
#include "zephon/batch.h"
#include "zephon/coverage.h"

/* Batches first .. last were made and not delivered. */
typedef struct zpi_skip {
    uint64_t first, last;
    uint64_t samples, tokens;      /* what they carried (documents listed, tokens) */
    uint32_t from_epoch, to_epoch; /* the stream they covered: from (epoch, position) */
    uint64_t from_position, to_position; /* up to (epoch, position), exclusive */
} zpi_skip;

/* The coverage digest of one epoch (zephon/coverage.h): the samples of it
 * delivered, padded ones apart. */
typedef struct zpi_cov_epoch {
    uint32_t epoch;
    int merged; /* 1: the sums of several ranks' digests (an elastic
                   re-split gave them to rank 0): not this rank's alone */
    zp_coverage c;
    uint64_t padded;
} zpi_cov_epoch;

typedef struct zpi_rank_state {
    uint32_t rank;
    uint64_t next_batch;   /* index of the next batch (delivered + skipped before it) */
    uint32_t epoch;        /* the next sample of this rank's stream: */
    uint64_t position;     /*   its epoch and position in the epoch */
    uint64_t token_offset; /* token modes: its tokens already delivered (when
                              the next sample starts a span with a token
                              offset, the larger of the two holds) */
    int carry;             /* concat packing: the next row starts with the last
                              token of the previous one (the sample's token
                              token_offset - 1, or EOT when token_offset is 0) */
    uint64_t window_rows;  /* best-fit packing: `position` is the first of a
                              window, whose first window_rows rows (as the
                              window packs) were delivered ("window_rows" in
                              the file, absent when 0) */
    size_t n_window_done;  /* and the documents of that window delivered, */
    uint64_t *window_done; /* pairs (k, t): the document at position + k,
                              whole (t = 0) or its first t tokens (owned; the
                              elastic re-split leaves them out or continues
                              them from token t - 1: "window_done") */
    uint64_t balance_done; /* attention-cost balance: the stream resumes at the
                              start of a balance window (the fields above),
                              whose first balance_done batches were delivered
                              ("balance_done", absent when 0) */
    size_t n_plans;        /* epochs that have a plan, ascending (owned) */
    zpi_epoch_plan *plans;
    size_t n_parts;        /* realized counts per part (owned arrays) */
    uint64_t *part_samples, *part_tokens;
    size_t n_phases;       /* with a weight schedule: samples delivered per */
    uint64_t *phase_samples; /* phase and part, [n_phases * n_parts] (owned; 0: none) */
    size_t n_skips;        /* ascending (owned) */
    zpi_skip *skips;
    zp_pipeline_counts counts; /* what was delivered before */
    size_t n_cov;          /* the coverage digests of the epochs delivered */
    zpi_cov_epoch *cov;    /* before, ascending by epoch (owned; "coverage"
                              in the file, absent when none; the elastic
                              re-split gives rank 0 the sums over the old
                              ranks, epoch by epoch) */
} zpi_rank_state;

typedef struct zpi_state {
    int version;                /* ZP_STATE_VERSION */
    uint64_t seed;
    uint32_t world_size;
    uint64_t epoch_samples;     /* N */
    int remainder;              /* zp_remainder */
    char *settings;             /* owned: a JSON object, one member per setting
                                   that changes the data, compact, keys in a
                                   fixed order (the pipeline writes it) */
    uint64_t settings_hash;     /* XXH64 of settings (seed 0) */
    size_t n_parts;             /* owned arrays: the parts' names and weights */
    char **part_names;          /* (fractions of 1) */
    double *part_weights;
    zpi_sched sched;            /* the weight schedule the run followed (owned;
                                   n_phases 0: none recorded, the parts'
                                   weights throughout) */
    size_t n_ranks;             /* ranks present, ascending by rank (owned) */
    zpi_rank_state *ranks;
    int borrowed;               /* 1: settings, part_names, part_weights and sched
                                   are another state's (zpi_state_parse_ranks_of),
                                   not freed by zpi_state_clear */
} zpi_state;

/* Frees what the structs own (not the struct itself) and zeroes them;
 * accept NULL. */
void zpi_rank_state_clear(zpi_rank_state *r);
void zpi_state_clear(zpi_state *s);
/* Deep copy of src into dst (dst's old contents are not freed). */
zp_status zpi_rank_state_copy(zpi_rank_state *dst, const zpi_rank_state *src);

/* The state as JSON: 2-space indent, fields in a fixed order, 64-bit
 * numbers as JSON integers (values >= 2^63 as decimal strings: "seed":
 * "18446744073709551615"; parse accepts both forms for every unsigned
 * field), the settings as an embedded object (canonical form, see
 * zpi_state_settings_canon) and its hash as 16 hex digits. Refuses
 * (ZP_ERR_INVALID) what parse would refuse. *out malloc'd, NUL-terminated. */
zp_status zpi_state_render(const zpi_state *s, char **out, size_t *len, zpi_err *err);
/* Parse and validate (types, ranges, ranks ascending and < world_size,
 * plans ascending by epoch, spans non-empty, the hash matching the
 * settings). ZP_ERR_FORMAT naming the field ("ranks[2].position: not an
 * unsigned integer", "ranks[0].counts.extra: unknown field": unknown
 * members are refused); ZP_ERR_UNSUPPORTED for another version. On
 * failure *out holds nothing. */
zp_status zpi_state_parse(const char *json, size_t len, zpi_state *out, zpi_err *err);

/* The settings last canonicalised by zpi_state_parse_memo(): a job's rank
 * states carry the same settings, canonicalised once for all of them
 * (zp_state_merge). Zero-initialise; release with zpi_settings_memo_clear(). */
typedef struct zpi_settings_memo {
    void *obj;      /* the settings object parsed (a json_t reference) */
    char *canon;    /* its canonical text (owned) */
    uint64_t hash;  /* and hash */
} zpi_settings_memo;
void zpi_settings_memo_clear(zpi_settings_memo *m);
/* zpi_state_parse(), with the settings' canonical text and hash taken from
 * memo when the state's settings object is the one memo holds (the same
 * members in the same order, the same values bit for bit: the same text),
 * else computed and kept in memo. memo may be NULL. Same results as
 * zpi_state_parse(). */
zp_status zpi_state_parse_memo(const char *json, size_t len, zpi_settings_memo *memo,
                               zpi_state *out, zpi_err *err);

/* The first name of names[0 .. n) that an earlier one repeats: 1 with
 * *i its index and *j the earlier one's (the lowest), 0 when all differ,
 * -1 when out of memory. Linear: a hash set of the names (state.c). */
int zpi_state_first_duplicate(char *const *names, size_t n, size_t *i, size_t *j);

/* A state whose job-wide members (version ... schedule: everything before
 * "ranks") are job's, parsed: the job-wide fields job's (borrowed, see
 * zpi_state.borrowed: clear out before job), the
 * ranks parsed from tail, the text of such a state from its "ranks"
 * member to its end ("\"ranks\": [...]\n}"). For a text whose bytes
 * before "ranks" equal those of the text job was parsed from: the same
 * result as zpi_state_parse() of the whole text (the members before
 * "ranks" parse alike; the "ranks" member alone after them, as the text
 * that is parsed whole checks, no duplicate key), at the cost of parsing
 * the ranks only (zp_state_merge: a job's rank states repeat their
 * settings and parts, 1,000 parts make most of each text). An error
 * (ZP_ERR_FORMAT also for a tail that is not such a "ranks" member, whose
 * message is then no use: parse the text whole for the message). */
zp_status zpi_state_parse_ranks_of(const zpi_state *job, const char *tail, size_t len,
                                   zpi_state *out, zpi_err *err);

/* The state checked against itself (state_check.c), beyond what
 * zpi_state_parse() checks field by field: the seed, epoch_samples,
 * remainder and the parts' names and weights against the settings; per
 * rank, the parts' sample counts against counts.samples, padded <= samples,
 * a token offset or carry only when the settings pack concat (and a token
 * offset only at a position the rank's epoch has), skipped ranges before
 * next_batch and from <= to, plans only for the rank's epoch and later, no
 * padding spans under remainder drop, no position twice in a plan; across
 * ranks, for each planned epoch, the ranks not past it all plan it or none
 * does, each with as many positions, and no position in two plans.
 * ZP_ERR_FORMAT naming the field and what contradicts it. */
zp_status zpi_state_check(const zpi_state *s, zpi_err *err);

/* The canonical text of a settings object: compact JSON, members in their
 * order, strings escaped as in the state file, numbers as integers or in
 * the shortest form that reads back to the same double; and its hash
 * (XXH64, seed 0). zpi_state_render() embeds the settings in this form and
 * writes this hash (s->settings_hash is not read); zpi_state_parse() fills
 * settings and settings_hash with it. The pipeline may fill a state's
 * settings with it so that its hash equals a parsed state's.
 * OUT: *out malloc'd (may be NULL: the hash only); hash may be NULL.
 * ZP_ERR_INVALID when settings is not a JSON object. */
zp_status zpi_state_settings_canon(const char *settings, char **out, uint64_t *hash,
                                   zpi_err *err);

/* Compare the state's settings with this pipeline's (a JSON object as in
 * zpi_state.settings). ZP_ERR_MISMATCH naming every member that differs:
 * "the state was saved with other settings: seq_len = 2048 in the state,
 * 1024 here; tokenizer = ... ". */
zp_status zpi_state_check_settings(const zpi_state *s, const char *settings, zpi_err *err);

/* The string member `key` of the state's settings into out (cap bytes):
 * 1; 0 when there is none (or it does not fit). */
int zpi_state_settings_string(const zpi_state *s, const char *key, char *out, size_t cap);

/* A job state from n states of one rank each (any order): they must agree
 * on version, seed, settings (hash), world size (= n), epoch_samples,
 * remainder, parts and next_batch, and hold each rank once (ZP_ERR_MISMATCH
 * naming the first rank that differs and how). */
zp_status zpi_state_merge(const zpi_state *const *in, size_t n, zpi_state *out, zpi_err *err);

/* The rank state that rank `rank` of a world of `world_size` continues
 * from (docs/state.md has a worked example):
 *  - world_size == s->world_size and the rank is present: a copy of it
 *    (exact continuation);
 *  - another world size, and s holds every rank (a job state): the elastic
 *    re-split. Let e0 be the lowest epoch among the old ranks and e1 the
 *    highest among their epochs and the epochs of their plans (an epoch
 *    planned by an earlier re-split keeps a plan, so that what was
 *    delivered of it before that re-split is not read again). For each
 *    epoch e in e0 .. e1 the remaining positions are, old
 *    rank by old rank (ascending): nothing when its epoch is past e; its
 *    plan for e (or its default range) from its position on when its epoch
 *    is e, the first one carrying its token_offset (or its span's, when
 *    larger); its whole plan (or
 *    default range) for e when its epoch is before e. Padding positions
 *    (>= N) are left out. Of the L real positions left, new rank r gets
 *    [r * per', min((r + 1) * per', L)) with per' = ceil(L / W') (PAD; a
 *    rank left short is filled with padding positions N + k, k counting up
 *    from 0 over the ranks in order, so that they repeat the epoch's first
 *    samples) or floor(L / W') (DROP: the last L - W' per' are dropped).
 *    A span cut in two keeps its token offset on the piece holding its
 *    first sample; adjacent pieces that continue each other are joined
 *    (never across a token offset, nor onto a padding span).
 *    The new rank state: epoch e0, position 0, token_offset 0, carry 0,
 *    plans for e0 .. e1, next_batch as in s; rank 0 takes the job's
 *    realized part counts, counts and skips (summed over the old ranks;
 *    the ranks' skipped ranges joined where they overlap, samples and
 *    tokens summed, from the earliest from to the latest to), the others
 *    start from zero.
 *  - otherwise ZP_ERR_INVALID naming why ("the state holds rank 1 of 4
 *    only; restoring on 3 ranks needs the job state of all 4").
 * n_ranks of a rank state is ignored here; out is filled (caller clears
 * it with zpi_rank_state_clear()). */
zp_status zpi_state_rank_plan(const zpi_state *s, uint32_t rank, uint32_t world_size,
                              zpi_rank_state *out, zpi_err *err);

/* The default range of rank r of W in an epoch of N draws under the
 * remainder policy: [*start, *start + *count). */
void zpi_state_default_range(uint64_t n, uint32_t world_size, int remainder, uint32_t rank,
                             uint64_t *start, uint64_t *count);

/* The draw of the mixture's stream (epoch * N + position in the epoch's
 * stream) past every draw that the ranks of s delivered, in part or whole:
 * for each rank the highest real position among those before its
 * `position` in its epoch (its `position` too when it carries a token
 * offset; with best-fit packing, the last of window_done), or the start of
 * its epoch, and any planned span that starts with a token offset. A weight schedule changed at a resume applies from
 * this draw on (docs/mixtures.md). */
uint64_t zpi_state_high_water(const zpi_state *s);

/* The state in words (zp_state_describe). *out malloc'd. */
zp_status zpi_state_describe(const zpi_state *s, char **out, zpi_err *err);

/* ------------------------------------------------------------ for the state files
 * (state.c's, used by state_json.c, state_merge.c, state_describe.c,
 * state_check.c) */

/* X(field) for every member of zp_pipeline_counts, in the file's order. */
#define COUNT_FIELDS(X)                                                                            \
    X(batches) X(samples) X(padded) X(skipped) X(filtered) X(tokens) X(truncated_tokens)          \
        X(pad_tokens)

/* calloc of n elements of size sz (n = 0: a 1-byte block, so that NULL
 * always means failure); NULL on overflow. */
void *zpi_state_alloc_n(size_t n, size_t sz);
/* A copy of n elements, allocated as zpi_state_alloc_n does. */
void *zpi_state_dup_n(const void *src, size_t n, size_t sz);
/* The rank's plan for `epoch` (plans ascend by epoch), or NULL. */
const zpi_epoch_plan *zpi_rank_find_plan(const zpi_rank_state *r, uint32_t epoch);
/* The rank's positions in `epoch`: its plan's, or its default range's. */
uint64_t zpi_state_rank_epoch_count(const zpi_state *s, const zpi_rank_state *r, uint32_t epoch);
/* A JSON value in the settings' canonical text (state_json.c): compact,
 * members in their order, integers as integers. 0, or -1 when out of
 * memory. */
struct json_t;
struct zpi_buf;
int zpi_state_put_compact(struct zpi_buf *b, struct json_t *v);
/* "pad" or "drop". */
const char *zpi_remainder_name(int r);
/* What parse and render refuse (code: ZP_ERR_FORMAT from parse,
 * ZP_ERR_INVALID from render), naming the field. */
zp_status zpi_state_validate(const zpi_state *s, zp_status code, zpi_err *err);

#endif
