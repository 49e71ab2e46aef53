/* The names of a layer's tensors, from the block description's role templates. */
#ifndef TPS_VERIFY_LOAD_NAMES_H
#define TPS_VERIFY_LOAD_NAMES_H

#include <stdbool.h>
#include <stdint.h>
#include "../../lib/layout/block.h"

/* Layer tensor names: layer prefix + (for a MoE block's MLP roles: the expert prefix, or
 * with expert TPS_VEXPERT_DENSE the dense prefix, with TPS_VEXPERT_SHARED the shared
 * expert's) + role template, with "{layer}" and "{expert}" replaced.  NULL when the role is
 * unused or on allocation failure (*oom set). */
#define TPS_VEXPERT_DENSE UINT64_MAX
#define TPS_VEXPERT_SHARED (UINT64_MAX - 1)
char *tps_verify_tensor_name(const tps_block *b, tps_block_role role, uint64_t layer, uint64_t expert, bool *oom);
/* Whether the role names one MLP's tensor that a MoE block has per expert. */
bool tps_verify_role_per_expert(const tps_block *b, tps_block_role role);
/* The roles only a MoE layer has beside its experts (router, router bias, shared gate). */
bool tps_verify_role_routing(tps_block_role role);
/* The layer prefix with "{layer}" replaced ("model.layers.3."); NULL on allocation failure. */
char *tps_verify_layer_prefix(const tps_block *b, uint64_t layer);

#endif
