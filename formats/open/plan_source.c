/* A checkpoint opened, its layout loaded and planned (formats/open/plan_source.h). */
#include "plan_source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../lib/layout/presets.h"
#include "../../lib/registry/megatron_as_hf.h"
#include "../../lib/set/plan.h"
#include "../../lib/set/plan_report.h"
#include "checkpoint.h"

bool tps_plan_config_beside(const char *src, char *path, size_t size)
{
    struct stat sb;
    const char *slash = strrchr(src, '/');
    size_t n = strlen(src);
    while (n > 1 && src[n - 1] == '/') n--; /* src/ names the same directory: no src//config.json */
    if (stat(src, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(path, size, "%.*s/config.json", (int)n, src);
    else if (slash) snprintf(path, size, "%.*s/config.json", (int)(slash - src), src);
    else snprintf(path, size, "config.json");
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The layout, its sizes from config.json, the checkpoint's index and the sizes it implies. */
static tps_status load(const tps_plan_source_in *in, tps_plan_source *out, char **config_keys, tps_error *err)
{
    tps_megatron_as_hf *mg = in->mg;
    tps_status st = in->layout ? tps_layout_load_file(in->layout, &out->l, err)
                               : tps_layout_load_preset(in->preset, &out->l, err);
    if (st == TPS_OK && mg) {
        st = tps_layout_apply_config_text(out->l, mg->config, strlen(mg->config),
                                          "the config.json from the checkpoint's args", config_keys, err);
        if (st == TPS_OK) {
            mg = NULL;
            st = tps_megatron_as_hf_index(in->mg, &out->ix, err); /* owns mg from here */
        }
    } else if (st == TPS_OK) {
        if (in->config) st = tps_layout_read_config(out->l, in->config, config_keys, err);
        if (st == TPS_OK) st = tps_checkpoint_open(in->src, &out->ix, err);
    }
    tps_megatron_as_hf_free(mg);
    if (st == TPS_OK) st = tps_layout_infer_sizes(out->l, out->ix, err);
    return st;
}

/* --preset NAME that fits no tensor of a checkpoint whose config.json names another preset:
 * the user picked the wrong one, and one line saying which helps more than a warning per rule
 * of the wrong preset. */
static void other_preset(const tps_plan_source_in *in, tps_plan_source *out)
{
    const tps_preset *named = NULL;
    char found[256];
    tps_error err;
    tps_error_clear(&err);
    if (!in->config || tps_preset_detect(in->config, &named, found, sizeof found, &err) != TPS_OK || !named ||
        strcmp(named->name, in->preset) == 0)
        return;
    size_t narch = 0;
    const char *const *arch = tps_layout_architectures(out->l, &narch);
    const char *desc = tps_layout_description(out->l);
    snprintf(out->other_preset, sizeof out->other_preset, "%s says %s (%s); --preset %s is for %s%s%s%s: pass --preset %s",
             in->config, named->name, found, in->preset, narch ? arch[0] : "another model", desc ? " (" : "",
             desc ? desc : "", desc ? ")" : "", named->name);
}

tps_status tps_plan_source_open(const tps_plan_source_in *in, tps_plan_source *out, tps_error *err)
{
    memset(out, 0, sizeof *out);
    out->unused = (tps_buf)TPS_BUF_INIT;
    out->note = (tps_buf)TPS_BUF_INIT;
    tps_problems_init(&out->problems, in->tp);
    char *config_keys = NULL;
    tps_status st = load(in, out, &config_keys, err);
    if (st) {
        free(config_keys);
        return st;
    }
    /* The preset's own name, however it was asked for: the same cut records the same. */
    char name[4200];
    if (in->layout) snprintf(name, sizeof name, "%s", in->layout);
    else snprintf(name, sizeof name, "preset:%s", in->preset);
    st = tps_plan_build_grouped(out->ix, out->l, name, in->tp, &out->m, &out->problems, &out->unused, err);
    if (st == TPS_OK && config_keys) {
        /* The manifest keeps what the sizes and block came from: verify needs no config.json. */
        out->m->config_keys = config_keys;
        config_keys = NULL;
        if (in->config && !(out->m->config_path = strdup(in->config))) st = tps_fail_oom(err, "planning");
    }
    free(config_keys);
    if ((st == TPS_EINVALID || st == TPS_EARG) && in->preset_given &&
        tps_problems_count_kind(&out->problems, TPS_PROBLEM_NO_RULE))
        other_preset(in, out);
    if (st == TPS_OK) tps_plan_marlin_line(out->m, tps_layout_quant(out->l), &out->note);
    return st;
}

void tps_plan_source_release(tps_plan_source *out)
{
    tps_problems_free(&out->problems);
    tps_buf_release(&out->unused);
    tps_buf_release(&out->note);
}
