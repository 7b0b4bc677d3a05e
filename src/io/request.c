/*
 * request.c - one request's tries (request.h has the model): the attempts
 * of a GET or HEAD, the retries and their backoff, the Range resume.
 *
 * The header callback parses the final response's headers; the write
 * callback checks the status before it writes anything (an error page is
 * never data), checks Content-Range and the announced size, and delivers
 * the bytes in order (pwrite into a file, or into a buffer), feeding the
 * XXH64 state with exactly what it writes.
 *
 * Calls only down: the backend's setup_easy through its table, url.c and
 * base. Thread safety: one thread per zpi_tx.
 */
#include "io/request.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "io/url.h"

#define UNKNOWN UINT64_MAX

zp_status zpi_tx_init(zpi_tx *t, zpi_storage *s, const zpi_backend *be, const char *spec,
                      const char *name)
{
    memset(t, 0, sizeof *t);
    t->s = s;
    t->fd = -1;
    t->be = be;
    t->spec = zpi_strdup(spec);
    t->want = UNKNOWN;
    t->expect_size = UNKNOWN;
    t->size_seen = UNKNOWN;
    char url[400];
    zpi_url_redact(spec, url, sizeof url);
    if (name && *name && strcmp(name, url) != 0)
        zpi_fmt(t->label, sizeof t->label, "shard '%s' (%s)", name, url);
    else
        zpi_fmt(t->label, sizeof t->label, "%s", url);
    t->rng = zpi_mix64(zpi_now_ns() ^ (uint64_t)(uintptr_t)t);
    if (!t->spec)
        return zpi_err_set(&t->err, ZP_ERR_NOMEM, "%s: out of memory", t->label);
    if (!t->be->setup_easy)
        return zpi_err_set(&t->err, ZP_ERR_INVALID, "%s: not a remote object", t->label);
    return ZP_OK;
}

zp_status zpi_tx_set_file(zpi_tx *t, int fd, uint64_t expect_size, int has_hash, uint64_t hash)
{
    t->sink = ZPI_SINK_FD;
    t->fd = fd;
    t->expect_size = expect_size;
    t->has_hash = has_hash;
    t->hash = hash;
    t->xs = XXH64_createState();
    if (!t->xs)
        return zpi_err_set(&t->err, ZP_ERR_NOMEM, "%s: out of memory", t->label);
    XXH64_reset(t->xs, 0);
    return ZP_OK;
}

void zpi_tx_free(zpi_tx *t)
{
    if (t->easy)
        curl_easy_cleanup(t->easy);
    curl_slist_free_all(t->hdrs);
    if (t->xs)
        XXH64_freeState(t->xs);
    if (t->sink == ZPI_SINK_BUF)
        free(t->mem);
    free(t->spec);
    t->easy = NULL;
    t->hdrs = NULL;
    t->xs = NULL;
    t->spec = NULL;
    if (t->sink == ZPI_SINK_BUF)
        t->mem = NULL;
}

/* Start over at the object's first wanted byte. */
static zp_status tx_restart(zpi_tx *t)
{
    t->written = 0;
    if (t->xs)
        XXH64_reset(t->xs, 0);
    if (t->sink == ZPI_SINK_FD && ftruncate(t->fd, 0) != 0) {
        t->os_errno = errno;
        return zpi_err_set(&t->err, ZP_ERR_IO, "%s: cannot truncate the download: %s",
                           t->label, strerror(errno));
    }
    return ZP_OK;
}

static void copy_trim(char *dst, size_t cap, const char *v, size_t n)
{
    while (n > 0 && (*v == ' ' || *v == '\t'))
        v++, n--;
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = '\0';
}

static size_t header_cb(char *buf, size_t size, size_t n, void *user)
{
    zpi_tx *t = user;
    size_t len = size * n, l = len;
    while (l > 0 && (buf[l - 1] == '\r' || buf[l - 1] == '\n'))
        l--;
    if (l >= 5 && !strncmp(buf, "HTTP/", 5)) {
        /* A new response (redirects and retries have several): forget the last one's. */
        t->h_code = 0;
        t->h_reason[0] = '\0';
        t->h_clen = UNKNOWN;
        t->h_crange = 0;
        t->h_etag[0] = t->h_lastmod[0] = '\0';
        size_t i = 5;
        while (i < l && buf[i] != ' ')
            i++;
        while (i < l && buf[i] == ' ')
            i++;
        long code = 0;
        while (i < l && buf[i] >= '0' && buf[i] <= '9')
            code = code * 10 + (buf[i++] - '0');
        t->h_code = code;
        copy_trim(t->h_reason, sizeof t->h_reason, buf + i, l - i);
        return len;
    }
    const char *colon = memchr(buf, ':', l);
    if (!colon)
        return len;
    size_t nl = (size_t)(colon - buf);
    const char *v = colon + 1;
    size_t vl = l - nl - 1;
    char val[160];
    copy_trim(val, sizeof val, v, vl);
    if (nl == 14 && !strncasecmp(buf, "content-length", nl)) {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(val, &end, 10);
        if (!errno && end != val && *end == '\0')
            t->h_clen = x;
    } else if (nl == 13 && !strncasecmp(buf, "content-range", nl)) {
        unsigned long long a, b, tot;
        char star[2];
        if (sscanf(val, "bytes %llu-%llu/%llu", &a, &b, &tot) == 3) {
            t->h_crange = 1;
            t->h_cr_start = a;
            t->h_cr_total = tot;
        } else if (sscanf(val, "bytes %llu-%llu/%1[*]", &a, &b, star) == 3) {
            t->h_crange = 1;
            t->h_cr_start = a;
            t->h_cr_total = UNKNOWN;
        }
    } else if (nl == 4 && !strncasecmp(buf, "etag", nl)) {
        copy_trim(t->h_etag, sizeof t->h_etag, v, vl);
    } else if (nl == 13 && !strncasecmp(buf, "last-modified", nl)) {
        copy_trim(t->h_lastmod, sizeof t->h_lastmod, v, vl);
    }
    return len;
}

static int stop(zpi_tx *t, zpi_tx_fault f, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int stop(zpi_tx *t, zpi_tx_fault f, const char *fmt, ...)
{
    t->fault = f;
    va_list ap;
    va_start(ap, fmt);
    zpi_vfmt(t->fault_msg, sizeof t->fault_msg, fmt, ap);
    va_end(ap);
    return 0;
}

/* The first body byte of a response: is it the data we asked for? */
static int tx_check_response(zpi_tx *t)
{
    long code = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
    uint64_t total = UNKNOWN;
    if (code == 206 && t->ranged) {
        if (!t->h_crange || t->h_cr_start != t->req_start)
            return stop(t, ZPI_FK_RANGE,
                        "asked for the bytes from %llu, the server answered %s%llu",
                        (unsigned long long)t->req_start,
                        t->h_crange ? "a range from " : "206 without a Content-Range; ",
                        (unsigned long long)(t->h_crange ? t->h_cr_start : 0));
        t->pos = t->req_start;
        total = t->h_cr_total;
    } else if (code == 200) {
        /* The whole object (a 200 to a ranged request: it changed, or the
         * server ignores ranges): the delivered bytes are stale. */
        t->pos = 0;
        total = t->h_clen;
        if (t->written > 0 && tx_restart(t) != ZP_OK)
            return stop(t, ZPI_FK_IO, "%s", t->err.msg);
    } else {
        return stop(t, ZPI_FK_STATUS, "HTTP %ld", code);
    }
    if (total != UNKNOWN && t->expect_size != UNKNOWN && total != t->expect_size) {
        /* once may be a broken answer (retried); the same size twice in a
         * row is the object's: it changed since its size was taken */
        int again = t->size_seen == total;
        t->size_seen = total;
        if (again)
            return stop(t, ZPI_FK_STALE,
                        "the server's object has %llu bytes, %llu expected (the same size "
                        "answered twice: the object changed since its size was taken; a "
                        "manifest's: re-run zephon index)",
                        (unsigned long long)total, (unsigned long long)t->expect_size);
        return stop(t, ZPI_FK_SIZE, "the server announced %llu bytes, expected %llu",
                    (unsigned long long)total, (unsigned long long)t->expect_size);
    }
    if (!t->etag[0] && !t->lastmod[0]) {
        /* The validator for resumed requests: the first response's. */
        if (t->h_etag[0] && strncmp(t->h_etag, "W/", 2))
            zpi_fmt(t->etag, sizeof t->etag, "%s", t->h_etag);
        zpi_fmt(t->lastmod, sizeof t->lastmod, "%s", t->h_lastmod);
    }
    t->decided = 1;
    return 1;
}

static int tx_deliver(zpi_tx *t, const char *p, size_t n, uint64_t at)
{
    if (t->sink == ZPI_SINK_FD) {
        size_t done = 0;
        while (done < n) {
            ssize_t w = pwrite(t->fd, p + done, n - done, (off_t)(at + done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                t->os_errno = errno;
                return stop(t, ZPI_FK_IO, "writing the download at offset %llu: %s",
                            (unsigned long long)(at + done), strerror(errno));
            }
            done += (size_t)w;
        }
    } else if (t->sink == ZPI_SINK_MEM) {
        memcpy(t->mem + (at - t->off), p, n);
    } else if (t->sink == ZPI_SINK_BUF) {
        if (at + n > t->mem_max)
            return stop(t, ZPI_FK_IO, "the answer is longer than the %zu bytes accepted",
                        t->mem_max);
        if (at + n + 1 > t->mem_cap) {
            size_t cap = t->mem_cap ? t->mem_cap : 64 * 1024;
            while (cap < at + n + 1)
                cap *= 2;
            char *m = realloc(t->mem, cap);
            if (!m)
                return stop(t, ZPI_FK_IO, "out of memory for %zu bytes", cap);
            t->mem = m;
            t->mem_cap = cap;
        }
        memcpy(t->mem + at, p, n);
        t->mem[at + n] = '\0';
    }
    if (t->xs)
        XXH64_update(t->xs, p, n);
    t->written += n;
    return 1;
}

static size_t write_cb(char *p, size_t size, size_t nmemb, void *user)
{
    zpi_tx *t = user;
    size_t n = size * nmemb;
    if (t->sink == ZPI_SINK_BUF && !t->decided) {
        /* an error answer's body says why (an S3 error document): its start is kept */
        long code = 0;
        curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
        if (code != 200) {
            size_t room = sizeof t->errbody - 1 - t->errbody_len;
            size_t k = n < room ? n : room;
            memcpy(t->errbody + t->errbody_len, p, k);
            t->errbody_len += k;
            t->errbody[t->errbody_len] = '\0';
            return n;
        }
    }
    if (!t->decided && !tx_check_response(t))
        return 0;
    t->bytes += n;
    uint64_t lo = t->pos, hi = t->pos + n;
    t->pos = hi;
    uint64_t want_lo = t->off + t->written;
    uint64_t want_hi = t->want != UNKNOWN ? t->off + t->want
                       : t->expect_size != UNKNOWN ? t->expect_size
                                                   : UNKNOWN;
    if (lo < want_lo) { /* a 200 for a range further in: skip to it */
        if (hi <= want_lo)
            return n;
        p += want_lo - lo;
        lo = want_lo;
    }
    if (lo > want_lo)
        return stop(t, ZPI_FK_RANGE, "the body skipped from %llu to %llu",
                    (unsigned long long)want_lo, (unsigned long long)lo);
    uint64_t end = hi < want_hi ? hi : want_hi;
    if (end > lo && !tx_deliver(t, p, (size_t)(end - lo), lo))
        return 0;
    if (hi > want_hi) {
        if (t->want != UNKNOWN)
            return stop(t, ZPI_FK_DONE, "done"); /* the rest is not wanted */
        return stop(t, ZPI_FK_SIZE, "the body is longer than the expected %llu bytes",
                    (unsigned long long)t->expect_size);
    }
    return n;
}

int zpi_tx_stop_requested(const zpi_storage *s)
{
    return s->cfg.stop_requested && s->cfg.stop_requested(s->cfg.stop_user) != 0;
}

/* libcurl's progress callback (only with a stop_requested hook): nonzero
 * aborts the transfer (CURLE_ABORTED_BY_CALLBACK). */
static int progress_cb(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    zpi_tx *t = user;
    if (!zpi_tx_stop_requested(t->s))
        return 0;
    t->fault = ZPI_FK_STOP;
    return 1;
}

/* Configure the easy handle for the next attempt. */
zp_status zpi_tx_prepare(zpi_tx *t)
{
    if (!t->easy) {
        t->easy = curl_easy_init();
        if (!t->easy)
            return zpi_err_set(&t->err, ZP_ERR_NOMEM, "%s: cannot create a libcurl handle",
                               t->label);
    } else {
        curl_easy_reset(t->easy);
    }
    curl_slist_free_all(t->hdrs);
    t->hdrs = NULL;
    void *h = NULL;
    zp_status st = t->be->setup_easy(t->s, t->spec, t->easy, &h, &t->err);
    t->hdrs = h;
    if (st != ZP_OK)
        return st;
    t->decided = 0;
    t->fault = ZPI_FK_NONE;
    t->fault_msg[0] = '\0';
    t->errbuf[0] = '\0';
    t->h_code = 0;
    t->h_reason[0] = '\0';
    t->h_clen = UNKNOWN;
    t->h_crange = 0;
    t->ranged = 0;
    char range[64];
    int is_head = t->sink == ZPI_SINK_NONE;
    if (t->sink == ZPI_SINK_BUF) { /* a whole answer: every attempt from byte 0 */
        t->written = 0;
        t->errbody_len = 0;
        t->errbody[0] = '\0';
    }
    if (!is_head) {
        if (t->written > 0 && !t->etag[0] && !t->lastmod[0] && t->want == UNKNOWN &&
            tx_restart(t) != ZP_OK) /* no validator: resuming could mix two versions */
            return t->err.code;
        t->req_start = t->off + t->written;
        if (t->req_start > 0 || t->want != UNKNOWN) {
            t->ranged = 1;
            if (t->want != UNKNOWN)
                zpi_fmt(range, sizeof range, "%llu-%llu", (unsigned long long)t->req_start,
                        (unsigned long long)(t->off + t->want - 1));
            else
                zpi_fmt(range, sizeof range, "%llu-", (unsigned long long)t->req_start);
            const char *v = t->etag[0] ? t->etag : t->lastmod;
            if (*v) {
                char line[200];
                zpi_fmt(line, sizeof line, "If-Range: %s", v);
                struct curl_slist *n = curl_slist_append(t->hdrs, line);
                if (!n)
                    return zpi_err_set(&t->err, ZP_ERR_NOMEM, "%s: out of memory", t->label);
                t->hdrs = n;
            }
        }
    }
    CURLcode rc = CURLE_OK;
#define ZPI_OPT(opt, val)                                                                          \
    do {                                                                                           \
        if (rc == CURLE_OK)                                                                        \
            rc = curl_easy_setopt(t->easy, opt, val);                                              \
    } while (0)
    ZPI_OPT(CURLOPT_PRIVATE, (void *)t);
    ZPI_OPT(CURLOPT_ERRORBUFFER, t->errbuf);
    ZPI_OPT(CURLOPT_HEADERFUNCTION, header_cb);
    ZPI_OPT(CURLOPT_HEADERDATA, (void *)t);
    ZPI_OPT(CURLOPT_WRITEFUNCTION, write_cb);
    ZPI_OPT(CURLOPT_WRITEDATA, (void *)t);
    /* 100 KiB reads, as the curl command does: fewer callbacks and pwrite
     * calls than the default 16 KiB; 512 KiB measured slower and bimodal
     * (bench/remote (b): the buffer no longer stays in the CPU's cache) */
    ZPI_OPT(CURLOPT_BUFFERSIZE, 100L * 1024);
    if (t->hdrs)
        ZPI_OPT(CURLOPT_HTTPHEADER, t->hdrs);
    if (t->s->cfg.stop_requested) {
        ZPI_OPT(CURLOPT_NOPROGRESS, 0L);
        ZPI_OPT(CURLOPT_XFERINFOFUNCTION, progress_cb);
        ZPI_OPT(CURLOPT_XFERINFODATA, (void *)t);
    }
    if (is_head)
        ZPI_OPT(CURLOPT_NOBODY, 1L);
    if (t->ranged)
        ZPI_OPT(CURLOPT_RANGE, range);
#undef ZPI_OPT
    if (rc != CURLE_OK)
        return zpi_err_set(&t->err, ZP_ERR_INTERNAL, "%s: libcurl refused a setting: %s",
                           t->label, curl_easy_strerror(rc));
    return ZP_OK;
}

static int curl_retryable(CURLcode c)
{
    switch (c) {
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_COULDNT_CONNECT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return 1;
    default:
        return 0;
    }
}

static double backoff_s(zpi_tx *t, double retry_after)
{
    const zp_storage_config *c = &t->s->cfg;
    if (retry_after > 0)
        return retry_after < c->retry_max_s ? retry_after : c->retry_max_s;
    double d = c->retry_base_s;
    for (unsigned k = 1; k < t->retries && d < c->retry_max_s; k++)
        d *= 2;
    if (d > c->retry_max_s)
        d = c->retry_max_s;
    t->rng = zpi_mix64(t->rng + 0x9e3779b97f4a7c15ULL);
    return d * (double)(t->rng >> 11) * (1.0 / 9007199254740992.0); /* full jitter */
}

/* A complete body: its size set (a file of unknown size), its hash checked. */
static zpi_tx_decision tx_complete(zpi_tx *t)
{
    if (t->sink == ZPI_SINK_FD && t->want == UNKNOWN && ftruncate(t->fd, (off_t)t->written) != 0) {
        t->os_errno = errno;
        t->status = zpi_err_set(&t->err, ZP_ERR_IO, "%s: cannot set the download's size: %s",
                                t->label, strerror(errno));
        return ZPI_TX_FAIL;
    }
    if (t->has_hash) {
        uint64_t h = XXH64_digest(t->xs);
        if (h != t->hash) {
            t->status = zpi_err_set(&t->err, ZP_ERR_FORMAT,
                                    "%s: XXH64 of the %llu bytes is %016llx, expected %016llx",
                                    t->label, (unsigned long long)t->written,
                                    (unsigned long long)h, (unsigned long long)t->hash);
            return ZPI_TX_FAIL;
        }
    }
    t->status = ZP_OK;
    return ZPI_TX_OK;
}

/* A HEAD's 200: the object's size and validators into t->info. */
static zpi_tx_decision tx_head_done(zpi_tx *t)
{
    if (t->h_clen == UNKNOWN) {
        t->status = zpi_err_set(&t->err, ZP_ERR_NETWORK,
                                "%s: the server did not announce the size (no "
                                "Content-Length)",
                                t->label);
        return ZPI_TX_FAIL;
    }
    t->info->size = t->h_clen;
    t->info->etag[0] = '\0';
    if (t->h_etag[0] && strncmp(t->h_etag, "W/", 2))
        zpi_fmt(t->info->etag, sizeof t->info->etag, "%s", t->h_etag);
    zpi_fmt(t->info->last_modified, sizeof t->info->last_modified, "%s", t->h_lastmod);
    t->status = ZP_OK;
    return ZPI_TX_OK;
}

/* A response that ended without error: is the body all there? A decision
 * (complete, or failed), or -1 with the cause of a retry in cause (and
 * *final the status should the retries be used up). */
static int tx_body_check(zpi_tx *t, long code, char *cause, size_t cap, zp_status *final)
{
    uint64_t end = t->want != UNKNOWN ? t->off + t->want : t->expect_size;
    uint64_t total = code == 206 && t->h_crange ? t->h_cr_total : t->h_clen;
    if (end == UNKNOWN && code == 200)
        end = total; /* the announced size (UNKNOWN when none: take what came) */
    if (t->want != UNKNOWN && total != UNKNOWN && total < end)
        end = total > t->off ? total : t->off; /* the range runs past the end */
    if (!t->decided && end != UNKNOWN && t->off + t->written < end && !tx_check_response(t)) {
        /* An empty 200/206 (the write callback never ran): same checks. */
        if (t->fault == ZPI_FK_STALE) {
            t->status = zpi_err_set(&t->err, ZP_ERR_FORMAT, "%s: %s", t->label, t->fault_msg);
            return ZPI_TX_FAIL;
        }
        if (t->fault == ZPI_FK_SIZE)
            *final = ZP_ERR_FORMAT;
        zpi_fmt(cause, cap, "%s", t->fault_msg);
        return -1;
    }
    if (end != UNKNOWN && t->off + t->written < end) {
        zpi_fmt(cause, cap, "short body: %llu of %llu bytes",
                (unsigned long long)(t->off + t->written), (unsigned long long)end);
        return -1;
    }
    return tx_complete(t);
}

/* After an attempt ended with cc: done, failed (t->status, t->err) or retry
 * after *delay_s. */
zpi_tx_decision zpi_tx_finish(zpi_tx *t, CURLcode cc, double *delay_s)
{
    *delay_s = 0;
    long code = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
    char cause[512];
    zp_status final = ZP_ERR_NETWORK;
    double retry_after = 0;
    cause[0] = '\0';
    if (t->fault == ZPI_FK_STOP || zpi_tx_stop_requested(t->s)) {
        t->status = zpi_err_set(&t->err, ZP_ERR_STATE, "%s: stopped (asked to stop)", t->label);
        return ZPI_TX_FAIL;
    }
    if (t->fault == ZPI_FK_IO) {
        t->status = zpi_err_set(&t->err, ZP_ERR_IO, "%s: %s", t->label, t->fault_msg);
        return ZPI_TX_FAIL;
    }
    if (t->fault == ZPI_FK_STALE) {
        t->status = zpi_err_set(&t->err, ZP_ERR_FORMAT, "%s: %s", t->label, t->fault_msg);
        return ZPI_TX_FAIL;
    }
    if (t->fault == ZPI_FK_DONE)
        return tx_complete(t);
    if (t->fault == ZPI_FK_STATUS || (cc == CURLE_OK && code != 200 && code != 206)) {
        char reason[80] = "";
        if (t->h_code == code && t->h_reason[0])
            zpi_fmt(reason, sizeof reason, " %s", t->h_reason);
        zpi_fmt(cause, sizeof cause, "HTTP %ld%s", code, reason);
        if (!(code == 408 || code == 429 || code >= 500)) {
            t->status = zpi_err_set(&t->err, ZP_ERR_NETWORK, "%s: %s", t->label, cause);
            return ZPI_TX_FAIL;
        }
        curl_off_t ra = 0;
        if (curl_easy_getinfo(t->easy, CURLINFO_RETRY_AFTER, &ra) == CURLE_OK && ra > 0)
            retry_after = (double)ra;
    } else if (t->fault == ZPI_FK_RANGE) {
        zpi_fmt(cause, sizeof cause, "%s", t->fault_msg);
        if (tx_restart(t) != ZP_OK) {
            t->status = t->err.code;
            return ZPI_TX_FAIL;
        }
    } else if (t->fault == ZPI_FK_SIZE) {
        zpi_fmt(cause, sizeof cause, "%s", t->fault_msg);
        final = ZP_ERR_FORMAT;
    } else if (cc != CURLE_OK) {
        zpi_fmt(cause, sizeof cause, "%s%s", cc == CURLE_OPERATION_TIMEDOUT ? "timed out: " : "",
                t->errbuf[0] ? t->errbuf : curl_easy_strerror(cc));
        if (!curl_retryable(cc)) {
            t->status = zpi_err_set(&t->err, ZP_ERR_NETWORK, "%s: %s", t->label, cause);
            return ZPI_TX_FAIL;
        }
    } else if (t->sink == ZPI_SINK_NONE) {
        return tx_head_done(t);
    } else {
        int d = tx_body_check(t, code, cause, sizeof cause, &final);
        if (d >= 0)
            return (zpi_tx_decision)d;
    }
    /* Retry, or give up. */
    if (t->retries >= t->s->cfg.retries) {
        t->status = zpi_err_set(&t->err, final, "%s: %s (after %u retries)", t->label, cause,
                                t->retries);
        return ZPI_TX_FAIL;
    }
    t->retries++;
    *delay_s = backoff_s(t, retry_after);
    return ZPI_TX_RETRY;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Run t's attempts on this thread. */
static zp_status tx_run_sync(zpi_tx *t)
{
    for (;;) {
        if (zpi_tx_prepare(t) != ZP_OK)
            return t->status = t->err.code;
        CURLcode cc = curl_easy_perform(t->easy);
        double delay;
        zpi_tx_decision d = zpi_tx_finish(t, cc, &delay);
        if (d != ZPI_TX_RETRY)
            return t->status;
        /* the backoff, in slices: a stop request ends it */
        while (delay > 0 && !zpi_tx_stop_requested(t->s)) {
            double slice = delay < 0.1 ? delay : 0.1;
            sleep_s(slice);
            delay -= slice;
        }
    }
}

/* The size and validators from a GET of the object's first byte (Range:
 * bytes=0-0): its Content-Range total, or the Content-Length of a 200. */
static zp_status head_by_get(zpi_storage *s, const zpi_backend *be, const char *spec,
                             zpi_object_info *info, unsigned *retries, zpi_err *err)
{
    zpi_tx t;
    char byte;
    zp_status st = zpi_tx_init(&t, s, be, spec, NULL);
    if (st == ZP_OK) {
        t.sink = ZPI_SINK_MEM;
        t.mem = &byte;
        t.off = 0;
        t.want = 1;
        st = tx_run_sync(&t);
    }
    if (st == ZP_OK) {
        uint64_t size = t.h_code == 206 && t.h_crange ? t.h_cr_total : t.h_clen;
        if (size == UNKNOWN) {
            st = zpi_err_set(&t.err, ZP_ERR_NETWORK,
                             "%s: the server did not announce the size (HEAD refused, and no "
                             "size in the answer to a GET of the first byte)",
                             t.label);
        } else {
            memset(info, 0, sizeof *info);
            info->size = size;
            if (t.h_etag[0] && strncmp(t.h_etag, "W/", 2))
                zpi_fmt(info->etag, sizeof info->etag, "%s", t.h_etag);
            zpi_fmt(info->last_modified, sizeof info->last_modified, "%s", t.h_lastmod);
        }
    }
    if (retries)
        *retries += t.retries;
    if (st != ZP_OK)
        zpi_err_copy(err, &t.err);
    zpi_tx_free(&t);
    return st;
}

zp_status zpi_request_head(zpi_storage *s, const zpi_backend *be, const char *spec,
                           zpi_object_info *info, unsigned *retries, zpi_err *err)
{
    zpi_tx t;
    zpi_object_info tmp;
    memset(&tmp, 0, sizeof tmp);
    zp_status st = zpi_tx_init(&t, s, be, spec, NULL);
    if (st == ZP_OK) {
        t.sink = ZPI_SINK_NONE;
        t.info = &tmp;
        st = tx_run_sync(&t);
    }
    if (retries)
        *retries = t.retries;
    /* A server may refuse HEAD where it serves GET: a URL presigned for GET
     * (S3 answers a HEAD on it 403), a server without HEAD (405). Then the
     * first byte is asked for with a GET. */
    long code = t.h_code;
    int refused = st == ZP_ERR_NETWORK && (code == 403 || code == 405);
    if (st == ZP_OK)
        *info = tmp;
    else if (!refused)
        zpi_err_copy(err, &t.err);
    zpi_tx_free(&t);
    if (refused)
        st = head_by_get(s, be, spec, info, retries, err);
    return st;
}

zp_status zpi_request_get(zpi_storage *s, const zpi_backend *be, const char *spec,
                          const zpi_object_info *v, uint64_t off, void *buf, size_t len,
                          size_t *got, unsigned *retries, zpi_err *err)
{
    *got = 0;
    if (len == 0)
        return ZP_OK;
    zpi_tx t;
    zp_status st = zpi_tx_init(&t, s, be, spec, NULL);
    if (st == ZP_OK) {
        t.sink = ZPI_SINK_MEM;
        t.mem = buf;
        t.off = off;
        t.want = len;
        if (v) {
            t.expect_size = v->size;
            zpi_fmt(t.etag, sizeof t.etag, "%s", v->etag);
            zpi_fmt(t.lastmod, sizeof t.lastmod, "%s", v->last_modified);
        }
        st = tx_run_sync(&t);
    }
    if (retries)
        *retries = t.retries;
    if (st == ZP_OK)
        *got = (size_t)t.written;
    else
        zpi_err_copy(err, &t.err);
    zpi_tx_free(&t);
    return st;
}

zp_status zpi_request_get_all(zpi_storage *s, const zpi_backend *be, const char *spec,
                              const char *label, size_t max, char **out, size_t *len,
                              char *errbody, size_t errcap, long *code, zpi_err *err)
{
    *out = NULL;
    *len = 0;
    if (errbody && errcap)
        errbody[0] = '\0';
    if (code)
        *code = 0;
    zpi_tx t;
    zp_status st = zpi_tx_init(&t, s, be, spec, NULL);
    if (label && *label)
        zpi_fmt(t.label, sizeof t.label, "%s", label);
    if (st == ZP_OK) {
        t.sink = ZPI_SINK_BUF;
        t.mem_max = max;
        st = tx_run_sync(&t);
    }
    if (code)
        *code = t.h_code;
    if (st == ZP_OK && !t.mem) { /* an empty body */
        t.mem = calloc(1, 1);
        if (!t.mem)
            st = zpi_err_set(&t.err, ZP_ERR_NOMEM, "%s: out of memory", t.label);
    }
    if (st == ZP_OK) {
        *out = t.mem;
        *len = (size_t)t.written;
        t.mem = NULL;
    } else {
        if (errbody && errcap)
            zpi_fmt(errbody, errcap, "%s", t.errbody);
        zpi_err_copy(err, &t.err);
    }
    zpi_tx_free(&t);
    return st;
}
