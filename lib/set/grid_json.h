/* A TP x PP grid in tpshard.json (lib/set/grid.h): the fields, written and read beside the
 * manifest's others (lib/set/manifest.c), only when pp > 1, so TP-only manifests stay byte
 * for byte as they were.
 *
 *   "pp": 2, "pp_layers": [2, 2],           top level: the stages and their layer counts
 *   files[]:   "pp_rank": 1                 the stage whose tensors the file holds
 *   tensors[]: "pp_stage": 1                the stage whose files hold the tensor
 *
 * The manifest checks them against each other once read (a tensor's stage is its layer's,
 * grid_stages.h; tensors go stage by stage; every rank has a file for every stage). */
#ifndef TPS_GRID_JSON_H
#define TPS_GRID_JSON_H

#include <stdint.h>

#include "../base/json.h"
#include "../base/status.h"

/* "pp" and "pp_layers" for pp stages split at first (nothing when pp <= 1). */
void tps_grid_json_top(tps_jw *w, uint64_t pp, const uint64_t *first);
/* key: stage (nothing when pp <= 1). */
void tps_grid_json_stage(tps_jw *w, const char *key, uint64_t pp, uint64_t stage);

/* Reads "pp" and "pp_layers" of root: *pp 0 when absent, else 2 to TPS_MAX_PP with *first
 * (malloc'd, pp + 1 entries) the stages' first layers.  path names the manifest. */
tps_status tps_grid_json_load_top(const tps_json *root, const char *path, uint64_t *pp, uint64_t **first,
                                  tps_error *err);
/* obj's key, a stage below pp (required when pp > 1, refused otherwise); what names obj. */
tps_status tps_grid_json_load_stage(const tps_json *obj, const char *key, uint64_t pp, const char *what,
                                    const char *path, uint64_t *out, tps_error *err);

#endif
