/* GPTQ and AWQ (integer weight-only quantization, quant_method "gptq" and "awq") as companion
 * schemes (lib/quant/scheme.h).
 *
 * GPTQ (AutoGPTQ / GPTQModel, quant_method "gptq"), pf = 32 / bits, W[out, in]:
 *   qweight [in/pf, out]        PackedvLLMParameter(packed_dim 0): dim 0 is W's in / pf
 *   scales  [cdiv(in, g), out]  GroupQuantScaleParameter, or ChannelQuantScaleParameter
 *   qzeros  [cdiv(in, g), out/pf]  (whole on every rank of a row-parallel layer) with
 *                               act-order (desc_act) or one group (group_size -1)
 *   g_idx   [in]                RowvLLMParameter: whole on column-parallel layers, cut with
 *                               the input rows on row-parallel ones (its values stay global)
 * AWQ GEMM (AutoAWQ, quant_method "awq", version "gemm"), 4-bit:
 *   qweight [in, out/8], scales [in/g, out], qzeros [in/g, out/8]: all cut, nothing whole
 *
 * The engine's legality rule (vLLM GPTQLinearMethod / AWQLinearMethod.create_weights) is the
 * scheme's align: a rank's output columns a multiple of pf (whole packed words), its input
 * rows a multiple of the group size and of pf, whatever desc_act says. */
#include <stdio.h>
#include <string.h>

#include "quant_int.h"

/* An integer key: absent gives def; -1 or a positive value, else refused. */
static tps_status int_key(const tps_json *qc, const char *key, const char *alt, int64_t def, const char *what,
                          int64_t *out, tps_error *err)
{
    const tps_json *v = tps_json_get(qc, key);
    if ((!v || v->type == TPS_JSON_NULL) && alt) v = tps_json_get(qc, alt);
    if (!v || v->type == TPS_JSON_NULL) {
        *out = def;
        return TPS_OK;
    }
    if (v->type == TPS_JSON_NUMBER && v->u.number.is_u64 && v->u.number.u64 > 0 && v->u.number.u64 <= (1u << 24)) {
        *out = (int64_t)v->u.number.u64;
        return TPS_OK;
    }
    if (v->type == TPS_JSON_NUMBER && v->u.number.f64 == -1.0) {
        *out = -1;
        return TPS_OK;
    }
    return tps_fail(err, TPS_EINVALID, "%s: quantization_config \"%s\" must be a positive integer or -1", what, key);
}

static bool bool_key(const tps_json *qc, const char *key)
{
    const tps_json *v = tps_json_get(qc, key);
    return v && v->type == TPS_JSON_BOOL && v->u.boolean;
}

/* The scheme of a "gptq" (awq false) or "awq" quantization_config qc; what names the file.
 * Refuses what vLLM does not load or tpshard cannot cut exactly (3-bit's fractional pack,
 * GPTQModel's per-module "dynamic" overrides, AWQ other than GEMM). */
static tps_status int_scheme(const tps_json *qc, bool awq, const char *what, tps_quant_scheme *s, tps_error *err)
{
    tps_status st;
    int64_t bits, g;
    const char *m = awq ? "awq" : "gptq";
    memset(s, 0, sizeof *s);
    if ((st = int_key(qc, "bits", "w_bit", 4, what, &bits, err)) != TPS_OK) return st;
    if ((st = int_key(qc, "group_size", "q_group_size", -1, what, &g, err)) != TPS_OK) return st;
    if (awq ? bits != 4 : (bits != 2 && bits != 4 && bits != 8))
        return tps_fail(err, TPS_EINVALID, "%s: quantization_config: %s with bits %lld is not split by tpshard (%s); "
                        "%s", what, m, (long long)bits, awq ? "AWQ GEMM packs 4-bit" : "GPTQ with 2, 4 or 8 bits",
                        bits == 3 ? "3-bit packs 32 values into 3 words, so a cut between words is not a cut "
                        "between input rows" : "the packed words would not split evenly");
    uint64_t pf = 32 / (uint64_t)bits;
    if (g != -1 && (uint64_t)g % pf != 0 && pf % (uint64_t)g != 0)
        return tps_fail(err, TPS_EINVALID, "%s: quantization_config: group_size %lld and the pack factor %llu of %lld-bit "
                        "words do not nest", what, (long long)g, (unsigned long long)pf, (long long)bits);
    bool act = false;
    if (awq) {
        const tps_json *ver = tps_json_get(qc, "version");
        const char *v = ver && ver->type == TPS_JSON_STRING ? ver->u.string.s : "gemm";
        if (strcmp(v, "gemm") != 0 && strcmp(v, "GEMM") != 0)
            return tps_fail(err, TPS_EINVALID, "%s: quantization_config: AWQ version \"%s\" stores qweight [out, in/8] "
                            "with padded zeros; vLLM loads the GEMM layout only, and so does tpshard", what, v);
    } else {
        const tps_json *dyn = tps_json_get(qc, "dynamic");
        if (dyn && dyn->type == TPS_JSON_OBJECT && dyn->u.object.n)
            return tps_fail(err, TPS_EINVALID, "%s: quantization_config: GPTQModel \"dynamic\" overrides bits or group "
                            "size per module; tpshard does not evaluate them yet, and a cut by the global group size "
                            "could fall inside a module's own group", what);
        act = bool_key(qc, "desc_act") && g != -1; /* vLLM forces desc_act off for one group */
        const tps_json *fmt = tps_json_get(qc, "checkpoint_format");
        const char *f = fmt && fmt->type == TPS_JSON_STRING ? fmt->u.string.s : "gptq";
        if (strcmp(f, "gptq") != 0 && strcmp(f, "gptq_v2") != 0)
            return tps_fail(err, TPS_EINVALID, "%s: quantization_config: GPTQ checkpoint_format \"%s\" is not "
                            "\"gptq\" or \"gptq_v2\": its zeros' convention is unknown", what, f);
        s->gptq_v2 = strcmp(f, "gptq_v2") == 0;
    }
    s->int_bits = (unsigned)bits;
    uint64_t gu = g == -1 ? 0 : (uint64_t)g;
    int gdim = g == -1 ? -1 : 1; /* one group row: no dim of W, whole on a row cut */
    if (awq) {
        tps_quant_add_companion(s, "qweight", 2, 1, 1, 0, pf, true, false);
        tps_quant_add_companion(s, "scales", 2, gdim, g == -1 ? 1 : gu, 0, 1, false, false);
        tps_quant_add_companion(s, "qzeros", 2, gdim, g == -1 ? 1 : gu, 0, pf, false, false);
    } else {
        tps_quant_add_companion(s, "qweight", 2, 1, pf, 0, 1, true, false);
        tps_quant_add_companion(s, "scales", 2, gdim, g == -1 ? 1 : gu, 0, 1, false, act);
        tps_quant_add_companion(s, "qzeros", 2, gdim, g == -1 ? 1 : gu, 0, pf, false, act);
        tps_quant_add_companion(s, "g_idx", 1, 1, 1, -1, 1, false, false);
    }
    s->align[0] = pf;
    s->align[1] = g == -1 || gu < pf ? pf : gu;
    if (g == -1)
        snprintf(s->name, sizeof s->name, "%s %lld-bit channelwise", m, (long long)bits);
    else
        snprintf(s->name, sizeof s->name, "%s %lld-bit group %lld%s", m, (long long)bits, (long long)g,
                 act ? " act-order" : "");
    /* A refusal's words: a group size rules the input dim, the pack factor (values to a
     * 32-bit word) the output dim and an input dim without smaller groups. */
    const char *method = awq ? "AWQ" : "GPTQ";
    snprintf(s->rule[0], sizeof s->rule[0], "%s %u-bit packed %u to a word", method, s->int_bits, (unsigned)pf);
    if (s->align[1] != pf)
        snprintf(s->rule[1], sizeof s->rule[1], "%s group size %llu", method, (unsigned long long)s->align[1]);
    else
        memcpy(s->rule[1], s->rule[0], sizeof s->rule[1]);
    return TPS_OK;
}

/* One scheme for every module; modules_to_not_convert as transformers reads it. */
static tps_status read_int(tps_quant *q, const tps_json *qc, bool awq, const char *what, tps_error *err)
{
    tps_status st;
    if ((st = tps_quant_new_groups(q, 1, err)) != TPS_OK) return st;
    q->ngroups = 1;
    if ((st = int_scheme(qc, awq, what, &q->groups[0].s, err)) != TPS_OK) return st;
    if ((st = tps_quant_not_converted(q, qc, what, "modules_to_not_convert", err)) != TPS_OK) return st;
    snprintf(q->desc, sizeof q->desc, "%s", q->groups[0].s.name);
    return TPS_OK;
}

tps_status tps_quant_read_gptq(tps_quant *q, const tps_json *qc, const char *what, tps_error *err)
{
    return read_int(q, qc, false, what, err);
}

tps_status tps_quant_read_awq(tps_quant *q, const tps_json *qc, const char *what, tps_error *err)
{
    return read_int(q, qc, true, what, err);
}
