"""Truth from outside for Gemma and Gemma 2: Hugging Face transformers (4.46, torch 1.13 tier).

Each case builds a tiny model with transformers' own classes (GemmaConfig, Gemma2Config;
random weights under torch.manual_seed, norms and biases included, nothing downloaded), saves
it with save_pretrained (safetensors, config.json beside it), splits it with auto-detection
(no --preset: the preset comes from config.json's architectures) at every legal tp of 1, 2,
4, 8, and then:

  * runs the whole model the tensor-parallel way in torch, fed only each rank's shard file:
    vocabulary-parallel embedding lookup summed over ranks and scaled by sqrt(hidden) (in
    float32, as transformers casts it), in every layer each rank's attention and MLP partial
    sums from the heads and intermediate columns its slices hold, summed (the all-reduce),
    then Gemma 2's post-norms on every rank's copy; (1 + w) RMSNorm, GeGLU with tanh GELU,
    scores scaled by query_pre_attn_scalar^-0.5 and soft-capped before the causal mask, a
    sliding window on the even layers; the final norm, the tied (or untied) vocabulary-parallel
    head gathered with its padding dropped, the final logits soft-capped.  The logits must
    equal transformers' forward of the full model (attn_implementation="eager") within 1e-4;
  * requires `tpshard verify SET --source SRC --layer all` and `--whole-model` to exit 0, and
    the whole-model pass's own logits (--dump-logits: its float64 reference and its ranks'
    gathered float32 logits) to equal transformers' within 1e-4;
  * compares verify's float64 layer reference (--dump-reference) with transformers' own
    decoder layer in float64, which checks the C math (norm offset, soft-capping, scale,
    window, sandwich norms) against the library.

The Gemma 2 cases use a window of 4 over 16 positions and caps small enough to bind, and the
test shows each matters (the forward without it misses transformers' logits).

The test can fail: two wrong layouts (K/V heads dealt round-robin to the ranks; gate_proj's
columns in another order than up_proj's) give shard sets whose bytes are intact (`tpshard
check` passes) and whose shapes are right, but the torch forward differs from transformers'
and `tpshard verify` (--layer all and --whole-model) exits 1.

Skips loudly when transformers cannot be imported (tests/interop/setup.sh installs 4.46.3).
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
from test_hf_llama_family import load_ranks, rotate_half

TPS = (1, 2, 4, 8)
TOL = 1e-4
IDS = torch.tensor([3, 97, 41, 0, 99, 12, 64, 88, 5, 70, 23, 50, 96, 1, 33, 77])  # in every rank's rows

# head_dim 16 where hidden / heads is 8; 2 KV heads (replicated at tp 4 and 8)
BASE = dict(vocab_size=100, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=64, rms_norm_eps=1e-6)


def cases():
    from transformers import Gemma2Config, GemmaConfig
    G2 = dict(BASE, num_hidden_layers=4, query_pre_attn_scalar=24, sliding_window=4, attn_logit_softcapping=1.5,
              final_logit_softcapping=2.5)
    return [
        ("gemma", GemmaConfig(**BASE)),  # tied embedding
        ("gemma-mqa-bias", GemmaConfig(**dict(BASE, num_key_value_heads=1, head_dim=32, attention_bias=True))),
        ("gemma2", Gemma2Config(**G2)),
        ("gemma2-untied-bias", Gemma2Config(**dict(G2, tie_word_embeddings=False, attention_bias=True))),
    ]


def build(cfg, seed, path):
    """transformers' model with every parameter drawn again (its init leaves Gemma's norms at
    zero and biases at zero, which would hide a norm or bias cut)."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").float().eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight") or pname.endswith(".bias"):
                p.copy_(0.3 * torch.randn_like(p))
            else:
                p.normal_(0, 1 / math.sqrt(p.shape[1]))
    model.save_pretrained(path, safe_serialization=True)
    return model


def legal_tps(cfg):
    heads, kv, inter = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size
    return [t for t in TPS if heads % t == 0 and inter % t == 0 and (kv % t == 0 or t % kv == 0)]


def gemma_rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)


def linear(x, R, name):
    y = x @ R[name + ".weight"].T
    b = R.get(name + ".bias")
    return y if b is None else y + b


def rope(cfg, n, dtype=torch.float32):
    hd = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    f = torch.outer(torch.arange(n, dtype=torch.float32), inv)
    emb = torch.cat((f, f), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def is_gemma2(cfg):
    return cfg.model_type == "gemma2"


def mask(cfg, layer, n, dtype=torch.float32, window=True):
    """transformers 4.46's additive mask: causal, and on Gemma 2's even layers only the last
    sliding_window positions."""
    m = torch.full((n, n), float("-inf"), dtype=dtype).triu(1)
    if window and is_gemma2(cfg) and layer % 2 == 0:
        m = m.masked_fill(torch.ones(n, n, dtype=torch.bool).tril(-cfg.sliding_window), float("-inf"))
    return m


def softcap(x, c):
    return torch.tanh(x / c) * c if c else x


def tp_forward(ranks, cfg, ids, off=()):
    """The whole model from the ranks' slices alone; `off` names features to leave out (to
    show that each one matters)."""
    n, H, hd, eps = ids.shape[0], cfg.hidden_size, cfg.head_dim, cfg.rms_norm_eps
    g2 = is_gemma2(cfg)
    cos, sin = rope(cfg, n)
    rows = ranks[0]["model.embed_tokens.weight"].shape[0]
    x = torch.zeros(n, H)
    for r, R in enumerate(ranks):  # vocabulary-parallel lookup: each rank its rows, summed
        local = ids - r * rows
        hit = (local >= 0) & (local < rows)
        x[hit] += R["model.embed_tokens.weight"][local[hit]]
    x = x * torch.tensor(H ** 0.5, dtype=x.dtype)
    scale = (cfg.query_pre_attn_scalar if g2 else hd) ** -0.5
    acap = cfg.attn_logit_softcapping if g2 and "attn_softcap" not in off else None
    for layer in range(cfg.num_hidden_layers):
        p = "model.layers.%d." % layer
        m = mask(cfg, layer, n, window="window" not in off)
        attn = torch.zeros(n, H)
        for R in ranks:
            xn = gemma_rms(x, R[p + "input_layernorm.weight"], eps)
            q = linear(xn, R, p + "self_attn.q_proj").view(n, -1, hd).transpose(0, 1)
            k = linear(xn, R, p + "self_attn.k_proj").view(n, -1, hd).transpose(0, 1)
            v = linear(xn, R, p + "self_attn.v_proj").view(n, -1, hd).transpose(0, 1)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            kv_of = [j * k.shape[0] // q.shape[0] for j in range(q.shape[0])]  # local query head -> KV head
            k, v = k[kv_of], v[kv_of]
            w = torch.softmax(softcap(q @ k.transpose(1, 2) * scale, acap) + m, dim=-1)
            attn += (w @ v).transpose(0, 1).reshape(n, -1) @ R[p + "self_attn.o_proj.weight"].T  # all-reduce: a sum
        if p + "self_attn.o_proj.bias" in ranks[0]:
            attn += ranks[0][p + "self_attn.o_proj.bias"]  # once, after the sum
        if g2:  # every rank, on its copy of the sum
            attn = gemma_rms(attn, ranks[0][p + "post_attention_layernorm.weight"], eps)
        x = x + attn
        mlp = torch.zeros(n, H)
        norm = p + ("pre_feedforward_layernorm.weight" if g2 else "post_attention_layernorm.weight")
        for R in ranks:
            hn = gemma_rms(x, R[norm], eps)
            a = torch.nn.functional.gelu(linear(hn, R, p + "mlp.gate_proj"), approximate="tanh")
            mlp += (a * linear(hn, R, p + "mlp.up_proj")) @ R[p + "mlp.down_proj.weight"].T
        if g2:
            mlp = gemma_rms(mlp, ranks[0][p + "post_feedforward_layernorm.weight"], eps)
        x = x + mlp
    x = gemma_rms(x, ranks[0]["model.norm.weight"], eps)
    head = "lm_head.weight" if "lm_head.weight" in ranks[0] else "model.embed_tokens.weight"  # tied
    logits = torch.cat([x @ R[head].T for R in ranks], dim=1)[:, :cfg.vocab_size]  # gathered, padding dropped
    return softcap(logits, cfg.final_logit_softcapping if g2 and "final_softcap" not in off else None)


def hf_logits(model, ids):
    with torch.no_grad():
        return model(ids[None], use_cache=False).logits[0]


def check_reference(name, model, cfg, shards):
    """verify's float64 layer reference against transformers' decoder layer in float64."""
    dump = os.path.join(os.path.dirname(shards), name + ".ref.json")
    r = tpshard("verify", shards, "--tokens", 9, "--seed", 3, "--dump-reference", dump, "-q")
    if r.returncode != 0:
        return report(False, "%s: verify --dump-reference" % name, r.stdout + r.stderr)
    m64 = type(model)(cfg).double().eval()
    m64.load_state_dict(model.state_dict())
    m64.double()
    worst = 0.0
    for L in json.load(open(dump))["layers"]:
        x = torch.tensor(L["x"], dtype=torch.float64)[None]
        n = x.shape[1]
        layer = m64.model.layers[L["layer"]]
        msk = mask(cfg, L["layer"], n, torch.float64)[None, None]
        with torch.no_grad():
            a = layer.self_attn(hidden_states=layer.input_layernorm(x), attention_mask=msk,
                                position_ids=torch.arange(n)[None])[0]
            if is_gemma2(cfg):
                a = layer.post_attention_layernorm(a)
                m = layer.post_feedforward_layernorm(layer.mlp(layer.pre_feedforward_layernorm(x + a)))
            else:
                m = layer.mlp(layer.post_attention_layernorm(x + a))
        worst = max(worst, float((torch.tensor(L["attention"], dtype=torch.float64) - a[0]).norm() / a.norm()),
                    float((torch.tensor(L["mlp"], dtype=torch.float64) - m[0]).norm() / m.norm()))
    return report(worst < 1e-5, "%s: verify's float64 layer reference equals transformers' decoder layer "
                  "(worst rel err %.2g)" % (name, worst))


def wrong_layouts():
    """The gemma2 preset with one rule replaced: (name, yaml text, what it does wrong)."""
    text = tpshard("layout", "--preset", "gemma2").stdout
    kv_rule = ('  - match: "model.layers.*.self_attn.{k_proj,v_proj}.{weight,bias}"\n    split: column\n'
               '    unit: head_dim\n    size: kv_heads*head_dim\n    kv_replicate: true\n')
    mlp_rule = '  - match: "model.layers.*.mlp.{gate_proj,up_proj}.weight"\n    split: column\n    size: intermediate\n'
    if kv_rule not in text or mlp_rule not in text:
        report(False, "the gemma2 preset's K/V and gate/up rules are where this test replaces them", text)
        return []
    # Rank r of 2 gets KV heads r and r + kv/2 instead of the contiguous pair its queries read.
    round_robin = ('  - match: "model.layers.*.self_attn.{k_proj,v_proj}.{weight,bias}"\n    split: column\n'
                   '    segments:\n'
                   '      - {name: a, size: kv_heads/2*head_dim, unit: head_dim}\n'
                   '      - {name: b, size: kv_heads/2*head_dim, unit: head_dim}\n')
    gate_halves = ('  - match: "model.layers.*.mlp.gate_proj.weight"\n    split: column\n'
                   '    segments:\n      - {name: a, size: intermediate/2}\n      - {name: b, size: intermediate/2}\n'
                   '  - match: "model.layers.*.mlp.up_proj.weight"\n    split: column\n    size: intermediate\n')
    return [("kv-round-robin", text.replace(kv_rule, round_robin), "K/V heads dealt round-robin"),
            ("gate-up-mismatched", text.replace(mlp_rule, gate_halves), "gate_proj columns not paired with up_proj's")]


def run_case(tmp, seed, name, cfg):
    src = os.path.join(tmp, name, "src")
    model = build(cfg, seed, src)
    want = hf_logits(model, IDS)
    preset = "gemma2" if is_gemma2(cfg) else "gemma"
    detail, worst, worst_dump, done = [], 0.0, 0.0, []
    for t in legal_tps(cfg):
        out = os.path.join(tmp, name, "tp%d" % t)
        r = tpshard("split", src, "--tp", t, "-o", out)  # auto-detected from config.json
        if r.returncode != 0 or "preset %s," % preset not in r.stderr:
            report(False, "%s: split --tp %d chooses preset %s from config.json" % (name, t, preset), r.stderr)
            continue
        got = tp_forward(load_ranks(out), cfg, IDS)
        diff = float((got - want).abs().max())
        worst = max(worst, diff)
        detail.append("tp %d: max abs logit difference %.3g" % (t, diff))
        dump = os.path.join(tmp, name, "logits%d.json" % t)
        for mode in (["--layer", "all"], ["--whole-model", "--tokens", 12, "--dump-logits", dump]):
            v = tpshard("verify", out, "--source", src, *mode, "-q")
            if v.returncode != 0:
                report(False, "%s: tpshard verify %s at tp %d exits 0" % (name, " ".join(map(str, mode)), t),
                       "exit %d\n%s%s" % (v.returncode, v.stdout, v.stderr))
        if os.path.exists(dump):  # verify's own whole-model logits, reference and ranks, against transformers'
            d = json.load(open(dump))
            hf = hf_logits(model, torch.tensor(d["tokens"])).double()
            for what in ("reference", "ranks"):
                e = float((torch.tensor(d[what], dtype=torch.float64) - hf).abs().max())
                worst_dump = max(worst_dump, e)
                detail.append("tp %d: verify --whole-model's %s logits differ from transformers' by %.3g" % (t, what, e))
        done.append(t)
    report(done == legal_tps(cfg) and worst <= TOL,
           "%s: the torch TP forward from the shard files equals transformers' logits at tp %s "
           "(max abs difference %.2g <= %g)" % (name, ",".join(map(str, done)), worst, TOL), "\n".join(detail))
    report(done and worst_dump <= TOL, "%s: verify --whole-model's reference and tensor-parallel logits equal "
           "transformers' (max abs difference %.2g <= %g)" % (name, worst_dump, TOL), "\n".join(detail))
    if not done:
        return
    last = os.path.join(tmp, name, "tp%d" % done[-1])
    check_reference(name, model, cfg, last)
    if is_gemma2(cfg):  # each Gemma 2 feature binds on this model: leaving it out misses
        ranks = load_ranks(last)
        misses = {f: float((tp_forward(ranks, cfg, IDS, off=(f,)) - want).abs().max())
                  for f in ("window", "attn_softcap", "final_softcap")}
        report(all(d > 100 * TOL for d in misses.values()),
               "%s: the sliding window and both soft-caps matter (%s)" %
               (name, ", ".join("without %s: %.2g" % kv for kv in misses.items())))


def main():
    early = tap.transformers_tier("hf_gemma_family")
    if early is not None:
        return early
    import transformers
    torch.set_num_threads(2)
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for seed, (name, cfg) in enumerate(cases()):
            run_case(tmp, seed, name, cfg)

        # Wrong cuts: caught by the forward and by verify, not by the byte checks.
        from transformers import Gemma2Config
        cfg = Gemma2Config(**dict(BASE, num_key_value_heads=4, query_pre_attn_scalar=24, sliding_window=4,
                                  attn_logit_softcapping=1.5, final_logit_softcapping=2.5))
        src = os.path.join(tmp, "wrong", "src")
        want = hf_logits(build(cfg, 99, src), IDS)
        for wname, text, what in wrong_layouts():
            lay = os.path.join(tmp, "wrong", wname + ".yaml")
            open(lay, "w").write(text)
            out = os.path.join(tmp, "wrong", wname)
            r = tpshard("split", src, "--tp", 2, "--layout", lay, "-o", out, "-q")
            if r.returncode != 0:
                report(False, "wrong cut %s: split" % wname, r.stderr)
                continue
            c = tpshard("check", out, "-q")
            diff = float((tp_forward(load_ranks(out), cfg, IDS) - want).abs().max())
            v_layer = tpshard("verify", out, "--source", src, "--layer", "all", "-q")
            v_whole = tpshard("verify", out, "--source", src, "--whole-model", "-q")
            report(c.returncode == 0 and diff > 100 * TOL and v_layer.returncode == 1 and v_whole.returncode == 1,
                   "wrong cut (%s) at tp 2: check passes, the torch forward differs from transformers' by %.2g, "
                   "verify --layer all exits %d, verify --whole-model exits %d"
                   % (what, diff, v_layer.returncode, v_whole.returncode),
                   "check exit %d %s\nverify --layer all: %s%s\nverify --whole-model: %s%s"
                   % (c.returncode, c.stderr, v_layer.stdout, v_layer.stderr, v_whole.stdout, v_whole.stderr))
    print("# transformers %s, torch %s: %.1f s" % (transformers.__version__, torch.__version__, time.time() - t0))
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
