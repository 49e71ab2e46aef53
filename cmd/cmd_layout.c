/* tpshard layout: list the built-in layouts, print one as YAML to start a custom layout
 * from, or check a layout file. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "help.h"
#include "commands.h"
#include "layout_args.h"
#include "lib/base.h"
#include "lib/layout.h"

static struct {
    bool list;
    const char *preset;
    const char *check;
} o;

static const tps_opt layout_opts[] = {
    {"list", 0, TPS_OPT_FLAG, &o.list, NULL, "list the built-in layouts, the architectures they serve"},
    {"preset", 0, TPS_OPT_STRING, &o.preset, "NAME", "print a built-in layout's YAML (a name or alias)"},
    {"check", 0, TPS_OPT_STRING, &o.check, "FILE", "parse a layout file and report its first error"},
    TPS_COMMON_OPTS,
    TPS_OPTS_END,
};

/* Each preset: its name and description, then the architectures auto-detection picks it
 * for and the other names --preset accepts, wrapped to 80 columns.  A preset that fails to
 * parse is a build defect the unit tests catch; it still shows up here, with its error. */
static void print_names(int col, const char *label, const char *const *names, size_t n)
{
    if (!n) return;
    tps_buf b = TPS_BUF_INIT;
    tps_buf_puts(&b, label);
    for (size_t i = 0; i < n; i++) tps_buf_printf(&b, "%s%s", i ? ", " : " ", names[i]);
    printf("%*s", col, "");
    tps_cli_wrap(stdout, col, col + 2, tps_buf_cstr(&b) ? b.data : "(out of memory)");
    tps_buf_release(&b);
}

static void print_list(void)
{
    int col = 0; /* the descriptions start one column after the longest name */
    for (const tps_preset *p = tps_presets; p->name; p++)
        if ((int)strlen(p->name) + 1 > col) col = (int)strlen(p->name) + 1;
    for (const tps_preset *p = tps_presets; p->name; p++) {
        tps_error err;
        tps_error_clear(&err);
        tps_layout *l = NULL;
        printf("%-*s", col, p->name);
        if (tps_layout_load_preset(p->name, &l, &err) != TPS_OK) {
            printf("(broken: %s)\n", err.msg);
            continue;
        }
        const char *d = tps_layout_description(l);
        tps_cli_wrap(stdout, col, col, d ? d : "");
        size_t n;
        const char *const *archs = tps_layout_architectures(l, &n);
        print_names(col, "architectures:", archs, n);
        const char *const *aliases = tps_layout_aliases(l, &n);
        print_names(col, "aliases:", aliases, n);
        tps_layout_free(l);
    }
}

static int run_layout(char **args, int nargs)
{
    (void)args;
    (void)nargs;
    int modes = o.list + (o.preset != NULL) + (o.check != NULL);
    if (modes != 1) return tps_cli_usage("layout", "give exactly one of --list, --preset NAME or --check FILE");
    if (o.list) {
        print_list();
        return 0;
    }
    if (o.preset) {
        const tps_preset *p;
        int rc = tps_cli_resolve_preset("layout", o.preset, &p);
        if (rc) return rc;
        fputs(p->yaml, stdout);
        return 0;
    }
    tps_error err;
    tps_error_clear(&err);
    tps_layout *l = NULL;
    if (tps_layout_load_file(o.check, &l, &err) != TPS_OK) return tps_cli_report("layout", &err);
    if (!tps_common.quiet) {
        const tps_block *b = tps_layout_block(l);
        printf("%s: ok, %zu rule%s", o.check, tps_layout_rule_count(l), tps_layout_rule_count(l) == 1 ? "" : "s");
        if (b) printf(", block kind %s", tps_block_kind_name(b->kind));
        printf("\n");
        if (tps_common.verbose)
            for (size_t i = 0; i < tps_layout_rule_count(l); i++) printf("  rule %s\n", tps_layout_rule_label(l, i));
    }
    tps_layout_free(l);
    return 0;
}

const tps_cmd tps_cmd_layout = {
    .name = "layout",
    .summary = "list built-in layouts, print one as YAML, or check a layout file",
    .usage = "layout (--list | --preset NAME | --check FILE)",
    .details = "A layout says how each tensor is cut: ordered rules of name globs, each with a\n"
               "split (replicate, column, row, dim), units and fused segments, plus the model\n"
               "sizes and the block the verification pass runs.  The schema is in\n"
               "docs/layouts.md (\"Layout schema\").  Start a custom layout from a preset:\n"
               "  tpshard layout --preset llama > my.yaml && tpshard layout --check my.yaml\n",
    .opts = layout_opts,
    .min_args = 0,
    .max_args = 0,
    .run = run_layout,
};
