/*
 * index_store.c - the index store: record counts of shard files kept on
 * disk between runs (index_store.h, docs/datasets.md "Index store").
 *
 * Ownership: the store owns a copy of its folder's path.
 * Thread safety: one thread at a time per store; processes and hosts may
 * share the folder.
 */
#include "data/index_store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <xxhash.h>

#include "base/util.h"

struct zpi_index_store {
    char *dir; /* owned */
    zp_log_fn log;
    void *log_user;
};

static void store_log(const zpi_index_store *st, zp_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void store_log(const zpi_index_store *st, zp_log_level lvl, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zpi_vlog(st->log, st->log_user, lvl, fmt, ap);
    va_end(ap);
}

zp_status zpi_index_store_create(const char *dir, zp_log_fn log, void *log_user,
                                 zpi_index_store **out)
{
    *out = NULL;
    zpi_index_store *st = calloc(1, sizeof *st);
    if (!st || !(st->dir = zpi_strdup(dir))) {
        free(st);
        return ZP_ERR_NOMEM;
    }
    st->log = log;
    st->log_user = log_user;
    *out = st;
    return ZP_OK;
}

void zpi_index_store_destroy(zpi_index_store *st)
{
    if (!st)
        return;
    free(st->dir);
    free(st);
}

const char *zpi_index_store_dir(const zpi_index_store *st) { return st ? st->dir : NULL; }

/* ------------------------------------------------------------ entries */

#define ENTRY_VERSION 1 /* "zephon_index_cache": 1 (the format's tag, kept) */
#define ENTRY_MAX_BYTES ((off_t)64 << 10)
#define ENTRY_HASH_SEED 0x7a70696478763031ULL /* "zpidxv01" */
/* An entry is not written for a shard modified less than this long ago:
 * a same-size rewrite within the file system's timestamp granularity (1-2 s
 * on some) would keep the mtime and could not be told apart. */
#define ENTRY_RACY_NS ((int64_t)2000000000)

static int64_t mtime_ns_of(const struct stat *sb)
{
    return (int64_t)sb->st_mtim.tv_sec * 1000000000 + (int64_t)sb->st_mtim.tv_nsec;
}

void zpi_index_key_free(zpi_index_key *k)
{
    free(k->abs);
    free(k->file);
}

int zpi_index_key_init(const zpi_index_store *st, const char *path, const zpi_format *fmt,
                       zpi_index_key *k)
{
    memset(k, 0, sizeof *k);
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return -1;
    k->abs = realpath(path, NULL);
    if (!k->abs)
        return -1;
    k->format = fmt->name;
    k->bytes = (uint64_t)sb.st_size;
    k->mtime_ns = mtime_ns_of(&sb);
    size_t a = strlen(k->abs), f = strlen(k->format);
    char *key = malloc(a + 1 + f);
    if (!key) {
        zpi_index_key_free(k);
        return -1;
    }
    memcpy(key, k->abs, a + 1); /* the NUL separates path and format */
    memcpy(key + a + 1, k->format, f);
    unsigned long long h = XXH64(key, a + 1 + f, ENTRY_HASH_SEED);
    free(key);
    zpi_buf file = {0};
    size_t dl = strlen(st->dir);
    if (zpi_buf_printf(&file, "%s%s%016llx.json", st->dir,
                       dl && st->dir[dl - 1] == '/' ? "" : "/", h) != 0) {
        zpi_buf_free(&file);
        zpi_index_key_free(k);
        return -1;
    }
    k->file = file.p;
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

static void store_warn(zpi_index_store *st, zpi_index_pass *pass, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A cache folder that cannot be read or written: the first such failure of
 * an index call at WARN, the rest at DEBUG (one message, not one per shard). */
static void store_warn(zpi_index_store *st, zpi_index_pass *pass, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    zpi_vfmt(buf, sizeof buf, fmt, ap);
    va_end(ap);
    store_log(st, pass->warned ? ZP_LOG_DEBUG : ZP_LOG_WARN, "%s (continuing without it)", buf);
    pass->warned = 1;
}

int zpi_index_store_lookup(zpi_index_store *st, const zpi_index_key *k, const char *name,
                           const zpi_load_limits *lim, uint64_t *samples, zpi_index_pass *pass)
{
    int fd = open(k->file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            store_log(st, ZP_LOG_DEBUG, "index store: shard '%s': no entry '%s'", name, k->file);
        else
            store_warn(st, pass, "index store '%s': cannot read '%s': %s", st->dir, k->file,
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
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > ENTRY_MAX_BYTES) {
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
        ver != ENTRY_VERSION || !json_is_string(jp) || !json_is_string(jf) ||
        entry_int(root, "bytes", 0, &bytes) != 0 ||
        entry_int(root, "mtime_ns", INT64_MIN, &mtime) != 0 ||
        entry_int(root, "samples", 0, &n) != 0 ||
        entry_int(root, "longest_record", 0, &longest) != 0 ||
        entry_int(root, "decoded_bytes", 0, &decoded) != 0) {
        why = "not an index store entry (version 1)";
        goto corrupt;
    }
    if (strcmp(json_string_value(jp), k->abs) != 0 || strcmp(json_string_value(jf), k->format) != 0)
        store_log(st, ZP_LOG_DEBUG, "index store: shard '%s': '%s' is the entry of another shard",
                        name, k->file);
    else if ((uint64_t)bytes != k->bytes || (int64_t)mtime != k->mtime_ns)
        store_log(st, ZP_LOG_DEBUG,
                        "index store: shard '%s': stale entry (it says %lld bytes, mtime %lld ns; "
                        "the file has %llu bytes, mtime %lld ns)",
                        name, (long long)bytes, (long long)mtime, (unsigned long long)k->bytes,
                        (long long)k->mtime_ns);
    else if ((uint64_t)longest > (uint64_t)lim->max_record_bytes ||
             (uint64_t)decoded > (uint64_t)lim->max_shard_bytes ||
             (n == 0 && !lim->allow_empty))
        store_log(st, ZP_LOG_DEBUG,
                        "index store: shard '%s': entry outside this dataset's limits; loading it",
                        name);
    else {
        *samples = (uint64_t)n;
        hit = 1;
    }
    goto out;
corrupt:
    store_log(st, ZP_LOG_WARN, "index store: shard '%s': ignoring corrupt entry '%s': %s",
                    name, k->file, why);
out:
    json_decref(root);
    free(buf);
    close(fd);
    return hit;
}

/* Written to a temporary file in the folder and renamed over the entry, so
 * a reader sees the old entry or the new one, never part of one. Not
 * zpi_write_file_atomic(): hosts sharing the folder need mkstemp's unique
 * names (a pid is not unique across hosts), and an entry that a crash loses
 * costs one load, not worth an fsync per shard. */
void zpi_index_store_save(zpi_index_store *st, const zpi_index_key *k, const char *path,
                          const char *name, const zpi_shard *sh, zpi_index_pass *pass)
{
    struct stat sb;
    if (stat(path, &sb) != 0 || (uint64_t)sb.st_size != k->bytes ||
        mtime_ns_of(&sb) != k->mtime_ns || sh->file_bytes != k->bytes) {
        store_log(st, ZP_LOG_DEBUG,
                        "index store: shard '%s' changed while it was indexed; not stored",
                        name);
        return;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t now_ns = (int64_t)now.tv_sec * 1000000000 + (int64_t)now.tv_nsec;
    if (k->mtime_ns > now_ns - ENTRY_RACY_NS) {
        store_log(st, ZP_LOG_DEBUG,
                        "index store: shard '%s' was modified less than 2 s ago; not stored",
                        name);
        return;
    }
    uint64_t longest = 0; /* 0 for shards read on demand (no offsets: their
                             records are checked as they are read) */
    for (uint64_t i = 0; sh->offsets && i < sh->n_records; i++) {
        uint64_t len = sh->offsets[i + 1] - sh->offsets[i] - 1; /* without its newline */
        if (len > longest)
            longest = len;
    }
    json_t *o = json_object();
    char *text = NULL, *tmp = NULL;
    int fd = -1;
    if (!o || json_object_set_new(o, "zephon_index_cache", json_integer(ENTRY_VERSION)) != 0 ||
        json_object_set_new(o, "path", json_string(k->abs)) != 0 ||
        json_object_set_new(o, "format", json_string(k->format)) != 0 ||
        json_object_set_new(o, "bytes", json_integer((json_int_t)k->bytes)) != 0 ||
        json_object_set_new(o, "mtime_ns", json_integer((json_int_t)k->mtime_ns)) != 0 ||
        json_object_set_new(o, "samples", json_integer((json_int_t)sh->n_records)) != 0 ||
        json_object_set_new(o, "longest_record", json_integer((json_int_t)longest)) != 0 ||
        json_object_set_new(o, "decoded_bytes", json_integer((json_int_t)sh->data_len)) != 0 ||
        !(text = json_dumps(o, JSON_COMPACT))) {
        /* a path that is not UTF-8 cannot be a JSON string: not cached */
        store_log(st, ZP_LOG_DEBUG, "index store: shard '%s': cannot encode an entry",
                        name);
        goto out;
    }
    /* ".<entry>.tmp-XXXXXX": mkstemp makes the name unique across threads,
     * processes and hosts sharing the folder. */
    const char *base = strrchr(k->file, '/') + 1;
    size_t dl = (size_t)(base - k->file), tl = strlen(k->file) + 16;
    if (!(tmp = malloc(tl))) {
        store_warn(st, pass, "index store: out of memory writing the entry of shard '%s'", name);
        goto out;
    }
    zpi_fmt(tmp, tl, "%.*s.%s.tmp-XXXXXX", (int)dl, k->file, base);
    fd = mkstemp(tmp);
    if (fd < 0) {
        int e = errno;
        store_warn(st, pass, "index store '%s': cannot write the entry of shard '%s': %s",
                   st->dir, name, strerror(e));
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
        store_warn(st, pass, "index store '%s': cannot write '%s' (shard '%s'): %s", st->dir,
                   k->file, name, strerror(e));
    }
out:
    free(tmp);
    free(text);
    json_decref(o);
}

