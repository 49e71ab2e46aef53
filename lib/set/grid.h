/* A serving engine's TP x PP grid as data of the manifest (vLLM's sharded_state with
 * pipeline_parallel_size > 1: sharded_state_loader.py reads stage p, TP rank r from
 * model-pp-{p}-tp-{r}-part-{k}.safetensors, each holding only that stage's own parameters).
 *
 * A grid is the TP partition unchanged plus one fact per tensor: the stage it is on
 * (pp_stage; grid_stages.h says which from its name).  Tensors go stage by stage in manifest
 * order, and a rank's parts are cut at each stage's start, so a rank's files are its stages'
 * files in order and everything that reads a rank's files by name (reshard, merge, verify)
 * reads a grid as it reads any set; check also holds each file to its stage (pp_rank).
 * The JSON fields: grid_json.h. */
#ifndef TPS_GRID_H
#define TPS_GRID_H

#include <stdint.h>

#include "../base/status.h"
#include "manifest.h"

/* Lays m out on pp stages: vLLM's layer split (get_pp_indices), or pp_layers "a,b,.." (each
 * stage's layer count, VLLM_PP_LAYER_PARTITION's form); pp 0 or 1 without pp_layers makes
 * m TP-only.  Sets pp_stage of every tensor and reorders the tensors stage by stage (keeping
 * their order within a stage), re-indexing m.  TPS_EARG when pp exceeds the layers, when
 * pp_layers does not add up, or when the model's names have no layers; TPS_EINVALID for a
 * tensor vLLM needs on two stages (tied embeddings: the last stage holds the embedding as
 * lm_head, the first as embed_tokens) and for a MoE model with stacked experts (vLLM's
 * Mixtral, Qwen2-MoE and Qwen3-MoE hold embedding, norm and lm_head on every stage), which a
 * grid cannot hold yet. */
tps_status tps_grid_apply(tps_manifest *m, uint64_t pp, const char *pp_layers, tps_error *err);
/* The same with src's stages (a reshard that keeps its source's grid). */
tps_status tps_grid_apply_like(tps_manifest *m, const tps_manifest *src, tps_error *err);

/* m's stage count, at least 1. */
static inline uint64_t tps_grid_pp(const tps_manifest *m) { return m->pp > 1 ? m->pp : 1; }

#endif
