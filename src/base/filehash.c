/*
 * filehash.c - the content hash of a file (XXH64), as manifests record it.
 */
#include "base/filehash.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <xxhash.h>

int zpi_xxh64_fd(int fd, uint64_t *out, uint64_t *err_off)
{
    enum { CHUNK = 1 << 20 };
    char *buf = malloc(CHUNK);
    XXH64_state_t *h = XXH64_createState();
    int rc = 0;
    if (!buf || !h || XXH64_reset(h, 0) != XXH_OK) {
        rc = ENOMEM;
        goto out;
    }
    uint64_t off = 0;
    for (;;) {
        ssize_t r = pread(fd, buf, CHUNK, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = errno;
            if (err_off)
                *err_off = off;
            goto out;
        }
        if (r == 0)
            break;
        XXH64_update(h, buf, (size_t)r);
        off += (uint64_t)r;
    }
    *out = XXH64_digest(h);
out:
    XXH64_freeState(h);
    free(buf);
    return rc;
}
