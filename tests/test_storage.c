/*
 * test_storage.c - the storage layer without a network: URL redaction,
 * identity and basename, zp_storage_is_url, the settings' defaults and
 * their environment fallbacks, the S3 URL mapping (path style, key
 * encoding), the missing-credentials error, the local backend (open, size,
 * ranges, read_all and its limit) and the insecure-TLS warning.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "io/storage.h"
#include "testutil.h"
#include "base/util.h"
#include "zephon/storage.h"

static void redact_is(const char *spec, const char *want)
{
    char out[256];
    zpi_url_redact(spec, out, sizeof out);
    assert_string_equal(out, want);
}

static void test_redact(void **state)
{
    (void)state;
    redact_is("https://user:pa55@host.example/a/b.jsonl", "https://host.example/a/b.jsonl");
    redact_is("https://host/b.jsonl?X-Amz-Signature=abc&X-Amz-Credential=k",
              "https://host/b.jsonl?<redacted>");
    redact_is("http://u:p@h:8080/x?sig=1#frag", "http://h:8080/x?<redacted>");
    redact_is("http://h/x#frag", "http://h/x");
    /* An '@' in the password and one in the path. */
    redact_is("http://u:p@ss@h/a@b", "http://h/a@b");
    redact_is("s3://bucket/key.jsonl", "s3://bucket/key.jsonl");
    redact_is("/local/path?with?marks", "/local/path?with?marks");
    /* Truncation keeps the string terminated and shorter than cap. */
    char small[8];
    zpi_url_redact("https://user:pw@hostname/long", small, sizeof small);
    assert_int_equal(strlen(small), 7);
    assert_null(strstr(small, "pw"));
}

static void identity_is(const char *spec, const char *want)
{
    char *id = zpi_url_identity(spec);
    assert_non_null(id);
    assert_string_equal(id, want);
    free(id);
}

static void test_identity(void **state)
{
    (void)state;
    identity_is("HTTPS://User:Pw@Host.Example:443/A/b.jsonl?sig=1",
                "https://host.example/A/b.jsonl");
    identity_is("http://HOST:80/x", "http://host/x");
    identity_is("http://host:8080/x", "http://host:8080/x");
    /* the port as a number: leading zeros, the default written with them,
     * an empty port; an IPv6 literal's colons are not a port */
    identity_is("http://127.0.0.1:037311/a", "http://127.0.0.1:37311/a");
    identity_is("http://h:0080/a", "http://h/a");
    identity_is("https://h:000443/a", "https://h/a");
    identity_is("http://h:/a", "http://h/a");
    identity_is("http://h:0/a", "http://h:0/a");
    identity_is("http://[::1]:08080/a", "http://[::1]:8080/a");
    identity_is("http://[::1]/a", "http://[::1]/a");
    identity_is("http://host", "http://host/");
    identity_is("S3://Bucket/dir/k.jsonl", "s3://bucket/dir/k.jsonl");
    identity_is("/data/a.jsonl", "/data/a.jsonl");
}

/* Paths that name one object (RFC 3986 6.2.2; libcurl removes dot segments
 * before sending) have one identity: "the same shard twice" is caught. */
static void test_identity_normalised(void **state)
{
    (void)state;
    identity_is("http://h/ds/./a.jsonl", "http://h/ds/a.jsonl");
    identity_is("http://h/ds/x/../a.jsonl", "http://h/ds/a.jsonl");
    identity_is("http://h/../../a.jsonl", "http://h/a.jsonl");
    identity_is("http://h/ds/a/..", "http://h/ds/");
    identity_is("http://h/ds/.", "http://h/ds/");
    identity_is("http://h/ds/shard-0000%30.jsonl", "http://h/ds/shard-00000.jsonl");
    identity_is("http://h/%7euser/%2e/a", "http://h/~user/a");
    identity_is("http://h/a%2fb%20c", "http://h/a%2Fb%20c"); /* reserved: kept, upper case */
    identity_is("http://h/a%2", "http://h/a%2");             /* not an escape: as is */
    identity_is("http://h/a%zz", "http://h/a%zz");
    identity_is("http://h//a", "http://h//a"); /* an empty segment is not removed */
    identity_is("http://h/.../a", "http://h/.../a");
    identity_is("https://h/a/./b?q=1", "https://h/a/b");
    /* an S3 key is literal */
    identity_is("s3://b/x/./k%30", "s3://b/x/./k%30");
}

static void basename_is(const char *spec, const char *want)
{
    char *b = zpi_url_basename(spec);
    assert_non_null(b);
    assert_string_equal(b, want);
    free(b);
}

static void test_basename(void **state)
{
    (void)state;
    basename_is("s3://a/x/b.jsonl?q", "b.jsonl");
    basename_is("https://u:p@h/dir/c.jsonl.zst#f", "c.jsonl.zst");
    basename_is("/data/shards/d.jsonl", "d.jsonl");
    basename_is("e.jsonl", "e.jsonl");
    basename_is("http://h", "");
}

static void test_is_url(void **state)
{
    (void)state;
    assert_int_equal(zp_storage_is_url("http://h/x"), 1);
    assert_int_equal(zp_storage_is_url("HTTPS://h/x"), 1);
    assert_int_equal(zp_storage_is_url("s3://b/k"), 1);
    assert_int_equal(zp_storage_is_url("S3://b/k"), 1);
    assert_int_equal(zp_storage_is_url("ftp://h/x"), 0);
    assert_int_equal(zp_storage_is_url("/data/http://x"), 0);
    assert_int_equal(zp_storage_is_url("http:/x"), 0);
    assert_int_equal(zp_storage_is_url(NULL), 0);
    assert_int_equal(zpi_is_url("s3://b/k"), 1);
    assert_ptr_equal(zpi_backend_for("s3://b/k"), &zpi_backend_s3);
    assert_ptr_equal(zpi_backend_for("https://h/k"), &zpi_backend_http);
    assert_ptr_equal(zpi_backend_for("/x/k"), &zpi_backend_local);
}

static void test_config_defaults(void **state)
{
    (void)state;
    zp_storage_config c;
    memset(&c, 0xab, sizeof c);
    zp_storage_config_init(&c);
    assert_null(c.cache_dir);
    assert_true(c.cache_limit_bytes == 16ULL << 30);
    assert_true(c.connect_timeout_s == 10.0);
    assert_true(c.low_speed_bytes == 1024);
    assert_true(c.low_speed_time_s == 30.0);
    assert_int_equal(c.retries, 5);
    assert_true(c.retry_base_s == 0.25);
    assert_true(c.retry_max_s == 20.0);
    assert_int_equal(c.insecure_tls, 0);
    assert_null(c.ca_file);
    assert_null(c.s3_endpoint);
    assert_null(c.s3_region);
    assert_true(c.lease_s == 30.0);

    /* The S3 fallbacks: environment, then the defaults. */
    unsetenv("AWS_ENDPOINT_URL");
    unsetenv("AWS_REGION");
    setenv("AWS_DEFAULT_REGION", "eu-west-3", 1);
    zpi_storage *s = NULL;
    zpi_err err = {0};
    assert_int_equal(zpi_storage_create(&c, NULL, NULL, &s, &err), ZP_OK);
    assert_string_equal(zpi_storage_config(s)->s3_region, "eu-west-3");
    assert_string_equal(zpi_storage_config(s)->s3_endpoint, "https://s3.eu-west-3.amazonaws.com");
    zpi_storage_destroy(s);
    setenv("AWS_REGION", "ap-south-1", 1);
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9", 1);
    assert_int_equal(zpi_storage_create(&c, NULL, NULL, &s, &err), ZP_OK);
    assert_string_equal(zpi_storage_config(s)->s3_region, "ap-south-1");
    assert_string_equal(zpi_storage_config(s)->s3_endpoint, "http://127.0.0.1:9");
    zpi_storage_destroy(s);
    /* Settings win over the environment, and strings are copied. */
    char ep[] = "http://endpoint:1", rg[] = "my-region";
    c.s3_endpoint = ep;
    c.s3_region = rg;
    assert_int_equal(zpi_storage_create(&c, NULL, NULL, &s, &err), ZP_OK);
    ep[0] = rg[0] = 'X';
    assert_string_equal(zpi_storage_config(s)->s3_endpoint, "http://endpoint:1");
    assert_string_equal(zpi_storage_config(s)->s3_region, "my-region");
    zpi_storage_destroy(s);
    unsetenv("AWS_REGION");
    unsetenv("AWS_DEFAULT_REGION");
    unsetenv("AWS_ENDPOINT_URL");
    /* A bad setting is named. */
    zp_storage_config_init(&c);
    c.connect_timeout_s = 0;
    assert_int_equal(zpi_storage_create(&c, NULL, NULL, &s, &err), ZP_ERR_INVALID);
    assert_null(s);
    assert_non_null(strstr(err.msg, "connect_timeout_s"));
}

static void test_s3_url(void **state)
{
    (void)state;
    char *u = zpi_s3_http_url("http://127.0.0.1:9000/", "s3://bkt/dir/a b+c~é%.jsonl");
    assert_non_null(u);
    assert_string_equal(u, "http://127.0.0.1:9000/bkt/dir/a%20b%2Bc~%C3%A9%25.jsonl");
    free(u);
    u = zpi_s3_http_url("https://s3.us-east-1.amazonaws.com", "s3://b/k.jsonl?versionId=1");
    assert_string_equal(u, "https://s3.us-east-1.amazonaws.com/b/k.jsonl");
    free(u);
    assert_null(zpi_s3_http_url("http://e", "s3://bucket-only"));
    assert_null(zpi_s3_http_url("http://e", "s3://bucket/"));
    assert_null(zpi_s3_http_url("http://e", "s3:///key"));
    assert_null(zpi_s3_http_url("http://e", "http://b/k"));
}

static void test_s3_missing_credentials(void **state)
{
    (void)state;
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    unsetenv("AWS_SESSION_TOKEN");
    zp_storage_config c;
    zp_storage_config_init(&c);
    c.s3_endpoint = "http://127.0.0.1:9"; /* never contacted */
    zpi_storage *s = NULL;
    zpi_err err = {0};
    assert_int_equal(zpi_storage_create(&c, NULL, NULL, &s, &err), ZP_OK);
    zpi_object *o = NULL;
    assert_int_equal(zpi_object_open(s, "s3://bkt/k.jsonl", &o, NULL, &err), ZP_ERR_INVALID);
    assert_null(o);
    assert_non_null(strstr(err.msg, "s3://bkt/k.jsonl"));
    assert_non_null(strstr(err.msg, "AWS_ACCESS_KEY_ID"));
    assert_non_null(strstr(err.msg, "AWS_SECRET_ACCESS_KEY"));
    zpi_storage_destroy(s);
    /* Only the key: still missing the secret. */
    setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
    assert_int_equal(zpi_storage_create(&c, NULL, NULL, &s, &err), ZP_OK);
    assert_int_equal(zpi_object_open(s, "s3://bkt/k.jsonl", &o, NULL, &err), ZP_ERR_INVALID);
    assert_non_null(strstr(err.msg, "AWS_SECRET_ACCESS_KEY"));
    zpi_storage_destroy(s);
    unsetenv("AWS_ACCESS_KEY_ID");
}

static void test_local_backend(void **state)
{
    (void)state;
    char *dir = zpt_tmpdir();
    char *path = zpt_path(dir, "f.bin");
    char data[5000];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (char)(i * 7 + 3);
    assert_int_equal(zpt_write_file(path, data, sizeof data), 0);
    zpi_storage *s = NULL;
    zpi_err err = {0};
    assert_int_equal(zpi_storage_create(NULL, NULL, NULL, &s, &err), ZP_OK);
    zpi_object *o = NULL;
    zpi_object_info info;
    assert_int_equal(zpi_object_open(s, path, &o, &info, &err), ZP_OK);
    assert_true(info.size == sizeof data);
    assert_true(zpi_object_info_get(o)->size == sizeof data);
    char buf[6000];
    size_t got = 0;
    assert_int_equal(zpi_object_read(o, 100, buf, 1000, &got, &err), ZP_OK);
    assert_int_equal(got, 1000);
    assert_memory_equal(buf, data + 100, 1000);
    /* A range past the end is cut at the end; one beyond it reads nothing. */
    assert_int_equal(zpi_object_read(o, 4900, buf, 1000, &got, &err), ZP_OK);
    assert_int_equal(got, 100);
    assert_memory_equal(buf, data + 4900, 100);
    assert_int_equal(zpi_object_read(o, 6000, buf, 10, &got, &err), ZP_OK);
    assert_int_equal(got, 0);
    zpi_object_close(o);

    char *all = NULL;
    size_t len = 0;
    assert_int_equal(zpi_object_read_all(s, path, sizeof data, &all, &len, &err), ZP_OK);
    assert_int_equal(len, sizeof data);
    assert_memory_equal(all, data, sizeof data);
    assert_int_equal(all[len], '\0');
    free(all);
    assert_int_equal(zpi_object_read_all(s, path, sizeof data - 1, &all, &len, &err),
                     ZP_ERR_LIMIT);
    assert_null(all);
    assert_non_null(strstr(err.msg, "f.bin"));

    /* A missing file names the file and the cause. */
    char *missing = zpt_path(dir, "missing.jsonl");
    assert_int_equal(zpi_object_open(s, missing, &o, NULL, &err), ZP_ERR_IO);
    assert_non_null(strstr(err.msg, "missing.jsonl"));
    assert_non_null(strstr(err.msg, "No such file"));
    assert_int_equal(zpi_object_open(s, dir, &o, NULL, &err), ZP_ERR_IO);
    zpi_storage_destroy(s);
    free(missing);
    free(path);
    zpt_rmtree(dir);
    free(dir);
}

typedef struct logs {
    int warns;
    char last[512];
} logs;

static void log_fn(void *user, zp_log_level lvl, const char *msg)
{
    logs *l = user;
    if (lvl == ZP_LOG_WARN)
        l->warns++;
    snprintf(l->last, sizeof l->last, "%s", msg);
}

static void test_insecure_warns(void **state)
{
    (void)state;
    zp_storage_config c;
    zp_storage_config_init(&c);
    logs l = {0};
    zpi_storage *s = NULL;
    zpi_err err = {0};
    assert_int_equal(zpi_storage_create(&c, log_fn, &l, &s, &err), ZP_OK);
    assert_int_equal(l.warns, 0);
    zpi_storage_destroy(s);
    c.insecure_tls = 1;
    assert_int_equal(zpi_storage_create(&c, log_fn, &l, &s, &err), ZP_OK);
    assert_int_equal(l.warns, 1);
    assert_non_null(strstr(l.last, "insecure_tls"));
    zpi_storage_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redact),
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_identity_normalised),
        cmocka_unit_test(test_basename),
        cmocka_unit_test(test_is_url),
        cmocka_unit_test(test_config_defaults),
        cmocka_unit_test(test_s3_url),
        cmocka_unit_test(test_s3_missing_credentials),
        cmocka_unit_test(test_local_backend),
        cmocka_unit_test(test_insecure_warns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
