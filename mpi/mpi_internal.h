/*
 * mpi_internal.h - the MPI layer's private structures and helpers, shared
 * by mpi_util.c (the layer's own small helpers: bounded appends, errors,
 * rank lists, string builder, human units; the clock, formatting and
 * mkdir -p come from src/base/util.h), mpi_comm.c (the handle,
 * lock-step delivery), mpi_agree.c (startup agreement, dataset broadcast),
 * mpi_report.c (gather, reduce, analysis) and mpi_render.c (text, JSON,
 * CSV, HTML).
 *
 * Only the public API of libzephon is used here (no src/ internals), so
 * the MPI layer can be built against an installed libzephon.
 */
#ifndef ZP_MPI_INTERNAL_H
#define ZP_MPI_INTERNAL_H

#include <stdarg.h>
#include <stdio.h>

#include "base/error.h"
#include "base/util.h"
#include "zephon/mpi.h"

#define ZPI_MPI_ERRMAX ZPI_ERRMAX
#define ZPI_MPI_HOST 64
#define ZPI_MPI_NHIST 3
/* per histogram in the SUM reduction: count, sum_ns, buckets */
#define ZPI_MPI_HSUM (2 + ZP_HIST_BUCKETS)
/* Mixture parts in the same reductions, a fixed size on every rank (so the
 * counts match whatever a rank gives): in the SUM, per listed part its
 * samples and tokens, then the samples and tokens of every part; in the
 * MIN, UINT64_MAX minus the listed and total part counts and minus each
 * listed part's weight bits (non-negative doubles order as their bits). */
#define ZPI_MPI_PSUM (2 * ZP_OBS_MAX_PARTS + 2)
#define ZPI_MPI_PMIN (2 + ZP_OBS_MAX_PARTS)
#define ZPI_MPI_SUMN (ZPI_MPI_NHIST * ZPI_MPI_HSUM + ZPI_MPI_PSUM)
#define ZPI_MPI_MINN (ZPI_MPI_NHIST * 2 + ZPI_MPI_PMIN)


#define ZPI_MPI_DATA_MAX 512

/* What the agreement keeps for the report's header. */
typedef struct zpi_mpi_info {
    int have_dataset, have_ws, have_pc;
    uint64_t ds_shards, ds_samples, ds_bytes, ds_fingerprint;
    /* where the data came from, as rank 0 was given it (zp_mpi_dataset_create):
     * the manifest or folder (absolute), or "N paths: first ... last" */
    char data[ZPI_MPI_DATA_MAX];
    zp_worksource_config ws;
    zp_pipeline_config pc;
    char *extra; /* malloc'd, may be NULL */
} zpi_mpi_info;

/* The root's memory of earlier windows (heatmap, consecutive flags). */
typedef struct zpi_mpi_history {
    uint32_t cap;        /* windows kept at most */
    uint32_t kept;       /* windows held (<= cap) */
    uint32_t head;       /* ring index of the oldest */
    uint64_t total;      /* windows seen */
    float *fetch;        /* cap x size: fetch per batch (NaN: no batch) */
    double *t_end;       /* cap: the root's wall time at each window's end */
    uint32_t *streak;    /* size: consecutive flagged windows, ending at the last */
} zpi_mpi_history;

/* A report in flight (blocking reports use it too). */
typedef struct zpi_mpi_pending {
    int active;
    zp_mpi_report_kind kind;
    double t0;
    MPI_Request req[3];
    zp_mpi_rank_stats send;
    zp_mpi_rank_stats *recv;               /* root: size records */
    uint64_t hsum[ZPI_MPI_SUMN], hsum_out[ZPI_MPI_SUMN];
    uint64_t hmin[ZPI_MPI_MINN], hmin_out[ZPI_MPI_MINN];
    /* the root's own part names (the report's names; "part<k>" when the
     * root gave no input) */
    int have_names;
    char part_names[ZP_OBS_MAX_PARTS][ZP_OBS_NAME];
} zpi_mpi_pending;

/* Cross-rank attention-cost balance (mpi_balance.c, zp_mpi_balance): the
 * step's delivered batches and the arrays they point into (owned). */
typedef struct zpi_mpi_bal {
    size_t window;     /* K; 0: off */
    int started;       /* zp_mpi_next was called: the window is fixed */
    size_t pos;        /* calls delivered in the current step (0: at a boundary) */
    zp_batch *out;     /* K */
    int32_t *tokens, *segment_ids, *position_ids, *doc_counts, *cu_seqlens;
    uint8_t *loss_mask;
    zp_sample *samples;
    uint32_t *sample_rows;
    zp_mpi_balance_stats stats;
} zpi_mpi_bal;

/* Shards from other nodes (mpi_peer.c). */
typedef struct zpi_mpi_peer zpi_mpi_peer;
/* Collective over m's comm: the service (NULL in *out, ZP_OK, when the
 * settings or the MPI thread level leave the nodes without sharing). */
zp_status zpi_mpi_peer_create(zp_mpi *m, zpi_mpi_peer **out);
/* Collective: the owner of each shard of ds from the plan wc (epoch 0). */
zp_status zpi_mpi_peer_set_owners(zp_mpi *m, zpi_mpi_peer *p, const zp_dataset *ds,
                                  const zp_worksource_config *wc);
const zp_peer_source *zpi_mpi_peer_source(zpi_mpi_peer *p);
/* Collective; accepts NULL. */
void zpi_mpi_peer_destroy(zpi_mpi_peer *p);

struct zp_mpi {
    /* a world of one without MPI (zp_mpi_create_local): comm and node_comm
     * are MPI_COMM_NULL and no MPI function is called (mpi_coll.c) */
    int solo;
    MPI_Comm comm;      /* our duplicate */
    MPI_Comm node_comm; /* the ranks of this node */
    int rank, size;
    int node, nodes, local_rank, local_size;
    char host[ZPI_MPI_HOST];
    char *hosts;        /* root: size x ZPI_MPI_HOST */
    zp_mpi_config cfg;
    zpi_err err;                  /* the last error (src/base/error.h, as every handle) */
    int failed_create;            /* holds only the error of a failed zp_mpi_create */

    char data[ZPI_MPI_DATA_MAX];  /* zp_mpi_dataset_create's data summary (rank 0's) */
    zpi_mpi_info info;

    /* lock-step delivery */
    zp_status step_final;         /* ZP_OK while running; ZP_END or the error after */
    char step_msg[ZPI_MPI_ERRMAX];
    uint64_t dropped;
    /* votes carried by zp_mpi_next's agreement: this rank's, and the
     * maximum over ranks at the last agreement (zp_mpi_set_vote) */
    int64_t vote_local[ZP_MPI_VOTE_COUNT], vote_all[ZP_MPI_VOTE_COUNT];
    int stop_rank; /* lowest rank whose stop vote was the agreed one; -1 */
    double sync_seconds;
    zpi_mpi_bal bal;              /* zp_mpi_balance (mpi_balance.c) */
    /* the samples listed by batches this rank's pipeline handed out and
     * zp_mpi_next did not deliver (the step every rank stopped at): the
     * coverage certificate takes them out of the pipeline's digests */
    zp_sample *undelivered;
    size_t n_undelivered;
    int undelivered_lost; /* out of memory: some are not listed */

    /* reports */
    uint32_t reports;             /* made so far */
    int have_prev;
    zp_mpi_rank_stats prev;       /* this rank's previous record (windows) */
    zpi_mpi_history hist;         /* root */
    zpi_mpi_pending pend;

    /* threads under a launcher and the stall watchdog (mpi_watchdog.c) */
    int bind_cores, bind_share, node_cores;
    int wd_ready;                 /* created: destroy gathers the notices in flight */
    double t_create;              /* zpi_now() at create */
    uint32_t wd_sent;             /* notices sent (this rank) */
    zp_mpi_stall *wd_out;         /* their send buffers, ZP_MPI_STALL_NOTICES */
    MPI_Request *wd_req;
    uint32_t *wd_recv;            /* root: notices received per rank */
    /* shards from other nodes: made by the first zp_mpi_dataset_create
     * (peer_made), owners set by zp_mpi_agree */
    zpi_mpi_peer *peer;
    int peer_made;
    zp_mpi_stall *stalls;         /* root: one per stuck rank, in order learned */
    size_t n_stalls, cap_stalls;
};

struct zp_cluster_report {
    zp_mpi_report_kind kind;
    int size, nodes, root;
    uint32_t index;                /* reports before this one */
    zp_mpi_rank_stats *ranks;      /* size */
    zp_mpi_rank_stats totals;
    zp_mpi_rank_stats *node_tot;   /* nodes */
    int *node_off, *node_list;     /* the ranks of node j: node_list[node_off[j] .. node_off[j+1]) */
    uint8_t *named;                /* size: 1 for a named straggler */
    char *hosts;                   /* size x ZPI_MPI_HOST */
    zp_hist hist[ZPI_MPI_NHIST];
    zp_mpi_stat stat[ZP_MPI_M_COUNT];
    zp_mpi_straggler *strag;
    size_t n_strag;
    double *z, *ratio;             /* size: the criterion's values per rank (run or window) */
    uint8_t *flag;                 /* size: flagged in this report's basis */
    double median, mad;            /* of the judged fetch per batch */
    double throughput, bounded;
    double seconds;                /* start of the collective to the end of the analysis */
    double analysis_seconds;       /* of which the root's analysis */
    size_t gather_bytes;
    /* windows (copied from the root's history, oldest first) */
    int n_windows;
    uint64_t first_window;         /* index of the oldest kept window */
    float *win;                    /* n_windows x size */
    double *win_t;                 /* n_windows */
    /* header */
    char job_id[64];
    zpi_mpi_info info;             /* copied; extra owned */
    zp_mpi_config cfg;
    uint32_t threads_min, threads_max;
    int ranks_per_node_min, ranks_per_node_max;
    char verdict[512];
    /* realized mixture proportions summed over ranks (zp_cluster_report_parts) */
    uint32_t n_parts, parts_total;
    zp_part_metrics parts[ZP_OBS_MAX_PARTS];
    /* cross-rank attention-cost balance: the root's figures (zp_mpi_balance) */
    zp_mpi_balance_stats bal;
    /* a run cut short (zp_cluster_report_set_partial) */
    int partial;
    char partial_signal[32];       /* "" when no signal stopped it */
    char partial_reason[256];
    int partial_own_reason;        /* the reason was given, not made from the signal */
    uint64_t partial_steps;
    /* the coverage certificate (zp_mpi_report_coverage; 0: none made) */
    size_t n_cov;
    zp_coverage_cert *cov;
    /* the stall watchdog and oversubscribed nodes (mpi_watchdog.c) */
    zp_mpi_stall *stalls;          /* at most 64 */
    size_t n_stalls, stalls_total;
    char oversub[512];
};

/* ---- mpi_coll.c ---- */

/* The layer's collectives over m->comm (the MPI function of the same name,
 * with the same counts on every rank and, for the gathers, the same count
 * sent and received per rank). On a solo handle (a world of one without
 * MPI) each is the local copy it amounts to and returns MPI_SUCCESS; the
 * requests of the nonblocking ones are MPI_REQUEST_NULL and complete at
 * once. Types: MPI_CHAR, MPI_BYTE, MPI_INT, MPI_2INT, MPI_DOUBLE,
 * MPI_INT64_T, MPI_UINT64_T. */
int zpi_coll_bcast(zp_mpi *m, void *buf, int count, MPI_Datatype t, int root);
int zpi_coll_allreduce(zp_mpi *m, const void *in, void *out, int count, MPI_Datatype t, MPI_Op op);
int zpi_coll_gather(zp_mpi *m, const void *in, void *out, int count, MPI_Datatype t, int root);
int zpi_coll_allgather(zp_mpi *m, const void *in, void *out, int count, MPI_Datatype t);
int zpi_coll_gatherv(zp_mpi *m, const void *in, int count, void *out, const int *counts,
                     const int *displs, MPI_Datatype t, int root);
int zpi_coll_igather(zp_mpi *m, const void *in, void *out, int count, MPI_Datatype t, int root,
                     MPI_Request *req);
int zpi_coll_ireduce(zp_mpi *m, const void *in, void *out, int count, MPI_Datatype t, MPI_Op op,
                     int root, MPI_Request *req);
int zpi_coll_alltoallv(zp_mpi *m, const void *in, const int *scounts, const int *sdispls,
                       void *out, const int *rcounts, const int *rdispls, MPI_Datatype t);
int zpi_coll_testall(zp_mpi *m, int n, MPI_Request *req, int *done);
int zpi_coll_iallreduce(zp_mpi *m, const void *in, void *out, int count, MPI_Datatype t, MPI_Op op,
                        MPI_Request *req);
int zpi_coll_waitall(zp_mpi *m, int n, MPI_Request *req);

/* ---- mpi_util.c ---- */

/* Store the code and message on m and return st. */
zp_status zpi_mpi_fail(zp_mpi *m, zp_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Check an MPI return code: MPI_SUCCESS gives ZP_OK, else ZP_ERR_MPI with
 * "rank R: <what> failed: <MPI's error string>" stored on m. */
zp_status zpi_mpi_check(zp_mpi *m, int rc, const char *what);
/* Append to buf (cap bytes, *len of them used); once the text is cut, *len
 * stays at cap - 1 and later appends write nothing. */
void zpi_mpi_append(char *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Rank lists as ranges ("0-3,7,9-10") into buf, at most cap bytes, with
 * "... (N ranks)" when cut. ranks sorted ascending. */
void zpi_mpi_ranklist(char *buf, size_t cap, const int *ranks, size_t n);

/* A growable string for the renderers (oom set once an append failed;
 * later appends do nothing). */
typedef struct zpi_sbuf {
    char *p;
    size_t len, cap;
    int oom;
} zpi_sbuf;
void zpi_sb_printf(zpi_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void zpi_sb_puts(zpi_sbuf *b, const char *s);
void zpi_sb_putn(zpi_sbuf *b, const char *s, size_t n);
/* s escaped for HTML text / as one CSV field (quoted when needed). */
void zpi_sb_html(zpi_sbuf *b, const char *s);
void zpi_sb_csv(zpi_sbuf *b, const char *s);

/* Numbers for people, 3 significant digits: "17.2 M", "1.30 GB",
 * "12.5 ms", "830 us", "4.1 min", "1.2 k samples/s", "12.5%". Non-finite
 * values print "-". */
void zpi_mpi_human_count(char *buf, size_t cap, double v);
void zpi_mpi_human_bytes(char *buf, size_t cap, double v);
void zpi_mpi_human_seconds(char *buf, size_t cap, double s);
void zpi_mpi_human_rate(char *buf, size_t cap, double v, const char *unit);
void zpi_mpi_human_percent(char *buf, size_t cap, double fraction);

/* The unit of a report metric, and a value in it for people. */
typedef enum zpi_mpi_unit {
    ZPI_U_COUNT,
    ZPI_U_BYTES,
    ZPI_U_SECONDS,
    ZPI_U_FRACTION,
    ZPI_U_SAMPLE_RATE,
    ZPI_U_BYTE_RATE
} zpi_mpi_unit;
zpi_mpi_unit zpi_mpi_metric_unit(int metric); /* mpi_report.c */
void zpi_mpi_human(char *buf, size_t cap, zpi_mpi_unit u, double v); /* mpi_report.c */

/* A value in the unit u for people, into a local buffer (for printf). */
#define ZPI_MPI_HUMAN(buf, u, v) (zpi_mpi_human((buf), sizeof(buf), (u), (v)), (buf))

/* Accelerator utilisation (mpi_au.c): a rank's (NAN when it has no step),
 * the job's (the mean over ranks, passing at ZPI_MPI_AU_THRESHOLD), and
 * the sentence every format states. */
#define ZPI_MPI_AU_THRESHOLD 0.90
typedef struct zpi_mpi_au {
    double job;     /* NAN when no rank has a step */
    int ranks;      /* ranks with an AU */
    double min;     /* the lowest, and its rank */
    int min_rank;
    int below;      /* ranks below the threshold */
    int passes;     /* job >= ZPI_MPI_AU_THRESHOLD */
} zpi_mpi_au;
double zpi_mpi_rank_au(const zp_mpi_rank_stats *s);
void zpi_mpi_au_of(const zp_cluster_report *r, zpi_mpi_au *a);
void zpi_mpi_au_sentence(const zp_cluster_report *r, zpi_sbuf *b);
/* The HTML page's histograms of per-rank figures (mpi_render_html_dist.c). */
void zpi_mpi_html_distributions(const zp_cluster_report *r, zpi_sbuf *b);

/* ---- the report's formats: mpi_render_text.c, mpi_render_data.c (JSON,
 * CSV), mpi_render_html.c; each appends the whole document to b ---- */
void zpi_mpi_render_text(const zp_cluster_report *r, zpi_sbuf *b);
void zpi_mpi_render_json(const zp_cluster_report *r, zpi_sbuf *b);
void zpi_mpi_render_csv(const zp_cluster_report *r, zpi_sbuf *b);
void zpi_mpi_render_windows_csv(const zp_cluster_report *r, zpi_sbuf *b);
void zpi_mpi_render_html(const zp_cluster_report *r, zpi_sbuf *b);
/* The coverage certificate's section of each format (mpi_coverage.c):
 * nothing when the report has none; the CSV is its own file, coverage.csv
 * (one row per epoch), written only when there is a certificate. */
void zpi_mpi_coverage_text(const zp_cluster_report *r, zpi_sbuf *b);
void zpi_mpi_coverage_csv(const zp_cluster_report *r, zpi_sbuf *b);
void zpi_mpi_coverage_html(const zp_cluster_report *r, zpi_sbuf *b);
/* The "coverage" member of report.json: an array, or NULL when none. */
struct json_t;
struct json_t *zpi_mpi_coverage_json(const zp_cluster_report *r);

/* ---- what the formats share: mpi_render_common.c ---- */

/* "shard_load", "record_read", "transfer" for h < ZPI_MPI_NHIST. */
const char *zpi_mpi_hist_name(int h);
/* "host: ranks 0-3" of node `node` (its ranks as a list) into buf. */
void zpi_mpi_node_ranks(const zp_cluster_report *r, int node, char *buf, size_t cap);
/* "window" or "final". */
const char *zpi_mpi_kind_name(zp_mpi_report_kind k);
/* The straggler criterion in words (the header's "criterion:" line). */
void zpi_mpi_criterion_text(const zp_cluster_report *r, zpi_sbuf *b);
/* "PARTIAL REPORT: the run was stopped (SIGINT) after 120 steps" (no
 * newline): the first line of every format of a partial report. */
void zpi_mpi_partial_line(const zp_cluster_report *r, zpi_sbuf *b);
/* 1 when the report has a mixture to show (more than one part). */
int zpi_mpi_has_mixture(const zp_cluster_report *r);
/* "<pre>first 64 of N parts listed<post>" when not every part is. */
void zpi_mpi_parts_cut_note(const zp_cluster_report *r, zpi_sbuf *b, const char *pre,
                            const char *post);
/* Windows at the start of the kept history that are warm-up, left out of
 * the heat map's colour scale: the run's first window and every window
 * that ended before 1.5 x the slowest rank's time to its first batch (0
 * when every kept window is warm-up). */
int zpi_mpi_warmup_windows(const zp_cluster_report *r);


/* A handle that holds only the error of a failed zp_mpi_create() answers
 * every call with that error. */
#define ZPI_MPI_USABLE(m)                                                                          \
    do {                                                                                           \
        if (!(m))                                                                                  \
            return ZP_ERR_INVALID;                                                                 \
        if ((m)->failed_create)                                                                    \
            return (m)->err.code;                                                                  \
    } while (0)

/* ---- mpi_comm.c ---- */

/* Agree on an outcome. Collective. Every rank passes its local status (its
 * message on m when not ZP_OK); all ranks return ZP_OK when all were ZP_OK,
 * else the status of the lowest failing rank, with that rank's message
 * ("rank R: ...") stored on every rank. */
zp_status zpi_mpi_agree_status(zp_mpi *m, zp_status local);
/* The same, for ranks that may wait long for another (rank 0 building the
 * dataset): the waiting ranks test the non-blocking reduction every 1 ms
 * and sleep in between, instead of spinning in MPI_Allreduce: on a node
 * whose cores are all taken (more ranks than cores, the training's own
 * threads) the rank at work gets the cores. */
zp_status zpi_mpi_agree_status_idle(zp_mpi *m, zp_status local);

/* A batch the pipeline handed out that zp_mpi_next does not deliver (a
 * step every rank stopped at): its samples are kept for the coverage
 * certificate (zp_mpi_undelivered_samples). */
void zpi_mpi_keep_undelivered(zp_mpi *m, const zp_batch *b);

/* The agreement of one lock-step step (zp_mpi_next): st is this rank's
 * outcome (ZP_OK: it holds its batches; ZP_END; an error with its message
 * on m), held the batches it holds (counted as dropped when the stream
 * ends or fails elsewhere), shape a value that must be equal on every
 * rank when every rank holds its batches (the balance's batch shape; 0
 * otherwise). ZP_OK on every rank, or the same end or error on every
 * rank (later calls answer it). Checks that the ranks' balance windows
 * are equal. */
zp_status zpi_mpi_step_agree(zp_mpi *m, zp_status st, uint64_t held, int64_t shape);

/* ---- mpi_balance.c ---- */

/* zp_mpi_next with cross-rank balance on (m->bal.window > 0). */
zp_status zpi_mpi_balance_next(zp_mpi *m, zp_pipeline *p, const zp_batch **out);
/* 1 when state may not be saved now (inside a step); the message on m. */
int zpi_mpi_balance_inside(zp_mpi *m);
/* Free the balance's buffers (mpi_util.c). */
void zpi_mpi_balance_free(zp_mpi *m);

/* ---- mpi_report.c, mpi_agree.c ---- */

/* Analysis at the root: build the report from the gathered records. */
zp_status zpi_mpi_analyse(zp_mpi *m, zpi_mpi_pending *pd, zp_cluster_report **out);

/* Copy an info (deep); 0 or -1 on allocation failure (mpi_util.c). */
int zpi_mpi_info_copy(zpi_mpi_info *dst, const zpi_mpi_info *src);
void zpi_mpi_info_free(zpi_mpi_info *i);
/* Where the data came from, for the report (at most cap bytes): one spec
 * made absolute (a manifest, a folder, a shard) or kept as given (a glob;
 * a URL redacted: zp_dataset_spec_redact); several: their count, the first
 * and the last. */
void zpi_mpi_data_summary(char *buf, size_t cap, const char *const *specs, size_t n);
/* The settings line of the header ("seed=1 world_size=4 ... data=manifest
 * /abs/manifest.json (512 shards, 24.1 GB, fingerprint ...)"): the agreed
 * settings and extra's key=value tokens, the data summarised (never a list
 * of shards: a "data=" token of extra is left out), a token longer than
 * 120 bytes cut. */
void zpi_mpi_settings_text(const zpi_mpi_info *i, zpi_sbuf *b);

/* ---- mpi_watchdog.c ---- */

/* create: this rank's binding and, with masks (room for local_size masks of
 * zpi_mpi_mask_bytes()), the node's (collective over node_comm). */
size_t zpi_mpi_mask_bytes(void);
zp_status zpi_mpi_binding(zp_mpi *m, void *masks);
/* zp_mpi_next: hook p's watchdog (once), receive notices while waiting for
 * req (the step's agreement; the root polls, the others wait). */
void zpi_mpi_watch(zp_mpi *m, zp_pipeline *p);
int zpi_mpi_wait_step(zp_mpi *m, MPI_Request *req);
/* root: receive every notice the ranks' records say were sent (rank i sent
 * sent[i]); before a report's analysis and at destroy. */
void zpi_mpi_watch_drain(zp_mpi *m, const zp_mpi_rank_stats *ranks);
/* destroy (collective): receive what is in flight, complete the sends, free. */
void zpi_mpi_watch_release(zp_mpi *m);
/* the report: copy the stalls, find oversubscribed nodes; free */
void zpi_mpi_watch_report(zp_mpi *m, zp_cluster_report *r);
/* renderers: the text section, the JSON members, the HTML section */
void zpi_mpi_watch_text(const zp_cluster_report *r, zpi_sbuf *b);
void zpi_mpi_watch_html(const zp_cluster_report *r, zpi_sbuf *b);
struct json_t;
/* {"stalls": [...], "stalled_ranks": N, "oversubscribed": "..."} members set on obj */
void zpi_mpi_watch_json(const zp_cluster_report *r, struct json_t *obj);

#endif
