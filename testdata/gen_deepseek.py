#!/usr/bin/python3
"""Writes the tiny DeepSeek fixtures under testdata/models/ (committed; rerun to regenerate),
with DeepSeek's real tensor names and config.json keys, for the CLI tests that must run where
transformers 4.57 (tests/interop/transformers/torch2/torch2_deepseek.py) is missing:

  tiny-deepseek-v3   DeepseekV3ForCausalLM: hidden 64, 8 heads, q_lora_rank 32, kv_lora_rank 16,
                     qk_nope 8, qk_rope 4, v_head 8; layer 0 dense (intermediate 96), layer 1
                     MoE (4 routed experts of 32 in 2 groups, top 2, 1 shared expert, router and
                     e_score_correction_bias); vocab 200, BF16
  tiny-deepseek-v3-mtp  tiny-deepseek-v3 plus the multi-token-prediction layer released V3/R1
                     checkpoints carry past num_hidden_layers (model.layers.2: a MoE decoder
                     layer, embed_tokens, enorm, hnorm, eh_proj, shared_head.{norm,head})
  tiny-deepseek-v2-lite  DeepseekV2ForCausalLM without q_lora_rank (a plain q_proj), greedy
                     softmax routing, 2 shared experts, F32

Values come from gen_fixtures.py's seeded generator and encoders (standard library only).
Usage: testdata/gen_deepseek.py [OUTDIR]   (default: testdata/models beside this script)
"""
from gen_fixtures import write_fixtures

H, HEADS, NOPE, ROPE, V, KVL, INTER, MOE, E, VOCAB = 64, 8, 8, 4, 8, 16, 96, 32, 4, 200


def shapes(q_lora, shared, layers=2, dense=1, score_bias=True):
    t = [("model.embed_tokens.weight", (VOCAB, H))]
    for i in range(layers):
        p = "model.layers.%d." % i
        a = p + "self_attn."
        t += [(p + "input_layernorm.weight", (H,)), (p + "post_attention_layernorm.weight", (H,))]
        if q_lora:
            t += [(a + "q_a_proj.weight", (q_lora, H)), (a + "q_a_layernorm.weight", (q_lora,)),
                  (a + "q_b_proj.weight", (HEADS * (NOPE + ROPE), q_lora))]
        else:
            t += [(a + "q_proj.weight", (HEADS * (NOPE + ROPE), H))]
        t += [(a + "kv_a_proj_with_mqa.weight", (KVL + ROPE, H)), (a + "kv_a_layernorm.weight", (KVL,)),
              (a + "kv_b_proj.weight", (HEADS * (NOPE + V), KVL)), (a + "o_proj.weight", (H, HEADS * V))]
        mlps = [(p + "mlp.", INTER)] if i < dense else \
            [(p + "mlp.experts.%d." % e, MOE) for e in range(E)] + [(p + "mlp.shared_experts.", MOE * shared)]
        for m, n in mlps:
            t += [(m + "gate_proj.weight", (n, H)), (m + "up_proj.weight", (n, H)), (m + "down_proj.weight", (H, n))]
        if i >= dense:
            t += [(p + "mlp.gate.weight", (E, H))]
            if score_bias:
                t += [(p + "mlp.gate.e_score_correction_bias", (E,))]
    return t + [("model.norm.weight", (H,)), ("lm_head.weight", (VOCAB, H))]


def config(arch, model_type, q_lora, shared, **kw):
    c = {"architectures": [arch], "model_type": model_type, "hidden_size": H, "intermediate_size": INTER,
         "moe_intermediate_size": MOE, "num_attention_heads": HEADS, "num_key_value_heads": HEADS,
         "num_hidden_layers": 2, "vocab_size": VOCAB, "q_lora_rank": q_lora, "kv_lora_rank": KVL,
         "qk_nope_head_dim": NOPE, "qk_rope_head_dim": ROPE, "v_head_dim": V, "head_dim": ROPE,
         "n_routed_experts": E, "num_experts_per_tok": 2, "n_shared_experts": shared, "first_k_dense_replace": 1,
         "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "hidden_act": "silu", "max_position_embeddings": 128,
         "tie_word_embeddings": False}
    c.update(kw)
    return c


def fixture_v3():
    return shapes(32, 1), config("DeepseekV3ForCausalLM", "deepseek_v3", 32, 1, n_group=2, topk_group=1,
                                 routed_scaling_factor=2.5, norm_topk_prob=True, rope_interleave=True,
                                 torch_dtype="bfloat16"), "BF16"


def fixture_v3_mtp():
    t, c, dtype = fixture_v3()
    p = "model.layers.2."
    mtp = [(n, sh) for n, sh in shapes(32, 1, layers=3) if n.startswith(p)]
    mtp += [(p + "embed_tokens.weight", (VOCAB, H)), (p + "enorm.weight", (H,)), (p + "hnorm.weight", (H,)),
            (p + "eh_proj.weight", (H, 2 * H)), (p + "shared_head.norm.weight", (H,)),
            (p + "shared_head.head.weight", (VOCAB, H))]
    c["num_nextn_predict_layers"] = 1
    return t + mtp, c, dtype


def fixture_v2_lite():
    return shapes(None, 2, score_bias=False), config("DeepseekV2ForCausalLM", "deepseek_v2", None, 2, n_group=1,
                                                     topk_group=1, topk_method="greedy", routed_scaling_factor=1.0,
                                                     torch_dtype="float32"), "F32"


FIXTURES = {"tiny-deepseek-v3": fixture_v3, "tiny-deepseek-v3-mtp": fixture_v3_mtp, "tiny-deepseek-v2-lite": fixture_v2_lite}


def main():
    write_fixtures(FIXTURES, "models")


if __name__ == "__main__":
    main()
