/* Names of the block description's enums as written in a layout's `block:` section.  The
 * role names are the keys of `block.roles`; their meaning is documented with the schema at
 * the top of lib/layout.c. */
#include <string.h>

#include "layout_int.h"

static const char *const kind_names[] = {"llama", "gpt2", "neox", "mixtral"};

static const char *const role_names[TPS_ROLE_COUNT] = {
    [TPS_ROLE_ATTN_NORM_W] = "attn_norm",     [TPS_ROLE_ATTN_NORM_B] = "attn_norm_bias",
    [TPS_ROLE_Q_W] = "q_proj",                [TPS_ROLE_Q_B] = "q_bias",
    [TPS_ROLE_K_W] = "k_proj",                [TPS_ROLE_K_B] = "k_bias",
    [TPS_ROLE_V_W] = "v_proj",                [TPS_ROLE_V_B] = "v_bias",
    [TPS_ROLE_QKV_W] = "qkv_proj",            [TPS_ROLE_QKV_B] = "qkv_bias",
    [TPS_ROLE_O_W] = "o_proj",                [TPS_ROLE_O_B] = "o_bias",
    [TPS_ROLE_MLP_NORM_W] = "mlp_norm",       [TPS_ROLE_MLP_NORM_B] = "mlp_norm_bias",
    [TPS_ROLE_GATE_W] = "gate_proj",          [TPS_ROLE_UP_W] = "up_proj",
    [TPS_ROLE_GATE_UP_W] = "gate_up_proj",    [TPS_ROLE_FC_W] = "fc",
    [TPS_ROLE_FC_B] = "fc_bias",              [TPS_ROLE_DOWN_W] = "down_proj",
    [TPS_ROLE_DOWN_B] = "down_bias",          [TPS_ROLE_ROUTER_W] = "router",
};

static const char *const norm_names[] = {"rms", "layer"};
static const char *const act_names[] = {"silu", "gelu_tanh", "gelu_erf"};
static const char *const rope_names[] = {"none", "half", "interleaved"};

#define NAMES(a) (a), (int)(sizeof(a) / sizeof((a)[0]))

static int lookup(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

static const char *name_of(int v, const char *const *names, int n)
{
    return v >= 0 && v < n ? names[v] : "?";
}

const char *tps_block_kind_name(tps_block_kind k) { return name_of((int)k, NAMES(kind_names)); }
const char *tps_block_role_name(tps_block_role r) { return name_of((int)r, NAMES(role_names)); }
const char *tps_norm_name(tps_norm_kind k) { return name_of((int)k, NAMES(norm_names)); }
const char *tps_act_name(tps_act_kind k) { return name_of((int)k, NAMES(act_names)); }
const char *tps_rope_name(tps_rope_style r) { return name_of((int)r, NAMES(rope_names)); }

int tps_block_kind_lookup(const char *s) { return lookup(s, NAMES(kind_names)); }
int tps_block_role_lookup(const char *s) { return lookup(s, NAMES(role_names)); }
int tps_norm_lookup(const char *s) { return lookup(s, NAMES(norm_names)); }
int tps_act_lookup(const char *s) { return lookup(s, NAMES(act_names)); }
int tps_rope_lookup(const char *s) { return lookup(s, NAMES(rope_names)); }

int tps_act_from_hf(const char *s)
{
    /* transformers/activations.py ACT2FN: "gelu" is the exact erf form; the "new", "fast"
     * and "pytorch_tanh" variants are the tanh approximation. */
    static const struct {
        const char *hf;
        tps_act_kind act;
    } map[] = {
        {"silu", TPS_ACT_SILU},           {"swish", TPS_ACT_SILU},
        {"gelu", TPS_ACT_GELU_ERF},       {"gelu_python", TPS_ACT_GELU_ERF},
        {"gelu_new", TPS_ACT_GELU_TANH},  {"gelu_fast", TPS_ACT_GELU_TANH},
        {"gelu_pytorch_tanh", TPS_ACT_GELU_TANH},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(s, map[i].hf) == 0) return (int)map[i].act;
    return -1;
}
