/* Where a layout's sizes and block settings come from when the layout does not state them:
 * a Hugging Face config.json, then the layout's `infer:` hints over tensor shapes, then (for
 * the block) the model sizes and the kind's defaults.  Earlier sources win; each fills only
 * what is still unknown. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/checked.h"
#include "../base/json.h"
#include "../quant/mxfp4.h"
#include "../quant/quant.h"
#include "layout_int.h"
#include "llama4_config.h"

/* A config.json is a few kilobytes; refuse to slurp anything that cannot be one. */
#define CONFIG_MAX_BYTES (16u << 20)

tps_status tps_read_config_file(const char *path, char **out, size_t *len, tps_error *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return tps_fail(err, e == ENOENT ? TPS_EINVALID : TPS_EIO, "%s: cannot open: %s", path, strerror(e));
    }
    tps_status st = TPS_OK;
    struct stat sb;
    char *buf = NULL;
    if (fstat(fd, &sb) != 0) {
        st = tps_fail_errno(err, errno, "%s: stat failed", path);
        goto cleanup;
    }
    if (!S_ISREG(sb.st_mode) || (uint64_t)sb.st_size > CONFIG_MAX_BYTES) {
        st = tps_fail(err, TPS_EINVALID, "%s: not a regular file of at most %u bytes", path, CONFIG_MAX_BYTES);
        goto cleanup;
    }
    buf = malloc((size_t)sb.st_size + 1);
    if (!buf) {
        st = tps_fail_oom(err, "reading config.json");
        goto cleanup;
    }
    TPS_CHECK(tps_pread_full(fd, path, 0, buf, (size_t)sb.st_size, err));
    buf[sb.st_size] = '\0';
    *len = (size_t)sb.st_size;
    *out = buf;
    buf = NULL;
cleanup:
    free(buf);
    close(fd);
    return st;
}

/* The config.json keys tpshard reads, in the order model families use them; earlier keys
 * win.  keep_known_keys records exactly these in a manifest, so the list lives in one place. */
static const char *const size_keys[TPS_NSIZES][4] = {
    {"hidden_size", "n_embd", "d_model", NULL},
    {"num_attention_heads", "n_head", NULL},
    {"num_key_value_heads", NULL},
    {"head_dim", NULL},
    {"intermediate_size", "n_inner", NULL},
    {"vocab_size", NULL},
    {"num_hidden_layers", "n_layer", NULL},
    {"num_local_experts", "num_experts", "n_routed_experts", NULL},
    {"moe_intermediate_size", NULL},
    {"shared_expert_intermediate_size", NULL},
    {"qk_nope_head_dim", NULL},
    {"qk_rope_head_dim", NULL},
    {"v_head_dim", NULL},
};
static const char *const eps_keys[] = {"rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_epsilon", NULL};
static const char *const theta_keys[] = {"rope_theta", "rotary_emb_base", NULL};
static const char *const pct_keys[] = {"rotary_pct", "partial_rotary_factor", NULL};
static const char *const topk_keys[] = {"num_experts_per_tok", NULL};
static const char *const act_keys[] = {"hidden_act", "activation_function", NULL};
static const char *const parallel_residual_keys[] = {"use_parallel_residual", "parallel_attn", NULL};
static const char *const rope_scaling_keys[] = {"rope_scaling", "max_position_embeddings", NULL}; /* lib/layout/block.c */
/* Gemma 2, in the order of tps_block's fields; read by apply_gemma_keys. */
static const char *const gemma_keys[] = {"attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar",
                                         "sliding_window", NULL};
static const char *const rope_interleave_keys[] = {"rope_interleave", NULL}; /* DeepSeek-V3 */
/* tps_moe_routing's keys, in its bit order from TPS_BF_SCORING, and DeepSeek's shared
 * expert count (shared_intermediate = n_shared_experts * moe_intermediate_size). */
static const char *const moe_keys[] = {"scoring_func", "topk_method", "norm_topk_prob", "routed_scaling_factor",
                                       "n_group", "topk_group", "first_k_dense_replace", "moe_layer_freq",
                                       "decoder_sparse_step", "mlp_only_layers", "n_shared_experts", NULL};

/* Falcon's own words for its KV heads and block (falcon_config). */
static const char *const falcon_keys[] = {"model_type", "multi_query", "new_decoder_architecture", "num_kv_heads",
                                          "n_head_kv", NULL};

/* Gemma 3; read by apply_gemma3_keys. */
static const char *const gemma3_keys[] = {"rope_local_base_freq", "layer_types", "sliding_window_pattern", NULL};

/* lib/quant/quant.h; read in tps_layout_apply_config_text. */
static const char *const quant_keys[] = {"quantization_config", NULL};

/* Megatron-LM's args.normalization (lib/registry/megatron_args.h writes it): the norm a block leaves open. */
static const char *const normalization_keys[] = {"normalization", NULL};

static const char *const *const block_key_lists[] = {eps_keys, theta_keys, pct_keys, topk_keys, act_keys,
                                                      parallel_residual_keys, rope_scaling_keys, gemma_keys, moe_keys,
                                                      falcon_keys, rope_interleave_keys,
                                                      gemma3_keys, quant_keys, normalization_keys, tps_llama4_keys};

/* The first of keys present with a non-null value; NULL when none is. */
static const tps_json *first_key(const tps_json *root, const char *const *keys, const char **which)
{
    for (; *keys; keys++) {
        const tps_json *v = tps_json_get(root, *keys);
        if (v && v->type != TPS_JSON_NULL) {
            *which = *keys;
            return v;
        }
    }
    return NULL;
}

static tps_status config_u64(const char *path, const tps_json *root, const char *const *keys, uint64_t *out,
                             bool *found, tps_error *err)
{
    const char *key = NULL;
    const tps_json *v = first_key(root, keys, &key);
    *found = v != NULL;
    if (!v) return TPS_OK;
    if (v->type != TPS_JSON_NUMBER || !v->u.number.is_u64 || v->u.number.u64 == 0)
        return tps_fail(err, TPS_EINVALID, "%s: \"%s\" must be a positive integer", path, key);
    *out = v->u.number.u64;
    return TPS_OK;
}

static tps_status config_double(const char *path, const tps_json *root, const char *const *keys, double lo,
                                double hi, double *out, bool *found, tps_error *err)
{
    const char *key = NULL;
    const tps_json *v = first_key(root, keys, &key);
    *found = v != NULL;
    if (!v) return TPS_OK;
    if (v->type != TPS_JSON_NUMBER || !(v->u.number.f64 > lo && v->u.number.f64 <= hi))
        return tps_fail(err, TPS_EINVALID, "%s: \"%s\" must be a number in (%g, %g]", path, key, lo, hi);
    *out = v->u.number.f64;
    return TPS_OK;
}

/* gemma_keys into l->cfg (config.json only: the block: section has no such keys).  A
 * sliding_window is read only where the layout's block uses it: Mistral and Qwen2 configs
 * carry one that the llama preset's verify does not model. */
static tps_status apply_gemma_keys(tps_layout *l, const char *path, const tps_json *root, tps_error *err)
{
    double *caps[] = {&l->cfg.attn_softcap, &l->cfg.final_softcap, &l->cfg.query_pre_attn_scalar};
    bool found;
    tps_status st;
    for (int i = 0; i < 3; i++) {
        const char *keys[] = {gemma_keys[i], NULL};
        if ((st = config_double(path, root, keys, 0, 1e12, caps[i], &found, err)) != TPS_OK) return st;
    }
    if (!l->block_raw.sliding_window_pattern) return TPS_OK;
    const char *keys[] = {gemma_keys[3], NULL};
    return config_u64(path, root, keys, &l->cfg.sliding_window, &found, err);
}

/* A non-negative integer of config.json (null or absent: not found). */
static tps_status config_count(const char *path, const tps_json *root, const char *key, uint64_t *out, bool *found,
                               tps_error *err)
{
    const tps_json *v = tps_json_get(root, key);
    *found = v && v->type != TPS_JSON_NULL;
    if (!*found) return TPS_OK;
    if (v->type != TPS_JSON_NUMBER || !v->u.number.is_u64)
        return tps_fail(err, TPS_EINVALID, "%s: \"%s\" must be a non-negative integer", path, key);
    *out = v->u.number.u64;
    return TPS_OK;
}

/* config.json's routing keys (moe_keys) into l->cfg.moe.  A method verify does not compute
 * is refused only when the layout's block leaves it open, as the activation is. */
static tps_status apply_moe_config(tps_layout *l, const char *path, const tps_json *root, tps_error *err)
{
    tps_moe_routing *m = &l->cfg.moe;
    tps_status st;
    bool found;
    for (int i = 0; i < 2; i++) {
        const tps_json *v = tps_json_get(root, moe_keys[i]);
        unsigned bit = 1u << (TPS_BF_SCORING + i);
        if (!v || v->type == TPS_JSON_NULL || !l->has_block || (l->block_set & bit)) continue;
        int k = v->type != TPS_JSON_STRING ? -1 : i == 0 ? tps_moe_scoring_lookup(v->u.string.s)
                                                         : tps_moe_topk_lookup(v->u.string.s);
        if (k < 0)
            return tps_fail(err, TPS_EINVALID, "%s: \"%s\" is not a routing tpshard computes (%s); set %s: in the "
                            "layout's block", path, moe_keys[i],
                            i == 0 ? "softmax, sigmoid" : "greedy, group_limited_greedy, noaux_tc", moe_keys[i]);
        if (i == 0) m->scoring = (tps_moe_scoring)k;
        else m->topk_method = (tps_moe_topk)k;
        l->cfg_set |= bit;
    }
    const tps_json *v = tps_json_get(root, "norm_topk_prob");
    if (v && v->type == TPS_JSON_BOOL) {
        m->norm_topk_prob = v->u.boolean;
        l->cfg_set |= 1u << TPS_BF_NORM_TOPK;
    }
    static const char *const scaling_keys[] = {"routed_scaling_factor", NULL};
    if ((st = config_double(path, root, scaling_keys, 0, 1e6, &m->scaling, &found, err)) != TPS_OK) return st;
    if (found) l->cfg_set |= 1u << TPS_BF_SCALING;
    struct {
        const char *key;
        uint64_t *out;
        int bit;
    } counts[] = {{"n_group", &m->n_group, TPS_BF_N_GROUP},
                  {"topk_group", &m->topk_group, TPS_BF_TOPK_GROUP},
                  {"first_k_dense_replace", &m->first_k_dense, TPS_BF_FIRST_DENSE},
                  {"moe_layer_freq", &m->layer_freq, TPS_BF_LAYER_FREQ},
                  {"decoder_sparse_step", &m->sparse_step, TPS_BF_SPARSE_STEP}};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        if ((st = config_count(path, root, counts[i].key, counts[i].out, &found, err)) != TPS_OK) return st;
        if (found) l->cfg_set |= 1u << counts[i].bit;
    }
    const tps_json *only = tps_json_get(root, "mlp_only_layers");
    if (only && only->type != TPS_JSON_NULL) {
        if (only->type != TPS_JSON_ARRAY)
            return tps_fail(err, TPS_EINVALID, "%s: \"mlp_only_layers\" must be a list of layer numbers", path);
        for (size_t i = 0; i < only->u.array.n; i++) {
            const tps_json *e = only->u.array.items[i];
            if (e->type != TPS_JSON_NUMBER || !e->u.number.is_u64 || e->u.number.u64 >= TPS_MOE_MAX_LAYERS)
                return tps_fail(err, TPS_EINVALID, "%s: \"mlp_only_layers\" must list layer numbers below %d", path,
                                TPS_MOE_MAX_LAYERS);
            m->mlp_only[e->u.number.u64 / 64] |= 1ull << (e->u.number.u64 % 64);
        }
        l->cfg_set |= 1u << TPS_BF_MLP_ONLY;
    }
    return TPS_OK;
}

static bool json_true(const tps_json *root, const char *key)
{
    const tps_json *v = tps_json_get(root, key);
    return v && v->type == TPS_JSON_BOOL && v->u.boolean;
}

/* Falcon says num_kv_heads (n_head_kv in the original RW configs) where others say
 * num_key_value_heads, and it counts KV heads only with new_decoder_architecture (the 40B
 * and 180B; model_type RefinedWeb is that code's first release); otherwise multi_query,
 * which FalconConfig defaults to true, means one KV head (7B), and without it every head has
 * its own (falcon-rw), as transformers' FalconAttention reads them.  The new architecture
 * always runs attention and MLP in parallel. */
static void falcon_config(const tps_json *root, tps_model_sizes *cfg, bool *parallel)
{
    const tps_json *mt = tps_json_get(root, "model_type");
    const char *type = mt && mt->type == TPS_JSON_STRING ? mt->u.string.s : "";
    bool rw40 = strcmp(type, "RefinedWeb") == 0, nda = json_true(root, "new_decoder_architecture") || rw40;
    bool falcon = nda || strcmp(type, "falcon") == 0 || strcmp(type, "RefinedWebModel") == 0 ||
                  tps_json_get(root, "multi_query");
    *parallel = nda;
    if (!falcon || cfg->kv_heads) return;
    const tps_json *mq = tps_json_get(root, "multi_query");
    bool multi_query = !mq || mq->type != TPS_JSON_BOOL || mq->u.boolean;
    const char *which = NULL;
    const tps_json *kv = first_key(root, falcon_keys + 3, &which);
    if (!nda && multi_query) cfg->kv_heads = 1;
    else if (nda && kv && kv->type == TPS_JSON_NUMBER && kv->u.number.is_u64 && kv->u.number.u64)
        cfg->kv_heads = kv->u.number.u64;
}

/* gemma3_keys into l->cfg.  Which layers are local belongs to the checkpoint: layer_types
 * (transformers 4.53 and later write it), else config.json's sliding_window_pattern (the
 * first Gemma 3 releases), decide over the block's sliding_window_pattern, which stays the
 * family's default; like sliding_window, only where the block has local layers at all. */
static tps_status apply_gemma3_keys(tps_layout *l, const char *path, const tps_json *root, tps_error *err)
{
    bool found;
    tps_status st;
    const char *theta[] = {gemma3_keys[0], NULL}, *pattern[] = {gemma3_keys[2], NULL};
    if ((st = config_double(path, root, theta, 0, 1e12, &l->cfg.rope_local_theta, &found, err)) != TPS_OK) return st;
    if (!l->block_raw.sliding_window_pattern) return TPS_OK;
    if ((st = config_u64(path, root, pattern, &l->cfg.sliding_window_pattern, &found, err)) != TPS_OK) return st;
    const tps_json *lt = tps_json_get(root, gemma3_keys[1]);
    if (!lt || lt->type == TPS_JSON_NULL) return TPS_OK;
    size_t n = lt->type == TPS_JSON_ARRAY ? lt->u.array.n : 0;
    if (!n || (l->sizes.layers && n != l->sizes.layers))
        return tps_fail(err, TPS_EINVALID, "%s: \"layer_types\" must list one type for each of the %llu layers", path,
                        (unsigned long long)l->sizes.layers);
    char *types = malloc(n + 1);
    if (!types) return tps_fail_oom(err, "config.json's layer_types");
    for (size_t i = 0; i < n; i++) {
        const tps_json *v = lt->u.array.items[i];
        const char *s = v->type == TPS_JSON_STRING ? v->u.string.s : "";
        if (strcmp(s, "sliding_attention") != 0 && strcmp(s, "full_attention") != 0) {
            free(types);
            return tps_fail(err, TPS_EINVALID,
                            "%s: \"layer_types\" entry %zu is not \"sliding_attention\" or \"full_attention\"", path, i);
        }
        types[i] = s[0] == 's' ? 's' : 'f';
    }
    types[n] = '\0';
    free(l->cfg.layer_types);
    l->cfg.layer_types = types;
    return TPS_OK;
}

/* A multimodal config.json (Gemma 3, LLaVA) keeps the language model's keys in text_config;
 * those are the ones the layers need. */
static const tps_json *text_root(const tps_json *root)
{
    const tps_json *tc = tps_json_get(root, "text_config");
    return tc && tc->type == TPS_JSON_OBJECT && !tps_json_get(root, "hidden_size") ? tc : root;
}

static tps_status apply_config(tps_layout *l, const char *path, const tps_json *root, tps_error *err)
{
    if (!root || root->type != TPS_JSON_OBJECT)
        return tps_fail(err, TPS_EINVALID, "%s: a config.json must be a JSON object", path);
    tps_status st;
    tps_model_sizes cfg = {0};
    bool found;
    for (int i = 0; i < TPS_NSIZES; i++)
        if ((st = config_u64(path, root, size_keys[i], tps_size_slot(&cfg, i), &found, err)) != TPS_OK) return st;
    /* Defaults the model classes apply to absent keys: K/V heads equal the query heads
     * (MHA); head_dim is hidden / heads; GPT-2's n_inner (null) is 4 * n_embd. */
    bool falcon_parallel = false;
    falcon_config(root, &cfg, &falcon_parallel);
    if (!cfg.kv_heads) cfg.kv_heads = cfg.heads;
    if (!cfg.head_dim && cfg.hidden && cfg.heads) {
        if (cfg.hidden % cfg.heads != 0)
            return tps_fail(err, TPS_EINVALID, "%s: hidden size %llu is not a multiple of %llu heads and no head_dim is given",
                            path, (unsigned long long)cfg.hidden, (unsigned long long)cfg.heads);
        cfg.head_dim = cfg.hidden / cfg.heads;
    }
    if (!cfg.intermediate && tps_json_get(root, "n_embd") && cfg.hidden && !tps_mul_u64(cfg.hidden, 4, &cfg.intermediate))
        cfg.intermediate = 0;
    /* DeepSeek's shared experts run as one MLP of n_shared_experts expert widths. */
    uint64_t n_shared = 0;
    if ((st = config_count(path, root, "n_shared_experts", &n_shared, &found, err)) != TPS_OK) return st;
    if (!cfg.shared_intermediate && n_shared && !tps_mul_u64(n_shared, cfg.moe_intermediate, &cfg.shared_intermediate))
        cfg.shared_intermediate = 0;
    for (int i = 0; i < TPS_NSIZES; i++) {
        uint64_t *dst = tps_size_slot(&l->sizes, i);
        if (!*dst) *dst = tps_size_get(&cfg, i);
    }

    /* Block settings; kept separately so the layout's own block: values still win. */
    if ((st = config_double(path, root, eps_keys, 0, 1, &l->cfg.norm_eps, &found, err)) != TPS_OK) return st;
    if (found) l->cfg_set |= 1u << TPS_BF_NORM_EPS;
    if ((st = config_double(path, root, theta_keys, 0, 1e12, &l->cfg.rope_theta, &found, err)) != TPS_OK) return st;
    if (found) l->cfg_set |= 1u << TPS_BF_ROPE_THETA;
    if ((st = config_double(path, root, pct_keys, 0, 1, &l->cfg.rotary_pct, &found, err)) != TPS_OK) return st;
    if (found) l->cfg_set |= 1u << TPS_BF_ROTARY_PCT;
    if ((st = config_u64(path, root, topk_keys, &l->cfg.top_k, &found, err)) != TPS_OK) return st;
    if (found) l->cfg_set |= 1u << TPS_BF_TOP_K;
    const char *key = NULL;
    const tps_json *pr = first_key(root, parallel_residual_keys, &key);
    if ((pr && pr->type == TPS_JSON_BOOL) || falcon_parallel) {
        l->cfg.parallel_residual = falcon_parallel || pr->u.boolean;
        l->cfg_set |= 1u << TPS_BF_PARALLEL_RESIDUAL;
    }
    /* DeepSeek-V3's rope_interleave (transformers: de-interleave, then rotate_half: the
     * pairs (2i, 2i+1)); false rotates the halves as Llama does. */
    const tps_json *ri = tps_json_get(root, rope_interleave_keys[0]);
    if (ri && ri->type == TPS_JSON_BOOL) {
        l->cfg.rope = ri->u.boolean ? TPS_ROPE_INTERLEAVED : TPS_ROPE_HALF;
        l->cfg_set |= 1u << TPS_BF_ROPE;
    }
    const tps_json *act = first_key(root, act_keys, &key);
    /* An activation tpshard cannot compute only matters to verify, and only when the
     * layout's block leaves act open; say so then rather than refusing the split. */
    if (act && l->has_block && !(l->block_set & (1u << TPS_BF_ACT))) {
        int a = act->type == TPS_JSON_STRING ? tps_act_from_hf(act->u.string.s) : -1;
        if (a < 0)
            return tps_fail(err, TPS_EINVALID,
                            "%s: \"%s\" is not an activation tpshard computes (silu, gelu, gelu_new, "
                            "gelu_fast, gelu_pytorch_tanh); set act: in the layout's block",
                            path, key);
        l->cfg.act = (tps_act_kind)a;
        l->cfg_set |= 1u << TPS_BF_ACT;
    }
    const tps_json *nk = tps_json_get(root, normalization_keys[0]);
    if (nk && nk->type == TPS_JSON_STRING && l->has_block && !(l->block_set & (1u << TPS_BF_NORM))) {
        if (strcmp(nk->u.string.s, "RMSNorm") && strcmp(nk->u.string.s, "LayerNorm"))
            return tps_fail(err, TPS_EINVALID, "%s: normalization \"%s\" is neither RMSNorm nor LayerNorm", path,
                            nk->u.string.s);
        l->cfg.norm = strcmp(nk->u.string.s, "RMSNorm") == 0 ? TPS_NORM_RMS : TPS_NORM_LAYER;
        l->cfg_set |= 1u << TPS_BF_NORM;
    }
    if ((st = apply_gemma_keys(l, path, root, err)) != TPS_OK) return st;
    if ((st = apply_moe_config(l, path, root, err)) != TPS_OK) return st;
    if ((st = apply_gemma3_keys(l, path, root, err)) != TPS_OK) return st;
    if ((st = tps_llama4_from_config(root, path, cfg.layers, &l->cfg.llama4, &l->cfg.moe, &l->cfg_set, TPS_BF_MLP_ONLY,
                                     TPS_BF_SPARSE_STEP, err)) != TPS_OK)
        return st;
    return tps_rope_scaling_from_config(root, path, &l->cfg.rope_scaling, err);
}

/* quantization_config: at the top level, or in a multimodal config's text_config. */
static tps_status apply_quant_config(tps_layout *l, const char *what, const tps_json *root, tps_error *err)
{
    const tps_json *qc = tps_json_get(root, quant_keys[0]);
    if (!qc) qc = tps_json_get(text_root(root), quant_keys[0]);
    tps_quant *q = NULL;
    tps_status st = tps_quant_from_config(qc, what, &q, err);
    if (st != TPS_OK) return st;
    tps_quant_free(l->quant);
    l->quant = q;
    return TPS_OK;
}

/* Copies the keys tpshard reads (those present) from root into one compact JSON object. */
static tps_status keep_known_keys(const tps_json *root, const char *what, char **out, tps_error *err)
{
    tps_buf b = TPS_BUF_INIT;
    tps_jw w;
    tps_jw_init(&w, &b, false);
    tps_jw_object_begin(&w);
    for (size_t i = 0; i < TPS_NSIZES + sizeof block_key_lists / sizeof *block_key_lists; i++) {
        const char *const *keys = i < TPS_NSIZES ? size_keys[i] : block_key_lists[i - TPS_NSIZES];
        for (; *keys; keys++) {
            const tps_json *v = tps_json_get(root, *keys);
            if (!v) continue;
            tps_jw_key(&w, *keys);
            tps_jw_value(&w, v);
        }
    }
    tps_jw_object_end(&w);
    if (!tps_buf_cstr(&b)) {
        tps_buf_release(&b);
        return tps_fail_oom(err, what);
    }
    *out = b.data;
    return TPS_OK;
}

tps_status tps_layout_apply_config_text(tps_layout *l, const char *text, size_t len, const char *what, char **kept,
                                        tps_error *err)
{
    tps_json_doc *doc = NULL;
    tps_status st = TPS_OK;
    if (kept) *kept = NULL;
    TPS_CHECK(tps_json_parse(text, len, what, &doc, err));
    TPS_CHECK(apply_config(l, what, text_root(tps_json_root(doc)), err));
    TPS_CHECK(apply_quant_config(l, what, tps_json_root(doc), err));
    tps_layout_sync_block(l);
    if (kept) TPS_CHECK(keep_known_keys(text_root(tps_json_root(doc)), what, kept, err));
cleanup:
    tps_json_doc_free(doc);
    return st;
}

tps_status tps_layout_read_config(tps_layout *l, const char *config_path, char **kept, tps_error *err)
{
    char *text = NULL;
    size_t len = 0;
    tps_status st = tps_read_config_file(config_path, &text, &len, err);
    if (st == TPS_OK) st = tps_layout_apply_config_text(l, text, len, config_path, kept, err);
    free(text);
    return st;
}

/* One tensor hint: the value every matching tensor agrees on, or 0 when none matches. */
static tps_status infer_from_tensors(tps_layout *l, const tps_hint *h, int size, const tps_index *ix,
                                     uint64_t *out, tps_error *err)
{
    const char *sname = tps_size_names[size];
    const tps_tensor *first = NULL;
    uint64_t unit = 1, value = 0;
    char ctx[128];
    snprintf(ctx, sizeof ctx, "inferring %s (%s:%zu:%zu)", sname, l->source, h->at.line, h->at.col);
    if (h->unit.n) {
        tps_status st = tps_expr_eval(&h->unit, &l->sizes, l->source, ctx, &unit, err);
        if (st == TPS_OK && unit == 0) st = tps_fail(err, TPS_EINVALID, "%s: unit is 0", ctx);
        if (st != TPS_OK) return st;
    }
    for (size_t i = 0; i < ix->ntensors; i++) {
        const tps_tensor *t = &ix->tensors[i];
        if (!tps_glob_match(h->glob, t->name)) continue;
        int d = h->dim < 0 ? t->ndim + h->dim : h->dim;
        char shp[256];
        tps_shape_str(t->shape, t->ndim, shp, sizeof shp);
        if (d < 0 || d >= t->ndim)
            return tps_fail(err, TPS_EINVALID, "%s: tensor %s has shape %s, without dim %d", ctx, t->name, shp, h->dim);
        if (t->shape[d] % unit != 0)
            return tps_fail(err, TPS_EINVALID, "%s: dim %d of tensor %s (shape %s) is not a multiple of unit %s = %llu",
                            ctx, d, t->name, shp, h->unit.text, (unsigned long long)unit);
        uint64_t v = t->shape[d] / unit;
        if (first && v != value)
            return tps_fail(err, TPS_EINVALID, "%s: tensors disagree: %s gives %llu, %s gives %llu", ctx, first->name,
                            (unsigned long long)value, t->name, (unsigned long long)v);
        first = t;
        value = v;
    }
    *out = value;
    return TPS_OK;
}

tps_status tps_layout_infer_sizes(tps_layout *l, const tps_index *ix, tps_error *err)
{
    /* Hints may build on each other (head_dim from a tensor, heads = hidden / head_dim), so
     * resolve whatever is ready until a pass makes no progress. */
    for (bool progress = true; progress;) {
        progress = false;
        for (int i = 0; i < TPS_NSIZES; i++) {
            const tps_hint *h = &l->hints[i];
            uint64_t *slot = tps_size_slot(&l->sizes, i), v = 0;
            if (*slot || h->kind == TPS_HINT_NONE) continue;
            tps_status st = TPS_OK;
            if (h->kind == TPS_HINT_TENSOR) {
                if (h->unit.n && !tps_expr_ready(&h->unit, &l->sizes)) continue;
                st = infer_from_tensors(l, h, i, ix, &v, err);
            } else if (h->kind == TPS_HINT_COUNT) {
                for (size_t t = 0; t < ix->ntensors; t++) v += tps_glob_match(h->glob, ix->tensors[t].name);
            } else {
                if (!tps_expr_ready(&h->expr, &l->sizes)) continue;
                char ctx[128];
                snprintf(ctx, sizeof ctx, "inferring %s", tps_size_names[i]);
                st = tps_expr_eval(&h->expr, &l->sizes, l->source, ctx, &v, err);
            }
            if (st != TPS_OK) return st;
            if (v) {
                *slot = v;
                progress = true;
            }
        }
    }
    tps_layout_sync_block(l);
    return TPS_OK;
}

void tps_layout_sync_block(tps_layout *l)
{
    if (!l->has_block) return;
    const tps_block *raw = &l->block_raw;
    tps_block b = *raw;
    /* Kind defaults: what the reference implementations of each family do. */
    struct {
        tps_norm_kind norm;
        tps_act_kind act;
        tps_rope_style rope;
        double theta, pct;
        bool parres, conv1d, qkvi;
        uint64_t top_k;
    } def[] = {
        [TPS_BLOCK_LLAMA] = {TPS_NORM_RMS, TPS_ACT_SILU, TPS_ROPE_HALF, 10000, 1, false, false, false, 0},
        [TPS_BLOCK_GPT2] = {TPS_NORM_LAYER, TPS_ACT_GELU_TANH, TPS_ROPE_NONE, 10000, 1, false, true, false, 0},
        [TPS_BLOCK_NEOX] = {TPS_NORM_LAYER, TPS_ACT_GELU_ERF, TPS_ROPE_HALF, 10000, 0.25, true, false, true, 0},
        [TPS_BLOCK_MIXTRAL] = {TPS_NORM_RMS, TPS_ACT_SILU, TPS_ROPE_HALF, 1e6, 1, false, false, false, 2},
    };
    const unsigned set = l->block_set, cset = l->cfg_set & ~set;
#define PICK(bit, field, dflt)                                    \
    do {                                                          \
        if (set & (1u << (bit))) b.field = raw->field;            \
        else if (cset & (1u << (bit))) b.field = l->cfg.field;    \
        else b.field = (dflt);                                    \
    } while (0)
    PICK(TPS_BF_NORM, norm, def[raw->kind].norm);
    PICK(TPS_BF_NORM_EPS, norm_eps, 1e-5);
    PICK(TPS_BF_ACT, act, def[raw->kind].act);
    PICK(TPS_BF_ROPE, rope, def[raw->kind].rope);
    PICK(TPS_BF_ROPE_THETA, rope_theta, def[raw->kind].theta);
    PICK(TPS_BF_ROTARY_PCT, rotary_pct, def[raw->kind].pct);
    PICK(TPS_BF_PARALLEL_RESIDUAL, parallel_residual, def[raw->kind].parres);
    PICK(TPS_BF_CONV1D, conv1d, def[raw->kind].conv1d);
    PICK(TPS_BF_QKV_INTERLEAVED, qkv_interleaved, def[raw->kind].qkvi);
    PICK(TPS_BF_TOP_K, top_k, def[raw->kind].top_k);
    /* Routing defaults: transformers' (Mixtral renormalizes its top-k weights always). */
    PICK(TPS_BF_SCORING, moe.scoring, TPS_MOE_SOFTMAX);
    PICK(TPS_BF_TOPK_METHOD, moe.topk_method, TPS_MOE_TOPK_GREEDY);
    PICK(TPS_BF_NORM_TOPK, moe.norm_topk_prob, raw->kind == TPS_BLOCK_MIXTRAL);
    PICK(TPS_BF_SCALING, moe.scaling, 1.0);
    PICK(TPS_BF_N_GROUP, moe.n_group, 1);
    PICK(TPS_BF_TOPK_GROUP, moe.topk_group, 1);
    PICK(TPS_BF_FIRST_DENSE, moe.first_k_dense, 0);
    PICK(TPS_BF_LAYER_FREQ, moe.layer_freq, 1);
    PICK(TPS_BF_SPARSE_STEP, moe.sparse_step, 1);
    if (cset & (1u << TPS_BF_MLP_ONLY)) memcpy(b.moe.mlp_only, l->cfg.moe.mlp_only, sizeof b.moe.mlp_only);
    PICK(TPS_BF_QKV_GROUPED, qkv_grouped, false);
#undef PICK
    b.rope_scaling = l->cfg.rope_scaling; /* config.json only: the block: section has no such key */
    b.attn_softcap = l->cfg.attn_softcap;
    b.final_softcap = l->cfg.final_softcap;
    b.query_pre_attn_scalar = l->cfg.query_pre_attn_scalar;
    b.sliding_window = l->cfg.sliding_window;
    b.rope_local_theta = l->cfg.rope_local_theta;
    b.layer_types = l->cfg.layer_types;
    b.llama4 = l->cfg.llama4; /* config.json's; whether the layers are Llama 4's is the block's */
    b.llama4.on = raw->llama4.on;
    tps_quant_block(l->quant, b.fp8_block);
    tps_quant_int_params(l->quant, &b.int_bits, &b.gptq_v2);
    b.mxfp4 = tps_quant_is_mxfp4(l->quant);
    if (l->cfg.sliding_window_pattern) b.sliding_window_pattern = l->cfg.sliding_window_pattern;
    const tps_model_sizes *s = &l->sizes;
    if (!b.layers) b.layers = s->layers;
    if (!b.hidden) b.hidden = s->hidden;
    if (!b.heads) b.heads = s->heads;
    if (!b.kv_heads) b.kv_heads = s->kv_heads;
    if (!b.head_dim) b.head_dim = s->head_dim;
    if (!b.intermediate) b.intermediate = s->intermediate;
    if (!b.experts) b.experts = s->experts;
    if (!b.moe_intermediate) b.moe_intermediate = s->moe_intermediate;
    if (!b.shared_intermediate) b.shared_intermediate = s->shared_intermediate;
    if (b.attention == TPS_ATTN_MLA) {
        /* transformers' DeepseekV3Config defaults rope_interleave to true */
        if (!((set | cset) & (1u << TPS_BF_ROPE))) b.rope = TPS_ROPE_INTERLEAVED;
        b.qk_nope_head_dim = s->qk_nope_head_dim;
        b.qk_rope_head_dim = s->qk_rope_head_dim;
        b.v_head_dim = s->v_head_dim;
    }
    l->block = b;
}
