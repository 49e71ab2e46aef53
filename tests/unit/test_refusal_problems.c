/* Refusals grouped by cause (lib/refusal/problems.c), their unknown sizes named once for the
 * commands to print (lib/refusal/problems_sizes.c), and the manifest at a new tp
 * (lib/set/retarget.c).
 *
 * The tp values expected to fit are worked out here from the model's numbers with the rule
 * the partition algebra documents (T divides the units; or, for replicable units, the units
 * divide T; padded segments fit any T), not by asking lib/partition/partition.c. */
#include <stdlib.h>
#include <string.h>

#include "formats/open/checkpoint.h"
#include "lib/base/buf.h"
#include "lib/layout/layout.h"
#include "lib/refusal/problems.h"
#include "lib/refusal/problems_sizes.h"
#include "lib/set/plan.h"
#include "lib/set/retarget.h"
#include "tps_test.h"

#define FIXTURE "testdata/models/tiny-llama"

static void column(tps_partition *p, uint64_t len, uint64_t unit, bool replicable, bool pad)
{
    tps_partition_simple(p, 0, len, unit);
    p->seg[0].may_replicate = replicable;
    p->pad = pad;
}

/* Llama-70B's numbers: 64 heads and 8 KV heads of 128, intermediate 28672, vocabulary 128256. */
TEST(llama70b_at_tp3_groups_80_layers_into_one_line_per_rule)
{
    tps_problems ps;
    tps_problems_init(&ps, 3);
    tps_partition q, kv, mlp, vocab;
    column(&q, 64 * 128, 128, false, false);
    column(&kv, 8 * 128, 128, true, false);
    column(&mlp, 28672, 1, false, false);
    column(&vocab, 128256, 1, false, true);
    uint64_t qs[2] = {8192, 8192}, kvs[2] = {1024, 8192}, ms[2] = {28672, 8192}, vs[2] = {128256, 8192};
    tps_problems_consider(&ps, &vocab, TPS_DT_BF16, 2, vs);
    for (int layer = 0; layer < 80; layer++) {
        char name[128];
        tps_error e;
        tps_partition_issue is;
        tps_error_clear(&e);
        snprintf(name, sizeof name, "model.layers.%d.self_attn.q_proj.weight", layer);
        tps_problems_consider(&ps, &q, TPS_DT_BF16, 2, qs);
        CHECK(tps_partition_diagnose(&q, name, TPS_DT_BF16, 2, qs, 3, &is, &e) == TPS_EINVALID);
        CHECK(is.kind == TPS_ISSUE_INDIVISIBLE && is.units == 64 && is.unit == 128 && is.T == 3);
        CHECK(!strstr(e.msg, "padded")); /* heads cannot be padded: no such hint */
        tps_problems_add(&ps, TPS_PROBLEM_TP, name, "q rule", &is, NULL, e.msg);
        for (int k = 0; k < 2; k++) {
            snprintf(name, sizeof name, "model.layers.%d.self_attn.%s_proj.weight", layer, k ? "v" : "k");
            tps_problems_consider(&ps, &kv, TPS_DT_BF16, 2, kvs);
            CHECK(tps_partition_diagnose(&kv, name, TPS_DT_BF16, 2, kvs, 3, &is, &e) == TPS_EINVALID);
            tps_problems_add(&ps, TPS_PROBLEM_TP, name, "kv rule", &is, NULL, e.msg);
        }
        snprintf(name, sizeof name, "model.layers.%d.mlp.up_proj.weight", layer);
        tps_problems_consider(&ps, &mlp, TPS_DT_BF16, 2, ms);
        CHECK(tps_partition_diagnose(&mlp, name, TPS_DT_BF16, 2, ms, 3, &is, &e) == TPS_EINVALID);
        tps_problems_add(&ps, TPS_PROBLEM_TP, name, "mlp rule", &is, NULL, e.msg);
    }
    tps_error err;
    tps_error_clear(&err);
    CHECK(tps_problems_finish(&ps, &err) == TPS_OK);
    CHECK_EQ_U64(ps.n, 3);
    CHECK_EQ_U64(ps.total, 80 * 4);
    CHECK_EQ_U64(ps.v[0].count, 80);
    CHECK_EQ_U64(ps.v[1].count, 160);
    tps_buf b = TPS_BUF_INIT;
    tps_problem_names(&ps.v[1], &b);
    CHECK_STR(tps_buf_cstr(&b), "model.layers.{0..79}.self_attn.k_proj.weight, model.layers.{0..79}.self_attn.v_proj.weight");
    tps_model_sizes sizes = {.hidden = 8192, .heads = 64, .kv_heads = 8, .head_dim = 128, .intermediate = 28672,
                             .vocab = 128256, .layers = 80};
    tps_buf_reset(&b);
    tps_problem_line(&ps.v[0], &sizes, &b);
    CHECK_CONTAINS(tps_buf_cstr(&b), "64 attention heads (head_dim 128) along dimension 0: tp 3 neither divides");
    CHECK_CONTAINS(tps_buf_cstr(&b), "80 tensors: model.layers.{0..79}.self_attn.q_proj.weight; rule q rule");
    CHECK(!strstr(tps_buf_cstr(&b), "pad"));
    tps_buf_reset(&b);
    tps_problem_line(&ps.v[2], &sizes, &b);
    CHECK_CONTAINS(tps_buf_cstr(&b), "intermediate size 28672 along dimension 0");

    /* Expected: T divides 64 (q cannot replicate), T divides 8 or 8 divides T (kv), T
     * divides 28672; the padded vocabulary takes any T. */
    uint64_t want[64];
    size_t nwant = 0;
    for (uint64_t T = 1; T <= 64; T++)
        if (64 % T == 0 && (8 % T == 0 || T % 8 == 0) && 28672 % T == 0) want[nwant++] = T;
    CHECK(ps.fit_known);
    CHECK_EQ_U64(ps.nfit, nwant);
    for (size_t i = 0; i < nwant && i < ps.nfit; i++) CHECK_EQ_U64(ps.fit[i], want[i]);
    tps_buf_reset(&b);
    tps_problems_fit_line(&ps, &b);
    CHECK_STR(tps_buf_cstr(&b), "tp values that fit: 1, 2, 4, 8, 16, 32, 64");
    tps_buf_release(&b);
    tps_problems_free(&ps);
}

TEST(padding_hint_only_for_a_vocabulary)
{
    tps_partition p;
    uint64_t shape[2] = {1003, 64};
    tps_error e;
    tps_error_clear(&e);
    column(&p, 1003, 1, false, false);
    CHECK(tps_partition_check(&p, "model.embed_tokens.weight", TPS_DT_BF16, 2, shape, 4, &e) == TPS_EINVALID);
    CHECK_CONTAINS(e.msg, "pad: true");
    tps_error_clear(&e);
    CHECK(tps_partition_check(&p, "model.layers.0.mlp.gate_proj.weight", TPS_DT_BF16, 2, shape, 4, &e) == TPS_EINVALID);
    CHECK(!strstr(e.msg, "pad"));
}

TEST(a_missing_size_is_one_group_per_rule_naming_the_sizes)
{
    tps_problems ps;
    tps_problems_init(&ps, 2);
    for (int layer = 0; layer < 5; layer++) {
        char name[64];
        snprintf(name, sizeof name, "model.layers.%d.self_attn.q_proj.weight", layer);
        tps_problems_add(&ps, TPS_PROBLEM_SIZES, name, "q rule", NULL, "head_dim", "needs size 'head_dim'");
    }
    tps_error err;
    tps_error_clear(&err);
    CHECK(tps_problems_finish(&ps, &err) == TPS_OK);
    CHECK_EQ_U64(ps.n, 1);
    CHECK(!ps.fit_known); /* partitions unknown: no tp can be promised */
    tps_buf b = TPS_BUF_INIT;
    tps_problem_line(&ps.v[0], NULL, &b);
    CHECK_CONTAINS(tps_buf_cstr(&b), "needs size head_dim, which is unknown; 5 tensors: model.layers.{0..4}");
    tps_buf_release(&b);
    tps_problems_free(&ps);
}

/* The tiny Llama (8 heads, 2 KV heads, intermediate 176) planned at tp 2, then retargeted. */
TEST(retarget_checks_every_tensor_and_groups_the_refusal)
{
    tps_error err;
    tps_error_clear(&err);
    tps_layout *l = NULL;
    tps_index *ix = NULL;
    tps_manifest *m = NULL, *r = NULL;
    tps_buf probs = TPS_BUF_INIT, unused = TPS_BUF_INIT;
    tps_status st = tps_layout_load_preset("llama", &l, &err);
    if (!st) st = tps_layout_read_config(l, FIXTURE "/config.json", NULL, &err);
    if (!st) st = tps_checkpoint_open(FIXTURE, &ix, &err);
    if (!st) st = tps_plan_build(ix, l, "preset:llama", 2, &m, &probs, &unused, &err);
    CHECK(st == TPS_OK);
    if (st) {
        printf("#   %s\n", err.msg);
        goto done;
    }
    /* What the manifest keeps of config.json names the heads in the refusal. */
    m->config_keys = strdup("{\"head_dim\": 8, \"num_attention_heads\": 8, \"num_key_value_heads\": 2, "
                            "\"intermediate_size\": 176, \"hidden_size\": 64, \"vocab_size\": 1003}");
    tps_problems ps;
    tps_problems_init(&ps, 3);
    CHECK(tps_manifest_retarget(m, 3, &r, &ps, &err) == TPS_EINVALID);
    CHECK(r == NULL);
    CHECK_EQ_U64(ps.n, 5); /* q, k/v, o, gate/up, down */
    CHECK_EQ_U64(ps.total, 7 * 2);
    CHECK_CONTAINS(err.msg, "tp 3");
    CHECK_CONTAINS(err.msg, "(and 4 more causes)");
    CHECK(ps.fit_known);
    uint64_t want[] = {1, 2, 4, 8}; /* T | 8 heads, T | 2 or 2 | T KV heads, T | 176 */
    CHECK_EQ_U64(ps.nfit, 4);
    for (size_t i = 0; i < 4 && i < ps.nfit; i++) CHECK_EQ_U64(ps.fit[i], want[i]);
    tps_model_sizes sz;
    CHECK(tps_manifest_sizes(m, &sz, &err) == TPS_OK);
    CHECK_EQ_U64(sz.heads, 8);
    CHECK_EQ_U64(sz.kv_heads, 2);
    tps_problems_free(&ps);

    tps_problems_init(&ps, 4);
    tps_error_clear(&err);
    CHECK(tps_manifest_retarget(m, 4, &r, &ps, &err) == TPS_OK);
    CHECK_EQ_U64(ps.n, 0);
    if (r) {
        CHECK_EQ_U64(r->tp, 4);
        CHECK_EQ_U64(r->ntensors, m->ntensors);
        CHECK_EQ_U64(r->nfiles, 0);
        for (size_t i = 0; i < r->ntensors && i < m->ntensors; i++) {
            CHECK_STR(r->tensors[i].name, m->tensors[i].name);
            CHECK_EQ_U64(r->tensors[i].crc, 0);
        }
        CHECK_STR(r->config_keys, m->config_keys);
    }
    tps_problems_free(&ps);
done:
    tps_manifest_free(r);
    tps_manifest_free(m);
    tps_index_free(ix);
    tps_layout_free(l);
    tps_buf_release(&probs);
    tps_buf_release(&unused);
}

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

int main(void)
{
    RUN(llama70b_at_tp3_groups_80_layers_into_one_line_per_rule);
    RUN(padding_hint_only_for_a_vocabulary);
    RUN(a_missing_size_is_one_group_per_rule_naming_the_sizes);
    RUN(retarget_checks_every_tensor_and_groups_the_refusal);
    RUN(unknown_sizes_are_named_once_in_the_order_first_needed);
    return tps_test_done();
}
