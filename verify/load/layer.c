/* One layer's tensors: names, loading, the TP convention's share of each rank, and the
 * shapes that share implies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/base/buf.h"
#include "../lib/base/checked.h"
#include "../lib/base/crc.h"
#include "../lib/engine/gather.h"
#include "../lib/set/manifest.h"
#include "dequant_int.h"
#include "device.h"
#include "finite.h"
#include "internal.h"
#include "quant_blame.h"

void tps_vt_release(tps_vt *t)
{
    if (!t) return;
    tps_vdev_release(t);
    free(t->name);
    free(t->data);
    memset(t, 0, sizeof *t);
}

void tps_vlayer_release(vlayer *l)
{
    if (!l) return;
    for (int r = 0; r < TPS_ROLE_COUNT; r++) tps_vt_release(&l->t[r]);
    for (uint64_t i = 0; i < l->nex * TPS_ROLE_COUNT; i++) tps_vt_release(&l->ex[i]);
    for (int r = 0; r < TPS_ROLE_COUNT; r++) tps_vt_release(&l->sh[r]);
    free(l->ex);
    memset(l, 0, sizeof *l);
}

bool tps_verify_role_per_expert(const tps_block *b, tps_block_role role)
{
    if (!tps_block_is_moe(b)) return false;
    switch (role) {
    case TPS_ROLE_GATE_W: case TPS_ROLE_UP_W: case TPS_ROLE_GATE_B: case TPS_ROLE_UP_B: case TPS_ROLE_GATE_UP_W:
    case TPS_ROLE_FC_W: case TPS_ROLE_FC_B: case TPS_ROLE_DOWN_W:
        return true;
    default:
        return false;
    }
}

bool tps_verify_role_routing(tps_block_role role)
{
    return role == TPS_ROLE_ROUTER_W || role == TPS_ROLE_ROUTER_BIAS || role == TPS_ROLE_SHARED_GATE_W ||
           role == TPS_ROLE_ROUTER_LOGIT_B || tps_vrole_fused_experts(role);
}

bool tps_vrole_is_mlp(tps_block_role r)
{
    return r >= TPS_ROLE_MLP_NORM_W && r != TPS_ROLE_POST_ATTN_NORM_W && r != TPS_ROLE_Q_NORM_W &&
           r != TPS_ROLE_K_NORM_W && r != TPS_ROLE_SINKS && !(r >= TPS_ROLE_Q_A_W && r <= TPS_ROLE_KV_B_W);
}

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

static void put_expanded(tps_buf *out, const char *tmpl, uint64_t layer, uint64_t expert)
{
    for (const char *p = tmpl; *p;) {
        if (strncmp(p, "{layer}", 7) == 0) {
            tps_buf_printf(out, "%llu", (unsigned long long)layer);
            p += 7;
        } else if (strncmp(p, "{expert}", 8) == 0) {
            tps_buf_printf(out, "%llu", (unsigned long long)expert);
            p += 8;
        } else {
            tps_buf_putc(out, *p++);
        }
    }
}

/* The expanded text as a malloc'd string; NULL when out of memory. */
static char *take_string(tps_buf *s)
{
    const char *c = tps_buf_cstr(s);
    char *out = c ? strdup(c) : NULL;
    tps_buf_release(s);
    return out;
}

char *tps_verify_tensor_name(const tps_block *b, tps_block_role role, uint64_t layer, uint64_t expert, bool *oom)
{
    *oom = false;
    if (!b->role[role]) return NULL;
    tps_buf s = TPS_BUF_INIT;
    if (b->layer_prefix) put_expanded(&s, b->layer_prefix, layer, expert);
    if (tps_verify_role_per_expert(b, role)) {
        const char *pre = expert == TPS_VEXPERT_DENSE ? b->dense_prefix
                          : expert == TPS_VEXPERT_SHARED ? b->shared_prefix : b->expert_prefix;
        if (pre) put_expanded(&s, pre, layer, expert);
    }
    put_expanded(&s, b->role[role], layer, expert);
    char *name = take_string(&s);
    if (!name) *oom = true;
    return name;
}

char *tps_verify_layer_prefix(const tps_block *b, uint64_t layer)
{
    tps_buf s = TPS_BUF_INIT;
    put_expanded(&s, b->layer_prefix ? b->layer_prefix : "", layer, 0);
    return take_string(&s);
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
    /* A bias role may name a tensor a checkpoint lacks (Llama vs Qwen2): absent. */
    if ((vrole_is_bias(role) || tps_vmla_role_optional(b, role)) && !src->has(src->ctx, name)) {
        free(name);
        return TPS_OK;
    }
    tps_status st = tps_vload_weight(b, src, name, out, err);
    if (st == TPS_OK && !tps_vdtype_supported(out->dtype))
        st = tps_fail(err, TPS_EINVALID, "%s: dtype %s; verify needs BF16, F16, F32, F64 or FP8 weights", name,
                      tps_dtype_name(out->dtype));
    free(name);
    return st;
}

tps_status tps_vlayer_load(const tps_block *b, uint64_t layer, uint64_t experts, const tps_vsource *src, vlayer *out,
                       tps_error *err)
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
    for (uint64_t e = 0; e < experts; e++)
        for (int r = 0; r < TPS_ROLE_COUNT; r++)
            if (tps_verify_role_per_expert(b, (tps_block_role)r))
                TPS_CHECK(load_role(b, (tps_block_role)r, layer, e, src, &out->ex[e * TPS_ROLE_COUNT + r], err));
    TPS_CHECK(tps_vexperts_unfuse(out, err));
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
    s->s_n = d->sh_inter / T;
    s->s_first = r * s->s_n;
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
    if (b->attention == TPS_ATTN_MLA) { /* verify/mla_tmpl.h: heads held from q_off on */
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
        for (uint64_t e = 0; e < l->nex; e++)
            if (!check_one(b, d, s, &l->ex[e * TPS_ROLE_COUNT + r], role, msg, msgsize)) return false;
        vshare sh = *s;
        sh.i_first = s->s_first;
        sh.i_n = s->s_n;
        if (!check_one(b, d, &sh, &l->sh[r], role, msg, msgsize)) return false;
    }
    return true;
}

/* Names out and gives it a buffer for a whole tensor; *nb is its byte count. */
static tps_status vt_prepare(tps_vt *out, const char *name, uint64_t nbytes, tps_dtype dtype, int ndim,
                             const uint64_t *shape, size_t *nb, tps_error *err)
{
    memset(out, 0, sizeof *out);
    if (!tps_u64_to_size(nbytes, nb)) return tps_fail_oom(err, name);
    out->name = strdup(name);
    out->data = malloc(*nb ? *nb : 1);
    if (!out->name || !out->data) {
        tps_vt_release(out);
        return tps_fail_oom(err, name);
    }
    out->dtype = dtype;
    out->ndim = ndim;
    memcpy(out->shape, shape, sizeof out->shape);
    /* the readers checked nbytes against the shape, so the product fits */
    tps_prod_u64(shape, ndim, &out->nelem);
    return TPS_OK;
}

static tps_status index_load(void *ctx, const char *name, tps_vt *out, tps_error *err)
{
    const tps_index *ix = ctx;
    const tps_tensor *t = tps_index_find(ix, name);
    if (!t) return tps_fail(err, TPS_EINVALID, "%s: no tensor %s", ix->path, name);
    size_t nb;
    tps_status st = vt_prepare(out, name, t->nbytes, t->dtype, t->ndim, t->shape, &nb, err);
    if (st == TPS_OK) st = tps_tensor_read(ix, t, 0, out->data, nb, err);
    if (st) tps_vt_release(out);
    return st;
}

static bool index_has(void *ctx, const char *name)
{
    return tps_index_find(ctx, name) != NULL;
}

tps_vsource tps_vsource_index(const tps_index *ix)
{
    tps_vsource s = {(void *)ix, index_load, index_has};
    return s;
}

typedef struct checked_read {
    unsigned char *buf; /* the global bytes go here; NULL: only checked */
    char finding[1400];
    tps_vfinite fin;
} checked_read;

static tps_status keep_bytes(void *arg, uint64_t off, const void *p, size_t n, tps_error *err)
{
    (void)err;
    checked_read *c = arg;
    if (c->buf) memcpy(c->buf + off, p, n);
    tps_vfinite_feed(&c->fin, p, n); /* the walk gives the global bytes front to back */
    return TPS_OK;
}

static void keep_finding(void *arg, const char *msg)
{
    checked_read *c = arg;
    if (!c->finding[0]) snprintf(c->finding, sizeof c->finding, "%s", msg);
}

/* The failure for non-finite values found in shard tensor t (fin); with source (--source),
 * whether the source's copy holds them too. */
static tps_status fail_not_finite(tps_shardset *ss, const tps_manifest_tensor *t, const tps_vfinite *fin,
                                  const tps_vsource *source, tps_error *err)
{
    char what[600], also[400] = "";
    bool source_finite = false; /* then the shards are at fault, not the checkpoint */
    tps_vfinite_describe(fin, t->name, t->shape, t->ndim, what, sizeof what);
    if (source) {
        tps_vt s;
        tps_error serr;
        tps_error_clear(&serr);
        memset(&s, 0, sizeof s);
        if (source->has(source->ctx, t->name) && source->load(source->ctx, t->name, &s, &serr) == TPS_OK) {
            tps_vfinite sf;
            tps_vt_scan(&s, &sf);
            if (sf.count) {
                snprintf(also, sizeof also,
                         "; the source holds it too (%llu non-finite value%s, the first at element %llu)",
                         (unsigned long long)sf.count, sf.count == 1 ? "" : "s", (unsigned long long)sf.first);
            } else {
                source_finite = true;
                snprintf(also, sizeof also,
                         "; the source's copy is finite: these shards were not cut from this source (or were changed "
                         "since, their manifest with them)");
            }
        }
        tps_vt_release(&s);
    }
    return tps_fail(err, TPS_EINVALID, "%s: %s%s%s%s", ss->dir, what, also, source_finite ? "" : ": ",
                    source_finite ? "" : tps_vfinite_why);
}

/* Reads tensor t of the shard set through the gather walk (every rank's bytes once, replicas
 * compared, padding checked) into buf (NULL: only checks), compares its global CRC-32 with
 * the manifest's, and refuses non-finite values (source: the reference's other source, whose
 * copy the message then describes). */
static tps_status read_checked(tps_shardset *ss, const tps_manifest_tensor *t, void *buf, const tps_vsource *source,
                               tps_error *err)
{
    checked_read c = {buf, "", {0}};
    tps_vfinite_init(&c.fin, t->dtype);
    tps_gather_hooks h = {keep_bytes, keep_finding, &c, false};
    uint32_t crc;
    tps_status st = tps_gather_tensor(ss, t, &h, &crc, NULL, err);
    if (st) return st;
    /* A set tpshard did not write (an engine's, a Megatron checkpoint) records no CRC. */
    if (!c.finding[0] && (crc == t->crc || ss->m->adopted))
        return c.fin.count ? fail_not_finite(ss, t, &c.fin, source, err) : TPS_OK;
    char path[4200];
    bool found = false;
    tps_error ferr;
    tps_error_clear(&ferr);
    tps_shardset_changed_file(ss, t, path, sizeof path, &found, &ferr); /* the best name we can give */
    const char *file = found ? path : NULL;
    if (c.finding[0])
        return tps_fail(err, TPS_EMISMATCH, "%s: %s; the shard set does not match its manifest (tpshard check %s)",
                        file ? file : ss->dir, c.finding, ss->dir);
    return tps_fail(err, TPS_EMISMATCH,
                    "%s: tensor '%s': CRC-32 %08x of its bytes, the manifest says %08x: the shard set does not match "
                    "its manifest (tpshard check %s lists every difference)",
                    file ? file : ss->dir, t->name, (unsigned)crc, t->crc, ss->dir);
}

static tps_status shardset_load(void *ctx, const char *name, tps_vt *out, tps_error *err)
{
    tps_shardset *ss = ctx;
    const tps_manifest_tensor *t = tps_manifest_find(ss->m, name);
    if (!t) return tps_fail(err, TPS_EINVALID, "%s: the manifest has no tensor %s", ss->dir, name);
    size_t nb;
    tps_status st = vt_prepare(out, name, t->nbytes, t->dtype, t->ndim, t->shape, &nb, err);
    if (st == TPS_OK) st = read_checked(ss, t, out->data, NULL, err);
    if (st) tps_vt_release(out);
    return st;
}

bool tps_vsource_is_shardset(const tps_vsource *src, const tps_shardset *ss)
{
    return src->load == shardset_load && src->ctx == ss;
}

tps_status tps_vtensor_check(tps_shardset *ss, const char *name, const tps_vsource *source, uint64_t *tensors,
                             uint64_t *bytes, tps_error *err)
{
    const tps_manifest_tensor *t = tps_manifest_find(ss->m, name);
    if (!t) return TPS_OK;
    if (source) {
        tps_status st = read_checked(ss, t, NULL, source, err);
        if (st) return st;
    }
    (*tensors)++;
    *bytes += t->nbytes;
    return TPS_OK;
}

static bool shardset_has(void *ctx, const char *name);

static tps_status check_role(const tps_block *b, tps_block_role role, uint64_t layer, uint64_t expert,
                             tps_shardset *ss, const tps_vsource *source, uint64_t *tensors, uint64_t *bytes,
                             tps_error *err)
{
    bool oom;
    char *name = tps_verify_tensor_name(b, role, layer, expert, &oom);
    if (name && !pick_alternative(&name, shardset_has, ss)) {
        free(name);
        oom = true;
    }
    if (oom) return tps_fail_oom(err, "a tensor name");
    /* not in the set: the ranks' load says so, or the role is unused */
    tps_status st = name ? tps_vtensor_check(ss, name, source, tensors, bytes, err) : TPS_OK;
    free(name);
    return st;
}

tps_status tps_vlayer_check(const tps_block *b, uint64_t layer, uint64_t nex, tps_shardset *ss,
                            const tps_vsource *source, uint64_t *tensors, uint64_t *bytes, tps_error *err)
{
    bool moe = tps_block_layer_is_moe(b, layer);
    for (int r = 0; r < TPS_ROLE_COUNT; r++) {
        tps_block_role role = (tps_block_role)r;
        tps_status st = TPS_OK;
        if (tps_block_is_moe(b) && !moe && tps_verify_role_routing(role)) continue;
        if (!tps_verify_role_per_expert(b, role)) {
            st = check_role(b, role, layer, 0, ss, source, tensors, bytes, err);
        } else if (!moe) {
            st = check_role(b, role, layer, TPS_VEXPERT_DENSE, ss, source, tensors, bytes, err);
        } else {
            for (uint64_t e = 0; e < nex && st == TPS_OK; e++)
                st = check_role(b, role, layer, e, ss, source, tensors, bytes, err);
            if (st == TPS_OK && b->shared_prefix)
                st = check_role(b, role, layer, TPS_VEXPERT_SHARED, ss, source, tensors, bytes, err);
        }
        if (st) return st;
    }
    return TPS_OK;
}

static bool shardset_has(void *ctx, const char *name)
{
    const tps_shardset *ss = ctx;
    return tps_manifest_find(ss->m, name) != NULL;
}

tps_vsource tps_vsource_shardset(tps_shardset *ss)
{
    tps_vsource s = {ss, shardset_load, shardset_has};
    return s;
}

double tps_verify_rtol(tps_dtype dt)
{
    switch (dt) {
    case TPS_DT_F64: return 1e-7;
    case TPS_DT_F32: return 1e-5;
    case TPS_DT_F16: return 1e-3;
    case TPS_DT_BF16: return 1.6e-2;
    case TPS_DT_F8_E4M3: return 1.25e-1;
    default: return 2.5e-1;
    }
}

const char *tps_verify_stage_name(int stage)
{
    return stage == TPS_VSTAGE_ATTN ? "attention" : stage == TPS_VSTAGE_MLP ? "mlp" : "?";
}
