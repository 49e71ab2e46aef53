/* A tensor as a party of the pass holds it (the reference or one rank), one layer's tensors,
 * and the facts of the layer every folder of verify/ shares: its two stages and the
 * tolerance a dtype allows.  The bottom of verify/ (the Makefile's VERIFY_LAYERS). */
#ifndef TPS_VERIFY_MATH_TENSOR_H
#define TPS_VERIFY_MATH_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../lib/base/index.h"
#include "../../lib/base/status.h"
#include "../../lib/layout/block.h"

typedef struct tps_vt tps_vt;

/* An FP8 weight's scale kept beside its raw bytes (verify/load/dequant.c, tps_vload_held), so
 * that a party holds the weight at one byte an element and the math widens only the rows it
 * reads: element (r, c) of the [rows, cols] weight is data[r, c] * s[(r / bn) * sc + c / bk],
 * rounded to float as a whole dequantized copy would hold it. */
typedef struct tps_vscale {
    double *s;
    uint64_t bn, bk, sc;
} tps_vscale;

/* What the math needs of a tensor's copy on a rank's device: gemm is the linear of
 * F(vlinear) (verify/math/ops.h, tps_vlinear_loop_f32's contract) on that device, release
 * frees the copy (tps_vt_release calls it).  verify/ranks/device.c makes the copies and
 * fills the table; the math reaches the device through it, so that the bottom folder calls
 * nothing above it. */
typedef struct tps_vdev_ops {
    tps_status (*gemm)(const tps_vt *w, bool conv1d, size_t n, const float *x, size_t ldx, uint64_t i0,
                       uint64_t i1, uint64_t o0, uint64_t o1, float *y, size_t ldy, tps_error *err);
    void (*release)(tps_vt *t);
} tps_vdev_ops;

/* The reference's device (issue 36): when verify runs on a device backend, the reference's
 * linears (F(vlinear) of the float64 instantiation) go to gemm, a float64 GEMM on the device
 * (verify/ranks/device.c, tps_vdev_ref_attach, over the plugin's gemm_f64), instead of the host
 * kernel (verify/math/ref_kernel.c).  gemm has tps_vlinear_loop_f64's contract; table is the
 * host's decoding of w's one-byte dtype (NULL for the others).  takes says whether the device
 * holds w's dtype (BF16, F16, F32, F64, one-byte with a table); the others stay on the host. */
typedef struct tps_vref_dev {
    bool (*takes)(const tps_vt *w, const float *table);
    tps_status (*gemm)(struct tps_vref_dev *d, const tps_vt *w, const float *table, bool conv1d, size_t n,
                       const double *x, size_t ldx, uint64_t i0, uint64_t i1, uint64_t o0, uint64_t o1, double *y,
                       size_t ldy, tps_error *err);
} tps_vref_dev;

/* A tensor's device copy (tps_vt.dev): the table above, the rank that owns the copy
 * (verify/ranks/device.h) and the plugin's handle of it. */
typedef struct tps_vdev_buf {
    const tps_vdev_ops *ops;
    struct tps_vdev_rank *owner;
    void *buf;
} tps_vdev_buf;

/* A whole tensor as held by one party (the reference or one rank): raw little-endian
 * bytes of a floating-point dtype. */
struct tps_vt {
    char *name;
    tps_dtype dtype;
    int ndim;
    uint64_t shape[TPS_MAX_DIMS];
    uint64_t nelem;
    void *data; /* NULL: the tensor is absent (its role is unused by the model) */
    tps_vdev_buf *dev; /* its copy on a rank's device; NULL: host only */
    tps_vscale *scale; /* not NULL: data is FP8 to be multiplied by it (above) */
};

/* Element i of a scaled FP8 weight (t->scale set), dequantized; v is its raw value. */
static inline float tps_vscaled(const tps_vt *t, uint64_t i, double v)
{
    uint64_t cols = t->shape[1], r = i / cols, c = i % cols;
    const tps_vscale *q = t->scale;
    return (float)(v * q->s[(r / q->bn) * q->sc + c / q->bk]);
}

/* The dtype the math computes t in: a scaled FP8 weight is F32, as its dequantized copy was. */
static inline tps_dtype tps_vt_math_dtype(const tps_vt *t)
{
    return t->scale ? TPS_DT_F32 : t->dtype;
}

void tps_vt_release(tps_vt *t);

/* One layer's tensors as one party holds them; ex[e * TPS_ROLE_COUNT + role] for a routed
 * expert's MLP roles, sh[role] for the shared expert's.  A dense layer of a MoE model holds
 * its MLP in t, nex 0. */
typedef struct vexperts_stream vexperts_stream;
typedef struct vlayer {
    tps_vt t[TPS_ROLE_COUNT];
    tps_vt *ex;
    uint64_t nex;
    tps_vt sh[TPS_ROLE_COUNT];
    /* Not NULL: the routed experts stream (verify/load/layer.h, tps_vlayer_load_streamed):
     * a row of ex without data is fetched when the MoE math reaches that expert and freed
     * after it, so a layer of 256 experts holds one at a time. */
    const vexperts_stream *stream;
    uint64_t ex_first; /* the expert ex[0] is (a streamed row checked alone: its own index) */
} vlayer;

/* fetch fills row (TPS_ROLE_COUNT tensors, zeroed by the caller) with expert e's tensors;
 * the caller releases each with tps_vt_release once the expert is computed. */
struct vexperts_stream {
    void *ctx;
    tps_status (*fetch)(void *ctx, uint64_t e, tps_vt *row, tps_error *err);
};

/* Expert e's row of l for the MoE math: its row of ex, or, where l streams and the row is
 * empty, the row fetched into tmp (*fetched set: release tmp after use). */
tps_status tps_vexpert_row(const vlayer *l, uint64_t e, tps_vt *tmp, const tps_vt **row, bool *fetched,
                           tps_error *err);
void tps_vexpert_row_done(tps_vt *tmp, bool fetched);

void tps_vlayer_release(vlayer *l);

static inline const tps_vt *vrole(const vlayer *l, tps_block_role r, uint64_t expert, bool per_expert)
{
    const tps_vt *t = per_expert ? &l->ex[expert * TPS_ROLE_COUNT + r] : &l->t[r];
    return t->data ? t : NULL;
}

/* Role r of a role table (a vlayer's t, sh, or one expert's row of ex); NULL when absent. */
static inline const tps_vt *vget(const tps_vt *rt, tps_block_role r)
{
    return rt[r].data ? &rt[r] : NULL;
}

/* The two stages of a layer, each compared on its own (verify/verify.h). */
enum { TPS_VSTAGE_ATTN, TPS_VSTAGE_MLP, TPS_VSTAGE_COUNT };
const char *tps_verify_stage_name(int stage); /* "attention", "mlp" */

/* Relative tolerance for shards of dtype dt (torch.testing.assert_close defaults: BF16
 * 1.6e-2, F16 1e-3; F32 1e-5 leaves room for float32 accumulation over 16k-long dot
 * products; FP8 by their epsilon). */
double tps_verify_rtol(tps_dtype dt);

#endif
