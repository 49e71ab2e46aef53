/* The interface between tpshard and its two optional plugins, loaded with dlopen() by
 * verify/backends/backend.c only when a backend asks for them:
 *
 *   libtpshard-mpi.so   verify/backends/mpi/mpi_glue.c, built with mpicc: the few MPI calls the
 *                       MPI launcher needs (init, all-reduce, broadcast, gather).
 *   libtpshard-cuda.so  verify/backends/cuda/cuda_backend.cu, built with nvcc against cuBLAS and
 *                       NCCL: the device primitives (below) on GPUs.
 *   libtpshard-devsim.so verify/backends/devsim/devsim.c, built by every make: the same primitives in
 *                       host memory, so that everything of the GPU path but the CUDA calls
 *                       themselves runs in every make test.
 *
 * Why plugins rather than linking: the plain binary must start on machines without CUDA
 * or MPI runtime libraries (most machines that split checkpoints), and a binary linked
 * to libcudart/libnccl/libmpi does not.  Each plugin carries an rpath to the libraries
 * it was built against, so a machine that has them needs no LD_LIBRARY_PATH.
 *
 * The plugins are built from the same tree as the binary and use its plain structures
 * (below, and tps_error, tps_vcomm) directly; they call nothing in libtpshard, so they link
 * to no tpshard symbol.  Each exports one C function that returns its table for a matching
 * ABI version and structure sizes, NULL otherwise (a stale plugin from another build is
 * refused, not crashed into).  Plain C, usable from C++ (nvcc) too.
 *
 * The ABI sits in verify/ranks/, not with the loader in verify/backends/: the host side of the
 * devices (verify/ranks/device.c) speaks it, and the ranks come before the backends
 * (VERIFY_LAYERS in the Makefile), so the backends and the plugins include it from here. */
#ifndef TPS_VERIFY_PLUGIN_H
#define TPS_VERIFY_PLUGIN_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "../../lib/base/dtype.h"
#include "../../lib/base/status.h"
#include "comm.h"

/* 3: the reference's float64 GEMM on the device (gemm_f64), pinned host memory and the
 * asynchronous upload (host_alloc, host_free, upload_async, upload_wait). */
#define TPS_PLUGIN_ABI 3

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

/* ---- devices ----
 *
 * A device plugin (libtpshard-cuda.so, and libtpshard-devsim.so, the same primitives in host
 * memory) provides what the ranks need from a GPU and nothing more: keep a rank's weight
 * slices in device memory, multiply activations by them, and sum a buffer across the ranks.
 * The layer math itself (norms, attention, RoPE, routing, every family's block) runs on the
 * host, once, in verify/math/ops_tmpl.h, for every backend: a device cannot compute a block
 * differently from the CPU ranks, it can only get a GEMM or an all-reduce wrong.
 *
 * Every call names the rank it is made for; rank r's calls come from one host thread (the
 * rank's), the ranks' threads run at once.  Every function returns TPS_OK or fills err. */

#define TPS_NCCL_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */

/* A weight slice as the host loaded it: rows x cols in row-major order, dtype BF16, F16 or F32
 * (the host widens any other dtype to F32 first).
 *
 * The reference's uploads (upload_async, for gemm_f64) take the bytes as stored instead, to be
 * widened on the device: BF16, F16, F32, F64, or a one-byte dtype (FP8) whose 256 values the
 * host gives in table (its own decoding, verify/math/ops.c).  scale not NULL: element (r, c)
 * is (float)(value * scale[((row0 + r) / scale_bn - row0 / scale_bn) * scale_cols + c / scale_bk]),
 * as verify/math/tensor.h's tps_vscale rounds it; scale points at the scale row of row0, the
 * slice being rows [row0, row0 + rows) of the whole matrix. */
typedef struct tps_dev_weight {
    const char *name; /* for messages */
    tps_dtype dtype;
    uint64_t rows, cols;
    const void *data;
    const float *table;  /* one-byte dtypes, upload_async only */
    const double *scale; /* upload_async only; NULL: none */
    uint64_t row0, scale_bn, scale_bk, scale_cols;
} tps_dev_weight;

/* y[t, o - o0] (row stride ldy) = sum over i in [i0, i1) of x[t, i - i0] (row stride ldx) *
 * W(o, i) for t < n and o in [o0, o1), with W(o, i) = w[o, i] (a Linear, [out, in]) or w[i, o]
 * (conv1d: a Conv1D, [in, out]).  x and y are host float32; the product accumulates in float32
 * and x keeps float32 precision whatever the weight's dtype. */
typedef struct tps_dev_gemm {
    bool conv1d;
    size_t n;
    const float *x;
    size_t ldx;
    uint64_t i0, i1, o0, o1;
    float *y;
    size_t ldy;
} tps_dev_gemm;

/* The reference's product (gemm_f64): tps_dev_gemm's contract with x and y host float64, the
 * weight widened to float64 on the device and every product and sum in float64 (a DGEMM), so
 * that it shares neither precision nor path with the ranks' float32 GEMMs.  accumulate: y +=
 * the product (a Conv1D taken a slice of input rows at a time) instead of y =. */
typedef struct tps_dev_gemm64 {
    bool conv1d, accumulate;
    size_t n;
    const double *x;
    size_t ldx;
    uint64_t i0, i1, o0, o1;
    double *y;
    size_t ldy;
} tps_dev_gemm64;

typedef struct tps_dev_setup {
    uint64_t T;            /* ranks of the job */
    uint64_t first, count; /* the ranks this process runs: all of them, or its MPI rank */
    int local_rank;        /* MPI: picks the GPU (local_rank % devices); -1 in one process */
    bool emulate;          /* ranks share devices: allreduce sums on the device in rank order
                            * (one process), or is not called (MPI: the host sums) */
    const unsigned char *nccl_id; /* MPI with NCCL: rank 0's ncclUniqueId; NULL otherwise */
    tps_vcomm *host_comm;         /* MPI: the processes agree through it before NCCL starts */
} tps_dev_setup;

typedef struct tps_dev_api {
    const char *name; /* "cuda", "devsim" */
    /* Devices visible to this process; desc names them and the library versions.
     * TPS_EBACKEND when there are none. */
    tps_status (*devices)(int *count, char *desc, size_t descsize, tps_error *err);
    /* A unique id for a communicator spanning processes; NULL: the plugin has none (under
     * MPI the host then sums between processes itself). */
    tps_status (*comm_id)(unsigned char id[TPS_NCCL_ID_BYTES], tps_error *err);
    tps_status (*open)(const tps_dev_setup *s, void **ctx, tps_error *err);
    /* Copies w into the rank's device memory; *buf is the plugin's handle of the copy. */
    tps_status (*upload)(void *ctx, uint64_t rank, const tps_dev_weight *w, void **buf, tps_error *err);
    tps_status (*gemm)(void *ctx, uint64_t rank, void *buf, const tps_dev_gemm *g, tps_error *err);
    /* The element-wise sum of every rank's buf (n floats, the same n on every rank) into every
     * rank's buf, added in rank order.  Every rank calls it, whatever happened before. */
    tps_status (*allreduce)(void *ctx, uint64_t rank, float *buf, size_t n, tps_error *err);
    void (*release)(void *ctx, uint64_t rank, void *buf);
    void (*close)(void *ctx);
    /* ---- the reference (ABI 3), on the device of the process's first rank, called from one
     * host thread at a time (the reference's), beside the ranks' own calls. ---- */
    /* bytes of page-locked host memory (cudaMallocHost), from which an upload is a DMA that
     * returns at once; devsim: malloc. */
    tps_status (*host_alloc)(void *ctx, size_t bytes, void **p, tps_error *err);
    void (*host_free)(void *ctx, void *p);
    /* Starts copying w (dtypes as above) to the device and returns; *buf may be used by gemm_f64
     * at once (the device waits for the copy), w->data must stay unchanged until upload_wait
     * (or release) of *buf returns.  devsim: the copy is made before it returns. */
    tps_status (*upload_async)(void *ctx, uint64_t rank, const tps_dev_weight *w, void **buf, tps_error *err);
    tps_status (*upload_wait)(void *ctx, uint64_t rank, void *buf, tps_error *err);
    /* The product of g on buf (an upload_async copy), y written when it returns. */
    tps_status (*gemm_f64)(void *ctx, uint64_t rank, void *buf, const tps_dev_gemm64 *g, tps_error *err);
} tps_dev_api;

/* sizes: the host's sizeof of the structures shared with the plugin, in this order. */
#define TPS_DEV_ABI_SIZES \
    {sizeof(tps_dev_weight), sizeof(tps_dev_gemm), sizeof(tps_dev_setup), sizeof(tps_error), sizeof(tps_vcomm), \
     sizeof(tps_dev_gemm64), sizeof(tps_dev_api)}
typedef const tps_dev_api *(*tps_dev_plugin_fn)(unsigned abi, const size_t *sizes, size_t nsizes);
#define TPS_DEV_PLUGIN_SYMBOL "tps_dev_plugin"
/* From ABI 3 on a device plugin also exports the ABI it speaks (const unsigned), so that the host
 * can name it when it refuses the plugin; a plugin without it predates ABI 3. */
#define TPS_DEV_PLUGIN_ABI_SYMBOL "tps_dev_plugin_abi"

/* For the device plugins, which link no tpshard code: whether the host's ABI version and
 * structure sizes are the plugin's own, and tps_fail's contract (the first error is kept). */
static inline bool tps_dev_abi_matches(unsigned abi, const size_t *sizes, size_t nsizes)
{
    const size_t mine[] = TPS_DEV_ABI_SIZES;
    if (abi != TPS_PLUGIN_ABI || nsizes != sizeof mine / sizeof mine[0]) return false;
    for (size_t i = 0; i < nsizes; i++)
        if (sizes[i] != mine[i]) return false;
    return true;
}

static inline tps_status tps_dev_fail(tps_error *err, tps_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline tps_status tps_dev_fail(tps_error *err, tps_status code, const char *fmt, ...)
{
    if (err->code != TPS_OK) return err->code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->code = code;
    return code;
}

#endif
