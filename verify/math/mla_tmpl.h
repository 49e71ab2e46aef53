/* Multi-head latent attention (DeepSeek-V2/V3), included by verify/math/ops_tmpl.h once per
 * precision, after its kernels.  No include guard: it is part of ops_tmpl.h.  The forward
 * is transformers 4.57's DeepseekV3Attention (and DeepseekV2Attention, whose complex-number
 * RoPE rotates the same pairs):
 *   q    = q_b(rms(q_a(x))) or q_proj(x), per head [q_nope | q_pe]
 *   c    = kv_a_proj_with_mqa(x) = [c_kv (kv_lora_rank) | k_pe (qk_rope_head_dim)]
 *   kv   = kv_b(rms(c_kv)), per head [k_nope | v]; k_pe is one head shared by all
 *   RoPE on q_pe and k_pe: pairs (2i, 2i+1) (V2's complex product; V3's rope_interleave,
 *        which de-interleaves and then rotates halves, gives the same dot products), or
 *        rotate_half when rope_interleave is false
 *   softmax(q.k * qk_head_dim^-0.5 * mscale^2) v, mscale = 0.1 mscale_all_dim ln(factor) + 1
 *        when rope_scaling has mscale_all_dim (DeepSeek's yarn), then o_proj.
 * The a-projections' RMSNorms use eps 1e-6, as transformers builds them (vLLM passes
 * rms_norm_eps, 1e-6 in DeepSeek's own configs).  A party computes the heads of its map
 * (held from head m->q_off of its q_b/kv_b slices) from the replicated a-projections. */

static tps_status F(vmla)(const tps_block *b, const vdims *d, const vlayer *l, const vattn_map *m, size_t n,
                          const REAL *xn, bool add_bias, REAL *out, tps_error *err)
{
    tps_status st = TPS_OK;
    size_t H = (size_t)d->hidden, hn = (size_t)m->hn, nope = (size_t)d->nope, rd = (size_t)d->rope_d;
    size_t vhd = (size_t)d->vhd, qhd = nope + rd, kvw = nope + vhd, kvl = (size_t)d->kvlora, ql = (size_t)d->qlora;
    size_t qld = hn * qhd, kvld = hn * kvw, cw = kvl + rd, h0 = (size_t)m->q_off;
    size_t big = (ql > cw ? ql : cw) > H ? (ql > cw ? ql : cw) : H;
    REAL *q = malloc((n * qld + 1) * sizeof *q), *c = malloc((n * cw + 1) * sizeof *c);
    REAL *lat = malloc((n * (ql > kvl ? ql : kvl) + 1) * sizeof *lat), *kv = malloc((n * kvld + 1) * sizeof *kv);
    REAL *kpe = malloc((n * rd + 1) * sizeof *kpe), *ctx = malloc((n * hn * vhd + 1) * sizeof *ctx);
    REAL *sc = malloc((n + big + 1) * sizeof *sc);
    if (!q || !c || !lat || !kv || !kpe || !ctx || !sc) {
        st = tps_fail_oom(err, "attention buffers");
        goto cleanup;
    }
    tps_block nb = *b; /* the a-projections' RMSNorms: tps_vnorm over their widths */
    nb.norm = TPS_NORM_RMS;
    nb.norm_eps = 1e-6;
    vdims nd = *d;
    const tps_vt *qab = vrole(l, TPS_ROLE_Q_A_B, 0, false), *kvab = vrole(l, TPS_ROLE_KV_A_B, 0, false);
    if (ql) {
        TPS_CHECK(F(vlinear)(vrole(l, TPS_ROLE_Q_A_W, 0, false), false, n, xn, H, 0, H, 0, ql, lat, ql, err));
        if (qab) F(vadd_range)(qab, 0, n, ql, lat, ql, sc);
        nd.hidden = ql;
        F(tps_vnorm)(&nb, &nd, vrole(l, TPS_ROLE_Q_A_NORM_W, 0, false), NULL, n, lat, lat);
        TPS_CHECK(F(vlinear)(vrole(l, TPS_ROLE_Q_B_W, 0, false), false, n, lat, ql, 0, ql, h0 * qhd, (h0 + hn) * qhd,
                             q, qld, err));
    } else {
        TPS_CHECK(F(vlinear)(vrole(l, TPS_ROLE_Q_W, 0, false), false, n, xn, H, 0, H, h0 * qhd, (h0 + hn) * qhd, q,
                             qld, err));
    }
    TPS_CHECK(F(vlinear)(vrole(l, TPS_ROLE_KV_A_W, 0, false), false, n, xn, H, 0, H, 0, cw, c, cw, err));
    if (kvab) F(vadd_range)(kvab, 0, n, cw, c, cw, sc);
    for (size_t t = 0; t < n; t++) {
        memcpy(lat + t * kvl, c + t * cw, kvl * sizeof *lat);
        memcpy(kpe + t * rd, c + t * cw + kvl, rd * sizeof *kpe);
    }
    nd.hidden = kvl;
    F(tps_vnorm)(&nb, &nd, vrole(l, TPS_ROLE_KV_A_NORM_W, 0, false), NULL, n, lat, lat);
    TPS_CHECK(F(vlinear)(vrole(l, TPS_ROLE_KV_B_W, 0, false), false, n, lat, kvl, 0, kvl, h0 * kvw, (h0 + hn) * kvw,
                         kv, kvld, err));
    /* RoPE on the rope part of every q head and on the shared k_pe head. */
    nd = *d;
    nd.hd = qhd;
    F(tps_vrope)(b, &nd, n, hn, q + nope, qld);
    nd.hd = rd;
    F(tps_vrope)(b, &nd, n, 1, kpe, rd);
    double scale = 1.0 / sqrt((double)qhd);
    const tps_rope_scaling *rs = &b->rope_scaling;
    if (rs->type != TPS_ROPE_SCALING_NONE && rs->mscale_all_dim > 0 && rs->factor > 1) {
        double ms = 0.1 * rs->mscale_all_dim * log(rs->factor) + 1.0;
        scale *= ms * ms;
    }
    for (size_t h = 0; h < hn; h++)
        for (size_t t = 0; t < n; t++) {
            const REAL *qt = q + t * qld + h * qhd;
            REAL mx = 0, sum = 0, *ct = ctx + t * hn * vhd + h * vhd;
            for (size_t s = 0; s <= t; s++) {
                const REAL *ks = kv + s * kvld + h * kvw, *ps = kpe + s * rd;
                REAL dot = 0;
                for (size_t i = 0; i < nope; i++) dot += qt[i] * ks[i];
                for (size_t i = 0; i < rd; i++) dot += qt[nope + i] * ps[i];
                sc[s] = dot * (REAL)scale;
                if (s == 0 || sc[s] > mx) mx = sc[s];
            }
            for (size_t s = 0; s <= t; s++) {
                sc[s] = (REAL)exp((double)(sc[s] - mx));
                sum += sc[s];
            }
            memset(ct, 0, vhd * sizeof *ct);
            for (size_t s = 0; s <= t; s++) {
                const REAL *vs = kv + s * kvld + h * kvw + nope, p = sc[s] / sum;
                for (size_t i = 0; i < vhd; i++) ct[i] += p * vs[i];
            }
        }
    TPS_CHECK(F(vlinear)(vrole(l, TPS_ROLE_O_W, 0, false), false, n, ctx, hn * vhd, m->o_off, m->o_off + hn * vhd, 0,
                         d->hidden, out, H, err));
    const tps_vt *ob = vrole(l, TPS_ROLE_O_B, 0, false);
    if (add_bias && ob) F(tps_vadd_vec)(ob, n, H, out);
cleanup:
    free(q);
    free(c);
    free(lat);
    free(kv);
    free(kpe);
    free(ctx);
    free(sc);
    return st;
}
