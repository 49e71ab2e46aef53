/* lib/registry/megatron_out.h and lib/registry/megatron_args.h against Megatron's own rules, worked by hand:
 * stage ranges (get_num_layers_to_build, --decoder-first/last-pipeline-num-layers), local layer
 * names (TransformerLayer._get_layer_offset), the padded vocabulary
 * (vocab_size_with_padding), and the args fields the presets need. */
#include <stdlib.h>

#include "lib/registry/megatron_args.h"
#include "lib/registry/megatron_out.h"
#include "tps_test.h"

/* Each call starts with a clear error: tps_fail keeps the first. */
#define clear(e) (tps_error_clear(e)),

TEST(stages_uniform_and_explicit)
{
    uint64_t f[8];
    tps_error e;
    CHECK(clear(&e) tps_megatron_stages(8, 4, NULL, f, &e) == TPS_OK);
    CHECK_EQ_U64(f[1], 2);
    CHECK_EQ_U64(f[4], 8);
    CHECK(clear(&e) tps_megatron_stages(10, 3, NULL, f, &e) == TPS_EARG);
    CHECK(strstr(e.msg, "--pp-layers") != NULL);
    CHECK(clear(&e) tps_megatron_stages(10, 3, "3,3,4", f, &e) == TPS_OK);
    CHECK_EQ_U64(f[1], 3);
    CHECK_EQ_U64(f[2], 6);
    CHECK_EQ_U64(f[3], 10);
    CHECK(clear(&e) tps_megatron_stages(10, 3, "3,3,3", f, &e) == TPS_EARG); /* adds up to 9 */
    CHECK(clear(&e) tps_megatron_stages(12, 4, "2,3,4,3", f, &e) == TPS_EARG); /* uneven middle stages */
    CHECK(clear(&e) tps_megatron_stages(10, 3, "3,0,7", f, &e) == TPS_EARG);
    CHECK(clear(&e) tps_megatron_stages(10, 2, "3,x", f, &e) == TPS_EARG);
}

TEST(local_and_global_names)
{
    uint64_t f[] = {0, 3, 6, 10}, s;
    char out[256];
    tps_error e;
    CHECK(clear(&e) tps_megatron_local_name("decoder.layers.7.mlp.linear_fc1.weight", f, 3, &s, out, sizeof out, &e) == TPS_OK);
    CHECK_EQ_U64(s, 2);
    CHECK_STR(out, "decoder.layers.1.mlp.linear_fc1.weight");
    CHECK(clear(&e) tps_megatron_local_name("embedding.word_embeddings.weight", f, 3, &s, out, sizeof out, &e) == TPS_OK);
    CHECK_EQ_U64(s, 0);
    CHECK(clear(&e) tps_megatron_local_name("output_layer.weight", f, 3, &s, out, sizeof out, &e) == TPS_OK);
    CHECK_EQ_U64(s, 2);
    CHECK(clear(&e) tps_megatron_local_name("decoder.layers.10.x.weight", f, 3, &s, out, sizeof out, &e) == TPS_EINVALID);
    CHECK(clear(&e) tps_megatron_local_name("model.norm.weight", f, 3, &s, out, sizeof out, &e) == TPS_EINVALID);
    CHECK(clear(&e) tps_megatron_global_name("decoder.layers.2.self_attention.linear_qkv.weight", f, 3, 1, out, sizeof out, &e) ==
          TPS_OK);
    CHECK_STR(out, "decoder.layers.5.self_attention.linear_qkv.weight");
    CHECK(clear(&e) tps_megatron_global_name("decoder.layers.3.input_layernorm.weight", f, 3, 1, out, sizeof out, &e) ==
          TPS_EINVALID); /* stage 1 holds 3 layers */
    CHECK(clear(&e) tps_megatron_global_name("embedding.word_embeddings.weight", f, 3, 1, out, sizeof out, &e) == TPS_EINVALID);
}

TEST(padded_vocab)
{
    CHECK_EQ_U64(tps_megatron_padded_vocab(32000, 128, 8), 32768);
    CHECK_EQ_U64(tps_megatron_padded_vocab(32000, 128, 4), 32256);
    CHECK_EQ_U64(tps_megatron_padded_vocab(100, 4, 4), 112);
    CHECK_EQ_U64(tps_megatron_padded_vocab(100, 4, 8), 128);
    CHECK_EQ_U64(tps_megatron_padded_vocab(128256, 128, 1), 128256);
}

TEST(args_fields)
{
    const char *a = "{\"$newobj\": [\"argparse.Namespace\", [], {\"num_layers\": 32, \"hidden_size\": 4096, "
                    "\"num_attention_heads\": 32, \"group_query_attention\": true, \"num_query_groups\": 8, "
                    "\"kv_channels\": 128, \"ffn_hidden_size\": 14336, \"swiglu\": true, \"vocab_size\": 128256, "
                    "\"tensor_model_parallel_size\": 8, \"normalization\": \"RMSNorm\", \"norm_epsilon\": 1e-05, "
                    "\"position_embedding_type\": \"rope\", \"rotary_base\": 500000}]}";
    tps_megatron_model m;
    tps_error e;
    CHECK(clear(&e) tps_megatron_args_read(a, "a", &m, &e) == TPS_OK);
    CHECK_EQ_U64(m.groups, 8);
    CHECK_EQ_U64(m.head_dim, 128);
    CHECK_EQ_U64(m.tp, 8);
    CHECK_EQ_U64(m.pp, 1);
    CHECK_EQ_U64(m.vocab_divisor, 128);
    CHECK(m.swiglu && m.rms && !m.untied && !m.learned_positions);
    CHECK_STR(tps_megatron_preset(&m), "megatron_gpt");
    /* group_query_attention false: one group per head, whatever num_query_groups says */
    const char *mha = "{\"$newobj\": [\"argparse.Namespace\", [], {\"num_layers\": 2, \"hidden_size\": 16, "
                      "\"num_attention_heads\": 4, \"num_query_groups\": 1}]}";
    CHECK(clear(&e) tps_megatron_args_read(mha, "a", &m, &e) == TPS_OK);
    CHECK_EQ_U64(m.groups, 4);
    CHECK_EQ_U64(m.head_dim, 4);
    CHECK_EQ_U64(m.ffn, 64);
    CHECK_STR(tps_megatron_preset(&m), "megatron_gpt_gelu");
    const char *nohid = "{\"$newobj\": [\"argparse.Namespace\", [], {\"num_layers\": 2, \"num_attention_heads\": 4}]}";
    CHECK(clear(&e) tps_megatron_args_read(nohid, "rank0.pt", &m, &e) == TPS_EINVALID);
    CHECK(strstr(e.msg, "hidden_size") != NULL);
    CHECK(clear(&e) tps_megatron_args_read("{\"num_layers\": 2}", "a", &m, &e) == TPS_EINVALID);
}

int main(void)
{
    RUN(stages_uniform_and_explicit);
    RUN(local_and_global_names);
    RUN(padded_vocab);
    RUN(args_fields);
    return tps_test_done();
}
