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
 *       transposed: ["transformer.h.*.attn.c_attn.weight", ...]   # 2-D slices held [b, a]
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
 * them (target_extras) with the release class (target_version); merge drops them. */
#ifndef TPS_TARGET_H
#define TPS_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/buf.h"
#include "../base/index.h"
#include "../base/status.h"
#include "../set/manifest.h"
#include "../set/sink.h"
#include "target_blocks.h"

typedef struct tps_target tps_target;

/* Target name (e.g. "vllm") from the layout text's targets: section.  "tpshard" gives
 * *out NULL (source names, no target).  A layout without that target is TPS_EINVALID
 * naming the presets that have one. */
tps_status tps_target_load(const char *layout_text, const char *layout_name, const char *name, tps_target **out,
                           tps_error *err);
void tps_target_free(tps_target *t); /* accepts NULL */

/* Lays m (tensors and partitions planned at m->tp) out for the target: the engine's
 * vocabulary padding, target names, members moved next to each other in from order.  A tp
 * the engine's padding refuses is TPS_EINVALID naming the rule and the tp values that work. */
tps_status tps_target_apply(const tps_target *t, tps_manifest *m, tps_error *err);

/* Back to tpshard's own names and padding (reshard --target tpshard); fails only when out
 * of memory. */
tps_status tps_target_clear(tps_manifest *m, tps_error *err);

/* A loaded manifest's target names: each a run of consecutive tensors of one dtype whose
 * rank slices concatenate (same trailing dimensions, stack groups alike at every rank). */
tps_status tps_target_check_manifest(const tps_manifest *m, const char *what, tps_error *err);
/* tps_manifest_load, then the check above: how a shard set's manifest is read (the manifest
 * itself is data and knows no target). */
tps_status tps_target_manifest_load(const char *dir, tps_manifest **out, tps_error *err);

/* The tensors of rank r's part holding manifest tensors [i0, i0+n) (whole runs): e[k] and
 * shapes[k*TPS_MAX_DIMS] describe tensor i0+k at that rank on entry; on return the first
 * returned count entries describe the file's tensors, each run fused into one. */
size_t tps_target_file_tensors(const tps_manifest *m, size_t i0, size_t n, uint64_t r, tps_sink_tensor *e,
                               uint64_t *shapes);

/* tps_parts_greedy with each run kept whole in one part. */
tps_status tps_target_parts(const tps_manifest *m, const uint64_t *bytes, uint64_t max, size_t *first,
                            size_t *nparts, tps_error *err);

/* Rank r's files as an index by manifest names: each member a byte range of its fused tensor,
 * after checking that the files hold exactly the fused tensors, with the shapes the
 * partitions give.  *out replaces files (which it consumes in every case). */
tps_status tps_target_member_index(const tps_manifest *m, uint64_t r, tps_index *files, tps_index **out,
                                   tps_error *err);

/* The mapping run backwards (lib/targets/adopt.h): the source tensors engine tensor name holds, in
 * file order (*n malloc'd names in a malloc'd array; with *stack, S groups: experts 0..S-1 of
 * the entry's from names).  *n 0: no entry maps name, which keeps its own.  *tied: the entry
 * is a tied survivor (its source is the other name only when the set lacks that name). */
tps_status tps_target_sources(const tps_target *t, const char *name, uint64_t S, char ***names, size_t *n,
                              bool *tied, bool *stack, tps_error *err);
/* An extra's bytes as a rank file holds them (F32, little-endian). */
void tps_target_extra_bytes(double value, unsigned char out[4]);
/* The bytes m's extras add at the end of each rank's last part: their CRC-32, *len bytes. */
uint32_t tps_target_extras_crc(const tps_manifest *m, uint64_t *len);

/* Whether the target holds source tensor name transposed (a transposed: entry matches it). */
bool tps_target_transposes(const tps_target *t, const char *name);
/* The names an engine-saved rank's files lack of those the target's required: entries ask
 * once per tensor of files their per matches: how many, the first list of them appended to
 * out, quoted and comma-separated ("and N more" after). */
size_t tps_target_missing(const tps_target *t, const tps_index *files, tps_buf *out, size_t list);
/* The releases the target's since: and before: values name for its own engine, newest first,
 * at most max: each starts a release class (what --target-version selects), "0" the class
 * before. */
size_t tps_target_releases(const tps_target *t, const char **out, size_t max);
/* Whether name is one of the target's extras (a constant the engine's state dict holds
 * beside the weights, whatever the release that has it). */
bool tps_target_is_extra(const tps_target *t, const char *name);
/* The engine's vocabulary multiple (0: no padding of its own). */
uint64_t tps_target_vocab_multiple(const tps_target *t);

/* The mapping's name patterns, for other mappings written the same way (lib/megatron/megatron_hf.h):
 * '*' matches a non-empty dot-free run and '{a,b}' one alternative, each a capture. */
#define TPS_TARGET_MAX_CAPS 8
typedef struct tps_target_caps {
    int n;
    const char *s[TPS_TARGET_MAX_CAPS];
    size_t len[TPS_TARGET_MAX_CAPS];
} tps_target_caps;
/* Whether name matches pattern, its captures into *c (c->n 0 on entry). */
bool tps_target_name_match(const char *pattern, const char *name, tps_target_caps *c);
/* pattern with its wildcards replaced by the first ncap captures; false when too long or
 * short of captures. */
bool tps_target_name_subst(const char *pattern, const tps_target_caps *c, int ncap, char *out, size_t size);
/* How many wildcards pattern has. */
int tps_target_name_wildcards(const char *pattern);

#endif
