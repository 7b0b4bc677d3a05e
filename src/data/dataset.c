/*
 * dataset.c - a dataset: the shard table. Each file is in the table once
 * (by device and inode); record counts come from a manifest, the index
 * store (index_store.c) or a load (indexing, here); the table gives
 * offsets, a fingerprint, hashes. Shards are added by dataset_add.c; the
 * manifest that describes the table is dataset_manifest.c.
 *
 * Ownership: the dataset owns its shard table and all strings in it; names
 * and paths handed out are borrowed until zp_dataset_destroy().
 * Thread safety: building (add/exclude/index/write_manifest/verify) is not
 * thread-safe; once built, the const accessors may be called from any thread
 * (they read only). The error is written by the building calls only.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "data/dataset_internal.h"
#include "data/dataset_table.h"
#include "base/error.h"
#include "io/fetcher.h"
#include "data/index_store.h"
#include "data/manifest.h"
#include "formats/reader.h"
#include "formats/unfinished.h"
#include "io/storage.h"
#include "base/util.h"

/* ------------------------------------------------------------ errors, log */

void zpi_dataset_log(const zp_dataset *ds, zp_log_level lvl, const char *fmt, ...)
{
    if (!ds)
        return;
    va_list ap;
    va_start(ap, fmt);
    zpi_vlog(ds->cfg.log, ds->cfg.log_user, lvl, fmt, ap);
    va_end(ap);
}

/* Keep the error on the handle. */
zp_status zpi_ds_fail(zp_dataset *ds, zp_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zpi_err_vset(&ds->err, st, fmt, ap);
    va_end(ap);
    return st;
}


/* ------------------------------------------------------------ create */

void zp_dataset_config_init(zp_dataset_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->max_record_bytes = DEFAULT_MAX_RECORD;
    cfg->max_shard_bytes = DEFAULT_MAX_SHARD;
    zp_storage_config_init(&cfg->storage);
}

/* Storage settings left 0 take their defaults (0 means "default", as
 * everywhere in the config structs; a config from before the storage
 * settings existed is all zero there). */
static void storage_defaults(zp_storage_config *c)
{
    zp_storage_config d;
    zp_storage_config_init(&d);
    if (!c->cache_limit_bytes)
        c->cache_limit_bytes = d.cache_limit_bytes;
    if (c->connect_timeout_s <= 0)
        c->connect_timeout_s = d.connect_timeout_s;
    if (!c->low_speed_bytes)
        c->low_speed_bytes = d.low_speed_bytes;
    if (c->low_speed_time_s <= 0)
        c->low_speed_time_s = d.low_speed_time_s;
    if (c->retry_base_s <= 0)
        c->retry_base_s = d.retry_base_s;
    if (c->retry_max_s <= 0)
        c->retry_max_s = d.retry_max_s;
    if (c->lease_s <= 0)
        c->lease_s = d.lease_s;
}

/* The settings of ds->cfg that can be wrong; the error names the setting
 * and its value. */
static zp_status check_config(zp_dataset *ds)
{
    /* a shard is held in one buffer with the parser's padding after it */
    const size_t max_shard = SIZE_MAX / 2;
    if (ds->cfg.max_shard_bytes > max_shard)
        return zpi_ds_fail(ds, ZP_ERR_INVALID, "max_shard_bytes = %zu: at most %zu", ds->cfg.max_shard_bytes,
                    max_shard);
    if (ds->store_dir) {
        struct stat sb;
        if (stat(ds->store_dir, &sb) != 0) {
            int e = errno;
            return zpi_ds_fail(ds, ZP_ERR_INVALID, "index_store_dir = '%s': cannot use the folder: %s",
                        ds->store_dir, strerror(e));
        }
        if (!S_ISDIR(sb.st_mode))
            return zpi_ds_fail(ds, ZP_ERR_INVALID, "index_store_dir = '%s': not a folder",
                        ds->store_dir);
    }
    return ZP_OK;
}

zp_status zp_dataset_create(const zp_dataset_config *cfg, zp_dataset **out)
{
    if (!out)
        return ZP_ERR_INVALID;
    *out = NULL;
    zp_dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        return ZP_ERR_NOMEM;
    *out = ds; /* on failure: the handle that holds the error */
    if (cfg)
        ds->cfg = *cfg;
    else
        zp_dataset_config_init(&ds->cfg);
    /* 0 means "default", as everywhere in the config structs. */
    if (ds->cfg.max_record_bytes == 0)
        ds->cfg.max_record_bytes = DEFAULT_MAX_RECORD;
    if (ds->cfg.max_shard_bytes == 0)
        ds->cfg.max_shard_bytes = DEFAULT_MAX_SHARD;
    ds->lim.max_record_bytes = ds->cfg.max_record_bytes;
    ds->lim.max_shard_bytes = ds->cfg.max_shard_bytes;
    ds->lim.allow_empty = ds->cfg.allow_empty_shards != 0;
    ds->lim.h5_fapl = ds->cfg.h5_fapl;
    ds->lim.h5_fapl_user = ds->cfg.h5_fapl_user;
    const char *dir = ds->cfg.index_store_dir;
    ds->cfg.index_store_dir = NULL;
    zp_status st = ZP_OK;
    if (dir && *dir && !(ds->store_dir = zpi_strdup(dir)))
        st = zpi_err_set(&ds->err, ZP_ERR_NOMEM, "out of memory creating a dataset");
    ds->cfg.index_store_dir = ds->store_dir;
    if (st == ZP_OK)
        st = check_config(ds);
    if (st == ZP_OK && ds->store_dir &&
        zpi_index_store_create(ds->store_dir, ds->cfg.log, ds->cfg.log_user, &ds->store) != ZP_OK)
        st = zpi_err_set(&ds->err, ZP_ERR_NOMEM, "out of memory creating a dataset");
    if (st == ZP_OK) {
        storage_defaults(&ds->cfg.storage);
        st = zpi_storage_create(&ds->cfg.storage, ds->cfg.log, ds->cfg.log_user, &ds->storage,
                                &ds->err);
    }
    /* the storage copied the strings: none is borrowed past create */
    ds->cfg.storage.cache_dir = ds->cfg.storage.ca_file = NULL;
    ds->cfg.storage.s3_endpoint = ds->cfg.storage.s3_region = NULL;
    ds->create_status = st;
    return st;
}

static void shard_release(shard *s)
{
    free(s->name);
    free(s->path);
    free(s->identity);
    free(s->tokenizer);
}

const char *zpi_dataset_shard_tokenizer(const zp_dataset *ds, size_t i)
{
    return ds && i < ds->n ? ds->shards[i].tokenizer : NULL;
}

void zp_dataset_destroy(zp_dataset *ds)
{
    if (!ds)
        return;
    for (size_t i = 0; i < ds->n; i++)
        shard_release(&ds->shards[i]);
    free(ds->shards);
    free(ds->buckets);
    zpi_fetcher_destroy(ds->fetcher);
    zpi_storage_destroy(ds->storage);
    zpi_index_store_destroy(ds->store);
    free(ds->store_dir);
    free(ds->ex_path);
    free(ds->ok_dir);
    free(ds);
}

/* ------------------------------------------------------------ the table */

/* What a load of s accepts and expects (kept up to date with s). */
void zpi_ds_shard_sync(const zp_dataset *ds, shard *s)
{
    s->lim = ds->lim;
    s->lim.has_records = s->samples != UNKNOWN;
    s->lim.expect_records = s->samples;
    s->lim.records_from_manifest = s->from_manifest;
    s->lim.has_xxh64 = s->has_hash;
    s->lim.expect_xxh64 = s->xxh64;
    s->lim.has_bytes = s->trusted;
    s->lim.expect_bytes = s->bytes;
}

static size_t bucket_of(const zp_dataset *ds, dev_t dev, ino_t ino)
{
    return (size_t)zpi_hash2((uint64_t)dev, (uint64_t)ino) & (ds->nbuckets - 1);
}

/* Rebuild the identity hash with at least 2 buckets per shard. Shards go in
 * by index, so every chain runs from the newest shard to the oldest (which
 * lets end_add drop the newest shards from their chains' heads). */
static int rehash(zp_dataset *ds, size_t want)
{
    size_t nb = 64;
    while (nb < 2 * want)
        nb *= 2;
    size_t *b = malloc(nb * sizeof *b);
    if (!b)
        return -1;
    for (size_t i = 0; i < nb; i++)
        b[i] = NONE;
    free(ds->buckets);
    ds->buckets = b;
    ds->nbuckets = nb;
    for (size_t i = 0; i < ds->n; i++) {
        shard *s = &ds->shards[i];
        size_t h = bucket_of(ds, s->dev, s->ino);
        s->next = ds->buckets[h];
        ds->buckets[h] = i;
    }
    return 0;
}

/* " ('path')" when a shard's path differs from its name, for messages (a
 * URL redacted: no credentials, no query string). */
static void path_note(char *buf, size_t cap, const char *name, const char *path)
{
    char red[PATH_MAX];
    zpi_url_redact(path, red, sizeof red);
    if (strcmp(name, red) == 0)
        buf[0] = '\0';
    else
        zpi_fmt(buf, cap, " ('%s')", red);
}

/* The length of path's folder part with its final '/' (0: none). */
static size_t dir_len(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? (size_t)(slash - path) + 1 : 0;
}

/* 1 when path's folder is the one last found without the unfinished marker
 * (the shards of a folder come one after another: one check each). */
static int in_ok_dir(const zp_dataset *ds, const char *path)
{
    size_t n = dir_len(path);
    return ds->ok_dir && strlen(ds->ok_dir) == n && strncmp(ds->ok_dir, path, n) == 0;
}

static void remember_ok_dir(zp_dataset *ds, const char *path)
{
    size_t n = dir_len(path);
    char *d = malloc(n + 1);
    if (!d)
        return; /* checked again next time */
    memcpy(d, path, n);
    d[n] = '\0';
    free(ds->ok_dir);
    ds->ok_dir = d;
}

/* Append a shard for the file described by sb; takes ownership of name and
 * path (freed on failure). The same file twice (by device and inode: two
 * spellings, a hard link, a symlink) is an error naming both. */
zp_status zpi_ds_push_shard(zp_dataset *ds, char *name, char *path, const zpi_format *fmt,
                            const struct stat *sb, shard **out)
{
    zp_status st = ZP_OK;
    /* a remote shard: its identity (scheme, host, path) stands for the file's */
    char *identity = NULL;
    struct stat rsb;
    if (path && zpi_is_url(path)) {
        if (fmt && strcmp(fmt->name, "megatron") == 0) {
            st = zpi_ds_fail(ds, ZP_ERR_UNSUPPORTED,
                      "'%s': Megatron .bin/.idx pairs are read from a file system (a pair is "
                      "two files, memory-mapped): copy them to a shared or local disk",
                      name);
            goto fail;
        }
        if (!(identity = zpi_url_identity(path))) {
            st = zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory adding a shard");
            goto fail;
        }
        memset(&rsb, 0, sizeof rsb);
        rsb.st_dev = REMOTE_DEV;
        rsb.st_ino = (ino_t)XXH64(identity, strlen(identity), 0);
        rsb.st_size = sb->st_size;
        sb = &rsb;
    } else if (path && sb->st_dev != TRUSTED_DEV && !in_ok_dir(ds, path)) {
        if (zpi_unfinished_check(path, name, &ds->err) != ZP_OK) {
            st = ds->err.code; /* a folder that zephon preprocess has not finished */
            goto fail;
        }
        remember_ok_dir(ds, path);
    }
    if (!name || !path) {
        st = zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory adding a shard");
        goto fail;
    }
    if (ds->nbuckets < 2 * (ds->n + 1) && rehash(ds, ds->n + 1) != 0) {
        st = zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory adding shard '%s'", name);
        goto fail;
    }
    size_t h = bucket_of(ds, sb->st_dev, sb->st_ino);
    for (size_t i = ds->buckets[h]; i != NONE; i = ds->shards[i].next) {
        const shard *o = &ds->shards[i];
        if (o->dev == sb->st_dev && o->ino == sb->st_ino &&
            (!identity || (o->identity && strcmp(o->identity, identity) == 0)) &&
            (sb->st_dev != TRUSTED_DEV || strcmp(o->path, path) == 0)) {
            char pa[PATH_MAX + 8], pb[PATH_MAX + 8];
            path_note(pa, sizeof pa, name, path);
            path_note(pb, sizeof pb, o->name, o->path);
            st = zpi_ds_fail(ds, ZP_ERR_INVALID,
                      "shard '%s'%s is the same file as shard '%s'%s (shard %zu): a dataset "
                      "reads each file once; name it once (overlapping globs, a glob that also "
                      "matches a manifest, or a link?)",
                      name, pa, o->name, pb, i);
            goto fail;
        }
    }
    if (zpi_grow((void **)&ds->shards, &ds->cap, ds->n + 1, sizeof *ds->shards) != 0) {
        st = zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory adding shard '%s'", name);
        goto fail;
    }
    shard *s = &ds->shards[ds->n];
    memset(s, 0, sizeof *s);
    s->name = name;
    s->path = path;
    s->fmt = fmt;
    s->bytes = (uint64_t)sb->st_size;
    s->samples = UNKNOWN;
    s->offset = UNKNOWN;
    s->dev = sb->st_dev;
    s->ino = sb->st_ino;
    s->identity = identity;
    s->next = ds->buckets[h];
    ds->buckets[h] = ds->n;
    zpi_ds_shard_sync(ds, s);
    ds->n++;
    *out = s;
    return ZP_OK;
fail:
    free(identity);
    free(name);
    free(path);
    return st;
}

/* Drop the newest shard (the head of its identity chain). */
void zpi_ds_pop_shard(zp_dataset *ds)
{
    shard *s = &ds->shards[--ds->n];
    ds->buckets[bucket_of(ds, s->dev, s->ino)] = s->next;
    shard_release(s);
}

void zpi_ds_update_offsets(zp_dataset *ds)
{
    uint64_t off = 0;
    for (size_t i = 0; i < ds->n; i++) {
        ds->shards[i].offset = off;
        if (off != UNKNOWN)
            off = ds->shards[i].samples == UNKNOWN ? UNKNOWN : off + ds->shards[i].samples;
    }
}

/* 1 when sb is the file excluded by zp_dataset_exclude(). */
int zpi_ds_is_excluded(const zp_dataset *ds, const struct stat *sb)
{
    return ds->has_exclude && sb->st_dev == ds->ex_dev && sb->st_ino == ds->ex_ino;
}

zp_status zpi_dataset_fetch_table(const zp_dataset *ds, zpi_fetch_shard **out, size_t *n,
                                  size_t *n_remote, zpi_err *err)
{
    *out = NULL;
    *n = ds->n;
    *n_remote = 0;
    zpi_fetch_shard *t = calloc(ds->n ? ds->n : 1, sizeof *t);
    if (!t)
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for the shard table");
    for (size_t i = 0; i < ds->n; i++) {
        const shard *s = &ds->shards[i];
        t[i] = (zpi_fetch_shard){.spec = s->path, .name = s->name, .bytes = s->bytes,
                                 .has_xxh64 = s->lim.has_xxh64, .xxh64 = s->lim.expect_xxh64};
        *n_remote += s->identity != NULL;
    }
    *out = t;
    return ZP_OK;
}

/* The dataset's own fetcher, for index and verify (made when first needed,
 * and again when shards were added since). */
static zp_status dataset_fetcher(zp_dataset *ds)
{
    if (ds->fetcher && ds->fetcher_n == ds->n)
        return ZP_OK;
    zpi_fetcher_destroy(ds->fetcher);
    ds->fetcher = NULL;
    zpi_fetcher_config fc = {.storage = ds->storage, .parallelism = 4, .demand_slots = 1};
    size_t remote;
    zpi_fetch_shard *tab;
    ZPI_FORWARD_IF_ERR(zpi_dataset_fetch_table(ds, &tab, &fc.n_shards, &remote, &ds->err));
    fc.shards = tab;
    fc.log = zpi_dataset_log_fn(ds, &fc.log_user);
    zp_status st = zpi_fetcher_create(&fc, &ds->fetcher, &ds->err);
    free(tab);
    ds->fetcher_n = ds->n;
    return st;
}

/* The file to read for shard s: its path, or for a remote shard its file in
 * the shard cache on disk (downloaded when needed), pinned in *pin until
 * zpi_fetcher_release(ds->fetcher, pin, ...). */
static zp_status shard_file(zp_dataset *ds, const shard *s, zpi_fetch_pin *pin, const char **path)
{
    memset(pin, 0, sizeof *pin);
    *path = s->path;
    if (!s->identity)
        return ZP_OK;
    ZPI_FORWARD_IF_ERR(dataset_fetcher(ds));
    ZPI_FORWARD_IF_ERR(
        zpi_fetcher_acquire(ds->fetcher, (size_t)(s - ds->shards), pin, &ds->err));
    *path = pin->path;
    return ZP_OK;
}

/* ------------------------------------------------------------ index */

/* Shard s has n records, and `bytes` bytes as it was just read. */
static void set_count(zp_dataset *ds, shard *s, uint64_t bytes, uint64_t n)
{
    if (bytes != s->bytes) {
        zpi_dataset_log(ds, ZP_LOG_WARN,
                        "shard '%s' changed size since it was added (%llu -> %llu bytes)",
                        s->name, (unsigned long long)s->bytes, (unsigned long long)bytes);
        s->bytes = bytes;
    }
    s->samples = n;
    zpi_ds_shard_sync(ds, s);
}

/* Shard s's count from its metadata alone (zpi_format.count: a Parquet
 * footer), local or remote (a range read of the object's last bytes: no
 * download). Sets *done when the format counts so. */
static zp_status count_from_metadata(zp_dataset *ds, shard *s, int *done)
{
    *done = 0;
    zpi_err err;
    uint64_t n = 0, bytes = 0;
    zp_status st;
    if (!s->identity) {
        if (!s->fmt->count)
            return ZP_OK;
        st = s->fmt->count(s->path, s->name, &s->lim, &n, &bytes, &err);
        if (st != ZP_OK)
            return zpi_ds_fail(ds, st, "%s", err.msg);
    } else {
        if (!s->fmt->count_tail)
            return ZP_OK;
        zpi_object *o;
        zpi_object_info info;
        if ((st = zpi_object_open(ds->storage, s->path, &o, &info, &err)) != ZP_OK)
            return zpi_ds_fail(ds, st, "shard '%s': %s", s->name, err.msg);
        size_t want = info.size < 65536 ? (size_t)info.size : 65536, need = 0;
        char *tail = NULL;
        for (int pass = 0; pass < 2; pass++) {
            char *t = realloc(tail, want ? want : 1);
            if (!t) {
                st = zpi_err_set(&err, ZP_ERR_NOMEM, "out of memory");
                break;
            }
            tail = t;
            size_t got = 0;
            st = zpi_object_read(o, info.size - want, tail, want, &got, &err);
            if (st == ZP_OK && got != want)
                st = zpi_err_set(&err, ZP_ERR_IO, "short read of the last %zu bytes", want);
            if (st == ZP_OK)
                st = s->fmt->count_tail(tail, want, info.size, s->name, &n, &need, &err);
            if (st != ZP_END)
                break;
            if (need <= want || need > info.size) {
                st = zpi_err_set(&err, ZP_ERR_FORMAT, "its footer does not fit the file");
                break;
            }
            want = need;
        }
        free(tail);
        zpi_object_close(o);
        if (st != ZP_OK)
            return zpi_ds_fail(ds, st, "shard '%s': %s", s->name, err.msg);
        bytes = info.size;
    }
    set_count(ds, s, bytes, n);
    zpi_dataset_log(ds, ZP_LOG_DEBUG, "shard '%s': %llu records (from its metadata)", s->name,
                    (unsigned long long)n);
    *done = 1;
    return ZP_OK;
}

/* Count the records of shard s: from its metadata when the format has a
 * count there, from the index store when it has them, else by loading the
 * shard (and then keeping the count in the store). */
static zp_status index_shard(zp_dataset *ds, shard *s, zpi_index_pass *pass)
{
    int counted;
    ZPI_FORWARD_IF_ERR(count_from_metadata(ds, s, &counted));
    if (counted)
        return ZP_OK;
    zpi_index_key k;
    int use_store = ds->store && zpi_index_key_init(ds->store, s->path, s->fmt, &k) == 0;
    uint64_t n;
    if (use_store && zpi_index_store_lookup(ds->store, &k, s->name, &s->lim, &n, pass)) {
        set_count(ds, s, k.bytes, n);
        pass->hits++;
        zpi_dataset_log(ds, ZP_LOG_DEBUG, "shard '%s': %llu records (index store)", s->name,
                        (unsigned long long)n);
        zpi_index_key_free(&k);
        return ZP_OK;
    }
    if (use_store)
        pass->misses++;
    zpi_shard sh;
    zpi_err err;
    double t0 = zpi_now();
    zpi_fetch_pin pin;
    const char *path;
    ZPI_FORWARD_IF_ERR(shard_file(ds, s, &pin, &path));
    zp_status st = s->identity ? ZP_OK : zpi_load_check_size(&s->lim, s->name, path, &err);
    if (st == ZP_OK)
        st = s->fmt->load(path, s->name, &s->lim, &sh, &err);
    if (s->identity)
        zpi_fetcher_release(ds->fetcher, &pin, st == ZP_ERR_FORMAT && s->has_hash);
    /* a pre-tokenized HDF5 shard's record of its tokenizer (attribute
     * zephon_tokenizer), for zp_pipeline_tokenize's check */
    if (st == ZP_OK && sh.rd && sh.rd->tokenizer && !s->tokenizer &&
        !(s->tokenizer = zpi_strdup(sh.rd->tokenizer))) {
        zpi_shard_free(&sh);
        st = zpi_err_set(&err, ZP_ERR_NOMEM, "out of memory");
    }
    if (st == ZP_OK) {
        set_count(ds, s, sh.file_bytes, sh.n_records);
        zpi_dataset_log(ds, ZP_LOG_DEBUG, "indexed shard '%s': %llu records in %.3f s", s->name,
                        (unsigned long long)s->samples, zpi_now() - t0);
        if (use_store)
            zpi_index_store_save(ds->store, &k, s->path, s->name, &sh, pass);
        zpi_shard_free(&sh);
    }
    if (use_store)
        zpi_index_key_free(&k);
    return st == ZP_OK ? ZP_OK : zpi_ds_fail(ds, st, "%s", err.msg);
}

zp_status zpi_ds_index_all(zp_dataset *ds)
{
    zpi_index_pass pass = {0, 0, 0};
    /* remote shards to count: their downloads start together */
    for (size_t i = 0; i < ds->n; i++) {
        if (ds->shards[i].samples != UNKNOWN || !ds->shards[i].identity ||
            ds->shards[i].fmt->count_tail)
            continue;
        ZPI_FORWARD_IF_ERR(dataset_fetcher(ds));
        zpi_fetcher_prefetch(ds->fetcher, i);
    }
    for (size_t i = 0; i < ds->n; i++) {
        if (ds->shards[i].samples != UNKNOWN)
            continue;
        zp_status st = index_shard(ds, &ds->shards[i], &pass);
        if (st != ZP_OK)
            return st;
    }
    if (pass.hits + pass.misses)
        zpi_dataset_log(ds, ZP_LOG_INFO, "index store '%s': %zu of %zu shards from the store",
                        ds->store_dir, pass.hits, pass.hits + pass.misses);
    zpi_ds_update_offsets(ds);
    return ZP_OK;
}

zp_status zp_dataset_index(zp_dataset *ds)
{
    RETURN_IF_UNUSABLE(ds);
    return zpi_ds_index_all(ds);
}

/* ------------------------------------------------------------ hashing */

zp_status zpi_ds_hash_file(zp_dataset *ds, const shard *s, uint64_t *out)
{
    zpi_fetch_pin pin;
    const char *path;
    ZPI_FORWARD_IF_ERR(shard_file(ds, s, &pin, &path));
    zp_status st = ZP_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        st = zpi_ds_fail(ds, ZP_ERR_IO, "shard '%s': cannot open '%s': %s", s->name, path, strerror(e));
        if (s->identity)
            zpi_fetcher_release(ds->fetcher, &pin, 0);
        return st;
    }
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    uint64_t off = 0;
    int rc = zpi_xxh64_fd(fd, out, &off);
    if (rc == ENOMEM)
        st = zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory hashing shard '%s'", s->name);
    else if (rc)
        st = zpi_ds_fail(ds, ZP_ERR_IO, "shard '%s': read error at byte %llu: %s", s->name,
                  (unsigned long long)off, strerror(rc));
    close(fd);
    if (s->identity)
        zpi_fetcher_release(ds->fetcher, &pin, 0);
    return st;
}

static zp_status verify_all(zp_dataset *ds)
{
    for (size_t i = 0; i < ds->n; i++) {
        const shard *s = &ds->shards[i];
        if (!s->has_hash)
            continue;
        uint64_t h;
        zp_status st = zpi_ds_hash_file(ds, s, &h);
        if (st != ZP_OK)
            return st;
        char red[PATH_MAX];
        zpi_url_redact(s->path, red, sizeof red);
        if (h != s->xxh64)
            return zpi_ds_fail(ds, ZP_ERR_FORMAT,
                        "shard '%s': content hash mismatch: the manifest says xxh64 %016llx, "
                        "'%s' has %016llx",
                        s->name, (unsigned long long)s->xxh64, red, (unsigned long long)h);
    }
    return ZP_OK;
}

zp_status zp_dataset_verify(zp_dataset *ds)
{
    RETURN_IF_UNUSABLE(ds);
    return verify_all(ds);
}

/* ------------------------------------------------------------ accessors */

size_t zp_dataset_num_shards(const zp_dataset *ds) { return ds ? ds->n : 0; }

uint64_t zp_dataset_num_samples(const zp_dataset *ds)
{
    if (!ds)
        return 0;
    uint64_t total = 0;
    for (size_t i = 0; i < ds->n; i++) {
        if (ds->shards[i].samples == UNKNOWN)
            return UNKNOWN;
        total += ds->shards[i].samples;
    }
    return total;
}

const char *zp_dataset_shard_name(const zp_dataset *ds, size_t i)
{
    return ds && i < ds->n ? ds->shards[i].name : NULL;
}

uint64_t zp_dataset_shard_samples(const zp_dataset *ds, size_t i)
{
    return ds && i < ds->n ? ds->shards[i].samples : UNKNOWN;
}

uint64_t zp_dataset_shard_bytes(const zp_dataset *ds, size_t i)
{
    return ds && i < ds->n ? ds->shards[i].bytes : 0;
}

uint64_t zp_dataset_shard_segments(const zp_dataset *ds, size_t i, uint64_t *per)
{
    if (per)
        *per = 0;
    if (!ds || i >= ds->n || ds->shards[i].samples == UNKNOWN)
        return 0;
    const shard *s = &ds->shards[i];
    uint64_t n = s->samples, nseg = 1;
    int plain = s->fmt->seg == ZPI_FMT_SEG_PLAIN;
    if (s->fmt->seg != ZPI_FMT_NO_SEGMENTS) {
        uint64_t sb = ds->cfg.segment_bytes ? ds->cfg.segment_bytes
                                            : plain ? DEFAULT_SEGMENT_PLAIN
                                                    : DEFAULT_SEGMENT_ZST;
        if (s->bytes > sb)
            nseg = (s->bytes + sb - 1) / sb;
        if (nseg > n)
            nseg = n ? n : 1;
    }
    uint64_t p = n ? (n + nseg - 1) / nseg : 1;
    if (per)
        *per = p;
    return n ? (n + p - 1) / p : 1;
}

static void put_u64(XXH64_state_t *h, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i)); /* little-endian on every host */
    XXH64_update(h, b, sizeof b);
}

static void put_str(XXH64_state_t *h, const char *s)
{
    size_t n = strlen(s);
    put_u64(h, n);
    XXH64_update(h, s, n);
}

/* A shard's name as the fingerprint sees it: a URL whole (it is redacted),
 * a path or a manifest's name without its folders, so that every spelling
 * of the same files (relative, absolute, "a/../a", another working
 * folder, a copy in another folder) has one fingerprint; spelled = 1: the
 * name whole, as every version before this one hashed it. */
static const char *fp_name(const char *name, int spelled)
{
    if (spelled || strstr(name, "://"))
        return name;
    const char *sl = strrchr(name, '/');
    return sl ? sl + 1 : name;
}

static uint64_t fingerprint(const zp_dataset *ds, int spelled)
{
    if (!ds)
        return 0;
    XXH64_state_t *h = XXH64_createState();
    if (!h)
        return 0;
    XXH64_reset(h, 0x7a6570686f6e3031ULL); /* "zephon01" */
    put_u64(h, ds->n);
    for (size_t i = 0; i < ds->n; i++) {
        const shard *s = &ds->shards[i];
        put_str(h, fp_name(s->name, spelled));
        put_str(h, s->fmt->name);
        put_u64(h, s->bytes);
        put_u64(h, s->samples);
    }
    /* Shards of several segments change the plan (docs/datasets.md
     * "Segments"): their segments are part of the description. A dataset
     * whose shards are one segment each keeps the fingerprint of earlier
     * versions (and its plan); one with more is refused by a state saved
     * before segments (whose plan differs), not resumed in another order. */
    int segmented = 0;
    for (size_t i = 0; i < ds->n && !segmented; i++)
        segmented = zp_dataset_shard_segments(ds, i, NULL) > 1;
    if (segmented) {
        put_u64(h, 0x7365676d656e7473ULL); /* "segments" */
        for (size_t i = 0; i < ds->n; i++) {
            uint64_t per;
            put_u64(h, zp_dataset_shard_segments(ds, i, &per));
            put_u64(h, per);
        }
    }
    uint64_t r = XXH64_digest(h);
    XXH64_freeState(h);
    return r;
}

uint64_t zp_dataset_fingerprint(const zp_dataset *ds) { return fingerprint(ds, 0); }

uint64_t zpi_dataset_fingerprint_spelled(const zp_dataset *ds) { return fingerprint(ds, 1); }

const char *zp_dataset_errmsg(const zp_dataset *ds) { return ds ? zpi_err_msg(&ds->err) : ""; }

void zp_dataset_spec_redact(const char *spec, char *out, size_t cap)
{
    zpi_url_redact(spec, out, cap);
}

/* ------------------------------------------------------------ internal */

zpi_storage *zpi_dataset_storage(const zp_dataset *ds) { return ds->storage; }

zp_log_fn zpi_dataset_log_fn(const zp_dataset *ds, void **user)
{
    *user = ds->cfg.log_user;
    return ds->cfg.log;
}

const char *zpi_dataset_shard_path(const zp_dataset *ds, size_t i)
{
    return ds && i < ds->n ? ds->shards[i].path : NULL;
}

const zpi_format *zpi_dataset_shard_format(const zp_dataset *ds, size_t i)
{
    return ds && i < ds->n ? ds->shards[i].fmt : NULL;
}

uint64_t zpi_dataset_shard_offset(const zp_dataset *ds, size_t i)
{
    return ds && i < ds->n ? ds->shards[i].offset : UNKNOWN;
}

const zpi_load_limits *zpi_dataset_shard_limits(const zp_dataset *ds, size_t i)
{
    return ds && i < ds->n ? &ds->shards[i].lim : NULL;
}
