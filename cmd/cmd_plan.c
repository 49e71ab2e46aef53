/* tpshard plan: show how split would cut a checkpoint, and every problem at once. */
#include <stdio.h>

#include "cli.h"
#include "commands.h"
#include "layout_args.h"

static struct {
    tps_layout_args la;
} o;

static const tps_opt plan_opts[] = {
    {"tp", 0, TPS_OPT_UINT, &o.la.tp, "N", "tensor-parallel size (number of ranks)"},
    {"layout", 0, TPS_OPT_STRING, &o.la.layout, "FILE", "YAML layout file"},
    {"preset", 0, TPS_OPT_STRING, &o.la.preset, "NAME", "built-in layout (tpshard layout --list)"},
    {"config", 0, TPS_OPT_STRING, &o.la.config, "FILE", "Hugging Face config.json with the model sizes (default: config.json beside SRC)"},
    {"json", 0, TPS_OPT_FLAG, &tps_common.json, NULL, "machine-readable output"},
    TPS_COMMON_OPTS,
    TPS_OPTS_END,
};

static int run_plan(char **args, int nargs)
{
    (void)nargs;
    tps_index *ix;
    tps_layout *l;
    tps_manifest *m;
    int rc = tps_cli_plan("plan", args[0], &o.la, &ix, &l, &m);
    if (rc == 0) tps_cli_print_plan(m, tps_common.json);
    tps_manifest_free(m);
    tps_layout_free(l);
    tps_index_free(ix);
    return rc;
}

const tps_cmd tps_cmd_plan = {
    .name = "plan",
    .summary = "show each tensor's rule, split and per-rank shape without writing anything",
    .usage = "plan SRC --tp N (--layout FILE | --preset NAME) [--config FILE] [--json]",
    .details = "Lists every problem at once: each unmatched tensor and each dimension that tp\n"
               "does not divide.  Exit 3 when there is any.\n",
    .opts = plan_opts,
    .min_args = 1,
    .max_args = 1,
    .run = run_plan,
};
