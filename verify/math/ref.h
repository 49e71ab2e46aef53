/* The float64 reference of a layer's two blocks (verify/math/ref.c). */
#ifndef TPS_VERIFY_MATH_REF_H
#define TPS_VERIFY_MATH_REF_H

#include "share.h"

/* Reference outputs for one party's input: attention block output a = attn(norm1 x) and
 * MLP block output m = mlp(norm2 h), with h = x + a (sequential) or h = x (parallel
 * residual).  share NULL: the whole layer with output biases; else the share's partial
 * sums without them (attn input x, MLP input h as given). */
tps_status tps_vref_attn(const tps_block *b, const vdims *d, const vlayer *l, const vshare *share, size_t n,
                     const double *x, double *out, tps_error *err);
tps_status tps_vref_mlp(const tps_block *b, const vdims *d, const vlayer *l, const vshare *share, size_t n,
                    const double *h, double *out, tps_error *err);

#endif
