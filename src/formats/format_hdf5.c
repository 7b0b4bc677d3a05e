/*
 * format_hdf5.c - HDF5 shards read on demand (reader.h), the HDF5 token
 * writer (tokw.h), the sample-file writer (hdf5_util.h) and the HDF5 lock.
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
 * delivery into the chunk run outside it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "formats/shard.h"
#include "formats/hdf5_util.h"
#include "formats/reader.h"
#include "formats/tokw.h"
#include "base/fsio.h"
#include "base/util.h"

/* ================================================================ the lock */

/* The HDF5 lock: see hdf5_util.h. Process-wide by necessity (HDF5 is). */
static pthread_mutex_t g_h5_mu = PTHREAD_MUTEX_INITIALIZER;
/* HDF5 settings saved at lock and restored at unlock (guarded by g_h5_mu). */
static H5E_auto2_t g_saved_efunc;
static void *g_saved_edata;
static unsigned g_saved_plugins;
static atomic_uint_fast64_t g_h5_acquired, g_h5_wait_ns;

void zpi_h5_lock(uint64_t *wait_ns)
{
    uint64_t waited = 0;
    if (pthread_mutex_trylock(&g_h5_mu) != 0) {
        uint64_t t0 = zpi_now_ns();
        pthread_mutex_lock(&g_h5_mu);
        waited = zpi_now_ns() - t0;
    }
    atomic_fetch_add_explicit(&g_h5_acquired, 1, memory_order_relaxed);
    if (waited)
        atomic_fetch_add_explicit(&g_h5_wait_ns, waited, memory_order_relaxed);
    if (wait_ns)
        *wait_ns += waited;
    g_saved_efunc = NULL;
    g_saved_edata = NULL;
    H5Eget_auto2(H5E_DEFAULT, &g_saved_efunc, &g_saved_edata);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    g_saved_plugins = 0;
    H5PLget_loading_state(&g_saved_plugins);
    H5PLset_loading_state(0);
}

void zpi_h5_unlock(void)
{
    H5PLset_loading_state(g_saved_plugins);
    H5Eset_auto2(H5E_DEFAULT, g_saved_efunc, g_saved_edata);
    pthread_mutex_unlock(&g_h5_mu);
}

void zpi_h5_lock_stats(uint64_t *acquired, uint64_t *wait_ns)
{
    if (acquired)
        *acquired = atomic_load_explicit(&g_h5_acquired, memory_order_relaxed);
    if (wait_ns)
        *wait_ns = atomic_load_explicit(&g_h5_wait_ns, memory_order_relaxed);
}

typedef struct errwalk {
    char func[64];
    char desc[192];
    int seen;
} errwalk;

/* Walking upward, the first entry is the innermost: the most specific
 * cause ("addr overflow", "can't open file"). */
static herr_t errwalk_cb(unsigned n, const H5E_error2_t *e, void *data)
{
    errwalk *w = data;
    if (w->seen)
        return 0;
    w->seen = 1;
    zpi_fmt(w->func, sizeof w->func, "%s", e->func_name ? e->func_name : "?");
    zpi_fmt(w->desc, sizeof w->desc, "%s", e->desc ? e->desc : "?");
    (void)n;
    return 0;
}

void zpi_h5_errmsg(char *buf, size_t cap)
{
    errwalk w = {"", "", 0};
    /* H5Ewalk2 does not clear the stack it walks */
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, errwalk_cb, &w);
    if (!w.seen)
        zpi_fmt(buf, cap, "(no HDF5 message)");
    else
        zpi_fmt(buf, cap, "%s(): %s", w.func, w.desc);
    for (char *p = buf; *p; p++) /* HDF5's descriptions may hold newlines */
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}

/* ================================================================ helpers */

static int utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        unsigned min;
        uint32_t cp;
        if (c >= 0xc2 && c <= 0xdf)
            k = 1, min = 0x80, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef)
            k = 2, min = 0x800, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4)
            k = 3, min = 0x10000, cp = c & 0x07;
        else
            return 0;
        if (n - i <= k)
            return 0;
        for (size_t j = 1; j <= k; j++) {
            unsigned d = s[i + j];
            if ((d & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (d & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += k + 1;
    }
    return 1;
}

/* The native memory type of an integer/float of this zp_dtype. */
static hid_t native_of(zp_dtype t)
{
    switch (t) {
    case ZP_DTYPE_U8: return H5T_NATIVE_UINT8;
    case ZP_DTYPE_I8: return H5T_NATIVE_INT8;
    case ZP_DTYPE_U16: return H5T_NATIVE_UINT16;
    case ZP_DTYPE_I16: return H5T_NATIVE_INT16;
    case ZP_DTYPE_U32: return H5T_NATIVE_UINT32;
    case ZP_DTYPE_I32: return H5T_NATIVE_INT32;
    case ZP_DTYPE_U64: return H5T_NATIVE_UINT64;
    case ZP_DTYPE_I64: return H5T_NATIVE_INT64;
    case ZP_DTYPE_F32: return H5T_NATIVE_FLOAT;
    case ZP_DTYPE_F64: return H5T_NATIVE_DOUBLE;
    default: return -1;
    }
}

static const char *class_name(H5T_class_t c)
{
    switch (c) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "float";
    case H5T_TIME: return "time";
    case H5T_STRING: return "string";
    case H5T_BITFIELD: return "bitfield";
    case H5T_OPAQUE: return "opaque";
    case H5T_COMPOUND: return "compound";
    case H5T_REFERENCE: return "reference";
    case H5T_ENUM: return "enum";
    case H5T_VLEN: return "variable-length sequence";
    case H5T_ARRAY: return "array";
    default: return "unknown";
    }
}

/* An integer or float file type -> zp_dtype (ZP_DTYPE_NONE: not one). */
static zp_dtype dtype_of(hid_t t)
{
    H5T_class_t c = H5Tget_class(t);
    size_t sz = H5Tget_size(t);
    if (c == H5T_INTEGER) {
        int sgn = H5Tget_sign(t) == H5T_SGN_2;
        switch (sz) {
        case 1: return sgn ? ZP_DTYPE_I8 : ZP_DTYPE_U8;
        case 2: return sgn ? ZP_DTYPE_I16 : ZP_DTYPE_U16;
        case 4: return sgn ? ZP_DTYPE_I32 : ZP_DTYPE_U32;
        case 8: return sgn ? ZP_DTYPE_I64 : ZP_DTYPE_U64;
        default: return ZP_DTYPE_NONE;
        }
    }
    if (c == H5T_FLOAT)
        return sz == 4 ? ZP_DTYPE_F32 : sz == 8 ? ZP_DTYPE_F64 : ZP_DTYPE_NONE;
    return ZP_DTYPE_NONE;
}

/* An element of an integer token dtype as int64 (values of U64 above
 * INT64_MAX come back as -1: out of range either way). */
static int64_t tok_at(const void *p, zp_dtype t, size_t i)
{
    switch (t) {
    case ZP_DTYPE_U8: return ((const uint8_t *)p)[i];
    case ZP_DTYPE_I8: return ((const int8_t *)p)[i];
    case ZP_DTYPE_U16: return ((const uint16_t *)p)[i];
    case ZP_DTYPE_I16: return ((const int16_t *)p)[i];
    case ZP_DTYPE_U32: return ((const uint32_t *)p)[i];
    case ZP_DTYPE_I32: return ((const int32_t *)p)[i];
    case ZP_DTYPE_U64: {
        uint64_t v = ((const uint64_t *)p)[i];
        return v > (uint64_t)INT64_MAX ? -1 : (int64_t)v;
    }
    case ZP_DTYPE_I64: return ((const int64_t *)p)[i];
    default: return -1;
    }
}

/* Convert n stored ids at src[off..] into dst; -1 and the position of the
 * first id outside [0, INT32_MAX], else 0. */
static int tok_convert(const void *src, zp_dtype t, size_t off, size_t n, int32_t *dst, size_t *bad_at)
{
    if (t == ZP_DTYPE_U16) { /* the common cases, without the switch per id */
        const uint16_t *s = (const uint16_t *)src + off;
        for (size_t i = 0; i < n; i++)
            dst[i] = s[i];
        return 0;
    }
    if (t == ZP_DTYPE_I32) {
        const int32_t *s = (const int32_t *)src + off;
        for (size_t i = 0; i < n; i++) {
            if (s[i] < 0) {
                *bad_at = i;
                return -1;
            }
            dst[i] = s[i];
        }
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        int64_t v = tok_at(src, t, off + i);
        if (v < 0 || v > INT32_MAX) {
            *bad_at = i;
            return -1;
        }
        dst[i] = (int32_t)v;
    }
    return 0;
}

/* Variable-length memory for H5Dread: our malloc, refusing an element
 * above cap bytes (a corrupt or hostile length) before HDF5 fills it. */
typedef struct vlen_alloc {
    size_t cap;
    size_t refused; /* the size of the first refused element, 0: none */
} vlen_alloc;

static void *vlen_malloc(size_t size, void *info)
{
    vlen_alloc *a = info;
    if (size > a->cap) {
        if (!a->refused)
            a->refused = size;
        return NULL;
    }
    return malloc(size ? size : 1);
}

static void vlen_free(void *p, void *info)
{
    (void)info;
    free(p);
}

/* ================================================================ the reader */

enum { K_TEXT_VLEN = 1, K_TEXT_FIXED, K_TOK_VLEN, K_TOK_RAGGED, K_FIXED };

typedef struct h5_field {
    int kind;
    hid_t dset;     /* the dataset (ragged: values) */
    hid_t offs;     /* ragged: offsets */
    hid_t memtype;  /* memory type of one element as read */
    size_t str_size;         /* K_TEXT_FIXED: bytes per string */
    int spacepad;            /* K_TEXT_FIXED: padded with spaces */
    size_t elem_size;        /* fixed/tokens: bytes per stored element (native) */
    uint64_t n_elems;        /* fixed: elements per record */
    uint64_t n_values;       /* ragged: len(values) */
    int offs_signed;         /* ragged: offsets are int64 */
    char path[80];           /* "/text", "/tokens" (group) */
    /* variable-length fields: where the raw descriptors are, to check the
     * heap references before HDF5 follows them (vlen_check) */
    int chunked;             /* 0: contiguous at raw_addr; 1: chunks of chunk_dim */
    uint64_t raw_addr;       /* contiguous: absolute file offset, UINT64_MAX: not allocated */
    uint64_t chunk_dim;
    size_t disk_base;        /* bytes per sequence element on disk (strings: 1) */
    /* fixed fields and the ragged layout's datasets stored contiguous,
     * unfiltered and little-endian in a file opened with the serial
     * driver: their absolute file offsets (UINT64_MAX: read through HDF5).
     * Reads of these are pread()s of the runs, without the HDF5 lock
     * (direct_runs). */
    uint64_t direct_addr;      /* dset (fixed, ragged values) */
    uint64_t direct_offs_addr; /* ragged offsets */
} h5_field;

typedef struct h5_reader {
    zpi_reader base;
    zpi_schema schema;
    h5_field hf[ZPI_MAX_FIELDS];
    hid_t file;
    uint64_t n;
    size_t max_record_bytes;
    char *name; /* shard name, for messages */
    int fd;     /* the file, for the checks of variable-length data (pread) */
    uint64_t file_size;
    size_t sizeof_addr, sizeof_size; /* of the file's addresses and lengths */
    uint64_t base_addr;              /* the user block's size: addresses are relative to it */
    int sec2;                        /* opened with the serial driver (direct reads allowed) */
    /* heap collections already parsed by vlen_check (their object tables),
     * shared by the reads of this shard: a shuffled read meets a
     * collection (often MBs) many times */
    pthread_mutex_t gc_mu;
    int gc_init;
    struct gc_entry {
        uint64_t addr;
        uint32_t nidx;
        uint64_t *off, *len; /* NULL: a free slot */
    } *gc;                   /* GC_SLOTS, open addressing by address */
    size_t gc_used;
} h5_reader;

/* Heap collection tables kept per shard: a 64 KiB collection holds ~50
 * strings of 1 KiB, so 3072 tables cover ~150k records (their tables take
 * ~16 B per object); when full, the table is emptied and filled again. */
#define GC_SLOTS 4096
#define GC_MAX_USED 3072

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
    free(r);
}

static void h5_close(zpi_reader *rd)
{
    h5_free((h5_reader *)rd);
}

/* ---- load ---- */

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
 * is about to read against the heap collection itself first (vlen_check).
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
    if (cls == H5T_STRING) {
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
        return set_n(L, r, n_from, path, dims[0]);
    }
    if (cls == H5T_VLEN) {
        hid_t base = H5Tget_super(t);
        H5Tclose(t);
        if (base < 0)
            H5FAIL(L, "H5Tget_super", "dataset '%s'", path);
        H5T_class_t bc = H5Tget_class(base);
        zp_dtype dt = bc == H5T_INTEGER ? dtype_of(base) : ZP_DTYPE_NONE;
        H5Tclose(base);
        if (dt == ZP_DTYPE_NONE)
            LFAIL(L, ZP_ERR_UNSUPPORTED,
                  "dataset '%s': variable-length sequences of %s (integers are read, as tokens)",
                  path, class_name(bc));
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
        hf->memtype = H5Tvlen_create(native_of(dt));
        if (hf->memtype < 0)
            H5FAIL(L, "H5Tvlen_create", "dataset '%s'", path);
        return set_n(L, r, n_from, path, dims[0]);
    }
    zp_dtype dt = dtype_of(t);
    size_t tsz = H5Tget_size(t);
    H5Tclose(t);
    if (dt == ZP_DTYPE_NONE)
        LFAIL(L, ZP_ERR_UNSUPPORTED,
              "dataset '%s': type %s of %zu bytes is not read (strings, variable-length integer "
              "sequences, and 1/2/4/8-byte integers and 4/8-byte floats are)",
              path, class_name(cls), tsz);
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
    hf->memtype = H5Tcopy(native_of(dt));
    if (hf->memtype < 0)
        H5FAIL(L, "H5Tcopy", "dataset '%s'", path);
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
    zp_dtype dt = cv == H5T_INTEGER ? dtype_of(tv) : ZP_DTYPE_NONE;
    zp_dtype ot = co == H5T_INTEGER ? dtype_of(to) : ZP_DTYPE_NONE;
    if (tv >= 0)
        H5Tclose(tv);
    if (to >= 0)
        H5Tclose(to);
    if (dt == ZP_DTYPE_NONE)
        LFAIL(L, ZP_ERR_UNSUPPORTED, "dataset '%s': type %s (integers are read)", vpath,
              class_name(cv));
    if (ot != ZP_DTYPE_U64 && ot != ZP_DTYPE_I64)
        LFAIL(L, ZP_ERR_UNSUPPORTED, "dataset '%s': type %s%s (uint64 or int64 is read)", opath,
              class_name(co), ot != ZP_DTYPE_NONE ? " of another size" : "");
    if (dof[0] == 0)
        LFAIL(L, ZP_ERR_FORMAT, "dataset '%s' is empty (it has N + 1 entries)", opath);
    zpi_fmt(f->name, sizeof f->name, "%s", mname);
    f->kind = ZPI_FIELD_TOKENS;
    f->dtype = dt;
    hf->kind = K_TOK_RAGGED;
    hf->elem_size = zp_dtype_size(dt);
    hf->n_values = dv[0];
    hf->offs_signed = ot == ZP_DTYPE_I64;
    hf->memtype = H5Tcopy(native_of(dt));
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

/* Everything of the load that calls HDF5 (under the lock). */
static zp_status load_locked(lctx *L, const char *path, const zpi_load_limits *lim, h5_reader *r)
{
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

static zp_status h5_read(zpi_reader *rd, zpi_read_req *req, zpi_err *err);

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
    r->base.read = h5_read;
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

/* ---- read ---- */

typedef struct run {
    uint64_t start, len;
} run;

/* A selection of 1-D runs (dims beyond the first: whole, from full[]) on
 * the file space fs, and a 1-D memory space of its element count. Under
 * the lock. 0 or -1. */
static int select_runs(hid_t fs, const run *runs, size_t nr, int rank, const hsize_t *full,
                       hid_t *ms_out)
{
    hsize_t start[1 + ZPI_MAX_DIMS] = {0}, count[1 + ZPI_MAX_DIMS];
    hsize_t per = 1;
    for (int i = 1; i < rank; i++)
        count[i] = full[i], per *= full[i];
    hsize_t total = 0;
    if (nr == 0)
        return -1;
    for (size_t i = 0; i < nr; i++) {
        start[0] = runs[i].start;
        count[0] = runs[i].len;
        if (H5Sselect_hyperslab(fs, i == 0 ? H5S_SELECT_SET : H5S_SELECT_OR, start, NULL, count,
                                NULL) < 0)
            return -1;
        total += runs[i].len * per;
    }
    *ms_out = H5Screate_simple(1, &total, NULL);
    return *ms_out < 0 ? -1 : 0;
}

typedef struct rctx {
    h5_reader *r;
    zpi_read_req *req;
    zpi_err *err;
    /* unique records, runs of consecutive ones, and per request the unique index */
    uint64_t *u;
    size_t nu;
    run *runs;
    size_t nr;
    size_t *map;
} rctx;

#define RFAIL(R, st, ...)                                                                          \
    do {                                                                                           \
        char m_[512];                                                                              \
        zpi_fmt(m_, sizeof m_, __VA_ARGS__);                                                       \
        return zpi_err_set((R)->err, (st), "shard '%s': %s", (R)->r->name, m_);                   \
    } while (0)

static void bad(rctx *R, size_t row, zp_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void bad(rctx *R, size_t row, zp_status st, const char *fmt, ...)
{
    char m[400], msg[512];
    va_list ap;
    va_start(ap, fmt);
    zpi_vfmt(m, sizeof m, fmt, ap);
    va_end(ap);
    zpi_fmt(msg, sizeof msg, "shard '%s': %s", R->r->name, m);
    if (R->req->bad)
        R->req->bad(R->req->bad_ctx, row, st, msg);
}

/* n bytes at off: 0, or -1 with errno (0 at the end of the file). */
static int pread_all(int fd, void *buf, size_t n, uint64_t off)
{
    char *p = buf;
    while (n) {
        ssize_t got = pread(fd, p, n, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            if (got == 0)
                errno = 0;
            return -1;
        }
        p += got, n -= (size_t)got, off += (uint64_t)got;
    }
    return 0;
}

/* The runs of a dataset stored contiguous at file offset addr (see
 * direct_addr), `unit` bytes per index of dimension 0, into buf one after
 * the other (as H5Dread of the same selection delivers them): one pread per
 * run, without the HDF5 lock (the file is only read). */
static zp_status direct_runs(rctx *R, uint64_t addr, size_t unit, const run *runs, size_t nr,
                             void *buf, const char *path)
{
    uint64_t t0 = zpi_now_ns();
    char *p = buf;
    for (size_t i = 0; i < nr; i++) {
        size_t n = (size_t)(runs[i].len * unit);
        uint64_t off = addr + runs[i].start * unit;
        if (pread_all(R->r->fd, p, n, off) != 0) {
            int e = errno;
            R->req->io_ns += zpi_now_ns() - t0;
            RFAIL(R, ZP_ERR_IO, "dataset '%s': reading %zu bytes at byte %llu: %s", path, n,
                  (unsigned long long)off, e ? strerror(e) : "end of file (truncated?)");
        }
        p += n;
    }
    R->req->io_ns += zpi_now_ns() - t0;
    return ZP_OK;
}

/* One H5Dread of the runs (or of explicit runs) of dataset d into buf.
 * rank/full: the dataset's dims (fixed fields). Takes and releases the lock.
 * vl: the variable-length allocator (NULL: none). daddr/unit: a dataset
 * read directly (direct_addr; UINT64_MAX: through HDF5). */
static zp_status read_sel(rctx *R, hid_t d, hid_t mt, const run *runs, size_t nr, int rank,
                          const hsize_t *full, void *buf, vlen_alloc *vl, const char *path,
                          uint64_t daddr, size_t unit)
{
    if (daddr != UINT64_MAX && !vl)
        return direct_runs(R, daddr, unit, runs, nr, buf, path);
    zpi_h5_lock(&R->req->lock_wait_ns);
    uint64_t t0 = zpi_now_ns();
    hid_t fs = H5Dget_space(d), ms = -1, dxpl = H5P_DEFAULT;
    const char *what = "H5Dget_space";
    herr_t e = -1;
    if (fs >= 0) {
        what = "H5Sselect_hyperslab";
        if (select_runs(fs, runs, nr, rank, full, &ms) == 0) {
            what = "H5Pset_vlen_mem_manager";
            if (vl) {
                dxpl = H5Pcreate(H5P_DATASET_XFER);
                if (dxpl < 0 || H5Pset_vlen_mem_manager(dxpl, vlen_malloc, vl, vlen_free, NULL) < 0)
                    goto done;
            }
            what = "H5Dread";
            e = H5Dread(d, mt, ms, fs, dxpl, buf);
        }
    }
done:;
    char h[256] = "";
    if (e < 0)
        zpi_h5_errmsg(h, sizeof h);
    if (dxpl > 0 && dxpl != H5P_DEFAULT)
        H5Pclose(dxpl);
    if (ms > 0)
        H5Sclose(ms);
    if (fs > 0)
        H5Sclose(fs);
    R->req->io_ns += zpi_now_ns() - t0;
    zpi_h5_unlock();
    if (e < 0) {
        if (vl && vl->refused)
            RFAIL(R, ZP_ERR_LIMIT,
                  "dataset '%s': a variable-length element of %zu bytes, far above the limit "
                  "(max_record_bytes %zu)",
                  path, vl->refused, R->r->max_record_bytes);
        RFAIL(R, ZP_ERR_FORMAT, "dataset '%s': %s failed: %s", path, what, h);
    }
    return ZP_OK;
}

/* Cap of one variable-length element as allocated (bytes): generous, the
 * exact limit is checked per record. */
static size_t vlen_cap(const h5_reader *r, size_t elem)
{
    size_t m = r->max_record_bytes ? r->max_record_bytes : ((size_t)1 << 30);
    if (m > ((size_t)1 << 40))
        m = (size_t)1 << 40;
    return (m / 4 + 1) * (elem < 4 ? 4 : elem) * 2 + 4096;
}

static zp_status read_fixed(rctx *R, int k)
{
    h5_reader *r = R->r;
    h5_field *hf = &r->hf[k];
    const zpi_field *f = &r->schema.f[k];
    zpi_read_req *q = R->req;
    hsize_t full[1 + ZPI_MAX_DIMS];
    full[0] = r->n;
    for (int i = 0; i < f->ndim; i++)
        full[i + 1] = f->dims[i];
    /* rows consecutive and no repeats: straight into the chunk's arena */
    int direct = R->nu == q->n;
    for (size_t i = 1; direct && i < q->n; i++)
        direct = q->rows[i] == q->rows[0] + i;
    size_t bytes;
    if (__builtin_mul_overflow(R->nu, f->item_bytes, &bytes))
        RFAIL(R, ZP_ERR_LIMIT, "dataset '%s': %zu records of %zu bytes overflow", hf->path, R->nu,
              f->item_bytes);
    void *buf = direct ? q->out.fixed_row(q->out.ctx, k, q->rows[0]) : malloc(bytes ? bytes : 1);
    if (!buf)
        RFAIL(R, ZP_ERR_NOMEM, "dataset '%s': out of memory (%zu bytes)", hf->path, bytes);
    zp_status st = read_sel(R, hf->dset, hf->memtype, R->runs, R->nr, 1 + f->ndim, full, buf, NULL,
                            hf->path, hf->direct_addr, f->item_bytes);
    if (st == ZP_OK) {
        q->bytes += bytes;
        if (!direct)
            for (size_t i = 0; i < q->n; i++)
                memcpy(q->out.fixed_row(q->out.ctx, k, q->rows[i]),
                       (char *)buf + R->map[i] * f->item_bytes, f->item_bytes);
    }
    if (!direct)
        free(buf);
    return st;
}

/* ---- checks of variable-length data (see vlen_layout) ---- */

static uint64_t le_get(const unsigned char *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;)
        v = v << 8 | p[i];
    return v;
}

#define ALIGN8(x) (((x) + 7) & ~(uint64_t)7)

/* One global heap collection, parsed the way HDF5 parses it, with every
 * object's bounds checked. */
typedef struct gcol {
    uint64_t addr; /* absolute file offset */
    unsigned char *buf;
    uint64_t size;
    uint32_t nidx;  /* entries in off/len */
    uint64_t *off;  /* object idx: data at off (UINT64_MAX: none), len bytes */
    uint64_t *len;
} gcol;

static void gcol_free(gcol *g)
{
    free(g->buf);
    free(g->off);
    free(g->len);
}

/* 0, or -1 with the reason in why. */
static int gcol_load(const h5_reader *r, uint64_t a, gcol *g, char *why, size_t cap)
{
    memset(g, 0, sizeof *g);
    g->addr = a;
    uint64_t hdr = ALIGN8(8 + r->sizeof_size), ohdr = ALIGN8(8 + r->sizeof_size);
    unsigned char h[16];
    if (a > r->file_size || r->file_size - a < hdr) {
        zpi_fmt(why, cap, "its heap collection at byte %llu is beyond the end of the file",
                (unsigned long long)a);
        return -1;
    }
    if (pread_all(r->fd, h, (size_t)hdr, a) != 0) {
        zpi_fmt(why, cap, "cannot read its heap collection at byte %llu", (unsigned long long)a);
        return -1;
    }
    uint64_t size = le_get(h + 8, r->sizeof_size);
    if (memcmp(h, "GCOL", 4) != 0 || h[4] != 1 || size < hdr || size > r->file_size - a ||
        size > ((uint64_t)1 << 32)) {
        zpi_fmt(why, cap, "no valid heap collection at byte %llu", (unsigned long long)a);
        return -1;
    }
    g->size = size;
    g->buf = malloc((size_t)size);
    if (!g->buf || pread_all(r->fd, g->buf, (size_t)size, a) != 0) {
        zpi_fmt(why, cap, "cannot read its heap collection at byte %llu (%llu bytes)",
                (unsigned long long)a, (unsigned long long)size);
        return -1;
    }
    uint32_t ncap = 0;
    for (uint64_t p = hdr; p < size;) {
        if (p + ohdr > size)
            break; /* the rest is free space */
        uint32_t idx = (uint32_t)le_get(g->buf + p, 2);
        uint64_t osz = le_get(g->buf + p + 8, r->sizeof_size);
        uint64_t need = idx > 0 ? (osz > size ? UINT64_MAX : ohdr + ALIGN8(osz)) : osz;
        if (need == 0 || need > size - p) {
            zpi_fmt(why, cap, "heap collection at byte %llu: object %u at offset %llu has a bad "
                    "size (%llu)", (unsigned long long)a, idx, (unsigned long long)p,
                    (unsigned long long)osz);
            return -1;
        }
        if (idx > 0) {
            if (idx >= ncap) {
                uint32_t nc = ncap ? ncap : 64;
                while (nc <= idx)
                    nc *= 2;
                uint64_t *o = realloc(g->off, nc * sizeof *o), *l = o ? realloc(g->len, nc * sizeof *l) : NULL;
                if (o)
                    g->off = o;
                if (!o || !l) {
                    zpi_fmt(why, cap, "out of memory");
                    return -1;
                }
                g->len = l;
                for (uint32_t i = ncap; i < nc; i++)
                    g->off[i] = UINT64_MAX, g->len[i] = 0;
                ncap = nc;
            }
            g->off[idx] = p + ohdr;
            g->len[idx] = osz;
            if (idx >= g->nidx)
                g->nidx = idx + 1;
        }
        p += need;
    }
    return 0;
}

/* The descriptors (D bytes each) of the unique records of R into desc
 * (nu * D bytes). Contiguous: pread; chunked: H5Dread_chunk per chunk. */
static zp_status vlen_descriptors(rctx *R, const h5_field *hf, size_t D, unsigned char *desc)
{
    h5_reader *r = R->r;
    if (!hf->chunked) {
        if (hf->raw_addr == UINT64_MAX) { /* never written: every record is empty */
            memset(desc, 0, R->nu * D);
            return ZP_OK;
        }
        size_t at = 0;
        for (size_t i = 0; i < R->nr; i++) {
            uint64_t off = hf->raw_addr + R->runs[i].start * D, n = R->runs[i].len * D;
            if (off < hf->raw_addr || off > r->file_size || r->file_size - off < n ||
                pread_all(r->fd, desc + at, (size_t)n, off) != 0)
                RFAIL(R, ZP_ERR_FORMAT,
                      "dataset '%s': its data (records %llu..%llu at byte %llu) is beyond the end "
                      "of the file", hf->path, (unsigned long long)R->runs[i].start,
                      (unsigned long long)(R->runs[i].start + R->runs[i].len - 1),
                      (unsigned long long)off);
            at += (size_t)n;
        }
        return ZP_OK;
    }
    size_t cbytes;
    if (__builtin_mul_overflow((size_t)hf->chunk_dim, D, &cbytes))
        RFAIL(R, ZP_ERR_FORMAT, "dataset '%s': chunks too large", hf->path);
    unsigned char *cb = malloc(cbytes);
    if (!cb)
        RFAIL(R, ZP_ERR_NOMEM, "dataset '%s': out of memory", hf->path);
    uint64_t cur = UINT64_MAX;
    zp_status st = ZP_OK;
    for (size_t ui = 0; ui < R->nu && st == ZP_OK; ui++) {
        uint64_t c = R->u[ui] / hf->chunk_dim;
        if (c != cur) {
            hsize_t coord = c * hf->chunk_dim, sz = 0;
            haddr_t addr = HADDR_UNDEF;
            unsigned fm = 0;
            uint32_t filt = 0;
            char h[256] = "";
            zpi_h5_lock(&R->req->lock_wait_ns);
            herr_t e = H5Dget_chunk_info_by_coord(hf->dset, &coord, &fm, &addr, &sz);
            if (e >= 0 && addr != HADDR_UNDEF && sz == cbytes)
                e = H5Dread_chunk(hf->dset, H5P_DEFAULT, &coord, &filt, cb);
            if (e < 0)
                zpi_h5_errmsg(h, sizeof h);
            zpi_h5_unlock();
            if (e < 0) {
                st = zpi_err_set(R->err, ZP_ERR_FORMAT,
                                 "shard '%s': dataset '%s': reading chunk %llu: %s", r->name,
                                 hf->path, (unsigned long long)c, h);
            } else if (addr == HADDR_UNDEF) {
                memset(cb, 0, cbytes); /* not written: empty records */
            } else if (sz != cbytes) {
                st = zpi_err_set(R->err, ZP_ERR_FORMAT,
                                 "shard '%s': dataset '%s': chunk %llu has %llu bytes, not %zu",
                                 r->name, hf->path, (unsigned long long)c, (unsigned long long)sz,
                                 cbytes);
            }
            cur = c;
        }
        if (st == ZP_OK)
            memcpy(desc + ui * D, cb + (R->u[ui] - cur * hf->chunk_dim) * D, D);
    }
    free(cb);
    return st;
}

/* Checks every descriptor of the records about to be read: its heap
 * object exists, lies inside its collection, and has exactly the length
 * the descriptor says. Outside the lock but for chunk reads. */
/* Where a checked element's bytes are (vlen_check's loc). */
typedef struct vloc {
    uint64_t off;    /* absolute file offset */
    uint64_t nbytes; /* 0: empty or nil */
} vloc;

static size_t gc_slot(uint64_t a)
{
    uint64_t h = a * 0x9E3779B97F4A7C15ULL;
    return (size_t)(h >> 52) & (GC_SLOTS - 1);
}

static zp_status vlen_check(rctx *R, const h5_field *hf, vloc *loc)
{
    h5_reader *r = R->r;
    size_t D = 4 + r->sizeof_addr + 4;
    unsigned char *desc = malloc(R->nu * D + 1);
    if (!desc)
        RFAIL(R, ZP_ERR_NOMEM, "dataset '%s': out of memory", hf->path);
    zp_status st = vlen_descriptors(R, hf, D, desc);
    char why[256] = "";
    for (size_t ui = 0; st == ZP_OK && ui < R->nu; ui++) {
        const unsigned char *d = desc + ui * D;
        uint64_t len = le_get(d, 4), addr = le_get(d + 4, r->sizeof_addr);
        uint32_t idx = (uint32_t)le_get(d + 4 + r->sizeof_addr, 4);
        if (addr == 0)
            continue; /* nil: an empty (NULL) element, HDF5 reads nothing */
        uint64_t a = r->base_addr + addr;
        if (loc)
            loc[ui].off = loc[ui].nbytes = 0;
        pthread_mutex_lock(&r->gc_mu);
        size_t e = gc_slot(a);
        while (r->gc[e].off && r->gc[e].addr != a)
            e = (e + 1) & (GC_SLOTS - 1);
        if (!r->gc[e].off) {
            /* parse it outside the mutex, then keep its table */
            pthread_mutex_unlock(&r->gc_mu);
            gcol g;
            if (gcol_load(r, a, &g, why, sizeof why) != 0) {
                gcol_free(&g);
                st = zpi_err_set(R->err, ZP_ERR_FORMAT,
                                 "shard '%s': dataset '%s': record %llu: damaged variable-length "
                                 "data: " "%s", r->name, hf->path, (unsigned long long)R->u[ui],
                                 why);
                break;
            }
            free(g.buf);
            if (!g.off) { /* no object at all: an empty table */
                g.off = calloc(1, sizeof *g.off);
                g.len = calloc(1, sizeof *g.len);
                g.nidx = 0;
                if (!g.off || !g.len) {
                    free(g.off);
                    free(g.len);
                    st = ZP_ERR_NOMEM;
                    break;
                }
            }
            pthread_mutex_lock(&r->gc_mu);
            if (r->gc_used >= GC_MAX_USED) { /* full: start again */
                for (size_t i = 0; i < GC_SLOTS; i++) {
                    free(r->gc[i].off);
                    free(r->gc[i].len);
                    r->gc[i].off = r->gc[i].len = NULL;
                }
                r->gc_used = 0;
            }
            e = gc_slot(a);
            while (r->gc[e].off && r->gc[e].addr != a)
                e = (e + 1) & (GC_SLOTS - 1);
            if (r->gc[e].off) { /* another read kept it meanwhile */
                free(g.off);
                free(g.len);
            } else {
                r->gc[e].addr = a;
                r->gc[e].nidx = g.nidx;
                r->gc[e].off = g.off;
                r->gc[e].len = g.len;
                r->gc_used++;
            }
        }
        struct gc_entry *g = &r->gc[e];
        int bad_obj = idx == 0 || idx >= g->nidx || g->off[idx] == UINT64_MAX;
        int bad_len = !bad_obj && (g->len[idx] / hf->disk_base != len ||
                                   g->len[idx] % hf->disk_base != 0);
        if (loc && !bad_obj && !bad_len) {
            loc[ui].off = a + g->off[idx];
            loc[ui].nbytes = g->len[idx];
        }
        pthread_mutex_unlock(&r->gc_mu);
        if (bad_obj || bad_len) {
            st = zpi_err_set(R->err, ZP_ERR_FORMAT,
                             "shard '%s': dataset '%s': record %llu: damaged variable-length "
                             "data: object "
                             "%u of the heap collection at byte %llu %s (%llu elements expected)",
                             r->name, hf->path, (unsigned long long)R->u[ui], idx,
                             (unsigned long long)a,
                             bad_obj ? "does not exist" : "has another length",
                             (unsigned long long)len);
        }
    }
    free(desc);
    if (st == ZP_ERR_NOMEM && R->err->msg[0] == '\0')
        zpi_err_set(R->err, ZP_ERR_NOMEM, "shard '%s': dataset '%s': out of memory", r->name,
                    hf->path);
    return st;
}

/* The strings located by vlen_check, read with pread into malloc'd,
 * NUL-terminated buffers (out[ui], as H5Dread of a variable-length string
 * gives them; NULL for nil elements). Without the HDF5 lock. */
static zp_status direct_vlen(rctx *R, const h5_field *hf, const vloc *loc, size_t cap,
                             char **out)
{
    uint64_t t0 = zpi_now_ns();
    for (size_t ui = 0; ui < R->nu; ui++) {
        if (!loc[ui].off)
            continue;
        if (loc[ui].nbytes > cap) {
            R->req->io_ns += zpi_now_ns() - t0;
            RFAIL(R, ZP_ERR_LIMIT,
                  "dataset '%s': a variable-length element of %llu bytes, far above the limit "
                  "(max_record_bytes %zu)",
                  hf->path, (unsigned long long)loc[ui].nbytes, R->r->max_record_bytes);
        }
        char *p = malloc((size_t)loc[ui].nbytes + 1);
        if (!p || pread_all(R->r->fd, p, (size_t)loc[ui].nbytes, loc[ui].off) != 0) {
            free(p);
            R->req->io_ns += zpi_now_ns() - t0;
            RFAIL(R, ZP_ERR_IO, "dataset '%s': record %llu: cannot read %llu bytes at byte %llu",
                  hf->path, (unsigned long long)R->u[ui], (unsigned long long)loc[ui].nbytes,
                  (unsigned long long)loc[ui].off);
        }
        p[loc[ui].nbytes] = '\0';
        out[ui] = p;
    }
    R->req->io_ns += zpi_now_ns() - t0;
    return ZP_OK;
}

static zp_status read_text(rctx *R, int k)
{
    h5_reader *r = R->r;
    h5_field *hf = &r->hf[k];
    zpi_read_req *q = R->req;
    int vlen = hf->kind == K_TEXT_VLEN;
    size_t es = vlen ? sizeof(char *) : hf->str_size, bytes;
    if (__builtin_mul_overflow(R->nu, es, &bytes))
        RFAIL(R, ZP_ERR_LIMIT, "dataset '%s': too many records", hf->path);
    char *buf = calloc(1, bytes ? bytes : 1);
    if (!buf)
        RFAIL(R, ZP_ERR_NOMEM, "dataset '%s': out of memory (%zu bytes)", hf->path, bytes);
    vlen_alloc va = {vlen_cap(r, 1), 0};
    /* variable-length strings in a file read with the serial driver: each
     * checked heap object is read with pread (HDF5 would read its whole
     * collection, 64 KiB for a 1 KiB string, through its metadata cache) */
    vloc *loc = vlen && r->sec2 ? calloc(R->nu ? R->nu : 1, sizeof *loc) : NULL;
    if (vlen && r->sec2 && !loc) {
        free(buf);
        RFAIL(R, ZP_ERR_NOMEM, "dataset '%s': out of memory", hf->path);
    }
    zp_status st = vlen ? vlen_check(R, hf, loc) : ZP_OK;
    if (st != ZP_OK) {
        free(loc);
        free(buf);
        return st;
    }
    if (loc)
        st = direct_vlen(R, hf, loc, va.cap, (char **)buf);
    else
        st = read_sel(R, hf->dset, hf->memtype, R->runs, R->nr, 1, NULL, buf,
                      vlen ? &va : NULL, hf->path, UINT64_MAX, 0);
    free(loc);
    for (size_t i = 0; st == ZP_OK && i < q->n; i++) {
        size_t ui = R->map[i];
        const char *s;
        size_t n;
        if (vlen) {
            s = ((char **)buf)[ui];
            n = s ? strlen(s) : 0;
        } else {
            s = buf + ui * es;
            n = strnlen(s, es);
            if (hf->spacepad)
                while (n && s[n - 1] == ' ')
                    n--;
        }
        if (i == 0 || R->map[i] != R->map[i - 1])
            q->bytes += n;
        if (r->max_record_bytes && n > r->max_record_bytes) {
            bad(R, q->rows[i], ZP_ERR_LIMIT,
                "dataset '%s': record %llu: text of %zu bytes (max_record_bytes %zu)", hf->path,
                (unsigned long long)R->u[ui], n, r->max_record_bytes);
            continue;
        }
        if (!utf8_valid((const unsigned char *)s, n)) {
            bad(R, q->rows[i], ZP_ERR_FORMAT, "dataset '%s': record %llu: invalid UTF-8",
                hf->path, (unsigned long long)R->u[ui]);
            continue;
        }
        if (q->out.put_text(q->out.ctx, q->rows[i], s ? s : "", n) != ZP_OK) {
            st = zpi_err_set(R->err, ZP_ERR_NOMEM, "shard '%s': dataset '%s': out of memory",
                             r->name, hf->path);
        }
    }
    if (vlen)
        for (size_t i = 0; i < R->nu; i++)
            free(((char **)buf)[i]);
    free(buf);
    return st;
}

/* Deliver one document of stored ids (src[off .. off+len)) to row. 0, or
 * -1 with the error set (out of memory). */
static int put_doc(rctx *R, const h5_field *hf, zp_dtype dt, size_t row, uint64_t rec,
                   const void *src, size_t off, size_t len)
{
    zpi_read_req *q = R->req;
    if (R->r->max_record_bytes && len > R->r->max_record_bytes / sizeof(int32_t)) {
        bad(R, row, ZP_ERR_LIMIT,
            "dataset '%s': record %llu: document of %zu tokens (%zu bytes as int32; "
            "max_record_bytes %zu)",
            hf->path, (unsigned long long)rec, len, len * sizeof(int32_t),
            R->r->max_record_bytes);
        return 0;
    }
    int32_t *dst;
    if (q->out.put_tokens(q->out.ctx, row, len, &dst) != ZP_OK) {
        zpi_err_set(R->err, ZP_ERR_NOMEM, "shard '%s': dataset '%s': out of memory", R->r->name,
                    hf->path);
        return -1;
    }
    size_t at = 0;
    if (tok_convert(src, dt, off, len, dst, &at) != 0) {
        q->out.unput_tokens(q->out.ctx, row, len); /* the last put: give its room back */
        bad(R, row, ZP_ERR_FORMAT,
            "dataset '%s': record %llu: token %zu is %lld, outside 0 .. 2^31-1", hf->path,
            (unsigned long long)rec, at, (long long)tok_at(src, dt, off + at));
    }
    return 0;
}

static zp_status read_tok_vlen(rctx *R, int k)
{
    h5_reader *r = R->r;
    h5_field *hf = &r->hf[k];
    zp_dtype dt = r->schema.f[k].dtype;
    zpi_read_req *q = R->req;
    hvl_t *buf = calloc(R->nu ? R->nu : 1, sizeof *buf);
    if (!buf)
        RFAIL(R, ZP_ERR_NOMEM, "dataset '%s': out of memory", hf->path);
    vlen_alloc va = {vlen_cap(r, hf->elem_size), 0};
    zp_status st = vlen_check(R, hf, NULL);
    if (st != ZP_OK) {
        free(buf);
        return st;
    }
    st = read_sel(R, hf->dset, hf->memtype, R->runs, R->nr, 1, NULL, buf, &va, hf->path,
                  UINT64_MAX, 0);
    for (size_t i = 0; st == ZP_OK && i < q->n; i++) {
        size_t ui = R->map[i];
        if (i == 0 || R->map[i] != R->map[i - 1])
            q->bytes += buf[ui].len * hf->elem_size;
        if (buf[ui].len && !buf[ui].p) {
            st = zpi_err_set(R->err, ZP_ERR_FORMAT,
                             "shard '%s': dataset '%s': record %llu: no data", r->name, hf->path,
                             (unsigned long long)R->u[ui]);
            break;
        }
        if (put_doc(R, hf, dt, q->rows[i], R->u[ui], buf[ui].p ? buf[ui].p : (void *)buf, 0,
                    buf[ui].len) != 0)
            st = ZP_ERR_NOMEM;
    }
    for (size_t i = 0; i < R->nu; i++)
        free(buf[i].p);
    free(buf);
    return st;
}

/* Merge sorted, possibly overlapping or touching intervals [start, start+len)
 * in place; returns the count. */
static size_t merge_runs(run *v, size_t n)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].len == 0)
            continue;
        if (m && v[i].start <= v[m - 1].start + v[m - 1].len) {
            uint64_t end = v[i].start + v[i].len, cur = v[m - 1].start + v[m - 1].len;
            if (end > cur)
                v[m - 1].len = end - v[m - 1].start;
        } else {
            v[m++] = v[i];
        }
    }
    return m;
}

static zp_status read_ragged(rctx *R, int k)
{
    h5_reader *r = R->r;
    h5_field *hf = &r->hf[k];
    zp_dtype dt = r->schema.f[k].dtype;
    zpi_read_req *q = R->req;
    char opath[96];
    zpi_fmt(opath, sizeof opath, "%s/offsets", hf->path);
    char vpath[96];
    zpi_fmt(vpath, sizeof vpath, "%s/values", hf->path);
    zp_status st = ZP_OK;
    /* 1. offsets[r .. r+len] of every run, one read */
    run *or = malloc((R->nr ? R->nr : 1) * sizeof *or);
    uint64_t *lo = malloc((R->nu ? R->nu : 1) * sizeof *lo);
    uint64_t *hi = malloc((R->nu ? R->nu : 1) * sizeof *hi);
    uint64_t *offs = NULL;
    run *vr = NULL;
    uint64_t *vpos = NULL;
    void *vals = NULL;
    if (!or || !lo || !hi) {
        st = ZP_ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < R->nr; i++)
        or[i].start = R->runs[i].start, or[i].len = R->runs[i].len + 1;
    size_t nor = merge_runs(or, R->nr);
    uint64_t total = 0;
    for (size_t i = 0; i < nor; i++)
        total += or[i].len;
    offs = malloc(total * sizeof *offs);
    if (!offs) {
        st = ZP_ERR_NOMEM;
        goto out;
    }
    st = read_sel(R, hf->offs, hf->offs_signed ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64, or, nor, 1,
                  NULL, offs, NULL, opath, hf->direct_offs_addr, 8);
    if (st != ZP_OK)
        goto out;
    q->bytes += total * sizeof *offs;
    /* each unique record's [lo, hi), checked: non-decreasing in record
     * order, within values */
    {
        size_t oi = 0;
        uint64_t base = 0, prev = 0;
        for (size_t ui = 0; ui < R->nu; ui++) {
            uint64_t rec = R->u[ui];
            while (rec >= or[oi].start + or[oi].len - 1)
                base += or[oi].len, oi++;
            size_t at = (size_t)(base + rec - or[oi].start);
            uint64_t a = offs[at], b = offs[at + 1];
            if (hf->offs_signed && ((int64_t)a < 0 || (int64_t)b < 0))
                a = UINT64_MAX;
            if (a > b || b > hf->n_values || a < prev) {
                st = zpi_err_set(R->err, ZP_ERR_FORMAT,
                                 "shard '%s': dataset '%s': record %llu: offsets %lld .. %lld are "
                                 "not " "non-decreasing within 0 .. %llu (the length of '%s')",
                                 r->name, opath, (unsigned long long)rec, (long long)offs[at],
                                 (long long)offs[at + 1], (unsigned long long)hf->n_values, vpath);
                goto out;
            }
            lo[ui] = a, hi[ui] = b, prev = b;
        }
    }
    /* 2. the values of every record (too long ones left out), one read */
    vr = malloc((R->nu ? R->nu : 1) * sizeof *vr);
    vpos = malloc((R->nu ? R->nu : 1) * sizeof *vpos);
    if (!vr || !vpos) {
        st = ZP_ERR_NOMEM;
        goto out;
    }
    size_t lim_tok = r->max_record_bytes ? r->max_record_bytes / sizeof(int32_t) : SIZE_MAX;
    for (size_t ui = 0; ui < R->nu; ui++) {
        uint64_t len = hi[ui] - lo[ui];
        vr[ui].start = lo[ui];
        vr[ui].len = len > lim_tok ? 0 : len;
    }
    size_t nvr = merge_runs(vr, R->nu);
    uint64_t vtotal = 0;
    for (size_t i = 0; i < nvr; i++)
        vtotal += vr[i].len;
    {
        /* position of each record's first value in the packed buffer */
        size_t vi = 0;
        uint64_t base = 0;
        for (size_t ui = 0; ui < R->nu; ui++) {
            if (hi[ui] - lo[ui] == 0 || hi[ui] - lo[ui] > lim_tok) {
                vpos[ui] = 0;
                continue;
            }
            while (lo[ui] >= vr[vi].start + vr[vi].len)
                base += vr[vi].len, vi++;
            vpos[ui] = base + lo[ui] - vr[vi].start;
        }
    }
    size_t vbytes;
    if (__builtin_mul_overflow((size_t)vtotal, hf->elem_size, &vbytes) || vtotal > SIZE_MAX) {
        st = zpi_err_set(R->err, ZP_ERR_LIMIT, "shard '%s': dataset '%s': %llu values overflow",
                         r->name, vpath, (unsigned long long)vtotal);
        goto out;
    }
    vals = malloc(vbytes ? vbytes : 1);
    if (!vals) {
        st = ZP_ERR_NOMEM;
        goto out;
    }
    if (nvr) {
        st = read_sel(R, hf->dset, hf->memtype, vr, nvr, 1, NULL, vals, NULL, vpath,
                      hf->direct_addr, hf->elem_size);
        if (st != ZP_OK)
            goto out;
        q->bytes += vbytes;
    }
    for (size_t i = 0; i < q->n; i++) {
        size_t ui = R->map[i];
        if (put_doc(R, hf, dt, q->rows[i], R->u[ui], vals, (size_t)vpos[ui],
                    (size_t)(hi[ui] - lo[ui])) != 0) {
            st = ZP_ERR_NOMEM;
            goto out;
        }
    }
out:
    if (st == ZP_ERR_NOMEM && R->err->msg[0] == '\0')
        zpi_err_set(R->err, ZP_ERR_NOMEM, "shard '%s': dataset '%s': out of memory", r->name,
                    vpath);
    free(or);
    free(lo);
    free(hi);
    free(offs);
    free(vr);
    free(vpos);
    free(vals);
    return st;
}

static zp_status h5_read(zpi_reader *rd, zpi_read_req *req, zpi_err *err)
{
    h5_reader *r = (h5_reader *)rd;
    zpi_err local;
    if (!err)
        err = &local;
    zpi_err_clear(err);
    if (req->n == 0)
        return ZP_OK;
    rctx R = {r, req, err, NULL, 0, NULL, 0, NULL};
    R.u = malloc(req->n * sizeof *R.u);
    R.runs = malloc(req->n * sizeof *R.runs);
    R.map = malloc(req->n * sizeof *R.map);
    zp_status st = ZP_OK;
    if (!R.u || !R.runs || !R.map) {
        st = zpi_err_set(err, ZP_ERR_NOMEM, "shard '%s': out of memory", r->name);
        goto out;
    }
    for (size_t i = 0; i < req->n; i++) {
        uint64_t rec = req->records[i];
        if (rec >= r->n || (i && rec < req->records[i - 1])) {
            st = zpi_err_set(err, ZP_ERR_INTERNAL,
                             "shard '%s': read of record %llu (of %llu) out of order or range",
                             r->name, (unsigned long long)rec, (unsigned long long)r->n);
            goto out;
        }
        if (i == 0 || rec != req->records[i - 1]) {
            if (R.nr && R.runs[R.nr - 1].start + R.runs[R.nr - 1].len == rec)
                R.runs[R.nr - 1].len++;
            else
                R.runs[R.nr].start = rec, R.runs[R.nr].len = 1, R.nr++;
            R.u[R.nu++] = rec;
        }
        R.map[i] = R.nu - 1;
    }
    /* the text field delivered */
    int text_k = -1, n_text = 0;
    for (int k = 0; k < r->schema.n; k++) {
        if (r->schema.f[k].kind != ZPI_FIELD_TEXT)
            continue;
        n_text++;
        if (req->text_field ? !strcmp(req->text_field, r->schema.f[k].name) : text_k < 0)
            text_k = k;
    }
    if (!req->text_field && n_text != 1)
        text_k = -1;
    for (int k = 0; st == ZP_OK && k < r->schema.n; k++) {
        switch (r->hf[k].kind) {
        case K_FIXED: st = read_fixed(&R, k); break;
        case K_TEXT_VLEN:
        case K_TEXT_FIXED:
            if (k == text_k)
                st = read_text(&R, k);
            break;
        case K_TOK_VLEN: st = read_tok_vlen(&R, k); break;
        case K_TOK_RAGGED: st = read_ragged(&R, k); break;
        default: st = ZP_ERR_INTERNAL; break;
        }
    }
out:
    free(R.u);
    free(R.runs);
    free(R.map);
    return st;
}

const zpi_format zpi_format_hdf5 = {"hdf5", ".h5", h5_load, NULL};
const zpi_format zpi_format_hdf5_alt = {"hdf5", ".hdf5", h5_load, NULL};

/* ================================================================ writers */

/* Common: a temporary beside path (base/fsio.h: "<path>.zptmp.<host>.<pid>.<rand>",
 * created empty here, then truncated by H5Fcreate), made final at the end
 * by zpi_tmp_commit (synced, renamed, the folder synced). NULL when it
 * cannot be created (out of memory, or the folder is not writable: the
 * H5Fcreate that follows fails and names the file). */
static char *part_name(const char *path)
{
    char *p = calloc(1, PATH_MAX);
    int fd = -1;
    if (p && zpi_tmp_open(path, p, PATH_MAX, &fd, NULL) == ZP_OK)
        close(fd);
    else if (p) {
        /* keep a name for the messages of the create that fails next */
        snprintf(p, PATH_MAX, "%s" ZPI_TMP_MARK "unwritable", path);
    }
    return p;
}

static int fsync_rename(const char *part, const char *path, char *why, size_t cap)
{
    zpi_err e = {0};
    if (zpi_tmp_commit(part, path, &e) != ZP_OK) {
        zpi_fmt(why, cap, "%s", zpi_err_msg(&e));
        return -1;
    }
    return 0;
}

/* A new file at part (truncated), strong close degree. Under the lock. */
static hid_t create_file(const char *part)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0)
        return -1;
    H5Pset_fapl_sec2(fapl);
    H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
    hid_t f = H5Fcreate(part, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    return f;
}

/* Appends n elements of buf to the 1-D extendible dataset d (now `have`
 * long). Under the lock. 0 or -1. */
/* The writer's last HDF5 failure, captured where it happened (each HDF5
 * call clears the error stack, and cleanup calls follow a failure); per
 * thread, like the writers. */
static _Thread_local char w_last[256];

static int append_1d(hid_t d, hid_t mt, uint64_t have, const void *buf, size_t n)
{
    w_last[0] = '\0';
    if (n == 0)
        return 0;
    hsize_t nsz = have + n, start = have, count = n, cur = 0;
    hid_t s0 = H5Dget_space(d);
    if (s0 < 0 || H5Sget_simple_extent_dims(s0, &cur, NULL) < 0) {
        if (s0 >= 0)
            H5Sclose(s0);
        return -1;
    }
    H5Sclose(s0);
    if (cur < nsz && H5Dset_extent(d, &nsz) < 0)
        return -1;
    hid_t fs = H5Dget_space(d);
    hid_t ms = H5Screate_simple(1, &count, NULL);
    int rc = -1;
    if (fs >= 0 && ms >= 0 &&
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL) >= 0 &&
        H5Dwrite(d, mt, ms, fs, H5P_DEFAULT, buf) >= 0)
        rc = 0;
    else {
        int e = errno;
        zpi_h5_errmsg(w_last, sizeof w_last);
        if (e)
            zpi_fmt(w_last + strlen(w_last), sizeof w_last - strlen(w_last), " (%s)", strerror(e));
    }
    if (fs >= 0)
        H5Sclose(fs);
    if (ms >= 0)
        H5Sclose(ms);
    return rc;
}

/* ---- the token writer (ragged layout) ----
 *
 * Both datasets are written contiguous, of their exact sizes, so that
 * readers read them with pread (direct_addr) and no chunk cache stands
 * between a shuffled read and the bytes: the documents are buffered (4 MiB)
 * and, once more than that, spilled to two raw files beside the output
 * ("<part>.values", "<part>.offsets"); commit creates the datasets and
 * copies the spilled elements into them, then removes the spill files. */

#define TOKW_BUF_BYTES ((size_t)4 << 20)
#define TOKW_OFFS_BUF 65536

typedef struct h5_tokw {
    zpi_tokw base;
    char *path, *part;
    char *vspill, *ospill; /* spill file names */
    int vfd, ofd;          /* spill files, -1 until the first spill */
    zp_dtype dtype;
    size_t es;
    hid_t file, grp, values, offsets;
    void *vbuf;            /* values not yet written */
    size_t vn, vcap;       /* elements in vbuf, capacity (elements) */
    uint64_t *obuf;        /* offsets not yet written */
    size_t on;
    uint64_t v_written, o_written; /* elements spilled */
    char *tokenizer;
} h5_tokw;

static void tokw_free(h5_tokw *w, int unlink_part)
{
    zpi_h5_lock(NULL);
    if (w->values > 0)
        H5Dclose(w->values);
    if (w->offsets > 0)
        H5Dclose(w->offsets);
    if (w->grp > 0)
        H5Gclose(w->grp);
    if (w->file > 0)
        H5Fclose(w->file);
    zpi_h5_unlock();
    if (unlink_part && w->part)
        unlink(w->part);
    if (w->vfd >= 0) {
        close(w->vfd);
        unlink(w->vspill);
    }
    if (w->ofd >= 0) {
        close(w->ofd);
        unlink(w->ospill);
    }
    free(w->path);
    free(w->part);
    free(w->vspill);
    free(w->ospill);
    free(w->vbuf);
    free(w->obuf);
    free(w->tokenizer);
    free(w);
}

static zp_status tokw_h5fail(h5_tokw *w, const char *what, zpi_err *err)
{
    char h[256];
    if (w_last[0])
        zpi_fmt(h, sizeof h, "%s", w_last);
    else
        zpi_h5_errmsg(h, sizeof h);
    w_last[0] = '\0';
    zpi_h5_unlock();
    return zpi_err_set(err, ZP_ERR_IO, "'%s': %s failed: %s", w->path, what, h);
}

/* The two datasets, contiguous, nv and no elements. Under the lock. */
static int tokw_create(h5_tokw *w, hsize_t nv, hsize_t no)
{
    hid_t vt = w->dtype == ZP_DTYPE_U16 ? H5T_STD_U16LE : H5T_STD_I32LE;
    hid_t sv = H5Screate_simple(1, &nv, NULL), so = H5Screate_simple(1, &no, NULL);
    /* no modification times in the object headers: the same documents
     * make the same file */
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (sv >= 0 && so >= 0 && dcpl >= 0 && H5Pset_obj_track_times(dcpl, 0) >= 0) {
        w->values = H5Dcreate2(w->grp, "values", vt, sv, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        w->offsets = H5Dcreate2(w->grp, "offsets", H5T_STD_U64LE, so, H5P_DEFAULT, dcpl,
                                H5P_DEFAULT);
    }
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (sv >= 0)
        H5Sclose(sv);
    if (so >= 0)
        H5Sclose(so);
    if (w->values < 0)
        w->values = 0;
    if (w->offsets < 0)
        w->offsets = 0;
    return w->values > 0 && w->offsets > 0 ? 0 : -1;
}

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t got = write(fd, p, n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        p += got, n -= (size_t)got;
    }
    return 0;
}

static zp_status spill_fail(h5_tokw *w, const char *file, zpi_err *err)
{
    return zpi_err_set(err, ZP_ERR_IO, "'%s': writing '%s': %s", w->path, file, strerror(errno));
}

/* Appends n elements of `bytes` each to the spill file (opened on first use). */
static zp_status spill(h5_tokw *w, int *fd, const char *file, const void *buf, size_t n,
                       size_t bytes, zpi_err *err)
{
    if (*fd < 0 && (*fd = open(file, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
        return spill_fail(w, file, err);
    if (n && write_all(*fd, buf, n * bytes) != 0)
        return spill_fail(w, file, err);
    return ZP_OK;
}

/* Moves the buffered values and offsets to the spill files. */
static zp_status tokw_spill(h5_tokw *w, zpi_err *err)
{
    zp_status st = spill(w, &w->vfd, w->vspill, w->vbuf, w->vn, w->es, err);
    if (st == ZP_OK)
        st = spill(w, &w->ofd, w->ospill, w->obuf, w->on, sizeof *w->obuf, err);
    if (st != ZP_OK)
        return st;
    w->v_written += w->vn;
    w->o_written += w->on;
    w->vn = w->on = 0;
    return ZP_OK;
}

/* Copies n elements of `bytes` each from the spill file fd into dataset d
 * (from element 0), through buf (cap elements). Under the lock. */
static int copy_spill(int fd, hid_t d, hid_t mt, uint64_t n, size_t bytes, void *buf, size_t cap)
{
    for (uint64_t at = 0; at < n;) {
        size_t m = n - at < cap ? (size_t)(n - at) : cap;
        if (pread_all(fd, buf, m * bytes, at * bytes) != 0 || append_1d(d, mt, at, buf, m) != 0)
            return -1;
        at += m;
    }
    return 0;
}

/* Everything into the datasets (commit). */
static zp_status tokw_finish(h5_tokw *w, zpi_err *err)
{
    hid_t vmt = w->dtype == ZP_DTYPE_U16 ? H5T_NATIVE_UINT16 : H5T_NATIVE_INT32;
    if (w->vfd < 0 && w->ofd < 0) { /* all in the buffers */
        zpi_h5_lock(NULL);
        if (tokw_create(w, w->vn, w->on) != 0)
            return tokw_h5fail(w, "creating /tokens/values and /tokens/offsets", err);
        if (append_1d(w->values, vmt, 0, w->vbuf, w->vn) != 0)
            return tokw_h5fail(w, "writing /tokens/values", err);
        if (append_1d(w->offsets, H5T_NATIVE_UINT64, 0, w->obuf, w->on) != 0)
            return tokw_h5fail(w, "writing /tokens/offsets", err);
        zpi_h5_unlock();
        return ZP_OK;
    }
    zp_status st = tokw_spill(w, err);
    if (st != ZP_OK)
        return st;
    zpi_h5_lock(NULL);
    if (tokw_create(w, w->v_written, w->o_written) != 0)
        return tokw_h5fail(w, "creating /tokens/values and /tokens/offsets", err);
    if (copy_spill(w->vfd, w->values, vmt, w->v_written, w->es, w->vbuf, w->vcap) != 0)
        return tokw_h5fail(w, "writing /tokens/values", err);
    if (copy_spill(w->ofd, w->offsets, H5T_NATIVE_UINT64, w->o_written, sizeof *w->obuf, w->obuf,
                   TOKW_OFFS_BUF) != 0)
        return tokw_h5fail(w, "writing /tokens/offsets", err);
    zpi_h5_unlock();
    return ZP_OK;
}

static zp_status tokw_add(zpi_tokw *base, const int32_t *tok, size_t n, zpi_err *err)
{
    h5_tokw *w = (h5_tokw *)base;
    for (size_t i = 0; i < n; i++)
        if (tok[i] < 0 || (w->dtype == ZP_DTYPE_U16 && tok[i] > 65535)) {
            return zpi_err_set(err, ZP_ERR_INVALID,
                               "'%s': document %llu: token %zu is %d, outside the range of %s",
                               w->path, (unsigned long long)base->docs, i, (int)tok[i],
                               zp_dtype_name(w->dtype));
        }
    if (w->vn + n > w->vcap || w->on == TOKW_OFFS_BUF) {
        zp_status st = tokw_spill(w, err);
        if (st != ZP_OK)
            return st;
    }
    /* a document larger than the buffer goes out on its own */
    if (n > w->vcap) {
        zp_status st = ZP_OK;
        if (w->dtype == ZP_DTYPE_I32) {
            st = spill(w, &w->vfd, w->vspill, tok, n, w->es, err);
        } else {
            for (size_t i = 0; st == ZP_OK && i < n; i += w->vcap) {
                size_t m = n - i < w->vcap ? n - i : w->vcap;
                for (size_t j = 0; j < m; j++)
                    ((uint16_t *)w->vbuf)[j] = (uint16_t)tok[i + j];
                st = spill(w, &w->vfd, w->vspill, w->vbuf, m, w->es, err);
            }
        }
        if (st != ZP_OK)
            return st;
        w->v_written += n;
    } else if (w->dtype == ZP_DTYPE_U16) {
        uint16_t *d = (uint16_t *)w->vbuf + w->vn;
        for (size_t i = 0; i < n; i++)
            d[i] = (uint16_t)tok[i];
        w->vn += n;
    } else {
        memcpy((int32_t *)w->vbuf + w->vn, tok, n * sizeof *tok);
        w->vn += n;
    }
    base->docs++;
    base->tokens += n;
    w->obuf[w->on++] = base->tokens;
    return ZP_OK;
}

static zp_status tokw_commit(zpi_tokw *base, zpi_err *err)
{
    h5_tokw *w = (h5_tokw *)base;
    zp_status st = tokw_finish(w, err);
    if (st == ZP_OK && w->tokenizer) {
        zpi_h5_lock(NULL);
        hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR), a = -1;
        herr_t e = -1;
        if (t >= 0 && sp >= 0 && H5Tset_size(t, strlen(w->tokenizer) + 1) >= 0) {
            a = H5Acreate2(w->file, "zephon_tokenizer", t, sp, H5P_DEFAULT, H5P_DEFAULT);
            if (a >= 0)
                e = H5Awrite(a, t, w->tokenizer);
        }
        if (a >= 0)
            H5Aclose(a);
        if (sp >= 0)
            H5Sclose(sp);
        if (t >= 0)
            H5Tclose(t);
        if (e < 0)
            st = tokw_h5fail(w, "writing the attribute zephon_tokenizer", err);
        else
            zpi_h5_unlock();
    }
    if (st == ZP_OK) {
        zpi_h5_lock(NULL);
        herr_t e = 0;
        if (H5Dclose(w->values) < 0 || H5Dclose(w->offsets) < 0 || H5Gclose(w->grp) < 0)
            e = -1;
        w->values = w->offsets = w->grp = 0;
        if (e >= 0 && H5Fclose(w->file) < 0)
            e = -1;
        w->file = 0;
        if (e < 0)
            st = tokw_h5fail(w, "closing the file", err);
        else
            zpi_h5_unlock();
    }
    if (st == ZP_OK) {
        char why[512];
        if (fsync_rename(w->part, w->path, why, sizeof why) != 0) {
            st = zpi_err_set(err, ZP_ERR_IO, "'%s': %s", w->path, why);
        }
    }
    tokw_free(w, st != ZP_OK);
    return st;
}

static void tokw_abort(zpi_tokw *base)
{
    tokw_free((h5_tokw *)base, 1);
}

static const zpi_tokw_ops h5_tokw_ops = {tokw_add, tokw_commit, tokw_abort};

zp_status zpi_tokw_open_hdf5(const char *path, zp_dtype dtype, const char *tokenizer,
                             zpi_tokw **out, zpi_err *err)
{
    *out = NULL;
    if (dtype != ZP_DTYPE_U16 && dtype != ZP_DTYPE_I32) {
        return zpi_err_set(err, ZP_ERR_INVALID, "'%s': token dtype %s (uint16 or int32 is written)",
                           path, zp_dtype_name(dtype));
    }
    h5_tokw *w = calloc(1, sizeof *w);
    if (!w)
        goto nomem;
    w->base.ops = &h5_tokw_ops;
    w->dtype = dtype;
    w->es = zp_dtype_size(dtype);
    w->vcap = TOKW_BUF_BYTES / w->es;
    w->vfd = w->ofd = -1;
    w->path = strdup(path);
    w->part = part_name(path);
    if (w->part) {
        size_t pl = strlen(w->part) + 16;
        if ((w->vspill = malloc(pl)))
            snprintf(w->vspill, pl, "%s.values", w->part);
        if ((w->ospill = malloc(pl)))
            snprintf(w->ospill, pl, "%s.offsets", w->part);
    }
    w->vbuf = malloc(TOKW_BUF_BYTES);
    w->obuf = malloc(TOKW_OFFS_BUF * sizeof *w->obuf);
    if (tokenizer)
        w->tokenizer = strdup(tokenizer);
    if (!w->path || !w->part || !w->vspill || !w->ospill || !w->vbuf || !w->obuf ||
        (tokenizer && !w->tokenizer))
        goto nomem;
    zpi_h5_lock(NULL);
    const char *what = "H5Fcreate";
    w->file = create_file(w->part);
    if (w->file < 0)
        goto h5fail;
    what = "H5Gcreate2 /tokens";
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    if (gcpl >= 0)
        H5Pset_obj_track_times(gcpl, 0);
    w->grp = H5Gcreate2(w->file, "tokens", H5P_DEFAULT, gcpl >= 0 ? gcpl : H5P_DEFAULT, H5P_DEFAULT);
    if (gcpl >= 0)
        H5Pclose(gcpl);
    if (w->grp < 0)
        goto h5fail;
    zpi_h5_unlock();
    w->obuf[w->on++] = 0;
    *out = &w->base;
    return ZP_OK;
h5fail: {
    char h[256];
    zpi_h5_errmsg(h, sizeof h);
    zpi_h5_unlock();
    zpi_err_set(err, ZP_ERR_IO, "'%s': %s failed: %s", path, what, h);
    if (w->file < 0)
        w->file = 0;
    if (w->grp < 0)
        w->grp = 0;
    if (w->values < 0)
        w->values = 0;
    if (w->offsets < 0)
        w->offsets = 0;
    tokw_free(w, 1);
    return ZP_ERR_IO;
}
nomem:
    if (w) {
        free(w->path);
        free(w->part);
        free(w->vspill);
        free(w->ospill);
        free(w->vbuf);
        free(w->obuf);
        free(w->tokenizer);
        free(w);
    }
    return zpi_err_set(err, ZP_ERR_NOMEM, "'%s': out of memory", path);
}

/* ---- the sample file ---- */

void zpi_h5_sample_opts_init(zpi_h5_sample_opts *o)
{
    memset(o, 0, sizeof *o);
    o->text = 1;
    o->text_bytes = 1000;
    o->features = 16;
    o->label = 1;
}

static const char *const sample_words[] = {
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be",
    "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have",
    "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has",
    "there", "been", "if", "more", "when", "will", "would", "who", "so", "no", "data", "model",
    "river", "mountain", "energy", "system", "history", "language", "network", "village",
    "science", "music", "garden", "winter", "caf\xc3\xa9", "na\xc3\xafve", "\xce\xb1\xce\xbb\xcf\x86\xce\xb1",
};
#define N_SAMPLE_WORDS (sizeof sample_words / sizeof sample_words[0])

size_t zpi_h5_sample_text(uint64_t seed, uint64_t i, size_t text_bytes, char *buf, size_t cap)
{
    uint64_t s = zpi_hash2(seed, i);
    if (text_bytes == 0)
        text_bytes = 1;
    size_t target = 64 + (size_t)(zpi_mix64(s) % (2 * text_bytes));
    if (target + 32 > cap)
        target = cap > 32 ? cap - 32 : 0;
    size_t n = 0;
    int start = 1;
    while (n < target) {
        s = zpi_mix64(s + 0x9e3779b97f4a7c15ULL);
        const char *w = sample_words[(s >> 8) % N_SAMPLE_WORDS];
        size_t wl = strlen(w);
        if (n)
            buf[n++] = ' ';
        memcpy(buf + n, w, wl);
        if (start && buf[n] >= 'a' && buf[n] <= 'z')
            buf[n] = (char)(buf[n] - 32);
        n += wl;
        start = (s & 15) == 0;
        if (start)
            buf[n++] = '.';
    }
    buf[n++] = '.';
    buf[n] = '\0';
    return n;
}

zp_status zpi_hdf5_write_sample(const char *path, uint64_t n, uint64_t seed,
                                const zpi_h5_sample_opts *o, zpi_err *err)
{
    zpi_h5_sample_opts def;
    if (!o) {
        zpi_h5_sample_opts_init(&def);
        o = &def;
    }
    if (n == 0 || (!o->text && !o->tokens && !o->features && !o->label)) {
        return zpi_err_set(err, ZP_ERR_INVALID, "'%s': nothing to write (%s)", path,
                           n == 0 ? "0 records" : "no dataset chosen");
    }
    if (o->features > (1u << 20) || o->text_bytes > ((size_t)1 << 24)) {
        return zpi_err_set(err, ZP_ERR_INVALID,
                           "'%s': features (%u) or text_bytes (%zu) out of range", path,
                           o->features, o->text_bytes);
    }
    size_t tcap = 4 * o->text_bytes + 128;
    /* records per slab: about 8 MB of data */
    size_t per = (size_t)o->features * 4 + 8 + (o->text ? o->text_bytes + 80 : 0) +
                 (o->tokens ? 140 : 0);
    size_t slab = ((size_t)8 << 20) / per;
    if (slab < 1)
        slab = 1;
    if (slab > n)
        slab = (size_t)n;
    char *part = part_name(path);
    char *tbuf = o->text ? malloc(slab * tcap) : NULL;
    char **tptr = o->text ? malloc(slab * sizeof *tptr) : NULL;
    hvl_t *vl = o->tokens ? malloc(slab * sizeof *vl) : NULL;
    int32_t *tok = o->tokens ? malloc(slab * 64 * sizeof *tok) : NULL;
    float *feat = o->features ? malloc(slab * o->features * sizeof *feat) : NULL;
    int64_t *lab = o->label ? malloc(slab * sizeof *lab) : NULL;
    zp_status st = ZP_OK;
    if (!part || (o->text && (!tbuf || !tptr)) || (o->tokens && (!vl || !tok)) ||
        (o->features && !feat) || (o->label && !lab)) {
        st = zpi_err_set(err, ZP_ERR_NOMEM, "'%s': out of memory", path);
        goto out;
    }
    hid_t ds[4] = {-1, -1, -1, -1}, mt[4] = {-1, -1, -1, -1};
    hid_t f = -1, strt = -1;
    const char *what = "H5Fcreate";
    zpi_h5_lock(NULL);
    f = create_file(part);
    if (f < 0)
        goto h5fail;
    {
        hsize_t dims[2] = {n, o->features};
        what = "H5Dcreate2";
        if (o->text) {
            strt = H5Tcopy(H5T_C_S1);
            H5Tset_size(strt, H5T_VARIABLE);
            H5Tset_cset(strt, H5T_CSET_UTF8);
            hid_t sp = H5Screate_simple(1, dims, NULL);
            ds[0] = H5Dcreate2(f, "text", strt, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            H5Sclose(sp);
            mt[0] = H5Tcopy(strt);
            if (ds[0] < 0)
                goto h5fail;
        }
        if (o->tokens) {
            hid_t ft = H5Tvlen_create(H5T_STD_I32LE);
            hid_t sp = H5Screate_simple(1, dims, NULL);
            ds[1] = H5Dcreate2(f, "tokens", ft, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            H5Sclose(sp);
            H5Tclose(ft);
            mt[1] = H5Tvlen_create(H5T_NATIVE_INT32);
            if (ds[1] < 0)
                goto h5fail;
        }
        if (o->features) {
            hid_t sp = H5Screate_simple(2, dims, NULL);
            ds[2] = H5Dcreate2(f, "features", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT,
                               H5P_DEFAULT);
            H5Sclose(sp);
            mt[2] = H5Tcopy(H5T_NATIVE_FLOAT);
            if (ds[2] < 0)
                goto h5fail;
        }
        if (o->label) {
            hid_t sp = H5Screate_simple(1, dims, NULL);
            ds[3] = H5Dcreate2(f, "label", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT,
                               H5P_DEFAULT);
            H5Sclose(sp);
            mt[3] = H5Tcopy(H5T_NATIVE_INT64);
            if (ds[3] < 0)
                goto h5fail;
        }
    }
    zpi_h5_unlock();
    for (uint64_t i0 = 0; i0 < n; i0 += slab) {
        size_t m = n - i0 < slab ? (size_t)(n - i0) : slab;
        /* fill the slab outside the lock */
        for (size_t j = 0; j < m; j++) {
            uint64_t i = i0 + j;
            if (o->text) {
                tptr[j] = tbuf + j * tcap;
                zpi_h5_sample_text(seed, i, o->text_bytes, tptr[j], tcap);
            }
            if (o->tokens) {
                size_t len = zpi_h5_sample_doc_len(seed, i);
                for (size_t t = 0; t < len; t++)
                    tok[j * 64 + t] = zpi_h5_sample_token(seed, i, t);
                vl[j].len = len;
                vl[j].p = tok + j * 64;
            }
            for (uint32_t c = 0; c < o->features; c++)
                feat[j * o->features + c] = zpi_h5_sample_feature(seed, i, c);
            if (o->label)
                lab[j] = zpi_h5_sample_label(seed, i);
        }
        const void *bufs[4] = {tptr, vl, feat, lab};
        zpi_h5_lock(NULL);
        what = "H5Dwrite";
        for (int k = 0; k < 4; k++) {
            if (ds[k] < 0)
                continue;
            hsize_t start[2] = {i0, 0}, count[2] = {m, o->features};
            hid_t fs = H5Dget_space(ds[k]);
            hsize_t mcount = k == 2 ? (hsize_t)m * o->features : m;
            hid_t ms = H5Screate_simple(1, &mcount, NULL);
            herr_t e = -1;
            if (fs >= 0 && ms >= 0 &&
                H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) >= 0)
                e = H5Dwrite(ds[k], mt[k], ms, fs, H5P_DEFAULT, bufs[k]);
            if (fs >= 0)
                H5Sclose(fs);
            if (ms >= 0)
                H5Sclose(ms);
            if (e < 0)
                goto h5fail;
        }
        zpi_h5_unlock();
    }
    zpi_h5_lock(NULL);
    what = "H5Fclose";
    for (int k = 0; k < 4; k++) {
        if (ds[k] >= 0)
            H5Dclose(ds[k]);
        if (mt[k] >= 0)
            H5Tclose(mt[k]);
        ds[k] = mt[k] = -1;
    }
    if (strt >= 0)
        H5Tclose(strt);
    strt = -1;
    herr_t e = H5Fclose(f);
    f = -1;
    if (e < 0)
        goto h5fail;
    zpi_h5_unlock();
    {
        char why[512];
        if (fsync_rename(part, path, why, sizeof why) != 0) {
            zpi_err_set(err, ZP_ERR_IO, "'%s': %s", path, why);
            unlink(part);
            st = ZP_ERR_IO;
        }
    }
    goto out;
h5fail: {
    char h[256];
    zpi_h5_errmsg(h, sizeof h);
    for (int k = 0; k < 4; k++) {
        if (ds[k] >= 0)
            H5Dclose(ds[k]);
        if (mt[k] >= 0)
            H5Tclose(mt[k]);
    }
    if (strt >= 0)
        H5Tclose(strt);
    if (f >= 0)
        H5Fclose(f);
    zpi_h5_unlock();
    unlink(part);
    st = zpi_err_set(err, ZP_ERR_IO, "'%s': %s failed: %s", path, what, h);
}
out:
    free(part);
    free(tbuf);
    free(tptr);
    free(vl);
    free(tok);
    free(feat);
    free(lab);
    return st;
}
