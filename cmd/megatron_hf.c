/* split --target megatron and merge --target hf: a Hugging Face checkpoint to a Megatron-LM
 * one and back.  The library plans (lib/registry/megatron_split.h), maps
 * (lib/registry/megatron_as_hf.h) and opens (formats/megatron/megatron_target.h); both write
 * through the common write step (output_args.h: tps_cli_write_opts, tps_cli_write,
 * tps_cli_write_with) and print here. */
#include "megatron_hf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "formats/safetensors.h"
#include "layout_args.h"
#include "lib/registry.h"
#include "megatron_as_hf.h"
#include "output_args.h"
#include "progress.h"

int tps_cli_ckpt_format(const char *cmd, const tps_target_entry *e, const char *v, bool *dist)
{
    int i = tps_target_format(e, v);
    *dist = i == TPS_CKPT_TORCH_DIST;
    if (i < 0)
        return tps_cli_usage(cmd, "--ckpt-format expects torch (Megatron-LM's legacy files) or torch_dist, not '%s'", v);
    return 0;
}

int tps_cli_split_megatron(const char *src, const tps_layout_args *la, const tps_cli_megatron_split_opts *o)
{
    tps_error err;
    tps_error_clear(&err);
    tps_index *ix = NULL;
    tps_layout *l = NULL;
    tps_manifest *m = NULL;
    tps_megatron_split *s = NULL;
    tps_problems problems;
    /* The Hugging Face side at tp 1: its sizes and a check that the checkpoint is the
     * family's; the Megatron cut comes after the mapping. */
    tps_layout_args hf = *la;
    hf.tp = 1;
    int rc = tps_cli_plan("split", src, &hf, &ix, &l, &m);
    if (rc) goto done;
    tps_megatron_split_opts so = {la->tp, o->pp, o->pp_layers, o->dist, &tps_megatron_format_sinks};
    tps_problems_init(&problems, o->dist ? 1 : la->tp);
    tps_status st = tps_megatron_split_plan(src, ix, l, m, &so, &problems, &s, &err);
    /* a tp Megatron refuses is printed grouped, with the tp values that fit */
    if ((st == TPS_EINVALID || st == TPS_EARG) && problems.n)
        tps_cli_print_problems("split", src, "Megatron cannot cut this model", &problems, tps_layout_sizes(s->ml),
                               NULL, tps_common.json);
    else if (st)
        tps_cli_report("split", &err);
    tps_problems_free(&problems);
    if ((rc = tps_cli_exit_code(st)) != 0) goto done;
    const char *inputs[] = {src, NULL};
    tps_progress_state ps;
    tps_write_opts wo = tps_cli_write_opts(o->out, o->force, inputs, NULL, NULL, 0, &ps);
    wo.dry_run = o->dry_run;
    if ((rc = tps_cli_write_with("split", tps_megatron_plan_write, &s->plan, &wo)) != 0) goto done;
    if (o->dry_run && !tps_common.quiet) tps_cli_print_plan(s->mm, NULL, tps_common.json);
    else if (!tps_common.quiet && o->dist)
        printf("split %s into a Megatron-Core torch_dist checkpoint in %s (for tp %llu, %zu tensors)\n", src, o->out,
               (unsigned long long)la->tp, s->mm->ntensors);
    else if (!tps_common.quiet)
        printf("split %s into a Megatron-LM checkpoint in %s (tp %llu, pp %llu, %zu tensors, %zu files)\n", src,
               o->out, (unsigned long long)s->mm->tp, (unsigned long long)s->mo->pp, s->mm->ntensors,
               s->mm->nfiles);
done:
    tps_megatron_split_free(s);
    tps_manifest_free(m);
    tps_layout_free(l);
    tps_index_free(ix);
    return rc;
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
    wo.before_publish = o->file ? NULL : tps_megatron_config_into;
    wo.before_publish_arg = a->config;
    int rc = tps_cli_write("merge", a->hm, tps_megatron_hf_unview_read, a->rd, &wo);
    if (rc == 0 && o->file && (st = tps_megatron_config_beside(o->out, a->config, &err)) != TPS_OK)
        rc = tps_cli_report("merge", &err);
    if (rc == 0 && !tps_common.quiet)
        printf("merged %s (%s) into %s as %s (%zu tensors)\n", src,
               a->ms->dist ? "Megatron-Core torch_dist" : "Megatron-LM", o->out, a->arch, a->hm->ntensors);
    tps_megatron_as_hf_free(a);
    return rc;
}
