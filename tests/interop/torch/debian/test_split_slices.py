"""Every rank's tensors, for every preset fixture and tp in 1, 2, 4, 8, equal slices computed
here with torch from the source, by rules written independently of tpshard's partition code
(the Megatron/vLLM conventions, per model family).  Shards are read with safetensors.safe_open
and torch.  Also: merge output loads with safetensors and equals the source bit for bit."""
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from tap import TOP, TPSHARD

MODELS = os.path.join(TOP, "testdata", "models")
failures = 0


def report(ok, what, detail=""):
    global failures
    print(("ok - " if ok else "not ok - ") + what)
    if not ok:
        failures += 1
        for line in str(detail).splitlines()[:10]:
            print("#   " + line)


def chunk(t, tp, r, dim=0):
    n = t.shape[dim] // tp
    return t.narrow(dim, r * n, n)


def kv_rows(t, kv, hd, tp, r, dim=0):
    """K or V rows for rank r: an even share of heads, or head r*kv//tp when tp > kv (vLLM)."""
    if kv >= tp:
        return chunk(t, tp, r, dim)
    return t.narrow(dim, (r * kv // tp) * hd, hd)


def vocab_rows(t, tp, r):
    per = -(-t.shape[0] // tp)
    rows = t[r * per:(r + 1) * per]
    pad = per - rows.shape[0]
    if pad:
        rows = torch.cat([rows, torch.zeros((pad,) + tuple(t.shape[1:]), dtype=t.dtype)])
    return rows


def expected(family, name, t, cfg, tp, r):
    hd = cfg.get("head_dim") or cfg.get("hidden_size", cfg.get("n_embd")) // cfg.get("num_attention_heads", cfg.get("n_head"))
    kv = cfg.get("num_key_value_heads", cfg.get("num_attention_heads", cfg.get("n_head")))
    nh = cfg.get("num_attention_heads", cfg.get("n_head"))
    if family in ("llama", "mixtral"):
        if "norm" in name or name.endswith("block_sparse_moe.gate.weight"):
            return t
        if "embed_tokens" in name or "lm_head" in name:
            return vocab_rows(t, tp, r)
        if ".q_proj." in name or "gate_proj" in name or "up_proj" in name or ".w1." in name or ".w3." in name:
            return chunk(t, tp, r, 0)
        if ".k_proj." in name or ".v_proj." in name:
            return kv_rows(t, kv, hd, tp, r)
        if "o_proj" in name or "down_proj" in name or ".w2." in name:
            return chunk(t, tp, r, 1)
    if family == "phi3":
        if "norm" in name:
            return t
        if "embed_tokens" in name or "lm_head" in name:
            return vocab_rows(t, tp, r)
        if "qkv_proj" in name:
            q, k, v = torch.split(t, [nh * hd, kv * hd, kv * hd])
            return torch.cat([chunk(q, tp, r), kv_rows(k, kv, hd, tp, r), kv_rows(v, kv, hd, tp, r)])
        if "gate_up_proj" in name:
            g, u = torch.chunk(t, 2)
            return torch.cat([chunk(g, tp, r), chunk(u, tp, r)])
        if "o_proj" in name or "down_proj" in name:
            return chunk(t, tp, r, 1)
    if family == "gpt2":  # Conv1D stores [in, out]
        if ".ln_" in name or "ln_f" in name or "wpe" in name or name.endswith("c_proj.bias"):
            return t
        if "wte" in name:
            return vocab_rows(t, tp, r)
        if "c_attn" in name:
            d = t.dim() - 1
            q, k, v = torch.chunk(t, 3, dim=d)
            return torch.cat([chunk(q, tp, r, d), chunk(k, tp, r, d), chunk(v, tp, r, d)], dim=d)
        if "c_fc" in name:
            return chunk(t, tp, r, t.dim() - 1)
        if "c_proj.weight" in name:
            return chunk(t, tp, r, 0)
    if family == "neox":
        if "layernorm" in name or "layer_norm" in name or name.endswith("dense.bias") or name.endswith("4h_to_h.bias"):
            return t
        if "embed_in" in name or "embed_out" in name:
            return vocab_rows(t, tp, r)
        if "query_key_value" in name or "h_to_4h" in name:
            return chunk(t, tp, r, 0)  # per-head interleaved: whole heads stay together
        if name.endswith("dense.weight") or "4h_to_h.weight" in name:
            return chunk(t, tp, r, 1)
    raise KeyError(f"{family}: no rule in this test for {name}")


FAMILY = {"tiny-llama": "llama", "tiny-llama-split": "llama", "tiny-qwen2": "llama", "tiny-mixtral": "mixtral",
          "tiny-phi3": "phi3", "tiny-gpt2": "gpt2", "tiny-neox": "neox"}


def main():
    for fixture, family in sorted(FAMILY.items()):
        d = os.path.join(MODELS, fixture)
        cfg = json.load(open(os.path.join(d, "config.json")))
        single = os.path.join(d, "model.safetensors")
        src_path = single if os.path.exists(single) else d
        files = [os.path.join(d, f) for f in os.listdir(d) if f.endswith(".safetensors")]
        source = {}
        for f in files:
            source.update(load_file(f))
        nh = cfg.get("num_attention_heads", cfg.get("n_head"))
        for tp in (1, 2, 4, 8):
            if nh % tp:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "s")
                p = subprocess.run([TPSHARD, "split", src_path, "--tp", str(tp), "--preset", family,
                                    "--config", os.path.join(d, "config.json"), "-o", out, "-q"],
                                   capture_output=True, text=True)
                if p.returncode:
                    report(False, f"{fixture} tp {tp}: split", p.stderr)
                    continue
                manifest = json.load(open(os.path.join(out, "tpshard.json")))
                bad = []
                for fe in manifest["files"]:
                    r = fe["rank"]
                    with safe_open(os.path.join(out, fe["name"]), framework="pt") as f:
                        meta = f.metadata()
                        if meta.get("tp_rank") != str(r) or meta.get("tp_size") != str(tp) or meta.get("format") != "pt":
                            bad.append(f"rank {r}: metadata {meta}")
                        if set(f.keys()) != set(source):
                            bad.append(f"rank {r}: tensor names differ from the source")
                            continue
                        for name in f.keys():
                            want = expected(family, name, source[name], cfg, tp, r)
                            got = f.get_tensor(name)
                            if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(
                                    got.view(torch.uint8) if got.dtype != torch.bool else got,
                                    want.contiguous().view(torch.uint8) if want.dtype != torch.bool else want):
                                bad.append(f"rank {r}: {name}: got {tuple(got.shape)}, want {tuple(want.shape)}")
                report(not bad, f"{fixture} tp {tp}: every rank's tensors equal independently computed slices",
                       "\n".join(bad))
                merged = os.path.join(tmp, "merged.safetensors")
                p = subprocess.run([TPSHARD, "merge", out, "-o", merged, "-q"], capture_output=True, text=True)
                m = load_file(merged) if p.returncode == 0 else {}
                same = p.returncode == 0 and set(m) == set(source) and all(
                    torch.equal(m[k].view(torch.uint8), source[k].view(torch.uint8)) for k in source)
                report(same, f"{fixture} tp {tp}: merge output loads with safetensors and equals the source", p.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
