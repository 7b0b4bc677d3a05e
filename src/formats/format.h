/*
 * format.h - the table of shard formats (private).
 *
 * A format turns the bytes of a shard file into a zpi_shard (shard.h): the
 * shard's records decoded into one buffer with a record offset index, or an
 * open reader (reader.h). Adding a format is adding a file with one
 * zpi_format and one line in format.c.
 */
#ifndef ZP_FORMAT_H
#define ZP_FORMAT_H

#include "formats/shard.h"

/* The format for a file name (by suffix) or a format name; NULL if none. */
const zpi_format *zpi_format_for_path(const char *path);
const zpi_format *zpi_format_by_name(const char *name);

#endif
