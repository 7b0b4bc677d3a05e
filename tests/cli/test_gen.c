/* test_gen.c - the generator module (src/api/gen.c) called in-process: the
 * manifest comes back as bytes that read as the dataset written, the
 * output does not depend on the thread count, and bad settings or an
 * unwritable folder fail with a message naming them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "api/gen.h"
#include "testutil.h"
#include "zephon.h"

static void test_gen_manifest_in_memory(void **state)
{
    (void)state;
    char *dir = zpt_tmpdir();
    assert_non_null(dir);
    zpi_gen_config c;
    zpi_gen_config_init(&c);
    c.out = dir;
    c.shards = 3;
    c.samples_per_shard = 50;
    c.no_manifest_file = 1;
    zpi_gen_result r;
    zpi_err err = {0};
    assert_int_equal(zpi_gen(&c, &r, &err), ZP_OK);
    assert_non_null(r.manifest);
    assert_int_equal(strlen(r.manifest), r.manifest_len);
    assert_int_equal(r.samples, 150);
    assert_true(r.written_bytes > 0 && r.jsonl_bytes > r.written_bytes);
    /* nothing but the shards on disk */
    char *mpath = zpt_path(dir, "manifest.json");
    struct stat sb;
    assert_int_not_equal(stat(mpath, &sb), 0);

    zp_dataset *ds = NULL;
    assert_int_equal(zp_dataset_create(NULL, &ds), ZP_OK);
    assert_int_equal(zp_dataset_add_manifest_json(ds, r.manifest, r.manifest_len, dir), ZP_OK);
    assert_int_equal(zp_dataset_num_shards(ds), 3);
    assert_int_equal(zp_dataset_num_samples(ds), 150);
    assert_string_equal(zp_dataset_shard_name(ds, 2), "shard-00002.jsonl.zst");
    zp_dataset_destroy(ds);
    free(r.manifest);
    free(mpath);
    zpt_rmtree(dir);
    free(dir);
}

/* The manifest with hashes (of the shards' bytes) from 1 and 3 threads, and
 * the file written next to the shards. */
static void test_gen_same_output_any_threads(void **state)
{
    (void)state;
    char *manifests[2];
    char *dir = zpt_tmpdir();
    for (int k = 0; k < 2; k++) {
        zpi_gen_config c;
        zpi_gen_config_init(&c);
        c.out = dir;
        c.shards = 5;
        c.total_bytes = 300000;
        c.uneven = 1;
        c.hash = 1;
        c.seed = 9;
        c.threads = k ? 3 : 1;
        zpi_gen_result r;
        zpi_err err = {0};
        assert_int_equal(zpi_gen(&c, &r, &err), ZP_OK);
        manifests[k] = r.manifest;
        char *mpath = zpt_path(dir, "manifest.json");
        size_t len = 0;
        char *file = zpt_read_file(mpath, &len);
        assert_non_null(file);
        assert_int_equal(len, r.manifest_len);
        assert_memory_equal(file, r.manifest, len);
        free(file);
        free(mpath);
    }
    assert_non_null(strstr(manifests[0], "\"xxh64\""));
    assert_string_equal(manifests[0], manifests[1]);
    free(manifests[0]);
    free(manifests[1]);
    zpt_rmtree(dir);
    free(dir);
}

static void test_gen_errors_name_setting_and_file(void **state)
{
    (void)state;
    char *dir = zpt_tmpdir();
    zpi_gen_config c;
    zpi_gen_config_init(&c);
    c.out = dir;
    c.shards = 0;
    zpi_gen_result r;
    zpi_err err = {0};
    assert_int_equal(zpi_gen(&c, &r, &err), ZP_ERR_INVALID);
    assert_non_null(strstr(zpi_err_msg(&err), "shards = 0"));
    assert_null(r.manifest);

    c.shards = 2;
    c.samples_per_shard = 3;
    c.total_bytes = 1000;
    assert_int_equal(zpi_gen(&c, &r, &err), ZP_ERR_INVALID);
    assert_non_null(strstr(zpi_err_msg(&err), "total_bytes = 1000"));

    /* a folder below a regular file cannot be created */
    char *file = zpt_path(dir, "plain");
    assert_int_equal(zpt_write_file(file, "x", 1), 0);
    char *below = zpt_path(file, "data");
    c.out = below;
    c.total_bytes = 0;
    assert_int_equal(zpi_gen(&c, &r, &err), ZP_ERR_IO);
    assert_non_null(strstr(zpi_err_msg(&err), below));
    assert_null(r.manifest);
    free(below);
    free(file);
    zpt_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gen_manifest_in_memory),
        cmocka_unit_test(test_gen_same_output_any_threads),
        cmocka_unit_test(test_gen_errors_name_setting_and_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
