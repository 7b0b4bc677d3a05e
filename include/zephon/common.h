/*
 * zephon/common.h - status codes, logging and version, shared by every
 * other public header.
 *
 * Conventions (see docs/api.md):
 *  - Every fallible call returns a zp_status; objects come back through an
 *    OUT parameter. ZP_OK is 0; values are never renumbered.
 *  - The library never prints and never exits: messages go to the optional
 *    log callback, and the detail of the last error is kept on the handle
 *    (zp_<type>_errmsg()).
 */
#ifndef ZEPHON_COMMON_H
#define ZEPHON_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* ZP_API marks the functions the shared libraries export. The libraries are
 * built with -fvisibility=hidden and ZP_BUILDING_LIBRARY defined, so that
 * only the functions declared with ZP_API (the zp_ API of these headers) are
 * exported; the internal zpi_ functions stay hidden. For a program that uses
 * the library ZP_API expands to nothing. (libuv's UV_EXTERN, nng's NNG_DECL.) */
#ifndef ZP_API
#if defined(ZP_BUILDING_LIBRARY) && (defined(__GNUC__) || defined(__clang__))
#define ZP_API __attribute__((visibility("default")))
#else
#define ZP_API
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The version of Zephon, written here only: CMakeLists.txt (the project's
 * and libzephon's version) and the Python package (its metadata, through
 * python/pyproject.toml) read these three lines. */
#define ZP_VERSION_MAJOR 0
#define ZP_VERSION_MINOR 1
#define ZP_VERSION_PATCH 0
#define ZP_VERSION_STR_(x) #x
#define ZP_VERSION_JOIN_(a, b, c) ZP_VERSION_STR_(a) "." ZP_VERSION_STR_(b) "." ZP_VERSION_STR_(c)
/* "MAJOR.MINOR.PATCH" */
#define ZP_VERSION_STRING ZP_VERSION_JOIN_(ZP_VERSION_MAJOR, ZP_VERSION_MINOR, ZP_VERSION_PATCH)

typedef enum zp_status {
    ZP_OK = 0,
    ZP_END = 1,              /* end of stream: not an error */
    ZP_ERR_INVALID = 2,      /* bad argument or setting */
    ZP_ERR_NOMEM = 3,        /* allocation failed */
    ZP_ERR_IO = 4,           /* a file could not be opened or read */
    ZP_ERR_FORMAT = 5,       /* malformed shard, record or manifest */
    ZP_ERR_LIMIT = 6,        /* a configured limit was exceeded */
    ZP_ERR_STATE = 7,        /* call not valid in the object's current state */
    ZP_ERR_CALLBACK = 8,     /* a user callback returned an error */
    ZP_ERR_NETWORK = 9,      /* a transfer failed */
    ZP_ERR_MISMATCH = 10,    /* ranks disagree (manifest, settings) */
    ZP_ERR_MPI = 11,         /* an MPI call failed */
    ZP_ERR_UNSUPPORTED = 12, /* feature or format not available */
    ZP_ERR_INTERNAL = 13     /* a bug: please report */
} zp_status;

/* @return a static, human readable name for s ("ok", "invalid argument",
 * ...). Never NULL. Thread-safe. */
ZP_API const char *zp_status_str(zp_status s);

/* @return ZP_VERSION_STRING of the library actually linked. */
ZP_API const char *zp_version(void);

typedef enum zp_log_level {
    ZP_LOG_ERROR = 0,
    ZP_LOG_WARN = 1,
    ZP_LOG_INFO = 2,
    ZP_LOG_DEBUG = 3
} zp_log_level;

/* Log callback. msg is borrowed for the duration of the call. May be called
 * from any of the library's threads, concurrently: the callback must be
 * thread-safe. */
typedef void (*zp_log_fn)(void *user, zp_log_level level, const char *msg);

#ifdef __cplusplus
}
#endif
#endif
