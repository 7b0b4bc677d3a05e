/* chunk.c - the engine's unit of work (chunk.h). */
#include "ops/chunk.h"
#include "formats/reader.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"

zp_status zpi_chunk_init(zpi_chunk *c, size_t samples)
{
    memset(c, 0, sizeof *c);
    c->samples = malloc(samples * sizeof *c->samples);
    c->recs = malloc(samples * sizeof *c->recs);
    return c->samples && c->recs ? ZP_OK : ZP_ERR_NOMEM;
}

void zpi_chunk_fini(zpi_chunk *c)
{
    free(c->samples);
    free(c->recs);
    free(c->json);
    free(c->text);
    free(c->tok);
    free(c->schema_buf);
    c->schema_buf = NULL;
    for (int k = 0; k < 16; k++) {
        free(c->fixed[k]);
        c->fixed[k] = NULL;
        c->fixed_cap[k] = 0;
    }
    c->samples = NULL;
    c->recs = NULL;
    c->json = c->text = NULL;
    c->tok = NULL;
}

void zpi_chunk_reset(zpi_chunk *c)
{
    c->n = 0;
    c->json_len = c->text_len = c->tok_len = 0;
    c->schema = NULL;
    c->stage = 0;
    c->complete = 0;
    zpi_err_clear(&c->err);
    zpi_err_clear(&c->first_skip);
    c->skipped = c->filtered = 0;
    c->node.next = NULL;
    c->last_in_epoch = 0;
}

void zpi_chunk_fail(zpi_chunk *c, zp_status st, const char *fmt, ...)
{
    if (c->err.code != ZP_OK)
        return;
    va_list ap;
    va_start(ap, fmt);
    zpi_err_vset(&c->err, st, fmt, ap);
    va_end(ap);
}

size_t zpi_chunk_live(const zpi_chunk *c)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n; i++)
        n += !(c->recs[i].flags & (ZPI_REC_SKIP | ZPI_REC_DROP));
    return n;
}

zp_status zpi_arena_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n,
                           uint64_t *off)
{
    void *b = *buf;
    size_t need = *len + n + ZPI_JSON_PADDING;
    if (zpi_grow(&b, cap, need < 4096 ? 4096 : need, 1) != 0)
        return ZP_ERR_NOMEM;
    *buf = b;
    if (off)
        *off = *len;
    if (n)
        memcpy(*buf + *len, s, n);
    *len += n;
    memset(*buf + *len, 0, ZPI_JSON_PADDING);
    return ZP_OK;
}

/* ------------------------------------------------------------ readers */

zp_status zpi_chunk_put_text(zpi_chunk *c, size_t row, const char *s, size_t n)
{
    zpi_rec *r = &c->recs[row];
    zp_status st = zpi_arena_append(&c->text, &c->text_len, &c->text_cap, s, n, &r->text_off);
    if (st != ZP_OK)
        return st;
    r->text_len = n;
    r->flags |= ZPI_REC_TEXT;
    return ZP_OK;
}

zp_status zpi_chunk_put_tokens(zpi_chunk *c, size_t row, size_t n, int32_t **dst)
{
    void *t = c->tok;
    size_t need = c->tok_len + n;
    if (need < c->tok_len || zpi_grow(&t, &c->tok_cap, need < 4096 ? 4096 : need, sizeof *c->tok) != 0)
        return ZP_ERR_NOMEM;
    c->tok = t;
    zpi_rec *r = &c->recs[row];
    r->tok_off = c->tok_len;
    r->tok_len = n;
    r->flags |= ZPI_REC_TOKENS;
    *dst = c->tok + c->tok_len;
    c->tok_len = need;
    return ZP_OK;
}

void *zpi_chunk_fixed_row(zpi_chunk *c, int k, size_t row)
{
    return c->fixed[k] + row * c->schema->f[k].item_bytes;
}

/* The sink of a read (reader.h) into the chunk. */
static zp_status sink_text(void *ctx, size_t row, const char *s, size_t n)
{
    return zpi_chunk_put_text(ctx, row, s, n);
}

static zp_status sink_tokens(void *ctx, size_t row, size_t n, int32_t **dst)
{
    return zpi_chunk_put_tokens(ctx, row, n, dst);
}

static void sink_untokens(void *ctx, size_t row, size_t n)
{
    zpi_chunk *c = ctx;
    c->tok_len -= n;
    c->recs[row].tok_len = 0;
    c->recs[row].flags &= ~(uint32_t)ZPI_REC_TOKENS;
}

static void *sink_fixed(void *ctx, int k, size_t row)
{
    return zpi_chunk_fixed_row(ctx, k, row);
}

zpi_read_sink zpi_chunk_sink(zpi_chunk *c)
{
    zpi_read_sink s = {c, sink_text, sink_tokens, sink_untokens, sink_fixed};
    return s;
}

zp_status zpi_chunk_set_schema(zpi_chunk *c, const zpi_schema *s)
{
    if (c->schema)
        return zpi_schema_equal(c->schema, s) ? ZP_OK : ZP_ERR_FORMAT;
    for (int k = 0; k < s->n && k < 16; k++) {
        if (s->f[k].kind != ZPI_FIELD_FIXED)
            continue;
        size_t need = c->n * s->f[k].item_bytes;
        if (need > c->fixed_cap[k]) {
            void *p = realloc(c->fixed[k], need);
            if (!p)
                return ZP_ERR_NOMEM;
            c->fixed[k] = p;
            c->fixed_cap[k] = need;
        }
    }
    if (!c->schema_buf && !(c->schema_buf = malloc(sizeof *c->schema_buf)))
        return ZP_ERR_NOMEM;
    *c->schema_buf = *s;
    c->schema = c->schema_buf;
    return ZP_OK;
}
