/* libtpshard-mpi.so: the MPI calls of the MPI launcher (verify/ranks/plugin.h), built with
 * mpicc so the binary itself never links libmpi.  Errors return instead of aborting the
 * job (MPI_ERRORS_RETURN), so tpshard reports them with its own exit codes. */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "../../ranks/plugin.h"

const tps_mpi_api *tps_mpi_plugin(unsigned abi);

static int say(int rc, char *msg, size_t msgsize)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "unknown MPI error");
    snprintf(msg, msgsize, "%s", s);
    return rc;
}

static int too_big(size_t n, char *msg, size_t msgsize)
{
    snprintf(msg, msgsize, "%zu elements exceed MPI's int count", n);
    return MPI_ERR_COUNT;
}

static int mpi_init(int *rank, int *size, int *local_rank, int *local_size, char *msg, size_t msgsize)
{
    int rc, inited = 0;
    MPI_Initialized(&inited);
    if (!inited && (rc = MPI_Init(NULL, NULL)) != MPI_SUCCESS) return say(rc, msg, msgsize);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if ((rc = MPI_Comm_rank(MPI_COMM_WORLD, rank)) != MPI_SUCCESS) return say(rc, msg, msgsize);
    if ((rc = MPI_Comm_size(MPI_COMM_WORLD, size)) != MPI_SUCCESS) return say(rc, msg, msgsize);
    MPI_Comm node;
    if ((rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, *rank, MPI_INFO_NULL, &node)) != MPI_SUCCESS)
        return say(rc, msg, msgsize);
    rc = MPI_Comm_rank(node, local_rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(node, local_size);
    MPI_Comm_free(&node);
    return rc == MPI_SUCCESS ? 0 : say(rc, msg, msgsize);
}

static int mpi_allreduce_sum_f32(float *buf, size_t n, char *msg, size_t msgsize)
{
    if (n > INT_MAX) return too_big(n, msg, msgsize);
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? 0 : say(rc, msg, msgsize);
}

static int mpi_allreduce_max_int(int *v, char *msg, size_t msgsize)
{
    int rc = MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? 0 : say(rc, msg, msgsize);
}

static int mpi_bcast(void *buf, size_t n, int root, char *msg, size_t msgsize)
{
    if (n > INT_MAX) return too_big(n, msg, msgsize);
    int rc = MPI_Bcast(buf, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? 0 : say(rc, msg, msgsize);
}

static int mpi_gather(const void *send, size_t n, void *recv, int root, char *msg, size_t msgsize)
{
    if (n > INT_MAX) return too_big(n, msg, msgsize);
    int rc = MPI_Gather(send, (int)n, MPI_BYTE, recv, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? 0 : say(rc, msg, msgsize);
}

static void mpi_finalize(void)
{
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
}

static const tps_mpi_api api = {
    .init = mpi_init,
    .allreduce_sum_f32 = mpi_allreduce_sum_f32,
    .allreduce_max_int = mpi_allreduce_max_int,
    .bcast = mpi_bcast,
    .gather = mpi_gather,
    .finalize = mpi_finalize,
};

const tps_mpi_api *tps_mpi_plugin(unsigned abi)
{
    return abi == TPS_PLUGIN_ABI ? &api : NULL;
}
