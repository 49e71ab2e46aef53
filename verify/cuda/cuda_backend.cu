/* libtpshard-cuda.so: the sharded pass of one layer on GPUs (verify/plugin.h).
 *
 * Each rank runs on its own device and stream with its own cuBLAS handle.  Its slices are
 * uploaded in their dtype (BF16, F16 or F32) and every projection is a cublasGemmEx with
 * operands in that dtype and float32 accumulation (CUBLAS_COMPUTE_32F).  Activations stay
 * float32 between kernels; a GEMM needs them in the weight's dtype, so each token's row
 * goes in as two columns, hi = round(x) and lo = round(x - hi), whose products the GEMM
 * sums in float32: the weights are used exactly as stored and the activations keep about
 * 16 (BF16) or 22 (F16) bits instead of 8 or 11, so the result is held to the same
 * tolerance as the CPU backend's float32 ranks rather than to the rounding of the
 * activations.  Norms, RoPE, causal softmax attention, activations and the MoE combine
 * are small kernels written for clarity, not speed: the checkpoints' GEMMs dominate.
 * Mixtral's top-k routing runs on the host, as on the CPU ranks, from the GPU's logits.
 *
 * Ranks are joined by ncclAllReduce (one host thread per rank over ncclCommInitAll
 * communicators, or one rank per MPI process over ncclCommInitRank); when ranks share a
 * GPU (--emulate) by a sum on the device in rank order (one process), or by the host
 * communicator (MPI).  Every CUDA, cuBLAS and NCCL call is checked, and its error names
 * the rank and the device.  A rank that fails before an all-reduce still enters it with
 * zeros so that its peers do not hang, as the CPU ranks do. */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "verify/gated_threads.h"
#include "verify/moe_route.h"
#include "verify/rope.h"
#include "verify/plugin.h"
}

extern "C" const tps_cuda_api *tps_cuda_plugin(unsigned abi, const size_t *sizes, size_t nsizes);

/* ---- errors ---- */

static tps_status gfail(tps_error *err, tps_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static tps_status gfail(tps_error *err, tps_status code, const char *fmt, ...)
{
    if (err->code != TPS_OK) return err->code; /* the first error is kept */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->code = code;
    return code;
}

/* Check macros: jump to the function's cleanup label with the error of rank g. */
#define CU(call)                                                                                              \
    do {                                                                                                      \
        cudaError_t e_ = (call);                                                                              \
        if (e_ != cudaSuccess) {                                                                              \
            st = gfail(err, TPS_EIO, "rank %llu on GPU %d: %s: %s (%s)", (unsigned long long)g->rank, g->dev, \
                       #call, cudaGetErrorString(e_), cudaGetErrorName(e_));                                 \
            goto cleanup;                                                                                     \
        }                                                                                                     \
    } while (0)
#define BLAS(call)                                                                                      \
    do {                                                                                                \
        cublasStatus_t e_ = (call);                                                                     \
        if (e_ != CUBLAS_STATUS_SUCCESS) {                                                              \
            st = gfail(err, TPS_EIO, "rank %llu on GPU %d: %s: %s", (unsigned long long)g->rank, g->dev, \
                       #call, cublasGetStatusString(e_));                                              \
            goto cleanup;                                                                               \
        }                                                                                               \
    } while (0)
#define NCCL(call)                                                                                      \
    do {                                                                                                \
        ncclResult_t e_ = (call);                                                                       \
        if (e_ != ncclSuccess) {                                                                        \
            st = gfail(err, TPS_EIO, "rank %llu on GPU %d: %s: %s", (unsigned long long)g->rank, g->dev, \
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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- kernels ---- */

__device__ __forceinline__ float ldv(const void *p, int dt, size_t i)
{
    if (dt == TPS_DT_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (dt == TPS_DT_F16) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

/* op[t, k] = hi(x[t, k]) and op[n + t, k] = lo, as the GEMM's 2n columns of K. */
__global__ void k_split(const float *x, size_t ldx, size_t n, size_t K, int dt, void *op)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * K) return;
    size_t t = i / K, k = i % K;
    float v = x[t * ldx + k];
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

/* y[t, o] = y2[t, o] + y2[n + t, o]: the hi and lo columns' products. */
__global__ void k_join(const float *y2, size_t n, size_t O, float *y, size_t ldy)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * O) return;
    size_t t = i / O, o = i % O;
    y[t * ldy + o] = y2[i] + y2[n * O + i];
}

/* dst[t, h * hd + i] = y[t, off + h * stride + i] + bias[off + h * stride + i]. */
__global__ void k_heads(const float *y, size_t ldy, size_t n, size_t cnt, size_t hd, size_t off, size_t stride,
                        const void *bias, int bdt, float *dst, size_t ldd)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * cnt * hd) return;
    size_t t = i / (cnt * hd), h = i / hd % cnt, c = i % hd, src = off + h * stride + c;
    dst[t * ldd + h * hd + c] = y[t * ldy + src] + (bias ? ldv(bias, bdt, src) : 0.0f);
}

/* RoPE, as verify/ops_tmpl.h: angle in double (verify/rope.h's frequencies), rotated in
 * float. */
__global__ void k_rope(float *x, size_t ldx, size_t n, size_t nh, size_t hd, size_t rot, double theta,
                       tps_rope_scaling sc, int interleaved)
{
    size_t half = rot / 2, i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * half * nh) return;
    size_t t = i / (half * nh), j = i / nh % half, h = i % nh;
    double ang = (double)t * vrope_inv_freq(&sc, theta, rot, j, n), ms = vrope_attn_factor(&sc);
    float c = (float)(cos(ang) * ms), s = (float)(sin(ang) * ms);
    size_t i1 = interleaved ? 2 * j : j, i2 = interleaved ? 2 * j + 1 : j + half;
    float *p = x + t * ldx + h * hd, a = p[i1], b = p[i2];
    p[i1] = a * c - b * s;
    p[i2] = b * c + a * s;
}

static __device__ float block_sum(float v, float *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

static __device__ float block_max(float v, float *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

#define NT 256 /* threads of the per-token kernels (a power of two for the reductions) */

/* RMSNorm or LayerNorm of one token per block, then weight and bias. */
__global__ void k_norm(const float *x, size_t H, int layer, double eps, const void *w, int wdt, const void *b, int bdt,
                       float *out)
{
    __shared__ float sh[NT];
    const float *xt = x + (size_t)blockIdx.x * H;
    float *ot = out + (size_t)blockIdx.x * H, mean = 0, acc = 0;
    if (layer) {
        for (size_t i = threadIdx.x; i < H; i += blockDim.x) acc += xt[i];
        mean = block_sum(acc, sh) / (float)H;
        acc = 0;
    }
    for (size_t i = threadIdx.x; i < H; i += blockDim.x) acc += (xt[i] - mean) * (xt[i] - mean);
    float var = block_sum(acc, sh);
    float inv = (float)(1.0 / sqrt((double)(var / (float)H) + eps));
    for (size_t i = threadIdx.x; i < H; i += blockDim.x) {
        float v = (xt[i] - mean) * inv;
        if (w) v *= ldv(w, wdt, i);
        if (b) v += ldv(b, bdt, i);
        ot[i] = v;
    }
}

/* Causal softmax attention of q head blockIdx.x at token blockIdx.y; sc holds n floats. */
__global__ void k_attn(const float *q, size_t qld, const float *k, const float *v, size_t kld, size_t hd,
                       size_t q_first, size_t kv_first, size_t group, float scale, float *ctx)
{
    extern __shared__ float dyn[];
    float *red = dyn, *sc = dyn + NT;
    size_t h = blockIdx.x, t = blockIdx.y, j = (q_first + h) / group - kv_first;
    const float *qt = q + t * qld + h * hd;
    float mx = -INFINITY;
    for (size_t s = threadIdx.x; s <= t; s += blockDim.x) {
        const float *ks = k + s * kld + j * hd;
        float dot = 0;
        for (size_t i = 0; i < hd; i++) dot += qt[i] * ks[i];
        sc[s] = dot * scale;
        mx = fmaxf(mx, sc[s]);
    }
    mx = block_max(mx, red);
    float sum = 0;
    for (size_t s = threadIdx.x; s <= t; s += blockDim.x) {
        sc[s] = (float)exp((double)(sc[s] - mx));
        sum += sc[s];
    }
    sum = block_sum(sum, red);
    for (size_t i = threadIdx.x; i < hd; i += blockDim.x) {
        float c = 0;
        for (size_t s = 0; s <= t; s++) c += sc[s] / sum * v[s * kld + j * hd + i];
        ctx[t * qld + h * hd + i] = c;
    }
}

static __device__ float act(int kind, float v)
{
    double x = (double)v;
    switch (kind) {
    case TPS_ACT_SILU: return (float)(x / (1.0 + exp(-x)));
    case TPS_ACT_GELU_TANH: return (float)(0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))));
    case TPS_ACT_GELU_ERF: return (float)(0.5 * x * (1.0 + erf(x * 0.7071067811865476)));
    }
    return v;
}

/* out[t, c] = act(g[t, c] + bias[c]) * (u ? u[t, c] : 1). */
__global__ void k_act(const float *g, size_t ldg, const float *u, size_t ldu, const void *bias, int bdt, size_t n,
                      size_t in, int kind, float *out)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * in) return;
    size_t t = i / in, c = i % in;
    float a = act(kind, g[t * ldg + c] + (bias ? ldv(bias, bdt, c) : 0.0f));
    out[i] = u ? a * u[t * ldu + c] : a;
}

/* y[t, i] += v[i] (a row-parallel bias after the all-reduce). */
__global__ void k_add_vec(float *y, size_t n, size_t H, const void *v, int vdt)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n * H) y[i] += ldv(v, vdt, i % H);
}

/* y = a + b (residual), or y += b when a is y. */
__global__ void k_add(float *y, const float *a, const float *b, size_t cnt)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < cnt) y[i] = a[i] + b[i];
}

/* out[t, :] += w[t] * y[t, :] (one expert's share of the MoE output). */
__global__ void k_axpy_rows(float *out, const float *y, const float *w, size_t n, size_t H)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n * H && w[i / H] != 0.0f) out[i] += w[i / H] * y[i];
}

static unsigned blocks(size_t cnt)
{
    return (unsigned)((cnt + NT - 1) / NT);
}

/* ---- a rank ---- */

typedef struct dtensor {
    void *p; /* device; NULL: absent */
    tps_dtype dtype;
    uint64_t rows, cols; /* as stored; a vector has rows 1 */
} dtensor;

typedef struct grank {
    uint64_t rank;
    int dev;
    cudaStream_t s;
    cublasHandle_t blas;
    ncclComm_t comm;
    /* per layer */
    tps_cuda_rank *job;
    dtensor t[TPS_ROLE_COUNT], *ex;
    uint64_t nex;
    size_t n, H, maxdim;
    float *x, *xn, *h, *part[TPS_VSTAGE_COUNT], *out[TPS_VSTAGE_COUNT];
    float *q, *k, *v, *ctx, *g, *u, *a, *y, *y2, *ey, *wts, *logits;
    void *op;
    double upload_bytes, upload_s, layer_s;
} grank;

typedef struct gctx {
    tps_cuda_setup s;
    int ndev;
    grank *r;
    uint64_t count;
    bool nccl;
    tps_vcomm *host_comm;
    /* local emulate: the device-side reduction on the first rank's GPU */
    float *red, *tmp;
    size_t red_cap;
} gctx;

static const dtensor *role(const grank *g, tps_block_role r, uint64_t e, bool per_expert)
{
    const dtensor *d = per_expert ? &g->ex[e * TPS_ROLE_COUNT + r] : &g->t[r];
    return d->p ? d : NULL;
}

static tps_status dmalloc(grank *g, void **p, size_t bytes, const char *what, tps_error *err)
{
    tps_status st = TPS_OK;
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaGetLastError();
        cudaMemGetInfo(&fr, &tot);
        st = gfail(err, TPS_EIO, "rank %llu on GPU %d: cudaMalloc of %zu bytes for %s: %s (%zu of %zu bytes free)",
                   (unsigned long long)g->rank, g->dev, bytes, what, cudaGetErrorString(e), fr, tot);
    }
    return st;
}

#define DMALLOC(ptr, count, what) CHECK(dmalloc(g, (void **)&(ptr), (count) * sizeof *(ptr), what, err))

static tps_status upload(grank *g, const tps_vt *t, dtensor *d, tps_error *err)
{
    tps_status st = TPS_OK;
    memset(d, 0, sizeof *d);
    if (!t->data) return TPS_OK;
    size_t esz = t->dtype == TPS_DT_F32 ? 4 : 2, bytes = (size_t)t->nelem * esz;
    if (t->dtype != TPS_DT_F32 && t->dtype != TPS_DT_BF16 && t->dtype != TPS_DT_F16)
        return gfail(err, TPS_EINVALID, "rank %llu: %s has dtype number %d; the GPU takes BF16, F16 or F32",
                     (unsigned long long)g->rank, t->name, (int)t->dtype);
    d->dtype = t->dtype;
    d->rows = t->ndim == 2 ? t->shape[0] : 1;
    d->cols = t->ndim == 2 ? t->shape[1] : t->nelem;
    CHECK(dmalloc(g, &d->p, bytes, t->name, err));
    CU(cudaMemcpy(d->p, t->data, bytes, cudaMemcpyHostToDevice));
    g->upload_bytes += (double)bytes;
    if (d->rows > g->maxdim) g->maxdim = d->rows;
    if (d->cols > g->maxdim) g->maxdim = d->cols;
cleanup:
    return st;
}

static void free_layer(grank *g)
{
    cudaSetDevice(g->dev);
    for (int i = 0; i < TPS_ROLE_COUNT; i++) cudaFree(g->t[i].p);
    for (uint64_t i = 0; g->ex && i < g->nex * TPS_ROLE_COUNT; i++) cudaFree(g->ex[i].p);
    free(g->ex);
    void *bufs[] = {g->x, g->xn, g->h, g->part[0], g->part[1], g->out[0], g->out[1], g->q, g->k, g->v, g->ctx,
                    g->g, g->u, g->a, g->y, g->y2, g->ey, g->wts, g->logits, g->op};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
    memset(g->t, 0, sizeof g->t);
    g->ex = NULL;
    g->nex = 0;
    g->x = g->xn = g->h = g->part[0] = g->part[1] = g->out[0] = g->out[1] = NULL;
    g->q = g->k = g->v = g->ctx = g->g = g->u = g->a = g->y = g->y2 = g->ey = g->wts = g->logits = NULL;
    g->op = NULL;
}

/* Uploads the rank's slices and input, and sizes its buffers. */
static tps_status setup_layer(grank *g, const vdims *d, size_t n, const float *x, tps_error *err)
{
    tps_status st = TPS_OK;
    const vlayer *l = g->job->l;
    double t0 = now_s();
    size_t H = (size_t)d->hidden, hd = (size_t)d->hd, nh = n * H;
    size_t qld = (size_t)g->job->am.hn * hd, kld = (size_t)g->job->am.kv_n * hd, in = (size_t)g->job->mm.i_n;
    CU(cudaSetDevice(g->dev));
    g->n = n;
    g->H = H;
    g->maxdim = H;
    for (int i = 0; i < TPS_ROLE_COUNT; i++) CHECK(upload(g, &l->t[i], &g->t[i], err));
    if (l->nex) {
        g->ex = (dtensor *)calloc(l->nex * TPS_ROLE_COUNT, sizeof *g->ex);
        if (!g->ex) {
            st = gfail(err, TPS_EIO, "rank %llu: out of memory for the experts' table", (unsigned long long)g->rank);
            goto cleanup;
        }
        g->nex = l->nex;
        for (uint64_t i = 0; i < l->nex * TPS_ROLE_COUNT; i++) CHECK(upload(g, &l->ex[i], &g->ex[i], err));
    }
    DMALLOC(g->x, nh, "the input");
    CU(cudaMemcpy(g->x, x, nh * sizeof *x, cudaMemcpyHostToDevice));
    /* cudaMemcpy from pageable memory returns once the bytes are staged, before the DMA
     * has landed, and on the legacy stream, which the rank's non-blocking stream does not
     * wait for: without this the first kernels could read weights still in flight. */
    CU(cudaDeviceSynchronize());
    g->upload_s += now_s() - t0;
    DMALLOC(g->xn, nh, "the normalized input");
    DMALLOC(g->h, nh, "the residual");
    for (int s = 0; s < TPS_VSTAGE_COUNT; s++) {
        DMALLOC(g->part[s], nh, "a partial sum");
        DMALLOC(g->out[s], nh, "a block output");
    }
    DMALLOC(g->q, n * qld, "q");
    DMALLOC(g->k, n * kld, "k");
    DMALLOC(g->v, n * kld, "v");
    DMALLOC(g->ctx, n * qld, "the attention context");
    DMALLOC(g->g, n * in, "the gate");
    DMALLOC(g->u, n * in, "the up projection");
    DMALLOC(g->a, n * in, "the activations");
    DMALLOC(g->y, n * g->maxdim, "a projection");
    DMALLOC(g->y2, 2 * n * g->maxdim, "a projection's hi/lo halves");
    DMALLOC(g->ey, nh, "an expert's output");
    DMALLOC(g->wts, n, "the routing weights");
    DMALLOC(g->logits, n * (d->experts ? d->experts : 1), "the router logits");
    CHECK(dmalloc(g, &g->op, 2 * n * g->maxdim * sizeof(float), "the GEMM operands", err));
cleanup:
    return st;
}

/* y[t, o] (row stride ldy) = sum_k x[t, k] W(o, k) over the whole held weight: W(o, k) is
 * w[o, k] for a Linear [out, in], w[k, o] for a Conv1D [in, out]. */
static tps_status linear(grank *g, const dtensor *w, bool conv1d, size_t n, const float *x, size_t ldx, float *y,
                         size_t ldy, tps_error *err)
{
    tps_status st = TPS_OK;
    size_t K = (size_t)(conv1d ? w->rows : w->cols), O = (size_t)(conv1d ? w->cols : w->rows);
    const float one = 1.0f, zero = 0.0f;
    cublasOperation_t ta = conv1d ? CUBLAS_OP_N : CUBLAS_OP_T;
    int lda = (int)(conv1d ? O : K);
    cudaDataType_t t = w->dtype == TPS_DT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    if (w->dtype == TPS_DT_F32) {
        BLAS(cublasGemmEx(g->blas, ta, CUBLAS_OP_N, (int)O, (int)n, (int)K, &one, w->p, CUDA_R_32F, lda, x, CUDA_R_32F,
                          (int)ldx, &zero, y, CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return TPS_OK;
    }
    k_split<<<blocks(n * K), NT, 0, g->s>>>(x, ldx, n, K, (int)w->dtype, g->op);
    LAUNCHED();
    BLAS(cublasGemmEx(g->blas, ta, CUBLAS_OP_N, (int)O, (int)(2 * n), (int)K, &one, w->p, t, lda, g->op, t, (int)K,
                      &zero, g->y2, CUDA_R_32F, (int)O, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    k_join<<<blocks(n * O), NT, 0, g->s>>>(g->y2, n, O, y, ldy);
    LAUNCHED();
cleanup:
    return st;
}

static size_t out_rows(const dtensor *w, bool conv1d)
{
    return (size_t)(conv1d ? w->cols : w->rows);
}

static tps_status attention(grank *g, const tps_block *b, const vdims *d, const float *xn, float *out, tps_error *err)
{
    tps_status st = TPS_OK;
    const vattn_map *m = &g->job->am;
    size_t n = g->n, H = g->H, hd = (size_t)d->hd, hn = (size_t)m->hn, kvn = (size_t)m->kv_n;
    size_t qld = hn * hd, kld = kvn * hd, group = (size_t)(d->heads / d->kv);
    const dtensor *fw = role(g, TPS_ROLE_QKV_W, 0, false), *fb = role(g, TPS_ROLE_QKV_B, 0, false);
    const dtensor *w[3] = {fw ? fw : role(g, TPS_ROLE_Q_W, 0, false), fw ? fw : role(g, TPS_ROLE_K_W, 0, false),
                           fw ? fw : role(g, TPS_ROLE_V_W, 0, false)};
    const dtensor *bias[3] = {fw ? fb : role(g, TPS_ROLE_Q_B, 0, false), fw ? fb : role(g, TPS_ROLE_K_B, 0, false),
                              fw ? fb : role(g, TPS_ROLE_V_B, 0, false)};
    size_t off[3] = {(size_t)m->q_off, (size_t)m->k_off, (size_t)m->v_off}, cnt[3] = {hn, kvn, kvn};
    float *dst[3] = {g->q, g->k, g->v};
    size_t ldd[3] = {qld, kld, kld};
    const dtensor *done = NULL;
    for (size_t h = 0; h < hn; h++)
        if ((m->q_first + h) / group < m->kv_first || (m->q_first + h) / group - m->kv_first >= kvn)
            return gfail(err, TPS_EINVALID, "rank %llu: q head %llu needs KV head %llu, not among the %zu held from %llu",
                         (unsigned long long)g->rank, (unsigned long long)(m->q_first + h),
                         (unsigned long long)((m->q_first + h) / group), kvn, (unsigned long long)m->kv_first);
    for (int i = 0; i < 3; i++) {
        size_t O = out_rows(w[i], b->conv1d);
        if (w[i] != done) CHECK(linear(g, w[i], b->conv1d, n, xn, H, g->y, O, err));
        done = w[i];
        k_heads<<<blocks(n * cnt[i] * hd), NT, 0, g->s>>>(g->y, O, n, cnt[i], hd, off[i], (size_t)m->stride,
                                                          bias[i] ? bias[i]->p : NULL,
                                                          bias[i] ? (int)bias[i]->dtype : 0, dst[i], ldd[i]);
        LAUNCHED();
    }
    if (b->rope != TPS_ROPE_NONE && d->rot / 2 > 0) {
        int il = b->rope == TPS_ROPE_INTERLEAVED;
        k_rope<<<blocks(n * (d->rot / 2) * hn), NT, 0, g->s>>>(g->q, qld, n, hn, hd, (size_t)d->rot, b->rope_theta,
                                                               b->rope_scaling, il);
        LAUNCHED();
        k_rope<<<blocks(n * (d->rot / 2) * kvn), NT, 0, g->s>>>(g->k, kld, n, kvn, hd, (size_t)d->rot, b->rope_theta,
                                                                b->rope_scaling, il);
        LAUNCHED();
    }
    if (hn) {
        dim3 grid((unsigned)hn, (unsigned)n);
        k_attn<<<grid, NT, (NT + n) * sizeof(float), g->s>>>(g->q, qld, g->k, g->v, kld, hd, (size_t)m->q_first,
                                                             (size_t)m->kv_first, group,
                                                             (float)(1.0 / sqrt((double)hd)), g->ctx);
        LAUNCHED();
    }
    CHECK(linear(g, role(g, TPS_ROLE_O_W, 0, false), b->conv1d, n, g->ctx, qld, out, H, err));
cleanup:
    return st;
}

/* One dense MLP (or expert) over every token: out = down(act(...)). */
static tps_status dense(grank *g, const tps_block *b, uint64_t e, bool per_expert, const float *xn, float *out,
                        tps_error *err)
{
    tps_status st = TPS_OK;
    size_t n = g->n, H = g->H, in = (size_t)g->job->mm.i_n;
    const dtensor *gu = role(g, TPS_ROLE_GATE_UP_W, e, per_expert);
    const dtensor *gw = gu ? gu : role(g, TPS_ROLE_GATE_W, e, per_expert);
    if (gu) {
        CHECK(linear(g, gu, b->conv1d, n, xn, H, g->y, 2 * in, err));
        k_act<<<blocks(n * in), NT, 0, g->s>>>(g->y, 2 * in, g->y + g->job->mm.up_off, 2 * in, NULL, 0, n, in,
                                               (int)b->act, g->a);
    } else if (gw) {
        /* mlp_bias: the column-parallel gate/up biases, as the rank holds their slices. */
        const dtensor *gb = role(g, TPS_ROLE_GATE_B, e, per_expert), *ub = role(g, TPS_ROLE_UP_B, e, per_expert);
        CHECK(linear(g, gw, b->conv1d, n, xn, H, g->g, in, err));
        CHECK(linear(g, role(g, TPS_ROLE_UP_W, e, per_expert), b->conv1d, n, xn, H, g->u, in, err));
        if (ub) {
            k_add_vec<<<blocks(n * in), NT, 0, g->s>>>(g->u, n, in, ub->p, (int)ub->dtype);
            LAUNCHED();
        }
        k_act<<<blocks(n * in), NT, 0, g->s>>>(g->g, in, g->u, in, gb ? gb->p : NULL, gb ? (int)gb->dtype : 0, n,
                                               in, (int)b->act, g->a);
    } else {
        const dtensor *fb = role(g, TPS_ROLE_FC_B, e, per_expert);
        CHECK(linear(g, role(g, TPS_ROLE_FC_W, e, per_expert), b->conv1d, n, xn, H, g->g, in, err));
        k_act<<<blocks(n * in), NT, 0, g->s>>>(g->g, in, NULL, 0, fb ? fb->p : NULL, fb ? (int)fb->dtype : 0, n, in,
                                               (int)b->act, g->a);
    }
    LAUNCHED();
    CHECK(linear(g, role(g, TPS_ROLE_DOWN_W, e, per_expert), b->conv1d, n, g->a, in, out, H, err));
cleanup:
    return st;
}

/* Mixture of experts: routing on the host by the CPU ranks' own code (verify/moe_route.h), experts on
 * the GPU. */
static tps_status moe(grank *g, const tps_block *b, const vdims *d, const float *xn, float *out, tps_error *err)
{
    tps_status st = TPS_OK;
    size_t n = g->n, H = g->H, E = (size_t)d->experts, K = (size_t)d->top_k;
    float *lg = (float *)malloc((n * E + 1) * sizeof *lg), *wcol = (float *)malloc((n + 1) * sizeof *wcol);
    double *ld = (double *)malloc((n * E + 1) * sizeof *ld), *wt = (double *)calloc(n * E + 1, sizeof *wt);
    double *cs = (double *)malloc((E + 1) * sizeof *cs);
    unsigned char *sel = (unsigned char *)calloc(n * E + 1, 1);
    vmoe_cfg rc = vmoe_cfg_of(b);
    if (!lg || !wcol || !ld || !wt || !cs || !sel) {
        st = gfail(err, TPS_EIO, "rank %llu: out of memory for the routing", (unsigned long long)g->rank);
        goto cleanup;
    }
    CHECK(linear(g, role(g, TPS_ROLE_ROUTER_W, 0, false), false, n, xn, H, g->logits, E, err));
    CU(cudaMemcpyAsync(lg, g->logits, n * E * sizeof *lg, cudaMemcpyDeviceToHost, g->s));
    CU(cudaStreamSynchronize(g->s));
    for (size_t i = 0; i < n * E; i++) ld[i] = (double)lg[i];
    vmoe_route(&rc, n, E, K, ld, NULL, sel, wt, cs); /* g_run refused a router bias */
    CU(cudaMemsetAsync(out, 0, n * H * sizeof *out, g->s));
    for (size_t e = 0; e < E; e++) {
        bool any = false;
        for (size_t t = 0; t < n; t++) {
            wcol[t] = sel[t * E + e] ? (float)wt[t * E + e] : 0.0f;
            any = any || sel[t * E + e];
        }
        if (!any) continue;
        CHECK(dense(g, b, e, true, xn, g->ey, err));
        CU(cudaMemcpyAsync(g->wts, wcol, n * sizeof *wcol, cudaMemcpyHostToDevice, g->s));
        k_axpy_rows<<<blocks(n * H), NT, 0, g->s>>>(out, g->ey, g->wts, n, H);
        LAUNCHED();
        CU(cudaStreamSynchronize(g->s)); /* wcol is reused for the next expert */
    }
cleanup:
    free(lg);
    free(wcol);
    free(ld);
    free(wt);
    free(cs);
    free(sel);
    return st;
}

/* The rank's partial sum of a stage into part[stage] (zeros when its slices are bad or it
 * failed before). */
static tps_status stage_partial(grank *g, const tps_block *b, const vdims *d, int stage, tps_status prior,
                                tps_error *err)
{
    tps_status st = TPS_OK;
    size_t n = g->n, H = g->H, nh = n * H;
    CU(cudaSetDevice(g->dev));
    CU(cudaMemsetAsync(g->part[stage], 0, nh * sizeof(float), g->s));
    if (prior != TPS_OK || g->job->bad[stage]) return TPS_OK;
    if (stage == TPS_VSTAGE_ATTN) {
        const dtensor *w = role(g, TPS_ROLE_ATTN_NORM_W, 0, false), *bb = role(g, TPS_ROLE_ATTN_NORM_B, 0, false);
        k_norm<<<(unsigned)n, NT, 0, g->s>>>(g->x, H, b->norm == TPS_NORM_LAYER, b->norm_eps, w ? w->p : NULL,
                                             w ? (int)w->dtype : 0, bb ? bb->p : NULL, bb ? (int)bb->dtype : 0, g->xn);
        LAUNCHED();
        CHECK(attention(g, b, d, g->xn, g->part[stage], err));
    } else {
        const float *in = g->x;
        if (!b->parallel_residual) {
            k_add<<<blocks(nh), NT, 0, g->s>>>(g->h, g->x, g->out[TPS_VSTAGE_ATTN], nh);
            LAUNCHED();
            in = g->h;
        }
        const dtensor *w = role(g, TPS_ROLE_MLP_NORM_W, 0, false), *bb = role(g, TPS_ROLE_MLP_NORM_B, 0, false);
        k_norm<<<(unsigned)n, NT, 0, g->s>>>(in, H, b->norm == TPS_NORM_LAYER, b->norm_eps, w ? w->p : NULL,
                                             w ? (int)w->dtype : 0, bb ? bb->p : NULL, bb ? (int)bb->dtype : 0, g->xn);
        LAUNCHED();
        if (d->experts) CHECK(moe(g, b, d, g->xn, g->part[stage], err)); /* else a dense layer */
        else CHECK(dense(g, b, 0, false, g->xn, g->part[stage], err));
    }
cleanup:
    if (st != TPS_OK) cudaMemsetAsync(g->part[stage], 0, nh * sizeof(float), g->s); /* join with zeros */
    return st;
}

/* After the all-reduce left the sum in out[stage]: the row-parallel bias, and the results
 * back to the host. */
static tps_status stage_finish(grank *g, int stage, tps_error *err)
{
    tps_status st = TPS_OK;
    size_t nh = g->n * g->H;
    const dtensor *bias = role(g, stage == TPS_VSTAGE_ATTN ? TPS_ROLE_O_B : TPS_ROLE_DOWN_B, 0, false);
    CU(cudaSetDevice(g->dev));
    if (bias && !g->job->bad[stage]) {
        k_add_vec<<<blocks(nh), NT, 0, g->s>>>(g->out[stage], g->n, g->H, bias->p, (int)bias->dtype);
        LAUNCHED();
    }
    CU(cudaMemcpyAsync(g->job->partial[stage], g->part[stage], nh * sizeof(float), cudaMemcpyDeviceToHost, g->s));
    CU(cudaMemcpyAsync(g->job->out[stage], g->out[stage], nh * sizeof(float), cudaMemcpyDeviceToHost, g->s));
    CU(cudaStreamSynchronize(g->s));
cleanup:
    return st;
}

/* The all-reduce of one rank over NCCL or the host communicator (MPI, GPUs shared). */
static tps_status reduce_one(gctx *c, grank *g, int stage, tps_error *err)
{
    tps_status st = TPS_OK;
    size_t nh = g->n * g->H;
    float *host = NULL;
    CU(cudaSetDevice(g->dev));
    if (c->nccl) {
        NCCL(ncclAllReduce(g->part[stage], g->out[stage], nh, ncclFloat, ncclSum, g->comm, g->s));
        CU(cudaStreamSynchronize(g->s));
        return TPS_OK;
    }
    host = (float *)malloc((nh + 1) * sizeof *host);
    if (!host) {
        st = gfail(err, TPS_EIO, "rank %llu: out of memory for the host all-reduce", (unsigned long long)g->rank);
        goto cleanup;
    }
    CU(cudaMemcpyAsync(host, g->part[stage], nh * sizeof *host, cudaMemcpyDeviceToHost, g->s));
    CU(cudaStreamSynchronize(g->s));
    CHECK(c->host_comm->allreduce_sum(c->host_comm, host, nh, err));
    CU(cudaMemcpyAsync(g->out[stage], host, nh * sizeof *host, cudaMemcpyHostToDevice, g->s));
    CU(cudaStreamSynchronize(g->s));
cleanup:
    free(host);
    return st;
}

/* ---- driving the ranks ---- */

typedef struct rank_thread {
    gctx *c;
    grank *g;
    const tps_block *b;
    const vdims *d;
    size_t n;
    const float *x;
    pthread_barrier_t *bar; /* between the threads of one process */
    bool *failed;           /* one flag per thread, read after the barrier */
    uint64_t idx;
    vgate *gate; /* with several threads: all were created (verify/gated_threads.h) */
    tps_status st;
    tps_error err;
} rank_thread;

/* Whether any rank failed to set up: the threads of this process through the barrier,
 * the processes of an MPI job through the host communicator.  Nobody calls NCCL then. */
static bool peers_failed(rank_thread *rt)
{
    bool any = rt->st != TPS_OK;
    if (rt->bar) {
        rt->failed[rt->idx] = any;
        pthread_barrier_wait(rt->bar);
        for (uint64_t i = 0; i < rt->c->count; i++) any = any || rt->failed[i];
    } else if (rt->c->host_comm) {
        float f = any;
        tps_status cs = rt->c->host_comm->allreduce_sum(rt->c->host_comm, &f, 1, &rt->err);
        if (cs != TPS_OK && rt->st == TPS_OK) rt->st = cs;
        any = any || cs != TPS_OK || f > 0;
    }
    if (any && rt->st == TPS_OK) rt->st = TPS_EIO; /* stopped for a peer, which says why */
    return any;
}

/* One rank in its own thread (or the calling thread with one rank): upload, agree that
 * every rank is ready, then both stages; the all-reduces are entered whatever happened. */
static void *rank_thread_main(void *arg)
{
    rank_thread *rt = (rank_thread *)arg;
    grank *g = rt->g;
    tps_error *err = &rt->err;
    if (rt->gate && !vgate_pass(rt->gate)) {
        rt->st = TPS_EIO;
        return NULL;
    }
    rt->st = setup_layer(g, rt->d, rt->n, rt->x, err);
    if (peers_failed(rt)) return NULL;
    double t0 = now_s();
    for (int s = 0; s < TPS_VSTAGE_COUNT; s++) {
        tps_status ps = stage_partial(g, rt->b, rt->d, s, rt->st, err);
        if (rt->st == TPS_OK) rt->st = ps;
        tps_status rs = reduce_one(rt->c, g, s, err);
        if (rs != TPS_OK) {
            if (rt->st == TPS_OK) rt->st = rs;
            return NULL; /* a failed collective: the others fail or stop on theirs */
        }
        tps_status fs = stage_finish(g, s, err);
        if (rt->st == TPS_OK) rt->st = fs;
    }
    g->layer_s = now_s() - t0;
    return NULL;
}

/* Ranks sharing GPUs, in one process: each stage rank after rank, then the partial sums
 * added on the first rank's GPU in rank order and copied back to every rank. */
static tps_status run_emulated(gctx *c, const tps_block *b, const vdims *d, size_t n, const float *x, vstats *stats,
                               tps_error *err)
{
    tps_status st = TPS_OK;
    grank *g = &c->r[0];
    size_t nh = n * (size_t)d->hidden;
    for (uint64_t i = 0; i < c->count; i++) CHECK(setup_layer(&c->r[i], d, n, x, err));
    CU(cudaSetDevice(g->dev));
    if (c->red_cap < nh) {
        cudaFree(c->red);
        cudaFree(c->tmp);
        c->red = c->tmp = NULL;
        c->red_cap = 0;
        DMALLOC(c->red, nh, "the emulated all-reduce");
        DMALLOC(c->tmp, nh, "the emulated all-reduce");
        c->red_cap = nh;
    }
    {
        double t0 = now_s();
        for (int s = 0; s < TPS_VSTAGE_COUNT; s++) {
            for (uint64_t i = 0; i < c->count; i++) {
                g = &c->r[i];
                CHECK(stage_partial(g, b, d, s, TPS_OK, err));
                CU(cudaStreamSynchronize(g->s));
            }
            /* Every copy and add on the ranks' own streams: a device-to-device cudaMemcpy
             * returns before it is done and runs on the legacy stream, which the
             * non-blocking rank streams (stage_finish's bias add and read-back) do not
             * wait for. */
            g = &c->r[0];
            CU(cudaSetDevice(g->dev));
            CU(cudaMemcpyAsync(c->red, g->part[s], nh * sizeof(float), cudaMemcpyDefault, g->s));
            for (uint64_t i = 1; i < c->count; i++) {
                CU(cudaMemcpyAsync(c->tmp, c->r[i].part[s], nh * sizeof(float), cudaMemcpyDefault, g->s));
                k_add<<<blocks(nh), NT, 0, g->s>>>(c->red, c->red, c->tmp, nh);
                LAUNCHED();
            }
            CU(cudaStreamSynchronize(g->s));
            for (uint64_t i = 0; i < c->count; i++) {
                g = &c->r[i];
                CU(cudaSetDevice(g->dev));
                CU(cudaMemcpyAsync(g->out[s], c->red, nh * sizeof(float), cudaMemcpyDefault, g->s));
                CHECK(stage_finish(g, s, err)); /* ends with a sync of g->s: red is free again */
            }
        }
        stats->layer_seconds = now_s() - t0;
    }
cleanup:
    for (uint64_t i = 0; i < c->count; i++) {
        stats->upload_bytes += c->r[i].upload_bytes;
        stats->upload_seconds += c->r[i].upload_s;
    }
    return st;
}

static tps_status run_threads(gctx *c, const tps_block *b, const vdims *d, size_t n, const float *x, vstats *stats,
                              tps_error *err)
{
    tps_status st = TPS_OK;
    uint64_t T = c->count;
    rank_thread *rt = (rank_thread *)calloc(T, sizeof *rt);
    pthread_t *tid = (pthread_t *)calloc(T, sizeof *tid);
    bool *failed = (bool *)calloc(T, sizeof *failed);
    pthread_barrier_t bar;
    vgate gate = VGATE_INIT;
    bool threads = T > 1, have_bar = false;
    if (!rt || !tid || !failed) {
        st = gfail(err, TPS_EIO, "out of memory for the rank threads");
        goto cleanup;
    }
    if (threads) {
        if (pthread_barrier_init(&bar, NULL, (unsigned)T) != 0) {
            st = gfail(err, TPS_EIO, "cannot create a barrier for %llu rank threads", (unsigned long long)T);
            goto cleanup;
        }
        have_bar = true;
    }
    for (uint64_t i = 0; i < T; i++) {
        rank_thread *r = &rt[i];
        r->c = c;
        r->g = &c->r[i];
        r->b = b;
        r->d = d;
        r->n = n;
        r->x = x;
        r->bar = have_bar ? &bar : NULL;
        r->failed = failed;
        r->idx = i;
        if (threads) r->gate = &gate;
    }
    if (!threads) {
        rank_thread_main(&rt[0]);
    } else {
        uint64_t started = vgate_run(&gate, tid, T, rank_thread_main, rt, sizeof *rt);
        if (started < T) {
            st = gfail(err, TPS_EIO, "cannot start the thread of rank %llu", (unsigned long long)c->r[started].rank);
            goto cleanup;
        }
    }
    for (uint64_t i = 0; i < T && st == TPS_OK; i++)
        if (rt[i].st != TPS_OK && rt[i].err.code != TPS_OK) {
            *err = rt[i].err;
            st = rt[i].st;
        }
    for (uint64_t i = 0; i < T && st == TPS_OK; i++)
        if (rt[i].st != TPS_OK) st = gfail(err, rt[i].st, "rank %llu stopped: another rank failed",
                                           (unsigned long long)c->r[i].rank);
    for (uint64_t i = 0; i < T; i++) {
        stats->upload_bytes += c->r[i].upload_bytes;
        if (c->r[i].upload_s > stats->upload_seconds) stats->upload_seconds = c->r[i].upload_s;
        if (c->r[i].layer_s > stats->layer_seconds) stats->layer_seconds = c->r[i].layer_s;
    }
cleanup:
    if (have_bar) pthread_barrier_destroy(&bar);
    free(rt);
    free(tid);
    free(failed);
    return st;
}

/* ---- the plugin's table ---- */

static tps_status g_devices(int *count, char *desc, size_t descsize, tps_error *err)
{
    *count = 0;
    cudaError_t e = cudaGetDeviceCount(count);
    if (e != cudaSuccess || *count == 0) {
        int drv = 0;
        cudaDriverGetVersion(&drv);
        return gfail(err, TPS_EBACKEND,
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

static tps_status g_nccl_id(unsigned char id[TPS_NCCL_ID_BYTES], tps_error *err)
{
    ncclUniqueId u;
    ncclResult_t e = ncclGetUniqueId(&u);
    if (e != ncclSuccess) return gfail(err, TPS_EBACKEND, "ncclGetUniqueId: %s", ncclGetErrorString(e));
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
        free_layer(g);
        if (g->comm) ncclCommDestroy(g->comm);
        if (g->blas) cublasDestroy(g->blas);
        if (g->s) cudaStreamDestroy(g->s);
    }
    if (c->r && c->count) cudaSetDevice(c->r[0].dev);
    cudaFree(c->red);
    cudaFree(c->tmp);
    free(c->r);
    free(c);
}

/* The device, stream and cuBLAS handle of each of c's ranks. */
static tps_status open_ranks(gctx *c, const tps_cuda_setup *s, int *devs, tps_error *err)
{
    tps_status st = TPS_OK;
    grank *g = NULL;
    if (cudaGetDeviceCount(&c->ndev) != cudaSuccess || c->ndev == 0)
        return gfail(err, TPS_EBACKEND, "rank %llu: the cuda backend found no GPU", (unsigned long long)s->first);
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

static tps_status g_open(const tps_cuda_setup *s, void **out, tps_error *err)
{
    tps_status st = TPS_OK;
    grank *g = NULL;
    int *devs = NULL;
    ncclComm_t *comms = NULL;
    gctx *c = (gctx *)calloc(1, sizeof *c);
    *out = NULL;
    if (!c) return gfail(err, TPS_EIO, "out of memory for the cuda backend");
    c->s = *s;
    c->count = s->count;
    c->host_comm = s->host_comm;
    c->nccl = !s->emulate;
    c->r = (grank *)calloc(s->count, sizeof *c->r);
    devs = (int *)calloc(s->count, sizeof *devs);
    comms = (ncclComm_t *)calloc(s->count, sizeof *comms);
    if (!c->r || !devs || !comms) st = gfail(err, TPS_EIO, "out of memory for the cuda backend's ranks");
    if (st == TPS_OK) st = open_ranks(c, s, devs, err);
    if (c->nccl && s->nccl_id) {
        /* ncclCommInitRank returns only once every process of the job has called it: a
         * process that failed above would leave the others blocked in it for good, so the
         * processes agree over MPI first. */
        float failed = st != TPS_OK;
        tps_status cs = s->host_comm->allreduce_sum(s->host_comm, &failed, 1, err);
        if (st == TPS_OK && cs != TPS_OK) st = cs;
        if (st == TPS_OK && failed > 0)
            st = gfail(err, TPS_EIO, "rank %llu: NCCL not started: another rank could not set up its GPU (its process says why)",
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

/* The Gemma / Gemma 2 / OLMo 2 block features these kernels do not compute: refused by name
 * (every process alike, before any collective) rather than computed wrong. */
static const char *unsupported(const tps_block *b, const vdims *d)
{
    /* First: a layer missing its q/k norm would fail as if cut wrong. */
    if (b->role[TPS_ROLE_Q_NORM_W] || b->role[TPS_ROLE_K_NORM_W])
        return b->qk_norm == TPS_QK_NORM_WHOLE ? "q_norm/k_norm (over the whole projection)" : "q_norm/k_norm (per head)";
    if (b->norm == TPS_NORM_RMS_OFFSET) return "the (1 + w) RMSNorm (norm: rms_offset)";
    if (b->role[TPS_ROLE_POST_ATTN_NORM_W] || b->role[TPS_ROLE_POST_MLP_NORM_W]) return "post-block norms";
    if (!b->role[TPS_ROLE_ATTN_NORM_W] || !b->role[TPS_ROLE_MLP_NORM_W]) return "a stage without a pre-norm";
    if (b->attn_softcap > 0) return "attention logit soft-capping";
    if (b->query_pre_attn_scalar > 0) return "query_pre_attn_scalar";
    if (d->window) return "sliding-window attention";
    if (d->local && b->rope_local_theta > 0) return "the local layers' RoPE base (rope_local_base_freq)";
    if (b->role[TPS_ROLE_SINKS]) return "attention sinks";
    if (b->role[TPS_ROLE_EXPERTS_GATE_UP_W] || b->role[TPS_ROLE_EXPERTS_DOWN_W]) return "fused expert tensors (experts_*)";
    if (b->role[TPS_ROLE_ROUTER_LOGIT_B]) return "a router logit bias";
    if (b->act == TPS_ACT_SWIGLU_OAI) return "the swiglu_oai activation";
    if (b->qkv_row_chunks) return "Megatron's qkv row chunks at tp above the query groups (an all-gather of qkv)";
    return NULL;
}

static tps_status g_run(void *ctx, const tps_block *b, const vdims *d, size_t n, const float *x, tps_cuda_rank *ranks,
                        vstats *stats, tps_error *err)
{
    gctx *c = (gctx *)ctx;
    const char *missing = unsupported(b, d);
    if (missing)
        return gfail(err, TPS_EBACKEND, "the cuda backend does not compute %s yet; use --backend cpu", missing);
    if (b->attention == TPS_ATTN_MLA)
        return gfail(err, TPS_EBACKEND,
                     "the cuda backend does not compute multi-head latent attention (DeepSeek-V2/V3) yet; use "
                     "--backend cpu");
    if (tps_block_is_moe(b) && (b->shared_prefix || b->role[TPS_ROLE_SHARED_GATE_W] || b->role[TPS_ROLE_ROUTER_BIAS]))
        return gfail(err, TPS_EBACKEND, "the cuda backend does not compute %s yet; use --backend cpu",
                     b->role[TPS_ROLE_ROUTER_BIAS] ? "a router bias (e_score_correction_bias)" : "shared experts");
    /* The same on every rank and process (every rank holds as many groups), so all refuse. */
    for (uint64_t i = 0; i < c->count; i++)
        if (ranks[i].am.q_run)
            return gfail(err, TPS_EBACKEND,
                         "the cuda backend does not compute a grouped fused qkv holding several KV groups per rank "
                         "(qkv_grouped, Falcon-40B style at tp below the group count) yet; use --backend cpu");
    for (uint64_t i = 0; i < c->count; i++) {
        grank *g = &c->r[i];
        g->job = &ranks[i];
        g->upload_bytes = g->upload_s = g->layer_s = 0;
    }
    tps_status st = c->nccl || c->host_comm ? run_threads(c, b, d, n, x, stats, err)
                                            : run_emulated(c, b, d, n, x, stats, err);
    for (uint64_t i = 0; i < c->count; i++) {
        free_layer(&c->r[i]);
        c->r[i].job = NULL;
    }
    return st;
}

static const tps_cuda_api api = {g_devices, g_nccl_id, g_open, g_run, g_close};

extern "C" const tps_cuda_api *tps_cuda_plugin(unsigned abi, const size_t *sizes, size_t nsizes)
{
    const size_t mine[] = TPS_CUDA_ABI_SIZES;
    if (abi != TPS_PLUGIN_ABI || nsizes != sizeof mine / sizeof mine[0]) return NULL;
    for (size_t i = 0; i < nsizes; i++)
        if (sizes[i] != mine[i]) return NULL;
    return &api;
}
