/*
 * preprocess.c - JSON text shards -> pre-tokenized token shards
 * (zephon/preprocess.h, docs/preprocess.md).
 *
 * One shard after the other, each read forward in parts of about 4 MiB of
 * decoded records (zpi_seg_reader_next: plain, zstd and gzip; a Parquet
 * shard comes whole) by a thread of its own, the feeder, which reads at
 * most two parts ahead and on into the next shard. The parts' records are
 * cut into blocks of about block_bytes, and one team of OpenMP threads for
 * the whole run works the blocks, across the shards' ends (no barrier
 * between shards: the put of a shard's first block opens its output, that
 * of its last block commits it, while the other threads encode on):
 *
 *   - a thread takes the next block (in record order) and parses and
 *     encodes its records into the block's own buffers (one zpi_json and
 *     one zp_encoder per thread);
 *   - the block next in record order, once encoded, is written by whichever
 *     thread finds it ready first (one writer at a time, outside the lock),
 *     while the other threads go on encoding the blocks after it; the write
 *     of a part's last block hands the part's buffer back to the feeder.
 *
 * At most `window` blocks (4 per thread) are encoded ahead of the writer, so
 * memory is bounded by the threads and the parts, not by the shard. The
 * team's hand-overs are ordered by one mutex and condition variable (the
 * block states, the next block to take, the next to write, the writer
 * flag); the feeder's by its own.
 *
 * The documents go to a sink: a token writer (src/formats/tokw.h: .part file,
 * committed and renamed when the shard is complete), memory
 * (zp_preprocess_encode_shard), or pieces of a million tokens handed to the
 * caller's function (zp_preprocess_encode_shard_to, the MPI layer's shared
 * file).
 *
 * Process-wide state: none (the HDF5 writer takes the library's HDF5 lock
 * itself).
 */
#include "zephon/preprocess.h"

#include <errno.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fcntl.h>

#include "data/dataset_internal.h"
#include "base/error.h"
#include "formats/format.h"
#include "formats/segment.h"
#include "base/json.h"
#include "data/manifest.h"
#include "formats/tokw.h"
#include "formats/unfinished.h"
#include "base/fsio.h"
#include "base/ordered_team.h"
#include "base/util.h"
#include "zephon/tokenizer.h"

#define MAX_THREADS 1024
#define DEFAULT_BLOCK_BYTES ((size_t)64 << 10)
#define BLOCKS_PER_THREAD 4

/* ------------------------------------------------------------ the handle */

typedef struct worker {
    zpi_json *json;
    zp_encoder *enc;
} worker;

struct zp_preprocess {
    zpi_err err;
    zp_preprocess_config cfg;
    char *out_dir, *tok_id, *field; /* owned copies */
    zp_dataset *ds;                 /* borrowed */
    zp_tokenizer *tok;
    zp_dtype dtype;
    int32_t eot;
    int nt;
    worker *ws;
    size_t n_shards;
    char **out_name; /* "x.h5" / "x.bin" (relative to out_dir) */
    char **out_path; /* OUT/x.h5, or the Megatron prefix OUT/x */
    zp_preprocess_shard *res;
    zp_preprocess_stats stats;
    double t0;
    int ready; /* created without error (else an error-only handle) */
};

void zp_preprocess_config_init(zp_preprocess_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->format = ZP_PREPROCESS_HDF5;
    cfg->tokenizer = "gpt2";
    cfg->field = "text";
    cfg->shard_stride = 1;
    cfg->block_bytes = DEFAULT_BLOCK_BYTES;
}

const char *zp_preprocess_errmsg(const zp_preprocess *pp)
{
    return pp ? zpi_err_msg(&pp->err) : "out of memory";
}

void zp_preprocess_destroy(zp_preprocess *pp)
{
    if (!pp)
        return;
    if (pp->ws)
        for (int t = 0; t < pp->nt; t++) {
            zpi_json_destroy(pp->ws[t].json);
            zp_encoder_destroy(pp->ws[t].enc);
        }
    free(pp->ws);
    for (size_t i = 0; i < pp->n_shards; i++) {
        if (pp->out_name)
            free(pp->out_name[i]);
        if (pp->out_path)
            free(pp->out_path[i]);
    }
    free(pp->out_name);
    free(pp->out_path);
    free(pp->res);
    zp_tokenizer_destroy(pp->tok);
    free(pp->out_dir);
    free(pp->tok_id);
    free(pp->field);
    free(pp);
}

static int selected(const zp_preprocess *pp, size_t i)
{
    return i % pp->cfg.shard_stride == pp->cfg.shard_offset;
}

static const char *fmt_suffix(const zp_preprocess *pp)
{
    return pp->cfg.format == ZP_PREPROCESS_MEGATRON ? ".bin" : ".h5";
}

typedef struct name_pair {
    const char *s;
    size_t i;
} name_pair;

static int cmp_pair(const void *a, const void *b)
{
    const name_pair *x = a, *y = b;
    int c = strcmp(x->s, y->s);
    return c ? c : (x->i > y->i) - (x->i < y->i);
}

/* Work out the output names. */
static zp_status name_outputs(zp_preprocess *pp)
{
    size_t n = pp->n_shards;
    pp->out_name = calloc(n ? n : 1, sizeof *pp->out_name);
    pp->out_path = calloc(n ? n : 1, sizeof *pp->out_path);
    pp->res = calloc(n ? n : 1, sizeof *pp->res);
    if (!pp->out_name || !pp->out_path || !pp->res)
        return zpi_err_set(&pp->err, ZP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const char *path = zpi_dataset_shard_path(pp->ds, i);
        const char *name = zp_dataset_shard_name(pp->ds, i);
        const zpi_format *f = zpi_dataset_shard_format(pp->ds, i);
        if (!path || !f || strstr(path, "://"))
            return zpi_err_set(&pp->err, ZP_ERR_UNSUPPORTED,
                               "shard '%s': preprocess reads local files only (download "
                               "remote shards first)",
                               name ? name : "?");
        if (f->seg == ZPI_FMT_NO_SEGMENTS) /* the text formats (formats/shard.h) */
            return zpi_err_set(&pp->err, ZP_ERR_UNSUPPORTED,
                               "shard '%s': format '%s': preprocess reads text shards "
                               "(jsonl, jsonl.zst, jsonl.gz, parquet)",
                               name, f->name);
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        size_t bl = strlen(base), sl = strlen(f->suffix);
        if (bl >= sl && strcmp(base + bl - sl, f->suffix) == 0)
            bl -= sl;
        const char *suf = fmt_suffix(pp);
        size_t nl = bl + strlen(suf) + 1;
        size_t pl = strlen(pp->out_dir) + 1 + bl + strlen(suf) + 1;
        pp->out_name[i] = malloc(nl);
        pp->out_path[i] = malloc(pl);
        if (!pp->out_name[i] || !pp->out_path[i])
            return zpi_err_set(&pp->err, ZP_ERR_NOMEM, "out of memory");
        snprintf(pp->out_name[i], nl, "%.*s%s", (int)bl, base, suf);
        snprintf(pp->out_path[i], pl, "%s/%.*s%s", pp->out_dir, (int)bl, base,
                 pp->cfg.format == ZP_PREPROCESS_MEGATRON ? "" : suf);
        if (bl == 0)
            return zpi_err_set(&pp->err, ZP_ERR_INVALID,
                               "shard '%s': its file name gives an empty output name", name);
    }
    return ZP_OK;
}

/* Two shards with one output name are an error (checked before writing). */
static zp_status check_collisions(zp_preprocess *pp)
{
    size_t n = pp->n_shards;
    /* collisions: sort (name, index) pairs by name */
    name_pair *pr = malloc((n ? n : 1) * sizeof *pr);
    if (!pr)
        return zpi_err_set(&pp->err, ZP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        pr[i] = (name_pair){pp->out_name[i], i};
    if (n > 1)
        qsort(pr, n, sizeof *pr, cmp_pair);
    zp_status st = ZP_OK;
    for (size_t k = 1; k < n && st == ZP_OK; k++) {
        if (strcmp(pr[k - 1].s, pr[k].s) == 0) {
            size_t a = pr[k - 1].i < pr[k].i ? pr[k - 1].i : pr[k].i;
            size_t b = pr[k - 1].i < pr[k].i ? pr[k].i : pr[k - 1].i;
            st = zpi_err_set(&pp->err, ZP_ERR_INVALID,
                             "shards '%s' and '%s' would both be written to '%s' (one output "
                             "per input shard, named by its base name)",
                             zp_dataset_shard_name(pp->ds, a), zp_dataset_shard_name(pp->ds, b),
                             pp->out_name[a]);
        }
    }
    free(pr);
    return st;
}

zp_status zp_preprocess_create(const zp_preprocess_config *cfg, zp_dataset *ds,
                               zp_preprocess **out)
{
    if (!out)
        return ZP_ERR_INVALID;
    zp_preprocess *pp = calloc(1, sizeof *pp);
    *out = pp;
    if (!pp)
        return ZP_ERR_NOMEM;
    zp_preprocess_config_init(&pp->cfg);
    if (cfg)
        pp->cfg = *cfg;
    zp_preprocess_config *c = &pp->cfg;
    if (!ds)
        return zpi_err_set(&pp->err, ZP_ERR_INVALID, "dataset: NULL");
    pp->ds = ds;
    if (!c->out_dir || !c->out_dir[0])
        return zpi_err_set(&pp->err, ZP_ERR_INVALID, "out_dir: missing");
    if (c->format != ZP_PREPROCESS_HDF5 && c->format != ZP_PREPROCESS_MEGATRON)
        return zpi_err_set(&pp->err, ZP_ERR_INVALID, "format = %d: not a zp_preprocess_format",
                           (int)c->format);
    if (c->threads < 0 || c->threads > MAX_THREADS)
        return zpi_err_set(&pp->err, ZP_ERR_INVALID, "threads = %d: must be 0..%d", c->threads,
                           MAX_THREADS);
    if (c->shard_stride == 0)
        c->shard_stride = 1;
    if (c->shard_offset >= c->shard_stride)
        return zpi_err_set(&pp->err, ZP_ERR_INVALID,
                           "shard_offset = %zu: must be below shard_stride (%zu)", c->shard_offset,
                           c->shard_stride);
    if (c->block_bytes == 0)
        c->block_bytes = DEFAULT_BLOCK_BYTES;
    if (!c->tokenizer || !c->tokenizer[0])
        c->tokenizer = "gpt2";
    if (!c->field || !c->field[0])
        c->field = "text";
    pp->out_dir = zpi_strdup(c->out_dir);
    pp->tok_id = zpi_strdup(c->tokenizer);
    pp->field = zpi_strdup(c->field);
    if (!pp->out_dir || !pp->tok_id || !pp->field)
        return zpi_err_set(&pp->err, ZP_ERR_NOMEM, "out of memory");
    /* "out/" -> "out" (names are joined with '/'), but keep "/" */
    for (size_t l = strlen(pp->out_dir); l > 1 && pp->out_dir[l - 1] == '/'; l--)
        pp->out_dir[l - 1] = '\0';
    c->out_dir = pp->out_dir;
    c->tokenizer = pp->tok_id;
    c->field = pp->field;
    char terr[512];
    zp_status st = zp_tokenizer_create(c->tokenizer, c->tokenizer_config, &pp->tok, terr,
                                       sizeof terr);
    c->tokenizer_config = NULL; /* borrowed until here */
    if (st != ZP_OK)
        return zpi_err_set(&pp->err, st, "tokenizer '%s': %s", c->tokenizer, terr);
    pp->dtype = zp_tokenizer_vocab_size(pp->tok) <= 65536 ? ZP_DTYPE_U16 : ZP_DTYPE_I32;
    pp->eot = zp_tokenizer_eot(pp->tok);
    pp->nt = c->threads ? c->threads : omp_get_max_threads();
    if (pp->nt < 1)
        pp->nt = 1;
    if (pp->nt > MAX_THREADS)
        pp->nt = MAX_THREADS;
    pp->ws = calloc((size_t)pp->nt, sizeof *pp->ws);
    if (!pp->ws)
        return zpi_err_set(&pp->err, ZP_ERR_NOMEM, "out of memory");
    for (int t = 0; t < pp->nt; t++)
        if (zpi_json_create(&pp->ws[t].json) != ZP_OK ||
            zp_encoder_create(pp->tok, &pp->ws[t].enc) != ZP_OK)
            return zpi_err_set(&pp->err, ZP_ERR_NOMEM, "out of memory (thread %d's encoder)", t);
    pp->n_shards = zp_dataset_num_shards(ds);
    zp_status nst = name_outputs(pp);
    pp->ready = nst == ZP_OK;
    return nst;
}

zp_dtype zp_preprocess_dtype(const zp_preprocess *pp) { return pp ? pp->dtype : ZP_DTYPE_NONE; }
int32_t zp_preprocess_eot(const zp_preprocess *pp) { return pp ? pp->eot : -1; }
const char *zp_preprocess_tokenizer(const zp_preprocess *pp)
{
    return pp && pp->tok ? zp_tokenizer_ident(pp->tok) : NULL;
}

const char *zp_preprocess_output_name(const zp_preprocess *pp, size_t i)
{
    return pp && pp->out_name && i < pp->n_shards ? pp->out_name[i] : NULL;
}

zp_status zp_preprocess_get_shard(const zp_preprocess *pp, size_t i, zp_preprocess_shard *out)
{
    if (!pp || !out || !pp->res || i >= pp->n_shards)
        return ZP_ERR_INVALID;
    *out = pp->res[i];
    return ZP_OK;
}

zp_status zp_preprocess_set_shard(zp_preprocess *pp, size_t i, const zp_preprocess_shard *s)
{
    if (!pp || !s || !pp->res || i >= pp->n_shards)
        return ZP_ERR_INVALID;
    pp->res[i] = *s;
    return ZP_OK;
}

void zp_preprocess_get_stats(const zp_preprocess *pp, zp_preprocess_stats *out)
{
    if (!out)
        return;
    if (!pp)
        memset(out, 0, sizeof *out);
    else
        *out = pp->stats;
}

/* ------------------------------------------------------------ outputs */

static int exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

static char *manifest_path(const zp_preprocess *pp)
{
    return zpi_path_join(pp->out_dir, "manifest.json");
}

/* The final files of shard i: 1 (HDF5) or 2 (Megatron: .bin, .idx). */
static int final_files(const zp_preprocess *pp, size_t i, char *a, char *b, size_t cap)
{
    if (pp->cfg.format == ZP_PREPROCESS_MEGATRON) {
        zpi_fmt(a, cap, "%s.bin", pp->out_path[i]);
        zpi_fmt(b, cap, "%s.idx", pp->out_path[i]);
        return 2;
    }
    zpi_fmt(a, cap, "%s", pp->out_path[i]);
    b[0] = '\0';
    return 1;
}

/* No output of this handle's shards exists (else ZP_ERR_STATE naming it,
 * and saying how to redo an unfinished folder). */
static zp_status check_outputs_absent(zp_preprocess *pp)
{
    for (size_t i = 0; i < pp->n_shards; i++) {
        if (!selected(pp, i))
            continue;
        char a[4096], b[4096];
        int n = final_files(pp, i, a, b, sizeof a);
        for (int k = 0; k < n; k++) {
            const char *f = k ? b : a;
            if (!exists(f))
                continue;
            zpi_err tmp;
            int unfinished = zpi_unfinished_check(f, f, &tmp) != ZP_OK;
            return zpi_err_set(&pp->err, ZP_ERR_STATE, "'%s' exists (the output of shard '%s')%s",
                               f, zp_dataset_shard_name(pp->ds, i),
                               unfinished ? ": the folder holds the output of a zephon "
                                            "preprocess that did not finish ('" ZPI_UNFINISHED_NAME "')"
                                          : "");
        }
    }
    return ZP_OK;
}

zp_status zp_preprocess_prepare(zp_preprocess *pp)
{
    if (!pp)
        return ZP_ERR_INVALID;
    if (!pp->ready)
        return pp->err.code ? pp->err.code : ZP_ERR_STATE; /* error-only handle */
#ifndef ZP_HAVE_FORMAT_HDF5
    if (pp->cfg.format == ZP_PREPROCESS_HDF5)
        return zpi_err_set(&pp->err, ZP_ERR_UNSUPPORTED,
                           "format hdf5: this build of the library has no HDF5 writer");
#endif
#ifndef ZP_HAVE_FORMAT_MEGATRON
    if (pp->cfg.format == ZP_PREPROCESS_MEGATRON)
        return zpi_err_set(&pp->err, ZP_ERR_UNSUPPORTED,
                           "format megatron: this build of the library has no Megatron writer");
#endif
    zp_status cst = check_collisions(pp);
    if (cst != ZP_OK)
        return cst;
    if (zpi_mkdir_p(pp->out_dir, 0777) != 0) {
        int e = errno;
        return zpi_err_set(&pp->err, ZP_ERR_IO, "output folder '%s': cannot create: %s",
                           pp->out_dir, strerror(e));
    }
    struct stat sb;
    if (stat(pp->out_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return zpi_err_set(&pp->err, ZP_ERR_IO, "output folder '%s': not a folder", pp->out_dir);
    char *mp = manifest_path(pp);
    if (!mp)
        return zpi_err_set(&pp->err, ZP_ERR_NOMEM, "out of memory");
    zp_status st = ZP_OK;
    if (exists(mp) && !pp->cfg.force)
        st = zpi_err_set(&pp->err, ZP_ERR_STATE,
                         "'%s' exists: the folder holds a finished output", mp);
    if (st == ZP_OK && !pp->cfg.force)
        st = check_outputs_absent(pp);
    /* the folder says it is unfinished before anything in it changes; the
     * manifest, written last, is what removes the marker */
    if (st == ZP_OK)
        st = zpi_unfinished_mark(pp->out_dir, &pp->err);
    if (st == ZP_OK && pp->cfg.force && unlink(mp) != 0 && errno != ENOENT) {
        int e = errno;
        st = zpi_err_set(&pp->err, ZP_ERR_IO, "cannot remove '%s': %s", mp, strerror(e));
    }
    free(mp);
    return st;
}

/* ------------------------------------------------------------ sinks */

typedef struct sink sink;
struct sink {
    zp_status (*add)(sink *s, const int32_t *tok, size_t n, zpi_err *err);
    zpi_tokw *w;        /* the token writer */
    /* memory, or a buffer of up to tok_cap tokens handed to put when full */
    zp_dtype dtype;
    void *tok;
    size_t tok_cap; /* elements */
    uint64_t n_tok;     /* tokens of the shard */
    uint64_t n_held;    /* of them, held in tok (memory: all) */
    uint64_t *off;
    size_t off_cap;
    uint64_t n_docs;
    zp_tokens_fn put;   /* NULL: memory */
    void *put_user;
};

static zp_status sink_tokw_add(sink *s, const int32_t *tok, size_t n, zpi_err *err)
{
    return zpi_tokw_add(s->w, tok, n, err);
}

/* Tokens handed to a zp_tokens_fn at a time (SINK_PIECE x 2 or 4 bytes). */
#define SINK_PIECE ((size_t)1 << 20)

/* The held tokens to the sink's put; 0 held after. */
static zp_status sink_flush(sink *s, zpi_err *err)
{
    if (!s->put || s->n_held == 0)
        return ZP_OK;
    char msg[ZPI_ERRMAX] = "";
    zp_status st = s->put(s->put_user, s->tok, (size_t)s->n_held, msg, sizeof msg);
    if (st != ZP_OK)
        return zpi_err_set(err, st, "%s", msg[0] ? msg : "the tokens' writer failed");
    s->n_held = 0;
    return ZP_OK;
}

/* A document into memory: all of it (zp_preprocess_encode_shard), or
 * through a buffer of SINK_PIECE tokens to the sink's put. */
static zp_status sink_mem_add(sink *s, const int32_t *tok, size_t n, zpi_err *err)
{
    size_t es = zp_dtype_size(s->dtype);
    if (zpi_grow((void **)&s->off, &s->off_cap, s->n_docs + 2, sizeof *s->off) != 0)
        return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory holding %llu documents' ends",
                           (unsigned long long)(s->n_docs + 1));
    if (s->n_docs == 0)
        s->off[0] = 0;
    s->off[++s->n_docs] = s->n_tok + n;
    while (n > 0) {
        size_t take = n;
        if (s->put) {
            if (s->n_held == SINK_PIECE) {
                zp_status st = sink_flush(s, err);
                if (st != ZP_OK)
                    return st;
            }
            if (take > SINK_PIECE - s->n_held)
                take = SINK_PIECE - s->n_held;
        }
        if (zpi_grow(&s->tok, &s->tok_cap, s->n_held + take, es) != 0)
            return zpi_err_set(err, ZP_ERR_NOMEM, "out of memory holding %llu tokens",
                               (unsigned long long)(s->n_held + take));
        if (s->dtype == ZP_DTYPE_U16) {
            uint16_t *d = (uint16_t *)s->tok + s->n_held;
            for (size_t k = 0; k < take; k++)
                d[k] = (uint16_t)tok[k];
        } else {
            memcpy((int32_t *)s->tok + s->n_held, tok, take * sizeof *tok);
        }
        s->n_held += take;
        s->n_tok += take;
        tok += take;
        n -= take;
    }
    return ZP_OK;
}

/* ------------------------------------------------------------ the feeder */

/* A shard is read forward in parts of about PART_BYTES decoded bytes
 * (zpi_seg_reader_next) by a thread of its own, the feeder, which runs at
 * most FEED_AHEAD parts ahead of the team: memory follows the parts, not
 * the shards, and the feeder reads on into the next shard while the team
 * finishes one. A part's decode buffer goes back to the feeder when its
 * last block is written, so the parts after the first few touch no fresh
 * pages. Formats not read in parts (Parquet) come as one part, loaded
 * whole. */
#define PART_BYTES ((size_t)4 << 20)
#define FEED_AHEAD 2
#define FEED_SPARES 4

typedef struct part {
    zpi_fifo_node node; /* in the feeder's queue, then in the run's held list */
    size_t shard;
    zpi_shard sh;      /* its records; sh.first_record: the first one's number */
    int last;          /* the shard's last part */
    int whole;         /* loaded whole (its buffer is not recycled) */
    zp_status st;      /* a failed read: the error, no records */
    zpi_err err;
} part;

typedef struct feeder {
    const zp_preprocess *pp;
    const size_t *order; /* the shards, in order */
    size_t n_order;
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    zpi_fifo queue; /* parts read, not taken */
    int stop;
    char *spare[FEED_SPARES]; /* decode buffers of released parts */
    size_t spare_cap[FEED_SPARES];
    size_t n_spare;
    zpi_seg_kit kit; /* a finished shard's reader's buffers, for the next */
} feeder;

/* Queue p (under no lock); waits while FEED_AHEAD parts are queued. 0, or
 * -1 when the feeder is stopped (p freed). */
static int feed_push(feeder *fd, part *p)
{
    pthread_mutex_lock(&fd->mu);
    while (fd->queue.n >= FEED_AHEAD && !fd->stop)
        pthread_cond_wait(&fd->cv, &fd->mu);
    if (fd->stop) {
        pthread_mutex_unlock(&fd->mu);
        zpi_shard_free(&p->sh);
        free(p);
        return -1;
    }
    zpi_fifo_push(&fd->queue, &p->node);
    pthread_cond_broadcast(&fd->cv);
    pthread_mutex_unlock(&fd->mu);
    return 0;
}

/* A new part of shard i; NULL when out of memory. */
static part *part_new(size_t i)
{
    part *p = calloc(1, sizeof *p);
    if (p)
        p->shard = i;
    return p;
}

/* Queue a failed part (the feeder stops after it). */
static void feed_fail(feeder *fd, size_t i, zp_status st, const zpi_err *e)
{
    part *p = part_new(i);
    if (!p) { /* no room for the message: the team sees a bare failure */
        pthread_mutex_lock(&fd->mu);
        fd->stop = 1;
        pthread_cond_broadcast(&fd->cv);
        pthread_mutex_unlock(&fd->mu);
        return;
    }
    p->st = st;
    zpi_err_copy(&p->err, e);
    p->last = 1;
    feed_push(fd, p);
}

/* Shard i read whole (formats not read in parts). 0, or -1 to stop. */
static int feed_whole(feeder *fd, size_t i)
{
    const zp_preprocess *pp = fd->pp;
    const zpi_format *f = zpi_dataset_shard_format(pp->ds, i);
    part *p = part_new(i);
    zpi_err e;
    if (!p) {
        zpi_err_set(&e, ZP_ERR_NOMEM, "out of memory");
        feed_fail(fd, i, ZP_ERR_NOMEM, &e);
        return -1;
    }
    zp_status st = f->load(zpi_dataset_shard_path(pp->ds, i), zp_dataset_shard_name(pp->ds, i),
                           zpi_dataset_shard_limits(pp->ds, i), &p->sh, &e);
    if (st == ZP_OK && p->sh.rd) {
        zpi_shard_free(&p->sh);
        st = zpi_err_set(&e, ZP_ERR_UNSUPPORTED, "shard '%s': not a JSON text shard",
                         zp_dataset_shard_name(pp->ds, i));
    }
    if (st != ZP_OK) {
        free(p);
        feed_fail(fd, i, st, &e);
        return -1;
    }
    p->last = 1;
    p->whole = 1;
    return feed_push(fd, p);
}

/* Shard i read forward in parts. 0, or -1 to stop. */
static int feed_parts(feeder *fd, size_t i, int compressed)
{
    const zp_preprocess *pp = fd->pp;
    const char *path = zpi_dataset_shard_path(pp->ds, i);
    const char *name = zp_dataset_shard_name(pp->ds, i);
    const zpi_load_limits *lim = zpi_dataset_shard_limits(pp->ds, i);
    zpi_err e;
    zp_status st = zpi_load_check_file_hash(lim, name, path, &e);
    zpi_seg_reader *rd = NULL;
    if (st == ZP_OK)
        st = zpi_seg_reader_open_kit(path, name, compressed, lim, 0, 1, &fd->kit, &rd, &e);
    uint64_t records = 0;
    while (st == ZP_OK) {
        part *p = part_new(i);
        if (!p) {
            st = zpi_err_set(&e, ZP_ERR_NOMEM, "out of memory");
            break;
        }
        zpi_load_bufs bufs;
        memset(&bufs, 0, sizeof bufs);
        pthread_mutex_lock(&fd->mu);
        if (fd->n_spare > 0) {
            fd->n_spare--;
            bufs.data = fd->spare[fd->n_spare];
            bufs.data_cap = fd->spare_cap[fd->n_spare];
        }
        pthread_mutex_unlock(&fd->mu);
        st = zpi_seg_reader_next(rd, PART_BYTES, &bufs, &p->sh, &e);
        free(bufs.data); /* not taken */
        if (st == ZP_END) {
            /* the shard ended on a part's cut: an empty last part */
            memset(&p->sh, 0, sizeof p->sh);
            st = ZP_OK;
            p->last = 1;
        } else if (st != ZP_OK) {
            free(p);
            break;
        }
        records += p->sh.n_records;
        if (zpi_seg_reader_ended(rd))
            p->last = 1;
        if (p->last) {
            zpi_shard whole;
            memset(&whole, 0, sizeof whole);
            whole.n_records = records;
            if (records == 0 && !lim->allow_empty)
                st = zpi_err_set(&e, ZP_ERR_FORMAT, "shard '%s': no records (empty shard)", name);
            else
                st = zpi_load_check(lim, name, path, NULL, &whole, &e);
            if (st != ZP_OK) {
                zpi_shard_free(&p->sh);
                free(p);
                break;
            }
        }
        int last = p->last;
        if (feed_push(fd, p) != 0) {
            zpi_seg_reader_close(rd);
            return -1;
        }
        if (last)
            break;
    }
    if (rd)
        zpi_seg_reader_retire(rd, &fd->kit);
    if (st != ZP_OK) {
        feed_fail(fd, i, st, &e);
        return -1;
    }
    return 0;
}

static void *feed_main(void *arg)
{
    feeder *fd = arg;
    for (size_t k = 0; k < fd->n_order; k++) {
        size_t i = fd->order[k];
        const zpi_format *f = zpi_dataset_shard_format(fd->pp->ds, i);
        int r = f->seg == ZPI_FMT_SEG_PLAIN  ? feed_parts(fd, i, ZPI_SEG_NONE)
                : f->seg == ZPI_FMT_SEG_ZSTD ? feed_parts(fd, i, ZPI_SEG_ZSTD)
                : f->seg == ZPI_FMT_SEG_GZIP ? feed_parts(fd, i, ZPI_SEG_GZIP)
                                             : feed_whole(fd, i);
        if (r != 0)
            break;
    }
    return NULL;
}

/* Start reading the shards order[0..n) in a thread of its own. 0, or -1
 * when the thread cannot start (the caller fails the run). */
static int feeder_start(feeder *fd, const zp_preprocess *pp, const size_t *order, size_t n)
{
    memset(fd, 0, sizeof *fd);
    fd->pp = pp;
    fd->order = order;
    fd->n_order = n;
    if (pthread_mutex_init(&fd->mu, NULL) != 0)
        return -1;
    if (pthread_cond_init(&fd->cv, NULL) != 0) {
        pthread_mutex_destroy(&fd->mu);
        return -1;
    }
    if (pthread_create(&fd->th, NULL, feed_main, fd) != 0) {
        pthread_cond_destroy(&fd->cv);
        pthread_mutex_destroy(&fd->mu);
        return -1;
    }
    fd->started = 1;
    return 0;
}

/* The next part (in shard order), waiting for it; NULL when the feeder
 * stopped without one (out of memory). */
static part *feeder_take(feeder *fd)
{
    pthread_mutex_lock(&fd->mu);
    while (!fd->queue.n && !fd->stop)
        pthread_cond_wait(&fd->cv, &fd->mu);
    zpi_fifo_node *x = zpi_fifo_pop(&fd->queue);
    if (x)
        pthread_cond_broadcast(&fd->cv);
    pthread_mutex_unlock(&fd->mu);
    return x ? ZPI_CONTAINER_OF(x, part, node) : NULL;
}

/* A part the team is done with: its buffer back to the feeder. */
static void feeder_release(feeder *fd, part *p)
{
    if (!p)
        return;
    if (!p->whole && p->sh.data) {
        pthread_mutex_lock(&fd->mu);
        if (fd->n_spare < FEED_SPARES) {
            fd->spare[fd->n_spare] = p->sh.data;
            fd->spare_cap[fd->n_spare] = p->sh.data_cap;
            fd->n_spare++;
            p->sh.data = NULL;
        }
        pthread_mutex_unlock(&fd->mu);
    }
    zpi_shard_free(&p->sh);
    free(p);
}

/* Stop the feeder, wait for it, free what it holds. */
static void feeder_finish(feeder *fd)
{
    if (!fd->started)
        return;
    pthread_mutex_lock(&fd->mu);
    fd->stop = 1;
    pthread_cond_broadcast(&fd->cv);
    pthread_mutex_unlock(&fd->mu);
    pthread_join(fd->th, NULL);
    for (zpi_fifo_node *x; (x = zpi_fifo_pop(&fd->queue));) {
        part *p = ZPI_CONTAINER_OF(x, part, node);
        zpi_shard_free(&p->sh);
        free(p);
    }
    for (size_t k = 0; k < fd->n_spare; k++)
        free(fd->spare[k]);
    zpi_seg_kit_free(&fd->kit);
    pthread_cond_destroy(&fd->cv);
    pthread_mutex_destroy(&fd->mu);
    fd->started = 0;
}

/* ------------------------------------------------------------ one shard */

typedef struct blk {
    part *p;           /* the part its records are in */
    size_t r0, r1;     /* records [r0, r1) of the part */
    int part_end;      /* the part's last block: the put releases the part */
    int32_t *tok;      /* the documents' tokens, one after the other */
    size_t tok_len, tok_cap;
    uint32_t *len;     /* tokens of each document (r1 - r0) */
    size_t len_cap;
    uint64_t text_bytes, skipped;
    char skip_msg[512]; /* the block's first skipped record */
    zp_status st;      /* a record failed (fail policy) or out of memory */
    char err[1024];
} blk;

/* One team for all the shards of a run: blocks are cut from the parts in
 * order, across the shards' ends (no barrier between shards), and the put
 * of a shard's first block begins its output, that of its last block ends
 * it (shard_begin, shard_end). */
typedef struct run run;
struct run {
    zp_preprocess *pp;
    feeder *fd;
    const size_t *order; /* the shards, in order (the feeder's) */
    size_t n_order;
    /* take's */
    part *cur;          /* the part blocks are cut from */
    size_t cur_next;    /* its next record */
    int cur_cut;        /* all of it is cut into blocks */
    size_t shards_cut;  /* shards whose last part is cut */
    /* put's: the shard being written */
    int writing;           /* its first block was put, not its last */
    uint64_t n_records;    /* its records put */
    uint64_t bytes_before; /* input bytes of the shards done before */
    uint64_t file_bytes;   /* its stored bytes */
    uint64_t read_bytes;   /* its bytes read by the parts put */
    sink *out;             /* where its documents go (set by shard_begin, or fixed) */
    /* optional; a failure's message in pp->err */
    zp_status (*shard_begin)(run *r, size_t i);
    zp_status (*shard_end)(run *r, size_t i);
    void *user;
    blk *ring;             /* the team's slots: block bi in ring[bi % window] */
    size_t window;
    /* the parts taken and not released, in order (puts are in order, so
     * a release is always of the first); guarded by the feeder's lock,
     * since a take and a put may run at once */
    zpi_fifo held;
};

static void fail_block(blk *b, const run *r, uint64_t rec, const char *fmt, const char *detail)
{
    char what[700];
    zpi_fmt(what, sizeof what, fmt, detail);
    zpi_fmt(b->err, sizeof b->err, "shard '%s' line %llu (record %llu): %s",
            zp_dataset_shard_name(r->pp->ds, b->p->shard),
            (unsigned long long)rec + 1, (unsigned long long)rec, what);
}

/* Parse and encode the records of b. */
static void encode_block(run *r, blk *b, worker *w)
{
    zp_preprocess *pp = r->pp;
    const zpi_shard *sh = &b->p->sh;
    b->tok_len = 0;
    b->text_bytes = 0;
    b->skipped = 0;
    b->skip_msg[0] = '\0';
    b->st = ZP_OK;
    size_t nrec = b->r1 - b->r0;
    if (zpi_grow((void **)&b->len, &b->len_cap, nrec + 1, sizeof *b->len) != 0) {
        b->st = ZP_ERR_NOMEM;
        fail_block(b, r, sh->first_record + b->r0, "%s", "out of memory");
        return;
    }
    for (size_t k = 0; k < nrec; k++) {
        size_t lrec = b->r0 + k;
        uint64_t rec = sh->first_record + lrec;
        const char *line = sh->data + sh->offsets[lrec];
        size_t n = (size_t)(sh->offsets[lrec + 1] - sh->offsets[lrec] - 1);
        zpi_err jerr;
        const char *why = NULL, *det = NULL;
        zp_status st = zpi_json_parse(w->json, line, n, &jerr);
        const char *text = NULL;
        size_t tl = 0;
        if (st == ZP_ERR_NOMEM) {
            b->st = st;
            fail_block(b, r, rec, "%s", "out of memory parsing the record");
            return;
        } else if (st != ZP_OK) {
            why = "invalid JSON: %s";
            det = jerr.msg;
        } else {
            st = zpi_json_get_string(w->json, pp->field, &text, &tl);
            if (st == ZP_END) {
                why = "no field '%s'";
                det = pp->field;
            } else if (st != ZP_OK) {
                why = "field '%s' is not a string";
                det = pp->field;
            }
        }
        if (why) {
            if (!pp->cfg.skip_bad_records) {
                b->st = ZP_ERR_FORMAT;
                fail_block(b, r, rec, why, det);
                return;
            }
            if (b->skipped++ == 0) {
                char what[400];
                zpi_fmt(what, sizeof what, why, det);
                zpi_fmt(b->skip_msg, sizeof b->skip_msg, "shard '%s' line %llu (record %llu): %s",
                        zp_dataset_shard_name(pp->ds, b->p->shard), (unsigned long long)rec + 1,
                        (unsigned long long)rec, what);
            }
            b->len[k] = 0;
            continue;
        }
        if (tl > UINT32_MAX - 1) {
            b->st = ZP_ERR_LIMIT;
            fail_block(b, r, rec, "%s", "text longer than 4 GiB");
            return;
        }
        if (zpi_grow((void **)&b->tok, &b->tok_cap,
                     b->tok_len + zp_encode_max_ids(pp->tok, tl) + 2, sizeof *b->tok) != 0) {
            b->st = ZP_ERR_NOMEM;
            fail_block(b, r, rec, "%s", "out of memory for its tokens");
            return;
        }
        size_t got = 0;
        /* --append-eot stores the document as Megatron trainers expect it:
         * the tokenizer's BOS (when its config adds one) before, EOT after */
        const int32_t bos = zp_tokenizer_bos(pp->tok);
        if (pp->cfg.append_eot && bos >= 0)
            b->tok[b->tok_len + got++] = bos;
        size_t enc_n = 0;
        st = zp_encode(w->enc, text, tl, b->tok + b->tok_len + got, &enc_n);
        got += enc_n;
        if (st != ZP_OK) {
            b->st = st;
            fail_block(b, r, rec, "encoder: %s", zp_status_str(st));
            return;
        }
        if (pp->cfg.append_eot)
            b->tok[b->tok_len + got++] = pp->eot;
        b->tok_len += got;
        b->len[k] = (uint32_t)got;
        b->text_bytes += tl;
    }
}

/* The held list (run.held): a part taken, the first one released. */
static void hold(run *r, part *p)
{
    pthread_mutex_lock(&r->fd->mu);
    zpi_fifo_push(&r->held, &p->node);
    pthread_mutex_unlock(&r->fd->mu);
}

static part *unhold(run *r)
{
    pthread_mutex_lock(&r->fd->mu);
    zpi_fifo_node *x = zpi_fifo_pop(&r->held);
    pthread_mutex_unlock(&r->fd->mu);
    return x ? ZPI_CONTAINER_OF(x, part, node) : NULL;
}

/* Write the documents of b (the writer; one at a time, in block order).
 * Returns ZP_OK or the failure (message in err). */
static zp_status write_block(run *r, blk *b, zpi_err *err)
{
    zp_preprocess *pp = r->pp;
    if (b->st != ZP_OK)
        return zpi_err_set(err, b->st, "%s", b->err);
    const size_t shard = b->p->shard;
    if (!r->writing) { /* the shard's first block */
        r->writing = 1;
        r->n_records = r->read_bytes = 0;
        r->bytes_before = pp->stats.bytes_in;
        r->file_bytes = zp_dataset_shard_bytes(pp->ds, shard);
        zp_status st = r->shard_begin ? r->shard_begin(r, shard) : ZP_OK;
        if (st != ZP_OK)
            return zpi_err_set(err, st, "%s", zpi_err_msg(&pp->err));
    }
    const zpi_shard *sh = &b->p->sh;
    const int shard_end = b->part_end && b->p->last;
    size_t off = 0, nrec = b->r1 - b->r0;
    for (size_t k = 0; k < nrec; k++) {
        zp_status st = r->out->add(r->out, b->tok + off, b->len[k], err);
        if (st != ZP_OK)
            return st;
        off += b->len[k];
    }
    if (b->skipped) {
        if (b->skipped == 1)
            zpi_log(pp->cfg.log, pp->cfg.log_user, ZP_LOG_WARN,
                    "%s: written as an empty document", b->skip_msg);
        else
            zpi_log(pp->cfg.log, pp->cfg.log_user, ZP_LOG_WARN,
                    "%s: written as an empty document (and %llu more bad records up to line "
                    "%llu)",
                    b->skip_msg, (unsigned long long)b->skipped - 1,
                    (unsigned long long)(sh->first_record + b->r1));
    }
    zp_preprocess_stats *s = &pp->stats;
    s->docs += nrec;
    s->tokens += b->tok_len;
    s->skipped += b->skipped;
    s->text_bytes += b->text_bytes;
    s->json_bytes += sh->offsets[b->r1] - sh->offsets[b->r0];
    r->n_records += nrec;
    if (b->part_end) {
        r->read_bytes += sh->file_bytes;
        part *first = unhold(r); /* b->p: puts are in order */
        feeder_release(r->fd, first);
        b->p = NULL;
    }
    s->bytes_in = r->bytes_before + (r->read_bytes < r->file_bytes ? r->read_bytes
                                                                     : r->file_bytes);
    s->seconds = zpi_now() - pp->t0;
    if (pp->cfg.progress)
        pp->cfg.progress(pp->cfg.user, s);
    if (shard_end) {
        s->bytes_in = r->bytes_before + r->file_bytes;
        r->writing = 0;
        zp_status st = r->shard_end ? r->shard_end(r, shard) : ZP_OK;
        if (st != ZP_OK)
            return zpi_err_set(err, st, "%s", zpi_err_msg(&pp->err));
    }
    return ZP_OK;
}

/* The ordered team's callbacks (base/ordered_team.h): blocks of about
 * block_bytes of records, cut from the parts in order, encoded by any
 * thread, written in block order. */
static zp_status team_take(void *ctx, uint64_t bi, size_t slot, zpi_err *err)
{
    run *r = ctx;
    (void)bi;
    if (!r->cur || r->cur_cut) {
        if (r->shards_cut == r->n_order)
            return ZP_END;
        const size_t want = r->order[r->shards_cut];
        part *p = feeder_take(r->fd);
        if (!p)
            return zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory reading it",
                               zp_dataset_shard_name(r->pp->ds, want));
        hold(r, p);
        if (p->st != ZP_OK)
            return zpi_err_set(err, p->st, "%s", zpi_err_msg(&p->err));
        if (p->shard != want)
            return zpi_err_set(err, ZP_ERR_INTERNAL, "shard '%s': a part of shard %zu came",
                               zp_dataset_shard_name(r->pp->ds, want), p->shard);
        r->cur = p;
        r->cur_next = 0;
        r->cur_cut = 0;
        r->shards_cut += (size_t)p->last;
    }
    const zpi_shard *sh = &r->cur->sh;
    blk *b = &r->ring[slot];
    b->p = r->cur;
    b->r0 = r->cur_next;
    size_t rec = b->r0;
    if (rec < sh->n_records) {
        uint64_t b0 = sh->offsets[rec];
        rec++;
        while (rec < sh->n_records && sh->offsets[rec] - b0 < r->pp->cfg.block_bytes)
            rec++;
    }
    b->r1 = rec;
    r->cur_next = rec;
    b->part_end = rec == sh->n_records;
    r->cur_cut = b->part_end;
    return ZP_OK;
}

static zp_status team_work(void *ctx, uint64_t bi, size_t slot, int thread, zpi_err *err)
{
    run *r = ctx;
    zp_preprocess *pp = r->pp;
    (void)bi;
    if (pp->cfg.stop && pp->cfg.stop(pp->cfg.user))
        return zpi_err_set(err, ZP_ERR_CALLBACK, "stopped");
    encode_block(r, &r->ring[slot], &pp->ws[thread]);
    return ZP_OK;
}

static zp_status team_put(void *ctx, uint64_t bi, size_t slot, zpi_err *err)
{
    (void)bi;
    run *r = ctx;
    return write_block(r, &r->ring[slot], err);
}

static const zpi_oteam_ops team_ops = {team_take, team_work, team_put};

/* Feed the documents of the shards order[0..n) to r's sinks, in order,
 * reading them with a feeder; r: pp, the hooks, user and out set, the rest
 * zero. */
static zp_status process_shards(run *r, const size_t *order, size_t n)
{
    zp_preprocess *pp = r->pp;
    if (n == 0)
        return ZP_OK;
    feeder fd;
    if (feeder_start(&fd, pp, order, n) != 0)
        return zpi_err_set(&pp->err, ZP_ERR_NOMEM, "cannot start the thread that reads the shards");
    zp_status st = ZP_OK;
    r->fd = &fd;
    r->order = order;
    r->n_order = n;
    r->window = (size_t)pp->nt * BLOCKS_PER_THREAD;
    if (!(r->ring = calloc(r->window, sizeof *r->ring)))
        st = zpi_err_set(&pp->err, ZP_ERR_NOMEM, "out of memory");
    if (st == ZP_OK) {
        zpi_err e;
        zp_status rs = zpi_oteam_run(&team_ops, r, r->window, pp->nt, &e);
        if (rs != ZP_OK)
            st = zpi_err_set(&pp->err, rs, "%s", e.msg);
    }
    if (r->ring)
        for (size_t k = 0; k < r->window; k++) {
            free(r->ring[k].tok);
            free(r->ring[k].len);
        }
    free(r->ring);
    r->ring = NULL;
    for (part *p; (p = unhold(r));) /* a run that failed */
        feeder_release(&fd, p);
    feeder_finish(&fd);
    r->fd = NULL;
    return st;
}

static uint64_t file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

static zp_status hash_file(zp_preprocess *pp, const char *path, uint64_t *h)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return zpi_err_set(&pp->err, ZP_ERR_IO, "cannot open '%s' to hash it: %s", path,
                           strerror(e));
    }
    uint64_t at = 0;
    int e = zpi_xxh64_fd(fd, h, &at);
    close(fd);
    if (e)
        return zpi_err_set(&pp->err, ZP_ERR_IO, "cannot hash '%s' (byte %llu): %s", path,
                           (unsigned long long)at, strerror(e));
    return ZP_OK;
}

/* A Megatron pair records the tokenizer that made it beside it:
 * PREFIX.tokenizer, one line, zp_tokenizer_ident() (the dataset reads it;
 * a run with another tokenizer is refused). HDF5 files hold it in their
 * root attribute zephon_tokenizer. */
static zp_status write_pair_tokenizer(zp_preprocess *pp, size_t i)
{
    char path[4200], line[256];
    zpi_fmt(path, sizeof path, "%s.tokenizer", pp->out_path[i]);
    int n = snprintf(line, sizeof line, "%s\n", zp_tokenizer_ident(pp->tok));
    return zpi_write_durable(path, line, (size_t)n, &pp->err);
}

static zp_status open_writer(zp_preprocess *pp, size_t i, zpi_tokw **w)
{
    zpi_err err;
    zp_status st = zpi_err_set(&err, ZP_ERR_UNSUPPORTED, "no writer for this format in this build");
#ifdef ZP_HAVE_FORMAT_HDF5
    if (pp->cfg.format == ZP_PREPROCESS_HDF5)
        st = zpi_tokw_open_hdf5(pp->out_path[i], pp->dtype, zp_tokenizer_ident(pp->tok), w,
                                &err);
#endif
#ifdef ZP_HAVE_FORMAT_MEGATRON
    if (pp->cfg.format == ZP_PREPROCESS_MEGATRON)
        st = zpi_tokw_open_megatron(pp->out_path[i], pp->dtype, w, &err);
#endif
    if (st != ZP_OK)
        return zpi_err_set(&pp->err, st, "%s", err.msg);
    return ZP_OK;
}

/* zp_preprocess_run's shard hooks: a shard's token writer, opened at its
 * first block and committed at its last. */
typedef struct run_files {
    zpi_tokw *w; /* the open writer, or NULL */
    sink s;
    uint64_t tok0; /* pp->stats.tokens at the shard's start */
} run_files;

static zp_status files_begin(run *r, size_t i)
{
    zp_preprocess *pp = r->pp;
    run_files *f = r->user;
    zp_status st = open_writer(pp, i, &f->w);
    if (st != ZP_OK) {
        f->w = NULL;
        return st;
    }
    memset(&f->s, 0, sizeof f->s);
    f->s.add = sink_tokw_add;
    f->s.w = f->w;
    f->tok0 = pp->stats.tokens;
    r->out = &f->s;
    return ZP_OK;
}

static zp_status files_end(run *r, size_t i)
{
    zp_preprocess *pp = r->pp;
    run_files *f = r->user;
    zpi_tokw *w = f->w;
    const uint64_t docs = r->n_records;
    f->w = NULL;
    zp_status st = ZP_OK;
    if (w->docs != docs) {
        st = zpi_err_set(&pp->err, ZP_ERR_INTERNAL,
                         "shard '%s': %llu documents written for %llu records",
                         zp_dataset_shard_name(pp->ds, i), (unsigned long long)w->docs,
                         (unsigned long long)docs);
        zpi_tokw_abort(w);
    } else {
        zpi_err err;
        if ((st = zpi_tokw_commit(w, &err)) != ZP_OK)
            zpi_err_set(&pp->err, st, "%s", err.msg);
    }
    if (st == ZP_OK && pp->cfg.format == ZP_PREPROCESS_MEGATRON)
        st = write_pair_tokenizer(pp, i);
    zp_preprocess_shard *res = &pp->res[i];
    memset(res, 0, sizeof *res);
    char a[4096], b[4096];
    int nf = final_files(pp, i, a, b, sizeof a);
    if (st == ZP_OK) {
        res->docs = docs;
        res->tokens = pp->stats.tokens - f->tok0;
        res->bytes = file_size(a);
        pp->stats.bytes_out += res->bytes + (nf > 1 ? file_size(b) : 0);
        if (pp->cfg.hash && (st = hash_file(pp, a, &res->xxh64)) == ZP_OK)
            res->has_xxh64 = 1;
    }
    if (st != ZP_OK)
        return st;
    res->done = 1;
    pp->stats.shards_done++;
    pp->stats.seconds = zpi_now() - pp->t0;
    if (pp->cfg.progress)
        pp->cfg.progress(pp->cfg.user, &pp->stats);
    return ZP_OK;
}

zp_status zp_preprocess_run(zp_preprocess *pp)
{
    zp_status st = zp_preprocess_prepare(pp);
    if (st != ZP_OK)
        return st;
    memset(&pp->stats, 0, sizeof pp->stats);
    pp->t0 = zpi_now();
    for (size_t i = 0; i < pp->n_shards; i++)
        if (selected(pp, i)) {
            pp->stats.shards_total++;
            pp->stats.bytes_in_total += zp_dataset_shard_bytes(pp->ds, i);
        }
    /* the selected shards in order, one team for all of them */
    size_t *order = malloc((pp->n_shards ? pp->n_shards : 1) * sizeof *order), n_order = 0;
    if (!order)
        return zpi_err_set(&pp->err, ZP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < pp->n_shards; i++)
        if (selected(pp, i))
            order[n_order++] = i;
    run_files files;
    memset(&files, 0, sizeof files);
    run r;
    memset(&r, 0, sizeof r);
    r.pp = pp;
    r.shard_begin = files_begin;
    r.shard_end = files_end;
    r.user = &files;
    st = process_shards(&r, order, n_order);
    if (files.w) /* a run that stopped inside a shard */
        zpi_tokw_abort(files.w);
    free(order);
    if (st != ZP_OK)
        return st;
    pp->stats.seconds = zpi_now() - pp->t0;
    return ZP_OK;
}

/* Encode shard i into s (memory, or pieces to s->put). */
static zp_status encode_shard(zp_preprocess *pp, size_t i, sink *s)
{
    if (!pp->ready)
        return pp->err.code ? pp->err.code : ZP_ERR_STATE;
    if (i >= pp->n_shards)
        return zpi_err_set(&pp->err, ZP_ERR_INVALID, "shard %zu: out of range (%zu shards)", i,
                           pp->n_shards);
    if (pp->t0 == 0)
        pp->t0 = zpi_now();
    s->add = sink_mem_add;
    s->dtype = pp->dtype;
    run r;
    memset(&r, 0, sizeof r);
    r.pp = pp;
    r.out = s;
    zp_status st = process_shards(&r, &i, 1);
    if (st == ZP_OK)
        st = sink_flush(s, &pp->err);
    if (st == ZP_OK && !s->off && !(s->off = calloc(1, sizeof *s->off)))
        st = zpi_err_set(&pp->err, ZP_ERR_NOMEM, "out of memory");
    if (st != ZP_OK)
        return st;
    pp->stats.shards_done++;
    pp->stats.seconds = zpi_now() - pp->t0;
    return ZP_OK;
}

zp_status zp_preprocess_encode_shard(zp_preprocess *pp, size_t i, void **tokens,
                                     uint64_t *n_tokens, uint64_t **offsets, uint64_t *n_docs)
{
    if (tokens)
        *tokens = NULL;
    if (offsets)
        *offsets = NULL;
    if (!pp || !tokens || !n_tokens || !offsets || !n_docs)
        return ZP_ERR_INVALID;
    sink s;
    memset(&s, 0, sizeof s);
    zp_status st = encode_shard(pp, i, &s);
    if (st != ZP_OK) {
        free(s.tok);
        free(s.off);
        return st;
    }
    *tokens = s.tok ? s.tok : malloc(1);
    *n_tokens = s.n_tok;
    *offsets = s.off;
    *n_docs = s.n_docs;
    return ZP_OK;
}

zp_status zp_preprocess_encode_shard_to(zp_preprocess *pp, size_t i, zp_tokens_fn put,
                                        void *user, uint64_t *n_tokens, uint64_t **offsets,
                                        uint64_t *n_docs)
{
    if (offsets)
        *offsets = NULL;
    if (!pp || !put || !n_tokens || !offsets || !n_docs)
        return ZP_ERR_INVALID;
    sink s;
    memset(&s, 0, sizeof s);
    s.put = put;
    s.put_user = user;
    zp_status st = encode_shard(pp, i, &s);
    free(s.tok);
    if (st != ZP_OK) {
        free(s.off);
        return st;
    }
    *n_tokens = s.n_tok;
    *offsets = s.off;
    *n_docs = s.n_docs;
    return ZP_OK;
}

/* ------------------------------------------------------------ manifest */

zp_status zp_preprocess_write_manifest(zp_preprocess *pp)
{
    if (!pp)
        return ZP_ERR_INVALID;
    if (!pp->ready)
        return pp->err.code ? pp->err.code : ZP_ERR_STATE;
    size_t n = pp->n_shards;
    zpi_manifest_entry *e = calloc(n ? n : 1, sizeof *e);
    if (!e)
        return zpi_err_set(&pp->err, ZP_ERR_NOMEM, "out of memory");
    zp_status st = ZP_OK;
    for (size_t i = 0; i < n && st == ZP_OK; i++) {
        const zp_preprocess_shard *r = &pp->res[i];
        if (!r->done) {
            st = zpi_err_set(&pp->err, ZP_ERR_STATE,
                             "manifest: shard '%s' has not been written",
                             zp_dataset_shard_name(pp->ds, i));
            break;
        }
        e[i].path = pp->out_name[i];
        e[i].fmt = zpi_format_for_path(pp->out_name[i]);
        if (!e[i].fmt)
            st = zpi_err_set(&pp->err, ZP_ERR_UNSUPPORTED,
                             "manifest: '%s': this build cannot read that format",
                             pp->out_name[i]);
        e[i].tokenizer = zp_tokenizer_ident(pp->tok);
        e[i].has_bytes = 1;
        e[i].bytes = r->bytes;
        e[i].has_samples = 1;
        e[i].samples = r->docs;
        e[i].has_xxh64 = r->has_xxh64;
        e[i].xxh64 = r->xxh64;
    }
    char *mp = manifest_path(pp);
    char *text = NULL;
    size_t len = 0;
    if (st == ZP_OK && !mp)
        st = zpi_err_set(&pp->err, ZP_ERR_NOMEM, "out of memory");
    if (st == ZP_OK)
        st = zpi_manifest_render(e, n, "manifest.json", &pp->err, &text, &len);
    if (st == ZP_OK)
        st = zpi_write_durable(mp, text, len, &pp->err);
    /* finished: the manifest is there, the marker goes */
    if (st == ZP_OK)
        st = zpi_unfinished_clear(pp->out_dir, &pp->err);
    free(text);
    free(mp);
    free(e);
    return st;
}
