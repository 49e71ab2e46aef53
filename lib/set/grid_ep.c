/* Expert parallelism as data of the manifest (lib/set/grid_ep.h). */
#include "grid_ep.h"

#include <string.h>

uint64_t tps_grid_ep_experts(const tps_manifest *m)
{
    for (size_t i = 0; i < m->ntensors; i++)
        if (!m->tensors[i].part->replicated && m->tensors[i].part->owners) return m->tensors[i].part->owners;
    return 0;
}

uint64_t tps_grid_ep(const tps_manifest *m) { return tps_grid_ep_experts(m) ? m->tp : 1; }

/* Every tensor back on its TP cut, which must fit m->tp. */
static tps_status drop(tps_manifest *m, tps_error *err)
{
    for (size_t i = 0; i < m->ntensors; i++) {
        tps_manifest_tensor *t = &m->tensors[i];
        if (t->part->replicated || !t->part->owners) continue;
        tps_partition p = *t->part;
        p.owners = p.owner = 0;
        tps_status st = tps_partition_check(&p, t->name, t->dtype, t->ndim, t->shape, m->tp, err);
        if (!st) st = tps_manifest_set_part(m, t, &p, err);
        if (st) return st;
    }
    return TPS_OK;
}

/* The end of the run of consecutive tensors fused into i's target tensor. */
static size_t run_end(const tps_manifest *m, size_t i)
{
    size_t j = i + 1;
    while (j < m->ntensors && m->tensors[j].target_name && strcmp(m->tensors[j].target_name, m->tensors[i].target_name) == 0)
        j++;
    return j;
}

tps_status tps_grid_ep_apply(tps_manifest *m, uint64_t ep, tps_error *err)
{
    if (ep <= 1) return drop(m, err);
    if (ep != m->tp)
        return tps_fail(err, TPS_EARG,
                        "--ep %llu with --tp %llu: vLLM's expert parallelism spans the tensor-parallel ranks "
                        "(ep_size = tp_size; with data parallelism it is tp x dp, and sharded_state file names carry "
                        "no dp rank), so a set's --ep equals its --tp",
                        (unsigned long long)ep, (unsigned long long)m->tp);
    if (m->pp > 1)
        return tps_fail(err, TPS_EARG, "--ep with --pp: expert parallelism on a pipeline grid is not written yet");
    size_t runs = 0;
    for (size_t i = 0; i < m->ntensors;) {
        const tps_manifest_tensor *h = &m->tensors[i];
        if (!h->target_name || !h->target_stack) {
            i++;
            continue;
        }
        size_t j = run_end(m, i);
        uint64_t S = h->target_stack;
        if ((j - i) % S != 0)
            return tps_fail(err, TPS_EINVALID, "target tensor '%s': %zu members do not make %llu experts",
                            h->target_name, j - i, (unsigned long long)S);
        if (S % ep != 0)
            return tps_fail(err, TPS_EINVALID,
                            "--ep %llu: '%s' stacks %llu experts ('%s' ...), which %llu ranks do not divide (vLLM's "
                            "expert parallelism gives every rank E/ep whole experts)",
                            (unsigned long long)ep, h->target_name, (unsigned long long)S, h->name,
                            (unsigned long long)ep);
        size_t per = (j - i) / S;
        for (size_t k = i; k < j; k++) {
            tps_manifest_tensor *t = &m->tensors[k];
            if (t->part->replicated)
                return tps_fail(err, TPS_EINVALID,
                                "--ep: expert tensor '%s' is replicated by its rule; a whole expert on one rank "
                                "needs the rule's cut",
                                t->name);
            tps_partition p = *t->part;
            p.owners = S;
            p.owner = (k - i) / per;
            tps_status st = tps_partition_check(&p, t->name, t->dtype, t->ndim, t->shape, m->tp, err);
            if (!st) st = tps_manifest_set_part(m, t, &p, err);
            if (st) return st;
        }
        runs++;
        i = j;
    }
    if (!runs)
        return tps_fail(err, TPS_EARG,
                        "--ep: %s has no routed experts the target stacks one tensor per expert, so no "
                        "expert-parallel grid; --ep is written for the MoE families whose checkpoints hold one "
                        "tensor per expert (Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3, GLM-4.5), not for "
                        "dense models or fused 3-D experts (GPT-OSS, Llama 4)",
                        m->layout_name ? m->layout_name : "its layout");
    return TPS_OK;
}
