/* --pp, --pp-layers and --ep for a serving engine's set (lib/set/grid.h, grid_ep.h): split and
 * reshard lay the manifest out on pipeline stages or expert ranks after its target is applied. */
#ifndef TPS_CLI_GRID_ARGS_H
#define TPS_CLI_GRID_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/set.h"

/* Lays m (its target applied) out on pp stages / pp_layers; without either, on like's stages
 * (a reshard keeps its source's grid; NULL: TP-only).  A target whose registry entry
 * (lib/registry/registry.h) has no TPS_TARGET_PP takes no stages: --pp is then a usage error, and a kept grid is dropped (its names are the source's).
 * Returns the exit code (reported). */
int tps_cli_apply_grid(const char *verb, tps_manifest *m, uint64_t pp, const char *pp_layers,
                       const tps_manifest *like);

/* Places m's routed experts whole on their owner ranks (--ep E, E = m->tp; lib/set/grid_ep.h),
 * or back on the TP cut (--ep 1).  ep 0 (not given): a reshard keeps like's placement (the
 * retargeted manifest carries it) where the target still has TPS_TARGET_EP, and drops it for
 * another.
 * Returns the exit code (reported). */
int tps_cli_apply_ep(const char *verb, tps_manifest *m, uint64_t ep, const tps_manifest *like);

#endif
