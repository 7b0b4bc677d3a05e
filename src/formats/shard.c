/*
 * shard.c - what every format's load shares: freeing a loaded shard and
 * the check of a loaded shard against what the dataset expects of it.
 */
#include "formats/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/reader.h"
#include "base/filehash.h"
#include "base/util.h"

void zpi_shard_free(zpi_shard *s)
{
    if (!s)
        return;
    if (s->rd) {
        s->rd->close(s->rd);
        s->rd = NULL;
    }
    free(s->data);
    free(s->offsets);
    s->data = NULL;
    s->offsets = NULL;
    s->data_len = 0;
    s->n_records = 0;
}

zp_status zpi_load_check_size(const zpi_load_limits *lim, const char *name, const char *path,
                              zpi_err *err)
{
    if (!lim->has_bytes)
        return ZP_OK;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int e = errno;
        return zpi_err_set(err, ZP_ERR_IO, "shard '%s': cannot open '%s': %s", name, path,
                           strerror(e));
    }
    if (!S_ISREG(sb.st_mode))
        return zpi_err_set(err, ZP_ERR_IO, "shard '%s': '%s' is not a regular file", name, path);
    if ((uint64_t)sb.st_size != lim->expect_bytes)
        return zpi_err_set(err, ZP_ERR_FORMAT,
                           "shard '%s': stale manifest: it says %llu bytes but '%s' has %llu "
                           "bytes (re-run zephon index; under MPI, rank 0 saw that size: does "
                           "this node see another file?)",
                           name, (unsigned long long)lim->expect_bytes, path,
                           (unsigned long long)sb.st_size);
    return ZP_OK;
}

zp_status zpi_load_check_hash(const zpi_load_limits *lim, const char *name, const char *path,
                              uint64_t hash, zpi_err *err)
{
    if (!lim->has_xxh64 || hash == lim->expect_xxh64)
        return ZP_OK;
    return zpi_err_set(err, ZP_ERR_FORMAT,
                       "shard '%s': content hash mismatch: the manifest says xxh64 %016llx, "
                       "'%s' has "
                       "%016llx (the file changed since it was indexed: re-run zephon index)",
                       name, (unsigned long long)lim->expect_xxh64, path,
                       (unsigned long long)hash);
}

zp_status zpi_load_check_file_hash(const zpi_load_limits *lim, const char *name, const char *path,
                                   zpi_err *err)
{
    if (!lim->has_xxh64)
        return ZP_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return zpi_err_set(err, ZP_ERR_IO, "shard '%s': cannot open '%s': %s", name, path,
                           strerror(errno));
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    uint64_t h = 0, off = 0;
    int e = zpi_xxh64_fd(fd, &h, &off);
    close(fd);
    if (e == ENOMEM)
        return zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory", name);
    if (e)
        return zpi_err_set(err, ZP_ERR_IO, "shard '%s': read error at byte %llu of '%s': %s",
                           name, (unsigned long long)off, path, strerror(e));
    return zpi_load_check_hash(lim, name, path, h, err);
}

zp_status zpi_load_check(const zpi_load_limits *lim, const char *name, const char *path,
                         const uint64_t *hash, const zpi_shard *sh, zpi_err *err)
{
    zp_status st = hash ? zpi_load_check_hash(lim, name, path, *hash, err) : ZP_OK;
    if (st != ZP_OK)
        return st;
    if (lim->has_records && sh->n_records != lim->expect_records) {
        if (lim->records_from_manifest)
            return zpi_err_set(err, ZP_ERR_FORMAT,
                               "shard '%s': has %llu records but the manifest says %llu (stale "
                               "manifest: re-run zephon index)", name,
                               (unsigned long long)sh->n_records,
                               (unsigned long long)lim->expect_records);
        return zpi_err_set(err, ZP_ERR_FORMAT,
                           "shard '%s': has %llu records but had %llu when it was indexed (the "
                           "file changed)", name, (unsigned long long)sh->n_records,
                           (unsigned long long)lim->expect_records);
    }
    return ZP_OK;
}

void zpi_shard_set_data_keep(zpi_shard *out, char *data, size_t len, size_t cap)
{
    memset(data + len, 0, ZPI_JSON_PADDING);
    out->data = data;
    out->data_len = len;
    out->data_cap = cap;
}

void zpi_shard_set_data(zpi_shard *out, char *data, size_t len, size_t cap)
{
    if (cap - len > ((size_t)1 << 20) && cap - len > len / 4) {
        char *d = realloc(data, len + ZPI_JSON_PADDING);
        if (d) {
            data = d;
            cap = len;
        }
    }
    zpi_shard_set_data_keep(out, data, len, cap);
}
