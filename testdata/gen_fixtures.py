#!/usr/bin/python3
"""Writes the tiny model fixtures under testdata/models/ (committed; rerun to regenerate).

Each fixture uses its model family's real Hugging Face tensor names and config.json keys
with tiny sizes, so layouts, split, verify and the interop tests meet the names they will
meet in real checkpoints:

  tiny-llama        the bundled demo model: Llama, 2 layers, hidden 64, 8 heads, 2 KV heads,
                    head_dim 8, intermediate 176, vocab 1003 (not a multiple of 8), untied
                    lm_head, BF16, no q/k/v biases
  tiny-llama-split  the same tensors (byte-identical) as a 2-file Hugging Face set with
                    model.safetensors.index.json
  tiny-qwen2        Qwen2: q/k/v biases, tied embeddings (no lm_head.weight), 2 KV heads, BF16
  tiny-llama-bias   Llama with attention_bias and mlp_bias (q/k/v/o and gate/up/down biases),
                    head_dim 16 where hidden / heads is 8, Llama 3.1's rope_scaling (llama3),
                    2 KV heads, BF16
  tiny-gpt2         GPT-2: Conv1D [in, out] weights, fused c_attn, 4 heads, F32
  tiny-neox         GPT-NeoX: per-head interleaved query_key_value, rotary_pct 0.25,
                    parallel residual, 4 heads, F16
  tiny-phi3         Phi-3: fused qkv_proj [Q;K;V] with 8 heads / 2 KV heads, fused
                    gate_up_proj, BF16
  tiny-mixtral      Mixtral: 4 experts, top-2, GQA 8/2, BF16

Only the standard library is used, so the fixtures do not depend on tpshard or torch.
Weights are normal(0, 1) * 0.05 (norm weights 1 + that), drawn as float32 from a
random.Random seeded by "fixture:tensor" (stable across Python versions), then rounded to
the file's dtype with round-to-nearest-even: BF16 by the bit arithmetic below, F16 by
struct's 'e' format (IEEE binary16, round-half-even).

Usage: testdata/gen_fixtures.py [OUTDIR]   (default: testdata/models beside this script)
"""
import json
import os
import random
import struct
import sys

DTYPE_SIZE = {"BF16": 2, "F16": 2, "F32": 4}


def f32(x):
    """x rounded to the nearest float32 (a Python float holding that value)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bf16_bits(x):
    """The bfloat16 nearest to float32 x, ties to even (x finite)."""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def encode(values, dtype):
    if dtype == "F32":
        return struct.pack("<%df" % len(values), *values)
    if dtype == "F16":
        return struct.pack("<%de" % len(values), *values)
    if dtype == "BF16":
        return struct.pack("<%dH" % len(values), *(bf16_bits(v) for v in values))
    raise ValueError(dtype)


def tensor_values(fixture, name, shape):
    n = 1
    for d in shape:
        n *= d
    rng = random.Random("%s:%s" % (fixture, name))
    # Norm scales sit around 1 like trained ones; everything else (including norm biases)
    # around 0.
    is_norm_weight = name.endswith(".weight") and ("norm" in name or ".ln_" in name)
    base = 1.0 if is_norm_weight else 0.0
    return [f32(base + rng.gauss(0.0, 1.0) * 0.05) for _ in range(n)]


def safetensors_bytes(tensors, dtype):
    """tensors: list of (name, shape, data bytes), written in name order."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape, data in sorted(tensors):
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(d for _, _, d in sorted(tensors))


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def write_config(dirname, config):
    with open(os.path.join(dirname, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


def write_header_only(d, tensors):
    """d/model.safetensors with the header of tensors [(name, dtype, shape)] and its data a
    sparse hole: what plan and a refused split read, at a real model's size on no disk."""
    size = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "F8_E4M3": 1}
    header, off = {}, 0
    for name, dt, shape in sorted(tensors):
        n = size[dt]
        for s in shape:
            n *= s
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        f.truncate(8 + len(text) + off)


def write_model_dir(out, fixture, data, config):
    """out/fixture/: model.safetensors holding data (the bytes of a whole file; a fixture stays
    under 1 MiB) and config.json."""
    d = os.path.join(out, fixture)
    os.makedirs(d, exist_ok=True)
    assert len(data) < 1 << 20, (fixture, len(data))
    write(os.path.join(d, "model.safetensors"), data)
    write_config(d, config)


def write_fixture(out, fixture, shapes, config, dtype):
    """out/fixture/: model.safetensors with shapes [(name, shape)] filled by tensor_values and
    encoded as dtype, and config.json."""
    tensors = [(name, shape, encode(tensor_values(fixture, name, shape), dtype)) for name, shape in shapes]
    write_model_dir(out, fixture, safetensors_bytes(tensors, dtype), config)


def write_fixtures(fixtures, default):
    """Every fixture of {name: make} (make() giving shapes, config, dtype) under the folder the
    command line names, else the folder `default` beside this script; that folder."""
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), default)
    for fixture, make in fixtures.items():
        write_fixture(out, fixture, *make())
    return out


def llama_like(prefix_layers, h, heads, kv, hd, inter, vocab, layers, tied, qkv_bias=False, o_bias=False,
               mlp_bias=False):
    t = [("model.embed_tokens.weight", (vocab, h))]
    for i in range(layers):
        p = "%s.%d." % (prefix_layers, i)
        t += [
            (p + "input_layernorm.weight", (h,)),
            (p + "self_attn.q_proj.weight", (heads * hd, h)),
            (p + "self_attn.k_proj.weight", (kv * hd, h)),
            (p + "self_attn.v_proj.weight", (kv * hd, h)),
            (p + "self_attn.o_proj.weight", (h, heads * hd)),
            (p + "post_attention_layernorm.weight", (h,)),
            (p + "mlp.gate_proj.weight", (inter, h)),
            (p + "mlp.up_proj.weight", (inter, h)),
            (p + "mlp.down_proj.weight", (h, inter)),
        ]
        if qkv_bias:
            t += [
                (p + "self_attn.q_proj.bias", (heads * hd,)),
                (p + "self_attn.k_proj.bias", (kv * hd,)),
                (p + "self_attn.v_proj.bias", (kv * hd,)),
            ]
        if o_bias:
            t.append((p + "self_attn.o_proj.bias", (h,)))
        if mlp_bias:
            t += [(p + "mlp.gate_proj.bias", (inter,)), (p + "mlp.up_proj.bias", (inter,)),
                  (p + "mlp.down_proj.bias", (h,))]
    t.append(("model.norm.weight", (h,)))
    if not tied:
        t.append(("lm_head.weight", (vocab, h)))
    return t


def fixture_llama():
    shapes = llama_like("model.layers", 64, 8, 2, 8, 176, 1003, 2, tied=False)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 176, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 8,
        "num_hidden_layers": 2, "vocab_size": 1003, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
        "max_position_embeddings": 128, "hidden_act": "silu", "attention_bias": False,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }
    return shapes, config, "BF16"


def fixture_qwen2():
    shapes = llama_like("model.layers", 64, 8, 2, 8, 128, 500, 2, tied=True, qkv_bias=True)
    config = {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 8, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "vocab_size": 500, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "max_position_embeddings": 128, "hidden_act": "silu", "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }
    return shapes, config, "BF16"


def fixture_llama_bias():
    shapes = llama_like("model.layers", 64, 8, 2, 16, 128, 500, 2, tied=False, qkv_bias=True, o_bias=True,
                        mlp_bias=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16,
        "num_hidden_layers": 2, "vocab_size": 500, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
        "max_position_embeddings": 131072, "hidden_act": "silu", "attention_bias": True, "mlp_bias": True,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }
    return shapes, config, "BF16"


def fixture_gpt2():
    h, heads, layers, vocab, npos = 64, 4, 2, 500, 64
    t = [("transformer.wte.weight", (vocab, h)), ("transformer.wpe.weight", (npos, h))]
    for i in range(layers):
        p = "transformer.h.%d." % i
        t += [
            (p + "ln_1.weight", (h,)), (p + "ln_1.bias", (h,)),
            (p + "attn.c_attn.weight", (h, 3 * h)), (p + "attn.c_attn.bias", (3 * h,)),
            (p + "attn.c_proj.weight", (h, h)), (p + "attn.c_proj.bias", (h,)),
            (p + "ln_2.weight", (h,)), (p + "ln_2.bias", (h,)),
            (p + "mlp.c_fc.weight", (h, 4 * h)), (p + "mlp.c_fc.bias", (4 * h,)),
            (p + "mlp.c_proj.weight", (4 * h, h)), (p + "mlp.c_proj.bias", (h,)),
        ]
    t += [("transformer.ln_f.weight", (h,)), ("transformer.ln_f.bias", (h,))]
    config = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": h, "n_head": heads,
        "n_layer": layers, "n_inner": None, "vocab_size": vocab, "n_positions": npos, "n_ctx": npos,
        "layer_norm_epsilon": 1e-05, "activation_function": "gelu_new", "tie_word_embeddings": True,
        "torch_dtype": "float32",
    }
    return t, config, "F32"


def fixture_neox():
    h, heads, inter, vocab, layers = 64, 4, 256, 500, 2
    t = [("gpt_neox.embed_in.weight", (vocab, h))]
    for i in range(layers):
        p = "gpt_neox.layers.%d." % i
        t += [
            (p + "input_layernorm.weight", (h,)), (p + "input_layernorm.bias", (h,)),
            (p + "post_attention_layernorm.weight", (h,)), (p + "post_attention_layernorm.bias", (h,)),
            (p + "attention.query_key_value.weight", (3 * h, h)), (p + "attention.query_key_value.bias", (3 * h,)),
            (p + "attention.dense.weight", (h, h)), (p + "attention.dense.bias", (h,)),
            (p + "mlp.dense_h_to_4h.weight", (inter, h)), (p + "mlp.dense_h_to_4h.bias", (inter,)),
            (p + "mlp.dense_4h_to_h.weight", (h, inter)), (p + "mlp.dense_4h_to_h.bias", (h,)),
        ]
    t += [("gpt_neox.final_layer_norm.weight", (h,)), ("gpt_neox.final_layer_norm.bias", (h,)),
          ("embed_out.weight", (vocab, h))]
    config = {
        "architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "hidden_size": h,
        "num_attention_heads": heads, "intermediate_size": inter, "num_hidden_layers": layers,
        "vocab_size": vocab, "rotary_pct": 0.25, "rotary_emb_base": 10000, "layer_norm_eps": 1e-05,
        "use_parallel_residual": True, "hidden_act": "gelu", "max_position_embeddings": 128,
        "tie_word_embeddings": False, "torch_dtype": "float16",
    }
    return t, config, "F16"


def fixture_phi3():
    h, heads, kv, hd, inter, vocab, layers = 64, 8, 2, 8, 128, 600, 2
    t = [("model.embed_tokens.weight", (vocab, h))]
    for i in range(layers):
        p = "model.layers.%d." % i
        t += [
            (p + "input_layernorm.weight", (h,)),
            (p + "self_attn.qkv_proj.weight", ((heads + 2 * kv) * hd, h)),
            (p + "self_attn.o_proj.weight", (h, heads * hd)),
            (p + "post_attention_layernorm.weight", (h,)),
            (p + "mlp.gate_up_proj.weight", (2 * inter, h)),
            (p + "mlp.down_proj.weight", (h, inter)),
        ]
    t += [("model.norm.weight", (h,)), ("lm_head.weight", (vocab, h))]
    config = {
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": h,
        "intermediate_size": inter, "num_attention_heads": heads, "num_key_value_heads": kv,
        "num_hidden_layers": layers, "vocab_size": vocab, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
        "hidden_act": "silu", "max_position_embeddings": 128, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    return t, config, "BF16"


def fixture_mixtral():
    h, heads, kv, hd, inter, vocab, layers, experts = 64, 8, 2, 8, 96, 512, 2, 4
    t = [("model.embed_tokens.weight", (vocab, h))]
    for i in range(layers):
        p = "model.layers.%d." % i
        t += [
            (p + "input_layernorm.weight", (h,)),
            (p + "self_attn.q_proj.weight", (heads * hd, h)),
            (p + "self_attn.k_proj.weight", (kv * hd, h)),
            (p + "self_attn.v_proj.weight", (kv * hd, h)),
            (p + "self_attn.o_proj.weight", (h, heads * hd)),
            (p + "post_attention_layernorm.weight", (h,)),
            (p + "block_sparse_moe.gate.weight", (experts, h)),
        ]
        for e in range(experts):
            q = p + "block_sparse_moe.experts.%d." % e
            t += [(q + "w1.weight", (inter, h)), (q + "w2.weight", (h, inter)), (q + "w3.weight", (inter, h))]
    t += [("model.norm.weight", (h,)), ("lm_head.weight", (vocab, h))]
    config = {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": h,
        "intermediate_size": inter, "num_attention_heads": heads, "num_key_value_heads": kv,
        "num_hidden_layers": layers, "vocab_size": vocab, "num_local_experts": experts,
        "num_experts_per_tok": 2, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "hidden_act": "silu",
        "max_position_embeddings": 128, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }
    return t, config, "BF16"


FIXTURES = {
    "tiny-llama": fixture_llama,
    "tiny-qwen2": fixture_qwen2,
    "tiny-llama-bias": fixture_llama_bias,
    "tiny-gpt2": fixture_gpt2,
    "tiny-neox": fixture_neox,
    "tiny-phi3": fixture_phi3,
    "tiny-mixtral": fixture_mixtral,
}


def build(fixture):
    shapes, config, dtype = FIXTURES[fixture]()
    tensors = [(name, shape, encode(tensor_values(fixture, name, shape), dtype)) for name, shape in shapes]
    return tensors, config, dtype


def main():
    out = write_fixtures(FIXTURES, "models")

    # The demo model again as a Hugging Face 2-file set: embeddings and layer 0 in the first
    # file, the rest in the second, with the same bytes per tensor as tiny-llama.
    tensors, config, dtype = build("tiny-llama")
    d = os.path.join(out, "tiny-llama-split")
    os.makedirs(d, exist_ok=True)
    first = [t for t in tensors if t[0] == "model.embed_tokens.weight" or t[0].startswith("model.layers.0.")]
    second = [t for t in tensors if t not in first]
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    weight_map = {}
    for fname, part in zip(names, (first, second)):
        write(os.path.join(d, fname), safetensors_bytes(part, dtype))
        for name, _, _ in part:
            weight_map[name] = fname
    index = {"metadata": {"total_size": sum(len(t[2]) for t in tensors)},
             "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    write_config(d, config)


if __name__ == "__main__":
    main()
