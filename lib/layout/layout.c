/* Layout files: YAML (libyaml document API) to struct tps_layout.
 *
 * Schema (also in docs/layouts.md, "Layout schema").  Every key below is the complete set:
 * an unknown key, a duplicate key, a value of the wrong type or an unknown enum value is an
 * error carrying file:line:column, so a typo never passes silently.
 *
 *   name: llama                      optional, free text
 *   description: "..."               optional, one line (tpshard layout --list shows it)
 *   architectures: [LlamaForCausalLM, MistralForCausalLM]
 *                                    optional, a name or a list: the Hugging Face classes
 *                                    (config.json "architectures") a preset serves, for
 *                                    auto-detection (lib/layout/layout_presets.c)
 *   aliases: [mistral, qwen2]        optional: other names --preset accepts (model_type
 *                                    spellings); names are letters, digits, _ - ., once each
 *   skip:                            optional: tensors that are not weights (non-persistent
 *     - match: GLOB                  buffers), left out before any rule is tried; one glob
 *       reason: not weights          per entry, a one-line reason, both required
 *   sizes:                           optional; positive integers, the first source of sizes
 *     hidden: 4096                   keys: hidden heads kv_heads head_dim intermediate
 *                                    vocab layers experts moe_intermediate (one routed
 *                                    expert's width) shared_intermediate (the shared
 *                                    experts' MLP), and for multi-head latent attention
 *                                    qk_nope_head_dim qk_rope_head_dim v_head_dim
 *   infer:                           optional; how to read a size from tensor shapes when
 *                                    neither sizes: nor config.json gave it.  One of:
 *     vocab: {tensor: GLOB, dim: 0}              shape[dim] of every tensor matching GLOB
 *                                                (they must agree); dim may be negative
 *     kv_heads: {tensor: GLOB, dim: 0, unit: head_dim}   shape[dim] / unit, exact
 *     layers: {count: GLOB}                      the number of tensors matching GLOB
 *     heads: {expr: hidden/head_dim}             from other sizes
 *   rules:                           ordered; the first rule whose glob matches wins
 *     - match: GLOB | [GLOB, ...]    '*' = any run inside one dot-separated component,
 *                                    '{a,b}' = either alternative (no nesting)
 *       split: replicate | column | row | dim
 *       dim: N                       required for `dim`; overrides the default otherwise.
 *                                    Defaults: column 0 (a PyTorch Linear [out, in] cuts
 *                                    its outputs; a 1-D tensor, i.e. a bias, cuts dim 0),
 *                                    row 1 (the inputs; `row` on a 1-D tensor without an
 *                                    explicit dim is an error: a row-parallel bias is added
 *                                    once after the all-reduce, so it is replicated).
 *                                    Negative N counts from the last dimension.
 *       unit: EXPR                   elements along dim that stay on one rank (default 1)
 *       size: EXPR                   expected length along dim (checked; default: any)
 *       segments:                    a fused tensor: its parts along dim, in order
 *         - {name: q, size: EXPR, unit: EXPR, may_replicate: BOOL}
 *       segments: {q: EXPR, k: EXPR, v: EXPR}      the same, shorthand (names and sizes)
 *       pad: true                    the length may be zero-padded to a multiple of T
 *                                    (vocabulary rows); one segment only
 *       kv_replicate: true           GQA/MQA: segments named k and v (or the single
 *                                    segment) may be replicated when T exceeds their units
 *       groups: EXPR                 the segments are one group's parts and repeat EXPR
 *                                    times along dim (Falcon's per-KV-group [q; k; v]); a
 *                                    rank holds whole groups, or a group's share (partition.h)
 *   default:                         optional rule without match: for unmatched tensors
 *     split: replicate               (without it an unmatched tensor is an error)
 *   block:                           optional; the verification pass's view of one layer
 *     kind: llama | gpt2 | neox | mixtral
 *     layer_prefix: "model.layers.{layer}."
 *     expert_prefix: "block_sparse_moe.experts.{expert}."    mixtral; expert roles
 *                                    (gate_proj, up_proj, down_proj) are relative to
 *                                    layer_prefix + expert_prefix
 *     roles: {ROLE: TEMPLATE, ...}   tensor names relative to the layer; roles:
 *                                    attn_norm attn_norm_bias q_proj q_bias k_proj k_bias
 *                                    v_proj v_bias qkv_proj qkv_bias o_proj o_bias mlp_norm
 *                                    mlp_norm_bias gate_proj up_proj gate_up_proj fc fc_bias
 *                                    down_proj down_bias router post_attn_norm
 *                                    post_mlp_norm shared_expert_gate router_bias q_norm
 *                                    k_norm sinks router_logit_bias experts_gate_up
 *                                    experts_gate_up_bias experts_down experts_down_bias
 *                                    (lib/layout/block.h; the experts_* roles hold every expert
 *                                    of a layer, GPT-OSS, and replace the per-expert MLP
 *                                    roles and expert_prefix).  A bias role may name a
 *                                    tensor a checkpoint lacks (Llama vs Qwen2 q/k/v bias);
 *                                    the verification pass treats it as absent.
 *                                    post_attn_norm / post_mlp_norm normalize a block's
 *                                    output before the residual add (Gemma 2, OLMo 2); with
 *                                    one, the stage's pre-norm (attn_norm / mlp_norm) may be
 *                                    left out: its input is then used as it is
 *     norm: rms | layer | rms_offset norm_eps: FLOAT   (rms_offset: Gemma's x/rms(x) * (1 + w))
 *     attention: mha | mla           mla: DeepSeek's multi-head latent attention (kind
 *                                    llama or mixtral), roles q_a_proj q_a_bias q_a_norm
 *                                    q_b_proj kv_a_proj kv_a_bias kv_a_norm kv_b_proj o_proj
 *                                    o_bias (q_proj instead of q_a/q_b without
 *                                    q_lora_rank; the q path a checkpoint lacks is absent);
 *                                    head widths from the sizes qk_nope_head_dim,
 *                                    qk_rope_head_dim, v_head_dim; RoPE interleaved unless
 *                                    config.json's rope_interleave is false
 *     act: silu | gelu_tanh | gelu_erf | swiglu_oai   (swiglu_oai: GPT-OSS's clamped gated form)
 *     rope: none | half | interleaved              rope_theta: FLOAT
 *     rotary_pct: FLOAT (0 < x <= 1) parallel_residual / conv1d / qkv_interleaved: BOOL
 *     qkv_grouped: BOOL              the fused qkv_proj is per KV group [q heads of the
 *                                    group; k; v] (Falcon; the rule cuts it with groups:)
 *     top_k: N                       and any size key above but vocab
 *   A block with a router role is a mixture of experts (any kind): its MLP roles are each
 *   expert's, after expert_prefix; optional keys:
 *     dense_prefix: "mlp."           a dense layer's MLP roles (the layers below)
 *     shared_prefix: "mlp.shared_expert."    the shared expert's MLP roles (one TP MLP;
 *                                    role shared_expert_gate scales it by sigmoid(x . w))
 *     scoring_func: softmax | sigmoid            topk_method: greedy |
 *                                    group_limited_greedy | noaux_tc
 *     norm_topk_prob: BOOL           routed_scaling_factor: FLOAT
 *     n_group / topk_group / first_k_dense_replace / moe_layer_freq /
 *     decoder_sparse_step: N         config.json's meanings (verify/math/moe_route.h); these and
 *                                    mlp_only_layers are read from config.json too
 *     embed / pos_embed / final_norm / final_norm_bias / lm_head: TENSOR   whole names of
 *                                    the tensors outside the layers (verify --whole-model);
 *                                    no lm_head tensor in the model: tied to embed
 *     embed_scale: BOOL              the embedding output times sqrt(hidden), rounded to the
 *                                    embedding's dtype as transformers' Gemma rounds it
 *     sliding_window_pattern: N      layer i attends within config.json's sliding_window
 *                                    unless (i + 1) % N == 0 (Gemma 2: 2); absent: none.
 *                                    config.json's layer_types, else its
 *                                    sliding_window_pattern, decide over it (Gemma 3)
 *     qk_norm: per_head | whole      what q_norm / k_norm (RMSNorm before RoPE) span: each
 *                                    head's head_dim (default; Qwen3) or the whole q and k
 *                                    projections (OLMo 2; verify all-reduces their sums)
 *   Block fields left out come from config.json (rms_norm_eps, layer_norm_eps(ilon),
 *   rope_theta, rotary_emb_base, rotary_pct, partial_rotary_factor, use_parallel_residual,
 *   hidden_act, activation_function, num_experts_per_tok, the routing keys above; and,
 *   config.json only, attn_logit_softcapping, final_logit_softcapping, query_pre_attn_scalar,
 *   sliding_window, rope_local_base_freq (Gemma 3's local layers: that RoPE base, no
 *   rope_scaling), layer_types), a multimodal config.json's text_config in place of the top
 *   level, then the model sizes, then the
 *   kind's defaults (llama: rms 1e-5 silu half 10000; gpt2: layer 1e-5 gelu_tanh none
 *   conv1d; neox: layer 1e-5 gelu_erf half 10000 rotary_pct 0.25 parallel_residual
 *   qkv_interleaved; mixtral: rms 1e-5 silu half 1e6 top_k 2 norm_topk_prob; routing:
 *   softmax greedy, scaling 1, every layer routed).
 *
 * EXPR: non-negative integers and size names with + - * / and parentheses, evaluated in
 * exact integer arithmetic (an inexact division or a negative result is an error).  A name
 * that is not a size is refused when the layout is parsed; a size that is still unknown
 * when a tensor needs it is an error naming the size and the rule's file:line:column.
 * Units and sizes are in elements along dim: an attention split uses unit head_dim and
 * segment sizes such as heads*head_dim.
 *
 * Quantized checkpoints (lib/quant/quant.h): no rule is written per format.  config.json's
 * quantization_config says which modules are quantized and how; the rule that matches a
 * quantized linear's logical name MODULE.weight cuts its weight, and each companion tensor
 * (weight_scale_inv, weight_scale, input_scale, output_scale; qweight, qzeros, scales,
 * g_idx for the integer formats) gets the partition that rule's generates through the
 * companion's dimension map (which dim of the companion is which dim of the weight, and
 * the ratio: block, group or pack factor) or is replicated where vLLM's parameter class
 * replicates it.  The weight's partition carries the quantization block, refusing a tp that
 * puts a rank boundary inside a block.  A rule whose glob names a companion's suffix
 * ("*.weight_scale_inv") is that companion's own rule and wins (hand-written layouts).
 *
 * Vocabulary-parallel embeddings: presets cut the embedding and the output projection along
 * dim 0 (vocabulary rows) with pad: true, as Megatron and vLLM cut them, so neither needs the
 * vocabulary to divide T; the padding is minimal (to a multiple of T, as TensorRT-LLM pads,
 * where Megatron and vLLM pad further), and the original length stays in the global shape. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "../base/buf.h"
#include "../base/checked.h"
#include "../quant/quant.h"
#include "layout_int.h"
#include "layout_parse.h"

/* Layout files are hand-written text; anything near this is not one. */
#define LAYOUT_MAX_BYTES (16u << 20)

/* A mapping whose keys are size names (sizes:, infer:): vals[i] is size i's value or NULL. */
static tps_status size_fields(pctx *c, const yaml_node_t *n, const char *what, yaml_node_t *vals[TPS_NSIZES])
{
    const char *allowed[TPS_NSIZES + 1];
    for (int i = 0; i < TPS_NSIZES; i++) allowed[i] = tps_size_names[i];
    allowed[TPS_NSIZES] = NULL;
    return tps_lp_map_fields(c, n, what, allowed, vals);
}

static tps_status parse_sizes(pctx *c, const yaml_node_t *n)
{
    yaml_node_t *vals[TPS_NSIZES];
    tps_status st = size_fields(c, n, "sizes", vals);
    for (int i = 0; st == TPS_OK && i < TPS_NSIZES; i++)
        if (vals[i]) st = tps_lp_get_u64(c, vals[i], tps_size_names[i], tps_size_slot(&c->l->sizes, i));
    return st;
}

static tps_status parse_hint(pctx *c, const yaml_node_t *n, tps_hint *h, const char *size)
{
    static const char *const allowed[] = {"tensor", "dim", "unit", "count", "expr", NULL};
    yaml_node_t *v[5];
    char what[64];
    snprintf(what, sizeof what, "infer.%s", size);
    tps_status st = tps_lp_map_fields(c, n, what, allowed, v);
    if (st != TPS_OK) return st;
    h->at = tps_lp_mark_of(n);
    int forms = (v[0] != NULL) + (v[3] != NULL) + (v[4] != NULL);
    if (forms != 1) return tps_lp_fail_at(c, n, "%s needs exactly one of tensor, count or expr", what);
    if (v[0]) {
        if (!v[1]) return tps_lp_fail_at(c, n, "%s: tensor needs dim", what);
        h->kind = TPS_HINT_TENSOR;
        st = tps_lp_get_glob(c, v[0], "tensor", &h->glob);
        if (st == TPS_OK) st = tps_lp_get_dim(c, v[1], "dim", &h->dim);
        if (st == TPS_OK && v[2]) st = tps_lp_get_expr(c, v[2], "unit", &h->unit);
        return st;
    }
    if (v[1] || v[2]) return tps_lp_fail_at(c, v[1] ? v[1] : v[2], "%s: dim and unit go with tensor only", what);
    if (v[3]) {
        h->kind = TPS_HINT_COUNT;
        return tps_lp_get_glob(c, v[3], "count", &h->glob);
    }
    h->kind = TPS_HINT_EXPR;
    return tps_lp_get_expr(c, v[4], "expr", &h->expr);
}

static tps_status parse_infer(pctx *c, const yaml_node_t *n)
{
    yaml_node_t *vals[TPS_NSIZES];
    tps_status st = size_fields(c, n, "infer", vals);
    for (int i = 0; st == TPS_OK && i < TPS_NSIZES; i++)
        if (vals[i]) st = parse_hint(c, vals[i], &c->l->hints[i], tps_size_names[i]);
    return st;
}

static tps_status segment_name(pctx *c, const yaml_node_t *n, tps_lsegment *seg)
{
    const char *s;
    tps_status st = tps_lp_scalar(c, n, "segment name", &s);
    if (st != TPS_OK) return st;
    if (s[0] == '\0' || strlen(s) >= sizeof seg->name)
        return tps_lp_fail_at(c, n, "segment name '%s' must have 1 to %zu characters", s, sizeof seg->name - 1);
    memcpy(seg->name, s, strlen(s) + 1);
    return TPS_OK;
}

static tps_status parse_segments(pctx *c, const yaml_node_t *n, tps_rule *r)
{
    tps_status st = TPS_OK;
    if (n->type == YAML_MAPPING_NODE) {
        if ((st = tps_lp_no_duplicate_keys(c, n, "segments")) != TPS_OK) return st;
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
            if (r->nseg == TPS_MAX_SEGMENTS)
                return tps_lp_fail_at(c, n, "more than %d segments", TPS_MAX_SEGMENTS);
            tps_lsegment *seg = &r->seg[r->nseg++];
            if ((st = segment_name(c, tps_lp_node(c, p->key), seg)) != TPS_OK) return st;
            if ((st = tps_lp_get_expr(c, tps_lp_node(c, p->value), "segment size", &seg->size)) != TPS_OK) return st;
        }
    } else {
        if ((st = tps_lp_want_type(c, n, YAML_SEQUENCE_NODE, "segments")) != TPS_OK) return st;
        static const char *const allowed[] = {"name", "size", "unit", "may_replicate", NULL};
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
            if (r->nseg == TPS_MAX_SEGMENTS)
                return tps_lp_fail_at(c, n, "more than %d segments", TPS_MAX_SEGMENTS);
            yaml_node_t *sn = tps_lp_node(c, *it), *v[4];
            tps_lsegment *seg = &r->seg[r->nseg++];
            if ((st = tps_lp_map_fields(c, sn, "segment", allowed, v)) != TPS_OK) return st;
            if (!v[0] || !v[1]) return tps_lp_fail_at(c, sn, "a segment needs name and size");
            if ((st = segment_name(c, v[0], seg)) != TPS_OK) return st;
            if ((st = tps_lp_get_expr(c, v[1], "segment size", &seg->size)) != TPS_OK) return st;
            if (v[2] && (st = tps_lp_get_expr(c, v[2], "segment unit", &seg->unit)) != TPS_OK) return st;
            if (v[3] && (st = tps_lp_get_bool(c, v[3], "may_replicate", &seg->may_replicate)) != TPS_OK) return st;
            for (int j = 0; j + 1 < r->nseg; j++)
                if (strcmp(r->seg[j].name, seg->name) == 0)
                    return tps_lp_fail_at(c, v[0], "duplicate segment name '%s'", seg->name);
        }
    }
    if (r->nseg == 0) return tps_lp_fail_at(c, n, "segments is empty");
    return TPS_OK;
}

static tps_status rule_label(pctx *c, tps_rule *r)
{
    tps_buf b = TPS_BUF_INIT;
    if (r->is_default) tps_buf_puts(&b, "default");
    for (size_t i = 0; i < r->nglobs; i++) tps_buf_printf(&b, "%s%s", i ? ", " : "", r->globs[i]);
    tps_buf_printf(&b, " (%s:%zu:%zu)", c->file, r->at.line, r->at.col);
    const char *s = tps_buf_cstr(&b);
    r->label = s ? strdup(s) : NULL;
    tps_buf_release(&b);
    return r->label ? TPS_OK : tps_fail_oom(c->err, "reading a layout");
}

static tps_status parse_rule(pctx *c, const yaml_node_t *n, tps_rule *r, bool is_default)
{
    static const char *const allowed[] = {"match", "split", "dim", "unit", "size", "segments", "pad", "kv_replicate",
                                          "groups", NULL};
    enum { K_MATCH, K_SPLIT, K_DIM, K_UNIT, K_SIZE, K_SEGMENTS, K_PAD, K_KV, K_GROUPS };
    static const char *const split_names[] = {"replicate", "column", "row", "dim"};
    yaml_node_t *v[9];
    const char *what = is_default ? "default" : "rule";
    tps_status st = tps_lp_map_fields(c, n, what, allowed, v);
    if (st != TPS_OK) return st;
    r->at = tps_lp_mark_of(n);
    r->is_default = is_default;
    if (is_default && v[K_MATCH]) return tps_lp_fail_at(c, v[K_MATCH], "default applies to unmatched tensors; it takes no match");
    if (!is_default && !v[K_MATCH]) return tps_lp_fail_at(c, n, "rule needs match");
    if (!v[K_SPLIT]) return tps_lp_fail_at(c, n, "%s needs split (replicate, column, row or dim)", what);
    if (v[K_MATCH]) {
        const yaml_node_t *m = v[K_MATCH];
        if (m->type == YAML_SEQUENCE_NODE) {
            size_t count = (size_t)(m->data.sequence.items.top - m->data.sequence.items.start);
            if (count == 0) return tps_lp_fail_at(c, m, "match is an empty list");
            r->globs = calloc(count, sizeof *r->globs);
            if (!r->globs) return tps_fail_oom(c->err, "reading a layout");
            for (yaml_node_item_t *it = m->data.sequence.items.start; it < m->data.sequence.items.top; it++)
                if ((st = tps_lp_get_glob(c, tps_lp_node(c, *it), "match", &r->globs[r->nglobs++])) != TPS_OK) return st;
        } else {
            r->globs = calloc(1, sizeof *r->globs);
            if (!r->globs) return tps_fail_oom(c->err, "reading a layout");
            r->nglobs = 1;
            if ((st = tps_lp_get_glob(c, m, "match", &r->globs[0])) != TPS_OK) return st;
        }
    }
    const char *s;
    if ((st = tps_lp_scalar(c, v[K_SPLIT], "split", &s)) != TPS_OK) return st;
    int kind = -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(s, split_names[i]) == 0) kind = i;
    if (kind < 0) return tps_lp_fail_at(c, v[K_SPLIT], "split '%s' is not one of replicate, column, row, dim", s);
    r->split = (tps_split_kind)kind;
    if (r->split == TPS_SPLIT_REPLICATE) {
        for (int k = K_DIM; k <= K_GROUPS; k++)
            if (v[k]) return tps_lp_fail_at(c, v[k], "a replicated tensor takes no %s", allowed[k]);
        return rule_label(c, r);
    }
    if (r->split == TPS_SPLIT_DIM && !v[K_DIM]) return tps_lp_fail_at(c, v[K_SPLIT], "split: dim needs dim: N");
    if (v[K_DIM]) {
        r->has_dim = true;
        if ((st = tps_lp_get_dim(c, v[K_DIM], "dim", &r->dim)) != TPS_OK) return st;
    }
    if (v[K_UNIT] && (st = tps_lp_get_expr(c, v[K_UNIT], "unit", &r->unit)) != TPS_OK) return st;
    if (v[K_SIZE] && v[K_SEGMENTS]) return tps_lp_fail_at(c, v[K_SIZE], "give size or segments, not both");
    if (v[K_SIZE] && (st = tps_lp_get_expr(c, v[K_SIZE], "size", &r->size)) != TPS_OK) return st;
    if (v[K_SEGMENTS] && (st = parse_segments(c, v[K_SEGMENTS], r)) != TPS_OK) return st;
    if (v[K_PAD] && (st = tps_lp_get_bool(c, v[K_PAD], "pad", &r->pad)) != TPS_OK) return st;
    if (r->pad && r->nseg > 1) return tps_lp_fail_at(c, v[K_PAD], "pad needs a single segment (this rule has %d)", r->nseg);
    if (v[K_KV] && (st = tps_lp_get_bool(c, v[K_KV], "kv_replicate", &r->kv_replicate)) != TPS_OK) return st;
    if (r->kv_replicate && r->nseg > 0) {
        bool found = false;
        for (int i = 0; i < r->nseg; i++) {
            bool kv = strcmp(r->seg[i].name, "k") == 0 || strcmp(r->seg[i].name, "v") == 0;
            r->seg[i].may_replicate |= kv;
            found |= kv;
        }
        if (!found) return tps_lp_fail_at(c, v[K_KV], "kv_replicate needs a segment named k or v");
    }
    if (v[K_GROUPS]) {
        if (!r->nseg) return tps_lp_fail_at(c, v[K_GROUPS], "groups needs segments: the parts of one group, in order");
        if (r->pad) return tps_lp_fail_at(c, v[K_GROUPS], "a grouped tensor cannot be padded");
        if ((st = tps_lp_get_expr(c, v[K_GROUPS], "groups", &r->groups)) != TPS_OK) return st;
    }
    return rule_label(c, r);
}

static tps_status parse_rules(pctx *c, const yaml_node_t *rules, const yaml_node_t *def)
{
    size_t n = 0;
    tps_status st;
    if (rules) {
        if ((st = tps_lp_want_type(c, rules, YAML_SEQUENCE_NODE, "rules")) != TPS_OK) return st;
        n = (size_t)(rules->data.sequence.items.top - rules->data.sequence.items.start);
    }
    size_t total = n + (def != NULL);
    if (total == 0) return tps_fail(c->err, TPS_EINVALID, "%s: the layout has no rules and no default", c->file);
    c->l->rules = calloc(total, sizeof *c->l->rules);
    if (!c->l->rules) return tps_fail_oom(c->err, "reading a layout");
    for (size_t i = 0; i < n; i++) {
        c->l->nrules++;
        st = parse_rule(c, tps_lp_node(c, rules->data.sequence.items.start[i]), &c->l->rules[i], false);
        if (st != TPS_OK) return st;
    }
    if (def) {
        c->l->nrules++;
        return parse_rule(c, def, &c->l->rules[n], true);
    }
    return TPS_OK;
}

/* A list of names (architectures:, aliases:): a name alone is a one-element list.  Names
 * are identifiers (letters, digits, '_', '-', '.'), each listed once: they are matched
 * against config.json values and --preset, and printed in lists. */
static tps_status parse_names(pctx *c, const yaml_node_t *n, const char *what, char ***out, size_t *count)
{
    const yaml_node_item_t *first = NULL, *last = NULL;
    if (n->type == YAML_SEQUENCE_NODE) {
        first = n->data.sequence.items.start;
        last = n->data.sequence.items.top;
        if (first == last) return tps_lp_fail_at(c, n, "%s is an empty list", what);
    } else if (n->type != YAML_SCALAR_NODE) {
        return tps_lp_fail_at(c, n, "%s must be a name or a list of names, not %s", what, tps_lp_node_type_name(n));
    }
    size_t total = first ? (size_t)(last - first) : 1;
    if (!(*out = calloc(total, sizeof **out))) return tps_fail_oom(c->err, "reading a layout");
    for (size_t i = 0; i < total; i++) {
        yaml_node_t *item = first ? tps_lp_node(c, first[i]) : (yaml_node_t *)n;
        const char *s;
        tps_status st = tps_lp_scalar(c, item, what, &s);
        if (st != TPS_OK) return st;
        if (!s[0] || strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.") != strlen(s))
            return tps_lp_fail_at(c, item, "%s: '%s' is not a name (letters, digits, '_', '-', '.')", what, s);
        for (size_t j = 0; j < *count; j++)
            if (strcmp((*out)[j], s) == 0) return tps_lp_fail_at(c, item, "%s lists '%s' twice", what, s);
        if (!((*out)[i] = strdup(s))) return tps_fail_oom(c->err, "reading a layout");
        *count = i + 1;
    }
    return TPS_OK;
}

/* skip: a list of {match: GLOB, reason: TEXT}.  One glob per entry: the plan prints one line
 * per entry, and a manifest records each with its count. */
static tps_status parse_skip(pctx *c, const yaml_node_t *n)
{
    tps_status st = tps_lp_want_type(c, n, YAML_SEQUENCE_NODE, "skip");
    if (st != TPS_OK) return st;
    size_t total = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    if (total == 0) return tps_lp_fail_at(c, n, "skip is an empty list");
    tps_layout *l = c->l;
    if (!(l->skips = calloc(total, sizeof *l->skips))) return tps_fail_oom(c->err, "reading a layout");
    static const char *const allowed[] = {"match", "reason", NULL};
    for (size_t i = 0; i < total; i++) {
        yaml_node_t *e = tps_lp_node(c, n->data.sequence.items.start[i]), *v[2];
        tps_skip *sk = &l->skips[l->nskips++];
        if ((st = tps_lp_map_fields(c, e, "a skip entry", allowed, v)) != TPS_OK) return st;
        sk->at = tps_lp_mark_of(e);
        if (!v[0] || !v[1]) return tps_lp_fail_at(c, e, "a skip entry needs match (one glob) and reason");
        if ((st = tps_lp_get_glob(c, v[0], "match", &sk->glob)) != TPS_OK) return st;
        if ((st = tps_lp_get_strdup(c, v[1], "reason", &sk->reason)) != TPS_OK) return st;
        if (!sk->reason[0] || strpbrk(sk->reason, "\r\n"))
            return tps_lp_fail_at(c, v[1], "reason must be one non-empty line");
    }
    return TPS_OK;
}

static tps_status parse_root(pctx *c, const yaml_node_t *root)
{
    /* targets: is read by lib/targets/target_schema.c when a serving engine's layout is asked for. */
    static const char *const allowed[] = {"name",  "description", "architectures", "aliases", "sizes", "infer",
                                          "skip", "rules",       "default",       "block",   "targets", NULL};
    enum { K_NAME, K_DESC, K_ARCH, K_ALIAS, K_SIZES, K_INFER, K_SKIP, K_RULES, K_DEFAULT, K_BLOCK, K_TARGETS, K_COUNT };
    yaml_node_t *v[K_COUNT];
    tps_layout *l = c->l;
    tps_status st = tps_lp_map_fields(c, root, "the layout", allowed, v);
    if (st != TPS_OK) return st;
    if (v[K_NAME] && (st = tps_lp_get_strdup(c, v[K_NAME], "name", &l->name)) != TPS_OK) return st;
    if (v[K_DESC] && (st = tps_lp_get_strdup(c, v[K_DESC], "description", &l->description)) != TPS_OK) return st;
    if (v[K_ARCH] &&
        (st = parse_names(c, v[K_ARCH], "architectures", &l->architectures, &l->narchitectures)) != TPS_OK)
        return st;
    if (v[K_ALIAS] && (st = parse_names(c, v[K_ALIAS], "aliases", &l->aliases, &l->naliases)) != TPS_OK) return st;
    if (v[K_SIZES] && (st = parse_sizes(c, v[K_SIZES])) != TPS_OK) return st;
    if (v[K_INFER] && (st = parse_infer(c, v[K_INFER])) != TPS_OK) return st;
    if (v[K_SKIP] && (st = parse_skip(c, v[K_SKIP])) != TPS_OK) return st;
    if ((st = parse_rules(c, v[K_RULES], v[K_DEFAULT])) != TPS_OK) return st;
    if (v[K_BLOCK] && (st = tps_lp_parse_block(c, v[K_BLOCK])) != TPS_OK) return st;
    return TPS_OK;
}

static tps_status yaml_error(const yaml_parser_t *p, const char *file, tps_error *err)
{
    if (p->error == YAML_MEMORY_ERROR) return tps_fail_oom(err, "parsing YAML");
    const char *problem = p->problem ? p->problem : "malformed YAML";
    if (p->context)
        return tps_fail(err, TPS_EINVALID, "%s:%zu:%zu: YAML syntax error: %s %s (at %zu:%zu)", file,
                        p->problem_mark.line + 1, p->problem_mark.column + 1, problem, p->context,
                        p->context_mark.line + 1, p->context_mark.column + 1);
    return tps_fail(err, TPS_EINVALID, "%s:%zu:%zu: YAML syntax error: %s", file, p->problem_mark.line + 1,
                    p->problem_mark.column + 1, problem);
}

/* libyaml's scanner takes time quadratic in the nesting depth (20,000 '[' cost seconds), so
 * a first pass over the events refuses anything deeper than a layout can use, stopping at
 * the first event past the limit. */
#define LAYOUT_MAX_DEPTH 32
static tps_status check_nesting(const char *text, size_t len, const char *name, tps_error *err)
{
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) return tps_fail_oom(err, "parsing YAML");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    tps_status st = TPS_OK;
    int depth = 0;
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) break; /* the loader reports the syntax error with its position */
        yaml_event_type_t t = ev.type;
        if (t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT) depth++;
        else if (t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT) depth--;
        if (depth > LAYOUT_MAX_DEPTH)
            st = tps_fail(err, TPS_EINVALID, "%s:%zu:%zu: nested more than %d levels deep", name,
                          ev.start_mark.line + 1, ev.start_mark.column + 1, LAYOUT_MAX_DEPTH);
        yaml_event_delete(&ev);
        if (st || t == YAML_STREAM_END_EVENT) break;
    }
    yaml_parser_delete(&p);
    return st;
}

tps_status tps_layout_parse(const char *text, size_t len, const char *name, tps_layout **out, tps_error *err)
{
    *out = NULL;
    tps_status st = TPS_OK;
    yaml_parser_t parser;
    yaml_document_t doc, extra;
    bool parser_ok = false, doc_ok = false, extra_ok = false;
    tps_layout *l = calloc(1, sizeof *l);
    if (!l) return tps_fail_oom(err, "reading a layout");
    l->text = malloc(len + 1);
    if (!l->text) {
        st = tps_fail_oom(err, "reading a layout");
        goto cleanup;
    }
    memcpy(l->text, text, len);
    l->text[len] = '\0';
    l->source = strdup(name);
    if (!l->source) {
        st = tps_fail_oom(err, "reading a layout");
        goto cleanup;
    }
    if (memchr(text, '\0', len)) {
        st = tps_fail(err, TPS_EINVALID, "%s: the layout contains a NUL byte", name);
        goto cleanup;
    }
    TPS_CHECK(check_nesting(l->text, len, name, err));
    if (!yaml_parser_initialize(&parser)) {
        st = tps_fail_oom(err, "parsing YAML");
        goto cleanup;
    }
    parser_ok = true;
    yaml_parser_set_input_string(&parser, (const unsigned char *)l->text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        st = yaml_error(&parser, name, err);
        goto cleanup;
    }
    doc_ok = true;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root) {
        st = tps_fail(err, TPS_EINVALID, "%s: the layout is empty", name);
        goto cleanup;
    }
    if (!yaml_parser_load(&parser, &extra)) {
        st = yaml_error(&parser, name, err);
        goto cleanup;
    }
    extra_ok = true;
    yaml_node_t *second = yaml_document_get_root_node(&extra);
    if (second) {
        st = tps_fail(err, TPS_EINVALID, "%s:%zu:%zu: a layout is one YAML document; a second one starts here", name,
                      second->start_mark.line + 1, second->start_mark.column + 1);
        goto cleanup;
    }
    pctx c = {&doc, name, err, l};
    TPS_CHECK(parse_root(&c, root));
    tps_layout_sync_block(l);
    *out = l;
    l = NULL;
cleanup:
    if (extra_ok) yaml_document_delete(&extra);
    if (doc_ok) yaml_document_delete(&doc);
    if (parser_ok) yaml_parser_delete(&parser);
    tps_layout_free(l);
    return st;
}

tps_status tps_layout_load_file(const char *path, tps_layout **out, tps_error *err)
{
    *out = NULL;
    tps_status st = TPS_OK;
    tps_buf b = TPS_BUF_INIT;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        return tps_fail(err, e == ENOENT ? TPS_EINVALID : TPS_EIO, "%s: cannot open layout: %s", path, strerror(e));
    }
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (b.len + n > LAYOUT_MAX_BYTES) {
            st = tps_fail(err, TPS_EINVALID, "%s: larger than %u bytes; not a layout file", path, LAYOUT_MAX_BYTES);
            goto cleanup;
        }
        tps_buf_append(&b, chunk, n);
    }
    if (ferror(f)) {
        st = tps_fail_errno(err, errno, "%s: read failed", path);
        goto cleanup;
    }
    if (b.oom) {
        st = tps_fail_oom(err, "reading a layout");
        goto cleanup;
    }
    st = tps_layout_parse(b.data ? b.data : "", b.len, path, out, err);
cleanup:
    fclose(f);
    tps_buf_release(&b);
    return st;
}

void tps_layout_free(tps_layout *l)
{
    if (!l) return;
    tps_quant_free(l->quant);
    for (int i = 0; i < TPS_NSIZES; i++) {
        free(l->hints[i].glob);
        tps_expr_release(&l->hints[i].unit);
        tps_expr_release(&l->hints[i].expr);
    }
    for (size_t i = 0; i < l->nrules; i++) {
        tps_rule *r = &l->rules[i];
        for (size_t j = 0; j < r->nglobs; j++) free(r->globs[j]);
        free(r->globs);
        tps_expr_release(&r->unit);
        tps_expr_release(&r->size);
        tps_expr_release(&r->groups);
        for (int j = 0; j < r->nseg; j++) {
            tps_expr_release(&r->seg[j].size);
            tps_expr_release(&r->seg[j].unit);
        }
        free(r->label);
    }
    free(l->rules);
    for (size_t i = 0; i < l->narchitectures; i++) free(l->architectures[i]);
    free(l->architectures);
    for (size_t i = 0; i < l->naliases; i++) free(l->aliases[i]);
    free(l->aliases);
    for (size_t i = 0; i < l->nskips; i++) {
        free(l->skips[i].glob);
        free(l->skips[i].reason);
    }
    free(l->skips);
    free(l->block_raw.layer_prefix);
    free(l->block_raw.expert_prefix);
    free(l->block_raw.dense_prefix);
    free(l->block_raw.shared_prefix);
    for (int i = 0; i < TPS_ROLE_COUNT; i++) free(l->block_raw.role[i]);
    for (int i = 0; i < TPS_MROLE_COUNT; i++) free(l->block_raw.model_role[i]);
    free(l->cfg.layer_types);
    free(l->name);
    free(l->description);
    free(l->source);
    free(l->text);
    free(l);
}
