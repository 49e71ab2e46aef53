/* tpshard verify: run layers the tensor-parallel way on CPU or GPU ranks, in this process or
 * one MPI process per rank, and compare them with the unsharded layer in float64
 * (verify/verify.h).  Under MPI every process runs this same command; rank 0 prints. */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "commands.h"
#include "formats/checkpoint.h"
#include "formats/shardset.h"
#include "junit_report.h"
#include "lib/base/buf.h"
#include "lib/base/json.h"
#include "lib/layout/layout.h"
#include "lib/set/manifest.h"
#include "progress.h"
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

/* Model hyper-parameters: --config, else the config keys the manifest recorded at split
 * time (what the set was cut with), else a config.json found near the source or the set
 * (shard sets made before manifests recorded it), else the block kind's defaults.  *from
 * (malloc'd) says which, for the report. */
static tps_status read_hyperparameters(const char *dir, const tps_manifest *m, tps_layout *l, char **from,
                                       tps_error *err)
{
    tps_status st = TPS_OK;
    tps_buf what = TPS_BUF_INIT;
    char *path = o.config ? strdup(o.config) : NULL;
    if (o.config && !path) return tps_fail_oom(err, "verify");
    if (!path && m->config_keys) {
        tps_buf_printf(&what, "%s/" TPS_MANIFEST_NAME " (config recorded from %s)", dir, m->config_path);
        if (!tps_buf_cstr(&what)) return tps_fail_oom(err, "verify");
        st = tps_layout_apply_config_text(l, m->config_keys, strlen(m->config_keys), what.data, NULL, err);
        *from = what.data;
        return st;
    }
    if (!path) path = find_config(dir, m);
    if (path) st = tps_layout_read_config(l, path, NULL, err);
    *from = path ? path : strdup("the block kind's defaults");
    if (!*from) st = tps_fail_oom(err, "verify");
    return st;
}

static void json_block(tps_jw *w, const tps_block *b)
{
    tps_jw_object_begin(w);
    const struct {
        const char *key;
        uint64_t v;
    } sizes[] = {{"hidden", b->hidden},         {"heads", b->heads},     {"kv_heads", b->kv_heads},
                 {"head_dim", b->head_dim},     {"intermediate", b->intermediate},
                 {"experts", b->experts},       {"top_k", b->top_k}};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        tps_jw_key(w, sizes[i].key);
        tps_jw_u64(w, sizes[i].v);
    }
    const struct {
        const char *key;
        double v;
    } reals[] = {{"norm_eps", b->norm_eps}, {"rope_theta", b->rope_theta}, {"rotary_pct", b->rotary_pct}};
    for (size_t i = 0; i < sizeof reals / sizeof *reals; i++) {
        tps_jw_key(w, reals[i].key);
        tps_jw_double(w, reals[i].v);
    }
    tps_jw_object_end(w);
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
    if (!b->head_dim && !b->heads && t && !t->part->replicated && t->part->nseg == 1 && t->part->seg[0].unit > 1)
        b->head_dim = t->part->seg[0].unit;
    name = tps_verify_tensor_name(b, TPS_ROLE_QKV_W, 0, 0, &oom);
    t = name ? tps_manifest_find(ss->m, name) : NULL;
    free(name);
    if (!b->head_dim || !t || t->part->replicated || t->part->nseg != 3) return;
    if (!b->heads) b->heads = t->part->seg[0].length / b->head_dim;
    if (!b->kv_heads) b->kv_heads = t->part->seg[1].length / b->head_dim;
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

/* The progress line counts the bytes of the verified layers' weights (each layer's tensors
 * in the manifest, by its name prefix) and names the layer in flight. */
typedef struct layer_progress {
    tps_progress p;
    tps_progress_state s;
    char **prefix;   /* per verified layer */
    uint64_t *bytes; /* per verified layer */
    uint64_t count, first, current;
    char label[256]; /* "layer 3 (model.layers.3.): ranks: attention" */
} layer_progress;

/* A layer's prefix and its index among the verified layers, sorted by prefix for bsearch. */
typedef struct layer_key {
    const char *prefix;
    size_t len;
    uint64_t i;
} layer_key;

static int cmp_layer_key(const void *a, const void *b)
{
    const layer_key *x = a, *y = b;
    int c = strncmp(x->prefix, y->prefix, x->len < y->len ? x->len : y->len);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* Adds each tensor's bytes to the layer whose prefix it starts with: one pass over the
 * tensors, a binary search per distinct prefix length (a few: layer numbers of 1, 2, 3
 * digits), so a model with many tensors and layers costs tensors x log(layers). */
static void bytes_per_layer(layer_progress *lp, const tps_manifest *m)
{
    layer_key *k = calloc(lp->count + 1, sizeof *k);
    size_t n = 0, lens[8], nlens = 0;
    if (!k) return;
    for (uint64_t i = 0; i < lp->count; i++) {
        if (!lp->prefix[i]) continue;
        k[n] = (layer_key){lp->prefix[i], strlen(lp->prefix[i]), i};
        size_t j = 0;
        while (j < nlens && lens[j] != k[n].len) j++;
        if (j == nlens && nlens < sizeof lens / sizeof lens[0]) lens[nlens++] = k[n].len;
        n++;
    }
    qsort(k, n, sizeof *k, cmp_layer_key);
    for (size_t t = 0; t < m->ntensors; t++) {
        const char *name = m->tensors[t].name;
        size_t nl = strlen(name);
        for (size_t j = 0; j < nlens; j++) {
            if (nl < lens[j]) continue;
            layer_key probe = {name, lens[j], 0};
            const layer_key *hit = bsearch(&probe, k, n, sizeof *k, cmp_layer_key);
            if (hit) lp->bytes[hit->i] += m->tensors[t].nbytes;
        }
    }
    free(k);
}

static void layer_progress_begin(layer_progress *lp, const tps_manifest *m, const tps_block *b, uint64_t first,
                                 uint64_t count, bool show)
{
    memset(lp, 0, sizeof *lp);
    tps_progress_begin(&lp->s, "verify");
    lp->s.enabled = lp->s.enabled && show;
    if (!lp->s.enabled) return;
    lp->first = first;
    lp->prefix = calloc(count, sizeof *lp->prefix);
    lp->bytes = calloc(count, sizeof *lp->bytes);
    lp->count = lp->prefix && lp->bytes ? count : 0;
    for (uint64_t i = 0; i < lp->count; i++) lp->prefix[i] = tps_verify_layer_prefix(b, first + i);
    bytes_per_layer(lp, m);
    for (uint64_t i = 0; i < lp->count; i++) lp->p.total += lp->bytes[i];
    lp->s.enabled = lp->count > 0; /* without the tables (out of memory) the run goes on silently */
}

/* i: the index of the layer among those verified; done: whether it has finished.  A layer
 * runs for seconds without an update, so its start is drawn at once (and redrawn after its
 * report line), not left to the rate limit. */
static void layer_progress_at(layer_progress *lp, uint64_t i, bool done)
{
    if (!lp->s.enabled || i >= lp->count) return;
    lp->current = i;
    if (done) {
        lp->p.done += lp->bytes[i];
        snprintf(lp->label, sizeof lp->label, "layer %llu: done", (unsigned long long)(lp->first + i));
        lp->p.tensor = lp->label;
        tps_progress_update(&lp->p, &lp->s);
        return;
    }
    snprintf(lp->label, sizeof lp->label, "layer %llu (%s)", (unsigned long long)(lp->first + i), lp->prefix[i]);
    lp->p.tensor = lp->label;
    tps_progress_show(&lp->p, &lp->s);
}

/* A tps_verify_opts.on_stage callback: the stage within the layer in flight. */
static void layer_progress_stage(void *arg, const char *stage)
{
    layer_progress *lp = arg;
    if (!lp->s.enabled || lp->current >= lp->count) return;
    snprintf(lp->label, sizeof lp->label, "layer %llu: %s", (unsigned long long)(lp->first + lp->current), stage);
    lp->p.tensor = lp->label;
    tps_progress_show(&lp->p, &lp->s);
}

static void layer_progress_end(layer_progress *lp)
{
    tps_progress_end(&lp->s);
    for (uint64_t i = 0; i < lp->count; i++) free(lp->prefix[i]);
    free(lp->prefix);
    free(lp->bytes);
    memset(lp, 0, sizeof *lp);
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

/* What failed, on which rank (null when no one rank), and why. */
static void json_failure(tps_jw *w, const char *stage, int64_t culprit, const char *detail)
{
    tps_jw_key(w, "failed_stage");
    tps_jw_string(w, stage);
    tps_jw_key(w, "rank");
    if (culprit >= 0) tps_jw_i64(w, culprit);
    else tps_jw_null(w);
    tps_jw_key(w, "detail");
    tps_jw_string(w, detail);
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
    if (r->upload_bytes > 0) {
        tps_jw_key(w, "upload_bytes");
        tps_jw_double(w, r->upload_bytes);
        tps_jw_key(w, "upload_gbps");
        tps_jw_double(w, r->upload_seconds > 0 ? r->upload_bytes / r->upload_seconds / 1e9 : 0);
        tps_jw_key(w, "layer_seconds");
        tps_jw_double(w, r->layer_seconds);
    }
    for (int s = 0; s < TPS_VSTAGE_COUNT; s++) {
        tps_jw_key(w, tps_verify_stage_name(s));
        json_stage(w, &r->stage[s]);
    }
    if (!r->pass) json_failure(w, tps_verify_stage_name(r->failed_stage), r->culprit, r->detail);
    tps_jw_object_end(w);
}

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

static void json_whole(tps_jw *w, const tps_verify_whole *r)
{
    tps_jw_object_begin(w);
    const struct {
        const char *key;
        uint64_t v;
    } nums[] = {{"tokens", r->tokens},          {"vocab", r->vocab},           {"padded_vocab", r->padded_vocab},
                {"ranks", r->ranks},            {"logits", r->tokens * r->vocab}, {"top1_agree", r->top1_agree},
                {"top1_ties", r->top1_ties}};
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) {
        tps_jw_key(w, nums[i].key);
        tps_jw_u64(w, nums[i].v);
    }
    tps_jw_key(w, "tied_lm_head");
    tps_jw_bool(w, r->tied);
    tps_jw_key(w, "pos_embed");
    tps_jw_bool(w, r->pos_embed);
    tps_jw_key(w, "dtype");
    tps_jw_string(w, tps_dtype_name(r->chain.dtype));
    tps_jw_key(w, "seconds");
    tps_jw_double(w, r->seconds);
    tps_jw_key(w, "embedding");
    json_stage(w, &r->embed_cmp);
    tps_jw_key(w, "logits_cmp");
    json_stage(w, &r->logits_cmp);
    tps_jw_key(w, "pass");
    tps_jw_bool(w, r->pass);
    if (!r->pass) json_failure(w, r->failed, r->culprit, r->detail);
    tps_jw_object_end(w);
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

/* --dump-logits: the token ids and the logits [tokens, vocab] of the reference (float64)
 * and of the ranks (float32, gathered, padding dropped). */
static tps_status write_logits(const char *path, const tps_verify_whole *r, tps_error *err)
{
    tps_buf b = TPS_BUF_INIT;
    tps_jw w;
    tps_jw_init(&w, &b, false);
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "tokens");
    tps_jw_array_begin(&w);
    for (uint64_t t = 0; t < r->tokens; t++) tps_jw_u64(&w, r->ids[t]);
    tps_jw_array_end(&w);
    tps_jw_key(&w, "vocab");
    tps_jw_u64(&w, r->vocab);
    tps_jw_key(&w, "reference");
    dump_matrix(&w, r->ref_logits, r->tokens, r->vocab);
    tps_jw_key(&w, "ranks");
    tps_jw_array_begin(&w);
    for (uint64_t t = 0; t < r->tokens; t++) {
        tps_jw_array_begin(&w);
        for (uint64_t v = 0; v < r->vocab; v++) tps_jw_double(&w, r->logits[t * r->vocab + v]);
        tps_jw_array_end(&w);
    }
    tps_jw_array_end(&w);
    tps_jw_object_end(&w);
    const char *s = tps_buf_cstr(&b);
    FILE *f = s ? fopen(path, "w") : NULL;
    tps_status st = TPS_OK;
    if (!s) st = tps_fail_oom(err, "the logits dump");
    else if (!f) st = tps_fail_errno(err, errno, "%s: cannot create", path);
    else if (fputs(s, f) == EOF || fputc('\n', f) == EOF) st = tps_fail(err, TPS_EIO, "%s: cannot write the logits", path);
    if (f && fclose(f) != 0 && st == TPS_OK) st = tps_fail(err, TPS_EIO, "%s: cannot write the logits", path);
    tps_buf_release(&b);
    return st;
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

/* Megatron-Core >= 0.16 at tp above the query groups stores each rank a plain row chunk of
 * its group's [q; k; v] block (the cut the manifest records: the group's block one segment),
 * not its heads with the group's k and v as Falcon's cut does; Megatron's ranks then
 * all-gather the qkv activations (verify/qkv_chunks.c).  Only Megatron runs such a cut: the
 * same cut of a Falcon checkpoint is wrong for the engines that serve it, and fails. */
static void qkv_cut_from_manifest(const tps_shardset *ss, tps_block *b)
{
    bool oom;
    const char *ln = ss->m->layout_name;
    if (!ln || strncmp(ln, "preset:megatron_gpt", 19) != 0) return;
    char *name = b->qkv_grouped ? tps_verify_tensor_name(b, TPS_ROLE_QKV_W, 0, 0, &oom) : NULL;
    const tps_manifest_tensor *t = name ? tps_manifest_find(ss->m, name) : NULL;
    free(name);
    if (t && !t->part->replicated && t->part->nseg == 1 && ss->m->tp > (t->part->groups ? t->part->groups : 1))
        b->qkv_row_chunks = true;
}

/* The megatron_gpt presets' block names a dense MLP; a Megatron MoE set (router, SequentialMLP
 * local_experts or TEGroupedMLP weight{e}) would fail as a missing linear_fc1, so it is
 * refused by name. */
static tps_status megatron_moe_refusal(const tps_manifest *m, tps_error *err)
{
    if (!m->layout_name || strncmp(m->layout_name, "preset:megatron_gpt", 19) != 0) return TPS_OK;
    for (size_t i = 0; i < m->ntensors; i++)
        if (strstr(m->tensors[i].name, ".mlp.router.") || strstr(m->tensors[i].name, ".mlp.experts."))
            return tps_fail(err, TPS_EINVALID,
                            "verify does not compute Megatron MoE layers yet ('%s'); check, reshard and merge "
                            "take the set",
                            m->tensors[i].name);
    return TPS_OK;
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
    tps_verify_whole whole;
    memset(&whole, 0, sizeof whole);
    tps_vbackend *be = NULL;
    tps_vbackend_config bcfg;
    tps_vbackend_info info;
    layer_progress lp;
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
    /* First, so that under MPI every later failure is agreed between the processes. */
    TPS_CHECK(tps_vbackend_open(&bcfg, &be, &err));
    /* Under MPI only rank 0 reports. */
    bool root = tps_vbackend_is_root(be), json = tps_common.json && root, quiet = tps_common.quiet || !root;
    if (!root) tps_cli_junit_silence();

    TPS_CHECK(tps_shardset_open(dir, &ss, &err));
    if (!tps_manifest_holds_all(ss->m)) {
        char held[256];
        tps_manifest_held_str(ss->m, held, sizeof held);
        st = tps_fail(&err, TPS_EINVALID,
                      "%s is a partial set: it holds ranks %s of %llu, the other ranks' files are on other nodes; "
                      "verify needs every rank: run it on a directory holding the whole set (or check this "
                      "share with 'tpshard check %s')",
                      dir, held, (unsigned long long)ss->m->tp, dir);
        goto cleanup;
    }
    TPS_CHECK(megatron_moe_refusal(ss->m, &err));
    const char *text = ss->m->layout_text ? ss->m->layout_text : "";
    TPS_CHECK(tps_layout_parse(text, strlen(text), ss->m->layout_name ? ss->m->layout_name : "manifest layout", &l,
                               &err));
    TPS_CHECK(read_hyperparameters(dir, ss->m, l, &config, &err));
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
    qkv_cut_from_manifest(ss, &b);

    uint64_t T = ss->m->tp;
    ranks = calloc(T, sizeof *ranks);
    if (!ranks) {
        st = tps_fail_oom(&err, "the rank table");
        goto cleanup;
    }
    for (uint64_t r = 0; r < T; r++) {
        const tps_index *rix;
        if (!tps_vbackend_holds_rank(be, r)) continue;
        TPS_CHECK(tps_shardset_open_rank(ss, r, &rix, &err));
        ranks[r] = tps_vsource_index(rix);
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
        tps_jw_init(&dw, &db, false);
        tps_jw_object_begin(&dw);
        tps_jw_key(&dw, "layers");
        tps_jw_array_begin(&dw);
    }
    tps_jw_init(&jw, &jb, true);
    if (json) {
        tps_jw_object_begin(&jw);
        tps_jw_key(&jw, "dir");
        tps_jw_string(&jw, dir);
        tps_jw_key(&jw, "tp");
        tps_jw_u64(&jw, T);
        tps_jw_key(&jw, "backend");
        tps_jw_string(&jw, info.device);
        tps_jw_key(&jw, "launcher");
        tps_jw_string(&jw, info.launcher);
        tps_jw_key(&jw, "processes");
        tps_jw_u64(&jw, info.processes);
        tps_jw_key(&jw, "backend_detail");
        tps_jw_string(&jw, info.desc);
        if (strcmp(info.device, "cpu") != 0) {
            tps_jw_key(&jw, "devices");
            tps_jw_u64(&jw, info.devices);
            tps_jw_key(&jw, "ranks_per_device");
            tps_jw_u64(&jw, info.ranks_per_device);
            tps_jw_key(&jw, "nccl");
            tps_jw_bool(&jw, info.nccl);
        }
        tps_jw_key(&jw, "kind");
        tps_jw_string(&jw, tps_block_kind_name(b.kind));
        tps_jw_key(&jw, "reference");
        tps_jw_string(&jw, o.source ? "source" : "reassembled from shards");
        if (o.source) {
            tps_jw_key(&jw, "source");
            tps_jw_string(&jw, o.source);
        }
        tps_jw_key(&jw, "config");
        tps_jw_string(&jw, config);
        tps_jw_key(&jw, "block");
        json_block(&jw, &b);
        tps_jw_key(&jw, "tokens");
        tps_jw_u64(&jw, tokens);
        tps_jw_key(&jw, "seed");
        tps_jw_u64(&jw, o.seed);
        tps_jw_key(&jw, "whole_model");
        tps_jw_bool(&jw, o.whole);
        tps_jw_key(&jw, "layers");
        tps_jw_array_begin(&jw);
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
                          .keep_reference = dump != NULL, .shards = ss, .on_stage = layer_progress_stage,
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
    layer_progress_begin(&lp, ss->m, &b, first, count, root);
    for (uint64_t layer = first; layer < first + count; layer++) {
        tps_verify_result res;
        layer_progress_at(&lp, layer - first, false);
        TPS_CHECK(tps_verify_layer(&b, layer, T, &ref, ranks, &vo, &res, &err));
        layer_progress_at(&lp, layer - first, true);
        layers_run++;
        checked_tensors += res.checked_tensors;
        checked_bytes += res.checked_bytes;
        tps_cli_junit_layer(&res);
        if (json) {
            json_layer(&jw, &res);
        } else if (root && (!quiet || !res.pass)) {
            tps_progress_suspend(&lp.s);
            print_layer(&res);
        }
        if (layer + 1 < first + count) layer_progress_at(&lp, layer + 1 - first, false);
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
    layer_progress_end(&lp);
    if (o.whole) {
        TPS_CHECK(tps_verify_whole_end(&b, T, &ref, ranks, &wo, &whole, &err));
        checked_tensors += whole.checked_tensors;
        checked_bytes += whole.checked_bytes;
        if (root && !json && (!quiet || !whole.pass)) print_whole(&whole);
        tps_cli_junit_whole(&whole);
        if (root && o.dump_logits) TPS_CHECK(write_logits(o.dump_logits, &whole, &err));
    }
    /* A pass must have run something: every layer asked for, each with tensors checked. */
    if (root && (layers_run == 0 || layers_run != count || checked_tensors == 0)) {
        st = tps_fail(&err, TPS_EINVALID, "%s: nothing was verified (%llu of %llu layers run, %llu tensors checked)",
                      dir, (unsigned long long)layers_run, (unsigned long long)count,
                      (unsigned long long)checked_tensors);
        goto cleanup;
    }
    if (json) {
        tps_jw_array_end(&jw);
        tps_jw_key(&jw, "checked");
        tps_jw_object_begin(&jw);
        tps_jw_key(&jw, "layers");
        tps_jw_u64(&jw, layers_run);
        tps_jw_key(&jw, "ranks");
        tps_jw_u64(&jw, T);
        tps_jw_key(&jw, "tensors");
        tps_jw_u64(&jw, checked_tensors);
        tps_jw_key(&jw, "bytes");
        tps_jw_u64(&jw, checked_bytes);
        tps_jw_key(&jw, "mismatched_layers");
        tps_jw_u64(&jw, mismatched);
        if (o.whole) {
            tps_jw_key(&jw, "tokens");
            tps_jw_u64(&jw, whole.tokens);
            tps_jw_key(&jw, "logits");
            tps_jw_u64(&jw, whole.tokens * whole.vocab);
        }
        tps_jw_object_end(&jw);
        if (o.whole) {
            tps_jw_key(&jw, "whole_model");
            json_whole(&jw, &whole);
        }
        tps_jw_key(&jw, "pass");
        tps_jw_bool(&jw, all_pass && (!o.whole || whole.pass));
        tps_jw_object_end(&jw);
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
    } else if (o.whole && root && !whole.pass) {
        const tps_verify_stage *fs = strcmp(whole.failed, "embedding") == 0 ? &whole.embed_cmp : &whole.logits_cmp;
        tps_cli_errorf("verify", "mismatch in the whole model, %s stage (max abs err %.3g, rel err %.3g; rtol %.3g, "
                       "atol %.3g): %s",
                       whole.failed, fs->max_abs, fs->rel, fs->rtol, fs->atol, whole.detail);
        st = TPS_EMISMATCH;
    }
cleanup:
    layer_progress_end(&lp);
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
