"""Truth from outside for the Llama family (Llama, Mistral, Qwen2): Hugging Face transformers.

Each case builds a tiny model with transformers' own classes (LlamaConfig, MistralConfig,
Qwen2Config; random weights under torch.manual_seed, nothing downloaded), saves it with
save_pretrained (safetensors), splits it with `tpshard split --preset llama` at every legal
tp of 1, 2, 4, 8, and then:

  * runs the whole model the tensor-parallel way in torch, fed only each rank's shard file
    (the rank read from the file's own tp_rank metadata): vocabulary-parallel embedding
    lookup summed over ranks, in every layer each rank's attention and MLP partial sums from
    the heads and intermediate columns its slices hold, all-reduced (summed), row-parallel
    biases added once after the sum, the final norm, the vocabulary-parallel lm_head (or the
    tied embedding) gathered and its padding dropped; the logits must equal transformers'
    forward of the full model within 1e-4 (float32);
  * requires `tpshard verify SET --source SRC --layer all` to exit 0;
  * compares verify's float64 reference (--dump-reference, of the set alone, so with the
    config keys its manifest recorded) with transformers' own decoder layer in float64, which checks verify's rope_scaling, head_dim and bias math against the
    library (transformers computes cos/sin in float32, hence the 1e-5 bound), and shows that
    the unscaled rotary frequencies would not pass that bound.

Variants: attention_bias, mlp_bias, head_dim != hidden / heads, GQA with tp above the KV
heads, MQA, tied embeddings, each rope_scaling type (linear, dynamic past
max_position_embeddings, llama3 with a blended band, yarn), Mistral, Qwen2.

The test can fail: two wrong layouts (K/V heads dealt round-robin to the ranks; gate_proj's
columns in another order than up_proj's) give shard sets whose bytes are intact (`tpshard
check` passes) and whose shapes are right, but the torch forward differs from transformers'
and `tpshard verify` exits 1.

Skips loudly when transformers cannot be imported (tests/interop/setup.sh installs 4.46.3).
"""
import copy
import os
import sys

import torch

import hf_tier as hf
from hf_tier import attend, causal_mask, gather_logits, linear, qkv_heads, report, rms, vocab_embed
# What tests/interop/transformers/torch2/torch2_gpt_oss.py imports from here, now hf_tier's.
from hf_tier import load_ranks, rotary, rotate_half  # noqa: F401

hf_logits = hf.logits

BASE = dict(vocab_size=100, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6)


def cases():
    from transformers import LlamaConfig, MistralConfig, Qwen2Config
    L = lambda **kw: LlamaConfig(**dict(BASE, **kw))
    return [
        ("llama-gqa", L()),  # 2 KV heads: replicated at tp 4 and 8
        ("llama-mqa", L(num_key_value_heads=1)),
        ("llama-attention-bias", L(attention_bias=True)),
        ("llama-mlp-bias", L(mlp_bias=True)),
        ("llama-head-dim-16", L(head_dim=16, attention_bias=True)),  # hidden / heads is 8
        ("llama-tied", L(tie_word_embeddings=True)),
        ("llama-rope-linear", L(rope_scaling={"rope_type": "linear", "factor": 2.0})),
        # max_position_embeddings 4 < the 7 and 16 positions run: the base grows
        ("llama-rope-dynamic", L(rope_scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=4)),
        # wavelengths 6.3, 63, 628, 6283 against 64/4 and 64/1: one kept, one blended, two scaled
        ("llama-rope-llama3", L(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                              "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                                max_position_embeddings=512)),
        ("llama-rope-yarn", L(rope_scaling={"rope_type": "yarn", "factor": 4.0})),
        ("mistral", MistralConfig(**BASE)),
        ("qwen2-tied", Qwen2Config(**dict(BASE, tie_word_embeddings=True))),  # q/k/v biases
    ]


def legal_tps(cfg):
    return hf.legal_tps(cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size)


def attention(ranks, cfg, x, p, cos, sin, causal):
    """Layer p's attention from the ranks' slices: each rank's heads (with Qwen3's per-head
    q/k norms before RoPE where the set has them), its o_proj partial sums summed (the
    all-reduce), o_proj's bias added once after the sum."""
    hd, eps = hf.head_dim(cfg), cfg.rms_norm_eps
    attn = torch.zeros(x.shape[0], cfg.hidden_size)
    for R in ranks:
        xn = rms(x, R[p + "input_layernorm.weight"], eps)
        q, k, v = qkv_heads(xn, R, p + "self_attn.", hd)
        if p + "self_attn.q_norm.weight" in R:
            q, k = rms(q, R[p + "self_attn.q_norm.weight"], eps), rms(k, R[p + "self_attn.k_norm.weight"], eps)
        attn += attend(q, k, v, cos, sin, causal) @ R[p + "self_attn.o_proj.weight"].T
    if p + "self_attn.o_proj.bias" in ranks[0]:
        attn += ranks[0][p + "self_attn.o_proj.bias"]
    return attn


def dense_mlp(mlp, R, cfg, hn, layer, p):
    """Adds a rank's SwiGLU partial sum (its gate/up columns, down_proj rows) to mlp."""
    a = torch.nn.functional.silu(linear(hn, R, p + "mlp.gate_proj")) * linear(hn, R, p + "mlp.up_proj")
    mlp += a @ R[p + "mlp.down_proj.weight"].T


def tp_forward(ranks, cfg, ids, cos, sin, rank_mlp=dense_mlp):
    """The whole model from the ranks' slices alone.  A rank's q/k/v slices hold its query
    heads and the KV heads they read (the TP convention: local query head j reads local KV
    head j * kv_local // q_local); its gate/up/down slices the same intermediate columns
    (rank_mlp(mlp, R, cfg, hn, layer, p) adds each rank's MLP partial sum)."""
    n, H = ids.shape[0], cfg.hidden_size
    eps = cfg.rms_norm_eps
    x = vocab_embed(ranks, "model.embed_tokens.weight", ids, H)
    causal = causal_mask(n)
    for layer in range(cfg.num_hidden_layers):
        p = "model.layers.%d." % layer
        x = x + attention(ranks, cfg, x, p, cos, sin, causal)
        mlp = torch.zeros(n, H)
        for R in ranks:
            rank_mlp(mlp, R, cfg, rms(x, R[p + "post_attention_layernorm.weight"], eps), layer, p)
        if p + "mlp.down_proj.bias" in ranks[0]:
            mlp += ranks[0][p + "mlp.down_proj.bias"]
        x = x + mlp
    x = rms(x, ranks[0]["model.norm.weight"], eps)
    head = "lm_head.weight" if "lm_head.weight" in ranks[0] else "model.embed_tokens.weight"  # tied
    return gather_logits(ranks, x, head, cfg.vocab_size)


def check_reference(name, model, cfg, shards):
    """verify's float64 layer reference against transformers' decoder layer in float64.  The
    set is verified alone: its reference and config keys (rope_scaling among them) are the
    ones its manifest recorded at split time."""
    layers, m64 = hf.dumped_reference(name, model, cfg, shards)
    if layers is None:
        return False
    plain = None
    if getattr(cfg, "rope_scaling", None):
        plain = copy.deepcopy(cfg)
        plain.rope_scaling = None
    worst = worst_plain = 0.0
    for L in layers:
        x = torch.tensor(L["x"], dtype=torch.float64)
        n = x.shape[0]
        mask = causal_mask(n, torch.float64)[None, None]
        layer = m64.model.layers[L["layer"]]
        for c in ([None, plain] if plain is not None else [None]):
            kw = {}
            if hasattr(m64.model, "rotary_emb"):  # else the attention computes its own
                cos, sin = hf.rotary(m64, n, c)
                kw["position_embeddings"] = (cos[None].double(), sin[None].double())
            with torch.no_grad():
                a = layer.self_attn(hidden_states=layer.input_layernorm(x[None]), attention_mask=mask,
                                    position_ids=torch.arange(n)[None], **kw)[0][0]
                m = layer.mlp(layer.post_attention_layernorm(x + a))
            e = hf.layer_error(L, a, m)
            if c is None:
                worst = max(worst, e)
            else:
                worst_plain = max(worst_plain, e)
    extra = ""
    ok = worst < 1e-5
    if plain is not None:
        ok = ok and worst_plain > 1e-3
        extra = "; with unscaled rotary frequencies it would be %.2g" % worst_plain
    return report(ok, "%s: verify's float64 layer reference equals transformers' decoder layer (worst rel err %.2g%s)"
                  % (name, worst, extra))


def wrong_layouts():
    """The llama preset with one rule replaced: (name, yaml text, what it does wrong)."""
    mlp_rule = ('  - match: "model.layers.*.mlp.{gate_proj,up_proj}.{weight,bias}"\n    split: column\n'
                '    size: intermediate\n')
    return hf.wrong_layouts("llama", [
        ("kv-round-robin", hf.KV_RULE, hf.KV_ROUND_ROBIN, "K/V heads dealt round-robin"),
        ("gate-up-mismatched", mlp_rule, hf.gate_halves("model.layers.*.mlp", "intermediate", "{weight,bias}"),
         "gate_proj columns not paired with up_proj's")])


def body(tmp):
    ids = hf.IDS
    for seed, (name, cfg) in enumerate(cases()):
        src = os.path.join(tmp, name, "src")
        model = hf.build(cfg, seed, src)
        cos, sin = hf.rotary(model, len(ids))
        done = hf.split_and_compare(tmp, name, src, hf.logits(model, ids), lambda R: tp_forward(R, cfg, ids, cos, sin),
                                    legal_tps(cfg), split_args=("--preset", "llama", "-q"), verifies=hf.verify_layers)
        check_reference(name, model, cfg, os.path.join(tmp, name, "tp%d" % done[-1]) if done else tmp)

    # Wrong cuts: caught by the forward and by verify, not by the byte checks.
    from transformers import LlamaConfig
    cfg = LlamaConfig(**dict(BASE, num_key_value_heads=4, attention_bias=True, mlp_bias=True))
    src = os.path.join(tmp, "wrong", "src")
    model = hf.build(cfg, 99, src)
    want = hf.logits(model, ids)
    cos, sin = hf.rotary(model, len(ids))
    for wname, text, what in wrong_layouts():
        hf.wrong_cut(os.path.join(tmp, "wrong"), wname, what, src, text, lambda R: tp_forward(R, cfg, ids, cos, sin),
                     want, verifies=(("verify --source", True, ("--layer", "all")),
                                     ("verify alone", False, ("--layer", "all"))))


def main():
    return hf.main("hf_llama_family", body)


if __name__ == "__main__":
    sys.exit(main())
