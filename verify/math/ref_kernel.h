/* The reference's own float64 GEMM kernel (issue 36): the layer's linears for the float64
 * reference run here, not through the BLAS the ranks use (sgemm), so that a fault in either
 * product cannot hide itself by appearing on both sides. */
#ifndef TPS_VERIFY_MATH_REF_KERNEL_H
#define TPS_VERIFY_MATH_REF_KERNEL_H

#include <stdbool.h>
#include <stddef.h>

#include "tensor.h"

/* Tokens and weight rows per block: 4 rows x 16 tokens of float64 sums, each token block's
 * input read once per 4 rows (each kernel holds as many of them in registers as it has room
 * for: verify/math/ref_kernel_tmpl.h). */
#define TPS_VREF_T 16
#define TPS_VREF_R 4 /* tps_vref_block names its four rows */

/* acc[r][t] += sum over k < kc of w[r * ldw + k] * xt[k * TPS_VREF_T + t], for r < TPS_VREF_R:
 * every product and sum in float64, each accumulator summed in k order (no reassociation, no
 * fused multiply-add), so that every kernel gives the same bits.  Runs the kernel
 * tps_vref_kernel_name names. */
void tps_vref_block(size_t kc, const double *w, size_t ldw, const double *xt, double acc[TPS_VREF_R][TPS_VREF_T]);

/* The kernels this build has, one per instruction set: "portable" (plain C vectors of two
 * doubles: SSE2 on x86-64, NEON on AArch64), and on x86-64 "avx2" and "avx512".  runs_here says
 * whether this CPU (and its OS) can run it. */
typedef void tps_vref_block_fn(size_t kc, const double *w, size_t ldw, const double *xt,
                               double acc[TPS_VREF_R][TPS_VREF_T]);
typedef struct tps_vref_kernel {
    const char *name;
    tps_vref_block_fn *block;
    bool (*runs_here)(void);
} tps_vref_kernel;
const tps_vref_kernel *tps_vref_kernels(size_t *n);

/* The kernel tps_vref_block runs: chosen at its first call, the widest one the CPU runs, or the
 * one the environment variable TPS_VREF_KERNEL names (portable, avx2, avx512: to measure or
 * test a narrower one; a name this build or CPU cannot run is refused with a line on stderr). */
const char *tps_vref_kernel_name(void);

/* For tests and benchmarks: run the kernel called name from now on (false, and no change,
 * when this build or CPU has none by that name); NULL chooses again as the first call does,
 * reading TPS_VREF_KERNEL anew.  Not while another thread runs the reference. */
bool tps_vref_kernel_force(const char *name);


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
