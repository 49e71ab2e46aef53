/* The plan: for each tensor of a checkpoint, the layout rule that matches it and its
 * partition at a given tp, with every problem found at once (each unmatched tensor, each
 * dimension tp does not divide), so a user fixes a layout in one round, not one per run.
 * Tensors the layout's skip: matches are left out and counted in the manifest's skipped.
 * The result is a manifest with tensors filled in and no files yet; tps_cut fills those. */
#ifndef TPS_PLAN_H
#define TPS_PLAN_H

#include "../base/buf.h"
#include "../base/index.h"
#include "../layout/layout.h"
#include "../refusal/problems.h"
#include "manifest.h"

/* On TPS_EINVALID, problems holds every refused tensor grouped by cause (tps_problems_finish
 * already run, so the tp values that fit are known when only tp is wrong) and err the first
 * group's line; rules that matched no tensor are listed in unused (one line each) either way.
 * problems must be initialised (tps_problems_init with this tp). */
tps_status tps_plan_build_grouped(const tps_index *ix, tps_layout *l, const char *layout_name, uint64_t tp,
                                  tps_manifest **out, tps_problems *problems, tps_buf *unused, tps_error *err);

/* tps_plan_build_grouped with the problems as text: one line per group. */
tps_status tps_plan_build(const tps_index *ix, tps_layout *l, const char *layout_name, uint64_t tp,
                          tps_manifest **out, tps_buf *problems, tps_buf *unused, tps_error *err);

/* Fills m->source from the index (names, sizes, format). */
tps_status tps_plan_source_info(tps_manifest *m, const tps_index *ix, tps_error *err);

#endif
