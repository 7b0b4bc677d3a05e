/*
 * dataset_add.c - adding specs to a dataset: a path, a URL, a glob, a
 * folder, a manifest (a file, a URL or bytes, read by manifest.c); all or
 * nothing per call. Messages name what was given, URLs without their
 * secrets, and list the shard suffixes this build reads.
 *
 * Thread safety: as dataset.c (building is not thread-safe).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
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
#include "formats/unfinished.h"
#include "io/storage.h"
#include "base/util.h"

static int has_glob_chars(const char *s) { return strpbrk(s, "*?[") != NULL; }

static zp_status add_remote_manifest(zp_dataset *ds, const char *url);

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
 * .jsonl.gz, .json.gz (JSON Lines), .parquet, .h5, .hdf5, .bin + .idx (Megatron)". Each is named only when the
 * format table of this build reads it (a build without HDF5 does not name
 * .h5); remote: only the formats read from a URL (not Megatron's pairs). */
static void shard_suffixes(char *buf, size_t cap, int remote)
{
    static const struct {
        const char *suffix, *note;
        int local_only;
    } known[] = {{".jsonl", "", 0},
                 {".jsonl.zst", "", 0},
                 {".jsonl.gz", "", 0},
                 {".json.gz", " (JSON Lines)", 0},
                 {".parquet", "", 0},
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

/* ------------------------------------------------------------ S3 listings */

/* What a listing of an s3:// folder or glob keeps: the matching keys and
 * their sizes. */
typedef struct s3_listed {
    const char *prefix;  /* the literal prefix listed */
    const char *pattern; /* the key's glob pattern (NULL for a folder) */
    char **keys;
    uint64_t *sizes;
    size_t n, cap;
    size_t unnamed;      /* keys with '?' or '#' (no s3:// URL names them) */
} s3_listed;

static zp_status s3_keep(void *user, const char *key, uint64_t size, zpi_err *err)
{
    s3_listed *l = user;
    const char *rest = key + strlen(l->prefix);
    if (strncmp(key, l->prefix, strlen(l->prefix)) != 0)
        return ZP_OK; /* not under the prefix (a server ignoring it) */
    if (l->pattern ? fnmatch(l->pattern, key, FNM_PATHNAME) != 0 : (!*rest || strchr(rest, '/')))
        return ZP_OK; /* a folder is not recursive, as a local one */
    if (strpbrk(key, "?#")) {
        l->unnamed++;
        return ZP_OK;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        char **k = realloc(l->keys, cap * sizeof *k);
        if (k)
            l->keys = k;
        uint64_t *z = k ? realloc(l->sizes, cap * sizeof *z) : NULL;
        if (z)
            l->sizes = z;
        if (!k || !z)
            return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory");
        l->cap = cap;
    }
    if (!(l->keys[l->n] = zpi_strdup(key)))
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory");
    l->sizes[l->n++] = size;
    return ZP_OK;
}

typedef struct s3_obj {
    const char *key;
    uint64_t size;
} s3_obj;

static int cmp_obj_key(const void *a, const void *b)
{
    return strcmp(((const s3_obj *)a)->key, ((const s3_obj *)b)->key);
}

/* s3://bucket/prefix/ (a folder: its manifest.json when it has one, else
 * the shard objects directly under it) or s3://bucket/pattern (a glob
 * over the keys: '*' and '[...]' within one '/' segment), listed with
 * ListObjectsV2. The listing's sizes go into the dataset: no request per
 * object. Shards are added in bytewise key order. */
static zp_status add_s3_listing(zp_dataset *ds, const char *spec)
{
    const char *b = spec + 5;
    size_t bl = strcspn(b, "/?#");
    const char *key = b[bl] == '/' ? b + bl + 1 : "";
    size_t kl = strcspn(key, "?#");
    int glob = memchr(key, '*', kl) || memchr(key, '[', kl);
    char red[PATH_MAX];
    zpi_url_redact(spec, red, sizeof red);
    char *k = malloc(kl + 1);
    if (!k)
        return zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory");
    memcpy(k, key, kl);
    k[kl] = '\0';
    char *prefix = zpi_strdup(k);
    zpi_buf list_spec = {0};
    if (!prefix) {
        free(k);
        return zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory");
    }
    if (glob)
        prefix[strcspn(prefix, "*[")] = '\0';
    s3_listed l = {prefix, glob ? k : NULL, NULL, NULL, 0, 0, 0};
    zp_status st = ZP_OK;
    if (zpi_buf_printf(&list_spec, "s3://%.*s/%s", (int)bl, b, prefix) != 0)
        st = zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory");
    else
        st = zpi_storage_list(ds->storage, list_spec.p, s3_keep, &l, &ds->err);
    s3_obj *order = NULL;
    if (st == ZP_OK && l.n && !(order = malloc(l.n * sizeof *order)))
        st = zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory");
    if (st == ZP_OK && l.n) {
        for (size_t i = 0; i < l.n; i++)
            order[i] = (s3_obj){l.keys[i], l.sizes[i]};
        qsort(order, l.n, sizeof *order, cmp_obj_key);
    }
    /* a folder with a manifest is read through it, as a local one */
    const char *manifest = NULL;
    for (size_t i = 0; st == ZP_OK && !glob && i < l.n; i++)
        if (!strcmp(l.keys[i] + strlen(prefix), FOLDER_MANIFEST))
            manifest = l.keys[i];
    size_t skipped = 0, added = 0;
    const char *example = NULL;
    char sfx[256];
    shard_suffixes(sfx, sizeof sfx, 1);
    for (size_t j = 0; st == ZP_OK && !manifest && j < l.n; j++) {
        const char *key_j = order[j].key;
        zpi_buf url = {0};
        if (zpi_buf_printf(&url, "s3://%.*s/%s", (int)bl, b, key_j) != 0) {
            st = zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory");
            break;
        }
        const zpi_format *fmt = zpi_format_for_path(key_j);
        if (!fmt && glob && zpi_has_suffix(key_j, ".json")) {
            st = add_remote_manifest(ds, url.p);
            added++;
        } else if (!fmt && glob) {
            st = zpi_ds_fail(ds, ZP_ERR_INVALID,
                             "glob '%s' matched '%s', which is not a shard (%s) or a manifest "
                             "(.json)",
                             red, url.p, sfx);
        } else if (!fmt) {
            if (skipped++ == 0)
                example = key_j;
        } else {
            struct stat sb;
            memset(&sb, 0, sizeof sb);
            sb.st_size = (off_t)order[j].size;
            sb.st_mode = S_IFREG;
            shard *sh;
            char *name = url_name(url.p);
            st = name ? zpi_ds_push_shard(ds, name, zpi_strdup(url.p), fmt, &sb, &sh)
                      : zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory");
            added++;
        }
        zpi_buf_free(&url);
    }
    if (st == ZP_OK && manifest) {
        zpi_buf url = {0};
        st = zpi_buf_printf(&url, "s3://%.*s/%s", (int)bl, b, manifest) != 0
                 ? zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory")
                 : add_remote_manifest(ds, url.p);
        zpi_buf_free(&url);
    } else if (st == ZP_OK && added == 0) {
        if (glob)
            st = zpi_ds_fail(ds, ZP_ERR_IO, "glob '%s' matches no object", red);
        else
            st = zpi_ds_fail(ds, ZP_ERR_IO,
                             "folder '%s' has no shard objects (%s) and no %s directly under it",
                             red, sfx, FOLDER_MANIFEST);
    }
    if (st == ZP_OK && skipped)
        zpi_dataset_log(ds, ZP_LOG_WARN,
                        "folder '%s': skipped %zu object%s that %s not a shard (%s), e.g. '%s'",
                        red, skipped, skipped == 1 ? "" : "s", skipped == 1 ? "is" : "are", sfx,
                        example);
    if (st == ZP_OK && l.unnamed)
        zpi_dataset_log(ds, ZP_LOG_WARN,
                        "'%s': skipped %zu object%s whose key has a '?' or '#' (an s3:// URL "
                        "ends its key there)",
                        red, l.unnamed, l.unnamed == 1 ? "" : "s");
    for (size_t i = 0; i < l.n; i++)
        free(l.keys[i]);
    free(l.keys);
    free(l.sizes);
    free(order);
    free(prefix);
    free(k);
    zpi_buf_free(&list_spec);
    return st;
}

/* An http(s) folder (its URL's path ends with '/'): its manifest.json. */
static zp_status add_http_folder(zp_dataset *ds, const char *spec)
{
    size_t q = strcspn(spec, "?#");
    zpi_buf url = {0};
    zp_status st = zpi_buf_printf(&url, "%.*s%s%s", (int)q, spec, FOLDER_MANIFEST, spec + q) != 0
                       ? zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory")
                       : add_remote_manifest(ds, url.p);
    zpi_buf_free(&url);
    return st;
}

/* s3://bucket, s3://bucket/, s3://bucket/prefix/ or a key with a wildcard. */
static int s3_needs_listing(const char *spec)
{
    if (strncasecmp(spec, "s3://", 5) != 0)
        return 0;
    const char *b = spec + 5;
    size_t bl = strcspn(b, "/?#");
    if (b[bl] != '/')
        return bl > 0;
    const char *k = b + bl + 1;
    size_t kl = strcspn(k, "?#");
    return kl == 0 || k[kl - 1] == '/' || memchr(k, '*', kl) || memchr(k, '[', kl);
}

/* 1 when an http(s) URL's path ends with '/' (a folder). */
static int http_folder(const char *spec)
{
    if (strncasecmp(spec, "http://", 7) && strncasecmp(spec, "https://", 8))
        return 0;
    const char *auth = strstr(spec, "://") + 3;
    size_t q = strcspn(spec, "?#");
    const char *path = auth + strcspn(auth, "/?#");
    return path < spec + q && spec[q - 1] == '/';
}

/* A shard or manifest given as a URL. */
static zp_status add_url(zp_dataset *ds, const char *spec)
{
    if (s3_needs_listing(spec))
        return add_s3_listing(ds, spec);
    if (http_folder(spec))
        return add_http_folder(ds, spec);
    char *base = zpi_url_basename(spec);
    if (!base)
        return zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory");
    int manifest = zpi_has_suffix(base, ".json");
    const zpi_format *fmt = zpi_format_for_path(base);
    free(base);
    if (manifest)
        return add_remote_manifest(ds, spec);
    char *name = url_name(spec);
    if (!name)
        return zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory");
    if (!fmt) {
        char sfx[256];
        shard_suffixes(sfx, sizeof sfx, 1);
        zp_status st = zpi_ds_fail(ds, ZP_ERR_INVALID,
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
    return zpi_ds_push_shard(ds, name, zpi_strdup(spec), fmt, &sb, &s);
}


/* A Megatron data path prefix (as Megatron-LM names its corpora:
 * "corpus/tok_text_document" for tok_text_document.bin + .idx): 1 and
 * PREFIX.bin into bin when spec has no shard suffix and both files exist. */
static int megatron_prefix(const char *spec, char *bin, size_t cap)
{
    if (zpi_format_for_path(spec) || zpi_is_url(spec))
        return 0;
    char idx[PATH_MAX];
    struct stat sb;
    zpi_fmt(bin, cap, "%s.bin", spec);
    zpi_fmt(idx, sizeof idx, "%s.idx", spec);
    const zpi_format *f = zpi_format_for_path(bin);
    return f && strcmp(f->name, "megatron") == 0 && stat(bin, &sb) == 0 && S_ISREG(sb.st_mode) &&
           stat(idx, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* A Megatron pair written by zephon preprocess records its tokenizer in
 * PREFIX.tokenizer (one line: zp_tokenizer_ident()); kept in s->tokenizer
 * unless a manifest gave one. */
static zp_status note_pair_tokenizer(zp_dataset *ds, shard *s)
{
    size_t n = strlen(s->path);
    if (s->tokenizer || s->identity || !s->fmt || strcmp(s->fmt->name, "megatron") != 0 ||
        n < 4 || strcmp(s->path + n - 4, ".bin") != 0)
        return ZP_OK;
    char side[PATH_MAX];
    zpi_fmt(side, sizeof side, "%.*s.tokenizer", (int)(n - 4), s->path);
    FILE *f = fopen(side, "r");
    if (!f)
        return ZP_OK;
    char line[1024] = "";
    if (!fgets(line, sizeof line, f))
        line[0] = '\0';
    fclose(f);
    line[strcspn(line, "\r\n")] = '\0';
    if (!line[0])
        return ZP_OK;
    s->tokenizer = zpi_strdup(line);
    return s->tokenizer ? ZP_OK : zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory");
}

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
        return zpi_ds_fail(ds, ZP_ERR_INVALID,
                    "'%s': unknown shard format (expected a shard (%s), a folder, a glob "
                    "pattern or a .json manifest)%s",
                    red, sfx, url_note(spec));
    }
    struct stat sb;
    if (stat(spec, &sb) != 0) {
        int e = errno;
        return zpi_ds_fail(ds, ZP_ERR_IO, "shard '%s': cannot open: %s%s", red, strerror(e),
                    url_note(spec));
    }
    if (!S_ISREG(sb.st_mode))
        return zpi_ds_fail(ds, ZP_ERR_IO, "shard '%s': not a regular file", red);
    shard *s;
    zp_status st = zpi_ds_push_shard(ds, zpi_strdup(spec), zpi_strdup(spec), fmt, &sb, &s);
    return st == ZP_OK ? note_pair_tokenizer(ds, s) : st;
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
        return zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory");
    int remote = zpi_is_url(path);
    char *rname = remote && !e->name ? url_name(e->path) : NULL;
    const char *name = e->name ? e->name : rname ? rname : e->path;
    struct stat sb;
    zp_status st = ZP_OK;
    const zpi_format *fmt = e->fmt;
    char bin[PATH_MAX];
    if (!remote && (!fmt || strcmp(fmt->name, "megatron") == 0) &&
        megatron_prefix(path, bin, sizeof bin)) {
        /* a Megatron prefix: PATH.bin + PATH.idx */
        char *b = zpi_strdup(bin);
        free(path);
        path = b;
        fmt = zpi_format_for_path(bin);
        if (!path) {
            free(rname);
            return zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory");
        }
    }
    if (!fmt && remote) { /* name is the URL without credentials or query */
        st = zpi_ds_fail(ds, ZP_ERR_FORMAT, "%s: shard '%s': no \"format\" and an unknown file suffix",
                         c->what, name ? name : "(a URL)");
    } else if (!fmt) {
        st = zpi_ds_fail(ds, ZP_ERR_FORMAT,
                         "%s: shard '%s': no \"format\" and an unknown file suffix (nor a "
                         "Megatron prefix: no '%s.bin' + '%s.idx')",
                         c->what, name ? name : e->path, e->path, e->path);
    } else if (remote && !name) {
        st = zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory");
    } else if (remote && e->has_bytes) {
        /* the manifest's size is checked by the download */
        memset(&sb, 0, sizeof sb);
        sb.st_size = (off_t)e->bytes;
        sb.st_mode = S_IFREG;
    } else if (remote) {
        char what[4400];
        zpi_fmt(what, sizeof what, "%s: shard '%s'", c->what, name);
        st = remote_stat(ds, path, what, &sb);
    } else if (ds->trust_manifest && e->has_bytes) {
        /* as the manifest says: checked when loaded (zpi_load_check_size) */
        memset(&sb, 0, sizeof sb);
        sb.st_size = (off_t)e->bytes;
        sb.st_mode = S_IFREG;
        sb.st_dev = TRUSTED_DEV;
        sb.st_ino = (ino_t)XXH64(path, strlen(path), 0);
    } else if (stat(path, &sb) != 0) {
        int er = errno;
        st = zpi_ds_fail(ds, ZP_ERR_IO, "%s: shard '%s': cannot open '%s': %s%s", c->what, name, path,
                  strerror(er), url_note(path));
    } else if (!S_ISREG(sb.st_mode)) {
        st = zpi_ds_fail(ds, ZP_ERR_IO, "%s: shard '%s': '%s' is not a regular file", c->what, name,
                  path);
    } else if (e->has_bytes && e->bytes != (uint64_t)sb.st_size) {
        st = zpi_ds_fail(ds, ZP_ERR_FORMAT,
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
    st = zpi_ds_push_shard(ds, zpi_strdup(name), path, fmt, &sb, &s);
    free(rname);
    if (st != ZP_OK)
        return st;
    if (e->tokenizer && !(s->tokenizer = zpi_strdup(e->tokenizer)))
        return zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory");
    if ((st = note_pair_tokenizer(ds, s)) != ZP_OK)
        return st;
    s->named = e->name != NULL;
    if (e->has_samples) {
        s->samples = e->samples;
        s->from_manifest = 1;
    }
    s->has_hash = e->has_xxh64;
    s->xxh64 = e->xxh64;
    s->trusted = sb.st_dev == TRUSTED_DEV;
    zpi_ds_shard_sync(ds, s);
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
        st = zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory");
    } else {
        manifest_ctx c = {ds, what.p, mdir};
        st = zpi_manifest_read_file(mpath, what.p, &ds->err, add_manifest_entry, &c);
        if (st == ZP_ERR_IO && *url_note(mpath)) {
            char msg[ZPI_ERRMAX];
            zpi_fmt(msg, sizeof msg, "%s", zpi_err_msg(&ds->err));
            zpi_ds_fail(ds, st, "%s%s", msg, url_note(mpath));
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
        return zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory");
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
        st = zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory");
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
    if (stat(spec, &sb) == 0 && zpi_ds_is_excluded(ds, &sb))
        return zpi_ds_fail(ds, ZP_ERR_INVALID, "'%s' is '%s', the manifest being written: it cannot be "
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
        return zpi_ds_fail(ds, ZP_ERR_IO, "glob '%s': the folder '%s' does not exist", pattern, dir);
    if (e == ENOTDIR)
        return zpi_ds_fail(ds, ZP_ERR_IO, "glob '%s': '%s' is not a folder", pattern, dir);
    if (e)
        return zpi_ds_fail(ds, ZP_ERR_IO, "glob '%s': cannot read the folder '%s': %s", pattern, dir,
                    strerror(e));
    if (nomatch)
        return zpi_ds_fail(ds, ZP_ERR_IO, "glob '%s' matches no file", pattern);
    return zpi_ds_fail(ds, ZP_ERR_IO, "glob '%s': a folder it matches under '%s' cannot be read", pattern,
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
        return r == GLOB_NOSPACE ? zpi_ds_fail(ds, ZP_ERR_NOMEM, "glob '%s': out of memory", pattern)
                                 : glob_failed(ds, pattern, 0);
    }
    /* glob(3) sorts with strcoll (locale-dependent): sort bytewise so every
     * rank sees the same order. */
    qsort(g.gl_pathv, g.gl_pathc, sizeof g.gl_pathv[0], cmp_str);
    zp_status st = ZP_OK;
    for (size_t i = 0; i < g.gl_pathc && st == ZP_OK; i++) {
        const char *m = g.gl_pathv[i];
        struct stat sb;
        if (stat(m, &sb) == 0 && zpi_ds_is_excluded(ds, &sb)) {
            zpi_dataset_log(ds, ZP_LOG_INFO, "glob '%s': not reading '%s' (the manifest being "
                                             "written)",
                            pattern, m);
            continue;
        }
        if (!zpi_has_suffix(m, ".json") && !zpi_format_for_path(m)) {
            char sfx[256];
            shard_suffixes(sfx, sizeof sfx, 0);
            st = zpi_ds_fail(ds, ZP_ERR_INVALID,
                      "glob '%s' matched '%s', which is not a shard (%s) or a manifest (.json)",
                      pattern, m, sfx);
        } else
            st = add_file(ds, m);
    }
    globfree(&g);
    return st;
}

/* 1 when path is the .idx (or the .tokenizer record) of a Megatron pair
 * whose .bin is a shard file beside it. */
static int is_pair_index(const char *path)
{
    size_t n = strlen(path), k;
    if (n > 4 && strcmp(path + n - 4, ".idx") == 0)
        k = 4;
    else if (n > 10 && strcmp(path + n - 10, ".tokenizer") == 0)
        k = 10;
    else
        return 0;
    char bin[PATH_MAX];
    zpi_fmt(bin, sizeof bin, "%.*s.bin", (int)(n - k), path);
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
        return zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory");
    struct stat sb;
    if (stat(m, &sb) == 0 && S_ISREG(sb.st_mode) && !zpi_ds_is_excluded(ds, &sb)) {
        zp_status st = add_manifest(ds, m);
        free(m);
        return st;
    }
    free(m);
    DIR *d = opendir(dir);
    if (!d) {
        int e = errno;
        return zpi_ds_fail(ds, ZP_ERR_IO, "folder '%s': cannot read: %s", dir, strerror(e));
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
                st = zpi_ds_fail(ds, ZP_ERR_IO, "folder '%s': cannot read: %s", dir, strerror(e));
            }
            break;
        }
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char *p = zpi_path_join(dir, de->d_name);
        if (!p) {
            st = zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory");
            break;
        }
        int shard_file = zpi_format_for_path(de->d_name) && stat(p, &sb) == 0 &&
                         S_ISREG(sb.st_mode);
        if (!shard_file) {
            /* the example named is the first in bytewise order; a
             * Megatron pair's .idx is part of its shard, not skipped */
            if (!(stat(p, &sb) == 0 && zpi_ds_is_excluded(ds, &sb)) && !is_pair_index(p) &&
                (skipped++ == 0 || strcmp(de->d_name, example) < 0))
                zpi_fmt(example, sizeof example, "%s", de->d_name);
            free(p);
            continue;
        }
        if (zpi_grow((void **)&names, &cap, n + 1, sizeof *names) != 0) {
            free(p);
            st = zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory");
            break;
        }
        names[n++] = p;
    }
    closedir(d);
    char sfx[256];
    shard_suffixes(sfx, sizeof sfx, 0);
    if (st == ZP_OK && n == 0)
        st = zpi_ds_fail(ds, ZP_ERR_IO, "folder '%s' has no shard files (%s) and no %s (%zu other entries)",
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
            zpi_ds_pop_shard(ds);
    }
    zpi_ds_update_offsets(ds);
    return st;
}

zp_status zp_dataset_add(zp_dataset *ds, const char *spec)
{
    RETURN_IF_UNUSABLE(ds);
    if (!spec || !*spec)
        return zpi_ds_fail(ds, ZP_ERR_INVALID, "empty shard spec");
    size_t n0 = ds->n;
    zp_status st;
    struct stat sb;
    char bin[PATH_MAX];
    if (zpi_is_url(spec))
        st = add_url(ds, spec);
    else if (stat(spec, &sb) == 0)
        st = S_ISDIR(sb.st_mode) ? add_folder(ds, spec) : add_file(ds, spec);
    else if (megatron_prefix(spec, bin, sizeof bin))
        st = add_path(ds, bin); /* "corpus/tok_text_document": its .bin + .idx */
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
        return zpi_ds_fail(ds, ZP_ERR_INVALID, "no manifest bytes given");
    size_t n0 = ds->n;
    manifest_ctx c = {ds, MANIFEST_IN_MEMORY, base_dir ? base_dir : ""};
    zp_status st = zpi_manifest_read(json, len, MANIFEST_IN_MEMORY, &ds->err, add_manifest_entry,
                                     &c);
    return end_add(ds, n0, st);
}

/* ------------------------------------------------------------ packed */

/* Reads a u64 (little endian) at *p; 0, or -1 past end. */
static int get_u64(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
    if ((size_t)(end - *p) < 8)
        return -1;
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--)
        x = x << 8 | (*p)[i];
    *v = x;
    *p += 8;
    return 0;
}

/* A string written by zp_dataset_pack: u32 length, the bytes, a NUL. */
static const char *get_str(const unsigned char **p, const unsigned char *end)
{
    if ((size_t)(end - *p) < 4)
        return NULL;
    uint32_t n = (uint32_t)(*p)[0] | (uint32_t)(*p)[1] << 8 | (uint32_t)(*p)[2] << 16 |
                 (uint32_t)(*p)[3] << 24;
    *p += 4;
    if ((size_t)(end - *p) < (size_t)n + 1 || (*p)[n] != '\0' || memchr(*p, '\0', n))
        return NULL;
    const char *s = (const char *)*p;
    *p += (size_t)n + 1;
    return s;
}

zp_status zp_dataset_add_packed(zp_dataset *ds, const char *buf, size_t len)
{
    RETURN_IF_UNUSABLE(ds);
    if (!buf)
        return zpi_ds_fail(ds, ZP_ERR_INVALID, "no packed dataset given");
    const unsigned char *p = (const unsigned char *)buf, *end = p + len;
    uint64_t n;
    if (len < ZPI_PACK_MAGIC_LEN || memcmp(p, ZPI_PACK_MAGIC, ZPI_PACK_MAGIC_LEN) != 0 ||
        (p += ZPI_PACK_MAGIC_LEN, get_u64(&p, end, &n) != 0))
        return zpi_ds_fail(ds, ZP_ERR_FORMAT,
                           "packed dataset: not packed by this version of zephon");
    size_t n0 = ds->n;
    manifest_ctx c = {ds, "packed dataset", ""};
    int trust = ds->trust_manifest;
    ds->trust_manifest = 1;
    zp_status st = ZP_OK;
    for (uint64_t i = 0; i < n && st == ZP_OK; i++) {
        zpi_manifest_entry e = {0};
        uint64_t flags = 0;
        const char *fmt = NULL;
        int bad = get_u64(&p, end, &flags) != 0 || get_u64(&p, end, &e.bytes) != 0 ||
                  get_u64(&p, end, &e.samples) != 0 || get_u64(&p, end, &e.xxh64) != 0 ||
                  !(e.path = get_str(&p, end)) ||
                  ((flags & ZPI_PACK_NAME) && !(e.name = get_str(&p, end))) ||
                  !(fmt = get_str(&p, end));
        if (bad) {
            st = zpi_ds_fail(ds, ZP_ERR_FORMAT, "packed dataset: shard %llu: cut short or "
                                                "malformed",
                             (unsigned long long)i);
            break;
        }
        if (!(e.fmt = zpi_format_by_name(fmt))) {
            st = zpi_ds_fail(ds, ZP_ERR_UNSUPPORTED, "packed dataset: shard '%s': format '%s' "
                                                     "unknown to this build",
                             e.name ? e.name : e.path, fmt);
            break;
        }
        e.has_bytes = 1;
        e.has_samples = (flags & ZPI_PACK_SAMPLES) != 0;
        e.has_xxh64 = (flags & ZPI_PACK_XXH64) != 0;
        st = add_manifest_entry(&c, (size_t)i, &e);
    }
    if (st == ZP_OK && p != end)
        st = zpi_ds_fail(ds, ZP_ERR_FORMAT, "packed dataset: %zu bytes after its %llu shards",
                         (size_t)(end - p), (unsigned long long)n);
    ds->trust_manifest = trust;
    return end_add(ds, n0, st);
}

zp_status zp_dataset_exclude(zp_dataset *ds, const char *path)
{
    RETURN_IF_UNUSABLE(ds);
    if (!path || !*path)
        return zpi_ds_fail(ds, ZP_ERR_INVALID, "exclude: no path given");
    char *p = zpi_strdup(path);
    if (!p)
        return zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory");
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
