/* util.h - small shared helpers (private). */
#ifndef ZP_UTIL_H
#define ZP_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "zephon/common.h"

/* Monotonic clock in seconds / nanoseconds. */
double zpi_now(void);
uint64_t zpi_now_ns(void);

/* snprintf into buf that never overflows and always terminates. */
void zpi_fmt(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void zpi_vfmt(char *buf, size_t cap, const char *fmt, va_list ap);

/* 64-bit mixing (the splitmix64 finaliser), inline: the WorkSource's
 * Feistel rounds call it on their hot path. */
static inline uint64_t zpi_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

/* A keyed hash of two words. */
static inline uint64_t zpi_hash2(uint64_t a, uint64_t b) { return zpi_mix64(a ^ zpi_mix64(b + 0x9e3779b97f4a7c15ULL)); }

/* Formats a message (at most 2 KiB, truncated) and hands it to a log
 * callback; nothing when fn is NULL. The one copy behind every handle's
 * printf-style log helper. */
void zpi_vlog(zp_log_fn fn, void *user, zp_log_level lvl, const char *fmt, va_list ap);
void zpi_log(zp_log_fn fn, void *user, zp_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* read() that retries on EINTR and short reads until want bytes or end of
 * file: the bytes read, or -1 with errno. */
long zpi_read_full(int fd, void *buf, size_t want);

/* strdup that returns NULL on failure (and for NULL). */
char *zpi_strdup(const char *s);

/* ---- the small helpers, one copy each ---- */

/* 1 when s ends with suffix. */
int zpi_has_suffix(const char *s, const char *suffix);

/* Node-local scratch space: $SLURM_TMPDIR, else $TMPDIR, else "/tmp"
 * (empty values count as unset). *var, when var is not NULL: the name of
 * the variable that chose it, or NULL for "/tmp". */
const char *zpi_node_tmpdir(const char **var);

/* mkdir -p: creates dir and its missing parents with mode. 0, or -1 with
 * errno (the failing component is left in errno's context only). */
int zpi_mkdir_p(const char *dir, unsigned mode);

/* Parses a whole decimal unsigned 64-bit number (no sign, no spaces, no
 * trailing text), with an optional binary size suffix when `sizes` is set
 * (k, M, G, T: 2^10..2^40, case-insensitive, optional trailing "B" or "iB").
 * 0 on success; -1 with errno = EINVAL (not a number) or ERANGE (above
 * UINT64_MAX or outside [min, max]). */
int zpi_parse_u64(const char *s, uint64_t min, uint64_t max, int sizes, uint64_t *out);
/* The same for a finite double in [min, max] (strtod's syntax, no leading
 * space, no trailing text): EINVAL for text that is not a number (NaN
 * included), ERANGE for an infinite value or one outside [min, max]. An
 * underflow is the rounded value (a subnormal or zero), not an error. */
int zpi_parse_double(const char *s, double min, double max, double *out);

/* Writes len bytes to path atomically: into a temporary file of its own
 * ("path.tmp.XXXXXX", created with O_EXCL, so concurrent writers of one path
 * never share it) in the same folder, mode 0644, fsync, rename over path.
 * 0, or -1 with errno (the temporary file is removed). */
int zpi_write_file_atomic(const char *path, const void *data, size_t len);

/* A growable byte buffer. Zero-initialise; release with zpi_buf_free. The
 * append functions return 0, or -1 when out of memory (the buffer keeps
 * what it had). p is always NUL-terminated after an append. */
typedef struct zpi_buf {
    char *p;
    size_t len, cap;
} zpi_buf;
int zpi_buf_reserve(zpi_buf *b, size_t extra);
int zpi_buf_append(zpi_buf *b, const void *data, size_t n);
int zpi_buf_puts(zpi_buf *b, const char *s);
int zpi_buf_printf(zpi_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void zpi_buf_free(zpi_buf *b);
/* Appends s as a JSON string: quotes, escapes (control characters as \n,
 * \t, ... or \u00XX); UTF-8 passes as it is. 0 or -1. */
int zpi_buf_put_json_str(zpi_buf *b, const char *s);

/* Grows an array *arr of *cap elements of `elem` bytes to hold at least
 * `need` (at least doubling; 16 from empty). 0, or -1 with errno ENOMEM when
 * out of memory or the size would overflow, EINVAL when elem is 0 (the
 * array and *cap are kept). */
int zpi_grow(void **arr, size_t *cap, size_t need, size_t elem);

/* One intrusive FIFO: embed a zpi_fifo_node in the element, recover the
 * element with ZPI_CONTAINER_OF. Not thread-safe (the owner locks). */
typedef struct zpi_fifo_node {
    struct zpi_fifo_node *next;
} zpi_fifo_node;
typedef struct zpi_fifo {
    zpi_fifo_node *head, *tail;
    size_t n;
} zpi_fifo;
#define ZPI_CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))
static inline void zpi_fifo_push(zpi_fifo *q, zpi_fifo_node *x)
{
    x->next = NULL;
    if (q->tail)
        q->tail->next = x;
    else
        q->head = x;
    q->tail = x;
    q->n++;
}
static inline zpi_fifo_node *zpi_fifo_pop(zpi_fifo *q)
{
    zpi_fifo_node *x = q->head;
    if (x) {
        q->head = x->next;
        if (!q->head)
            q->tail = NULL;
        q->n--;
        x->next = NULL;
    }
    return x;
}

#endif
