#include "write_set.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../targets/target.h"
#include "publish.h"
#include "side_files.h"

tps_status tps_tp_check(uint64_t tp, const char *what, tps_error *err)
{
    if (tp < 1 || tp > TPS_MAX_TP)
        return tps_fail(err, TPS_EARG, "%s %llu: the tensor-parallel size must be from 1 to %u", what,
                        (unsigned long long)tp, TPS_MAX_TP);
    return TPS_OK;
}

/* One decimal rank below tp at *s; advances *s. */
static bool parse_rank(const char **s, uint64_t tp, uint64_t *out)
{
    const char *p = *s;
    uint64_t v = 0;
    if (*p < '0' || *p > '9') return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (uint64_t)(*p - '0');
        if (v >= tp) return false; /* also stops an overflow: tp <= TPS_MAX_TP */
    }
    *s = p;
    *out = v;
    return true;
}

tps_status tps_rank_list_parse(const char *s, uint64_t tp, bool **out, tps_error *err)
{
    *out = NULL;
    bool *flags = calloc(tp ? tp : 1, sizeof *flags);
    if (!flags) return tps_fail_oom(err, "reading --only-rank");
    const char *p = s;
    bool ok = *p != '\0';
    while (ok && *p) {
        uint64_t a, b;
        ok = parse_rank(&p, tp, &a);
        b = a;
        if (ok && *p == '-') {
            p++;
            ok = parse_rank(&p, tp, &b) && b >= a;
        }
        for (uint64_t r = a; ok && r <= b; r++) flags[r] = true;
        if (ok && *p == ',') ok = *++p != '\0';
        else if (ok && *p) ok = false;
    }
    if (!ok) {
        free(flags);
        return tps_fail(err, TPS_EARG,
                        "--only-rank '%s': expected ranks below %llu separated by commas, or ranges such as 0-3", s,
                        (unsigned long long)tp);
    }
    *out = flags;
    return TPS_OK;
}

tps_status tps_write_set(tps_manifest *m, tps_global_read_fn read, void *ctx, const tps_write_opts *o,
                         tps_error *err)
{
    tps_status st = TPS_OK;
    tps_cut_files *files = NULL;
    tps_outdir *od = NULL;
    bool *write_rank = NULL;
    tps_cut_opts co = o->cut;
    if (o->kind == TPS_OUT_FILE) {
        const char *slash = o->out ? strrchr(o->out, '/') : NULL;
        co.name_template = slash ? slash + 1 : o->out;
        co.max_part_bytes = 0;
    }
    TPS_CHECK(tps_tp_check(m->tp, "tp", err));
    if (o->only_ranks) {
        TPS_CHECK(tps_rank_list_parse(o->only_ranks, m->tp, &write_rank, err));
        bool all = true;
        for (uint64_t r = 0; r < m->tp; r++) all = all && write_rank[r];
        if (!all) {
            co.write_rank = write_rank;
            free(m->held);
            if (!(m->held = malloc(m->tp * sizeof *m->held))) {
                st = tps_fail_oom(err, "recording the ranks written");
                goto cleanup;
            }
            memcpy(m->held, write_rank, m->tp * sizeof *m->held);
        }
    }
    TPS_CHECK(tps_cut_files_plan(m, &co, &files, err));
    if (o->dry_run) goto cleanup;
    tps_signals_install();
    TPS_CHECK(tps_outdir_begin(o->out, o->kind, o->force, o->inputs, &od, err));
    TPS_CHECK(tps_cut(m, files, read, ctx, od, &co, err));
    if (o->side_files) TPS_CHECK(tps_copy_side_files(o->side_files, od, err));
    if (o->before_publish) TPS_CHECK(o->before_publish(od, o->before_publish_arg, err));
    if (o->kind == TPS_OUT_SHARDSET) TPS_CHECK(tps_publish_shardset(m, od, err));
    else TPS_CHECK(tps_outdir_commit(od, err));
    tps_outdir_free(od);
    od = NULL;
cleanup:
    tps_outdir_abort(od);
    tps_cut_files_free(files);
    free(write_rank);
    return st;
}
