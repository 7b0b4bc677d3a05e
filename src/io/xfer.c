/*
 * xfer.c - the transfer engine: one request's attempts, retries, backoff
 * and Range resume (the `tx` below, one copy of that logic), driven either
 * by a zpi_xfer (one libcurl multi handle and one I/O thread running many
 * jobs) or synchronously on the caller's thread (zpi_xfer_head/get, used by
 * the remote backends' open and read).
 *
 * A tx's life: prepare an attempt (the backend configures the easy handle;
 * Range + If-Range when bytes are already delivered), run it, then decide
 * (done, failed, or retry after a delay). The header callback parses the
 * final response's headers; the write callback checks the status before it
 * writes anything (an error page is never data), checks Content-Range and
 * the announced size, and delivers the bytes in order (pwrite into a file,
 * or into a buffer), feeding the XXH64 state with exactly what it writes.
 *
 * Ownership: a zpi_xfer owns its jobs (copies of the specs), its multi
 * handle and its thread; the files are the caller's. Thread safety: the
 * queue, the job lists and the stats are under x->mu; a job's tx and every
 * libcurl call are on the I/O thread only; done callbacks run on the I/O
 * thread without the lock (they may submit).
 */
#include "io/xfer.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/util.h"

/* ------------------------------------------------------------ one request */

typedef enum { SINK_NONE, SINK_FD, SINK_MEM } tx_sink;
/* Why a callback stopped the transfer. */
typedef enum {
    FK_NONE, FK_STATUS, FK_RANGE, FK_SIZE, FK_IO, FK_DONE, FK_STOP,
    FK_STALE /* the same wrong size announced twice: the object's real size */
} tx_fault;
typedef enum { TX_OK, TX_FAIL, TX_RETRY } tx_decision;

#define UNKNOWN UINT64_MAX

typedef struct tx {
    zpi_storage *s;
    const zpi_backend *be;
    char *spec;
    char label[512];        /* the name in messages (redacted) */
    tx_sink sink;
    int fd;                 /* SINK_FD */
    char *mem;              /* SINK_MEM: want bytes */
    uint64_t off;           /* first byte wanted (object offset) */
    uint64_t want;          /* bytes wanted from off; UNKNOWN: to the end */
    uint64_t written;       /* bytes delivered: [off, off + written) */
    uint64_t expect_size;   /* the object's size (UNKNOWN when not known) */
    int has_hash;
    uint64_t hash;
    XXH64_state_t *xs;
    char etag[128], lastmod[64]; /* validator for If-Range */
    zpi_object_info *info;  /* HEAD: filled on success */
    unsigned retries;
    uint64_t bytes;         /* body bytes received, all attempts */
    uint64_t rng;
    CURL *easy;
    struct curl_slist *hdrs;
    char errbuf[CURL_ERROR_SIZE];
    /* The attempt. */
    uint64_t req_start;     /* object offset asked for with Range */
    int ranged;
    int decided;            /* the write callback checked the response */
    uint64_t pos;           /* object offset of the next body byte */
    tx_fault fault;
    char fault_msg[256];
    int os_errno;           /* the errno of a failed write to the file */
    uint64_t size_seen;     /* the last wrong size announced (UNKNOWN: none) */
    /* The current response's headers. */
    long h_code;
    char h_reason[64];
    uint64_t h_clen;
    int h_crange;
    uint64_t h_cr_start, h_cr_total;
    char h_etag[128], h_lastmod[64];
    /* The outcome. */
    zp_status status;
    zpi_err err;
} tx;

static zp_status tx_init(tx *t, zpi_storage *s, const char *spec, const char *name)
{
    memset(t, 0, sizeof *t);
    t->s = s;
    t->fd = -1;
    t->be = zpi_backend_for(spec);
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

static void tx_free(tx *t)
{
    if (t->easy)
        curl_easy_cleanup(t->easy);
    curl_slist_free_all(t->hdrs);
    if (t->xs)
        XXH64_freeState(t->xs);
    free(t->spec);
    t->easy = NULL;
    t->hdrs = NULL;
    t->xs = NULL;
    t->spec = NULL;
}

/* Start over at the object's first wanted byte. */
static zp_status tx_restart(tx *t)
{
    t->written = 0;
    if (t->xs)
        XXH64_reset(t->xs, 0);
    if (t->sink == SINK_FD && ftruncate(t->fd, 0) != 0) {
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
    tx *t = user;
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

static int stop(tx *t, tx_fault f, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int stop(tx *t, tx_fault f, const char *fmt, ...)
{
    t->fault = f;
    va_list ap;
    va_start(ap, fmt);
    zpi_vfmt(t->fault_msg, sizeof t->fault_msg, fmt, ap);
    va_end(ap);
    return 0;
}

/* The first body byte of a response: is it the data we asked for? */
static int tx_check_response(tx *t)
{
    long code = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
    uint64_t total = UNKNOWN;
    if (code == 206 && t->ranged) {
        if (!t->h_crange || t->h_cr_start != t->req_start)
            return stop(t, FK_RANGE,
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
            return stop(t, FK_IO, "%s", t->err.msg);
    } else {
        return stop(t, FK_STATUS, "HTTP %ld", code);
    }
    if (total != UNKNOWN && t->expect_size != UNKNOWN && total != t->expect_size) {
        /* once may be a broken answer (retried); the same size twice in a
         * row is the object's: it changed since its size was taken */
        int again = t->size_seen == total;
        t->size_seen = total;
        if (again)
            return stop(t, FK_STALE,
                        "the server's object has %llu bytes, %llu expected (the same size "
                        "answered twice: the object changed since its size was taken; a "
                        "manifest's: re-run zephon index)",
                        (unsigned long long)total, (unsigned long long)t->expect_size);
        return stop(t, FK_SIZE, "the server announced %llu bytes, expected %llu",
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

static int tx_deliver(tx *t, const char *p, size_t n, uint64_t at)
{
    if (t->sink == SINK_FD) {
        size_t done = 0;
        while (done < n) {
            ssize_t w = pwrite(t->fd, p + done, n - done, (off_t)(at + done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                t->os_errno = errno;
                return stop(t, FK_IO, "writing the download at offset %llu: %s",
                            (unsigned long long)(at + done), strerror(errno));
            }
            done += (size_t)w;
        }
    } else if (t->sink == SINK_MEM) {
        memcpy(t->mem + (at - t->off), p, n);
    }
    if (t->xs)
        XXH64_update(t->xs, p, n);
    t->written += n;
    return 1;
}

static size_t write_cb(char *p, size_t size, size_t nmemb, void *user)
{
    tx *t = user;
    size_t n = size * nmemb;
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
        return stop(t, FK_RANGE, "the body skipped from %llu to %llu",
                    (unsigned long long)want_lo, (unsigned long long)lo);
    uint64_t end = hi < want_hi ? hi : want_hi;
    if (end > lo && !tx_deliver(t, p, (size_t)(end - lo), lo))
        return 0;
    if (hi > want_hi) {
        if (t->want != UNKNOWN)
            return stop(t, FK_DONE, "done"); /* the rest is not wanted */
        return stop(t, FK_SIZE, "the body is longer than the expected %llu bytes",
                    (unsigned long long)t->expect_size);
    }
    return n;
}

/* The settings' stop_requested hook: 1 when the caller asks every transfer
 * to end now. */
static int stop_requested(const zpi_storage *s)
{
    return s->cfg.stop_requested && s->cfg.stop_requested(s->cfg.stop_user) != 0;
}

/* libcurl's progress callback (only with a stop_requested hook): nonzero
 * aborts the transfer (CURLE_ABORTED_BY_CALLBACK). */
static int progress_cb(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    tx *t = user;
    if (!stop_requested(t->s))
        return 0;
    t->fault = FK_STOP;
    return 1;
}

/* Configure the easy handle for the next attempt. */
static zp_status tx_prepare(tx *t)
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
    t->fault = FK_NONE;
    t->fault_msg[0] = '\0';
    t->errbuf[0] = '\0';
    t->h_code = 0;
    t->h_reason[0] = '\0';
    t->h_clen = UNKNOWN;
    t->h_crange = 0;
    t->ranged = 0;
    char range[64];
    int is_head = t->sink == SINK_NONE;
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

static double backoff_s(tx *t, double retry_after)
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

/* After an attempt ended with cc: done, failed (t->status, t->err) or retry
 * after *delay_s. */
static tx_decision tx_finish(tx *t, CURLcode cc, double *delay_s)
{
    *delay_s = 0;
    long code = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
    char cause[512];
    zp_status final = ZP_ERR_NETWORK;
    double retry_after = 0;
    cause[0] = '\0';
    if (t->fault == FK_STOP || stop_requested(t->s)) {
        t->status = zpi_err_set(&t->err, ZP_ERR_STATE, "%s: stopped (asked to stop)", t->label);
        return TX_FAIL;
    }
    if (t->fault == FK_IO) {
        t->status = zpi_err_set(&t->err, ZP_ERR_IO, "%s: %s", t->label, t->fault_msg);
        return TX_FAIL;
    }
    if (t->fault == FK_STALE) {
        t->status = zpi_err_set(&t->err, ZP_ERR_FORMAT, "%s: %s", t->label, t->fault_msg);
        return TX_FAIL;
    }
    if (t->fault == FK_DONE)
        goto complete;
    if (t->fault == FK_STATUS || (cc == CURLE_OK && code != 200 && code != 206)) {
        char reason[80] = "";
        if (t->h_code == code && t->h_reason[0])
            zpi_fmt(reason, sizeof reason, " %s", t->h_reason);
        zpi_fmt(cause, sizeof cause, "HTTP %ld%s", code, reason);
        if (!(code == 408 || code == 429 || code >= 500)) {
            t->status = zpi_err_set(&t->err, ZP_ERR_NETWORK, "%s: %s", t->label, cause);
            return TX_FAIL;
        }
        curl_off_t ra = 0;
        if (curl_easy_getinfo(t->easy, CURLINFO_RETRY_AFTER, &ra) == CURLE_OK && ra > 0)
            retry_after = (double)ra;
    } else if (t->fault == FK_RANGE) {
        zpi_fmt(cause, sizeof cause, "%s", t->fault_msg);
        if (tx_restart(t) != ZP_OK) {
            t->status = t->err.code;
            return TX_FAIL;
        }
    } else if (t->fault == FK_SIZE) {
        zpi_fmt(cause, sizeof cause, "%s", t->fault_msg);
        final = ZP_ERR_FORMAT;
    } else if (cc != CURLE_OK) {
        zpi_fmt(cause, sizeof cause, "%s%s", cc == CURLE_OPERATION_TIMEDOUT ? "timed out: " : "",
                t->errbuf[0] ? t->errbuf : curl_easy_strerror(cc));
        if (!curl_retryable(cc)) {
            t->status = zpi_err_set(&t->err, ZP_ERR_NETWORK, "%s: %s", t->label, cause);
            return TX_FAIL;
        }
    } else if (t->sink == SINK_NONE) {
        if (t->h_clen == UNKNOWN) {
            t->status = zpi_err_set(&t->err, ZP_ERR_NETWORK,
                                    "%s: the server did not announce the size (no "
                                    "Content-Length)",
                                    t->label);
            return TX_FAIL;
        }
        t->info->size = t->h_clen;
        t->info->etag[0] = '\0';
        if (t->h_etag[0] && strncmp(t->h_etag, "W/", 2))
            zpi_fmt(t->info->etag, sizeof t->info->etag, "%s", t->h_etag);
        zpi_fmt(t->info->last_modified, sizeof t->info->last_modified, "%s", t->h_lastmod);
        t->status = ZP_OK;
        return TX_OK;
    } else {
        /* A complete response: is the body all there? */
        uint64_t end = t->want != UNKNOWN ? t->off + t->want : t->expect_size;
        uint64_t total = code == 206 && t->h_crange ? t->h_cr_total : t->h_clen;
        if (end == UNKNOWN && code == 200)
            end = total; /* the announced size (UNKNOWN when none: take what came) */
        if (t->want != UNKNOWN && total != UNKNOWN && total < end)
            end = total > t->off ? total : t->off; /* the range runs past the end */
        if (!t->decided && end != UNKNOWN && t->off + t->written < end &&
            !tx_check_response(t)) {
            /* An empty 200/206 (the write callback never ran): same checks. */
            if (t->fault == FK_STALE) {
                t->status = zpi_err_set(&t->err, ZP_ERR_FORMAT, "%s: %s", t->label, t->fault_msg);
                return TX_FAIL;
            }
            if (t->fault == FK_SIZE)
                final = ZP_ERR_FORMAT;
            zpi_fmt(cause, sizeof cause, "%s", t->fault_msg);
        } else if (end != UNKNOWN && t->off + t->written < end) {
            zpi_fmt(cause, sizeof cause, "short body: %llu of %llu bytes",
                    (unsigned long long)(t->off + t->written), (unsigned long long)end);
        } else {
            goto complete;
        }
    }
    /* Retry, or give up. */
    if (t->retries >= t->s->cfg.retries) {
        t->status = zpi_err_set(&t->err, final, "%s: %s (after %u retries)", t->label, cause,
                                t->retries);
        return TX_FAIL;
    }
    t->retries++;
    *delay_s = backoff_s(t, retry_after);
    return TX_RETRY;

complete:
    if (t->sink == SINK_FD && t->want == UNKNOWN && ftruncate(t->fd, (off_t)t->written) != 0) {
        t->os_errno = errno;
        t->status = zpi_err_set(&t->err, ZP_ERR_IO, "%s: cannot set the download's size: %s",
                                t->label, strerror(errno));
        return TX_FAIL;
    }
    if (t->has_hash) {
        uint64_t h = XXH64_digest(t->xs);
        if (h != t->hash) {
            t->status = zpi_err_set(&t->err, ZP_ERR_FORMAT,
                                    "%s: XXH64 of the %llu bytes is %016llx, expected %016llx",
                                    t->label, (unsigned long long)t->written,
                                    (unsigned long long)h, (unsigned long long)t->hash);
            return TX_FAIL;
        }
    }
    t->status = ZP_OK;
    return TX_OK;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Run t's attempts on this thread. */
static zp_status tx_run_sync(tx *t)
{
    for (;;) {
        if (tx_prepare(t) != ZP_OK)
            return t->status = t->err.code;
        CURLcode cc = curl_easy_perform(t->easy);
        double delay;
        tx_decision d = tx_finish(t, cc, &delay);
        if (d != TX_RETRY)
            return t->status;
        /* the backoff, in slices: a stop request ends it */
        while (delay > 0 && !stop_requested(t->s)) {
            double slice = delay < 0.1 ? delay : 0.1;
            sleep_s(slice);
            delay -= slice;
        }
    }
}

/* The size and validators from a GET of the object's first byte (Range:
 * bytes=0-0): its Content-Range total, or the Content-Length of a 200. */
static zp_status head_by_get(zpi_storage *s, const char *spec, zpi_object_info *info,
                             unsigned *retries, zpi_err *err)
{
    tx t;
    char byte;
    zp_status st = tx_init(&t, s, spec, NULL);
    if (st == ZP_OK) {
        t.sink = SINK_MEM;
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
    tx_free(&t);
    return st;
}

zp_status zpi_xfer_head(zpi_storage *s, const char *spec, zpi_object_info *info,
                        unsigned *retries, zpi_err *err)
{
    tx t;
    zpi_object_info tmp;
    memset(&tmp, 0, sizeof tmp);
    zp_status st = tx_init(&t, s, spec, NULL);
    if (st == ZP_OK) {
        t.sink = SINK_NONE;
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
    tx_free(&t);
    if (refused)
        st = head_by_get(s, spec, info, retries, err);
    return st;
}

zp_status zpi_xfer_get(zpi_storage *s, const char *spec, const zpi_object_info *v, uint64_t off,
                       void *buf, size_t len, size_t *got, unsigned *retries, zpi_err *err)
{
    *got = 0;
    if (len == 0)
        return ZP_OK;
    tx t;
    zp_status st = tx_init(&t, s, spec, NULL);
    if (st == ZP_OK) {
        t.sink = SINK_MEM;
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
    tx_free(&t);
    return st;
}

/* ------------------------------------------------------------ the engine */

typedef enum { J_QUEUED, J_RUNNING, J_WAITING } job_state;

typedef struct job {
    tx t;
    uint64_t id;
    int demand;
    job_state state;
    zpi_xfer_done_fn done;
    void *user;
    uint64_t start_ns;     /* first attempt */
    uint64_t wake_ns;      /* J_WAITING: when to retry */
    struct job *prev, *next;
} job;

typedef struct job_list {
    job *head, *tail;
    size_t n;
} job_list;

static void list_push(job_list *l, job *j)
{
    j->next = NULL;
    j->prev = l->tail;
    if (l->tail)
        l->tail->next = j;
    else
        l->head = j;
    l->tail = j;
    l->n++;
}

static void list_remove(job_list *l, job *j)
{
    if (j->prev)
        j->prev->next = j->next;
    else
        l->head = j->next;
    if (j->next)
        j->next->prev = j->prev;
    else
        l->tail = j->prev;
    j->prev = j->next = NULL;
    l->n--;
}

struct zpi_xfer {
    zpi_storage *s;
    unsigned max_parallel, max_demand;
    CURLM *multi;
    pthread_t thread;
    pthread_mutex_t mu;
    int stopping;
    uint64_t next_id;
    job_list qd, qp;       /* queued: demanded, prefetches */
    job_list active;       /* running or waiting for a retry */
    /* Stats (under mu). */
    zpi_xfer_stats st;
    unsigned in_multi;     /* easy handles in the multi handle (I/O thread) */
    uint64_t busy_since;   /* when in_multi became non-zero (under mu) */
};

static void job_free(job *j)
{
    tx_free(&j->t);
    free(j);
}

/* Hand a finished job to its owner: outside the lock, then free it. */
static void job_complete(zpi_xfer *x, job *j, zp_status status)
{
    zpi_xfer_result r;
    memset(&r, 0, sizeof r);
    r.status = status;
    if (status != ZP_OK)
        zpi_err_copy(&r.err, &j->t.err);
    r.bytes = j->t.bytes;
    r.size = status == ZP_OK ? j->t.written : 0;
    r.retries = j->t.retries;
    r.os_errno = status == ZP_ERR_IO ? j->t.os_errno : 0;
    uint64_t now = zpi_now_ns();
    r.ns = j->start_ns ? now - j->start_ns : 0;
    pthread_mutex_lock(&x->mu);
    if (j->state != J_QUEUED)
        list_remove(&x->active, j);
    if (status == ZP_OK) {
        x->st.downloads++;
        zp_hist_record(&x->st.latency_ns, r.ns);
    } else if (status != ZP_ERR_STATE) {
        x->st.failures++;
    }
    x->st.bytes += j->t.bytes;
    pthread_mutex_unlock(&x->mu);
    j->done(j->user, &r);
    job_free(j);
}

static void busy_update(zpi_xfer *x, int delta)
{
    pthread_mutex_lock(&x->mu);
    uint64_t now = zpi_now_ns();
    if (x->in_multi == 0 && delta > 0)
        x->busy_since = now;
    x->in_multi = (unsigned)((int)x->in_multi + delta);
    if (x->in_multi == 0 && delta < 0)
        x->st.busy_ns += now - x->busy_since;
    pthread_mutex_unlock(&x->mu);
}

/* Add the job's next attempt to the multi handle (I/O thread, no lock). */
static void job_launch(zpi_xfer *x, job *j)
{
    if (tx_prepare(&j->t) != ZP_OK) {
        job_complete(x, j, j->t.err.code);
        return;
    }
    CURLMcode mc = curl_multi_add_handle(x->multi, j->t.easy);
    if (mc != CURLM_OK) {
        zpi_err_set(&j->t.err, ZP_ERR_INTERNAL, "%s: libcurl: %s", j->t.label,
                    curl_multi_strerror(mc));
        job_complete(x, j, ZP_ERR_INTERNAL);
        return;
    }
    busy_update(x, 1);
}

/* Under the lock: the jobs to launch now (queued ones that fit in a slot,
 * waiting ones whose backoff is over), moved to active/J_RUNNING; and the
 * time of the earliest pending retry. */
static size_t pick_jobs(zpi_xfer *x, job **out, size_t cap, uint64_t now, uint64_t *next_wake)
{
    size_t k = 0;
    *next_wake = UINT64_MAX;
    for (job *j = x->active.head; j; j = j->next) {
        if (j->state != J_WAITING)
            continue;
        if (j->wake_ns <= now && k < cap) {
            j->state = J_RUNNING;
            out[k++] = j;
        } else if (j->wake_ns < *next_wake) {
            *next_wake = j->wake_ns;
        }
    }
    while (k < cap && x->qd.head && x->active.n < x->max_parallel + x->max_demand) {
        job *j = x->qd.head;
        list_remove(&x->qd, j);
        j->state = J_RUNNING;
        j->start_ns = now;
        list_push(&x->active, j);
        out[k++] = j;
    }
    while (k < cap && x->qp.head && x->active.n < x->max_parallel) {
        job *j = x->qp.head;
        list_remove(&x->qp, j);
        j->state = J_RUNNING;
        j->start_ns = now;
        list_push(&x->active, j);
        out[k++] = j;
    }
    return k;
}

/* End every queued, running and waiting job with ZP_ERR_STATE: why says
 * "cancelled (the transfers are shutting down)" or "stopped (...)". */
static void cancel_all(zpi_xfer *x, const char *why)
{
    for (;;) {
        pthread_mutex_lock(&x->mu);
        job *j = x->active.head;
        job_list *from = &x->active;
        if (!j) {
            j = x->qd.head ? x->qd.head : x->qp.head;
            from = x->qd.head ? &x->qd : &x->qp;
        }
        if (j && j->state == J_QUEUED) {
            list_remove(from, j);
        }
        pthread_mutex_unlock(&x->mu);
        if (!j)
            return;
        if (j->state == J_RUNNING && j->t.easy) {
            curl_multi_remove_handle(x->multi, j->t.easy);
            busy_update(x, -1);
        }
        zpi_err_set(&j->t.err, ZP_ERR_STATE, "%s: %s", j->t.label, why);
        job_complete(x, j, ZP_ERR_STATE);
    }
}

static void *io_thread(void *arg)
{
    zpi_xfer *x = arg;
    enum { BATCH = 64 };
    job *launch[BATCH];
    for (;;) {
        uint64_t now = zpi_now_ns(), next_wake;
        pthread_mutex_lock(&x->mu);
        if (x->stopping) {
            pthread_mutex_unlock(&x->mu);
            break;
        }
        pthread_mutex_unlock(&x->mu);
        if (stop_requested(x->s)) {
            /* the caller stops: end every job now (new ones as they come) */
            cancel_all(x, "stopped (asked to stop)");
            curl_multi_poll(x->multi, NULL, 0, 100, NULL); /* a submit or destroy wakes it */
            continue;
        }
        pthread_mutex_lock(&x->mu);
        size_t k = pick_jobs(x, launch, BATCH, now, &next_wake);
        pthread_mutex_unlock(&x->mu);
        for (size_t i = 0; i < k; i++)
            job_launch(x, launch[i]);
        int running = 0;
        curl_multi_perform(x->multi, &running);
        CURLMsg *m;
        int left, finished = 0;
        while ((m = curl_multi_info_read(x->multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            CURL *e = m->easy_handle;
            CURLcode cc = m->data.result;
            tx *t = NULL;
            curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&t);
            curl_multi_remove_handle(x->multi, e);
            busy_update(x, -1);
            job *j = (job *)(void *)t; /* t is the job's first member */
            double delay;
            finished = 1;
            tx_decision d = tx_finish(t, cc, &delay);
            if (d == TX_RETRY) {
                pthread_mutex_lock(&x->mu);
                j->state = J_WAITING;
                j->wake_ns = zpi_now_ns() + (uint64_t)(delay * 1e9);
                if (j->wake_ns < next_wake)
                    next_wake = j->wake_ns;
                x->st.retries++;
                pthread_mutex_unlock(&x->mu);
            } else {
                job_complete(x, j, t->status);
            }
        }
        if (finished)
            continue; /* a slot is free: launch the next job before sleeping */
        /* Sleep until a socket is ready, a retry is due, or a wakeup. */
        int timeout_ms = x->s->cfg.stop_requested ? 100 : 1000; /* stop asked: seen within 0.1 s */
        now = zpi_now_ns();
        if (next_wake != UINT64_MAX) {
            uint64_t dt = next_wake > now ? (next_wake - now + 999999) / 1000000 : 0;
            if (dt < (uint64_t)timeout_ms)
                timeout_ms = (int)dt;
        }
        long ct = -1;
        if (curl_multi_timeout(x->multi, &ct) == CURLM_OK && ct >= 0 && ct < timeout_ms)
            timeout_ms = (int)ct;
        if (timeout_ms > 0)
            curl_multi_poll(x->multi, NULL, 0, timeout_ms, NULL);
    }
    cancel_all(x, "cancelled (the transfers are shutting down)");
    return NULL;
}

zp_status zpi_xfer_create(zpi_storage *s, unsigned max_parallel, unsigned max_demand,
                          zpi_xfer **out, zpi_err *err)
{
    *out = NULL;
    if (max_parallel == 0)
        return zpi_err_set(err, ZP_ERR_INVALID, "transfers: max_parallel = 0: must be at least 1");
    zpi_xfer *x = calloc(1, sizeof *x);
    if (!x)
        return zpi_err_set(err, ZP_ERR_NOMEM, "transfers: out of memory");
    x->s = s;
    x->max_parallel = max_parallel;
    x->max_demand = max_demand;
    zp_hist_init(&x->st.latency_ns);
    x->multi = curl_multi_init();
    if (!x->multi) {
        free(x);
        return zpi_err_set(err, ZP_ERR_NOMEM, "transfers: cannot create a libcurl multi handle");
    }
    curl_multi_setopt(x->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS,
                      (long)(max_parallel + max_demand));
    pthread_mutex_init(&x->mu, NULL);
    int rc = pthread_create(&x->thread, NULL, io_thread, x);
    if (rc != 0) {
        pthread_mutex_destroy(&x->mu);
        curl_multi_cleanup(x->multi);
        free(x);
        return zpi_err_set(err, ZP_ERR_NOMEM, "transfers: cannot start the I/O thread: %s",
                           strerror(rc));
    }
    *out = x;
    return ZP_OK;
}

void zpi_xfer_destroy(zpi_xfer *x)
{
    if (!x)
        return;
    pthread_mutex_lock(&x->mu);
    x->stopping = 1;
    pthread_mutex_unlock(&x->mu);
    curl_multi_wakeup(x->multi);
    pthread_join(x->thread, NULL);
    curl_multi_cleanup(x->multi);
    pthread_mutex_destroy(&x->mu);
    free(x);
}

zp_status zpi_xfer_submit(zpi_xfer *x, const zpi_xfer_job *jb, uint64_t *id, zpi_err *err)
{
    if (!jb->done || jb->fd < 0)
        return zpi_err_set(err, ZP_ERR_INVALID,
                           "transfers: a job needs a file and a done callback");
    job *j = calloc(1, sizeof *j);
    if (!j)
        return zpi_err_set(err, ZP_ERR_NOMEM, "transfers: out of memory");
    if (tx_init(&j->t, x->s, jb->spec, jb->name) != ZP_OK) {
        zp_status st = zpi_err_copy(err, &j->t.err);
        job_free(j);
        return st;
    }
    j->t.sink = SINK_FD;
    j->t.fd = jb->fd;
    j->t.expect_size = jb->expect_size;
    j->t.has_hash = jb->has_xxh64;
    j->t.hash = jb->xxh64;
    j->t.xs = XXH64_createState();
    if (!j->t.xs) {
        job_free(j);
        return zpi_err_set(err, ZP_ERR_NOMEM, "transfers: out of memory");
    }
    XXH64_reset(j->t.xs, 0);
    j->demand = jb->demand;
    j->done = jb->done;
    j->user = jb->user;
    j->state = J_QUEUED;
    pthread_mutex_lock(&x->mu);
    if (x->stopping) {
        pthread_mutex_unlock(&x->mu);
        job_free(j);
        return zpi_err_set(err, ZP_ERR_STATE, "transfers: shutting down");
    }
    j->id = ++x->next_id;
    list_push(j->demand ? &x->qd : &x->qp, j);
    if (id)
        *id = j->id;
    pthread_mutex_unlock(&x->mu);
    curl_multi_wakeup(x->multi);
    return ZP_OK;
}

void zpi_xfer_promote(zpi_xfer *x, uint64_t id)
{
    int moved = 0;
    pthread_mutex_lock(&x->mu);
    for (job *j = x->qp.head; j; j = j->next)
        if (j->id == id) {
            list_remove(&x->qp, j);
            j->demand = 1;
            list_push(&x->qd, j);
            moved = 1;
            break;
        }
    if (!moved)
        for (job *j = x->active.head; j; j = j->next)
            if (j->id == id) {
                j->demand = 1;
                break;
            }
    pthread_mutex_unlock(&x->mu);
    if (moved)
        curl_multi_wakeup(x->multi);
}

void zpi_xfer_stats_get(zpi_xfer *x, zpi_xfer_stats *out)
{
    pthread_mutex_lock(&x->mu);
    *out = x->st;
    if (x->in_multi > 0)
        out->busy_ns += zpi_now_ns() - x->busy_since;
    pthread_mutex_unlock(&x->mu);
}
