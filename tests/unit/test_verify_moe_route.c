/* Mixture-of-experts routing (verify/math/moe_route.h) against a brute force that reads the
 * families' definitions literally: of all ways to keep topk_group groups, the one whose
 * group scores sum highest; of all top_k subsets of the kept experts, the one whose choice
 * scores sum highest (with distinct scores, exactly the top-k); weights the chosen experts'
 * scores, renormalized or not, scaled.  And the config.json keys that set the routing and
 * the dense layers. */
#include <math.h>
#include <stdlib.h>

#include "../../lib/layout/layout.h"
#include "../../verify/math/moe_route.h"
#include "tps_test.h"

#define EMAX 8

static double score(const vmoe_cfg *c, const double *lt, size_t E, size_t e)
{
    if (c->sigmoid) return 1.0 / (1.0 + exp(-lt[e]));
    double z = 0;
    for (size_t i = 0; i < E; i++) z += exp(lt[i]);
    return exp(lt[e]) / z;
}

/* Sum of the best `take` values of v[0..n) by trying every subset. */
static double best_sum(const double *v, size_t n, size_t take, unsigned *mask_out)
{
    double best = -INFINITY;
    for (unsigned m = 0; m < 1u << n; m++) {
        if ((size_t)__builtin_popcount(m) != take) continue;
        double s = 0;
        for (size_t i = 0; i < n; i++)
            if (m >> i & 1) s += v[i];
        if (s > best) {
            best = s;
            if (mask_out) *mask_out = m;
        }
    }
    return best;
}

static void brute(const vmoe_cfg *c, size_t E, size_t K, const double *lt, const double *bias, double *wt)
{
    double s[EMAX], cs[EMAX];
    for (size_t e = 0; e < E; e++) {
        s[e] = score(c, lt, E, e);
        cs[e] = s[e] + (bias ? bias[e] : 0);
    }
    bool grouped = c->group_method && c->n_group > 1 && c->topk_group < c->n_group;
    size_t G = grouped ? c->n_group : 1, gs = E / G;
    double gsc[EMAX];
    for (size_t g = 0; g < G; g++)
        gsc[g] = best_sum(cs + g * gs, gs, c->group_method == 2 && gs > 1 ? 2 : 1, NULL);
    unsigned gmask = (1u << G) - 1;
    if (grouped) best_sum(gsc, G, c->topk_group, &gmask);
    double cand[EMAX];
    for (size_t e = 0; e < E; e++) cand[e] = gmask >> (e / gs) & 1 ? cs[e] : -1e300;
    unsigned emask = 0;
    best_sum(cand, E, K, &emask);
    double kept = 0;
    for (size_t e = 0; e < E; e++) kept += emask >> e & 1 ? s[e] : 0;
    for (size_t e = 0; e < E; e++)
        wt[e] = emask >> e & 1 ? (c->norm ? s[e] / kept : s[e]) * c->scaling : 0;
}

TEST(routing_matches_brute_force)
{
    struct {
        vmoe_cfg c;
        size_t E, K;
        bool bias;
    } cases[] = {
        {{0, 0, 1, 1.0, 1, 1}, 8, 2, false},   /* Mixtral */
        {{0, 0, 0, 1.0, 1, 1}, 4, 2, false},   /* Qwen2-MoE without norm_topk_prob */
        {{0, 1, 0, 16.0, 4, 2}, 8, 3, false},  /* DeepSeek-V2 group_limited_greedy */
        {{0, 0, 0, 2.5, 4, 2}, 8, 2, false},   /* V2-Lite greedy: groups ignored */
        {{1, 2, 1, 2.5, 4, 2}, 8, 3, true},    /* DeepSeek-V3 noaux_tc with its bias */
        {{1, 2, 0, 1.0, 2, 1}, 8, 4, true},    /* one group of four kept, all four chosen */
        {{1, 2, 1, 1.0, 8, 3}, 8, 2, true},    /* one expert a group: its score alone */
    };
    uint64_t st = 42;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t E = cases[k].E, K = cases[k].K, differs_from_plain = 0;
        for (int trial = 0; trial < 400; trial++) {
            double lt[EMAX], bias[EMAX], want[EMAX], wt[EMAX] = {0}, cs[EMAX], plain[EMAX] = {0};
            unsigned char sel[EMAX] = {0}, psel[EMAX] = {0};
            for (size_t e = 0; e < E; e++) {
                lt[e] = 4 * tps_test_uniform(&st) - 2;
                bias[e] = 0.2 * tps_test_uniform(&st) - 0.1;
            }
            const double *b = cases[k].bias ? bias : NULL;
            brute(&cases[k].c, E, K, lt, b, want);
            vmoe_route(&cases[k].c, 1, E, K, lt, b, sel, wt, cs);
            bool ok = true;
            for (size_t e = 0; e < E; e++) ok = ok && (sel[e] != 0) == (want[e] != 0) && fabs(wt[e] - want[e]) < 1e-12;
            CHECK(ok);
            if (!ok) {
                printf("#   case %zu trial %d differs\n", k, trial);
                break;
            }
            vmoe_cfg pc = cases[k].c;
            pc.group_method = 0;
            vmoe_route(&pc, 1, E, K, lt, NULL, psel, plain, cs);
            differs_from_plain += memcmp(sel, psel, E) != 0;
        }
        /* the grouping and the bias change the choice sometimes: the cases test something */
        if (cases[k].c.group_method && cases[k].c.topk_group < cases[k].c.n_group && cases[k].c.n_group < E)
            CHECK(differs_from_plain > 0);
    }
}

TEST(routing_batches_tokens_independently)
{
    vmoe_cfg c = {0, 1, 1, 1.0, 2, 1};
    double lt[3 * 4] = {1, 2, 3, 4, 4, 3, 2, 1, 0, 5, 0, 5}, wt[12] = {0}, cs[4];
    unsigned char sel[12] = {0};
    vmoe_route(&c, 3, 4, 2, lt, NULL, sel, wt, cs);
    unsigned char want[12] = {0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0}; /* ties: lower group, lower index */
    CHECK(memcmp(sel, want, 12) == 0);
    CHECK(fabs(wt[2] + wt[3] - 1) < 1e-15 && fabs(wt[3] / wt[2] - exp(1)) < 1e-12);
}

static tps_layout *qwen_moe(const char *config)
{
    tps_layout *l = NULL;
    tps_error err;
    tps_error_clear(&err);
    if (tps_layout_load_preset("qwen2_moe", &l, &err) != TPS_OK) return NULL;
    if (tps_layout_apply_config_text(l, config, strlen(config), "config.json", NULL, &err) != TPS_OK) {
        tps_layout_free(l);
        return NULL;
    }
    return l;
}

TEST(routing_and_dense_layers_from_config)
{
    tps_layout *l = qwen_moe("{\"norm_topk_prob\": true, \"decoder_sparse_step\": 2, \"mlp_only_layers\": [3],"
                             " \"moe_intermediate_size\": 32, \"shared_expert_intermediate_size\": 48}");
    CHECK(l != NULL);
    if (!l) return;
    const tps_block *b = tps_layout_block(l);
    CHECK(tps_block_is_moe(b) && b->moe.norm_topk_prob && b->moe.scoring == TPS_MOE_SOFTMAX);
    CHECK_EQ_U64(b->moe_intermediate, 32);
    CHECK_EQ_U64(b->shared_intermediate, 48);
    /* (layer + 1) % 2 == 0, and never layer 3 */
    CHECK(!tps_block_layer_is_moe(b, 0) && tps_block_layer_is_moe(b, 1) && !tps_block_layer_is_moe(b, 2) &&
          !tps_block_layer_is_moe(b, 3) && tps_block_layer_is_moe(b, 5));
    tps_layout_free(l);

    /* DeepSeek's words: sigmoid noaux_tc, groups, scaling, the first dense layers, every
     * moe_layer_freq-th layer, n_shared_experts expert widths for the shared MLP. */
    l = qwen_moe("{\"scoring_func\": \"sigmoid\", \"topk_method\": \"noaux_tc\", \"n_group\": 8, \"topk_group\": 4,"
                 " \"routed_scaling_factor\": 2.5, \"first_k_dense_replace\": 3, \"moe_layer_freq\": 2,"
                 " \"moe_intermediate_size\": 16, \"n_shared_experts\": 2, \"n_routed_experts\": 64}");
    CHECK(l != NULL);
    if (!l) return;
    b = tps_layout_block(l);
    CHECK(b->moe.scoring == TPS_MOE_SIGMOID && b->moe.topk_method == TPS_MOE_TOPK_GROUP_TOP2);
    CHECK_EQ_U64(b->moe.n_group, 8);
    CHECK_EQ_U64(b->moe.topk_group, 4);
    CHECK(b->moe.scaling == 2.5 && !b->moe.norm_topk_prob);
    CHECK_EQ_U64(b->shared_intermediate, 32);
    CHECK_EQ_U64(b->experts, 64);
    CHECK(!tps_block_layer_is_moe(b, 2) && !tps_block_layer_is_moe(b, 3) && tps_block_layer_is_moe(b, 4));
    tps_layout_free(l);

    /* A routing verify does not compute is refused naming the key. */
    CHECK(qwen_moe("{\"scoring_func\": \"sparsemixer\"}") == NULL);
    CHECK(qwen_moe("{\"mlp_only_layers\": [5000]}") == NULL);
}

int main(void)
{
    RUN(routing_matches_brute_force);
    RUN(routing_batches_tokens_independently);
    RUN(routing_and_dense_layers_from_config);
    return tps_test_done();
}
