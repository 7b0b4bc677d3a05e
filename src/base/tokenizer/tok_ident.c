/*
 * tok_ident.c - what every tokenizer has whatever its kind: its identity
 * (zp_tokenizer_ident(), recorded in pre-tokenized shards and pipeline
 * states), its document boundaries (EOT, BOS) with the config's
 * overrides, and the match_special setting's check. Called by
 * zp_tokenizer_create() (tok_vocab.c) after a loader succeeded.
 */
#include "base/tokenizer/tok_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/filehash.h"
#include "base/util.h"

/* Built-in names: their identity is the name. */
static const char *const builtin[] = {"gpt2",        "r50k_base",  "p50k_base",
                                      "p50k_edit",   "cl100k_base", "o200k_base"};

int zpi_tok_is_builtin(const char *id)
{
    for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++)
        if (strcmp(id, builtin[i]) == 0)
            return 1;
    return 0;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Folds the content hash of file `path` into *h. optional: a missing file
 * leaves *h as is. */
static zp_status fold_file(const char *path, int optional, uint64_t *h, zpi_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (optional && errno == ENOENT)
            return ZP_OK;
        return zpi_err_set(err, ZP_ERR_IO, "tokenizer identity: cannot open '%s': %s", path,
                           strerror(errno));
    }
    uint64_t x = 0, off = 0;
    int e = zpi_xxh64_fd(fd, &x, &off);
    close(fd);
    if (e)
        return zpi_err_set(err, e == ENOMEM ? ZP_ERR_NOMEM : ZP_ERR_IO,
                           "tokenizer identity: cannot read '%s': %s", path, strerror(e));
    *h = (*h ^ x) * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
    return ZP_OK;
}

void zpi_tok_set_ident(zp_tokenizer *t, const char *kind, uint64_t hash)
{
    zpi_fmt(t->ident, sizeof t->ident, "%s:xxh64:%016llx", kind, (unsigned long long)hash);
}

/* The identity of a tokenizer loaded from id, when its loader left it
 * empty: the built-in name, or the kind of file and the hash of the files
 * that define it (tokenizer.json with the tokenizer_config.json beside it;
 * vocab.json + merges.txt; a .model; a .tiktoken, with the pattern name a
 * "NAME:PATH" id gives). */
static zp_status default_ident(zp_tokenizer *t, const char *id, zpi_err *err)
{
    if (zpi_tok_is_builtin(id)) {
        zpi_fmt(t->ident, sizeof t->ident, "%s", id);
        return ZP_OK;
    }
    char a[4096], b[4096];
    const char *kind, *path = id, *pattern = NULL;
    struct stat sb;
    if (stat(id, &sb) != 0) {
        /* "PATTERN:PATH" (a rank file with its pattern's name) */
        const char *colon = strchr(id, ':');
        if (colon && colon > id && stat(colon + 1, &sb) == 0) {
            pattern = id;
            path = colon + 1;
        } else {
            zpi_fmt(t->ident, sizeof t->ident, "%s", id);
            return ZP_OK;
        }
    }
    uint64_t h = 0;
    zp_status st;
    if (S_ISDIR(sb.st_mode)) {
        zpi_fmt(a, sizeof a, "%s/tokenizer.json", path);
        if (is_file(a)) {
            kind = "tokenizer.json";
            zpi_fmt(b, sizeof b, "%s/tokenizer_config.json", path);
            st = fold_file(a, 0, &h, err);
            if (st == ZP_OK)
                st = fold_file(b, 1, &h, err);
        } else {
            kind = "vocab.json+merges.txt";
            zpi_fmt(a, sizeof a, "%s/vocab.json", path);
            zpi_fmt(b, sizeof b, "%s/merges.txt", path);
            st = fold_file(a, 0, &h, err);
            if (st == ZP_OK)
                st = fold_file(b, 0, &h, err);
        }
    } else if (ends_with(path, ".json")) {
        kind = "tokenizer.json";
        st = fold_file(path, 0, &h, err);
        const char *slash = strrchr(path, '/');
        zpi_fmt(b, sizeof b, "%.*stokenizer_config.json", slash ? (int)(slash - path + 1) : 0,
                path);
        if (st == ZP_OK)
            st = fold_file(b, 1, &h, err);
    } else if (ends_with(path, ".model")) {
        kind = "sentencepiece";
        st = fold_file(path, 0, &h, err);
    } else {
        kind = "tiktoken";
        st = fold_file(path, 0, &h, err);
    }
    if (st != ZP_OK)
        return st;
    if (pattern) {
        char k[96];
        zpi_fmt(k, sizeof k, "%s:%.*s", kind, (int)(path - 1 - pattern), pattern);
        zpi_tok_set_ident(t, k, h);
    } else {
        zpi_tok_set_ident(t, kind, h);
    }
    return ZP_OK;
}

/* A boundary id of the config: ZP_TOKEN_DEFAULT keeps *id; -1 (bos only)
 * means none; else it must name a token of the vocabulary. */
static zp_status boundary(const zp_tokenizer *t, const char *what, int32_t v, int none_ok,
                          int32_t *id, zpi_err *err)
{
    if (v == ZP_TOKEN_DEFAULT)
        return ZP_OK;
    if (v == -1 && none_ok) {
        *id = -1;
        return ZP_OK;
    }
    if (v < 0 || (uint32_t)v >= t->n_ids || (t->span && t->span[v].off == ZPI_TOK_NONE))
        return zpi_err_set(err, ZP_ERR_INVALID,
                           "%s = %ld: not an id of the tokenizer's vocabulary (0 to %u)%s", what,
                           (long)v, t->n_ids ? t->n_ids - 1 : 0,
                           none_ok ? ", or -1 for none" : "");
    *id = v;
    return ZP_OK;
}

zp_status zpi_tok_finish_common(zp_tokenizer *t, const char *id, const zp_tokenizer_config *c,
                                zpi_err *err)
{
    zp_status st = ZP_OK;
    if (!t->ident[0])
        st = default_ident(t, id, err);
    if (st == ZP_OK)
        st = boundary(t, "eot", c->eot, 0, &t->eot, err);
    if (st == ZP_OK)
        st = boundary(t, "bos", c->bos, 1, &t->bos, err);
    if (st == ZP_OK && t->eot < 0)
        st = zpi_err_set(err, ZP_ERR_FORMAT,
                         "tokenizer '%s' names no end-of-document token: give one (eot, "
                         "zephon --eot ID)",
                         id);
    if (st == ZP_OK && c->match_special && !t->match_special_ok)
        st = zpi_err_set(err, ZP_ERR_UNSUPPORTED,
                         "tokenizer '%s': match_special (special tokens matched in text) is not "
                         "supported for this kind of tokenizer; its special tokens' strings are "
                         "ordinary text",
                         id);
    return st;
}

int32_t zp_tokenizer_bos(const zp_tokenizer *tok) { return tok ? tok->bos : -1; }

const char *zp_tokenizer_ident(const zp_tokenizer *tok) { return tok ? tok->ident : ""; }
