/* Llama 4's config.json keys (lib/layout/llama4_config.h). */
#include <string.h>

#include "llama4_config.h"

const char *const tps_llama4_keys[] = {"use_qk_norm", "no_rope_layers", "no_rope_layer_interval",
                                       "attn_temperature_tuning", "floor_scale", "attn_scale",
                                       "attention_chunk_size", "intermediate_size_mlp", "moe_layers",
                                       "interleave_moe_layer_step", NULL};

static const tps_json *present(const tps_json *root, const char *key)
{
    const tps_json *v = tps_json_get(root, key);
    return v && v->type != TPS_JSON_NULL ? v : NULL;
}

static tps_status get_bool(const tps_json *root, const char *path, const char *key, bool *out, tps_error *err)
{
    const tps_json *v = present(root, key);
    if (!v) return TPS_OK;
    if (v->type != TPS_JSON_BOOL) return tps_fail(err, TPS_EINVALID, "%s: \"%s\" must be true or false", path, key);
    *out = v->u.boolean;
    return TPS_OK;
}

static tps_status get_num(const tps_json *root, const char *path, const char *key, bool integer, double *out,
                          tps_error *err)
{
    const tps_json *v = present(root, key);
    if (!v) return TPS_OK;
    if (v->type != TPS_JSON_NUMBER || (integer && (!v->u.number.is_u64 || v->u.number.u64 == 0)) ||
        !(v->u.number.f64 >= 0))
        return tps_fail(err, TPS_EINVALID, "%s: \"%s\" must be a %s", path, key,
                        integer ? "positive integer" : "non-negative number");
    *out = integer ? (double)v->u.number.u64 : v->u.number.f64;
    return TPS_OK;
}

/* A list of layer numbers (moe_layers) or of one 0/1 flag a layer (no_rope_layers) as a bit
 * set; false for a malformed list. */
static bool bits_of(const tps_json *v, bool flags, uint64_t *bits)
{
    if (v->type != TPS_JSON_ARRAY) return false;
    memset(bits, 0, TPS_MOE_MAX_LAYERS / 8);
    for (size_t i = 0; i < v->u.array.n; i++) {
        const tps_json *e = v->u.array.items[i];
        if (e->type != TPS_JSON_NUMBER || !e->u.number.is_u64) return false;
        uint64_t at = flags ? i : e->u.number.u64;
        if (at >= TPS_MOE_MAX_LAYERS || (flags && e->u.number.u64 > 1)) return false;
        if (!flags || e->u.number.u64) bits[at / 64] |= 1ull << (at % 64);
    }
    return true;
}

tps_status tps_llama4_from_config(const tps_json *root, const char *path, uint64_t layers, tps_llama4 *out,
                                  tps_moe_routing *moe, unsigned *moe_set, unsigned mlp_only_bit, unsigned sparse_bit,
                                  tps_error *err)
{
    memset(out, 0, sizeof *out);
    const tps_json *mt = present(root, "model_type");
    bool is = mt && mt->type == TPS_JSON_STRING && strcmp(mt->u.string.s, "llama4_text") == 0;
    /* keys only Llama 4 has (GLM-4.5 has use_qk_norm too, for weights it holds) */
    static const char *const own[] = {"no_rope_layers", "no_rope_layer_interval", "intermediate_size_mlp",
                                      "interleave_moe_layer_step", "attention_chunk_size", NULL};
    for (const char *const *k = own; *k && !is; k++) is = present(root, *k) != NULL;
    if (!is) return TPS_OK;
    out->qk_norm = true, out->temp_tuning = true;
    double interval = 4, floor_scale = 8192, attn_scale = 0.1, chunk = 8192, dense = 0, step = 0;
    tps_status st;
    if ((st = get_bool(root, path, "use_qk_norm", &out->qk_norm, err)) ||
        (st = get_bool(root, path, "attn_temperature_tuning", &out->temp_tuning, err)) ||
        (st = get_num(root, path, "no_rope_layer_interval", true, &interval, err)) ||
        (st = get_num(root, path, "floor_scale", true, &floor_scale, err)) ||
        (st = get_num(root, path, "attn_scale", false, &attn_scale, err)) ||
        (st = get_num(root, path, "attention_chunk_size", true, &chunk, err)) ||
        (st = get_num(root, path, "intermediate_size_mlp", true, &dense, err)) ||
        (st = get_num(root, path, "interleave_moe_layer_step", true, &step, err)))
        return st;
    out->nope_interval = (uint64_t)interval, out->floor_scale = floor_scale, out->attn_scale = attn_scale;
    out->chunk = (uint64_t)chunk, out->dense_intermediate = (uint64_t)dense;
    /* transformers: an empty or absent no_rope_layers means every interval-th layer has none */
    const tps_json *nr = present(root, "no_rope_layers");
    if (nr && nr->type == TPS_JSON_ARRAY && nr->u.array.n > 0) {
        if (!bits_of(nr, true, out->rope))
            return tps_fail(err, TPS_EINVALID, "%s: \"no_rope_layers\" must list a 0 or 1 for each of at most %d layers",
                            path, TPS_MOE_MAX_LAYERS);
        out->nope_listed = true;
    } else if (nr && nr->type != TPS_JSON_ARRAY) {
        return tps_fail(err, TPS_EINVALID, "%s: \"no_rope_layers\" must be a list", path);
    }
    /* moe_layers wins over interleave_moe_layer_step (transformers derives the one from the
     * other): the layers it does not list are dense. */
    const tps_json *ml = present(root, "moe_layers");
    if (ml) {
        uint64_t bits[TPS_MOE_MAX_LAYERS / 64];
        if (!bits_of(ml, false, bits) || layers > TPS_MOE_MAX_LAYERS)
            return tps_fail(err, TPS_EINVALID, "%s: \"moe_layers\" must list layer numbers below %d", path,
                            TPS_MOE_MAX_LAYERS);
        for (uint64_t i = 0; i < layers; i++)
            if (!(bits[i / 64] >> (i % 64) & 1)) moe->mlp_only[i / 64] |= 1ull << (i % 64);
        *moe_set |= 1u << mlp_only_bit;
    } else if (step > 1) {
        moe->sparse_step = (uint64_t)step;
        *moe_set |= 1u << sparse_bit;
    }
    return TPS_OK;
}
