/*
 * cmd_tokenize.c - `zephon tokenize`: read JSONL (one object per line), print
 * one JSON array of token ids per input record, on its own line.
 *
 *   zephon tokenize [--tokenizer gpt2|DIR|FILE.tiktoken] [--field text]
 *                   [--threads N] [FILE|-]
 *
 * FILE may be plain JSONL or zstd-compressed (recognised by its magic
 * number, so compressed standard input works too). Blank lines are skipped
 * (they are not records). The first bad line stops the command with a
 * message naming the file and line, and exit status 1 (2 for a usage
 * error); the lines before it are printed. This is the command, not the
 * library: printing is allowed here.
 *
 * Speed: the record parser and encoder of the pipeline (src/base/json.h, the
 * simdjson shim, and zp_encode()), run by N OpenMP threads. The input is
 * read in blocks (two, alternating); the complete lines of a block are cut
 * into chunks of at most CHUNK_BYTES, the threads parse, encode and format
 * the chunks (one zpi_json, encoder and id buffer per thread, one output
 * buffer per chunk), and the chunks' outputs are written in input order.
 * From a regular file, one thread writes block k-1 and reads block k+1
 * while the others encode block k; from a pipe or a terminal, a block is
 * what has arrived and is written before the next read, so that output
 * follows input. Ids are formatted from a table of their decimal forms.
 * The thread count is set with a num_threads clause only (no process-wide
 * OpenMP state). docs/tokenizer.md ("The command") has the figures.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>

#include "cli.h"
#include "base/json.h"
#include "base/util.h"
#include "zephon/tokenizer.h"

#ifndef BLOCK_PER_THREAD
#define BLOCK_PER_THREAD ((size_t)256 << 10) /* input bytes read per block, per thread */
#endif
#ifndef CHUNK_BYTES
#define CHUNK_BYTES ((size_t)64 << 10)      /* input bytes per chunk (unit of work) */
#endif
#define MAX_THREADS 1024 /* --threads upper bound */

static void usage(FILE *f)
{
    fputs("usage: zephon tokenize [--tokenizer NAME] [--field NAME] [--threads N] [FILE|-]\n"
          "\n"
          "Reads JSONL (one JSON object per line; plain or zstd-compressed) from FILE or\n"
          "standard input and prints, for each record, the token ids of its text field as\n"
          "a JSON array on one line, in input order.\n"
          "\n"
          "  --tokenizer NAME  \"gpt2\" (built in; the default), a folder with vocab.json +\n"
          "                    merges.txt, or a .tiktoken rank file\n"
          "  --field NAME      the string field to tokenize (default \"text\")\n"
          "  --threads N       threads that parse and encode (1-1024; default: OpenMP's\n"
          "                    default, OMP_NUM_THREADS or the number of CPUs)\n"
          "\n"
          "Blank lines are skipped. Exit status: 0 ok, 1 bad input or error, 2 usage.\n",
          f);
}

/* ------------------------------------------------------------ output format */

static const char digits2[201] = "00010203040506070809101112131415161718192021222324252627282930"
                                 "31323334353637383940414243444546474849505152535455565758596061"
                                 "62636465666768697071727374757677787980818283848586878889909192"
                                 "93949596979899";

static inline unsigned n_digits(uint32_t u)
{
    unsigned n = 1;
    while (u >= 10000) {
        u /= 10000;
        n += 4;
    }
    return n + (u >= 10) + (u >= 100) + (u >= 1000);
}

/* Append the decimal form of v to p (at most 11 bytes); returns the new end. */
static inline char *put_int(char *p, int32_t v)
{
    uint32_t u = (uint32_t)v;
    if (v < 0) {
        *p++ = '-';
        u = (uint32_t)0 - u;
    }
    char *end = p + n_digits(u), *q = end;
    while (u >= 100) {
        uint32_t r = u % 100;
        u /= 100;
        q -= 2;
        memcpy(q, digits2 + 2 * r, 2);
    }
    if (u >= 10)
        memcpy(q - 2, digits2 + 2 * u, 2);
    else
        q[-1] = (char)('0' + u);
    return end;
}

/* ------------------------------------------------------------ input */

/* The input: a file descriptor, plain or zstd (by magic number). */
typedef struct input {
    int fd;
    const char *name; /* for messages */
    int zst;          /* 1 when the data is zstd frames */
    int eof;          /* the file is at its end */
    ZSTD_DCtx *dctx;
    char *zbuf;       /* raw bytes read (compressed, or the first plain bytes) */
    size_t zcap, zlen, zpos;
    size_t last_ret;  /* last ZSTD_decompressStream result: 0 at a frame's end */
    int short_read;   /* the last read() gave less than asked (a pipe or terminal) */
} input;

/* One read() (retried on EINTR): what is available now, 0 at EOF. */
static ssize_t read_once(input *in, char *buf, size_t want)
{
    ssize_t r;
    do
        r = read(in->fd, buf, want);
    while (r < 0 && errno == EINTR);
    in->short_read = r > 0 && (size_t)r < want;
    return r;
}

static int is_zstd_magic(const unsigned char *p, size_t n)
{
    if (n < 4)
        return 0;
    uint32_t m = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                 (uint32_t)p[3] << 24;
    return m == 0xFD2FB528u || (m & 0xFFFFFFF0u) == 0x184D2A50u;
}

/* Open: read the first 4 bytes (a zstd magic number or not). 0, or -1 with
 * the message printed. */
static int input_open(input *in, int fd, const char *name)
{
    memset(in, 0, sizeof *in);
    in->fd = fd;
    in->name = name;
    in->zcap = ZSTD_DStreamInSize() > ((size_t)1 << 20) ? ZSTD_DStreamInSize() : (size_t)1 << 20;
    in->zbuf = malloc(in->zcap);
    if (!in->zbuf) {
        fprintf(stderr, "zephon tokenize: out of memory\n");
        return -1;
    }
    ssize_t r = zpi_read_full(fd, in->zbuf, 4);
    if (r < 0) {
        fprintf(stderr, "zephon tokenize: %s: read error: %s\n", name, strerror(errno));
        return -1;
    }
    in->zlen = (size_t)r;
    in->eof = r < 4;
    in->zst = is_zstd_magic((const unsigned char *)in->zbuf, in->zlen);
    if (in->zst) {
        in->dctx = ZSTD_createDCtx();
        if (!in->dctx) {
            fprintf(stderr, "zephon tokenize: out of memory\n");
            return -1;
        }
    }
    return 0;
}

static void input_close(input *in)
{
    ZSTD_freeDCtx(in->dctx);
    free(in->zbuf);
}

/* Read up to cap decoded bytes into dst; *got gets the count (0 only at the
 * end of the input). 0, or -1 with the cause in err ("read error: ...",
 * "truncated zstd frame", ...). */
static int input_read(input *in, char *dst, size_t cap, size_t *got, zpi_err *err)
{
    *got = 0;
    if (!in->zst) {
        if (in->zpos < in->zlen) { /* the bytes read by input_open first */
            size_t n = in->zlen - in->zpos < cap ? in->zlen - in->zpos : cap;
            memcpy(dst, in->zbuf + in->zpos, n);
            in->zpos += n;
            *got = n;
            return 0;
        }
        if (in->eof)
            return 0;
        ssize_t r = read_once(in, dst, cap);
        if (r < 0) {
            zpi_err_set(err, ZP_ERR_IO, "read error: %s", strerror(errno));
            return -1;
        }
        if (r == 0)
            in->eof = 1;
        *got = (size_t)r;
        return 0;
    }
    ZSTD_outBuffer ob = {dst, cap, 0};
    while (ob.pos == 0) {
        if (in->zpos == in->zlen) {
            if (in->eof) {
                /* The input is over. A frame not ended may still hold
                 * decoded bytes (the last call filled its output), or be
                 * truncated. */
                if (in->last_ret != 0) {
                    ZSTD_inBuffer ib = {in->zbuf, 0, 0};
                    size_t ret = ZSTD_decompressStream(in->dctx, &ob, &ib);
                    if (!ZSTD_isError(ret) && ob.pos > 0) {
                        in->last_ret = ret;
                        break;
                    }
                    zpi_err_set(err, ZP_ERR_FORMAT, "truncated zstd frame");
                    return -1;
                }
                break;
            }
            ssize_t r = read_once(in, in->zbuf, in->zcap);
            if (r < 0) {
                zpi_err_set(err, ZP_ERR_IO, "read error: %s", strerror(errno));
                return -1;
            }
            in->zlen = (size_t)r;
            in->zpos = 0;
            if (r == 0)
                in->eof = 1;
            continue;
        }
        ZSTD_inBuffer ib = {in->zbuf, in->zlen, in->zpos};
        size_t ret = ZSTD_decompressStream(in->dctx, &ob, &ib);
        if (ZSTD_isError(ret)) {
            zpi_err_set(err, ZP_ERR_FORMAT, "corrupt zstd data (%s)", ZSTD_getErrorName(ret));
            return -1;
        }
        in->zpos = ib.pos;
        in->last_ret = ret;
    }
    *got = ob.pos;
    return 0;
}

/* ------------------------------------------------------------ work */

/* One thread's tools. */
typedef struct worker {
    zpi_json *json;
    zp_encoder *enc;
    int32_t *ids;
    size_t idcap;
} worker;

/* A run of consecutive lines of a block, and its output. */
typedef struct chunk {
    size_t first, end; /* lines [first, end) of the block */
    char *out;         /* owned; kept from block to block */
    size_t len, cap;
    size_t err_line;   /* index of the failing line, or SIZE_MAX */
    char err[512];
} chunk;

/* A block of input: complete lines, cut into chunks. Two blocks alternate:
 * one is encoded while the next is read and the previous one's output is
 * written. */
typedef struct block {
    char *buf;            /* len bytes, then ZPI_JSON_PADDING readable bytes */
    size_t cap, len;
    size_t *starts;       /* n_lines + 1 line starts; line i ends at starts[i+1]-1 */
    size_t starts_cap, n_lines;
    size_t used;          /* bytes of buf taken by its lines (the rest is a partial line) */
    size_t line0;         /* lines before this block */
    chunk *chunks;
    size_t n_chunks, chunks_cap;
    size_t next_chunk;    /* the next chunk to hand out (under the run's mutex) */
    size_t chunks_done;   /* chunks encoded (under the run's mutex) */
    int last;             /* the input ends with this block */
    zpi_err in_err;       /* the input failed after this block's lines: why */
} block;

/* The decimal form of every id below n followed by its comma, 8 bytes per
 * id (ids below 10^7), so that formatting an id is one 8-byte copy. */
typedef struct id_text {
    uint64_t *text; /* n entries: the digits and ',' in the first len[i] bytes */
    uint8_t *len;
    size_t n;
} id_text;

static int id_text_init(id_text *t, size_t n)
{
    if (n > 10000000)
        n = 10000000;
    t->n = 0;
    t->text = malloc(n * sizeof *t->text);
    t->len = malloc(n ? n : 1);
    if (!t->text || !t->len)
        return -1;
    for (size_t i = 0; i < n; i++) {
        char tmp[16] = {0};
        char *e = put_int(tmp, (int32_t)i);
        *e++ = ',';
        memcpy(&t->text[i], tmp, 8);
        t->len[i] = (uint8_t)(e - tmp);
    }
    t->n = n;
    return 0;
}

typedef struct job {
    const char *field;
    const char *name;
    const block *b;
    const id_text *ids;
} job;

static int is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return 0;
    return 1;
}

static void chunk_fail(chunk *c, const job *jb, size_t i, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Record the error of line i of the block in c: "FILE:LINE: what". */
static void chunk_fail(chunk *c, const job *jb, size_t i, const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(c->err, sizeof c->err, "%s:%zu: %s", jb->name, jb->b->line0 + i + 1, what);
    c->err_line = i;
}

/* Parse, encode and format the lines of c; stops at the first bad line. */
static void run_chunk(const job *jb, chunk *c, worker *w)
{
    const block *b = jb->b;
    c->len = 0;
    c->err_line = SIZE_MAX;
    /* The ids take about 1.5 bytes of output per byte of text: reserve that
     * once, so that the output rarely grows line by line. */
    size_t in_bytes = b->starts[c->end] - b->starts[c->first];
    if (zpi_grow((void **)&c->out, &c->cap, in_bytes + in_bytes / 2 + 64, 1) != 0) {
        chunk_fail(c, jb, c->first, "out of memory");
        return;
    }
    for (size_t i = c->first; i < c->end; i++) {
        const char *line = b->buf + b->starts[i];
        size_t n = b->starts[i + 1] - b->starts[i] - 1; /* without its newline */
        if (is_blank(line, n))
            continue;
        zpi_err jerr;
        zp_status st = zpi_json_parse(w->json, line, n, &jerr);
        if (st != ZP_OK) {
            if (st == ZP_ERR_NOMEM)
                chunk_fail(c, jb, i, "out of memory");
            else if (strncmp(jerr.msg, "not an object", 13) == 0)
                chunk_fail(c, jb, i, "not a JSON object%s", jerr.msg + 13);
            else
                chunk_fail(c, jb, i, "invalid JSON: %s", jerr.msg);
            return;
        }
        const char *text;
        size_t tl;
        st = zpi_json_get_string(w->json, jb->field, &text, &tl);
        if (st == ZP_END) {
            chunk_fail(c, jb, i, "no field '%s'", jb->field);
            return;
        }
        if (st != ZP_OK) {
            chunk_fail(c, jb, i, "field '%s' is not a string", jb->field);
            return;
        }
        if (zpi_grow((void **)&w->ids, &w->idcap, tl + 1, sizeof *w->ids) != 0) {
            chunk_fail(c, jb, i, "out of memory (%zu bytes of text)", tl);
            return;
        }
        size_t n_ids = 0;
        st = zp_encode(w->enc, text, tl, w->ids, &n_ids);
        if (st != ZP_OK) {
            chunk_fail(c, jb, i, "%s", zp_status_str(st));
            return;
        }
        /* at most 11 bytes per id ("-2147483648"), its comma, "[]\n", and
         * the 8-byte copies' overhang */
        if (zpi_grow((void **)&c->out, &c->cap, c->len + n_ids * 12 + 3 + 8, 1) != 0) {
            chunk_fail(c, jb, i, "out of memory");
            return;
        }
        char *p = c->out + c->len;
        const id_text *tt = jb->ids;
        *p++ = '[';
        for (size_t k = 0; k < n_ids; k++) {
            uint32_t id = (uint32_t)w->ids[k];
            if (id < tt->n) {
                memcpy(p, &tt->text[id], 8);
                p += tt->len[id];
            } else {
                p = put_int(p, w->ids[k]);
                *p++ = ',';
            }
        }
        if (n_ids)
            p--;
        *p++ = ']';
        *p++ = '\n';
        c->len = (size_t)(p - c->out);
    }
}

/* write() all of buf to fd 1. 0, or -1 with the cause in err. */
static int write_out(const char *buf, size_t n, zpi_err *err)
{
    while (n) {
        ssize_t w = write(STDOUT_FILENO, buf, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            zpi_err_set(err, ZP_ERR_IO, "write error on standard output: %s", strerror(errno));
            return -1;
        }
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Write the outputs of chunks [0, n). 0, or -1 with the cause in err. */
static int write_chunks(const block *b, size_t n, zpi_err *err)
{
    for (size_t c = 0; c < n; c++)
        if (write_out(b->chunks[c].out, b->chunks[c].len, err) != 0)
            return -1;
    return 0;
}

/* Fill b: the carry bytes (a partial line), then input up to the block's
 * capacity (more when one line is longer); index its complete lines and cut
 * them into chunks for nt threads. A read error is kept in b->in_err (the
 * lines before it are still indexed). 0, or -1 when out of memory. */
static int fill_block(block *b, input *in, const char *carry, size_t carry_len, size_t line0,
                      int nt)
{
    b->len = 0;
    b->n_lines = b->n_chunks = b->used = 0;
    b->next_chunk = b->chunks_done = 0;
    b->line0 = line0;
    b->last = 0;
    zpi_err_clear(&b->in_err);
    if (b->cap < carry_len + 1) {
        size_t ncap = b->cap * 2 > carry_len + 1 ? b->cap * 2 : carry_len + 1;
        char *nb = realloc(b->buf, ncap + ZPI_JSON_PADDING);
        if (!nb)
            return -1;
        b->buf = nb;
        b->cap = ncap;
    }
    if (carry_len)
        memcpy(b->buf, carry, carry_len);
    b->len = carry_len;
    size_t pos = 0; /* start of the first line not indexed */
    for (;;) {
        while (!b->last && b->len < b->cap) {
            size_t got;
            if (input_read(in, b->buf + b->len, b->cap - b->len, &got, &b->in_err) != 0) {
                b->last = 1;
                break;
            }
            if (got == 0)
                b->last = 1;
            b->len += got;
            /* From a pipe or a terminal, encode the complete lines that
             * came instead of waiting for a full block. */
            if (in->short_read && memchr(b->buf + b->len - got, '\n', got))
                break;
        }
        memset(b->buf + b->len, 0, ZPI_JSON_PADDING);
        /* A last line without newline at the end of the input is a record
         * (its "newline" is the first padding byte); not after a read error. */
        while (pos < b->len) {
            const char *nl = memchr(b->buf + pos, '\n', b->len - pos);
            size_t next;
            if (nl)
                next = (size_t)(nl - b->buf) + 1;
            else if (b->last && !b->in_err.msg[0])
                next = b->len + 1;
            else
                break;
            if (zpi_grow((void **)&b->starts, &b->starts_cap, b->n_lines + 2, sizeof *b->starts))
                return -1;
            b->starts[b->n_lines++] = pos;
            pos = next;
        }
        if (b->n_lines > 0 || b->last)
            break;
        /* One line longer than the block: grow it and read on. */
        size_t ncap = b->cap * 2;
        char *nb = ncap > b->cap ? realloc(b->buf, ncap + ZPI_JSON_PADDING) : NULL;
        if (!nb)
            return -1;
        b->buf = nb;
        b->cap = ncap;
    }
    if (b->n_lines == 0)
        return 0;
    b->starts[b->n_lines] = pos;
    b->used = pos < b->len ? pos : b->len;

    /* Chunks of about CHUNK_BYTES, at least 4 per thread. */
    size_t chunk_bytes = b->used / ((size_t)nt * 4) + 1, first = 0;
    if (chunk_bytes > CHUNK_BYTES)
        chunk_bytes = CHUNK_BYTES;
    while (first < b->n_lines) {
        size_t end = first + 1;
        while (end < b->n_lines && b->starts[end] - b->starts[first] < chunk_bytes)
            end++;
        if (b->n_chunks == b->chunks_cap) {
            size_t ncap = b->chunks_cap ? 2 * b->chunks_cap : 64;
            chunk *nc = realloc(b->chunks, ncap * sizeof *nc);
            if (!nc)
                return -1;
            memset(nc + b->chunks_cap, 0, (ncap - b->chunks_cap) * sizeof *nc);
            b->chunks = nc;
            b->chunks_cap = ncap;
        }
        b->chunks[b->n_chunks].first = first;
        b->chunks[b->n_chunks].end = end;
        b->n_chunks++;
        first = end;
    }
    return 0;
}

static void block_free(block *b)
{
    for (size_t c = 0; c < b->chunks_cap; c++)
        free(b->chunks[c].out);
    free(b->chunks);
    free(b->starts);
    free(b->buf);
}

/* ------------------------------------------------------------ the run */

/* What the threads share while they run. One OpenMP parallel region runs
 * the whole input: each thread takes the next piece of work under the
 * mutex (the I/O of the current block first, then its chunks); the thread
 * that finds a block complete finishes it (checks, writes, moves on to the
 * next block). A thread with nothing to take sleeps on the condition
 * variable instead of spinning in an OpenMP barrier, which matters when the
 * machine is shared (a spinning thread takes the CPU the others need). */
typedef struct run {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* settings (read-only while running) */
    input *in;
    worker *ws;
    const char *field, *name;
    const id_text *idt;
    int nt, overlap;
    /* the blocks */
    block *b, *next, *prev; /* encoding b; next is read while prev is written */
    int io;                 /* b's I/O work: 0 none, 1 to do, 2 running, 3 done */
    int next_ready;         /* next is read: its chunks may start before b is done */
    int finishing;          /* a thread is finishing b */
    int stop;               /* 1 done, 2 failed */
    int io_failed, fill_failed;
    zpi_err io_err;
} run;

/* The I/O that overlaps the encoding of r->b: write r->prev, read r->next. */
static void run_io(run *r)
{
    block *b = r->b;
    if (r->prev && write_chunks(r->prev, r->prev->n_chunks, &r->io_err) != 0) {
        r->io_failed = 1;
        return;
    }
    if (!b->last && fill_block(r->next, r->in, b->buf + b->used, b->len - b->used,
                               b->line0 + b->n_lines, r->nt) != 0)
        r->fill_failed = 1;
}

/* All of r->b is encoded and its I/O done: report its first bad line, and
 * write it and read the next block when nothing overlaps. Returns the new
 * value of r->stop (0: go on with the next block). Runs without the mutex:
 * the other threads have nothing to take until run_advance(). */
static int run_finish(run *r)
{
    block *b = r->b;
    zpi_err err;
    if (r->io_failed) {
        fprintf(stderr, "zephon tokenize: %s\n", r->io_err.msg);
        return 2;
    }
    /* The first bad line stops the command, after the lines before it. */
    for (size_t c = 0; c < b->n_chunks; c++) {
        if (b->chunks[c].err_line == SIZE_MAX)
            continue;
        if (write_chunks(b, c + 1, &err) != 0)
            fprintf(stderr, "zephon tokenize: %s\n", err.msg);
        fprintf(stderr, "zephon tokenize: %s\n", b->chunks[c].err);
        return 2;
    }
    if (b->last || !r->overlap) {
        if (write_chunks(b, b->n_chunks, &err) != 0) {
            fprintf(stderr, "zephon tokenize: %s\n", err.msg);
            return 2;
        }
        if (b->last && b->in_err.msg[0]) {
            fprintf(stderr, "zephon tokenize: %s: %s after line %zu\n", r->name, b->in_err.msg,
                    b->line0 + b->n_lines);
            return 2;
        }
        if (b->last)
            return 1;
        r->fill_failed = fill_block(r->next, r->in, b->buf + b->used, b->len - b->used,
                                    b->line0 + b->n_lines, r->nt) != 0;
    }
    if (r->fill_failed) {
        fprintf(stderr, "zephon tokenize: %s: out of memory reading after line %zu\n", r->name,
                b->line0 + b->n_lines);
        return 2;
    }
    return 0;
}

/* Move from r->b to the next block (under the mutex). */
static void run_advance(run *r)
{
    block *b = r->b;
    r->prev = r->overlap ? b : NULL;
    r->b = r->next;
    r->next = b;
    r->io = r->overlap && (r->prev || !r->b->last) ? 1 : 0;
    r->next_ready = 0;
}

/* One thread's loop (all of them run it). Work is taken in this order: the
 * I/O of block b, a chunk of b, a chunk of the next block once it is read
 * (so that no thread waits while the last chunks of b finish), finishing
 * b once all of its chunks are done. */
static void run_thread(run *r, worker *w)
{
    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        block *b = r->b, *nb = r->next;
        block *take = b->next_chunk < b->n_chunks ? b
                      : r->next_ready && nb->next_chunk < nb->n_chunks ? nb
                                                                       : NULL;
        if (r->io == 1) {
            r->io = 2;
            pthread_mutex_unlock(&r->mu);
            run_io(r);
            pthread_mutex_lock(&r->mu);
            r->io = 3;
            r->next_ready = !b->last && !r->fill_failed;
        } else if (b->chunks_done == b->n_chunks && r->io != 2 && !r->finishing) {
            /* b's pieces are all done; the other threads may only encode
             * chunks of the next block until this one moves on */
            r->finishing = 1;
            pthread_mutex_unlock(&r->mu);
            int stop = run_finish(r);
            pthread_mutex_lock(&r->mu);
            r->finishing = 0;
            r->stop = stop;
            if (!stop)
                run_advance(r);
        } else if (take) {
            size_t c = take->next_chunk++;
            job jb = {r->field, r->name, take, r->idt};
            pthread_mutex_unlock(&r->mu);
            run_chunk(&jb, &take->chunks[c], w);
            pthread_mutex_lock(&r->mu);
            take->chunks_done++;
        } else {
            pthread_cond_wait(&r->cv, &r->mu);
            continue;
        }
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}

/* ------------------------------------------------------------ the command */

int cli_cmd_tokenize(int argc, char **argv)
{
    const char *tokname = "gpt2", *field = "text", *path = NULL, *threads_arg = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--tokenizer") == 0 || strcmp(a, "--field") == 0 ||
                   strcmp(a, "--threads") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "zephon tokenize: %s needs a value\n", a);
                usage(stderr);
                return 2;
            }
            if (strcmp(a, "--tokenizer") == 0)
                tokname = argv[++i];
            else if (strcmp(a, "--field") == 0)
                field = argv[++i];
            else
                threads_arg = argv[++i];
        } else if (strncmp(a, "--tokenizer=", 12) == 0) {
            tokname = a + 12;
        } else if (strncmp(a, "--field=", 8) == 0) {
            field = a + 8;
        } else if (strncmp(a, "--threads=", 10) == 0) {
            threads_arg = a + 10;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "zephon tokenize: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (path) {
            fprintf(stderr, "zephon tokenize: one input file at most ('%s', '%s')\n", path, a);
            return 2;
        } else {
            path = a;
        }
    }
    int nt = omp_get_max_threads();
    if (threads_arg) {
        uint64_t v;
        if (zpi_parse_u64(threads_arg, 1, MAX_THREADS, 0, &v) != 0) {
            fprintf(stderr, "zephon tokenize: --threads '%s': must be an integer from 1 to %d\n",
                    threads_arg, MAX_THREADS);
            return 2;
        }
        nt = (int)v;
    }
    if (nt < 1)
        nt = 1;
    if (nt > MAX_THREADS)
        nt = MAX_THREADS;

    const char *name = (!path || strcmp(path, "-") == 0) ? "<stdin>" : path;
    int fd = STDIN_FILENO;
    if (path && strcmp(path, "-") != 0) {
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            fprintf(stderr, "zephon tokenize: cannot open '%s': %s\n", path, strerror(errno));
            return 1;
        }
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    }

    int rc = 1;
    char err[512];
    zp_tokenizer *tok = NULL;
    worker *ws = calloc((size_t)nt, sizeof *ws);
    block blocks[2];
    memset(blocks, 0, sizeof blocks);
    id_text idt = {NULL, NULL, 0};
    input in;
    if (input_open(&in, fd, name) != 0)
        goto out;
    if (!ws) {
        fprintf(stderr, "zephon tokenize: out of memory\n");
        goto out;
    }
    zp_status st = zp_tokenizer_create(tokname, NULL, &tok, err, sizeof err);
    if (st != ZP_OK) {
        fprintf(stderr, "zephon tokenize: %s\n", err);
        goto out;
    }
    if (id_text_init(&idt, zp_tokenizer_vocab_size(tok)) != 0) {
        fprintf(stderr, "zephon tokenize: out of memory\n");
        goto out;
    }
    for (int t = 0; t < nt; t++) {
        if (zpi_json_create(&ws[t].json) != ZP_OK || zp_encoder_create(tok, &ws[t].enc) != ZP_OK) {
            fprintf(stderr, "zephon tokenize: out of memory\n");
            goto out;
        }
    }
    for (int k = 0; k < 2; k++) {
        /* 256 KiB per thread (small blocks stay in the caches; measured
         * against 512 KiB-2 MiB), up to 32 threads' worth (more threads
         * take smaller chunks) */
        blocks[k].cap = (size_t)(nt < 32 ? nt : 32) * BLOCK_PER_THREAD;
        if (!(blocks[k].buf = malloc(blocks[k].cap + ZPI_JSON_PADDING))) {
            fprintf(stderr, "zephon tokenize: out of memory\n");
            goto out;
        }
    }

    /* From a regular file, block k is encoded by the threads while one of
     * them writes the output of block k-1 and reads block k+1 (run_io).
     * From a pipe or a terminal, where a read waits for
     * the writer, each block is written before the next one is read, so
     * that every line's ids come out as soon as the line came in. */
    struct stat sb;
    int overlap = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode);
    if (fill_block(&blocks[0], &in, NULL, 0, 0, nt) != 0) {
        fprintf(stderr, "zephon tokenize: %s: out of memory reading line 1\n", name);
        goto out;
    }
    run r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    r.in = &in;
    r.ws = ws;
    r.field = field;
    r.name = name;
    r.idt = &idt;
    r.nt = nt;
    r.overlap = overlap;
    r.b = &blocks[0];
    r.next = &blocks[1];
    r.io = overlap && !r.b->last ? 1 : 0;
#pragma omp parallel num_threads(nt)
    run_thread(&r, &ws[omp_get_thread_num()]);
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
    if (r.stop != 1)
        goto out;
    rc = 0;
out:
    if (ws)
        for (int t = 0; t < nt; t++) {
            zpi_json_destroy(ws[t].json);
            zp_encoder_destroy(ws[t].enc);
            free(ws[t].ids);
        }
    free(ws);
    free(idt.text);
    free(idt.len);
    block_free(&blocks[0]);
    block_free(&blocks[1]);
    input_close(&in);
    zp_tokenizer_destroy(tok);
    if (fd != STDIN_FILENO)
        close(fd);
    return rc;
}
