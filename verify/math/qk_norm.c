/* q_norm / k_norm in float64 (reference) and float32 (ranks): verify/math/qk_norm_tmpl.h twice.
 *
 * Over the whole projection (OLMo 2) the norm of q needs all of q's heads, which TP spreads
 * over the ranks.  vLLM's Olmo2Attention all-gathers q and k, normalizes the full vectors
 * and keeps its own part; what crosses ranks is only each token's sum of squares, so
 * verify models that all-gather as an all-reduce of the per-token sums of squares of q and
 * of k (2 n floats, not n (heads + kv_heads) head_dim): the same norm, with the partial
 * sums added in another order (a float32 rounding apart).  The ranks' side of the
 * collective is in verify/ranks/rank.c, the reference's in verify/math/ref.c. */
#include <math.h>
#include <stdlib.h>

#include "qk_norm.h"

#define REAL double
#define SFX f64
#include "qk_norm_tmpl.h"
#undef REAL
#undef SFX

#define REAL float
#define SFX f32
#include "qk_norm_tmpl.h"
#undef REAL
#undef SFX
