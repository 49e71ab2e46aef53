/* A refusal printed grouped by cause, with what would work (cmd/refusal.h). */
#include "refusal.h"

#include <stdio.h>

#include "cli.h"
#include "lib/base.h"
#include "lib/set.h"

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
