/* The names of a layer's tensors (verify/load/names.h). */
#include <stdlib.h>
#include <string.h>

#include "../../lib/base/buf.h"
#include "fused_experts.h"
#include "names.h"

bool tps_verify_role_per_expert(const tps_block *b, tps_block_role role)
{
    if (!tps_block_is_moe(b)) return false;
    switch (role) {
    case TPS_ROLE_GATE_W: case TPS_ROLE_UP_W: case TPS_ROLE_GATE_B: case TPS_ROLE_UP_B: case TPS_ROLE_GATE_UP_W:
    case TPS_ROLE_FC_W: case TPS_ROLE_FC_B: case TPS_ROLE_DOWN_W:
        return true;
    default:
        return false;
    }
}

bool tps_verify_role_routing(tps_block_role role)
{
    return role == TPS_ROLE_ROUTER_W || role == TPS_ROLE_ROUTER_BIAS || role == TPS_ROLE_SHARED_GATE_W ||
           role == TPS_ROLE_ROUTER_LOGIT_B || tps_vrole_fused_experts(role);
}

static void put_expanded(tps_buf *out, const char *tmpl, uint64_t layer, uint64_t expert)
{
    for (const char *p = tmpl; *p;) {
        if (strncmp(p, "{layer}", 7) == 0) {
            tps_buf_printf(out, "%llu", (unsigned long long)layer);
            p += 7;
        } else if (strncmp(p, "{expert}", 8) == 0) {
            tps_buf_printf(out, "%llu", (unsigned long long)expert);
            p += 8;
        } else {
            tps_buf_putc(out, *p++);
        }
    }
}

/* The expanded text as a malloc'd string; NULL when out of memory. */
static char *take_string(tps_buf *s)
{
    const char *c = tps_buf_cstr(s);
    char *out = c ? strdup(c) : NULL;
    tps_buf_release(s);
    return out;
}

char *tps_verify_tensor_name(const tps_block *b, tps_block_role role, uint64_t layer, uint64_t expert, bool *oom)
{
    *oom = false;
    if (!b->role[role]) return NULL;
    tps_buf s = TPS_BUF_INIT;
    if (b->layer_prefix) put_expanded(&s, b->layer_prefix, layer, expert);
    if (tps_verify_role_per_expert(b, role)) {
        const char *pre = expert == TPS_VEXPERT_DENSE ? b->dense_prefix
                          : expert == TPS_VEXPERT_SHARED ? b->shared_prefix : b->expert_prefix;
        if (pre) put_expanded(&s, pre, layer, expert);
    }
    put_expanded(&s, b->role[role], layer, expert);
    char *name = take_string(&s);
    if (!name) *oom = true;
    return name;
}

char *tps_verify_layer_prefix(const tps_block *b, uint64_t layer)
{
    tps_buf s = TPS_BUF_INIT;
    put_expanded(&s, b->layer_prefix ? b->layer_prefix : "", layer, 0);
    return take_string(&s);
}
