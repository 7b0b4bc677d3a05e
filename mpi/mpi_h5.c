/*
 * mpi_h5.c - HDF5 shards through MPI-IO (parallel HDF5).
 *
 * The core library opens HDF5 files itself (src/formats/format_hdf5.c) and asks the
 * dataset's h5_fapl hook for the driver, under its HDF5 lock. This file is
 * that hook: MPI-IO on MPI_COMM_SELF for files on a shared file system,
 * the serial driver for node-local ones. Opening on MPI_COMM_SELF keeps the
 * open independent: each rank opens a shard when its own pipeline needs it
 * (shards are read in a per-rank order), and reads only its hyperslabs.
 */
#include <string.h>
#include <sys/vfs.h>

#include <hdf5.h>

#include "mpi_internal.h"

/* File system magic numbers (statfs f_type) of shared file systems. */
static int shared_fs(const char *path)
{
    struct statfs sf;
    if (statfs(path, &sf) != 0)
        return 0;
    switch ((unsigned long)sf.f_type) {
    case 0x0BD00BD0UL: /* Lustre */
    case 0x47504653UL: /* GPFS / Spectrum Scale */
    case 0x19830326UL: /* BeeGFS */
    case 0x20030528UL: /* OrangeFS / PVFS2 */
    case 0x6969UL:     /* NFS */
    case 0x00C36400UL: /* CephFS */
    case 0xFF534D42UL: /* CIFS */
    case 0xFE534D42UL: /* SMB2 */
    case 0x65735546UL: /* FUSE (the clients of several parallel file systems) */
        return 1;
    default:
        return 0;
    }
}

const char *zp_mpi_h5_driver_for(zp_mpi_h5_driver mode, const char *path)
{
    if (mode == ZP_MPI_H5_MPIIO)
        return "mpio";
    if (mode == ZP_MPI_H5_SERIAL)
        return "sec2";
    return path && shared_fs(path) ? "mpio" : "sec2";
}

static int h5_fapl(void *user, int64_t fapl, const char *path)
{
    zp_mpi_h5_driver mode = (zp_mpi_h5_driver)(intptr_t)user;
    if (strcmp(zp_mpi_h5_driver_for(mode, path), "mpio") != 0)
        return H5Pset_fapl_sec2((hid_t)fapl) < 0;
    /* AUTO without MPI_THREAD_MULTIPLE: the serial driver, which reads a
     * shared file correctly too (zp_mpi_dataset_config_hdf5 refuses MPIIO
     * then) */
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE)
        return H5Pset_fapl_sec2((hid_t)fapl) < 0;
    return H5Pset_fapl_mpio((hid_t)fapl, MPI_COMM_SELF, MPI_INFO_NULL) < 0;
}

zp_status zp_mpi_dataset_config_hdf5(zp_mpi *m, zp_dataset_config *cfg, zp_mpi_h5_driver mode)
{
    ZPI_MPI_USABLE(m);
    if (!cfg)
        return zpi_mpi_fail(m, ZP_ERR_INVALID, "zp_mpi_dataset_config_hdf5: cfg is NULL");
    if (mode != ZP_MPI_H5_AUTO && mode != ZP_MPI_H5_MPIIO && mode != ZP_MPI_H5_SERIAL)
        return zpi_mpi_fail(m, ZP_ERR_INVALID, "zp_mpi_dataset_config_hdf5: mode = %d: unknown",
                            (int)mode);
    if (m->solo) {
        /* a world of one without MPI (zp_mpi_create_local): no MPI-IO */
        if (mode == ZP_MPI_H5_MPIIO)
            return zpi_mpi_fail(m, ZP_ERR_INVALID,
                                "HDF5 through MPI-IO needs MPI: this process runs without it (a "
                                "world of one, started without mpirun or srun)");
        cfg->h5_fapl = h5_fapl;
        cfg->h5_fapl_user = (void *)(intptr_t)ZP_MPI_H5_SERIAL;
        return ZP_OK;
    }
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    if (mode == ZP_MPI_H5_MPIIO && provided < MPI_THREAD_MULTIPLE)
        return zpi_mpi_fail(m, ZP_ERR_INVALID,
                            "HDF5 through MPI-IO: the pipeline's threads read the shards, which "
                            "needs MPI initialised with MPI_THREAD_MULTIPLE (this process has "
                            "level %d)",
                            provided);
    cfg->h5_fapl = h5_fapl;
    cfg->h5_fapl_user = (void *)(intptr_t)mode;
    return ZP_OK;
}
