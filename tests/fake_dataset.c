/*
 * fake_dataset.c - a test-only zp_dataset built from an array of shard
 * record counts, with the four calls the WorkSource uses. It lets
 * test_worksource run without files and without the real dataset code
 * (the test executable does not link libzephon).
 */
#include <stdlib.h>
#include <string.h>

#include "data/dataset_internal.h"
#include "zephon/dataset.h"

/* Test-side interface (declared again in test_worksource.c). */
zp_status fake_dataset_create(const uint64_t *counts, size_t n, int indexed, zp_dataset **out);
void fake_dataset_set_index_status(zp_dataset *ds, zp_status st);
int fake_dataset_index_calls(const zp_dataset *ds);
void fake_dataset_destroy(zp_dataset *ds);
void fake_dataset_set_segment_records(zp_dataset *ds, uint64_t per);

struct zp_dataset {
    size_t n;
    uint64_t *counts;
    uint64_t *offsets; /* n + 1 prefix sums */
    int indexed;       /* counts are hidden (UINT64_MAX) until indexed */
    int index_calls;
    zp_status index_status; /* what zp_dataset_index() returns */
    uint64_t seg_per;       /* records per segment of every shard; 0: one segment each */
};

/* Shards cut into segments of `per` records (0: whole shards). */
void fake_dataset_set_segment_records(zp_dataset *ds, uint64_t per) { ds->seg_per = per; }

uint64_t zp_dataset_shard_segments(const zp_dataset *ds, size_t i, uint64_t *per)
{
    if (per)
        *per = 0;
    if (i >= ds->n || !ds->indexed)
        return 0;
    uint64_t n = ds->counts[i];
    uint64_t p = ds->seg_per && ds->seg_per < n ? ds->seg_per : (n ? n : 1);
    if (per)
        *per = p;
    return n ? (n + p - 1) / p : 1;
}

zp_status fake_dataset_create(const uint64_t *counts, size_t n, int indexed, zp_dataset **out)
{
    zp_dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        return ZP_ERR_NOMEM;
    ds->n = n;
    ds->counts = malloc((n ? n : 1) * sizeof *ds->counts);
    ds->offsets = malloc((n + 1) * sizeof *ds->offsets);
    if (!ds->counts || !ds->offsets) {
        fake_dataset_destroy(ds);
        return ZP_ERR_NOMEM;
    }
    if (n)
        memcpy(ds->counts, counts, n * sizeof *counts);
    ds->offsets[0] = 0;
    for (size_t i = 0; i < n; i++)
        ds->offsets[i + 1] = ds->offsets[i] + counts[i];
    ds->indexed = indexed;
    ds->index_status = ZP_OK;
    *out = ds;
    return ZP_OK;
}

void fake_dataset_set_index_status(zp_dataset *ds, zp_status st) { ds->index_status = st; }

int fake_dataset_index_calls(const zp_dataset *ds) { return ds->index_calls; }

void fake_dataset_destroy(zp_dataset *ds)
{
    if (!ds)
        return;
    free(ds->counts);
    free(ds->offsets);
    free(ds);
}

zp_status zp_dataset_index(zp_dataset *ds)
{
    ds->index_calls++;
    if (ds->index_status != ZP_OK)
        return ds->index_status;
    ds->indexed = 1;
    return ZP_OK;
}

size_t zp_dataset_num_shards(const zp_dataset *ds) { return ds->n; }

uint64_t zp_dataset_shard_samples(const zp_dataset *ds, size_t i)
{
    if (i >= ds->n || !ds->indexed)
        return UINT64_MAX;
    return ds->counts[i];
}

uint64_t zpi_dataset_shard_offset(const zp_dataset *ds, size_t i)
{
    return i <= ds->n ? ds->offsets[i] : UINT64_MAX;
}

const char *zp_dataset_shard_name(const zp_dataset *ds, size_t i)
{
    static const char *names[] = {"fake-0.jsonl", "fake-1.jsonl", "fake-2.jsonl", "fake-n.jsonl"};
    return i < ds->n ? names[i < 3 ? i : 3] : NULL;
}

const char *zp_dataset_errmsg(const zp_dataset *ds)
{
    return ds->index_status != ZP_OK ? "fake-1.jsonl: cannot open: No such file or directory" : "";
}
