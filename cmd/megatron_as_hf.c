/* Opening a Megatron checkpoint as the Hugging Face checkpoint it holds: its reader
 * (formats/megatron/megatron_set.h) opens the set, lib/megatron/megatron_as_hf.h builds the view. */
#include "megatron_as_hf.h"

#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

static void source_free(struct tps_megatron_source *ms) { tps_megatron_source_free(ms); }

tps_status tps_megatron_as_hf_open(const char *src, uint64_t vocab, tps_megatron_as_hf **out, tps_error *err)
{
    *out = NULL;
    tps_megatron_as_hf *a = calloc(1, sizeof *a);
    if (!a) return tps_fail_oom(err, "opening a Megatron checkpoint");
    a->ms_free = source_free;
    tps_status st = tps_megatron_shardset_open(src, vocab, &a->ss, &a->ms, err);
    if (st == TPS_OK) st = tps_megatron_as_hf_build(a, src, a->ms->args_json, err);
    if (st) {
        tps_megatron_as_hf_free(a);
        return st;
    }
    *out = a;
    return TPS_OK;
}

void tps_megatron_as_hf_note(const char *cmd, const tps_megatron_as_hf *a)
{
    if (tps_common.quiet) return;
    const tps_megatron_source *ms = a->ms;
    if (ms->dist)
        fprintf(stderr,
                "tpshard %s: note: Megatron-Core torch_dist checkpoint saved at tp %u x pp %u, iteration %lld: model "
                "tensors read; %zu optimizer tensor%s and %zu other non-tensor entr%s (RNG, ...) left out\n",
                cmd, ms->saved_tp, ms->saved_pp, (long long)ms->iteration, ms->optimizer_tensors,
                ms->optimizer_tensors == 1 ? "" : "s", ms->other_entries, ms->other_entries == 1 ? "y" : "ies");
    else
        fprintf(stderr, "tpshard %s: note: Megatron-LM checkpoint at tp %llu, iteration %lld: model tensors read; "
                        "optimizer and RNG state left out\n",
                cmd, (unsigned long long)a->ss->m->tp, (long long)ms->iteration);
}
