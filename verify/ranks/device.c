/* The ranks' devices, host side (verify/ranks/device.h). */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/base/checked.h"
#include "../math/ref_kernel.h"
#include "../math/util.h"
#include "device.h"

struct tps_vdev {
    const tps_dev_api *api;
    void *ctx;
    uint64_t first, count;
    tps_vdev_rank *ranks; /* ranks[i] is rank first + i */
    /* The reference's GEMMs (tps_vdev_ref_attach), on rank first's device: the math's hook, and
     * the two pinned staging buffers of the double buffer (ref_gemm). */
    tps_vref_dev ref;
    void *pin[2];
    size_t pin_cap, chunk;
    bool attached;
    pthread_mutex_t ref_lock; /* the reference is one thread's; the lock keeps a second one safe */
    double ref_bytes, ref_seconds;
};

tps_status tps_vdev_open(const tps_dev_api *api, const tps_dev_setup *s, tps_vdev **out, tps_error *err)
{
    *out = NULL;
    tps_vdev *d = calloc(1, sizeof *d);
    if (d) d->ranks = calloc(s->count ? s->count : 1, sizeof *d->ranks);
    if (!d || !d->ranks) {
        free(d);
        return tps_fail_oom(err, "the devices' ranks");
    }
    pthread_mutex_init(&d->ref_lock, NULL);
    d->api = api;
    d->first = s->first;
    d->count = s->count;
    for (uint64_t i = 0; i < s->count; i++) d->ranks[i] = (tps_vdev_rank){.dev = d, .rank = s->first + i};
    tps_status st = api->open(s, &d->ctx, err);
    if (st != TPS_OK) {
        pthread_mutex_destroy(&d->ref_lock);
        free(d->ranks);
        free(d);
        return st;
    }
    *out = d;
    return TPS_OK;
}

void tps_vdev_close(tps_vdev *d)
{
    if (!d) return;
    if (d->attached && tps_vref_device() == &d->ref) tps_vref_use_device(NULL);
    for (int i = 0; i < 2; i++)
        if (d->pin[i]) d->api->host_free(d->ctx, d->pin[i]);
    if (d->ctx) d->api->close(d->ctx);
    pthread_mutex_destroy(&d->ref_lock);
    free(d->ranks);
    free(d);
}

tps_vdev_rank *tps_vdev_rank_of(tps_vdev *d, uint64_t rank)
{
    return rank >= d->first && rank - d->first < d->count ? &d->ranks[rank - d->first] : NULL;
}

static tps_status device_allreduce(tps_vcomm *c, float *buf, size_t n, tps_error *err)
{
    tps_vdev_rank *r = c->dev;
    return r->dev->api->allreduce(r->dev->ctx, r->rank, buf, n, err);
}

tps_vcomm tps_vdev_comm(tps_vdev_rank *r, const tps_vcomm *host)
{
    tps_vcomm c = host ? *host : (tps_vcomm){.rank = r->rank, .allreduce_sum = device_allreduce};
    c.dev = r;
    return c;
}

/* F64 and FP8 go up as F32, which holds every FP8 value exactly and is what the CPU ranks
 * compute in anyway; *tmp is the widened copy (NULL: t's own bytes go up). */
static tps_status device_dtype(const tps_vt *t, tps_dtype *dt, float **tmp, tps_error *err)
{
    *tmp = NULL;
    *dt = t->dtype;
    if (!t->scale && (t->dtype == TPS_DT_BF16 || t->dtype == TPS_DT_F16 || t->dtype == TPS_DT_F32)) return TPS_OK;
    size_t n;
    if (!tps_u64_to_size(t->nelem, &n) || !(*tmp = malloc((n ? n : 1) * sizeof **tmp)))
        return tps_fail_oom(err, t->name);
    for (size_t i = 0; i < n; i++) {
        double v = 0;
        tps_dtype_to_f64(t->dtype, t->data, i, &v); /* the dtype was checked at load */
        (*tmp)[i] = t->scale ? tps_vscaled(t, i, v) : (float)v;
    }
    *dt = TPS_DT_F32;
    return TPS_OK;
}

/* The linear of F(vlinear) (verify/math/ops.h, tps_vlinear_loop_f32's contract) on the
 * device that holds w's copy. */
static tps_status device_gemm(const tps_vt *w, bool conv1d, size_t n, const float *x, size_t ldx, uint64_t i0,
                              uint64_t i1, uint64_t o0, uint64_t o1, float *y, size_t ldy, tps_error *err)
{
    tps_vdev_rank *r = w->dev->owner;
    tps_dev_gemm g = {.conv1d = conv1d, .n = n, .x = x, .ldx = ldx, .i0 = i0, .i1 = i1, .o0 = o0, .o1 = o1,
                      .y = y, .ldy = ldy};
    if (!n || i1 <= i0 || o1 <= o0) { /* an empty product: nothing to ask the device */
        for (size_t t = 0; t < n; t++) memset(y + t * ldy, 0, (size_t)(o1 > o0 ? o1 - o0 : 0) * sizeof *y);
        return TPS_OK;
    }
    return r->dev->api->gemm(r->dev->ctx, r->rank, w->dev->buf, &g, err);
}

/* Frees t's device copy, if any (tps_vt_release calls it through the table). */
static void device_release(tps_vt *t)
{
    if (!t->dev) return;
    tps_vdev_rank *r = t->dev->owner;
    r->dev->api->release(r->dev->ctx, r->rank, t->dev->buf);
    free(t->dev);
    t->dev = NULL;
}

/* What the layer math calls for a tensor that has a device copy (verify/math/tensor.h). */
static const tps_vdev_ops device_ops = {device_gemm, device_release};

tps_status tps_vdev_upload(tps_vdev_rank *r, tps_vt *t, tps_error *err)
{
    if (!t->data || t->ndim != 2 || t->dev) return TPS_OK;
    tps_dtype dt;
    float *wide;
    tps_status st = device_dtype(t, &dt, &wide, err);
    if (st != TPS_OK) return st;
    tps_vdev_buf *b = calloc(1, sizeof *b);
    if (!b) {
        free(wide);
        return tps_fail_oom(err, t->name);
    }
    tps_dev_weight w = {.name = t->name, .dtype = dt, .rows = t->shape[0], .cols = t->shape[1],
                        .data = wide ? (const void *)wide : t->data};
    double t0 = tps_vnow();
    st = r->dev->api->upload(r->dev->ctx, r->rank, &w, &b->buf, err);
    free(wide);
    if (st != TPS_OK) {
        free(b);
        return st;
    }
    r->upload_seconds += tps_vnow() - t0;
    r->upload_bytes += (double)t->nelem * (dt == TPS_DT_F32 ? 4 : 2);
    b->ops = &device_ops;
    b->owner = r;
    t->dev = b;
    return TPS_OK;
}

tps_status tps_vdev_upload_layer(tps_vdev_rank *r, vlayer *l, tps_error *err)
{
    tps_status st = TPS_OK;
    for (int i = 0; i < TPS_ROLE_COUNT; i++) TPS_CHECK(tps_vdev_upload(r, &l->t[i], err));
    for (uint64_t i = 0; i < l->nex * TPS_ROLE_COUNT; i++) TPS_CHECK(tps_vdev_upload(r, &l->ex[i], err));
    for (int i = 0; i < TPS_ROLE_COUNT; i++) TPS_CHECK(tps_vdev_upload(r, &l->sh[i], err));
cleanup:
    return st;
}

/* ---- the reference's GEMMs ---- */

/* Bytes per staged chunk by default: two pinned buffers of this size bound the host memory of
 * the reference's uploads whatever the matrix (a 1 GiB LM head goes through 16 MiB), and a
 * chunk is large enough for the link's full rate. */
#define VREF_CHUNK ((size_t)8 << 20)

static size_t ref_elem(tps_dtype dt)
{
    return dt == TPS_DT_F64 ? 8 : dt == TPS_DT_F32 ? 4 : dt == TPS_DT_BF16 || dt == TPS_DT_F16 ? 2 : 1;
}

static bool ref_takes(const tps_vt *w, const float *table)
{
    if (!w->data || w->ndim != 2) return false;
    if (w->scale) return table != NULL;
    return w->dtype == TPS_DT_BF16 || w->dtype == TPS_DT_F16 || w->dtype == TPS_DT_F32 || w->dtype == TPS_DT_F64 ||
           table != NULL;
}

/* Rows [r0, r0 + rows) of w into pinned buffer slot (the read: the first touch of a mapped
 * file's pages), then their asynchronous upload. */
static tps_status ref_stage(tps_vdev *d, const tps_vt *w, const float *table, uint64_t r0, uint64_t rows, int slot,
                            void **buf, tps_error *err)
{
    size_t rowbytes = (size_t)w->shape[1] * ref_elem(w->dtype);
    memcpy(d->pin[slot], (const unsigned char *)w->data + (size_t)r0 * rowbytes, (size_t)rows * rowbytes);
    tps_dev_weight dw = {.name = w->name, .dtype = w->dtype, .rows = rows, .cols = w->shape[1],
                         .data = d->pin[slot], .table = table, .row0 = r0};
    if (w->scale) {
        dw.scale = w->scale->s + (size_t)(r0 / w->scale->bn) * (size_t)w->scale->sc;
        dw.scale_bn = w->scale->bn;
        dw.scale_bk = w->scale->bk;
        dw.scale_cols = w->scale->sc;
    }
    d->ref_bytes += (double)rows * (double)rowbytes;
    return d->api->upload_async(d->ctx, d->first, &dw, buf, err);
}

/* tps_vref_dev.gemm: the weight's rows the product reads (a Linear's outputs [o0, o1), a
 * Conv1D's inputs [i0, i1)) go up in chunks of d->chunk bytes through two pinned buffers:
 * while the device multiplies chunk j, chunk j + 1 is already read into the other buffer and
 * on its way (its upload overlaps the GEMM; its read, the upload before).  A Linear's chunk
 * is a block of y's columns; a Conv1D's adds its inputs' share to y. */
static tps_status ref_gemm_locked(tps_vdev *d, const tps_vt *w, const float *table, bool conv1d, size_t n,
                                  const double *x, size_t ldx, uint64_t i0, uint64_t i1, uint64_t o0, uint64_t o1,
                                  double *y, size_t ldy, tps_error *err)
{
    tps_status st = TPS_OK;
    void *buf[2] = {NULL, NULL};
    double t0 = tps_vnow();
    uint64_t r0 = conv1d ? i0 : o0, r1 = conv1d ? i1 : o1;
    size_t rowbytes = (size_t)w->shape[1] * ref_elem(w->dtype);
    if (!n || i1 <= i0 || o1 <= o0) {
        for (size_t t = 0; t < n; t++) memset(y + t * ldy, 0, (size_t)(o1 > o0 ? o1 - o0 : 0) * sizeof *y);
        return TPS_OK;
    }
    uint64_t chunk = d->chunk / rowbytes ? d->chunk / rowbytes : 1, nch = (r1 - r0 + chunk - 1) / chunk;
    size_t need = (size_t)chunk * rowbytes;
    for (int i = 0; i < 2 && d->pin_cap < need; i++) {
        if (d->pin[i]) d->api->host_free(d->ctx, d->pin[i]);
        d->pin[i] = NULL;
    }
    for (int i = 0; i < 2; i++)
        if (!d->pin[i]) TPS_CHECK(d->api->host_alloc(d->ctx, need, &d->pin[i], err));
    d->pin_cap = need;
    TPS_CHECK(ref_stage(d, w, table, r0, r1 - r0 < chunk ? r1 - r0 : chunk, 0, &buf[0], err));
    for (uint64_t j = 0; j < nch; j++) {
        uint64_t a = r0 + j * chunk, rows = r1 - a < chunk ? r1 - a : chunk;
        int cur = (int)(j & 1), nxt = cur ^ 1;
        if (j + 1 < nch) { /* the other buffer's GEMM (chunk j - 1) has returned: reuse it */
            d->api->release(d->ctx, d->first, buf[nxt]);
            buf[nxt] = NULL;
            uint64_t b = a + rows;
            TPS_CHECK(ref_stage(d, w, table, b, r1 - b < chunk ? r1 - b : chunk, nxt, &buf[nxt], err));
        }
        tps_dev_gemm64 g = {.conv1d = conv1d, .n = n, .ldx = ldx, .ldy = ldy};
        if (conv1d) /* inputs [a, a + rows) of x, all of y's outputs, added */
            g.x = x + (a - i0), g.i0 = 0, g.i1 = rows, g.o0 = o0, g.o1 = o1, g.y = y, g.accumulate = j > 0;
        else /* outputs [a, a + rows): y's columns from a - o0 */
            g.x = x, g.i0 = i0, g.i1 = i1, g.o0 = 0, g.o1 = rows, g.y = y + (a - o0);
        TPS_CHECK(d->api->gemm_f64(d->ctx, d->first, buf[cur], &g, err));
    }
cleanup:
    for (int i = 0; i < 2; i++) d->api->release(d->ctx, d->first, buf[i]);
    d->ref_seconds += tps_vnow() - t0;
    return st;
}

static tps_status ref_gemm(tps_vref_dev *hook, const tps_vt *w, const float *table, bool conv1d, size_t n,
                           const double *x, size_t ldx, uint64_t i0, uint64_t i1, uint64_t o0, uint64_t o1, double *y,
                           size_t ldy, tps_error *err)
{
    tps_vdev *d = (tps_vdev *)(void *)((char *)hook - offsetof(tps_vdev, ref));
    pthread_mutex_lock(&d->ref_lock);
    tps_status st = ref_gemm_locked(d, w, table, conv1d, n, x, ldx, i0, i1, o0, o1, y, ldy, err);
    pthread_mutex_unlock(&d->ref_lock);
    return st;
}

void tps_vdev_ref_attach(tps_vdev *d, size_t chunk)
{
    d->ref = (tps_vref_dev){.takes = ref_takes, .gemm = ref_gemm};
    d->chunk = chunk ? chunk : VREF_CHUNK;
    d->attached = true;
    tps_vref_use_device(&d->ref);
}

void tps_vdev_ref_stats(const tps_vdev *d, double *bytes, double *seconds)
{
    *bytes = d ? d->ref_bytes : 0;
    *seconds = d ? d->ref_seconds : 0;
}

void tps_vdev_take_stats(tps_vdev *d, double *bytes, double *seconds)
{
    *bytes = *seconds = 0;
    for (uint64_t i = 0; d && i < d->count; i++) {
        *bytes += d->ranks[i].upload_bytes;
        if (d->ranks[i].upload_seconds > *seconds) *seconds = d->ranks[i].upload_seconds;
        d->ranks[i].upload_bytes = d->ranks[i].upload_seconds = 0;
    }
}
