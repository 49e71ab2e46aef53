/* q_norm / k_norm of the layer math (verify/math/qk_norm.c). */
#ifndef TPS_VERIFY_MATH_QK_NORM_H
#define TPS_VERIFY_MATH_QK_NORM_H

#include "share.h"

/* q_norm / k_norm (lib/layout/block.h, tps_qk_norm_kind), applied in place to the projected q
 * [n, m->hn heads] (row stride qld) and k [n, m->kv_n heads] (stride kld) before RoPE.
 * Over the whole projection a pass that holds only some heads gets the per-token sums of
 * squares of the others through m->qk: fn receives ss[t] (q) and ss[n + t] (k) summed over
 * the heads the pass computed and leaves there the sums over the whole projections. */
struct vqk_reduce {
    tps_status (*fn)(void *ctx, double *ss, size_t n, tps_error *err);
    void *ctx;
};

/* Whether the block's q/k norm spans the whole projection (a collective under TP). */
static inline bool tps_vqk_whole(const tps_block *b)
{
    return b->qk_norm == TPS_QK_NORM_WHOLE && (b->role[TPS_ROLE_Q_NORM_W] || b->role[TPS_ROLE_K_NORM_W]);
}

tps_status tps_vqk_norm_f64(const tps_block *b, const vdims *d, const vlayer *l, const vattn_map *m, size_t n,
                            double *q, size_t qld, double *k, size_t kld, tps_error *err);
tps_status tps_vqk_norm_f32(const tps_block *b, const vdims *d, const vlayer *l, const vattn_map *m, size_t n,
                            float *q, size_t qld, float *k, size_t kld, tps_error *err);

#endif
