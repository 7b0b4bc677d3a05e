/* util.c - small shared helpers. */
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double zpi_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t zpi_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void zpi_vfmt(char *buf, size_t cap, const char *fmt, va_list ap)
{
    if (!buf || cap == 0)
        return;
    int n = vsnprintf(buf, cap, fmt, ap);
    if (n < 0)
        buf[0] = '\0';
}

void zpi_fmt(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zpi_vfmt(buf, cap, fmt, ap);
    va_end(ap);
}

char *zpi_strdup(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}
