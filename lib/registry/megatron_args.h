/* A Megatron-LM checkpoint's args (the pickled argparse.Namespace, as the #18 contract's JSON
 * encoding: {"$newobj": ["argparse.Namespace", [], {field: value, ...}]}) read as the model
 * sizes the megatron_gpt presets cut by.
 *
 * Field                                   model
 *   num_layers, hidden_size, num_attention_heads           required
 *   group_query_attention, num_query_groups                 query groups (heads when GQA is off)
 *   kv_channels                                             head dim (hidden / heads when null)
 *   ffn_hidden_size                                         MLP size (4 * hidden when null)
 *   swiglu                                                  [gate; up] linear_fc1 (preset megatron_gpt,
 *                                                           else megatron_gpt_gelu)
 *   vocab_size / padded_vocab_size                          true / padded vocabulary
 *   make_vocab_size_divisible_by                            the padding quantum (128 when absent)
 *   untie_embeddings_and_output_weights                     an output_layer of its own
 *   normalization, norm_epsilon (layernorm_epsilon)         RMSNorm or LayerNorm, epsilon
 *   position_embedding_type, rotary_base, rotary_percent    RoPE (rope) or learned positions
 *   num_experts, moe_ffn_hidden_size, moe_router_topk       MoE
 *   tensor/pipeline_model_parallel_size                     the set's tp and pp
 * The sizes are handed to the layout as a Hugging Face style config text (the keys
 * lib/layout/layout_config.c reads), which the manifest records, so verify needs no args later. */
#ifndef TPS_MEGATRON_ARGS_H
#define TPS_MEGATRON_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/json.h"
#include "../base/status.h"

typedef struct tps_megatron_model {
    uint64_t tp, pp;
    uint64_t layers, hidden, heads, groups, head_dim, ffn, moe_ffn, experts, topk;
    uint64_t vocab;        /* true vocabulary (args.vocab_size); 0 when the args lack it */
    uint64_t padded_vocab; /* args.padded_vocab_size; 0 when absent */
    uint64_t vocab_divisor;
    bool swiglu, untied, rms, learned_positions, rotary_interleaved;
    double norm_eps, rotary_base, rotary_percent;
} tps_megatron_model;

/* The Namespace's field object inside args_json's parsed root, or NULL when it is not one. */
const tps_json *tps_megatron_args_fields(const tps_json *args);

/* Reads the model from the args JSON text; what names it in messages (the rank file). */
tps_status tps_megatron_args_read(const char *args_json, const char *what, tps_megatron_model *out, tps_error *err);

/* The preset that cuts this model ("megatron_gpt" or "megatron_gpt_gelu"). */
const char *tps_megatron_preset(const tps_megatron_model *m);

/* A Hugging Face style config text of the model (malloc'd), vocabulary v (the true one, or the
 * padded one kept when the true one is unknown). */
tps_status tps_megatron_config_text(const tps_megatron_model *m, uint64_t v, char **out, tps_error *err);

#endif
