#include "layout_args.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "formats/megatron.h"
#include "lib/base.h"
#include "lib/engine.h"
#include "megatron_as_hf.h"

static void print_lines(const char *cmd, const char *prefix, const char *text)
{
    while (text && *text) {
        const char *nl = strchr(text, '\n');
        int n = nl ? (int)(nl - text) : (int)strlen(text);
        fprintf(stderr, "tpshard %s: %s%.*s\n", cmd, prefix, n, text);
        text += n + (nl ? 1 : 0);
    }
}

/* The names --preset accepts (preset names, then each preset's aliases), as written, into
 * names[] (at most max); returns how many.  The strings live in buf. */
static size_t preset_names(tps_buf *buf, const char **names, size_t max)
{
    for (const tps_preset *p = tps_presets; p->name; p++) tps_buf_printf(buf, "%s%c", p->name, 0);
    for (const tps_preset *p = tps_presets; p->name; p++) {
        tps_layout *l = NULL;
        tps_error err;
        tps_error_clear(&err);
        if (tps_layout_load_preset(p->name, &l, &err) != TPS_OK) continue; /* broken: the unit tests say so */
        size_t na;
        const char *const *aliases = tps_layout_aliases(l, &na);
        for (size_t i = 0; i < na; i++) tps_buf_printf(buf, "%s%c", aliases[i], 0);
        tps_layout_free(l);
    }
    size_t n = 0;
    for (size_t off = 0; !buf->oom && off < buf->len && n < max; off += strlen(buf->data + off) + 1)
        names[n++] = buf->data + off;
    return n;
}

int tps_cli_resolve_preset(const char *cmd, const char *name, const tps_preset **out)
{
    if ((*out = tps_preset_resolve(name))) return 0;
    tps_buf buf = TPS_BUF_INIT, list = TPS_BUF_INIT;
    const char *names[128];
    size_t n = preset_names(&buf, names, sizeof names / sizeof *names), npresets = 0;
    for (const tps_preset *p = tps_presets; p->name; p++) npresets++;
    /* Compared as the resolver does: case and '-' versus '_' do not matter. */
    char key[64];
    size_t len = 0;
    for (; name[len] && len + 1 < sizeof key; len++)
        key[len] = name[len] == '-' ? '_' : (char)tolower((unsigned char)name[len]);
    key[len] = '\0';
    const char *guess = tps_cli_suggest(key, len, names, n);
    tps_buf_puts(&list, "presets: ");
    for (size_t i = 0; i < npresets && i < n; i++) tps_buf_printf(&list, "%s%s", i ? ", " : "", names[i]);
    tps_buf_puts(&list, ")");
    if (guess) tps_buf_printf(&list, "; did you mean '%s'?", guess);
    else tps_buf_puts(&list, ".");
    tps_buf_puts(&list, " Also accepted:");
    for (size_t i = npresets; i < n; i++) tps_buf_printf(&list, "%s%s", i > npresets ? ", " : " ", names[i]);
    const char *l = tps_buf_cstr(&list);
    int rc = tps_cli_usage(cmd, "unknown preset '%s' (%s (tpshard layout --list)", name, l ? l : ")");
    tps_buf_release(&buf);
    tps_buf_release(&list);
    return rc;
}

/* With neither --preset nor --layout: the preset config.json's architectures (then
 * model_type) ask for, said on stderr. */
static int detect_preset(const char *cmd, const char *src, const char *config, const tps_preset **out)
{
    if (!config)
        return tps_cli_usage(cmd, "no config.json beside %s to choose the layout from; pass --preset NAME, "
                                  "--layout FILE or --config FILE (tpshard layout --list)", src);
    tps_error err;
    tps_error_clear(&err);
    char found[256];
    tps_status st = tps_preset_detect(config, out, found, sizeof found, &err);
    if (st == TPS_EARG)
        return tps_cli_usage(cmd, "%s, so the layout cannot be chosen; pass --preset NAME or --layout FILE "
                                  "(tpshard layout --list)", err.msg);
    if (st) {
        tps_cli_report(cmd, &err);
        if (found[0]) /* an architecture no preset serves, rather than an unreadable file */
            tps_cli_errorf(cmd, "write a layout for it, starting from the closest preset: "
                                "tpshard layout --preset NAME > mine.yaml, then pass --layout mine.yaml");
        return tps_cli_exit_code(st);
    }
    if (!tps_common.quiet) fprintf(stderr, "tpshard %s: layout: preset %s, from %s %s\n", cmd, (*out)->name, config, found);
    return 0;
}

/* With neither --layout nor --preset: the preset a Megatron checkpoint's args or config.json
 * ask for (detect_preset).  0 with *p set, or the exit code (said). */
static int choose_preset(const char *cmd, const char *src, const tps_layout_args *a, const char *config,
                         const tps_megatron_as_hf *mg, const tps_preset **p)
{
    if (a->preset || mg) return tps_cli_resolve_preset(cmd, a->preset ? a->preset : mg->preset, p);
    return detect_preset(cmd, src, config, p);
}

/* What the plan said besides its result: a wrong --preset, the rules that matched no tensor,
 * the tensors skipped, the Marlin note; then the refusal or the error. */
static int print_planned(const char *cmd, const char *src, const tps_plan_source *ps, const char *config,
                         const char *beside, tps_status st, const tps_error *err)
{
    bool wrong_preset = ps->other_preset[0] != '\0';
    if (wrong_preset) tps_cli_errorf(cmd, "%s", ps->other_preset);
    if (ps->unused.len && !tps_common.quiet && !wrong_preset)
        print_lines(cmd, "warning: layout rule matched no tensor: ", ps->unused.data);
    for (size_t i = 0; st == TPS_OK && !tps_common.quiet && i < ps->m->nskipped; i++) {
        const tps_manifest_skip *sk = &ps->m->skipped[i];
        fprintf(stderr, "tpshard %s: skipped %llu tensor%s: %s (%s)\n", cmd, (unsigned long long)sk->count,
                sk->count == 1 ? "" : "s", sk->glob, sk->reason);
    }
    if (st == TPS_OK && !tps_common.quiet && ps->note.len && tps_buf_cstr((tps_buf *)&ps->note))
        fprintf(stderr, "tpshard %s: note: %s\n", cmd, ps->note.data);
    if (wrong_preset) {
        /* said above */
    } else if ((st == TPS_EINVALID || st == TPS_EARG) && ps->problems.n) {
        tps_cli_print_problems(cmd, src, "the layout does not fit this checkpoint", &ps->problems,
                               tps_layout_sizes(ps->l), config ? NULL : beside, tps_common.json);
    } else if (st) {
        tps_cli_report(cmd, err);
    }
    return tps_cli_exit_code(st);
}

int tps_cli_plan(const char *cmd, const char *src, const tps_layout_args *a, tps_index **ix, tps_layout **l,
                 tps_manifest **m)
{
    tps_error err;
    tps_error_clear(&err);
    *ix = NULL;
    *l = NULL;
    *m = NULL;
    if (a->tp == 0) return tps_cli_usage(cmd, "--tp N is required (N >= 1)");
    /* The bound every writer and the manifest reader share, before any planning. */
    if (tps_tp_check(a->tp, "--tp", &err)) return tps_cli_report(cmd, &err);
    if (a->layout && a->preset)
        return tps_cli_usage(cmd, "give one of --layout FILE or --preset NAME, not both (see 'tpshard layout --list')");
    /* Without --config, a config.json beside the checkpoint is what the user means (HF layout). */
    const char *config = a->config;
    char beside[4200];
    if (!config && tps_plan_config_beside(src, beside, sizeof beside)) {
        config = beside;
        if (tps_common.verbose) fprintf(stderr, "tpshard %s: sizes from %s\n", cmd, beside);
    }
    /* A Megatron checkpoint is cut as the Hugging Face checkpoint it holds, with the preset
     * and config.json its args ask for (cmd/megatron_as_hf.h). */
    tps_megatron_as_hf *mg = NULL;
    if (!a->config && tps_megatron_is_checkpoint(src)) {
        if (tps_megatron_as_hf_open(src, 0, &mg, &err)) return tps_cli_report(cmd, &err);
        tps_megatron_as_hf_note(cmd, mg);
    }
    const tps_preset *p = NULL;
    int rc = a->layout ? 0 : choose_preset(cmd, src, a, config, mg, &p);
    if (rc) {
        tps_megatron_as_hf_free(mg);
        return rc;
    }
    tps_plan_source_in in = {src, a->layout, p ? p->name : NULL, a->preset != NULL, config, mg, a->tp};
    tps_plan_source ps;
    tps_status st = tps_plan_source_open(&in, &ps, &err);
    *ix = ps.ix;
    *l = ps.l;
    *m = ps.m;
    rc = print_planned(cmd, src, &ps, config, beside, st, &err);
    tps_plan_source_release(&ps);
    return rc;
}

void tps_cli_print_plan(const tps_manifest *m, const struct tps_quant *q, bool json)
{
    if (json) {
        tps_buf b = TPS_BUF_INIT;
        if (tps_plan_json(m, q, &b) && tps_buf_cstr(&b)) printf("%s\n", b.data);
        tps_buf_release(&b);
        return;
    }
    uint64_t *rank_bytes = calloc(m->tp, sizeof *rank_bytes);
    if (!rank_bytes) return;
    for (size_t i = 0; i < m->ntensors; i++) {
        const tps_manifest_tensor *t = &m->tensors[i];
        char desc[256], gs[256], rs[256];
        uint64_t shape0[TPS_MAX_DIMS];
        tps_partition_describe(t->part, desc, sizeof desc);
        tps_shape_str(t->shape, t->ndim, gs, sizeof gs);
        tps_partition_rank_shape(t->part, t->ndim, t->shape, m->tp, 0, shape0);
        tps_shape_str(shape0, t->ndim, rs, sizeof rs);
        printf("%-56s %-5s %-18s -> %-18s %s   [%s]\n", t->name, tps_dtype_name(t->dtype), gs, rs, desc, t->rule);
    }
    tps_plan_rank_bytes(m, rank_bytes);
    for (uint64_t r = 0; r < m->tp; r++)
        printf("rank %llu: %llu bytes of tensor data\n", (unsigned long long)r, (unsigned long long)rank_bytes[r]);
    free(rank_bytes);
}
