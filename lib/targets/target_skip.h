/* A target's skip: tensors of the source that the engine's main model does not hold (the
 * multi-token-prediction layer DeepSeek-V3/R1 and GLM-4.5 checkpoints carry past
 * num_hidden_layers), left out of the set and recorded in the manifest's "skipped" as the
 * layout's skip: entries are (lib/set/plan.c), so check, merge and reshard treat them alike. */
#ifndef TPS_TARGET_SKIP_H
#define TPS_TARGET_SKIP_H

#include "../base/status.h"
#include "../set/manifest.h"
#include "target_schema.h"

/* Drops from m the tensors t's skip: entries match, one "skipped" entry per layer (glob
 * PREFIX.N.REST); a no-op on a manifest that has none (a set already laid out). */
tps_status tps_target_skip_apply(const tps_target *t, tps_manifest *m, tps_error *err);

#endif
