/*
 * tok_tiktoken.c - the tiktoken family (tiktoken.h): built-in encodings
 * from the embedded rank files, and rank files given by path with their
 * split pattern named. ids = ranks; tiktoken's merge semantics (a piece
 * that is a token is that token; otherwise the adjacent pair whose bytes
 * make the lowest-ranked token merges first). Special tokens get their ids
 * and bytes (for decode) but are never produced by zp_encode: their strings
 * in text are ordinary text, as tiktoken's encode_ordinary does.
 */
#include "base/tokenizer/tiktoken.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

typedef struct special {
    const char *text;
    uint32_t id;
} special;

typedef struct encoding {
    const char *name;
    const char *data, *data_end; /* embedded rank file; NULL: given by path */
    uint32_t max_rank;           /* ranks above are left out (r50k from p50k's file) */
    const char *pattern;         /* zpi_pretok_create_known() name */
    const special *specials;
    size_t n_specials;
    int bos_first; /* llama3: BOS is the first special, EOT the second */
} encoding;

/* tiktoken_ext/openai_public.py (tiktoken 0.14.0) */
static const special SP_GPT2[] = {{"<|endoftext|>", 50256}};
static const special SP_P50K_EDIT[] = {{"<|endoftext|>", 50256},
                                       {"<|fim_prefix|>", 50281},
                                       {"<|fim_middle|>", 50282},
                                       {"<|fim_suffix|>", 50283}};
static const special SP_CL100K[] = {{"<|endoftext|>", 100257},
                                    {"<|fim_prefix|>", 100258},
                                    {"<|fim_middle|>", 100259},
                                    {"<|fim_suffix|>", 100260},
                                    {"<|endofprompt|>", 100276}};
static const special SP_O200K[] = {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const encoding ENCODINGS[] = {
    {"r50k_base", zpi_tiktoken_p50k_base, zpi_tiktoken_p50k_base_end, 50255, "gpt2", SP_GPT2,
     N(SP_GPT2), 0},
    {"p50k_base", zpi_tiktoken_p50k_base, zpi_tiktoken_p50k_base_end, UINT32_MAX, "gpt2",
     SP_GPT2, N(SP_GPT2), 0},
    {"p50k_edit", zpi_tiktoken_p50k_base, zpi_tiktoken_p50k_base_end, UINT32_MAX, "gpt2",
     SP_P50K_EDIT, N(SP_P50K_EDIT), 0},
    {"cl100k_base", zpi_tiktoken_cl100k_base, zpi_tiktoken_cl100k_base_end, UINT32_MAX, "cl100k",
     SP_CL100K, N(SP_CL100K), 0},
    {"o200k_base", zpi_tiktoken_o200k_base, zpi_tiktoken_o200k_base_end, UINT32_MAX, "o200k",
     SP_O200K, N(SP_O200K), 0},
};

/* Patterns a "PATTERN:PATH" id may name: the split pattern, the special
 * tokens placed after the largest rank. */
static const struct {
    const char *name;
    const char *pattern;
    const char *first, *second; /* special tokens at max_rank + 1, + 2 */
    int bos_first;
} PATTERNS[] = {
    {"gpt2", "gpt2", "<|endoftext|>", NULL, 0},
    {"cl100k", "cl100k", "<|endoftext|>", NULL, 0},
    {"o200k", "o200k", "<|endoftext|>", NULL, 0},
    {"qwen2", "qwen2", "<|endoftext|>", NULL, 0},
    /* Meta's Llama 3 tokenizer.model: 128000 ranks, then <|begin_of_text|>
     * (BOS) and <|end_of_text|> (EOT); its other special tokens differ
     * between 3, 3.1 and later and are left out. */
    {"llama3", "cl100k", "<|begin_of_text|>", "<|end_of_text|>", 1},
};

static const encoding *find_encoding(const char *name, size_t n)
{
    for (size_t i = 0; i < N(ENCODINGS); i++)
        if (strlen(ENCODINGS[i].name) == n && memcmp(ENCODINGS[i].name, name, n) == 0)
            return &ENCODINGS[i];
    return NULL;
}

static int find_pattern(const char *name, size_t n)
{
    for (size_t i = 0; i < N(PATTERNS); i++)
        if (strlen(PATTERNS[i].name) == n && memcmp(PATTERNS[i].name, name, n) == 0)
            return (int)i;
    return -1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* "PATTERN:PATH": *plen = length of PATTERN, or 0 when id is not of that
 * form (a path that exists as it is wins, colons and all). */
static size_t prefix_len(const char *id)
{
    struct stat sb;
    const char *colon = strchr(id, ':');
    if (!colon || colon == id || stat(id, &sb) == 0)
        return 0;
    size_t n = (size_t)(colon - id);
    if (find_pattern(id, n) < 0 && !find_encoding(id, n))
        return 0;
    return n;
}

int zpi_tiktoken_claims(const char *id)
{
    if (!id)
        return 0;
    if (strcmp(id, "gpt2") != 0 && find_encoding(id, strlen(id)))
        return 1;
    return prefix_len(id) > 0 || ends_with(id, ".tiktoken");
}

/* ------------------------------------------------------------ rank files */

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Standard base64 with optional '=' padding; returns the byte count or -1. */
static long b64_decode(const char *s, size_t n, uint8_t *out)
{
    while (n > 0 && s[n - 1] == '=')
        n--;
    uint32_t acc = 0;
    int bits = 0;
    long o = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (bits >= 6)
        return -1;
    return o;
}

/* One line "BASE64 RANK" of buf[*pos..len): *tok / *tlen the base64 text,
 * *rank. Returns 1 for a line, 0 at the end, -1 for a malformed line
 * (*lineno counts lines, empty ones too). */
static int next_rank_line(const char *buf, size_t len, size_t *pos, size_t *lineno,
                          const char **tok, size_t *tlen, uint32_t *rank)
{
    for (;;) {
        if (*pos >= len)
            return 0;
        const char *line = buf + *pos;
        const char *nl = memchr(line, '\n', len - *pos);
        size_t n = nl ? (size_t)(nl - line) : len - *pos;
        *pos += n + (nl ? 1 : 0);
        ++*lineno;
        if (n > 0 && line[n - 1] == '\r')
            n--;
        if (n == 0)
            continue;
        const char *sp = memchr(line, ' ', n);
        if (!sp || sp == line || sp + 1 == line + n)
            return -1;
        uint64_t r = 0;
        const char *q = sp + 1, *e = line + n;
        for (; q < e && *q >= '0' && *q <= '9'; q++) {
            r = r * 10 + (uint64_t)(*q - '0');
            if (r >= ZPI_TOK_MAX_IDS - 4)
                return -1;
        }
        if (q != e)
            return -1;
        *tok = line;
        *tlen = (size_t)(sp - line);
        *rank = (uint32_t)r;
        return 1;
    }
}

/* Read a whole file. OUT: *buf (caller frees), *len. */
static zp_status read_file(const char *path, char **buf, size_t *len, zpi_err *err)
{
    *buf = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return zpi_err_set(err, ZP_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return zpi_err_set(err, ZP_ERR_IO, "'%s' is not a regular file", path);
    }
    char *b = malloc((size_t)sb.st_size + 1);
    if (!b) {
        close(fd);
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory reading '%s'", path);
    }
    long got = zpi_read_full(fd, b, (size_t)sb.st_size);
    int e = errno;
    close(fd);
    if (got != (long)sb.st_size) {
        free(b);
        return zpi_err_set(err, ZP_ERR_IO, "cannot read '%s': %s", path,
                           got < 0 ? strerror(e) : "short read");
    }
    b[got] = '\0';
    *buf = b;
    *len = (size_t)got;
    return ZP_OK;
}

/* Build t from the rank file buf[0..len) (what: its name in messages),
 * ranks above max_rank left out. specials: placed at their ids; when
 * n_specials is 0, first/second go at the largest rank + 1 / + 2. */
static zp_status build(zp_tokenizer *t, const char *what, const char *buf, size_t len,
                       uint32_t max_rank, const special *specials, size_t n_specials,
                       const char *first, const char *second, int bos_first, zpi_err *err)
{
    /* pass 1: check every line, count them, find the largest rank */
    size_t pos = 0, lineno = 0, tlen, n_lines = 0;
    const char *tok;
    uint32_t rank, top = 0;
    int r;
    while ((r = next_rank_line(buf, len, &pos, &lineno, &tok, &tlen, &rank)) == 1) {
        if (rank > max_rank)
            continue;
        n_lines++;
        if (rank > top)
            top = rank;
    }
    if (r < 0)
        return zpi_err_set(err, ZP_ERR_FORMAT,
                           "%s:%zu: expected '<base64 token> <rank>' with a rank below %u", what,
                           lineno, ZPI_TOK_MAX_IDS - 4);
    if (n_lines < 256)
        return zpi_err_set(err, ZP_ERR_FORMAT, "%s: %zu tokens, not a tiktoken rank file", what,
                           n_lines);
    special extra[2] = {{first, top + 1}, {second, top + 2}};
    if (n_specials == 0) {
        specials = extra;
        n_specials = second ? 2 : 1;
    }
    uint32_t n_ids = top + 1;
    for (size_t i = 0; i < n_specials; i++)
        if (specials[i].id + 1 > n_ids)
            n_ids = specials[i].id + 1;
    zp_status st = zpi_tok_build_begin(t, n_ids, err);
    if (st != ZP_OK)
        return st;
    /* pass 2: the tokens */
    uint8_t tmp[1024];
    pos = 0;
    lineno = 0;
    while (next_rank_line(buf, len, &pos, &lineno, &tok, &tlen, &rank) == 1) {
        if (rank > max_rank)
            continue;
        long bl = tlen <= 4 * (sizeof tmp / 3) ? b64_decode(tok, tlen, tmp) : -1;
        if (bl <= 0)
            return zpi_err_set(err, ZP_ERR_FORMAT, "%s:%zu: invalid base64 token%s", what, lineno,
                               tlen > 4 * (sizeof tmp / 3) ? " (longer than 1024 bytes)" : "");
        st = zpi_tok_build_add(t, rank, tmp, (size_t)bl, 1, err);
        if (st != ZP_OK)
            return zpi_err_prefix(err, "%s:%zu", what, lineno);
    }
    for (size_t i = 0; i < n_specials; i++) {
        st = zpi_tok_build_add(t, specials[i].id, (const uint8_t *)specials[i].text,
                               strlen(specials[i].text), 0, err);
        if (st != ZP_OK)
            return zpi_err_prefix(err, "%s: special token %s", what, specials[i].text);
    }
    if (bos_first) {
        t->bos = (int32_t)specials[0].id;
        t->eot = (int32_t)specials[1].id;
    } else {
        t->eot = (int32_t)specials[0].id; /* <|endoftext|> comes first in every table */
    }
    t->mode = ZPI_TOK_TIKTOKEN;
    st = zpi_tok_build_pairs_begin(t, n_lines * 2, err);
    if (st == ZP_OK)
        st = zpi_tok_build_all_splits(t, err);
    return st;
}

zp_status zpi_tiktoken_load(zp_tokenizer *t, const char *id, zpi_err *err)
{
    const encoding *enc = find_encoding(id, strlen(id));
    if (enc && strcmp(id, "gpt2") != 0) {
        zp_status st = zpi_pretok_create_known(enc->pattern, &t->pretok, err);
        if (st == ZP_OK)
            st = build(t, enc->name, enc->data, (size_t)(enc->data_end - enc->data),
                       enc->max_rank, enc->specials, enc->n_specials, NULL, NULL, 0, err);
        return st;
    }
    /* a rank file: PATTERN:PATH, or a path named like a built-in encoding's
     * file (cl100k_base.tiktoken) */
    size_t pl = prefix_len(id);
    const char *path = pl ? id + pl + 1 : id;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (!pl && ends_with(base, ".tiktoken")) {
        size_t bl = strlen(base) - strlen(".tiktoken");
        if (find_encoding(base, bl) || find_pattern(base, bl) >= 0) {
            id = base; /* the name part decides below */
            pl = bl;
        }
    }
    char *buf;
    size_t len;
    zp_status st = read_file(path, &buf, &len, err);
    if (st != ZP_OK)
        return zpi_err_prefix(err, "tokenizer '%s'", pl ? path : id);
    if (!pl) {
        /* check the file first: a malformed one says so */
        size_t pos = 0, lineno = 0, tlen;
        const char *tok;
        uint32_t rank;
        int r;
        while ((r = next_rank_line(buf, len, &pos, &lineno, &tok, &tlen, &rank)) == 1)
            ;
        if (r < 0)
            st = zpi_err_set(err, ZP_ERR_FORMAT,
                             "%s:%zu: expected '<base64 token> <rank>' with a rank below %u",
                             path, lineno, ZPI_TOK_MAX_IDS - 4);
        else
            st = zpi_err_set(err, ZP_ERR_INVALID,
                             "tokenizer '%s': a tiktoken rank file does not say which split "
                             "pattern it goes with; name it: PATTERN:%s with PATTERN one of "
                             "gpt2, cl100k, o200k, qwen2, llama3 (cl100k's pattern, BOS "
                             "<|begin_of_text|> and EOT <|end_of_text|> after the ranks) or an "
                             "encoding (r50k_base, p50k_base, p50k_edit, cl100k_base, "
                             "o200k_base), or name the file as tiktoken does "
                             "(cl100k_base.tiktoken)",
                             path, path);
        free(buf);
        return st;
    }
    enc = find_encoding(id, pl);
    if (enc) {
        st = zpi_pretok_create_known(enc->pattern, &t->pretok, err);
        if (st == ZP_OK)
            st = build(t, path, buf, len, enc->max_rank, enc->specials, enc->n_specials, NULL,
                       NULL, 0, err);
    } else {
        int k = find_pattern(id, pl);
        st = zpi_pretok_create_known(PATTERNS[k].pattern, &t->pretok, err);
        if (st == ZP_OK)
            st = build(t, path, buf, len, UINT32_MAX, NULL, 0, PATTERNS[k].first,
                       PATTERNS[k].second, PATTERNS[k].bos_first, err);
    }
    free(buf);
    return st;
}
