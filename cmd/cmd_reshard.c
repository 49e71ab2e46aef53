/* tpshard reshard: turn an N-rank shard set into an M-rank one, from the shards alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "layout_args.h"
#include "output_args.h"
#include "progress.h"
#include "formats/shardset.h"

static struct {
    uint64_t tp;
    const char *out;
    const char *only;
    const char *name_template;
    const char *target;
    const char *target_version;
    uint64_t max_shard;
    bool force;
} o;

static const tps_opt reshard_opts[] = {
    {"tp", 0, TPS_OPT_UINT, &o.tp, "M", "the new tensor-parallel size"},
    {"output", 'o', TPS_OPT_STRING, &o.out, "DIR", "output directory (must not exist or be empty)"},
    {"max-shard-size", 0, TPS_OPT_SIZE, &o.max_shard, "SIZE", "cut each rank into parts of at most SIZE"},
    {"target", 0, TPS_OPT_STRING, &o.target, "NAME", "tpshard, vllm or sglang (default: DIR's)"},
    {"target-version", 0, TPS_OPT_STRING, &o.target_version, "V", "the engine release (default: DIR's)"},
    {"name-template", 0, TPS_OPT_STRING, &o.name_template, "T", "file names with {rank}, {tp}, {part}"},
    {"only-rank", 0, TPS_OPT_STRING, &o.only, "R[,R...]", "write only these ranks (full manifest)"},
    {"force", 'f', TPS_OPT_FLAG, &o.force, NULL, "replace an earlier shard set (nothing else)"},
    TPS_COMMON_OPTS,
    TPS_OPTS_END,
};

/* The source set by the new manifest's numbering: laying a set out for another target
 * reorders its tensors (a fused tensor's members side by side). */
typedef struct reshard_source {
    tps_shardset *ss;
    size_t *src; /* per new manifest tensor, its index in the source set's */
} reshard_source;

static tps_status read_source(void *ctx, size_t i, uint64_t off, void *buf, size_t len, tps_error *err)
{
    const reshard_source *s = ctx;
    return tps_shardset_source_read(s->ss, s->src[i], off, buf, len, err);
}

static tps_status check_source(void *ctx, size_t i, uint32_t crc, tps_error *err)
{
    const reshard_source *s = ctx;
    return tps_shardset_source_check(s->ss, s->src[i], crc, err);
}

static int run_reshard(char **args, int nargs)
{
    (void)nargs;
    const char *dir = args[0];
    if (!o.out) return tps_cli_usage("reshard", "-o DIR is required");
    tps_error err;
    tps_error_clear(&err);
    if (tps_tp_check(o.tp, "--tp", &err)) return tps_cli_report("reshard", &err);
    int rc = 0;
    tps_shardset *ss = NULL;
    tps_manifest *m = NULL;
    reshard_source source = {NULL, NULL};
    if (tps_shardset_open(dir, &ss, &err)) {
        rc = tps_cli_report("reshard", &err);
        goto done;
    }
    if ((rc = tps_cli_retarget("reshard", dir, ss->m, o.tp, &m)) != 0) goto done;
    /* The set's own target unless --target names another; the engine's padding is redone at M. */
    const char *target = o.target ? o.target : m->target;
    if (o.target_version && !target) {
        rc = tps_cli_usage("reshard", "--target-version needs --target vllm or sglang (an engine's release)");
        goto done;
    }
    if (target && (rc = tps_cli_apply_target("reshard", target, o.target_version, m)) != 0) goto done;
    ss->compare_replicas = true;
    if (!(source.src = calloc(m->ntensors + 1, sizeof *source.src))) {
        tps_fail_oom(&err, "resharding");
        rc = tps_cli_report("reshard", &err);
        goto done;
    }
    source.ss = ss;
    for (size_t i = 0; i < m->ntensors; i++) /* every name is the source's: retarget copied them */
        source.src[i] = (size_t)(tps_manifest_find(ss->m, m->tensors[i].name) - ss->m->tensors);
    const char *inputs[] = {dir, NULL};
    tps_progress_state ps;
    tps_write_opts wo = tps_cli_write_opts(o.out, o.force, inputs, o.only, o.name_template, o.max_shard, &ps);
    wo.cut.tensor_done = check_source;
    wo.cut.tensor_done_arg = &source;
    char *side = NULL;
    if (m->target) tps_cli_target_write_opts(&wo, dir, o.max_shard, &side);
    rc = tps_cli_write("reshard", m, read_source, &source, &wo);
    free(side);
    if (rc == 0 && !tps_common.quiet)
        printf("resharded %s from tp %llu to tp %llu in %s\n", dir, (unsigned long long)ss->m->tp,
               (unsigned long long)m->tp, o.out);
done:
    free(source.src);
    tps_manifest_free(m);
    tps_shardset_free(ss);
    return rc;
}

const tps_cmd tps_cmd_reshard = {
    .name = "reshard",
    .summary = "turn an N-rank shard set into M ranks, from the shards alone",
    .usage = "reshard DIR --tp M -o DIR2 [--max-shard-size SIZE] [--name-template T]",
    .details = "Any M for which every tensor's partition is valid works (8->4, 4->8, 2->6 where heads\n"
               "allow).  KV replication and vocabulary padding are redone for M.  A set written\n"
               "with --target keeps its target (fused names, the engine's padding, config.json and\n"
               "tokenizer copied) unless --target names another (tpshard: the source's names),\n"
               "and its engine release unless --target-version names another.\n",
    .opts = reshard_opts,
    .min_args = 1,
    .max_args = 1,
    .run = run_reshard,
};
