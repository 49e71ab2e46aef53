/* FP8 (quant_method "fp8"): fine-grained block FP8 with weight_block_size, else per-tensor
 * FP8 (AutoFP8), as vLLM's Fp8Config reads it; and the FP8 schemes themselves, which
 * compressed-tensors' groups use too (lib/quant/compressed_tensors.c).  The scale of each
 * strategy imitates one of vLLM's parameter classes (parameter.py). */
#include <stdio.h>
#include <string.h>

#include "quant_int.h"

/* The FP8 weight and its scale of one strategy; static input scales and the KV-cache
 * output scales (k_proj / v_proj) are per-tensor scalars, replicated. */
void tps_quant_fp8_scheme(tps_quant_scheme *s, int strategy, const char *scale, uint64_t bn, uint64_t bk)
{
    memset(s, 0, sizeof *s);
    s->align[0] = s->align[1] = 1;
    tps_quant_add_companion(s, "weight", 2, 0, 1, 1, 1, true, false);
    if (strategy == TPS_FP8_BLOCK) {
        tps_quant_add_companion(s, scale, 2, 0, bn, 1, bk, false, false); /* BlockQuantScaleParameter */
        s->align[0] = s->block[0] = bn;
        s->align[1] = s->block[1] = bk;
        snprintf(s->name, sizeof s->name, "fp8 block [%llu, %llu]", (unsigned long long)bn, (unsigned long long)bk);
        for (int d = 0; d < 2; d++)
            snprintf(s->rule[d], sizeof s->rule[d], "FP8 block [%llu, %llu]", (unsigned long long)bn,
                     (unsigned long long)bk);
    } else if (strategy == TPS_FP8_CHANNEL) {
        tps_quant_add_companion(s, scale, 2, 0, 1, -1, 1, false, false); /* ChannelQuantScaleParameter: no row loader */
        snprintf(s->name, sizeof s->name, "fp8 channel");
    } else {
        tps_quant_add_companion(s, scale, 0, -1, 1, -1, 1, false, false); /* PerTensorScaleParameter */
        snprintf(s->name, sizeof s->name, "fp8 tensor");
    }
    tps_quant_add_companion(s, "input_scale", 0, -1, 1, -1, 1, false, false);
    tps_quant_add_companion(s, "output_scale", 0, -1, 1, -1, 1, false, false);
}

tps_status tps_quant_block_size(const tps_json *v, const char *what, const char *key, uint64_t *bn, uint64_t *bk,
                                tps_error *err)
{
    if (!v || v->type != TPS_JSON_ARRAY || v->u.array.n != 2)
        return tps_fail(err, TPS_EINVALID, "%s: quantization_config \"%s\" must be a list of two positive integers", what,
                        key);
    uint64_t *o[2] = {bn, bk};
    for (int i = 0; i < 2; i++) {
        const tps_json *e = v->u.array.items[i];
        if (e->type != TPS_JSON_NUMBER || !e->u.number.is_u64 || e->u.number.u64 == 0 || e->u.number.u64 > (1u << 20))
            return tps_fail(err, TPS_EINVALID, "%s: quantization_config \"%s\" must be a list of two positive integers",
                            what, key);
        *o[i] = e->u.number.u64;
    }
    return TPS_OK;
}

tps_status tps_quant_read_fp8(tps_quant *q, const tps_json *qc, const char *what, tps_error *err)
{
    tps_status st;
    const tps_json *bs = tps_json_get(qc, "weight_block_size");
    const char *act = tps_quant_str(qc, "activation_scheme");
    if ((st = tps_quant_new_groups(q, 1, err)) != TPS_OK) return st;
    q->ngroups = 1;
    if (bs && bs->type != TPS_JSON_NULL) {
        uint64_t bn, bk;
        if ((st = tps_quant_block_size(bs, what, "weight_block_size", &bn, &bk, err)) != TPS_OK) return st;
        if (act && strcmp(act, "static") == 0)
            return tps_fail(err, TPS_EINVALID, "%s: quantization_config: block-scaled FP8 with activation_scheme "
                            "\"static\" is refused by the engine (vLLM Fp8Config); only \"dynamic\" is defined", what);
        tps_quant_fp8_scheme(&q->groups[0].s, TPS_FP8_BLOCK, "weight_scale_inv", bn, bk);
    } else {
        tps_quant_fp8_scheme(&q->groups[0].s, TPS_FP8_TENSOR, "weight_scale", 0, 0);
    }
    const char *key = tps_json_get(qc, "ignored_layers") ? "ignored_layers" : "modules_to_not_convert";
    if ((st = tps_quant_not_converted(q, qc, what, key, err)) != TPS_OK) return st;
    snprintf(q->desc, sizeof q->desc, "fp8 (%s)", q->groups[0].s.name + 4);
    return TPS_OK;
}
