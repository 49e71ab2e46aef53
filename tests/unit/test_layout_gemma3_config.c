/* Gemma 3's config.json keys as the layout reads them: which layers are local
 * (layer_types, else config.json's sliding_window_pattern, else the block's), the local
 * RoPE base, a multimodal config's text_config, and the errors of a bad layer_types; and
 * the RoPE base and scaling each layer rotates with (verify/math/rope.h). */
#include <string.h>

#include "lib/layout/layout.h"
#include "tps_test.h"
#include "verify/math/rope.h"

/* The gemma3_text preset with config text applied; NULL (and the message in err) on failure. */
static tps_layout *load(const char *json, tps_error *err)
{
    tps_layout *l = NULL;
    tps_error_clear(err);
    if (tps_layout_load_preset("gemma3_text", &l, err) != TPS_OK) return NULL;
    if (tps_layout_apply_config_text(l, json, strlen(json), "config.json", NULL, err) != TPS_OK) {
        tps_layout_free(l);
        return NULL;
    }
    return l;
}

/* The local layers of the first n as a string of 'L' and 'G'. */
static void locals(const tps_block *b, int n, char *out)
{
    for (int i = 0; i < n; i++) out[i] = tps_block_layer_is_local(b, (uint64_t)i) ? 'L' : 'G';
    out[n] = '\0';
}

TEST(layer_types_decide_over_the_pattern)
{
    tps_error err;
    char got[16];
    tps_layout *l = load("{\"num_hidden_layers\": 4, \"sliding_window\": 4, \"rope_local_base_freq\": 10000,"
                         " \"layer_types\": [\"full_attention\", \"sliding_attention\", \"full_attention\","
                         " \"sliding_attention\"]}", &err);
    CHECK(l != NULL);
    if (!l) return;
    const tps_block *b = tps_layout_block(l);
    locals(b, 4, got);
    CHECK_STR(got, "GLGL");
    CHECK_EQ_U64(b->sliding_window, 4);
    CHECK(b->rope_local_theta == 10000);
    tps_layout_free(l);
}

TEST(without_layer_types_the_config_pattern_then_the_block_decides)
{
    tps_error err;
    char got[16];
    tps_layout *l = load("{\"num_hidden_layers\": 8, \"sliding_window_pattern\": 4}", &err);
    CHECK(l != NULL);
    if (l) {
        locals(tps_layout_block(l), 8, got);
        CHECK_STR(got, "LLLGLLLG");
    }
    tps_layout_free(l);
    l = load("{\"num_hidden_layers\": 8}", &err);
    CHECK(l != NULL);
    if (l) {
        locals(tps_layout_block(l), 8, got);
        CHECK_STR(got, "LLLLLGLL"); /* the preset's sliding_window_pattern: 6 */
    }
    tps_layout_free(l);
}

TEST(a_multimodal_config_is_read_from_text_config)
{
    tps_error err;
    char got[16];
    tps_layout *l = load("{\"architectures\": [\"Gemma3ForConditionalGeneration\"], \"text_config\": {"
                         "\"hidden_size\": 64, \"num_hidden_layers\": 3, \"head_dim\": 16, \"sliding_window\": 5,"
                         " \"rope_local_base_freq\": 1000, \"layer_types\": [\"sliding_attention\","
                         " \"full_attention\", \"sliding_attention\"]}, \"vision_config\": {\"hidden_size\": 32}}",
                         &err);
    CHECK(l != NULL);
    if (!l) return;
    const tps_block *b = tps_layout_block(l);
    CHECK_EQ_U64(b->hidden, 64);
    CHECK_EQ_U64(b->head_dim, 16);
    CHECK_EQ_U64(b->sliding_window, 5);
    locals(b, 3, got);
    CHECK_STR(got, "LGL");
    tps_layout_free(l);
}

TEST(a_bad_layer_types_is_refused)
{
    tps_error err;
    CHECK(load("{\"num_hidden_layers\": 3, \"layer_types\": [\"full_attention\"]}", &err) == NULL);
    CHECK_CONTAINS(err.msg, "config.json: \"layer_types\" must list one type for each of the 3 layers");
    CHECK(load("{\"num_hidden_layers\": 2, \"layer_types\": [\"full_attention\", \"chunked_attention\"]}", &err) ==
          NULL);
    CHECK_CONTAINS(err.msg, "\"layer_types\" entry 1 is not \"sliding_attention\" or \"full_attention\"");
    CHECK(load("{\"layer_types\": \"full_attention\"}", &err) == NULL);
}

TEST(local_layers_rotate_with_the_local_base_and_no_scaling)
{
    tps_block b;
    memset(&b, 0, sizeof b);
    b.rope_theta = 1e6;
    b.rope_scaling.type = TPS_ROPE_SCALING_LINEAR;
    b.rope_scaling.factor = 8;
    double theta = 0;
    tps_rope_scaling s = vrope_layer_scaling(&b, true, &theta); /* no local base: as the global layers */
    CHECK(theta == 1e6 && s.type == TPS_ROPE_SCALING_LINEAR);
    b.rope_local_theta = 1e4;
    s = vrope_layer_scaling(&b, true, &theta);
    CHECK(theta == 1e4 && s.type == TPS_ROPE_SCALING_NONE);
    CHECK(fabs(vrope_inv_freq(&s, theta, 16, 1, 16) - pow(1e4, -2.0 / 16)) < 1e-15);
    s = vrope_layer_scaling(&b, false, &theta);
    CHECK(theta == 1e6 && s.type == TPS_ROPE_SCALING_LINEAR);
    CHECK(fabs(vrope_inv_freq(&s, theta, 16, 1, 16) - pow(1e6, -2.0 / 16) / 8) < 1e-15);
}

int main(void)
{
    RUN(layer_types_decide_over_the_pattern);
    RUN(without_layer_types_the_config_pattern_then_the_block_decides);
    RUN(a_multimodal_config_is_read_from_text_config);
    RUN(a_bad_layer_types_is_refused);
    RUN(local_layers_rotate_with_the_local_base_and_no_scaling);
    return tps_test_done();
}
