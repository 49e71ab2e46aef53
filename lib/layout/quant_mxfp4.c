/* vLLM's cut of GPT-OSS's MXFP4 experts (lib/layout/quant_mxfp4.h). */
#include "quant_mxfp4.h"

#include <string.h>

#include "../base/index.h"

typedef struct mx_tensor {
    const char *suffix;
    int ndim, dim; /* the tensor's rank and the dimension vLLM cuts */
    uint64_t unit; /* elements along dim per 32-wide block of the intermediate dimension */
} mx_tensor;

static const mx_tensor tensors[] = {
    {".mlp.experts.gate_up_proj_blocks", 4, 1, 2 * TPS_MXFP4_BLOCK},
    {".mlp.experts.gate_up_proj_scales", 3, 1, 2 * TPS_MXFP4_BLOCK},
    {".mlp.experts.gate_up_proj_bias", 2, 1, 2 * TPS_MXFP4_BLOCK},
    {".mlp.experts.down_proj_blocks", 4, 2, 1},
    {".mlp.experts.down_proj_scales", 3, 2, 1},
};

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

tps_status tps_mxfp4_partition(const char *name, int ndim, const uint64_t *shape, tps_partition *p, tps_error *err)
{
    const mx_tensor *t = NULL;
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0] && !t; i++)
        if (ends_with(name, tensors[i].suffix)) t = &tensors[i];
    if (!t) return TPS_OK;
    char shp[128];
    tps_shape_str(shape, ndim, shp, sizeof shp);
    if (ndim != t->ndim || (ndim == 4 && shape[3] != TPS_MXFP4_BLOCK / 2))
        return tps_fail(err, TPS_EINVALID, "tensor %s: shape %s is not MXFP4's (%d dimensions%s)", name, shp, t->ndim,
                        t->ndim == 4 ? ", 16 bytes a block last" : "");
    if (p->replicated || p->nseg != 1 || p->dim != t->dim || p->groups > 1 || p->pad)
        return tps_fail(err, TPS_EINVALID, "tensor %s: MXFP4 experts are cut along dimension %d as one segment (vLLM "
                        "_load_weights_mxfp4); the layout's rule cuts it otherwise", name, t->dim);
    if (shape[t->dim] % t->unit != 0)
        return tps_fail(err, TPS_EINVALID, "tensor %s: dimension %d has %llu, not a multiple of %llu (whole %d-wide "
                        "blocks of the intermediate dimension)", name, t->dim, (unsigned long long)shape[t->dim],
                        (unsigned long long)t->unit, TPS_MXFP4_BLOCK);
    tps_partition_simple(p, t->dim, shape[t->dim], t->unit);
    p->uneven = true;
    return TPS_OK;
}
