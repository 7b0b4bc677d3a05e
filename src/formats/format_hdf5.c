/*
 * format_hdf5.c - HDF5 shards read on demand (reader.h): opening a shard.
 *
 * A shard is one HDF5 file; its records run along dimension 0 of the
 * members of the root group, one field per member (docs/hdf5.md):
 *   dataset, variable-length (or fixed-length) string      -> text
 *   dataset, 1-D, variable-length sequence of integers     -> tokens
 *   group with exactly `values` (1-D integer) and `offsets` (1-D 64-bit
 *     integer, N + 1 entries, non-decreasing, offsets[N] = len(values))
 *                                                          -> tokens ("ragged")
 *   dataset, integer or float, [N, d1, ...]                -> fixed
 * Fields are sorted by name. Anything else is refused with a message
 * naming the file and the dataset.
 *
 * Safety: links other than hard links (soft, external) are refused, and
 * so are virtual datasets, datasets with external raw storage and filters
 * that are not built in (plugins are never loaded: zpi_h5_lock turns their
 * loading off). Variable-length data is allocated by our own allocator,
 * which refuses elements far beyond max_record_bytes before HDF5 copies
 * them, and is freed by us, outside the lock.
 *
 * Every HDF5 call runs under the HDF5 lock (hdf5_util.h); conversion and
 * delivery into the chunk run outside it. Reading records: hdf5_read.c;
 * the other HDF5 files: hdf5_internal.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/hdf5_internal.h"
#include "formats/shard.h"
#include "base/filehash.h"
#include "base/util.h"

/* Closes every HDF5 object of r (under the lock) and frees it. */
static void h5_free(h5_reader *r)
{
    if (!r)
        return;
    zpi_h5_lock(NULL);
    for (int k = 0; k < ZPI_MAX_FIELDS; k++) {
        h5_field *f = &r->hf[k];
        if (f->dset > 0)
            H5Dclose(f->dset);
        if (f->offs > 0)
            H5Dclose(f->offs);
        if (f->memtype > 0)
            H5Tclose(f->memtype);
    }
    if (r->file > 0)
        H5Fclose(r->file);
    zpi_h5_unlock();
    if (r->fd >= 0)
        close(r->fd);
    for (size_t i = 0; r->gc && i < GC_SLOTS; i++) {
        free(r->gc[i].off);
        free(r->gc[i].len);
    }
    free(r->gc);
    if (r->gc_init)
        pthread_mutex_destroy(&r->gc_mu);
    free(r->name);
    free(r->tokenizer);
    free(r);
}

static void h5_close(zpi_reader *rd)
{
    h5_free((h5_reader *)rd);
}

typedef struct member {
    char name[64];
    int link_type; /* H5L_type_t */
    int too_long;
} member;

typedef struct members {
    member m[ZPI_MAX_FIELDS + 1];
    int n;
    int overflow;
} members;

static herr_t member_cb(hid_t g, const char *name, const H5L_info_t *info, void *data)
{
    members *ms = data;
    (void)g;
    if (ms->n >= ZPI_MAX_FIELDS + 1) {
        ms->overflow = 1;
        return 1; /* stop */
    }
    member *m = &ms->m[ms->n++];
    size_t len = strlen(name);
    m->too_long = len >= sizeof m->name;
    zpi_fmt(m->name, sizeof m->name, "%s", name);
    m->link_type = info->type;
    return 0;
}

/* load context: errors are formatted with the shard name */
typedef struct lctx {
    const char *name;
    zpi_err *err;
} lctx;

#define LFAIL(L, st, ...)                                                                          \
    do {                                                                                           \
        char m_[512];                                                                              \
        zpi_fmt(m_, sizeof m_, __VA_ARGS__);                                                       \
        return zpi_err_set((L)->err, (st), "shard '%s': %s", (L)->name, m_);                      \
    } while (0)

/* An HDF5 call failed: the message with HDF5's own. Under the lock. */
#define H5FAIL(L, what, ...)                                                                       \
    do {                                                                                           \
        char h_[256], m_[512];                                                                     \
        zpi_h5_errmsg(h_, sizeof h_);                                                              \
        zpi_fmt(m_, sizeof m_, __VA_ARGS__);                                                       \
        return zpi_err_set((L)->err, ZP_ERR_FORMAT, "shard '%s': %s: %s failed: %s", (L)->name,   \
                           m_, what, h_);                                                          \
    } while (0)

/* Storage checks of a dataset: no virtual layout, no external raw data,
 * only filters that are available (built in). */
static zp_status check_storage(lctx *L, hid_t d, const char *path)
{
    hid_t dcpl = H5Dget_create_plist(d);
    if (dcpl < 0)
        H5FAIL(L, "H5Dget_create_plist", "dataset '%s'", path);
    H5D_layout_t lay = H5Pget_layout(dcpl);
    int ext = H5Pget_external_count(dcpl);
    int nf = H5Pget_nfilters(dcpl);
    zp_status st = ZP_OK;
    char msg[256] = "";
    if (lay == H5D_VIRTUAL) {
        st = ZP_ERR_UNSUPPORTED;
        zpi_fmt(msg, sizeof msg, "is a virtual dataset (data in other files): not read");
    } else if (ext != 0) {
        st = ZP_ERR_UNSUPPORTED;
        zpi_fmt(msg, sizeof msg, "keeps its data in external files: not read");
    } else if (lay < 0 || nf < 0) {
        st = ZP_ERR_FORMAT;
        zpi_fmt(msg, sizeof msg, "unreadable creation properties");
    }
    for (int i = 0; st == ZP_OK && i < nf; i++) {
        unsigned flags = 0, cfg = 0;
        size_t nelm = 0;
        char fname[64] = "";
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &nelm, NULL, sizeof fname,
                                         fname, &cfg);
        if (id < 0) {
            st = ZP_ERR_FORMAT;
            zpi_fmt(msg, sizeof msg, "unreadable filter %d", i);
        } else if (H5Zfilter_avail(id) <= 0) {
            st = ZP_ERR_UNSUPPORTED;
            zpi_fmt(msg, sizeof msg,
                    "needs HDF5 filter %d ('%s'), which is not built in (filter plugins are not "
                    "loaded)",
                    (int)id, fname);
        } else if (H5Zget_filter_info(id, &cfg) < 0 || !(cfg & H5Z_FILTER_CONFIG_DECODE_ENABLED)) {
            st = ZP_ERR_UNSUPPORTED;
            zpi_fmt(msg, sizeof msg, "needs HDF5 filter %d ('%s'), which cannot decode here",
                    (int)id, fname);
        }
    }
    H5Pclose(dcpl);
    if (st != ZP_OK)
        LFAIL(L, st, "dataset '%s' %s", path, msg);
    return ZP_OK;
}

/* The dataspace of d: rank and dims (at most 1 + ZPI_MAX_DIMS). */
static zp_status get_dims(lctx *L, hid_t d, const char *path, int *rank, hsize_t *dims)
{
    hid_t sp = H5Dget_space(d);
    if (sp < 0)
        H5FAIL(L, "H5Dget_space", "dataset '%s'", path);
    H5S_class_t cls = H5Sget_simple_extent_type(sp);
    int nd = cls == H5S_SIMPLE ? H5Sget_simple_extent_ndims(sp) : -1;
    if (nd >= 1 && nd <= 1 + ZPI_MAX_DIMS)
        nd = H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    if (cls != H5S_SIMPLE)
        LFAIL(L, ZP_ERR_FORMAT, "dataset '%s' is a scalar or empty dataspace (records run along "
              "dimension 0)", path);
    if (nd < 1 || nd > 1 + ZPI_MAX_DIMS)
        LFAIL(L, ZP_ERR_FORMAT, "dataset '%s' has %d dimensions (1 to %d are read)", path, nd,
              1 + ZPI_MAX_DIMS);
    *rank = nd;
    return ZP_OK;
}

static zp_status set_n(lctx *L, h5_reader *r, const char **n_from, const char *path, uint64_t n)
{
    if (!*n_from) {
        r->n = n;
        *n_from = path;
        return ZP_OK;
    }
    if (r->n != n)
        LFAIL(L, ZP_ERR_FORMAT,
              "datasets disagree on the record count (dimension 0): '%s' has %llu, '%s' has %llu",
              *n_from, (unsigned long long)r->n, path, (unsigned long long)n);
    return ZP_OK;
}

/* Variable-length data lives in HDF5's global heap; the dataset holds a
 * descriptor per record (length, heap collection address, object index).
 * HDF5 1.10 follows these without bounds checks (a corrupt file can make
 * H5Dread copy past its buffers), so the reader checks every descriptor it
 * is about to read against the heap collection itself first (zpi_h5_vlen_check).
 * Where the descriptors are: contiguous storage (H5Dget_offset) or
 * unfiltered chunks (H5Dread_chunk); compressing them saves nothing (the
 * heap is never compressed), so filtered or compact vlen datasets are
 * refused. */
static zp_status vlen_layout(lctx *L, h5_reader *r, hid_t d, h5_field *hf)
{
    hid_t dcpl = H5Dget_create_plist(d);
    if (dcpl < 0)
        H5FAIL(L, "H5Dget_create_plist", "dataset '%s'", hf->path);
    H5D_layout_t lay = H5Pget_layout(dcpl);
    int nf = H5Pget_nfilters(dcpl);
    hsize_t cd = 0;
    int crank = lay == H5D_CHUNKED ? H5Pget_chunk(dcpl, 1, &cd) : 0;
    H5Pclose(dcpl);
    if (nf != 0 || (lay != H5D_CONTIGUOUS && lay != H5D_CHUNKED))
        LFAIL(L, ZP_ERR_UNSUPPORTED,
              "dataset '%s': variable-length data in a %s dataset is not read (contiguous or "
              "unfiltered chunked storage is; the data itself is never compressed)",
              hf->path, nf != 0 ? "filtered" : "compact");
    if (lay == H5D_CHUNKED) {
        if (crank != 1 || cd == 0 || cd > ((hsize_t)1 << 24))
            LFAIL(L, ZP_ERR_FORMAT, "dataset '%s': chunks of %llu records", hf->path,
                  (unsigned long long)cd);
        hf->chunked = 1;
        hf->chunk_dim = cd;
    } else {
        haddr_t a = H5Dget_offset(d);
        hf->raw_addr = a == HADDR_UNDEF ? UINT64_MAX : r->base_addr + a;
    }
    return ZP_OK;
}

/* The absolute file offset of dataset d's raw data when it can be read
 * with pread: the serial driver, contiguous storage allocated inside the
 * file, no filter, a little-endian type (the machine's order: the bytes are
 * the elements as the read delivers them). `bytes`: the raw data's size.
 * UINT64_MAX otherwise. Under the lock. */
static uint64_t direct_addr(h5_reader *r, hid_t d, uint64_t bytes)
{
    if (!r->sec2)
        return UINT64_MAX;
    hid_t dcpl = H5Dget_create_plist(d);
    if (dcpl < 0)
        return UINT64_MAX;
    H5D_layout_t lay = H5Pget_layout(dcpl);
    int nf = H5Pget_nfilters(dcpl);
    H5Pclose(dcpl);
    hid_t t = H5Dget_type(d);
    if (t < 0)
        return UINT64_MAX;
    size_t ts = H5Tget_size(t);
    H5T_order_t ord = H5Tget_order(t);
    H5Tclose(t);
    if (lay != H5D_CONTIGUOUS || nf != 0 || (ts > 1 && ord != H5T_ORDER_LE))
        return UINT64_MAX;
    haddr_t a = H5Dget_offset(d);
    if (a == HADDR_UNDEF || r->base_addr + a < r->base_addr)
        return UINT64_MAX;
    uint64_t at = r->base_addr + a;
    if (at > r->file_size || bytes > r->file_size - at)
        return UINT64_MAX; /* past the end: HDF5 reports the damage */
    return at;
}

/* A string dataset's field (t: its type, closed here). */
static zp_status load_strings(lctx *L, h5_reader *r, hid_t d, hid_t t, int rank, zpi_field *f,
                              h5_field *hf)
{
    const char *path = hf->path;
    zp_status st;
    htri_t var = H5Tis_variable_str(t);
    H5T_cset_t cs = H5Tget_cset(t);
    size_t sz = H5Tget_size(t);
    H5T_str_t pad = H5Tget_strpad(t);
    H5Tclose(t);
    if (rank != 1)
        LFAIL(L, ZP_ERR_UNSUPPORTED, "dataset '%s': strings of %d dimensions (1 is read)",
              path, rank);
    if (var < 0 || (cs != H5T_CSET_ASCII && cs != H5T_CSET_UTF8))
        LFAIL(L, ZP_ERR_UNSUPPORTED, "dataset '%s': strings of an unknown character set",
              path);
    f->kind = ZPI_FIELD_TEXT;
    if (var > 0) {
        hf->kind = K_TEXT_VLEN;
        hf->disk_base = 1;
        if ((st = vlen_layout(L, r, d, hf)) != ZP_OK)
            return st;
        hf->memtype = H5Tcopy(H5T_C_S1);
        if (hf->memtype < 0 || H5Tset_size(hf->memtype, H5T_VARIABLE) < 0 ||
            H5Tset_cset(hf->memtype, cs) < 0)
            H5FAIL(L, "H5Tset_size", "dataset '%s'", path);
    } else {
        if (sz == 0 || sz > ((size_t)1 << 20))
            LFAIL(L, ZP_ERR_UNSUPPORTED, "dataset '%s': fixed-length strings of %zu bytes "
                  "(1 to 1 MiB are read)", path, sz);
        hf->kind = K_TEXT_FIXED;
        hf->str_size = sz;
        hf->spacepad = pad == H5T_STR_SPACEPAD;
        hf->memtype = H5Tcopy(H5T_C_S1);
        if (hf->memtype < 0 || H5Tset_size(hf->memtype, sz) < 0 ||
            H5Tset_cset(hf->memtype, cs) < 0 || H5Tset_strpad(hf->memtype, H5T_STR_NULLPAD) < 0)
            H5FAIL(L, "H5Tset_size", "dataset '%s'", path);
    }
    return ZP_OK;
}

/* A dataset of variable-length integer sequences: a tokens field (t: its
 * type, closed here). */
static zp_status load_sequences(lctx *L, h5_reader *r, hid_t d, hid_t t, int rank, zpi_field *f,
                                h5_field *hf)
{
    const char *path = hf->path;
    zp_status st;
    hid_t base = H5Tget_super(t);
    H5Tclose(t);
    if (base < 0)
        H5FAIL(L, "H5Tget_super", "dataset '%s'", path);
    H5T_class_t bc = H5Tget_class(base);
    zp_dtype dt = bc == H5T_INTEGER ? zpi_h5_dtype_of(base) : ZP_DTYPE_NONE;
    H5Tclose(base);
    if (dt == ZP_DTYPE_NONE)
        LFAIL(L, ZP_ERR_UNSUPPORTED,
              "dataset '%s': variable-length sequences of %s (integers are read, as tokens)",
              path, zpi_h5_class_name(bc));
    if (rank != 1)
        LFAIL(L, ZP_ERR_UNSUPPORTED,
              "dataset '%s': variable-length sequences in %d dimensions (1 is read)", path, rank);
    f->kind = ZPI_FIELD_TOKENS;
    f->dtype = dt;
    hf->kind = K_TOK_VLEN;
    hf->disk_base = zp_dtype_size(dt);
    if ((st = vlen_layout(L, r, d, hf)) != ZP_OK)
        return st;
    hf->elem_size = zp_dtype_size(dt);
    hf->memtype = H5Tvlen_create(zpi_h5_native_of(dt));
    if (hf->memtype < 0)
        H5FAIL(L, "H5Tvlen_create", "dataset '%s'", path);
    return ZP_OK;
}

/* A dataset of numbers, a record of dims[1..rank-1] each: a fixed field
 * (t: its type, of class cls, closed here). */
static zp_status load_fixed(lctx *L, h5_reader *r, hid_t d, hid_t t, H5T_class_t cls, int rank,
                            const hsize_t *dims, zpi_field *f, h5_field *hf)
{
    const char *path = hf->path;
    zp_dtype dt = zpi_h5_dtype_of(t);
    size_t tsz = H5Tget_size(t);
    H5Tclose(t);
    if (dt == ZP_DTYPE_NONE)
        LFAIL(L, ZP_ERR_UNSUPPORTED,
              "dataset '%s': type %s of %zu bytes is not read (strings, variable-length integer "
              "sequences, and 1/2/4/8-byte integers and 4/8-byte floats are)",
              path, zpi_h5_class_name(cls), tsz);
    f->kind = ZPI_FIELD_FIXED;
    f->dtype = dt;
    f->ndim = rank - 1;
    uint64_t elems = 1;
    for (int i = 1; i < rank; i++) {
        f->dims[i - 1] = dims[i];
        if (dims[i] == 0 || dims[i] > ZPI_MAX_FIXED_BYTES || elems * dims[i] > ZPI_MAX_FIXED_BYTES)
            LFAIL(L, ZP_ERR_LIMIT,
                  "dataset '%s': a record's shape is empty or larger than %zu bytes (dimension %d "
                  "is %llu)",
                  path, ZPI_MAX_FIXED_BYTES, i, (unsigned long long)dims[i]);
        elems *= dims[i];
    }
    size_t es = zp_dtype_size(dt);
    if (elems * es > ZPI_MAX_FIXED_BYTES)
        LFAIL(L, ZP_ERR_LIMIT, "dataset '%s': a record has %llu bytes (at most %zu)", path,
              (unsigned long long)(elems * es), ZPI_MAX_FIXED_BYTES);
    f->item_bytes = (size_t)(elems * es);
    hf->kind = K_FIXED;
    hf->elem_size = es;
    hf->n_elems = elems;
    hf->direct_addr =
        dims[0] > UINT64_MAX / f->item_bytes ? UINT64_MAX : direct_addr(r, d, dims[0] * f->item_bytes);
    hf->memtype = H5Tcopy(zpi_h5_native_of(dt));
    if (hf->memtype < 0)
        H5FAIL(L, "H5Tcopy", "dataset '%s'", path);
    return ZP_OK;
}

/* A dataset member of the root: its field. */
static zp_status load_dataset(lctx *L, h5_reader *r, hid_t d, const char *mname, zpi_field *f,
                              h5_field *hf, const char **n_from)
{
    const char *path = hf->path;
    hf->dset = d;
    hf->direct_addr = hf->direct_offs_addr = UINT64_MAX;
    zp_status st = check_storage(L, d, path);
    if (st != ZP_OK)
        return st;
    int rank;
    hsize_t dims[1 + ZPI_MAX_DIMS];
    if ((st = get_dims(L, d, path, &rank, dims)) != ZP_OK)
        return st;
    hid_t t = H5Dget_type(d);
    if (t < 0)
        H5FAIL(L, "H5Dget_type", "dataset '%s'", path);
    H5T_class_t cls = H5Tget_class(t);
    zpi_fmt(f->name, sizeof f->name, "%s", mname);
    hf->dset = d;
    if (cls == H5T_STRING)
        st = load_strings(L, r, d, t, rank, f, hf);
    else if (cls == H5T_VLEN)
        st = load_sequences(L, r, d, t, rank, f, hf);
    else
        st = load_fixed(L, r, d, t, cls, rank, dims, f, hf);
    if (st != ZP_OK)
        return st;
    return set_n(L, r, n_from, path, dims[0]);
}

/* Reads element i of a 1-D 64-bit dataset. */
static zp_status read_u64_at(lctx *L, hid_t d, hid_t mt, uint64_t i, uint64_t *out,
                             const char *path)
{
    hid_t fs = H5Dget_space(d);
    hsize_t start = i, count = 1;
    hid_t ms = H5Screate_simple(1, &count, NULL);
    herr_t e = -1;
    if (fs >= 0 && ms >= 0 &&
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL) >= 0)
        e = H5Dread(d, mt, ms, fs, H5P_DEFAULT, out);
    char h[256] = "";
    if (e < 0)
        zpi_h5_errmsg(h, sizeof h);
    if (fs >= 0)
        H5Sclose(fs);
    if (ms >= 0)
        H5Sclose(ms);
    if (e < 0)
        LFAIL(L, ZP_ERR_FORMAT, "dataset '%s': H5Dread failed: %s", path, h);
    return ZP_OK;
}

/* A group member of the root: the ragged token layout. */
static zp_status load_ragged(lctx *L, h5_reader *r, hid_t g, const char *mname, zpi_field *f,
                             h5_field *hf, const char **n_from)
{
    members ms;
    memset(&ms, 0, sizeof ms);
    hf->direct_addr = hf->direct_offs_addr = UINT64_MAX;
    hsize_t idx = 0;
    if (H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, member_cb, &ms) < 0)
        H5FAIL(L, "H5Literate", "group '/%s'", mname);
    int have_v = 0, have_o = 0;
    for (int i = 0; i < ms.n; i++) {
        if (!strcmp(ms.m[i].name, "values") && ms.m[i].link_type == H5L_TYPE_HARD)
            have_v = 1;
        else if (!strcmp(ms.m[i].name, "offsets") && ms.m[i].link_type == H5L_TYPE_HARD)
            have_o = 1;
    }
    if (ms.n != 2 || !have_v || !have_o)
        LFAIL(L, ZP_ERR_UNSUPPORTED,
              "group '/%s' is not a ragged token field (exactly the datasets 'values' and "
              "'offsets', as hard links)",
              mname);
    char vpath[80], opath[80];
    zpi_fmt(vpath, sizeof vpath, "/%s/values", mname);
    zpi_fmt(opath, sizeof opath, "/%s/offsets", mname);
    hf->dset = H5Dopen2(g, "values", H5P_DEFAULT);
    if (hf->dset < 0)
        H5FAIL(L, "H5Dopen2", "dataset '%s'", vpath);
    hf->offs = H5Dopen2(g, "offsets", H5P_DEFAULT);
    if (hf->offs < 0)
        H5FAIL(L, "H5Dopen2", "dataset '%s'", opath);
    zp_status st;
    if ((st = check_storage(L, hf->dset, vpath)) != ZP_OK ||
        (st = check_storage(L, hf->offs, opath)) != ZP_OK)
        return st;
    int rv, ro;
    hsize_t dv[1 + ZPI_MAX_DIMS], dof[1 + ZPI_MAX_DIMS];
    if ((st = get_dims(L, hf->dset, vpath, &rv, dv)) != ZP_OK ||
        (st = get_dims(L, hf->offs, opath, &ro, dof)) != ZP_OK)
        return st;
    if (rv != 1 || ro != 1)
        LFAIL(L, ZP_ERR_FORMAT, "group '/%s': 'values' and 'offsets' must be 1-D", mname);
    hid_t tv = H5Dget_type(hf->dset), to = H5Dget_type(hf->offs);
    H5T_class_t cv = tv >= 0 ? H5Tget_class(tv) : H5T_NO_CLASS;
    H5T_class_t co = to >= 0 ? H5Tget_class(to) : H5T_NO_CLASS;
    zp_dtype dt = cv == H5T_INTEGER ? zpi_h5_dtype_of(tv) : ZP_DTYPE_NONE;
    zp_dtype ot = co == H5T_INTEGER ? zpi_h5_dtype_of(to) : ZP_DTYPE_NONE;
    if (tv >= 0)
        H5Tclose(tv);
    if (to >= 0)
        H5Tclose(to);
    if (dt == ZP_DTYPE_NONE)
        LFAIL(L, ZP_ERR_UNSUPPORTED, "dataset '%s': type %s (integers are read)", vpath,
              zpi_h5_class_name(cv));
    if (ot != ZP_DTYPE_U64 && ot != ZP_DTYPE_I64)
        LFAIL(L, ZP_ERR_UNSUPPORTED, "dataset '%s': type %s%s (uint64 or int64 is read)", opath,
              zpi_h5_class_name(co), ot != ZP_DTYPE_NONE ? " of another size" : "");
    if (dof[0] == 0)
        LFAIL(L, ZP_ERR_FORMAT, "dataset '%s' is empty (it has N + 1 entries)", opath);
    zpi_fmt(f->name, sizeof f->name, "%s", mname);
    f->kind = ZPI_FIELD_TOKENS;
    f->dtype = dt;
    hf->kind = K_TOK_RAGGED;
    hf->elem_size = zp_dtype_size(dt);
    hf->n_values = dv[0];
    hf->offs_signed = ot == ZP_DTYPE_I64;
    hf->memtype = H5Tcopy(zpi_h5_native_of(dt));
    if (hf->memtype < 0)
        H5FAIL(L, "H5Tcopy", "dataset '%s'", vpath);
    /* the ends: offsets[0] = 0 and offsets[N] = len(values); the rest is
     * checked where it is read */
    uint64_t o0 = 1, oN = 0;
    hid_t omt = hf->offs_signed ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64;
    if ((st = read_u64_at(L, hf->offs, omt, 0, &o0, opath)) != ZP_OK ||
        (st = read_u64_at(L, hf->offs, omt, dof[0] - 1, &oN, opath)) != ZP_OK)
        return st;
    if (o0 != 0 || oN != hf->n_values)
        LFAIL(L, ZP_ERR_FORMAT,
              "dataset '%s': starts at %lld and ends at %lld, but must run from 0 to %llu (the "
              "length of '%s')",
              opath, (long long)o0, (long long)oN, (unsigned long long)hf->n_values, vpath);
    hf->direct_addr = dv[0] > UINT64_MAX / hf->elem_size
                          ? UINT64_MAX
                          : direct_addr(r, hf->dset, dv[0] * hf->elem_size);
    hf->direct_offs_addr = dof[0] > UINT64_MAX / 8 ? UINT64_MAX : direct_addr(r, hf->offs, dof[0] * 8);
    return set_n(L, r, n_from, opath, dof[0] - 1);
}

static int field_cmp(const void *a, const void *b)
{
    return strcmp(((const member *)a)->name, ((const member *)b)->name);
}

/* The superblock's end-of-file address against the file's size, before
 * HDF5 reads anything else: HDF5 bounds every piece of metadata it loads
 * by that address, and checks it against the file only after it has read
 * the driver information block, whose length (4 bytes) it allocates
 * first. A damaged 133-byte file saying "EOF 2^62, driver block 2 GB"
 * made H5Fopen allocate 2 GB before failing. The superblock is where
 * HDF5 looks for it: at 0, 512, 1024, 2048, ... (after a user block).
 * Layout of the versions (the format's spec, "Superblock"): 0 and 1 have
 * the end address after the signature, 4 version bytes, the address and
 * length sizes, 2 reserved bytes, two B-tree K values (version 1: one
 * more and 2 reserved), 4 flag bytes, the base and free-space addresses;
 * 2 and 3 after the signature, version, the two sizes, the flags, the base
 * and extension addresses. Returns 0, or -1 with why. */
static int check_superblock(int fd, uint64_t size, char *why, size_t cap)
{
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    for (uint64_t at = 0; at + 8 <= size; at = at ? at * 2 : 512) {
        unsigned char b[128]; /* the end address lies within 124 bytes in every version */
        size_t n = size - at < sizeof b ? (size_t)(size - at) : sizeof b;
        if (zpi_h5_pread_all(fd, b, n, at) != 0) {
            zpi_fmt(why, cap, "cannot read byte %llu: %s", (unsigned long long)at, strerror(errno));
            return -1;
        }
        if (memcmp(b, sig, 8) != 0)
            continue;
        if (n < 9)
            break;
        unsigned v = b[8];
        size_t so, off;
        if (v <= 1) {
            if (n < 15)
                break;
            so = b[13];
            off = (v == 0 ? 24 : 28) + 2 * so;
        } else if (v <= 3) {
            if (n < 11)
                break;
            so = b[9];
            off = 12 + 2 * so;
        } else {
            zpi_fmt(why, cap, "superblock version %u at byte %llu (0 to 3 are known)", v,
                    (unsigned long long)at);
            return -1;
        }
        /* addresses of 2 to 32 bytes (HDF5 refuses other sizes itself,
         * before it allocates; open_file refuses all but 4 and 8 after) */
        if (so != 2 && so != 4 && so != 8 && so != 16 && so != 32)
            break;
        if (off + so > n)
            break;
        uint64_t eof = 0;
        int high = 0; /* a byte above the 8th: past any file's end */
        for (size_t i = so; i-- > 0;) {
            if (i >= 8)
                high |= b[off + i] != 0;
            else
                eof = eof << 8 | b[off + i];
        }
        if (high) {
            zpi_fmt(why, cap, "the superblock at byte %llu says the data ends past byte 2^64, "
                    "past the file's end", (unsigned long long)at);
            return -1;
        }
        if (eof > size) {
            zpi_fmt(why, cap, "the superblock at byte %llu says the data ends at byte %llu, "
                    "past the file's end", (unsigned long long)at, (unsigned long long)eof);
            return -1;
        }
        return 0;
    }
    return 0; /* no complete superblock: HDF5 says what is wrong */
}

/* Opens the file into r->file, with its address sizes, user block and
 * driver (under the lock). */
static zp_status open_file(lctx *L, const char *path, const zpi_load_limits *lim, h5_reader *r)
{
    char why[200];
    if (check_superblock(r->fd, r->file_size, why, sizeof why) != 0)
        LFAIL(L, ZP_ERR_FORMAT, "cannot open '%s' (%llu bytes) as HDF5, truncated or damaged: %s",
              path, (unsigned long long)r->file_size, why);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0)
        H5FAIL(L, "H5Pcreate", "file '%s'", path);
    int hook = 0;
    if (lim->h5_fapl)
        hook = lim->h5_fapl(lim->h5_fapl_user, (int64_t)fapl, path);
    else if (H5Pset_fapl_sec2(fapl) < 0) {
        H5Pclose(fapl);
        H5FAIL(L, "H5Pset_fapl_sec2", "file '%s'", path);
    }
    if (hook != 0) {
        H5Pclose(fapl);
        LFAIL(L, ZP_ERR_IO, "file '%s': the HDF5 driver hook refused it (%d)", path, hook);
    }
    /* closing the file closes everything in it */
    H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
    /* records are read as the plan asks, often scattered (shuffled): HDF5's
     * data sieve (64 KiB by default) would read 64 KiB around every record
     * of a contiguous dataset, 16x the bytes of a 4 KiB record; one page
     * (measured: shuffled reads of 4 KiB records 2.6x faster, in-order
     * reads unchanged, bench/formats) */
    H5Pset_sieve_buf_size(fapl, 4096);
    /* chunked datasets: each dataset's chunk cache 16 MiB (HDF5's default
     * is 1 MiB: 16 chunks of 64 KiB, which a shuffled read of a compressed
     * dataset thrashes, decompressing a whole chunk for every record) */
    H5Pset_cache(fapl, 0, 4099, (size_t)16 << 20, 0.75);
    r->file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    char h[256] = "";
    if (r->file < 0) /* before any other call: each HDF5 call clears the stack */
        zpi_h5_errmsg(h, sizeof h);
    H5Pclose(fapl);
    if (r->file < 0) {
        r->file = 0;
        if (H5Fis_hdf5(path) == 0)
            LFAIL(L, ZP_ERR_FORMAT, "'%s' is not an HDF5 file (no HDF5 signature in its %llu bytes)",
                  path, (unsigned long long)r->file_size);
        LFAIL(L, ZP_ERR_FORMAT, "cannot open '%s' (%llu bytes) as HDF5, truncated or damaged? %s",
              path, (unsigned long long)r->file_size, h);
    }
    hid_t fcpl = H5Fget_create_plist(r->file);
    hsize_t ub = 0;
    if (fcpl < 0 || H5Pget_sizes(fcpl, &r->sizeof_addr, &r->sizeof_size) < 0 ||
        H5Pget_userblock(fcpl, &ub) < 0) {
        if (fcpl >= 0)
            H5Pclose(fcpl);
        H5FAIL(L, "H5Fget_create_plist", "file '%s'", path);
    }
    H5Pclose(fcpl);
    r->base_addr = ub;
    hid_t acc = H5Fget_access_plist(r->file);
    if (acc >= 0) {
        r->sec2 = H5Pget_driver(acc) == H5FD_SEC2;
        H5Pclose(acc);
    }
    if ((r->sizeof_addr != 4 && r->sizeof_addr != 8) || (r->sizeof_size != 4 && r->sizeof_size != 8))
        LFAIL(L, ZP_ERR_UNSUPPORTED, "addresses of %zu and lengths of %zu bytes", r->sizeof_addr,
              r->sizeof_size);
    return ZP_OK;
}

/* The members of the root group, sorted by name, as the fields of r
 * (under the lock). */
static zp_status load_fields(lctx *L, h5_reader *r)
{
    members ms;
    memset(&ms, 0, sizeof ms);
    hsize_t idx = 0;
    if (H5Literate(r->file, H5_INDEX_NAME, H5_ITER_INC, &idx, member_cb, &ms) < 0)
        H5FAIL(L, "H5Literate", "group '/'");
    if (ms.overflow)
        LFAIL(L, ZP_ERR_UNSUPPORTED, "the root group has more than %d members (fields)",
              ZPI_MAX_FIELDS);
    if (ms.n == 0)
        LFAIL(L, ZP_ERR_FORMAT, "no datasets in the root group (each member is a field)");
    qsort(ms.m, (size_t)ms.n, sizeof ms.m[0], field_cmp);
    const char *n_from = NULL;
    int n_tokens = 0;
    for (int k = 0; k < ms.n; k++) {
        member *m = &ms.m[k];
        zpi_field *f = &r->schema.f[k];
        h5_field *hf = &r->hf[k];
        zpi_fmt(hf->path, sizeof hf->path, "/%s", m->name);
        if (m->too_long)
            LFAIL(L, ZP_ERR_UNSUPPORTED, "member '/%s...': names of 64 bytes or more are not read",
                  m->name);
        if (m->link_type != H5L_TYPE_HARD)
            LFAIL(L, ZP_ERR_UNSUPPORTED, "member '%s' is %s link: links are not followed",
                  hf->path, m->link_type == H5L_TYPE_SOFT ? "a soft" :
                  m->link_type == H5L_TYPE_EXTERNAL ? "an external" : "a user-defined");
        hid_t o = H5Oopen(r->file, m->name, H5P_DEFAULT);
        if (o < 0)
            H5FAIL(L, "H5Oopen", "member '%s'", hf->path);
        H5I_type_t it = H5Iget_type(o);
        zp_status st;
        r->schema.n = k + 1;
        if (it == H5I_DATASET) {
            st = load_dataset(L, r, o, m->name, f, hf, &n_from); /* owns o */
        } else if (it == H5I_GROUP) {
            st = load_ragged(L, r, o, m->name, f, hf, &n_from);
            H5Oclose(o);
        } else {
            H5Oclose(o);
            LFAIL(L, ZP_ERR_UNSUPPORTED, "member '%s' is neither a dataset nor a group",
                  hf->path);
        }
        if (st != ZP_OK)
            return st;
        if (f->kind == ZPI_FIELD_TOKENS && ++n_tokens > 1)
            LFAIL(L, ZP_ERR_UNSUPPORTED, "more than one token field ('%s' is the second)",
                  hf->path);
    }
    return ZP_OK;
}

/* The root attribute zephon_tokenizer (a string: the identity of the
 * tokenizer that zephon preprocess used) into r->tokenizer, when there is
 * one that reads (under the lock). Anything else leaves it NULL: the
 * attribute is a record for a check, not part of the data. */
static void read_tokenizer_attr(h5_reader *r)
{
    if (H5Aexists(r->file, "zephon_tokenizer") <= 0)
        return;
    hid_t a = H5Aopen(r->file, "zephon_tokenizer", H5P_DEFAULT);
    hid_t ft = a >= 0 ? H5Aget_type(a) : -1;
    hid_t mt = -1;
    if (ft >= 0 && H5Tget_class(ft) == H5T_STRING && H5Tis_variable_str(ft) > 0) {
        char *v = NULL;
        mt = H5Tcopy(H5T_C_S1);
        if (mt >= 0 && H5Tset_size(mt, H5T_VARIABLE) >= 0 && H5Aread(a, mt, &v) >= 0 && v) {
            r->tokenizer = strdup(v);
            H5free_memory(v);
        }
    } else if (ft >= 0 && H5Tget_class(ft) == H5T_STRING) {
        size_t n = H5Tget_size(ft);
        char *v = n > 0 && n < 4096 ? calloc(n + 1, 1) : NULL;
        mt = H5Tcopy(H5T_C_S1);
        if (v && mt >= 0 && H5Tset_size(mt, n + 1) >= 0 && H5Aread(a, mt, v) >= 0 && v[0])
            r->tokenizer = v;
        else
            free(v);
    }
    if (mt >= 0)
        H5Tclose(mt);
    if (ft >= 0)
        H5Tclose(ft);
    if (a >= 0)
        H5Aclose(a);
    r->base.tokenizer = r->tokenizer;
}

/* Everything of the load that calls HDF5 (under the lock). */
static zp_status load_locked(lctx *L, const char *path, const zpi_load_limits *lim, h5_reader *r)
{
    ZPI_FORWARD_IF_ERR(open_file(L, path, lim, r));
    ZPI_FORWARD_IF_ERR(load_fields(L, r));
    read_tokenizer_attr(r);
    return ZP_OK;
}


static zp_status h5_load(const char *path, const char *name, const zpi_load_limits *lim,
                         zpi_shard *out, zpi_err *err)
{
    memset(out, 0, sizeof *out);
    uint64_t t0 = zpi_now_ns();
    lctx L = {name, err};
    uint64_t hash = 0;
    struct stat sb;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &sb) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return zpi_err_set(err, ZP_ERR_IO, "shard '%s': cannot open '%s': %s", name, path,
                           strerror(e));
    }
    if (lim->has_xxh64) {
        uint64_t off = 0;
        int e = zpi_xxh64_fd(fd, &hash, &off);
        if (e) {
            close(fd);
            return zpi_err_set(err, e == ENOMEM ? ZP_ERR_NOMEM : ZP_ERR_IO,
                               "shard '%s': reading '%s' at byte %llu: %s", name, path,
                               (unsigned long long)off, strerror(e));
        }
    }
    h5_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->name = strdup(name))) {
        free(r);
        close(fd);
        return zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory", name);
    }
    r->gc_init = pthread_mutex_init(&r->gc_mu, NULL) == 0;
    r->gc = calloc(GC_SLOTS, sizeof *r->gc);
    if (!r->gc_init || !r->gc) {
        free(r->gc);
        if (r->gc_init)
            pthread_mutex_destroy(&r->gc_mu);
        free(r->name);
        free(r);
        close(fd);
        return zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': cannot create a mutex", name);
    }
    r->base.schema = &r->schema;
    r->base.read = zpi_h5_read;
    r->base.close = h5_close;
    r->max_record_bytes = lim->max_record_bytes;
    r->fd = fd;
    r->file_size = (uint64_t)sb.st_size;
    zpi_h5_lock(NULL);
    zp_status st = load_locked(&L, path, lim, r);
    zpi_h5_unlock();
    if (st == ZP_OK && r->n == 0 && !lim->allow_empty) {
        st = zpi_err_set(err, ZP_ERR_FORMAT, "shard '%s': no records (dimension 0 is 0)", name);
    }
    if (st != ZP_OK) {
        h5_free(r);
        return st;
    }
    out->n_records = r->n;
    out->rd = &r->base;
    out->file_bytes = (uint64_t)sb.st_size;
    out->read_seconds = (double)(zpi_now_ns() - t0) / 1e9;
    st = zpi_load_check(lim, name, path, lim->has_xxh64 ? &hash : NULL, out, err);
    if (st != ZP_OK) {
        zpi_shard_free(out);
        memset(out, 0, sizeof *out);
    }
    return st;
}

const zpi_format zpi_format_hdf5 = {.name = "hdf5", .suffix = ".h5", .load = h5_load};
const zpi_format zpi_format_hdf5_alt = {.name = "hdf5", .suffix = ".hdf5", .load = h5_load};
