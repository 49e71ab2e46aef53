"""Truth from outside for GLM-4.5 / 4.6 (Glm4MoeForCausalLM): Hugging Face transformers 4.57
(the torch-2 tier; 4.46 has no GLM-4.5).

Each case builds a tiny model with transformers' Glm4MoeConfig (random weights, norms, q/k/v
biases and the router's e_score_correction_bias included; nothing downloaded), saves it with
save_pretrained, splits it with auto-detection (config.json's architectures) at every legal tp
of 1, 2, 4, 8, and then:

  * runs the whole model the tensor-parallel way in torch, fed only each rank's shard file:
    vocabulary-parallel embedding; per layer each rank's query heads and the KV heads they
    read (with the per-head q/k RMSNorm where use_qk_norm), RoPE on the first
    partial_rotary_factor of each head only (rotate-half), its o_proj partial sum; a dense
    first layer's columns, or the routed experts its tokens picked (DeepSeek-V3's sigmoid
    grouped routing, torch2_deepseek.route) and the shared experts' columns; partial sums
    summed; the vocabulary-parallel lm_head gathered.  The logits must equal transformers'
    within 1e-4 (float32);
  * requires `tpshard check`, `verify --source --layer all` and `verify --whole-model` to exit
    0, and verify's float64 reference of every layer to equal transformers' decoder layer.

Variants: QK norm with partial rotary 0.5, attention biases, two expert groups; no QK norm with
partial rotary 0.25, norm_topk_prob off.  The test can fail: a layout that deals the KV heads
round-robin (each rank not its query heads' KV heads) or pairs the experts' gate and up
columns wrongly passes `tpshard check` and fails the forward and verify.
"""
import os
import sys

import torch

import hf_tier as hf
from hf_tier import IDS, causal_mask, gather_logits, qkv_heads, attend, rms, rotate_half, vocab_embed
from torch2_deepseek import check_reference, checks, moe_mlp

BASE = dict(vocab_size=100, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
            num_attention_heads=8, num_key_value_heads=2, head_dim=16, n_routed_experts=4, num_experts_per_tok=2,
            n_shared_experts=1, first_k_dense_replace=1, max_position_embeddings=64, rms_norm_eps=1e-6,
            routed_scaling_factor=2.5)


def cases():
    from transformers import Glm4MoeConfig
    G = lambda **kw: Glm4MoeConfig(**dict(BASE, **kw))
    return [
        ("glm4-moe", G(use_qk_norm=True, attention_bias=True, partial_rotary_factor=0.5, n_group=2, topk_group=1,
                       norm_topk_prob=True)),
        ("glm4-moe-plain", G(use_qk_norm=False, attention_bias=False, partial_rotary_factor=0.25, n_group=1,
                             topk_group=1, norm_topk_prob=False)),
    ]


def legal_tps(cfg):
    return hf.legal_tps(cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size,
                        cfg.moe_intermediate_size)


def positions(model, n):
    """transformers' cos/sin ([n, rotary dims]): the rotary module covers only the rotating part."""
    cos, sin = model.model.rotary_emb(torch.zeros(1, n, 1), torch.arange(n)[None])
    return cos[0], sin[0]


def tp_forward(ranks, cfg, ids, cos, sin):
    """The whole model from the ranks' slices alone."""
    n, H, eps, hd = ids.shape[0], cfg.hidden_size, cfg.rms_norm_eps, cfg.head_dim
    rd = cos.shape[-1]
    causal = causal_mask(n)
    ones, zeros = torch.ones(n, hd), torch.zeros(n, hd)
    x = vocab_embed(ranks, "model.embed_tokens.weight", ids, H)
    for layer in range(cfg.num_hidden_layers):
        p = "model.layers.%d." % layer
        a = p + "self_attn."
        attn = torch.zeros(n, H)
        for R in ranks:
            q, k, v = qkv_heads(rms(x, R[p + "input_layernorm.weight"], eps), R, a, hd)
            if a + "q_norm.weight" in R:
                q, k = rms(q, R[a + "q_norm.weight"], eps), rms(k, R[a + "k_norm.weight"], eps)
            # RoPE on the first rd dims of each head; attend then rotates nothing (cos 1, sin 0)
            q, k = [torch.cat((t[..., :rd] * cos + rotate_half(t[..., :rd]) * sin, t[..., rd:]), -1) for t in (q, k)]
            attn += attend(q, k, v, ones, zeros, causal) @ R[a + "o_proj.weight"].T
        x = x + attn
        x = x + moe_mlp(ranks, cfg, p, layer, x, eps)
    x = rms(x, ranks[0]["model.norm.weight"], eps)
    return gather_logits(ranks, x, "lm_head.weight", cfg.vocab_size)


CLAIM = ("split, check and verify pass, and the torch TP forward from the shard files equals transformers' logits "
         "at tp {tps} (max abs difference {worst} <= {tol})")


def wrong_layouts():
    experts = ('  - match: "model.layers.*.mlp.experts.*.{gate_proj,up_proj}.weight"\n    split: column\n'
               '    size: moe_intermediate\n')
    return hf.wrong_layouts("glm4_moe", [
        ("kv-round-robin", hf.KV_RULE, hf.KV_ROUND_ROBIN, "k/v heads dealt round-robin, not each rank its query heads' KV head"),
        ("experts-gate-up", experts, hf.gate_halves("model.layers.*.mlp.experts.*", "moe_intermediate", "weight"),
         "the routed experts' gate_proj columns not paired with their up_proj's")])


def body(tmp):
    for seed, (name, cfg) in enumerate(cases()):
        src = os.path.join(tmp, name, "src")
        model = hf.build(cfg, seed, src, buffers={"e_score_correction_bias": 0.1})
        cos, sin = positions(model, len(IDS))
        done = hf.split_and_compare(tmp, name, src, hf.logits(model, IDS), lambda R: tp_forward(R, cfg, IDS, cos, sin),
                                    legal_tps(cfg), detect="preset glm4_moe", verifies=checks, claim=CLAIM)
        if done:
            check_reference(name, model, cfg, os.path.join(tmp, name, "tp%d" % done[-1]))

    from transformers import Glm4MoeConfig  # 4 KV heads: two a rank at tp 2, dealt round-robin by the wrong cut
    cfg = Glm4MoeConfig(**dict(BASE, num_key_value_heads=4, use_qk_norm=True, attention_bias=True, n_group=2,
                               topk_group=1))
    src = os.path.join(tmp, "wrong", "src")
    model = hf.build(cfg, 99, src, buffers={"e_score_correction_bias": 0.1})
    cos, sin = positions(model, len(IDS))
    want = hf.logits(model, IDS)
    for wname, text, what in wrong_layouts():
        hf.wrong_cut(os.path.join(tmp, "wrong"), wname, what, src, text, lambda R: tp_forward(R, cfg, IDS, cos, sin),
                     want, verifies=(("verify --source", True, ("--layer", "all")),))


def main():
    return hf.main("torch2_glm4_moe", body, needs="Glm4MoeConfig")


if __name__ == "__main__":
    sys.exit(main())
