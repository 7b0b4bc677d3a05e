/*
 * dataset_manifest.c - the manifest that describes a dataset (JSON, as
 * bytes or a file written atomically): paths that resolve from the
 * manifest's folder, names, counts and hashes (docs/datasets.md).
 *
 * Thread safety: as dataset.c (building is not thread-safe).
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
#include "formats/unfinished.h"
#include "io/storage.h"
#include "base/util.h"

/* ------------------------------------------------------------ manifest of the dataset */

/* The manifest of ds as malloc'd, NUL-terminated JSON. base_dir: the folder
 * it is for (zpi_manifest_path_for), NULL for one that does not depend on a
 * folder. what names the manifest in messages. count: every shard's records
 * counted first (else only the counts already known are written). */
static zp_status manifest_json(zp_dataset *ds, int with_hash, const char *base_dir,
                               const char *what, int count, char **out, size_t *out_len)
{
    zp_status st = count ? zpi_ds_index_all(ds) : ZP_OK;
    if (st != ZP_OK)
        return st;
    char *mdir_real = NULL;
    if (base_dir && !(mdir_real = realpath(*base_dir ? base_dir : ".", NULL))) {
        int e = errno;
        return zpi_ds_fail(ds, ZP_ERR_IO, "%s: cannot open its folder '%s': %s", what,
                    *base_dir ? base_dir : ".", strerror(e));
    }
    zpi_manifest_entry *e = calloc(ds->n ? ds->n : 1, sizeof *e);
    char **paths = calloc(ds->n ? ds->n : 1, sizeof *paths);
    if (!e || !paths) {
        st = zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory writing %s", what);
        goto out;
    }
    for (size_t i = 0; i < ds->n && st == ZP_OK; i++) {
        const shard *s = &ds->shards[i];
        /* a remote shard's URL is written as given */
        paths[i] = s->identity ? zpi_strdup(s->path)
                               : zpi_manifest_path_for(s->path, s->name, base_dir, mdir_real);
        if (!paths[i]) {
            int er = errno;
            st = zpi_ds_fail(ds, ZP_ERR_IO, "shard '%s': cannot resolve '%s': %s", s->name, s->path,
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
        e[i].has_bytes = 1;
        e[i].has_samples = s->samples != UINT64_MAX;
        e[i].bytes = s->bytes;
        e[i].samples = s->samples;
        if (with_hash && (st = zpi_ds_hash_file(ds, s, &e[i].xxh64)) == ZP_OK)
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
        return zpi_ds_fail(ds, ZP_ERR_INVALID, "no output given");
    *out = NULL;
    if (len)
        *len = 0;
    return manifest_json(ds, with_hash, base_dir, "manifest", 1, out, len);
}

zp_status zpi_dataset_listing_json(zp_dataset *ds, const char *base_dir, char **out, size_t *len)
{
    RETURN_IF_UNUSABLE(ds);
    *out = NULL;
    *len = 0;
    return manifest_json(ds, 0, base_dir, "manifest", 0, out, len);
}

/* ------------------------------------------------------------ packed */

static int put_u64le(zpi_buf *b, uint64_t v)
{
    unsigned char x[8];
    for (int i = 0; i < 8; i++)
        x[i] = (unsigned char)(v >> (8 * i));
    return zpi_buf_append(b, x, 8);
}

static int put_str(zpi_buf *b, const char *s)
{
    size_t n = strlen(s);
    if (n > UINT32_MAX)
        return -1;
    unsigned char x[4] = {(unsigned char)n, (unsigned char)(n >> 8), (unsigned char)(n >> 16),
                          (unsigned char)(n >> 24)};
    return zpi_buf_append(b, x, 4) || zpi_buf_append(b, s, n + 1) ? -1 : 0;
}

/* The canonical absolute path of a local file as the manifest without a
 * folder writes it (its folder's realpath + its base name), the folder's
 * realpath kept in *dir / *real for the next shard of the same folder (a
 * realpath() costs a readlink per path component). NULL with errno. */
static char *abs_cached(const char *path, char **dir, char **real)
{
    char *d = zpi_path_dir(path);
    if (!d)
        return NULL;
    if (!*dir || strcmp(*dir, d) != 0) {
        char *r = realpath(*d ? d : ".", NULL);
        if (!r) {
            free(d);
            return NULL;
        }
        free(*dir);
        free(*real);
        *dir = d;
        *real = r;
    } else {
        free(d);
    }
    return zpi_path_join(*real, path + strlen(*dir));
}

zp_status zp_dataset_pack(zp_dataset *ds, char **out, size_t *len)
{
    RETURN_IF_UNUSABLE(ds);
    if (!out)
        return zpi_ds_fail(ds, ZP_ERR_INVALID, "no output given");
    *out = NULL;
    if (len)
        *len = 0;
    zp_status st = zpi_ds_index_all(ds);
    if (st != ZP_OK)
        return st;
    zpi_buf b = {0};
    char *dir = NULL, *real = NULL;
    int bad = zpi_buf_append(&b, ZPI_PACK_MAGIC, ZPI_PACK_MAGIC_LEN) || put_u64le(&b, ds->n);
    for (size_t i = 0; i < ds->n && !bad && st == ZP_OK; i++) {
        const shard *s = &ds->shards[i];
        /* as manifest_json() without a folder: a URL as given, a file by its
         * canonical absolute path, the name when it differs */
        char *path = s->identity ? zpi_strdup(s->path) : abs_cached(s->path, &dir, &real);
        if (!path) {
            int er = errno;
            st = zpi_ds_fail(ds, ZP_ERR_IO, "shard '%s': cannot resolve '%s': %s", s->name,
                             s->path, strerror(er));
            break;
        }
        int named = strcmp(path, s->name) != 0;
        uint64_t flags = (named ? ZPI_PACK_NAME : 0) | ZPI_PACK_SAMPLES |
                         (s->has_hash ? ZPI_PACK_XXH64 : 0);
        bad = put_u64le(&b, flags) || put_u64le(&b, s->bytes) || put_u64le(&b, s->samples) ||
              put_u64le(&b, s->has_hash ? s->xxh64 : 0) || put_str(&b, path) ||
              (named && put_str(&b, s->name)) || put_str(&b, s->fmt->name);
        free(path);
    }
    free(dir);
    free(real);
    if (st == ZP_OK && bad)
        st = zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory packing %zu shards", ds->n);
    if (st != ZP_OK) {
        zpi_buf_free(&b);
        return st;
    }
    *out = b.p;
    if (len)
        *len = b.len;
    return ZP_OK;
}

zp_status zp_dataset_write_manifest(zp_dataset *ds, const char *path, int with_hash)
{
    RETURN_IF_UNUSABLE(ds);
    if (!path || !*path)
        return zpi_ds_fail(ds, ZP_ERR_INVALID, "no manifest path given");
    zpi_buf what = {0};
    char *mdir = zpi_path_dir(path), *text = NULL;
    size_t len = 0;
    zp_status st;
    if (!mdir || zpi_buf_printf(&what, "manifest '%s'", path) != 0) {
        st = zpi_ds_fail(ds, ZP_ERR_NOMEM, "out of memory writing manifest '%s'", path);
    } else if ((st = manifest_json(ds, with_hash, mdir, what.p, 1, &text, &len)) == ZP_OK &&
               zpi_write_file_atomic(path, text, len) != 0) {
        int e = errno;
        st = zpi_ds_fail(ds, ZP_ERR_IO, "manifest '%s': cannot write: %s", path, strerror(e));
    }
    free(text);
    free(mdir);
    zpi_buf_free(&what);
    return st;
}
