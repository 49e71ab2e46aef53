/* The reference's block kernels (verify/math/ref_kernel.h): every kernel this build has and
 * this CPU runs, called directly, against the portable one and a plain float64 loop written
 * here (bit for bit: same products, same order, no fused multiply-add) and against a long
 * double sum (the error bound), on odd k (0, 1, 3, 7, 513, ...), a row stride past kc,
 * accumulators that start non-zero, and unaligned pointers; then each forced (as
 * TPS_VREF_KERNEL forces it) through the reference's Linear, whose row, token and k-chunk
 * tails are not multiples of the block, against the plain float64 loops.  A kernel the CPU
 * cannot run is a "skip" line.  Also: TPS_VREF_KERNEL read at the first call, and a name that
 * is no kernel refused with a line on stderr. */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "../../verify/math/ops.h"
#include "../../verify/math/ref_kernel.h"
#include "tps_test.h"

enum { R = TPS_VREF_R, T = TPS_VREF_T, KMAX = 1100, LDW = KMAX + 5 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* Values over 2^-20..2^20 of both signs, so that another order or an FMA changes the bits. */
static double spread(void)
{
    double u = tps_test_uniform(&rng) * 2 - 1;
    return ldexp(u, (int)(tps_test_uniform(&rng) * 40) - 20);
}

/* One block's inputs, at offset one double from malloc's alignment. */
static double *wbuf, *xbuf, *w, *xt;
static double acc0[R][T];

static void fill(void)
{
    for (size_t i = 0; i < (size_t)R * LDW; i++) w[i] = spread();
    for (size_t i = 0; i < (size_t)KMAX * T; i++) xt[i] = spread();
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) acc0[r][t] = spread();
}

/* tps_vref_block's contract as the plain loop, and the same sums with fma() (to show that
 * the bitwise check can tell an FMA kernel). */
static void plain(size_t kc, bool fused, double acc[R][T])
{
    memcpy(acc, acc0, sizeof acc0);
    for (size_t k = 0; k < kc; k++)
        for (int r = 0; r < R; r++)
            for (int t = 0; t < T; t++) {
                double p = w[(size_t)r * LDW + k] * xt[k * T + t];
                acc[r][t] = fused ? fma(w[(size_t)r * LDW + k], xt[k * T + t], acc[r][t]) : acc[r][t] + p;
            }
}

/* The worst error of acc against the long double sum, over the sum of |terms|. */
static double worst_error(size_t kc, double acc[R][T])
{
    double worst = 0;
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) {
            long double s = acc0[r][t], a = fabsl((long double)acc0[r][t]);
            for (size_t k = 0; k < kc; k++) {
                long double p = (long double)w[(size_t)r * LDW + k] * xt[k * T + t];
                s += p;
                a += fabsl(p);
            }
            double e = (double)(fabsl((long double)acc[r][t] - s) / a);
            if (e > worst) worst = e;
        }
    return worst;
}

static const tps_vref_kernel *kernel;

TEST(kernel_vs_portable)
{
    static const size_t ks[] = {0, 1, 2, 3, 7, 16, 64, 511, 512, 513, KMAX};
    size_t n;
    const tps_vref_kernel *portable = &tps_vref_kernels(&n)[0];
    double worst = 0;
    int fma_differs = 0;
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
        size_t kc = ks[i];
        fill();
        /* Unaligned accumulators too: the kernels load and store them by memcpy. */
        static double abuf[R * T + 1], pacc[R][T], lacc[R][T], facc[R][T];
        double (*acc)[T] = (double (*)[T])(abuf + 1);
        memcpy(acc, acc0, sizeof acc0);
        memcpy(pacc, acc0, sizeof acc0);
        kernel->block(kc, w, LDW, xt, acc);
        portable->block(kc, w, LDW, xt, pacc);
        plain(kc, false, lacc);
        plain(kc, true, facc);
        CHECK(memcmp(acc, pacc, sizeof pacc) == 0);
        CHECK(memcmp(acc, lacc, sizeof lacc) == 0);
        fma_differs += memcmp(facc, lacc, sizeof lacc) != 0;
        double e = worst_error(kc, acc);
        if (e > worst) worst = e;
    }
    printf("# %s kernel vs long double: worst error %.2g of the sum of |terms|\n", kernel->name, worst);
    CHECK(worst < 1e-14);
    CHECK(fma_differs > 0); /* the inputs are such that a fused kernel would fail the check */
}

/* The reference's Linear with this kernel forced: 7 rows (a block of 4 and 3), 21 tokens (16
 * and 5), K 1100 (chunks of 512, 512, 76) of a weight 1201 wide, from its row 3; against the plain float64 loops bit for bit. */
TEST(linear_forced)
{
    enum { N = 21, IN = 1201, OUT = 12, I0 = 0, I1 = 1100, O0 = 3, O1 = 10 };
    static float v[IN * OUT];
    static double x[N * IN], y[N * OUT], l[N * OUT];
    for (size_t i = 0; i < IN * OUT; i++) v[i] = (float)spread();
    for (size_t i = 0; i < N * IN; i++) x[i] = spread();
    tps_vt wt;
    memset(&wt, 0, sizeof wt);
    wt.name = (char *)"w";
    wt.dtype = TPS_DT_F32;
    wt.ndim = 2;
    wt.shape[0] = OUT;
    wt.shape[1] = IN;
    wt.nelem = IN * OUT;
    wt.data = (unsigned char *)v;
    tps_error err;
    tps_error_clear(&err);
    CHECK(tps_vref_kernel_force(kernel->name));
    CHECK_STR(tps_vref_kernel_name(), kernel->name);
    CHECK(tps_vlinear_rows_f64(&wt, NULL, false, N, x, IN, I1 - I0, O0, O1, y, O1 - O0, &err) == TPS_OK);
    CHECK(tps_vlinear_loop_f64(&wt, false, N, x, IN, I0, I1, O0, O1, l, O1 - O0, &err) == TPS_OK);
    CHECK(memcmp(y, l, (size_t)N * (O1 - O0) * sizeof *y) == 0);
}

/* Set before the first call (main's first step): the environment's choice. */
TEST(env_chooses)
{
    CHECK_STR(tps_vref_kernel_name(), "portable");
}

/* A name that is no kernel: the widest one runs, and stderr says so. */
TEST(env_refused)
{
    size_t n;
    const tps_vref_kernel *ks = tps_vref_kernels(&n);
    const char *widest = ks[0].name;
    for (size_t i = 1; i < n; i++)
        if (ks[i].runs_here()) widest = ks[i].name;
    setenv("TPS_VREF_KERNEL", "sse9", 1);
    char path[] = "/tmp/tps_vref_XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    CHECK(fd >= 0 && saved >= 0);
    fflush(stderr);
    dup2(fd, 2);
    CHECK(tps_vref_kernel_force(NULL));
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char said[256] = "";
    ssize_t got = pread(fd, said, sizeof said - 1, 0);
    said[got > 0 ? got : 0] = 0;
    close(fd);
    unlink(path);
    CHECK_CONTAINS(said, "TPS_VREF_KERNEL=sse9: not a kernel of this build (portable");
    CHECK_STR(tps_vref_kernel_name(), widest);
    CHECK(!tps_vref_kernel_force("sse9"));
    CHECK_STR(tps_vref_kernel_name(), widest);
    unsetenv("TPS_VREF_KERNEL");
}

int main(void)
{
    setenv("TPS_VREF_KERNEL", "portable", 1);
    RUN(env_chooses);
    wbuf = malloc(((size_t)R * LDW + 1) * sizeof *wbuf);
    xbuf = malloc(((size_t)KMAX * T + 1) * sizeof *xbuf);
    w = wbuf + 1;
    xt = xbuf + 1;
    size_t n;
    const tps_vref_kernel *ks = tps_vref_kernels(&n);
    for (size_t i = 0; i < n; i++) {
        kernel = &ks[i];
        if (!kernel->runs_here()) {
            printf("skip - ref_kernel %s: this CPU cannot run it (built in, not tested here)\n", kernel->name);
            continue;
        }
        printf("# ref_kernel %s\n", kernel->name);
        RUN(kernel_vs_portable);
        RUN(linear_forced);
    }
    RUN(env_refused);
    free(wbuf);
    free(xbuf);
    return tps_test_done();
}
