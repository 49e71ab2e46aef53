/* GPTQ and AWQ (integer weight-only quantization) as companion schemes of lib/quant.h.
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

#include "json.h"
#include "manifest.h"
#include "quant.h"
#include "status.h"

/* The scheme of a "gptq" (awq false) or "awq" quantization_config qc; what names the file.
 * Refuses what vLLM does not load or tpshard cannot cut exactly (3-bit's fractional pack,
 * GPTQModel's per-module "dynamic" overrides, AWQ other than GEMM). */
tps_status tps_quant_int_scheme(const tps_json *qc, bool awq, const char *what, tps_quant_scheme *s, tps_error *err);

/* vLLM's Marlin kernels (gptq_marlin, awq_marlin: GPTQ_MARLIN_MIN_THREAD_N / _K) tile a rank's
 * output in 64 columns and its input in 128 rows.  That is a kernel's minimum, not a rule of
 * the checkpoint: newer vLLM pads the tile or falls back to a slower kernel, older vLLM refuses
 * the layer.  So a cut that misses it is legal and only noted. */
#define TPS_MARLIN_MIN_N 64
#define TPS_MARLIN_MIN_K 128

typedef struct tps_marlin_note {
    uint64_t count;    /* GPTQ/AWQ linears with a rank piece of W the Marlin tile misses */
    char example[256]; /* the first one's packed weight (qweight) */
    int wdim;          /* its W dim: 0 output (needs % TPS_MARLIN_MIN_N), 1 input (% _K) */
    uint64_t local;    /* that rank's size of W along wdim */
} tps_marlin_note;

/* Counts the GPTQ/AWQ linears of m (quantized as q says; q NULL: none) whose cut gives some
 * rank a piece of W along the cut dimension that is not a multiple of Marlin's minimum.  Only
 * the dimension tp cuts is looked at: an uncut one is the model's, not the plan's.  Each
 * tensor is looked at on its own, though vLLM tiles fused q/k/v and gate/up by their sum. */
void tps_quant_marlin_note(const tps_quant *q, const tps_manifest *m, tps_marlin_note *out);

#endif
