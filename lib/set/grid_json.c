/* A TP x PP grid in tpshard.json (lib/set/grid_json.h). */
#include "grid_json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grid_stages.h"

void tps_grid_json_top(tps_jw *w, const tps_manifest *m)
{
    if (m->pp <= 1) return;
    tps_jw_key(w, "pp");
    tps_jw_u64(w, m->pp);
    tps_jw_key(w, "pp_layers");
    tps_jw_array_begin(w);
    for (uint64_t p = 0; p < m->pp; p++) tps_jw_u64(w, m->pp_first[p + 1] - m->pp_first[p]);
    tps_jw_array_end(w);
}

void tps_grid_json_file(tps_jw *w, const tps_manifest *m, const tps_manifest_file *f)
{
    if (m->pp <= 1) return;
    tps_jw_key(w, "pp_rank");
    tps_jw_u64(w, f->pp_rank);
}

void tps_grid_json_tensor(tps_jw *w, const tps_manifest *m, const tps_manifest_tensor *t)
{
    if (m->pp <= 1) return;
    tps_jw_key(w, "pp_stage");
    tps_jw_u64(w, t->pp_stage);
}

static tps_status get_stage(const tps_json *obj, const char *key, const tps_manifest *m, const char *what,
                            const char *path, uint64_t *out, tps_error *err)
{
    const tps_json *v = tps_json_get(obj, key);
    if (m->pp <= 1) {
        if (v) return tps_fail(err, TPS_EINVALID, "%s: %s has \"%s\" but the set has no \"pp\"", path, what, key);
        *out = 0;
        return TPS_OK;
    }
    if (!v || v->type != TPS_JSON_NUMBER || !v->u.number.is_u64 || v->u.number.u64 >= m->pp)
        return tps_fail(err, TPS_EINVALID, "%s: %s: \"%s\" must be a stage below pp %" PRIu64, path, what, key, m->pp);
    *out = v->u.number.u64;
    return TPS_OK;
}

tps_status tps_grid_json_load_top(const tps_json *root, tps_manifest *m, const char *path, tps_error *err)
{
    const tps_json *pp = tps_json_get(root, "pp"), *layers = tps_json_get(root, "pp_layers");
    m->pp = 0;
    if (!pp && !layers) return TPS_OK;
    if (!pp || pp->type != TPS_JSON_NUMBER || !pp->u.number.is_u64 || pp->u.number.u64 < 2 ||
        pp->u.number.u64 > TPS_MAX_PP)
        return tps_fail(err, TPS_EINVALID, "%s: \"pp\" must be 2 to %u (absent for a TP-only set)", path, TPS_MAX_PP);
    uint64_t P = pp->u.number.u64;
    if (!layers || layers->type != TPS_JSON_ARRAY || layers->u.array.n != P)
        return tps_fail(err, TPS_EINVALID, "%s: \"pp_layers\" must list the layers of each of the %" PRIu64 " stages",
                        path, P);
    if (!(m->pp_first = calloc(P + 1, sizeof *m->pp_first))) return tps_fail_oom(err, "loading the manifest");
    for (uint64_t p = 0; p < P; p++) {
        const tps_json *v = layers->u.array.items[p];
        if (v->type != TPS_JSON_NUMBER || !v->u.number.is_u64 || v->u.number.u64 == 0 || v->u.number.u64 > (1u << 20))
            return tps_fail(err, TPS_EINVALID, "%s: \"pp_layers\"[%" PRIu64 "] must be a positive layer count", path, p);
        m->pp_first[p + 1] = m->pp_first[p] + v->u.number.u64;
    }
    m->pp = P;
    return TPS_OK;
}

tps_status tps_grid_json_load_file(const tps_json *fj, const tps_manifest *m, tps_manifest_file *f, const char *path,
                                   tps_error *err)
{
    char what[1200];
    snprintf(what, sizeof what, "file '%.1000s'", f->name);
    return get_stage(fj, "pp_rank", m, what, path, &f->pp_rank, err);
}

tps_status tps_grid_json_load_tensor(const tps_json *tj, const tps_manifest *m, tps_manifest_tensor *t,
                                     const char *path, tps_error *err)
{
    char what[1200];
    snprintf(what, sizeof what, "tensor '%.1000s'", t->name);
    return get_stage(tj, "pp_stage", m, what, path, &t->pp_stage, err);
}

tps_status tps_grid_json_validate(const tps_manifest *m, const char *path, tps_error *err)
{
    if (m->pp <= 1) return TPS_OK;
    uint64_t layer;
    for (size_t i = 0; i < m->ntensors; i++) {
        const tps_manifest_tensor *t = &m->tensors[i];
        uint64_t want = tps_grid_stage_of(m->pp, m->pp_first, t->name);
        if (tps_grid_layer_of(t->name, &layer) && layer >= m->pp_first[m->pp])
            return tps_fail(err, TPS_EINVALID, "%s: tensor '%s' is of layer %" PRIu64 " but pp_layers hold %" PRIu64,
                            path, t->name, layer, m->pp_first[m->pp]);
        if (t->pp_stage != want)
            return tps_fail(err, TPS_EINVALID,
                            "%s: tensor '%s' is on stage %" PRIu64 " but pp_layers put it on stage %" PRIu64, path,
                            t->name, t->pp_stage, want);
        if (i && t->pp_stage < m->tensors[i - 1].pp_stage)
            return tps_fail(err, TPS_EINVALID, "%s: tensor '%s' (stage %" PRIu64 ") follows one of stage %" PRIu64
                            ": a grid's tensors go stage by stage", path, t->name, t->pp_stage, m->tensors[i - 1].pp_stage);
    }
    /* files are sorted by (rank, part): each rank's stages ascend and none is missing */
    for (size_t i = 0; i < m->nfiles; i++) {
        const tps_manifest_file *f = &m->files[i];
        bool first = i == 0 || m->files[i - 1].rank != f->rank;
        uint64_t prev = first ? 0 : m->files[i - 1].pp_rank;
        if (first ? f->pp_rank != 0 : (f->pp_rank != prev && f->pp_rank != prev + 1))
            return tps_fail(err, TPS_EINVALID, "%s: rank %" PRIu64 " has no file for stage %" PRIu64 " (next: '%s', stage %"
                            PRIu64 ")", path, f->rank, first ? 0 : prev + 1, f->name, f->pp_rank);
        bool last = i + 1 == m->nfiles || m->files[i + 1].rank != f->rank;
        if (last && f->pp_rank != m->pp - 1)
            return tps_fail(err, TPS_EINVALID, "%s: rank %" PRIu64 " has no file for stage %" PRIu64, path, f->rank,
                            f->pp_rank + 1);
    }
    return TPS_OK;
}
