/* The interface between tpshard and its two optional plugins, loaded with dlopen() by
 * verify/backend.c only when a backend asks for them:
 *
 *   libtpshard-mpi.so   verify/mpi/mpi_glue.c, built with mpicc: the few MPI calls the
 *                       MPI launcher needs (init, all-reduce, broadcast, gather).
 *   libtpshard-cuda.so  verify/cuda/cuda_backend.cu, built with nvcc against cuBLAS and
 *                       NCCL: the sharded pass of one layer on GPUs.
 *
 * Why plugins rather than linking: the plain binary must start on machines without CUDA
 * or MPI runtime libraries (most machines that split checkpoints), and a binary linked
 * to libcudart/libnccl/libmpi does not.  Each plugin carries an rpath to the libraries
 * it was built against, so a machine that has them needs no LD_LIBRARY_PATH.
 *
 * The plugins are built from the same tree as the binary and use its structures
 * (verify/internal.h) directly; they call nothing in libtpshard, so they link to no
 * tpshard symbol.  Each exports one C function that returns its table for a matching
 * ABI version and structure sizes, NULL otherwise (a stale plugin from another build is
 * refused, not crashed into).  Plain C, usable from C++ (nvcc) too. */
#ifndef TPS_VERIFY_PLUGIN_H
#define TPS_VERIFY_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>

#include "internal.h"

#define TPS_PLUGIN_ABI 1

/* ---- MPI ----  Every function returns 0, or an MPI error code with msg filled. */
typedef struct tps_mpi_api {
    /* MPI_Init (once per process): world rank and size, and the rank and count of the
     * processes on this node (MPI_Comm_split_type SHARED), which pick a GPU. */
    int (*init)(int *rank, int *size, int *local_rank, int *local_size, char *msg, size_t msgsize);
    int (*allreduce_sum_f32)(float *buf, size_t n, char *msg, size_t msgsize);
    int (*allreduce_max_int)(int *v, char *msg, size_t msgsize);
    int (*bcast)(void *buf, size_t n, int root, char *msg, size_t msgsize);
    /* n bytes from every process into recv (size * n bytes, on root only) in rank order. */
    int (*gather)(const void *send, size_t n, void *recv, int root, char *msg, size_t msgsize);
    void (*finalize)(void);
} tps_mpi_api;

typedef const tps_mpi_api *(*tps_mpi_plugin_fn)(unsigned abi);
#define TPS_MPI_PLUGIN_SYMBOL "tps_mpi_plugin"

/* ---- CUDA ---- */

#define TPS_NCCL_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */

/* One rank of the pass as the host prepared it: its slices (in host memory, dtypes BF16,
 * F16 or F32 only), the maps of its heads and columns in those slices, whether a stage's
 * slices have the wrong shape (the rank then contributes zeros to that stage's
 * all-reduce), and where its float32 results go. */
typedef struct tps_cuda_rank {
    uint64_t rank;
    const vlayer *l;
    vattn_map am;
    vmlp_map mm;
    bool bad[TPS_VSTAGE_COUNT];
    float *partial[TPS_VSTAGE_COUNT], *out[TPS_VSTAGE_COUNT]; /* host, n * hidden each */
} tps_cuda_rank;

typedef struct tps_cuda_setup {
    uint64_t T;            /* ranks of the job */
    uint64_t first, count; /* the ranks this process runs: all of them, or its MPI rank */
    int local_rank;        /* MPI: picks the GPU (local_rank % devices); -1 in one process */
    bool emulate;          /* ranks share GPUs: no NCCL; joined on the device (one process)
                            * or by host_comm (MPI) */
    const unsigned char *nccl_id; /* MPI with NCCL: rank 0's ncclUniqueId */
    tps_vcomm *host_comm;         /* MPI emulate: the all-reduce between processes */
} tps_cuda_setup;

typedef struct tps_cuda_api {
    /* GPUs visible to this process; names the first one and the library versions in
     * desc.  TPS_EBACKEND with the CUDA error when there are none. */
    tps_status (*devices)(int *count, char *desc, size_t descsize, tps_error *err);
    tps_status (*nccl_id)(unsigned char id[TPS_NCCL_ID_BYTES], tps_error *err);
    /* Sets up streams, cuBLAS handles and NCCL communicators for s's ranks. */
    tps_status (*open)(const tps_cuda_setup *s, void **ctx, tps_error *err);
    /* The pass of one layer for the ranks of open, in rank order of s->first.. */
    tps_status (*run)(void *ctx, const tps_block *b, const vdims *d, size_t n, const float *x, tps_cuda_rank *ranks,
                      vstats *stats, tps_error *err);
    void (*close)(void *ctx);
} tps_cuda_api;

/* sizes: the host's sizeof of the structures shared with the plugin, in this order. */
#define TPS_CUDA_ABI_SIZES                                                                                   \
    {sizeof(tps_block), sizeof(vdims), sizeof(vlayer), sizeof(tps_vt), sizeof(vattn_map), sizeof(vmlp_map), \
     sizeof(tps_cuda_rank), sizeof(tps_cuda_setup), sizeof(tps_error), sizeof(vstats), sizeof(tps_vcomm)}
typedef const tps_cuda_api *(*tps_cuda_plugin_fn)(unsigned abi, const size_t *sizes, size_t nsizes);
#define TPS_CUDA_PLUGIN_SYMBOL "tps_cuda_plugin"

#endif
