/* The layer math, generated twice from verify/math/ops_tmpl.h (float64 for the reference,
 * float32 for ranks): one implementation for every backend. */
#ifndef TPS_VERIFY_MATH_OPS_H
#define TPS_VERIFY_MATH_OPS_H

#include "qk_norm.h"
#include "share.h"

/* Whether the layer math converts this dtype (BF16, F16, F32, F64, F8_E4M3, F8_E5M2). */
bool tps_vdtype_supported(tps_dtype dt);

/* Layer math, one copy per precision (suffix _f64, _f32).  Inputs are [n, hidden] row
 * major; outputs [n, hidden].  add_bias adds the row-parallel output bias (o / down),
 * which a rank adds only after the all-reduce. */
#define VOPS_DECLARE(REAL, SFX)                                                                         \
    void tps_vnorm_##SFX(const tps_block *b, const vdims *d, const tps_vt *w, const tps_vt *bias, size_t n,  \
                     const REAL *x, REAL *out);                                                         \
    tps_status tps_vattn_##SFX(const tps_block *b, const vdims *d, const vlayer *l, const vattn_map *m,      \
                           size_t n, const REAL *xn, bool add_bias, REAL *out, tps_error *err);         \
    tps_status tps_vmlp_##SFX(const tps_block *b, const vdims *d, const vlayer *l, const vmlp_map *m,        \
                          size_t n, const REAL *xn, bool add_bias, REAL *out, tps_error *err);          \
    /* The MLP's row-parallel biases, added once after the all-reduce: down_proj's, and         \
     * GPT-OSS's expert down biases weighted by the routing of xn (the MLP's input). */          \
    tps_status tps_vmlp_out_bias_##SFX(const tps_block *b, const vdims *d, const vlayer *l, size_t n,   \
                                       const REAL *xn, REAL *out, tps_error *err);               \
    void tps_vadd_vec_##SFX(const tps_vt *v, size_t n, size_t dim, REAL *y);                               \
    /* Rotates heads in place: x[t, h * hd ..] for h < nh at position t (row stride ldx). */            \
    void tps_vrope_##SFX(const tps_block *b, const vdims *d, size_t n, size_t nh, REAL *x, size_t ldx);   \
    /* Rows of w ([rows, hidden], holding the global rows from row0) for the token ids:      \
     * out[t] = w[ids[t] - row0], or zeros for an id outside them (vocabulary parallel). */  \
    void tps_vembed_##SFX(const tps_vt *w, uint64_t row0, size_t n, const uint64_t *ids, REAL *out);     \
    /* y[t, j] (row stride ldy) = x[t] . w[j] for each row j of w ([rows, hidden]). */                \
    tps_status tps_vlogits_##SFX(const tps_vt *w, size_t n, const REAL *x, REAL *y, size_t ldy, tps_error *err);

VOPS_DECLARE(double, f64)
VOPS_DECLARE(float, f32)

/* The plain loops behind every linear when tpshard is built without a BLAS (make config;
 * HAVE_BLAS=0), kept callable so that a test compares them with the BLAS path:
 * y[t, o - o0] (stride ldy) = sum over i in [i0, i1) of x[t, i - i0] (stride ldx) * W(o, i),
 * W(o, i) = w[o, i] (a Conv1D: w[i, o]). */
tps_status tps_vlinear_loop_f64(const tps_vt *w, bool conv1d, size_t n, const double *x, size_t ldx, uint64_t i0,
                                uint64_t i1, uint64_t o0, uint64_t o1, double *y, size_t ldy, tps_error *err);
/* Whether the linears go through a BLAS (one found at run time: verify/math/blas.h). */
bool tps_verify_blas(void);
/* What the CPU's linears run on, for verify's report: the BLAS found ("OpenBLAS 0.3.21 Haswell
 * (libopenblas.so.0)"), or the plain loops and why; *missing is set when this build looks for
 * a BLAS and found none (the command then warns how to get one). */
const char *tps_verify_gemm_desc(bool *missing);
tps_status tps_vlinear_loop_f32(const tps_vt *w, bool conv1d, size_t n, const float *x, size_t ldx, uint64_t i0,
                                uint64_t i1, uint64_t o0, uint64_t o1, float *y, size_t ldy, tps_error *err);

/* y[t, o - o0] (row stride ldy) = x[t] . w[o] + bias[o] for the held rows o in [o0, o1) of
 * w ([rows, in], a Conv1D [in, rows]); bias NULL: none. */
tps_status tps_vlinear_rows_f64(const tps_vt *w, const tps_vt *bias, bool conv1d, size_t n, const double *x,
                                size_t ldx, uint64_t in, uint64_t o0, uint64_t o1, double *y, size_t ldy,
                                tps_error *err);
tps_status tps_vlinear_rows_f32(const tps_vt *w, const tps_vt *bias, bool conv1d, size_t n, const float *x,
                                size_t ldx, uint64_t in, uint64_t o0, uint64_t o1, float *y, size_t ldy,
                                tps_error *err);

/* The norms around a stage (verify/math/norms_tmpl.h; stage TPS_VSTAGE_ATTN or _MLP).  stage_norm:
 * the stage's input norm, or x unchanged where the layout names no pre-norm role (OLMo 2).
 * post_norm: the post-norm role's norm of the block output y, in place (nothing without
 * one); a rank applies it to its copy after the all-reduce and the row-parallel bias, so
 * the partial sums the driver compares stay those before it. */
#define VNORMS_DECLARE(REAL, SFX)                                                                                \
    void tps_vstage_norm_##SFX(const tps_block *b, const vdims *d, const vlayer *l, int stage, size_t n,           \
                               const REAL *x, REAL *out);                                                        \
    void tps_vpost_norm_##SFX(const tps_block *b, const vdims *d, const vlayer *l, int stage, size_t n, REAL *y);

VNORMS_DECLARE(double, f64)
VNORMS_DECLARE(float, f32)

#endif
