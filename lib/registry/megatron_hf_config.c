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

/* ---- merge --target hf ---- */

/* Whether args has key set to something other than null, false, 0 or "". */
static bool truthy(const tps_json *args, const char *key)
{
    const tps_json *v = tps_json_get(args, key);
    if (!v) return false;
    switch (v->type) {
    case TPS_JSON_NULL: return false;
    case TPS_JSON_BOOL: return v->u.boolean;
    case TPS_JSON_NUMBER: return v->u.number.f64 != 0;
    case TPS_JSON_STRING: return v->u.string.len != 0;
    default: return true;
    }
}

static tps_status parse_args(const char *args_json, tps_json_doc **doc, const tps_json **args, tps_error *err)
{
    TRY(tps_json_parse(args_json, strlen(args_json), "the checkpoint's args", doc, err));
    /* The Namespace as the reader encodes it, or its fields alone. */
    const tps_json *f = tps_megatron_args_fields(tps_json_root(*doc));
    *args = f ? f : tps_json_root(*doc);
    if ((*args)->type != TPS_JSON_OBJECT) {
        tps_json_doc_free(*doc);
        *doc = NULL;
        return tps_fail(err, TPS_EINVALID, "the checkpoint's args are not a Namespace of fields");
    }
    return TPS_OK;
}

tps_status tps_megatron_hf_choose(const char *args_json, char **preset, char **architecture, char **model_type,
                                  tps_error *err)
{
    *preset = *architecture = *model_type = NULL;
    tps_json_doc *doc;
    const tps_json *args;
    TRY(parse_args(args_json, &doc, &args, err));
    tps_status st = TPS_OK;
    for (const tps_preset *pr = tps_presets; pr->name && !*preset; pr++) {
        if (!tps_yaml_text_has(pr->yaml, tps_mhf_has_megatron, NULL)) continue;
        tps_megatron_hf *h = NULL;
        char name[256];
        snprintf(name, sizeof name, "preset:%s", pr->name);
        TPS_CHECK(tps_megatron_hf_load(pr->yaml, name, &h, err));
        for (size_t i = 0; i < h->nhf; i++) {
            const mhf *f = &h->hf[i];
            if ((f->when && !truthy(args, f->when)) || (f->unless && truthy(args, f->unless))) continue;
            *preset = strdup(pr->name);
            *architecture = strdup(f->architecture);
            *model_type = strdup(f->model_type);
            if (!*preset || !*architecture || !*model_type) st = tps_fail_oom(err, "choosing the architecture");
            break;
        }
        tps_megatron_hf_free(h);
    }
    if (st == TPS_OK && !*preset)
        st = tps_fail(err, TPS_EINVALID,
                      "no Hugging Face architecture for this Megatron model (num_experts %s, add_qkv_bias %s, "
                      "swiglu %s): merge --target hf writes Llama, Qwen2 and Mixtral models",
                      truthy(args, "num_experts") ? "set" : "unset", truthy(args, "add_qkv_bias") ? "true" : "false",
                      truthy(args, "swiglu") ? "true" : "false");
cleanup:
    if (st) {
        free(*preset);
        free(*architecture);
        free(*model_type);
        *preset = *architecture = *model_type = NULL;
    }
    tps_json_doc_free(doc);
    return st;
}

static bool u64_of(const tps_json *v, uint64_t *out)
{
    if (!v || v->type != TPS_JSON_NUMBER || !v->u.number.is_u64) return false;
    *out = v->u.number.u64;
    return true;
}

tps_status tps_megatron_hf_config(const tps_megatron_hf *h, const char *args_json, const char *architecture,
                                  const char *model_type, uint64_t vocab, char **out, tps_error *err)
{
    *out = NULL;
    tps_json_doc *doc;
    const tps_json *args;
    TRY(parse_args(args_json, &doc, &args, err));
    tps_status st = TPS_OK;
    tps_buf b = TPS_BUF_INIT;
    tps_jw w;
    tps_jw_init(&w, &b, true);
    const char *written[256];
    size_t nw = 0;
    if (!truthy(args, "swiglu") || !tps_json_get(args, "normalization") ||
        tps_json_get(args, "normalization")->type != TPS_JSON_STRING ||
        strcmp(tps_json_get(args, "normalization")->u.string.s, "RMSNorm") != 0) {
        st = tps_fail(err, TPS_EINVALID, "%s needs swiglu and RMSNorm; the checkpoint's args say otherwise",
                      architecture);
        goto cleanup;
    }
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "architectures");
    tps_jw_array_begin(&w);
    tps_jw_string(&w, architecture);
    tps_jw_array_end(&w);
    tps_jw_key(&w, "model_type");
    tps_jw_string(&w, model_type);
    uint64_t heads = 0, hidden = 0, kvc = 0;
    u64_of(tps_json_get(args, "num_attention_heads"), &heads);
    u64_of(tps_json_get(args, "hidden_size"), &hidden);
    for (size_t i = 0; i < h->na && nw < sizeof written / sizeof *written; i++) {
        const marg *a = &h->a[i];
        const tps_json *v = tps_json_get(args, a->arg);
        if (tps_mhf_has_key(written, nw, a->config)) continue;
        /* Without group_query_attention Megatron ignores num_query_groups: one group a head. */
        if (strcmp(a->arg, "num_query_groups") == 0 && !truthy(args, "group_query_attention"))
            v = tps_json_get(args, "num_attention_heads");
        if (!v || v->type == TPS_JSON_NULL) continue;
        written[nw++] = a->config;
        tps_jw_key(&w, a->config);
        tps_jw_value(&w, v);
    }
    if (u64_of(tps_json_get(args, "kv_channels"), &kvc) && heads && kvc * heads != hidden) {
        tps_jw_key(&w, "head_dim");
        tps_jw_u64(&w, kvc);
    }
    tps_jw_key(&w, "vocab_size");
    tps_jw_u64(&w, vocab);
    tps_jw_key(&w, "tie_word_embeddings");
    tps_jw_bool(&w, !truthy(args, "untie_embeddings_and_output_weights"));
    tps_jw_key(&w, "hidden_act");
    tps_jw_string(&w, "silu");
    const tps_json *pd = tps_json_get(args, "params_dtype");
    const tps_json *dn = pd ? tps_json_get(pd, "$dtype") : NULL;
    tps_jw_key(&w, "torch_dtype");
    if (dn && dn->type == TPS_JSON_STRING) tps_jw_string(&w, dn->u.string.s);
    else tps_jw_string(&w, truthy(args, "bf16") ? "bfloat16" : truthy(args, "fp16") ? "float16" : "float32");
    tps_jw_key(&w, "rope_scaling");
    if (truthy(args, "use_rope_scaling")) {
        double factor = 8;
        tps_mhf_number_of(tps_json_get(args, "rope_scaling_factor"), &factor);
        tps_jw_object_begin(&w);
        tps_jw_key(&w, "rope_type");
        tps_jw_string(&w, "llama3");
        tps_jw_key(&w, "factor");
        tps_jw_double(&w, factor);
        tps_jw_key(&w, "low_freq_factor");
        tps_jw_double(&w, 1.0);
        tps_jw_key(&w, "high_freq_factor");
        tps_jw_double(&w, 4.0);
        tps_jw_key(&w, "original_max_position_embeddings");
        tps_jw_u64(&w, 8192);
        tps_jw_object_end(&w);
    } else {
        tps_jw_null(&w);
    }
    tps_jw_object_end(&w);
    tps_buf_putc(&b, '\n');
    const char *text = tps_buf_cstr(&b);
    if (!text || !(*out = strdup(text))) st = tps_fail_oom(err, "writing config.json");
cleanup:
    tps_buf_release(&b);
    tps_json_doc_free(doc);
    return st;
}
