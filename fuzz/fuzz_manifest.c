/*
 * fuzz_manifest.c - the manifest reader: zp_dataset_add_manifest_json()
 * (include/zephon/dataset.h) on the fuzzer's bytes, relative paths resolved
 * against fuzz/fixtures/dataset (two small real shards, one jsonl and one
 * jsonl.zst). Checked:
 *
 *  - a failed add leaves the dataset as it was (empty) and a message;
 *  - a manifest that adds shards, once indexed, writes a manifest
 *    (zp_dataset_manifest_json with base_dir NULL) that reads back into the
 *    same shards: names, counts, bytes and fingerprint.
 *
 * Indexing reads the shards the manifest names; it is done only when every
 * shard path lies in the fixture folder (a manifest may name any file).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/dataset_internal.h"
#include "fuzz_common.h"
#include "zephon/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifndef ZP_FUZZ_FIXTURES
#error "ZP_FUZZ_FIXTURES (the fuzz/fixtures folder) must be defined"
#endif

static zp_dataset *new_dataset(void)
{
    zp_dataset_config cfg;
    zp_dataset_config_init(&cfg);
    cfg.max_shard_bytes = (size_t)16 << 20;
    cfg.log = fuzz_quiet_log;
    zp_dataset *ds = NULL;
    zp_status st = zp_dataset_create(&cfg, &ds);
    FUZZ_CHECK(st == ZP_OK && ds, "zp_dataset_create: %s", zp_status_str(st));
    return ds;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *base = ZP_FUZZ_FIXTURES "/dataset";
    zp_dataset *ds = new_dataset();
    zp_status st = zp_dataset_add_manifest_json(ds, (const char *)data, size, base);
    if (st != ZP_OK) {
        const char *m = zp_dataset_errmsg(ds);
        FUZZ_CHECK(m && m[0], "a failed add without a message (%s)", zp_status_str(st));
        FUZZ_CHECK(zp_dataset_num_shards(ds) == 0, "a failed add kept %zu shards",
                   zp_dataset_num_shards(ds));
        zp_dataset_destroy(ds);
        return 0;
    }
    size_t n = zp_dataset_num_shards(ds);
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(zp_dataset_shard_name(ds, i) != NULL, "shard %zu has no name", i);
        const char *p = zpi_dataset_shard_path(ds, i);
        if (!p || strncmp(p, base, strlen(base)) != 0 || strstr(p, "..")) {
            zp_dataset_destroy(ds);
            return 0; /* not a fixture: do not read it */
        }
    }
    if (zp_dataset_index(ds) != ZP_OK) {
        FUZZ_CHECK(zp_dataset_errmsg(ds)[0], "a failed index without a message");
        zp_dataset_destroy(ds);
        return 0;
    }
    char *json = NULL;
    size_t len = 0;
    st = zp_dataset_manifest_json(ds, 0, NULL, &json, &len);
    FUZZ_CHECK(st == ZP_OK && json, "zp_dataset_manifest_json: %s", zp_dataset_errmsg(ds));
    zp_dataset *back = new_dataset();
    st = zp_dataset_add_manifest_json(back, json, len, NULL);
    FUZZ_CHECK(st == ZP_OK, "the written manifest does not read back: %s\n%s",
               zp_dataset_errmsg(back), json);
    FUZZ_CHECK(zp_dataset_num_shards(back) == n, "%zu shards back, %zu written",
               zp_dataset_num_shards(back), n);
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(strcmp(zp_dataset_shard_name(back, i), zp_dataset_shard_name(ds, i)) == 0,
                   "shard %zu: name '%s' back, '%s' written", i, zp_dataset_shard_name(back, i),
                   zp_dataset_shard_name(ds, i));
        FUZZ_CHECK(zp_dataset_shard_samples(back, i) == zp_dataset_shard_samples(ds, i),
                   "shard %zu: samples differ", i);
        FUZZ_CHECK(zp_dataset_shard_bytes(back, i) == zp_dataset_shard_bytes(ds, i),
                   "shard %zu: bytes differ", i);
    }
    FUZZ_CHECK(zp_dataset_num_samples(back) == zp_dataset_num_samples(ds), "sample counts differ");
    FUZZ_CHECK(zp_dataset_fingerprint(back) == zp_dataset_fingerprint(ds),
               "fingerprints differ\n%s", json);
    free(json);
    zp_dataset_destroy(back);
    zp_dataset_destroy(ds);
    return 0;
}
