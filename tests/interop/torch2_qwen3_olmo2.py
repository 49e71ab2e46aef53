"""Truth from outside for Qwen3 (dense) and OLMo 2: Hugging Face transformers (4.57 on torch 2;
4.46 has neither family).

Each case builds a tiny model with transformers' own classes (Qwen3Config, Olmo2Config; every
parameter drawn again under torch.manual_seed, norms and q/k norms included; nothing
downloaded), saves it with save_pretrained, splits it with auto-detection (no --preset: the
preset comes from config.json's architectures) at every legal tp of 1, 2, 4, 8, and then:

  * runs the whole model the tensor-parallel way in torch, fed only each rank's shard file
    (the rank from the file's tp_rank metadata): vocabulary-parallel embedding summed over
    ranks; in every layer each rank's attention and MLP partial sums, all-reduced (summed);
    Qwen3's q/k norm per head on each rank; OLMo 2's q/k norm over the whole projection by
    an all-gather of the ranks' q and k (one copy of each replicated KV head), the norm of
    the full vectors, and each rank keeping its part, as vLLM's Olmo2Attention does; OLMo 2's
    post-block norms after the all-reduce; the final norm and the gathered LM head without
    its padding.  The logits must equal transformers' forward within 1e-4 (float32, eager
    attention);
  * requires `tpshard verify SET --source SRC --layer all` and `--whole-model` to exit 0;
  * compares verify's float64 layer reference (--dump-reference) with transformers' decoder
    layer in float64, which ties verify's q/k norm math to the library's.

Variants: GQA with tp above the KV heads (K/V replicated at tp 4, 8), head_dim != hidden /
heads, Qwen3 with tied embeddings.

The test can fail: K/V heads dealt round-robin (Qwen3), and OLMo 2's q_norm / k_norm cut with
the heads instead of replicated (an engine then normalizes each rank's part alone) give sets
whose bytes are intact (`tpshard check` passes), while the torch forward differs from
transformers' and `tpshard verify` exits 1.
"""
import json
import math
import os
import sys
import tempfile
import time

import torch

import tap
from tap import report, tpshard

TPS = (1, 2, 4, 8)
TOL = 1e-4
BASE = dict(vocab_size=100, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6)


def cases():
    from transformers import Olmo2Config, Qwen3Config
    return [
        ("qwen3-gqa-head-dim-16", Qwen3Config(**dict(BASE, head_dim=16))),  # hidden / heads is 8
        ("qwen3-tied", Qwen3Config(**dict(BASE, head_dim=8, tie_word_embeddings=True))),
        ("olmo2-gqa", Olmo2Config(**BASE)),
        ("olmo2-head-dim-16", Olmo2Config(**dict(BASE, head_dim=16))),
    ]


def build(cfg, seed, path):
    """transformers' model with every parameter drawn again: its init leaves norms at one."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").float().eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.normal_(0, 1 / math.sqrt(p.shape[1]))
    model.save_pretrained(path, safe_serialization=True)
    return model


def head_dim(cfg):
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def legal_tps(cfg):
    heads, kv, inter = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size
    return [t for t in TPS if heads % t == 0 and inter % t == 0 and (kv % t == 0 or t % kv == 0)]


def load_ranks(outdir):
    from safetensors import safe_open
    ranks = {}
    for f in sorted(os.listdir(outdir)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(outdir, f), "pt") as s:
                meta = s.metadata()
                r, size = int(meta["tp_rank"]), int(meta["tp_size"])
                ranks.setdefault(r, {}).update({k: s.get_tensor(k) for k in s.keys()})
    assert sorted(ranks) == list(range(size)), "ranks %s of %d" % (sorted(ranks), size)
    return [ranks[r] for r in range(size)]


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def olmo2_qk(ranks, qs, ks, p, eps, kv):
    """OLMo 2's q/k norm under TP: all-gather q and k ([n, local] per rank), normalize the full
    vectors, give each rank its part back.  With K/V replicated (tp > kv) ranks r and r + 1..
    hold the same KV head: the gather takes one copy of each.  A rank whose q_norm slice is
    not the whole vector (a cut weight) is normalized alone, as an engine that skips the
    gather would."""
    T = len(ranks)
    whole = [R[p + "self_attn.q_norm.weight"].shape[0] == sum(q.shape[1] for q in qs) for R in ranks]
    if not all(whole):
        return ([rms(q, R[p + "self_attn.q_norm.weight"], eps) for q, R in zip(qs, ranks)],
                [rms(k, R[p + "self_attn.k_norm.weight"], eps) for k, R in zip(ks, ranks)])
    q_full = rms(torch.cat(qs, dim=1), ranks[0][p + "self_attn.q_norm.weight"], eps)
    owners = range(T) if kv >= T else range(0, T, T // kv)
    k_full = rms(torch.cat([ks[r] for r in owners], dim=1), ranks[0][p + "self_attn.k_norm.weight"], eps)
    q_out, k_out, q0 = [], [], 0
    for r in range(T):
        q_out.append(q_full[:, q0:q0 + qs[r].shape[1]])
        q0 += qs[r].shape[1]
        first = r * ks[r].shape[1] if kv >= T else (r * kv // T) * ks[r].shape[1]
        k_out.append(k_full[:, first:first + ks[r].shape[1]])
    return q_out, k_out


def tp_forward(ranks, cfg, ids, cos, sin):
    """The whole model from the ranks' slices alone (local query head j reads local KV head
    j * kv_local // q_local)."""
    olmo2 = cfg.model_type == "olmo2"
    n, H, hd, eps = ids.shape[0], cfg.hidden_size, head_dim(cfg), cfg.rms_norm_eps
    rows = ranks[0]["model.embed_tokens.weight"].shape[0]
    x = torch.zeros(n, H)
    for r, R in enumerate(ranks):
        local = ids - r * rows
        hit = (local >= 0) & (local < rows)
        x[hit] += R["model.embed_tokens.weight"][local[hit]]
    causal = torch.full((n, n), float("-inf")).triu(1)
    for layer in range(cfg.num_hidden_layers):
        p = "model.layers.%d." % layer
        xns = [x if olmo2 else rms(x, R[p + "input_layernorm.weight"], eps) for R in ranks]
        qs = [xn @ R[p + "self_attn.q_proj.weight"].T for xn, R in zip(xns, ranks)]
        ks = [xn @ R[p + "self_attn.k_proj.weight"].T for xn, R in zip(xns, ranks)]
        if olmo2:
            qs, ks = olmo2_qk(ranks, qs, ks, p, eps, cfg.num_key_value_heads)
        attn = torch.zeros(n, H)
        for R, xn, q, k in zip(ranks, xns, qs, ks):
            q, k = q.view(n, -1, hd), k.view(n, -1, hd)
            if not olmo2:  # Qwen3: each head by itself
                q, k = rms(q, R[p + "self_attn.q_norm.weight"], eps), rms(k, R[p + "self_attn.k_norm.weight"], eps)
            q, k = q.transpose(0, 1), k.transpose(0, 1)
            v = (xn @ R[p + "self_attn.v_proj.weight"].T).view(n, -1, hd).transpose(0, 1)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            kv_of = [j * k.shape[0] // q.shape[0] for j in range(q.shape[0])]
            k, v = k[kv_of], v[kv_of]
            w = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(hd) + causal, dim=-1)
            attn += (w @ v).transpose(0, 1).reshape(n, -1) @ R[p + "self_attn.o_proj.weight"].T  # all-reduce
        x = x + (rms(attn, ranks[0][p + "post_attention_layernorm.weight"], eps) if olmo2 else attn)
        mlp = torch.zeros(n, H)
        for R in ranks:
            hn = x if olmo2 else rms(x, R[p + "post_attention_layernorm.weight"], eps)
            a = torch.nn.functional.silu(hn @ R[p + "mlp.gate_proj.weight"].T) * (hn @ R[p + "mlp.up_proj.weight"].T)
            mlp += a @ R[p + "mlp.down_proj.weight"].T
        x = x + (rms(mlp, ranks[0][p + "post_feedforward_layernorm.weight"], eps) if olmo2 else mlp)
    x = rms(x, ranks[0]["model.norm.weight"], eps)
    head = "lm_head.weight" if "lm_head.weight" in ranks[0] else "model.embed_tokens.weight"
    return torch.cat([x @ R[head].T for R in ranks], dim=1)[:, :cfg.vocab_size]


def rotary(model, n):
    cos, sin = model.model.rotary_emb(torch.zeros(1, n, 1), torch.arange(n)[None])
    return cos[0], sin[0]


def hf_logits(model, ids):
    with torch.no_grad():
        return model(ids[None]).logits[0]


def check_reference(name, model, cfg, shards):
    """verify's float64 layer reference against transformers' decoder layer in float64."""
    dump = os.path.join(os.path.dirname(shards), name + ".ref.json")
    r = tpshard("verify", shards, "--tokens", 7, "--seed", 3, "--dump-reference", dump, "-q")
    if r.returncode != 0:
        return report(False, "%s: verify --dump-reference" % name, r.stdout + r.stderr)
    m64 = type(model)(cfg).double().eval()
    m64.load_state_dict(model.state_dict())
    m64.double()
    olmo2 = cfg.model_type == "olmo2"
    worst = 0.0
    for L in json.load(open(dump))["layers"]:
        x = torch.tensor(L["x"], dtype=torch.float64)[None]
        n = x.shape[1]
        mask = torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)[None, None]
        layer = m64.model.layers[L["layer"]]
        cos, sin = m64.model.rotary_emb(x, torch.arange(n)[None])
        with torch.no_grad():
            xin = x if olmo2 else layer.input_layernorm(x)
            a = layer.self_attn(hidden_states=xin, attention_mask=mask, position_embeddings=(cos, sin))[0]
            if olmo2:
                a = layer.post_attention_layernorm(a)
                m = layer.post_feedforward_layernorm(layer.mlp(x + a))
            else:
                m = layer.mlp(layer.post_attention_layernorm(x + a))
        a, m = a[0], m[0]
        worst = max(worst, float((torch.tensor(L["attention"], dtype=torch.float64) - a).norm() / a.norm()),
                    float((torch.tensor(L["mlp"], dtype=torch.float64) - m).norm() / m.norm()))
    return report(worst < 1e-5, "%s: verify's float64 layer reference equals transformers' decoder layer "
                  "(worst rel err %.2g)" % (name, worst))


def wrong_layouts(preset):
    """(name, yaml text, what it does wrong) for a preset with one rule put first."""
    text = tpshard("layout", "--preset", preset).stdout
    if preset == "qwen3":
        # two segments of half the KV heads: rank r of 2 gets heads r and r + kv/2
        rule = ('  - match: "model.layers.*.self_attn.{k_proj,v_proj}.weight"\n    split: column\n'
                '    segments:\n      - {name: a, size: kv_heads/2*head_dim, unit: head_dim}\n'
                '      - {name: b, size: kv_heads/2*head_dim, unit: head_dim}\n')
        what = "K/V heads dealt round-robin"
    else:
        rule = '  - match: "model.layers.*.self_attn.{q_norm,k_norm}.weight"\n    split: column\n    unit: head_dim\n'
        what = "q_norm/k_norm cut with the heads"
    return preset + "-wrong", text.replace("rules:\n", "rules:\n" + rule, 1), what


def main():
    early = tap.transformers_tier("torch2_qwen3_olmo2")
    if early is not None:
        return early
    import transformers
    torch.set_num_threads(2)
    t0 = time.time()
    ids = torch.tensor([3, 97, 41, 0, 99, 12, 64, 88, 5, 70, 23, 50, 96, 1, 33, 77])
    arch = {"qwen3": "Qwen3ForCausalLM", "olmo2": "Olmo2ForCausalLM"}
    with tempfile.TemporaryDirectory() as tmp:
        for seed, (name, cfg) in enumerate(cases()):
            src = os.path.join(tmp, name, "src")
            model = build(cfg, seed, src)
            want = hf_logits(model, ids)
            cos, sin = rotary(model, len(ids))
            detail, worst, done = [], 0.0, []
            for t in legal_tps(cfg):
                out = os.path.join(tmp, name, "tp%d" % t)
                r = tpshard("split", src, "--tp", t, "-o", out)
                said = "layout: preset %s, from %s architectures %s" % (cfg.model_type, os.path.join(src, "config.json"),
                                                                       arch[cfg.model_type])
                if r.returncode != 0 or said not in r.stderr:
                    report(False, "%s: split --tp %d auto-detects preset %s" % (name, t, cfg.model_type), r.stderr)
                    continue
                diff = float((tp_forward(load_ranks(out), cfg, ids, cos, sin) - want).abs().max())
                worst = max(worst, diff)
                detail.append("tp %d: max abs logit difference %.3g" % (t, diff))
                for mode in (("--layer", "all"), ("--whole-model",)):
                    v = tpshard("verify", out, "--source", src, *mode, "-q")
                    if v.returncode != 0:
                        report(False, "%s: tpshard verify %s at tp %d exits 0" % (name, " ".join(mode), t),
                               "exit %d\n%s%s" % (v.returncode, v.stdout, v.stderr))
                done.append(t)
            report(done == legal_tps(cfg) and worst <= TOL,
                   "%s: the torch TP forward from the shard files equals transformers' logits at tp %s "
                   "(max abs difference %.2g <= %g)" % (name, ",".join(map(str, done)), worst, TOL), "\n".join(detail))
            if done:
                check_reference(name, model, cfg, os.path.join(tmp, name, "tp%d" % done[-1]))

        # Wrong cuts: caught by the forward and by verify, not by the byte checks.
        from transformers import Olmo2Config, Qwen3Config
        for preset, cfg in (("qwen3", Qwen3Config(**dict(BASE, num_key_value_heads=4, head_dim=16))),
                            ("olmo2", Olmo2Config(**BASE))):
            src = os.path.join(tmp, "wrong-" + preset, "src")
            model = build(cfg, 99, src)
            want = hf_logits(model, ids)
            cos, sin = rotary(model, len(ids))
            wname, text, what = wrong_layouts(preset)
            lay = os.path.join(tmp, wname + ".yaml")
            open(lay, "w").write(text)
            out = os.path.join(tmp, wname)
            r = tpshard("split", src, "--tp", 2, "--layout", lay, "-o", out, "-q")
            if r.returncode != 0:
                report(False, "wrong cut %s: split" % wname, r.stderr)
                continue
            c = tpshard("check", out, "-q")
            diff = float((tp_forward(load_ranks(out), cfg, ids, cos, sin) - want).abs().max())
            v_layer = tpshard("verify", out, "--source", src, "--layer", "all", "-q")
            v_whole = tpshard("verify", out, "--source", src, "--whole-model", "-q")
            report(c.returncode == 0 and diff > 100 * TOL and v_layer.returncode == 1 and v_whole.returncode == 1,
                   "wrong cut (%s, %s) at tp 2: check passes, the torch forward differs from transformers' by %.2g, "
                   "verify --layer all exits %d, --whole-model exits %d"
                   % (preset, what, diff, v_layer.returncode, v_whole.returncode),
                   "check exit %d %s\nverify --layer all: %s%s\nverify --whole-model: %s%s"
                   % (c.returncode, c.stderr, v_layer.stdout, v_layer.stderr, v_whole.stdout, v_whole.stderr))
    print("# transformers %s, torch %s: %.1f s" % (transformers.__version__, torch.__version__, time.time() - t0))
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
