/*
 * tokw.h - writers of pre-tokenized shards (private): what `zephon
 * preprocess` writes, and the tests' fixtures.
 *
 *   HDF5 (hdf5_write_tokens.c): one ragged field "tokens": the group /tokens with
 *     /tokens/values  1-D, the documents' tokens one after the other
 *     /tokens/offsets uint64 [N + 1], document i is values[offsets[i] .. offsets[i+1])
 *     and the root attribute "zephon_tokenizer" (a string) when given.
 *   Megatron (format_megatron.c): PREFIX.bin and PREFIX.idx ("MMIDIDX"
 *     version 1, one sequence per document).
 *
 * Nothing appears under the final name until commit: the writer writes to
 * a temporary "<final>.zptmp.<host>.<pid>.<rand>" (base/fsio.h; each
 * file of a Megatron pair) and commit flushes,
 * fsyncs and renames (the .idx last: a pair is complete once its .idx
 * exists). abort, or a process killed before commit, leaves only temporary
 * files, which no format reads.
 *
 * Not thread-safe: one writer per thread (HDF5 writers take the HDF5 lock
 * inside).
 */
#ifndef ZP_TOKW_H
#define ZP_TOKW_H

#include <stddef.h>
#include <stdint.h>

#include "zephon/common.h"
#include "base/error.h"
#include "zephon/array.h"

typedef struct zpi_tokw zpi_tokw;

typedef struct zpi_tokw_ops {
    zp_status (*add)(zpi_tokw *w, const int32_t *tok, size_t n, zpi_err *err);
    zp_status (*commit)(zpi_tokw *w, zpi_err *err); /* frees w, also on failure */
    void (*abort)(zpi_tokw *w);                                  /* frees w */
} zpi_tokw_ops;

struct zpi_tokw {
    const zpi_tokw_ops *ops;
    uint64_t docs, tokens; /* added so far */
};

/* path: the HDF5 file (".h5"), or for Megatron the PREFIX (".bin" and
 * ".idx" are appended). dtype: ZP_DTYPE_U16 or ZP_DTYPE_I32 (the caller
 * picks U16 when every id fits). tokenizer: recorded where the format can
 * (HDF5 attribute), may be NULL. Errors name the file. */
zp_status zpi_tokw_open_hdf5(const char *path, zp_dtype dtype, const char *tokenizer, zpi_tokw **out,
                             zpi_err *err);
zp_status zpi_tokw_open_megatron(const char *prefix, zp_dtype dtype, zpi_tokw **out, zpi_err *err);

static inline zp_status zpi_tokw_add(zpi_tokw *w, const int32_t *tok, size_t n, zpi_err *err)
{
    return w->ops->add(w, tok, n, err);
}
static inline zp_status zpi_tokw_commit(zpi_tokw *w, zpi_err *err)
{
    return w->ops->commit(w, err);
}
static inline void zpi_tokw_abort(zpi_tokw *w)
{
    if (w)
        w->ops->abort(w);
}

#endif
