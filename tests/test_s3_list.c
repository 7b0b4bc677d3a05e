/*
 * test_s3_list.c - parsing ListObjectsV2 answers (io/s3_list.c), no
 * network: keys and sizes in order, IsTruncated with its continuation
 * token, keys percent-encoded as encoding-type=url asks (and taken
 * literally when the server did not encode them), S3 error documents, and
 * answers that are not a valid listing (not XML, a Size that is not a
 * number, a truncated page without a token, an escape that does not decode).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "io/s3_list.h"

#define HEAD "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" \
             "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"

static zp_status parse(const char *xml, zpi_s3_page *p, zpi_err *err)
{
    memset(err, 0, sizeof *err);
    return zpi_s3_page_parse(xml, strlen(xml), "listing s3://b/p/", p, err);
}

static void test_page_with_token(void **state)
{
    (void)state;
    const char *xml = HEAD "<Name>b</Name><Prefix>p%2F</Prefix><KeyCount>2</KeyCount>"
                           "<MaxKeys>1000</MaxKeys><EncodingType>url</EncodingType>"
                           "<IsTruncated>true</IsTruncated>"
                           "<Contents><Key>p/a+b%2Bc.jsonl</Key><LastModified>x</LastModified>"
                           "<ETag>&quot;e&quot;</ETag><Size>12</Size></Contents>"
                           "<Contents><Key>p/%C3%A9t%C3%A9.jsonl</Key><Size>18446744073709551615</Size>"
                           "<Owner><ID>o</ID></Owner></Contents>"
                           "<NextContinuationToken>1ue/+x==</NextContinuationToken>"
                           "</ListBucketResult>";
    zpi_s3_page p;
    zpi_err err;
    assert_int_equal(parse(xml, &p, &err), ZP_OK);
    assert_int_equal(p.n, 2);
    assert_string_equal(p.keys[0], "p/a b+c.jsonl"); /* '+' is a space, %2B a '+' */
    assert_int_equal(p.sizes[0], 12);
    assert_string_equal(p.keys[1], "p/\xc3\xa9t\xc3\xa9.jsonl");
    assert_true(p.sizes[1] == UINT64_MAX);
    assert_true(p.truncated);
    assert_string_equal(p.next_token, "1ue/+x==");
    zpi_s3_page_free(&p);
}

static void test_last_page_literal_keys(void **state)
{
    (void)state;
    /* no EncodingType: the server sent the keys as they are (XML-escaped) */
    const char *xml = HEAD "<IsTruncated>false</IsTruncated>"
                           "<Contents><Key>p/a+b%41&amp;.jsonl</Key><Size>0</Size></Contents>"
                           "</ListBucketResult>";
    zpi_s3_page p;
    zpi_err err;
    assert_int_equal(parse(xml, &p, &err), ZP_OK);
    assert_int_equal(p.n, 1);
    assert_string_equal(p.keys[0], "p/a+b%41&.jsonl");
    assert_false(p.truncated);
    assert_null(p.next_token);
    zpi_s3_page_free(&p);
    /* an empty listing */
    assert_int_equal(parse(HEAD "<KeyCount>0</KeyCount><IsTruncated>false</IsTruncated>"
                                "</ListBucketResult>",
                           &p, &err),
                     ZP_OK);
    assert_int_equal(p.n, 0);
    zpi_s3_page_free(&p);
}

static void test_error_document(void **state)
{
    (void)state;
    const char *xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchBucket</Code>"
                      "<Message>The specified bucket does not exist</Message>"
                      "<BucketName>b</BucketName></Error>";
    zpi_s3_page p;
    zpi_err err;
    assert_int_equal(parse(xml, &p, &err), ZP_ERR_NETWORK);
    assert_non_null(strstr(err.msg, "listing s3://b/p/"));
    assert_non_null(strstr(err.msg, "NoSuchBucket: The specified bucket does not exist"));
    char why[200];
    zpi_s3_error_text(xml, strlen(xml), why, sizeof why);
    assert_string_equal(why, "NoSuchBucket: The specified bucket does not exist");
    zpi_s3_error_text("<html>503</html>", 16, why, sizeof why);
    assert_string_equal(why, "");
    zpi_s3_error_text("<Error><Code>Slo", 16, why, sizeof why); /* cut short */
    assert_string_equal(why, "");
}

static void invalid(const char *xml, const char *why)
{
    zpi_s3_page p;
    zpi_err err;
    assert_int_equal(parse(xml, &p, &err), ZP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "listing s3://b/p/: the answer is not a valid listing"));
    if (!strstr(err.msg, why))
        fail_msg("'%s' lacks '%s'", err.msg, why);
    assert_int_equal(p.n, 0);
    assert_null(p.keys);
}

static void test_invalid_answers(void **state)
{
    (void)state;
    invalid("<html><body>proxy error</body></html>", "not a ListBucketResult");
    invalid(HEAD "<Contents><Key>a", "not XML");
    invalid("", "not XML");
    invalid(HEAD "<Contents><Key>a</Key><Size>12x</Size></Contents></ListBucketResult>",
            "Size is not a number");
    invalid(HEAD "<Contents><Key>a</Key><Size>-1</Size></Contents></ListBucketResult>",
            "Size is not a number");
    invalid(HEAD "<Contents><Key>a</Key></Contents></ListBucketResult>", "without a Size");
    invalid(HEAD "<Contents><Size>1</Size></Contents></ListBucketResult>", "without a Key");
    invalid(HEAD "<IsTruncated>true</IsTruncated><Contents><Key>a</Key><Size>1</Size>"
                 "</Contents></ListBucketResult>",
            "IsTruncated without a NextContinuationToken");
    invalid(HEAD "<EncodingType>url</EncodingType><Contents><Key>a%2</Key><Size>1</Size>"
                 "</Contents></ListBucketResult>",
            "not URL-encoded");
    invalid(HEAD "<EncodingType>url</EncodingType><Contents><Key>a%00b</Key><Size>1</Size>"
                 "</Contents></ListBucketResult>",
            "not URL-encoded");
}

static void test_many_keys(void **state)
{
    (void)state;
    /* one page of 1,000 objects (the arrays grow) */
    size_t cap = 100 + 1000 * 80;
    char *xml = malloc(cap);
    assert_non_null(xml);
    size_t n = (size_t)snprintf(xml, cap, "%s<IsTruncated>false</IsTruncated>", HEAD);
    for (int i = 0; i < 1000; i++)
        n += (size_t)snprintf(xml + n, cap - n, "<Contents><Key>p/k%04d</Key><Size>%d</Size></Contents>",
                              i, i);
    n += (size_t)snprintf(xml + n, cap - n, "</ListBucketResult>");
    zpi_s3_page p;
    zpi_err err;
    assert_int_equal(zpi_s3_page_parse(xml, n, "l", &p, &err), ZP_OK);
    assert_int_equal(p.n, 1000);
    assert_string_equal(p.keys[999], "p/k0999");
    assert_int_equal(p.sizes[999], 999);
    zpi_s3_page_free(&p);
    free(xml);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_page_with_token),
        cmocka_unit_test(test_last_page_literal_keys),
        cmocka_unit_test(test_error_document),
        cmocka_unit_test(test_invalid_answers),
        cmocka_unit_test(test_many_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
