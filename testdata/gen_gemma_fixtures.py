#!/usr/bin/python3
"""Writes the Gemma fixtures under testdata/models/ (committed; rerun to regenerate), with
gen_fixtures.py's tensor values and file writer, so the same rules hold (standard library
only, values seeded by "fixture:tensor", BF16 round-to-nearest-even):

  tiny-gemma   Gemma: 8 heads and 1 KV head (multi-query, as Gemma-2B) of head_dim 16 where
               hidden / heads is 8, tied embedding (no lm_head.weight), vocab 500, BF16
  tiny-gemma2  Gemma 2: 4 layers with sandwich norms (pre/post_feedforward_layernorm), 4 KV
               heads of head_dim 16 (replicated at tp 8), attn/final logit soft-capping, query_pre_attn_scalar 24,
               sliding_window 4 (below verify's 16 tokens, so the even layers' window binds),
               tied embedding, vocab 500, BF16

Usage: testdata/gen_gemma_fixtures.py [OUTDIR]   (default: testdata/models beside this script)
"""
import os
import sys

sys.dont_write_bytecode = True  # nothing left beside the fixtures
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_fixtures as g  # noqa: E402

H, HEADS, HD, INTER, VOCAB = 64, 8, 16, 96, 500


def config(arch, model_type, kv, layers, **extra):
    c = {
        "architectures": [arch], "model_type": model_type, "hidden_size": H, "intermediate_size": INTER,
        "num_attention_heads": HEADS, "num_key_value_heads": kv, "head_dim": HD, "num_hidden_layers": layers,
        "vocab_size": VOCAB, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "max_position_embeddings": 128,
        "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh", "attention_bias": False,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    }
    c.update(extra)
    return c


def fixture_gemma():
    shapes = g.llama_like("model.layers", H, HEADS, 1, HD, INTER, VOCAB, 2, tied=True)
    return shapes, config("GemmaForCausalLM", "gemma", 1, 2), "BF16"


def fixture_gemma2():
    layers = 4
    shapes = g.llama_like("model.layers", H, HEADS, 4, HD, INTER, VOCAB, layers, tied=True)
    for i in range(layers):
        p = "model.layers.%d." % i
        shapes += [(p + "pre_feedforward_layernorm.weight", (H,)), (p + "post_feedforward_layernorm.weight", (H,))]
    return shapes, config("Gemma2ForCausalLM", "gemma2", 4, layers, query_pre_attn_scalar=24, sliding_window=4,
                          attn_logit_softcapping=2.0, final_logit_softcapping=3.0,
                          cache_implementation="hybrid"), "BF16"


FIXTURES = {"tiny-gemma": fixture_gemma, "tiny-gemma2": fixture_gemma2}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
    for fixture, make in FIXTURES.items():
        shapes, cfg, dtype = make()
        tensors = [(name, shape, g.encode(g.tensor_values(fixture, name, shape), dtype)) for name, shape in shapes]
        d = os.path.join(out, fixture)
        os.makedirs(d, exist_ok=True)
        data = g.safetensors_bytes(tensors, dtype)
        assert len(data) < 1 << 20, (fixture, len(data))
        g.write(os.path.join(d, "model.safetensors"), data)
        g.write_config(d, cfg)


if __name__ == "__main__":
    main()
