/*
 * fuzz_index_cache.c - the on-disk index cache's entry reader, reached
 * through zp_dataset_index() (include/zephon/dataset.h) on a dataset with
 * index_cache_dir set: the fuzzer's bytes are the cache entry of the one
 * shard of the dataset (a copy of fuzz/fixtures/dataset/shard-00000.jsonl
 * with a fixed mtime), every "@SHARD@" in them replaced by the shard's
 * absolute path, so that seeds can match the shard.
 *
 * The entry's file name is not computed here: at start-up the library
 * indexes the shard once and the one file it writes into the empty cache
 * folder is the entry (so a change of naming scheme needs no change here).
 *
 * Checked: indexing never fails because of an entry (a corrupt, foreign,
 * stale or out-of-limits entry is ignored and the shard is read), and the
 * count it gives is at least 1 (empty shards are not allowed here).
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "zephon/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifndef ZP_FUZZ_FIXTURES
#error "ZP_FUZZ_FIXTURES (the fuzz/fixtures folder) must be defined"
#endif

static char g_shard[512], g_cache[512], g_entry[1024];

static void copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    FUZZ_CHECK(a && b, "copy %s -> %s", from, to);
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0)
        FUZZ_CHECK(fwrite(buf, 1, n, b) == n, "write %s", to);
    fclose(a);
    FUZZ_CHECK(fclose(b) == 0, "close %s", to);
}

static zp_dataset *new_dataset(void)
{
    zp_dataset_config cfg;
    zp_dataset_config_init(&cfg);
    cfg.index_cache_dir = g_cache;
    cfg.log = fuzz_quiet_log;
    zp_dataset *ds = NULL;
    zp_status st = zp_dataset_create(&cfg, &ds);
    FUZZ_CHECK(st == ZP_OK && ds, "zp_dataset_create: %s", zp_status_str(st));
    st = zp_dataset_add(ds, g_shard);
    FUZZ_CHECK(st == ZP_OK, "zp_dataset_add: %s", zp_dataset_errmsg(ds));
    return ds;
}

static void init(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", fuzz_tmpdir());
    snprintf(g_cache, sizeof g_cache, "%s/index-cache", dir);
    FUZZ_CHECK(mkdir(g_cache, 0700) == 0, "mkdir %s", g_cache);
    char shard[512];
    snprintf(shard, sizeof shard, "%s/shard.jsonl", dir);
    copy_file(ZP_FUZZ_FIXTURES "/dataset/shard-00000.jsonl", shard);
    /* an old mtime (2020-09-13 12:26:40.123456789 UTC): entries are written
     * only for shards not modified in the last seconds */
    struct timespec ts[2] = {{1600000000, 123456789}, {1600000000, 123456789}};
    FUZZ_CHECK(utimensat(AT_FDCWD, shard, ts, 0) == 0, "utimensat %s", shard);
    FUZZ_CHECK(realpath(shard, g_shard) != NULL, "realpath %s", shard);

    /* let the library write the entry, and find its name */
    zp_dataset *ds = new_dataset();
    FUZZ_CHECK(zp_dataset_index(ds) == ZP_OK, "index: %s", zp_dataset_errmsg(ds));
    zp_dataset_destroy(ds);
    DIR *d = opendir(g_cache);
    FUZZ_CHECK(d != NULL, "opendir %s", g_cache);
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        found++;
        snprintf(g_entry, sizeof g_entry, "%s/%s", g_cache, e->d_name);
    }
    closedir(d);
    FUZZ_CHECK(found == 1, "%d files in the cache folder after indexing one shard", found);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_entry[0])
        init();
    /* the entry: data with "@SHARD@" replaced by the shard's path */
    static const char key[] = "@SHARD@";
    const size_t kl = sizeof key - 1, pl = strlen(g_shard);
    char *entry = malloc(size * (pl + 1) + 1);
    FUZZ_CHECK(entry != NULL, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < size;) {
        if (size - i >= kl && memcmp(data + i, key, kl) == 0) {
            memcpy(entry + n, g_shard, pl);
            n += pl;
            i += kl;
        } else {
            entry[n++] = (char)data[i++];
        }
    }
    FILE *f = fopen(g_entry, "wb");
    FUZZ_CHECK(f && fwrite(entry, 1, n, f) == n && fclose(f) == 0, "write %s", g_entry);
    free(entry);

    zp_dataset *ds = new_dataset();
    zp_status st = zp_dataset_index(ds);
    FUZZ_CHECK(st == ZP_OK, "an index cache entry made indexing fail: %s",
               zp_dataset_errmsg(ds));
    FUZZ_CHECK(zp_dataset_num_samples(ds) >= 1, "%llu samples",
               (unsigned long long)zp_dataset_num_samples(ds));
    zp_dataset_destroy(ds);
    return 0;
}
