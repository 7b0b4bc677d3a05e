/*
 * hdf5_util.h - the HDF5 lock and helpers shared by the HDF5 code
 * (src/formats/format_hdf5.c and hdf5_*.c, and whoever else calls HDF5: the MPI layer's driver
 * hook, `zephon preprocess`, `zephon gen`, tests). Private.
 *
 * THE HDF5 LOCK. The one piece of process-wide state Zephon owns.
 * HDF5 keeps process-wide state of its own (open objects, property lists,
 * the error stack, caches), and Debian's HDF5 (libhdf5-openmpi, 1.10.8) is
 * not built thread-safe: two threads inside the library at once corrupt it.
 * Every HDF5 call in the process made by Zephon therefore runs with this
 * one static pthread mutex held. It is held only around HDF5 calls: the
 * readers convert and deliver records (UTF-8 checks, int32 conversion,
 * copies into the chunk) with it released, so the rest of the pipeline
 * runs in parallel; only the HDF5 calls themselves are serialized.
 * A program that calls HDF5 itself from other threads while Zephon runs
 * must take this lock too (or use a thread-safe HDF5 build).
 *
 * While the lock is held, HDF5's automatic error printing is off and
 * loading filter plugins is off (zpi_h5_lock saves both settings and
 * zpi_h5_unlock puts them back, so a program using HDF5 itself keeps its
 * own settings between Zephon's calls). A failed HDF5 call's message is
 * read with zpi_h5_errmsg before the unlock.
 *
 * Not recursive: never call zpi_h5_lock while holding it.
 */
#ifndef ZP_HDF5_UTIL_H
#define ZP_HDF5_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "zephon/common.h"
#include "base/error.h"

/* Take the HDF5 lock. wait_ns (may be NULL): the nanoseconds spent waiting
 * for it are ADDED to *wait_ns (0 when it was free). */
void zpi_h5_lock(uint64_t *wait_ns);
/* Release it. */
void zpi_h5_unlock(void);

/* With the lock held, right after an HDF5 call failed: the most useful
 * description on HDF5's error stack (its innermost entry, with the
 * function that reported it) into buf, e.g. "H5FD_sec2_read(): addr
 * overflow". "(no HDF5 message)" when the stack is empty. Never fails. */
void zpi_h5_errmsg(char *buf, size_t cap);

/* Process totals of the lock (observability, tests): acquisitions and
 * nanoseconds waited, over all threads. Thread-safe. */
void zpi_h5_lock_stats(uint64_t *acquired, uint64_t *wait_ns);

/* ---- a sample dataset (zephon gen --format h5, tests, benchmarks) ----
 *
 * One HDF5 file with n records along dimension 0 of:
 *   /text      variable-length UTF-8 strings, English-like text (about
 *              text_bytes bytes each, 64 .. 4 * text_bytes)       [text]
 *   /tokens    variable-length int32 documents, 1 .. 64 ids each [tokens]
 *   /features  float32 [n, features]                             [features > 0]
 *   /label     int64 [n]                                         [label]
 * The content is a function of (seed, record index) only, given by
 * zpi_h5_sample_* below, so tests can check any record. */
typedef struct zpi_h5_sample_opts {
    int text;           /* write /text. Default 1 */
    size_t text_bytes;  /* mean text length in bytes. Default 1000 */
    int tokens;         /* write /tokens. Default 0 */
    uint32_t features;  /* columns of /features, 0: none. Default 16 */
    int label;          /* write /label. Default 1 */
} zpi_h5_sample_opts;

void zpi_h5_sample_opts_init(zpi_h5_sample_opts *o);

/* features[i][j] (exact in float32) and label[i]. */
static inline float zpi_h5_sample_feature(uint64_t seed, uint64_t i, uint64_t j)
{
    return (float)((i * 31 + j * 7 + seed) % 4096) * 0.125f;
}
static inline int64_t zpi_h5_sample_label(uint64_t seed, uint64_t i)
{
    return (int64_t)((i ^ seed) % 1000) - 500;
}
/* Document i of /tokens: its length (1..64) and token j. */
static inline size_t zpi_h5_sample_doc_len(uint64_t seed, uint64_t i)
{
    return 1 + (size_t)(((i + 1) * 0x9e3779b97f4a7c15ULL ^ seed) >> 58);
}
static inline int32_t zpi_h5_sample_token(uint64_t seed, uint64_t i, uint64_t j)
{
    return (int32_t)((i * 1000003ULL + j * 7919ULL + seed) % 50257);
}
/* Text of record i into buf (cap bytes, at least 4 * text_bytes + 64);
 * returns its length (no NUL counted; buf is NUL-terminated). */
size_t zpi_h5_sample_text(uint64_t seed, uint64_t i, size_t text_bytes, char *buf, size_t cap);

/* Write the sample file at path (replaced; written to "<path>.part.<pid>"
 * and renamed when complete), in slabs of a few MB, so n may make a file
 * of any size. ZP_OK; ZP_ERR_INVALID (n = 0, no dataset chosen);
 * ZP_ERR_IO naming the file and HDF5's message; ZP_ERR_NOMEM.
 * Takes the HDF5 lock around its HDF5 calls. */
zp_status zpi_hdf5_write_sample(const char *path, uint64_t n, uint64_t seed,
                                const zpi_h5_sample_opts *o, zpi_err *err);

#endif
