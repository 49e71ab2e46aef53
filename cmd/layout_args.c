#include "layout_args.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "formats/open/checkpoint.h"
#include "formats/megatron/megatron_read.h"
#include "megatron_as_hf.h"
#include "lib/base/buf.h"
#include "lib/base/json.h"
#include "lib/engine/write_set.h"
#include "lib/layout/presets.h"
#include "lib/refusal/problems_sizes.h"
#include "lib/set/plan_report.h"
#include "lib/set/plan.h"
#include "lib/set/retarget.h"

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

/* --preset NAME that fits no tensor of a checkpoint whose config.json names another preset:
 * the user picked the wrong one, and one line saying which helps more than a warning per rule
 * of the wrong preset.  Whether config names a preset other than given's; if so the line. */
static bool other_preset_line(const char *cmd, const tps_preset *given, const tps_layout *l, const char *config)
{
    const tps_preset *named = NULL;
    char found[256];
    tps_error err;
    tps_error_clear(&err);
    if (!config || tps_preset_detect(config, &named, found, sizeof found, &err) != TPS_OK || !named ||
        named == given)
        return false;
    size_t narch = 0;
    const char *const *arch = tps_layout_architectures(l, &narch);
    const char *desc = tps_layout_description(l);
    tps_cli_errorf(cmd, "%s says %s (%s); --preset %s is for %s%s%s%s: pass --preset %s", config, named->name, found,
                   given->name, narch ? arch[0] : "another model", desc ? " (" : "", desc ? desc : "", desc ? ")" : "",
                   named->name);
    return true;
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
    if (!config) {
        struct stat sb;
        const char *slash = strrchr(src, '/');
        size_t n = strlen(src);
        while (n > 1 && src[n - 1] == '/') n--; /* src/ names the same directory: no src//config.json */
        if (stat(src, &sb) == 0 && S_ISDIR(sb.st_mode))
            snprintf(beside, sizeof beside, "%.*s/config.json", (int)n, src);
        else if (slash) snprintf(beside, sizeof beside, "%.*s/config.json", (int)(slash - src), src);
        else snprintf(beside, sizeof beside, "config.json");
        if (stat(beside, &sb) == 0 && S_ISREG(sb.st_mode)) {
            config = beside;
            if (tps_common.verbose) fprintf(stderr, "tpshard %s: sizes from %s\n", cmd, beside);
        }
    }
    /* A Megatron checkpoint is cut as the Hugging Face checkpoint it holds, with the preset
     * and config.json its args ask for (cmd/megatron_as_hf.h). */
    tps_megatron_as_hf *mg = NULL;
    if (!a->config && tps_megatron_is_checkpoint(src)) {
        if (tps_megatron_as_hf_open(src, 0, &mg, &err)) return tps_cli_report(cmd, &err);
        tps_megatron_as_hf_note(cmd, mg);
    }
    char name[4200];
    const tps_preset *p = NULL;
    if (a->layout) {
        if (tps_layout_load_file(a->layout, l, &err)) return tps_cli_report(cmd, &err);
        snprintf(name, sizeof name, "%s", a->layout);
    } else {
        int rc = a->preset || mg ? tps_cli_resolve_preset(cmd, a->preset ? a->preset : mg->preset, &p)
                                 : detect_preset(cmd, src, config, &p);
        if (rc) {
            tps_megatron_as_hf_free(mg);
            return rc;
        }
        if (tps_layout_load_preset(p->name, l, &err)) {
            tps_megatron_as_hf_free(mg);
            return tps_cli_report(cmd, &err);
        }
        /* The preset's own name, however it was asked for: the same cut records the same. */
        snprintf(name, sizeof name, "preset:%s", p->name);
    }
    char *config_keys = NULL;
    tps_status st;
    if (mg) {
        st = tps_layout_apply_config_text(*l, mg->config, strlen(mg->config), "the config.json from the checkpoint's args",
                                          &config_keys, &err);
        if (st == TPS_OK) st = tps_megatron_as_hf_index(mg, ix, &err); /* owns mg from here */
        else tps_megatron_as_hf_free(mg);
        mg = NULL;
    } else {
        if (config && tps_layout_read_config(*l, config, &config_keys, &err)) return tps_cli_report(cmd, &err);
        st = tps_checkpoint_open(src, ix, &err);
    }
    if (st == TPS_OK) st = tps_layout_infer_sizes(*l, *ix, &err);
    if (st) {
        free(config_keys);
        return tps_cli_report(cmd, &err);
    }
    tps_buf unused = TPS_BUF_INIT;
    tps_problems problems;
    tps_problems_init(&problems, a->tp);
    st = tps_plan_build_grouped(*ix, *l, name, a->tp, m, &problems, &unused, &err);
    if (st == TPS_OK && config_keys) {
        /* The manifest keeps what the sizes and block came from: verify needs no config.json. */
        (*m)->config_keys = config_keys;
        config_keys = NULL;
        if (config && !((*m)->config_path = strdup(config))) st = tps_fail_oom(&err, "planning");
    }
    free(config_keys);
    bool wrong_preset = (st == TPS_EINVALID || st == TPS_EARG) && a->preset &&
                        tps_problems_count_kind(&problems, TPS_PROBLEM_NO_RULE) &&
                        other_preset_line(cmd, p, *l, config);
    if (unused.len && !tps_common.quiet && !wrong_preset) print_lines(cmd, "warning: layout rule matched no tensor: ", unused.data);
    for (size_t i = 0; st == TPS_OK && !tps_common.quiet && i < (*m)->nskipped; i++) {
        const tps_manifest_skip *sk = &(*m)->skipped[i];
        fprintf(stderr, "tpshard %s: skipped %llu tensor%s: %s (%s)\n", cmd, (unsigned long long)sk->count,
                sk->count == 1 ? "" : "s", sk->glob, sk->reason);
    }
    if (st == TPS_OK && !tps_common.quiet) {
        tps_buf note = TPS_BUF_INIT;
        tps_plan_marlin_line(*m, tps_layout_quant(*l), &note);
        if (note.len && tps_buf_cstr(&note)) fprintf(stderr, "tpshard %s: note: %s\n", cmd, note.data);
        tps_buf_release(&note);
    }
    if (wrong_preset) {
        /* said above */
    } else if ((st == TPS_EINVALID || st == TPS_EARG) && problems.n) {
        tps_cli_print_problems(cmd, src, "the layout does not fit this checkpoint", &problems, tps_layout_sizes(*l),
                               config ? NULL : beside, tps_common.json);
    } else if (st) {
        tps_cli_report(cmd, &err);
    }
    tps_problems_free(&problems);
    tps_buf_release(&unused);
    return tps_cli_exit_code(st);
}

void tps_cli_print_problems(const char *cmd, const char *src, const char *summary, const tps_problems *ps,
                            const tps_model_sizes *sizes, const char *no_config, bool json)
{
    tps_buf line = TPS_BUF_INIT, missing = TPS_BUF_INIT, hint = TPS_BUF_INIT;
    size_t shown = 0, hidden = 0, nsizes;
    uint64_t sized = tps_problems_missing_sizes(ps, &missing, &nsizes);
    for (size_t i = 0; i < ps->n; i++) {
        const tps_problem *g = &ps->v[i];
        if (g->kind == TPS_PROBLEM_SIZES) continue; /* one line for them all, below */
        if (shown == TPS_CLI_PROBLEM_LINES) {
            hidden++;
            continue;
        }
        tps_buf_reset(&line);
        tps_problem_line(g, sizes, &line);
        const char *text = tps_buf_cstr(&line);
        if (!json) tps_cli_errorf(cmd, "%s", text ? text : "(out of memory)");
        shown++;
    }
    if (hidden && !json)
        tps_cli_errorf(cmd, "... and %zu more cause%s (plan --json lists them all)", hidden, hidden == 1 ? "" : "s");
    if (nsizes) {
        const char *names = tps_buf_cstr(&missing);
        if (no_config)
            tps_buf_printf(&hint, "no config.json beside %s; pass --config FILE (unknown sizes: %s, needed by %llu tensor%s)",
                           src, names ? names : "?", (unsigned long long)sized, sized == 1 ? "" : "s");
        else
            tps_buf_printf(&hint, "sizes %s are unknown (needed by %llu tensor%s): give them under sizes: in the layout, "
                           "in config.json, or with an infer: hint", names ? names : "?", (unsigned long long)sized,
                           sized == 1 ? "" : "s");
        if (!json) tps_cli_errorf(cmd, "%s", tps_buf_cstr(&hint) ? hint.data : "");
    }
    /* What would work: a tp that fits, or what to change in the layout. */
    tps_buf_reset(&line);
    if (ps->fit_known) {
        tps_problems_fit_line(ps, &line);
    } else if (tps_problems_count_kind(ps, TPS_PROBLEM_NO_RULE)) {
        tps_buf_puts(&line, "pass the --preset NAME or --layout FILE made for this model (tpshard layout --list)");
    } else if (nsizes) {
        tps_buf_puts(&line, no_config ? "pass --config FILE" : "give the sizes");
    } else {
        tps_buf_puts(&line, "fix the layout (--layout FILE) or pick the --preset NAME made for this model");
    }
    const char *what = tps_buf_cstr(&line);
    size_t causes = ps->n - nsizes + (nsizes ? 1 : 0); /* the unknown sizes were one line */
    if (!json || !tps_common.quiet)
        fprintf(stderr, "tpshard %s: %s: %s at tp %llu (%llu tensor%s, %zu cause%s); %s\n", cmd, src, summary,
                (unsigned long long)ps->tp, (unsigned long long)ps->total, ps->total == 1 ? "" : "s", causes,
                causes == 1 ? "" : "s", what ? what : "");
    if (json) {
        tps_buf b = TPS_BUF_INIT;
        tps_jw w;
        tps_jw_init(&w, &b, true);
        tps_jw_object_begin(&w);
        tps_jw_key(&w, "tp");
        tps_jw_u64(&w, ps->tp);
        tps_jw_key(&w, "source");
        tps_jw_string(&w, src);
        tps_jw_key(&w, "fits");
        tps_jw_bool(&w, false);
        tps_problems_json(ps, sizes, &w);
        tps_jw_key(&w, "hint");
        const char *h = hint.len ? tps_buf_cstr(&hint) : what;
        tps_jw_string(&w, h ? h : "");
        tps_jw_object_end(&w);
        if (tps_buf_cstr(&b)) printf("%s\n", b.data);
        tps_buf_release(&b);
    }
    tps_buf_release(&line);
    tps_buf_release(&missing);
    tps_buf_release(&hint);
}

int tps_cli_retarget(const char *cmd, const char *dir, const tps_manifest *src, uint64_t tp, bool keep_placement,
                     tps_manifest **out)
{
    tps_error err;
    tps_error_clear(&err);
    tps_problems ps;
    tps_problems_init(&ps, tp);
    tps_status st = tps_manifest_retarget_placed(src, tp, keep_placement, out, &ps, &err);
    if ((st == TPS_EINVALID || st == TPS_EARG) && ps.n) {
        tps_model_sizes sizes;
        tps_error ignored;
        tps_error_clear(&ignored);
        bool named = tps_manifest_sizes(src, &sizes, &ignored) == TPS_OK; /* only to name heads: best effort */
        tps_cli_print_problems(cmd, dir, "the shard set's layout does not fit", &ps, named ? &sizes : NULL, NULL,
                               tps_common.json);
    } else if (st) {
        tps_cli_report(cmd, &err);
    }
    tps_problems_free(&ps);
    return tps_cli_exit_code(st);
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
