/* GPTQ and AWQ (integer weight-only quantization) as companion schemes of lib/layout/quant.h.
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
#ifndef TPS_QUANT_INT_H
#define TPS_QUANT_INT_H

#include <stdbool.h>

#include "../base/json.h"
#include "../base/status.h"
#include "quant_scheme.h"

/* The scheme of a "gptq" (awq false) or "awq" quantization_config qc; what names the file.
 * Refuses what vLLM does not load or tpshard cannot cut exactly (3-bit's fractional pack,
 * GPTQModel's per-module "dynamic" overrides, AWQ other than GEMM). */
tps_status tps_quant_int_scheme(const tps_json *qc, bool awq, const char *what, tps_quant_scheme *s, tps_error *err);

#endif
