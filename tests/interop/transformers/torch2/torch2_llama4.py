"""Truth from outside for Llama 4 text (Llama4ForCausalLM): Hugging Face transformers 4.57 (the
torch-2 tier; 4.46 has no Llama 4).

Each case builds a tiny model with transformers' Llama4TextConfig (random weights; nothing
downloaded), saves it with save_pretrained, splits it with auto-detection (config.json's
architectures) at every legal tp of 1, 2, 4, 8, and then:

  * runs the whole model the tensor-parallel way in torch, fed only each rank's shard file:
    vocabulary-parallel embedding; per layer each rank's query heads and the KV heads they
    read; on RoPE layers Meta's interleaved RoPE (complex pairs), then the per-head L2 norm of
    q and k (use_qk_norm) and chunked attention (attention_chunk_size); on NoPE layers
    (no_rope_layers) no RoPE and q scaled by the attention temperature (floor_scale,
    attn_scale); o_proj partial sums; a dense layer's (intermediate_size_mlp) columns, or the
    replicated router's top-k whose sigmoids multiply the chosen experts' input, each expert's
    [gate_r | up_r] halves of the fused gate_up_proj and its rows of down_proj, plus the shared
    expert's columns; partial sums summed; the vocabulary-parallel lm_head gathered.  The
    logits must equal transformers' within 1e-4 (float32);
  * requires `tpshard check`, `verify --source --layer all` and `verify --whole-model` to exit
    0, verify --whole-model's own reference and tensor-parallel logits (12 tokens: past the
    8-long chunk and the temperature's floor_scale) to equal transformers', and verify's
    float64 reference of every layer to equal transformers' decoder layer.

The multimodal Llama4ForConditionalGeneration (preset llama4_mm) at tp 2: check and verify
pass and verify --whole-model's logits equal transformers'.

Variants: top-1 routing, MoE every other layer (interleave_moe_layer_step 2), a NoPE layer,
QK norm; top-2 routing, every layer MoE, no QK norm.  The test can fail: a layout that cuts the
fused gate_up_proj as one block (rank 0 all gates, rank 1 all ups) or deals the KV heads
round-robin passes `tpshard check` and fails the forward and verify.
"""
import json
import os
import sys

import torch

import hf_tier as hf
from hf_tier import IDS, gather_logits, qkv_heads, report, rms, tpshard, vocab_embed
from torch2_deepseek import swiglu

BASE = dict(vocab_size=100, hidden_size=64, intermediate_size=32, intermediate_size_mlp=96, num_hidden_layers=4,
            num_attention_heads=8, num_key_value_heads=2, head_dim=16, num_local_experts=4,
            max_position_embeddings=64, rms_norm_eps=1e-5, rope_scaling=None, attention_chunk_size=8,
            attn_temperature_tuning=True, floor_scale=4, attn_scale=0.5, no_rope_layer_interval=4)


def cases():
    from transformers import Llama4TextConfig
    C = lambda **kw: Llama4TextConfig(**dict(BASE, **kw))
    return [
        ("llama4", C(num_experts_per_tok=1, interleave_moe_layer_step=2, use_qk_norm=True)),
        ("llama4-top2", C(num_experts_per_tok=2, interleave_moe_layer_step=1, use_qk_norm=False)),
    ]


def legal_tps(cfg):
    return hf.legal_tps(cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size,
                        cfg.intermediate_size_mlp)


def freqs(model, n):
    """transformers' freqs_cis ([n, hd/2] complex) for positions 0..n-1."""
    return model.model.rotary_emb(torch.zeros(1, n, 1), torch.arange(n)[None])[0]


def rope(x, fc):
    """Meta's interleaved RoPE of x [heads, n, hd]: adjacent pairs as complex numbers."""
    c = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(c * fc).flatten(-2)


def masked(n, chunk):
    m = torch.full((n, n), float("-inf")).triu(1)
    if chunk:
        pos = torch.arange(n)
        m[(pos[:, None] // chunk) != (pos[None, :] // chunk)] = float("-inf")
    return m


def tp_forward(ranks, cfg, ids, fc):
    """The whole model from the ranks' slices alone."""
    n, H, eps, hd = ids.shape[0], cfg.hidden_size, cfg.rms_norm_eps, cfg.head_dim
    x = vocab_embed(ranks, "model.embed_tokens.weight", ids, H)
    temp = torch.log1p(torch.floor((torch.arange(n).float() + 1) / cfg.floor_scale)) * cfg.attn_scale + 1
    for layer in range(cfg.num_hidden_layers):
        p = "model.layers.%d." % layer
        a = p + "self_attn."
        use_rope = bool(cfg.no_rope_layers[layer])
        attn = torch.zeros(n, H)
        for R in ranks:
            q, k, v = qkv_heads(rms(x, R[p + "input_layernorm.weight"], eps), R, a, hd)
            if use_rope:
                q, k = rope(q, fc), rope(k, fc)
                if cfg.use_qk_norm:
                    q, k = [t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps) for t in (q, k)]
            elif cfg.attn_temperature_tuning:
                q = q * temp[None, :, None]
            kv_of = [j * k.shape[0] // q.shape[0] for j in range(q.shape[0])]
            s = q @ k[kv_of].transpose(1, 2) / hd ** 0.5
            w = torch.softmax(s + masked(n, cfg.attention_chunk_size if use_rope else 0), dim=-1)
            attn += (w @ v[kv_of]).transpose(0, 1).reshape(n, -1) @ R[a + "o_proj.weight"].T
        x = x + attn
        mlp = torch.zeros(n, H)
        f = p + "feed_forward."
        for R in ranks:
            hn = rms(x, R[p + "post_attention_layernorm.weight"], eps)
            if layer not in cfg.moe_layers:
                mlp += swiglu(hn, R, f[:-1])
                continue
            logits = hn @ R[f + "router.weight"].T
            top, idx = logits.topk(cfg.num_experts_per_tok, dim=-1)
            for e in range(cfg.num_local_experts):
                tok, slot = torch.where(idx == e)
                if len(tok):
                    xe = hn[tok] * top[tok, slot, None].sigmoid()  # the weight scales the input
                    g, u = (xe @ R[f + "experts.gate_up_proj"][e]).chunk(2, dim=-1)
                    mlp.index_add_(0, tok, (torch.nn.functional.silu(g) * u) @ R[f + "experts.down_proj"][e])
            mlp += swiglu(hn, R, f + "shared_expert")
        x = x + mlp
    x = rms(x, ranks[0]["model.norm.weight"], eps)
    return gather_logits(ranks, x, "lm_head.weight", cfg.vocab_size)


def check_reference(name, model, cfg, shards):
    """verify's float64 reference of every layer (7 tokens: one chunk) against transformers' own
    decoder layer in float64: its attention (RoPE or NoPE with temperature, QK L2 norm) and its
    feed_forward (dense, or router, experts and shared expert)."""
    layers, m64 = hf.dumped_reference(name, model, cfg, shards, args=("--layer", "all"))
    if layers is None:
        return False
    worst = 0.0
    for L in layers:
        x = torch.tensor(L["x"], dtype=torch.float64)
        n = x.shape[0]
        layer = m64.model.layers[L["layer"]]
        fc = m64.model.rotary_emb(x[None], torch.arange(n)[None])
        with torch.no_grad():
            a = layer.self_attn(hidden_states=layer.input_layernorm(x[None]), position_embeddings=fc,
                                attention_mask=masked(n, 0).double()[None, None],
                                cache_position=torch.arange(n))[0][0]
            hn = layer.post_attention_layernorm(x + a)
            m = layer.feed_forward(hn)
            m = m[0] if isinstance(m, tuple) else m
        worst = max(worst, hf.layer_error(L, a, m))
    return report(worst < 1e-5, "%s: verify's float64 reference of every layer equals transformers' decoder layer "
                  "(rel err %.2g)" % (name, worst))


CLAIM = ("split, check and verify pass, and the torch TP forward from the shard files equals transformers' logits "
         "at tp {tps} (max abs difference {worst} <= {tol})")


def checks(out, src, dump=None):
    return [("check", out)] + hf.verify_layers_and_whole(out, src, dump)


def wrong_layouts():
    gu = ('  - match: model.layers.*.feed_forward.experts.gate_up_proj\n    split: dim\n    dim: -1\n'
          '    segments: {gate: moe_intermediate, up: moe_intermediate}\n')
    gu_block = '  - match: model.layers.*.feed_forward.experts.gate_up_proj\n    split: dim\n    dim: -1\n'
    return hf.wrong_layouts("llama4", [
        ("kv-round-robin", hf.KV_RULE, hf.KV_ROUND_ROBIN, "k/v heads dealt round-robin, not each rank its query heads' KV head"),
        ("gate-up-block", gu, gu_block, "the fused gate_up_proj cut as one block: rank 0 the gates, rank 1 the ups")])


def multimodal(tmp):
    """Llama4ForConditionalGeneration (preset llama4_mm: the language model under
    language_model., its keys in config.json's text_config) at tp 2: check and verify pass, and
    verify --whole-model's reference and tensor-parallel logits equal transformers'."""
    from transformers import Llama4Config, Llama4ForConditionalGeneration, Llama4TextConfig, Llama4VisionConfig
    text = Llama4TextConfig(**dict(BASE, num_experts_per_tok=1, interleave_moe_layer_step=2, use_qk_norm=True))
    vision = Llama4VisionConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                image_size=28, patch_size=14, vision_output_dim=32, projector_input_dim=32,
                                projector_output_dim=32)
    src, out = os.path.join(tmp, "mm", "src"), os.path.join(tmp, "mm", "tp2")
    model = hf.build(Llama4Config(text_config=text, vision_config=vision), 7, src,
                     make=lambda c: Llama4ForConditionalGeneration(c))
    r = tpshard("split", src, "--tp", 2, "-o", out)
    if r.returncode != 0 or "preset llama4_mm" not in r.stderr:
        return report(False, "llama4-mm: split --tp 2 chooses preset llama4_mm", r.stderr)
    dump = os.path.join(tmp, "mm", "logits.json")
    runs = [tpshard("check", out, "-q"), tpshard("verify", out, "--source", src, "--layer", "all", "-q"),
            tpshard("verify", out, "--source", src, "--whole-model", "--tokens", 12, "--dump-logits", dump, "-q")]
    if any(v.returncode != 0 for v in runs):
        return report(False, "llama4-mm: check and verify exit 0 at tp 2", "\n".join(v.stdout + v.stderr for v in runs))
    d = json.load(open(dump))
    want = hf.logits(model, torch.tensor(d["tokens"])).double()
    worst = max(float((torch.tensor(d[w], dtype=torch.float64) - want).abs().max()) for w in ("reference", "ranks"))
    return report(worst <= hf.TOL, "llama4-mm: check and verify pass at tp 2, and verify --whole-model's reference and "
                  "tensor-parallel logits equal transformers' Llama4ForConditionalGeneration (max abs difference "
                  "%.2g <= %g)" % (worst, hf.TOL))


def body(tmp):
    for seed, (name, cfg) in enumerate(cases()):
        src = os.path.join(tmp, name, "src")
        model = hf.build(cfg, seed, src)
        fc = freqs(model, len(IDS))
        done = hf.split_and_compare(tmp, name, src, hf.logits(model, IDS), lambda R: tp_forward(R, cfg, IDS, fc),
                                    legal_tps(cfg), detect="preset llama4", verifies=checks, claim=CLAIM,
                                    dump_logits=lambda ids: hf.logits(model, ids))
        if done:
            check_reference(name, model, cfg, os.path.join(tmp, name, "tp%d" % done[-1]))
    multimodal(tmp)

    from transformers import Llama4TextConfig  # 4 KV heads: two a rank at tp 2, dealt round-robin by the wrong cut
    cfg = Llama4TextConfig(**dict(BASE, num_key_value_heads=4, num_experts_per_tok=1, use_qk_norm=True))
    src = os.path.join(tmp, "wrong", "src")
    model = hf.build(cfg, 99, src)
    fc = freqs(model, len(IDS))
    want = hf.logits(model, IDS)
    for wname, text, what in wrong_layouts():
        hf.wrong_cut(os.path.join(tmp, "wrong"), wname, what, src, text, lambda R: tp_forward(R, cfg, IDS, fc),
                     want, verifies=(("verify --source", True, ("--layer", "all")),))


def main():
    return hf.main("torch2_llama4", body, needs="Llama4TextConfig")


if __name__ == "__main__":
    sys.exit(main())
