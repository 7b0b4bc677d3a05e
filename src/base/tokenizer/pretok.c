/*
 * pretok.c - pre-tokenizers (pretok.h): the known patterns, recognised in
 * the spellings the reference files use, and PCRE2 for any other pattern.
 */
#include "base/tokenizer/pretok.h"

#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/tokenizer/pretok_scan.h"

struct zpi_pretok {
    zpi_pretok_kind kind;
    char *pattern;    /* owned */
    pcre2_code *code; /* ZPI_PRETOK_REGEX, owned */
};

/* Per-thread scratch of a PCRE2 pre-tokenizer: the match data, the text
 * being split (with a copy where each invalid byte is U+FFFD, when it has
 * any), and the match after the stretch returned last, so that a stretch
 * between matches and the match after it cost one search. */
typedef struct regex_scratch {
    pcre2_match_data *md;
    const char *text; /* the text being split, NULL: none */
    size_t len;
    /* the text has invalid bytes: tbuf[0..tlen) is it with each invalid
     * byte as EF BF BD; o2t maps text offsets to tbuf offsets and t2o back
     * (len + 1 / tlen + 1 entries) */
    int fixed;
    char *tbuf;
    size_t tlen, tcap;
    size_t *o2t, *t2o;
    int have;      /* ms/me hold the match after the last stretch */
    size_t ms, me; /* in text offsets */
} regex_scratch;

/* ------------------------------------------------------------ known patterns */

typedef struct known_pattern {
    zpi_pretok_kind kind;
    const char *pattern;
} known_pattern;

/* Every spelling of a known pattern that reference files use. The first of
 * each kind is its canonical spelling. */
static const known_pattern KNOWN[] = {
    /* GPT-2 (encoder.py), r50k/p50k pat_str, GPT-2-style tokenizer.json */
    {ZPI_PRETOK_GPT2,
     "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"},
    {ZPI_PRETOK_GPT2,
     "'s|'t|'re|'ve|'m|'ll|'d| ?[\\p{L}]+| ?[\\p{N}]+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"},
    /* tiktoken >= 0.5's possessive form of the same */
    {ZPI_PRETOK_GPT2,
     "'(?:[sdmt]|ll|ve|re)| ?\\p{L}++| ?\\p{N}++| ?[^\\s\\p{L}\\p{N}]++|\\s++$|\\s+(?!\\S)|\\s"},
    /* cl100k_base pat_str (npm tiktoken), Llama 3's Split regex */
    {ZPI_PRETOK_CL100K,
     "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    /* Python tiktoken's possessive form */
    {ZPI_PRETOK_CL100K,
     "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}++|\\p{N}{1,3}+| "
     "?[^\\s\\p{L}\\p{N}]++[\\r\\n]*+|\\s++$|\\s*[\\r\\n]|\\s+(?!\\S)|\\s"},
    /* Python tiktoken < 0.7 (cl100k) */
    {ZPI_PRETOK_CL100K,
     "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}{1,3}| "
     "?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"},
    /* Qwen 2 / 2.5 / 3 Split regex */
    {ZPI_PRETOK_QWEN2,
     "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    /* o200k_base pat_str (npm and Python tiktoken), GPT-4o's Split regex */
    {ZPI_PRETOK_O200K,
     "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
     "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
     "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};

static const struct {
    const char *name;
    zpi_pretok_kind kind;
} NAMES[] = {
    {"gpt2", ZPI_PRETOK_GPT2},          {"r50k_base", ZPI_PRETOK_GPT2},
    {"p50k_base", ZPI_PRETOK_GPT2},     {"cl100k", ZPI_PRETOK_CL100K},
    {"cl100k_base", ZPI_PRETOK_CL100K}, {"llama3", ZPI_PRETOK_CL100K},
    {"qwen2", ZPI_PRETOK_QWEN2},        {"o200k", ZPI_PRETOK_O200K},
    {"o200k_base", ZPI_PRETOK_O200K},
};

static const char *kind_name(zpi_pretok_kind k)
{
    switch (k) {
    case ZPI_PRETOK_GPT2:
        return "gpt2";
    case ZPI_PRETOK_CL100K:
        return "cl100k";
    case ZPI_PRETOK_QWEN2:
        return "qwen2";
    case ZPI_PRETOK_O200K:
        return "o200k";
    case ZPI_PRETOK_REGEX:
        break;
    }
    return "regex";
}

static const char *canonical(zpi_pretok_kind k)
{
    for (size_t i = 0; i < sizeof KNOWN / sizeof KNOWN[0]; i++)
        if (KNOWN[i].kind == k)
            return KNOWN[i].pattern;
    return "";
}

static zp_status make(zpi_pretok_kind kind, const char *pattern, zpi_pretok **out, zpi_err *err)
{
    zpi_pretok *pt = calloc(1, sizeof *pt);
    if (pt)
        pt->pattern = strdup(pattern);
    if (!pt || !pt->pattern) {
        free(pt);
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for a pre-tokenizer");
    }
    pt->kind = kind;
    *out = pt;
    return ZP_OK;
}

zp_status zpi_pretok_create_known(const char *name, zpi_pretok **out, zpi_err *err)
{
    if (!out)
        return zpi_err_set(err, ZP_ERR_INVALID, "zpi_pretok_create_known: out is NULL");
    *out = NULL;
    for (size_t i = 0; name && i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (strcmp(name, NAMES[i].name) == 0)
            return make(NAMES[i].kind, canonical(NAMES[i].kind), out, err);
    return zpi_err_set(err, ZP_ERR_INVALID,
                       "pre-tokenizer '%s' is not known (known: gpt2, r50k_base, p50k_base, "
                       "cl100k, cl100k_base, llama3, qwen2, o200k, o200k_base)",
                       name ? name : "(null)");
}

/* ------------------------------------------------------------ PCRE2 */

/* The pattern for PCRE2: \s and \S become \p{White_Space} and
 * \P{White_Space} (PCRE2's \s under UCP also matches U+180E, which Rust
 * regex and Oniguruma do not); escapes whose meaning differs between PCRE2
 * and the references' engines are refused. OUT: *out (caller frees). */
static zp_status translate(const char *pat, char **out, zpi_err *err)
{
    size_t n = strlen(pat), o = 0;
    char *t = malloc(n * 16 + 1);
    if (!t)
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for a pre-tokenizer");
    for (size_t i = 0; i < n; i++) {
        if (pat[i] != '\\' || i + 1 == n) {
            t[o++] = pat[i];
            continue;
        }
        char c = pat[++i];
        const char *rep = NULL;
        switch (c) {
        case 's':
            rep = "\\p{White_Space}";
            break;
        case 'S':
            rep = "\\P{White_Space}";
            break;
        case 'w':
        case 'W':
        case 'b':
        case 'B':
        case 'h':
        case 'H':
        case 'Q':
        case 'X':
        case 'R':
            free(t);
            return zpi_err_set(err, ZP_ERR_FORMAT,
                               "pre-tokenizer regex '%.200s': \\%c is not supported (its "
                               "meaning differs between PCRE2 and the reference engines)",
                               pat, c);
        default:
            break;
        }
        if (rep) {
            memcpy(t + o, rep, strlen(rep));
            o += strlen(rep);
        } else {
            t[o++] = '\\';
            t[o++] = c;
        }
    }
    t[o] = '\0';
    *out = t;
    return ZP_OK;
}

static zp_status make_regex(const char *pattern, zpi_pretok **out, zpi_err *err)
{
    char *tp;
    zp_status st = translate(pattern, &tp, err);
    if (st != ZP_OK)
        return st;
    int ec;
    PCRE2_SIZE eoff;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)tp, PCRE2_ZERO_TERMINATED,
                                     PCRE2_UTF | PCRE2_UCP, &ec,
                                     &eoff, NULL);
    free(tp);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return zpi_err_set(err, ZP_ERR_FORMAT, "pre-tokenizer regex '%.200s' does not compile: %s",
                           pattern, (const char *)msg);
    }
    /* JIT when available; the interpreter gives the same matches. */
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    st = make(ZPI_PRETOK_REGEX, pattern, out, err);
    if (st != ZP_OK) {
        pcre2_code_free(code);
        return st;
    }
    (*out)->code = code;
    return ZP_OK;
}

zp_status zpi_pretok_create(const char *pattern, zpi_pretok **out, zpi_err *err)
{
    if (!out)
        return zpi_err_set(err, ZP_ERR_INVALID, "zpi_pretok_create: out is NULL");
    *out = NULL;
    if (!pattern || !pattern[0])
        return zpi_err_set(err, ZP_ERR_FORMAT, "pre-tokenizer: empty regex");
    for (size_t i = 0; i < sizeof KNOWN / sizeof KNOWN[0]; i++)
        if (strcmp(pattern, KNOWN[i].pattern) == 0)
            return make(KNOWN[i].kind, pattern, out, err);
    return make_regex(pattern, out, err);
}

void zpi_pretok_destroy(zpi_pretok *pt)
{
    if (!pt)
        return;
    pcre2_code_free(pt->code);
    free(pt->pattern);
    free(pt);
}

zpi_pretok_kind zpi_pretok_get_kind(const zpi_pretok *pt)
{
    return pt ? pt->kind : ZPI_PRETOK_GPT2;
}

const char *zpi_pretok_name(const zpi_pretok *pt) { return kind_name(zpi_pretok_get_kind(pt)); }

const char *zpi_pretok_pattern(const zpi_pretok *pt)
{
    return pt ? pt->pattern : canonical(ZPI_PRETOK_GPT2);
}

zp_status zpi_pretok_scratch_create(const zpi_pretok *pt, void **out)
{
    if (!out)
        return ZP_ERR_INVALID;
    *out = NULL;
    if (!pt || pt->kind != ZPI_PRETOK_REGEX)
        return ZP_OK;
    regex_scratch *rs = calloc(1, sizeof *rs);
    if (!rs)
        return ZP_ERR_NOMEM;
    rs->md = pcre2_match_data_create_from_pattern(pt->code, NULL);
    if (!rs->md) {
        free(rs);
        return ZP_ERR_NOMEM;
    }
    *out = rs;
    return ZP_OK;
}

void zpi_pretok_scratch_destroy(void *scratch)
{
    regex_scratch *rs = scratch;
    if (!rs)
        return;
    pcre2_match_data_free(rs->md);
    free(rs->tbuf);
    free(rs->o2t);
    free(rs->t2o);
    free(rs);
}

void zpi_pretok_scratch_reset(void *scratch)
{
    regex_scratch *rs = scratch;
    if (rs) {
        rs->text = NULL;
        rs->have = 0;
    }
}

/* Start splitting text[0..len): check it is valid UTF-8, else make the
 * copy with U+FFFD for each invalid byte. -1 when out of memory. */
static int regex_begin(regex_scratch *rs, const char *text, size_t len)
{
    const uint8_t *s = (const uint8_t *)text;
    size_t i = 0, bad = 0;
    uint32_t cp;
    while (i < len) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t l = zpi_utf8_decode(s + i, len - i, &cp);
        if (l == 0) {
            bad++;
            l = 1;
        }
        i += l;
    }
    rs->text = text;
    rs->len = len;
    rs->have = 0;
    rs->fixed = bad > 0;
    if (!bad)
        return 0;
    size_t tlen = len + 2 * bad;
    if (tlen + 1 > rs->tcap) {
        free(rs->tbuf);
        free(rs->o2t);
        free(rs->t2o);
        rs->tbuf = malloc(tlen + 1);
        rs->o2t = malloc((len + 1) * sizeof *rs->o2t);
        rs->t2o = malloc((tlen + 1) * sizeof *rs->t2o);
        rs->tcap = tlen + 1;
        if (!rs->tbuf || !rs->o2t || !rs->t2o) {
            free(rs->tbuf);
            free(rs->o2t);
            free(rs->t2o);
            rs->tbuf = NULL;
            rs->o2t = rs->t2o = NULL;
            rs->tcap = 0;
            rs->text = NULL;
            return -1;
        }
    }
    size_t o = 0;
    for (i = 0; i < len;) {
        size_t l = s[i] < 0x80 ? 1 : zpi_utf8_decode(s + i, len - i, &cp);
        rs->o2t[i] = o;
        if (l == 0) {
            rs->t2o[o] = i;
            rs->tbuf[o++] = (char)0xEF;
            rs->t2o[o] = i;
            rs->tbuf[o++] = (char)0xBF;
            rs->t2o[o] = i;
            rs->tbuf[o++] = (char)0xBD;
            i++;
            continue;
        }
        for (size_t k = 0; k < l; k++) {
            if (k)
                rs->o2t[i + k] = o;
            rs->t2o[o] = i + k;
            rs->tbuf[o++] = text[i + k];
        }
        i += l;
    }
    rs->o2t[len] = o;
    rs->t2o[o] = len;
    rs->tbuf[o] = '\0';
    rs->tlen = o;
    return 0;
}

/* The first non-empty match at or after pos: [*ms, *me) in text offsets,
 * or *ms = *me = len when there is none. Empty matches are skipped, as the
 * references' find_iter yields them but they make no piece. */
static void regex_search(const zpi_pretok *pt, regex_scratch *rs, size_t pos, size_t *ms,
                         size_t *me)
{
    const char *subj = rs->fixed ? rs->tbuf : rs->text;
    size_t slen = rs->fixed ? rs->tlen : rs->len;
    size_t p = rs->fixed ? rs->o2t[pos] : pos;
    while (p < slen) {
        int rc = pcre2_match(pt->code, (PCRE2_SPTR)subj, slen, p, PCRE2_NO_UTF_CHECK, rs->md,
                             NULL);
        if (rc < 0)
            break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(rs->md);
        if (ov[1] > ov[0]) {
            *ms = rs->fixed ? rs->t2o[ov[0]] : ov[0];
            *me = rs->fixed ? rs->t2o[ov[1]] : ov[1];
            return;
        }
        /* an empty match: go on from the next character (subj is valid) */
        p = ov[0] + 1;
        while (p < slen && ((uint8_t)subj[p] & 0xC0) == 0x80)
            p++;
    }
    *ms = *me = rs->len;
}

size_t zpi_pretok_find(const zpi_pretok *pt, const char *text, size_t len, size_t pos,
                       void *scratch, int *is_match)
{
    int dummy;
    if (!is_match)
        is_match = &dummy;
    *is_match = 1;
    if (pos >= len)
        return len;
    const uint8_t *s = (const uint8_t *)text;
    switch (zpi_pretok_get_kind(pt)) {
    case ZPI_PRETOK_GPT2:
        return zpi_scan_gpt2(s, pos, len);
    case ZPI_PRETOK_CL100K:
        return zpi_scan_cl100k(s, pos, len);
    case ZPI_PRETOK_QWEN2:
        return zpi_scan_qwen2(s, pos, len);
    case ZPI_PRETOK_O200K:
        return zpi_scan_o200k(s, pos, len);
    case ZPI_PRETOK_REGEX:
        break;
    }
    regex_scratch *rs = scratch;
    if (!rs) { /* no scratch: one for this call */
        void *tmp;
        if (zpi_pretok_scratch_create(pt, &tmp) != ZP_OK)
            return len; /* out of memory: the rest is one piece */
        size_t r = zpi_pretok_find(pt, text, len, pos, tmp, is_match);
        zpi_pretok_scratch_destroy(tmp);
        return r;
    }
    /* a new text: at its start, or another text than the last */
    if (pos == 0 || rs->text != text || rs->len != len) {
        if (regex_begin(rs, text, len) != 0)
            return len; /* out of memory: the rest is one piece */
    }
    if (rs->have && pos == rs->ms) {
        rs->have = 0; /* the match after the stretch returned last */
        return rs->me;
    }
    size_t ms, me;
    regex_search(pt, rs, pos, &ms, &me);
    rs->have = 0;
    if (ms == pos)
        return me;
    /* the stretch before the next match; that match is kept for the call
     * at its start */
    rs->have = 1;
    rs->ms = ms;
    rs->me = me;
    *is_match = 0;
    return ms;
}

size_t zpi_pretok_next(const zpi_pretok *pt, const char *text, size_t len, size_t pos,
                       void *scratch)
{
    return zpi_pretok_find(pt, text, len, pos, scratch, NULL);
}
