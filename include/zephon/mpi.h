/*
 * zephon/mpi.h - the MPI layer (libzephon_mpi, CMake target zephon::mpi):
 * a communicator-aware WorkSource, the startup agreement between ranks,
 * lock-step delivery, metrics reduced to one rank, straggler detection and
 * the cluster-wide fetch-timing report.
 *
 * This is the only public header that includes <mpi.h>.
 *
 * Rules (docs/mpi.md explains them):
 *  - The library never calls MPI_Init/MPI_Finalize and never uses
 *    MPI_COMM_WORLD: the caller initialises MPI and passes a communicator,
 *    which zp_mpi_create() duplicates (MPI_Comm_dup) and sets to
 *    MPI_ERRORS_RETURN, so an MPI failure becomes a ZP_ERR_MPI with a
 *    message, not an abort.
 *  - Only the thread that created a zp_mpi calls it (MPI_THREAD_FUNNELED is
 *    enough: the pipelines' own threads never call MPI).
 *  - A function marked "collective over comm" must be called by every rank
 *    of the communicator, in the same order. Each such function agrees on
 *    its outcome before it returns: when it fails on one rank it fails on
 *    every rank (naming the rank and the cause), so no rank is left waiting
 *    in a later collective.
 *  - The detail of the last error is kept on the handle: zp_mpi_errmsg().
 *  - Ranks are assumed to share one data representation (a homogeneous
 *    cluster): records are moved as bytes.
 */
#ifndef ZEPHON_MPI_H
#define ZEPHON_MPI_H

#include <mpi.h>

#include "certificate.h"
#include "common.h"
#include "dataset.h"
#include "observe.h"
#include "pipeline.h"
#include "preprocess.h"
#include "worksource.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zp_mpi zp_mpi;
typedef struct zp_cluster_report zp_cluster_report;

/* ------------------------------------------------------------ settings */

typedef struct zp_mpi_config {
    /* Rank (in comm) that receives reports. Default 0. */
    int root;
    /* Straggler criterion (docs/report.md). A rank is flagged when
     *   (fetch time per batch >= (1 + straggler_ratio) x the median over ranks
     *    OR its robust z-score 0.6745 (x - median) / MAD > straggler_z)
     *   AND its consumer wait (stall) >= straggler_min_stall of its step time.
     * Defaults 0.25, 3.5 and 0.05. */
    double straggler_ratio;
    double straggler_z;
    double straggler_min_stall;
    /* Periodic (window) reports name a rank only when it was flagged in this
     * many consecutive windows. Default 3. */
    uint32_t straggler_windows;
    /* Windows of per-rank fetch times kept at the root for the heatmap (the
     * oldest are dropped beyond it). Default 256. */
    uint32_t max_windows;
    /* What a "node" is: 0 (default): the ranks sharing memory
     * (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)); N > 0: consecutive groups
     * of N ranks (tests, or a per-socket cache). */
    uint32_t node_group_size;
    /* Emulated nodes (tests, and sites whose launcher hides the machines):
     * N > 0 splits the ranks of each machine (of each node_group_size
     * group when that is set) into N nodes of consecutive ranks, each with
     * its own shard cache folder ("<cache folder>/node-<node index>").
     * Default: $ZEPHON_EMULATED_NODES when set, else 0 (the machines). */
    uint32_t emulated_nodes;
    /* Shards from other nodes (docs/storage.md, "Shards from other nodes"):
     * 1 (default; 0 when $ZEPHON_PEER is "0"): with several nodes and
     * MPI_THREAD_MULTIPLE, a remote shard is fetched from storage by one
     * node (its owner, from the plan) and sent to the others over MPI.
     * peer_timeout_s: a request to another node not answered within it is
     * downloaded from storage instead (default 30, or $ZEPHON_PEER_TIMEOUT).
     * peer_stall_node: tests only: the ranks of this node never answer
     * (default -1, or $ZEPHON_PEER_STALL_NODE). */
    int peer_sharing;
    double peer_timeout_s;
    int peer_stall_node;
    /* Eviction by the node's order (docs/storage.md): 1 (default; 0 when
     * $ZEPHON_NODE_ORDER is "0"): the shard cache of a node evicts the
     * shard whose next use by any rank of the node (or by another node it
     * serves the shard to) is farthest; 0: by each rank's own order. Needs
     * MPI_THREAD_MULTIPLE, as peer_sharing. */
    int node_order;
    /* Optional log callback (borrowed): the root logs each stall notice a
     * rank's watchdog sends it (ZP_LOG_WARN, zp_mpi_stalls). Called on the
     * thread that calls the handle, except the shard sharing's warnings
     * (a request to another node timed out), which come from its service
     * thread: the callback must then be thread-safe. Default NULL. */
    zp_log_fn log;
    void *log_user;
} zp_mpi_config;

/* Fill cfg with the defaults above. */
ZP_API void zp_mpi_config_init(zp_mpi_config *cfg);

/* ------------------------------------------------------------ the handle */

/* Create the MPI layer over comm. Collective over comm. Duplicates comm
 * (the caller keeps and frees its own), sets MPI_ERRORS_RETURN on the
 * duplicate, finds this rank's node (node index, node-local rank) and sends
 * the host names to the root. cfg may be NULL for defaults (it is copied).
 * MPI must be initialised. OUT: *out, caller owns; release with
 * zp_mpi_destroy(). On failure (on every rank when it is collective) *out
 * is a handle that holds only the error, as for every handle's create
 * (docs/api.md): read zp_mpi_errmsg() (it names the setting and its value,
 * or the MPI call), then zp_mpi_destroy() it; every other call on it
 * returns the same status. *out is NULL only when even that handle could
 * not be allocated (ZP_ERR_NOMEM) or out is NULL. Statuses: ZP_ERR_STATE
 * when MPI is not initialised (or finalised), ZP_ERR_INVALID for a bad
 * setting or MPI_COMM_NULL, ZP_ERR_MPI when MPI failed, ZP_ERR_NOMEM. */
ZP_API zp_status zp_mpi_create(MPI_Comm comm, const zp_mpi_config *cfg, zp_mpi **out);

/* A handle for a world of one process WITHOUT MPI: MPI need not be (and is
 * best not) initialised; no MPI function is ever called on this handle.
 * Rank 0 of size 1 on one node (the host name from gethostname()); every
 * function of this header that is collective over comm works on it and
 * gives what it gives on a communicator of one rank (agreement, lock-step
 * delivery, reports with their windows, zp_mpi_state_save), except these,
 * which need MPI and fail with ZP_ERR_INVALID: zp_mpi_preprocess,
 * zp_mpi_preprocess_shared, and HDF5 through MPI-IO
 * (zp_mpi_dataset_config_hdf5 with ZP_MPI_H5_MPIIO; AUTO reads with the
 * serial driver). zp_mpi_comm() returns MPI_COMM_NULL. For programs that
 * were started without a launcher (mpirun, srun) and want the layer's
 * report for their one process: `zephon run --report` does this. OUT and
 * failure: as zp_mpi_create (ZP_ERR_NOMEM, ZP_ERR_INVALID). Release with
 * zp_mpi_destroy(). */
ZP_API zp_status zp_mpi_create_local(const zp_mpi_config *cfg, zp_mpi **out);

/* Free the handle and its communicators. Collective over comm (it frees
 * communicators). A report still in flight is completed first. NULL is
 * accepted. */
ZP_API void zp_mpi_destroy(zp_mpi *m);

/* The last error's detail (borrowed, valid until the next call on m).
 * Never NULL ("" when there was none). */
ZP_API const char *zp_mpi_errmsg(const zp_mpi *m);

/* This rank and the communicator's size. */
ZP_API int zp_mpi_rank(const zp_mpi *m);
ZP_API int zp_mpi_size(const zp_mpi *m);
/* Node index (0 .. nodes-1, in order of each node's lowest rank), number
 * of nodes, this rank's rank and the rank count on its node: the node-local
 * rank decides which rank of a node does node-wide work (e.g. fills a
 * node-local shard cache). */
ZP_API int zp_mpi_node(const zp_mpi *m);
ZP_API int zp_mpi_num_nodes(const zp_mpi *m);
ZP_API int zp_mpi_local_rank(const zp_mpi *m);
ZP_API int zp_mpi_local_size(const zp_mpi *m);
/* This rank's host name (MPI_Get_processor_name; borrowed). */
ZP_API const char *zp_mpi_hostname(const zp_mpi *m);
/* The duplicated communicator (borrowed; freed by zp_mpi_destroy());
 * MPI_COMM_NULL on a handle of zp_mpi_create_local(). */
ZP_API MPI_Comm zp_mpi_comm(const zp_mpi *m);

/* ------------------------------------------------------------ threads under a launcher */

/* The default thread count of this rank's pipeline under a launcher: the
 * cores its CPU binding allows (sched_getaffinity) divided by the ranks of
 * its node whose bindings overlap it (itself included), at least 1. Found
 * at zp_mpi_create() (one MPI_Allgather of the binding masks over the
 * node's ranks), so local and free here. *cores (may be NULL): the cores
 * of this rank's binding; *sharing (may be NULL): the ranks sharing them;
 * *node_cores (may be NULL): the distinct cores of all the node's ranks'
 * bindings. An explicit setting (zp_pipeline_config.threads,
 * OMP_NUM_THREADS) should still win: the caller decides (`zephon run`
 * uses this when neither is given; docs/mpi.md). */
ZP_API int zp_mpi_suggested_threads(const zp_mpi *m, int *cores, int *sharing, int *node_cores);

/* ------------------------------------------------------------ stall watchdog */

/* A rank's stall, as its pipeline's watchdog (zephon/watchdog.h) saw it:
 * the task that had run longest on its item when the consumer had waited
 * `waited` seconds. zp_mpi_next() sets a hook on the pipeline (when it has
 * none; the hook refers to m: a pipeline used after zp_mpi_destroy(m) must
 * have it removed, zp_pipeline_on_watchdog(p, NULL, NULL)) that sends such a notice to the root with
 * MPI_Isend each time the watchdog fires (at most ZP_MPI_STALL_NOTICES per
 * rank); the root receives them with MPI_Iprobe while it waits in
 * zp_mpi_next's agreement - no collective is added to a step - and logs
 * them (zp_mpi_config.log). Notices still in flight are received at the
 * next report (whose rank records count them) and at zp_mpi_destroy(). */
#define ZP_MPI_STALL_NOTICES 64
typedef struct zp_mpi_stall {
    int32_t rank;
    uint32_t notices;         /* notices received from this rank */
    uint32_t live;            /* of which received while the run went on (not
                                 at a report's or the destroy's drain) */
    int32_t state;            /* zp_task_state of the task; -1: no busy task */
    double waited;            /* the consumer's wait, seconds (the last notice) */
    double longest_wait;      /* the longest wait of any notice */
    double learned;           /* the root's seconds since zp_mpi_create() when the
                                 first notice of this rank arrived */
    double seconds;           /* the task on its item */
    int64_t shard;            /* -1: none */
    int64_t record;           /* -1: none */
    int32_t remote;
    uint32_t busy;            /* busy tasks on that rank */
    char op[ZP_OBS_NAME];     /* "fetch", a map's name, ... ("" when none) */
    char shard_name[200];     /* cut to 199 bytes */
} zp_mpi_stall;

/* Root: the ranks that sent stall notices so far, one entry each (the last
 * notice's picture), in the order they were first learned. @return the
 * count; *out borrowed until the next call on m. Other ranks: 0. */
ZP_API size_t zp_mpi_stalls(const zp_mpi *m, const zp_mpi_stall **out);
/* One line for s: "rank R: no batch for W s: OP: loading shard 'NAME' (#S,
 * remote: downloading) for X s". Into buf (cap bytes); @return buf. */
ZP_API const char *zp_mpi_stall_text(const zp_mpi_stall *s, char *buf, size_t cap);

/* Agree on an outcome. Collective over comm. local: this rank's status,
 * msg: its message (may be NULL; copied). @return ZP_OK on every rank when
 * every rank passed ZP_OK; otherwise, on every rank, the status of the
 * lowest failing rank, with that rank's message ("rank R: msg") on the
 * handle. Use it after rank-local work that may fail, before the next
 * collective, so that no rank is left waiting. */
ZP_API zp_status zp_mpi_agree_status(zp_mpi *m, zp_status local, const char *msg);

/* ------------------------------------------------------------ dataset and plan */

/* Build the same dataset on every rank, reading its metadata once.
 * Collective over comm. On rank 0 the specs (paths, globs, manifests: see
 * zp_dataset_add) are added and indexed and the result is serialised as a
 * manifest; the manifest bytes are broadcast and every rank (rank 0 too)
 * builds its dataset from them, so no other rank lists folders or counts
 * records. The specs of other ranks are not read (agree on them with
 * zp_mpi_agree's extra settings). The manifest holds absolute paths (or
 * URLs) and the shard names rank 0 was given (zp_dataset_manifest_json with
 * no folder): every rank's shard names are rank 0's, and no rank writes a
 * file. Content hashes from rank 0's manifests travel with it: every rank
 * checks them as it loads each shard. cfg may be NULL (defaults; it should
 * be equal on every rank). On any rank's failure every rank gets the error
 * with the failing rank named. Where the data came from (rank 0's specs: a
 * manifest or folder as an absolute path, a glob as given, or "N
 * paths/globs: first ... last") is kept for the report's settings line.
 * OUT: *out, caller owns; release with zp_dataset_destroy(). */
ZP_API zp_status zp_mpi_dataset_create(zp_mpi *m, const char *const *specs, size_t n_specs,
                                const zp_dataset_config *cfg, zp_dataset **out);

/* zp_mpi_dataset_create() where each spec is one part of a mixture:
 * part_shards[i] (n_specs entries, caller's array) receives the number of
 * shards specs[i] added on rank 0, on every rank (broadcast with the
 * manifest). Pass them as the worksource's zp_mix_part.shards. Collective
 * over comm. */
ZP_API zp_status zp_mpi_dataset_create_parts(zp_mpi *m, const char *const *specs, size_t n_specs,
                                             const zp_dataset_config *cfg, size_t *part_shards,
                                             zp_dataset **out);

/* How the ranks open HDF5 shards (docs/hdf5.md). */
typedef enum zp_mpi_h5_driver {
    ZP_MPI_H5_AUTO = 0,  /* MPI-IO for files on a shared file system (Lustre,
                            GPFS, BeeGFS, NFS, CephFS, ...), serial on a
                            node-local one (ext4, xfs, tmpfs, ...) */
    ZP_MPI_H5_MPIIO = 1, /* always MPI-IO */
    ZP_MPI_H5_SERIAL = 2 /* always the serial (sec2) driver */
} zp_mpi_h5_driver;

/* Set cfg->h5_fapl so that the dataset's HDF5 shards are opened as `mode`
 * says: with MPI-IO (parallel HDF5) each rank opens a shard on
 * MPI_COMM_SELF and reads only its own hyperslabs through the MPI-IO
 * layer, when its pipeline needs them: no collective call, so a rank never
 * waits for another at a shard's open. Reads run on the pipeline's threads:
 * MPI-IO needs MPI initialised with MPI_THREAD_MULTIPLE (otherwise the open
 * fails with a message saying so). Local; call before zp_mpi_dataset_create. */
ZP_API zp_status zp_mpi_dataset_config_hdf5(zp_mpi *m, zp_dataset_config *cfg, zp_mpi_h5_driver mode);
/* The driver `mode` picks for path: "mpio" or "sec2" (for messages and
 * reports). */
ZP_API const char *zp_mpi_h5_driver_for(zp_mpi_h5_driver mode, const char *path);

/* Set cfg->rank and cfg->world_size from the communicator. Local. */
ZP_API void zp_mpi_worksource_config(const zp_mpi *m, zp_worksource_config *cfg);

/* zp_worksource_create() with rank and world size taken from the
 * communicator (the other fields from cfg, which may be NULL for
 * defaults). Collective over comm: fails on every rank when it fails on
 * one. ds is borrowed as in zp_worksource_create(). OUT: *out, caller owns;
 * release with zp_worksource_destroy(). */
ZP_API zp_status zp_mpi_worksource_create(zp_mpi *m, zp_dataset *ds, const zp_worksource_config *cfg,
                                   zp_worksource **out);

/* Startup agreement. Collective over comm. Every rank compares, with one
 * MPI_Allreduce of the minimum and maximum of each value:
 *   - the dataset (zp_dataset_fingerprint: shard names, formats, sizes and
 *     counts), when ds is not NULL;
 *   - the worksource settings that decide the plan (seed, world_size,
 *     shuffle, shuffle_block_shards, remainder), when ws is not NULL; its
 *     rank and world size must also match the communicator;
 *   - the pipeline settings that decide the batches (epochs, microbatch_size,
 *     seq_len, pack, on_bad_record), when pc is not NULL; settings that only
 *     change speed (threads, parallelism, buffers, fetch_delay_us) may
 *     differ between ranks;
 *   - extra: the caller's own settings as text (tokenizer, field, map
 *     operators, start epoch ...), when not NULL: space-separated
 *     key=value tokens. Compared whole; in the report's settings line a
 *     "data=" token is replaced by the data's summary (never a list of
 *     shards) and a token longer than 120 bytes is cut.
 * @return ZP_OK when every rank holds the same values; ZP_ERR_MISMATCH on
 * every rank otherwise, with a message naming each differing value and the
 * ranks that hold it (e.g. "seed differs: rank 0-2: 1, rank 3: 7"). The
 * values agreed on are kept for the report's header. */
ZP_API zp_status zp_mpi_agree(zp_mpi *m, const zp_dataset *ds, const zp_worksource_config *ws,
                       const zp_pipeline_config *pc, const char *extra);

/* Save the job's state (zephon/state.h): every rank saves its pipeline's
 * state, rank 0 gathers them, merges them after checking that they agree
 * (zp_state_merge: the same settings, world size and next batch) and
 * writes the job state to path atomically (a file beside it, then renamed);
 * the other ranks write nothing. Collective over comm: call it on every
 * rank at the same step. The status (and, on failure, the message naming
 * the rank and the cause) is the same on every rank. */
ZP_API zp_status zp_mpi_state_save(zp_mpi *m, zp_pipeline *p, const char *path);

/* ------------------------------------------------------------ lock-step delivery */

/* zp_pipeline_next() on every rank, then one all-reduce (MAX of seven
 * 64-bit integers: the ranks' states, votes and balance windows;
 * MPI_Iallreduce, waited for: the root receives stall notices meanwhile,
 * zp_mpi_stalls) so that all ranks take the same decision. Sets its
 * stall-watchdog hook on p when p has none (zp_mpi_stall). Collective over comm;
 * call it once per training step on every rank.
 * @return ZP_OK when every rank has a batch (*out borrowed as with
 *         zp_pipeline_next);
 *         ZP_END on every rank when any rank voted to stop
 *         (zp_mpi_set_vote(ZP_MPI_VOTE_STOP): zp_mpi_stop_reason() then
 *         says why; the batches held are not delivered);
 *         ZP_END on every rank as soon as any rank's stream ended (token
 *         packing gives ranks different batch counts: all ranks stop at the
 *         shortest; a batch a rank held is not delivered and is counted in
 *         zp_mpi_batches_dropped());
 *         an error on every rank when any rank failed (a bad record, a
 *         corrupt shard, a count or hash mismatch: the failing rank
 *         contributes its error to this step's agreement, so no rank keeps
 *         waiting): the status of the lowest failing rank R and, on every
 *         rank (R too), the message "rank R: <R's message>" (a rank that
 *         failed as well with another message adds " (rank N failed too:
 *         ...)"). Once it returned ZP_END or an error, later calls return
 *         the same without communicating. */
ZP_API zp_status zp_mpi_next(zp_mpi *m, zp_pipeline *p, const zp_batch **out);

/* Cross-rank attention-cost balance (docs/mpi.md, "Attention-cost balance
 * across ranks"). A global step is `window` consecutive zp_mpi_next calls
 * (K microbatches per rank: gradient accumulation). At a step's first call
 * every rank takes K batches from its pipeline; the ranks gather every
 * row's attention cost (zp_batch_row_costs), each computes the same
 * assignment (zp_balance_rows over the W x K microbatches of the step, in
 * rank-major order; group g goes to rank g / K as its microbatch g % K;
 * when that is not better than the rows as they are, at the rank level
 * and at the microbatch level, the rows stay where they are) and the rows
 * are exchanged with MPI_Alltoallv (tokens, loss_mask, segment_ids and the
 * document-masking outputs; cu_seqlens and max_seqlen are computed again
 * for each delivered batch). A sample moves with the row of its first
 * token. Within a delivered batch the rows with a real token come first,
 * then padding-only rows, each in the order source rank, source batch,
 * source row; samples in the same order. That call and the next K - 1
 * deliver the step's batches from buffers of the handle (valid until the
 * next zp_mpi_next); those K - 1 calls do not communicate (votes set then
 * are carried by the next step's first call). Every row is delivered
 * exactly once; a rank whose stream has fewer than K batches left ends the
 * stream on every rank (ZP_END; the batches held are counted in
 * zp_mpi_batches_dropped()). Token modes only: record mode and batches
 * with fixed-shape arrays are refused on every rank at the first step.
 * window: 1 .. ZP_BALANCE_WINDOW_MAX; 0 turns it off. Local, but the value
 * must be equal on every rank: the first zp_mpi_next compares it (a
 * mismatch fails on every rank with ZP_ERR_MISMATCH naming both values).
 * Call it before the first zp_mpi_next (ZP_ERR_STATE after).
 * zp_mpi_state_save() is refused inside a step (ZP_ERR_STATE on every
 * rank): save after a multiple of `window` zp_mpi_next calls. Memory: K
 * batches held from the pipeline while they are copied, and K batches'
 * arrays owned by the handle. */
ZP_API zp_status zp_mpi_balance(zp_mpi *m, size_t window);

/* What cross-rank balance did (every rank computes the same figures).
 * Sums over steps as zp_pipeline_counts does: cost is the sum of every
 * row's cost; *_peak_* the costliest rank's sum times the ranks (rank
 * level) or the costliest microbatch's times W x K (microbatch level), so
 * peak / cost is the mean max/mean ratio (1 = perfectly even). */
typedef struct zp_mpi_balance_stats {
    uint64_t window;             /* K (0: off) */
    uint64_t steps;              /* steps balanced */
    uint64_t rows_moved;         /* rows delivered by another rank than the one that made them */
    uint64_t attn_cost;
    uint64_t rank_peak_before, rank_peak_after;
    uint64_t mb_peak_before, mb_peak_after;
    /* the ratios of those sums (0 without steps) */
    double rank_imbalance_before, rank_imbalance_after;
    double mb_imbalance_before, mb_imbalance_after;
    /* the last step's max/mean ratios (0 before the first step) */
    double last_rank_before, last_rank_after, last_mb_before, last_mb_after;
    /* zp_mpi_next calls made in the current step (0: at a step boundary) */
    uint64_t window_pos;
} zp_mpi_balance_stats;

/* Fill *out (zeroes when balance is off). Local. */
ZP_API void zp_mpi_balance_stats_get(const zp_mpi *m, zp_mpi_balance_stats *out);

/* Values the ranks agree on at every zp_mpi_next, in the same collective
 * (no extra communication): each rank sets its own (local; kept until set
 * again), and after each zp_mpi_next every rank reads the maximum over
 * ranks at that step (zp_mpi_vote). Once zp_mpi_next returned ZP_END or
 * an error, the votes no longer change. */
typedef enum zp_mpi_vote_kind {
    /* > 0: stop at the next step: zp_mpi_next returns ZP_END on every
     * rank (an error on any rank still wins). The value is the caller's
     * reason (e.g. a signal number); the largest wins. */
    ZP_MPI_VOTE_STOP = 0,
    /* the caller's own: no effect on delivery (e.g. 1 when a rank's report
     * window failed, so that every rank stops starting windows together) */
    ZP_MPI_VOTE_USER = 1,
    ZP_MPI_VOTE_COUNT
} zp_mpi_vote_kind;

/* Set this rank's vote (negative values count as 0). Local. ZP_ERR_INVALID
 * for a bad kind. */
ZP_API zp_status zp_mpi_set_vote(zp_mpi *m, zp_mpi_vote_kind kind, int64_t value);
/* The maximum of the ranks' votes at the last zp_mpi_next (0 before the
 * first, or for a bad kind). Local. */
ZP_API int64_t zp_mpi_vote(const zp_mpi *m, zp_mpi_vote_kind kind);
/* The agreed stop reason when zp_mpi_next ended the stream on a stop vote
 * (the largest ZP_MPI_VOTE_STOP), else 0; *rank (may be NULL): the lowest
 * rank that voted that reason, -1 when none. Local. */
ZP_API int64_t zp_mpi_stop_reason(const zp_mpi *m, int *rank);

/* Batches this rank held but did not deliver because another rank ended
 * first (see zp_mpi_next). */
ZP_API uint64_t zp_mpi_batches_dropped(const zp_mpi *m);
/* The samples listed by the batches that this rank's pipeline handed out
 * and zp_mpi_next did not deliver (another rank ended first, a stop vote,
 * another rank's error): *out borrowed, valid until the next zp_mpi_next or
 * zp_mpi_destroy. The pipeline counts them as delivered; the coverage
 * certificate (zp_mpi_report_coverage) takes them out. */
ZP_API size_t zp_mpi_undelivered_samples(const zp_mpi *m, const zp_sample **out);
/* Seconds this rank spent in zp_mpi_next's agreement (waiting for the
 * other ranks). */
ZP_API double zp_mpi_sync_seconds(const zp_mpi *m);

/* ------------------------------------------------------------ reports */

/* One rank's contribution to a report: its snapshots (metrics.parts: the
 * realized mixture proportions, summed over ranks in the report). Fill it with
 * zp_mpi_input_from_pipeline(), or by hand (tests, a custom loader). */
typedef struct zp_mpi_input {
    zp_metrics_snapshot metrics;
    zp_fetch_timing fetch;
    zp_prefetch_timing prefetch;
    zp_pipeline_counts counts;
} zp_mpi_input;

/* Take p's snapshots (observability must be on: else ZP_ERR_STATE). Local;
 * the consumer's thread. */
ZP_API zp_status zp_mpi_input_from_pipeline(zp_pipeline *p, zp_mpi_input *in);

typedef enum zp_mpi_report_kind {
    /* A final report: the straggler criterion is applied to the totals of
     * the whole run. */
    ZP_MPI_REPORT_FINAL = 0,
    /* A periodic report from inside a training loop: the criterion is
     * applied to this window (the change since the previous report), and a
     * rank is named only when flagged in straggler_windows consecutive
     * windows. */
    ZP_MPI_REPORT_WINDOW = 1
} zp_mpi_report_kind;

/* One rank's row in a report: the fixed-size record gathered from every
 * rank. Integer counters are exact; times are in seconds. */
typedef struct zp_mpi_rank_stats {
    int32_t rank;             /* in comm; -1 in totals */
    int32_t node;             /* node index; -1 in cluster totals */
    int32_t local_rank;       /* on its node; in totals: the rank count */
    uint32_t threads;         /* pipeline threads (sum in totals) */
    uint32_t valid;           /* 0: the rank gave no snapshot (in = NULL) */
    uint32_t report_index;    /* reports made by this handle before this one */
    /* counters */
    uint64_t batches, samples, tokens, records;
    uint64_t bytes_read;      /* bytes read from storage (compressed) */
    uint64_t bytes_fetched;   /* record bytes fetched (uncompressed) */
    uint64_t shards_opened, downloads, retries;
    uint64_t cache_hits, cache_misses;
    uint64_t padded, skipped, batches_dropped;
    /* times, seconds */
    double wall;              /* since the first next() */
    double first_batch;       /* time to the first batch */
    double stall;             /* consumer time inside next() after the first batch */
    double fetch;             /* time in fetch tasks (summed over them) */
    double open, read, decompress; /* shard loads: total, of which reading, decompressing */
    double fetch_wait;        /* fetch waiting on a load in flight elsewhere */
    double transfer;          /* prefetch downloads (sum of latencies) */
    double sync;              /* waiting for the other ranks in zp_mpi_next */
    double slowest_shard;     /* slowest shard load */
    double slowest_record;    /* slowest record read */
    int64_t slowest_shard_index; /* -1 if none */
    /* derived */
    double stall_fraction;    /* stall / (wall - first_batch) */
    double step;              /* wall per batch (0 without batches) */
    double fetch_per_batch;   /* fetch / batches (0 without batches) */
    double samples_per_second;
    double bytes_per_second;  /* bytes_fetched / wall */
    double cache_hit_rate;    /* hits / (hits + misses); 0 without lookups */
    /* this report's window: the change since this rank's previous report */
    uint64_t win_batches;
    double win_seconds;
    double win_fetch_per_batch;
    double win_stall_fraction;
    /* shards read on demand (HDF5, Megatron .bin/.idx; zp_fetch_timing) */
    uint64_t ondemand_reads, ondemand_bytes;
    double ondemand;          /* time in those reads */
    double ondemand_io;       /* of which in the format's read calls (HDF5, mmap copies) */
    double hdf5_lock_wait;    /* of which waiting for the process's HDF5 lock */
    /* token packing (zp_metrics_snapshot): padding tokens delivered, documents
     * cut over rows or truncated, and their fractions (padding / row tokens,
     * cut / documents; totals over the ranks' sums) */
    uint64_t pad_tokens, cut_documents;
    double padding_fraction, cut_fraction;
    /* within-rank attention-cost balance (zp_pipeline_balance; zp_pipeline_counts):
     * windows balanced, the sum of their rows' costs and of their costliest
     * microbatch's cost times the window's microbatches, before and after;
     * the ratios peak / cost (max/mean; totals: of the ranks' sums) */
    uint64_t balance_windows, attn_cost, attn_peak_before, attn_peak_after;
    double attn_imbalance_before, attn_imbalance_after;
    /* threads under a launcher (zp_mpi_suggested_threads): the cores of the
     * rank's binding, the ranks of its node sharing them (itself included),
     * the distinct cores of its node's bindings (in node totals: the node's;
     * 0 in cluster totals) */
    uint32_t cores, sharing, node_cores;
    /* the stall watchdog: notices this rank sent to the root */
    uint32_t stall_notices;
    /* autotune (zp_metrics_snapshot.tuned; docs/pipeline.md, "Autotune"):
     * the values in use of prefetch_batches and of the fetch and tokenize
     * parallelism (tokenize 0: none), and which are automatic (bit 0
     * prefetch_batches, bit 1 fetch, bit 2 tokenize); 0 in totals */
    uint32_t tuned_prefetch_batches, tuned_fetch, tuned_tokenize, tuned_auto;
    /* shards from other nodes (zp_prefetch_timing): received, their bytes
     * and seconds; requests failed (downloaded from storage then); shards
     * served to other nodes and their bytes */
    uint64_t peer_shards, peer_bytes, peer_fallbacks, peer_served, peer_served_bytes;
    double peer_seconds;
} zp_mpi_rank_stats;

/* Metrics summarised over ranks (zp_cluster_report_stat). */
typedef enum zp_mpi_metric {
    ZP_MPI_M_SAMPLES = 0,
    ZP_MPI_M_BATCHES,
    ZP_MPI_M_TOKENS,
    ZP_MPI_M_BYTES_READ,
    ZP_MPI_M_BYTES_FETCHED,
    ZP_MPI_M_SHARDS_OPENED,
    ZP_MPI_M_RETRIES,
    ZP_MPI_M_WALL,
    ZP_MPI_M_FIRST_BATCH,
    ZP_MPI_M_FETCH,
    ZP_MPI_M_OPEN,
    ZP_MPI_M_READ,
    ZP_MPI_M_DECOMPRESS,
    ZP_MPI_M_TRANSFER,
    ZP_MPI_M_STALL,
    ZP_MPI_M_STALL_FRACTION,
    ZP_MPI_M_SYNC,
    ZP_MPI_M_STEP,
    ZP_MPI_M_FETCH_PER_BATCH,
    ZP_MPI_M_SAMPLES_PER_SECOND,
    ZP_MPI_M_BYTES_PER_SECOND,
    ZP_MPI_M_SLOWEST_SHARD,
    ZP_MPI_M_CACHE_HIT_RATE,
    ZP_MPI_M_PADDING_FRACTION, /* token packing: padding / row tokens */
    ZP_MPI_M_CUT_FRACTION,     /* token packing: documents cut / documents */
    ZP_MPI_M_COUNT
} zp_mpi_metric;

/* A static name for a metric ("samples", "fetch_per_batch_s", ...), NULL
 * when out of range. */
ZP_API const char *zp_mpi_metric_name(zp_mpi_metric m);

/* A metric over the valid ranks. Population standard deviation. */
typedef struct zp_mpi_stat {
    double min, max, mean, stddev, sum;
    int32_t min_rank, max_rank; /* lowest rank holding the min / max; -1 when no rank */
    uint32_t ranks;             /* valid ranks counted */
    double imbalance;           /* max / mean (0 when the mean is 0) */
} zp_mpi_stat;

/* Why a rank is named as a straggler (bits of zp_mpi_straggler.reasons). */
#define ZP_MPI_SLOW_RATIO 1u /* fetch per batch >= (1 + ratio) x median */
#define ZP_MPI_SLOW_Z 2u     /* robust z-score above the threshold */
#define ZP_MPI_SLOW_STALL 4u /* consumer wait >= min stall (always set when named) */

typedef struct zp_mpi_straggler {
    int32_t rank;
    uint32_t reasons;          /* ZP_MPI_SLOW_* bits */
    double fetch_per_batch;    /* seconds, the value judged (run or window) */
    double median;             /* the median over ranks */
    double ratio;              /* fetch_per_batch / median (inf when the median is 0) */
    double z;                  /* robust z-score 0.6745 (x - median) / MAD; when MAD is 0,
                                  (x - median) / (1.2533 x mean absolute deviation) */
    double stall_fraction;
    uint32_t windows;          /* consecutive flagged windows ending at this report */
    char reason[256];          /* the same in words */
} zp_mpi_straggler;

/* Reduce every rank's snapshots to the root. Collective over comm. in may
 * be NULL on a rank that has nothing to give (it is listed as invalid).
 * Scalars travel as one fixed-size zp_mpi_rank_stats per rank
 * (MPI_Gather); the histograms are merged with MPI_Reduce (MPI_SUM of the
 * bucket counts, MIN/MAX of the extremes), so the bytes gathered do not grow
 * with the histograms.
 * OUT: *out on the root: the report, caller owns; release with
 * zp_cluster_report_destroy(). NULL on the other ranks.
 * Not while a non-blocking report is in flight (ZP_ERR_STATE). */
ZP_API zp_status zp_mpi_report(zp_mpi *m, const zp_mpi_input *in, zp_mpi_report_kind kind,
                        zp_cluster_report **out);

/* The same, non-blocking (MPI_Igather + MPI_Ireduce): start it at the same
 * step on every rank (collective over comm), then call test() (local, cheap;
 * it also progresses the transfer: call it once per step) until *done, or
 * wait(). in is copied: the caller may reuse it at once. Only one report
 * may be in flight per handle. The root's analysis runs inside the test()
 * or wait() that completes the transfer. OUT of test/wait: *out as with
 * zp_mpi_report(), NULL on other ranks and while not done. */
ZP_API zp_status zp_mpi_report_start(zp_mpi *m, const zp_mpi_input *in, zp_mpi_report_kind kind);
ZP_API zp_status zp_mpi_report_test(zp_mpi *m, int *done, zp_cluster_report **out);
ZP_API zp_status zp_mpi_report_wait(zp_mpi *m, zp_cluster_report **out);
/* 1 while a non-blocking report is in flight. */
ZP_API int zp_mpi_report_pending(const zp_mpi *m);

ZP_API void zp_cluster_report_destroy(zp_cluster_report *r);

/* Reading a report (root). Pointers are borrowed, valid until
 * zp_cluster_report_destroy(). */
ZP_API zp_mpi_report_kind zp_cluster_report_get_kind(const zp_cluster_report *r);
ZP_API int zp_cluster_report_num_ranks(const zp_cluster_report *r);
/* Row of rank i (0 <= i < num_ranks), NULL when out of range. */
ZP_API const zp_mpi_rank_stats *zp_cluster_report_rank(const zp_cluster_report *r, int i);
/* Cluster totals: counters and times summed over valid ranks (counters
 * exactly); derived fields are cluster rates. */
ZP_API const zp_mpi_rank_stats *zp_cluster_report_totals(const zp_cluster_report *r);
ZP_API int zp_cluster_report_num_nodes(const zp_cluster_report *r);
/* Totals of node j; NULL when out of range. */
ZP_API const zp_mpi_rank_stats *zp_cluster_report_node(const zp_cluster_report *r, int j);
/* Host name of rank i / of node j (borrowed). */
ZP_API const char *zp_cluster_report_rank_host(const zp_cluster_report *r, int i);
ZP_API const char *zp_cluster_report_node_host(const zp_cluster_report *r, int j);
/* A metric summarised over valid ranks. ZP_ERR_INVALID for a bad metric. */
ZP_API zp_status zp_cluster_report_stat(const zp_cluster_report *r, zp_mpi_metric metric, zp_mpi_stat *out);
/* Merged histograms over ranks: 0 shard load times, 1 record read times,
 * 2 prefetch download latencies. NULL when which is out of range. */
ZP_API const zp_hist *zp_cluster_report_hist(const zp_cluster_report *r, int which);
/* Accelerator utilisation in MLPerf Storage's terms: the training loop's
 * compute time over the wall time of its steps, from the first batch on
 * (compute: the time outside zp_pipeline_next() and the lock-step
 * agreement, i.e. wall - time to the first batch - stall - sync). rank i:
 * that rank's; rank -1: the job's, the mean over the ranks that delivered
 * a batch (a job "passes" at 0.90 or more; docs/report.md). NAN when there
 * is none (no batch, no snapshot, r NULL or i out of range). */
ZP_API double zp_cluster_report_au(const zp_cluster_report *r, int rank);
/* Stragglers, slowest first. @return their count; *out borrowed. */
ZP_API size_t zp_cluster_report_stragglers(const zp_cluster_report *r, const zp_mpi_straggler **out);
/* Realized mixture proportions over the ranks: per mixture part (from
 * each rank's zp_metrics_snapshot.parts, so zp_mpi_input_from_pipeline()
 * carries them) its samples and tokens summed over the valid ranks, their
 * fractions of the sums over every part, its weight as used and its name
 * (the root's; "part<k>" when the root gave no input). The counters travel
 * in the report's reductions at a fixed size (ZP_OBS_MAX_PARTS), the same
 * on every rank. @return the parts listed (at most ZP_OBS_MAX_PARTS; 0
 * when no rank gave a snapshot); *total (may be NULL): the mixture's part
 * count (1 without a mixture); *out (may be NULL) borrowed. */
ZP_API size_t zp_cluster_report_parts(const zp_cluster_report *r, const zp_part_metrics **out,
                                      size_t *total);
/* Cross-rank attention-cost balance (zp_mpi_balance) as the root's handle
 * had it when the report was made. @return 1 and *out (may be NULL) filled
 * when balance ran (at least one step), else 0 (*out zeroed). */
ZP_API int zp_cluster_report_balance(const zp_cluster_report *r, zp_mpi_balance_stats *out);
/* 1 when the report has an attention-cost balance section: cross-rank
 * balance ran, or some rank's pipeline balanced windows. */
ZP_API int zp_cluster_report_has_balance(const zp_cluster_report *r);

/* Aggregate throughput, samples/s: achieved (total samples / slowest
 * rank's wall) and as bounded by the slowest rank (its samples/s x ranks:
 * what lock-step training gets). */
ZP_API double zp_cluster_report_throughput(const zp_cluster_report *r, double *bounded);
/* Seconds the root spent on this report: from the start of the collective
 * to the end of the analysis, and of which the analysis alone; the bytes
 * each rank sent in the gather. */
ZP_API double zp_cluster_report_seconds(const zp_cluster_report *r);
ZP_API double zp_cluster_report_analysis_seconds(const zp_cluster_report *r);
ZP_API size_t zp_cluster_report_gather_bytes(const zp_cluster_report *r);
/* Windows kept for the heatmap and rank i's fetch time per batch in window
 * w (0 = oldest kept; NaN when the rank delivered no batch in it). */
ZP_API int zp_cluster_report_num_windows(const zp_cluster_report *r);
ZP_API double zp_cluster_report_window_fetch(const zp_cluster_report *r, int w, int i);

typedef enum zp_mpi_format {
    ZP_MPI_TEXT = 0, /* aligned plain text */
    ZP_MPI_JSON = 1, /* one JSON object (docs/report.md lists its fields) */
    ZP_MPI_CSV = 2,  /* one row per rank, with a header row */
    ZP_MPI_HTML = 3  /* one self-contained page with inline SVG charts */
} zp_mpi_format;

/* Render the report. OUT: *out NUL-terminated, malloc'd: caller frees with
 * free(); *len (may be NULL) its length. */
ZP_API zp_status zp_cluster_report_render(const zp_cluster_report *r, zp_mpi_format fmt, char **out, size_t *len);

/* Write report.txt, report.json, report.csv, report.html and windows.csv
 * into dir (created if missing, with its parents). ZP_ERR_IO names the file
 * that failed; *errbuf (may be NULL) of errlen bytes gets the message. */
ZP_API zp_status zp_cluster_report_write(const zp_cluster_report *r, const char *dir, char *errbuf, size_t errlen);

/* Mark r as the report of a run that was cut short after `steps` steps
 * (training steps: the batches every rank delivered). Local (the root, on a
 * report it received). signal: the name of the signal that stopped the run
 * ("SIGINT", "SIGTERM"; at most 31 bytes), or NULL when something else
 * did; reason: the cause in words ("an output could not be written"), or
 * NULL for "stopped by <signal>". Every format says so: the text starts
 * with a "PARTIAL REPORT: ..." line, the JSON carries "partial": true,
 * "signal" (only with a signal), "partial_reason" and "partial_steps" (a
 * complete report: "partial": false), the CSV files start with a
 * "# PARTIAL REPORT: ..." comment line, the HTML page shows a banner above
 * everything else. Calling it again replaces the previous marking.
 * ZP_ERR_INVALID when r is NULL or signal is longer than 31 bytes. */
ZP_API zp_status zp_cluster_report_set_partial(zp_cluster_report *r, const char *signal,
                                               const char *reason, uint64_t steps);
/* 1 when r was marked partial; *signal, *reason (borrowed, may be NULL
 * pointers to not ask) and *steps (may be NULL) as set. 0 otherwise. */
ZP_API int zp_cluster_report_partial(const zp_cluster_report *r, const char **signal,
                                     const char **reason, uint64_t *steps);

/* The stalls the root learned of up to this report (zp_mpi_stalls): each
 * stuck rank with its operator and shard. @return the count (at most 64
 * listed; *total (may be NULL): the ranks that stalled); *out borrowed. */
ZP_API size_t zp_cluster_report_stalls(const zp_cluster_report *r, const zp_mpi_stall **out,
                                       size_t *total);
/* Nodes whose ranks run more pipeline threads than the cores their
 * bindings allow: "" when none, else one line naming them ("node 0 (host):
 * 8 threads of 4 ranks on 2 cores; ..."). Borrowed. */
ZP_API const char *zp_cluster_report_oversubscribed(const zp_cluster_report *r);

/* The one-line verdict ("verdict: ..."), borrowed. */
ZP_API const char *zp_cluster_report_verdict(const zp_cluster_report *r);


/* ------------------------------------------------------------ coverage certificate
 * (docs/report.md, "Coverage certificate"): per epoch, the digest of what
 * every rank delivered against the digest of the epoch's stream. */

/* The most epochs a certificate lists: the last ones delivered. */
#define ZP_COVERAGE_MAX_EPOCHS 64

/* One epoch of a job's certificate. */
typedef struct zp_coverage_cert {
    uint32_t epoch;
    int judged;            /* 0: no rank finished the epoch (a run stopped
                              before its end): listed, not judged */
    int ok;                /* 1: every sample of the epoch once (delivered ==
                              expected; padding repeats apart) */
    int certified;         /* 0: a rank could not give its digests (its
                              message went to zp_mpi_errmsg on that rank):
                              nothing is claimed */
    zp_coverage delivered; /* all ranks' (restored digests included) */
    zp_coverage expected;  /* the epoch's stream under the remainder policy
                              (zp_pipeline_stream_coverage) */
    uint64_t padded;       /* padded samples delivered, all ranks */
    uint64_t missing;      /* expected.count - delivered.count, when more */
    uint64_t repeated;     /* delivered.count - expected.count, when more */
    int ranks;             /* ranks in the job */
    int n_differ;          /* an epoch that failed: ranks whose digest
                              differs from their own plan's */
    char differ[128];      /*   as a list, "1,3-4" */
    int n_unfinished;      /* ranks whose stream is not past the epoch */
    char unfinished[128];
    int n_unchecked;       /* an epoch that failed: ranks without a plan
                              digest for it (resumed inside an
                              attention-balance window) */
} zp_coverage_cert;

/* Make the job's certificate and give it to report r (rank 0's; the other
 * ranks pass NULL or their own report, left as it is). For every epoch
 * that some rank delivered (the last ZP_COVERAGE_MAX_EPOCHS) and some rank
 * finished, the ranks' delivered digests are summed and compared with the
 * epoch's stream digest, each rank computing one slice of it
 * (zp_pipeline_stream_coverage); only for an epoch that fails does each
 * rank also compute its own plan's digest (zp_pipeline_coverage), so that
 * the ranks that differ are named. Four MPI_Allreduce of a few words per
 * epoch and one MPI_Gather to rank 0. Call it after the last batch (a
 * report's time, never per step). p may be NULL on a rank whose pipeline
 * failed: the epochs are then not certified. Collective over comm.
 * ZP_ERR_MPI on an MPI failure (every rank). */
ZP_API zp_status zp_mpi_report_coverage(zp_mpi *m, zp_pipeline *p, zp_cluster_report *r);
/* The certificate's epochs (0 when none was made): *out borrowed, valid
 * until r is destroyed. */
ZP_API size_t zp_cluster_report_coverage(const zp_cluster_report *r, const zp_coverage_cert **out);
/* One epoch in words, into buf (cap bytes, NUL-terminated, cut to fit):
 * "epoch 0: every sample once (1200 samples, 4 ranks, 3 padded)", or
 * "epoch 0: NOT every sample once: 1 missing (1199 of 1200 delivered);
 * rank 2 differs from its plan", with "; ranks 1,3 are not past the
 * epoch" when some stopped before its end. */
ZP_API void zp_coverage_cert_line(const zp_coverage_cert *c, char *buf, size_t cap);

/* ------------------------------------------------------------ preprocess
 * `zephon preprocess` under mpirun (zephon/preprocess.h, docs/preprocess.md).
 * ds: the input dataset, built by every rank from the same specs (it need
 * not be indexed); the ranks check that they see the same shards. cfg as
 * for zp_preprocess_create() (its shard_stride/offset are set here; its
 * callbacks run on each rank). total (may be NULL): the stats summed over
 * the ranks (seconds: the slowest rank's), valid on every rank. */

/* One output shard per input shard: shard i is written by rank i % size;
 * once every rank succeeded, rank 0 writes OUT/manifest.json listing every
 * shard in input order. Collective over comm: on any rank's failure every
 * rank returns its status, with "rank R: <message>" on the handle, and no
 * manifest is written. */
ZP_API zp_status zp_mpi_preprocess(zp_mpi *m, zp_dataset *ds, const zp_preprocess_config *cfg,
                                   zp_preprocess_stats *total);

/* Every rank writes its documents into ONE HDF5 file at path, through
 * parallel HDF5 (MPI-IO on the communicator): the layout of a token shard
 * (/tokens/values, /tokens/offsets, the "zephon_tokenizer" attribute), the
 * documents of all shards in input order. Shards are encoded in rounds
 * (round k: rank r encodes shard k * size + r, its tokens into an unlinked
 * spill file in $SLURM_TMPDIR, else $TMPDIR, else /tmp, so that memory
 * does not grow with the shard); the ranks exchange their document and
 * token counts and each writes its own hyperslabs. Written to
 * "<path>.part.<pid of rank 0>" and renamed by rank 0 after the file is
 * closed; on failure the .part file is removed. An existing path is
 * refused unless cfg->force. cfg->out_dir is not used.
 * Only this thread may call HDF5 meanwhile. Collective over comm. */
ZP_API zp_status zp_mpi_preprocess_shared(zp_mpi *m, zp_dataset *ds,
                                          const zp_preprocess_config *cfg, const char *path,
                                          zp_preprocess_stats *total);

#ifdef __cplusplus
}
#endif
#endif
