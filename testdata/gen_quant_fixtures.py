#!/usr/bin/python3
"""Writes the quantized fixtures under testdata/models/ (committed; rerun to regenerate), with
this script's own FP8 quantizer (the test tier's independent truth: tpshard's code is not used):

  tiny-llama-fp8        fine-grained FP8 (quant_method fp8, weight_block_size [16, 16]) of a
                        Llama: hidden 64, 8 heads of 16, 2 KV heads, intermediate 128 (8
                        blocks), 2 layers; weight_scale_inv F32 [cdiv(out,16), cdiv(in,16)];
                        lm_head unquantized (modules_to_not_convert), BF16 norms/embeddings
  tiny-llama-fp8-i96    the same with intermediate 96 (6 blocks: like Llama-2's 11008 = 86
                        blocks of 128, tp 4 puts a rank boundary inside a block)
  tiny-llama-fp8-ct-tensor   compressed-tensors FP8, strategy tensor: weight_scale [1] and a
                        static input_scale [1] per linear (F32); ignore [lm_head]
  tiny-llama-fp8-ct-channel  compressed-tensors FP8, strategy channel: weight_scale [out, 1]
                        (BF16), dynamic activations (no input_scale)
  tiny-deepseek-v3-fp8  DeepSeek-V3/R1's release format (quantization_config exactly theirs:
                        fp8 e4m3, dynamic, weight_block_size, no modules_to_not_convert) on
                        gen_deepseek.py's tiny-deepseek-v3 (names, config), block [8, 8]: every
                        linear of the layers FP8 (the MLA q_a/q_b/kv_a/kv_b/o projections, dense,
                        routed and shared experts), embed, lm_head, norms, the router mlp.gate
                        and e_score_correction_bias unquantized.  A q head is 12 rows, 1.5
                        blocks: tp 1, 2, 4 fit, tp 8 puts 12 q_b_proj rows on a rank (and 4 rows
                        of an expert): refused.  kv_a_proj_with_mqa's 20 rows end in a part block
  tiny-qwen3-moe-fp8    Qwen3-MoE-FP8's format on lib/presets/qwen3_moe.yaml's names: hidden 64,
                        8 heads of 16, 2 KV heads, per-head q_norm/k_norm (unquantized), 4
                        experts of 128, top 2, block [16, 16]: tp 1, 2, 4, 8 fit
  tiny-mixtral-fp8      Mixtral (4 experts, top 2; hidden 128, 8 heads of 16, 2 KV heads, expert
                        intermediate 128) with block [16, 16] FP8 attention and experts; the
                        router (block_sparse_moe.gate) and lm_head unquantized

FP8 E4M3 ("fn": max 448, no infinities) is encoded here with round-to-nearest-even and
saturation (fp8_e4m3_code).  Block scales follow transformers' FineGrainedFP8HfQuantizer:
scale_inv = max|w| / 448 per block, the weight quantized as w / scale_inv.  Channel scales
are max|row| / 448, tensor scales max|w| / 448.  Weights are gen_fixtures.py's draws.

Usage: testdata/gen_quant_fixtures.py [OUTDIR]   (default: testdata/models beside this script)
"""
import json
import math
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_fixtures  # noqa: E402  (beside this script; standard library only)

FP8_MAX = 448.0


def fp8_e4m3_code(x):
    """The E4M3 ("fn") byte nearest to x: round-to-nearest-even, |x| >= 448 saturates to 448."""
    sign = 0x80 if (x < 0 or (x == 0 and math.copysign(1.0, x) < 0)) else 0
    a = abs(x)
    if a >= FP8_MAX:
        return sign | 0x7E
    if a < 2.0 ** -6:  # subnormal: steps of 2^-9, code 8 is the smallest normal 2^-6
        return sign | int(round(a / 2.0 ** -9))
    m, e = math.frexp(a)  # a = m * 2^e, m in [0.5, 1)
    e -= 1
    q = int(round((a / 2.0 ** e - 1.0) * 8))  # exact in binary floating point; round() ties to even
    if q == 8:
        e, q = e + 1, 0
    code = ((e + 7) << 3) | q
    return sign | min(code, 0x7E)


def fp8_e4m3_value(code):
    s = -1.0 if code & 0x80 else 1.0
    e, m = (code >> 3) & 0xF, code & 7
    if e == 15 and m == 7:
        return float("nan")
    if e == 0:
        return s * m * 2.0 ** -9
    return s * (1 + m / 8.0) * 2.0 ** (e - 7)


def cdiv(a, b):
    return -(-a // b)


def quant_block(w, out, inn, bn, bk):
    """w: row-major list [out*inn]; returns (codes, scale_inv [cdiv(out,bn)*cdiv(in,bk)])."""
    so, si = cdiv(out, bn), cdiv(inn, bk)
    scales = []
    for bi in range(so):
        for bj in range(si):
            amax = max(abs(w[r * inn + c]) for r in range(bi * bn, min(out, bi * bn + bn))
                       for c in range(bj * bk, min(inn, bj * bk + bk)))
            scales.append(gen_fixtures.f32(amax / FP8_MAX if amax else 1.0))
    codes = bytearray(out * inn)
    for r in range(out):
        for c in range(inn):
            codes[r * inn + c] = fp8_e4m3_code(w[r * inn + c] / scales[(r // bn) * si + c // bk])
    return bytes(codes), scales


def quant_channel(w, out, inn):
    scales = []
    for r in range(out):
        amax = max(abs(v) for v in w[r * inn:(r + 1) * inn])
        scales.append(amax / FP8_MAX)
    return scales


def safetensors(tensors):
    """tensors: list of (name, dtype, shape, data bytes), written in name order."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape, data in sorted(tensors):
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in sorted(tensors))


def read_safetensors(path):
    """{name: (dtype, shape, bytes)} of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, v in header.items():
            if name == "__metadata__":
                continue
            f.seek(base + v["data_offsets"][0])
            out[name] = (v["dtype"], v["shape"], f.read(v["data_offsets"][1] - v["data_offsets"][0]))
    return out


def quantize(fixture, shapes, scheme, block, ignore, scale_dtype="F32", input_scales=False):
    """shapes: (name, shape) pairs of a BF16 model; the 2-D .weight of every linear not in
    ignore (and not an embedding or norm) is quantized by scheme."""
    tensors = []
    for name, shape in shapes:
        vals = gen_fixtures.tensor_values(fixture, name, shape)
        module = name[: -len(".weight")] if name.endswith(".weight") else None
        linear = (module and len(shape) == 2 and "embed" not in name and "norm" not in name
                  and not any(module == i or module.endswith("." + i) for i in ignore))
        if not linear:
            tensors.append((name, "BF16", shape, gen_fixtures.encode(vals, "BF16")))
            continue
        out, inn = shape
        if scheme == "block":
            codes, s = quant_block(vals, out, inn, block[0], block[1])
            tensors.append((module + ".weight_scale_inv", "F32", (cdiv(out, block[0]), cdiv(inn, block[1])),
                            gen_fixtures.encode(s, "F32")))
        else:
            if scheme == "channel":
                s = [gen_fixtures.f32(v) for v in quant_channel(vals, out, inn)]
                if scale_dtype == "BF16":  # the scale the file holds is the one the codes are made with
                    s = [struct.unpack("<f", struct.pack("<I", gen_fixtures.bf16_bits(v) << 16))[0] for v in s]
                sshape = (out, 1)
            else:
                s = [gen_fixtures.f32(max(abs(v) for v in vals) / FP8_MAX)]
                sshape = (1,)
            codes = bytes(fp8_e4m3_code(v / s[r if scheme == "channel" else 0])
                          for r in range(out) for v in vals[r * inn:(r + 1) * inn])
            tensors.append((module + ".weight_scale", scale_dtype, sshape, gen_fixtures.encode(s, scale_dtype)))
            if input_scales:
                tensors.append((module + ".input_scale", "F32", (1,), gen_fixtures.encode([gen_fixtures.f32(0.02)], "F32")))
        tensors.append((name, "F8_E4M3", shape, codes))
    return tensors


def llama(inter, vocab=1003):
    h, heads, kv, hd, layers = 64, 8, 2, 16, 2
    shapes = gen_fixtures.llama_like("model.layers", h, heads, kv, hd, inter, vocab, layers, tied=False)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h, "intermediate_size": inter,
        "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd, "num_hidden_layers": layers,
        "vocab_size": vocab, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "max_position_embeddings": 128,
        "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }
    return shapes, config


def fp8_block_config(block):
    return {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": list(block),
            "modules_to_not_convert": ["lm_head"]}


def ct_config(strategy, static_input):
    return {
        "quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
        "ignore": ["lm_head"], "kv_cache_scheme": None,
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "float", "strategy": strategy, "symmetric": True, "dynamic": False},
            "input_activations": ({"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True,
                                   "dynamic": False} if static_input else
                                  {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True,
                                   "dynamic": True}),
        }},
    }


def release_fp8_config(block):
    """DeepSeek-V3/R1's and Qwen3-FP8's quantization_config: nothing names the unquantized
    modules; the file does (no weight_scale_inv)."""
    return {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": list(block)}


def deepseek_v3_fp8():
    import gen_deepseek
    shapes, config, _ = gen_deepseek.fixture_v3()
    config["quantization_config"] = release_fp8_config((8, 8))
    return quantize("tiny-deepseek-v3-fp8", shapes, "block", (8, 8), ["lm_head", "gate"]), config


def qwen3_moe_fp8():
    h, heads, kv, hd, moe, experts, vocab, layers = 64, 8, 2, 16, 128, 4, 200, 2
    shapes = [("model.embed_tokens.weight", (vocab, h))]
    for i in range(layers):
        p = "model.layers.%d." % i
        shapes += [(p + "input_layernorm.weight", (h,)), (p + "self_attn.q_proj.weight", (heads * hd, h)),
                   (p + "self_attn.k_proj.weight", (kv * hd, h)), (p + "self_attn.v_proj.weight", (kv * hd, h)),
                   (p + "self_attn.o_proj.weight", (h, heads * hd)), (p + "self_attn.q_norm.weight", (hd,)),
                   (p + "self_attn.k_norm.weight", (hd,)), (p + "post_attention_layernorm.weight", (h,)),
                   (p + "mlp.gate.weight", (experts, h))]
        for e in range(experts):
            q = p + "mlp.experts.%d." % e
            shapes += [(q + "gate_proj.weight", (moe, h)), (q + "up_proj.weight", (moe, h)),
                       (q + "down_proj.weight", (h, moe))]
    shapes += [("model.norm.weight", (h,)), ("lm_head.weight", (vocab, h))]
    config = {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": h,
        "intermediate_size": 256, "moe_intermediate_size": moe, "num_attention_heads": heads,
        "num_key_value_heads": kv, "head_dim": hd, "num_hidden_layers": layers, "vocab_size": vocab,
        "num_experts": experts, "num_experts_per_tok": 2, "norm_topk_prob": True, "decoder_sparse_step": 1,
        "mlp_only_layers": [], "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "hidden_act": "silu",
        "max_position_embeddings": 128, "attention_bias": False, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "quantization_config": release_fp8_config((16, 16)),
    }
    return quantize("tiny-qwen3-moe-fp8", shapes, "block", (16, 16), ["lm_head", "gate"]), config


def fixture(name):
    if name == "tiny-deepseek-v3-fp8":
        return deepseek_v3_fp8()
    if name == "tiny-qwen3-moe-fp8":
        return qwen3_moe_fp8()
    if name in ("tiny-llama-fp8", "tiny-llama-fp8-i96"):
        shapes, config = llama(128 if name == "tiny-llama-fp8" else 96)
        config["quantization_config"] = fp8_block_config((16, 16))
        return quantize(name, shapes, "block", (16, 16), ["lm_head"]), config
    if name == "tiny-llama-fp8-ct-tensor":
        shapes, config = llama(176)
        config["quantization_config"] = ct_config("tensor", True)
        return quantize(name, shapes, "tensor", None, ["lm_head"], input_scales=True), config
    if name == "tiny-llama-fp8-ct-channel":
        shapes, config = llama(176)
        config["quantization_config"] = ct_config("channel", False)
        return quantize(name, shapes, "channel", None, ["lm_head"], scale_dtype="BF16"), config
    if name == "tiny-mixtral-fp8":
        h, heads, kv, hd, inter, vocab, layers, experts = 128, 8, 2, 16, 128, 512, 2, 4
        shapes = [("model.embed_tokens.weight", (vocab, h))]
        for i in range(layers):
            p = "model.layers.%d." % i
            shapes += [(p + "input_layernorm.weight", (h,)), (p + "self_attn.q_proj.weight", (heads * hd, h)),
                       (p + "self_attn.k_proj.weight", (kv * hd, h)), (p + "self_attn.v_proj.weight", (kv * hd, h)),
                       (p + "self_attn.o_proj.weight", (h, heads * hd)), (p + "post_attention_layernorm.weight", (h,)),
                       (p + "block_sparse_moe.gate.weight", (experts, h))]
            for e in range(experts):
                q = p + "block_sparse_moe.experts.%d." % e
                shapes += [(q + "w1.weight", (inter, h)), (q + "w2.weight", (h, inter)), (q + "w3.weight", (inter, h))]
        shapes += [("model.norm.weight", (h,)), ("lm_head.weight", (vocab, h))]
        config = {
            "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": h,
            "intermediate_size": inter, "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
            "num_hidden_layers": layers, "vocab_size": vocab, "num_local_experts": experts,
            "num_experts_per_tok": 2, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "hidden_act": "silu",
            "max_position_embeddings": 128, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
            "quantization_config": dict(fp8_block_config((16, 16)),
                                        modules_to_not_convert=["lm_head", "block_sparse_moe.gate"]),
        }
        return quantize(name, shapes, "block", (16, 16), ["lm_head", "gate"]), config
    if name == "tiny-llama-fp8-head":
        # lm_head quantized too (compressed-tensors channel, nothing ignored): verify
        # --whole-model dequantizes the head as it does the layers' linears
        shapes, config = llama(176, vocab=1024)
        config["quantization_config"] = dict(ct_config("channel", False), ignore=[])
        return quantize(name, shapes, "channel", None, [], scale_dtype="BF16"), config
    raise ValueError(name)


FIXTURES = ["tiny-llama-fp8", "tiny-llama-fp8-i96", "tiny-llama-fp8-ct-tensor", "tiny-llama-fp8-ct-channel",
            "tiny-mixtral-fp8", "tiny-llama-fp8-head", "tiny-deepseek-v3-fp8", "tiny-qwen3-moe-fp8"]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
    for name in FIXTURES:
        tensors, config = fixture(name)
        gen_fixtures.write_model_dir(out, name, safetensors(tensors), config)


if __name__ == "__main__":
    main()
