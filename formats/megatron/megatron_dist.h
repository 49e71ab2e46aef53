/* Megatron-Core torch_dist checkpoints (Megatron-LM --ckpt-format torch_dist, the default
 * since Megatron-Core's dist_checkpointing) read as a Megatron checkpoint whose one "rank"
 * holds the model's global tensors (formats/megatron/megatron_ckpt.h: tp 1 x pp 1), so inspect,
 * split (through the Megatron-to-HF mapping), merge --target hf and reshard read it as they
 * read a legacy checkpoint.
 *
 * Layout (megatron/core/dist_checkpointing/serialization.py save(), strategies/torch.py;
 * checked on what megatron-core 0.16.1 writes, tests/interop/megatron/real/megatron_real_dist.py):
 *   ROOT/latest_checkpointed_iteration.txt, ROOT/iter_{N:07d}/ as for the legacy format, the
 *   iteration directory holding
 *     metadata.json   {"sharded_backend": "torch_dist", "sharded_backend_version": 1,
 *                      "common_backend": "torch", "common_backend_version": 1}
 *     common.pt       a torch.save of what is not sharded: args (argparse.Namespace),
 *                     checkpoint_version, iteration, num_floating_point_operations_so_far, ...
 *     .metadata, __R_N.distcp   a PyTorch Distributed Checkpoint (formats/dcp/dcp.h) of the
 *                     sharded part, under the ShardedTensors' keys
 * The keys are global and independent of the tp x pp that saved them:
 *   embedding.word_embeddings.weight [padded vocab, hidden], output_layer.weight (untied),
 *   decoder.final_layernorm.{weight,bias}, and each decoder layer tensor ONCE, stacked on a
 *   prepended layer axis: decoder.layers.self_attention.linear_qkv.weight [num_layers, ...]
 *   (per-group [q; k; v] rows, as in the legacy format), decoder.layers.mlp.linear_fc1.weight
 *   [num_layers, 2 * ffn, hidden] ([gate; up] with swiglu); the layer norms under
 *   TransformerEngine's names whatever the layer spec (the local spec's
 *   sharded_state_dict_keys_map): self_attention.linear_qkv.layer_norm_{weight,bias} is
 *   input_layernorm.*, mlp.linear_fc1.layer_norm_{weight,bias} is pre_mlp_layernorm.*.
 *   Non-tensor entries (BytesStorageMetadata): "<key>._extra_state/shard_<l>_<L>" (layer l of
 *   L) and rng_state/...; optimizer.* tensors: the optimizer's state.
 *
 * What is read: every model tensor, layer l of a stacked one as decoder.layers.<l>.<name>
 * (bytes [l * layer bytes, +layer bytes) of the global tensor: a byte range of the chunks
 * that hold that layer, never the whole tensor), under the legacy state dict's names; the
 * _extra_state entries' names (as the legacy reader records them); args, iteration and
 * checkpoint_version from common.pt through the restricted unpickler (formats/torch/pickle.h).
 * What is not: optimizer.* tensors (counted: optimizer_tensors), RNG and other non-tensor
 * entries (counted: other_entries).  Refused (TPS_EINVALID): a metadata.json whose
 * sharded_backend is not torch_dist, a common.pt without args or whose pickle is refused,
 * a stacked tensor whose first dimension is not args.num_layers, MoE expert tensors (not
 * read yet), and whatever formats/dcp/dcp.h refuses. */
#ifndef TPS_FORMATS_MEGATRON_DIST_H
#define TPS_FORMATS_MEGATRON_DIST_H

#include <stdbool.h>

#include "../../lib/base/status.h"
#include "megatron_ckpt.h"

/* True when dir holds metadata.json and common.pt or .metadata: what Megatron-Core's
 * dist_checkpointing.save writes (the backend is checked on opening). */
bool tps_megatron_dist_is_dir(const char *dir);

/* Fills c (root and iter_dir already set) from the torch_dist iteration directory
 * iter_path: tp = pp = 1, files[0] the global tensors, dist set. */
tps_status tps_megatron_dist_open(tps_megatron_ckpt *c, const char *iter_path, tps_error *err);

#endif
