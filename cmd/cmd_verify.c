/* tpshard verify: run layers the tensor-parallel way on CPU or GPU ranks, in this process or
 * one MPI process per rank, and compare them with the unsharded layer in float64
 * (verify/verify.h).  Under MPI every process runs this same command; rank 0 prints. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "formats/open/checkpoint.h"
#include "formats/open/shardset.h"
#include "inputs.h"
#include "junit_report.h"
#include "lib/base/buf.h"
#include "lib/base/iocache.h"
#include "lib/base/json.h"
#include "lib/layout/layout.h"
#include "lib/set/manifest.h"
#include "progress.h"
#include "verify_progress.h"
#include "verify/driver/config_source.h"
#include "verify/driver/report.h"
#include "verify/verify.h"

static struct {
    const char *source, *config, *layer, *backend, *launcher, *dump, *dump_logits;
    bool emulate, whole;
    uint64_t tokens, seed;
    double rtol, atol;
} o = {.tokens = 16, .seed = 1};

static const tps_opt verify_opts[] = {
    {"source", 0, TPS_OPT_STRING, &o.source, "SRC", "reference weights from this checkpoint (default: the shards)"},
    {"config", 0, TPS_OPT_STRING, &o.config, "FILE", "config.json (default: the keys recorded in the manifest)"},
    {"layer", 0, TPS_OPT_STRING, &o.layer, "L|all", "layer to verify (default all)"},
    {"tokens", 0, TPS_OPT_UINT, &o.tokens, "N", "sequence length of the random input (default 16)"},
    {"seed", 0, TPS_OPT_UINT, &o.seed, "S", "seed of the random input (default 1)"},
    {"backend", 0, TPS_OPT_STRING, &o.backend, "NAME", "cpu (default), cuda (a GPU a rank, NCCL), devsim, mpi"},
    {"launcher", 0, TPS_OPT_STRING, &o.launcher, "HOW", "auto (mpi under mpirun; the default), local or mpi"},
    {"emulate", 0, TPS_OPT_FLAG, &o.emulate, NULL, "cuda, devsim: ranks share fewer devices"},
    {"rtol", 0, TPS_OPT_DOUBLE, &o.rtol, "X", "relative tolerance (default by shard dtype)"},
    {"atol", 0, TPS_OPT_DOUBLE, &o.atol, "X", "absolute tolerance (default rtol * RMS of the reference)"},
    {"dump-reference", 0, TPS_OPT_STRING, &o.dump, "FILE", "write inputs and float64 reference outputs as JSON"},
    {"whole-model", 0, TPS_OPT_FLAG, &o.whole, NULL, "embedding, layers chained, LM head: compare logits"},
    {"dump-logits", 0, TPS_OPT_STRING, &o.dump_logits, "FILE", "--whole-model: write the logits as JSON"},
    {"json", 0, TPS_OPT_FLAG, &tps_common.json, NULL, "machine-readable report"},
    {"junit", 0, TPS_OPT_STRING, &tps_junit_path, "FILE", "also write a JUnit XML report: a case per layer"},
    TPS_COMMON_OPTS,
    TPS_OPTS_END,
};

static void print_layer(const tps_verify_result *r)
{
    const tps_verify_stage *a = &r->stage[TPS_VSTAGE_ATTN], *m = &r->stage[TPS_VSTAGE_MLP];
    printf("layer %-4llu %-5s rtol %.2g  attention: max abs %.3g rel %.3g (atol %.3g)  mlp: max abs %.3g rel %.3g "
           "(atol %.3g)  %.3f s  %s\n",
           (unsigned long long)r->layer, tps_dtype_name(r->dtype), a->rtol, a->max_abs, a->rel, a->atol, m->max_abs,
           m->rel, m->atol, r->seconds, r->pass ? "ok" : "MISMATCH");
    if (r->upload_bytes > 0)
        printf("  device: uploaded %.4g GB at %.2f GB/s, layer %.3f ms\n", r->upload_bytes / 1e9,
               r->upload_seconds > 0 ? r->upload_bytes / r->upload_seconds / 1e9 : 0.0, r->layer_seconds * 1e3);
    if (!r->pass) printf("  %s\n", r->detail);
}

static void print_whole(const tps_verify_whole *r)
{
    const tps_verify_stage *e = &r->embed_cmp, *l = &r->logits_cmp;
    printf("whole model %-5s rtol %.2g  embedding: max abs %.3g (atol %.3g)  logits: max abs %.3g rel %.3g (atol "
           "%.3g)  top-1 %llu/%llu agree%s  %.3f s  %s\n",
           tps_dtype_name(r->chain.dtype), l->rtol, e->max_abs, e->atol, l->max_abs, l->rel, l->atol,
           (unsigned long long)r->top1_agree, (unsigned long long)r->tokens, r->top1_ties ? " (ties within atol)" : "",
           r->seconds, r->pass ? "ok" : "MISMATCH");
    if (!r->pass) printf("  %s\n", r->detail);
}

/* --backend and --launcher into a backend configuration; false on a usage error. */
static bool backend_config(tps_vbackend_config *c)
{
    const char *backend = o.backend ? o.backend : "cpu";
    memset(c, 0, sizeof *c);
    c->launcher = TPS_VLAUNCH_AUTO;
    if (o.launcher) {
        if (strcmp(o.launcher, "local") == 0) c->launcher = TPS_VLAUNCH_LOCAL;
        else if (strcmp(o.launcher, "mpi") == 0) c->launcher = TPS_VLAUNCH_MPI;
        else if (strcmp(o.launcher, "auto") != 0) {
            tps_cli_usage("verify", "unknown launcher '%s' (auto, local or mpi)", o.launcher);
            return false;
        }
    }
    if (strcmp(backend, "cuda") == 0) c->device = TPS_VDEV_CUDA;
    else if (strcmp(backend, "devsim") == 0) c->device = TPS_VDEV_DEVSIM;
    else if (strcmp(backend, "mpi") == 0) {
        if (c->launcher == TPS_VLAUNCH_LOCAL) {
            tps_cli_usage("verify", "--backend mpi runs one rank per MPI process: not with --launcher local");
            return false;
        }
        c->launcher = TPS_VLAUNCH_MPI;
    } else if (strcmp(backend, "cpu") != 0) {
        tps_cli_usage("verify", "unknown backend '%s' (cpu, cuda, devsim or mpi)", backend);
        return false;
    }
    if (o.emulate && c->device == TPS_VDEV_CPU) {
        tps_cli_usage("verify", "--emulate shares devices between ranks: it needs --backend cuda or devsim");
        return false;
    }
    c->emulate = o.emulate;
    return true;
}

static int run_verify(char **args, int nargs)
{
    (void)nargs;
    const char *dir = args[0];
    tps_error err;
    tps_error_clear(&err);
    /* verify maps its large tensors from the files (verify/math/vbuf.h); one cut short
     * meanwhile is an I/O failure, not a crash */
    tps_io_exit_on_shrunk_mapping("tpshard verify: a shard or checkpoint file shrank while verify read it "
                                  "through a mapping (did another process rewrite it?)\n",
                                  TPS_EXIT_IO);
    tps_status st = TPS_OK;
    tps_shardset *ss = NULL;
    tps_layout *l = NULL;
    tps_index *src_ix = NULL, *shape_ix = NULL;
    tps_vsource *ranks = NULL;
    tps_vrank_src *rsrc = NULL;
    char *config = NULL;
    FILE *dump = NULL;
    tps_buf jb = TPS_BUF_INIT, db = TPS_BUF_INIT;
    tps_jw jw, dw;
    uint64_t first = 0, count = 0, failed_layer = 0;
    bool all_pass = true;
    tps_verify_result bad;
    memset(&bad, 0, sizeof bad);
    tps_verify_whole whole;
    memset(&whole, 0, sizeof whole);
    tps_vbackend *be = NULL;
    tps_vbackend_config bcfg;
    tps_vbackend_info info;
    tps_cmd_layer_progress lp;
    memset(&lp, 0, sizeof lp);

    if (!backend_config(&bcfg)) return TPS_EXIT_USAGE;
    uint64_t tokens = o.tokens;
    if (tokens == 0 || tokens > 4096) {
        tps_cli_errorf("verify", "--tokens %llu: from 1 to 4096", (unsigned long long)tokens);
        return TPS_EXIT_USAGE;
    }
    if (o.layer && strcmp(o.layer, "all") != 0) {
        /* A number too large to parse is beyond the model's layers: said once they are counted. */
        bool digits = o.layer[0] && strspn(o.layer, "0123456789") == strlen(o.layer);
        if (!tps_parse_u64(o.layer, &first) && !(digits && (first = UINT64_MAX)))
            return tps_cli_usage("verify", "--layer '%s': a layer number (from 0) or 'all'", o.layer);
        count = 1;
    }
    if (o.whole && o.layer)
        return tps_cli_usage("verify", "--whole-model runs every layer: it takes no --layer");
    if (o.dump_logits && !o.whole) return tps_cli_usage("verify", "--dump-logits needs --whole-model");
    /* Input files named by options exist before a backend is asked for (a missing file is exit
     * 3, whatever the backend would have said). */
    char *option_inputs[] = {(char *)o.source, (char *)o.config};
    int missing = tps_cli_require_inputs("verify", option_inputs, 2);
    if (missing) return missing;
    /* First, so that under MPI every later failure is agreed between the processes. */
    TPS_CHECK(tps_vbackend_open(&bcfg, &be, &err));
    /* Under MPI only rank 0 reports. */
    bool root = tps_vbackend_is_root(be), json = tps_common.json && root, quiet = tps_common.quiet || !root;
    if (!root) tps_cli_junit_silence();

    TPS_CHECK(tps_shardset_open(dir, &ss, &err));
    TPS_CHECK(tps_vdriver_layout(dir, ss, o.config, o.source, &l, &config, &err));
    if (o.source) TPS_CHECK(tps_checkpoint_open(o.source, &src_ix, &err));
    tps_block b;
    TPS_CHECK(tps_vdriver_block(dir, ss, l, src_ix, &shape_ix, &b, &err));

    uint64_t T = ss->m->tp;
    ranks = calloc(T, sizeof *ranks);
    rsrc = calloc(T, sizeof *rsrc);
    if (!ranks || !rsrc) {
        st = tps_fail_oom(&err, "the rank table");
        goto cleanup;
    }
    for (uint64_t r = 0; r < T; r++) {
        const tps_index *rix;
        if (!tps_vbackend_holds_rank(be, r)) continue;
        TPS_CHECK(tps_shardset_open_rank(ss, r, &rix, &err));
        rsrc[r] = (tps_vrank_src){ss, rix};
        ranks[r] = tps_vsource_rank(&rsrc[r]);
    }
    tps_vsource ref = src_ix ? tps_vsource_index(src_ix) : tps_vsource_shardset(ss);
    uint64_t nlayers;
    TPS_CHECK(tps_verify_count_layers(&b, &ref, &nlayers, &err));
    if (!count) count = nlayers;
    else if (first >= nlayers) {
        st = tps_fail(&err, TPS_EARG, "--layer %s: the model has %llu layer%s (0 to %llu)", o.layer,
                      (unsigned long long)nlayers, nlayers == 1 ? "" : "s",
                      (unsigned long long)(nlayers - 1));
        goto cleanup;
    }
    TPS_CHECK(tps_vbackend_start(be, T, st, &err));
    tps_vbackend_get_info(be, &info);
    tps_cli_junit_property("path", dir);
    tps_cli_junit_property("backend", info.desc);

    char refdesc[4200];
    if (o.source) snprintf(refdesc, sizeof refdesc, "reference from %s", o.source);
    else snprintf(refdesc, sizeof refdesc, "reference reassembled from shards");
    if (o.dump && root) {
        dump = fopen(o.dump, "w");
        if (!dump) {
            st = tps_fail_errno(&err, errno, "%s: cannot create", o.dump);
            goto cleanup;
        }
        tps_vreport_dump_begin(&dw, &db);
    }
    tps_jw_init(&jw, &jb, true);
    if (json) {
        tps_vreport_run run = {dir, T, &info, &b, o.source, config, tokens, o.seed, o.whole};
        tps_vreport_begin(&jw, &run);
    } else if (!quiet) {
        printf("verify %s%s: %s block, tp %llu, backend %s, %llu %s, seed %llu; %s\n", dir,
               o.whole ? " (whole model)" : "", tps_block_kind_name(b.kind), (unsigned long long)T, info.desc,
               (unsigned long long)tokens, o.whole ? "random token ids" : "tokens", (unsigned long long)(o.seed),
               refdesc);
        if (tps_common.verbose)
            printf("hyper-parameters from %s: norm eps %g, RoPE theta %g, rotary fraction %g\n", config, b.norm_eps,
                   b.rope_theta, b.rotary_pct);
        fflush(stdout);
    }
    tps_verify_opts vo = {.backend = be, .tokens = tokens, .seed = o.seed, .rtol = o.rtol, .atol = o.atol,
                          .keep_reference = dump != NULL, .shards = ss, .on_stage = tps_cmd_layer_progress_stage,
                          .stage_arg = &lp};
    uint64_t layers_run = 0, checked_tensors = 0, checked_bytes = 0, mismatched = 0;
    /* The whole model: the embedding before the layers, which then carry its output on. */
    tps_verify_opts wo = vo;
    wo.on_stage = NULL;
    wo.keep_reference = o.dump_logits != NULL;
    if (o.whole) {
        TPS_CHECK(tps_verify_whole_begin(&b, T, &ref, ranks, &wo, &whole, &err));
        vo.chain = &whole.chain;
    }
    tps_cmd_layer_progress_begin(&lp, ss->m, &b, first, count, root);
    for (uint64_t layer = first; layer < first + count; layer++) {
        tps_verify_result res;
        tps_cmd_layer_progress_at(&lp, layer - first, false);
        TPS_CHECK(tps_verify_layer(&b, layer, T, &ref, ranks, &vo, &res, &err));
        tps_cmd_layer_progress_at(&lp, layer - first, true);
        layers_run++;
        checked_tensors += res.checked_tensors;
        checked_bytes += res.checked_bytes;
        tps_cli_junit_layer(&res);
        if (json) {
            tps_vreport_layer(&jw, &res);
        } else if (root && (!quiet || !res.pass)) {
            tps_progress_suspend(&lp.s);
            print_layer(&res);
        }
        if (layer + 1 < first + count) tps_cmd_layer_progress_at(&lp, layer + 1 - first, false);
        fflush(stdout);
        if (dump) tps_vreport_dump_layer(&dw, layer, &res);
        mismatched += !res.pass;
        if (!res.pass && all_pass) {
            all_pass = false;
            failed_layer = layer;
            bad = res;
            bad.x = NULL;
            bad.ref_out[0] = bad.ref_out[1] = NULL;
        }
        tps_verify_result_release(&res);
    }
    tps_cmd_layer_progress_end(&lp);
    if (o.whole) {
        TPS_CHECK(tps_verify_whole_end(&b, T, &ref, ranks, &wo, &whole, &err));
        checked_tensors += whole.checked_tensors;
        checked_bytes += whole.checked_bytes;
        if (root && !json && (!quiet || !whole.pass)) print_whole(&whole);
        tps_cli_junit_whole(&whole);
        if (root && o.dump_logits) TPS_CHECK(tps_vreport_write_logits(o.dump_logits, &whole, &err));
    }
    /* A pass must have run something: every layer asked for, each with tensors checked. */
    if (root && (layers_run == 0 || layers_run != count || checked_tensors == 0)) {
        st = tps_fail(&err, TPS_EINVALID, "%s: nothing was verified (%llu of %llu layers run, %llu tensors checked)",
                      dir, (unsigned long long)layers_run, (unsigned long long)count,
                      (unsigned long long)checked_tensors);
        goto cleanup;
    }
    if (json) {
        tps_vreport_checked c = {layers_run, T, checked_tensors, checked_bytes, mismatched};
        tps_vreport_end(&jw, &c, o.whole ? &whole : NULL, all_pass && (!o.whole || whole.pass));
        if (tps_buf_cstr(&jb)) printf("%s\n", jb.data);
    } else if (!quiet && all_pass && o.whole && whole.pass) {
        printf("whole model verified: the shards compute the unsharded model's logits\n");
    } else if (!quiet && all_pass && !o.whole) {
        printf("%llu layer%s verified: the shards compute the unsharded layer\n", (unsigned long long)count,
               count == 1 ? "" : "s");
    }
    if (!json && root && (!quiet || !all_pass || (o.whole && !whole.pass))) {
        if (o.whole)
            printf("checked: embedding, %llu layer%s, final norm and LM head (%s) on %llu ranks, %llu token%s, "
                   "%llu logits compared (vocabulary %llu, padded to %llu); ",
                   (unsigned long long)layers_run, layers_run == 1 ? "" : "s", whole.tied ? "tied" : "untied",
                   (unsigned long long)T, (unsigned long long)whole.tokens, whole.tokens == 1 ? "" : "s",
                   (unsigned long long)(whole.tokens * whole.vocab), (unsigned long long)whole.vocab,
                   (unsigned long long)whole.padded_vocab);
        else
            printf("checked: %llu layer%s on %llu ranks, ", (unsigned long long)layers_run, layers_run == 1 ? "" : "s",
                   (unsigned long long)T);
        printf("%llu shard tensors (%llu bytes) matching the manifest's checksums; layers that differ: %llu\n",
               (unsigned long long)checked_tensors, (unsigned long long)checked_bytes, (unsigned long long)mismatched);
    }
    if (dump) {
        tps_vreport_dump_end(&dw);
        const char *s = tps_buf_cstr(&db);
        if (!s || fputs(s, dump) == EOF || fputc('\n', dump) == EOF || fclose(dump) != 0) {
            dump = NULL;
            st = tps_fail(&err, TPS_EIO, "%s: cannot write the reference dump", o.dump);
            goto cleanup;
        }
        dump = NULL;
    }
    if (!all_pass) {
        const tps_verify_stage *fs = &bad.stage[bad.failed_stage];
        tps_cli_errorf("verify", "mismatch in layer %llu, %s stage (max abs err %.3g, rel err %.3g; rtol %.3g, atol %.3g): %s",
                       (unsigned long long)failed_layer, tps_verify_stage_name(bad.failed_stage), fs->max_abs, fs->rel,
                       fs->rtol, fs->atol, bad.detail);
        st = TPS_EMISMATCH;
    } else if (o.whole && root && !whole.pass) {
        const tps_verify_stage *fs = strcmp(whole.failed, "embedding") == 0 ? &whole.embed_cmp : &whole.logits_cmp;
        tps_cli_errorf("verify", "mismatch in the whole model, %s stage (max abs err %.3g, rel err %.3g; rtol %.3g, "
                       "atol %.3g): %s",
                       whole.failed, fs->max_abs, fs->rel, fs->rtol, fs->atol, whole.detail);
        st = TPS_EMISMATCH;
    }
cleanup:
    tps_cmd_layer_progress_end(&lp);
    /* Every process ends with the same status; a failure of another process is reported by
     * that process alone. */
    st = tps_vbackend_finish(be, st, &err);
    /* Reported before the backend closes: under MPI, closing lets the other processes exit. */
    int rc = tps_cli_exit_code(st);
    /* A numeric mismatch was reported above; one of the shards' bytes (err set) was not. */
    if (st != TPS_OK && (st != TPS_EMISMATCH || err.code == TPS_EMISMATCH) && !tps_vbackend_failed_elsewhere(be))
        rc = tps_cli_report("verify", &err);
    tps_vbackend_close(be);
    if (dump) fclose(dump);
    tps_buf_release(&jb);
    tps_buf_release(&db);
    free(ranks);
    free(rsrc);
    free(config);
    tps_index_free(src_ix);
    tps_index_free(shape_ix);
    tps_layout_free(l);
    tps_shardset_free(ss);
    tps_verify_whole_release(&whole);
    return rc;
}

const tps_cmd tps_cmd_verify = {
    .name = "verify",
    .summary = "run layers the tensor-parallel way on CPU or GPU ranks and compare with the unsharded layer",
    .usage = "verify DIR [--source SRC] [--layer L|all | --whole-model] [--tokens N] [--seed S] [--backend cpu|cuda|devsim|mpi] [--emulate] [--json] [--junit FILE]",
    .details =
        "Each rank (a thread) loads only its own shard file's slices of the layer and computes in\n"
        "float32: its q heads with their KV heads, its o_proj rows, an all-reduce, its MLP slices and\n"
        "a second all-reduce.  The slices are read by the standard TP convention (rank r holds q heads\n"
        "r*H/T.., KV heads r*KV/T.. or a replica, intermediate columns r*I/T.., fused [q;k;v] and\n"
        "[gate;up] as the concatenation of its pieces, full row-parallel biases), as an inference\n"
        "engine reads them.  The reference is the same layer in float64 from --source, or from the\n"
        "shards reassembled.  The attention and MLP block outputs (before their residual adds) are\n"
        "compared on random inputs: pass when every element is within atol + rtol*|ref|.  rtol by\n"
        "shard dtype: BF16 1.6e-2, F16 1e-3, F32 1e-5; atol = rtol * RMS of the reference output.\n"
        "On a mismatch the report names the first stage that differs and the rank whose slice\n"
        "causes it: a slice of the wrong shape, or the rank whose partial sum differs from the\n"
        "reference computed for that rank's share.  Exit 1 on a mismatch, 5 for a backend that is\n"
        "not built in or has no device.\n"
        "Backends: cpu runs each rank as a thread; cuda runs each rank's GEMMs on its own GPU (its\n"
        "slices uploaded in the shard dtype, cuBLAS with float32 accumulation, NCCL all-reduce), the\n"
        "rest of the layer math on the host exactly as cpu does; it refuses fewer GPUs than ranks\n"
        "unless --emulate, which lets ranks share GPUs and sums them on the device in rank order\n"
        "(the report says NCCL was not exercised).  devsim is cuda's device primitives in host\n"
        "memory (libtpshard-devsim.so), to test that path without a GPU.\n"
        "Under `mpirun -np T tpshard verify DIR` (detected from\n"
        "the launcher's environment, or --launcher mpi) each process is one rank: MPI_Allreduce on\n"
        "the cpu backend, NCCL from a broadcast unique id on cuda (GPU by node-local rank); rank 0\n"
        "prints the report and every process exits with the same code.\n"
        "--whole-model runs the model from random token ids (below the true vocabulary size, from\n"
        "--seed): the vocabulary-parallel embedding (rank r holds rows r*Vp/T.. of the vocabulary\n"
        "padded at its end to Vp, a multiple of T; lookups summed over ranks), every layer chained,\n"
        "the final norm and the vocabulary-parallel LM head (gathered, padding dropped; tied to the\n"
        "embedding when the model has no lm_head), and compares the logits with the float64\n"
        "model's, plus each position's top-1 token; --dump-logits FILE writes both as JSON.\n"
        "Model hyper-parameters (RoPE theta, norm epsilon, top-k) come from --config, else from the\n"
        "config.json keys the manifest recorded at split time, else a config.json next to SRC or in\n"
        "DIR, else the block kind's defaults; -v and --json say which.\n",
    .opts = verify_opts,
    .min_args = 1,
    .max_args = 1,
    .run = run_verify,
};
