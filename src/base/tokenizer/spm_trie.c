/*
 * spm_trie.c - the double-array trie of SentencePiece pieces (spm_model.c
 * builds one over NORMAL/USER_DEFINED/UNUSED pieces and one over the
 * others); lookups are spm_internal.h's da_next/da_walk.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/tokenizer/spm_internal.h"

uint64_t zpi_spm_key_prefix(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < 8; i++)
        v = (v << 8) | (i < n ? p[i] : 0);
    return v;
}

static int key_cmp(const void *a, const void *b)
{
    const da_key *x = a, *y = b;
    if (x->pre != y->pre)
        return x->pre < y->pre ? -1 : 1;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = n > 8 ? memcmp(x->p + 8, y->p + 8, n - 8) : 0;
    if (c)
        return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

typedef struct da_builder {
    da_trie t;
    uint32_t cap;
    uint32_t free_from;  /* every unit below is used */
    uint32_t multi_from; /* nodes of several children search from here */
} da_builder;

static int da_reserve(da_builder *b, uint32_t need)
{
    if (need <= b->cap)
        return 0;
    uint32_t cap = b->cap ? b->cap : 1024;
    while (cap < need)
        cap *= 2;
    da_unit *nu = realloc(b->t.u, (size_t)cap * sizeof *nu);
    if (!nu)
        return -1;
    for (uint32_t i = b->cap; i < cap; i++) {
        nu[i].base = 0;
        nu[i].check = -1;
        nu[i].val = -1;
    }
    b->t.u = nu;
    b->cap = cap;
    return 0;
}

/* Build the children of node from keys[lo..hi), all sharing their first
 * depth bytes. Returns 0 or -1 (out of memory). Recursion depth: the longest
 * key. */
static int da_build_node(da_builder *b, int32_t node, const da_key *k, size_t lo, size_t hi,
                         uint32_t depth)
{
    if (lo < hi && k[lo].len == depth) {
        b->t.u[node].val = k[lo].id;
        lo++;
    }
    if (lo == hi)
        return 0;
    uint8_t labels[256];
    size_t start[257];
    int nl = 0;
    for (size_t i = lo; i < hi; i++) {
        uint8_t c = k[i].p[depth];
        if (nl == 0 || labels[nl - 1] != c) {
            labels[nl] = c;
            start[nl++] = i;
        }
    }
    start[nl] = hi;
    /* a base whose child slots are all free (slot 0 is the root). A single
     * child takes the first free slot (free_from only moves forward). A node
     * of several children tries a bounded number of bases from where the
     * last such node was placed, then goes past every used unit (the holes
     * it leaves are filled by single children later): linear time, where an
     * unbounded search is quadratic for large vocabularies */
    if (da_reserve(b, b->t.n + 512) != 0)
        return -1;
    uint32_t pos = b->free_from;
    while (pos < b->cap && b->t.u[pos].check >= 0)
        pos++;
    b->free_from = pos;
    uint32_t base;
    if (nl == 1) {
        base = pos - labels[0]; /* pos >= 256: see da_build */
    } else {
        if (b->multi_from > pos)
            pos = b->multi_from;
        base = pos > labels[0] ? pos - labels[0] : 1;
        int found = 0;
        for (int tries = 0; tries < 64; tries++, base++) {
            if (da_reserve(b, base + 256 + 1) != 0)
                return -1;
            int ok = base + labels[0] != 0;
            for (int i = 0; ok && i < nl; i++)
                ok = b->t.u[base + labels[i]].check < 0;
            if (ok) {
                found = 1;
                break;
            }
        }
        if (!found) {
            base = b->t.n; /* every unit from here on is free */
            if (da_reserve(b, base + 256 + 1) != 0)
                return -1;
        }
        b->multi_from = base + labels[0];
    }
    if (da_reserve(b, base + 256 + 1) != 0)
        return -1;
    b->t.u[node].base = (int32_t)base;
    for (int i = 0; i < nl; i++) {
        b->t.u[base + labels[i]].check = node;
        if (base + labels[i] + 1 > b->t.n)
            b->t.n = base + labels[i] + 1;
    }
    for (int i = 0; i < nl; i++)
        if (da_build_node(b, (int32_t)(base + labels[i]), k, start[i], start[i + 1], depth + 1) !=
            0)
            return -1;
    return 0;
}

/* Build a trie of keys[0..n) (sorted here; no duplicates). */
int zpi_spm_da_build(da_trie *out, da_key *keys, size_t n)
{
    da_builder b;
    memset(&b, 0, sizeof b);
    qsort(keys, n, sizeof *keys, key_cmp);
    if (da_reserve(&b, 1024) != 0)
        return -1;
    b.t.u[0].check = 0; /* the root: never a child */
    b.t.n = 1;
    /* single children search free units from 256 on (a unit below could
     * hold only smaller labels: scanning it again and again is quadratic) */
    b.free_from = 256;
    if (da_build_node(&b, 0, keys, 0, n, 0) != 0) {
        free(b.t.u);
        return -1;
    }
    /* every base + 255 stays inside the array: da_next needs no other bound
     * than t->n, which covers it */
    b.t.n = b.cap;
    *out = b.t;
    return 0;
}
