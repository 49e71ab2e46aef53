/* The reference's own float64 GEMM kernel (issue 36): the layer's linears for the float64
 * reference run here, not through the BLAS the ranks use (sgemm), so that a fault in either
 * product cannot hide itself by appearing on both sides. */
#ifndef TPS_VERIFY_MATH_REF_KERNEL_H
#define TPS_VERIFY_MATH_REF_KERNEL_H

#include <stddef.h>

#include "tensor.h"

/* Tokens and weight rows per register block: 4 rows x 16 tokens of float64 accumulators
 * (8 AVX-512 or 16 AVX2 registers), each token block's input read once per 4 rows. */
#define TPS_VREF_T 16
#define TPS_VREF_R 4 /* tps_vref_block names its four rows */

/* acc[r][t] += sum over k < kc of w[r * ldw + k] * xt[k * TPS_VREF_T + t], for r < TPS_VREF_R:
 * every product and sum in float64, each accumulator summed in k order (no reassociation). */
void tps_vref_block(size_t kc, const double *w, size_t ldw, const double *xt, double acc[TPS_VREF_R][TPS_VREF_T]);


/* out[i] = the BF16 value at p[2 * i] (little-endian), widened exactly, for i < n: the
 * conversion every BF16 weight row takes on its way into either side's GEMM, vectorized
 * (a byte-wise loop cost as much as the reference's products). */
void tps_vbf16_f64(const unsigned char *p, size_t n, double *out);
void tps_vbf16_f32(const unsigned char *p, size_t n, float *out);

/* The device the reference's linears go to (tensor.h, tps_vref_dev), for the whole process:
 * set by a device backend once its devices are open, NULL (the host kernel) again before
 * they close.  One reference per process, computed by one thread at a time. */
void tps_vref_use_device(tps_vref_dev *d);
tps_vref_dev *tps_vref_device(void);

#endif
