#!/usr/bin/python3
"""Writes a DeepSeek-V3-shaped checkpoint (config.json + model.safetensors, random values)
for verify's memory cases (issue 36): the tensor names and config.json keys transformers'
DeepseekV3ForCausalLM saves, the first --dense layers dense, the others MoE.  Only the expert
count changes between the sets a bench compares, so their peaks say whether verify's memory
follows it.  --fp8: the linears F8_E4M3 with a float32 weight_scale_inv per 128 x 128 block
and config.json's quantization_config, as DeepSeek-V3 is released (embedding, LM head, norms
and router BF16); the real layer is
  gen_moe.py OUT 256 --fp8 --layers 1 --dense 0 --hidden 7168 --heads 128 --q-lora 1536
             --moe-inter 2048 --vocab 1024                      (about 11 GB)

Usage: gen_moe.py OUTDIR EXPERTS [--hidden 2048] [--moe-inter 1024] [--layers 2] [--vocab 8192] ...
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
        mlps = [(p + "mlp.", a.inter)] if i < a.dense else \
            [(p + "mlp.experts.%d." % e, a.moe_inter) for e in range(a.experts)] + \
            [(p + "mlp.shared_experts.", a.moe_inter)]
        for m, n in mlps:
            out += [(m + "gate_proj.weight", (n, H)), (m + "up_proj.weight", (n, H)), (m + "down_proj.weight", (H, n))]
        if i >= a.dense:
            out += [(p + "mlp.gate.weight", (a.experts, H)), (p + "mlp.gate.e_score_correction_bias", (a.experts,))]
    return out + [("model.norm.weight", (H,)), ("lm_head.weight", (a.vocab, H))]


def config(a):
    groups = min(8, a.experts // 2)
    return {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": a.hidden,
            "intermediate_size": a.inter, "moe_intermediate_size": a.moe_inter, "num_attention_heads": a.heads,
            "num_key_value_heads": a.heads, "num_hidden_layers": a.layers, "vocab_size": a.vocab,
            "q_lora_rank": a.q_lora, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
            "v_head_dim": 128, "head_dim": 64, "n_routed_experts": a.experts,
            "num_experts_per_tok": min(8, a.experts // 2),  # the kept groups must hold top_k
            "n_shared_experts": 1, "first_k_dense_replace": a.dense, "n_group": groups, "topk_group": max(1, groups // 2),
            "topk_method": "noaux_tc", "scoring_func": "sigmoid", "routed_scaling_factor": 2.5,
            "norm_topk_prob": True, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
            "max_position_embeddings": 4096, "tie_word_embeddings": False, "rope_interleave": True,
            "torch_dtype": "bfloat16"}


def quantized(a, name, shape):
    """Whether DeepSeek-V3's release stores this tensor in FP8 (the projections)."""
    return a.fp8 and len(shape) == 2 and name.endswith("proj.weight") or a.fp8 and name.endswith("proj_with_mqa.weight")


def fp8(rng, shape):
    """Random F8_E4M3 codes: any sign, exponent and mantissa but the NaN pattern S.1111.111."""
    x = rng.integers(0, 0x7f, size=shape, dtype=np.uint8)  # 0x00-0x7e: finite, positive
    return x | (rng.integers(0, 2, size=shape, dtype=np.uint8) << 7)


def scale(rng, shape):
    s = (-(-shape[0] // 128), -(-shape[1] // 128))
    return (rng.random(s, dtype=np.float32) + 0.5) * np.float32(1 / 448 / np.sqrt(shape[1]))


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
    ap.add_argument("--dense", type=int, default=1, help="first_k_dense_replace")
    ap.add_argument("--fp8", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    ts = []  # (name, shape, dtype, bytes per element, maker)
    for name, shape in tensors(a):
        if quantized(a, name, shape):
            sc = (-(-shape[0] // 128), -(-shape[1] // 128))
            ts += [(name, shape, "F8_E4M3", 1, lambda r, s=shape: fp8(r, s)),
                   (name + "_scale_inv", sc, "F32", 4, lambda r, s=shape: scale(r, s))]
        else:
            ts.append((name, shape, "BF16", 2, lambda r, s=shape, n=name: bf16(r, s, n)))
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, dt, es, _ in ts:
        n = es * int(np.prod(shape))
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    rng = np.random.default_rng(36)
    path = os.path.join(a.out, "model.safetensors")
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj)
        for _, _, _, _, make in ts:
            f.write(make(rng).tobytes())
    os.replace(path + ".tmp", path)
    c = config(a)
    if a.fp8:
        c["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                    "weight_block_size": [128, 128]}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(c, f, indent=1)


if __name__ == "__main__":
    main()
