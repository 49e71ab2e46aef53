/* Writing a planned Megatron checkpoint (lib/registry/megatron_plan.h). */
#include "megatron_plan.h"

tps_status tps_megatron_plan_write(void *plan, const tps_write_opts *o, tps_error *err)
{
    const tps_megatron_plan *p = plan;
    if (p->dist)
        return tps_megatron_dist_write(p->m, p->mo, p->num_layers, p->sinks->dist, p->sinks->write_common, p->read,
                                       p->ctx, o, err);
    return tps_megatron_write(p->m, p->mo, p->sinks->torch, p->read, p->ctx, o, err);
}

tps_status tps_megatron_dist_supported(const char *src, const tps_megatron_model *model, tps_error *err)
{
    if (model->experts)
        return tps_fail(err, TPS_EINVALID,
                        "%s: a model with %llu MoE experts: writing its experts as torch_dist is not done yet; use "
                        "--ckpt-format torch",
                        src, (unsigned long long)model->experts);
    return TPS_OK;
}
