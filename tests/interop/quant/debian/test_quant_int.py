"""GPTQ and AWQ checkpoints split exactly as vLLM's parameter classes cut them, with the truth
written here from the specification's rules (quant_ref.py), not taken from tpshard.

Fixtures: testdata/gen_quant_int.py (GPTQ plain and act-order, AWQ at the intermediate-11008
shape, Mixtral GPTQ act-order, Mixtral AWQ).  For each fixture and tp 1, 2, 3, 4, 8:

  * a legal tp (quant_ref.legal_tps: heads, in/T % group, in/T % 8, local out % 8) splits with
    the preset picked from config.json, and every rank's qweight, qzeros, scales and g_idx
    equal the piece of the checkpoint tensor the rules give (including the replicated ones:
    g_idx of column layers, act-order scales/qzeros of row layers), bit for bit; `check`,
    `verify --source --layer all` and `verify --whole-model` pass;
  * an illegal tp is refused (exit 3) naming the tensor, the group size and the tps that work;
  * the Llama fixtures run the whole model the tensor-parallel way in torch from each rank's
    dequantized shards (test_hf_llama_family.tp_forward) and match transformers' forward of
    the dequantized model (LlamaForCausalLM, float32) within 1e-4;
  * merge gives back the source's bytes; reshard to a smaller tp equals split at that tp.

Skips loudly when transformers cannot be imported.
"""
import json
import os
import sys
import tempfile

import tap
from tap import TOP, report, tpshard

sys.dont_write_bytecode = True
MODELS = os.path.join(TOP, "testdata", "models")
FIXTURES = ["tiny-llama-gptq", "tiny-llama-gptq-actorder", "tiny-llama-awq", "tiny-mixtral-gptq", "tiny-mixtral-awq"]
CANDIDATES = (1, 2, 3, 4, 8)
COLUMN = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "w1", "w3")
ROW = ("o_proj", "down_proj", "w2")
TOL = 1e-4


def piece_of(R, name, cfg, qc, r, T):
    """The expected piece (index tuple) of checkpoint tensor `name` on rank r of T, or None
    for a tensor this test does not cut itself (norms, router: replicated, ALL)."""
    base, _, part = name.rpartition(".")
    lin = base.rpartition(".")[2]
    method, g = qc["quant_method"], qc["group_size"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    if lin in COLUMN:
        kv = cfg["num_key_value_heads"] if lin in ("k_proj", "v_proj") else None
        out = {"q_proj": cfg["num_attention_heads"] * hd, "k_proj": cfg["num_key_value_heads"] * hd,
               "v_proj": cfg["num_key_value_heads"] * hd}.get(lin, cfg["intermediate_size"])
        return R.column_pieces(method, part, out, r, T, kv_heads=kv, hd=hd)
    if lin in ROW:
        inp = cfg["num_attention_heads"] * hd if lin == "o_proj" else cfg["intermediate_size"]
        return R.row_pieces(method, part, inp, g, r, T, desc_act=qc.get("desc_act", False))
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        v = cfg["vocab_size"] // T
        return (slice(r * v, (r + 1) * v),)
    return R.ALL


def load_ranks_np(out):
    from safetensors import safe_open
    ranks = {}
    for f in sorted(os.listdir(out)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(out, f), "np") as s:
                r = int(s.metadata()["tp_rank"])
                ranks.setdefault(r, {}).update({k: s.get_tensor(k) for k in s.keys()})
    return [ranks[r] for r in sorted(ranks)]


def rank_dequant(R, np, rank, cfg, qc, r, T):
    """A rank's float weights from its own pieces: GPTQ's global g_idx indexes the rank's
    scales from the first group it holds when a row layer's scales are cut by groups (rank r
    holds groups from r * (in/T) / g), else the whole scales."""
    import torch
    out = {}
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    for name, t in rank.items():
        if name.endswith((".qzeros", ".scales", ".g_idx")):
            continue
        if not name.endswith(".qweight"):
            out[name] = torch.from_numpy(t.astype(np.float32))
            continue
        b = name[:-len(".qweight")]
        lin = b.rpartition(".")[2]
        qz, sc = rank[b + ".qzeros"], rank[b + ".scales"]
        if qc["quant_method"] == "awq":
            w = R.awq_dequant(t, qz, sc)
        else:
            g_idx = rank[b + ".g_idx"].astype(np.int64)
            if lin in ROW and not qc["desc_act"] and qc["group_size"] != -1:
                inp = cfg["num_attention_heads"] * hd if lin == "o_proj" else cfg["intermediate_size"]
                g_idx = g_idx - r * (inp // T) // qc["group_size"]
            w = R.gptq_dequant(t, qz, sc, g_idx, v2=qc.get("checkpoint_format") == "gptq_v2")
        out[b + ".weight"] = torch.from_numpy(w.astype(np.float32))
    return out


class Cfg:
    def __init__(self, d):
        self.__dict__.update(d)


def main():
    early = tap.transformers_tier("quant_int")
    if early is not None:
        return early
    import numpy as np
    import torch
    from safetensors.numpy import load_file
    import quant_ref as R
    import test_hf_llama_family as L
    torch.set_num_threads(2)
    ids = torch.tensor([3, 97, 41, 0, 99, 12, 64, 88, 5, 70, 23, 50, 96, 1, 33, 77, 200, 255])
    with tempfile.TemporaryDirectory() as tmp:
        for fx in FIXTURES:
            src = os.path.join(MODELS, fx)
            cfg = json.load(open(os.path.join(src, "config.json")))
            qc = cfg["quantization_config"]
            full = load_file(os.path.join(src, "model.safetensors"))
            hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
            legal = R.legal_tps(qc["quant_method"], qc["group_size"], cfg["hidden_size"], cfg["num_attention_heads"],
                                cfg["num_key_value_heads"], hd, cfg["intermediate_size"], candidates=CANDIDATES)
            moe = "num_local_experts" in cfg
            if not moe:
                from transformers import LlamaConfig, LlamaForCausalLM
                hcfg = LlamaConfig(**{k: v for k, v in cfg.items() if k != "quantization_config"})
                model = LlamaForCausalLM(hcfg).float().eval()
                sd = rank_dequant(R, np, full, cfg, qc, 0, 1)
                model.load_state_dict(sd, strict=True)
                want = L.hf_logits(model, ids)
                cos, sin = L.rotary(model, len(ids))
            for T in CANDIDATES:
                os.makedirs(os.path.join(tmp, fx), exist_ok=True)
                out = os.path.join(tmp, fx, "tp%d" % T)
                r = tpshard("split", src, "--tp", T, "-o", out, "-q")
                if T not in legal:
                    # refused by the quantization alone (the heads and sizes divide): the cause
                    # is a rank's piece inside a group or packed word
                    by_quant = T in R.legal_tps(qc["quant_method"], 1, cfg["hidden_size"], cfg["num_attention_heads"],
                                                cfg["num_key_value_heads"], hd, cfg["intermediate_size"], pf=1,
                                                candidates=CANDIDATES)
                    report(r.returncode == 3 and (not by_quant or "%s group size %d" % (qc["quant_method"].upper(), qc["group_size"]) in r.stderr
                                                           or "packed %d to a word" % (32 // qc["bits"]) in r.stderr) and
                           "tp values that fit: " + ", ".join(map(str, legal)) in r.stderr,
                           "%s tp %d: refused (exit 3)%s, listing the tps that work (%s)"
                           % (fx, T, " naming the quantization block" if by_quant else "", ", ".join(map(str, legal))),
                           "exit %d\n%s" % (r.returncode, r.stderr))
                    continue
                if not report(r.returncode == 0, "%s tp %d: split (preset from config.json)" % (fx, T), r.stderr):
                    continue
                ranks = load_ranks_np(out)
                bad = []
                for name, t in full.items():
                    for rk in range(T):
                        piece = piece_of(R, name, cfg, qc, rk, T)
                        got = ranks[rk].get(name)
                        if got is None or got.dtype != t.dtype or not np.array_equal(got, t[piece]):
                            bad.append("rank %d %s: %s" % (rk, name, "absent" if got is None else
                                                           "shape %s, want %s" % (got.shape, t[piece].shape)))
                report(not bad, "%s tp %d: every rank's tensors are the pieces vLLM's parameter classes cut "
                       "(g_idx whole on column layers%s)" % (fx, T, ", act-order scales/qzeros whole on row layers"
                                                             if qc.get("desc_act") else ""), "\n".join(bad[:8]))
                c = tpshard("check", out, "-q")
                report(c.returncode == 0, "%s tp %d: check passes" % (fx, T), c.stdout + c.stderr)
                v = tpshard("verify", out, "--source", src, "--layer", "all", "-q")
                report(v.returncode == 0, "%s tp %d: verify --source --layer all passes (dequantized)" % (fx, T),
                       v.stdout + v.stderr)
                w = tpshard("verify", out, "--whole-model", "-q")
                report(w.returncode == 0, "%s tp %d: verify --whole-model passes" % (fx, T), w.stdout + w.stderr)
                if not moe:
                    deq = [rank_dequant(R, np, ranks[rk], cfg, qc, rk, T) for rk in range(T)]
                    got = L.tp_forward(deq, Cfg(dict(cfg, head_dim=hd)), ids, cos, sin)
                    diff = float((got - want).abs().max())
                    report(diff <= TOL, "%s tp %d: the TP forward from the dequantized shard files equals "
                           "transformers' logits of the dequantized model (max abs %.2g)" % (fx, T, diff))
            # merge and reshard
            top = max(legal)
            m = os.path.join(tmp, fx, "merged.safetensors")
            r = tpshard("merge", os.path.join(tmp, fx, "tp%d" % top), "-o", m, "-q")
            ok = r.returncode == 0
            if ok:
                got = load_file(m)
                ok = sorted(got) == sorted(full) and all(got[k].dtype == full[k].dtype and
                                                         np.array_equal(got[k], full[k]) for k in full)
            report(ok, "%s: merge of the tp %d set gives back every tensor bit for bit" % (fx, top), r.stderr)
            if len(legal) > 2:
                lower = legal[-2]
                rs = os.path.join(tmp, fx, "reshard%d" % lower)
                r = tpshard("reshard", os.path.join(tmp, fx, "tp%d" % top), "--tp", lower, "-o", rs, "-q")
                ok = r.returncode == 0
                if ok:
                    a, b = load_ranks_np(rs), load_ranks_np(os.path.join(tmp, fx, "tp%d" % lower))
                    ok = len(a) == len(b) and all(sorted(x) == sorted(y) and all(np.array_equal(x[k], y[k]) for k in x)
                                                  for x, y in zip(a, b))
                report(ok, "%s: reshard %d -> %d equals split at %d" % (fx, top, lower, lower), r.stderr)
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
