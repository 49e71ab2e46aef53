/* The verification pass on synthetic in-memory weights: the float64 layer math against
 * hand computations of tiny cases, the sharded pass against the reference for every block
 * kind at T = 1, 2, 4, 8 (with GQA replication), and each wrong way of cutting a layer
 * failing with the stage and the rank named. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lib/partition/partition.h"
#include "tps_test.h"
#include "verify/load/layer.h"
#include "verify/math/ops.h"
#include "verify/math/ref.h"
#include "verify/math/rope.h"
#include "verify/verify.h"

/* ---- an in-memory checkpoint ---- */

#define MAXT 96

typedef struct mem_t {
    char name[96];
    tps_block_role role;
    int ndim;
    uint64_t shape[2];
    float *v;
    tps_partition part;
} mem_t;

typedef struct store {
    mem_t t[MAXT];
    int n;
    uint64_t T, r; /* a rank's view when T > 0; the global tensors otherwise */
    tps_dtype dtype;
    /* a deliberate fault: multiply rank fault_rank's copy of tensor fault_role by -1 */
    int fault_rank;
    tps_block_role fault_role;
} store;

static uint64_t rng_state = 12345;
static double urand(void) { return tps_test_uniform(&rng_state); }

/* Slices t along its partition for rank r of T into a new float array (shape in *shape). */
static float *slice_of(const mem_t *t, uint64_t T, uint64_t r, uint64_t *shape)
{
    shape[0] = t->shape[0];
    shape[1] = t->ndim == 2 ? t->shape[1] : 1;
    if (t->part.replicated) {
        float *o = malloc(shape[0] * shape[1] * sizeof *o);
        memcpy(o, t->v, shape[0] * shape[1] * sizeof *o);
        return o;
    }
    tps_slice s;
    tps_partition_slice(&t->part, T, r, &s);
    int d = t->part.dim;
    uint64_t outer = d == 0 ? 1 : t->shape[0], inner = d == 0 && t->ndim == 2 ? t->shape[1] : 1;
    uint64_t full = t->shape[d];
    shape[d] = s.length;
    float *o = calloc(outer * s.length * inner, sizeof *o), *p = o;
    for (uint64_t a = 0; a < outer; a++) {
        for (int k = 0; k < s.npieces; k++) {
            memcpy(p, t->v + (a * full + s.piece[k].start) * inner, s.piece[k].len * inner * sizeof *p);
            p += s.piece[k].len * inner;
        }
        p += s.pad * inner;
    }
    return o;
}

static tps_status store_load(void *ctx, const char *name, tps_vt *out, tps_error *err)
{
    store *s = ctx;
    for (int i = 0; i < s->n; i++) {
        const mem_t *t = &s->t[i];
        if (strcmp(t->name, name) != 0) continue;
        uint64_t shape[2];
        float *v = s->T ? slice_of(t, s->T, s->r, shape) : slice_of(t, 1, 0, shape);
        memset(out, 0, sizeof *out);
        out->name = strdup(name);
        out->dtype = s->dtype;
        out->ndim = t->ndim;
        out->shape[0] = shape[0];
        out->shape[1] = shape[1];
        out->nelem = shape[0] * (t->ndim == 2 ? shape[1] : 1);
        out->data = malloc(out->nelem * 4 + 1);
        for (uint64_t k = 0; k < out->nelem; k++) {
            double x = v[k];
            if (s->T && (int)s->r == s->fault_rank && t->role == s->fault_role) x = -x;
            tps_dtype_from_f64(s->dtype, out->data, k, x);
        }
        free(v);
        return TPS_OK;
    }
    return tps_fail(err, TPS_EINVALID, "no tensor %s", name);
}

static bool store_has(void *ctx, const char *name)
{
    store *s = ctx;
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->t[i].name, name) == 0) return true;
    return false;
}

/* ---- synthetic models ---- */

typedef struct model {
    tps_block b;
    vdims d;
    store g;
} model;

static void add(model *m, tps_block_role role, uint64_t expert, int ndim, uint64_t s0, uint64_t s1, double scale,
                double offset)
{
    mem_t *t = &m->g.t[m->g.n++];
    bool oom;
    char *name = tps_verify_tensor_name(&m->b, role, 0, expert, &oom);
    snprintf(t->name, sizeof t->name, "%s", name);
    free(name);
    t->role = role;
    t->ndim = ndim;
    t->shape[0] = s0;
    t->shape[1] = ndim == 2 ? s1 : 1;
    uint64_t n = s0 * t->shape[1];
    t->v = malloc(n * sizeof *t->v);
    for (uint64_t i = 0; i < n; i++) t->v[i] = (float)(offset + scale * (2 * urand() - 1));
    t->part.replicated = true;
}

/* The standard cut of each role (what the presets write), on the global shapes. */
static void std_partitions(model *m)
{
    const tps_block *b = &m->b;
    const vdims *d = &m->d;
    for (int i = 0; i < m->g.n; i++) {
        mem_t *t = &m->g.t[i];
        tps_partition *p = &t->part;
        memset(p, 0, sizeof *p);
        bool vec = t->ndim == 1;
        int out = vec ? 0 : b->conv1d ? 1 : 0, in = vec ? 0 : b->conv1d ? 0 : 1;
        uint64_t hd = d->hd;
        switch (t->role) {
        case TPS_ROLE_Q_W: case TPS_ROLE_Q_B:
            tps_partition_simple(p, out, t->shape[out], hd);
            break;
        case TPS_ROLE_K_W: case TPS_ROLE_K_B: case TPS_ROLE_V_W: case TPS_ROLE_V_B:
            tps_partition_simple(p, out, t->shape[out], hd);
            p->seg[0].may_replicate = true;
            break;
        case TPS_ROLE_QKV_W: case TPS_ROLE_QKV_B:
            if (b->qkv_interleaved) {
                tps_partition_simple(p, out, t->shape[out], 3 * hd);
            } else {
                p->dim = out;
                p->nseg = 3;
                uint64_t len[3] = {d->heads * hd, d->kv * hd, d->kv * hd};
                for (int k = 0; k < 3; k++) {
                    p->seg[k].length = len[k];
                    p->seg[k].unit = hd;
                    p->seg[k].may_replicate = k > 0;
                }
            }
            break;
        case TPS_ROLE_O_W:
            tps_partition_simple(p, in, t->shape[in], hd);
            break;
        case TPS_ROLE_GATE_W: case TPS_ROLE_UP_W: case TPS_ROLE_GATE_B: case TPS_ROLE_UP_B: case TPS_ROLE_FC_W:
        case TPS_ROLE_FC_B:
            tps_partition_simple(p, out, t->shape[out], 1);
            break;
        case TPS_ROLE_GATE_UP_W:
            p->dim = out;
            p->nseg = 2;
            p->seg[0].length = p->seg[1].length = d->inter;
            p->seg[0].unit = p->seg[1].unit = 1;
            break;
        case TPS_ROLE_DOWN_W:
            tps_partition_simple(p, in, t->shape[in], 1);
            break;
        default:
            p->replicated = true;
        }
    }
}

static void mat(model *m, tps_block_role role, uint64_t e, uint64_t out, uint64_t in, bool bias_too,
                tps_block_role bias_role)
{
    double sc = 1.0 / sqrt((double)in);
    if (m->b.conv1d) add(m, role, e, 2, in, out, sc, 0);
    else add(m, role, e, 2, out, in, sc, 0);
    if (bias_too) add(m, bias_role, e, 1, out, 0, 0.5, 0);
}

enum { K_LLAMA, K_PHI3, K_GPT2, K_NEOX, K_MIXTRAL };

static void model_init(model *m, int kind)
{
    memset(m, 0, sizeof *m);
    m->g.fault_rank = -1;
    m->g.dtype = TPS_DT_F32;
    tps_block *b = &m->b;
    vdims *d = &m->d;
    b->layer_prefix = "L{layer}.";
    b->norm_eps = 1e-5;
    b->rope_theta = 10000;
    b->rotary_pct = 1;
    b->rope = TPS_ROPE_HALF;
    b->act = TPS_ACT_SILU;
    d->heads = 8, d->kv = 2, d->hd = 4, d->hidden = 32, d->inter = 24;
    static const char *const names[TPS_ROLE_COUNT] = {
        "an.w", "an.b", "q.w", "q.b", "k.w", "k.b", "v.w", "v.b", "qkv.w", "qkv.b", "o.w", "o.b",
        "mn.w", "mn.b", "g.w", "u.w", "g.b", "u.b", "gu.w", "fc.w", "fc.b", "d.w", "d.b", "router.w"};
    for (int r = 0; r < TPS_ROLE_COUNT; r++) b->role[r] = (char *)names[r];
    bool qkv = false, gu = false, biases = false, fc = false;
    switch (kind) {
    case K_LLAMA: /* q/k/v biases (Qwen2), o/down biases (attention_bias), gate/up (mlp_bias) */
        b->kind = TPS_BLOCK_LLAMA, biases = true;
        break;
    case K_PHI3: b->kind = TPS_BLOCK_LLAMA; qkv = gu = true; b->rope = TPS_ROPE_INTERLEAVED; break;
    case K_GPT2:
        b->kind = TPS_BLOCK_GPT2, b->norm = TPS_NORM_LAYER, b->act = TPS_ACT_GELU_TANH, b->rope = TPS_ROPE_NONE;
        b->conv1d = qkv = fc = biases = true;
        d->kv = d->heads;
        break;
    case K_NEOX:
        b->kind = TPS_BLOCK_NEOX, b->norm = TPS_NORM_LAYER, b->act = TPS_ACT_GELU_ERF, b->rotary_pct = 0.5;
        b->parallel_residual = b->qkv_interleaved = qkv = fc = biases = true;
        d->kv = d->heads;
        break;
    case K_MIXTRAL:
        b->kind = TPS_BLOCK_MIXTRAL, b->expert_prefix = "E{expert}.", b->top_k = 2;
        d->experts = 4, d->top_k = 2;
        break;
    }
    b->hidden = d->hidden, b->heads = d->heads, b->kv_heads = d->kv, b->head_dim = d->hd,
    b->intermediate = d->inter;
    d->rot = b->rope == TPS_ROPE_NONE ? 0 : (uint64_t)((double)d->hd * b->rotary_pct);
    for (int r = 0; r < TPS_ROLE_COUNT; r++) {
        bool used;
        switch (r) {
        case TPS_ROLE_ATTN_NORM_B: case TPS_ROLE_MLP_NORM_B: used = b->norm == TPS_NORM_LAYER; break;
        case TPS_ROLE_Q_W: case TPS_ROLE_K_W: case TPS_ROLE_V_W: used = !qkv; break;
        case TPS_ROLE_Q_B: case TPS_ROLE_K_B: case TPS_ROLE_V_B: used = !qkv && biases; break;
        case TPS_ROLE_QKV_W: used = qkv; break;
        case TPS_ROLE_QKV_B: used = qkv && biases; break;
        case TPS_ROLE_O_B: case TPS_ROLE_DOWN_B: used = (qkv || kind == K_LLAMA) && biases; break;
        case TPS_ROLE_GATE_B: case TPS_ROLE_UP_B: used = kind == K_LLAMA; break;
        case TPS_ROLE_GATE_W: case TPS_ROLE_UP_W: used = !gu && !fc; break;
        case TPS_ROLE_GATE_UP_W: used = gu; break;
        case TPS_ROLE_FC_W: case TPS_ROLE_FC_B: used = fc; break;
        case TPS_ROLE_ROUTER_W: used = kind == K_MIXTRAL; break;
        default: used = true;
        }
        if (!used) b->role[r] = NULL;
    }
    uint64_t H = d->hidden, hd = d->hd;
    add(m, TPS_ROLE_ATTN_NORM_W, 0, 1, H, 0, 0.2, 1);
    if (b->role[TPS_ROLE_ATTN_NORM_B]) add(m, TPS_ROLE_ATTN_NORM_B, 0, 1, H, 0, 0.2, 0);
    if (qkv) {
        mat(m, TPS_ROLE_QKV_W, 0, (d->heads + 2 * d->kv) * hd, H, biases, TPS_ROLE_QKV_B);
    } else {
        mat(m, TPS_ROLE_Q_W, 0, d->heads * hd, H, biases, TPS_ROLE_Q_B);
        mat(m, TPS_ROLE_K_W, 0, d->kv * hd, H, biases, TPS_ROLE_K_B);
        mat(m, TPS_ROLE_V_W, 0, d->kv * hd, H, biases, TPS_ROLE_V_B);
    }
    mat(m, TPS_ROLE_O_W, 0, H, d->heads * hd, b->role[TPS_ROLE_O_B] != NULL, TPS_ROLE_O_B);
    add(m, TPS_ROLE_MLP_NORM_W, 0, 1, H, 0, 0.2, 1);
    if (b->role[TPS_ROLE_MLP_NORM_B]) add(m, TPS_ROLE_MLP_NORM_B, 0, 1, H, 0, 0.2, 0);
    if (kind == K_MIXTRAL) add(m, TPS_ROLE_ROUTER_W, 0, 2, d->experts, H, 1.0, 0);
    for (uint64_t e = 0; e < (d->experts ? d->experts : 1); e++) {
        if (gu) {
            mat(m, TPS_ROLE_GATE_UP_W, e, 2 * d->inter, H, false, 0);
        } else if (fc) {
            mat(m, TPS_ROLE_FC_W, e, d->inter, H, true, TPS_ROLE_FC_B);
        } else {
            mat(m, TPS_ROLE_GATE_W, e, d->inter, H, b->role[TPS_ROLE_GATE_B] != NULL, TPS_ROLE_GATE_B);
            mat(m, TPS_ROLE_UP_W, e, d->inter, H, b->role[TPS_ROLE_UP_B] != NULL, TPS_ROLE_UP_B);
        }
        mat(m, TPS_ROLE_DOWN_W, e, H, d->inter, b->role[TPS_ROLE_DOWN_B] && e == 0, TPS_ROLE_DOWN_B);
    }
    std_partitions(m);
}

static void model_free(model *m)
{
    for (int i = 0; i < m->g.n; i++) free(m->g.t[i].v);
}

static mem_t *find_role(model *m, tps_block_role role)
{
    for (int i = 0; i < m->g.n; i++)
        if (m->g.t[i].role == role) return &m->g.t[i];
    return NULL;
}

/* Runs verify on the model cut for T ranks. */
static tps_status run(model *m, uint64_t T, tps_verify_result *res)
{
    store *ranks = calloc(T, sizeof *ranks);
    tps_vsource *src = calloc(T, sizeof *src);
    for (uint64_t r = 0; r < T; r++) {
        ranks[r] = m->g;
        ranks[r].T = T;
        ranks[r].r = r;
        src[r] = (tps_vsource){&ranks[r], store_load, store_has, NULL, NULL};
    }
    tps_vsource ref = {&m->g, store_load, store_has, NULL, NULL};
    tps_verify_opts o = {.tokens = 5, .seed = 7};
    tps_error err;
    tps_error_clear(&err);
    tps_status st = tps_verify_layer(&m->b, 0, T, &ref, src, &o, res, &err);
    if (st != TPS_OK) printf("#   verify: %s\n", err.msg);
    free(ranks);
    free(src);
    return st;
}

/* ---- hand-checked math ---- */

TEST(rmsnorm_of_a_constant_vector)
{
    model m;
    model_init(&m, K_LLAMA);
    double x[32], out[32], c = 3.0;
    for (int i = 0; i < 32; i++) x[i] = c;
    vlayer l;
    tps_error err;
    CHECK(tps_vlayer_load(&m.b, 0, 0, &(tps_vsource){&m.g, store_load, store_has, NULL, NULL}, &l, &err) == TPS_OK);
    tps_vnorm_f64(&m.b, &m.d, &l.t[TPS_ROLE_ATTN_NORM_W], NULL, 1, x, out);
    const float *w = find_role(&m, TPS_ROLE_ATTN_NORM_W)->v;
    for (int i = 0; i < 32; i++) CHECK(fabs(out[i] - c / sqrt(c * c + 1e-5) * w[i]) < 1e-12);
    tps_vlayer_release(&l);
    model_free(&m);
}

TEST(layernorm_has_zero_mean_unit_variance)
{
    model m;
    model_init(&m, K_GPT2);
    double x[32], out[32], mean = 0, var = 0;
    for (int i = 0; i < 32; i++) x[i] = i * 0.5 - 3;
    tps_vnorm_f64(&m.b, &m.d, NULL, NULL, 1, x, out);
    for (int i = 0; i < 32; i++) mean += out[i];
    for (int i = 0; i < 32; i++) var += out[i] * out[i];
    CHECK(fabs(mean) < 1e-12);
    CHECK(fabs(var / 32 - 1) < 1e-5); /* eps 1e-5 against a variance of 85 */
    model_free(&m);
}

TEST(rope_is_identity_at_position_0_and_keeps_norms)
{
    for (int style = TPS_ROPE_HALF; style <= TPS_ROPE_INTERLEAVED; style++) {
        tps_block b = {.rope = (tps_rope_style)style, .rope_theta = 10000};
        vdims d = {.hd = 8, .rot = 8};
        double x[3 * 16], y[3 * 16];
        for (int i = 0; i < 48; i++) x[i] = y[i] = urand() - 0.5;
        tps_vrope_f64(&b, &d, 3, 2, y, 16);
        for (int i = 0; i < 16; i++) CHECK(y[i] == x[i]);
        for (int t = 1; t < 3; t++)
            for (int h = 0; h < 2; h++) {
                double n0 = 0, n1 = 0;
                for (int i = 0; i < 8; i++) {
                    n0 += x[t * 16 + h * 8 + i] * x[t * 16 + h * 8 + i];
                    n1 += y[t * 16 + h * 8 + i] * y[t * 16 + h * 8 + i];
                }
                CHECK(fabs(n0 - n1) < 1e-12);
            }
        /* position 2, pair 1 (frequency 10000^(-2/8)), by hand */
        int a = style == TPS_ROPE_HALF ? 1 : 2, c = style == TPS_ROPE_HALF ? 5 : 3;
        double ang = 2 * pow(10000, -0.25), x1 = x[32 + a], x2 = x[32 + c];
        CHECK(fabs(y[32 + a] - (x1 * cos(ang) - x2 * sin(ang))) < 1e-12);
        CHECK(fabs(y[32 + c] - (x2 * cos(ang) + x1 * sin(ang))) < 1e-12);
    }
}

TEST(partial_rotary_leaves_the_tail_alone)
{
    tps_block b = {.rope = TPS_ROPE_HALF, .rope_theta = 10000};
    vdims d = {.hd = 8, .rot = 2};
    double x[2 * 8], y[2 * 8];
    for (int i = 0; i < 16; i++) x[i] = y[i] = urand();
    tps_vrope_f64(&b, &d, 2, 1, y, 8);
    for (int i = 2; i < 8; i++) CHECK(y[8 + i] == x[8 + i]);
    CHECK(fabs(y[8] - (x[8] * cos(1.0) - x[9] * sin(1.0))) < 1e-12);
}

/* rope_scaling frequencies for theta 10000 and 8 rotating dimensions, whose default inverse
 * frequencies are 1, 0.1, 0.01, 0.001 (wavelengths 6.28, 62.8, 628, 6283), worked by hand
 * from the formulas in transformers' modeling_rope_utils. */
TEST(rope_scaling_frequencies_by_hand)
{
    tps_rope_scaling s = {.type = TPS_ROPE_SCALING_NONE};
    CHECK(fabs(vrope_inv_freq(&s, 1e4, 8, 1, 16) - 0.1) < 1e-15);
    s = (tps_rope_scaling){.type = TPS_ROPE_SCALING_LINEAR, .factor = 2};
    CHECK(fabs(vrope_inv_freq(&s, 1e4, 8, 1, 16) - 0.05) < 1e-15);
    /* llama3, factor 8, low 1, high 4, L 64: wavelengths under 16 keep, over 64 scale, the
     * 62.8 between blends with s = (64 / 62.83 - 1) / 3. */
    s = (tps_rope_scaling){.type = TPS_ROPE_SCALING_LLAMA3, .factor = 8, .low_freq_factor = 1,
                           .high_freq_factor = 4, .original_max_pos = 64};
    double sm = (64 / (2 * M_PI / 0.1) - 1) / 3;
    CHECK(fabs(vrope_inv_freq(&s, 1e4, 8, 0, 16) - 1) < 1e-15);
    CHECK(fabs(vrope_inv_freq(&s, 1e4, 8, 1, 16) - ((1 - sm) * 0.1 / 8 + sm * 0.1)) < 1e-15);
    CHECK(fabs(vrope_inv_freq(&s, 1e4, 8, 2, 16) - 0.01 / 8) < 1e-15);
    /* yarn, factor 4, max_pos 64, beta 32 / 1: correction dims -0.497 and 1.008 give the
     * ramp [0, 2]: pair 1 is half interpolated; cos and sin scale by 0.1 ln 4 + 1. */
    s = (tps_rope_scaling){.type = TPS_ROPE_SCALING_YARN, .factor = 4, .beta_fast = 32, .beta_slow = 1,
                           .max_pos = 64, .attention_factor = 0.1 * log(4.0) + 1};
    CHECK(fabs(vrope_inv_freq(&s, 1e4, 8, 0, 16) - 1) < 1e-15);
    CHECK(fabs(vrope_inv_freq(&s, 1e4, 8, 1, 16) - (0.5 * 0.1 / 4 + 0.5 * 0.1)) < 1e-15);
    CHECK(fabs(vrope_inv_freq(&s, 1e4, 8, 3, 16) - 0.001 / 4) < 1e-15);
    tps_block b = {.rope = TPS_ROPE_HALF, .rope_theta = 1e4, .rope_scaling = s};
    vdims d = {.hd = 8, .rot = 8};
    double x[2 * 8], y[2 * 8];
    for (int i = 0; i < 16; i++) x[i] = y[i] = urand();
    tps_vrope_f64(&b, &d, 2, 1, y, 8);
    CHECK(fabs(y[0] - x[0] * s.attention_factor) < 1e-12); /* position 0: only the scale */
    /* dynamic, factor 2, max_pos 4: the default up to 4 positions; over 8 the base grows to
     * 1e4 * (2 * 8 / 4 - 1)^(8 / 6). */
    s = (tps_rope_scaling){.type = TPS_ROPE_SCALING_DYNAMIC, .factor = 2, .max_pos = 4};
    CHECK(fabs(vrope_inv_freq(&s, 1e4, 8, 1, 4) - 0.1) < 1e-15);
    CHECK(fabs(vrope_inv_freq(&s, 1e4, 8, 1, 8) - pow(1e4 * pow(3.0, 4.0 / 3), -0.25)) < 1e-15);
}

/* One token attends only to itself: the block output is o(v(norm x)), whatever q, k and
 * RoPE do.  Computed here by plain loops from the global weights. */
TEST(attention_of_one_token_is_the_v_path)
{
    model m;
    model_init(&m, K_LLAMA);
    vlayer l;
    tps_error err;
    CHECK(tps_vlayer_load(&m.b, 0, 0, &(tps_vsource){&m.g, store_load, store_has, NULL, NULL}, &l, &err) == TPS_OK);
    double x[32], xn[32], out[32], ms = 0;
    for (int i = 0; i < 32; i++) x[i] = urand() - 0.5, ms += x[i] * x[i];
    const float *nw = find_role(&m, TPS_ROLE_ATTN_NORM_W)->v, *vw = find_role(&m, TPS_ROLE_V_W)->v;
    const float *vb = find_role(&m, TPS_ROLE_V_B)->v, *ow = find_role(&m, TPS_ROLE_O_W)->v;
    const float *ob = find_role(&m, TPS_ROLE_O_B)->v; /* the whole layer adds the o_proj bias once */
    for (int i = 0; i < 32; i++) xn[i] = x[i] / sqrt(ms / 32 + 1e-5) * nw[i];
    double v[8]; /* 2 KV heads of 4 */
    for (int j = 0; j < 8; j++) {
        v[j] = vb[j];
        for (int i = 0; i < 32; i++) v[j] += vw[j * 32 + i] * xn[i];
    }
    CHECK(tps_vref_attn(&m.b, &m.d, &l, NULL, 1, x, out, &err) == TPS_OK);
    double worst = 0;
    for (int o = 0; o < 32; o++) {
        double want = ob[o];
        for (int h = 0; h < 8; h++) /* q heads 0-3 use KV head 0, 4-7 KV head 1 */
            for (int i = 0; i < 4; i++) want += ow[o * 32 + h * 4 + i] * v[(h / 4) * 4 + i];
        worst = fmax(worst, fabs(out[o] - want));
    }
    CHECK(worst < 1e-9);
    tps_vlayer_release(&l);
    model_free(&m);
}

/* Two tokens, one head pair: token 1's context is the softmax-weighted mix of both values,
 * computed here from the projections by hand. */
TEST(causal_attention_of_two_tokens_by_hand)
{
    tps_block b = {.kind = TPS_BLOCK_LLAMA, .rope = TPS_ROPE_NONE, .norm = TPS_NORM_RMS, .norm_eps = 0};
    vdims d = {.hidden = 2, .heads = 1, .kv = 1, .hd = 2, .inter = 1};
    float eye[4] = {1, 0, 0, 1};
    vlayer l;
    memset(&l, 0, sizeof l);
    tps_block_role roles[] = {TPS_ROLE_Q_W, TPS_ROLE_K_W, TPS_ROLE_V_W, TPS_ROLE_O_W};
    for (int i = 0; i < 4; i++) {
        tps_vt *t = &l.t[roles[i]];
        t->dtype = TPS_DT_F32, t->ndim = 2, t->shape[0] = t->shape[1] = 2, t->nelem = 4, t->data = eye;
    }
    vattn_map m = {.hn = 1, .kv_n = 1, .stride = 2};
    double xn[4] = {1, 0, 0.5, 2}, out[4];
    tps_error err;
    CHECK(tps_vattn_f64(&b, &d, &l, &m, 2, xn, true, out, &err) == TPS_OK);
    /* token 0 sees only itself */
    CHECK(fabs(out[0] - 1) < 1e-15 && fabs(out[1]) < 1e-15);
    double s0 = (0.5 * 1 + 2 * 0) / sqrt(2.0), s1 = (0.5 * 0.5 + 2 * 2) / sqrt(2.0);
    double p0 = exp(s0) / (exp(s0) + exp(s1)), p1 = 1 - p0;
    CHECK(fabs(out[2] - (p0 * 1 + p1 * 0.5)) < 1e-14);
    CHECK(fabs(out[3] - (p0 * 0 + p1 * 2)) < 1e-14);
}

/* ---- the sharded pass equals the reference ---- */

static void expect_pass(int kind, const char *label)
{
    uint64_t Ts[] = {1, 2, 4, 8};
    for (int i = 0; i < 4; i++) {
        model m;
        model_init(&m, kind);
        tps_verify_result res;
        CHECK(run(&m, Ts[i], &res) == TPS_OK);
        if (!res.pass)
            printf("#   %s at T=%llu: %s\n", label, (unsigned long long)Ts[i], res.detail);
        CHECK(res.pass);
        CHECK(res.culprit == -1);
        /* float32 ranks against float64: well inside F32's 1e-5, yet not bit-identical */
        CHECK(res.stage[0].rel < 1e-5 && res.stage[1].rel < 1e-5);
        CHECK(res.stage[1].max_abs > 0);
        tps_verify_result_release(&res);
        model_free(&m);
    }
}

TEST(llama_gqa_with_biases_matches_at_tp_1_2_4_8) { expect_pass(K_LLAMA, "llama"); }
TEST(phi3_fused_qkv_and_gate_up_matches_at_tp_1_2_4_8) { expect_pass(K_PHI3, "phi3"); }
TEST(gpt2_conv1d_matches_at_tp_1_2_4_8) { expect_pass(K_GPT2, "gpt2"); }
TEST(neox_parallel_residual_matches_at_tp_1_2_4_8) { expect_pass(K_NEOX, "neox"); }
TEST(mixtral_moe_matches_at_tp_1_2_4_8) { expect_pass(K_MIXTRAL, "mixtral"); }

TEST(bf16_shards_use_the_bf16_tolerance)
{
    model m;
    model_init(&m, K_LLAMA);
    m.g.dtype = TPS_DT_BF16;
    tps_verify_result res;
    CHECK(run(&m, 4, &res) == TPS_OK);
    CHECK(res.pass);
    CHECK(res.dtype == TPS_DT_BF16);
    CHECK(res.stage[0].rtol == 1.6e-2);
    model_free(&m);
}

/* ---- wrong cuts fail, naming the stage and the rank ---- */

static void expect_fail(model *m, uint64_t T, int stage, int64_t culprit, const char *fragment)
{
    tps_verify_result res;
    CHECK(run(m, T, &res) == TPS_OK);
    CHECK(!res.pass);
    CHECK_EQ_U64(res.failed_stage, stage);
    CHECK_EQ_U64(res.culprit, culprit);
    CHECK_CONTAINS(res.detail, fragment);
    printf("#   (as expected) %s\n", res.detail);
    model_free(m);
}

TEST(fused_gate_up_cut_as_one_plain_block_fails)
{
    model m;
    model_init(&m, K_PHI3);
    mem_t *t = find_role(&m, TPS_ROLE_GATE_UP_W);
    tps_partition_simple(&t->part, 0, t->shape[0], 1);
    expect_fail(&m, 2, TPS_VSTAGE_MLP, 0, "rank 0's partial sum differs");
}

TEST(kv_cut_without_replication_fails)
{
    model m;
    model_init(&m, K_LLAMA); /* 2 KV heads of 4 on 4 ranks: one row pair each */
    tps_block_role roles[] = {TPS_ROLE_K_W, TPS_ROLE_V_W, TPS_ROLE_K_B, TPS_ROLE_V_B};
    for (int i = 0; i < 4; i++) {
        mem_t *t = find_role(&m, roles[i]);
        tps_partition_simple(&t->part, 0, t->shape[0], 1);
    }
    expect_fail(&m, 4, TPS_VSTAGE_ATTN, 0, "k.w (k_proj) with shape [2, 32] where the TP convention needs [4, 32]");
}

TEST(o_proj_cut_by_columns_fails)
{
    model m;
    model_init(&m, K_LLAMA);
    mem_t *t = find_role(&m, TPS_ROLE_O_W);
    tps_partition_simple(&t->part, 0, t->shape[0], 1);
    expect_fail(&m, 2, TPS_VSTAGE_ATTN, 0, "o.w (o_proj) with shape [16, 32] where the TP convention needs [32, 16]");
}

TEST(row_parallel_bias_split_fails)
{
    model m;
    model_init(&m, K_GPT2);
    mem_t *t = find_role(&m, TPS_ROLE_DOWN_B);
    tps_partition_simple(&t->part, 0, t->shape[0], 1);
    expect_fail(&m, 4, TPS_VSTAGE_MLP, 0, "a row-parallel bias is replicated");
}

/* Llama mlp_bias: gate_proj's bias cut as two segments, so rank 0 of 2 adds the biases of
 * columns 0-5 and 12-17 to its gate columns 0-11. */
TEST(gate_bias_cut_unlike_its_weight_fails)
{
    model m;
    model_init(&m, K_LLAMA);
    tps_partition *p = &find_role(&m, TPS_ROLE_GATE_B)->part;
    p->nseg = 2;
    p->seg[0].length = p->seg[1].length = 12;
    p->seg[0].unit = p->seg[1].unit = 1;
    expect_fail(&m, 2, TPS_VSTAGE_MLP, 0, "rank 0's partial sum differs");
}

TEST(o_bias_cut_like_a_column_fails)
{
    model m;
    model_init(&m, K_LLAMA);
    mem_t *t = find_role(&m, TPS_ROLE_O_B);
    tps_partition_simple(&t->part, 0, t->shape[0], 1);
    expect_fail(&m, 2, TPS_VSTAGE_ATTN, 0, "a row-parallel bias is replicated");
}

/* q cut as two segments of 4 heads: rank 0 of 2 holds heads 0, 1, 4, 5 and pairs them
 * with KV head 0 and o_proj columns of heads 0-3. */
TEST(q_heads_in_another_order_than_kv_groups_fail)
{
    model m;
    model_init(&m, K_LLAMA);
    tps_block_role roles[] = {TPS_ROLE_Q_W, TPS_ROLE_Q_B};
    for (int i = 0; i < 2; i++) {
        tps_partition *p = &find_role(&m, roles[i])->part;
        p->nseg = 2;
        p->seg[0].length = p->seg[1].length = 16;
        p->seg[0].unit = p->seg[1].unit = 4;
    }
    expect_fail(&m, 2, TPS_VSTAGE_ATTN, 0, "q heads 0-3 with KV heads 0-0");
}

TEST(one_bad_rank_is_named)
{
    model m;
    model_init(&m, K_MIXTRAL);
    m.g.fault_rank = 2;
    m.g.fault_role = TPS_ROLE_DOWN_W;
    expect_fail(&m, 4, TPS_VSTAGE_MLP, 2, "rank 2's partial sum differs");
}

TEST(a_bad_replica_of_the_router_is_named)
{
    model m;
    model_init(&m, K_MIXTRAL);
    m.g.fault_rank = 3;
    m.g.fault_role = TPS_ROLE_ROUTER_W;
    expect_fail(&m, 4, TPS_VSTAGE_MLP, 3, "rank 3's partial sum differs");
}

TEST(heads_that_do_not_divide_are_invalid)
{
    model m;
    model_init(&m, K_LLAMA);
    tps_verify_result res;
    store ranks[3];
    tps_vsource src[3];
    for (int r = 0; r < 3; r++) {
        ranks[r] = m.g;
        src[r] = (tps_vsource){&ranks[r], store_load, store_has, NULL, NULL};
    }
    tps_vsource ref = {&m.g, store_load, store_has, NULL, NULL};
    tps_verify_opts o = {.tokens = 2, .seed = 1};
    tps_error err;
    tps_error_clear(&err);
    CHECK(tps_verify_layer(&m.b, 0, 3, &ref, src, &o, &res, &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "do not divide among 3 ranks");
    model_free(&m);
}

int main(void)
{
    RUN(rmsnorm_of_a_constant_vector);
    RUN(layernorm_has_zero_mean_unit_variance);
    RUN(rope_is_identity_at_position_0_and_keeps_norms);
    RUN(partial_rotary_leaves_the_tail_alone);
    RUN(rope_scaling_frequencies_by_hand);
    RUN(attention_of_one_token_is_the_v_path);
    RUN(causal_attention_of_two_tokens_by_hand);
    RUN(llama_gqa_with_biases_matches_at_tp_1_2_4_8);
    RUN(phi3_fused_qkv_and_gate_up_matches_at_tp_1_2_4_8);
    RUN(gpt2_conv1d_matches_at_tp_1_2_4_8);
    RUN(neox_parallel_residual_matches_at_tp_1_2_4_8);
    RUN(mixtral_moe_matches_at_tp_1_2_4_8);
    RUN(bf16_shards_use_the_bf16_tolerance);
    RUN(fused_gate_up_cut_as_one_plain_block_fails);
    RUN(kv_cut_without_replication_fails);
    RUN(o_proj_cut_by_columns_fails);
    RUN(row_parallel_bias_split_fails);
    RUN(gate_bias_cut_unlike_its_weight_fails);
    RUN(o_bias_cut_like_a_column_fails);
    RUN(q_heads_in_another_order_than_kv_groups_fail);
    RUN(one_bad_rank_is_named);
    RUN(a_bad_replica_of_the_router_is_named);
    RUN(heads_that_do_not_divide_are_invalid);
    return tps_test_done();
}
