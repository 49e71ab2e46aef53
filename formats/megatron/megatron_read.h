/* Megatron-LM legacy checkpoints (--ckpt-format torch), read without executing anything
 * (the targets spec Part 2, the interop spec B and C.3).
 *
 * Layout (megatron/training/checkpointing.py):
 *   ROOT/latest_checkpointed_iteration.txt   "N" (decimal, > 0) or "release"
 *   ROOT/iter_{N:07d}/ or ROOT/release/       the iteration directory, holding only
 *     mp_rank_{tp:02d}/model_optim_rng.pt          when pipeline parallelism is 1
 *     mp_rank_{tp:02d}_{pp:03d}/model_optim_rng.pt when it is > 1
 *     (mp_rank_.._.._{ep:03d}: expert parallel, and model0.. entries: virtual pipeline, are
 *     refused by name)
 * Each model_optim_rng.pt is a torch.save archive (torch.h) whose pickle is a dict:
 *   args (argparse.Namespace), checkpoint_version (3.0), iteration, model, and optionally
 *   optimizer, opt_param_scheduler, rng_state, rerun_state_machine,
 *   num_floating_point_operations_so_far, ...
 * `model` is Megatron-Core's flat GPTModel.state_dict() (decoder.layers.{local i}.…), or the
 * legacy megatron.legacy nesting (language_model.{embedding, encoder, output_layer},
 * word_embeddings_for_head), whose names are mapped here to the Megatron-Core ones.
 *
 * What is read: only `model`'s tensors become index tensors (optimizer, RNG and rerun state
 * are parsed by the restricted unpickler, which builds values and runs nothing, and never
 * indexed); keys ending in "._extra_state" are recorded by name and their values skipped
 * (None, io.BytesIO, uint8 or empty tensors alike); rotary_pos_emb.inv_freq is skipped.
 * `args` and `checkpoint_version` are kept as JSON (pickle_json.h).  Every rank file's args
 * must agree on the model fields (tps_megatron_model_fields); tp and pp come from the rank
 * directories, which must form the full grid that args' tensor/pipeline sizes name. */
#ifndef TPS_MEGATRON_READ_H
#define TPS_MEGATRON_READ_H

#include <stdbool.h>

#include "../../lib/base/json.h"
#include "megatron_ckpt.h"

/* A tracker directory, an iter_* / release directory, a directory of mp_rank_* entries, or
 * a torch_dist iteration directory (metadata.json beside common.pt or .metadata). */
bool tps_megatron_is_checkpoint(const char *path);

/* Opens every rank file.  TPS_EINVALID for what Megatron would not load (a bad tracker,
 * iteration 0, a missing rank directory, expert parallel or virtual pipeline checkpoints,
 * a hostile pickle, disagreeing args), TPS_EIO for unreadable files.  A torch_dist iteration
 * directory is read by formats/megatron/megatron_dist.h. */
tps_status tps_megatron_open(const char *path, tps_megatron_ckpt **out, tps_error *err);

/* args' field dict (the Namespace's state) parsed from args_json; *doc to be freed with
 * tps_json_doc_free.  *fields is NULL when args is absent or not a Namespace. */
tps_status tps_megatron_args(const tps_megatron_ckpt *c, tps_json_doc **doc, const tps_json **fields, tps_error *err);

/* The args fields that describe the model (compared across rank files), NULL-terminated. */
extern const char *const tps_megatron_model_fields[];

#endif
