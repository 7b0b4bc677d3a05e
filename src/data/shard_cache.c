/*
 * shard_cache.c - the shard cache: decoded shards shared by a pipeline's
 * fetch and prefetch tasks.
 *
 * Each shard of the dataset has one slot: EMPTY, LOADING (one thread is
 * loading it; others wait on the condition variable) or READY (decoded,
 * with a pin count). Ready shards sit on a recency list (most recently used
 * first, pinned or not). When the unpinned ones exceed the budget, the
 * least recently used unpinned shards are evicted, except the first
 * `keep_shards` of the list: the working set of the current shuffle block,
 * which must stay decoded for the rest of the pass whatever its size (else
 * a shard larger than the budget would be decoded again for every chunk).
 * When the working set alone holds the cache above its budget, the cache
 * warns once, naming the size it needs (keep_shards, or the dataset's shard
 * count when smaller, times the largest shard loaded so far). A failed load leaves the slot
 * EMPTY: nothing about the failure is cached, the next get loads again.
 *
 * Buffers: the decode buffers of evicted shards are kept (at most
 * ZPI_SHARD_CACHE_SPARES) and given to the next loads, and every load reads
 * compressed bytes into a scratch buffer taken from a pool (one per
 * concurrent load), so that a pipeline in its steady state faults in no
 * fresh pages (glibc maps and unmaps each large block, and fresh pages cost
 * a fault per 4 KiB and the kernel's zeroing).
 *
 * Segments (docs/datasets.md "Segments"): the cache's unit is a segment
 * of a shard (zp_dataset_shard_segments); a shard of one segment is one
 * unit, loaded whole as before, and unit ids then equal shard ids. A shard
 * of several segments is read through a segment reader (formats/segment.h)
 * kept open between the loads of its segments and closed after its last
 * segment is loaded (or on a failed load); the loads of one shard's
 * segments run one at a time (the reader keeps a position), those of
 * different shards in parallel.
 *
 * Loads and frees of shard buffers run outside the lock.
 * Ownership: the cache owns every decoded shard; a pointer from
 * zpi_shard_cache_get() is borrowed until the matching put.
 * Thread safety: all functions but create/destroy may be called from any
 * thread concurrently. The dataset must outlive the cache and stay
 * unchanged.
 */
#include "data/shard_cache.h"

#include "io/fetcher.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/dataset_internal.h"
#include "base/util.h"
#include "formats/segment.h"

enum slot_state { SLOT_EMPTY, SLOT_LOADING, SLOT_READY };

typedef struct slot {
    enum slot_state state;
    uint32_t pins;
    zpi_shard shard;
    size_t size;             /* accounted bytes (data capacity + padding + index) */
    int64_t prev, next;      /* recency list links (slot indexes, -1 = none) while READY */
} slot;

/* A scratch buffer for compressed bytes, free in the pool or held by a load. */
typedef struct scratch_buf {
    char *p;
    size_t cap;
    struct scratch_buf *next;
} scratch_buf;

/* A shard of several segments: its open reader, held by one load at a time. */
typedef struct seg_src {
    zpi_seg_reader *rd; /* NULL: closed */
    zpi_fetch_pin pin;  /* a remote shard's cached file, pinned while rd is open */
    int busy;           /* a load is using rd */
    uint64_t next_seg;  /* the segment after the last one loaded (restarts are counted) */
    int verified;       /* the file's content hash was checked against the manifest's */
} seg_src;

typedef struct spare_buf {
    char *p;
    size_t cap; /* usable bytes, padding excluded */
} spare_buf;

struct zpi_shard_cache {
    const zp_dataset *ds;    /* borrowed */
    zpi_shard_cache_config cfg;
    size_t n;                /* units (segments) */
    size_t nshards;
    uint64_t *ubase;         /* [nshards + 1] first unit of each shard */
    uint64_t *per;           /* [nshards] records per segment */
    uint32_t *ushard;        /* [n] shard of each unit (NULL when units are shards) */
    seg_src **src;           /* [nshards] (NULL entries until used) */
    slot *slots;
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* signalled when a load ends (success or failure) */
    int64_t head, tail;      /* recency list of READY shards; head = most recently used */
    size_t n_ready;
    size_t unpinned_bytes;
    spare_buf *spare;        /* [max_spare] */
    int n_spare, max_spare;
    zpi_seg_kit *kits;       /* [max_spare] closed segment readers' buffers */
    int n_kits;
    scratch_buf *scratch_free;
    int warned;
    int last_pass;           /* zpi_shard_cache_last_pass(): keep the working set only */
    size_t largest_size;     /* the largest shard loaded so far (accounted bytes) */
    uint32_t largest;
    zpi_shard_cache_stats st;
};

size_t zpi_shard_cache_keep_shards(size_t block_shards, size_t fetch_parallelism, int prefetch)
{
    if (block_shards < 1)
        block_shards = 1;
    return block_shards * (prefetch ? 2 : 1) + fetch_parallelism;
}

size_t zpi_shard_cache_keep_units(const zp_dataset *ds, size_t block_shards,
                                  size_t fetch_parallelism, int prefetch)
{
    size_t keep = zpi_shard_cache_keep_shards(block_shards, fetch_parallelism, prefetch);
    const size_t n = zp_dataset_num_shards(ds);
    for (size_t i = 0; i < n; i++)
        if (zp_dataset_shard_segments(ds, i, NULL) > 1)
            return keep + (block_shards < 1 ? 1 : block_shards);
    return keep;
}

zp_status zpi_shard_cache_create(const zp_dataset *ds, const zpi_shard_cache_config *cfg,
                                 zpi_shard_cache **out)
{
    if (!out)
        return ZP_ERR_INVALID;
    *out = NULL;
    if (!ds || !cfg)
        return ZP_ERR_INVALID;
    zpi_shard_cache *c = calloc(1, sizeof *c);
    if (!c)
        return ZP_ERR_NOMEM;
    c->ds = ds;
    c->cfg = *cfg;
    c->nshards = zp_dataset_num_shards(ds);
    c->ubase = calloc(c->nshards + 1, sizeof *c->ubase);
    c->per = calloc(c->nshards ? c->nshards : 1, sizeof *c->per);
    c->src = calloc(c->nshards ? c->nshards : 1, sizeof *c->src);
    if (!c->ubase || !c->per || !c->src) {
        free(c->ubase);
        free(c->per);
        free(c->src);
        free(c);
        return ZP_ERR_NOMEM;
    }
    for (size_t i = 0; i < c->nshards; i++) {
        uint64_t per, ns = zp_dataset_shard_segments(ds, i, &per);
        if (ns == 0) { /* count unknown: one unit */
            ns = 1;
            per = UINT64_MAX;
        }
        c->per[i] = per;
        c->ubase[i + 1] = c->ubase[i] + ns;
    }
    c->n = (size_t)c->ubase[c->nshards];
    zp_status bad = c->ubase[c->nshards] > UINT32_MAX ? ZP_ERR_LIMIT : ZP_OK;
    if (bad == ZP_OK && c->n != c->nshards) {
        c->ushard = malloc(c->n * sizeof *c->ushard);
        if (!c->ushard)
            bad = ZP_ERR_NOMEM;
        for (size_t i = 0; c->ushard && i < c->nshards; i++)
            for (uint64_t u = c->ubase[i]; u < c->ubase[i + 1]; u++)
                c->ushard[u] = (uint32_t)i;
    }
    /* Segments are loaded and evicted a round at a time: keep as many
     * spare buffers as a block has shards, so that a round's loads decode
     * into the buffers of the round before (no fresh pages). */
    c->max_spare = ZPI_SHARD_CACHE_SPARES;
    if (c->n > c->nshards && (int)(cfg->keep_shards / 2) > c->max_spare)
        c->max_spare = cfg->keep_shards / 2 < 64 ? (int)(cfg->keep_shards / 2) : 64;
    c->spare = calloc((size_t)c->max_spare, sizeof *c->spare);
    c->kits = calloc((size_t)c->max_spare, sizeof *c->kits);
    if (!c->spare || !c->kits)
        bad = ZP_ERR_NOMEM;
    c->slots = bad == ZP_OK ? calloc(c->n ? c->n : 1, sizeof *c->slots) : NULL;
    if (!c->slots) {
        free(c->kits);
        free(c->spare);
        free(c->ushard);
        free(c->ubase);
        free(c->per);
        free(c->src);
        free(c);
        return bad == ZP_OK ? ZP_ERR_NOMEM : bad;
    }
    for (size_t i = 0; i < c->n; i++)
        c->slots[i].prev = c->slots[i].next = -1;
    c->head = c->tail = -1;
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
    for (int i = 0; i < c->n_spare; i++)
        free(c->spare[i].p);
    free(c->spare);
    for (int i = 0; i < c->n_kits; i++)
        zpi_seg_kit_free(&c->kits[i]);
    free(c->kits);
    while (c->scratch_free) {
        scratch_buf *b = c->scratch_free;
        c->scratch_free = b->next;
        free(b->p);
        free(b);
    }
    for (size_t i = 0; i < c->nshards; i++)
        if (c->src[i]) {
            zpi_seg_reader_close(c->src[i]->rd);
            zpi_fetcher_release(c->cfg.fetcher, &c->src[i]->pin, 0);
            free(c->src[i]);
        }
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c->slots);
    free(c->ushard);
    free(c->ubase);
    free(c->per);
    free(c->src);
    free(c);
}

uint32_t zpi_shard_cache_unit(const zpi_shard_cache *c, uint32_t shard, uint64_t record)
{
    if (!c || shard >= c->nshards)
        return UINT32_MAX;
    uint64_t u = c->ubase[shard] + (c->per[shard] == UINT64_MAX ? 0 : record / c->per[shard]);
    if (u >= c->ubase[shard + 1])
        u = c->ubase[shard + 1] - 1; /* a record out of range: its shard's last segment says so */
    return (uint32_t)u;
}

uint32_t zpi_shard_cache_unit_shard(const zpi_shard_cache *c, uint32_t unit)
{
    if (!c || unit >= c->n)
        return UINT32_MAX;
    return c->ushard ? c->ushard[unit] : unit;
}

size_t zpi_shard_cache_num_units(const zpi_shard_cache *c) { return c ? c->n : 0; }

/* ---- recency list (lock held) */

static void lru_unlink(zpi_shard_cache *c, int64_t i)
{
    slot *s = &c->slots[i];
    if (s->prev >= 0)
        c->slots[s->prev].next = s->next;
    else
        c->head = s->next;
    if (s->next >= 0)
        c->slots[s->next].prev = s->prev;
    else
        c->tail = s->prev;
    s->prev = s->next = -1;
}

static void lru_push_front(zpi_shard_cache *c, int64_t i)
{
    slot *s = &c->slots[i];
    s->prev = -1;
    s->next = c->head;
    if (c->head >= 0)
        c->slots[c->head].prev = i;
    c->head = i;
    if (c->tail < 0)
        c->tail = i;
}

static void lru_touch(zpi_shard_cache *c, int64_t i)
{
    if (c->head != i) {
        lru_unlink(c, i);
        lru_push_front(c, i);
    }
}

/* ---- buffers (lock held) */

/* Take the largest spare decode buffer into bufs (if any). */
static void spare_take_locked(zpi_shard_cache *c, zpi_load_bufs *bufs)
{
    if (c->n_spare == 0)
        return;
    int best = 0;
    for (int i = 1; i < c->n_spare; i++)
        if (c->spare[i].cap > c->spare[best].cap)
            best = i;
    bufs->data = c->spare[best].p;
    bufs->data_cap = c->spare[best].cap;
    c->st.bytes_resident -= c->spare[best].cap + ZPI_JSON_PADDING;
    c->spare[best] = c->spare[--c->n_spare];
}

/* Keep buffer p (cap usable bytes) as a spare; returns 0 when the spares are
 * full (the caller frees p). */
static int spare_keep_locked(zpi_shard_cache *c, char *p, size_t cap)
{
    if (!p || c->n_spare == c->max_spare)
        return 0;
    c->spare[c->n_spare].p = p;
    c->spare[c->n_spare].cap = cap;
    c->n_spare++;
    c->st.bytes_resident += cap + ZPI_JSON_PADDING;
    if (c->st.bytes_resident > c->st.bytes_peak)
        c->st.bytes_peak = c->st.bytes_resident;
    return 1;
}

static size_t shard_bytes(const zpi_shard *sh)
{
    return sh->data_cap + ZPI_JSON_PADDING + (sh->n_records + 1) * sizeof(uint64_t);
}

/* "64.0 MiB", "1.50 GiB" */
static void fmt_bytes(char *buf, size_t cap, size_t n)
{
    if (n >= ((size_t)1 << 30))
        zpi_fmt(buf, cap, "%.2f GiB", (double)n / (double)((size_t)1 << 30));
    else
        zpi_fmt(buf, cap, "%.1f MiB", (double)n / (double)((size_t)1 << 20));
}

static zp_status cache_get(zpi_shard_cache *c, uint32_t index, int wait, const zpi_shard **out,
                           int *loaded, zpi_err *err);

/* Closes a shard's segment reader (and unpins its cached file), keeping
 * its buffers for the next reader when the pool has room. */
static void src_close(zpi_shard_cache *c, seg_src *src)
{
    zpi_seg_kit kit;
    memset(&kit, 0, sizeof kit);
    zpi_seg_reader_retire(src->rd, &kit);
    pthread_mutex_lock(&c->mu);
    if (c->n_kits < c->max_spare) {
        c->kits[c->n_kits++] = kit;
        memset(&kit, 0, sizeof kit);
    }
    pthread_mutex_unlock(&c->mu);
    zpi_seg_kit_free(&kit);
    src->rd = NULL;
    zpi_fetcher_release(c->cfg.fetcher, &src->pin, 0);
    memset(&src->pin, 0, sizeof src->pin);
}

/* A shard read by segments has no load that reads all of its bytes, so
 * the manifest's content hash is checked by hashing the whole file when
 * its reader first opens (once per shard for the cache's life: XXH64 of
 * the stored bytes, streamed from the file, far faster than decoding it). */
static zp_status check_hash(const char *path, const char *name, const zpi_load_limits *lim,
                            seg_src *src, zpi_err *err)
{
    zp_status st = zpi_load_check_file_hash(lim, name, path, err);
    if (st == ZP_OK)
        src->verified = 1;
    return st;
}

/* Loads segment j of shard i (a shard of several segments) through its
 * reader, opened on first use; waits while another load uses it. */
static zp_status load_segment(zpi_shard_cache *c, uint32_t i, uint64_t j, zpi_load_bufs *bufs,
                              zpi_shard *sh, zpi_err *err)
{
    pthread_mutex_lock(&c->mu);
    while (c->src[i] && c->src[i]->busy)
        pthread_cond_wait(&c->cv, &c->mu);
    if (!c->src[i] && !(c->src[i] = calloc(1, sizeof *c->src[i]))) {
        pthread_mutex_unlock(&c->mu);
        return zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory",
                           zp_dataset_shard_name(c->ds, i));
    }
    seg_src *src = c->src[i];
    src->busy = 1;
    pthread_mutex_unlock(&c->mu);

    const char *name = zp_dataset_shard_name(c->ds, i);
    const zpi_load_limits *lim = zpi_dataset_shard_limits(c->ds, i);
    const zpi_format *fmt = zpi_dataset_shard_format(c->ds, i);
    const uint64_t nseg = c->ubase[i + 1] - c->ubase[i];
    zp_status st = ZP_OK;
    double wait_s = 0;
    int restart = 0;
    if (!src->rd) {
        const char *path = zpi_dataset_shard_path(c->ds, i);
        if (zpi_fetcher_is_remote(c->cfg.fetcher, i)) {
            double t0 = zpi_now();
            zpi_err fe;
            st = zpi_fetcher_acquire(c->cfg.fetcher, i, &src->pin, &fe);
            wait_s = zpi_now() - t0;
            if (st != ZP_OK)
                zpi_err_set(err, st, "%s", zpi_err_msg(&fe));
            else
                path = src->pin.path;
        }
        if (st == ZP_OK && lim->has_xxh64 && !src->verified)
            st = check_hash(path, name, lim, src, err);
        if (st == ZP_OK && fmt->seg == ZPI_FMT_SEG_PARQUET)
            st = zpi_seg_reader_open_parquet(path, name, lim, zp_dataset_shard_samples(c->ds, i),
                                             c->per[i], &src->rd, err);
        else if (st == ZP_OK) {
            zpi_seg_kit kit;
            memset(&kit, 0, sizeof kit);
            pthread_mutex_lock(&c->mu);
            if (c->n_kits > 0)
                kit = c->kits[--c->n_kits];
            pthread_mutex_unlock(&c->mu);
            st = zpi_seg_reader_open_kit(path, name,
                                         fmt->seg == ZPI_FMT_SEG_ZSTD   ? ZPI_SEG_ZSTD
                                         : fmt->seg == ZPI_FMT_SEG_GZIP ? ZPI_SEG_GZIP
                                                                        : ZPI_SEG_NONE, lim,
                                         zp_dataset_shard_samples(c->ds, i), c->per[i], &kit,
                                         &src->rd, err);
            zpi_seg_kit_free(&kit); /* what the reader did not take */
        }
        src->next_seg = 0;
    } else if (j < src->next_seg && zpi_seg_reader_kind(src->rd) == ZPI_SEG_STREAM) {
        restart = 1; /* behind the streaming decoder: decoded again from the start */
    }
    if (st == ZP_OK)
        st = zpi_seg_reader_load(src->rd, j, bufs, sh, err);
    sh->read_seconds += wait_s;
    if (st == ZP_OK)
        src->next_seg = j + 1;
    if (src->rd && (st != ZP_OK || j + 1 == nseg))
        src_close(c, src);
    else if (!src->rd && src->pin.remote)
        src_close(c, src);

    pthread_mutex_lock(&c->mu);
    src->busy = 0;
    c->st.segment_loads++;
    c->st.stream_restarts += (uint64_t)restart;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* Loads shard index into *sh (bufs: buffers the load may reuse, or NULL).
 * A remote shard is read from the shard cache on disk (downloaded first
 * when it is not there); a cached file found corrupt (its manifest hash)
 * is deleted and fetched once more. The load checks the record count and
 * the hash (zpi_load_check). */
static zp_status load_shard(zpi_shard_cache *c, uint32_t index, const zpi_format *fmt,
                            zpi_load_bufs *bufs, zpi_shard *sh, zpi_err *err)
{
    const char *path = zpi_dataset_shard_path(c->ds, index);
    const char *name = zp_dataset_shard_name(c->ds, index);
    const zpi_load_limits *lim = zpi_dataset_shard_limits(c->ds, index);
    zp_status st = ZP_OK;
    double wait_s = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        zpi_fetch_pin pin = {0};
        if (zpi_fetcher_is_remote(c->cfg.fetcher, index)) {
            double t0 = zpi_now();
            zpi_err fe;
            st = zpi_fetcher_acquire(c->cfg.fetcher, index, &pin, &fe);
            wait_s += zpi_now() - t0;
            if (st != ZP_OK) {
                zpi_err_set(err, st, "%s", zpi_err_msg(&fe));
                break;
            }
            path = pin.path;
        } else if ((st = zpi_load_check_size(lim, name, path, err)) != ZP_OK) {
            break; /* a shard of a trusted manifest, not as it says */
        }
        st = fmt->load_bufs ? fmt->load_bufs(path, name, lim, bufs, sh, err)
                            : fmt->load(path, name, lim, sh, err);
        int corrupt = st == ZP_ERR_FORMAT && pin.remote && lim->has_xxh64;
        /* deleted (fetched again) only when its bytes are not the manifest's */
        if (!zpi_fetcher_release(c->cfg.fetcher, &pin, corrupt))
            break;
    }
    sh->read_seconds += wait_s;
    return st;
}

zp_status zpi_shard_cache_get(zpi_shard_cache *c, uint32_t index, const zpi_shard **out,
                              int *loaded, zpi_err *err)
{
    return cache_get(c, index, 1, out, loaded, err);
}

zp_status zpi_shard_cache_get_unless_loading(zpi_shard_cache *c, uint32_t index,
                                             const zpi_shard **out, int *loaded, zpi_err *err)
{
    return cache_get(c, index, 0, out, loaded, err);
}

static zp_status cache_get(zpi_shard_cache *c, uint32_t index, int wait, const zpi_shard **out,
                           int *loaded, zpi_err *err)
{
    if (loaded)
        *loaded = 0;
    if (!c || !out)
        return ZP_ERR_INVALID;
    *out = NULL;
    if (index >= c->n) {
        return zpi_err_set(err, ZP_ERR_INVALID,
                           "shard unit %u out of range (dataset has %zu shard units)", index,
                           c->n);
    }
    slot *s = &c->slots[index];
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (s->state == SLOT_READY) {
            if (s->pins == 0)
                c->unpinned_bytes -= s->size;
            s->pins++;
            lru_touch(c, index);
            c->st.hits++;
            *out = &s->shard;
            pthread_mutex_unlock(&c->mu);
            return ZP_OK;
        }
        if (s->state == SLOT_EMPTY)
            break;
        if (!wait) { /* LOADING by another thread: the caller does something else */
            pthread_mutex_unlock(&c->mu);
            return ZP_OK;
        }
        pthread_cond_wait(&c->cv, &c->mu); /* LOADING by another thread */
    }
    s->state = SLOT_LOADING;
    c->st.misses++;
    /* Buffers for the load: a spare decode buffer and a scratch buffer. */
    zpi_load_bufs bufs;
    memset(&bufs, 0, sizeof bufs);
    scratch_buf *sb = c->scratch_free;
    if (sb)
        c->scratch_free = sb->next;
    const zpi_format *fmt = zpi_dataset_shard_format(c->ds, zpi_shard_cache_unit_shard(c, index));
    if (fmt->load_bufs)
        spare_take_locked(c, &bufs);
    pthread_mutex_unlock(&c->mu);

    if (!sb && fmt->load_bufs)
        sb = calloc(1, sizeof *sb); /* NULL: the load allocates its own */
    if (sb) {
        bufs.scratch = sb->p;
        bufs.scratch_cap = sb->cap;
    }
    const int had_spare = bufs.data != NULL;
    zpi_shard sh;
    memset(&sh, 0, sizeof sh);
    const uint32_t si = zpi_shard_cache_unit_shard(c, index);
    zp_status st = c->ubase[si + 1] - c->ubase[si] > 1
                       ? load_segment(c, si, index - c->ubase[si], &bufs, &sh, err)
                       : load_shard(c, si, fmt, sb ? &bufs : NULL, &sh, err);
    if (sb) {
        sb->p = bufs.scratch;
        sb->cap = bufs.scratch_cap;
    }

    pthread_mutex_lock(&c->mu);
    if (sb) {
        sb->next = c->scratch_free;
        c->scratch_free = sb;
    }
    char *unused = NULL;
    if (bufs.data && !spare_keep_locked(c, bufs.data, bufs.data_cap))
        unused = bufs.data; /* the load did not take the spare */
    if (st != ZP_OK) {
        s->state = SLOT_EMPTY;
        c->st.loads_failed++;
    } else {
        s->shard = sh;
        s->size = shard_bytes(&sh);
        s->state = SLOT_READY;
        s->pins = 1;
        lru_push_front(c, index);
        c->n_ready++;
        if (s->size > c->largest_size) {
            c->largest_size = s->size;
            c->largest = index;
        }
        c->st.bytes_resident += s->size;
        if (c->st.bytes_resident > c->st.bytes_peak)
            c->st.bytes_peak = c->st.bytes_resident;
        if (had_spare && !bufs.data)
            c->st.spare_reuses++;
        *out = &s->shard;
        if (loaded)
            *loaded = 1;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    free(unused);
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
    if (--s->pins == 0)
        c->unpinned_bytes += s->size;
    lru_touch(c, index);
    /* Evict least recently used unpinned shards until within budget, never
     * one of the working set (the first keep_shards of the list). A victim's
     * decode buffer becomes a spare when there is room; the rest of it is
     * freed outside the lock. */
    for (;;) {
        int64_t v = c->tail;
        size_t pos = c->n_ready; /* position of v from the head, plus one */
        while (v >= 0 && c->slots[v].pins > 0) {
            v = c->slots[v].prev;
            pos--;
        }
        if ((c->unpinned_bytes <= c->cfg.budget_bytes && !c->last_pass) || v < 0 ||
            pos <= c->cfg.keep_shards)
            break;
        slot *victim = &c->slots[v];
        lru_unlink(c, v);
        c->n_ready--;
        c->unpinned_bytes -= victim->size;
        c->st.bytes_resident -= victim->size;
        c->st.evictions++;
        zpi_shard dead = victim->shard;
        if (spare_keep_locked(c, dead.data, dead.data_cap))
            dead.data = NULL;
        memset(&victim->shard, 0, sizeof victim->shard);
        victim->size = 0;
        victim->state = SLOT_EMPTY;
        pthread_mutex_unlock(&c->mu);
        zpi_shard_free(&dead);
        pthread_mutex_lock(&c->mu);
    }
    /* Over budget with nothing left to evict but the working set (and
     * pinned shards): the budget is too small for this dataset and plan. */
    char msg[768];
    msg[0] = '\0';
    if (c->unpinned_bytes > c->cfg.budget_bytes && c->cfg.keep_shards && !c->warned) {
        c->warned = 1;
        size_t k = c->cfg.keep_shards < c->n ? c->cfg.keep_shards : c->n;
        size_t need = k * c->largest_size;
        if (c->cfg.log) {
            char b_budget[32], b_need[32], b_big[32];
            fmt_bytes(b_budget, sizeof b_budget, c->cfg.budget_bytes);
            fmt_bytes(b_need, sizeof b_need, need);
            fmt_bytes(b_big, sizeof b_big, c->largest_size);
            const char *big = zp_dataset_shard_name(c->ds, zpi_shard_cache_unit_shard(c, c->largest));
            if (c->n > c->nshards)
                zpi_fmt(msg, sizeof msg,
                        "shard cache too small: shard_cache_bytes is %s (%zu bytes), but a pass "
                        "reads from up to %zu shard segments at once and a segment of shard '%s' "
                        "is %s decoded; the cache keeps those segments beyond its budget, so "
                        "that each is decoded once per pass: it needs %s; set shard_cache_bytes "
                        "to at least %zu, or make segments smaller (segment_bytes)",
                        b_budget, c->cfg.budget_bytes, k, big, b_big, b_need, need);
            else
                zpi_fmt(msg, sizeof msg,
                        "shard cache too small: shard_cache_bytes is %s (%zu bytes), but a pass "
                        "reads from up to %zu shard%s at once and shard '%s' alone is %s "
                        "decoded; the cache keeps those shards beyond its budget, so that each "
                        "is decoded once per pass: it needs %s; set shard_cache_bytes to at "
                        "least %zu",
                        b_budget, c->cfg.budget_bytes, k, k == 1 ? "" : "s", big, b_big, b_need,
                        need);
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (msg[0])
        c->cfg.log(c->cfg.log_user, ZP_LOG_WARN, msg);
}

void zpi_shard_cache_last_pass(zpi_shard_cache *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->last_pass = 1;
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
