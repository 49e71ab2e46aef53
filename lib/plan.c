#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"

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

tps_status tps_plan_build(const tps_index *ix, tps_layout *l, const char *layout_name, uint64_t tp,
                          tps_manifest **out, tps_buf *problems, tps_buf *unused, tps_error *err)
{
    *out = NULL;
    tps_status st = TPS_OK, first = TPS_OK;
    size_t nproblems = 0;
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
        tps_manifest_tensor *t = &m->tensors[m->ntensors];
        tps_error e;
        tps_error_clear(&e);
        size_t rule = 0;
        tps_status ts = tps_layout_partition(l, x->name, x->dtype, x->ndim, x->shape, &t->part, &rule, &e);
        if (ts == TPS_OK)
            ts = tps_partition_check_rule(&t->part, x->name, x->dtype, x->ndim, x->shape, tp,
                                          tps_layout_rule_label(l, rule), &e);
        if (ts != TPS_OK) {
            if (ts != TPS_EINVALID && ts != TPS_EARG) { /* out of memory: stop */
                st = tps_fail(err, ts, "%s", e.msg);
                goto cleanup;
            }
            if (first == TPS_OK) {
                first = ts;
                tps_fail(err, ts, "%s", e.msg);
            }
            nproblems++;
            tps_buf_printf(problems, "%s\n", e.msg);
            continue;
        }
        t->name = strdup(x->name);
        t->rule = strdup(tps_layout_rule_label(l, rule));
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
    for (size_t r = 0; r < tps_layout_rule_count(l); r++)
        if (tps_layout_rule_matches(l, r) == 0) tps_buf_printf(unused, "%s\n", tps_layout_rule_label(l, r));
    if (problems->oom || unused->oom) {
        st = tps_fail_oom(err, "planning");
        goto cleanup;
    }
    if (first != TPS_OK) {
        st = first;
        if (nproblems > 1 && err) {
            size_t n = strlen(err->msg);
            snprintf(err->msg + n, sizeof err->msg - n, " (and %zu more problem%s)", nproblems - 1,
                     nproblems > 2 ? "s" : "");
        }
        goto cleanup;
    }
    *out = m;
    m = NULL;
cleanup:
    tps_manifest_free(m);
    return st;
}
