/*
 * manifest.c - manifests read (bytes or a file, validated field by field)
 * and written (deterministic JSON), and the paths written in them.
 *
 * Thread safety: no shared state.
 */
#include "data/manifest.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "base/util.h"
#include "io/storage.h"

/* ------------------------------------------------------------ paths */

char *zpi_path_join(const char *dir, const char *rel)
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

char *zpi_path_dir(const char *path)
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

/* The canonical absolute path of a file: the canonical folder of its path
 * + its base name (a symlinked file stays a name in its folder); NULL with
 * errno set on failure. Caller frees. */
static char *absolute_path(const char *path)
{
    char *sdir = zpi_path_dir(path);
    if (!sdir)
        return NULL;
    const char *base = path + strlen(sdir);
    char *real = realpath(*sdir ? sdir : ".", NULL);
    free(sdir);
    if (!real)
        return NULL;
    char *abs = zpi_path_join(real, base);
    free(real);
    return abs;
}

char *zpi_manifest_path_for(const char *path, const char *name, const char *mdir,
                            const char *mdir_real)
{
    struct stat a, b;
    if (mdir && name[0] != '/' && stat(path, &a) == 0) {
        char *cand = zpi_path_join(mdir, name);
        int same = cand && stat(cand, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
        free(cand);
        if (same)
            return zpi_strdup(name);
    }
    char *abs = absolute_path(path);
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

/* ------------------------------------------------------------ read */

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

/* A non-negative integer member: 0 and *v; -1 when absent; -2 when not one. */
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

/* A string member: 0 and *out when a non-empty string without NUL; 1 when
 * absent; -1 when not a string or empty; -2 when it contains a NUL. */
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

/* shards[i] of a manifest into *m. */
static zp_status read_entry(const char *what, size_t i, json_t *e, zpi_err *err,
                            zpi_manifest_entry *m)
{
    memset(m, 0, sizeof *m);
    if (!json_is_object(e))
        return zpi_err_set(err, ZP_ERR_FORMAT, "%s: shards[%zu] is not an object", what, i);
    const char *loc = NULL, *name = NULL;
    int r = get_text(e, "path", &loc);
    if (r == -2)
        return zpi_err_set(err, ZP_ERR_FORMAT, "%s: shards[%zu]: \"path\" contains NUL", what, i);
    if (r != 0)
        return zpi_err_set(err, ZP_ERR_FORMAT, "%s: shards[%zu]: missing or empty \"path\"", what,
                           i);
    /* a URL path is shown without its secrets (credentials, query) */
    char red[1024];
    zpi_url_redact(loc, red, sizeof red);
    int named = get_text(e, "name", &name);
    if (named < 0)
        return zpi_err_set(err, ZP_ERR_FORMAT, "%s: shards[%zu] ('%s'): \"name\" %s", what, i, red,
                           named == -2 ? "contains NUL" : "is not a non-empty string");
    m->path = loc;
    m->name = named == 0 ? name : NULL;
    const char *shown = m->name ? m->name : red;
    json_t *jf = json_object_get(e, "format");
    if (jf) {
        if (!json_is_string(jf))
            return zpi_err_set(err, ZP_ERR_FORMAT, "%s: shard '%s': \"format\" is not a string",
                               what, shown);
        if (!(m->fmt = zpi_format_by_name(json_string_value(jf))))
            return zpi_err_set(err, ZP_ERR_UNSUPPORTED, "%s: shard '%s': unknown format '%s'",
                               what, shown, json_string_value(jf));
    } else {
        /* NULL: no known suffix, a Megatron prefix or nothing (the dataset
         * says which) */
        m->fmt = zpi_format_for_path(loc);
    }
    const char *tk = NULL;
    int htk = get_text(e, "tokenizer", &tk);
    if (htk < 0 && json_object_get(e, "tokenizer"))
        return zpi_err_set(err, ZP_ERR_FORMAT,
                           "%s: shard '%s': \"tokenizer\" is not a non-empty string", what, shown);
    m->tokenizer = htk == 0 ? tk : NULL;
    int hb = get_count(e, "bytes", &m->bytes);
    int hs = get_count(e, "samples", &m->samples);
    if (hb == -2 || hs == -2)
        return zpi_err_set(err, ZP_ERR_FORMAT,
                           "%s: shard '%s': \"%s\" is not a non-negative integer", what, shown,
                           hb == -2 ? "bytes" : "samples");
    m->has_bytes = hb == 0;
    m->has_samples = hs == 0;
    json_t *jh = json_object_get(e, "xxh64");
    if (jh && (!json_is_string(jh) || parse_hex64(json_string_value(jh), &m->xxh64) != 0))
        return zpi_err_set(err, ZP_ERR_FORMAT,
                           "%s: shard '%s': \"xxh64\" is not a string of 16 hex digits", what,
                           shown);
    m->has_xxh64 = jh != NULL;
    return ZP_OK;
}

/* The shards of a parsed document (root NULL: the parse failed, je says
 * why). Takes root. */
static zp_status read_root(json_t *root, const json_error_t *je, const char *what, zpi_err *err,
                           zpi_manifest_entry_fn fn, void *user)
{
    if (!root)
        return zpi_err_set(err, ZP_ERR_FORMAT, "%s: line %d column %d: %s", what, je->line,
                           je->column, je->text);
    zp_status st = ZP_OK;
    json_t *ver = json_object_get(root, "format_version");
    json_t *shards = json_object_get(root, "shards");
    if (!json_is_object(root)) {
        st = zpi_err_set(err, ZP_ERR_FORMAT, "%s: not a JSON object", what);
    } else if (!ver) {
        st = zpi_err_set(err, ZP_ERR_FORMAT, "%s: missing \"format_version\"", what);
    } else if (!json_is_integer(ver) || json_integer_value(ver) != 1) {
        st = zpi_err_set(err, ZP_ERR_FORMAT,
                         "%s: unsupported \"format_version\" (this version reads 1)", what);
    } else if (!json_is_array(shards)) {
        st = zpi_err_set(err, ZP_ERR_FORMAT, "%s: missing \"shards\" array", what);
    } else {
        for (size_t i = 0; i < json_array_size(shards) && st == ZP_OK; i++) {
            zpi_manifest_entry m;
            st = read_entry(what, i, json_array_get(shards, i), err, &m);
            if (st == ZP_OK)
                st = fn(user, i, &m);
        }
    }
    json_decref(root);
    return st;
}

zp_status zpi_manifest_read(const char *json, size_t len, const char *what, zpi_err *err,
                            zpi_manifest_entry_fn fn, void *user)
{
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    return read_root(root, &je, what, err, fn, user);
}

zp_status zpi_manifest_read_file(const char *path, const char *what, zpi_err *err,
                                 zpi_manifest_entry_fn fn, void *user)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int e = errno;
        return zpi_err_set(err, ZP_ERR_IO, "%s: cannot open: %s", what, strerror(e));
    }
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    return read_root(root, &je, what, err, fn, user);
}

/* ------------------------------------------------------------ write */

zp_status zpi_manifest_render(const zpi_manifest_entry *e, size_t n, const char *what,
                              zpi_err *err, char **out, size_t *out_len)
{
    *out = NULL;
    zp_status st = ZP_OK;
    char *text = NULL;
    json_t *root = json_object();
    json_t *arr = json_array();
    if (!root || !arr || json_object_set_new(root, "format_version", json_integer(1)) != 0 ||
        json_object_set(root, "shards", arr) != 0) {
        st = zpi_err_set(err, ZP_ERR_NOMEM, "out of memory writing %s", what);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const zpi_manifest_entry *m = &e[i];
        json_t *o = json_object();
        int bad = !o || json_object_set_new(o, "path", json_string(m->path)) != 0 ||
                  (m->name && json_object_set_new(o, "name", json_string(m->name)) != 0) ||
                  json_object_set_new(o, "format", json_string(m->fmt->name)) != 0 ||
                  (m->tokenizer &&
                   json_object_set_new(o, "tokenizer", json_string(m->tokenizer)) != 0) ||
                  (m->has_bytes &&
                   json_object_set_new(o, "bytes", json_integer((json_int_t)m->bytes)) != 0) ||
                  (m->has_samples &&
                   json_object_set_new(o, "samples", json_integer((json_int_t)m->samples)) != 0);
        if (!bad && m->has_xxh64) {
            char hex[17];
            zpi_fmt(hex, sizeof hex, "%016llx", (unsigned long long)m->xxh64);
            bad = json_object_set_new(o, "xxh64", json_string(hex)) != 0;
        }
        if (bad || json_array_append_new(arr, o) != 0) {
            if (bad)
                json_decref(o);
            /* json_string() refuses text that is not UTF-8 */
            char red[1024];
            zpi_url_redact(m->name ? m->name : m->path, red, sizeof red);
            st = zpi_err_set(err, ZP_ERR_INVALID,
                             "%s: cannot encode shard '%s' (a name or path that is not UTF-8, "
                             "or out of memory)",
                             what, red);
            goto out;
        }
    }
    /* Into our own buffer: the caller frees it with free(), whatever
     * allocator jansson was given. */
    size_t len = json_dumpb(root, NULL, 0, JSON_INDENT(2));
    if (len == 0 || !(text = malloc(len + 1)) ||
        json_dumpb(root, text, len, JSON_INDENT(2)) != len) {
        st = zpi_err_set(err, ZP_ERR_NOMEM, "out of memory writing %s", what);
        goto out;
    }
    text[len] = '\0';
    *out = text;
    text = NULL;
    if (out_len)
        *out_len = len;
out:
    free(text);
    json_decref(arr);
    json_decref(root);
    return st;
}
