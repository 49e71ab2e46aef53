#include "megatron_args.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/buf.h"

const tps_json *tps_megatron_args_fields(const tps_json *args)
{
    const tps_json *no = tps_json_get(args, "$newobj");
    if (!no || no->type != TPS_JSON_ARRAY || no->u.array.n != 3) return NULL;
    const tps_json *cls = no->u.array.items[0], *state = no->u.array.items[2];
    if (cls->type != TPS_JSON_STRING || strcmp(cls->u.string.s, "argparse.Namespace") != 0) return NULL;
    return state->type == TPS_JSON_OBJECT ? state : NULL;
}

/* A field that must be a positive integer when present and not None; *found whether it is. */
static tps_status field_u64(const tps_json *f, const char *key, const char *what, uint64_t *out, bool *found,
                            tps_error *err)
{
    const tps_json *v = tps_json_get(f, key);
    *found = v && v->type != TPS_JSON_NULL;
    if (!*found) return TPS_OK;
    if (v->type != TPS_JSON_NUMBER || !v->u.number.is_u64 || v->u.number.u64 == 0)
        return tps_fail(err, TPS_EINVALID, "%s: args.%s is not a positive integer", what, key);
    *out = v->u.number.u64;
    return TPS_OK;
}

static tps_status need_u64(const tps_json *f, const char *key, const char *what, uint64_t *out, tps_error *err)
{
    bool found;
    tps_status st = field_u64(f, key, what, out, &found, err);
    if (st == TPS_OK && !found)
        st = tps_fail(err, TPS_EINVALID, "%s: args lack %s, which Megatron's checkpoints carry: not a Megatron-LM model checkpoint, or one this reader does not know",
                      what, key);
    return st;
}

static bool field_bool(const tps_json *f, const char *key, bool dflt)
{
    const tps_json *v = tps_json_get(f, key);
    return v && v->type == TPS_JSON_BOOL ? v->u.boolean : dflt;
}

static double field_double(const tps_json *f, const char *key, double dflt)
{
    const tps_json *v = tps_json_get(f, key);
    return v && v->type == TPS_JSON_NUMBER && isfinite(v->u.number.f64) ? v->u.number.f64 : dflt;
}

static const char *field_str(const tps_json *f, const char *key)
{
    const tps_json *v = tps_json_get(f, key);
    return v && v->type == TPS_JSON_STRING ? v->u.string.s : NULL;
}

static tps_status read_fields(const tps_json *f, const char *what, tps_megatron_model *m, tps_error *err)
{
    tps_status st;
    bool found;
    memset(m, 0, sizeof *m);
    if ((st = need_u64(f, "num_layers", what, &m->layers, err)) || (st = need_u64(f, "hidden_size", what, &m->hidden, err)) ||
        (st = need_u64(f, "num_attention_heads", what, &m->heads, err)))
        return st;
    m->tp = m->pp = 1;
    if ((st = field_u64(f, "tensor_model_parallel_size", what, &m->tp, &found, err)) ||
        (st = field_u64(f, "pipeline_model_parallel_size", what, &m->pp, &found, err)))
        return st;
    m->groups = m->heads;
    if (field_bool(f, "group_query_attention", false)) {
        if ((st = need_u64(f, "num_query_groups", what, &m->groups, err))) return st;
    }
    if (m->heads % m->groups)
        return tps_fail(err, TPS_EINVALID, "%s: args.num_attention_heads %llu is not a multiple of num_query_groups %llu",
                        what, (unsigned long long)m->heads, (unsigned long long)m->groups);
    if ((st = field_u64(f, "kv_channels", what, &m->head_dim, &found, err))) return st;
    if (!found) {
        if (m->hidden % m->heads)
            return tps_fail(err, TPS_EINVALID, "%s: args have no kv_channels and hidden_size %llu is not a multiple of "
                                               "num_attention_heads %llu",
                            what, (unsigned long long)m->hidden, (unsigned long long)m->heads);
        m->head_dim = m->hidden / m->heads;
    }
    if ((st = field_u64(f, "ffn_hidden_size", what, &m->ffn, &found, err))) return st;
    if (!found) m->ffn = 4 * m->hidden; /* Megatron's default (arguments.py) */
    m->swiglu = field_bool(f, "swiglu", false);
    if ((st = field_u64(f, "num_experts", what, &m->experts, &found, err))) return st;
    if (found) {
        m->moe_ffn = m->ffn;
        m->topk = 2;
        if ((st = field_u64(f, "moe_ffn_hidden_size", what, &m->moe_ffn, &found, err)) ||
            (st = field_u64(f, "moe_router_topk", what, &m->topk, &found, err)))
            return st;
    }
    if ((st = field_u64(f, "vocab_size", what, &m->vocab, &found, err)) ||
        (st = field_u64(f, "padded_vocab_size", what, &m->padded_vocab, &found, err)))
        return st;
    m->vocab_divisor = 128;
    if ((st = field_u64(f, "make_vocab_size_divisible_by", what, &m->vocab_divisor, &found, err))) return st;
    m->untied = field_bool(f, "untie_embeddings_and_output_weights", false);
    const char *norm = field_str(f, "normalization");
    m->rms = norm && strcmp(norm, "RMSNorm") == 0;
    if (norm && !m->rms && strcmp(norm, "LayerNorm") != 0)
        return tps_fail(err, TPS_EINVALID, "%s: args.normalization '%s' is neither LayerNorm nor RMSNorm", what, norm);
    m->norm_eps = field_double(f, "norm_epsilon", field_double(f, "layernorm_epsilon", 1e-5));
    const char *pos = field_str(f, "position_embedding_type");
    m->learned_positions = !pos || strcmp(pos, "learned_absolute") == 0;
    m->rotary_base = field_double(f, "rotary_base", 10000);
    m->rotary_percent = field_double(f, "rotary_percent", 1.0);
    m->rotary_interleaved = field_bool(f, "rotary_interleaved", false);
    return TPS_OK;
}

tps_status tps_megatron_args_read(const char *args_json, const char *what, tps_megatron_model *out, tps_error *err)
{
    tps_json_doc *doc = NULL;
    tps_status st = tps_json_parse(args_json, strlen(args_json), what, &doc, err);
    if (st) return st;
    const tps_json *f = tps_megatron_args_fields(tps_json_root(doc));
    if (!f) st = tps_fail(err, TPS_EINVALID, "%s: args is not an argparse.Namespace of fields", what);
    else st = read_fields(f, what, out, err);
    tps_json_doc_free(doc);
    return st;
}

const char *tps_megatron_preset(const tps_megatron_model *m) { return m->swiglu ? "megatron_gpt" : "megatron_gpt_gelu"; }

tps_status tps_megatron_config_text(const tps_megatron_model *m, uint64_t v, char **out, tps_error *err)
{
    *out = NULL;
    tps_buf b = TPS_BUF_INIT;
    tps_jw w;
    tps_jw_init(&w, &b, false);
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "hidden_size");
    tps_jw_u64(&w, m->hidden);
    tps_jw_key(&w, "num_attention_heads");
    tps_jw_u64(&w, m->heads);
    tps_jw_key(&w, "num_key_value_heads");
    tps_jw_u64(&w, m->groups);
    tps_jw_key(&w, "head_dim");
    tps_jw_u64(&w, m->head_dim);
    tps_jw_key(&w, "intermediate_size");
    tps_jw_u64(&w, m->ffn);
    tps_jw_key(&w, "vocab_size");
    tps_jw_u64(&w, v);
    tps_jw_key(&w, "num_hidden_layers");
    tps_jw_u64(&w, m->layers);
    if (m->experts) {
        tps_jw_key(&w, "num_local_experts");
        tps_jw_u64(&w, m->experts);
        tps_jw_key(&w, "moe_intermediate_size");
        tps_jw_u64(&w, m->moe_ffn);
        tps_jw_key(&w, "num_experts_per_tok");
        tps_jw_u64(&w, m->topk);
    }
    tps_jw_key(&w, m->rms ? "rms_norm_eps" : "layer_norm_eps");
    tps_jw_double(&w, m->norm_eps);
    tps_jw_key(&w, "normalization");
    tps_jw_string(&w, m->rms ? "RMSNorm" : "LayerNorm");
    /* Megatron's GeLU is torch's erf form (F.gelu); SwiGLU gates with SiLU. */
    tps_jw_key(&w, "hidden_act");
    tps_jw_string(&w, m->swiglu ? "silu" : "gelu");
    if (!m->learned_positions) {
        tps_jw_key(&w, "rope_theta");
        tps_jw_double(&w, m->rotary_base);
        tps_jw_key(&w, "partial_rotary_factor");
        tps_jw_double(&w, m->rotary_percent);
    }
    tps_jw_key(&w, "tie_word_embeddings");
    tps_jw_bool(&w, !m->untied);
    tps_jw_object_end(&w);
    const char *s = tps_buf_cstr(&b);
    if (!s || !(*out = strdup(s))) {
        tps_buf_release(&b);
        return tps_fail_oom(err, "describing the model");
    }
    tps_buf_release(&b);
    return TPS_OK;
}
