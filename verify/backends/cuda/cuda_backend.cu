/* libtpshard-cuda.so: the device primitives of verify/ranks/plugin.h on GPUs.
 *
 * Each rank has its own device, stream and cuBLAS handle.  Its weight slices are uploaded in
 * their dtype (BF16, F16 or F32) and every GEMM is a cublasGemmEx on a block of a slice with
 * operands in that dtype and float32 accumulation (CUBLAS_COMPUTE_32F, no TF32).  The
 * activations come from the host in float32; a GEMM needs them in the weight's dtype, so each
 * token's row goes in as two rows, hi = round(x) and lo = round(x - hi), whose products the
 * GEMM sums in float32: the weights are used exactly as stored and the activations keep
 * about 16 (BF16) or 22 (F16) bits instead of 8 or 11, so the result is held to the same
 * tolerance as the CPU ranks rather than to the rounding of the activations.  Everything
 * else of the layer (norms, attention, RoPE, routing) is the host's (verify/math/ops_tmpl.h), the
 * same code for every backend.
 *
 * The all-reduce is ncclAllReduce (one host thread per rank over ncclCommInitAll
 * communicators, or one rank per MPI process over ncclCommInitRank); when ranks share GPUs in
 * one process (--emulate), the ranks' device buffers are summed on the first rank's GPU in
 * rank order (cublasSaxpy) and copied back to each.  Under MPI with shared GPUs the host sums
 * between processes and this plugin's all-reduce is not called.  Every CUDA, cuBLAS and NCCL
 * call is checked, and its error names the rank and the device.
 *
 * The reference (ABI 3) has its own two streams and cuBLAS handle on the first rank's GPU, so
 * that it never waits behind a rank's work nor shares its handle: upload_async copies a chunk
 * from page-locked memory (host_alloc: cudaMallocHost) on the copy stream and records an
 * event; gemm_f64 waits for that event on the compute stream, widens the chunk to float64 there
 * (k_widen: BF16, F16, F32, F64, FP8 through the host's table, times the block scale, rounded
 * to float as the host rounds it) and multiplies by cublasDgemm, so the next chunk's copy runs
 * beside this chunk's GEMM. */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "verify/ranks/plugin.h"
}

extern "C" const tps_dev_api *tps_dev_plugin(unsigned abi, const size_t *sizes, size_t nsizes);

/* ---- errors ---- */

/* Check macros: jump to the function's cleanup label with the error of rank g. */
#define CU(call)                                                                                              \
    do {                                                                                                      \
        cudaError_t e_ = (call);                                                                              \
        if (e_ != cudaSuccess) {                                                                              \
            st = tps_dev_fail(err, TPS_EIO, "rank %llu on GPU %d: %s: %s (%s)", (unsigned long long)g->rank, g->dev, \
                       #call, cudaGetErrorString(e_), cudaGetErrorName(e_));                                 \
            goto cleanup;                                                                                     \
        }                                                                                                     \
    } while (0)
#define BLAS(call)                                                                                      \
    do {                                                                                                \
        cublasStatus_t e_ = (call);                                                                     \
        if (e_ != CUBLAS_STATUS_SUCCESS) {                                                              \
            st = tps_dev_fail(err, TPS_EIO, "rank %llu on GPU %d: %s: %s", (unsigned long long)g->rank, g->dev, \
                       #call, cublasGetStatusString(e_));                                              \
            goto cleanup;                                                                               \
        }                                                                                               \
    } while (0)
#define NCCL(call)                                                                                      \
    do {                                                                                                \
        ncclResult_t e_ = (call);                                                                       \
        if (e_ != ncclSuccess) {                                                                        \
            st = tps_dev_fail(err, TPS_EIO, "rank %llu on GPU %d: %s: %s", (unsigned long long)g->rank, g->dev, \
                       #call, ncclGetErrorString(e_));                                                 \
            goto cleanup;                                                                               \
        }                                                                                               \
    } while (0)
/* A kernel launch: its configuration error now, its execution errors at the next sync. */
#define LAUNCHED() CU(cudaGetLastError())
#define CHECK(call)                     \
    do {                                \
        st = (call);                    \
        if (st != TPS_OK) goto cleanup; \
    } while (0)

/* ---- the hi/lo split of the activations ---- */

#define NT 256

static unsigned blocks(size_t cnt)
{
    return (unsigned)((cnt + NT - 1) / NT);
}

/* op[t, k] = hi(x[t, k]) and op[n + t, k] = lo, as the GEMM's 2n columns of K. */
__global__ void k_split(const float *x, size_t n, size_t K, int dt, void *op)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * K) return;
    float v = x[i];
    if (dt == TPS_DT_BF16) {
        __nv_bfloat16 hi = __float2bfloat16_rn(v), lo = __float2bfloat16_rn(v - __bfloat162float(hi));
        ((__nv_bfloat16 *)op)[i] = hi;
        ((__nv_bfloat16 *)op)[n * K + i] = lo;
    } else {
        __half hi = __float2half_rn(v), lo = __float2half_rn(v - __half2float(hi));
        ((__half *)op)[i] = hi;
        ((__half *)op)[n * K + i] = lo;
    }
}

/* y[t, o] = y2[t, o] + y2[n + t, o]: the hi and lo rows' products. */
__global__ void k_join(const float *y2, size_t n, size_t O, float *y)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * O) return;
    y[i] = y2[i] + y2[n * O + i];
}

/* out[i] = element i of a [rows, cols] reference chunk as float64 (plugin.h, tps_dev_weight). */
__global__ void k_widen(const void *p, int dt, const float *table, const double *scale, size_t rows, size_t cols,
                        uint64_t row0, uint64_t bn, uint64_t bk, uint64_t sc, double *out)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    double v;
    switch (dt) {
    case TPS_DT_F64: v = ((const double *)p)[i]; break;
    case TPS_DT_F32: v = ((const float *)p)[i]; break;
    case TPS_DT_BF16: v = __bfloat162float(((const __nv_bfloat16 *)p)[i]); break;
    case TPS_DT_F16: v = __half2float(((const __half *)p)[i]); break;
    default: v = table[((const unsigned char *)p)[i]];
    }
    if (scale) {
        size_t r = i / cols, c = i % cols;
        v = (double)(float)(v * scale[((row0 + r) / bn - row0 / bn) * sc + c / bk]);
    }
    out[i] = v;
}

/* ---- ranks ---- */

typedef struct dweight {
    bool ref; /* a reference chunk (rweight) */
    uint64_t rank;
    int dev;
    void *p;
    tps_dtype dtype;
    uint64_t rows, cols;
} dweight;

/* A growing device scratch buffer. */
typedef struct scratch {
    void *p;
    size_t cap;
} scratch;

/* A reference chunk (upload_async): its bytes as stored, the table and scale rows it needs,
 * and the event of its copy. */
typedef struct rweight {
    dweight w; /* w.p: one allocation of cap bytes holding the bytes, then table and scale */
    size_t cap;
    float *table;
    double *scale;
    uint64_t row0, bn, bk, sc;
    cudaEvent_t copied;
} rweight;

typedef struct grank {
    uint64_t rank;
    int dev;
    cudaStream_t s;
    cublasHandle_t blas;
    ncclComm_t comm;
    scratch x, op, y, y2, sum;
} grank;

typedef struct gctx {
    uint64_t first, count;
    int ndev;
    bool nccl;
    grank *r;
    /* emulate: the ranks' threads meet here, and rank first's GPU holds the sum */
    pthread_barrier_t bar;
    bool have_bar;
    bool *failed;    /* a rank could not stage its buffer: read after the first barrier */
    bool sum_failed; /* the sum on rank first's GPU failed: read after the second */
    scratch red, tmp;
    /* the reference, on rank first's GPU (ref_start) */
    bool ref_up;
    cudaStream_t rcopy, rcomp;
    cublasHandle_t rblas;
    scratch rw, rx, ry;
    scratch pool[2]; /* released chunks' allocations, reused: cudaFree would stall the GPU */
} gctx;

static grank *rank_of(gctx *c, uint64_t rank)
{
    return &c->r[rank - c->first];
}

static tps_status reserve(grank *g, scratch *b, size_t bytes, const char *what, tps_error *err)
{
    tps_status st = TPS_OK;
    if (b->cap >= bytes) return TPS_OK;
    cudaFree(b->p);
    b->p = NULL;
    b->cap = 0;
    cudaError_t e = cudaMalloc(&b->p, bytes);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaGetLastError();
        cudaMemGetInfo(&fr, &tot);
        st = tps_dev_fail(err, TPS_EIO, "rank %llu on GPU %d: cudaMalloc of %zu bytes for %s: %s (%zu of %zu bytes free)",
                   (unsigned long long)g->rank, g->dev, bytes, what, cudaGetErrorString(e), fr, tot);
        b->p = NULL;
        return st;
    }
    b->cap = bytes;
    return TPS_OK;
}

static size_t elem_size(tps_dtype dt)
{
    return dt == TPS_DT_F32 ? 4 : 2;
}

/* ---- the primitives ---- */

static tps_status g_upload(void *ctx, uint64_t rank, const tps_dev_weight *w, void **out, tps_error *err)
{
    tps_status st = TPS_OK;
    grank *g = rank_of((gctx *)ctx, rank);
    size_t bytes = (size_t)(w->rows * w->cols) * elem_size(w->dtype);
    scratch upload_buf = {NULL, 0};
    dweight *d = (dweight *)calloc(1, sizeof *d);
    if (!d) return tps_dev_fail(err, TPS_EIO, "rank %llu: out of memory for %s's handle", (unsigned long long)rank, w->name);
    if (w->dtype != TPS_DT_BF16 && w->dtype != TPS_DT_F16 && w->dtype != TPS_DT_F32) {
        st = tps_dev_fail(err, TPS_EINVALID, "rank %llu: %s has dtype number %d; the GPU takes BF16, F16 or F32",
                   (unsigned long long)rank, w->name, (int)w->dtype);
        goto cleanup;
    }
    d->rank = rank;
    d->dev = g->dev;
    d->dtype = w->dtype;
    d->rows = w->rows;
    d->cols = w->cols;
    CU(cudaSetDevice(g->dev));
    CHECK(reserve(g, &upload_buf, bytes ? bytes : 1, w->name, err));
    d->p = upload_buf.p;
    CU(cudaMemcpyAsync(d->p, w->data, bytes, cudaMemcpyHostToDevice, g->s));
    /* From pageable memory the copy may return before the bytes landed: wait for them. */
    CU(cudaStreamSynchronize(g->s));
    *out = d;
    return TPS_OK;
cleanup:
    if (d->p) cudaFree(d->p);
    free(d);
    return st;
}

static tps_status g_gemm(void *ctx, uint64_t rank, void *buf, const tps_dev_gemm *gm, tps_error *err)
{
    tps_status st = TPS_OK;
    grank *g = rank_of((gctx *)ctx, rank);
    const dweight *w = (const dweight *)buf;
    size_t n = gm->n, K = (size_t)(gm->i1 - gm->i0), O = (size_t)(gm->o1 - gm->o0), es = elem_size(w->dtype);
    const float one = 1.0f, zero = 0.0f;
    /* The block of w the product reads, and its leading dimension in cuBLAS's column-major
     * terms: a Linear [out, in] is read transposed, a Conv1D [in, out] as it is. */
    size_t first = gm->conv1d ? (size_t)(gm->i0 * w->cols + gm->o0) : (size_t)(gm->o0 * w->cols + gm->i0);
    const char *wp = (const char *)w->p + first * es;
    cublasOperation_t ta = gm->conv1d ? CUBLAS_OP_N : CUBLAS_OP_T;
    int lda = (int)w->cols;
    if (w->rank != rank)
        return tps_dev_fail(err, TPS_EIO, "rank %llu multiplied by a weight on rank %llu's GPU", (unsigned long long)rank,
                     (unsigned long long)w->rank);
    CU(cudaSetDevice(g->dev));
    CHECK(reserve(g, &g->x, n * K * sizeof(float), "the activations", err));
    CHECK(reserve(g, &g->y, n * O * sizeof(float), "a GEMM's output", err));
    CU(cudaMemcpy2DAsync(g->x.p, K * sizeof(float), gm->x, gm->ldx * sizeof(float), K * sizeof(float), n,
                         cudaMemcpyHostToDevice, g->s));
    if (w->dtype == TPS_DT_F32) {
        BLAS(cublasGemmEx(g->blas, ta, CUBLAS_OP_N, (int)O, (int)n, (int)K, &one, wp, CUDA_R_32F, lda, g->x.p,
                          CUDA_R_32F, (int)K, &zero, g->y.p, CUDA_R_32F, (int)O, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT));
    } else {
        cudaDataType_t t = w->dtype == TPS_DT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
        CHECK(reserve(g, &g->op, 2 * n * K * es, "the GEMM operands", err));
        CHECK(reserve(g, &g->y2, 2 * n * O * sizeof(float), "a GEMM's hi/lo outputs", err));
        k_split<<<blocks(n * K), NT, 0, g->s>>>((const float *)g->x.p, n, K, (int)w->dtype, g->op.p);
        LAUNCHED();
        BLAS(cublasGemmEx(g->blas, ta, CUBLAS_OP_N, (int)O, (int)(2 * n), (int)K, &one, wp, t, lda, g->op.p, t,
                          (int)K, &zero, g->y2.p, CUDA_R_32F, (int)O, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        k_join<<<blocks(n * O), NT, 0, g->s>>>((const float *)g->y2.p, n, O, (float *)g->y.p);
        LAUNCHED();
    }
    CU(cudaMemcpy2DAsync(gm->y, gm->ldy * sizeof(float), g->y.p, O * sizeof(float), O * sizeof(float), n,
                         cudaMemcpyDeviceToHost, g->s));
    CU(cudaStreamSynchronize(g->s));
cleanup:
    return st;
}

/* Ranks sharing GPUs in one process: every rank's buffer onto its device, then rank first's
 * thread adds them on its GPU in rank order, then each copies the sum back.  The threads
 * meet at the barrier whatever failed, so none is left waiting. */
static tps_status allreduce_shared(gctx *c, grank *g, float *buf, size_t n, tps_error *err)
{
    tps_status st = TPS_OK;
    uint64_t me = g->rank - c->first;
    size_t bytes = n * sizeof(float);
    bool any = false;
    grank *g0 = &c->r[0];
    if (cudaSetDevice(g->dev) != cudaSuccess || reserve(g, &g->sum, bytes, "the all-reduce", err) != TPS_OK ||
        cudaMemcpyAsync(g->sum.p, buf, bytes, cudaMemcpyHostToDevice, g->s) != cudaSuccess ||
        cudaStreamSynchronize(g->s) != cudaSuccess)
        st = tps_dev_fail(err, TPS_EIO, "rank %llu on GPU %d: staging the all-reduce of %zu floats failed",
                   (unsigned long long)g->rank, g->dev, n);
    c->failed[me] = st != TPS_OK;
    pthread_barrier_wait(&c->bar);
    for (uint64_t q = 0; q < c->count; q++) any = any || c->failed[q];
    if (!any && me == 0) { /* the sum, on rank first's GPU */
        tps_status s0 = reserve(g, &c->red, bytes, "the all-reduce's sum", err);
        if (s0 == TPS_OK) s0 = reserve(g, &c->tmp, bytes, "the all-reduce's addend", err);
        for (uint64_t q = 0; q < c->count && s0 == TPS_OK; q++) {
            const float alpha = 1.0f;
            grank *gq = &c->r[q];
            cudaError_t e = cudaMemcpyPeerAsync(q ? c->tmp.p : c->red.p, g0->dev, gq->sum.p, gq->dev, bytes, g0->s);
            cublasStatus_t be = q && e == cudaSuccess
                                    ? cublasSaxpy(g0->blas, (int)n, &alpha, (const float *)c->tmp.p, 1, (float *)c->red.p, 1)
                                    : CUBLAS_STATUS_SUCCESS;
            if (e != cudaSuccess || be != CUBLAS_STATUS_SUCCESS)
                s0 = tps_dev_fail(err, TPS_EIO, "rank %llu on GPU %d: adding rank %llu's buffer: %s",
                           (unsigned long long)g->rank, g->dev, (unsigned long long)gq->rank,
                           e != cudaSuccess ? cudaGetErrorString(e) : cublasGetStatusString(be));
        }
        if (s0 == TPS_OK && cudaStreamSynchronize(g0->s) != cudaSuccess)
            s0 = tps_dev_fail(err, TPS_EIO, "rank %llu on GPU %d: the all-reduce's sum failed", (unsigned long long)g->rank,
                       g->dev);
        c->sum_failed = s0 != TPS_OK;
        st = s0;
    }
    pthread_barrier_wait(&c->bar); /* the sum is ready, or sum_failed says it is not */
    any = any || c->sum_failed;
    if (!any) {
        CU(cudaMemcpyPeerAsync(g->sum.p, g->dev, c->red.p, g0->dev, bytes, g->s));
        CU(cudaMemcpyAsync(buf, g->sum.p, bytes, cudaMemcpyDeviceToHost, g->s));
        CU(cudaStreamSynchronize(g->s));
    }
cleanup:
    pthread_barrier_wait(&c->bar); /* nobody stages the next all-reduce before all have read the sum */
    if (any && st == TPS_OK)
        st = tps_dev_fail(err, TPS_EIO, "rank %llu: the all-reduce failed on another rank (its message says why)",
                   (unsigned long long)g->rank);
    return st;
}

static tps_status g_allreduce(void *ctx, uint64_t rank, float *buf, size_t n, tps_error *err)
{
    tps_status st = TPS_OK;
    gctx *c = (gctx *)ctx;
    grank *g = rank_of(c, rank);
    size_t bytes = n * sizeof(float);
    if (!c->nccl) return allreduce_shared(c, g, buf, n, err);
    CU(cudaSetDevice(g->dev));
    CHECK(reserve(g, &g->sum, bytes, "the all-reduce", err));
    CU(cudaMemcpyAsync(g->sum.p, buf, bytes, cudaMemcpyHostToDevice, g->s));
    NCCL(ncclAllReduce(g->sum.p, g->sum.p, n, ncclFloat, ncclSum, g->comm, g->s));
    CU(cudaMemcpyAsync(buf, g->sum.p, bytes, cudaMemcpyDeviceToHost, g->s));
    CU(cudaStreamSynchronize(g->s));
cleanup:
    return st;
}

static void g_release(void *ctx, uint64_t rank, void *buf)
{
    (void)ctx;
    (void)rank;
    dweight *w = (dweight *)buf;
    if (!w) return;
    cudaSetDevice(w->dev);
    if (w->ref) {
        gctx *c = (gctx *)ctx;
        rweight *rw = (rweight *)w;
        cudaEventSynchronize(rw->copied); /* the host buffer it came from is reused next */
        cudaEventDestroy(rw->copied);
        /* Kept for the next chunk: in a free slot, else in place of a smaller allocation. */
        int slot = !c->pool[0].p ? 0 : !c->pool[1].p ? 1 : c->pool[0].cap <= c->pool[1].cap ? 0 : 1;
        if (!c->pool[slot].p || c->pool[slot].cap < rw->cap) {
            cudaFree(c->pool[slot].p);
            c->pool[slot] = (scratch){w->p, rw->cap};
            w->p = NULL;
        }
    }
    cudaFree(w->p);
    free(w);
}

/* ---- the reference ---- */

/* The reference's streams and handle, made on first use. */
static tps_status ref_start(gctx *c, grank *g, tps_error *err)
{
    tps_status st = TPS_OK;
    CU(cudaSetDevice(g->dev));
    if (c->ref_up) return TPS_OK;
    CU(cudaStreamCreateWithFlags(&c->rcopy, cudaStreamNonBlocking));
    CU(cudaStreamCreateWithFlags(&c->rcomp, cudaStreamNonBlocking));
    BLAS(cublasCreate(&c->rblas));
    BLAS(cublasSetStream(c->rblas, c->rcomp));
    c->ref_up = true;
cleanup:
    return st;
}

static tps_status g_host_alloc(void *ctx, size_t bytes, void **p, tps_error *err)
{
    tps_status st = TPS_OK;
    gctx *c = (gctx *)ctx;
    grank *g = &c->r[0];
    *p = NULL;
    CU(cudaSetDevice(g->dev));
    CU(cudaMallocHost(p, bytes ? bytes : 1));
cleanup:
    return st;
}

static void g_host_free(void *ctx, void *p)
{
    (void)ctx;
    cudaFreeHost(p);
}

static tps_status g_upload_async(void *ctx, uint64_t rank, const tps_dev_weight *w, void **out, tps_error *err)
{
    tps_status st = TPS_OK;
    gctx *c = (gctx *)ctx;
    grank *g = rank_of(c, rank);
    size_t es = w->dtype == TPS_DT_F64 ? 8 : w->dtype == TPS_DT_F32 ? 4 : w->dtype == TPS_DT_BF16 || w->dtype == TPS_DT_F16 ? 2 : 1;
    size_t bytes = (size_t)(w->rows * w->cols) * es;
    size_t srows = w->scale && w->rows ? (size_t)((w->row0 + w->rows - 1) / w->scale_bn - w->row0 / w->scale_bn + 1) : 0;
    bool native = es > 1;
    rweight *d = (rweight *)calloc(1, sizeof *d);
    *out = NULL;
    if (!d) return tps_dev_fail(err, TPS_EIO, "rank %llu: out of memory for %s's handle", (unsigned long long)rank, w->name);
    if (!native && !w->table) {
        st = tps_dev_fail(err, TPS_EINVALID, "rank %llu: %s has dtype number %d and no table of its values",
                          (unsigned long long)rank, w->name, (int)w->dtype);
        goto cleanup;
    }
    CHECK(ref_start(c, g, err));
    d->w = (dweight){true, rank, g->dev, NULL, w->dtype, w->rows, w->cols};
    d->row0 = w->row0;
    d->bn = w->scale_bn;
    d->bk = w->scale_bk;
    d->sc = w->scale_cols;
    CU(cudaEventCreateWithFlags(&d->copied, cudaEventDisableTiming));
    {
        size_t at = (bytes + 255) / 256 * 256, sb = srows * (size_t)w->scale_cols * sizeof(double),
               need = at + 256 * sizeof(float) + sb;
        for (int i = 0; i < 2 && !d->w.p; i++) /* a released chunk's allocation, if it is large enough */
            if (c->pool[i].p && c->pool[i].cap >= need) {
                d->w.p = c->pool[i].p;
                d->cap = c->pool[i].cap;
                c->pool[i] = (scratch){NULL, 0};
            }
        if (!d->w.p) { /* rounded up to a power of two of at least 1 MiB, so that it serves later chunks */
            size_t cap = (size_t)1 << 20;
            while (cap < need) cap <<= 1;
            CU(cudaMalloc(&d->w.p, cap));
            d->cap = cap;
        }
        d->table = (float *)((char *)d->w.p + at);
        d->scale = sb ? (double *)(d->table + 256) : NULL;
        CU(cudaMemcpyAsync(d->w.p, w->data, bytes, cudaMemcpyHostToDevice, c->rcopy));
        if (!native) CU(cudaMemcpyAsync(d->table, w->table, 256 * sizeof(float), cudaMemcpyHostToDevice, c->rcopy));
        if (sb) CU(cudaMemcpyAsync(d->scale, w->scale, sb, cudaMemcpyHostToDevice, c->rcopy));
    }
    CU(cudaEventRecord(d->copied, c->rcopy));
    *out = d;
    return TPS_OK;
cleanup:
    if (d->copied) cudaEventSynchronize(d->copied), cudaEventDestroy(d->copied);
    cudaStreamSynchronize(c->rcopy);
    cudaFree(d->w.p);
    free(d);
    return st;
}

static tps_status g_upload_wait(void *ctx, uint64_t rank, void *buf, tps_error *err)
{
    tps_status st = TPS_OK;
    grank *g = rank_of((gctx *)ctx, rank);
    CU(cudaEventSynchronize(((rweight *)buf)->copied));
cleanup:
    return st;
}

static tps_status g_gemm_f64(void *ctx, uint64_t rank, void *buf, const tps_dev_gemm64 *gm, tps_error *err)
{
    tps_status st = TPS_OK;
    gctx *c = (gctx *)ctx;
    grank *g = rank_of(c, rank);
    const rweight *w = (const rweight *)buf;
    size_t n = gm->n, K = (size_t)(gm->i1 - gm->i0), O = (size_t)(gm->o1 - gm->o0), cnt = (size_t)(w->w.rows * w->w.cols);
    const double one = 1.0, beta = gm->accumulate ? 1.0 : 0.0;
    size_t first = gm->conv1d ? (size_t)(gm->i0 * w->w.cols + gm->o0) : (size_t)(gm->o0 * w->w.cols + gm->i0);
    if (!w->w.ref || w->w.rank != rank)
        return tps_dev_fail(err, TPS_EIO, "rank %llu: a float64 GEMM on a weight that is not the reference's on its GPU",
                            (unsigned long long)rank);
    CHECK(ref_start(c, g, err));
    CHECK(reserve(g, &c->rw, cnt * sizeof(double), "the reference's widened weights", err));
    CHECK(reserve(g, &c->rx, n * K * sizeof(double), "the reference's activations", err));
    CHECK(reserve(g, &c->ry, n * O * sizeof(double), "the reference's outputs", err));
    CU(cudaStreamWaitEvent(c->rcomp, w->copied, 0));
    k_widen<<<blocks(cnt), NT, 0, c->rcomp>>>(w->w.p, (int)w->w.dtype, w->table, w->scale, (size_t)w->w.rows,
                                              (size_t)w->w.cols, w->row0, w->bn, w->bk, w->sc, (double *)c->rw.p);
    LAUNCHED();
    CU(cudaMemcpy2DAsync(c->rx.p, K * sizeof(double), gm->x, gm->ldx * sizeof(double), K * sizeof(double), n,
                         cudaMemcpyHostToDevice, c->rcomp));
    if (gm->accumulate)
        CU(cudaMemcpy2DAsync(c->ry.p, O * sizeof(double), gm->y, gm->ldy * sizeof(double), O * sizeof(double), n,
                             cudaMemcpyHostToDevice, c->rcomp));
    BLAS(cublasDgemm(c->rblas, gm->conv1d ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, (int)O, (int)n, (int)K, &one,
                     (const double *)c->rw.p + first, (int)w->w.cols, (const double *)c->rx.p, (int)K, &beta,
                     (double *)c->ry.p, (int)O));
    CU(cudaMemcpy2DAsync(gm->y, gm->ldy * sizeof(double), c->ry.p, O * sizeof(double), O * sizeof(double), n,
                         cudaMemcpyDeviceToHost, c->rcomp));
    CU(cudaStreamSynchronize(c->rcomp));
cleanup:
    return st;
}

/* ---- devices, open, close ---- */

static tps_status g_devices(int *count, char *desc, size_t descsize, tps_error *err)
{
    *count = 0;
    cudaError_t e = cudaGetDeviceCount(count);
    if (e != cudaSuccess || *count == 0) {
        int drv = 0;
        cudaDriverGetVersion(&drv);
        return tps_dev_fail(err, TPS_EBACKEND,
                     "the cuda backend found no GPU: cudaGetDeviceCount: %s (%s; driver API %d.%d%s)",
                     e != cudaSuccess ? cudaGetErrorString(e) : "0 devices",
                     e != cudaSuccess ? cudaGetErrorName(e) : "no device", drv / 1000, drv % 1000 / 10,
                     drv ? "" : ", no NVIDIA driver loaded");
    }
    cudaDeviceProp p;
    int rt = 0, nv = 0, bl = 0;
    cudaRuntimeGetVersion(&rt);
    ncclGetVersion(&nv);
    cublasGetProperty(MAJOR_VERSION, &bl);
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) snprintf(p.name, sizeof p.name, "?");
    snprintf(desc, descsize, "%d x %s, CUDA %d.%d, cuBLAS %d, NCCL %d.%d.%d", *count, p.name, rt / 1000,
             rt % 1000 / 10, bl, nv / 10000, nv / 100 % 100, nv % 100);
    return TPS_OK;
}

static tps_status g_comm_id(unsigned char id[TPS_NCCL_ID_BYTES], tps_error *err)
{
    ncclUniqueId u;
    ncclResult_t e = ncclGetUniqueId(&u);
    if (e != ncclSuccess) return tps_dev_fail(err, TPS_EBACKEND, "ncclGetUniqueId: %s", ncclGetErrorString(e));
    memcpy(id, &u, TPS_NCCL_ID_BYTES);
    return TPS_OK;
}

static void g_close(void *ctx)
{
    gctx *c = (gctx *)ctx;
    if (!c) return;
    for (uint64_t i = 0; c->r && i < c->count; i++) {
        grank *g = &c->r[i];
        cudaSetDevice(g->dev);
        scratch *bufs[] = {&g->x, &g->op, &g->y, &g->y2, &g->sum};
        for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) cudaFree(bufs[k]->p);
        if (g->comm) ncclCommDestroy(g->comm);
        if (g->blas) cublasDestroy(g->blas);
        if (g->s) cudaStreamDestroy(g->s);
    }
    if (c->r && c->count) cudaSetDevice(c->r[0].dev);
    if (c->rblas) cublasDestroy(c->rblas);
    if (c->rcopy) cudaStreamDestroy(c->rcopy);
    if (c->rcomp) cudaStreamDestroy(c->rcomp);
    cudaFree(c->rw.p);
    cudaFree(c->pool[0].p);
    cudaFree(c->pool[1].p);
    cudaFree(c->rx.p);
    cudaFree(c->ry.p);
    cudaFree(c->red.p);
    cudaFree(c->tmp.p);
    if (c->have_bar) pthread_barrier_destroy(&c->bar);
    free(c->failed);
    free(c->r);
    free(c);
}

/* The device, stream and cuBLAS handle of each of c's ranks. */
static tps_status open_ranks(gctx *c, const tps_dev_setup *s, int *devs, tps_error *err)
{
    tps_status st = TPS_OK;
    grank *g = NULL;
    if (cudaGetDeviceCount(&c->ndev) != cudaSuccess || c->ndev == 0)
        return tps_dev_fail(err, TPS_EBACKEND, "rank %llu: the cuda backend found no GPU", (unsigned long long)s->first);
    for (uint64_t i = 0; i < s->count; i++) {
        g = &c->r[i];
        g->rank = s->first + i;
        g->dev = s->local_rank >= 0 ? s->local_rank % c->ndev : (int)(i % (uint64_t)c->ndev);
        devs[i] = g->dev;
        CU(cudaSetDevice(g->dev));
        CU(cudaStreamCreateWithFlags(&g->s, cudaStreamNonBlocking));
        BLAS(cublasCreate(&g->blas));
        BLAS(cublasSetStream(g->blas, g->s));
    }
cleanup:
    return st;
}

static tps_status g_open(const tps_dev_setup *s, void **out, tps_error *err)
{
    tps_status st = TPS_OK;
    grank *g = NULL;
    int *devs = NULL;
    ncclComm_t *comms = NULL;
    gctx *c = (gctx *)calloc(1, sizeof *c);
    *out = NULL;
    if (!c) return tps_dev_fail(err, TPS_EIO, "out of memory for the cuda backend");
    c->first = s->first;
    c->count = s->count;
    c->nccl = !s->emulate;
    c->r = (grank *)calloc(s->count, sizeof *c->r);
    c->failed = (bool *)calloc(s->count, sizeof *c->failed);
    devs = (int *)calloc(s->count, sizeof *devs);
    comms = (ncclComm_t *)calloc(s->count, sizeof *comms);
    if (!c->r || !c->failed || !devs || !comms) st = tps_dev_fail(err, TPS_EIO, "out of memory for the cuda backend's ranks");
    if (st == TPS_OK && pthread_barrier_init(&c->bar, NULL, (unsigned)s->count) != 0)
        st = tps_dev_fail(err, TPS_EIO, "cannot create a barrier for %llu ranks", (unsigned long long)s->count);
    c->have_bar = st == TPS_OK;
    if (st == TPS_OK) st = open_ranks(c, s, devs, err);
    if (c->nccl && s->nccl_id) {
        /* ncclCommInitRank returns only once every process of the job has called it: a
         * process that failed above would leave the others blocked in it for good, so the
         * processes agree over MPI first. */
        float failed = st != TPS_OK;
        tps_status cs = s->host_comm->allreduce_sum(s->host_comm, &failed, 1, err);
        if (st == TPS_OK && cs != TPS_OK) st = cs;
        if (st == TPS_OK && failed > 0)
            st = tps_dev_fail(err, TPS_EIO, "rank %llu: NCCL not started: another rank could not set up its GPU (its process says why)",
                       (unsigned long long)s->first);
    }
    if (st != TPS_OK) goto cleanup;
    if (c->nccl) {
        g = &c->r[0];
        if (s->nccl_id) {
            ncclUniqueId id;
            memcpy(&id, s->nccl_id, sizeof id);
            CU(cudaSetDevice(g->dev));
            NCCL(ncclCommInitRank(&g->comm, (int)s->T, id, (int)s->first));
        } else {
            NCCL(ncclCommInitAll(comms, (int)s->count, devs));
            for (uint64_t i = 0; i < s->count; i++) c->r[i].comm = comms[i];
        }
    }
    *out = c;
    c = NULL;
cleanup:
    g_close(c);
    free(devs);
    free(comms);
    return st;
}

static const tps_dev_api api = {"cuda",       g_devices,      g_comm_id,      g_open,        g_upload,
                                g_gemm,       g_allreduce,    g_release,      g_close,       g_host_alloc,
                                g_host_free,  g_upload_async, g_upload_wait,  g_gemm_f64};

extern "C" const unsigned tps_dev_plugin_abi;
extern "C" const unsigned tps_dev_plugin_abi = TPS_PLUGIN_ABI;

extern "C" const tps_dev_api *tps_dev_plugin(unsigned abi, const size_t *sizes, size_t nsizes)
{
    return tps_dev_abi_matches(abi, sizes, nsizes) ? &api : NULL;
}
