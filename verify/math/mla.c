/* DeepSeek-V2/V3 multi-head latent attention: the sizes and the shapes the TP convention
 * gives each rank (vLLM's DeepseekV2Attention: q_a_proj, kv_a_proj_with_mqa and their
 * RMSNorms replicated; q_b_proj or q_proj and kv_b_proj cut by heads; o_proj by the heads'
 * v columns).  The math is verify/math/mla_tmpl.h. */
#include "mla.h"
#include "ops.h"

bool tps_vmla_role_optional(const tps_block *b, tps_block_role r)
{
    return b->attention == TPS_ATTN_MLA &&
           (r == TPS_ROLE_Q_W || r == TPS_ROLE_Q_A_W || r == TPS_ROLE_Q_A_NORM_W || r == TPS_ROLE_Q_B_W);
}

static uint64_t len1(const tps_vt *t)
{
    return t && t->ndim == 1 ? t->shape[0] : 0;
}

tps_status tps_vmla_resolve_dims(const tps_block *b, uint64_t layer, const vlayer *l, vdims *d, tps_error *err)
{
    unsigned long long ly = (unsigned long long)layer;
    const tps_vt *qa = vrole(l, TPS_ROLE_Q_A_W, 0, false), *qan = vrole(l, TPS_ROLE_Q_A_NORM_W, 0, false);
    const tps_vt *qb = vrole(l, TPS_ROLE_Q_B_W, 0, false), *q = vrole(l, TPS_ROLE_Q_W, 0, false);
    const tps_vt *o = vrole(l, TPS_ROLE_O_W, 0, false);
    bool lora = qa || qan || qb;
    if (!vrole(l, TPS_ROLE_KV_A_W, 0, false) || !vrole(l, TPS_ROLE_KV_A_NORM_W, 0, false) ||
        !vrole(l, TPS_ROLE_KV_B_W, 0, false) || !o || (lora ? !(qa && qan && qb) : !q))
        return tps_fail(err, TPS_EINVALID,
                        "layer %llu: multi-head latent attention needs kv_a_proj, kv_a_norm, kv_b_proj, o_proj, and "
                        "q_proj or all of q_a_proj, q_a_norm and q_b_proj", ly);
    if (lora && q)
        return tps_fail(err, TPS_EINVALID, "layer %llu: both q_proj and q_a_proj/q_b_proj: which is the q path?", ly);
    d->nope = b->qk_nope_head_dim;
    d->rope_d = b->qk_rope_head_dim;
    d->vhd = b->v_head_dim;
    if (!d->nope || !d->rope_d || !d->vhd || d->rope_d % 2)
        return tps_fail(err, TPS_EINVALID,
                        "layer %llu: multi-head latent attention needs the sizes qk_nope_head_dim, qk_rope_head_dim "
                        "(even) and v_head_dim (config.json)", ly);
    /* num_attention_heads; without it, o_proj's input columns are heads x v_head_dim */
    d->heads = b->heads ? b->heads : o->ndim == 2 ? o->shape[1] / d->vhd : 0;
    d->kvlora = len1(vrole(l, TPS_ROLE_KV_A_NORM_W, 0, false));
    d->qlora = lora ? len1(qan) : 0;
    if (!d->heads || !d->kvlora || (lora && !d->qlora))
        return tps_fail(err, TPS_EINVALID, "layer %llu: no head count, or a kv_a_norm / q_a_norm that is not 1-D", ly);
    d->kv = d->heads; /* every head has its own k_nope and v; k_pe is one head shared by all */
    d->hd = d->nope + d->rope_d;
    d->rot = b->rope != TPS_ROPE_NONE ? d->rope_d : 0;
    return TPS_OK;
}

int tps_vmla_expected_shape(const vdims *d, const vshare *s, tps_block_role role, uint64_t *shape)
{
    uint64_t H = d->hidden, out, in;
    switch (role) {
    case TPS_ROLE_ATTN_NORM_W: case TPS_ROLE_ATTN_NORM_B: case TPS_ROLE_O_B:
        shape[0] = H;
        return 1;
    case TPS_ROLE_Q_A_B: case TPS_ROLE_Q_A_NORM_W:
        shape[0] = d->qlora;
        return 1;
    case TPS_ROLE_KV_A_B:
        shape[0] = d->kvlora + d->rope_d;
        return 1;
    case TPS_ROLE_KV_A_NORM_W:
        shape[0] = d->kvlora;
        return 1;
    case TPS_ROLE_Q_W: out = s->q_n * d->hd, in = H; break;
    case TPS_ROLE_Q_A_W: out = d->qlora, in = H; break;
    case TPS_ROLE_Q_B_W: out = s->q_n * d->hd, in = d->qlora; break;
    case TPS_ROLE_KV_A_W: out = d->kvlora + d->rope_d, in = H; break;
    case TPS_ROLE_KV_B_W: out = s->q_n * (d->nope + d->vhd), in = d->kvlora; break;
    case TPS_ROLE_O_W: out = H, in = s->q_n * d->vhd; break;
    default: return 0;
    }
    shape[0] = out;
    shape[1] = in;
    return 2;
}
