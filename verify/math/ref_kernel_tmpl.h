/* One instruction set's build of the reference's block kernel (verify/math/ref_kernel.h,
 * tps_vref_block's contract).  No include guard: verify/math/ref_kernel.c includes it once per
 * kernel, with
 *   VK_FN    the function's name
 *   VK_ATTR  its target attribute (empty for the portable build)
 *   VK_L     float64 lanes per vector: 8 (AVX-512), 4 (AVX2), 2 (portable: SSE2, NEON)
 * The shape is the same for every width: 4 rows x 2 vectors of tokens = eight accumulators,
 * two token vectors, a broadcast weight and a product, 12 registers of the 16 that SSE2 and
 * AVX2 have (32 on AVX-512 and NEON), so nothing spills.  The block's TPS_VREF_T tokens go in 16 / (2 VK_L)
 * passes over k; in a pass each token row of xt is read at one 2 VK_L-double slice (one cache
 * line at AVX2's width), the weights' 4 rows stay in L1.  Each accumulator still adds its
 * products in k order, one rounding for the product and one for the sum (no fused
 * multiply-add: neither target enables FMA, and ref_kernel.c turns contraction off), so every
 * width gives the plain loop's bits. */

VK_ATTR static void VK_FN(size_t kc, const double *w, size_t ldw, const double *xt,
                          double acc[TPS_VREF_R][TPS_VREF_T])
{
    typedef double vec __attribute__((vector_size(VK_L * sizeof(double))));
    const double *w0 = w, *w1 = w + ldw, *w2 = w + 2 * ldw, *w3 = w + 3 * ldw;
    for (size_t t0 = 0; t0 < TPS_VREF_T; t0 += 2 * VK_L) {
        /* Eight named vectors, so that they stay in registers (plain arrays indexed [r][t] stay
         * in memory at -O2); loads and stores by memcpy, which makes no alignment claim. */
        vec a0, a1, a2, a3, a4, a5, a6, a7, x0, x1;
        memcpy(&a0, &acc[0][t0], sizeof a0);
        memcpy(&a1, &acc[0][t0 + VK_L], sizeof a1);
        memcpy(&a2, &acc[1][t0], sizeof a2);
        memcpy(&a3, &acc[1][t0 + VK_L], sizeof a3);
        memcpy(&a4, &acc[2][t0], sizeof a4);
        memcpy(&a5, &acc[2][t0 + VK_L], sizeof a5);
        memcpy(&a6, &acc[3][t0], sizeof a6);
        memcpy(&a7, &acc[3][t0 + VK_L], sizeof a7);
        const double *x = xt + t0;
        for (size_t k = 0; k < kc; k++, x += TPS_VREF_T) {
            memcpy(&x0, x, sizeof x0);
            memcpy(&x1, x + VK_L, sizeof x1);
            a0 += w0[k] * x0;
            a1 += w0[k] * x1;
            a2 += w1[k] * x0;
            a3 += w1[k] * x1;
            a4 += w2[k] * x0;
            a5 += w2[k] * x1;
            a6 += w3[k] * x0;
            a7 += w3[k] * x1;
        }
        memcpy(&acc[0][t0], &a0, sizeof a0);
        memcpy(&acc[0][t0 + VK_L], &a1, sizeof a1);
        memcpy(&acc[1][t0], &a2, sizeof a2);
        memcpy(&acc[1][t0 + VK_L], &a3, sizeof a3);
        memcpy(&acc[2][t0], &a4, sizeof a4);
        memcpy(&acc[2][t0 + VK_L], &a5, sizeof a5);
        memcpy(&acc[3][t0], &a6, sizeof a6);
        memcpy(&acc[3][t0 + VK_L], &a7, sizeof a7);
    }
}

#undef VK_FN
#undef VK_ATTR
#undef VK_L
