/* A Megatron-LM checkpoint as read: what both readers fill, the legacy one
 * (formats/megatron/megatron_read.h, --ckpt-format torch) and the torch_dist one
 * (formats/megatron/megatron_dist.h), and what everything above them uses.
 *
 * Directory layout (megatron/training/checkpointing.py), shared by both formats:
 *   ROOT/latest_checkpointed_iteration.txt   "N" (decimal, > 0) or "release"
 *   ROOT/iter_{N:07d}/ or ROOT/release/       the iteration directory, holding either
 *     mp_rank_{tp:02d}[_{pp:03d}]/model_optim_rng.pt   legacy: one torch.save archive per
 *                                                    rank (megatron_read.h)
 *     metadata.json, common.pt, .metadata, __R_N.distcp  torch_dist (megatron_dist.h)
 * Here a checkpoint is a tp x pp grid of rank files, each one tensor index under
 * Megatron-Core names with local layer numbers (a torch_dist checkpoint is the 1 x 1 grid of
 * its global tensors), with the args and version read from the pickles as JSON. */
#ifndef TPS_MEGATRON_CKPT_H
#define TPS_MEGATRON_CKPT_H

#include <stdbool.h>
#include <stdint.h>

#include "../../lib/base/index.h"

/* The tracker and rank file names: TPS_MEGATRON_TRACKER, TPS_MEGATRON_FILE (lib/registry/megatron_out.h). */

typedef struct tps_megatron_file {
    uint32_t tp_rank, pp_rank;
    char *path;         /* .../mp_rank_XX[_YYY]/model_optim_rng.pt */
    tps_index *ix;      /* the model tensors as stored: mcore names with LOCAL layer numbers
                           (legacy nesting already mapped to mcore names); plain ranges into
                           the zip's stored records (views when needed) */
    char **extra_state; /* keys ending in "._extra_state", local numbers, mcore names */
    size_t n_extra_state;
} tps_megatron_file;

typedef struct tps_megatron_ckpt {
    char *root;     /* the directory holding the tracker (or the iter dir's parent) */
    char *iter_dir; /* "iter_0000100" or "release" */
    bool release;
    int64_t iteration;             /* from the file's top-level "iteration" (0 if absent) */
    char *checkpoint_version_json; /* the top-level value, JSON, e.g. "3.0" ("null" if absent) */
    char *args_json;               /* args (argparse.Namespace), JSON ("null" if absent) */
    uint32_t tp, pp;               /* from the rank directories found (a full grid) */
    tps_megatron_file *files;      /* tp*pp, index = pp_rank*tp + tp_rank */
    bool legacy_names;             /* the files used megatron.legacy nesting */
    /* A torch_dist checkpoint (formats/megatron/megatron_dist.h): files[0] holds the global
     * tensors (tp = pp = 1); saved_tp x saved_pp is what args say it was saved at. */
    bool dist;
    uint32_t saved_tp, saved_pp;
    size_t optimizer_tensors, other_entries; /* left out: optimizer.* tensors, RNG and other bytes */
} tps_megatron_ckpt;

/* Appends name to mf's _extra_state keys. */
tps_status tps_megatron_file_add_extra(tps_megatron_file *mf, const char *name, tps_error *err);

/* Frees c and every rank file's index (NULL is fine). */
void tps_megatron_close(tps_megatron_ckpt *c);

#endif
