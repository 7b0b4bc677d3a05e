/* dataset_internal.h - what the library's other parts need from a dataset
 * beyond the public accessors (private). */
#ifndef ZP_DATASET_INTERNAL_H
#define ZP_DATASET_INTERNAL_H

#include "formats/format.h"
#include "io/fetcher.h"
#include "zephon/dataset.h"

/* Path to open for shard i (resolved against a manifest's folder). */
const char *zpi_dataset_shard_path(const zp_dataset *ds, size_t i);
const zpi_format *zpi_dataset_shard_format(const zp_dataset *ds, size_t i);
/* The identity of the tokenizer that made shard i (pre-tokenized: its
 * manifest entry's "tokenizer", a Megatron pair's PREFIX.tokenizer file),
 * NULL when none is recorded. Borrowed. */
const char *zpi_dataset_shard_tokenizer(const zp_dataset *ds, size_t i);
/* First global sample id of shard i (prefix sum of counts). */
uint64_t zpi_dataset_shard_offset(const zp_dataset *ds, size_t i);
/* What a load of shard i accepts and expects (the dataset's limits, the
 * shard's record count and, from a manifest, its content hash): pass it to
 * the shard's format's load, which checks them. Borrowed, valid until the
 * dataset is destroyed; NULL when i is out of range. */
const zpi_load_limits *zpi_dataset_shard_limits(const zp_dataset *ds, size_t i);
/* The dataset's storage backends and settings (borrowed; NULL for the
 * error-only handle of a failed create). */
struct zpi_storage *zpi_dataset_storage(const zp_dataset *ds);
/* The dataset's log callback and its user pointer (into *user). */
zp_log_fn zpi_dataset_log_fn(const zp_dataset *ds, void **user);
/* What the fetcher needs of every shard of ds (io/fetcher.h): a malloc'd
 * table of *n entries (its strings borrowed from ds, valid until ds is
 * destroyed or a shard is added) and, in *n_remote, how many are URLs. */
zp_status zpi_dataset_fetch_table(const zp_dataset *ds, zpi_fetch_shard **out, size_t *n,
                                  size_t *n_remote, zpi_err *err);
/* The fingerprint of earlier versions (names whole, as spelled): a state
 * saved before holds it (api/pipeline_state.c accepts it on a resume). */
uint64_t zpi_dataset_fingerprint_spelled(const zp_dataset *ds);
/* The manifest of ds for the folder base_dir, as zp_dataset_manifest_json
 * writes it, but without counting: record counts only where known (from a
 * manifest), paths and sizes as added (a listing's). `zephon index
 * --no-count`. OUT: *out, caller frees. */
zp_status zpi_dataset_listing_json(zp_dataset *ds, const char *base_dir, char **out, size_t *len);
/* Log through the dataset's callback (printf-style); no-op without one. */
void zpi_dataset_log(const zp_dataset *ds, zp_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
