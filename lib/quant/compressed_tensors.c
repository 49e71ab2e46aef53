/* compressed-tensors (quant_method "compressed-tensors", llm-compressor): the FP8 weights of
 * each config group (lib/quant/fp8.c's schemes), the group's targets choosing its modules. */
#include <stdio.h>
#include <string.h>

#include "quant_int.h"

tps_status tps_quant_read_ct(tps_quant *q, const tps_json *qc, const char *what, tps_error *err)
{
    tps_status st;
    const char *fmt = tps_quant_str(qc, "format");
    if (fmt && strcmp(fmt, "float-quantized") != 0 && strcmp(fmt, "naive-quantized") != 0)
        return tps_fail(err, TPS_EINVALID, "%s: quantization_config: compressed-tensors format \"%s\" is not one tpshard "
                        "splits yet (float-quantized FP8 is)", what, fmt);
    const tps_json *groups = tps_json_get(qc, "config_groups");
    if (!groups || groups->type != TPS_JSON_OBJECT || groups->u.object.n == 0)
        return tps_fail(err, TPS_EINVALID, "%s: quantization_config: compressed-tensors needs config_groups", what);
    if ((st = tps_quant_new_groups(q, groups->u.object.n, err)) != TPS_OK) return st;
    size_t used = 0;
    for (size_t i = 0; i < groups->u.object.n; i++) {
        const char *gname = groups->u.object.keys[i]->u.string.s;
        const tps_json *g = groups->u.object.values[i], *w = tps_json_get(g, "weights");
        tps_quant_group *qg = &q->groups[q->ngroups++];
        if ((st = tps_quant_patterns(tps_json_get(g, "targets"), what, "targets", &qg->targets, &qg->ntargets, err)) !=
            TPS_OK)
            return st;
        const tps_json *bits = tps_json_get(w, "num_bits");
        const char *type = tps_quant_str(w, "type"), *strategy = tps_quant_str(w, "strategy");
        if (!w || w->type != TPS_JSON_OBJECT || !bits || bits->type != TPS_JSON_NUMBER || bits->u.number.u64 != 8 ||
            !type || strcmp(type, "float") != 0)
            return tps_fail(err, TPS_EINVALID, "%s: quantization_config group %s: only 8-bit float weights "
                            "(FP8) are split by tpshard yet", what, gname);
        if (!strategy || strcmp(strategy, "tensor") == 0) {
            tps_quant_fp8_scheme(&qg->s, TPS_FP8_TENSOR, "weight_scale", 0, 0);
        } else if (strcmp(strategy, "channel") == 0) {
            tps_quant_fp8_scheme(&qg->s, TPS_FP8_CHANNEL, "weight_scale", 0, 0);
        } else if (strcmp(strategy, "block") == 0) {
            uint64_t bn, bk;
            if ((st = tps_quant_block_size(tps_json_get(w, "block_structure"), what, "block_structure", &bn, &bk,
                                           err)) != TPS_OK)
                return st;
            tps_quant_fp8_scheme(&qg->s, TPS_FP8_BLOCK, "weight_scale", bn, bk);
        } else {
            return tps_fail(err, TPS_EINVALID, "%s: quantization_config group %s: weight strategy \"%s\" is not one "
                            "tpshard splits (tensor, channel, block)", what, gname, strategy);
        }
        used += (size_t)snprintf(q->desc + used, used < sizeof q->desc ? sizeof q->desc - used : 0, "%s%s",
                                 i ? ", " : "compressed-tensors (", qg->s.name);
    }
    if ((st = tps_quant_patterns(tps_json_get(qc, "ignore"), what, "ignore", &q->ignore, &q->nignore, err)) != TPS_OK)
        return st;
    if (used < sizeof q->desc) snprintf(q->desc + used, sizeof q->desc - used, ")");
    return TPS_OK;
}
