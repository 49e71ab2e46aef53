/* The BLAS behind verify's linears, found at run time (never linked, never needed at build
 * time).  The CBLAS calling convention is fixed by the standard (enums are ints of fixed
 * values), so no cblas.h is needed: any OpenBLAS or reference CBLAS on the machine will do.
 *
 * Where it looks, in this order (the first that has cblas_sgemm and cblas_dgemm wins):
 *   1. $TPSHARD_BLAS, a path to a shared library (the Python API sets it from the
 *      scipy-openblas32 package's get_lib_dir()), its symbols plain or with scipy_'s prefix;
 *   2. the system's libopenblas.so.0, libopenblas.so, libcblas.so.3 (Debian: libopenblas0);
 *   3. scipy-openblas32 installed beside the executable (pip install tpshard puts tpshard in
 *      PREFIX/bin and the wheel in PREFIX/lib/pythonX.Y/site-packages/scipy_openblas32/lib),
 *      whose symbols carry the prefix scipy_ (its pkg-config's BLAS_SYMBOL_PREFIX).
 * None found: the linears take the plain loops (verify/math/ops_tmpl.h). */
#ifndef TPS_VERIFY_BLAS_H
#define TPS_VERIFY_BLAS_H

#include <stdbool.h>

enum { TPS_CBLAS_ROW_MAJOR = 101, TPS_CBLAS_NO_TRANS = 111, TPS_CBLAS_TRANS = 112 };

typedef void tps_cblas_sgemm_fn(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                                int lda, const float *b, int ldb, float beta, float *c, int ldc);
typedef void tps_cblas_dgemm_fn(int order, int ta, int tb, int m, int n, int k, double alpha, const double *a,
                                int lda, const double *b, int ldb, double beta, double *c, int ldc);

typedef struct {
    tps_cblas_sgemm_fn *sgemm;
    tps_cblas_dgemm_fn *dgemm;
    /* What was found, for verify's report: "OpenBLAS 0.3.21 Haswell (libopenblas.so.0)". */
    const char *name;
} tps_blas;

/* The BLAS this process uses, searched once (thread-safe); NULL when none was found. */
const tps_blas *tps_blas_get(void);

/* Where tps_blas_get looked, for the warning a run on the plain loops prints. */
const char *tps_blas_searched(void);

#endif
