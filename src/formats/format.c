/*
 * format.c - the table of shard formats (immutable, thread-safe).
 */
#include "formats/format.h"

#include <string.h>

/* Formats live in their own files; adding one is a line here. */
extern const zpi_format zpi_format_jsonl;
extern const zpi_format zpi_format_jsonl_zst;
extern const zpi_format zpi_format_jsonl_gz; /* ".jsonl.gz" */
extern const zpi_format zpi_format_json_gz;  /* ".json.gz", the same format */
extern const zpi_format zpi_format_hdf5;     /* ".h5" */
extern const zpi_format zpi_format_hdf5_alt; /* ".hdf5", the same format */
extern const zpi_format zpi_format_megatron;
extern const zpi_format zpi_format_parquet;  /* ".parquet" */

static const zpi_format *const formats[] = {
    &zpi_format_jsonl,
    &zpi_format_jsonl_zst,
    &zpi_format_jsonl_gz,
    &zpi_format_json_gz,
#ifdef ZP_HAVE_FORMAT_HDF5
    &zpi_format_hdf5,
    &zpi_format_hdf5_alt,
#endif
#ifdef ZP_HAVE_FORMAT_MEGATRON
    &zpi_format_megatron,
#endif
#ifdef ZP_HAVE_FORMAT_PARQUET
    &zpi_format_parquet,
#endif
};
#define N_FORMATS (sizeof formats / sizeof formats[0])

const zpi_format *zpi_format_for_path(const char *path)
{
    if (!path)
        return NULL;
    size_t n = strlen(path);
    const zpi_format *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < N_FORMATS; i++) {
        size_t sl = strlen(formats[i]->suffix);
        if (sl <= n && sl > best_len && memcmp(path + n - sl, formats[i]->suffix, sl) == 0) {
            best = formats[i];
            best_len = sl;
        }
    }
    return best;
}

const zpi_format *zpi_format_by_name(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < N_FORMATS; i++)
        if (strcmp(formats[i]->name, name) == 0)
            return formats[i];
    return NULL;
}
