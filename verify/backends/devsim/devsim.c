/* libtpshard-devsim.so: the device primitives of verify/ranks/plugin.h in host memory.
 *
 * It is what the CUDA plugin is, minus CUDA: each rank's weights are copied into buffers of
 * its own "device" (separate allocations, which the host never reads again), its GEMMs read
 * only those copies, and the all-reduce copies every rank's buffer into its device buffer and
 * sums the device buffers in rank order, with the ranks' threads meeting at barriers as the
 * CUDA plugin's do.  `verify --backend devsim` so runs, in every make test, everything of the
 * GPU path but the CUDA, cuBLAS and NCCL calls themselves: the uploads, the device GEMM
 * contract (offsets, strides, Conv1D, the dtypes), the device comm, the failure paths.
 *
 * It checks what a GPU would not: a GEMM outside its weight's bounds, or a rank using
 * another rank's buffer, is an error naming both (a bug in the host, which a GPU would
 * answer with garbage or a fault).  TPS_DEVSIM_DEVICES=N says how many devices it has
 * (default 64), so the --emulate paths run too.  TPS_DEVSIM_FAULT plants the faults a
 * broken device would have, for the tests to show that verify sees them: "gemm" makes the
 * last rank's GEMMs return 1% too much, "allreduce" leaves the last rank's buffer out of
 * every sum, "refgemm" makes the reference's float64 GEMMs return 1% too much (so a test sees
 * that the reference is the device's).
 *
 * The reference's primitives (ABI 3): host_alloc is malloc; upload_async copies the host's
 * bytes as late as the contract allows, at upload_wait, the first gemm_f64 on the buffer or its
 * release, so that a host that reuses a staging buffer too early (a race a GPU's DMA would
 * lose) multiplies the wrong weights in every make test; and gemm_f64 widens each element
 * as it reads it (BF16, F16, F32, F64, or the host's table for one-byte dtypes, times the
 * block scale) and sums in float64 in k order. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verify/ranks/plugin.h"

const tps_dev_api *tps_dev_plugin(unsigned abi, const size_t *sizes, size_t nsizes);

typedef struct dbuf {
    uint64_t rank; /* whose device holds it */
    tps_dtype dtype;
    uint64_t rows, cols;
    unsigned char *bytes;
    bool ref;       /* the reference's (upload_async): gemm_f64 only */
    float table[256]; /* one-byte dtypes */
    double *scale;  /* NULL: none; else the scale rows of the slice */
    uint64_t row0, bn, bk, sc;
    const void *pending; /* upload_async's host bytes, not copied yet (settle) */
} dbuf;

typedef struct dctx {
    uint64_t first, count, T;
    bool fault_gemm, fault_allreduce, fault_ref;
    pthread_barrier_t bar;
    bool have_bar;
    float **sum_bufs; /* each rank's device buffer of the all-reduce */
    size_t *caps;
    bool *failed;
} dctx;

static int device_count(void)
{
    const char *v = getenv("TPS_DEVSIM_DEVICES");
    int n = v && *v ? atoi(v) : 64;
    return n > 0 ? n : 0;
}

static tps_status d_devices(int *count, char *desc, size_t descsize, tps_error *err)
{
    *count = device_count();
    if (*count == 0) return tps_dev_fail(err, TPS_EBACKEND, "the devsim backend has no device (TPS_DEVSIM_DEVICES=0)");
    snprintf(desc, descsize, "%d simulated device%s in host memory", *count, *count == 1 ? "" : "s");
    return TPS_OK;
}

static void d_close(void *ctx)
{
    dctx *c = ctx;
    if (!c) return;
    if (c->have_bar) pthread_barrier_destroy(&c->bar);
    for (uint64_t i = 0; c->sum_bufs && i < c->count; i++) free(c->sum_bufs[i]);
    free(c->sum_bufs);
    free(c->caps);
    free(c->failed);
    free(c);
}

static tps_status d_open(const tps_dev_setup *s, void **out, tps_error *err)
{
    dctx *c = calloc(1, sizeof *c);
    *out = NULL;
    if (!c) return tps_dev_fail(err, TPS_EIO, "out of memory for the devsim backend");
    c->first = s->first;
    c->count = s->count;
    c->T = s->T;
    const char *fault = getenv("TPS_DEVSIM_FAULT");
    c->fault_gemm = fault && strcmp(fault, "gemm") == 0;
    c->fault_allreduce = fault && strcmp(fault, "allreduce") == 0;
    c->fault_ref = fault && strcmp(fault, "refgemm") == 0;
    c->sum_bufs = calloc(s->count, sizeof *c->sum_bufs);
    c->caps = calloc(s->count, sizeof *c->caps);
    c->failed = calloc(s->count, sizeof *c->failed);
    if (!c->sum_bufs || !c->caps || !c->failed) {
        d_close(c);
        return tps_dev_fail(err, TPS_EIO, "out of memory for the devsim backend's ranks");
    }
    if (pthread_barrier_init(&c->bar, NULL, (unsigned)s->count) != 0) {
        d_close(c);
        return tps_dev_fail(err, TPS_EIO, "cannot create a barrier for %llu devsim ranks", (unsigned long long)s->count);
    }
    c->have_bar = true;
    *out = c;
    return TPS_OK;
}

static size_t elem_size(tps_dtype dt)
{
    switch (dt) {
    case TPS_DT_F64: return 8;
    case TPS_DT_F32: return 4;
    case TPS_DT_BF16:
    case TPS_DT_F16: return 2;
    default: return 1;
    }
}

static tps_status d_upload(void *ctx, uint64_t rank, const tps_dev_weight *w, void **out, tps_error *err)
{
    (void)ctx;
    if (w->dtype != TPS_DT_BF16 && w->dtype != TPS_DT_F16 && w->dtype != TPS_DT_F32)
        return tps_dev_fail(err, TPS_EINVALID, "rank %llu: %s has dtype number %d; a device takes BF16, F16 or F32",
                     (unsigned long long)rank, w->name, (int)w->dtype);
    size_t bytes = (size_t)(w->rows * w->cols) * elem_size(w->dtype);
    dbuf *b = calloc(1, sizeof *b);
    if (b) b->bytes = malloc(bytes ? bytes : 1);
    if (!b || !b->bytes) {
        free(b);
        return tps_dev_fail(err, TPS_EIO, "rank %llu: out of device memory for %s (%zu bytes)", (unsigned long long)rank,
                     w->name, bytes);
    }
    memcpy(b->bytes, w->data, bytes);
    b->rank = rank;
    b->dtype = w->dtype;
    b->rows = w->rows;
    b->cols = w->cols;
    *out = b;
    return TPS_OK;
}

static float load(const dbuf *b, size_t i)
{
    const unsigned char *p = b->bytes + i * elem_size(b->dtype);
    if (elem_size(b->dtype) == 1) return b->table[*p];
    if (b->dtype == TPS_DT_F32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p, 2);
    if (b->dtype == TPS_DT_BF16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    /* IEEE half: sign, 5-bit exponent (bias 15), 10-bit fraction. */
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, u;
    if (e == 31) u = sign | 0x7f800000u | m << 13;
    else if (e) u = sign | (e + 112) << 23 | m << 13;
    else if (!m) u = sign;
    else { /* subnormal: normalize */
        e = 113;
        while (!(m & 1024)) {
            m <<= 1;
            e--;
        }
        u = sign | e << 23 | (m & 1023) << 13;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static tps_status d_gemm(void *ctx, uint64_t rank, void *buf, const tps_dev_gemm *g, tps_error *err)
{
    const dctx *c = ctx;
    const dbuf *w = buf;
    float scale = c->fault_gemm && rank == c->T - 1 ? 1.01f : 1.0f;
    uint64_t in = g->conv1d ? w->rows : w->cols, out = g->conv1d ? w->cols : w->rows;
    if (w->rank != rank)
        return tps_dev_fail(err, TPS_EIO, "rank %llu multiplied by a weight on rank %llu's device", (unsigned long long)rank,
                     (unsigned long long)w->rank);
    if (w->ref)
        return tps_dev_fail(err, TPS_EIO, "rank %llu: a float32 GEMM on the reference's weight", (unsigned long long)rank);
    if (g->i1 > in || g->o1 > out || g->i0 > g->i1 || g->o0 > g->o1)
        return tps_dev_fail(err, TPS_EIO,
                     "rank %llu: a GEMM over inputs [%llu, %llu) and outputs [%llu, %llu) of a [%llu, %llu] weight%s",
                     (unsigned long long)rank, (unsigned long long)g->i0, (unsigned long long)g->i1,
                     (unsigned long long)g->o0, (unsigned long long)g->o1, (unsigned long long)w->rows,
                     (unsigned long long)w->cols, g->conv1d ? " (Conv1D)" : "");
    size_t K = (size_t)(g->i1 - g->i0), O = (size_t)(g->o1 - g->o0);
    for (size_t t = 0; t < g->n; t++)
        for (size_t o = 0; o < O; o++) {
            float acc = 0; /* float32 accumulation, as on a GPU */
            for (size_t k = 0; k < K; k++) {
                size_t i = g->conv1d ? (size_t)(g->i0 + k) * (size_t)w->cols + (size_t)(g->o0 + o)
                                     : (size_t)(g->o0 + o) * (size_t)w->cols + (size_t)(g->i0 + k);
                acc += g->x[t * g->ldx + k] * load(w, i);
            }
            g->y[t * g->ldy + o] = acc * scale;
        }
    return TPS_OK;
}

/* Element i of a reference buffer, widened to float64 (block-scaled as the host does it). */
static double load64(const dbuf *b, size_t i)
{
    if (b->dtype == TPS_DT_F64) {
        double v;
        memcpy(&v, b->bytes + 8 * i, 8);
        return v;
    }
    double v = load(b, i);
    if (!b->scale) return v;
    uint64_t r = i / b->cols, c = i % b->cols;
    return (float)(v * b->scale[((b->row0 + r) / b->bn - b->row0 / b->bn) * b->sc + c / b->bk]);
}

static tps_status d_host_alloc(void *ctx, size_t bytes, void **p, tps_error *err)
{
    (void)ctx;
    *p = malloc(bytes ? bytes : 1);
    return *p ? TPS_OK : tps_dev_fail(err, TPS_EIO, "out of host memory for a %zu-byte staging buffer", bytes);
}

static void d_host_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static tps_status d_upload_async(void *ctx, uint64_t rank, const tps_dev_weight *w, void **out, tps_error *err)
{
    (void)ctx;
    size_t es = elem_size(w->dtype);
    bool native = w->dtype == TPS_DT_BF16 || w->dtype == TPS_DT_F16 || w->dtype == TPS_DT_F32 || w->dtype == TPS_DT_F64;
    if (!native && !w->table)
        return tps_dev_fail(err, TPS_EINVALID, "rank %llu: %s has dtype number %d and no table of its values",
                            (unsigned long long)rank, w->name, (int)w->dtype);
    if (w->scale && (!w->scale_bn || !w->scale_bk || !w->scale_cols))
        return tps_dev_fail(err, TPS_EINVALID, "rank %llu: %s has a scale of empty blocks", (unsigned long long)rank,
                            w->name);
    size_t bytes = (size_t)(w->rows * w->cols) * es;
    size_t srows = w->scale && w->rows ? (size_t)((w->row0 + w->rows - 1) / w->scale_bn - w->row0 / w->scale_bn + 1) : 0;
    dbuf *b = calloc(1, sizeof *b);
    if (b) b->bytes = malloc(bytes ? bytes : 1);
    if (b && srows) b->scale = malloc(srows * (size_t)w->scale_cols * sizeof *b->scale);
    if (!b || !b->bytes || (srows && !b->scale)) {
        if (b) free(b->bytes);
        free(b);
        return tps_dev_fail(err, TPS_EIO, "rank %llu: out of device memory for %s (%zu bytes)", (unsigned long long)rank,
                            w->name, bytes);
    }
    b->pending = w->data; /* copied by settle */
    if (srows) memcpy(b->scale, w->scale, srows * (size_t)w->scale_cols * sizeof *b->scale);
    if (!native) memcpy(b->table, w->table, sizeof b->table);
    b->rank = rank;
    b->dtype = w->dtype;
    b->rows = w->rows;
    b->cols = w->cols;
    b->ref = true;
    b->row0 = w->row0;
    b->bn = w->scale_bn;
    b->bk = w->scale_bk;
    b->sc = w->scale_cols;
    *out = b;
    return TPS_OK;
}

/* The copy upload_async left pending, made now: the last moment the contract allows. */
static void settle(dbuf *b)
{
    if (!b->pending) return;
    memcpy(b->bytes, b->pending, (size_t)(b->rows * b->cols) * elem_size(b->dtype));
    b->pending = NULL;
}

static tps_status d_upload_wait(void *ctx, uint64_t rank, void *buf, tps_error *err)
{
    (void)ctx;
    (void)rank;
    (void)err;
    settle(buf);
    return TPS_OK;
}

static tps_status d_gemm_f64(void *ctx, uint64_t rank, void *buf, const tps_dev_gemm64 *g, tps_error *err)
{
    const dctx *c = ctx;
    dbuf *w = buf;
    double scale = c->fault_ref ? 1.01 : 1.0;
    uint64_t in = g->conv1d ? w->rows : w->cols, out = g->conv1d ? w->cols : w->rows;
    if (w->rank != rank || !w->ref)
        return tps_dev_fail(err, TPS_EIO, "rank %llu: a float64 GEMM on %s", (unsigned long long)rank,
                            w->ref ? "another rank's weight" : "a weight the ranks uploaded (not the reference's)");
    if (g->i1 > in || g->o1 > out || g->i0 > g->i1 || g->o0 > g->o1)
        return tps_dev_fail(err, TPS_EIO,
                            "rank %llu: a float64 GEMM over inputs [%llu, %llu) and outputs [%llu, %llu) of a [%llu, "
                            "%llu] weight%s",
                            (unsigned long long)rank, (unsigned long long)g->i0, (unsigned long long)g->i1,
                            (unsigned long long)g->o0, (unsigned long long)g->o1, (unsigned long long)w->rows,
                            (unsigned long long)w->cols, g->conv1d ? " (Conv1D)" : "");
    size_t K = (size_t)(g->i1 - g->i0), O = (size_t)(g->o1 - g->o0);
    settle(w); /* the GEMM waits for the copy */
    for (size_t t = 0; t < g->n; t++)
        for (size_t o = 0; o < O; o++) {
            double acc = 0;
            for (size_t k = 0; k < K; k++) {
                size_t i = g->conv1d ? (size_t)(g->i0 + k) * (size_t)w->cols + (size_t)(g->o0 + o)
                                     : (size_t)(g->o0 + o) * (size_t)w->cols + (size_t)(g->i0 + k);
                acc += g->x[t * g->ldx + k] * load64(w, i);
            }
            double *yo = &g->y[t * g->ldy + o];
            *yo = (g->accumulate ? *yo : 0) + acc * scale;
        }
    return TPS_OK;
}

static tps_status d_allreduce(void *ctx, uint64_t rank, float *buf, size_t n, tps_error *err)
{
    dctx *c = ctx;
    uint64_t me = rank - c->first;
    if (c->caps[me] < n) {
        free(c->sum_bufs[me]);
        c->sum_bufs[me] = malloc(n * sizeof *buf);
        c->caps[me] = c->sum_bufs[me] ? n : 0;
    }
    c->failed[me] = c->caps[me] < n;
    if (!c->failed[me]) memcpy(c->sum_bufs[me], buf, n * sizeof *buf);
    pthread_barrier_wait(&c->bar); /* every device buffer is written */
    bool any = false;
    for (uint64_t q = 0; q < c->count; q++) any |= c->failed[q];
    if (!any)
        for (size_t i = 0; i < n; i++) {
            float s = c->sum_bufs[0][i];
            for (uint64_t q = 1; q < c->count; q++)
                if (!(c->fault_allreduce && c->first + q == c->T - 1)) s += c->sum_bufs[q][i];
            buf[i] = s;
        }
    pthread_barrier_wait(&c->bar); /* nobody writes a device buffer before everyone has read them */
    if (any)
        return tps_dev_fail(err, TPS_EIO, "rank %llu: the all-reduce of %zu floats failed: a rank had no device memory for it",
                     (unsigned long long)rank, n);
    return TPS_OK;
}

static void d_release(void *ctx, uint64_t rank, void *buf)
{
    (void)ctx;
    (void)rank;
    dbuf *b = buf;
    if (!b) return;
    settle(b); /* the copy completes before its memory is reused, as cudaEventSynchronize makes it */
    free(b->bytes);
    free(b->scale);
    free(b);
}

static const tps_dev_api api = {.name = "devsim", .devices = d_devices, .comm_id = NULL, .open = d_open,
                                .upload = d_upload, .gemm = d_gemm, .allreduce = d_allreduce, .release = d_release,
                                .close = d_close, .host_alloc = d_host_alloc, .host_free = d_host_free,
                                .upload_async = d_upload_async, .upload_wait = d_upload_wait, .gemm_f64 = d_gemm_f64};

const unsigned tps_dev_plugin_abi;
const unsigned tps_dev_plugin_abi = TPS_PLUGIN_ABI;

const tps_dev_api *tps_dev_plugin(unsigned abi, const size_t *sizes, size_t nsizes)
{
    return tps_dev_abi_matches(abi, sizes, nsizes) ? &api : NULL;
}
