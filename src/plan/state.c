/*
 * state.c - pipeline states in memory and as JSON (state.h): render and
 * parse with validation, the settings check, merging rank states into a job
 * state, the elastic re-split of a job state on another world size, the
 * words of `zephon state show` (the public zp_state_merge() and
 * zp_state_describe() are state_public.c's).
 * docs/state.md describes the format.
 *
 * Ownership: every struct owns its arrays and strings; zpi_*_clear() frees
 * them. Returned texts are malloc'd and the caller frees them.
 *
 * Thread safety: no shared state; every call works on its arguments.
 */
#include "plan/state.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <xxhash.h>

#include "plan/mixture.h"
#include "base/util.h"
#include "zephon/state_json.h"
#include "zephon/worksource.h"

/* Unsigned values at least this large are written as decimal strings (a
 * JSON integer is read as a signed 64-bit number). */
#define BIG ((uint64_t)INT64_MAX + 1u)
/* epoch_samples is below 2^63, so that a position N + k never overflows. */
#define MAX_N ((uint64_t)INT64_MAX)

/* ------------------------------------------------------------ memory */

void zpi_rank_state_clear(zpi_rank_state *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_plans; i++)
        free(r->plans[i].spans);
    free(r->plans);
    free(r->part_samples);
    free(r->part_tokens);
    free(r->skips);
    memset(r, 0, sizeof *r);
}

void zpi_state_clear(zpi_state *s)
{
    if (!s)
        return;
    free(s->settings);
    for (size_t i = 0; i < s->n_parts; i++)
        free(s->part_names ? s->part_names[i] : NULL);
    free(s->part_names);
    free(s->part_weights);
    for (size_t i = 0; i < s->n_ranks; i++)
        zpi_rank_state_clear(&s->ranks[i]);
    free(s->ranks);
    memset(s, 0, sizeof *s);
}

/* malloc of n elements of size sz (n may be 0: a 1-byte block, so that
 * NULL always means failure); NULL on overflow. */
static void *alloc_n(size_t n, size_t sz)
{
    if (n && sz > SIZE_MAX / n)
        return NULL;
    return calloc(n ? n : 1, sz);
}

static void *dup_n(const void *src, size_t n, size_t sz)
{
    void *p = alloc_n(n, sz);
    if (p && n)
        memcpy(p, src, n * sz);
    return p;
}

zp_status zpi_rank_state_copy(zpi_rank_state *dst, const zpi_rank_state *src)
{
    zpi_rank_state r = *src;
    r.plans = NULL;
    r.part_samples = r.part_tokens = NULL;
    r.skips = NULL;
    r.n_plans = 0;
    r.plans = alloc_n(src->n_plans, sizeof *r.plans);
    r.part_samples = dup_n(src->part_samples, src->n_parts, sizeof(uint64_t));
    r.part_tokens = dup_n(src->part_tokens, src->n_parts, sizeof(uint64_t));
    r.skips = dup_n(src->skips, src->n_skips, sizeof *r.skips);
    int bad = !r.plans || !r.part_samples || !r.part_tokens || !r.skips;
    for (size_t i = 0; !bad && i < src->n_plans; i++) {
        r.plans[i] = src->plans[i];
        r.plans[i].spans = dup_n(src->plans[i].spans, src->plans[i].n, sizeof(zpi_span));
        if (!r.plans[i].spans)
            bad = 1;
        else
            r.n_plans = i + 1;
    }
    if (bad) {
        zpi_rank_state_clear(&r);
        memset(dst, 0, sizeof *dst);
        return ZP_ERR_NOMEM;
    }
    *dst = r;
    return ZP_OK;
}

/* ------------------------------------------------------------ positions */

void zpi_state_default_range(uint64_t n, uint32_t world_size, int remainder, uint32_t rank,
                             uint64_t *start, uint64_t *count)
{
    uint64_t w = world_size ? world_size : 1;
    uint64_t per = n / w;
    if (remainder == ZP_REMAINDER_PAD && n % w)
        per++;
    *start = (uint64_t)rank * per;
    *count = per;
}

static const zpi_epoch_plan *find_plan(const zpi_rank_state *r, uint32_t epoch)
{
    size_t lo = 0, hi = r->n_plans;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->plans[mid].epoch < epoch)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->n_plans && r->plans[lo].epoch == epoch ? &r->plans[lo] : NULL;
}

static uint64_t plan_total(const zpi_epoch_plan *p)
{
    uint64_t t = 0;
    for (size_t i = 0; i < p->n; i++)
        t += p->spans[i].count; /* validated: no overflow */
    return t;
}

/* The rank's positions in `epoch`: its plan or its default range. */
static uint64_t rank_epoch_count(const zpi_state *s, const zpi_rank_state *r, uint32_t epoch)
{
    const zpi_epoch_plan *p = find_plan(r, epoch);
    if (p)
        return plan_total(p);
    uint64_t a, c;
    zpi_state_default_range(s->epoch_samples, s->world_size, s->remainder, r->rank, &a, &c);
    return c;
}

/* ------------------------------------------------------------ JSON text */

/* The shortest decimal form of a finite double that reads back to it, with
 * a '.' or an exponent so that it reads back as a real. */
static void fmt_real(char *out, size_t cap, double v)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            break;
    }
    if (!strpbrk(out, ".eE")) {
        size_t n = strlen(out);
        if (n + 3 <= cap)
            memcpy(out + n, ".0", 3);
    }
}

static int put_u64(zpi_buf *b, uint64_t v)
{
    return v >= BIG ? zpi_buf_printf(b, "\"%" PRIu64 "\"", v) : zpi_buf_printf(b, "%" PRIu64, v);
}

/* The compact canonical form of a JSON value (the settings' form). */
static int put_compact(zpi_buf *b, json_t *v)
{
    char num[40];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *x;
        int first = 1;
        if (zpi_buf_puts(b, "{") != 0)
            return -1;
        json_object_foreach(v, key, x)
        {
            if ((!first && zpi_buf_puts(b, ",") != 0) || zpi_buf_put_json_str(b, key) != 0 ||
                zpi_buf_puts(b, ":") != 0 || put_compact(b, x) != 0)
                return -1;
            first = 0;
        }
        return zpi_buf_puts(b, "}");
    }
    case JSON_ARRAY:
        if (zpi_buf_puts(b, "[") != 0)
            return -1;
        for (size_t i = 0; i < json_array_size(v); i++)
            if ((i && zpi_buf_puts(b, ",") != 0) || put_compact(b, json_array_get(v, i)) != 0)
                return -1;
        return zpi_buf_puts(b, "]");
    case JSON_STRING: return zpi_buf_put_json_str(b, json_string_value(v));
    case JSON_INTEGER: return zpi_buf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    case JSON_REAL:
        fmt_real(num, sizeof num, json_real_value(v));
        return zpi_buf_puts(b, num);
    case JSON_TRUE: return zpi_buf_puts(b, "true");
    case JSON_FALSE: return zpi_buf_puts(b, "false");
    case JSON_NULL: return zpi_buf_puts(b, "null");
    }
    return -1;
}

/* Parses a settings object (NULL and a message when it is not one). */
static json_t *load_object(const char *text, size_t len, const char *what, zpi_err *err)
{
    json_error_t je;
    json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!o) {
        zpi_err_set(err, ZP_ERR_INVALID, "%s: not JSON: %s (line %d, column %d)", what, je.text,
                    je.line, je.column);
        return NULL;
    }
    if (!json_is_object(o)) {
        json_decref(o);
        zpi_err_set(err, ZP_ERR_INVALID, "%s: not a JSON object", what);
        return NULL;
    }
    return o;
}

static zp_status canon_of(json_t *o, char **out, uint64_t *hash, zpi_err *err)
{
    zpi_buf b = {0};
    if (put_compact(&b, o) != 0) {
        zpi_buf_free(&b);
        return zpi_err_set(err, ZP_ERR_NOMEM, "settings: out of memory");
    }
    if (hash)
        *hash = XXH64(b.p, b.len, 0);
    if (out)
        *out = b.p;
    else
        zpi_buf_free(&b);
    return ZP_OK;
}

zp_status zpi_state_settings_canon(const char *settings, char **out, uint64_t *hash, zpi_err *err)
{
    if (out)
        *out = NULL;
    if (!settings)
        return zpi_err_set(err, ZP_ERR_INVALID, "settings: missing");
    json_t *o = load_object(settings, strlen(settings), "settings", err);
    if (!o)
        return ZP_ERR_INVALID;
    zp_status st = canon_of(o, out, hash, err);
    json_decref(o);
    return st;
}

/* ------------------------------------------------------------ validation */

static const char *remainder_name(int r)
{
    return r == ZP_REMAINDER_PAD ? "pad" : r == ZP_REMAINDER_DROP ? "drop" : NULL;
}

/* The checks shared by render, parse and the re-split, on everything but
 * the settings text; `code` is the status of a failure. */
static zp_status validate(const zpi_state *s, zp_status code, zpi_err *err)
{
    if (s->version != ZP_STATE_VERSION)
        return zpi_err_set(err, ZP_ERR_UNSUPPORTED,
                           "version %d: this build reads and writes state version %d",
                           s->version, ZP_STATE_VERSION);
    ZPI_RETURN_ERR_IF(s->world_size == 0, err, code, "world_size: 0: must be at least 1");
    ZPI_RETURN_ERR_IF(s->epoch_samples == 0 || s->epoch_samples > MAX_N, err, code,
                      "epoch_samples: %" PRIu64 ": must be 1 .. 2^63 - 1", s->epoch_samples);
    ZPI_RETURN_ERR_IF(!remainder_name(s->remainder), err, code,
                      "remainder: %d: must be pad (0) or drop (1)", s->remainder);
    for (size_t i = 0; i < s->n_parts; i++) {
        const char *nm = s->part_names ? s->part_names[i] : NULL;
        ZPI_RETURN_ERR_IF(!nm || !*nm, err, code, "parts[%zu].name: must be a non-empty string",
                          i);
        double w = s->part_weights[i];
        ZPI_RETURN_ERR_IF(!isfinite(w) || w <= 0 || w > 1, err, code,
                          "parts[%zu].weight: %g: must be in (0, 1]", i, w);
        for (size_t j = 0; j < i; j++)
            ZPI_RETURN_ERR_IF(!strcmp(s->part_names[j], nm), err, code,
                              "parts[%zu].name: \"%s\" is also parts[%zu]'s name", i, nm, j);
    }
    ZPI_RETURN_ERR_IF(s->n_ranks == 0, err, code, "ranks: empty: a state holds at least one rank");
    for (size_t k = 0; k < s->n_ranks; k++) {
        const zpi_rank_state *r = &s->ranks[k];
        ZPI_RETURN_ERR_IF(r->rank >= s->world_size, err, code,
                          "ranks[%zu].rank: %" PRIu32 ": must be below world_size %" PRIu32, k,
                          r->rank, s->world_size);
        ZPI_RETURN_ERR_IF(k && r->rank <= s->ranks[k - 1].rank, err, code,
                          "ranks[%zu].rank: %" PRIu32 ": ranks must be ascending, each once", k,
                          r->rank);
        ZPI_RETURN_ERR_IF(r->n_parts != s->n_parts, err, code,
                          "ranks[%zu].part_samples: %zu values for %zu parts", k, r->n_parts,
                          s->n_parts);
        for (size_t i = 0; i < r->n_plans; i++) {
            const zpi_epoch_plan *p = &r->plans[i];
            ZPI_RETURN_ERR_IF(i && p->epoch <= r->plans[i - 1].epoch, err, code,
                              "ranks[%zu].plans[%zu].epoch: %" PRIu32
                              ": plans must be ascending by epoch, each once",
                              k, i, p->epoch);
            uint64_t total = 0;
            for (size_t j = 0; j < p->n; j++) {
                const zpi_span *sp = &p->spans[j];
                ZPI_RETURN_ERR_IF(sp->count == 0, err, code,
                                  "ranks[%zu].plans[%zu].spans[%zu]: an empty span", k, i, j);
                ZPI_RETURN_ERR_IF(sp->start > UINT64_MAX - sp->count ||
                                      total > UINT64_MAX - sp->count,
                                  err, code, "ranks[%zu].plans[%zu].spans[%zu]: too large", k, i,
                                  j);
                total += sp->count;
            }
        }
        uint64_t cnt = rank_epoch_count(s, r, r->epoch);
        ZPI_RETURN_ERR_IF(r->position > cnt, err, code,
                          "ranks[%zu].position: %" PRIu64 ": past the %" PRIu64
                          " positions of the rank's epoch %" PRIu32,
                          k, r->position, cnt, r->epoch);
        for (size_t i = 0; i < r->n_skips; i++) {
            const zpi_skip *x = &r->skips[i];
            ZPI_RETURN_ERR_IF(x->first > x->last, err, code,
                              "ranks[%zu].skipped[%zu].batches: %" PRIu64 " > %" PRIu64, k, i,
                              x->first, x->last);
            ZPI_RETURN_ERR_IF(i && x->first <= r->skips[i - 1].last, err, code,
                              "ranks[%zu].skipped[%zu].batches: %" PRIu64 " .. %" PRIu64
                              ": ranges must be ascending and not overlap",
                              k, i, x->first, x->last);
        }
    }
    return ZP_OK;
}

/* ------------------------------------------------------------ render */

#define COUNT_FIELDS(X)                                                                            \
    X(batches) X(samples) X(padded) X(skipped) X(filtered) X(tokens) X(truncated_tokens)          \
        X(pad_tokens)

static int put_u64_array(zpi_buf *b, const uint64_t *v, size_t n)
{
    if (zpi_buf_puts(b, "[") != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if ((i && zpi_buf_puts(b, ", ") != 0) || put_u64(b, v[i]) != 0)
            return -1;
    return zpi_buf_puts(b, "]");
}

static int put_rank(zpi_buf *b, const zpi_rank_state *r)
{
    int e = 0;
    e |= zpi_buf_printf(b, "    {\n      \"rank\": %" PRIu32 ",\n      \"next_batch\": ", r->rank);
    e |= put_u64(b, r->next_batch);
    e |= zpi_buf_printf(b, ",\n      \"epoch\": %" PRIu32 ",\n      \"position\": ", r->epoch);
    e |= put_u64(b, r->position);
    e |= zpi_buf_puts(b, ",\n      \"token_offset\": ");
    e |= put_u64(b, r->token_offset);
    e |= zpi_buf_printf(b, ",\n      \"carry\": %s,\n      \"plans\": [",
                        r->carry ? "true" : "false");
    for (size_t i = 0; i < r->n_plans; i++) {
        const zpi_epoch_plan *p = &r->plans[i];
        e |= zpi_buf_printf(b, "%s\n        {\"epoch\": %" PRIu32 ", \"spans\": [", i ? "," : "",
                            p->epoch);
        for (size_t j = 0; j < p->n; j++) {
            e |= zpi_buf_puts(b, j ? ", [" : "[");
            e |= put_u64(b, p->spans[j].start);
            e |= zpi_buf_puts(b, ", ");
            e |= put_u64(b, p->spans[j].count);
            if (p->spans[j].token_offset) {
                e |= zpi_buf_puts(b, ", ");
                e |= put_u64(b, p->spans[j].token_offset);
            }
            e |= zpi_buf_puts(b, "]");
        }
        e |= zpi_buf_puts(b, "]}");
    }
    e |= zpi_buf_puts(b, r->n_plans ? "\n      ],\n      \"part_samples\": "
                                    : "],\n      \"part_samples\": ");
    e |= put_u64_array(b, r->part_samples, r->n_parts);
    e |= zpi_buf_puts(b, ",\n      \"part_tokens\": ");
    e |= put_u64_array(b, r->part_tokens, r->n_parts);
    e |= zpi_buf_puts(b, ",\n      \"skipped\": [");
    for (size_t i = 0; i < r->n_skips; i++) {
        const zpi_skip *x = &r->skips[i];
        e |= zpi_buf_puts(b, i ? ",\n        {\"batches\": [" : "\n        {\"batches\": [");
        e |= put_u64(b, x->first);
        e |= zpi_buf_puts(b, ", ");
        e |= put_u64(b, x->last);
        e |= zpi_buf_puts(b, "], \"samples\": ");
        e |= put_u64(b, x->samples);
        e |= zpi_buf_puts(b, ", \"tokens\": ");
        e |= put_u64(b, x->tokens);
        e |= zpi_buf_printf(b, ", \"from\": [%" PRIu32 ", ", x->from_epoch);
        e |= put_u64(b, x->from_position);
        e |= zpi_buf_printf(b, "], \"to\": [%" PRIu32 ", ", x->to_epoch);
        e |= put_u64(b, x->to_position);
        e |= zpi_buf_puts(b, "]}");
    }
    e |= zpi_buf_puts(b, r->n_skips ? "\n      ]" : "]");
    e |= zpi_buf_puts(b, ",\n      \"counts\": {");
    const char *sep = "";
#define X(f)                                                                                       \
    e |= zpi_buf_printf(b, "%s\"" #f "\": ", sep);                                                 \
    e |= put_u64(b, r->counts.f);                                                                  \
    sep = ", ";
    COUNT_FIELDS(X)
#undef X
    e |= zpi_buf_puts(b, "}\n    }");
    return e ? -1 : 0;
}

zp_status zpi_state_render(const zpi_state *s, char **out, size_t *len, zpi_err *err)
{
    *out = NULL;
    if (len)
        *len = 0;
    ZPI_FORWARD_IF_ERR(validate(s, ZP_ERR_INVALID, err));
    json_t *set = load_object(s->settings ? s->settings : "", s->settings ? strlen(s->settings) : 0,
                              "settings", err);
    if (!set)
        return ZP_ERR_INVALID;
    uint64_t hash = 0;
    zp_status st = canon_of(set, NULL, &hash, err);
    zpi_buf b = {0};
    int e = st != ZP_OK;
    e |= zpi_buf_printf(&b, "{\n  \"version\": %d,\n  \"seed\": ", s->version);
    e |= put_u64(&b, s->seed);
    e |= zpi_buf_printf(&b, ",\n  \"world_size\": %" PRIu32 ",\n  \"epoch_samples\": ",
                        s->world_size);
    e |= put_u64(&b, s->epoch_samples);
    e |= zpi_buf_printf(&b,
                        ",\n  \"remainder\": \"%s\",\n  \"settings_hash\": \"%016" PRIx64
                        "\",\n  \"settings\": {",
                        remainder_name(s->remainder), hash);
    /* one member per line, each value in the canonical compact form */
    const char *key;
    json_t *x;
    int first = 1;
    json_object_foreach(set, key, x)
    {
        e |= zpi_buf_puts(&b, first ? "\n    " : ",\n    ");
        e |= zpi_buf_put_json_str(&b, key);
        e |= zpi_buf_puts(&b, ": ");
        e |= put_compact(&b, x);
        first = 0;
    }
    e |= zpi_buf_puts(&b, first ? "},\n  \"parts\": [" : "\n  },\n  \"parts\": [");
    json_decref(set);
    for (size_t i = 0; i < s->n_parts && !e; i++) {
        json_t *chk = json_string(s->part_names[i]);
        if (!chk) {
            zpi_buf_free(&b);
            return zpi_err_set(err, ZP_ERR_INVALID, "parts[%zu].name: not UTF-8 text", i);
        }
        json_decref(chk);
        char num[40];
        fmt_real(num, sizeof num, s->part_weights[i]);
        e |= zpi_buf_puts(&b, i ? ",\n    {\"name\": " : "\n    {\"name\": ");
        e |= zpi_buf_put_json_str(&b, s->part_names[i]);
        e |= zpi_buf_printf(&b, ", \"weight\": %s}", num);
    }
    e |= zpi_buf_puts(&b, s->n_parts ? "\n  ],\n  \"ranks\": [\n" : "],\n  \"ranks\": [\n");
    for (size_t k = 0; k < s->n_ranks && !e; k++) {
        e |= put_rank(&b, &s->ranks[k]);
        e |= zpi_buf_puts(&b, k + 1 < s->n_ranks ? ",\n" : "\n");
    }
    e |= zpi_buf_puts(&b, "  ]\n}\n");
    if (e) {
        zpi_buf_free(&b);
        return st != ZP_OK ? st : zpi_err_set(err, ZP_ERR_NOMEM, "state: out of memory");
    }
    *out = b.p;
    if (len)
        *len = b.len;
    return ZP_OK;
}

/* ------------------------------------------------------------ parse */

/* A field's path for messages: prefix ("ranks[2]") + key ("position"). */
static void path_of(char *buf, size_t cap, const char *prefix, const char *key)
{
    if (!*prefix)
        zpi_fmt(buf, cap, "%s", key);
    else if (key[0] == '[')
        zpi_fmt(buf, cap, "%s%s", prefix, key);
    else
        zpi_fmt(buf, cap, "%s.%s", prefix, key);
}

static zp_status as_u64(json_t *v, const char *path, uint64_t max, uint64_t *out, zpi_err *err)
{
    ZPI_RETURN_ERR_IF(!v, err, ZP_ERR_FORMAT, "%s: missing", path);
    uint64_t x;
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        x = (uint64_t)json_integer_value(v);
    } else if (json_is_string(v) && json_string_value(v)[0] >= '0' &&
               json_string_value(v)[0] <= '9' &&
               zpi_parse_u64(json_string_value(v), 0, UINT64_MAX, 0, &x) == 0) {
        /* the string form of a large value */
    } else {
        return zpi_err_set(err, ZP_ERR_FORMAT, "%s: not an unsigned integer", path);
    }
    ZPI_RETURN_ERR_IF(x > max, err, ZP_ERR_FORMAT,
                      "%s: %" PRIu64 " is out of range (at most %" PRIu64 ")", path, x, max);
    *out = x;
    return ZP_OK;
}

static zp_status get_u64(json_t *o, const char *prefix, const char *key, uint64_t max,
                         uint64_t *out, zpi_err *err)
{
    char p[256];
    path_of(p, sizeof p, prefix, key);
    return as_u64(json_object_get(o, key), p, max, out, err);
}

static zp_status get_u32(json_t *o, const char *prefix, const char *key, uint32_t *out,
                         zpi_err *err)
{
    uint64_t v;
    ZPI_FORWARD_IF_ERR(get_u64(o, prefix, key, UINT32_MAX, &v, err));
    *out = (uint32_t)v;
    return ZP_OK;
}

static zp_status get_kind(json_t *o, const char *prefix, const char *key, json_type t,
                          const char *what, json_t **out, zpi_err *err)
{
    char p[256];
    path_of(p, sizeof p, prefix, key);
    json_t *v = json_object_get(o, key);
    ZPI_RETURN_ERR_IF(!v, err, ZP_ERR_FORMAT, "%s: missing", p);
    ZPI_RETURN_ERR_IF(json_typeof(v) != t, err, ZP_ERR_FORMAT, "%s: not %s", p, what);
    *out = v;
    return ZP_OK;
}

/* Refuses members not in `known` (NULL-terminated). */
static zp_status only_known(json_t *o, const char *prefix, const char *const *known, zpi_err *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        size_t i = 0;
        while (known[i] && strcmp(known[i], key) != 0)
            i++;
        if (!known[i]) {
            char p[256];
            path_of(p, sizeof p, prefix, key);
            return zpi_err_set(err, ZP_ERR_FORMAT, "%s: unknown field", p);
        }
    }
    return ZP_OK;
}

/* A [a, b] pair: b's bound is max_b, a's max_a. */
static zp_status get_pair(json_t *o, const char *prefix, const char *key, uint64_t max_a,
                          uint64_t *a, uint64_t *b, zpi_err *err)
{
    json_t *arr = NULL;
    ZPI_FORWARD_IF_ERR(get_kind(o, prefix, key, JSON_ARRAY, "an array of two numbers", &arr, err));
    char p[256], q[300];
    path_of(p, sizeof p, prefix, key);
    ZPI_RETURN_ERR_IF(json_array_size(arr) != 2, err, ZP_ERR_FORMAT,
                      "%s: not an array of two numbers", p);
    zpi_fmt(q, sizeof q, "%s[0]", p);
    ZPI_FORWARD_IF_ERR(as_u64(json_array_get(arr, 0), q, max_a, a, err));
    zpi_fmt(q, sizeof q, "%s[1]", p);
    return as_u64(json_array_get(arr, 1), q, UINT64_MAX, b, err);
}

static zp_status parse_u64_array(json_t *o, const char *prefix, const char *key, size_t n,
                                 uint64_t **out, zpi_err *err)
{
    json_t *arr = NULL;
    ZPI_FORWARD_IF_ERR(get_kind(o, prefix, key, JSON_ARRAY, "an array", &arr, err));
    char p[256], q[300];
    path_of(p, sizeof p, prefix, key);
    ZPI_RETURN_ERR_IF(json_array_size(arr) != n, err, ZP_ERR_FORMAT,
                      "%s: %zu values for %zu parts", p, json_array_size(arr), n);
    *out = alloc_n(n, sizeof(uint64_t));
    ZPI_RETURN_ERR_IF(!*out, err, ZP_ERR_NOMEM, "%s: out of memory", p);
    for (size_t i = 0; i < n; i++) {
        zpi_fmt(q, sizeof q, "%s[%zu]", p, i);
        ZPI_FORWARD_IF_ERR(as_u64(json_array_get(arr, i), q, UINT64_MAX, &(*out)[i], err));
    }
    return ZP_OK;
}

static zp_status parse_plan(json_t *o, const char *pp, zpi_epoch_plan *pl, zpi_err *err)
{
    static const char *const known[] = {"epoch", "spans", NULL};
    ZPI_RETURN_ERR_IF(!json_is_object(o), err, ZP_ERR_FORMAT, "%s: not an object", pp);
    ZPI_FORWARD_IF_ERR(only_known(o, pp, known, err));
    ZPI_FORWARD_IF_ERR(get_u32(o, pp, "epoch", &pl->epoch, err));
    json_t *arr = NULL;
    ZPI_FORWARD_IF_ERR(get_kind(o, pp, "spans", JSON_ARRAY, "an array", &arr, err));
    pl->spans = alloc_n(json_array_size(arr), sizeof(zpi_span));
    ZPI_RETURN_ERR_IF(!pl->spans, err, ZP_ERR_NOMEM, "%s: out of memory", pp);
    for (size_t j = 0; j < json_array_size(arr); j++) {
        char sp[300], q[320];
        zpi_fmt(sp, sizeof sp, "%s.spans[%zu]", pp, j);
        json_t *a = json_array_get(arr, j);
        size_t na = json_is_array(a) ? json_array_size(a) : 0;
        ZPI_RETURN_ERR_IF(na != 2 && na != 3, err, ZP_ERR_FORMAT,
                          "%s: not [start, count] or [start, count, token_offset]", sp);
        uint64_t v[3] = {0, 0, 0};
        for (size_t i = 0; i < na; i++) {
            zpi_fmt(q, sizeof q, "%s[%zu]", sp, i);
            ZPI_FORWARD_IF_ERR(as_u64(json_array_get(a, i), q, UINT64_MAX, &v[i], err));
        }
        pl->spans[j] = (zpi_span){.start = v[0], .count = v[1], .token_offset = v[2]};
        pl->n = j + 1;
    }
    return ZP_OK;
}

static zp_status parse_skip(json_t *o, const char *sp, zpi_skip *x, zpi_err *err)
{
    static const char *const known[] = {"batches", "samples", "tokens", "from", "to", NULL};
    ZPI_RETURN_ERR_IF(!json_is_object(o), err, ZP_ERR_FORMAT, "%s: not an object", sp);
    ZPI_FORWARD_IF_ERR(only_known(o, sp, known, err));
    ZPI_FORWARD_IF_ERR(get_pair(o, sp, "batches", UINT64_MAX, &x->first, &x->last, err));
    ZPI_FORWARD_IF_ERR(get_u64(o, sp, "samples", UINT64_MAX, &x->samples, err));
    ZPI_FORWARD_IF_ERR(get_u64(o, sp, "tokens", UINT64_MAX, &x->tokens, err));
    uint64_t e;
    ZPI_FORWARD_IF_ERR(get_pair(o, sp, "from", UINT32_MAX, &e, &x->from_position, err));
    x->from_epoch = (uint32_t)e;
    ZPI_FORWARD_IF_ERR(get_pair(o, sp, "to", UINT32_MAX, &e, &x->to_position, err));
    x->to_epoch = (uint32_t)e;
    return ZP_OK;
}

static zp_status parse_rank(json_t *o, const char *rp, size_t n_parts, zpi_rank_state *r,
                            zpi_err *err)
{
    static const char *const known[] = {"rank",         "next_batch",  "epoch",   "position",
                                        "token_offset", "carry",       "plans",   "part_samples",
                                        "part_tokens",  "skipped",     "counts",  NULL};
    ZPI_RETURN_ERR_IF(!json_is_object(o), err, ZP_ERR_FORMAT, "%s: not an object", rp);
    ZPI_FORWARD_IF_ERR(only_known(o, rp, known, err));
    ZPI_FORWARD_IF_ERR(get_u32(o, rp, "rank", &r->rank, err));
    ZPI_FORWARD_IF_ERR(get_u64(o, rp, "next_batch", UINT64_MAX, &r->next_batch, err));
    ZPI_FORWARD_IF_ERR(get_u32(o, rp, "epoch", &r->epoch, err));
    ZPI_FORWARD_IF_ERR(get_u64(o, rp, "position", UINT64_MAX, &r->position, err));
    ZPI_FORWARD_IF_ERR(get_u64(o, rp, "token_offset", UINT64_MAX, &r->token_offset, err));
    char p[300];
    json_t *c = json_object_get(o, "carry");
    path_of(p, sizeof p, rp, "carry");
    ZPI_RETURN_ERR_IF(!c, err, ZP_ERR_FORMAT, "%s: missing", p);
    ZPI_RETURN_ERR_IF(!json_is_boolean(c), err, ZP_ERR_FORMAT, "%s: not true or false", p);
    r->carry = json_is_true(c);

    json_t *arr = NULL;
    ZPI_FORWARD_IF_ERR(get_kind(o, rp, "plans", JSON_ARRAY, "an array", &arr, err));
    r->plans = alloc_n(json_array_size(arr), sizeof *r->plans);
    ZPI_RETURN_ERR_IF(!r->plans, err, ZP_ERR_NOMEM, "%s: out of memory", rp);
    for (size_t i = 0; i < json_array_size(arr); i++) {
        zpi_fmt(p, sizeof p, "%s.plans[%zu]", rp, i);
        r->n_plans = i + 1;
        ZPI_FORWARD_IF_ERR(parse_plan(json_array_get(arr, i), p, &r->plans[i], err));
    }
    r->n_parts = n_parts;
    ZPI_FORWARD_IF_ERR(parse_u64_array(o, rp, "part_samples", n_parts, &r->part_samples, err));
    ZPI_FORWARD_IF_ERR(parse_u64_array(o, rp, "part_tokens", n_parts, &r->part_tokens, err));

    ZPI_FORWARD_IF_ERR(get_kind(o, rp, "skipped", JSON_ARRAY, "an array", &arr, err));
    r->skips = alloc_n(json_array_size(arr), sizeof *r->skips);
    ZPI_RETURN_ERR_IF(!r->skips, err, ZP_ERR_NOMEM, "%s: out of memory", rp);
    for (size_t i = 0; i < json_array_size(arr); i++) {
        zpi_fmt(p, sizeof p, "%s.skipped[%zu]", rp, i);
        ZPI_FORWARD_IF_ERR(parse_skip(json_array_get(arr, i), p, &r->skips[i], err));
        r->n_skips = i + 1;
    }

    json_t *cnt;
    static const char *const cknown[] = {
#define X(f) #f,
        COUNT_FIELDS(X)
#undef X
            NULL};
    ZPI_FORWARD_IF_ERR(get_kind(o, rp, "counts", JSON_OBJECT, "an object", &cnt, err));
    path_of(p, sizeof p, rp, "counts");
    ZPI_FORWARD_IF_ERR(only_known(cnt, p, cknown, err));
#define X(f) ZPI_FORWARD_IF_ERR(get_u64(cnt, p, #f, UINT64_MAX, &r->counts.f, err));
    COUNT_FIELDS(X)
#undef X
    return ZP_OK;
}

static zp_status parse_hex64(const char *s, uint64_t *out)
{
    if (strlen(s) != 16)
        return ZP_ERR_FORMAT;
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return ZP_ERR_FORMAT;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return ZP_OK;
}

static zp_status parse_root(json_t *root, zpi_state *s, zpi_err *err)
{
    static const char *const known[] = {"version",       "seed",     "world_size", "epoch_samples",
                                        "remainder",     "settings_hash", "settings", "parts",
                                        "ranks",         NULL};
    ZPI_RETURN_ERR_IF(!json_is_object(root), err, ZP_ERR_FORMAT,
                      "not a state: the text is not a JSON object");
    json_t *v = json_object_get(root, "version");
    ZPI_RETURN_ERR_IF(!v, err, ZP_ERR_FORMAT, "version: missing (not a zephon state?)");
    ZPI_RETURN_ERR_IF(!json_is_integer(v), err, ZP_ERR_FORMAT, "version: not an integer");
    ZPI_RETURN_ERR_IF(json_integer_value(v) != ZP_STATE_VERSION, err, ZP_ERR_UNSUPPORTED,
                      "version %" JSON_INTEGER_FORMAT
                      ": this build reads state version %d only",
                      json_integer_value(v), ZP_STATE_VERSION);
    s->version = ZP_STATE_VERSION;
    ZPI_FORWARD_IF_ERR(only_known(root, "", known, err));
    ZPI_FORWARD_IF_ERR(get_u64(root, "", "seed", UINT64_MAX, &s->seed, err));
    ZPI_FORWARD_IF_ERR(get_u32(root, "", "world_size", &s->world_size, err));
    ZPI_RETURN_ERR_IF(s->world_size == 0, err, ZP_ERR_FORMAT, "world_size: 0: must be at least 1");
    ZPI_FORWARD_IF_ERR(get_u64(root, "", "epoch_samples", MAX_N, &s->epoch_samples, err));
    ZPI_RETURN_ERR_IF(s->epoch_samples == 0, err, ZP_ERR_FORMAT,
                      "epoch_samples: 0: must be at least 1");
    json_t *x;
    ZPI_FORWARD_IF_ERR(get_kind(root, "", "remainder", JSON_STRING, "a string", &x, err));
    if (!strcmp(json_string_value(x), "pad"))
        s->remainder = ZP_REMAINDER_PAD;
    else if (!strcmp(json_string_value(x), "drop"))
        s->remainder = ZP_REMAINDER_DROP;
    else
        return zpi_err_set(err, ZP_ERR_FORMAT, "remainder: \"%s\": not pad or drop",
                           json_string_value(x));
    uint64_t hash;
    ZPI_FORWARD_IF_ERR(get_kind(root, "", "settings_hash", JSON_STRING, "a string", &x, err));
    ZPI_RETURN_ERR_IF(parse_hex64(json_string_value(x), &hash) != ZP_OK, err, ZP_ERR_FORMAT,
                      "settings_hash: \"%s\": not 16 lowercase hex digits", json_string_value(x));
    ZPI_FORWARD_IF_ERR(get_kind(root, "", "settings", JSON_OBJECT, "an object", &x, err));
    ZPI_FORWARD_IF_ERR(canon_of(x, &s->settings, &s->settings_hash, err));
    ZPI_RETURN_ERR_IF(hash != s->settings_hash, err, ZP_ERR_FORMAT,
                      "settings_hash: %016" PRIx64
                      " does not match the settings (their hash is %016" PRIx64 ")",
                      hash, s->settings_hash);

    json_t *arr = NULL;
    ZPI_FORWARD_IF_ERR(get_kind(root, "", "parts", JSON_ARRAY, "an array", &arr, err));
    size_t np = json_array_size(arr);
    s->part_names = alloc_n(np, sizeof(char *));
    s->part_weights = alloc_n(np, sizeof(double));
    ZPI_RETURN_ERR_IF(!s->part_names || !s->part_weights, err, ZP_ERR_NOMEM,
                      "parts: out of memory");
    for (size_t i = 0; i < np; i++) {
        static const char *const pknown[] = {"name", "weight", NULL};
        char p[64], q[80];
        zpi_fmt(p, sizeof p, "parts[%zu]", i);
        json_t *po = json_array_get(arr, i);
        ZPI_RETURN_ERR_IF(!json_is_object(po), err, ZP_ERR_FORMAT, "%s: not an object", p);
        ZPI_FORWARD_IF_ERR(only_known(po, p, pknown, err));
        ZPI_FORWARD_IF_ERR(get_kind(po, p, "name", JSON_STRING, "a string", &x, err));
        ZPI_RETURN_ERR_IF(json_string_length(x) == 0, err, ZP_ERR_FORMAT, "%s.name: empty", p);
        s->part_names[i] = zpi_strdup(json_string_value(x));
        s->n_parts = i + 1;
        ZPI_RETURN_ERR_IF(!s->part_names[i], err, ZP_ERR_NOMEM, "%s.name: out of memory", p);
        json_t *w = json_object_get(po, "weight");
        zpi_fmt(q, sizeof q, "%s.weight", p);
        ZPI_RETURN_ERR_IF(!w, err, ZP_ERR_FORMAT, "%s: missing", q);
        ZPI_RETURN_ERR_IF(!json_is_number(w), err, ZP_ERR_FORMAT, "%s: not a number", q);
        double d = json_number_value(w);
        ZPI_RETURN_ERR_IF(!(d > 0 && d <= 1), err, ZP_ERR_FORMAT, "%s: %g: must be in (0, 1]", q,
                          d);
        s->part_weights[i] = d;
        for (size_t j = 0; j < i; j++)
            ZPI_RETURN_ERR_IF(!strcmp(s->part_names[j], s->part_names[i]), err, ZP_ERR_FORMAT,
                              "%s.name: \"%s\" is also parts[%zu]'s name", p, s->part_names[i],
                              j);
    }

    ZPI_FORWARD_IF_ERR(get_kind(root, "", "ranks", JSON_ARRAY, "an array", &arr, err));
    s->ranks = alloc_n(json_array_size(arr), sizeof *s->ranks);
    ZPI_RETURN_ERR_IF(!s->ranks, err, ZP_ERR_NOMEM, "ranks: out of memory");
    for (size_t k = 0; k < json_array_size(arr); k++) {
        char p[64];
        zpi_fmt(p, sizeof p, "ranks[%zu]", k);
        s->n_ranks = k + 1;
        ZPI_FORWARD_IF_ERR(parse_rank(json_array_get(arr, k), p, s->n_parts, &s->ranks[k], err));
    }
    return validate(s, ZP_ERR_FORMAT, err);
}

zp_status zpi_state_parse(const char *json, size_t len, zpi_state *out, zpi_err *err)
{
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return zpi_err_set(err, ZP_ERR_FORMAT, "not a state: not JSON: %s (line %d, column %d)",
                           je.text, je.line, je.column);
    zp_status st = parse_root(root, out, err);
    json_decref(root);
    if (st != ZP_OK)
        zpi_state_clear(out);
    return st;
}

/* ------------------------------------------------------------ settings */

static void put_value(zpi_buf *b, json_t *v)
{
    if (v)
        put_compact(b, v);
}

zp_status zpi_state_check_settings(const zpi_state *s, const char *settings, zpi_err *err)
{
    const char *st_set = s->settings ? s->settings : "";
    json_t *mine = load_object(st_set, strlen(st_set), "the state's settings", err);
    if (!mine)
        return ZP_ERR_INVALID;
    json_t *here = load_object(settings ? settings : "", settings ? strlen(settings) : 0,
                               "this pipeline's settings", err);
    if (!here) {
        json_decref(mine);
        return ZP_ERR_INVALID;
    }
    zpi_buf b = {0};
    size_t n = 0;
    const char *key;
    json_t *v;
    json_object_foreach(mine, key, v)
    {
        json_t *h = json_object_get(here, key);
        if (h && json_equal(v, h))
            continue;
        zpi_buf_puts(&b, n++ ? "; " : "");
        zpi_buf_printf(&b, "%s = ", key);
        put_value(&b, v);
        zpi_buf_puts(&b, " in the state, ");
        if (h)
            put_value(&b, h);
        else
            zpi_buf_puts(&b, "absent");
        zpi_buf_puts(&b, " here");
    }
    json_object_foreach(here, key, v)
    {
        if (json_object_get(mine, key))
            continue;
        zpi_buf_puts(&b, n++ ? "; " : "");
        zpi_buf_printf(&b, "%s absent in the state, ", key);
        put_value(&b, v);
        zpi_buf_puts(&b, " here");
    }
    json_decref(mine);
    json_decref(here);
    zp_status st = ZP_OK;
    if (n)
        st = zpi_err_set(err, ZP_ERR_MISMATCH, "the state was saved with other settings: %s",
                         b.p ? b.p : "(out of memory)");
    zpi_buf_free(&b);
    return st;
}

int zpi_state_settings_string(const zpi_state *s, const char *key, char *out, size_t cap)
{
    const char *set = s->settings ? s->settings : "";
    json_t *o = json_loadb(set, strlen(set), 0, NULL);
    const char *v = o && json_is_object(o) ? json_string_value(json_object_get(o, key)) : NULL;
    int ok = v && strlen(v) < cap;
    if (ok)
        memcpy(out, v, strlen(v) + 1);
    json_decref(o);
    return ok;
}

/* ------------------------------------------------------------ merge */

/* How b differs from a (a job-wide field), into msg; 0 when it does not. */
static int job_diff(const zpi_state *a, const zpi_state *b, char *msg, size_t cap)
{
    if (a->version != b->version)
        return zpi_fmt(msg, cap, "version %d, %d in", b->version, a->version), 1;
    if (a->seed != b->seed)
        return zpi_fmt(msg, cap, "seed %" PRIu64 ", %" PRIu64 " in", b->seed, a->seed), 1;
    if (a->world_size != b->world_size)
        return zpi_fmt(msg, cap, "world_size %" PRIu32 ", %" PRIu32 " in", b->world_size,
                       a->world_size),
               1;
    if (a->epoch_samples != b->epoch_samples)
        return zpi_fmt(msg, cap, "epoch_samples %" PRIu64 ", %" PRIu64 " in", b->epoch_samples,
                       a->epoch_samples),
               1;
    if (a->remainder != b->remainder)
        return zpi_fmt(msg, cap, "remainder %s, %s in", remainder_name(b->remainder),
                       remainder_name(a->remainder)),
               1;
    if (a->settings_hash != b->settings_hash || strcmp(a->settings, b->settings) != 0)
        return zpi_fmt(msg, cap,
                       "settings (hash %016" PRIx64 ": %.200s), hash %016" PRIx64 " (%.200s) in",
                       b->settings_hash, b->settings, a->settings_hash, a->settings),
               1;
    if (a->n_parts != b->n_parts)
        return zpi_fmt(msg, cap, "%zu parts, %zu in", b->n_parts, a->n_parts), 1;
    for (size_t i = 0; i < a->n_parts; i++)
        if (strcmp(a->part_names[i], b->part_names[i]) != 0 ||
            a->part_weights[i] != b->part_weights[i])
            return zpi_fmt(msg, cap, "part %zu = %s (weight %.17g), %s (weight %.17g) in", i,
                           b->part_names[i], b->part_weights[i], a->part_names[i],
                           a->part_weights[i]),
                   1;
    return 0;
}

zp_status zpi_state_merge(const zpi_state *const *in, size_t n, zpi_state *out, zpi_err *err)
{
    memset(out, 0, sizeof *out);
    ZPI_RETURN_ERR_IF(n == 0, err, ZP_ERR_INVALID, "merge: no states given");
    const zpi_state *a = in[0];
    ZPI_RETURN_ERR_IF(a->n_ranks == 0, err, ZP_ERR_INVALID, "merge: state 0 holds no rank");
    uint32_t w = a->world_size;
    const zpi_rank_state **by = alloc_n(w, sizeof *by);
    ZPI_RETURN_ERR_IF(!by, err, ZP_ERR_NOMEM, "merge: out of memory");
    zp_status st = ZP_OK;
    char msg[700];
    size_t total = 0;
    for (size_t i = 0; i < n && st == ZP_OK; i++) {
        const zpi_state *b = in[i];
        for (size_t k = 0; k < b->n_ranks && st == ZP_OK; k++) {
            const zpi_rank_state *r = &b->ranks[k];
            if (job_diff(a, b, msg, sizeof msg)) {
                st = zpi_err_set(err, ZP_ERR_MISMATCH,
                                 "rank %" PRIu32 "'s state differs from rank %" PRIu32
                                 "'s: %s rank %" PRIu32 "'s",
                                 r->rank, a->ranks[0].rank, msg, a->ranks[0].rank);
            } else if (r->next_batch != a->ranks[0].next_batch) {
                st = zpi_err_set(err, ZP_ERR_MISMATCH,
                                 "rank %" PRIu32 "'s state differs from rank %" PRIu32
                                 "'s: next_batch %" PRIu64 ", %" PRIu64 " in rank %" PRIu32
                                 "'s (the states were not saved after the same batch)",
                                 r->rank, a->ranks[0].rank, r->next_batch,
                                 a->ranks[0].next_batch, a->ranks[0].rank);
            } else if (r->rank >= w) {
                st = zpi_err_set(err, ZP_ERR_MISMATCH,
                                 "rank %" PRIu32 ": not a rank of a job of %" PRIu32, r->rank, w);
            } else if (by[r->rank]) {
                st = zpi_err_set(err, ZP_ERR_MISMATCH,
                                 "rank %" PRIu32 " appears twice (state %zu and an earlier one)",
                                 r->rank, i);
            } else {
                by[r->rank] = r;
                total++;
            }
        }
    }
    for (uint32_t r = 0; r < w && st == ZP_OK; r++)
        if (!by[r])
            st = zpi_err_set(err, ZP_ERR_MISMATCH,
                             "rank %" PRIu32 " is missing: a job of %" PRIu32
                             " ranks needs the state of each (%zu given)",
                             r, w, total);
    if (st == ZP_OK) {
        *out = *a;
        out->settings = zpi_strdup(a->settings);
        out->part_names = alloc_n(a->n_parts, sizeof(char *));
        out->part_weights = dup_n(a->part_weights, a->n_parts, sizeof(double));
        out->n_parts = 0;
        out->n_ranks = 0;
        out->ranks = alloc_n(w, sizeof *out->ranks);
        int bad = !out->settings || !out->part_names || !out->part_weights || !out->ranks;
        for (size_t i = 0; !bad && i < a->n_parts; i++) {
            out->part_names[i] = zpi_strdup(a->part_names[i]);
            out->n_parts = i + 1;
            bad = !out->part_names[i];
        }
        if (!bad)
            out->n_parts = a->n_parts;
        for (uint32_t r = 0; !bad && r < w; r++) {
            bad = zpi_rank_state_copy(&out->ranks[r], by[r]) != ZP_OK;
            if (!bad)
                out->n_ranks = r + 1;
        }
        if (bad) {
            zpi_state_clear(out);
            st = zpi_err_set(err, ZP_ERR_NOMEM, "merge: out of memory");
        }
    }
    free(by);
    return st;
}

/* ------------------------------------------------------------ elastic re-split */

typedef struct spanlist {
    zpi_span *v;
    size_t n, cap;
    uint64_t total;
} spanlist;

/* Appends [start, start + count) (nothing when count is 0), joining it to
 * the last span (when join is set) if it continues it and carries no token
 * offset. */
static int sl_push(spanlist *l, uint64_t start, uint64_t count, uint64_t tok, int join)
{
    if (!count)
        return 0;
    zpi_span *last = l->n ? &l->v[l->n - 1] : NULL;
    if (join && last && !tok && last->start + last->count == start) {
        last->count += count;
    } else {
        if (zpi_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v) != 0)
            return -1;
        l->v[l->n++] = (zpi_span){.start = start, .count = count, .token_offset = tok};
    }
    l->total += count;
    return 0;
}

/* Old rank r's remaining real positions of epoch e, appended to l. */
static int add_remaining(spanlist *l, const zpi_state *s, const zpi_rank_state *r, uint32_t e)
{
    if (r->epoch > e)
        return 0;
    const zpi_epoch_plan *p = find_plan(r, e);
    zpi_span def = {0, 0, 0};
    const zpi_span *sp = &def;
    size_t ns = 1;
    if (p) {
        sp = p->spans;
        ns = p->n;
    } else {
        zpi_state_default_range(s->epoch_samples, s->world_size, s->remainder, r->rank,
                                &def.start, &def.count);
    }
    uint64_t skip = r->epoch == e ? r->position : 0;
    int first = r->epoch == e;
    uint64_t n = s->epoch_samples;
    for (size_t i = 0; i < ns; i++) {
        uint64_t a = sp[i].start, c = sp[i].count, tok = sp[i].token_offset;
        if (skip >= c) {
            skip -= c;
            continue;
        }
        if (skip) {
            a += skip;
            c -= skip;
            tok = 0;
            skip = 0;
        }
        if (first && r->token_offset > tok)
            tok = r->token_offset;
        first = 0;
        if (a >= n)
            continue; /* padding: left out */
        if (c > n - a)
            c = n - a;
        if (sl_push(l, a, c, tok, 1) != 0)
            return -1;
    }
    return 0;
}

/* Positions [lo, hi) of the concatenation of `all`, appended to l; a piece
 * keeps its span's token offset when it starts with the span's first
 * sample. */
static int slice(spanlist *l, const spanlist *all, uint64_t lo, uint64_t hi)
{
    uint64_t off = 0;
    for (size_t i = 0; i < all->n && off < hi; i++) {
        const zpi_span *sp = &all->v[i];
        uint64_t a = off, b = off + sp->count;
        off = b;
        if (b <= lo)
            continue;
        uint64_t from = a > lo ? a : lo, to = b < hi ? b : hi;
        if (sl_push(l, sp->start + (from - a), to - from, from == a ? sp->token_offset : 0, 1) !=
            0)
            return -1;
    }
    return 0;
}

zp_status zpi_state_rank_plan(const zpi_state *s, uint32_t rank, uint32_t world_size,
                              zpi_rank_state *out, zpi_err *err)
{
    memset(out, 0, sizeof *out);
    ZPI_RETURN_ERR_IF(world_size == 0 || rank >= world_size, err, ZP_ERR_INVALID,
                      "rank %" PRIu32 " of %" PRIu32 ": not a rank of that world", rank,
                      world_size);
    ZPI_FORWARD_IF_ERR(validate(s, ZP_ERR_INVALID, err));
    if (world_size == s->world_size) {
        for (size_t k = 0; k < s->n_ranks; k++)
            if (s->ranks[k].rank == rank) {
                zp_status st = zpi_rank_state_copy(out, &s->ranks[k]);
                return st == ZP_OK ? ZP_OK
                                   : zpi_err_set(err, st, "state: out of memory (rank %" PRIu32
                                                          ")",
                                                 rank);
            }
    }
    if (s->n_ranks != s->world_size) {
        char held[64];
        if (s->n_ranks == 1)
            zpi_fmt(held, sizeof held, "rank %" PRIu32, s->ranks[0].rank);
        else
            zpi_fmt(held, sizeof held, "%zu ranks", s->n_ranks);
        if (world_size == s->world_size)
            return zpi_err_set(err, ZP_ERR_INVALID,
                               "the state holds %s of %" PRIu32 " only, not rank %" PRIu32
                               ": restore each rank's own state, or the job state of all %" PRIu32,
                               held, s->world_size, rank, s->world_size);
        return zpi_err_set(err, ZP_ERR_INVALID,
                           "the state holds %s of %" PRIu32 " only; restoring on %" PRIu32
                           " ranks needs the job state of all %" PRIu32,
                           held, s->world_size, world_size, s->world_size);
    }
    uint32_t e0 = UINT32_MAX, e1 = 0;
    for (size_t k = 0; k < s->n_ranks; k++) {
        const zpi_rank_state *r = &s->ranks[k];
        ZPI_RETURN_ERR_IF(r->next_batch != s->ranks[0].next_batch, err, ZP_ERR_INVALID,
                          "rank %" PRIu32 "'s next_batch %" PRIu64 " differs from rank %" PRIu32
                          "'s %" PRIu64 ": not a job state saved after one batch",
                          r->rank, r->next_batch, s->ranks[0].rank, s->ranks[0].next_batch);
        if (r->epoch < e0)
            e0 = r->epoch;
        if (r->epoch > e1)
            e1 = r->epoch;
        if (r->n_plans && r->plans[r->n_plans - 1].epoch > e1)
            e1 = r->plans[r->n_plans - 1].epoch;
    }
    zpi_rank_state o = {0};
    o.rank = rank;
    o.next_batch = s->ranks[0].next_batch;
    o.epoch = e0;
    o.n_parts = s->n_parts;
    o.part_samples = alloc_n(s->n_parts, sizeof(uint64_t));
    o.part_tokens = alloc_n(s->n_parts, sizeof(uint64_t));
    o.plans = alloc_n((size_t)(e1 - e0) + 1, sizeof *o.plans);
    o.skips = alloc_n(0, sizeof *o.skips);
    int bad = !o.part_samples || !o.part_tokens || !o.plans || !o.skips;
    uint64_t n = s->epoch_samples;
    for (uint64_t e = e0; !bad && e <= e1; e++) {
        spanlist all = {0}, mine = {0};
        for (size_t k = 0; !bad && k < s->n_ranks; k++)
            bad = add_remaining(&all, s, &s->ranks[k], (uint32_t)e) != 0;
        uint64_t l = all.total, w = world_size;
        uint64_t per = l / w + (s->remainder == ZP_REMAINDER_PAD && l % w ? 1 : 0);
        uint64_t lo = rank * per, hi = lo + per;
        if (lo > l)
            lo = l;
        if (hi > l)
            hi = l;
        if (!bad)
            bad = slice(&mine, &all, lo, hi) != 0;
        if (!bad && s->remainder == ZP_REMAINDER_PAD) {
            /* padding repeats the epoch's first samples, k counting up over
             * the ranks left short */
            uint64_t k0 = rank * per - lo;
            bad = sl_push(&mine, n + k0, per - (hi - lo), 0, 0) != 0;
        }
        free(all.v);
        zpi_epoch_plan *pl = &o.plans[o.n_plans++];
        pl->epoch = (uint32_t)e;
        pl->n = mine.n;
        pl->spans = mine.v ? mine.v : alloc_n(0, sizeof(zpi_span));
        bad |= !pl->spans;
    }
    if (!bad && rank == 0) {
        /* rank 0 carries the job's totals */
        for (size_t k = 0; k < s->n_ranks; k++) {
            const zpi_rank_state *r = &s->ranks[k];
            for (size_t i = 0; i < s->n_parts; i++) {
                o.part_samples[i] += r->part_samples[i];
                o.part_tokens[i] += r->part_tokens[i];
            }
#define X(f) o.counts.f += r->counts.f;
            COUNT_FIELDS(X)
#undef X
        }
        /* the skipped ranges of every rank, overlapping ones joined */
        size_t cap = 0;
        for (size_t k = 0; k < s->n_ranks; k++)
            cap += s->ranks[k].n_skips;
        free(o.skips);
        o.skips = alloc_n(cap, sizeof *o.skips);
        bad = !o.skips;
        for (size_t k = 0; !bad && k < s->n_ranks; k++)
            for (size_t i = 0; i < s->ranks[k].n_skips; i++)
                o.skips[o.n_skips++] = s->ranks[k].skips[i];
        /* sort by first (insertion: few ranges), then join */
        for (size_t i = 1; !bad && i < o.n_skips; i++)
            for (size_t j = i; j > 0 && o.skips[j].first < o.skips[j - 1].first; j--) {
                zpi_skip t = o.skips[j];
                o.skips[j] = o.skips[j - 1];
                o.skips[j - 1] = t;
            }
        size_t m = 0;
        for (size_t i = 0; !bad && i < o.n_skips; i++) {
            zpi_skip *x = &o.skips[i];
            zpi_skip *y = m ? &o.skips[m - 1] : NULL;
            if (y && x->first <= y->last) {
                if (x->last > y->last)
                    y->last = x->last;
                y->samples += x->samples;
                y->tokens += x->tokens;
                if (x->from_epoch < y->from_epoch ||
                    (x->from_epoch == y->from_epoch && x->from_position < y->from_position)) {
                    y->from_epoch = x->from_epoch;
                    y->from_position = x->from_position;
                }
                if (x->to_epoch > y->to_epoch ||
                    (x->to_epoch == y->to_epoch && x->to_position > y->to_position)) {
                    y->to_epoch = x->to_epoch;
                    y->to_position = x->to_position;
                }
            } else {
                o.skips[m++] = *x;
            }
        }
        o.n_skips = m;
    }
    if (bad) {
        zpi_rank_state_clear(&o);
        return zpi_err_set(err, ZP_ERR_NOMEM, "state: out of memory (re-split for rank %" PRIu32
                                              ")",
                           rank);
    }
    *out = o;
    return ZP_OK;
}

/* ------------------------------------------------------------ describe */

static void describe_counts(zpi_buf *b, const char *indent, const zp_pipeline_counts *c)
{
    zpi_buf_printf(b,
                   "%sdelivered: %" PRIu64 " batches, %" PRIu64 " samples (%" PRIu64
                   " padded), %" PRIu64 " tokens (%" PRIu64 " padding, %" PRIu64
                   " truncated); %" PRIu64 " bad records skipped, %" PRIu64 " filtered\n",
                   indent, c->batches, c->samples, c->padded, c->tokens, c->pad_tokens,
                   c->truncated_tokens, c->skipped, c->filtered);
}

static void describe_parts(zpi_buf *b, const zpi_state *s, const char *indent,
                           const uint64_t *samples, const uint64_t *tokens)
{
    uint64_t ts = 0, tt = 0;
    for (size_t i = 0; i < s->n_parts; i++) {
        ts += samples[i];
        tt += tokens[i];
    }
    for (size_t i = 0; i < s->n_parts; i++)
        zpi_buf_printf(b,
                       "%s%s: %" PRIu64 " samples (%.2f%%), %" PRIu64
                       " tokens (%.2f%%); weight %.4g%%\n",
                       indent, s->part_names[i], samples[i],
                       ts ? 100.0 * (double)samples[i] / (double)ts : 0.0, tokens[i],
                       tt ? 100.0 * (double)tokens[i] / (double)tt : 0.0,
                       100.0 * s->part_weights[i]);
}

/* Each part's pass at the rank's next draw: the draw's number in the
 * mixture (epoch x N + its place in the epoch's stream), the parts' draw
 * counts before it from the schedule of the state's weights, and the
 * parts' sizes from the settings. Left out when the settings do not say
 * the sizes. */
static void describe_passes(zpi_buf *b, const zpi_state *s, const zpi_rank_state *r)
{
    json_t *set = json_loads(s->settings ? s->settings : "", 0, NULL);
    json_t *parts = set ? json_object_get(set, "parts") : NULL;
    uint64_t *size = calloc(s->n_parts ? s->n_parts : 1, sizeof *size);
    uint64_t *cnt = calloc(s->n_parts ? s->n_parts : 1, sizeof *cnt);
    int ok = size && cnt && json_is_array(parts) && json_array_size(parts) == s->n_parts &&
             s->n_parts > 0 && s->epoch_samples > 0;
    for (size_t i = 0; ok && i < s->n_parts; i++) {
        json_t *n = json_object_get(json_array_get(parts, i), "samples");
        ok = json_is_integer(n) && json_integer_value(n) > 0;
        if (ok)
            size[i] = (uint64_t)json_integer_value(n);
    }
    /* the next sample's place in the epoch's stream */
    uint64_t g = 0, pos = r->position;
    const zpi_epoch_plan *p = ok ? find_plan(r, r->epoch) : NULL;
    if (p) {
        size_t k = 0;
        while (k < p->n && pos >= p->spans[k].count)
            pos -= p->spans[k++].count;
        ok = k < p->n;
        if (ok)
            g = p->spans[k].start + pos;
    } else if (ok) {
        uint64_t a, c;
        zpi_state_default_range(s->epoch_samples, s->world_size, s->remainder, r->rank, &a, &c);
        ok = pos < c;
        g = a + pos;
    }
    unsigned __int128 G = (unsigned __int128)r->epoch * s->epoch_samples + g % s->epoch_samples;
    ok = ok && G <= UINT64_MAX;
    zpi_mix *mix = NULL;
    zpi_err e = {0};
    if (ok && s->n_parts == 1)
        cnt[0] = (uint64_t)G;
    else if (ok)
        ok = zpi_mix_create(s->part_weights, (const char *const *)s->part_names, s->n_parts,
                            &mix, &e) == ZP_OK &&
             zpi_mix_counts(mix, (uint64_t)G, cnt) == ZP_OK;
    if (ok) {
        zpi_buf_printf(b, "  each part's pass at draw %" PRIu64 " of the mixture:",
                       (uint64_t)G);
        size_t show = s->n_parts < 16 ? s->n_parts : 16;
        for (size_t i = 0; i < show; i++)
            zpi_buf_printf(b, "%s %s pass %" PRIu64 " (%" PRIu64 " of %" PRIu64 " drawn)",
                           i ? ";" : "", s->part_names[i], cnt[i] / size[i], cnt[i] % size[i],
                           size[i]);
        zpi_buf_puts(b, s->n_parts > show ? "; ...\n" : "\n");
    }
    zpi_mix_destroy(mix);
    free(size);
    free(cnt);
    json_decref(set);
}

static void describe_rank(zpi_buf *b, const zpi_state *s, const zpi_rank_state *r)
{
    uint64_t cnt = rank_epoch_count(s, r, r->epoch);
    zpi_buf_printf(b,
                   "rank %" PRIu32 ": next batch %" PRIu64 "; epoch %" PRIu32 ", position %" PRIu64
                   " of %" PRIu64,
                   r->rank, r->next_batch, r->epoch, r->position, cnt);
    if (r->token_offset)
        zpi_buf_printf(b, " (%" PRIu64 " tokens of that sample already delivered)",
                       r->token_offset);
    zpi_buf_printf(b, "%s\n", r->carry ? "; the next row carries the last token over" : "");
    for (size_t i = 0; i < r->n_plans; i++) {
        const zpi_epoch_plan *p = &r->plans[i];
        zpi_buf_printf(b, "  epoch %" PRIu32 " plan: %" PRIu64 " positions in %zu span%s:",
                       p->epoch, plan_total(p), p->n, p->n == 1 ? "" : "s");
        size_t show = p->n < 8 ? p->n : 8;
        for (size_t j = 0; j < show; j++) {
            const zpi_span *sp = &p->spans[j];
            zpi_buf_printf(b, " %" PRIu64 "..%" PRIu64, sp->start, sp->start + sp->count - 1);
            if (sp->start >= s->epoch_samples)
                zpi_buf_puts(b, " (padding)");
            else if (sp->start + sp->count > s->epoch_samples)
                zpi_buf_printf(b, " (padding from %" PRIu64 ")", s->epoch_samples);
            if (sp->token_offset)
                zpi_buf_printf(b, " (from token %" PRIu64 ")", sp->token_offset);
        }
        zpi_buf_puts(b, p->n > show ? " ...\n" : "\n");
    }
    describe_passes(b, s, r);
    describe_counts(b, "  ", &r->counts);
    if (s->n_parts) {
        zpi_buf_puts(b, "  proportions so far:\n");
        describe_parts(b, s, "    ", r->part_samples, r->part_tokens);
    }
    for (size_t i = 0; i < r->n_skips; i++) {
        const zpi_skip *x = &r->skips[i];
        zpi_buf_printf(b,
                       "  skipped batches %" PRIu64 "..%" PRIu64 ": %" PRIu64 " samples, %" PRIu64
                       " tokens, from epoch %" PRIu32 " position %" PRIu64 " to epoch %" PRIu32
                       " position %" PRIu64 "\n",
                       x->first, x->last, x->samples, x->tokens, x->from_epoch, x->from_position,
                       x->to_epoch, x->to_position);
    }
}

zp_status zpi_state_describe(const zpi_state *s, char **out, zpi_err *err)
{
    *out = NULL;
    zpi_buf b = {0};
    int job = s->n_ranks == s->world_size && s->world_size > 1;
    zpi_buf_printf(&b, "zephon state, version %d: %s\n", s->version,
                   job ? "a job state (every rank)"
                       : s->n_ranks == 1 ? "the state of one rank" : "the state of some ranks");
    zpi_buf_printf(&b,
                   "seed %" PRIu64 "; world size %" PRIu32 "; %" PRIu64
                   " draws per epoch; remainder %s\n",
                   s->seed, s->world_size, s->epoch_samples, remainder_name(s->remainder));
    zpi_buf_printf(&b, "settings (hash %016" PRIx64 "):\n", s->settings_hash);
    json_t *set = s->settings ? json_loads(s->settings, JSON_REJECT_DUPLICATES, NULL) : NULL;
    if (json_is_object(set)) {
        const char *key;
        json_t *v;
        json_object_foreach(set, key, v)
        {
            zpi_buf_printf(&b, "  %s = ", key);
            put_compact(&b, v);
            zpi_buf_puts(&b, "\n");
        }
    }
    json_decref(set);
    if (s->n_parts) {
        zpi_buf_puts(&b, "parts:\n");
        for (size_t i = 0; i < s->n_parts; i++)
            zpi_buf_printf(&b, "  %s: weight %.6g\n", s->part_names[i], s->part_weights[i]);
    }
    for (size_t k = 0; k < s->n_ranks; k++)
        describe_rank(&b, s, &s->ranks[k]);
    if (s->n_ranks > 1) {
        zp_pipeline_counts c = {0};
        uint64_t *ps = alloc_n(s->n_parts, sizeof(uint64_t));
        uint64_t *pt = alloc_n(s->n_parts, sizeof(uint64_t));
        for (size_t k = 0; k < s->n_ranks; k++) {
            const zpi_rank_state *r = &s->ranks[k];
#define X(f) c.f += r->counts.f;
            COUNT_FIELDS(X)
#undef X
            for (size_t i = 0; ps && pt && i < s->n_parts; i++) {
                ps[i] += r->part_samples[i];
                pt[i] += r->part_tokens[i];
            }
        }
        zpi_buf_printf(&b, "all %zu ranks:\n", s->n_ranks);
        describe_counts(&b, "  ", &c);
        if (s->n_parts && ps && pt) {
            zpi_buf_puts(&b, "  proportions so far:\n");
            describe_parts(&b, s, "    ", ps, pt);
        }
        free(ps);
        free(pt);
    }
    if (!b.p || zpi_buf_puts(&b, "") != 0) {
        zpi_buf_free(&b);
        return zpi_err_set(err, ZP_ERR_NOMEM, "state: out of memory");
    }
    *out = b.p;
    return ZP_OK;
}
