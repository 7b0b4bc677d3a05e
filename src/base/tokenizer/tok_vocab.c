/*
 * tok_vocab.c - building a zp_tokenizer from a vocabulary: the GPT-2
 * vocabulary embedded in the library, a Hugging Face folder (vocab.json +
 * merges.txt) or a tiktoken rank file; plus the tokenizer's accessors and
 * zp_decode(). See docs/tokenizer.md.
 *
 * Ownership: the zp_tokenizer owns every table it points to; they are
 * allocated here and freed by zp_tokenizer_destroy(). Nothing here keeps
 * global mutable state; the embedded vocabulary is read-only data.
 */
#include "base/tokenizer/tok_internal.h"
#include "base/tokenizer/tiktoken.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <jansson.h>

#include "base/tokenizer/hf_json.h"
#include "base/tokenizer/spm_model.h"
#include "base/util.h"

#define ERR(st, ...) return zpi_err_set(err, (st), __VA_ARGS__)

static const char EOT_TEXT[] = "<|endoftext|>";

void zp_tokenizer_config_init(zp_tokenizer_config *cfg)
{
    if (!cfg)
        return;
    cfg->cache_entries = 16384;
    cfg->cache_max_piece_bytes = 64;
    cfg->eot = ZP_TOKEN_DEFAULT;
    cfg->bos = ZP_TOKEN_DEFAULT;
    cfg->match_special = 0;
}

/* ------------------------------------------------------------ byte-level
 * GPT-2 maps every byte to a printable character so that vocab files are
 * text: bytes 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF map to the same code point,
 * the other 68 bytes to U+0100.. in increasing byte order. The first 256
 * ids of GPT-2 are the bytes in the order: mapped-to-themselves first. */

static int byte_is_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

typedef struct byte_map {
    uint16_t b2u[256]; /* byte -> code point */
    int16_t u2b[324];  /* code point -> byte, -1 none */
    uint8_t order[256]; /* GPT-2 id -> byte for ids 0..255 */
} byte_map;

static void byte_map_init(byte_map *m)
{
    unsigned n = 0, k = 0;
    for (unsigned i = 0; i < 324; i++)
        m->u2b[i] = -1;
    for (unsigned b = 0; b < 256; b++)
        if (byte_is_printable(b))
            m->order[k++] = (uint8_t)b;
    for (unsigned b = 0; b < 256; b++) {
        if (byte_is_printable(b)) {
            m->b2u[b] = (uint16_t)b;
        } else {
            m->b2u[b] = (uint16_t)(256 + n++);
            m->order[k++] = (uint8_t)b;
        }
        m->u2b[m->b2u[b]] = (int16_t)b;
    }
}

/* Byte-level string s[0..n) -> bytes in out (room for n bytes). Returns the
 * byte count, or -1 when s has a character outside the byte-level alphabet
 * (or is not UTF-8). */
static long bytelevel_decode(const byte_map *m, const uint8_t *s, size_t n, uint8_t *out)
{
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        size_t l = zpi_utf8_decode(s + i, n - i, &cp);
        if (l == 0 || cp >= 324 || m->u2b[cp] < 0)
            return -1;
        out[o++] = (uint8_t)m->u2b[cp];
        i += l;
    }
    return (long)o;
}

/* ------------------------------------------------------------ files */

/* Read a whole file. OUT: *buf (caller frees), *len. */
static zp_status read_whole(const char *path, char **buf, size_t *len, zpi_err *err)
{
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        ERR(ZP_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    while (b) {
        size_t got = fread(b + n, 1, cap - n, f);
        n += got;
        if (n < cap)
            break;
        cap *= 2;
        char *nb = realloc(b, cap + 1);
        if (!nb) {
            free(b);
            b = NULL;
        } else {
            b = nb;
        }
    }
    int rerr = ferror(f) ? errno : 0;
    fclose(f);
    if (!b)
        ERR(ZP_ERR_NOMEM, "out of memory reading '%s'", path);
    if (rerr) {
        free(b);
        ERR(ZP_ERR_IO, "cannot read '%s': %s", path, strerror(rerr ? rerr : EIO));
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    return ZP_OK;
}

/* Next line of buf[*pos..len): returns its start, sets *n (without \n or
 * \r\n) and advances *pos; NULL at the end. */
static const char *next_line(const char *buf, size_t len, size_t *pos, size_t *n)
{
    if (*pos >= len)
        return NULL;
    const char *s = buf + *pos;
    const char *nl = memchr(s, '\n', len - *pos);
    size_t l = nl ? (size_t)(nl - s) : len - *pos;
    *pos += l + (nl ? 1 : 0);
    if (l > 0 && s[l - 1] == '\r')
        l--;
    *n = l;
    return s;
}

/* ------------------------------------------------------------ gpt2 */

static zp_status load_gpt2(zp_tokenizer *t, zpi_err *err)
{
    byte_map m;
    byte_map_init(&m);
    zp_status st = zpi_tok_build_begin(t, 50257, err);
    if (st != ZP_OK)
        return st;
    for (uint32_t id = 0; id < 256; id++) {
        st = zpi_tok_build_add(t, id, &m.order[id], 1, 1, err);
        if (st != ZP_OK)
            return st;
    }
    const char *buf = zpi_gpt2_vocab_bpe;
    size_t len = (size_t)(zpi_gpt2_vocab_bpe_end - zpi_gpt2_vocab_bpe);
    size_t pos = 0, n, lineno = 0;
    uint32_t id = 256;
    uint8_t tmp[1024];
    const char *line;
    while ((line = next_line(buf, len, &pos, &n)) != NULL) {
        lineno++;
        if (n == 0 || (lineno == 1 && n >= 9 && memcmp(line, "#version:", 9) == 0))
            continue;
        const char *sp = memchr(line, ' ', n);
        if (!sp || id >= 50256 || n > sizeof tmp)
            ERR(ZP_ERR_INTERNAL, "embedded vocab.bpe: bad line %zu", lineno);
        size_t la = (size_t)(sp - line);
        long a = bytelevel_decode(&m, (const uint8_t *)line, la, tmp);
        long b = a < 0 ? -1
                       : bytelevel_decode(&m, (const uint8_t *)sp + 1, n - la - 1, tmp + a);
        if (a <= 0 || b <= 0)
            ERR(ZP_ERR_INTERNAL, "embedded vocab.bpe: bad token on line %zu", lineno);
        st = zpi_tok_build_add(t, id++, tmp, (size_t)(a + b), 1, err);
        if (st != ZP_OK)
            return st;
    }
    if (id != 50256)
        ERR(ZP_ERR_INTERNAL, "embedded vocab.bpe has %u merges, expected 50000", id - 256);
    st = zpi_tok_build_add(t, 50256, (const uint8_t *)EOT_TEXT, sizeof EOT_TEXT - 1, 0, err);
    if (st != ZP_OK)
        return st;
    t->eot = 50256;
    t->mode = ZPI_TOK_TIKTOKEN;
    /* GPT-2 has 108299 (pair -> token) splits. */
    st = zpi_tok_build_pairs_begin(t, 110000, err);
    if (st == ZP_OK)
        st = zpi_tok_build_all_splits(t, err);
    return st;
}

/* ------------------------------------------------------------ Hugging Face */

/* vocab.json's ids: each an integer in range; the largest id and the
 * longest key. */
static zp_status hf_vocab_scan(json_t *root, const char *vpath, json_int_t *max_id,
                               size_t *max_key, zpi_err *err)
{
    const char *key;
    json_t *val;
    *max_id = -1;
    *max_key = 0;
    json_object_foreach(root, key, val)
    {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) >= ZPI_TOK_MAX_IDS - 1)
            return zpi_err_set(err, ZP_ERR_FORMAT,
                               "%s: the id of token '%.64s' is not an integer in [0, %u)", vpath,
                               key, ZPI_TOK_MAX_IDS - 1);
        if (json_integer_value(val) > *max_id)
            *max_id = json_integer_value(val);
        size_t kl = strlen(key);
        if (kl > *max_key)
            *max_key = kl;
    }
    if (*max_id < 255)
        return zpi_err_set(err, ZP_ERR_FORMAT, "%s: %zu tokens, not a byte-level BPE vocabulary",
                           vpath, json_object_size(root));
    return ZP_OK;
}

/* The tokens of vocab.json (byte-level spelling decoded; tmp: room for the
 * longest key), and <|endoftext|>: vocab.json's, else id n_ids - 1. */
static zp_status hf_vocab_add(zp_tokenizer *t, json_t *root, const byte_map *m, uint8_t *tmp,
                              uint32_t n_ids, const char *vpath, zpi_err *err)
{
    const char *key;
    json_t *val;
    zp_status st;
    json_object_foreach(root, key, val)
    {
        uint32_t id = (uint32_t)json_integer_value(val);
        size_t kl = strlen(key);
        long bl = bytelevel_decode(m, (const uint8_t *)key, kl, tmp);
        if (bl > 0)
            st = zpi_tok_build_add(t, id, tmp, (size_t)bl, 1, err);
        else /* an added token outside the byte-level alphabet: kept as is */
            st = zpi_tok_build_add(t, id, (const uint8_t *)key, kl, 0, err);
        if (st != ZP_OK)
            return zpi_err_prefix(err, "%s: token '%.64s'", vpath, key);
    }
    json_t *eotv = json_object_get(root, EOT_TEXT);
    if (eotv) {
        t->eot = (int32_t)json_integer_value(eotv);
        return ZP_OK;
    }
    t->eot = (int32_t)(n_ids - 1);
    return zpi_tok_build_add(t, n_ids - 1, (const uint8_t *)EOT_TEXT, sizeof EOT_TEXT - 1, 0, err);
}

/* merges.txt: one "A B" per line, rank = line order; merge_id[rank] is the
 * id the merge makes. tmp: room for 2 KiB + 16. */
static zp_status hf_merges(zp_tokenizer *t, const byte_map *m, const char *mbuf, size_t mlen,
                           uint8_t *tmp, uint32_t n_ids, const char *mpath, zpi_err *err)
{
    zp_status st = zpi_tok_build_pairs_begin(t, n_ids, err);
    if (st != ZP_OK)
        return st;
    size_t n_lines = 1;
    for (size_t i = 0; i < mlen; i++)
        n_lines += mbuf[i] == '\n';
    if (n_lines >= ZPI_TOK_MAX_IDS)
        return zpi_err_set(err, ZP_ERR_FORMAT, "%s: too many merges (at most %u)", mpath,
                           ZPI_TOK_MAX_IDS - 1);
    t->merge_cap = (uint32_t)n_lines;
    t->merge_id = malloc(n_lines * sizeof *t->merge_id);
    if (!t->merge_id) {
        t->merge_cap = 0;
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory");
    }
    size_t pos = 0, n, lineno = 0;
    uint32_t rank = 0;
    const char *line;
    while ((line = next_line(mbuf, mlen, &pos, &n)) != NULL) {
        lineno++;
        if (n == 0 || (lineno == 1 && n >= 8 && memcmp(line, "#version", 8) == 0))
            continue;
        const char *sp = memchr(line, ' ', n);
        if (!sp || sp == line || sp + 1 == line + n ||
            memchr(sp + 1, ' ', n - (size_t)(sp - line) - 1) || n > 2048)
            return zpi_err_set(err, ZP_ERR_FORMAT,
                               "%s:%zu: expected two tokens separated by one space", mpath, lineno);
        size_t la = (size_t)(sp - line);
        long a = bytelevel_decode(m, (const uint8_t *)line, la, tmp);
        long b = a <= 0 ? -1
                        : bytelevel_decode(m, (const uint8_t *)sp + 1, n - la - 1, tmp + a);
        if (a <= 0 || b <= 0)
            return zpi_err_set(err, ZP_ERR_FORMAT, "%s:%zu: token outside the byte-level alphabet",
                               mpath, lineno);
        uint32_t ia = zpi_tok_find(t, tmp, (size_t)a, zpi_tok_hash(tmp, (size_t)a));
        uint32_t ib = zpi_tok_find(t, tmp + a, (size_t)b, zpi_tok_hash(tmp + a, (size_t)b));
        uint32_t im = zpi_tok_find(t, tmp, (size_t)(a + b), zpi_tok_hash(tmp, (size_t)(a + b)));
        if (ia == ZPI_TOK_NONE || ib == ZPI_TOK_NONE || im == ZPI_TOK_NONE)
            return zpi_err_set(err, ZP_ERR_FORMAT,
                               "%s:%zu: merge '%.*s' uses or makes a token not in vocab.json",
                               mpath, lineno, (int)(n > 200 ? 200 : n), line);
        t->merge_id[rank] = im;
        if (zpi_tok_build_pair(t, ia, ib, rank++) != 0)
            return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for the merge table");
    }
    return ZP_OK;
}

static zp_status load_hf(zp_tokenizer *t, const char *dir, zpi_err *err)
{
    char vpath[4096], mpath[4096];
    zpi_fmt(vpath, sizeof vpath, "%s/vocab.json", dir);
    zpi_fmt(mpath, sizeof mpath, "%s/merges.txt", dir);
    byte_map m;
    byte_map_init(&m);
    char *vbuf = NULL, *mbuf = NULL;
    size_t vlen, mlen;
    json_t *root = NULL;
    uint8_t *tmp = NULL;
    zp_status st = read_whole(vpath, &vbuf, &vlen, err);
    if (st == ZP_OK)
        st = read_whole(mpath, &mbuf, &mlen, err);
    if (st != ZP_OK)
        goto out;

    json_error_t jerr;
    root = json_loadb(vbuf, vlen, 0, &jerr);
    if (!root || !json_is_object(root)) {
        if (root)
            st = zpi_err_set(err, ZP_ERR_FORMAT, "%s: not a JSON object of token -> id", vpath);
        else
            st = zpi_err_set(err, ZP_ERR_FORMAT, "%s:%d: invalid JSON: %s", vpath, jerr.line,
                             jerr.text);
        goto out;
    }
    json_int_t max_id;
    size_t max_key;
    st = hf_vocab_scan(root, vpath, &max_id, &max_key, err);
    if (st != ZP_OK)
        goto out;
    uint32_t n_ids = (uint32_t)max_id + 1 + (json_object_get(root, EOT_TEXT) ? 0 : 1);
    st = zpi_tok_build_begin(t, n_ids, err);
    tmp = malloc(max_key + 2 * 1024 + 16);
    if (st == ZP_OK && !tmp) {
        st = zpi_err_set(err, ZP_ERR_NOMEM, "out of memory");
    }
    if (st == ZP_OK)
        st = hf_vocab_add(t, root, &m, tmp, n_ids, vpath, err);
    if (st != ZP_OK)
        goto out;
    t->mode = ZPI_TOK_HF_MERGES;
    st = hf_merges(t, &m, mbuf, mlen, tmp, n_ids, mpath, err);
out:
    json_decref(root);
    free(tmp);
    free(vbuf);
    free(mbuf);
    return st;
}

/* ------------------------------------------------------------ API */

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static zp_status tokenizer_create(const char *id, const zp_tokenizer_config *cfg,
                                  zp_tokenizer **out, zpi_err *err)
{
    if (!out)
        ERR(ZP_ERR_INVALID, "zp_tokenizer_create: out is NULL");
    *out = NULL;
    if (!id || !id[0])
        ERR(ZP_ERR_INVALID, "zp_tokenizer_create: no tokenizer name");
    zp_tokenizer_config c;
    zp_tokenizer_config_init(&c);
    if (cfg)
        c = *cfg;
    if (c.cache_entries > ((size_t)1 << 26))
        ERR(ZP_ERR_INVALID, "cache_entries = %zu: too large (at most %zu)", c.cache_entries,
            (size_t)1 << 26);
    zp_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        ERR(ZP_ERR_NOMEM, "out of memory");
    t->cfg = c;
    t->eot = -1;
    t->bos = -1;
    zp_status st;
    struct stat sb;
    if (zpi_tiktoken_claims(id)) {
        st = zpi_tiktoken_load(t, id, err);
    } else if (strcmp(id, "gpt2") == 0) {
        st = load_gpt2(t, err);
    } else if (stat(id, &sb) != 0) {
        int e = errno;
        st = zpi_err_set(err, e == ENOENT ? ZP_ERR_INVALID : ZP_ERR_IO,
                         "tokenizer '%s': not \"gpt2\" and not a readable path (%s); expected "
                         "\"gpt2\", a folder with vocab.json + merges.txt, or a .tiktoken rank "
                         "file",
                         id, strerror(e));
    } else if (zpi_hf_is_json_path(id)) {
        st = zpi_hf_load(t, id, c.match_special, err);
    } else if (S_ISDIR(sb.st_mode)) {
        st = load_hf(t, id, err);
    } else if (zpi_spm_is_model_path(id)) {
        t->kind = ZPI_TOK_KIND_SPM;
        st = zpi_spm_load_file(t, id, err);
    } else if (ends_with(id, ".json") || ends_with(id, "merges.txt")) {
        st = zpi_err_set(err, ZP_ERR_INVALID,
                         "tokenizer '%s': give the folder that holds vocab.json and merges.txt, "
                         "not one of the files", id);
    } else {
        st = zpi_tiktoken_load(t, id, err);
    }
    if (st == ZP_OK && t->kind != ZPI_TOK_KIND_SPM && !t->hf)
        st = zpi_tok_build_finish(t, err);
    if (st == ZP_OK)
        st = zpi_tok_finish_common(t, id, &c, err);
    if (st != ZP_OK) {
        zp_tokenizer_destroy(t);
        return st;
    }
    *out = t;
    return ZP_OK;
}

zp_status zp_tokenizer_create(const char *id, const zp_tokenizer_config *cfg, zp_tokenizer **out,
                              char *err, size_t errcap)
{
    zpi_err e;
    zpi_err_clear(&e);
    zp_status st = tokenizer_create(id, cfg, out, &e);
    if (err && errcap)
        zpi_fmt(err, errcap, "%s", e.msg);
    return st;
}

void zp_tokenizer_destroy(zp_tokenizer *tok)
{
    if (!tok)
        return;
    zpi_pretok_destroy(tok->pretok);
    free(tok->span);
    free(tok->blob);
    free(tok->vmap);
    free(tok->pmap);
    free(tok->merge_id);
    free(tok->mblock);
    free(tok->bp_rank);
    free(tok->whole);
    free(tok->pfilter);
    zpi_spm_destroy(tok->spm);
    zpi_hf_destroy(tok->hf);
    free(tok);
}

size_t zp_tokenizer_vocab_size(const zp_tokenizer *tok) { return tok ? tok->n_ids : 0; }

int32_t zp_tokenizer_eot(const zp_tokenizer *tok) { return tok ? tok->eot : -1; }

size_t zp_tokenizer_memory(const zp_tokenizer *tok)
{
    if (!tok)
        return 0;
    return sizeof *tok + (size_t)tok->n_ids * sizeof *tok->span + tok->blob_cap +
           ((size_t)tok->vmap_mask + 1) * sizeof *tok->vmap +
           (tok->pmap ? ((size_t)tok->pmap_mask + 1) * sizeof *tok->pmap : 0) +
           (size_t)tok->merge_cap * sizeof *tok->merge_id +
           (size_t)tok->mblock_n * sizeof *tok->mblock +
           (tok->bp_rank ? 65536 * sizeof *tok->bp_rank : 0) +
           (tok->pfilter ? ((size_t)tok->pfilter_mask + 1) * sizeof *tok->pfilter : 0) +
           (tok->whole ? (size_t)tok->n_ids / 8 + 1 : 0) + zpi_spm_memory(tok->spm) +
           zpi_hf_memory(tok->hf);
}

zp_status zp_decode(const zp_tokenizer *tok, const int32_t *ids, size_t n_ids, char *out,
                    size_t cap, size_t *out_len)
{
    if (out_len)
        *out_len = 0;
    if (!tok || (!ids && n_ids) || (!out && cap))
        return ZP_ERR_INVALID;
    size_t need = 0;
    for (size_t i = 0; i < n_ids; i++) {
        int32_t id = ids[i];
        if (id < 0 || (uint32_t)id >= tok->n_ids || tok->span[id].off == ZPI_TOK_NONE)
            return ZP_ERR_INVALID;
        need += tok->span[id].len;
    }
    if (out_len)
        *out_len = need;
    if (need > cap)
        return ZP_ERR_LIMIT;
    size_t o = 0;
    for (size_t i = 0; i < n_ids; i++) {
        const zpi_tok_span *sp = &tok->span[ids[i]];
        memcpy(out + o, tok->blob + sp->off, sp->len);
        o += sp->len;
    }
    return ZP_OK;
}
