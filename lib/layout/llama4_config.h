/* Llama 4's config.json keys (tps_llama4 in lib/layout/block.h, transformers 4.57
 * Llama4TextConfig): read into the layout's config-derived block settings. */
#ifndef TPS_LAYOUT_LLAMA4_CONFIG_H
#define TPS_LAYOUT_LLAMA4_CONFIG_H

#include "../base/json.h"
#include "block.h"

/* The keys, for the manifest's copy of config.json (keep_known_keys; model_type is falcon_keys'). */
extern const char *const tps_llama4_keys[];

/* Reads tps_llama4_keys from root (the text config) into *out with transformers' defaults
 * (use_qk_norm true, no_rope_layer_interval 4, attn_temperature_tuning true, floor_scale
 * 8192, attn_scale 0.1, attention_chunk_size 8192) when root is a Llama 4 text config
 * (model_type llama4_text, or a key only Llama 4 has); else leaves *out zeroed.  moe_layers or
 * interleave_moe_layer_step become the routing's dense layers (*moe: mlp_only, sparse_step;
 * *moe_set gets TPS_BF_MLP_ONLY / TPS_BF_SPARSE_STEP's bits, passed as mlp_only_bit and
 * sparse_bit).  layers: num_hidden_layers (0: unknown).  TPS_EINVALID naming path and key. */
tps_status tps_llama4_from_config(const tps_json *root, const char *path, uint64_t layers, tps_llama4 *out,
                                  tps_moe_routing *moe, unsigned *moe_set, unsigned mlp_only_bit, unsigned sparse_bit,
                                  tps_error *err);

#endif
