/* chunk.c - the engine's unit of work (chunk.h). */
#include "chunk.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

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
    c->samples = NULL;
    c->recs = NULL;
    c->json = c->text = NULL;
    c->tok = NULL;
}

void zpi_chunk_reset(zpi_chunk *c)
{
    c->n = 0;
    c->json_len = c->text_len = c->tok_len = 0;
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
