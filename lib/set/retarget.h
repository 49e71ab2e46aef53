/* A shard set's manifest at a new tp: what reshard writes before it copies a byte.  Every
 * tensor's partition is checked at the new tp, and a refusal is reported grouped by cause
 * with the tp values that would fit (lib/refusal/problems.h), as plan reports a layout that does
 * not fit. */
#ifndef TPS_RETARGET_H
#define TPS_RETARGET_H

#include <stdint.h>

#include "../layout/layout.h"
#include "../refusal/problems.h"
#include "manifest.h"

/* A copy of src's description (layout, config keys, source, tensors and their partitions)
 * at tp, without files or CRCs.  problems must be initialised (tps_problems_init with tp).
 * When some partition does not fit tp: TPS_EINVALID (TPS_EARG for tp 0), *out NULL,
 * problems holds every refused tensor grouped by cause, tps_problems_finish already run
 * (so the tp values that fit are known), and err the first cause's line. */
tps_status tps_manifest_retarget(const tps_manifest *src, uint64_t tp, tps_manifest **out, tps_problems *problems,
                                 tps_error *err);
/* The same; keep_placement false checks and keeps each whole-on-one-rank tensor (expert
 * parallelism, lib/set/grid_ep.h) on its TP cut instead, for a reshard that drops the
 * placement (--ep 1) at a tp that would not divide the experts. */
tps_status tps_manifest_retarget_placed(const tps_manifest *src, uint64_t tp, bool keep_placement, tps_manifest **out,
                                        tps_problems *problems, tps_error *err);

/* The model sizes the manifest records (its layout's sizes: and the config.json keys it
 * kept), for naming heads and MLP sizes in a refusal; sizes it does not record stay 0. */
tps_status tps_manifest_sizes(const tps_manifest *m, tps_model_sizes *out, tps_error *err);

#endif
