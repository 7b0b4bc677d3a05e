/*
 * hf_json.c - loading a Hugging Face tokenizer.json (and the
 * tokenizer_config.json beside it) into a zp_tokenizer. See hf_json.h and
 * docs/tokenizers.md.
 *
 * The file is mostly the model's vocab and merges (33 MB for Gemma 3's
 * 262k vocabulary): those are read by a small JSON scanner written for them
 * (jansson needs seconds for such a file); every other member (normalizer,
 * pre_tokenizer, added_tokens, post_processor, the model's options) is
 * parsed by jansson from its span of the text.
 *
 * Ownership: the zp_tokenizer owns the struct zpi_hf built here (t->hf) and
 * the tables filled by zpi_tok_build_*; zpi_hf_destroy() frees the former.
 */
#include "base/tokenizer/hf_json.h"
#include "base/tokenizer/hf_encode.h"
#include "base/tokenizer/hf_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <utf8proc.h>

#include "base/util.h"

#define ERR(st, ...) return zpi_err_set(err, (st), __VA_ARGS__)

/* ------------------------------------------------------------ files */

static zp_status read_file(const char *path, char **buf, size_t *len, zpi_err *err)
{
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        ERR(errno == ENOENT ? ZP_ERR_INVALID : ZP_ERR_IO, "cannot open '%s': %s", path,
            strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        ERR(ZP_ERR_IO, "'%s' is not a regular file", path);
    }
    size_t n = (size_t)sb.st_size;
    char *b = malloc(n + 1);
    if (!b) {
        fclose(f);
        ERR(ZP_ERR_NOMEM, "out of memory reading '%s'", path);
    }
    size_t got = fread(b, 1, n, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || got != n) {
        free(b);
        ERR(ZP_ERR_IO, "cannot read '%s'", path);
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    return ZP_OK;
}

/* The tokenizer.json, mapped (read-only, pages read ahead) rather than read:
 * no copy, no fresh pages to clear. *mapped: 1 when it must be unmapped, 0
 * when it was read into malloc'ed memory (an empty file, or mmap failed). */
static zp_status map_file(const char *path, char **buf, size_t *len, int *mapped, zpi_err *err)
{
    *buf = NULL;
    *len = 0;
    *mapped = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        ERR(errno == ENOENT ? ZP_ERR_INVALID : ZP_ERR_IO, "cannot open '%s': %s", path,
            strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        ERR(ZP_ERR_IO, "'%s' is not a regular file", path);
    }
    if (sb.st_size > 0) {
        void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (m != MAP_FAILED) {
            close(fd);
            *buf = m;
            *len = (size_t)sb.st_size;
            *mapped = 1;
            return ZP_OK;
        }
    }
    close(fd);
    return read_file(path, buf, len, err);
}

static const char *skip_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

/* Does the .json file at path hold a token -> id map (the vocab.json of a
 * vocab.json + merges.txt pair) rather than a tokenizer.json document? It
 * does when it is named vocab.json with a merges.txt beside it, or when the
 * first member of its top-level object has a number as its value (a
 * tokenizer.json's members are strings, objects, arrays or null). Reads at
 * most the first 4 KiB. */
static int is_vocab_map(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (strcmp(base, "vocab.json") == 0) {
        char m[4096];
        struct stat sb;
        zpi_fmt(m, sizeof m, "%.*smerges.txt", (int)(base - path), path);
        if (stat(m, &sb) == 0 && S_ISREG(sb.st_mode))
            return 1;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    if (n <= 0)
        return 0;
    const char *p = buf, *e = buf + n;
    if (e - p >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0)
        p += 3;
    p = skip_ws(p, e);
    if (p == e || *p++ != '{')
        return 0;
    p = skip_ws(p, e);
    if (p == e || *p++ != '"')
        return 0;
    while (p < e && *p != '"')
        p += *p == '\\' ? 2 : 1;
    if (p >= e)
        return 0;
    p++;
    p = skip_ws(p, e);
    if (p == e || *p++ != ':')
        return 0;
    p = skip_ws(p, e);
    return p < e && (*p == '-' || (*p >= '0' && *p <= '9'));
}

int zpi_hf_is_json_path(const char *path)
{
    struct stat sb;
    size_t n = strlen(path);
    if (stat(path, &sb) != 0)
        return n >= 5 && strcmp(path + n - 5, ".json") == 0;
    if (S_ISDIR(sb.st_mode)) {
        char p[4096];
        zpi_fmt(p, sizeof p, "%s/tokenizer.json", path);
        return stat(p, &sb) == 0;
    }
    return n >= 5 && strcmp(path + n - 5, ".json") == 0 && !is_vocab_map(path);
}

/* ------------------------------------------------------------ JSON scanner
 * Just enough JSON for the vocab object and the merges array: strings (with
 * every escape), integers, and skipping any value. */

typedef struct js {
    const char *p, *e;
} js;

static inline void js_ws(js *s)
{
    while (s->p < s->e && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int hex4(const char *p, uint32_t *v)
{
    uint32_t x = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval((unsigned char)p[i]);
        if (h < 0)
            return -1;
        x = x << 4 | (uint32_t)h;
    }
    *v = x;
    return 0;
}

static size_t utf8_put(uint8_t *o, uint32_t c)
{
    if (c < 0x80) {
        o[0] = (uint8_t)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (uint8_t)(0xC0 | c >> 6);
        o[1] = (uint8_t)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (uint8_t)(0xE0 | c >> 12);
        o[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | c >> 18);
    o[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

/* A string at s->p ('"'): its unescaped bytes are written to out (room for
 * the escaped length, which is never shorter). Returns the length or -1. */
static long js_string(js *s, uint8_t *out)
{
    if (s->p >= s->e || *s->p != '"')
        return -1;
    const char *p = s->p + 1, *e = s->e;
    size_t o = 0;
    for (;;) {
        const char *q = p;
        while (q < e && *q != '"' && *q != '\\')
            q++;
        memcpy(out + o, p, (size_t)(q - p));
        o += (size_t)(q - p);
        if (q >= e)
            return -1;
        if (*q == '"') {
            s->p = q + 1;
            return (long)o;
        }
        if (q + 1 >= e)
            return -1;
        char c = q[1];
        p = q + 2;
        switch (c) {
        case '"': out[o++] = '"'; break;
        case '\\': out[o++] = '\\'; break;
        case '/': out[o++] = '/'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 't': out[o++] = '\t'; break;
        case 'u': {
            uint32_t v, w;
            if (e - p < 4 || hex4(p, &v) != 0)
                return -1;
            p += 4;
            if (v >= 0xD800 && v <= 0xDBFF) {
                if (e - p >= 6 && p[0] == '\\' && p[1] == 'u' && hex4(p + 2, &w) == 0 &&
                    w >= 0xDC00 && w <= 0xDFFF) {
                    v = 0x10000 + ((v - 0xD800) << 10) + (w - 0xDC00);
                    p += 6;
                } else {
                    v = 0xFFFD; /* a lone surrogate, as serde_json refuses: U+FFFD */
                }
            } else if (v >= 0xDC00 && v <= 0xDFFF) {
                v = 0xFFFD;
            }
            o += utf8_put(out + o, v);
            break;
        }
        default:
            return -1;
        }
    }
}

/* Skip one value. 0 or -1. */
static int js_skip(js *s)
{
    int depth = 0;
    js_ws(s);
    do {
        js_ws(s);
        if (s->p >= s->e)
            return -1;
        char c = *s->p;
        if (c == '"') {
            const char *q = s->p + 1;
            for (;;) {
                while (q < s->e && *q != '"' && *q != '\\')
                    q++;
                if (q >= s->e)
                    return -1;
                if (*q == '"')
                    break;
                q += 2;
            }
            s->p = q + 1;
        } else if (c == '{' || c == '[') {
            depth++;
            s->p++;
            continue;
        } else if (c == '}' || c == ']') {
            depth--;
            s->p++;
        } else if (c == ',' || c == ':') {
            s->p++;
            continue;
        } else {
            while (s->p < s->e && *s->p != ',' && *s->p != '}' && *s->p != ']' &&
                   *s->p != ' ' && *s->p != '\n' && *s->p != '\r' && *s->p != '\t')
                s->p++;
        }
    } while (depth > 0);
    return 0;
}

static int js_expect(js *s, char c)
{
    js_ws(s);
    if (s->p < s->e && *s->p == c) {
        s->p++;
        return 0;
    }
    return -1;
}

/* ------------------------------------------------------------ byte-level map
 * GPT-2's printable alphabet for bytes (as in tok_vocab.c). */

typedef struct byte_map {
    int16_t u2b[324];
} byte_map;

static void byte_map_init(byte_map *m)
{
    unsigned n = 0;
    for (unsigned i = 0; i < 324; i++)
        m->u2b[i] = -1;
    for (unsigned b = 0; b < 256; b++) {
        int pr = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        unsigned u = pr ? b : 256 + n++;
        m->u2b[u] = (int16_t)b;
    }
}

/* The byte of the byte-level character at s[*i] (advancing *i past it), or
 * -1 when it is not one. The alphabet is below U+0144: one byte, or two
 * with a lead byte C2..C5. */
static inline int bytelevel_char(const byte_map *m, const uint8_t *s, size_t n, size_t *i)
{
    unsigned c = s[*i];
    if (c < 0x80) {
        *i += 1;
        return m->u2b[c];
    }
    if (c >= 0xC2 && c <= 0xC5 && *i + 1 < n && (s[*i + 1] & 0xC0) == 0x80) {
        unsigned cp = (c & 0x1Fu) << 6 | (s[*i + 1] & 0x3Fu);
        *i += 2;
        return cp < 324 ? m->u2b[cp] : -1;
    }
    return -1;
}

/* In place: byte-level string -> bytes. Returns the byte count, or -1 (s
 * unchanged: the whole string is checked before any byte is written). */
static long bytelevel_decode(const byte_map *m, uint8_t *s, size_t n)
{
    size_t i = 0, o = 0;
    for (size_t j = 0; j < n; j++) /* all one-byte: nothing moves */
        if (s[j] >= 0x80)
            goto multi;
    for (; i < n; i++)
        if (m->u2b[s[i]] < 0)
            return -1;
    return (long)n;
multi:
    while (i < n) /* check first */
        if (bytelevel_char(m, s, n, &i) < 0)
            return -1;
    i = 0;
    while (i < n)
        s[o++] = (uint8_t)bytelevel_char(m, s, n, &i);
    return (long)o;
}

/* ------------------------------------------------------------ loading */

typedef struct span {
    const char *p;
    size_t n;
} span;

typedef struct loader {
    const char *path;
    byte_map bm;
    span normalizer, pre_tokenizer, added_tokens, post_processor, model_vocab, model_merges;
    json_t *model_opts; /* object of the model's members but vocab and merges */
    int have_model;
    /* vocab entries */
    uint8_t *kbuf; /* decoded keys */
    size_t kbuf_len;
    struct vent {
        uint32_t off, len, id;
    } *ve;
    size_t n_ve;
    uint32_t max_id;
    int vocab_done;  /* ve/kbuf read while scanning the top level */
    /* merges read while scanning the top level (merges_done): their
     * unescaped strings A then B back to back in mstr, the lengths in mlen
     * (A, B per merge) */
    int merges_done;
    uint8_t *mstr;
    uint32_t *mlen;
    size_t n_m;
    json_t *added_json;
} loader;

static zp_status scan_vocab(loader *L, span sp, const char **end, zpi_err *err);
static zp_status read_merges(loader *L, span sp, const char **end, zpi_err *err);

static json_t *span_json(const span *s)
{
    if (!s->p)
        return NULL;
    json_error_t je;
    return json_loadb(s->p, s->n, JSON_DECODE_ANY, &je);
}

static const char *jstr(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int jbool(json_t *o, const char *k, int dflt)
{
    json_t *v = json_object_get(o, k);
    if (json_is_boolean(v))
        return json_is_true(v);
    return dflt;
}

/* The vocab or the merges of the model, read in the one pass: the end of
 * the value, or NULL when it does not read (the span is then read again
 * later, for the error in the order of the checks). A repeated member: the
 * last one counts. */
static const char *read_model_data(loader *L, int is_vocab, const char *mv, const char *e)
{
    const char *end = NULL;
    span rest = {mv, (size_t)(e - mv)};
    if (is_vocab) {
        free(L->kbuf);
        free(L->ve);
        L->kbuf = NULL;
        L->ve = NULL;
        L->kbuf_len = L->n_ve = 0;
        L->max_id = 0;
        L->vocab_done = scan_vocab(L, rest, &end, NULL) == ZP_OK;
    } else {
        free(L->mstr);
        free(L->mlen);
        L->mstr = NULL;
        L->mlen = NULL;
        L->n_m = 0;
        L->merges_done = read_merges(L, rest, &end, NULL) == ZP_OK;
    }
    if (end && !(is_vocab ? L->vocab_done : L->merges_done))
        end = NULL;
    return end;
}

/* The model object (s at its '{'): the vocab and merges' spans (read in
 * passing), the other members parsed into L->model_opts. */
static zp_status scan_model(loader *L, js *s, zpi_err *err)
{
    L->have_model = 1;
    L->model_opts = json_object();
    s->p++;
    js_ws(s);
    if (s->p < s->e && *s->p == '}') {
        s->p++;
    } else {
        for (;;) {
            js_ws(s);
            const char *mk = s->p;
            if (js_skip(s) != 0)
                ERR(ZP_ERR_FORMAT, "%s: invalid JSON in \"model\"", L->path);
            long ml = -1;
            uint8_t mkey[64];
            if (s->p - mk <= (long)sizeof mkey) {
                js t = {mk, s->p};
                ml = js_string(&t, mkey);
            }
            if (js_expect(s, ':') != 0)
                ERR(ZP_ERR_FORMAT, "%s: invalid JSON in \"model\"", L->path);
            js_ws(s);
            const char *mv = s->p;
            /* the vocab and the merges are read here, in one pass; when
             * that fails, the span is kept and read again later (for the
             * error, in the order of the checks) */
            int is_vocab = ml == 5 && memcmp(mkey, "vocab", 5) == 0;
            int is_merges = ml == 6 && memcmp(mkey, "merges", 6) == 0;
            const char *end = NULL;
            if (is_vocab || is_merges)
                end = read_model_data(L, is_vocab, mv, s->e);
            if (end)
                s->p = end;
            if (!end && js_skip(s) != 0)
                ERR(ZP_ERR_FORMAT, "%s: invalid JSON in \"model\"", L->path);
            span sp = {mv, (size_t)(s->p - mv)};
            if (is_vocab) {
                L->model_vocab = sp;
            } else if (is_merges) {
                L->model_merges = sp;
            } else if (ml > 0) {
                json_t *v = span_json(&sp);
                if (!v)
                    ERR(ZP_ERR_FORMAT, "%s: invalid JSON in \"model\"", L->path);
                mkey[ml] = 0;
                json_object_set_new(L->model_opts, (const char *)mkey, v);
            }
            js_ws(s);
            if (s->p < s->e && *s->p == ',') {
                s->p++;
                continue;
            }
            if (js_expect(s, '}') != 0)
                ERR(ZP_ERR_FORMAT, "%s: invalid JSON in \"model\"", L->path);
            break;
        }
    }
    return ZP_OK;
}

/* Top level and the model object: record spans. */
static zp_status scan_top(loader *L, const char *buf, size_t len, zpi_err *err)
{
    js s = {buf, buf + len};
    uint8_t key[64];
    if (js_expect(&s, '{') != 0)
        ERR(ZP_ERR_FORMAT, "%s: not a JSON object", L->path);
    js_ws(&s);
    if (s.p < s.e && *s.p == '}')
        ERR(ZP_ERR_FORMAT, "%s: empty JSON object, not a tokenizer.json", L->path);
    for (;;) {
        js_ws(&s);
        if (s.p >= s.e || *s.p != '"')
            ERR(ZP_ERR_FORMAT, "%s: invalid JSON near byte %zu", L->path, (size_t)(s.p - buf));
        /* keys of interest are short; longer ones are skipped */
        const char *ks = s.p;
        if (js_skip(&s) != 0)
            ERR(ZP_ERR_FORMAT, "%s: invalid JSON near byte %zu", L->path, (size_t)(ks - buf));
        long kl = -1;
        if (s.p - ks <= (long)sizeof key) {
            js t = {ks, s.p};
            kl = js_string(&t, key);
        }
        if (js_expect(&s, ':') != 0)
            ERR(ZP_ERR_FORMAT, "%s: invalid JSON near byte %zu", L->path, (size_t)(s.p - buf));
        js_ws(&s);
        const char *vs = s.p;
#define KEY(lit) (kl == (long)sizeof lit - 1 && memcmp(key, lit, sizeof lit - 1) == 0)
        if (KEY("model") && s.p < s.e && *s.p == '{') {
            zp_status st = scan_model(L, &s, err);
            if (st != ZP_OK)
                return st;
        } else {
            if (js_skip(&s) != 0)
                ERR(ZP_ERR_FORMAT, "%s: invalid JSON near byte %zu", L->path,
                    (size_t)(vs - buf));
            span sp = {vs, (size_t)(s.p - vs)};
            if (KEY("normalizer"))
                L->normalizer = sp;
            else if (KEY("pre_tokenizer"))
                L->pre_tokenizer = sp;
            else if (KEY("added_tokens"))
                L->added_tokens = sp;
            else if (KEY("post_processor"))
                L->post_processor = sp;
        }
#undef KEY
        js_ws(&s);
        if (s.p < s.e && *s.p == ',') {
            s.p++;
            continue;
        }
        if (js_expect(&s, '}') != 0)
            ERR(ZP_ERR_FORMAT, "%s: invalid JSON near byte %zu", L->path, (size_t)(s.p - buf));
        break;
    }
    if (!L->have_model)
        ERR(ZP_ERR_FORMAT, "%s: no \"model\" object: not a tokenizer.json", L->path);
    return ZP_OK;
}

/* vocab: {"token": id, ...} -> L->ve, L->kbuf, L->max_id; *end: after
 * the object. */
static zp_status scan_vocab(loader *L, span sp, const char **end, zpi_err *err)
{
    uint32_t *max_id = &L->max_id;
    if (!sp.p)
        ERR(ZP_ERR_FORMAT, "%s: model has no \"vocab\"", L->path);
    js s = {sp.p, sp.p + sp.n};
    L->kbuf = malloc(sp.n + 16);
    size_t cap = sp.n / 8 + 16;
    L->ve = malloc(cap * sizeof *L->ve);
    if (!L->kbuf || !L->ve)
        ERR(ZP_ERR_NOMEM, "out of memory reading '%s'", L->path);
    if (js_expect(&s, '{') != 0)
        ERR(ZP_ERR_FORMAT, "%s: model.vocab is not an object of token -> id (a BPE model's "
            "vocab)", L->path);
    js_ws(&s);
    if (s.p < s.e && *s.p == '}')
        ERR(ZP_ERR_FORMAT, "%s: model.vocab is empty", L->path);
    for (;;) {
        js_ws(&s);
        long kl = js_string(&s, L->kbuf + L->kbuf_len);
        if (kl < 0 || js_expect(&s, ':') != 0)
            ERR(ZP_ERR_FORMAT, "%s: invalid JSON in model.vocab", L->path);
        js_ws(&s);
        uint64_t v = 0;
        const char *d = s.p;
        while (s.p < s.e && *s.p >= '0' && *s.p <= '9' && v < ZPI_TOK_MAX_IDS)
            v = v * 10 + (uint64_t)(*s.p++ - '0');
        if (s.p == d || v >= ZPI_TOK_MAX_IDS - 1 ||
            (s.p < s.e && (*s.p == '.' || *s.p == 'e' || *s.p == 'E')))
            ERR(ZP_ERR_FORMAT, "%s: model.vocab: the id of token '%.*s' is not an integer in "
                "[0, %u)", L->path, (int)(kl > 64 ? 64 : kl), (const char *)L->kbuf + L->kbuf_len,
                ZPI_TOK_MAX_IDS - 1);
        if (L->n_ve == cap) {
            cap *= 2;
            struct vent *n = realloc(L->ve, cap * sizeof *n);
            if (!n)
                ERR(ZP_ERR_NOMEM, "out of memory reading '%s'", L->path);
            L->ve = n;
        }
        L->ve[L->n_ve].off = (uint32_t)L->kbuf_len;
        L->ve[L->n_ve].len = (uint32_t)kl;
        L->ve[L->n_ve].id = (uint32_t)v;
        L->n_ve++;
        L->kbuf_len += (size_t)kl;
        if (v > *max_id)
            *max_id = (uint32_t)v;
        js_ws(&s);
        if (s.p < s.e && *s.p == ',') {
            s.p++;
            continue;
        }
        if (js_expect(&s, '}') != 0)
            ERR(ZP_ERR_FORMAT, "%s: invalid JSON in model.vocab", L->path);
        break;
    }
    *end = s.p;
    return ZP_OK;
}

static uint32_t find_bytes(const zp_tokenizer *t, const uint8_t *p, size_t n)
{
    if (n == 0)
        return ZPI_TOK_NONE;
    return zpi_tok_find(t, p, n, zpi_tok_hash(p, n));
}

/* One merge at s->p: "A B" or ["A", "B"], unescaped into out as A then B.
 * 0, -1 (invalid JSON), -2 (not "A B" or ["A", "B"]). out has room for the
 * escaped text. */
static int merge_item(js *s, uint8_t *out, uint32_t *la, uint32_t *lb)
{
    long a, b;
    if (s->p < s->e && *s->p == '"') {
        long l = js_string(s, out);
        if (l < 0)
            return -1;
        uint8_t *sp1 = l > 0 ? memchr(out, ' ', (size_t)l) : NULL;
        if (!sp1 || sp1 == out || sp1 + 1 == out + l ||
            memchr(sp1 + 1, ' ', (size_t)(out + l - sp1 - 1)))
            return -2;
        a = sp1 - out;
        b = l - a - 1;
        memmove(sp1, sp1 + 1, (size_t)b);
    } else if (s->p < s->e && *s->p == '[') {
        s->p++;
        js_ws(s);
        if ((a = js_string(s, out)) < 0)
            return -1;
        if (js_expect(s, ',') != 0)
            return -2;
        js_ws(s);
        if ((b = js_string(s, out + a)) < 0)
            return -1;
        if (js_expect(s, ']') != 0)
            return -2;
    } else {
        return -1;
    }
    if (a <= 0 || b <= 0)
        return -2;
    *la = (uint32_t)a;
    *lb = (uint32_t)b;
    return 0;
}

/* merges: ["a b", ...] or [["a", "b"], ...] -> L->mstr, L->mlen, L->n_m
 * (rank = position); *end: after the array. */
static zp_status read_merges(loader *L, span sp, const char **end, zpi_err *err)
{
    if (!sp.p)
        ERR(ZP_ERR_FORMAT, "%s: model has no \"merges\"", L->path);
    js s = {sp.p, sp.p + sp.n};
    /* a merge takes at least 6 bytes ("a b",): an upper bound of their number
     * (untouched pages of these allocations cost nothing) */
    size_t cap = sp.n / 6 + 16;
    if (cap > ZPI_TOK_MAX_IDS)
        cap = ZPI_TOK_MAX_IDS;
    L->mlen = malloc(2 * cap * sizeof *L->mlen);
    L->mstr = malloc(sp.n + 64); /* never more than the text */
    L->n_m = 0;
    if (!L->mlen || !L->mstr)
        ERR(ZP_ERR_NOMEM, "out of memory for the merges of '%s'", L->path);
    if (js_expect(&s, '[') != 0)
        ERR(ZP_ERR_FORMAT, "%s: model.merges is not an array", L->path);
    js_ws(&s);
    if (s.p < s.e && *s.p == ']') {
        *end = s.p + 1;
        return ZP_OK;
    }
    size_t bo = 0;
    for (uint32_t rank = 0;; rank++) {
        js_ws(&s);
        const char *item = s.p;
        if (rank >= ZPI_TOK_MAX_IDS - 1)
            ERR(ZP_ERR_FORMAT, "%s: too many merges (at most %u)", L->path,
                ZPI_TOK_MAX_IDS - 1);
        uint32_t la, lb;
        int r = merge_item(&s, L->mstr + bo, &la, &lb);
        if (r == -1)
            ERR(ZP_ERR_FORMAT, "%s: invalid JSON in model.merges (item %u)", L->path, rank);
        if (r == -2)
            ERR(ZP_ERR_FORMAT, "%s: model.merges[%u] (%.40s...) is not \"A B\" or [\"A\", "
                "\"B\"]", L->path, rank, item);
        L->mlen[2 * rank] = la;
        L->mlen[2 * rank + 1] = lb;
        L->n_m = rank + 1;
        bo += (size_t)la + lb;
        js_ws(&s);
        if (s.p < s.e && *s.p == ',') {
            s.p++;
            continue;
        }
        if (js_expect(&s, ']') != 0)
            ERR(ZP_ERR_FORMAT, "%s: invalid JSON in model.merges (item %u)", L->path, rank + 1);
        break;
    }
    *end = s.p;
    return ZP_OK;
}

/* The merges read by read_merges -> t->merge_id and the pair map.
 *
 * The vocabulary and pair maps are megabytes large and every lookup is a
 * cache miss, so merges go in batches: the map slots of a batch's three
 * strings (A, B, AB) are prefetched before the lookups; the pairs are
 * collected, and the pair map, sized for exactly that many, is filled with
 * the slot of a later pair prefetched. */
#define MERGE_BATCH 32 /* merges per batch */
static zp_status scan_merges(loader *L, zp_tokenizer *t, int bytelevel, zpi_err *err)
{
    if (!L->merges_done) {
        const char *end;
        zp_status st = read_merges(L, L->model_merges, &end, err);
        if (st != ZP_OK)
            return st;
    }
    uint32_t n = (uint32_t)L->n_m;
    t->merge_cap = 0;
    t->merge_id = malloc((n ? n : 1) * sizeof *t->merge_id);
    uint64_t *pv = malloc((n ? n : 1) * sizeof *pv);
    zp_status st = ZP_OK;
    if (!t->merge_id || !pv) {
        st = zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for the merges of '%s'", L->path);
        goto out;
    }
    struct {
        uint8_t *p;
        uint32_t la, lb;
        uint64_t ha, hb, hm;
    } q[MERGE_BATCH];
    uint8_t *str = L->mstr;
    for (uint32_t base = 0; base < n; base += MERGE_BATCH) {
        unsigned nb = n - base < MERGE_BATCH ? n - base : MERGE_BATCH;
        for (unsigned k = 0; k < nb; k++) {
            uint32_t la = L->mlen[2 * (base + k)], lb = L->mlen[2 * (base + k) + 1];
            uint8_t *p = str;
            str += (size_t)la + lb;
            if (bytelevel) {
                long a = bytelevel_decode(&L->bm, p, la);
                long b = a > 0 ? bytelevel_decode(&L->bm, p + la, lb) : -1;
                if (a <= 0 || b <= 0) {
                    st = zpi_err_set(err, ZP_ERR_FORMAT, "%s: model.merges[%u]: a token outside "
                                     "the byte-level alphabet", L->path, base + k);
                    goto out;
                }
                memmove(p + a, p + la, (size_t)b);
                la = (uint32_t)a;
                lb = (uint32_t)b;
            }
            q[k].p = p;
            q[k].la = la;
            q[k].lb = lb;
            q[k].ha = zpi_tok_hash(p, la);
            q[k].hb = zpi_tok_hash(p + la, lb);
            q[k].hm = zpi_tok_hash(p, (size_t)la + lb);
            __builtin_prefetch(&t->vmap[q[k].ha & t->vmap_mask]);
            __builtin_prefetch(&t->vmap[q[k].hb & t->vmap_mask]);
            __builtin_prefetch(&t->vmap[q[k].hm & t->vmap_mask]);
        }
        for (unsigned k = 0; k < nb; k++) {
            uint32_t rank = base + k;
            const uint8_t *p = q[k].p;
            uint32_t ia = zpi_tok_find(t, p, q[k].la, q[k].ha);
            uint32_t ib = zpi_tok_find(t, p + q[k].la, q[k].lb, q[k].hb);
            uint32_t im = zpi_tok_find(t, p, (size_t)q[k].la + q[k].lb, q[k].hm);
            if (ia == ZPI_TOK_NONE || ib == ZPI_TOK_NONE || im == ZPI_TOK_NONE) {
                st = zpi_err_set(err, ZP_ERR_FORMAT, "%s: model.merges[%u] uses or makes a "
                                 "token that is not in model.vocab", L->path, rank);
                goto out;
            }
            t->merge_id[rank] = im;
            pv[rank] = zpi_tok_pair_key(ia, ib) << ZPI_TOK_ID_BITS | rank;
        }
    }
    t->merge_cap = n;
    zpi_tok_pack_merges(t);
    if ((st = zpi_tok_build_pairs_begin(t, n, err)) != ZP_OK)
        goto out;
    for (uint32_t i = 0; i < n; i++) {
        if (i + 16 < n)
            __builtin_prefetch(&t->pmap[zpi_tok_pair_home(t, pv[i + 16] >> ZPI_TOK_ID_BITS)], 1);
        zpi_tok_build_pair_insert(t, pv[i]);
    }
out:
    free(pv);
    return st;
}

/* ------------------------------------------------------------ components */

typedef zp_status (*component_parser)(struct zpi_hf *h, json_t *n, const char *path,
                                      zpi_err *err);

/* What the normalizer and pre_tokenizer parsers share: null is none, a
 * "type" is required, a Sequence is its `members` parsed in order by `one`.
 * *type is the type left for the caller to parse, NULL when n is done. */
static zp_status component_head(struct zpi_hf *h, json_t *n, const char *path, zpi_err *err,
                                const char *what, const char *members, component_parser one,
                                const char **type)
{
    *type = NULL;
    if (json_is_null(n))
        return ZP_OK;
    const char *t = jstr(n, "type");
    if (!t)
        ERR(ZP_ERR_FORMAT, "%s: %s without a \"type\"", path, what);
    if (strcmp(t, "Sequence") == 0) {
        json_t *a = json_object_get(n, members);
        if (!json_is_array(a))
            ERR(ZP_ERR_FORMAT, "%s: %s Sequence without \"%s\"", path, what, members);
        size_t i;
        json_t *v;
        json_array_foreach(a, i, v)
        {
            zp_status st = one(h, v, path, err);
            if (st != ZP_OK)
                return st;
        }
        return ZP_OK;
    }
    *type = t;
    return ZP_OK;
}

static zp_status parse_norm(struct zpi_hf *h, json_t *n, const char *path, zpi_err *err)
{
    const char *type;
    zp_status head = component_head(h, n, path, err, "normalizer", "normalizers", parse_norm, &type);
    if (head != ZP_OK || !type)
        return head;
    hf_norm nm;
    memset(&nm, 0, sizeof nm);
    if (strcmp(type, "Prepend") == 0) {
        const char *p = jstr(n, "prepend");
        if (!p)
            ERR(ZP_ERR_FORMAT, "%s: normalizer Prepend without \"prepend\"", path);
        nm.kind = HF_N_PREPEND;
        nm.a = strdup(p);
        nm.alen = strlen(p);
    } else if (strcmp(type, "Replace") == 0) {
        json_t *pat = json_object_get(n, "pattern");
        const char *c = jstr(n, "content");
        const char *s = json_is_object(pat) ? jstr(pat, "String") : NULL;
        if (json_is_object(pat) && json_object_get(pat, "Regex"))
            ERR(ZP_ERR_FORMAT, "%s: normalizer type 'Replace' with a Regex pattern is not "
                "supported (only a String pattern)", path);
        if (!s || !c)
            ERR(ZP_ERR_FORMAT, "%s: normalizer Replace needs a String pattern and a content",
                path);
        if (!*s)
            ERR(ZP_ERR_FORMAT, "%s: normalizer Replace with an empty pattern is not supported",
                path);
        nm.kind = HF_N_REPLACE;
        nm.a = strdup(s);
        nm.alen = strlen(s);
        nm.b = strdup(c);
        nm.blen = strlen(c);
    } else if (strcmp(type, "NFC") == 0) {
        nm.kind = HF_N_NFC;
    } else if (strcmp(type, "NFKC") == 0) {
        nm.kind = HF_N_NFKC;
    } else if (strcmp(type, "NFD") == 0) {
        nm.kind = HF_N_NFD;
    } else if (strcmp(type, "NFKD") == 0) {
        nm.kind = HF_N_NFKD;
    } else {
        ERR(ZP_ERR_FORMAT, "%s: normalizer type '%s' is not supported (supported: Sequence, "
            "Prepend, Replace with a String, NFC, NFKC, NFD, NFKD)", path, type);
    }
    if (nm.kind >= HF_N_NFC)
        h->unicode_norm = 1;
    hf_norm *nn = realloc(h->norm, (h->n_norm + 1) * sizeof *nn);
    if (!nn) {
        free(nm.a);
        free(nm.b);
        ERR(ZP_ERR_NOMEM, "out of memory");
    }
    h->norm = nn;
    h->norm[h->n_norm++] = nm;
    return ZP_OK;
}

static int parse_behavior(const char *b)
{
    if (!b)
        return -1;
    if (strcmp(b, "Removed") == 0)
        return HF_B_REMOVED;
    if (strcmp(b, "Isolated") == 0)
        return HF_B_ISOLATED;
    if (strcmp(b, "MergedWithPrevious") == 0)
        return HF_B_MERGED_PREV;
    if (strcmp(b, "MergedWithNext") == 0)
        return HF_B_MERGED_NEXT;
    if (strcmp(b, "Contiguous") == 0)
        return HF_B_CONTIGUOUS;
    return -1;
}

/* A Split pre-tokenizer (n) into *p. */
static zp_status parse_split(hf_pt *p, json_t *n, const char *path, zpi_err *err)
{
    json_t *pat = json_object_get(n, "pattern");
    const char *re = json_is_object(pat) ? jstr(pat, "Regex") : NULL;
    const char *str = json_is_object(pat) ? jstr(pat, "String") : NULL;
    p->behavior = parse_behavior(jstr(n, "behavior"));
    p->invert = jbool(n, "invert", 0);
    if (p->behavior < 0)
        ERR(ZP_ERR_FORMAT, "%s: pre_tokenizer Split: behavior '%s' is not supported", path,
            jstr(n, "behavior") ? jstr(n, "behavior") : "(none)");
    if (re) {
        p->kind = HF_P_SPLIT_REGEX;
        zp_status st = zpi_pretok_create(re, &p->re, err);
        if (st != ZP_OK) {
            zpi_err_prefix(err, "%s: pre_tokenizer Split", path);
            return st;
        }
    } else if (str) {
        if (!*str)
            ERR(ZP_ERR_FORMAT, "%s: pre_tokenizer Split with an empty String pattern is not "
                "supported", path);
        if (p->invert)
            ERR(ZP_ERR_FORMAT, "%s: pre_tokenizer Split with a String pattern and invert: "
                "true is not supported", path);
        p->kind = HF_P_SPLIT_STRING;
        p->str = strdup(str);
        p->slen = strlen(str);
    } else {
        ERR(ZP_ERR_FORMAT, "%s: pre_tokenizer Split needs a String or Regex pattern", path);
    }
    return ZP_OK;
}

/* A Metaspace pre-tokenizer (n) into *p. */
static zp_status parse_metaspace(hf_pt *p, json_t *n, const char *path, zpi_err *err)
{
    p->kind = HF_P_METASPACE;
    const char *r = jstr(n, "replacement");
    if (!r)
        r = "\xE2\x96\x81";
    uint32_t cp;
    size_t rl = strlen(r);
    if (rl == 0 || rl > 4 || zpi_utf8_decode((const uint8_t *)r, rl, &cp) != rl)
        ERR(ZP_ERR_FORMAT, "%s: pre_tokenizer Metaspace: replacement must be one character",
            path);
    memcpy(p->rep, r, rl);
    p->replen = rl;
    const char *sch = jstr(n, "prepend_scheme");
    if (sch) {
        if (strcmp(sch, "always") == 0)
            p->scheme = HF_PREPEND_ALWAYS;
        else if (strcmp(sch, "first") == 0)
            p->scheme = HF_PREPEND_FIRST;
        else if (strcmp(sch, "never") == 0)
            p->scheme = HF_PREPEND_NEVER;
        else
            ERR(ZP_ERR_FORMAT, "%s: pre_tokenizer Metaspace: prepend_scheme '%s' is not "
                "supported", path, sch);
    } else {
        p->scheme = jbool(n, "add_prefix_space", 1) ? HF_PREPEND_ALWAYS : HF_PREPEND_NEVER;
    }
    p->split = jbool(n, "split", 1);
    return ZP_OK;
}

static zp_status parse_pt(struct zpi_hf *h, json_t *n, const char *path, zpi_err *err)
{
    const char *type;
    zp_status head = component_head(h, n, path, err, "pre_tokenizer", "pretokenizers", parse_pt, &type);
    if (head != ZP_OK || !type)
        return head;
    hf_pt p;
    memset(&p, 0, sizeof p);
    if (strcmp(type, "Split") == 0) {
        zp_status st = parse_split(&p, n, path, err);
        if (st != ZP_OK)
            return st;
    } else if (strcmp(type, "ByteLevel") == 0) {
        p.kind = HF_P_BYTELEVEL;
        p.add_prefix_space = jbool(n, "add_prefix_space", 1);
        if (jbool(n, "use_regex", 1)) {
            zp_status st = zpi_pretok_create_known("gpt2", &p.re, err);
            if (st != ZP_OK)
                return st;
        }
    } else if (strcmp(type, "Digits") == 0) {
        p.kind = HF_P_DIGITS;
        p.individual = jbool(n, "individual_digits", 0);
    } else if (strcmp(type, "Metaspace") == 0) {
        zp_status st = parse_metaspace(&p, n, path, err);
        if (st != ZP_OK)
            return st;
    } else {
        ERR(ZP_ERR_FORMAT, "%s: pre_tokenizer type '%s' is not supported (supported: Sequence, "
            "Split, ByteLevel, Digits, Metaspace)", path, type);
    }
    hf_pt *np = realloc(h->pt, (h->n_pt + 1) * sizeof *np);
    if (!np) {
        zpi_pretok_destroy(p.re);
        free(p.str);
        ERR(ZP_ERR_NOMEM, "out of memory");
    }
    h->pt = np;
    h->pt[h->n_pt++] = p;
    return ZP_OK;
}

/* ------------------------------------------------------------ added tokens */

static const struct zpi_hf *g_sort_hf; /* qsort context (load is single-threaded per call) */

static int cmp_added(const void *a, const void *b, void *ctx)
{
    const struct zpi_hf *h = ctx;
    uint32_t ia = *(const uint32_t *)a, ib = *(const uint32_t *)b;
    const hf_added *x = &h->added[ia], *y = &h->added[ib];
    size_t n = x->mlen < y->mlen ? x->mlen : y->mlen;
    int c = memcmp(x->m, y->m, n);
    if (c)
        return c;
    if (x->mlen != y->mlen)
        return x->mlen < y->mlen ? -1 : 1;
    /* the same pattern (normalized tokens may share one): the first of
     * tokenizers' pattern order wins, special tokens then the others, each
     * in the file's order */
    if (x->special != y->special)
        return x->special ? -1 : 1;
    return ia < ib ? -1 : ia > ib;
}

/* Each added token's pattern (hf_added.m): its content, or for a
 * normalized token the content through the normalizer. */
static zp_status added_patterns(struct zpi_hf *h, const char *fpath, zpi_err *err)
{
    size_t cap = 0, *off = calloc(h->n_added + 1, sizeof *off);
    if (!off)
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < h->n_added; i++) {
        hf_added *a = &h->added[i];
        a->m = a->s;
        a->mlen = a->len;
        if (!a->normalized || h->n_norm == 0)
            continue;
        char *q;
        size_t qn;
        if (zpi_hf_normalize_string(h, a->s, a->len, &q, &qn) != 0) {
            free(off);
            return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory");
        }
        if (qn == 0 || qn > UINT32_MAX) {
            free(q);
            free(off);
            return zpi_err_set(err, ZP_ERR_FORMAT, "%s: added token '%s' (normalized) is "
                               "empty after the normalizer: not supported", fpath, a->s);
        }
        if (h->added_nblob_len + qn + 1 > cap) {
            size_t c2 = (cap ? cap * 2 : 256) + qn + 1;
            char *nb = realloc(h->added_nblob, c2);
            if (!nb) {
                free(q);
                free(off);
                return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory");
            }
            h->added_nblob = nb;
            cap = c2;
        }
        memcpy(h->added_nblob + h->added_nblob_len, q, qn + 1);
        off[i] = h->added_nblob_len + 1; /* 0: not normalized */
        a->mlen = (uint32_t)qn;
        h->added_nblob_len += qn + 1;
        free(q);
    }
    for (size_t i = 0; i < h->n_added; i++)
        if (off[i])
            h->added[i].m = h->added_nblob + off[i] - 1;
    free(off);
    return ZP_OK;
}

static zp_status build_matcher(struct zpi_hf *h, hf_matcher *m, int normalized)
{
    (void)g_sort_hf;
    uint32_t n = 0;
    for (size_t i = 0; i < h->n_added; i++)
        n += h->added[i].normalized == normalized;
    if (!n)
        return ZP_OK;
    m->idx = malloc(n * sizeof *m->idx);
    if (!m->idx)
        return ZP_ERR_NOMEM;
    m->one_first = -2; /* none yet */
    for (size_t i = 0; i < h->n_added; i++)
        if (h->added[i].normalized == normalized) {
            int c = (uint8_t)h->added[i].m[0];
            m->idx[m->n++] = (uint32_t)i;
            m->first[c] = 1;
            m->n_act += !h->added[i].special || h->match_special;
            m->one_first = m->one_first == -2 || m->one_first == c ? c : -1;
        }
    qsort_r(m->idx, m->n, sizeof *m->idx, cmp_added, h);
    return ZP_OK;
}

/* ------------------------------------------------------------ Unicode normalization table */

static zp_status build_nf_table(struct zpi_hf *h, zpi_err *err)
{
    int compat = 0, compose = 0;
    for (size_t i = 0; i < h->n_norm; i++) {
        if (h->norm[i].kind == HF_N_NFKC || h->norm[i].kind == HF_N_NFKD)
            compat = 1;
        if (h->norm[i].kind == HF_N_NFC || h->norm[i].kind == HF_N_NFKC)
            compose = 1;
    }
    h->nf_unsafe = calloc(0x110000 / 8, 1);
    if (!h->nf_unsafe)
        ERR(ZP_ERR_NOMEM, "out of memory");
#define MARK(c) (h->nf_unsafe[(c) >> 3] |= (uint8_t)(1u << ((c) & 7)))
    for (uint32_t c = 0x80; c < 0x110000; c++) {
        if (c >= 0xD800 && c <= 0xDFFF)
            continue;
        const utf8proc_property_t *pr = utf8proc_get_property((utf8proc_int32_t)c);
        if (pr->combining_class != 0) {
            MARK(c);
            continue;
        }
        if (pr->decomp_seqindex != UINT16_MAX) {
            /* mark when the character changes, and mark the later characters
             * of its decomposition: they may compose with what precedes */
            utf8proc_int32_t d[32];
            int opts = UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0);
            utf8proc_ssize_t k = utf8proc_decompose_char((utf8proc_int32_t)c, d, 32, opts, NULL);
            if (k > 1 || (k == 1 && (uint32_t)d[0] != c)) {
                if (!(compose && k >= 1)) {
                    MARK(c);
                } else {
                    uint8_t in[4], *outp = NULL;
                    size_t il = utf8_put(in, c);
                    utf8proc_ssize_t ol = utf8proc_map(in, (utf8proc_ssize_t)il, &outp,
                                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE |
                                                          (compat ? UTF8PROC_COMPAT : 0));
                    if (ol != (utf8proc_ssize_t)il || memcmp(outp, in, il) != 0)
                        MARK(c);
                    free(outp);
                }
                if (compose)
                    for (utf8proc_ssize_t j = 1; j < k && j < 32; j++)
                        if (d[j] >= 0 && d[j] < 0x110000)
                            MARK((uint32_t)d[j]);
            }
        }
    }
    /* Hangul: leading consonants, vowels and trailing consonants compose */
    for (uint32_t c = 0x1100; c <= 0x11FF; c++)
        MARK(c);
    for (uint32_t c = 0xA960; c <= 0xA97F; c++)
        MARK(c);
    for (uint32_t c = 0xD7B0; c <= 0xD7FF; c++)
        MARK(c);
#undef MARK
    return ZP_OK;
}

/* ------------------------------------------------------------ config */

/* The id of a token given by its content (added tokens first). */
static int32_t token_id(const struct zpi_hf *h, const zp_tokenizer *t, const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < h->n_added; i++)
        if (h->added[i].len == n && memcmp(h->added[i].s, s, n) == 0)
            return (int32_t)h->added[i].id;
    if (!h->bytelevel) {
        uint32_t id = find_bytes(t, (const uint8_t *)s, n);
        if (id != ZPI_TOK_NONE)
            return (int32_t)id;
    }
    return -1;
}

static const char *config_token(json_t *cfg, const char *key)
{
    json_t *v = json_object_get(cfg, key);
    if (json_is_string(v))
        return json_string_value(v);
    if (json_is_object(v))
        return jstr(v, "content");
    return NULL;
}

static zp_status read_config(struct zpi_hf *h, zp_tokenizer *t, const char *dir, json_t *post,
                             zpi_err *err)
{
    char cpath[4096];
    zpi_fmt(cpath, sizeof cpath, "%s/tokenizer_config.json", dir);
    json_t *cfg = NULL;
    struct stat sb;
    if (stat(cpath, &sb) == 0) {
        char *buf;
        size_t len;
        zp_status st = read_file(cpath, &buf, &len, err);
        if (st != ZP_OK)
            return st;
        json_error_t je;
        cfg = json_loadb(buf, len, JSON_DECODE_INT_AS_REAL, &je);
        free(buf);
        if (!json_is_object(cfg)) {
            json_decref(cfg);
            ERR(ZP_ERR_FORMAT, "%s:%d: invalid JSON: %s", cpath, je.line, je.text);
        }
    }
    t->eot = -1;
    t->bos = -1;
    if (cfg) {
        const char *eos = config_token(cfg, "eos_token");
        if (eos) {
            t->eot = token_id(h, t, eos);
            if (t->eot < 0) {
                json_decref(cfg);
                ERR(ZP_ERR_FORMAT, "%s: eos_token '%s' is not a token of the tokenizer", cpath,
                    eos);
            }
        }
        const char *bos = config_token(cfg, "bos_token");
        json_t *add = json_object_get(cfg, "add_bos_token");
        if (json_is_boolean(add)) {
            if (json_is_true(add)) {
                if (!bos || (t->bos = token_id(h, t, bos)) < 0) {
                    json_decref(cfg);
                    ERR(ZP_ERR_FORMAT, "%s: add_bos_token is true but bos_token %s%s%s is not a "
                        "token of the tokenizer", cpath, bos ? "'" : "", bos ? bos : "(none)",
                        bos ? "'" : "");
                }
            }
            json_decref(cfg);
            return ZP_OK;
        }
        json_decref(cfg);
    }
    /* the config is silent about BOS: the post_processor's template */
    if (t->eot < 0) { /* no config: a special token with a usual end-of-text name */
        static const char *const names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"};
        for (size_t i = 0; i < sizeof names / sizeof *names && t->eot < 0; i++)
            for (size_t k = 0; k < h->n_added && t->eot < 0; k++)
                if (h->added[k].special && strcmp(h->added[k].s, names[i]) == 0)
                    t->eot = (int32_t)h->added[k].id;
    }
    if (json_is_object(post)) {
        const char *ty = jstr(post, "type");
        json_t *single = json_object_get(post, "single");
        if (ty && strcmp(ty, "TemplateProcessing") == 0 && json_is_array(single) &&
            json_array_size(single) > 0) {
            json_t *sp = json_object_get(json_array_get(single, 0), "SpecialToken");
            const char *name = sp ? jstr(sp, "id") : NULL;
            json_t *ids = NULL;
            json_t *stoks = json_object_get(post, "special_tokens");
            if (name && stoks)
                ids = json_object_get(json_object_get(stoks, name), "ids");
            if (json_is_array(ids) && json_array_size(ids) == 1 &&
                json_is_integer(json_array_get(ids, 0)))
                t->bos = (int32_t)json_integer_value(json_array_get(ids, 0));
            else if (name)
                t->bos = token_id(h, t, name);
        }
    }
    return ZP_OK;
}

/* ------------------------------------------------------------ the model */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* SentencePiece style: the tables hf_encode.c needs besides the maps. */
static zp_status sp_finish(struct zpi_hf *h, zp_tokenizer *t, zpi_err *err)
{
    static const char hexd[] = "0123456789ABCDEF";
    h->all_byte_toks = 1;
    for (unsigned b = 0; b < 256; b++) {
        char s[6] = {'<', '0', 'x', hexd[b >> 4], hexd[b & 15], '>'};
        h->byte_tok[b] = find_bytes(t, (const uint8_t *)s, 6);
        if (h->byte_tok[b] == ZPI_TOK_NONE)
            h->all_byte_toks = 0;
    }
    for (unsigned c = 0; c < 128; c++) {
        uint8_t ch = (uint8_t)c;
        h->ascii_id[c] = find_bytes(t, &ch, 1);
    }
    /* word split at U+2581 */
    static const uint8_t WS[3] = {0xE2, 0x96, 0x81};
    h->ws_split = find_bytes(t, WS, 3) != ZPI_TOK_NONE;
    size_t cap = 0;
    for (uint32_t id = 0; id < t->n_ids && h->ws_split; id++) {
        const zpi_tok_span *sp = &t->span[id];
        if (sp->off == ZPI_TOK_NONE || sp->len < 4)
            continue;
        const uint8_t *p = t->blob + sp->off;
        size_t n = sp->len, i = 0;
        uint32_t prev = 0x2581;
        while (i < n) {
            uint32_t cp;
            size_t l = zpi_utf8_decode(p + i, n - i, &cp);
            if (!l)
                break;
            if (cp == 0x2581 && prev != 0x2581) {
                if (h->n_ws_bad == cap) {
                    cap = cap ? cap * 2 : 16;
                    uint32_t *nb = realloc(h->ws_bad, cap * sizeof *nb);
                    if (!nb)
                        ERR(ZP_ERR_NOMEM, "out of memory");
                    h->ws_bad = nb;
                }
                h->ws_bad[h->n_ws_bad++] = prev;
            }
            prev = cp;
            i += l;
        }
    }
    if (h->n_ws_bad) {
        qsort(h->ws_bad, h->n_ws_bad, sizeof *h->ws_bad, cmp_u32);
        size_t k = 0;
        for (size_t i = 0; i < h->n_ws_bad; i++)
            if (k == 0 || h->ws_bad[k - 1] != h->ws_bad[i])
                h->ws_bad[k++] = h->ws_bad[i];
        h->n_ws_bad = k;
        /* a byte token <0xXX> and the unk token end with '>' */
        h->ws_bad_unknown = bsearch(&(uint32_t){'>'}, h->ws_bad, k, sizeof *h->ws_bad,
                                    cmp_u32) != NULL;
        if (h->unk_id != ZPI_TOK_NONE) {
            const zpi_tok_span *u = &t->span[h->unk_id];
            uint32_t last = t->blob[u->off + u->len - 1];
            if (last < 0x80 && bsearch(&last, h->ws_bad, k, sizeof *h->ws_bad, cmp_u32))
                h->ws_bad_unknown = 1;
            if (last >= 0x80)
                h->ws_bad_unknown = 1;
        }
    }
    uint32_t maxlen = 0;
    for (uint32_t id = 0; id < t->n_ids; id++)
        if (t->span[id].off != ZPI_TOK_NONE && t->span[id].len > maxlen)
            maxlen = t->span[id].len;
    t->max_token_len = maxlen;
    return ZP_OK;
}

static void dirname_of(const char *path, char *dir, size_t cap)
{
    zpi_fmt(dir, cap, "%s", path);
    char *sl = strrchr(dir, '/');
    if (sl == dir)
        dir[1] = '\0';
    else if (sl)
        *sl = '\0';
    else
        zpi_fmt(dir, cap, ".");
}

/* The ids bound: every step's growth of the text in bytes (a token is at
 * least one byte of the final pieces, or one added token of at least one
 * byte of the text). */
static void compute_bound(struct zpi_hf *h)
{
    size_t f = 3, extra = 0; /* invalid UTF-8: one byte -> U+FFFD, 3 bytes */
    for (size_t i = 0; i < h->n_norm; i++) {
        const hf_norm *n = &h->norm[i];
        switch (n->kind) {
        case HF_N_PREPEND: f += n->alen; extra += n->alen; break;
        case HF_N_REPLACE: f *= (n->blen + n->alen - 1) / n->alen > 1 ? (n->blen + n->alen - 1) / n->alen : 1; break;
        case HF_N_NFC:
        case HF_N_NFD: f *= 3; break;
        default: f *= 11; break;
        }
    }
    for (size_t i = 0; i < h->n_pt; i++) {
        const hf_pt *p = &h->pt[i];
        if (p->kind == HF_P_METASPACE) {
            f = f * p->replen + p->replen;
            extra += p->replen;
        } else if (p->kind == HF_P_BYTELEVEL && p->add_prefix_space) {
            f += 1;
            extra += 1;
        }
    }
    h->max_factor = f;
    h->max_extra = extra + 1;
}

/* The model's options: type BPE, no dropout, no prefix or suffix;
 * ignore_merges, byte_fallback, fuse_unk; *unk: unk_token or NULL. */
static zp_status model_options(struct zpi_hf *h, json_t *mo, int has_merges, const char *fpath,
                               const char **unk, zpi_err *err)
{
    const char *mtype = jstr(mo, "type");
    if (mtype && strcmp(mtype, "BPE") != 0)
        return zpi_err_set(err, ZP_ERR_FORMAT, "%s: model type '%s' is not supported (only BPE)",
                           fpath, mtype);
    if (!mtype && !has_merges)
        return zpi_err_set(err, ZP_ERR_FORMAT, "%s: a model without \"type\" or \"merges\" is not "
                           "supported (only BPE)", fpath);
    json_t *dr = json_object_get(mo, "dropout");
    if (dr && !json_is_null(dr) && !(json_is_number(dr) && json_number_value(dr) == 0.0))
        return zpi_err_set(err, ZP_ERR_FORMAT, "%s: model BPE with dropout is not supported "
                           "(encoding would be random)", fpath);
    const char *csp = jstr(mo, "continuing_subword_prefix");
    const char *ews = jstr(mo, "end_of_word_suffix");
    if ((csp && *csp) || (ews && *ews))
        return zpi_err_set(err, ZP_ERR_FORMAT, "%s: model BPE with %s '%s' is not supported",
                           fpath, csp && *csp ? "continuing_subword_prefix" : "end_of_word_suffix",
                           csp && *csp ? csp : ews);
    h->ignore_merges = jbool(mo, "ignore_merges", 0);
    h->byte_fallback = jbool(mo, "byte_fallback", 0);
    h->fuse_unk = jbool(mo, "fuse_unk", 0);
    *unk = jstr(mo, "unk_token");
    return ZP_OK;
}

/* The normalizer and the pre-tokenizer (jn, jp: their JSON, or NULL);
 * whether the model is byte-level. */
static zp_status components(struct zpi_hf *h, const loader *L, json_t *jn, json_t *jp,
                            json_t *ja, const char *fpath, zpi_err *err)
{
    if ((L->normalizer.p && !jn) || (L->pre_tokenizer.p && !jp) || (L->added_tokens.p && !ja))
        return zpi_err_set(err, ZP_ERR_FORMAT, "%s: invalid JSON", fpath);
    zp_status st;
    if (jn && (st = parse_norm(h, jn, fpath, err)) != ZP_OK)
        return st;
    if (jp && (st = parse_pt(h, jp, fpath, err)) != ZP_OK)
        return st;
    for (size_t i = 0; i < h->n_pt; i++) {
        if (h->pt[i].kind == HF_P_BYTELEVEL) {
            if (i + 1 != h->n_pt)
                return zpi_err_set(err, ZP_ERR_FORMAT, "%s: pre_tokenizer ByteLevel followed by "
                                   "other pre-tokenizers is not supported", fpath);
            h->bytelevel = 1;
        }
    }
    if (h->bytelevel && h->byte_fallback)
        return zpi_err_set(err, ZP_ERR_FORMAT, "%s: model BPE with byte_fallback and a ByteLevel "
                           "pre_tokenizer is not supported", fpath);
    return ZP_OK;
}

/* added_tokens (ja: its JSON, or NULL) -> h->added; *max_id grows to
 * their largest id. */
static zp_status read_added(struct zpi_hf *h, json_t *ja, const char *fpath, uint32_t *max_id,
                            zpi_err *err)
{
    size_t blob_need = 0;
    if (ja && !json_is_array(ja))
        return zpi_err_set(err, ZP_ERR_FORMAT, "%s: added_tokens is not an array", fpath);
    if (ja) {
        size_t i;
        json_t *v;
        json_array_foreach(ja, i, v)
        {
            json_t *idv = json_object_get(v, "id");
            const char *c = jstr(v, "content");
            if (!json_is_integer(idv) || json_integer_value(idv) < 0 ||
                json_integer_value(idv) >= ZPI_TOK_MAX_IDS - 1 || !c || !*c)
                return zpi_err_set(err, ZP_ERR_FORMAT, "%s: added_tokens[%zu] needs an \"id\" "
                                   "and a non-empty \"content\"", fpath, i);
            blob_need += strlen(c) + 1;
            if ((uint32_t)json_integer_value(idv) > *max_id)
                *max_id = (uint32_t)json_integer_value(idv);
        }
        h->added = calloc(json_array_size(ja) + 1, sizeof *h->added);
        h->added_blob = malloc(blob_need + 1);
        if (!h->added || !h->added_blob)
            return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory");
        size_t bo = 0;
        json_array_foreach(ja, i, v)
        {
            const char *c = jstr(v, "content");
            size_t cl = strlen(c);
            hf_added *a = &h->added[h->n_added++];
            memcpy(h->added_blob + bo, c, cl);
            a->s = h->added_blob + bo;
            a->len = (uint32_t)cl;
            h->added_blob[bo + cl] = '\0';
            bo += cl + 1;
            a->id = (uint32_t)json_integer_value(json_object_get(v, "id"));
            a->special = (uint8_t)jbool(v, "special", 0);
            a->lstrip = (uint8_t)jbool(v, "lstrip", 0);
            a->rstrip = (uint8_t)jbool(v, "rstrip", 0);
            a->single_word = (uint8_t)jbool(v, "single_word", 0);
            a->normalized = (uint8_t)jbool(v, "normalized", !a->special);
        }
    }
    return ZP_OK;
}

/* The vocabulary's tokens into t's tables (byte-level spelling decoded
 * when the model is byte-level). */
static zp_status add_vocab(zp_tokenizer *t, const struct zpi_hf *h, loader *L, const char *fpath,
                           zpi_err *err)
{
    /* the map's slots are a cache miss each: the slot of the entry PF_AHEAD
     * ahead is prefetched (its bytes decoded then) */
#define PF_AHEAD 8
#define NOT_IN_MAP 0x80000000u /* in ve[].id: outside the byte-level alphabet */
    for (size_t j = 0; j < L->n_ve + PF_AHEAD; j++) {
        if (j < L->n_ve) {
            uint8_t *k = L->kbuf + L->ve[j].off;
            size_t kl = L->ve[j].len;
            if (h->bytelevel) {
                long bl = bytelevel_decode(&L->bm, k, kl);
                if (bl > 0)
                    L->ve[j].len = (uint32_t)bl;
                else
                    L->ve[j].id |= NOT_IN_MAP; /* an added token: kept as is */
            }
            if (!(L->ve[j].id & NOT_IN_MAP) && L->ve[j].len > 0)
                __builtin_prefetch(&t->vmap[zpi_tok_hash(k, L->ve[j].len) & t->vmap_mask]);
        }
        if (j < PF_AHEAD)
            continue;
        size_t i = j - PF_AHEAD;
        uint8_t *k = L->kbuf + L->ve[i].off;
        size_t kl = L->ve[i].len;
        int in_map = !(L->ve[i].id & NOT_IN_MAP);
        uint32_t id = L->ve[i].id & ~NOT_IN_MAP;
        if (kl == 0)
            return zpi_err_set(err, ZP_ERR_FORMAT, "%s: model.vocab has an empty token (id %u)",
                               fpath, id);
        if (zpi_tok_build_add(t, id, k, kl, in_map, err) != ZP_OK)
            return zpi_err_prefix(err, "%s: model.vocab", fpath);
    }
    return ZP_OK;
}
#undef PF_AHEAD
#undef NOT_IN_MAP

/* The added tokens that model.vocab lacks into t's tables; unk's id. */
static zp_status add_added(zp_tokenizer *t, struct zpi_hf *h, const char *unk, const char *fpath,
                           zpi_err *err)
{
    for (size_t i = 0; i < h->n_added; i++) {
        hf_added *a = &h->added[i];
        if (t->span[a->id].off != ZPI_TOK_NONE) {
            const zpi_tok_span *sp = &t->span[a->id];
            if (!h->bytelevel &&
                (sp->len != a->len || memcmp(t->blob + sp->off, a->s, a->len) != 0))
                return zpi_err_set(err, ZP_ERR_FORMAT, "%s: added token '%s' has id %u, which "
                                   "model.vocab gives to another token", fpath, a->s, a->id);
            continue;
        }
        if (zpi_tok_build_add(t, a->id, (const uint8_t *)a->s, a->len, 0, err) != ZP_OK)
            return zpi_err_prefix(err, "%s: added_tokens", fpath);
    }
    if (unk) {
        uint32_t u = find_bytes(t, (const uint8_t *)unk, strlen(unk));
        if (u == ZPI_TOK_NONE)
            return zpi_err_set(err, ZP_ERR_FORMAT, "%s: model.unk_token '%s' is not in "
                               "model.vocab", fpath, unk);
        h->unk_id = u;
    }
    return ZP_OK;
}

/* The model's kind and its derived tables: byte-level (whether the core
 * loop runs the pre-tokenizer) or SentencePiece style. */
static zp_status finish_model(zp_tokenizer *t, struct zpi_hf *h, const char *fpath, zpi_err *err)
{
    if (h->bytelevel) {
        t->kind = ZPI_TOK_KIND_BYTE_BPE;
        t->mode = ZPI_TOK_HF_MERGES;
        /* the core loop runs the pre-tokenizer itself when it is one pattern
         * that covers the text */
        const hf_pt *p0 = &h->pt[0];
        if (h->n_pt == 1 && p0->re && !p0->add_prefix_space) {
            h->core_fast = 1;
        } else if (h->n_pt == 2 && p0->kind == HF_P_SPLIT_REGEX && !h->pt[1].re &&
                   !h->pt[1].add_prefix_space &&
                   ((p0->behavior == HF_B_ISOLATED && !p0->invert) ||
                    (p0->behavior == HF_B_REMOVED && p0->invert &&
                     zpi_pretok_get_kind(p0->re) != ZPI_PRETOK_REGEX))) {
            h->core_fast = 1;
        }
        if (h->core_fast) { /* t->pretok owns it from now on */
            t->pretok = p0->re;
            h->given = p0->re;
        }
        int32_t eot_keep = t->eot;
        if (t->eot < 0)
            t->eot = 0; /* zpi_tok_build_finish wants one */
        zp_status st = zpi_tok_build_finish(t, err);
        t->eot = eot_keep;
        /* without ignore_merges a whole token is taken as it is only where
         * BPE of its bytes gives it back */
        if (st == ZP_OK && !h->ignore_merges)
            st = zpi_tok_whole_table(t, err);
        if (st != ZP_OK)
            return zpi_err_prefix(err, "%s", fpath);
        return ZP_OK;
    } else {
        t->kind = ZPI_TOK_KIND_SP_BPE;
        t->mode = ZPI_TOK_HF_MERGES;
        if (h->byte_fallback && !h->all_byte_toks) {
            /* as tokenizers: a character whose bytes are not all tokens becomes unk */
        }
        return sp_finish(h, t, err);
    }
}

zp_status zpi_hf_load(zp_tokenizer *t, const char *path, int match_special, zpi_err *err)
{
    char fpath[4096], dir[4096];
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        zpi_fmt(fpath, sizeof fpath, "%s/tokenizer.json", path);
        zpi_fmt(dir, sizeof dir, "%s", path);
    } else {
        zpi_fmt(fpath, sizeof fpath, "%s", path);
        dirname_of(path, dir, sizeof dir);
    }
    struct zpi_hf *h = calloc(1, sizeof *h);
    if (!h)
        ERR(ZP_ERR_NOMEM, "out of memory");
    t->hf = h;
    h->match_special = match_special;
    h->lossy = 1;
    h->unk_id = ZPI_TOK_NONE;
    loader L;
    memset(&L, 0, sizeof L);
    L.path = fpath;
    byte_map_init(&L.bm);
    char *buf = NULL;
    size_t len;
    json_t *jn = NULL, *jp = NULL, *ja = NULL, *jpost = NULL;
    int mapped = 0;
    zp_status st = map_file(fpath, &buf, &len, &mapped, err);
    if (st != ZP_OK)
        goto out;
    st = scan_top(&L, buf, len, err);
    if (st != ZP_OK)
        goto out;

    const char *unk = NULL;
    st = model_options(h, L.model_opts, L.model_merges.p != NULL, fpath, &unk, err);
    if (st != ZP_OK)
        goto out;

    jn = span_json(&L.normalizer);
    jp = span_json(&L.pre_tokenizer);
    ja = span_json(&L.added_tokens);
    jpost = span_json(&L.post_processor);
    if ((st = components(h, &L, jn, jp, ja, fpath, err)) != ZP_OK)
        goto out;

    /* vocab */
    if (!L.vocab_done) {
        const char *vend;
        if ((st = scan_vocab(&L, L.model_vocab, &vend, err)) != ZP_OK)
            goto out;
    }
    uint32_t max_id = L.max_id;
    if ((st = read_added(h, ja, fpath, &max_id, err)) != ZP_OK)
        goto out;
    st = zpi_tok_build_begin(t, max_id + 1, err);
    if (st != ZP_OK)
        goto out;
    if ((st = add_vocab(t, h, &L, fpath, err)) != ZP_OK)
        goto out;
    if ((st = add_added(t, h, unk, fpath, err)) != ZP_OK)
        goto out;
    if ((st = scan_merges(&L, t, h->bytelevel, err)) != ZP_OK)
        goto out;
    if (h->unicode_norm && (st = build_nf_table(h, err)) != ZP_OK)
        goto out;
    if ((st = added_patterns(h, fpath, err)) != ZP_OK)
        goto out;
    if (build_matcher(h, &h->raw, 0) != ZP_OK || build_matcher(h, &h->normd, 1) != ZP_OK) {
        st = zpi_err_set(err, ZP_ERR_NOMEM, "out of memory");
        goto out;
    }
    st = read_config(h, t, dir, jpost, err);
    if (st != ZP_OK)
        goto out;
    compute_bound(h);
    t->match_special_ok = 1;
    st = finish_model(t, h, fpath, err);
out:
    if (mapped)
        munmap(buf, len);
    else
        free(buf);
    free(L.kbuf);
    free(L.ve);
    free(L.mstr);
    free(L.mlen);
    json_decref(L.model_opts);
    json_decref(jn);
    json_decref(jp);
    json_decref(ja);
    json_decref(jpost);
    return st;
}

void zpi_hf_destroy(struct zpi_hf *h)
{
    if (!h)
        return;
    for (size_t i = 0; i < h->n_norm; i++) {
        free(h->norm[i].a);
        free(h->norm[i].b);
    }
    free(h->norm);
    for (size_t i = 0; i < h->n_pt; i++) {
        if (h->pt[i].re != h->given)
            zpi_pretok_destroy(h->pt[i].re);
        free(h->pt[i].str);
    }
    free(h->pt);
    free(h->added);
    free(h->added_blob);
    free(h->added_nblob);
    free(h->raw.idx);
    free(h->normd.idx);
    free(h->nf_unsafe);
    free(h->ws_bad);
    free(h);
}

size_t zpi_hf_memory(const struct zpi_hf *h)
{
    if (!h)
        return 0;
    size_t n = sizeof *h + h->n_added * sizeof *h->added + (h->raw.n + h->normd.n) * 4;
    n += h->added_nblob_len;
    if (h->nf_unsafe)
        n += 0x110000 / 8;
    return n;
}
