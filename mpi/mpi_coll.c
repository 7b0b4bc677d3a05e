/* mpi_coll.c - the MPI layer's collectives over the handle's communicator.
 *
 * Every collective of the layer goes through these functions. On a handle
 * of a world of one without MPI (zp_mpi_create_local: MPI is never
 * initialised in the process) each one is the copy it amounts to on one
 * rank, so that the agreement, lock-step delivery, the report (windows
 * included) and the job state take the same code path as under mpirun and
 * give the same result as a world of one would. No MPI function is called
 * on such a handle (MPI allows none before MPI_Init but MPI_Initialized
 * and MPI_Finalized; Open MPI aborts the process on the others). */
#include <string.h>

#include "mpi_internal.h"

/* Bytes of one element of the predefined types the layer uses (the handles
 * compare without MPI: MPI_Type_size may not be called before MPI_Init). */
static size_t type_bytes(MPI_Datatype t)
{
    if (t == MPI_CHAR || t == MPI_BYTE)
        return 1;
    if (t == MPI_INT)
        return sizeof(int);
    if (t == MPI_2INT)
        return 2 * sizeof(int);
    if (t == MPI_DOUBLE)
        return sizeof(double);
    /* MPI_UINT64_T, MPI_INT64_T */
    return 8;
}

static void copy(void *out, const void *in, int count, MPI_Datatype t)
{
    if (out != in && count > 0)
        memmove(out, in, (size_t)count * type_bytes(t));
}

int zpi_coll_bcast(zp_mpi *m, void *buf, int count, MPI_Datatype t, int root)
{
    if (m->solo)
        return MPI_SUCCESS;
    return MPI_Bcast(buf, count, t, root, m->comm);
}

int zpi_coll_allreduce(zp_mpi *m, const void *in, void *out, int count, MPI_Datatype t, MPI_Op op)
{
    if (m->solo) {
        copy(out, in, count, t);
        return MPI_SUCCESS;
    }
    return MPI_Allreduce(in, out, count, t, op, m->comm);
}

int zpi_coll_gather(zp_mpi *m, const void *in, void *out, int count, MPI_Datatype t, int root)
{
    if (m->solo) {
        copy(out, in, count, t);
        return MPI_SUCCESS;
    }
    return MPI_Gather(in, count, t, out, count, t, root, m->comm);
}

int zpi_coll_allgather(zp_mpi *m, const void *in, void *out, int count, MPI_Datatype t)
{
    if (m->solo) {
        copy(out, in, count, t);
        return MPI_SUCCESS;
    }
    return MPI_Allgather(in, count, t, out, count, t, m->comm);
}

int zpi_coll_gatherv(zp_mpi *m, const void *in, int count, void *out, const int *counts,
                     const int *displs, MPI_Datatype t, int root)
{
    if (m->solo) {
        copy((char *)out + (size_t)displs[0] * type_bytes(t), in, count, t);
        return MPI_SUCCESS;
    }
    return MPI_Gatherv(in, count, t, out, counts, displs, t, root, m->comm);
}

int zpi_coll_igather(zp_mpi *m, const void *in, void *out, int count, MPI_Datatype t, int root,
                     MPI_Request *req)
{
    if (m->solo) {
        copy(out, in, count, t);
        *req = MPI_REQUEST_NULL;
        return MPI_SUCCESS;
    }
    return MPI_Igather(in, count, t, out, count, t, root, m->comm, req);
}

int zpi_coll_ireduce(zp_mpi *m, const void *in, void *out, int count, MPI_Datatype t, MPI_Op op,
                     int root, MPI_Request *req)
{
    if (m->solo) {
        copy(out, in, count, t);
        *req = MPI_REQUEST_NULL;
        return MPI_SUCCESS;
    }
    return MPI_Ireduce(in, out, count, t, op, root, m->comm, req);
}

int zpi_coll_iallreduce(zp_mpi *m, const void *in, void *out, int count, MPI_Datatype t, MPI_Op op,
                        MPI_Request *req)
{
    if (m->solo) {
        copy(out, in, count, t);
        *req = MPI_REQUEST_NULL;
        return MPI_SUCCESS;
    }
    return MPI_Iallreduce(in, out, count, t, op, m->comm, req);
}

int zpi_coll_testall(zp_mpi *m, int n, MPI_Request *req, int *done)
{
    if (m->solo) {
        *done = 1;
        return MPI_SUCCESS;
    }
    return MPI_Testall(n, req, done, MPI_STATUSES_IGNORE);
}

int zpi_coll_waitall(zp_mpi *m, int n, MPI_Request *req)
{
    if (m->solo)
        return MPI_SUCCESS;
    return MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
}

int zpi_coll_alltoallv(zp_mpi *m, const void *in, const int *scounts, const int *sdispls,
                       void *out, const int *rcounts, const int *rdispls, MPI_Datatype t)
{
    if (m->solo) {
        if (scounts[0] > 0)
            memmove((char *)out + (size_t)rdispls[0] * type_bytes(t),
                    (const char *)in + (size_t)sdispls[0] * type_bytes(t),
                    (size_t)scounts[0] * type_bytes(t));
        return MPI_SUCCESS;
    }
    return MPI_Alltoallv(in, scounts, sdispls, t, out, rcounts, rdispls, t, m->comm);
}
