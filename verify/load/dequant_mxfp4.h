/* MXFP4 experts (GPT-OSS; lib/quant/mxfp4.h says the layout) turned back into the
 * fused bf16 tensors the layer math reads, for one party's pieces (the whole checkpoint, or
 * one rank's slices):
 *
 *   NAME_blocks U8 [E, R, G, 16], NAME_scales U8 [E, R, G]  ->  NAME BF16 [E, G * 32, R]
 *   value = FP4_e2m1(nibble) * 2^(scale - 127), the low nibble first (OCP MX; transformers
 *   integrations/mxfp4.py convert_moe_packed_tensors), then each expert transposed to the
 *   [in, out] layout of the BF16 checkpoints (gate_up_proj [E, H, 2I], down_proj [E, I, H]).
 *
 * Every such value is exact in BF16 (two significant bits times a power of two), so the
 * fused tensor costs what the BF16 checkpoint's does.  vLLM then swizzles the blocks for its kernel, which is
 * no part of what a rank holds. */
#ifndef TPS_VERIFY_DEQUANT_MXFP4_H
#define TPS_VERIFY_DEQUANT_MXFP4_H

#include <stdbool.h>

#include "source.h"

/* When src lacks name but holds name_blocks and name_scales, dequantizes them into out
 * (*done true); else leaves out alone (*done false).  Shapes that do not fit each other are
 * TPS_EMISMATCH naming both tensors (a wrong cut of a rank reads as a mismatch). */
tps_status tps_vload_mxfp4(const tps_vsource *src, const char *name, tps_vt *out, bool *done, tps_error *err);

#endif
