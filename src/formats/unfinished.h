/*
 * unfinished.h - the marker of an output folder that `zephon preprocess`
 * has not finished (private).
 *
 * Preprocessing writes the marker file ZPI_UNFINISHED_NAME into its output
 * folder before it writes any output, and removes it only after the
 * folder's manifest.json is in place. A folder that holds the marker is
 * therefore a run that was interrupted (SIGINT, SIGKILL, a crash, a failed
 * shard) or is still running: its shards are each complete, but not all of
 * them are there. A dataset refuses every shard of such a folder (the
 * folder itself, a glob over it, or one of its files named alone), so that
 * a run never trains on part of a preprocessed corpus without saying so.
 *
 * The marker holds a few lines of text for a person who finds it (what
 * made it and how to finish). Thread safety: no shared state.
 */
#ifndef ZP_UNFINISHED_H
#define ZP_UNFINISHED_H

#include "base/error.h"
#include "zephon/common.h"

#define ZPI_UNFINISHED_NAME "zephon-preprocess.unfinished"

/* Writes the marker into dir (durably: written, synced, renamed, folder
 * synced). ZP_OK or ZP_ERR_IO / ZP_ERR_NOMEM naming the marker's path. */
zp_status zpi_unfinished_mark(const char *dir, zpi_err *err);

/* Removes the marker from dir (absent: ZP_OK) and syncs the folder. */
zp_status zpi_unfinished_clear(const char *dir, zpi_err *err);

/* ZP_OK when the folder of the local file `path` holds no marker;
 * otherwise ZP_ERR_STATE with a message naming the shard (`name`), the
 * folder and how to finish or redo it. */
zp_status zpi_unfinished_check(const char *path, const char *name, zpi_err *err);

#endif
