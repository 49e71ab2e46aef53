/* tpshard plan: show how split would cut a checkpoint, and every problem at once. */
#include <stdio.h>

#include "cli.h"
#include "commands.h"
#include "layout_args.h"
#include "lib/engine.h"

static struct {
    tps_layout_args la;
    const char *dtype;
} o;

static const tps_opt plan_opts[] = {
    {"tp", 0, TPS_OPT_UINT, &o.la.tp, "N", "tensor-parallel size (number of ranks)"},
    {"layout", 0, TPS_OPT_STRING, &o.la.layout, "FILE", "YAML layout file"},
    {"preset", 0, TPS_OPT_STRING, &o.la.preset, "NAME", "built-in layout (default: from config.json)"},
    {"config", 0, TPS_OPT_STRING, &o.la.config, "FILE", "config.json: sizes, and the preset (default: beside SRC)"},
    {"dtype", 0, TPS_OPT_STRING, &o.dtype, "bf16|f16|f32", "show the plan as split --dtype would convert it"},
    {"json", 0, TPS_OPT_FLAG, &tps_common.json, NULL, "machine-readable output"},
    TPS_COMMON_OPTS,
    TPS_OPTS_END,
};

/* Never called: plan converts dtypes and sizes in the manifest only, reading no data. */
static tps_status no_read(void *ctx, size_t i, uint64_t off, void *buf, size_t len, tps_error *err)
{
    (void)ctx, (void)i, (void)off, (void)buf, (void)len;
    return tps_fail(err, TPS_EIO, "plan reads no tensor data");
}

static int run_plan(char **args, int nargs)
{
    (void)nargs;
    tps_dtype to = TPS_DT_COUNT;
    if (o.dtype && !tps_convert_parse_dtype(o.dtype, &to))
        return tps_cli_usage("plan", "--dtype expects bf16, f16 or f32, not '%s'", o.dtype);
    tps_index *ix;
    tps_layout *l;
    tps_manifest *m;
    tps_convert *cv = NULL;
    tps_error err;
    tps_error_clear(&err);
    int rc = tps_cli_plan("plan", args[0], &o.la, &ix, &l, &m);
    if (rc == 0 && o.dtype && tps_convert_begin(m, to, no_read, NULL, &cv, &err)) rc = tps_cli_report("plan", &err);
    if (rc == 0) tps_cli_print_plan(m, tps_layout_quant(l), tps_common.json);
    tps_convert_free(cv);
    tps_manifest_free(m);
    tps_layout_free(l);
    tps_index_free(ix);
    return rc;
}

const tps_cmd tps_cmd_plan = {
    .name = "plan",
    .summary = "show how split would cut each tensor, and all problems at once",
    .usage = "plan SRC --tp N [--preset NAME | --layout FILE] [--config FILE] [--dtype T] [--json]",
    .details = "Lists every problem at once, one line per cause (unmatched tensors, a dimension\n"
               "that tp does not divide, unknown sizes) with the count of tensors it hit, then\n"
               "the tp values that fit, or the option to pass.  Exit 3 when there is any; with\n"
               "--json the refusal is JSON on stdout too.  Without --preset or --layout the\n"
               "preset is chosen from config.json, as split does.\n",
    .opts = plan_opts,
    .min_args = 1,
    .max_args = 1,
    .run = run_plan,
};
