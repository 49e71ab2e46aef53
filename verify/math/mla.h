/* Multi-head latent attention's sizes and shapes (verify/math/mla.c). */
#ifndef TPS_VERIFY_MATH_MLA_H
#define TPS_VERIFY_MATH_MLA_H

#include "share.h"

/* Multi-head latent attention (verify/math/mla.c): the attention sizes of layer l into d (heads,
 * kv = heads, hd = q head width, rot and the MLA fields), and the shape of an attention role
 * (the tps_vexpected_shape contract). */
tps_status tps_vmla_resolve_dims(const tps_block *b, uint64_t layer, const vlayer *l, vdims *d, tps_error *err);
int tps_vmla_expected_shape(const vdims *d, const vshare *s, tps_block_role role, uint64_t *shape);
/* Whether an MLA q-path role may be absent (a model has q_proj or q_a/q_b, not both). */
bool tps_vmla_role_optional(const tps_block *b, tps_block_role r);

#endif
