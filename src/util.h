/* util.h - small shared helpers (private). */
#ifndef ZP_UTIL_H
#define ZP_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

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

/* strdup that returns NULL on failure (and for NULL). */
char *zpi_strdup(const char *s);

#endif
