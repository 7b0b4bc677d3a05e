/*
 * storage.c - the storage handle, the choice of backend for a spec, the
 * generic open/read/close, and the URL helpers (redaction, identity,
 * basename) every message and cache key goes through.
 *
 * Ownership: zpi_storage_create copies the settings' strings and reads the
 * S3 environment once; the handle owns them. Thread safety: the handle is
 * immutable after create; the URL helpers are pure functions.
 */
#include "io/storage.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"

/* ------------------------------------------------------------ settings */

void zp_storage_config_init(zp_storage_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->cache_limit_bytes = 16ULL << 30;
    cfg->connect_timeout_s = 10.0;
    cfg->low_speed_bytes = 1024;
    cfg->low_speed_time_s = 30.0;
    cfg->retries = 5;
    cfg->retry_base_s = 0.25;
    cfg->retry_max_s = 20.0;
    cfg->lease_s = 30.0;
}

int zpi_is_url(const char *spec)
{
    if (!spec)
        return 0;
    return !strncasecmp(spec, "http://", 7) || !strncasecmp(spec, "https://", 8) ||
           !strncasecmp(spec, "s3://", 5);
}

int zp_storage_is_url(const char *spec) { return zpi_is_url(spec); }

static char *env_dup(const char *name)
{
    const char *v = getenv(name);
    return (v && *v) ? zpi_strdup(v) : NULL;
}

void zpi_storage_destroy(zpi_storage *s)
{
    if (!s)
        return;
    free(s->cache_dir);
    free(s->ca_file);
    free(s->s3_endpoint);
    free(s->s3_region);
    free(s->s3_key);
    if (s->s3_secret)
        memset(s->s3_secret, 0, strlen(s->s3_secret));
    free(s->s3_secret);
    free(s->s3_token);
    free(s);
}

zp_status zpi_storage_create(const zp_storage_config *cfg, zp_log_fn log, void *log_user,
                             zpi_storage **out, zpi_err *err)
{
    *out = NULL;
    zpi_storage *s = calloc(1, sizeof *s);
    if (!s)
        return zpi_err_set(err, ZP_ERR_NOMEM, "storage: out of memory");
    if (cfg)
        s->cfg = *cfg;
    else
        zp_storage_config_init(&s->cfg);
    s->log = log;
    s->log_user = log_user;
    const zp_storage_config *c = &s->cfg;
    if (!(c->connect_timeout_s > 0) || !(c->low_speed_time_s >= 0) || !(c->retry_base_s >= 0) ||
        !(c->retry_max_s >= 0) || !(c->lease_s > 0)) {
        zpi_err_set(err, ZP_ERR_INVALID,
                    "storage settings: connect_timeout_s = %g and lease_s = %g must be "
                    "positive; low_speed_time_s = %g, retry_base_s = %g and retry_max_s = %g "
                    "must not be negative",
                    c->connect_timeout_s, c->lease_s, c->low_speed_time_s, c->retry_base_s,
                    c->retry_max_s);
        zpi_storage_destroy(s);
        return ZP_ERR_INVALID;
    }
    int oom = 0;
#define ZPI_COPY(field)                                                                            \
    do {                                                                                           \
        if (cfg && cfg->field && *cfg->field) {                                                    \
            s->field = zpi_strdup(cfg->field);                                                     \
            oom |= !s->field;                                                                      \
        }                                                                                          \
        s->cfg.field = s->field;                                                                   \
    } while (0)
    ZPI_COPY(cache_dir);
    ZPI_COPY(ca_file);
    ZPI_COPY(s3_endpoint);
    ZPI_COPY(s3_region);
#undef ZPI_COPY
    if (!s->s3_region) {
        s->s3_region = env_dup("AWS_REGION");
        if (!s->s3_region)
            s->s3_region = env_dup("AWS_DEFAULT_REGION");
        if (!s->s3_region)
            s->s3_region = zpi_strdup("us-east-1");
        oom |= !s->s3_region;
        s->cfg.s3_region = s->s3_region;
    }
    if (!s->s3_endpoint) {
        s->s3_endpoint = env_dup("AWS_ENDPOINT_URL");
        if (!s->s3_endpoint && s->s3_region) {
            size_t n = strlen(s->s3_region) + 32;
            s->s3_endpoint = malloc(n);
            if (s->s3_endpoint)
                zpi_fmt(s->s3_endpoint, n, "https://s3.%s.amazonaws.com", s->s3_region);
        }
        oom |= !s->s3_endpoint;
        s->cfg.s3_endpoint = s->s3_endpoint;
    }
    s->s3_key = env_dup("AWS_ACCESS_KEY_ID");
    s->s3_secret = env_dup("AWS_SECRET_ACCESS_KEY");
    s->s3_token = env_dup("AWS_SESSION_TOKEN");
    if (oom) {
        zpi_storage_destroy(s);
        return zpi_err_set(err, ZP_ERR_NOMEM, "storage: out of memory");
    }
    if (s->cfg.insecure_tls)
        zpi_log(log, log_user, ZP_LOG_WARN,
                "storage: insecure_tls is set: TLS certificates are NOT verified (anyone on the "
                "path can read and change the data)");
    *out = s;
    return ZP_OK;
}

const zp_storage_config *zpi_storage_config(const zpi_storage *s) { return &s->cfg; }

/* ------------------------------------------------------------ backends */

const zpi_backend *zpi_backend_for(const char *spec)
{
    static const zpi_backend *const all[] = {&zpi_backend_http, &zpi_backend_s3};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->matches(spec))
            return all[i];
    return &zpi_backend_local;
}

zp_status zpi_object_open(zpi_storage *s, const char *spec, zpi_object **out,
                          zpi_object_info *info, zpi_err *err)
{
    *out = NULL;
    const zpi_backend *be = zpi_backend_for(spec);
    zp_status st = be->open(s, spec, out, err);
    if (st != ZP_OK)
        return st;
    if (info)
        *info = (*out)->info;
    return ZP_OK;
}

zp_status zpi_object_read(zpi_object *o, uint64_t off, void *buf, size_t len, size_t *got,
                          zpi_err *err)
{
    *got = 0;
    if (off >= o->info.size || len == 0)
        return ZP_OK;
    if (len > o->info.size - off)
        len = (size_t)(o->info.size - off);
    return o->be->read_range(o, off, buf, len, got, err);
}

const zpi_object_info *zpi_object_info_get(const zpi_object *o) { return &o->info; }

void zpi_object_close(zpi_object *o)
{
    if (o)
        o->be->close(o);
}

zp_status zpi_object_read_all(zpi_storage *s, const char *spec, size_t max, char **out,
                              size_t *len, zpi_err *err)
{
    *out = NULL;
    *len = 0;
    zpi_object *o = NULL;
    ZPI_FORWARD_IF_ERR(zpi_object_open(s, spec, &o, NULL, err));
    char red[512];
    zp_status st = ZP_OK;
    uint64_t size = o->info.size;
    char *buf = NULL;
    size_t got = 0;
    if (size > max || size >= SIZE_MAX) {
        zpi_url_redact(spec, red, sizeof red);
        st = zpi_err_set(err, ZP_ERR_LIMIT, "%s: %llu bytes, more than the %zu allowed", red,
                         (unsigned long long)size, max);
    } else if (!(buf = malloc((size_t)size + 1))) {
        zpi_url_redact(spec, red, sizeof red);
        st = zpi_err_set(err, ZP_ERR_NOMEM, "%s: out of memory for %llu bytes", red,
                         (unsigned long long)size);
    } else if ((st = zpi_object_read(o, 0, buf, (size_t)size, &got, err)) == ZP_OK &&
               got != size) {
        zpi_url_redact(spec, red, sizeof red);
        st = zpi_err_set(err, ZP_ERR_IO, "%s: read %zu of %llu bytes (the object shrank?)", red,
                         got, (unsigned long long)size);
    }
    zpi_object_close(o);
    if (st != ZP_OK) {
        free(buf);
        return st;
    }
    buf[got] = '\0';
    *out = buf;
    *len = got;
    return ZP_OK;
}

/* ------------------------------------------------------------ URL helpers */

/* Splits a URL: scheme length, the authority [a0, a1) without user info,
 * and the start of the path; 0 when spec is not scheme://... */
typedef struct url_parts {
    size_t scheme_len;  /* "https" */
    size_t host0, host1; /* authority without user info */
    size_t path0;        /* first char after the authority ('/', '?', '#' or end) */
    size_t path1;        /* end of the path ('?', '#' or end) */
} url_parts;

static int url_split(const char *spec, url_parts *u)
{
    const char *sep = strstr(spec, "://");
    if (!sep || sep == spec)
        return 0;
    for (const char *p = spec; p < sep; p++)
        if (!isalnum((unsigned char)*p) && *p != '+' && *p != '-' && *p != '.')
            return 0;
    u->scheme_len = (size_t)(sep - spec);
    size_t a0 = u->scheme_len + 3;
    size_t a1 = a0 + strcspn(spec + a0, "/?#");
    u->host0 = a0;
    for (size_t i = a0; i < a1; i++)
        if (spec[i] == '@')
            u->host0 = i + 1;
    u->host1 = a1;
    u->path0 = a1;
    u->path1 = a1 + strcspn(spec + a1, "?#");
    return 1;
}

void zpi_url_redact(const char *spec, char *out, size_t cap)
{
    if (!cap)
        return;
    url_parts u;
    if (!spec) {
        zpi_fmt(out, cap, "(null)");
        return;
    }
    if (!url_split(spec, &u)) {
        zpi_fmt(out, cap, "%s", spec);
        return;
    }
    zpi_fmt(out, cap, "%.*s://%.*s%s", (int)u.scheme_len, spec, (int)(u.path1 - u.host0),
            spec + u.host0, spec[u.path1] == '?' ? "?<redacted>" : "");
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* An http(s) path [p, p + n) normalised in place as RFC 3986 (6.2.2) says
 * equivalent paths are: %XX of an unreserved character decoded, the other
 * %XX in upper case, then the "." and ".." segments removed (libcurl
 * removes them before sending, so "/a/./b" and "/a/b" are one object).
 * Returns the new length (never longer). */
static size_t normalise_path(char *p, size_t n)
{
    size_t w = 0;
    for (size_t r = 0; r < n; r++) {
        int hi, lo;
        if (p[r] == '%' && r + 2 < n && (hi = hexval(p[r + 1])) >= 0 &&
            (lo = hexval(p[r + 2])) >= 0) {
            char c = (char)(hi * 16 + lo);
            if (isalnum((unsigned char)c) || c == '-' || c == '.' || c == '_' || c == '~') {
                p[w++] = c;
            } else {
                p[w++] = '%';
                p[w++] = (char)toupper((unsigned char)p[r + 1]);
                p[w++] = (char)toupper((unsigned char)p[r + 2]);
            }
            r += 2;
        } else {
            p[w++] = p[r];
        }
    }
    n = w;
    /* remove_dot_segments (RFC 3986 5.2.4) over the segments of a path that
     * starts with '/': each segment is copied, "." dropped, ".." drops the
     * last copied one */
    if (n == 0 || p[0] != '/')
        return n;
    w = 0;
    size_t r = 0;
    while (r < n) {
        size_t e = r + 1;
        while (e < n && p[e] != '/')
            e++;
        size_t sl = e - r - 1; /* the segment is p[r + 1, e) */
        int last = e == n;
        if (sl == 1 && p[r + 1] == '.') {
            if (last)
                p[w++] = '/';
        } else if (sl == 2 && p[r + 1] == '.' && p[r + 2] == '.') {
            while (w > 0 && p[w - 1] != '/')
                w--;
            if (w > 0)
                w--; /* the '/' before the dropped segment */
            if (last)
                p[w++] = '/';
        } else {
            memmove(p + w, p + r, e - r);
            w += e - r;
        }
        r = e;
    }
    if (w == 0)
        p[w++] = '/';
    return w;
}

char *zpi_url_identity(const char *spec)
{
    url_parts u;
    if (!spec)
        return NULL;
    if (!url_split(spec, &u))
        return zpi_strdup(spec);
    size_t hl = u.host1 - u.host0, pl = u.path1 - u.path0;
    char *r = malloc(u.scheme_len + 3 + hl + pl + 2);
    if (!r)
        return NULL;
    char *w = r;
    for (size_t i = 0; i < u.scheme_len; i++)
        *w++ = (char)tolower((unsigned char)spec[i]);
    *w = '\0';
    int https = !strcmp(r, "https"), http = !strcmp(r, "http");
    memcpy(w, "://", 3);
    w += 3;
    for (size_t i = 0; i < hl; i++)
        *w++ = (char)tolower((unsigned char)spec[u.host0 + i]);
    /* The default port names the same server. */
    if (http && hl > 3 && !memcmp(w - 3, ":80", 3))
        w -= 3;
    else if (https && hl > 4 && !memcmp(w - 4, ":443", 4))
        w -= 4;
    if (pl == 0 && (http || https))
        *w++ = '/';
    memcpy(w, spec + u.path0, pl);
    if (http || https)
        pl = normalise_path(w, pl); /* an S3 key is taken literally */
    w += pl;
    *w = '\0';
    return r;
}

char *zpi_url_basename(const char *spec)
{
    if (!spec)
        return NULL;
    url_parts u;
    size_t p0 = 0, p1 = strlen(spec);
    if (url_split(spec, &u)) {
        p0 = u.path0;
        p1 = u.path1;
    }
    size_t b = p0;
    for (size_t i = p0; i < p1; i++)
        if (spec[i] == '/')
            b = i + 1;
    char *r = malloc(p1 - b + 1);
    if (!r)
        return NULL;
    memcpy(r, spec + b, p1 - b);
    r[p1 - b] = '\0';
    return r;
}

char *zpi_s3_http_url(const char *endpoint, const char *spec)
{
    if (!endpoint || !spec || strncasecmp(spec, "s3://", 5))
        return NULL;
    const char *b = spec + 5;
    size_t bl = strcspn(b, "/?#");
    if (bl == 0 || b[bl] != '/')
        return NULL;
    const char *k = b + bl + 1;
    size_t kl = strcspn(k, "?#");
    if (kl == 0)
        return NULL;
    size_t el = strlen(endpoint);
    while (el > 0 && endpoint[el - 1] == '/')
        el--;
    char *r = malloc(el + 1 + bl + 1 + 3 * kl + 1);
    if (!r)
        return NULL;
    char *w = r;
    memcpy(w, endpoint, el);
    w += el;
    *w++ = '/';
    memcpy(w, b, bl);
    w += bl;
    *w++ = '/';
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < kl; i++) {
        unsigned char c = (unsigned char)k[i];
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
            *w++ = (char)c;
        } else {
            *w++ = '%';
            *w++ = hex[c >> 4];
            *w++ = hex[c & 15];
        }
    }
    *w = '\0';
    return r;
}
