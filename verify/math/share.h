/* The TP convention as data: the sizes of a layer resolved from its tensors, what the
 * convention gives rank r of T (its share), and the maps that say which heads and
 * intermediate columns a party computes from the tensors it holds. */
#ifndef TPS_VERIFY_MATH_SHARE_H
#define TPS_VERIFY_MATH_SHARE_H

#include "tensor.h"

/* inter is the width of the layer's MLP: one routed expert's in a MoE layer (experts > 0),
 * else the dense MLP's; sh_inter the shared expert's (0: none). */
typedef struct vdims {
    uint64_t hidden, heads, kv, hd, inter, experts, top_k;
    uint64_t rot; /* rotating dimensions of a head (even), 0 without RoPE */
    uint64_t window; /* this layer's sliding window (tps_block.sliding_window_pattern); 0: none */
    uint64_t sh_inter;
    /* Multi-head latent attention (verify/math/mla.c): per-head widths and the latent ranks
     * (qlora 0: a plain q_proj). */
    uint64_t nope, rope_d, vhd, qlora, kvlora;
    bool local;      /* a local layer (tps_block_layer_is_local): Gemma 3 rotates it by its own base */
    /* 0: the intermediate columns go to the ranks evenly.  B > 0: in whole blocks of B as vLLM
     * cuts MXFP4 experts, cdiv(inter / B, T) blocks a rank and the last rank the rest. */
    uint64_t i_block;
    /* Expert parallelism (lib/set/grid_ep.h): the routed experts whole on their owners, rank r
     * of T owning [r*E/T, (r+1)*E/T); each rank's MoE output is its own experts' sum, and the
     * same all-reduce joins them.  Attention, dense and shared-expert MLPs stay cut by TP. */
    bool ep;
    /* Llama 4 (verify/math/llama4.h): q and k L2-normed per head after RoPE; NoPE layers' q
     * temperature 1 + temp_scale * log1p(floor((pos + 1) / temp_floor)) (temp_floor 0: none);
     * attention within chunks of this many positions (0: none). */
    bool qk_l2;
    double temp_floor, temp_scale;
    uint64_t chunk;
} vdims;

/* What the TP convention gives rank r of T (module comment of verify.h). */
typedef struct vshare {
    uint64_t q_first, q_n;   /* q heads */
    uint64_t kv_first, kv_n; /* KV heads */
    uint64_t i_first, i_n;   /* intermediate columns (of every expert) */
    uint64_t s_first, s_n;   /* the shared expert's intermediate columns */
    uint64_t e_first, e_n;   /* expert parallelism: the experts held whole (e_n 0: every expert, cut) */
} vshare;

/* Whether a share holds routed expert e (every one unless expert parallel). */
static inline bool tps_vshare_has_expert(const vshare *s, uint64_t e)
{
    return !s->e_n || (e >= s->e_first && e < s->e_first + s->e_n);
}

void tps_vshare_of(const vdims *d, uint64_t T, uint64_t r, vshare *out);

/* Which heads an attention pass computes from the q/k/v (or fused) tensors it holds:
 * hn q heads, global indices from q_first; the KV heads held are global
 * [kv_first, kv_first + kv_n).  In the held tensors' output dimension, q head h starts at
 * q_off + h * stride, KV head j (local) at k_off / v_off + j * stride; o_proj's input
 * columns for q head h start at o_off + h * hd. */
typedef struct vqk_reduce vqk_reduce;
typedef struct vattn_map {
    uint64_t hn, q_first, kv_first, kv_n;
    uint64_t q_off, k_off, v_off, stride, o_off;
    const vqk_reduce *qk; /* a whole-projection q/k norm's collective (verify/math/qk_norm.c); NULL: all heads held */
    /* A grouped fused qkv holding several groups (Falcon-40B, qkv_grouped): q heads come in
     * runs of q_run, one run per group every q_gstride rows, the map's first head at place
     * q_phase of its run (q head h at q_off + ((q_phase + h) / q_run) * q_gstride +
     * ((q_phase + h) % q_run) * stride), and KV head j at k_off / v_off + j * kv_stride.
     * q_run 0: q head h at q_off + h * stride, KV head j at k_off / v_off + j * stride. */
    uint64_t q_run, q_phase, q_gstride, kv_stride;
    /* Not NULL: q, k and v rows are read from these activations (REAL of the precision the
     * map is passed to; [n, act_ld], the offsets above index a row) instead of projected
     * (verify/ranks/qkv_chunks.c: Megatron's all-gathered qkv). */
    const void *act;
    size_t act_ld;
} vattn_map;

/* Intermediate columns [i_first, i_first + i_n) of the held MLP tensors; a fused
 * [gate; up] holds up from up_off.  sh: the same for the shared expert's tensors. */
typedef struct vmlp_map {
    uint64_t i_first, i_n, up_off;
    uint64_t sh_first, sh_n, sh_up_off;
    uint64_t e_first, e_n; /* the routed experts computed (e_n 0: all) */
} vmlp_map;

/* The maps for the heads of a share, in tensors of the full model (global) or in the
 * slices the share's rank holds (local). */
void tps_vattn_map_global(const tps_block *b, const vdims *d, const vshare *s, vattn_map *m);
void tps_vattn_map_local(const tps_block *b, const vdims *d, const vshare *s, vattn_map *m);
void tps_vmlp_map_global(const vdims *d, const vshare *s, vmlp_map *m);
void tps_vmlp_map_local(const vdims *d, const vshare *s, vmlp_map *m);

/* Which roles feed the MLP stage (the rest feed attention). */
bool tps_vrole_is_mlp(tps_block_role r);

#endif
