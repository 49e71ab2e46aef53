/* Quantized weights turned back into what the layer math reads (verify/load/dequant.c). */
#ifndef TPS_VERIFY_LOAD_DEQUANT_H
#define TPS_VERIFY_LOAD_DEQUANT_H

#include "source.h"

/* When w is an FP8 weight with a scale beside it in src (NAME_scale_inv, NAME_scale),
 * replaces its data with the dequantized values in F32 (weight times its tensor, channel or
 * block scale; the block from b->fp8_block); otherwise leaves it as it is. */
tps_status tps_vdequant(const tps_block *b, const tps_vsource *src, tps_vt *w, tps_error *err);

/* The weight called name as the layer math reads it: GPTQ/AWQ linears and FP8 weights
 * dequantized with the companions src holds beside them (b's quantization_config). */
tps_status tps_vload_weight(const tps_block *b, const tps_vsource *src, const char *name, tps_vt *out, tps_error *err);

/* tps_vload_weight, but an FP8 weight with a scale stays FP8 with the scale beside it
 * (verify/math/tensor.h, tps_vscale) instead of widened to F32: what a layer's parties hold,
 * so that a real-size DeepSeek-V3 layer's attention costs a byte an element, not four. */
tps_status tps_vload_held(const tps_block *b, const tps_vsource *src, const char *name, tps_vt *out, tps_error *err);

#endif
