/* The layer math, written once and instantiated by verify/math/ops.c for REAL = double (SFX
 * f64, the reference) and REAL = float (SFX f32, the ranks).  Every loop runs over
 * contiguous memory; weights are converted one row at a time into a REAL scratch row, so
 * no party ever holds a converted copy of a whole matrix.  No include guard: included
 * once per precision. */

#define VCAT_(a, b) a##_##b
#define VCAT(a, b) VCAT_(a, b)
#define F(name) VCAT(name, SFX)

/* Elements [off, off + n) of a scaled FP8 weight (verify/math/tensor.h, tps_vscale) as REAL:
 * the row widened as the GEMM reads it, walking (r, c) rather than dividing per element. */
static void F(vrow_scaled)(const tps_vt *t, uint64_t off, size_t n, REAL *out)
{
    const unsigned char *p = (const unsigned char *)t->data + off;
    const float *tab = vtable(t->dtype);
    const tps_vscale *q = t->scale;
    uint64_t cols = t->shape[1], r = off / cols, c = off % cols;
    for (size_t i = 0; i < n; i++) {
        out[i] = (REAL)(float)((double)tab[p[i]] * q->s[(r / q->bn) * q->sc + c / q->bk]);
        if (++c == cols) c = 0, r++;
    }
}

/* Elements [off, off + n) of t as REAL. */
static void F(vrow)(const tps_vt *t, uint64_t off, size_t n, REAL *out)
{
    if (t->scale) {
        F(vrow_scaled)(t, off, n, out);
        return;
    }
    const unsigned char *p = t->data;
    const float *tab = vtable(t->dtype);
    switch (t->dtype) {
    case TPS_DT_BF16: F(tps_vbf16)(p + off * 2, n, out); return;
    case TPS_DT_F32:
        p += off * 4;
        for (size_t i = 0; i < n; i++) {
            const unsigned char *q = p + 4 * i;
            uint32_t u = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
            float f;
            memcpy(&f, &u, 4);
            out[i] = (REAL)f;
        }
        return;
    case TPS_DT_F16:
        p += off * 2;
        for (size_t i = 0; i < n; i++) out[i] = (REAL)tab[p[2 * i] | p[2 * i + 1] << 8];
        return;
    default:
        if (tab) {
            p += off;
            for (size_t i = 0; i < n; i++) out[i] = (REAL)tab[p[i]];
            return;
        }
        for (size_t i = 0; i < n; i++) {
            double v = 0;
            tps_dtype_to_f64(t->dtype, t->data, (size_t)off + i, &v); /* dtype checked at load */
            out[i] = (REAL)v;
        }
    }
}

/* y[t, o - o0] (row stride ldy) = sum over i in [i0, i1) of x[t, i - i0] (stride ldx) * W(o, i)
 * for o in [o0, o1), where W(o, i) is w[o, i] for a Linear [out, in] and w[i, o] for a
 * Conv1D [in, out].  The plain loops: the fallback without a BLAS (internal.h). */
tps_status F(tps_vlinear_loop)(const tps_vt *w, bool conv1d, size_t n, const REAL *x, size_t ldx, uint64_t i0,
                               uint64_t i1, uint64_t o0, uint64_t o1, REAL *y, size_t ldy, tps_error *err)
{
    size_t K = (size_t)(i1 - i0), O = (size_t)(o1 - o0);
    REAL *wrow = NULL, *xt = NULL;
    if (conv1d) {
        uint64_t out_dim = w->shape[1];
        wrow = malloc((O ? O : 1) * sizeof *wrow);
        if (!wrow) return tps_fail_oom(err, "a verification scratch row");
        for (size_t t = 0; t < n; t++) memset(y + t * ldy, 0, O * sizeof *y);
        for (size_t k = 0; k < K; k++) {
            F(vrow)(w, (i0 + k) * out_dim + o0, O, wrow);
            for (size_t t = 0; t < n; t++) {
                REAL a = x[t * ldx + k], *yt = y + t * ldy;
                for (size_t o = 0; o < O; o++) yt[o] += a * wrow[o];
            }
        }
        free(wrow);
        return TPS_OK;
    }
    /* Linear: a block of VTB tokens transposed so the inner loop updates VTB independent
     * accumulators from one weight element (vectorizes without reassociating sums). */
    uint64_t in_dim = w->shape[1];
    wrow = malloc((K ? K : 1) * sizeof *wrow);
    xt = malloc((K ? K : 1) * VTB * sizeof *xt);
    if (!wrow || !xt) {
        free(wrow);
        free(xt);
        return tps_fail_oom(err, "a verification scratch block");
    }
    for (size_t tb = 0; tb < n; tb += VTB) {
        size_t nb = n - tb < VTB ? n - tb : VTB;
        for (size_t k = 0; k < K; k++)
            for (size_t t = 0; t < VTB; t++) xt[k * VTB + t] = t < nb ? x[(tb + t) * ldx + k] : 0;
        for (size_t o = 0; o < O; o++) {
            F(vrow)(w, (o0 + o) * in_dim + i0, K, wrow);
            REAL acc[VTB] = {0};
            for (size_t k = 0; k < K; k++) {
                const REAL wv = wrow[k], *xk = xt + k * VTB;
                for (size_t t = 0; t < VTB; t++) acc[t] += wv * xk[t];
            }
            for (size_t t = 0; t < nb; t++) y[(tb + t) * ldy + o] = acc[t];
        }
    }
    free(wrow);
    free(xt);
    return TPS_OK;
}

#if TPS_HAVE_BLAS
/* The same product by the BLAS (blas->VGEMM: sgemm for the ranks, dgemm for the reference): the
 * weight block converted to REAL once per call, in chunks of output rows that bound the
 * scratch (VGEMM_CHUNK elements), each chunk one GEMM over every token.  Sizes beyond the
 * BLAS's int take the loops. */
#define VGEMM_CHUNK ((size_t)1 << 20)
static tps_status F(vlinear_host)(const tps_vt *w, bool conv1d, size_t n, const REAL *x, size_t ldx, uint64_t i0,
                                  uint64_t i1, uint64_t o0, uint64_t o1, REAL *y, size_t ldy, tps_error *err)
{
    size_t K = (size_t)(i1 - i0), O = (size_t)(o1 - o0);
    const tps_blas *blas = tps_blas_get();
    if (!blas || !n || !K || !O || n > INT_MAX || K > INT_MAX || O > INT_MAX || ldx > INT_MAX ||
        ldy > INT_MAX)
        return F(tps_vlinear_loop)(w, conv1d, n, x, ldx, i0, i1, o0, o1, y, ldy, err);
    size_t rows = VGEMM_CHUNK / K ? VGEMM_CHUNK / K : 1;
    if (rows > O) rows = O;
    REAL *wb = malloc(rows * K * sizeof *wb);
    if (!wb) return tps_fail_oom(err, "a verification weight block");
    for (size_t o = 0; o < O; o += rows) {
        size_t m = O - o < rows ? O - o : rows;
        if (conv1d) { /* [K, m] of w [in, out] */
            for (size_t k = 0; k < K; k++) F(vrow)(w, (i0 + k) * w->shape[1] + o0 + o, m, wb + k * m);
            blas->VGEMM(TPS_CBLAS_ROW_MAJOR, TPS_CBLAS_NO_TRANS, TPS_CBLAS_NO_TRANS, (int)n, (int)m, (int)K, 1, x,
                        (int)ldx, wb, (int)m, 0, y + o, (int)ldy);
        } else { /* [m, K] of w [out, in] */
            for (size_t r = 0; r < m; r++) F(vrow)(w, (o0 + o + r) * w->shape[1] + i0, K, wb + r * K);
            blas->VGEMM(TPS_CBLAS_ROW_MAJOR, TPS_CBLAS_NO_TRANS, TPS_CBLAS_TRANS, (int)n, (int)m, (int)K, 1, x,
                        (int)ldx, wb, (int)K, 0, y + o, (int)ldy);
        }
    }
    free(wb);
    return TPS_OK;
}
#else
static tps_status F(vlinear_host)(const tps_vt *w, bool conv1d, size_t n, const REAL *x, size_t ldx, uint64_t i0,
                                  uint64_t i1, uint64_t o0, uint64_t o1, REAL *y, size_t ldy, tps_error *err)
{
    return F(tps_vlinear_loop)(w, conv1d, n, x, ldx, i0, i1, o0, o1, y, ldy, err);
}
#endif

#if !VDEVICE_GEMM
/* The reference's Linear (float64 only): verify/math/ref_kernel.c on blocks of TPS_VREF_T
 * tokens (transposed once) and TPS_VREF_R weight rows, the rows converted VREF_KC elements at a
 * time into a scratch that stays in L1 beside the tokens' slice; no BLAS, no widened matrix. */
#define VREF_KC 512
static tps_status F(vlinear_ref)(const tps_vt *w, size_t n, const REAL *x, size_t ldx, uint64_t i0, uint64_t i1,
                                 uint64_t o0, uint64_t o1, REAL *y, size_t ldy, tps_error *err)
{
    size_t K = (size_t)(i1 - i0), O = (size_t)(o1 - o0);
    uint64_t in_dim = w->shape[1];
    double *xt = malloc((K ? K : 1) * TPS_VREF_T * sizeof *xt), *wb = malloc(TPS_VREF_R * VREF_KC * sizeof *wb);
    if (!xt || !wb) {
        free(xt);
        free(wb);
        return tps_fail_oom(err, "the reference's scratch block");
    }
    for (size_t tb = 0; tb < n; tb += TPS_VREF_T) {
        size_t nb = n - tb < TPS_VREF_T ? n - tb : TPS_VREF_T;
        for (size_t k = 0; k < K; k++)
            for (size_t t = 0; t < TPS_VREF_T; t++) xt[k * TPS_VREF_T + t] = t < nb ? x[(tb + t) * ldx + k] : 0;
        for (size_t o = 0; o < O; o += TPS_VREF_R) {
            size_t nr = O - o < TPS_VREF_R ? O - o : TPS_VREF_R;
            double acc[TPS_VREF_R][TPS_VREF_T] = {{0}};
            for (size_t k0 = 0; k0 < K; k0 += VREF_KC) {
                size_t kc = K - k0 < VREF_KC ? K - k0 : VREF_KC;
                for (size_t r = 0; r < TPS_VREF_R; r++) /* rows past O: zeros, results dropped */
                    if (r < nr)
                        F(vrow)(w, (o0 + o + r) * in_dim + i0 + k0, kc, wb + r * VREF_KC);
                    else
                        memset(wb + r * VREF_KC, 0, kc * sizeof *wb);
                tps_vref_block(kc, wb, VREF_KC, xt + k0 * TPS_VREF_T, acc);
            }
            for (size_t r = 0; r < nr; r++)
                for (size_t t = 0; t < nb; t++) y[(tb + t) * ldy + o + r] = acc[r][t];
        }
    }
    free(xt);
    free(wb);
    return TPS_OK;
}
#undef VREF_KC
#endif

/* Every linear of the layer math: the ranks' (float32) on the rank's device when the weight was
 * uploaded to one (verify/ranks/device.h), else by the BLAS or the plain loops on the host; the
 * reference's (float64) on the device's float64 GEMM when verify runs on a device backend, else
 * its Linears by its own kernel above and its Conv1Ds (GPT-2) by dgemm. */
static tps_status F(vlinear)(const tps_vt *w, bool conv1d, size_t n, const REAL *x, size_t ldx, uint64_t i0,
                             uint64_t i1, uint64_t o0, uint64_t o1, REAL *y, size_t ldy, tps_error *err)
{
#if VDEVICE_GEMM
    if (w->dev) return w->dev->ops->gemm(w, conv1d, n, x, ldx, i0, i1, o0, o1, y, ldy, err);
#else
    /* On a device backend, the device's float64 GEMM (tensor.h, tps_vref_dev). */
    tps_vref_dev *rd = tps_vref_device();
    const float *tab = w->dtype == TPS_DT_F16 ? NULL : vtable(w->dtype);
    if (rd && rd->takes(w, tab)) return rd->gemm(rd, w, tab, conv1d, n, x, ldx, i0, i1, o0, o1, y, ldy, err);
    if (!conv1d) return F(vlinear_ref)(w, n, x, ldx, i0, i1, o0, o1, y, ldy, err);
#endif
    return F(vlinear_host)(w, conv1d, n, x, ldx, i0, i1, o0, o1, y, ldy, err);
}

/* y[t, j] += v[off + j] for j < cnt, every token t. */
static void F(vadd_range)(const tps_vt *v, uint64_t off, size_t n, size_t cnt, REAL *y, size_t ldy, REAL *scratch)
{
    F(vrow)(v, off, cnt, scratch);
    for (size_t t = 0; t < n; t++)
        for (size_t j = 0; j < cnt; j++) y[t * ldy + j] += scratch[j];
}

void F(tps_vadd_vec)(const tps_vt *v, size_t n, size_t dim, REAL *y)
{
    REAL chunk[256]; /* converted a chunk at a time: no allocation, no failure path */
    for (size_t c = 0; c < dim; c += 256) {
        size_t m = dim - c < 256 ? dim - c : 256;
        F(vrow)(v, c, m, chunk);
        for (size_t t = 0; t < n; t++)
            for (size_t j = 0; j < m; j++) y[t * dim + c + j] += chunk[j];
    }
}

void F(tps_vnorm)(const tps_block *b, const vdims *d, const tps_vt *w, const tps_vt *bias, size_t n, const REAL *x,
              REAL *out)
{
    size_t H = (size_t)d->hidden;
    for (size_t t = 0; t < n; t++) {
        const REAL *xt = x + t * H;
        REAL *ot = out + t * H, mean = 0, var = 0;
        if (b->norm == TPS_NORM_LAYER) {
            for (size_t i = 0; i < H; i++) mean += xt[i];
            mean /= (REAL)H;
        }
        for (size_t i = 0; i < H; i++) var += (xt[i] - mean) * (xt[i] - mean);
        REAL inv = (REAL)(1.0 / sqrt((double)(var / (REAL)H) + b->norm_eps));
        for (size_t i = 0; i < H; i++) ot[i] = (xt[i] - mean) * inv;
    }
    if (w) {
        REAL chunk[256], one = b->norm == TPS_NORM_RMS_OFFSET; /* Gemma scales by (1 + w) */
        for (size_t c = 0; c < H; c += 256) {
            size_t m = H - c < 256 ? H - c : 256;
            F(vrow)(w, c, m, chunk);
            for (size_t j = 0; j < m; j++) chunk[j] += one;
            for (size_t t = 0; t < n; t++)
                for (size_t j = 0; j < m; j++) out[t * H + c + j] *= chunk[j];
        }
    }
    if (bias) F(tps_vadd_vec)(bias, n, H, out);
}

void F(tps_vrope)(const tps_block *b, const vdims *d, size_t n, size_t nh, REAL *x, size_t ldx)
{
    size_t hd = (size_t)d->hd, half = (size_t)d->rot / 2;
    if (b->rope == TPS_ROPE_NONE || half == 0) return;
    double theta;
    tps_rope_scaling rs = vrope_layer_scaling(b, d->local, &theta);
    double mscale = vrope_attn_factor(&rs);
    for (size_t t = 0; t < n; t++)
        for (size_t i = 0; i < half; i++) {
            double ang = (double)t * vrope_inv_freq(&rs, theta, (size_t)d->rot, i, n);
            REAL c = (REAL)(cos(ang) * mscale), s = (REAL)(sin(ang) * mscale);
            size_t i1 = b->rope == TPS_ROPE_HALF ? i : 2 * i, i2 = b->rope == TPS_ROPE_HALF ? i + half : 2 * i + 1;
            for (size_t h = 0; h < nh; h++) {
                REAL *p = x + t * ldx + h * hd, a = p[i1], bb = p[i2];
                p[i1] = a * c - bb * s;
                p[i2] = bb * c + a * s;
            }
        }
}

static REAL F(vact)(tps_act_kind k, REAL v)
{
    double x = (double)v;
    switch (k) {
    case TPS_ACT_SILU: return (REAL)(x / (1.0 + exp(-x)));
    case TPS_ACT_GELU_TANH:
        return (REAL)(0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))));
    case TPS_ACT_GELU_ERF: return (REAL)(0.5 * x * (1.0 + erf(x * 0.7071067811865476)));
    case TPS_ACT_SWIGLU_OAI: break; /* gated: vgated */
    }
    return v;
}

/* A gated MLP's act(gate) * up; swiglu_oai's constants are transformers' GptOssExperts
 * (alpha 1.702, limit 7), which config.json does not carry. */
static REAL F(vgated)(tps_act_kind k, REAL g, REAL u)
{
    if (k != TPS_ACT_SWIGLU_OAI) return F(vact)(k, g) * u;
    double gc = fmin((double)g, 7.0), uc = fmax(fmin((double)u, 7.0), -7.0);
    return (REAL)((uc + 1.0) * gc / (1.0 + exp(-1.702 * gc)));
}

/* Projects heads h < cnt of width hd from W's output rows off + h * stride into
 * dst[t, h * hd ..] (row stride ldd), with the matching bias elements. */
static tps_status F(vheads)(const tps_block *b, const vdims *d, const tps_vt *w, const tps_vt *bias, size_t n,
                            const REAL *xn, uint64_t off, uint64_t stride, size_t cnt, REAL *dst, size_t ldd,
                            REAL *scratch, tps_error *err)
{
    tps_status st = TPS_OK;
    size_t hd = (size_t)d->hd;
    for (size_t h = 0; h < cnt; h++) {
        uint64_t o0 = off + h * stride;
        TPS_CHECK(F(vlinear)(w, b->conv1d, n, xn, (size_t)d->hidden, 0, d->hidden, o0, o0 + hd, dst + h * hd, ldd,
                             err));
        if (bias) F(vadd_range)(bias, o0, n, hd, dst + h * hd, ldd, scratch);
    }
cleanup:
    return st;
}

/* vheads for activations already projected (vattn_map.act): copies of their rows. */
static void F(vheads_act)(const vattn_map *m, size_t hd, size_t n, uint64_t off, uint64_t stride, size_t cnt,
                          REAL *dst, size_t ldd)
{
    const REAL *a = m->act;
    for (size_t h = 0; h < cnt; h++)
        for (size_t t = 0; t < n; t++)
            memcpy(dst + t * ldd + h * hd, a + t * m->act_ld + off + h * stride, hd * sizeof *dst);
}

tps_status F(tps_vlinear_rows)(const tps_vt *w, const tps_vt *bias, bool conv1d, size_t n, const REAL *x, size_t ldx,
                               uint64_t in, uint64_t o0, uint64_t o1, REAL *y, size_t ldy, tps_error *err)
{
    REAL *sc = malloc((o1 - o0 + 1) * sizeof *sc);
    if (!sc) return tps_fail_oom(err, "a verification scratch row");
    tps_status st = F(vlinear)(w, conv1d, n, x, ldx, 0, in, o0, o1, y, ldy, err);
    if (st == TPS_OK && bias) F(vadd_range)(bias, o0, n, (size_t)(o1 - o0), y, ldy, sc);
    free(sc);
    return st;
}

#include "mla_tmpl.h"
#include "llama4_tmpl.h"

tps_status F(tps_vattn)(const tps_block *b, const vdims *d, const vlayer *l, const vattn_map *m, size_t n,
                    const REAL *xn, bool add_bias, REAL *out, tps_error *err)
{
    if (b->attention == TPS_ATTN_MLA) return F(vmla)(b, d, l, m, n, xn, add_bias, out, err);
    tps_status st = TPS_OK;
    size_t hd = (size_t)d->hd, hn = (size_t)m->hn, kvn = (size_t)m->kv_n;
    size_t qld = hn * hd, kld = kvn * hd, group = (size_t)(d->heads / d->kv);
    REAL *q = malloc((n * qld + 1) * sizeof *q), *k = malloc((n * kld + 1) * sizeof *k);
    REAL *v = malloc((n * kld + 1) * sizeof *v), *ctx = malloc((n * qld + 1) * sizeof *ctx);
    REAL *sc = malloc((n + hd + 1) * sizeof *sc);
    if (!q || !k || !v || !ctx || !sc) {
        st = tps_fail_oom(err, "attention buffers");
        goto cleanup;
    }
    const tps_vt *fw = vrole(l, TPS_ROLE_QKV_W, 0, false), *fb = vrole(l, TPS_ROLE_QKV_B, 0, false);
    const tps_vt *qw = fw ? fw : vrole(l, TPS_ROLE_Q_W, 0, false), *qb = fw ? fb : vrole(l, TPS_ROLE_Q_B, 0, false);
    const tps_vt *kw = fw ? fw : vrole(l, TPS_ROLE_K_W, 0, false), *kb = fw ? fb : vrole(l, TPS_ROLE_K_B, 0, false);
    const tps_vt *vw = fw ? fw : vrole(l, TPS_ROLE_V_W, 0, false), *vb = fw ? fb : vrole(l, TPS_ROLE_V_B, 0, false);
    /* q heads a run at a time: the map's runs of a grouped qkv, else one run of all of them */
    for (size_t h = 0, run; h < hn; h += run) {
        size_t at = m->q_run ? (size_t)((m->q_phase + h) % m->q_run) : 0;
        run = m->q_run ? (size_t)m->q_run - at : hn;
        if (run > hn - h) run = hn - h;
        uint64_t off = m->q_run ? m->q_off + (m->q_phase + h) / m->q_run * m->q_gstride + at * m->stride : m->q_off;
        if (m->act) F(vheads_act)(m, hd, n, off, m->stride, run, q + h * hd, qld);
        else TPS_CHECK(F(vheads)(b, d, qw, qb, n, xn, off, m->stride, run, q + h * hd, qld, sc, err));
    }
    uint64_t kvs = m->kv_stride ? m->kv_stride : m->stride;
    if (m->act) {
        F(vheads_act)(m, hd, n, m->k_off, kvs, kvn, k, kld);
        F(vheads_act)(m, hd, n, m->v_off, kvs, kvn, v, kld);
    } else {
        TPS_CHECK(F(vheads)(b, d, kw, kb, n, xn, m->k_off, kvs, kvn, k, kld, sc, err));
        TPS_CHECK(F(vheads)(b, d, vw, vb, n, xn, m->v_off, kvs, kvn, v, kld, sc, err));
    }
    TPS_CHECK(F(tps_vqk_norm)(b, d, l, m, n, q, qld, k, kld, err));
    F(tps_vrope)(b, d, n, hn, q, qld);
    F(tps_vrope)(b, d, n, kvn, k, kld);
    F(vllama4_qk)(b, d, n, hn, q, qld, kvn, k, kld);
    for (size_t h = 0; h < hn; h++)
        if ((m->q_first + h) / group < m->kv_first || (m->q_first + h) / group - m->kv_first >= kvn) {
            st = tps_fail(err, TPS_EINVALID, "attention map: q head %llu needs KV head %llu, not among the %zu held from %llu",
                          (unsigned long long)(m->q_first + h), (unsigned long long)((m->q_first + h) / group), kvn,
                          (unsigned long long)m->kv_first);
            goto cleanup;
        }
    /* Gemma 2: scores scaled by query_pre_attn_scalar^-0.5, soft-capped, and (its sliding
     * layers) limited to the last d->window positions. */
    double qpas = b->query_pre_attn_scalar > 0 ? b->query_pre_attn_scalar : (double)hd, cap = b->attn_softcap;
    REAL scale = (REAL)(1.0 / sqrt(qpas));
    /* GPT-OSS: each head's sink logit joins the softmax and is dropped.  Sinks are cut with
     * the heads, as o_proj's input columns are: head h's sits at o_off / hd + h. */
    const tps_vt *sinks = vrole(l, TPS_ROLE_SINKS, 0, false);
    for (size_t h = 0; h < hn; h++) {
        uint64_t j = (m->q_first + h) / group - m->kv_first; /* the map holds this KV head */
        REAL sink = 0;
        if (sinks) F(vrow)(sinks, m->o_off / hd + h, 1, &sink);
        for (size_t t = 0; t < n; t++) {
            const REAL *qt = q + t * qld + h * hd;
            REAL mx = 0, sum = 0, *ct = ctx + t * qld + h * hd;
            size_t s0 = d->window && t >= d->window ? t + 1 - (size_t)d->window : 0;
            if (F(vchunk_start)(d, t) > s0) s0 = F(vchunk_start)(d, t);
            for (size_t s = s0; s <= t; s++) {
                const REAL *ks = k + s * kld + j * hd;
                REAL dot = 0;
                for (size_t i = 0; i < hd; i++) dot += qt[i] * ks[i];
                sc[s] = dot * scale;
                if (cap > 0) sc[s] = (REAL)(cap * tanh((double)sc[s] / cap));
                if (s == s0 || sc[s] > mx) mx = sc[s];
            }
            if (sinks && sink > mx) mx = sink;
            if (sinks) sum += (REAL)exp((double)(sink - mx));
            for (size_t s = s0; s <= t; s++) {
                sc[s] = (REAL)exp((double)(sc[s] - mx));
                sum += sc[s];
            }
            memset(ct, 0, hd * sizeof *ct);
            for (size_t s = s0; s <= t; s++) {
                const REAL *vs = v + s * kld + j * hd, p = sc[s] / sum;
                for (size_t i = 0; i < hd; i++) ct[i] += p * vs[i];
            }
        }
    }
    const tps_vt *ow = vrole(l, TPS_ROLE_O_W, 0, false), *ob = vrole(l, TPS_ROLE_O_B, 0, false);
    TPS_CHECK(F(vlinear)(ow, b->conv1d, n, ctx, qld, m->o_off, m->o_off + qld, 0, d->hidden, out, (size_t)d->hidden,
                         err));
    if (add_bias && ob) F(tps_vadd_vec)(ob, n, (size_t)d->hidden, out);
cleanup:
    free(q);
    free(k);
    free(v);
    free(ctx);
    free(sc);
    return st;
}

/* One dense MLP (a layer's, a routed expert's or the shared expert's: its roles in rt) for
 * the map's intermediate columns: out = down(act(...)). */
static tps_status F(vdense)(const tps_block *b, const vdims *d, const tps_vt *rt, const vmlp_map *m, size_t n,
                            const REAL *xn, REAL *out, tps_error *err)
{
    tps_status st = TPS_OK;
    size_t in = (size_t)m->i_n, H = (size_t)d->hidden;
    REAL *g = malloc((n * in + 1) * sizeof *g), *u = malloc((n * in + 1) * sizeof *u);
    REAL *sc = malloc((in + 1) * sizeof *sc);
    if (!g || !u || !sc) {
        st = tps_fail_oom(err, "MLP buffers");
        goto cleanup;
    }
    const tps_vt *gu = vget(rt, TPS_ROLE_GATE_UP_W);
    const tps_vt *gw = gu ? gu : vget(rt, TPS_ROLE_GATE_W);
    const tps_vt *uw = gu ? gu : vget(rt, TPS_ROLE_UP_W);
    uint64_t up0 = gu ? m->up_off + m->i_first : m->i_first;
    if (gw) {
        /* Column-parallel biases, cut like their weights: the map's columns of each. */
        const tps_vt *gb = vget(rt, TPS_ROLE_GATE_B), *ub = vget(rt, TPS_ROLE_UP_B);
        TPS_CHECK(F(vlinear)(gw, b->conv1d, n, xn, H, 0, d->hidden, m->i_first, m->i_first + in, g, in, err));
        TPS_CHECK(F(vlinear)(uw, b->conv1d, n, xn, H, 0, d->hidden, up0, up0 + in, u, in, err));
        if (gb) F(vadd_range)(gb, m->i_first, n, in, g, in, sc);
        if (ub) F(vadd_range)(ub, m->i_first, n, in, u, in, sc);
        for (size_t i = 0; i < n * in; i++) g[i] = F(vgated)(b->act, g[i], u[i]);
    } else {
        const tps_vt *fw = vget(rt, TPS_ROLE_FC_W), *fb = vget(rt, TPS_ROLE_FC_B);
        TPS_CHECK(F(vlinear)(fw, b->conv1d, n, xn, H, 0, d->hidden, m->i_first, m->i_first + in, g, in, err));
        if (fb) F(vadd_range)(fb, m->i_first, n, in, g, in, u);
        for (size_t i = 0; i < n * in; i++) g[i] = F(vact)(b->act, g[i]);
    }
    TPS_CHECK(F(vlinear)(vget(rt, TPS_ROLE_DOWN_W), b->conv1d, n, g, in, m->i_first,
                         m->i_first + in, 0, d->hidden, out, H, err));
cleanup:
    free(g);
    free(u);
    free(sc);
    return st;
}

/* A mixture of experts: the router picks top_k experts per token (verify/math/moe_route.h);
 * each expert runs on the tokens routed to it and its output is added with the token's
 * weight; the shared expert, when there is one, runs on every token, scaled by
 * sigmoid(x . shared_expert_gate) where that gate exists (Qwen2-MoE). */
/* The router's choice for n tokens (verify/math/moe_route.h): sel[t * E + e] and the weights
 * wt (n * E each, zeroed here).  logit: n * E of scratch. */
static tps_status F(vroute)(const tps_block *b, const vdims *d, const vlayer *l, size_t n, const REAL *xn,
                            REAL *logit, unsigned char *sel, double *wt, tps_error *err)
{
    tps_status st = TPS_OK;
    size_t E = (size_t)d->experts, H = (size_t)d->hidden, K = (size_t)d->top_k;
    double *ld = malloc((n * E + 1) * sizeof *ld), *bias = malloc((E + 1) * sizeof *bias);
    double *cs = malloc((E + 1) * sizeof *cs);
    REAL *lbv = malloc((E + 1) * sizeof *lbv);
    const tps_vt *rb = vrole(l, TPS_ROLE_ROUTER_BIAS, 0, false), *lb = vrole(l, TPS_ROLE_ROUTER_LOGIT_B, 0, false);
    vmoe_cfg rc = vmoe_cfg_of(b);
    if (!ld || !bias || !cs || !lbv) {
        st = tps_fail_oom(err, "MoE buffers");
        goto cleanup;
    }
    memset(sel, 0, n * E);
    memset(wt, 0, n * E * sizeof *wt);
    TPS_CHECK(F(vlinear)(vrole(l, TPS_ROLE_ROUTER_W, 0, false), false, n, xn, H, 0, d->hidden, 0, E, logit, E, err));
    if (lb) F(vadd_range)(lb, 0, n, E, logit, E, lbv); /* GPT-OSS: the router Linear's bias */
    for (size_t i = 0; i < n * E; i++) ld[i] = (double)logit[i];
    if (rb) {
        F(vrow)(rb, 0, E, logit); /* the logits are in ld already: logit is free */
        for (size_t i = 0; i < E; i++) bias[i] = (double)logit[i];
    }
    vmoe_route(&rc, n, E, K, ld, rb ? bias : NULL, sel, wt, cs);
cleanup:
    free(ld);
    free(bias);
    free(cs);
    free(lbv);
    return st;
}

static tps_status F(vmoe)(const tps_block *b, const vdims *d, const vlayer *l, const vmlp_map *m, size_t n,
                          const REAL *xn, REAL *out, tps_error *err)
{
    tps_status st = TPS_OK;
    size_t E = (size_t)d->experts, H = (size_t)d->hidden;
    REAL *logit = malloc((n * E + 1) * sizeof *logit), *xg = malloc((n * H + 1) * sizeof *xg);
    REAL *yg = malloc((n * H + 1) * sizeof *yg);
    double *wt = calloc(n * E + 1, sizeof *wt);
    unsigned char *sel = calloc(n * E + 1, 1);
    size_t *tok = malloc((n + 1) * sizeof *tok);
    if (!logit || !xg || !yg || !wt || !sel || !tok) {
        st = tps_fail_oom(err, "MoE buffers");
        goto cleanup;
    }
    TPS_CHECK(F(vroute)(b, d, l, n, xn, logit, sel, wt, err));
    memset(out, 0, n * H * sizeof *out);
    for (size_t e = 0; e < E; e++) {
        size_t ng = 0;
        if (m->e_n && (e < m->e_first || e >= m->e_first + m->e_n)) continue; /* another rank's expert */
        for (size_t t = 0; t < n; t++)
            if (sel[t * E + e]) {
                memcpy(xg + ng * H, xn + t * H, H * sizeof *xg);
                tok[ng++] = t;
            }
        if (!ng) continue;
        bool on_input = tps_vrouter_on_input(b); /* Llama 4: the weight scales the expert's input */
        for (size_t g = 0; g < ng && on_input; g++)
            for (size_t i = 0; i < H; i++) xg[g * H + i] *= (REAL)wt[tok[g] * E + e];
        tps_vt tmp[TPS_ROLE_COUNT];
        const tps_vt *row;
        bool fetched;
        TPS_CHECK(tps_vexpert_row(l, e, tmp, &row, &fetched, err));
        st = F(vdense)(b, d, row, m, ng, xg, yg, err);
        tps_vexpert_row_done(tmp, fetched); /* streaming: one expert held at a time */
        if (st != TPS_OK) goto cleanup;
        for (size_t g = 0; g < ng; g++) {
            REAL w = on_input ? (REAL)1 : (REAL)wt[tok[g] * E + e], *ot = out + tok[g] * H;
            for (size_t i = 0; i < H; i++) ot[i] += w * yg[g * H + i];
        }
    }
    if (d->sh_inter) {
        vmlp_map sm = {m->sh_first, m->sh_n, m->sh_up_off, 0, 0, 0, 0, 0};
        const tps_vt *sg = vrole(l, TPS_ROLE_SHARED_GATE_W, 0, false);
        TPS_CHECK(F(vdense)(b, d, l->sh, &sm, n, xn, yg, err));
        if (sg) TPS_CHECK(F(vlinear)(sg, false, n, xn, H, 0, d->hidden, 0, 1, logit, 1, err));
        for (size_t t = 0; t < n; t++) {
            REAL w = sg ? (REAL)(1.0 / (1.0 + exp(-(double)logit[t]))) : (REAL)1, *ot = out + t * H;
            for (size_t i = 0; i < H; i++) ot[i] += w * yg[t * H + i];
        }
    }
cleanup:
    free(logit);
    free(xg);
    free(yg);
    free(wt);
    free(sel);
    free(tok);
    return st;
}

tps_status F(tps_vmlp_out_bias)(const tps_block *b, const vdims *d, const vlayer *l, size_t n, const REAL *xn,
                                REAL *out, tps_error *err)
{
    tps_status st = TPS_OK;
    size_t E = (size_t)d->experts, H = (size_t)d->hidden;
    const tps_vt *db = vrole(l, TPS_ROLE_DOWN_B, 0, false);
    if (db) F(tps_vadd_vec)(db, n, H, out);
    bool expert_bias = false;
    for (size_t e = 0; e < E && !expert_bias; e++) expert_bias = vget(&l->ex[e * TPS_ROLE_COUNT], TPS_ROLE_DOWN_B);
    if (!expert_bias) return TPS_OK;
    REAL *logit = malloc((n * E + H + 1) * sizeof *logit);
    double *wt = malloc((n * E + 1) * sizeof *wt);
    unsigned char *sel = malloc(n * E + 1);
    if (!logit || !wt || !sel) {
        st = tps_fail_oom(err, "MoE buffers");
        goto cleanup;
    }
    TPS_CHECK(F(vroute)(b, d, l, n, xn, logit, sel, wt, err));
    REAL *row = logit + n * E;
    for (size_t e = 0; e < E; e++) {
        const tps_vt *eb = vget(&l->ex[e * TPS_ROLE_COUNT], TPS_ROLE_DOWN_B);
        if (!eb) continue;
        F(vrow)(eb, 0, H, row);
        for (size_t t = 0; t < n; t++)
            if (sel[t * E + e])
                for (size_t i = 0; i < H; i++) out[t * H + i] += (REAL)wt[t * E + e] * row[i];
    }
cleanup:
    free(logit);
    free(wt);
    free(sel);
    return st;
}

tps_status F(tps_vmlp)(const tps_block *b, const vdims *d, const vlayer *l, const vmlp_map *m, size_t n,
                   const REAL *xn, bool add_bias, REAL *out, tps_error *err)
{
    tps_status st = d->experts ? F(vmoe)(b, d, l, m, n, xn, out, err) : F(vdense)(b, d, l->t, m, n, xn, out, err);
    if (st == TPS_OK && add_bias) st = F(tps_vmlp_out_bias)(b, d, l, n, xn, out, err);
    return st;
}

void F(tps_vembed)(const tps_vt *w, uint64_t row0, size_t n, const uint64_t *ids, REAL *out)
{
    uint64_t rows = w->shape[0], H = w->shape[1];
    for (size_t t = 0; t < n; t++) {
        REAL *ot = out + t * H;
        if (ids[t] >= row0 && ids[t] - row0 < rows) F(vrow)(w, (ids[t] - row0) * H, (size_t)H, ot);
        else memset(ot, 0, (size_t)H * sizeof *ot);
    }
}

tps_status F(tps_vlogits)(const tps_vt *w, size_t n, const REAL *x, REAL *y, size_t ldy, tps_error *err)
{
    return F(vlinear)(w, false, n, x, (size_t)w->shape[1], 0, w->shape[1], 0, w->shape[0], y, ldy, err);
}

#undef F
#undef VCAT
#undef VCAT_
