/* tpshard verify: run layers the tensor-parallel way on CPU or GPU ranks, in this process or
 * one MPI process per rank, and compare them with the unsharded layer in float64
 * (verify/verify.h).  Under MPI every process runs this same command; rank 0 prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "inputs.h"
#include "junit_report.h"
#include "lib/base.h"
#include "progress.h"
#include "verify_progress.h"
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

/* How the command shows the run as it goes (verify/driver/run.h's observer). */
typedef struct shown {
    tps_cmd_layer_progress lp;
    bool root, json, quiet; /* under MPI only rank 0 reports */
} shown;

static void show_opened(void *arg, bool root)
{
    (void)arg;
    if (!root) tps_cli_junit_silence();
}

static void show_begin(void *arg, const tps_verify_run_info *run)
{
    shown *v = arg;
    v->root = run->root;
    v->json = tps_common.json && run->root;
    v->quiet = tps_common.quiet || !run->root;
    tps_cli_junit_property("path", run->dir);
    tps_cli_junit_property("backend", run->backend->desc);
    if (!v->json && !v->quiet) {
        const tps_block *b = run->block;
        char refdesc[4200];
        if (run->source) snprintf(refdesc, sizeof refdesc, "reference from %s", run->source);
        else snprintf(refdesc, sizeof refdesc, "reference reassembled from shards");
        printf("verify %s%s: %s block, tp %llu, backend %s, %llu %s, seed %llu; %s\n", run->dir,
               o.whole ? " (whole model)" : "", tps_block_kind_name(b->kind), (unsigned long long)run->tp,
               run->backend->desc, (unsigned long long)o.tokens, o.whole ? "random token ids" : "tokens",
               (unsigned long long)(o.seed), refdesc);
        printf("ranks' GEMM: %s; reference: %s\n", run->backend->gemm, run->backend->reference);
        if (tps_common.verbose)
            printf("hyper-parameters from %s: norm eps %g, RoPE theta %g, rotary fraction %g\n", run->config,
                   b->norm_eps, b->rope_theta, b->rotary_pct);
        fflush(stdout);
    }
    if (run->backend->blas_searched && run->root) /* once: the fast path is an install away */
        fprintf(stderr, "tpshard verify: warning: no BLAS found (looked for %s): the ranks' GEMMs run on plain loops, "
                "about 2 times slower; install OpenBLAS (Debian: apt-get install libopenblas0; pip: scipy-openblas32) "
                "or set TPSHARD_BLAS to a CBLAS library\n", run->backend->blas_searched);
    tps_cmd_layer_progress_begin(&v->lp, run->manifest, run->block, run->first, run->count, run->root);
}

static void show_at(void *arg, uint64_t i, bool done) { tps_cmd_layer_progress_at(&((shown *)arg)->lp, i, done); }

static void show_stage(void *arg, const char *stage) { tps_cmd_layer_progress_stage(&((shown *)arg)->lp, stage); }

static void show_layer(void *arg, const tps_verify_result *r)
{
    shown *v = arg;
    tps_cli_junit_layer(r);
    if (!v->json && v->root && (!v->quiet || !r->pass)) {
        tps_progress_suspend(&v->lp.s);
        print_layer(r);
    }
    fflush(stdout);
}

static void show_layers_end(void *arg) { tps_cmd_layer_progress_end(&((shown *)arg)->lp); }

static void show_whole(void *arg, const tps_verify_whole *w)
{
    shown *v = arg;
    if (v->root && !v->json && (!v->quiet || !w->pass)) print_whole(w);
    tps_cli_junit_whole(w);
}

/* The end of the report: the --json object, or what was verified and checked. */
static void show_report(void *arg, const tps_verify_outcome *out)
{
    shown *v = arg;
    const tps_verify_whole *w = &out->whole;
    uint64_t run = out->layers_run, T = out->tp;
    if (v->json) {
        if (out->json) printf("%s\n", out->json);
    } else if (!v->quiet && out->all_pass && o.whole && w->pass) {
        printf("whole model verified: the shards compute the unsharded model's logits\n");
    } else if (!v->quiet && out->all_pass && !o.whole) {
        printf("%llu layer%s verified: the shards compute the unsharded layer\n", (unsigned long long)out->count,
               out->count == 1 ? "" : "s");
    }
    if (v->json || !v->root || (v->quiet && out->all_pass && (!o.whole || w->pass))) return;
    if (o.whole)
        printf("checked: embedding, %llu layer%s, final norm and LM head (%s) on %llu ranks, %llu token%s, "
               "%llu logits compared (vocabulary %llu, padded to %llu); ",
               (unsigned long long)run, run == 1 ? "" : "s", w->tied ? "tied" : "untied", (unsigned long long)T,
               (unsigned long long)w->tokens, w->tokens == 1 ? "" : "s",
               (unsigned long long)(w->tokens * w->vocab), (unsigned long long)w->vocab,
               (unsigned long long)w->padded_vocab);
    else
        printf("checked: %llu layer%s on %llu ranks, ", (unsigned long long)run, run == 1 ? "" : "s",
               (unsigned long long)T);
    printf("%llu shard tensors (%llu bytes) matching the manifest's checksums; layers that differ: %llu\n",
           (unsigned long long)out->checked_tensors, (unsigned long long)out->checked_bytes,
           (unsigned long long)out->mismatched);
}

/* The options into a request; 0, or the exit code of a usage error (said). */
static int request(tps_verify_request *q)
{
    tps_error err;
    tps_error_clear(&err);
    *q = (tps_verify_request){.dir = NULL, .source = o.source, .config = o.config, .whole = o.whole,
                              .tokens = o.tokens, .seed = o.seed, .rtol = o.rtol, .atol = o.atol, .dump = o.dump,
                              .dump_logits = o.dump_logits, .json = tps_common.json};
    if (tps_vbackend_config_parse(o.backend, o.launcher, o.emulate, &q->backend, &err))
        return tps_cli_usage("verify", "%s", err.msg);
    if (o.tokens == 0 || o.tokens > 4096) {
        tps_cli_errorf("verify", "--tokens %llu: from 1 to 4096", (unsigned long long)o.tokens);
        return TPS_EXIT_USAGE;
    }
    if (o.layer && strcmp(o.layer, "all") != 0) {
        /* A number too large to parse is beyond the model's layers: said once they are counted. */
        bool digits = o.layer[0] && strspn(o.layer, "0123456789") == strlen(o.layer);
        if (!tps_parse_u64(o.layer, &q->first) && !(digits && (q->first = UINT64_MAX)))
            return tps_cli_usage("verify", "--layer '%s': a layer number (from 0) or 'all'", o.layer);
        q->layer = o.layer;
    }
    if (o.whole && o.layer) return tps_cli_usage("verify", "--whole-model runs every layer: it takes no --layer");
    if (o.dump_logits && !o.whole) return tps_cli_usage("verify", "--dump-logits needs --whole-model");
    /* Input files named by options exist before a backend is asked for (a missing file is exit
     * 3, whatever the backend would have said). */
    char *option_inputs[] = {(char *)o.source, (char *)o.config};
    return tps_cli_require_inputs("verify", option_inputs, 2);
}

static int run_verify(char **args, int nargs)
{
    (void)nargs;
    /* verify maps its large tensors from the files (verify/math/vbuf.h); one cut short
     * meanwhile is an I/O failure, not a crash */
    tps_io_exit_on_shrunk_mapping("tpshard verify: a shard or checkpoint file shrank while verify read it "
                                  "through a mapping (did another process rewrite it?)\n",
                                  TPS_EXIT_IO);
    tps_verify_request q;
    int rc = request(&q);
    if (rc) return rc;
    q.dir = args[0];
    shown v = {.root = true};
    tps_verify_observer obs = {&v, show_opened, show_begin, show_at, show_stage, show_layer, show_layers_end, show_whole,
                               show_report};
    tps_verify_outcome out;
    tps_error err;
    tps_error_clear(&err);
    tps_status st = tps_verify_run(&q, &obs, &out, &err);
    if (out.mismatch) tps_cli_errorf("verify", "%s", out.mismatch_line);
    /* Reported before the backend closes: under MPI, closing lets the other processes exit. */
    rc = out.report_error ? tps_cli_report("verify", &err) : tps_cli_exit_code(st);
    tps_verify_outcome_close(&out);
    return rc;
}

const tps_cmd tps_cmd_verify = {
    .name = "verify",
    .summary = "run layers the tensor-parallel way; compare with the unsharded layer",
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
