/* run_print.c - what `zephon run` prints and writes: the summary (with a
 * mixture's realized proportions), the snapshots (table or JSON lines),
 * the metrics document, the state file, and the output files, whose write
 * errors are reported when they happen (path and the system's reason). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "run_opts.h"
#include "base/fsio.h"
#include "base/util.h"

/* ------------------------------------------------------------ output files */

static void out_fail(cli_out *o, int e)
{
    if (!o->failed)
        fprintf(stderr, "zephon run: cannot write '%s': %s\n", o->path,
                e ? strerror(e) : "write error");
    o->failed = 1;
}

int cli_out_open(cli_out *o, const char *path)
{
    memset(o, 0, sizeof *o);
    zpi_fmt(o->path, sizeof o->path, "%s", path);
    o->f = fopen(path, "w");
    if (!o->f) {
        out_fail(o, errno);
        return -1;
    }
    return 0;
}

int cli_out_printf(cli_out *o, const char *fmt, ...)
{
    if (o->failed)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    errno = 0;
    int n = vfprintf(o->f, fmt, ap);
    va_end(ap);
    /* stdio writes a full buffer inside vfprintf: its error shows here,
     * when it happens, not at the end of the run */
    if (n < 0 || ferror(o->f)) {
        out_fail(o, errno);
        return -1;
    }
    return 0;
}

int cli_out_close(cli_out *o)
{
    if (!o->f)
        return o->failed ? -1 : 0;
    errno = 0;
    int r = fflush(o->f);
    int e = errno;
    if ((r != 0 || ferror(o->f)) && !o->failed)
        out_fail(o, e);
    errno = 0;
    if (fclose(o->f) != 0 && !o->failed)
        out_fail(o, errno);
    o->f = NULL;
    return o->failed ? -1 : 0;
}

/* Writes a whole document: atomically (beside it, then renamed) for a
 * regular file or a new path; directly to anything else (/dev/stdout, a
 * pipe, a device), which cannot be renamed over. 0, or -1 with errno. */
static int write_document(const char *path, const char *data, size_t len)
{
    struct stat sb;
    if (stat(path, &sb) != 0 || S_ISREG(sb.st_mode))
        return zpi_write_file_atomic(path, data, len);
    int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0)
        return -1;
    while (len) {
        ssize_t w = write(fd, data, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            close(fd);
            errno = e;
            return -1;
        }
        data += w;
        len -= (size_t)w;
    }
    return close(fd);
}

int cli_run_write_state(const char *path, const char *data, size_t len)
{
    /* durable (the rename survives a crash), and what saves killed while
     * writing left beside it is removed first (base/fsio.h) */
    zpi_err err = {0};
    (void)zpi_tmp_sweep_for(path);
    if (zpi_write_durable(path, data, len, &err) != ZP_OK) {
        fprintf(stderr, "zephon run: --save-state: %s\n", zpi_err_msg(&err));
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ summary */

static double frac(uint64_t a, uint64_t total) { return total ? (double)a / (double)total : 0.0; }

/* The realized proportions per phase of a weight schedule: a JSON member
 * ("phases": [{"start", "samples", "parts": [{"weight", "samples",
 * "fraction"}, ...]}, ...]), or one line per phase that delivered samples. */
static void print_phases(const cli_run_opts *o, const cli_run_result *r)
{
    const size_t n = r->n_parts;
    if (o->json)
        printf(",\"phases\":[");
    else
        printf("  schedule: realized proportions per phase (fraction / weight as used)\n");
    for (size_t k = 0; k < r->n_phases; k++) {
        uint64_t t = 0;
        for (size_t i = 0; i < n; i++)
            t += r->phase_samples[k * n + i];
        if (o->json) {
            printf("%s{\"start\":%llu,\"samples\":%llu,\"parts\":[", k ? "," : "",
                   (unsigned long long)r->phase_start[k], (unsigned long long)t);
            for (size_t i = 0; i < n; i++)
                printf("%s{\"weight\":%.15g,\"samples\":%llu,\"fraction\":%.6f}", i ? "," : "",
                       r->phase_weight[k * n + i], (unsigned long long)r->phase_samples[k * n + i],
                       frac(r->phase_samples[k * n + i], t));
            printf("]}");
            continue;
        }
        if (!t)
            continue;
        printf("    phase %zu from draw %llu: %llu samples:", k,
               (unsigned long long)r->phase_start[k], (unsigned long long)t);
        for (size_t i = 0; i < n; i++)
            printf(" %s %.4f/%.4g", r->parts[i].name, frac(r->phase_samples[k * n + i], t),
                   r->phase_weight[k * n + i]);
        printf("\n");
    }
    if (o->json)
        printf("]");
}

/* The mixture's realized proportions (2+ parts): a JSON member, or lines. */
static void print_parts(const cli_run_opts *o, const cli_run_result *r)
{
    uint64_t ts = 0, tt = 0;
    for (size_t k = 0; k < r->n_parts; k++) {
        ts += r->parts[k].samples;
        tt += r->parts[k].tokens;
    }
    if (o->json) {
        printf(",\"parts\":[");
        for (size_t k = 0; k < r->n_parts; k++) {
            const cli_run_part_count *c = &r->parts[k];
            json_t *nm = json_string(c->name);
            char *name = nm ? json_dumps(nm, JSON_ENCODE_ANY) : NULL;
            json_decref(nm);
            printf("%s{\"name\":%s,\"weight\":%.15g,\"samples\":%llu,\"sample_fraction\":%.6f,"
                   "\"tokens\":%llu,\"token_fraction\":%.6f}",
                   k ? "," : "", name ? name : "null", c->weight, (unsigned long long)c->samples,
                   frac(c->samples, ts), (unsigned long long)c->tokens, frac(c->tokens, tt));
            free(name);
        }
        printf("]");
        return;
    }
    int w = 4;
    for (size_t k = 0; k < r->n_parts; k++) {
        int l = (int)strlen(r->parts[k].name);
        if (l > w)
            w = l > 60 ? 60 : l;
    }
    printf("  mixture: realized proportions of the delivered samples%s\n",
           tt ? " and tokens" : "");
    printf("    %-*s %8s %12s %9s", w, "part", "weight", "samples", "fraction");
    if (tt)
        printf(" %14s %9s", "tokens", "fraction");
    printf("\n");
    for (size_t k = 0; k < r->n_parts; k++) {
        const cli_run_part_count *c = &r->parts[k];
        printf("    %-*.*s %8.6g %12llu %9.4f", w, w, c->name, c->weight,
               (unsigned long long)c->samples, frac(c->samples, ts));
        if (tt)
            printf(" %14llu %9.4f", (unsigned long long)c->tokens, frac(c->tokens, tt));
        printf("\n");
    }
}

/* Token modes: the packing and how well its rows are used. */
static const char *pack_word(const cli_run_opts *o)
{
    return o->pack == ZP_PACK_PAD ? "pad" : o->pack == ZP_PACK_BESTFIT ? "bestfit" : "concat";
}

static void packing_fractions(const cli_run_result *r, double *pad, double *cut)
{
    uint64_t rowtok = r->counts.tokens + r->counts.pad_tokens;
    *pad = rowtok ? (double)r->counts.pad_tokens / (double)rowtok : 0;
    *cut = r->counts.samples ? (double)r->counts.cut_documents / (double)r->counts.samples : 0;
}

/* One epoch's coverage in words (a plain run's own check). */
static void cov_line(const cli_run_cov *c, char *buf, size_t cap)
{
    const char *what = c->whole ? "every sample once" : "this rank's plan delivered";
    if (!c->judged)
        snprintf(buf, cap, "epoch %u: not finished (%llu samples delivered): not judged",
                 c->epoch, (unsigned long long)c->delivered.count);
    else if (c->ok)
        snprintf(buf, cap, "epoch %u: %s (%llu samples%s)", c->epoch, what,
                 (unsigned long long)c->delivered.count, c->padded ? ", padding apart" : "");
    else if (c->delivered.count < c->expected.count)
        snprintf(buf, cap, "epoch %u: NOT %s: %llu missing (%llu of %llu delivered)", c->epoch,
                 what, (unsigned long long)(c->expected.count - c->delivered.count),
                 (unsigned long long)c->delivered.count, (unsigned long long)c->expected.count);
    else if (c->delivered.count > c->expected.count)
        snprintf(buf, cap, "epoch %u: NOT %s: %llu repeated (%llu delivered, %llu planned)",
                 c->epoch, what, (unsigned long long)(c->delivered.count - c->expected.count),
                 (unsigned long long)c->delivered.count, (unsigned long long)c->expected.count);
    else
        snprintf(buf, cap, "epoch %u: NOT %s: as many samples as planned (%llu) but not the same "
                           "ones",
                 c->epoch, what, (unsigned long long)c->expected.count);
}

/* --memory-budget: the plan's parts (zephon/memory.h). */
static void print_memory_json(const zp_memory_plan *m)
{
    printf(",\"memory\":{\"budget\":%llu,\"total\":%llu,\"batch_bytes\":%llu,"
           "\"queue_batches\":%llu,\"queue_bytes\":%llu,\"in_flight_chunks\":%llu,"
           "\"chunk_bytes\":%llu,\"chunks_bytes\":%llu,\"pack_bytes\":%llu,"
           "\"cache_shards\":%llu,\"cache_loads\":%llu,\"shard_bytes\":%llu,"
           "\"cache_bytes\":%llu,\"cache_budget\":%llu,\"kept_batches\":%llu,"
           "\"kept_bytes\":%llu}",
           (unsigned long long)m->budget, (unsigned long long)m->total,
           (unsigned long long)m->batch_bytes, (unsigned long long)m->queue_batches,
           (unsigned long long)m->queue_bytes, (unsigned long long)m->in_flight_chunks,
           (unsigned long long)m->chunk_bytes, (unsigned long long)m->chunks_bytes,
           (unsigned long long)m->pack_bytes, (unsigned long long)m->cache_shards,
           (unsigned long long)m->cache_loads, (unsigned long long)m->shard_bytes,
           (unsigned long long)m->cache_bytes, (unsigned long long)m->cache_budget,
           (unsigned long long)m->kept_batches, (unsigned long long)m->kept_bytes);
}

static double mib(uint64_t b) { return (double)b / (double)(1u << 20); }

static void print_memory_text(const zp_memory_plan *m, uint64_t peak)
{
    printf("  memory budget %.1f MiB: output queue %llu x %.2f MiB = %.1f MiB, %llu in-flight "
           "chunks %.1f MiB, ",
           mib(m->budget), (unsigned long long)m->queue_batches, mib(m->batch_bytes),
           mib(m->queue_bytes), (unsigned long long)m->in_flight_chunks, mib(m->chunks_bytes));
    if (m->pack_bytes)
        printf("best-fit window %.1f MiB, ", mib(m->pack_bytes));
    printf("shard cache %.1f MiB (%llu + %llu loading shards of up to %.1f MiB), up to %llu "
           "kept batches %.1f MiB",
           mib(m->cache_bytes), (unsigned long long)m->cache_shards,
           (unsigned long long)m->cache_loads, mib(m->shard_bytes),
           (unsigned long long)m->kept_batches, mib(m->kept_bytes));
    if (peak)
        printf("; peak RSS %.1f MiB", mib(peak));
    printf("\n");
}

void cli_run_print(const cli_run_opts *o, const cli_run_result *r)
{
    double s = r->seconds > 0 ? r->seconds : 1e-9;
    double padf, cutf;
    packing_fractions(r, &padf, &cutf);
    unsigned long long window =
        o->pack == ZP_PACK_BESTFIT ? (o->pack_window ? o->pack_window : ZP_PACK_WINDOW_DEFAULT) : 0;
    if (o->json) {
        printf("{\"rank\":%u,\"world_size\":%u,\"batches\":%llu,\"samples\":%llu,\"seconds\":%.6f,"
               "\"samples_per_s\":%.1f,\"batches_per_s\":%.2f,\"mb_per_s\":%.2f,\"tokens\":%llu,"
               "\"first_batch_s\":%.6f,\"padded\":%llu,\"skipped\":%llu,\"partial\":%s",
               o->ws.rank, o->ws.world_size, (unsigned long long)r->batches,
               (unsigned long long)r->counts.samples, r->seconds, (double)r->counts.samples / s,
               (double)r->batches / s, (double)r->bytes / s / 1e6,
               (unsigned long long)r->counts.tokens, r->first_batch_seconds,
               (unsigned long long)r->counts.padded, (unsigned long long)r->counts.skipped,
               r->stop ? "true" : "false");
        if (r->stop && r->stop != CLI_RUN_STOP_OUTPUT)
            printf(",\"signal\":\"%s\"", cli_run_signal_name(r->stop));
        if (r->counts.tokens)
            printf(",\"packing\":{\"mode\":\"%s\",\"window\":%llu,\"pad_tokens\":%llu,"
                   "\"cut_documents\":%llu,\"padding_fraction\":%.6f,\"cut_fraction\":%.6f}",
                   pack_word(o), window, (unsigned long long)r->counts.pad_tokens,
                   (unsigned long long)r->counts.cut_documents, padf, cutf);
        if (r->counts.balance_windows && r->counts.attn_cost)
            printf(",\"balance\":{\"window\":%llu,\"windows\":%llu,\"attn_cost\":%llu,"
                   "\"imbalance_before\":%.6f,\"imbalance_after\":%.6f}",
                   (unsigned long long)o->balance, (unsigned long long)r->counts.balance_windows,
                   (unsigned long long)r->counts.attn_cost,
                   (double)r->counts.attn_peak_before / (double)r->counts.attn_cost,
                   (double)r->counts.attn_peak_after / (double)r->counts.attn_cost);
        if (o->doc_masking)
            printf(",\"doc_masking\":{\"rows\":%llu,\"documents\":%llu,\"sequences\":%llu,"
                   "\"max_seqlen\":%d}",
                   (unsigned long long)r->mask_rows, (unsigned long long)r->mask_docs,
                   (unsigned long long)r->mask_seqs, (int)r->mask_max_seqlen);
        if (r->n_parts > 1)
            print_parts(o, r);
        if (r->n_phases > 1)
            print_phases(o, r);
        if (r->peak_rss)
            printf(",\"peak_rss_bytes\":%llu", (unsigned long long)r->peak_rss);
        if (r->mem.budget)
            print_memory_json(&r->mem);
        if (r->n_cov) {
            printf(",\"coverage\":[");
            for (size_t i = 0; i < r->n_cov; i++) {
                const cli_run_cov *c = &r->cov[i];
                char line[256];
                cov_line(c, line, sizeof line);
                printf("%s{\"epoch\":%u,\"judged\":%s,\"ok\":%s,\"against\":\"%s\","
                       "\"delivered\":%llu,\"expected\":%llu,\"padded\":%llu,\"text\":\"%s\"}",
                       i ? "," : "", c->epoch, c->judged ? "true" : "false",
                       c->ok ? "true" : "false", c->whole ? "epoch" : "rank_plan",
                       (unsigned long long)c->delivered.count,
                       (unsigned long long)c->expected.count, (unsigned long long)c->padded, line);
            }
            printf("]");
        }
        printf("}\n");
        return;
    }
    printf("rank %u/%u: %llu batches, %llu samples in %.3f s: %.0f samples/s, %.1f batches/s, "
           "%.1f MB/s of %s",
           o->ws.rank, o->ws.world_size, (unsigned long long)r->batches,
           (unsigned long long)r->counts.samples, r->seconds, (double)r->counts.samples / s,
           (double)r->batches / s, (double)r->bytes / s / 1e6,
           r->counts.tokens ? "token batches" : "records");
    if (r->counts.tokens)
        printf(", %.0f tokens/s", (double)r->counts.tokens / s);
    if (r->stop)
        printf(" (partial: %s)", r->stop == CLI_RUN_STOP_OUTPUT ? "an output could not be written"
                                                                : cli_run_signal_name(r->stop));
    printf("\n");
    if (r->counts.padded || r->padded_per_epoch || r->dropped_per_epoch || r->counts.skipped ||
        r->counts.truncated_tokens)
        printf("  padded %llu (per epoch, all ranks: %llu), dropped per epoch %llu, skipped %llu, "
               "truncated tokens %llu\n",
               (unsigned long long)r->counts.padded, (unsigned long long)r->padded_per_epoch,
               (unsigned long long)r->dropped_per_epoch, (unsigned long long)r->counts.skipped,
               (unsigned long long)r->counts.truncated_tokens);
    if (r->counts.tokens) {
        printf("  packing %s", pack_word(o));
        if (window)
            printf(" (window %llu)", window);
        printf(": padding %.2f%% of row tokens (%llu), %.2f%% of documents cut (%llu of %llu)\n",
               100.0 * padf, (unsigned long long)r->counts.pad_tokens, 100.0 * cutf,
               (unsigned long long)r->counts.cut_documents, (unsigned long long)r->counts.samples);
    }
    if (r->mem.budget)
        print_memory_text(&r->mem, r->peak_rss);
    if (r->counts.balance_windows && r->counts.attn_cost)
        printf("  attention balance (window %llu batches): costliest microbatch / mean %.3f "
               "before, %.3f after, over %llu windows\n",
               (unsigned long long)o->balance,
               (double)r->counts.attn_peak_before / (double)r->counts.attn_cost,
               (double)r->counts.attn_peak_after / (double)r->counts.attn_cost,
               (unsigned long long)r->counts.balance_windows);
    if (o->doc_masking)
        printf("  doc masking: %llu documents in %llu filled rows (%.2f a row), %llu sequences "
               "in cu_seqlens, the longest %d\n",
               (unsigned long long)r->mask_docs, (unsigned long long)r->mask_rows,
               r->mask_rows ? (double)r->mask_docs / (double)r->mask_rows : 0.0,
               (unsigned long long)r->mask_seqs, (int)r->mask_max_seqlen);
    if (r->n_parts > 1)
        print_parts(o, r);
    if (r->n_phases > 1)
        print_phases(o, r);
    int bad = 0;
    for (size_t i = 0; i < r->n_cov; i++) {
        char line[256];
        cov_line(&r->cov[i], line, sizeof line);
        printf("  coverage: %s\n", line);
        bad |= r->cov[i].judged && !r->cov[i].ok;
    }
    if (bad && (r->counts.filtered || r->counts.skipped || o->n_skips))
        printf("  coverage: not delivered by request in this run: %llu records filtered by map "
               "callbacks, %llu bad records skipped%s\n",
               (unsigned long long)r->counts.filtered, (unsigned long long)r->counts.skipped,
               o->n_skips ? ", batches skipped by --skip-batches" : "");
}

/* ------------------------------------------------------------ observability */

static void print_hist(FILE *f, const char *what, const zp_hist *h)
{
    if (!h->count) {
        fprintf(f, "%s -", what);
        return;
    }
    fprintf(f, "%s p50 %.3gms p90 %.3gms p99 %.3gms max %.3gms", what,
            (double)zp_hist_quantile(h, 0.5) * 1e-6, (double)zp_hist_quantile(h, 0.9) * 1e-6,
            (double)zp_hist_quantile(h, 0.99) * 1e-6, (double)h->max_ns * 1e-6);
}

void cli_run_print_observe(const cli_run_opts *o, zp_pipeline *p, FILE *f)
{
    zp_metrics_snapshot m;
    zp_fetch_timing ft;
    zp_prefetch_timing pt;
    if (zp_pipeline_metrics_snapshot(p, &m) != ZP_OK ||
        zp_pipeline_fetch_timing_snapshot(p, &ft) != ZP_OK ||
        zp_pipeline_prefetch_timing_snapshot(p, &pt) != ZP_OK)
        return;
    if (o->json) {
        char *a = NULL, *b = NULL, *c = NULL;
        if (zp_metrics_json(&m, &a) == ZP_OK && zp_fetch_timing_json(&ft, &b) == ZP_OK &&
            zp_prefetch_timing_json(&pt, &c) == ZP_OK)
            fprintf(f, "%s\n%s\n%s\n", a, b, c);
        free(a);
        free(b);
        free(c);
        return;
    }
    fprintf(f, "[%7.2fs] %llu batches (%.1f/s), %llu samples (%.0f/s), first batch %.3fs, "
               "stall %.2fs = %.1f%% of wall\n",
            m.wall_seconds, (unsigned long long)m.batches, m.batches_per_second,
            (unsigned long long)m.samples, m.samples_per_second, m.time_to_first_batch,
            m.stall_seconds, 100.0 * m.stall_fraction);
    fprintf(f, "  %-14s %3s %10s %10s %6s %9s %9s %15s %10s\n", "operator", "par", "in", "out",
            "util", "starved", "blocked", "queue now/avg/max", "items/s");
    for (uint32_t i = 0; i < m.n_ops; i++) {
        const zp_op_metrics *op = &m.ops[i];
        char q[32];
        snprintf(q, sizeof q, "%u/%.1f/%u", op->queue_now, op->queue_mean, op->queue_max);
        fprintf(f, "  %-14s %3u %10llu %10llu %5.0f%% %8.2fs %8.2fs %15s %10.0f\n", op->name,
                op->parallelism, (unsigned long long)op->items_in,
                (unsigned long long)op->items_out, 100.0 * op->utilization, op->starved_seconds,
                op->blocked_seconds, q, op->items_per_second);
    }
    for (uint32_t i = 0; i < m.n_tuned; i++) { /* automatic settings: value and why */
        const zp_tuned_setting *t = &m.tuned[i];
        if (t->is_auto)
            fprintf(f, "  auto %s%s%s %u (cap %u): %s\n", strcmp(t->op, "output") ? t->op : "",
                    strcmp(t->op, "output") ? " " : "", t->setting, t->value, t->cap,
                    t->why[0] ? t->why : "no decision yet");
    }
    fprintf(f, "  fetch: %llu shards opened in %.2fs (read %.2fs, decompress %.2fs), waited %.2fs, "
               "%.1f MB from storage, %.1f MB of records, %llu records\n         ",
            (unsigned long long)ft.shards_opened, ft.open_seconds, ft.read_seconds,
            ft.decompress_seconds, ft.wait_seconds, (double)ft.bytes_compressed / 1e6,
            (double)ft.bytes_uncompressed / 1e6, (unsigned long long)ft.records);
    print_hist(f, "shard open", &ft.open_ns);
    fprintf(f, "; ");
    print_hist(f, "record", &ft.record_ns);
    if (ft.slowest_shard >= 0)
        fprintf(f, "; slowest shard #%lld %.3fs", (long long)ft.slowest_shard,
                ft.slowest_shard_seconds);
    uint64_t lookups = pt.cache_hits + pt.cache_misses;
    fprintf(f, "\n  prefetch: %llu loads, %.1f MB; cache %.1f%% hits (%llu/%llu), %llu evictions, "
               "%.1f MB resident\n",
            (unsigned long long)pt.downloads, (double)pt.bytes / 1e6,
            lookups ? 100.0 * (double)pt.cache_hits / (double)lookups : 0.0,
            (unsigned long long)pt.cache_hits, (unsigned long long)lookups,
            (unsigned long long)pt.cache_evictions, (double)pt.cache_bytes / 1e6);
}

int cli_run_write_metrics(zp_pipeline *p, const char *path, int stop)
{
    zp_metrics_snapshot m;
    zp_fetch_timing ft;
    zp_prefetch_timing pt;
    char *a = NULL, *b = NULL, *c = NULL;
    zpi_buf doc = {0};
    int rc = -1;
    if (zp_pipeline_metrics_snapshot(p, &m) != ZP_OK ||
        zp_pipeline_fetch_timing_snapshot(p, &ft) != ZP_OK ||
        zp_pipeline_prefetch_timing_snapshot(p, &pt) != ZP_OK || zp_metrics_json(&m, &a) != ZP_OK ||
        zp_fetch_timing_json(&ft, &b) != ZP_OK || zp_prefetch_timing_json(&pt, &c) != ZP_OK) {
        fprintf(stderr, "zephon run: cannot write '%s': %s\n", path,
                zp_pipeline_errmsg(p)[0] ? zp_pipeline_errmsg(p) : "no snapshots");
        goto out;
    }
    int ok = zpi_buf_printf(&doc, "{\"partial\":%s", stop ? "true" : "false") == 0;
    if (ok && stop && stop != CLI_RUN_STOP_OUTPUT)
        ok = zpi_buf_printf(&doc, ",\"signal\":\"%s\"", cli_run_signal_name(stop)) == 0;
    if (ok)
        ok = zpi_buf_printf(&doc, ",\"metrics\":%s,\"fetch_timing\":%s,\"prefetch_timing\":%s}\n",
                            a, b, c) == 0;
    if (!ok) {
        fprintf(stderr, "zephon run: cannot write '%s': out of memory\n", path);
        goto out;
    }
    if (write_document(path, doc.p, doc.len) != 0) {
        fprintf(stderr, "zephon run: cannot write '%s': %s\n", path, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    zpi_buf_free(&doc);
    free(a);
    free(b);
    free(c);
    return rc;
}
