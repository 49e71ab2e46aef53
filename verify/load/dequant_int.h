/* Integer weight-only quantization (GPTQ, AWQ) turned back into the nn.Linear weight that the
 * layer math reads, for one party's pieces (the whole checkpoint, or one rank's slices).
 *
 * GPTQ (AutoGPTQ QuantLinear.pack; the project's quantization spec, 3.1), pf = 32 / bits:
 *   qweight I32 [K/pf, N]  word r holds input rows r*pf + j at bits*j
 *   qzeros  I32 [G, N/pf]  word c holds output columns c*pf + j at bits*j; the v1 format
 *                          (checkpoint_format gptq) stores zero - 1, gptq_v2 the zero
 *   scales      [G, N]     F16 (or BF16, F32)
 *   g_idx   I32 [K]        each input row's group: global group ids, so a rank's rows of a
 *                          row-parallel layer name groups from its first one on when its
 *                          scales are cut by groups, or index the whole scales when they are
 *                          replicated (act-order, channelwise)
 *   W[n][k] = (q[k][n] - z[g_idx[k]][n]) * s[g_idx[k]][n]
 * AWQ GEMM (AutoAWQ WQLinear_GEMM; spec 4.1), 4-bit:
 *   qweight I32 [K, N/8]   word c of a row: nibble i holds column 8c + [0,2,4,6,1,3,5,7][i]
 *   qzeros  I32 [G, N/8]   the zeros in the same order, no offset
 *   scales      [G, N]     row k's group is k / (K / G)
 *
 * A rank whose pieces do not fit together (shapes, a g_idx naming a group its scales do not
 * hold) gets TPS_EMISMATCH naming the tensor: that is a wrong cut, reported as a mismatch. */
#ifndef TPS_VERIFY_DEQUANT_INT_H
#define TPS_VERIFY_DEQUANT_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "source.h"

typedef enum tps_vqint_kind { TPS_VQINT_GPTQ, TPS_VQINT_AWQ } tps_vqint_kind;

typedef struct tps_vqint {
    tps_vqint_kind kind;
    unsigned bits;        /* GPTQ 2, 4 or 8; AWQ 4 */
    int64_t group;        /* group size as config.json says it; -1: one group (channelwise) */
    bool zero_minus_one;  /* GPTQ v1: the stored zero is zero - 1 */
} tps_vqint;

/* out (released by tps_vt_release) := the F32 weight [N, K] called name.  g_idx may be NULL
 * (AWQ; GPTQ without one: row k in group k / group).  F16 and BF16 scales times the small
 * integers q - z are exact in F32, so the reference and the ranks see the checkpoint's own
 * values. */
tps_status tps_vdequant_int(const tps_vqint *p, const char *name, const tps_vt *qweight, const tps_vt *qzeros,
                            const tps_vt *scales, const tps_vt *g_idx, tps_vt *out, tps_error *err);

/* When src holds MODULE.qweight in place of name = MODULE.weight (a GPTQ or AWQ linear), loads
 * its companions and dequantizes them into out (*done true); else leaves out alone (*done
 * false).  A g_idx makes it GPTQ, none AWQ GEMM 4-bit with groups of input rows / scale rows;
 * GPTQ's bits and zero convention come from b (config.json's quantization_config, as the
 * manifest records it: checkpoint_format gptq_v2 stores the zero, gptq zero - 1).  Without
 * them (b->int_bits 0) the bits are the ratio of the scales' columns to the qzeros' words
 * and the zeros v1, AutoGPTQ's default. */
tps_status tps_vload_int(const tps_block *b, const tps_vsource *src, const char *name, tps_vt *out, bool *done,
                         tps_error *err);

#endif
