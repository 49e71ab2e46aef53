/* vLLM's cut of GPT-OSS's MXFP4 experts (lib/layout/quant_mxfp4.h). */
#include "quant_mxfp4.h"

#include <string.h>

#include "../base/index.h"

typedef struct mx_tensor {
    const char *suffix;
    int ndim, dim; /* the tensor's rank and the dimension vLLM cuts */
    uint64_t unit; /* elements along dim per 32-wide block of the intermediate dimension */
    int ldim;      /* the dimension the rule of its BF16 tensor cuts (the intermediate one) */
    bool logical;  /* blocks or scales: the BF16 tensor's rule decides (name without the suffix) */
} mx_tensor;

static const mx_tensor tensors[] = {
    {".mlp.experts.gate_up_proj_blocks", 4, 1, 2 * TPS_MXFP4_BLOCK, 2, true},
    {".mlp.experts.gate_up_proj_scales", 3, 1, 2 * TPS_MXFP4_BLOCK, 2, true},
    {".mlp.experts.gate_up_proj_bias", 2, 1, 2 * TPS_MXFP4_BLOCK, 1, false},
    {".mlp.experts.down_proj_blocks", 4, 2, 1, 1, true},
    {".mlp.experts.down_proj_scales", 3, 2, 1, 1, true},
};

static const mx_tensor *find(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) {
        size_t k = strlen(tensors[i].suffix);
        if (n >= k && strcmp(name + n - k, tensors[i].suffix) == 0) return &tensors[i];
    }
    return NULL;
}

bool tps_mxfp4_logical(const char *name, int ndim, const uint64_t *shape, char *lname, size_t lsize,
                       uint64_t *lshape)
{
    const mx_tensor *t = find(name);
    if (!t || !t->logical || ndim < 3) return false;
    size_t n = strlen(name) - 7; /* "_blocks" and "_scales" alike */
    if (n >= lsize) return false;
    memcpy(lname, name, n);
    lname[n] = '\0';
    /* [E, rows, G(, 16)] holds the BF16 [E, G*32, rows]: gate_up_proj [E, H, 2I], down_proj [E, I, H] */
    lshape[0] = shape[0];
    lshape[1] = shape[2] * TPS_MXFP4_BLOCK;
    lshape[2] = shape[1];
    return true;
}

tps_status tps_mxfp4_partition(const char *name, int ndim, const uint64_t *shape, tps_partition *p, tps_error *err)
{
    const mx_tensor *t = find(name);
    if (!t) return TPS_OK;
    char shp[128];
    tps_shape_str(shape, ndim, shp, sizeof shp);
    if (ndim != t->ndim || (ndim == 4 && shape[3] != TPS_MXFP4_BLOCK / 2))
        return tps_fail(err, TPS_EINVALID, "tensor %s: shape %s is not MXFP4's (%d dimensions%s)", name, shp, t->ndim,
                        t->ndim == 4 ? ", 16 bytes a block last" : "");
    if (p->replicated || p->nseg != 1 || p->dim != t->ldim || p->groups > 1 || p->pad)
        return tps_fail(err, TPS_EINVALID, "tensor %s: MXFP4 experts are cut along the intermediate dimension as one "
                        "segment (vLLM _load_weights_mxfp4); the layout's rule for %s cuts otherwise", name,
                        t->logical ? "its BF16 tensor" : "it");
    if (shape[t->dim] % t->unit != 0)
        return tps_fail(err, TPS_EINVALID, "tensor %s: dimension %d has %llu, not a multiple of %llu (whole %d-wide "
                        "blocks of the intermediate dimension)", name, t->dim, (unsigned long long)shape[t->dim],
                        (unsigned long long)t->unit, TPS_MXFP4_BLOCK);
    tps_partition_simple(p, t->dim, shape[t->dim], t->unit);
    p->uneven = true;
    return TPS_OK;
}
