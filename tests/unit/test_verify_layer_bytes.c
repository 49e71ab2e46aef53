/* The bytes of each verified layer, for verify's report (verify/driver/layer_bytes.c; issue 34:
 * what the commands print is built in the library). */
#include <stdint.h>
#include <string.h>

#include "lib/set/manifest.h"
#include "tps_test.h"
#include "verify/driver/layer_bytes.h"

TEST(each_layer_counts_the_bytes_of_the_tensors_under_its_prefix)
{
    tps_manifest_tensor t[5];
    memset(t, 0, sizeof t);
    const char *names[5] = {"model.layers.1.mlp.w", "model.layers.10.mlp.w", "model.layers.1.attn.q",
                            "model.embed_tokens.weight", "model.layers.2.mlp.w"};
    for (int i = 0; i < 5; i++) {
        t[i].name = (char *)names[i];
        t[i].nbytes = 1u << i;
    }
    tps_manifest m;
    memset(&m, 0, sizeof m);
    m.tensors = t;
    m.ntensors = 5;
    char *prefix[3] = {"model.layers.1.", "model.layers.10.", NULL};
    uint64_t bytes[3] = {0, 0, 0};
    tps_vdriver_layer_bytes(&m, prefix, 3, bytes);
    CHECK_EQ_U64(bytes[0], 1 + 4);
    CHECK_EQ_U64(bytes[1], 2);
    CHECK_EQ_U64(bytes[2], 0);
}

int main(void)
{
    RUN(each_layer_counts_the_bytes_of_the_tensors_under_its_prefix);
    return tps_test_done();
}
