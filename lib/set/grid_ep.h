/* Expert parallelism as data of the manifest (vLLM's enable_expert_parallel, for a
 * sharded_state set): each MoE layer's routed experts whole on their owner rank, placed
 * linearly (rank r owns experts [r*E/T, (r+1)*E/T)), attention and dense layers cut by TP.
 *
 * vLLM 0.32 flattens TP (x DP) into the expert-parallel group (FusedMoEParallelConfig.make:
 * ep_size = tp_size, the experts' own tp_size 1) and its sharded_state files name only the TP
 * rank, so a set describes EP = TP: the one grid written.  (With dp > 1 vLLM's default
 * all2all backend also turns on sequence-parallel MoE, use_sequence_parallel_moe, which holds
 * DeepSeek's shared experts whole on every rank: another layout, not this one.)  The placement is each expert
 * tensor's partition (lib/partition/partition.h, owners/owner: item e of E), nothing more, so
 * check, reshard, merge and verify read an EP set as they read any set; the routed experts are
 * the target's stacked runs (target_stack S: the S experts of a layer), which a rank's file
 * holds as [E/T, ...] in expert order (vLLM's local index e - r*E/T). */
#ifndef TPS_GRID_EP_H
#define TPS_GRID_EP_H

#include <stdint.h>

#include "../base/status.h"
#include "manifest.h"

/* ep > 1: places every stacked run's experts whole on their owners.  TPS_EARG when ep is not
 * m->tp, when m is a pipeline grid, or when m has no stacked experts (no MoE layer, or no
 * target that stacks them); TPS_EINVALID naming the tensor when ep does not divide a layer's
 * experts or an expert tensor is replicated.  ep 0 or 1: back to the TP cut (refused, naming
 * the tensor, where that cut does not fit m->tp). */
tps_status tps_grid_ep_apply(tps_manifest *m, uint64_t ep, tps_error *err);

/* m->tp when m's experts are whole on their owners, else 1. */
uint64_t tps_grid_ep(const tps_manifest *m);
/* The experts a layer of m has when they are whole on their owners (the first such tensor's
 * count), else 0. */
uint64_t tps_grid_ep_experts(const tps_manifest *m);

#endif
