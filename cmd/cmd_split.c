/* tpshard split: cut a checkpoint into per-rank shard files plus tpshard.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "layout_args.h"
#include "progress.h"
#include "lib/cut.h"
#include "lib/outdir.h"
#include "lib/publish.h"

static struct {
    tps_layout_args la;
    const char *out;
    const char *only;
    const char *name_template;
    bool force, dry_run;
} o;

static const tps_opt split_opts[] = {
    {"tp", 0, TPS_OPT_UINT, &o.la.tp, "N", "tensor-parallel size (number of ranks)"},
    {"layout", 0, TPS_OPT_STRING, &o.la.layout, "FILE", "YAML layout file"},
    {"preset", 0, TPS_OPT_STRING, &o.la.preset, "NAME", "built-in layout (tpshard layout --list)"},
    {"config", 0, TPS_OPT_STRING, &o.la.config, "FILE", "Hugging Face config.json with the model sizes (default: config.json beside SRC)"},
    {"output", 'o', TPS_OPT_STRING, &o.out, "DIR", "output directory (must not exist or be empty)"},
    {"only-rank", 0, TPS_OPT_STRING, &o.only, "R[,R...]", "write only these ranks' files (the manifest describes all)"},
    {"name-template", 0, TPS_OPT_STRING, &o.name_template, "T", "rank file name, with {rank} and {tp} (default " TPS_DEFAULT_NAME_TEMPLATE ")"},
    {"force", 'f', TPS_OPT_FLAG, &o.force, NULL, "replace a non-empty output directory"},
    {"dry-run", 'n', TPS_OPT_FLAG, &o.dry_run, NULL, "plan and check everything, write nothing"},
    TPS_COMMON_OPTS,
    TPS_OPTS_END,
};

static tps_status read_source(void *ctx, size_t i, uint64_t off, void *buf, size_t len, tps_error *err)
{
    const tps_index *ix = ctx;
    return tps_tensor_read(ix, &ix->tensors[i], off, buf, len, err);
}

static int run_split(char **args, int nargs)
{
    (void)nargs;
    const char *src = args[0];
    if (!o.out && !o.dry_run) {
        tps_cli_errorf("split", "-o DIR is required (or --dry-run)");
        return TPS_EUSAGE;
    }
    tps_index *ix;
    tps_layout *l;
    tps_manifest *m;
    bool *write_rank = NULL;
    tps_outdir *od = NULL;
    tps_error err;
    tps_error_clear(&err);
    int rc = tps_cli_plan("split", src, &o.la, &ix, &l, &m);
    if (rc) goto done;
    if (o.only) {
        write_rank = calloc(o.la.tp, sizeof *write_rank);
        if (!write_rank || !tps_parse_rank_list(o.only, o.la.tp, write_rank)) {
            tps_cli_errorf("split", "--only-rank expects ranks below %llu separated by commas, not '%s'",
                           (unsigned long long)o.la.tp, o.only);
            rc = TPS_EUSAGE;
            goto done;
        }
    }
    char probe[1024];
    if (tps_format_name(o.name_template ? o.name_template : TPS_DEFAULT_NAME_TEMPLATE, 0, o.la.tp, 0, probe,
                        sizeof probe, &err)) {
        rc = tps_cli_report("split", &err);
        goto done;
    }
    if (o.dry_run) {
        if (!tps_common.quiet) tps_cli_print_plan(m, false);
        rc = 0;
        goto done;
    }
    tps_signals_install();
    const char *inputs[] = {src, NULL};
    if (tps_outdir_begin(o.out, o.force, inputs, &od, &err)) {
        rc = tps_cli_report("split", &err);
        goto done;
    }
    tps_progress_state ps;
    tps_progress_begin(&ps, "split");
    tps_cut_opts co = {.write_rank = write_rank, .name_template = o.name_template, .progress = tps_progress_update, .progress_arg = &ps};
    tps_status st = tps_cut(m, read_source, ix, od, &co, &err);
    tps_progress_end(&ps);
    if (st == TPS_OK) st = tps_publish_shardset(m, od, &err);
    if (st) {
        tps_outdir_abort(od);
        od = NULL;
        rc = tps_cli_report("split", &err);
        goto done;
    }
    if (!tps_common.quiet)
        printf("split %s into %llu rank%s in %s (%zu tensors)\n", src, (unsigned long long)m->tp, m->tp == 1 ? "" : "s",
               o.out, m->ntensors);
    rc = 0;
done:
    tps_outdir_free(od);
    free(write_rank);
    tps_manifest_free(m);
    tps_layout_free(l);
    tps_index_free(ix);
    return rc;
}

const tps_cmd tps_cmd_split = {
    .name = "split",
    .summary = "cut a checkpoint into per-rank shard files and a manifest",
    .usage = "split SRC --tp N (--layout FILE | --preset NAME) [--config FILE] -o DIR",
    .details = "Writes one safetensors file per rank and tpshard.json into DIR, which appears only\n"
               "when complete.  The source is only read.  Every tensor must match a layout rule.\n",
    .opts = split_opts,
    .min_args = 1,
    .max_args = 1,
    .run = run_split,
};
