/* split --target megatron and merge --target hf (lib/megatron/megatron_hf.h, lib/megatron/megatron_out.h). */
#ifndef TPS_CMD_MEGATRON_HF_H
#define TPS_CMD_MEGATRON_HF_H

#include <stdbool.h>
#include <stdint.h>

#include "layout_args.h"
#include "lib/engine/outdir.h"
#include "lib/megatron/megatron_args.h"

typedef struct tps_megatron_split_opts {
    const char *out;
    uint64_t pp;           /* 0: 1 */
    const char *pp_layers; /* NULL: Megatron's uniform stages */
    bool force, dry_run;
    bool dist;             /* --ckpt-format torch_dist (lib/megatron/megatron_dist_out.h) */
} tps_megatron_split_opts;

/* --ckpt-format V of split and reshard --target megatron: "torch" (the legacy format, the
 * default when v is NULL) or "torch_dist" (*dist); anything else is a usage error, whose
 * exit code is returned (0 when v is known). */
int tps_cli_ckpt_format(const char *cmd, const char *v, bool *dist);

/* A torch_dist checkpoint holds MoE experts Megatron's way (not written yet): refused,
 * TPS_EINVALID naming src, for a model with experts. */
tps_status tps_megatron_dist_supported(const char *src, const tps_megatron_model *model, tps_error *err);

/* A Hugging Face checkpoint of a family whose preset maps it to Megatron-Core (its
 * targets: megatron: section) written as a Megatron-LM checkpoint at la->tp x o->pp; the
 * exit code. */
int tps_cli_split_megatron(const char *src, const tps_layout_args *la, const tps_megatron_split_opts *o);

typedef struct tps_megatron_merge_opts {
    const char *out;
    bool file; /* -o FILE.safetensors (config.json beside it) rather than a directory */
    uint64_t max_shard, vocab;
    bool force;
} tps_megatron_merge_opts;

/* A Megatron-LM checkpoint merged into a Hugging Face one (weights and config.json); the exit
 * code. */
int tps_cli_merge_hf(const char *src, const tps_megatron_merge_opts *o);

/* A write_set before_publish step: arg (a NUL-terminated config.json text) as config.json in
 * the output directory. */
tps_status tps_cli_write_config_into(const tps_outdir *od, void *arg, tps_error *err);

#endif
