/* YAML layouts: model sizes, ordered name rules giving each tensor its partition, and the
 * verification block description.  Parsed with libyaml; every error carries
 * file:line:column.  The schema is documented in docs/layouts.md ("Layout schema") and
 * cmd/tpshard.1.
 *
 * Sizes come from the layout's `sizes:` map, then a Hugging Face config.json
 * (tps_layout_read_config), then inference from tensor shapes (tps_layout_infer_sizes),
 * earlier sources winning; segment lengths and units are expressions over them
 * ("kv_heads*head_dim"). */
#ifndef TPS_LAYOUT_H
#define TPS_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "../base/index.h"
#include "../base/status.h"
#include "../partition/partition.h"
#include "block.h"

typedef struct tps_model_sizes {
    /* 0 means unknown */
    uint64_t hidden, heads, kv_heads, head_dim, intermediate, vocab, layers, experts;
    uint64_t moe_intermediate;    /* one routed expert's (moe_intermediate_size) */
    uint64_t shared_intermediate; /* the shared experts' MLP (Qwen's shared_expert_intermediate_size,
                                   * DeepSeek's n_shared_experts * moe_intermediate_size) */
    /* multi-head latent attention (DeepSeek-V2/V3): a q head is qk_nope + qk_rope rows, a
     * kv_b head qk_nope + v rows, an o_proj head v columns */
    uint64_t qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
} tps_model_sizes;

typedef struct tps_layout tps_layout;

/* name is what messages call the text (a file path, or "preset:llama"). */
tps_status tps_layout_parse(const char *text, size_t len, const char *name, tps_layout **out, tps_error *err);
tps_status tps_layout_load_file(const char *path, tps_layout **out, tps_error *err);
tps_status tps_layout_load_preset(const char *preset, tps_layout **out, tps_error *err);

/* Fills sizes the layout left unset from a Hugging Face config.json (hidden_size,
 * num_attention_heads, num_key_value_heads, head_dim, intermediate_size, vocab_size,
 * num_hidden_layers, num_local_experts; GPT-2's n_embd/n_head/n_layer/n_inner), and block
 * settings its block: section left open (norm epsilon, RoPE theta, rotary fraction, top-k,
 * activation, parallel residual).  With kept, *kept receives (malloc'd) a compact JSON
 * object of just the keys tpshard read, as the file had them: what a manifest records so
 * that the shard set needs no config.json later. */
tps_status tps_layout_read_config(tps_layout *l, const char *config_path, char **kept, tps_error *err);
/* The same from config text in memory (a manifest's recorded keys); what names it. */
tps_status tps_layout_apply_config_text(tps_layout *l, const char *text, size_t len, const char *what, char **kept,
                                        tps_error *err);

/* Fills sizes still unset from tensor shapes where the layout's `infer:` hints make them
 * unambiguous; fails naming the size when two tensors disagree. */
tps_status tps_layout_infer_sizes(tps_layout *l, const tps_index *ix, tps_error *err);

const tps_model_sizes *tps_layout_sizes(const tps_layout *l);

/* The partition for one tensor: the first rule whose glob matches name.  Fails
 * (TPS_EINVALID) when no rule matches, or when the rule's expressions need a size that
 * is unknown or do not fit the tensor's shape; the message names the tensor, the rule's
 * file:line:column and the numbers.  Records the match for tps_layout_unused_rules. */
tps_status tps_layout_partition(tps_layout *l, const char *name, tps_dtype dtype, int ndim,
                                const uint64_t *shape, tps_partition *out, size_t *rule, tps_error *err);

/* tps_layout_partition for tensor x of checkpoint ix, quantization included: a companion
 * of a quantized linear (lib/quant/scheme.h) takes the partition derived from the rule of its
 * logical weight MODULE.weight (whose shape the primary companion in ix gives), unless a
 * rule written for it (its glob names the companion's suffix) comes first; everything else
 * is tps_layout_partition.  *follows (may be NULL) says that the partition is a companion's
 * that fits every tp its primary companion fits (lib/quant/scheme.h): a refusal of it repeats the
 * primary's and is no cause of its own. */
tps_status tps_layout_partition_tensor(tps_layout *l, const tps_index *ix, const tps_tensor *x, tps_partition *out,
                                       size_t *rule, bool *follows, tps_error *err);

/* One line describing the quantization_config of a config.json (text of len bytes, or with
 * text NULL the file at path; a missing file is no quantization): *out (malloc'd) is
 * "fp8 (block [128, 128]); not quantized: lm_head", or the reason tpshard refuses it, or
 * NULL when the model is not quantized. */
tps_status tps_layout_quant_summary(const char *text, size_t len, const char *path, char **out, tps_error *err);

/* config.json's quantization_config as read (lib/quant/quant.h), or NULL when not quantized. */
const struct tps_quant *tps_layout_quant(const tps_layout *l);

size_t tps_layout_rule_count(const tps_layout *l);
/* "model.layers.*.self_attn.q_proj.weight (llama.yaml:12:5)" */
const char *tps_layout_rule_label(const tps_layout *l, size_t rule);
uint64_t tps_layout_rule_matches(const tps_layout *l, size_t rule);

/* The sizes a rule's expressions need that are still unknown, as "head_dim, heads" ("" when
 * none): a refusal names them once instead of once per tensor. */
void tps_layout_rule_missing_sizes(const tps_layout *l, size_t rule, char *buf, size_t bufsize);

/* The layout's architectures: and aliases: lists (the Hugging Face architectures a preset
 * serves, and the other names --preset accepts for it); *n receives the count. */
const char *const *tps_layout_architectures(const tps_layout *l, size_t *n);
const char *const *tps_layout_aliases(const tps_layout *l, size_t *n);

/* The layout's skip: entry that drops tensor name (the first whose glob matches; skip is
 * consulted before the rules), counted for tps_layout_skip_entry; SIZE_MAX when none does. */
size_t tps_layout_skip_match(tps_layout *l, const char *name);
size_t tps_layout_skip_count(const tps_layout *l);
/* Skip entry i's glob and reason, and how many tensors it matched so far. */
const char *tps_layout_skip_glob(const tps_layout *l, size_t i);
const char *tps_layout_skip_reason(const tps_layout *l, size_t i);
uint64_t tps_layout_skip_matches(const tps_layout *l, size_t i);

/* The block description, or NULL when the layout has no `block:` section. */
const tps_block *tps_layout_block(const tps_layout *l);

/* The layout's `description:` line, or NULL. */
const char *tps_layout_description(const tps_layout *l);

/* The exact text the layout was parsed from (recorded in the manifest). */
const char *tps_layout_text(const tps_layout *l);

void tps_layout_free(tps_layout *l);

/* Glob match of a tensor name: '*' matches any run of characters within one dot-separated
 * component, '{a,b}' matches either alternative; everything else matches itself. */
bool tps_glob_match(const char *pattern, const char *name);

/* A size expression ("kv_heads*head_dim") evaluated over l's sizes: what other mappings
 * written in a layout (lib/registry/megatron_hf.h) size their pieces with.  what names the place
 * for messages (e.g. "preset:llama:120"). */
tps_status tps_layout_eval(const tps_layout *l, const char *expr, const char *what, uint64_t *out, tps_error *err);

#endif
