/* split --target megatron planned (lib/registry/megatron_split.h). */
#include "megatron_split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../set/plan.h"

/* Megatron's tensor i (after planning) is the view's tensor pre[src[i]]. */
static tps_status split_read(void *ctx, size_t i, uint64_t off, void *buf, size_t len, tps_error *err)
{
    const tps_megatron_split *s = ctx;
    return tps_tensor_read(s->view, s->pre[s->mo->src[i]], off, buf, len, err);
}

/* The Hugging Face side mapped: the view under Megatron's names and the args for tp x pp. */
static tps_status map_hf(tps_megatron_split *s, const char *src, const tps_index *ix, tps_layout *l,
                         const tps_manifest *m, const tps_megatron_split_opts *o, tps_error *err)
{
    size_t config_len = 0;
    tps_status st = tps_megatron_hf_load(tps_layout_text(l), m->layout_name, &s->h, err);
    if (st == TPS_OK && !m->config_path)
        st = tps_fail(err, TPS_EARG, "%s: --target megatron needs the model's config.json (pass --config FILE)", src);
    if (st == TPS_OK) st = tps_read_file(m->config_path, 16u << 20, "a config.json", &s->config, &config_len, err);
    if (st == TPS_OK) st = tps_megatron_hf_view(s->h, l, ix, &s->view, err);
    if (st == TPS_OK)
        st = tps_megatron_hf_args(s->h, l, s->config, config_len, s->view, o->tp, o->pp ? o->pp : 1, &s->fields, err);
    if (st) return st;
    tps_buf_printf(&s->args, "{\"$newobj\": [\"argparse.Namespace\", [], %s]}", s->fields);
    if (!tps_buf_cstr(&s->args)) return tps_fail_oom(err, "writing args");
    return TPS_OK;
}

/* The Megatron-Core plan of the view at tp: the megatron_gpt preset with the sizes the args
 * give, as reshard plans a Megatron source. */
static tps_status plan_megatron(tps_megatron_split *s, uint64_t tp, tps_problems *problems, tps_error *err)
{
    char *cfg = NULL, *kept = NULL;
    tps_buf unused = TPS_BUF_INIT;
    const tps_tensor *emb = tps_index_find(s->view, "embedding.word_embeddings.weight");
    char name[128];
    tps_status st = tps_megatron_args_read(s->args.data, "args", &s->model, err);
    if (st == TPS_OK) st = tps_megatron_config_text(&s->model, emb ? emb->shape[0] : 0, &cfg, err);
    if (st == TPS_OK) st = tps_layout_load_preset(tps_megatron_preset(&s->model), &s->ml, err);
    if (st == TPS_OK) st = tps_layout_apply_config_text(s->ml, cfg, strlen(cfg), "the args", &kept, err);
    if (st == TPS_OK) st = tps_layout_infer_sizes(s->ml, s->view, err);
    if (st == TPS_OK) {
        snprintf(name, sizeof name, "preset:%s", tps_megatron_preset(&s->model));
        st = tps_plan_build_grouped(s->view, s->ml, name, tp, &s->mm, problems, &unused, err);
    }
    if (st == TPS_OK) {
        s->mm->config_keys = kept;
        kept = NULL;
        /* a plan that holds: what it noted is no refusal for a later step to print */
        tps_problems_free(problems);
        tps_problems_init(problems, tp);
    }
    tps_buf_release(&unused);
    free(cfg);
    free(kept);
    return st;
}

tps_status tps_megatron_split_plan(const char *src, const tps_index *ix, tps_layout *l, const tps_manifest *m,
                                   const tps_megatron_split_opts *o, tps_problems *problems,
                                   tps_megatron_split **out, tps_error *err)
{
    tps_megatron_split *s = calloc(1, sizeof *s);
    *out = s;
    if (!s) return tps_fail_oom(err, "planning");
    tps_status st = map_hf(s, src, ix, l, m, o, err);
    /* torch_dist's tensors are global: planned at tp 1, padded and named for o->tp */
    if (st == TPS_OK) st = plan_megatron(s, o->dist ? 1 : o->tp, problems, err);
    if (st == TPS_OK && o->dist) st = tps_megatron_dist_supported(src, &s->model, err);
    if (st) return st;
    if (!(s->pre = calloc(s->mm->ntensors + 1, sizeof *s->pre))) return tps_fail_oom(err, "planning");
    for (size_t i = 0; i < s->mm->ntensors; i++) s->pre[i] = tps_index_find(s->view, s->mm->tensors[i].name);
    tps_megatron_out_opts mo_opts = {.pp = o->pp ? o->pp : 1,
                                     .pp_layers = o->pp_layers,
                                     .num_layers = s->model.layers,
                                     .vocab_divisor = TPS_MEGATRON_VOCAB_DIVISOR,
                                     .tied = !s->model.untied,
                                     .args_json = s->args.data,
                                     .iteration = 1};
    if (o->dist) {
        mo_opts.pp = 1;
        mo_opts.args_tp = o->tp;
        mo_opts.ckpt_format = "torch_dist";
    }
    st = tps_megatron_out_plan(s->mm, &mo_opts, &s->mo, err);
    if (st) return st;
    s->plan = (tps_megatron_plan){.m = s->mm, .mo = s->mo, .dist = o->dist, .num_layers = s->model.layers,
                                  .sinks = o->sinks, .read = split_read, .ctx = s};
    return TPS_OK;
}

void tps_megatron_split_free(tps_megatron_split *s)
{
    if (!s) return;
    free(s->pre);
    tps_megatron_out_free(s->mo);
    tps_manifest_free(s->mm);
    tps_layout_free(s->ml);
    tps_buf_release(&s->args);
    free(s->fields);
    free(s->config);
    tps_index_free(s->view);
    tps_megatron_hf_free(s->h);
    free(s);
}
