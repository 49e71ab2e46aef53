/* Llama 4's attention hooks (verify/math/llama4.h), instantiated in verify/math/ops_tmpl.h per
 * precision.  No include guard: included once per precision. */

/* After RoPE: the per-head L2 norm of q (nh heads, row stride qld) and k (kvn heads, kld) on
 * RoPE layers, the temperature of q on NoPE layers. */
static void F(vllama4_qk)(const tps_block *b, const vdims *d, size_t n, size_t nh, REAL *q, size_t qld, size_t kvn,
                          REAL *k, size_t kld)
{
    size_t hd = (size_t)d->hd;
    if (d->qk_l2)
        for (int pass = 0; pass < 2; pass++) {
            REAL *x = pass ? k : q;
            size_t heads = pass ? kvn : nh, ld = pass ? kld : qld;
            for (size_t t = 0; t < n; t++)
                for (size_t h = 0; h < heads; h++) {
                    REAL *p = x + t * ld + h * hd, ss = 0;
                    for (size_t i = 0; i < hd; i++) ss += p[i] * p[i];
                    REAL inv = (REAL)(1.0 / sqrt((double)(ss / (REAL)hd) + b->norm_eps));
                    for (size_t i = 0; i < hd; i++) p[i] *= inv;
                }
        }
    if (d->temp_floor > 0)
        for (size_t t = 0; t < n; t++) {
            REAL s = (REAL)(log1p(floor(((double)t + 1.0) / d->temp_floor)) * d->temp_scale + 1.0);
            for (size_t i = 0; i < nh * hd; i++) q[t * qld + i] *= s;
        }
}

/* The first position token t attends to under chunked attention (0 without). */
static size_t F(vchunk_start)(const vdims *d, size_t t)
{
    return d->chunk ? t - t % (size_t)d->chunk : 0;
}
