/*
 * record.c - the record handle given to map_transform callbacks.
 *
 * A zp_record lives on the calling task's stack for the duration of one
 * callback. It views record i of a chunk; changes go into the chunk's
 * arenas (so earlier pointers into them may move: the header documents that
 * returned pointers are valid until the record is changed).
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ops/operators.h"

struct zp_record {
    const zpi_op_env *env;
    zpi_worker *w;
    zpi_chunk *c;
    size_t i;
    int parsed; /* w->json holds this record's current JSON */
    char *err;
    size_t errcap;
};

const zp_sample *zp_record_sample(const zp_record *rec) { return &rec->c->samples[rec->i]; }

void zp_record_begin(zp_record *rec)
{
    if (rec && rec->w) {
        const zp_sample *s = &rec->c->samples[rec->i];
        zpi_act_item(&rec->w->act, ZP_TASK_RUNNING, s->shard, s->record);
    }
}

const char *zp_record_json(const zp_record *rec, size_t *len)
{
    const zpi_rec *r = &rec->c->recs[rec->i];
    if (len)
        *len = r->json_len;
    return rec->c->json + r->json_off;
}

static zp_status ensure_parsed(zp_record *rec)
{
    if (rec->parsed && rec->w->json_of == rec)
        return ZP_OK;
    const zpi_rec *r = &rec->c->recs[rec->i];
    zpi_err jerr;
    zp_status st = zpi_json_parse(rec->w->json, rec->c->json + r->json_off, r->json_len, &jerr);
    if (st != ZP_OK) {
        zp_record_error(rec, "record JSON: %s", jerr.msg);
        return st;
    }
    rec->parsed = 1;
    rec->w->json_of = rec;
    return ZP_OK;
}

zp_status zp_record_get_string(zp_record *rec, const char *key, const char **s, size_t *len)
{
    if (!rec || !key || !s || !len)
        return ZP_ERR_INVALID;
    zp_status st = ensure_parsed(rec);
    if (st != ZP_OK)
        return st;
    return zpi_json_get_string(rec->w->json, key, s, len);
}

zp_status zp_record_text(zp_record *rec, const char **s, size_t *len)
{
    const zpi_rec *r = &rec->c->recs[rec->i];
    if (r->flags & ZPI_REC_TEXT) {
        *s = rec->c->text + r->text_off;
        *len = r->text_len;
        return ZP_OK;
    }
    const char *field = rec->env->tok_field ? rec->env->tok_field : "text";
    return zp_record_get_string(rec, field, s, len);
}

/* Append s to an arena; s may point into that arena (it is copied aside
 * first, since the append may move the arena). */
static zp_status arena_set(char **buf, size_t *len, size_t *cap, const char *s, size_t n,
                           uint64_t *off)
{
    char *tmp = NULL;
    if (n && *buf && s >= *buf && s < *buf + *cap) {
        tmp = malloc(n);
        if (!tmp)
            return ZP_ERR_NOMEM;
        memcpy(tmp, s, n);
        s = tmp;
    }
    zp_status st = zpi_arena_append(buf, len, cap, s, n, off);
    free(tmp);
    return st;
}

zp_status zp_record_set_text(zp_record *rec, const char *s, size_t len)
{
    zpi_chunk *c = rec->c;
    zpi_rec *r = &c->recs[rec->i];
    uint64_t off;
    zp_status st = arena_set(&c->text, &c->text_len, &c->text_cap, s, len, &off);
    if (st != ZP_OK)
        return st;
    r->text_off = off;
    r->text_len = len;
    r->flags |= ZPI_REC_TEXT | ZPI_REC_TEXT_USER;
    return ZP_OK;
}

zp_status zp_record_set_json(zp_record *rec, const char *s, size_t len)
{
    zpi_chunk *c = rec->c;
    zpi_rec *r = &c->recs[rec->i];
    uint64_t off;
    zp_status st = arena_set(&c->json, &c->json_len, &c->json_cap, s, len, &off);
    if (st != ZP_OK)
        return st;
    r->json_off = off;
    r->json_len = len;
    if (!(r->flags & ZPI_REC_TEXT_USER))
        r->flags &= ~(uint32_t)ZPI_REC_TEXT; /* re-read the field from the new JSON */
    rec->parsed = 0;
    return ZP_OK;
}

void zp_record_drop(zp_record *rec)
{
    zpi_rec *r = &rec->c->recs[rec->i];
    if (!(r->flags & ZPI_REC_DROP)) {
        r->flags |= ZPI_REC_DROP;
        rec->c->filtered++;
    }
}

void zp_record_error(zp_record *rec, const char *fmt, ...)
{
    if (!rec || !rec->err || rec->err[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    zpi_vfmt(rec->err, rec->errcap, fmt, ap);
    va_end(ap);
}

/* Prefix a record-level message with where the record lives; returns code. */
static zp_status name_record(const zpi_op_env *env, const zpi_chunk *c, size_t i, const char *what,
                             const char *msg, zp_status code, zpi_err *err)
{
    const zp_sample *s = &c->samples[i];
    return zpi_err_set(err, code, "shard '%s' line %llu (record %llu): %s%s%s",
                       zp_dataset_shard_name(env->ds, s->shard), (unsigned long long)s->record + 1,
                       (unsigned long long)s->record, what, *msg ? ": " : "", msg);
}

/* The message of map op failing with s on record i (the callback's msg
 * after where the record lives) into err; the status the record gets. */
static zp_status map_failed(const zpi_op_env *env, const zpi_op *op, const zpi_chunk *c, size_t i,
                            zp_status s, const char *msg, zpi_err *err)
{
    char what[64];
    zpi_fmt(what, sizeof what, "%s failed (%s)", op->name, zp_status_str(s));
    return name_record(env, c, i, what, msg, s == ZP_ERR_NOMEM ? s : ZP_ERR_CALLBACK, err);
}

zp_status zpi_record_map(const zpi_op_env *env, const zpi_op *op, zpi_worker *w, zpi_chunk *c,
                         size_t i, zpi_err *err)
{
    char msg[ZPI_ERRMAX];
    msg[0] = '\0';
    zp_record rec = {.env = env, .w = w, .c = c, .i = i, .parsed = 0, .err = msg, .errcap = sizeof msg};
    zp_status s = op->fn(op->user, &rec);
    if (s == ZP_OK || s == ZP_END)
        return ZP_OK;
    return map_failed(env, op, c, i, s, msg, err);
}

/* A worker's arrays for batch maps, grown to the largest chunk seen. */
typedef struct zpi_batch_scratch {
    size_t cap;
    zp_record *recs;
    zp_record **ptrs;
    zp_status *st;
    char (*msgs)[256];
} zpi_batch_scratch;

void zpi_record_scratch_free(zpi_worker *w)
{
    zpi_batch_scratch *b = w->bs;
    if (!b)
        return;
    free(b->recs);
    free(b->ptrs);
    free(b->st);
    free(b->msgs);
    free(b);
    w->bs = NULL;
}

static zpi_batch_scratch *scratch_for(zpi_worker *w, size_t n)
{
    if (w->bs && w->bs->cap >= n)
        return w->bs;
    zpi_record_scratch_free(w);
    zpi_batch_scratch *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    w->bs = b;
    b->recs = calloc(n, sizeof *b->recs);
    b->ptrs = calloc(n, sizeof *b->ptrs);
    b->st = calloc(n, sizeof *b->st);
    b->msgs = calloc(n, sizeof *b->msgs);
    if (!b->recs || !b->ptrs || !b->st || !b->msgs) {
        zpi_record_scratch_free(w);
        return NULL;
    }
    b->cap = n;
    return b;
}

void zpi_record_map_batch(const zpi_op_env *env, const zpi_op *op, zpi_worker *w, zpi_chunk *c)
{
    zpi_batch_scratch *b = scratch_for(w, c->n ? c->n : 1);
    if (!b) {
        zpi_chunk_fail(c, ZP_ERR_NOMEM, "%s: out of memory for %zu records", op->name, c->n);
        return;
    }
    size_t n = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (c->recs[i].flags & (ZPI_REC_SKIP | ZPI_REC_DROP))
            continue;
        b->msgs[n][0] = '\0';
        b->recs[n] = (zp_record){.env = env, .w = w, .c = c, .i = i, .parsed = 0,
                                 .err = b->msgs[n], .errcap = sizeof b->msgs[n]};
        b->ptrs[n] = &b->recs[n];
        b->st[n] = ZP_OK;
        n++;
    }
    if (n == 0)
        return;
    /* The records share the worker's one parser: ensure_parsed re-parses a
     * record when another one was parsed since (w->json_of). */
    zp_status s = op->batch_fn(op->user, b->ptrs, n, b->st);
    zpi_err err;
    if (s != ZP_OK && s != ZP_END) {
        s = map_failed(env, op, c, b->recs[0].i, s, b->msgs[0], &err);
        zpi_chunk_fail(c, s, "%s", err.msg);
        return;
    }
    for (size_t k = 0; k < n && c->err.code == ZP_OK; k++) {
        zp_status st = b->st[k];
        if (st == ZP_OK || st == ZP_END)
            continue;
        st = map_failed(env, op, c, b->recs[k].i, st, b->msgs[k], &err);
        zpi_op_bad_record(env, c, b->recs[k].i, st, err.msg);
    }
}

/* zpi_json_get_ids's room: n more ids at the end of c->tok. */
static int32_t *ids_room(void *ctx, size_t n)
{
    zpi_chunk *c = ctx;
    void *t = c->tok;
    size_t need = c->tok_len + n;
    if (zpi_grow(&t, &c->tok_cap, need < 4096 ? 4096 : need, sizeof *c->tok) != 0)
        return NULL;
    c->tok = t;
    return c->tok + c->tok_len;
}

zp_status zpi_record_tokenize_text(const zpi_op_env *env, zpi_worker *w, zpi_chunk *c, size_t i,
                                   const char **s, size_t *n, int *ids, zpi_err *err)
{
    char msg[ZPI_ERRMAX];
    msg[0] = '\0';
    *ids = 0;
    zp_record rec = {.env = env, .w = w, .c = c, .i = i, .parsed = 0, .err = msg, .errcap = sizeof msg};
    zp_status st = zp_record_text(&rec, s, n);
    if (st == ZP_OK)
        return ZP_OK;
    if (st == ZP_ERR_FORMAT && !msg[0] && rec.parsed) {
        /* not a string: an array of token ids? */
        const char *field = env->tok_field ? env->tok_field : "text";
        size_t got = 0, bad = 0;
        zp_status is = zpi_json_get_ids(w->json, field, ids_room, c, &got, &bad);
        if (is == ZP_OK) {
            zpi_rec *r = &c->recs[i];
            r->tok_off = c->tok_len;
            r->tok_len = got;
            c->tok_len += got;
            r->flags |= ZPI_REC_TOKENS;
            *ids = 1;
            return ZP_OK;
        }
        if (is == ZP_ERR_NOMEM)
            return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory for tokens");
        if (is == ZP_ERR_FORMAT)
            zpi_fmt(msg, sizeof msg,
                    "field '%s': element %zu is not a token id (an integer from 0 to 2^31-1)",
                    field, bad);
    }
    if (st == ZP_END)
        zpi_fmt(msg, sizeof msg, "no field '%s'", env->tok_field);
    else if (st == ZP_ERR_FORMAT && !msg[0])
        zpi_fmt(msg, sizeof msg, "field '%s' is not a string or an array of token ids",
                env->tok_field);
    return name_record(env, c, i, "tokenize", msg, st == ZP_END ? ZP_ERR_FORMAT : st, err);
}
