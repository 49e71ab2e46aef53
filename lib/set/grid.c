/* A TP x PP grid as data of the manifest (lib/set/grid.h). */
#include "grid.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "grid_stages.h"

/* The presets whose vLLM models keep the embedding on the first stage only and the final norm
 * and lm_head on the last only (PPMissingLayer elsewhere), the rule grid_stages.h applies:
 * llama.py, qwen2.py, qwen3.py, and of the MoE models deepseek_v2.py (DeepSeek-V2/V3/R1) and
 * glm4_moe.py; llama, DeepSeek-V3 and GLM-4.5 were loaded and run by the real vLLM at tp x pp.
 * Other families place them otherwise or were not read yet: vLLM 0.32's mixtral.py,
 * qwen2_moe.py and qwen3_moe.py build embed_tokens, norm and lm_head on every stage, and its
 * loader refuses a stage without them ("Missing keys"). */
static const char *const GRID_PRESETS[] = {"preset:llama",       "preset:qwen3",       "preset:deepseek_v2",
                                           "preset:deepseek_v3", "preset:glm4_moe", NULL};

static bool grid_preset(const tps_manifest *m)
{
    for (size_t k = 0; GRID_PRESETS[k]; k++)
        if (m->layout_name && strcmp(m->layout_name, GRID_PRESETS[k]) == 0) return true;
    return false;
}

static tps_status layout_stages(tps_manifest *m, uint64_t pp, uint64_t *first, tps_error *err)
{
    free(m->pp_first);
    m->pp_first = NULL;
    m->pp = 0;
    for (size_t i = 0; i < m->ntensors; i++) m->tensors[i].pp_stage = 0;
    if (pp <= 1) {
        free(first);
        return tps_manifest_index(m, "the grid", err);
    }
    m->pp_first = first;
    m->pp = pp;
    for (size_t i = 0; i < m->ntensors; i++) {
        tps_manifest_tensor *t = &m->tensors[i];
        t->pp_stage = tps_grid_stage_of(pp, first, t->name);
        if (t->target_stack && !grid_preset(m))
            return tps_fail(err, TPS_EINVALID,
                            "'%s' is a stacked MoE expert tensor: vLLM's MoE models (mixtral.py, qwen2_moe.py, "
                            "qwen3_moe.py) hold the embedding, final norm and lm_head on every pipeline stage, which a "
                            "tpshard grid does not write yet (use --pp 1)", t->target_name);
        /* A tied survivor is the embedding written as lm_head (lib/targets/target.h, tied:);
         * vLLM's last stage holds it as lm_head, its first as embed_tokens. */
        if (t->target_name && strcmp(t->target_name, t->name) != 0 && strstr(t->name, "embed") &&
            !strstr(t->target_name, "embed"))
            return tps_fail(err, TPS_EINVALID,
                            "'%s' is tied to '%s': vLLM's pipeline holds it on the first stage and again on the last, "
                            "which a tpshard grid does not write yet (use --pp 1, or a model with its own lm_head)",
                            t->name, t->target_name);
    }
    /* allocated after the refusals above, which return without freeing */
    tps_manifest_tensor *sorted = calloc(m->ntensors + 1, sizeof *sorted);
    if (!sorted) return tps_fail_oom(err, "laying out the stages");
    size_t k = 0;
    for (uint64_t p = 0; p < pp; p++)
        for (size_t i = 0; i < m->ntensors; i++)
            if (m->tensors[i].pp_stage == p) sorted[k++] = m->tensors[i];
    memcpy(m->tensors, sorted, m->ntensors * sizeof *sorted);
    free(sorted);
    return tps_manifest_index(m, "the grid", err);
}

static tps_status num_layers(const tps_manifest *m, uint64_t *out, tps_error *err)
{
    uint64_t n = 0, layer;
    bool any = false;
    for (size_t i = 0; i < m->ntensors; i++)
        if (tps_grid_layer_of(m->tensors[i].name, &layer)) {
            any = true;
            if (layer + 1 > n) n = layer + 1;
        }
    if (!any)
        return tps_fail(err, TPS_EARG, "--pp: no tensor of this model names a layer ('layers.N.'), so it has no "
                                       "stages to split");
    *out = n;
    return TPS_OK;
}

tps_status tps_grid_apply(tps_manifest *m, uint64_t pp, const char *pp_layers, tps_error *err)
{
    if (pp <= 1 && !pp_layers) return layout_stages(m, 1, NULL, err);
    bool known = grid_preset(m);
    bool moe = false;
    for (size_t i = 0; i < m->ntensors; i++) moe |= m->tensors[i].target_stack != 0;
    if (!known && !moe)
        return tps_fail(err, TPS_EINVALID,
                        "--pp: %s is not a family whose vLLM pipeline stages tpshard writes yet (llama, qwen3, "
                        "deepseek_v2, deepseek_v3, glm4_moe: embedding on the first stage, final norm and lm_head on "
                        "the last)",
                        m->layout_name ? m->layout_name : "this layout");
    uint64_t L = 0;
    tps_status st = num_layers(m, &L, err);
    if (st) return st;
    if (pp == 0 && pp_layers) /* --pp-layers alone: its count of stages */
        for (const char *c = pp_layers, *e = pp_layers; e; c = e + 1, pp++) e = strchr(c, ',');
    if (pp > L || pp > TPS_MAX_PP)
        return tps_fail(err, TPS_EARG, "--pp %" PRIu64 ": a pipeline of 1 to %" PRIu64 " stages (the model has %" PRIu64
                                       " layers)", pp, L < TPS_MAX_PP ? L : TPS_MAX_PP, L);
    uint64_t *first = calloc(pp + 1, sizeof *first);
    if (!first) return tps_fail_oom(err, "laying out the stages");
    if (pp_layers) {
        if ((st = tps_grid_layers_parse(L, pp, pp_layers, first, err)) != TPS_OK) {
            free(first);
            return st;
        }
    } else {
        tps_grid_vllm_stages(L, pp, first);
    }
    if (pp == 1) {
        free(first);
        first = NULL;
    }
    return layout_stages(m, pp, first, err);
}

tps_status tps_grid_apply_like(tps_manifest *m, const tps_manifest *src, tps_error *err)
{
    uint64_t pp = tps_grid_pp(src);
    uint64_t *first = pp > 1 ? calloc(pp + 1, sizeof *first) : NULL;
    if (pp > 1 && !first) return tps_fail_oom(err, "laying out the stages");
    if (first) memcpy(first, src->pp_first, (pp + 1) * sizeof *first);
    return layout_stages(m, pp, first, err);
}
