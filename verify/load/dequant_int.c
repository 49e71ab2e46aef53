/* GPTQ / AWQ dequantization for verify (verify/load/dequant_int.h says the layouts). */
#include "dequant_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/base/checked.h"
#include "../../lib/base/dtype.h"

static const unsigned awq_order[8] = {0, 2, 4, 6, 1, 3, 5, 7};

static uint32_t word_at(const tps_vt *t, uint64_t i)
{
    const unsigned char *b = (const unsigned char *)t->data + i * 4;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static bool is_2d(const tps_vt *t, uint64_t rows, uint64_t cols)
{
    return t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols;
}

static bool int_words(const tps_vt *t)
{
    return t->dtype == TPS_DT_I32 || t->dtype == TPS_DT_U32;
}

/* Each input row's index into the held scales/qzeros rows: from g_idx (global group ids; a
 * rank whose scales are cut by groups holds them from its lowest id on), else k / group. */
static tps_status row_groups(const tps_vqint *p, const tps_vt *scales, const tps_vt *g_idx, uint64_t K, uint64_t G,
                             uint64_t *grp, tps_error *err)
{
    if (!g_idx) {
        uint64_t g = p->group == -1 ? K : (uint64_t)p->group;
        if (p->group == 0 || p->group < -1)
            return tps_fail(err, TPS_EINVALID, "%s: group size %lld", scales->name, (long long)p->group);
        uint64_t need = (K + g - 1) / g;
        if (G != need)
            return tps_fail(err, TPS_EMISMATCH, "%s: %llu group rows where %llu input rows in groups of %llu need %llu",
                            scales->name, (unsigned long long)G, (unsigned long long)K, (unsigned long long)g,
                            (unsigned long long)need);
        for (uint64_t k = 0; k < K; k++) grp[k] = k / g;
        return TPS_OK;
    }
    if (g_idx->ndim != 1 || g_idx->shape[0] != K || (g_idx->dtype != TPS_DT_I32 && g_idx->dtype != TPS_DT_I64))
        return tps_fail(err, TPS_EMISMATCH, "%s: expected I32 [%llu] beside a qweight of %llu input rows", g_idx->name,
                        (unsigned long long)K, (unsigned long long)K);
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (uint64_t k = 0; k < K; k++) {
        int64_t v;
        if (g_idx->dtype == TPS_DT_I32) {
            v = (int32_t)word_at(g_idx, k);
        } else {
            const unsigned char *b = (const unsigned char *)g_idx->data + k * 8;
            uint64_t u = 0;
            for (int i = 7; i >= 0; i--) u = u << 8 | b[i];
            v = (int64_t)u;
        }
        if (v < 0)
            return tps_fail(err, TPS_EMISMATCH, "%s: row %llu names group %lld", g_idx->name, (unsigned long long)k,
                            (long long)v);
        grp[k] = (uint64_t)v;
        if (v < lo) lo = v;
        if (v > hi) hi = v;
    }
    uint64_t base = (uint64_t)hi < G ? 0 : (uint64_t)lo;
    for (uint64_t k = 0; k < K; k++) {
        if (grp[k] - base >= G)
            return tps_fail(err, TPS_EMISMATCH,
                            "%s: row %llu names group %llu, which %s (%llu group rows from group %llu) does not hold",
                            g_idx->name, (unsigned long long)k, (unsigned long long)grp[k], scales->name,
                            (unsigned long long)G, (unsigned long long)base);
        grp[k] -= base;
    }
    return TPS_OK;
}

tps_status tps_vdequant_int(const tps_vqint *p, const char *name, const tps_vt *qweight, const tps_vt *qzeros,
                            const tps_vt *scales, const tps_vt *g_idx, tps_vt *out, tps_error *err)
{
    memset(out, 0, sizeof *out);
    bool awq = p->kind == TPS_VQINT_AWQ;
    if (awq ? p->bits != 4 : (p->bits != 2 && p->bits != 4 && p->bits != 8))
        return tps_fail(err, TPS_EINVALID, "%s: %u-bit %s is not supported (GPTQ 2, 4, 8 bits; AWQ 4)", qweight->name,
                        p->bits, awq ? "AWQ" : "GPTQ");
    unsigned pf = 32 / p->bits, mask = (1u << p->bits) - 1;
    if (!int_words(qweight) || qweight->ndim != 2)
        return tps_fail(err, TPS_EMISMATCH, "%s: expected 2-D I32 packed words, found %s with %d dimensions",
                        qweight->name, tps_dtype_name(qweight->dtype), qweight->ndim);
    uint64_t K = awq ? qweight->shape[0] : qweight->shape[0] * pf;
    uint64_t N = awq ? qweight->shape[1] * pf : qweight->shape[1];
    if (scales->ndim != 2 || scales->shape[1] != N || !tps_dtype_is_float(scales->dtype))
        return tps_fail(err, TPS_EMISMATCH, "%s: expected float [groups, %llu] (the output columns of %s)", scales->name,
                        (unsigned long long)N, qweight->name);
    uint64_t G = scales->shape[0];
    if (!int_words(qzeros) || !is_2d(qzeros, G, N / pf))
        return tps_fail(err, TPS_EMISMATCH, "%s: expected I32 [%llu, %llu] beside %s", qzeros->name,
                        (unsigned long long)G, (unsigned long long)(N / pf), scales->name);
    if (!G || !K)
        return tps_fail(err, TPS_EMISMATCH, "%s: %llu group rows for %llu input rows", scales->name,
                        (unsigned long long)G, (unsigned long long)K);

    size_t nelem;
    uint64_t n64;
    if (!tps_mul_u64(N, K, &n64) || !tps_u64_to_size(n64, &nelem) || nelem > SIZE_MAX / sizeof(float))
        return tps_fail_oom(err, "a dequantized weight");
    uint64_t *grp = malloc((size_t)K * sizeof *grp);
    float *w = malloc(nelem ? nelem * sizeof(float) : 1);
    out->name = strdup(name);
    if (!grp || !w || !out->name) {
        free(grp);
        free(w);
        tps_vt_release(out);
        return tps_fail_oom(err, "a dequantized weight");
    }
    tps_status st = row_groups(p, scales, awq ? NULL : g_idx, K, G, grp, err);
    for (uint64_t k = 0; st == TPS_OK && k < K; k++) {
        uint64_t gk = grp[k];
        for (uint64_t n = 0; n < N; n++) {
            unsigned q, z;
            if (awq) {
                /* nibble i holds column 8c + awq_order[i]: find i for n % 8 */
                unsigned i = 0;
                while (awq_order[i] != n % 8) i++;
                q = word_at(qweight, k * (N / 8) + n / 8) >> (4 * i) & mask;
                z = word_at(qzeros, gk * (N / 8) + n / 8) >> (4 * i) & mask;
            } else {
                q = word_at(qweight, (k / pf) * N + n) >> (p->bits * (k % pf)) & mask;
                z = word_at(qzeros, gk * (N / pf) + n / pf) >> (p->bits * (n % pf)) & mask;
                /* The 1 goes back on after the mask, as AutoGPTQ's own forward and vLLM's
                 * GPTQ kernel add it: a zero of 0, stored as -1, reads 16. */
                if (p->zero_minus_one) z += 1;
            }
            double s;
            tps_dtype_to_f64(scales->dtype, scales->data, (size_t)(gk * N + n), &s);
            w[n * K + k] = (float)(((double)q - (double)z) * s);
        }
    }
    free(grp);
    if (st != TPS_OK) {
        free(w);
        tps_vt_release(out);
        return st;
    }
    out->data = w;
    out->dtype = TPS_DT_F32;
    out->ndim = 2;
    out->shape[0] = N;
    out->shape[1] = K;
    out->nelem = n64;
    return TPS_OK;
}

tps_status tps_vload_int(const tps_block *b, const tps_vsource *src, const char *name, tps_vt *out, bool *done,
                         tps_error *err)
{
    *done = false;
    size_t n = strlen(name);
    if (n < 7 || strcmp(name + n - 7, ".weight") != 0 || src->has(src->ctx, name)) return TPS_OK;
    static const char *const part[4] = {"qweight", "qzeros", "scales", "g_idx"};
    char nm[4][1100];
    for (int i = 0; i < 4; i++) snprintf(nm[i], sizeof nm[i], "%.*s.%s", (int)(n - 7), name, part[i]);
    if (!src->has(src->ctx, nm[0])) return TPS_OK;
    tps_vt t[4];
    memset(t, 0, sizeof t);
    bool gptq = src->has(src->ctx, nm[3]);
    tps_status st = TPS_OK;
    for (int i = 0; i < (gptq ? 4 : 3) && st == TPS_OK; i++) st = src->load(src->ctx, nm[i], &t[i], err);
    if (st == TPS_OK) {
        tps_vqint p = {gptq ? TPS_VQINT_GPTQ : TPS_VQINT_AWQ, 4, -1, gptq && !b->gptq_v2};
        /* qzeros pack the output columns the scales hold one by one: their ratio is the pack
         * factor (g_idx could mislead: it is the one a wrong cut replicates) */
        if (gptq && b->int_bits)
            p.bits = b->int_bits;
        else if (gptq && t[1].ndim == 2 && t[2].ndim == 2 && t[1].shape[1] && t[2].shape[1] % t[1].shape[1] == 0) {
            uint64_t pf = t[2].shape[1] / t[1].shape[1];
            p.bits = pf && 32 % pf == 0 ? (unsigned)(32 / pf) : 0;
        }
        if (!gptq && t[0].ndim == 2 && t[2].ndim == 2 && t[2].shape[0] && t[0].shape[0] % t[2].shape[0] == 0)
            p.group = (int64_t)(t[0].shape[0] / t[2].shape[0]);
        else if (!gptq)
            p.group = (int64_t)(t[0].shape[0] ? t[0].shape[0] : 1); /* refused below, naming the scales */
        st = tps_vdequant_int(&p, name, &t[0], &t[1], &t[2], gptq ? &t[3] : NULL, out, err);
    }
    for (int i = 0; i < 4; i++) tps_vt_release(&t[i]);
    if (st == TPS_OK) *done = true;
    return st;
}
