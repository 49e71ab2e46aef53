/* The megatron and hf entries of the targets' registry (lib/registry/registry.h) where they
 * need a file format, which lib/ does not include: the writers a Megatron checkpoint is
 * written with (torch, DCP), a Megatron checkpoint opened as the Hugging Face checkpoint it
 * holds (merge --target hf, and split or plan of such a source), and the reshard of one
 * opened and planned (lib/registry/megatron_reshard.h).  The command line keeps its options,
 * the write with progress and what it prints. */
#ifndef TPS_FORMATS_MEGATRON_TARGET_H
#define TPS_FORMATS_MEGATRON_TARGET_H

#include <stdbool.h>
#include <stdint.h>

#include "../../lib/base/status.h"
#include "../../lib/registry/megatron_as_hf.h"
#include "../../lib/registry/megatron_plan.h"
#include "../../lib/registry/megatron_reshard.h"
#include "megatron_set.h"

/* The writers of formats/ a Megatron checkpoint is written with. */
extern const tps_megatron_sinks tps_megatron_format_sinks;

/* Opens src as the Hugging Face checkpoint it holds; vocab: the true vocabulary when args
 * lack it (0: none). */
tps_status tps_megatron_as_hf_open(const char *src, uint64_t vocab, tps_megatron_as_hf **out, tps_error *err);

typedef struct tps_megatron_reshard_opts {
    uint64_t tp, pp;       /* pp 0: the source's stages */
    const char *pp_layers; /* NULL: the source's split, or Megatron's uniform stages for --pp */
    uint64_t vocab;        /* the true vocabulary when args lack it (0: none) */
    bool dist;             /* --ckpt-format torch_dist: global tensors, planned at tp 1 */
} tps_megatron_reshard_opts;

/* A reshard of a Megatron checkpoint in its three steps: opened (the source, its vocabulary
 * re-padded for the new tp), retargeted by the caller (ss->m to m at plan_tp, which prints
 * a refusal grouped), and planned (tps_megatron_resharding_plan: r->plan is then written). */
typedef struct tps_megatron_resharding {
    tps_megatron_reshard_opts o;
    uint64_t plan_tp;         /* the tp m is retargeted to */
    tps_shardset *ss;         /* the source set */
    tps_megatron_source *src; /* what its reader found beside it */
    tps_manifest *m;          /* the retargeted set: the caller's to set */
    tps_megatron_reshard *r;  /* after planning */
    tps_megatron_reshard_src rs;
    const tps_partition **saved; /* the source's partitions while m is made */
    char split[4096];
} tps_megatron_resharding;

/* Opens dir and re-pads its vocabulary for o->tp (a torch_dist output of a model it cannot
 * hold is refused); *out is freed with tps_megatron_resharding_free, also on failure. */
tps_status tps_megatron_resharding_open(const char *dir, const tps_megatron_reshard_opts *o,
                                        tps_megatron_resharding **out, tps_error *err);
/* Once g->m is set: the source's partitions restored, the files planned. */
tps_status tps_megatron_resharding_plan(tps_megatron_resharding *g, tps_error *err);
void tps_megatron_resharding_free(tps_megatron_resharding *g); /* accepts NULL */

#endif
