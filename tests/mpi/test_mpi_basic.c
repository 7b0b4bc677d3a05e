/* test_mpi_basic.c - the MPI layer under mpirun (1..4 ranks):
 *  - the handle: a duplicated communicator with MPI_ERRORS_RETURN, nodes and
 *    node-local ranks, works on a sub-communicator, bad settings refused on
 *    every rank;
 *  - the dataset built on rank 0 and broadcast, with rank 0's shard names
 *    on every rank; an error there reaches every rank;
 *  - exactly once across ranks through the MPI path (pad and drop);
 *  - reduced integer counters equal the sum of the per-rank counters
 *    exactly (real pipelines, and hand-made counters above 2^53);
 *  - histograms merged, statistics with the ranks of min and max, per-node
 *    totals, the non-blocking report;
 *  - lock-step delivery: token packing gives ranks different batch counts,
 *    all stop at the shortest; a rank's error reaches every rank. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpitest.h"
#include "zephon.h"
#include "zephon/mpi.h"

/* ------------------------------------------------------------ the handle */

static void test_handle(void **state)
{
    (void)state;
    zp_mpi *m = NULL;
    zp_status st = zp_mpi_create(MPI_COMM_WORLD, NULL, &m);
    MPT_CHECK(st == ZP_OK, "%s", zp_status_str(st));
    if (m) {
        MPT_CHECK(zp_mpi_rank(m) == mpt_rank);
        MPT_CHECK(zp_mpi_size(m) == mpt_size);
        int cmp = MPI_UNEQUAL;
        MPI_Comm_compare(zp_mpi_comm(m), MPI_COMM_WORLD, &cmp);
        MPT_CHECK(cmp == MPI_CONGRUENT, "the handle's communicator is a duplicate (got %d)", cmp);
        MPI_Errhandler eh;
        MPI_Comm_get_errhandler(zp_mpi_comm(m), &eh);
        MPT_CHECK(eh == MPI_ERRORS_RETURN);
        MPI_Errhandler_free(&eh);
        /* one machine: one node holding every rank */
        MPT_CHECK(zp_mpi_num_nodes(m) == 1, "%d nodes", zp_mpi_num_nodes(m));
        MPT_CHECK(zp_mpi_node(m) == 0);
        MPT_CHECK(zp_mpi_local_size(m) == mpt_size);
        MPT_CHECK(zp_mpi_local_rank(m) == mpt_rank);
        MPT_CHECK(zp_mpi_hostname(m)[0] != '\0');
        zp_worksource_config wc;
        zp_worksource_config_init(&wc);
        zp_mpi_worksource_config(m, &wc);
        MPT_CHECK(wc.rank == (uint32_t)mpt_rank && wc.world_size == (uint32_t)mpt_size);
    }
    zp_mpi_destroy(m);

    /* nodes of two ranks */
    zp_mpi_config c;
    zp_mpi_config_init(&c);
    c.node_group_size = 2;
    st = zp_mpi_create(MPI_COMM_WORLD, &c, &m);
    MPT_CHECK(st == ZP_OK);
    if (m) {
        MPT_CHECK(zp_mpi_num_nodes(m) == (mpt_size + 1) / 2, "%d", zp_mpi_num_nodes(m));
        MPT_CHECK(zp_mpi_node(m) == mpt_rank / 2);
        MPT_CHECK(zp_mpi_local_rank(m) == mpt_rank % 2);
    }
    zp_mpi_destroy(m);

    /* a sub-communicator: the library uses what it is given */
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, mpt_rank % 2, mpt_rank, &sub);
    st = zp_mpi_create(sub, NULL, &m);
    MPT_CHECK(st == ZP_OK);
    if (m) {
        int expect = (mpt_size - mpt_rank % 2 + 1) / 2;
        MPT_CHECK(zp_mpi_size(m) == expect, "%d != %d", zp_mpi_size(m), expect);
        MPT_CHECK(zp_mpi_rank(m) == mpt_rank / 2);
    }
    zp_mpi_destroy(m);
    MPI_Comm_free(&sub);

    /* bad settings: refused on every rank; the failed handle holds only the
     * error, naming the setting and its value, and answers every call with it */
    zp_mpi_config_init(&c);
    c.root = mpt_size;
    m = NULL;
    MPT_CHECK(zp_mpi_create(MPI_COMM_WORLD, &c, &m) == ZP_ERR_INVALID);
    MPT_CHECK(m != NULL);
    char want[96];
    snprintf(want, sizeof want, "zp_mpi_config.root = %d", mpt_size);
    MPT_CHECK(strstr(zp_mpi_errmsg(m), want) != NULL, "'%s'", zp_mpi_errmsg(m));
    const zp_batch *b = NULL;
    MPT_CHECK(zp_mpi_next(m, NULL, &b) == ZP_ERR_INVALID);
    MPT_CHECK(zp_mpi_agree(m, NULL, NULL, NULL, "x") == ZP_ERR_INVALID);
    MPT_CHECK(strstr(zp_mpi_errmsg(m), want) != NULL, "'%s'", zp_mpi_errmsg(m));
    zp_mpi_destroy(m);
    m = NULL;
    MPT_CHECK(zp_mpi_create(MPI_COMM_NULL, NULL, &m) == ZP_ERR_INVALID);
    MPT_CHECK(m && strstr(zp_mpi_errmsg(m), "MPI_COMM_NULL") != NULL);
    zp_mpi_destroy(m);
    zp_mpi_destroy(NULL);
    mpt_sync();
}

static void test_agree_status(void **state)
{
    (void)state;
    zp_mpi *m = NULL;
    MPT_CHECK(zp_mpi_create(MPI_COMM_WORLD, NULL, &m) == ZP_OK);
    MPT_CHECK(zp_mpi_agree_status(m, ZP_OK, NULL) == ZP_OK);
    int bad = mpt_size - 1;
    zp_status st = zp_mpi_agree_status(m, mpt_rank == bad ? ZP_ERR_IO : ZP_OK, "boom on this rank");
    MPT_CHECK(st == ZP_ERR_IO, "%s", zp_status_str(st));
    char want[64];
    snprintf(want, sizeof want, "rank %d: boom on this rank", bad);
    if (mpt_rank != bad)
        MPT_CHECK(strcmp(zp_mpi_errmsg(m), want) == 0, "'%s'", zp_mpi_errmsg(m));
    else
        MPT_CHECK(strcmp(zp_mpi_errmsg(m), "boom on this rank") == 0, "'%s'", zp_mpi_errmsg(m));
    zp_mpi_destroy(m);
    mpt_sync();
}

/* ------------------------------------------------------------ dataset broadcast */

static void test_dataset_error_reaches_every_rank(void **state)
{
    (void)state;
    zp_mpi *m = NULL;
    MPT_CHECK(zp_mpi_create(MPI_COMM_WORLD, NULL, &m) == ZP_OK);
    const char *specs[] = {"/nonexistent-zephon/x.jsonl"};
    zp_dataset *ds = (zp_dataset *)m;
    zp_status st = zp_mpi_dataset_create(m, specs, 1, NULL, &ds);
    MPT_CHECK(st == ZP_ERR_IO, "%s", zp_status_str(st));
    MPT_CHECK(ds == NULL);
    MPT_CHECK(strstr(zp_mpi_errmsg(m), "/nonexistent-zephon/x.jsonl") != NULL, "'%s'",
              zp_mpi_errmsg(m));
    if (mpt_rank != 0)
        MPT_CHECK(strncmp(zp_mpi_errmsg(m), "rank 0: ", 8) == 0, "'%s'", zp_mpi_errmsg(m));
    zp_mpi_destroy(m);
    mpt_sync();
}

/* Names are what rank 0 was given (a relative glob and a relative path),
 * equal on every rank whatever its current folder; the shards resolve
 * from every rank (each rank reads its part) and the description is the
 * one rank 0 builds on its own. */
static void test_dataset_names_as_given(void **state)
{
    (void)state;
    char *dir = mpt_tmpdir();
    MPT_CHECK(dir != NULL);
    static const size_t sz[] = {9, 4, 6};
    uint64_t total = mpt_make_dataset(dir, "n.json", sz, 3, -1);
    char cwd[1024];
    MPT_CHECK(getcwd(cwd, sizeof cwd) != NULL);
    /* rank 0 names the shards relative to the data; the others stand
     * elsewhere */
    MPT_CHECK(chdir(mpt_rank == 0 ? dir : "/") == 0);
    const char *specs[] = {"n.json-0[01].jsonl", "./n.json-02.jsonl"};
    const char *want[] = {"n.json-00.jsonl", "n.json-01.jsonl", "./n.json-02.jsonl"};

    zp_mpi *m = NULL;
    MPT_CHECK(zp_mpi_create(MPI_COMM_WORLD, NULL, &m) == ZP_OK);
    zp_dataset *ds = NULL;
    zp_status st = zp_mpi_dataset_create(m, mpt_rank == 0 ? specs : NULL, mpt_rank == 0 ? 2 : 0,
                                         NULL, &ds);
    MPT_CHECK(st == ZP_OK, "%s: %s", zp_status_str(st), zp_mpi_errmsg(m));
    MPT_CHECK(zp_dataset_num_shards(ds) == 3);
    for (size_t i = 0; i < 3; i++) {
        const char *name = zp_dataset_shard_name(ds, i);
        MPT_CHECK(name && strcmp(name, want[i]) == 0, "shard %zu is named '%s', want '%s'", i,
                  name ? name : "(null)", want[i]);
    }
    /* rank 0's names on every rank: compare them as one string */
    char mine[256] = "", root[256];
    for (size_t i = 0; i < zp_dataset_num_shards(ds); i++) {
        size_t len = strlen(mine);
        snprintf(mine + len, sizeof mine - len, "%s|", zp_dataset_shard_name(ds, i));
    }
    memcpy(root, mine, sizeof root);
    MPI_Bcast(root, sizeof root, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPT_CHECK(strcmp(mine, root) == 0, "names '%s', rank 0 has '%s'", mine, root);
    /* the same description as rank 0's own dataset from the specs */
    if (mpt_rank == 0) {
        zp_dataset *own = NULL;
        MPT_CHECK(zp_dataset_create(NULL, &own) == ZP_OK);
        for (size_t i = 0; i < 2; i++)
            MPT_CHECK(zp_dataset_add(own, specs[i]) == ZP_OK, "%s", zp_dataset_errmsg(own));
        MPT_CHECK(zp_dataset_index(own) == ZP_OK);
        MPT_CHECK(zp_dataset_fingerprint(own) == zp_dataset_fingerprint(ds));
        zp_dataset_destroy(own);
    }
    MPT_CHECK(zp_mpi_agree(m, ds, NULL, NULL, NULL) == ZP_OK, "%s", zp_mpi_errmsg(m));

    /* every rank reads its samples: the paths resolve from its folder */
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    zp_worksource *ws = NULL;
    MPT_CHECK(zp_mpi_worksource_create(m, ds, &wc, &ws) == ZP_OK, "%s", zp_mpi_errmsg(m));
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = 1;
    pc.microbatch_size = 2;
    zp_pipeline *p = NULL;
    MPT_CHECK(ws && zp_pipeline_create(ws, &pc, &p) == ZP_OK);
    const zp_batch *b;
    uint64_t n = 0, mine_n = 0;
    while (p && (st = zp_mpi_next(m, p, &b)) == ZP_OK)
        n += b->n_samples;
    MPT_CHECK(st == ZP_END, "%s: %s", zp_status_str(st), zp_mpi_errmsg(m));
    mine_n = ws ? zp_worksource_samples_per_rank(ws) : 0;
    MPT_CHECK(n == mine_n, "read %llu samples, plan %llu", (unsigned long long)n,
              (unsigned long long)mine_n);
    MPT_CHECK(mine_n * (uint64_t)mpt_size >= total);

    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    zp_dataset_destroy(ds);
    zp_mpi_destroy(m);
    MPT_CHECK(chdir(cwd) == 0);
    mpt_rmdir(dir);
    mpt_sync();
}

/* ------------------------------------------------------------ exactly once + counters */

static const size_t SIZES[] = {37, 200, 5, 111, 64, 3};
#define NS (sizeof SIZES / sizeof SIZES[0])

static void run_exactly_once(zp_remainder rem)
{
    /* only rank 0 names the dataset: the others receive it */
    mpt_job j;
    mpt_job_open(&j, "a.json", SIZES, NS, -1);
    zp_mpi *m = j.m;
    zp_dataset *ds = j.ds;
    uint64_t total = j.total;
    MPT_CHECK(zp_dataset_num_samples(ds) == total);
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.seed = 11;
    wc.shuffle_block_shards = 2;
    wc.remainder = rem;
    zp_worksource *ws = NULL;
    MPT_CHECK(zp_mpi_worksource_create(m, ds, &wc, &ws) == ZP_OK);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = 2;
    pc.microbatch_size = 7;
    pc.chunk_samples = 16;
    pc.fetch_parallelism = 2;
    zp_mpi_worksource_config(m, &wc);
    MPT_CHECK(zp_mpi_agree(m, ds, &wc, &pc, "test") == ZP_OK, "%s", zp_mpi_errmsg(m));
    zp_pipeline *p = NULL;
    MPT_CHECK(zp_pipeline_create(ws, &pc, &p) == ZP_OK);
    MPT_CHECK(zp_pipeline_enable_observability(p) == ZP_OK);

    uint64_t per = zp_worksource_samples_per_rank(ws);
    uint64_t *ids = malloc((per + 1) * sizeof *ids);
    int *padded = calloc(per + 1, sizeof *padded);
    uint64_t n = 0, steps = 0;
    const zp_batch *b;
    zp_status st;
    while ((st = zp_mpi_next(m, p, &b)) == ZP_OK) {
        steps++;
        for (size_t i = 0; i < b->n_samples && n <= per; i++, n++) {
            ids[n] = b->samples[i].global_id;
            padded[n] = b->samples[i].padded;
        }
    }
    MPT_CHECK(st == ZP_END, "%s: %s", zp_status_str(st), zp_mpi_errmsg(m));
    MPT_CHECK(n == per, "rank delivered %llu samples, plan %llu", (unsigned long long)n,
              (unsigned long long)per);
    MPT_CHECK(zp_mpi_batches_dropped(m) == 0);
    /* a later call answers the same without communicating */
    MPT_CHECK(zp_mpi_next(m, p, &b) == ZP_END);
    uint64_t smin, smax;
    mpt_minmax_u64(steps, &smin, &smax);
    MPT_CHECK(smin == smax, "steps differ between ranks: %llu..%llu", (unsigned long long)smin,
              (unsigned long long)smax);

    /* exactly once: gather every rank's ids at rank 0 */
    int cnt = (int)n, *cnts = malloc((size_t)mpt_size * sizeof *cnts);
    int *displ = malloc((size_t)mpt_size * sizeof *displ);
    MPI_Gather(&cnt, 1, MPI_INT, cnts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    int all_n = 0;
    if (mpt_rank == 0)
        for (int r = 0; r < mpt_size; r++) {
            displ[r] = all_n;
            all_n += cnts[r];
        }
    uint64_t *all = malloc(((size_t)all_n + 1) * sizeof *all);
    int *allpad = malloc(((size_t)all_n + 1) * sizeof *allpad);
    MPI_Gatherv(ids, cnt, MPI_UINT64_T, all, cnts, displ, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    MPI_Gatherv(padded, cnt, MPI_INT, allpad, cnts, displ, MPI_INT, 0, MPI_COMM_WORLD);
    if (mpt_rank == 0) {
        unsigned *seen = calloc(total, sizeof *seen);
        uint64_t npad = 0;
        for (int i = 0; i < all_n; i++) {
            MPT_CHECK(all[i] < total);
            if (all[i] >= total)
                continue;
            if (allpad[i])
                npad++;
            else
                seen[all[i]]++;
        }
        uint64_t once = 0, twice = 0;
        for (uint64_t g = 0; g < total; g++) {
            once += seen[g] == 1;
            twice += seen[g] > 1;
        }
        MPT_CHECK(twice == 0, "%llu samples delivered twice", (unsigned long long)twice);
        if (rem == ZP_REMAINDER_PAD) {
            MPT_CHECK(once == total, "%llu of %llu delivered", (unsigned long long)once,
                      (unsigned long long)total);
            MPT_CHECK(npad == zp_worksource_padded(ws));
        } else {
            MPT_CHECK(once == total - zp_worksource_dropped(ws));
            MPT_CHECK(npad == 0);
        }
        free(seen);
    }

    /* the report's integer totals are the exact sums of the ranks' own */
    zp_mpi_input in;
    MPT_CHECK(zp_mpi_input_from_pipeline(p, &in) == ZP_OK);
    uint64_t mine[6] = {in.metrics.batches, in.metrics.samples, in.fetch.records,
                        in.fetch.bytes_uncompressed, in.fetch.shards_opened,
                        in.prefetch.cache_hits};
    uint64_t sums[6];
    MPI_Reduce(mine, sums, 6, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    zp_cluster_report *rep = NULL;
    st = zp_mpi_report(m, &in, ZP_MPI_REPORT_FINAL, &rep);
    MPT_CHECK(st == ZP_OK, "%s", zp_mpi_errmsg(m));
    if (mpt_rank == 0) {
        MPT_CHECK(rep != NULL);
        const zp_mpi_rank_stats *t = zp_cluster_report_totals(rep);
        if (t) {
            MPT_CHECK(t->batches == sums[0]);
            MPT_CHECK(t->samples == sums[1] && t->samples == (uint64_t)all_n);
            MPT_CHECK(t->records == sums[2]);
            MPT_CHECK(t->bytes_fetched == sums[3]);
            MPT_CHECK(t->shards_opened == sums[4]);
            MPT_CHECK(t->cache_hits == sums[5]);
            MPT_CHECK(t->local_rank == mpt_size, "totals count %d ranks", t->local_rank);
        }
        /* the record hist merged over ranks counts every record read */
        const zp_hist *h = zp_cluster_report_hist(rep, 1);
        MPT_CHECK(h && h->count == sums[2], "%llu", h ? (unsigned long long)h->count : 0ULL);
        char *txt = NULL;
        MPT_CHECK(zp_cluster_report_render(rep, ZP_MPI_TEXT, &txt, NULL) == ZP_OK);
        MPT_CHECK(txt && strstr(txt, "verdict: "));
        MPT_CHECK(txt && !strstr(txt, "mixture ("), "one part: no mixture section");
        free(txt);
        const zp_part_metrics *pm = NULL;
        size_t ptotal = 0;
        MPT_CHECK(zp_cluster_report_parts(rep, &pm, &ptotal) == 1 && ptotal == 1);
        MPT_CHECK(pm && pm[0].samples == t->samples && pm[0].weight == 1.0);
        char *js = NULL;
        MPT_CHECK(zp_cluster_report_render(rep, ZP_MPI_JSON, &js, NULL) == ZP_OK);
        json_t *root = js ? json_loads(js, 0, NULL) : NULL;
        MPT_CHECK(root && json_is_null(json_object_get(root, "mixture")));
        json_decref(root);
        free(js);
    } else {
        MPT_CHECK(rep == NULL);
    }
    zp_cluster_report_destroy(rep);

    free(cnts);
    free(displ);
    free(all);
    free(allpad);
    free(ids);
    free(padded);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    mpt_job_close(&j);
    mpt_sync();
}

static void test_exactly_once_pad(void **state)
{
    (void)state;
    run_exactly_once(ZP_REMAINDER_PAD);
}

static void test_exactly_once_drop(void **state)
{
    (void)state;
    run_exactly_once(ZP_REMAINDER_DROP);
}

/* ------------------------------------------------------------ reduction, synthetic */

/* A hand-made input whose counters exceed 2^53 (a double would round). */
static void synthetic_input(zp_mpi_input *in, int rank)
{
    memset(in, 0, sizeof *in);
    zp_hist_init(&in->fetch.open_ns);
    zp_hist_init(&in->fetch.record_ns);
    zp_hist_init(&in->prefetch.latency_ns);
    in->metrics.batches = (1ULL << 55) + (uint64_t)rank;
    in->metrics.samples = (1ULL << 60) + (uint64_t)rank * 1000003ULL + 7;
    in->metrics.tokens = (1ULL << 58) + 3ULL * (uint64_t)rank + 1;
    in->metrics.wall_seconds = 10.0;
    in->metrics.time_to_first_batch = 1.0;
    in->metrics.stall_seconds = 0.09 * (rank + 1);
    in->metrics.stall_fraction = 0.01 * (rank + 1);
    in->metrics.threads = 2;
    in->fetch.records = (1ULL << 54) + 11ULL * (uint64_t)rank;
    in->fetch.bytes_compressed = (1ULL << 61) + (uint64_t)rank;
    in->fetch.bytes_uncompressed = (1ULL << 59) + 5ULL * (uint64_t)rank;
    in->fetch.shards_opened = (uint64_t)rank + 1;
    in->fetch.fetch_seconds = 1.0;
    in->prefetch.retries = (uint64_t)rank;
    in->prefetch.cache_hits = 3;
    in->prefetch.cache_misses = 1;
    for (int k = 0; k <= rank; k++)
        zp_hist_record(&in->fetch.open_ns, (uint64_t)(rank + 1) * 1000);
}

static void test_reduction_exact(void **state)
{
    (void)state;
    zp_mpi_config c;
    zp_mpi_config_init(&c);
    c.node_group_size = 2;
    zp_mpi *m = NULL;
    MPT_CHECK(zp_mpi_create(MPI_COMM_WORLD, &c, &m) == ZP_OK);
    zp_mpi_input in;
    synthetic_input(&in, mpt_rank);

    /* blocking, then non-blocking: the same totals */
    for (int pass = 0; pass < 2; pass++) {
        zp_cluster_report *r = NULL;
        if (pass == 0) {
            MPT_CHECK(zp_mpi_report(m, &in, ZP_MPI_REPORT_FINAL, &r) == ZP_OK, "%s",
                      zp_mpi_errmsg(m));
        } else {
            MPT_CHECK(zp_mpi_report_start(m, &in, ZP_MPI_REPORT_WINDOW) == ZP_OK);
            MPT_CHECK(zp_mpi_report_pending(m) == 1);
            /* a second start while one is in flight is refused */
            MPT_CHECK(zp_mpi_report_start(m, &in, ZP_MPI_REPORT_WINDOW) == ZP_ERR_STATE);
            int done = 0, spins = 0;
            while (!done && spins++ < 1000000)
                MPT_CHECK(zp_mpi_report_test(m, &done, &r) == ZP_OK);
            MPT_CHECK(done);
            MPT_CHECK(zp_mpi_report_pending(m) == 0);
        }
        if (mpt_rank != 0) {
            MPT_CHECK(r == NULL);
            continue;
        }
        MPT_CHECK(r != NULL);
        if (!r)
            continue;
        uint64_t n = (uint64_t)mpt_size, tri = n * (n - 1) / 2;
        const zp_mpi_rank_stats *t = zp_cluster_report_totals(r);
        MPT_CHECK(t->batches == (1ULL << 55) * n + tri);
        MPT_CHECK(t->samples == (1ULL << 60) * n + tri * 1000003ULL + 7 * n);
        MPT_CHECK(t->tokens == (1ULL << 58) * n + 3 * tri + n);
        MPT_CHECK(t->records == (1ULL << 54) * n + 11 * tri);
        MPT_CHECK(t->bytes_read == (1ULL << 61) * n + tri);
        MPT_CHECK(t->bytes_fetched == (1ULL << 59) * n + 5 * tri);
        MPT_CHECK(t->shards_opened == tri + n);
        MPT_CHECK(t->retries == tri);
        MPT_CHECK(t->cache_hits == 3 * n && t->cache_misses == n);
        MPT_CHECK(fabs(t->cache_hit_rate - 0.75) < 1e-12);
        /* per-node totals (nodes of two ranks) */
        MPT_CHECK(zp_cluster_report_num_nodes(r) == (mpt_size + 1) / 2);
        uint64_t node_sum = 0;
        for (int j = 0; j < zp_cluster_report_num_nodes(r); j++) {
            const zp_mpi_rank_stats *nt = zp_cluster_report_node(r, j);
            uint64_t want = 0;
            for (int k = 2 * j; k < 2 * j + 2 && k < mpt_size; k++)
                want += (1ULL << 60) + (uint64_t)k * 1000003ULL + 7;
            MPT_CHECK(nt->samples == want, "node %d", j);
            node_sum += nt->samples;
        }
        MPT_CHECK(node_sum == t->samples);
        /* statistics over ranks, with the ranks of min and max */
        zp_mpi_stat s;
        MPT_CHECK(zp_cluster_report_stat(r, ZP_MPI_M_STALL_FRACTION, &s) == ZP_OK);
        double mean = 0.01 * (double)(n + 1) / 2, var = 0;
        for (uint64_t k = 0; k < n; k++)
            var += (0.01 * (double)(k + 1) - mean) * (0.01 * (double)(k + 1) - mean);
        MPT_CHECK(s.min_rank == 0 && s.max_rank == mpt_size - 1);
        MPT_CHECK(fabs(s.min - 0.01) < 1e-12 && fabs(s.max - 0.01 * (double)n) < 1e-12);
        MPT_CHECK(fabs(s.mean - mean) < 1e-12);
        MPT_CHECK(fabs(s.stddev - sqrt(var / (double)n)) < 1e-12);
        MPT_CHECK(s.ranks == n);
        MPT_CHECK(zp_cluster_report_stat(r, ZP_MPI_M_COUNT, &s) == ZP_ERR_INVALID);
        MPT_CHECK(zp_cluster_report_stat(r, ZP_MPI_M_SAMPLES, &s) == ZP_OK);
        MPT_CHECK(s.min_rank == 0 && s.max_rank == mpt_size - 1);
        /* histograms merged: rank k recorded (k+1) x (k+1) us */
        const zp_hist *h = zp_cluster_report_hist(r, 0);
        uint64_t cnt = 0, sum = 0;
        for (uint64_t k = 1; k <= n; k++) {
            cnt += k;
            sum += k * k * 1000;
        }
        MPT_CHECK(h->count == cnt && h->sum_ns == sum);
        MPT_CHECK(h->min_ns == 1000 && h->max_ns == n * 1000, "%llu %llu",
                  (unsigned long long)h->min_ns, (unsigned long long)h->max_ns);
        MPT_CHECK(zp_cluster_report_hist(r, 2)->count == 0);
        MPT_CHECK(zp_cluster_report_gather_bytes(r) == sizeof(zp_mpi_rank_stats));
        /* every format renders */
        for (int f = ZP_MPI_TEXT; f <= ZP_MPI_HTML; f++) {
            char *out = NULL;
            size_t len = 0;
            MPT_CHECK(zp_cluster_report_render(r, (zp_mpi_format)f, &out, &len) == ZP_OK);
            MPT_CHECK(out && len == strlen(out) && len > 100);
            free(out);
        }
        zp_cluster_report_destroy(r);
    }

    /* a rank without a snapshot is listed as such and left out of the sums */
    int hole = mpt_size > 1 ? 1 : -1;
    zp_cluster_report *r = NULL;
    MPT_CHECK(zp_mpi_report(m, mpt_rank == hole ? NULL : &in, ZP_MPI_REPORT_FINAL, &r) == ZP_OK);
    if (r) {
        const zp_mpi_rank_stats *t = zp_cluster_report_totals(r);
        uint64_t want = 0;
        for (int k = 0; k < mpt_size; k++)
            if (k != hole)
                want += (1ULL << 55) + (uint64_t)k;
        MPT_CHECK(t->batches == want);
        if (hole > 0)
            MPT_CHECK(zp_cluster_report_rank(r, hole)->valid == 0);
        MPT_CHECK(zp_cluster_report_rank(r, 0)->valid == 1);
        MPT_CHECK(zp_cluster_report_rank(r, mpt_size) == NULL);
    }
    zp_cluster_report_destroy(r);
    zp_mpi_destroy(m);
    mpt_sync();
}

/* ------------------------------------------------------------ lock-step */

static zp_pipeline *token_pipeline(zp_worksource *ws)
{
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = 1;
    pc.chunk_samples = 8;
    zp_pipeline *p = NULL;
    if (zp_pipeline_create(ws, &pc, &p) != ZP_OK ||
        zp_pipeline_tokenize(p, "gpt2", "text", 1) != ZP_OK ||
        zp_pipeline_pack(p, ZP_PACK_CONCAT, 32) != ZP_OK || zp_pipeline_batch(p, 2) != ZP_OK) {
        zp_pipeline_destroy(p);
        return NULL;
    }
    return p;
}

static void test_lockstep_tokens(void **state)
{
    (void)state;
    /* later ranks get longer documents: more token batches */
    static const size_t sz[] = {40, 40, 40, 40};
    mpt_job j;
    mpt_job_open(&j, "t.json", sz, 4, -1);
    zp_mpi *m = j.m;
    zp_dataset *ds = j.ds;
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.shuffle = 0;
    zp_worksource *ws = NULL;
    MPT_CHECK(zp_mpi_worksource_create(m, ds, &wc, &ws) == ZP_OK);

    /* this rank's own batch count */
    uint64_t solo = 0;
    zp_pipeline *p = token_pipeline(ws);
    MPT_CHECK(p != NULL);
    const zp_batch *b;
    while (p && zp_pipeline_next(p, &b) == ZP_OK)
        solo++;
    zp_pipeline_destroy(p);
    uint64_t lo, hi;
    mpt_minmax_u64(solo, &lo, &hi);
    if (mpt_size > 1)
        MPT_CHECK(lo < hi, "the dataset should give ranks different batch counts (%llu)",
                  (unsigned long long)lo);

    /* in lock-step every rank stops at the shortest */
    zp_worksource_destroy(ws);
    ws = NULL;
    MPT_CHECK(zp_mpi_worksource_create(m, ds, &wc, &ws) == ZP_OK);
    p = token_pipeline(ws);
    uint64_t steps = 0;
    zp_status st;
    while ((st = zp_mpi_next(m, p, &b)) == ZP_OK)
        steps++;
    MPT_CHECK(st == ZP_END);
    MPT_CHECK(steps == lo, "%llu steps, shortest rank %llu", (unsigned long long)steps,
              (unsigned long long)lo);
    MPT_CHECK(zp_mpi_batches_dropped(m) == (solo > lo ? 1u : 0u));
    if (solo > lo)
        MPT_CHECK(strstr(zp_mpi_errmsg(m), "ended first") != NULL, "'%s'", zp_mpi_errmsg(m));
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    mpt_job_close(&j);
    mpt_sync();
}

/* ------------------------------------------------------------ mixture in the report */

/* Run a 2-part mixture (3:1 over SIZES' first and last three shards) in
 * lock-step, with or without token packing; the report's parts must be the
 * sums over ranks of the ranks' own snapshots, in every format. */
static void run_mixture_report(mpt_job *j, int tokens)
{
    zp_mpi *m = j->m;
    size_t shards[2] = {3, 3};
    zp_mix_part parts[2] = {{"common", shards[0], 3}, {"rare", shards[1], 1}};
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.seed = 5;
    wc.parts = parts;
    wc.n_parts = 2;
    zp_worksource *ws = NULL;
    MPT_CHECK(zp_mpi_worksource_create(m, j->ds, &wc, &ws) == ZP_OK, "%s", zp_mpi_errmsg(m));
    zp_pipeline *p = NULL;
    if (ws && tokens) {
        p = token_pipeline(ws);
    } else if (ws) {
        zp_pipeline_config pc;
        zp_pipeline_config_init(&pc);
        pc.threads = 2;
        pc.microbatch_size = 7;
        pc.chunk_samples = 16;
        MPT_CHECK(zp_pipeline_create(ws, &pc, &p) == ZP_OK);
    }
    MPT_CHECK(p != NULL);
    MPT_CHECK(p && zp_pipeline_enable_observability(p) == ZP_OK);
    uint64_t seen[2] = {0, 0};
    const zp_batch *b;
    zp_status st = ZP_END;
    while (p && (st = zp_mpi_next(m, p, &b)) == ZP_OK)
        for (size_t i = 0; !tokens && i < b->n_samples; i++)
            seen[b->samples[i].part < 2 ? b->samples[i].part : 0]++;
    MPT_CHECK(st == ZP_END, "%s: %s", zp_status_str(st), zp_mpi_errmsg(m));

    zp_mpi_input in;
    memset(&in, 0, sizeof in);
    MPT_CHECK(p && zp_mpi_input_from_pipeline(p, &in) == ZP_OK);
    MPT_CHECK(in.metrics.n_parts == 2 && in.metrics.parts_total == 2, "%u/%u parts",
              in.metrics.n_parts, in.metrics.parts_total);
    if (!tokens)
        MPT_CHECK(in.metrics.parts[0].samples == seen[0] && in.metrics.parts[1].samples == seen[1]);
    else
        MPT_CHECK(in.metrics.parts[0].tokens > 0 && in.metrics.parts[1].tokens > 0,
                  "tokens %llu %llu, samples %llu %llu, batches %llu, tokens %llu",
                  (unsigned long long)in.metrics.parts[0].tokens,
                  (unsigned long long)in.metrics.parts[1].tokens,
                  (unsigned long long)in.metrics.parts[0].samples,
                  (unsigned long long)in.metrics.parts[1].samples,
                  (unsigned long long)in.metrics.batches, (unsigned long long)in.metrics.tokens);
    uint64_t mine[4] = {in.metrics.parts[0].samples, in.metrics.parts[0].tokens,
                        in.metrics.parts[1].samples, in.metrics.parts[1].tokens};
    uint64_t sums[4] = {0, 0, 0, 0};
    MPI_Reduce(mine, sums, 4, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    zp_cluster_report *rep = NULL;
    st = zp_mpi_report(m, &in, ZP_MPI_REPORT_FINAL, &rep);
    MPT_CHECK(st == ZP_OK, "%s", zp_mpi_errmsg(m));
    if (mpt_rank == 0 && rep) {
        const zp_part_metrics *pm = NULL;
        size_t total = 0;
        MPT_CHECK(zp_cluster_report_parts(rep, &pm, &total) == 2 && total == 2);
        const zp_mpi_rank_stats *t = zp_cluster_report_totals(rep);
        MPT_CHECK(sums[0] + sums[2] == t->samples, "parts %llu + %llu, totals %llu",
                  (unsigned long long)sums[0], (unsigned long long)sums[2],
                  (unsigned long long)t->samples);
        if (tokens)
            MPT_CHECK(sums[1] + sums[3] == t->tokens);
        else /* every rank delivered its whole plan: the quota schedule's shares */
            MPT_CHECK(fabs((double)sums[0] - 0.75 * (double)t->samples) <= 2.0 * mpt_size,
                      "common: %llu of %llu", (unsigned long long)sums[0],
                      (unsigned long long)t->samples);
        char *js = NULL;
        MPT_CHECK(zp_cluster_report_render(rep, ZP_MPI_JSON, &js, NULL) == ZP_OK);
        json_error_t err;
        json_t *root = js ? json_loads(js, 0, &err) : NULL;
        MPT_CHECK(root != NULL);
        json_t *mx = json_object_get(root, "mixture");
        MPT_CHECK(json_is_object(mx));
        MPT_CHECK(json_integer_value(json_object_get(mx, "parts_total")) == 2);
        json_t *pa = json_object_get(mx, "parts");
        MPT_CHECK(json_array_size(pa) == 2);
        for (size_t i = 0; i < 2 && i < json_array_size(pa); i++) {
            json_t *o = json_array_get(pa, i);
            const char *name = json_string_value(json_object_get(o, "name"));
            MPT_CHECK(name && strcmp(name, parts[i].name) == 0);
            MPT_CHECK(fabs(json_real_value(json_object_get(o, "weight")) - (i ? 0.25 : 0.75)) <
                      1e-9);
            MPT_CHECK((uint64_t)json_integer_value(json_object_get(o, "samples")) == sums[2 * i],
                      "part %zu: %lld samples, ranks' sum %llu", i,
                      (long long)json_integer_value(json_object_get(o, "samples")),
                      (unsigned long long)sums[2 * i]);
            MPT_CHECK((uint64_t)json_integer_value(json_object_get(o, "tokens")) ==
                      sums[2 * i + 1]);
            double sf = json_real_value(json_object_get(o, "sample_fraction"));
            MPT_CHECK(fabs(sf - (double)sums[2 * i] / (double)(sums[0] + sums[2])) < 1e-9);
        }
        json_decref(root);
        free(js);
        char *txt = NULL, *html = NULL;
        MPT_CHECK(zp_cluster_report_render(rep, ZP_MPI_TEXT, &txt, NULL) == ZP_OK);
        MPT_CHECK(txt && strstr(txt, "mixture (2 parts, summed over ranks):") &&
                  strstr(txt, "  common "), "%s", txt ? txt : "");
        MPT_CHECK(zp_cluster_report_render(rep, ZP_MPI_HTML, &html, NULL) == ZP_OK);
        MPT_CHECK(html && strstr(html, "<h2>Mixture</h2>") && strstr(html, ">rare<"));
        free(txt);
        free(html);
    }
    zp_cluster_report_destroy(rep);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
}

static void test_mixture_report(void **state)
{
    (void)state;
    /* a handle's lock-step delivery ends once: a job per run */
    for (int tokens = 0; tokens <= 1; tokens++) {
        mpt_job j;
        mpt_job_open(&j, "mix.json", SIZES, NS, -1);
        run_mixture_report(&j, tokens);
        mpt_job_close(&j);
        mpt_sync();
    }
}

static void test_error_reaches_every_rank(void **state)
{
    (void)state;
    static const size_t sz[] = {30, 30};
    mpt_job j;
    mpt_job_open(&j, "bad.json", sz, 2, 59); /* the last record */
    zp_mpi *m = j.m;
    uint64_t total = j.total;
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.shuffle = 0;
    wc.remainder = ZP_REMAINDER_DROP;
    zp_worksource *ws = NULL;
    MPT_CHECK(zp_mpi_worksource_create(m, j.ds, &wc, &ws) == ZP_OK);
    /* with DROP the last record is delivered only when the world size
     * divides the total */
    int failing = total % (uint64_t)mpt_size == 0 ? mpt_size - 1 : -1;
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = 1;
    pc.microbatch_size = 4;
    zp_pipeline *p = NULL;
    MPT_CHECK(zp_pipeline_create(ws, &pc, &p) == ZP_OK);
    const zp_batch *b;
    zp_status st;
    uint64_t steps = 0;
    while ((st = zp_mpi_next(m, p, &b)) == ZP_OK)
        steps++;
    if (failing < 0) {
        MPT_CHECK(st == ZP_END);
    } else {
        MPT_CHECK(st == ZP_ERR_FORMAT, "%s: %s", zp_status_str(st), zp_mpi_errmsg(m));
        /* every rank, the failing one too, names it first, then its message */
        char want[64];
        snprintf(want, sizeof want, "rank %d: ", failing);
        MPT_CHECK(strncmp(zp_mpi_errmsg(m), want, strlen(want)) == 0, "'%s'", zp_mpi_errmsg(m));
        MPT_CHECK(strstr(zp_mpi_errmsg(m), "bad.json-01.jsonl") != NULL, "'%s'", zp_mpi_errmsg(m));
        /* the error stays */
        MPT_CHECK(zp_mpi_next(m, p, &b) == ZP_ERR_FORMAT);
    }
    uint64_t lo, hi;
    mpt_minmax_u64(steps, &lo, &hi);
    MPT_CHECK(lo == hi);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    mpt_job_close(&j);
    mpt_sync();
}

/* Votes carried by zp_mpi_next: the user vote is the maximum over ranks at
 * every step; a stop vote set on the last rank only before step 3 ends the
 * stream on every rank at that step (ZP_END, no batch), with the reason and
 * the rank; an error on any rank still wins over a stop. */
static void test_votes(void **state)
{
    (void)state;
    static const size_t sz[] = {200, 200};
    mpt_job j;
    mpt_job_open(&j, "votes.json", sz, 2, -1);
    zp_mpi *m = j.m;
    MPT_CHECK(zp_mpi_set_vote(m, ZP_MPI_VOTE_COUNT, 1) == ZP_ERR_INVALID);
    MPT_CHECK(zp_mpi_vote(m, ZP_MPI_VOTE_USER) == 0);
    int rank = 7;
    MPT_CHECK(zp_mpi_stop_reason(m, &rank) == 0 && rank == -1);
    zp_worksource *ws = NULL;
    MPT_CHECK(zp_mpi_worksource_create(m, j.ds, NULL, &ws) == ZP_OK);
    zp_pipeline_config pc;
    zp_pipeline_config_init(&pc);
    pc.threads = 1;
    pc.microbatch_size = 2;
    zp_pipeline *p = NULL;
    MPT_CHECK(zp_pipeline_create(ws, &pc, &p) == ZP_OK);
    const zp_batch *b;
    zp_status st;
    uint64_t steps = 0;
    int last = mpt_size - 1;
    for (;;) {
        /* user vote: 10 x rank + step; the maximum is the last rank's */
        MPT_CHECK(zp_mpi_set_vote(m, ZP_MPI_VOTE_USER, 10 * mpt_rank + (int64_t)steps) == ZP_OK);
        if (steps == 3 && mpt_rank == last)
            MPT_CHECK(zp_mpi_set_vote(m, ZP_MPI_VOTE_STOP, 15) == ZP_OK);
        if ((st = zp_mpi_next(m, p, &b)) != ZP_OK)
            break;
        MPT_CHECK(zp_mpi_vote(m, ZP_MPI_VOTE_USER) == 10 * last + (int64_t)steps);
        MPT_CHECK(zp_mpi_stop_reason(m, NULL) == 0);
        steps++;
    }
    MPT_CHECK(st == ZP_END, "%s: %s", zp_status_str(st), zp_mpi_errmsg(m));
    MPT_CHECK(steps == 3, "%llu steps", (unsigned long long)steps);
    MPT_CHECK(zp_mpi_stop_reason(m, &rank) == 15 && rank == last, "rank %d", rank);
    MPT_CHECK(zp_mpi_vote(m, ZP_MPI_VOTE_STOP) == 15);
    MPT_CHECK(strstr(zp_mpi_errmsg(m), "voted to stop") != NULL, "'%s'", zp_mpi_errmsg(m));
    /* it stays ended, without communicating */
    MPT_CHECK(zp_mpi_next(m, p, &b) == ZP_END);
    MPT_CHECK(zp_mpi_batches_dropped(m) == 0);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    mpt_job_close(&j);

    /* an error on one rank wins over a stop vote on another */
    static const size_t sz2[] = {30, 30};
    mpt_job_open(&j, "votes_bad.json", sz2, 2, 0); /* the first record */
    m = j.m;
    zp_worksource_config wc;
    zp_worksource_config_init(&wc);
    wc.shuffle = 0;
    MPT_CHECK(zp_mpi_worksource_create(m, j.ds, &wc, &ws) == ZP_OK);
    MPT_CHECK(zp_pipeline_create(ws, &pc, &p) == ZP_OK);
    if (mpt_size > 1 && mpt_rank == last)
        MPT_CHECK(zp_mpi_set_vote(m, ZP_MPI_VOTE_STOP, 2) == ZP_OK);
    st = zp_mpi_next(m, p, &b);
    MPT_CHECK(st == ZP_ERR_FORMAT, "%s: %s", zp_status_str(st), zp_mpi_errmsg(m));
    MPT_CHECK(zp_mpi_stop_reason(m, NULL) == 0);
    zp_pipeline_destroy(p);
    zp_worksource_destroy(ws);
    mpt_job_close(&j);
    mpt_sync();
}

int main(int argc, char **argv)
{
    mpt_init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handle),
        cmocka_unit_test(test_agree_status),
        cmocka_unit_test(test_dataset_error_reaches_every_rank),
        cmocka_unit_test(test_dataset_names_as_given),
        cmocka_unit_test(test_exactly_once_pad),
        cmocka_unit_test(test_exactly_once_drop),
        cmocka_unit_test(test_reduction_exact),
        cmocka_unit_test(test_lockstep_tokens),
        cmocka_unit_test(test_mixture_report),
        cmocka_unit_test(test_error_reaches_every_rank),
        cmocka_unit_test(test_votes),
    };
    return mpt_finish(cmocka_run_group_tests_name("mpi_basic", tests, NULL, NULL));
}
