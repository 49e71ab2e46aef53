"""Truth from outside for `--target vllm` / `--target sglang` on the families transformers 4.46
lacks (the torch-2 tier, transformers 4.57): Qwen3, Qwen3-MoE, Gemma 3 text, and Gemma 2
(which the torch 1.13 tier's test_vllm_sharded_state.py does not cover).

The engines' side is tests/interop/vllm/vllm_emul.py, written from vLLM's and SGLang's sources
(qwen3.py, qwen3_moe.py, gemma2.py, gemma3.py, the weight loaders of linear.py,
vocab_parallel_embedding.py and fused_moe, ShardedStateLoader.load_weights and save_model),
not from tpshard's code.  For tiny models built with transformers' own classes (random weights,
norms and q/k norms included) at tp 1, 2, 4, 8 (the KV heads, 2, are replicated at 4 and 8;
Qwen3-MoE's 4 experts stop it at 4, the tp vLLM refuses above num_experts):

  * `split --target vllm`: the loader emulation takes every rank's files: exactly the expected
    keys, exact shapes, bit-equal values in the model's dtype (one Qwen3 case in bfloat16),
    vLLM's attention scale buffers (self_attn.attn._k_scale, _v_scale, _q_scale, _prob_scale,
    0-d float32 1.0, every family's attention being vLLM's Attention class) in every layer;
    `--target-version 0.13` writes none, and each release class's loader refuses the other's;
  * the tensor-parallel forward run from those fused per-rank tensors alone (each rank's
    qkv_proj, gate_up_proj, w13_weight and w2_weight split by the engine's per-rank sizes,
    the padded vocabulary's logits dropped) equals transformers' logits (<= 1e-4);
  * `check --source` passes and config.json is copied beside the rank files; at tp 4 `verify
    --layer all` and `--whole-model` pass on the target set;
  * `--target sglang`: SGLang's loader takes the set for Qwen3 and Qwen3-MoE (SGLang's qwen3.py
    and qwen3_moe.py hold vLLM's parameters, without the scale buffers); refused (exit 3) for Gemma 2 and Gemma 3, whose
    SGLang models hold what a target cannot write today (Gemma 3's embedding a plain
    nn.Embedding, whole on every rank, kept as lm_head.weight; Gemma 2's persistent
    model.normalizer buffer);
  * reshard between tps equals split at the new tp, and merge of a target set is the source
    bit for bit;
  * a set vLLM saved itself (vllm_emul.save_sharded_state, at tp 4: KV heads replicated, the
    scale buffers included) is
    adopted: inspect and check take it, reshard 4 -> 2 equals split at tp 2, merge is the
    source bit for bit;
  * a Gemma 3 multimodal checkpoint (Gemma3ForConditionalGeneration) is refused for both
    targets (exit 3, nothing written): vLLM's gemma3_mm.py cuts SigLIP's attention and MLP
    by heads and columns (siglip.py) where the preset keeps them whole.

The loader emulation and the forward are shown to fail on wrong sets: tpshard's own set
(separate q/k/v names), the vocabulary padded to a multiple of tp only, KV heads dealt
round-robin.

Skips loudly when transformers cannot be imported (tests/interop/setup_torch2.sh).
"""
import os
import sys

import torch

import hf_tier as hf
import vllm_emul as ve
from hf_tier import IDS, report, tpshard
from test_vllm_sharded_state import release_classes

BASE = dict(vocab_size=100, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=64, rms_norm_eps=1e-6)
G3 = dict(BASE, num_hidden_layers=6, query_pre_attn_scalar=24, sliding_window=4, rope_theta=1e6,
          rope_local_base_freq=1e4, rope_scaling={"rope_type": "linear", "factor": 8.0})
G2 = dict(BASE, num_hidden_layers=4, query_pre_attn_scalar=24, sliding_window=4, attn_logit_softcapping=1.5,
          final_logit_softcapping=2.5)


def cases():
    """(name, config, dtype)."""
    from transformers import Gemma2Config, Gemma3TextConfig, Qwen3Config, Qwen3MoeConfig
    moe = dict(BASE, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, norm_topk_prob=True)
    return [
        ("qwen3-bf16", Qwen3Config(**dict(BASE, attention_bias=False)), torch.bfloat16),
        ("qwen3-tied", Qwen3Config(**dict(BASE, head_dim=8, tie_word_embeddings=True)), torch.float32),
        ("qwen3-moe", Qwen3MoeConfig(**dict(moe, num_hidden_layers=3, mlp_only_layers=[1])), torch.float32),
        ("qwen3-moe-tied", Qwen3MoeConfig(**dict(moe, tie_word_embeddings=True)), torch.float32),
        ("gemma2", Gemma2Config(**G2), torch.float32),
        ("gemma3-text-bias", Gemma3TextConfig(**dict(G3, attention_bias=True)), torch.float32),
    ]


def build(cfg, dtype, seed, path):
    """The HF tensors saved at path in dtype, and the model in float32 holding exactly those
    values (what the forward is compared with).  Gemma's norms scale by (1 + w): drawn around
    zero."""
    gemma = ve.is_gemma(cfg)
    return hf.build_in_dtype(cfg, seed, path, dtype, norm=(0, 0.3) if gemma else (1.0, 0.2),
                             bias=0.3 if gemma else 0.2)


def forward_of(cfg, model):
    """The family's tensor-parallel forward over ranks under Hugging Face names."""
    if cfg.model_type == "gemma2":
        from test_hf_gemma_family import tp_forward
        return lambda ranks: tp_forward(ranks, cfg, IDS)
    if cfg.model_type == "gemma3_text":
        from torch2_gemma3 import tp_forward
        return lambda ranks: tp_forward(ranks, cfg, "model.", IDS)
    cos, sin = hf.rotary(model, len(IDS))
    if cfg.model_type == "qwen3_moe":
        from test_hf_qwen2_moe import tp_forward
    else:
        from torch2_qwen3_olmo2 import tp_forward
    return lambda ranks: tp_forward(ranks, cfg, IDS, cos, sin)


def fused_forward(d, cfg, T, forward):
    return forward([ve.unfuse(R, cfg, T) for R in ve.rank_tensors(d, T)])


def legal_tps(cfg):
    return [t for t in hf.legal_tps(cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size,
                                    getattr(cfg, "moe_intermediate_size", cfg.intermediate_size))
            if t <= (getattr(cfg, "num_experts", None) or t)]


def run_case(tmp, seed, name, cfg, dtype):
    src = os.path.join(tmp, name)
    tensors, model = build(cfg, dtype, seed, src)
    want = hf.logits(model, IDS, use_cache=False)
    forward = forward_of(cfg, model)
    tps = legal_tps(cfg)
    worst, detail = 0.0, []
    for T in tps:
        out = ve.split_vllm(tmp, name, src, tensors, cfg, dtype, T)
        if out is None:
            continue
        diff = float((fused_forward(out, cfg, T, forward) - want).abs().max())
        worst = max(worst, diff)
        detail.append("tp %d: max abs logit difference %.3g" % (T, diff))
        if T == 4:  # above the KV heads: verify splits the fused tensors back into their roles
            for args in (("--layer", "all"), ("--whole-model",)):
                p = tpshard("verify", out, "--source", src, *args, "-q")
                report(p.returncode == 0, "%s tp %d: verify %s passes on the target set" % (name, T, " ".join(args)),
                       "exit %d\n%s%s" % (p.returncode, p.stdout, p.stderr))
        sg = os.path.join(tmp, "%s-sglang-%d" % (name, T))
        p = tpshard("split", src, "--tp", T, "--target", "sglang", "-o", sg, "-q")
        if ve.is_gemma(cfg):
            why = "model.normalizer" if cfg.model_type == "gemma2" else "whole and unpadded"
            report(p.returncode == 3 and "--target sglang is refused" in p.stderr and why in p.stderr
                   and not os.path.exists(sg), "%s tp %d: --target sglang refused (exit 3, nothing written), "
                   "naming %s" % (name, T, why),
                   "exit %d: %s" % (p.returncode, p.stderr))
        else:  # SGLang's RadixAttention has no scale buffers
            probs = ve.loads(sg, tensors, cfg, T, dtype, engine="sglang") if p.returncode == 0 else [p.stderr]
            report(not probs, "%s tp %d: SGLang's loader takes the --target sglang set (no scale buffers)" % (name, T),
                   "\n".join(probs[:10]))
    report(worst <= hf.TOL, "%s: the TP forward from the fused per-rank tensors equals transformers' logits at tp %s "
           "(max abs difference %.2g <= %g)" % (name, ",".join(map(str, tps)), worst, hf.TOL), "\n".join(detail))
    ve.reshard_ring(tmp, name, tps)
    T = tps[-1]
    release_classes(tmp, name, src, tensors, cfg, dtype, T)  # test_vllm_sharded_state's
    merged = os.path.join(tmp, "%s-merged.safetensors" % name)
    p = tpshard("merge", os.path.join(tmp, "%s-vllm-%d" % (name, T)), "-o", merged, "-q")
    report(p.returncode == 0 and ve.is_source(merged, tensors),
           "%s: merge of the tp %d vLLM set is the source, bit-exact" % (name, T), p.stderr)
    return src, tensors, want, forward


def saved_by_engine(tmp, name, src, tensors, cfg, dtype, T=4, to=2):
    """A set the engine saved itself (vllm_emul.save_sharded_state: the saver's de-duplication,
    parts of at most 1500 bytes with an empty part 0, no __metadata__, the source's config.json
    and a stale weight index beside it) at tp T, above the KV heads: inspect and check take it,
    reshard to tp `to` equals split at that tp, the loader takes the result, merge is the
    source bit for bit."""
    import shutil
    d = os.path.join(tmp, "%s-saved-%d" % (name, T))
    os.makedirs(d)
    ve.save_sharded_state(d, [ve.engine_state_dict(tensors, cfg, T, r) for r in range(T)], 1500)
    shutil.copy(os.path.join(src, "config.json"), d)
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        f.write('{"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors"}}')
    p = tpshard("inspect", d)
    report(p.returncode == 0 and "sharded_state set saved by the engine" in p.stdout,
           "%s: inspect shows a vLLM-saved set at tp %d" % (name, T), p.stdout[-2000:] + p.stderr)
    p = tpshard("check", d)
    report(p.returncode == 0, "%s: check passes on the vLLM-saved set" % name, p.stdout[-2000:] + p.stderr)
    out = os.path.join(tmp, "%s-saved-re%d" % (name, to))
    p = tpshard("reshard", d, "--tp", to, "--target", "vllm", "-o", out, "-q")
    if report(p.returncode == 0, "%s: reshard of the vLLM-saved set %d -> %d" % (name, T, to), p.stderr):
        diff = ve.same_sets(out, os.path.join(tmp, "%s-vllm-%d" % (name, to)), to)
        report(not diff, "%s: reshard %d -> %d equals split --tp %d --target vllm, byte for byte" % (name, T, to, to),
               diff)
        probs = ve.loads(out, tensors, cfg, to, dtype)
        report(not probs, "%s: vLLM's loader takes the resharded set" % name, "\n".join(probs[:10]))
    merged = os.path.join(tmp, "%s-saved-merged.safetensors" % name)
    p = tpshard("merge", d, "-o", merged, "-q")
    report(p.returncode == 0 and ve.is_source(merged, tensors),
           "%s: merge of the vLLM-saved set is the source, bit-exact" % name, p.stderr)


def wrong_sets(tmp, name, src, tensors, cfg, want, forward):
    """The emulation and the forward catch wrong sets (T 8: the vocabulary's 128 padded rows
    are 16 a rank, where a multiple of tp pads to 104, 13 a rank; the KV heads replicated)."""
    T = 8
    plain = os.path.join(tmp, "%s-plain" % name)
    p = tpshard("split", src, "--tp", T, "--name-template", "model-rank-{rank}-part-{part}.safetensors", "-o", plain,
                "-q")
    probs = ve.loads(plain, tensors, cfg, T, torch.float32) if p.returncode == 0 else [p.stderr]
    report(any("KeyError" in x and "q_proj" in x for x in probs),
           "%s: wrong set caught: separate q/k/v names (tpshard's own set)" % name, "\n".join(probs[:3]))
    wrong = os.path.join(tmp, "%s-wrong-vocab" % name)
    ve.write_wrong(wrong, T, lambda r: ve.expected(tensors, cfg, T, r, vocab_quantum=T))
    probs = ve.loads(wrong, tensors, cfg, T, torch.float32)
    report(any(("lm_head.weight: shape" in x or "embed_tokens.weight: shape" in x) for x in probs),
           "%s: wrong set caught: the vocabulary padded to a multiple of tp only" % name, "\n".join(probs[:3]))
    wrong = os.path.join(tmp, "%s-wrong-kv" % name)
    ve.write_wrong(wrong, T, lambda r: ve.expected(tensors, cfg, T, r, kv_shard=lambda r: r % cfg.num_key_value_heads))
    probs = ve.loads(wrong, tensors, cfg, T, torch.float32)
    diff = float((fused_forward(wrong, cfg, T, forward) - want).abs().max())
    report(any("qkv_proj.weight: values differ" in x for x in probs) and diff > 100 * hf.TOL,
           "%s: wrong set caught: KV heads dealt round-robin (the loader's bytes differ, the TP forward differs from "
           "transformers' by %.2g)" % (name, diff), "\n".join(probs[:3]))


def multimodal_refused(tmp):
    from torch2_gemma3 import BASE as GB, build as gbuild
    from transformers import Gemma3Config, Gemma3TextConfig, SiglipVisionConfig
    vision = SiglipVisionConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2,
                                image_size=28, patch_size=14)
    cfg = Gemma3Config(text_config=Gemma3TextConfig(**GB), vision_config=vision, mm_tokens_per_image=4,
                       image_token_index=99, boi_token_index=97, eoi_token_index=98)
    src = os.path.join(tmp, "gemma3-mm")
    gbuild(cfg, 5, src)
    for target in ("vllm", "sglang"):
        out = os.path.join(tmp, "gemma3-mm-" + target)
        p = tpshard("split", src, "--tp", 2, "--target", target, "-o", out)
        why = "SigLIP" if target == "vllm" else "whole and unpadded"
        report(p.returncode == 3 and "gemma3: --target %s is refused" % target in p.stderr and why in p.stderr
               and not os.path.exists(out),
               "Gemma 3 multimodal: --target %s refused (exit 3, nothing written), naming %s" % (target, why),
               "exit %d: %s" % (p.returncode, p.stderr))


def body(tmp):
    for seed, (name, cfg, dtype) in enumerate(cases()):
        src, tensors, want, forward = run_case(tmp, seed, name, cfg, dtype)
        saved_by_engine(tmp, name, src, tensors, cfg, dtype)
        if name in ("qwen3-tied", "gemma3-text-bias"):
            wrong_sets(tmp, name, src, tensors, cfg, want, forward)
    multimodal_refused(tmp)


def main():
    return hf.main("torch2_vllm_targets", body, needs="Qwen3MoeConfig")


if __name__ == "__main__":
    sys.exit(main())
