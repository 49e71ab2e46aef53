#include "megatron_hf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "../base/buf.h"
#include "../base/checked.h"
#include "../base/json.h"
#include "../layout/presets.h"
#include "../base/yaml_query.h"
#include "../targets/target.h"
#include "megatron_args.h"
#include "megatron_hf_int.h"

/* ---- args ---- */

static void put_key(tps_buf *b, const char *k)
{
    if (b->len > 1) tps_buf_puts(b, ", ");
    tps_json_escape(b, k, strlen(k));
    tps_buf_puts(b, ": ");
}

bool tps_mhf_has_key(const char *const *keys, size_t n, const char *k)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(keys[i], k) == 0) return true;
    return false;
}

/* A float as the contract writes one: always with a '.' or an exponent. */
static void put_float(tps_buf *b, double v)
{
    char text[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(text, sizeof text, "%.*g", prec, v);
        if (strtod(text, NULL) == v) break;
    }
    tps_buf_puts(b, text);
    if (!strpbrk(text, ".eEn")) tps_buf_puts(b, ".0");
}

typedef struct argw {
    tps_buf b;
    const char *keys[256];
    size_t n;
} argw;

/* Starts arg k unless it was written already; false then. */
static bool arg_begin(argw *w, const char *k)
{
    if (tps_mhf_has_key(w->keys, w->n, k) || w->n == sizeof w->keys / sizeof *w->keys) return false;
    w->keys[w->n++] = k;
    put_key(&w->b, k);
    return true;
}

static void arg_u64(argw *w, const char *k, uint64_t v)
{
    if (arg_begin(w, k)) tps_buf_printf(&w->b, "%llu", (unsigned long long)v);
}

static void arg_raw(argw *w, const char *k, const char *text)
{
    if (arg_begin(w, k)) tps_buf_puts(&w->b, text);
}

static void arg_bool(argw *w, const char *k, bool v)
{
    arg_raw(w, k, v ? "true" : "false");
}

static void arg_str(argw *w, const char *k, const char *s)
{
    if (arg_begin(w, k)) tps_json_escape(&w->b, s, strlen(s));
}

static void arg_float(argw *w, const char *k, double v)
{
    if (arg_begin(w, k)) put_float(&w->b, v);
}

static const char *dtype_torch(tps_dtype d)
{
    switch (d) {
    case TPS_DT_BF16: return "bfloat16";
    case TPS_DT_F16: return "float16";
    case TPS_DT_F32: return "float32";
    default: return NULL;
    }
}

bool tps_mhf_number_of(const tps_json *v, double *out)
{
    if (!v || v->type != TPS_JSON_NUMBER) return false;
    *out = v->u.number.f64;
    return true;
}

/* Megatron's Llama-3.1 RoPE scaling (rope_utils.apply_scaling) is factor with low 1, high 4
 * and original 8192 fixed: anything else it would compute differently. */
static tps_status rope_scaling(const tps_json *cfg, const char *what, argw *w, tps_error *err)
{
    const tps_json *rs = tps_json_get(cfg, "rope_scaling");
    if (!rs || rs->type == TPS_JSON_NULL) {
        arg_bool(w, "use_rope_scaling", false);
        return TPS_OK;
    }
    const tps_json *type = tps_json_get(rs, "rope_type");
    if (!type) type = tps_json_get(rs, "type");
    double factor, low = 1, high = 4, orig = 8192;
    bool llama3 = type && type->type == TPS_JSON_STRING && strcmp(type->u.string.s, "llama3") == 0;
    if (!llama3 || !tps_mhf_number_of(tps_json_get(rs, "factor"), &factor))
        return tps_fail(err, TPS_EINVALID,
                        "%s: rope_scaling of type '%s': Megatron computes only Llama-3.1's (rope_type llama3)", what,
                        type && type->type == TPS_JSON_STRING ? type->u.string.s : "?");
    tps_mhf_number_of(tps_json_get(rs, "low_freq_factor"), &low);
    tps_mhf_number_of(tps_json_get(rs, "high_freq_factor"), &high);
    tps_mhf_number_of(tps_json_get(rs, "original_max_position_embeddings"), &orig);
    if (low != 1 || high != 4 || orig != 8192)
        return tps_fail(err, TPS_EINVALID,
                        "%s: rope_scaling low_freq_factor %g, high_freq_factor %g, original_max_position_embeddings "
                        "%g: Megatron's Llama-3.1 scaling has them fixed at 1, 4 and 8192",
                        what, low, high, orig);
    arg_bool(w, "use_rope_scaling", true);
    arg_float(w, "rope_scaling_factor", factor);
    return TPS_OK;
}

tps_status tps_megatron_hf_args(const tps_megatron_hf *h, const tps_layout *l, const char *config_text,
                                size_t config_len, const tps_index *view, uint64_t tp, uint64_t pp, char **out,
                                tps_error *err)
{
    *out = NULL;
    tps_json_doc *doc = NULL;
    argw w = {.b = TPS_BUF_INIT};
    tps_status st = tps_json_parse(config_text, config_len, "config.json", &doc, err);
    if (st) return st;
    const tps_json *cfg = tps_json_root(doc);
    const tps_model_sizes *s = tps_layout_sizes(l);
    const tps_tensor *emb = tps_index_find(view, "embedding.word_embeddings.weight");
    if (!emb || emb->ndim != 2) {
        st = tps_fail(err, TPS_EINVALID, "%s: no embedding.word_embeddings.weight [V, H] after the mapping",
                      view->path);
        goto cleanup;
    }
    const char *dt = dtype_torch(emb->dtype);
    if (!dt) {
        st = tps_fail(err, TPS_EINVALID, "%s: embeddings of dtype %s; Megatron's params_dtype is bf16, f16 or f32",
                      view->path, tps_dtype_name(emb->dtype));
        goto cleanup;
    }
    tps_buf_putc(&w.b, '{');
    for (size_t i = 0; i < h->na; i++) {
        const marg *a = &h->a[i];
        const tps_json *v = tps_json_get(cfg, a->config);
        if (!v || v->type == TPS_JSON_NULL) continue;
        if (a->as_float || a->as_int) {
            double d;
            if (!tps_mhf_number_of(v, &d) || (a->as_int && (d != floor(d) || fabs(d) > 9e15))) {
                st = tps_fail(err, TPS_EINVALID, "config.json: %s is not %s (for Megatron's %s)", a->config,
                              a->as_int ? "an integer" : "a number", a->arg);
                goto cleanup;
            }
            if (a->as_int) {
                if (arg_begin(&w, a->arg)) tps_buf_printf(&w.b, "%lld", (long long)d);
            } else {
                arg_float(&w, a->arg, d);
            }
        } else if (arg_begin(&w, a->arg)) {
            tps_buf b2 = TPS_BUF_INIT;
            tps_jw jw;
            tps_jw_init(&jw, &b2, false);
            tps_jw_value(&jw, v);
            const char *text = tps_buf_cstr(&b2);
            tps_buf_puts(&w.b, text ? text : "null");
            tps_buf_release(&b2);
        }
    }
    /* What every Megatron GPT model from a Hugging Face one has: the sizes tpshard checked
     * against the tensors where config.json lacks them, then the fixed choices
     * (what Megatron's tools/checkpoint loaders read: loader_base.ensure_required_arguments,
     * check_checkpoint_args in megatron/training/checkpointing.py). */
    arg_u64(&w, "num_layers", s->layers);
    arg_u64(&w, "hidden_size", s->hidden);
    arg_u64(&w, "ffn_hidden_size", s->intermediate);
    arg_u64(&w, "num_attention_heads", s->heads);
    arg_u64(&w, "num_query_groups", s->kv_heads ? s->kv_heads : s->heads);
    arg_bool(&w, "group_query_attention", s->kv_heads && s->kv_heads != s->heads);
    arg_u64(&w, "kv_channels", s->head_dim);
    arg_str(&w, "position_embedding_type", "rope");
    arg_bool(&w, "add_position_embedding", true);
    arg_bool(&w, "use_rotary_position_embeddings", true);
    arg_float(&w, "rotary_percent", 1.0);
    arg_bool(&w, "rotary_interleaved", false);
    TPS_CHECK(rope_scaling(cfg, view->path, &w, err));
    arg_str(&w, "normalization", "RMSNorm");
    arg_bool(&w, "apply_layernorm_1p", false);
    arg_bool(&w, "swiglu", true);
    arg_bool(&w, "squared_relu", false);
    bool qkv_bias = false, untied = false;
    for (size_t i = 0; i < view->ntensors; i++) {
        const char *n = view->tensors[i].name;
        size_t len = strlen(n), k = strlen(".linear_qkv.bias");
        qkv_bias = qkv_bias || (len >= k && strcmp(n + len - k, ".linear_qkv.bias") == 0);
        untied = untied || strcmp(n, "output_layer.weight") == 0;
    }
    arg_bool(&w, "add_bias_linear", false);
    arg_bool(&w, "disable_bias_linear", true);
    arg_bool(&w, "add_qkv_bias", qkv_bias);
    arg_bool(&w, "untie_embeddings_and_output_weights", untied);
    arg_bool(&w, "apply_query_key_layer_scaling", false);
    arg_float(&w, "attention_dropout", 0.0);
    arg_float(&w, "hidden_dropout", 0.0);
    uint64_t V = emb->shape[0], mult = 128 * tp, padded;
    if (!tps_mul_u64((V + mult - 1) / mult, mult, &padded)) {
        st = tps_fail(err, TPS_EARG, "--tp %llu: the padded vocabulary overflows", (unsigned long long)tp);
        goto cleanup;
    }
    arg_str(&w, "tokenizer_type", "HuggingFaceTokenizer");
    arg_raw(&w, "tokenizer_model", "null");
    arg_u64(&w, "vocab_size", V);
    arg_u64(&w, "padded_vocab_size", padded);
    arg_u64(&w, "make_vocab_size_divisible_by", 128);
    arg_u64(&w, "tensor_model_parallel_size", tp);
    arg_u64(&w, "pipeline_model_parallel_size", pp);
    arg_raw(&w, "virtual_pipeline_model_parallel_size", "null");
    arg_raw(&w, "num_layers_per_virtual_pipeline_stage", "null");
    arg_u64(&w, "expert_model_parallel_size", 1);
    arg_raw(&w, "num_experts", "null");
    arg_bool(&w, "sequence_parallel", false);
    arg_bool(&w, "fp16", emb->dtype == TPS_DT_F16);
    arg_bool(&w, "bf16", emb->dtype == TPS_DT_BF16);
    if (arg_begin(&w, "params_dtype")) tps_buf_printf(&w.b, "{\"$dtype\": \"%s\"}", dt);
    arg_str(&w, "ckpt_format", "torch");
    arg_str(&w, "transformer_impl", "local");
    arg_bool(&w, "bert_binary_head", false);
    arg_u64(&w, "consumed_train_samples", 0);
    arg_u64(&w, "consumed_valid_samples", 0);
    arg_u64(&w, "skipped_train_samples", 0);
    arg_u64(&w, "iteration", 1);
    tps_buf_putc(&w.b, '}');
    const char *text = tps_buf_cstr(&w.b);
    if (!text || !(*out = strdup(text))) st = tps_fail_oom(err, "writing Megatron's args");
cleanup:
    tps_json_doc_free(doc);
    tps_buf_release(&w.b);
    return st;
}
