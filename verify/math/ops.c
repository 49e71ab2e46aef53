/* The layer math in float64 (reference) and float32 (ranks): verify/math/ops_tmpl.h and
 * verify/math/norms_tmpl.h twice. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "llama4.h"
#include "moe_route.h"
#include "ref_kernel.h"
#include "rope.h"

#ifndef TPS_HAVE_BLAS /* the Makefile's probe sets it */
#define TPS_HAVE_BLAS 0
#endif
#if TPS_HAVE_BLAS
#include "blas.h"

/* The BLAS is looked for when the first linear asks for it (verify/math/blas.h), never linked
 * into tpshard: OpenBLAS's start-up allocates a buffer per thread before main, and under an
 * address-space limit (ulimit -v) that spins forever, so every command would hang there,
 * though only verify uses it.  None found, the linears take the plain loops. */
#endif

/* Tokens per block of the Linear kernel: 16 float64 accumulators fill 8 SSE registers. */
#define VTB 16

static float f16_tab[65536], e4m3_tab[256], e5m2_tab[256];
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

/* Lookup tables built from tps_dtype_to_f64, so the conversion rules live in one place
 * and the hot loops make no call per element.  Every F16/FP8 value is exact in float. */
static void tab_init(void)
{
    for (unsigned i = 0; i < 65536; i++) {
        unsigned char b[2] = {(unsigned char)(i & 0xff), (unsigned char)(i >> 8)};
        double v = 0;
        tps_dtype_to_f64(TPS_DT_F16, b, 0, &v);
        f16_tab[i] = (float)v;
    }
    for (unsigned i = 0; i < 256; i++) {
        unsigned char b = (unsigned char)i;
        double v = 0;
        tps_dtype_to_f64(TPS_DT_F8_E4M3, &b, 0, &v);
        e4m3_tab[i] = (float)v;
        tps_dtype_to_f64(TPS_DT_F8_E5M2, &b, 0, &v);
        e5m2_tab[i] = (float)v;
    }
}

static const float *vtable(tps_dtype dt)
{
    if (dt != TPS_DT_F16 && dt != TPS_DT_F8_E4M3 && dt != TPS_DT_F8_E5M2) return NULL;
    pthread_once(&tab_once, tab_init);
    return dt == TPS_DT_F16 ? f16_tab : dt == TPS_DT_F8_E4M3 ? e4m3_tab : e5m2_tab;
}

bool tps_vdtype_supported(tps_dtype dt)
{
    return dt == TPS_DT_BF16 || dt == TPS_DT_F32 || dt == TPS_DT_F64 || vtable(dt) != NULL;
}

bool tps_verify_blas(void)
{
#if TPS_HAVE_BLAS
    return tps_blas_get() != NULL;
#else
    return false;
#endif
}

const char *tps_verify_gemm_desc(bool *missing)
{
    *missing = false;
#if TPS_HAVE_BLAS
    const tps_blas *b = tps_blas_get();
    if (b) return b->name;
    *missing = true;
    return "plain loops (no BLAS found)";
#else
    return "plain loops (built with HAVE_BLAS=0)";
#endif
}

#define REAL double
#define SFX f64
#define VGEMM dgemm
#define VDEVICE_GEMM 0
#include "norms_tmpl.h"
#include "ops_tmpl.h"
#undef REAL
#undef SFX
#undef VGEMM
#undef VDEVICE_GEMM

#define REAL float
#define SFX f32
#define VGEMM sgemm
#define VDEVICE_GEMM 1
#include "norms_tmpl.h"
#include "ops_tmpl.h"
#undef REAL
#undef SFX
#undef VGEMM
#undef VDEVICE_GEMM
