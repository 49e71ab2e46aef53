/* split --target megatron and merge --target hf: a Hugging Face checkpoint to a Megatron-LM
 * one and back (lib/megatron/megatron_hf.h maps the tensors and the config, lib/megatron/megatron_out.h plans
 * and writes the Megatron files). */
#include "megatron_hf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "formats/megatron/megatron_set.h"
#include "formats/dcp/dcp_write.h"
#include "formats/safetensors/safetensors.h"
#include "formats/torch/torch_write.h"
#include "layout_args.h"
#include "megatron_as_hf.h"
#include "lib/base/buf.h"
#include "lib/engine/publish.h"
#include "lib/megatron/megatron_args.h"
#include "lib/megatron/megatron_dist_out.h"
#include "lib/megatron/megatron_hf.h"
#include "lib/megatron/megatron_out.h"
#include "lib/set/plan.h"
#include "lib/set/unsharded.h"
#include "output_args.h"
#include "progress.h"

/* Megatron's tensor i (after planning) is the view's tensor pre[src[i]]. */
typedef struct mg_source {
    const tps_index *view;
    const tps_tensor **pre;
    const size_t *src;
} mg_source;

static tps_status mg_read(void *ctx, size_t i, uint64_t off, void *buf, size_t len, tps_error *err)
{
    const mg_source *s = ctx;
    return tps_tensor_read(s->view, s->pre[s->src[i]], off, buf, len, err);
}

/* The Megatron-Core plan of the view at tp: the megatron_gpt preset with the sizes args give,
 * as reshard plans a Megatron source; a tp it refuses is printed grouped, with the tp values
 * that fit. */
int tps_cli_ckpt_format(const char *cmd, const char *v, bool *dist)
{
    *dist = v && strcmp(v, "torch_dist") == 0;
    if (v && !*dist && strcmp(v, "torch") != 0)
        return tps_cli_usage(cmd, "--ckpt-format expects torch (Megatron-LM's legacy files) or torch_dist, not '%s'", v);
    return 0;
}

tps_status tps_megatron_dist_supported(const char *src, const tps_megatron_model *model, tps_error *err)
{
    if (model->experts)
        return tps_fail(err, TPS_EINVALID,
                        "%s: a model with %llu MoE experts: writing its experts as torch_dist is not done yet; use "
                        "--ckpt-format torch",
                        src, (unsigned long long)model->experts);
    return TPS_OK;
}

static int plan_megatron(const char *src, const tps_index *view, const char *args_json, uint64_t tp,
                         tps_megatron_model *model, tps_layout **ml, tps_manifest **mm)
{
    tps_error err;
    tps_error_clear(&err);
    char *cfg = NULL, *kept = NULL;
    tps_buf unused = TPS_BUF_INIT;
    tps_problems problems;
    tps_problems_init(&problems, tp);
    const tps_tensor *emb = tps_index_find(view, "embedding.word_embeddings.weight");
    char name[128];
    tps_status st = tps_megatron_args_read(args_json, "args", model, &err);
    if (st == TPS_OK) st = tps_megatron_config_text(model, emb ? emb->shape[0] : 0, &cfg, &err);
    if (st == TPS_OK) st = tps_layout_load_preset(tps_megatron_preset(model), ml, &err);
    if (st == TPS_OK) st = tps_layout_apply_config_text(*ml, cfg, strlen(cfg), "the args", &kept, &err);
    if (st == TPS_OK) st = tps_layout_infer_sizes(*ml, view, &err);
    if (st == TPS_OK) {
        snprintf(name, sizeof name, "preset:%s", tps_megatron_preset(model));
        st = tps_plan_build_grouped(view, *ml, name, tp, mm, &problems, &unused, &err);
    }
    if (st == TPS_OK) {
        (*mm)->config_keys = kept;
        kept = NULL;
    }
    if ((st == TPS_EINVALID || st == TPS_EARG) && problems.n)
        tps_cli_print_problems("split", src, "Megatron cannot cut this model", &problems,
                               tps_layout_sizes(*ml), NULL, tps_common.json);
    else if (st)
        tps_cli_report("split", &err);
    tps_problems_free(&problems);
    tps_buf_release(&unused);
    free(cfg);
    free(kept);
    return tps_cli_exit_code(st);
}

int tps_cli_split_megatron(const char *src, const tps_layout_args *la, const tps_megatron_split_opts *o)
{
    tps_error err;
    tps_error_clear(&err);
    tps_index *ix = NULL, *view = NULL;
    tps_layout *l = NULL, *ml = NULL;
    tps_manifest *m = NULL, *mm = NULL;
    tps_megatron_hf *h = NULL;
    tps_megatron_out *mo = NULL;
    char *config = NULL, *fields = NULL;
    const tps_tensor **pre = NULL;
    size_t config_len = 0;
    tps_buf args = TPS_BUF_INIT;
    /* The Hugging Face side at tp 1: its sizes and a check that the checkpoint is the
     * family's; the Megatron cut comes after the mapping. */
    tps_layout_args hf = *la;
    hf.tp = 1;
    int rc = tps_cli_plan("split", src, &hf, &ix, &l, &m);
    if (rc) goto done;
    tps_status st = tps_megatron_hf_load(tps_layout_text(l), m->layout_name, &h, &err);
    if (st == TPS_OK && !m->config_path)
        st = tps_fail(&err, TPS_EARG, "%s: --target megatron needs the model's config.json (pass --config FILE)", src);
    if (st == TPS_OK) st = tps_read_file(m->config_path, 16u << 20, "a config.json", &config, &config_len, &err);
    if (st == TPS_OK) st = tps_megatron_hf_view(h, l, ix, &view, &err);
    if (st == TPS_OK)
        st = tps_megatron_hf_args(h, l, config, config_len, view, la->tp, o->pp ? o->pp : 1, &fields, &err);
    if (st) {
        rc = tps_cli_report("split", &err);
        goto done;
    }
    tps_buf_printf(&args, "{\"$newobj\": [\"argparse.Namespace\", [], %s]}", fields);
    if (!tps_buf_cstr(&args)) {
        tps_fail_oom(&err, "writing args");
        rc = tps_cli_report("split", &err);
        goto done;
    }
    tps_megatron_model model;
    /* torch_dist's tensors are global: planned at tp 1, padded and named for la->tp */
    if ((rc = plan_megatron(src, view, args.data, o->dist ? 1 : la->tp, &model, &ml, &mm)) != 0) goto done;
    if (o->dist && tps_megatron_dist_supported(src, &model, &err)) {
        rc = tps_cli_report("split", &err);
        goto done;
    }
    if (!(pre = calloc(mm->ntensors + 1, sizeof *pre))) {
        tps_fail_oom(&err, "planning");
        rc = tps_cli_report("split", &err);
        goto done;
    }
    for (size_t i = 0; i < mm->ntensors; i++) pre[i] = tps_index_find(view, mm->tensors[i].name);
    tps_megatron_out_opts mo_opts = {.pp = o->pp ? o->pp : 1,
                                     .pp_layers = o->pp_layers,
                                     .num_layers = model.layers,
                                     .vocab_divisor = TPS_MEGATRON_VOCAB_DIVISOR,
                                     .tied = !model.untied,
                                     .args_json = args.data,
                                     .iteration = 1};
    if (o->dist) {
        mo_opts.pp = 1;
        mo_opts.args_tp = la->tp;
        mo_opts.ckpt_format = "torch_dist";
    }
    if (tps_megatron_out_plan(mm, &mo_opts, &mo, &err)) {
        rc = tps_cli_report("split", &err);
        goto done;
    }
    mg_source source = {view, pre, mo->src};
    const char *inputs[] = {src, NULL};
    tps_progress_state ps;
    tps_write_opts wo = tps_cli_write_opts(o->out, o->force, inputs, NULL, NULL, 0, &ps);
    wo.dry_run = o->dry_run;
    tps_progress_begin(&ps, "split");
    if (o->dist)
        tps_megatron_dist_write(mm, mo, model.layers, &tps_dcp_sink, tps_torch_write_value, mg_read, &source, &wo, &err);
    else
        tps_megatron_write(mm, mo, &tps_torch_sink, mg_read, &source, &wo, &err);
    tps_progress_end(&ps);
    if ((rc = tps_cli_report("split", &err)) != 0) goto done;
    if (o->dry_run && !tps_common.quiet) tps_cli_print_plan(mm, NULL, tps_common.json);
    else if (!tps_common.quiet && o->dist)
        printf("split %s into a Megatron-Core torch_dist checkpoint in %s (for tp %llu, %zu tensors)\n", src, o->out,
               (unsigned long long)la->tp, mm->ntensors);
    else if (!tps_common.quiet)
        printf("split %s into a Megatron-LM checkpoint in %s (tp %llu, pp %llu, %zu tensors, %zu files)\n", src,
               o->out, (unsigned long long)mm->tp, (unsigned long long)mo->pp, mm->ntensors, mm->nfiles);
done:
    free(pre);
    tps_megatron_out_free(mo);
    tps_manifest_free(mm);
    tps_layout_free(ml);
    tps_buf_release(&args);
    free(fields);
    free(config);
    tps_index_free(view);
    tps_megatron_hf_free(h);
    tps_manifest_free(m);
    tps_layout_free(l);
    tps_index_free(ix);
    return rc;
}

/* config.json beside the weights: inside the directory written, or for -o FILE beside FILE. */
static tps_status write_config(const char *out, bool file, const char *text, tps_error *err)
{
    tps_buf path = TPS_BUF_INIT;
    if (file) {
        const char *slash = strrchr(out, '/');
        if (slash) tps_buf_printf(&path, "%.*s/config.json", (int)(slash - out), out);
        else tps_buf_puts(&path, "config.json");
    } else {
        tps_buf_printf(&path, "%s/config.json", out);
    }
    const char *p = tps_buf_cstr(&path);
    tps_status st = p ? tps_write_file_atomic(p, text, strlen(text), err) : tps_fail_oom(err, "writing config.json");
    tps_buf_release(&path);
    return st;
}

int tps_cli_merge_hf(const char *src, const tps_megatron_merge_opts *o)
{
    tps_error err;
    tps_error_clear(&err);
    tps_megatron_as_hf *a = NULL;
    tps_status st = tps_megatron_as_hf_open(src, o->vocab, &a, &err);
    if (st) return tps_cli_report("merge", &err);
    tps_megatron_as_hf_note("merge", a);
    const char *inputs[] = {a->ss->dir, NULL};
    tps_progress_state ps;
    tps_write_opts wo =
        tps_cli_write_opts(o->out, o->force, inputs, NULL, NULL, o->file ? 0 : o->max_shard ? o->max_shard : 5000000000ull, &ps);
    wo.kind = o->file ? TPS_OUT_FILE : TPS_OUT_CHECKPOINT;
    wo.cut.checkpoint = true;
    wo.cut.sink = &tps_safetensors_checkpoint_sink; /* laid out as the safetensors library does */
    wo.before_publish = o->file ? NULL : tps_cli_write_config_into;
    wo.before_publish_arg = a->config;
    int rc = tps_cli_write("merge", a->hm, tps_megatron_hf_unview_read, a->rd, &wo);
    if (rc == 0 && o->file && (st = write_config(o->out, true, a->config, &err)) != TPS_OK) rc = tps_cli_report("merge", &err);
    if (rc == 0 && !tps_common.quiet)
        printf("merged %s (%s) into %s as %s (%zu tensors)\n", src,
               a->ms->dist ? "Megatron-Core torch_dist" : "Megatron-LM", o->out, a->arch, a->hm->ntensors);
    tps_megatron_as_hf_free(a);
    return rc;
}

tps_status tps_cli_write_config_into(const tps_outdir *od, void *arg, tps_error *err)
{
    char *path = tps_outdir_path(od, "config.json");
    if (!path) return tps_fail_oom(err, "writing config.json");
    tps_status st = tps_write_file_atomic(path, arg, strlen(arg), err);
    free(path);
    return st;
}
