#!/usr/bin/python3
"""Writes the GPTQ and AWQ fixtures under testdata/models/ (committed; rerun to regenerate),
standard library only: gen_fixtures.py's seeded float weights, quantized and packed by
quantpack.py exactly as AutoGPTQ and AutoAWQ store them, in the families' real names.

  tiny-llama-gptq           Llama, 2 layers, hidden 128, 8 heads, 2 KV heads (head_dim 16),
                            intermediate 256, vocab 256; GPTQ 4-bit, group 16, desc_act false,
                            sym, checkpoint_format gptq (v1 zeros); legal tp 1, 2, 4, 8
                            (o_proj's 16 inputs a rank at tp 8 are one group)
  tiny-llama-gptq-actorder  the same model with group 32 and act-order (desc_act true, a
                            permuted g_idx shared by q/k/v and by gate/up, as one Hessian
                            orders them), asymmetric zeros, checkpoint_format gptq_v2; legal
                            tp 1, 2, 4 (o_proj's 16 inputs at tp 8 split a group of 32: refused
                            even though act-order replicates the scales, as vLLM does)
  tiny-llama-awq            Llama with intermediate 192 (6 groups of 32: the shape of
                            intermediate 11008 = 86 groups of 128); AWQ GEMM 4-bit, group 32,
                            zero_point; legal tp 1, 2 (down_proj's 48 inputs at tp 4 split a group)
  tiny-mixtral-gptq         Mixtral, 4 experts (top 2) of intermediate 128, GPTQ act-order,
                            group 32, v1 zeros, legal tp 1, 2, 4; the router (block_sparse_moe.gate) left F16
                            as AutoGPTQ leaves it
  tiny-mixtral-awq          Mixtral, 4 experts (top 2) of intermediate 192 (the 11008 shape
                            again, per expert), AWQ GEMM 4-bit, group 32, zero_point; the router
                            left F16 (modules_to_not_convert ["gate"], as AutoAWQ's Mixtral
                            does); legal tp 1, 2 (w2's 48 inputs a rank at tp 4 split a group)

Unquantized tensors (embeddings, norms, router, lm_head) are F16.  Quantized linears hold
qweight, qzeros, scales (and g_idx for GPTQ) in place of weight.

Usage: testdata/gen_quant_int.py [OUTDIR]   (default: testdata/models beside this script)
"""
import json
import os
import random
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_fixtures as g  # noqa: E402
import quantpack as qp  # noqa: E402

BITS = 4


def linears(p, h, heads, kv, hd, inter, mlp):
    """(name, out, in, input group) of one layer's quantized linears; the input group names
    the linears that read the same input (one Hessian: one act-order permutation)."""
    t = [(p + "self_attn.q_proj", heads * hd, h, "attn"), (p + "self_attn.k_proj", kv * hd, h, "attn"),
         (p + "self_attn.v_proj", kv * hd, h, "attn"), (p + "self_attn.o_proj", h, heads * hd, "o")]
    for m, (gate, up, down) in mlp:
        t += [(m + gate, inter, h, m + "mlp"), (m + up, inter, h, m + "mlp"), (m + down, h, inter, m + "down")]
    return t


def quantized_tensors(fixture, name, out, inp, method, group, perm, sym, v2):
    flat = g.tensor_values(fixture, name + ".weight", (out, inp))
    W = [flat[r * inp:(r + 1) * inp] for r in range(out)]
    if method == "gptq":
        g_idx = qp.gptq_g_idx(inp, group, perm)
        q, s, z = qp.quantize(W, BITS, group, g_idx, sym)
        qweight, qzeros = qp.gptq_pack(q, z, BITS, v2)
        return [(name + ".qweight", "I32", (inp * BITS // 32, out), qp.int32_bytes(qweight)),
                (name + ".qzeros", "I32", (len(z), out * BITS // 32), qp.int32_bytes(qzeros)),
                (name + ".scales", "F16", (len(s), out), qp.f16_bytes(s)),
                (name + ".g_idx", "I32", (inp,), qp.int32_bytes([g_idx]))]
    q, s, z = qp.quantize(W, BITS, group, qp.gptq_g_idx(inp, group), sym)
    qweight, qzeros = qp.awq_pack(q, z)
    return [(name + ".qweight", "I32", (inp, out * BITS // 32), qp.int32_bytes(qweight)),
            (name + ".qzeros", "I32", (len(z), out * BITS // 32), qp.int32_bytes(qzeros)),
            (name + ".scales", "F16", (len(s), out), qp.f16_bytes(s))]


def build(fixture, arch, dims, method, group, desc_act, sym, v2, experts=0):
    h, heads, kv, hd, inter, vocab, layers = dims
    plain = [("model.embed_tokens.weight", (vocab, h)), ("model.norm.weight", (h,)), ("lm_head.weight", (vocab, h))]
    quant = []
    for i in range(layers):
        p = "model.layers.%d." % i
        plain += [(p + "input_layernorm.weight", (h,)), (p + "post_attention_layernorm.weight", (h,))]
        if experts:
            plain.append((p + "block_sparse_moe.gate.weight", (experts, h)))
            mlp = [(p + "block_sparse_moe.experts.%d." % e, ("w1", "w3", "w2")) for e in range(experts)]
        else:
            mlp = [(p + "mlp.", ("gate_proj", "up_proj", "down_proj"))]
        quant += linears(p, h, heads, kv, hd, inter, mlp)
    tensors = [(n, "F16", s, g.encode(g.tensor_values(fixture, n, s), "F16")) for n, s in plain]
    perms = {}
    for name, out, inp, group_key in quant:
        perm = None
        if desc_act:
            if group_key not in perms:
                perms[group_key] = list(range(inp))
                random.Random("%s:%s:perm" % (fixture, name)).shuffle(perms[group_key])
            perm = perms[group_key]
        tensors += quantized_tensors(fixture, name, out, inp, method, group, perm, sym, v2)
    config = {
        "architectures": [arch], "model_type": "mixtral" if experts else "llama", "hidden_size": h,
        "intermediate_size": inter, "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
        "num_hidden_layers": layers, "vocab_size": vocab, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
        "max_position_embeddings": 128, "hidden_act": "silu", "tie_word_embeddings": False,
        "torch_dtype": "float16",
    }
    if experts:
        config.update({"num_local_experts": experts, "num_experts_per_tok": 2})
    else:
        config["attention_bias"] = False
    if method == "gptq":
        config["quantization_config"] = {
            "quant_method": "gptq", "bits": BITS, "group_size": group, "desc_act": desc_act, "sym": sym,
            "static_groups": False, "true_sequential": True, "damp_percent": 0.01,
            "checkpoint_format": "gptq_v2" if v2 else "gptq",
        }
    else:
        config["quantization_config"] = {"quant_method": "awq", "bits": BITS, "group_size": group,
                                         "zero_point": not sym, "version": "gemm"}
        if experts:
            config["quantization_config"]["modules_to_not_convert"] = ["gate"]
    return tensors, config


FIXTURES = {
    "tiny-llama-gptq": lambda f: build(f, "LlamaForCausalLM", (128, 8, 2, 16, 256, 256, 2), "gptq", 16,
                                       desc_act=False, sym=True, v2=False),
    "tiny-llama-gptq-actorder": lambda f: build(f, "LlamaForCausalLM", (128, 8, 2, 16, 256, 256, 2), "gptq", 32,
                                                desc_act=True, sym=False, v2=True),
    "tiny-llama-awq": lambda f: build(f, "LlamaForCausalLM", (128, 8, 2, 16, 192, 256, 2), "awq", 32,
                                      desc_act=False, sym=False, v2=False),
    "tiny-mixtral-gptq": lambda f: build(f, "MixtralForCausalLM", (128, 8, 2, 16, 128, 256, 2), "gptq", 32,
                                         desc_act=True, sym=False, v2=False, experts=4),
    "tiny-mixtral-awq": lambda f: build(f, "MixtralForCausalLM", (128, 8, 2, 16, 192, 256, 2), "awq", 32,
                                        desc_act=False, sym=False, v2=False, experts=4),
}


def safetensors_bytes(tensors):
    """tensors: (name, dtype, shape, data bytes), written in name order."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape, data in sorted(tensors):
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + b"".join(t[3] for t in sorted(tensors))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
    for fixture, make in FIXTURES.items():
        tensors, config = make(fixture)
        g.write_model_dir(out, fixture, safetensors_bytes(tensors), config)


if __name__ == "__main__":
    main()
