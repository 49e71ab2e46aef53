#!/usr/bin/python3
"""Writes the tiny models that the example layouts in testdata/layouts/ are tested on
(committed; rerun to regenerate), so the worked example of a hand-written layout in
docs/layouts.md runs against real tensor names:

  tiny-falcon   Falcon-7B's names and config.json keys: fused query_key_value with
                multi-query attention ([Q heads; one K head; one V head]), one LayerNorm
                shared by the parallel attention and MLP branches, no linear biases,
                hidden 64, 8 heads, head_dim 8, 2 layers, vocab 1001, BF16

Only the standard library is used (the value and encoding helpers of gen_fixtures.py), so
the fixtures do not depend on tpshard.

Usage: testdata/gen_layout_fixtures.py [OUTDIR]   (default: testdata/layouts beside this script)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_fixtures import write_fixtures  # noqa: E402


def fixture_falcon():
    h, heads, hd, layers, vocab = 64, 8, 8, 2, 1001
    shapes = {"transformer.word_embeddings.weight": [vocab, h], "lm_head.weight": [vocab, h],
              "transformer.ln_f.weight": [h], "transformer.ln_f.bias": [h]}
    for i in range(layers):
        p = "transformer.h.%d." % i
        shapes.update({p + "input_layernorm.weight": [h], p + "input_layernorm.bias": [h],
                       p + "self_attention.query_key_value.weight": [(heads + 2) * hd, h],
                       p + "self_attention.dense.weight": [h, heads * hd],
                       p + "mlp.dense_h_to_4h.weight": [4 * h, h],
                       p + "mlp.dense_4h_to_h.weight": [h, 4 * h]})
    # Falcon-7B's config.json: no num_key_value_heads (multi_query says there is one), no
    # intermediate_size (4 * hidden).
    config = {"architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": h,
              "num_attention_heads": heads, "num_hidden_layers": layers, "vocab_size": vocab,
              "multi_query": True, "new_decoder_architecture": False, "parallel_attn": True, "bias": False,
              "alibi": False, "layer_norm_epsilon": 1e-5, "rope_theta": 10000.0, "torch_dtype": "bfloat16"}
    return list(shapes.items()), config, "BF16"


FIXTURES = {"tiny-falcon": fixture_falcon}


def main():
    write_fixtures(FIXTURES, "layouts")


if __name__ == "__main__":
    main()
