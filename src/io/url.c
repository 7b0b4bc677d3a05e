/*
 * url.c - the URL helpers every message, cache key and request goes
 * through: which specs are URLs, redaction of secrets, an object's
 * identity (the canonical form used for cache keys and "the same object
 * twice"), the file name of a URL, and the http(s) URL of an S3 object.
 * The lowest file of the io layer: it calls nothing but base.
 *
 * Thread safety: pure functions.
 */
#include "io/url.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"

int zpi_is_url(const char *spec)
{
    if (!spec)
        return 0;
    return !strncasecmp(spec, "http://", 7) || !strncasecmp(spec, "https://", 8) ||
           !strncasecmp(spec, "s3://", 5);
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

/* The authority [a, a + n) (no user info) at w, canonical: the host in
 * lower case, the port in decimal without leading zeros ("h:037311" and
 * "h:37311" are one server), dropped when it is the scheme's default
 * (dflt, 0: none) or empty. Returns the end. Never longer than n. */
static char *canonical_authority(char *w, const char *a, size_t n, unsigned dflt)
{
    /* the port: digits after the last ':' that is not inside an IPv6 "[...]" */
    size_t colon = n;
    for (size_t i = n; i-- > 0;) {
        if (a[i] == ']')
            break;
        if (a[i] == ':') {
            colon = i;
            break;
        }
    }
    int digits = colon < n;
    for (size_t i = colon + 1; digits && i < n; i++)
        digits = a[i] >= '0' && a[i] <= '9';
    size_t hostlen = digits ? colon : n;
    for (size_t i = 0; i < hostlen; i++)
        *w++ = (char)tolower((unsigned char)a[i]);
    if (!digits)
        return w;
    size_t i = colon + 1;
    while (i + 1 < n && a[i] == '0')
        i++;
    unsigned long port = 0;
    for (size_t k = i; k < n && port <= 65535; k++)
        port = port * 10 + (unsigned long)(a[k] - '0');
    if (i == n || (dflt && port == dflt))
        return w; /* "h:" or the default port */
    *w++ = ':';
    memcpy(w, a + i, n - i);
    return w + (n - i);
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
    w = canonical_authority(w, spec + u.host0, hl, http ? 80 : https ? 443 : 0);
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
