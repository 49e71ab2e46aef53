/* Targets: shard sets a serving engine loads as they are (vLLM's and SGLang's
 * load_format="sharded_state": ShardedStateLoader in vLLM's sharded_state_loader.py looks
 * every key up in its model's state dict, so the names and per-rank shapes must be its own).
 *
 * The partition still says which bytes each rank holds; a target says under which names the
 * rank files hold them.  It is data in the layout, beside the rules:
 *
 *   targets:
 *     vllm:
 *       vocab_multiple: 64            # pad: true tensors pad as the engine's vocabulary
 *       tensors:
 *         - into: "model.layers.*.self_attn.qkv_proj.{weight,bias}"
 *           from: ["model.layers.*.self_attn.q_proj.{weight,bias}",
 *                  "model.layers.*.self_attn.k_proj.{weight,bias}",
 *                  "model.layers.*.self_attn.v_proj.{weight,bias}"]
 *         - into: "model.layers.*.block_sparse_moe.experts.w13_weight"
 *           from: ["model.layers.*.block_sparse_moe.experts.*.w1.weight",
 *                  "model.layers.*.block_sparse_moe.experts.*.w3.weight"]
 *           stack: true               # the last '*' of from counts experts 0, 1, ...
 *         - into: lm_head.weight
 *           from: [model.embed_tokens.weight]
 *           tied: true                # only when the source has no lm_head.weight
 *       extras:                       # state-dict entries no source tensor gives
 *         - names: ["model.layers.*.self_attn.attn._k_scale", ...]
 *           per: "model.layers.*.input_layernorm.weight"   # once per match, its captures
 *           value: 1.0                # a 0-d F32 constant
 *           since: "0.14"             # the first engine release with them (--target-version)
 *           before: "0.32"            # and the first without them (optional)
 *           engine: vllm              # only for this target (not sglang through an alias)
 *       tp_at_most_experts: "RULE"    # the engine refuses a tp above a stack's experts
 *       blocked:                      # rank files hold these rows reordered
 *         - match: "gpt_neox.layers.*.attention.query_key_value.{weight,bias}"
 *           blocks: 3                 # each partition unit is 3 blocks: [q_h; k_h; v_h]
 *           before: "0.32"            # releases before this one only; engine: as extras
 *       transposed: ["transformer.h.*.attn.c_attn.weight", ...]   # slices held with the last two dims swapped
 *       rank0: ["model.layers.*.mlp.experts.down_proj_bias"]  # whole on rank 0, zeros on the others
 *       rope_halves: ["model.layers.*.self_attn.q_proj.weight"]  # each head's rows: RoPE pairs to halves
 *       flattened: ["model.layers.*.mlp.experts.gate_up_proj_blocks"]  # last two dims merged (same bytes)
 *     sglang: vllm                    # the same mapping
 *
 * or, where the engine's model holds what no mapping writes, `refuse: "why"` alone: the target
 * is then TPS_EINVALID naming why, and the preset is not listed among those with one.  What is
 * no run of byte ranges of the source, a rank's rows reordered (GPT-NeoX) or transposed
 * (GPT-2's Conv1D), the blocked: and transposed: entries write (below).
 *
 * In from and into, '*' matches one dot-free run and '{a,b}' one alternative; each is a
 * capture, and into's wildcards take the captures of from's first pattern in order (less
 * the last one with stack).  A rank file holds each into tensor as its members' rank slices
 * concatenated along dimension 0 in from order (with stack, one such concatenation per
 * expert, stacked along a new leading dimension): dimension-0 concatenation of C-order
 * tensors is concatenation of their bytes, so the copy engine fuses while it streams, a
 * member at a time, and reading a set back finds each member as a byte range of its fused
 * tensor.  Tensors no entry maps keep their names.  The manifest records the mapping per
 * tensor (target_name, target_stack), so reshard, merge and check need no layout.  Extras
 * (vLLM's attention scale buffers since 0.14) close every rank's last part; the manifest lists
 * them (target_extras) with the release class (target_version); merge drops them.
 *
 * This header is the face of targets; each job has its file, the lower ones first:
 *   target_names.h    the name patterns ('*', '{a,b}', captures)
 *   target_release.h  release numbers (since:, before:, --target-version)
 *   target_schema.h   reading the targets: section into a tps_target
 *   target_blocks.h   blocked and transposed rows (the swap, the view, reading back)
 *   target_files.h    what rank files hold: runs of members fused, parts, extras' bytes,
 *                     a loaded manifest's checks, the member index
 *   target_apply.h    laying a manifest out for a target (padding, extras, fusion)
 *   target_reverse.h  the mapping run backwards, for sets an engine saved (adopt.h) */
#ifndef TPS_TARGET_H
#define TPS_TARGET_H

#include "target_apply.h"
#include "target_blocks.h"
#include "target_files.h"
#include "target_names.h"
#include "target_release.h"
#include "target_reverse.h"
#include "target_schema.h"

#endif
