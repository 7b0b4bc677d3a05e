/*
 * storage_s3.c - the s3://bucket/key backend: the object is fetched over
 * http(s) from the endpoint, path style (<endpoint>/<bucket>/<key>, the key
 * percent-encoded), and each request is signed by libcurl's AWS SigV4
 * (CURLOPT_AWS_SIGV4) with the credentials storage.c read from
 * $AWS_ACCESS_KEY_ID / $AWS_SECRET_ACCESS_KEY / $AWS_SESSION_TOKEN.
 * Open, read and close are the remote ones of storage_http.c.
 *
 * Listing (s3://bucket/prefix): ListObjectsV2 (GET <endpoint>/<bucket>?
 * list-type=2&prefix=...&encoding-type=url), 1,000 keys a page, the pages
 * chained by their continuation tokens, each page read whole through the
 * retries of request.c and parsed by s3_list.c.
 *
 * Thread safety: no state of its own.
 */
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"
#include "io/backend.h"
#include "io/request.h"
#include "io/s3_list.h"
#include "io/url.h"

static int s3_matches(const char *spec) { return spec && !strncasecmp(spec, "s3://", 5); }

/* SigV4 signing and the headers S3 needs, on an easy handle already set
 * up for its URL. red names the request in messages. */
static zp_status s3_sign(zpi_storage *s, const char *red, void *easy, void **headers,
                         zpi_err *err)
{
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

/* The credentials and the endpoint are there, or the error says what to set. */
static zp_status s3_check(zpi_storage *s, const char *red, zpi_err *err)
{
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
    return ZP_OK;
}

static zp_status s3_setup_easy(zpi_storage *s, const char *spec, void *easy, void **headers,
                               zpi_err *err)
{
    char red[512];
    zpi_url_redact(spec, red, sizeof red);
    ZPI_FORWARD_IF_ERR(s3_check(s, red, err));
    char *url = zpi_s3_http_url(s->s3_endpoint, spec);
    if (!url)
        return zpi_err_set(err, ZP_ERR_INVALID, "%s: not an S3 object URL (s3://bucket/key)",
                           red);
    zp_status st = zpi_http_setup_common(s, url, easy, err);
    free(url);
    if (st != ZP_OK)
        return st;
    return s3_sign(s, red, easy, headers, err);
}

/* ------------------------------------------------------------ listing */

/* A listing request's spec is its http(s) URL at the endpoint (with the
 * query); signed like an object's request. */
static zp_status s3_list_setup_easy(zpi_storage *s, const char *url, void *easy, void **headers,
                                    zpi_err *err)
{
    char red[512];
    zpi_url_redact(url, red, sizeof red);
    ZPI_FORWARD_IF_ERR(zpi_http_setup_common(s, url, easy, err));
    return s3_sign(s, red, easy, headers, err);
}

static const zpi_backend s3_list_request = {
    .name = "s3 listing",
    .setup_easy = s3_list_setup_easy,
};

/* Append v to b percent-encoded for a query value (every byte but
 * A-Z a-z 0-9 - . _ ~, upper-case hex: as SigV4's canonical query wants). */
static int query_encode(zpi_buf *b, const char *v)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        unsigned c = *p;
        int keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                   c == '-' || c == '.' || c == '_' || c == '~';
        if (keep ? zpi_buf_printf(b, "%c", (char)c) != 0
                 : zpi_buf_printf(b, "%%%c%c", hex[c >> 4], hex[c & 15]) != 0)
            return -1;
    }
    return 0;
}

/* The most bytes one page's answer may have (1,000 keys of up to 1 KiB,
 * percent-encoded, with their other fields, fit well below). */
#define LIST_PAGE_MAX (32u << 20)

static zp_status s3_list(zpi_storage *s, const char *spec, zpi_list_fn fn, void *user,
                         zpi_err *err)
{
    char red[512];
    zpi_url_redact(spec, red, sizeof red);
    ZPI_FORWARD_IF_ERR(s3_check(s, red, err));
    const char *b = spec + 5;
    size_t bl = strcspn(b, "/?#");
    if (bl == 0)
        return zpi_err_set(err, ZP_ERR_INVALID, "%s: not an S3 URL (s3://bucket/prefix)", red);
    const char *prefix = b[bl] == '/' ? b + bl + 1 : "";
    size_t pl = strcspn(prefix, "?#");
    char *pfx = malloc(pl + 1);
    if (!pfx)
        return zpi_err_set(err, ZP_ERR_NOMEM, "%s: out of memory", red);
    memcpy(pfx, prefix, pl);
    pfx[pl] = '\0';
    size_t el = strlen(s->s3_endpoint);
    while (el > 0 && s->s3_endpoint[el - 1] == '/')
        el--;
    char what[600];
    zpi_fmt(what, sizeof what, "listing %s", red);
    zp_status st = ZP_OK;
    char *token = NULL;
    unsigned pages = 0;
    uint64_t keys = 0;
    for (;;) {
        /* the query's parameters in SigV4's canonical (sorted) order:
         * libcurl signs the query as it is written */
        zpi_buf url = {0};
        int bad = zpi_buf_printf(&url, "%.*s/%.*s?", (int)el, s->s3_endpoint, (int)bl, b) != 0;
        if (token)
            bad |= zpi_buf_printf(&url, "continuation-token=") != 0 ||
                   query_encode(&url, token) != 0 || zpi_buf_printf(&url, "&") != 0;
        bad |= zpi_buf_printf(&url, "encoding-type=url&list-type=2&prefix=") != 0 ||
               query_encode(&url, pfx) != 0;
        if (bad) {
            zpi_buf_free(&url);
            st = zpi_err_set(err, ZP_ERR_NOMEM, "%s: out of memory", what);
            break;
        }
        char *body = NULL, errbody[1024];
        size_t len = 0;
        long code = 0;
        st = zpi_request_get_all(s, &s3_list_request, url.p, what, LIST_PAGE_MAX, &body, &len,
                                 errbody, sizeof errbody, &code, err);
        zpi_buf_free(&url);
        if (st != ZP_OK) {
            char why[400];
            zpi_s3_error_text(errbody, strlen(errbody), why, sizeof why);
            if (why[0]) { /* the S3 error's code says more than the status */
                char msg[ZPI_ERRMAX];
                zpi_fmt(msg, sizeof msg, "%s", zpi_err_msg(err));
                zpi_err_set(err, st, "%s (%s)", msg, why);
            }
            break;
        }
        zpi_s3_page page;
        st = zpi_s3_page_parse(body, len, what, &page, err);
        free(body);
        if (st != ZP_OK)
            break;
        pages++;
        for (size_t i = 0; i < page.n && st == ZP_OK; i++) {
            st = fn(user, page.keys[i], page.sizes[i], err);
            keys++;
        }
        int more = page.truncated;
        if (st == ZP_OK && more && token && !strcmp(token, page.next_token))
            st = zpi_err_set(err, ZP_ERR_FORMAT,
                             "%s: the server answered the same continuation token twice", what);
        free(token);
        token = NULL;
        if (st == ZP_OK && more) {
            token = page.next_token;
            page.next_token = NULL;
        }
        zpi_s3_page_free(&page);
        if (st != ZP_OK || !more)
            break;
    }
    free(token);
    free(pfx);
    if (st == ZP_OK)
        zpi_log(s->log, s->log_user, ZP_LOG_INFO, "%s: %llu objects in %u page%s", what,
                (unsigned long long)keys, pages, pages == 1 ? "" : "s");
    return st;
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
    .list = s3_list,
};
