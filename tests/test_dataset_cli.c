/* test_dataset_cli.c - `zephon gen` and `zephon index` end to end: the
 * generated data is what the manifest says, deterministic, readable by the
 * library; the index command writes the same description. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "data/dataset_internal.h"
#include "base/json.h"
#include "testutil.h"
#include "zephon/dataset.h"

static char *tmp;

/* Run `ZP_CLI args` with stdout+stderr into tmp/out.txt; exit status. */
static int run_cli(const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s > '%s/out.txt' 2>&1", ZP_CLI, args, tmp);
    int r = system(cmd);
    return WIFEXITED(r) ? WEXITSTATUS(r) : -1;
}

static char *cli_output(void)
{
    char *p = zpt_path(tmp, "out.txt");
    char *o = zpt_read_file(p, NULL);
    free(p);
    return o;
}

static void assert_contains(const char *hay, const char *needle)
{
    if (!strstr(hay, needle))
        fail_msg("\"%s\" does not contain \"%s\"", hay, needle);
}

static zp_dataset *open_manifest(const char *dir, const char *name)
{
    char *m = zpt_path(dir, name);
    zp_dataset *ds;
    assert_int_equal(zp_dataset_create(NULL, &ds), ZP_OK);
    if (zp_dataset_add(ds, m) != ZP_OK)
        fail_msg("%s", zp_dataset_errmsg(ds));
    free(m);
    return ds;
}

/* Load every shard, parse every record: ids run 0..n-1 in order, text is a
 * non-trivial string. Returns the decoded bytes. */
static uint64_t check_records(zp_dataset *ds)
{
    zpi_json *j;
    assert_int_equal(zpi_json_create(&j), ZP_OK);
    uint64_t id = 0, decoded = 0;
    for (size_t s = 0; s < zp_dataset_num_shards(ds); s++) {
        zpi_shard sh;
        zpi_err err = {0};
        zp_status st = zpi_dataset_shard_format(ds, s)->load(zpi_dataset_shard_path(ds, s),
                                                            zp_dataset_shard_name(ds, s),
                                                            zpi_dataset_shard_limits(ds, s), &sh, &err);
        if (st != ZP_OK)
            fail_msg("%s", err.msg);
        assert_int_equal(sh.n_records, zp_dataset_shard_samples(ds, s));
        assert_int_equal(sh.file_bytes, zp_dataset_shard_bytes(ds, s));
        decoded += sh.data_len;
        for (uint64_t i = 0; i < sh.n_records; i++, id++) {
            const char *rec = sh.data + sh.offsets[i];
            size_t n = (size_t)(sh.offsets[i + 1] - 1 - sh.offsets[i]);
            if (zpi_json_parse(j, rec, n, &err) != ZP_OK)
                fail_msg("shard %zu record %llu: %s", s, (unsigned long long)i, err.msg);
            char want[64];
            int wl = snprintf(want, sizeof want, "{\"id\": %llu, ", (unsigned long long)id);
            assert_memory_equal(rec, want, (size_t)wl);
            const char *t;
            size_t tn;
            assert_int_equal(zpi_json_get_string(j, "text", &t, &tn), ZP_OK);
            assert_true(tn >= 150 && tn <= 20300);
        }
        zpi_shard_free(&sh);
    }
    zpi_json_destroy(j);
    assert_int_equal(id, zp_dataset_num_samples(ds));
    return decoded;
}

static void test_gen_small(void **state)
{
    (void)state;
    char args[1024];
    snprintf(args, sizeof args, "gen --out '%s/g1' --shards 3 --samples-per-shard 50 --seed 7 --hash",
             tmp);
    if (run_cli(args) != 0)
        fail_msg("%s", cli_output());
    char *out = cli_output();
    assert_contains(out, "150 samples");
    free(out);
    char *dir = zpt_path(tmp, "g1");
    zp_dataset *ds = open_manifest(dir, "manifest.json");
    assert_int_equal(zp_dataset_num_shards(ds), 3);
    assert_int_equal(zp_dataset_num_samples(ds), 150);
    assert_string_equal(zp_dataset_shard_name(ds, 0), "shard-00000.jsonl.zst");
    assert_int_equal(zp_dataset_verify(ds), ZP_OK);
    check_records(ds);
    zp_dataset_destroy(ds);
    free(dir);
}

static void test_gen_deterministic(void **state)
{
    (void)state;
    char args[1024];
    snprintf(args, sizeof args, "gen --out '%s/d1' --shards 4 --samples-per-shard 40 --seed 3 --threads 1", tmp);
    assert_int_equal(run_cli(args), 0);
    snprintf(args, sizeof args, "gen --out '%s/d2' --shards 4 --samples-per-shard 40 --seed 3 --threads 4", tmp);
    assert_int_equal(run_cli(args), 0);
    snprintf(args, sizeof args, "gen --out '%s/d3' --shards 4 --samples-per-shard 40 --seed 4", tmp);
    assert_int_equal(run_cli(args), 0);
    const char *files[] = {"manifest.json", "shard-00000.jsonl.zst", "shard-00003.jsonl.zst"};
    for (size_t i = 0; i < 3; i++) {
        char a[512], b[512], c[512];
        snprintf(a, sizeof a, "%s/d1/%s", tmp, files[i]);
        snprintf(b, sizeof b, "%s/d2/%s", tmp, files[i]);
        snprintf(c, sizeof c, "%s/d3/%s", tmp, files[i]);
        size_t na, nb, nc;
        char *da = zpt_read_file(a, &na), *db = zpt_read_file(b, &nb), *dc = zpt_read_file(c, &nc);
        assert_non_null(da);
        assert_non_null(db);
        assert_non_null(dc);
        assert_int_equal(na, nb);
        assert_memory_equal(da, db, na);
        if (i > 0) /* another seed, other text */
            assert_true(na != nc || memcmp(da, dc, na) != 0);
        free(da);
        free(db);
        free(dc);
    }
}

static void test_gen_bytes_uneven_plain(void **state)
{
    (void)state;
    char args[1024];
    snprintf(args, sizeof args, "gen --out '%s/u' --shards 4 --bytes 2M --uneven --format jsonl", tmp);
    if (run_cli(args) != 0)
        fail_msg("%s", cli_output());
    char *dir = zpt_path(tmp, "u");
    zp_dataset *ds = open_manifest(dir, "manifest.json");
    assert_int_equal(zp_dataset_num_shards(ds), 4);
    assert_string_equal(zp_dataset_shard_name(ds, 3), "shard-00003.jsonl");
    uint64_t decoded = check_records(ds);
    assert_true(decoded > 1800000 && decoded < 2200000);
    /* each shard about half the previous one */
    for (size_t s = 1; s < 4; s++) {
        double r = (double)zp_dataset_shard_bytes(ds, s) / (double)zp_dataset_shard_bytes(ds, s - 1);
        assert_true(r > 0.3 && r < 0.75);
    }
    zp_dataset_destroy(ds);
    free(dir);
}

static void test_index_matches_gen(void **state)
{
    (void)state;
    char args[1024];
    snprintf(args, sizeof args, "gen --out '%s/i' --shards 3 --samples-per-shard 30", tmp);
    assert_int_equal(run_cli(args), 0);
    /* the glob is expanded by the library, not the shell */
    snprintf(args, sizeof args, "index --hash -o '%s/i/idx.json' '%s/i/*.jsonl.zst'", tmp, tmp);
    if (run_cli(args) != 0)
        fail_msg("%s", cli_output());
    char *out = cli_output();
    assert_contains(out, "indexed 3 shards, 90 samples");
    free(out);
    char *dir = zpt_path(tmp, "i");
    zp_dataset *a = open_manifest(dir, "manifest.json");
    zp_dataset *b = open_manifest(dir, "idx.json");
    /* names relative to the manifest's folder: the same description */
    assert_string_equal(zp_dataset_shard_name(b, 0), "shard-00000.jsonl.zst");
    assert_int_equal(zp_dataset_fingerprint(a), zp_dataset_fingerprint(b));
    assert_int_equal(zp_dataset_verify(b), ZP_OK);
    zp_dataset_destroy(a);
    zp_dataset_destroy(b);
    free(dir);
}

static void test_index_errors(void **state)
{
    (void)state;
    char *bad = zpt_path(tmp, "bad.jsonl");
    assert_int_equal(zpt_write_file(bad, "{\"text\": \"a\"}\n\n{\"text\": \"b\"}\n", (size_t)-1), 0);
    char args[1024];
    snprintf(args, sizeof args, "index -o '%s/bad.json' '%s'", tmp, bad);
    assert_int_equal(run_cli(args), 1);
    char *out = cli_output();
    assert_contains(out, "bad.jsonl");
    assert_contains(out, "empty record at line 2");
    free(out);
    snprintf(args, sizeof args, "index -o '%s/none.json' '%s/*.nomatch.jsonl'", tmp, tmp);
    assert_int_equal(run_cli(args), 1);
    out = cli_output();
    assert_contains(out, "matches no file");
    free(out);
    assert_int_equal(run_cli("index"), 2);
    snprintf(args, sizeof args, "gen --out '%s/x' --format parquet", tmp);
    assert_int_equal(run_cli(args), 2);
    free(bad);
}

/* Whole file dir/name (asserted to exist); caller frees. */
static char *read_in(const char *dir, const char *name, size_t *len)
{
    char *p = zpt_path(dir, name);
    char *d = zpt_read_file(p, len);
    if (!d)
        fail_msg("cannot read '%s'", p);
    free(p);
    return d;
}

/* `zephon index` never reads its own output: run again on the folder or a
 * glob that holds it, it writes the same bytes (and the same shards, not
 * the shards twice). Another manifest matched by a glob is refused. */
static void test_index_idempotent(void **state)
{
    (void)state;
    char args[2048];
    snprintf(args, sizeof args, "gen --out '%s/r' --shards 3 --samples-per-shard 20", tmp);
    assert_int_equal(run_cli(args), 0);
    char *dir = zpt_path(tmp, "r");
    const char *inputs[] = {"'%s/r'", "'%s/r/'", "'%s/r/*'"};
    size_t len0 = 0;
    char *first = NULL;
    for (int hash = 0; hash < 2; hash++) {
        for (size_t i = 0; i < 3; i++) {
            for (int again = 0; again < 2; again++) {
                char in[1024];
                snprintf(in, sizeof in, inputs[i], tmp);
                snprintf(args, sizeof args, "index %s -o '%s/r/manifest.json' %s",
                         hash ? "--hash" : "", tmp, in);
                if (run_cli(args) != 0)
                    fail_msg("%s: %s", args, cli_output());
                char *out = cli_output();
                assert_contains(out, "indexed 3 shards, 60 samples");
                free(out);
                size_t len;
                char *m = read_in(dir, "manifest.json", &len);
                if (!first) {
                    first = m;
                    len0 = len;
                    continue;
                }
                if (len != len0 || memcmp(m, first, len) != 0)
                    fail_msg("%s: a different manifest:\n%s\nbefore:\n%s", args, m, first);
                free(m);
            }
        }
        if (!hash) { /* with --hash: another manifest, again the same each time */
            free(first);
            first = NULL;
        }
    }
    assert_contains(first, "\"xxh64\"");
    assert_null(strstr(first, "\"path\": \"manifest.json\""));
    zp_dataset *ds = open_manifest(dir, "manifest.json");
    assert_int_equal(zp_dataset_num_shards(ds), 3);
    assert_int_equal(zp_dataset_verify(ds), ZP_OK);
    zp_dataset_destroy(ds);
    free(first);
    /* a glob that matches both the shards and another manifest of them */
    snprintf(args, sizeof args, "index -o '%s/other.json' '%s/r/*'", tmp, tmp);
    assert_int_equal(run_cli(args), 1);
    char *out = cli_output();
    assert_contains(out, "is the same file as shard 'shard-00000.jsonl.zst'");
    free(out);
    free(dir);
}

/* A shard changed after `zephon index --hash` (one byte, same size and
 * lines) stops `zephon run` with a message naming it. */
static void test_run_hash_mismatch(void **state)
{
    (void)state;
    char args[2048];
    snprintf(args, sizeof args,
             "gen --out '%s/h' --shards 3 --samples-per-shard 20 --format jsonl", tmp);
    assert_int_equal(run_cli(args), 0);
    snprintf(args, sizeof args, "index --hash -o '%s/h/manifest.json' '%s/h'", tmp, tmp);
    assert_int_equal(run_cli(args), 0);
    snprintf(args, sizeof args, "run '%s/h' --quiet --no-index-cache", tmp);
    if (run_cli(args) != 0)
        fail_msg("%s: %s", args, cli_output());
    char *dir = zpt_path(tmp, "h");
    size_t len;
    char *d = read_in(dir, "shard-00001.jsonl", &len);
    d[40] ^= 1; /* inside the first record's text */
    char *p = zpt_path(dir, "shard-00001.jsonl");
    assert_int_equal(zpt_write_file(p, d, len), 0);
    assert_int_equal(run_cli(args), 1);
    char *out = cli_output();
    assert_contains(out, "shard 'shard-00001.jsonl': content hash mismatch");
    assert_contains(out, p);
    free(out);
    free(p);
    free(d);
    free(dir);
}

static int group_setup(void **state)
{
    (void)state;
    tmp = zpt_tmpdir();
    return tmp ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    zpt_rmtree(tmp);
    free(tmp);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gen_small),
        cmocka_unit_test(test_gen_deterministic),
        cmocka_unit_test(test_gen_bytes_uneven_plain),
        cmocka_unit_test(test_index_matches_gen),
        cmocka_unit_test(test_index_errors),
        cmocka_unit_test(test_index_idempotent),
        cmocka_unit_test(test_run_hash_mismatch),
    };
    return cmocka_run_group_tests_name("dataset_cli", tests, group_setup, group_teardown);
}
