/*
 * s3_list.c - parsing one page of an S3 ListObjectsV2 answer with expat
 * (s3_list.h has the model). Only the elements read are collected: under
 * ListBucketResult, Contents/Key, Contents/Size, IsTruncated,
 * NextContinuationToken and EncodingType; under Error, Code and Message.
 * Element names are matched without namespace processing (S3's default
 * namespace leaves them unprefixed).
 *
 * Thread safety: one parser per call, no shared state.
 */
#include "io/s3_list.h"

#include <errno.h>
#include <expat.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* The longest text of one element kept: an S3 key is at most 1024 bytes,
 * three times that percent-encoded. */
#define TEXT_MAX 8192

enum { E_OTHER, E_KEY, E_SIZE, E_TRUNC, E_TOKEN, E_ENCODING, E_CODE, E_MESSAGE };

typedef struct parse_ctx {
    XML_Parser xp;
    int depth;
    int root_list, root_error; /* the document element */
    int in_contents;           /* depth of the open <Contents>, 0 when none */
    int elem;                  /* the leaf being read (E_*) */
    char text[TEXT_MAX + 1];
    size_t text_len;
    int text_long;
    /* Contents being read */
    char *key;
    int has_size;
    uint64_t size;
    /* results */
    zpi_s3_page *page;
    size_t cap;
    int encoded;
    char code[128], message[256];
    char fail[256]; /* the first problem ("" when none) */
} parse_ctx;

static void fail(parse_ctx *c, const char *msg)
{
    if (!c->fail[0])
        zpi_fmt(c->fail, sizeof c->fail, "%s", msg);
    XML_StopParser(c->xp, XML_FALSE);
}

static void XMLCALL on_start(void *user, const XML_Char *name, const XML_Char **attrs)
{
    (void)attrs;
    parse_ctx *c = user;
    c->depth++;
    c->elem = E_OTHER;
    c->text_len = 0;
    c->text_long = 0;
    if (c->depth == 1) {
        c->root_list = !strcmp(name, "ListBucketResult");
        c->root_error = !strcmp(name, "Error");
        if (!c->root_list && !c->root_error)
            fail(c, "not a ListBucketResult");
        return;
    }
    if (c->root_error && c->depth == 2) {
        if (!strcmp(name, "Code"))
            c->elem = E_CODE;
        else if (!strcmp(name, "Message"))
            c->elem = E_MESSAGE;
        return;
    }
    if (!c->root_list)
        return;
    if (c->depth == 2) {
        if (!strcmp(name, "Contents")) {
            c->in_contents = c->depth;
            free(c->key);
            c->key = NULL;
            c->has_size = 0;
        } else if (!strcmp(name, "IsTruncated")) {
            c->elem = E_TRUNC;
        } else if (!strcmp(name, "NextContinuationToken")) {
            c->elem = E_TOKEN;
        } else if (!strcmp(name, "EncodingType")) {
            c->elem = E_ENCODING;
        }
    } else if (c->in_contents && c->depth == c->in_contents + 1) {
        if (!strcmp(name, "Key"))
            c->elem = E_KEY;
        else if (!strcmp(name, "Size"))
            c->elem = E_SIZE;
    }
}

static void XMLCALL on_text(void *user, const XML_Char *s, int len)
{
    parse_ctx *c = user;
    if (c->elem == E_OTHER || len <= 0)
        return;
    if (c->text_len + (size_t)len > TEXT_MAX) {
        c->text_long = 1;
        return;
    }
    memcpy(c->text + c->text_len, s, (size_t)len);
    c->text_len += (size_t)len;
}

static void end_contents(parse_ctx *c)
{
    if (!c->key || !c->has_size) {
        fail(c, c->key ? "an object without a Size" : "an object without a Key");
        return;
    }
    zpi_s3_page *p = c->page;
    if (p->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 1024;
        char **k = realloc(p->keys, cap * sizeof *k);
        if (k)
            p->keys = k;
        uint64_t *z = k ? realloc(p->sizes, cap * sizeof *z) : NULL;
        if (z)
            p->sizes = z;
        if (!k || !z) {
            fail(c, "out of memory");
            return;
        }
        c->cap = cap;
    }
    p->keys[p->n] = c->key;
    p->sizes[p->n] = c->size;
    p->n++;
    c->key = NULL;
}

static void XMLCALL on_end(void *user, const XML_Char *name)
{
    (void)name;
    parse_ctx *c = user;
    int elem = c->elem;
    c->elem = E_OTHER;
    if (elem != E_OTHER && c->text_long) {
        fail(c, "an element's text is longer than 8192 bytes");
    } else if (elem != E_OTHER) {
        c->text[c->text_len] = '\0';
        const char *t = c->text;
        switch (elem) {
        case E_KEY:
            free(c->key);
            c->key = zpi_strdup(t);
            if (!c->key)
                fail(c, "out of memory");
            break;
        case E_SIZE: {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(t, &end, 10);
            if (errno || end == t || *end || t[0] == '-' || t[0] == '+')
                fail(c, "an object's Size is not a number");
            c->size = v;
            c->has_size = 1;
            break;
        }
        case E_TRUNC:
            c->page->truncated = !strcmp(t, "true");
            break;
        case E_TOKEN:
            free(c->page->next_token);
            c->page->next_token = t[0] ? zpi_strdup(t) : NULL;
            if (t[0] && !c->page->next_token)
                fail(c, "out of memory");
            break;
        case E_ENCODING:
            c->encoded = !strcmp(t, "url");
            break;
        case E_CODE:
            zpi_fmt(c->code, sizeof c->code, "%s", t);
            break;
        case E_MESSAGE:
            zpi_fmt(c->message, sizeof c->message, "%s", t);
            break;
        }
    }
    if (c->in_contents && c->depth == c->in_contents) {
        c->in_contents = 0;
        end_contents(c);
    }
    c->depth--;
}

static int hexval(char h)
{
    if (h >= '0' && h <= '9')
        return h - '0';
    if (h >= 'a' && h <= 'f')
        return h - 'a' + 10;
    if (h >= 'A' && h <= 'F')
        return h - 'A' + 10;
    return -1;
}

/* Decode a key of encoding-type=url in place: %XX, and '+' as a space.
 * -1 for a malformed escape or an escaped NUL. */
static int url_decode(char *s)
{
    char *w = s;
    for (const char *r = s; *r; r++) {
        if (*r == '%') {
            int a = hexval(r[1]), b = a >= 0 ? hexval(r[2]) : -1;
            if (a < 0 || b < 0 || (a == 0 && b == 0))
                return -1;
            *w++ = (char)(a * 16 + b);
            r += 2;
        } else {
            *w++ = *r == '+' ? ' ' : *r;
        }
    }
    *w = '\0';
    return 0;
}

static zp_status run_parser(const char *xml, size_t len, parse_ctx *c)
{
    c->xp = XML_ParserCreate("UTF-8");
    if (!c->xp)
        return ZP_ERR_NOMEM;
    XML_SetUserData(c->xp, c);
    XML_SetElementHandler(c->xp, on_start, on_end);
    XML_SetCharacterDataHandler(c->xp, on_text);
    zp_status st = ZP_OK;
    /* XML_Parse takes an int length: feed large answers in pieces */
    size_t off = 0;
    do {
        size_t piece = len - off < (1u << 30) ? len - off : (1u << 30);
        int last = off + piece == len;
        if (XML_Parse(c->xp, xml + off, (int)piece, last) == XML_STATUS_ERROR) {
            if (!c->fail[0])
                zpi_fmt(c->fail, sizeof c->fail, "not XML: %s at line %lu",
                        XML_ErrorString(XML_GetErrorCode(c->xp)),
                        (unsigned long)XML_GetCurrentLineNumber(c->xp));
            st = ZP_ERR_FORMAT;
            break;
        }
        off += piece;
    } while (off < len);
    if (st == ZP_OK && !c->root_list && !c->root_error) {
        zpi_fmt(c->fail, sizeof c->fail, "an empty answer");
        st = ZP_ERR_FORMAT;
    }
    XML_ParserFree(c->xp);
    c->xp = NULL;
    return st;
}

void zpi_s3_page_free(zpi_s3_page *page)
{
    if (!page)
        return;
    for (size_t i = 0; i < page->n; i++)
        free(page->keys[i]);
    free(page->keys);
    free(page->sizes);
    free(page->next_token);
    memset(page, 0, sizeof *page);
}

zp_status zpi_s3_page_parse(const char *xml, size_t len, const char *what, zpi_s3_page *page,
                            zpi_err *err)
{
    memset(page, 0, sizeof *page);
    parse_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return zpi_err_set(err, ZP_ERR_NOMEM, "%s: out of memory", what);
    c->page = page;
    zp_status st = run_parser(xml, len, c);
    free(c->key);
    if (st == ZP_OK && c->root_error) {
        st = zpi_err_set(err, ZP_ERR_NETWORK, "%s: the server answered an error: %s%s%s", what,
                         c->code[0] ? c->code : "(no Code)", c->message[0] ? ": " : "",
                         c->message);
    } else if (st == ZP_ERR_NOMEM || !strcmp(c->fail, "out of memory")) {
        st = zpi_err_set(err, ZP_ERR_NOMEM, "%s: out of memory", what);
    } else if (st != ZP_OK || c->fail[0]) {
        st = zpi_err_set(err, ZP_ERR_FORMAT, "%s: the answer is not a valid listing: %s", what,
                         c->fail);
    } else if (page->truncated && !page->next_token) {
        st = zpi_err_set(err, ZP_ERR_FORMAT,
                         "%s: the answer is not a valid listing: IsTruncated without a "
                         "NextContinuationToken",
                         what);
    }
    for (size_t i = 0; st == ZP_OK && c->encoded && i < page->n; i++)
        if (url_decode(page->keys[i]) != 0)
            st = zpi_err_set(err, ZP_ERR_FORMAT,
                             "%s: the answer is not a valid listing: the key '%s' is not "
                             "URL-encoded as asked (encoding-type=url)",
                             what, page->keys[i]);
    free(c);
    if (st != ZP_OK)
        zpi_s3_page_free(page);
    return st;
}

void zpi_s3_error_text(const char *xml, size_t len, char *out, size_t cap)
{
    out[0] = '\0';
    parse_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return;
    zpi_s3_page page;
    memset(&page, 0, sizeof page);
    c->page = &page;
    if (xml && len && run_parser(xml, len, c) == ZP_OK && c->root_error && c->code[0])
        zpi_fmt(out, cap, "%s%s%s", c->code, c->message[0] ? ": " : "", c->message);
    free(c->key);
    free(c);
    zpi_s3_page_free(&page);
}
