/* tpshard reshard: turn an N-rank shard set into an M-rank one, from the shards alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "grid_args.h"
#include "lib/set.h"
#include "formats/megatron.h"
#include "formats/open.h"
#include "layout_args.h"
#include "lib/registry.h"
#include "megatron_hf.h"
#include "output_args.h"
#include "progress.h"

static struct {
    uint64_t tp;
    const char *out;
    const char *only;
    const char *name_template;
    const char *target;
    const char *target_version;
    uint64_t max_shard;
    bool force;
    uint64_t pp, vocab, ep;
    const char *pp_layers;
    const char *ckpt_format;
} o;

static const tps_opt reshard_opts[] = {
    {"tp", 0, TPS_OPT_UINT, &o.tp, "M", "the new tensor-parallel size"},
    {"output", 'o', TPS_OPT_STRING, &o.out, "DIR", "output directory (must not exist or be empty)"},
    {"max-shard-size", 0, TPS_OPT_SIZE, &o.max_shard, "SIZE", "cut each rank into parts of at most SIZE"},
    {"target", 0, TPS_OPT_STRING, &o.target, "NAME", "tpshard, vllm or sglang (default: DIR's)"},
    {"target-version", 0, TPS_OPT_STRING, &o.target_version, "V", "the engine release (default: DIR's)"},
    {"name-template", 0, TPS_OPT_STRING, &o.name_template, "T", "file names with {rank}, {tp}, {part} (and {pp})"},
    {"only-rank", 0, TPS_OPT_STRING, &o.only, "R[,R...]", "write only these ranks (full manifest)"},
    {"pp", 0, TPS_OPT_UINT, &o.pp, "P", "Megatron or vllm: the new pipeline size (1: none)"},
    {"pp-layers", 0, TPS_OPT_STRING, &o.pp_layers, "A,B,...", "Megatron or vllm: layers per stage"},
    {"ep", 0, TPS_OPT_UINT, &o.ep, "E", "vllm, MoE: experts whole per rank (E = --tp; 1: none)"},
    {"vocab-size", 0, TPS_OPT_UINT, &o.vocab, "V", "Megatron: the true vocabulary size"},
    {"ckpt-format", 0, TPS_OPT_STRING, &o.ckpt_format, "F", "Megatron: torch (default) or torch_dist"},
    {"force", 'f', TPS_OPT_FLAG, &o.force, NULL, "replace an earlier shard set (nothing else)"},
    TPS_COMMON_OPTS,
    TPS_OPTS_END,
};

/* The source set by the new manifest's numbering: laying a set out for another target
 * reorders its tensors (a fused tensor's members side by side). */
typedef struct reshard_source {
    tps_shardset *ss;
    size_t *src; /* per new manifest tensor, its index in the source set's */
} reshard_source;

static tps_status read_source(void *ctx, size_t i, uint64_t off, void *buf, size_t len, tps_error *err)
{
    const reshard_source *s = ctx;
    return tps_shardset_source_read(s->ss, s->src[i], off, buf, len, err);
}

static bool locate_source(void *ctx, size_t i, uint64_t off, int *fd, const char **path, uint64_t *file_off,
                          uint64_t *len)
{
    const reshard_source *s = ctx;
    return tps_shardset_source_locate(s->ss, s->src[i], off, fd, path, file_off, len);
}

static tps_status check_source(void *ctx, size_t i, uint32_t crc, tps_error *err)
{
    const reshard_source *s = ctx;
    return tps_shardset_source_check(s->ss, s->src[i], crc, err);
}

/* What a Megatron reshard prints once written. */
static void print_megatron(const char *dir, const tps_megatron_resharding *g)
{
    fprintf(stderr, "reshard: optimizer and RNG state are not written: load with --no-load-optim --no-load-rng "
                    "(or --finetune), or reshard the optimizer with Megatron's distributed-optimizer tools\n");
    const tps_manifest *sm = g->ss->m;
    if (g->o.dist)
        printf("resharded %s to a torch_dist checkpoint for tp %llu in %s (--ckpt-format torch_dist)\n", dir,
               (unsigned long long)o.tp, o.out);
    else if (g->src->dist)
        printf("resharded %s (torch_dist, saved at tp %u x pp %u) to tp %llu x pp %llu in %s (--ckpt-format torch)\n",
               dir, g->src->saved_tp, g->src->saved_pp, (unsigned long long)g->m->tp,
               (unsigned long long)g->r->mo->pp, o.out);
    else
        printf("resharded %s from tp %llu x pp %llu to tp %llu x pp %llu in %s\n", dir, (unsigned long long)sm->tp,
               (unsigned long long)(sm->files[sm->nfiles - 1].part + 1), (unsigned long long)g->m->tp,
               (unsigned long long)g->r->mo->pp, o.out);
}

/* A Megatron-LM checkpoint resharded to tp x pp (formats/megatron/megatron_target.h opens and
 * plans it), written through the common write step. */
static int reshard_megatron(const char *dir)
{
    tps_error err;
    tps_error_clear(&err);
    const tps_target_entry *e = tps_target_with(TPS_TARGET_CHECKPOINT); /* what reads and writes it */
    if (o.target && tps_target_find(o.target) != e)
        return tps_cli_usage("reshard", "a Megatron checkpoint reshards to a Megatron checkpoint (--target %s)",
                             e->name);
    if (o.only || o.name_template || o.max_shard)
        return tps_cli_usage("reshard", "--only-rank, --name-template and --max-shard-size do not apply to a Megatron "
                                        "checkpoint");
    if (tps_tp_check(o.tp, "--tp", &err)) return tps_cli_report("reshard", &err);
    tps_megatron_reshard_opts ro = {o.tp, o.pp, o.pp_layers, o.vocab, false};
    int rc = tps_cli_ckpt_format("reshard", e, o.ckpt_format, &ro.dist);
    if (rc) return rc;
    if (ro.dist && (o.pp > 1 || o.pp_layers))
        return tps_cli_usage("reshard", "--ckpt-format torch_dist holds global tensors that load at any pipeline size: "
                                        "no --pp or --pp-layers");
    tps_megatron_resharding *g = NULL;
    if (tps_megatron_resharding_open(dir, &ro, &g, &err)) {
        rc = tps_cli_report("reshard", &err);
        goto done;
    }
    if ((rc = tps_cli_retarget("reshard", dir, g->ss->m, g->plan_tp, true, &g->m)) != 0) goto done;
    if (tps_megatron_resharding_plan(g, &err)) {
        rc = tps_cli_report("reshard", &err);
        goto done;
    }
    const char *inputs[] = {dir, NULL};
    tps_progress_state ps;
    tps_write_opts wo = tps_cli_write_opts(o.out, o.force, inputs, NULL, NULL, 0, &ps);
    wo.cut.tensor_done = tps_megatron_reshard_check;
    wo.cut.tensor_done_arg = g->r;
    rc = tps_cli_write_with("reshard", tps_megatron_plan_write, &g->r->plan, &wo);
    if (rc == 0 && !tps_common.quiet) print_megatron(dir, g);
done:
    tps_megatron_resharding_free(g);
    return rc;
}

static int run_reshard(char **args, int nargs)
{
    (void)nargs;
    const char *dir = args[0];
    if (!o.out) return tps_cli_usage("reshard", "-o DIR is required");
    if (tps_megatron_is_checkpoint(dir)) return reshard_megatron(dir);
    if (o.vocab || o.ckpt_format)
        return tps_cli_usage("reshard", "--vocab-size and --ckpt-format apply to a Megatron checkpoint");
    tps_error err;
    tps_error_clear(&err);
    if (tps_tp_check(o.tp, "--tp", &err)) return tps_cli_report("reshard", &err);
    if (o.ep > 1 && (o.pp > 1 || o.pp_layers))
        return tps_cli_usage("reshard", "--ep with --pp: expert parallelism on a pipeline grid is not written yet");
    int rc = 0;
    tps_shardset *ss = NULL;
    tps_manifest *m = NULL;
    reshard_source source = {NULL, NULL};
    if (tps_shardset_open(dir, &ss, &err)) {
        rc = tps_cli_report("reshard", &err);
        goto done;
    }
    /* a placement that goes (--ep 1, or a target without one) does not have to fit the new tp */
    bool keep = o.ep != 1 && (!o.target || tps_target_can(o.target, TPS_TARGET_EP));
    if ((rc = tps_cli_retarget("reshard", dir, ss->m, o.tp, keep, &m)) != 0) goto done;
    /* The set's own target unless --target names another; the engine's padding is redone at M. */
    const char *target = o.target ? o.target : m->target;
    if (o.target_version && !target) {
        rc = tps_cli_usage_version("reshard");
        goto done;
    }
    if (target && (rc = tps_cli_apply_target("reshard", target, o.target_version, m)) != 0) goto done;
    if ((rc = tps_cli_apply_grid("reshard", m, o.pp, o.pp_layers, ss->m)) != 0) goto done;
    if ((rc = tps_cli_apply_ep("reshard", m, o.ep, ss->m)) != 0) goto done;
    ss->compare_replicas = true;
    if (!(source.src = calloc(m->ntensors + 1, sizeof *source.src))) {
        tps_fail_oom(&err, "resharding");
        rc = tps_cli_report("reshard", &err);
        goto done;
    }
    source.ss = ss;
    for (size_t i = 0; i < m->ntensors; i++) /* every name is the source's: retarget copied them */
        source.src[i] = (size_t)(tps_manifest_find(ss->m, m->tensors[i].name) - ss->m->tensors);
    const char *inputs[] = {dir, NULL};
    tps_progress_state ps;
    tps_write_opts wo = tps_cli_write_opts(o.out, o.force, inputs, o.only, o.name_template, o.max_shard, &ps);
    wo.cut.tensor_done = check_source;
    wo.cut.tensor_done_arg = &source;
    char *side = NULL;
    if (m->target) tps_cli_target_write_opts(&wo, m->target, dir, o.max_shard, &side);
    wo.cut.locate = locate_source;
    rc = tps_cli_write("reshard", m, read_source, &source, &wo);
    free(side);
    if (rc == 0 && !tps_common.quiet && tps_grid_pp(ss->m) * tps_grid_pp(m) > 1)
        printf("resharded %s from tp %llu x pp %llu to tp %llu x pp %llu in %s\n", dir, (unsigned long long)ss->m->tp,
               (unsigned long long)tps_grid_pp(ss->m), (unsigned long long)m->tp, (unsigned long long)tps_grid_pp(m),
               o.out);
    else if (rc == 0 && !tps_common.quiet)
        printf("resharded %s from tp %llu to tp %llu in %s\n", dir, (unsigned long long)ss->m->tp,
               (unsigned long long)m->tp, o.out);
done:
    free(source.src);
    tps_manifest_free(m);
    tps_shardset_free(ss);
    return rc;
}

const tps_cmd tps_cmd_reshard = {
    .name = "reshard",
    .summary = "turn an N-rank shard set into M ranks, from the shards alone",
    .usage = "reshard DIR --tp M -o DIR2 [--max-shard-size SIZE] [--name-template T]",
    .details = "Any M for which every tensor's partition is valid works (8->4, 4->8, 2->6 where heads\n"
               "allow).  KV replication and vocabulary padding are redone for M.  A set written\n"
               "with --target keeps its target (fused names, the engine's padding, config.json and\n"
               "tokenizer copied) unless --target names another (tpshard: the source's names),\n"
               "and its engine release unless --target-version names another.\n"
               "A --target vllm set keeps its pipeline stages unless --pp P / --pp-layers A,B,..\n"
               "give new ones (--pp 1: a TP-only set); any grid reshards to any other.\n"
               "Its expert parallelism (experts whole per rank, split --ep) is kept at M unless\n"
               "--ep gives another: --ep M places a MoE set's experts whole, --ep 1 cuts them by TP.\n"
               "A Megatron-LM checkpoint (legacy or torch_dist) is written as a legacy one at M x P\n"
               "(--pp, --pp-layers), or with --ckpt-format torch_dist as Megatron-Core's distributed\n"
               "checkpoint for M (global tensors, loadable at any PP; no --pp).\n",
    .opts = reshard_opts,
    .min_args = 1,
    .max_args = 1,
    .run = run_reshard,
};
