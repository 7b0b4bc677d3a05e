/*
 * dataset.c - a dataset: the shard table. Shards are added as paths, globs,
 * folders or manifests (files or bytes, read by manifest.c); each file is
 * in the table once (by device and inode); record counts come from a
 * manifest, the index store (index_store.c) or a load; the table gives
 * offsets, a fingerprint, and the entries of the manifest that describes it.
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
#include "base/error.h"
#include "io/fetcher.h"
#include "data/index_store.h"
#include "data/manifest.h"
#include "formats/unfinished.h"
#include "io/storage.h"
#include "base/util.h"

#define DEFAULT_MAX_RECORD ((size_t)16 << 20)
#define DEFAULT_MAX_SHARD ((size_t)2 << 30)
#define UNKNOWN UINT64_MAX
#define NONE SIZE_MAX
/* How messages name a manifest given as bytes. */
#define MANIFEST_IN_MEMORY "manifest (in memory)"
/* The manifest that makes a folder a described dataset. */
#define FOLDER_MANIFEST "manifest.json"
/* The device number that marks a remote shard's identity. */
#define REMOTE_DEV ((dev_t)-1)
/* Largest remote manifest read. */
#define MAX_REMOTE_MANIFEST ((size_t)256 << 20)

typedef struct shard {
    char *name;            /* as given, or the manifest's "name" (default "path"); owned */
    char *path;            /* path to open (resolved against the manifest's folder); owned */
    const zpi_format *fmt; /* static */
    uint64_t bytes;        /* size on disk */
    uint64_t samples;      /* record count, UNKNOWN until indexed */
    uint64_t offset;       /* first global sample id, UNKNOWN while a count before is unknown */
    uint64_t xxh64;        /* content hash when has_hash */
    int has_hash;
    int named;             /* name given by a manifest's "name" (not derived from the path) */
    int from_manifest;     /* samples came from a manifest */
    dev_t dev;             /* the file's identity: a file is in the table once */
    ino_t ino;             /* (a remote shard: REMOTE_DEV and the hash of its identity) */
    char *identity;        /* remote shard: zpi_url_identity() of its URL; owned. NULL: local */
    size_t next;           /* next shard in the same identity bucket, NONE at the end */
    zpi_load_limits lim;   /* what a load of this shard accepts and expects */
} shard;

struct zp_dataset {
    zp_dataset_config cfg;  /* cfg.index_store_dir points at store_dir */
    char *store_dir;        /* index store folder, NULL when off; owned */
    zpi_index_store *store; /* NULL when off */
    zpi_storage *storage;   /* backends and settings for remote shards and manifests */
    zpi_fetcher *fetcher;   /* remote shards read by index/verify; made when first needed */
    size_t fetcher_n;       /* the shards in its table (made again when more were added) */
    zp_status create_status; /* not ZP_OK: a failed create's error-only handle */
    zpi_load_limits lim;
    shard *shards;
    size_t n, cap;
    size_t *buckets; /* identity hash: first shard of each bucket, NONE when empty */
    size_t nbuckets; /* 0 or a power of two */
    /* zp_dataset_exclude(): a file never read as part of the dataset */
    int has_exclude;
    dev_t ex_dev;
    ino_t ex_ino;
    char *ex_path; /* owned */
    zpi_err err;
};

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

static zp_status fail(zp_dataset *ds, zp_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Keep the error on the handle. */
static zp_status fail(zp_dataset *ds, zp_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zpi_err_vset(&ds->err, st, fmt, ap);
    va_end(ap);
    return st;
}

/* A building call on the error-only handle of a failed create: its error. */
#define RETURN_IF_UNUSABLE(ds)                                                                     \
    do {                                                                                           \
        if (!(ds))                                                                                 \
            return ZP_ERR_INVALID;                                                                 \
        if ((ds)->create_status != ZP_OK)                                                          \
            return (ds)->create_status;                                                            \
    } while (0)

/* A note for a path that looks like a URL of a scheme not supported, or
 * like a supported scheme missing its "//" ("s3:/bucket/key"). */
static const char *url_note(const char *path)
{
    if (strstr(path, "://"))
        return " (URLs supported: http://, https://, s3://)";
    static const char *const schemes[] = {"http:", "https:", "s3:"};
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
        if (!strncasecmp(path, schemes[i], strlen(schemes[i])))
            return " (a URL starts with http://, https:// or s3://)";
    return "";
}

/* The shard file suffixes for messages, in one list: ".jsonl, .jsonl.zst,
 * .h5, .hdf5, .bin + .idx (Megatron)". Each is named only when the
 * format table of this build reads it (a build without HDF5 does not name
 * .h5); remote: only the formats read from a URL (not Megatron's pairs). */
static void shard_suffixes(char *buf, size_t cap, int remote)
{
    static const struct {
        const char *suffix, *note;
        int local_only;
    } known[] = {{".jsonl", "", 0},
                 {".jsonl.zst", "", 0},
                 {".h5", "", 0},
                 {".hdf5", "", 0},
                 {".bin", " + .idx (Megatron)", 1}};
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        char probe[32];
        zpi_fmt(probe, sizeof probe, "x%s", known[i].suffix);
        const zpi_format *f = zpi_format_for_path(probe);
        if (!f || strcmp(f->suffix, known[i].suffix) != 0 || (remote && known[i].local_only))
            continue;
        size_t len = strlen(buf);
        zpi_fmt(buf + len, cap - len, "%s%s%s", n++ ? ", " : "", known[i].suffix, known[i].note);
    }
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
        return fail(ds, ZP_ERR_INVALID, "max_shard_bytes = %zu: at most %zu", ds->cfg.max_shard_bytes,
                    max_shard);
    if (ds->store_dir) {
        struct stat sb;
        if (stat(ds->store_dir, &sb) != 0) {
            int e = errno;
            return fail(ds, ZP_ERR_INVALID, "index_store_dir = '%s': cannot use the folder: %s",
                        ds->store_dir, strerror(e));
        }
        if (!S_ISDIR(sb.st_mode))
            return fail(ds, ZP_ERR_INVALID, "index_store_dir = '%s': not a folder",
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
    free(ds);
}

/* ------------------------------------------------------------ the table */

static int has_glob_chars(const char *s) { return strpbrk(s, "*?[") != NULL; }

/* What a load of s accepts and expects (kept up to date with s). */
static void shard_sync(const zp_dataset *ds, shard *s)
{
    s->lim = ds->lim;
    s->lim.has_records = s->samples != UNKNOWN;
    s->lim.expect_records = s->samples;
    s->lim.records_from_manifest = s->from_manifest;
    s->lim.has_xxh64 = s->has_hash;
    s->lim.expect_xxh64 = s->xxh64;
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

/* Append a shard for the file described by sb; takes ownership of name and
 * path (freed on failure). The same file twice (by device and inode: two
 * spellings, a hard link, a symlink) is an error naming both. */
static zp_status push_shard(zp_dataset *ds, char *name, char *path, const zpi_format *fmt,
                            const struct stat *sb, shard **out)
{
    zp_status st = ZP_OK;
    /* a remote shard: its identity (scheme, host, path) stands for the file's */
    char *identity = NULL;
    struct stat rsb;
    if (path && zpi_is_url(path)) {
        if (fmt && strcmp(fmt->name, "megatron") == 0) {
            st = fail(ds, ZP_ERR_UNSUPPORTED,
                      "'%s': Megatron .bin/.idx pairs are read from a file system (a pair is "
                      "two files, memory-mapped): copy them to a shared or local disk",
                      name);
            goto fail;
        }
        if (!(identity = zpi_url_identity(path))) {
            st = fail(ds, ZP_ERR_NOMEM, "out of memory adding a shard");
            goto fail;
        }
        memset(&rsb, 0, sizeof rsb);
        rsb.st_dev = REMOTE_DEV;
        rsb.st_ino = (ino_t)XXH64(identity, strlen(identity), 0);
        rsb.st_size = sb->st_size;
        sb = &rsb;
    } else if (path && zpi_unfinished_check(path, name, &ds->err) != ZP_OK) {
        st = ds->err.code; /* a folder that zephon preprocess has not finished */
        goto fail;
    }
    if (!name || !path) {
        st = fail(ds, ZP_ERR_NOMEM, "out of memory adding a shard");
        goto fail;
    }
    if (ds->nbuckets < 2 * (ds->n + 1) && rehash(ds, ds->n + 1) != 0) {
        st = fail(ds, ZP_ERR_NOMEM, "out of memory adding shard '%s'", name);
        goto fail;
    }
    size_t h = bucket_of(ds, sb->st_dev, sb->st_ino);
    for (size_t i = ds->buckets[h]; i != NONE; i = ds->shards[i].next) {
        const shard *o = &ds->shards[i];
        if (o->dev == sb->st_dev && o->ino == sb->st_ino &&
            (!identity || (o->identity && strcmp(o->identity, identity) == 0))) {
            char pa[PATH_MAX + 8], pb[PATH_MAX + 8];
            path_note(pa, sizeof pa, name, path);
            path_note(pb, sizeof pb, o->name, o->path);
            st = fail(ds, ZP_ERR_INVALID,
                      "shard '%s'%s is the same file as shard '%s'%s (shard %zu): a dataset "
                      "reads each file once; name it once (overlapping globs, a glob that also "
                      "matches a manifest, or a link?)",
                      name, pa, o->name, pb, i);
            goto fail;
        }
    }
    if (zpi_grow((void **)&ds->shards, &ds->cap, ds->n + 1, sizeof *ds->shards) != 0) {
        st = fail(ds, ZP_ERR_NOMEM, "out of memory adding shard '%s'", name);
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
    shard_sync(ds, s);
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
static void pop_shard(zp_dataset *ds)
{
    shard *s = &ds->shards[--ds->n];
    ds->buckets[bucket_of(ds, s->dev, s->ino)] = s->next;
    shard_release(s);
}

static void update_offsets(zp_dataset *ds)
{
    uint64_t off = 0;
    for (size_t i = 0; i < ds->n; i++) {
        ds->shards[i].offset = off;
        if (off != UNKNOWN)
            off = ds->shards[i].samples == UNKNOWN ? UNKNOWN : off + ds->shards[i].samples;
    }
}

/* 1 when sb is the file excluded by zp_dataset_exclude(). */
static int is_excluded(const zp_dataset *ds, const struct stat *sb)
{
    return ds->has_exclude && sb->st_dev == ds->ex_dev && sb->st_ino == ds->ex_ino;
}

/* ------------------------------------------------------------ remote objects */

/* The size of a remote object (a HEAD request), as a stat would give it.
 * what prefixes the message ("shard 'x'"). */
static zp_status remote_stat(zp_dataset *ds, const char *url, const char *what, struct stat *sb)
{
    zpi_object *o = NULL;
    zpi_object_info info;
    zp_status st = zpi_object_open(ds->storage, url, &o, &info, &ds->err);
    zpi_object_close(o);
    if (st != ZP_OK)
        return zpi_err_prefix(&ds->err, "%s", what);
    memset(sb, 0, sizeof *sb);
    sb->st_size = (off_t)info.size;
    sb->st_mode = S_IFREG;
    return ZP_OK;
}

/* The name of a shard given as a URL: the URL without its secrets. */
static char *url_name(const char *url)
{
    char buf[4096];
    zpi_url_redact(url, buf, sizeof buf);
    return zpi_strdup(buf);
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

static zp_status add_remote_manifest(zp_dataset *ds, const char *url);

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

/* A shard or manifest given as a URL. */
static zp_status add_url(zp_dataset *ds, const char *spec)
{
    char *base = zpi_url_basename(spec);
    if (!base)
        return fail(ds, ZP_ERR_NOMEM, "out of memory");
    int manifest = zpi_has_suffix(base, ".json");
    const zpi_format *fmt = zpi_format_for_path(base);
    free(base);
    if (manifest)
        return add_remote_manifest(ds, spec);
    char *name = url_name(spec);
    if (!name)
        return fail(ds, ZP_ERR_NOMEM, "out of memory");
    if (!fmt) {
        char sfx[256];
        shard_suffixes(sfx, sizeof sfx, 1);
        zp_status st = fail(ds, ZP_ERR_INVALID,
                            "'%s': unknown shard format (expected the URL of a shard (%s) or of "
                            "a .json manifest)",
                            name, sfx);
        free(name);
        return st;
    }
    /* the transfer's message names the URL (redacted) already: no prefix */
    struct stat sb;
    zp_status st = remote_stat(ds, spec, "", &sb);
    if (st != ZP_OK) {
        free(name);
        return st;
    }
    shard *s;
    return push_shard(ds, name, zpi_strdup(spec), fmt, &sb, &s);
}

/* ------------------------------------------------------------ add */

static zp_status add_path(zp_dataset *ds, const char *spec)
{
    const zpi_format *fmt = zpi_format_for_path(spec);
    /* a path like a URL of another scheme (a typo: "htp://user:pw@...")
     * shown redacted, with the schemes supported */
    char red[PATH_MAX];
    zpi_url_redact(spec, red, sizeof red);
    if (!fmt) {
        char sfx[256];
        shard_suffixes(sfx, sizeof sfx, 0);
        return fail(ds, ZP_ERR_INVALID,
                    "'%s': unknown shard format (expected a shard (%s), a folder, a glob "
                    "pattern or a .json manifest)%s",
                    red, sfx, url_note(spec));
    }
    struct stat sb;
    if (stat(spec, &sb) != 0) {
        int e = errno;
        return fail(ds, ZP_ERR_IO, "shard '%s': cannot open: %s%s", red, strerror(e),
                    url_note(spec));
    }
    if (!S_ISREG(sb.st_mode))
        return fail(ds, ZP_ERR_IO, "shard '%s': not a regular file", red);
    shard *s;
    return push_shard(ds, zpi_strdup(spec), zpi_strdup(spec), fmt, &sb, &s);
}

/* Reading a manifest: what names it in messages; mdir is the folder
 * relative paths resolve against ("" or a folder, with or without its
 * final '/'). */
typedef struct manifest_ctx {
    zp_dataset *ds;
    const char *what;
    const char *mdir;
} manifest_ctx;

/* A manifest entry's path resolved against the manifest's folder mdir: a
 * URL as is; in a remote manifest (mdir a URL), "/a/b" is that server's
 * path (scheme://host/a/b, as in a web page: never a local file of this
 * machine) and "a/b" is relative to the manifest's URL; in a local one, an
 * absolute path as is and a relative one joined to its folder. Malloc'd. */
static char *manifest_entry_path(const char *mdir, const char *p)
{
    if (zpi_is_url(p))
        return zpi_strdup(p);
    if (zpi_is_url(mdir) && p[0] == '/') {
        const char *auth = strstr(mdir, "://") + 3;
        size_t al = (size_t)(auth - mdir) + strcspn(auth, "/?#");
        size_t pl = strlen(p);
        char *r = malloc(al + pl + 1);
        if (r) {
            memcpy(r, mdir, al);
            memcpy(r + al, p, pl + 1);
        }
        return r;
    }
    return p[0] == '/' ? zpi_strdup(p) : zpi_path_join(mdir, p);
}

static zp_status add_manifest_entry(void *user, size_t i, const zpi_manifest_entry *e)
{
    (void)i;
    manifest_ctx *c = user;
    zp_dataset *ds = c->ds;
    /* a URL as is; a path relative to a remote manifest's folder is a URL too */
    char *path = manifest_entry_path(c->mdir, e->path);
    if (!path)
        return fail(ds, ZP_ERR_NOMEM, "out of memory");
    int remote = zpi_is_url(path);
    char *rname = remote && !e->name ? url_name(e->path) : NULL;
    const char *name = e->name ? e->name : rname ? rname : e->path;
    struct stat sb;
    zp_status st = ZP_OK;
    if (remote && !name) {
        st = fail(ds, ZP_ERR_NOMEM, "out of memory");
    } else if (remote && e->has_bytes) {
        /* the manifest's size is checked by the download */
        memset(&sb, 0, sizeof sb);
        sb.st_size = (off_t)e->bytes;
        sb.st_mode = S_IFREG;
    } else if (remote) {
        char what[4400];
        zpi_fmt(what, sizeof what, "%s: shard '%s'", c->what, name);
        st = remote_stat(ds, path, what, &sb);
    } else if (stat(path, &sb) != 0) {
        int er = errno;
        st = fail(ds, ZP_ERR_IO, "%s: shard '%s': cannot open '%s': %s%s", c->what, name, path,
                  strerror(er), url_note(path));
    } else if (!S_ISREG(sb.st_mode)) {
        st = fail(ds, ZP_ERR_IO, "%s: shard '%s': '%s' is not a regular file", c->what, name,
                  path);
    } else if (e->has_bytes && e->bytes != (uint64_t)sb.st_size) {
        st = fail(ds, ZP_ERR_FORMAT,
                  "shard '%s': stale %s: it says %llu bytes but '%s' has %llu bytes (re-run "
                  "zephon index)",
                  name, c->what, (unsigned long long)e->bytes, path,
                  (unsigned long long)sb.st_size);
    }
    if (st != ZP_OK) {
        free(path);
        free(rname);
        return st;
    }
    shard *s;
    st = push_shard(ds, zpi_strdup(name), path, e->fmt, &sb, &s);
    free(rname);
    if (st != ZP_OK)
        return st;
    s->named = e->name != NULL;
    if (e->has_samples) {
        s->samples = e->samples;
        s->from_manifest = 1;
    }
    s->has_hash = e->has_xxh64;
    s->xxh64 = e->xxh64;
    shard_sync(ds, s);
    return ZP_OK;
}

static zp_status add_manifest(zp_dataset *ds, const char *mpath)
{
    zpi_buf what = {0};
    char *mdir = zpi_path_dir(mpath);
    zp_status st;
    /* a path like a URL of another scheme (a typo: "htp://user:pw@...")
     * shown redacted, with the schemes supported */
    char red[PATH_MAX];
    zpi_url_redact(mpath, red, sizeof red);
    if (!mdir || zpi_buf_printf(&what, "manifest '%s'", red) != 0) {
        st = fail(ds, ZP_ERR_NOMEM, "out of memory");
    } else {
        manifest_ctx c = {ds, what.p, mdir};
        st = zpi_manifest_read_file(mpath, what.p, &ds->err, add_manifest_entry, &c);
        if (st == ZP_ERR_IO && *url_note(mpath)) {
            char msg[ZPI_ERRMAX];
            zpi_fmt(msg, sizeof msg, "%s", zpi_err_msg(&ds->err));
            fail(ds, st, "%s%s", msg, url_note(mpath));
        }
    }
    free(mdir);
    zpi_buf_free(&what);
    return st;
}

/* A manifest given as a URL: read whole; relative paths in it are URLs
 * relative to its folder. */
static zp_status add_remote_manifest(zp_dataset *ds, const char *url)
{
    char *name = url_name(url);
    if (!name)
        return fail(ds, ZP_ERR_NOMEM, "out of memory");
    char *json = NULL;
    size_t len = 0;
    zp_status st = zpi_object_read_all(ds->storage, url, MAX_REMOTE_MANIFEST, &json, &len,
                                       &ds->err);
    if (st != ZP_OK) {
        zpi_err_prefix(&ds->err, "manifest '%s'", name);
        free(name);
        return st;
    }
    /* the folder: the URL up to its path's last '/' (the query dropped) */
    size_t q = strcspn(url, "?#");
    size_t cut = q;
    while (cut > 0 && url[cut - 1] != '/')
        cut--;
    char *mdir = malloc(cut + 1);
    zpi_buf what = {0};
    if (!mdir || zpi_buf_printf(&what, "manifest '%s'", name) != 0) {
        st = fail(ds, ZP_ERR_NOMEM, "out of memory");
    } else {
        memcpy(mdir, url, cut);
        mdir[cut] = '\0';
        manifest_ctx c = {ds, what.p, mdir};
        st = zpi_manifest_read(json, len, what.p, &ds->err, add_manifest_entry, &c);
    }
    zpi_buf_free(&what);
    free(mdir);
    free(json);
    free(name);
    return st;
}

/* A file named by the user or matched by a glob. */
static zp_status add_file(zp_dataset *ds, const char *spec)
{
    struct stat sb;
    if (stat(spec, &sb) == 0 && is_excluded(ds, &sb))
        return fail(ds, ZP_ERR_INVALID, "'%s' is '%s', the manifest being written: it cannot be "
                                        "read too",
                    spec, ds->ex_path);
    if (zpi_has_suffix(spec, ".json"))
        return add_manifest(ds, spec);
    return add_path(ds, spec);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Why glob(pattern) found nothing (nomatch) or could not read a folder:
 * the folder before the pattern's first wildcard does not exist, is not a
 * folder or cannot be read (each named); else no match, or a folder that
 * a wildcard matched cannot be read. */
static zp_status glob_failed(zp_dataset *ds, const char *pattern, int nomatch)
{
    size_t w = strcspn(pattern, "*?[");
    while (w > 0 && pattern[w - 1] != '/')
        w--;
    char dir[PATH_MAX];
    if (w == 0)
        zpi_fmt(dir, sizeof dir, ".");
    else /* without its final '/', except for "/" itself */
        zpi_fmt(dir, sizeof dir, "%.*s", (int)(w > 1 ? w - 1 : w), pattern);
    struct stat sb;
    int e = 0;
    DIR *d = NULL;
    if (stat(dir, &sb) != 0)
        e = errno;
    else if (!S_ISDIR(sb.st_mode))
        e = ENOTDIR;
    else if (!(d = opendir(dir)))
        e = errno;
    if (d)
        closedir(d);
    if (e == ENOENT)
        return fail(ds, ZP_ERR_IO, "glob '%s': the folder '%s' does not exist", pattern, dir);
    if (e == ENOTDIR)
        return fail(ds, ZP_ERR_IO, "glob '%s': '%s' is not a folder", pattern, dir);
    if (e)
        return fail(ds, ZP_ERR_IO, "glob '%s': cannot read the folder '%s': %s", pattern, dir,
                    strerror(e));
    if (nomatch)
        return fail(ds, ZP_ERR_IO, "glob '%s' matches no file", pattern);
    return fail(ds, ZP_ERR_IO, "glob '%s': a folder it matches under '%s' cannot be read", pattern,
                dir);
}

static zp_status add_glob(zp_dataset *ds, const char *pattern)
{
    glob_t g;
    memset(&g, 0, sizeof g);
    /* GLOB_ERR: a folder that cannot be read fails the add instead of
     * silently dropping its shards. */
    int r = glob(pattern, GLOB_NOSORT | GLOB_ERR, NULL, &g);
    if (r == GLOB_NOMATCH || (r == 0 && g.gl_pathc == 0)) {
        globfree(&g);
        return glob_failed(ds, pattern, 1);
    }
    if (r != 0) {
        globfree(&g);
        return r == GLOB_NOSPACE ? fail(ds, ZP_ERR_NOMEM, "glob '%s': out of memory", pattern)
                                 : glob_failed(ds, pattern, 0);
    }
    /* glob(3) sorts with strcoll (locale-dependent): sort bytewise so every
     * rank sees the same order. */
    qsort(g.gl_pathv, g.gl_pathc, sizeof g.gl_pathv[0], cmp_str);
    zp_status st = ZP_OK;
    for (size_t i = 0; i < g.gl_pathc && st == ZP_OK; i++) {
        const char *m = g.gl_pathv[i];
        struct stat sb;
        if (stat(m, &sb) == 0 && is_excluded(ds, &sb)) {
            zpi_dataset_log(ds, ZP_LOG_INFO, "glob '%s': not reading '%s' (the manifest being "
                                             "written)",
                            pattern, m);
            continue;
        }
        if (!zpi_has_suffix(m, ".json") && !zpi_format_for_path(m)) {
            char sfx[256];
            shard_suffixes(sfx, sizeof sfx, 0);
            st = fail(ds, ZP_ERR_INVALID,
                      "glob '%s' matched '%s', which is not a shard (%s) or a manifest (.json)",
                      pattern, m, sfx);
        } else
            st = add_file(ds, m);
    }
    globfree(&g);
    return st;
}

/* 1 when path is the .idx of a Megatron pair whose .bin is a shard file
 * beside it. */
static int is_pair_index(const char *path)
{
    size_t n = strlen(path);
    if (n < 5 || strcmp(path + n - 4, ".idx") != 0)
        return 0;
    char bin[PATH_MAX];
    zpi_fmt(bin, sizeof bin, "%.*s.bin", (int)(n - 4), path);
    const zpi_format *f = zpi_format_for_path(bin);
    struct stat sb;
    return f && strcmp(f->suffix, ".bin") == 0 && stat(bin, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* A folder: its manifest.json when it has one (and it is not the manifest
 * being written), else its shard files in bytewise order; other entries
 * are skipped and counted in one warning. Not recursive. */
static zp_status add_folder(zp_dataset *ds, const char *dir)
{
    char *m = zpi_path_join(dir, FOLDER_MANIFEST);
    if (!m)
        return fail(ds, ZP_ERR_NOMEM, "out of memory");
    struct stat sb;
    if (stat(m, &sb) == 0 && S_ISREG(sb.st_mode) && !is_excluded(ds, &sb)) {
        zp_status st = add_manifest(ds, m);
        free(m);
        return st;
    }
    free(m);
    DIR *d = opendir(dir);
    if (!d) {
        int e = errno;
        return fail(ds, ZP_ERR_IO, "folder '%s': cannot read: %s", dir, strerror(e));
    }
    char **names = NULL;
    size_t n = 0, cap = 0, skipped = 0;
    char example[256] = "";
    zp_status st = ZP_OK;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno) {
                int e = errno;
                st = fail(ds, ZP_ERR_IO, "folder '%s': cannot read: %s", dir, strerror(e));
            }
            break;
        }
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char *p = zpi_path_join(dir, de->d_name);
        if (!p) {
            st = fail(ds, ZP_ERR_NOMEM, "out of memory");
            break;
        }
        int shard_file = zpi_format_for_path(de->d_name) && stat(p, &sb) == 0 &&
                         S_ISREG(sb.st_mode);
        if (!shard_file) {
            /* the example named is the first in bytewise order; a
             * Megatron pair's .idx is part of its shard, not skipped */
            if (!(stat(p, &sb) == 0 && is_excluded(ds, &sb)) && !is_pair_index(p) &&
                (skipped++ == 0 || strcmp(de->d_name, example) < 0))
                zpi_fmt(example, sizeof example, "%s", de->d_name);
            free(p);
            continue;
        }
        if (zpi_grow((void **)&names, &cap, n + 1, sizeof *names) != 0) {
            free(p);
            st = fail(ds, ZP_ERR_NOMEM, "out of memory");
            break;
        }
        names[n++] = p;
    }
    closedir(d);
    char sfx[256];
    shard_suffixes(sfx, sizeof sfx, 0);
    if (st == ZP_OK && n == 0)
        st = fail(ds, ZP_ERR_IO, "folder '%s' has no shard files (%s) and no %s (%zu other entries)",
                  dir, sfx, FOLDER_MANIFEST, skipped);
    if (st == ZP_OK) {
        qsort(names, n, sizeof *names, cmp_str);
        for (size_t i = 0; i < n && st == ZP_OK; i++)
            st = add_path(ds, names[i]);
    }
    if (st == ZP_OK && skipped)
        zpi_dataset_log(ds, ZP_LOG_WARN,
                        "folder '%s': skipped %zu entr%s that %s not a shard file (%s), e.g. '%s'",
                        dir, skipped, skipped == 1 ? "y" : "ies", skipped == 1 ? "is" : "are", sfx,
                        example);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return st;
}

/* End of an add: all or nothing (on error drop the shards added since
 * there were n0), offsets up to date. */
static zp_status end_add(zp_dataset *ds, size_t n0, zp_status st)
{
    if (st != ZP_OK) {
        while (ds->n > n0)
            pop_shard(ds);
    }
    update_offsets(ds);
    return st;
}

zp_status zp_dataset_add(zp_dataset *ds, const char *spec)
{
    RETURN_IF_UNUSABLE(ds);
    if (!spec || !*spec)
        return fail(ds, ZP_ERR_INVALID, "empty shard spec");
    size_t n0 = ds->n;
    zp_status st;
    struct stat sb;
    if (zpi_is_url(spec))
        st = add_url(ds, spec);
    else if (stat(spec, &sb) == 0)
        st = S_ISDIR(sb.st_mode) ? add_folder(ds, spec) : add_file(ds, spec);
    else if (has_glob_chars(spec) && !strstr(spec, "://"))
        st = add_glob(ds, spec);
    else
        st = add_file(ds, spec);
    return end_add(ds, n0, st);
}

zp_status zp_dataset_add_manifest_json(zp_dataset *ds, const char *json, size_t len,
                                       const char *base_dir)
{
    RETURN_IF_UNUSABLE(ds);
    if (!json)
        return fail(ds, ZP_ERR_INVALID, "no manifest bytes given");
    size_t n0 = ds->n;
    manifest_ctx c = {ds, MANIFEST_IN_MEMORY, base_dir ? base_dir : ""};
    zp_status st = zpi_manifest_read(json, len, MANIFEST_IN_MEMORY, &ds->err, add_manifest_entry,
                                     &c);
    return end_add(ds, n0, st);
}

zp_status zp_dataset_exclude(zp_dataset *ds, const char *path)
{
    RETURN_IF_UNUSABLE(ds);
    if (!path || !*path)
        return fail(ds, ZP_ERR_INVALID, "exclude: no path given");
    char *p = zpi_strdup(path);
    if (!p)
        return fail(ds, ZP_ERR_NOMEM, "out of memory");
    free(ds->ex_path);
    ds->ex_path = p;
    struct stat sb;
    ds->has_exclude = stat(path, &sb) == 0;
    if (ds->has_exclude) {
        ds->ex_dev = sb.st_dev;
        ds->ex_ino = sb.st_ino;
    }
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
    shard_sync(ds, s);
}

/* Count the records of shard s: from the index store when it has them,
 * else by loading the shard (and then keeping the count in the store). */
static zp_status index_shard(zp_dataset *ds, shard *s, zpi_index_pass *pass)
{
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
    zp_status st = s->fmt->load(path, s->name, &s->lim, &sh, &err);
    if (s->identity)
        zpi_fetcher_release(ds->fetcher, &pin, st == ZP_ERR_FORMAT && s->has_hash);
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
    return st == ZP_OK ? ZP_OK : fail(ds, st, "%s", err.msg);
}

static zp_status index_all(zp_dataset *ds)
{
    zpi_index_pass pass = {0, 0, 0};
    /* remote shards to count: their downloads start together */
    for (size_t i = 0; i < ds->n; i++) {
        if (ds->shards[i].samples != UNKNOWN || !ds->shards[i].identity)
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
    update_offsets(ds);
    return ZP_OK;
}

zp_status zp_dataset_index(zp_dataset *ds)
{
    RETURN_IF_UNUSABLE(ds);
    return index_all(ds);
}

/* ------------------------------------------------------------ hashing */

static zp_status hash_file(zp_dataset *ds, const shard *s, uint64_t *out)
{
    zpi_fetch_pin pin;
    const char *path;
    ZPI_FORWARD_IF_ERR(shard_file(ds, s, &pin, &path));
    zp_status st = ZP_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        st = fail(ds, ZP_ERR_IO, "shard '%s': cannot open '%s': %s", s->name, path, strerror(e));
        if (s->identity)
            zpi_fetcher_release(ds->fetcher, &pin, 0);
        return st;
    }
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    uint64_t off = 0;
    int rc = zpi_xxh64_fd(fd, out, &off);
    if (rc == ENOMEM)
        st = fail(ds, ZP_ERR_NOMEM, "out of memory hashing shard '%s'", s->name);
    else if (rc)
        st = fail(ds, ZP_ERR_IO, "shard '%s': read error at byte %llu: %s", s->name,
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
        zp_status st = hash_file(ds, s, &h);
        if (st != ZP_OK)
            return st;
        char red[PATH_MAX];
        zpi_url_redact(s->path, red, sizeof red);
        if (h != s->xxh64)
            return fail(ds, ZP_ERR_FORMAT,
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

/* ------------------------------------------------------------ manifest of the dataset */

/* The manifest of ds as malloc'd, NUL-terminated JSON. base_dir: the folder
 * it is for (zpi_manifest_path_for), NULL for one that does not depend on a
 * folder. what names the manifest in messages. */
static zp_status manifest_json(zp_dataset *ds, int with_hash, const char *base_dir,
                               const char *what, char **out, size_t *out_len)
{
    zp_status st = index_all(ds);
    if (st != ZP_OK)
        return st;
    char *mdir_real = NULL;
    if (base_dir && !(mdir_real = realpath(*base_dir ? base_dir : ".", NULL))) {
        int e = errno;
        return fail(ds, ZP_ERR_IO, "%s: cannot open its folder '%s': %s", what,
                    *base_dir ? base_dir : ".", strerror(e));
    }
    zpi_manifest_entry *e = calloc(ds->n ? ds->n : 1, sizeof *e);
    char **paths = calloc(ds->n ? ds->n : 1, sizeof *paths);
    if (!e || !paths) {
        st = fail(ds, ZP_ERR_NOMEM, "out of memory writing %s", what);
        goto out;
    }
    for (size_t i = 0; i < ds->n && st == ZP_OK; i++) {
        const shard *s = &ds->shards[i];
        /* a remote shard's URL is written as given */
        paths[i] = s->identity ? zpi_strdup(s->path)
                               : zpi_manifest_path_for(s->path, s->name, base_dir, mdir_real);
        if (!paths[i]) {
            int er = errno;
            st = fail(ds, ZP_ERR_IO, "shard '%s': cannot resolve '%s': %s", s->name, s->path,
                      strerror(er));
            break;
        }
        e[i].path = paths[i];
        /* The name is kept when it differs from the path written and is
         * not derived from the shard's location (a manifest's "name"), or
         * always in a manifest without a folder (the names as given:
         * zp_mpi_dataset_create). In a manifest for a folder, a name that
         * was the shard's location becomes the path written for it. */
        if (strcmp(paths[i], s->name) != 0 && (s->named || !base_dir))
            e[i].name = s->name;
        e[i].fmt = s->fmt;
        e[i].has_bytes = e[i].has_samples = 1;
        e[i].bytes = s->bytes;
        e[i].samples = s->samples;
        if (with_hash && (st = hash_file(ds, s, &e[i].xxh64)) == ZP_OK)
            e[i].has_xxh64 = 1;
        /* the folder-independent form (the one the MPI layer broadcasts)
         * keeps a hash known from a manifest, so every reader checks it */
        if (!with_hash && !base_dir && s->has_hash) {
            e[i].xxh64 = s->xxh64;
            e[i].has_xxh64 = 1;
        }
    }
    if (st == ZP_OK)
        st = zpi_manifest_render(e, ds->n, what, &ds->err, out, out_len);
out:
    if (paths)
        for (size_t i = 0; i < ds->n; i++)
            free(paths[i]);
    free(paths);
    free(e);
    free(mdir_real);
    return st;
}

zp_status zp_dataset_manifest_json(zp_dataset *ds, int with_hash, const char *base_dir, char **out,
                                   size_t *len)
{
    RETURN_IF_UNUSABLE(ds);
    if (!out)
        return fail(ds, ZP_ERR_INVALID, "no output given");
    *out = NULL;
    if (len)
        *len = 0;
    return manifest_json(ds, with_hash, base_dir, "manifest", out, len);
}

zp_status zp_dataset_write_manifest(zp_dataset *ds, const char *path, int with_hash)
{
    RETURN_IF_UNUSABLE(ds);
    if (!path || !*path)
        return fail(ds, ZP_ERR_INVALID, "no manifest path given");
    zpi_buf what = {0};
    char *mdir = zpi_path_dir(path), *text = NULL;
    size_t len = 0;
    zp_status st;
    if (!mdir || zpi_buf_printf(&what, "manifest '%s'", path) != 0) {
        st = fail(ds, ZP_ERR_NOMEM, "out of memory writing manifest '%s'", path);
    } else if ((st = manifest_json(ds, with_hash, mdir, what.p, &text, &len)) == ZP_OK &&
               zpi_write_file_atomic(path, text, len) != 0) {
        int e = errno;
        st = fail(ds, ZP_ERR_IO, "manifest '%s': cannot write: %s", path, strerror(e));
    }
    free(text);
    free(mdir);
    zpi_buf_free(&what);
    return st;
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
