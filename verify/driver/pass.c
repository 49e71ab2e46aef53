/* The verification driver: resolve the layer's sizes, draw inputs, run the reference and
 * the ranks, compare, and when a stage differs, find the rank whose slice caused it. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "../../lib/base/checked.h"
#include "../../lib/quant/mxfp4.h"
#include "../../lib/engine/shardset.h"
#include "../../lib/set/grid_ep.h"
#include "../load/finite.h"
#include "../load/layer.h"
#include "../load/names.h"
#include "../math/llama4.h"
#include "../math/mla.h"
#include "../math/ops.h"
#include "../math/ref.h"
#include "../math/util.h"
#include "../math/vbuf.h"
#include "pass.h"
#include "quant_blame.h"

void tps_verify_result_release(tps_verify_result *r)
{
    if (!r) return;
    free(r->x);
    for (int s = 0; s < TPS_VSTAGE_COUNT; s++) free(r->ref_out[s]);
    r->x = NULL;
    for (int s = 0; s < TPS_VSTAGE_COUNT; s++) r->ref_out[s] = NULL;
}

tps_status tps_verify_count_layers(const tps_block *b, const tps_vsource *ref, uint64_t *out, tps_error *err)
{
    if (b->layers) {
        *out = b->layers;
        return TPS_OK;
    }
    uint64_t n = 0;
    for (;; n++) {
        bool oom;
        char *name = tps_verify_tensor_name(b, TPS_ROLE_O_W, n, 0, &oom);
        if (oom) return tps_fail_oom(err, "a tensor name");
        if (!name) return tps_fail(err, TPS_EINVALID, "the block description names no o_proj tensor");
        bool has = ref->has(ref->ctx, name);
        free(name);
        if (!has) break;
    }
    if (!n) return tps_fail(err, TPS_EINVALID, "no layer 0: the block's o_proj name matches no tensor");
    *out = n;
    return TPS_OK;
}

/* Output dimension of a 2-D weight as the block stores it. */
static uint64_t out_dim(const tps_block *b, const tps_vt *t)
{
    return t && t->ndim == 2 ? t->shape[b->conv1d ? 1 : 0] : 0;
}

/* The routing's numbers fit the layer's experts (verify/math/moe_route.h's preconditions). */
static tps_status check_routing(const tps_block *b, const vdims *d, uint64_t layer, tps_error *err)
{
    const tps_moe_routing *m = &b->moe;
    unsigned long long L = (unsigned long long)layer, K = (unsigned long long)d->top_k,
                       E = (unsigned long long)d->experts;
    if (d->top_k == 0 || d->top_k > d->experts)
        return tps_fail(err, TPS_EINVALID, "layer %llu: top_k %llu with %llu experts", L, K, E);
    if (m->topk_method == TPS_MOE_TOPK_GREEDY || m->n_group <= 1 || m->topk_group >= m->n_group) return TPS_OK;
    if (d->experts % m->n_group || m->topk_group == 0 || m->topk_group * (d->experts / m->n_group) < d->top_k)
        return tps_fail(err, TPS_EINVALID,
                        "layer %llu: %s routing of %llu experts in n_group %llu groups, topk_group %llu, top_k %llu: "
                        "the groups must divide the experts and the kept groups hold at least top_k",
                        L, tps_moe_topk_name(m->topk_method), E, (unsigned long long)m->n_group,
                        (unsigned long long)m->topk_group, K);
    return TPS_OK;
}

static tps_status resolve_dims(const tps_block *b, uint64_t layer, const vlayer *l, uint64_t T, vdims *d,
                               tps_error *err)
{
    memset(d, 0, sizeof *d);
    const tps_vt *norm = vrole(l, TPS_ROLE_ATTN_NORM_W, 0, false);
    if (!norm) norm = vrole(l, TPS_ROLE_POST_ATTN_NORM_W, 0, false); /* OLMo 2: no pre-norm */
    bool moe = tps_block_layer_is_moe(b, layer);
    d->hidden = b->hidden ? b->hidden : norm && norm->ndim == 1 ? norm->shape[0] : 0;
    d->heads = b->heads;
    d->hd = b->head_dim;
    if (!d->hidden || (!d->heads && !d->hd) || (d->heads && !d->hd && d->hidden < d->heads))
        return tps_fail(err, TPS_EINVALID, "layer %llu: the block description gives no hidden size or heads",
                        (unsigned long long)layer);
    /* Sizes the layout left out follow from the projections' shapes. */
    uint64_t qout = out_dim(b, vrole(l, TPS_ROLE_Q_W, 0, false)), kout = out_dim(b, vrole(l, TPS_ROLE_K_W, 0, false));
    uint64_t fout = out_dim(b, vrole(l, TPS_ROLE_QKV_W, 0, false));
    if (!d->heads) {
        if (qout) d->heads = qout / d->hd;
        else if (fout && (b->qkv_interleaved || !b->kv_heads)) d->heads = fout / (3 * d->hd);
        else if (fout && fout / d->hd > 2 * b->kv_heads) d->heads = fout / d->hd - 2 * b->kv_heads;
        else d->heads = d->hidden / d->hd;
    }
    if (!d->hd) d->hd = d->hidden / d->heads;
    d->kv = b->kv_heads;
    if (!d->kv) {
        if (kout) d->kv = kout / d->hd;
        else if (fout && !b->qkv_interleaved && fout / d->hd > d->heads) d->kv = (fout / d->hd - d->heads) / 2;
        else d->kv = d->heads;
    }
    const tps_vt *g = vrole(l, TPS_ROLE_GATE_W, 0, moe), *gu = vrole(l, TPS_ROLE_GATE_UP_W, 0, moe);
    if (!g) g = vrole(l, TPS_ROLE_FC_W, 0, moe);
    /* config.json's intermediate_size is Mixtral's expert width, the dense MLP's elsewhere */
    uint64_t dense = b->llama4.dense_intermediate ? b->llama4.dense_intermediate : b->intermediate; /* Llama 4: _mlp */
    uint64_t given = !moe ? dense : b->moe_intermediate ? b->moe_intermediate
                                            : b->kind == TPS_BLOCK_MIXTRAL ? b->intermediate : 0;
    d->inter = given ? given : g ? out_dim(b, g) : out_dim(b, gu) / 2;
    if (moe && b->shared_prefix) {
        const tps_vt *sg = l->sh[TPS_ROLE_GATE_W].data ? &l->sh[TPS_ROLE_GATE_W] : NULL;
        const tps_vt *sgu = l->sh[TPS_ROLE_GATE_UP_W].data ? &l->sh[TPS_ROLE_GATE_UP_W] : NULL;
        d->sh_inter = b->shared_intermediate ? b->shared_intermediate : sg ? out_dim(b, sg) : out_dim(b, sgu) / 2;
    }
    d->experts = l->nex;
    d->top_k = b->top_k;
    if (moe && b->mxfp4) d->i_block = TPS_MXFP4_BLOCK; /* vLLM's uneven share of MXFP4 experts */
    if (b->rope != TPS_ROPE_NONE) {
        double pct = b->rotary_pct > 0 ? b->rotary_pct : 1.0;
        d->rot = (uint64_t)((double)d->hd * pct) & ~(uint64_t)1;
    }
    d->local = tps_block_layer_is_local(b, layer);
    if (d->local) d->window = b->sliding_window;
    tps_vllama4_dims(b, layer, d);
    bool fused = vrole(l, TPS_ROLE_QKV_W, 0, false) != NULL;
    tps_status st;
    if (b->attention == TPS_ATTN_MLA && (st = tps_vmla_resolve_dims(b, layer, l, d, err)) != TPS_OK) return st;
    const char *missing = NULL;
    if (b->attention != TPS_ATTN_MLA && !fused && !(vrole(l, TPS_ROLE_Q_W, 0, false) && vrole(l, TPS_ROLE_K_W, 0, false) &&
                    vrole(l, TPS_ROLE_V_W, 0, false)))
        missing = "q/k/v projections (or a fused qkv_proj)";
    else if (!vrole(l, TPS_ROLE_O_W, 0, false)) missing = "o_proj";
    else if (!vrole(l, TPS_ROLE_DOWN_W, 0, moe)) missing = "down_proj";
    else if (!g && !gu) missing = "gate_proj/up_proj, gate_up_proj or fc";
    else if (!gu && !vrole(l, TPS_ROLE_FC_W, 0, moe) && !vrole(l, TPS_ROLE_UP_W, 0, moe)) missing = "up_proj";
    else if (moe && !vrole(l, TPS_ROLE_ROUTER_W, 0, false)) missing = "router";
    else if (d->sh_inter && !(l->sh[TPS_ROLE_DOWN_W].data && (l->sh[TPS_ROLE_GATE_UP_W].data || l->sh[TPS_ROLE_UP_W].data)))
        missing = "shared expert up_proj/down_proj";
    if (missing)
        return tps_fail(err, TPS_EINVALID, "layer %llu: the block description names no %s",
                        (unsigned long long)layer, missing);
    if (d->hd == 0 || d->kv == 0 || d->heads % d->kv != 0 || d->inter == 0)
        return tps_fail(err, TPS_EINVALID,
                        "layer %llu: inconsistent sizes: %llu heads, %llu KV heads, head_dim %llu, intermediate %llu",
                        (unsigned long long)layer, (unsigned long long)d->heads, (unsigned long long)d->kv,
                        (unsigned long long)d->hd, (unsigned long long)d->inter);
    if (fused && b->qkv_interleaved && d->kv != d->heads)
        return tps_fail(err, TPS_EINVALID, "layer %llu: a per-head interleaved qkv needs as many KV heads as heads",
                        (unsigned long long)layer);
    tps_status rst = moe ? check_routing(b, d, layer, err) : TPS_OK;
    if (rst != TPS_OK) return rst;
    vshare all;
    char msg[512];
    tps_vshare_of(d, 1, 0, &all);
    if (!tps_vcheck_shapes(b, d, &all, l, false, msg, sizeof msg) || !tps_vcheck_shapes(b, d, &all, l, true, msg, sizeof msg))
        return tps_fail(err, TPS_EINVALID, "reference layer %llu does not match the block description: it holds %s",
                        (unsigned long long)layer, msg);
    if (d->heads % T || d->inter % T || (d->kv % T && T % d->kv))
        return tps_fail(err, TPS_EINVALID,
                        "layer %llu: %llu heads, %llu KV heads and intermediate %llu do not divide among %llu ranks",
                        (unsigned long long)layer, (unsigned long long)d->heads, (unsigned long long)d->kv,
                        (unsigned long long)d->inter, (unsigned long long)T);
    if (d->sh_inter % T)
        return tps_fail(err, TPS_EINVALID, "layer %llu: the shared expert's intermediate %llu does not divide among %llu ranks",
                        (unsigned long long)layer, (unsigned long long)d->sh_inter, (unsigned long long)T);
    return TPS_OK;
}

/* Standard normal inputs by Box-Muller, rounded to float so both passes see the same
 * values. */
static void draw_inputs(uint64_t seed, uint64_t layer, size_t count, float *x)
{
    uint64_t s = seed ^ (layer * 0xd1b54a32d192ed03ull);
    for (size_t i = 0; i < count; i += 2) {
        double u1 = ((double)(tps_vsplitmix64(&s) >> 11) + 1.0) / 9007199254740993.0; /* (0, 1] */
        double u2 = (double)(tps_vsplitmix64(&s) >> 11) / 9007199254740992.0;
        double r = sqrt(-2.0 * log(u1)), a = 6.283185307179586 * u2;
        x[i] = (float)(r * cos(a));
        if (i + 1 < count) x[i + 1] = (float)(r * sin(a));
    }
}

tps_vcmp tps_vcompare(const float *a, const double *b, size_t n, double rtol, double atol)
{
    tps_vcmp c = {0, 0, true};
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= atol + rtol * fabs(b[i]))) c.pass = false; /* NaN fails too */
        if (!(e <= c.max_abs)) c.max_abs = e;
        num += e * e;
        den += b[i] * b[i];
    }
    c.rel = den > 0 ? sqrt(num / den) : sqrt(num);
    return c;
}

/* Names the ranks behind a failed stage (see verify.h): a slice of the wrong shape, else a
 * partial sum that differs from the reference's partial for the rank's share, else a
 * rank whose own copy of the output differs (its replicated bias). */
static tps_status blame(const tps_block *b, const vdims *d, const vlayer *rl, uint64_t T, int stage, size_t n,
                        const double *in, const double *ref, const vrank_out *outs, tps_verify_result *res,
                        tps_error *err)
{
    size_t nh = n * (size_t)d->hidden;
    double rtol = res->stage[stage].rtol, atol = res->stage[stage].atol;
    char *det = res->detail;
    size_t dsz = sizeof res->detail;
    bool also = false;
    det[0] = 0;
    for (uint64_t r = 0; r < T; r++)
        if (outs[r].bad[stage]) {
            if (res->culprit < 0) {
                res->culprit = (int64_t)r;
                tps_vappendf(det, dsz, "%s", outs[r].why[stage]);
            } else {
                tps_vappendf(det, dsz, also ? ", %llu" : "; also rank %llu", (unsigned long long)r);
                also = true;
            }
        }
    if (res->culprit >= 0) return TPS_OK;
    double *part = malloc((nh + 1) * sizeof *part);
    if (!part) return tps_fail_oom(err, "the reference partial sums");
    tps_status st = TPS_OK;
    for (uint64_t r = 0; r < T; r++) {
        vshare s;
        tps_vshare_of(d, T, r, &s);
        st = stage == TPS_VSTAGE_ATTN ? tps_vref_attn(b, d, rl, &s, n, in, part, err)
                                      : tps_vref_mlp(b, d, rl, &s, n, in, part, err);
        if (st != TPS_OK) break;
        tps_vcmp c = tps_vcompare(outs[r].partial[stage], part, nh, rtol, atol);
        if (c.pass) continue;
        if (res->culprit < 0) {
            res->culprit = (int64_t)r;
            tps_vappendf(det, dsz,
                   "rank %llu's partial sum differs from the reference for its share (max abs err %.3g, rel err "
                   "%.3g; ",
                   (unsigned long long)r, c.max_abs, c.rel);
            if (stage == TPS_VSTAGE_ATTN)
                tps_vappendf(det, dsz, "q heads %llu-%llu with KV heads %llu-%llu)", (unsigned long long)s.q_first,
                       (unsigned long long)(s.q_first + s.q_n - 1), (unsigned long long)s.kv_first,
                       (unsigned long long)(s.kv_first + s.kv_n - 1));
            else
                tps_vappendf(det, dsz, "intermediate columns %llu-%llu)", (unsigned long long)s.i_first,
                       (unsigned long long)(s.i_first + s.i_n - 1));
        } else {
            tps_vappendf(det, dsz, also ? ", %llu" : "; also rank %llu", (unsigned long long)r);
            also = true;
        }
    }
    free(part);
    if (st != TPS_OK || res->culprit >= 0) return st;
    for (uint64_t r = 0; r < T; r++) {
        tps_vcmp c = tps_vcompare(outs[r].out[stage], ref, nh, rtol, atol);
        if (c.pass) continue;
        if (res->culprit < 0) {
            res->culprit = (int64_t)r;
            tps_vappendf(det, dsz, "every partial sum matches, but rank %llu's output after the all-reduce differs "
                             "(the all-reduce itself, or its copy of the row-parallel bias or of the post-norm)",
                         (unsigned long long)r);
        }
    }
    if (res->culprit < 0) tps_vappendf(det, dsz, "no single rank's slice explains it");
    return TPS_OK;
}

/* Rank 0's half of the pass: the float64 reference of both stages and the comparison of
 * every rank's outputs with it (and, on a difference, the culprit). */
static tps_status compare_layer(const tps_block *b, const vdims *d, const vlayer *rl, uint64_t T, size_t n,
                                const float *x, double *xd, double *h, double *ref_out[TPS_VSTAGE_COUNT],
                                const vrank_out *outs, const tps_verify_opts *o, const tps_vsource *ref,
                                const tps_vsource *ranks, tps_verify_result *res, tps_error *err)
{
    tps_status st = TPS_OK;
    size_t nh = n * (size_t)d->hidden;
    for (size_t i = 0; i < nh; i++) xd[i] = x[i];
    tps_vstage(o, "reference: attention");
    TPS_CHECK(tps_vref_attn(b, d, rl, NULL, n, xd, ref_out[TPS_VSTAGE_ATTN], err));
    for (size_t i = 0; i < nh; i++) h[i] = b->parallel_residual ? xd[i] : xd[i] + ref_out[TPS_VSTAGE_ATTN][i];
    tps_vstage(o, "reference: mlp");
    TPS_CHECK(tps_vref_mlp(b, d, rl, NULL, n, h, ref_out[TPS_VSTAGE_MLP], err));
    tps_vstage(o, "comparing");

    res->dtype = TPS_DT_F64;
    for (uint64_t r = 0; r < T; r++)
        if (tps_verify_rtol(outs[r].min_dtype) > tps_verify_rtol(res->dtype)) res->dtype = outs[r].min_dtype;
    for (int s = 0; s < TPS_VSTAGE_COUNT; s++) {
        tps_verify_stage *vs = &res->stage[s];
        double ss = 0;
        for (size_t i = 0; i < nh; i++) ss += ref_out[s][i] * ref_out[s][i];
        vs->rtol = o->rtol > 0 ? o->rtol : tps_verify_rtol(res->dtype);
        vs->atol = o->atol > 0 ? o->atol : ss > 0 ? vs->rtol * sqrt(ss / (double)nh) : vs->rtol;
        vs->pass = true;
        for (uint64_t r = 0; r < T; r++) {
            tps_vcmp c = tps_vcompare(outs[r].out[s], ref_out[s], nh, vs->rtol, vs->atol);
            if (!(c.max_abs <= vs->max_abs)) vs->max_abs = c.max_abs;
            if (!(c.rel <= vs->rel)) vs->rel = c.rel;
            if (!c.pass || outs[r].bad[s]) vs->pass = false;
        }
        if (!vs->pass && res->pass) {
            res->pass = false;
            res->failed_stage = s;
            TPS_CHECK(blame(b, d, rl, T, s, n, s == TPS_VSTAGE_ATTN ? xd : h, ref_out[s], outs, res, err));
            /* ranks[] are this process's sources only on threads, not under MPI */
            if (res->culprit >= 0 && o->shards && !tps_vbackend_multi(o->backend))
                TPS_CHECK(tps_vquant_blame(b, res->layer, T, (uint64_t)res->culprit, ref, &ranks[res->culprit],
                                           o->shards, res->detail, sizeof res->detail, err));
        }
    }
cleanup:
    return st;
}

/* The whole-model reference moves on by one layer: xref <- the unsharded layer of xref in
 * float64, residuals added (an independent forward: it never sees the ranks' state). */
static tps_status chain_step(const tps_block *b, const vdims *d, const vlayer *rl, size_t n, tps_verify_chain *c,
                             tps_error *err)
{
    tps_status st = TPS_OK;
    size_t nh = n * (size_t)d->hidden;
    double *a = malloc((nh + 1) * sizeof *a), *h = malloc((nh + 1) * sizeof *h), *m = malloc((nh + 1) * sizeof *m);
    if (!a || !h || !m) {
        st = tps_fail_oom(err, "the reference's hidden state");
        goto cleanup;
    }
    TPS_CHECK(tps_vref_attn(b, d, rl, NULL, n, c->xref, a, err));
    for (size_t i = 0; i < nh; i++) h[i] = b->parallel_residual ? c->xref[i] : c->xref[i] + a[i];
    TPS_CHECK(tps_vref_mlp(b, d, rl, NULL, n, h, m, err));
    for (size_t i = 0; i < nh; i++) c->xref[i] = b->parallel_residual ? c->xref[i] + a[i] + m[i] : h[i] + m[i];
cleanup:
    free(a);
    free(h);
    free(m);
    return st;
}

/* chain_step on a thread of its own, beside the comparison's reference (both read the
 * reference layer only; the chain writes only its own state), so that the
 * second float64 pass over the layer's weights no longer adds to the wall time on a machine
 * with a core to spare.  Not when the layer streams its experts: their fetches read the
 * reference's source, which one thread at a time reads. */
typedef struct chain_job {
    const tps_block *b;
    const vdims *d;
    const vlayer *rl;
    size_t n;
    tps_verify_chain *c;
    tps_status st;
    tps_error err;
    pthread_t tid;
    void *stack;
    bool running;
} chain_job;

static void *chain_thread(void *arg)
{
    chain_job *j = arg;
    j->st = chain_step(j->b, j->d, j->rl, j->n, j->c, &j->err);
    return NULL;
}

/* The thread's stack is its own mapping, unmapped after: the reference's pass touches a few
 * MiB of stack, which a stack the C library caches for its next thread would keep resident
 * under the next layer's peak. */
#define CHAIN_STACK ((size_t)8 << 20)

static void chain_start(chain_job *j)
{
    tps_error_clear(&j->err);
    j->st = TPS_OK;
    j->running = false;
    if (j->rl->stream) return;
    j->stack = mmap(NULL, CHAIN_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (j->stack == MAP_FAILED) return;
    pthread_attr_t a;
    if (pthread_attr_init(&a) == 0) {
        j->running = pthread_attr_setstack(&a, j->stack, CHAIN_STACK) == 0 &&
                     pthread_create(&j->tid, &a, chain_thread, j) == 0;
        pthread_attr_destroy(&a);
    }
    if (!j->running) munmap(j->stack, CHAIN_STACK);
}

/* The chain's step done (waited for, or run here when it did not start); its status, its
 * error in err unless the caller already failed (st). */
static tps_status chain_finish(chain_job *j, tps_status st, tps_error *err)
{
    if (j->running) {
        pthread_join(j->tid, NULL);
        munmap(j->stack, CHAIN_STACK);
    } else if (st == TPS_OK) j->st = chain_step(j->b, j->d, j->rl, j->n, j->c, &j->err);
    j->running = false;
    if (st == TPS_OK && j->st != TPS_OK && err) *err = j->err;
    return st != TPS_OK ? st : j->st;
}

/* A streamed expert of the reference from --source (arg: whose copy, for the message): the
 * whole-layer scan below does not see it.  (From the shards, the checked reads refused it.) */
static tps_status ref_finite(void *arg, uint64_t e, tps_vt *row, tps_error *err)
{
    (void)e;
    tps_status st = TPS_OK;
    for (int r = 0; arg && r < TPS_ROLE_COUNT && st == TPS_OK; r++) st = tps_vt_require_finite(&row[r], arg, err);
    return st;
}

tps_status tps_verify_layer(const tps_block *b, uint64_t layer, uint64_t T, const tps_vsource *ref,
                            const tps_vsource *ranks, const tps_verify_opts *o, tps_verify_result *res,
                            tps_error *err)
{
    tps_status st = TPS_OK;
    double t0 = tps_vnow();
    tps_vbackend *be = o->backend;
    bool root = tps_vbackend_rank(be) == 0;
    vlayer rl;
    vexpert_fetcher fetch = {.after = ref_finite, .arg = NULL};
    vdims d;
    vstats stats = {0, 0, 0};
    vrank_out *outs = NULL;
    float *x = NULL;
    double *xd = NULL, *h = NULL, *ref_out[TPS_VSTAGE_COUNT] = {NULL, NULL};
    memset(res, 0, sizeof *res);
    memset(&rl, 0, sizeof rl);
    memset(&d, 0, sizeof d);
    res->layer = layer;
    res->failed_stage = -1;
    res->culprit = -1;
    res->tokens = o->tokens;
    if (T == 0 || o->tokens == 0) return tps_fail(err, TPS_EINVALID, "verify needs at least one rank and one token");
    /* Under MPI only rank 0 holds the reference: it resolves the sizes and sends them. */
    if (root) {
        bool checked_reads = o->shards && tps_vsource_is_shardset(ref, o->shards);
        tps_vstage(o, checked_reads ? "loading, checking bytes" : "loading");
        /* the reference streams its experts and loads only those the router picks */
        if (!checked_reads) fetch.arg = "the source";
        st = tps_vlayer_load_streamed(b, layer, b->experts, ref, &fetch, &rl, err);
        tps_vbuf_trim(); /* the last layer's buffers it did not take back */
        /* Before any number is trusted, the shards' bytes must be what the manifest says. */
        if (st == TPS_OK && o->shards) {
            if (!checked_reads) tps_vstage(o, "checking bytes");
            st = tps_vlayer_check(b, layer, rl.nex, o->shards, checked_reads ? NULL : ref, rl.stream != NULL,
                                  &res->checked_tensors, &res->checked_bytes, err);
        }
        /* The reference's own source (--source) may hold what the shards do not: a NaN
         * there would be blamed on them.  (Loaded from the shards, the checked reads
         * already refused it.) */
        if (st == TPS_OK && !checked_reads) st = tps_vlayer_require_finite(&rl, "the source", err);
        if (st == TPS_OK) st = resolve_dims(b, layer, &rl, T, &d, err);
        /* an expert-parallel set's ranks hold whole experts (lib/set/grid_ep.h) */
        if (st == TPS_OK && o->shards) d.ep = tps_grid_ep(o->shards->m) > 1;
    }
    if (tps_vbackend_multi(be)) {
        TPS_CHECK(tps_vbackend_agree(be, st, err));
        TPS_CHECK(tps_vbackend_bcast(be, &d, sizeof d, err));
    }
    TPS_CHECK(st);
    res->hidden = d.hidden;
    uint64_t nh64;
    size_t n, nh;
    if (!tps_u64_to_size(o->tokens, &n) || !tps_mul_u64(o->tokens, d.hidden, &nh64) || !tps_u64_to_size(nh64, &nh) ||
        nh > (size_t)1 << 32) {
        st = tps_fail(err, TPS_EINVALID, "%llu tokens of hidden size %llu is too many", (unsigned long long)o->tokens,
                      (unsigned long long)d.hidden);
        goto cleanup;
    }
    x = malloc(nh * sizeof *x);
    outs = calloc(T, sizeof *outs);
    if (root) {
        xd = malloc(nh * sizeof *xd);
        h = malloc(nh * sizeof *h);
        for (int s = 0; s < TPS_VSTAGE_COUNT; s++) ref_out[s] = malloc(nh * sizeof *ref_out[s]);
    }
    if (!x || !outs || (root && (!xd || !h || !ref_out[0] || !ref_out[1])))
        st = tps_fail_oom(err, "the layer's activations");
    if (tps_vbackend_multi(be)) st = tps_vbackend_agree(be, st, err);
    TPS_CHECK(st);
    if (o->chain && o->chain->hidden != d.hidden) {
        st = tps_fail(err, TPS_EINVALID, "layer %llu has hidden size %llu, the embedding %llu", (unsigned long long)layer,
                      (unsigned long long)d.hidden, (unsigned long long)o->chain->hidden);
        if (tps_vbackend_multi(be)) st = tps_vbackend_agree(be, st, err);
        goto cleanup;
    }
    if (o->chain) memcpy(x, o->chain->x, nh * sizeof *x);
    else draw_inputs(o->seed, layer, nh, x);
    TPS_CHECK(tps_vbackend_run(be, b, &d, layer, T, ranks, n, x, outs, &stats, o, err));
    /* after the ranks' pass, whose slices are then freed: its activations beside theirs would
     * raise the peak */
    chain_job chain = {.b = b, .d = &d, .rl = &rl, .n = n, .c = o->chain};
    if (root && o->chain) chain_start(&chain);
    res->upload_bytes = stats.upload_bytes;
    res->upload_seconds = stats.upload_seconds;
    res->layer_seconds = stats.layer_seconds;
    res->pass = true;
    if (root) st = compare_layer(b, &d, &rl, T, n, x, xd, h, ref_out, outs, o, ref, ranks, res, err);
    if (root && o->chain) {
        st = chain_finish(&chain, st, err);
        if (st == TPS_OK && tps_verify_rtol(res->dtype) > tps_verify_rtol(o->chain->dtype)) o->chain->dtype = res->dtype;
    }
    if (tps_vbackend_multi(be)) st = tps_vbackend_agree(be, st, err);
    TPS_CHECK(st);
    if (o->chain) { /* this process's rank's own copy of the layer's output */
        const vrank_out *me = &outs[tps_vbackend_rank(be)];
        for (size_t i = 0; i < nh; i++)
            o->chain->x[i] = b->parallel_residual
                                 ? x[i] + me->out[TPS_VSTAGE_ATTN][i] + me->out[TPS_VSTAGE_MLP][i]
                                 : (x[i] + me->out[TPS_VSTAGE_ATTN][i]) + me->out[TPS_VSTAGE_MLP][i];
    }
    if (o->keep_reference && root) {
        res->x = xd;
        xd = NULL;
        for (int s = 0; s < TPS_VSTAGE_COUNT; s++) {
            res->ref_out[s] = ref_out[s];
            ref_out[s] = NULL;
        }
    }
cleanup:
    if (outs)
        for (uint64_t r = 0; r < T; r++) tps_vrank_out_release(&outs[r]);
    free(outs);
    if (root) tps_vbuf_keep(); /* for the next layer's reference (vbuf.h) */
    tps_vlayer_release(&rl);
    free(x);
    free(xd);
    free(h);
    for (int s = 0; s < TPS_VSTAGE_COUNT; s++) free(ref_out[s]);
    res->seconds = tps_vnow() - t0;
    return st;
}
