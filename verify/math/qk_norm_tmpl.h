/* q_norm / k_norm, written once and instantiated by verify/math/qk_norm.c for REAL = double
 * (SFX f64, the reference) and REAL = float (SFX f32, the ranks).  No include guard:
 * included once per precision. */

#define QCAT_(a, b) a##_##b
#define QCAT(a, b) QCAT_(a, b)
#define Q(name) QCAT(name, SFX)

/* x[t, h * hd + i] (row stride ld) for h < nh, times inv[t] (or each head's own, per head)
 * and w's element at w_off + h * hd + i (w_off 0 and per_head: w is [hd], shared by heads). */
static tps_status Q(qk_apply)(const tps_block *b, const tps_vt *w, uint64_t w_off, bool per_head, size_t n,
                              size_t nh, size_t hd, REAL *x, size_t ld, const double *sum_sq, double count,
                              tps_error *err)
{
    size_t wn = per_head ? hd : nh * hd;
    REAL *wv = malloc((wn + 1) * sizeof *wv);
    if (!wv) return tps_fail_oom(err, "a q/k norm weight");
    double one = b->norm == TPS_NORM_RMS_OFFSET; /* Gemma 3's q/k norms scale by (1 + w) as its others do */
    for (size_t i = 0; i < wn; i++) {
        double v = 0;
        tps_dtype_to_f64(w->dtype, w->data, (size_t)w_off + i, &v); /* dtype checked at load */
        wv[i] = (REAL)(v + one);
    }
    for (size_t t = 0; t < n; t++)
        for (size_t h = 0; h < nh; h++) {
            REAL *p = x + t * ld + h * hd, inv;
            if (per_head) {
                REAL ss = 0;
                for (size_t i = 0; i < hd; i++) ss += p[i] * p[i];
                inv = (REAL)(1.0 / sqrt((double)(ss / (REAL)hd) + b->norm_eps));
            } else {
                inv = (REAL)(1.0 / sqrt((double)((REAL)sum_sq[t] / (REAL)count) + b->norm_eps));
            }
            const REAL *wh = per_head ? wv : wv + h * hd;
            for (size_t i = 0; i < hd; i++) p[i] = p[i] * inv * wh[i];
        }
    free(wv);
    return TPS_OK;
}

/* Per-token sums of squares of x's nh heads into ss[0..n). */
static void Q(qk_sum_sq)(size_t n, size_t nh, size_t hd, const REAL *x, size_t ld, double *ss)
{
    for (size_t t = 0; t < n; t++) {
        REAL s = 0;
        for (size_t i = 0; i < nh * hd; i++) s += x[t * ld + i] * x[t * ld + i];
        ss[t] = (double)s;
    }
}

tps_status Q(tps_vqk_norm)(const tps_block *b, const vdims *d, const vlayer *l, const vattn_map *m, size_t n,
                           REAL *q, size_t qld, REAL *k, size_t kld, tps_error *err)
{
    const tps_vt *qw = vrole(l, TPS_ROLE_Q_NORM_W, 0, false), *kw = vrole(l, TPS_ROLE_K_NORM_W, 0, false);
    size_t hd = (size_t)d->hd, hn = (size_t)m->hn, kvn = (size_t)m->kv_n;
    tps_status st = TPS_OK;
    double *ss = NULL;
    if (!tps_vqk_whole(b)) {
        if (qw) TPS_CHECK(Q(qk_apply)(b, qw, 0, true, n, hn, hd, q, qld, NULL, 0, err));
        if (kw) TPS_CHECK(Q(qk_apply)(b, kw, 0, true, n, kvn, hd, k, kld, NULL, 0, err));
        goto cleanup;
    }
    /* Whole projection: the sums of squares of q and k over every head, the part of the norm
     * that crosses ranks; each rank then scales its own heads by its slice of the weight. */
    ss = calloc(2 * n + 1, sizeof *ss);
    if (!ss) return tps_fail_oom(err, "the q/k norm's sums of squares");
    Q(qk_sum_sq)(n, hn, hd, q, qld, ss);
    Q(qk_sum_sq)(n, kvn, hd, k, kld, ss + n);
    if (m->qk) TPS_CHECK(m->qk->fn(m->qk->ctx, ss, n, err));
    if (qw) TPS_CHECK(Q(qk_apply)(b, qw, m->q_first * hd, false, n, hn, hd, q, qld, ss, (double)(d->heads * hd), err));
    if (kw) TPS_CHECK(Q(qk_apply)(b, kw, m->kv_first * hd, false, n, kvn, hd, k, kld, ss + n, (double)(d->kv * hd), err));
cleanup:
    free(ss);
    return st;
}

#undef Q
#undef QCAT
#undef QCAT_
