/*
 * mpi_coverage.c - the job's coverage certificate (zp_mpi_report_coverage):
 * every rank's per-epoch digests and a slice of each epoch's stream digest
 * summed over the ranks; for an epoch whose sums differ, each rank's digest
 * of its own plan, so that rank 0 names the ranks that differ; and the
 * certificate's section in the report's formats (text, JSON, CSV, HTML).
 * docs/report.md, "Coverage certificate".
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_internal.h"

/* One rank's record per epoch, as uint64 words. */
enum {
    R_DEL = 0,     /* delivered: count, sum, xor */
    R_EXP = 3,     /* its plan's: count, sum, xor */
    R_STREAM = 6,  /* its slice of the stream: count, sum, xor */
    R_PADDED = 9,
    R_FLAGS = 10,  /* 1: valid, 2: finished, 4: its plan's digest is in R_EXP */
    R_WORDS = 11
};

static zp_coverage cov_at(const uint64_t *w)
{
    zp_coverage c = {w[0], w[1], w[2]};
    return c;
}

static void put_cov(uint64_t *w, const zp_coverage *c)
{
    w[0] = c->count;
    w[1] = c->sum;
    w[2] = c->xr;
}

/* Take the samples of the batches zp_mpi_next did not deliver out of the
 * pipeline's digest of `epoch` (sum and count subtract, xor is its own
 * inverse). */
static void take_undelivered(const zp_mpi *m, uint32_t epoch, zp_epoch_coverage *c)
{
    for (size_t k = 0; k < m->n_undelivered; k++) {
        const zp_sample *s = &m->undelivered[k];
        if (s->epoch != epoch)
            continue;
        c->finished = 0; /* its stream stopped inside the epoch */
        if (s->padded) {
            c->padded--;
            continue;
        }
        uint64_t x = zp_coverage_mix(s->global_id, s->pass);
        c->delivered.count--;
        c->delivered.sum -= x;
        c->delivered.xr ^= x;
    }
}

/* This rank's records for epochs lo .. lo + n - 1 into w (n x R_WORDS):
 * what it delivered and, for the epochs that some rank finished (any[i]),
 * its slice of the epoch's stream. An epoch no rank finished (a run
 * stopped by a batch limit) is listed with its delivered digest, not
 * judged. */
static void local_records(zp_mpi *m, zp_pipeline *p, uint32_t lo, uint32_t n,
                          const uint64_t *any, uint64_t *w)
{
    for (uint32_t i = 0; i < n; i++) {
        uint64_t *x = w + (size_t)i * R_WORDS;
        memset(x, 0, R_WORDS * sizeof *x);
        if (!p)
            continue;
        zp_epoch_coverage c;
        zp_coverage slice = {0};
        zp_status st = zp_pipeline_coverage(p, lo + i, 0, &c);
        if (st == ZP_OK && any[i])
            st = zp_pipeline_stream_coverage(p, lo + i, (uint32_t)m->rank, (uint32_t)m->size,
                                             &slice);
        if (st != ZP_OK) {
            zpi_mpi_fail(m, st, "coverage of epoch %u: %s", lo + i, zp_pipeline_errmsg(p));
            continue;
        }
        take_undelivered(m, lo + i, &c);
        put_cov(x + R_DEL, &c.delivered);
        put_cov(x + R_STREAM, &slice);
        x[R_PADDED] = c.padded;
        x[R_FLAGS] = (m->undelivered_lost ? 0u : 1u) | (c.finished ? 2u : 0u);
    }
}

/* The epochs whose job digest differs from the stream's (bad[i]), from
 * every rank's records: one MPI_Allreduce of the counts and sums, one of
 * the xors; the same answer on every rank. */
static zp_status job_digests(zp_mpi *m, const uint64_t *w, uint32_t n, const uint64_t *any,
                             uint8_t *bad, int root_ok, int *gather)
{
    /* the last word: 1 when rank 0 holds the gather's buffer */
    uint64_t sum[5 * ZP_COVERAGE_MAX_EPOCHS + 1], sum_out[5 * ZP_COVERAGE_MAX_EPOCHS + 1];
    uint64_t xr[2 * ZP_COVERAGE_MAX_EPOCHS], xr_out[2 * ZP_COVERAGE_MAX_EPOCHS];
    for (uint32_t i = 0; i < n; i++) {
        const uint64_t *x = w + (size_t)i * R_WORDS;
        uint64_t *s5 = sum + 5 * i;
        s5[0] = x[R_DEL];
        s5[1] = x[R_DEL + 1];
        s5[2] = x[R_STREAM];
        s5[3] = x[R_STREAM + 1];
        s5[4] = x[R_FLAGS] & 1u; /* ranks that gave their digests */
        xr[2 * i] = x[R_DEL + 2];
        xr[2 * i + 1] = x[R_STREAM + 2];
    }
    sum[5 * n] = m->rank == 0 && root_ok;
    zp_status st = zpi_mpi_check(
        m, zpi_coll_allreduce(m, sum, sum_out, (int)(5 * n + 1), MPI_UINT64_T, MPI_SUM),
        "MPI_Allreduce (coverage)");
    *gather = st == ZP_OK && sum_out[5 * n] == 1;
    if (st == ZP_OK)
        st = zpi_mpi_check(
            m, zpi_coll_allreduce(m, xr, xr_out, (int)(2 * n), MPI_UINT64_T, MPI_BXOR),
            "MPI_Allreduce (coverage)");
    for (uint32_t i = 0; st == ZP_OK && i < n; i++) {
        const uint64_t *s5 = sum_out + 5 * i;
        bad[i] = any[i] && s5[4] == (uint64_t)m->size &&
                 (s5[0] != s5[2] || s5[1] != s5[3] || xr_out[2 * i] != xr_out[2 * i + 1]);
    }
    return st;
}

/* For the epochs that failed: this rank's plan digest (checked, 4), so that
 * rank 0 names the ranks that differ from their plans. */
static void plan_records(zp_mpi *m, zp_pipeline *p, uint32_t lo, uint32_t n, const uint8_t *bad,
                         uint64_t *w)
{
    for (uint32_t i = 0; p && i < n; i++) {
        uint64_t *x = w + (size_t)i * R_WORDS;
        if (!bad[i] || !(x[R_FLAGS] & 1u))
            continue;
        zp_epoch_coverage c;
        if (zp_pipeline_coverage(p, lo + i, 1, &c) != ZP_OK) {
            zpi_mpi_fail(m, ZP_ERR_STATE, "coverage of epoch %u: %s", lo + i,
                         zp_pipeline_errmsg(p));
            continue; /* not checked: rank 0 counts it unchecked */
        }
        put_cov(x + R_EXP, &c.expected);
        if (c.checked)
            x[R_FLAGS] |= 4u;
    }
}

/* Rank 0: the certificate of one epoch from every rank's record. */
static void judge(zp_coverage_cert *c, uint32_t epoch, const uint64_t *all, uint32_t n, uint32_t i,
                  int size, int bad)
{
    memset(c, 0, sizeof *c);
    c->epoch = epoch;
    c->ranks = size;
    c->certified = 1;
    int *differ = malloc((size_t)size * sizeof *differ);
    int *unfinished = malloc((size_t)size * sizeof *unfinished);
    for (int r = 0; r < size; r++) {
        const uint64_t *x = all + ((size_t)r * n + i) * R_WORDS;
        if (!(x[R_FLAGS] & 1u)) {
            c->certified = 0;
            continue;
        }
        zp_coverage d = cov_at(x + R_DEL), e = cov_at(x + R_EXP), s = cov_at(x + R_STREAM);
        zp_coverage_merge(&c->delivered, &d);
        zp_coverage_merge(&c->expected, &s);
        c->padded += x[R_PADDED];
        if (!bad)
            ; /* the job's digest holds: the ranks' plans were not asked */
        else if (!(x[R_FLAGS] & 4u))
            c->n_unchecked++;
        else if (!zp_coverage_equal(&d, &e) && differ)
            differ[c->n_differ++] = r;
        if (!(x[R_FLAGS] & 2u) && unfinished)
            unfinished[c->n_unfinished++] = r;
    }
    if (differ)
        zpi_mpi_ranklist(c->differ, sizeof c->differ, differ, (size_t)c->n_differ);
    if (unfinished)
        zpi_mpi_ranklist(c->unfinished, sizeof c->unfinished, unfinished,
                         (size_t)c->n_unfinished);
    free(differ);
    free(unfinished);
    c->ok = c->certified && zp_coverage_equal(&c->delivered, &c->expected);
    if (c->delivered.count < c->expected.count)
        c->missing = c->expected.count - c->delivered.count;
    else
        c->repeated = c->delivered.count - c->expected.count;
}

zp_status zp_mpi_report_coverage(zp_mpi *m, zp_pipeline *p, zp_cluster_report *r)
{
    ZPI_MPI_USABLE(m);
    /* the epochs: from the lowest any rank delivered to the highest (the
     * last ZP_COVERAGE_MAX_EPOCHS) */
    uint64_t mine[2] = {UINT64_MAX, 0}; /* lowest, UINT64_MAX - highest */
    size_t ne = p ? zp_pipeline_coverage_epochs(p, NULL, 0) : 0;
    if (ne) {
        uint32_t *ep = malloc(ne * sizeof *ep);
        if (ep) {
            zp_pipeline_coverage_epochs(p, ep, ne);
            mine[0] = ep[0];
            mine[1] = UINT64_MAX - ep[ne - 1];
        } else {
            p = NULL; /* not certified */
        }
        free(ep);
    } else {
        mine[1] = UINT64_MAX;
    }
    uint64_t range[2];
    zp_status st = zpi_mpi_check(
        m, zpi_coll_allreduce(m, mine, range, 2, MPI_UINT64_T, MPI_MIN), "MPI_Allreduce (coverage)");
    if (st != ZP_OK)
        return st;
    if (range[0] == UINT64_MAX) { /* no rank delivered anything */
        if (r) {
            free(r->cov);
            r->cov = NULL;
            r->n_cov = 0;
        }
        return ZP_OK;
    }
    uint32_t hi = (uint32_t)(UINT64_MAX - range[1]), lo = (uint32_t)range[0];
    if (hi - lo >= ZP_COVERAGE_MAX_EPOCHS)
        lo = hi - ZP_COVERAGE_MAX_EPOCHS + 1;
    const uint32_t n = hi - lo + 1;
    /* which epochs some rank finished: only those are judged (and cost
     * their plans' and stream's digests) */
    uint64_t fin[ZP_COVERAGE_MAX_EPOCHS] = {0}, any[ZP_COVERAGE_MAX_EPOCHS];
    if (p) {
        zp_worksource_state rs;
        zp_pipeline_resume_state(p, &rs);
        for (uint32_t i = 0; i < n; i++)
            fin[i] = rs.epoch > lo + i;
        for (size_t k = 0; k < m->n_undelivered; k++) /* not past what it did not deliver */
            if (m->undelivered[k].epoch >= lo && m->undelivered[k].epoch - lo < n)
                fin[m->undelivered[k].epoch - lo] = 0;
    }
    st = zpi_mpi_check(m, zpi_coll_allreduce(m, fin, any, (int)n, MPI_UINT64_T, MPI_MAX),
                       "MPI_Allreduce (coverage)");
    if (st != ZP_OK)
        return st;
    uint64_t *w = calloc((size_t)n * R_WORDS, sizeof *w);
    uint64_t *all = m->rank == 0 ? calloc((size_t)n * R_WORDS * (size_t)m->size, sizeof *all) : NULL;
    uint8_t bad[ZP_COVERAGE_MAX_EPOCHS] = {0};
    if (w)
        local_records(m, p, lo, n, any, w);
    /* out of memory: the collectives still run, with zeros (not valid) */
    static const uint64_t zero_rec[R_WORDS * ZP_COVERAGE_MAX_EPOCHS];
    int gather = 0;
    st = job_digests(m, w ? w : zero_rec, n, any, bad, all != NULL, &gather);
    if (st == ZP_OK && !gather) /* rank 0 could not hold the records: no gather */
        st = zpi_mpi_fail(m, ZP_ERR_NOMEM, "out of memory for the coverage certificate (rank 0)");
    if (st != ZP_OK) {
        free(w);
        free(all);
        return st;
    }
    if (w)
        plan_records(m, p, lo, n, bad, w);
    /* out of memory on this rank: it sends zeros (not valid) */
    const void *send = w ? (const void *)w : (const void *)zero_rec;
    st = zpi_mpi_check(m, zpi_coll_gather(m, send, all, (int)(n * R_WORDS), MPI_UINT64_T, 0),
                       "MPI_Gather (coverage)");
    free(w);
    if (st == ZP_OK && m->rank == 0 && r) {
        zp_coverage_cert *c = all ? calloc(n, sizeof *c) : NULL;
        if (!c) {
            st = zpi_mpi_fail(m, ZP_ERR_NOMEM, "out of memory for the coverage certificate");
        } else {
            for (uint32_t i = 0; i < n; i++) {
                judge(&c[i], lo + i, all, n, i, m->size, bad[i]);
                c[i].judged = any[i] != 0;
                if (!c[i].judged) { /* nothing expected was computed */
                    c[i].ok = 0;
                    c[i].missing = c[i].repeated = 0;
                    c[i].n_differ = c[i].n_unchecked = 0;
                    c[i].differ[0] = '\0';
                    memset(&c[i].expected, 0, sizeof c[i].expected);
                }
            }
            free(r->cov);
            r->cov = c;
            r->n_cov = n;
        }
    }
    free(all);
    return st;
}

size_t zp_cluster_report_coverage(const zp_cluster_report *r, const zp_coverage_cert **out)
{
    if (out)
        *out = r ? r->cov : NULL;
    return r ? r->n_cov : 0;
}

void zp_coverage_cert_line(const zp_coverage_cert *c, char *buf, size_t cap)
{
    if (!buf || !cap)
        return;
    buf[0] = '\0';
    if (!c)
        return;
    size_t len = 0;
    if (!c->judged) {
        zpi_mpi_append(buf, cap, &len,
                       "epoch %" PRIu32 ": not finished by any rank (%" PRIu64
                       " samples delivered): not judged",
                       c->epoch, c->delivered.count);
        return;
    }
    if (!c->certified)
        zpi_mpi_append(buf, cap, &len, "epoch %" PRIu32 ": not certified: a rank could not give "
                                       "its digests",
                       c->epoch);
    else if (c->ok)
        zpi_mpi_append(buf, cap, &len,
                       "epoch %" PRIu32 ": every sample once (%" PRIu64 " samples, %d rank%s",
                       c->epoch, c->delivered.count, c->ranks, c->ranks == 1 ? "" : "s");
    else if (c->missing)
        zpi_mpi_append(buf, cap, &len,
                       "epoch %" PRIu32 ": NOT every sample once: %" PRIu64 " missing (%" PRIu64
                       " of %" PRIu64 " delivered",
                       c->epoch, c->missing, c->delivered.count, c->expected.count);
    else if (c->repeated)
        zpi_mpi_append(buf, cap, &len,
                       "epoch %" PRIu32 ": NOT every sample once: %" PRIu64 " repeated (%" PRIu64
                       " delivered, %" PRIu64 " planned",
                       c->epoch, c->repeated, c->delivered.count, c->expected.count);
    else
        zpi_mpi_append(buf, cap, &len,
                       "epoch %" PRIu32 ": NOT every sample once: as many samples as planned (%" PRIu64
                       ") but not the same ones",
                       c->epoch, c->expected.count);
    if (c->certified && (c->ok || c->missing || c->repeated)) {
        if (c->padded)
            zpi_mpi_append(buf, cap, &len, ", %" PRIu64 " padded", c->padded);
        zpi_mpi_append(buf, cap, &len, ")");
    }
    if (c->n_differ)
        zpi_mpi_append(buf, cap, &len, "; %s %s %s from %s plan%s",
                       c->n_differ == 1 ? "rank" : "ranks", c->differ,
                       c->n_differ == 1 ? "differs" : "differ", c->n_differ == 1 ? "its" : "their",
                       c->n_differ == 1 ? "" : "s");
    if (c->n_unfinished)
        zpi_mpi_append(buf, cap, &len, "; %s %s %s not past the epoch",
                       c->n_unfinished == 1 ? "rank" : "ranks", c->unfinished,
                       c->n_unfinished == 1 ? "is" : "are");
    if (c->n_unchecked)
        zpi_mpi_append(buf, cap, &len, "; %d rank%s without a plan digest", c->n_unchecked,
                       c->n_unchecked == 1 ? "" : "s");
}

/* ------------------------------------------------------------ the report's section */

void zpi_mpi_coverage_text(const zp_cluster_report *r, zpi_sbuf *b)
{
    if (!r->n_cov)
        return;
    zpi_sb_puts(b, "\ncoverage certificate (samples delivered against each epoch's plan):\n");
    for (size_t i = 0; i < r->n_cov; i++) {
        char line[512];
        zp_coverage_cert_line(&r->cov[i], line, sizeof line);
        zpi_sb_printf(b, "  %s\n", line);
    }
}

static json_t *u64_json(uint64_t v)
{
    return v <= (uint64_t)INT64_MAX ? json_integer((json_int_t)v) : json_real((double)v);
}

static json_t *hex_json(uint64_t v)
{
    char s[24];
    snprintf(s, sizeof s, "%016" PRIx64, v);
    return json_string(s);
}

json_t *zpi_mpi_coverage_json(const zp_cluster_report *r)
{
    if (!r->n_cov)
        return NULL;
    json_t *a = json_array();
    for (size_t i = 0; a && i < r->n_cov; i++) {
        const zp_coverage_cert *c = &r->cov[i];
        char line[512];
        zp_coverage_cert_line(c, line, sizeof line);
        json_t *o = json_object();
        json_object_set_new(o, "epoch", json_integer(c->epoch));
        json_object_set_new(o, "judged", json_boolean(c->judged));
        json_object_set_new(o, "certified", json_boolean(c->certified));
        json_object_set_new(o, "every_sample_once", json_boolean(c->ok));
        json_object_set_new(o, "delivered", u64_json(c->delivered.count));
        json_object_set_new(o, "expected", u64_json(c->expected.count));
        json_object_set_new(o, "missing", u64_json(c->missing));
        json_object_set_new(o, "repeated", u64_json(c->repeated));
        json_object_set_new(o, "padded", u64_json(c->padded));
        json_object_set_new(o, "ranks_differing", json_string(c->differ));
        json_object_set_new(o, "ranks_not_past_epoch", json_string(c->unfinished));
        json_object_set_new(o, "ranks_unchecked", json_integer(c->n_unchecked));
        json_object_set_new(o, "delivered_digest", json_pack("[o,o]", hex_json(c->delivered.sum),
                                                             hex_json(c->delivered.xr)));
        json_object_set_new(o, "expected_digest", json_pack("[o,o]", hex_json(c->expected.sum),
                                                            hex_json(c->expected.xr)));
        json_object_set_new(o, "text", json_string(line));
        json_array_append_new(a, o);
    }
    return a;
}

void zpi_mpi_coverage_csv(const zp_cluster_report *r, zpi_sbuf *b)
{
    zpi_sb_puts(b, "epoch,judged,certified,every_sample_once,delivered,expected,missing,repeated,"
                   "padded,ranks_differing,ranks_not_past_epoch,ranks_unchecked\n");
    for (size_t i = 0; i < r->n_cov; i++) {
        const zp_coverage_cert *c = &r->cov[i];
        zpi_sb_printf(b, "%" PRIu32 ",%d,%d,%d,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64
                         ",%" PRIu64 ",",
                      c->epoch, c->judged, c->certified, c->ok, c->delivered.count, c->expected.count,
                      c->missing, c->repeated, c->padded);
        zpi_sb_csv(b, c->differ);
        zpi_sb_puts(b, ",");
        zpi_sb_csv(b, c->unfinished);
        zpi_sb_printf(b, ",%d\n", c->n_unchecked);
    }
}

void zpi_mpi_coverage_html(const zp_cluster_report *r, zpi_sbuf *b)
{
    if (!r->n_cov)
        return;
    zpi_sb_puts(b, "<h2>Coverage certificate</h2>\n<ul class=\"coverage\">\n");
    for (size_t i = 0; i < r->n_cov; i++) {
        char line[512];
        zp_coverage_cert_line(&r->cov[i], line, sizeof line);
        zpi_sb_printf(b, "<li class=\"%s\">", r->cov[i].ok ? "ok" : "bad");
        zpi_sb_html(b, line);
        zpi_sb_puts(b, "</li>\n");
    }
    zpi_sb_puts(b, "</ul>\n");
}
