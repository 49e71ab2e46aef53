"""What the tests against Hugging Face transformers share (both tiers: Debian's torch 1.13 with
transformers 4.46, and torch 2.5 with transformers 4.57).

  * build: a transformers model from a config with every parameter drawn again under a seed
    (its own init leaves norms at one or zero and biases at zero, which would hide a norm or
    bias cut), saved with save_pretrained;
  * load_ranks: every rank's tensors from a split's shard files, by their tp_rank metadata;
  * the small math of a tensor-parallel forward: rms, rotate_half, rope_tables, linear, qkv_heads,
    vocab_embed (the vocabulary-parallel lookup), attend, gather_logits; rotary (transformers'
    own cos/sin);
  * split_and_compare: split at every legal tp, run the test's TP forward from the shard files
    against transformers' logits, run verify, report;
  * wrong_layouts / wrong_cut: a preset with a rule replaced cuts wrong; `check` passes,
    while the forward and verify fail;
  * dumped_reference / layer_error: verify's float64 layer reference (--dump-reference)
    against transformers' decoder layer in float64;
  * main: the tier's prologue (a loud skip without transformers or the family) and epilogue.

Each test keeps what is its family's own: its config cases and its tensor-parallel forward.
"""
import copy
import json
import math
import os
import tempfile
import time

import torch

import tap
from tap import report, tpshard

TPS = (1, 2, 4, 8)
TOL = 1e-4
IDS = torch.tensor([3, 97, 41, 0, 99, 12, 64, 88, 5, 70, 23, 50, 96, 1, 33, 77])  # ids in every rank's rows


def main(name, body, needs=None):
    """Runs body(tmp) in a temporary folder when transformers imports (and has the class
    `needs`, when given); the test's exit status."""
    early = tap.transformers_tier(name)
    if early is not None:
        return early
    import transformers
    if needs and not hasattr(transformers, needs):
        print("skip - %s: transformers %s has no %s (the torch-2 tier installs 4.57: tests/interop/setup_torch2.sh)"
              % (name, transformers.__version__, needs))
        return 0
    torch.set_num_threads(2)
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        body(tmp)
    print("# transformers %s, torch %s: %.1f s" % (transformers.__version__, torch.__version__, time.time() - t0))
    return tap.status()


def build(cfg, seed, path, make=None, norm=(1.0, 0.2), bias=0.2, fan_in=None, buffers=()):
    """transformers' model (make(cfg), else AutoModelForCausalLM with eager attention) with
    every parameter drawn again under seed, saved to path: a 1-D weight (a norm's scale) as
    norm[0] + norm[1] * randn, a 1-D bias as bias * randn, any other weight from
    normal(0, 1 / sqrt(fan_in or its dim 1)); then each buffer whose name ends with a key of
    `buffers` as that value * randn."""
    torch.manual_seed(seed)
    if make is None:
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    else:
        model = make(cfg)
    model = model.float().eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() == 1 and not pname.endswith(".bias"):
                p.copy_(norm[0] + norm[1] * torch.randn_like(p) if norm[0] else norm[1] * torch.randn_like(p))
            elif p.dim() == 1:
                p.copy_(bias * torch.randn_like(p))
            else:
                p.normal_(0, 1 / math.sqrt(fan_in or p.shape[1]))
        for bname, b in model.named_buffers():
            for suffix, sd in dict(buffers).items():
                if bname.endswith(suffix):
                    b.copy_(sd * torch.randn_like(b))
    model.save_pretrained(path, safe_serialization=True)
    return model


def build_in_dtype(cfg, seed, path, dtype, **kw):
    """The HF tensors saved at path in dtype, and the model in float32 holding exactly those
    values (what a forward is compared with); kw as build's."""
    model = build(cfg, seed, path, **kw)
    if dtype != torch.float32:  # the parameters rounded to dtype; buffers (inv_freq) stay float32
        with torch.no_grad():
            for prm in model.parameters():
                prm.copy_(prm.to(dtype).float())
        copy.deepcopy(model).to(dtype).save_pretrained(path, safe_serialization=True)
    from safetensors.torch import load_file
    return load_file(os.path.join(path, "model.safetensors")), model


def logits(model, ids, **kw):
    """transformers' forward of the whole model on one sequence: [n, vocab]."""
    with torch.no_grad():
        return model(input_ids=ids[None], **kw).logits[0]


def head_dim(cfg):
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def legal_tps(heads, kv, *widths):
    """The tps of TPS that divide the heads and every width, and that the KV heads divide or
    are replicated to (kv None: no KV condition)."""
    return [t for t in TPS if heads % t == 0 and all(w % t == 0 for w in widths)
            and (kv is None or kv % t == 0 or t % kv == 0)]


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


def rotary(model, n, cfg=None):
    """transformers' own cos/sin for positions 0..n-1 ([n, hd]), from the model's rotary
    module (Mistral's in 4.46 sits in each attention and knows no rope_scaling), or from a
    fresh one built for cfg."""
    rot = getattr(model.model, "rotary_emb", None) or model.model.layers[0].self_attn.rotary_emb
    if cfg is not None:
        rot = type(rot)(config=cfg)
    cos, sin = rot(torch.zeros(1, n, 1), torch.arange(n)[None])
    return cos[0], sin[0]


# ---- the math of a tensor-parallel forward ----

def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_tables(n, hd, base, factor=None):
    """cos, sin [n, hd] of the default rotary frequencies (divided by factor: linear scaling)."""
    inv = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    if factor is not None:
        inv = inv / factor
    f = torch.outer(torch.arange(n, dtype=torch.float32), inv)
    emb = torch.cat((f, f), dim=-1)
    return emb.cos(), emb.sin()


def linear(x, R, name):
    y = x @ R[name + ".weight"].T
    b = R.get(name + ".bias")
    return y if b is None else y + b


def qkv_heads(xn, R, attn, hd):
    """A rank's q, k and v heads ([heads, n, hd]) from its slices of attn + "{q,k,v}_proj"."""
    return [linear(xn, R, attn + c + "_proj").view(xn.shape[0], -1, hd).transpose(0, 1) for c in "qkv"]


def vocab_embed(ranks, name, ids, hidden):
    """The vocabulary-parallel lookup: each rank its rows of the embedding `name`, summed."""
    rows = ranks[0][name].shape[0]
    x = torch.zeros(ids.shape[0], hidden)
    for r, R in enumerate(ranks):
        local = ids - r * rows
        hit = (local >= 0) & (local < rows)
        x[hit] += R[name][local[hit]]
    return x


def causal_mask(n, dtype=torch.float32):
    return torch.full((n, n), float("-inf"), dtype=dtype).triu(1)


def attend(q, k, v, cos, sin, mask, scale=None, cap=None):
    """A rank's attention: q [hq, n, hd], k/v [hkv, n, hd] rotated by cos/sin; local query head
    j reads local KV head j * hkv // hq (the TP convention); scores divided by sqrt(hd), or
    times scale, soft-capped by cap; the context [n, hq * hd]."""
    n, hd = q.shape[1], q.shape[2]
    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    kv_of = [j * k.shape[0] // q.shape[0] for j in range(q.shape[0])]
    k, v = k[kv_of], v[kv_of]
    s = q @ k.transpose(1, 2) / math.sqrt(hd) if scale is None else q @ k.transpose(1, 2) * scale
    if cap:
        s = torch.tanh(s / cap) * cap
    w = torch.softmax(s + mask, dim=-1)
    return (w @ v).transpose(0, 1).reshape(n, -1)


def gather_logits(ranks, x, head, vocab):
    """The vocabulary-parallel head: each rank's logits gathered, the padding rows dropped."""
    return torch.cat([x @ R[head].T for R in ranks], dim=1)[:, :vocab]


# ---- the checks ----

def verify_layers(out, src, dump=None):
    return [("verify", out, "--source", src, "--layer", "all")]


def verify_layers_and_whole(out, src, dump=None):
    whole = ("--whole-model", "--tokens", 12, "--dump-logits", dump) if dump else ("--whole-model",)
    return verify_layers(out, src) + [("verify", out, "--source", src) + whole]


FORWARD_CLAIM = ("the torch TP forward from the shard files equals transformers' logits at tp {tps} "
                 "(max abs difference {worst} <= {tol})")


def split_and_compare(tmp, name, src, want, forward, tps, detect=None, split_args=(), verifies=verify_layers_and_whole,
                      claim=FORWARD_CLAIM, dump_logits=None, each=None):
    """Splits src at each tp (auto-detected from config.json, stderr saying `detect`, unless
    split_args names the layout), runs forward(ranks) from each set's files against want, and
    every tpshard run of verifies(out, src, dump) (each must exit 0).  One line for the
    forward at every tp (claim, its {tps}, {worst} and {tol} filled in); with dump_logits (ids
    -> transformers' logits) the whole-model run dumps its logits and a second line compares
    its reference and ranks' logits with transformers'.  each(t, out, ranks) runs after each
    tp's forward.  Returns the tps that went through, in order."""
    detail, worst, worst_dump, done = [], 0.0, 0.0, []
    for t in tps:
        out = os.path.join(tmp, name, "tp%d" % t)
        r = tpshard("split", src, "--tp", t, "-o", out, *split_args)
        if r.returncode != 0 or (detect is not None and detect not in r.stderr):
            report(False, "%s: split --tp %d%s" % (name, t, " chooses %s" % detect if detect else ""), r.stderr)
            continue
        ranks = load_ranks(out)
        diff = float((forward(ranks) - want).abs().max())
        worst = max(worst, diff)
        detail.append("tp %d: max abs logit difference %.3g" % (t, diff))
        dump = os.path.join(tmp, name, "logits%d.json" % t) if dump_logits else None
        passed = True
        for args in verifies(out, src, dump):
            v = tpshard(*args, "-q")
            if v.returncode != 0:
                passed = report(False, "%s: tpshard %s at tp %d exits 0"
                                % (name, " ".join(str(a) for a in args if a not in (out, src)), t),
                                "exit %d\n%s%s" % (v.returncode, v.stdout, v.stderr))
        if dump and os.path.exists(dump):  # verify's own whole-model logits, reference and ranks
            d = json.load(open(dump))
            hf = dump_logits(torch.tensor(d["tokens"])).double()
            for what in ("reference", "ranks"):
                e = float((torch.tensor(d[what], dtype=torch.float64) - hf).abs().max())
                worst_dump = max(worst_dump, e)
                detail.append("tp %d: verify --whole-model's %s logits differ from transformers' by %.3g"
                              % (t, what, e))
        if each is not None:
            each(t, out, ranks)
        if passed:
            done.append(t)
    report(done == list(tps) and worst <= TOL, "%s: %s" % (name, claim.format(
        tps=",".join(map(str, done)), worst="%.2g" % worst, tol="%g" % TOL)), "\n".join(detail))
    if dump_logits:
        report(done and worst_dump <= TOL, "%s: verify --whole-model's reference and tensor-parallel logits equal "
               "transformers' (max abs difference %.2g <= %g)" % (name, worst_dump, TOL), "\n".join(detail))
    return done


LAYER_AND_WHOLE = (("verify --layer all", True, ("--layer", "all")), ("verify --whole-model", True, ("--whole-model",)))


def wrong_cut(tmp, wname, what, src, text, forward, want, tp=2, verifies=LAYER_AND_WHOLE, unreadable_ok=False):
    """A wrong cut is caught by the forward and by verify, not by the byte checks: src split
    at tp with the layout `text`; one line that `check` passes, forward(ranks) differs from
    want by more than 100 TOL (or, with unreadable_ok, cannot read the shards: a RuntimeError)
    and every verify of verifies ((label, with --source, args)) exits 1."""
    lay = os.path.join(tmp, wname + ".yaml")
    with open(lay, "w") as f:
        f.write(text)
    out = os.path.join(tmp, wname)
    r = tpshard("split", src, "--tp", tp, "--layout", lay, "-o", out, "-q")
    if r.returncode != 0:
        return report(False, "wrong cut %s: split" % wname, r.stderr)
    c = tpshard("check", out, "-q")
    try:
        diff = float((forward(load_ranks(out)) - want).abs().max())
        fwd, caught = "differs from transformers' by %.2g" % diff, diff > 100 * TOL
    except RuntimeError as e:  # the ranks' rows do not fit the forward's convention
        if not unreadable_ok:
            raise
        fwd, caught = "cannot read the shards by its convention (%s)" % str(e).splitlines()[0], True
    vs = [(label, tpshard("verify", out, *(("--source", src) if with_src else ()), *args, "-q"))
          for label, with_src, args in verifies]
    return report(c.returncode == 0 and caught and all(v.returncode == 1 for _, v in vs),
                  "wrong cut (%s) at tp %d: check passes, the torch forward %s, %s"
                  % (what, tp, fwd, ", ".join("%s exits %d" % (label, v.returncode) for label, v in vs)),
                  "check exit %d %s\n" % (c.returncode, c.stderr) +
                  "\n".join("%s: %s%s" % (label, v.stdout, v.stderr) for label, v in vs))


# The presets' K/V rule, and K/V heads dealt round-robin in its place: rank r of 2 gets
# heads r and r + kv/2 instead of the contiguous heads its queries read.
KV_RULE = ('  - match: "model.layers.*.self_attn.{k_proj,v_proj}.{weight,bias}"\n    split: column\n'
           '    unit: head_dim\n    size: kv_heads*head_dim\n    kv_replicate: true\n')


def halves(match, half, unit=None):
    """A column rule cutting `match` as two segments of `half` each: rank r of 2 gets piece r
    of each half, round-robin where the presets cut one contiguous block."""
    u = ", unit: %s" % unit if unit else ""
    return ('  - match: "%s"\n    split: column\n    segments:\n      - {name: a, size: %s%s}\n'
            '      - {name: b, size: %s%s}\n' % (match, half, u, half, u))


KV_ROUND_ROBIN = halves("model.layers.*.self_attn.{k_proj,v_proj}.{weight,bias}", "kv_heads/2*head_dim", "head_dim")


def gate_halves(prefix, size, suffix):
    """gate_proj's columns as two halves (rank r: quarters r and r + 2) and up_proj's
    contiguous: the two no longer pair."""
    return halves("%s.gate_proj.%s" % (prefix, suffix), size + "/2") + \
        '  - match: "%s.up_proj.%s"\n    split: column\n    size: %s\n' % (prefix, suffix, size)


def wrong_layouts(preset, variants):
    """(wname, layout text, what it does wrong) for each (wname, rule, replacement, what):
    the preset's text with that one rule replaced; [] after a not-ok line when a rule is not
    in the preset's text (the preset moved under the test)."""
    text = tpshard("layout", "--preset", preset).stdout
    if not all(rule in text for _, rule, _, _ in variants):
        report(False, "the %s preset's rules are where this test replaces them" % preset, text)
        return []
    return [(wname, text.replace(rule, replacement), what) for wname, rule, replacement, what in variants]


def dumped_reference(name, model, cfg, shards, tokens=7, args=()):
    """verify's float64 layer reference of the set alone (--dump-reference: its manifest's
    config keys) and a float64 copy of model: (layers, m64), or (None, None) after a not-ok
    line."""
    dump = os.path.join(os.path.dirname(shards), name + ".ref.json")
    r = tpshard("verify", shards, *args, "--tokens", tokens, "--seed", 3, "--dump-reference", dump, "-q")
    if r.returncode != 0:
        report(False, "%s: verify --dump-reference" % name, r.stdout + r.stderr)
        return None, None
    m64 = type(model)(cfg).double().eval()
    m64.load_state_dict(model.state_dict())
    m64.double()
    with open(dump) as f:
        return json.load(f)["layers"], m64


def layer_error(L, a, m):
    """The worse relative error of a dumped layer's attention and MLP outputs against a and m."""
    return max(float((torch.tensor(L["attention"], dtype=torch.float64) - a).norm() / a.norm()),
               float((torch.tensor(L["mlp"], dtype=torch.float64) - m).norm() / m.norm()))


def features_matter(name, claim, forward_without, want, features):
    """One line that leaving out each feature (forward_without(feature)) misses want."""
    misses = {f: float((forward_without(f) - want).abs().max()) for f in features}
    return report(all(d > 100 * TOL for d in misses.values()), "%s: %s matter (%s)" %
                  (name, claim, ", ".join("without %s: %.2g" % kv for kv in misses.items())))
