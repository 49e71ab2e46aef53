/* Experts fused into whole-layer tensors (GPT-OSS; verify/load/fused_experts.c). */
#ifndef TPS_VERIFY_LOAD_FUSED_EXPERTS_H
#define TPS_VERIFY_LOAD_FUSED_EXPERTS_H

#include "../math/share.h"

/* Whether role is one of the experts_* roles (lib/layout/block.h). */
bool tps_vrole_fused_experts(tps_block_role role);

/* The shape a share holds of a fused experts_* role (returns 3 or 2). */
int tps_vexperts_fused_shape(const vdims *d, const vshare *s, tps_block_role role, uint64_t *shape);

/* When l holds the fused experts_* tensors, fills its per-expert table l->ex (allocated by
 * tps_vlayer_load, l->nex experts) with each expert's gate_proj, up_proj [inter, hidden],
 * their biases, down_proj [hidden, inter] and its down bias, so the MoE math runs as for
 * per-expert checkpoints.  Tensors whose shapes do not fit together are left fused and the
 * table empty: the shape check (tps_vcheck_shapes) reports them. */
tps_status tps_vexperts_unfuse(const tps_block *b, vlayer *l, tps_error *err);

#endif
