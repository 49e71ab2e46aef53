"""tpshard verify's float64 reference against PyTorch.

For every bundled tiny model, `tpshard verify --source SRC --dump-reference FILE` writes the
random inputs and its float64 attention and MLP block outputs for every layer.  This test
computes the same layers in float64 with torch from the source weights (read by the real
safetensors package) and the model's config.json, written from the Hugging Face modeling
code of each family (LlamaAttention/LlamaMLP, Qwen2, Phi3, GPT2Attention/GPT2MLP with
Conv1D, GPTNeoXAttention with partial rotary and parallel residual, MixtralSparseMoeBlock),
not from tpshard's code, and compares.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

import tap
from tap import TOP, TPSHARD, report, tpshard
MODELS = os.path.join(TOP, "testdata", "models")


def load_weights(model):
    d = os.path.join(MODELS, model)
    index = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    w = {}
    for f in files:
        w.update({k: v.to(torch.float64) for k, v in load_file(os.path.join(d, f)).items()})
    return w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope(x, theta, rot):
    """HF apply_rotary_pos_emb on the first rot dims of x [T, heads, hd] (NeoX partial)."""
    t = x.shape[0]
    inv = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
    freqs = torch.outer(torch.arange(t, dtype=torch.float64), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    xr, xp = x[..., :rot], x[..., rot:]
    return torch.cat((xr * cos + rotate_half(xr) * sin, xp), dim=-1)


def attention(q, k, v):
    """q [T, H, hd], k/v [T, KV, hd]: causal softmax attention with GQA (repeat_kv)."""
    t, h, hd = q.shape
    k = k.repeat_interleave(h // k.shape[1], dim=1)
    v = v.repeat_interleave(h // v.shape[1], dim=1)
    s = torch.einsum("thd,shd->hts", q, k) / math.sqrt(hd)
    s = s.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
    return torch.einsum("hts,shd->thd", s.softmax(-1), v).reshape(t, h * hd)


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def llama_like(w, c, x, p, fused=False):
    hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    h, kv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    eps, theta = c["rms_norm_eps"], c.get("rope_theta", 10000.0)
    xn = rms(x, w[p + "input_layernorm.weight"], eps)
    if fused:
        qkv = F.linear(xn, w[p + "self_attn.qkv_proj.weight"])
        q, k, v = qkv.split([h * hd, kv * hd, kv * hd], dim=-1)
    else:
        b = lambda n: w.get(p + "self_attn.%s_proj.bias" % n)
        q, k, v = (F.linear(xn, w[p + "self_attn.%s_proj.weight" % n], b(n)) for n in "qkv")
    t = x.shape[0]
    q, k, v = q.view(t, h, hd), k.view(t, kv, hd), v.view(t, kv, hd)
    q, k = rope(q, theta, hd), rope(k, theta, hd)
    a = F.linear(attention(q, k, v), w[p + "self_attn.o_proj.weight"])
    hn = rms(x + a, w[p + "post_attention_layernorm.weight"], eps)
    if "num_local_experts" in c:
        e_n, k_n = c["num_local_experts"], c["num_experts_per_tok"]
        probs = F.linear(hn, w[p + "block_sparse_moe.gate.weight"]).softmax(-1)
        top, idx = probs.topk(k_n, dim=-1)
        top = top / top.sum(-1, keepdim=True)
        m = torch.zeros_like(hn)
        for e in range(e_n):
            ep = p + "block_sparse_moe.experts.%d." % e
            y = F.linear(F.silu(F.linear(hn, w[ep + "w1.weight"])) * F.linear(hn, w[ep + "w3.weight"]), w[ep + "w2.weight"])
            m += y * (top * (idx == e)).sum(-1, keepdim=True)
        return a, m
    if fused:
        g, u = F.linear(hn, w[p + "mlp.gate_up_proj.weight"]).chunk(2, dim=-1)
    else:
        g, u = F.linear(hn, w[p + "mlp.gate_proj.weight"]), F.linear(hn, w[p + "mlp.up_proj.weight"])
    return a, F.linear(F.silu(g) * u, w[p + "mlp.down_proj.weight"])


def gpt2(w, c, x, p):
    e, h, eps = c["n_embd"], c["n_head"], c["layer_norm_epsilon"]
    hd, t = e // h, x.shape[0]
    ln = lambda y, n: F.layer_norm(y, (e,), w[p + n + ".weight"], w[p + n + ".bias"], eps)
    conv = lambda y, n: y @ w[p + n + ".weight"] + w[p + n + ".bias"]  # Conv1D: [in, out]
    q, k, v = conv(ln(x, "ln_1"), "attn.c_attn").split(e, dim=-1)
    a = conv(attention(q.view(t, h, hd), k.view(t, h, hd), v.view(t, h, hd)), "attn.c_proj")
    m = conv(F.gelu(conv(ln(x + a, "ln_2"), "mlp.c_fc"), approximate="tanh"), "mlp.c_proj")
    return a, m


def neox(w, c, x, p):
    e, h, eps = c["hidden_size"], c["num_attention_heads"], c["layer_norm_eps"]
    hd, t = e // h, x.shape[0]
    rot = int(hd * c["rotary_pct"])
    ln = lambda y, n: F.layer_norm(y, (e,), w[p + n + ".weight"], w[p + n + ".bias"], eps)
    lin = lambda y, n: F.linear(y, w[p + n + ".weight"], w[p + n + ".bias"])
    qkv = lin(ln(x, "input_layernorm"), "attention.query_key_value").view(t, h, 3 * hd)
    q, k, v = qkv[..., :hd], qkv[..., hd:2 * hd], qkv[..., 2 * hd:]
    base = c.get("rotary_emb_base", 10000)
    q, k = rope(q, base, rot), rope(k, base, rot)
    a = lin(attention(q, k, v), "attention.dense")
    mlp_in = ln(x if c.get("use_parallel_residual", True) else x + a, "post_attention_layernorm")
    m = lin(F.gelu(lin(mlp_in, "mlp.dense_h_to_4h")), "mlp.dense_4h_to_h")
    return a, m


CASES = [
    ("tiny-llama", "llama", lambda w, c, x, l: llama_like(w, c, x, "model.layers.%d." % l)),
    ("tiny-qwen2", "llama", lambda w, c, x, l: llama_like(w, c, x, "model.layers.%d." % l)),
    ("tiny-phi3", "phi3", lambda w, c, x, l: llama_like(w, c, x, "model.layers.%d." % l, fused=True)),
    ("tiny-mixtral", "mixtral", lambda w, c, x, l: llama_like(w, c, x, "model.layers.%d." % l)),
    ("tiny-gpt2", "gpt2", lambda w, c, x, l: gpt2(w, c, x, "transformer.h.%d." % l)),
    ("tiny-neox", "neox", lambda w, c, x, l: neox(w, c, x, "gpt_neox.layers.%d." % l)),
]


def rel(a, b):
    return float((a - b).norm() / b.norm())


def worst_rel(dump, w, c, fn):
    worst = 0.0
    for L in json.load(open(dump))["layers"]:
        a, m = fn(w, c, torch.tensor(L["x"], dtype=torch.float64), L["layer"])
        worst = max(worst, rel(torch.tensor(L["attention"], dtype=torch.float64), a),
                    rel(torch.tensor(L["mlp"], dtype=torch.float64), m))
    return worst


def recorded_config(tmp):
    """A shard set carries the config.json keys it was split with: verify of the set on its
    own, after the source's config.json changed, still computes with the split-time values."""
    import shutil
    model, fn = "tiny-llama", CASES[0][2]
    src = os.path.join(tmp, "cfg-src")
    shutil.copytree(os.path.join(MODELS, model), src)
    original = json.load(open(os.path.join(src, "config.json")))
    altered = dict(original, rope_theta=500000.0, rms_norm_eps=0.25)
    json.dump(altered, open(os.path.join(src, "config.json"), "w"))
    shards = os.path.join(tmp, "cfg-alone", "set")
    os.makedirs(os.path.dirname(shards))
    r = subprocess.run([TPSHARD, "split", src, "--tp", "2", "--preset", "llama", "-o", shards, "-q"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return report(False, "recorded config: split", r.stderr)
    json.dump(original, open(os.path.join(src, "config.json"), "w"))  # the source's config moves on
    dump = os.path.join(tmp, "cfg.json")
    r = subprocess.run([TPSHARD, "verify", shards, "--tokens", "5", "--seed", "4", "--dump-reference", dump,
                        "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        return report(False, "recorded config: verify", r.stdout + r.stderr)
    block = json.loads(r.stdout)["block"]
    w = load_weights(model)
    with_altered, with_original = worst_rel(dump, w, altered, fn), worst_rel(dump, w, original, fn)
    report(block["rope_theta"] == 500000 and block["norm_eps"] == 0.25 and with_altered < 1e-10 and with_original > 1e-6,
           "verify of a shard set alone uses the config keys recorded at split time (rope_theta 500000, eps 0.25: "
           "rel err %.2g; with the source's current config.json it would be %.2g)" % (with_altered, with_original),
           "block: %s" % block)


def main():
    if not os.access(TPSHARD, os.X_OK):
        print("not ok - tpshard binary missing at " + TPSHARD)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        recorded_config(tmp)
        for model, preset, fn in CASES:
            src = os.path.join(MODELS, model)
            shards = os.path.join(tmp, model)
            dump = os.path.join(tmp, model + ".json")
            r = subprocess.run([TPSHARD, "split", src, "--tp", "2", "--preset", preset, "--config",
                                os.path.join(src, "config.json"), "-o", shards, "-q"], capture_output=True, text=True)
            if r.returncode != 0:
                report(False, model + ": split", r.stderr)
                continue
            r = subprocess.run([TPSHARD, "verify", shards, "--source", src, "--tokens", "7", "--seed", "3",
                                "--dump-reference", dump, "-q"], capture_output=True, text=True)
            if r.returncode != 0:
                report(False, model + ": verify --dump-reference", r.stderr)
                continue
            c = json.load(open(os.path.join(src, "config.json")))
            w = load_weights(model)
            layers = json.load(open(dump))["layers"]
            worst, detail = 0.0, []
            for L in layers:
                x = torch.tensor(L["x"], dtype=torch.float64)
                a, m = fn(w, c, x, L["layer"])
                for name, mine, theirs in (("attention", torch.tensor(L["attention"], dtype=torch.float64), a),
                                           ("mlp", torch.tensor(L["mlp"], dtype=torch.float64), m)):
                    e = rel(mine, theirs)
                    worst = max(worst, e)
                    detail.append("layer %d %s: rel err %.3g, |ref| %.3g" % (L["layer"], name, e, float(theirs.norm())))
            ok = len(layers) == c.get("num_hidden_layers", c.get("n_layer")) and worst < 1e-10
            report(ok, "%s: tpshard's float64 reference equals torch float64 on every layer (worst rel err %.2g)"
                   % (model, worst), "\n".join(detail))
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
