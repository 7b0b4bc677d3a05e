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

/* Per-thread scratch of a PCRE2 pre-tokenizer: the match data and the last
 * match found, so that a stretch between matches and the match after it
 * cost one search. */
typedef struct regex_scratch {
    pcre2_match_data *md;
    const char *text; /* the text of the last search */
    size_t len;
    size_t ms, me; /* the match after the stretch returned last */
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
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec,
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
    free(rs);
}

/* Length of the character at s[i] (1 for a byte that starts no valid
 * UTF-8 sequence). */
static size_t char_len(const uint8_t *s, size_t i, size_t n)
{
    uint32_t cp;
    size_t l = zpi_utf8_decode(s + i, n - i, &cp);
    return l ? l : 1;
}

/* The first non-empty match at or after pos: [*ms, *me), or *ms = *me = len
 * when there is none. Empty matches are skipped, as the references'
 * find_iter yields them but they make no piece. */
static void regex_search(const zpi_pretok *pt, regex_scratch *rs, const char *text, size_t len,
                         size_t pos, size_t *ms, size_t *me)
{
    const uint8_t *s = (const uint8_t *)text;
    size_t p = pos;
    while (p < len) {
        int rc = pcre2_match(pt->code, (PCRE2_SPTR)text, len, p, 0, rs->md, NULL);
        if (rc < 0)
            break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(rs->md);
        if (ov[1] > ov[0]) {
            *ms = ov[0];
            *me = ov[1];
            return;
        }
        p = ov[0] + (ov[0] < len ? char_len(s, ov[0], len) : 1);
    }
    *ms = *me = len;
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
    if (!rs) { /* no scratch: one match data for this call */
        regex_scratch tmp = {0};
        tmp.md = pcre2_match_data_create_from_pattern(pt->code, NULL);
        if (!tmp.md)
            return len; /* out of memory: the rest is one piece */
        size_t r = zpi_pretok_find(pt, text, len, pos, &tmp, is_match);
        pcre2_match_data_free(tmp.md);
        return r;
    }
    if (rs->text == text && rs->len == len && pos == rs->ms) {
        rs->text = NULL; /* the match after the stretch returned last */
        return rs->me;
    }
    size_t ms, me;
    regex_search(pt, rs, text, len, pos, &ms, &me);
    if (ms == pos) {
        rs->text = NULL;
        return me;
    }
    /* the stretch before the next match; that match is kept for the call
     * at its start */
    rs->text = text;
    rs->len = len;
    rs->ms = ms;
    rs->me = me;
    *is_match = 0;
    return ms;
}

void zpi_pretok_scratch_reset(void *scratch)
{
    regex_scratch *rs = scratch;
    if (rs)
        rs->text = NULL;
}

size_t zpi_pretok_next(const zpi_pretok *pt, const char *text, size_t len, size_t pos,
                       void *scratch)
{
    return zpi_pretok_find(pt, text, len, pos, scratch, NULL);
}
