/* MXFP4 dequantization for verify (verify/load/dequant_mxfp4.h says the layout). */
#include "dequant_mxfp4.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/base/checked.h"
#include "../../lib/base/index.h"

static const float fp4_e2m1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                   -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

/* An FP4 value (two significant bits) times a power of two is exact in BF16: its top 16 bits. */
static uint16_t bf16_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)(u >> 16);
}

tps_status tps_vload_mxfp4(const tps_vsource *src, const char *name, tps_vt *out, bool *done, tps_error *err)
{
    *done = false;
    size_t n = strlen(name);
    char *bn = malloc(n + 8), *sn = malloc(n + 8);
    tps_vt b, s;
    memset(&b, 0, sizeof b);
    memset(&s, 0, sizeof s);
    uint16_t *w = NULL;
    tps_status st = TPS_OK;
    if (!bn || !sn) {
        st = tps_fail_oom(err, "a tensor name");
        goto cleanup;
    }
    snprintf(bn, n + 8, "%s_blocks", name);
    snprintf(sn, n + 8, "%s_scales", name);
    if (src->has(src->ctx, name) || !src->has(src->ctx, bn) || !src->has(src->ctx, sn)) goto cleanup;
    if ((st = src->load(src->ctx, bn, &b, err)) != TPS_OK || (st = src->load(src->ctx, sn, &s, err)) != TPS_OK)
        goto cleanup;
    if (b.dtype != TPS_DT_U8 || s.dtype != TPS_DT_U8 || b.ndim != 4 || s.ndim != 3 || b.shape[3] != 16 ||
        s.shape[0] != b.shape[0] || s.shape[1] != b.shape[1] || s.shape[2] != b.shape[2]) {
        char bs[96], ss[96];
        tps_shape_str(b.shape, b.ndim, bs, sizeof bs);
        tps_shape_str(s.shape, s.ndim, ss, sizeof ss);
        st = tps_fail(err, TPS_EMISMATCH, "%s %s %s and %s %s %s do not fit MXFP4 (U8 [E, rows, G, 16] beside U8 "
                      "[E, rows, G])", bn, tps_dtype_name(b.dtype), bs, sn, tps_dtype_name(s.dtype), ss);
        goto cleanup;
    }
    uint64_t E = b.shape[0], R = b.shape[1], G = b.shape[2], C = G * 32;
    size_t cnt;
    if (!tps_u64_to_size(b.nelem * 2, &cnt) || !(w = malloc((cnt ? cnt : 1) * sizeof *w))) {
        st = tps_fail_oom(err, "a dequantized MXFP4 tensor");
        goto cleanup;
    }
    const unsigned char *q = b.data, *e8 = s.data;
    for (uint64_t e = 0; e < E; e++)
        for (uint64_t r = 0; r < R; r++)
            for (uint64_t g = 0; g < G; g++) {
                uint64_t row = (e * R + r) * G + g;
                /* e8m0 255 is NaN (OCP MX); 254 and 253 overflow FP4's 6 in BF16: bad input */
                if (e8[row] > 252) {
                    st = tps_fail(err, TPS_EINVALID, "%s: scale %u at [%llu, %llu, %llu] is %s, not a finite factor", sn,
                                  e8[row], (unsigned long long)e, (unsigned long long)r, (unsigned long long)g,
                                  e8[row] == 255 ? "NaN in e8m0" : "2^(s-127), which overflows the block's values");
                    goto cleanup;
                }
                float f = ldexpf(1.0f, (int)e8[row] - 127);
                for (uint64_t k = 0; k < 16; k++) {
                    unsigned char v = q[row * 16 + k];
                    uint64_t c = g * 32 + 2 * k; /* [E, C, R]: expert e's [in, out] */
                    w[(e * C + c) * R + r] = bf16_of(fp4_e2m1[v & 15] * f);
                    w[(e * C + c + 1) * R + r] = bf16_of(fp4_e2m1[v >> 4] * f);
                }
            }
    memset(out, 0, sizeof *out);
    if (!(out->name = strdup(name))) {
        st = tps_fail_oom(err, "a tensor name");
        goto cleanup;
    }
    out->data = w;
    w = NULL;
    out->dtype = TPS_DT_BF16;
    out->ndim = 3;
    out->shape[0] = E, out->shape[1] = C, out->shape[2] = R;
    out->nelem = E * C * R;
    *done = true;
cleanup:
    free(w);
    free(bn);
    free(sn);
    tps_vt_release(&b);
    tps_vt_release(&s);
    return st;
}
