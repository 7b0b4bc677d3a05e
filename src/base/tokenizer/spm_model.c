/*
 * spm_model.c - SentencePiece .model files: loading (the model's settings,
 * piece tables and tries, zp_decode's table), the per-encoder state and
 * cache, and the encoding of a text segment by segment, giving the ids of
 * SentencePieceProcessor's Encode (sentencepiece 0.2). See spm_model.h and
 * docs/tokenizers.md. The parts, one concern per file (spm_internal.h):
 * spm_proto.c (the protobuf wire-format reader), spm_trie.c (the piece
 * tries), spm_norm.c (the normalizer), spm_unigram.c, spm_bpe.c.
 *
 * What the encoders replicate, step by step (facts of SentencePiece's
 * behaviour; the code is this project's own):
 *  - Normalizer: at each position, a user-defined piece (longest match) is
 *    copied as is; else the longest key of the charsmap's trie that
 *    prefixes the input (among its first 32 matches) is replaced by its
 *    string; else one UTF-8 character is copied, or one invalid byte
 *    becomes U+FFFD. With remove_extra_whitespaces, leading spaces are
 *    dropped, a replacement's leading spaces are dropped after a space, and
 *    trailing spaces are dropped at the end. Spaces become U+2581 with
 *    escape_whitespaces; add_dummy_prefix puts one before the text (after
 *    it with treat_whitespace_as_suffix).
 *  - Unigram: Viterbi over byte positions, character starts only: every
 *    piece (NORMAL score; USER_DEFINED 0.1 * (bytes - 1); UNUSED skipped)
 *    that prefixes the rest, path scores in float arithmetic as
 *    SentencePiece's (strictly greater wins, so earlier starts win ties;
 *    scores beyond +-100000 are rebased to 0 as it does); a character that
 *    no piece of exactly its length covers gets an unknown node scored
 *    min_score - 10.
 *  - BPE: symbols are characters (a user-defined piece is one frozen
 *    symbol); repeatedly merge the adjacent pair whose concatenation is a
 *    piece of the highest score (leftmost on ties); UNUSED results are split
 *    back by the last pair that formed them (unknown when none did, or
 *    after 100 levels the UNUSED id); symbols that are no piece (or are a
 *    CONTROL, UNKNOWN or BYTE piece) are unknown.
 *  - Unknown pieces: with byte_fallback, each of their bytes becomes its
 *    <0xXX> piece; without, a run of unknown pieces is one unknown id.
 *
 * The reference is sentencepiece 0.2.3 (tools/tokref.sh pins it); 0.2.0
 * and 0.2.1 differ in Unigram arithmetic (double, no rebase, user-defined
 * score length * max_score - 0.1) and in BPE's leftover UNUSED pieces.
 *
 * Threads: a struct zpi_spm is immutable after loading; a zpi_spm_enc is
 * one thread's.
 */
#include "base/tokenizer/spm_model.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/tokenizer/spm_internal.h"
#include "base/tokenizer/tok_internal.h"

void zpi_spm_destroy(struct zpi_spm *m)
{
    if (!m)
        return;
    free(m->score);
    free(m->type);
    free(m->pieces.u);
    free(m->reserved.u);
    free(m->cm_copy);
    free(m);
}

size_t zpi_spm_memory(const struct zpi_spm *m)
{
    if (!m)
        return 0;
    return sizeof *m + (size_t)m->n_pieces * (sizeof(float) + 1) +
           ((size_t)m->pieces.n + m->reserved.n) * sizeof(da_unit) + (size_t)m->cm_n * 4 +
           m->cm_pool_len;
}

int32_t zpi_spm_bos(const struct zpi_spm *m) { return m ? m->bos_id : -1; }

int zpi_spm_is_model_path(const char *path)
{
    size_t n = path ? strlen(path) : 0;
    return n > 6 && strcmp(path + n - 6, ".model") == 0;
}

/* ------------------------------------------------------------ loading */

static int has_inner_boundary(const uint8_t *p, size_t n, int suffix)
{
    /* prefix mode: a U+2581 after another character; suffix mode: a U+2581
     * before another character */
    for (size_t i = 0; i + 3 <= n; i++) {
        if (memcmp(p + i, SPACE_SYM, 3) != 0)
            continue;
        if (!suffix) {
            if (i > 0 && !(i >= 3 && memcmp(p + i - 3, SPACE_SYM, 3) == 0))
                return 1;
        } else {
            if (i + 3 < n && !(i + 6 <= n && memcmp(p + i + 3, SPACE_SYM, 3) == 0))
                return 1;
        }
    }
    return 0;
}

static int byte_piece_value(const uint8_t *p, size_t n)
{
    /* "<0xXX>" with upper-case hex digits, as SentencePiece writes them */
    if (n != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        int c = p[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* The bytes zp_decode gives for a piece: U+2581 as a space, a byte piece
 * as its byte, control pieces as nothing, the unknown piece as " \u2047 "
 * (SentencePiece's default unk_surface). */
static zp_status add_span(zp_tokenizer *t, uint32_t id, const raw_piece *pc, zpi_err *err)
{
    uint8_t tmp[8];
    const uint8_t *src = pc->p;
    size_t n = pc->len;
    if (pc->type == PT_CONTROL) {
        n = 0;
    } else if (pc->type == PT_UNKNOWN) {
        src = (const uint8_t *)" \xE2\x81\x87 ";
        n = 5;
    } else if (pc->type == PT_BYTE) {
        tmp[0] = (uint8_t)byte_piece_value(pc->p, pc->len);
        src = tmp;
        n = 1;
    }
    if (t->blob_len + n > t->blob_cap) {
        size_t cap = t->blob_cap * 2 + n + 64;
        uint8_t *nb = realloc(t->blob, cap);
        if (!nb)
            ERR(ZP_ERR_NOMEM, "out of memory for token bytes");
        t->blob = nb;
        t->blob_cap = cap;
    }
    size_t o = t->blob_len;
    for (size_t i = 0; i < n;) {
        if (pc->type != PT_BYTE && i + 3 <= n && memcmp(src + i, SPACE_SYM, 3) == 0) {
            t->blob[o++] = ' ';
            i += 3;
        } else {
            t->blob[o++] = src[i++];
        }
    }
    t->span[id].off = (uint32_t)t->blob_len;
    t->span[id].len = (uint32_t)(o - t->blob_len);
    t->blob_len = o;
    return ZP_OK;
}

/* The model's settings from r (its types checked) and the charsmap: a new
 * t->spm. */
static zp_status model_settings(zp_tokenizer *t, const raw_model *r, const char *name,
                                zpi_err *err)
{
    if (r->model_type == MT_WORD || r->model_type == MT_CHAR)
        ERR(ZP_ERR_UNSUPPORTED, "%s: trainer_spec.model_type %s is not supported (only BPE and "
            "UNIGRAM SentencePiece models)", name, r->model_type == MT_WORD ? "WORD" : "CHAR");
    if (r->model_type != MT_UNIGRAM && r->model_type != MT_BPE)
        ERR(ZP_ERR_UNSUPPORTED, "%s: trainer_spec.model_type %d is not supported (only BPE and "
            "UNIGRAM SentencePiece models)", name, r->model_type);
    if (r->n == 0)
        ERR(ZP_ERR_FORMAT, "%s: no pieces (not a SentencePiece model)", name);
    if (r->n >= ZPI_TOK_MAX_IDS || r->n > INT32_MAX / 2)
        ERR(ZP_ERR_FORMAT, "%s: %zu pieces (at most %u supported)", name, r->n,
            ZPI_TOK_MAX_IDS - 1);
    if (r->charsmap_len > UINT32_MAX / 2)
        ERR(ZP_ERR_FORMAT, "%s: precompiled_charsmap too large", name);
    struct zpi_spm *m = calloc(1, sizeof *m);
    if (!m)
        ERR(ZP_ERR_NOMEM, "%s: out of memory", name);
    t->spm = m;
    m->model_type = r->model_type;
    m->byte_fallback = r->byte_fallback;
    m->ws_suffix = r->ws_suffix;
    m->add_dummy_prefix = r->add_dummy_prefix;
    m->remove_extra_ws = r->remove_extra_ws;
    m->escape_ws = r->escape_ws;
    m->n_pieces = (uint32_t)r->n;
    m->grow_num = 3;
    m->grow_den = 1;
    size_t nl = r->nm_name_len < sizeof m->name - 1 ? r->nm_name_len : sizeof m->name - 1;
    memcpy(m->name, r->nm_name ? (const char *)r->nm_name : "", nl);
    m->name[nl] = '\0';
    /* trainer_spec ids: -1 disables; SentencePiece checks them against the
     * pieces' types when it trains; an id out of range means none here */
    m->bos_id = r->bos_id >= 0 && (uint64_t)r->bos_id < r->n ? (int32_t)r->bos_id : -1;
    m->eos_id = r->eos_id >= 0 && (uint64_t)r->eos_id < r->n ? (int32_t)r->eos_id : -1;
    m->pad_id = r->pad_id >= 0 && (uint64_t)r->pad_id < r->n ? (int32_t)r->pad_id : -1;
    zp_status st = zpi_spm_cm_load(m, r->charsmap, r->charsmap_len, name, err);
    if (st != ZP_OK)
        return st;
    for (unsigned c = 0; c < 128; c++)
        m->ascii_copy[c] = c == ' ' ? 0
                           : !(m->cm_units && m->cm_first[c]) ? 1
                           : m->cm_plain[c] ? 2 : 0;
    return ZP_OK;
}

/* Why SentencePiece refuses the piece, or NULL. */
static const char *piece_problem(const raw_piece *pc)
{
    if (pc->score != pc->score || pc->score > FLT_MAX || pc->score < -FLT_MAX)
        return "has a score that is NaN or infinite";
    if (pc->len >= 8000)
        return "is 8000 bytes or longer";
    if (memchr(pc->p, 0, pc->len) && !(pc->len == 1 && pc->type == PT_UNUSED))
        return "holds a NUL byte";
    return NULL;
}

/* The largest |score| of a Unigram lattice node (uni_usable). */
static double unigram_smax(const struct zpi_spm *m, const raw_model *r)
{
    double mx = fabs((double)m->unk_score);
    for (size_t i = 0; i < r->n; i++) {
        const raw_piece *pc = &r->pc[i];
        double a = pc->type == PT_NORMAL ? fabs((double)pc->score)
                   : pc->type == PT_USER ? fabs(0.1 * ((double)pc->len - 1)) : 0.0;
        if (a > mx)
            mx = a;
    }
    return mx;
}

/* The piece tries from the keys pk (NORMAL, USER_DEFINED, UNUSED) and rk
 * (the others); a piece defined twice is refused. */
static zp_status build_tries(struct zpi_spm *m, const raw_model *r, da_key *pk, size_t npk,
                             da_key *rk, size_t nrk, const char *name, zpi_err *err)
{
    /* duplicates: SentencePiece refuses a piece twice in the same map */
    int rc = zpi_spm_da_build(&m->pieces, pk, npk);
    if (rc == 0)
        rc = zpi_spm_da_build(&m->reserved, rk, nrk);
    if (rc != 0) {
        ERR(ZP_ERR_NOMEM, "%s: out of memory for the piece trie", name);
    }
    for (int pass = 0; pass < 2; pass++) {
        da_key *k = pass ? rk : pk;
        size_t n = pass ? nrk : npk;
        for (size_t i = 1; i < n; i++) {
            if (k[i].len == k[i - 1].len && memcmp(k[i].p, k[i - 1].p, k[i].len) == 0) {
                int a = k[i - 1].id, b = k[i].id;
                ERR(ZP_ERR_FORMAT, "%s: piece '%.*s' is defined twice (ids %d and %d)", name,
                    (int)r->pc[b].len, (const char *)r->pc[b].p, a < b ? a : b, a < b ? b : a);
            }
        }
    }
    /* a string both in pieces and reserved: SentencePiece looks the reserved
     * one up first; refused here rather than handled */
    for (size_t i = 0; i < nrk; i++) {
        int32_t nd = da_walk(&m->pieces, 0, rk[i].p, rk[i].len);
        if (nd >= 0 && m->pieces.u[nd].val >= 0) {
            int32_t a = m->pieces.u[nd].val;
            ERR(ZP_ERR_UNSUPPORTED, "%s: piece '%.*s' is defined twice with different types "
                "(ids %d and %d): not supported", name, (int)rk[i].len, (const char *)rk[i].p,
                a, rk[i].id);
        }
    }
    return ZP_OK;
}

/* The tokenizer's id table (zp_decode). */
static zp_status build_spans(zp_tokenizer *t, const raw_model *r, const char *name, zpi_err *err)
{
    t->n_ids = (uint32_t)r->n;
    t->span = malloc(r->n * sizeof *t->span);
    t->blob_cap = r->n * 8 + 64;
    t->blob = malloc(t->blob_cap);
    if (!t->span || !t->blob)
        ERR(ZP_ERR_NOMEM, "%s: out of memory", name);
    for (size_t i = 0; i < r->n; i++) {
        zp_status st = add_span(t, (uint32_t)i, &r->pc[i], err);
        if (st != ZP_OK)
            return st;
    }
    return ZP_OK;
}

static zp_status build_model(zp_tokenizer *t, raw_model *r, const char *name, zpi_err *err)
{
    zp_status st = model_settings(t, r, name, err);
    if (st != ZP_OK)
        return st;
    struct zpi_spm *m = t->spm;
    m->score = malloc(r->n * sizeof *m->score);
    m->type = malloc(r->n);
    da_key *pk = malloc(r->n * sizeof *pk);
    da_key *rk = malloc(r->n * sizeof *rk);
    if (!m->score || !m->type || !pk || !rk) {
        free(pk);
        free(rk);
        ERR(ZP_ERR_NOMEM, "%s: out of memory", name);
    }
    size_t npk = 0, nrk = 0;
    int unk = -1, nbytes = 0;
    int byte_seen[256] = {0};
    m->min_score = FLT_MAX; /* stays so without NORMAL pieces, as SentencePiece */
    int cross = 0;
    for (size_t i = 0; i < r->n; i++) {
        const raw_piece *pc = &r->pc[i];
        m->score[i] = pc->score;
        m->type[i] = (uint8_t)pc->type;
        int normal = pc->type == PT_NORMAL || pc->type == PT_USER || pc->type == PT_UNUSED;
        da_key key = {pc->p, pc->len, (int32_t)i, zpi_spm_key_prefix(pc->p, pc->len)};
        const char *bad = piece_problem(pc);
        if (bad) {
            free(pk);
            free(rk);
            ERR(ZP_ERR_FORMAT, "%s: piece %zu %s (SentencePiece refuses it)", name, i, bad);
        }
        if (pc->len == 1 && pc->p[0] == 0)
            continue; /* an UNUSED "\0" piece: SentencePiece skips it */
        if (normal) {
            pk[npk++] = key;
            cross |= has_inner_boundary(pc->p, pc->len, r->ws_suffix);
        } else {
            rk[nrk++] = key;
        }
        if (pc->type == PT_NORMAL && pc->score < m->min_score)
            m->min_score = pc->score;
        if (pc->type == PT_USER)
            m->has_user = 1;
        if (pc->type == PT_UNUSED)
            m->has_unused = 1;
        if (pc->type == PT_UNKNOWN) {
            if (unk >= 0) {
                free(pk);
                free(rk);
                ERR(ZP_ERR_FORMAT, "%s: pieces %d and %zu are both of type UNKNOWN", name, unk,
                    i);
            }
            unk = (int)i;
        }
        if (pc->type == PT_BYTE) {
            int b = byte_piece_value(pc->p, pc->len);
            if (!r->byte_fallback || b < 0) {
                free(pk);
                free(rk);
                ERR(ZP_ERR_FORMAT, "%s: byte piece '%.*s' (%zu) %s", name, (int)pc->len,
                    (const char *)pc->p, i,
                    b < 0 ? "is invalid" : "is found although byte_fallback is false");
            }
            if (!byte_seen[b]) {
                byte_seen[b] = 1;
                nbytes++;
                m->byte_id[b] = (int32_t)i;
            }
        }
    }
    m->unk_score = m->min_score - 10.0f;
    m->smax = unigram_smax(m, r);
    if (unk < 0 && !r->byte_fallback) {
        free(pk);
        free(rk);
        ERR(ZP_ERR_FORMAT, "%s: no piece of type UNKNOWN (and byte_fallback is false)", name);
    }
    if (r->byte_fallback && nbytes != 256) {
        free(pk);
        free(rk);
        ERR(ZP_ERR_FORMAT, "%s: byte_fallback is true but there are %d byte pieces, not 256",
            name, nbytes);
    }
    m->unk_id = unk;
    st = build_tries(m, r, pk, npk, rk, nrk, name, err);
    free(pk);
    free(rk);
    if (st != ZP_OK)
        return st;
    m->seg_mode = cross ? 0 : (m->ws_suffix ? 2 : 1);
    if (!m->escape_ws)
        m->seg_mode = 0; /* spaces stay spaces: no U+2581 boundaries */
    if (m->model_type == MT_BPE && m->has_unused)
        m->seg_mode = 0; /* UNUSED resegmentation depends on the whole text */

    st = build_spans(t, r, name, err);
    if (st != ZP_OK)
        return st;
    t->eot = m->eos_id;
    t->bos = m->bos_id;
    return ZP_OK;
}

zp_status zpi_spm_load_buffer(zp_tokenizer *t, const uint8_t *buf, size_t len, const char *name,
                              zpi_err *err)
{
    raw_model r;
    memset(&r, 0, sizeof r);
    r.model_type = MT_UNIGRAM; /* protobuf defaults */
    r.unk_id = 0;
    r.bos_id = 1;
    r.eos_id = 2;
    r.pad_id = -1;
    r.add_dummy_prefix = r.remove_extra_ws = r.escape_ws = 1;
    zp_status st = zpi_spm_parse_model(&r, buf, len, name, err);
    if (st == ZP_OK)
        st = build_model(t, &r, name, err);
    free(r.pc);
    return st;
}

zp_status zpi_spm_load_file(zp_tokenizer *t, const char *path, zpi_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        ERR(ZP_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        ERR(ZP_ERR_IO, "'%s' is not a regular file", path);
    }
    size_t len = (size_t)sb.st_size;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) {
        fclose(f);
        ERR(ZP_ERR_NOMEM, "out of memory reading '%s'", path);
    }
    size_t got = fread(buf, 1, len, f);
    int rerr = ferror(f) ? errno : 0;
    fclose(f);
    if (got != len) {
        free(buf);
        ERR(ZP_ERR_IO, "cannot read '%s': %s", path, rerr ? strerror(rerr) : "short read");
    }
    zp_status st = zpi_spm_load_buffer(t, buf, len, path, err);
    free(buf);
    return st;
}

zpi_spm_enc *zpi_spm_enc_create(const zp_tokenizer *t)
{
    zpi_spm_enc *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->tok = t;
    e->m = t->spm;
    if (e->m->has_unused) {
        e->rev = calloc(e->m->n_pieces, sizeof *e->rev);
        e->rev_gen = calloc(e->m->n_pieces, sizeof *e->rev_gen);
        if (!e->rev || !e->rev_gen) {
            zpi_spm_enc_destroy(e);
            return NULL;
        }
    }
    size_t nsets = 0;
    if (e->m->seg_mode != 0 && t->cfg.cache_entries >= CACHE_WAYS &&
        t->cfg.cache_max_piece_bytes >= 2) {
        /* twice cache_entries slots of 64 bytes (2 MiB at the default): most
         * segments are short words; a segment whose key and ids do not fit
         * a slot is encoded each time */
        nsets = 1;
        while (nsets * CACHE_WAYS <= t->cfg.cache_entries)
            nsets *= 2;
    }
    if (nsets) {
        e->ctag = calloc(nsets * CACHE_WAYS, sizeof *e->ctag);
        e->cslot = aligned_alloc(64, nsets * CACHE_WAYS * sizeof *e->cslot);
        if (!e->ctag || !e->cslot) {
            zpi_spm_enc_destroy(e);
            return NULL;
        }
        e->cset_mask = (uint32_t)(nsets - 1);
        size_t mx = t->cfg.cache_max_piece_bytes;
        e->cache_max = mx > 64 ? 64 : mx;
    }
    return e;
}

void zpi_spm_enc_destroy(zpi_spm_enc *e)
{
    if (!e)
        return;
    free(e->norm);
    free(e->best);
    free(e->from);
    free(e->bid);
    free(e->path);
    free(e->dbest);
    free(e->dgap);
    free(e->nchar);
    free(e->pid);
    free(e->plen);
    free(e->sym);
    free(e->heap);
    free(e->rev);
    free(e->rev_gen);
    free(e->seg);
    free(e->ctag);
    free(e->cslot);
    free(e->cut);
    free(e);
}

size_t zpi_spm_enc_memory(const zpi_spm_enc *e)
{
    if (!e)
        return 0;
    size_t slots = e->ctag ? ((size_t)e->cset_mask + 1) * CACHE_WAYS : 0;
    return sizeof *e + e->norm_cap + e->vit_cap * 36 + e->pcap * 8 + e->sym_cap * sizeof(bpe_sym) +
           e->heap_cap * sizeof(bpe_pair) + e->seg_cap * 4 +
           slots * (sizeof(uint32_t) + sizeof(cache_slot)) +
           (e->rev ? (size_t)e->m->n_pieces * 8 : 0);
}

/* Bytes the normalized form of len input bytes can take at most: every
 * step consumes k >= 1 bytes and writes at most k * grow_num / grow_den
 * (a charsmap key), 3k (a character whose spaces are escaped, a
 * user-defined piece) or 3 (an invalid byte); plus the dummy prefix. An id
 * covers at least one normalized byte (a byte-fallback id exactly one). */
size_t zpi_spm_max_ids(const struct zpi_spm *m, size_t len)
{
    if (!m)
        return len;
    size_t g = m->grow_num > 3 * m->grow_den ? m->grow_num : 3 * m->grow_den;
    return 3 + (len / m->grow_den) * g + ((len % m->grow_den) * g + m->grow_den - 1) / m->grow_den;
}

const char *zpi_spm_normalize(zpi_spm_enc *e, const char *text, size_t len, size_t *out_len)
{
    size_t n = zpi_spm_norm(e, (const uint8_t *)text, len);
    if (n == (size_t)-1)
        return NULL;
    *out_len = n;
    return (const char *)e->norm;
}

/* ------------------------------------------------------------ encode */

typedef struct emitter {
    int32_t *ids;
    size_t cap, n; /* n may pass cap: then only counted */
    int prev_unk;
} emitter;

/* Emit a segment's ids: without byte_fallback a run of unknown pieces is
 * one unknown id (SentencePiece merges them), also across segments. */
static inline void emit_ids(const struct zpi_spm *m, emitter *o, const int32_t *ids, size_t k)
{
    for (size_t i = 0; i < k; i++) {
        int32_t id = ids[i];
        if (id == m->unk_id) {
            if (o->prev_unk)
                continue;
            o->prev_unk = !m->byte_fallback;
        } else {
            o->prev_unk = 0;
        }
        if (o->n < o->cap)
            o->ids[o->n] = id;
        o->n++;
    }
}

/* Encode the normalized segment s[0..n) (n >= 1; h: its hash when the
 * cache is on and n <= cache_max) and emit its ids.
 * Returns 0 or -1 (out of memory). */
static int encode_segment(zpi_spm_enc *e, const uint8_t *s, size_t n, uint64_t h, emitter *o)
{
    const struct zpi_spm *m = e->m;
    if (grow((void **)&e->seg, &e->seg_cap, n + 1, sizeof *e->seg) != 0)
        return -1;
    size_t k;
    if (m->model_type == MT_UNIGRAM) {
        k = m->seg_mode == 0 ? zpi_spm_unigram(e, s, n, e->seg)
                             : zpi_spm_uni_segment(e, s, n, h, e->seg);
    } else if (e->ctag && n <= e->cache_max) {
        const cache_slot *c = cache_get(e, s, n, h);
        if (c) {
            k = c->nids;
            memcpy(e->seg, c->data + align4(n), k * sizeof(int32_t));
        } else {
            k = zpi_spm_bpe(e, s, n, e->seg);
            if (k != (size_t)-1)
                cache_put(e, s, n, h, e->seg, k, NULL, 0.0f, 0);
        }
    } else {
        k = zpi_spm_bpe(e, s, n, e->seg);
    }
    if (k == (size_t)-1)
        return -1;
    emit_ids(m, o, e->seg, k);
    return 0;
}

#define PREFETCH_AHEAD 4

/* The hash of segment s[a..b) when cached, its cache set prefetched. */
static inline uint64_t seg_hash_prefetch(const zpi_spm_enc *e, const uint8_t *s, size_t a,
                                         size_t b)
{
    if (!e->ctag || b - a > e->cache_max)
        return 0;
    uint64_t h = zpi_tok_hash(s + a, b - a);
    size_t set = cache_set(e, h);
    __builtin_prefetch(&e->ctag[set]);
    __builtin_prefetch(&e->cslot[set]);
    __builtin_prefetch(&e->cslot[set + 1]);
    __builtin_prefetch(&e->cslot[set + 2]);
    __builtin_prefetch(&e->cslot[set + 3]);
    return h;
}

static inline int is_space_sym(const uint8_t *s, size_t n, size_t i)
{
    return i + 3 <= n && s[i] == 0xE2 && s[i + 1] == 0x96 && s[i + 2] == 0x81;
}

zp_status zpi_spm_encode(zpi_spm_enc *e, const char *text, size_t len, int32_t *ids, size_t cap,
                         size_t *n_ids)
{
    *n_ids = 0;
    const struct zpi_spm *m = e->m;
    size_t n = zpi_spm_norm(e, (const uint8_t *)text, len);
    if (n == (size_t)-1)
        return ZP_ERR_NOMEM;
    emitter o = {ids, cap, 0, 0};
    const uint8_t *s = e->norm;
    e->uh = 0.0f;
    /* one segment when pieces may cross U+2581 boundaries */
    if (n > 0 && m->seg_mode == 0) {
        if (encode_segment(e, s, n, 0, &o) != 0)
            return ZP_ERR_NOMEM;
    } else if (n > 0) {
        /* the segments' ends first, then the segments, the cache sets of
         * the one PREFETCH_AHEAD further fetched meanwhile */
        size_t nc = 0, start = 0, i = 0;
        while (i < n) {
            const uint8_t *q = memchr(s + i, 0xE2, n - i);
            if (!q)
                break;
            i = (size_t)(q - s);
            if (!is_space_sym(s, n, i)) {
                i++;
                continue;
            }
            size_t cut;
            if (m->seg_mode == 1) {
                /* before a U+2581 that follows another character */
                cut = i > 0 && !(i >= 3 && is_space_sym(s, n, i - 3)) ? i : 0;
            } else {
                /* after a U+2581 that another character follows */
                cut = i + 3 < n && !is_space_sym(s, n, i + 3) ? i + 3 : 0;
            }
            if (cut > start) {
                if (nc == e->cut_cap &&
                    grow((void **)&e->cut, &e->cut_cap, nc + 2, sizeof *e->cut) != 0)
                    return ZP_ERR_NOMEM;
                e->cut[nc++] = cut;
                start = cut;
            }
            i += 3;
        }
        if (grow((void **)&e->cut, &e->cut_cap, nc + 2, sizeof *e->cut) != 0)
            return ZP_ERR_NOMEM;
        e->cut[nc++] = n;
        const size_t *cut = e->cut;
        uint64_t hq[PREFETCH_AHEAD + 1];
        for (size_t j = 0; j < nc && j < PREFETCH_AHEAD; j++)
            hq[j] = seg_hash_prefetch(e, s, j ? cut[j - 1] : 0, cut[j]);
        start = 0;
        for (size_t j = 0; j < nc; j++) {
            if (j + PREFETCH_AHEAD < nc)
                hq[(j + PREFETCH_AHEAD) % (PREFETCH_AHEAD + 1)] = seg_hash_prefetch(
                    e, s, cut[j + PREFETCH_AHEAD - 1], cut[j + PREFETCH_AHEAD]);
            uint64_t h = hq[j % (PREFETCH_AHEAD + 1)];
            if (encode_segment(e, s + start, cut[j] - start, h, &o) != 0)
                return ZP_ERR_NOMEM;
            start = cut[j];
        }
    }
    *n_ids = o.n;
    return o.n > cap ? ZP_ERR_LIMIT : ZP_OK;
}
