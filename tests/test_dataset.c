/* test_dataset.c - datasets: paths, globs, manifests (round trip, relative
 * paths, stale manifests, hashes, names), folders, the same file reached
 * twice, checks on load, indexing once, the index store, errors. */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "data/dataset_internal.h"
#include "data/shard_cache.h"
#include "testutil.h"
#include "zephon/dataset.h"

typedef struct fixture {
    char *dir;
    zp_dataset *ds;
    int log_errors;
    char last_log[1024];
    int log_warnings;
    char last_warning[1024];
} fixture;

static void log_fn(void *user, zp_log_level lvl, const char *msg)
{
    fixture *f = user;
    if (lvl == ZP_LOG_ERROR) {
        f->log_errors++;
        snprintf(f->last_log, sizeof f->last_log, "%s", msg);
    } else if (lvl == ZP_LOG_WARN) {
        f->log_warnings++;
        snprintf(f->last_warning, sizeof f->last_warning, "%s", msg);
    }
}

/* dir/name with n records "{"id": i, "text": "<name> i"}". */
static void make_shard(const char *dir, const char *name, int n)
{
    char *p = zpt_path(dir, name);
    size_t cap = (size_t)n * 64 + 1, len = 0;
    char *buf = malloc(cap);
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, cap - len, "{\"id\": %d, \"text\": \"%s %d\"}\n", i,
                                name, i);
    int zst = strstr(name, ".zst") != NULL;
    assert_int_equal(zst ? zpt_write_zst(p, buf, len, 2) : zpt_write_file(p, buf, len), 0);
    free(buf);
    free(p);
}

static void add_ok(zp_dataset *ds, const char *spec)
{
    zp_status st = zp_dataset_add(ds, spec);
    if (st != ZP_OK)
        fail_msg("add '%s': %s", spec, zp_dataset_errmsg(ds));
}

/* A dataset over dir/names[0..n) with the index store in cache_dir. */
static zp_dataset *cached_ds(fixture *f, const char *cache_dir, const char *const *names,
                             size_t n)
{
    zp_dataset_config cfg;
    zp_dataset_config_init(&cfg);
    cfg.log = log_fn;
    cfg.log_user = f;
    cfg.index_store_dir = cache_dir;
    zp_dataset *ds;
    assert_int_equal(zp_dataset_create(&cfg, &ds), ZP_OK);
    for (size_t i = 0; i < n; i++) {
        char *p = zpt_path(f->dir, names[i]);
        add_ok(ds, p);
        free(p);
    }
    return ds;
}

/* cached_ds() indexed: the index succeeds and counts `samples` records. */
static zp_dataset *indexed_ds(fixture *f, const char *cache_dir, const char *const *names,
                              size_t n, uint64_t samples)
{
    zp_dataset *ds = cached_ds(f, cache_dir, names, n);
    assert_int_equal(zp_dataset_index(ds), ZP_OK);
    assert_int_equal(zp_dataset_num_samples(ds), samples);
    return ds;
}

/* An empty dataset that logs into f, without the index store. */
static zp_dataset *new_ds(fixture *f) { return cached_ds(f, NULL, NULL, 0); }

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->dir = zpt_tmpdir();
    if (!f->dir)
        return -1;
    make_shard(f->dir, "b.jsonl", 5);
    make_shard(f->dir, "a.jsonl.zst", 7);
    make_shard(f->dir, "c.jsonl.zst", 3);
    f->ds = new_ds(f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    zp_dataset_destroy(f->ds);
    zpt_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

static void assert_contains(const char *hay, const char *needle)
{
    if (!strstr(hay, needle))
        fail_msg("message \"%s\" does not contain \"%s\"", hay, needle);
}

/* ------------------------------------------------------------ tests */

static void test_defaults(void **state)
{
    (void)state;
    zp_dataset_config cfg;
    zp_dataset_config_init(&cfg);
    assert_int_equal(cfg.max_record_bytes, 16u << 20);
    assert_int_equal(cfg.max_shard_bytes, (size_t)2 << 30);
    assert_int_equal(cfg.allow_empty_shards, 0);
    assert_null(cfg.index_store_dir); /* the index store is off by default */
    assert_null(cfg.index_cache_dir); /* its former name, an alias */
    zp_dataset *ds;
    assert_int_equal(zp_dataset_create(NULL, &ds), ZP_OK);
    assert_int_equal(zp_dataset_num_shards(ds), 0);
    assert_int_equal(zp_dataset_num_samples(ds), 0);
    assert_string_equal(zp_dataset_errmsg(ds), "");
    assert_null(zp_dataset_shard_name(ds, 0));
    zp_dataset_destroy(ds);
    zp_dataset_destroy(NULL);
}

static void test_paths(void **state)
{
    fixture *f = *state;
    char *a = zpt_path(f->dir, "a.jsonl.zst"), *b = zpt_path(f->dir, "b.jsonl");
    add_ok(f->ds, b);
    add_ok(f->ds, a);
    assert_int_equal(zp_dataset_num_shards(f->ds), 2);
    assert_string_equal(zp_dataset_shard_name(f->ds, 0), b);
    assert_string_equal(zpi_dataset_shard_format(f->ds, 1)->name, "jsonl.zst");
    struct stat sb;
    assert_int_equal(stat(a, &sb), 0);
    assert_int_equal(zp_dataset_shard_bytes(f->ds, 1), (uint64_t)sb.st_size);
    assert_int_equal(zp_dataset_shard_samples(f->ds, 0), UINT64_MAX);
    assert_int_equal(zp_dataset_num_samples(f->ds), UINT64_MAX);
    assert_int_equal(zp_dataset_index(f->ds), ZP_OK);
    assert_int_equal(zp_dataset_shard_samples(f->ds, 0), 5);
    assert_int_equal(zp_dataset_shard_samples(f->ds, 1), 7);
    assert_int_equal(zp_dataset_num_samples(f->ds), 12);
    assert_int_equal(zpi_dataset_shard_offset(f->ds, 0), 0);
    assert_int_equal(zpi_dataset_shard_offset(f->ds, 1), 5);
    free(a);
    free(b);
}

static void test_path_errors(void **state)
{
    fixture *f = *state;
    char *p = zpt_path(f->dir, "missing.jsonl");
    assert_int_equal(zp_dataset_add(f->ds, p), ZP_ERR_IO);
    assert_contains(zp_dataset_errmsg(f->ds), "missing.jsonl");
    assert_contains(zp_dataset_errmsg(f->ds), "No such file");
    /* returned on the handle, not logged too (a caller would print it twice) */
    assert_int_equal(f->log_errors, 0);
    free(p);
    p = zpt_path(f->dir, "notes.txt");
    assert_int_equal(zpt_write_file(p, "hi", 2), 0);
    assert_int_equal(zp_dataset_add(f->ds, p), ZP_ERR_INVALID);
    assert_contains(zp_dataset_errmsg(f->ds), "unknown shard format");
    /* a URL of a scheme not supported is a missing file, with a note
     * naming those supported (remote shards: tests/remote) */
    assert_int_equal(zp_dataset_add(f->ds, "ftp://example.com/x.jsonl.zst"), ZP_ERR_IO);
    assert_contains(zp_dataset_errmsg(f->ds), "shard 'ftp://example.com/x.jsonl.zst'");
    assert_contains(zp_dataset_errmsg(f->ds), "URLs supported: http://, https://, s3://");
    assert_int_equal(zp_dataset_num_shards(f->ds), 0);
    free(p);
}

static void test_glob_sorted(void **state)
{
    fixture *f = *state;
    char *g = zpt_path(f->dir, "*.jsonl*");
    add_ok(f->ds, g);
    assert_int_equal(zp_dataset_num_shards(f->ds), 3);
    const char *want[] = {"a.jsonl.zst", "b.jsonl", "c.jsonl.zst"};
    for (size_t i = 0; i < 3; i++) {
        char *p = zpt_path(f->dir, want[i]);
        assert_string_equal(zp_dataset_shard_name(f->ds, i), p);
        free(p);
    }
    assert_int_equal(zp_dataset_index(f->ds), ZP_OK);
    assert_int_equal(zp_dataset_num_samples(f->ds), 15);
    free(g);
}

static void test_glob_no_match(void **state)
{
    fixture *f = *state;
    char *g = zpt_path(f->dir, "*.nothing.jsonl");
    assert_int_equal(zp_dataset_add(f->ds, g), ZP_ERR_IO);
    assert_contains(zp_dataset_errmsg(f->ds), "matches no file");
    assert_contains(zp_dataset_errmsg(f->ds), g);
    assert_int_equal(zp_dataset_num_shards(f->ds), 0);
    free(g);
    /* a match that is not a shard fails the whole add */
    char *t = zpt_path(f->dir, "d.txt");
    assert_int_equal(zpt_write_file(t, "x", 1), 0);
    g = zpt_path(f->dir, "*");
    assert_int_equal(zp_dataset_add(f->ds, g), ZP_ERR_INVALID);
    assert_contains(zp_dataset_errmsg(f->ds), "d.txt");
    assert_int_equal(zp_dataset_num_shards(f->ds), 0);
    free(g);
    free(t);
}

static void test_manifest_round_trip(void **state)
{
    fixture *f = *state;
    char cwd[PATH_MAX];
    assert_non_null(getcwd(cwd, sizeof cwd));
    /* names relative to the manifest's folder: written as named */
    assert_int_equal(chdir(f->dir), 0);
    add_ok(f->ds, "b.jsonl");
    add_ok(f->ds, "a.jsonl.zst");
    assert_int_equal(zp_dataset_write_manifest(f->ds, "manifest.json", 1), ZP_OK);
    assert_int_equal(chdir(cwd), 0);

    char *m = zpt_path(f->dir, "manifest.json");
    zp_dataset *d2 = new_ds(f);
    add_ok(d2, m);
    assert_int_equal(zp_dataset_num_shards(d2), 2);
    for (size_t i = 0; i < 2; i++) {
        assert_string_equal(zp_dataset_shard_name(d2, i), zp_dataset_shard_name(f->ds, i));
        assert_int_equal(zp_dataset_shard_samples(d2, i), zp_dataset_shard_samples(f->ds, i));
        assert_int_equal(zp_dataset_shard_bytes(d2, i), zp_dataset_shard_bytes(f->ds, i));
    }
    assert_int_equal(zp_dataset_fingerprint(d2), zp_dataset_fingerprint(f->ds));
    /* counts came from the manifest: indexing reads nothing */
    assert_int_equal(zp_dataset_num_samples(d2), 12);
    assert_int_equal(zp_dataset_verify(d2), ZP_OK);
    char *path0 = zpt_path(f->dir, "b.jsonl");
    assert_string_equal(zpi_dataset_shard_path(d2, 0), path0);

    /* write again from the manifest-made dataset, read again: identical */
    char *m2 = zpt_path(f->dir, "again.json");
    assert_int_equal(zp_dataset_write_manifest(d2, m2, 0), ZP_OK);
    zp_dataset *d3 = new_ds(f);
    add_ok(d3, m2);
    assert_int_equal(zp_dataset_fingerprint(d3), zp_dataset_fingerprint(d2));
    assert_string_equal(zp_dataset_shard_name(d3, 1), "a.jsonl.zst");

    /* the fingerprint sees names and counts */
    zp_dataset *d4 = new_ds(f);
    add_ok(d4, m2);
    char *c = zpt_path(f->dir, "c.jsonl.zst");
    add_ok(d4, c);
    free(c);
    assert_int_not_equal(zp_dataset_fingerprint(d4), zp_dataset_fingerprint(d3));
    /* the same manifest twice is the same shards twice: refused */
    assert_int_equal(zp_dataset_add(d4, m2), ZP_ERR_INVALID);
    assert_contains(zp_dataset_errmsg(d4), "is the same file as shard 'b.jsonl'");
    assert_int_equal(zp_dataset_num_shards(d4), 3);
    zp_dataset_destroy(d4);

    zp_dataset_destroy(d3);
    zp_dataset_destroy(d2);
    free(path0);
    free(m2);
    free(m);
}

/* Absolute names of files under the manifest's folder are written relative
 * to it; files elsewhere are written absolute. Either way the manifest reads
 * back to the same files and counts. */
static void test_manifest_written_relative(void **state)
{
    fixture *f = *state;
    char *sub = zpt_path(f->dir, "sub");
    assert_int_equal(mkdir(sub, 0755), 0);
    make_shard(sub, "s.jsonl", 4);
    char *s = zpt_path(sub, "s.jsonl"), *a = zpt_path(f->dir, "a.jsonl.zst");
    add_ok(f->ds, s);
    add_ok(f->ds, a);
    char *m = zpt_path(sub, "m.json");
    assert_int_equal(zp_dataset_write_manifest(f->ds, m, 0), ZP_OK);
    zp_dataset *d2 = new_ds(f);
    add_ok(d2, m);
    assert_string_equal(zp_dataset_shard_name(d2, 0), "s.jsonl");
    assert_true(zp_dataset_shard_name(d2, 1)[0] == '/');
    assert_int_equal(zp_dataset_num_samples(d2), 11);
    zp_dataset_destroy(d2);
    free(m);
    free(a);
    free(s);
    free(sub);
}

static void test_manifest_relative_paths(void **state)
{
    fixture *f = *state;
    char *sub = zpt_path(f->dir, "meta");
    assert_int_equal(mkdir(sub, 0755), 0);
    make_shard(sub, "local.jsonl", 2);
    char *abs = zpt_path(f->dir, "c.jsonl.zst");
    char *m = zpt_path(sub, "m.json");
    char text[2048];
    snprintf(text, sizeof text,
             "{\"format_version\": 1, \"comment\": \"unknown keys are ignored\", \"shards\": [\n"
             " {\"path\": \"../b.jsonl\", \"format\": \"jsonl\"},\n"
             " {\"path\": \"local.jsonl\", \"samples\": 2},\n"
             " {\"path\": \"%s\"}\n]}\n",
             abs);
    assert_int_equal(zpt_write_file(m, text, strlen(text)), 0);
    add_ok(f->ds, m);
    assert_int_equal(zp_dataset_num_shards(f->ds), 3);
    assert_string_equal(zp_dataset_shard_name(f->ds, 0), "../b.jsonl");
    char *want0 = zpt_path(sub, "../b.jsonl");
    assert_string_equal(zpi_dataset_shard_path(f->ds, 0), want0);
    assert_string_equal(zpi_dataset_shard_path(f->ds, 2), abs);
    assert_int_equal(zp_dataset_shard_samples(f->ds, 1), 2);
    /* counts missing for two shards: index loads those only */
    assert_int_equal(zp_dataset_index(f->ds), ZP_OK);
    assert_int_equal(zp_dataset_num_samples(f->ds), 5 + 2 + 3);
    assert_int_equal(zpi_dataset_shard_offset(f->ds, 2), 7);
    free(want0);

    /* a URL of a scheme not supported, in a manifest: a missing file, named */
    snprintf(text, sizeof text,
             "{\"format_version\": 1, \"shards\": [{\"path\": \"ftp://h/a.jsonl\"}]}");
    assert_int_equal(zpt_write_file(m, text, strlen(text)), 0);
    zp_dataset *d2 = new_ds(f);
    assert_int_equal(zp_dataset_add(d2, m), ZP_ERR_IO);
    assert_contains(zp_dataset_errmsg(d2), "shard 'ftp://h/a.jsonl': cannot open");
    assert_contains(zp_dataset_errmsg(d2), "URLs supported");
    zp_dataset_destroy(d2);
    free(m);
    free(abs);
    free(sub);
}

static void test_manifest_errors(void **state)
{
    fixture *f = *state;
    char *m = zpt_path(f->dir, "bad.json");
    struct {
        const char *text;
        zp_status st;
        const char *want;
    } cases[] = {
        {"{\"format_version\": 1, \"shards\": [", ZP_ERR_FORMAT, "line 1"},
        {"{\"format_version\": 2, \"shards\": []}", ZP_ERR_FORMAT, "format_version"},
        {"{\"shards\": []}", ZP_ERR_FORMAT, "format_version"},
        {"{\"format_version\": 1}", ZP_ERR_FORMAT, "shards"},
        {"{\"format_version\": 1, \"shards\": [{\"bytes\": 3}]}", ZP_ERR_FORMAT, "\"path\""},
        {"{\"format_version\": 1, \"shards\": [{\"path\": \"b.jsonl\", \"format\": \"avro\"}]}",
         ZP_ERR_UNSUPPORTED, "unknown format 'avro'"},
        {"{\"format_version\": 1, \"shards\": [{\"path\": \"b.jsonl\", \"samples\": -1}]}",
         ZP_ERR_FORMAT, "samples"},
        {"{\"format_version\": 1, \"shards\": [{\"path\": \"b.jsonl\", \"xxh64\": \"12\"}]}",
         ZP_ERR_FORMAT, "xxh64"},
        {"{\"format_version\": 1, \"shards\": [{\"path\": \"gone.jsonl\"}]}", ZP_ERR_IO,
         "gone.jsonl"},
        {"{\"format_version\": 1, \"shards\": [{\"path\": \"b.jsonl\"}, {\"path\": "
         "\"c.jsonl.zst\", \"bytes\": 1}]}",
         ZP_ERR_FORMAT, "stale manifest"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(zpt_write_file(m, cases[i].text, strlen(cases[i].text)), 0);
        zp_status st = zp_dataset_add(f->ds, m);
        if (st != cases[i].st)
            fail_msg("case %zu: status %d, want %d (%s)", i, st, cases[i].st,
                     zp_dataset_errmsg(f->ds));
        assert_contains(zp_dataset_errmsg(f->ds), cases[i].want);
        assert_int_equal(zp_dataset_num_shards(f->ds), 0); /* all or nothing */
        /* the same bytes given in memory: the same status and message, the
         * manifest named "manifest (in memory)" */
        char want[2048], label[700];
        snprintf(label, sizeof label, "manifest '%s'", m);
        const char *msg = zp_dataset_errmsg(f->ds), *at = strstr(msg, label);
        assert_non_null(at);
        snprintf(want, sizeof want, "%.*smanifest (in memory)%s", (int)(at - msg), msg,
                 at + strlen(label));
        st = zp_dataset_add_manifest_json(f->ds, cases[i].text, strlen(cases[i].text), f->dir);
        if (st != cases[i].st)
            fail_msg("case %zu (bytes): status %d, want %d (%s)", i, st, cases[i].st,
                     zp_dataset_errmsg(f->ds));
        assert_string_equal(zp_dataset_errmsg(f->ds), want);
        assert_int_equal(zp_dataset_num_shards(f->ds), 0);
    }
    free(m);
}

static void test_stale_manifest(void **state)
{
    fixture *f = *state;
    char *g = zpt_path(f->dir, "*.jsonl*"), *m = zpt_path(f->dir, "m.json");
    add_ok(f->ds, g);
    assert_int_equal(zp_dataset_write_manifest(f->ds, m, 0), ZP_OK);
    char *b = zpt_path(f->dir, "b.jsonl");
    assert_int_equal(zpt_append_file(b, "{\"id\": 99}\n", 11), 0);
    zp_dataset *d2 = new_ds(f);
    assert_int_equal(zp_dataset_add(d2, m), ZP_ERR_FORMAT);
    assert_contains(zp_dataset_errmsg(d2), "shard 'b.jsonl'");
    assert_contains(zp_dataset_errmsg(d2), "stale manifest");
    assert_int_equal(zp_dataset_num_shards(d2), 0);
    zp_dataset_destroy(d2);
    free(b);
    free(m);
    free(g);
}

static void test_verify_mismatch(void **state)
{
    fixture *f = *state;
    char *g = zpt_path(f->dir, "*.jsonl*"), *m = zpt_path(f->dir, "m.json");
    add_ok(f->ds, g);
    assert_int_equal(zp_dataset_write_manifest(f->ds, m, 1), ZP_OK);
    char *mtext = zpt_read_file(m, NULL);
    assert_contains(mtext, "\"xxh64\"");
    free(mtext);
    zp_dataset *d2 = new_ds(f);
    add_ok(d2, m);
    assert_int_equal(zp_dataset_verify(d2), ZP_OK);
    /* same size, one byte changed */
    char *b = zpt_path(f->dir, "b.jsonl");
    size_t n;
    char *data = zpt_read_file(b, &n);
    data[10] = data[10] == '1' ? '2' : '1';
    assert_int_equal(zpt_write_file(b, data, n), 0);
    assert_int_equal(zp_dataset_verify(d2), ZP_ERR_FORMAT);
    assert_contains(zp_dataset_errmsg(d2), "shard 'b.jsonl'");
    assert_contains(zp_dataset_errmsg(d2), "hash mismatch");
    zp_dataset_destroy(d2);
    free(data);
    free(b);
    free(m);
    free(g);
}

/* ------------------------------------------------------------ manifests as bytes */

static void expect_same_dataset(const zp_dataset *a, const zp_dataset *b)
{
    assert_int_equal(zp_dataset_num_shards(a), zp_dataset_num_shards(b));
    for (size_t i = 0; i < zp_dataset_num_shards(a); i++) {
        assert_string_equal(zp_dataset_shard_name(a, i), zp_dataset_shard_name(b, i));
        assert_int_equal(zp_dataset_shard_samples(a, i), zp_dataset_shard_samples(b, i));
        assert_int_equal(zp_dataset_shard_bytes(a, i), zp_dataset_shard_bytes(b, i));
    }
    assert_int_equal(zp_dataset_num_samples(a), zp_dataset_num_samples(b));
    assert_int_equal(zp_dataset_fingerprint(a), zp_dataset_fingerprint(b));
}

/* Without a folder (base_dir NULL) the bytes keep every name as given
 * (relative paths, "./", a glob's matches) and resolve from any folder:
 * the form zp_mpi_dataset_create broadcasts. */
static void test_manifest_json_round_trip(void **state)
{
    fixture *f = *state;
    char cwd[PATH_MAX];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(f->dir), 0);
    add_ok(f->ds, "b.jsonl");
    add_ok(f->ds, "./a.jsonl.zst");
    add_ok(f->ds, "c*.jsonl.zst");
    char *bytes = NULL;
    size_t len = 0;
    assert_int_equal(zp_dataset_manifest_json(f->ds, 1, NULL, &bytes, &len), ZP_OK);
    assert_non_null(bytes);
    assert_int_equal(len, strlen(bytes));
    assert_contains(bytes, "\"name\": \"./a.jsonl.zst\"");
    assert_contains(bytes, "\"xxh64\"");
    /* read from another folder: the same names, counts and fingerprint */
    assert_int_equal(chdir("/"), 0);
    zp_dataset *d2 = new_ds(f);
    assert_int_equal(zp_dataset_add_manifest_json(d2, bytes, len, NULL), ZP_OK);
    expect_same_dataset(f->ds, d2);
    assert_string_equal(zp_dataset_shard_name(d2, 2), "c.jsonl.zst");
    char *real = realpath(f->dir, NULL), *want = zpt_path(real, "b.jsonl");
    assert_string_equal(zpi_dataset_shard_path(d2, 0), want);
    assert_int_equal(zp_dataset_verify(d2), ZP_OK); /* the hashes came along */
    assert_int_equal(zpi_dataset_shard_offset(d2, 2), 12);
    /* and serialise to the same bytes again */
    char *again = NULL;
    size_t len2 = 0;
    assert_int_equal(zp_dataset_manifest_json(d2, 1, NULL, &again, &len2), ZP_OK);
    assert_int_equal(len2, len);
    assert_string_equal(again, bytes);
    free(again);
    /* len is honoured: the bytes need no NUL, a prefix is not a manifest */
    zp_dataset *d3 = new_ds(f);
    assert_int_equal(zp_dataset_add_manifest_json(d3, bytes, len - 1, NULL), ZP_ERR_FORMAT);
    assert_int_equal(zp_dataset_num_shards(d3), 0);
    zp_dataset_destroy(d3);
    assert_int_equal(chdir(cwd), 0);
    zp_dataset_destroy(d2);
    free(want);
    free(real);
    free(bytes);
}

/* With a folder, the bytes are the file zp_dataset_write_manifest writes
 * there (one code path), and read back against that folder. */
static void test_manifest_json_is_the_file(void **state)
{
    fixture *f = *state;
    char *g = zpt_path(f->dir, "*.jsonl*"), *m = zpt_path(f->dir, "m.json");
    add_ok(f->ds, g);
    assert_int_equal(zp_dataset_write_manifest(f->ds, m, 1), ZP_OK);
    size_t flen = 0;
    char *file = zpt_read_file(m, &flen);
    char *bytes = NULL;
    size_t len = 0;
    assert_int_equal(zp_dataset_manifest_json(f->ds, 1, f->dir, &bytes, &len), ZP_OK);
    assert_int_equal(len, flen);
    assert_memory_equal(bytes, file, len);
    assert_null(strstr(bytes, "\"name\"")); /* names of locations become the paths */
    assert_contains(bytes, "\"path\": \"b.jsonl\"");

    /* read from the bytes and from the file: the same dataset */
    zp_dataset *d2 = new_ds(f), *d3 = new_ds(f);
    assert_int_equal(zp_dataset_add_manifest_json(d2, bytes, len, f->dir), ZP_OK);
    add_ok(d3, m);
    expect_same_dataset(d2, d3);
    assert_string_equal(zp_dataset_shard_name(d2, 1), "b.jsonl");
    char *want = zpt_path(f->dir, "b.jsonl");
    assert_string_equal(zpi_dataset_shard_path(d2, 1), want);
    /* a folder that does not exist is named */
    char *none = zpt_path(f->dir, "no-such-folder");
    char *junk = (char *)d2;
    assert_int_equal(zp_dataset_manifest_json(d2, 0, none, &junk, NULL), ZP_ERR_IO);
    assert_null(junk);
    assert_contains(zp_dataset_errmsg(d2), "no-such-folder");
    zp_dataset_destroy(d3);
    zp_dataset_destroy(d2);
    free(none);
    free(want);
    free(bytes);
    free(file);
    free(m);
    free(g);
}

/* "name": the shard's name in ids and messages, when it differs from
 * "path"; kept by the writer wherever the manifest is written. */
static void test_manifest_name(void **state)
{
    fixture *f = *state;
    const char *text = "{\"format_version\": 1, \"shards\": [\n"
                       " {\"path\": \"b.jsonl\", \"name\": \"train/part-b\", \"samples\": 5},\n"
                       " {\"path\": \"a.jsonl.zst\", \"name\": \"a.jsonl.zst\"},\n"
                       " {\"path\": \"c.jsonl.zst\", \"name\": \"other-c\","
                       "  \"samples\": 3}]}";
    assert_int_equal(zp_dataset_add_manifest_json(f->ds, text, strlen(text), f->dir), ZP_OK);
    assert_string_equal(zp_dataset_shard_name(f->ds, 0), "train/part-b");
    assert_string_equal(zp_dataset_shard_name(f->ds, 1), "a.jsonl.zst");
    assert_string_equal(zp_dataset_shard_name(f->ds, 2), "other-c");
    char *b = zpt_path(f->dir, "b.jsonl");
    assert_string_equal(zpi_dataset_shard_path(f->ds, 0), b);

    /* written beside the shards: "name" only where it differs from the
     * path written; read back: the same dataset */
    char *m = zpt_path(f->dir, "m.json");
    assert_int_equal(zp_dataset_write_manifest(f->ds, m, 0), ZP_OK);
    char *mtext = zpt_read_file(m, NULL);
    assert_contains(mtext, "\"path\": \"b.jsonl\",\n      \"name\": \"train/part-b\"");
    assert_contains(mtext, "\"path\": \"c.jsonl.zst\",\n      \"name\": \"other-c\"");
    assert_null(strstr(mtext, "\"name\": \"a.jsonl.zst\""));
    free(mtext);
    zp_dataset *d2 = new_ds(f);
    add_ok(d2, m);
    expect_same_dataset(f->ds, d2);
    /* written elsewhere (absolute paths): a "name" stays; a name that was
     * the path in the old manifest becomes the path in the new one */
    char *sub = zpt_path(f->dir, "sub"), *m2 = zpt_path(sub, "m.json");
    assert_int_equal(mkdir(sub, 0755), 0);
    assert_int_equal(zp_dataset_write_manifest(d2, m2, 0), ZP_OK);
    zp_dataset *d4 = new_ds(f);
    add_ok(d4, m2);
    assert_string_equal(zp_dataset_shard_name(d4, 0), "train/part-b");
    assert_true(zp_dataset_shard_name(d4, 1)[0] == '/');
    assert_string_equal(zp_dataset_shard_name(d4, 2), "other-c");
    assert_int_equal(zp_dataset_num_samples(d4), 5 + 7 + 3);
    zp_dataset_destroy(d4);

    /* messages name the shard by its name (and the file by its path) */
    const char *stale = "{\"format_version\": 1, \"shards\": [{\"path\": \"b.jsonl\", \"name\": "
                        "\"train/part-b\", \"bytes\": 1}]}";
    zp_dataset *d3 = new_ds(f);
    assert_int_equal(zp_dataset_add_manifest_json(d3, stale, strlen(stale), f->dir),
                     ZP_ERR_FORMAT);
    assert_contains(zp_dataset_errmsg(d3), "shard 'train/part-b': stale manifest (in memory)");
    assert_contains(zp_dataset_errmsg(d3), b);
    zp_dataset_destroy(d3);
    zp_dataset_destroy(d2);
    free(m2);
    free(sub);
    free(m);
    free(b);
}

/* Malformed bytes: ZP_ERR_FORMAT naming what is wrong; nothing added. */
static void test_manifest_json_errors(void **state)
{
    fixture *f = *state;
    char *b = zpt_path(f->dir, "b.jsonl");
    add_ok(f->ds, b);
    struct {
        const char *text;
        const char *want;
    } cases[] = {
        {"", "manifest (in memory): line 1 column 0: '[' or '{' expected"},
        {"{\"format_version\": 1, \"shards\": [", "manifest (in memory): line 1 column 33"},
        {"{\"format_version\": 1, \"shards\": []} x", "end of file expected"},
        {"{\"format_version\": 1, \"format_version\": 1, \"shards\": []}", "duplicate"},
        {"[]", "manifest (in memory): not a JSON object"},
        {"{\"shards\": []}", "manifest (in memory): missing \"format_version\""},
        {"{\"format_version\": 1, \"shards\": {}}", "missing \"shards\" array"},
        {"{\"format_version\": 1, \"shards\": [7]}", "shards[0] is not an object"},
        {"{\"format_version\": 1, \"shards\": [{\"path\": \"\"}]}", "shards[0]: missing or empty \"path\""},
        {"{\"format_version\": 1, \"shards\": [{\"path\": \"b.jsonl\", \"name\": 3}]}",
         "shards[0] ('b.jsonl'): \"name\" is not a non-empty string"},
        {"{\"format_version\": 1, \"shards\": [{\"path\": \"b.jsonl\", \"name\": \"\"}]}",
         "\"name\" is not a non-empty string"},
        {"{\"format_version\": 1, \"shards\": [{\"path\": \"b.jsonl\", \"name\": \"a\\u0000b\"}]}",
         "NUL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        zp_status st = zp_dataset_add_manifest_json(f->ds, cases[i].text, strlen(cases[i].text),
                                                    f->dir);
        if (st != ZP_ERR_FORMAT)
            fail_msg("case %zu: status %d, want ZP_ERR_FORMAT (%s)", i, st,
                     zp_dataset_errmsg(f->ds));
        assert_contains(zp_dataset_errmsg(f->ds), cases[i].want);
        assert_int_equal(zp_dataset_num_shards(f->ds), 1); /* all or nothing */
    }
    assert_int_equal(zp_dataset_add_manifest_json(f->ds, NULL, 0, NULL), ZP_ERR_INVALID);
    assert_int_equal(zp_dataset_add_manifest_json(NULL, "{}", 2, NULL), ZP_ERR_INVALID);
    assert_int_equal(zp_dataset_manifest_json(f->ds, 0, NULL, NULL, NULL), ZP_ERR_INVALID);
    assert_int_equal(zp_dataset_num_shards(f->ds), 1);
    free(b);
}


/* ------------------------------------------------------------ folders */

/* A folder is its shard files in bytewise order; other entries (files of
 * other kinds, subfolders, manifests not named manifest.json) are skipped
 * and counted in one warning. */
/* A glob whose folder does not exist (or is a file) says so, naming the
 * folder; before, every such glob was "cannot read a folder". */
static void test_glob_missing_folder(void **state)
{
    fixture *f = *state;
    char *nope = zpt_path(f->dir, "nope");
    char *g = zpt_path(nope, "*.jsonl");
    assert_int_equal(zp_dataset_add(f->ds, g), ZP_ERR_IO);
    assert_contains(zp_dataset_errmsg(f->ds), g);
    char want[PATH_MAX + 64];
    snprintf(want, sizeof want, "the folder '%s' does not exist", nope);
    assert_contains(zp_dataset_errmsg(f->ds), want);
    free(g);
    /* a wildcard before the missing folder: the folder up to it */
    char *deep = zpt_path(f->dir, "nope/sub*/x/*.jsonl");
    assert_int_equal(zp_dataset_add(f->ds, deep), ZP_ERR_IO);
    assert_contains(zp_dataset_errmsg(f->ds), want);
    free(deep);
    /* a file where the folder should be */
    char *file = zpt_path(f->dir, "b.jsonl");
    g = zpt_path(file, "*.jsonl");
    assert_int_equal(zp_dataset_add(f->ds, g), ZP_ERR_IO);
    snprintf(want, sizeof want, "'%s' is not a folder", file);
    assert_contains(zp_dataset_errmsg(f->ds), want);
    assert_int_equal(zp_dataset_num_shards(f->ds), 0);
    free(g);
    free(file);
    free(nope);
}

/* Messages about folders and globs list every shard suffix this build
 * reads (the HDF5 and Megatron ones too, not only .jsonl and .jsonl.zst),
 * and a Megatron pair's .idx is not "an entry that is not a shard". */
static void test_messages_list_suffixes(void **state)
{
    fixture *f = *state;
    const char *sfx[] = {".jsonl", ".jsonl.zst", ".h5", ".hdf5", ".bin"};
    char *empty = zpt_path(f->dir, "empty");
    assert_int_equal(mkdir(empty, 0755), 0);
    assert_int_equal(zp_dataset_add(f->ds, empty), ZP_ERR_IO);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", zp_dataset_errmsg(f->ds));
    char *notes = zpt_path(f->dir, "notes.txt"), *g = zpt_path(f->dir, "*");
    assert_int_equal(zpt_write_file(notes, "hi", 2), 0);
    assert_int_equal(zp_dataset_add(f->ds, g), ZP_ERR_INVALID);
    char gmsg[1024];
    snprintf(gmsg, sizeof gmsg, "%s", zp_dataset_errmsg(f->ds));
    size_t listed = 0;
    for (size_t i = 0; i < sizeof sfx / sizeof sfx[0]; i++) {
        char probe[32], word[40];
        snprintf(probe, sizeof probe, "x%s", sfx[i]);
        if (!zpi_format_for_path(probe))
            continue;
        snprintf(word, sizeof word, "%s,", sfx[i]); /* ".jsonl," is not ".jsonl.zst" */
        if (!strstr(msg, word))
            snprintf(word, sizeof word, "%s ", sfx[i]);
        if (!strstr(msg, word))
            snprintf(word, sizeof word, "%s)", sfx[i]);
        assert_contains(msg, word);
        assert_contains(gmsg, word);
        listed++;
    }
    assert_true(listed >= 2);
    /* a folder of a Megatron pair: its .idx is not a skipped entry */
    if (zpi_format_for_path("x.bin")) {
        char *pair = zpt_path(f->dir, "pair"), *bin = zpt_path(pair, "a.bin"),
             *idx = zpt_path(pair, "a.idx");
        assert_int_equal(mkdir(pair, 0755), 0);
        assert_int_equal(zpt_write_file(bin, "x", 1), 0);
        assert_int_equal(zpt_write_file(idx, "x", 1), 0);
        zp_dataset *d2 = new_ds(f);
        add_ok(d2, pair);
        assert_int_equal(zp_dataset_num_shards(d2), 1);
        assert_int_equal(f->log_warnings, 0);
        zp_dataset_destroy(d2);
        free(bin);
        free(idx);
        free(pair);
    }
    free(notes);
    free(g);
    free(empty);
}

static void test_folder_sorted(void **state)
{
    fixture *f = *state;
    char *notes = zpt_path(f->dir, "notes.txt"), *sub = zpt_path(f->dir, "sub");
    char *other = zpt_path(f->dir, "other.json");
    assert_int_equal(zpt_write_file(notes, "hi", 2), 0);
    assert_int_equal(zpt_write_file(other, "{}", 2), 0);
    assert_int_equal(mkdir(sub, 0755), 0);
    make_shard(sub, "z.jsonl", 2); /* not recursive */
    make_shard(f->dir, "B.jsonl", 1); /* bytewise: 'B' < 'a' */
    add_ok(f->ds, f->dir);
    assert_int_equal(zp_dataset_num_shards(f->ds), 4);
    const char *want[] = {"B.jsonl", "a.jsonl.zst", "b.jsonl", "c.jsonl.zst"};
    for (size_t i = 0; i < 4; i++) {
        char *p = zpt_path(f->dir, want[i]);
        assert_string_equal(zp_dataset_shard_name(f->ds, i), p);
        free(p);
    }
    assert_int_equal(f->log_warnings, 1);
    assert_contains(f->last_warning, f->dir);
    assert_contains(f->last_warning, "skipped 3 entries that are not a shard file");
    assert_contains(f->last_warning, "e.g. 'notes.txt'"); /* the first skipped, bytewise */
    assert_int_equal(zp_dataset_index(f->ds), ZP_OK);
    assert_int_equal(zp_dataset_num_samples(f->ds), 1 + 7 + 5 + 3);
    /* with a final '/', the same shards and names */
    char *slash = malloc(strlen(f->dir) + 2);
    sprintf(slash, "%s/", f->dir);
    zp_dataset *d2 = new_ds(f);
    add_ok(d2, slash);
    for (size_t i = 0; i < 4; i++)
        assert_string_equal(zp_dataset_shard_name(d2, i), zp_dataset_shard_name(f->ds, i));
    zp_dataset_destroy(d2);
    /* a folder without shard files is an error */
    char *empty = zpt_path(f->dir, "empty");
    assert_int_equal(mkdir(empty, 0755), 0);
    assert_int_equal(zp_dataset_add(f->ds, empty), ZP_ERR_IO);
    assert_contains(zp_dataset_errmsg(f->ds), "has no shard files");
    assert_contains(zp_dataset_errmsg(f->ds), empty);
    /* it names every suffix the folder could have held */
    assert_contains(zp_dataset_errmsg(f->ds), ".jsonl.gz");
    assert_contains(zp_dataset_errmsg(f->ds), ".parquet");
    free(empty);
    free(slash);
    free(notes);
    free(other);
    free(sub);
}

/* A folder with a manifest.json is the dataset that manifest describes
 * (its counts, its names); the shard files beside it are not added again. */
static void test_folder_manifest(void **state)
{
    fixture *f = *state;
    const char *text = "{\"format_version\": 1, \"shards\": [\n"
                       " {\"path\": \"c.jsonl.zst\", \"samples\": 3},\n"
                       " {\"path\": \"b.jsonl\", \"name\": \"train/b\", \"samples\": 5}]}";
    char *m = zpt_path(f->dir, "manifest.json");
    assert_int_equal(zpt_write_file(m, text, strlen(text)), 0);
    add_ok(f->ds, f->dir);
    assert_int_equal(zp_dataset_num_shards(f->ds), 2);
    assert_string_equal(zp_dataset_shard_name(f->ds, 0), "c.jsonl.zst");
    assert_string_equal(zp_dataset_shard_name(f->ds, 1), "train/b");
    assert_int_equal(zp_dataset_num_samples(f->ds), 8);
    assert_int_equal(f->log_warnings, 0);
    free(m);
}

/* ------------------------------------------------------------ the same file twice */

/* Adding spec to ds fails with ZP_ERR_INVALID naming both spellings, and
 * leaves the dataset as it was. */
static void expect_same_file(zp_dataset *ds, const char *spec, const char *first,
                             const char *second)
{
    size_t n = zp_dataset_num_shards(ds);
    uint64_t fp = zp_dataset_fingerprint(ds);
    zp_status st = zp_dataset_add(ds, spec);
    if (st != ZP_ERR_INVALID)
        fail_msg("add '%s': status %d, want ZP_ERR_INVALID (%s)", spec, st, zp_dataset_errmsg(ds));
    const char *msg = zp_dataset_errmsg(ds);
    assert_contains(msg, "is the same file as shard");
    char want[PATH_MAX + 32];
    snprintf(want, sizeof want, "shard '%s'", second);
    assert_contains(msg, want);
    snprintf(want, sizeof want, "as shard '%s'", first);
    assert_contains(msg, want);
    assert_int_equal(zp_dataset_num_shards(ds), n);
    assert_int_equal(zp_dataset_fingerprint(ds), fp);
}

static void test_same_file_twice(void **state)
{
    fixture *f = *state;
    char *a = zpt_path(f->dir, "a.jsonl.zst"), *b = zpt_path(f->dir, "b.jsonl");
    char *c = zpt_path(f->dir, "c.jsonl.zst");
    /* two overlapping globs */
    char *g1 = zpt_path(f->dir, "*.jsonl*"), *g2 = zpt_path(f->dir, "[bc]*");
    add_ok(f->ds, g1);
    expect_same_file(f->ds, g2, b, b);
    expect_same_file(f->ds, a, a, a); /* a path named again */
    zp_dataset_destroy(f->ds);

    /* a glob that also matches a manifest of the same shards */
    f->ds = new_ds(f);
    add_ok(f->ds, b);
    add_ok(f->ds, c);
    char *m = zpt_path(f->dir, "m.json");
    assert_int_equal(zp_dataset_write_manifest(f->ds, m, 0), ZP_OK);
    zp_dataset_destroy(f->ds);
    f->ds = new_ds(f);
    char *gall = zpt_path(f->dir, "*");
    expect_same_file(f->ds, gall, b, "b.jsonl"); /* glob: a, b, c, then m.json's b */
    assert_int_equal(zp_dataset_num_shards(f->ds), 0);

    /* "./name" and "name", a hard link, a symlink, "dir/../dir/name" */
    char cwd[PATH_MAX];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(f->dir), 0);
    assert_int_equal(link("a.jsonl.zst", "hard.jsonl.zst"), 0);
    assert_int_equal(symlink("a.jsonl.zst", "soft.jsonl.zst"), 0);
    add_ok(f->ds, "a.jsonl.zst");
    expect_same_file(f->ds, "./a.jsonl.zst", "a.jsonl.zst", "./a.jsonl.zst");
    expect_same_file(f->ds, "hard.jsonl.zst", "a.jsonl.zst", "hard.jsonl.zst");
    expect_same_file(f->ds, "soft.jsonl.zst", "a.jsonl.zst", "soft.jsonl.zst");
    expect_same_file(f->ds, a, "a.jsonl.zst", a);
    assert_int_equal(chdir(cwd), 0);

    /* a manifest that lists one file twice */
    const char *twice = "{\"format_version\": 1, \"shards\": [{\"path\": \"b.jsonl\"},"
                        " {\"path\": \"./b.jsonl\", \"name\": \"again\"}]}";
    assert_int_equal(zp_dataset_add_manifest_json(f->ds, twice, strlen(twice), f->dir),
                     ZP_ERR_INVALID);
    assert_contains(zp_dataset_errmsg(f->ds), "shard 'again'");
    assert_contains(zp_dataset_errmsg(f->ds), "same file as shard 'b.jsonl'");
    assert_int_equal(zp_dataset_num_shards(f->ds), 1);
    /* after the refusals, other files still go in, and the first is still known */
    add_ok(f->ds, c);
    expect_same_file(f->ds, a, "a.jsonl.zst", a);
    assert_int_equal(zp_dataset_num_shards(f->ds), 2);
    free(gall);
    free(m);
    free(g1);
    free(g2);
    free(a);
    free(b);
    free(c);
}

/* Many shards (the identity table grows), and a refused add that rolls
 * back many shards added before the duplicate in the same call (across two
 * growths of the table): every file stays known once. */
static void test_same_file_many(void **state)
{
    fixture *f = *state;
    char *sub = zpt_path(f->dir, "many");
    assert_int_equal(mkdir(sub, 0755), 0);
    char name[64];
    for (int i = 0; i < 300; i++) {
        snprintf(name, sizeof name, "s%03d.jsonl", i);
        make_shard(sub, name, 1);
    }
    char *g = zpt_path(sub, "s0*"), *g12 = zpt_path(sub, "s[12]*");
    add_ok(f->ds, g); /* s000..s099 */
    /* a manifest of s100..s299 and then s050: refused, all rolled back */
    size_t cap = 300 * 32 + 128, len = 0;
    char *text = malloc(cap);
    len += (size_t)snprintf(text + len, cap - len, "{\"format_version\": 1, \"shards\": [");
    for (int i = 100; i < 300; i++)
        len += (size_t)snprintf(text + len, cap - len, "{\"path\": \"s%03d.jsonl\"}, ", i);
    len += (size_t)snprintf(text + len, cap - len, "{\"path\": \"s050.jsonl\"}]}");
    assert_int_equal(zp_dataset_add_manifest_json(f->ds, text, len, sub), ZP_ERR_INVALID);
    assert_contains(zp_dataset_errmsg(f->ds), "shard 's050.jsonl'");
    assert_int_equal(zp_dataset_num_shards(f->ds), 100);
    add_ok(f->ds, g12); /* s100..s299 were rolled back: they go in now */
    assert_int_equal(zp_dataset_num_shards(f->ds), 300);
    char *again = zpt_path(sub, "s299.jsonl");
    assert_int_equal(zp_dataset_add(f->ds, again), ZP_ERR_INVALID);
    free(again);
    again = zpt_path(sub, "s000.jsonl");
    assert_int_equal(zp_dataset_add(f->ds, again), ZP_ERR_INVALID);
    assert_int_equal(zp_dataset_index(f->ds), ZP_OK);
    assert_int_equal(zp_dataset_num_samples(f->ds), 300);
    free(again);
    free(text);
    free(g);
    free(g12);
    free(sub);
}

/* The file excluded (the manifest being written) is never read: a glob
 * skips it, a folder whose manifest.json it is is read as its shard files,
 * naming it is an error. */
static void test_exclude(void **state)
{
    fixture *f = *state;
    char *m = zpt_path(f->dir, "manifest.json");
    char *b = zpt_path(f->dir, "b.jsonl");
    add_ok(f->ds, b);
    assert_int_equal(zp_dataset_write_manifest(f->ds, m, 0), ZP_OK);
    zp_dataset_destroy(f->ds);
    f->ds = new_ds(f);
    assert_int_equal(zp_dataset_exclude(f->ds, m), ZP_OK);
    add_ok(f->ds, f->dir); /* not the manifest (1 shard): the 3 shard files */
    assert_int_equal(zp_dataset_num_shards(f->ds), 3);
    assert_int_equal(f->log_warnings, 0); /* the excluded file is not "skipped" */
    zp_dataset_destroy(f->ds);
    f->ds = new_ds(f);
    assert_int_equal(zp_dataset_exclude(f->ds, m), ZP_OK);
    char *g = zpt_path(f->dir, "*");
    add_ok(f->ds, g);
    assert_int_equal(zp_dataset_num_shards(f->ds), 3);
    assert_int_equal(zp_dataset_add(f->ds, m), ZP_ERR_INVALID);
    assert_contains(zp_dataset_errmsg(f->ds), "the manifest being written");
    free(g);
    free(b);
    free(m);
}

/* ------------------------------------------------------------ checks on load */

/* Flip one byte of dir/name (size and line count kept). */
static void flip_byte(const char *dir, const char *name, size_t at)
{
    char *p = zpt_path(dir, name);
    size_t n;
    char *data = zpt_read_file(p, &n);
    assert_non_null(data);
    assert_true(at < n);
    data[at] ^= 0x01;
    assert_int_equal(zpt_write_file(p, data, n), 0);
    free(data);
    free(p);
}

/* Load shard i through the shard cache (what the pipeline's fetch does). */
static zp_status cache_load(zp_dataset *ds, uint32_t i, zpi_err *err)
{
    zpi_shard_cache *c;
    assert_int_equal(zpi_shard_cache_create(ds, &(zpi_shard_cache_config){.budget_bytes = (size_t)64 << 20}, &c), ZP_OK);
    const zpi_shard *sh;
    zp_status st = zpi_shard_cache_get(c, i, &sh, NULL, err);
    if (st == ZP_OK)
        zpi_shard_cache_put(c, i);
    zpi_shard_cache_destroy(c);
    return st;
}

/* A manifest with hashes: a shard changed after indexing (same size, same
 * lines) fails its load with a message naming it; the others load. */
static void test_hash_checked_on_load(void **state)
{
    fixture *f = *state;
    char *m = zpt_path(f->dir, "m.json");
    char *b = zpt_path(f->dir, "b.jsonl"), *a = zpt_path(f->dir, "a.jsonl.zst");
    add_ok(f->ds, b);
    add_ok(f->ds, a);
    assert_int_equal(zp_dataset_write_manifest(f->ds, m, 1), ZP_OK);
    flip_byte(f->dir, "b.jsonl", 10); /* inside the text of record 0 */
    zp_dataset *d2 = new_ds(f);
    add_ok(d2, m);
    zpi_err err = {0};
    assert_int_equal(cache_load(d2, 0, &err), ZP_ERR_FORMAT);
    assert_contains(err.msg, "shard 'b.jsonl': content hash mismatch");
    assert_contains(err.msg, b);
    assert_int_equal(cache_load(d2, 1, &err), ZP_OK);
    zp_dataset_destroy(d2);

    /* a hash without a count: the index pass checks it as it reads */
    const char *text = "{\"format_version\": 1, \"shards\": [{\"path\": \"b.jsonl\", "
                       "\"xxh64\": \"0123456789abcdef\"}]}";
    d2 = new_ds(f);
    assert_int_equal(zp_dataset_add_manifest_json(d2, text, strlen(text), f->dir), ZP_OK);
    assert_int_equal(zp_dataset_index(d2), ZP_ERR_FORMAT);
    assert_contains(zp_dataset_errmsg(d2), "shard 'b.jsonl': content hash mismatch");
    assert_contains(zp_dataset_errmsg(d2), "0123456789abcdef");
    zp_dataset_destroy(d2);
    free(a);
    free(b);
    free(m);
}

/* A manifest whose count is wrong for a shard of the right size: the load
 * fails naming the shard and both counts. */
static void test_count_checked_on_load(void **state)
{
    fixture *f = *state;
    char *b = zpt_path(f->dir, "b.jsonl");
    size_t n;
    char *data = zpt_read_file(b, &n);
    char *nl = strchr(data, '\n');
    *nl = ' '; /* two records on one line: 4 lines, same size */
    assert_int_equal(zpt_write_file(b, data, n), 0);
    free(data);
    char text[256];
    snprintf(text, sizeof text,
             "{\"format_version\": 1, \"shards\": [{\"path\": \"b.jsonl\", \"bytes\": %zu, "
             "\"samples\": 5}]}",
             n);
    assert_int_equal(zp_dataset_add_manifest_json(f->ds, text, strlen(text), f->dir), ZP_OK);
    zpi_err err = {0};
    assert_int_equal(cache_load(f->ds, 0, &err), ZP_ERR_FORMAT);
    assert_contains(err.msg, "shard 'b.jsonl': has 4 records but the manifest says 5");
    free(b);
}

/* zp_dataset_pack + zp_dataset_add_packed (the MPI broadcast): the same
 * dataset as the manifest without a folder gives (names, paths, counts,
 * hashes: the same manifest again), with no stat() of the shards; a shard
 * not as packed is caught when it is loaded; bytes that are not packed are
 * refused whole. */
static void test_packed_round_trip(void **state)
{
    fixture *f = *state;
    char cwd[PATH_MAX];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(f->dir), 0);
    add_ok(f->ds, "b.jsonl");
    add_ok(f->ds, "./a.jsonl.zst");
    add_ok(f->ds, "c*.jsonl.zst");
    assert_int_equal(zp_dataset_verify(f->ds), ZP_OK);
    char *packed = NULL, *want = NULL, *got = NULL;
    size_t len = 0, wlen = 0, glen = 0;
    assert_int_equal(zp_dataset_pack(f->ds, &packed, &len), ZP_OK);
    assert_int_equal(zp_dataset_manifest_json(f->ds, 0, NULL, &want, &wlen), ZP_OK);
    assert_int_equal(chdir("/"), 0);
    zp_dataset *d2 = new_ds(f);
    assert_int_equal(zp_dataset_add_packed(d2, packed, len), ZP_OK);
    expect_same_dataset(f->ds, d2);
    assert_string_equal(zp_dataset_shard_name(d2, 1), "./a.jsonl.zst");
    assert_int_equal(zp_dataset_manifest_json(d2, 0, NULL, &got, &glen), ZP_OK);
    assert_string_equal(got, want);
    free(got);
    /* every prefix, and one byte more, is refused whole */
    for (size_t cut = 0; cut < len; cut += 7) {
        zp_dataset *d3 = new_ds(f);
        assert_int_not_equal(zp_dataset_add_packed(d3, packed, cut), ZP_OK);
        assert_int_equal(zp_dataset_num_shards(d3), 0);
        zp_dataset_destroy(d3);
    }
    char *more = malloc(len + 1);
    assert_non_null(more);
    memcpy(more, packed, len);
    more[len] = 'x';
    zp_dataset *d4 = new_ds(f);
    assert_int_equal(zp_dataset_add_packed(d4, more, len + 1), ZP_ERR_FORMAT);
    assert_contains(zp_dataset_errmsg(d4), "packed dataset: 1 bytes after its 3 shards");
    assert_int_equal(zp_dataset_num_shards(d4), 0);
    zp_dataset_destroy(d4);
    zp_dataset *d5 = new_ds(f);
    assert_int_equal(zp_dataset_add_packed(d5, "{\"format_version\": 1}", 21), ZP_ERR_FORMAT);
    assert_contains(zp_dataset_errmsg(d5), "not packed by this version");
    zp_dataset_destroy(d5);
    free(more);

    /* the files are not looked at when added: a shard removed since is
     * added, and its load fails naming it; a shard of another size too */
    char *b = zpt_path(f->dir, "b.jsonl"), *a = zpt_path(f->dir, "a.jsonl.zst");
    size_t n;
    char *data = zpt_read_file(b, &n);
    assert_int_equal(zpt_write_file(b, data, n - 1), 0);
    assert_int_equal(unlink(a), 0);
    zp_dataset *d6 = new_ds(f);
    assert_int_equal(zp_dataset_add_packed(d6, packed, len), ZP_OK);
    assert_int_equal(zp_dataset_num_shards(d6), 3);
    zpi_err err = {0};
    assert_int_equal(cache_load(d6, 0, &err), ZP_ERR_FORMAT);
    assert_contains(err.msg, "shard 'b.jsonl': stale manifest: it says");
    assert_contains(err.msg, "bytes but '");
    err = (zpi_err){0};
    assert_int_equal(cache_load(d6, 1, &err), ZP_ERR_IO);
    assert_contains(err.msg, "shard './a.jsonl.zst': cannot open '");
    assert_int_equal(cache_load(d6, 2, &err), ZP_OK);
    /* while a dataset built as usual refuses them when they are added */
    zp_dataset *d7 = new_ds(f);
    assert_int_equal(zp_dataset_add_manifest_json(d7, want, wlen, NULL), ZP_ERR_FORMAT);
    assert_contains(zp_dataset_errmsg(d7), "shard 'b.jsonl': stale manifest (in memory)");
    zp_dataset_destroy(d7);
    zp_dataset_destroy(d6);
    zp_dataset_destroy(d2);
    assert_int_equal(chdir(cwd), 0);
    free(data);
    free(a);
    free(b);
    free(want);
    free(packed);
}

static void test_index_once(void **state)
{
    fixture *f = *state;
    char *a = zpt_path(f->dir, "a.jsonl.zst");
    add_ok(f->ds, a);
    assert_int_equal(zp_dataset_index(f->ds), ZP_OK);
    uint64_t fp = zp_dataset_fingerprint(f->ds);
    /* the second call must not read the shard again */
    assert_int_equal(unlink(a), 0);
    assert_int_equal(zp_dataset_index(f->ds), ZP_OK);
    assert_int_equal(zp_dataset_num_samples(f->ds), 7);
    assert_int_equal(zp_dataset_fingerprint(f->ds), fp);
    free(a);
}

static void test_index_error_names_shard(void **state)
{
    fixture *f = *state;
    char *p = zpt_path(f->dir, "bad.jsonl");
    assert_int_equal(zpt_write_file(p, "{\"a\": 1}\n\n", (size_t)-1), 0);
    add_ok(f->ds, p);
    assert_int_equal(zp_dataset_index(f->ds), ZP_ERR_FORMAT);
    assert_contains(zp_dataset_errmsg(f->ds), "bad.jsonl");
    assert_contains(zp_dataset_errmsg(f->ds), "empty record at line 2");
    assert_int_equal(f->log_errors, 0);
    free(p);
}

/* ------------------------------------------------------------ index store */

static void get_mtime(const char *path, struct timespec *ts)
{
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    *ts = sb.st_mtim;
}

static void set_mtime(const char *path, const struct timespec *ts)
{
    struct timespec t[2] = {*ts, *ts};
    assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

/* Make dir/name look written an hour ago (with a nonzero ns part): the store
 * does not keep entries of shards modified in the last seconds. */
static void backdate(const char *dir, const char *name)
{
    char *p = zpt_path(dir, name);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec -= 3600;
    ts.tv_nsec = 123456789;
    set_mtime(p, &ts);
    free(p);
}

/* Replace dir/name with as many '\n' bytes (not a valid shard of either
 * format), keeping its size and mtime: only reading it can tell. */
static void garble_keep_mtime(const char *dir, const char *name)
{
    char *p = zpt_path(dir, name);
    struct timespec ts;
    get_mtime(p, &ts);
    size_t n;
    char *data = zpt_read_file(p, &n);
    assert_non_null(data);
    memset(data, '\n', n);
    assert_int_equal(zpt_write_file(p, data, n), 0);
    set_mtime(p, &ts);
    free(data);
    free(p);
}

/* Entries in a folder (temporary files included), and the first one's path. */
static size_t dir_entries(const char *dir, char **first)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (n++ == 0 && first)
            *first = zpt_path(dir, e->d_name);
    }
    closedir(d);
    return n;
}

static char *make_cache_dir(fixture *f)
{
    char *c = zpt_path(f->dir, "cache");
    assert_int_equal(mkdir(c, 0755), 0);
    return c;
}

/* A second dataset over the same shards takes the counts from the store
 * without reading the shards; a changed mtime makes it read them again. */
static void test_index_store_hit(void **state)
{
    fixture *f = *state;
    char *cache = make_cache_dir(f);
    const char *names[] = {"a.jsonl.zst", "b.jsonl"};
    backdate(f->dir, "a.jsonl.zst");
    backdate(f->dir, "b.jsonl");
    zp_dataset *d1 = indexed_ds(f, cache, names, 2, 12);
    assert_int_equal(dir_entries(cache, NULL), 2); /* one entry per shard, no temporaries */

    garble_keep_mtime(f->dir, "a.jsonl.zst");
    /* the setting is copied at create: the caller's buffer may change */
    char dirbuf[PATH_MAX];
    snprintf(dirbuf, sizeof dirbuf, "%s", cache);
    zp_dataset *d2 = cached_ds(f, dirbuf, names, 2);
    memset(dirbuf, 0, sizeof dirbuf);
    assert_int_equal(zp_dataset_index(d2), ZP_OK);
    assert_int_equal(zp_dataset_shard_samples(d2, 0), 7);
    assert_int_equal(zp_dataset_shard_samples(d2, 1), 5);
    assert_int_equal(zpi_dataset_shard_offset(d2, 1), 7);
    assert_int_equal(zp_dataset_fingerprint(d2), zp_dataset_fingerprint(d1));
    assert_int_equal(f->log_errors + f->log_warnings, 0);

    /* a changed mtime (1 ns later) is a miss: the shard is read, and fails */
    char *a = zpt_path(f->dir, "a.jsonl.zst");
    struct timespec ts;
    get_mtime(a, &ts);
    ts.tv_nsec++;
    set_mtime(a, &ts);
    const char *b_first[] = {"b.jsonl", "a.jsonl.zst"};
    zp_dataset *d3 = cached_ds(f, cache, b_first, 2);
    assert_int_equal(zp_dataset_index(d3), ZP_ERR_FORMAT);
    assert_contains(zp_dataset_errmsg(d3), "a.jsonl.zst");
    assert_int_equal(zp_dataset_shard_samples(d3, 0), 5); /* b still came from the cache */

    /* and a dataset without the cache reads the shard too */
    zp_dataset *d4 = cached_ds(f, NULL, names, 1);
    assert_int_equal(zp_dataset_index(d4), ZP_ERR_FORMAT);
    zp_dataset_destroy(d4);
    zp_dataset_destroy(d3);
    zp_dataset_destroy(d2);
    zp_dataset_destroy(d1);
    free(a);
    free(cache);
}

/* An entry whose size differs from the file's is stale: the shard is read
 * again, and the entry replaced. */
static void test_index_store_stale_size(void **state)
{
    fixture *f = *state;
    char *cache = make_cache_dir(f);
    const char *names[] = {"b.jsonl"};
    backdate(f->dir, "b.jsonl");
    zp_dataset *d1 = indexed_ds(f, cache, names, 1, 5);

    /* one more record, same mtime: only the size tells */
    char *b = zpt_path(f->dir, "b.jsonl");
    struct timespec ts;
    get_mtime(b, &ts);
    assert_int_equal(zpt_append_file(b, "{\"id\": 99}\n", 11), 0);
    set_mtime(b, &ts);
    zp_dataset *d2 = indexed_ds(f, cache, names, 1, 6);
    assert_int_equal(dir_entries(cache, NULL), 1); /* replaced, not added */

    /* the replaced entry serves the new file */
    garble_keep_mtime(f->dir, "b.jsonl");
    zp_dataset *d3 = indexed_ds(f, cache, names, 1, 6);
    zp_dataset_destroy(d3);
    zp_dataset_destroy(d2);
    zp_dataset_destroy(d1);
    free(b);
    free(cache);
}

/* A corrupt entry is a miss (a warning), never an error; the shard is read
 * and a good entry written in its place. */
static void test_index_store_corrupt_entry(void **state)
{
    fixture *f = *state;
    char *cache = make_cache_dir(f);
    const char *names[] = {"a.jsonl.zst"};
    backdate(f->dir, "a.jsonl.zst");
    zp_dataset_destroy(indexed_ds(f, cache, names, 1, 7)); /* writes the entry */
    char *entry = NULL;
    assert_int_equal(dir_entries(cache, &entry), 1);
    const char *bad[] = {
        "",
        "{\"zephon_index_cache\": 1, \"path\": ",
        "[1, 2, 3]",
        "{\"zephon_index_cache\": 1, \"path\": 5}",
        "{\"zephon_index_cache\": 2}",
        ("{\"zephon_index_cache\": 1, \"path\": \"/x\", \"format\": \"jsonl.zst\", \"bytes\": 1, "
         "\"mtime_ns\": 1, \"samples\": -3, \"longest_record\": 1, \"decoded_bytes\": 1}"),
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(zpt_write_file(entry, bad[i], strlen(bad[i])), 0);
        f->log_warnings = 0;
        zp_dataset *d = cached_ds(f, cache, names, 1);
        zp_status st = zp_dataset_index(d);
        if (st != ZP_OK)
            fail_msg("case %zu: %s", i, zp_dataset_errmsg(d));
        assert_int_equal(zp_dataset_num_samples(d), 7);
        if (f->log_warnings != 1)
            fail_msg("case %zu: %d warnings, want 1", i, f->log_warnings);
        assert_contains(f->last_warning, "corrupt");
        assert_contains(f->last_warning, entry);
        zp_dataset_destroy(d);
    }
    assert_int_equal(f->log_errors, 0);
    /* the last miss rewrote a good entry */
    garble_keep_mtime(f->dir, "a.jsonl.zst");
    zp_dataset *d2 = indexed_ds(f, cache, names, 1, 7);
    zp_dataset_destroy(d2);
    free(entry);
    free(cache);
}

/* A store folder that cannot be used at create is a settings error naming
 * the setting and the folder; one that goes away later is logged once per
 * index pass and otherwise ignored. */
static void test_index_store_unwritable(void **state)
{
    fixture *f = *state;
    const char *names[] = {"a.jsonl.zst", "c.jsonl.zst"};
    backdate(f->dir, "a.jsonl.zst");
    backdate(f->dir, "c.jsonl.zst");
    const char *dirs[] = {"b.jsonl/cache", "no-such-folder", "b.jsonl"};
    const char *why[] = {"Not a directory", "No such file or directory", "not a folder"};
    for (size_t i = 0; i < 3; i++) {
        char *cache = zpt_path(f->dir, dirs[i]);
        zp_dataset_config cfg;
        zp_dataset_config_init(&cfg);
        cfg.index_store_dir = cache;
        zp_dataset *d = NULL;
        assert_int_equal(zp_dataset_create(&cfg, &d), ZP_ERR_INVALID);
        assert_non_null(d); /* the error-only handle keeps the message */
        char want[PATH_MAX + 64];
        snprintf(want, sizeof want, "index_store_dir = '%s'", cache);
        assert_contains(zp_dataset_errmsg(d), want);
        assert_contains(zp_dataset_errmsg(d), why[i]);
        assert_int_equal(zp_dataset_add(d, cache), ZP_ERR_INVALID);
        assert_contains(zp_dataset_errmsg(d), want);
        zp_dataset_destroy(d);
        free(cache);
    }
    char *cache = make_cache_dir(f);
    zp_dataset *d = cached_ds(f, cache, names, 2);
    assert_int_equal(rmdir(cache), 0);
    f->log_warnings = 0;
    assert_int_equal(zp_dataset_index(d), ZP_OK);
    assert_int_equal(zp_dataset_num_samples(d), 10);
    if (f->log_warnings != 1)
        fail_msg("%d warnings, want 1", f->log_warnings);
    assert_contains(f->last_warning, "index store");
    assert_contains(f->last_warning, cache);
    assert_int_equal(f->log_errors, 0);
    assert_string_equal(zp_dataset_errmsg(d), "");
    zp_dataset_destroy(d);
    free(cache);
}

/* Any other setting out of range at create: named with its value. */
static void test_create_invalid(void **state)
{
    (void)state;
    zp_dataset_config cfg;
    zp_dataset_config_init(&cfg);
    cfg.max_shard_bytes = SIZE_MAX;
    zp_dataset *d = NULL;
    assert_int_equal(zp_dataset_create(&cfg, &d), ZP_ERR_INVALID);
    assert_non_null(d);
    char want[64];
    snprintf(want, sizeof want, "max_shard_bytes = %zu: at most", (size_t)SIZE_MAX);
    assert_contains(zp_dataset_errmsg(d), want);
    assert_int_equal(zp_dataset_index(d), ZP_ERR_INVALID);
    assert_int_equal(zp_dataset_num_shards(d), 0);
    zp_dataset_destroy(d);
    assert_int_equal(zp_dataset_create(&cfg, NULL), ZP_ERR_INVALID);
}

/* A shard modified in the last seconds is indexed but not cached: a
 * same-size rewrite within the mtime granularity could not be detected. */
static void test_index_store_skips_fresh_shard(void **state)
{
    fixture *f = *state;
    char *cache = make_cache_dir(f);
    const char *names[] = {"a.jsonl.zst"};
    zp_dataset *d1 = indexed_ds(f, cache, names, 1, 7);
    assert_int_equal(dir_entries(cache, NULL), 0);
    zp_dataset_destroy(d1);
    free(cache);
}

/* A hit accepts only what a load would: an entry whose longest record is
 * over this dataset's max_record_bytes is a miss, and the load fails. */
static void test_index_store_limits(void **state)
{
    fixture *f = *state;
    char *cache = make_cache_dir(f);
    const char *names[] = {"a.jsonl.zst"};
    backdate(f->dir, "a.jsonl.zst");
    zp_dataset_destroy(indexed_ds(f, cache, names, 1, 7)); /* writes the entry */

    zp_dataset_config cfg;
    zp_dataset_config_init(&cfg);
    cfg.index_store_dir = cache;
    cfg.max_record_bytes = 10;
    zp_dataset *d2;
    assert_int_equal(zp_dataset_create(&cfg, &d2), ZP_OK);
    char *a = zpt_path(f->dir, "a.jsonl.zst");
    add_ok(d2, a);
    assert_int_equal(zp_dataset_index(d2), ZP_ERR_LIMIT);
    assert_contains(zp_dataset_errmsg(d2), "max_record_bytes");
    zp_dataset_destroy(d2);
    free(a);
    free(cache);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test_setup_teardown(test_paths, setup, teardown),
        cmocka_unit_test_setup_teardown(test_path_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_glob_sorted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_glob_no_match, setup, teardown),
        cmocka_unit_test_setup_teardown(test_glob_missing_folder, setup, teardown),
        cmocka_unit_test_setup_teardown(test_messages_list_suffixes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_manifest_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_manifest_written_relative, setup, teardown),
        cmocka_unit_test_setup_teardown(test_manifest_relative_paths, setup, teardown),
        cmocka_unit_test_setup_teardown(test_manifest_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_manifest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_verify_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_manifest_json_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_manifest_json_is_the_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_manifest_name, setup, teardown),
        cmocka_unit_test_setup_teardown(test_manifest_json_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_folder_sorted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_folder_manifest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_file_twice, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_file_many, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exclude, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hash_checked_on_load, setup, teardown),
        cmocka_unit_test_setup_teardown(test_count_checked_on_load, setup, teardown),
        cmocka_unit_test_setup_teardown(test_packed_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_index_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_index_error_names_shard, setup, teardown),
        cmocka_unit_test_setup_teardown(test_index_store_hit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_index_store_stale_size, setup, teardown),
        cmocka_unit_test_setup_teardown(test_index_store_corrupt_entry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_index_store_unwritable, setup, teardown),
        cmocka_unit_test(test_create_invalid),
        cmocka_unit_test_setup_teardown(test_index_store_skips_fresh_shard, setup, teardown),
        cmocka_unit_test_setup_teardown(test_index_store_limits, setup, teardown),
    };
    return cmocka_run_group_tests_name("dataset", tests, NULL, NULL);
}
