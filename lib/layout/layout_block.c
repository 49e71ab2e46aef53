/* The block: section of a layout (lib/layout/block.h has what it describes). */
#include "layout_parse.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "../base/buf.h"
#include "../base/checked.h"
#include "layout_int.h"
#include "presets.h"

static bool has_role(const tps_block *b, tps_block_role r) { return b->role[r] != NULL; }

/* The roles each kind's math cannot do without. */
static tps_status check_block_roles(pctx *c, const yaml_node_t *n, const tps_block *b)
{
    static const tps_block_role common[] = {TPS_ROLE_ATTN_NORM_W, TPS_ROLE_O_W, TPS_ROLE_MLP_NORM_W, TPS_ROLE_DOWN_W};
    /* A stage normalized only after its block (OLMo 2) has no pre-norm; fused experts
     * (GPT-OSS) hold the down projections in experts_down. */
    static const tps_block_role instead[] = {TPS_ROLE_POST_ATTN_NORM_W, TPS_ROLE_COUNT, TPS_ROLE_POST_MLP_NORM_W,
                                             TPS_ROLE_EXPERTS_DOWN_W};
    for (size_t i = 0; i < sizeof common / sizeof common[0]; i++)
        if (!has_role(b, common[i]) && !(instead[i] != TPS_ROLE_COUNT && has_role(b, instead[i])))
            return tps_lp_fail_at(c, n, "block of kind %s needs role %s", tps_block_kind_name(b->kind),
                           tps_block_role_name(common[i]));
    bool separate_qkv = has_role(b, TPS_ROLE_Q_W) && has_role(b, TPS_ROLE_K_W) && has_role(b, TPS_ROLE_V_W);
    if (b->attention == TPS_ATTN_MLA) {
        /* q_proj (no q_lora_rank) or q_a_proj -> q_a_norm -> q_b_proj: a model has one of them. */
        bool q_lora = has_role(b, TPS_ROLE_Q_A_W) && has_role(b, TPS_ROLE_Q_A_NORM_W) && has_role(b, TPS_ROLE_Q_B_W);
        if (!has_role(b, TPS_ROLE_KV_A_W) || !has_role(b, TPS_ROLE_KV_A_NORM_W) || !has_role(b, TPS_ROLE_KV_B_W) ||
            (!q_lora && !has_role(b, TPS_ROLE_Q_W)))
            return tps_lp_fail_at(c, n, "attention mla needs roles kv_a_proj, kv_a_norm, kv_b_proj, and q_proj or q_a_proj, "
                                 "q_a_norm and q_b_proj");
        if (b->kind != TPS_BLOCK_LLAMA && b->kind != TPS_BLOCK_MIXTRAL)
            return tps_lp_fail_at(c, n, "attention mla goes with block kind llama or mixtral");
        separate_qkv = true; /* MLA stands in for q/k/v */
    }
    if (b->kind == TPS_BLOCK_GPT2 || b->kind == TPS_BLOCK_NEOX) {
        if (!has_role(b, TPS_ROLE_QKV_W) || !has_role(b, TPS_ROLE_FC_W))
            return tps_lp_fail_at(c, n, "block of kind %s needs roles qkv_proj and fc", tps_block_kind_name(b->kind));
        return TPS_OK;
    }
    if (!separate_qkv && !has_role(b, TPS_ROLE_QKV_W))
        return tps_lp_fail_at(c, n, "block of kind %s needs roles q_proj, k_proj and v_proj, or qkv_proj",
                       tps_block_kind_name(b->kind));
    bool fused_experts = has_role(b, TPS_ROLE_EXPERTS_GATE_UP_W) || has_role(b, TPS_ROLE_EXPERTS_DOWN_W) ||
                         has_role(b, TPS_ROLE_EXPERTS_GATE_UP_B) || has_role(b, TPS_ROLE_EXPERTS_DOWN_B);
    if (fused_experts) {
        if (!has_role(b, TPS_ROLE_EXPERTS_GATE_UP_W) || !has_role(b, TPS_ROLE_EXPERTS_DOWN_W) ||
            !has_role(b, TPS_ROLE_ROUTER_W))
            return tps_lp_fail_at(c, n, "a block with fused experts needs roles experts_gate_up, experts_down and router");
        if (b->expert_prefix) return tps_lp_fail_at(c, n, "fused experts (experts_*) leave out expert_prefix");
        /* The MLP roles then name the dense layers' and the shared expert's (Llama 4): they need
         * dense_prefix or shared_prefix to say where, and a dense MLP's roles. */
        bool mlp = has_role(b, TPS_ROLE_GATE_W) || has_role(b, TPS_ROLE_UP_W) || has_role(b, TPS_ROLE_GATE_UP_W) ||
                   has_role(b, TPS_ROLE_FC_W) || has_role(b, TPS_ROLE_DOWN_W);
        if (mlp != (b->dense_prefix || b->shared_prefix))
            return tps_lp_fail_at(c, n, "fused experts (experts_*) with dense_prefix or shared_prefix need the MLP roles "
                                 "of those (gate_proj, up_proj, down_proj), and MLP roles need one of the prefixes");
        if (mlp && !(has_role(b, TPS_ROLE_DOWN_W) && (has_role(b, TPS_ROLE_GATE_UP_W) || has_role(b, TPS_ROLE_UP_W))))
            return tps_lp_fail_at(c, n, "a dense or shared MLP beside fused experts needs roles down_proj and up_proj "
                                 "(or gate_up_proj)");
        return TPS_OK;
    }
    if (b->kind == TPS_BLOCK_MIXTRAL || has_role(b, TPS_ROLE_ROUTER_W)) {
        if (!has_role(b, TPS_ROLE_GATE_W) || !has_role(b, TPS_ROLE_UP_W) || !has_role(b, TPS_ROLE_ROUTER_W))
            return tps_lp_fail_at(c, n, "a mixture-of-experts block needs roles gate_proj, up_proj and router");
        if (!b->expert_prefix) return tps_lp_fail_at(c, n, "a mixture-of-experts block needs expert_prefix");
        return TPS_OK;
    }
    if (b->dense_prefix || b->shared_prefix || has_role(b, TPS_ROLE_SHARED_GATE_W) || has_role(b, TPS_ROLE_ROUTER_BIAS))
        return tps_lp_fail_at(c, n, "dense_prefix, shared_prefix, shared_expert_gate and router_bias belong to a "
                             "mixture-of-experts block (one with a router role)");
    /* fc alone: a non-gated MLP, down(act(fc x)) (StarCoder2's c_fc / c_proj). */
    if (!(has_role(b, TPS_ROLE_GATE_W) && has_role(b, TPS_ROLE_UP_W)) && !has_role(b, TPS_ROLE_GATE_UP_W) &&
        !has_role(b, TPS_ROLE_FC_W))
        return tps_lp_fail_at(c, n, "block of kind llama needs roles gate_proj and up_proj, gate_up_proj, or fc");
    return TPS_OK;
}

/* The block's routing keys (v and names in TPS_BF_SCORING.. order, config.json's words). */
static tps_status parse_block_routing(pctx *c, yaml_node_t *const *v, const char *const *names)
{
    tps_layout *l = c->l;
    tps_moe_routing *m = &l->block_raw.moe;
    tps_status st;
    int e;
    if (v[0]) {
        if ((st = tps_lp_get_enum(c, v[0], names[0], tps_moe_scoring_lookup, "softmax, sigmoid", &e)) != TPS_OK) return st;
        m->scoring = (tps_moe_scoring)e;
    }
    if (v[1]) {
        if ((st = tps_lp_get_enum(c, v[1], names[1], tps_moe_topk_lookup, "greedy, group_limited_greedy, noaux_tc", &e)) !=
            TPS_OK)
            return st;
        m->topk_method = (tps_moe_topk)e;
    }
    if (v[2] && (st = tps_lp_get_bool(c, v[2], names[2], &m->norm_topk_prob)) != TPS_OK) return st;
    if (v[3] && (st = tps_lp_get_double(c, v[3], names[3], 0, 1e6, &m->scaling)) != TPS_OK) return st;
    uint64_t *counts[] = {&m->n_group, &m->topk_group, &m->first_k_dense, &m->layer_freq, &m->sparse_step};
    for (int i = 0; i < 5; i++)
        if (v[4 + i] && (st = tps_lp_get_u64(c, v[4 + i], names[4 + i], counts[i])) != TPS_OK) return st;
    for (int i = 0; i < 9; i++)
        if (v[i]) l->block_set |= 1u << (TPS_BF_SCORING + i);
    return TPS_OK;
}

tps_status tps_lp_parse_block(pctx *c, const yaml_node_t *n)
{
    static const char *const allowed[] = {
        "kind", "layer_prefix", "expert_prefix", "roles", "norm", "norm_eps", "act", "rope", "rope_theta",
        "rotary_pct", "parallel_residual", "conv1d", "qkv_interleaved", "top_k", "layers", "hidden", "heads",
        "kv_heads", "head_dim", "intermediate", "experts",
        /* mixture of experts: tps_moe_routing in TPS_BF_SCORING.. order, then its sizes */
        "scoring_func", "topk_method", "norm_topk_prob", "routed_scaling_factor", "n_group", "topk_group",
        "first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step", "dense_prefix", "shared_prefix",
        "moe_intermediate", "shared_intermediate",
        "embed", "pos_embed", "final_norm", "final_norm_bias", "lm_head", "embed_scale", "sliding_window_pattern",
        "qk_norm", "qkv_grouped", "attention", "llama4", NULL};
    enum { K_KIND, K_LAYER, K_EXPERT, K_ROLES, K_NORM, K_EPS, K_ACT, K_ROPE, K_THETA, K_PCT, K_PARRES, K_CONV,
           K_QKVI, K_TOPK, K_LAYERS, K_HIDDEN, K_HEADS, K_KVH, K_HD, K_INTER, K_EXPERTS,
           K_SCORING, K_TOPK_METHOD, K_NORM_TOPK, K_SCALING, K_N_GROUP, K_TOPK_GROUP, K_FIRST_DENSE, K_LAYER_FREQ,
           K_SPARSE_STEP, K_DENSE_PREFIX, K_SHARED_PREFIX, K_MOE_INTER, K_SHARED_INTER, K_MODEL0,
           K_EMBED_SCALE = K_MODEL0 + TPS_MROLE_COUNT, K_SWP, K_QKN, K_QKVG, K_ATTN, K_LLAMA4, K_COUNT };
    yaml_node_t *v[K_COUNT];
    tps_layout *l = c->l;
    tps_block *b = &l->block_raw;
    tps_status st = tps_lp_map_fields(c, n, "block", allowed, v);
    if (st != TPS_OK) return st;
    if (!v[K_KIND]) return tps_lp_fail_at(c, n, "block needs kind (llama, gpt2, neox or mixtral)");
    if (!v[K_LAYER]) return tps_lp_fail_at(c, n, "block needs layer_prefix");
    int e;
    if ((st = tps_lp_get_enum(c, v[K_KIND], "kind", tps_block_kind_lookup, "llama, gpt2, neox, mixtral", &e)) != TPS_OK)
        return st;
    b->kind = (tps_block_kind)e;
    if ((st = tps_lp_get_strdup(c, v[K_LAYER], "layer_prefix", &b->layer_prefix)) != TPS_OK) return st;
    if (!strstr(b->layer_prefix, "{layer}")) return tps_lp_fail_at(c, v[K_LAYER], "layer_prefix must contain {layer}");
    if (v[K_EXPERT]) {
        if ((st = tps_lp_get_strdup(c, v[K_EXPERT], "expert_prefix", &b->expert_prefix)) != TPS_OK) return st;
        if (!strstr(b->expert_prefix, "{expert}"))
            return tps_lp_fail_at(c, v[K_EXPERT], "expert_prefix must contain {expert}");
    }
    struct {
        int key;
        char **out;
    } prefixes[] = {{K_DENSE_PREFIX, &b->dense_prefix}, {K_SHARED_PREFIX, &b->shared_prefix}};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (v[prefixes[i].key] &&
            (st = tps_lp_get_strdup(c, v[prefixes[i].key], allowed[prefixes[i].key], prefixes[i].out)) != TPS_OK)
            return st;
    if (v[K_ROLES]) {
        const yaml_node_t *roles = v[K_ROLES];
        if ((st = tps_lp_want_type(c, roles, YAML_MAPPING_NODE, "roles")) != TPS_OK) return st;
        if ((st = tps_lp_no_duplicate_keys(c, roles, "roles")) != TPS_OK) return st;
        for (yaml_node_pair_t *p = roles->data.mapping.pairs.start; p < roles->data.mapping.pairs.top; p++) {
            yaml_node_t *k = tps_lp_node(c, p->key);
            int r = tps_block_role_lookup((const char *)k->data.scalar.value);
            if (r < 0) {
                tps_buf names = TPS_BUF_INIT;
                for (int i = 0; i < TPS_ROLE_COUNT; i++)
                    tps_buf_printf(&names, "%s%s", i ? ", " : "", tps_block_role_name((tps_block_role)i));
                const char *list = tps_buf_cstr(&names);
                st = tps_lp_fail_at(c, k, "unknown role '%s' (roles: %s)", (const char *)k->data.scalar.value,
                             list ? list : "?");
                tps_buf_release(&names);
                return st;
            }
            if ((st = tps_lp_get_strdup(c, tps_lp_node(c, p->value), tps_block_role_name((tps_block_role)r), &b->role[r])) != TPS_OK)
                return st;
        }
    }
    if (v[K_ATTN]) {
        if ((st = tps_lp_get_enum(c, v[K_ATTN], "attention", tps_attn_kind_lookup, "mha, mla", &e)) != TPS_OK) return st;
        b->attention = (tps_attn_kind)e;
    }
    if ((st = check_block_roles(c, n, b)) != TPS_OK) return st;
    if (v[K_NORM]) {
        if ((st = tps_lp_get_enum(c, v[K_NORM], "norm", tps_norm_lookup, "rms, layer, rms_offset", &e)) != TPS_OK) return st;
        b->norm = (tps_norm_kind)e;
        l->block_set |= 1u << TPS_BF_NORM;
    }
    if (v[K_ACT]) {
        if ((st = tps_lp_get_enum(c, v[K_ACT], "act", tps_act_lookup, "silu, gelu_tanh, gelu_erf", &e)) != TPS_OK) return st;
        b->act = (tps_act_kind)e;
        l->block_set |= 1u << TPS_BF_ACT;
    }
    if (v[K_ROPE]) {
        if ((st = tps_lp_get_enum(c, v[K_ROPE], "rope", tps_rope_lookup, "none, half, interleaved", &e)) != TPS_OK) return st;
        b->rope = (tps_rope_style)e;
        l->block_set |= 1u << TPS_BF_ROPE;
    }
    struct {
        int key, bit;
        double *out, lo, hi;
    } dbl[] = {{K_EPS, TPS_BF_NORM_EPS, &b->norm_eps, 0, 1},
               {K_THETA, TPS_BF_ROPE_THETA, &b->rope_theta, 0, 1e12},
               {K_PCT, TPS_BF_ROTARY_PCT, &b->rotary_pct, 0, 1}};
    for (size_t i = 0; i < sizeof dbl / sizeof dbl[0]; i++) {
        if (!v[dbl[i].key]) continue;
        if ((st = tps_lp_get_double(c, v[dbl[i].key], allowed[dbl[i].key], dbl[i].lo, dbl[i].hi, dbl[i].out)) != TPS_OK)
            return st;
        l->block_set |= 1u << dbl[i].bit;
    }
    struct {
        int key, bit;
        bool *out;
    } flags[] = {{K_PARRES, TPS_BF_PARALLEL_RESIDUAL, &b->parallel_residual},
                 {K_CONV, TPS_BF_CONV1D, &b->conv1d},
                 {K_QKVI, TPS_BF_QKV_INTERLEAVED, &b->qkv_interleaved},
                 {K_QKVG, TPS_BF_QKV_GROUPED, &b->qkv_grouped}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        if (!v[flags[i].key]) continue;
        if ((st = tps_lp_get_bool(c, v[flags[i].key], allowed[flags[i].key], flags[i].out)) != TPS_OK) return st;
        l->block_set |= 1u << flags[i].bit;
    }
    if (v[K_QKN]) {
        if ((st = tps_lp_get_enum(c, v[K_QKN], "qk_norm", tps_qk_norm_lookup, "per_head, whole", &e)) != TPS_OK) return st;
        b->qk_norm = (tps_qk_norm_kind)e;
    }
    if (v[K_TOPK]) {
        if ((st = tps_lp_get_u64(c, v[K_TOPK], "top_k", &b->top_k)) != TPS_OK) return st;
        l->block_set |= 1u << TPS_BF_TOP_K;
    }
    if ((st = parse_block_routing(c, v + K_SCORING, allowed + K_SCORING)) != TPS_OK) return st;
    struct {
        int key;
        uint64_t *out;
    } nums[] = {{K_LAYERS, &b->layers}, {K_HIDDEN, &b->hidden},     {K_HEADS, &b->heads},
                {K_KVH, &b->kv_heads},  {K_HD, &b->head_dim},       {K_INTER, &b->intermediate},
                {K_EXPERTS, &b->experts}, {K_MOE_INTER, &b->moe_intermediate},
                {K_SHARED_INTER, &b->shared_intermediate}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
        if (v[nums[i].key] && (st = tps_lp_get_u64(c, v[nums[i].key], allowed[nums[i].key], nums[i].out)) != TPS_OK)
            return st;
    for (int r = 0; r < TPS_MROLE_COUNT; r++) /* keys named as tps_block_model_role_name says */
        if (v[K_MODEL0 + r] && (st = tps_lp_get_strdup(c, v[K_MODEL0 + r], allowed[K_MODEL0 + r], &b->model_role[r])) != TPS_OK)
            return st;
    if (v[K_EMBED_SCALE] && (st = tps_lp_get_bool(c, v[K_EMBED_SCALE], "embed_scale", &b->embed_scale)) != TPS_OK) return st;
    if (v[K_SWP] && (st = tps_lp_get_u64(c, v[K_SWP], "sliding_window_pattern", &b->sliding_window_pattern)) != TPS_OK)
        return st;
    if (v[K_LLAMA4] && (st = tps_lp_get_bool(c, v[K_LLAMA4], "llama4", &b->llama4.on)) != TPS_OK) return st;
    l->has_block = true;
    return TPS_OK;
}
