/* Hugging Face <-> Megatron-LM: the mapping between a Hugging Face checkpoint's tensors and
 * the Megatron-Core GLOBAL tensors of the same model (the names and full values the
 * megatron_gpt preset cuts, lib/registry/megatron_out.h), and between config.json and
 * Megatron's args.
 *
 * The mapping is data, in each family's preset, beside its other targets:
 *
 *   targets:
 *     megatron:
 *       tensors:
 *         - into: "decoder.layers.*.self_attention.linear_qkv.{weight,bias}"
 *           from: [q_proj..., k_proj..., v_proj...]     # names as lib/targets/target.h writes them
 *           rows: [heads*head_dim, kv_heads*head_dim, kv_heads*head_dim]
 *           groups: kv_heads
 *         - into: "decoder.layers.*.mlp.linear_fc1.weight"
 *           from: [gate_proj..., up_proj...]
 *           rows: [intermediate, intermediate]
 *         - into: output_layer.weight
 *           from: lm_head.weight
 *       args:                       # Megatron arg: config.json key
 *         num_query_groups: num_key_value_heads
 *         norm_epsilon: {config: rms_norm_eps, float: true}
 *       hf:                         # merge --target hf: the architecture args ask for
 *         - {architecture: Qwen2ForCausalLM, model_type: qwen2, when: add_qkv_bias, unless: num_experts}
 *
 * An into tensor is its members' rows, each member a whole tensor of rows[k] rows (size
 * expressions over the layout's sizes, checked against the member's shape): without groups
 * the members one after another ([gate; up]); with groups G, for g = 0..G-1 the g-th of G
 * equal row blocks of every member in from order (Megatron's [q_g; k_g; v_g] per query
 * group, loader_llama_mistral.py's cat of q.reshape(ng, ...), k.reshape(ng, ...), ...).
 * A row is the contiguous C-order bytes of everything after dimension 0, so either
 * direction is a list of row ranges, streamed through a read hook: split reads the Hugging
 * Face files through a view index under Megatron names (the copy engine cuts it as it cuts
 * any checkpoint), and merge reads the Megatron set's global tensors through the reverse
 * view.  No tensor is ever held whole. */
#ifndef TPS_MEGATRON_HF_H
#define TPS_MEGATRON_HF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/index.h"
#include "../base/status.h"
#include "../engine/cut.h"
#include "../layout/layout.h"
#include "../set/manifest.h"

typedef struct tps_megatron_hf tps_megatron_hf;

/* The megatron: mapping of a layout's text.  A layout without one is TPS_EINVALID naming
 * the presets that have one. */
tps_status tps_megatron_hf_load(const char *layout_text, const char *layout_name, tps_megatron_hf **out,
                                tps_error *err);
void tps_megatron_hf_free(tps_megatron_hf *h); /* accepts NULL */

/* split --target megatron: the Hugging Face checkpoint ix (sizes known to l) as an index of
 * Megatron-Core global tensors, read through a hook from ix (which must outlive it).  Every
 * tensor of ix must be a member of exactly one entry, except those the layout skips;
 * anything else is TPS_EINVALID naming the tensor. */
tps_status tps_megatron_hf_view(const tps_megatron_hf *h, tps_layout *l, const tps_index *ix, tps_index **out,
                                tps_error *err);

/* Megatron's args for that model, as a JSON object in the contract's encoding of a pickled
 * Namespace's fields (malloc'd): the mapping's args from config.json's text, then what
 * every Megatron GPT model needs (kv_channels, group_query_attention, swiglu, RMSNorm, rope,
 * add_qkv_bias, untie_embeddings_and_output_weights, vocab_size and padded_vocab_size for
 * tp, params_dtype, tp and pp sizes, ...).  A RoPE scaling Megatron does not compute is
 * TPS_EINVALID naming it. */
tps_status tps_megatron_hf_args(const tps_megatron_hf *h, const tps_layout *l, const char *config_text,
                                size_t config_len, const tps_index *view, uint64_t tp, uint64_t pp, char **out,
                                tps_error *err);

/* merge --target hf: the preset (name, malloc'd) whose hf: entry args ask for, with that
 * entry's architecture and model_type (malloc'd).  None: TPS_EINVALID naming what args say. */
tps_status tps_megatron_hf_choose(const char *args_json, char **preset, char **architecture, char **model_type,
                                  tps_error *err);

/* The config.json (malloc'd, pretty JSON) of args for that architecture; vocab is the true
 * vocabulary (the rows merge writes). */
tps_status tps_megatron_hf_config(const tps_megatron_hf *h, const char *args_json, const char *architecture,
                                  const char *model_type, uint64_t vocab, char **out, tps_error *err);

/* The reverse view: src (an unsharded manifest of Megatron global tensors, read through
 * read/ctx) as the Hugging Face tensors of the mapping, sizes from l (the preset with the
 * config.json above applied).  *out is an unsharded manifest (tp 1, replicated) of those
 * tensors; *rd the reader to hand the copy engine with tps_megatron_hf_unview_read. */
typedef struct tps_megatron_unview tps_megatron_unview;
tps_status tps_megatron_hf_unview(const tps_megatron_hf *h, tps_layout *l, const tps_manifest *src,
                                  tps_global_read_fn read, void *ctx, tps_manifest **out, tps_megatron_unview **rd,
                                  tps_error *err);
tps_status tps_megatron_hf_unview_read(void *rd, size_t i, uint64_t off, void *buf, size_t len, tps_error *err);
void tps_megatron_unview_free(tps_megatron_unview *rd); /* accepts NULL */

#endif
