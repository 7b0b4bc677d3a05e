/* report_sim.c - see report_sim.h. */
#include "report_sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Rank i's record after window w (0-based) of 10 s. */
static void record(zp_mpi_rank_stats *s, int i, int w, int slow, int final)
{
    /* +-5% noise per rank and window (so the heat map's runs of equal
     * colour are short: its size near the worst case) */
    uint64_t h = (uint64_t)i * 0x9e3779b97f4a7c15ULL ^ (uint64_t)w * 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 31;
    h *= 0x94d049bb133111ebULL;
    h ^= h >> 29;
    double noise = 1 + 0.1 * ((double)(h % 1000) / 1000.0 - 0.5);
    double steady = (i == slow ? 2.5e-3 : 1e-3 * (1 + 0.001 * (i % 97)) * noise);
    double win = w == 0 ? 20e-3 : steady;
    uint64_t per_win = 100;
    memset(s, 0, sizeof *s);
    s->rank = i;
    s->node = i / 8;
    s->local_rank = i % 8;
    s->valid = 1;
    s->threads = 4;
    s->report_index = (uint32_t)w;
    s->batches = per_win * (uint64_t)(w + 1);
    s->samples = s->batches * 32;
    s->records = s->samples;
    s->bytes_fetched = s->samples * 2000;
    s->bytes_read = s->bytes_fetched / 3;
    s->shards_opened = (uint64_t)(w + 1) * 3;
    s->wall = 10.0 * (w + 1);
    s->first_batch = 1;
    s->fetch = 20e-3 * (double)per_win + steady * (double)(per_win * (uint64_t)w);
    s->open = s->fetch * 0.3;
    s->read = s->open * 0.5;
    s->decompress = s->open * 0.4;
    s->stall_fraction = i == slow ? 0.3 : 0.01;
    s->stall = s->stall_fraction * (s->wall - 1);
    s->step = s->wall / (double)s->batches;
    s->fetch_per_batch = s->fetch / (double)s->batches;
    s->samples_per_second = (double)s->samples / s->wall;
    s->bytes_per_second = (double)s->bytes_fetched / s->wall;
    s->slowest_shard = 0.05 + 0.001 * (i % 13);
    s->slowest_shard_index = i % 1000;
    s->win_batches = per_win;
    s->win_seconds = 10;
    s->win_fetch_per_batch = win;
    s->win_stall_fraction = s->stall_fraction;
    (void)final;
}

zp_cluster_report *zp_sim_report(const zp_sim_opts *o, double *analysis_s)
{
    int n = o->ranks;
    zp_mpi *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    zp_mpi_config_init(&m->cfg);
    if (o->history > 0)
        m->cfg.max_windows = (uint32_t)o->history;
    m->size = n;
    m->nodes = (n + 7) / 8;
    m->hosts = calloc((size_t)n, ZPI_MPI_HOST);
    m->hist.cap = m->cfg.max_windows;
    m->hist.fetch = malloc((size_t)m->hist.cap * (size_t)n * sizeof *m->hist.fetch);
    m->hist.t_end = calloc(m->hist.cap, sizeof *m->hist.t_end);
    m->hist.streak = calloc((size_t)n, sizeof *m->hist.streak);
    m->pend.recv = calloc((size_t)n, sizeof *m->pend.recv);
    /* the dataset, named shard by shard on the command line */
    char **specs = calloc(o->shards ? o->shards : 1, sizeof *specs);
    size_t extra_cap = 256 + o->shards * 40;
    char *extra = malloc(extra_cap);
    zp_cluster_report *final = NULL;
    if (!m->hosts || !m->hist.fetch || !m->hist.t_end || !m->hist.streak || !m->pend.recv ||
        !specs || !extra)
        goto out;
    size_t len = (size_t)snprintf(extra, extra_cap,
                                  "tokenize=gpt2 field=text map=none start_epoch=0 max_batches=0 "
                                  "report_every=100 data=");
    for (uint64_t k = 0; k < o->shards; k++) {
        char name[64];
        snprintf(name, sizeof name, "/lustre/corpus/shard-%06llu.jsonl.zst", (unsigned long long)k);
        if (!(specs[k] = strdup(name)))
            goto out;
        len += (size_t)snprintf(extra + len, extra_cap - len, "%s%s", k ? "," : "", name);
    }
    m->info.have_dataset = m->info.have_ws = m->info.have_pc = 1;
    m->info.ds_shards = o->shards;
    m->info.ds_samples = o->shards * 50000;
    m->info.ds_bytes = o->shards * 250000000ULL;
    m->info.ds_fingerprint = 0x5eed5eed5eed5eedULL;
    zp_worksource_config_init(&m->info.ws);
    m->info.ws.world_size = (uint32_t)n;
    zp_pipeline_config_init(&m->info.pc);
    zpi_mpi_data_summary(m->data, sizeof m->data, (const char *const *)specs, o->shards);
    memcpy(m->info.data, m->data, sizeof m->info.data);
    m->info.extra = extra;
    extra = NULL;
    for (int i = 0; i < n; i++)
        snprintf(m->hosts + (size_t)i * ZPI_MPI_HOST, ZPI_MPI_HOST, "gpu-node%05d", i / 8);

    /* the reductions as ranks without a mixture give them: every minimum
     * "none" (UINT64_MAX - 0), so the report lists no mixture parts */
    for (size_t k = 0; k < sizeof m->pend.hmin_out / sizeof m->pend.hmin_out[0]; k++)
        m->pend.hmin_out[k] = UINT64_MAX;
    double t[10] = {0};
    int nt = 0;
    for (int w = 0; w <= o->windows; w++) {
        int is_final = w == o->windows;
        for (int i = 0; i < n; i++)
            record(&m->pend.recv[i], i, is_final ? w - 1 : w, o->slow, is_final);
        m->reports++;
        m->pend.t0 = zpi_now();
        m->pend.kind = is_final ? ZP_MPI_REPORT_FINAL : ZP_MPI_REPORT_WINDOW;
        zp_cluster_report *r = NULL;
        if (zpi_mpi_analyse(m, &m->pend, &r) != ZP_OK)
            goto out;
        if (!is_final && w >= o->windows - 10)
            t[nt++] = zp_cluster_report_analysis_seconds(r);
        if (is_final)
            final = r;
        else
            zp_cluster_report_destroy(r);
    }
    if (analysis_s) {
        qsort(t, (size_t)nt, sizeof *t, cmp_d);
        *analysis_s = nt ? t[nt / 2] : 0;
    }
out:
    if (specs)
        for (uint64_t k = 0; k < o->shards; k++)
            free(specs[k]);
    free(specs);
    free(extra);
    free(m->hosts);
    free(m->hist.fetch);
    free(m->hist.t_end);
    free(m->hist.streak);
    free(m->pend.recv);
    zpi_mpi_info_free(&m->info);
    free(m);
    return final;
}
