/* A quantized linear's companions (lib/quant/scheme.h): building a scheme, finding a tensor's
 * companion, and a companion's partition from its weight's.  The parameter classes each
 * companion imitates are vLLM's (their parameter.py: Block/Channel/PerTensor scale
 * parameters, PackedvLLMParameter, GroupQuantScaleParameter). */
#include "scheme.h"

#include <stdio.h>
#include <string.h>

#include "../base/checked.h"
#include "../base/index.h"

void tps_quant_add_companion(tps_quant_scheme *s, const char *suffix, int ndim, int w0, uint64_t r0, int w1,
                             uint64_t r1, bool primary, bool replicate_in)
{
    tps_quant_companion *c = &s->comp[s->ncomp++];
    memset(c, 0, sizeof *c);
    snprintf(c->suffix, sizeof c->suffix, "%s", suffix);
    c->ndim = ndim;
    c->wdim[0] = w0;
    c->wdim[1] = w1;
    c->ratio[0] = r0;
    c->ratio[1] = r1;
    c->primary = primary;
    c->replicate_in = replicate_in;
}

int tps_quant_companion_of(const tps_quant_scheme *s, const char *name, size_t *module_len)
{
    const char *dot = strrchr(name, '.');
    if (!s || !dot || dot == name) return -1;
    for (int c = 0; c < s->ncomp; c++)
        if (strcmp(dot + 1, s->comp[c].suffix) == 0) {
            *module_len = (size_t)(dot - name);
            return c;
        }
    return -1;
}

static uint64_t cdiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

tps_status tps_quant_logical_shape(const tps_quant_scheme *s, int comp, const char *name, int ndim,
                                   const uint64_t *shape, uint64_t *wshape, tps_error *err)
{
    const tps_quant_companion *c = &s->comp[comp];
    if (ndim != 2)
        return tps_fail(err, TPS_EINVALID, "tensor %s: a quantized linear's %s must be 2-D (%s)", name, c->suffix,
                        s->name);
    for (int d = 0; d < 2; d++)
        if (c->wdim[d] < 0 || !tps_mul_u64(shape[d], c->ratio[d], &wshape[c->wdim[d]]))
            return tps_fail(err, TPS_EINVALID, "tensor %s: shape too large", name);
    return TPS_OK;
}

tps_status tps_quant_derive(const tps_quant_scheme *s, int comp, const tps_partition *wpart, const uint64_t *wshape,
                            const char *name, int ndim, const uint64_t *shape, tps_partition *out, tps_error *err)
{
    const tps_quant_companion *c = &s->comp[comp];
    memset(out, 0, sizeof *out);
    /* The shape the companion must have for W, as the engine allocates it (cdiv). */
    char got[128], want[128];
    uint64_t expect[2] = {1, 1};
    bool ok;
    if (c->ndim == 0) {
        uint64_t n = 1;
        for (int d = 0; d < ndim; d++) n *= shape[d];
        ok = n == 1;
        snprintf(want, sizeof want, "one element ([] or [1])");
    } else {
        for (int d = 0; d < c->ndim; d++) expect[d] = c->wdim[d] < 0 ? 1 : cdiv(wshape[c->wdim[d]], c->ratio[d]);
        ok = ndim == c->ndim && shape[0] == expect[0] && (ndim < 2 || shape[1] == expect[1]);
        tps_shape_str(expect, c->ndim, want, sizeof want);
    }
    if (!ok) {
        tps_shape_str(shape, ndim, got, sizeof got);
        char ws[128];
        tps_shape_str(wshape, 2, ws, sizeof ws);
        return tps_fail(err, TPS_EINVALID, "tensor %s: shape %s, but %s of a weight %s has %s", name, got, s->name, ws,
                        want);
    }
    if (wpart->replicated || c->ndim == 0) {
        out->replicated = true;
        return TPS_OK;
    }
    int d = wpart->dim, cd = -1;
    for (int k = 0; k < c->ndim; k++)
        if (c->wdim[k] == d) cd = k;
    if (cd < 0 || (c->replicate_in && d == 1)) {
        out->replicated = true;
        return TPS_OK;
    }
    uint64_t k = c->ratio[cd];
    *out = *wpart;
    out->dim = cd;
    out->block = s->align[d] > k && s->align[d] % k == 0 ? s->align[d] / k : 0;
    if (k == 1) return TPS_OK;
    if (wpart->pad)
        return tps_fail(err, TPS_EINVALID, "tensor %s: its weight's dimension %d is padded, which %s cannot follow", name,
                        d, s->name);
    bool one = wpart->nseg == 1 && wpart->groups <= 1;
    for (int i = 0; i < wpart->nseg; i++) {
        tps_segment *g = &out->seg[i];
        if (!one && g->length % k != 0)
            return tps_fail(err, TPS_EINVALID, "tensor %s: segment %s of its weight has %llu elements along dimension "
                            "%d, not a whole number of %s blocks of %llu", name, g->name, (unsigned long long)g->length,
                            d, s->name, (unsigned long long)k);
        g->length = one ? cdiv(g->length, k) : g->length / k;
        /* A unit smaller than a block (a 64-row head under 128-row blocks) only fits where
         * the weight's pieces are whole blocks, which the weight's block says. */
        g->unit = g->unit % k == 0 ? g->unit / k : 1;
    }
    return TPS_OK;
}
