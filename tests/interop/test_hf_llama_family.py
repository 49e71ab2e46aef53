"""Truth from outside for the Llama family (Llama, Mistral, Qwen2): Hugging Face transformers.

Each case builds a tiny model with transformers' own classes (LlamaConfig, MistralConfig,
Qwen2Config; random weights under torch.manual_seed, nothing downloaded), saves it with
save_pretrained (safetensors), splits it with `tpshard split --preset llama` at every legal
tp of 1, 2, 4, 8, and then:

  * runs the whole model the tensor-parallel way in torch, fed only each rank's shard file
    (the rank read from the file's own tp_rank metadata): vocabulary-parallel embedding
    lookup summed over ranks, in every layer each rank's attention and MLP partial sums from
    the heads and intermediate columns its slices hold, all-reduced (summed), row-parallel
    biases added once after the sum, the final norm, the vocabulary-parallel lm_head (or the
    tied embedding) gathered and its padding dropped; the logits must equal transformers'
    forward of the full model within 1e-4 (float32);
  * requires `tpshard verify SET --source SRC --layer all` to exit 0;
  * compares verify's float64 reference (--dump-reference, of the set alone, so with the
    config keys its manifest recorded) with transformers' own decoder layer in float64, which checks verify's rope_scaling, head_dim and bias math against the
    library (transformers computes cos/sin in float32, hence the 1e-5 bound), and shows that
    the unscaled rotary frequencies would not pass that bound.

Variants: attention_bias, mlp_bias, head_dim != hidden / heads, GQA with tp above the KV
heads, MQA, tied embeddings, each rope_scaling type (linear, dynamic past
max_position_embeddings, llama3 with a blended band, yarn), Mistral, Qwen2.

The test can fail: two wrong layouts (K/V heads dealt round-robin to the ranks; gate_proj's
columns in another order than up_proj's) give shard sets whose bytes are intact (`tpshard
check` passes) and whose shapes are right, but the torch forward differs from transformers'
and `tpshard verify` exits 1.

Skips loudly when transformers cannot be imported (tests/interop/setup.sh installs 4.46.3).
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import torch

import tap
from tap import TOP, TPSHARD, report, tpshard
TPS = (1, 2, 4, 8)
TOL = 1e-4


BASE = dict(vocab_size=100, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6)


def cases():
    from transformers import LlamaConfig, MistralConfig, Qwen2Config
    L = lambda **kw: LlamaConfig(**dict(BASE, **kw))
    return [
        ("llama-gqa", L()),  # 2 KV heads: replicated at tp 4 and 8
        ("llama-mqa", L(num_key_value_heads=1)),
        ("llama-attention-bias", L(attention_bias=True)),
        ("llama-mlp-bias", L(mlp_bias=True)),
        ("llama-head-dim-16", L(head_dim=16, attention_bias=True)),  # hidden / heads is 8
        ("llama-tied", L(tie_word_embeddings=True)),
        ("llama-rope-linear", L(rope_scaling={"rope_type": "linear", "factor": 2.0})),
        # max_position_embeddings 4 < the 7 and 16 positions run: the base grows
        ("llama-rope-dynamic", L(rope_scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=4)),
        # wavelengths 6.3, 63, 628, 6283 against 64/4 and 64/1: one kept, one blended, two scaled
        ("llama-rope-llama3", L(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                              "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                                max_position_embeddings=512)),
        ("llama-rope-yarn", L(rope_scaling={"rope_type": "yarn", "factor": 4.0})),
        ("mistral", MistralConfig(**BASE)),
        ("qwen2-tied", Qwen2Config(**dict(BASE, tie_word_embeddings=True))),  # q/k/v biases
    ]


def build(name, cfg, seed, path):
    """transformers' model with every parameter drawn again: its own init leaves biases at
    zero and norms at one, which would hide a bias or norm cut."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").float().eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif pname.endswith(".bias"):
                p.copy_(0.2 * torch.randn_like(p))
            else:
                p.normal_(0, 1 / math.sqrt(p.shape[1]))
    model.save_pretrained(path, safe_serialization=True)
    return model


def legal_tps(cfg):
    heads, kv, inter = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size
    return [t for t in TPS if heads % t == 0 and inter % t == 0 and (kv % t == 0 or t % kv == 0)]


def load_ranks(outdir):
    """Every rank's tensors, by the tp_rank each shard file's own metadata names."""
    from safetensors import safe_open
    ranks = {}
    for f in sorted(os.listdir(outdir)):
        if not f.endswith(".safetensors"):
            continue
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


def linear(x, R, name):
    y = x @ R[name + ".weight"].T
    b = R.get(name + ".bias")
    return y if b is None else y + b


def tp_forward(ranks, cfg, ids, cos, sin):
    """The whole model from the ranks' slices alone.  A rank's q/k/v slices hold its query
    heads and the KV heads they read (the TP convention: local query head j reads local KV
    head j * kv_local // q_local); its gate/up/down slices the same intermediate columns."""
    n, H = ids.shape[0], cfg.hidden_size
    hd = getattr(cfg, "head_dim", None) or H // cfg.num_attention_heads
    eps = cfg.rms_norm_eps
    rows = ranks[0]["model.embed_tokens.weight"].shape[0]
    x = torch.zeros(n, H)
    for r, R in enumerate(ranks):  # vocabulary-parallel lookup: each rank its rows, summed
        local = ids - r * rows
        hit = (local >= 0) & (local < rows)
        x[hit] += R["model.embed_tokens.weight"][local[hit]]
    causal = torch.full((n, n), float("-inf")).triu(1)
    for layer in range(cfg.num_hidden_layers):
        p = "model.layers.%d." % layer
        attn = torch.zeros(n, H)
        for R in ranks:
            xn = rms(x, R[p + "input_layernorm.weight"], eps)
            q = linear(xn, R, p + "self_attn.q_proj").view(n, -1, hd).transpose(0, 1)
            k = linear(xn, R, p + "self_attn.k_proj").view(n, -1, hd).transpose(0, 1)
            v = linear(xn, R, p + "self_attn.v_proj").view(n, -1, hd).transpose(0, 1)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            kv_of = [j * k.shape[0] // q.shape[0] for j in range(q.shape[0])]
            k, v = k[kv_of], v[kv_of]
            w = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(hd) + causal, dim=-1)
            ctx = (w @ v).transpose(0, 1).reshape(n, -1)
            attn += ctx @ R[p + "self_attn.o_proj.weight"].T  # the all-reduce: a sum
        if p + "self_attn.o_proj.bias" in ranks[0]:
            attn += ranks[0][p + "self_attn.o_proj.bias"]  # once, after the sum
        x = x + attn
        mlp = torch.zeros(n, H)
        for R in ranks:
            hn = rms(x, R[p + "post_attention_layernorm.weight"], eps)
            a = torch.nn.functional.silu(linear(hn, R, p + "mlp.gate_proj")) * linear(hn, R, p + "mlp.up_proj")
            mlp += a @ R[p + "mlp.down_proj.weight"].T
        if p + "mlp.down_proj.bias" in ranks[0]:
            mlp += ranks[0][p + "mlp.down_proj.bias"]
        x = x + mlp
    x = rms(x, ranks[0]["model.norm.weight"], eps)
    head = "lm_head.weight" if "lm_head.weight" in ranks[0] else "model.embed_tokens.weight"  # tied
    logits = torch.cat([x @ R[head].T for R in ranks], dim=1)  # gathered over ranks
    return logits[:, :cfg.vocab_size]  # the padding rows dropped


def rotary(model, n, cfg=None):
    """transformers' own cos/sin for positions 0..n-1 ([n, hd]), from the model's rotary
    module (Mistral's in 4.46 sits in each attention and knows no rope_scaling), or from a
    fresh one built for cfg."""
    rot = getattr(model.model, "rotary_emb", None) or model.model.layers[0].self_attn.rotary_emb
    if cfg is not None:
        rot = type(rot)(config=cfg)
    cos, sin = rot(torch.zeros(1, n, 1), torch.arange(n)[None])
    return cos[0], sin[0]


def hf_logits(model, ids):
    with torch.no_grad():
        return model(ids[None]).logits[0]


def check_reference(name, model, cfg, shards):
    """verify's float64 layer reference against transformers' decoder layer in float64.  The
    set is verified alone: its reference and config keys (rope_scaling among them) are the
    ones its manifest recorded at split time."""
    dump = os.path.join(os.path.dirname(shards), name + ".ref.json")
    r = tpshard("verify", shards, "--tokens", 7, "--seed", 3, "--dump-reference", dump, "-q")
    if r.returncode != 0:
        return report(False, "%s: verify --dump-reference" % name, r.stdout + r.stderr)
    m64 = type(model)(cfg).double().eval()
    m64.load_state_dict(model.state_dict())
    m64.double()
    plain = None
    if getattr(cfg, "rope_scaling", None):
        import copy
        plain = copy.deepcopy(cfg)
        plain.rope_scaling = None
    worst = worst_plain = 0.0
    for L in json.load(open(dump))["layers"]:
        x = torch.tensor(L["x"], dtype=torch.float64)
        n = x.shape[0]
        mask = torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)[None, None]
        layer = m64.model.layers[L["layer"]]
        for c in ([None, plain] if plain is not None else [None]):
            kw = {}
            if hasattr(m64.model, "rotary_emb"):  # else the attention computes its own
                cos, sin = rotary(m64, n, c)
                kw["position_embeddings"] = (cos[None].double(), sin[None].double())
            with torch.no_grad():
                a = layer.self_attn(hidden_states=layer.input_layernorm(x[None]), attention_mask=mask,
                                    position_ids=torch.arange(n)[None], **kw)[0][0]
                m = layer.mlp(layer.post_attention_layernorm(x + a))
            e = max(float((torch.tensor(L["attention"], dtype=torch.float64) - a).norm() / a.norm()),
                    float((torch.tensor(L["mlp"], dtype=torch.float64) - m).norm() / m.norm()))
            if c is None:
                worst = max(worst, e)
            else:
                worst_plain = max(worst_plain, e)
    extra = ""
    ok = worst < 1e-5
    if plain is not None:
        ok = ok and worst_plain > 1e-3
        extra = "; with unscaled rotary frequencies it would be %.2g" % worst_plain
    return report(ok, "%s: verify's float64 layer reference equals transformers' decoder layer (worst rel err %.2g%s)"
                  % (name, worst, extra))


def wrong_layouts():
    """The llama preset with one rule replaced: (name, yaml text, what it does wrong)."""
    r = tpshard("layout", "--preset", "llama")
    text = r.stdout
    kv_rule = ('  - match: "model.layers.*.self_attn.{k_proj,v_proj}.{weight,bias}"\n    split: column\n'
               '    unit: head_dim\n    size: kv_heads*head_dim\n    kv_replicate: true\n')
    mlp_rule = '  - match: "model.layers.*.mlp.{gate_proj,up_proj}.{weight,bias}"\n    split: column\n    size: intermediate\n'
    if kv_rule not in text or mlp_rule not in text:
        report(False, "the llama preset's K/V and gate/up rules are where this test replaces them", text)
        return []
    # Two segments of half the KV heads each: rank r of 2 gets head r of each half, i.e.
    # heads r and r + kv/2 (round-robin) instead of the contiguous heads its queries read.
    round_robin = ('  - match: "model.layers.*.self_attn.{k_proj,v_proj}.{weight,bias}"\n    split: column\n'
                   '    segments:\n'
                   '      - {name: a, size: kv_heads/2*head_dim, unit: head_dim}\n'
                   '      - {name: b, size: kv_heads/2*head_dim, unit: head_dim}\n')
    # gate_proj's columns as two halves (rank r: quarters r and r + 2), up_proj's contiguous.
    gate_halves = ('  - match: "model.layers.*.mlp.gate_proj.{weight,bias}"\n    split: column\n'
                   '    segments:\n      - {name: a, size: intermediate/2}\n      - {name: b, size: intermediate/2}\n'
                   '  - match: "model.layers.*.mlp.up_proj.{weight,bias}"\n    split: column\n    size: intermediate\n')
    return [("kv-round-robin", text.replace(kv_rule, round_robin), "K/V heads dealt round-robin"),
            ("gate-up-mismatched", text.replace(mlp_rule, gate_halves), "gate_proj columns not paired with up_proj's")]


def main():
    early = tap.transformers_tier("hf_llama_family")
    if early is not None:
        return early
    import transformers
    torch.set_num_threads(2)
    t0 = time.time()
    ids = torch.tensor([3, 97, 41, 0, 99, 12, 64, 88, 5, 70, 23, 50, 96, 1, 33, 77])  # ids in every rank's rows
    with tempfile.TemporaryDirectory() as tmp:
        for seed, (name, cfg) in enumerate(cases()):
            src = os.path.join(tmp, name, "src")
            model = build(name, cfg, seed, src)
            want = hf_logits(model, ids)
            cos, sin = rotary(model, len(ids))
            detail, worst, done = [], 0.0, []
            for t in legal_tps(cfg):
                out = os.path.join(tmp, name, "tp%d" % t)
                r = tpshard("split", src, "--tp", t, "--preset", "llama", "-o", out, "-q")
                if r.returncode != 0:
                    report(False, "%s: split --tp %d" % (name, t), r.stderr)
                    continue
                got = tp_forward(load_ranks(out), cfg, ids, cos, sin)
                diff = float((got - want).abs().max())
                worst = max(worst, diff)
                detail.append("tp %d: max abs logit difference %.3g" % (t, diff))
                v = tpshard("verify", out, "--source", src, "--layer", "all", "-q")
                if v.returncode != 0:
                    report(False, "%s: tpshard verify --layer all at tp %d exits 0" % (name, t),
                           "exit %d\n%s%s" % (v.returncode, v.stdout, v.stderr))
                done.append(t)
            report(done == legal_tps(cfg) and worst <= TOL,
                   "%s: the torch TP forward from the shard files equals transformers' logits at tp %s "
                   "(max abs difference %.2g <= %g)" % (name, ",".join(map(str, done)), worst, TOL), "\n".join(detail))
            check_reference(name, model, cfg, os.path.join(tmp, name, "tp%d" % done[-1]) if done else tmp)

        # Wrong cuts: caught by the forward and by verify, not by the byte checks.
        from transformers import LlamaConfig
        cfg = LlamaConfig(**dict(BASE, num_key_value_heads=4, attention_bias=True, mlp_bias=True))
        src = os.path.join(tmp, "wrong", "src")
        model = build("wrong", cfg, 99, src)
        want = hf_logits(model, ids)
        cos, sin = rotary(model, len(ids))
        for wname, text, what in wrong_layouts():
            lay = os.path.join(tmp, "wrong", wname + ".yaml")
            open(lay, "w").write(text)
            out = os.path.join(tmp, "wrong", wname)
            r = tpshard("split", src, "--tp", 2, "--layout", lay, "-o", out, "-q")
            if r.returncode != 0:
                report(False, "wrong cut %s: split" % wname, r.stderr)
                continue
            c = tpshard("check", out, "-q")
            diff = float((tp_forward(load_ranks(out), cfg, ids, cos, sin) - want).abs().max())
            v_src = tpshard("verify", out, "--source", src, "--layer", "all", "-q")
            v_alone = tpshard("verify", out, "--layer", "all", "-q")
            report(c.returncode == 0 and diff > 100 * TOL and v_src.returncode == 1 and v_alone.returncode == 1,
                   "wrong cut (%s) at tp 2: check passes, the torch forward differs from transformers' by %.2g, "
                   "verify --source exits %d, verify alone exits %d" % (what, diff, v_src.returncode, v_alone.returncode),
                   "check exit %d %s\nverify --source: %s%s\nverify: %s%s" % (c.returncode, c.stderr, v_src.stdout,
                                                                         v_src.stderr, v_alone.stdout, v_alone.stderr))
    print("# transformers %s, torch %s: %.1f s" % (transformers.__version__, torch.__version__, time.time() - t0))
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
