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
 * Mixtures (docs/mixtures.md): the shards are cut into parts; each part has
 * its own plan as above (its own shard order and blocks), keyed per part
 * and per pass (the part's own epoch). Epoch e of the worksource is the
 * mixture's draws [e N, (e + 1) N) (N = epoch draws); draw G goes to the
 * part that the quota schedule of mixture.h gives, as that part's draw
 * n; n is sample n mod S of the part's pass n / S (S its samples). Without
 * parts the dataset is part 0 with the configured seed and N = S, so that
 * draw e N + g is sample g of pass e: the plain epoch above. Rank r reads
 * positions [r*per, (r+1)*per) of the epoch, or, after an elastic resume,
 * the spans of its plan for that epoch (state.h).
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

#include "data/dataset_internal.h"
#include "base/error.h"
#include "plan/mixture.h"
#include "plan/schedule.h"
#include "base/util.h"
#include "plan/worksource_internal.h"

/* Cached epochs. */
#define WS_SLOTS 2

/* Samples in a dataset: fewer than 2^63 (ws_search relies on it). */
#define WS_MAX_SAMPLES (1ULL << 63)

/* Domain-separation tags for the keys derived from the seed. */
#define WS_TAG_EPOCH 0x7a70686f6e2d6570ULL /* "zphon-ep" */
#define WS_TAG_ORDER 0x7a70686f6e2d6f72ULL /* "zphon-or" */
#define WS_TAG_BLOCK 0x7a70686f6e2d626bULL /* "zphon-bk" */
#define WS_TAG_PART 0x7a70686f6e2d7074ULL  /* "zphon-pt" */

/* One cached pass of a part: shard order, prefix sums, block keys. */
typedef struct ws_epoch {
    int valid;
    uint64_t pass;
    uint64_t stamp;    /* last use, for LRU replacement */
    uint64_t key;      /* pass key: hash of (part seed, pass) */
    uint32_t *order;   /* [nshards] local shard index at each place of the order */
    uint64_t *prefix;  /* [nshards + 1] samples before each place */
    uint64_t *bprefix; /* [nblocks + 1] samples before each block */
    uint64_t *bkey;    /* [nblocks] key of each block's permutation */
    size_t blk;        /* the block of the last lookup (a hint) */
} ws_epoch;

/* A part of the mixture (the whole dataset without parts). */
typedef struct ws_part {
    char *name;          /* owned */
    size_t first;        /* its first shard in the dataset */
    size_t nshards, nblocks;
    uint64_t total;      /* S: its samples */
    const uint64_t *off; /* ws->off + first: offsets of its shards (dataset ids) */
    uint64_t seed;       /* part 0: the configured seed; others derived from it */
    size_t hint;         /* shuffle off: the local shard of the last lookup */
    ws_epoch slot[WS_SLOTS];
    uint64_t clock;
} ws_part;

/* What the worksource keeps beside each of its plans (plan/plan.h) for a
 * fast lookup: the prefix counts and the span of the last lookup. */
typedef struct ws_plan_ix {
    uint64_t *pre; /* [n + 1] positions before each span */
    size_t hint;
} ws_plan_ix;

/* Mixture cursors kept (the engine's admission, the prefetch planner and
 * random access each walk their own). */
#define WS_CURSORS 4
/* A cursor this close behind a wanted draw walks to it instead of seeking. */
#define WS_WALK_MAX 4096

struct zp_worksource {
    zpi_err err;      /* the last error (zp_worksource_errmsg) */
    int ready;        /* 0: an error-only handle from a failed create */
    zp_dataset *ds;
    zp_worksource_config cfg; /* cfg.parts points at part_cfg */
    size_t nshards;
    uint64_t total;   /* samples in the dataset */
    uint64_t draws;   /* N: draws per epoch */
    uint64_t per;     /* samples per rank per epoch (default plan) */
    uint64_t padded;  /* per epoch, over all ranks */
    uint64_t dropped; /* per epoch, over all ranks */
    uint64_t first;   /* rank * per: this rank's first position in the plan */
    uint64_t *off;    /* [nshards + 1] first global id of each shard, dataset order */
    size_t nparts;
    ws_part *parts;
    zp_mix_part *part_cfg; /* the copied config's parts */
    zpi_mix *mix;          /* NULL with one part; else phase 0's (mixes[0]) */
    zpi_sched sched;       /* the schedule's constant phases (2+ parts) */
    zpi_sched cfg_sched;   /* the configured schedule (sched unless a resume changed it) */
    zpi_mix **mixes;       /* [sched.n_phases] */
    uint64_t *base;        /* [n_phases * nparts]: each part's draws before each phase */
    size_t phase_hint;
    struct {
        zpi_mix_cursor *c;
        size_t phase;
        uint64_t stamp;
    } cur[WS_CURSORS];
    uint64_t cur_clock;
    size_t nplans;
    zpi_epoch_plan *plans; /* ascending by epoch (spans owned) */
    ws_plan_ix *plan_ix;   /* [nplans] */
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

static uint64_t ws_epoch_key(uint64_t seed, uint64_t pass)
{
    return zpi_hash2(zpi_hash2(seed, WS_TAG_EPOCH), pass);
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


static void ws_build_epoch(const zp_worksource *ws, ws_part *pt, ws_epoch *e, uint64_t pass)
{
    const size_t S = pt->nshards;
    const size_t B = ws->cfg.shuffle_block_shards;
    e->valid = 1;
    e->pass = pass;
    e->key = ws_epoch_key(pt->seed, pass);
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
        uint32_t k = e->order[i];
        e->prefix[i + 1] = e->prefix[i] + (pt->off[k + 1] - pt->off[k]);
    }
    const uint64_t bk = zpi_hash2(e->key, WS_TAG_BLOCK);
    for (size_t b = 0; b < pt->nblocks; b++) {
        e->bprefix[b] = e->prefix[b * B];
        e->bkey[b] = zpi_hash2(bk, (uint64_t)b);
    }
    e->bprefix[pt->nblocks] = e->prefix[S];
}

static ws_epoch *ws_get_epoch(const zp_worksource *ws, ws_part *pt, uint64_t pass)
{
    ws_epoch *victim = &pt->slot[0];
    for (int i = 0; i < WS_SLOTS; i++) {
        ws_epoch *e = &pt->slot[i];
        if (e->valid && e->pass == pass) {
            e->stamp = ++pt->clock;
            return e;
        }
        if (!e->valid || (victim->valid && e->stamp < victim->stamp))
            victim = e;
    }
    ws_build_epoch(ws, pt, victim, pass);
    victim->stamp = ++pt->clock;
    return victim;
}

/* Dataset shard and record at place q (< S) of pass `pass` of part pt. */
static void ws_locate(const zp_worksource *ws, ws_part *pt, uint64_t pass, uint64_t q,
                      uint32_t *shard, uint64_t *record)
{
    const uint64_t base = pt->off[0];
    if (!ws->cfg.shuffle) {
        size_t k = pt->hint;
        if (q + base < pt->off[k] || q + base >= pt->off[k + 1])
            pt->hint = k = ws_search(pt->off, 0, pt->nshards, q + base);
        *shard = (uint32_t)(pt->first + k);
        *record = q + base - pt->off[k];
        return;
    }
    ws_epoch *e = ws_get_epoch(ws, pt, pass);
    const size_t B = ws->cfg.shuffle_block_shards;
    size_t b = e->blk;
    if (q < e->bprefix[b] || q >= e->bprefix[b + 1])
        e->blk = b = ws_search(e->bprefix, 0, pt->nblocks, q);
    const uint64_t start = e->bprefix[b];
    const uint64_t t = start + ws_permute(q - start, e->bprefix[b + 1] - start, e->bkey[b]);
    const size_t lo = b * B;
    const size_t hi = pt->nshards - lo > B ? lo + B : pt->nshards;
    const size_t k = ws_search(e->prefix, lo, hi, t);
    *shard = (uint32_t)(pt->first + e->order[k]);
    *record = t - e->prefix[k];
}

/* ------------------------------------------------------------ mixture draws */

/* The phase of mixture draw G. */
static size_t ws_phase(zp_worksource *ws, uint64_t G)
{
    const zpi_sched *s = &ws->sched;
    size_t k = ws->phase_hint;
    if (k < s->n_phases && s->start[k] <= G && (k + 1 == s->n_phases || G < s->start[k + 1]))
        return k;
    return ws->phase_hint = zpi_sched_phase_at(s, G);
}

/* Part and the part's draw index of mixture draw G: draw G - start of its
 * phase's quota schedule, after the part's draws of the phases before (a
 * cursor of that phase near G walks, else the least recently used one
 * seeks). */
static void ws_draw(zp_worksource *ws, uint64_t G0, uint32_t *part, uint64_t *n)
{
    const size_t k = ws_phase(ws, G0);
    const uint64_t G = G0 - ws->sched.start[k];
    int best = -1, lru = 0;
    uint64_t best_d = UINT64_MAX;
    for (int i = 0; i < WS_CURSORS; i++) {
        if (ws->cur[i].phase != k) {
            if (ws->cur[i].stamp < ws->cur[lru].stamp)
                lru = i;
            continue;
        }
        uint64_t pos = zpi_mix_cursor_pos(ws->cur[i].c);
        if (pos <= G && G - pos <= WS_WALK_MAX && G - pos < best_d) {
            best = i;
            best_d = G - pos;
        }
        if (ws->cur[i].stamp < ws->cur[lru].stamp)
            lru = i;
    }
    if (best < 0) {
        best = lru;
        if (ws->cur[best].phase != k) {
            zpi_mix_cursor_rebind(ws->cur[best].c, ws->mixes[k]);
            ws->cur[best].phase = k;
        }
        zpi_mix_cursor_seek(ws->cur[best].c, G);
    }
    zpi_mix_cursor *c = ws->cur[best].c;
    ws->cur[best].stamp = ++ws->cur_clock;
    uint32_t p;
    uint64_t d;
    while (zpi_mix_cursor_pos(c) < G)
        zpi_mix_cursor_next(c, &p, &d);
    zpi_mix_cursor_next(c, part, n);
    *n += ws->base[k * ws->nparts + *part];
}

/* ------------------------------------------------------------ plans */

static const zpi_epoch_plan *ws_find_plan(const zp_worksource *ws, uint32_t epoch)
{
    return zpi_plan_find(ws->plans, ws->nplans, epoch);
}

/* The lookup index of plan pl (one of ws->plans). */
static ws_plan_ix *ws_ix(const zp_worksource *ws, const zpi_epoch_plan *pl)
{
    return &ws->plan_ix[pl - ws->plans];
}

/* The positions of plan pl. */
static uint64_t ws_plan_len(const zp_worksource *ws, const zpi_epoch_plan *pl)
{
    return ws_ix(ws, pl)->pre[pl->n];
}

static uint64_t ws_epoch_len(const zp_worksource *ws, uint32_t epoch)
{
    const zpi_epoch_plan *pl = ws_find_plan(ws, epoch);
    return pl ? ws_plan_len(ws, pl) : ws->per;
}

static void ws_free_plan_arrays(zpi_epoch_plan *plans, ws_plan_ix *ix, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(plans ? plans[i].spans : NULL);
        free(ix ? ix[i].pre : NULL);
    }
    free(plans);
    free(ix);
}

static void ws_free_plans(zp_worksource *ws)
{
    ws_free_plan_arrays(ws->plans, ws->plan_ix, ws->nplans);
    ws->plans = NULL;
    ws->plan_ix = NULL;
    ws->nplans = 0;
}

/* ------------------------------------------------------------ public API */

static void *ws_array(size_t n, size_t elem)
{
    if (n > SIZE_MAX / elem)
        return NULL;
    return malloc(n * elem);
}

/* Frees the schedule's phases and mixtures. */
static void ws_free_phases(zp_worksource *ws)
{
    for (size_t k = 0; ws->mixes && k < ws->sched.n_phases; k++)
        zpi_mix_destroy(ws->mixes[k]);
    free(ws->mixes);
    free(ws->base);
    zpi_sched_clear(&ws->sched);
    ws->mixes = NULL;
    ws->base = NULL;
    ws->mix = NULL;
    ws->phase_hint = 0;
}

/* Mixtures and part bases for schedule s (taken over: s is zeroed), in
 * place of the worksource's; the cursors are bound to phase 0. On failure
 * the worksource keeps its schedule (s is cleared). */
static zp_status ws_use_schedule(zp_worksource *ws, zpi_sched *s)
{
    const size_t np = ws->nparts, m = s->n_phases;
    zpi_mix **mixes = calloc(m, sizeof *mixes);
    uint64_t *base = ws_array(m, np * sizeof *base);
    double *w = ws_array(np, sizeof *w);
    const char **names = ws_array(np, sizeof *names);
    zp_status st = ZP_OK;
    if (!mixes || !base || !w || !names)
        st = zpi_err_set(&ws->err, ZP_ERR_NOMEM, "out of memory for a schedule of %zu phases", m);
    for (size_t p = 0; st == ZP_OK && p < np; p++)
        names[p] = ws->parts[p].name;
    for (size_t k = 0; st == ZP_OK && k < m; k++) {
        for (size_t p = 0; p < np; p++)
            w[p] = (double)s->w[k * np + p];
        st = zpi_mix_create(w, names, np, &mixes[k], &ws->err);
        if (st == ZP_OK && k == 0)
            memset(base, 0, np * sizeof *base);
        if (st == ZP_OK && k > 0) {
            st = zpi_mix_counts(mixes[k - 1], s->start[k] - s->start[k - 1], base + k * np);
            if (st != ZP_OK)
                zpi_err_set(&ws->err, st, "out of memory for a mixture cursor");
            for (size_t p = 0; st == ZP_OK && p < np; p++)
                base[k * np + p] += base[(k - 1) * np + p];
        }
    }
    free(w);
    free(names);
    if (st != ZP_OK) {
        for (size_t k = 0; mixes && k < m; k++)
            zpi_mix_destroy(mixes[k]);
        free(mixes);
        free(base);
        zpi_sched_clear(s);
        return st;
    }
    ws_free_phases(ws);
    ws->sched = *s;
    memset(s, 0, sizeof *s);
    ws->mixes = mixes;
    ws->base = base;
    ws->mix = mixes[0];
    for (int i = 0; i < WS_CURSORS; i++) {
        if (ws->cur[i].c)
            zpi_mix_cursor_rebind(ws->cur[i].c, mixes[0]);
        ws->cur[i].phase = 0;
        ws->cur[i].stamp = 0;
    }
    return ZP_OK;
}

/* Frees the plan's arrays (parts, epoch slots, cursors, plans, offsets). */
static void free_plan(zp_worksource *ws)
{
    for (size_t p = 0; ws->parts && p < ws->nparts; p++) {
        ws_part *pt = &ws->parts[p];
        for (int i = 0; i < WS_SLOTS; i++) {
            free(pt->slot[i].order);
            free(pt->slot[i].prefix);
            free(pt->slot[i].bprefix);
            free(pt->slot[i].bkey);
        }
        free(pt->name);
    }
    free(ws->parts);
    free(ws->part_cfg);
    for (int i = 0; i < WS_CURSORS; i++)
        zpi_mix_cursor_destroy(ws->cur[i].c);
    ws_free_phases(ws);
    zpi_sched_clear(&ws->cfg_sched);
    ws_free_plans(ws);
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
    ZPI_RETURN_ERR_IF(c->n_parts && !c->parts, &ws->err, ZP_ERR_INVALID,
                      "n_parts = %zu but parts is NULL", c->n_parts);
    ZPI_RETURN_ERR_IF(c->n_parts > ZPI_MIX_MAX_PARTS, &ws->err, ZP_ERR_LIMIT,
                      "n_parts = %zu: at most %u parts", c->n_parts, ZPI_MIX_MAX_PARTS);
    ZPI_RETURN_ERR_IF(c->epoch_samples >= WS_MAX_SAMPLES, &ws->err, ZP_ERR_INVALID,
                      "epoch_samples = %llu: must be less than 2^63",
                      (unsigned long long)c->epoch_samples);
    return ZP_OK;
}

static const char *ws_shard_name(zp_dataset *ds, size_t i)
{
    const char *name = zp_dataset_shard_name(ds, i);
    return name ? name : "?";
}

/* Counts and offsets of the dataset's shards. */
static zp_status ws_offsets(zp_worksource *ws, zp_dataset *ds)
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
    ws->off = ws_array(S + 1, sizeof *ws->off);
    ZPI_RETURN_ERR_IF(!ws->off, &ws->err, ZP_ERR_NOMEM,
                      "out of memory for the offsets of %zu shards", S);
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
    ws->total = ws->off[S];
    ZPI_RETURN_ERR_IF(ws->total == 0, &ws->err, ZP_ERR_INVALID,
                      "the dataset's %zu shard(s) hold no records: nothing to plan", S);
    return ZP_OK;
}

/* The mixture's schedule and cursors (2+ parts; the parts are named). */
static zp_status ws_mixture(zp_worksource *ws, const double *w, size_t np,
                            const zp_worksource_config *c)
{
    const char **names = ws_array(np, sizeof *names);
    if (!names)
        return zpi_err_set(&ws->err, ZP_ERR_NOMEM, "out of memory for %zu mixture parts", np);
    for (size_t p = 0; p < np; p++)
        names[p] = ws->parts[p].name;
    zpi_sched s;
    zp_status st = zpi_sched_from_config(w, names, np, c->phases, c->n_phases, &s, &ws->err);
    free(names);
    if (st == ZP_OK && zpi_sched_copy(&ws->cfg_sched, &s) != ZP_OK) {
        zpi_sched_clear(&s);
        st = zpi_err_set(&ws->err, ZP_ERR_NOMEM, "out of memory for a schedule");
    }
    if (st == ZP_OK)
        st = ws_use_schedule(ws, &s);
    for (int i = 0; i < WS_CURSORS && st == ZP_OK; i++)
        if (zpi_mix_cursor_create(ws->mix, &ws->cur[i].c) != ZP_OK)
            st = zpi_err_set(&ws->err, ZP_ERR_NOMEM, "out of memory for the mixture's cursors");
    return st;
}

/* The parts (one without a mixture), their shard ranges and pass caches,
 * and the mixture schedule. */
static zp_status ws_parts(zp_worksource *ws, const zp_worksource_config *c)
{
    const size_t np = c->n_parts ? c->n_parts : 1;
    ws->parts = calloc(np, sizeof *ws->parts);
    ws->part_cfg = calloc(np, sizeof *ws->part_cfg);
    double *w = ws_array(np, sizeof *w);
    if (!ws->parts || !ws->part_cfg || !w) {
        free(w);
        return zpi_err_set(&ws->err, ZP_ERR_NOMEM, "out of memory for %zu mixture parts", np);
    }
    ws->nparts = np;
    size_t at = 0;
    zp_status st = ZP_OK;
    for (size_t p = 0; p < np && st == ZP_OK; p++) {
        ws_part *pt = &ws->parts[p];
        const zp_mix_part *mp = c->n_parts ? &c->parts[p] : NULL;
        size_t ns = mp ? mp->shards : ws->nshards;
        w[p] = mp ? mp->weight : 1.0;
        char dflt[32];
        zpi_fmt(dflt, sizeof dflt, "part%zu", p);
        const char *name = mp && mp->name && *mp->name ? mp->name : (c->n_parts ? dflt : "all");
        pt->name = zpi_strdup(name);
        if (!pt->name) {
            st = zpi_err_set(&ws->err, ZP_ERR_NOMEM, "out of memory");
            break;
        }
        if (ns == 0 || ns > ws->nshards - at) {
            st = zpi_err_set(&ws->err, ZP_ERR_INVALID,
                             "part %zu (%s): shards = %zu: the parts before it cover %zu of the "
                             "dataset's %zu shards, so it must be 1..%zu",
                             p, name, ns, at, ws->nshards, ws->nshards - at);
            break;
        }
        pt->first = at;
        pt->nshards = ns;
        pt->nblocks = ns / c->shuffle_block_shards + (ns % c->shuffle_block_shards != 0);
        pt->off = ws->off + at;
        pt->total = pt->off[ns] - pt->off[0];
        pt->seed = p == 0 ? c->seed : zpi_hash2(zpi_hash2(c->seed, WS_TAG_PART), (uint64_t)p);
        at += ns;
        if (pt->total == 0) {
            st = zpi_err_set(&ws->err, ZP_ERR_INVALID,
                             "part %zu (%s): its %zu shard(s) hold no records: it cannot be "
                             "drawn",
                             p, name, ns);
            break;
        }
        ws->part_cfg[p].name = pt->name;
        ws->part_cfg[p].shards = ns;
        ws->part_cfg[p].weight = w[p];
        if (c->shuffle) {
            for (int i = 0; i < WS_SLOTS; i++) {
                ws_epoch *e = &pt->slot[i];
                e->order = ws_array(ns, sizeof *e->order);
                e->prefix = ws_array(ns + 1, sizeof *e->prefix);
                e->bprefix = ws_array(pt->nblocks + 1, sizeof *e->bprefix);
                e->bkey = ws_array(pt->nblocks, sizeof *e->bkey);
                if (!e->order || !e->prefix || !e->bprefix || !e->bkey) {
                    st = zpi_err_set(&ws->err, ZP_ERR_NOMEM,
                                     "out of memory for the shard order of %zu shards", ns);
                    break;
                }
            }
        }
    }
    if (st == ZP_OK && at != ws->nshards)
        st = zpi_err_set(&ws->err, ZP_ERR_INVALID,
                         "the %zu parts cover %zu shards: the dataset has %zu (the parts must "
                         "cover every shard, in order)",
                         np, at, ws->nshards);
    if (st == ZP_OK && np > 1)
        st = ws_mixture(ws, w, np, c);
    else if (st == ZP_OK && c->n_phases)
        st = zpi_err_set(&ws->err, ZP_ERR_INVALID,
                         "n_phases = %zu: a weight schedule needs a mixture of 2 parts or more",
                         c->n_phases);
    free(w);
    return st;
}

/* Draws per epoch and the per-rank split. */
static zp_status ws_split(zp_worksource *ws, const zp_worksource_config *c)
{
    const uint64_t N = c->epoch_samples ? c->epoch_samples : ws->total;
    const uint64_t W = c->world_size;
    ws->draws = N;
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
    if (ws_offsets(ws, ds) != ZP_OK || ws_parts(ws, &c) != ZP_OK || ws_split(ws, &c) != ZP_OK)
        return ws_fail(ws);
    ws->cfg = c;
    ws->cfg.parts = c.n_parts ? ws->part_cfg : NULL;
    ws->cfg.phases = NULL; /* borrowed for create only */
    ws->cfg.n_phases = 0;
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

uint64_t zp_worksource_epoch_samples(const zp_worksource *ws, uint32_t epoch)
{
    return ws && ws->ready ? ws_epoch_len(ws, epoch) : 0;
}

uint64_t zp_worksource_draws_per_epoch(const zp_worksource *ws) { return ws ? ws->draws : 0; }

size_t zp_worksource_num_parts(const zp_worksource *ws) { return ws ? ws->nparts : 0; }

const char *zp_worksource_part_name(const zp_worksource *ws, size_t part)
{
    return ws && part < ws->nparts ? ws->parts[part].name : NULL;
}

uint64_t zp_worksource_part_samples(const zp_worksource *ws, size_t part)
{
    return ws && part < ws->nparts ? ws->parts[part].total : 0;
}

double zp_worksource_part_weight(const zp_worksource *ws, size_t part)
{
    if (!ws || part >= ws->nparts)
        return 0.0;
    if (!ws->mix)
        return 1.0;
    return (double)zpi_mix_quantum(ws->mix, part) / (double)zpi_mix_period(ws->mix);
}

zp_status zp_worksource_draw_counts(zp_worksource *ws, uint64_t draws, uint64_t *counts)
{
    if (!ws)
        return ZP_ERR_INVALID;
    WS_CHECK_READY(ws);
    ZPI_RETURN_ERR_IF(!counts, &ws->err, ZP_ERR_INVALID, "zp_worksource_draw_counts: counts is NULL");
    if (!ws->mix) {
        counts[0] = draws;
        return ZP_OK;
    }
    const size_t k = zpi_sched_phase_at(&ws->sched, draws);
    zp_status st = zpi_mix_counts(ws->mixes[k], draws - ws->sched.start[k], counts);
    ZPI_RETURN_ERR_IF(st != ZP_OK, &ws->err, st, "out of memory for a mixture cursor");
    for (size_t p = 0; p < ws->nparts; p++)
        counts[p] += ws->base[k * ws->nparts + p];
    return ZP_OK;
}

size_t zp_worksource_num_phases(const zp_worksource *ws)
{
    return !ws || !ws->ready ? 0 : ws->mix ? ws->sched.n_phases : 1;
}

uint64_t zp_worksource_phase_start(const zp_worksource *ws, size_t phase)
{
    return ws && ws->mix && phase < ws->sched.n_phases ? ws->sched.start[phase] : 0;
}

double zp_worksource_phase_weight(const zp_worksource *ws, size_t phase, size_t part)
{
    if (!ws || !ws->ready || part >= ws->nparts)
        return 0.0;
    if (!ws->mix)
        return phase == 0 ? 1.0 : 0.0;
    if (phase >= ws->sched.n_phases)
        return 0.0;
    const zpi_mix *m = ws->mixes[phase];
    return (double)zpi_mix_quantum(m, part) / (double)zpi_mix_period(m);
}

size_t zp_worksource_phase_of(const zp_worksource *ws, uint64_t draw)
{
    return ws && ws->mix ? zpi_sched_phase_at(&ws->sched, draw) : 0;
}

static zp_status ws_sample_at(zp_worksource *ws, uint32_t epoch, uint64_t g, uint64_t position,
                              uint64_t token_offset, zp_sample *out);

zp_status zp_worksource_sample(zp_worksource *ws, uint32_t epoch, uint64_t position,
                               zp_sample *out)
{
    if (!ws)
        return ZP_ERR_INVALID;
    WS_CHECK_READY(ws);
    ZPI_RETURN_ERR_IF(!out, &ws->err, ZP_ERR_INVALID, "zp_worksource_sample: out is NULL");
    const zpi_epoch_plan *pl = ws->nplans ? ws_find_plan(ws, epoch) : NULL;
    const uint64_t len = pl ? ws_plan_len(ws, pl) : ws->per;
    ZPI_RETURN_ERR_IF(position >= len, &ws->err, ZP_ERR_INVALID,
                      "position = %llu (epoch %u): must be less than %s = %llu",
                      (unsigned long long)position, epoch,
                      pl ? "the samples of the epoch's plan" : "samples_per_rank",
                      (unsigned long long)len);
    uint64_t g, token_offset = 0;
    if (!pl) {
        g = ws->first + position; /* < W * per: no overflow (checked at create) */
    } else {
        ws_plan_ix *ix = ws_ix(ws, pl);
        size_t k = ix->hint;
        if (position < ix->pre[k] || position >= ix->pre[k + 1])
            ix->hint = k = zpi_plan_locate(pl, ix->pre, position, &g);
        g = pl->spans[k].start + (position - ix->pre[k]);
        if (position == ix->pre[k])
            token_offset = pl->spans[k].token_offset;
    }
    return ws_sample_at(ws, epoch, g, position, token_offset, out);
}

/* The sample at position g of epoch's stream (g >= draws: padding, g mod
 * draws repeated), as rank position `position` with `token_offset`. */
static zp_status ws_sample_at(zp_worksource *ws, uint32_t epoch, uint64_t g, uint64_t position,
                              uint64_t token_offset, zp_sample *out)
{
    const int padded = g >= ws->draws;
    if (padded)
        g %= ws->draws;
    /* mixture draw G = epoch * N + g */
    unsigned __int128 G = (unsigned __int128)epoch * ws->draws + g;
    uint32_t part = 0;
    uint64_t n;
    if (!ws->mix) {
        unsigned __int128 pass128 = G / ws->parts[0].total;
        ZPI_RETURN_ERR_IF(pass128 > UINT64_MAX, &ws->err, ZP_ERR_LIMIT,
                          "epoch %u: the pass of the dataset would pass 2^64", epoch);
        n = (uint64_t)(G % ws->parts[0].total);
        uint32_t shard;
        uint64_t record;
        ws_locate(ws, &ws->parts[0], (uint64_t)pass128, n, &shard, &record);
        out->shard = shard;
        out->record = record;
        out->pass = (uint64_t)pass128;
    } else {
        ZPI_RETURN_ERR_IF(G > UINT64_MAX, &ws->err, ZP_ERR_LIMIT,
                          "epoch %u x %llu draws: the mixture's draw number would pass 2^64",
                          epoch, (unsigned long long)ws->draws);
        ws_draw(ws, (uint64_t)G, &part, &n);
        ws_part *pt = &ws->parts[part];
        uint64_t pass = n / pt->total;
        ws_locate(ws, pt, pass, n % pt->total, &out->shard, &out->record);
        out->pass = pass;
    }
    out->global_id = ws->off[out->shard] + out->record;
    out->epoch = epoch;
    out->position = position;
    out->padded = padded;
    out->part = part;
    out->phase = ws->mix ? (uint32_t)ws_phase(ws, (uint64_t)G) : 0;
    out->token_offset = token_offset;
    return ZP_OK;
}

/* Fold the part's draws [n0, n1) that fall in work indices [lo, hi) of
 * them (relative to n0), adding to *out: a whole pass of the part is its
 * records, folded by id without the permutation; a part of a pass is
 * looked up place by place. */
static void ws_fold_part(const zp_worksource *ws, ws_part *pt, uint64_t n0, uint64_t n1,
                         uint64_t lo, uint64_t hi, zp_coverage *out)
{
    const uint64_t S = pt->total;
    uint64_t n = n0;
    while (n < n1) {
        const uint64_t pass = n / S, q0 = n % S;
        const uint64_t end = n1 - n < S - q0 ? n1 : n + (S - q0); /* this pass's piece */
        /* work indices [n - n0, end - n0) intersected with [lo, hi) */
        uint64_t a = n - n0 > lo ? n - n0 : lo, b = end - n0 < hi ? end - n0 : hi;
        if (a < b) {
            if (q0 == 0 && end - n == S) { /* the whole pass: its records by id */
                for (uint64_t i = a - (n - n0); i < b - (n - n0); i++)
                    zp_coverage_fold(out, pt->off[0] + i, pass);
            } else {
                for (uint64_t i = a; i < b; i++) {
                    uint32_t shard;
                    uint64_t record;
                    ws_locate(ws, pt, pass, (n0 + i) % S, &shard, &record);
                    zp_coverage_fold(out, ws->off[shard] + record, pass);
                }
            }
        }
        n = end;
    }
}

zp_status zp_worksource_epoch_coverage(zp_worksource *ws, uint32_t epoch, uint32_t slice,
                                       uint32_t slices, zp_coverage *out)
{
    if (!ws)
        return ZP_ERR_INVALID;
    WS_CHECK_READY(ws);
    ZPI_RETURN_ERR_IF(!out || !slices || slice >= slices, &ws->err, ZP_ERR_INVALID,
                      "zp_worksource_epoch_coverage: slice %u of %u (out %s)", slice, slices,
                      out ? "given" : "NULL");
    memset(out, 0, sizeof *out);
    const size_t np = ws->nparts;
    uint64_t *c0 = calloc(2 * np, sizeof *c0);
    ZPI_RETURN_ERR_IF(!c0, &ws->err, ZP_ERR_NOMEM, "out of memory");
    uint64_t *c1 = c0 + np;
    unsigned __int128 G0 = (unsigned __int128)epoch * ws->draws, G1 = G0 + ws->draws;
    zp_status st = ZP_OK;
    if (G1 > UINT64_MAX)
        st = zpi_err_set(&ws->err, ZP_ERR_LIMIT,
                         "epoch %u x %llu draws: the mixture's draw number would pass 2^64", epoch,
                         (unsigned long long)ws->draws);
    else if ((st = zp_worksource_draw_counts(ws, (uint64_t)G0, c0)) == ZP_OK)
        st = zp_worksource_draw_counts(ws, (uint64_t)G1, c1);
    if (st == ZP_OK) {
        /* the epoch's work: each part's draws, parts in order; this slice
         * takes [total * slice / slices, total * (slice + 1) / slices) */
        uint64_t total = 0;
        for (size_t p = 0; p < np; p++)
            total += c1[p] - c0[p];
        const uint64_t lo = (uint64_t)((unsigned __int128)total * slice / slices);
        const uint64_t hi = (uint64_t)((unsigned __int128)total * (slice + 1) / slices);
        uint64_t at = 0;
        for (size_t p = 0; p < np; p++) {
            const uint64_t w = c1[p] - c0[p];
            if (at < hi && at + w > lo)
                ws_fold_part(ws, &ws->parts[p], c0[p], c1[p], lo > at ? lo - at : 0,
                             hi - at < w ? hi - at : w, out);
            at += w;
        }
    }
    free(c0);
    if (st != ZP_OK || slice != 0)
        return st;
    /* the remainder policy drops the stream's last positions: taken out
     * (sum and count subtract, xor is its own inverse) */
    const uint64_t keep = ws->cfg.remainder == ZP_REMAINDER_DROP
                              ? (uint64_t)ws->cfg.world_size * ws->per
                              : ws->draws;
    for (uint64_t g = keep; g < ws->draws; g++) {
        zp_sample smp;
        ZPI_FORWARD_IF_ERR(ws_sample_at(ws, epoch, g, g, 0, &smp));
        uint64_t m = zp_coverage_mix(smp.global_id, smp.pass);
        out->count--;
        out->sum -= m;
        out->xr ^= m;
    }
    return ZP_OK;
}

zp_status zp_worksource_coverage(zp_worksource *ws, uint32_t epoch, uint64_t first,
                                 uint64_t count, zp_coverage *out)
{
    if (!ws)
        return ZP_ERR_INVALID;
    WS_CHECK_READY(ws);
    ZPI_RETURN_ERR_IF(!out, &ws->err, ZP_ERR_INVALID, "zp_worksource_coverage: out is NULL");
    ZPI_RETURN_ERR_IF(first > ws->draws || count > ws->draws - first, &ws->err, ZP_ERR_INVALID,
                      "zp_worksource_coverage: positions [%llu, %llu + %llu) of epoch %u: the "
                      "epoch's stream has %llu",
                      (unsigned long long)first, (unsigned long long)first,
                      (unsigned long long)count, epoch, (unsigned long long)ws->draws);
    memset(out, 0, sizeof *out);
    for (uint64_t g = first; g < first + count; g++) {
        zp_sample s;
        ZPI_FORWARD_IF_ERR(ws_sample_at(ws, epoch, g, g, 0, &s));
        zp_coverage_fold(out, s.global_id, s.pass);
    }
    return ZP_OK;
}

/* After the sample at (epoch, position): the next state. The last position
 * of an epoch moves to the next epoch that has samples for this rank,
 * except after the last epoch (UINT32_MAX), where the state stays at
 * (epoch, its length) and next() reports ZP_ERR_LIMIT. */
void zpi_worksource_settle(const zp_worksource *ws, uint32_t *epoch, uint64_t *position)
{
    while (*position >= ws_epoch_len(ws, *epoch) && *epoch != UINT32_MAX) {
        (*epoch)++;
        *position = 0;
    }
}

static void ws_advance(zp_worksource *ws, uint32_t epoch, uint64_t position)
{
    zpi_worksource_settle(ws, &epoch, &position);
    ws->epoch = epoch;
    ws->position = position;
}

zp_status zp_worksource_next(zp_worksource *ws, zp_sample *out)
{
    if (!ws)
        return ZP_ERR_INVALID;
    WS_CHECK_READY(ws);
    ZPI_RETURN_ERR_IF(!out, &ws->err, ZP_ERR_INVALID, "zp_worksource_next: out is NULL");
    ZPI_RETURN_ERR_IF(ws->position >= ws_epoch_len(ws, ws->epoch), &ws->err, ZP_ERR_LIMIT,
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
    const uint64_t len = ws_epoch_len(ws, st->epoch);
    ZPI_RETURN_ERR_IF(st->position > len, &ws->err, ZP_ERR_INVALID,
                      "state position = %llu (epoch %u): past %s = %llu",
                      (unsigned long long)st->position, st->epoch,
                      ws_find_plan(ws, st->epoch) ? "the samples of the epoch's plan"
                                                  : "samples_per_rank",
                      (unsigned long long)len);
    ws_advance(ws, st->epoch, st->position);
    return ZP_OK;
}

/* Samples of this rank's stream before (epoch, position), in 128 bits. */
static unsigned __int128 ws_linear(const zp_worksource *ws, uint32_t epoch, uint64_t position)
{
    unsigned __int128 g = (unsigned __int128)epoch * ws->per + position;
    for (size_t i = 0; i < ws->nplans && ws->plans[i].epoch < epoch; i++)
        g = g - ws->per + ws_plan_len(ws, &ws->plans[i]);
    return g;
}

zp_status zp_worksource_stream_index(zp_worksource *ws, uint32_t epoch, uint64_t position,
                                     uint64_t *out)
{
    if (!ws)
        return ZP_ERR_INVALID;
    WS_CHECK_READY(ws);
    ZPI_RETURN_ERR_IF(!out, &ws->err, ZP_ERR_INVALID,
                      "zp_worksource_stream_index: out is NULL");
    const uint64_t len = ws_epoch_len(ws, epoch);
    ZPI_RETURN_ERR_IF(position > len, &ws->err, ZP_ERR_INVALID,
                      "position = %llu (epoch %u): past %s = %llu", (unsigned long long)position,
                      epoch,
                      ws_find_plan(ws, epoch) ? "the samples of the epoch's plan"
                                              : "samples_per_rank",
                      (unsigned long long)len);
    unsigned __int128 g = ws_linear(ws, epoch, position);
    ZPI_RETURN_ERR_IF(g > UINT64_MAX, &ws->err, ZP_ERR_LIMIT,
                      "epoch %u x samples_per_rank %llu + position %llu: more than 2^64 - 1 "
                      "samples",
                      epoch, (unsigned long long)ws->per, (unsigned long long)position);
    *out = (uint64_t)g;
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

/* ------------------------------------------------------------ internal */

zp_status zpi_worksource_set_plans(zp_worksource *ws, const zpi_epoch_plan *plans, size_t n)
{
    if (!ws->ready)
        return ZP_ERR_STATE;
    zpi_epoch_plan *np = n ? calloc(n, sizeof *np) : NULL;
    ws_plan_ix *nx = n ? calloc(n, sizeof *nx) : NULL;
    if (n && (!np || !nx)) {
        free(np);
        free(nx);
        return zpi_err_set(&ws->err, ZP_ERR_NOMEM, "out of memory for %zu epoch plans", n);
    }
    zp_status st = ZP_OK;
    for (size_t i = 0; i < n && st == ZP_OK; i++) {
        const zpi_epoch_plan *src = &plans[i];
        zpi_epoch_plan *d = &np[i];
        uint64_t *pre = nx[i].pre = ws_array(src->n + 1, sizeof *pre);
        d->epoch = src->epoch;
        d->n = src->n;
        d->spans = ws_array(src->n ? src->n : 1, sizeof *d->spans);
        if (!d->spans || !pre) {
            st = zpi_err_set(&ws->err, ZP_ERR_NOMEM, "out of memory for an epoch plan");
            break;
        }
        if (i > 0 && src->epoch <= plans[i - 1].epoch)
            st = zpi_err_set(&ws->err, ZP_ERR_INVALID,
                             "epoch plans: epoch %u follows epoch %u (must ascend)", src->epoch,
                             plans[i - 1].epoch);
        pre[0] = 0;
        for (size_t k = 0; k < src->n && st == ZP_OK; k++) {
            const zpi_span *sp = &src->spans[k];
            d->spans[k] = *sp;
            /* a span reads positions of the padded epoch [0, W * per + ...):
             * positions >= N are padding; keep them below 2^63 */
            if (sp->count == 0 || sp->start >= WS_MAX_SAMPLES ||
                sp->count >= WS_MAX_SAMPLES - sp->start ||
                pre[k] >= WS_MAX_SAMPLES - sp->count)
                st = zpi_err_set(&ws->err, ZP_ERR_INVALID,
                                 "epoch %u plan: span %zu [%llu, +%llu) is empty or too large",
                                 src->epoch, k, (unsigned long long)sp->start,
                                 (unsigned long long)sp->count);
            else
                pre[k + 1] = pre[k] + sp->count;
        }
    }
    if (st != ZP_OK) {
        ws_free_plan_arrays(np, nx, n);
        return st;
    }
    ws_free_plans(ws);
    ws->plans = np;
    ws->plan_ix = nx;
    ws->nplans = n;
    ws_advance(ws, ws->epoch, ws->position);
    return ZP_OK;
}

size_t zpi_worksource_num_plans(const zp_worksource *ws) { return ws->nplans; }

const zpi_sched *zpi_worksource_schedule(const zp_worksource *ws)
{
    return ws->ready && ws->mix ? &ws->sched : NULL;
}

const zpi_sched *zpi_worksource_config_schedule(const zp_worksource *ws)
{
    return ws->ready && ws->mix ? &ws->cfg_sched : NULL;
}

zp_status zpi_worksource_set_schedule(zp_worksource *ws, const zpi_sched *s)
{
    if (!ws->ready)
        return ZP_ERR_STATE;
    ZPI_RETURN_ERR_IF(!ws->mix, &ws->err, ZP_ERR_INVALID,
                      "a weight schedule needs a mixture of 2 parts or more");
    ZPI_RETURN_ERR_IF(s->n_parts != ws->nparts || s->n_phases == 0 || s->start[0] != 0,
                      &ws->err, ZP_ERR_INVALID,
                      "schedule: %zu parts, %zu phases (the mixture has %zu parts; phase 0 "
                      "starts at draw 0)",
                      s->n_parts, s->n_phases, ws->nparts);
    for (size_t k = 1; k < s->n_phases; k++)
        ZPI_RETURN_ERR_IF(s->start[k] <= s->start[k - 1], &ws->err, ZP_ERR_INVALID,
                          "schedule: phase %zu starts at draw %llu, not after phase %zu (%llu)",
                          k, (unsigned long long)s->start[k], k - 1,
                          (unsigned long long)s->start[k - 1]);
    zpi_sched c;
    zp_status st = zpi_sched_copy(&c, s);
    ZPI_RETURN_ERR_IF(st != ZP_OK, &ws->err, st, "out of memory for a schedule");
    return ws_use_schedule(ws, &c);
}

uint64_t zpi_worksource_draw_of(const zp_worksource *ws, uint32_t epoch, uint64_t g)
{
    unsigned __int128 G = (unsigned __int128)epoch * ws->draws + g;
    return G > UINT64_MAX ? UINT64_MAX : (uint64_t)G;
}

void zpi_worksource_plan(const zp_worksource *ws, size_t i, zpi_epoch_plan *out)
{
    *out = ws->plans[i];
}

uint64_t zpi_worksource_linear(const zp_worksource *ws, uint32_t epoch, uint64_t position)
{
    unsigned __int128 g = ws_linear(ws, epoch, position);
    return g > UINT64_MAX ? UINT64_MAX : (uint64_t)g;
}

int zpi_worksource_unlinear(const zp_worksource *ws, uint64_t g, uint32_t *epoch,
                            uint64_t *position)
{
    /* epochs before each plan have per samples each */
    uint64_t base = 0;  /* linear index of the start of epoch `e` */
    uint32_t e = 0;
    for (size_t i = 0; i <= ws->nplans; i++) {
        uint32_t stop = i < ws->nplans ? ws->plans[i].epoch : UINT32_MAX;
        /* default epochs e .. stop - 1 */
        if (ws->per) {
            uint64_t span_epochs = (uint64_t)(stop - e);
            unsigned __int128 len = (unsigned __int128)span_epochs * ws->per;
            if ((unsigned __int128)g < (unsigned __int128)base + len) {
                uint64_t k = (g - base) / ws->per;
                *epoch = (uint32_t)(e + k);
                *position = (g - base) % ws->per;
                return 1;
            }
            base += (uint64_t)len;
        }
        if (i == ws->nplans)
            return 0;
        uint64_t plen = ws_plan_len(ws, &ws->plans[i]);
        if (g < base + plen) {
            *epoch = stop;
            *position = g - base;
            return 1;
        }
        base += plen;
        if (stop == UINT32_MAX)
            return 0;
        e = stop + 1;
    }
    return 0;
}
