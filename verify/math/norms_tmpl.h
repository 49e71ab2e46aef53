/* The norms around a stage (verify/math/ops.h, VNORMS_DECLARE), instantiated by verify/math/ops.c
 * for each precision after verify/math/ops_tmpl.h.  No include guard: included once per precision. */

#define VCAT_(a, b) a##_##b
#define VCAT(a, b) VCAT_(a, b)
#define F(name) VCAT(name, SFX)

void F(tps_vstage_norm)(const tps_block *b, const vdims *d, const vlayer *l, int stage, size_t n, const REAL *x,
                        REAL *out)
{
    bool attn = stage == TPS_VSTAGE_ATTN;
    tps_block_role w = attn ? TPS_ROLE_ATTN_NORM_W : TPS_ROLE_MLP_NORM_W;
    if (!b->role[w]) { /* the layout names no pre-norm: the block reads its input as it is */
        memcpy(out, x, n * (size_t)d->hidden * sizeof *out);
        return;
    }
    F(tps_vnorm)(b, d, vrole(l, w, 0, false), vrole(l, attn ? TPS_ROLE_ATTN_NORM_B : TPS_ROLE_MLP_NORM_B, 0, false), n,
                 x, out);
}

void F(tps_vpost_norm)(const tps_block *b, const vdims *d, const vlayer *l, int stage, size_t n, REAL *y)
{
    tps_block_role w = stage == TPS_VSTAGE_ATTN ? TPS_ROLE_POST_ATTN_NORM_W : TPS_ROLE_POST_MLP_NORM_W;
    if (b->role[w]) F(tps_vnorm)(b, d, vrole(l, w, 0, false), NULL, n, y, y); /* elementwise after the sums: in place */
}

#undef F
#undef VCAT
#undef VCAT_
