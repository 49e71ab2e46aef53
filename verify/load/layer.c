/* One layer's tensors: loading, the checks against a shard set's manifest, and the shapes
 * the TP convention's share implies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/base/checked.h"
#include "../../lib/engine/shardset.h"
#include "../math/mla.h"
#include "../math/ops.h"
#include "dequant.h"
#include "finite.h"
#include "fused_experts.h"
#include "layer.h"
#include "names.h"

static bool vrole_is_bias(tps_block_role r)
{
    switch (r) {
    case TPS_ROLE_ATTN_NORM_B: case TPS_ROLE_Q_B: case TPS_ROLE_K_B: case TPS_ROLE_V_B: case TPS_ROLE_QKV_B:
    case TPS_ROLE_O_B: case TPS_ROLE_MLP_NORM_B: case TPS_ROLE_GATE_B: case TPS_ROLE_UP_B: case TPS_ROLE_FC_B:
    case TPS_ROLE_DOWN_B: case TPS_ROLE_Q_A_B: case TPS_ROLE_KV_A_B: case TPS_ROLE_ROUTER_LOGIT_B:
    case TPS_ROLE_EXPERTS_GATE_UP_B: case TPS_ROLE_EXPERTS_DOWN_B:
        return true;
    default:
        return false;
    }
}

/* A role template may offer alternatives, "{ln_mlp,post_attention_layernorm}.weight": the
 * first one that has() finds is the tensor (one preset serves Falcon-7B's one shared norm,
 * falcon-rw's two sequential ones and Falcon-40B's ln_attn / ln_mlp); when none is there,
 * the first, so that a message names it.  name is replaced; false when out of memory. */
static bool pick_alternative(char **name, bool (*has)(void *, const char *), void *ctx)
{
    char *open = strchr(*name, '{'), *close = open ? strchr(open, '}') : NULL;
    if (!close) return true;
    size_t pre = (size_t)(open - *name), post = strlen(close + 1);
    char *first = NULL;
    for (const char *a = open + 1; a <= close;) {
        size_t alen = strcspn(a, ",}");
        char *cand = malloc(pre + alen + post + 1);
        if (!cand) {
            free(first);
            return false;
        }
        memcpy(cand, *name, pre);
        memcpy(cand + pre, a, alen);
        memcpy(cand + pre + alen, close + 1, post + 1);
        if (has(ctx, cand)) {
            free(first);
            free(*name);
            *name = cand;
            return true;
        }
        if (first) free(cand);
        else first = cand;
        a += alen + 1;
    }
    free(*name);
    *name = first;
    return true;
}

static tps_status load_role(const tps_block *b, tps_block_role role, uint64_t layer, uint64_t expert,
                            const tps_vsource *src, tps_vt *out, tps_error *err)
{
    bool oom;
    char *name = tps_verify_tensor_name(b, role, layer, expert, &oom);
    if (name && !pick_alternative(&name, src->has, src->ctx)) {
        free(name);
        oom = true;
    }
    if (oom) return tps_fail_oom(err, "a tensor name");
    if (!name) return TPS_OK;
    /* A bias role may name a tensor a checkpoint lacks (Llama vs Qwen2): absent.  So may the
     * q/k norms: GLM-4.5 holds them only under config.json's use_qk_norm (none: no norm). */
    bool qk_norm = role == TPS_ROLE_Q_NORM_W || role == TPS_ROLE_K_NORM_W;
    if ((vrole_is_bias(role) || qk_norm || tps_vmla_role_optional(b, role)) && !src->has(src->ctx, name)) {
        free(name);
        return TPS_OK;
    }
    tps_status st = tps_vload_held(b, src, name, out, err);
    if (st == TPS_OK && !tps_vdtype_supported(out->dtype))
        st = tps_fail(err, TPS_EINVALID, "%s: dtype %s; verify needs BF16, F16, F32, F64 or FP8 weights", name,
                      tps_dtype_name(out->dtype));
    free(name);
    return st;
}

static tps_status fetch_expert(void *ctx, uint64_t e, tps_vt *row, tps_error *err)
{
    vexpert_fetcher *f = ctx;
    tps_status st = TPS_OK;
    for (int r = 0; r < TPS_ROLE_COUNT && st == TPS_OK; r++)
        if (tps_verify_role_per_expert(f->b, (tps_block_role)r))
            st = load_role(f->b, (tps_block_role)r, f->layer, e, f->src, &row[r], err);
    if (st == TPS_OK && f->after) st = f->after(f->arg, e, row, err);
    return st;
}

/* Whether l's routed experts can stream: each expert's tensors are its own (fused
 * whole-layer experts_* tensors are loaded whole and cut into the table). */
static bool experts_stream(const vlayer *l)
{
    for (int r = 0; r < TPS_ROLE_COUNT; r++)
        if (tps_vrole_fused_experts((tps_block_role)r) && l->t[r].data) return false;
    return true;
}

tps_status tps_vlayer_load(const tps_block *b, uint64_t layer, uint64_t experts, const tps_vsource *src, vlayer *out,
                       tps_error *err)
{
    return tps_vlayer_load_streamed(b, layer, experts, src, NULL, out, err);
}

tps_status tps_vlayer_load_streamed(const tps_block *b, uint64_t layer, uint64_t experts, const tps_vsource *src,
                                    vexpert_fetcher *f, vlayer *out, tps_error *err)
{
    tps_status st = TPS_OK;
    memset(out, 0, sizeof *out);
    bool moe = tps_block_layer_is_moe(b, layer);
    for (int r = 0; r < TPS_ROLE_COUNT; r++) {
        tps_block_role role = (tps_block_role)r;
        if (tps_block_is_moe(b) && !moe && tps_verify_role_routing(role)) continue;
        if (!tps_verify_role_per_expert(b, role))
            TPS_CHECK(load_role(b, role, layer, 0, src, &out->t[r], err));
        else if (tps_block_is_moe(b) && !moe) /* a dense layer of a MoE model */
            TPS_CHECK(load_role(b, role, layer, TPS_VEXPERT_DENSE, src, &out->t[r], err));
        else if (b->shared_prefix)
            TPS_CHECK(load_role(b, role, layer, TPS_VEXPERT_SHARED, src, &out->sh[r], err));
    }
    if (!moe) return TPS_OK;
    if (!experts && out->t[TPS_ROLE_ROUTER_W].data && out->t[TPS_ROLE_ROUTER_W].ndim == 2)
        experts = out->t[TPS_ROLE_ROUTER_W].shape[0];
    if (!experts) {
        st = tps_fail(err, TPS_EINVALID, "layer %llu: a mixture-of-experts block needs a 2-D router to count its experts",
                      (unsigned long long)layer);
        goto cleanup;
    }
    /* experts comes from a tensor shape bounded by its file: the product cannot overflow
     * a size the router's own bytes did not already exceed, but check anyway. */
    uint64_t cnt;
    size_t cnt_sz;
    if (!tps_mul_u64(experts, TPS_ROLE_COUNT, &cnt) || !tps_u64_to_size(cnt, &cnt_sz) ||
        !(out->ex = calloc(cnt_sz, sizeof *out->ex))) {
        st = tps_fail_oom(err, "the experts' tensors");
        goto cleanup;
    }
    out->nex = experts;
    bool stream = f && experts_stream(out);
    /* streaming: expert 0 stays loaded, the one whose tensors size the layer (resolve_dims).
     * Fused 3-D experts (never streamed): each expert's roles are copied out of them
     * (tps_vexperts_unfuse); the MLP roles the block names are the dense layers' and the
     * shared expert's (Llama 4). */
    for (uint64_t e = 0; e < (stream ? 1 : experts) && !b->role[TPS_ROLE_EXPERTS_GATE_UP_W]; e++)
        for (int r = 0; r < TPS_ROLE_COUNT; r++)
            if (tps_verify_role_per_expert(b, (tps_block_role)r))
                TPS_CHECK(load_role(b, (tps_block_role)r, layer, e, src, &out->ex[e * TPS_ROLE_COUNT + r], err));
    TPS_CHECK(tps_vexperts_unfuse(b, out, err));
    if (stream) {
        f->stream.ctx = f;
        f->stream.fetch = fetch_expert;
        f->b = b;
        f->layer = layer;
        f->src = src;
        out->stream = &f->stream;
    }
cleanup:
    if (st != TPS_OK) tps_vlayer_release(out);
    return st;
}

tps_status tps_vlayer_require_finite(const vlayer *l, const char *whose, tps_error *err)
{
    tps_status st = TPS_OK;
    for (int r = 0; r < TPS_ROLE_COUNT && st == TPS_OK; r++) {
        st = tps_vt_require_finite(&l->t[r], whose, err);
        if (st == TPS_OK) st = tps_vt_require_finite(&l->sh[r], whose, err);
    }
    for (uint64_t i = 0; i < l->nex * TPS_ROLE_COUNT && st == TPS_OK; i++)
        st = tps_vt_require_finite(&l->ex[i], whose, err);
    return st;
}

int tps_vexpected_shape(const tps_block *b, const vdims *d, const vshare *s, tps_block_role role, uint64_t *shape)
{
    uint64_t H = d->hidden, hd = d->hd, out = 0, in = H;
    bool vec = false;
    if (b->attention == TPS_ATTN_MLA && !tps_vrole_is_mlp(role)) return tps_vmla_expected_shape(d, s, role, shape);
    switch (role) {
    case TPS_ROLE_ATTN_NORM_W: case TPS_ROLE_ATTN_NORM_B: case TPS_ROLE_MLP_NORM_W: case TPS_ROLE_MLP_NORM_B:
    case TPS_ROLE_O_B: case TPS_ROLE_DOWN_B: case TPS_ROLE_POST_ATTN_NORM_W: case TPS_ROLE_POST_MLP_NORM_W:
        out = H, vec = true;
        break;
    case TPS_ROLE_Q_B: vec = true; /* fall through */
    case TPS_ROLE_Q_W: out = s->q_n * hd; break;
    case TPS_ROLE_K_B: case TPS_ROLE_V_B: vec = true; /* fall through */
    case TPS_ROLE_K_W: case TPS_ROLE_V_W: out = s->kv_n * hd; break;
    case TPS_ROLE_QKV_B: vec = true; /* fall through */
    case TPS_ROLE_QKV_W:
        out = b->qkv_interleaved ? s->q_n * 3 * hd : (s->q_n + 2 * s->kv_n) * hd;
        /* Megatron's plain row chunk of the group's block: (heads + 2 kv) hd / T rows. */
        if (b->qkv_row_chunks && s->q_n) out = (d->heads + 2 * d->kv) * hd / (d->heads / s->q_n);
        break;
    case TPS_ROLE_O_W: out = H, in = s->q_n * hd; break;
    case TPS_ROLE_GATE_B: case TPS_ROLE_UP_B: case TPS_ROLE_FC_B: vec = true; /* fall through */
    case TPS_ROLE_GATE_W: case TPS_ROLE_UP_W: case TPS_ROLE_FC_W: out = s->i_n; break;
    case TPS_ROLE_GATE_UP_W: out = 2 * s->i_n; break;
    case TPS_ROLE_DOWN_W: out = H, in = s->i_n; break;
    case TPS_ROLE_ROUTER_W:
        shape[0] = d->experts, shape[1] = H;
        return 2;
    case TPS_ROLE_SHARED_GATE_W:
        shape[0] = 1, shape[1] = H;
        return 2;
    case TPS_ROLE_ROUTER_BIAS:
        shape[0] = d->experts;
        return 1;
    case TPS_ROLE_Q_NORM_W: case TPS_ROLE_K_NORM_W: /* replicated whole on every rank */
        shape[0] = b->qk_norm == TPS_QK_NORM_PER_HEAD ? hd : role == TPS_ROLE_Q_NORM_W ? d->heads * hd : d->kv * hd;
        return 1;
    case TPS_ROLE_SINKS: /* cut with the q heads */
        shape[0] = s->q_n;
        return 1;
    case TPS_ROLE_ROUTER_LOGIT_B:
        shape[0] = d->experts;
        return 1;
    case TPS_ROLE_EXPERTS_GATE_UP_W: case TPS_ROLE_EXPERTS_GATE_UP_B: case TPS_ROLE_EXPERTS_DOWN_W:
    case TPS_ROLE_EXPERTS_DOWN_B:
        return tps_vexperts_fused_shape(d, s, role, shape);
    default: return 0;
    }
    if (vec) {
        shape[0] = out;
        return 1;
    }
    shape[0] = b->conv1d ? in : out;
    shape[1] = b->conv1d ? out : in;
    return 2;
}

static bool check_one(const tps_block *b, const vdims *d, const vshare *s, const tps_vt *t, tps_block_role role,
                      char *msg, size_t msgsize)
{
    uint64_t want[3];
    int nd = tps_vexpected_shape(b, d, s, role, want);
    if (!t->data || nd == 0) return true;
    bool same = t->ndim == nd;
    for (int i = 0; same && i < nd; i++) same = t->shape[i] == want[i];
    if (same) return true;
    char have_s[128], want_s[64];
    tps_shape_str(t->shape, t->ndim, have_s, sizeof have_s);
    tps_shape_str(want, nd, want_s, sizeof want_s);
    snprintf(msg, msgsize,
             "%s (%s) with shape %s where the TP convention needs %s (q heads %llu-%llu, KV heads %llu-%llu, "
             "intermediate %llu-%llu%s)",
             t->name, tps_block_role_name(role), have_s, want_s, (unsigned long long)s->q_first,
             (unsigned long long)(s->q_first + s->q_n - 1), (unsigned long long)s->kv_first,
             (unsigned long long)(s->kv_first + s->kv_n - 1), (unsigned long long)s->i_first,
             (unsigned long long)(s->i_first + s->i_n - 1),
             role == TPS_ROLE_O_B || role == TPS_ROLE_DOWN_B || role == TPS_ROLE_EXPERTS_DOWN_B
                 ? "; a row-parallel bias is replicated" : "");
    return false;
}

bool tps_vcheck_shapes(const tps_block *b, const vdims *d, const vshare *s, const vlayer *l, bool mlp, char *msg,
                   size_t msgsize)
{
    for (int r = 0; r < TPS_ROLE_COUNT; r++) {
        tps_block_role role = (tps_block_role)r;
        if (tps_vrole_is_mlp(role) != mlp) continue;
        /* a dense layer (no experts) holds its MLP in t */
        if (!tps_verify_role_per_expert(b, role) || !l->nex) {
            if (!check_one(b, d, s, &l->t[r], role, msg, msgsize)) return false;
            continue;
        }
        for (uint64_t e = 0; e < l->nex; e++) {
            const tps_vt *t = &l->ex[e * TPS_ROLE_COUNT + r];
            if (tps_vshare_has_expert(s, l->ex_first + e)) {
                if (!check_one(b, d, s, t, role, msg, msgsize)) return false;
            } else if (t->data && t->ndim >= 1 && t->shape[0] && t->shape[t->ndim - 1]) {
                /* expert parallelism: another rank's expert is held nowhere here */
                snprintf(msg, msgsize, "%s (%s), expert %llu, which expert parallelism gives ranks holding experts "
                         "%llu-%llu nothing of",
                         t->name, tps_block_role_name(role), (unsigned long long)(l->ex_first + e),
                         (unsigned long long)s->e_first, (unsigned long long)(s->e_first + s->e_n - 1));
                return false;
            }
        }
        vshare sh = *s;
        sh.i_first = s->s_first;
        sh.i_n = s->s_n;
        if (!check_one(b, d, &sh, &l->sh[r], role, msg, msgsize)) return false;
    }
    return true;
}

static tps_status check_role(const tps_block *b, tps_block_role role, uint64_t layer, uint64_t expert,
                             tps_shardset *ss, const tps_vsource *source, bool read, uint64_t *tensors,
                             uint64_t *bytes, tps_error *err)
{
    bool oom;
    char *name = tps_verify_tensor_name(b, role, layer, expert, &oom);
    tps_vsource set = tps_vsource_shardset(ss);
    if (name && !pick_alternative(&name, set.has, set.ctx)) {
        free(name);
        oom = true;
    }
    if (oom) return tps_fail_oom(err, "a tensor name");
    /* not in the set: the ranks' load says so, or the role is unused */
    tps_status st = !name ? TPS_OK
                    : read && !source ? tps_vtensor_check_read(ss, name, tensors, bytes, err)
                                      : tps_vtensor_check(ss, name, source, tensors, bytes, err);
    free(name);
    return st;
}

tps_status tps_vlayer_check(const tps_block *b, uint64_t layer, uint64_t nex, tps_shardset *ss,
                            const tps_vsource *source, bool streamed, uint64_t *tensors, uint64_t *bytes,
                            tps_error *err)
{
    bool moe = tps_block_layer_is_moe(b, layer);
    for (int r = 0; r < TPS_ROLE_COUNT; r++) {
        tps_block_role role = (tps_block_role)r;
        tps_status st = TPS_OK;
        if (tps_block_is_moe(b) && !moe && tps_verify_role_routing(role)) continue;
        if (!tps_verify_role_per_expert(b, role)) {
            st = check_role(b, role, layer, 0, ss, source, false, tensors, bytes, err);
        } else if (!moe) {
            st = check_role(b, role, layer, TPS_VEXPERT_DENSE, ss, source, false, tensors, bytes, err);
        } else {
            for (uint64_t e = 0; e < nex && st == TPS_OK && !b->role[TPS_ROLE_EXPERTS_GATE_UP_W]; e++)
                st = check_role(b, role, layer, e, ss, source, streamed && e > 0, tensors, bytes, err);
            if (st == TPS_OK && b->shared_prefix)
                st = check_role(b, role, layer, TPS_VEXPERT_SHARED, ss, source, false, tensors, bytes, err);
        }
        if (st) return st;
    }
    return TPS_OK;
}
