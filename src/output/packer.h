/*
 * packer.h - the ordered batch stage (private): completed chunks, in stream
 * order, -> batches in the output queue.
 *
 * Only one thread at a time (the engine's drainer) calls a packer, chunks in
 * order, so its state needs no lock; it talks to the consumer only through
 * the output queue. A full batch is pushed lazily, when the next row is
 * needed or at the epoch's flush, so that the last batch of an epoch can be
 * marked as such.
 */
#ifndef ZP_PACKER_H
#define ZP_PACKER_H

#include "base/error.h"
#include "ops/chunk.h"
#include "output/outq.h"
#include "formats/reader.h"
#include "zephon/dataset.h"

typedef struct zpi_pack_settings {
    size_t microbatch;  /* rows per batch */
    int tokens;         /* token modes (a tokenize operator runs) */
    zp_pack_mode mode;  /* token modes: ZP_PACK_CONCAT or ZP_PACK_PAD */
    size_t seq_len;     /* token modes: a row holds seq_len + 1 tokens */
    int32_t eot;        /* token modes: separator and padding token */
    int32_t bos;        /* token modes: put before each document, -1 none */
    size_t nparts;      /* mixture parts (per-part counts in each batch) */
    unsigned masking;   /* token modes: ZP_OUT_* document-masking outputs */
    zp_position_mode positions;
    /* Restored state (zephon/state.h): the first batch's index, and for the
     * first document packed the tokens already delivered and whether the
     * first row starts with the previous row's last token. */
    uint64_t first_index;
    uint64_t first_offset;
    int first_carry;
    const zp_dataset *ds; /* for messages: the shards' names (borrowed; may be NULL) */
} zpi_pack_settings;

typedef struct zpi_packer {
    zpi_pack_settings set;
    zpi_outq *q;
    zpi_ctr *blocked_ns;        /* observability: time waiting for a buffer, or NULL */
    zpi_batchbuf *cur;          /* batch being filled, or NULL */
    size_t row, col;            /* token modes: fill position */
    int32_t seg;                /* segment id of the current document in the row */
    uint64_t next_index;
    int restore_pending;        /* the first document still has to take first_offset/carry */
    uint32_t last_epoch;        /* epoch of the last chunk packed */
    zp_pipeline_counts pending; /* skips/filters not yet attached to a batch */
    int has_schema;             /* fixed-shape fields: the first schema met (a copy) */
    zpi_schema schema;
    zpi_err err;                /* the message of zpi_pack_chunk's failure */
} zpi_packer;

void zpi_packer_init(zpi_packer *pk, const zpi_pack_settings *set, zpi_outq *q,
                     zpi_ctr *blocked_ns);
/* Feeds one completed chunk; may block waiting for a free batch buffer.
 * ZP_ERR_STATE when the queue was closed; ZP_ERR_NOMEM; ZP_ERR_FORMAT when
 * a restored state carries more tokens of a document than it has
 * (token_offset, naming the document and its length), with its message
 * in pk->err. */
zp_status zpi_pack_chunk(zpi_packer *pk, const zpi_chunk *c);
/* Pushes the batch being filled (end of an epoch). */
void zpi_pack_flush(zpi_packer *pk, int last_in_epoch);
/* Pushes the batch being filled only if it is full (before an error). */
void zpi_pack_flush_full(zpi_packer *pk);
/* Moves the counts not yet attached to a batch into *out (zeroed first). */
void zpi_packer_take_pending(zpi_packer *pk, zp_pipeline_counts *out);

#endif
