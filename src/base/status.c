/* status.c - status names and version. */
#include "zephon/common.h"

const char *zp_status_str(zp_status s)
{
    switch (s) {
    case ZP_OK: return "ok";
    case ZP_END: return "end of stream";
    case ZP_ERR_INVALID: return "invalid argument";
    case ZP_ERR_NOMEM: return "out of memory";
    case ZP_ERR_IO: return "I/O error";
    case ZP_ERR_FORMAT: return "malformed data";
    case ZP_ERR_LIMIT: return "limit exceeded";
    case ZP_ERR_STATE: return "invalid state";
    case ZP_ERR_CALLBACK: return "callback failed";
    case ZP_ERR_NETWORK: return "network error";
    case ZP_ERR_MISMATCH: return "ranks disagree";
    case ZP_ERR_MPI: return "MPI error";
    case ZP_ERR_UNSUPPORTED: return "unsupported";
    case ZP_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *zp_version(void) { return ZP_VERSION_STRING; }
