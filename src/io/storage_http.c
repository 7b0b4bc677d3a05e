/*
 * storage_http.c - the http:// and https:// backend, and the parts every
 * remote backend shares: the easy-handle settings (TLS, timeouts,
 * redirects) and open/read/close, which run their requests through the
 * retrying request code of request.c (open: a HEAD; read: a ranged GET
 * with If-Range).
 *
 * Ownership: an object owns its spec. Thread safety: the functions keep no
 * state but the object's; one thread per object at a time.
 */
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"
#include "io/backend.h"
#include "io/request.h"
#include "io/url.h"

static int http_matches(const char *spec)
{
    return spec && (!strncasecmp(spec, "http://", 7) || !strncasecmp(spec, "https://", 8));
}

zp_status zpi_http_setup_common(zpi_storage *s, const char *url, void *easy, zpi_err *err)
{
    CURL *e = easy;
    const zp_storage_config *c = &s->cfg;
    int https = !strncasecmp(url, "https://", 8);
    long lst = (long)(c->low_speed_time_s + 0.999);
    CURLcode rc = CURLE_OK;
#define ZPI_OPT(opt, val)                                                                          \
    do {                                                                                           \
        if (rc == CURLE_OK)                                                                        \
            rc = curl_easy_setopt(e, opt, val);                                                    \
    } while (0)
    ZPI_OPT(CURLOPT_URL, url);
    ZPI_OPT(CURLOPT_NOSIGNAL, 1L);
    ZPI_OPT(CURLOPT_PROTOCOLS_STR, "http,https");
    ZPI_OPT(CURLOPT_FOLLOWLOCATION, 1L);
    ZPI_OPT(CURLOPT_MAXREDIRS, 5L);
    /* A redirect never leaves TLS. */
    ZPI_OPT(CURLOPT_REDIR_PROTOCOLS_STR, https ? "https" : "http,https");
    ZPI_OPT(CURLOPT_CONNECTTIMEOUT_MS, (long)(c->connect_timeout_s * 1000.0 + 0.5));
    if (c->low_speed_bytes > 0 && lst > 0) {
        ZPI_OPT(CURLOPT_LOW_SPEED_LIMIT, (long)c->low_speed_bytes);
        ZPI_OPT(CURLOPT_LOW_SPEED_TIME, lst);
    }
    ZPI_OPT(CURLOPT_SSL_VERIFYPEER, c->insecure_tls ? 0L : 1L);
    ZPI_OPT(CURLOPT_SSL_VERIFYHOST, c->insecure_tls ? 0L : 2L);
    if (c->ca_file)
        ZPI_OPT(CURLOPT_CAINFO, c->ca_file);
#undef ZPI_OPT
    if (rc != CURLE_OK) {
        char red[512];
        zpi_url_redact(url, red, sizeof red);
        return zpi_err_set(err, ZP_ERR_INTERNAL, "%s: libcurl refused a setting: %s", red,
                           curl_easy_strerror(rc));
    }
    return ZP_OK;
}

static zp_status http_setup_easy(zpi_storage *s, const char *spec, void *easy, void **headers,
                                 zpi_err *err)
{
    (void)headers;
    return zpi_http_setup_common(s, spec, easy, err);
}

zp_status zpi_remote_open(const zpi_backend *be, zpi_storage *s, const char *spec,
                          zpi_object **out, zpi_err *err)
{
    *out = NULL;
    zpi_object *o = calloc(1, sizeof *o);
    char *copy = zpi_strdup(spec);
    if (!o || !copy) {
        free(o);
        free(copy);
        char red[512];
        zpi_url_redact(spec, red, sizeof red);
        return zpi_err_set(err, ZP_ERR_NOMEM, "%s: out of memory", red);
    }
    zp_status st = zpi_request_head(s, be, spec, &o->info, NULL, err);
    if (st != ZP_OK) {
        free(copy);
        free(o);
        return st;
    }
    o->be = be;
    o->s = s;
    o->spec = copy;
    *out = o;
    return ZP_OK;
}

zp_status zpi_remote_read(zpi_object *o, uint64_t off, void *buf, size_t len, size_t *got,
                          zpi_err *err)
{
    return zpi_request_get(o->s, o->be, o->spec, &o->info, off, buf, len, got, NULL, err);
}

void zpi_remote_close(zpi_object *o)
{
    if (!o)
        return;
    free(o->spec);
    free(o);
}

static zp_status http_open(zpi_storage *s, const char *spec, zpi_object **out, zpi_err *err)
{
    return zpi_remote_open(&zpi_backend_http, s, spec, out, err);
}

const zpi_backend zpi_backend_http = {
    .name = "http",
    .matches = http_matches,
    .open = http_open,
    .read_range = zpi_remote_read,
    .close = zpi_remote_close,
    .setup_easy = http_setup_easy,
};
