/* tpshard verify: run layers the tensor-parallel way on CPU ranks and compare them with
 * the unsharded layer in float64 (verify/verify.h). */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "commands.h"
#include "formats/checkpoint.h"
#include "lib/buf.h"
#include "lib/json.h"
#include "lib/layout.h"
#include "lib/manifest.h"
#include "verify/verify.h"

static struct {
    const char *source, *config, *layer, *backend, *dump;
    uint64_t tokens, seed;
    double rtol, atol;
} o = {.tokens = 16, .seed = 1};

static const tps_opt verify_opts[] = {
    {"source", 0, TPS_OPT_STRING, &o.source, "SRC", "reference weights from this checkpoint (default: reassembled from the shards)"},
    {"config", 0, TPS_OPT_STRING, &o.config, "FILE", "Hugging Face config.json (default: next to SRC or in DIR)"},
    {"layer", 0, TPS_OPT_STRING, &o.layer, "L|all", "layer to verify (default all)"},
    {"tokens", 0, TPS_OPT_UINT, &o.tokens, "N", "sequence length of the random input (default 16)"},
    {"seed", 0, TPS_OPT_UINT, &o.seed, "S", "seed of the random input (default 1)"},
    {"backend", 0, TPS_OPT_STRING, &o.backend, "NAME", "cpu (threads; the default), cuda or mpi when built in"},
    {"rtol", 0, TPS_OPT_DOUBLE, &o.rtol, "X", "relative tolerance (default by shard dtype)"},
    {"atol", 0, TPS_OPT_DOUBLE, &o.atol, "X", "absolute tolerance (default rtol * RMS of the reference output)"},
    {"dump-reference", 0, TPS_OPT_STRING, &o.dump, "FILE", "write inputs and float64 reference outputs as JSON"},
    {"json", 0, TPS_OPT_FLAG, &tps_common.json, NULL, "machine-readable report"},
    TPS_COMMON_OPTS,
    TPS_OPTS_END,
};

static bool is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* config.json: --config, else beside the source given (in it when it is a directory), else
 * beside the source the set was split from, else in the shard set's directory. */
static void add_candidate(tps_buf *b, const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        tps_buf_printf(b, "%s/config.json", path);
    } else {
        char *copy = strdup(path);
        if (copy) tps_buf_printf(b, "%s/config.json", dirname(copy));
        free(copy);
    }
    tps_buf_putc(b, '\0');
}

static char *find_config(const char *dir, const tps_manifest *m)
{
    if (o.config) return strdup(o.config);
    tps_buf b = TPS_BUF_INIT;
    if (o.source) add_candidate(&b, o.source);
    if (m->source.path) add_candidate(&b, m->source.path);
    tps_buf_printf(&b, "%s/config.json", dir);
    tps_buf_putc(&b, '\0');
    char *found = NULL;
    for (size_t off = 0; !b.oom && off < b.len && !found; off += strlen(b.data + off) + 1)
        if (is_file(b.data + off)) found = strdup(b.data + off);
    tps_buf_release(&b);
    return found;
}

/* An index of the manifest's global shapes, for the layout's shape inference when no
 * source is given.  Its tensors are never read (reader_data marks them as not plain
 * ranges of a file). */
static tps_status manifest_shapes(const tps_shardset *ss, tps_index **out, tps_error *err)
{
    tps_status st;
    tps_index *ix = NULL;
    TPS_CHECK(tps_index_new(ss->dir, "manifest", &ix, err));
    for (size_t i = 0; i < ss->m->ntensors; i++) {
        const tps_manifest_tensor *t = &ss->m->tensors[i];
        TPS_CHECK(tps_index_add_tensor(ix, t->name, strlen(t->name), t->dtype, t->ndim, t->shape, 0, 0, t, err));
    }
    *out = ix;
    return TPS_OK;
cleanup:
    tps_index_free(ix);
    return st;
}

/* Sizes a layout infers from config.json, when none is at hand, are still in the manifest:
 * head_dim is the unit of o_proj's cut in every layout that cuts attention by heads, and a
 * fused [q;k;v] records its segments' lengths. */
static void sizes_from_manifest(const tps_shardset *ss, tps_block *b)
{
    bool oom;
    char *name = tps_verify_tensor_name(b, TPS_ROLE_O_W, 0, 0, &oom);
    const tps_manifest_tensor *t = name ? tps_manifest_find(ss->m, name) : NULL;
    free(name);
    if (!b->head_dim && !b->heads && t && !t->part.replicated && t->part.nseg == 1 && t->part.seg[0].unit > 1)
        b->head_dim = t->part.seg[0].unit;
    name = tps_verify_tensor_name(b, TPS_ROLE_QKV_W, 0, 0, &oom);
    t = name ? tps_manifest_find(ss->m, name) : NULL;
    free(name);
    if (!b->head_dim || !t || t->part.replicated || t->part.nseg != 3) return;
    if (!b->heads) b->heads = t->part.seg[0].length / b->head_dim;
    if (!b->kv_heads) b->kv_heads = t->part.seg[1].length / b->head_dim;
}

static void dump_matrix(tps_jw *w, const double *v, uint64_t rows, uint64_t cols)
{
    tps_jw_array_begin(w);
    for (uint64_t r = 0; r < rows; r++) {
        tps_jw_array_begin(w);
        for (uint64_t c = 0; c < cols; c++) tps_jw_double(w, v[r * cols + c]);
        tps_jw_array_end(w);
    }
    tps_jw_array_end(w);
}

static void json_stage(tps_jw *w, const tps_verify_stage *s)
{
    tps_jw_object_begin(w);
    tps_jw_key(w, "max_abs_err");
    tps_jw_double(w, s->max_abs);
    tps_jw_key(w, "rel_err");
    tps_jw_double(w, s->rel);
    tps_jw_key(w, "rtol");
    tps_jw_double(w, s->rtol);
    tps_jw_key(w, "atol");
    tps_jw_double(w, s->atol);
    tps_jw_key(w, "pass");
    tps_jw_bool(w, s->pass);
    tps_jw_object_end(w);
}

static void json_layer(tps_jw *w, const tps_verify_result *r)
{
    tps_jw_object_begin(w);
    tps_jw_key(w, "layer");
    tps_jw_u64(w, r->layer);
    tps_jw_key(w, "dtype");
    tps_jw_string(w, tps_dtype_name(r->dtype));
    tps_jw_key(w, "seconds");
    tps_jw_double(w, r->seconds);
    tps_jw_key(w, "pass");
    tps_jw_bool(w, r->pass);
    for (int s = 0; s < TPS_VSTAGE_COUNT; s++) {
        tps_jw_key(w, tps_verify_stage_name(s));
        json_stage(w, &r->stage[s]);
    }
    if (!r->pass) {
        tps_jw_key(w, "failed_stage");
        tps_jw_string(w, tps_verify_stage_name(r->failed_stage));
        tps_jw_key(w, "rank");
        if (r->culprit >= 0) tps_jw_i64(w, r->culprit);
        else tps_jw_null(w);
        tps_jw_key(w, "detail");
        tps_jw_string(w, r->detail);
    }
    tps_jw_object_end(w);
}

static void print_layer(const tps_verify_result *r)
{
    const tps_verify_stage *a = &r->stage[TPS_VSTAGE_ATTN], *m = &r->stage[TPS_VSTAGE_MLP];
    printf("layer %-4llu %-5s rtol %.2g  attention: max abs %.3g rel %.3g (atol %.3g)  mlp: max abs %.3g rel %.3g "
           "(atol %.3g)  %.3f s  %s\n",
           (unsigned long long)r->layer, tps_dtype_name(r->dtype), a->rtol, a->max_abs, a->rel, a->atol, m->max_abs,
           m->rel, m->atol, r->seconds, r->pass ? "ok" : "MISMATCH");
    if (!r->pass) printf("  %s\n", r->detail);
}

static int run_verify(char **args, int nargs)
{
    (void)nargs;
    const char *dir = args[0];
    tps_error err;
    tps_error_clear(&err);
    tps_status st = TPS_OK;
    tps_shardset *ss = NULL;
    tps_layout *l = NULL;
    tps_index *src_ix = NULL, *shape_ix = NULL;
    tps_vsource *ranks = NULL;
    char *config = NULL;
    FILE *dump = NULL;
    tps_buf jb = TPS_BUF_INIT, db = TPS_BUF_INIT;
    tps_jw jw, dw;
    uint64_t first = 0, count = 0, failed_layer = 0;
    bool all_pass = true;
    tps_verify_result bad;
    memset(&bad, 0, sizeof bad);

    const char *backend = o.backend ? o.backend : "cpu";
    if (strcmp(backend, "cuda") == 0 || strcmp(backend, "mpi") == 0) {
        tps_cli_errorf("verify", "backend '%s' is not built into this tpshard (it needs %s at build time); "
                       "--backend cpu runs the ranks as threads", backend,
                       strcmp(backend, "cuda") == 0 ? "CUDA, cuBLAS and NCCL" : "MPI");
        return TPS_EBACKEND;
    }
    if (strcmp(backend, "cpu") != 0) {
        tps_cli_errorf("verify", "unknown backend '%s' (cpu, cuda or mpi)", backend);
        return TPS_EUSAGE;
    }
    uint64_t tokens = o.tokens;
    if (tokens == 0 || tokens > 4096) {
        tps_cli_errorf("verify", "--tokens %llu: from 1 to 4096", (unsigned long long)tokens);
        return TPS_EUSAGE;
    }
    if (o.layer && strcmp(o.layer, "all") != 0) {
        char *end;
        first = strtoull(o.layer, &end, 10);
        if (!*o.layer || *end || o.layer[0] == '-') {
            tps_cli_errorf("verify", "--layer '%s': a layer number or 'all'", o.layer);
            return TPS_EUSAGE;
        }
        count = 1;
    }

    TPS_CHECK(tps_shardset_open(dir, &ss, &err));
    const char *text = ss->m->layout_text ? ss->m->layout_text : "";
    TPS_CHECK(tps_layout_parse(text, strlen(text), ss->m->layout_name ? ss->m->layout_name : "manifest layout", &l,
                               &err));
    config = find_config(dir, ss->m);
    if (config) TPS_CHECK(tps_layout_read_config(l, config, &err));
    if (o.source) {
        TPS_CHECK(tps_checkpoint_open(o.source, &src_ix, &err));
        TPS_CHECK(tps_layout_infer_sizes(l, src_ix, &err));
    } else {
        TPS_CHECK(manifest_shapes(ss, &shape_ix, &err));
        TPS_CHECK(tps_layout_infer_sizes(l, shape_ix, &err));
    }
    if (!tps_layout_block(l)) {
        st = tps_fail(&err, TPS_EINVALID, "%s: the layout it was cut with (%s) has no block: section to verify with",
                      dir, ss->m->layout_name ? ss->m->layout_name : "?");
        goto cleanup;
    }
    tps_block b = *tps_layout_block(l);
    sizes_from_manifest(ss, &b);

    uint64_t T = ss->m->tp;
    ranks = calloc(T, sizeof *ranks);
    if (!ranks) {
        st = tps_fail_oom(&err, "the rank table");
        goto cleanup;
    }
    for (uint64_t r = 0; r < T; r++) {
        const tps_index *rix;
        TPS_CHECK(tps_shardset_open_rank(ss, r, &rix, &err));
        ranks[r] = tps_vsource_index(rix);
    }
    tps_vsource ref = src_ix ? tps_vsource_index(src_ix) : tps_vsource_shardset(ss);
    if (!count) {
        TPS_CHECK(tps_verify_count_layers(&b, &ref, &count, &err));
    }

    char refdesc[4200];
    if (o.source) snprintf(refdesc, sizeof refdesc, "reference from %s", o.source);
    else snprintf(refdesc, sizeof refdesc, "reference reassembled from shards");
    if (o.dump) {
        dump = fopen(o.dump, "w");
        if (!dump) {
            st = tps_fail_errno(&err, errno, "%s: cannot create", o.dump);
            goto cleanup;
        }
        tps_jw_init(&dw, &db, false);
        tps_jw_object_begin(&dw);
        tps_jw_key(&dw, "layers");
        tps_jw_array_begin(&dw);
    }
    tps_jw_init(&jw, &jb, true);
    if (tps_common.json) {
        tps_jw_object_begin(&jw);
        tps_jw_key(&jw, "dir");
        tps_jw_string(&jw, dir);
        tps_jw_key(&jw, "tp");
        tps_jw_u64(&jw, T);
        tps_jw_key(&jw, "backend");
        tps_jw_string(&jw, "cpu");
        tps_jw_key(&jw, "kind");
        tps_jw_string(&jw, tps_block_kind_name(b.kind));
        tps_jw_key(&jw, "reference");
        tps_jw_string(&jw, o.source ? "source" : "reassembled from shards");
        if (o.source) {
            tps_jw_key(&jw, "source");
            tps_jw_string(&jw, o.source);
        }
        tps_jw_key(&jw, "tokens");
        tps_jw_u64(&jw, tokens);
        tps_jw_key(&jw, "seed");
        tps_jw_u64(&jw, o.seed);
        tps_jw_key(&jw, "layers");
        tps_jw_array_begin(&jw);
    } else if (!tps_common.quiet) {
        printf("verify %s: %s block, tp %llu, backend cpu (threads), %llu tokens, seed %llu; %s\n", dir,
               tps_block_kind_name(b.kind), (unsigned long long)T, (unsigned long long)tokens,
               (unsigned long long)(o.seed), refdesc);
        fflush(stdout);
    }
    tps_verify_opts vo = {.tokens = tokens, .seed = o.seed, .rtol = o.rtol, .atol = o.atol,
                          .keep_reference = o.dump != NULL};
    for (uint64_t layer = first; layer < first + count; layer++) {
        tps_verify_result res;
        TPS_CHECK(tps_verify_layer(&b, layer, T, &ref, ranks, &vo, &res, &err));
        if (tps_common.json) json_layer(&jw, &res);
        else if (!tps_common.quiet || !res.pass) print_layer(&res);
        fflush(stdout);
        if (dump) {
            tps_jw_object_begin(&dw);
            tps_jw_key(&dw, "layer");
            tps_jw_u64(&dw, layer);
            tps_jw_key(&dw, "x");
            dump_matrix(&dw, res.x, res.tokens, res.hidden);
            for (int s = 0; s < TPS_VSTAGE_COUNT; s++) {
                tps_jw_key(&dw, tps_verify_stage_name(s));
                dump_matrix(&dw, res.ref_out[s], res.tokens, res.hidden);
            }
            tps_jw_object_end(&dw);
        }
        if (!res.pass && all_pass) {
            all_pass = false;
            failed_layer = layer;
            bad = res;
            bad.x = NULL;
            bad.ref_out[0] = bad.ref_out[1] = NULL;
        }
        tps_verify_result_release(&res);
    }
    if (tps_common.json) {
        tps_jw_array_end(&jw);
        tps_jw_key(&jw, "pass");
        tps_jw_bool(&jw, all_pass);
        tps_jw_object_end(&jw);
        if (tps_buf_cstr(&jb)) printf("%s\n", jb.data);
    } else if (!tps_common.quiet && all_pass) {
        printf("%llu layer%s verified: the shards compute the unsharded layer\n", (unsigned long long)count,
               count == 1 ? "" : "s");
    }
    if (dump) {
        tps_jw_array_end(&dw);
        tps_jw_object_end(&dw);
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
    }
cleanup:
    if (dump) fclose(dump);
    tps_buf_release(&jb);
    tps_buf_release(&db);
    free(ranks);
    free(config);
    tps_index_free(src_ix);
    tps_index_free(shape_ix);
    tps_layout_free(l);
    tps_shardset_free(ss);
    if (st != TPS_OK && st != TPS_EMISMATCH) return tps_cli_report("verify", &err);
    return (int)st;
}

const tps_cmd tps_cmd_verify = {
    .name = "verify",
    .summary = "run layers the tensor-parallel way on CPU ranks and compare with the unsharded layer",
    .usage = "verify DIR [--source SRC] [--layer L|all] [--tokens N] [--seed S] [--backend cpu] [--json]",
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
        "not built in.  Model hyper-parameters (RoPE theta, norm epsilon, top-k) come from\n"
        "config.json: --config, next to SRC, or in DIR; else the block kind's defaults.\n",
    .opts = verify_opts,
    .min_args = 1,
    .max_args = 1,
    .run = run_verify,
};
