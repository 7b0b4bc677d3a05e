/*
 * throttle.h - how many transfers may run at once to one host, shared by
 * every process of the node (private).
 *
 * Each host (scheme://host:port of the requests, the endpoint for S3) has
 * a window: the number of requests the node keeps in flight to it. A
 * request starts only while the node's requests in flight to that host
 * are fewer than the window. The window follows the answers (AIMD):
 *
 *  - a 503 (S3's SlowDown) or a 429 sets it to 0.9 x the requests the node
 *    started to that host within the last answer time (before any good
 *    answer has given an answer time: 0.9 x those in flight), at least 1;
 *    once per congestion event: only an answer to a request started after
 *    the last decrease, and at least one answer time after it, lowers it
 *    again (the requests sent meanwhile answer for the same load);
 *  - every other answer, while starts are being refused (the window is
 *    what limits), adds 1 (slow start, until the first decrease of paced
 *    requests) or 1/window (about one more request in flight per round of
 *    answers: additive increase).
 *
 * Until the first slow-down the window is 1024 (no limit: the transfers'
 * own parallelism limits them). After it, starts are also paced: one per
 * answer time / window (the answer time smoothed over the good answers),
 * so that the host sees a steady rate, not a window's worth of requests
 * at once each time a round of answers comes back. A host not asked for
 * 60 s starts afresh.
 *
 * The rejected request itself waits for the server's Retry-After before
 * it is sent again (request.c); the others go on within the lowered window.
 *
 * Node-wide: the state of a host is a small file in the shard cache folder,
 * ".zephon-throttle-<hash of the host>" (0600, the folder is one user's),
 * read and written under an exclusive flock held for microseconds. It
 * keeps the window and, for each process using the host, its pid and its
 * requests in flight, so that the window bounds the node's total; a
 * process that died is dropped from it (its pid no longer exists). With no
 * folder (NULL) the state is the process's own.
 *
 * Thread safety: a zpi_throttle is used by one thread (the transfers' I/O
 * thread).
 */
#ifndef ZP_THROTTLE_H
#define ZP_THROTTLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct zpi_throttle zpi_throttle;

/* dir: the shard cache folder (copied; NULL: process-local state). NULL
 * when out of memory. A host's window starts at 1024 (no limit: the
 * transfers' own parallelism limits them) until its first slow-down. */
zpi_throttle *zpi_throttle_create(const char *dir);
void zpi_throttle_destroy(zpi_throttle *th);

/* The host key of a request's URL (scheme://host[:port], lower-cased)
 * into buf; for an s3:// spec, the endpoint's. */
void zpi_throttle_host(const char *spec, const char *s3_endpoint, char *buf, size_t cap);

/* May a request to host start now (within its window and its pacing)? 1:
 * yes, counted in flight until zpi_throttle_end (*start_ns receives its
 * start, for that call); 0: not now (try again in a few milliseconds). */
int zpi_throttle_begin(zpi_throttle *th, const char *host, uint64_t *start_ns);

typedef enum { ZPI_THR_OK, ZPI_THR_SLOWDOWN, ZPI_THR_OTHER } zpi_thr_outcome;
/* A request started by zpi_throttle_begin at start_ns ended: OK (an answer
 * that is not a slow-down: its time updates the answer time, and the
 * window grows while it limits), SLOWDOWN (503 or 429: the window shrinks,
 * once per event), OTHER (no answer: a connection error, a stop; the
 * window stays). */
void zpi_throttle_end(zpi_throttle *th, const char *host, uint64_t start_ns,
                      zpi_thr_outcome outcome);

/* The host's window now (for tests and stats); 0 when the host is unknown. */
double zpi_throttle_window(zpi_throttle *th, const char *host);

#endif
