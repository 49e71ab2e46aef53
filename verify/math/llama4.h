/* What Llama 4's layers compute beyond a Llama MoE layer (transformers 4.57
 * modeling_llama4.py, Llama4TextAttention / Llama4TextMoe), as the layer math's hooks:
 *   - NoPE layers (no_rope_layers): no RoPE, no QK norm, full causal attention, and (with
 *     attn_temperature_tuning) q scaled by 1 + attn_scale * log1p(floor((pos + 1) / floor_scale));
 *   - RoPE layers: with use_qk_norm, q and k L2-normed per head (Llama4TextL2Norm: x times
 *     rsqrt(mean(x^2) + rms_norm_eps), no weight) after RoPE; chunked attention (a position
 *     sees the earlier positions of its own attention_chunk_size chunk);
 *   - the router (llama4.on): the top-k logits' sigmoids multiply the chosen experts' input,
 *     not their output (vLLM: apply_router_weight_on_input), which differs for a non-linear
 *     expert; verify/math/moe_route.h's sigmoid scoring without renormalization chooses them. */
#ifndef TPS_VERIFY_MATH_LLAMA4_H
#define TPS_VERIFY_MATH_LLAMA4_H

#include "share.h"

/* Fills d's Llama 4 fields for layer `layer` (d->rot already set from the block's RoPE). */
static inline void tps_vllama4_dims(const tps_block *b, uint64_t layer, vdims *d)
{
    const tps_llama4 *f = &b->llama4;
    if (!f->on) return;
    if (tps_block_layer_is_nope(b, layer)) {
        d->rot = 0;
        if (f->temp_tuning && f->floor_scale > 0) d->temp_floor = f->floor_scale, d->temp_scale = f->attn_scale;
        return;
    }
    d->qk_l2 = f->qk_norm;
    d->chunk = f->chunk;
}

/* Whether the router's weight multiplies the experts' input (Llama 4) rather than their output. */
static inline bool tps_vrouter_on_input(const tps_block *b) { return b->llama4.on; }

#endif
