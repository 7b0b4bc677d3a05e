/*
 * tokenize_input.h - the input of `zephon tokenize` (cmd_tokenize.c): a
 * file or standard input, plain, zstd- or gzip-compressed (recognised by
 * its magic number), cut into runs of complete lines. CLI-private.
 */
#ifndef ZP_CLI_TOKENIZE_INPUT_H
#define ZP_CLI_TOKENIZE_INPUT_H

#include <stddef.h>

#include <zstd.h>

#include "base/error.h"
#include "formats/gzip_stream.h"

/* The input: a file descriptor, plain or zstd (by magic number). */
typedef struct tok_input {
    int fd;
    const char *name; /* for messages */
    int zst;          /* 1 when the data is zstd frames */
    int eof;          /* the file is at its end */
    ZSTD_DCtx *dctx;
    zpi_gz *gz;       /* the decoder when the data is gzip (every member), else NULL */
    char *zbuf;       /* raw bytes read (compressed, or the first plain bytes) */
    size_t zcap, zlen, zpos;
    size_t last_ret;  /* last ZSTD_decompressStream result: 0 at a frame's end */
    int short_read;   /* the last read() gave less than asked (a pipe or terminal) */
} tok_input;

/* Open: read the first 4 bytes (a zstd or gzip magic number or not). 0, or -1 with
 * the message printed. */
int tok_input_open(tok_input *in, int fd, const char *name);
void tok_input_close(tok_input *in);

/* The input's decoded bytes as runs of complete lines. Not thread-safe:
 * one caller at a time (the team's take). */
typedef struct tok_lines {
    tok_input *in;
    char *buf;        /* decoded bytes; [pos, len) not handed out yet */
    size_t cap, len, pos;
    size_t line0;     /* lines handed out so far */
    int eof;          /* no more input (its end, or a read error) */
    int failed;       /* a read error ended the input: err says why */
    int done;         /* the end (or the error) was reported */
    zpi_err err;
} tok_lines;

/* A run of complete lines, copied: bytes [0, len) followed by
 * ZPI_JSON_PADDING zero bytes; line i is bytes [starts[i], starts[i+1]-1)
 * (without its newline). The caller owns the buffers (kept from run to run). */
typedef struct tok_run {
    char *buf;
    size_t cap, len;
    size_t *starts;   /* n_lines + 1 */
    size_t starts_cap, n_lines;
    size_t line0;     /* lines of the input before this run */
} tok_run;

void tok_lines_init(tok_lines *L, tok_input *in);
void tok_lines_free(tok_lines *L);
/* The next run of complete lines into *out: about chunk_bytes (at least
 * one line; from a pipe or a terminal, the complete lines that have
 * arrived). A last line without newline at the end of the input is a line
 * (not after a read error). Returns 1 (a run), 0 at the end of the input,
 * -1 after a read error (L->err says why; the lines before it were handed
 * out), -2 out of memory. */
int tok_lines_next(tok_lines *L, size_t chunk_bytes, tok_run *out);

#endif
