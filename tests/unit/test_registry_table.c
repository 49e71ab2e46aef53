/* The targets' one table (lib/registry/registry.h): lookups, what each entry can do, the
 * names a refusal lists, and the checkpoint formats. */
#include "lib/registry/registry.h"
#include "tps_test.h"

TEST(find_and_default)
{
    CHECK(tps_target_find(NULL) == tps_target_find("tpshard"));
    CHECK(tps_target_find("vllm") != NULL);
    CHECK(tps_target_find("Vllm") == NULL);
    CHECK(tps_target_find("") == NULL);
    CHECK_STR(tps_target_with(TPS_TARGET_CHECKPOINT)->name, "megatron");
    CHECK_STR(tps_target_with(TPS_TARGET_MERGE)->name, "hf");
    CHECK(tps_target_with(TPS_TARGET_MERGE | TPS_TARGET_PP) == NULL);
}

TEST(capabilities)
{
    CHECK(tps_target_can("vllm", TPS_TARGET_SET | TPS_TARGET_PP));
    CHECK(tps_target_can("vllm", TPS_TARGET_EP));
    CHECK(!tps_target_can("sglang", TPS_TARGET_PP));
    CHECK(!tps_target_can("sglang", TPS_TARGET_EP));
    CHECK(tps_target_can("megatron", TPS_TARGET_PP));
    CHECK(!tps_target_can("megatron", TPS_TARGET_SET | TPS_TARGET_PP));
    CHECK(!tps_target_can(NULL, TPS_TARGET_PP));
    CHECK(!tps_target_can("nope", 0)); /* an unknown name can do nothing */
    CHECK_STR(tps_target_find("vllm")->schema, "vllm");
    CHECK(tps_target_find("tpshard")->schema == NULL);
}

TEST(names_and_refusals)
{
    char b[128];
    CHECK_STR(tps_target_names(TPS_TARGET_SET, b, sizeof b), "tpshard, vllm or sglang");
    CHECK_STR(tps_target_names(TPS_TARGET_RELEASES, b, sizeof b), "vllm or sglang");
    CHECK_STR(tps_target_names(TPS_TARGET_MERGE, b, sizeof b), "hf");
    CHECK_STR(tps_target_names(TPS_TARGET_MERGE | TPS_TARGET_PP, b, sizeof b), "");
    tps_error err;
    tps_error_clear(&err);
    CHECK(tps_target_lookup("megatron", TPS_TARGET_SET, &err) == NULL);
    CHECK(err.code == TPS_EARG);
    CHECK_STR(err.msg, "--target 'megatron': expected tpshard, vllm or sglang");
    tps_error_clear(&err);
    CHECK(tps_target_lookup("sglang", TPS_TARGET_SET, &err) == tps_target_find("sglang"));
    CHECK(err.code == TPS_OK);
}

TEST(checkpoint_formats)
{
    const tps_target_entry *m = tps_target_find("megatron");
    CHECK(tps_target_format(m, NULL) == TPS_CKPT_TORCH);
    CHECK(tps_target_format(m, "torch") == TPS_CKPT_TORCH);
    CHECK(tps_target_format(m, "torch_dist") == TPS_CKPT_TORCH_DIST);
    CHECK(tps_target_format(m, "zarr") == -1);
    CHECK(tps_target_format(tps_target_find("vllm"), "torch") == -1);
}

int main(void)
{
    RUN(find_and_default);
    RUN(capabilities);
    RUN(names_and_refusals);
    RUN(checkpoint_formats);
    return tps_test_done();
}
