"""Truth from outside for Qwen3-MoE: transformers' Qwen3MoeForCausalLM (torch-2 tier; 4.46
has no Qwen3).

As tests/interop/transformers/debian/test_hf_qwen2_moe.py, whose torch tensor-parallel forward it reuses: tiny
Qwen3MoeConfig models (random weights including norms and the per-head q_norm/k_norm,
head_dim 16 where hidden / heads is 8, 4 experts top-2, norm_topk_prob both ways, a dense
layer by mlp_only_layers), saved with save_pretrained, split by auto-detection at tp 1, 2,
4, 8; the forward from the shard files must equal transformers' logits within 1e-4 and
`tpshard verify --layer all` and `--whole-model` must pass.  A wrong cut (the experts'
gate_proj columns not paired with up_proj's) passes `tpshard check` and fails both.
"""
import os
import sys

import hf_tier as hf
from hf_tier import IDS, report, rotary, tpshard
from test_hf_qwen2_moe import run_cases, tp_forward

BASE = dict(vocab_size=100, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
            num_attention_heads=8, num_key_value_heads=2, head_dim=16, num_experts=4, num_experts_per_tok=2,
            max_position_embeddings=64, rms_norm_eps=1e-6)


def body(tmp):
    from transformers import Qwen3MoeConfig
    cases = [("qwen3-moe-norm", Qwen3MoeConfig(**dict(BASE, norm_topk_prob=True, mlp_only_layers=[1]))),
             ("qwen3-moe-plain", Qwen3MoeConfig(**dict(BASE, norm_topk_prob=False, tie_word_embeddings=True)))]
    run_cases(tmp, cases, "qwen3_moe")

    cfg = cases[0][1]  # its first case again, for the wrong cut
    src = os.path.join(tmp, "wrong", "src")
    model = hf.build(cfg, 0, src)
    cos, sin = rotary(model, len(IDS))
    text = tpshard("layout", "--preset", "qwen3_moe").stdout
    rule = ('  - match: "model.layers.*.mlp.experts.*.{gate_proj,up_proj}.weight"\n    split: column\n'
            '    size: moe_intermediate\n')
    if report(rule in text, "the qwen3_moe preset's expert gate/up rule is where this test replaces it", text):
        hf.wrong_cut(os.path.join(tmp, "wrong"), "experts-gate-up",
                     "experts' gate_proj columns not paired with up_proj's", src,
                     text.replace(rule, hf.gate_halves("model.layers.*.mlp.experts.*", "moe_intermediate", "weight")),
                     lambda R: tp_forward(R, cfg, IDS, cos, sin), hf.logits(model, IDS))


def main():
    return hf.main("torch2_qwen3_moe", body, needs="Qwen3MoeConfig")


if __name__ == "__main__":
    sys.exit(main())
