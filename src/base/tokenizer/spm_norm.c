/*
 * spm_norm.c - SentencePiece's normalizer: the precompiled charsmap
 * (loading and checking a Darts-clone double array and its replacement
 * pool) and Normalizer::Normalize (user-defined pieces, the charsmap's
 * longest matches, extra whitespace removal, U+2581 escaping, the dummy
 * prefix). spm_model.c's comment says what it replicates.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/tokenizer/spm_internal.h"
#include "base/tokenizer/tok_internal.h"

static const uint8_t REPL_CHAR[3] = {0xEF, 0xBF, 0xBD}; /* U+FFFD */

/* ------------------------------------------------------------ charsmap
 * The precompiled charsmap: a little-endian uint32 n, then n bytes of
 * Darts-clone double-array units (uint32 each), then the replacement pool:
 * NUL-terminated strings, a leaf's value being an offset into it.
 * Unit fields: has_leaf bit 8; value bits 0..30; label bits 0..7 and 31;
 * offset (u >> 10) << ((u & (1 << 9)) >> 6). */

static inline uint32_t cm_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
static inline uint32_t cm_label(uint32_t u) { return u & ((1u << 31) | 0xFF); }

/* Longest charsmap key that prefixes s[0..n), considering the first 32
 * matches as SentencePiece does. Returns its length (0: none); *repl gets
 * the replacement. */
static inline size_t cm_match(const struct zpi_spm *m, const uint8_t *s, size_t n,
                              const char **repl)
{
    const uint32_t *a = m->cm_units;
    uint32_t id = cm_offset(a[0]);
    size_t best = 0, found = 0;
    uint32_t bestv = 0;
    for (size_t i = 0; i < n; i++) {
        id ^= s[i];
        if (id >= m->cm_n)
            break;
        uint32_t u = a[id];
        if (cm_label(u) != s[i])
            break;
        id ^= cm_offset(u);
        if ((u >> 8) & 1) {
            if (id >= m->cm_n)
                break;
            if (found < 32) {
                best = i + 1;
                bestv = a[id] & 0x7FFFFFFFu;
            }
            found++;
        }
    }
    if (best == 0)
        return 0;
    if (bestv >= m->cm_pool_len)
        return 0; /* SentencePiece: then the character as it is */
    *repl = m->cm_pool + bestv;
    return best;
}

/* For zpi_spm_max_ids(): the most escaped replacement bytes (a space
 * counts 3) per key byte, bounded per first byte of the keys: the largest
 * replacement under it over its shortest key. Each node of the trie (a
 * DAWG: subtrees are shared) is visited once; a trie with a cycle or too
 * deep is refused. memo[id]: the node's (max bytes, min depth), 0: not yet,
 * UINT64_MAX: being visited. */
static int cm_subtree(const struct zpi_spm *m, uint64_t *memo, uint32_t id, int depth,
                      uint32_t *max_esc, uint32_t *min_depth)
{
    if (depth > 256 || memo[id] == UINT64_MAX)
        return -1;
    if (memo[id] != 0) {
        *max_esc = (uint32_t)(memo[id] >> 32);
        *min_depth = (uint32_t)memo[id];
        return 0;
    }
    memo[id] = UINT64_MAX;
    uint32_t mx = 0, mn = UINT32_MAX;
    for (unsigned c = 1; c < 256; c++) {
        uint32_t id2 = id ^ c;
        if (id2 >= m->cm_n || cm_label(m->cm_units[id2]) != c)
            continue;
        uint32_t u = m->cm_units[id2], nid = id2 ^ cm_offset(u);
        if (nid >= m->cm_n)
            continue;
        if ((u >> 8) & 1) {
            uint32_t v = m->cm_units[nid] & 0x7FFFFFFFu, esc = 0;
            if (v < m->cm_pool_len)
                for (const char *q = m->cm_pool + v; *q; q++)
                    esc += *q == ' ' ? 3 : 1;
            if (esc > mx)
                mx = esc;
            mn = 1;
        }
        uint32_t cx, cn;
        if (cm_subtree(m, memo, nid, depth + 1, &cx, &cn) != 0)
            return -1;
        if (cx > mx)
            mx = cx;
        if (cn != UINT32_MAX && cn + 1 < mn)
            mn = cn + 1;
    }
    memo[id] = ((uint64_t)mx << 32) | mn;
    *max_esc = mx;
    *min_depth = mn;
    return 0;
}

static zp_status cm_growth(struct zpi_spm *m, const char *name, zpi_err *err)
{
    uint64_t *memo = calloc(m->cm_n, sizeof *memo);
    if (!memo)
        ERR(ZP_ERR_NOMEM, "%s: out of memory", name);
    uint32_t root = cm_offset(m->cm_units[0]);
    if (root >= m->cm_n) {
        free(memo);
        ERR(ZP_ERR_FORMAT, "%s: normalizer_spec: precompiled_charsmap is invalid", name);
    }
    for (unsigned c = 1; c < 256; c++) {
        uint32_t id2 = root ^ c;
        if (id2 >= m->cm_n || cm_label(m->cm_units[id2]) != c)
            continue;
        uint32_t u = m->cm_units[id2], nid = id2 ^ cm_offset(u);
        if (nid >= m->cm_n)
            continue;
        uint32_t mx = 0, mn = UINT32_MAX, cx, cn;
        if ((u >> 8) & 1) {
            uint32_t v = m->cm_units[nid] & 0x7FFFFFFFu;
            if (v < m->cm_pool_len)
                for (const char *q = m->cm_pool + v; *q; q++)
                    mx += *q == ' ' ? 3 : 1;
            mn = 1;
        }
        if (cm_subtree(m, memo, nid, 1, &cx, &cn) != 0) {
            free(memo);
            ERR(ZP_ERR_FORMAT, "%s: normalizer_spec: precompiled_charsmap is invalid (its trie "
                "loops or is deeper than 256)", name);
        }
        if (cx > mx)
            mx = cx;
        if (cn != UINT32_MAX && cn + 1 < mn)
            mn = cn + 1;
        if (mn != UINT32_MAX && (size_t)mx * m->grow_den > m->grow_num * mn) {
            m->grow_num = mx;
            m->grow_den = mn;
        }
    }
    free(memo);
    return ZP_OK;
}

/* Check every leaf value of the charsmap points into the pool (walking all
 * units: a leaf unit's value is read only through its parent). */
zp_status zpi_spm_cm_load(struct zpi_spm *m, const uint8_t *cm, size_t len, const char *name,
                          zpi_err *err)
{
    if (len == 0)
        return ZP_OK;
    uint32_t tsize;
    if (len <= 4)
        ERR(ZP_ERR_FORMAT, "%s: normalizer_spec: precompiled_charsmap of %zu bytes is broken",
            name, len);
    memcpy(&tsize, cm, 4);
    if ((size_t)tsize >= len - 4 || tsize < 1024 || tsize % 1024 != 0)
        ERR(ZP_ERR_FORMAT, "%s: normalizer_spec: precompiled_charsmap is broken (trie of %u "
            "bytes in %zu)", name, tsize, len);
    m->cm_copy = malloc(len);
    if (!m->cm_copy)
        ERR(ZP_ERR_NOMEM, "%s: out of memory", name);
    memcpy(m->cm_copy, cm, len);
    m->cm_units = (const uint32_t *)(const void *)(m->cm_copy + 4);
    m->cm_n = tsize / 4;
    m->cm_pool = (const char *)m->cm_copy + 4 + tsize;
    m->cm_pool_len = (uint32_t)(len - 4 - tsize);
    if (m->cm_pool_len == 0 || m->cm_pool[m->cm_pool_len - 1] != '\0')
        ERR(ZP_ERR_FORMAT, "%s: normalizer_spec: precompiled_charsmap's strings are not "
            "terminated", name);
    size_t cur = 0;
    for (uint32_t i = 0; i < m->cm_pool_len; i++) {
        if (m->cm_pool[i] == '\0') {
            if (cur > m->max_repl)
                m->max_repl = cur;
            cur = 0;
        } else {
            cur++;
        }
    }
    zp_status st = cm_growth(m, name, err);
    if (st != ZP_OK)
        return st;
    uint32_t root = cm_offset(m->cm_units[0]);
    for (unsigned c = 0; c < 256; c++) {
        uint32_t id = root ^ c;
        m->cm_first[c] = id < m->cm_n && cm_label(m->cm_units[id]) == c;
    }
    for (unsigned c = 1; c < 128; c++) {
        if (!m->cm_first[c])
            continue;
        uint32_t id = root ^ c, u = m->cm_units[id], nid = id ^ cm_offset(u);
        int plain = !((u >> 8) & 1);
        for (unsigned d = 0; plain && d < 128; d++) {
            uint32_t id2 = nid ^ d;
            if (id2 < m->cm_n && cm_label(m->cm_units[id2]) == d)
                plain = 0;
        }
        m->cm_plain[c] = (uint8_t)plain;
    }
    return ZP_OK;
}

/* out: growable buffer; appends are checked by the callers' reservation. */
typedef struct nbuf {
    uint8_t *p;
    size_t n;
} nbuf;

static inline void put_piece(const struct zpi_spm *m, nbuf *o, const uint8_t *sp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (sp[i] == ' ' && m->escape_ws) {
            memcpy(o->p + o->n, SPACE_SYM, 3);
            o->n += 3;
        } else {
            o->p[o->n++] = sp[i];
        }
    }
}

/* One normalization step at s[0..n) (n >= 1): *sp and *spn get the output
 * string, the return value the bytes consumed. */
static inline size_t norm_prefix(const struct zpi_spm *m, const uint8_t *s, size_t n,
                                 const uint8_t **sp, size_t *spn)
{
    if (m->has_user) {
        size_t l = user_match(m, s, n);
        if (l) {
            *sp = s;
            *spn = l;
            return l;
        }
    }
    if (m->cm_units && m->cm_first[s[0]]) {
        const char *repl;
        size_t l = cm_match(m, s, n, &repl);
        if (l) {
            *sp = (const uint8_t *)repl;
            *spn = strlen(repl);
            return l;
        }
    }
    uint32_t cp;
    size_t l = s[0] < 0x80 ? 1 : zpi_utf8_decode(s, n, &cp);
    if (l == 0) {
        *sp = REPL_CHAR;
        *spn = 3;
        return 1;
    }
    *sp = s;
    *spn = l;
    return l;
}

/* Normalize text[0..len) into e->norm; returns its length or (size_t)-1
 * (out of memory). */
size_t zpi_spm_norm(zpi_spm_enc *e, const uint8_t *s, size_t len)
{
    const struct zpi_spm *m = e->m;
    /* the output grows as needed: check room before each step */
    size_t step_max = 3 * (m->max_repl > 4 ? m->max_repl : 4) + 8;
    size_t want = len + len / 2 + step_max + 8;
    if (grow((void **)&e->norm, &e->norm_cap, want, 1) != 0)
        return (size_t)-1;
    nbuf o = {e->norm, 0};
    size_t i = 0;
    if (m->remove_extra_ws) {
        while (i < len) {
            const uint8_t *sp;
            size_t spn, c = norm_prefix(m, s + i, len - i, &sp, &spn);
            if (!(spn == 1 && sp[0] == ' '))
                break;
            i += c;
        }
    }
    if (i == len)
        return 0;
    if (!m->ws_suffix && m->add_dummy_prefix)
        put_piece(m, &o, (const uint8_t *)" ", 1);
    int prev_space = m->remove_extra_ws;
    while (i < len) {
        if (o.n + step_max > e->norm_cap) {
            e->norm = o.p;
            if (grow((void **)&e->norm, &e->norm_cap, o.n + step_max + (len - i) + 64, 1) != 0)
                return (size_t)-1;
            o.p = e->norm;
        }
        const uint8_t *sp;
        size_t spn;
        uint8_t c0 = s[i];
        size_t c;
        if (c0 < 0x80 && !m->has_user &&
            (!(m->cm_units && m->cm_first[c0]) ||
             (m->cm_plain[c0] && (i + 1 == len || s[i + 1] < 0x80)))) {
            /* fast path: an ASCII byte no rule starts with */
            if (c0 == ' ') {
                if (!prev_space) {
                    put_piece(m, &o, &c0, 1);
                    prev_space = 1;
                }
                i++;
            } else {
                /* and the run of such bytes (other than spaces) after it,
                 * copied as they are, within the room checked above */
                size_t j = i + 1, lim = e->norm_cap - o.n - step_max + i + 1;
                if (lim > len)
                    lim = len;
                const uint8_t *cp = m->ascii_copy;
                while (j < lim && s[j] < 0x80 &&
                       (cp[s[j]] == 1 || (cp[s[j]] == 2 && (j + 1 == len || s[j + 1] < 0x80))))
                    j++;
                memcpy(o.p + o.n, s + i, j - i);
                o.n += j - i;
                i = j;
                prev_space = 0;
            }
            if (!m->remove_extra_ws)
                prev_space = 0;
            continue;
        }
        c = norm_prefix(m, s + i, len - i, &sp, &spn);
        while (prev_space && spn > 0 && sp[0] == ' ') {
            sp++;
            spn--;
        }
        if (spn > 0) {
            put_piece(m, &o, sp, spn);
            prev_space = sp[spn - 1] == ' ';
        }
        i += c;
        if (!m->remove_extra_ws)
            prev_space = 0;
    }
    if (m->remove_extra_ws) {
        if (m->escape_ws) {
            while (o.n >= 3 && memcmp(o.p + o.n - 3, SPACE_SYM, 3) == 0)
                o.n -= 3;
        } else {
            while (o.n >= 1 && o.p[o.n - 1] == ' ')
                o.n--;
        }
    }
    if (m->ws_suffix && m->add_dummy_prefix) {
        if (o.n + 3 > e->norm_cap) {
            e->norm = o.p;
            if (grow((void **)&e->norm, &e->norm_cap, o.n + 3, 1) != 0)
                return (size_t)-1;
            o.p = e->norm;
        }
        put_piece(m, &o, (const uint8_t *)" ", 1);
    }
    e->norm = o.p;
    return o.n;
}
