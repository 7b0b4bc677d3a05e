/*
 * shard_cache.c - decoded shards shared by a pipeline's fetch workers.
 *
 * Each shard of the dataset has one slot: EMPTY, LOADING (one thread is
 * loading it; others wait on the condition variable) or READY (decoded,
 * with a pin count). Ready shards with no pins sit on an LRU list; when
 * their total size exceeds the budget, the least recently used are freed.
 * Pinned shards are never evicted, so the resident size is bounded by
 * budget + pinned shards. A failed load leaves the slot EMPTY: nothing
 * about the failure is cached, the next get loads again.
 *
 * Loads and frees of shard buffers run outside the lock.
 * Ownership: the cache owns every decoded shard; a pointer from
 * zpi_shard_cache_get() is borrowed until the matching put.
 * Thread safety: all functions but create/destroy may be called from any
 * thread concurrently. The dataset must outlive the cache and stay
 * unchanged.
 */
#include "shard_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dataset_internal.h"
#include "util.h"

enum slot_state { SLOT_EMPTY, SLOT_LOADING, SLOT_READY };

typedef struct slot {
    enum slot_state state;
    uint32_t pins;
    zpi_shard shard;
    size_t size;             /* accounted bytes (data + index) */
    int64_t prev, next;      /* LRU links (slot indexes, -1 = none) while unpinned and READY */
} slot;

struct zpi_shard_cache {
    const zp_dataset *ds;    /* borrowed */
    size_t budget;
    size_t n;
    slot *slots;
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* signalled when a load ends (success or failure) */
    int64_t lru_head, lru_tail; /* head = most recently used */
    size_t unpinned_bytes;
    zpi_shard_cache_stats st;
};

zp_status zpi_shard_cache_create(const zp_dataset *ds, size_t budget_bytes, zpi_shard_cache **out)
{
    if (!ds || !out)
        return ZP_ERR_INVALID;
    *out = NULL;
    zpi_shard_cache *c = calloc(1, sizeof *c);
    if (!c)
        return ZP_ERR_NOMEM;
    c->ds = ds;
    c->budget = budget_bytes;
    c->n = zp_dataset_num_shards(ds);
    c->slots = calloc(c->n ? c->n : 1, sizeof *c->slots);
    if (!c->slots) {
        free(c);
        return ZP_ERR_NOMEM;
    }
    for (size_t i = 0; i < c->n; i++)
        c->slots[i].prev = c->slots[i].next = -1;
    c->lru_head = c->lru_tail = -1;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c->slots);
        free(c);
        return ZP_ERR_INTERNAL;
    }
    if (pthread_cond_init(&c->cv, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        free(c->slots);
        free(c);
        return ZP_ERR_INTERNAL;
    }
    *out = c;
    return ZP_OK;
}

void zpi_shard_cache_destroy(zpi_shard_cache *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++)
        zpi_shard_free(&c->slots[i].shard);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c->slots);
    free(c);
}

/* ---- LRU list (lock held) */

static void lru_unlink(zpi_shard_cache *c, int64_t i)
{
    slot *s = &c->slots[i];
    if (s->prev >= 0)
        c->slots[s->prev].next = s->next;
    else
        c->lru_head = s->next;
    if (s->next >= 0)
        c->slots[s->next].prev = s->prev;
    else
        c->lru_tail = s->prev;
    s->prev = s->next = -1;
}

static void lru_push_front(zpi_shard_cache *c, int64_t i)
{
    slot *s = &c->slots[i];
    s->prev = -1;
    s->next = c->lru_head;
    if (c->lru_head >= 0)
        c->slots[c->lru_head].prev = i;
    c->lru_head = i;
    if (c->lru_tail < 0)
        c->lru_tail = i;
}

/* Check a freshly loaded shard against what the dataset says about it (a
 * manifest may be stale). */
static zp_status check_loaded(const zp_dataset *ds, uint32_t index, const zpi_shard *sh, char *err,
                              size_t errcap)
{
    uint64_t want = zp_dataset_shard_samples(ds, index);
    if (want != UINT64_MAX && want != sh->n_records) {
        zpi_fmt(err, errcap,
                "shard '%s': has %llu records but the dataset says %llu (stale manifest?)",
                zp_dataset_shard_name(ds, index), (unsigned long long)sh->n_records,
                (unsigned long long)want);
        return ZP_ERR_FORMAT;
    }
    return ZP_OK;
}

zp_status zpi_shard_cache_get(zpi_shard_cache *c, uint32_t index, const zpi_shard **out,
                              int *loaded, char *err, size_t errcap)
{
    if (loaded)
        *loaded = 0;
    if (!c || !out)
        return ZP_ERR_INVALID;
    *out = NULL;
    if (index >= c->n) {
        zpi_fmt(err, errcap, "shard index %u out of range (dataset has %zu shards)", index, c->n);
        return ZP_ERR_INVALID;
    }
    slot *s = &c->slots[index];
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (s->state == SLOT_READY) {
            if (s->pins == 0) {
                lru_unlink(c, index);
                c->unpinned_bytes -= s->size;
            }
            s->pins++;
            c->st.hits++;
            *out = &s->shard;
            pthread_mutex_unlock(&c->mu);
            return ZP_OK;
        }
        if (s->state == SLOT_EMPTY)
            break;
        pthread_cond_wait(&c->cv, &c->mu); /* LOADING by another thread */
    }
    s->state = SLOT_LOADING;
    c->st.misses++;
    pthread_mutex_unlock(&c->mu);

    const zpi_format *fmt = zpi_dataset_shard_format(c->ds, index);
    zpi_shard sh;
    memset(&sh, 0, sizeof sh);
    zp_status st = fmt->load(zpi_dataset_shard_path(c->ds, index),
                             zp_dataset_shard_name(c->ds, index), zpi_dataset_shard_limits(c->ds, index), &sh,
                             err, errcap);
    if (st == ZP_OK) {
        st = check_loaded(c->ds, index, &sh, err, errcap);
        if (st != ZP_OK)
            zpi_shard_free(&sh);
    }

    pthread_mutex_lock(&c->mu);
    if (st != ZP_OK) {
        s->state = SLOT_EMPTY;
        c->st.loads_failed++;
    } else {
        s->shard = sh;
        s->size = sh.data_len + ZPI_JSON_PADDING + (sh.n_records + 1) * sizeof(uint64_t);
        s->state = SLOT_READY;
        s->pins = 1;
        c->st.bytes_resident += s->size;
        *out = &s->shard;
        if (loaded)
            *loaded = 1;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return st;
}

void zpi_shard_cache_put(zpi_shard_cache *c, uint32_t index)
{
    if (!c || index >= c->n)
        return;
    pthread_mutex_lock(&c->mu);
    slot *s = &c->slots[index];
    if (s->state != SLOT_READY || s->pins == 0) {
        pthread_mutex_unlock(&c->mu); /* unbalanced put: ignore */
        return;
    }
    if (--s->pins == 0) {
        lru_push_front(c, index);
        c->unpinned_bytes += s->size;
    }
    /* Evict least recently used unpinned shards until within budget; free
     * each one's buffers outside the lock. */
    while (c->unpinned_bytes > c->budget && c->lru_tail >= 0) {
        int64_t v = c->lru_tail;
        slot *victim = &c->slots[v];
        lru_unlink(c, v);
        c->unpinned_bytes -= victim->size;
        c->st.bytes_resident -= victim->size;
        c->st.evictions++;
        zpi_shard dead = victim->shard;
        memset(&victim->shard, 0, sizeof victim->shard);
        victim->size = 0;
        victim->state = SLOT_EMPTY;
        pthread_mutex_unlock(&c->mu);
        zpi_shard_free(&dead);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
}

void zpi_shard_cache_stats_get(zpi_shard_cache *c, zpi_shard_cache_stats *st)
{
    if (!c || !st)
        return;
    pthread_mutex_lock(&c->mu);
    *st = c->st;
    pthread_mutex_unlock(&c->mu);
}
