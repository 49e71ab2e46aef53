#!/usr/bin/python3
"""Writes testdata/models/tiny-gpt-oss (committed; rerun to regenerate) with gen_fixtures.py's
tensor values and file writer (standard library only, values seeded by "fixture:tensor",
BF16 round-to-nearest-even), in transformers 4.57's GPT-OSS names and shapes:

  tiny-gpt-oss  2 layers (sliding_attention, full_attention; sliding_window 4, below
                verify's 16 tokens, so layer 0's window binds), 8 heads and 2 KV heads of
                head_dim 16 where hidden / heads is 8, q/k/v/o biases, attention sinks
                [heads] (of order 1), 4 experts (top 2) of intermediate 32 fused in mlp.experts.gate_up_proj
                [4, 64, 64] (gate/up interleaved) and down_proj [4, 32, 64] with biases, router
                weight and bias, RoPE yarn with truncate false, vocab 500, untied lm_head, BF16

Usage: testdata/gen_gpt_oss.py [OUTDIR]   (default: testdata/models beside this script)
"""
import os
import sys

sys.dont_write_bytecode = True  # nothing left beside the fixtures
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_fixtures as g  # noqa: E402

H, HEADS, KV, HD, INTER, EXPERTS, VOCAB, LAYERS = 64, 8, 2, 16, 32, 4, 500, 2


def shapes():
    t = [("model.embed_tokens.weight", (VOCAB, H)), ("model.norm.weight", (H,)), ("lm_head.weight", (VOCAB, H))]
    for i in range(LAYERS):
        p = "model.layers.%d." % i
        t += [
            (p + "input_layernorm.weight", (H,)), (p + "post_attention_layernorm.weight", (H,)),
            (p + "self_attn.q_proj.weight", (HEADS * HD, H)), (p + "self_attn.q_proj.bias", (HEADS * HD,)),
            (p + "self_attn.k_proj.weight", (KV * HD, H)), (p + "self_attn.k_proj.bias", (KV * HD,)),
            (p + "self_attn.v_proj.weight", (KV * HD, H)), (p + "self_attn.v_proj.bias", (KV * HD,)),
            (p + "self_attn.o_proj.weight", (H, HEADS * HD)), (p + "self_attn.o_proj.bias", (H,)),
            (p + "self_attn.sinks", (HEADS,)),
            (p + "mlp.router.weight", (EXPERTS, H)), (p + "mlp.router.bias", (EXPERTS,)),
            (p + "mlp.experts.gate_up_proj", (EXPERTS, H, 2 * INTER)),
            (p + "mlp.experts.gate_up_proj_bias", (EXPERTS, 2 * INTER)),
            (p + "mlp.experts.down_proj", (EXPERTS, INTER, H)),
            (p + "mlp.experts.down_proj_bias", (EXPERTS, H)),
        ]
    return t


def values(fixture, name, shape):
    # Trained sinks are logits of order 1, not weights of order 0.05: scaled so that a sink
    # given to the wrong head changes the attention beyond verify's BF16 tolerance.
    v = g.tensor_values(fixture, name, shape)
    return [g.f32(x * 20) for x in v] if name.endswith(".sinks") else v


def config():
    return {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": H,
        "intermediate_size": INTER, "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": HD,
        "num_hidden_layers": LAYERS, "num_local_experts": EXPERTS, "num_experts_per_tok": 2, "vocab_size": VOCAB,
        "rms_norm_eps": 1e-05, "rope_theta": 150000.0, "max_position_embeddings": 16384,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
                         "truncate": False, "original_max_position_embeddings": 4096},
        "sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"], "attention_bias": True,
        "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
    fixture = "tiny-gpt-oss"
    tensors = [(name, shape, g.encode(values(fixture, name, shape), "BF16")) for name, shape in shapes()]
    g.write_model_dir(out, fixture, g.safetensors_bytes(tensors, "BF16"), config())

if __name__ == "__main__":
    main()
