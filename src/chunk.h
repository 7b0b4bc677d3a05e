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

#include "error.h"
#include "util.h"
#include "zephon/worksource.h"

/* Record flags. ZPI_REC_TEXT: text_off/text_len hold the tokenize text,
 * either extracted at fetch (then a new JSON from a callback invalidates
 * it) or set by a callback (ZPI_REC_TEXT_USER). */
enum { ZPI_REC_SKIP = 1u, ZPI_REC_DROP = 2u, ZPI_REC_TEXT = 4u, ZPI_REC_TEXT_USER = 8u };

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

#endif
