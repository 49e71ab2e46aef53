/* What the commands print, built in the library (issue 34: cmd/ only prints): a refusal's
 * unknown sizes named once (lib/refusal/problems_sizes.c), the bytes of each verified layer
 * (verify/driver/layer_bytes.c), check's findings and its --json report
 * (lib/engine/check_set.c). */
#include <stdlib.h>
#include <string.h>

#include "lib/base/buf.h"
#include "lib/engine/check_set.h"
#include "lib/refusal/problems_sizes.h"
#include "lib/set/manifest.h"
#include "tps_test.h"
#include "verify/driver/layer_bytes.h"

TEST(unknown_sizes_are_named_once_in_the_order_first_needed)
{
    tps_problem v[3];
    memset(v, 0, sizeof v);
    v[0].kind = TPS_PROBLEM_SIZES;
    strcpy(v[0].missing, "head_dim, heads");
    v[0].count = 4;
    v[1].kind = TPS_PROBLEM_TP;
    v[1].count = 7;
    v[2].kind = TPS_PROBLEM_SIZES;
    strcpy(v[2].missing, "heads,intermediate");
    v[2].count = 2;
    tps_problems ps;
    memset(&ps, 0, sizeof ps);
    ps.v = v;
    ps.n = 3;
    tps_buf names = TPS_BUF_INIT;
    size_t groups;
    CHECK_EQ_U64(tps_problems_missing_sizes(&ps, &names, &groups), 6);
    CHECK_EQ_U64(groups, 2);
    CHECK_STR(tps_buf_cstr(&names), "head_dim, heads, intermediate");
    tps_buf_release(&names);
}

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

TEST(a_finding_that_cannot_be_recorded_marks_the_list_incomplete)
{
    tps_check_findings f = {0};
    tps_check_findingf(&f, "tensor '%s': differs", "a");
    CHECK_EQ_U64(f.n, 1);
    CHECK_STR(f.msg[0], "tensor 'a': differs");
    CHECK(!f.oom);
    tps_check_findings_free(&f);
    tps_check_findings g = {.fail_alloc = true};
    tps_check_finding(&g, "lost");
    CHECK(g.oom);
    CHECK_EQ_U64(g.n, 0);
    tps_check_findings_free(&g);
}

TEST(check_json_of_a_set_that_did_not_open)
{
    tps_check_findings f = {0};
    tps_check_coverage cov = {0};
    tps_check_finding(&f, "no manifest");
    tps_buf b = TPS_BUF_INIT;
    tps_check_json(&b, "d", NULL, &f, &cov);
    const char *s = tps_buf_cstr(&b);
    CHECK(s != NULL);
    if (s) {
        CHECK_CONTAINS(s, "\"ok\": false");
        CHECK_CONTAINS(s, "\"partial\": false");
        CHECK_CONTAINS(s, "\"no manifest\"");
    }
    tps_buf_release(&b);
    tps_check_findings_free(&f);
}

int main(void)
{
    RUN(unknown_sizes_are_named_once_in_the_order_first_needed);
    RUN(each_layer_counts_the_bytes_of_the_tensors_under_its_prefix);
    RUN(a_finding_that_cannot_be_recorded_marks_the_list_incomplete);
    RUN(check_json_of_a_set_that_did_not_open);
    return tps_test_done();
}
