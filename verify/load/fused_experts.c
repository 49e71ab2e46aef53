/* GPT-OSS keeps all experts of a layer in 3-D tensors (transformers 4.57, GptOssExperts):
 * gate_up_proj [E, H, 2I] with each expert's gate at even and up at odd output columns,
 * gate_up_proj_bias [E, 2I], down_proj [E, I, H], down_proj_bias [E, H], [in, out] per
 * expert.  Llama 4 (transformers' Llama4TextExperts, block llama4) holds [gate | up] halves
 * instead (chunk(2) of the last dim, no biases); a rank holds [gate_r | up_r].  A GPT-OSS rank holds gate_up's columns [2 I r/T, 2 I (r+1)/T) (whole (gate, up) pairs:
 * its intermediate columns [I r/T, I (r+1)/T)), down_proj's rows of those columns, and the
 * down bias whole (vLLM's GptOssModel._load_weights_other slices the same way).  Rather
 * than a second MoE kernel, verify copies each expert out as the Linear [out, in] tensors
 * of a per-expert checkpoint and runs the math it already has; the expert down biases,
 * weighted by the routing, are added once after the all-reduce (vLLM loads them on rank 0
 * only, which sums to the same). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/base/dtype.h"
#include "fused_experts.h"

bool tps_vrole_fused_experts(tps_block_role role)
{
    return role == TPS_ROLE_EXPERTS_GATE_UP_W || role == TPS_ROLE_EXPERTS_GATE_UP_B ||
           role == TPS_ROLE_EXPERTS_DOWN_W || role == TPS_ROLE_EXPERTS_DOWN_B;
}

int tps_vexperts_fused_shape(const vdims *d, const vshare *s, tps_block_role role, uint64_t *shape)
{
    shape[0] = d->experts;
    switch (role) {
    case TPS_ROLE_EXPERTS_GATE_UP_W:
        shape[1] = d->hidden, shape[2] = 2 * s->i_n;
        return 3;
    case TPS_ROLE_EXPERTS_GATE_UP_B:
        shape[1] = 2 * s->i_n;
        return 2;
    case TPS_ROLE_EXPERTS_DOWN_W:
        shape[1] = s->i_n, shape[2] = d->hidden;
        return 3;
    default: /* TPS_ROLE_EXPERTS_DOWN_B, replicated */
        shape[1] = d->hidden;
        return 2;
    }
}

/* out [rows, cols] (or [rows] when cols is 0) with out[a, b] = src[base + a * sa + b * sb],
 * element-wise in src's dtype. */
static tps_status pick(tps_vt *out, const tps_vt *src, const char *part, uint64_t e, uint64_t rows, uint64_t cols,
                       uint64_t base, uint64_t sa, uint64_t sb, tps_error *err)
{
    size_t es = tps_dtype_bits(src->dtype) / 8; /* verify's dtypes are whole bytes */
    uint64_t n = rows * (cols ? cols : 1);
    char name[512];
    snprintf(name, sizeof name, "%s[%llu] %s", src->name, (unsigned long long)e, part);
    memset(out, 0, sizeof *out);
    out->name = strdup(name);
    out->data = malloc(n * es + 1);
    if (!out->name || !out->data) {
        tps_vt_release(out);
        return tps_fail_oom(err, "an expert's tensors");
    }
    out->dtype = src->dtype;
    out->ndim = cols ? 2 : 1;
    out->shape[0] = rows;
    out->shape[1] = cols;
    out->nelem = n;
    const unsigned char *s = src->data;
    unsigned char *o = out->data;
    for (uint64_t a = 0; a < rows; a++)
        for (uint64_t b = 0; b < (cols ? cols : 1); b++)
            memcpy(o + (a * (cols ? cols : 1) + b) * es, s + (base + a * sa + b * sb) * es, es);
    return TPS_OK;
}

tps_status tps_vexperts_unfuse(const tps_block *b, vlayer *l, tps_error *err)
{
    const tps_vt *gu = &l->t[TPS_ROLE_EXPERTS_GATE_UP_W], *gb = &l->t[TPS_ROLE_EXPERTS_GATE_UP_B];
    const tps_vt *dw = &l->t[TPS_ROLE_EXPERTS_DOWN_W], *db = &l->t[TPS_ROLE_EXPERTS_DOWN_B];
    uint64_t E = l->nex;
    if (!l->ex || !gu->data || !dw->data || gu->ndim != 3 || dw->ndim != 3 || gu->shape[0] != E ||
        dw->shape[0] != E || gu->shape[2] % 2)
        return TPS_OK;
    uint64_t H = gu->shape[1], I = gu->shape[2] / 2;
    if (dw->shape[1] != I || dw->shape[2] != H || (gb->data && (gb->ndim != 2 || gb->shape[0] != E || gb->shape[1] != 2 * I)) ||
        (db->data && (db->ndim != 2 || db->shape[0] != E || db->shape[1] != H)))
        return TPS_OK;
    tps_status st = TPS_OK;
    bool halves = b->llama4.on;
    for (uint64_t e = 0; e < E && st == TPS_OK; e++) {
        tps_vt *x = &l->ex[e * TPS_ROLE_COUNT];
        uint64_t g0 = e * H * 2 * I;
        /* gate column c at 2c and up at 2c + 1 (pairs), or at c and I + c (Llama 4's halves) */
        uint64_t step = halves ? 1 : 2, up0 = halves ? I : 1;
        st = pick(&x[TPS_ROLE_GATE_W], gu, "gate", e, I, H, g0, step, 2 * I, err);
        if (st == TPS_OK) st = pick(&x[TPS_ROLE_UP_W], gu, "up", e, I, H, g0 + up0, step, 2 * I, err);
        if (st == TPS_OK && gb->data) st = pick(&x[TPS_ROLE_GATE_B], gb, "gate", e, I, 0, e * 2 * I, 2, 0, err);
        if (st == TPS_OK && gb->data) st = pick(&x[TPS_ROLE_UP_B], gb, "up", e, I, 0, e * 2 * I + 1, 2, 0, err);
        if (st == TPS_OK) st = pick(&x[TPS_ROLE_DOWN_W], dw, "down", e, H, I, e * I * H, 1, H, err);
        if (st == TPS_OK && db->data) st = pick(&x[TPS_ROLE_DOWN_B], db, "down", e, H, 0, e * H, 1, 0, err);
    }
    if (st != TPS_OK) return st; /* the caller releases the layer */
    /* The copies carry every shape the fused tensors had (the expert count is the router's,
     * the width and hidden size each copy's): the originals go, halving the layer's memory. */
    for (int r = TPS_ROLE_EXPERTS_GATE_UP_W; r <= TPS_ROLE_EXPERTS_DOWN_B; r++) tps_vt_release(&l->t[r]);
    return TPS_OK;
}
