#include "marlin_note.h"

#include <stdio.h>
#include <string.h>

void tps_quant_marlin_note(const tps_quant *q, const tps_manifest *m, tps_marlin_note *out)
{
    memset(out, 0, sizeof *out);
    if (!q || m->tp < 2) return;
    for (size_t i = 0; i < m->ntensors; i++) {
        const tps_manifest_tensor *t = &m->tensors[i];
        const char *dot = strrchr(t->name, '.');
        char module[1024];
        size_t n = dot ? (size_t)(dot - t->name) : 0, mlen;
        if (t->part->replicated || !n || n >= sizeof module) continue;
        memcpy(module, t->name, n);
        module[n] = '\0';
        const tps_quant_scheme *s = tps_quant_module(q, module);
        int c = tps_quant_companion_of(s, t->name, &mlen);
        if (c < 0 || !s->int_bits || !s->comp[c].primary) continue;
        int d = t->part->dim, wd = d >= 0 && d < 2 ? s->comp[c].wdim[d] : -1;
        if (wd < 0) continue;
        uint64_t min = wd == 0 ? TPS_MARLIN_MIN_N : TPS_MARLIN_MIN_K;
        for (uint64_t r = 0; r < m->tp; r++) {
            uint64_t shape[TPS_MAX_DIMS];
            tps_partition_rank_shape(t->part, t->ndim, t->shape, m->tp, r, shape);
            uint64_t local = shape[d] * s->comp[c].ratio[d];
            if (local % min == 0) continue;
            if (!out->count++) {
                snprintf(out->example, sizeof out->example, "%s", t->name);
                out->wdim = wd;
                out->local = local;
            }
            break;
        }
    }
}
