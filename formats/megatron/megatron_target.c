/* The registry's megatron and hf entries where a format is needed
 * (formats/megatron/megatron_target.h). */
#include "megatron_target.h"

#include <stdlib.h>

#include "../dcp/dcp_write.h"
#include "../torch/torch_write.h"

const tps_megatron_sinks tps_megatron_format_sinks = {&tps_torch_sink, &tps_dcp_sink, tps_torch_write_value};

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

tps_status tps_megatron_resharding_open(const char *dir, const tps_megatron_reshard_opts *o,
                                        tps_megatron_resharding **out, tps_error *err)
{
    tps_megatron_resharding *g = *out = calloc(1, sizeof *g);
    if (!g) return tps_fail_oom(err, "resharding a Megatron checkpoint");
    g->o = *o;
    g->plan_tp = o->dist ? 1 : o->tp; /* torch_dist's tensors are global: planned at tp 1, padded and named for tp */
    tps_status st = tps_megatron_shardset_open(dir, o->vocab, &g->ss, &g->src, err);
    if (st != TPS_OK) return st;
    const tps_megatron_source *s = g->src;
    if (o->dist && (st = tps_megatron_dist_supported(dir, &s->model, err)) != TPS_OK) return st;
    g->rs = (tps_megatron_reshard_src){&s->model,       s->vocab_known, s->layer_first, s->args_json,
                                       s->checkpoint_version_json, s->iteration, s->release, s->extra_state,
                                       s->n_extra_state};
    /* the vocabulary rows at the new tp while the set is retargeted, then restored for reading */
    return tps_megatron_reshard_repad(g->ss->m, &g->rs, o->tp, dir, &g->saved, err);
}

static void restore(tps_megatron_resharding *g)
{
    if (g->saved) tps_megatron_reshard_restore(g->ss->m, g->saved);
    g->saved = NULL;
}

tps_status tps_megatron_resharding_plan(tps_megatron_resharding *g, tps_error *err)
{
    restore(g);
    tps_megatron_out_opts oo;
    tps_megatron_reshard_out_opts(g->ss->m, &g->rs, g->o.tp, g->o.pp, g->o.pp_layers, g->o.dist, g->split,
                                  sizeof g->split, &oo);
    return tps_megatron_reshard_plan(g->ss, g->m, &oo, g->o.dist, &tps_megatron_format_sinks, &g->r, err);
}

void tps_megatron_resharding_free(tps_megatron_resharding *g)
{
    if (!g) return;
    restore(g);
    tps_megatron_reshard_free(g->r);
    tps_manifest_free(g->m);
    tps_megatron_source_free(g->src);
    tps_shardset_free(g->ss);
    free(g);
}
