/*
 * state_json.c - a pipeline state as JSON (state.h): render and parse (with
 * the validation of state.c), the settings' canonical form and hash, and
 * the check of a state's settings against a pipeline's. docs/state.md
 * describes the format.
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

#include "base/util.h"
#include "zephon/state_json.h"
#include "zephon/worksource.h"

/* Unsigned values at least this large are written as decimal strings (a
 * JSON integer is read as a signed 64-bit number). */
#define BIG ((uint64_t)INT64_MAX + 1u)
/* epoch_samples is below 2^63, so that a position N + k never overflows. */
#define MAX_N ((uint64_t)INT64_MAX)

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
    /* decimal digits by hand: a job state holds millions of them */
    char d[24];
    size_t n = sizeof d;
    int quote = v >= BIG;
    if (quote)
        d[--n] = '"';
    do {
        d[--n] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    if (quote)
        d[--n] = '"';
    return zpi_buf_append(b, d + n, sizeof d - n);
}

/* The compact canonical form of a JSON value (the settings' form). */
int zpi_state_put_compact(zpi_buf *b, json_t *v)
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
                zpi_buf_puts(b, ":") != 0 || zpi_state_put_compact(b, x) != 0)
                return -1;
            first = 0;
        }
        return zpi_buf_puts(b, "}");
    }
    case JSON_ARRAY:
        if (zpi_buf_puts(b, "[") != 0)
            return -1;
        for (size_t i = 0; i < json_array_size(v); i++)
            if ((i && zpi_buf_puts(b, ",") != 0) || zpi_state_put_compact(b, json_array_get(v, i)) != 0)
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
    if (zpi_state_put_compact(&b, o) != 0) {
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

/* 1 when a and b have the same canonical text (zpi_state_put_compact):
 * the same types, members (keys in the same order), strings, integers and
 * reals bit for bit. 0 may also be said of two values whose texts happen
 * to be equal (a real of another bit pattern that prints alike): the memo
 * below then only misses. */
static int same_canon(json_t *a, json_t *b)
{
    if (json_typeof(a) != json_typeof(b))
        return 0;
    switch (json_typeof(a)) {
    case JSON_OBJECT: {
        if (json_object_size(a) != json_object_size(b))
            return 0;
        void *ia = json_object_iter(a), *ib = json_object_iter(b);
        for (; ia && ib; ia = json_object_iter_next(a, ia), ib = json_object_iter_next(b, ib))
            if (strcmp(json_object_iter_key(ia), json_object_iter_key(ib)) != 0 ||
                !same_canon(json_object_iter_value(ia), json_object_iter_value(ib)))
                return 0;
        return !ia && !ib;
    }
    case JSON_ARRAY:
        if (json_array_size(a) != json_array_size(b))
            return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!same_canon(json_array_get(a, i), json_array_get(b, i)))
                return 0;
        return 1;
    case JSON_STRING: return strcmp(json_string_value(a), json_string_value(b)) == 0;
    case JSON_INTEGER: return json_integer_value(a) == json_integer_value(b);
    case JSON_REAL: {
        double x = json_real_value(a), y = json_real_value(b);
        return memcmp(&x, &y, sizeof x) == 0;
    }
    default: return 1; /* true, false, null: the type says all */
    }
}

void zpi_settings_memo_clear(zpi_settings_memo *m)
{
    if (!m)
        return;
    json_decref((json_t *)m->obj);
    free(m->canon);
    memset(m, 0, sizeof *m);
}

/* The canonical text and hash of the settings object o, from the memo when
 * it holds the same settings, else computed (and kept in the memo). */
static zp_status canon_memo(json_t *o, zpi_settings_memo *memo, char **out, uint64_t *hash,
                            zpi_err *err)
{
    if (!memo)
        return canon_of(o, out, hash, err);
    if (!memo->obj || !same_canon((json_t *)memo->obj, o)) {
        char *c = NULL;
        uint64_t h = 0;
        ZPI_FORWARD_IF_ERR(canon_of(o, &c, &h, err));
        zpi_settings_memo_clear(memo);
        memo->obj = json_incref(o);
        memo->canon = c;
        memo->hash = h;
    }
    *out = zpi_strdup(memo->canon);
    *hash = memo->hash;
    return *out ? ZP_OK : zpi_err_set(err, ZP_ERR_NOMEM, "settings: out of memory");
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

/* ------------------------------------------------------------ render */

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
    e |= zpi_buf_printf(b, ",\n      \"carry\": %s", r->carry ? "true" : "false");
    if (r->window_rows) {
        /* best-fit packing: rows of the window at `position` delivered
         * (written only when set: states saved before it stay the same) */
        e |= zpi_buf_puts(b, ",\n      \"window_rows\": ");
        e |= put_u64(b, r->window_rows);
        e |= zpi_buf_puts(b, ",\n      \"window_done\": [");
        for (size_t i = 0; i < r->n_window_done; i++) {
            e |= zpi_buf_puts(b, i ? ", [" : "[");
            e |= put_u64(b, r->window_done[2 * i]);
            e |= zpi_buf_puts(b, ", ");
            e |= put_u64(b, r->window_done[2 * i + 1]);
            e |= zpi_buf_puts(b, "]");
        }
        e |= zpi_buf_puts(b, "]");
    }
    if (r->balance_done) { /* (written only when set, as window_rows) */
        e |= zpi_buf_puts(b, ",\n      \"balance_done\": ");
        e |= put_u64(b, r->balance_done);
    }
    e |= zpi_buf_puts(b, ",\n      \"plans\": [");
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
    if (r->n_phases) {
        /* with a weight schedule: per phase, per part */
        e |= zpi_buf_puts(b, ",\n      \"phase_samples\": [");
        for (size_t k = 0; k < r->n_phases; k++) {
            e |= zpi_buf_puts(b, k ? ", " : "");
            e |= put_u64_array(b, r->phase_samples + k * r->n_parts, r->n_parts);
        }
        e |= zpi_buf_puts(b, "]");
    }
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
    if (r->n_cov) { /* the coverage digests, per epoch (absent when none) */
        e |= zpi_buf_puts(b, ",\n      \"coverage\": [");
        for (size_t i = 0; i < r->n_cov; i++) {
            const zpi_cov_epoch *c = &r->cov[i];
            e |= zpi_buf_printf(b, "%s\n        {\"epoch\": %" PRIu32 ", \"samples\": ",
                                i ? "," : "", c->epoch);
            e |= put_u64(b, c->c.count);
            e |= zpi_buf_printf(b, ", \"sum\": \"%016" PRIx64 "\", \"xor\": \"%016" PRIx64
                                   "\", \"padded\": ",
                                c->c.sum, c->c.xr);
            e |= put_u64(b, c->padded);
            e |= zpi_buf_puts(b, c->merged ? ", \"merged\": true}" : "}");
        }
        e |= zpi_buf_puts(b, "\n      ]");
    }
    e |= zpi_buf_puts(b, ",\n      \"counts\": {");
    const char *sep = "";
#define X(f)                                                                                       \
    e |= zpi_buf_printf(b, "%s\"" #f "\": ", sep);                                                 \
    e |= put_u64(b, r->counts.f);                                                                  \
    sep = ", ";
    COUNT_FIELDS(X)
#undef X
    if (r->counts.cut_documents) { /* only when set, as window_rows */
        e |= zpi_buf_puts(b, ", \"cut_documents\": ");
        e |= put_u64(b, r->counts.cut_documents);
    }
    e |= zpi_buf_puts(b, "}\n    }");
    return e ? -1 : 0;
}

zp_status zpi_state_render(const zpi_state *s, char **out, size_t *len, zpi_err *err)
{
    *out = NULL;
    if (len)
        *len = 0;
    ZPI_FORWARD_IF_ERR(zpi_state_validate(s, ZP_ERR_INVALID, err));
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
                        zpi_remainder_name(s->remainder), hash);
    /* one member per line, each value in the canonical compact form */
    const char *key;
    json_t *x;
    int first = 1;
    json_object_foreach(set, key, x)
    {
        e |= zpi_buf_puts(&b, first ? "\n    " : ",\n    ");
        e |= zpi_buf_put_json_str(&b, key);
        e |= zpi_buf_puts(&b, ": ");
        e |= zpi_state_put_compact(&b, x);
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
    e |= zpi_buf_puts(&b, s->n_parts ? "\n  ]," : "],");
    if (s->sched.n_phases > 1 || (s->sched.n_phases && s->sched.since)) {
        /* the weight schedule: only when there is one (states without one
         * read as before) */
        e |= zpi_buf_puts(&b, "\n  \"schedule\": {\"since\": ");
        e |= put_u64(&b, s->sched.since);
        e |= zpi_buf_puts(&b, ", \"phases\": [");
        for (size_t k = 0; k < s->sched.n_phases && !e; k++) {
            e |= zpi_buf_puts(&b, k ? ",\n    [" : "\n    [");
            e |= put_u64(&b, s->sched.start[k]);
            e |= zpi_buf_puts(&b, ", [");
            for (size_t i = 0; i < s->sched.n_parts; i++)
                e |= zpi_buf_printf(&b, i ? ", %" PRIu32 : "%" PRIu32,
                                    s->sched.w[k * s->sched.n_parts + i]);
            e |= zpi_buf_puts(&b, "]]");
        }
        e |= zpi_buf_puts(&b, "\n  ]},");
    }
    e |= zpi_buf_puts(&b, "\n  \"ranks\": [\n");
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
    uint64_t v = 0;
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
    *out = zpi_state_alloc_n(n, sizeof(uint64_t));
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
    pl->spans = zpi_state_alloc_n(json_array_size(arr), sizeof(zpi_span));
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

static zp_status parse_hex64(const char *s, uint64_t *out);

/* "coverage" (optional): [{"epoch": E, "samples": n, "sum": "16 hex",
 * "xor": "16 hex", "padded": n[, "merged": true]}, ...], epochs
 * ascending. */
static zp_status parse_coverage(json_t *o, const char *rp, zpi_rank_state *r, zpi_err *err)
{
    json_t *arr = json_object_get(o, "coverage");
    char p[300];
    path_of(p, sizeof p, rp, "coverage");
    ZPI_RETURN_ERR_IF(arr && !json_is_array(arr), err, ZP_ERR_FORMAT, "%s: not an array", p);
    r->cov = zpi_state_alloc_n(arr ? json_array_size(arr) : 0, sizeof *r->cov);
    ZPI_RETURN_ERR_IF(!r->cov, err, ZP_ERR_NOMEM, "%s: out of memory", rp);
    for (size_t i = 0; arr && i < json_array_size(arr); i++) {
        json_t *x = json_array_get(arr, i);
        char q[320];
        zpi_fmt(q, sizeof q, "%s[%zu]", p, i);
        static const char *const known[] = {"epoch", "samples", "sum", "xor", "padded", "merged",
                                            NULL};
        ZPI_RETURN_ERR_IF(!json_is_object(x), err, ZP_ERR_FORMAT, "%s: not an object", q);
        ZPI_FORWARD_IF_ERR(only_known(x, q, known, err));
        zpi_cov_epoch *c = &r->cov[i];
        ZPI_FORWARD_IF_ERR(get_u32(x, q, "epoch", &c->epoch, err));
        ZPI_FORWARD_IF_ERR(get_u64(x, q, "samples", UINT64_MAX, &c->c.count, err));
        ZPI_FORWARD_IF_ERR(get_u64(x, q, "padded", UINT64_MAX, &c->padded, err));
        json_t *mg = json_object_get(x, "merged"); /* optional: false when absent */
        ZPI_RETURN_ERR_IF(mg && !json_is_boolean(mg), err, ZP_ERR_FORMAT,
                          "%s.merged: not true or false", q);
        c->merged = mg && json_is_true(mg);
        static const char *const hx[] = {"sum", "xor"};
        for (int k = 0; k < 2; k++) {
            json_t *v = json_object_get(x, hx[k]);
            uint64_t *dst = k ? &c->c.xr : &c->c.sum;
            ZPI_RETURN_ERR_IF(!v || !json_is_string(v) ||
                                  parse_hex64(json_string_value(v), dst) != ZP_OK,
                              err, ZP_ERR_FORMAT, "%s.%s: not 16 lowercase hex digits", q, hx[k]);
        }
        ZPI_RETURN_ERR_IF(i > 0 && c->epoch <= r->cov[i - 1].epoch, err, ZP_ERR_FORMAT,
                          "%s: epoch %" PRIu32 " not above the one before", q, c->epoch);
        r->n_cov = i + 1;
    }
    return ZP_OK;
}

static zp_status parse_rank(json_t *o, const char *rp, size_t n_parts, zpi_rank_state *r,
                            zpi_err *err)
{
    static const char *const known[] = {"rank",         "next_batch",  "epoch",   "position",
                                        "token_offset", "carry",       "plans",   "part_samples",
                                        "part_tokens",  "skipped",     "counts",
                                        "phase_samples", "window_rows", "window_done",
                                        "balance_done", "coverage", NULL};
    ZPI_RETURN_ERR_IF(!json_is_object(o), err, ZP_ERR_FORMAT, "%s: not an object", rp);
    ZPI_FORWARD_IF_ERR(only_known(o, rp, known, err));
    ZPI_FORWARD_IF_ERR(get_u32(o, rp, "rank", &r->rank, err));
    ZPI_FORWARD_IF_ERR(get_u64(o, rp, "next_batch", UINT64_MAX, &r->next_batch, err));
    ZPI_FORWARD_IF_ERR(get_u32(o, rp, "epoch", &r->epoch, err));
    ZPI_FORWARD_IF_ERR(get_u64(o, rp, "position", UINT64_MAX, &r->position, err));
    ZPI_FORWARD_IF_ERR(get_u64(o, rp, "token_offset", UINT64_MAX, &r->token_offset, err));
    if (json_object_get(o, "window_rows")) /* optional: 0 when absent */
        ZPI_FORWARD_IF_ERR(get_u64(o, rp, "window_rows", UINT64_MAX, &r->window_rows, err));
    if (json_object_get(o, "balance_done")) /* optional: 0 when absent */
        ZPI_FORWARD_IF_ERR(
            get_u64(o, rp, "balance_done", ZP_BALANCE_WINDOW_MAX - 1, &r->balance_done, err));
    char p[300];
    json_t *wd = json_object_get(o, "window_done"); /* optional, with window_rows */
    path_of(p, sizeof p, rp, "window_done");
    ZPI_RETURN_ERR_IF(wd && !json_is_array(wd), err, ZP_ERR_FORMAT, "%s: not an array", p);
    ZPI_RETURN_ERR_IF(wd && !r->window_rows, err, ZP_ERR_FORMAT,
                      "%s: documents of a best-fit window, but no window_rows", p);
    r->window_done = zpi_state_alloc_n(2 * (wd ? json_array_size(wd) : 0), sizeof(uint64_t));
    ZPI_RETURN_ERR_IF(!r->window_done, err, ZP_ERR_NOMEM, "%s: out of memory", rp);
    for (size_t i = 0; wd && i < json_array_size(wd); i++) {
        json_t *x = json_array_get(wd, i);
        char q[320];
        zpi_fmt(q, sizeof q, "%s[%zu]", p, i);
        ZPI_RETURN_ERR_IF(!json_is_array(x) || json_array_size(x) != 2, err, ZP_ERR_FORMAT,
                          "%s: not [offset, tokens]", q);
        uint64_t k, t;
        ZPI_FORWARD_IF_ERR(as_u64(json_array_get(x, 0), q, UINT64_MAX, &k, err));
        ZPI_FORWARD_IF_ERR(as_u64(json_array_get(x, 1), q, UINT64_MAX, &t, err));
        ZPI_RETURN_ERR_IF(i > 0 && k <= r->window_done[2 * i - 2], err, ZP_ERR_FORMAT,
                          "%s: offset %" PRIu64 " not above the one before", q, k);
        r->window_done[2 * i] = k;
        r->window_done[2 * i + 1] = t;
        r->n_window_done = i + 1;
    }
    json_t *c = json_object_get(o, "carry");
    path_of(p, sizeof p, rp, "carry");
    ZPI_RETURN_ERR_IF(!c, err, ZP_ERR_FORMAT, "%s: missing", p);
    ZPI_RETURN_ERR_IF(!json_is_boolean(c), err, ZP_ERR_FORMAT, "%s: not true or false", p);
    r->carry = json_is_true(c);

    json_t *arr = NULL;
    ZPI_FORWARD_IF_ERR(get_kind(o, rp, "plans", JSON_ARRAY, "an array", &arr, err));
    r->plans = zpi_state_alloc_n(json_array_size(arr), sizeof *r->plans);
    ZPI_RETURN_ERR_IF(!r->plans, err, ZP_ERR_NOMEM, "%s: out of memory", rp);
    for (size_t i = 0; i < json_array_size(arr); i++) {
        zpi_fmt(p, sizeof p, "%s.plans[%zu]", rp, i);
        r->n_plans = i + 1;
        ZPI_FORWARD_IF_ERR(parse_plan(json_array_get(arr, i), p, &r->plans[i], err));
    }
    r->n_parts = n_parts;
    ZPI_FORWARD_IF_ERR(parse_u64_array(o, rp, "part_samples", n_parts, &r->part_samples, err));
    ZPI_FORWARD_IF_ERR(parse_u64_array(o, rp, "part_tokens", n_parts, &r->part_tokens, err));
    json_t *phs = json_object_get(o, "phase_samples");
    if (phs) {
        path_of(p, sizeof p, rp, "phase_samples");
        ZPI_RETURN_ERR_IF(!json_is_array(phs) || json_array_size(phs) > ZPI_SCHED_MAX_PHASES,
                          err, ZP_ERR_FORMAT, "%s: not an array of at most %u phases", p,
                          ZPI_SCHED_MAX_PHASES);
        const size_t m = json_array_size(phs);
        r->phase_samples = zpi_state_alloc_n(m * n_parts, sizeof(uint64_t));
        ZPI_RETURN_ERR_IF(!r->phase_samples, err, ZP_ERR_NOMEM, "%s: out of memory", p);
        r->n_phases = m;
        for (size_t k = 0; k < m; k++) {
            char q[340];
            uint64_t *row = NULL;
            zpi_fmt(q, sizeof q, "[%zu]", k);
            json_t *wrap = json_pack("{s:O}", q, json_array_get(phs, k));
            zp_status pst = wrap ? parse_u64_array(wrap, p, q, n_parts, &row, err)
                                 : zpi_err_set(err, ZP_ERR_NOMEM, "%s: out of memory", p);
            json_decref(wrap);
            if (pst != ZP_OK) {
                free(row);
                return pst;
            }
            memcpy(r->phase_samples + k * n_parts, row, n_parts * sizeof *row);
            free(row);
        }
    }

    ZPI_FORWARD_IF_ERR(get_kind(o, rp, "skipped", JSON_ARRAY, "an array", &arr, err));
    r->skips = zpi_state_alloc_n(json_array_size(arr), sizeof *r->skips);
    ZPI_RETURN_ERR_IF(!r->skips, err, ZP_ERR_NOMEM, "%s: out of memory", rp);
    for (size_t i = 0; i < json_array_size(arr); i++) {
        zpi_fmt(p, sizeof p, "%s.skipped[%zu]", rp, i);
        ZPI_FORWARD_IF_ERR(parse_skip(json_array_get(arr, i), p, &r->skips[i], err));
        r->n_skips = i + 1;
    }

    ZPI_FORWARD_IF_ERR(parse_coverage(o, rp, r, err));

    json_t *cnt;
    static const char *const cknown[] = {
#define X(f) #f,
        COUNT_FIELDS(X)
#undef X
            "cut_documents", NULL};
    ZPI_FORWARD_IF_ERR(get_kind(o, rp, "counts", JSON_OBJECT, "an object", &cnt, err));
    path_of(p, sizeof p, rp, "counts");
    ZPI_FORWARD_IF_ERR(only_known(cnt, p, cknown, err));
#define X(f) ZPI_FORWARD_IF_ERR(get_u64(cnt, p, #f, UINT64_MAX, &r->counts.f, err));
    COUNT_FIELDS(X)
#undef X
    if (json_object_get(cnt, "cut_documents")) /* optional: 0 when absent */
        ZPI_FORWARD_IF_ERR(
            get_u64(cnt, p, "cut_documents", UINT64_MAX, &r->counts.cut_documents, err));
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

/* "schedule": {"since": C, "phases": [[start, [w, ...]], ...]}: phase 0
 * at draw 0, starts ascending, one positive integer weight per part with a
 * total of at most 2^24. */
static zp_status parse_schedule(json_t *o, zpi_state *s, zpi_err *err)
{
    static const char *const known[] = {"since", "phases", NULL};
    ZPI_RETURN_ERR_IF(!json_is_object(o), err, ZP_ERR_FORMAT, "schedule: not an object");
    ZPI_FORWARD_IF_ERR(only_known(o, "schedule", known, err));
    ZPI_RETURN_ERR_IF(s->n_parts < 2, err, ZP_ERR_FORMAT,
                      "schedule: a weight schedule needs 2 parts or more (the state has %zu)",
                      s->n_parts);
    json_t *arr;
    ZPI_FORWARD_IF_ERR(get_kind(o, "schedule", "phases", JSON_ARRAY, "an array", &arr, err));
    const size_t m = json_array_size(arr), np = s->n_parts;
    ZPI_RETURN_ERR_IF(m == 0 || m > ZPI_SCHED_MAX_PHASES, err, ZP_ERR_FORMAT,
                      "schedule.phases: %zu phases: must be 1 .. %u", m, ZPI_SCHED_MAX_PHASES);
    zpi_sched *sc = &s->sched;
    sc->start = zpi_state_alloc_n(m, sizeof *sc->start);
    sc->w = zpi_state_alloc_n(m * np, sizeof *sc->w);
    ZPI_RETURN_ERR_IF(!sc->start || !sc->w, err, ZP_ERR_NOMEM, "schedule: out of memory");
    sc->n_parts = np;
    sc->n_phases = m;
    ZPI_FORWARD_IF_ERR(get_u64(o, "schedule", "since", UINT64_MAX, &sc->since, err));
    for (size_t k = 0; k < m; k++) {
        char p[64];
        zpi_fmt(p, sizeof p, "schedule.phases[%zu]", k);
        json_t *ph = json_array_get(arr, k);
        ZPI_RETURN_ERR_IF(!json_is_array(ph) || json_array_size(ph) != 2 ||
                              !json_is_array(json_array_get(ph, 1)),
                          err, ZP_ERR_FORMAT, "%s: not [start, [weights]]", p);
        char q[80];
        zpi_fmt(q, sizeof q, "%s[0]", p);
        ZPI_FORWARD_IF_ERR(as_u64(json_array_get(ph, 0), q, UINT64_MAX, &sc->start[k], err));
        ZPI_RETURN_ERR_IF(k == 0 && sc->start[0] != 0, err, ZP_ERR_FORMAT,
                          "%s: starts at draw %" PRIu64 ": the first phase starts at 0", p,
                          sc->start[0]);
        ZPI_RETURN_ERR_IF(k > 0 && sc->start[k] <= sc->start[k - 1], err, ZP_ERR_FORMAT,
                          "%s: starts at draw %" PRIu64 ", not after the phase before (%" PRIu64
                          ")",
                          p, sc->start[k], sc->start[k - 1]);
        json_t *wa = json_array_get(ph, 1);
        ZPI_RETURN_ERR_IF(json_array_size(wa) != np, err, ZP_ERR_FORMAT,
                          "%s: %zu weights for %zu parts", p, json_array_size(wa), np);
        uint64_t t = 0;
        for (size_t i = 0; i < np; i++) {
            uint64_t x;
            zpi_fmt(q, sizeof q, "%s[1][%zu]", p, i);
            ZPI_FORWARD_IF_ERR(as_u64(json_array_get(wa, i), q, 1u << 24, &x, err));
            ZPI_RETURN_ERR_IF(x == 0, err, ZP_ERR_FORMAT, "%s: 0: must be at least 1", q);
            sc->w[k * np + i] = (uint32_t)x;
            t += x;
        }
        ZPI_RETURN_ERR_IF(t > (1u << 24), err, ZP_ERR_FORMAT,
                          "%s: weights total %" PRIu64 ": at most 16777216", p, t);
    }
    ZPI_RETURN_ERR_IF(sc->since > 0 && sc->start[zpi_sched_phase_at(sc, sc->since)] != sc->since,
                      err, ZP_ERR_FORMAT,
                      "schedule.since: %" PRIu64 ": no phase starts there", sc->since);
    return ZP_OK;
}

static zp_status parse_root(json_t *root, zpi_settings_memo *memo, zpi_state *s, zpi_err *err)
{
    static const char *const known[] = {"version",       "seed",     "world_size", "epoch_samples",
                                        "remainder",     "settings_hash", "settings", "parts",
                                        "ranks",         "schedule", NULL};
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
    ZPI_FORWARD_IF_ERR(canon_memo(x, memo, &s->settings, &s->settings_hash, err));
    ZPI_RETURN_ERR_IF(hash != s->settings_hash, err, ZP_ERR_FORMAT,
                      "settings_hash: %016" PRIx64
                      " does not match the settings (their hash is %016" PRIx64 ")",
                      hash, s->settings_hash);

    json_t *arr = NULL;
    ZPI_FORWARD_IF_ERR(get_kind(root, "", "parts", JSON_ARRAY, "an array", &arr, err));
    size_t np = json_array_size(arr);
    s->part_names = zpi_state_alloc_n(np, sizeof(char *));
    s->part_weights = zpi_state_alloc_n(np, sizeof(double));
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
    }
    /* names once each: zpi_state_validate() below (one linear pass) */

    if (json_object_get(root, "schedule"))
        ZPI_FORWARD_IF_ERR(parse_schedule(json_object_get(root, "schedule"), s, err));

    ZPI_FORWARD_IF_ERR(get_kind(root, "", "ranks", JSON_ARRAY, "an array", &arr, err));
    s->ranks = zpi_state_alloc_n(json_array_size(arr), sizeof *s->ranks);
    ZPI_RETURN_ERR_IF(!s->ranks, err, ZP_ERR_NOMEM, "ranks: out of memory");
    for (size_t k = 0; k < json_array_size(arr); k++) {
        char p[64];
        zpi_fmt(p, sizeof p, "ranks[%zu]", k);
        s->n_ranks = k + 1;
        ZPI_FORWARD_IF_ERR(parse_rank(json_array_get(arr, k), p, s->n_parts, &s->ranks[k], err));
    }
    return zpi_state_validate(s, ZP_ERR_FORMAT, err);
}

zp_status zpi_state_parse(const char *json, size_t len, zpi_state *out, zpi_err *err)
{
    return zpi_state_parse_memo(json, len, NULL, out, err);
}

zp_status zpi_state_parse_memo(const char *json, size_t len, zpi_settings_memo *memo,
                               zpi_state *out, zpi_err *err)
{
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return zpi_err_set(err, ZP_ERR_FORMAT, "not a state: not JSON: %s (line %d, column %d)",
                           je.text, je.line, je.column);
    zp_status st = parse_root(root, memo, out, err);
    json_decref(root);
    if (st != ZP_OK)
        zpi_state_clear(out);
    return st;
}

zp_status zpi_state_parse_ranks_of(const zpi_state *job, const char *tail, size_t len,
                                   zpi_state *out, zpi_err *err)
{
    memset(out, 0, sizeof *out);
    char *doc = malloc(len + 1);
    ZPI_RETURN_ERR_IF(!doc, err, ZP_ERR_NOMEM, "state: out of memory");
    doc[0] = '{';
    memcpy(doc + 1, tail, len);
    json_error_t je;
    json_t *root = json_loadb(doc, len + 1, JSON_REJECT_DUPLICATES, &je);
    free(doc);
    json_t *arr = json_object_get(root, "ranks");
    zp_status st = ZP_OK;
    if (!json_is_object(root) || json_object_size(root) != 1 || !json_is_array(arr)) {
        /* not the text after the job-wide members: the caller parses it whole */
        json_decref(root);
        return zpi_err_set(err, ZP_ERR_FORMAT, "state: no \"ranks\" member alone at its end");
    }
    /* the job-wide fields are job's own (borrowed: job outlives out) */
    zpi_state *s = out;
    *s = *job;
    s->borrowed = 1;
    s->n_ranks = 0;
    s->ranks = zpi_state_alloc_n(json_array_size(arr), sizeof *s->ranks);
    if (!s->ranks)
        st = zpi_err_set(err, ZP_ERR_NOMEM, "state: out of memory");
    for (size_t k = 0; k < json_array_size(arr) && st == ZP_OK; k++) {
        char p[64];
        zpi_fmt(p, sizeof p, "ranks[%zu]", k);
        s->n_ranks = k + 1;
        st = parse_rank(json_array_get(arr, k), p, s->n_parts, &s->ranks[k], err);
    }
    json_decref(root);
    if (st == ZP_OK)
        st = zpi_state_validate(s, ZP_ERR_FORMAT, err);
    if (st != ZP_OK)
        zpi_state_clear(out);
    return st;
}

/* ------------------------------------------------------------ settings */

static void put_value(zpi_buf *b, json_t *v)
{
    if (v)
        zpi_state_put_compact(b, v);
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

