/*
 * filehash.h - the content hash of a file (private).
 */
#ifndef ZP_FILEHASH_H
#define ZP_FILEHASH_H

#include <stdint.h>

/* The XXH64 (seed 0) of the whole file open at fd, read with pread from
 * byte 0 (fd's offset is not used). 0, or an errno: ENOMEM, or a read
 * error with *err_off (may be NULL) the offset it happened at. */
int zpi_xxh64_fd(int fd, uint64_t *out, uint64_t *err_off);

#endif
