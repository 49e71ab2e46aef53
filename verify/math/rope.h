/* Rotary frequencies under config.json's rope_scaling, shared by the CPU ranks and reference
 * (verify/math/ops_tmpl.h) and the CUDA plugin's kernels (verify/backends/cuda/cuda_backend.cu, where
 * these are __host__ __device__), so every pass rotates by the same angles.  The formulas are
 * those of transformers' modeling_rope_utils (4.46), computed here in double:
 *   default  inv(i) = theta^(-2i/rot) for the rotary pair i < rot/2
 *   linear   inv(i) / factor
 *   dynamic  the default with base theta * (factor * n / max_pos - (factor - 1))^(rot/(rot-2))
 *            once the pass's n positions exceed max_pos (below that: the default)
 *   llama3   wavelength w = 2 pi / inv(i): w < L/high keeps inv(i), w > L/low gives
 *            inv(i) / factor, between them s = (L/w - low) / (high - low) blends
 *            (1 - s) inv(i) / factor + s inv(i); L = original_max_position_embeddings
 *   yarn     pairs below the correction range keep inv(i), above it inv(i) / factor, a linear
 *            ramp between; the range is [floor(c(beta_fast)), ceil(c(beta_slow))] clamped to
 *            [0, rot - 1] with c(r) = rot ln(L / (2 pi r)) / (2 ln theta), L the rope_scaling's
 *            original_max_position_embeddings, else max_position_embeddings (the one 4.46
 *            reads); cos and sin are multiplied by attention_factor.  With rope_scaling's
 *            "truncate": false (transformers 4.57's option, GPT-OSS) the range is not
 *            rounded: [c(beta_fast), c(beta_slow)], clamped alike.
 * A type verify does not model (TPS_ROPE_SCALING_OTHER) gets the default frequencies: the
 * reference and the ranks still rotate alike, so the check of the cut stands. */
#ifndef TPS_VERIFY_ROPE_H
#define TPS_VERIFY_ROPE_H

#include <math.h>
#include <stddef.h>

#include "../../lib/layout/block.h"

#ifdef __CUDACC__
#define TPS_VROPE_FN static inline __host__ __device__
#else
#define TPS_VROPE_FN static inline
#endif

#define TPS_VROPE_2PI 6.283185307179586476925

/* The yarn correction dimension of r rotations over context L. */
TPS_VROPE_FN double vrope_yarn_dim(double r, double rot, double L, double theta)
{
    return rot * log(L / (r * TPS_VROPE_2PI)) / (2.0 * log(theta));
}

/* The inverse frequency of rotary pair i (0 <= i < rot/2) in a pass over n positions. */
TPS_VROPE_FN double vrope_inv_freq(const tps_rope_scaling *s, double theta, size_t rot, size_t i, size_t n)
{
    double dim = (double)rot, base = theta;
    if (s->type == TPS_ROPE_SCALING_DYNAMIC && s->max_pos > 0 && (double)n > s->max_pos && rot > 2)
        base = theta * pow(s->factor * (double)n / s->max_pos - (s->factor - 1.0), dim / (dim - 2.0));
    double inv = 1.0 / pow(base, 2.0 * (double)i / dim);
    switch (s->type) {
    case TPS_ROPE_SCALING_LINEAR:
        return inv / s->factor;
    case TPS_ROPE_SCALING_LLAMA3: {
        double L = s->original_max_pos, w = TPS_VROPE_2PI / inv;
        if (w < L / s->high_freq_factor) return inv;
        if (w > L / s->low_freq_factor) return inv / s->factor;
        double sm = (L / w - s->low_freq_factor) / (s->high_freq_factor - s->low_freq_factor);
        return (1.0 - sm) * inv / s->factor + sm * inv;
    }
    case TPS_ROPE_SCALING_YARN: {
        double L = s->original_max_pos > 0 ? s->original_max_pos : s->max_pos;
        double lo = vrope_yarn_dim(s->beta_fast, dim, L, theta), hi = vrope_yarn_dim(s->beta_slow, dim, L, theta);
        if (!s->yarn_no_truncate) lo = floor(lo), hi = ceil(hi);
        if (lo < 0) lo = 0;
        if (hi > dim - 1) hi = dim - 1;
        if (lo == hi) hi += 0.001; /* as transformers: no zero-width ramp */
        double ramp = ((double)i - lo) / (hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        double keep = 1.0 - ramp; /* the share of the unscaled (extrapolated) frequency */
        return inv / s->factor * (1.0 - keep) + inv * keep;
    }
    default:
        return inv;
    }
}

/* The base and scaling a layer rotates with: Gemma 3's local (sliding-window) layers use
 * rope_local_base_freq without rope_scaling (transformers' rotary_emb_local), every other
 * layer rope_theta under rope_scaling. */
TPS_VROPE_FN tps_rope_scaling vrope_layer_scaling(const tps_block *b, bool local, double *theta)
{
    if (local && b->rope_local_theta > 0) {
        tps_rope_scaling none = b->rope_scaling; /* the numbers stay, unread without a type */
        none.type = TPS_ROPE_SCALING_NONE;
        *theta = b->rope_local_theta;
        return none;
    }
    *theta = b->rope_theta;
    return b->rope_scaling;
}

/* The factor on cos and sin (so on q.k: its square). */
TPS_VROPE_FN double vrope_attn_factor(const tps_rope_scaling *s)
{
    return s->type == TPS_ROPE_SCALING_YARN ? s->attention_factor : 1.0;
}

#endif
