/* The TP convention's share of each rank and the maps of verify/math/share.h. */
#include <string.h>

#include "share.h"

bool tps_vrole_is_mlp(tps_block_role r)
{
    return r >= TPS_ROLE_MLP_NORM_W && r != TPS_ROLE_POST_ATTN_NORM_W && r != TPS_ROLE_Q_NORM_W &&
           r != TPS_ROLE_K_NORM_W && r != TPS_ROLE_SINKS && !(r >= TPS_ROLE_Q_A_W && r <= TPS_ROLE_KV_B_W);
}

void tps_vshare_of(const vdims *d, uint64_t T, uint64_t r, vshare *s)
{
    s->q_n = d->heads / T;
    s->q_first = r * s->q_n;
    if (d->kv >= T) {
        s->kv_n = d->kv / T;
        s->kv_first = r * s->kv_n;
    } else {
        s->kv_n = 1;
        s->kv_first = r * d->kv / T;
    }
    s->i_n = d->inter / T;
    s->i_first = r * s->i_n;
    if (d->i_block) { /* lib/partition/partition.h's uneven cut, in blocks of i_block columns */
        uint64_t nb = d->inter / d->i_block, per = (nb / T + (nb % T != 0)) * d->i_block;
        s->i_first = r * per;
        s->i_n = s->i_first >= d->inter ? 0 : d->inter - s->i_first < per ? d->inter - s->i_first : per;
    }
    s->s_n = d->sh_inter / T;
    s->s_first = r * s->s_n;
    s->e_first = s->e_n = 0;
    if (d->ep && d->experts && T > 1) { /* whole experts, E/T of them */
        s->e_n = d->experts / T;
        s->e_first = r * s->e_n;
        s->i_first = 0;
        s->i_n = d->inter;
    }
}

static void attn_map(const tps_block *b, const vdims *d, const vshare *s, bool global, vattn_map *m)
{
    uint64_t hd = d->hd;
    memset(m, 0, sizeof *m);
    m->hn = s->q_n;
    m->q_first = s->q_first;
    m->kv_first = s->kv_first;
    m->kv_n = s->kv_n;
    m->o_off = global ? s->q_first * hd : 0;
    m->qk = NULL;
    if (b->attention == TPS_ATTN_MLA) { /* verify/math/mla_tmpl.h: heads held from q_off on */
        m->q_off = global ? s->q_first : 0;
        m->o_off = m->q_off * d->vhd;
        return;
    }
    bool fused = b->role[TPS_ROLE_QKV_W] != NULL;
    if (fused && b->qkv_grouped) {
        /* [q heads of the group; k; v] per KV group: the whole model's groups, or the ones a
         * rank holds (whole, or one with its share of the q heads).  One group held is
         * [Q; K; V] below. */
        uint64_t run = global ? d->heads / d->kv : s->q_n / s->kv_n, held = global ? d->kv : s->kv_n;
        if (held > 1) {
            uint64_t gs = (run + 2) * hd, g0 = global ? s->kv_first : 0;
            m->stride = hd;
            m->q_run = run;
            m->q_gstride = m->kv_stride = gs;
            m->q_phase = global ? s->q_first % run : 0;
            m->q_off = global ? s->q_first / run * gs : 0;
            m->k_off = g0 * gs + run * hd;
            m->v_off = m->k_off + hd;
            return;
        }
    }
    if (fused && b->qkv_interleaved) {
        m->stride = 3 * hd;
        m->q_off = global ? s->q_first * 3 * hd : 0;
        m->k_off = m->q_off + hd;
        m->v_off = m->q_off + 2 * hd;
        return;
    }
    m->stride = hd;
    uint64_t qn = global ? d->heads : s->q_n, kvn = global ? d->kv : s->kv_n;
    m->q_off = global ? s->q_first * hd : 0;
    m->k_off = (fused ? qn * hd : 0) + (global ? s->kv_first * hd : 0);
    m->v_off = (fused ? (qn + kvn) * hd : 0) + (global ? s->kv_first * hd : 0);
}

void tps_vattn_map_global(const tps_block *b, const vdims *d, const vshare *s, vattn_map *m)
{
    attn_map(b, d, s, true, m);
}

void tps_vattn_map_local(const tps_block *b, const vdims *d, const vshare *s, vattn_map *m)
{
    attn_map(b, d, s, false, m);
}

void tps_vmlp_map_global(const vdims *d, const vshare *s, vmlp_map *m)
{
    m->i_first = s->i_first;
    m->i_n = s->i_n;
    m->up_off = d->inter;
    m->sh_first = s->s_first;
    m->sh_n = s->s_n;
    m->sh_up_off = d->sh_inter;
    m->e_first = s->e_first;
    m->e_n = s->e_n;
}

void tps_vmlp_map_local(const vdims *d, const vshare *s, vmlp_map *m)
{
    (void)d;
    m->i_first = 0;
    m->i_n = s->i_n;
    m->up_off = s->i_n;
    m->sh_first = 0;
    m->sh_n = s->s_n;
    m->sh_up_off = s->s_n;
    m->e_first = s->e_first;
    m->e_n = s->e_n;
}
