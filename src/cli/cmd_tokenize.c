/*
 * cmd_tokenize.c - `zephon tokenize`: read JSONL (one object per line), print
 * one JSON array of token ids per input record, on its own line.
 *
 *   zephon tokenize [--tokenizer gpt2|DIR|FILE.tiktoken] [--field text]
 *                   [--threads N] [--match-special] [FILE|-]
 *
 * FILE may be plain JSONL, zstd- or gzip-compressed (recognised by its
 * magic number, so compressed standard input works too). Blank lines are skipped
 * (they are not records). The first bad line stops the command with a
 * message naming the file and line, and exit status 1 (2 for a usage
 * error); the lines before it are printed. This is the command, not the
 * library: printing is allowed here.
 *
 * Speed: the record parser and encoder of the pipeline (src/base/json.h, the
 * simdjson shim, and zp_encode()), run by N threads of an ordered team
 * (base/ordered_team.h): the input (tokenize_input.c) is cut into chunks of
 * complete lines of at most about CHUNK_BYTES; one thread at a time reads
 * the next chunk, the thread that read it parses, encodes and formats it
 * (one zpi_json, encoder and id buffer per thread, one output buffer per
 * chunk), and the chunks' outputs are written in input order, one thread
 * at a time, while the others encode. From a pipe or a terminal, a chunk is
 * the complete lines that have arrived, so that output follows input. Ids
 * are formatted by id_text.h (two lookups in 9 KB of tables an id). The
 * thread count is set with a num_threads clause only (no process-wide
 * OpenMP state).
 * docs/tokenizer.md ("The command") has the figures.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "id_text.h"
#include "tokenize_input.h"
#include "base/json.h"
#include "base/ordered_team.h"
#include "base/util.h"
#include "zephon/tokenizer.h"

#ifndef CHUNK_BYTES
#define CHUNK_BYTES ((size_t)64 << 10)      /* input bytes per chunk (unit of work) */
#endif
#define CHUNKS_PER_THREAD 4 /* chunks in flight per thread (the team's window) */
#define IN_FLIGHT_BYTES ((size_t)16 << 20) /* input bytes in flight at most (more threads:
                                              smaller chunks) */
#define MAX_THREADS 1024 /* --threads upper bound */

static void usage(FILE *f)
{
    fputs("usage: zephon tokenize [--tokenizer NAME] [--field NAME] [--threads N]\n"
          "                       [--match-special] [FILE|-]\n"
          "\n"
          "Reads JSONL (one JSON object per line; plain, zstd- or gzip-compressed) from\n"
          "FILE or standard input and prints, for each record, the token ids of its text\n"
          "field as a JSON array on one line, in input order.\n"
          "\n"
          "  --tokenizer NAME  \"gpt2\" (the default), r50k_base, p50k_base, cl100k_base,\n"
          "                    o200k_base, or a path: tokenizer.json (or its folder),\n"
          "                    PATTERN:FILE.tiktoken, FILE.model (docs/tokenizers.md)\n"
          "  --field NAME      the string field to tokenize (default \"text\")\n"
          "  --threads N       threads that parse and encode (1-1024; default: OpenMP's\n"
          "                    default, OMP_NUM_THREADS or the number of CPUs)\n"
          "  --match-special   special tokens' strings in the text (\"<|endoftext|>\") are\n"
          "                    those tokens; by default they are ordinary text, as in\n"
          "                    training data (zp_tokenizer_config.match_special)\n"
          "\n"
          "Blank lines are skipped. Exit status: 0 ok, 1 bad input or error, 2 usage.\n",
          f);
}

/* ------------------------------------------------------------ work */

/* One thread's tools. */
typedef struct worker {
    zpi_json *json;
    const zp_tokenizer *tok;
    zp_encoder *enc;
    int32_t *ids;
    size_t idcap;
} worker;

/* A chunk (an item of the team): complete lines of the input and their
 * output; or where the input ended in an error. */
enum { SLOT_LINES = 0, SLOT_READ_ERROR = 1, SLOT_NOMEM = 2 };

typedef struct slot {
    int kind;          /* SLOT_* */
    tok_run in;        /* the lines (owned; kept from chunk to chunk) */
    char *out;         /* owned; kept from chunk to chunk */
    size_t len, cap;
    size_t err_line;   /* index of the failing line, or SIZE_MAX */
    char err[512];
} slot;

typedef struct job {
    const char *field;
    const char *name;
    const zpc_id_text *ids;
} job;

static int is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return 0;
    return 1;
}

static void chunk_fail(slot *c, const job *jb, size_t i, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Record the error of line i of the chunk in c: "FILE:LINE: what". */
static void chunk_fail(slot *c, const job *jb, size_t i, const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(c->err, sizeof c->err, "%s:%zu: %s", jb->name, c->in.line0 + i + 1, what);
    c->err_line = i;
}

/* Parse, encode and format the lines of c; stops at the first bad line. */
static void run_chunk(const job *jb, slot *c, worker *w)
{
    const tok_run *b = &c->in;
    c->len = 0;
    c->err_line = SIZE_MAX;
    /* The ids take about 1.5 bytes of output per byte of text: reserve that
     * once, so that the output rarely grows line by line. */
    size_t in_bytes = b->len;
    if (zpi_grow((void **)&c->out, &c->cap, in_bytes + in_bytes / 2 + 64, 1) != 0) {
        chunk_fail(c, jb, 0, "out of memory");
        return;
    }
    for (size_t i = 0; i < b->n_lines; i++) {
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
        if (zpi_grow((void **)&w->ids, &w->idcap, zp_encode_max_ids(w->tok, tl) + 1,
                     sizeof *w->ids) != 0) {
            chunk_fail(c, jb, i, "out of memory (%zu bytes of text)", tl);
            return;
        }
        size_t n_ids = 0;
        st = zp_encode(w->enc, text, tl, w->ids, &n_ids);
        if (st != ZP_OK) {
            chunk_fail(c, jb, i, "%s", zp_status_str(st));
            return;
        }
        /* at most 11 bytes per id ("4294967295,"), "[]\n", and the
         * 8-byte stores' overhang (id_text.h) */
        if (zpi_grow((void **)&c->out, &c->cap, c->len + n_ids * 12 + 3 + 8, 1) != 0) {
            chunk_fail(c, jb, i, "out of memory");
            return;
        }
        char *p = c->out + c->len;
        *p++ = '[';
        for (size_t k = 0; k < n_ids; k++)
            p = zpc_id_put(jb->ids, p, (uint32_t)w->ids[k]);
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

/* ------------------------------------------------------------ the run */

/* What the team's callbacks share. */
typedef struct run {
    tok_lines lines;   /* the input (take: one at a time) */
    size_t chunk_bytes;
    slot *slots;       /* the team's window */
    worker *ws;        /* one per thread */
    job jb;
} run;

/* take: the next chunk of lines, or where the input ended in an error. */
static zp_status team_take(void *ctx, uint64_t i, size_t k, zpi_err *err)
{
    (void)i;
    (void)err;
    run *r = ctx;
    slot *c = &r->slots[k];
    c->len = 0;
    c->err_line = SIZE_MAX;
    c->in.line0 = r->lines.line0;
    int got = tok_lines_next(&r->lines, r->chunk_bytes, &c->in);
    if (got == 0)
        return ZP_END;
    c->kind = got == 1 ? SLOT_LINES : got == -1 ? SLOT_READ_ERROR : SLOT_NOMEM;
    return ZP_OK;
}

static zp_status team_work(void *ctx, uint64_t i, size_t k, int thread, zpi_err *err)
{
    (void)i;
    (void)err;
    run *r = ctx;
    if (r->slots[k].kind == SLOT_LINES)
        run_chunk(&r->jb, &r->slots[k], &r->ws[thread]);
    return ZP_OK;
}

/* put: write the chunk's output; the first bad line, a read error or a
 * write error stops the command (the message in err). */
static zp_status team_put(void *ctx, uint64_t i, size_t k, zpi_err *err)
{
    (void)i;
    run *r = ctx;
    slot *c = &r->slots[k];
    if (c->kind == SLOT_READ_ERROR)
        return zpi_err_set(err, ZP_ERR_IO, "%s: %s after line %zu", r->jb.name, r->lines.err.msg,
                           c->in.line0);
    if (c->kind == SLOT_NOMEM) {
        if (c->in.line0 == 0)
            return zpi_err_set(err, ZP_ERR_NOMEM, "%s: out of memory reading line 1", r->jb.name);
        return zpi_err_set(err, ZP_ERR_NOMEM, "%s: out of memory reading after line %zu",
                           r->jb.name, c->in.line0);
    }
    zpi_err werr;
    if (write_out(c->out, c->len, &werr) != 0) {
        if (c->err_line == SIZE_MAX)
            return zpi_err_set(err, ZP_ERR_IO, "%s", werr.msg);
        return zpi_err_set(err, ZP_ERR_IO, "%s\nzephon tokenize: %s", werr.msg, c->err);
    }
    if (c->err_line != SIZE_MAX)
        return zpi_err_set(err, ZP_ERR_FORMAT, "%s", c->err);
    return ZP_OK;
}

static const zpi_oteam_ops team_ops = {team_take, team_work, team_put};

/* ------------------------------------------------------------ the command */

typedef struct opts {
    const char *tokname, *field, *path;
    int nt;
    int match_special; /* --match-special */
} opts;

/* Parse the arguments into o. -1: go on; else the exit status (help: 0,
 * usage error: 2). */
static int parse_args(int argc, char **argv, opts *o)
{
    const char *threads_arg = NULL;
    o->tokname = "gpt2";
    o->field = "text";
    o->path = NULL;
    o->match_special = 0;
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
                o->tokname = argv[++i];
            else if (strcmp(a, "--field") == 0)
                o->field = argv[++i];
            else
                threads_arg = argv[++i];
        } else if (strcmp(a, "--match-special") == 0) {
            o->match_special = 1;
        } else if (strncmp(a, "--tokenizer=", 12) == 0) {
            o->tokname = a + 12;
        } else if (strncmp(a, "--field=", 8) == 0) {
            o->field = a + 8;
        } else if (strncmp(a, "--threads=", 10) == 0) {
            threads_arg = a + 10;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "zephon tokenize: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (o->path) {
            fprintf(stderr, "zephon tokenize: one input file at most ('%s', '%s')\n", o->path, a);
            return 2;
        } else {
            o->path = a;
        }
    }
    o->nt = omp_get_max_threads();
    if (threads_arg) {
        uint64_t v;
        if (zpi_parse_u64(threads_arg, 1, MAX_THREADS, 0, &v) != 0) {
            fprintf(stderr, "zephon tokenize: --threads '%s': must be an integer from 1 to %d\n",
                    threads_arg, MAX_THREADS);
            return 2;
        }
        o->nt = (int)v;
    }
    if (o->nt < 1)
        o->nt = 1;
    if (o->nt > MAX_THREADS)
        o->nt = MAX_THREADS;
    return -1;
}

/* The tokenizer, the threads' tools, the id table and the team's slots.
 * 0, or -1 with the message printed. */
static int setup(run *r, const opts *o, zp_tokenizer **tok, size_t window)
{
    char err[512];
    r->ws = calloc((size_t)o->nt, sizeof *r->ws);
    r->slots = calloc(window, sizeof *r->slots);
    if (!r->ws || !r->slots) {
        fprintf(stderr, "zephon tokenize: out of memory\n");
        return -1;
    }
    zp_tokenizer_config tc;
    zp_tokenizer_config_init(&tc);
    tc.match_special = o->match_special;
    zp_status st = zp_tokenizer_create(o->tokname, &tc, tok, err, sizeof err);
    if (st != ZP_OK) {
        fprintf(stderr, "zephon tokenize: %s\n", err);
        return -1;
    }
    for (int t = 0; t < o->nt; t++) {
        r->ws[t].tok = *tok;
        if (zpi_json_create(&r->ws[t].json) != ZP_OK ||
            zp_encoder_create(*tok, &r->ws[t].enc) != ZP_OK) {
            fprintf(stderr, "zephon tokenize: out of memory\n");
            return -1;
        }
    }
    return 0;
}

static void teardown(run *r, int nt, size_t window)
{
    if (r->ws)
        for (int t = 0; t < nt; t++) {
            zpi_json_destroy(r->ws[t].json);
            zp_encoder_destroy(r->ws[t].enc);
            free(r->ws[t].ids);
        }
    free(r->ws);
    if (r->slots)
        for (size_t k = 0; k < window; k++) {
            free(r->slots[k].in.buf);
            free(r->slots[k].in.starts);
            free(r->slots[k].out);
        }
    free(r->slots);
    tok_lines_free(&r->lines);
}

int cli_cmd_tokenize(int argc, char **argv)
{
    opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0)
        return rc;
    const char *name = (!o.path || strcmp(o.path, "-") == 0) ? "<stdin>" : o.path;
    int fd = STDIN_FILENO;
    if (o.path && strcmp(o.path, "-") != 0) {
        fd = open(o.path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            fprintf(stderr, "zephon tokenize: cannot open '%s': %s\n", o.path, strerror(errno));
            return 1;
        }
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    }
    rc = 1;
    zp_tokenizer *tok = NULL;
    zpc_id_text idt;
    zpc_id_text_init(&idt);
    size_t window = (size_t)o.nt * CHUNKS_PER_THREAD;
    run r;
    memset(&r, 0, sizeof r);
    r.jb = (job){o.field, name, &idt};
    /* chunks of CHUNK_BYTES, smaller when many threads would hold more
     * than IN_FLIGHT_BYTES of input (at least 4 KiB) */
    r.chunk_bytes = IN_FLIGHT_BYTES / window < CHUNK_BYTES ? IN_FLIGHT_BYTES / window : CHUNK_BYTES;
    if (r.chunk_bytes < 4096)
        r.chunk_bytes = 4096;
    tok_input in;
    if (tok_input_open(&in, fd, name) != 0)
        goto out;
    tok_lines_init(&r.lines, &in);
    if (setup(&r, &o, &tok, window) != 0)
        goto out;
    zpi_err err;
    if (zpi_oteam_run(&team_ops, &r, window, o.nt, &err) != ZP_OK) {
        fprintf(stderr, "zephon tokenize: %s\n", err.msg);
        goto out;
    }
    rc = 0;
out:
    teardown(&r, o.nt, window);
    tok_input_close(&in);
    zp_tokenizer_destroy(tok);
    if (fd != STDIN_FILENO)
        close(fd);
    return rc;
}
