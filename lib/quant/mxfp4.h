/* MXFP4 experts as GPT-OSS releases them (quantization_config.quant_method "mxfp4";
 * transformers 4.57 integrations/mxfp4.py), per layer, E experts, hidden H, intermediate I:
 *
 *   mlp.experts.gate_up_proj_blocks  U8 [E, 2I, H/32, 16]  two FP4 e2m1 values a byte (low
 *                                                          nibble first), 32 a block; rows
 *                                                          gate, up, gate, up, ... (interleaved)
 *   mlp.experts.gate_up_proj_scales  U8 [E, 2I, H/32]      e8m0: the block's factor 2^(s-127)
 *   mlp.experts.gate_up_proj_bias    BF16 [E, 2I]
 *   mlp.experts.down_proj_blocks     U8 [E, H, I/32, 16]
 *   mlp.experts.down_proj_scales     U8 [E, H, I/32]
 *   mlp.experts.down_proj_bias       BF16 [E, H]           (replicated: the layout's own rule)
 *
 * The cut is vLLM's (models/gpt_oss.py, _load_weights_mxfp4): the intermediate dimension goes
 * to the ranks in whole 32-wide blocks, cdiv(I/32, T) blocks a rank and the last rank the
 * rest (the uneven partition of lib/partition/partition.h): gate_up blocks, scales and bias by
 * rows [2s, 2e), unit 64 rows (32 (gate, up) pairs); down blocks and scales along their
 * block dimension [s/32, e/32) (vLLM views the blocks as [E, H, I/2] bytes and takes
 * [s/2, e/2): the same bytes).  Blocks and scales follow the layout's rule for their BF16
 * tensor (gate_up_proj [E, H, 2I], down_proj [E, I, H]), as a quantized linear's companions
 * follow their weight's (lib/quant/scheme.h), so one preset serves both forms; mxfp4.c checks
 * that rule cuts the intermediate dimension and adds the engine's unit and uneven rule. */
#ifndef TPS_QUANT_MXFP4_H
#define TPS_QUANT_MXFP4_H

#include <stdbool.h>
#include <stdint.h>

#define TPS_MXFP4_BLOCK 32

typedef struct tps_quant tps_quant;

/* Whether the checkpoint is MXFP4 (quant_method "mxfp4": GPT-OSS's experts; q may be NULL):
 * what verify dequantizes, and its ranks' uneven share. */
bool tps_quant_is_mxfp4(const tps_quant *q);

#endif
