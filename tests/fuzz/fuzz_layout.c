/* The YAML layout loader (lib/layout/layout.h), then every rule applied to a llama-shaped set of
 * tensor names and shapes, so the expression evaluator and the partition checks run on
 * whatever sizes the input declares. */
#include "fuzz.h"

#include "lib/layout/layout.h"

static const struct {
    const char *name;
    int ndim;
    uint64_t shape[2];
} probes[] = {
    {"model.embed_tokens.weight", 2, {96, 64}},
    {"model.layers.0.self_attn.q_proj.weight", 2, {64, 64}},
    {"model.layers.0.self_attn.k_proj.weight", 2, {32, 64}},
    {"model.layers.0.self_attn.qkv_proj.weight", 2, {128, 64}},
    {"model.layers.0.mlp.gate_up_proj.weight", 2, {256, 64}},
    {"model.layers.0.mlp.down_proj.weight", 2, {64, 128}},
    {"model.layers.1.input_layernorm.weight", 1, {64, 0}},
    {"lm_head.weight", 2, {96, 64}},
    /* A long component: globs with many '*' must stay polynomial against it. */
    {"model.layers.0.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.weight", 1,
     {64, 0}},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tps_layout *l = NULL;
    tps_error err;
    tps_error_clear(&err);
    if (tps_layout_parse((const char *)data, size, "fuzz.yaml", &l, &err) == TPS_OK) {
        for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
            tps_partition p;
            size_t rule;
            tps_error_clear(&err);
            if (tps_layout_partition(l, probes[i].name, TPS_DT_BF16, probes[i].ndim, probes[i].shape, &p, &rule,
                                     &err) == TPS_OK) {
                tps_layout_rule_label(l, rule);
                for (uint64_t T = 1; T <= 8; T *= 2) {
                    tps_error_clear(&err);
                    tps_partition_check(&p, probes[i].name, TPS_DT_BF16, probes[i].ndim, probes[i].shape, T, &err);
                }
            }
        }
        for (size_t r = 0; r < tps_layout_rule_count(l); r++) tps_layout_rule_matches(l, r);
        tps_layout_block(l);
        tps_layout_description(l);
    }
    tps_layout_free(l);
    return 0;
}
