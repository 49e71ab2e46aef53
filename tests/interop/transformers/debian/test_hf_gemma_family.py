"""Truth from outside for Gemma and Gemma 2: Hugging Face transformers (4.46, torch 1.13 tier).

Each case builds a tiny model with transformers' own classes (GemmaConfig, Gemma2Config;
random weights under torch.manual_seed, norms and biases included, nothing downloaded), saves
it with save_pretrained (safetensors, config.json beside it), splits it with auto-detection
(no --preset: the preset comes from config.json's architectures) at every legal tp of 1, 2,
4, 8, and then:

  * runs the whole model the tensor-parallel way in torch, fed only each rank's shard file:
    vocabulary-parallel embedding lookup summed over ranks and scaled by sqrt(hidden) (in
    float32, as transformers casts it), in every layer each rank's attention and MLP partial
    sums from the heads and intermediate columns its slices hold, summed (the all-reduce),
    then Gemma 2's post-norms on every rank's copy; (1 + w) RMSNorm, GeGLU with tanh GELU,
    scores scaled by query_pre_attn_scalar^-0.5 and soft-capped before the causal mask, a
    sliding window on the even layers; the final norm, the tied (or untied) vocabulary-parallel
    head gathered with its padding dropped, the final logits soft-capped.  The logits must
    equal transformers' forward of the full model (attn_implementation="eager") within 1e-4;
  * requires `tpshard verify SET --source SRC --layer all` and `--whole-model` to exit 0, and
    the whole-model pass's own logits (--dump-logits: its float64 reference and its ranks'
    gathered float32 logits) to equal transformers' within 1e-4;
  * compares verify's float64 layer reference (--dump-reference) with transformers' own
    decoder layer in float64, which checks the C math (norm offset, soft-capping, scale,
    window, sandwich norms) against the library.

The Gemma 2 cases use a window of 4 over 16 positions and caps small enough to bind, and the
test shows each matters (the forward without it misses transformers' logits).

The test can fail: two wrong layouts (K/V heads dealt round-robin to the ranks; gate_proj's
columns in another order than up_proj's) give shard sets whose bytes are intact (`tpshard
check` passes) and whose shapes are right, but the torch forward differs from transformers'
and `tpshard verify` (--layer all and --whole-model) exits 1.

Skips loudly when transformers cannot be imported (tests/interop/setup.sh installs 4.46.3).
"""
import os
import sys

import torch

import hf_tier as hf
from hf_tier import IDS, attend, causal_mask, gather_logits, linear, qkv_heads, report, vocab_embed

# head_dim 16 where hidden / heads is 8; 2 KV heads (replicated at tp 4 and 8)
BASE = dict(vocab_size=100, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=64, rms_norm_eps=1e-6)
G2 = dict(BASE, num_hidden_layers=4, query_pre_attn_scalar=24, sliding_window=4, attn_logit_softcapping=1.5,
          final_logit_softcapping=2.5)


def cases():
    from transformers import Gemma2Config, GemmaConfig
    return [
        ("gemma", GemmaConfig(**BASE)),  # tied embedding
        ("gemma-mqa-bias", GemmaConfig(**dict(BASE, num_key_value_heads=1, head_dim=32, attention_bias=True))),
        ("gemma2", Gemma2Config(**G2)),
        ("gemma2-untied-bias", Gemma2Config(**dict(G2, tie_word_embeddings=False, attention_bias=True))),
    ]


def build(cfg, seed, path):
    """Gemma's norms scale by (1 + w): drawn around zero, as its biases."""
    return hf.build(cfg, seed, path, norm=(0, 0.3), bias=0.3)


def legal_tps(cfg):
    return hf.legal_tps(cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size)


def gemma_rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)


def is_gemma2(cfg):
    return cfg.model_type == "gemma2"


def mask(cfg, layer, n, dtype=torch.float32, window=True):
    """transformers 4.46's additive mask: causal, and on Gemma 2's even layers only the last
    sliding_window positions."""
    m = causal_mask(n, dtype)
    if window and is_gemma2(cfg) and layer % 2 == 0:
        m = m.masked_fill(torch.ones(n, n, dtype=torch.bool).tril(-cfg.sliding_window), float("-inf"))
    return m


def softcap(x, c):
    return torch.tanh(x / c) * c if c else x


def tp_forward(ranks, cfg, ids, off=()):
    """The whole model from the ranks' slices alone; `off` names features to leave out (to
    show that each one matters)."""
    n, H, hd, eps = ids.shape[0], cfg.hidden_size, cfg.head_dim, cfg.rms_norm_eps
    g2 = is_gemma2(cfg)
    cos, sin = hf.rope_tables(n, hd, cfg.rope_theta)
    x = vocab_embed(ranks, "model.embed_tokens.weight", ids, H)
    x = x * torch.tensor(H ** 0.5, dtype=x.dtype)
    scale = (cfg.query_pre_attn_scalar if g2 else hd) ** -0.5
    acap = cfg.attn_logit_softcapping if g2 and "attn_softcap" not in off else None
    for layer in range(cfg.num_hidden_layers):
        p = "model.layers.%d." % layer
        m = mask(cfg, layer, n, window="window" not in off)
        attn = torch.zeros(n, H)
        for R in ranks:
            xn = gemma_rms(x, R[p + "input_layernorm.weight"], eps)
            q, k, v = qkv_heads(xn, R, p + "self_attn.", hd)
            attn += attend(q, k, v, cos, sin, m, scale, acap) @ R[p + "self_attn.o_proj.weight"].T  # all-reduce: a sum
        if p + "self_attn.o_proj.bias" in ranks[0]:
            attn += ranks[0][p + "self_attn.o_proj.bias"]  # once, after the sum
        if g2:  # every rank, on its copy of the sum
            attn = gemma_rms(attn, ranks[0][p + "post_attention_layernorm.weight"], eps)
        x = x + attn
        mlp = torch.zeros(n, H)
        norm = p + ("pre_feedforward_layernorm.weight" if g2 else "post_attention_layernorm.weight")
        for R in ranks:
            hn = gemma_rms(x, R[norm], eps)
            a = torch.nn.functional.gelu(linear(hn, R, p + "mlp.gate_proj"), approximate="tanh")
            mlp += (a * linear(hn, R, p + "mlp.up_proj")) @ R[p + "mlp.down_proj.weight"].T
        if g2:
            mlp = gemma_rms(mlp, ranks[0][p + "post_feedforward_layernorm.weight"], eps)
        x = x + mlp
    x = gemma_rms(x, ranks[0]["model.norm.weight"], eps)
    head = "lm_head.weight" if "lm_head.weight" in ranks[0] else "model.embed_tokens.weight"  # tied
    logits = gather_logits(ranks, x, head, cfg.vocab_size)
    return softcap(logits, cfg.final_logit_softcapping if g2 and "final_softcap" not in off else None)


def check_reference(name, model, cfg, shards):
    """verify's float64 layer reference against transformers' decoder layer in float64."""
    layers, m64 = hf.dumped_reference(name, model, cfg, shards, tokens=9)
    if layers is None:
        return False
    worst = 0.0
    for L in layers:
        x = torch.tensor(L["x"], dtype=torch.float64)[None]
        n = x.shape[1]
        layer = m64.model.layers[L["layer"]]
        msk = mask(cfg, L["layer"], n, torch.float64)[None, None]
        with torch.no_grad():
            a = layer.self_attn(hidden_states=layer.input_layernorm(x), attention_mask=msk,
                                position_ids=torch.arange(n)[None])[0]
            if is_gemma2(cfg):
                a = layer.post_attention_layernorm(a)
                m = layer.post_feedforward_layernorm(layer.mlp(layer.pre_feedforward_layernorm(x + a)))
            else:
                m = layer.mlp(layer.post_attention_layernorm(x + a))
        worst = max(worst, hf.layer_error(L, a[0], m[0]))
    return report(worst < 1e-5, "%s: verify's float64 layer reference equals transformers' decoder layer "
                  "(worst rel err %.2g)" % (name, worst))


def wrong_layouts():
    """The gemma2 preset with one rule replaced: (name, yaml text, what it does wrong)."""
    mlp_rule = '  - match: "model.layers.*.mlp.{gate_proj,up_proj}.weight"\n    split: column\n    size: intermediate\n'
    return hf.wrong_layouts("gemma2", [
        ("kv-round-robin", hf.KV_RULE, hf.KV_ROUND_ROBIN, "K/V heads dealt round-robin"),
        ("gate-up-mismatched", mlp_rule, hf.gate_halves("model.layers.*.mlp", "intermediate", "weight"),
         "gate_proj columns not paired with up_proj's")])


def run_case(tmp, seed, name, cfg):
    src = os.path.join(tmp, name, "src")
    model = build(cfg, seed, src)
    want = hf.logits(model, IDS, use_cache=False)
    preset = "gemma2" if is_gemma2(cfg) else "gemma"
    done = hf.split_and_compare(tmp, name, src, want, lambda R: tp_forward(R, cfg, IDS), legal_tps(cfg),
                                detect="preset %s," % preset,
                                dump_logits=lambda ids: hf.logits(model, ids, use_cache=False))
    if not done:
        return
    last = os.path.join(tmp, name, "tp%d" % done[-1])
    check_reference(name, model, cfg, last)
    if is_gemma2(cfg):  # each Gemma 2 feature binds on this model: leaving it out misses
        ranks = hf.load_ranks(last)
        hf.features_matter(name, "the sliding window and both soft-caps",
                           lambda f: tp_forward(ranks, cfg, IDS, off=(f,)), want,
                           ("window", "attn_softcap", "final_softcap"))


def body(tmp):
    for seed, (name, cfg) in enumerate(cases()):
        run_case(tmp, seed, name, cfg)

    # Wrong cuts: caught by the forward and by verify, not by the byte checks.
    from transformers import Gemma2Config
    cfg = Gemma2Config(**dict(G2, num_hidden_layers=2, num_key_value_heads=4))
    src = os.path.join(tmp, "wrong", "src")
    want = hf.logits(build(cfg, 99, src), IDS, use_cache=False)
    for wname, text, what in wrong_layouts():
        hf.wrong_cut(os.path.join(tmp, "wrong"), wname, what, src, text, lambda R: tp_forward(R, cfg, IDS), want)


def main():
    return hf.main("hf_gemma_family", body)


if __name__ == "__main__":
    sys.exit(main())
