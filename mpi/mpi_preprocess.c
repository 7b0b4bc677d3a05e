/*
 * mpi_preprocess.c - `zephon preprocess` under mpirun (zephon/mpi.h,
 * docs/preprocess.md): the ranks split the input shards.
 *
 *  - zp_mpi_preprocess: shard i is written by rank i % size into its own
 *    output shard (the library's zp_preprocess_run with a stride); the
 *    ranks agree on the outcome, the per-shard results are reduced to rank
 *    0, which writes the manifest.
 *  - zp_mpi_preprocess_shared: one HDF5 file written by every rank through
 *    MPI-IO. Round k: rank r encodes shard k * size + r into memory
 *    (zp_preprocess_encode_shard_to), its tokens into a spill file on
 *    node-local storage; the ranks gather their (documents, tokens)
 *    counts, which give each rank its offsets in the file (the counts of
 *    the rounds before, plus those of the lower ranks of this round: an
 *    exclusive scan), extend the two datasets (collective) and write their
 *    own hyperslabs (independent I/O), the tokens read back from the spill
 *    8 MiB at a time. Memory: buffers and one shard's document ends (8
 *    bytes a document) per rank, not its tokens.
 *
 * Only the public API of libzephon is used (mpi_internal.h), and HDF5.
 * HDF5 is called from this (the calling) thread only; the library's
 * encoding threads do not touch HDF5 in memory mode.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "base/fsio.h"
#include "mpi_internal.h"

/* ------------------------------------------------------------ common */

/* The ranks see the same dataset: the same shard count and fingerprint. */
static zp_status same_dataset(zp_mpi *m, zp_dataset *ds)
{
    uint64_t v[2] = {(uint64_t)zp_dataset_num_shards(ds), zp_dataset_fingerprint(ds)};
    uint64_t lo[2], hi[2];
    zp_status st = zpi_mpi_check(m, MPI_Allreduce(v, lo, 2, MPI_UINT64_T, MPI_MIN, m->comm),
                                 "MPI_Allreduce");
    if (st == ZP_OK)
        st = zpi_mpi_check(m, MPI_Allreduce(v, hi, 2, MPI_UINT64_T, MPI_MAX, m->comm),
                           "MPI_Allreduce");
    if (st != ZP_OK)
        return st;
    /* every rank sees lo and hi: all return the same */
    if (lo[0] != hi[0] || lo[1] != hi[1])
        return zpi_mpi_fail(m, ZP_ERR_MISMATCH,
                            "the ranks do not see the same input: %llu to %llu shards, "
                            "fingerprints %016llx to %016llx (the same specs and files on "
                            "every rank?)",
                            (unsigned long long)lo[0], (unsigned long long)hi[0],
                            (unsigned long long)lo[1], (unsigned long long)hi[1]);
    return ZP_OK;
}

/* Agree on a local status whose message is on pp (or given). */
static zp_status agree(zp_mpi *m, zp_status local, const zp_preprocess *pp, const char *msg)
{
    if (local != ZP_OK && !msg)
        msg = pp ? zp_preprocess_errmsg(pp) : "out of memory";
    return zp_mpi_agree_status(m, local, msg);
}

/* Sum the ranks' stats (seconds: the largest) into *total on every rank. */
static zp_status reduce_stats(zp_mpi *m, const zp_preprocess_stats *s, zp_preprocess_stats *total)
{
    uint64_t v[10] = {s->docs,      s->tokens,         s->skipped,   s->text_bytes,
                      s->json_bytes, s->bytes_in,      s->bytes_in_total, s->bytes_out,
                      s->shards_done, s->shards_total};
    uint64_t o[10];
    double sec = s->seconds, smax = 0;
    zp_status st = zpi_mpi_check(m, MPI_Allreduce(v, o, 10, MPI_UINT64_T, MPI_SUM, m->comm),
                                 "MPI_Allreduce");
    if (st == ZP_OK)
        st = zpi_mpi_check(m, MPI_Allreduce(&sec, &smax, 1, MPI_DOUBLE, MPI_MAX, m->comm),
                           "MPI_Allreduce");
    if (st != ZP_OK || !total)
        return st;
    total->docs = o[0];
    total->tokens = o[1];
    total->skipped = o[2];
    total->text_bytes = o[3];
    total->json_bytes = o[4];
    total->bytes_in = o[5];
    total->bytes_in_total = o[6];
    total->bytes_out = o[7];
    total->shards_done = (size_t)o[8];
    total->shards_total = (size_t)o[9];
    total->seconds = smax;
    return ZP_OK;
}

/* ------------------------------------------------------------ one file per shard */

zp_status zp_mpi_preprocess(zp_mpi *m, zp_dataset *ds, const zp_preprocess_config *cfg,
                            zp_preprocess_stats *total)
{
    if (!m || m->failed_create)
        return m ? m->err.code : ZP_ERR_INVALID;
    if (m->solo)
        return zpi_mpi_fail(m, ZP_ERR_INVALID, "zp_mpi_preprocess needs MPI: the handle is a world "
                                               "of one without MPI (zp_mpi_create_local)");
    if (!ds || !cfg)
        return zpi_mpi_fail(m, ZP_ERR_INVALID, "zp_mpi_preprocess: NULL dataset or config");
    zp_status st = same_dataset(m, ds);
    if (st != ZP_OK)
        return st;
    zp_preprocess_config c = *cfg;
    c.shard_stride = (size_t)m->size;
    c.shard_offset = (size_t)m->rank;
    zp_preprocess *pp = NULL;
    st = zp_preprocess_create(&c, ds, &pp);
    st = agree(m, st, pp, NULL);
    /* prepare on every rank before any rank writes: an existing output
     * anywhere stops every rank */
    if (st == ZP_OK)
        st = agree(m, zp_preprocess_prepare(pp), pp, NULL);
    if (st == ZP_OK)
        st = agree(m, zp_preprocess_run(pp), pp, NULL);
    size_t n = zp_dataset_num_shards(ds);
    uint64_t *v = NULL, *o = NULL;
    if (st == ZP_OK) {
        /* per shard: done, docs, tokens, bytes, has_xxh64, xxh64 */
        v = calloc(n * 6 + 1, sizeof *v);
        o = calloc(n * 6 + 1, sizeof *o);
        st = agree(m, v && o ? ZP_OK : ZP_ERR_NOMEM, NULL, "out of memory");
    }
    if (st == ZP_OK) {
        for (size_t i = 0; i < n; i++) {
            zp_preprocess_shard r;
            if (i % (size_t)m->size != (size_t)m->rank || zp_preprocess_get_shard(pp, i, &r))
                continue;
            uint64_t *e = v + 6 * i;
            e[0] = (uint64_t)r.done;
            e[1] = r.docs;
            e[2] = r.tokens;
            e[3] = r.bytes;
            e[4] = (uint64_t)r.has_xxh64;
            e[5] = r.xxh64;
        }
        st = zpi_mpi_check(
            m, MPI_Reduce(v, o, (int)(n * 6), MPI_UINT64_T, MPI_SUM, 0, m->comm), "MPI_Reduce");
        st = agree(m, st, NULL, zp_mpi_errmsg(m));
    }
    if (st == ZP_OK) {
        zp_status local = ZP_OK;
        if (m->rank == 0) {
            for (size_t i = 0; i < n && local == ZP_OK; i++) {
                const uint64_t *e = o + 6 * i;
                zp_preprocess_shard r = {(int)e[0], e[1], e[2], e[3], (int)e[4], e[5]};
                local = zp_preprocess_set_shard(pp, i, &r);
            }
            if (local == ZP_OK)
                local = zp_preprocess_write_manifest(pp);
        }
        st = agree(m, local, pp, NULL);
    }
    zp_preprocess_stats s;
    zp_preprocess_get_stats(pp, &s);
    zp_status rs = reduce_stats(m, &s, total);
    if (st == ZP_OK)
        st = rs;
    free(v);
    free(o);
    zp_preprocess_destroy(pp);
    return st;
}

/* ------------------------------------------------------------ one shared HDF5 file */

typedef struct h5out {
    hid_t file, values, offsets;
    hid_t vtype; /* memory type of the values */
} h5out;

/* HDF5's message stack, quietly: the innermost description. */
static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *user)
{
    char *buf = user;
    if (n == 0 && e->desc)
        zpi_fmt(buf, 256, "%s", e->desc);
    return 0;
}

static zp_status h5fail(zp_mpi *m, const char *path, const char *what)
{
    char why[256] = "";
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_cb, why);
    H5Eclear2(H5E_DEFAULT);
    return zpi_mpi_fail(m, ZP_ERR_IO, "shared file '%s': %s failed%s%s", path, what,
                        why[0] ? ": " : "", why);
}

static hid_t make_dset(hid_t loc, const char *name, hid_t ftype, hsize_t initial, hsize_t chunk)
{
    hsize_t dims[1] = {initial}, maxd[1] = {H5S_UNLIMITED}, ch[1] = {chunk};
    hid_t sp = H5Screate_simple(1, dims, maxd);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t d = -1;
    if (sp >= 0 && dcpl >= 0 && H5Pset_chunk(dcpl, 1, ch) >= 0)
        d = H5Dcreate2(loc, name, ftype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (sp >= 0)
        H5Sclose(sp);
    return d;
}

/* Write n elements of buf at [at, at + n) of dataset d (independent). */
static int write_range(hid_t d, hid_t mtype, hsize_t at, hsize_t n, const void *buf)
{
    if (n == 0)
        return 0;
    hid_t fs = H5Dget_space(d);
    hsize_t start[1] = {at}, count[1] = {n};
    hid_t ms = H5Screate_simple(1, count, NULL);
    int ok = fs >= 0 && ms >= 0 &&
             H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) >= 0 &&
             H5Dwrite(d, mtype, ms, fs, H5P_DEFAULT, buf) >= 0;
    if (ms >= 0)
        H5Sclose(ms);
    if (fs >= 0)
        H5Sclose(fs);
    return ok ? 0 : -1;
}

/* Create the file (collective) with its two datasets and attribute. */
static zp_status h5_create(zp_mpi *m, const char *part, const char *path, zp_dtype dt,
                           const char *tokname, h5out *h)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0 || H5Pset_fapl_mpio(fapl, m->comm, MPI_INFO_NULL) < 0) {
        if (fapl >= 0)
            H5Pclose(fapl);
        return h5fail(m, path, "the MPI-IO driver (H5Pset_fapl_mpio)");
    }
    h->file = H5Fcreate(part, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (h->file < 0)
        return h5fail(m, path, "H5Fcreate");
    h->vtype = dt == ZP_DTYPE_U16 ? H5T_NATIVE_UINT16 : H5T_NATIVE_INT32;
    hid_t ftype = dt == ZP_DTYPE_U16 ? H5T_STD_U16LE : H5T_STD_I32LE;
    hid_t g = H5Gcreate2(h->file, "tokens", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0)
        return h5fail(m, path, "creating /tokens");
    h->values = make_dset(g, "values", ftype, 0, (hsize_t)1 << 18);
    h->offsets = make_dset(g, "offsets", H5T_STD_U64LE, 1, (hsize_t)1 << 14);
    H5Gclose(g);
    if (h->values < 0 || h->offsets < 0)
        return h5fail(m, path, "creating /tokens/values and /tokens/offsets");
    /* the tokenizer, as a fixed-length UTF-8 string attribute of the root */
    hid_t st = H5Tcopy(H5T_C_S1);
    size_t tl = strlen(tokname);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = -1;
    if (st >= 0 && H5Tset_size(st, tl + 1) >= 0 && H5Tset_strpad(st, H5T_STR_NULLTERM) >= 0 &&
        H5Tset_cset(st, H5T_CSET_UTF8) >= 0 && sp >= 0)
        a = H5Acreate2(h->file, "zephon_tokenizer", st, sp, H5P_DEFAULT, H5P_DEFAULT);
    int ok = a >= 0 && H5Awrite(a, st, tl ? tokname : "") >= 0;
    if (a >= 0)
        H5Aclose(a);
    if (sp >= 0)
        H5Sclose(sp);
    if (st >= 0)
        H5Tclose(st);
    if (!ok)
        return h5fail(m, path, "writing the attribute zephon_tokenizer");
    /* offsets[0] = 0 */
    uint64_t zero = 0;
    if (m->rank == 0 && write_range(h->offsets, H5T_NATIVE_UINT64, 0, 1, &zero) != 0)
        return h5fail(m, path, "writing /tokens/offsets");
    return ZP_OK;
}

/* Close (collective); 0 or -1. */
static int h5_close(h5out *h)
{
    int bad = 0;
    if (h->values >= 0)
        bad |= H5Dclose(h->values) < 0;
    if (h->offsets >= 0)
        bad |= H5Dclose(h->offsets) < 0;
    if (h->file >= 0)
        bad |= H5Fclose(h->file) < 0;
    h->values = h->offsets = h->file = -1;
    return bad ? -1 : 0;
}

/* Checks the call and creates the preprocessor (collective) writing to
 * the folder of path (dir: its buffer, cap 4096). On an error *pp is
 * NULL. */
static zp_status shared_begin(zp_mpi *m, zp_dataset *ds, const zp_preprocess_config *cfg,
                              const char *path, char *dir, zp_preprocess **pp)
{
    if (m->solo)
        return zpi_mpi_fail(m, ZP_ERR_INVALID,
                            "zp_mpi_preprocess_shared needs MPI (MPI-IO): the handle is a world of "
                            "one without MPI (zp_mpi_create_local)");
    if (!ds || !cfg || !path || !path[0])
        return zpi_mpi_fail(m, ZP_ERR_INVALID,
                            "zp_mpi_preprocess_shared: NULL dataset, config or path");
    zp_status st = same_dataset(m, ds);
    if (st != ZP_OK)
        return st;
    /* the library needs an output folder for its names: the file's */
    zpi_fmt(dir, 4096, "%s", path);
    char *sl = strrchr(dir, '/');
    if (sl)
        sl[sl == dir ? 1 : 0] = '\0';
    else
        zpi_fmt(dir, 4096, ".");
    zp_preprocess_config c = *cfg;
    c.out_dir = dir;
    c.format = ZP_PREPROCESS_HDF5;
    c.shard_stride = 1;
    c.shard_offset = 0;
    st = agree(m, zp_preprocess_create(&c, ds, pp), *pp, NULL);
    if (st != ZP_OK) {
        zp_preprocess_destroy(*pp);
        *pp = NULL;
    }
    return st;
}

/* Refuses an existing file unless force, and names the .part file after
 * rank 0's pid (collective). */
static zp_status shared_part(zp_mpi *m, const zp_preprocess_config *cfg, const char *path,
                             char *part, size_t cap)
{
    zp_status local = ZP_OK;
    char msg[ZPI_ERRMAX] = "";
    struct stat sb;
    if (m->rank == 0 && !cfg->force && lstat(path, &sb) == 0) {
        local = ZP_ERR_STATE;
        zpi_fmt(msg, sizeof msg, "'%s' exists", path);
    }
    zp_status st = zp_mpi_agree_status(m, local, msg);
    /* the .part name: rank 0's pid */
    long pid = (long)getpid();
    if (st == ZP_OK)
        st = agree(m, zpi_mpi_check(m, MPI_Bcast(&pid, 1, MPI_LONG, 0, m->comm), "MPI_Bcast"),
                   NULL, zp_mpi_errmsg(m));
    zpi_fmt(part, cap, "%s.part.%ld", path, pid);
    return st;
}

/* A rank's spill: the tokens of the shard it encodes in a round wait in an
 * unlinked temporary file on node-local storage ($SLURM_TMPDIR, else
 * $TMPDIR, else /tmp) until the round's counts give their place in the
 * shared file, so that memory does not grow with the shard (the page cache
 * holds what the node can spare). */
typedef struct spill {
    int fd;
    size_t es;         /* bytes per token */
    const char *shard; /* this round's, for messages */
    const char *var;   /* the variable that named dir, or NULL */
    char dir[4096];    /* for messages */
} spill;

static zp_status spill_open(zp_mpi *m, spill *sp, size_t es)
{
    const char *base = zpi_node_tmpdir(&sp->var);
    zpi_fmt(sp->dir, sizeof sp->dir, "%s", base);
    char path[4200];
    zpi_fmt(path, sizeof path, "%s/zephon-shared-XXXXXX", base);
    sp->es = es;
    sp->fd = mkstemp(path);
    if (sp->fd < 0)
        return zpi_mpi_fail(m, ZP_ERR_IO,
                            "cannot create a spill file in '%s' (%s%s; a shard's tokens wait "
                            "there for their place in the shared file): %s",
                            base, sp->var ? "from $" : "set TMPDIR to a writable folder",
                            sp->var ? sp->var : "", strerror(errno));
    unlink(path); /* gone with the process, whatever happens */
    return ZP_OK;
}

/* zp_tokens_fn: append the pieces to the spill (written from its start
 * each round, read back from its start). */
static zp_status spill_put(void *user, const void *tokens, size_t n, char *err, size_t cap)
{
    spill *sp = user;
    if (zpi_write_all(sp->fd, tokens, n * sp->es) != 0) {
        zpi_fmt(err, cap, "shard '%s': writing its tokens to the spill file in '%s'%s%s%s: %s",
                sp->shard, sp->dir, sp->var ? " (from $" : "", sp->var ? sp->var : "",
                sp->var ? ")" : "", strerror(errno));
        return ZP_ERR_IO;
    }
    return ZP_OK;
}

#define SPILL_READ ((size_t)8 << 20) /* bytes read back from the spill at a time */

/* Writes one round's ntok tokens (in sp) and ndocs document ends of this
 * rank at their place in the file, after those of the rounds done and of
 * the lower ranks (cnt: every rank's document and token counts;
 * collective). buf: SPILL_READ bytes. */
static zp_status write_round(zp_mpi *m, h5out *h, const char *path, const uint64_t *cnt,
                             spill *sp, void *buf, uint64_t ntok, uint64_t *off, uint64_t ndocs,
                             uint64_t *docs_done, uint64_t *toks_done)
{
    size_t size = (size_t)m->size, rank = (size_t)m->rank;
    uint64_t dbase = *docs_done, tbase = *toks_done, dall = *docs_done, tall = *toks_done;
    for (size_t r = 0; r < size; r++) {
        if (r < rank) {
            dbase += cnt[2 * r];
            tbase += cnt[2 * r + 1];
        }
        dall += cnt[2 * r];
        tall += cnt[2 * r + 1];
    }
    hsize_t ve[1] = {tall}, oe[1] = {dall + 1};
    zp_status local = ZP_OK;
    if (H5Dset_extent(h->values, ve) < 0 || H5Dset_extent(h->offsets, oe) < 0)
        local = h5fail(m, path, "H5Dset_extent");
    /* the tokens, read back from the spill's start a piece at a time; the
     * next round writes it from its start again */
    if (local == ZP_OK && lseek(sp->fd, 0, SEEK_SET) != 0)
        local = zpi_mpi_fail(m, ZP_ERR_IO, "shard '%s': the spill file in '%s': %s", sp->shard,
                             sp->dir, strerror(errno));
    uint64_t per = SPILL_READ / sp->es;
    for (uint64_t at = 0; local == ZP_OK && at < ntok; at += per) {
        uint64_t n = ntok - at < per ? ntok - at : per;
        size_t want = (size_t)n * sp->es;
        long got = zpi_read_full(sp->fd, buf, want);
        if (got < 0 || (size_t)got != want)
            local = zpi_mpi_fail(m, ZP_ERR_IO, "shard '%s': reading the spill file in '%s': %s",
                                 sp->shard, sp->dir, got < 0 ? strerror(errno) : "it ended early");
        else if (write_range(h->values, h->vtype, tbase + at, n, buf) != 0)
            local = h5fail(m, path, "H5Dwrite");
    }
    if (local == ZP_OK && lseek(sp->fd, 0, SEEK_SET) != 0)
        local = zpi_mpi_fail(m, ZP_ERR_IO, "shard '%s': the spill file in '%s': %s", sp->shard,
                             sp->dir, strerror(errno));
    /* document ends, as offsets into the whole file */
    for (uint64_t d = 1; local == ZP_OK && d <= ndocs; d++)
        off[d] += tbase;
    if (local == ZP_OK &&
        write_range(h->offsets, H5T_NATIVE_UINT64, dbase + 1, ndocs, off + 1) != 0)
        local = h5fail(m, path, "H5Dwrite");
    zp_status st = agree(m, local, NULL, zp_mpi_errmsg(m));
    *docs_done = dall;
    *toks_done = tall;
    return st;
}

/* Encodes the n shards by rounds of one shard a rank (shard k * size +
 * rank in round k) and writes each round into the file (collective). */
static zp_status write_shards(zp_mpi *m, zp_preprocess *pp, zp_dataset *ds, h5out *h,
                              const char *path)
{
    size_t n = zp_dataset_num_shards(ds);
    size_t size = (size_t)m->size, rank = (size_t)m->rank;
    uint64_t docs_done = 0, toks_done = 0;
    uint64_t *cnt = calloc(2 * size, sizeof *cnt);
    void *buf = malloc(SPILL_READ);
    zp_status st = agree(m, cnt && buf ? ZP_OK : ZP_ERR_NOMEM, NULL, "out of memory");
    spill sp = {-1, 0, "", NULL, ""};
    if (st == ZP_OK) {
        zp_status local = spill_open(m, &sp, zp_dtype_size(zp_preprocess_dtype(pp)));
        st = agree(m, local, NULL, zp_mpi_errmsg(m));
    }
    for (size_t k = 0; st == ZP_OK && k * size < n; k++) {
        size_t i = k * size + rank;
        uint64_t *off = NULL, ntok = 0, ndocs = 0;
        zp_status local = ZP_OK;
        sp.shard = i < n ? zp_dataset_shard_name(ds, i) : "";
        if (i < n)
            local = zp_preprocess_encode_shard_to(pp, i, spill_put, &sp, &ntok, &off, &ndocs);
        st = agree(m, local, pp, NULL);
        uint64_t mine[2] = {ndocs, ntok};
        if (st == ZP_OK)
            st = agree(m,
                       zpi_mpi_check(m, MPI_Allgather(mine, 2, MPI_UINT64_T, cnt, 2, MPI_UINT64_T,
                                                      m->comm),
                                     "MPI_Allgather"),
                       NULL, zp_mpi_errmsg(m));
        if (st == ZP_OK)
            st = write_round(m, h, path, cnt, &sp, buf, ntok, off, ndocs, &docs_done,
                             &toks_done);
        free(off);
    }
    if (sp.fd >= 0)
        close(sp.fd);
    free(buf);
    free(cnt);
    return st;
}

/* Closes the file (collective), then rank 0 renames the part to path; on
 * a failure (st, or here) the .part goes. */
static zp_status shared_close(zp_mpi *m, h5out *h, const char *part, const char *path,
                              zp_status st)
{
    zp_status local = h5_close(h) != 0 ? h5fail(m, path, "H5Fclose") : ZP_OK;
    zp_status cs = agree(m, local, NULL, zp_mpi_errmsg(m));
    if (st == ZP_OK)
        st = cs;
    local = ZP_OK;
    if (m->rank == 0) {
        if (st == ZP_OK && rename(part, path) != 0) {
            int e = errno;
            local = zpi_mpi_fail(m, ZP_ERR_IO, "cannot rename '%s' to '%s': %s", part, path,
                                 strerror(e));
        }
        if (st != ZP_OK || local != ZP_OK)
            unlink(part);
    }
    if (st == ZP_OK)
        st = agree(m, local, NULL, zp_mpi_errmsg(m));
    return st;
}

zp_status zp_mpi_preprocess_shared(zp_mpi *m, zp_dataset *ds, const zp_preprocess_config *cfg,
                                   const char *path, zp_preprocess_stats *total)
{
    if (!m || m->failed_create)
        return m ? m->err.code : ZP_ERR_INVALID;
    char dir[4096];
    zp_preprocess *pp = NULL;
    zp_status st = shared_begin(m, ds, cfg, path, dir, &pp);
    if (st != ZP_OK)
        return st;
    char part[4200];
    st = shared_part(m, cfg, path, part, sizeof part);

    /* HDF5 quietly: its messages are copied into ours */
    H5E_auto2_t old_fn = NULL;
    void *old_data = NULL;
    H5Eget_auto2(H5E_DEFAULT, &old_fn, &old_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);

    h5out h = {-1, -1, -1, -1};
    int created = 0;
    if (st == ZP_OK) {
        zp_status local = h5_create(m, part, path, zp_preprocess_dtype(pp),
                                    zp_preprocess_tokenizer(pp), &h);
        created = h.file >= 0;
        st = agree(m, local, NULL, zp_mpi_errmsg(m));
    }
    if (st == ZP_OK)
        st = write_shards(m, pp, ds, &h, path);
    if (created)
        st = shared_close(m, &h, part, path, st);
    H5Eset_auto2(H5E_DEFAULT, old_fn, old_data);
    zp_preprocess_stats s;
    zp_preprocess_get_stats(pp, &s);
    struct stat sb;
    if (m->rank == 0 && st == ZP_OK && stat(path, &sb) == 0)
        s.bytes_out = (uint64_t)sb.st_size;
    zp_status rs = reduce_stats(m, &s, total);
    if (st == ZP_OK)
        st = rs;
    zp_preprocess_destroy(pp);
    return st;
}
