/*
 * bench_download.c - downloads URLs into a folder with the transfer engine
 * that pipelines use (src/io/xfer.c: one libcurl multi handle, P transfers at
 * once) and prints the wall time and MB/s. bench/remote/run.sh runs it next
 * to the curl command on the same files.
 *
 *   bench_download OUTDIR PARALLEL URL...
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/storage.h"
#include "base/util.h"
#include "io/xfer.h"

typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t left;
    int failed;
} waiter;

static void done(void *user, const zpi_xfer_result *r)
{
    waiter *w = user;
    pthread_mutex_lock(&w->mu);
    if (r->status != ZP_OK) {
        fprintf(stderr, "bench_download: %s\n", zpi_err_msg(&r->err));
        w->failed = 1;
    }
    w->left--;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench_download OUTDIR PARALLEL URL...\n");
        return 2;
    }
    const char *outdir = argv[1];
    unsigned par = (unsigned)atoi(argv[2]);
    int n = argc - 3;
    zp_storage_config sc;
    zp_storage_config_init(&sc);
    zpi_storage *st = NULL;
    zpi_xfer *x = NULL;
    zpi_err err;
    zpi_err_clear(&err);
    if (zpi_storage_create(&sc, NULL, NULL, &st, &err) != ZP_OK ||
        zpi_xfer_create(st, par ? par : 1, 1, &x, &err) != ZP_OK) {
        fprintf(stderr, "bench_download: %s\n", zpi_err_msg(&err));
        return 1;
    }
    waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, (size_t)n, 0};
    int *fds = calloc((size_t)n, sizeof *fds);
    double t0 = zpi_now();
    for (int i = 0; i < n; i++) {
        char path[4096];
        zpi_fmt(path, sizeof path, "%s/%d", outdir, i);
        fds[i] = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
        zpi_xfer_job job = {.spec = argv[3 + i], .fd = fds[i], .expect_size = UINT64_MAX,
                            .done = done, .user = &w};
        if (fds[i] < 0 || zpi_xfer_submit(x, &job, NULL, &err) != ZP_OK) {
            fprintf(stderr, "bench_download: %s: %s\n", argv[3 + i], zpi_err_msg(&err));
            return 1;
        }
    }
    pthread_mutex_lock(&w.mu);
    while (w.left)
        pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    double dt = zpi_now() - t0;
    zpi_xfer_stats xs;
    zpi_xfer_stats_get(x, &xs);
    printf("%d files %.1f MB in %.3f s: %.1f MB/s\n", n, (double)xs.bytes / 1e6, dt,
           (double)xs.bytes / 1e6 / dt);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    free(fds);
    zpi_xfer_destroy(x);
    zpi_storage_destroy(st);
    return w.failed;
}
