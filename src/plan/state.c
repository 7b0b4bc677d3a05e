/*
 * state.c - pipeline states in memory (state.h): the structs' memory, the
 * positions a rank reads (default ranges, plans) and the validation that
 * parse and render share. The JSON form is state_json.c's, merging and the
 * elastic re-split state_merge.c's, the words of `zephon state show`
 * state_describe.c's, the checks of a state against itself
 * state_check.c's; the public zp_state_merge() and zp_state_describe()
 * are state_public.c's. docs/state.md describes the format.
 *
 * Ownership: every struct owns its arrays and strings; zpi_*_clear() frees
 * them. Returned texts are malloc'd and the caller frees them.
 *
 * Thread safety: no shared state; every call works on its arguments.
 */
#include "plan/state.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "base/util.h"
#include "zephon/state_json.h"
#include "zephon/worksource.h"

/* epoch_samples is below 2^63, so that a position N + k never overflows. */
#define MAX_N ((uint64_t)INT64_MAX)

/* ------------------------------------------------------------ memory */

void zpi_rank_state_clear(zpi_rank_state *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_plans; i++)
        free(r->plans[i].spans);
    free(r->plans);
    free(r->part_samples);
    free(r->part_tokens);
    free(r->phase_samples);
    free(r->skips);
    free(r->window_done);
    free(r->cov);
    memset(r, 0, sizeof *r);
}

void zpi_state_clear(zpi_state *s)
{
    if (!s)
        return;
    if (!s->borrowed) {
        free(s->settings);
        for (size_t i = 0; i < s->n_parts; i++)
            free(s->part_names ? s->part_names[i] : NULL);
        free(s->part_names);
        free(s->part_weights);
        zpi_sched_clear(&s->sched);
    }
    for (size_t i = 0; i < s->n_ranks; i++)
        zpi_rank_state_clear(&s->ranks[i]);
    free(s->ranks);
    memset(s, 0, sizeof *s);
}

/* malloc of n elements of size sz (n may be 0: a 1-byte block, so that
 * NULL always means failure); NULL on overflow. */
void *zpi_state_alloc_n(size_t n, size_t sz)
{
    if (n && sz > SIZE_MAX / n)
        return NULL;
    return calloc(n ? n : 1, sz);
}

void *zpi_state_dup_n(const void *src, size_t n, size_t sz)
{
    void *p = zpi_state_alloc_n(n, sz);
    if (p && n)
        memcpy(p, src, n * sz);
    return p;
}

zp_status zpi_rank_state_copy(zpi_rank_state *dst, const zpi_rank_state *src)
{
    zpi_rank_state r = *src;
    r.plans = NULL;
    r.part_samples = r.part_tokens = NULL;
    r.phase_samples = NULL;
    r.skips = NULL;
    r.window_done = NULL;
    r.cov = NULL;
    r.n_plans = 0;
    r.plans = zpi_state_alloc_n(src->n_plans, sizeof *r.plans);
    r.part_samples = zpi_state_dup_n(src->part_samples, src->n_parts, sizeof(uint64_t));
    r.part_tokens = zpi_state_dup_n(src->part_tokens, src->n_parts, sizeof(uint64_t));
    r.skips = zpi_state_dup_n(src->skips, src->n_skips, sizeof *r.skips);
    r.phase_samples = zpi_state_dup_n(src->phase_samples, src->n_phases * src->n_parts,
                                      sizeof(uint64_t));
    r.window_done = zpi_state_dup_n(src->window_done, 2 * src->n_window_done, sizeof(uint64_t));
    r.cov = zpi_state_dup_n(src->cov, src->n_cov, sizeof *r.cov);
    int bad = !r.plans || !r.part_samples || !r.part_tokens || !r.skips || !r.phase_samples ||
              !r.window_done || !r.cov;
    for (size_t i = 0; !bad && i < src->n_plans; i++) {
        r.plans[i] = src->plans[i];
        r.plans[i].spans = zpi_state_dup_n(src->plans[i].spans, src->plans[i].n, sizeof(zpi_span));
        if (!r.plans[i].spans)
            bad = 1;
        else
            r.n_plans = i + 1;
    }
    if (bad) {
        zpi_rank_state_clear(&r);
        memset(dst, 0, sizeof *dst);
        return ZP_ERR_NOMEM;
    }
    *dst = r;
    return ZP_OK;
}

/* ------------------------------------------------------------ positions */

void zpi_state_default_range(uint64_t n, uint32_t world_size, int remainder, uint32_t rank,
                             uint64_t *start, uint64_t *count)
{
    uint64_t w = world_size ? world_size : 1;
    uint64_t per = n / w;
    if (remainder == ZP_REMAINDER_PAD && n % w)
        per++;
    *start = (uint64_t)rank * per;
    *count = per;
}

const zpi_epoch_plan *zpi_rank_find_plan(const zpi_rank_state *r, uint32_t epoch)
{
    return zpi_plan_find(r->plans, r->n_plans, epoch);
}

/* The rank's positions in `epoch`: its plan or its default range. */
uint64_t zpi_state_rank_epoch_count(const zpi_state *s, const zpi_rank_state *r, uint32_t epoch)
{
    const zpi_epoch_plan *p = zpi_rank_find_plan(r, epoch);
    if (p)
        return zpi_plan_total(p);
    uint64_t a, c;
    zpi_state_default_range(s->epoch_samples, s->world_size, s->remainder, r->rank, &a, &c);
    return c;
}

/* The highest real stream position (< N) among positions [0, upto) of the
 * rank's sequence of `epoch`, plus 1; 0 when there is none. */
static uint64_t rank_high(const zpi_state *s, const zpi_rank_state *r, uint32_t epoch,
                          uint64_t upto)
{
    const uint64_t N = s->epoch_samples;
    uint64_t hi = 0;
    const zpi_epoch_plan *p = zpi_rank_find_plan(r, epoch);
    if (!p) {
        uint64_t a, c;
        zpi_state_default_range(N, s->world_size, s->remainder, r->rank, &a, &c);
        uint64_t n = upto < c ? upto : c;
        if (n && a < N)
            hi = (a + n < N ? a + n : N);
        return hi;
    }
    for (size_t k = 0; k < p->n && upto; k++) {
        const zpi_span *sp = &p->spans[k];
        uint64_t n = upto < sp->count ? upto : sp->count;
        upto -= n;
        if (sp->start < N) {
            uint64_t e = sp->start + n < N ? sp->start + n : N;
            hi = e > hi ? e : hi;
        }
    }
    return hi;
}

uint64_t zpi_state_high_water(const zpi_state *s)
{
    const uint64_t N = s->epoch_samples;
    unsigned __int128 c = 0;
    for (size_t i = 0; i < s->n_ranks; i++) {
        const zpi_rank_state *r = &s->ranks[i];
        /* the sample at `position` counts as delivered when part of it was */
        uint64_t upto = r->position + (r->token_offset > 0 || r->carry);
        /* best-fit packing: the documents of the window delivered (whole
         * or in part) lie past `position` */
        if (r->window_rows && r->n_window_done)
            upto = r->position + r->window_done[2 * (r->n_window_done - 1)] + 1;
        unsigned __int128 g = (unsigned __int128)r->epoch * N + rank_high(s, r, r->epoch, upto);
        c = g > c ? g : c;
        /* a planned span whose first document was cut by an earlier save */
        for (size_t k = 0; k < r->n_plans; k++) {
            const zpi_epoch_plan *p = &r->plans[k];
            for (size_t j = 0; j < p->n; j++)
                if (p->spans[j].token_offset && p->spans[j].start < N) {
                    g = (unsigned __int128)p->epoch * N + p->spans[j].start + 1;
                    c = g > c ? g : c;
                }
        }
    }
    return c > UINT64_MAX ? UINT64_MAX : (uint64_t)c;
}

/* ------------------------------------------------------------ validation */

const char *zpi_remainder_name(int r)
{
    return r == ZP_REMAINDER_PAD ? "pad" : r == ZP_REMAINDER_DROP ? "drop" : NULL;
}

int zpi_state_first_duplicate(char *const *names, size_t n, size_t *i_out, size_t *j_out)
{
    if (n < 2)
        return 0;
    /* open addressing, at most half full: each slot holds 1 + an index */
    size_t cap = 4;
    while (cap < 2 * n)
        cap *= 2;
    size_t *slot = calloc(cap, sizeof *slot);
    if (!slot)
        return -1;
    int found = 0;
    for (size_t i = 0; i < n && !found; i++) {
        size_t len = strlen(names[i]);
        size_t h = (size_t)XXH64(names[i], len, 0) & (cap - 1);
        for (; slot[h]; h = (h + 1) & (cap - 1))
            if (strcmp(names[slot[h] - 1], names[i]) == 0) {
                *i_out = i;
                *j_out = slot[h] - 1;
                found = 1;
                break;
            }
        if (!found)
            slot[h] = i + 1;
    }
    free(slot);
    return found;
}

/* The checks shared by render, parse and the re-split, on everything but
 * the settings text; `code` is the status of a failure. */
zp_status zpi_state_validate(const zpi_state *s, zp_status code, zpi_err *err)
{
    if (s->version != ZP_STATE_VERSION)
        return zpi_err_set(err, ZP_ERR_UNSUPPORTED,
                           "version %d: this build reads and writes state version %d",
                           s->version, ZP_STATE_VERSION);
    ZPI_RETURN_ERR_IF(s->world_size == 0, err, code, "world_size: 0: must be at least 1");
    ZPI_RETURN_ERR_IF(s->epoch_samples == 0 || s->epoch_samples > MAX_N, err, code,
                      "epoch_samples: %" PRIu64 ": must be 1 .. 2^63 - 1", s->epoch_samples);
    ZPI_RETURN_ERR_IF(!zpi_remainder_name(s->remainder), err, code,
                      "remainder: %d: must be pad (0) or drop (1)", s->remainder);
    /* the parts (a borrowed state's are its lender's, checked with it) */
    for (size_t i = 0; i < s->n_parts && !s->borrowed; i++) {
        const char *nm = s->part_names ? s->part_names[i] : NULL;
        ZPI_RETURN_ERR_IF(!nm || !*nm, err, code, "parts[%zu].name: must be a non-empty string",
                          i);
        double w = s->part_weights[i];
        ZPI_RETURN_ERR_IF(!isfinite(w) || w <= 0 || w > 1, err, code,
                          "parts[%zu].weight: %g: must be in (0, 1]", i, w);
    }
    size_t di, dj;
    int dup = s->borrowed ? 0 : zpi_state_first_duplicate(s->part_names, s->n_parts, &di, &dj);
    ZPI_RETURN_ERR_IF(dup < 0, err, ZP_ERR_NOMEM, "parts: out of memory checking %zu names",
                      s->n_parts);
    ZPI_RETURN_ERR_IF(dup, err, code, "parts[%zu].name: \"%s\" is also parts[%zu]'s name", di,
                      s->part_names[di], dj);
    ZPI_RETURN_ERR_IF(s->n_ranks == 0, err, code, "ranks: empty: a state holds at least one rank");
    for (size_t k = 0; k < s->n_ranks; k++) {
        const zpi_rank_state *r = &s->ranks[k];
        ZPI_RETURN_ERR_IF(r->rank >= s->world_size, err, code,
                          "ranks[%zu].rank: %" PRIu32 ": must be below world_size %" PRIu32, k,
                          r->rank, s->world_size);
        ZPI_RETURN_ERR_IF(k && r->rank <= s->ranks[k - 1].rank, err, code,
                          "ranks[%zu].rank: %" PRIu32 ": ranks must be ascending, each once", k,
                          r->rank);
        ZPI_RETURN_ERR_IF(r->n_parts != s->n_parts, err, code,
                          "ranks[%zu].part_samples: %zu values for %zu parts", k, r->n_parts,
                          s->n_parts);
        for (size_t i = 0; i < r->n_plans; i++) {
            const zpi_epoch_plan *p = &r->plans[i];
            ZPI_RETURN_ERR_IF(i && p->epoch <= r->plans[i - 1].epoch, err, code,
                              "ranks[%zu].plans[%zu].epoch: %" PRIu32
                              ": plans must be ascending by epoch, each once",
                              k, i, p->epoch);
            uint64_t total = 0;
            for (size_t j = 0; j < p->n; j++) {
                const zpi_span *sp = &p->spans[j];
                ZPI_RETURN_ERR_IF(sp->count == 0, err, code,
                                  "ranks[%zu].plans[%zu].spans[%zu]: an empty span", k, i, j);
                ZPI_RETURN_ERR_IF(sp->start > UINT64_MAX - sp->count ||
                                      total > UINT64_MAX - sp->count,
                                  err, code, "ranks[%zu].plans[%zu].spans[%zu]: too large", k, i,
                                  j);
                total += sp->count;
            }
        }
        uint64_t cnt = zpi_state_rank_epoch_count(s, r, r->epoch);
        ZPI_RETURN_ERR_IF(r->position > cnt, err, code,
                          "ranks[%zu].position: %" PRIu64 ": past the %" PRIu64
                          " positions of the rank's epoch %" PRIu32,
                          k, r->position, cnt, r->epoch);
        for (size_t i = 0; i < r->n_skips; i++) {
            const zpi_skip *x = &r->skips[i];
            ZPI_RETURN_ERR_IF(x->first > x->last, err, code,
                              "ranks[%zu].skipped[%zu].batches: %" PRIu64 " > %" PRIu64, k, i,
                              x->first, x->last);
            ZPI_RETURN_ERR_IF(i && x->first <= r->skips[i - 1].last, err, code,
                              "ranks[%zu].skipped[%zu].batches: %" PRIu64 " .. %" PRIu64
                              ": ranges must be ascending and not overlap",
                              k, i, x->first, x->last);
        }
    }
    return ZP_OK;
}

