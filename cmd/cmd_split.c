/* tpshard split: cut a checkpoint into per-rank shard files plus tpshard.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "grid_args.h"
#include "commands.h"
#include "layout_args.h"
#include "lib/engine.h"
#include "lib/registry.h"
#include "megatron_as_hf.h"
#include "megatron_hf.h"
#include "output_args.h"
#include "progress.h"

static struct {
    tps_layout_args la;
    const char *out;
    const char *only;
    const char *name_template;
    const char *dtype;
    const char *target;
    const char *target_version;
    uint64_t max_shard;
    bool force, dry_run;
    uint64_t pp, ep;
    const char *pp_layers;
    const char *ckpt_format;
} o;

static const tps_opt split_opts[] = {
    {"tp", 0, TPS_OPT_UINT, &o.la.tp, "N", "tensor-parallel size (number of ranks)"},
    {"layout", 0, TPS_OPT_STRING, &o.la.layout, "FILE", "YAML layout file"},
    {"preset", 0, TPS_OPT_STRING, &o.la.preset, "NAME", "built-in layout (default: from config.json)"},
    {"config", 0, TPS_OPT_STRING, &o.la.config, "FILE", "config.json: sizes, and the preset (default: beside SRC)"},
    {"output", 'o', TPS_OPT_STRING, &o.out, "DIR", "output directory (absent or empty)"},
    {"dtype", 0, TPS_OPT_STRING, &o.dtype, "bf16|f16|f32", "convert floating tensors (nearest even)"},
    {"max-shard-size", 0, TPS_OPT_SIZE, &o.max_shard, "SIZE", "cut each rank into parts of at most SIZE"},
    {"target", 0, TPS_OPT_STRING, &o.target, "NAME", "tpshard (default), vllm, sglang or megatron"},
    {"target-version", 0, TPS_OPT_STRING, &o.target_version, "V", "the engine release (default: current)"},
    {"pp", 0, TPS_OPT_UINT, &o.pp, "P", "--target megatron or vllm: pipeline stages (default 1)"},
    {"pp-layers", 0, TPS_OPT_STRING, &o.pp_layers, "A,B,..", "--target megatron or vllm: layers per stage"},
    {"ep", 0, TPS_OPT_UINT, &o.ep, "E", "--target vllm, MoE: experts whole per rank (E = --tp)"},
    {"ckpt-format", 0, TPS_OPT_STRING, &o.ckpt_format, "F", "--target megatron: torch (default) or torch_dist"},
    {"name-template", 0, TPS_OPT_STRING, &o.name_template, "T", "file names with {rank}, {tp}, {part} (and {pp})"},
    {"only-rank", 0, TPS_OPT_STRING, &o.only, "R[,R...]", "write only these ranks (full manifest)"},
    {"force", 'f', TPS_OPT_FLAG, &o.force, NULL, "replace an earlier shard set (nothing else)"},
    {"dry-run", 'n', TPS_OPT_FLAG, &o.dry_run, NULL, "plan and check everything, write nothing"},
    TPS_COMMON_OPTS,
    TPS_OPTS_END,
};

/* The source by the manifest's numbering: the plan leaves out what the layout skips, so
 * manifest tensor i need not be source tensor i. */
typedef struct split_source {
    const tps_index *ix;
    const tps_tensor **tensor; /* per manifest tensor */
} split_source;

static tps_status read_source(void *ctx, size_t i, uint64_t off, void *buf, size_t len, tps_error *err)
{
    const split_source *s = ctx;
    return tps_tensor_read(s->ix, s->tensor[i], off, buf, len, err);
}

static bool locate_source(void *ctx, size_t i, uint64_t off, int *fd, const char **path, uint64_t *file_off,
                          uint64_t *len)
{
    const split_source *s = ctx;
    return tps_tensor_locate(s->ix, s->tensor[i], off, fd, path, file_off, len);
}

/* A target with checkpoint files of its own (lib/registry/registry.h: megatron) writes them
 * its own way: its options checked, then cmd/megatron_hf.c's split. */
static int split_checkpoint(const char *src, const tps_target_entry *e)
{
    if (o.dtype || o.only || o.name_template || o.max_shard || o.target_version)
        return tps_cli_usage("split", "--target %s writes Megatron's own files: no --dtype, --only-rank, "
                                      "--name-template, --max-shard-size or --target-version", e->name);
    if (o.la.tp == 0) return tps_cli_usage("split", "--tp N is required (N >= 1)");
    tps_cli_megatron_split_opts mo = {o.out, o.pp, o.pp_layers, o.force, o.dry_run, false};
    int rc = tps_cli_ckpt_format("split", e, o.ckpt_format, &mo.dist);
    if (rc) return rc;
    if (mo.dist && (o.pp > 1 || o.pp_layers))
        return tps_cli_usage("split", "--ckpt-format torch_dist holds global tensors that load at any pipeline "
                                      "size: no --pp or --pp-layers");
    return tps_cli_split_megatron(src, &o.la, &mo);
}

/* The options every target checks; -1 when they hold. */
static int check_grid_opts(const tps_target_entry *e)
{
    if (!o.out && !o.dry_run) return tps_cli_usage("split", "-o DIR is required (or --dry-run)");
    if (o.ckpt_format && !(e && e->formats)) {
        char names[64];
        return tps_cli_usage("split", "--ckpt-format: its formats go with --target %s",
                             tps_target_names(TPS_TARGET_CHECKPOINT, names, sizeof names));
    }
    if ((o.pp || o.pp_layers) && !(e && (e->caps & TPS_TARGET_PP)))
        return tps_cli_usage("split", "--pp and --pp-layers go with --target megatron or vllm");
    if (o.ep > 1 && !(e && (e->caps & TPS_TARGET_EP)))
        return tps_cli_usage("split", "--ep lays out expert parallelism for --target vllm (enable_expert_parallel)");
    if (o.ep > 1 && (o.pp > 1 || o.pp_layers))
        return tps_cli_usage("split", "--ep with --pp: expert parallelism on a pipeline grid is not written yet");
    return -1;
}

static int run_split(char **args, int nargs)
{
    (void)nargs;
    const char *src = args[0];
    /* an unknown name goes on to the planning, whose target step names the known ones */
    const tps_target_entry *e = tps_target_find(o.target);
    int checked = check_grid_opts(e);
    if (checked >= 0) return checked;
    if (e && (e->caps & TPS_TARGET_CHECKPOINT)) return split_checkpoint(src, e);
    tps_dtype to = TPS_DT_COUNT;
    if (o.dtype && !tps_convert_parse_dtype(o.dtype, &to))
        return tps_cli_usage("split", "--dtype expects bf16, f16 or f32, not '%s'", o.dtype);
    tps_index *ix;
    tps_layout *l;
    tps_manifest *m;
    tps_convert *cv = NULL;
    tps_error err;
    tps_error_clear(&err);
    split_source source = {NULL, NULL};
    int rc = tps_cli_plan("split", src, &o.la, &ix, &l, &m);
    if (rc) goto done;
    source.ix = ix;
    if (o.target_version && !o.target) {
        rc = tps_cli_usage_version("split");
        goto done;
    }
    if (o.target && (rc = tps_cli_apply_target("split", o.target, o.target_version, m)) != 0) goto done;
    if ((o.pp || o.pp_layers) && (rc = tps_cli_apply_grid("split", m, o.pp, o.pp_layers, NULL)) != 0) goto done;
    if (o.ep && (rc = tps_cli_apply_ep("split", m, o.ep, NULL)) != 0) goto done;
    if (!(source.tensor = calloc(m->ntensors + 1, sizeof *source.tensor))) {
        tps_fail_oom(&err, "planning");
        rc = tps_cli_report("split", &err);
        goto done;
    }
    for (size_t i = 0; i < m->ntensors; i++) source.tensor[i] = tps_index_find(ix, m->tensors[i].name);
    /* After planning, so the partitions are checked on the source's shapes (a cast keeps them). */
    if (o.dtype && tps_convert_begin(m, to, read_source, &source, &cv, &err)) {
        rc = tps_cli_report("split", &err);
        goto done;
    }
    const char *inputs[] = {src, NULL};
    tps_progress_state ps;
    tps_write_opts wo = tps_cli_write_opts(o.out, o.force, inputs, o.only, o.name_template, o.max_shard, &ps);
    wo.dry_run = o.dry_run;
    char *side = NULL;
    if (m->target) tps_cli_target_write_opts(&wo, m->target, src, o.max_shard, &side);
    /* A Megatron source's directory holds its shards, not a model's side files: the engine
     * gets the config.json made from its args instead. */
    char *mg_config = (char *)tps_megatron_as_hf_config_of(ix);
    if (m->target && mg_config) {
        wo.side_files = NULL;
        wo.before_publish = tps_megatron_config_into;
        wo.before_publish_arg = mg_config;
    }
    if (!cv) wo.cut.locate = locate_source;
    rc = cv ? tps_cli_write("split", m, tps_convert_read, cv, &wo)
            : tps_cli_write("split", m, read_source, &source, &wo);
    free(side);
    if (rc) goto done;
    if (o.dry_run) {
        if (!tps_common.quiet) tps_cli_print_plan(m, tps_layout_quant(l), false);
    } else if (!tps_common.quiet) {
        char stages[64] = "";
        if (m->pp > 1) snprintf(stages, sizeof stages, " x %llu pipeline stages", (unsigned long long)m->pp);
        if (o.ep > 1) snprintf(stages, sizeof stages, ", experts whole on each (ep %llu)", (unsigned long long)o.ep);
        printf("split %s into %llu rank%s%s in %s (%zu tensors, %zu files)\n", src, (unsigned long long)m->tp,
               m->tp == 1 ? "" : "s", stages, o.out, m->ntensors, m->nfiles);
    }
done:
    free(source.tensor);
    tps_convert_free(cv);
    tps_manifest_free(m);
    tps_layout_free(l);
    tps_index_free(ix);
    return rc;
}

const tps_cmd tps_cmd_split = {
    .name = "split",
    .summary = "cut a checkpoint into per-rank shard files and a manifest",
    .usage = "split SRC --tp N [--preset NAME | --layout FILE] [--config FILE] -o DIR",
    .details = "Writes one safetensors file per rank and tpshard.json into DIR, which appears only\n"
               "when complete.  The source is only read.  Every tensor must match a layout rule.\n"
               "Without --preset or --layout the preset is chosen from config.json's\n"
               "architectures (then model_type), and stderr says which.\n"
               "File names: default " TPS_DEFAULT_NAME_TEMPLATE ", or with\n"
               "--max-shard-size " TPS_DEFAULT_PART_TEMPLATE " plus a per-rank index\n"
               TPS_RANK_INDEX_TEMPLATE ".\n"
               "--target vllm (or sglang) writes what the engine's load_format=sharded_state\n"
               "loads as it is: its parameter names (fused qkv_proj, gate_up_proj, MoE w13/w2),\n"
               "its vocabulary padding (a multiple of 64, then divided by tp), tied weights once,\n"
               "files " TPS_DEFAULT_PART_TEMPLATE " in parts of at most\n"
               "--max-shard-size (default 5GiB), and the source's config.json and tokenizer files.\n"
               "--target vllm --pp P (or --pp-layers A,B,..): a TP x PP grid vLLM loads with\n"
               "pipeline_parallel_size P: files model-pp-{pp}-tp-{rank}-part-{part}.safetensors,\n"
               "each stage holding its layers (vLLM's get_pp_indices split unless --pp-layers, which\n"
               "is VLLM_PP_LAYER_PARTITION's), the embedding on the first stage, the final norm and\n"
               "lm_head on the last.\n"
               "--target vllm --ep E (E = --tp, a MoE model): expert parallelism as vLLM's\n"
               "--enable-expert-parallel loads it: each rank holds experts [r*E'/E, (r+1)*E'/E) whole\n"
               "(E' experts a layer), attention and dense layers cut by TP as without --ep.\n"
               "--target-version V: the engine release the set is for, where its state dict\n"
               "changed (default current: vLLM 0.14 and later hold 0-d F32 attention scale\n"
               "buffers, attn._k_scale etc.; --target-version 0.13 writes none).\n"
               "--target megatron writes a Megatron-LM checkpoint (--ckpt-format torch) of a Llama,\n"
               "Mistral, Qwen2 or Mixtral model at --tp N and --pp P (or --pp-layers A,B,..):\n"
               "latest_checkpointed_iteration.txt (1), iter_0000001/mp_rank_XX[_YYY]/\n"
               "model_optim_rng.pt with Megatron-Core names (q/k/v grouped per query group in\n"
               "linear_qkv, [gate; up] in linear_fc1, the vocabulary zero-padded to a multiple of\n"
               "128*N) and args from config.json; no optimizer or RNG state.\n"
               "--ckpt-format torch_dist writes Megatron-Core's distributed checkpoint instead:\n"
               "iter_0000001/ with metadata.json, common.pt, .metadata and __0_0.distcp (global\n"
               "tensors, decoder layers stacked, one chunk per layer), loadable at any PP\n"
               "(no --pp; MoE experts are refused).\n"
               "SRC may be a Megatron-LM checkpoint (legacy mp_rank_* or Megatron-Core torch_dist,\n"
               "the tracker's directory or iter_NNNNNNN/): it is cut as the Hugging Face model its\n"
               "args describe (their preset, config.json made from them and written with --target);\n"
               "optimizer and RNG state are left out, said in one note line.\n",
    .opts = split_opts,
    .min_args = 1,
    .max_args = 1,
    .run = run_split,
};
