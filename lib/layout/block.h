/* A transformer block's description, read from the layout's `block:` section, for the
 * verification pass: which tensor plays which role in one layer, and the hyper-parameters
 * the math needs.  Role names are tensor-name templates relative to the layer: the layer
 * prefix holds "{layer}", an expert template holds "{expert}".  A role whose template is
 * NULL is absent from the model (e.g. no q bias). */
#ifndef TPS_BLOCK_H
#define TPS_BLOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"

typedef enum tps_block_kind {
    TPS_BLOCK_LLAMA,   /* RMSNorm, RoPE, GQA causal attention, SwiGLU, optional q/k/v biases */
    TPS_BLOCK_GPT2,    /* LayerNorm with bias, fused c_attn, GELU, biases, Conv1D [in, out] */
    TPS_BLOCK_NEOX,    /* parallel residual, partial rotary, per-head interleaved QKV */
    TPS_BLOCK_MIXTRAL  /* Llama attention, replicated router, top-k experts each a SwiGLU MLP */
} tps_block_kind;

typedef enum tps_block_role {
    TPS_ROLE_ATTN_NORM_W,
    TPS_ROLE_ATTN_NORM_B,
    TPS_ROLE_Q_W, TPS_ROLE_Q_B,
    TPS_ROLE_K_W, TPS_ROLE_K_B,
    TPS_ROLE_V_W, TPS_ROLE_V_B,
    TPS_ROLE_QKV_W, TPS_ROLE_QKV_B, /* fused; layout given by qkv_interleaved */
    TPS_ROLE_O_W, TPS_ROLE_O_B,
    TPS_ROLE_MLP_NORM_W,
    TPS_ROLE_MLP_NORM_B,
    TPS_ROLE_GATE_W, TPS_ROLE_UP_W, /* SwiGLU: down(silu(gate x) * up x) */
    TPS_ROLE_GATE_B, TPS_ROLE_UP_B, /* Llama mlp_bias: column-parallel, cut like their weights */
    TPS_ROLE_GATE_UP_W,             /* fused [gate; up] */
    TPS_ROLE_FC_W, TPS_ROLE_FC_B,   /* GPT-2 / NeoX first MLP matrix */
    TPS_ROLE_DOWN_W, TPS_ROLE_DOWN_B,
    TPS_ROLE_ROUTER_W,              /* Mixtral gate, [experts, hidden], replicated */
    /* Norms applied to a block's output before its residual add (Gemma 2 sandwich norms, OLMo 2),
     * replicated, by every rank after the all-reduce and the row-parallel bias. */
    TPS_ROLE_POST_ATTN_NORM_W, TPS_ROLE_POST_MLP_NORM_W,
    /* Multi-head latent attention (DeepSeek-V2/V3; attention: mla): the a-projections and
     * their RMSNorms are replicated, q_b and kv_b cut by heads; q_proj (TPS_ROLE_Q_W)
     * stands for q_a -> q_b when a model has no q_lora_rank. */
    TPS_ROLE_Q_A_W, TPS_ROLE_Q_A_B, TPS_ROLE_Q_A_NORM_W, TPS_ROLE_Q_B_W,
    TPS_ROLE_KV_A_W, TPS_ROLE_KV_A_B, TPS_ROLE_KV_A_NORM_W, TPS_ROLE_KV_B_W,
    TPS_ROLE_SHARED_GATE_W,         /* Qwen2-MoE shared_expert_gate [1, hidden], replicated: */
                                    /* the shared expert's output scaled by sigmoid(x . w) */
    TPS_ROLE_ROUTER_BIAS,           /* DeepSeek-V3 e_score_correction_bias [experts], replicated */
    TPS_ROLE_Q_NORM_W, TPS_ROLE_K_NORM_W, /* RMSNorm of q and of k before RoPE (qk_norm: over what); replicated */
    /* GPT-OSS.  sinks [heads]: a per-head logit joined to each softmax and dropped, cut with
     * the q heads.  router_logit_bias [experts]: the router Linear's bias, added to the
     * logits (it chooses and weighs, unlike router_bias), replicated.  The experts_* roles
     * hold every expert of the layer in one tensor, [in, out] per expert: experts_gate_up
     * [experts, hidden, 2 inter] with gate at even and up at odd columns, its bias
     * [experts, 2 inter] (cut by pairs of columns), experts_down [experts, inter, hidden]
     * (cut along inter) and experts_down_bias [experts, hidden] (replicated: weighted by the
     * routing and added once, after the all-reduce). */
    TPS_ROLE_SINKS, TPS_ROLE_ROUTER_LOGIT_B,
    TPS_ROLE_EXPERTS_GATE_UP_W, TPS_ROLE_EXPERTS_GATE_UP_B, TPS_ROLE_EXPERTS_DOWN_W, TPS_ROLE_EXPERTS_DOWN_B,
    TPS_ROLE_COUNT
} tps_block_role;

/* Tensors outside the layers that the whole-model pass (verify --whole-model) needs: full
 * tensor names (no prefix).  embed [vocab, hidden] and lm_head [vocab, hidden] are
 * vocabulary-parallel; a model without an lm_head tensor ties it to embed.  pos_embed
 * (GPT-2's learned positions, [positions, hidden]) and the final norm are replicated. */
typedef enum tps_block_model_role {
    TPS_MROLE_EMBED,
    TPS_MROLE_POS_EMBED,
    TPS_MROLE_FINAL_NORM_W,
    TPS_MROLE_FINAL_NORM_B,
    TPS_MROLE_LM_HEAD,
    TPS_MROLE_COUNT
} tps_block_model_role;

/* rms_offset: Gemma's RMSNorm, x / rms(x) * (1 + w) (transformers' GemmaRMSNorm computes it in
 * float32, weight included, where Llama's scales after casting back). */
typedef enum tps_norm_kind { TPS_NORM_RMS, TPS_NORM_LAYER, TPS_NORM_RMS_OFFSET } tps_norm_kind;
/* The attention of a block: Llama/GPT-style multi-head (the kind says which), or DeepSeek's
 * multi-head latent attention (verify/math/mla_tmpl.h), whatever the MLP is. */
typedef enum tps_attn_kind { TPS_ATTN_MHA, TPS_ATTN_MLA } tps_attn_kind;
/* Over what q_norm and k_norm normalize.  Per head: each head's head_dim, weight [head_dim]
 * (Qwen3, Gemma 3), local to a rank.  Whole: the whole projection, q's heads * head_dim and
 * k's kv_heads * head_dim, weights of those sizes (OLMo 2): under TP the vector spans the
 * ranks, so the norm needs a collective (vLLM's Olmo2Attention all-gathers q and k). */
typedef enum tps_qk_norm_kind { TPS_QK_NORM_PER_HEAD, TPS_QK_NORM_WHOLE } tps_qk_norm_kind;

/* swiglu_oai (GPT-OSS, gated MLPs only): gate clamped to at most 7, up to [-7, 7],
 * (up + 1) * gate * sigmoid(1.702 gate); transformers' GptOssExperts, vLLM's swigluoai. */
typedef enum tps_act_kind { TPS_ACT_SILU, TPS_ACT_GELU_TANH, TPS_ACT_GELU_ERF, TPS_ACT_SWIGLU_OAI } tps_act_kind;
typedef enum tps_rope_style {
    TPS_ROPE_NONE,
    TPS_ROPE_HALF,       /* rotate_half: pairs (i, i + rot/2), HF Llama/NeoX */
    TPS_ROPE_INTERLEAVED /* pairs (2i, 2i+1), GPT-J / Meta original */
} tps_rope_style;

/* config.json's rope_scaling: how the rotary frequencies of a long-context model differ from
 * theta^(-2i/rot).  The formulas are transformers' modeling_rope_utils (4.46), implemented
 * in verify/math/rope.h. */
typedef enum tps_rope_scaling_kind {
    TPS_ROPE_SCALING_NONE,    /* absent, null, or rope_type "default" */
    TPS_ROPE_SCALING_LINEAR,  /* positions divided by factor */
    TPS_ROPE_SCALING_DYNAMIC, /* NTK base growth once the sequence exceeds max_pos */
    TPS_ROPE_SCALING_LLAMA3,  /* Llama 3.1: low frequencies / factor, a smooth band between */
    TPS_ROPE_SCALING_YARN,    /* NTK-by-parts ramp, cos/sin scaled by attention_factor */
    TPS_ROPE_SCALING_OTHER    /* a type verify cannot compute (longrope, ...): named in `other` */
} tps_rope_scaling_kind;

typedef struct tps_rope_scaling {
    tps_rope_scaling_kind type;
    double factor;
    double low_freq_factor, high_freq_factor; /* llama3 */
    double original_max_pos;                  /* llama3 (required), yarn (optional) */
    double beta_fast, beta_slow;              /* yarn (defaults 32, 1) */
    double attention_factor;                  /* yarn (default 0.1 ln(factor) + 1) */
    bool yarn_no_truncate;                    /* yarn "truncate": false (transformers 4.57, GPT-OSS):
                                                 the correction range is not rounded outwards */
    double max_pos;                           /* config.json max_position_embeddings; 0: unknown */
    char other[24];                           /* TPS_ROPE_SCALING_OTHER's rope_type */
    double mscale, mscale_all_dim;            /* DeepSeek's yarn (transformers 4.57); 0: absent */
} tps_rope_scaling;

/* How a mixture-of-experts layer picks its experts (config.json's words; verify/math/moe_route.h
 * computes it): scores from the router logits (scoring_func), a choice among groups of
 * experts first (topk_method, n_group, topk_group), then the top_k experts by score plus
 * the router bias (e_score_correction_bias, for choosing only); the chosen experts' scores,
 * renormalized to sum to 1 when norm_topk_prob, times routed_scaling_factor, weight their
 * outputs. */
typedef enum tps_moe_scoring { TPS_MOE_SOFTMAX, TPS_MOE_SIGMOID } tps_moe_scoring;
typedef enum tps_moe_topk {
    TPS_MOE_TOPK_GREEDY,      /* "greedy": the top_k of all experts */
    TPS_MOE_TOPK_GROUP_MAX,   /* "group_limited_greedy" (DeepSeek-V2): groups ranked by their best score */
    TPS_MOE_TOPK_GROUP_TOP2   /* "noaux_tc" (DeepSeek-V3): groups ranked by the sum of their two best */
} tps_moe_topk;

/* mlp_only_layers is held as a bitset of the layers below this bound. */
#define TPS_MOE_MAX_LAYERS 1024

typedef struct tps_moe_routing {
    tps_moe_scoring scoring;    /* scoring_func */
    tps_moe_topk topk_method;   /* topk_method */
    bool norm_topk_prob;        /* norm_topk_prob (the mixtral kind: true) */
    double scaling;             /* routed_scaling_factor (1) */
    uint64_t n_group, topk_group; /* grouped top-k: experts in n_group equal groups, topk_group kept */
    /* Which layers are dense (an ordinary MLP, no router): */
    uint64_t first_k_dense;     /* first_k_dense_replace: layers below it */
    uint64_t layer_freq;        /* moe_layer_freq (DeepSeek): MoE only where layer % freq == 0 */
    uint64_t sparse_step;       /* decoder_sparse_step (Qwen): MoE only where (layer + 1) % step == 0 */
    uint64_t mlp_only[TPS_MOE_MAX_LAYERS / 64]; /* mlp_only_layers (Qwen), a bitset */
} tps_moe_routing;

/* Llama 4's layers (transformers 4.57 modeling_llama4.py).  on: block key llama4 (the preset's):
 * the router's sigmoid weight multiplies the chosen experts' INPUT, and fused experts hold
 * [gate | up] halves (chunk(2)) rather than GPT-OSS's (gate, up) pairs.  The rest comes from
 * config.json (lib/layout/llama4_config.c): use_qk_norm (q and k L2-normed per head after
 * RoPE, on RoPE layers only), no_rope_layers (1: the layer rotates; absent or empty: every
 * no_rope_layer_interval-th layer does not), attn_temperature_tuning with floor_scale and
 * attn_scale (NoPE layers scale q by 1 + attn_scale * log1p(floor((pos + 1) / floor_scale))),
 * attention_chunk_size (RoPE layers attend within chunks of it), intermediate_size_mlp (the
 * dense layers' width; config's intermediate_size is the experts'). */
typedef struct tps_llama4 {
    bool on;
    bool qk_norm, temp_tuning;
    double floor_scale, attn_scale;
    uint64_t chunk, dense_intermediate, nope_interval;
    bool nope_listed;                         /* rope[] holds no_rope_layers */
    uint64_t rope[TPS_MOE_MAX_LAYERS / 64];   /* bit set: layer rotates */
} tps_llama4;

typedef struct tps_block {
    tps_block_kind kind;
    char *layer_prefix;           /* e.g. "model.layers.{layer}." */
    char *expert_prefix;          /* e.g. "block_sparse_moe.experts.{expert}." (Mixtral) */
    char *role[TPS_ROLE_COUNT];   /* templates after the layer (and expert) prefix */
    char *model_role[TPS_MROLE_COUNT]; /* whole tensor names; NULL: not named by the layout */
    uint64_t layers;              /* number of layers (0: count from tensor names) */
    uint64_t hidden, heads, kv_heads, head_dim, intermediate, experts, top_k;
    tps_norm_kind norm;
    double norm_eps;
    tps_act_kind act;
    tps_rope_style rope;
    double rope_theta;
    tps_rope_scaling rope_scaling; /* from config.json only */
    double rotary_pct;            /* fraction of head_dim that rotates (NeoX 0.25); 1 = all */
    bool parallel_residual;       /* x + attn(ln1 x) + mlp(ln2 x) */
    bool conv1d;                  /* weights stored [in, out] (GPT-2) */
    bool qkv_interleaved;         /* fused QKV per head [q_h; k_h; v_h] (NeoX), else [Q; K; V] */
    /* Gemma / Gemma 2 (transformers 4.46 modeling_gemma2.py).  From config.json only, 0 when
     * absent: attention scores s become c tanh(s / c) before the causal mask
     * (attn_logit_softcapping), the LM head's logits likewise (final_logit_softcapping), and
     * scores are scaled by query_pre_attn_scalar^-0.5 instead of head_dim^-0.5. */
    double attn_softcap, final_softcap, query_pre_attn_scalar;
    uint64_t sliding_window;      /* config.json: a token attends to the last this many positions */
    /* Block key: layer i uses sliding_window unless (i + 1) % pattern == 0 (Gemma 2: 2, its even
     * layers); 0: no layer does. */
    uint64_t sliding_window_pattern;
    bool embed_scale;             /* block key: embeddings times sqrt(hidden) rounded to their dtype */
    tps_attn_kind attention;      /* block key attention: mha (default) or mla */
    uint64_t qk_nope_head_dim, qk_rope_head_dim, v_head_dim; /* MLA head widths, from the sizes */
    /* Mixture of experts: a block with a router role.  Its MLP roles name each expert's
     * tensors after expert_prefix; in a dense layer they follow dense_prefix, and the shared
     * expert's (one TP MLP beside the routed ones, as vLLM runs it) follow shared_prefix. */
    char *dense_prefix;           /* e.g. "mlp." (Qwen2-MoE, DeepSeek); NULL: every layer is MoE */
    char *shared_prefix;          /* e.g. "mlp.shared_expert."; NULL: no shared expert */
    uint64_t moe_intermediate, shared_intermediate; /* 0: from the tensors' shapes */
    tps_moe_routing moe;
    tps_qk_norm_kind qk_norm;     /* what roles q_norm / k_norm normalize over */
    bool qkv_grouped;             /* fused QKV per KV group [q heads of the group; k; v] (Falcon) */
    /* Gemma 3 (transformers 4.57 modeling_gemma3.py), from config.json.  rope_local_theta
     * (rope_local_base_freq): the RoPE base of the local (sliding-window) layers, which rotate
     * without rope_scaling; 0: every layer rotates as rope_theta and rope_scaling say.
     * layer_types: one letter a layer, 's' sliding_attention, 'f' full_attention; NULL: the
     * sliding_window_pattern decides.  Owned by the layout. */
    double rope_local_theta;
    char *layer_types;
    /* A block-scaled FP8 checkpoint's [bn, bk] (config.json's quantization_config, lib/quant/quant.h):
     * how verify dequantizes a weight with its weight_scale_inv; 0: not block-scaled. */
    uint64_t fp8_block[2];
    /* A GPTQ/AWQ checkpoint's bits and GPTQ zero convention (lib/quant/quant.h): how verify unpacks
     * qweight and qzeros; int_bits 0: not integer-quantized (verify reads them off the shapes). */
    unsigned int_bits;
    bool gptq_v2;
    /* An MXFP4 checkpoint (GPT-OSS, lib/quant/mxfp4.h): verify dequantizes the experts'
     * *_blocks / *_scales and gives the ranks vLLM's uneven share of the intermediate
     * dimension (whole 32-wide blocks, cdiv a rank, the last the rest). */
    bool mxfp4;
    /* Megatron-Core >= 0.16 at tp above the query groups (set by verify from the manifest's
     * cut, no YAML key): each rank holds a plain row chunk of its group's [q; k; v] block,
     * not its q heads with the group's k and v (Falcon's); verify/ranks/qkv_chunks.c. */
    bool qkv_row_chunks;
    /* Llama 4 (transformers 4.57 modeling_llama4.py); lib/layout/llama4_config.h. */
    tps_llama4 llama4;
} tps_block;

/* Whether the block's MLP is a mixture of experts (it names a router). */
static inline bool tps_block_is_moe(const tps_block *b) { return b->role[TPS_ROLE_ROUTER_W] != NULL; }

/* Whether layer `layer` of a MoE block routes (false: a dense layer, per the routing's
 * first_k_dense, layer_freq, sparse_step and mlp_only). */
bool tps_block_layer_is_moe(const tps_block *b, uint64_t layer);

const char *tps_moe_scoring_name(tps_moe_scoring s); /* "softmax", "sigmoid" */
const char *tps_moe_topk_name(tps_moe_topk k);       /* "greedy", "group_limited_greedy", "noaux_tc" */

const char *tps_block_kind_name(tps_block_kind k);
const char *tps_block_role_name(tps_block_role r); /* the YAML key, e.g. "q_proj" -> see layout docs */
const char *tps_block_model_role_name(tps_block_model_role r); /* the block key: "embed", "final_norm", ... */
int tps_block_model_role_lookup(const char *s);               /* -1 for an unknown key */
const char *tps_rope_scaling_name(tps_rope_scaling_kind k); /* its rope_type, "default" for none */
const char *tps_attn_kind_name(tps_attn_kind k);            /* "mha", "mla" */
int tps_attn_kind_lookup(const char *s);                    /* -1 for an unknown name */
/* Whether layer i is local (sliding-window attention): config.json's layer_types where it
 * names the layer, else (i + 1) % sliding_window_pattern != 0; false without a pattern. */
bool tps_block_layer_is_local(const tps_block *b, uint64_t layer);
/* Whether layer i of a Llama 4 block (llama4.on) is without RoPE (no_rope_layers); false elsewhere. */
bool tps_block_layer_is_nope(const tps_block *b, uint64_t layer);

struct tps_json;
/* Reads config.json's rope_scaling (and max_position_embeddings) from root, a JSON object,
 * into *out; absent, null or "default" give TPS_ROPE_SCALING_NONE.  A type verify does not
 * compute is kept as TPS_ROPE_SCALING_OTHER (split does not need it; verify refuses it).
 * TPS_EINVALID, naming path and the key, for a malformed value. */
tps_status tps_rope_scaling_from_config(const struct tps_json *root, const char *path, tps_rope_scaling *out,
                                        tps_error *err);

#endif
