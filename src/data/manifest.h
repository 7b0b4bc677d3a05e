/*
 * manifest.h - manifests read and written (private; the format is
 * described in docs/datasets.md "Manifest").
 *
 * A manifest is JSON: {"format_version": 1, "shards": [{"path": ...,
 * "name": ..., "format": ..., "bytes": ..., "samples": ..., "xxh64": ...}]}.
 * This file knows the JSON form only; the dataset (dataset.c) owns the
 * shard table and turns entries into shards and back.
 *
 * Thread safety: no shared state; every call works on its arguments.
 */
#ifndef ZP_MANIFEST_H
#define ZP_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "formats/format.h"

/* One shard of a manifest. Strings are borrowed (from the parsed document
 * while reading; from the caller while writing). */
typedef struct zpi_manifest_entry {
    const char *path;      /* "path" as written */
    const char *name;      /* "name"; NULL when absent (reading) or not written */
    const zpi_format *fmt; /* "format", or the one the path's suffix selects; NULL
                              when neither (the dataset takes the path for a Megatron
                              prefix, PATH.bin + PATH.idx, or refuses it) */
    const char *tokenizer; /* "tokenizer": the identity of the tokenizer that made a
                              pre-tokenized shard (zp_tokenizer_ident); NULL: none */
    int has_bytes, has_samples, has_xxh64;
    uint64_t bytes, samples, xxh64;
} zpi_manifest_entry;

/* Called for shards[i] of a manifest being read; a status other than ZP_OK
 * stops the read and is returned (the callee sets err). */
typedef zp_status (*zpi_manifest_entry_fn)(void *user, size_t i, const zpi_manifest_entry *e);

/* Read manifest bytes (len bytes, no NUL needed) and call fn for each shard
 * in order. what names the manifest in messages ("manifest 'm.json'").
 * ZP_ERR_FORMAT for bytes that are not a valid manifest (a JSON syntax
 * error is named by line and column, a bad field by shard and field),
 * ZP_ERR_UNSUPPORTED for an unknown format name; the message in err. */
zp_status zpi_manifest_read(const char *json, size_t len, const char *what, zpi_err *err,
                            zpi_manifest_entry_fn fn, void *user);
/* The same for a manifest file. ZP_ERR_IO when it cannot be read. */
zp_status zpi_manifest_read_file(const char *path, const char *what, zpi_err *err,
                                 zpi_manifest_entry_fn fn, void *user);

/* The manifest of n entries as malloc'd, NUL-terminated JSON (2-space
 * indent, keys in the order path, name, format, bytes, samples, xxh64; the
 * same entries give the same bytes). *out caller frees with free().
 * ZP_ERR_INVALID for a string that is not UTF-8, ZP_ERR_NOMEM. */
zp_status zpi_manifest_render(const zpi_manifest_entry *e, size_t n, const char *what,
                              zpi_err *err, char **out, size_t *out_len);

/* The "path" to write for a shard file (path: as opened; name: as the
 * dataset names it) in a manifest for folder mdir (as given, "" for the
 * current folder, with or without its final '/'), whose canonical form is
 * mdir_real; mdir NULL: a manifest that does not depend on a folder.
 *  1. relative names that already resolve to the same file from mdir, as
 *     named;
 *  2. files under mdir, relative to it;
 *  3. otherwise (always when mdir is NULL) the canonical absolute path.
 * NULL with errno set on failure. Caller frees. */
char *zpi_manifest_path_for(const char *path, const char *name, const char *mdir,
                            const char *mdir_real);

/* Paths: dir (may be "" or end in '/') joined with rel; the folder part of
 * path including its final '/', or "". NULL when out of memory; caller
 * frees. */
char *zpi_path_join(const char *dir, const char *rel);
char *zpi_path_dir(const char *path);

#endif
