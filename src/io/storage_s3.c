/*
 * storage_s3.c - the s3://bucket/key backend: the object is fetched over
 * http(s) from the endpoint, path style (<endpoint>/<bucket>/<key>, the key
 * percent-encoded), and each request is signed by libcurl's AWS SigV4
 * (CURLOPT_AWS_SIGV4) with the credentials storage.c read from
 * $AWS_ACCESS_KEY_ID / $AWS_SECRET_ACCESS_KEY / $AWS_SESSION_TOKEN.
 * Open, read and close are the remote ones of storage_http.c.
 *
 * Thread safety: no state of its own.
 */
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"
#include "io/backend.h"
#include "io/url.h"

static int s3_matches(const char *spec) { return spec && !strncasecmp(spec, "s3://", 5); }

static zp_status s3_setup_easy(zpi_storage *s, const char *spec, void *easy, void **headers,
                               zpi_err *err)
{
    char red[512];
    zpi_url_redact(spec, red, sizeof red);
    if (!s->s3_key || !s->s3_secret)
        return zpi_err_set(err, ZP_ERR_INVALID,
                           "%s: no S3 credentials: set AWS_ACCESS_KEY_ID and "
                           "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones)",
                           red);
    if (strncasecmp(s->s3_endpoint, "http://", 7) && strncasecmp(s->s3_endpoint, "https://", 8)) {
        char ep[300];
        zpi_url_redact(s->s3_endpoint, ep, sizeof ep);
        return zpi_err_set(err, ZP_ERR_INVALID,
                           "%s: the S3 endpoint '%s' (s3_endpoint, else $AWS_ENDPOINT_URL) is not "
                           "an http:// or https:// URL",
                           red, ep);
    }
    char *url = zpi_s3_http_url(s->s3_endpoint, spec);
    if (!url)
        return zpi_err_set(err, ZP_ERR_INVALID, "%s: not an S3 object URL (s3://bucket/key)",
                           red);
    zp_status st = zpi_http_setup_common(s, url, easy, err);
    free(url);
    if (st != ZP_OK)
        return st;
    char sigv4[160];
    zpi_fmt(sigv4, sizeof sigv4, "aws:amz:%s:s3", s->s3_region);
    CURL *e = easy;
    CURLcode rc = curl_easy_setopt(e, CURLOPT_AWS_SIGV4, sigv4);
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(e, CURLOPT_USERNAME, s->s3_key);
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(e, CURLOPT_PASSWORD, s->s3_secret);
    if (rc != CURLE_OK)
        return zpi_err_set(err, ZP_ERR_INTERNAL, "%s: libcurl refused the SigV4 settings: %s",
                           red, curl_easy_strerror(rc));
    /* libcurl 7.88 does not send the payload hash header, which S3 requires. */
    struct curl_slist *h = *headers, *n;
    n = curl_slist_append(h, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (n)
        h = n;
    if (n && s->s3_token) {
        size_t len = strlen(s->s3_token) + 32;
        char *line = malloc(len);
        n = NULL;
        if (line) {
            zpi_fmt(line, len, "x-amz-security-token: %s", s->s3_token);
            n = curl_slist_append(h, line);
            memset(line, 0, len);
            free(line);
        }
        if (n)
            h = n;
    }
    *headers = h;
    if (!n)
        return zpi_err_set(err, ZP_ERR_NOMEM, "%s: out of memory", red);
    return ZP_OK;
}

static zp_status s3_open(zpi_storage *s, const char *spec, zpi_object **out, zpi_err *err)
{
    return zpi_remote_open(&zpi_backend_s3, s, spec, out, err);
}

const zpi_backend zpi_backend_s3 = {
    .name = "s3",
    .matches = s3_matches,
    .open = s3_open,
    .read_range = zpi_remote_read,
    .close = zpi_remote_close,
    .setup_easy = s3_setup_easy,
};
