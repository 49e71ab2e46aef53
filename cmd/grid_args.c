/* --pp and --pp-layers for a serving engine's set (cmd/grid_args.h). */
#include "grid_args.h"

#include "cli.h"
#include "lib/set.h"
#include "lib/registry.h"
#include "lib/targets.h"

int tps_cli_apply_grid(const char *verb, tps_manifest *m, uint64_t pp, const char *pp_layers,
                       const tps_manifest *like)
{
    tps_error err;
    tps_error_clear(&err);
    bool asked = pp > 1 || pp_layers;
    /* SGLang's loader reads TP-only files; tpshard's own sets hold every tensor on every rank. */
    if (asked && !tps_target_can(m->target, TPS_TARGET_SET | TPS_TARGET_PP))
        return tps_cli_usage(verb, "--pp and --pp-layers lay out a pipeline for --target vllm (or megatron), "
                                   "not for %s", m->target ? m->target : "tpshard's own sets");
    if (asked || pp == 1) tps_grid_apply(m, pp, pp_layers, &err);
    else if (like && tps_target_can(m->target, TPS_TARGET_SET | TPS_TARGET_PP)) tps_grid_apply_like(m, like, &err);
    else tps_grid_apply(m, 1, NULL, &err);
    return tps_cli_report(verb, &err);
}

int tps_cli_apply_ep(const char *verb, tps_manifest *m, uint64_t ep, const tps_manifest *like)
{
    tps_error err;
    tps_error_clear(&err);
    if (ep > 1 && !tps_target_can(m->target, TPS_TARGET_EP))
        return tps_cli_usage(verb, "--ep lays out expert parallelism for --target vllm (enable_expert_parallel), "
                                   "not for %s", m->target ? m->target : "tpshard's own sets");
    if (ep) tps_grid_ep_apply(m, ep, &err);
    else if (like && tps_grid_ep(like) > 1 && !tps_target_can(m->target, TPS_TARGET_EP)) tps_grid_ep_apply(m, 1, &err);
    if (!err.code && tps_grid_ep(m) > 1) tps_target_check_manifest(m, "the expert-parallel grid", &err);
    return tps_cli_report(verb, &err);
}
