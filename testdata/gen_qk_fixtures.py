#!/usr/bin/python3
"""Writes the fixtures of the families with q/k norms under testdata/models/ (committed;
rerun to regenerate), with their real Hugging Face tensor names and config.json keys:

  tiny-qwen3   Qwen3: per-head self_attn.q_norm / k_norm ([head_dim]), head_dim 16 where
               hidden / heads is 8, 8 heads, 2 KV heads, tied embeddings (no lm_head.weight),
               no q/k/v biases, BF16
  tiny-olmo2   OLMo 2: q_norm over the whole q projection ([heads * head_dim]) and k_norm over
               the whole k projection ([kv_heads * head_dim]), no input norms, each block's
               output normalized before its residual add (post_attention_layernorm,
               post_feedforward_layernorm), 8 heads, 2 KV heads, untied lm_head, BF16

Weights are drawn as gen_fixtures.py draws them (norm weights around 1).  Only the standard
library is used.

Usage: testdata/gen_qk_fixtures.py [OUTDIR]   (default: testdata/models beside this script)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_fixtures  # noqa: E402  (beside this script; standard library only)


def fixture_qwen3():
    h, heads, kv, hd, inter, vocab, layers = 64, 8, 2, 16, 128, 500, 2
    t = gen_fixtures.llama_like("model.layers", h, heads, kv, hd, inter, vocab, layers, tied=True)
    for i in range(layers):
        p = "model.layers.%d.self_attn." % i
        t += [(p + "q_norm.weight", (hd,)), (p + "k_norm.weight", (hd,))]
    config = {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": h,
        "intermediate_size": inter, "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
        "num_hidden_layers": layers, "vocab_size": vocab, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "max_position_embeddings": 128, "hidden_act": "silu", "attention_bias": False,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    }
    return t, config, "BF16"


def fixture_olmo2():
    h, heads, kv, hd, inter, vocab, layers = 64, 8, 2, 8, 128, 600, 2
    t = [("model.embed_tokens.weight", (vocab, h))]
    for i in range(layers):
        p = "model.layers.%d." % i
        t += [
            (p + "self_attn.q_proj.weight", (heads * hd, h)),
            (p + "self_attn.k_proj.weight", (kv * hd, h)),
            (p + "self_attn.v_proj.weight", (kv * hd, h)),
            (p + "self_attn.o_proj.weight", (h, heads * hd)),
            (p + "self_attn.q_norm.weight", (heads * hd,)),
            (p + "self_attn.k_norm.weight", (kv * hd,)),
            (p + "post_attention_layernorm.weight", (h,)),
            (p + "mlp.gate_proj.weight", (inter, h)),
            (p + "mlp.up_proj.weight", (inter, h)),
            (p + "mlp.down_proj.weight", (h, inter)),
            (p + "post_feedforward_layernorm.weight", (h,)),
        ]
    t += [("model.norm.weight", (h,)), ("lm_head.weight", (vocab, h))]
    config = {
        "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "hidden_size": h,
        "intermediate_size": inter, "num_attention_heads": heads, "num_key_value_heads": kv,
        "num_hidden_layers": layers, "vocab_size": vocab, "rms_norm_eps": 1e-06, "rope_theta": 500000.0,
        "max_position_embeddings": 128, "hidden_act": "silu", "attention_bias": False,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }
    return t, config, "BF16"


FIXTURES = {"tiny-qwen3": fixture_qwen3, "tiny-olmo2": fixture_olmo2}


def main():
    gen_fixtures.write_fixtures(FIXTURES, "models")


if __name__ == "__main__":
    main()
