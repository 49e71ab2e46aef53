#include <stdio.h>

#include "layout_int.h"

tps_status tps_layout_eval(const tps_layout *l, const char *expr, const char *what, uint64_t *out, tps_error *err)
{
    tps_expr e = {0};
    size_t pos = 0;
    const char *msg = NULL;
    if (!tps_expr_compile(expr, &e, &pos, &msg))
        return tps_fail(err, TPS_EINVALID, "%s: expression '%s' at byte %zu: %s", what, expr, pos,
                        msg ? msg : "not an expression");
    tps_status st = tps_expr_eval(&e, &l->sizes, what, "megatron mapping", out, err);
    tps_expr_release(&e);
    return st;
}
