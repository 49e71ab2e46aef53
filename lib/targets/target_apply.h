/* Laying a manifest out for a target (lib/targets/target.h): the engine's vocabulary
 * padding, its extras, its blocked and transposed rows, and the fusion of members into
 * target names, in the order the rank files hold them; and back to tpshard's own. */
#ifndef TPS_TARGET_APPLY_H
#define TPS_TARGET_APPLY_H

#include "../base/status.h"
#include "../set/manifest.h"
#include "target_schema.h"

/* Lays m (tensors and partitions planned at m->tp) out for the target: the engine's
 * vocabulary padding, target names, members moved next to each other in from order.  A tp
 * the engine's padding refuses is TPS_EINVALID naming the rule and the tp values that work. */
tps_status tps_target_apply(const tps_target *t, tps_manifest *m, tps_error *err);

/* Back to tpshard's own names and padding (reshard --target tpshard); fails only when out
 * of memory. */
tps_status tps_target_clear(tps_manifest *m, tps_error *err);

#endif
