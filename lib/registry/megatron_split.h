/* split --target megatron planned: a Hugging Face checkpoint (opened and planned at tp 1 by
 * the caller, which checks it is the family's) mapped to Megatron-Core's global tensors
 * (megatron_hf.h), Megatron's args made from its config.json, the megatron_gpt preset cut at
 * tp (or, for torch_dist, whose tensors are global, at tp 1), and Megatron's files planned
 * (megatron_out.h).  What is left is the write: s->plan with tps_megatron_plan_write. */
#ifndef TPS_MEGATRON_SPLIT_H
#define TPS_MEGATRON_SPLIT_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/buf.h"
#include "../base/index.h"
#include "../base/status.h"
#include "../layout/layout.h"
#include "../refusal/problems.h"
#include "../set/manifest.h"
#include "megatron_args.h"
#include "megatron_hf.h"
#include "megatron_out.h"
#include "megatron_plan.h"

typedef struct tps_megatron_split_opts {
    uint64_t tp, pp;       /* pp 0: 1 */
    const char *pp_layers; /* NULL: Megatron's uniform stages */
    bool dist;             /* --ckpt-format torch_dist (megatron_dist_out.h) */
    const tps_megatron_sinks *sinks;
} tps_megatron_split_opts;

typedef struct tps_megatron_split {
    tps_megatron_hf *h;
    tps_index *view;  /* ix under Megatron's names */
    char *config, *fields;
    tps_buf args;     /* the args as a pickled Namespace, in the contract's JSON */
    tps_megatron_model model;
    tps_layout *ml;   /* the megatron_gpt preset, sizes from the args (set even when planning fails) */
    tps_manifest *mm; /* the Megatron set */
    tps_megatron_out *mo;
    const tps_tensor **pre; /* Megatron's tensor i before planning: the view's tensor */
    tps_megatron_plan plan; /* ready to write on success */
} tps_megatron_split;

/* Plans the split of ix (l: its layout, m: its plan at tp 1, whose config_path must name its
 * config.json) into *out (freed with tps_megatron_split_free, also on failure).  A cut
 * Megatron refuses is TPS_EINVALID or TPS_EARG with problems filled (sizes: (*out)->ml);
 * problems is empty for any other failure. */
tps_status tps_megatron_split_plan(const char *src, const tps_index *ix, tps_layout *l, const tps_manifest *m,
                                   const tps_megatron_split_opts *o, tps_problems *problems,
                                   tps_megatron_split **out, tps_error *err);
void tps_megatron_split_free(tps_megatron_split *s); /* accepts NULL */

#endif
