/*
 * storage.c - the storage handle, the registry of backends (the choice of
 * backend for a spec) and the generic open/read/close through it. The
 * backends sit below this file (storage_local.c, storage_http.c,
 * storage_s3.c) and never call it; the URL helpers are in url.c.
 *
 * Ownership: zpi_storage_create copies the settings' strings and reads the
 * S3 environment once; the handle owns them. Thread safety: the handle is
 * immutable after create.
 */
#include "io/storage.h"

#include <stdlib.h>
#include <string.h>

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

zp_status zpi_storage_list(zpi_storage *s, const char *spec, zpi_list_fn fn, void *user,
                           zpi_err *err)
{
    const zpi_backend *be = zpi_backend_for(spec);
    if (!be->list) {
        char red[512];
        zpi_url_redact(spec, red, sizeof red);
        return zpi_err_set(err, ZP_ERR_INVALID,
                           "%s: %s storage cannot be listed (only s3:// prefixes can)", red,
                           be->name);
    }
    return be->list(s, spec, fn, user, err);
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
