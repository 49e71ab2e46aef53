/* tpshard inspect: list a checkpoint's tensors from its headers, without reading data; for
 * a shard-set directory, what its manifest says. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "commands.h"
#include "formats/open.h"
#include "formats/megatron.h"
#include "inspect_megatron.h"
#include "layout_args.h"
#include "lib/base.h"
#include "lib/layout.h"
#include "lib/set.h"
#include "lib/targets.h"

static const tps_opt inspect_opts[] = {
    {"json", 0, TPS_OPT_FLAG, &tps_common.json, NULL, "machine-readable output (for a shard set, its manifest)"},
    TPS_COMMON_OPTS,
    TPS_OPTS_END,
};

static void emit_json(const tps_index *ix, const uint64_t *dt_bytes, const uint64_t *dt_params,
                      uint64_t params, uint64_t bytes)
{
    tps_buf b = TPS_BUF_INIT;
    tps_jw w;
    tps_jw_init(&w, &b, true);
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "path");
    tps_jw_string(&w, ix->path);
    tps_jw_key(&w, "format");
    tps_jw_string(&w, ix->format);
    tps_jw_key(&w, "files");
    tps_jw_array_begin(&w);
    for (size_t i = 0; i < ix->nfiles; i++) {
        tps_jw_object_begin(&w);
        tps_jw_key(&w, "path");
        tps_jw_string(&w, ix->files[i].path);
        tps_jw_key(&w, "bytes");
        tps_jw_u64(&w, ix->files[i].size);
        tps_jw_object_end(&w);
    }
    tps_jw_array_end(&w);
    tps_jw_key(&w, "metadata");
    tps_jw_object_begin(&w);
    for (size_t i = 0; i < ix->nmeta; i++) {
        tps_jw_key(&w, ix->meta[i].key);
        tps_jw_string(&w, ix->meta[i].value);
    }
    tps_jw_object_end(&w);
    tps_jw_key(&w, "tensors");
    tps_jw_array_begin(&w);
    for (size_t i = 0; i < ix->ntensors; i++) {
        const tps_tensor *t = &ix->tensors[i];
        tps_jw_object_begin(&w);
        tps_jw_tensor_head(&w, t->name, t->dtype, t->ndim, t->shape);
        tps_jw_key(&w, "elements");
        tps_jw_u64(&w, t->nelem);
        tps_jw_key(&w, "bytes");
        tps_jw_u64(&w, t->nbytes);
        tps_jw_key(&w, "file");
        tps_jw_string(&w, ix->files[t->file].path);
        tps_jw_object_end(&w);
    }
    tps_jw_array_end(&w);
    tps_jw_key(&w, "totals");
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "tensors");
    tps_jw_u64(&w, ix->ntensors);
    tps_jw_key(&w, "parameters");
    tps_jw_u64(&w, params);
    tps_jw_key(&w, "bytes");
    tps_jw_u64(&w, bytes);
    tps_jw_key(&w, "by_dtype");
    tps_jw_object_begin(&w);
    for (int d = 0; d < TPS_DT_COUNT; d++) {
        if (!dt_params[d] && !dt_bytes[d]) continue;
        tps_jw_key(&w, tps_dtype_name((tps_dtype)d));
        tps_jw_object_begin(&w);
        tps_jw_key(&w, "parameters");
        tps_jw_u64(&w, dt_params[d]);
        tps_jw_key(&w, "bytes");
        tps_jw_u64(&w, dt_bytes[d]);
        tps_jw_object_end(&w);
    }
    tps_jw_object_end(&w);
    tps_jw_object_end(&w);
    tps_jw_object_end(&w);
    const char *s = tps_buf_cstr(&b);
    if (s) printf("%s\n", s);
    tps_buf_release(&b);
}

static void print_human(const tps_index *ix, const uint64_t *dt_bytes, const uint64_t *dt_params,
                        uint64_t params, uint64_t bytes)
{
    printf("%s: %s, %zu file%s, %zu tensor%s\n", ix->path, ix->format, ix->nfiles, ix->nfiles == 1 ? "" : "s",
           ix->ntensors, ix->ntensors == 1 ? "" : "s");
    for (size_t i = 0; i < ix->nmeta; i++) printf("  metadata %s = %s\n", ix->meta[i].key, ix->meta[i].value);
    for (size_t i = 0; i < ix->ntensors; i++) {
        const tps_tensor *t = &ix->tensors[i];
        char shape[256];
        tps_shape_str(t->shape, t->ndim, shape, sizeof shape);
        printf("  %-60s %-11s %-22s %12llu bytes\n", t->name, tps_dtype_name(t->dtype), shape,
               (unsigned long long)t->nbytes);
    }
    printf("total: %llu parameters, %llu bytes\n", (unsigned long long)params, (unsigned long long)bytes);
    for (int d = 0; d < TPS_DT_COUNT; d++)
        if (dt_params[d] || dt_bytes[d])
            printf("  %-11s %llu parameters, %llu bytes\n", tps_dtype_name((tps_dtype)d),
                   (unsigned long long)dt_params[d], (unsigned long long)dt_bytes[d]);
}

/* A shard set is described by its manifest alone (checked strictly on load; `check` reads the
 * files): --json prints the manifest itself, else a summary and the cut of every tensor in
 * the form `plan` uses. */
static int inspect_shard_set(const char *dir)
{
    tps_error err;
    tps_error_clear(&err);
    tps_manifest *m = NULL;
    if (tps_adopt_is_engine_set(dir)) { /* a set vLLM or SGLang saved: read through the adopter */
        tps_shardset *ss;
        if (tps_shardset_open(dir, &ss, &err) != TPS_OK) return tps_cli_report("inspect", &err);
        m = ss->m;
        ss->m = NULL;
        tps_shardset_free(ss);
    } else if (tps_target_manifest_load(dir, &m, &err) != TPS_OK) {
        return tps_cli_report("inspect", &err);
    }
    if (tps_common.json) {
        tps_buf b = TPS_BUF_INIT;
        tps_status st = tps_manifest_to_json(m, &b, &err);
        if (st == TPS_OK && !tps_buf_cstr(&b)) st = tps_fail_oom(&err, "inspect");
        if (st == TPS_OK) fputs(b.data, stdout); /* it ends with a newline */
        tps_buf_release(&b);
        tps_manifest_free(m);
        return st ? tps_cli_report("inspect", &err) : 0;
    }
    uint64_t bytes = 0;
    for (size_t i = 0; i < m->nfiles; i++) bytes += m->files[i].size;
    if (m->adopted)
        printf("%s: %s sharded_state set saved by the engine (no tpshard.json; read with config.json as %s, no "
               "CRCs recorded)\n",
               dir, m->target, m->layout_name);
    printf("%s: tpshard shard set, tp %llu, %zu file%s (%llu bytes), %zu tensor%s\n", dir, (unsigned long long)m->tp,
           m->nfiles, m->nfiles == 1 ? "" : "s", (unsigned long long)bytes, m->ntensors, m->ntensors == 1 ? "" : "s");
    printf("  made by %s with layout %s from %s (%s, %llu bytes)\n", m->tool, m->layout_name, m->source.path,
           m->source.format, (unsigned long long)m->source.bytes);
    if (m->config_path) printf("  config keys recorded from %s\n", m->config_path);
    if (m->pp > 1) {
        printf("  pipeline: %llu stages of", (unsigned long long)m->pp);
        for (uint64_t p = 0; p < m->pp; p++)
            printf("%s%llu", p ? "," : " ", (unsigned long long)(m->pp_first[p + 1] - m->pp_first[p]));
        printf(" layers (tp %llu x pp %llu)\n", (unsigned long long)m->tp, (unsigned long long)m->pp);
    }
    uint64_t experts = tps_grid_ep_experts(m);
    if (experts) {
        uint64_t per = experts / m->tp;
        printf("  expert parallel: %llu experts a layer, %llu whole on each rank (tp %llu x ep %llu; vLLM "
               "--enable-expert-parallel):",
               (unsigned long long)experts, (unsigned long long)per, (unsigned long long)m->tp,
               (unsigned long long)m->tp);
        for (uint64_t r = 0; r < m->tp && r < 8; r++)
            printf("%s rank %llu %llu-%llu", r ? "," : "", (unsigned long long)r, (unsigned long long)(r * per),
                   (unsigned long long)((r + 1) * per - 1));
        printf("%s\n", m->tp > 8 ? ", ..." : "");
    }
    char *quant = NULL;
    if (m->config_keys &&
        tps_layout_quant_summary(m->config_keys, strlen(m->config_keys), TPS_MANIFEST_NAME, &quant, &err) == TPS_OK &&
        quant)
        printf("  quantization: %s\n", quant);
    free(quant);
    /* what the set does not hold: merge cannot restore these (buffers, a target's skip:) */
    for (size_t i = 0; i < m->nskipped; i++)
        printf("  skipped: %llu tensor%s %s (%s)\n", (unsigned long long)m->skipped[i].count,
               m->skipped[i].count == 1 ? "" : "s", m->skipped[i].glob, m->skipped[i].reason);
    if (!tps_manifest_holds_all(m)) {
        char held[256];
        tps_manifest_held_str(m, held, sizeof held);
        printf("  partial set: ranks %s of %llu are here; the other ranks' files are on other nodes\n", held,
               (unsigned long long)m->tp);
    }
    for (size_t i = 0; i < m->nfiles; i++) {
        char stage[32] = "";
        if (m->pp > 1) snprintf(stage, sizeof stage, "  stage %llu", (unsigned long long)m->files[i].pp_rank);
        printf("  rank %-4llu part %-3llu %-48s %12llu bytes  crc32 %08x%s%s\n", (unsigned long long)m->files[i].rank,
               (unsigned long long)m->files[i].part, m->files[i].name, (unsigned long long)m->files[i].size,
               (unsigned)m->files[i].crc, stage, tps_manifest_holds(m, m->files[i].rank) ? "" : "  (not here)");
    }
    tps_cli_print_plan(m, NULL, false);
    tps_manifest_free(m);
    return 0;
}

static int run_inspect(char **args, int nargs)
{
    (void)nargs;
    tps_error err;
    tps_error_clear(&err);
    tps_index *ix = NULL;
    /* A Megatron checkpoint tpshard wrote has a tpshard.json too, naming files in its rank
     * directories, which the plain shard-set view does not take: show it as Megatron's. */
    if (tps_megatron_is_checkpoint(args[0])) return tps_inspect_megatron(args[0], tps_common.json);
    if (tps_is_shard_set(args[0]) || tps_adopt_is_engine_set(args[0])) return inspect_shard_set(args[0]);
    char part_of[TPS_ERROR_MSG_MAX]; /* one file of a multi-file checkpoint is shown, and said to be one */
    if (tps_checkpoint_open_part(args[0], &ix, part_of, sizeof part_of, &err) != TPS_OK)
        return tps_cli_report("inspect", &err);
    if (*part_of && !tps_common.quiet) fprintf(stderr, "tpshard inspect: note: %s (inspect the directory or the index for the whole model)\n", part_of);
    uint64_t dt_bytes[TPS_DT_COUNT] = {0}, dt_params[TPS_DT_COUNT] = {0}, params = 0, bytes = 0;
    /* Readers bound every tensor by its file, so these sums stay far below 2^64. */
    for (size_t i = 0; i < ix->ntensors; i++) {
        const tps_tensor *t = &ix->tensors[i];
        dt_bytes[t->dtype] += t->nbytes;
        dt_params[t->dtype] += t->nelem;
        params += t->nelem;
        bytes += t->nbytes;
    }
    if (tps_common.json) {
        emit_json(ix, dt_bytes, dt_params, params, bytes);
    } else {
        print_human(ix, dt_bytes, dt_params, params, bytes);
        /* The scheme config.json beside the checkpoint declares (what split will follow). */
        char cfg[4200], *quant = NULL;
        struct stat sb;
        const char *slash = strrchr(args[0], '/');
        if (stat(args[0], &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(cfg, sizeof cfg, "%s/config.json", args[0]);
        else snprintf(cfg, sizeof cfg, "%.*sconfig.json", slash ? (int)(slash - args[0] + 1) : 0, args[0]);
        if (tps_layout_quant_summary(NULL, 0, cfg, &quant, &err) == TPS_OK && quant) printf("quantization: %s\n", quant);
        free(quant);
    }
    tps_index_free(ix);
    return 0;
}

const tps_cmd tps_cmd_inspect = {
    .name = "inspect",
    .summary = "list a checkpoint's tensors, dtypes, shapes and totals (headers only)",
    .usage = "inspect PATH [--json]",
    .details = "PATH is a safetensors file, a Hugging Face multi-file directory or index,\n"
               "a torch.save .bin archive, an .npz/.npy file, or a shard set's rank file.\n"
               "A Megatron-LM checkpoint directory (holding latest_checkpointed_iteration.txt,\n"
               "or an iter_*/release directory of mp_rank_* folders) is shown with its TP x PP\n"
               "grid, iteration, model args and every rank file's model tensors.\n"
               "A shard-set directory (holding tpshard.json) is shown from its manifest: source,\n"
               "layout, files, and every tensor's cut as `plan` prints it; --json prints the\n"
               "manifest.  `tpshard check` reads the files themselves.\n",
    .opts = inspect_opts,
    .min_args = 1,
    .max_args = 1,
    .run = run_inspect,
};
