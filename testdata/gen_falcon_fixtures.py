#!/usr/bin/python3
"""Writes tiny-falcon40, the Falcon-40B-style model the falcon preset's CLI tests cut
(committed; rerun to regenerate):

  tiny-falcon40   Falcon-40B's names and config.json keys (new_decoder_architecture):
                  query_key_value per KV group [4 q heads; k; v] for 2 groups, ln_attn and
                  ln_mlp feeding the parallel attention and MLP, linear biases (bias: true),
                  tied lm_head (no lm_head.weight), hidden 64, 8 heads, head_dim 8,
                  2 layers, vocab 257, BF16

Only the standard library is used (the value and encoding helpers of gen_fixtures.py), so
the fixture does not depend on tpshard.

Usage: testdata/gen_falcon_fixtures.py [OUTDIR]   (default: testdata/models beside this script)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_fixtures import write_fixtures  # noqa: E402


def fixture_falcon40():
    h, heads, kv, hd, layers, vocab = 64, 8, 2, 8, 2, 257
    shapes = {"transformer.word_embeddings.weight": [vocab, h],
              "transformer.ln_f.weight": [h], "transformer.ln_f.bias": [h]}
    for i in range(layers):
        p = "transformer.h.%d." % i
        for ln in ("ln_attn", "ln_mlp"):
            shapes.update({p + ln + ".weight": [h], p + ln + ".bias": [h]})
        shapes.update({p + "self_attention.query_key_value.weight": [(heads + 2 * kv) * hd, h],
                       p + "self_attention.query_key_value.bias": [(heads + 2 * kv) * hd],
                       p + "self_attention.dense.weight": [h, heads * hd],
                       p + "self_attention.dense.bias": [h],
                       p + "mlp.dense_h_to_4h.weight": [4 * h, h], p + "mlp.dense_h_to_4h.bias": [4 * h],
                       p + "mlp.dense_4h_to_h.weight": [h, 4 * h], p + "mlp.dense_4h_to_h.bias": [h]})
    # As FalconConfig.save_pretrained writes it: num_kv_heads counts the groups because
    # new_decoder_architecture is true; no intermediate size (4 * hidden).
    config = {"architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": h,
              "num_attention_heads": heads, "num_kv_heads": kv, "num_hidden_layers": layers,
              "vocab_size": vocab, "multi_query": True, "new_decoder_architecture": True, "parallel_attn": True,
              "bias": True, "alibi": False, "layer_norm_epsilon": 1e-5, "rope_theta": 10000.0,
              "tie_word_embeddings": True, "torch_dtype": "bfloat16"}
    return list(shapes.items()), config, "BF16"


FIXTURES = {"tiny-falcon40": fixture_falcon40}


def main():
    write_fixtures(FIXTURES, "models")


if __name__ == "__main__":
    main()
