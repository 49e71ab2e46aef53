#!/usr/bin/python3
"""Writes testdata/models/tiny-llama4 (committed; rerun to regenerate) with gen_fixtures.py's
tensor values and file writer (standard library only, values seeded by "fixture:tensor",
BF16 round-to-nearest-even), in transformers' Llama 4 text names and shapes
(Llama4ForCausalLM):

  tiny-llama4  4 layers, interleave_moe_layer_step 2 (layers 1 and 3 MoE, 0 and 2 dense MLPs
               of intermediate_size_mlp 96), 8 heads and 2 KV heads of head_dim 16, no
               biases, 4 experts (top 1) of intermediate 32 fused in
               feed_forward.experts.gate_up_proj [4, 64, 64] ([gate | up] halves) and
               down_proj [4, 32, 64], a shared expert of 32, router [4, 64], vocab 500,
               untied lm_head, BF16

Usage: testdata/gen_llama4.py [OUTDIR]   (default: testdata/models beside this script)
"""
import os
import sys

sys.dont_write_bytecode = True  # nothing left beside the fixtures
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_fixtures as g  # noqa: E402

H, HEADS, KV, HD, INTER, MLP, EXPERTS, VOCAB, LAYERS = 64, 8, 2, 16, 32, 96, 4, 500, 4


def shapes():
    t = [("model.embed_tokens.weight", (VOCAB, H)), ("model.norm.weight", (H,)), ("lm_head.weight", (VOCAB, H))]
    for i in range(LAYERS):
        p = "model.layers.%d." % i
        t += [
            (p + "input_layernorm.weight", (H,)), (p + "post_attention_layernorm.weight", (H,)),
            (p + "self_attn.q_proj.weight", (HEADS * HD, H)), (p + "self_attn.k_proj.weight", (KV * HD, H)),
            (p + "self_attn.v_proj.weight", (KV * HD, H)), (p + "self_attn.o_proj.weight", (H, HEADS * HD)),
        ]
        f = p + "feed_forward."
        if i % 2:
            t += [
                (f + "router.weight", (EXPERTS, H)),
                (f + "experts.gate_up_proj", (EXPERTS, H, 2 * INTER)),
                (f + "experts.down_proj", (EXPERTS, INTER, H)),
                (f + "shared_expert.gate_proj.weight", (INTER, H)), (f + "shared_expert.up_proj.weight", (INTER, H)),
                (f + "shared_expert.down_proj.weight", (H, INTER)),
            ]
        else:
            t += [(f + "gate_proj.weight", (MLP, H)), (f + "up_proj.weight", (MLP, H)), (f + "down_proj.weight", (H, MLP))]
    return t


def config():
    return {
        "architectures": ["Llama4ForCausalLM"], "model_type": "llama4_text", "hidden_size": H,
        "intermediate_size": INTER, "intermediate_size_mlp": MLP, "num_attention_heads": HEADS,
        "num_key_value_heads": KV, "head_dim": HD, "num_hidden_layers": LAYERS, "num_local_experts": EXPERTS,
        "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "vocab_size": VOCAB, "rms_norm_eps": 1e-05,
        "rope_theta": 500000.0, "max_position_embeddings": 4096, "no_rope_layers": [1, 1, 1, 0],
        "use_qk_norm": True, "attention_chunk_size": 8192, "hidden_act": "silu", "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
    g.write_fixture(out, "tiny-llama4", shapes(), config(), "BF16")

if __name__ == "__main__":
    main()
