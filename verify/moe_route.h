/* Mixtral routing of one batch of tokens, shared by the CPU ranks (verify/ops_tmpl.h) and
 * the CUDA plugin (verify/cuda/cuda_backend.cu, compiled as C++ by nvcc), so both choose
 * the same experts with the same weights: softmax over the router logits, the top_k
 * experts (lowest index first on a tie), their weights renormalized to sum to 1 (as Hugging
 * Face's MixtralSparseMoeBlock does). */
#ifndef TPS_VERIFY_MOE_ROUTE_H
#define TPS_VERIFY_MOE_ROUTE_H

#include <math.h>
#include <stddef.h>

/* logit: n x E router logits; sel (zeroed by the caller): 1 where token t goes to expert e;
 * wt (zeroed by the caller): that expert's weight for the token, 0 elsewhere. K <= E. */
static inline void vmoe_route(size_t n, size_t E, size_t K, const double *logit, unsigned char *sel, double *wt)
{
    for (size_t t = 0; t < n; t++) {
        const double *lt = logit + t * E;
        double *wt_t = wt + t * E, mx = lt[0], z = 0, kept = 0;
        for (size_t e = 1; e < E; e++) mx = fmax(mx, lt[e]);
        for (size_t e = 0; e < E; e++) z += exp(lt[e] - mx);
        for (size_t k = 0; k < K; k++) {
            size_t best = E;
            for (size_t e = 0; e < E; e++)
                if (!sel[t * E + e] && (best == E || lt[e] > lt[best])) best = e;
            sel[t * E + best] = 1;
            wt_t[best] = exp(lt[best] - mx) / z;
            kept += wt_t[best];
        }
        for (size_t e = 0; e < E; e++) wt_t[e] /= kept;
    }
}

#endif
