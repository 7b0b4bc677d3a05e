/*
 * storage_local.c - the local-file backend: open() + fstat() for the size,
 * pread() for ranges.
 *
 * Ownership: the object owns its descriptor. Thread safety: an object is
 * used by one thread at a time (pread itself would allow more).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "io/backend.h"
#include "io/url.h"

typedef struct local_object {
    zpi_object base;
    int fd;
} local_object;

static int local_matches(const char *spec) { return spec && !zpi_is_url(spec); }

static zp_status local_open(zpi_storage *s, const char *spec, zpi_object **out, zpi_err *err)
{
    *out = NULL;
    int fd = open(spec, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return zpi_err_set(err, ZP_ERR_IO, "%s: cannot open: %s", spec, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return zpi_err_set(err, ZP_ERR_IO, "%s: cannot stat: %s", spec, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return zpi_err_set(err, ZP_ERR_IO, "%s: is a directory", spec);
    }
    local_object *o = calloc(1, sizeof *o);
    char *copy = zpi_strdup(spec);
    if (!o || !copy) {
        free(o);
        free(copy);
        close(fd);
        return zpi_err_set(err, ZP_ERR_NOMEM, "%s: out of memory", spec);
    }
    o->base.be = &zpi_backend_local;
    o->base.s = s;
    o->base.spec = copy;
    o->base.info.size = (uint64_t)st.st_size;
    o->fd = fd;
    *out = &o->base;
    return ZP_OK;
}

static zp_status local_read(zpi_object *obj, uint64_t off, void *buf, size_t len, size_t *got,
                            zpi_err *err)
{
    local_object *o = (local_object *)obj;
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(o->fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return zpi_err_set(err, ZP_ERR_IO, "%s: read at offset %llu: %s", obj->spec,
                               (unsigned long long)(off + done), strerror(errno));
        if (n == 0)
            break;
        done += (size_t)n;
    }
    *got = done;
    return ZP_OK;
}

static void local_close(zpi_object *obj)
{
    local_object *o = (local_object *)obj;
    close(o->fd);
    free(obj->spec);
    free(o);
}

const zpi_backend zpi_backend_local = {
    .name = "local",
    .matches = local_matches,
    .open = local_open,
    .read_range = local_read,
    .close = local_close,
    .setup_easy = NULL,
};
