/* A Megatron checkpoint planned for writing, and the one call that writes it: split --target
 * megatron (a Hugging Face checkpoint mapped, megatron_split.h) and reshard of a Megatron
 * checkpoint both end here, with the write options every writing command builds
 * (tps_write_set's, lib/engine/write_set.h), so limits, guards, signals and publishing are
 * the common write step's; only the file layout (Megatron's names, stages as parts, the
 * tracker) is Megatron's (megatron_out.h, megatron_dist_out.h). */
#ifndef TPS_MEGATRON_PLAN_H
#define TPS_MEGATRON_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"
#include "../engine/cut.h"
#include "../engine/outdir.h"
#include "../engine/write_set.h"
#include "../set/manifest.h"
#include "../set/sink.h"
#include "megatron_args.h"
#include "megatron_dist_out.h"
#include "megatron_out.h"

/* The writers of formats/ a Megatron checkpoint is written with (lib/ includes no format). */
typedef struct tps_megatron_sinks {
    const tps_sink *torch;               /* legacy mp_rank_* files: tps_torch_sink */
    const tps_sink *dist;                /* torch_dist's .distcp files: tps_dcp_sink */
    tps_megatron_common_fn write_common; /* torch_dist's common.pt: tps_torch_write_value */
} tps_megatron_sinks;

typedef struct tps_megatron_plan {
    tps_manifest *m;            /* the set to write, planned by tps_megatron_out_plan */
    const tps_megatron_out *mo; /* its files */
    bool dist;                  /* torch_dist (megatron_dist_out.h), else legacy files */
    uint64_t num_layers;
    const tps_megatron_sinks *sinks;
    tps_global_read_fn read; /* global tensor i of m, after planning */
    void *ctx;
} tps_megatron_plan;

/* Writes plan (a tps_megatron_plan) as o says (o->cut.sink is replaced by the plan's). */
tps_status tps_megatron_plan_write(void *plan, const tps_write_opts *o, tps_error *err);

/* A torch_dist checkpoint holds MoE experts Megatron's way (not written yet): refused,
 * TPS_EINVALID naming src, for a model with experts. */
tps_status tps_megatron_dist_supported(const char *src, const tps_megatron_model *model, tps_error *err);

#endif
