"""FP8 block-scaled DeepSeek-V3 under `split --target vllm` (the torch-2 tier: torch 2's
float8_e4m3fn).  The CPU build of vLLM cannot construct an FP8 block-scaled model ("Failed to
find a kernel that can implement the ScaledMM linear layer"), so the set is judged by vLLM's
slicing rules, written here from its source (model_executor/models/deepseek_v2.py,
layers/linear.py's weight loaders with block quantization: a scale's rows and columns are the
weight's divided by the block, rounded up; fused_moe's block-quantized w13/w2 scales) and by
dequantized values:

  * every rank's tensors are exactly these, computed from the source alone (testdata's
    tiny-deepseek-v3-fp8, blocks of 8x8): the replicated fused_qkv_a_proj [q_a_proj;
    kv_a_proj_with_mqa] and its weight_scale_inv [q_a's scale rows; kv_a's]; q_b_proj and
    kv_b_proj by rows (heads), o_proj by columns, each scale by the same blocks; experts'
    w13 = [gate rows of the rank; up rows of the rank] per expert and w13_weight_scale_inv the
    same in block rows, w2 by columns; the shared experts' and the dense layer's gate_up_proj
    likewise;
  * each rank's weight times its scale (expanded over the blocks) equals the source's
    dequantized weight's slice, for every FP8 tensor;
  * check --source, verify --layer all and --whole-model pass; reshard 2 -> 4 equals split
    --tp 4; merge is the source bit for bit; a family whose mapping carries no scales (Llama
    FP8) is still refused.  (A set without tpshard.json, as an engine would save it, is not
    adopted for FP8 yet.)
"""
import os
import sys

import torch

import hf_tier as hf
import tap
import vllm_emul as ve
from hf_tier import report, tpshard

SRC = os.path.join(tap.TOP, "testdata", "models", "tiny-deepseek-v3-fp8")
BS = 8


def dequant(w, s):
    """A block-scaled FP8 weight in float32: each BSxBS block times its scale."""
    x = s.repeat_interleave(BS, 0)[: w.shape[0]].repeat_interleave(BS, 1)[:, : w.shape[1]]
    return w.float() * x


def rows(t, r, T):
    """Rank r's rows of t (a weight's, or its scale's block rows: the tp divides both here)."""
    n = t.shape[0] // T
    return t[r * n:(r + 1) * n]


def cols(t, r, T):
    n = t.shape[1] // T
    return t[:, r * n:(r + 1) * n]


def expected(S, cfg, r, T):
    """Rank r's vLLM tensors (weights and scales) from the source tensors S."""
    out = {}

    def cut(name, how):  # a weight and its scale, cut alike (the scale by block rows/columns)
        out[name + ".weight"] = how(S[name + ".weight"])
        out[name + ".weight_scale_inv"] = how(S[name + ".weight_scale_inv"])
    for L in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % L
        a = p + "self_attn."
        for k in ("weight", "weight_scale_inv"):
            out[a + "fused_qkv_a_proj." + k] = torch.cat([S[a + "q_a_proj." + k], S[a + "kv_a_proj_with_mqa." + k]])
        for name in ("q_b_proj", "kv_b_proj"):
            cut(a + name, lambda t: rows(t, r, T))
        cut(a + "o_proj", lambda t: cols(t, r, T))
        for k in ("weight", "weight_scale_inv"):
            out[a + "mla_attn.q_b_proj." + k] = out.pop(a + "q_b_proj." + k)
            out[a + "mla_attn.o_proj." + k] = out.pop(a + "o_proj." + k)
        if L < cfg["first_k_dense_replace"]:
            m = p + "mlp."
            for k in ("weight", "weight_scale_inv"):
                out[m + "gate_up_proj." + k] = torch.cat([rows(S[m + "gate_proj." + k], r, T),
                                                      rows(S[m + "up_proj." + k], r, T)])
                out[m + "down_proj." + k] = cols(S[m + "down_proj." + k], r, T)
            continue
        m = p + "mlp."
        E = cfg["n_routed_experts"]
        for k, suffix in (("weight", ""), ("weight_scale_inv", "_scale_inv")):
            e = [m + "experts.%d." % i for i in range(E)]
            out[m + "experts.routed_experts.w13_weight" + suffix] = torch.stack(
                [torch.cat([rows(S[x + "gate_proj." + k], r, T), rows(S[x + "up_proj." + k], r, T)]) for x in e])
            out[m + "experts.routed_experts.w2_weight" + suffix] = torch.stack(
                [cols(S[x + "down_proj." + k], r, T) for x in e])
            sh, into = m + "shared_experts.", m + "experts._shared_experts._layer."
            out[into + "gate_up_proj." + k] = torch.cat([rows(S[sh + "gate_proj." + k], r, T),
                                                        rows(S[sh + "up_proj." + k], r, T)])
            out[into + "down_proj." + k] = cols(S[sh + "down_proj." + k], r, T)
    return out


def body(tmp):
    import json
    from safetensors.torch import load_file
    S = load_file(os.path.join(SRC, "model.safetensors"))
    with open(os.path.join(SRC, "config.json")) as f:
        cfg = json.load(f)
    for T in (1, 2, 4):
        out = os.path.join(tmp, "fp8-vllm-%d" % T)
        p = tpshard("split", SRC, "--tp", T, "--target", "vllm", "-o", out, "-q")
        if not report(p.returncode == 0, "deepseek-v3 fp8: split --tp %d --target vllm" % T, p.stderr):
            continue
        R = ve.rank_tensors(out, T)
        bad, n = [], 0
        for r in range(T):
            for name, want in expected(S, cfg, r, T).items():
                got = R[r].get(name)
                if got is None or got.dtype != want.dtype or not torch.equal(ve.raw(got), ve.raw(want.contiguous())):
                    bad.append("rank %d %s: %s" % (r, name, "missing" if got is None else
                                                  "%s %s, expected %s %s" % (got.dtype, list(got.shape), want.dtype,
                                                                             list(want.shape))))
                elif name.endswith("weight") and got.dtype == torch.float8_e4m3fn:
                    n += 1
        report(not bad and n > 0, "deepseek-v3 fp8 tp %d: every rank holds vLLM's block-quantized parameters, weights "
               "and scales cut by the engine's rules (%d FP8 tensors)" % (T, n), "\n".join(bad[:10]))
        # dequantized values: rank weight x rank scale == slice of the dequantized source
        D = {k[: -len("_scale_inv")]: dequant(S[k[: -len("_scale_inv")]], v) for k, v in S.items()
             if k.endswith("weight_scale_inv")}
        worst = 0.0
        for r in range(T):
            want = expected(dict(S, **D), cfg, r, T)
            for name, w in R[r].items():
                if w.dtype != torch.float8_e4m3fn:
                    continue
                s = R[r][name + "_scale_inv"]
                mine = torch.stack([dequant(w[i], s[i]) for i in range(w.shape[0])]) if w.dim() == 3 else dequant(w, s)
                worst = max(worst, float((mine - want[name].float()).abs().max()))
        report(worst == 0.0, "deepseek-v3 fp8 tp %d: each rank's weight times its scale equals the source's "
               "dequantized slice (max abs difference %g)" % (T, worst))
        p = tpshard("check", out, "--source", SRC)
        report(p.returncode == 0, "deepseek-v3 fp8 tp %d: check --source passes" % T, p.stdout[-1500:] + p.stderr)
        for args in (("--layer", "all"), ("--whole-model",)):
            p = tpshard("verify", out, *args, "-q")
            report(p.returncode == 0, "deepseek-v3 fp8 tp %d: verify %s passes on the target set (dequantizing)"
                   % (T, args[0]), p.stdout[-1500:] + p.stderr)
        merged = out + "-merged.safetensors"
        p = tpshard("merge", out, "-o", merged, "-q")
        report(p.returncode == 0 and ve.is_source(merged, S), "deepseek-v3 fp8 tp %d: merge is the source bit for bit"
               % T, p.stderr)
    # reshard keeps the target: 2 -> 4 equals split --tp 4 --target vllm
    two, four = os.path.join(tmp, "fp8-vllm-2"), os.path.join(tmp, "fp8-vllm-4")
    p = tpshard("reshard", two, "--tp", 4, "-o", two + "-re4", "-q")
    diff = ve.same_sets(two + "-re4", four, 4) if p.returncode == 0 else p.stderr
    report(not diff, "deepseek-v3 fp8: reshard 2 -> 4 equals split --tp 4 --target vllm, byte for byte", diff)
    p = tpshard("split", os.path.join(tap.TOP, "testdata", "models", "tiny-llama-fp8"), "--tp", 2, "--target", "vllm",
                "-o", os.path.join(tmp, "llama-fp8"))
    report(p.returncode == 3 and "does not carry its scales" in p.stderr and not os.path.exists(os.path.join(tmp, "llama-fp8")),
           "llama fp8 --target vllm: refused, its mapping carries no scales (exit 3, nothing written)", p.stderr)


def main():
    return hf.main("torch2_deepseek_fp8_vllm", body)


if __name__ == "__main__":
    sys.exit(main())
