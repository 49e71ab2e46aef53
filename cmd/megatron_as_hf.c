/* The note on what a Megatron source leaves out (cmd/megatron_as_hf.h); the opening is
 * formats/megatron/megatron_target.h's. */
#include "megatron_as_hf.h"

#include <stdio.h>

#include "cli.h"

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
