#include "retarget.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tps_status tps_manifest_sizes(const tps_manifest *m, tps_model_sizes *out, tps_error *err)
{
    memset(out, 0, sizeof *out);
    if (!m->layout_text) return TPS_OK;
    tps_layout *l = NULL;
    tps_status st = tps_layout_parse(m->layout_text, strlen(m->layout_text), m->layout_name ? m->layout_name : "layout",
                                     &l, err);
    if (st == TPS_OK && m->config_keys)
        st = tps_layout_apply_config_text(l, m->config_keys, strlen(m->config_keys), TPS_MANIFEST_NAME, NULL, err);
    if (st == TPS_OK) *out = *tps_layout_sizes(l);
    tps_layout_free(l);
    return st;
}

tps_status tps_manifest_retarget(const tps_manifest *src, uint64_t tp, tps_manifest **out, tps_problems *problems,
                                 tps_error *err)
{
    return tps_manifest_retarget_placed(src, tp, true, out, problems, err);
}

tps_status tps_manifest_retarget_placed(const tps_manifest *src, uint64_t tp, bool keep_placement, tps_manifest **out,
                                        tps_problems *problems, tps_error *err)
{
    *out = NULL;
    tps_status st = TPS_OK, first = TPS_OK;
    tps_manifest *m = calloc(1, sizeof *m);
    if (!m) return tps_fail_oom(err, "resharding");
    *m = (tps_manifest){.version = TPS_MANIFEST_VERSION,
                        .tp = tp,
                        .tool = strdup(src->tool),
                        .layout_name = strdup(src->layout_name),
                        .layout_text = strdup(src->layout_text),
                        .config_path = src->config_path ? strdup(src->config_path) : NULL,
                        .config_keys = src->config_keys ? strdup(src->config_keys) : NULL,
                        .target = src->target ? strdup(src->target) : NULL,
                        .target_version = src->target_version ? strdup(src->target_version) : NULL,
                        .source = {strdup(src->source.path), strdup(src->source.format), src->source.bytes, 0, NULL},
                        .tensors = calloc(src->ntensors + 1, sizeof *m->tensors),
                        /* the tensors keep their names, rules and partitions (checked at tp
                         * below): shared with src, not copied */
                        .strings = src->strings ? tps_strpool_ref(src->strings) : NULL,
                        .parts = src->parts ? tps_partpool_ref(src->parts) : NULL};
    m->source.files = calloc(src->source.nfiles + 1, sizeof *m->source.files);
    if (!m->tool || !m->layout_name || !m->layout_text || !m->source.path || !m->source.format || !m->tensors ||
        !m->source.files || !m->config_path != !src->config_path || !m->config_keys != !src->config_keys || !m->target != !src->target ||
        !m->target_version != !src->target_version) {
        st = tps_fail_oom(err, "resharding");
        goto cleanup;
    }
    if (src->nskipped && !(m->skipped = calloc(src->nskipped, sizeof *m->skipped))) {
        st = tps_fail_oom(err, "resharding");
        goto cleanup;
    }
    for (size_t i = 0; i < src->nskipped; i++) {
        tps_manifest_skip *sk = &m->skipped[m->nskipped++];
        *sk = (tps_manifest_skip){strdup(src->skipped[i].glob), src->skipped[i].count, strdup(src->skipped[i].reason)};
        if (!sk->glob || !sk->reason) {
            st = tps_fail_oom(err, "resharding");
            goto cleanup;
        }
    }
    for (size_t i = 0; i < src->source.nfiles; i++) {
        m->source.files[i].name = strdup(src->source.files[i].name);
        m->source.files[i].size = src->source.files[i].size;
        m->source.nfiles = i + 1;
        if (!m->source.files[i].name) {
            st = tps_fail_oom(err, "resharding");
            goto cleanup;
        }
    }
    for (size_t i = 0; i < src->ntensors; i++) {
        const tps_manifest_tensor *s = &src->tensors[i];
        tps_error e;
        tps_error_clear(&e);
        tps_partition_issue issue;
        /* without its placement a whole-on-one-rank tensor is checked (and kept) on its TP cut */
        tps_partition cut;
        const tps_partition *p = s->part;
        if (!keep_placement && p->owners && !p->replicated) {
            cut = *p;
            cut.owners = cut.owner = 0;
            p = &cut;
        }
        tps_problems_consider(problems, p, s->dtype, s->ndim, s->shape);
        tps_status ts = tps_partition_diagnose(p, s->name, s->dtype, s->ndim, s->shape, tp, &issue, &e);
        if (ts != TPS_OK) {
            if (first == TPS_OK) first = ts;
            tps_problems_add(problems, TPS_PROBLEM_TP, s->name, s->rule, &issue, NULL, e.msg);
            continue;
        }
        tps_manifest_tensor *t = &m->tensors[m->ntensors++];
        *t = *s; /* name and rule in the shared pool, when src has one */
        if (!m->strings) {
            t->name = strdup(s->name);
            t->rule = strdup(s->rule);
        }
        t->target_name = s->target_name ? strdup(s->target_name) : NULL;
        t->crc = 0;
        if (!t->name || !t->rule || !t->target_name != !s->target_name) {
            st = tps_fail_oom(err, "resharding");
            goto cleanup;
        }
        if (p == &cut) TPS_CHECK(tps_manifest_set_part(m, t, &cut, err));
    }
    if (first != TPS_OK) {
        TPS_CHECK(tps_problems_finish(problems, err));
        tps_model_sizes sizes;
        tps_error ignored;
        tps_error_clear(&ignored);
        bool named = tps_manifest_sizes(src, &sizes, &ignored) == TPS_OK;
        tps_buf line = TPS_BUF_INIT;
        tps_problem_line(&problems->v[0], named ? &sizes : NULL, &line);
        const char *text = tps_buf_cstr(&line);
        if (problems->n > 1)
            tps_fail(err, first, "%s (and %zu more cause%s)", text ? text : "", problems->n - 1,
                     problems->n > 2 ? "s" : "");
        else
            tps_fail(err, first, "%s", text ? text : "");
        tps_buf_release(&line);
        st = first;
        goto cleanup;
    }
    if (problems->oom) {
        st = tps_fail_oom(err, "resharding");
        goto cleanup;
    }
    *out = m;
    m = NULL;
cleanup:
    tps_manifest_free(m);
    return st;
}
