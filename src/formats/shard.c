/*
 * shard.c - what every format's load shares: freeing a loaded shard and
 * the check of a loaded shard against what the dataset expects of it.
 */
#include "formats/shard.h"

#include <stdlib.h>

#include "formats/reader.h"
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

zp_status zpi_load_check(const zpi_load_limits *lim, const char *name, const char *path,
                         const uint64_t *hash, const zpi_shard *sh, zpi_err *err)
{
    if (lim->has_xxh64 && hash && *hash != lim->expect_xxh64) {
        return zpi_err_set(err, ZP_ERR_FORMAT,
                           "shard '%s': content hash mismatch: the manifest says xxh64 %016llx, "
                           "'%s' has "
                           "%016llx (the file changed since it was indexed: re-run zephon index)",
                           name, (unsigned long long)lim->expect_xxh64, path,
                           (unsigned long long)*hash);
    }
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
