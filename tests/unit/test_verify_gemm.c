/* verify's linears (verify/math/ops_tmpl.h) both ways: through the BLAS when tpshard was built
 * with one (make config), and through the plain loops that are its fallback, each against a
 * brute-force float64 sum of the same BF16 / F32 weights written here, for a Linear [out, in]
 * and a Conv1D [in, out], a sub-range of the rows, and a token count that is not a multiple
 * of the loops' block.  Built without a BLAS, both calls are the loops (a skip line says so).
 * The reference's Linear (float64) takes its own kernel (verify/math/ref_kernel.c), not the
 * BLAS: ref_kernel checks it bit for bit against the plain loops (same products, same order)
 * across its row, token and k-chunk edges, and against a long double sum. */
#include <math.h>
#include <stdlib.h>

#include "../../verify/math/ops.h"
#include "tps_test.h"

enum { N = 19, IN = 300, OUT = 70, O0 = 5, O1 = 61 };

static uint64_t rng = 0x243f6a8885a308d3ull;
static double uniform(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / 9007199254740992.0 * 2 - 1;
}

/* A weight of `rows` x `cols` in dtype dt, its values (as stored) also in v. */
static void make_weight(tps_vt *w, tps_dtype dt, uint64_t rows, uint64_t cols, double *v)
{
    memset(w, 0, sizeof *w);
    w->name = (char *)"w";
    w->dtype = dt;
    w->ndim = 2;
    w->shape[0] = rows;
    w->shape[1] = cols;
    w->nelem = rows * cols;
    size_t es = dt == TPS_DT_BF16 ? 2 : 4;
    unsigned char *p = malloc(w->nelem * es);
    for (uint64_t i = 0; i < w->nelem; i++) {
        float f = (float)uniform();
        uint32_t u;
        memcpy(&u, &f, 4);
        if (dt == TPS_DT_BF16) {
            u &= 0xffff0000u; /* truncated: the stored value is exactly this float */
            memcpy(&f, &u, 4);
            uint16_t h = (uint16_t)(u >> 16);
            memcpy(p + 2 * i, &h, 2);
        } else {
            memcpy(p + 4 * i, &f, 4);
        }
        v[i] = f;
    }
    w->data = p;
}

/* y (stride ldy) against sum_i x[t, i] W(o, i) in float64, within rtol of the sum of |terms|. */
static int close_f32(const float *y, const double *x, const double *v, bool conv1d, double rtol)
{
    for (size_t t = 0; t < N; t++)
        for (size_t o = O0; o < O1; o++) {
            double s = 0, a = 0;
            for (size_t i = 0; i < IN; i++) {
                double wv = conv1d ? v[i * OUT + o] : v[o * IN + i];
                s += x[t * IN + i] * wv;
                a += fabs(x[t * IN + i] * wv);
            }
            if (!(fabs(y[t * (O1 - O0) + (o - O0)] - s) <= rtol * a)) return 0;
        }
    return 1;
}

static int close_f64(const double *y, const double *x, const double *v, bool conv1d, double rtol)
{
    float *yf = malloc(N * (O1 - O0) * sizeof *yf);
    int ok = 1;
    for (size_t i = 0; i < (size_t)N * (O1 - O0); i++) yf[i] = (float)y[i];
    ok = close_f32(yf, x, v, conv1d, rtol + 1e-7); /* float rounding of y only */
    free(yf);
    return ok;
}

static void both_paths(tps_dtype dt, bool conv1d)
{
    static double v[IN * OUT], x64[N * IN], y64[N * (O1 - O0)], l64[N * (O1 - O0)];
    static float x32[N * IN], y32[N * (O1 - O0)], l32[N * (O1 - O0)];
    tps_vt w;
    make_weight(&w, dt, conv1d ? IN : OUT, conv1d ? OUT : IN, v);
    for (size_t i = 0; i < N * IN; i++) x32[i] = (float)uniform(), x64[i] = x32[i];
    tps_error err;
    tps_error_clear(&err);
    CHECK(tps_vlinear_rows_f32(&w, NULL, conv1d, N, x32, IN, IN, O0, O1, y32, O1 - O0, &err) == TPS_OK);
    CHECK(tps_vlinear_loop_f32(&w, conv1d, N, x32, IN, 0, IN, O0, O1, l32, O1 - O0, &err) == TPS_OK);
    CHECK(tps_vlinear_rows_f64(&w, NULL, conv1d, N, x64, IN, IN, O0, O1, y64, O1 - O0, &err) == TPS_OK);
    CHECK(tps_vlinear_loop_f64(&w, conv1d, N, x64, IN, 0, IN, O0, O1, l64, O1 - O0, &err) == TPS_OK);
    CHECK(close_f32(y32, x64, v, conv1d, 1e-5));
    CHECK(close_f32(l32, x64, v, conv1d, 1e-5));
    CHECK(close_f64(y64, x64, v, conv1d, 1e-12));
    CHECK(close_f64(l64, x64, v, conv1d, 1e-12));
    free(w.data);
}

/* The kernel's blocks: 7 rows (one partial block of 4), 21 tokens (one partial block of 16),
 * 1100 inputs (three chunks of 512) of a weight 1200 wide, from its row 3. */
TEST(ref_kernel)
{
    enum { KN = 21, KIN = 1200, KOUT = 12, KI0 = 0, KI1 = 1100, KO0 = 3, KO1 = 10 };
    static double v[KIN * KOUT], x[KN * KIN], y[KN * KOUT], l[KN * KOUT];
    tps_vt w;
    make_weight(&w, TPS_DT_BF16, KOUT, KIN, v);
    for (size_t i = 0; i < KN * KIN; i++) x[i] = uniform();
    size_t K = KI1 - KI0, O = KO1 - KO0;
    tps_error err;
    tps_error_clear(&err);
    CHECK(tps_vlinear_rows_f64(&w, NULL, false, KN, x, KIN, K, KO0, KO1, y, O, &err) == TPS_OK);
    CHECK(tps_vlinear_loop_f64(&w, false, KN, x, KIN, KI0, KI1, KO0, KO1, l, O, &err) == TPS_OK);
    double worst = 0;
    for (size_t t = 0; t < KN; t++)
        for (size_t o = 0; o < O; o++) {
            long double s = 0, a = 0;
            for (size_t i = KI0; i < KI1; i++) {
                long double p = (long double)x[t * KIN + i] * v[(KO0 + o) * KIN + i];
                s += p;
                a += fabsl(p);
            }
            double e = (double)(fabsl((long double)y[t * O + o] - s) / a);
            if (e > worst) worst = e;
            CHECK(memcmp(&y[t * O + o], &l[t * O + o], sizeof(double)) == 0);
        }
    printf("# reference kernel vs long double: worst error %.2g of the sum of |terms| (K %zu)\n", worst, K);
    CHECK(worst < 1e-14);
    free(w.data);
}

TEST(linear_bf16) { both_paths(TPS_DT_BF16, false); }
TEST(linear_f32) { both_paths(TPS_DT_F32, false); }
TEST(conv1d_bf16) { both_paths(TPS_DT_BF16, true); }
TEST(conv1d_f32) { both_paths(TPS_DT_F32, true); }

int main(void)
{
    if (!tps_verify_blas()) printf("skip - the BLAS path: tpshard was built without a BLAS (make config)\n");
    RUN(linear_bf16);
    RUN(linear_f32);
    RUN(conv1d_bf16);
    RUN(conv1d_f32);
    RUN(ref_kernel);
    return tps_test_done();
}
