/*
 * fuzz_common.h - helpers shared by the libFuzzer targets of fuzz/.
 *
 * A target aborts (and libFuzzer reports the input) when an invariant does
 * not hold; ASan and UBSan report memory and undefined-behaviour errors.
 */
#ifndef ZP_FUZZ_COMMON_H
#define ZP_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>

#include "zephon/common.h"

#define FUZZ_CHECK(cond, ...)                                                                  \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "fuzz invariant failed at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fputc('\n', stderr);                                                               \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

/* A log sink that drops everything (the library never prints on its own;
 * without a sink it is silent too, but a sink exercises the log paths). */
static inline void fuzz_quiet_log(void *user, zp_log_level level, const char *msg)
{
    (void)user;
    (void)level;
    (void)msg;
}

/* A fresh private folder for a target's files (created once per process). */
char *fuzz_tmpdir(void);

#endif
