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
  tiny-gemma3_text  Gemma 3 (Gemma3ForCausalLM): 6 layers with per-head q_norm / k_norm,
               layer_types local except layers 2 and 5 (not the pattern of 6), sliding_window 4,
               rope_local_base_freq 10000 on the local layers, rope_theta 1e6 with linear
               rope_scaling 8 on the global ones, 2 KV heads, tied embedding, vocab 500, BF16
  tiny-gemma3  the same language model as Gemma3ForConditionalGeneration saves it (under
               language_model.model., config.json keys in text_config, no layer_types: the
               pattern of 6 decides), beside a one-layer SigLIP vision tower and the projector

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


GEMMA3 = dict(query_pre_attn_scalar=24, sliding_window=4, rope_theta=1e6, rope_local_base_freq=10000.0,
              rope_scaling={"rope_type": "linear", "factor": 8.0}, attn_logit_softcapping=None,
              final_logit_softcapping=None)


def gemma3_shapes(prefix, layers):
    shapes = g.llama_like("model.layers", H, HEADS, 2, HD, INTER, VOCAB, layers, tied=True)
    for i in range(layers):
        p = "model.layers.%d." % i
        shapes += [(p + "pre_feedforward_layernorm.weight", (H,)), (p + "post_feedforward_layernorm.weight", (H,)),
                   (p + "self_attn.q_norm.weight", (HD,)), (p + "self_attn.k_norm.weight", (HD,))]
    return [(prefix + name, shape) for name, shape in shapes]


def fixture_gemma3_text():
    types = ["sliding_attention"] * 6
    types[2] = types[5] = "full_attention"
    return gemma3_shapes("", 6), config("Gemma3ForCausalLM", "gemma3_text", 2, 6, layer_types=types,
                                        **GEMMA3), "BF16"


def fixture_gemma3():
    V, VI = 32, 48  # SigLIP: hidden 32 in 2 heads, 28x28 images of 14x14 patches
    shapes = gemma3_shapes("language_model.", 6)
    v = "vision_tower.vision_model."
    shapes += [(v + "embeddings.patch_embedding.weight", (V, 3, 14, 14)), (v + "embeddings.patch_embedding.bias", (V,)),
               (v + "embeddings.position_embedding.weight", (4, V)), (v + "post_layernorm.weight", (V,)),
               (v + "post_layernorm.bias", (V,))]
    p = v + "encoder.layers.0."
    for name in ("layer_norm1", "layer_norm2"):
        shapes += [(p + name + ".weight", (V,)), (p + name + ".bias", (V,))]
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        shapes += [(p + "self_attn." + name + ".weight", (V, V)), (p + "self_attn." + name + ".bias", (V,))]
    shapes += [(p + "mlp.fc1.weight", (VI, V)), (p + "mlp.fc1.bias", (VI,)), (p + "mlp.fc2.weight", (V, VI)),
               (p + "mlp.fc2.bias", (V,)), ("multi_modal_projector.mm_input_projection_weight", (V, H)),
               ("multi_modal_projector.mm_soft_emb_norm.weight", (V,))]
    text = config("Gemma3ForCausalLM", "gemma3_text", 2, 6, **GEMMA3)
    del text["architectures"], text["torch_dtype"]
    cfg = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": text,
           "vision_config": {"model_type": "siglip_vision_model", "hidden_size": V, "intermediate_size": VI,
                             "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 28, "patch_size": 14,
                             "vision_use_head": False},
           "mm_tokens_per_image": 4, "boi_token_index": 497, "eoi_token_index": 498, "image_token_index": 499,
           "torch_dtype": "bfloat16"}
    return shapes, cfg, "BF16"


FIXTURES = {"tiny-gemma": fixture_gemma, "tiny-gemma2": fixture_gemma2, "tiny-gemma3_text": fixture_gemma3_text,
            "tiny-gemma3": fixture_gemma3}


def main():
    g.write_fixtures(FIXTURES, "models")


if __name__ == "__main__":
    main()
