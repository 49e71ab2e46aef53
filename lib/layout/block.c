/* Names of the block description's enums as written in a layout's `block:` section.  The
 * role names are the keys of `block.roles`; their meaning is documented with the schema at
 * the top of lib/layout/layout.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../base/json.h"
#include "layout_int.h"

static const char *const kind_names[] = {"llama", "gpt2", "neox", "mixtral"};

static const char *const role_names[TPS_ROLE_COUNT] = {
    [TPS_ROLE_ATTN_NORM_W] = "attn_norm",     [TPS_ROLE_ATTN_NORM_B] = "attn_norm_bias",
    [TPS_ROLE_Q_W] = "q_proj",                [TPS_ROLE_Q_B] = "q_bias",
    [TPS_ROLE_K_W] = "k_proj",                [TPS_ROLE_K_B] = "k_bias",
    [TPS_ROLE_V_W] = "v_proj",                [TPS_ROLE_V_B] = "v_bias",
    [TPS_ROLE_QKV_W] = "qkv_proj",            [TPS_ROLE_QKV_B] = "qkv_bias",
    [TPS_ROLE_O_W] = "o_proj",                [TPS_ROLE_O_B] = "o_bias",
    [TPS_ROLE_MLP_NORM_W] = "mlp_norm",       [TPS_ROLE_MLP_NORM_B] = "mlp_norm_bias",
    [TPS_ROLE_GATE_W] = "gate_proj",          [TPS_ROLE_UP_W] = "up_proj",
    [TPS_ROLE_GATE_B] = "gate_bias",          [TPS_ROLE_UP_B] = "up_bias",
    [TPS_ROLE_GATE_UP_W] = "gate_up_proj",    [TPS_ROLE_FC_W] = "fc",
    [TPS_ROLE_FC_B] = "fc_bias",              [TPS_ROLE_DOWN_W] = "down_proj",
    [TPS_ROLE_DOWN_B] = "down_bias",          [TPS_ROLE_ROUTER_W] = "router",
    [TPS_ROLE_POST_ATTN_NORM_W] = "post_attn_norm", [TPS_ROLE_POST_MLP_NORM_W] = "post_mlp_norm",
    [TPS_ROLE_Q_A_W] = "q_a_proj",            [TPS_ROLE_Q_A_B] = "q_a_bias",
    [TPS_ROLE_Q_A_NORM_W] = "q_a_norm",       [TPS_ROLE_Q_B_W] = "q_b_proj",
    [TPS_ROLE_KV_A_W] = "kv_a_proj",          [TPS_ROLE_KV_A_B] = "kv_a_bias",
    [TPS_ROLE_KV_A_NORM_W] = "kv_a_norm",     [TPS_ROLE_KV_B_W] = "kv_b_proj",
    [TPS_ROLE_SHARED_GATE_W] = "shared_expert_gate", [TPS_ROLE_ROUTER_BIAS] = "router_bias",
    [TPS_ROLE_Q_NORM_W] = "q_norm",           [TPS_ROLE_K_NORM_W] = "k_norm",
    [TPS_ROLE_SINKS] = "sinks",               [TPS_ROLE_ROUTER_LOGIT_B] = "router_logit_bias",
    [TPS_ROLE_EXPERTS_GATE_UP_W] = "experts_gate_up", [TPS_ROLE_EXPERTS_GATE_UP_B] = "experts_gate_up_bias",
    [TPS_ROLE_EXPERTS_DOWN_W] = "experts_down", [TPS_ROLE_EXPERTS_DOWN_B] = "experts_down_bias",
};

static const char *const model_role_names[TPS_MROLE_COUNT] = {
    [TPS_MROLE_EMBED] = "embed",           [TPS_MROLE_POS_EMBED] = "pos_embed",
    [TPS_MROLE_FINAL_NORM_W] = "final_norm", [TPS_MROLE_FINAL_NORM_B] = "final_norm_bias",
    [TPS_MROLE_LM_HEAD] = "lm_head",
};

static const char *const norm_names[] = {"rms", "layer", "rms_offset"};
static const char *const rope_scaling_names[] = {"default", "linear", "dynamic", "llama3", "yarn"};
static const char *const act_names[] = {"silu", "gelu_tanh", "gelu_erf", "swiglu_oai"};
static const char *const rope_names[] = {"none", "half", "interleaved"};
static const char *const attn_names[] = {"mha", "mla"};
static const char *const moe_scoring_names[] = {"softmax", "sigmoid"};
static const char *const moe_topk_names[] = {"greedy", "group_limited_greedy", "noaux_tc"};
static const char *const qk_norm_names[] = {"per_head", "whole"};

#define NAMES(a) (a), (int)(sizeof(a) / sizeof((a)[0]))

static int lookup(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

static const char *name_of(int v, const char *const *names, int n)
{
    return v >= 0 && v < n ? names[v] : "?";
}

const char *tps_block_kind_name(tps_block_kind k) { return name_of((int)k, NAMES(kind_names)); }
const char *tps_block_role_name(tps_block_role r) { return name_of((int)r, NAMES(role_names)); }
const char *tps_block_model_role_name(tps_block_model_role r) { return name_of((int)r, NAMES(model_role_names)); }
int tps_block_model_role_lookup(const char *s) { return lookup(s, NAMES(model_role_names)); }
const char *tps_norm_name(tps_norm_kind k) { return name_of((int)k, NAMES(norm_names)); }
const char *tps_act_name(tps_act_kind k) { return name_of((int)k, NAMES(act_names)); }
const char *tps_rope_name(tps_rope_style r) { return name_of((int)r, NAMES(rope_names)); }
const char *tps_rope_scaling_name(tps_rope_scaling_kind k)
{
    return name_of((int)k, NAMES(rope_scaling_names));
}

const char *tps_attn_kind_name(tps_attn_kind k) { return name_of((int)k, NAMES(attn_names)); }
int tps_attn_kind_lookup(const char *s) { return lookup(s, NAMES(attn_names)); }

int tps_block_kind_lookup(const char *s) { return lookup(s, NAMES(kind_names)); }
int tps_block_role_lookup(const char *s) { return lookup(s, NAMES(role_names)); }
int tps_norm_lookup(const char *s) { return lookup(s, NAMES(norm_names)); }
int tps_act_lookup(const char *s) { return lookup(s, NAMES(act_names)); }
int tps_rope_lookup(const char *s) { return lookup(s, NAMES(rope_names)); }
int tps_qk_norm_lookup(const char *s) { return lookup(s, NAMES(qk_norm_names)); }

const char *tps_moe_scoring_name(tps_moe_scoring k) { return name_of((int)k, NAMES(moe_scoring_names)); }
const char *tps_moe_topk_name(tps_moe_topk k) { return name_of((int)k, NAMES(moe_topk_names)); }
int tps_moe_scoring_lookup(const char *s) { return lookup(s, NAMES(moe_scoring_names)); }
int tps_moe_topk_lookup(const char *s) { return lookup(s, NAMES(moe_topk_names)); }

bool tps_block_layer_is_moe(const tps_block *b, uint64_t layer)
{
    const tps_moe_routing *m = &b->moe;
    if (!tps_block_is_moe(b) || layer < m->first_k_dense) return false;
    /* DeepSeek counts layer % freq, Qwen (layer + 1) % step (their modeling code). */
    if (m->layer_freq > 1 && layer % m->layer_freq != 0) return false;
    if (m->sparse_step > 1 && (layer + 1) % m->sparse_step != 0) return false;
    return !(layer < TPS_MOE_MAX_LAYERS && (m->mlp_only[layer / 64] >> (layer % 64) & 1));
}

bool tps_block_layer_is_nope(const tps_block *b, uint64_t layer)
{
    const tps_llama4 *f = &b->llama4;
    if (!f->on) return false;
    if (f->nope_listed) return !(layer < TPS_MOE_MAX_LAYERS && (f->rope[layer / 64] >> (layer % 64) & 1));
    return f->nope_interval > 0 && (layer + 1) % f->nope_interval == 0;
}

int tps_act_from_hf(const char *s)
{
    /* transformers/activations.py ACT2FN: "gelu" is the exact erf form; the "new", "fast"
     * and "pytorch_tanh" variants are the tanh approximation. */
    static const struct {
        const char *hf;
        tps_act_kind act;
    } map[] = {
        {"silu", TPS_ACT_SILU},           {"swish", TPS_ACT_SILU},
        {"gelu", TPS_ACT_GELU_ERF},       {"gelu_python", TPS_ACT_GELU_ERF},
        {"gelu_new", TPS_ACT_GELU_TANH},  {"gelu_fast", TPS_ACT_GELU_TANH},
        {"gelu_pytorch_tanh", TPS_ACT_GELU_TANH},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(s, map[i].hf) == 0) return (int)map[i].act;
    return -1;
}

/* rope_scaling's member key as a number in (lo, hi]; *out keeps its value when the key is
 * absent or null and !required. */
static tps_status scaling_number(const tps_json *rs, const char *path, const char *type, const char *key,
                                 bool required, double lo, double hi, double *out, tps_error *err)
{
    const tps_json *v = tps_json_get(rs, key);
    if (!v || v->type == TPS_JSON_NULL) {
        if (!required) return TPS_OK;
        return tps_fail(err, TPS_EINVALID, "%s: rope_scaling of type %s needs \"%s\"", path, type, key);
    }
    if (v->type != TPS_JSON_NUMBER || !(v->u.number.f64 > lo && v->u.number.f64 <= hi))
        return tps_fail(err, TPS_EINVALID, "%s: rope_scaling \"%s\" must be a number in (%g, %g]", path, key, lo, hi);
    *out = v->u.number.f64;
    return TPS_OK;
}

tps_status tps_rope_scaling_from_config(const tps_json *root, const char *path, tps_rope_scaling *out,
                                        tps_error *err)
{
    memset(out, 0, sizeof *out);
    const tps_json *mp = tps_json_get(root, "max_position_embeddings");
    if (mp && mp->type == TPS_JSON_NUMBER && mp->u.number.f64 > 0) out->max_pos = mp->u.number.f64;
    const tps_json *rs = tps_json_get(root, "rope_scaling");
    if (!rs || rs->type == TPS_JSON_NULL) return TPS_OK;
    if (rs->type != TPS_JSON_OBJECT)
        return tps_fail(err, TPS_EINVALID, "%s: \"rope_scaling\" must be an object or null", path);
    /* transformers reads "rope_type", and still accepts the older "type". */
    const tps_json *t = tps_json_get(rs, "rope_type");
    if (!t || t->type == TPS_JSON_NULL) t = tps_json_get(rs, "type");
    if (!t || t->type != TPS_JSON_STRING)
        return tps_fail(err, TPS_EINVALID, "%s: rope_scaling needs a \"rope_type\" string", path);
    const char *type = t->u.string.s;
    int k = lookup(type, NAMES(rope_scaling_names));
    if (k < 0) {
        out->type = TPS_ROPE_SCALING_OTHER;
        snprintf(out->other, sizeof out->other, "%s", type);
        return TPS_OK;
    }
    out->type = (tps_rope_scaling_kind)k;
    if (out->type == TPS_ROPE_SCALING_NONE) return TPS_OK;
    tps_status st;
    if ((st = scaling_number(rs, path, type, "factor", true, 0, 1e9, &out->factor, err)) != TPS_OK) return st;
    /* DeepSeek's yarn: mscale and mscale_all_dim set yarn's attention factor and, for
     * multi-head latent attention, the softmax scale; 0 is "not given", as transformers reads it. */
    if ((st = scaling_number(rs, path, type, "mscale", false, -1e-300, 1e9, &out->mscale, err)) ||
        (st = scaling_number(rs, path, type, "mscale_all_dim", false, -1e-300, 1e9, &out->mscale_all_dim, err)))
        return st;
    switch (out->type) {
    case TPS_ROPE_SCALING_LLAMA3:
        if ((st = scaling_number(rs, path, type, "low_freq_factor", true, 0, 1e9, &out->low_freq_factor, err)) ||
            (st = scaling_number(rs, path, type, "high_freq_factor", true, 0, 1e9, &out->high_freq_factor, err)) ||
            (st = scaling_number(rs, path, type, "original_max_position_embeddings", true, 0, 1e12,
                                 &out->original_max_pos, err)))
            return st;
        /* The smooth band between the two wavelengths divides by their difference. */
        if (out->high_freq_factor <= out->low_freq_factor)
            return tps_fail(err, TPS_EINVALID, "%s: rope_scaling llama3 needs high_freq_factor > low_freq_factor",
                            path);
        return TPS_OK;
    case TPS_ROPE_SCALING_YARN:
        out->beta_fast = 32;
        out->beta_slow = 1;
        /* transformers 4.57: get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
         * when both are given, else get_mscale(factor); get_mscale(s, m) = 0.1 m ln s + 1 for s > 1. */
        out->attention_factor = 0.1 * log(out->factor) + 1.0;
        if (out->mscale > 0 && out->mscale_all_dim > 0 && out->factor > 1)
            out->attention_factor = (0.1 * out->mscale * log(out->factor) + 1.0) /
                                    (0.1 * out->mscale_all_dim * log(out->factor) + 1.0);
        if ((st = scaling_number(rs, path, type, "beta_fast", false, 0, 1e9, &out->beta_fast, err)) ||
            (st = scaling_number(rs, path, type, "beta_slow", false, 0, 1e9, &out->beta_slow, err)) ||
            (st = scaling_number(rs, path, type, "attention_factor", false, 0, 1e9, &out->attention_factor, err)) ||
            (st = scaling_number(rs, path, type, "original_max_position_embeddings", false, 0, 1e12,
                                 &out->original_max_pos, err)))
            return st;
        const tps_json *tr = tps_json_get(rs, "truncate"); /* transformers 4.57; absent: true */
        if (tr && tr->type != TPS_JSON_NULL && tr->type != TPS_JSON_BOOL)
            return tps_fail(err, TPS_EINVALID, "%s: rope_scaling \"truncate\" must be true or false", path);
        out->yarn_no_truncate = tr && tr->type == TPS_JSON_BOOL && !tr->u.boolean;
        /* the correction range needs a context length, as dynamic's growth does */
        /* fall through */
    case TPS_ROPE_SCALING_DYNAMIC:
        if (!out->max_pos && !out->original_max_pos)
            return tps_fail(err, TPS_EINVALID, "%s: rope_scaling of type %s needs \"max_position_embeddings\"", path,
                            type);
        return TPS_OK;
    default:
        return TPS_OK;
    }
}

bool tps_block_layer_is_local(const tps_block *b, uint64_t layer)
{
    if (b->layer_types && layer < strlen(b->layer_types)) return b->layer_types[layer] == 's';
    return b->sliding_window_pattern && (layer + 1) % b->sliding_window_pattern != 0;
}
