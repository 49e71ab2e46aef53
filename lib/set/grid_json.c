/* A TP x PP grid in tpshard.json (lib/set/grid_json.h). */
#include "grid_json.h"

#include <inttypes.h>
#include <stdlib.h>

#include "grid_stages.h"

void tps_grid_json_top(tps_jw *w, uint64_t pp, const uint64_t *first)
{
    if (pp <= 1) return;
    tps_jw_key(w, "pp");
    tps_jw_u64(w, pp);
    tps_jw_key(w, "pp_layers");
    tps_jw_array_begin(w);
    for (uint64_t p = 0; p < pp; p++) tps_jw_u64(w, first[p + 1] - first[p]);
    tps_jw_array_end(w);
}

void tps_grid_json_stage(tps_jw *w, const char *key, uint64_t pp, uint64_t stage)
{
    if (pp <= 1) return;
    tps_jw_key(w, key);
    tps_jw_u64(w, stage);
}

tps_status tps_grid_json_load_stage(const tps_json *obj, const char *key, uint64_t pp, const char *what,
                                    const char *path, uint64_t *out, tps_error *err)
{
    const tps_json *v = tps_json_get(obj, key);
    *out = 0;
    if (pp <= 1) {
        if (v) return tps_fail(err, TPS_EINVALID, "%s: %s has \"%s\" but the set has no \"pp\"", path, what, key);
        return TPS_OK;
    }
    if (!v || v->type != TPS_JSON_NUMBER || !v->u.number.is_u64 || v->u.number.u64 >= pp)
        return tps_fail(err, TPS_EINVALID, "%s: %s: \"%s\" must be a stage below pp %" PRIu64, path, what, key, pp);
    *out = v->u.number.u64;
    return TPS_OK;
}

tps_status tps_grid_json_load_top(const tps_json *root, const char *path, uint64_t *pp_out, uint64_t **first_out,
                                  tps_error *err)
{
    const tps_json *pp = tps_json_get(root, "pp"), *layers = tps_json_get(root, "pp_layers");
    *pp_out = 0;
    *first_out = NULL;
    if (!pp && !layers) return TPS_OK;
    if (!pp || pp->type != TPS_JSON_NUMBER || !pp->u.number.is_u64 || pp->u.number.u64 < 2 ||
        pp->u.number.u64 > TPS_MAX_PP)
        return tps_fail(err, TPS_EINVALID, "%s: \"pp\" must be 2 to %u (absent for a TP-only set)", path, TPS_MAX_PP);
    uint64_t P = pp->u.number.u64;
    if (!layers || layers->type != TPS_JSON_ARRAY || layers->u.array.n != P)
        return tps_fail(err, TPS_EINVALID, "%s: \"pp_layers\" must list the layers of each of the %" PRIu64 " stages",
                        path, P);
    uint64_t *first = calloc(P + 1, sizeof *first);
    if (!first) return tps_fail_oom(err, "loading the manifest");
    for (uint64_t p = 0; p < P; p++) {
        const tps_json *v = layers->u.array.items[p];
        if (v->type != TPS_JSON_NUMBER || !v->u.number.is_u64 || v->u.number.u64 == 0 || v->u.number.u64 > (1u << 20)) {
            free(first);
            return tps_fail(err, TPS_EINVALID, "%s: \"pp_layers\"[%" PRIu64 "] must be a positive layer count", path, p);
        }
        first[p + 1] = first[p] + v->u.number.u64;
    }
    *pp_out = P;
    *first_out = first;
    return TPS_OK;
}
