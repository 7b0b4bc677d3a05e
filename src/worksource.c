/*
 * worksource.c - the global sample plan (docs/worksource.md).
 *
 * For seed s and epoch e the plan is one sequence of the dataset's N
 * samples, the same on every rank:
 *
 *   1. the shard order: a Fisher-Yates permutation of the shard indices,
 *      each swap drawn from a counter-based hash of (s, e, i) (identity
 *      when shuffle is off);
 *   2. the shards concatenated in that order, cut into blocks of
 *      `shuffle_block_shards` consecutive shards; the samples of block b are
 *      permuted by a keyed bijection on [0, block samples): a cycle-walking
 *      Feistel network keyed on (s, e, b). O(1) memory, O(1) per lookup;
 *   3. rank r reads positions [r*per, (r+1)*per) of that sequence; PAD maps
 *      a position p >= N to p mod N (a repeat, marked padded), DROP never
 *      assigns the positions >= W*per.
 *
 * Random access to (epoch, position) binary-searches the block and then the
 * shard in per-epoch prefix sums (sequential access mostly hits the block of
 * the previous lookup and skips the first search). The shard order and prefix sums of the last
 * two epochs used are cached (two, so that a reader and a look-ahead on both
 * sides of an epoch boundary do not rebuild them on every call). All memory
 * is allocated at create: lookups never allocate.
 */
#include "zephon/worksource.h"

#include <stdlib.h>
#include <string.h>

#include "dataset_internal.h"
#include "error.h"
#include "util.h"

/* Cached epochs. */
#define WS_SLOTS 2

/* Samples in a dataset: fewer than 2^63 (ws_search relies on it). */
#define WS_MAX_SAMPLES (1ULL << 63)

/* Domain-separation tags for the keys derived from the seed. */
#define WS_TAG_EPOCH 0x7a70686f6e2d6570ULL /* "zphon-ep" */
#define WS_TAG_ORDER 0x7a70686f6e2d6f72ULL /* "zphon-or" */
#define WS_TAG_BLOCK 0x7a70686f6e2d626bULL /* "zphon-bk" */

/* One cached epoch: shard order, prefix sums, block keys. */
typedef struct ws_epoch {
    int valid;
    uint32_t epoch;
    uint64_t stamp;    /* last use, for LRU replacement */
    uint64_t key;      /* epoch key: hash of (seed, epoch) */
    uint32_t *order;   /* [nshards] shard index at each place of the order */
    uint64_t *prefix;  /* [nshards + 1] samples before each place */
    uint64_t *bprefix; /* [nblocks + 1] samples before each block */
    uint64_t *bkey;    /* [nblocks] key of each block's permutation */
    size_t blk;        /* the block of the last lookup (a hint) */
} ws_epoch;

struct zp_worksource {
    zpi_err err;      /* the last error (zp_worksource_errmsg) */
    int ready;        /* 0: an error-only handle from a failed create */
    zp_dataset *ds;
    zp_worksource_config cfg;
    size_t nshards;
    size_t nblocks;
    uint64_t total;   /* N: samples in the dataset */
    uint64_t per;     /* samples per rank per epoch */
    uint64_t padded;  /* per epoch, over all ranks */
    uint64_t dropped; /* per epoch, over all ranks */
    uint64_t first;   /* rank * per: this rank's first position in the plan */
    uint64_t *off;    /* [nshards + 1] first global id of each shard, dataset order */
    size_t hint;      /* shuffle off: the shard of the last lookup */
    ws_epoch slot[WS_SLOTS];
    uint64_t clock;
    /* Sequential state. */
    uint32_t epoch;
    uint64_t position;
};

void zp_worksource_config_init(zp_worksource_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->seed = 0;
    cfg->rank = 0;
    cfg->world_size = 1;
    cfg->shuffle = 1;
    cfg->shuffle_block_shards = 8;
    cfg->remainder = ZP_REMAINDER_PAD;
}

/* ------------------------------------------------------------ keyed hashing */

static uint64_t ws_epoch_key(uint64_t seed, uint32_t epoch)
{
    return zpi_hash2(zpi_hash2(seed, WS_TAG_EPOCH), (uint64_t)epoch);
}

/* Uniform integer in [0, bound), bound >= 1, from the hash stream of
 * (key, i): Lemire's multiply-shift with rejection, so exactly uniform. */
static uint32_t ws_uniform(uint64_t key, uint64_t i, uint32_t bound)
{
    uint64_t ctr = 0;
    uint64_t m = (uint64_t)(uint32_t)zpi_hash2(key, i) * bound;
    uint32_t lo = (uint32_t)m;
    if (lo < bound) {
        uint32_t threshold = (uint32_t)(0u - bound) % bound;
        while (lo < threshold) {
            ctr++;
            m = (uint64_t)(uint32_t)zpi_hash2(key + ctr * 0x9e3779b97f4a7c15ULL, i) * bound;
            lo = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

/* ------------------------------------------------ within-block permutation */

/* Bits needed to write n - 1 (0 for n <= 1). */
static unsigned ws_bits(uint64_t n)
{
    if (n <= 1)
        return 0;
    return 64u - (unsigned)__builtin_clzll(n - 1);
}

static inline uint64_t ws_mask(unsigned bits)
{
    return bits >= 64 ? ~0ULL : ((1ULL << bits) - 1);
}

/* The image of x (< n) under the bijection of [0, n) keyed by key.
 *
 * A Feistel network on a mixed-radix domain: x = h * 2^lo + l with
 * l < 2^lo (lo = bits(n) / 2) and h < A = ceil(n / 2^lo), so the domain
 * [0, A * 2^lo) holds [0, n) with less than one row of 2^lo to spare.
 * Rounds alternate
 *     h <- (h + F(l)) mod A      (F(l) < A)
 *     l <- l ^ (F(h) mod 2^lo)
 * and each is a bijection of the domain whatever F is (it is undone by
 * subtracting, or xoring, the same F of the part it did not change), so the
 * network is one fixed bijection of [0, A * 2^lo). Cycle walking (apply it
 * again while the result is >= n) restricts it to a bijection of [0, n):
 * the walk from x < n stays on x's cycle, so it ends at a value < n, and
 * distinct x end at distinct values. The domain exceeds n by less than a
 * fraction 1/(A-1) <= 2^(1 - ceil(bits/2)) (A >= 2), so beyond tiny
 * domains one pass is almost always enough (a power-of-two domain would
 * need up to 2 on average). Splitting and joining x are a shift and a
 * mask: no division.
 *
 * F for round r is the 64-bit mix of the part ^ (key + r*phi) (the part is
 * < 2^32, so the rounds' inputs never coincide); F mod A is taken by
 * multiply-shift. Rounds: 4 above 256 elements, 12 up to 256. Small
 * domains need more to send every element to every place with even odds:
 * measured over 20000 keys, with 4 rounds some (element, place) pairs of a
 * 5-, 7- or 9-element domain are 14-18% off their 1/n share; with 8 or more
 * they are within sampling noise (test_small_domain_uniform). */
static uint64_t ws_permute(uint64_t x, uint64_t n, uint64_t key)
{
    if (n <= 1)
        return 0;
    const unsigned k = ws_bits(n);
    const unsigned lo = k / 2;                /* <= 32 */
    const uint64_t A = ((n - 1) >> lo) + 1;   /* <= 2^32 */
    const uint64_t mlo = ws_mask(lo);
    const unsigned rounds = k <= 8 ? 12 : 4;
    do {
        uint64_t h = x >> lo, l = x & mlo, rk = key;
        for (unsigned r = 0; r < rounds; r += 2) {
            rk += 0x9e3779b97f4a7c15ULL;
            h += ((zpi_mix64(l ^ rk) >> 32) * A) >> 32; /* < 2A */
            h -= h >= A ? A : 0;
            rk += 0x9e3779b97f4a7c15ULL;
            l = (l ^ zpi_mix64(h ^ rk)) & mlo;
        }
        x = (h << lo) | l;
    } while (x >= n);
    return x;
}

/* ------------------------------------------------------------ epoch cache */

/* Largest k in [lo, hi) with a[k] <= t; requires a[lo] <= t, a
 * non-decreasing and every value < 2^63 (create() checks N < 2^63). Empty
 * shards (equal neighbours) are skipped because the largest such k is
 * taken. Branch-free: the step is masked by the sign of t - a[mid] (a plain
 * comparison is turned back into a branch by some compilers, and a branch
 * here is mispredicted half the time). */
static size_t ws_search(const uint64_t *a, size_t lo, size_t hi, uint64_t t)
{
    size_t base = lo, n = hi - lo;
    if (n <= 16) { /* a block's shards: count, with independent loads */
        for (size_t i = lo + 1; i < hi; i++)
            base += (size_t)(((t - a[i]) >> 63) ^ 1);
        return base;
    }
    while (n > 1) {
        size_t half = n / 2;
        uint64_t above = (t - a[base + half]) >> 63; /* 1 when a[mid] > t */
        base += half & ((size_t)above - 1);
        n -= half;
    }
    return base;
}

static void ws_build_epoch(zp_worksource *ws, ws_epoch *e, uint32_t epoch)
{
    const size_t S = ws->nshards;
    const size_t B = ws->cfg.shuffle_block_shards;
    e->valid = 1;
    e->epoch = epoch;
    e->key = ws_epoch_key(ws->cfg.seed, epoch);
    e->blk = 0;

    for (size_t i = 0; i < S; i++)
        e->order[i] = (uint32_t)i;
    const uint64_t okey = zpi_hash2(e->key, WS_TAG_ORDER);
    for (size_t i = S; i > 1; i--) {
        size_t j = ws_uniform(okey, (uint64_t)i, (uint32_t)i);
        uint32_t t = e->order[i - 1];
        e->order[i - 1] = e->order[j];
        e->order[j] = t;
    }

    e->prefix[0] = 0;
    for (size_t i = 0; i < S; i++) {
        uint32_t s = e->order[i];
        e->prefix[i + 1] = e->prefix[i] + (ws->off[s + 1] - ws->off[s]);
    }
    const uint64_t bk = zpi_hash2(e->key, WS_TAG_BLOCK);
    for (size_t b = 0; b < ws->nblocks; b++) {
        e->bprefix[b] = e->prefix[b * B];
        e->bkey[b] = zpi_hash2(bk, (uint64_t)b);
    }
    e->bprefix[ws->nblocks] = e->prefix[S];
}

static ws_epoch *ws_get_epoch(zp_worksource *ws, uint32_t epoch)
{
    ws_epoch *victim = &ws->slot[0];
    for (int i = 0; i < WS_SLOTS; i++) {
        ws_epoch *e = &ws->slot[i];
        if (e->valid && e->epoch == epoch) {
            e->stamp = ++ws->clock;
            return e;
        }
        if (!e->valid || (victim->valid && e->stamp < victim->stamp))
            victim = e;
    }
    ws_build_epoch(ws, victim, epoch);
    victim->stamp = ++ws->clock;
    return victim;
}

/* Shard and record at place q (< N) of the epoch's plan. */
static void ws_locate(zp_worksource *ws, uint32_t epoch, uint64_t q, uint32_t *shard,
                      uint64_t *record)
{
    if (!ws->cfg.shuffle) {
        size_t k = ws->hint;
        if (q < ws->off[k] || q >= ws->off[k + 1])
            ws->hint = k = ws_search(ws->off, 0, ws->nshards, q);
        *shard = (uint32_t)k;
        *record = q - ws->off[k];
        return;
    }
    ws_epoch *e = ws_get_epoch(ws, epoch);
    const size_t B = ws->cfg.shuffle_block_shards;
    size_t b = e->blk;
    if (q < e->bprefix[b] || q >= e->bprefix[b + 1])
        e->blk = b = ws_search(e->bprefix, 0, ws->nblocks, q);
    const uint64_t start = e->bprefix[b];
    const uint64_t t = start + ws_permute(q - start, e->bprefix[b + 1] - start, e->bkey[b]);
    const size_t lo = b * B;
    const size_t hi = ws->nshards - lo > B ? lo + B : ws->nshards;
    const size_t k = ws_search(e->prefix, lo, hi, t);
    *shard = e->order[k];
    *record = t - e->prefix[k];
}

/* ------------------------------------------------------------ public API */

static void *ws_array(size_t n, size_t elem)
{
    if (n > SIZE_MAX / elem)
        return NULL;
    return malloc(n * elem);
}

/* Frees the plan's arrays (the epoch slots and the shard offsets). */
static void free_plan(zp_worksource *ws)
{
    for (int i = 0; i < WS_SLOTS; i++) {
        free(ws->slot[i].order);
        free(ws->slot[i].prefix);
        free(ws->slot[i].bprefix);
        free(ws->slot[i].bkey);
    }
    free(ws->off);
}

void zp_worksource_destroy(zp_worksource *ws)
{
    if (!ws)
        return;
    free_plan(ws);
    free(ws);
}

const char *zp_worksource_errmsg(const zp_worksource *ws)
{
    return ws ? zpi_err_msg(&ws->err) : "no worksource (NULL)";
}

/* Failed create: keep only the error in ws (error.h's convention). */
static zp_status ws_fail(zp_worksource *ws)
{
    free_plan(ws);
    zpi_err err = ws->err;
    memset(ws, 0, sizeof *ws);
    ws->err = err;
    return err.code;
}

static zp_status ws_check_config(zp_worksource *ws, const zp_worksource_config *c)
{
    ZPI_RETURN_ERR_IF(c->world_size == 0, &ws->err, ZP_ERR_INVALID,
                      "world_size = 0: must be at least 1");
    ZPI_RETURN_ERR_IF(c->rank >= c->world_size, &ws->err, ZP_ERR_INVALID,
                      "rank = %u: must be less than world_size = %u", c->rank, c->world_size);
    ZPI_RETURN_ERR_IF(c->shuffle_block_shards == 0, &ws->err, ZP_ERR_INVALID,
                      "shuffle_block_shards = 0: must be at least 1");
    ZPI_RETURN_ERR_IF(c->remainder != ZP_REMAINDER_PAD && c->remainder != ZP_REMAINDER_DROP,
                      &ws->err, ZP_ERR_INVALID,
                      "remainder = %d: must be ZP_REMAINDER_PAD (0) or ZP_REMAINDER_DROP (1)",
                      (int)c->remainder);
    return ZP_OK;
}

static const char *ws_shard_name(zp_dataset *ds, size_t i)
{
    const char *name = zp_dataset_shard_name(ds, i);
    return name ? name : "?";
}

/* Counts, offsets and the per-rank split of the plan. */
static zp_status ws_plan(zp_worksource *ws, zp_dataset *ds, const zp_worksource_config *c)
{
    zp_status st = zp_dataset_index(ds);
    if (st != ZP_OK) {
        const char *m = zp_dataset_errmsg(ds);
        return zpi_err_set(&ws->err, st, "dataset: %s", m && *m ? m : zp_status_str(st));
    }
    const size_t S = zp_dataset_num_shards(ds);
    ZPI_RETURN_ERR_IF(S == 0, &ws->err, ZP_ERR_INVALID, "the dataset has no shards");
    ZPI_RETURN_ERR_IF(S > UINT32_MAX, &ws->err, ZP_ERR_LIMIT,
                      "the dataset has %zu shards: at most %u (zp_sample.shard is 32-bit)", S,
                      (unsigned)UINT32_MAX);
    ws->nshards = S;
    ws->nblocks = S / c->shuffle_block_shards + (S % c->shuffle_block_shards != 0);
    ws->off = ws_array(S + 1, sizeof *ws->off);
    ZPI_RETURN_ERR_IF(!ws->off, &ws->err, ZP_ERR_NOMEM,
                      "out of memory for the offsets of %zu shards", S);

    /* Counts and offsets, checked against each other. */
    ws->off[0] = 0;
    for (size_t i = 0; i < S; i++) {
        uint64_t n = zp_dataset_shard_samples(ds, i);
        ZPI_RETURN_ERR_IF(n == UINT64_MAX, &ws->err, ZP_ERR_STATE,
                          "shard %zu (%s) has no record count: the dataset is not indexed", i,
                          ws_shard_name(ds, i));
        ZPI_RETURN_ERR_IF(n >= WS_MAX_SAMPLES - ws->off[i], &ws->err, ZP_ERR_LIMIT,
                          "shard %zu (%s): %llu records after %llu: the dataset would hold "
                          "2^63 samples or more",
                          i, ws_shard_name(ds, i), (unsigned long long)n,
                          (unsigned long long)ws->off[i]);
        uint64_t o = zpi_dataset_shard_offset(ds, i);
        ZPI_RETURN_ERR_IF(o != ws->off[i], &ws->err, ZP_ERR_INTERNAL,
                          "shard %zu (%s): offset %llu is not the sum %llu of the counts before it",
                          i, ws_shard_name(ds, i), (unsigned long long)o,
                          (unsigned long long)ws->off[i]);
        ws->off[i + 1] = ws->off[i] + n;
    }
    const uint64_t N = ws->off[S];
    const uint64_t W = c->world_size;
    ws->total = N;
    ZPI_RETURN_ERR_IF(N == 0, &ws->err, ZP_ERR_INVALID,
                      "the dataset's %zu shard(s) hold no records: nothing to plan", S);
    if (c->remainder == ZP_REMAINDER_DROP) {
        ws->per = N / W;
        ws->dropped = N - W * ws->per;
        ZPI_RETURN_ERR_IF(ws->per == 0, &ws->err, ZP_ERR_INVALID,
                          "remainder = drop with %llu samples and world_size = %u: every rank "
                          "would get no sample",
                          (unsigned long long)N, c->world_size);
    } else {
        ws->per = N / W + (N % W != 0);
        /* N < 2^63 and W < 2^32: W * per <= N + W - 1 cannot overflow. */
        ws->padded = W * ws->per - N;
    }
    ws->first = (uint64_t)c->rank * ws->per;

    if (c->shuffle) {
        for (int i = 0; i < WS_SLOTS; i++) {
            ws_epoch *e = &ws->slot[i];
            e->order = ws_array(S, sizeof *e->order);
            e->prefix = ws_array(S + 1, sizeof *e->prefix);
            e->bprefix = ws_array(ws->nblocks + 1, sizeof *e->bprefix);
            e->bkey = ws_array(ws->nblocks, sizeof *e->bkey);
            ZPI_RETURN_ERR_IF(!e->order || !e->prefix || !e->bprefix || !e->bkey, &ws->err,
                              ZP_ERR_NOMEM, "out of memory for the shard order of %zu shards",
                              S);
        }
    }
    return ZP_OK;
}

zp_status zp_worksource_create(zp_dataset *ds, const zp_worksource_config *cfg,
                               zp_worksource **out)
{
    if (!out)
        return ZP_ERR_INVALID;
    *out = NULL;
    zp_worksource *ws = calloc(1, sizeof *ws);
    if (!ws)
        return ZP_ERR_NOMEM;
    *out = ws;
    if (!ds) {
        zpi_err_set(&ws->err, ZP_ERR_INVALID, "no dataset given (ds is NULL)");
        return ws_fail(ws);
    }
    zp_worksource_config c;
    if (cfg)
        c = *cfg;
    else
        zp_worksource_config_init(&c);
    if (ws_check_config(ws, &c) != ZP_OK)
        return ws_fail(ws);
    ws->ds = ds;
    ws->cfg = c;
    if (ws_plan(ws, ds, &c) != ZP_OK)
        return ws_fail(ws);
    ws->ready = 1;
    return ZP_OK;
}

/* Calls on an error-only handle (failed create) fail with ZP_ERR_STATE and
 * keep the message of the failed create. */
#define WS_CHECK_READY(ws)                                                                         \
    do {                                                                                           \
        if (!(ws)->ready)                                                                          \
            return ZP_ERR_STATE;                                                                   \
    } while (0)

uint64_t zp_worksource_samples_per_rank(const zp_worksource *ws) { return ws ? ws->per : 0; }
uint64_t zp_worksource_padded(const zp_worksource *ws) { return ws ? ws->padded : 0; }
uint64_t zp_worksource_dropped(const zp_worksource *ws) { return ws ? ws->dropped : 0; }

zp_status zp_worksource_sample(zp_worksource *ws, uint32_t epoch, uint64_t position,
                               zp_sample *out)
{
    if (!ws)
        return ZP_ERR_INVALID;
    WS_CHECK_READY(ws);
    ZPI_RETURN_ERR_IF(!out, &ws->err, ZP_ERR_INVALID, "zp_worksource_sample: out is NULL");
    ZPI_RETURN_ERR_IF(position >= ws->per, &ws->err, ZP_ERR_INVALID,
                      "position = %llu (epoch %u): must be less than samples_per_rank = %llu",
                      (unsigned long long)position, epoch, (unsigned long long)ws->per);
    uint64_t g = ws->first + position; /* < W * per: no overflow (checked at create) */
    int padded = g >= ws->total;
    uint64_t q = padded ? g % ws->total : g;
    uint32_t shard;
    uint64_t record;
    ws_locate(ws, epoch, q, &shard, &record);
    out->shard = shard;
    out->record = record;
    out->global_id = ws->off[shard] + record;
    out->epoch = epoch;
    out->position = position;
    out->padded = padded;
    return ZP_OK;
}

/* After the sample at (epoch, position): the next state. The last position
 * of an epoch moves to (epoch + 1, 0), except after the last epoch
 * (UINT32_MAX), where the state stays at (epoch, per) and next() reports
 * ZP_ERR_LIMIT. */
static void ws_advance(zp_worksource *ws, uint32_t epoch, uint64_t position)
{
    if (position >= ws->per && epoch != UINT32_MAX) {
        epoch++;
        position = 0;
    }
    ws->epoch = epoch;
    ws->position = position;
}

zp_status zp_worksource_next(zp_worksource *ws, zp_sample *out)
{
    if (!ws)
        return ZP_ERR_INVALID;
    WS_CHECK_READY(ws);
    ZPI_RETURN_ERR_IF(!out, &ws->err, ZP_ERR_INVALID, "zp_worksource_next: out is NULL");
    ZPI_RETURN_ERR_IF(ws->position >= ws->per, &ws->err, ZP_ERR_LIMIT,
                      "epoch %u (the last one, UINT32_MAX) is finished: no sample follows "
                      "position %llu",
                      ws->epoch, (unsigned long long)ws->position);
    zp_status st = zp_worksource_sample(ws, ws->epoch, ws->position, out);
    if (st != ZP_OK)
        return st;
    ws_advance(ws, ws->epoch, ws->position + 1);
    return ZP_OK;
}

void zp_worksource_get_state(const zp_worksource *ws, zp_worksource_state *st)
{
    if (!ws || !st)
        return;
    st->seed = ws->cfg.seed;
    st->epoch = ws->epoch;
    st->position = ws->position;
}

zp_status zp_worksource_set_state(zp_worksource *ws, const zp_worksource_state *st)
{
    if (!ws)
        return ZP_ERR_INVALID;
    WS_CHECK_READY(ws);
    ZPI_RETURN_ERR_IF(!st, &ws->err, ZP_ERR_INVALID, "zp_worksource_set_state: state is NULL");
    ZPI_RETURN_ERR_IF(st->seed != ws->cfg.seed, &ws->err, ZP_ERR_INVALID,
                      "state seed = %llu: differs from the configured seed = %llu",
                      (unsigned long long)st->seed, (unsigned long long)ws->cfg.seed);
    ZPI_RETURN_ERR_IF(st->position > ws->per, &ws->err, ZP_ERR_INVALID,
                      "state position = %llu (epoch %u): past samples_per_rank = %llu",
                      (unsigned long long)st->position, st->epoch, (unsigned long long)ws->per);
    ws_advance(ws, st->epoch, st->position);
    return ZP_OK;
}

zp_status zp_worksource_stream_index(zp_worksource *ws, uint32_t epoch, uint64_t position,
                                     uint64_t *out)
{
    if (!ws)
        return ZP_ERR_INVALID;
    WS_CHECK_READY(ws);
    ZPI_RETURN_ERR_IF(!out, &ws->err, ZP_ERR_INVALID,
                      "zp_worksource_stream_index: out is NULL");
    ZPI_RETURN_ERR_IF(position > ws->per, &ws->err, ZP_ERR_INVALID,
                      "position = %llu (epoch %u): past samples_per_rank = %llu",
                      (unsigned long long)position, epoch, (unsigned long long)ws->per);
    uint64_t before;
    ZPI_RETURN_ERR_IF(__builtin_mul_overflow((uint64_t)epoch, ws->per, &before) ||
                          __builtin_add_overflow(before, position, out),
                      &ws->err, ZP_ERR_LIMIT,
                      "epoch %u x samples_per_rank %llu + position %llu: more than 2^64 - 1 "
                      "samples",
                      epoch, (unsigned long long)ws->per, (unsigned long long)position);
    return ZP_OK;
}

zp_status zp_worksource_last_epoch(zp_worksource *ws, uint32_t start_epoch, uint64_t epochs,
                                   uint32_t *out)
{
    if (!ws)
        return ZP_ERR_INVALID;
    ZPI_RETURN_ERR_IF(!out, &ws->err, ZP_ERR_INVALID, "zp_worksource_last_epoch: out is NULL");
    if (epochs == 0) {
        *out = UINT32_MAX;
        return ZP_OK;
    }
    ZPI_RETURN_ERR_IF(epochs - 1 > (uint64_t)(UINT32_MAX - start_epoch), &ws->err, ZP_ERR_INVALID,
                      "epochs = %llu from start epoch %u: runs past the last epoch %u",
                      (unsigned long long)epochs, start_epoch, (unsigned)UINT32_MAX);
    *out = (uint32_t)(start_epoch + (epochs - 1));
    return ZP_OK;
}

zp_dataset *zp_worksource_dataset(const zp_worksource *ws) { return ws ? ws->ds : NULL; }

const zp_worksource_config *zp_worksource_get_config(const zp_worksource *ws)
{
    return ws ? &ws->cfg : NULL;
}
