/* Mixture-of-experts routing of one batch of tokens, shared by the CPU ranks
 * (verify/math/ops_tmpl.h) and the CUDA plugin (verify/backends/cuda/cuda_backend.cu, compiled as C++ by
 * nvcc), so both choose the same experts with the same weights.  One routine covers the
 * families (lib/layout/block.h, tps_moe_routing):
 *   - scores: softmax over all router logits (Mixtral, Qwen-MoE, DeepSeek-V2) or each
 *     logit's sigmoid (DeepSeek-V3);
 *   - choice scores: the scores plus the router bias when there is one (V3's
 *     e_score_correction_bias), used to choose and never as weights;
 *   - grouped top-k: the experts in n_group equal groups, a group ranked by its best choice
 *     score (group_limited_greedy) or the sum of its two best (noaux_tc); only the
 *     topk_group best groups' experts stay candidates (vLLM's grouped_topk);
 *   - the top_k candidates by choice score, lowest index first on a tie;
 *   - weights: the chosen experts' scores, divided by their sum when norm_topk_prob
 *     (Mixtral always), times routed_scaling_factor.
 * This is transformers' MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock, DeepseekV2MoEGate and
 * DeepseekV3TopkRouter.  Where transformers masks the dropped groups' scores with 0 and
 * vLLM with -inf, the two agree whenever a kept candidate's choice score is positive (every
 * softmax or sigmoid score without a bias); this follows vLLM. */
#ifndef TPS_VERIFY_MOE_ROUTE_H
#define TPS_VERIFY_MOE_ROUTE_H

#include <math.h>
#include <stddef.h>

#include "../../lib/layout/block.h"

typedef struct vmoe_cfg {
    int sigmoid;         /* else softmax */
    int group_method;    /* 0 plain top-k, 1 group by its max, 2 group by its top-2 sum */
    int norm;            /* norm_topk_prob */
    double scaling;      /* routed_scaling_factor */
    size_t n_group, topk_group;
} vmoe_cfg;

static inline vmoe_cfg vmoe_cfg_of(const tps_block *b)
{
    vmoe_cfg c;
    c.sigmoid = b->moe.scoring == TPS_MOE_SIGMOID;
    c.group_method = b->moe.topk_method == TPS_MOE_TOPK_GROUP_MAX ? 1 : b->moe.topk_method == TPS_MOE_TOPK_GROUP_TOP2 ? 2 : 0;
    c.norm = b->moe.norm_topk_prob;
    c.scaling = b->moe.scaling > 0 ? b->moe.scaling : 1.0;
    c.n_group = (size_t)b->moe.n_group;
    c.topk_group = (size_t)b->moe.topk_group;
    return c;
}

/* A group's rank score among the choice scores c (its experts [g*gs, (g+1)*gs)). */
static inline double vmoe_group_score(const vmoe_cfg *c, const double *cs, size_t g, size_t gs)
{
    double a = -INFINITY, b = -INFINITY; /* best, second best */
    for (size_t e = g * gs; e < (g + 1) * gs; e++) {
        if (cs[e] > a) {
            b = a;
            a = cs[e];
        } else if (cs[e] > b) {
            b = cs[e];
        }
    }
    return c->group_method == 2 && gs > 1 ? a + b : a;
}

/* logit: n x E router logits; bias: E choice biases or NULL; sel (zeroed by the caller): 1
 * where token t goes to expert e; wt (zeroed by the caller): that expert's weight for the
 * token, 0 elsewhere; cs: E doubles of scratch.  K <= E; with grouping, n_group divides E
 * and topk_group <= n_group (the caller checks). */
static inline void vmoe_route(const vmoe_cfg *c, size_t n, size_t E, size_t K, const double *logit,
                              const double *bias, unsigned char *sel, double *wt, double *cs)
{
    int grouped = c->group_method != 0 && c->n_group > 1 && c->topk_group < c->n_group;
    size_t G = grouped ? c->n_group : 1, gs = E / G;
    for (size_t t = 0; t < n; t++) {
        const double *lt = logit + t * E;
        double *wt_t = wt + t * E, kept = 0;
        unsigned char *st = sel + t * E;
        if (c->sigmoid) {
            for (size_t e = 0; e < E; e++) wt_t[e] = 1.0 / (1.0 + exp(-lt[e]));
        } else {
            double mx = lt[0], z = 0;
            for (size_t e = 1; e < E; e++) mx = fmax(mx, lt[e]);
            for (size_t e = 0; e < E; e++) z += exp(lt[e] - mx);
            for (size_t e = 0; e < E; e++) wt_t[e] = exp(lt[e] - mx) / z;
        }
        for (size_t e = 0; e < E; e++) cs[e] = wt_t[e] + (bias ? bias[e] : 0.0);
        /* 2 marks a candidate: every expert, or those of the topk_group best groups. */
        if (!grouped) {
            for (size_t e = 0; e < E; e++) st[e] = 2;
        } else {
            for (size_t k = 0; k < c->topk_group; k++) {
                size_t best = G;
                double bs = 0;
                for (size_t g = 0; g < G; g++) {
                    if (st[g * gs]) continue;
                    double s = vmoe_group_score(c, cs, g, gs);
                    if (best == G || s > bs) best = g, bs = s;
                }
                for (size_t e = best * gs; e < (best + 1) * gs; e++) st[e] = 2;
            }
        }
        for (size_t k = 0; k < K; k++) {
            size_t best = E;
            for (size_t e = 0; e < E; e++)
                if (st[e] == 2 && (best == E || cs[e] > cs[best])) best = e;
            if (best == E) break; /* fewer candidates than K: the caller's checks exclude it */
            st[best] = 1;
            kept += wt_t[best];
        }
        for (size_t e = 0; e < E; e++) {
            if (st[e] != 1) {
                st[e] = 0;
                wt_t[e] = 0;
                continue;
            }
            if (c->norm) wt_t[e] /= kept;
            wt_t[e] *= c->scaling;
        }
    }
}

#endif
