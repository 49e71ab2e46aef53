#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/checked.h"
#include "../quant/quant.h"

#ifndef TPS_VERSION
#define TPS_VERSION "0.1.0"
#endif

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

tps_status tps_plan_source_info(tps_manifest *m, const tps_index *ix, tps_error *err)
{
    m->source.path = strdup(ix->path);
    m->source.format = strdup(ix->format);
    m->source.files = calloc(ix->nfiles + 1, sizeof *m->source.files);
    if (!m->source.path || !m->source.format || !m->source.files) return tps_fail_oom(err, "describing the source");
    for (size_t i = 0; i < ix->nfiles; i++) {
        m->source.files[i].name = strdup(base_name(ix->files[i].path));
        if (!m->source.files[i].name) return tps_fail_oom(err, "describing the source");
        m->source.files[i].size = ix->files[i].size;
        m->source.nfiles = i + 1;
        m->source.bytes += ix->files[i].size; /* file sizes: cannot overflow in practice, checked anyway */
        if (m->source.bytes < ix->files[i].size) return tps_fail(err, TPS_EINVALID, "source size overflows");
    }
    return TPS_OK;
}

/* The skip: entries that matched, with their counts, as the manifest's "skipped". */
static tps_status record_skipped(tps_manifest *m, const tps_layout *l, tps_error *err)
{
    size_t n = 0;
    for (size_t i = 0; i < tps_layout_skip_count(l); i++) n += tps_layout_skip_matches(l, i) > 0;
    if (!n) return TPS_OK;
    if (!(m->skipped = calloc(n, sizeof *m->skipped))) return tps_fail_oom(err, "planning");
    for (size_t i = 0; i < tps_layout_skip_count(l); i++) {
        if (!tps_layout_skip_matches(l, i)) continue;
        tps_manifest_skip *sk = &m->skipped[m->nskipped++];
        sk->count = tps_layout_skip_matches(l, i);
        sk->glob = strdup(tps_layout_skip_glob(l, i));
        sk->reason = strdup(tps_layout_skip_reason(l, i));
        if (!sk->glob || !sk->reason) return tps_fail_oom(err, "planning");
    }
    return TPS_OK;
}

tps_status tps_plan_build_grouped(const tps_index *ix, tps_layout *l, const char *layout_name, uint64_t tp,
                                  tps_manifest **out, tps_problems *problems, tps_buf *unused, tps_error *err)
{
    *out = NULL;
    tps_status st = TPS_OK, first = TPS_OK;
    tps_manifest *m = calloc(1, sizeof *m);
    if (!m) return tps_fail_oom(err, "planning");
    m->version = TPS_MANIFEST_VERSION;
    m->tp = tp;
    m->tool = strdup("tpshard " TPS_VERSION);
    m->layout_name = strdup(layout_name);
    m->layout_text = strdup(tps_layout_text(l));
    m->tensors = calloc(ix->ntensors + 1, sizeof *m->tensors);
    if (!m->tool || !m->layout_name || !m->layout_text || !m->tensors) {
        st = tps_fail_oom(err, "planning");
        goto cleanup;
    }
    TPS_CHECK(tps_plan_source_info(m, ix, err));
    for (size_t i = 0; i < ix->ntensors; i++) {
        const tps_tensor *x = &ix->tensors[i];
        /* Before the rules: a buffer no loader reads (inv_freq, GPT-2's attention masks) is
         * no weight to cut, whatever rule might also match its name. */
        if (tps_layout_skip_match(l, x->name) != SIZE_MAX) continue;
        tps_manifest_tensor *t = &m->tensors[m->ntensors];
        tps_error e;
        tps_error_clear(&e);
        size_t rule = SIZE_MAX;
        tps_partition_issue issue = {0};
        const char *label = NULL;
        bool follows = false;
        tps_partition part;
        tps_status ts = tps_layout_partition_tensor(l, ix, x, &part, &rule, &follows, &e);
        if (ts == TPS_OK) {
            label = tps_layout_rule_label(l, rule);
            tps_problems_consider(problems, &part, x->dtype, x->ndim, x->shape);
            ts = tps_partition_diagnose(&part, x->name, x->dtype, x->ndim, x->shape, tp, &issue, &e);
            if (ts != TPS_OK && label) {
                size_t n = strlen(e.msg);
                snprintf(e.msg + n, sizeof e.msg - n, "; rule %s", label);
            }
        }
        if (ts != TPS_OK) {
            if (ts != TPS_EINVALID && ts != TPS_EARG) { /* out of memory: stop */
                st = tps_fail(err, ts, "%s", e.msg);
                goto cleanup;
            }
            if (first == TPS_OK) first = ts;
            if (follows && label) continue; /* its quantized weight's refusal says it */
            char missing[128] = "";
            tps_problem_kind kind = TPS_PROBLEM_TP;
            if (rule == SIZE_MAX) {
                kind = TPS_PROBLEM_NO_RULE;
            } else if (!label) {
                label = tps_layout_rule_label(l, rule);
                tps_layout_rule_missing_sizes(l, rule, missing, sizeof missing);
                kind = missing[0] ? TPS_PROBLEM_SIZES : TPS_PROBLEM_OTHER;
            }
            if (kind == TPS_PROBLEM_TP) tps_quant_issue_terms(tps_layout_quant(l), x->name, &issue);
            tps_problems_add(problems, kind, x->name, label, kind == TPS_PROBLEM_TP ? &issue : NULL, missing, e.msg);
            continue;
        }
        TPS_CHECK(tps_manifest_set_part(m, t, &part, err));
        t->name = strdup(x->name);
        t->rule = strdup(label);
        if (!t->name || !t->rule) {
            free(t->name);
            free(t->rule);
            st = tps_fail_oom(err, "planning");
            goto cleanup;
        }
        t->dtype = x->dtype;
        t->ndim = x->ndim;
        memcpy(t->shape, x->shape, sizeof t->shape);
        t->nbytes = x->nbytes;
        m->ntensors++;
    }
    TPS_CHECK(record_skipped(m, l, err));
    for (size_t r = 0; r < tps_layout_rule_count(l); r++)
        if (tps_layout_rule_matches(l, r) == 0) tps_buf_printf(unused, "%s\n", tps_layout_rule_label(l, r));
    if (unused->oom) {
        st = tps_fail_oom(err, "planning");
        goto cleanup;
    }
    if (first != TPS_OK) {
        TPS_CHECK(tps_problems_finish(problems, err));
        tps_buf line = TPS_BUF_INIT;
        tps_problem_line(&problems->v[0], tps_layout_sizes(l), &line);
        const char *text = tps_buf_cstr(&line);
        if (problems->n > 1)
            tps_fail(err, first, "%s (and %zu more cause%s)", text ? text : "", problems->n - 1, problems->n > 2 ? "s" : "");
        else
            tps_fail(err, first, "%s", text ? text : "");
        tps_buf_release(&line);
        st = first;
        goto cleanup;
    }
    *out = m;
    m = NULL;
cleanup:
    tps_manifest_free(m);
    return st;
}

tps_status tps_plan_build(const tps_index *ix, tps_layout *l, const char *layout_name, uint64_t tp,
                          tps_manifest **out, tps_buf *problems, tps_buf *unused, tps_error *err)
{
    tps_problems ps;
    tps_problems_init(&ps, tp);
    tps_status st = tps_plan_build_grouped(ix, l, layout_name, tp, out, &ps, unused, err);
    for (size_t i = 0; i < ps.n; i++) {
        tps_problem_line(&ps.v[i], tps_layout_sizes(l), problems);
        tps_buf_putc(problems, '\n');
    }
    if (st == TPS_OK && problems->oom) st = tps_fail_oom(err, "planning");
    tps_problems_free(&ps);
    return st;
}
