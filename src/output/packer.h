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
#include "output/balance.h"
#include "output/outq.h"
#include "formats/reader.h"
#include "zephon/dataset.h"

typedef struct zpi_pack_settings {
    size_t microbatch;  /* rows per batch */
    int tokens;         /* token modes (a tokenize operator runs) */
    zp_pack_mode mode;  /* token modes: ZP_PACK_CONCAT, _PAD or _BESTFIT */
    size_t window;      /* ZP_PACK_BESTFIT: the rank's positions per window (> 0) */
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
    uint64_t first_rows; /* ZP_PACK_BESTFIT: rows of the first window delivered */
    size_t balance;      /* token modes: attention-cost balance window in batches
                            (0: off) */
    uint64_t first_bal_done; /* restored: batches of the first balance window
                                delivered (first_index counts them) */
    const zp_dataset *ds; /* for messages: the shards' names (borrowed; may be NULL) */
} zpi_pack_settings;

/* Best-fit packing: a document of the window (its tokens as packed, BOS,
 * tokens, EOT, in the window's buffer) and a piece of one placed in a row. */
typedef struct zpi_bf_doc {
    zp_sample s;
    size_t off, len; /* tokens [off, off + len) of the window's buffer */
    size_t start;    /* first position to deliver: 0, or (an elastic resume's
                        span with a token offset t) t - 1 */
} zpi_bf_doc;

typedef struct zpi_bf_piece {
    size_t doc;       /* index in the window */
    size_t from, len; /* positions [from, from + len) of the document */
    size_t row;       /* row of the window: full rows first, then bins */
} zpi_bf_piece;

typedef struct zpi_bf_window {
    int open;         /* documents gathered, not packed yet */
    uint32_t epoch;
    uint64_t id;      /* position / window */
    uint64_t pos0;    /* position of its first document (the resume point) */
    zpi_bf_doc *docs;
    size_t n, cap;
    int32_t *tok;
    size_t ntok, tokcap;
    zpi_bf_piece *pc; /* scratch of the packing */
    size_t npc, pccap;
    size_t *room, roomcap;
    size_t *order, ordercap;
    size_t *rk, rkcap; /* the rows' order */
    int skip_pending; /* a restored state: first_rows still to skip */
} zpi_bf_window;

/* Attention-cost balance: the batches of a window, held until it is
 * complete, and the scratch of moving its rows (sized for a whole window
 * at the first batch, so that balancing cannot fail halfway). */
typedef struct zpi_bal_window {
    zpi_batchbuf **b;    /* the window's batches, in stream order */
    size_t n;
    uint64_t skip;       /* restored state: batches of the first window to leave out */
    uint64_t *cost;      /* per row of the window (batch-major) */
    uint32_t *group;     /* its batch after balancing */
    size_t *dest;        /* its place after balancing (batch * rows + row) */
    uint64_t *sums;      /* per batch */
    size_t *fill;        /* per batch */
    zpi_balance_ws ws;
    int32_t *tok, *seg;  /* the window's rows, copied out */
    uint8_t *mask;
    int64_t *rowpos;
    zpi_rowacct *racct;
    uint64_t *rpart;
    unsigned char *fixed[16];
    zp_sample *smp;      /* the window's samples, in stream order, */
    size_t *sg;          /* with the window row of each one's first token */
    size_t nsmp, smpcap, sgcap;
} zpi_bal_window;

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
    zpi_bf_window bf;           /* ZP_PACK_BESTFIT */
    zpi_bal_window bal;         /* attention-cost balance */
} zpi_packer;

void zpi_packer_init(zpi_packer *pk, const zpi_pack_settings *set, zpi_outq *q,
                     zpi_ctr *blocked_ns);
/* Frees what the packer allocated (best-fit windows). */
void zpi_packer_fini(zpi_packer *pk);
/* Feeds one completed chunk; may block waiting for a free batch buffer.
 * ZP_ERR_STATE when the queue was closed; ZP_ERR_NOMEM; ZP_ERR_FORMAT when
 * a restored state carries more tokens of a document than it has
 * (token_offset, naming the document and its length), with its message
 * in pk->err. Best-fit packing gathers the documents of a window and packs
 * it when the next window's first document arrives or the epoch's last
 * chunk ends. */
zp_status zpi_pack_chunk(zpi_packer *pk, const zpi_chunk *c);
/* Pushes the batch being filled (end of an epoch), and the balance window
 * it completes. */
zp_status zpi_pack_flush(zpi_packer *pk, int last_in_epoch);
/* Pushes the batch being filled only if it is full (before an error); a
 * balance window it does not complete is not delivered. */
void zpi_pack_flush_full(zpi_packer *pk);
/* Moves the counts not yet attached to a batch into *out (zeroed first). */
void zpi_packer_take_pending(zpi_packer *pk, zp_pipeline_counts *out);

#endif
