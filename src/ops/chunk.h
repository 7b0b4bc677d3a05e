/*
 * chunk.h - the unit of work of the pipeline engine (private).
 *
 * A chunk holds `n` consecutive samples of a rank's stream and everything the
 * operators make of them: the records' JSON bytes, texts set by callbacks,
 * token ids, and one zpi_rec per sample pointing into those arenas. The
 * scheduler (engine.c) owns the chunks and hands each to one operator task
 * at a time; an operator body only touches the chunk it was given, so
 * chunks need no lock of their own.
 */
#ifndef ZP_CHUNK_H
#define ZP_CHUNK_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/util.h"
#include "formats/reader.h"
#include "zephon/worksource.h"

/* Record flags. ZPI_REC_TEXT: text_off/text_len hold the tokenize text,
 * either extracted at fetch (then a new JSON from a callback invalidates
 * it) or set by a callback (ZPI_REC_TEXT_USER). */
enum {
    ZPI_REC_SKIP = 1u,
    ZPI_REC_DROP = 2u,
    ZPI_REC_TEXT = 4u,
    ZPI_REC_TEXT_USER = 8u,
    ZPI_REC_TOKENS = 16u, /* tok_off/tok_len hold tokens read from a token shard
                             (tokenize passes them on) */
};

typedef struct zpi_rec {
    uint64_t json_off; /* in chunk->json */
    size_t json_len;
    uint64_t text_off; /* in chunk->text, when ZPI_REC_TEXT */
    size_t text_len;
    uint64_t tok_off;  /* in chunk->tok */
    size_t tok_len;
    uint32_t flags;
} zpi_rec;

typedef struct zpi_chunk {
    /* identity, set by the scheduler at admission */
    uint64_t seq;       /* admission order */
    uint32_t epoch;
    uint64_t pos0;      /* first position (within the epoch) */
    size_t n;           /* samples */
    int last_in_epoch;
    zp_sample *samples; /* n (capacity: the chunk size) */
    zpi_rec *recs;      /* n */
    /* arenas, written by the operators */
    char *json;         /* record bytes, ZPI_JSON_PADDING spare at the end */
    size_t json_len, json_cap;
    char *text;         /* texts set by callbacks or extracted at fetch */
    size_t text_len, text_cap;
    int32_t *tok;       /* token ids */
    size_t tok_len, tok_cap;
    /* fixed-shape fields of shards read on demand (reader.h): schema is the
     * first such shard's (all must agree); fixed[k] holds n rows of field
     * k's item_bytes (rows not delivered are left as they are: the
     * packer copies only the rows of delivered records) */
    const struct zpi_schema *schema; /* NULL, or schema_buf */
    struct zpi_schema *schema_buf;   /* the chunk's copy (shards may be evicted before packing) */
    unsigned char *fixed[16];
    size_t fixed_cap[16];
    /* outcome, written by the operators */
    zpi_err err;        /* the chunk's first error (code ZP_OK: none) */
    zpi_err first_skip; /* the first record skipped as bad (ZP_BAD_RECORD_SKIP) */
    uint64_t skipped, filtered;
    /* scheduling, owned by the scheduler */
    int stage;          /* next stage to run */
    int complete;
    uint64_t enq_ns;    /* when it was queued for its stage (observability) */
    zpi_fifo_node node; /* link in a stage FIFO or the free list */
} zpi_chunk;

/* Allocates the sample and record arrays for `samples` samples. */
zp_status zpi_chunk_init(zpi_chunk *c, size_t samples);
/* Releases the chunk's arrays (not the chunk itself). */
void zpi_chunk_fini(zpi_chunk *c);
/* Empties the chunk for reuse (keeps its memory). */
void zpi_chunk_reset(zpi_chunk *c);
/* Records the chunk's first error; later ones are ignored. */
void zpi_chunk_fail(zpi_chunk *c, zp_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Records that are neither skipped nor dropped. */
size_t zpi_chunk_live(const zpi_chunk *c);
/* Appends n bytes to an arena (json or text), keeping ZPI_JSON_PADDING
 * zeroed bytes after its end; *off gets where they start. */
zp_status zpi_arena_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n,
                           uint64_t *off);

/* For readers (reader.h). Row `row`'s text: copied into the text arena
 * (sets ZPI_REC_TEXT). */
zp_status zpi_chunk_put_text(zpi_chunk *c, size_t row, const char *s, size_t n);
/* Row `row`'s tokens: room for n ids at *dst, which the caller fills
 * (sets ZPI_REC_TOKENS). *dst is valid until the next put on c. */
zp_status zpi_chunk_put_tokens(zpi_chunk *c, size_t row, size_t n, int32_t **dst);
/* Row `row` of fixed field k (c->schema's field k, item_bytes long). */
void *zpi_chunk_fixed_row(zpi_chunk *c, int k, size_t row);
/* The sink a reader (reader.h) delivers the chunk's rows into: the three
 * calls above, and taking back a row's last tokens. */
zpi_read_sink zpi_chunk_sink(zpi_chunk *c);
/* Sets c->schema (on its first lazy shard) and sizes the fixed arenas for
 * c->n rows. ZP_ERR_FORMAT when c already has another schema. */
zp_status zpi_chunk_set_schema(zpi_chunk *c, const struct zpi_schema *s);

#endif
