/* The plan: for each tensor of a checkpoint, the layout rule that matches it and its
 * partition at a given tp, with every problem found at once (each unmatched tensor, each
 * dimension tp does not divide), so a user fixes a layout in one round, not one per run.
 * The result is a manifest with tensors filled in and no files yet; tps_cut fills those. */
#ifndef TPS_PLAN_H
#define TPS_PLAN_H

#include "buf.h"
#include "index.h"
#include "layout.h"
#include "manifest.h"

/* On TPS_EINVALID, problems holds one line per problem and err the first one; rules that
 * matched no tensor are listed in unused (one line each) either way. */
tps_status tps_plan_build(const tps_index *ix, tps_layout *l, const char *layout_name, uint64_t tp,
                          tps_manifest **out, tps_buf *problems, tps_buf *unused, tps_error *err);

/* Fills m->source from the index (names, sizes, format). */
tps_status tps_plan_source_info(tps_manifest *m, const tps_index *ix, tps_error *err);

#endif
