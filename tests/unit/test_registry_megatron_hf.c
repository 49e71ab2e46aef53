/* The Hugging Face <-> Megatron mapping (lib/registry/megatron_hf.h): its section's refusals, the args
 * a config.json gives, and the architecture and config.json merge --target hf writes.  (The
 * tensors themselves are checked against an independent Megatron implementation in
 * tests/interop/megatron/debian/test_megatron_hf.py.) */
#include <stdlib.h>

#include "lib/base/json.h"
#include "lib/layout/presets.h"
#include "lib/registry/megatron_hf.h"
#include "tps_test.h"

static tps_status load_text(const char *megatron_section, tps_error *err)
{
    char text[4096];
    snprintf(text, sizeof text, "name: t\nrules: []\ntargets:\n  megatron:\n%s", megatron_section);
    tps_megatron_hf *h = NULL;
    tps_error_clear(err); /* the first error is kept: each case its own */
    tps_status st = tps_megatron_hf_load(text, "t.yaml", &h, err);
    tps_megatron_hf_free(h);
    return st;
}

TEST(mapping_section_refusals)
{
    tps_error err;
    tps_error_clear(&err);
    CHECK(load_text("    tensors:\n      - {into: a.*.w, from: b.*.w, stack: true}\n", &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "t.yaml:6:");
    CHECK_CONTAINS(err.msg, "unknown key (into, from, rows, groups)");
    CHECK(load_text("    tensors:\n      - {into: a.*.w, from: [b.*.w, c.*.w]}\n", &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "gives rows for each");
    CHECK(load_text("    tensors:\n      - {into: a.*.w, from: b.*.w, rows: [hidden]}\n", &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "rows and groups are for entries of several names");
    CHECK(load_text("    tensors:\n      - {into: a.w, from: b.*.w}\n", &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "as many wildcards as into");
    CHECK(load_text("    tensors: []\n    args: {x: {config: y, bad: true}}\n", &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "unknown key (config, float, int)");
    CHECK(load_text("    tensors: []\n    hf: [{architecture: X}]\n", &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "needs architecture and model_type");
    CHECK(load_text("    tensors: []\n    extra: 1\n", &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "unknown key (tensors, args, hf)");
    tps_megatron_hf *h = NULL;
    tps_error_clear(&err);
    CHECK(tps_megatron_hf_load("name: t\nrules: []\n", "t.yaml", &h, &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "the presets with one: llama, mixtral");
    CHECK(h == NULL);
}

/* A view with only names and shapes (the args read no bytes), for tiny-llama's sizes. */
static tps_index *view_of(bool qkv_bias, bool untied)
{
    tps_index *v = NULL;
    tps_error err;
    tps_error_clear(&err);
    if (tps_index_new("view", "megatron-view", &v, &err)) return NULL;
    static const int dummy = 0;
    const uint64_t emb[] = {1003, 64}, qkv[] = {96, 64}, bias[] = {96};
    tps_index_add_tensor(v, "embedding.word_embeddings.weight", 32, TPS_DT_BF16, 2, emb, 0, 0, &dummy, &err);
    tps_index_add_tensor(v, "decoder.layers.0.self_attention.linear_qkv.weight", 49, TPS_DT_BF16, 2, qkv, 0, 0,
                         &dummy, &err);
    if (qkv_bias)
        tps_index_add_tensor(v, "decoder.layers.0.self_attention.linear_qkv.bias", 47, TPS_DT_BF16, 1, bias, 0, 0,
                             &dummy, &err);
    if (untied) tps_index_add_tensor(v, "output_layer.weight", 19, TPS_DT_BF16, 2, emb, 0, 0, &dummy, &err);
    return v;
}

static char *args_for(const char *config, uint64_t tp, bool qkv_bias, bool untied, tps_error *err)
{
    tps_layout *l = NULL;
    tps_megatron_hf *h = NULL;
    tps_index *v = view_of(qkv_bias, untied);
    char *out = NULL;
    if (v && tps_layout_load_preset("llama", &l, err) == TPS_OK &&
        tps_layout_apply_config_text(l, config, strlen(config), "config.json", NULL, err) == TPS_OK &&
        tps_megatron_hf_load(tps_layout_text(l), "preset:llama", &h, err) == TPS_OK)
        tps_megatron_hf_args(h, l, config, strlen(config), v, tp, 2, &out, err);
    tps_megatron_hf_free(h);
    tps_layout_free(l);
    tps_index_free(v);
    return out;
}

#define LLAMA_CFG                                                                                              \
    "{\"hidden_size\": 64, \"num_attention_heads\": 8, \"num_key_value_heads\": 2, \"intermediate_size\": 176, " \
    "\"num_hidden_layers\": 2, \"vocab_size\": 1003, \"max_position_embeddings\": 128, \"rms_norm_eps\": 1e-05, " \
    "\"rope_theta\": 500000.0"

TEST(args_from_config_json)
{
    tps_error err;
    tps_error_clear(&err);
    char *a = args_for(LLAMA_CFG ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
                                 "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                                 "\"original_max_position_embeddings\": 8192}}",
                       3, true, false, &err);
    CHECK(a != NULL);
    if (!a) {
        printf("#   %s\n", err.msg);
        return;
    }
    /* Megatron's argparse types: rotary_base an int, norm_epsilon a float. */
    CHECK_CONTAINS(a, "\"rotary_base\": 500000,");
    CHECK_CONTAINS(a, "\"norm_epsilon\": 1e-05,");
    CHECK_CONTAINS(a, "\"num_query_groups\": 2,");
    CHECK_CONTAINS(a, "\"group_query_attention\": true,");
    CHECK_CONTAINS(a, "\"kv_channels\": 8,");
    CHECK_CONTAINS(a, "\"seq_length\": 128,");
    CHECK_CONTAINS(a, "\"use_rope_scaling\": true, \"rope_scaling_factor\": 8.0,");
    CHECK_CONTAINS(a, "\"add_qkv_bias\": true,");
    CHECK_CONTAINS(a, "\"untie_embeddings_and_output_weights\": false,");
    /* ceil(1003 / (128 * 3)) * 384 */
    CHECK_CONTAINS(a, "\"vocab_size\": 1003, \"padded_vocab_size\": 1152, \"make_vocab_size_divisible_by\": 128,");
    CHECK_CONTAINS(a, "\"tensor_model_parallel_size\": 3, \"pipeline_model_parallel_size\": 2,");
    CHECK_CONTAINS(a, "\"bf16\": true, \"params_dtype\": {\"$dtype\": \"bfloat16\"},");
    tps_json_doc *doc = NULL;
    CHECK(tps_json_parse(a, strlen(a), "args", &doc, &err) == TPS_OK);
    tps_json_doc_free(doc);

    /* merge --target hf: the architecture and config.json those args give back. */
    char ns[8192];
    snprintf(ns, sizeof ns, "{\"$newobj\": [\"argparse.Namespace\", [], %s]}", a);
    char *preset, *arch, *mt, *config = NULL;
    CHECK(tps_megatron_hf_choose(ns, &preset, &arch, &mt, &err) == TPS_OK);
    CHECK_STR(arch, "Qwen2ForCausalLM");
    tps_megatron_hf *h = NULL;
    for (const tps_preset *p = tps_presets; p->name; p++)
        if (strcmp(p->name, "llama") == 0) CHECK(tps_megatron_hf_load(p->yaml, "preset:llama", &h, &err) == TPS_OK);
    CHECK(h && tps_megatron_hf_config(h, ns, arch, mt, 1003, &config, &err) == TPS_OK);
    if (config) {
        CHECK_CONTAINS(config, "\"num_key_value_heads\": 2");
        CHECK_CONTAINS(config, "\"rope_theta\": 500000");
        CHECK_CONTAINS(config, "\"rms_norm_eps\": 1e-05");
        CHECK_CONTAINS(config, "\"rope_type\": \"llama3\"");
        CHECK_CONTAINS(config, "\"tie_word_embeddings\": true");
        CHECK_CONTAINS(config, "\"torch_dtype\": \"bfloat16\"");
        CHECK_CONTAINS(config, "\"vocab_size\": 1003");
    }
    tps_megatron_hf_free(h);
    free(config);
    free(preset);
    free(arch);
    free(mt);
    free(a);
}

TEST(args_refuse_rope_scaling_megatron_lacks)
{
    tps_error err;
    tps_error_clear(&err);
    char *a = args_for(LLAMA_CFG ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}", 2, false, true, &err);
    CHECK(a == NULL);
    CHECK_CONTAINS(err.msg, "rope_scaling of type 'yarn'");
    free(a);
    tps_error_clear(&err);
    a = args_for(LLAMA_CFG ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 2.0, "
                 "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}}",
                 2, false, true, &err);
    CHECK(a == NULL);
    CHECK_CONTAINS(err.msg, "fixed at 1, 4 and 8192");
    free(a);
}

TEST(choose_architecture_from_args)
{
    tps_error err;
    tps_error_clear(&err);
    static const struct {
        const char *args, *arch;
    } cases[] = {
        {"{\"$newobj\": [\"argparse.Namespace\", [], {\"swiglu\": true}]}", "LlamaForCausalLM"},
        {"{\"$newobj\": [\"argparse.Namespace\", [], {\"num_experts\": 4}]}", "MixtralForCausalLM"},
        {"{\"add_qkv_bias\": true, \"num_experts\": null}", "Qwen2ForCausalLM"},
        {"{\"add_qkv_bias\": false, \"num_experts\": 8}", "MixtralForCausalLM"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *preset = NULL, *arch = NULL, *mt = NULL;
        CHECK(tps_megatron_hf_choose(cases[i].args, &preset, &arch, &mt, &err) == TPS_OK);
        CHECK_STR(arch, cases[i].arch);
        free(preset);
        free(arch);
        free(mt);
    }
}

int main(void)
{
    RUN(mapping_section_refusals);
    RUN(args_from_config_json);
    RUN(args_refuse_rope_scaling_megatron_lacks);
    RUN(choose_architecture_from_args);
    return tps_test_done();
}
