/* Pipeline stages: which layers each stage of a TP x PP grid holds, and which stage a tensor
 * belongs to by its name.  Pure functions over (pp, first[]), shared by the manifest's grid
 * (grid.h), vLLM's sets and Megatron's (lib/registry/megatron_out.h).
 *
 * Stage p holds global layers [first[p], first[p+1]) (first has pp+1 entries).  A tensor of
 * layer N ("...layers.N....") is on N's stage; the others follow vLLM's models (llama.py,
 * qwen2.py, mixtral.py: VocabParallelEmbedding on the first stage, norm and lm_head on the
 * last, PPMissingLayer elsewhere): a name holding "embed" is on the first stage, any other on
 * the last. */
#ifndef TPS_GRID_STAGES_H
#define TPS_GRID_STAGES_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"

/* The largest pipeline a set may have (a usage error above it). */
#define TPS_MAX_PP 1024u

/* "a,b,c" (--pp-layers): pp positive counts adding up to num_layers, into first.  TPS_EARG
 * naming the text otherwise. */
tps_status tps_grid_layers_parse(uint64_t num_layers, uint64_t pp, const char *pp_layers, uint64_t *first,
                                 tps_error *err);

/* vLLM's default split (distributed/utils.py get_pp_indices without VLLM_PP_LAYER_PARTITION):
 * num_layers / pp each, the remainder one layer each to the stages before the last, from the
 * second-to-last backwards.  pp must be 1 to num_layers. */
void tps_grid_vllm_stages(uint64_t num_layers, uint64_t pp, uint64_t *first);

/* N of the first ".layers.N." (or a leading "layers.N.") in name; false when there is none. */
bool tps_grid_layer_of(const char *name, uint64_t *layer);

/* The stage of a tensor (or a target's extra) by its name, for pp stages split at first. */
uint64_t tps_grid_stage_of(uint64_t pp, const uint64_t *first, const char *name);

#endif
