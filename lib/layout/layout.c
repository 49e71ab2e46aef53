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
 *     decoder_sparse_step: N         config.json's meanings (verify/moe_route.h); these and
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
 * Quantized checkpoints (lib/layout/quant.h): no rule is written per format.  config.json's
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
#include "layout_int.h"
#include "presets.h"
#include "quant.h"

/* Layout files are hand-written text; anything near this is not one. */
#define LAYOUT_MAX_BYTES (16u << 20)

typedef struct pctx {
    yaml_document_t *doc;
    const char *file;
    tps_error *err;
    tps_layout *l;
} pctx;

static tps_mark mark_of(const yaml_node_t *n)
{
    tps_mark m = {n->start_mark.line + 1, n->start_mark.column + 1};
    return m;
}

static tps_status fail_at(pctx *c, const yaml_node_t *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static tps_status fail_at(pctx *c, const yaml_node_t *n, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tps_mark m = mark_of(n);
    return tps_fail(c->err, TPS_EINVALID, "%s:%zu:%zu: %s", c->file, m.line, m.col, msg);
}

static yaml_node_t *node(pctx *c, int id) { return yaml_document_get_node(c->doc, id); }

static const char *node_type_name(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_SCALAR_NODE: return "a scalar";
    case YAML_SEQUENCE_NODE: return "a list";
    case YAML_MAPPING_NODE: return "a mapping";
    default: return "nothing";
    }
}

static tps_status want_type(pctx *c, const yaml_node_t *n, yaml_node_type_t t, const char *what)
{
    if (n->type == t) return TPS_OK;
    const char *want = t == YAML_SCALAR_NODE ? "a scalar" : t == YAML_SEQUENCE_NODE ? "a list" : "a mapping";
    return fail_at(c, n, "%s must be %s, not %s", what, want, node_type_name(n));
}

/* The scalar's text; refuses embedded NUL bytes (they would truncate names silently). */
static tps_status scalar(pctx *c, const yaml_node_t *n, const char *what, const char **out)
{
    tps_status st = want_type(c, n, YAML_SCALAR_NODE, what);
    if (st != TPS_OK) return st;
    const char *s = (const char *)n->data.scalar.value;
    if (strlen(s) != n->data.scalar.length) return fail_at(c, n, "%s contains a NUL byte", what);
    *out = s;
    return TPS_OK;
}

/* Numbers and booleans must be plain scalars: "8" in quotes is a string, and a layout that
 * says so is more likely wrong than meant. */
static tps_status plain(pctx *c, const yaml_node_t *n, const char *what, const char *type, const char **out)
{
    tps_status st = scalar(c, n, what, out);
    if (st != TPS_OK) return st;
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return fail_at(c, n, "%s must be %s, not a quoted string", what, type);
    return TPS_OK;
}

static tps_status get_u64(pctx *c, const yaml_node_t *n, const char *what, uint64_t *out)
{
    const char *s;
    tps_status st = plain(c, n, what, "a positive integer", &s);
    if (st != TPS_OK) return st;
    uint64_t v = 0;
    bool ok = s[0] != '\0';
    for (const char *p = s; ok && *p; p++)
        ok = *p >= '0' && *p <= '9' && tps_mul_u64(v, 10, &v) && tps_add_u64(v, (uint64_t)(*p - '0'), &v);
    if (!ok || v == 0) return fail_at(c, n, "%s must be a positive integer, not '%s'", what, s);
    *out = v;
    return TPS_OK;
}

static tps_status get_dim(pctx *c, const yaml_node_t *n, const char *what, int *out)
{
    const char *s;
    tps_status st = plain(c, n, what, "an integer", &s);
    if (st != TPS_OK) return st;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < -TPS_MAX_DIMS || v >= TPS_MAX_DIMS)
        return fail_at(c, n, "%s must be an integer from %d to %d, not '%s'", what, -TPS_MAX_DIMS, TPS_MAX_DIMS - 1, s);
    *out = (int)v;
    return TPS_OK;
}

static tps_status get_bool(pctx *c, const yaml_node_t *n, const char *what, bool *out)
{
    const char *s;
    tps_status st = plain(c, n, what, "true or false", &s);
    if (st != TPS_OK) return st;
    if (strcmp(s, "true") == 0) *out = true;
    else if (strcmp(s, "false") == 0) *out = false;
    else return fail_at(c, n, "%s must be true or false, not '%s'", what, s);
    return TPS_OK;
}

static tps_status get_double(pctx *c, const yaml_node_t *n, const char *what, double lo, double hi, double *out)
{
    const char *s;
    tps_status st = plain(c, n, what, "a number", &s);
    if (st != TPS_OK) return st;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v > lo && v <= hi))
        return fail_at(c, n, "%s must be a number in (%g, %g], not '%s'", what, lo, hi, s);
    *out = v;
    return TPS_OK;
}

static tps_status get_strdup(pctx *c, const yaml_node_t *n, const char *what, char **out)
{
    const char *s;
    tps_status st = scalar(c, n, what, &s);
    if (st != TPS_OK) return st;
    free(*out);
    *out = strdup(s);
    return *out ? TPS_OK : tps_fail_oom(c->err, "reading a layout");
}

static tps_status get_enum(pctx *c, const yaml_node_t *n, const char *what, int (*lookup)(const char *),
                           const char *choices, int *out)
{
    const char *s;
    tps_status st = scalar(c, n, what, &s);
    if (st != TPS_OK) return st;
    int v = lookup(s);
    if (v < 0) return fail_at(c, n, "%s '%s' is not one of %s", what, s, choices);
    *out = v;
    return TPS_OK;
}

static tps_status get_expr(pctx *c, const yaml_node_t *n, const char *what, tps_expr *out)
{
    const char *s;
    tps_status st = scalar(c, n, what, &s);
    if (st != TPS_OK) return st;
    tps_mark at = mark_of(n);
    if (n->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
        n->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE)
        at.col++;
    size_t pos;
    const char *msg;
    tps_expr_release(out);
    if (!tps_expr_compile(s, out, &pos, &msg)) {
        /* Name the offending word: "unknown size 'hed'" reads better than a column alone. */
        size_t wlen = strspn(s + pos, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
        return tps_fail(c->err, TPS_EINVALID, "%s:%zu:%zu: %s '%s': %s%s%.*s%s", c->file, at.line, at.col + pos, what,
                        s, msg, wlen ? " at '" : "", (int)wlen, s + pos, wlen ? "'" : "");
    }
    out->at = at;
    return TPS_OK;
}

static tps_status get_glob(pctx *c, const yaml_node_t *n, const char *what, char **out)
{
    const char *s;
    tps_status st = scalar(c, n, what, &s);
    if (st != TPS_OK) return st;
    size_t pos;
    const char *msg;
    if (!tps_glob_valid(s, &pos, &msg)) {
        tps_mark at = mark_of(n);
        if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) at.col++;
        return tps_fail(c->err, TPS_EINVALID, "%s:%zu:%zu: %s '%s': %s", c->file, at.line, at.col + pos, what, s, msg);
    }
    *out = strdup(s);
    return *out ? TPS_OK : tps_fail_oom(c->err, "reading a layout");
}

/* Walks a mapping whose keys must come from allowed (NULL-terminated); vals[i] receives the
 * value of allowed[i] (NULL when absent).  Unknown and duplicate keys are errors. */
static tps_status map_fields(pctx *c, const yaml_node_t *map, const char *what, const char *const *allowed,
                             yaml_node_t **vals)
{
    tps_status st = want_type(c, map, YAML_MAPPING_NODE, what);
    if (st != TPS_OK) return st;
    size_t nallowed = 0;
    while (allowed[nallowed]) vals[nallowed++] = NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(c, p->key);
        const char *key;
        if ((st = scalar(c, k, "a key", &key)) != TPS_OK) return st;
        size_t i = 0;
        while (i < nallowed && strcmp(allowed[i], key) != 0) i++;
        if (i == nallowed) {
            tps_buf b = TPS_BUF_INIT;
            for (size_t j = 0; j < nallowed; j++) tps_buf_printf(&b, "%s%s", j ? ", " : "", allowed[j]);
            const char *list = tps_buf_cstr(&b);
            st = fail_at(c, k, "unknown key '%s' in %s (expected one of: %s)", key, what, list ? list : "?");
            tps_buf_release(&b);
            return st;
        }
        if (vals[i]) return fail_at(c, k, "duplicate key '%s' in %s", key, what);
        vals[i] = node(c, p->value);
    }
    return TPS_OK;
}

/* Checks a free-key mapping (segment shorthand) for duplicate keys. */
static tps_status no_duplicate_keys(pctx *c, const yaml_node_t *map, const char *what)
{
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(c, p->key);
        const char *key;
        tps_status st = scalar(c, k, "a key", &key);
        if (st != TPS_OK) return st;
        for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
            const yaml_node_t *kq = node(c, q->key);
            if (strcmp((const char *)kq->data.scalar.value, key) == 0)
                return fail_at(c, k, "duplicate key '%s' in %s", key, what);
        }
    }
    return TPS_OK;
}

/* A mapping whose keys are size names (sizes:, infer:): vals[i] is size i's value or NULL. */
static tps_status size_fields(pctx *c, const yaml_node_t *n, const char *what, yaml_node_t *vals[TPS_NSIZES])
{
    const char *allowed[TPS_NSIZES + 1];
    for (int i = 0; i < TPS_NSIZES; i++) allowed[i] = tps_size_names[i];
    allowed[TPS_NSIZES] = NULL;
    return map_fields(c, n, what, allowed, vals);
}

static tps_status parse_sizes(pctx *c, const yaml_node_t *n)
{
    yaml_node_t *vals[TPS_NSIZES];
    tps_status st = size_fields(c, n, "sizes", vals);
    for (int i = 0; st == TPS_OK && i < TPS_NSIZES; i++)
        if (vals[i]) st = get_u64(c, vals[i], tps_size_names[i], tps_size_slot(&c->l->sizes, i));
    return st;
}

static tps_status parse_hint(pctx *c, const yaml_node_t *n, tps_hint *h, const char *size)
{
    static const char *const allowed[] = {"tensor", "dim", "unit", "count", "expr", NULL};
    yaml_node_t *v[5];
    char what[64];
    snprintf(what, sizeof what, "infer.%s", size);
    tps_status st = map_fields(c, n, what, allowed, v);
    if (st != TPS_OK) return st;
    h->at = mark_of(n);
    int forms = (v[0] != NULL) + (v[3] != NULL) + (v[4] != NULL);
    if (forms != 1) return fail_at(c, n, "%s needs exactly one of tensor, count or expr", what);
    if (v[0]) {
        if (!v[1]) return fail_at(c, n, "%s: tensor needs dim", what);
        h->kind = TPS_HINT_TENSOR;
        st = get_glob(c, v[0], "tensor", &h->glob);
        if (st == TPS_OK) st = get_dim(c, v[1], "dim", &h->dim);
        if (st == TPS_OK && v[2]) st = get_expr(c, v[2], "unit", &h->unit);
        return st;
    }
    if (v[1] || v[2]) return fail_at(c, v[1] ? v[1] : v[2], "%s: dim and unit go with tensor only", what);
    if (v[3]) {
        h->kind = TPS_HINT_COUNT;
        return get_glob(c, v[3], "count", &h->glob);
    }
    h->kind = TPS_HINT_EXPR;
    return get_expr(c, v[4], "expr", &h->expr);
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
    tps_status st = scalar(c, n, "segment name", &s);
    if (st != TPS_OK) return st;
    if (s[0] == '\0' || strlen(s) >= sizeof seg->name)
        return fail_at(c, n, "segment name '%s' must have 1 to %zu characters", s, sizeof seg->name - 1);
    memcpy(seg->name, s, strlen(s) + 1);
    return TPS_OK;
}

static tps_status parse_segments(pctx *c, const yaml_node_t *n, tps_rule *r)
{
    tps_status st = TPS_OK;
    if (n->type == YAML_MAPPING_NODE) {
        if ((st = no_duplicate_keys(c, n, "segments")) != TPS_OK) return st;
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
            if (r->nseg == TPS_MAX_SEGMENTS)
                return fail_at(c, n, "more than %d segments", TPS_MAX_SEGMENTS);
            tps_lsegment *seg = &r->seg[r->nseg++];
            if ((st = segment_name(c, node(c, p->key), seg)) != TPS_OK) return st;
            if ((st = get_expr(c, node(c, p->value), "segment size", &seg->size)) != TPS_OK) return st;
        }
    } else {
        if ((st = want_type(c, n, YAML_SEQUENCE_NODE, "segments")) != TPS_OK) return st;
        static const char *const allowed[] = {"name", "size", "unit", "may_replicate", NULL};
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
            if (r->nseg == TPS_MAX_SEGMENTS)
                return fail_at(c, n, "more than %d segments", TPS_MAX_SEGMENTS);
            yaml_node_t *sn = node(c, *it), *v[4];
            tps_lsegment *seg = &r->seg[r->nseg++];
            if ((st = map_fields(c, sn, "segment", allowed, v)) != TPS_OK) return st;
            if (!v[0] || !v[1]) return fail_at(c, sn, "a segment needs name and size");
            if ((st = segment_name(c, v[0], seg)) != TPS_OK) return st;
            if ((st = get_expr(c, v[1], "segment size", &seg->size)) != TPS_OK) return st;
            if (v[2] && (st = get_expr(c, v[2], "segment unit", &seg->unit)) != TPS_OK) return st;
            if (v[3] && (st = get_bool(c, v[3], "may_replicate", &seg->may_replicate)) != TPS_OK) return st;
            for (int j = 0; j + 1 < r->nseg; j++)
                if (strcmp(r->seg[j].name, seg->name) == 0)
                    return fail_at(c, v[0], "duplicate segment name '%s'", seg->name);
        }
    }
    if (r->nseg == 0) return fail_at(c, n, "segments is empty");
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
    tps_status st = map_fields(c, n, what, allowed, v);
    if (st != TPS_OK) return st;
    r->at = mark_of(n);
    r->is_default = is_default;
    if (is_default && v[K_MATCH]) return fail_at(c, v[K_MATCH], "default applies to unmatched tensors; it takes no match");
    if (!is_default && !v[K_MATCH]) return fail_at(c, n, "rule needs match");
    if (!v[K_SPLIT]) return fail_at(c, n, "%s needs split (replicate, column, row or dim)", what);
    if (v[K_MATCH]) {
        const yaml_node_t *m = v[K_MATCH];
        if (m->type == YAML_SEQUENCE_NODE) {
            size_t count = (size_t)(m->data.sequence.items.top - m->data.sequence.items.start);
            if (count == 0) return fail_at(c, m, "match is an empty list");
            r->globs = calloc(count, sizeof *r->globs);
            if (!r->globs) return tps_fail_oom(c->err, "reading a layout");
            for (yaml_node_item_t *it = m->data.sequence.items.start; it < m->data.sequence.items.top; it++)
                if ((st = get_glob(c, node(c, *it), "match", &r->globs[r->nglobs++])) != TPS_OK) return st;
        } else {
            r->globs = calloc(1, sizeof *r->globs);
            if (!r->globs) return tps_fail_oom(c->err, "reading a layout");
            r->nglobs = 1;
            if ((st = get_glob(c, m, "match", &r->globs[0])) != TPS_OK) return st;
        }
    }
    const char *s;
    if ((st = scalar(c, v[K_SPLIT], "split", &s)) != TPS_OK) return st;
    int kind = -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(s, split_names[i]) == 0) kind = i;
    if (kind < 0) return fail_at(c, v[K_SPLIT], "split '%s' is not one of replicate, column, row, dim", s);
    r->split = (tps_split_kind)kind;
    if (r->split == TPS_SPLIT_REPLICATE) {
        for (int k = K_DIM; k <= K_GROUPS; k++)
            if (v[k]) return fail_at(c, v[k], "a replicated tensor takes no %s", allowed[k]);
        return rule_label(c, r);
    }
    if (r->split == TPS_SPLIT_DIM && !v[K_DIM]) return fail_at(c, v[K_SPLIT], "split: dim needs dim: N");
    if (v[K_DIM]) {
        r->has_dim = true;
        if ((st = get_dim(c, v[K_DIM], "dim", &r->dim)) != TPS_OK) return st;
    }
    if (v[K_UNIT] && (st = get_expr(c, v[K_UNIT], "unit", &r->unit)) != TPS_OK) return st;
    if (v[K_SIZE] && v[K_SEGMENTS]) return fail_at(c, v[K_SIZE], "give size or segments, not both");
    if (v[K_SIZE] && (st = get_expr(c, v[K_SIZE], "size", &r->size)) != TPS_OK) return st;
    if (v[K_SEGMENTS] && (st = parse_segments(c, v[K_SEGMENTS], r)) != TPS_OK) return st;
    if (v[K_PAD] && (st = get_bool(c, v[K_PAD], "pad", &r->pad)) != TPS_OK) return st;
    if (r->pad && r->nseg > 1) return fail_at(c, v[K_PAD], "pad needs a single segment (this rule has %d)", r->nseg);
    if (v[K_KV] && (st = get_bool(c, v[K_KV], "kv_replicate", &r->kv_replicate)) != TPS_OK) return st;
    if (r->kv_replicate && r->nseg > 0) {
        bool found = false;
        for (int i = 0; i < r->nseg; i++) {
            bool kv = strcmp(r->seg[i].name, "k") == 0 || strcmp(r->seg[i].name, "v") == 0;
            r->seg[i].may_replicate |= kv;
            found |= kv;
        }
        if (!found) return fail_at(c, v[K_KV], "kv_replicate needs a segment named k or v");
    }
    if (v[K_GROUPS]) {
        if (!r->nseg) return fail_at(c, v[K_GROUPS], "groups needs segments: the parts of one group, in order");
        if (r->pad) return fail_at(c, v[K_GROUPS], "a grouped tensor cannot be padded");
        if ((st = get_expr(c, v[K_GROUPS], "groups", &r->groups)) != TPS_OK) return st;
    }
    return rule_label(c, r);
}

static tps_status parse_rules(pctx *c, const yaml_node_t *rules, const yaml_node_t *def)
{
    size_t n = 0;
    tps_status st;
    if (rules) {
        if ((st = want_type(c, rules, YAML_SEQUENCE_NODE, "rules")) != TPS_OK) return st;
        n = (size_t)(rules->data.sequence.items.top - rules->data.sequence.items.start);
    }
    size_t total = n + (def != NULL);
    if (total == 0) return tps_fail(c->err, TPS_EINVALID, "%s: the layout has no rules and no default", c->file);
    c->l->rules = calloc(total, sizeof *c->l->rules);
    if (!c->l->rules) return tps_fail_oom(c->err, "reading a layout");
    for (size_t i = 0; i < n; i++) {
        c->l->nrules++;
        st = parse_rule(c, node(c, rules->data.sequence.items.start[i]), &c->l->rules[i], false);
        if (st != TPS_OK) return st;
    }
    if (def) {
        c->l->nrules++;
        return parse_rule(c, def, &c->l->rules[n], true);
    }
    return TPS_OK;
}

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
            return fail_at(c, n, "block of kind %s needs role %s", tps_block_kind_name(b->kind),
                           tps_block_role_name(common[i]));
    bool separate_qkv = has_role(b, TPS_ROLE_Q_W) && has_role(b, TPS_ROLE_K_W) && has_role(b, TPS_ROLE_V_W);
    if (b->attention == TPS_ATTN_MLA) {
        /* q_proj (no q_lora_rank) or q_a_proj -> q_a_norm -> q_b_proj: a model has one of them. */
        bool q_lora = has_role(b, TPS_ROLE_Q_A_W) && has_role(b, TPS_ROLE_Q_A_NORM_W) && has_role(b, TPS_ROLE_Q_B_W);
        if (!has_role(b, TPS_ROLE_KV_A_W) || !has_role(b, TPS_ROLE_KV_A_NORM_W) || !has_role(b, TPS_ROLE_KV_B_W) ||
            (!q_lora && !has_role(b, TPS_ROLE_Q_W)))
            return fail_at(c, n, "attention mla needs roles kv_a_proj, kv_a_norm, kv_b_proj, and q_proj or q_a_proj, "
                                 "q_a_norm and q_b_proj");
        if (b->kind != TPS_BLOCK_LLAMA && b->kind != TPS_BLOCK_MIXTRAL)
            return fail_at(c, n, "attention mla goes with block kind llama or mixtral");
        separate_qkv = true; /* MLA stands in for q/k/v */
    }
    if (b->kind == TPS_BLOCK_GPT2 || b->kind == TPS_BLOCK_NEOX) {
        if (!has_role(b, TPS_ROLE_QKV_W) || !has_role(b, TPS_ROLE_FC_W))
            return fail_at(c, n, "block of kind %s needs roles qkv_proj and fc", tps_block_kind_name(b->kind));
        return TPS_OK;
    }
    if (!separate_qkv && !has_role(b, TPS_ROLE_QKV_W))
        return fail_at(c, n, "block of kind %s needs roles q_proj, k_proj and v_proj, or qkv_proj",
                       tps_block_kind_name(b->kind));
    bool fused_experts = has_role(b, TPS_ROLE_EXPERTS_GATE_UP_W) || has_role(b, TPS_ROLE_EXPERTS_DOWN_W) ||
                         has_role(b, TPS_ROLE_EXPERTS_GATE_UP_B) || has_role(b, TPS_ROLE_EXPERTS_DOWN_B);
    if (fused_experts) {
        if (!has_role(b, TPS_ROLE_EXPERTS_GATE_UP_W) || !has_role(b, TPS_ROLE_EXPERTS_DOWN_W) ||
            !has_role(b, TPS_ROLE_ROUTER_W))
            return fail_at(c, n, "a block with fused experts needs roles experts_gate_up, experts_down and router");
        if (has_role(b, TPS_ROLE_GATE_W) || has_role(b, TPS_ROLE_UP_W) || has_role(b, TPS_ROLE_GATE_UP_W) ||
            has_role(b, TPS_ROLE_FC_W) || has_role(b, TPS_ROLE_DOWN_W) || b->expert_prefix || b->dense_prefix ||
            b->shared_prefix)
            return fail_at(c, n, "fused experts (experts_*) leave out the per-expert MLP roles, expert_prefix, "
                                 "dense_prefix and shared_prefix");
        return TPS_OK;
    }
    if (b->kind == TPS_BLOCK_MIXTRAL || has_role(b, TPS_ROLE_ROUTER_W)) {
        if (!has_role(b, TPS_ROLE_GATE_W) || !has_role(b, TPS_ROLE_UP_W) || !has_role(b, TPS_ROLE_ROUTER_W))
            return fail_at(c, n, "a mixture-of-experts block needs roles gate_proj, up_proj and router");
        if (!b->expert_prefix) return fail_at(c, n, "a mixture-of-experts block needs expert_prefix");
        return TPS_OK;
    }
    if (b->dense_prefix || b->shared_prefix || has_role(b, TPS_ROLE_SHARED_GATE_W) || has_role(b, TPS_ROLE_ROUTER_BIAS))
        return fail_at(c, n, "dense_prefix, shared_prefix, shared_expert_gate and router_bias belong to a "
                             "mixture-of-experts block (one with a router role)");
    /* fc alone: a non-gated MLP, down(act(fc x)) (StarCoder2's c_fc / c_proj). */
    if (!(has_role(b, TPS_ROLE_GATE_W) && has_role(b, TPS_ROLE_UP_W)) && !has_role(b, TPS_ROLE_GATE_UP_W) &&
        !has_role(b, TPS_ROLE_FC_W))
        return fail_at(c, n, "block of kind llama needs roles gate_proj and up_proj, gate_up_proj, or fc");
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
        if ((st = get_enum(c, v[0], names[0], tps_moe_scoring_lookup, "softmax, sigmoid", &e)) != TPS_OK) return st;
        m->scoring = (tps_moe_scoring)e;
    }
    if (v[1]) {
        if ((st = get_enum(c, v[1], names[1], tps_moe_topk_lookup, "greedy, group_limited_greedy, noaux_tc", &e)) !=
            TPS_OK)
            return st;
        m->topk_method = (tps_moe_topk)e;
    }
    if (v[2] && (st = get_bool(c, v[2], names[2], &m->norm_topk_prob)) != TPS_OK) return st;
    if (v[3] && (st = get_double(c, v[3], names[3], 0, 1e6, &m->scaling)) != TPS_OK) return st;
    uint64_t *counts[] = {&m->n_group, &m->topk_group, &m->first_k_dense, &m->layer_freq, &m->sparse_step};
    for (int i = 0; i < 5; i++)
        if (v[4 + i] && (st = get_u64(c, v[4 + i], names[4 + i], counts[i])) != TPS_OK) return st;
    for (int i = 0; i < 9; i++)
        if (v[i]) l->block_set |= 1u << (TPS_BF_SCORING + i);
    return TPS_OK;
}

static tps_status parse_block(pctx *c, const yaml_node_t *n)
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
        "qk_norm", "qkv_grouped", "attention", NULL};
    enum { K_KIND, K_LAYER, K_EXPERT, K_ROLES, K_NORM, K_EPS, K_ACT, K_ROPE, K_THETA, K_PCT, K_PARRES, K_CONV,
           K_QKVI, K_TOPK, K_LAYERS, K_HIDDEN, K_HEADS, K_KVH, K_HD, K_INTER, K_EXPERTS,
           K_SCORING, K_TOPK_METHOD, K_NORM_TOPK, K_SCALING, K_N_GROUP, K_TOPK_GROUP, K_FIRST_DENSE, K_LAYER_FREQ,
           K_SPARSE_STEP, K_DENSE_PREFIX, K_SHARED_PREFIX, K_MOE_INTER, K_SHARED_INTER, K_MODEL0,
           K_EMBED_SCALE = K_MODEL0 + TPS_MROLE_COUNT, K_SWP, K_QKN, K_QKVG, K_ATTN, K_COUNT };
    yaml_node_t *v[K_COUNT];
    tps_layout *l = c->l;
    tps_block *b = &l->block_raw;
    tps_status st = map_fields(c, n, "block", allowed, v);
    if (st != TPS_OK) return st;
    if (!v[K_KIND]) return fail_at(c, n, "block needs kind (llama, gpt2, neox or mixtral)");
    if (!v[K_LAYER]) return fail_at(c, n, "block needs layer_prefix");
    int e;
    if ((st = get_enum(c, v[K_KIND], "kind", tps_block_kind_lookup, "llama, gpt2, neox, mixtral", &e)) != TPS_OK)
        return st;
    b->kind = (tps_block_kind)e;
    if ((st = get_strdup(c, v[K_LAYER], "layer_prefix", &b->layer_prefix)) != TPS_OK) return st;
    if (!strstr(b->layer_prefix, "{layer}")) return fail_at(c, v[K_LAYER], "layer_prefix must contain {layer}");
    if (v[K_EXPERT]) {
        if ((st = get_strdup(c, v[K_EXPERT], "expert_prefix", &b->expert_prefix)) != TPS_OK) return st;
        if (!strstr(b->expert_prefix, "{expert}"))
            return fail_at(c, v[K_EXPERT], "expert_prefix must contain {expert}");
    }
    struct {
        int key;
        char **out;
    } prefixes[] = {{K_DENSE_PREFIX, &b->dense_prefix}, {K_SHARED_PREFIX, &b->shared_prefix}};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (v[prefixes[i].key] &&
            (st = get_strdup(c, v[prefixes[i].key], allowed[prefixes[i].key], prefixes[i].out)) != TPS_OK)
            return st;
    if (v[K_ROLES]) {
        const yaml_node_t *roles = v[K_ROLES];
        if ((st = want_type(c, roles, YAML_MAPPING_NODE, "roles")) != TPS_OK) return st;
        if ((st = no_duplicate_keys(c, roles, "roles")) != TPS_OK) return st;
        for (yaml_node_pair_t *p = roles->data.mapping.pairs.start; p < roles->data.mapping.pairs.top; p++) {
            yaml_node_t *k = node(c, p->key);
            int r = tps_block_role_lookup((const char *)k->data.scalar.value);
            if (r < 0) {
                tps_buf names = TPS_BUF_INIT;
                for (int i = 0; i < TPS_ROLE_COUNT; i++)
                    tps_buf_printf(&names, "%s%s", i ? ", " : "", tps_block_role_name((tps_block_role)i));
                const char *list = tps_buf_cstr(&names);
                st = fail_at(c, k, "unknown role '%s' (roles: %s)", (const char *)k->data.scalar.value,
                             list ? list : "?");
                tps_buf_release(&names);
                return st;
            }
            if ((st = get_strdup(c, node(c, p->value), tps_block_role_name((tps_block_role)r), &b->role[r])) != TPS_OK)
                return st;
        }
    }
    if (v[K_ATTN]) {
        if ((st = get_enum(c, v[K_ATTN], "attention", tps_attn_kind_lookup, "mha, mla", &e)) != TPS_OK) return st;
        b->attention = (tps_attn_kind)e;
    }
    if ((st = check_block_roles(c, n, b)) != TPS_OK) return st;
    if (v[K_NORM]) {
        if ((st = get_enum(c, v[K_NORM], "norm", tps_norm_lookup, "rms, layer, rms_offset", &e)) != TPS_OK) return st;
        b->norm = (tps_norm_kind)e;
        l->block_set |= 1u << TPS_BF_NORM;
    }
    if (v[K_ACT]) {
        if ((st = get_enum(c, v[K_ACT], "act", tps_act_lookup, "silu, gelu_tanh, gelu_erf", &e)) != TPS_OK) return st;
        b->act = (tps_act_kind)e;
        l->block_set |= 1u << TPS_BF_ACT;
    }
    if (v[K_ROPE]) {
        if ((st = get_enum(c, v[K_ROPE], "rope", tps_rope_lookup, "none, half, interleaved", &e)) != TPS_OK) return st;
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
        if ((st = get_double(c, v[dbl[i].key], allowed[dbl[i].key], dbl[i].lo, dbl[i].hi, dbl[i].out)) != TPS_OK)
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
        if ((st = get_bool(c, v[flags[i].key], allowed[flags[i].key], flags[i].out)) != TPS_OK) return st;
        l->block_set |= 1u << flags[i].bit;
    }
    if (v[K_QKN]) {
        if ((st = get_enum(c, v[K_QKN], "qk_norm", tps_qk_norm_lookup, "per_head, whole", &e)) != TPS_OK) return st;
        b->qk_norm = (tps_qk_norm_kind)e;
    }
    if (v[K_TOPK]) {
        if ((st = get_u64(c, v[K_TOPK], "top_k", &b->top_k)) != TPS_OK) return st;
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
        if (v[nums[i].key] && (st = get_u64(c, v[nums[i].key], allowed[nums[i].key], nums[i].out)) != TPS_OK)
            return st;
    for (int r = 0; r < TPS_MROLE_COUNT; r++) /* keys named as tps_block_model_role_name says */
        if (v[K_MODEL0 + r] && (st = get_strdup(c, v[K_MODEL0 + r], allowed[K_MODEL0 + r], &b->model_role[r])) != TPS_OK)
            return st;
    if (v[K_EMBED_SCALE] && (st = get_bool(c, v[K_EMBED_SCALE], "embed_scale", &b->embed_scale)) != TPS_OK) return st;
    if (v[K_SWP] && (st = get_u64(c, v[K_SWP], "sliding_window_pattern", &b->sliding_window_pattern)) != TPS_OK)
        return st;
    l->has_block = true;
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
        if (first == last) return fail_at(c, n, "%s is an empty list", what);
    } else if (n->type != YAML_SCALAR_NODE) {
        return fail_at(c, n, "%s must be a name or a list of names, not %s", what, node_type_name(n));
    }
    size_t total = first ? (size_t)(last - first) : 1;
    if (!(*out = calloc(total, sizeof **out))) return tps_fail_oom(c->err, "reading a layout");
    for (size_t i = 0; i < total; i++) {
        yaml_node_t *item = first ? node(c, first[i]) : (yaml_node_t *)n;
        const char *s;
        tps_status st = scalar(c, item, what, &s);
        if (st != TPS_OK) return st;
        if (!s[0] || strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.") != strlen(s))
            return fail_at(c, item, "%s: '%s' is not a name (letters, digits, '_', '-', '.')", what, s);
        for (size_t j = 0; j < *count; j++)
            if (strcmp((*out)[j], s) == 0) return fail_at(c, item, "%s lists '%s' twice", what, s);
        if (!((*out)[i] = strdup(s))) return tps_fail_oom(c->err, "reading a layout");
        *count = i + 1;
    }
    return TPS_OK;
}

/* skip: a list of {match: GLOB, reason: TEXT}.  One glob per entry: the plan prints one line
 * per entry, and a manifest records each with its count. */
static tps_status parse_skip(pctx *c, const yaml_node_t *n)
{
    tps_status st = want_type(c, n, YAML_SEQUENCE_NODE, "skip");
    if (st != TPS_OK) return st;
    size_t total = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    if (total == 0) return fail_at(c, n, "skip is an empty list");
    tps_layout *l = c->l;
    if (!(l->skips = calloc(total, sizeof *l->skips))) return tps_fail_oom(c->err, "reading a layout");
    static const char *const allowed[] = {"match", "reason", NULL};
    for (size_t i = 0; i < total; i++) {
        yaml_node_t *e = node(c, n->data.sequence.items.start[i]), *v[2];
        tps_skip *sk = &l->skips[l->nskips++];
        if ((st = map_fields(c, e, "a skip entry", allowed, v)) != TPS_OK) return st;
        sk->at = mark_of(e);
        if (!v[0] || !v[1]) return fail_at(c, e, "a skip entry needs match (one glob) and reason");
        if ((st = get_glob(c, v[0], "match", &sk->glob)) != TPS_OK) return st;
        if ((st = get_strdup(c, v[1], "reason", &sk->reason)) != TPS_OK) return st;
        if (!sk->reason[0] || strpbrk(sk->reason, "\r\n"))
            return fail_at(c, v[1], "reason must be one non-empty line");
    }
    return TPS_OK;
}

static tps_status parse_root(pctx *c, const yaml_node_t *root)
{
    /* targets: is read by lib/targets/target.c when a serving engine's layout is asked for. */
    static const char *const allowed[] = {"name",  "description", "architectures", "aliases", "sizes", "infer",
                                          "skip", "rules",       "default",       "block",   "targets", NULL};
    enum { K_NAME, K_DESC, K_ARCH, K_ALIAS, K_SIZES, K_INFER, K_SKIP, K_RULES, K_DEFAULT, K_BLOCK, K_TARGETS, K_COUNT };
    yaml_node_t *v[K_COUNT];
    tps_layout *l = c->l;
    tps_status st = map_fields(c, root, "the layout", allowed, v);
    if (st != TPS_OK) return st;
    if (v[K_NAME] && (st = get_strdup(c, v[K_NAME], "name", &l->name)) != TPS_OK) return st;
    if (v[K_DESC] && (st = get_strdup(c, v[K_DESC], "description", &l->description)) != TPS_OK) return st;
    if (v[K_ARCH] &&
        (st = parse_names(c, v[K_ARCH], "architectures", &l->architectures, &l->narchitectures)) != TPS_OK)
        return st;
    if (v[K_ALIAS] && (st = parse_names(c, v[K_ALIAS], "aliases", &l->aliases, &l->naliases)) != TPS_OK) return st;
    if (v[K_SIZES] && (st = parse_sizes(c, v[K_SIZES])) != TPS_OK) return st;
    if (v[K_INFER] && (st = parse_infer(c, v[K_INFER])) != TPS_OK) return st;
    if (v[K_SKIP] && (st = parse_skip(c, v[K_SKIP])) != TPS_OK) return st;
    if ((st = parse_rules(c, v[K_RULES], v[K_DEFAULT])) != TPS_OK) return st;
    if (v[K_BLOCK] && (st = parse_block(c, v[K_BLOCK])) != TPS_OK) return st;
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

tps_status tps_layout_load_preset(const char *preset, tps_layout **out, tps_error *err)
{
    *out = NULL;
    const tps_preset *p = tps_preset_resolve(preset);
    if (!p) {
        tps_buf names = TPS_BUF_INIT;
        for (const tps_preset *q = tps_presets; q->name; q++)
            tps_buf_printf(&names, "%s%s", q == tps_presets ? "" : ", ", q->name);
        const char *list = tps_buf_cstr(&names);
        tps_status st = tps_fail(err, TPS_EARG, "unknown preset '%s' (presets: %s)", preset, list ? list : "?");
        tps_buf_release(&names);
        return st;
    }
    char name[128];
    snprintf(name, sizeof name, "preset:%s", p->name);
    return tps_layout_parse(p->yaml, strlen(p->yaml), name, out, err);
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
