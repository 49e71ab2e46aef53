/* q_norm / k_norm in the verification pass: the norm of each head (Qwen3) and of the whole
 * q and k projections (OLMo 2) against plain loops written here, then the sharded pass of
 * a layer with either norm against the float64 reference at T = 1, 2, 4, 8 (8 heads, 2 KV
 * heads: K replicated at T = 4, 8, where a k sum of squares counted once per replica would
 * scale k wrong), and wrong cuts and bad replicas of the norm weights named. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/partition/partition.h"
#include "tps_test.h"
#include "verify/math/ops.h"
#include "verify/math/ref.h"
#include "verify/verify.h"

/* ---- an in-memory layer: global float tensors, each with its partition ---- */

enum { H = 32, NH = 8, KV = 2, HD = 6, INTER = 24 }; /* head_dim 6: not H / NH */

typedef struct mt {
    char name[16]; /* layer 0's: "L0." + the role's template */
    tps_block_role role;
    int ndim;
    uint64_t shape[2];
    float *v;
    tps_partition part;
} mt;

typedef struct layer {
    tps_block b;
    mt t[16];
    int n;
    uint64_t T, r;                 /* a rank's view when T > 0 */
    int fault_rank;                /* that rank's copy of fault_role is negated */
    tps_block_role fault_role;
} layer;

static uint64_t rng = 99;
static double urand(void) { return tps_test_uniform(&rng); }

static tps_status mem_load(void *ctx, const char *name, tps_vt *out, tps_error *err)
{
    const layer *L = ctx;
    for (int i = 0; i < L->n; i++) {
        const mt *t = &L->t[i];
        if (strcmp(t->name, name) != 0) continue;
        uint64_t T = L->T ? L->T : 1, r = L->T ? L->r : 0, shape[2] = {t->shape[0], t->ndim == 2 ? t->shape[1] : 1};
        tps_slice s = {0};
        int d = t->part.dim;
        if (!t->part.replicated) {
            tps_partition_slice(&t->part, T, r, &s);
            shape[d] = s.length;
        }
        memset(out, 0, sizeof *out);
        out->name = strdup(name);
        out->dtype = TPS_DT_F32;
        out->ndim = t->ndim;
        out->shape[0] = shape[0];
        out->shape[1] = t->ndim == 2 ? shape[1] : 0;
        out->nelem = shape[0] * shape[1];
        float *o = malloc(out->nelem * sizeof *o + 1);
        out->data = o;
        for (uint64_t a = 0; a < shape[0]; a++)
            for (uint64_t c = 0; c < shape[1]; c++) {
                uint64_t g[2] = {a, c}, li = g[d];
                for (int k = 0; !t->part.replicated && k < s.npieces; k++) { /* local li -> global */
                    if (li < s.piece[k].len) {
                        g[d] = s.piece[k].start + li;
                        break;
                    }
                    li -= s.piece[k].len;
                }
                float v = t->v[g[0] * t->shape[1] + g[1]];
                if (L->T && (int)L->r == L->fault_rank && t->role == L->fault_role) v = -v;
                o[a * shape[1] + c] = v;
            }
        return TPS_OK;
    }
    return tps_fail(err, TPS_EINVALID, "no tensor %s", name);
}

static bool mem_has(void *ctx, const char *name)
{
    const layer *L = ctx;
    for (int i = 0; i < L->n; i++)
        if (strcmp(L->t[i].name, name) == 0) return true;
    return false;
}

static mt *put(layer *L, tps_block_role role, const char *name, int ndim, uint64_t s0, uint64_t s1, double scale,
               double offset)
{
    mt *t = &L->t[L->n++];
    snprintf(t->name, sizeof t->name, "L0.%s", name);
    t->role = role;
    t->ndim = ndim;
    t->shape[0] = s0;
    t->shape[1] = ndim == 2 ? s1 : 1;
    t->v = malloc(s0 * t->shape[1] * sizeof *t->v);
    for (uint64_t i = 0; i < s0 * t->shape[1]; i++) t->v[i] = (float)(offset + scale * (2 * urand() - 1));
    t->part.replicated = true;
    L->b.role[role] = (char *)name;
    return t;
}

/* A Llama-shaped layer with q/k norms of the given form, cut as the presets cut it. */
static void layer_init(layer *L, tps_qk_norm_kind form)
{
    memset(L, 0, sizeof *L);
    L->fault_rank = -1;
    tps_block *b = &L->b;
    b->kind = TPS_BLOCK_LLAMA;
    b->layer_prefix = "L{layer}.";
    b->norm = TPS_NORM_RMS;
    b->norm_eps = 1e-6;
    b->act = TPS_ACT_SILU;
    b->rope = TPS_ROPE_HALF;
    b->rope_theta = 10000;
    b->rotary_pct = 1;
    b->hidden = H, b->heads = NH, b->kv_heads = KV, b->head_dim = HD, b->intermediate = INTER;
    b->qk_norm = form;
    double s = 1.0 / sqrt((double)H);
    put(L, TPS_ROLE_ATTN_NORM_W, "an", 1, H, 0, 0.2, 1);
    tps_partition_simple(&put(L, TPS_ROLE_Q_W, "q", 2, NH * HD, H, s, 0)->part, 0, NH * HD, HD);
    mt *k = put(L, TPS_ROLE_K_W, "k", 2, KV * HD, H, s, 0), *v = put(L, TPS_ROLE_V_W, "v", 2, KV * HD, H, s, 0);
    tps_partition_simple(&k->part, 0, KV * HD, HD);
    tps_partition_simple(&v->part, 0, KV * HD, HD);
    k->part.seg[0].may_replicate = v->part.seg[0].may_replicate = true;
    tps_partition_simple(&put(L, TPS_ROLE_O_W, "o", 2, H, NH * HD, 1.0 / sqrt(NH * HD), 0)->part, 1, NH * HD, HD);
    bool whole = form == TPS_QK_NORM_WHOLE;
    put(L, TPS_ROLE_Q_NORM_W, "qn", 1, whole ? NH * HD : HD, 0, 0.5, 1);
    put(L, TPS_ROLE_K_NORM_W, "kn", 1, whole ? KV * HD : HD, 0, 0.5, 1);
    put(L, TPS_ROLE_MLP_NORM_W, "mn", 1, H, 0, 0.2, 1);
    tps_partition_simple(&put(L, TPS_ROLE_GATE_W, "g", 2, INTER, H, s, 0)->part, 0, INTER, 1);
    tps_partition_simple(&put(L, TPS_ROLE_UP_W, "u", 2, INTER, H, s, 0)->part, 0, INTER, 1);
    tps_partition_simple(&put(L, TPS_ROLE_DOWN_W, "d", 2, H, INTER, 1.0 / sqrt(INTER), 0)->part, 1, INTER, 1);
}

static void layer_free(layer *L)
{
    for (int i = 0; i < L->n; i++) free(L->t[i].v);
}

static mt *find(layer *L, tps_block_role role)
{
    for (int i = 0; i < L->n; i++)
        if (L->t[i].role == role) return &L->t[i];
    return NULL;
}

static tps_status run(layer *L, uint64_t T, tps_verify_result *res)
{
    layer ranks[8];
    tps_vsource src[8];
    for (uint64_t r = 0; r < T; r++) {
        ranks[r] = *L;
        ranks[r].T = T;
        ranks[r].r = r;
        src[r] = (tps_vsource){&ranks[r], mem_load, mem_has, NULL, NULL};
    }
    tps_vsource ref = {L, mem_load, mem_has, NULL, NULL};
    tps_verify_opts o = {.tokens = 5, .seed = 3};
    tps_error err;
    tps_error_clear(&err);
    tps_status st = tps_verify_layer(&L->b, 0, T, &ref, src, &o, res, &err);
    if (st != TPS_OK) printf("#   verify: %s\n", err.msg);
    return st;
}

/* ---- the math by hand ---- */

static void fill(double *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = 3 * urand() - 1.5;
}

/* q [2 tokens, 3 heads of 4] and k [2, 1 head] drawn (q0, k0) and normalized in place (q, k)
 * by the norm of the given form, its weights qw [nq] and kw [nk]. */
typedef struct qk_case {
    tps_block b;
    vdims d;
    vlayer l;
    double q[24], k[8], q0[24], k0[8];
} qk_case;

static void qk_case_run(qk_case *c, tps_qk_norm_kind form, float *qw, uint64_t nq, float *kw, uint64_t nk)
{
    memset(c, 0, sizeof *c);
    c->b.qk_norm = form;
    c->b.norm_eps = 1e-6;
    c->b.role[TPS_ROLE_Q_NORM_W] = c->b.role[TPS_ROLE_K_NORM_W] = "x";
    c->d = (vdims){.hidden = 8, .heads = 3, .kv = 1, .hd = 4};
    c->l.t[TPS_ROLE_Q_NORM_W] = (tps_vt){.dtype = TPS_DT_F32, .ndim = 1, .shape = {nq}, .nelem = nq, .data = qw};
    c->l.t[TPS_ROLE_K_NORM_W] = (tps_vt){.dtype = TPS_DT_F32, .ndim = 1, .shape = {nk}, .nelem = nk, .data = kw};
    vattn_map m = {.hn = 3, .kv_n = 1};
    fill(c->q, 24), fill(c->k, 8);
    memcpy(c->q0, c->q, sizeof c->q), memcpy(c->k0, c->k, sizeof c->k);
    tps_error err;
    CHECK(tps_vqk_norm_f64(&c->b, &c->d, &c->l, &m, 2, c->q, 12, c->k, 4, &err) == TPS_OK);
}

/* Per head: each head is scaled by its own RMS. */
TEST(per_head_norm_scales_each_head_by_its_own_rms)
{
    float qw[4] = {1, 2, 0.5f, -1}, kw[4] = {0.25f, 1, 1, 3};
    qk_case c;
    qk_case_run(&c, TPS_QK_NORM_PER_HEAD, qw, 4, kw, 4);
    const double *q = c.q, *k = c.k, *q0 = c.q0, *k0 = c.k0;
    double worst = 0;
    for (int t = 0; t < 2; t++)
        for (int h = 0; h < 3; h++) {
            const double *x = q0 + t * 12 + h * 4;
            double ms = (x[0] * x[0] + x[1] * x[1] + x[2] * x[2] + x[3] * x[3]) / 4;
            for (int i = 0; i < 4; i++) worst = fmax(worst, fabs(q[t * 12 + h * 4 + i] - x[i] / sqrt(ms + 1e-6) * qw[i]));
        }
    for (int t = 0; t < 2; t++) {
        const double *x = k0 + t * 4;
        double ms = (x[0] * x[0] + x[1] * x[1] + x[2] * x[2] + x[3] * x[3]) / 4;
        for (int i = 0; i < 4; i++) worst = fmax(worst, fabs(k[t * 4 + i] - x[i] / sqrt(ms + 1e-6) * kw[i]));
    }
    CHECK(worst < 1e-13);
}

/* Over the whole projection: one RMS over all 3 q heads (12 values), one over k's 4; the
 * weight has one element per value.  Then the same for a pass holding only q head 1 and
 * given the other heads' sums through the collective's hook: its head equals the whole
 * pass's head 1. */
static double given_sums[4];
static tps_status give_sums(void *ctx, double *ss, size_t n, tps_error *err)
{
    (void)ctx, (void)err;
    memcpy(ss, given_sums, 2 * n * sizeof *ss);
    return TPS_OK;
}

TEST(whole_projection_norm_uses_one_rms_over_every_head)
{
    float qw[12], kw[4];
    for (int i = 0; i < 12; i++) qw[i] = (float)(0.5 + urand());
    for (int i = 0; i < 4; i++) kw[i] = (float)(0.5 + urand());
    qk_case c;
    qk_case_run(&c, TPS_QK_NORM_WHOLE, qw, 12, kw, 4);
    const double *q = c.q, *k = c.k, *q0 = c.q0, *k0 = c.k0;
    double worst = 0, ssq[2] = {0, 0}, ssk[2] = {0, 0};
    for (int t = 0; t < 2; t++) {
        for (int i = 0; i < 12; i++) ssq[t] += q0[t * 12 + i] * q0[t * 12 + i];
        for (int i = 0; i < 4; i++) ssk[t] += k0[t * 4 + i] * k0[t * 4 + i];
        for (int i = 0; i < 12; i++)
            worst = fmax(worst, fabs(q[t * 12 + i] - q0[t * 12 + i] / sqrt(ssq[t] / 12 + 1e-6) * qw[i]));
        for (int i = 0; i < 4; i++)
            worst = fmax(worst, fabs(k[t * 4 + i] - k0[t * 4 + i] / sqrt(ssk[t] / 4 + 1e-6) * kw[i]));
    }
    CHECK(worst < 1e-13);

    /* the share of q head 1 (and the one KV head), with the whole sums handed in */
    given_sums[0] = ssq[0], given_sums[1] = ssq[1], given_sums[2] = ssk[0], given_sums[3] = ssk[1];
    vqk_reduce red = {give_sums, NULL};
    vattn_map m1 = {.hn = 1, .q_first = 1, .kv_n = 1, .qk = &red};
    double q1[8], k1[8];
    for (int t = 0; t < 2; t++) memcpy(q1 + t * 4, q0 + t * 12 + 4, 4 * sizeof *q1);
    memcpy(k1, k0, sizeof k1);
    tps_error err;
    CHECK(tps_vqk_norm_f64(&c.b, &c.d, &c.l, &m1, 2, q1, 4, k1, 4, &err) == TPS_OK);
    worst = 0;
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < 4; i++) worst = fmax(worst, fabs(q1[t * 4 + i] - q[t * 12 + 4 + i]));
    for (int i = 0; i < 8; i++) worst = fmax(worst, fabs(k1[i] - k[i]));
    CHECK(worst < 1e-13);
}

/* ---- the sharded pass ---- */

static void expect_pass(tps_qk_norm_kind form)
{
    uint64_t Ts[] = {1, 2, 4, 8};
    for (int i = 0; i < 4; i++) {
        layer L;
        layer_init(&L, form);
        tps_verify_result res;
        CHECK(run(&L, Ts[i], &res) == TPS_OK);
        if (!res.pass) printf("#   T=%llu: %s\n", (unsigned long long)Ts[i], res.detail);
        CHECK(res.pass);
        CHECK(res.stage[0].rel < 1e-5);
        tps_verify_result_release(&res);
        layer_free(&L);
    }
}

TEST(per_head_qk_norm_matches_at_tp_1_2_4_8) { expect_pass(TPS_QK_NORM_PER_HEAD); }
TEST(whole_projection_qk_norm_matches_at_tp_1_2_4_8) { expect_pass(TPS_QK_NORM_WHOLE); }

/* Without the q/k norm the layer's attention differs: the norm is computed, not ignored. */
TEST(the_norm_changes_the_layer)
{
    layer L;
    layer_init(&L, TPS_QK_NORM_WHOLE);
    tps_verify_result with, without;
    CHECK(run(&L, 1, &with) == TPS_OK);
    L.b.role[TPS_ROLE_Q_NORM_W] = L.b.role[TPS_ROLE_K_NORM_W] = NULL;
    CHECK(run(&L, 1, &without) == TPS_OK);
    CHECK(with.pass && without.pass);
    /* the same inputs: the tolerance follows the reference output's size */
    CHECK(fabs(with.stage[0].atol - without.stage[0].atol) > 1e-9);
    tps_verify_result_release(&with);
    tps_verify_result_release(&without);
    layer_free(&L);
}

static void expect_fail(layer *L, uint64_t T, int64_t culprit, const char *fragment)
{
    tps_verify_result res;
    CHECK(run(L, T, &res) == TPS_OK);
    CHECK(!res.pass);
    CHECK_EQ_U64(res.failed_stage, TPS_VSTAGE_ATTN);
    CHECK_EQ_U64(res.culprit, culprit);
    CHECK_CONTAINS(res.detail, fragment);
    printf("#   (as expected) %s\n", res.detail);
    tps_verify_result_release(&res);
    layer_free(L);
}

/* The whole-projection weight cut with q's heads instead of replicated. */
TEST(whole_q_norm_cut_by_heads_fails)
{
    layer L;
    layer_init(&L, TPS_QK_NORM_WHOLE);
    tps_partition_simple(&find(&L, TPS_ROLE_Q_NORM_W)->part, 0, NH * HD, HD);
    expect_fail(&L, 2, 0, "qn (q_norm) with shape [24] where the TP convention needs [48]");
}

/* Rank `rank` of T holds a bad (negated) copy of the replicated weight `role`: verify names
 * that rank's partial sum. */
static void expect_bad_replica(tps_qk_norm_kind form, uint64_t T, int rank, tps_block_role role)
{
    layer L;
    layer_init(&L, form);
    L.fault_rank = rank;
    L.fault_role = role;
    char said[64];
    snprintf(said, sizeof said, "rank %d's partial sum differs", rank);
    expect_fail(&L, T, rank, said);
}

/* One rank's bad copy of the replicated weight: its own heads go wrong (the reference's
 * share of that rank, which needs the whole layer's sums, finds it). */
TEST(a_bad_replica_of_the_whole_q_norm_is_named) { expect_bad_replica(TPS_QK_NORM_WHOLE, 4, 1, TPS_ROLE_Q_NORM_W); }

/* At T = 4 ranks 2 and 3 share KV head 1; rank 3's k_norm copy is bad. */
TEST(a_bad_k_norm_on_a_kv_replica_is_named) { expect_bad_replica(TPS_QK_NORM_WHOLE, 4, 3, TPS_ROLE_K_NORM_W); }

TEST(a_bad_replica_of_the_per_head_k_norm_is_named)
{
    expect_bad_replica(TPS_QK_NORM_PER_HEAD, 8, 2, TPS_ROLE_K_NORM_W);
}

int main(void)
{
    RUN(per_head_norm_scales_each_head_by_its_own_rms);
    RUN(whole_projection_norm_uses_one_rms_over_every_head);
    RUN(per_head_qk_norm_matches_at_tp_1_2_4_8);
    RUN(whole_projection_qk_norm_matches_at_tp_1_2_4_8);
    RUN(the_norm_changes_the_layer);
    RUN(whole_q_norm_cut_by_heads_fails);
    RUN(a_bad_replica_of_the_whole_q_norm_is_named);
    RUN(a_bad_k_norm_on_a_kv_replica_is_named);
    RUN(a_bad_replica_of_the_per_head_k_norm_is_named);
    return tps_test_done();
}
