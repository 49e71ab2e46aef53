/* Layouts: globs (against a POSIX-regex translation), size expressions (against a tree
 * evaluator), YAML errors with their line:column, the presets on the fixture models
 * (expected partitions derived by hand from each fixture's sizes in gen_fixtures.py),
 * config.json and inference from shapes, and the block descriptions. */
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/open/checkpoint.h"
#include "lib/layout/layout.h"
#include "lib/layout/layout_int.h"
#include "lib/layout/presets.h"
#include "tps_test.h"

#ifndef TPS_TOP
#define TPS_TOP "."
#endif

/* ---- globs ---- */

TEST(glob_components_and_alternatives)
{
    CHECK(tps_glob_match("model.layers.*.mlp.up_proj.weight", "model.layers.12.mlp.up_proj.weight"));
    CHECK(!tps_glob_match("model.layers.*.mlp.up_proj.weight", "model.layers.1.2.mlp.up_proj.weight"));
    CHECK(!tps_glob_match("model.layers.*.mlp.up_proj.weight", "model.layers.12.mlp.up_proj.weight.x"));
    CHECK(!tps_glob_match("model.layers.*.mlp.up_proj.weight", "xmodel.layers.12.mlp.up_proj.weight"));
    CHECK(tps_glob_match("*", "abc"));
    CHECK(!tps_glob_match("*", "a.b"));
    CHECK(tps_glob_match("a.*", "a."));
    CHECK(tps_glob_match("*_proj.weight", "q_proj.weight"));
    CHECK(!tps_glob_match("*_proj.weight", "x.q_proj.weight"));
    CHECK(tps_glob_match("{a,b}.x", "a.x"));
    CHECK(tps_glob_match("{a,b}.x", "b.x"));
    CHECK(!tps_glob_match("{a,b}.x", "c.x"));
    CHECK(!tps_glob_match("{a,b}.x", "ab.x"));
    CHECK(tps_glob_match("{transformer.,}h.*.w", "transformer.h.0.w"));
    CHECK(tps_glob_match("{transformer.,}h.*.w", "h.0.w"));
    CHECK(!tps_glob_match("{transformer.,}h.*.w", "xh.0.w"));
    const char *combos[] = {"x.q_proj.weight", "x.q_proj.bias", "x.k_proj.weight", "x.k_proj.bias"};
    for (int i = 0; i < 4; i++) CHECK(tps_glob_match("x.{q,k}_proj.{weight,bias}", combos[i]));
    CHECK(!tps_glob_match("x.{q,k}_proj.{weight,bias}", "x.v_proj.weight"));
    CHECK(tps_glob_match("*.{a,b*}", "z.bcd"));
    CHECK(!tps_glob_match("*.{a,b*}", "z.b.c"));
    size_t pos;
    const char *msg;
    CHECK(!tps_glob_valid("a.{b", &pos, &msg) && pos == 2);
    CHECK(!tps_glob_valid("a.{b,{c}}", &pos, &msg) && pos == 5);
    CHECK(!tps_glob_valid("a}", &pos, &msg) && pos == 1);
    CHECK(!tps_glob_valid("a,b", &pos, &msg) && pos == 1);
    CHECK(!tps_glob_valid("", &pos, &msg));
    CHECK(tps_glob_valid("{a,}.*", &pos, &msg));
}

/* The same language as an extended regex: '*' is [^.]*, {a,b} is (a|b). */
static void glob_to_regex(const char *g, char *out)
{
    char *o = out;
    *o++ = '^';
    for (; *g; g++) {
        switch (*g) {
        case '*': o += sprintf(o, "[^.]*"); break;
        case '{': *o++ = '('; break;
        case '}': *o++ = ')'; break;
        case ',': *o++ = '|'; break;
        case '.': o += sprintf(o, "\\."); break;
        default: *o++ = *g;
        }
    }
    *o++ = '$';
    *o = '\0';
}

TEST(glob_matches_regex_translation)
{
    static const char *const atoms[] = {"a", "b", ".", "*", "{a,b.}", "{,a*}", "{.*,b}"};
    static const char letters[] = "ab.";
    srand(7);
    int disagreements = 0;
    for (int p = 0; p < 400; p++) {
        char pat[64] = "", re[256];
        int n = 1 + rand() % 4;
        for (int i = 0; i < n; i++) strcat(pat, atoms[rand() % 7]);
        glob_to_regex(pat, re);
        regex_t rx;
        if (regcomp(&rx, re, REG_EXTENDED | REG_NOSUB) != 0) {
            printf("#   regcomp failed for %s\n", re);
            tps_test_failed_now = 1;
            continue;
        }
        for (int k = 0; k < 60; k++) {
            char name[8];
            int len = rand() % 6;
            for (int i = 0; i < len; i++) name[i] = letters[rand() % 3];
            name[len] = '\0';
            bool want = regexec(&rx, name, 0, NULL, 0) == 0;
            if (tps_glob_match(pat, name) != want && disagreements++ < 5)
                printf("#   glob %s on \"%s\": regex %s says %d\n", pat, name, re, want);
        }
        regfree(&rx);
    }
    CHECK_EQ_U64(disagreements, 0);
}

/* ---- expressions ---- */

static tps_status eval_text(const char *text, const tps_model_sizes *s, uint64_t *v, tps_error *err)
{
    tps_expr e = {0};
    size_t pos;
    const char *msg;
    if (!tps_expr_compile(text, &e, &pos, &msg)) return tps_fail(err, TPS_EINVALID, "compile: %s at %zu", msg, pos);
    e.at.line = 3;
    e.at.col = 9;
    tps_status st = tps_expr_eval(&e, s, "x.yaml", "ctx", v, err);
    tps_expr_release(&e);
    return st;
}

TEST(expressions_evaluate_exactly)
{
    tps_model_sizes s = {.hidden = 64, .heads = 8, .kv_heads = 2, .head_dim = 8};
    struct {
        const char *text;
        uint64_t want;
    } ok[] = {{"2+3*4", 14},          {"(2+3)*4", 20},           {"10-3-2", 5},
              {"100/10/5", 2},        {"hidden/heads", 8},       {"kv_heads*head_dim", 16},
              {" 3 * ( heads + 2*kv_heads ) * head_dim ", 288}, {"18446744073709551615", UINT64_MAX}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        tps_error err;
        tps_error_clear(&err);
        uint64_t v = 0;
        CHECK(eval_text(ok[i].text, &s, &v, &err) == TPS_OK);
        CHECK_EQ_U64(v, ok[i].want);
    }
    struct {
        const char *text, *msg;
    } bad[] = {
        {"7/2", "7 / 2 is not an exact division"},
        {"1-2", "1 - 2 is negative"},
        {"hidden/0", "divides by zero"},
        {"18446744073709551615*2", "overflows"},
        {"intermediate*2", "needs size 'intermediate', which is unknown"},
        {"heads*", "compile: expression ends early at 6"},
        {"heads hidden", "compile: unexpected character at 6"},
        {"hed*2", "compile: unknown size"},
        {"(heads", "compile: expected ')' at 6"},
        {"99999999999999999999", "compile: number too large"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tps_error err;
        tps_error_clear(&err);
        uint64_t v;
        CHECK(eval_text(bad[i].text, &s, &v, &err) == TPS_EINVALID);
        CHECK_CONTAINS(err.msg, bad[i].msg);
    }
    tps_error err;
    tps_error_clear(&err);
    uint64_t v;
    eval_text("vocab+1", &s, &v, &err);
    CHECK_CONTAINS(err.msg, "(x.yaml:3:9)");
}

/* Random expression trees printed fully parenthesised or not, evaluated by the tree. */
typedef struct enode {
    char op; /* 'n' leaf */
    uint64_t v;
    struct enode *l, *r;
} enode;

static enode pool[256];
static int npool;

static enode *gen(int depth)
{
    enode *e = &pool[npool++];
    if (depth == 0 || rand() % 3 == 0) {
        e->op = 'n';
        e->v = (uint64_t)(rand() % 12);
        return e;
    }
    e->op = "+-*/"[rand() % 4];
    e->l = gen(depth - 1);
    e->r = gen(depth - 1);
    return e;
}

static bool tree_eval(const enode *e, uint64_t *out)
{
    if (e->op == 'n') {
        *out = e->v;
        return true;
    }
    uint64_t a, b;
    if (!tree_eval(e->l, &a) || !tree_eval(e->r, &b)) return false;
    switch (e->op) {
    case '+': *out = a + b; return true;
    case '-': *out = a - b; return a >= b;
    case '*': *out = a * b; return true;
    default: *out = b ? a / b : 0; return b && a % b == 0;
    }
}

static int prec(char op) { return op == 'n' ? 3 : op == '*' || op == '/' ? 2 : 1; }

/* Minimal parentheses: a right operand needs them at equal precedence (left
 * associativity), so this also tests that the parser associates to the left. */
static void print_tree(const enode *e, char *out)
{
    if (e->op == 'n') {
        sprintf(out + strlen(out), "%llu", (unsigned long long)e->v);
        return;
    }
    bool pl = prec(e->l->op) < prec(e->op), pr = prec(e->r->op) <= prec(e->op);
    if (pl) strcat(out, "(");
    print_tree(e->l, out);
    if (pl) strcat(out, ")");
    sprintf(out + strlen(out), " %c ", e->op);
    if (pr) strcat(out, "(");
    print_tree(e->r, out);
    if (pr) strcat(out, ")");
}

TEST(expressions_match_tree_evaluation)
{
    srand(11);
    tps_model_sizes s = {0};
    int checked = 0, wrong = 0;
    for (int i = 0; i < 2000; i++) {
        npool = 0;
        enode *e = gen(4);
        char text[1024] = "";
        print_tree(e, text);
        uint64_t want = 0, got = 0;
        bool ok = tree_eval(e, &want);
        tps_error err;
        tps_error_clear(&err);
        tps_status st = eval_text(text, &s, &got, &err);
        if ((st == TPS_OK) != ok || (ok && got != want)) {
            if (wrong++ < 5) printf("#   %s: tree %d %llu, parser %d %llu (%s)\n", text, ok, (unsigned long long)want,
                                    st == TPS_OK, (unsigned long long)got, err.msg);
        }
        checked += ok;
    }
    CHECK_EQ_U64(wrong, 0);
    CHECK(checked > 200); /* enough valid expressions among the random ones */
}

/* ---- YAML errors ---- */

static void expect_error(const char *yaml, const char *fragment)
{
    tps_layout *l = NULL;
    tps_error err;
    tps_error_clear(&err);
    tps_status st = tps_layout_parse(yaml, strlen(yaml), "t.yaml", &l, &err);
    if (st != TPS_EINVALID) {
        printf("#   expected an error containing \"%s\", got status %d for:\n%s\n", fragment, st, yaml);
        tps_test_failed_now = 1;
    } else {
        CHECK_CONTAINS(err.msg, fragment);
    }
    CHECK(l == NULL);
    tps_layout_free(l);
}

TEST(yaml_errors_carry_line_and_column)
{
    expect_error("rules: [a, b\n", "t.yaml:2:1: YAML syntax error");
    expect_error("rules:\n  - match: a\n    split: column\n   bad: 1\n", "t.yaml:4:4: YAML syntax error");
    expect_error("rules:\n  - match: a.b\n    splt: column\n", "t.yaml:3:5: unknown key 'splt' in rule");
    expect_error("rule:\n  - match: a\n", "t.yaml:1:1: unknown key 'rule' in the layout");
    expect_error("sizes:\n  hidden: [1]\nrules: [{match: a, split: replicate}]\n",
                 "t.yaml:2:11: hidden must be a scalar, not a list");
    expect_error("sizes:\n  hidden: \"64\"\nrules: [{match: a, split: replicate}]\n",
                 "t.yaml:2:11: hidden must be a positive integer, not a quoted string");
    expect_error("sizes:\n  hidden: 0\nrules: [{match: a, split: replicate}]\n", "t.yaml:2:11: hidden must be a positive");
    expect_error("sizes:\n  hiden: 64\nrules: [{match: a, split: replicate}]\n", "t.yaml:2:3: unknown key 'hiden' in sizes");
    expect_error("rules:\n  - match: a\n    split: colum\n", "t.yaml:3:12: split 'colum' is not one of");
    expect_error("rules:\n  - match: a\n    split: column\n    size: heads*hed\n",
                 "t.yaml:4:17: size 'heads*hed': unknown size");
    expect_error("rules:\n  - match: a\n    split: column\n    unit: \"2*(head_dim\"\n",
                 "t.yaml:4:23: unit '2*(head_dim': expected ')'");
    expect_error("rules:\n  - match: 'a.{b'\n    split: column\n", "t.yaml:2:15: match 'a.{b': '{' without '}'");
    expect_error("rules:\n  - match: a\n    split: column\n    split: row\n", "t.yaml:4:5: duplicate key 'split'");
    expect_error("rules:\n  - match: a\n    split: column\n    pad: yes\n", "t.yaml:4:10: pad must be true or false");
    expect_error("rules:\n  - match: a\n    split: replicate\n    dim: 1\n", "t.yaml:4:10: a replicated tensor takes no dim");
    expect_error("rules:\n  - match: a\n    split: dim\n", "t.yaml:3:12: split: dim needs dim: N");
    expect_error("rules:\n  - split: column\n", "t.yaml:2:5: rule needs match");
    expect_error("rules:\n  - match: a\n", "t.yaml:2:5: rule needs split");
    expect_error("default:\n  match: a\n  split: replicate\n", "t.yaml:2:10: default applies to unmatched tensors");
    expect_error("rules:\n  - match: a\n    split: column\n    segments: {q: 8, k: 8}\n    pad: true\n",
                 "t.yaml:5:10: pad needs a single segment");
    expect_error("rules:\n  - match: a\n    split: column\n    segments: {gate: 8, up: 8}\n    kv_replicate: true\n",
                 "t.yaml:5:19: kv_replicate needs a segment named k or v");
    expect_error("rules:\n  - match: a\n    split: column\n    segments: {q: 8, q: 8}\n", "t.yaml:4:22: duplicate key 'q'");
    expect_error("rules:\n  - match: a\n    split: column\n    segments:\n      - {name: q, size: 8, unt: 1}\n",
                 "t.yaml:5:28: unknown key 'unt' in segment");
    expect_error("rules:\n  - match: a\n    split: column\n    segments: {averyveryverylongname: 8}\n",
                 "t.yaml:4:16: segment name 'averyveryverylongname'");
    expect_error("rules:\n  - match: a\n    split: column\n    dim: x\n", "t.yaml:4:10: dim must be an integer");
    expect_error("infer:\n  vocab: {tensor: a, count: b}\nrules: [{match: a, split: replicate}]\n",
                 "t.yaml:2:10: infer.vocab needs exactly one of tensor, count or expr");
    expect_error("infer:\n  vocab: {tensor: a}\nrules: [{match: a, split: replicate}]\n",
                 "t.yaml:2:10: infer.vocab: tensor needs dim");
    expect_error("", "t.yaml: the layout is empty");
    expect_error("name: x\n", "t.yaml: the layout has no rules and no default");
    expect_error("default: {split: replicate}\n---\ndefault: {split: replicate}\n", "t.yaml:3:1: a layout is one YAML document");
    expect_error("[1, 2]\n", "t.yaml:1:1: the layout must be a mapping, not a list");
    const char *blk = "default: {split: replicate}\nblock:\n  kind: llama\n  layer_prefix: 'model.layers.{layer}.'\n";
    char y[1024];
    snprintf(y, sizeof y, "%s", blk);
    expect_error(y, "t.yaml:3:3: block of kind llama needs role attn_norm");
    snprintf(y, sizeof y, "%s  roles: {attn_nrm: x}\n", blk);
    expect_error(y, "t.yaml:5:11: unknown role 'attn_nrm'");
    expect_error("default: {split: replicate}\nblock:\n  kind: bert\n  layer_prefix: x\n",
                 "t.yaml:3:9: kind 'bert' is not one of llama, gpt2, neox, mixtral");
    expect_error("default: {split: replicate}\nblock:\n  kind: gpt2\n  layer_prefix: 'h.'\n",
                 "t.yaml:4:17: layer_prefix must contain {layer}");
    snprintf(y, sizeof y,
             "%s  roles: {attn_norm: a, o_proj: b, mlp_norm: c, down_proj: d, qkv_proj: e, gate_up_proj: f}\n"
             "  rotary_pct: 1.5\n",
             blk);
    expect_error(y, "t.yaml:6:15: rotary_pct must be a number in (0, 1]");
}

static tps_layout *parse_ok(const char *yaml)
{
    tps_layout *l = NULL;
    tps_error err;
    tps_error_clear(&err);
    if (tps_layout_parse(yaml, strlen(yaml), "t.yaml", &l, &err) != TPS_OK) {
        printf("#   unexpected error: %s\n", err.msg);
        tps_test_failed_now = 1;
    }
    return l;
}

static tps_status part(tps_layout *l, const char *name, int ndim, const uint64_t *shape, tps_partition *p,
                       size_t *rule, tps_error *err)
{
    tps_error_clear(err);
    return tps_layout_partition(l, name, TPS_DT_BF16, ndim, shape, p, rule, err);
}

TEST(rules_resolve_dims_units_and_segments)
{
    tps_layout *l = parse_ok("sizes: {hidden: 64, heads: 8, kv_heads: 2, head_dim: 8}\n"
                             "rules:\n"
                             "  - match: [a.w, a.b]\n"
                             "    split: column\n"
                             "    unit: head_dim\n"
                             "    segments:\n"
                             "      - {name: q, size: heads*head_dim}\n"
                             "      - {name: k, size: kv_heads*head_dim}\n"
                             "      - {name: v, size: kv_heads*head_dim, unit: 2*head_dim, may_replicate: false}\n"
                             "    kv_replicate: true\n"
                             "  - match: r.w\n"
                             "    split: row\n"
                             "  - match: c.w\n"
                             "    split: dim\n"
                             "    dim: -1\n"
                             "    size: hidden\n"
                             "default:\n"
                             "  split: replicate\n");
    if (!l) return;
    tps_partition p;
    tps_error err;
    size_t rule = 99;
    uint64_t w[2] = {96, 64}, b[1] = {96};
    CHECK(part(l, "a.w", 2, w, &p, &rule, &err) == TPS_OK);
    CHECK_EQ_U64(rule, 0);
    CHECK(!p.replicated);
    CHECK_EQ_U64(p.dim, 0);
    CHECK_EQ_U64(p.nseg, 3);
    CHECK_STR(p.seg[0].name, "q");
    CHECK_EQ_U64(p.seg[0].length, 64);
    CHECK_EQ_U64(p.seg[0].unit, 8);
    CHECK(!p.seg[0].may_replicate);
    CHECK_STR(p.seg[1].name, "k");
    CHECK_EQ_U64(p.seg[1].length, 16);
    CHECK(p.seg[1].may_replicate);
    CHECK_EQ_U64(p.seg[2].unit, 16);
    CHECK(p.seg[2].may_replicate); /* kv_replicate names v */
    CHECK(part(l, "a.b", 1, b, &p, &rule, &err) == TPS_OK);
    CHECK_EQ_U64(p.dim, 0);
    uint64_t wrong[2] = {128, 64};
    CHECK(part(l, "a.w", 2, wrong, &p, &rule, &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "tensor a.w: rule a.w, a.b (t.yaml:3:5): segments q=64 + k=16 + v=16 add up to 96, "
                            "but dim 0 of shape [128, 64] is 128");
    uint64_t r2[2] = {64, 32};
    CHECK(part(l, "r.w", 2, r2, &p, &rule, &err) == TPS_OK);
    CHECK_EQ_U64(p.dim, 1);
    CHECK_EQ_U64(p.seg[0].length, 32);
    CHECK_EQ_U64(p.seg[0].unit, 1);
    uint64_t r1[1] = {64};
    CHECK(part(l, "r.w", 1, r1, &p, &rule, &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "split: replicate");
    uint64_t c3[3] = {2, 3, 64};
    CHECK(part(l, "c.w", 3, c3, &p, &rule, &err) == TPS_OK);
    CHECK_EQ_U64(p.dim, 2);
    uint64_t c3b[3] = {2, 64, 3};
    CHECK(part(l, "c.w", 3, c3b, &p, &rule, &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "size hidden = 64, but dim 2 of shape [2, 64, 3] is 3");
    CHECK(part(l, "other", 1, r1, &p, &rule, &err) == TPS_OK);
    CHECK(p.replicated);
    CHECK_EQ_U64(rule, 3);
    CHECK_EQ_U64(tps_layout_rule_count(l), 4);
    CHECK_EQ_U64(tps_layout_rule_matches(l, 0), 3);
    CHECK_EQ_U64(tps_layout_rule_matches(l, 1), 2);
    CHECK_EQ_U64(tps_layout_rule_matches(l, 2), 2);
    CHECK_EQ_U64(tps_layout_rule_matches(l, 3), 1);
    CHECK_STR(tps_layout_rule_label(l, 3), "default (t.yaml:18:3)");
    tps_layout_free(l);

    /* No default: an unmatched tensor is an error; a size nobody gave is named. */
    l = parse_ok("rules:\n  - match: q\n    split: column\n    unit: head_dim\n");
    if (!l) return;
    CHECK(part(l, "z", 1, r1, &p, &rule, &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "tensor z: no rule of layout t.yaml matches it");
    CHECK(part(l, "q", 1, r1, &p, &rule, &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "expression 'head_dim' (t.yaml:4:11) needs size 'head_dim', which is unknown");
    tps_layout_free(l);
}

/* ---- presets on the fixtures ---- */

typedef struct expect {
    const char *suffix; /* the tensor names this entry covers end with it */
    bool replicated;
    int dim, nseg;
    uint64_t len[3], unit[3];
    bool kvrep[3];
    bool pad;
} expect;

#define REPL(sfx) {sfx, true, 0, 0, {0}, {0}, {0}, false}
#define SPLIT(sfx, d, l, u, kv) {sfx, false, d, 1, {l}, {u}, {kv}, false}
#define PADDED(sfx, l) {sfx, false, 0, 1, {l}, {1}, {false}, true}

/* tiny-llama: hidden 64, 8 heads, 2 KV heads, head_dim 8, intermediate 176, vocab 1003. */
static const expect exp_llama[] = {
    PADDED("embed_tokens.weight", 1003), PADDED("lm_head.weight", 1003),
    SPLIT("q_proj.weight", 0, 64, 8, false), SPLIT("k_proj.weight", 0, 16, 8, true),
    SPLIT("v_proj.weight", 0, 16, 8, true), SPLIT("o_proj.weight", 1, 64, 8, false),
    SPLIT("gate_proj.weight", 0, 176, 1, false), SPLIT("up_proj.weight", 0, 176, 1, false),
    SPLIT("down_proj.weight", 1, 176, 1, false), REPL("layernorm.weight"), REPL("norm.weight"),
    {NULL, false, 0, 0, {0}, {0}, {0}, false},
};
/* tiny-qwen2: hidden 64, 8 heads, 2 KV heads, head_dim 8, intermediate 128, vocab 500, tied. */
static const expect exp_qwen2[] = {
    PADDED("embed_tokens.weight", 500),
    SPLIT("q_proj.weight", 0, 64, 8, false), SPLIT("k_proj.weight", 0, 16, 8, true),
    SPLIT("v_proj.weight", 0, 16, 8, true), SPLIT("q_proj.bias", 0, 64, 8, false),
    SPLIT("k_proj.bias", 0, 16, 8, true), SPLIT("v_proj.bias", 0, 16, 8, true),
    SPLIT("o_proj.weight", 1, 64, 8, false), SPLIT("gate_proj.weight", 0, 128, 1, false),
    SPLIT("up_proj.weight", 0, 128, 1, false), SPLIT("down_proj.weight", 1, 128, 1, false),
    REPL("layernorm.weight"), REPL("norm.weight"),
    {NULL, false, 0, 0, {0}, {0}, {0}, false},
};
/* tiny-gpt2: n_embd 64, 4 heads of 16, n_inner 4*64, vocab 500; Conv1D [in, out]. */
static const expect exp_gpt2[] = {
    PADDED("wte.weight", 500), REPL("wpe.weight"),
    {"c_attn.weight", false, 1, 3, {64, 64, 64}, {16, 16, 16}, {false, false, false}, false},
    {"c_attn.bias", false, 0, 3, {64, 64, 64}, {16, 16, 16}, {false, false, false}, false},
    SPLIT("attn.c_proj.weight", 0, 64, 16, false), SPLIT("c_fc.weight", 1, 256, 1, false),
    SPLIT("c_fc.bias", 0, 256, 1, false), SPLIT("mlp.c_proj.weight", 0, 256, 1, false),
    REPL("c_proj.bias"), REPL(".weight"), REPL(".bias"), /* ln_1, ln_2, ln_f */
    {NULL, false, 0, 0, {0}, {0}, {0}, false},
};
/* tiny-neox: hidden 64, 4 heads of 16, intermediate 256, vocab 500; per-head QKV. */
static const expect exp_neox[] = {
    PADDED("embed_in.weight", 500), PADDED("embed_out.weight", 500),
    SPLIT("query_key_value.weight", 0, 192, 48, false), SPLIT("query_key_value.bias", 0, 192, 48, false),
    SPLIT("attention.dense.weight", 1, 64, 16, false), REPL("attention.dense.bias"),
    SPLIT("dense_h_to_4h.weight", 0, 256, 1, false), SPLIT("dense_h_to_4h.bias", 0, 256, 1, false),
    SPLIT("dense_4h_to_h.weight", 1, 256, 1, false), REPL("dense_4h_to_h.bias"),
    REPL("norm.weight"), REPL("norm.bias"),
    {NULL, false, 0, 0, {0}, {0}, {0}, false},
};
/* tiny-phi3: hidden 64, 8 heads, 2 KV heads, head_dim 8, intermediate 128, vocab 600. */
static const expect exp_phi3[] = {
    PADDED("embed_tokens.weight", 600), PADDED("lm_head.weight", 600),
    {"qkv_proj.weight", false, 0, 3, {64, 16, 16}, {8, 8, 8}, {false, true, true}, false},
    SPLIT("o_proj.weight", 1, 64, 8, false),
    {"gate_up_proj.weight", false, 0, 2, {128, 128}, {1, 1}, {false, false}, false},
    SPLIT("down_proj.weight", 1, 128, 1, false), REPL("norm.weight"),
    {NULL, false, 0, 0, {0}, {0}, {0}, false},
};
/* tiny-mixtral: hidden 64, 8 heads, 2 KV heads, head_dim 8, expert intermediate 96,
 * vocab 512, 4 experts. */
static const expect exp_mixtral[] = {
    PADDED("embed_tokens.weight", 512), PADDED("lm_head.weight", 512),
    SPLIT("q_proj.weight", 0, 64, 8, false), SPLIT("k_proj.weight", 0, 16, 8, true),
    SPLIT("v_proj.weight", 0, 16, 8, true), SPLIT("o_proj.weight", 1, 64, 8, false),
    SPLIT("w1.weight", 0, 96, 1, false), SPLIT("w3.weight", 0, 96, 1, false),
    SPLIT("w2.weight", 1, 96, 1, false), REPL("moe.gate.weight"), REPL("norm.weight"),
    {NULL, false, 0, 0, {0}, {0}, {0}, false},
};

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

typedef struct fixture {
    const char *dir, *preset;
    const expect *exp;
    uint64_t hidden, heads, kv_heads, head_dim, intermediate, vocab, layers, experts;
    bool tp8_ok; /* every split fits T=8 (heads multiple of 8, K/V replicable) */
} fixture;

static const fixture fixtures[] = {
    {"tiny-llama", "llama", exp_llama, 64, 8, 2, 8, 176, 1003, 2, 0, true},
    {"tiny-llama-split", "llama", exp_llama, 64, 8, 2, 8, 176, 1003, 2, 0, true},
    {"tiny-qwen2", "llama", exp_qwen2, 64, 8, 2, 8, 128, 500, 2, 0, true},
    {"tiny-gpt2", "gpt2", exp_gpt2, 64, 4, 4, 16, 256, 500, 2, 0, false},
    {"tiny-neox", "neox", exp_neox, 64, 4, 4, 16, 256, 500, 2, 0, false},
    {"tiny-phi3", "phi3", exp_phi3, 64, 8, 2, 8, 128, 600, 2, 0, true},
    {"tiny-mixtral", "mixtral", exp_mixtral, 64, 8, 2, 8, 96, 512, 2, 4, true},
};

static tps_index *open_fixture(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/testdata/models/%s", TPS_TOP, dir);
    tps_index *ix = NULL;
    tps_error err;
    tps_error_clear(&err);
    if (tps_checkpoint_open(path, &ix, &err) != TPS_OK) {
        printf("#   %s\n", err.msg);
        tps_test_failed_now = 1;
    }
    return ix;
}

static tps_layout *preset_with_config(const fixture *f)
{
    tps_layout *l = NULL;
    tps_error err;
    tps_error_clear(&err);
    char cfg[512];
    snprintf(cfg, sizeof cfg, "%s/testdata/models/%s/config.json", TPS_TOP, f->dir);
    if (tps_layout_load_preset(f->preset, &l, &err) != TPS_OK || tps_layout_read_config(l, cfg, NULL, &err) != TPS_OK) {
        printf("#   %s: %s\n", f->dir, err.msg);
        tps_test_failed_now = 1;
        tps_layout_free(l);
        return NULL;
    }
    return l;
}

static void check_partition(const char *name, const tps_partition *p, const expect *e)
{
    int bad = 0;
    bad |= p->replicated != e->replicated;
    if (!e->replicated) {
        bad |= p->dim != e->dim || p->nseg != e->nseg || p->pad != e->pad;
        for (int s = 0; s < e->nseg && s < p->nseg; s++)
            bad |= p->seg[s].length != e->len[s] || p->seg[s].unit != e->unit[s] ||
                   p->seg[s].may_replicate != e->kvrep[s];
    }
    if (bad) {
        char got[256];
        tps_partition_describe(p, got, sizeof got);
        printf("#   %s: got %s (dim %d, %d segs, len0 %llu unit0 %llu), expected entry '%s'\n", name, got, p->dim,
               p->nseg, (unsigned long long)p->seg[0].length, (unsigned long long)p->seg[0].unit, e->suffix);
        tps_test_failed_now = 1;
    }
}

TEST(presets_partition_every_fixture_tensor)
{
    for (size_t fi = 0; fi < sizeof fixtures / sizeof fixtures[0]; fi++) {
        const fixture *f = &fixtures[fi];
        tps_index *ix = open_fixture(f->dir);
        tps_layout *l = preset_with_config(f);
        tps_error err;
        if (ix && l && tps_layout_infer_sizes(l, ix, &err) != TPS_OK) {
            printf("#   %s: %s\n", f->dir, err.msg);
            tps_test_failed_now = 1;
        }
        for (size_t i = 0; ix && l && i < ix->ntensors; i++) {
            const tps_tensor *t = &ix->tensors[i];
            const expect *e = f->exp;
            while (e->suffix && !ends_with(t->name, e->suffix)) e++;
            if (!e->suffix) {
                printf("#   %s: test table has no entry for %s\n", f->dir, t->name);
                tps_test_failed_now = 1;
                continue;
            }
            tps_partition p;
            size_t rule;
            if (part(l, t->name, t->ndim, t->shape, &p, &rule, &err) != TPS_OK) {
                printf("#   %s: %s\n", f->dir, err.msg);
                tps_test_failed_now = 1;
                continue;
            }
            check_partition(t->name, &p, e);
            /* The lead's algebra accepts every preset cut at T = 1, 2, 4 on every fixture,
             * and at 8 where the heads allow it. */
            for (uint64_t T = 1; T <= 8; T *= 2) {
                tps_error perr;
                tps_error_clear(&perr);
                tps_status st = tps_partition_check(&p, t->name, t->dtype, t->ndim, t->shape, T, &perr);
                /* gpt2 and neox have 4 heads: their head-cut tensors cannot go to 8 ranks. */
                bool head_cut = !p.replicated && p.seg[0].unit > 1;
                bool want_ok = T < 8 || f->tp8_ok || !head_cut;
                if ((st == TPS_OK) != want_ok) {
                    printf("#   %s %s at T=%llu: %s\n", f->dir, t->name, (unsigned long long)T,
                           st == TPS_OK ? "accepted" : perr.msg);
                    tps_test_failed_now = 1;
                }
            }
        }
        /* Every rule that the fixture's tensor set can use did match something. */
        for (size_t r = 0; l && ix && r < tps_layout_rule_count(l); r++)
            if (tps_layout_rule_matches(l, r) == 0 && !strstr(tps_layout_rule_label(l, r), "masked_bias")) {
                printf("#   %s: rule %s matched nothing\n", f->dir, tps_layout_rule_label(l, r));
                tps_test_failed_now = 1;
            }
        tps_layout_free(l);
        tps_index_free(ix);
    }
}

TEST(presets_rule_match_counts)
{
    /* tiny-llama with llama: embed+lm_head 2, q 2, k/v 4, o 2, gate/up 4, down 2, norms 2*2+1. */
    const uint64_t want[] = {2, 2, 4, 2, 4, 2, 5};
    tps_index *ix = open_fixture("tiny-llama");
    tps_layout *l = preset_with_config(&fixtures[0]);
    if (!ix || !l) goto done;
    CHECK_EQ_U64(tps_layout_rule_count(l), 7);
    for (size_t i = 0; i < ix->ntensors; i++) {
        tps_partition p;
        size_t rule;
        tps_error err;
        CHECK(part(l, ix->tensors[i].name, ix->tensors[i].ndim, ix->tensors[i].shape, &p, &rule, &err) == TPS_OK);
    }
    for (size_t r = 0; r < 7; r++) CHECK_EQ_U64(tps_layout_rule_matches(l, r), want[r]);
    CHECK_STR(tps_layout_rule_label(l, 1), "model.layers.*.self_attn.q_proj.{weight,bias} (preset:llama:18:5)");
done:
    tps_layout_free(l);
    tps_index_free(ix);
}

TEST(config_json_sizes_and_block)
{
    for (size_t fi = 0; fi < sizeof fixtures / sizeof fixtures[0]; fi++) {
        const fixture *f = &fixtures[fi];
        tps_layout *l = preset_with_config(f);
        if (!l) continue;
        const tps_model_sizes *s = tps_layout_sizes(l);
        const uint64_t got[] = {s->hidden, s->heads, s->kv_heads, s->head_dim, s->intermediate, s->vocab, s->layers, s->experts};
        const uint64_t want[] = {f->hidden, f->heads, f->kv_heads, f->head_dim, f->intermediate, f->vocab, f->layers, f->experts};
        for (int i = 0; i < 8; i++)
            if (got[i] != want[i]) {
                printf("#   %s: %s = %llu, expected %llu\n", f->dir, tps_size_names[i], (unsigned long long)got[i],
                       (unsigned long long)want[i]);
                tps_test_failed_now = 1;
            }
        const tps_block *b = tps_layout_block(l);
        CHECK(b != NULL);
        if (b) {
            CHECK_EQ_U64(b->hidden, f->hidden);
            CHECK_EQ_U64(b->kv_heads, f->kv_heads);
            CHECK_EQ_U64(b->layers, f->layers);
        }
        tps_layout_free(l);
    }
    /* Block settings: config.json values where the preset leaves them open. */
    tps_layout *l = preset_with_config(&fixtures[2]); /* qwen2 */
    if (l) {
        const tps_block *b = tps_layout_block(l);
        CHECK(b->norm_eps == 1e-6 && b->rope_theta == 1e6 && b->norm == TPS_NORM_RMS && b->act == TPS_ACT_SILU);
        CHECK(b->rope == TPS_ROPE_HALF && b->rotary_pct == 1.0 && !b->parallel_residual && !b->conv1d);
        CHECK_STR(b->role[TPS_ROLE_Q_B], "self_attn.q_proj.bias");
        CHECK_STR(b->layer_prefix, "model.layers.{layer}.");
    }
    tps_layout_free(l);
    l = preset_with_config(&fixtures[4]); /* neox */
    if (l) {
        const tps_block *b = tps_layout_block(l);
        CHECK(b->kind == TPS_BLOCK_NEOX && b->act == TPS_ACT_GELU_ERF && b->rotary_pct == 0.25);
        CHECK(b->parallel_residual && b->qkv_interleaved && b->norm == TPS_NORM_LAYER && b->rope_theta == 10000);
    }
    tps_layout_free(l);
    l = preset_with_config(&fixtures[3]); /* gpt2 */
    if (l) {
        const tps_block *b = tps_layout_block(l);
        CHECK(b->kind == TPS_BLOCK_GPT2 && b->act == TPS_ACT_GELU_TANH && b->conv1d && b->rope == TPS_ROPE_NONE);
        CHECK(b->norm == TPS_NORM_LAYER && b->norm_eps == 1e-5);
    }
    tps_layout_free(l);
    l = preset_with_config(&fixtures[6]); /* mixtral */
    if (l) {
        const tps_block *b = tps_layout_block(l);
        CHECK(b->kind == TPS_BLOCK_MIXTRAL && b->top_k == 2 && b->experts == 4 && b->rope_theta == 1e6);
        CHECK_STR(b->expert_prefix, "block_sparse_moe.experts.{expert}.");
    }
    tps_layout_free(l);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

TEST(config_json_errors_and_priority)
{
    char dir[] = "/tmp/tps-layout-XXXXXX";
    if (!mkdtemp(dir)) {
        tps_test_failed_now = 1;
        return;
    }
    char p[256];
    snprintf(p, sizeof p, "%s/config.json", dir);
    tps_layout *l = parse_ok("sizes: {vocab: 7}\ndefault: {split: replicate}\n");
    tps_error err;
    if (l) {
        write_file(p, "{\"hidden_size\": 96, \"num_attention_heads\": 12, \"vocab_size\": 1000, \"num_hidden_layers\": 3}");
        tps_error_clear(&err);
        CHECK(tps_layout_read_config(l, p, NULL, &err) == TPS_OK);
        const tps_model_sizes *s = tps_layout_sizes(l);
        CHECK_EQ_U64(s->vocab, 7); /* the layout wins */
        CHECK_EQ_U64(s->hidden, 96);
        CHECK_EQ_U64(s->heads, 12);
        CHECK_EQ_U64(s->kv_heads, 12); /* absent: MHA */
        CHECK_EQ_U64(s->head_dim, 8);  /* absent: hidden / heads */
        CHECK_EQ_U64(s->layers, 3);
        CHECK_EQ_U64(s->intermediate, 0);
        CHECK(tps_layout_block(l) == NULL);
        tps_layout_free(l);
    }
    struct {
        const char *json, *msg;
    } bad[] = {
        {"{\"hidden_size\": \"64\"}", "\"hidden_size\" must be a positive integer"},
        {"{\"hidden_size\": 64.5}", "\"hidden_size\" must be a positive integer"},
        {"{\"hidden_size\": 10, \"num_attention_heads\": 3}", "hidden size 10 is not a multiple of 3 heads"},
        {"{\"rms_norm_eps\": -1}", "\"rms_norm_eps\" must be a number in (0, 1]"},
        {"[1]", "a config.json must be a JSON object"},
        {"{\"a\": 1,}", "config.json"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        l = parse_ok("default: {split: replicate}\n");
        if (!l) continue;
        write_file(p, bad[i].json);
        tps_error_clear(&err);
        CHECK(tps_layout_read_config(l, p, NULL, &err) == TPS_EINVALID);
        CHECK_CONTAINS(err.msg, bad[i].msg);
        tps_layout_free(l);
    }
    /* An activation tpshard cannot compute is only an error when the block leaves act open. */
    write_file(p, "{\"hidden_act\": \"relu2\"}");
    const char *blk = "default: {split: replicate}\nblock:\n  kind: gpt2\n  layer_prefix: 'h.{layer}.'\n"
                      "  roles: {attn_norm: a, o_proj: b, mlp_norm: c, down_proj: d, qkv_proj: e, fc: f}\n";
    l = parse_ok(blk);
    if (l) {
        tps_error_clear(&err);
        CHECK(tps_layout_read_config(l, p, NULL, &err) == TPS_EINVALID);
        CHECK_CONTAINS(err.msg, "\"hidden_act\" is not an activation tpshard computes");
        tps_layout_free(l);
    }
    char blk2[512];
    snprintf(blk2, sizeof blk2, "%s  act: gelu_erf\n", blk);
    l = parse_ok(blk2);
    if (l) {
        tps_error_clear(&err);
        CHECK(tps_layout_read_config(l, p, NULL, &err) == TPS_OK);
        CHECK(tps_layout_block(l)->act == TPS_ACT_GELU_ERF);
        tps_layout_free(l);
    }
    l = parse_ok("default: {split: replicate}\n");
    if (l) {
        snprintf(p, sizeof p, "%s/missing.json", dir);
        tps_error_clear(&err);
        CHECK(tps_layout_read_config(l, p, NULL, &err) == TPS_EINVALID);
        CHECK_CONTAINS(err.msg, "missing.json: cannot open");
        tps_layout_free(l);
    }
    snprintf(p, sizeof p, "%s/config.json", dir);
    remove(p);
    rmdir(dir);
}

TEST(infer_sizes_from_shapes)
{
    /* The llama preset with only head_dim given: the rest from tiny-llama's shapes. */
    const tps_preset *pr = tps_preset_find("llama");
    tps_index *ix = open_fixture("tiny-llama");
    if (!pr || !ix) goto done;
    char text[8192];
    snprintf(text, sizeof text, "%ssizes: {head_dim: 8}\n", pr->yaml);
    tps_layout *l = parse_ok(text);
    tps_error err;
    tps_error_clear(&err);
    if (l) {
        CHECK(tps_layout_infer_sizes(l, ix, &err) == TPS_OK);
        const tps_model_sizes *s = tps_layout_sizes(l);
        CHECK_EQ_U64(s->vocab, 1003);
        CHECK_EQ_U64(s->hidden, 64);
        CHECK_EQ_U64(s->intermediate, 176);
        CHECK_EQ_U64(s->layers, 2);
        CHECK_EQ_U64(s->heads, 8);
        CHECK_EQ_U64(s->kv_heads, 2);
        CHECK_EQ_U64(s->experts, 0);
        tps_layout_free(l);
    }
    /* Chained hints (heads from hidden and a head_dim read off a shape), a count, and two
     * tensors that disagree. */
    l = parse_ok("infer:\n"
                 "  head_dim: {tensor: 'model.layers.*.self_attn.k_proj.weight', dim: 0, unit: kv_heads}\n"
                 "  heads: {expr: hidden/head_dim}\n"
                 "  layers: {count: 'model.layers.*.mlp.down_proj.weight'}\n"
                 "  experts: {tensor: nothing.matches, dim: 0}\n"
                 "sizes: {hidden: 64, kv_heads: 2}\n"
                 "default: {split: replicate}\n");
    if (l) {
        tps_error_clear(&err);
        CHECK(tps_layout_infer_sizes(l, ix, &err) == TPS_OK);
        CHECK_EQ_U64(tps_layout_sizes(l)->head_dim, 8);
        CHECK_EQ_U64(tps_layout_sizes(l)->heads, 8);
        CHECK_EQ_U64(tps_layout_sizes(l)->layers, 2);
        CHECK_EQ_U64(tps_layout_sizes(l)->experts, 0);
        tps_layout_free(l);
    }
    l = parse_ok("infer:\n  hidden: {tensor: 'model.layers.0.self_attn.*_proj.weight', dim: 0}\n"
                 "default: {split: replicate}\n");
    if (l) {
        tps_error_clear(&err);
        CHECK(tps_layout_infer_sizes(l, ix, &err) == TPS_EINVALID);
        CHECK_CONTAINS(err.msg, "inferring hidden (t.yaml:2:11): tensors disagree");
        tps_layout_free(l);
    }
    l = parse_ok("infer:\n  hidden: {tensor: model.norm.weight, dim: 1}\ndefault: {split: replicate}\n");
    if (l) {
        tps_error_clear(&err);
        CHECK(tps_layout_infer_sizes(l, ix, &err) == TPS_EINVALID);
        CHECK_CONTAINS(err.msg, "model.norm.weight has shape [64], without dim 1");
        tps_layout_free(l);
    }
done:
    tps_index_free(ix);
}

TEST(block_roles_name_fixture_tensors)
{
    /* Each preset's block roles, expanded for layer 1 (and expert 3), name tensors of the
     * matching fixture; only bias roles may be missing (Llama has none, Qwen2 has them). */
    for (size_t fi = 0; fi < sizeof fixtures / sizeof fixtures[0]; fi++) {
        const fixture *f = &fixtures[fi];
        tps_index *ix = open_fixture(f->dir);
        tps_layout *l = NULL;
        tps_error err;
        tps_error_clear(&err);
        if (!ix || tps_layout_load_preset(f->preset, &l, &err) != TPS_OK) {
            tps_test_failed_now = 1;
            tps_index_free(ix);
            continue;
        }
        const tps_block *b = tps_layout_block(l);
        int found = 0;
        for (int r = 0; b && r < TPS_ROLE_COUNT; r++) {
            if (!b->role[r]) continue;
            bool expert = b->expert_prefix &&
                          (r == TPS_ROLE_GATE_W || r == TPS_ROLE_UP_W || r == TPS_ROLE_DOWN_W);
            char name[512], *o = name;
            const char *parts[3] = {b->layer_prefix, expert ? b->expert_prefix : "", b->role[r]};
            for (int k = 0; k < 3; k++)
                for (const char *c = parts[k]; *c;) {
                    if (strncmp(c, "{layer}", 7) == 0) o += sprintf(o, "1"), c += 7;
                    else if (strncmp(c, "{expert}", 8) == 0) o += sprintf(o, "3"), c += 8;
                    else *o++ = *c++;
                }
            *o = '\0';
            bool bias = ends_with(tps_block_role_name((tps_block_role)r), "bias");
            if (tps_index_find(ix, name)) found++;
            else if (!bias) {
                printf("#   %s: role %s names %s, not in the fixture\n", f->dir, tps_block_role_name((tps_block_role)r), name);
                tps_test_failed_now = 1;
            }
        }
        CHECK(found >= 6);
        tps_layout_free(l);
        tps_index_free(ix);
    }
}

TEST(presets_parse_and_keep_their_text)
{
    int n = 0;
    for (const tps_preset *p = tps_presets; p->name; p++, n++) {
        tps_layout *l = NULL;
        tps_error err;
        tps_error_clear(&err);
        CHECK(tps_layout_load_preset(p->name, &l, &err) == TPS_OK);
        if (n) CHECK(strcmp(p[-1].name, p->name) < 0); /* in name order, each once */
        if (l) {
            CHECK_STR(tps_layout_text(l), p->yaml);
            CHECK(tps_layout_description(l) != NULL);
            CHECK(tps_layout_block(l) != NULL);
        }
        tps_layout_free(l);
    }
    CHECK(n >= 6);
    tps_layout *l = NULL;
    tps_error err;
    tps_error_clear(&err);
    CHECK(tps_layout_load_preset("llam", &l, &err) == TPS_EARG);
    /* every preset listed, in name order (the table's order, checked above) */
    char want[1024] = "unknown preset 'llam' (presets: ";
    for (const tps_preset *p = tps_presets; p->name; p++) {
        strcat(want, p->name);
        strcat(want, p[1].name ? ", " : ")");
    }
    CHECK_CONTAINS(err.msg, want);
    CHECK_CONTAINS(err.msg, ", llama, ");
    tps_error_clear(&err);
    CHECK(tps_layout_load_file("/nonexistent/x.yaml", &l, &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "/nonexistent/x.yaml: cannot open layout");
}

int main(void)
{
    RUN(glob_components_and_alternatives);
    RUN(glob_matches_regex_translation);
    RUN(expressions_evaluate_exactly);
    RUN(expressions_match_tree_evaluation);
    RUN(yaml_errors_carry_line_and_column);
    RUN(rules_resolve_dims_units_and_segments);
    RUN(presets_partition_every_fixture_tensor);
    RUN(presets_rule_match_counts);
    RUN(config_json_sizes_and_block);
    RUN(config_json_errors_and_priority);
    RUN(infer_sizes_from_shapes);
    RUN(block_roles_name_fixture_tensors);
    RUN(presets_parse_and_keep_their_text);
    return tps_test_done();
}
