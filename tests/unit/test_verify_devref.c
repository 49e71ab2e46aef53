/* The reference's float64 GEMM on a device (issue 36), run by the devsim plugin in every make
 * test: verify/ranks/device.c's ref_gemm (the weight's rows staged through two pinned buffers and
 * uploaded asynchronously, chunk by chunk) over the plugin's upload_async and gemm_f64, reached
 * the way the reference's math reaches it (tps_vlinear_rows_f64 through the hook of
 * verify/math/ref_kernel.h), against a brute-force float64 loop written here, which widens
 * every element with lib/base's tps_dtype_to_f64 (not the math's tables).  Every dtype the
 * device takes (BF16, F16, F32, F64, FP8 E4M3 with a block scale, FP8 E5M2 without), a Linear
 * and a Conv1D (whose chunks add into y), a column range that starts past 0, and chunks of a
 * few rows so that they cut across scale blocks and leave a short last chunk.  Then: a dtype the
 * device does not take stays on the host, and closing the device detaches it. */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>

#include "../../verify/math/ops.h"
#include "../../verify/math/ref_kernel.h"
#include "../../verify/ranks/device.h"
#include "tps_test.h"

enum { N = 5, IN = 45, OUT = 37, BN = 4, BK = 8 };

static uint64_t rng = 0x13198a2e03707344ull;
static uint64_t next(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return rng >> 16;
}
static double uniform(void)
{
    return (double)(next() >> 11) / 2199023255552.0 * 2 - 1; /* 2^41: next() has 48 bits */
}

static size_t esize(tps_dtype dt)
{
    return dt == TPS_DT_F64 ? 8 : dt == TPS_DT_F32 ? 4 : dt == TPS_DT_BF16 || dt == TPS_DT_F16 ? 2 : 1;
}

/* A [rows, cols] weight of dtype dt with finite random contents; v gets its values as the
 * reference must use them (scaled: (float)(value * scale), as tensor.h defines it). */
static void make_weight(tps_vt *w, tps_vscale *q, tps_dtype dt, uint64_t rows, uint64_t cols, bool scaled, double *v)
{
    memset(w, 0, sizeof *w);
    w->name = (char *)"w";
    w->dtype = dt;
    w->ndim = 2;
    w->shape[0] = rows;
    w->shape[1] = cols;
    w->nelem = rows * cols;
    size_t es = esize(dt);
    unsigned char *p = malloc(w->nelem * es);
    for (uint64_t i = 0; i < w->nelem; i++) {
        double d = uniform();
        float f = (float)d;
        uint32_t u;
        memcpy(&u, &f, 4);
        uint16_t h = (uint16_t)next();
        unsigned char b = (unsigned char)next();
        switch (dt) {
        case TPS_DT_F64: memcpy(p + 8 * i, &d, 8); break;
        case TPS_DT_F32: memcpy(p + 4 * i, &f, 4); break;
        case TPS_DT_BF16: h = (uint16_t)(u >> 16); memcpy(p + 2 * i, &h, 2); break;
        case TPS_DT_F16:
            if (((h >> 10) & 31) == 31) h &= 0xbfff; /* no infinity or NaN */
            memcpy(p + 2 * i, &h, 2);
            break;
        case TPS_DT_F8_E4M3:
            if ((b & 0x7f) == 0x7f) b &= 0xfe; /* no NaN */
            p[i] = b;
            break;
        default: /* E5M2 */
            if (((b >> 2) & 31) == 31) b &= 0xbf;
            p[i] = b;
        }
        CHECK(tps_dtype_to_f64(dt, p, (size_t)i, &v[i]));
    }
    w->data = p;
    if (!scaled) return;
    q->bn = BN;
    q->bk = BK;
    q->sc = (cols + BK - 1) / BK;
    size_t ns = (size_t)((rows + BN - 1) / BN * q->sc);
    q->s = malloc(ns * sizeof *q->s);
    for (size_t i = 0; i < ns; i++) q->s[i] = 0.75 + (double)(next() % 1000) / 1000;
    for (uint64_t i = 0; i < w->nelem; i++)
        v[i] = (float)(v[i] * q->s[(i / cols / BN) * q->sc + (i % cols) / BK]);
    w->scale = q;
}

/* y[t, o - o0] against the float64 sum over i in [i0, i1) of x[t, i - i0] W(o, i), within
 * 1e-13 of the sum of |terms| (the chunks of a Conv1D add in another order). */
static int matches(const double *y, size_t ldy, const double *x, size_t ldx, const double *v, bool conv1d,
                   uint64_t i0, uint64_t i1, uint64_t o0, uint64_t o1)
{
    uint64_t cols = conv1d ? OUT : IN;
    for (size_t t = 0; t < N; t++)
        for (uint64_t o = o0; o < o1; o++) {
            double s = 0, a = 0;
            for (uint64_t i = i0; i < i1; i++) {
                double p = x[t * ldx + (i - i0)] * (conv1d ? v[i * cols + o] : v[o * cols + i]);
                s += p;
                a += fabs(p);
            }
            double got = y[t * ldy + (o - o0)];
            if (!(fabs(got - s) <= 1e-13 * a)) {
                printf("#   token %zu output %llu: %.17g, the brute-force sum %.17g\n", t, (unsigned long long)o, got, s);
                return 0;
            }
        }
    return 1;
}

static const tps_dev_api *devsim(void)
{
    static const tps_dev_api *api;
    if (api) return api;
    void *h = dlopen(TPS_DEVSIM_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("#   %s\n", dlerror());
        return NULL;
    }
    tps_dev_plugin_fn get = (tps_dev_plugin_fn)(uintptr_t)dlsym(h, TPS_DEV_PLUGIN_SYMBOL);
    const size_t sizes[] = TPS_DEV_ABI_SIZES;
    api = get ? get(TPS_PLUGIN_ABI, sizes, sizeof sizes / sizeof sizes[0]) : NULL;
    return api;
}

/* One weight on the device reference, chunks of `rows_per_chunk` of its rows. */
static void one(tps_dtype dt, bool scaled, bool conv1d, uint64_t rows_per_chunk)
{
    const tps_dev_api *api = devsim();
    CHECK(api != NULL);
    if (!api) return;
    tps_dev_setup s = {.T = 1, .first = 0, .count = 1, .local_rank = -1};
    tps_vdev *d = NULL;
    tps_error err;
    tps_error_clear(&err);
    CHECK(tps_vdev_open(api, &s, &d, &err) == TPS_OK);
    if (!d) return;
    uint64_t rows = conv1d ? IN : OUT, cols = conv1d ? OUT : IN;
    tps_vdev_ref_attach(d, (size_t)(rows_per_chunk * cols * esize(dt)));
    CHECK(tps_vref_device() != NULL);
    static double v[IN * OUT], x[N * IN], y[N * OUT];
    tps_vt w;
    tps_vscale q = {0};
    make_weight(&w, &q, dt, rows, cols, scaled, v);
    for (size_t i = 0; i < N * IN; i++) x[i] = uniform();
    /* The whole product through the math's entry (tps_vlinear_rows_f64), outputs [3, OUT - 2). */
    memset(y, 0, sizeof y);
    CHECK(tps_vlinear_rows_f64(&w, NULL, conv1d, N, x, IN, IN, 3, OUT - 2, y, OUT, &err) == TPS_OK);
    CHECK(matches(y, OUT, x, IN, v, conv1d, 0, IN, 3, OUT - 2));
    /* Inputs [5, 40) and outputs [1, 30) through the hook itself (the math's i0 > 0 cases). */
    memset(y, 0, sizeof y);
    tps_vref_dev *rd = tps_vref_device();
    const float *tab = NULL;
    static float table[256];
    if (esize(dt) == 1) {
        for (unsigned b = 0; b < 256; b++) {
            unsigned char c = (unsigned char)b;
            double f = 0;
            tps_dtype_to_f64(dt, &c, 0, &f);
            table[b] = (float)f;
        }
        tab = table;
    }
    CHECK(rd->takes(&w, tab));
    CHECK(rd->gemm(rd, &w, tab, conv1d, N, x, IN, 5, 40, 1, 30, y, 29, &err) == TPS_OK);
    CHECK(matches(y, 29, x, IN, v, conv1d, 5, 40, 1, 30));
    if (err.code != TPS_OK) printf("#   %s\n", err.msg);
    double bytes, secs;
    tps_vdev_ref_stats(d, &bytes, &secs);
    CHECK(bytes > 0);
    tps_vdev_close(d);
    CHECK(tps_vref_device() == NULL);
    free(w.data);
    free(q.s);
}

TEST(devref_linear_bf16) { one(TPS_DT_BF16, false, false, 3); }
TEST(devref_linear_f16) { one(TPS_DT_F16, false, false, 5); }
TEST(devref_linear_f32) { one(TPS_DT_F32, false, false, 1); }
TEST(devref_linear_f64) { one(TPS_DT_F64, false, false, 64); }
TEST(devref_linear_fp8_block_scaled) { one(TPS_DT_F8_E4M3, true, false, 3); }
TEST(devref_linear_fp8_e5m2) { one(TPS_DT_F8_E5M2, false, false, 7); }
TEST(devref_conv1d_bf16) { one(TPS_DT_BF16, false, true, 4); }
TEST(devref_conv1d_fp8_block_scaled) { one(TPS_DT_F8_E4M3, true, true, 5); }

/* A dtype the device does not take (I8 has no table) is the host's. */
TEST(devref_other_dtypes_stay_on_host)
{
    const tps_dev_api *api = devsim();
    CHECK(api != NULL);
    if (!api) return;
    tps_dev_setup s = {.T = 1, .first = 0, .count = 1, .local_rank = -1};
    tps_vdev *d = NULL;
    tps_error err;
    tps_error_clear(&err);
    CHECK(tps_vdev_open(api, &s, &d, &err) == TPS_OK);
    if (!d) return;
    tps_vdev_ref_attach(d, 0);
    unsigned char b[4] = {0};
    tps_vt w = {.name = (char *)"w", .dtype = TPS_DT_I8, .ndim = 2, .shape = {2, 2}, .nelem = 4, .data = b};
    CHECK(!tps_vref_device()->takes(&w, NULL));
    tps_vdev_close(d);
}

int main(void)
{
    RUN(devref_linear_bf16);
    RUN(devref_linear_f16);
    RUN(devref_linear_f32);
    RUN(devref_linear_f64);
    RUN(devref_linear_fp8_block_scaled);
    RUN(devref_linear_fp8_e5m2);
    RUN(devref_conv1d_bf16);
    RUN(devref_conv1d_fp8_block_scaled);
    RUN(devref_other_dtypes_stay_on_host);
    return tps_test_done();
}
