/*
 * dataset.c - a dataset: an ordered list of shards, added as paths, globs
 * or manifests (files or bytes; docs/datasets.md), with record counts, a
 * fingerprint and manifest writing (to a file or bytes) and verification.
 *
 * Ownership: the dataset owns its shard table and all strings in it; names
 * and paths handed out are borrowed until zp_dataset_destroy().
 * Thread safety: building (add/index/write_manifest/verify) is not
 * thread-safe; once built, the const accessors may be called from any thread
 * (they read only). The error message buffer is written by the building
 * calls only.
 */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <xxhash.h>

#include "dataset_internal.h"
#include "util.h"

#define DEFAULT_MAX_RECORD ((size_t)16 << 20)
#define DEFAULT_MAX_SHARD ((size_t)2 << 30)
#define UNKNOWN UINT64_MAX
#define HASH_CHUNK ((size_t)1 << 20)
/* How messages name a manifest given as bytes. */
#define MANIFEST_IN_MEMORY "manifest (in memory)"

typedef struct shard {
    char *name;            /* as given, or the manifest's "name" (default "path"); owned */
    char *path;            /* path to open (resolved against the manifest's folder); owned */
    const zpi_format *fmt; /* static */
    uint64_t bytes;        /* size on disk */
    uint64_t samples;      /* record count, UNKNOWN until indexed */
    uint64_t offset;       /* first global sample id, UNKNOWN while a count before is unknown */
    uint64_t xxh64;        /* content hash when has_hash */
    int has_hash;
    int remote;            /* http://, https://, s3:// */
    int named;             /* name given by a manifest's "name" (not derived from the path) */
} shard;

struct zp_dataset {
    zp_dataset_config cfg;     /* cfg.index_cache_dir points at cache_dir */
    char *cache_dir;           /* index cache folder, NULL when off; owned */
    zpi_load_limits lim;
    shard *shards;
    size_t n, cap;
    char err[1024];
};

/* ------------------------------------------------------------ errors, log */

void zpi_dataset_log(const zp_dataset *ds, zp_log_level lvl, const char *fmt, ...)
{
    if (!ds || !ds->cfg.log)
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    zpi_vfmt(buf, sizeof buf, fmt, ap);
    va_end(ap);
    ds->cfg.log(ds->cfg.log_user, lvl, buf);
}

static zp_status fail(zp_dataset *ds, zp_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Keep the error on the handle and log it. */
static zp_status fail(zp_dataset *ds, zp_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zpi_vfmt(ds->err, sizeof ds->err, fmt, ap);
    va_end(ap);
    zpi_dataset_log(ds, ZP_LOG_ERROR, "%s", ds->err);
    return st;
}

static void clear_err(zp_dataset *ds) { ds->err[0] = '\0'; }

/* ------------------------------------------------------------ create */

void zp_dataset_config_init(zp_dataset_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->max_record_bytes = DEFAULT_MAX_RECORD;
    cfg->max_shard_bytes = DEFAULT_MAX_SHARD;
}

zp_status zp_dataset_create(const zp_dataset_config *cfg, zp_dataset **out)
{
    if (!out)
        return ZP_ERR_INVALID;
    *out = NULL;
    zp_dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        return ZP_ERR_NOMEM;
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
    if (ds->cfg.index_cache_dir && *ds->cfg.index_cache_dir) {
        if (!(ds->cache_dir = zpi_strdup(ds->cfg.index_cache_dir))) {
            free(ds);
            return ZP_ERR_NOMEM;
        }
    }
    ds->cfg.index_cache_dir = ds->cache_dir;
    *out = ds;
    return ZP_OK;
}

static void shard_release(shard *s)
{
    free(s->name);
    free(s->path);
}

void zp_dataset_destroy(zp_dataset *ds)
{
    if (!ds)
        return;
    for (size_t i = 0; i < ds->n; i++)
        shard_release(&ds->shards[i]);
    free(ds->shards);
    free(ds->cache_dir);
    free(ds);
}

/* ------------------------------------------------------------ helpers */

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

static int has_glob_chars(const char *s) { return strpbrk(s, "*?[") != NULL; }

/* dir (may be "" or end in '/') joined with rel; caller frees. */
static char *join_path(const char *dir, const char *rel)
{
    size_t a = strlen(dir), b = strlen(rel);
    int slash = a > 0 && dir[a - 1] != '/';
    char *p = malloc(a + (size_t)slash + b + 1);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    if (slash)
        p[a] = '/';
    memcpy(p + a + (size_t)slash, rel, b + 1);
    return p;
}

/* The folder part of path including its final '/', or "" (caller frees). */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) + 1 : 0;
    char *d = malloc(n + 1);
    if (!d)
        return NULL;
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

/* Append a shard; takes ownership of name and path (freed on failure). */
static zp_status push_shard(zp_dataset *ds, char *name, char *path, const zpi_format *fmt,
                            shard **out)
{
    if (!name || !path) {
        free(name);
        free(path);
        return fail(ds, ZP_ERR_NOMEM, "out of memory adding a shard");
    }
    if (ds->n == ds->cap) {
        size_t cap = ds->cap ? ds->cap * 2 : 16;
        shard *s = realloc(ds->shards, cap * sizeof *s);
        if (!s) {
            fail(ds, ZP_ERR_NOMEM, "out of memory adding shard '%s'", name);
            free(name);
            free(path);
            return ZP_ERR_NOMEM;
        }
        ds->shards = s;
        ds->cap = cap;
    }
    shard *s = &ds->shards[ds->n++];
    memset(s, 0, sizeof *s);
    s->name = name;
    s->path = path;
    s->fmt = fmt;
    s->samples = UNKNOWN;
    s->offset = UNKNOWN;
    s->remote = zpi_path_is_url(path);
    *out = s;
    return ZP_OK;
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

/* ------------------------------------------------------------ add */

static zp_status add_path(zp_dataset *ds, const char *spec)
{
    const zpi_format *fmt = zpi_format_for_path(spec);
    if (!fmt)
        return fail(ds, ZP_ERR_INVALID,
                    "'%s': unknown shard format (expected a .jsonl or .jsonl.zst file, a glob "
                    "pattern or a .json manifest)",
                    spec);
    if (zpi_path_is_url(spec))
        return fail(ds, ZP_ERR_UNSUPPORTED,
                    "shard '%s': remote storage not built (list remote shards in a manifest)",
                    spec);
    struct stat sb;
    if (stat(spec, &sb) != 0) {
        int e = errno;
        return fail(ds, ZP_ERR_IO, "shard '%s': cannot open: %s", spec, strerror(e));
    }
    if (!S_ISREG(sb.st_mode))
        return fail(ds, ZP_ERR_IO, "shard '%s': not a regular file", spec);
    shard *s;
    zp_status st = push_shard(ds, zpi_strdup(spec), zpi_strdup(spec), fmt, &s);
    if (st != ZP_OK)
        return st;
    s->bytes = (uint64_t)sb.st_size;
    return ZP_OK;
}

static int parse_hex64(const char *s, uint64_t *out)
{
    if (strlen(s) != 16)
        return -1;
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 0;
}

/* A non-negative integer member, or -1 when absent; -2 when not one. */
static int get_count(json_t *obj, const char *key, uint64_t *v)
{
    json_t *x = json_object_get(obj, key);
    if (!x)
        return -1;
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return -2;
    *v = (uint64_t)json_integer_value(x);
    return 0;
}

/* A string member of a manifest entry: 0 and *out when a non-empty string
 * without NUL; 1 when absent; -1 when not a string or empty; -2 when it
 * contains a NUL. */
static int get_text(json_t *obj, const char *key, const char **out)
{
    json_t *x = json_object_get(obj, key);
    if (!x)
        return 1;
    if (!json_is_string(x) || json_string_length(x) == 0)
        return -1;
    if (strlen(json_string_value(x)) != json_string_length(x))
        return -2;
    *out = json_string_value(x);
    return 0;
}

/* Shard i of a manifest. what names the manifest in messages ("manifest
 * 'm.json'"); mdir is the folder relative paths resolve against ("" or a
 * folder, with or without its final '/'). */
static zp_status add_manifest_entry(zp_dataset *ds, const char *what, const char *mdir, size_t i,
                                    json_t *e)
{
    if (!json_is_object(e))
        return fail(ds, ZP_ERR_FORMAT, "%s: shards[%zu] is not an object", what, i);
    const char *loc = NULL, *name = NULL;
    int r = get_text(e, "path", &loc);
    if (r == -2)
        return fail(ds, ZP_ERR_FORMAT, "%s: shards[%zu]: \"path\" contains NUL", what, i);
    if (r != 0)
        return fail(ds, ZP_ERR_FORMAT, "%s: shards[%zu]: missing or empty \"path\"", what, i);
    int named = get_text(e, "name", &name);
    if (named < 0)
        return fail(ds, ZP_ERR_FORMAT, "%s: shards[%zu] ('%s'): \"name\" %s", what, i, loc,
                    named == -2 ? "contains NUL" : "is not a non-empty string");
    if (named != 0)
        name = loc; /* the default: the path as written */
    const zpi_format *fmt;
    json_t *jf = json_object_get(e, "format");
    if (jf) {
        if (!json_is_string(jf))
            return fail(ds, ZP_ERR_FORMAT, "%s: shard '%s': \"format\" is not a string", what,
                        name);
        fmt = zpi_format_by_name(json_string_value(jf));
        if (!fmt)
            return fail(ds, ZP_ERR_UNSUPPORTED, "%s: shard '%s': unknown format '%s'", what, name,
                        json_string_value(jf));
    } else {
        fmt = zpi_format_for_path(loc);
        if (!fmt)
            return fail(ds, ZP_ERR_FORMAT,
                        "%s: shard '%s': no \"format\" and an unknown file suffix", what, name);
    }
    uint64_t bytes = 0, samples = 0, hash = 0;
    int have_bytes = get_count(e, "bytes", &bytes);
    int have_samples = get_count(e, "samples", &samples);
    if (have_bytes == -2 || have_samples == -2)
        return fail(ds, ZP_ERR_FORMAT, "%s: shard '%s': \"%s\" is not a non-negative integer",
                    what, name, have_bytes == -2 ? "bytes" : "samples");
    json_t *jh = json_object_get(e, "xxh64");
    if (jh && (!json_is_string(jh) || parse_hex64(json_string_value(jh), &hash) != 0))
        return fail(ds, ZP_ERR_FORMAT,
                    "%s: shard '%s': \"xxh64\" is not a string of 16 hex digits", what, name);

    int remote = zpi_path_is_url(loc);
    char *path = (remote || loc[0] == '/') ? zpi_strdup(loc) : join_path(mdir, loc);
    if (!path)
        return fail(ds, ZP_ERR_NOMEM, "out of memory");
    if (!remote) {
        struct stat sb;
        zp_status st = ZP_OK;
        if (stat(path, &sb) != 0) {
            int er = errno;
            st = fail(ds, ZP_ERR_IO, "%s: shard '%s': cannot open '%s': %s", what, name, path,
                      strerror(er));
        } else if (!S_ISREG(sb.st_mode)) {
            st = fail(ds, ZP_ERR_IO, "%s: shard '%s': '%s' is not a regular file", what, name,
                      path);
        } else if (have_bytes == 0 && bytes != (uint64_t)sb.st_size) {
            st = fail(ds, ZP_ERR_FORMAT,
                      "shard '%s': stale %s: it says %llu bytes but '%s' has %llu bytes (re-run "
                      "zephon index)",
                      name, what, (unsigned long long)bytes, path, (unsigned long long)sb.st_size);
        }
        if (st != ZP_OK) {
            free(path);
            return st;
        }
        bytes = (uint64_t)sb.st_size;
    }
    shard *s;
    zp_status st = push_shard(ds, zpi_strdup(name), path, fmt, &s);
    if (st != ZP_OK)
        return st;
    s->named = named == 0;
    s->bytes = bytes;
    if (have_samples == 0)
        s->samples = samples;
    if (jh) {
        s->has_hash = 1;
        s->xxh64 = hash;
    }
    return ZP_OK;
}

/* The shards of a parsed manifest (root NULL: the parse failed, je says
 * why), shared by manifest files and manifest bytes. Takes root. */
static zp_status add_manifest_root(zp_dataset *ds, json_t *root, const json_error_t *je,
                                   const char *what, const char *mdir)
{
    if (!root)
        return fail(ds, ZP_ERR_FORMAT, "%s: line %d column %d: %s", what, je->line, je->column,
                    je->text);
    zp_status st = ZP_OK;
    json_t *ver = json_object_get(root, "format_version");
    json_t *shards = json_object_get(root, "shards");
    if (!json_is_object(root)) {
        st = fail(ds, ZP_ERR_FORMAT, "%s: not a JSON object", what);
    } else if (!ver) {
        st = fail(ds, ZP_ERR_FORMAT, "%s: missing \"format_version\"", what);
    } else if (!json_is_integer(ver) || json_integer_value(ver) != 1) {
        st = fail(ds, ZP_ERR_FORMAT, "%s: unsupported \"format_version\" (this version reads 1)",
                  what);
    } else if (!json_is_array(shards)) {
        st = fail(ds, ZP_ERR_FORMAT, "%s: missing \"shards\" array", what);
    } else {
        for (size_t i = 0; i < json_array_size(shards) && st == ZP_OK; i++)
            st = add_manifest_entry(ds, what, mdir, i, json_array_get(shards, i));
    }
    json_decref(root);
    return st;
}

/* "manifest '<path>'" for messages; caller frees. */
static char *manifest_what(const char *mpath)
{
    size_t n = strlen(mpath) + 16;
    char *w = malloc(n);
    if (w)
        zpi_fmt(w, n, "manifest '%s'", mpath);
    return w;
}

static zp_status add_manifest(zp_dataset *ds, const char *mpath)
{
    struct stat sb;
    if (stat(mpath, &sb) != 0) {
        int e = errno;
        return fail(ds, ZP_ERR_IO, "manifest '%s': cannot open: %s", mpath, strerror(e));
    }
    char *what = manifest_what(mpath), *mdir = dir_of(mpath);
    zp_status st;
    if (!what || !mdir) {
        st = fail(ds, ZP_ERR_NOMEM, "out of memory");
    } else {
        json_error_t je;
        json_t *root = json_load_file(mpath, JSON_REJECT_DUPLICATES, &je);
        st = add_manifest_root(ds, root, &je, what, mdir);
    }
    free(mdir);
    free(what);
    return st;
}

/* A file named by the user or matched by a glob. */
static zp_status add_file(zp_dataset *ds, const char *spec)
{
    if (ends_with(spec, ".json"))
        return add_manifest(ds, spec);
    return add_path(ds, spec);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
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
        return fail(ds, ZP_ERR_IO, "glob '%s' matches no file", pattern);
    }
    if (r != 0) {
        globfree(&g);
        return fail(ds, r == GLOB_NOSPACE ? ZP_ERR_NOMEM : ZP_ERR_IO,
                    "glob '%s': cannot read a folder", pattern);
    }
    /* glob(3) sorts with strcoll (locale-dependent): sort bytewise so every
     * rank sees the same order. */
    qsort(g.gl_pathv, g.gl_pathc, sizeof g.gl_pathv[0], cmp_str);
    zp_status st = ZP_OK;
    for (size_t i = 0; i < g.gl_pathc && st == ZP_OK; i++) {
        const char *m = g.gl_pathv[i];
        if (!ends_with(m, ".json") && !zpi_format_for_path(m))
            st = fail(ds, ZP_ERR_INVALID,
                      "glob '%s' matched '%s', which is not a shard (.jsonl, .jsonl.zst) or a "
                      "manifest (.json)",
                      pattern, m);
        else
            st = add_file(ds, m);
    }
    globfree(&g);
    return st;
}

/* End of an add: all or nothing (on error drop the shards added since
 * there were n0), offsets up to date. */
static zp_status end_add(zp_dataset *ds, size_t n0, zp_status st)
{
    if (st != ZP_OK) {
        while (ds->n > n0)
            shard_release(&ds->shards[--ds->n]);
    }
    update_offsets(ds);
    return st;
}

zp_status zp_dataset_add(zp_dataset *ds, const char *spec)
{
    if (!ds)
        return ZP_ERR_INVALID;
    clear_err(ds);
    if (!spec || !*spec)
        return fail(ds, ZP_ERR_INVALID, "empty shard spec");
    size_t n0 = ds->n;
    zp_status st;
    struct stat sb;
    if (zpi_path_is_url(spec))
        st = add_path(ds, spec);
    else if (stat(spec, &sb) == 0 || !has_glob_chars(spec))
        st = add_file(ds, spec);
    else
        st = add_glob(ds, spec);
    return end_add(ds, n0, st);
}

zp_status zp_dataset_add_manifest_json(zp_dataset *ds, const char *json, size_t len,
                                       const char *base_dir)
{
    if (!ds)
        return ZP_ERR_INVALID;
    clear_err(ds);
    if (!json)
        return fail(ds, ZP_ERR_INVALID, "no manifest bytes given");
    size_t n0 = ds->n;
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    zp_status st = add_manifest_root(ds, root, &je, MANIFEST_IN_MEMORY, base_dir ? base_dir : "");
    return end_add(ds, n0, st);
}

/* ------------------------------------------------------------ index cache */

/* One small JSON file per shard, named by the XXH64 of the shard's
 * canonical path and format (docs/datasets.md, "Index cache"):
 *
 *   {"zephon_index_cache": 1, "path": "/abs/a.jsonl.zst", "format": "jsonl.zst",
 *    "bytes": 123, "mtime_ns": 1700000000123456789, "samples": 7,
 *    "longest_record": 80, "decoded_bytes": 560}
 *
 * An entry is used only when path, format, bytes and mtime_ns all match the
 * shard as it is now, and its longest record and decoded size are within
 * this dataset's limits (so a hit accepts exactly what a load would). */

#define CACHE_VERSION 1
#define CACHE_MAX_ENTRY ((off_t)64 << 10)
#define CACHE_HASH_SEED 0x7a70696478763031ULL /* "zpidxv01" */
/* An entry is not written for a shard modified less than this long ago:
 * a same-size rewrite within the file system's timestamp granularity (1-2 s
 * on some) would keep the mtime and could not be told apart. */
#define CACHE_RACY_NS ((int64_t)2000000000)

typedef struct cache_key {
    char *abs;          /* canonical absolute path of the shard; owned */
    const char *format; /* static */
    uint64_t bytes;
    int64_t mtime_ns;
    char *file;         /* the entry's path; owned */
} cache_key;

typedef struct cache_stats {
    size_t hits, misses;
    int warned; /* a write failure was logged at WARN (the rest go to DEBUG) */
} cache_stats;

static int64_t mtime_ns_of(const struct stat *sb)
{
    return (int64_t)sb->st_mtim.tv_sec * 1000000000 + (int64_t)sb->st_mtim.tv_nsec;
}

static void cache_key_free(cache_key *k)
{
    free(k->abs);
    free(k->file);
}

/* The key of shard s as it is now. -1 when the shard cannot be stat'ed or
 * resolved: then it is indexed without the cache (and the load reports why
 * it cannot be read). */
static int cache_key_init(zp_dataset *ds, const shard *s, cache_key *k)
{
    memset(k, 0, sizeof *k);
    struct stat sb;
    if (stat(s->path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return -1;
    k->abs = realpath(s->path, NULL);
    if (!k->abs)
        return -1;
    k->format = s->fmt->name;
    k->bytes = (uint64_t)sb.st_size;
    k->mtime_ns = mtime_ns_of(&sb);
    size_t a = strlen(k->abs), f = strlen(k->format);
    char *key = malloc(a + 1 + f);
    if (!key) {
        cache_key_free(k);
        return -1;
    }
    memcpy(key, k->abs, a + 1); /* the NUL separates path and format */
    memcpy(key + a + 1, k->format, f);
    char name[32];
    zpi_fmt(name, sizeof name, "%016llx.json",
            (unsigned long long)XXH64(key, a + 1 + f, CACHE_HASH_SEED));
    free(key);
    k->file = join_path(ds->cache_dir, name);
    if (!k->file) {
        cache_key_free(k);
        return -1;
    }
    return 0;
}

/* A JSON integer member >= min; 0 or -1. */
static int entry_int(json_t *o, const char *key, json_int_t min, json_int_t *v)
{
    json_t *x = json_object_get(o, key);
    if (!json_is_integer(x) || json_integer_value(x) < min)
        return -1;
    *v = json_integer_value(x);
    return 0;
}

static void cache_warn(zp_dataset *ds, cache_stats *cs, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A cache folder that cannot be read or written: the first such failure of
 * an index call at WARN, the rest at DEBUG (one message, not one per shard). */
static void cache_warn(zp_dataset *ds, cache_stats *cs, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    zpi_vfmt(buf, sizeof buf, fmt, ap);
    va_end(ap);
    zpi_dataset_log(ds, cs->warned ? ZP_LOG_DEBUG : ZP_LOG_WARN, "%s (continuing without it)",
                    buf);
    cs->warned = 1;
}

/* 1 and *samples on a hit; 0 on a miss (logged: DEBUG for an absent, stale
 * or foreign entry, WARN for one that cannot be read or is corrupt). */
static int cache_lookup(zp_dataset *ds, const shard *s, const cache_key *k, uint64_t *samples,
                        cache_stats *cs)
{
    int fd = open(k->file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            zpi_dataset_log(ds, ZP_LOG_DEBUG, "index cache: shard '%s': no entry '%s'", s->name,
                            k->file);
        else
            cache_warn(ds, cs, "index cache '%s': cannot read '%s': %s", ds->cache_dir, k->file,
                       strerror(e));
        return 0;
    }
    struct stat sb;
    char *buf = NULL;
    json_t *root = NULL;
    const char *why = NULL;
    char jerr[256];
    ssize_t got = 0;
    int hit = 0;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > CACHE_MAX_ENTRY) {
        why = "not a regular file of at most 64 KiB";
        goto corrupt;
    }
    buf = malloc((size_t)sb.st_size + 1);
    if (!buf) {
        why = "out of memory";
        goto corrupt;
    }
    while (got < sb.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)(sb.st_size - got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += r;
    }
    json_error_t je;
    root = json_loadb(buf, (size_t)got, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        zpi_fmt(jerr, sizeof jerr, "line %d column %d: %s", je.line, je.column, je.text);
        why = jerr;
        goto corrupt;
    }
    json_int_t ver, bytes, mtime, n, longest, decoded;
    json_t *jp = json_object_get(root, "path"), *jf = json_object_get(root, "format");
    if (!json_is_object(root) || entry_int(root, "zephon_index_cache", 0, &ver) != 0 ||
        ver != CACHE_VERSION || !json_is_string(jp) || !json_is_string(jf) ||
        entry_int(root, "bytes", 0, &bytes) != 0 ||
        entry_int(root, "mtime_ns", INT64_MIN, &mtime) != 0 ||
        entry_int(root, "samples", 0, &n) != 0 ||
        entry_int(root, "longest_record", 0, &longest) != 0 ||
        entry_int(root, "decoded_bytes", 0, &decoded) != 0) {
        why = "not an index cache entry (version 1)";
        goto corrupt;
    }
    if (strcmp(json_string_value(jp), k->abs) != 0 || strcmp(json_string_value(jf), k->format) != 0)
        zpi_dataset_log(ds, ZP_LOG_DEBUG, "index cache: shard '%s': '%s' is the entry of another shard",
                        s->name, k->file);
    else if ((uint64_t)bytes != k->bytes || (int64_t)mtime != k->mtime_ns)
        zpi_dataset_log(ds, ZP_LOG_DEBUG,
                        "index cache: shard '%s': stale entry (it says %lld bytes, mtime %lld ns; "
                        "the file has %llu bytes, mtime %lld ns)",
                        s->name, (long long)bytes, (long long)mtime, (unsigned long long)k->bytes,
                        (long long)k->mtime_ns);
    else if ((uint64_t)longest > (uint64_t)ds->lim.max_record_bytes ||
             (uint64_t)decoded > (uint64_t)ds->lim.max_shard_bytes ||
             (n == 0 && !ds->lim.allow_empty))
        zpi_dataset_log(ds, ZP_LOG_DEBUG,
                        "index cache: shard '%s': entry outside this dataset's limits; loading it",
                        s->name);
    else {
        *samples = (uint64_t)n;
        hit = 1;
    }
    goto out;
corrupt:
    zpi_dataset_log(ds, ZP_LOG_WARN, "index cache: shard '%s': ignoring corrupt entry '%s': %s",
                    s->name, k->file, why);
out:
    json_decref(root);
    free(buf);
    close(fd);
    return hit;
}

/* Write the entry of shard s, just loaded into sh, when the file did not
 * change meanwhile. Written to a temporary file in the cache folder and
 * renamed over the entry, so a reader sees the old entry or the new one,
 * never part of one. Failures are logged, never returned. */
static void cache_store(zp_dataset *ds, const shard *s, const cache_key *k, const zpi_shard *sh,
                        cache_stats *cs)
{
    struct stat sb;
    if (stat(s->path, &sb) != 0 || (uint64_t)sb.st_size != k->bytes ||
        mtime_ns_of(&sb) != k->mtime_ns || sh->file_bytes != k->bytes) {
        zpi_dataset_log(ds, ZP_LOG_DEBUG,
                        "index cache: shard '%s' changed while it was indexed; not cached",
                        s->name);
        return;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t now_ns = (int64_t)now.tv_sec * 1000000000 + (int64_t)now.tv_nsec;
    if (k->mtime_ns > now_ns - CACHE_RACY_NS) {
        zpi_dataset_log(ds, ZP_LOG_DEBUG,
                        "index cache: shard '%s' was modified less than 2 s ago; not cached",
                        s->name);
        return;
    }
    uint64_t longest = 0;
    for (uint64_t i = 0; i < sh->n_records; i++) {
        uint64_t len = sh->offsets[i + 1] - sh->offsets[i] - 1; /* without its newline */
        if (len > longest)
            longest = len;
    }
    json_t *o = json_object();
    char *text = NULL, *tmp = NULL;
    int fd = -1;
    if (!o || json_object_set_new(o, "zephon_index_cache", json_integer(CACHE_VERSION)) != 0 ||
        json_object_set_new(o, "path", json_string(k->abs)) != 0 ||
        json_object_set_new(o, "format", json_string(k->format)) != 0 ||
        json_object_set_new(o, "bytes", json_integer((json_int_t)k->bytes)) != 0 ||
        json_object_set_new(o, "mtime_ns", json_integer((json_int_t)k->mtime_ns)) != 0 ||
        json_object_set_new(o, "samples", json_integer((json_int_t)sh->n_records)) != 0 ||
        json_object_set_new(o, "longest_record", json_integer((json_int_t)longest)) != 0 ||
        json_object_set_new(o, "decoded_bytes", json_integer((json_int_t)sh->data_len)) != 0 ||
        !(text = json_dumps(o, JSON_COMPACT))) {
        /* a path that is not UTF-8 cannot be a JSON string: not cached */
        zpi_dataset_log(ds, ZP_LOG_DEBUG, "index cache: shard '%s': cannot encode an entry",
                        s->name);
        goto out;
    }
    /* ".<entry>.tmp-XXXXXX": mkstemp makes the name unique across threads,
     * processes and hosts sharing the folder. */
    const char *base = strrchr(k->file, '/') + 1;
    size_t dl = (size_t)(base - k->file), tl = strlen(k->file) + 16;
    if (!(tmp = malloc(tl))) {
        cache_warn(ds, cs, "index cache: out of memory writing the entry of shard '%s'", s->name);
        goto out;
    }
    zpi_fmt(tmp, tl, "%.*s.%s.tmp-XXXXXX", (int)dl, k->file, base);
    fd = mkstemp(tmp);
    if (fd < 0) {
        int e = errno;
        cache_warn(ds, cs, "index cache '%s': cannot write the entry of shard '%s': %s",
                   ds->cache_dir, s->name, strerror(e));
        goto out;
    }
    size_t len = strlen(text), off = 0;
    int e = 0;
    while (off < len && !e) {
        ssize_t w = write(fd, text + off, len - off);
        if (w > 0)
            off += (size_t)w;
        else if (w == 0)
            e = EIO;
        else if (errno != EINTR)
            e = errno;
    }
    if (close(fd) != 0 && !e)
        e = errno;
    fd = -1;
    if (!e && rename(tmp, k->file) != 0)
        e = errno;
    if (e) {
        unlink(tmp);
        cache_warn(ds, cs, "index cache '%s': cannot write '%s' (shard '%s'): %s", ds->cache_dir,
                   k->file, s->name, strerror(e));
    }
out:
    free(tmp);
    free(text);
    json_decref(o);
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
}

/* Count the records of shard s: from the index cache when it has them,
 * else by loading the shard (and then keeping the count in the cache). */
static zp_status index_shard(zp_dataset *ds, shard *s, cache_stats *cs)
{
    cache_key k;
    int use_cache = ds->cache_dir && !s->remote && cache_key_init(ds, s, &k) == 0;
    uint64_t n;
    if (use_cache && cache_lookup(ds, s, &k, &n, cs)) {
        set_count(ds, s, k.bytes, n);
        cs->hits++;
        zpi_dataset_log(ds, ZP_LOG_DEBUG, "shard '%s': %llu records (index cache)", s->name,
                        (unsigned long long)n);
        cache_key_free(&k);
        return ZP_OK;
    }
    if (use_cache)
        cs->misses++;
    zpi_shard sh;
    char err[sizeof ds->err];
    double t0 = zpi_now();
    zp_status st = s->fmt->load(s->path, s->name, &ds->lim, &sh, err, sizeof err);
    if (st == ZP_OK) {
        set_count(ds, s, sh.file_bytes, sh.n_records);
        zpi_dataset_log(ds, ZP_LOG_DEBUG, "indexed shard '%s': %llu records in %.3f s", s->name,
                        (unsigned long long)s->samples, zpi_now() - t0);
        if (use_cache)
            cache_store(ds, s, &k, &sh, cs);
        zpi_shard_free(&sh);
    }
    if (use_cache)
        cache_key_free(&k);
    return st == ZP_OK ? ZP_OK : fail(ds, st, "%s", err);
}

zp_status zp_dataset_index(zp_dataset *ds)
{
    if (!ds)
        return ZP_ERR_INVALID;
    clear_err(ds);
    cache_stats cs = {0, 0, 0};
    for (size_t i = 0; i < ds->n; i++) {
        if (ds->shards[i].samples != UNKNOWN)
            continue;
        zp_status st = index_shard(ds, &ds->shards[i], &cs);
        if (st != ZP_OK)
            return st;
    }
    if (cs.hits + cs.misses)
        zpi_dataset_log(ds, ZP_LOG_INFO, "index cache '%s': %zu of %zu shards from the cache",
                        ds->cache_dir, cs.hits, cs.hits + cs.misses);
    update_offsets(ds);
    return ZP_OK;
}

/* ------------------------------------------------------------ hashing */

static zp_status hash_file(zp_dataset *ds, const shard *s, uint64_t *out)
{
    if (s->remote)
        return fail(ds, ZP_ERR_UNSUPPORTED, "shard '%s': remote storage not built", s->name);
    int fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return fail(ds, ZP_ERR_IO, "shard '%s': cannot open '%s': %s", s->name, s->path,
                    strerror(e));
    }
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    char *buf = malloc(HASH_CHUNK);
    XXH64_state_t *h = XXH64_createState();
    zp_status st = ZP_OK;
    if (!buf || !h) {
        st = fail(ds, ZP_ERR_NOMEM, "out of memory hashing shard '%s'", s->name);
        goto out;
    }
    XXH64_reset(h, 0);
    uint64_t off = 0;
    for (;;) {
        ssize_t r = read(fd, buf, HASH_CHUNK);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            st = fail(ds, ZP_ERR_IO, "shard '%s': read error at byte %llu: %s", s->name,
                      (unsigned long long)off, strerror(e));
            goto out;
        }
        if (r == 0)
            break;
        XXH64_update(h, buf, (size_t)r);
        off += (uint64_t)r;
    }
    *out = XXH64_digest(h);
out:
    XXH64_freeState(h);
    free(buf);
    close(fd);
    return st;
}

zp_status zp_dataset_verify(zp_dataset *ds)
{
    if (!ds)
        return ZP_ERR_INVALID;
    clear_err(ds);
    for (size_t i = 0; i < ds->n; i++) {
        const shard *s = &ds->shards[i];
        if (!s->has_hash)
            continue;
        uint64_t h;
        zp_status st = hash_file(ds, s, &h);
        if (st != ZP_OK)
            return st;
        if (h != s->xxh64)
            return fail(ds, ZP_ERR_FORMAT,
                        "shard '%s': content hash mismatch: the manifest says xxh64 %016llx, "
                        "'%s' has %016llx",
                        s->name, (unsigned long long)s->xxh64, s->path, (unsigned long long)h);
    }
    return ZP_OK;
}

/* ------------------------------------------------------------ write manifest */

/* The canonical absolute path of local shard s: the canonical folder of its
 * path + its base name (a symlinked file stays a name in its folder); NULL
 * with errno set on failure. Caller frees. */
static char *absolute_path(const shard *s)
{
    char *sdir = dir_of(s->path);
    if (!sdir)
        return NULL;
    const char *base = s->path + strlen(sdir);
    char *real = realpath(*sdir ? sdir : ".", NULL);
    free(sdir);
    if (!real)
        return NULL;
    char *abs = join_path(real, base);
    free(real);
    return abs;
}

/* The "path" to write for shard s in a manifest for folder mdir (as given,
 * "" for the current folder, with or without its final '/') whose canonical
 * form is mdir_real; mdir NULL: a manifest that does not depend on a folder.
 *  1. URLs as they are;
 *  2. relative names that already resolve to the same file from mdir, as
 *     named;
 *  3. files under mdir, relative to it;
 *  4. otherwise (always when mdir is NULL) the canonical absolute path.
 * NULL with errno set on failure. Caller frees. */
static char *manifest_path(const shard *s, const char *mdir, const char *mdir_real)
{
    if (s->remote)
        return zpi_strdup(s->path);
    struct stat a, b;
    if (mdir && s->name[0] != '/' && stat(s->path, &a) == 0) {
        char *cand = join_path(mdir, s->name);
        int same = cand && stat(cand, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
        free(cand);
        if (same)
            return zpi_strdup(s->name);
    }
    char *abs = absolute_path(s);
    if (!abs || !mdir)
        return abs;
    size_t m = strlen(mdir_real);
    if (strcmp(mdir_real, "/") == 0)
        m = 0;
    if (strncmp(abs, mdir_real, m) == 0 && abs[m] == '/') {
        char *rel = zpi_strdup(abs + m + 1);
        free(abs);
        return rel;
    }
    return abs;
}

/* The manifest of ds as malloc'd, NUL-terminated JSON (2-space indent).
 * base_dir: the folder it is for (see manifest_path), NULL for one that
 * does not depend on a folder. what names the manifest in messages. */
static zp_status manifest_json(zp_dataset *ds, int with_hash, const char *base_dir,
                               const char *what, char **out, size_t *out_len)
{
    zp_status st = zp_dataset_index(ds);
    if (st != ZP_OK)
        return st;
    char *mdir_real = NULL;
    if (base_dir && !(mdir_real = realpath(*base_dir ? base_dir : ".", NULL))) {
        int e = errno;
        return fail(ds, ZP_ERR_IO, "%s: cannot open its folder '%s': %s", what,
                    *base_dir ? base_dir : ".", strerror(e));
    }
    char *text = NULL;
    json_t *root = json_object();
    json_t *arr = json_array();
    if (!root || !arr || json_object_set_new(root, "format_version", json_integer(1)) != 0 ||
        json_object_set(root, "shards", arr) != 0) {
        st = fail(ds, ZP_ERR_NOMEM, "out of memory writing %s", what);
        goto out;
    }
    for (size_t i = 0; i < ds->n; i++) {
        const shard *s = &ds->shards[i];
        char *path = manifest_path(s, base_dir, mdir_real);
        if (!path) {
            int e = errno;
            st = fail(ds, ZP_ERR_IO, "shard '%s': cannot resolve '%s': %s", s->name, s->path,
                      strerror(e));
            goto out;
        }
        /* The name is kept when it differs from the path written and is
         * not derived from the shard's location (a manifest's "name"), or
         * always in a manifest without a folder (the names as given:
         * zp_mpi_dataset_create). In a manifest for a folder, a name that
         * was the shard's location becomes the path written for it. */
        int keep_name = strcmp(path, s->name) != 0 && (s->named || !base_dir);
        json_t *o = json_object();
        int bad = !o || json_object_set_new(o, "path", json_string(path)) != 0 ||
                  (keep_name && json_object_set_new(o, "name", json_string(s->name)) != 0) ||
                  json_object_set_new(o, "format", json_string(s->fmt->name)) != 0 ||
                  json_object_set_new(o, "bytes", json_integer((json_int_t)s->bytes)) != 0 ||
                  json_object_set_new(o, "samples", json_integer((json_int_t)s->samples)) != 0;
        free(path);
        if (!bad && with_hash) {
            uint64_t h;
            if ((st = hash_file(ds, s, &h)) != ZP_OK) {
                json_decref(o);
                goto out;
            }
            char hex[17];
            zpi_fmt(hex, sizeof hex, "%016llx", (unsigned long long)h);
            bad = json_object_set_new(o, "xxh64", json_string(hex)) != 0;
        }
        if (bad || json_array_append_new(arr, o) != 0) {
            if (bad)
                json_decref(o);
            /* json_string() refuses text that is not UTF-8 */
            st = fail(ds, ZP_ERR_INVALID,
                      "%s: cannot encode shard '%s' (a name or path that is not UTF-8, or out "
                      "of memory)",
                      what, s->name);
            goto out;
        }
    }
    /* Into our own buffer: the caller frees it with free(), whatever
     * allocator jansson was given. */
    size_t n = json_dumpb(root, NULL, 0, JSON_INDENT(2));
    if (n == 0 || !(text = malloc(n + 1)) || json_dumpb(root, text, n, JSON_INDENT(2)) != n) {
        st = fail(ds, ZP_ERR_NOMEM, "out of memory writing %s", what);
        goto out;
    }
    text[n] = '\0';
    *out = text;
    text = NULL;
    if (out_len)
        *out_len = n;
out:
    free(text);
    json_decref(arr);
    json_decref(root);
    free(mdir_real);
    return st;
}

zp_status zp_dataset_manifest_json(zp_dataset *ds, int with_hash, const char *base_dir, char **out,
                                   size_t *len)
{
    if (!ds)
        return ZP_ERR_INVALID;
    if (!out)
        return fail(ds, ZP_ERR_INVALID, "no output given");
    *out = NULL;
    if (len)
        *len = 0;
    return manifest_json(ds, with_hash, base_dir, "manifest", out, len);
}

/* Write len bytes to path, replacing it atomically: written beside it and
 * renamed, so readers never see half a file. */
static zp_status write_atomic(zp_dataset *ds, const char *path, const char *bytes, size_t len)
{
    size_t tl = strlen(path) + 32;
    char *tmp = malloc(tl);
    if (!tmp)
        return fail(ds, ZP_ERR_NOMEM, "out of memory");
    zpi_fmt(tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    zp_status st = ZP_OK;
    FILE *f = fopen(tmp, "wb");
    int e = f ? 0 : errno;
    if (f && fwrite(bytes, 1, len, f) != len)
        e = errno ? errno : EIO;
    if (f && fclose(f) != 0 && !e)
        e = errno;
    if (e) {
        unlink(tmp);
        st = fail(ds, ZP_ERR_IO, "manifest '%s': cannot write: %s", path, strerror(e));
    } else if (rename(tmp, path) != 0) {
        e = errno;
        unlink(tmp);
        st = fail(ds, ZP_ERR_IO, "manifest '%s': cannot rename '%s' to it: %s", path, tmp,
                  strerror(e));
    }
    free(tmp);
    return st;
}

zp_status zp_dataset_write_manifest(zp_dataset *ds, const char *path, int with_hash)
{
    if (!ds)
        return ZP_ERR_INVALID;
    if (!path || !*path)
        return fail(ds, ZP_ERR_INVALID, "no manifest path given");
    char *what = manifest_what(path), *mdir = dir_of(path), *text = NULL;
    size_t len = 0;
    zp_status st;
    if (!what || !mdir)
        st = fail(ds, ZP_ERR_NOMEM, "out of memory writing manifest '%s'", path);
    else if ((st = manifest_json(ds, with_hash, mdir, what, &text, &len)) == ZP_OK)
        st = write_atomic(ds, path, text, len);
    free(text);
    free(mdir);
    free(what);
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

uint64_t zp_dataset_fingerprint(const zp_dataset *ds)
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
        put_str(h, s->name);
        put_str(h, s->fmt->name);
        put_u64(h, s->bytes);
        put_u64(h, s->samples);
    }
    uint64_t r = XXH64_digest(h);
    XXH64_freeState(h);
    return r;
}

const char *zp_dataset_errmsg(const zp_dataset *ds) { return ds ? ds->err : ""; }

/* ------------------------------------------------------------ internal */

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

const zpi_load_limits *zpi_dataset_limits(const zp_dataset *ds) { return ds ? &ds->lim : NULL; }
