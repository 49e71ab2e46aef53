/* A TP x PP grid in tpshard.json (lib/set/grid.h): written and read beside the manifest's
 * other fields, only when pp > 1, so TP-only manifests stay byte for byte as they were.
 *
 *   "pp": 2, "pp_layers": [2, 2],           top level: the stages and their layer counts
 *   files[]:   "pp_rank": 1                 the stage whose tensors the file holds
 *   tensors[]: "pp_stage": 1                the stage whose files hold the tensor
 *
 * Reading checks them against each other: a tensor's stage is its layer's (grid_stages.h),
 * manifest order goes stage by stage, every rank has a file for every stage and a rank's
 * parts go stage by stage. */
#ifndef TPS_GRID_JSON_H
#define TPS_GRID_JSON_H

#include "../base/json.h"
#include "manifest.h"

void tps_grid_json_top(tps_jw *w, const tps_manifest *m);
void tps_grid_json_file(tps_jw *w, const tps_manifest *m, const tps_manifest_file *f);
void tps_grid_json_tensor(tps_jw *w, const tps_manifest *m, const tps_manifest_tensor *t);

/* Read "pp" and "pp_layers" (before the files and tensors), then each file's and tensor's
 * stage, then tps_grid_json_validate once everything is read.  path names the manifest. */
tps_status tps_grid_json_load_top(const tps_json *root, tps_manifest *m, const char *path, tps_error *err);
tps_status tps_grid_json_load_file(const tps_json *fj, const tps_manifest *m, tps_manifest_file *f, const char *path,
                                   tps_error *err);
tps_status tps_grid_json_load_tensor(const tps_json *tj, const tps_manifest *m, tps_manifest_tensor *t,
                                     const char *path, tps_error *err);
tps_status tps_grid_json_validate(const tps_manifest *m, const char *path, tps_error *err);

#endif
