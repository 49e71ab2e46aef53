"""A tiny GPT-OSS checkpoint in the MXFP4 form the releases use (gpt-oss-20b/120b), written
with numpy and safetensors alone, independent of tpshard and of transformers' quantizer:
the experts as FP4 e2m1 nibbles (low nibble first, 32 values a block) with e8m0 scales, in
the shapes transformers 4.57's integrations/mxfp4.py and vLLM's gpt_oss.py load:

    gate_up_proj_blocks U8 [E, 2I, H/32, 16]   gate_up_proj_scales U8 [E, 2I, H/32]
    down_proj_blocks    U8 [E, H, I/32, 16]    down_proj_scales    U8 [E, H, I/32]

the rest F32.  Scales stay within 2^-8 .. 2^-1 so every dequantized value (at most 3) is a moderate
number exact in bf16.  Used by torch2_mxfp4.py (transformers' dequantized truth) and
vllm_real_mxfp4_slices.py (vLLM's own slicing code)."""
import json
import os

import numpy as np
from safetensors.numpy import save_file

# 15 blocks of 32: uneven at tp 2 (8, 7), 4 (4, 4, 4, 3) and 8 (2 x 7, 1), as gpt-oss-120b's
# 90 blocks are at tp 8 (12 x 7, 6).
CFG = dict(vocab_size=100, hidden_size=64, intermediate_size=480, num_hidden_layers=2, num_attention_heads=8,
           num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, experts_per_token=2,
           sliding_window=4, max_position_embeddings=16384, rms_norm_eps=1e-5, rope_theta=150000.0,
           rope_scaling={"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
                         "truncate": False, "original_max_position_embeddings": 4096},
           layer_types=["sliding_attention", "full_attention"], tie_word_embeddings=False,
           model_type="gpt_oss", architectures=["GptOssForCausalLM"], torch_dtype="bfloat16",
           quantization_config={"quant_method": "mxfp4",
                                "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                           "model.embed_tokens", "lm_head"]})


def write(path, seed=0, **over):
    """Writes config.json and model.safetensors under path; returns the config dict."""
    cfg = dict(CFG, **over)
    rng = np.random.default_rng(seed)
    V, H, I, L = cfg["vocab_size"], cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    nh, kv, hd, E = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["num_local_experts"]

    def f32(*shape, scale=None):
        s = scale if scale is not None else 1 / np.sqrt(shape[-1])
        return (s * rng.standard_normal(shape)).astype(np.float32)

    def mx(rows, cols):
        blocks = rng.integers(0, 256, size=(E, rows, cols // 32, 16), dtype=np.uint8)
        scales = rng.integers(119, 127, size=(E, rows, cols // 32), dtype=np.uint8)
        return blocks, scales

    t = {"model.embed_tokens.weight": f32(V, H), "lm_head.weight": f32(V, H),
         "model.norm.weight": (1 + 0.2 * rng.standard_normal(H)).astype(np.float32)}
    for l in range(L):
        p = "model.layers.%d." % l
        t[p + "input_layernorm.weight"] = (1 + 0.2 * rng.standard_normal(H)).astype(np.float32)
        t[p + "post_attention_layernorm.weight"] = (1 + 0.2 * rng.standard_normal(H)).astype(np.float32)
        for n, rows in (("q", nh * hd), ("k", kv * hd), ("v", kv * hd)):
            t[p + "self_attn.%s_proj.weight" % n] = f32(rows, H)
            t[p + "self_attn.%s_proj.bias" % n] = f32(rows, scale=0.2)
        t[p + "self_attn.o_proj.weight"] = f32(H, nh * hd)
        t[p + "self_attn.o_proj.bias"] = f32(H, scale=0.2)
        t[p + "self_attn.sinks"] = f32(nh, scale=1.0)
        t[p + "mlp.router.weight"] = f32(E, H)
        t[p + "mlp.router.bias"] = f32(E, scale=0.2)
        gb, gs = mx(2 * I, H)
        db, ds = mx(H, I)
        t[p + "mlp.experts.gate_up_proj_blocks"], t[p + "mlp.experts.gate_up_proj_scales"] = gb, gs
        t[p + "mlp.experts.down_proj_blocks"], t[p + "mlp.experts.down_proj_scales"] = db, ds
        t[p + "mlp.experts.gate_up_proj_bias"] = f32(E, 2 * I, scale=0.2)
        t[p + "mlp.experts.down_proj_bias"] = f32(E, H, scale=0.2)
    os.makedirs(path, exist_ok=True)
    save_file(t, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    return cfg


FP4 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def dequant(blocks, scales):
    """[..., G, 16] nibbles and [..., G] e8m0 -> [..., G * 32] float64 (the OCP MX rule)."""
    lo, hi = FP4[blocks & 15], FP4[blocks >> 4]
    v = np.stack([lo, hi], axis=-1).reshape(*blocks.shape[:-1], 32)
    v = v * np.exp2(scales.astype(np.float64) - 127)[..., None]
    return v.reshape(*blocks.shape[:-2], blocks.shape[-2] * 32)
