/* dataset_table.h - the shard table of a dataset, private to its files:
 * dataset.c (the table: create, shards in and out, counts, hashes,
 * accessors), dataset_add.c (adding specs: paths, URLs, globs, folders,
 * manifests) and dataset_manifest.c (the manifest that describes it). */
#ifndef ZP_DATASET_TABLE_H
#define ZP_DATASET_TABLE_H

#include <stdint.h>
#include <sys/stat.h>

#include "base/error.h"
#include "data/index_store.h"
#include "formats/format.h"
#include "io/fetcher.h"
#include "io/storage.h"
#include "zephon/dataset.h"

#define DEFAULT_MAX_RECORD ((size_t)16 << 20)
#define DEFAULT_MAX_SHARD ((size_t)2 << 30)
/* Default segment sizes (stored bytes) of zp_dataset_config.segment_bytes. */
#define DEFAULT_SEGMENT_PLAIN ((uint64_t)8 << 20)
#define DEFAULT_SEGMENT_ZST ((uint64_t)2 << 20)
#define UNKNOWN UINT64_MAX
#define NONE SIZE_MAX
/* How messages name a manifest given as bytes. */
#define MANIFEST_IN_MEMORY "manifest (in memory)"
/* The manifest that makes a folder a described dataset. */
#define FOLDER_MANIFEST "manifest.json"
/* The device number that marks a remote shard's identity. */
#define REMOTE_DEV ((dev_t)-1)
/* zp_dataset_pack's layout: the magic, u64 shard count, then per shard u64
 * flags, bytes, samples, xxh64 (little endian), and strings (u32 length,
 * bytes, NUL): path, name (when ZPI_PACK_NAME), format name. */
#define ZPI_PACK_MAGIC "ZPDSPK1\n"
#define ZPI_PACK_MAGIC_LEN 8
#define ZPI_PACK_NAME 1u
#define ZPI_PACK_SAMPLES 2u
#define ZPI_PACK_XXH64 4u
/* The device number of a local shard taken from a trusted manifest without
 * a stat() (zp_dataset_trust_manifest): its identity is its path. */
#define TRUSTED_DEV ((dev_t)-2)
/* Largest remote manifest read. */
#define MAX_REMOTE_MANIFEST ((size_t)256 << 20)

typedef struct shard {
    char *name;            /* as given, or the manifest's "name" (default "path"); owned */
    char *path;            /* path to open (resolved against the manifest's folder); owned */
    const zpi_format *fmt; /* static */
    uint64_t bytes;        /* size on disk */
    uint64_t samples;      /* record count, UNKNOWN until indexed */
    uint64_t offset;       /* first global sample id, UNKNOWN while a count before is unknown */
    uint64_t xxh64;        /* content hash when has_hash */
    int has_hash;
    int named;             /* name given by a manifest's "name" (not derived from the path) */
    int from_manifest;     /* samples came from a manifest */
    dev_t dev;             /* the file's identity: a file is in the table once */
    ino_t ino;             /* (a remote shard: REMOTE_DEV and the hash of its identity) */
    char *identity;        /* remote shard: zpi_url_identity() of its URL; owned. NULL: local */
    int trusted;           /* local, added from a trusted manifest without a stat():
                              its size is checked when it is loaded (lim.has_bytes) */
    size_t next;           /* next shard in the same identity bucket, NONE at the end */
    zpi_load_limits lim;   /* what a load of this shard accepts and expects */
    char *tokenizer;       /* the tokenizer identity recorded for a pre-tokenized shard
                              (its manifest entry, a Megatron pair's PREFIX.tokenizer);
                              owned; NULL: none */
} shard;

struct zp_dataset {
    zp_dataset_config cfg;  /* cfg.index_store_dir points at store_dir */
    char *store_dir;        /* index store folder, NULL when off; owned */
    zpi_index_store *store; /* NULL when off */
    zpi_storage *storage;   /* backends and settings for remote shards and manifests */
    zpi_fetcher *fetcher;   /* remote shards read by index/verify; made when first needed */
    size_t fetcher_n;       /* the shards in its table (made again when more were added) */
    zp_status create_status; /* not ZP_OK: a failed create's error-only handle */
    zpi_load_limits lim;
    shard *shards;
    size_t n, cap;
    size_t *buckets; /* identity hash: first shard of each bucket, NONE when empty */
    size_t nbuckets; /* 0 or a power of two */
    /* zp_dataset_exclude(): a file never read as part of the dataset */
    int has_exclude;
    dev_t ex_dev;
    ino_t ex_ino;
    char *ex_path; /* owned */
    int trust_manifest; /* zp_dataset_add_packed() at work: local shards not stat()ed */
    char *ok_dir;       /* the folder last found without the unfinished-preprocess
                           marker: its next shards are not checked again (owned) */
    zpi_err err;
};

/* A building call on the error-only handle of a failed create: its error. */
#define RETURN_IF_UNUSABLE(ds)                                                                     \
    do {                                                                                           \
        if (!(ds))                                                                                 \
            return ZP_ERR_INVALID;                                                                 \
        if ((ds)->create_status != ZP_OK)                                                          \
            return (ds)->create_status;                                                            \
    } while (0)

/* Keep the error on the handle; returns st. */
zp_status zpi_ds_fail(zp_dataset *ds, zp_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Append a shard for the file described by sb; takes ownership of name and
 * path (freed on failure). The same file twice (by device and inode: two
 * spellings, a hard link, a symlink) is an error naming both. */
zp_status zpi_ds_push_shard(zp_dataset *ds, char *name, char *path, const zpi_format *fmt,
                            const struct stat *sb, shard **out);
/* Drop the newest shard. */
void zpi_ds_pop_shard(zp_dataset *ds);
/* Every shard's first sample id from the counts before it. */
void zpi_ds_update_offsets(zp_dataset *ds);
/* 1 when sb is the file excluded by zp_dataset_exclude(). */
int zpi_ds_is_excluded(const zp_dataset *ds, const struct stat *sb);
/* Copy the shard's count and hash into what its load checks (lim). */
void zpi_ds_shard_sync(const zp_dataset *ds, shard *s);
/* Count every shard whose count is not known (zp_dataset_index). */
zp_status zpi_ds_index_all(zp_dataset *ds);
/* XXH64 of shard s's bytes (a remote shard: its file in the cache). */
zp_status zpi_ds_hash_file(zp_dataset *ds, const shard *s, uint64_t *out);

#endif
