/* mpi_agree.c - startup agreement between ranks (dataset, plan, mixture
 * and batch settings compared with one MPI_Allreduce), and the dataset
 * built once on rank 0 and broadcast packed (zp_dataset_pack: the
 * manifest's content without JSON; with the shards each spec added, for a
 * mixture's parts). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_internal.h"

/* ------------------------------------------------------------ info */

static const char *pack_name(zp_pack_mode p)
{
    switch (p) {
    case ZP_PACK_RECORDS:
        return "records";
    case ZP_PACK_CONCAT:
        return "concat";
    case ZP_PACK_PAD:
        return "pad";
    case ZP_PACK_BESTFIT:
        return "bestfit";
    }
    return "?";
}

/* Append extra's tokens (space-separated key=value) to b, leaving out the
 * data token ("data=" or "data:" at a token's start: the data line says it)
 * and cutting a token longer than ZPI_MPI_TOKEN_MAX bytes. */
#define ZPI_MPI_TOKEN_MAX 120
static void extra_text(const char *extra, zpi_sbuf *b, const char **sep)
{
    const char *p = extra;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        const char *e = strchr(p, ' ');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (!(n >= 5 && (strncmp(p, "data=", 5) == 0 || strncmp(p, "data:", 5) == 0))) {
            zpi_sb_puts(b, *sep);
            if (n <= ZPI_MPI_TOKEN_MAX) {
                zpi_sb_putn(b, p, n);
            } else {
                zpi_sb_putn(b, p, ZPI_MPI_TOKEN_MAX - 20);
                zpi_sb_printf(b, "...(%zu bytes)", n);
            }
            *sep = " ";
        }
        p += n;
    }
}

void zpi_mpi_settings_text(const zpi_mpi_info *i, zpi_sbuf *b)
{
    const char *sep = "";
    if (i->have_ws) {
        zpi_sb_printf(b, "seed=%llu world_size=%u shuffle=%d shuffle_block_shards=%u remainder=%s",
                      (unsigned long long)i->ws.seed, i->ws.world_size, i->ws.shuffle,
                      i->ws.shuffle_block_shards,
                      i->ws.remainder == ZP_REMAINDER_DROP ? "drop" : "pad");
        if (i->ws.epoch_samples)
            zpi_sb_printf(b, " epoch_samples=%llu", (unsigned long long)i->ws.epoch_samples);
        if (i->ws.n_parts)
            zpi_sb_printf(b, " mixture_parts=%zu", i->ws.n_parts);
        sep = " ";
    }
    if (i->have_pc) {
        zpi_sb_printf(b, "%sepochs=%u microbatch_size=%zu seq_len=%zu pack=%s on_bad_record=%s", sep,
                      i->pc.epochs, i->pc.microbatch_size, i->pc.seq_len, pack_name(i->pc.pack),
                      i->pc.on_bad_record == ZP_BAD_RECORD_SKIP ? "skip" : "fail");
        sep = " ";
    }
    if (i->extra && *i->extra)
        extra_text(i->extra, b, &sep);
    if (i->have_dataset) {
        char bytes[32];
        zpi_mpi_human_bytes(bytes, sizeof bytes, (double)i->ds_bytes);
        zpi_sb_printf(b, "%sdata=%s (%llu shards, %s, fingerprint %016llx)", sep,
                      i->data[0] ? i->data : "-", (unsigned long long)i->ds_shards, bytes,
                      (unsigned long long)i->ds_fingerprint);
        sep = " ";
    }
    if (!*sep)
        zpi_sb_puts(b, "(not agreed: zp_mpi_agree was not called)");
}

/* Where the data came from, for the report: one spec made absolute (a
 * manifest, a folder, a shard) or kept as given (a glob, a URL); several:
 * their count, the first and the last. */
void zpi_mpi_data_summary(char *buf, size_t cap, const char *const *specs, size_t n)
{
    buf[0] = '\0';
    if (!specs || n == 0)
        return;
    char first[200], last[200]; /* URLs without their secrets */
    zp_dataset_spec_redact(specs[0], first, sizeof first);
    zp_dataset_spec_redact(specs[n - 1], last, sizeof last);
    if (n == 1) {
        char red[ZPI_MPI_DATA_MAX];
        zp_dataset_spec_redact(specs[0], red, sizeof red);
        char *abs = strstr(specs[0], "://") ? NULL : realpath(specs[0], NULL);
        const char *s = abs ? abs : red;
        size_t len = strlen(s);
        const char *what = len >= 5 && strcmp(s + len - 5, ".json") == 0 ? "manifest " : "";
        if (len + strlen(what) < cap)
            zpi_fmt(buf, cap, "%s%s", what, s);
        else /* keep the end: the file name */
            zpi_fmt(buf, cap, "%s...%s", what, s + len - (cap - strlen(what) - 8));
        free(abs);
        return;
    }
    zpi_fmt(buf, cap, "%zu paths/globs: %s ... %s", n, first, last);
}

/* ------------------------------------------------------------ agreement */

enum {
    F_PRESENT, /* bits: 1 dataset, 2 worksource, 4 pipeline, 8 extra */
    F_DS_FP,
    F_DS_SHARDS,
    F_DS_SAMPLES,
    F_SEED,
    F_WORLD,
    F_SHUFFLE,
    F_BLOCK,
    F_REMAINDER,
    F_EPOCH_SAMPLES,
    F_PARTS,
    F_PARTS_HASH,
    F_EPOCHS,
    F_MICRO,
    F_SEQ,
    F_PACK,
    F_BAD,
    F_EXTRA,
    F_N
};

static const char *const FIELD_NAME[F_N] = {
    "the settings given to zp_mpi_agree (dataset/worksource/pipeline/extra present)",
    "dataset manifest",
    "dataset shard count",
    "dataset sample count",
    "seed",
    "world_size",
    "shuffle",
    "shuffle_block_shards",
    "remainder",
    "epoch_samples",
    "mixture part count",
    "mixture parts (names, shards, weights, weight schedule)",
    "epochs",
    "microbatch_size",
    "seq_len",
    "pack",
    "on_bad_record",
    "extra settings",
};

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return h;
}

static uint64_t fnv1a_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* A hash of the mixture's parts: each name (NULL as ""), shard count and
 * weight (its bits: the same number on every rank gives the same bits). */
static uint64_t parts_hash(const zp_worksource_config *ws)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < ws->n_parts && ws->parts; i++) {
        const zp_mix_part *p = &ws->parts[i];
        const char *name = p->name ? p->name : "";
        uint64_t shards = p->shards;
        h = fnv1a_bytes(h, name, strlen(name) + 1);
        h = fnv1a_bytes(h, &shards, sizeof shards);
        h = fnv1a_bytes(h, &p->weight, sizeof p->weight);
    }
    /* the weight schedule's phases: start, linear_every, weights */
    for (size_t k = 0; k < ws->n_phases && ws->phases; k++) {
        const zp_mix_phase *ph = &ws->phases[k];
        h = fnv1a_bytes(h, &ph->start, sizeof ph->start);
        h = fnv1a_bytes(h, &ph->linear_every, sizeof ph->linear_every);
        for (size_t i = 0; i < ws->n_parts && ph->weights; i++)
            h = fnv1a_bytes(h, &ph->weights[i], sizeof ph->weights[i]);
    }
    return h;
}

/* The value of rank i's field f for a message. */
static void field_value(char *buf, size_t cap, const uint64_t *rec, int f)
{
    switch (f) {
    case F_DS_FP:
        zpi_fmt(buf, cap, "fingerprint %016llx (%llu shards, %llu samples)",
                 (unsigned long long)rec[F_DS_FP], (unsigned long long)rec[F_DS_SHARDS],
                 (unsigned long long)rec[F_DS_SAMPLES]);
        break;
    case F_REMAINDER:
        zpi_fmt(buf, cap, "%s", rec[f] ? "drop" : "pad");
        break;
    case F_PACK:
        zpi_fmt(buf, cap, "%s", pack_name((zp_pack_mode)rec[f]));
        break;
    case F_BAD:
        zpi_fmt(buf, cap, "%s", rec[f] ? "skip" : "fail");
        break;
    case F_EXTRA:
        zpi_fmt(buf, cap, "hash %016llx", (unsigned long long)rec[f]);
        break;
    case F_PARTS_HASH:
        zpi_fmt(buf, cap, "%llu parts, hash %016llx", (unsigned long long)rec[F_PARTS],
                (unsigned long long)rec[f]);
        break;
    case F_EPOCH_SAMPLES:
        if (rec[f] == 0)
            zpi_fmt(buf, cap, "0 (the dataset's sample count)");
        else
            zpi_fmt(buf, cap, "%llu", (unsigned long long)rec[f]);
        break;
    default:
        zpi_fmt(buf, cap, "%llu", (unsigned long long)rec[f]);
    }
}

/* Append "name differs: rank 0-2: v, rank 3: w" for field f to msg. */
static void describe_field(char *msg, size_t cap, const uint64_t *all, int size, int f,
                           int *ranks)
{
    size_t len = strlen(msg);
    zpi_fmt(msg + len, cap - len, "%s%s differs:", len ? "; " : "", FIELD_NAME[f]);
    /* distinct values in order of first appearance, at most 4 shown */
    uint64_t shown[4];
    int n_shown = 0;
    for (int i = 0; i < size && n_shown < 4; i++) {
        uint64_t v = all[(size_t)i * F_N + (size_t)f];
        int seen = 0;
        for (int k = 0; k < n_shown; k++)
            seen |= shown[k] == v;
        if (seen)
            continue;
        shown[n_shown++] = v;
        size_t n = 0;
        for (int j = 0; j < size; j++)
            if (all[(size_t)j * F_N + (size_t)f] == v)
                ranks[n++] = j;
        char list[128], val[160];
        zpi_mpi_ranklist(list, sizeof list, ranks, n);
        field_value(val, sizeof val, all + (size_t)i * F_N, f);
        len = strlen(msg);
        zpi_fmt(msg + len, cap - len, "%s rank%s %s: %s", n_shown > 1 ? "," : "", n > 1 ? "s" : "",
                 list, val);
    }
}

/* Broadcast rank src's extra string (at most cap-1 bytes) into buf. */
static zp_status bcast_extra(zp_mpi *m, int src, const char *extra, char *buf, size_t cap)
{
    memset(buf, 0, cap);
    if (m->rank == src && extra)
        zpi_fmt(buf, cap, "%s", extra);
    return zpi_mpi_check(m, zpi_coll_bcast(m, buf, (int)cap, MPI_CHAR, src),
                         "MPI_Bcast (extra settings)");
}

/* This rank's record of the settings to agree on; *ds_bytes: the dataset's
 * bytes (0 without one). */
static void agree_record(uint64_t rec[F_N], uint64_t *ds_bytes, const zp_dataset *ds,
                         const zp_worksource_config *ws, const zp_pipeline_config *pc,
                         const char *extra)
{
    memset(rec, 0, F_N * sizeof *rec);
    *ds_bytes = 0;
    if (ds) {
        rec[F_PRESENT] |= 1;
        rec[F_DS_FP] = zp_dataset_fingerprint(ds);
        rec[F_DS_SHARDS] = zp_dataset_num_shards(ds);
        rec[F_DS_SAMPLES] = zp_dataset_num_samples(ds);
        for (size_t i = 0; i < zp_dataset_num_shards(ds); i++)
            *ds_bytes += zp_dataset_shard_bytes(ds, i);
    }
    if (ws) {
        rec[F_PRESENT] |= 2;
        rec[F_SEED] = ws->seed;
        rec[F_WORLD] = ws->world_size;
        rec[F_SHUFFLE] = (uint64_t)ws->shuffle;
        rec[F_BLOCK] = ws->shuffle_block_shards;
        rec[F_REMAINDER] = (uint64_t)ws->remainder;
        rec[F_EPOCH_SAMPLES] = ws->epoch_samples;
        rec[F_PARTS] = ws->n_parts;
        rec[F_PARTS_HASH] = parts_hash(ws);
    }
    if (pc) {
        rec[F_PRESENT] |= 4;
        rec[F_EPOCHS] = pc->epochs;
        rec[F_MICRO] = pc->microbatch_size;
        rec[F_SEQ] = pc->seq_len;
        rec[F_PACK] = (uint64_t)pc->pack;
        rec[F_BAD] = (uint64_t)pc->on_bad_record;
    }
    if (extra) {
        rec[F_PRESENT] |= 8;
        rec[F_EXTRA] = fnv1a(extra);
    }
}

/* Every rank agrees: keep what was agreed in m->info. */
static zp_status agree_keep(zp_mpi *m, const uint64_t rec[F_N], uint64_t ds_bytes,
                            const zp_dataset *ds, const zp_worksource_config *ws,
                            const zp_pipeline_config *pc, const char *extra)
{
    zp_status local = ZP_OK;
    zpi_mpi_info_free(&m->info);
    memset(&m->info, 0, sizeof m->info);
    m->info.have_dataset = ds != NULL;
    m->info.have_ws = ws != NULL;
    m->info.have_pc = pc != NULL;
    m->info.ds_shards = rec[F_DS_SHARDS];
    m->info.ds_samples = rec[F_DS_SAMPLES];
    m->info.ds_fingerprint = rec[F_DS_FP];
    m->info.ds_bytes = ds_bytes;
    memcpy(m->info.data, m->data, sizeof m->info.data);
    if (ws) {
        m->info.ws = *ws;
        m->info.ws.parts = NULL; /* borrowed by the caller: only the count is kept */
        m->info.ws.phases = NULL; /* the same */
    }
    if (pc)
        m->info.pc = *pc;
    if (extra && !(m->info.extra = strdup(extra)))
        local = zpi_mpi_fail(m, ZP_ERR_NOMEM, "zp_mpi_agree: out of memory copying the extra settings");
    return zpi_mpi_agree_status(m, local);
}

/* Append "extra settings differ: ..." to msg: the ranks holding rank 0's
 * text, and those holding the text of the first rank that differs; both
 * texts shown (a collective: every rank calls it). */
static void describe_extra(zp_mpi *m, const uint64_t *all, int *ranks, const char *extra,
                           char *msg, size_t cap)
{
    int other = 0;
    for (int i = 1; i < m->size && !other; i++)
        if (all[(size_t)i * F_N + F_EXTRA] != all[F_EXTRA])
            other = i;
    char a[200], b[200], la[96], lb[96];
    size_t na = 0, nb = 0, nrest = 0;
    for (int i = 0; i < m->size; i++) {
        uint64_t v = all[(size_t)i * F_N + F_EXTRA];
        if (v == all[F_EXTRA])
            ranks[na++] = i;
    }
    zpi_mpi_ranklist(la, sizeof la, ranks, na);
    for (int i = 0; i < m->size; i++) {
        uint64_t v = all[(size_t)i * F_N + F_EXTRA];
        if (v == all[(size_t)other * F_N + F_EXTRA])
            ranks[nb++] = i;
        else if (v != all[F_EXTRA])
            nrest++;
    }
    zpi_mpi_ranklist(lb, sizeof lb, ranks, nb);
    if (bcast_extra(m, 0, extra, a, sizeof a) == ZP_OK &&
        bcast_extra(m, other, extra, b, sizeof b) == ZP_OK) {
        size_t len = strlen(msg);
        zpi_fmt(msg + len, cap - len, "%sextra settings differ: rank%s %s: '%s', rank%s %s: '%s'%s",
                 len ? "; " : "", na > 1 ? "s" : "", la, a, nb > 1 ? "s" : "", lb, b,
                 nrest ? " (and other variants)" : "");
    }
}

/* A mismatch (every rank is here; res: the min of each field, then the
 * min of its complement): gather every rank's values so that every rank
 * can name the ranks that differ. */
static zp_status agree_mismatch(zp_mpi *m, const uint64_t rec[F_N], const uint64_t res[2 * F_N],
                                const char *extra)
{
    uint64_t *all = malloc((size_t)m->size * F_N * sizeof *all);
    int *ranks = malloc((size_t)m->size * sizeof *ranks);
    zp_status local = (all && ranks) ? ZP_OK
                                     : zpi_mpi_fail(m, ZP_ERR_NOMEM,
                                                    "out of memory naming differing ranks");
    zp_status st = zpi_mpi_agree_status(m, local);
    if (st == ZP_OK)
        st = zpi_mpi_check(m, zpi_coll_allgather(m, rec, all, F_N, MPI_UINT64_T),
                           "MPI_Allgather (startup agreement)");
    if (st != ZP_OK) {
        free(all);
        free(ranks);
        return st;
    }
    char msg[ZPI_MPI_ERRMAX];
    msg[0] = '\0';
    int extra_differs = 0;
    for (int f = 0; f < F_N; f++) {
        if (res[f] == ~res[F_N + f])
            continue;
        if (f == F_DS_SHARDS || f == F_DS_SAMPLES) {
            if (res[F_DS_FP] != ~res[F_N + F_DS_FP])
                continue; /* already said with the fingerprint */
        }
        if (f == F_PARTS && res[F_PARTS_HASH] != ~res[F_N + F_PARTS_HASH])
            continue; /* said with the parts' hash, which names the count */
        if (f == F_EXTRA) {
            extra_differs = 1;
            continue;
        }
        describe_field(msg, sizeof msg, all, m->size, f, ranks);
    }
    if (extra_differs)
        describe_extra(m, all, ranks, extra, msg, sizeof msg);
    free(all);
    free(ranks);
    return zpi_mpi_fail(m, ZP_ERR_MISMATCH, "%s", msg);
}

zp_status zp_mpi_agree(zp_mpi *m, const zp_dataset *ds, const zp_worksource_config *ws,
                       const zp_pipeline_config *pc, const char *extra)
{
    ZPI_MPI_USABLE(m);
    zp_status local = ZP_OK;
    if (ws && (ws->rank != (uint32_t)m->rank || ws->world_size != (uint32_t)m->size))
        local = zpi_mpi_fail(m, ZP_ERR_INVALID,
                             "worksource rank %u / world size %u do not match the communicator "
                             "(rank %d of %d): use zp_mpi_worksource_config()",
                             ws->rank, ws->world_size, m->rank, m->size);
    zp_status st = zpi_mpi_agree_status(m, local);
    if (st != ZP_OK)
        return st;

    uint64_t rec[F_N];
    uint64_t ds_bytes;
    agree_record(rec, &ds_bytes, ds, ws, pc, extra);
    /* min of v and of ~v (= ~max v) in one reduction */
    uint64_t in[2 * F_N], res[2 * F_N];
    for (int f = 0; f < F_N; f++) {
        in[f] = rec[f];
        in[F_N + f] = ~rec[f];
    }
    st = zpi_mpi_check(m, zpi_coll_allreduce(m, in, res, 2 * F_N, MPI_UINT64_T, MPI_MIN),
                       "MPI_Allreduce (startup agreement)");
    if (st != ZP_OK)
        return st;
    int differ = 0;
    for (int f = 0; f < F_N; f++)
        differ |= res[f] != ~res[F_N + f];
    if (!differ) {
        st = agree_keep(m, rec, ds_bytes, ds, ws, pc, extra);
        /* the agreed plan names each shard's owner (mpi_peer.c) */
        if (st == ZP_OK && m->peer && ds && ws)
            st = zpi_mpi_peer_set_owners(m, m->peer, ds, ws);
        return st;
    }
    return agree_mismatch(m, rec, res, extra);
}

/* ------------------------------------------------------------ dataset broadcast */

/* Rank 0: build the dataset from the specs and pack it (zp_dataset_pack:
 * what a manifest that does not depend on a folder holds: canonical
 * absolute paths or URLs, each shard's name as rank 0 was given it, sizes,
 * counts, known hashes). *out malloc'd. counts (NULL,
 * or n entries): the shards each spec added. */
static zp_status build_manifest(zp_mpi *m, const char *const *specs, size_t n,
                                const zp_dataset_config *cfg, uint64_t *counts, char **out,
                                size_t *out_len)
{
    zp_dataset *ds = NULL;
    zp_status st = zp_dataset_create(cfg, &ds);
    if (st != ZP_OK) {
        zpi_mpi_fail(m, st, "cannot create a dataset: %s",
                     ds && *zp_dataset_errmsg(ds) ? zp_dataset_errmsg(ds) : zp_status_str(st));
        zp_dataset_destroy(ds);
        return st;
    }
    for (size_t i = 0; i < n && st == ZP_OK; i++) {
        size_t before = zp_dataset_num_shards(ds);
        st = zp_dataset_add(ds, specs[i]);
        if (counts)
            counts[i] = zp_dataset_num_shards(ds) - before;
    }
    if (st == ZP_OK) /* indexes the shards without counts */
        st = zp_dataset_pack(ds, out, out_len);
    if (st != ZP_OK)
        zpi_mpi_fail(m, st, "%s", zp_dataset_errmsg(ds));
    zp_dataset_destroy(ds);
    return st;
}

/* Broadcast len bytes from rank 0 in pieces that fit an int count. */
static zp_status bcast_bytes(zp_mpi *m, char *buf, uint64_t len)
{
    const uint64_t piece = (uint64_t)1 << 30;
    for (uint64_t off = 0; off < len; off += piece) {
        uint64_t n = len - off < piece ? len - off : piece;
        zp_status st = zpi_mpi_check(m, zpi_coll_bcast(m, buf + off, (int)n, MPI_CHAR, 0),
                                     "MPI_Bcast (manifest)");
        if (st != ZP_OK)
            return st;
    }
    return ZP_OK;
}

/* Every rank: a dataset from rank 0's packed dataset (paths are absolute,
 * so no rank's current folder matters). Rank 0 checked each local shard
 * when it built them (stat: a regular file of that size, once under one
 * name, not in an unfinished preprocess folder), so no rank stats them
 * again here: each rank checks a shard's size when it first loads it
 * (zp_dataset_add_packed), and startup costs no file system call per
 * shard on any rank but rank 0; nor a JSON parse of the whole dataset. */
static zp_status dataset_from_bytes(zp_mpi *m, const char *bytes, size_t len,
                                    const zp_dataset_config *cfg, zp_dataset **out)
{
    zp_dataset *ds = NULL;
    zp_status st = zp_dataset_create(cfg, &ds);
    if (st != ZP_OK) {
        zpi_mpi_fail(m, st, "cannot create a dataset: %s",
                     ds && *zp_dataset_errmsg(ds) ? zp_dataset_errmsg(ds) : zp_status_str(st));
        zp_dataset_destroy(ds);
        return st;
    }
    if ((st = zp_dataset_add_packed(ds, bytes, len)) != ZP_OK) {
        zpi_mpi_fail(m, st, "dataset broadcast by rank 0: %s", zp_dataset_errmsg(ds));
        zp_dataset_destroy(ds);
        return st;
    }
    *out = ds;
    return ZP_OK;
}

/* zp_mpi_dataset_create(), and with part_shards (parts set) the shards
 * each spec added on rank 0, broadcast after the manifest. */
static zp_status dataset_create(zp_mpi *m, const char *const *specs, size_t n_specs,
                                const zp_dataset_config *cfg, int parts, size_t *part_shards,
                                zp_dataset **out)
{
    ZPI_MPI_USABLE(m);
    if (out)
        *out = NULL;
    char *bytes = NULL;
    size_t len = 0;
    uint64_t *counts = NULL;
    zp_status local = ZP_OK;
    const char *fn = parts ? "zp_mpi_dataset_create_parts" : "zp_mpi_dataset_create";
    if (!out)
        local = zpi_mpi_fail(m, ZP_ERR_INVALID, "%s: out is NULL", fn);
    else if (parts && !part_shards)
        local = zpi_mpi_fail(m, ZP_ERR_INVALID, "%s: part_shards is NULL", fn);
    else if (m->rank == 0 && (!specs || n_specs == 0))
        local = zpi_mpi_fail(m, ZP_ERR_INVALID, "no dataset given (no shard, glob or manifest)");
    else if (parts && !(counts = calloc(n_specs ? n_specs : 1, sizeof *counts)))
        local = zpi_mpi_fail(m, ZP_ERR_NOMEM, "out of memory for %zu shard counts", n_specs);
    zp_status st = zpi_mpi_agree_status(m, local);
    if (st == ZP_OK && parts) {
        /* every rank fills n_specs counts: the same number on every rank */
        uint64_t in[2] = {n_specs, ~(uint64_t)n_specs}, res[2];
        st = zpi_mpi_check(m, zpi_coll_allreduce(m, in, res, 2, MPI_UINT64_T, MPI_MIN),
                           "MPI_Allreduce (mixture part count)");
        if (st == ZP_OK && res[0] != ~res[1])
            st = zpi_mpi_fail(m, ZP_ERR_MISMATCH,
                              "the ranks were given different numbers of mixture specs (from %llu "
                              "to %llu)",
                              (unsigned long long)res[0], (unsigned long long)~res[1]);
    }
    if (st == ZP_OK) {
        if (m->rank == 0)
            local = build_manifest(m, specs, n_specs, cfg, counts, &bytes, &len);
        if (m->rank == 0)
            zpi_mpi_data_summary(m->data, sizeof m->data, specs, n_specs);
        /* the others wait for rank 0 without taking its core */
        st = zpi_mpi_agree_status_idle(m, local);
    }
    if (st == ZP_OK)
        st = zpi_mpi_check(m, zpi_coll_bcast(m, m->data, (int)sizeof m->data, MPI_CHAR, 0),
                           "MPI_Bcast (data summary)");
    m->data[sizeof m->data - 1] = '\0';
    uint64_t n = len;
    if (st == ZP_OK)
        st = zpi_mpi_check(m, zpi_coll_bcast(m, &n, 1, MPI_UINT64_T, 0), "MPI_Bcast (manifest size)");
    if (st == ZP_OK) {
        if (m->rank != 0 && !(bytes = malloc(n + 1)))
            local = zpi_mpi_fail(m, ZP_ERR_NOMEM, "out of memory for a manifest of %llu bytes",
                                 (unsigned long long)n);
        st = zpi_mpi_agree_status(m, local);
    }
    if (st == ZP_OK)
        st = bcast_bytes(m, bytes, n);
    if (st == ZP_OK && parts)
        for (size_t off = 0; off < n_specs && st == ZP_OK; off += (size_t)1 << 20) {
            size_t k = n_specs - off < ((size_t)1 << 20) ? n_specs - off : (size_t)1 << 20;
            st = zpi_mpi_check(m, zpi_coll_bcast(m, counts + off, (int)k, MPI_UINT64_T, 0),
                               "MPI_Bcast (shards per mixture spec)");
        }
    /* the nodes' shard sharing and, with emulated nodes, each node's own
     * cache folder (docs/storage.md, "Shards from other nodes") */
    zp_dataset_config dc;
    if (cfg)
        dc = *cfg;
    else
        zp_dataset_config_init(&dc);
    char cdir[4096];
    if (st == ZP_OK && !m->solo && m->cfg.emulated_nodes > 0) {
        char base[4000];
        zp_storage_cache_dir(&dc.storage, base, sizeof base);
        zpi_fmt(cdir, sizeof cdir, "%s/node-%d", base, m->node);
        dc.storage.cache_dir = cdir;
    }
    if (st == ZP_OK && !m->solo && !m->peer_made) {
        st = zpi_mpi_peer_create(m, &m->peer);
        m->peer_made = st == ZP_OK;
    }
    if (m->peer)
        dc.storage.peer = zpi_mpi_peer_source(m->peer);
    zp_dataset *ds = NULL;
    if (st == ZP_OK) {
        local = dataset_from_bytes(m, bytes, (size_t)n, &dc, &ds);
        st = zpi_mpi_agree_status(m, local);
    }
    free(bytes);
    if (st != ZP_OK) {
        free(counts);
        zp_dataset_destroy(ds);
        return st;
    }
    for (size_t i = 0; parts && i < n_specs; i++)
        part_shards[i] = (size_t)counts[i];
    free(counts);
    *out = ds;
    return ZP_OK;
}

zp_status zp_mpi_dataset_create(zp_mpi *m, const char *const *specs, size_t n_specs,
                                const zp_dataset_config *cfg, zp_dataset **out)
{
    return dataset_create(m, specs, n_specs, cfg, 0, NULL, out);
}

zp_status zp_mpi_dataset_create_parts(zp_mpi *m, const char *const *specs, size_t n_specs,
                                      const zp_dataset_config *cfg, size_t *part_shards,
                                      zp_dataset **out)
{
    return dataset_create(m, specs, n_specs, cfg, 1, part_shards, out);
}
