/* Shard sets a serving engine saved itself: vLLM's and SGLang's save_sharded_state
 * (ShardedStateLoader.save_model) leave model-rank-R-part-P.safetensors files with the
 * engine's parameter names and per-rank shapes, no __metadata__ and no tpshard.json.
 *
 * The adopter makes such a directory a shard set the rest of tpshard reads unchanged: the
 * family comes from its config.json (preset auto-detection), the preset's target mapping is
 * run backwards (engine parameter -> source tensors, lib/targets/target.h), each source tensor's
 * global shape is the one whose cut at this tp the layout's rules give the rank-0 shape in
 * the files (fused members: the combination whose rank slices add up), and the set is then
 * planned as split --target vllm would have planned it.  Every rank's files must hold exactly
 * the tensors that plan gives that rank, with its shapes and dtypes; anything else is
 * refused naming the key and the rank.  A stale model.safetensors.index.json beside the rank
 * files (vLLM's tools copy the source's) is ignored; an empty part (the saver writes part 0
 * empty when the first tensor alone exceeds the part size) is a file with no tensors. */
#ifndef TPS_ADOPT_H
#define TPS_ADOPT_H

#include <stdbool.h>

#include "../base/status.h"
#include "../set/manifest.h"

/* Whether dir has no tpshard.json and at least one model-rank-*-part-*.safetensors file. */
bool tps_adopt_is_engine_set(const char *dir);

/* The manifest of such a set (m->adopted true: no CRCs known), after checking every rank's
 * key set, shapes and dtypes against the plan.  Rank files are read with add_file. */
tps_status tps_adopt_manifest(const char *dir, tps_file_reader_fn add_file, tps_manifest **out, tps_error *err);

#endif
