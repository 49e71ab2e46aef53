#include "unsharded.h"

#include <stdlib.h>
#include <string.h>

tps_status tps_manifest_unsharded(const tps_manifest *src, tps_manifest **out, tps_error *err)
{
    *out = NULL;
    tps_manifest *m = calloc(1, sizeof *m);
    if (!m || !(m->tensors = calloc(src->ntensors + 1, sizeof *m->tensors))) {
        free(m);
        return tps_fail_oom(err, "planning the merge");
    }
    m->version = TPS_MANIFEST_VERSION;
    m->tp = 1;
    for (size_t i = 0; i < src->ntensors; i++) {
        const tps_manifest_tensor *s = &src->tensors[i];
        tps_manifest_tensor *t = &m->tensors[i];
        *t = *s;
        t->name = strdup(s->name);
        t->rule = NULL;
        t->target_name = NULL; /* a checkpoint: the source's names, fusions undone */
        t->target_stack = 0;
        t->target_blocks = 0;
        t->target_transpose = false;
        t->target_flatten = false;
        t->target_rank0 = false;
        t->target_rope_halves = false;
        m->ntensors = i + 1;
        if (!t->name) {
            tps_manifest_free(m);
            return tps_fail_oom(err, "planning the merge");
        }
        tps_status st = tps_manifest_set_part(m, t, &(tps_partition){.replicated = true}, err);
        if (st) {
            tps_manifest_free(m);
            return st;
        }
    }
    *out = m;
    return TPS_OK;
}
