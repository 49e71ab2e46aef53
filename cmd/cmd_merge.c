/* tpshard merge: put a shard set back together, bit-exact, padding stripped. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "commands.h"
#include "formats/safetensors.h"
#include "formats/open.h"
#include "lib/registry.h"
#include "lib/set.h"
#include "megatron_hf.h"
#include "output_args.h"

static struct {
    uint64_t max_shard;
    const char *out;
    bool force;
    const char *target;
} o;

static const tps_opt merge_opts[] = {
    {"output", 'o', TPS_OPT_STRING, &o.out, "FILE|DIR",
     "FILE.safetensors for one file, or a directory for a Hugging Face multi-file set"},
    {"max-shard-size", 0, TPS_OPT_SIZE, &o.max_shard, "SIZE", "largest file of a directory output (default 5GB)"},
    {"force", 'f', TPS_OPT_FLAG, &o.force, NULL, "replace a file or an earlier merged directory"},
    {"target", 0, TPS_OPT_STRING, &o.target, "hf", "a Megatron-LM checkpoint as a Hugging Face model"},
    TPS_COMMON_OPTS,
    TPS_OPTS_END,
};

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int run_merge(char **args, int nargs)
{
    (void)nargs;
    if (!o.out) return tps_cli_usage("merge", "-o FILE|DIR is required");
    /* One file is named *.safetensors; a directory exists or is asked for with a trailing
     * '/': anything else is more likely a slip (-o model.bin) than a wish for a directory,
     * except with --target hf, whose output is a model directory by definition. */
    struct stat sb;
    bool is_dir = stat(o.out, &sb) == 0 && S_ISDIR(sb.st_mode);
    tps_outdir_kind kind = TPS_OUT_CHECKPOINT;
    if (ends_with(o.out, ".safetensors") && !is_dir) kind = TPS_OUT_FILE;
    else if (!is_dir && !ends_with(o.out, "/") && !o.target)
        return tps_cli_usage("merge",
                             "-o %s: name a FILE.safetensors for one file, or a directory (an existing one, or "
                             "'%s/' to create it) for a Hugging Face multi-file checkpoint",
                             o.out, o.out);
    if (kind == TPS_OUT_FILE && o.max_shard)
        return tps_cli_usage("merge", "--max-shard-size applies to a directory output, not to %s", o.out);
    const tps_target_entry *e = o.target ? tps_target_find(o.target) : NULL;
    if (o.target && !(e && (e->caps & TPS_TARGET_MERGE))) {
        char names[64];
        return tps_cli_usage("merge", "--target '%s': expected %s (a Megatron-LM checkpoint as a Hugging Face model)",
                             o.target, tps_target_names(TPS_TARGET_MERGE, names, sizeof names));
    }
    if (o.target) {
        tps_megatron_merge_opts mo = {o.out, kind == TPS_OUT_FILE, o.max_shard, 0, o.force};
        return tps_cli_merge_hf(args[0], &mo);
    }
    tps_error err;
    tps_error_clear(&err);
    tps_shardset *ss = NULL;
    tps_manifest *m = NULL;
    int rc = 0;
    if (tps_shardset_open(args[0], &ss, &err) || tps_manifest_unsharded(ss->m, &m, &err)) {
        rc = tps_cli_report("merge", &err);
        goto done;
    }
    ss->compare_replicas = true;
    const char *inputs[] = {ss->dir, NULL};
    tps_progress_state ps;
    tps_write_opts wo = tps_cli_write_opts(o.out, o.force, inputs, NULL, NULL,
                                           kind == TPS_OUT_FILE ? 0 : o.max_shard ? o.max_shard : 5000000000ull, &ps);
    wo.kind = kind;
    wo.cut.checkpoint = true;
    wo.cut.sink = &tps_safetensors_checkpoint_sink; /* laid out as the safetensors library does */
    wo.cut.tensor_done = tps_shardset_source_check;
    wo.cut.tensor_done_arg = ss;
    wo.cut.locate = tps_shardset_source_locate;
    rc = tps_cli_write("merge", m, tps_shardset_source_read, ss, &wo);
    /* The set never held them, so the merged checkpoint lacks what the source had: say so,
     * lest a diff against the source look like a loss. */
    for (size_t i = 0; rc == 0 && !tps_common.quiet && i < ss->m->nskipped; i++) {
        const tps_manifest_skip *sk = &ss->m->skipped[i];
        fprintf(stderr, "tpshard merge: not restored: %llu tensor%s %s (%s), which the split skipped\n",
                (unsigned long long)sk->count, sk->count == 1 ? "" : "s", sk->glob, sk->reason);
    }
    if (rc == 0 && !tps_common.quiet)
        printf("merged %s (tp %llu, %zu tensors) into %s\n", args[0], (unsigned long long)ss->m->tp, ss->m->ntensors,
               o.out);
done:
    tps_manifest_free(m);
    tps_shardset_free(ss);
    return rc;
}

const tps_cmd tps_cmd_merge = {
    .name = "merge",
    .summary = "reassemble the full checkpoint from a shard set, bit-exact",
    .usage = "merge DIR -o FILE.safetensors|DIR/ [--max-shard-size SIZE]",
    .details = "Padding is stripped.  Every byte read is checked against the manifest's CRCs and\n"
               "replicas are compared; a mismatch is exit 1 naming the tensor and the file or\n"
               "ranks, and nothing is written.  A directory output must exist or end in '/'.\n"
               "Tensors the split skipped (buffers such as rotary_emb.inv_freq, not weights) are\n"
               "not restored; stderr says which.\n"
               "--target hf merges a Megatron-LM checkpoint into a Hugging Face model: Llama-style\n"
               "names (q/k/v ungrouped, gate/up separated), the vocabulary padding removed, and\n"
               "config.json from the checkpoint's args (Llama, Qwen2 with qkv biases, Mixtral),\n"
               "written into DIR or beside FILE.safetensors.\n",
    .opts = merge_opts,
    .min_args = 1,
    .max_args = 1,
    .run = run_merge,
};
