#!/usr/bin/python3
"""Writes a DeepSeek-V3-shaped checkpoint (config.json + model.safetensors, BF16 random values)
for verify's memory case (issue 36): the tensor names and config.json keys transformers'
DeepseekV3ForCausalLM saves, layer 0 dense, the others MoE.  Only the expert count changes
between the sets a bench compares, so their peaks say whether verify's memory follows it.

Usage: gen_moe.py OUTDIR EXPERTS [--hidden 2048] [--moe-inter 1024] [--layers 2] [--vocab 8192]
numpy only (no torch), written front to back, one tensor at a time.
"""
import argparse
import json
import os
import struct

import numpy as np


def tensors(a):
    H, heads, nope, rope, v, kvl, ql = a.hidden, a.heads, 128, 64, 128, 512, a.q_lora
    out = [("model.embed_tokens.weight", (a.vocab, H))]
    for i in range(a.layers):
        p = "model.layers.%d." % i
        s = p + "self_attn."
        out += [(p + "input_layernorm.weight", (H,)), (p + "post_attention_layernorm.weight", (H,)),
                (s + "q_a_proj.weight", (ql, H)), (s + "q_a_layernorm.weight", (ql,)),
                (s + "q_b_proj.weight", (heads * (nope + rope), ql)),
                (s + "kv_a_proj_with_mqa.weight", (kvl + rope, H)), (s + "kv_a_layernorm.weight", (kvl,)),
                (s + "kv_b_proj.weight", (heads * (nope + v), kvl)), (s + "o_proj.weight", (H, heads * v))]
        mlps = [(p + "mlp.", a.inter)] if i == 0 else \
            [(p + "mlp.experts.%d." % e, a.moe_inter) for e in range(a.experts)] + \
            [(p + "mlp.shared_experts.", a.moe_inter)]
        for m, n in mlps:
            out += [(m + "gate_proj.weight", (n, H)), (m + "up_proj.weight", (n, H)), (m + "down_proj.weight", (H, n))]
        if i > 0:
            out += [(p + "mlp.gate.weight", (a.experts, H)), (p + "mlp.gate.e_score_correction_bias", (a.experts,))]
    return out + [("model.norm.weight", (H,)), ("lm_head.weight", (a.vocab, H))]


def config(a):
    groups = min(8, a.experts // 2)
    return {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": a.hidden,
            "intermediate_size": a.inter, "moe_intermediate_size": a.moe_inter, "num_attention_heads": a.heads,
            "num_key_value_heads": a.heads, "num_hidden_layers": a.layers, "vocab_size": a.vocab,
            "q_lora_rank": a.q_lora, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
            "v_head_dim": 128, "head_dim": 64, "n_routed_experts": a.experts, "num_experts_per_tok": 8,
            "n_shared_experts": 1, "first_k_dense_replace": 1, "n_group": groups, "topk_group": max(1, groups // 2),
            "topk_method": "noaux_tc", "scoring_func": "sigmoid", "routed_scaling_factor": 2.5,
            "norm_topk_prob": True, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
            "max_position_embeddings": 4096, "tie_word_embeddings": False, "rope_interleave": True,
            "torch_dtype": "bfloat16"}


def bf16(rng, shape, name):
    if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
        x = 1 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
    elif name.endswith("e_score_correction_bias"):
        x = 0.01 * rng.standard_normal(shape, dtype=np.float32)
    else:  # scaled like an initializer so the activations stay O(1)
        x = rng.standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(shape[-1]))
    return (x.view(np.uint32) >> 16).astype(np.uint16)  # truncation: any BF16 value will do


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("experts", type=int)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--q-lora", type=int, default=768)
    ap.add_argument("--inter", type=int, default=4096)
    ap.add_argument("--moe-inter", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=8192)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    ts = tensors(a)
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in ts:
        n = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    rng = np.random.default_rng(36)
    path = os.path.join(a.out, "model.safetensors")
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj)
        for name, shape in ts:
            f.write(bf16(rng, shape, name).tobytes())
    os.replace(path + ".tmp", path)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config(a), f, indent=1)


if __name__ == "__main__":
    main()
